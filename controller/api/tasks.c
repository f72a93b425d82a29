/*
 * Tasks (notebooks, commands, shells, TensorBoards) over the API: the task
 * token (a task's pod ships its logs and reports its service's port with
 * it), the store row that holds a task's logs, the users' routes (list,
 * describe, kill), the tasks of the job queue, and the activity the proxy
 * sees, which the controller reads to end idle shells and TensorBoards.
 */
#include "api/api_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "k8s/position.h"

#define NS(q) ((q)->seg[3])
#define NAME(q) ((q)->seg[5])
/* A reported address: a host name or IP of at most this many bytes. */
#define MAX_HOST 253
#define DEFAULT_PRIORITY 42

/* The string at obj.a.b, else def. */
static const char *str_at(const json_t *obj, const char *a, const char *b, const char *def)
{
    const char *s = json_string_value(json_object_get(json_object_get(obj, a), b));
    return s != NULL ? s : def;
}

json_t *api_job_lookup(const char *ns, const char *name, void *ud)
{
    struct kd_api *a = ud;
    char key[600];
    json_t *o = NULL;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    if (kd_k8s_cache_get(kd_k8s_informer_cache(a->exps), key, &o) != 0 && a->tasks != NULL &&
        kd_k8s_cache_get(kd_k8s_informer_cache(a->tasks), key, &o) != 0)
        o = NULL;
    return o;
}

int api_get_task(struct kd_api *a, const char *ns, const char *name, json_t **out, char *err)
{
    char key[600];
    int rc;
    *out = NULL;
    if (a->tasks == NULL) {
        rc = kd_seterr(err, KD_ENOTFOUND, "tasks are off: the Task resource is not installed");
        goto out;
    }
    if (a->ns != NULL && strcmp(ns, a->ns) != 0) {
        rc = kd_seterr(err, KD_ENOTFOUND, "namespace %s is not served by this controller", ns);
        goto out;
    }
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    rc = kd_k8s_cache_get(kd_k8s_informer_cache(a->tasks), key, out);
    if (rc == KD_ENOTFOUND) /* the cache may lag behind a create: ask the API server */
        rc = kd_k8s_get(a->o.k8s, &KD_K8S_TASKS, ns, name, out, NULL, err);
    if (rc == KD_ENOTFOUND)
        kd_seterr(err, rc, "task %s/%s not found", ns, name);
out:
    return rc;
}

int api_auth_task(struct api_rq *q, const char *ns, const char *name, json_t **task)
{
    int rc = 0;
    char err[KD_ERRLEN] = "", want[KD_API_TOKEN_LEN + 1] = "";
    const char *auth = kd_http_header(q->r, "Authorization");
    *task = NULL;
    if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0) {
        rc = KD_EUNAUTHORIZED;
        api_error(q, 401, "Authorization", "a task token is required (Authorization: Bearer)");
        goto out;
    }
    const char *tok = auth + 7;
    if ((rc = api_get_task(q->api, ns, name, task, err)) != 0) {
        if (rc == KD_ENOTFOUND) { /* the same answer as a bad token: nothing is revealed */
            rc = KD_EUNAUTHORIZED;
            api_error(q, 401, "Authorization", "the token is not valid for task %s/%s", ns, name);
        } else {
            api_fail(q, rc, NULL, err);
        }
        goto out;
    }
    const char *uid = kd_k8s_meta_str(*task, "uid");
    if (uid == NULL ||
        kd_api_task_token(q->api->key, q->api->keylen, ns, name, uid, want, sizeof(want)) != 0 ||
        strlen(tok) != KD_API_TOKEN_LEN || CRYPTO_memcmp(tok, want, KD_API_TOKEN_LEN) != 0) {
        rc = KD_EUNAUTHORIZED;
        api_error(q, 401, "Authorization", "the token is not valid for task %s/%s", ns, name);
    }
out:
    OPENSSL_cleanse(want, sizeof(want));
    if (rc != 0) {
        json_decref(*task);
        *task = NULL;
    }
    return rc;
}

