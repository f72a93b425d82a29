/*
 * Request handling for kdet-local's API server: URL routing, discovery,
 * create/get/list/watch/update/patch/delete with the real API server's
 * semantics (resourceVersion preconditions, generation, status
 * subresource, finalizers, Status errors), CRD registration, and the
 * garbage collector for ownerReferences and namespace deletion.
 */
#include "api.h"

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

#define MAX_SEGS 12
#define MAX_WATCH_BUF (256u << 20)
#define DEFAULT_WATCH_TIMEOUT_S 1800
#define K8S_VERSION_MINOR "32"
#define LIST_RV_WAIT_MS 3000 /* kube-apiserver waits about 3 s for a future resourceVersion */

struct kd_api {
    struct kd_store *st;
    struct kd_registry *reg;
    struct kd_http_server *http;
    char *token;
    char *state_dir;
    int bookmark_ms;
    int gc_ms;
    pthread_t gc;
    bool gc_started;
    atomic_bool stop;
};

/* A parsed resource URL. */
struct target {
    struct kd_restype *rt;
    const char *ns;   /* NULL: cluster-scoped or all namespaces */
    const char *name; /* NULL: the collection */
    const char *sub;  /* "status", "log", "binding" or NULL */
    bool watch_path;  /* the legacy /watch/ prefix */
};

/* ---- small helpers -------------------------------------------------------------------- */

static const char *jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static json_t *meta(json_t *obj)
{
    json_t *m = json_object_get(obj, "metadata");
    if (!json_is_object(m)) {
        m = json_object();
        json_object_set_new(obj, "metadata", m);
    }
    return m;
}

static void now_rfc3339(char *buf, size_t len)
{
    kd_time_rfc3339(kd_wall_ms(), 0, buf, len);
}

static void new_uid(char *buf, size_t len)
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

static void random_suffix(char *buf, size_t n)
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
static void qualified(const struct kd_restype *rt, char *buf, size_t len)
{
    if (rt->group[0] == '\0')
        snprintf(buf, len, "%s", rt->resource);
    else
        snprintf(buf, len, "%s.%s", rt->resource, rt->group);
}

/* ---- Status objects ------------------------------------------------------------------- */

static json_t *status_new(int code, const char *reason, const char *message, json_t *details)
{
    json_t *s = json_pack("{s:s,s:s,s:{},s:s,s:s,s:s,s:i}", "kind", "Status", "apiVersion", "v1",
                          "metadata", "status", code < 400 ? "Success" : "Failure", "message",
                          message, "reason", reason, "code", code);
    if (reason[0] == '\0')
        json_object_del(s, "reason");
    if (details != NULL)
        json_object_set_new(s, "details", details);
    return s;
}

static json_t *details_for(const struct kd_restype *rt, const char *name, const char *kind)
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

static void respond_status(struct kd_http_req *r, int code, const char *reason, const char *message,
                           json_t *details)
{
    json_t *s = status_new(code, reason, message, details);
    kd_http_respond_json(r, code, s);
    json_decref(s);
}

static void bad_request(struct kd_http_req *r, const char *message)
{
    respond_status(r, 400, "BadRequest", message, NULL);
}

static void not_found(struct kd_http_req *r, const struct kd_restype *rt, const char *name)
{
    char q[256], msg[600];
    qualified(rt, q, sizeof(q));
    snprintf(msg, sizeof(msg), "%s \"%s\" not found", q, name);
    respond_status(r, 404, "NotFound", msg, details_for(rt, name, rt->resource));
}

static void conflict(struct kd_http_req *r, const struct kd_restype *rt, const char *name)
{
    char q[256], msg[800];
    qualified(rt, q, sizeof(q));
    snprintf(msg, sizeof(msg),
             "Operation cannot be fulfilled on %s \"%s\": the object has been modified; please "
             "apply your changes to the latest version and try again",
             q, name);
    respond_status(r, 409, "Conflict", msg, details_for(rt, name, rt->resource));
}

/* 422 Invalid with causes (stolen): "Kind "name" is invalid: field: message". */
static void invalid(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
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
                : kd_buf_printf(&b, "%s%s: %s", i > 0 ? ", " : "", jstr(c, "field"),
                                jstr(c, "message"));
    }
    if (n > 1)
        rc = rc ? rc : kd_buf_putc(&b, ']');
    json_t *d = details_for(rt, name, rt->kind);
    json_object_set_new(d, "causes", causes);
    respond_status(r, 422, "Invalid", kd_buf_str(&b), d);
    kd_buf_free(&b);
}

static json_t *cause(const char *reason, const char *field, const char *fmt, ...) KD_PRINTF(3, 4);
static json_t *cause(const char *reason, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return json_pack("{s:s,s:s,s:s}", "reason", reason, "message", msg, "field", field);
}

/* ---- name validation ------------------------------------------------------------------ */

static bool dns_label(const char *s, size_t max, bool letter_first)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-')
            return false;
        if ((i == 0 || i == n - 1) && c == '-')
            return false;
    }
    if (letter_first && !(s[0] >= 'a' && s[0] <= 'z'))
        return false;
    return true;
}

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
        if (!dns_label(part, 253, false))
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
static json_t *check_name(const struct kd_restype *rt, const char *name)
{
    if (strcmp(rt->resource, "namespaces") == 0) {
        if (!dns_label(name, 63, false))
            return cause("FieldValueInvalid", "metadata.name",
                         "Invalid value: \"%s\": a lowercase RFC 1123 label must consist of lower "
                         "case alphanumeric characters or '-', and must start and end with an "
                         "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                         "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                         name);
        return NULL;
    }
    if (strcmp(rt->resource, "services") == 0) {
        if (!dns_label(name, 63, true))
            return cause("FieldValueInvalid", "metadata.name",
                         "Invalid value: \"%s\": a DNS-1035 label must consist of lower case "
                         "alphanumeric characters or '-', start with an alphabetic character, and "
                         "end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex "
                         "used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                         name);
        return NULL;
    }
    if (!dns_subdomain(name))
        return cause("FieldValueInvalid", "metadata.name",
                     "Invalid value: \"%s\": a lowercase RFC 1123 subdomain must consist of lower "
                     "case alphanumeric characters, '-' or '.', and must start and end with an "
                     "alphanumeric character (e.g. 'example.com', regex used for validation is "
                     "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                     name);
    return NULL;
}

/* ---- object presentation --------------------------------------------------------------- */

/* A reference (new) to obj as served through rt's version. */
static json_t *present(const struct kd_restype *rt, json_t *obj)
{
    char av[256];
    kd_restype_api_version(rt, av, sizeof(av));
    const char *have = jstr(obj, "apiVersion");
    const char *kind = jstr(obj, "kind");
    if (have != NULL && strcmp(have, av) == 0 && kind != NULL)
        return json_incref(obj);
    json_t *c = json_copy(obj);
    json_object_set_new(c, "apiVersion", json_string(av));
    json_object_set_new(c, "kind", json_string(rt->kind));
    return c;
}

static void set_kind(const struct kd_restype *rt, json_t *obj)
{
    char av[256];
    json_object_set_new(obj, "apiVersion", json_string(kd_restype_api_version(rt, av, sizeof(av))));
    json_object_set_new(obj, "kind", json_string(rt->kind));
}

/* ---- routing ---------------------------------------------------------------------------- */

static size_t split(struct kd_http_req *r, const char *path, char **segs, size_t max)
{
    char *p = kd_http_strdup(r, path);
    size_t n = 0;
    while (*p != '\0' && n < max) {
        while (*p == '/')
            p++;
        if (*p == '\0')
            break;
        segs[n++] = p;
        char *slash = strchr(p, '/');
        if (slash == NULL)
            break;
        *slash = '\0';
        p = slash + 1;
    }
    return n;
}

static bool is_true(const char *v)
{
    return v != NULL && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
}

/* Resolve segments after /api/v1 or /apis/G/V into a target. 0, or 404 already sent. */
static int resolve_target(struct kd_api *api, struct kd_http_req *r, const char *group,
                          const char *version, char **s, size_t n, struct target *t)
{
    memset(t, 0, sizeof(*t));
    if (n > 0 && strcmp(s[0], "watch") == 0) {
        t->watch_path = true;
        s++;
        n--;
    }
    if (n == 0)
        return KD_ENOTFOUND;
    kd_store_lock(api->st);
    if (n >= 3 && strcmp(s[0], "namespaces") == 0) {
        struct kd_restype *rt = kd_registry_find(api->reg, group, version, s[2]);
        if (rt != NULL && rt->namespaced) {
            t->rt = rt;
            t->ns = s[1];
            t->name = n > 3 ? s[3] : NULL;
            t->sub = n > 4 ? s[4] : NULL;
            if (n > 5)
                t->rt = NULL;
        }
    }
    if (t->rt == NULL && t->ns == NULL) {
        struct kd_restype *rt = kd_registry_find(api->reg, group, version, s[0]);
        if (rt != NULL && n <= 3) {
            t->rt = rt;
            t->name = n > 1 ? s[1] : NULL;
            t->sub = n > 2 ? s[2] : NULL;
            /* A namespaced kind addressed by name needs its namespace. */
            if (rt->namespaced && t->name != NULL)
                t->rt = NULL;
        }
    }
    kd_store_unlock(api->st);
    (void)r;
    return t->rt != NULL ? 0 : KD_ENOTFOUND;
}

/* ---- discovery ----------------------------------------------------------------------- */

static void serve_version(struct kd_http_req *r)
{
    json_t *v =
        json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "major", "1", "minor", K8S_VERSION_MINOR,
                  "gitVersion", "v1." K8S_VERSION_MINOR ".0-kdet-local", "gitCommit", "",
                  "gitTreeState", "clean", "buildDate", "2026-11-21T00:00:00Z", "goVersion", "",
                  "compiler", "gcc", "platform", "linux/amd64");
    kd_http_respond_json(r, 200, v);
    json_decref(v);
}

static void serve_discovery(struct kd_api *api, struct kd_http_req *r, char **s, size_t n)
{
    json_t *doc = NULL;
    kd_store_lock(api->st);
    if (strcmp(s[0], "api") == 0 && n == 1) {
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", kd_http_port(api->http));
        doc = json_pack("{s:s,s:[s],s:[{s:s,s:s}]}", "kind", "APIVersions", "versions", "v1",
                        "serverAddressByClientCIDRs", "clientCIDR", "0.0.0.0/0", "serverAddress",
                        addr);
    } else if (strcmp(s[0], "api") == 0 && n == 2) {
        doc = kd_registry_resource_list(api->reg, "", s[1]);
    } else if (strcmp(s[0], "apis") == 0 && n == 1) {
        doc = kd_registry_group_list(api->reg);
    } else if (strcmp(s[0], "apis") == 0 && n == 2) {
        doc = kd_registry_group(api->reg, s[1]);
    } else if (strcmp(s[0], "apis") == 0 && n == 3) {
        doc = kd_registry_resource_list(api->reg, s[1], s[2]);
    }
    kd_store_unlock(api->st);
    if (doc == NULL) {
        respond_status(r, 404, "NotFound", "the server could not find the requested resource",
                       json_object());
        return;
    }
    kd_http_respond_json(r, 200, doc);
    json_decref(doc);
}

/*
 * OpenAPI v3: enough for kubectl to see that the server validates fields
 * itself (the fieldValidation parameter on every PATCH), so kubectl apply
 * skips client-side schema validation. Schemas are not served.
 */
static void add_gv_doc(json_t *root, const char *group, const char *version)
{
    char *key = group[0] == '\0' ? kd_xasprintf("api/%s", version)
                                 : kd_xasprintf("apis/%s/%s", group, version);
    if (json_object_get(root, key) == NULL) {
        char *url = kd_xasprintf("/openapi/v3/%s", key);
        json_object_set_new(root, key, json_pack("{s:s}", "serverRelativeURL", url));
        free(url);
    }
    free(key);
}

static void serve_openapi(struct kd_api *api, struct kd_http_req *r, char **s, size_t n)
{
    json_t *doc = NULL;
    kd_store_lock(api->st);
    if (n == 2) {
        json_t *paths = json_object();
        for (struct kd_restype *rt = kd_registry_first(api->reg); rt != NULL; rt = rt->next) {
            if (!rt->removed)
                add_gv_doc(paths, rt->group, rt->version);
        }
        doc = json_pack("{s:o}", "paths", paths);
    } else if (n >= 4 && n <= 5) {
        bool core = strcmp(s[2], "api") == 0;
        const char *group = core ? "" : s[3];
        const char *version = core ? s[3] : (n == 5 ? s[4] : "");
        json_t *paths = json_object();
        for (struct kd_restype *rt = kd_registry_first(api->reg); rt != NULL; rt = rt->next) {
            if (rt->removed || strcmp(rt->group, group) != 0 || strcmp(rt->version, version) != 0)
                continue;
            char prefix[300];
            if (core)
                snprintf(prefix, sizeof(prefix), "/api/%s", version);
            else
                snprintf(prefix, sizeof(prefix), "/apis/%s/%s", group, version);
            char *path = rt->namespaced ? kd_xasprintf("%s/namespaces/{namespace}/%s/{name}",
                                                       prefix, rt->resource)
                                        : kd_xasprintf("%s/%s/{name}", prefix, rt->resource);
            json_t *op =
                json_pack("{s:{s:s,s:s,s:s},s:s,s:[{s:s,s:s,s:{s:s}},{s:s,s:s,s:{s:s}}]}",
                          "x-kubernetes-group-version-kind", "group", group, "version", version,
                          "kind", rt->kind, "x-kubernetes-action", "patch", "parameters", "name",
                          "fieldValidation", "in", "query", "schema", "type", "string", "name",
                          "dryRun", "in", "query", "schema", "type", "string");
            json_object_set_new(paths, path, json_pack("{s:o}", "patch", op));
            free(path);
        }
        if (json_object_size(paths) > 0)
            doc = json_pack("{s:s,s:{s:s,s:s},s:o,s:{s:{}}}", "openapi", "3.0.0", "info", "title",
                            "Kubernetes", "version", "v1." K8S_VERSION_MINOR ".0", "paths", paths,
                            "components", "schemas");
        else
            json_decref(paths);
    }
    kd_store_unlock(api->st);
    if (doc == NULL) {
        respond_status(r, 404, "NotFound", "the server could not find the requested resource",
                       json_object());
        return;
    }
    kd_http_respond_json(r, 200, doc);
    json_decref(doc);
}

/* ---- body parsing ------------------------------------------------------------------------ */

/* Parse the body as a JSON object; on failure a 400 has been sent and NULL returned. */
static json_t *body_object(struct kd_http_req *r)
{
    const char *ct = kd_http_header(r, "Content-Type");
    if (ct != NULL && strstr(ct, "protobuf") != NULL) {
        size_t plen;
        const char *pb = kd_http_body(r, &plen);
        char err[KD_ERRLEN] = "";
        json_t *j = NULL;
        int rc = kd_proto_decode(pb, plen, &j, err);
        if (rc == KD_ENOTSUP)
            respond_status(r, 415, "UnsupportedMediaType", err, NULL);
        else if (rc != 0)
            bad_request(r, err);
        return j;
    }
    if (ct != NULL && (strstr(ct, "cbor") != NULL || strstr(ct, "yaml") != NULL)) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json, application/merge-patch+json, "
                 "application/json-patch+json, application/strategic-merge-patch+json (got %.100s)",
                 ct);
        respond_status(r, 415, "UnsupportedMediaType", msg, NULL);
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
        bad_request(r, msg);
        return NULL;
    }
    if (!json_is_object(j) && !json_is_array(j)) {
        json_decref(j);
        bad_request(r, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

static bool dry_run(struct kd_http_req *r)
{
    const char *d = kd_http_query(r, "dryRun");
    return d != NULL && strcmp(d, "All") == 0;
}

/* ---- semantics shared by create and update ------------------------------------------------- */

/* Everything except metadata and status: what a "spec change" means for generation. */
static bool spec_changed(const json_t *a, const json_t *b)
{
    json_t *x = json_copy((json_t *)a);
    json_t *y = json_copy((json_t *)b);
    json_object_del(x, "metadata");
    json_object_del(x, "status");
    json_object_del(y, "metadata");
    json_object_del(y, "status");
    bool changed = !json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return changed;
}

static bool same_ignoring_rv(const json_t *a, const json_t *b)
{
    json_t *x = json_deep_copy(a);
    json_t *y = json_deep_copy(b);
    json_object_del(meta(x), "resourceVersion");
    json_object_del(meta(y), "resourceVersion");
    bool same = json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return same;
}

static void crd_set_status(json_t *crd)
{
    char now[40];
    now_rfc3339(now, sizeof(now));
    json_t *spec = json_object_get(crd, "spec");
    json_t *stored = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(spec, "versions"), i, v)
    {
        if (json_is_true(json_object_get(v, "storage")))
            json_array_append_new(stored, json_string(jstr(v, "name")));
    }
    json_t *accepted = json_deep_copy(json_object_get(spec, "names"));
    if (jstr(accepted, "singular") == NULL && jstr(accepted, "kind") != NULL) {
        char *lower = kd_xstrdup(jstr(accepted, "kind"));
        for (char *p = lower; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        json_object_set_new(accepted, "singular", json_string(lower));
        free(lower);
    }
    if (jstr(accepted, "listKind") == NULL && jstr(accepted, "kind") != NULL) {
        char *lk = kd_xasprintf("%sList", jstr(accepted, "kind"));
        json_object_set_new(accepted, "listKind", json_string(lk));
        free(lk);
    }
    json_t *status =
        json_pack("{s:[{s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s}],s:o,s:o}", "conditions", "type",
                  "NamesAccepted", "status", "True", "lastTransitionTime", now, "reason",
                  "NoConflicts", "message", "no conflicts found", "type", "Established", "status",
                  "True", "lastTransitionTime", now, "reason", "InitialNamesAccepted", "message",
                  "the initial names have been accepted", "acceptedNames", accepted,
                  "storedVersions", stored);
    json_object_set_new(crd, "status", status);
}

static bool is_crd(const struct kd_restype *rt)
{
    return strcmp(rt->gr, "apiextensions.k8s.io/customresourcedefinitions") == 0;
}

static struct kd_restype *ns_type(struct kd_api *api)
{
    return kd_registry_find(api->reg, "", "v1", "namespaces");
}

/* Remove one field named by a path such as "spec.a[2].b" (as lib/openapi writes them). */
static void prune_path(json_t *obj, const char *path)
{
    json_t *cur = obj;
    char buf[512];
    kd_strlcpy(buf, path, sizeof(buf));
    char *p = buf;
    while (cur != NULL && *p != '\0') {
        char *end = p + strcspn(p, ".[");
        char sep = *end;
        *end = '\0';
        if (sep == '\0') {
            if (json_is_object(cur))
                json_object_del(cur, p);
            return;
        }
        if (*p != '\0')
            cur = json_object_get(cur, p);
        p = end + 1;
        while (sep == '[' && cur != NULL) {
            uint64_t idx;
            char *close = strchr(p, ']');
            if (close == NULL)
                return;
            *close = '\0';
            if (kd_parse_u64(p, &idx) < 0)
                return;
            cur = json_array_get(cur, (size_t)idx);
            p = close + 1;
            sep = *p;
            if (sep == '\0')
                return;
            p++;
        }
    }
}

/*
 * kube-apiserver decodes a custom resource's numbers into int64 or float64
 * and encodes a float64 with an integral value without a fraction, so
 * `1.0` (or `1e3`) is stored and read back as `1` (`1000`). The same here:
 * reals with an integral value (within int64) become integers.
 */
static void integral_numbers(json_t *v);

/* An integer to replace the integral real x with, or NULL after descending into x. */
static json_t *integral_member(json_t *x)
{
    double d = json_real_value(x);
    if (json_is_real(x) && d == floor(d) && fabs(d) < 9.2e18)
        return json_integer((json_int_t)d);
    integral_numbers(x);
    return NULL;
}

static void integral_numbers(json_t *v)
{
    const char *k;
    json_t *x, *n;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, x)
        {
            if ((n = integral_member(x)) != NULL)
                json_object_set_new(v, k, n);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x)
        {
            if ((n = integral_member(x)) != NULL)
                json_array_set_new(v, i, n);
        }
    }
}

