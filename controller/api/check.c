/*
 * Request checks of the API that read nothing but the request (check.h):
 * routing, bearer tokens, body caps and the worker and user routes' JSON
 * bodies. Kept apart from the handlers, which read and write the store and
 * the Kubernetes API, so that every check can be fed arbitrary input
 * (tests/fuzz/fuzz_api.c) and so that a message names its field the same
 * way on every route.
 */
#include "api/check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/str.h"
#include "core/time.h"
#include "k8s/jobupdate.h"
#include "storage/checkpoint.h"

/* Fill e (status, field, message) and return the status. */
static int refuse(struct api_verr *e, int status, const char *field, const char *fmt, ...)
    KD_PRINTF(4, 5);
static int refuse(struct api_verr *e, int status, const char *field, const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    snprintf(e->field, sizeof(e->field), "%s", field != NULL ? field : "");
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return status;
}

/* ---- routes, tokens, caps ------------------------------------------------------------------ */

static bool match(const char *pattern, const struct api_match *m)
{
    int n = 0;
    const char *p = pattern;
    while (*p != '\0') {
        const char *slash = strchr(p, '/');
        size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
        if (n >= m->nseg)
            return false;
        if (!(len == 1 && p[0] == '*') &&
            (strlen(m->seg[n]) != len || memcmp(m->seg[n], p, len) != 0))
            return false;
        n++;
        p += len;
        if (*p == '/')
            p++;
    }
    return n == m->nseg;
}

const struct api_route *api_route_find(const struct api_route *routes, size_t n, const char *method,
                                       char *path, struct api_match *m)
{
    const struct api_route *hit = NULL;
    char *save = NULL;
    m->nseg = 0;
    m->allow[0] = '\0';
    for (char *s = strtok_r(path, "/", &save); s != NULL; s = strtok_r(NULL, "/", &save)) {
        if (m->nseg == API_MAX_SEGS) {
            m->nseg = 0;
            return NULL;
        }
        m->seg[m->nseg++] = s;
    }
    for (size_t i = 0; i < n; i++) {
        if (!match(routes[i].pattern, m))
            continue;
        if (strcmp(routes[i].method, method) == 0 ||
            (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0)) {
            hit = &routes[i];
        } else if (strstr(m->allow, routes[i].method) == NULL) {
            size_t used = strlen(m->allow);
            snprintf(m->allow + used, sizeof(m->allow) - used, "%s%s", used > 0 ? ", " : "",
                     routes[i].method);
        }
    }
    return hit;
}

int api_route_ns_seg(const char *pattern)
{
    static const char pfx[] = "api/v1/namespaces/*/";
    return strncmp(pattern, pfx, sizeof(pfx) - 1) == 0 ? 3 : -1;
}

int api_authz_attrs(const char *method, const char *pattern, const char *const *seg, int nseg,
                    struct api_authz_attrs *out)
{
    static const char pfx[] = "api/v1/namespaces/*/";
    memset(out, 0, sizeof(*out));
    if (strncmp(pattern, pfx, sizeof(pfx) - 1) != 0)
        return KD_EINVAL;
    /* The pattern's parts after the namespace: resource, name, then what is below it. */
    const char *rest = pattern + sizeof(pfx) - 1;
    const char *slash = strchr(rest, '/');
    size_t rlen = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    if (rlen == 0 || rlen >= sizeof(out->resource))
        return KD_EINVAL;
    memcpy(out->resource, rest, rlen);
    bool one = slash != NULL; /* "resource/<name>..." names an object */
    const char *below = one ? strchr(slash + 1, '/') : NULL;
    below = below != NULL ? below + 1 : NULL; /* "logs", "logs/stream", "versions", "pause" */
    if (one && nseg > 5 && seg[5] != NULL)
        snprintf(out->name, sizeof(out->name), "%s", seg[5]);
    const char *verb;
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        verb = one ? "get" : "list";
        if (below != NULL && strncmp(below, "logs", 4) == 0)
            snprintf(out->subresource, sizeof(out->subresource), "logs");
        else if (kd_str_has_suffix(pattern, "/download"))
            snprintf(out->subresource, sizeof(out->subresource), "download");
    } else if (strcmp(method, "POST") == 0) {
        if (!one)
            verb = "create";
        else if (kd_str_has_suffix(pattern, "/download-link")) {
            verb = "get"; /* a link only stands for the caller in a download */
            snprintf(out->subresource, sizeof(out->subresource), "download");
        } else if (below != NULL && strcmp(below, "proxy-ticket") == 0) {
            verb = "create";
            snprintf(out->subresource, sizeof(out->subresource), "proxy");
        } else
            verb = "update";
    } else if (strcmp(method, "DELETE") == 0)
        verb = below == NULL ? "delete" : "update";
    else
        verb = "update"; /* PATCH, PUT */
    snprintf(out->verb, sizeof(out->verb), "%s", verb);
    return 0;
}

