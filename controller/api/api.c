/*
 * The API server: start and stop, routing with 404/405, bearer-token checks
 * (a trial's HMAC token compared in constant time; users' tokens and their
 * namespaces through auth.c),
 * JSON errors that name the field, the logfmt access log, and the shared
 * helpers that read Trials and Experiments and write Trial status.
 */
#include "api/api_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "api/routes.h"
#include "api/usertoken.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

/* ---- tokens ----------------------------------------------------------------------------- */

void api_b64url(const unsigned char *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = tab[(v >> 6) & 63];
        if (i + 2 < n)
            out[o++] = tab[v & 63];
    }
    out[o] = '\0';
}

/* HMAC-SHA256(key, "kdet-<what>-token/v1\n" ns "\n" name "\n" uid), base64url. */
static int object_token(const char *what, const unsigned char *key, size_t keylen, const char *ns,
                        const char *name, const char *uid, char *out, size_t outlen)
{
    int rc = 0;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    char *msg = NULL;
    if (key == NULL || keylen == 0 || ns == NULL || name == NULL || uid == NULL ||
        outlen < KD_API_TOKEN_LEN + 1) {
        rc = KD_EINVAL;
        goto out;
    }
    msg = kd_xasprintf("kdet-%s-token/v1\n%s\n%s\n%s", what, ns, name, uid);
    if (HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, strlen(msg), mac,
             &maclen) == NULL ||
        maclen != 32) {
        rc = KD_EINTERNAL;
        goto out;
    }
    api_b64url(mac, maclen, out);
out:
    free(msg);
    return rc;
}

int kd_api_trial_token(const unsigned char *key, size_t keylen, const char *ns, const char *name,
                       const char *uid, char *out, size_t outlen)
{
    return object_token("trial", key, keylen, ns, name, uid, out, outlen);
}

int kd_api_task_token(const unsigned char *key, size_t keylen, const char *ns, const char *name,
                      const char *uid, char *out, size_t outlen)
{
    return object_token("task", key, keylen, ns, name, uid, out, outlen);
}

/* ---- responses ---------------------------------------------------------------------------- */

void api_json(struct api_rq *q, int status, json_t *j)
{
    q->status = status;
    kd_http_respond_json_gz(q->r, status, j, API_GZIP_MIN);
    json_decref(j);
}