/*
 * Custom resources: unknown fields are an error under fieldValidation=Strict
 * (kubectl's default) and pruned otherwise, then the object is validated
 * against the CRD's schema. 0, or the response has been sent.
 */
static int cr_check(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                    json_t *obj)
{
    int rc = 0;
    json_t *unknown = NULL, *causes = NULL;
    if (!rt->builtin)
        integral_numbers(obj);
    if (rt->builtin || rt->schema == NULL)
        goto out;
    if (kd_openapi_unknown_fields(rt->schema, obj, "", &unknown) == 0) {
        /* The root's apiVersion and kind are always known, like metadata. */
        for (size_t i = 0; i < json_array_size(unknown);) {
            const char *u = json_string_value(json_array_get(unknown, i));
            if (strcmp(u, "apiVersion") == 0 || strcmp(u, "kind") == 0)
                json_array_remove(unknown, i);
            else
                i++;
        }
    }
    if (json_array_size(unknown) > 0) {
        const char *fv = kd_http_query(r, "fieldValidation");
        if (fv != NULL && strcmp(fv, "Strict") == 0) {
            struct kd_buf b = KD_BUF_INIT(8192);
            int e = kd_buf_printf(&b,
                                  "%s in version \"%s\" cannot be handled as a %s: strict "
                                  "decoding error: ",
                                  rt->kind, rt->version, rt->kind);
            size_t i;
            json_t *u;
            json_array_foreach(unknown, i, u)
            {
                e = e ? e
                      : kd_buf_printf(&b, "%sunknown field \"%s\"", i > 0 ? ", " : "",
                                      json_string_value(u));
            }
            bad_request(r, kd_buf_str(&b));
            kd_buf_free(&b);
            rc = KD_EINVALID;
            goto out;
        }
        size_t i;
        json_t *u;
        json_array_foreach(unknown, i, u) prune_path(obj, json_string_value(u));
    }
    rc = kd_openapi_validate(rt->schema, obj, "", &causes);
    if (rc == KD_EINVALID) {
        invalid(r, rt, name, causes);
        causes = NULL;
    } else if (rc != 0) {
        respond_status(r, 500, "InternalError", "the CRD's schema cannot be used for validation",
                       NULL);
    }
out:
    json_decref(unknown);
    json_decref(causes);
    return rc;
}

/*
 * Built-in kinds: their fields' types, quantities, names and size limits
 * (validate.h); every kind: the size of its annotations. 0, or a 422 has
 * been sent.
 */
static int builtin_check(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                         const json_t *obj)
{
    json_t *causes = NULL;
    int rc = kd_local_validate(rt, obj, &causes);
    if (rc == KD_EINVALID)
        invalid(r, rt, name, causes);
    else
        json_decref(causes);
    return rc;
}

/* CRDs: every version's schema must be structural. 0, or a 422 has been sent. */
static int crd_check(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                     const json_t *crd)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(crd, "spec"), "versions"), i, v)
    {
        const json_t *schema = json_object_get(json_object_get(v, "schema"), "openAPIV3Schema");
        if (schema == NULL)
            continue;
        char path[128];
        json_t *causes = NULL;
        snprintf(path, sizeof(path), "spec.versions[%zu].schema.openAPIV3Schema", i);
        if (kd_openapi_structural_causes(schema, path, &causes) != 0) {
            invalid(r, rt, name,
                    causes ? causes
                           : json_pack("[o]", cause("FieldValueInvalid", path, "Invalid value")));
            return KD_EINVALID;
        }
    }
    return 0;
}

/*
 * Pods: the defaults and admission the real API server applies (restart
 * policy, grace period, scheduler, priority from the PriorityClass). Lock
 * held. 0, or the response has been sent.
 */