const char *api_bearer(const char *authorization)
{
    if (authorization == NULL || strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    const char *tok = authorization + 7;
    size_t n = strnlen(tok, API_MAX_TOKEN + 1);
    return n == 0 || n > API_MAX_TOKEN ? NULL : tok;
}

int api_body_cap(const struct api_route *r, const char *method, const char *path, const char *cl,
                 unsigned long long *len, struct api_verr *e)
{
    *len = cl != NULL ? strtoull(cl, NULL, 10) : 0;
    if (*len > r->max_body && r->max_body == 0)
        return refuse(e, 413, "body", "%s %s takes no request body; %llu bytes were announced",
                      method, path, *len);
    if (*len > r->max_body)
        return refuse(e, 413, "body",
                      "the request body is %llu bytes; %s %s accepts at most %zu bytes (%zu KiB)",
                      *len, method, path, r->max_body, r->max_body >> 10);
    return 0;
}

/* ---- JSON bodies --------------------------------------------------------------------------- */

int api_check_json(const char *body, size_t len, size_t cap, json_t **out, struct api_verr *e)
{
    json_error_t je;
    *out = NULL;
    if (len > cap)
        return refuse(e, 413, "body",
                      "the request body is %zu bytes; this endpoint accepts at most %zu", len, cap);
    if (len == 0)
        return refuse(e, 400, "body", "a JSON object is required");
    *out = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (*out == NULL)
        return refuse(e, 400, "body", "invalid JSON at line %d column %d: %s", je.line, je.column,
                      je.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return refuse(e, 400, "body", "must be a JSON object");
    }
    return 0;
}

int api_check_keys(const json_t *obj, const char *prefix, const char *const *allowed,
                   struct api_verr *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        bool ok = false;
        for (int i = 0; allowed[i] != NULL && !ok; i++)
            ok = strcmp(k, allowed[i]) == 0;
        if (!ok) {
            const char *s = kd_suggest(k, allowed);
            char field[300];
            /* An empty key is named as "", so that the field is never empty. */
            snprintf(field, sizeof(field), "%s%s", prefix, k[0] != '\0' ? k : "\"\"");
            return refuse(e, 400, field, "%s: unknown field%s%s%s", field,
                          s ? " (did you mean " : "", s ? s : "", s ? "?)" : "");
        }
    }
    return 0;
}

/* body[k]: absent when !required, else a string of 1 to max bytes. */
static int want_str(const json_t *body, const char *k, size_t max, bool required, const char **out,
                    struct api_verr *e)
{
    json_t *v = json_object_get(body, k);
    *out = json_string_value(v);
    if ((v != NULL || required) &&
        (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max))
        return refuse(e, 400, k, "%s: %s (a string of 1 to %zu bytes)", k,
                      v == NULL ? "required" : "invalid", max);
    return 0;
}

