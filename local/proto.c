/*
 * A table-driven protobuf wire decoder for the handful of Kubernetes types
 * kubectl sends as protobuf. Hand-written because no Debian C protobuf
 * library carries the Kubernetes schemas, and the subset needed (varints,
 * length-delimited fields, maps) is small.
 */
#include "proto.h"

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#define MAX_DEPTH 8

enum ftype {
    F_STRING,
    F_BYTES,
    F_BOOL,
    F_INT,
    F_MSG,
    F_MAP_SS,
    F_MAP_SB,
    F_REP_STRING,
    F_REP_MSG,
    F_TIME
};

struct field {
    unsigned num;
    const char *name;
    enum ftype type;
    const struct field *sub; /* F_MSG, F_REP_MSG */
};

static const struct field owner_ref[] = {
    {1, "kind", F_STRING, NULL},     {3, "name", F_STRING, NULL},
    {4, "uid", F_STRING, NULL},      {5, "apiVersion", F_STRING, NULL},
    {6, "controller", F_BOOL, NULL}, {7, "blockOwnerDeletion", F_BOOL, NULL},
    {0, NULL, F_STRING, NULL}};

static const struct field object_meta[] = {{1, "name", F_STRING, NULL},
                                           {2, "generateName", F_STRING, NULL},
                                           {3, "namespace", F_STRING, NULL},
                                           {5, "uid", F_STRING, NULL},
                                           {6, "resourceVersion", F_STRING, NULL},
                                           {7, "generation", F_INT, NULL},
                                           {8, "creationTimestamp", F_TIME, NULL},
                                           {11, "labels", F_MAP_SS, NULL},
                                           {12, "annotations", F_MAP_SS, NULL},
                                           {13, "ownerReferences", F_REP_MSG, owner_ref},
                                           {14, "finalizers", F_REP_STRING, NULL},
                                           {0, NULL, F_STRING, NULL}};

static const struct field configmap[] = {{1, "metadata", F_MSG, object_meta},
                                         {2, "data", F_MAP_SS, NULL},
                                         {3, "binaryData", F_MAP_SB, NULL},
                                         {4, "immutable", F_BOOL, NULL},
                                         {0, NULL, F_STRING, NULL}};

static const struct field secret[] = {
    {1, "metadata", F_MSG, object_meta}, {2, "data", F_MAP_SB, NULL},
    {3, "type", F_STRING, NULL},         {4, "stringData", F_MAP_SS, NULL},
    {5, "immutable", F_BOOL, NULL},      {0, NULL, F_STRING, NULL}};

static const struct field ns_spec[] = {{1, "finalizers", F_REP_STRING, NULL},
                                       {0, NULL, F_STRING, NULL}};

static const struct field ns[] = {
    {1, "metadata", F_MSG, object_meta}, {2, "spec", F_MSG, ns_spec}, {0, NULL, F_STRING, NULL}};

static const struct field priorityclass[] = {
    {1, "metadata", F_MSG, object_meta},     {2, "value", F_INT, NULL},
    {3, "globalDefault", F_BOOL, NULL},      {4, "description", F_STRING, NULL},
    {5, "preemptionPolicy", F_STRING, NULL}, {0, NULL, F_STRING, NULL}};

static const struct field type_meta[] = {
    {1, "apiVersion", F_STRING, NULL}, {2, "kind", F_STRING, NULL}, {0, NULL, F_STRING, NULL}};

struct rd {
    const uint8_t *p, *end, *start;
};

static int varint(struct rd *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return KD_EPARSE;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *v = x;
            return 0;
        }
    }
    return KD_EPARSE;
}

/* A length-delimited payload: sets *p and *n. */
static int bytes(struct rd *r, const uint8_t **p, size_t *n)
{
    uint64_t len;
    if (varint(r, &len) != 0 || len > (uint64_t)(r->end - r->p))
        return KD_EPARSE;
    *p = r->p;
    *n = (size_t)len;
    r->p += len;
    return 0;
}

static int skip(struct rd *r, unsigned wt)
{
    uint64_t v;
    const uint8_t *p;
    size_t n;
    switch (wt) {
    case 0: return varint(r, &v);
    case 1:
        if (r->end - r->p < 8)
            return KD_EPARSE;
        r->p += 8;
        return 0;
    case 2: return bytes(r, &p, &n);
    case 5:
        if (r->end - r->p < 4)
            return KD_EPARSE;
        r->p += 4;
        return 0;
    default: return KD_EPARSE;
    }
}