static int pod_defaults(struct kd_api *api, struct kd_http_req *r, const struct kd_restype *rt,
                        const char *name, json_t *pod)
{
    json_t *spec = json_object_get(pod, "spec");
    if (!json_is_object(spec) || json_array_size(json_object_get(spec, "containers")) == 0) {
        invalid(r, rt, name,
                json_pack("[o]", cause("FieldValueRequired", "spec.containers", "Required value")));
        return KD_EINVALID;
    }
    const char *rp = jstr(spec, "restartPolicy");
    if (rp == NULL) {
        json_object_set_new(spec, "restartPolicy", json_string("Always"));
    } else if (strcmp(rp, "Always") != 0 && strcmp(rp, "OnFailure") != 0 &&
               strcmp(rp, "Never") != 0) {
        invalid(r, rt, name,
                json_pack("[o]", cause("FieldValueNotSupported", "spec.restartPolicy",
                                       "Unsupported value: \"%s\": supported values: \"Always\", "
                                       "\"OnFailure\", \"Never\"",
                                       rp)));
        return KD_EINVALID;
    }
    for (int list = 0; list < 2; list++) {
        const char *key = list == 0 ? "initContainers" : "containers";
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(spec, key), i, c)
        {
            const char *tmp = jstr(c, "terminationMessagePolicy");
            if (tmp == NULL) {
                json_object_set_new(c, "terminationMessagePolicy", json_string("File"));
            } else if (strcmp(tmp, "File") != 0 && strcmp(tmp, "FallbackToLogsOnError") != 0) {
                char path[128];
                snprintf(path, sizeof(path), "spec.%s[%zu].terminationMessagePolicy", key, i);
                invalid(r, rt, name,
                        json_pack("[o]", cause("FieldValueNotSupported", path,
                                               "Unsupported value: \"%s\": supported values: "
                                               "\"File\", \"FallbackToLogsOnError\"",
                                               tmp)));
                return KD_EINVALID;
            }
            if (jstr(c, "terminationMessagePath") == NULL)
                json_object_set_new(c, "terminationMessagePath",
                                    json_string("/dev/termination-log"));
        }
    }
    if (json_object_get(spec, "terminationGracePeriodSeconds") == NULL)
        json_object_set_new(spec, "terminationGracePeriodSeconds", json_integer(30));
    if (jstr(spec, "schedulerName") == NULL)
        json_object_set_new(spec, "schedulerName", json_string("default-scheduler"));
    if (jstr(spec, "dnsPolicy") == NULL)
        json_object_set_new(spec, "dnsPolicy", json_string("ClusterFirst"));
    const char *pcn = jstr(spec, "priorityClassName");
    json_int_t prio = 0;
    if (pcn != NULL && pcn[0] != '\0') {
        json_t *pc = kd_store_get(api->st, "scheduling.k8s.io/priorityclasses", NULL, pcn);
        if (pc == NULL) {
            char msg[600];
            snprintf(msg, sizeof(msg),
                     "pods \"%s\" is forbidden: no PriorityClass with name %s was found", name,
                     pcn);
            respond_status(r, 403, "Forbidden", msg, details_for(rt, name, "pods"));
            return KD_EFORBIDDEN;
        }
        prio = json_integer_value(json_object_get(pc, "value"));
    } else {
        json_t **pcs = NULL;
        size_t n = kd_store_list(api->st, "scheduling.k8s.io/priorityclasses", NULL, &pcs);
        for (size_t i = 0; i < n; i++) {
            if (json_is_true(json_object_get(pcs[i], "globalDefault"))) {
                json_object_set(spec, "priorityClassName",
                                json_object_get(json_object_get(pcs[i], "metadata"), "name"));
                prio = json_integer_value(json_object_get(pcs[i], "value"));
            }
        }
        free(pcs);
    }
    json_object_set_new(spec, "priority", json_integer(prio));
    json_object_set_new(
        pod, "status",
        json_pack("{s:s,s:s}", "phase", "Pending", "qosClass", kd_sched_qos_class(pod)));
    return 0;
}

/* Secrets: stringData is merged into data (base64) on every write, as the API server does. */
static void secret_string_data(json_t *obj)
{
    json_t *sd = json_object_get(obj, "stringData");
    if (!json_is_object(sd))
        return;
    json_t *data = json_object_get(obj, "data");
    if (!json_is_object(data)) {
        data = json_object();
        json_object_set_new(obj, "data", data);
    }
    const char *k;
    json_t *v;
    json_object_foreach(sd, k, v)
    {
        const char *s = json_string_value(v);
        if (s == NULL)
            continue;
        size_t n = strlen(s);
        char *enc = kd_xmalloc(4 * ((n + 2) / 3) + 1);
        EVP_EncodeBlock((unsigned char *)enc, (const unsigned char *)s, (int)n);
        json_object_set_new(data, k, json_string(enc));
        free(enc);
    }
    json_object_del(obj, "stringData");
}

/* ---- create --------------------------------------------------------------------------------- */

static int ensure_default_sa(struct kd_api *api, const char *ns);

static void do_create(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    json_t *obj = body_object(r);
    json_t *resp = NULL;
    int code = 201;
    char err[KD_ERRLEN] = "";
    if (obj == NULL)
        return;
    char av[256];
    kd_restype_api_version(t->rt, av, sizeof(av));
    const char *okind = jstr(obj, "kind");
    const char *oav = jstr(obj, "apiVersion");
    if (okind != NULL && strcmp(okind, t->rt->kind) != 0) {
        char msg[600];
        snprintf(msg, sizeof(msg),
                 "the kind in the data (%s) does not match the expected kind (%s)", okind,
                 t->rt->kind);
        bad_request(r, msg);
        goto out;
    }
    if (oav != NULL && strcmp(oav, av) != 0) {
        char msg[600];
        snprintf(msg, sizeof(msg),
                 "the API version in the data (%s) does not match the expected API version (%s)",
                 oav, av);
        bad_request(r, msg);
        goto out;
    }
    set_kind(t->rt, obj);
    json_t *md = meta(obj);
    const char *crv = jstr(md, "resourceVersion");
    if (crv != NULL && crv[0] != '\0') {
        /* As kube-apiserver's storage answers it: a plain error, so a 500 without a reason. */
        respond_status(r, 500, "", "resourceVersion should not be set on objects to be created",
                       NULL);
        goto out;
    }
    if (builtin_check(r, t->rt, jstr(md, "name"), obj) != 0 ||
        cr_check(r, t->rt, jstr(md, "name"), obj) != 0 ||
        (is_crd(t->rt) && crd_check(r, t->rt, jstr(md, "name"), obj) != 0))
        goto out;
    const char *ons = jstr(md, "namespace");
    if (t->rt->namespaced) {
        if (t->ns == NULL) {
            bad_request(r, "a namespaced object must be created in a namespace (POST to "
                           "/api/v1/namespaces/NAMESPACE/...)");
            goto out;
        }
        if (ons != NULL && ons[0] != '\0' && strcmp(ons, t->ns) != 0) {
            bad_request(r, "the namespace of the provided object does not match the namespace "
                           "sent on the request");
            goto out;
        }
        json_object_set_new(md, "namespace", json_string(t->ns));
    } else {
        json_object_del(md, "namespace");
    }
    const char *name = jstr(md, "name");
    const char *gen_name = jstr(md, "generateName");
    kd_store_lock(api->st);
    if ((name == NULL || name[0] == '\0') && gen_name != NULL && gen_name[0] != '\0') {
        for (int tries = 0; tries < 8; tries++) {
            char suffix[8];
            random_suffix(suffix, 5);
            char *gn = kd_xasprintf("%.*s%s", 58, gen_name, suffix);
            json_object_set_new(md, "name", json_string(gn));
            free(gn);
            if (kd_store_get(api->st, t->rt->gr, t->ns, jstr(md, "name")) == NULL)
                break;
        }
        name = jstr(md, "name");
    }
    if (name == NULL || name[0] == '\0') {
        kd_store_unlock(api->st);
        invalid(r, t->rt, "",
                json_pack("[o]", cause("FieldValueRequired", "metadata.name",
                                       "Required value: name or generateName is required")));
        goto out;
    }
    json_t *c = check_name(t->rt, name);
    if (c != NULL) {
        kd_store_unlock(api->st);
        invalid(r, t->rt, name, json_pack("[o]", c));
        goto out;
    }
    if (t->rt->namespaced) {
        json_t *nsobj = kd_store_get(api->st, "/namespaces", "", t->ns);
        if (nsobj == NULL) {
            kd_store_unlock(api->st);
            not_found(r, ns_type(api), t->ns);
            goto out;
        }
        if (json_object_get(json_object_get(nsobj, "metadata"), "deletionTimestamp") != NULL) {
            kd_store_unlock(api->st);
            char msg[600];
            snprintf(msg, sizeof(msg),
                     "%s \"%s\" is forbidden: unable to create new content in namespace %s "
                     "because it is being terminated",
                     t->rt->resource, name, t->ns);
            respond_status(r, 403, "Forbidden", msg, details_for(t->rt, name, t->rt->resource));
            goto out;
        }
    }
    if (kd_store_get(api->st, t->rt->gr, t->ns, name) != NULL) {
        kd_store_unlock(api->st);
        char q[256], msg[600];
        qualified(t->rt, q, sizeof(q));
        snprintf(msg, sizeof(msg), "%s \"%s\" already exists", q, name);
        respond_status(r, 409, "AlreadyExists", msg, details_for(t->rt, name, t->rt->resource));
        goto out;
    }
    if (is_crd(t->rt)) {
        /* Validate by registering into the live registry only after the write. */
        const json_t *spec = json_object_get(obj, "spec");
        if (jstr(spec, "group") == NULL || jstr(json_object_get(spec, "names"), "plural") == NULL ||
            jstr(json_object_get(spec, "names"), "kind") == NULL ||
            !json_is_array(json_object_get(spec, "versions"))) {
            kd_store_unlock(api->st);
            invalid(r, t->rt, name,
                    json_pack("[o]", cause("FieldValueRequired", "spec",
                                           "Required value: spec.group, spec.names.plural, "
                                           "spec.names.kind and spec.versions are required")));
            goto out;
        }
        crd_set_status(obj);
    } else if (t->rt->has_status && !t->rt->builtin) {
        /* With the status subresource, create ignores status. */
        json_object_del(obj, "status");
    }
    char uid[40], now[40];
    new_uid(uid, sizeof(uid));
    now_rfc3339(now, sizeof(now));
    json_object_set_new(md, "uid", json_string(uid));
    json_object_set_new(md, "creationTimestamp", json_string(now));
    json_object_del(md, "deletionTimestamp");
    json_object_del(md, "deletionGracePeriodSeconds");
    json_object_del(md, "resourceVersion");
    json_object_del(md, "selfLink");
    if (t->rt->generation)
        json_object_set_new(md, "generation", json_integer(1));
    else
        json_object_del(md, "generation");
    if (strcmp(t->rt->resource, "namespaces") == 0) {
        json_object_set_new(obj, "spec", json_pack("{s:[s]}", "finalizers", "kubernetes"));
        json_object_set_new(obj, "status", json_pack("{s:s}", "phase", "Active"));
        json_t *labels = json_object_get(md, "labels");
        if (!json_is_object(labels)) {
            labels = json_object();
            json_object_set_new(md, "labels", labels);
        }
        json_object_set_new(labels, "kubernetes.io/metadata.name", json_string(name));
    }
    if (strcmp(t->rt->gr, "/secrets") == 0)
        secret_string_data(obj);
    if (strcmp(t->rt->gr, "/pods") == 0 && pod_defaults(api, r, t->rt, name, obj) != 0) {
        kd_store_unlock(api->st);
        goto out;
    }
    if (dry_run(r)) {
        kd_store_unlock(api->st);
        resp = json_incref(obj);
        goto out;
    }
    if (is_crd(t->rt) && kd_registry_apply_crd(api->reg, obj, err) != 0) {
        kd_store_unlock(api->st);
        invalid(r, t->rt, name, json_pack("[o]", cause("FieldValueInvalid", "spec", "%s", err)));
        goto out;
    }
    json_t *stored = NULL;
    int rc = kd_store_put(api->st, t->rt->gr, t->ns, name, json_incref(obj), &stored);
    if (rc == 0)
        resp = present(t->rt, stored);
    if (rc == 0 && strcmp(t->rt->gr, "/namespaces") == 0)
        rc = ensure_default_sa(api, name);
    kd_store_unlock(api->st);
    if (rc != 0) {
        respond_status(r, 500, "InternalError", "the object could not be written to the journal",
                       NULL);
        goto out;
    }
out:
    if (resp != NULL) {
        kd_http_respond_json(r, code, resp);
        json_decref(resp);
    }
    json_decref(obj);
}

static bool wants_table(struct kd_http_req *r);

/* ---- get / list -------------------------------------------------------------------------------
 */

static void do_get(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    kd_store_lock(api->st);
    json_t *obj = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    json_t *out = obj != NULL ? present(t->rt, obj) : NULL;
    kd_store_unlock(api->st);
    if (out == NULL) {
        not_found(r, t->rt, t->name);
        return;
    }
    if (wants_table(r) && t->sub == NULL) {
        json_t *tbl =
            kd_table_build(t->rt, &out, 1, kd_http_query(r, "includeObject"), NULL, kd_wall_ms());
        json_decref(out);
        out = tbl;
    }
    kd_http_respond_json(r, 200, out);
    json_decref(out);
}

static int parse_selectors(struct kd_http_req *r, const struct target *t, struct kd_selector **ls,
                           struct kd_selector **fs)
{
    char err[KD_ERRLEN];
    *ls = NULL;
    *fs = NULL;
    if (kd_selector_parse_labels(kd_http_query(r, "labelSelector"), ls, err) != 0) {
        char msg[KD_ERRLEN + 100];
        snprintf(msg, sizeof(msg), "unable to parse labelSelector \"%s\": %s",
                 kd_http_query(r, "labelSelector"), err);
        bad_request(r, msg);
        return KD_EINVAL;
    }
    if (kd_selector_parse_fields(kd_http_query(r, "fieldSelector"), t->rt->field_labels, fs, err) !=
        0) {
        kd_selector_free(*ls);
        *ls = NULL;
        bad_request(r, err);
        return KD_EINVAL;
    }
    return 0;
}

/* kubectl get asks for server-side printing with Accept: ...;as=Table;... */
static bool wants_table(struct kd_http_req *r)
{
    const char *a = kd_http_header(r, "Accept");
    return a != NULL && strstr(a, "as=Table") != NULL;
}