int api_error(struct api_rq *q, int status, const char *field, const char *fmt, ...)
{
    char raw[KD_ERRLEN], msg[KD_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    /* A message may quote what the request sent, which need not be UTF-8; JSON text must be. */
    kd_utf8_scrub(raw, msg, sizeof(msg));
    json_t *j = json_pack("{s:s}", "error", msg);
    if (field != NULL && field[0] != '\0')
        json_object_set_new(j, "field", json_string(field));
    if (status == 401)
        kd_http_add_header(q->r, "WWW-Authenticate", "Bearer realm=\"kdet\"");
    if (status == 503)
        kd_http_add_header(q->r, "Retry-After", "1");
    api_json(q, status, j);
    return status;
}

int api_fail(struct api_rq *q, int rc, const char *field, const char *err)
{
    const char *m = err != NULL && err[0] != '\0' ? err : kd_strerror(rc);
    switch (rc) {
    case KD_EINVAL:
    case KD_EPARSE: api_error(q, 400, field, "%s", m); break;
    case KD_ENOTFOUND: api_error(q, 404, field, "%s", m); break;
    case KD_ECONFLICT:
    case KD_EEXIST: api_error(q, 409, field, "%s", m); break;
    case KD_EINVALID: api_error(q, 422, field, "%s", m); break;
    case KD_ETOOBIG: api_error(q, 413, field, "%s", m); break;
    case KD_EFORBIDDEN: api_error(q, 403, field, "%s", m); break;
    case KD_EAGAIN:
    case KD_ETIMEDOUT:
    case KD_ECONNECT: api_error(q, 503, field, "%s", m); break;
    default: api_error(q, 500, field, "%s", m); break;
    }
    return rc;
}

int api_refuse(struct api_rq *q, const struct api_verr *e)
{
    api_error(q, e->status, e->field, "%s", e->msg);
    return e->status;
}

int api_body(struct api_rq *q, size_t cap, json_t **out)
{
    struct api_verr e;
    size_t len = 0;
    const char *body = kd_http_body(q->r, &len);
    int rc = api_check_json(body, len, cap, out, &e);
    if (rc != 0)
        api_refuse(q, &e);
    return rc;
}

int api_query_int(struct api_rq *q, const char *name, long lo, long hi, long def, long *out)
{
    int rc = 0;
    const char *s = kd_http_query(q->r, name);
    int64_t v = def;
    if (s != NULL && (kd_parse_i64(s, &v) != 0 || v < lo || v > hi)) {
        api_error(q, 400, name, "query parameter %s=%s: must be an integer from %ld to %ld", name,
                  kd_logq(s), lo, hi);
        rc = KD_EINVAL;
    } else {
        *out = (long)v;
    }
    return rc;
}

/* ---- resources ---------------------------------------------------------------------------- */

static int get_obj(struct kd_api *a, struct kd_k8s_informer *inf, const struct kd_k8s_gvr *gvr,
                   const char *ns, const char *name, json_t **out, char *err)
{
    char key[600];
    int rc;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    if (a->ns != NULL && strcmp(ns, a->ns) != 0) {
        rc = kd_seterr(err, KD_ENOTFOUND, "namespace %s is not served by this controller", ns);
        goto out;
    }
    rc = kd_k8s_cache_get(kd_k8s_informer_cache(inf), key, out);
    if (rc == KD_ENOTFOUND) /* the cache may lag behind a create: ask the API server */
        rc = kd_k8s_get(a->o.k8s, gvr, ns, name, out, NULL, err);
    if (rc == KD_ENOTFOUND)
        kd_seterr(err, rc, "%s %s/%s not found", gvr->resource, ns, name);
out:
    return rc;
}

int api_get_trial(struct kd_api *a, const char *ns, const char *name, json_t **out, char *err)
{
    return get_obj(a, a->trials, &KD_K8S_TRIALS, ns, name, out, err);
}

int api_get_experiment(struct kd_api *a, const char *ns, const char *name, json_t **out, char *err)
{
    return get_obj(a, a->exps, &KD_K8S_EXPERIMENTS, ns, name, out, err);
}

int api_auth_trial(struct api_rq *q, const char *ns, const char *name, json_t **trial)
{
    int rc = 0;
    char err[KD_ERRLEN] = "", want[KD_API_TOKEN_LEN + 1];
    const char *tok = api_bearer(kd_http_header(q->r, "Authorization"));
    *trial = NULL;
    if (tok == NULL) {
        rc = KD_EUNAUTHORIZED;
        api_error(q, 401, "Authorization", "a trial token is required (Authorization: Bearer)");
        goto out;
    }
    if ((rc = api_get_trial(q->api, ns, name, trial, err)) != 0) {
        /* Unknown trials get the same answer as bad tokens: nothing is revealed. */
        if (rc == KD_ENOTFOUND) {
            rc = KD_EUNAUTHORIZED;
            api_error(q, 401, "Authorization", "the token is not valid for trial %s/%s", ns, name);
        } else {
            api_fail(q, rc, NULL, err);
        }
        goto out;
    }
    const char *uid = kd_k8s_meta_str(*trial, "uid");
    if (uid == NULL ||
        kd_api_trial_token(q->api->key, q->api->keylen, ns, name, uid, want, sizeof(want)) != 0 ||
        strlen(tok) != KD_API_TOKEN_LEN || CRYPTO_memcmp(tok, want, KD_API_TOKEN_LEN) != 0) {
        rc = KD_EUNAUTHORIZED;
        api_error(q, 401, "Authorization", "the token is not valid for trial %s/%s", ns, name);
        goto out;
    }
out:
    OPENSSL_cleanse(want, sizeof(want));
    if (rc != 0) {
        json_decref(*trial);
        *trial = NULL;
    }
    return rc;
}

static const char *res_state(const json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "status"), "state"));
}