/* body[k]: an integer >= 0. */
static int want_i64(const json_t *body, const char *k, int64_t *out, struct api_verr *e)
{
    json_t *v = json_object_get(body, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return refuse(e, 400, k, "%s: %s", k,
                      v == NULL ? "required (an integer >= 0)" : "must be an integer >= 0");
    *out = json_integer_value(v);
    return 0;
}

/* ---- the worker routes --------------------------------------------------------------------- */

int api_check_metrics(const json_t *body, enum kd_metric_kind *kind, const char **key,
                      struct api_verr *e)
{
    static const char *const keys[] = {"kind", "key", "rows", NULL};
    int rc = api_check_keys(body, "", keys, e);
    if (rc != 0)
        return rc;
    const char *ks = json_string_value(json_object_get(body, "kind"));
    if (ks == NULL || kd_metric_kind_parse(ks, kind) != 0)
        return refuse(e, 400, "kind", "kind: %s",
                      "must be \"training\", \"validation\" or \"profiling\"");
    *key = json_string_value(json_object_get(body, "key"));
    if (*key == NULL)
        return refuse(e, 400, "key", "key: required (an idempotency key, reused when retrying)");
    return 0;
}

/* One row of a metrics batch; field is "rows[i]." on entry. */
static int check_row(const json_t *row, size_t i, const char *metric, const char *time_metric,
                     bool validation, struct kd_metric_row *out, struct api_verr *e)
{
    static const char *const row_keys[] = {"batches", "metrics", "reported_at", NULL};
    char field[400];
    int rc;
    snprintf(field, sizeof(field), "rows[%zu]", i);
    if (!json_is_object(row))
        return refuse(e, 400, field, "%s: must be an object", field);
    snprintf(field, sizeof(field), "rows[%zu].", i);
    if ((rc = api_check_keys(row, field, row_keys, e)) != 0)
        return rc;
    json_t *b = json_object_get(row, "batches"), *m = json_object_get(row, "metrics");
    json_t *ts = json_object_get(row, "reported_at");
    memset(out, 0, sizeof(*out));
    if (!json_is_integer(b) || json_integer_value(b) < 0) {
        snprintf(field, sizeof(field), "rows[%zu].batches", i);
        return refuse(e, 400, field, "%s: %s", field,
                      b == NULL ? "required (batches completed when measured)"
                                : "must be an integer >= 0");
    }
    if (!json_is_object(m)) {
        snprintf(field, sizeof(field), "rows[%zu].metrics", i);
        return refuse(e, 400, field, "%s: %s", field,
                      m == NULL ? "required (an object of metric names to values)"
                                : "must be an object of metric names to values");
    }
    if (ts != NULL &&
        (!json_is_string(ts) || kd_time_parse_rfc3339(json_string_value(ts), &out->reported_ms))) {
        snprintf(field, sizeof(field), "rows[%zu].reported_at", i);
        return refuse(e, 400, field, "%s: must be an RFC 3339 time such as %s", field,
                      "2026-11-21T17:30:00Z");
    }
    if (validation && metric != NULL) {
        json_t *v = json_object_get(m, metric);
        if (!json_is_number(v)) {
            snprintf(field, sizeof(field), "rows[%zu].metrics.%s", i, metric);
            return refuse(e, 400, field, "%s: %s (the searcher metric must be a number)", field,
                          v == NULL ? "missing" : "not a number");
        }
    }
    if (validation && time_metric != NULL) {
        /* adaptive_asha measures its rungs in this metric: every validation says it. */
        json_t *v = json_object_get(m, time_metric);
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0) {
            snprintf(field, sizeof(field), "rows[%zu].metrics.%s", i, time_metric);
            return refuse(e, 400, field,
                          "%s: %s (searcher.time_metric must be a number >= 0 in every "
                          "validation)",
                          field, v == NULL ? "missing" : "not a finite number >= 0");
        }
    }
    out->step = json_integer_value(b);
    out->metrics = m;
    return 0;
}

int api_check_metric_rows(const json_t *rows, const char *metric, const char *time_metric,
                          bool validation, struct kd_metric_row **out, size_t *n,
                          struct api_verr *e)
{
    struct kd_metric_row *mr = NULL;
    int rc = 0;
    size_t i;
    json_t *row;
    *out = NULL;
    *n = 0;
    if (!json_is_array(rows) || json_array_size(rows) == 0 ||
        json_array_size(rows) > KD_STORE_MAX_BATCH_ROWS) {
        rc = refuse(e, 400, "rows", "rows: must be an array of 1 to %d metric rows",
                    KD_STORE_MAX_BATCH_ROWS);
        goto out;
    }
    mr = kd_xcalloc(json_array_size(rows), sizeof(*mr));
    json_array_foreach(rows, i, row)
    {
        if ((rc = check_row(row, i, metric, time_metric, validation, &mr[i], e)) != 0)
            goto out;
    }
    *out = mr;
    *n = json_array_size(rows);
    mr = NULL;
out:
    free(mr);
    return rc;
}

int api_check_checkpoint(const json_t *body, struct api_checkpoint_req *out, struct api_verr *e)
{
    static const char *const keys[] = {"uuid", "batches", "storage_path", "size", "metadata", NULL};
    char err[KD_ERRLEN] = "";
    int rc;
    memset(out, 0, sizeof(*out));
    if ((rc = api_check_keys(body, "", keys, e)) != 0 ||
        (rc = want_str(body, "uuid", 128, true, &out->uuid, e)) != 0 ||
        (rc = want_i64(body, "batches", &out->batches, e)) != 0 ||
        (rc = want_str(body, "storage_path", 4096, true, &out->storage_path, e)) != 0 ||
        (rc = want_i64(body, "size", &out->size, e)) != 0)
        return rc;
    /* The uuid names the checkpoint's files in storage (GC deletes <storage>/<uuid>/): only a
     * canonical UUID enters the registry, so no stored id can name a path elsewhere. */
    if (kd_ckpt_check_canonical_uuid(out->uuid, err) != 0)
        return refuse(e, 400, "uuid", "%s", err);
    out->metadata = json_object_get(body, "metadata");
    if (out->metadata != NULL && !json_is_object(out->metadata))
        return refuse(e, 400, "metadata", "metadata: must be an object");
    return 0;
}