int api_task_row(struct kd_api *a, const json_t *task, bool create, int64_t *id, char *err)
{
    const json_t *spec = json_object_get(task, "spec");
    int rc = kd_store_task_id(a->o.store, kd_k8s_meta_str(task, "uid"), id, err);
    if (rc == KD_ENOTFOUND && create) {
        struct kd_store_task st = {
            .uid = kd_k8s_meta_str(task, "uid"),
            .namespace_ = kd_k8s_meta_str(task, "namespace"),
            .name = kd_k8s_meta_str(task, "name"),
            .kind = json_string_value(json_object_get(spec, "kind")) ?: "command",
            .owner = json_string_value(json_object_get(spec, "owner")),
            .config = json_object_get(spec, "config"),
            .state = str_at(task, "status", "state", "QUEUED"),
        };
        rc = kd_store_task_upsert(a->o.store, &st, id, err);
    }
    return rc;
}

/* ---- the worker route: the service's address ------------------------------------------------ */

struct address_edit {
    const char *run_id, *host, *user;
    int port;
    char time[40];
};

static bool set_address(json_t *status, void *ctx)
{
    struct address_edit *e = ctx;
    json_t *want = json_pack("{s:s,s:s,s:i,s:s}", "runId", e->run_id, "host", e->host, "port",
                             e->port, "time", e->time);
    if (e->user != NULL)
        json_object_set_new(want, "user", json_string(e->user));
    json_t *have = json_object_get(status, "address");
    bool same = have != NULL &&
                json_equal(json_object_get(have, "runId"), json_object_get(want, "runId")) &&
                json_equal(json_object_get(have, "host"), json_object_get(want, "host")) &&
                json_equal(json_object_get(have, "port"), json_object_get(want, "port"));
    if (!same)
        json_object_set_new(status, "address", want);
    else
        json_decref(want);
    return !same;
}

/* A host the proxy may connect to: an IPv4 or IPv6 address or a DNS name, nothing else. */
static bool host_ok(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > MAX_HOST)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == ':'))
            return false;
    }
    return true;
}