/* Find the experiment row by uid (newest first, pages of 1000) or create it. */
int api_exp_row(struct kd_api *a, const json_t *exp, bool create, int64_t *id, char *err)
{
    int rc = 0;
    json_t *page = NULL, *cfg = NULL;
    const char *uid = kd_k8s_meta_str(exp, "uid"), *ns = kd_k8s_meta_str(exp, "namespace");
    *id = 0;
    for (int off = 0; off < 100000 && *id == 0; off += 1000) {
        size_t i;
        json_t *e;
        if ((rc = kd_store_experiments_list(a->o.store, ns, 1000, off, &page, err)) != 0)
            goto out;
        json_array_foreach(page, i, e)
        {
            if (uid != NULL && strcmp(json_string_value(json_object_get(e, "uid")) ?: "", uid) == 0)
                *id = json_integer_value(json_object_get(e, "id"));
        }
        size_t n = json_array_size(page);
        json_decref(page);
        page = NULL;
        if (n < 1000)
            break;
    }
    if (*id == 0 && !create) {
        rc = kd_seterr(err, KD_ENOTFOUND, "experiment %s/%s has no stored data yet", ns,
                       kd_k8s_meta_str(exp, "name"));
        goto out;
    }
    if (*id == 0) {
        cfg = json_deep_copy(json_object_get(exp, "spec"));
        if (cfg == NULL)
            cfg = json_object();
        const char *state = res_state(exp);
        struct kd_store_experiment se = {uid, ns, kd_k8s_meta_str(exp, "name"), cfg,
                                         state != NULL ? state : "ACTIVE"};
        rc = kd_store_experiment_upsert(a->o.store, &se, id, err);
    }
out:
    json_decref(cfg);
    json_decref(page);
    return rc;
}

int api_store_ids(struct kd_api *a, const json_t *trial, bool create, int64_t *exp_id,
                  int64_t *trial_id, char *err)
{
    int rc = 0;
    json_t *exp = NULL, *list = NULL;
    const char *uid = kd_k8s_meta_str(trial, "uid"), *ns = kd_k8s_meta_str(trial, "namespace");
    const json_t *spec = json_object_get(trial, "spec");
    *exp_id = *trial_id = 0;
    pthread_mutex_lock(&a->mu);
    json_t *ids = json_object_get(a->ids, uid);
    if (ids != NULL) {
        *exp_id = json_integer_value(json_array_get(ids, 0));
        *trial_id = json_integer_value(json_array_get(ids, 1));
    }
    pthread_mutex_unlock(&a->mu);
    if (*trial_id != 0)
        goto out;
    const char *ename = json_string_value(json_object_get(spec, "experiment"));
    if (ename == NULL) {
        rc = kd_seterr(err, KD_EINVALID, "trial %s/%s has no spec.experiment", ns,
                       kd_k8s_meta_str(trial, "name"));
        goto out;
    }
    if ((rc = api_get_experiment(a, ns, ename, &exp, err)) != 0)
        goto out;
    if ((rc = api_exp_row(a, exp, create, exp_id, err)) != 0)
        goto out;
    if ((rc = kd_store_trials_list(a->o.store, *exp_id, &list, err)) != 0)
        goto out;
    size_t i;
    json_t *t;
    json_array_foreach(list, i, t)
    {
        if (strcmp(json_string_value(json_object_get(t, "uid")) ?: "", uid) == 0)
            *trial_id = json_integer_value(json_object_get(t, "id"));
    }
    if (*trial_id == 0 && !create) {
        rc = kd_seterr(err, KD_ENOTFOUND, "trial %s/%s has no stored data yet", ns,
                       kd_k8s_meta_str(trial, "name"));
        goto out;
    }
    if (*trial_id == 0) {
        const char *state = res_state(trial);
        struct kd_store_trial st = {uid,
                                    *exp_id,
                                    json_string_value(json_object_get(spec, "requestId")) ?: "",
                                    json_object_get(spec, "hparams"),
                                    json_integer_value(json_object_get(spec, "seed")),
                                    state != NULL ? state : "QUEUED"};
        if ((rc = kd_store_trial_upsert(a->o.store, &st, trial_id, err)) != 0)
            goto out;
    }
    pthread_mutex_lock(&a->mu);
    json_object_set_new(a->ids, uid,
                        json_pack("[I,I]", (json_int_t)*exp_id, (json_int_t)*trial_id));
    pthread_mutex_unlock(&a->mu);
out:
    json_decref(exp);
    json_decref(list);
    return rc;
}