static json_t *table_of(const struct kd_restype *rt, json_t *items, struct kd_http_req *r,
                        const char *rv)
{
    size_t n = json_array_size(items);
    json_t **v = kd_xcalloc(n + 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(items, i);
    json_t *t = kd_table_build(rt, v, n, kd_http_query(r, "includeObject"), rv, kd_wall_ms());
    free(v);
    return t;
}

static bool matches(const struct kd_selector *ls, const struct kd_selector *fs, const json_t *o)
{
    return kd_selector_match(ls, o) && kd_selector_match(fs, o);
}

static char *b64(const char *s)
{
    size_t n = strlen(s);
    char *out = kd_xmalloc(4 * ((n + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
    return out;
}

static json_t *unb64_json(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 4096 || n % 4 != 0)
        return NULL;
    unsigned char *buf = kd_xmalloc(n + 1);
    int len = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n);
    json_t *j = NULL;
    if (len > 0) {
        while (len > 0 && buf[len - 1] == '\0')
            len--;
        j = json_loadb((const char *)buf, (size_t)len, 0, NULL);
    }
    free(buf);
    return j;
}

static const char *obj_key_ns(const json_t *o)
{
    const char *ns = jstr(json_object_get(o, "metadata"), "namespace");
    return ns != NULL ? ns : "";
}

static void do_list(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    struct kd_selector *ls = NULL, *fs = NULL;
    json_t *list = NULL;
    json_t **items = NULL;
    char *start = NULL;
    if (parse_selectors(r, t, &ls, &fs) != 0)
        goto out;
    int64_t limit = 0;
    const char *lim = kd_http_query(r, "limit");
    if (lim != NULL && lim[0] != '\0' && (kd_parse_i64(lim, &limit) < 0 || limit < 0)) {
        bad_request(r, "limit: must be a non-negative integer");
        goto out;
    }
    const char *rvq = kd_http_query(r, "resourceVersion");
    const char *rvm = kd_http_query(r, "resourceVersionMatch");
    bool has_rv = rvq != NULL && rvq[0] != '\0';
    uint64_t want_rv = 0;
    if (rvm != NULL && rvm[0] != '\0') {
        const char *why = NULL, *field = "resourceVersionMatch";
        if (strcmp(rvm, "Exact") != 0 && strcmp(rvm, "NotOlderThan") != 0)
            why = "Unsupported value: must be one of \"Exact\", \"NotOlderThan\"";
        else if (!has_rv)
            why = "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided";
        else if (strcmp(rvm, "Exact") == 0 && strcmp(rvq, "0") == 0)
            why = "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion "
                  "\"0\"";
        if (why != NULL) {
            char msg[400];
            snprintf(msg, sizeof(msg), "ListOptions.meta.k8s.io \"\" is invalid: %s: %s", field,
                     why);
            json_t *d = json_pack("{s:s,s:s,s:[{s:s,s:s,s:s}]}", "group", "meta.k8s.io", "kind",
                                  "ListOptions", "causes", "reason", "FieldValueInvalid", "message",
                                  why, "field", field);
            respond_status(r, 422, "Invalid", msg, d);
            goto out;
        }
    }
    if (has_rv && kd_parse_u64(rvq, &want_rv) < 0) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "resourceVersion: Invalid value: \"%.200s\": must be a resourceVersion returned "
                 "by this server",
                 rvq);
        bad_request(r, msg);
        goto out;
    }
    const char *cont = kd_http_query(r, "continue");
    if (cont != NULL && cont[0] != '\0') {
        json_t *tok = unb64_json(cont);
        const char *st = jstr(tok, "start");
        if (st == NULL) {
            json_decref(tok);
            bad_request(r, "continue key is not valid: the token is not a continue token issued "
                           "by this server");
            goto out;
        }
        start = kd_xstrdup(st);
        json_decref(tok);
    }
    kd_store_lock(api->st);
    if (want_rv > kd_store_rv(api->st)) {
        /* A resourceVersion from the future: wait a little for it, as the watch cache does. */
        int64_t deadline = kd_mono_ms() + LIST_RV_WAIT_MS;
        for (int64_t left = LIST_RV_WAIT_MS; left > 0 && want_rv > kd_store_rv(api->st);
             left = deadline - kd_mono_ms())
            kd_store_wait(api->st, (int)left);
        if (want_rv > kd_store_rv(api->st)) {
            char msg[200];
            snprintf(msg, sizeof(msg), "Too large resource version: %llu, current: %llu",
                     (unsigned long long)want_rv, (unsigned long long)kd_store_rv(api->st));
            kd_store_unlock(api->st);
            json_t *d =
                json_pack("{s:[{s:s,s:s}],s:i}", "causes", "reason", "ResourceVersionTooLarge",
                          "message", "Too large resource version", "retryAfterSeconds", 1);
            respond_status(r, 504, "Timeout", msg, d);
            goto out;
        }
    }
    uint64_t rv = kd_store_rv(api->st);
    size_t n = kd_store_list(api->st, t->rt->gr, t->ns, &items);
    json_t *arr = json_array();
    size_t taken = 0, remaining = 0;
    char *next = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *o = items[i];
        if (start != NULL) {
            char *k =
                kd_xasprintf("%s/%s", obj_key_ns(o), jstr(json_object_get(o, "metadata"), "name"));
            int c = strcmp(k, start);
            free(k);
            if (c <= 0)
                continue;
        }
        if (!matches(ls, fs, o))
            continue;
        if (limit > 0 && taken == (size_t)limit) {
            remaining++;
            continue;
        }
        json_t *p = present(t->rt, o);
        if (t->rt->builtin) {
            /* The real server omits kind/apiVersion from the items of built-in lists. */
            json_t *c = json_copy(p);
            json_decref(p);
            p = c;
            json_object_del(p, "kind");
            json_object_del(p, "apiVersion");
        }
        json_array_append_new(arr, p);
        taken++;
        if (limit > 0 && taken == (size_t)limit) {
            free(next);
            next =
                kd_xasprintf("%s/%s", obj_key_ns(o), jstr(json_object_get(o, "metadata"), "name"));
        }
    }
    kd_store_unlock(api->st);
    char av[256], rvs[32];
    kd_restype_api_version(t->rt, av, sizeof(av));
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    char *lk = kd_xasprintf("%sList", t->rt->kind);
    list = json_pack("{s:s,s:s,s:{s:s},s:o}", "kind", lk, "apiVersion", av, "metadata",
                     "resourceVersion", rvs, "items", arr);
    free(lk);
    if (remaining > 0 && next != NULL) {
        json_t *tok =
            json_pack("{s:s,s:I,s:s}", "v", "meta.k8s.io/v1", "rv", (json_int_t)rv, "start", next);
        char *s = json_dumps(tok, JSON_COMPACT);
        char *enc = b64(s);
        json_t *lm = json_object_get(list, "metadata");
        json_object_set_new(lm, "continue", json_string(enc));
        if (ls == NULL || kd_http_query(r, "labelSelector") == NULL)
            json_object_set_new(lm, "remainingItemCount", json_integer((json_int_t)remaining));
        free(enc);
        free(s);
        json_decref(tok);
    }
    free(next);
    if (wants_table(r)) {
        json_t *tbl = table_of(t->rt, arr, r, rvs);
        json_t *cont_tok = json_object_get(json_object_get(list, "metadata"), "continue");
        if (cont_tok != NULL)
            json_object_set(json_object_get(tbl, "metadata"), "continue", cont_tok);
        json_decref(list);
        list = tbl;
    }
    kd_http_respond_json(r, 200, list);
out:
    free(items);
    free(start);
    json_decref(list);
    kd_selector_free(ls);
    kd_selector_free(fs);
}

/* ---- watch -------------------------------------------------------------------------------------
 */

struct watch {
    struct kd_api *api;
    const struct kd_restype *rt;
    char *ns;
    struct kd_selector *ls, *fs;
    uint64_t cursor;
    bool bookmarks;
    bool ended;
    int64_t deadline_ms;
    int64_t next_bookmark_ms;
    struct kd_buf out;
    bool table;    /* events carry one-row Tables (kubectl get -w) */
    char *include; /* includeObject for those Tables */
};

static void watch_free(void *p)
{
    struct watch *w = p;
    if (w == NULL)
        return;
    free(w->ns);
    free(w->include);
    kd_selector_free(w->ls);
    kd_selector_free(w->fs);
    kd_buf_free(&w->out);
    free(w);
}

static void watch_emit(struct watch *w, const char *type, json_t *obj /* stolen */)
{
    if (w->table && type[0] != 'B' && type[0] != 'E') {
        json_t *t = kd_table_build(w->rt, &obj, 1, w->include, NULL, kd_wall_ms());
        json_decref(obj);
        obj = t;
    }
    json_t *ev = json_pack("{s:s,s:o}", "type", type, "object", obj);
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (s == NULL)
        kd_oom(0);
    if (kd_buf_puts(&w->out, s) < 0 || kd_buf_putc(&w->out, '\n') < 0) {
        KD_WARN("watch buffer full; ending the watch", "resource=%s", w->rt->resource);
        w->ended = true;
    }
    free(s);
}

static void watch_gone(struct watch *w, uint64_t asked, uint64_t oldest)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "too old resource version: %llu (%llu)", (unsigned long long)asked,
             (unsigned long long)oldest);
    watch_emit(w, "ERROR", status_new(410, "Expired", msg, NULL));
    w->ended = true;
}

/* Scan new events (lock held); appends lines to w->out. */
static void watch_scan(struct watch *w)
{
    struct kd_store *st = w->api->st;
    for (int batch = 0; batch < 256 && !w->ended; batch++) {
        const struct kd_event *ev;
        uint64_t oldest = 0;
        int rc = kd_store_next_event(st, w->cursor, &ev, &oldest);
        if (rc == KD_EGONE) {
            watch_gone(w, w->cursor, oldest);
            return;
        }
        if (rc != 0) {
            w->cursor = kd_store_rv(st);
            return;
        }
        w->cursor = ev->rv;
        if (strcmp(ev->gr, w->rt->gr) != 0)
            continue;
        if (w->ns != NULL && strcmp(obj_key_ns(ev->obj), w->ns) != 0)
            continue;
        bool now = matches(w->ls, w->fs, ev->obj);
        bool before = ev->prev != NULL && matches(w->ls, w->fs, ev->prev);
        const char *type = NULL;
        switch (ev->type) {
        case KD_EV_ADDED: type = now ? "ADDED" : NULL; break;
        case KD_EV_MODIFIED:
            type = now && before ? "MODIFIED" : now ? "ADDED" : before ? "DELETED" : NULL;
            break;
        case KD_EV_DELETED: type = before || now ? "DELETED" : NULL; break;
        }
        if (type != NULL)
            watch_emit(w, type, present(w->rt, ev->obj));
    }
}

static ssize_t watch_read(void *ctx, char *buf, size_t max)
{
    struct watch *w = ctx;
    ssize_t n = 0;
    if (w->out.len == 0 && !w->ended) {
        int64_t now = kd_mono_ms();
        if (now >= w->deadline_ms || atomic_load(&w->api->stop))
            return -1;
        struct kd_store *st = w->api->st;
        kd_store_lock(st);
        watch_scan(w);
        if (w->out.len == 0 && !w->ended) {
            if (w->bookmarks && now >= w->next_bookmark_ms) {
                char rvs[32], av[256];
                snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)w->cursor);
                json_t *bm = json_pack("{s:s,s:s,s:{s:s}}", "kind", w->rt->kind, "apiVersion",
                                       kd_restype_api_version(w->rt, av, sizeof(av)), "metadata",
                                       "resourceVersion", rvs);
                watch_emit(w, "BOOKMARK", bm);
                w->next_bookmark_ms = now + w->api->bookmark_ms;
            } else {
                int64_t wait = w->deadline_ms - now;
                if (w->bookmarks && w->next_bookmark_ms - now < wait)
                    wait = w->next_bookmark_ms - now;
                kd_store_wait(st, (int)(wait < 1000 ? (wait < 1 ? 1 : wait) : 1000));
                watch_scan(w);
            }
        }
        kd_store_unlock(st);
    }
    if (w->out.len > 0) {
        n = (ssize_t)(w->out.len < max ? w->out.len : max);
        memcpy(buf, w->out.data, (size_t)n);
        kd_buf_consume(&w->out, (size_t)n);
        return n;
    }
    return w->ended ? -1 : 0;
}