bool api_run_id_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    return n > 0 && n <= API_MAX_RUN_ID &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* A host name or an IP address (v4 or v6): no spaces, separators or control bytes. */
static bool address_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    return n > 0 && n <= 253 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") == n;
}

int api_check_rendezvous(const json_t *body, struct api_rendezvous_req *out, struct api_verr *e)
{
    static const char *const keys[] = {"run_id", "address", "port", NULL};
    int rc;
    memset(out, 0, sizeof(*out));
    if ((rc = api_check_keys(body, "", keys, e)) != 0 ||
        (rc = want_str(body, "run_id", API_MAX_RUN_ID, true, &out->run_id, e)) != 0 ||
        (rc = want_str(body, "address", 253, true, &out->address, e)) != 0 ||
        (rc = want_i64(body, "port", &out->port, e)) != 0)
        return rc;
    if (!api_run_id_ok(out->run_id))
        return refuse(e, 400, "run_id", "run_id: characters other than A-Z a-z 0-9 . _ -");
    if (!address_ok(out->address))
        return refuse(e, 400, "address",
                      "address: not a host name or an IP address (A-Z a-z 0-9 . - : only)");
    if (out->port < 1 || out->port > 65535)
        return refuse(e, 400, "port", "port: must be between 1 and 65535");
    return 0;
}

int api_check_early_exit(const json_t *body, const char **reason, const char **cond,
                         const char **message, struct api_verr *e)
{
    static const char *const keys[] = {"reason", "message", NULL};
    static const char *const reasons[] = {"errored", "invalid_hp", "user_canceled", NULL};
    static const char *const cond_reasons[] = {"Errored", "InvalidHP", "UserCanceled"};
    int rc, idx = -1;
    *reason = *cond = *message = NULL;
    if ((rc = api_check_keys(body, "", keys, e)) != 0)
        return rc;
    const char *why = json_string_value(json_object_get(body, "reason"));
    for (int i = 0; why != NULL && reasons[i] != NULL; i++)
        if (strcmp(why, reasons[i]) == 0)
            idx = i;
    if (idx < 0)
        return refuse(e, 400, "reason",
                      "reason: must be \"errored\", \"invalid_hp\" or \"user_canceled\"");
    if ((rc = want_str(body, "message", 4096, false, message, e)) != 0)
        return rc;
    *reason = reasons[idx];
    *cond = cond_reasons[idx];
    return 0;
}

/* One line of a logs batch. */
static int check_line(const json_t *l, size_t i, int64_t now_ms, struct kd_log_line *out,
                      struct api_verr *e)
{
    static const char *const keys[] = {"rank", "stream", "timestamp", "line", NULL};
    char field[64];
    int rc;
    snprintf(field, sizeof(field), "lines[%zu]", i);
    if (!json_is_object(l))
        return refuse(e, 400, field, "%s: must be an object", field);
    snprintf(field, sizeof(field), "lines[%zu].", i);
    if ((rc = api_check_keys(l, field, keys, e)) != 0)
        return rc;
    json_t *rank = json_object_get(l, "rank"), *text = json_object_get(l, "line");
    const char *stream = json_string_value(json_object_get(l, "stream"));
    json_t *ts = json_object_get(l, "timestamp");
    memset(out, 0, sizeof(*out));
    out->ts_ms = now_ms;
    if (!json_is_integer(rank) || json_integer_value(rank) < -1 ||
        json_integer_value(rank) > 1 << 30) {
        snprintf(field, sizeof(field), "lines[%zu].rank", i);
        return refuse(e, 400, field, "%s: must be an integer >= -1 (-1: the launcher)", field);
    }
    if (stream == NULL || (strcmp(stream, "stdout") != 0 && strcmp(stream, "stderr") != 0)) {
        snprintf(field, sizeof(field), "lines[%zu].stream", i);
        return refuse(e, 400, field, "%s: must be \"stdout\" or \"stderr\"", field);
    }
    if (ts != NULL &&
        (!json_is_string(ts) || kd_time_parse_rfc3339(json_string_value(ts), &out->ts_ms) != 0)) {
        snprintf(field, sizeof(field), "lines[%zu].timestamp", i);
        return refuse(e, 400, field, "%s: must be an RFC 3339 time such as %s", field,
                      "2026-11-21T17:30:00.123Z");
    }
    if (!json_is_string(text)) {
        snprintf(field, sizeof(field), "lines[%zu].line", i);
        return refuse(e, 400, field, "%s: %s", field,
                      text == NULL ? "required (the line's text)" : "must be a string");
    }
    out->rank = (int)json_integer_value(rank);
    out->is_stderr = strcmp(stream, "stderr") == 0;
    out->text = json_string_value(text);
    out->len = json_string_length(text);
    return 0;
}

