/*
 * PATCH application. Merge patch and JSON patch follow their RFCs; the
 * strategic merge patch knows the merge keys of the built-in fields kdet
 * and kubectl apply use (containers by name, env by name, volumes by name,
 * conditions by type, ...), which the real server reads from Go struct tags.
 */
#include "patch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"

/* ---- RFC 7386 ---------------------------------------------------------------- */

static json_t *merge(const json_t *doc, const json_t *patch)
{
    if (!json_is_object(patch))
        return json_deep_copy(patch);
    json_t *out = json_is_object(doc) ? json_deep_copy(doc) : json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)patch, k, v)
    {
        if (json_is_null(v)) {
            json_object_del(out, k);
            continue;
        }
        json_object_set_new(out, k, merge(json_object_get(out, k), v));
    }
    return out;
}

int kd_patch_merge(const json_t *doc, const json_t *patch, json_t **out, char *err)
{
    *out = NULL;
    if (!json_is_object(patch))
        return kd_seterr(err, KD_EINVAL, "a merge patch must be a JSON object");
    *out = merge(doc, patch);
    return 0;
}

/* ---- RFC 6902 ---------------------------------------------------------------- */

/* Decode one JSON pointer token (~1 -> /, ~0 -> ~) into buf. */
static void decode_token(const char *s, size_t n, char *buf, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < len; i++) {
        if (s[i] == '~' && i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1')) {
            buf[o++] = s[i + 1] == '0' ? '~' : '/';
            i++;
        } else {
            buf[o++] = s[i];
        }
    }
    buf[o] = '\0';
}

/* Find the parent container of the pointer's target and the last token. */
static int resolve(json_t *doc, const char *ptr, json_t **parent, char *last, size_t lastlen)
{
    if (ptr[0] != '/')
        return KD_EINVAL;
    json_t *cur = doc;
    const char *p = ptr + 1;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
        char tok[256];
        decode_token(p, n, tok, sizeof(tok));
        if (slash == NULL) {
            *parent = cur;
            kd_strlcpy(last, tok, lastlen);
            return 0;
        }
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            uint64_t idx;
            if (kd_parse_u64(tok, &idx) < 0)
                return KD_EINVAL;
            cur = json_array_get(cur, (size_t)idx);
        } else {
            return KD_ENOTFOUND;
        }
        if (cur == NULL)
            return KD_ENOTFOUND;
        p = slash + 1;
    }
}

static json_t *ptr_get(json_t *doc, const char *ptr)
{
    if (ptr[0] == '\0')
        return doc;
    json_t *parent;
    char last[256];
    if (resolve(doc, ptr, &parent, last, sizeof(last)) != 0)
        return NULL;
    if (json_is_object(parent))
        return json_object_get(parent, last);
    uint64_t idx;
    if (json_is_array(parent) && kd_parse_u64(last, &idx) == 0)
        return json_array_get(parent, (size_t)idx);
    return NULL;
}

static int ptr_remove(json_t *doc, const char *ptr, json_t **removed)
{
    json_t *parent;
    char last[256];
    int rc = resolve(doc, ptr, &parent, last, sizeof(last));
    if (rc != 0)
        return rc;
    if (json_is_object(parent)) {
        json_t *v = json_object_get(parent, last);
        if (v == NULL)
            return KD_ENOTFOUND;
        if (removed != NULL)
            *removed = json_incref(v);
        json_object_del(parent, last);
        return 0;
    }
    uint64_t idx;
    if (json_is_array(parent) && kd_parse_u64(last, &idx) == 0 && idx < json_array_size(parent)) {
        if (removed != NULL)
            *removed = json_incref(json_array_get(parent, (size_t)idx));
        json_array_remove(parent, (size_t)idx);
        return 0;
    }
    return KD_ENOTFOUND;
}