static void do_watch(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    struct watch *w = kd_xcalloc(1, sizeof(*w));
    w->api = api;
    w->rt = t->rt;
    w->ns = t->ns != NULL ? kd_xstrdup(t->ns) : NULL;
    kd_buf_init(&w->out, MAX_WATCH_BUF);
    if (parse_selectors(r, t, &w->ls, &w->fs) != 0)
        goto fail;
    if (t->name != NULL) {
        /* /watch/.../NAME: a field selector on the name. */
        char err[KD_ERRLEN];
        char *fsel = kd_xasprintf("metadata.name=%s", t->name);
        kd_selector_free(w->fs);
        w->fs = NULL;
        int rc = kd_selector_parse_fields(fsel, NULL, &w->fs, err);
        free(fsel);
        if (rc != 0) {
            bad_request(r, err);
            goto fail;
        }
    }
    const char *rvq = kd_http_query(r, "resourceVersion");
    uint64_t from = 0;
    bool initial = rvq == NULL || rvq[0] == '\0' || strcmp(rvq, "0") == 0;
    if (!initial && kd_parse_u64(rvq, &from) < 0) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "resourceVersion: Invalid value: \"%.200s\": must be a "
                 "resourceVersion returned by this server",
                 rvq);
        bad_request(r, msg);
        goto fail;
    }
    int64_t timeout = DEFAULT_WATCH_TIMEOUT_S;
    const char *tq = kd_http_query(r, "timeoutSeconds");
    if (tq != NULL && (kd_parse_i64(tq, &timeout) < 0 || timeout < 0)) {
        bad_request(r, "timeoutSeconds: must be a non-negative integer");
        goto fail;
    }
    if (timeout == 0)
        timeout = DEFAULT_WATCH_TIMEOUT_S;
    w->deadline_ms = kd_mono_ms() + timeout * 1000;
    w->bookmarks = is_true(kd_http_query(r, "allowWatchBookmarks"));
    w->table = wants_table(r);
    if (kd_http_query(r, "includeObject") != NULL)
        w->include = kd_xstrdup(kd_http_query(r, "includeObject"));
    w->next_bookmark_ms = kd_mono_ms() + api->bookmark_ms;
    kd_store_lock(api->st);
    if (initial) {
        json_t **items = NULL;
        size_t n = kd_store_list(api->st, t->rt->gr, t->ns, &items);
        for (size_t i = 0; i < n; i++) {
            if (matches(w->ls, w->fs, items[i]))
                watch_emit(w, "ADDED", present(t->rt, items[i]));
        }
        free(items);
        w->cursor = kd_store_rv(api->st);
    } else {
        w->cursor = from;
        const struct kd_event *ev;
        uint64_t oldest = 0;
        if (kd_store_next_event(api->st, from, &ev, &oldest) == KD_EGONE)
            watch_gone(w, from, oldest);
    }
    kd_store_unlock(api->st);
    kd_http_respond_stream(r, 200, "application/json", watch_read, w, watch_free);
    return;
fail:
    watch_free(w);
}

/* ---- update / patch
 * ------------------------------------------------------------------------------ */

static int remove_object(struct kd_api *api, const struct kd_restype *rt, const char *ns,
                         const char *name, json_t **deleted);

/*
 * Write `next` (stolen) as the new state of t's object, given the current
 * `cur` (borrowed, lock held). `status_only`: a write to /status. Sends the
 * response. Unlocks the store.
 */
static void commit_update(struct kd_api *api, struct kd_http_req *r, const struct target *t,
                          json_t *cur, json_t *next, bool status_only)
{
    const struct kd_restype *rt = t->rt;
    json_t *resp = NULL;
    json_t *md = meta(next);
    const char *want_rv = jstr(md, "resourceVersion");
    if (want_rv != NULL && want_rv[0] != '\0' &&
        strcmp(want_rv, jstr(json_object_get(cur, "metadata"), "resourceVersion")) != 0) {
        kd_store_unlock(api->st);
        conflict(r, rt, t->name);
        goto out;
    }
    const char *nname = jstr(md, "name");
    if (nname != NULL && strcmp(nname, t->name) != 0) {
        kd_store_unlock(api->st);
        char msg[600];
        snprintf(msg, sizeof(msg),
                 "the name of the object (%s) does not match the name on the URL "
                 "(%s)",
                 nname, t->name);
        bad_request(r, msg);
        goto out;
    }
    json_t *built;
    if (status_only) {
        built = json_deep_copy(cur);
        json_t *st = json_object_get(next, "status");
        if (st != NULL)
            json_object_set(built, "status", st);
        else
            json_object_del(built, "status");
    } else {
        built = json_deep_copy(next);
        json_t *bm = meta(built);
        const json_t *cm = json_object_get(cur, "metadata");
        /* Fields the server owns. */
        static const char *const kept[] = {"uid",
                                           "creationTimestamp",
                                           "deletionTimestamp",
                                           "deletionGracePeriodSeconds",
                                           "generation",
                                           "namespace",
                                           "name",
                                           NULL};
        for (const char *const *k = kept; *k != NULL; k++) {
            json_t *v = json_object_get(cm, *k);
            if (v != NULL)
                json_object_set(bm, *k, v);
            else
                json_object_del(bm, *k);
        }
        set_kind(rt, built);
        if (strcmp(rt->gr, "/secrets") == 0)
            secret_string_data(built);
        if (rt->has_status) {
            json_t *st = json_object_get(cur, "status");
            if (st != NULL)
                json_object_set(built, "status", st);
            else
                json_object_del(built, "status");
        }
        if (is_crd(rt))
            crd_set_status(built);
        if (rt->generation && spec_changed(cur, built)) {
            json_int_t g = json_integer_value(json_object_get(cm, "generation"));
            json_object_set_new(bm, "generation", json_integer(g + 1));
        }
        /* Once deletion began, finalizers may only be removed. */
    }
    json_object_set(meta(built), "resourceVersion",
                    json_object_get(json_object_get(cur, "metadata"), "resourceVersion"));
    if (is_crd(rt)) {
        char err[KD_ERRLEN];
        if (!dry_run(r) && kd_registry_apply_crd(api->reg, built, err) != 0) {
            char err2[KD_ERRLEN];
            if (kd_registry_apply_crd(api->reg, cur, err2) != 0)
                KD_WARN("could not restore a CRD's kinds", "err=%s", kd_logq(err2));
            kd_store_unlock(api->st);
            invalid(r, rt, t->name,
                    json_pack("[o]", cause("FieldValueInvalid", "spec", "%s", err)));
            json_decref(built);
            goto out;
        }
    }
    if ((!status_only && !same_ignoring_rv(cur, built) &&
         builtin_check(r, rt, t->name, built) != 0) ||
        (!rt->builtin && !same_ignoring_rv(cur, built) && cr_check(r, rt, t->name, built) != 0) ||
        (is_crd(rt) && crd_check(r, rt, t->name, built) != 0)) {
        kd_store_unlock(api->st);
        json_decref(built);
        goto out;
    }
    if (same_ignoring_rv(cur, built) || dry_run(r)) {
        /* A no-op update writes nothing and keeps the resourceVersion. */
        resp = present(rt, dry_run(r) ? built : cur);
        json_decref(built);
        kd_store_unlock(api->st);
        goto out;
    }
    const json_t *bm = json_object_get(built, "metadata");
    if (json_object_get(bm, "deletionTimestamp") != NULL &&
        json_array_size(json_object_get(bm, "finalizers")) == 0) {
        /* The last finalizer is gone: the object goes now. */
        json_t *deleted = NULL;
        json_decref(built);
        int rc = remove_object(api, rt, t->ns, t->name, &deleted);
        kd_store_unlock(api->st);
        if (rc != 0) {
            respond_status(r, 500, "InternalError", "the journal write failed", NULL);
            goto out;
        }
        resp = present(rt, deleted);
        json_decref(deleted);
        goto out;
    }
    json_t *stored = NULL;
    int rc = kd_store_put(api->st, rt->gr, t->ns, t->name, built, &stored);
    if (rc == 0)
        resp = present(rt, stored);
    kd_store_unlock(api->st);
    if (rc != 0)
        respond_status(r, 500, "InternalError", "the journal write failed", NULL);
out:
    if (resp != NULL) {
        kd_http_respond_json(r, 200, resp);
        json_decref(resp);
    }
    json_decref(next);
}

static void do_update(struct kd_api *api, struct kd_http_req *r, const struct target *t,
                      bool status_only)
{
    json_t *obj = body_object(r);
    if (obj == NULL)
        return;
    if (!json_is_object(obj)) {
        json_decref(obj);
        bad_request(r, "the request body must be a JSON object");
        return;
    }
    kd_store_lock(api->st);
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    if (cur == NULL) {
        kd_store_unlock(api->st);
        json_decref(obj);
        not_found(r, t->rt, t->name);
        return;
    }
    const char *urv = jstr(json_object_get(obj, "metadata"), "resourceVersion");
    if (!t->rt->builtin && (urv == NULL || urv[0] == '\0')) {
        /* Custom resources (and CRDs) have no unconditional update. */
        kd_store_unlock(api->st);
        json_decref(obj);
        invalid(r, t->rt, t->name,
                json_pack("[o]", cause("FieldValueInvalid", "metadata.resourceVersion",
                                       "Invalid value: 0x0: must be specified for an update")));
        return;
    }
    commit_update(api, r, t, cur, obj, status_only);
}

static void do_patch(struct kd_api *api, struct kd_http_req *r, const struct target *t,
                     bool status_only)
{
    const char *ct = kd_http_header(r, "Content-Type");
    char err[KD_ERRLEN] = "";
    json_t *patch = NULL;
    int kind;
    if (ct != NULL && kd_str_has_prefix(ct, "application/merge-patch+json"))
        kind = 0;
    else if (ct != NULL && kd_str_has_prefix(ct, "application/json-patch+json"))
        kind = 1;
    else if (ct != NULL && kd_str_has_prefix(ct, "application/strategic-merge-patch+json") &&
             t->rt->builtin)
        kind = 2;
    else {
        char msg[600];
        snprintf(msg, sizeof(msg),
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json-patch+json, application/merge-patch+json%s",
                 t->rt->builtin ? ", application/strategic-merge-patch+json" : "");
        respond_status(r, 415, "UnsupportedMediaType", msg, NULL);
        return;
    }
    patch = body_object(r);
    if (patch == NULL)
        return;
    kd_store_lock(api->st);
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    if (cur == NULL) {
        kd_store_unlock(api->st);
        json_decref(patch);
        not_found(r, t->rt, t->name);
        return;
    }
    /* Preconditions are only what the patch itself says about resourceVersion. */
    json_t *base = json_deep_copy(cur);
    json_object_del(meta(base), "resourceVersion");
    json_t *next = NULL;
    int rc;
    if (kind == 0)
        rc = kd_patch_merge(base, patch, &next, err);
    else if (kind == 1)
        rc = kd_patch_json(base, patch, &next, err);
    else
        rc = kd_patch_strategic(base, patch, t->rt->kind, &next, err);
    json_decref(base);
    json_decref(patch);
    if (rc != 0 || !json_is_object(next)) {
        kd_store_unlock(api->st);
        json_decref(next);
        char msg[KD_ERRLEN + 64];
        snprintf(msg, sizeof(msg), "the patch could not be applied: %s",
                 err[0] ? err : "the result is not an object");
        respond_status(r, rc == 0 || kind == 1 ? 422 : 400,
                       rc == 0 || kind == 1 ? "Invalid" : "BadRequest", msg, NULL);
        return;
    }
    commit_update(api, r, t, cur, next, status_only);
}

/* ---- delete
 * -------------------------------------------------------------------------------------- */

static bool has_finalizer(const json_t *obj, const char *f)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "finalizers"), i, v)
    {
        if (strcmp(json_string_value(v) ? json_string_value(v) : "", f) == 0)
            return true;
    }
    return false;
}

/* Remove now (lock held); CRDs also unregister their kinds and drop their objects. */
static int remove_object(struct kd_api *api, const struct kd_restype *rt, const char *ns,
                         const char *name, json_t **deleted)
{
    int rc = kd_store_delete(api->st, rt->gr, ns, name, deleted);
    if (rc == 0 && is_crd(rt)) {
        kd_registry_remove_crd(api->reg, name);
        const char *dot = strchr(name, '.');
        if (dot != NULL) {
            char *gr = kd_xasprintf("%s/%.*s", dot + 1, (int)(dot - name), name);
            json_t **items = NULL;
            size_t n = kd_store_list(api->st, gr, NULL, &items);
            for (size_t i = 0; i < n; i++) {
                json_t *o = json_incref(items[n - 1 - i]);
                const json_t *m = json_object_get(o, "metadata");
                int r2 = kd_store_delete(api->st, gr, jstr(m, "namespace"), jstr(m, "name"), NULL);
                (void)r2;
                json_decref(o);
            }
            free(items);
            free(gr);
        }
    }
    return rc;
}

/*
 * Start deleting (lock held): with finalizers (or Foreground/Orphan, which
 * add theirs) the object gets a deletionTimestamp; otherwise it goes now.
 * *out: the object's state afterwards (new ref). *gone: removed now.
 */
static bool pod_needs_kubelet(const json_t *pod)
{
    const char *nn = jstr(json_object_get(pod, "spec"), "nodeName");
    const char *phase = jstr(json_object_get(pod, "status"), "phase");
    return nn != NULL && nn[0] != '\0' &&
           !(phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0));
}