int api_status_update(struct kd_api *a, const char *ns, const char *name, const char *uid,
                      api_status_fn fn, void *ctx, char *err)
{
    return api_status_update_gvr(a, &KD_K8S_TRIALS, ns, name, uid, fn, ctx, err);
}

int api_status_update_gvr(struct kd_api *a, const struct kd_k8s_gvr *gvr, const char *ns,
                          const char *name, const char *uid, api_status_fn fn, void *ctx, char *err)
{
    int rc = 0;
    json_t *obj = NULL;
    for (int attempt = 0; attempt < 8; attempt++) {
        json_decref(obj);
        obj = NULL;
        if ((rc = kd_k8s_get(a->o.k8s, gvr, ns, name, &obj, NULL, err)) != 0)
            goto out;
        if (uid != NULL && strcmp(kd_k8s_meta_str(obj, "uid") ?: "", uid) != 0) {
            rc = kd_seterr(err, KD_ENOTFOUND, "%s %s/%s was replaced", gvr->resource, ns, name);
            goto out;
        }
        json_t *status = json_object_get(obj, "status");
        if (!json_is_object(status)) {
            status = json_object();
            json_object_set_new(obj, "status", status);
        }
        if (!fn(status, ctx)) {
            rc = 0;
            goto out;
        }
        /* A merge patch of the whole status with the resourceVersion read: the API server
         * refuses it (409) when anything changed in between, as an update would, and RBAC
         * needs only `patch` on trials/status. */
        json_t *patch = json_pack("{s:{s:s},s:O}", "metadata", "resourceVersion",
                                  kd_k8s_meta_str(obj, "resourceVersion") ?: "", "status", status);
        rc = kd_k8s_patch(a->o.k8s, gvr, ns, name, "status", KD_K8S_PATCH_MERGE, patch, NULL, NULL,
                          err);
        json_decref(patch);
        if (rc != KD_ECONFLICT)
            goto out;
        kd_sleep_ms(10 + attempt * 20);
    }
out:
    json_decref(obj);
    return rc;
}

void api_wait_change(struct kd_api *a, uint64_t *seen, long timeout_ms)
{
    struct timespec ts;
    kd_deadline_ts(CLOCK_REALTIME, timeout_ms, &ts);
    pthread_mutex_lock(&a->mu);
    while (a->changes == *seen) {
        if (pthread_cond_timedwait(&a->changed, &a->mu, &ts) != 0)
            break;
    }
    *seen = a->changes;
    pthread_mutex_unlock(&a->mu);
}

static void on_change(struct kd_api *a)
{
    pthread_mutex_lock(&a->mu);
    a->changes++;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
}

static void h_add(json_t *obj, void *ud)
{
    (void)obj;
    on_change(ud);
}

static void h_update(json_t *old, json_t *obj, void *ud)
{
    (void)old;
    (void)obj;
    on_change(ud);
}

/* ---- routing ------------------------------------------------------------------------------ */

static void h_health(struct api_rq *q)
{
    api_json(q, 200, json_pack("{s:s}", "status", "ok"));
}

/*
 * Ready to serve: the informers listed before the server started, so what
 * is left is the database. Leadership plays no part: a standby replica
 * serves the API too, and a rolling update needs the new pod Ready while
 * the old one still holds the Lease.
 */
static void h_ready(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    if (kd_store_ping(q->api->o.store, err) != 0) {
        api_error(q, 503, NULL, "not ready: the database does not answer: %s", err);
        return;
    }
    api_json(q, 200, json_pack("{s:s}", "status", "ready"));
}

/* GET /metrics: the process's metrics in Prometheus' text format. */
static void h_metrics(struct api_rq *q)
{
    if (q->api->o.metrics == NULL) {
        api_error(q, 404, NULL, "metrics are off in this process");
        return;
    }
    struct kd_buf b = KD_BUF_INIT(8u << 20);
    if (kd_metrics_render(q->api->o.metrics, &b) != 0) {
        kd_buf_free(&b);
        api_error(q, 500, NULL, "the metrics do not fit in 8 MiB");
        return;
    }
    q->status = 200;
    kd_http_respond(q->r, 200, KD_METRICS_CONTENT_TYPE, b.data != NULL ? b.data : "", b.len);
    kd_buf_free(&b);
}

