/*
 * Status objects, names, presentation and request bodies: the small pieces every verb of
 * kdet-local's API server answers with (apiint.h).
 */
#include "apiint.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "events.h"
#include "http/http.h"
#include "kubelet.h"
#include "logstream.h"
#include "logproxy.h"
#include "openapi/openapi.h"
#include "validate.h"
#include "patch.h"
#include "proto.h"
#include "registry.h"
#include "scheduler.h"
#include "selector.h"
#include "table.h"
#include "store.h"

/* ---- small helpers -------------------------------------------------------------------- */

json_t *kd_api__meta(json_t *obj)
{
    json_t *m = json_object_get(obj, "metadata");
    if (!json_is_object(m)) {
        m = json_object();
        json_object_set_new(obj, "metadata", m);
    }
    return m;
}

void kd_api__now_rfc3339(char *buf, size_t len)
{
    kd_time_rfc3339(kd_wall_ms(), 0, buf, len);
}

void kd_api__new_uid(char *buf, size_t len)
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        int64_t t = kd_mono_ns();
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (unsigned char)(t >> (i % 8 * 8)) ^ (unsigned char)(i * 37);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(buf, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

void kd_api__random_suffix(char *buf, size_t n)
{
    /* The alphabet the API server uses for generateName (no vowels, no look-alikes). */
    static const char alpha[] = "bcdfghjklmnpqrstvwxz2456789";
    unsigned char b[16];
    if (n > sizeof(b))
        n = sizeof(b);
    if (getrandom(b, n, 0) != (ssize_t)n)
        memset(b, 7, n);
    for (size_t i = 0; i < n; i++)
        buf[i] = alpha[b[i] % (sizeof(alpha) - 1)];
    buf[n] = '\0';
}

/* "configmaps" or "experiments.kdet.io": how messages name a resource. */
void kd_api__qualified(const struct kd_restype *rt, char *buf, size_t len)
{
    if (rt->group[0] == '\0')
        snprintf(buf, len, "%s", rt->resource);
    else
        snprintf(buf, len, "%s.%s", rt->resource, rt->group);
}

/* ---- Status objects ------------------------------------------------------------------- */

json_t *kd_api__status_new(int code, const char *reason, const char *message, json_t *details)
{
    /* Messages quote what the request sent, which need not be UTF-8; JSON text must be. */
    char msg[2048];
    kd_utf8_scrub(message != NULL ? message : "", msg, sizeof(msg));
    json_t *s = json_pack("{s:s,s:s,s:{},s:s,s:s,s:s,s:i}", "kind", "Status", "apiVersion", "v1",
                          "metadata", "status", code < 400 ? "Success" : "Failure", "message", msg,
                          "reason", reason, "code", code);
    if (reason[0] == '\0')
        json_object_del(s, "reason");
    if (details != NULL)
        json_object_set_new(s, "details", details);
    return s;
}

json_t *kd_api__details_for(const struct kd_restype *rt, const char *name, const char *kind)
{
    json_t *d = json_object();
    if (name != NULL)
        json_object_set_new(d, "name", json_string(name));
    if (rt != NULL && rt->group[0] != '\0')
        json_object_set_new(d, "group", json_string(rt->group));
    if (kind != NULL)
        json_object_set_new(d, "kind", json_string(kind));
    return d;
}

void kd_api__respond_status(struct kd_http_req *r, int code, const char *reason,
                            const char *message, json_t *details)
{
    json_t *s = kd_api__status_new(code, reason, message, details);
    kd_http_respond_json(r, code, s);
    json_decref(s);
}

void kd_api__bad_request(struct kd_http_req *r, const char *message)
{
    kd_api__respond_status(r, 400, "BadRequest", message, NULL);
}

void kd_api__not_found(struct kd_http_req *r, const struct kd_restype *rt, const char *name)
{
    char q[256], msg[600];
    kd_api__qualified(rt, q, sizeof(q));
    snprintf(msg, sizeof(msg), "%s \"%s\" not found", q, name);
    kd_api__respond_status(r, 404, "NotFound", msg, kd_api__details_for(rt, name, rt->resource));
}

void kd_api__conflict(struct kd_http_req *r, const struct kd_restype *rt, const char *name)
{
    char q[256], msg[800];
    kd_api__qualified(rt, q, sizeof(q));
    snprintf(msg, sizeof(msg),
             "Operation cannot be fulfilled on %s \"%s\": the object has been modified; please "
             "apply your changes to the latest version and try again",
             q, name);
    kd_api__respond_status(r, 409, "Conflict", msg, kd_api__details_for(rt, name, rt->resource));
}

/* 422 Invalid with causes (stolen): "Kind "name" is invalid: field: message". */
void kd_api__invalid(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                     json_t *causes)
{
    struct kd_buf b = KD_BUF_INIT(1 << 16);
    int rc = kd_buf_printf(&b, "%s \"%s\" is invalid: ", rt->kind, name != NULL ? name : "");
    size_t n = json_array_size(causes);
    if (n > 1)
        rc = rc ? rc : kd_buf_putc(&b, '[');
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c)
    {
        rc = rc ? rc
                : kd_buf_printf(&b, "%s%s: %s", i > 0 ? ", " : "", kd_jstr(c, "field"),
                                kd_jstr(c, "message"));
    }
    if (n > 1)
        rc = rc ? rc : kd_buf_putc(&b, ']');
    json_t *d = kd_api__details_for(rt, name, rt->kind);
    json_object_set_new(d, "causes", causes);
    kd_api__respond_status(r, 422, "Invalid", kd_buf_str(&b), d);
    kd_buf_free(&b);
}