/* add: steals v. */
static int ptr_add(json_t *doc, const char *ptr, json_t *v, bool replace)
{
    json_t *parent;
    char last[256];
    int rc = resolve(doc, ptr, &parent, last, sizeof(last));
    if (rc != 0)
        goto fail;
    if (json_is_object(parent)) {
        if (replace && json_object_get(parent, last) == NULL) {
            rc = KD_ENOTFOUND;
            goto fail;
        }
        json_object_set_new(parent, last, v);
        return 0;
    }
    if (json_is_array(parent)) {
        size_t n = json_array_size(parent);
        uint64_t idx;
        if (!replace && strcmp(last, "-") == 0) {
            json_array_append_new(parent, v);
            return 0;
        }
        if (kd_parse_u64(last, &idx) < 0 || idx > n || (replace && idx == n)) {
            rc = KD_ENOTFOUND;
            goto fail;
        }
        if (replace)
            json_array_set_new(parent, (size_t)idx, v);
        else
            json_array_insert_new(parent, (size_t)idx, v);
        return 0;
    }
    rc = KD_ENOTFOUND;
fail:
    json_decref(v);
    return rc;
}

int kd_patch_json(const json_t *doc, const json_t *ops, json_t **out, char *err)
{
    int rc = 0;
    json_t *d = json_deep_copy(doc);
    size_t copied = 0; /* the bytes "copy" operations added so far */
    *out = NULL;
    if (!json_is_array(ops)) {
        rc = kd_seterr(err, KD_EINVAL, "a JSON patch must be an array of operations");
        goto out;
    }
    if (json_array_size(ops) > KD_PATCH_MAX_OPS) {
        rc = kd_seterr(err, KD_EINVAL,
                       "a JSON patch may have at most %d operations; this one has %zu",
                       KD_PATCH_MAX_OPS, json_array_size(ops));
        goto out;
    }
    size_t i;
    json_t *op;
    json_array_foreach(ops, i, op)
    {
        const char *name = json_string_value(json_object_get(op, "op"));
        const char *path = json_string_value(json_object_get(op, "path"));
        const char *from = json_string_value(json_object_get(op, "from"));
        json_t *value = json_object_get(op, "value");
        if (name == NULL || path == NULL) {
            rc = kd_seterr(err, KD_EINVAL, "operation %zu: \"op\" and \"path\" are required", i);
            goto out;
        }
        int r = 0;
        if (strcmp(name, "add") == 0 || strcmp(name, "replace") == 0) {
            if (value == NULL) {
                rc = kd_seterr(err, KD_EINVAL, "operation %zu (%s %s): \"value\" is required", i,
                               name, path);
                goto out;
            }
            if (path[0] == '\0') {
                json_decref(d);
                d = json_deep_copy(value);
                continue;
            }
            r = ptr_add(d, path, json_deep_copy(value), name[0] == 'r');
        } else if (strcmp(name, "remove") == 0) {
            r = ptr_remove(d, path, NULL);
        } else if (strcmp(name, "move") == 0 || strcmp(name, "copy") == 0) {
            if (from == NULL) {
                rc = kd_seterr(err, KD_EINVAL, "operation %zu (%s): \"from\" is required", i, name);
                goto out;
            }
            json_t *v = NULL;
            if (name[0] == 'm') {
                r = ptr_remove(d, from, &v);
            } else {
                json_t *src = ptr_get(d, from);
                r = src != NULL ? 0 : KD_ENOTFOUND;
                /* Each copy can double the document: the copies together are capped. */
                if (src != NULL &&
                    (copied += json_dumpb(src, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY)) >
                        KD_PATCH_COPY_BYTES) {
                    rc = kd_seterr(err, KD_EINVAL,
                                   "operation %zu (copy %s): the copies of this patch add up to "
                                   "more than %u bytes",
                                   i, from, KD_PATCH_COPY_BYTES);
                    goto out;
                }
                if (src != NULL)
                    v = json_deep_copy(src);
            }
            if (r == 0)
                r = ptr_add(d, path, v, false);
        } else if (strcmp(name, "test") == 0) {
            json_t *cur = ptr_get(d, path);
            if (cur == NULL || value == NULL || !json_equal(cur, value)) {
                rc = kd_seterr(err, KD_EINVAL, "operation %zu: test failed at %s", i, path);
                goto out;
            }
        } else {
            rc = kd_seterr(err, KD_EINVAL, "operation %zu: unknown op \"%s\"", i, name);
            goto out;
        }
        if (r != 0) {
            rc = kd_seterr(err, KD_EINVAL,
                           "operation %zu (%s %s): the path does not exist or is not valid", i,
                           name, path);
            goto out;
        }
    }
    *out = d;
    d = NULL;
out:
    json_decref(d);
    return rc;
}