/* The route table: api/routes.h's entries with this file's handlers. */
#define ROUTE(method, pattern, auth, max_body, fn) {method, pattern, auth, max_body, fn},
static const struct api_route routes[] = {API_ROUTES(ROUTE)};
#undef ROUTE

const struct api_route *api_routes(size_t *n)
{
    *n = sizeof(routes) / sizeof(routes[0]);
    return routes;
}

/* The route of q's method and path (api_route_find), with q's segments; allow as there. */
static const struct api_route *find_route(struct api_rq *q, char *allow, size_t allowlen)
{
    struct api_match m;
    char *path = kd_http_strdup(q->r, kd_http_path(q->r));
    const struct api_route *hit =
        api_route_find(routes, sizeof(routes) / sizeof(routes[0]), kd_http_method(q->r), path, &m);
    q->nseg = m.nseg;
    memcpy(q->seg, m.seg, sizeof(q->seg));
    q->route = hit != NULL ? hit->pattern : NULL;
    snprintf(allow, allowlen, "%s", m.allow);
    return hit;
}

static void access_log(struct api_rq *q, int64_t t0)
{
    double ms = (double)(kd_mono_ns() - t0) / 1e6;
    size_t blen = 0;
    (void)kd_http_body(q->r, &blen);
    /* Labels from the route table only, so that requests cannot add series. */
    const char *method = q->route != NULL ? kd_http_method(q->r) : "other";
    char code[8];
    snprintf(code, sizeof(code), "%d", q->status);
    const char *route = q->route == NULL ? "unmatched" : q->route[0] == '\0' ? "/" : q->route;
    kd_metric_inc(q->api->m_requests, (const char *[]){method, route, code});
    kd_metric_observe(q->api->m_seconds, (const char *[]){method}, ms / 1000);
    KD_INFO("http request", "method=%s path=%s status=%d latency_ms=%.1f bytes_in=%zu user=%s",
            kd_http_method(q->r), kd_logq(kd_http_path(q->r)), q->status, ms, blen,
            q->who != NULL ? kd_logq(q->who->name) : "-");
}

/* What the pre-body decision leaves for the handler (in the request's arena). */
struct api_grant {
    const struct api_route *route;
    const struct api_principal *who;
};

/*
 * Whether who may do what the route does in namespace ns: 403 saying what
 * was refused, or 503 when the Kubernetes API could not review it.
 */
static int authorize_ns(struct api_rq *q, const struct api_route *hit,
                        const struct api_principal *who, const char *ns)
{
    struct api_authz_attrs at;
    char why[512];
    bool allowed = false;
    if (api_authz_attrs(kd_http_method(q->r), hit->pattern, q->seg, q->nseg, &at) != 0)
        return 0; /* not a namespaced route */
    int rc = api_may(q->api, who, ns, &at, &allowed, why, sizeof(why));
    if (rc != 0) {
        api_error(q, 503, NULL, "cannot check access with the Kubernetes API: %s", why);
        return rc;
    }
    if (allowed)
        return 0;
    if (q->api->o.authz == KD_API_AUTHZ_KUBERNETES)
        api_error(q, 403, NULL,
                  "user %s (kdet:%s) may not %s %s%s%s in namespace %s (Kubernetes RBAC)%s%s",
                  kd_logq(who->name), kd_logq(who->name), at.verb, at.resource,
                  at.subresource[0] != '\0' ? "/" : "", at.subresource, kd_logq(ns),
                  why[0] != '\0' ? ": " : "", why);
    else
        api_error(q, 403, NULL, "user %s may not use namespace %s", kd_logq(who->name),
                  kd_logq(ns));
    return KD_EFORBIDDEN;
}

/*
 * The user routes' decision on a caller: a user token (401), then the
 * namespace the route names (403 unless the user may use it) or, on
 * administrators' routes, the administrator role (403).
 */
static int authorize_user(struct api_rq *q, const struct api_route *hit,
                          const struct api_principal **who)
{
    int rc = api_auth_user(q, who);
    int nseg = api_route_ns_seg(hit->pattern);
    if (rc != 0)
        goto out;
    if (hit->auth == AUTH_ADMIN && !(*who)->admin) {
        api_error(q, 403, NULL, "%s %s is for administrators; user %s is not one",
                  kd_http_method(q->r), kd_http_path(q->r), kd_logq((*who)->name));
        rc = KD_EFORBIDDEN;
    } else if (nseg >= 0) {
        rc = authorize_ns(q, hit, *who, q->seg[nseg]);
    }
out:
    return rc;
}