void api_worker_task_address(struct api_rq *q)
{
    static const char *const keys[] = {"run_id", "host", "port", "user", NULL};
    json_t *task = NULL, *body = NULL;
    char err[KD_ERRLEN] = "";
    if (api_auth_task(q, NS(q), NAME(q), &task) != 0)
        goto out;
    struct api_verr ve;
    if (api_body(q, KD_API_MAX_RENDEZVOUS_BODY, &body) != 0)
        goto out;
    if (api_check_keys(body, "", keys, &ve) != 0) {
        api_refuse(q, &ve);
        goto out;
    }
    struct address_edit e = {
        .run_id = json_string_value(json_object_get(body, "run_id")),
        .host = json_string_value(json_object_get(body, "host")),
        .user = json_string_value(json_object_get(body, "user")),
        .port = (int)json_integer_value(json_object_get(body, "port")),
    };
    if (e.run_id == NULL || e.run_id[0] == '\0' || strlen(e.run_id) > API_MAX_RUN_ID) {
        api_error(q, 400, "run_id", "run_id: required, at most %d bytes (KDET_RUN_ID)",
                  API_MAX_RUN_ID);
        goto out;
    }
    if (e.host == NULL || !host_ok(e.host)) {
        api_error(q, 400, "host", "host: required, an IP address or a DNS name");
        goto out;
    }
    if (e.port < 1 || e.port > 65535) {
        api_error(q, 400, "port", "port: must be an integer from 1 to 65535");
        goto out;
    }
    if (e.user != NULL && (e.user[0] == '\0' || strlen(e.user) > 64)) {
        api_error(q, 400, "user", "user: 1 to 64 bytes (the pod's user, for ssh)");
        goto out;
    }
    kd_time_rfc3339(kd_wall_ms(), 0, e.time, sizeof(e.time));
    int rc = api_status_update_gvr(q->api, &KD_K8S_TASKS, NS(q), NAME(q),
                                   kd_k8s_meta_str(task, "uid"), set_address, &e, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("task address reported", "task=%s/%s run_id=%s host=%s port=%d", NS(q), NAME(q),
            kd_logq(e.run_id), kd_logq(e.host), e.port);
    api_json(q, 200,
             json_pack("{s:s,s:s,s:i}", "run_id", e.run_id, "host", e.host, "port", e.port));
out:
    json_decref(task);
    json_decref(body);
}

/* ---- users' routes -------------------------------------------------------------------------- */

/* What a listing shows of a Task. New reference. */
static json_t *summary(const json_t *t)
{
    const json_t *spec = json_object_get(t, "spec"), *st = json_object_get(t, "status");
    const json_t *cfg = json_object_get(spec, "config");
    json_t *s = json_pack("{s:s?,s:s?,s:s?,s:s,s:s?,s:s?,s:s,s:s?,s:s?,s:s?}", "namespace",
                          kd_k8s_meta_str(t, "namespace"), "name", kd_k8s_meta_str(t, "name"),
                          "kind", json_string_value(json_object_get(spec, "kind")), "state",
                          json_string_value(json_object_get(st, "state")) ?: "QUEUED", "owner",
                          json_string_value(json_object_get(spec, "owner")), "description",
                          json_string_value(json_object_get(cfg, "description")), "message",
                          json_string_value(json_object_get(st, "message")) ?: "", "end_reason",
                          json_string_value(json_object_get(st, "endReason")), "submitted",
                          kd_k8s_meta_str(t, "creationTimestamp"), "ended",
                          json_string_value(json_object_get(st, "endTime")));
    json_t *code = json_object_get(st, "exitCode");
    if (json_is_integer(code))
        json_object_set(s, "exit_code", code);
    json_t *slots = json_object_get(json_object_get(cfg, "resources"), "slots");
    if (json_is_integer(slots))
        json_object_set(s, "slots", slots);
    if (json_object_get(st, "address") != NULL &&
        strcmp(json_string_value(json_object_get(st, "state")) ?: "", "RUNNING") == 0)
        json_object_set_new(
            s, "proxy", json_sprintf("%s%s/", API_PROXY_PREFIX, kd_k8s_meta_str(t, "name") ?: ""));
    return s;
}

static int by_created(const void *pa, const void *pb)
{
    const json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
    int c = strcmp(kd_k8s_meta_str(a, "creationTimestamp") ?: "",
                   kd_k8s_meta_str(b, "creationTimestamp") ?: "");
    return c != 0 ? c : strcmp(kd_k8s_meta_str(a, "name") ?: "", kd_k8s_meta_str(b, "name") ?: "");
}

static int collect(json_t *t, void *ud)
{
    json_array_append(ud, t);
    return 0;
}

void api_user_tasks(struct api_rq *q)
{
    json_t *all = json_array(), *out = json_array();
    const char *kind = kd_http_query(q->r, "kind");
    if (q->api->tasks != NULL)
        (void)kd_k8s_cache_each(kd_k8s_informer_cache(q->api->tasks), NS(q), collect, all);
    size_t n = json_array_size(all);
    json_t **v = kd_http_alloc(q->r, (n ? n : 1) * sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(all, i);
    qsort(v, n, sizeof(*v), by_created);
    for (size_t i = 0; i < n; i++) {
        const char *k = json_string_value(json_object_get(json_object_get(v[i], "spec"), "kind"));
        if (kind == NULL || strcmp(kind, k ?: "") == 0)
            json_array_append_new(out, summary(v[i]));
    }
    json_decref(all);
    api_json(q, 200, json_pack("{s:s,s:o}", "namespace", NS(q), "tasks", out));
}

void api_user_task(struct api_rq *q)
{
    json_t *t = NULL;
    char err[KD_ERRLEN] = "";
    int rc = api_get_task(q->api, NS(q), NAME(q), &t, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    json_t *s = summary(t);
    json_object_set(s, "config", json_object_get(json_object_get(t, "spec"), "config"));
    json_t *conds = json_object_get(json_object_get(t, "status"), "conditions");
    if (conds != NULL)
        json_object_set(s, "conditions", conds);
    api_json(q, 200, s);
out:
    json_decref(t);
}

void api_user_task_kill(struct api_rq *q)
{
    json_t *t = NULL, *patch = NULL;
    char err[KD_ERRLEN] = "";
    int rc = api_get_task(q->api, NS(q), NAME(q), &t, err);
    if (rc == 0) {
        patch = json_pack("{s:{s:b}}", "spec", "killed", 1);
        rc = kd_k8s_patch(q->api->o.k8s, &KD_K8S_TASKS, NS(q), NAME(q), NULL, KD_K8S_PATCH_MERGE,
                          patch, NULL, NULL, err);
    }
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("task kill requested", "task=%s/%s user=%s", NS(q), NAME(q), kd_logq(q->who->name));
    api_json(q, 200, json_pack("{s:s,s:s,s:b}", "namespace", NS(q), "task", NAME(q), "killed", 1));
out:
    json_decref(t);
    json_decref(patch);
}

/* ---- the job queue -------------------------------------------------------------------------- */

static int pick_live(json_t *t, void *ud)
{
    const char *st = json_string_value(json_object_get(json_object_get(t, "status"), "state"));
    if (st == NULL || strcmp(st, "TERMINATED") != 0)
        json_array_append(ud, t);
    return 0;
}

json_t *api_task_jobs(struct kd_api *a, const char *ns)
{
    json_t *live = json_array(), *out = json_array();
    if (a->tasks != NULL)
        (void)kd_k8s_cache_each(kd_k8s_informer_cache(a->tasks), ns, pick_live, live);
    size_t i;
    json_t *t;
    json_array_foreach(live, i, t)
    {
        const json_t *res =
            json_object_get(json_object_get(json_object_get(t, "spec"), "config"), "resources");
        json_int_t prio = json_integer_value(json_object_get(res, "priority"));
        json_t *slots = json_object_get(res, "slots");
        const char *pool = json_string_value(json_object_get(res, "resource_pool"));
        json_t *j =
            json_pack("{s:s?,s:s?,s:s?,s:s,s:I,s:I,s:s,s:s,s:s?}", "namespace",
                      kd_k8s_meta_str(t, "namespace"), "task", kd_k8s_meta_str(t, "name"), "kind",
                      json_string_value(json_object_get(json_object_get(t, "spec"), "kind")),
                      "state", str_at(t, "status", "state", "QUEUED"), "priority",
                      prio >= 1 && prio <= 99 ? prio : (json_int_t)DEFAULT_PRIORITY, "slots",
                      json_is_integer(slots) ? json_integer_value(slots) : (json_int_t)1,
                      "resource_pool", pool != NULL && pool[0] ? pool : "default", "message",
                      str_at(t, "status", "message", ""), "submitted",
                      kd_k8s_meta_str(t, "creationTimestamp"));
        json_object_set_new(j, "position_key", json_real(kd_queue_position(t, api_job_lookup, a)));
        json_array_append_new(out, j);
    }
    json_decref(live);
    return out;
}

/* ---- activity through the proxy ------------------------------------------------------------- */

void api_task_activity_note(struct kd_api *a, const char *ns, const char *name, int open_delta)
{
    char key[600];
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    pthread_mutex_lock(&a->mu);
    json_t *e = json_object_get(a->activity, key);
    if (e == NULL) {
        e = json_pack("[I,I]", (json_int_t)0, (json_int_t)0);
        json_object_set_new(a->activity, key, e);
    }
    json_int_t open = json_integer_value(json_array_get(e, 1)) + open_delta;
    json_array_set_new(e, 0, json_integer(kd_wall_ms()));
    json_array_set_new(e, 1, json_integer(open > 0 ? open : 0));
    pthread_mutex_unlock(&a->mu);
}

bool kd_api_task_activity(struct kd_api *a, const char *ns, const char *name, int *open,
                          int64_t *last_ms)
{
    char key[600];
    bool found = false;
    *open = 0;
    *last_ms = 0;
    if (a == NULL)
        return false;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    pthread_mutex_lock(&a->mu);
    json_t *e = json_object_get(a->activity, key);
    if (e != NULL) {
        *last_ms = json_integer_value(json_array_get(e, 0));
        *open = (int)json_integer_value(json_array_get(e, 1));
        found = true;
    }
    pthread_mutex_unlock(&a->mu);
    return found;
}