static int begin_delete(struct kd_api *api, const struct kd_restype *rt, const char *ns,
                        const char *name, const char *policy, int64_t grace, json_t **out,
                        bool *gone)
{
    int rc = 0;
    json_t *cur = kd_store_get(api->st, rt->gr, ns, name);
    *out = NULL;
    *gone = false;
    if (cur == NULL)
        return KD_ENOTFOUND;
    const json_t *cm = json_object_get(cur, "metadata");
    bool fin = json_array_size(json_object_get(cm, "finalizers")) > 0;
    bool ns_kind = strcmp(rt->resource, "namespaces") == 0;
    const char *extra = NULL;
    if (policy != NULL && strcmp(policy, "Foreground") == 0)
        extra = "foregroundDeletion";
    else if (policy != NULL && strcmp(policy, "Orphan") == 0)
        extra = "orphan";
    /* A running pod ends gracefully: the kubelet stops it, then removes it. */
    bool graceful = strcmp(rt->gr, "/pods") == 0 && pod_needs_kubelet(cur) && grace != 0;
    if (!fin && extra == NULL && !ns_kind && !graceful) {
        rc = remove_object(api, rt, ns, name, out);
        *gone = rc == 0;
        return rc;
    }
    if (json_object_get(cm, "deletionTimestamp") != NULL && extra == NULL) {
        *out = json_incref(cur);
        return 0;
    }
    json_t *next = json_deep_copy(cur);
    json_t *md = meta(next);
    if (json_object_get(md, "deletionTimestamp") == NULL) {
        char now[40];
        now_rfc3339(now, sizeof(now));
        json_object_set_new(md, "deletionTimestamp", json_string(now));
        int64_t g = 0;
        if (graceful) {
            json_t *tg =
                json_object_get(json_object_get(next, "spec"), "terminationGracePeriodSeconds");
            g = grace > 0 ? grace : json_is_integer(tg) ? json_integer_value(tg) : 30;
        }
        json_object_set_new(md, "deletionGracePeriodSeconds", json_integer(g));
    }
    if (extra != NULL && !has_finalizer(next, extra)) {
        json_t *f = json_object_get(md, "finalizers");
        if (!json_is_array(f)) {
            f = json_array();
            json_object_set_new(md, "finalizers", f);
        }
        json_array_append_new(f, json_string(extra));
    }
    if (ns_kind)
        json_object_set_new(next, "status", json_pack("{s:s}", "phase", "Terminating"));
    json_t *stored = NULL;
    rc = kd_store_put(api->st, rt->gr, ns, name, next, &stored);
    if (rc == 0)
        *out = json_incref(stored);
    return rc;
}

static const char *delete_policy(struct kd_http_req *r, json_t **opts)
{
    const char *p = kd_http_query(r, "propagationPolicy");
    size_t len;
    kd_http_body(r, &len);
    *opts = NULL;
    if (len > 0) {
        *opts = json_loadb(kd_http_body(r, NULL), len, 0, NULL);
        const char *bp = jstr(*opts, "propagationPolicy");
        if (bp != NULL)
            p = bp;
        /* The legacy orphanDependents flag. */
        json_t *od = json_object_get(*opts, "orphanDependents");
        if (p == NULL && json_is_true(od))
            p = "Orphan";
    }
    return p;
}

static bool valid_policy(const char *p)
{
    return p == NULL || strcmp(p, "Background") == 0 || strcmp(p, "Foreground") == 0 ||
           strcmp(p, "Orphan") == 0;
}

static void do_delete(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    json_t *opts = NULL;
    json_t *out = NULL;
    bool gone = false;
    const char *policy = delete_policy(r, &opts);
    if (!valid_policy(policy)) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "propagationPolicy: Unsupported value: \"%.100s\": supported values: "
                 "\"Foreground\", \"Background\", \"Orphan\"",
                 policy);
        bad_request(r, msg);
        goto out;
    }
    int64_t grace = -1;
    const char *gq = kd_http_query(r, "gracePeriodSeconds");
    if (json_is_integer(json_object_get(opts, "gracePeriodSeconds")))
        grace = json_integer_value(json_object_get(opts, "gracePeriodSeconds"));
    else if (gq != NULL && (kd_parse_i64(gq, &grace) < 0 || grace < 0)) {
        bad_request(r, "gracePeriodSeconds: must be a non-negative integer");
        goto out;
    }
    kd_store_lock(api->st);
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    const char *pre_rv = jstr(json_object_get(opts, "preconditions"), "resourceVersion");
    const char *pre_uid = jstr(json_object_get(opts, "preconditions"), "uid");
    if (cur != NULL && ((pre_rv != NULL && strcmp(pre_rv, jstr(json_object_get(cur, "metadata"),
                                                               "resourceVersion")) != 0) ||
                        (pre_uid != NULL &&
                         strcmp(pre_uid, jstr(json_object_get(cur, "metadata"), "uid")) != 0))) {
        kd_store_unlock(api->st);
        conflict(r, t->rt, t->name);
        goto out;
    }
    int rc = dry_run(r) ? (cur != NULL ? 0 : KD_ENOTFOUND)
                        : begin_delete(api, t->rt, t->ns, t->name, policy, grace, &out, &gone);
    if (dry_run(r) && cur != NULL)
        out = json_incref(cur);
    kd_store_unlock(api->st);
    if (rc == KD_ENOTFOUND) {
        not_found(r, t->rt, t->name);
        goto out;
    }
    if (rc != 0) {
        respond_status(r, 500, "InternalError", "the journal write failed", NULL);
        goto out;
    }
    /* Gone at once: a Status, as kube-apiserver answers (pods, graceful, return the object). */
    if (gone && strcmp(t->rt->resource, "pods") != 0) {
        json_t *d = details_for(t->rt, t->name, t->rt->resource);
        json_object_set(d, "uid", json_object_get(json_object_get(out, "metadata"), "uid"));
        respond_status(r, 200, "", "", d);
        goto out;
    }
    json_t *p = present(t->rt, out);
    kd_http_respond_json(r, gone ? 200 : 200, p);
    json_decref(p);
out:
    json_decref(out);
    json_decref(opts);
}

static void do_delete_collection(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    struct kd_selector *ls = NULL, *fs = NULL;
    json_t *opts = NULL;
    json_t *deleted = json_array();
    if (parse_selectors(r, t, &ls, &fs) != 0)
        goto out;
    const char *policy = delete_policy(r, &opts);
    if (!valid_policy(policy)) {
        bad_request(r, "propagationPolicy: must be Foreground, Background or Orphan");
        goto out;
    }
    kd_store_lock(api->st);
    json_t **items = NULL;
    size_t n = kd_store_list(api->st, t->rt->gr, t->ns, &items);
    json_t *names = json_array();
    for (size_t i = 0; i < n; i++) {
        if (matches(ls, fs, items[i]))
            json_array_append(names, json_object_get(items[i], "metadata"));
    }
    free(items);
    size_t i;
    json_t *m;
    json_array_foreach(names, i, m)
    {
        json_t *out = NULL;
        bool gone;
        if (dry_run(r))
            continue;
        if (begin_delete(api, t->rt, jstr(m, "namespace"), jstr(m, "name"), policy, -1, &out,
                         &gone) == 0 &&
            out != NULL)
            json_array_append_new(deleted, present(t->rt, out));
        json_decref(out);
    }
    json_decref(names);
    uint64_t rv = kd_store_rv(api->st);
    kd_store_unlock(api->st);
    char av[256], rvs[32];
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    char *lk = kd_xasprintf("%sList", t->rt->kind);
    json_t *list = json_pack("{s:s,s:s,s:{s:s},s:O}", "kind", lk, "apiVersion",
                             kd_restype_api_version(t->rt, av, sizeof(av)), "metadata",
                             "resourceVersion", rvs, "items", deleted);
    free(lk);
    kd_http_respond_json(r, 200, list);
    json_decref(list);
out:
    json_decref(deleted);
    json_decref(opts);
    kd_selector_free(ls);
    kd_selector_free(fs);
}

/* ---- garbage collector ------------------------------------------------------------------------
 */

/* One pass (lock held): dependents of deleted owners, foreground/orphan finalizers, namespaces. */
static size_t gc_pass(struct kd_api *api)
{
    const char **grs = NULL;
    size_t ng = kd_store_kinds(api->st, &grs);
    /* Collect every object's uid into a sorted array for lookups. */
    json_t *uids = json_object();
    for (size_t g = 0; g < ng; g++) {
        json_t **items = NULL;
        size_t n = kd_store_list(api->st, grs[g], NULL, &items);
        for (size_t i = 0; i < n; i++) {
            const char *uid = jstr(json_object_get(items[i], "metadata"), "uid");
            if (uid != NULL)
                json_object_set(uids, uid, items[i]);
        }
        free(items);
    }
    json_t *work = json_array(); /* [gr, ns, name, action, owner uid] */
    for (size_t g = 0; g < ng; g++) {
        json_t **items = NULL;
        size_t n = kd_store_list(api->st, grs[g], NULL, &items);
        for (size_t i = 0; i < n; i++) {
            json_t *o = items[i];
            const json_t *m = json_object_get(o, "metadata");
            const json_t *refs = json_object_get(m, "ownerReferences");
            size_t j;
            json_t *ref;
            size_t live = 0, dead = 0;
            bool foreground_owner = false;
            json_array_foreach(refs, j, ref)
            {
                json_t *owner = json_object_get(uids, jstr(ref, "uid") ? jstr(ref, "uid") : "");
                if (owner == NULL) {
                    dead++;
                } else {
                    live++;
                    if (json_object_get(json_object_get(owner, "metadata"), "deletionTimestamp") !=
                            NULL &&
                        has_finalizer(owner, "foregroundDeletion"))
                        foreground_owner = true;
                }
            }
            if (json_array_size(refs) > 0 && (live == 0 || foreground_owner) &&
                json_object_get(m, "deletionTimestamp") == NULL)
                json_array_append_new(work,
                                      json_pack("[s,s,s,s]", grs[g],
                                                jstr(m, "namespace") ? jstr(m, "namespace") : "",
                                                jstr(m, "name"), "delete"));
            else if (dead > 0 && live > 0)
                json_array_append_new(work,
                                      json_pack("[s,s,s,s]", grs[g],
                                                jstr(m, "namespace") ? jstr(m, "namespace") : "",
                                                jstr(m, "name"), "prune"));
            if (json_object_get(m, "deletionTimestamp") != NULL &&
                (has_finalizer(o, "foregroundDeletion") || has_finalizer(o, "orphan") ||
                 strcmp(grs[g], "/namespaces") == 0))
                json_array_append_new(work,
                                      json_pack("[s,s,s,s]", grs[g],
                                                jstr(m, "namespace") ? jstr(m, "namespace") : "",
                                                jstr(m, "name"), "finish"));
        }
        free(items);
    }
    size_t w;
    json_t *job;
    json_array_foreach(work, w, job)
    {
        const char *gr = json_string_value(json_array_get(job, 0));
        const char *ns = json_string_value(json_array_get(job, 1));
        const char *name = json_string_value(json_array_get(job, 2));
        const char *action = json_string_value(json_array_get(job, 3));
        const char *nsarg = ns[0] != '\0' ? ns : NULL;
        json_t *cur = kd_store_get(api->st, gr, nsarg, name);
        if (cur == NULL)
            continue;
        struct kd_restype *rt = NULL;
        for (struct kd_restype *x = kd_registry_first(api->reg); x != NULL; x = x->next) {
            if (strcmp(x->gr, gr) == 0) {
                rt = x;
                break;
            }
        }
        if (rt == NULL)
            continue;
        if (strcmp(action, "delete") == 0) {
            json_t *out = NULL;
            bool gone;
            if (begin_delete(api, rt, nsarg, name, "Background", -1, &out, &gone) == 0)
                KD_INFO("garbage collected", "resource=%s namespace=%s name=%s", rt->resource,
                        kd_logq(ns), kd_logq(name));
            json_decref(out);
        } else if (strcmp(action, "prune") == 0) {
            json_t *next = json_deep_copy(cur);
            json_t *refs = json_object_get(meta(next), "ownerReferences");
            for (size_t j = 0; j < json_array_size(refs);) {
                const char *uid = jstr(json_array_get(refs, j), "uid");
                if (json_object_get(uids, uid ? uid : "") == NULL)
                    json_array_remove(refs, j);
                else
                    j++;
            }
            if (kd_store_put(api->st, gr, nsarg, name, next, NULL) != 0)
                KD_WARN("gc: write failed", "name=%s", kd_logq(name));
        } else {
            /* finish: foreground waits for dependents; orphan strips references first. */
            const char *uid = jstr(json_object_get(cur, "metadata"), "uid");
            bool is_ns = strcmp(gr, "/namespaces") == 0;
            size_t remaining = 0;
            bool orphan = has_finalizer(cur, "orphan");
            for (size_t g = 0; g < ng; g++) {
                json_t **items = NULL;
                size_t n = kd_store_list(api->st, grs[g], is_ns ? name : NULL, &items);
                if (is_ns) {
                    struct kd_restype *drt = NULL;
                    for (struct kd_restype *x = kd_registry_first(api->reg); x != NULL; x = x->next)
                        if (strcmp(x->gr, grs[g]) == 0 && x->namespaced)
                            drt = x;
                    for (size_t i = 0; drt != NULL && i < n; i++) {
                        json_t *o = json_incref(items[i]);
                        const json_t *m = json_object_get(o, "metadata");
                        json_t *out = NULL;
                        bool gone;
                        if (begin_delete(api, drt, name, jstr(m, "name"), NULL, -1, &out, &gone) ==
                                0 &&
                            !gone)
                            remaining++;
                        json_decref(out);
                        json_decref(o);
                    }
                    free(items);
                    continue;
                }
                for (size_t i = 0; i < n; i++) {
                    json_t *o = items[i];
                    const json_t *m = json_object_get(o, "metadata");
                    size_t j;
                    json_t *ref;
                    bool dep = false;
                    json_array_foreach(json_object_get(m, "ownerReferences"), j, ref)
                    {
                        if (uid != NULL && jstr(ref, "uid") != NULL &&
                            strcmp(jstr(ref, "uid"), uid) == 0)
                            dep = true;
                    }
                    if (!dep)
                        continue;
                    if (orphan) {
                        json_t *next = json_deep_copy(o);
                        json_t *refs = json_object_get(meta(next), "ownerReferences");
                        for (size_t k = 0; k < json_array_size(refs);) {
                            const char *u = jstr(json_array_get(refs, k), "uid");
                            if (u != NULL && strcmp(u, uid) == 0)
                                json_array_remove(refs, k);
                            else
                                k++;
                        }
                        if (json_array_size(refs) == 0)
                            json_object_del(meta(next), "ownerReferences");
                        if (kd_store_put(api->st, grs[g], jstr(m, "namespace"), jstr(m, "name"),
                                         next, NULL) != 0)
                            remaining++;
                    } else {
                        remaining++;
                    }
                }
                free(items);
            }
            if (remaining > 0)
                continue;
            json_t *next = json_deep_copy(kd_store_get(api->st, gr, nsarg, name));
            json_t *fins = json_object_get(meta(next), "finalizers");
            for (size_t k = 0; k < json_array_size(fins);) {
                const char *f = json_string_value(json_array_get(fins, k));
                if (f != NULL && (strcmp(f, "orphan") == 0 || strcmp(f, "foregroundDeletion") == 0))
                    json_array_remove(fins, k);
                else
                    k++;
            }
            if (is_ns)
                json_object_set_new(next, "spec", json_object());
            if (json_array_size(fins) == 0) {
                json_decref(next);
                int rc = remove_object(api, rt, nsarg, name, NULL);
                if (rc == 0)
                    KD_INFO("deleted after finalization", "resource=%s name=%s", rt->resource,
                            kd_logq(name));
            } else if (kd_store_put(api->st, gr, nsarg, name, next, NULL) != 0) {
                KD_WARN("gc: write failed", "name=%s", kd_logq(name));
            }
        }
        /* grs may now point at freed tables only if a kind emptied; refresh next pass. */
    }
    size_t pending = json_array_size(work);
    json_decref(work);
    json_decref(uids);
    free(grs);
    return pending;
}