/* A download link instead of a token: its caller (download.c), then the namespace as for a
 * token. */
static int authorize_link(struct api_rq *q, const struct api_route *hit, const char *link,
                          const struct api_principal **who)
{
    int rc = api_download_caller(q, link, who);
    if (rc == 0)
        rc = authorize_ns(q, hit, *who, q->seg[api_route_ns_seg(hit->pattern)]);
    return rc;
}

/*
 * The pre-body decision, from the request head alone: route (404/405), the
 * token and what it may reach (401/403), then the route's body cap (413 on
 * the announced length), so an unauthenticated or oversized body is never
 * read. Trial tokens need the Trial (informer cache, else one GET); worker
 * handlers check them again.
 */
static void authorize(struct kd_http_req *r, void *ud)
{
    struct api_rq q = {.api = ud, .r = r};
    int64_t t0 = kd_mono_ns();
    char allow[64];
    if (api_proxy_path(kd_http_path(r))) {
        /* /proxy/TASK/...: not a route; the proxy decides (proxy.c). */
        api_proxy_authorize(&q);
        if (q.status != 0)
            access_log(&q, t0);
        return;
    }
    const struct api_route *hit = find_route(&q, allow, sizeof(allow));
    const struct api_principal *who = NULL;
    json_t *trial = NULL;
    struct api_verr e;
    unsigned long long len = 0;
    if (hit == NULL && allow[0] != '\0') {
        kd_http_add_header(r, "Allow", allow);
        api_error(&q, 405, NULL, "method %s is not allowed on %s; allowed: %s", kd_http_method(r),
                  kd_http_path(r), allow);
    } else if (hit == NULL) {
        api_error(&q, 404, NULL, "no such endpoint: %s %s", kd_http_method(r), kd_http_path(r));
    } else if (hit->auth == AUTH_LINK && kd_http_query(r, API_LINK_PARAM) != NULL &&
               kd_http_header(r, "Authorization") == NULL &&
               authorize_link(&q, hit, kd_http_query(r, API_LINK_PARAM), &who) != 0) {
        /* a download link that is not (or no longer) valid: answered 401 (or 403) */
    } else if (who == NULL &&
               (hit->auth == AUTH_USER || hit->auth == AUTH_ADMIN || hit->auth == AUTH_LINK) &&
               authorize_user(&q, hit, &who) != 0) {
        /* answered 401 or 403 (503 when the store cannot check the token) */
    } else if (hit->auth == AUTH_TRIAL && api_auth_trial(&q, q.seg[3], q.seg[5], &trial) != 0) {
        /* answered 401 (or 503 when the Trial cannot be read) */
    } else if (hit->auth == AUTH_TASK && api_auth_task(&q, q.seg[3], q.seg[5], &trial) != 0) {
        /* answered 401 (or 503 when the Task cannot be read) */
    } else if (api_body_cap(hit, kd_http_method(r), kd_http_path(r),
                            kd_http_header(r, "Content-Length"), &len, &e) != 0) {
        api_refuse(&q, &e);
    }
    json_decref(trial);
    q.who = who;
    if (q.status != 0) {
        access_log(&q, t0);
        return;
    }
    struct api_grant *g = kd_http_alloc(r, sizeof(*g));
    g->route = hit;
    g->who = who;
    kd_http_set_max_body(r, hit->max_body);
    kd_http_set_ctx(r, g);
}

static void dispatch(struct kd_http_req *r, void *ud)
{
    struct api_rq q = {.api = ud, .r = r};
    int64_t t0 = kd_mono_ns();
    const struct api_grant *g = kd_http_ctx(r);
    char allow[64];
    if (api_proxy_path(kd_http_path(r)) && g != NULL) {
        api_proxy(&q); /* g is the proxy's decision (api_proxy_authorize) */
        access_log(&q, t0);
        return;
    }
    if (g == NULL || find_route(&q, allow, sizeof(allow)) != g->route) {
        api_error(&q, 500, NULL, "the request was not authorized before its body");
    } else {
        q.who = g->who;
        g->route->fn(&q); /* worker handlers authenticate again with api_auth_trial */
    }
    access_log(&q, t0);
}