int api_check_logs(const json_t *body, int64_t now_ms, struct api_logs_req *out, struct api_verr *e)
{
    static const char *const keys[] = {"key", "run_id", "node_rank", "lines", NULL};
    struct kd_log_line *ls = NULL;
    int rc;
    size_t i;
    json_t *l;
    memset(out, 0, sizeof(*out));
    if ((rc = api_check_keys(body, "", keys, e)) != 0)
        goto out;
    out->key = json_string_value(json_object_get(body, "key"));
    json_t *run = json_object_get(body, "run_id"), *nr = json_object_get(body, "node_rank");
    json_t *lines = json_object_get(body, "lines");
    if (out->key == NULL) {
        rc = refuse(e, 400, "key", "key: required (an idempotency key, reused when retrying)");
        goto out;
    }
    if (run != NULL && !json_is_string(run)) {
        rc = refuse(e, 400, "run_id", "run_id: must be a string (the attempt's KDET_RUN_ID)");
        goto out;
    }
    if (nr != NULL &&
        (!json_is_integer(nr) || json_integer_value(nr) < 0 || json_integer_value(nr) >= 65536)) {
        rc = refuse(e, 400, "node_rank", "node_rank: must be an integer from 0 to 65535");
        goto out;
    }
    out->run_id = json_string_value(run);
    out->node_rank = (int)json_integer_value(nr);
    if (!json_is_array(lines) || json_array_size(lines) == 0 ||
        json_array_size(lines) > KD_STORE_LOG_MAX_LINES) {
        rc = refuse(e, 400, "lines", "lines: must be an array of 1 to %d log lines",
                    KD_STORE_LOG_MAX_LINES);
        goto out;
    }
    ls = kd_xcalloc(json_array_size(lines), sizeof(*ls));
    json_array_foreach(lines, i, l)
    {
        if ((rc = check_line(l, i, now_ms, &ls[i], e)) != 0)
            goto out;
    }
    out->lines = ls;
    out->n = json_array_size(lines);
    ls = NULL;
out:
    free(ls);
    return rc;
}

/* ---- the user routes ----------------------------------------------------------------------- */

bool api_user_name_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > KD_STORE_MAX_USER)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && ((i == 0 || i == n - 1) || (c != '-' && c != '.' && c != '_')))
            return false;
    }
    return true;
}

/* A namespace as Kubernetes names them (a DNS-1123 label), or "*". */
static bool ns_ok(const char *s)
{
    size_t n = strlen(s);
    if (strcmp(s, "*") == 0)
        return true;
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || i == n - 1 || c != '-'))
            return false;
    }
    return true;
}

int api_check_user(const json_t *body, bool create, struct api_user_req *out, struct api_verr *e)
{
    static const char *const create_keys[] = {"name", "admin", "namespaces", "description", NULL};
    static const char *const update_keys[] = {"admin", "namespaces", NULL};
    int rc;
    size_t i;
    json_t *v;
    memset(out, 0, sizeof(*out));
    if ((rc = api_check_keys(body, "", create ? create_keys : update_keys, e)) != 0)
        return rc;
    json_t *ns = json_object_get(body, "namespaces");
    if (ns != NULL && (!json_is_array(ns) || json_array_size(ns) > API_MAX_USER_NS))
        return refuse(e, 400, "namespaces", "namespaces: must be an array of at most %d names",
                      API_MAX_USER_NS);
    json_array_foreach(ns, i, v)
    {
        if (!json_is_string(v) || !ns_ok(json_string_value(v))) {
            char field[48];
            snprintf(field, sizeof(field), "namespaces[%zu]", i);
            return refuse(e, 400, field, "%s: must be a namespace name (a DNS-1123 label) or \"*\"",
                          field);
        }
    }
    out->namespaces = ns;
    json_t *admin = json_object_get(body, "admin");
    if (admin != NULL && !json_is_boolean(admin))
        return refuse(e, 400, "admin", "%s: must be true or false", "admin");
    out->admin_set = admin != NULL;
    out->admin = json_is_true(admin);
    if (!create)
        return 0;
    out->name = json_string_value(json_object_get(body, "name"));
    json_t *desc = json_object_get(body, "description");
    if (!api_user_name_ok(out->name))
        return refuse(e, 400, "name",
                      "name: required, 1 to %d of a-z 0-9 . _ -, starting and ending with a "
                      "letter or digit",
                      KD_STORE_MAX_USER);
    if (desc != NULL && (!json_is_string(desc) || json_string_length(desc) > 256))
        return refuse(e, 400, "description", "description: must be a string of at most 256 bytes");
    out->description = json_string_value(desc);
    return 0;
}