static json_t *b64(const uint8_t *p, size_t n)
{
    char *enc = kd_xmalloc(4 * ((n + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)enc, p, (int)n);
    json_t *s = json_string(enc);
    free(enc);
    return s;
}

static int decode(const uint8_t *p, size_t n, const struct field *schema, json_t *obj, int depth);

/* A map entry {1: key, 2: value}. */
static int map_entry(const uint8_t *p, size_t n, bool binary, json_t *map)
{
    struct rd r = {p, p + n, p};
    const uint8_t *k = NULL, *v = (const uint8_t *)"";
    size_t kn = 0, vn = 0;
    while (r.p < r.end) {
        uint64_t key;
        if (varint(&r, &key) != 0)
            return KD_EPARSE;
        unsigned num = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
        if (wt == 2 && num == 1) {
            if (bytes(&r, &k, &kn) != 0)
                return KD_EPARSE;
        } else if (wt == 2 && num == 2) {
            if (bytes(&r, &v, &vn) != 0)
                return KD_EPARSE;
        } else if (skip(&r, wt) != 0) {
            return KD_EPARSE;
        }
    }
    if (k == NULL)
        return KD_EPARSE;
    char *ks = kd_xstrndup((const char *)k, kn);
    json_object_set_new(map, ks, binary ? b64(v, vn) : json_stringn((const char *)v, vn));
    free(ks);
    return 0;
}

static json_t *child(json_t *obj, const char *name, bool array)
{
    json_t *c = json_object_get(obj, name);
    if (c == NULL) {
        c = array ? json_array() : json_object();
        json_object_set_new(obj, name, c);
    }
    return c;
}

static int decode(const uint8_t *p, size_t n, const struct field *schema, json_t *obj, int depth)
{
    struct rd r = {p, p + n, p};
    if (depth > MAX_DEPTH)
        return KD_EPARSE;
    while (r.p < r.end) {
        uint64_t key, v = 0;
        if (varint(&r, &key) != 0)
            return KD_EPARSE;
        unsigned num = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
        const struct field *f = NULL;
        for (const struct field *x = schema; x->name != NULL; x++) {
            if (x->num == num)
                f = x;
        }
        if (f == NULL) {
            if (skip(&r, wt) != 0)
                return KD_EPARSE;
            continue;
        }
        const uint8_t *bp = NULL;
        size_t bn = 0;
        if (wt == 0) {
            if (varint(&r, &v) != 0)
                return KD_EPARSE;
        } else if (wt == 2) {
            if (bytes(&r, &bp, &bn) != 0)
                return KD_EPARSE;
        } else if (skip(&r, wt) != 0) {
            return KD_EPARSE;
        }
        int rc = 0;
        switch (f->type) {
        /* Empty scalars are what Go's omitempty leaves out of the JSON form. */
        case F_STRING:
            if (bp != NULL && bn > 0)
                json_object_set_new(obj, f->name, json_stringn((const char *)bp, bn));
            break;
        case F_BYTES:
            if (bp != NULL)
                json_object_set_new(obj, f->name, b64(bp, bn));
            break;
        case F_BOOL:
            if (v != 0)
                json_object_set_new(obj, f->name, json_true());
            break;
        case F_INT:
            if (v != 0)
                json_object_set_new(obj, f->name, json_integer((json_int_t)(int64_t)v));
            break;
        case F_TIME: break; /* server-set; ignored on create */
        case F_MSG:
            if (bp != NULL)
                rc = decode(bp, bn, f->sub, child(obj, f->name, false), depth + 1);
            break;
        case F_REP_MSG:
            if (bp != NULL) {
                json_t *item = json_object();
                rc = decode(bp, bn, f->sub, item, depth + 1);
                json_array_append_new(child(obj, f->name, true), item);
            }
            break;
        case F_REP_STRING:
            if (bp != NULL)
                json_array_append_new(child(obj, f->name, true),
                                      json_stringn((const char *)bp, bn));
            break;
        case F_MAP_SS:
        case F_MAP_SB:
            if (bp != NULL)
                rc = map_entry(bp, bn, f->type == F_MAP_SB, child(obj, f->name, false));
            break;
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

int kd_proto_decode(const void *data, size_t len, json_t **out, char *err)
{
    int rc = 0;
    json_t *tm = json_object(), *obj = NULL;
    const uint8_t *p = data;
    *out = NULL;
    if (len < 4 || memcmp(p, "k8s\0", 4) != 0) {
        rc = kd_seterr(err, KD_EPARSE, "protobuf body: the \"k8s\\0\" prefix is missing");
        goto out;
    }
    /* runtime.Unknown: 1 typeMeta, 2 raw, 3 contentEncoding, 4 contentType */
    struct rd r = {p + 4, p + len, p};
    const uint8_t *raw = NULL;
    size_t rawn = 0;
    while (r.p < r.end) {
        uint64_t key;
        const uint8_t *bp;
        size_t bn;
        if (varint(&r, &key) != 0 || (key & 7) != 2 || bytes(&r, &bp, &bn) != 0) {
            rc = kd_seterr(err, KD_EPARSE, "protobuf body: bad envelope at byte %zu",
                           (size_t)(r.p - p));
            goto out;
        }
        if ((key >> 3) == 1 && decode(bp, bn, type_meta, tm, 0) != 0) {
            rc = kd_seterr(err, KD_EPARSE, "protobuf body: bad typeMeta");
            goto out;
        }
        if ((key >> 3) == 2) {
            raw = bp;
            rawn = bn;
        }
    }
    const char *kind = json_string_value(json_object_get(tm, "kind"));
    const char *av = json_string_value(json_object_get(tm, "apiVersion"));
    const struct field *schema = NULL;
    if (kind != NULL && strcmp(kind, "ConfigMap") == 0)
        schema = configmap;
    else if (kind != NULL && strcmp(kind, "Secret") == 0)
        schema = secret;
    else if (kind != NULL && strcmp(kind, "Namespace") == 0)
        schema = ns;
    else if (kind != NULL && strcmp(kind, "PriorityClass") == 0)
        schema = priorityclass;
    if (schema == NULL) {
        rc = kd_seterr(err, KD_ENOTSUP,
                       "kdet-local reads protobuf only for ConfigMap, Secret, Namespace and "
                       "PriorityClass, not %s: send JSON (kubectl create -f / apply -f)",
                       kind != NULL ? kind : "(no kind)");
        goto out;
    }
    obj = json_pack("{s:s,s:s}", "apiVersion", av != NULL ? av : "v1", "kind", kind);
    if (raw == NULL || decode(raw, rawn, schema, obj, 0) != 0) {
        rc = kd_seterr(err, KD_EPARSE, "protobuf body: the %s could not be decoded", kind);
        goto out;
    }
    *out = obj;
    obj = NULL;
out:
    json_decref(obj);
    json_decref(tm);
    return rc;
}