/* ---- start / stop ------------------------------------------------------------------------- */

static int start_informer(struct kd_api *a, const struct kd_k8s_gvr *gvr,
                          struct kd_k8s_informer **out, char *err)
{
    int rc;
    struct kd_k8s_informer_opts io = {.gvr = *gvr, .ns = a->ns, .watch_timeout_s = 300};
    struct kd_k8s_handlers h = {
        .on_add = h_add, .on_update = h_update, .on_delete = h_add, .ud = a};
    if ((rc = kd_k8s_informer_new(a->o.k8s, &io, out, err)) != 0)
        goto out;
    if ((rc = kd_k8s_informer_add_handlers(*out, &h)) != 0)
        goto out;
    if ((rc = kd_k8s_informer_start(*out)) != 0) {
        kd_seterr(err, rc, "cannot start the %s informer", gvr->resource);
        goto out;
    }
    if ((rc = kd_k8s_informer_wait_synced(*out, 10000)) != 0)
        kd_seterr(err, rc, "the %s informer did not list within 10 s", gvr->resource);
out:
    return rc;
}

int kd_api_start(const struct kd_api_opts *opts, struct kd_api **out, char *err)
{
    int rc = 0;
    struct kd_api *a = NULL;
    *out = NULL;
    if (opts == NULL || opts->store == NULL || opts->k8s == NULL) {
        rc = kd_seterr(err, KD_EINVAL, "kd_api_opts: store and k8s are required");
        goto out;
    }
    if (opts->token_key == NULL || opts->token_key_len < KD_API_KEY_MIN ||
        opts->token_key_len > 256) {
        rc = kd_seterr(err, KD_EINVAL, "kd_api_opts.token_key: %zu bytes; needs %d to 256",
                       opts->token_key == NULL ? 0 : opts->token_key_len, KD_API_KEY_MIN);
        goto out;
    }
    static const char *const slot_types[] = {"auto", "gpu", "cpu", NULL};
    const char *slot_type = NULL;
    for (int i = 0; slot_types[i] != NULL && slot_type == NULL; i++)
        if (opts->slot_type == NULL || strcmp(opts->slot_type, slot_types[i]) == 0)
            slot_type = slot_types[i];
    if (slot_type == NULL || opts->cpu_per_slot_milli < 0 || opts->max_slots_per_pod < 0) {
        rc = kd_seterr(err, KD_EINVAL,
                       "kd_api_opts: slot_type must be auto, gpu or cpu, cpu_per_slot_milli "
                       "and max_slots_per_pod >= 0");
        goto out;
    }
    bool loopback = opts->listen_addr == NULL || strcmp(opts->listen_addr, "127.0.0.1") == 0;
    if ((opts->tls_cert_pem == NULL) != (opts->tls_key_pem == NULL)) {
        rc = kd_seterr(err, KD_EINVAL, "kd_api_opts: tls_cert_pem and tls_key_pem go together");
        goto out;
    }
    if (opts->tls_cert_pem == NULL && !loopback) {
        rc = kd_seterr(err, KD_EINVAL,
                       "the API listens on %s without TLS: plain HTTP is only served on "
                       "127.0.0.1; give a certificate and key",
                       opts->listen_addr);
        goto out;
    }
    a = kd_xcalloc(1, sizeof(*a));
    a->o = *opts;
    a->o.slot_type = slot_type; /* a static string */
    if (a->o.cpu_per_slot_milli == 0)
        a->o.cpu_per_slot_milli = 1000;
    if (a->o.long_poll_max_s <= 0)
        a->o.long_poll_max_s = 60;
    if (a->o.metrics_timeout_ms <= 0)
        a->o.metrics_timeout_ms = 10000;
    if (a->o.max_downloads <= 0)
        a->o.max_downloads = KD_API_DEFAULT_DOWNLOADS;
    memcpy(a->key, opts->token_key, opts->token_key_len);
    a->keylen = opts->token_key_len;
    a->user_token = opts->user_token ? kd_xstrdup(opts->user_token) : NULL;
    if (a->user_token != NULL) {
        kd_log_add_secret(a->user_token);
        kd_utoken_sha256_hex(a->user_token, strlen(a->user_token), a->user_token_sha);
        if ((rc = kd_store_user_ensure_admin(opts->store, API_BOOTSTRAP_ADMIN, &a->admin_id,
                                             err)) != 0)
            goto out;
    }
    a->tls = opts->tls_cert_pem != NULL;
    a->o.tls_cert_pem = a->o.tls_key_pem = NULL;
    a->ns = opts->ns ? kd_xstrdup(opts->ns) : NULL;
    a->o.user_token = NULL;
    a->o.token_key = NULL;
    a->o.ns = a->ns;
    a->ids = json_object();
    a->progress = json_object();
    a->activity = json_object();
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->changed, NULL);
    api_hub_init(&a->hub);
    pthread_mutex_init(&a->logs_mu, NULL);
    pthread_mutex_init(&a->sar_mu, NULL);
    pthread_cond_init(&a->logs_cond, NULL);
    if (a->o.log_max_bytes == 0)
        a->o.log_max_bytes = KD_STORE_LOG_DEFAULT_CAP;
    if (opts->metrics != NULL) {
        static const double secs[] = {0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10, 60};
        a->m_requests = kd_metrics_counter(opts->metrics, "kdet_api_requests_total",
                                           "Controller API requests by method, route and code.",
                                           "method,route,code");
        a->m_seconds = kd_metrics_histogram(opts->metrics, "kdet_api_request_duration_seconds",
                                            "Controller API request latency (long-polls included).",
                                            "method", secs, sizeof(secs) / sizeof(secs[0]));
    }
    if ((rc = start_informer(a, &KD_K8S_TRIALS, &a->trials, err)) != 0)
        goto out;
    if ((rc = start_informer(a, &KD_K8S_EXPERIMENTS, &a->exps, err)) != 0)
        goto out;
    if (opts->tasks && (rc = start_informer(a, &KD_K8S_TASKS, &a->tasks, err)) != 0)
        goto out;
    struct kd_http_opts ho = {.bind_addr = opts->listen_addr,
                              .port = opts->port,
                              .max_body = KD_API_MAX_METRICS_BODY, /* each route sets its own */
                              .max_conns = opts->max_conns ? opts->max_conns : 256,
                              .handler = dispatch,
                              .authorize = authorize,
                              .ud = a,
                              .tls_cert_pem = opts->tls_cert_pem,
                              .tls_key_pem = opts->tls_key_pem};
    if ((rc = kd_http_start(&ho, &a->http, err)) != 0)
        goto out;
    KD_INFO("controller API listening", "addr=%s port=%d scheme=%s namespace=%s bootstrap_admin=%s",
            opts->listen_addr ? opts->listen_addr : "127.0.0.1", kd_http_port(a->http),
            opts->tls_cert_pem != NULL ? "https" : "http", a->ns ? a->ns : "*",
            a->user_token ? "on" : "off");
    *out = a;
    a = NULL;
out:
    kd_api_stop(a);
    return rc;
}

int kd_api_port(const struct kd_api *api)
{
    return kd_http_port(api->http);
}

void kd_api_stop(struct kd_api *a)
{
    if (a == NULL)
        return;
    if (a->http != NULL) {
        api_hub_wake(&a->hub);
        api_logs_wake(a);
        on_change(a);
        kd_http_stop(a->http);
    }
    kd_k8s_informer_free(a->trials);
    kd_k8s_informer_free(a->exps);
    kd_k8s_informer_free(a->tasks);
    api_hub_destroy(&a->hub);
    pthread_mutex_destroy(&a->logs_mu);
    api_authz_free(a);
    pthread_mutex_destroy(&a->sar_mu);
    pthread_cond_destroy(&a->logs_cond);
    json_decref(a->ids);
    json_decref(a->progress);
    json_decref(a->activity);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->changed);
    OPENSSL_cleanse(a->key, sizeof(a->key));
    OPENSSL_cleanse(a->user_token_sha, sizeof(a->user_token_sha));
    if (a->user_token != NULL)
        OPENSSL_cleanse(a->user_token, strlen(a->user_token));
    free(a->user_token);
    free(a->ns);
    free(a);
}