int api_check_token(const json_t *body, const char **user, const char **description,
                    struct api_verr *e)
{
    static const char *const keys[] = {"user", "description", NULL};
    int rc;
    *user = *description = NULL;
    if ((rc = api_check_keys(body, "", keys, e)) != 0)
        return rc;
    json_t *ju = json_object_get(body, "user"), *desc = json_object_get(body, "description");
    if ((ju != NULL && !json_is_string(ju)) ||
        (desc != NULL && (!json_is_string(desc) || json_string_length(desc) > 256)))
        return refuse(e, 400, ju != NULL && !json_is_string(ju) ? "user" : "description",
                      "user and description: strings (a description of at most 256 bytes)");
    *user = json_string_value(ju);
    *description = json_string_value(desc);
    return 0;
}

/* ---- the model registry ------------------------------------------------------------------ */

/* body[k]: absent, or a string of at most max bytes (empty allowed) without NUL. */
static int want_text(const json_t *body, const char *k, size_t max, const char **out,
                     struct api_verr *e)
{
    json_t *v = json_object_get(body, k);
    *out = json_string_value(v);
    if (v != NULL && (!json_is_string(v) || json_string_length(v) > max ||
                      strlen(json_string_value(v)) != json_string_length(v)))
        return refuse(e, 400, k, "%s: must be a string of at most %zu bytes without NUL", k, max);
    return 0;
}

/* body[k]: absent, or labels as kd_store_model_labels_check takes them. */
static int want_labels(const json_t *body, const char *k, const json_t **out, struct api_verr *e)
{
    char err[KD_ERRLEN] = "";
    *out = json_object_get(body, k);
    if (*out != NULL && kd_store_model_labels_check(*out, k, err) != 0) {
        char field[64];
        const char *br = strchr(err, ':');
        snprintf(field, sizeof(field), "%.*s", br != NULL ? (int)(br - err) : 0, err);
        return refuse(e, 400, field[0] ? field : k, "%s", err);
    }
    return 0;
}

static int want_metadata(const json_t *body, const json_t **out, struct api_verr *e)
{
    *out = json_object_get(body, "metadata");
    if (*out == NULL)
        return 0;
    if (!json_is_object(*out))
        return refuse(e, 400, "metadata", "metadata: must be a JSON object");
    size_t n = json_dumpb(*out, NULL, 0, JSON_COMPACT);
    if (n == 0 || n > KD_STORE_MODEL_MAX_METADATA)
        return refuse(e, 400, "metadata", "metadata: %zu bytes of JSON, at most %u", n,
                      KD_STORE_MODEL_MAX_METADATA);
    return 0;
}

int api_check_model(const json_t *body, bool create, struct api_model_req *out, struct api_verr *e)
{
    static const char *const create_keys[] = {"name", "description", "labels", "metadata", NULL};
    static const char *const update_keys[] = {
        "description", "labels", "add_labels", "remove_labels", "metadata", "archived", NULL};
    int rc;
    memset(out, 0, sizeof(*out));
    out->archived = -1;
    if ((rc = api_check_keys(body, "", create ? create_keys : update_keys, e)) != 0)
        return rc;
    if (create) {
        json_t *n = json_object_get(body, "name");
        out->name = json_string_value(n);
        if (!kd_store_model_name_ok(out->name) || strlen(out->name) != json_string_length(n))
            return refuse(e, 400, "name",
                          "name: required, 1 to %d of A-Z a-z 0-9 . _ -, starting with a letter "
                          "or digit",
                          KD_STORE_MODEL_MAX_NAME);
    }
    if ((rc = want_text(body, "description", KD_STORE_MODEL_MAX_TEXT, &out->description, e)) != 0 ||
        (rc = want_labels(body, "labels", &out->labels, e)) != 0 ||
        (rc = want_metadata(body, &out->metadata, e)) != 0)
        return rc;
    if (create)
        return 0;
    if ((rc = want_labels(body, "add_labels", &out->add_labels, e)) != 0 ||
        (rc = want_labels(body, "remove_labels", &out->remove_labels, e)) != 0)
        return rc;
    json_t *ar = json_object_get(body, "archived");
    if (ar != NULL && !json_is_boolean(ar))
        return refuse(e, 400, "archived", "archived: must be true or false");
    if (ar != NULL)
        out->archived = json_is_true(ar);
    return 0;
}