static void *gc_main(void *p)
{
    struct kd_api *api = p;
    uint64_t seen = UINT64_MAX;
    size_t pending = 0;
    int64_t next_expiry = kd_mono_ms() + 60000;
    while (!atomic_load(&api->stop)) {
        kd_store_lock(api->st);
        if (kd_mono_ms() >= next_expiry) {
            /* Events live an hour, as with kube-apiserver's default --event-ttl. */
            int n = kd_events_expire(api->st, 3600);
            if (n > 0)
                KD_INFO("expired events", "count=%d", n);
            next_expiry = kd_mono_ms() + 60000;
        }
        /* A full pass only when something it acts on changed, or work is left over. */
        uint64_t hint = kd_store_gc_hint(api->st);
        if (hint != seen || pending > 0) {
            seen = hint;
            pending = gc_pass(api);
        }
        kd_store_unlock(api->st);
        kd_sleep_ms(api->gc_ms);
    }
    return NULL;
}

/* ---- pods/log ------------------------------------------------------------------------ */

/* The run of a container a pods/log follow watches (logstream.h's callback data). */
struct logrun {
    struct kd_api *api;
    char *ns, *pod, *uid, *container;
    int run;
};

static void logrun_free(void *p)
{
    struct logrun *l = p;
    if (l == NULL)
        return;
    free(l->ns);
    free(l->pod);
    free(l->uid);
    free(l->container);
    free(l);
}

/* The status entry of a container, borrowed from pod. */
static const json_t *container_status(const json_t *pod, const char *name)
{
    static const char *const lists[] = {"containerStatuses", "initContainerStatuses"};
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(json_object_get(pod, "status"), lists[l]), i, s)
        {
            if (strcmp(jstr(s, "name") ? jstr(s, "name") : "", name) == 0)
                return s;
        }
    }
    return NULL;
}

/* Is this run of the container still running (so a follow must wait for more)? */
static enum kd_logstream_state logrun_state(void *ud)
{
    struct logrun *l = ud;
    if (atomic_load(&l->api->stop))
        return KD_LOGSTREAM_STOP;
    kd_store_lock(l->api->st);
    json_t *pod = kd_store_get(l->api->st, "/pods", l->ns, l->pod);
    bool live = false;
    if (pod != NULL && strcmp(jstr(json_object_get(pod, "metadata"), "uid")
                                  ? jstr(json_object_get(pod, "metadata"), "uid")
                                  : "",
                              l->uid) == 0) {
        const json_t *cs = container_status(pod, l->container);
        live = cs != NULL &&
               json_integer_value(json_object_get(cs, "restartCount")) == (json_int_t)l->run &&
               json_object_get(json_object_get(cs, "state"), "terminated") == NULL;
    }
    kd_store_unlock(l->api->st);
    return live ? KD_LOGSTREAM_LIVE : KD_LOGSTREAM_ENDED;
}

/*
 * A pod on a node agent (its Node has daemonEndpoints.kubeletEndpoint.Port):
 * answer from that node's kubelet API, as kube-apiserver does. False when
 * the pod is on kdet-local's own node.
 */
static bool node_agent_log(struct kd_api *api, struct kd_http_req *r, const json_t *pod,
                           const struct target *t, const char *container)
{
    const char *nn = jstr(json_object_get(pod, "spec"), "nodeName");
    char *url = NULL;
    struct kd_logproxy *lp = NULL;
    int port = 0;
    if (nn == NULL)
        return false;
    kd_store_lock(api->st);
    json_t *node = kd_store_get(api->st, "/nodes", NULL, nn);
    json_t *ep = json_object_get(
        json_object_get(json_object_get(node, "status"), "daemonEndpoints"), "kubeletEndpoint");
    port = (int)json_integer_value(json_object_get(ep, "Port"));
    kd_store_unlock(api->st);
    if (port <= 0 || port > 65535)
        return false;
    struct kd_buf b = KD_BUF_INIT(8192);
    int e = kd_buf_printf(&b, "https://127.0.0.1:%d/containerLogs/%s/%s/%s?x=1", port, t->ns,
                          t->name, container);
    static const char *const keys[] = {"follow", "previous", "tailLines", "limitBytes", NULL};
    for (const char *const *k = keys; *k != NULL && e == 0; k++) {
        const char *v = kd_http_query(r, *k);
        if (v != NULL && strlen(v) < 32 && strspn(v, "0123456789truefalsTRUEFALS") == strlen(v))
            e = kd_buf_printf(&b, "&%s=%s", *k, v);
    }
    if (e != 0) {
        bad_request(r, "log request too long");
        goto out;
    }
    url = kd_xstrdup(kd_buf_str(&b));
    int http = 0;
    char err[KD_ERRLEN] = "";
    if (kd_logproxy_open(url, &lp, &http, err) != 0) {
        char *msg = kd_http_printf(r, "Get \"%s\": %s", url, err);
        json_t *st = json_pack("{s:s,s:s,s:{},s:s,s:s,s:i}", "kind", "Status", "apiVersion", "v1",
                               "metadata", "status", "Failure", "message", msg, "code", 500);
        kd_http_respond_json(r, 500, st);
        json_decref(st);
        goto out;
    }
    kd_http_respond_stream(r, http, "text/plain", kd_logproxy_read, lp, kd_logproxy_free);
    lp = NULL;
out:
    kd_buf_free(&b);
    kd_logproxy_free(lp);
    free(url);
    return true;
}

static void do_log(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    const char *container = kd_http_query(r, "container");
    bool follow = is_true(kd_http_query(r, "follow"));
    bool previous = is_true(kd_http_query(r, "previous"));
    int64_t tail = -1, limit = -1;
    const char *tq = kd_http_query(r, "tailLines");
    const char *lq = kd_http_query(r, "limitBytes");
    char msg[1024];
    if ((tq != NULL && (kd_parse_i64(tq, &tail) < 0 || tail < 0)) ||
        (lq != NULL && (kd_parse_i64(lq, &limit) < 0 || limit < 1))) {
        bad_request(r, "tailLines and limitBytes must be non-negative integers");
        return;
    }
    kd_store_lock(api->st);
    json_t *pod = kd_store_get(api->st, "/pods", t->ns, t->name);
    pod = pod != NULL ? json_incref(pod) : NULL;
    kd_store_unlock(api->st);
    struct logrun *l = NULL;
    char *path = NULL;
    if (pod == NULL) {
        not_found(r, t->rt, t->name);
        goto out;
    }
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *ctrs = json_object_get(spec, "containers");
    if (container == NULL || container[0] == '\0') {
        if (json_array_size(ctrs) != 1) {
            struct kd_buf b = KD_BUF_INIT(4096);
            size_t i;
            json_t *c;
            int e = 0;
            json_array_foreach(ctrs, i, c) e =
                e ? e : kd_buf_printf(&b, "%s%s", i ? " " : "", jstr(c, "name"));
            snprintf(msg, sizeof(msg),
                     "a container name must be specified for pod %s, choose one of: [%s]", t->name,
                     kd_buf_str(&b));
            kd_buf_free(&b);
            bad_request(r, msg);
            goto out;
        }
        container = jstr(json_array_get(ctrs, 0), "name");
    }
    const json_t *cs = container_status(pod, container);
    bool known = false;
    static const char *const lists[] = {"containers", "initContainers"};
    for (size_t li = 0; li < 2; li++) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(spec, lists[li]), i, c)
        {
            known = known || strcmp(jstr(c, "name") ? jstr(c, "name") : "", container) == 0;
        }
    }
    if (!known) {
        snprintf(msg, sizeof(msg), "container %s is not valid for pod %s", container, t->name);
        bad_request(r, msg);
        goto out;
    }
    if (node_agent_log(api, r, pod, t, container))
        goto out;
    int restarts = (int)json_integer_value(json_object_get(cs, "restartCount"));
    const json_t *waiting = json_object_get(json_object_get(cs, "state"), "waiting");
    if (api->state_dir == NULL || cs == NULL || (waiting != NULL && restarts == 0 && !previous) ||
        jstr(cs, "containerID") == NULL) {
        const char *why = jstr(waiting, "reason") ? jstr(waiting, "reason") : "ContainerCreating";
        snprintf(msg, sizeof(msg), "container \"%s\" in pod \"%s\" is waiting to start: %s",
                 container, t->name, why);
        bad_request(r, msg);
        goto out;
    }
    int run = restarts;
    if (previous || (waiting != NULL && restarts > 0))
        run = restarts - 1;
    if (previous && json_object_get(cs, "lastState") != NULL &&
        json_object_get(json_object_get(cs, "lastState"), "terminated") == NULL) {
        run = -1;
    }
    if (run < 0) {
        snprintf(msg, sizeof(msg), "previous terminated container \"%s\" in pod \"%s\" not found",
                 container, t->name);
        bad_request(r, msg);
        goto out;
    }
    l = kd_xcalloc(1, sizeof(*l));
    l->api = api;
    l->ns = kd_xstrdup(t->ns);
    l->pod = kd_xstrdup(t->name);
    l->uid = kd_xstrdup(jstr(json_object_get(pod, "metadata"), "uid"));
    l->container = kd_xstrdup(container);
    l->run = run;
    path = kd_kubelet_log_path(api->state_dir, l->uid, container, run);
    if (path == NULL) {
        snprintf(msg, sizeof(msg), "container %.200s is not valid for pod %s", container, t->name);
        bad_request(r, msg);
        goto out;
    }
    struct kd_logstream_opts lo = {.path = path,
                                   .follow = follow && !previous,
                                   .tail = tail,
                                   .limit = limit,
                                   .state = logrun_state,
                                   .ud = l,
                                   .free_ud = logrun_free};
    l = NULL;
    kd_logstream_respond(r, &lo);