/* ---- strategic merge patch ----------------------------------------------------- */

/* Merge keys by field name (as the built-in types' patchMergeKey tags give them). */
static const char *merge_key(const char *field, const char *kind, const json_t *items)
{
    static const struct {
        const char *field, *key;
    } keys[] = {
        {"containers", "name"},
        {"initContainers", "name"},
        {"ephemeralContainers", "name"},
        {"env", "name"},
        {"volumes", "name"},
        {"volumeMounts", "mountPath"},
        {"volumeDevices", "devicePath"},
        {"imagePullSecrets", "name"},
        {"hostAliases", "ip"},
        {"conditions", "type"},
        {"addresses", "type"},
        {"ownerReferences", "uid"},
        {"resourceClaims", "name"},
        {"topologySpreadConstraints", "topologyKey"},
    };
    if (strcmp(field, "ports") == 0) {
        if (kind != NULL && strcmp(kind, "Service") == 0)
            return "port";
        const json_t *first = json_array_get(items, 0);
        if (json_object_get(first, "port") != NULL &&
            json_object_get(first, "containerPort") == NULL)
            return "port";
        return "containerPort";
    }
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (strcmp(field, keys[i].field) == 0)
            return keys[i].key;
    }
    return NULL;
}

/* Primitive lists with patchStrategy "merge" (union). */
static bool merge_primitive(const char *field)
{
    return strcmp(field, "finalizers") == 0;
}

static json_t *smp(const json_t *doc, const json_t *patch, const char *kind);

static long find_keyed(const json_t *arr, const char *key, const json_t *val)
{
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it)
    {
        if (json_equal(json_object_get(it, key), val))
            return (long)i;
    }
    return -1;
}

static json_t *smp_list(const json_t *cur, const json_t *patch, const char *field, const char *kind)
{
    const char *key =
        merge_key(field, kind, json_is_array(cur) && json_array_size(cur) > 0 ? cur : patch);
    if (key != NULL) {
        json_t *out = json_is_array(cur) ? json_deep_copy(cur) : json_array();
        size_t i;
        json_t *it;
        /* A {"$patch": "replace"} element replaces the whole list. */
        json_array_foreach(patch, i, it)
        {
            const char *d = json_string_value(json_object_get(it, "$patch"));
            if (d != NULL && strcmp(d, "replace") == 0) {
                json_decref(out);
                out = json_array();
                break;
            }
        }
        json_array_foreach(patch, i, it)
        {
            if (!json_is_object(it))
                continue;
            const char *d = json_string_value(json_object_get(it, "$patch"));
            json_t *kv = json_object_get(it, key);
            if (d != NULL && strcmp(d, "replace") == 0 && kv == NULL)
                continue;
            long at = kv != NULL ? find_keyed(out, key, kv) : -1;
            if (d != NULL && strcmp(d, "delete") == 0) {
                if (at >= 0)
                    json_array_remove(out, (size_t)at);
                continue;
            }
            json_t *copy = json_deep_copy(it);
            json_object_del(copy, "$patch");
            if (at >= 0) {
                json_t *m = smp(json_array_get(out, (size_t)at), copy, kind);
                json_array_set_new(out, (size_t)at, m);
                json_decref(copy);
            } else {
                json_t *m = smp(NULL, copy, kind);
                json_array_append_new(out, m);
                json_decref(copy);
            }
        }
        return out;
    }
    if (merge_primitive(field)) {
        json_t *out = json_is_array(cur) ? json_deep_copy(cur) : json_array();
        size_t i, j;
        json_t *it, *ex;
        json_array_foreach(patch, i, it)
        {
            bool seen = false;
            json_array_foreach(out, j, ex) seen = seen || json_equal(ex, it);
            if (!seen)
                json_array_append(out, it);
        }
        return out;
    }
    return json_deep_copy(patch);
}