int api_check_model_version(const json_t *body, bool create, struct api_version_req *out,
                            struct api_verr *e)
{
    static const char *const create_keys[] = {"checkpoint_uuid", "name",     "comment",
                                              "labels",          "metadata", NULL};
    static const char *const update_keys[] = {"name",          "comment",  "labels", "add_labels",
                                              "remove_labels", "metadata", NULL};
    int rc;
    char why[KD_ERRLEN];
    memset(out, 0, sizeof(*out));
    if ((rc = api_check_keys(body, "", create ? create_keys : update_keys, e)) != 0)
        return rc;
    if (create) {
        json_t *u = json_object_get(body, "checkpoint_uuid");
        out->checkpoint_uuid = json_string_value(u);
        if (out->checkpoint_uuid == NULL)
            return refuse(e, 400, "checkpoint_uuid",
                          "checkpoint_uuid: required (the uuid of a registered checkpoint)");
        if (strlen(out->checkpoint_uuid) != json_string_length(u) ||
            kd_ckpt_check_uuid(out->checkpoint_uuid, why) != 0)
            return refuse(e, 400, "checkpoint_uuid",
                          "checkpoint_uuid: not a checkpoint uuid (1 to 127 of A-Z a-z 0-9 . _ -)");
    }
    if ((rc = want_text(body, "name", KD_STORE_MODEL_MAX_VNAME, &out->name, e)) != 0 ||
        (rc = want_text(body, "comment", KD_STORE_MODEL_MAX_TEXT, &out->comment, e)) != 0 ||
        (rc = want_labels(body, "labels", &out->labels, e)) != 0 ||
        (rc = want_metadata(body, &out->metadata, e)) != 0)
        return rc;
    if (create)
        return 0;
    if ((rc = want_labels(body, "add_labels", &out->add_labels, e)) != 0 ||
        (rc = want_labels(body, "remove_labels", &out->remove_labels, e)) != 0)
        return rc;
    return 0;
}

int64_t api_model_version_arg(const char *s)
{
    int64_t v = 0;
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > 9)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

void api_download_stem(const char *name, int64_t version, char *out, size_t len)
{
    char safe[201];
    size_t n = 0;
    for (const char *p = name != NULL ? name : ""; *p != '\0' && n < sizeof(safe) - 1; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || (c == '.' && n > 0);
        safe[n++] = ok ? c : '_';
    }
    safe[n] = '\0';
    if (version > 0)
        snprintf(out, len, "%s-v%lld", n > 0 ? safe : "model", (long long)version);
    else
        snprintf(out, len, "%s", n > 0 ? safe : "checkpoint");
}

/* A Kubernetes object name (DNS-1123 subdomain): 1 to 253 of a-z 0-9 . -, alphanumeric ends. */
static bool object_name_ok(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > 253 || strlen(s) != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
              s[i] == '-'))
            return false;
    return s[0] != '-' && s[0] != '.' && s[len - 1] != '-' && s[len - 1] != '.';
}

int api_check_job_update(const json_t *body, struct kd_queue_update *out, struct api_verr *e)
{
    static const char *const keys[] = {"priority", "ahead_of", "behind_of", "resource_pool", NULL};
    static const char *const rel[] = {"ahead_of", "behind_of"};
    const char **slot[] = {&out->ahead_of, &out->behind_of};
    int rc;
    memset(out, 0, sizeof(*out));
    if ((rc = api_check_keys(body, "", keys, e)) != 0)
        return rc;
    if (json_object_size(body) == 0)
        return refuse(e, 400, "priority",
                      "nothing to change: give priority, ahead_of, behind_of or resource_pool");
    json_t *p = json_object_get(body, "priority");
    if (p != NULL &&
        (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 99))
        return refuse(e, 400, "priority", "priority: a number from 1 (first) to 99 (last)");
    out->priority = p != NULL ? json_integer_value(p) : 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(body, rel[i]);
        if (v == NULL)
            continue;
        if (!json_is_string(v) || !object_name_ok(json_string_value(v), json_string_length(v)))
            return refuse(e, 400, rel[i], "%s: the name of another job (an experiment)", rel[i]);
        *slot[i] = json_string_value(v);
    }
    if (out->ahead_of != NULL && out->behind_of != NULL)
        return refuse(e, 400, "behind_of", "ahead_of and behind_of: give one of them");
    json_t *pool = json_object_get(body, "resource_pool");
    if (pool != NULL) {
        out->resource_pool = json_string_value(pool);
        if (!json_is_string(pool) || !kd_queue_pool_ok(out->resource_pool) ||
            strlen(out->resource_pool) != json_string_length(pool))
            return refuse(e, 400, "resource_pool", "resource_pool: 1 to 63 of A-Z a-z 0-9 - _ .");
    }
    return 0;
}