out:
    free(path);
    logrun_free(l);
    json_decref(pod);
}

/*
 * POST pods/NAME/binding: how a scheduler other than the built-in one (a
 * batch scheduler such as Volcano) assigns a pod to a node. As in
 * kube-apiserver, it sets spec.nodeName once and PodScheduled=True; a pod
 * already assigned, or being deleted, is a 409 Conflict.
 */
static void do_binding(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    json_t *b = body_object(r);
    if (b == NULL)
        return;
    const char *node = jstr(json_object_get(b, "target"), "name");
    if (node == NULL || node[0] == '\0') {
        json_decref(b);
        bad_request(r, "Binding target.name: Required value");
        return;
    }
    kd_store_lock(api->st);
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    if (cur == NULL) {
        kd_store_unlock(api->st);
        json_decref(b);
        not_found(r, t->rt, t->name);
        return;
    }
    const char *bound = jstr(json_object_get(cur, "spec"), "nodeName");
    char msg[700];
    if ((bound != NULL && bound[0] != '\0') || jstr(meta(cur), "deletionTimestamp") != NULL) {
        snprintf(msg, sizeof(msg),
                 bound != NULL && bound[0] != '\0'
                     ? "Operation cannot be fulfilled on pods/binding \"%s\": "
                       "pod %s is already assigned to node \"%s\""
                     : "Operation cannot be fulfilled on pods/binding \"%s\": "
                       "pod %s is being deleted, cannot be assigned to a host%s",
                 t->name, t->name, bound != NULL ? bound : "");
        kd_store_unlock(api->st);
        json_decref(b);
        respond_status(r, 409, "Conflict", msg, details_for(t->rt, t->name, "pods/binding"));
        return;
    }
    json_t *next = json_deep_copy(cur);
    json_object_set_new(json_object_get(next, "spec"), "nodeName", json_string(node));
    json_t *st = json_object_get(next, "status");
    if (!json_is_object(st)) {
        st = json_pack("{s:s}", "phase", "Pending");
        json_object_set_new(next, "status", st);
    }
    json_t *conds = json_array(), *c;
    size_t i;
    char now[40];
    json_array_foreach(json_object_get(st, "conditions"), i, c)
    {
        if (strcmp(jstr(c, "type") ? jstr(c, "type") : "", "PodScheduled") != 0)
            json_array_append(conds, c);
    }
    kd_time_rfc3339(kd_wall_ms(), 0, now, sizeof(now));
    json_array_append_new(conds, json_pack("{s:s,s:s,s:n,s:s}", "type", "PodScheduled", "status",
                                           "True", "lastProbeTime", "lastTransitionTime", now));
    json_object_set_new(st, "conditions", conds);
    int rc = kd_store_put(api->st, t->rt->gr, t->ns, t->name, next, NULL);
    kd_store_unlock(api->st);
    if (rc == 0)
        KD_INFO("pod bound", "namespace=%s pod=%s node=%s by=binding", kd_logq(t->ns),
                kd_logq(t->name), kd_logq(node));
    json_decref(b); /* node points into it */
    if (rc != 0)
        respond_status(r, 500, "InternalError", "the pod could not be stored", NULL);
    else
        respond_status(r, 201, "", "", NULL);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static bool authorized(struct kd_api *api, struct kd_http_req *r)
{
    if (api->token == NULL)
        return false; /* kd_api_start refuses to run without one: fail closed all the same */
    const char *h = kd_http_header(r, "Authorization");
    if (h == NULL || !kd_str_has_prefix(h, "Bearer "))
        return false;
    const char *got = h + 7;
    size_t n = strlen(api->token);
    return strlen(got) == n && CRYPTO_memcmp(got, api->token, n) == 0;
}

static void method_not_allowed(struct kd_http_req *r)
{
    respond_status(r, 405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource", NULL);
}

static void serve_resource(struct kd_api *api, struct kd_http_req *r, const struct target *t)
{
    const char *m = kd_http_method(r);
    bool get = strcmp(m, "GET") == 0;
    if (t->sub != NULL) {
        if (strcmp(t->sub, "log") == 0 && t->rt->has_log && get) {
            do_log(api, r, t);
            return;
        }
        if (strcmp(t->sub, "binding") == 0 && t->rt->builtin &&
            strcmp(t->rt->resource, "pods") == 0 && t->name != NULL) {
            if (strcmp(m, "POST") == 0)
                do_binding(api, r, t);
            else
                method_not_allowed(r);
            return;
        }
        if (strcmp(t->sub, "status") == 0 && t->rt->has_status) {
            if (get)
                do_get(api, r, t);
            else if (strcmp(m, "PUT") == 0)
                do_update(api, r, t, true);
            else if (strcmp(m, "PATCH") == 0)
                do_patch(api, r, t, true);
            else
                method_not_allowed(r);
            return;
        }
        respond_status(r, 404, "NotFound", "the server could not find the requested resource",
                       json_object());
        return;
    }
    if (t->name == NULL) {
        if (get && (t->watch_path || is_true(kd_http_query(r, "watch"))))
            do_watch(api, r, t);
        else if (get)
            do_list(api, r, t);
        else if (strcmp(m, "POST") == 0)
            do_create(api, r, t);
        else if (strcmp(m, "DELETE") == 0)
            do_delete_collection(api, r, t);
        else
            method_not_allowed(r);
        return;
    }
    if (get && t->watch_path)
        do_watch(api, r, t);
    else if (get)
        do_get(api, r, t);
    else if (strcmp(m, "PUT") == 0)
        do_update(api, r, t, false);
    else if (strcmp(m, "PATCH") == 0)
        do_patch(api, r, t, false);
    else if (strcmp(m, "DELETE") == 0)
        do_delete(api, r, t);
    else
        method_not_allowed(r);
}

static void handle(struct kd_http_req *r, void *ud)
{
    struct kd_api *api = ud;
    const char *path = kd_http_path(r);
    int64_t t0 = kd_mono_ms();
    char *segs[MAX_SEGS];
    size_t n = split(r, path, segs, MAX_SEGS);
    if (n == 1 && (strcmp(segs[0], "healthz") == 0 || strcmp(segs[0], "livez") == 0 ||
                   strcmp(segs[0], "readyz") == 0)) {
        kd_http_respond(r, 200, "text/plain", "ok", 2);
        goto out;
    }
    if (!authorized(api, r)) {
        respond_status(r, 401, "Unauthorized", "Unauthorized", NULL);
        goto out;
    }
    if (n == 1 && strcmp(segs[0], "version") == 0) {
        serve_version(r);
        goto out;
    }
    if (n >= 2 && strcmp(segs[0], "openapi") == 0 && strcmp(segs[1], "v3") == 0) {
        serve_openapi(api, r, segs, n);
        goto out;
    }
    if (n >= 1 && (strcmp(segs[0], "api") == 0 || strcmp(segs[0], "apis") == 0)) {
        bool core = strcmp(segs[0], "api") == 0;
        size_t disc = core ? 2 : 3;
        if (n <= disc) {
            if (strcmp(kd_http_method(r), "GET") != 0)
                method_not_allowed(r);
            else
                serve_discovery(api, r, segs, n);
            goto out;
        }
        const char *group = core ? "" : segs[1];
        const char *version = core ? segs[1] : segs[2];
        struct target t;
        if (resolve_target(api, r, group, version, segs + disc, n - disc, &t) != 0) {
            respond_status(r, 404, "NotFound", "the server could not find the requested resource",
                           json_object());
            goto out;
        }
        serve_resource(api, r, &t);
        goto out;
    }
    respond_status(r, 404, "NotFound", "the server could not find the requested resource",
                   json_object());
out:
    KD_DEBUG("request", "method=%s path=%s ms=%lld", kd_http_method(r), kd_logq(path),
             (long long)(kd_mono_ms() - t0));
}

/* ---- lifecycle --------------------------------------------------------------------------------
 */

static int ensure_namespace(struct kd_api *api, const char *name)
{
    if (kd_store_get(api->st, "/namespaces", NULL, name) != NULL)
        return 0;
    char uid[40], now[40];
    new_uid(uid, sizeof(uid));
    now_rfc3339(now, sizeof(now));
    json_t *ns = json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:{s:s}},s:{s:[s]},s:{s:s}}", "kind",
                           "Namespace", "apiVersion", "v1", "metadata", "name", name, "uid", uid,
                           "creationTimestamp", now, "labels", "kubernetes.io/metadata.name", name,
                           "spec", "finalizers", "kubernetes", "status", "phase", "Active");
    return kd_store_put(api->st, "/namespaces", NULL, name, ns, NULL);
}

/*
 * Every namespace has a ServiceAccount "default", as kube-controller-manager's
 * service-account controller makes it (no token: kdet-local has no
 * service-account admission). Lock held.
 */
static int ensure_default_sa(struct kd_api *api, const char *ns)
{
    if (kd_store_get(api->st, "/serviceaccounts", ns, "default") != NULL)
        return 0;
    char uid[40], now[40];
    new_uid(uid, sizeof(uid));
    now_rfc3339(now, sizeof(now));
    json_t *sa = json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:s}}", "kind", "ServiceAccount", "apiVersion",
                           "v1", "metadata", "name", "default", "namespace", ns, "uid", uid,
                           "creationTimestamp", now);
    return kd_store_put(api->st, "/serviceaccounts", ns, "default", sa, NULL);
}

int kd_api_start(const struct kd_api_opts *opts, struct kd_store *st, struct kd_api **out,
                 char *err)
{
    int rc = 0;
    *out = NULL;
    if (opts->token == NULL || opts->token[0] == '\0')
        return kd_seterr(err, KD_EINVAL,
                         "a bearer token is required: kdet-local serves no anonymous client");
    struct kd_api *api = kd_xcalloc(1, sizeof(*api));
    api->st = st;
    api->reg = kd_registry_new();
    api->token = opts->token != NULL && opts->token[0] != '\0' ? kd_xstrdup(opts->token) : NULL;
    api->state_dir = opts->state_dir != NULL ? kd_xstrdup(opts->state_dir) : NULL;
    api->bookmark_ms = opts->bookmark_ms > 0 ? opts->bookmark_ms : 60000;
    api->gc_ms = opts->gc_interval_ms > 0 ? opts->gc_interval_ms : 200;
    kd_store_lock(st);
    static const char *const base_ns[] = {"default", "kube-system", "kube-public",
                                          "kube-node-lease"};
    for (size_t i = 0; i < 4 && rc == 0; i++)
        rc = ensure_namespace(api, base_ns[i]);
    json_t **nss = NULL;
    size_t nns = kd_store_list(st, "/namespaces", NULL, &nss);
    for (size_t i = 0; i < nns && rc == 0; i++) {
        const json_t *md = json_object_get(nss[i], "metadata");
        if (json_object_get(md, "deletionTimestamp") == NULL)
            rc = ensure_default_sa(api, jstr(md, "name"));
    }
    free(nss);
    json_t **crds = NULL;
    size_t n = kd_store_list(st, "apiextensions.k8s.io/customresourcedefinitions", NULL, &crds);
    for (size_t i = 0; i < n; i++) {
        char e[KD_ERRLEN];
        if (kd_registry_apply_crd(api->reg, crds[i], e) != 0)
            KD_WARN("stored CRD not served", "err=%s", kd_logq(e));
    }
    free(crds);
    kd_store_unlock(st);
    if (rc != 0) {
        kd_seterr(err, rc, "cannot write the default namespaces: %s", kd_strerror(rc));
        goto out;
    }
    struct kd_http_opts ho = {.bind_addr = "127.0.0.1",
                              .port = opts->port,
                              .max_body = opts->max_body,
                              .handler = handle,
                              .ud = api,
                              .tls_cert_pem = opts->tls_cert_pem,
                              .tls_key_pem = opts->tls_key_pem};
    rc = kd_http_start(&ho, &api->http, err);
    if (rc != 0)
        goto out;
    if (pthread_create(&api->gc, NULL, gc_main, api) != 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot start the garbage collector thread");
        goto out;
    }
    api->gc_started = true;
    *out = api;
    api = NULL;
out:
    kd_api_stop(api);
    return rc;
}

int kd_api_port(const struct kd_api *api)
{
    return kd_http_port(api->http);
}

void kd_api_stop(struct kd_api *api)
{
    if (api == NULL)
        return;
    atomic_store(&api->stop, true);
    kd_store_lock(api->st);
    kd_store_broadcast(api->st);
    kd_store_unlock(api->st);
    kd_http_stop(api->http);
    if (api->gc_started)
        pthread_join(api->gc, NULL);
    kd_registry_free(api->reg);
    free(api->token);
    free(api->state_dir);
    free(api);
}