json_t *kd_api__cause(const char *reason, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return json_pack("{s:s,s:s,s:s}", "reason", reason, "message", msg, "field", field);
}

/* ---- name validation ------------------------------------------------------------------ */

static bool dns_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    const char *p = s;
    while (*p != '\0') {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        char part[254];
        memcpy(part, p, len);
        part[len] = '\0';
        if (!kd_local_dns_name_part(part, 253, false))
            return false;
        if (dot == NULL)
            break;
        p = dot + 1;
        if (*p == '\0')
            return false;
    }
    return true;
}

/* NULL when valid; otherwise a cause for metadata.name. */
json_t *kd_api__check_name(enum kd_name_rule rule, const char *name)
{
    if (rule == KD_NAME_LABEL) {
        if (!kd_local_dns_label(name))
            return kd_api__cause(
                "FieldValueInvalid", "metadata.name",
                "Invalid value: \"%s\": a lowercase RFC 1123 label must consist of lower "
                "case alphanumeric characters or '-', and must start and end with an "
                "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                name);
        return NULL;
    }
    if (rule == KD_NAME_DNS1035) {
        if (!kd_local_dns_name_part(name, 63, true))
            return kd_api__cause(
                "FieldValueInvalid", "metadata.name",
                "Invalid value: \"%s\": a DNS-1035 label must consist of lower case "
                "alphanumeric characters or '-', start with an alphabetic character, and "
                "end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex "
                "used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                name);
        return NULL;
    }
    if (!dns_subdomain(name))
        return kd_api__cause(
            "FieldValueInvalid", "metadata.name",
            "Invalid value: \"%s\": a lowercase RFC 1123 subdomain must consist of lower "
            "case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            name);
    return NULL;
}

/* ---- object presentation --------------------------------------------------------------- */

/* A reference (new) to obj as served through rt's version. */
json_t *kd_api__present(const struct kd_restype *rt, json_t *obj)
{
    char av[256];
    kd_restype_api_version(rt, av, sizeof(av));
    const char *have = kd_jstr(obj, "apiVersion");
    const char *kind = kd_jstr(obj, "kind");
    if (have != NULL && strcmp(have, av) == 0 && kind != NULL)
        return json_incref(obj);
    json_t *c = json_copy(obj);
    json_object_set_new(c, "apiVersion", json_string(av));
    json_object_set_new(c, "kind", json_string(rt->kind));
    return c;
}

void kd_api__set_kind(const struct kd_restype *rt, json_t *obj)
{
    char av[256];
    json_object_set_new(obj, "apiVersion", json_string(kd_restype_api_version(rt, av, sizeof(av))));
    json_object_set_new(obj, "kind", json_string(rt->kind));
}

/* ---- body parsing ------------------------------------------------------------------------ */

/* Parse the body as a JSON object; on failure a 400 has been sent and NULL returned. */
json_t *kd_api__body_object(struct kd_http_req *r)
{
    const char *ct = kd_http_header(r, "Content-Type");
    if (ct != NULL && strstr(ct, "protobuf") != NULL) {
        size_t plen;
        const char *pb = kd_http_body(r, &plen);
        char err[KD_ERRLEN] = "";
        json_t *j = NULL;
        int rc = kd_proto_decode(pb, plen, &j, err);
        if (rc == KD_ENOTSUP)
            kd_api__respond_status(r, 415, "UnsupportedMediaType", err, NULL);
        else if (rc != 0)
            kd_api__bad_request(r, err);
        return j;
    }
    if (ct != NULL && (strstr(ct, "cbor") != NULL || strstr(ct, "yaml") != NULL)) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json, application/merge-patch+json, "
                 "application/json-patch+json, application/strategic-merge-patch+json (got %.100s)",
                 ct);
        kd_api__respond_status(r, 415, "UnsupportedMediaType", msg, NULL);
        return NULL;
    }
    size_t len;
    const char *body = kd_http_body(r, &len);
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    if (j == NULL) {
        char msg[400];
        snprintf(msg, sizeof(msg), "the request body is not valid JSON: line %d column %d: %s",
                 jerr.line, jerr.column, jerr.text);
        kd_api__bad_request(r, msg);
        return NULL;
    }
    if (!json_is_object(j) && !json_is_array(j)) {
        json_decref(j);
        kd_api__bad_request(r, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

bool kd_api__dry_run(struct kd_http_req *r)
{
    const char *d = kd_http_query(r, "dryRun");
    return d != NULL && strcmp(d, "All") == 0;
}