/* ---- spans of a body's text ---------------------------------------------------------------- */

#define SPAN_FAIL SIZE_MAX

static size_t span_ws(const char *t, size_t len, size_t i)
{
    while (i < len && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
        i++;
    return i;
}

/* Past the string that starts at t[i] ('"'), or SPAN_FAIL. */
static size_t span_string(const char *t, size_t len, size_t i)
{
    for (i++; i < len; i++) {
        if (t[i] == '\\')
            i++;
        else if (t[i] == '"')
            return i + 1;
    }
    return SPAN_FAIL;
}

/* Past the value that starts at t[i], or SPAN_FAIL. */
static size_t span_value(const char *t, size_t len, size_t i)
{
    if (i >= len)
        return SPAN_FAIL;
    if (t[i] == '"')
        return span_string(t, len, i);
    if (t[i] == '{' || t[i] == '[') {
        size_t depth = 0;
        while (i < len) {
            char c = t[i];
            if (c == '"') {
                if ((i = span_string(t, len, i)) == SPAN_FAIL)
                    return SPAN_FAIL;
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return SPAN_FAIL;
    }
    size_t start = i;
    while (i < len && !strchr(",]} \t\r\n", t[i]))
        i++;
    return i > start ? i : SPAN_FAIL;
}

/*
 * The value of member key of the object at t[obj]: 1 found (*out), 0 absent, -1 unsure (a key
 * with an escape, which might spell key; or text that is not as expected).
 */
static int span_member(const char *t, size_t len, size_t obj, const char *key, struct api_span *out)
{
    size_t klen = strlen(key), i = span_ws(t, len, obj);
    if (i >= len || t[i] != '{')
        return -1;
    i = span_ws(t, len, i + 1);
    if (i < len && t[i] == '}')
        return 0;
    while (i < len && t[i] == '"') {
        size_t ke = span_string(t, len, i);
        if (ke == SPAN_FAIL || memchr(t + i + 1, '\\', ke - i - 2) != NULL)
            return -1;
        bool match = ke - i - 2 == klen && memcmp(t + i + 1, key, klen) == 0;
        i = span_ws(t, len, ke);
        if (i >= len || t[i] != ':')
            return -1;
        size_t vs = span_ws(t, len, i + 1), ve = span_value(t, len, vs);
        if (ve == SPAN_FAIL)
            return -1;
        if (match) {
            /* jansson refused duplicate keys: this is the member. */
            *out = (struct api_span){vs, ve - vs};
            return 1;
        }
        i = span_ws(t, len, ve);
        if (i < len && t[i] == '}')
            return 0;
        if (i >= len || t[i] != ',')
            return -1;
        i = span_ws(t, len, i + 1);
    }
    return -1;
}

static bool one_line(const char *t, struct api_span s)
{
    return memchr(t + s.off, '\n', s.len) == NULL && memchr(t + s.off, '\r', s.len) == NULL;
}

bool api_metric_spans(const char *body, size_t len, struct kd_metric_row *rows, size_t n,
                      struct api_span *all)
{
    struct api_span rs, ms;
    if (body == NULL || n == 0 || span_member(body, len, 0, "rows", &rs) != 1 ||
        body[rs.off] != '[' || !one_line(body, rs))
        return false;
    size_t end = rs.off + rs.len, i = span_ws(body, end, rs.off + 1);
    struct api_span *got = kd_xcalloc(n, sizeof(*got));
    size_t k = 0;
    bool ok = true;
    for (; k < n && ok; k++) {
        size_t ee = span_value(body, end, i);
        ok =
            ee != SPAN_FAIL && span_member(body, ee, i, "metrics", &ms) == 1 && body[ms.off] == '{';
        if (ok) {
            got[k] = ms;
            i = span_ws(body, end, ee);
            ok = i < end && body[i] == (k + 1 < n ? ',' : ']');
            i = span_ws(body, end, i + 1);
        }
    }
    ok = ok && k == n && i == end;
    if (ok) {
        for (k = 0; k < n; k++) {
            rows[k].raw = body + got[k].off;
            rows[k].raw_len = got[k].len;
        }
        *all = rs;
    }
    free(got);
    return ok;
}