static void delete_primitives(json_t *list, const json_t *gone)
{
    size_t i, j;
    json_t *g;
    json_array_foreach(gone, i, g)
    {
        for (j = 0; j < json_array_size(list);) {
            if (json_equal(json_array_get(list, j), g))
                json_array_remove(list, j);
            else
                j++;
        }
    }
}

/* Reorder a list so the elements named in `order` come in that order. */
static void set_order(json_t *list, const json_t *order, const char *key)
{
    json_t *sorted = json_array();
    size_t i;
    json_t *o;
    json_array_foreach(order, i, o)
    {
        const json_t *want = key != NULL ? json_object_get(o, key) : o;
        for (size_t j = 0; j < json_array_size(list); j++) {
            json_t *it = json_array_get(list, j);
            const json_t *have = key != NULL ? json_object_get(it, key) : it;
            if (want != NULL && have != NULL && json_equal(want, have)) {
                json_array_append(sorted, it);
                json_array_remove(list, j);
                break;
            }
        }
    }
    json_array_extend(sorted, list);
    json_array_clear(list);
    json_array_extend(list, sorted);
    json_decref(sorted);
}

static json_t *smp(const json_t *doc, const json_t *patch, const char *kind)
{
    if (!json_is_object(patch))
        return json_deep_copy(patch);
    const char *directive = json_string_value(json_object_get(patch, "$patch"));
    if (directive != NULL && strcmp(directive, "replace") == 0) {
        json_t *out = json_deep_copy(patch);
        json_object_del(out, "$patch");
        return out;
    }
    if (directive != NULL && strcmp(directive, "delete") == 0)
        return json_null();
    json_t *out = json_is_object(doc) ? json_deep_copy(doc) : json_object();
    const json_t *retain = json_object_get(patch, "$retainKeys");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)patch, k, v)
    {
        if (k[0] == '$')
            continue;
        if (json_is_null(v)) {
            json_object_del(out, k);
            continue;
        }
        json_t *cur = json_object_get(out, k);
        json_t *merged;
        if (json_is_array(v))
            merged = smp_list(cur, v, k, kind);
        else if (json_is_object(v))
            merged = smp(cur, v, kind);
        else
            merged = json_deep_copy(v);
        if (json_is_null(merged)) {
            json_decref(merged);
            json_object_del(out, k);
        } else {
            json_object_set_new(out, k, merged);
        }
    }
    /* Directives that name a field after a slash. */
    json_object_foreach((json_t *)patch, k, v)
    {
        if (kd_str_has_prefix(k, "$deleteFromPrimitiveList/")) {
            json_t *list = json_object_get(out, k + strlen("$deleteFromPrimitiveList/"));
            if (json_is_array(list))
                delete_primitives(list, v);
        } else if (kd_str_has_prefix(k, "$setElementOrder/")) {
            const char *field = k + strlen("$setElementOrder/");
            json_t *list = json_object_get(out, field);
            if (json_is_array(list) && json_is_array(v))
                set_order(list, v, merge_key(field, kind, list));
        }
    }
    if (json_is_array(retain)) {
        const char *key;
        json_t *val;
        void *tmp;
        json_object_foreach_safe(out, tmp, key, val)
        {
            bool keep = false;
            size_t i;
            json_t *r;
            json_array_foreach(retain, i, r) keep = keep || strcmp(json_string_value(r), key) == 0;
            if (!keep)
                json_object_del(out, key);
        }
    }
    return out;
}

int kd_patch_strategic(const json_t *doc, const json_t *patch, const char *kind, json_t **out,
                       char *err)
{
    *out = NULL;
    if (!json_is_object(patch))
        return kd_seterr(err, KD_EINVAL, "a strategic merge patch must be a JSON object");
    *out = smp(doc, patch, kind);
    return 0;
}
