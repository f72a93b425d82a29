/*
 * Trial and task logs over the API: kdet-launch POSTs batches of its
 * workers' lines with the trial's (or task's) token (stored under the
 * trial's byte cap, idempotent by key); users read a trial's, a task's or
 * an experiment's lines (the last N, after or
 * before a line, filtered by a regular expression or a substring) and
 * follow them as server-sent events. Streams read the store, not memory:
 * a stream resumes exactly from its Last-Event-ID (a line id), and lines
 * stored through another controller replica reach it too (it polls at least
 * once a second; batches stored here wake it at once).
 */
#include "api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

#define NS(q) ((q)->seg[3])
#define NAME(q) ((q)->seg[5])
/* A stream's pending output, at most. */
#define STREAM_BUF (8u << 20)

void api_logs_wake(struct kd_api *a)
{
    pthread_mutex_lock(&a->logs_mu);
    a->logs_gen++;
    pthread_cond_broadcast(&a->logs_cond);
    pthread_mutex_unlock(&a->logs_mu);
}

/* ---- the worker route ----------------------------------------------------------------------- */

void api_worker_logs(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *body = NULL;
    char err[KD_ERRLEN] = "";
    struct api_logs_req lr = {0};
    struct api_verr e;
    int64_t exp_id = 0, trial_id = 0, task_id = 0;
    int rc;
    bool task = strcmp(q->seg[4], "tasks") == 0;
    if ((task ? api_auth_task(q, NS(q), NAME(q), &trial)
              : api_auth_trial(q, NS(q), NAME(q), &trial)) != 0)
        goto out;
    if (api_body(q, KD_API_MAX_LOGS_BODY, &body) != 0)
        goto out;
    if (api_check_logs(body, kd_wall_ms(), &lr, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    const char *key = lr.key, *run = lr.run_id;
    const struct kd_log_line *lines = lr.lines;
    size_t n = lr.n;
    if ((rc = task ? api_task_row(a, trial, true, &task_id, err)
                   : api_store_ids(a, trial, true, &exp_id, &trial_id, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    struct kd_log_batch b = {.trial_id = trial_id,
                             .task_id = task_id,
                             .run_id = run,
                             .key = key,
                             .lines = lines,
                             .n = n};
    struct kd_log_put_result res;
    if ((rc = kd_store_logs_put(a->o.store, &b, a->o.log_max_bytes, &res, err)) != 0) {
        if (rc == KD_EINVAL) {
            /* The store names the field: "lines[3].line: ..." or "key: ...". */
            char field[64] = "";
            const char *colon = strstr(err, ": ");
            size_t fl = colon != NULL ? (size_t)(colon - err) : 0;
            if (fl < sizeof(field))
                memcpy(field, err, fl);
            field[fl < sizeof(field) ? fl : 0] = '\0';
            api_error(q, 400, field, "%s", err);
        } else {
            api_fail(q, rc, NULL, err);
        }
        goto out;
    }
    /* Also for a batch sent again: its first try may have stored the lines and then failed to
     * record a match; recording is idempotent. */
    if (!task && (rc = api_log_policies_apply(a, trial, run, lr.node_rank, lines, n, err)) != 0) {
        api_error(q, 503, NULL,
                  "the lines are stored but a log policy match could not be recorded (%s); retry "
                  "with the same key",
                  err);
        goto out;
    }
    if (res.capped)
        KD_WARN("logs reached their limit; later lines are dropped", "%s=%s/%s limit_bytes=%lld",
                task ? "task" : "trial", NS(q), NAME(q), (long long)a->o.log_max_bytes);
    if (res.stored > 0 || res.capped)
        api_logs_wake(a);
    api_json(q, 200,
             json_pack("{s:I,s:I,s:I,s:b,s:s}", "accepted", (json_int_t)n, "stored",
                       (json_int_t)res.stored, "dropped", (json_int_t)res.dropped, "duplicate",
                       res.duplicate, "key", key));
out:
    free(lr.lines);
    json_decref(trial);
    json_decref(body);
}

/* ---- reading ------------------------------------------------------------------------------ */

struct names_ctx {
    const char *exp;
    json_t *by_uid; /* uid -> name */
};

static int pick_names(json_t *t, void *ud)
{
    struct names_ctx *c = ud;
    const char *e = json_string_value(json_object_get(json_object_get(t, "spec"), "experiment"));
    if (e != NULL && strcmp(e, c->exp) == 0)
        json_object_set_new(c->by_uid, kd_k8s_meta_str(t, "uid") ?: "",
                            json_string(kd_k8s_meta_str(t, "name") ?: ""));
    return 0;
}

/*
 * Trial store id -> the Trial's name, for the experiment's trials (the store's rows give uids,
 * the informer cache names). Best effort: an id without a name is shown as the id.
 */
static json_t *trial_names(struct kd_api *a, const char *ns, const char *exp, int64_t exp_id)
{
    json_t *out = json_object(), *rows = NULL;
    char err[KD_ERRLEN] = "", idb[24];
    struct names_ctx c = {.exp = exp, .by_uid = json_object()};
    (void)kd_k8s_cache_each(kd_k8s_informer_cache(a->trials), ns, pick_names, &c);
    if (kd_store_trials_list(a->o.store, exp_id, &rows, err) == 0) {
        size_t i;
        json_t *t;
        json_array_foreach(rows, i, t)
        {
            json_t *name =
                json_object_get(c.by_uid, json_string_value(json_object_get(t, "uid")) ?: "");
            snprintf(idb, sizeof(idb), "%lld",
                     (long long)json_integer_value(json_object_get(t, "id")));
            if (name != NULL)
                json_object_set(out, idb, name);
        }
    }
    json_decref(rows);
    json_decref(c.by_uid);
    return out;
}

/* Add "trial" (the Trial's name, else its id) to each line. */
static void name_lines(json_t *lines, const json_t *names)
{
    size_t i;
    json_t *l;
    char idb[24];
    json_array_foreach(lines, i, l)
    {
        snprintf(idb, sizeof(idb), "%lld",
                 (long long)json_integer_value(json_object_get(l, "trial_id")));
        json_t *n = json_object_get(names, idb);
        json_object_set_new(l, "trial", n != NULL ? json_incref(n) : json_string(idb));
    }
}

/* What a request asks for: the object, its store ids, the query. */
struct target {
    bool experiment;
    bool task;      /* a Task's lines (task_id) */
    json_t *obj;    /* the Experiment, Trial or Task */
    char ns[256];   /* its namespace */
    char name[256]; /* its name */
    char exp[256];  /* the experiment's name */
    int64_t exp_id; /* 0: no stored data yet */
    int64_t trial_id;
    int64_t task_id;
    json_t *names; /* trial id -> name */
};

static void target_free(struct target *t)
{
    json_decref(t->obj);
    json_decref(t->names);
}

/* The store ids of the target (0 while nothing is stored). 0 or KD_E* with err. */
static int target_ids(struct kd_api *a, struct target *t, char *err)
{
    int rc = 0;
    if (t->trial_id > 0 || t->task_id > 0 || (t->experiment && t->exp_id > 0))
        goto out;
    rc = t->task         ? api_task_row(a, t->obj, false, &t->task_id, err)
         : t->experiment ? api_exp_row(a, t->obj, false, &t->exp_id, err)
                         : api_store_ids(a, t->obj, false, &t->exp_id, &t->trial_id, err);
    if (rc == KD_ENOTFOUND) {
        t->exp_id = t->trial_id = t->task_id = 0;
        rc = 0;
    }
out:
    return rc;
}

/* Resolve NAME(q) (a name or an integer id) into *t; answers the request itself on failure. */
static int target_of(struct api_rq *q, struct target *t)
{
    char err[KD_ERRLEN] = "";
    int rc;
    memset(t, 0, sizeof(*t));
    t->experiment = strcmp(q->seg[4], "experiments") == 0;
    t->task = strcmp(q->seg[4], "tasks") == 0;
    if ((rc = t->task ? api_get_task(q->api, NS(q), NAME(q), &t->obj, err)
                      : api_user_get(q, !t->experiment, &t->obj, err)) != 0 ||
        (rc = target_ids(q->api, t, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    kd_strlcpy(t->ns, NS(q), sizeof(t->ns));
    kd_strlcpy(t->name, kd_k8s_meta_str(t->obj, "name") ?: "", sizeof(t->name));
    kd_strlcpy(t->exp,
               t->experiment || t->task
                   ? t->name
                   : json_string_value(json_object_get(json_object_get(t->obj, "spec"),
                                                       "experiment")) ?: "",
               sizeof(t->exp));
out:
    return rc;
}

/* The query parameters shared by the list and the stream; answers 400 itself. */
static int parse_query(struct api_rq *q, struct kd_log_query *lq, long def_limit)
{
    long tail = 0, limit = 0, after = 0, before = 0;
    int rc;
    memset(lq, 0, sizeof(*lq));
    if ((rc = api_query_int(q, "tail", 0, KD_STORE_LOG_MAX_QUERY, 0, &tail)) != 0 ||
        (rc = api_query_int(q, "limit", 1, KD_STORE_LOG_MAX_QUERY, def_limit, &limit)) != 0 ||
        (rc = api_query_int(q, "after", 0, INT64_MAX / 2, 0, &after)) != 0 ||
        (rc = api_query_int(q, "before", 0, INT64_MAX / 2, 0, &before)) != 0)
        goto out;
    const char *grep = kd_http_query(q->r, "grep"), *contains = kd_http_query(q->r, "contains");
    if ((grep && strlen(grep) > KD_STORE_LOG_MAX_PATTERN) ||
        (contains && strlen(contains) > KD_STORE_LOG_MAX_PATTERN)) {
        rc = api_error(q, 400, grep ? "grep" : "contains", "%s: at most %d bytes",
                       grep ? "grep" : "contains", KD_STORE_LOG_MAX_PATTERN);
        goto out;
    }
    lq->tail = tail > 0;
    lq->limit = (int)(tail > 0 ? tail : limit);
    lq->after_id = after;
    lq->before_id = before;
    lq->regex = grep != NULL && grep[0] != '\0' ? grep : NULL;
    lq->contains = contains != NULL && contains[0] != '\0' ? contains : NULL;
out:
    return rc;
}

/* The lines of the target for lq (an empty array while nothing is stored). */
static int read_lines(struct kd_api *a, struct target *t, struct kd_log_query *lq, json_t **out,
                      char *err)
{
    int rc = 0;
    *out = NULL;
    if ((rc = target_ids(a, t, err)) != 0)
        goto out;
    if (t->task) {
        if (t->task_id == 0) {
            *out = json_array();
            goto out;
        }
        lq->experiment_id = lq->trial_id = 0;
        lq->task_id = t->task_id;
        rc = kd_store_logs_query(a->o.store, lq, out, err);
        goto out;
    }
    if (t->exp_id == 0 || (!t->experiment && t->trial_id == 0)) {
        *out = json_array();
        goto out;
    }
    lq->experiment_id = t->experiment ? t->exp_id : 0;
    lq->trial_id = t->experiment ? 0 : t->trial_id;
    if ((rc = kd_store_logs_query(a->o.store, lq, out, err)) != 0)
        goto out;
    /* Names for ids not seen yet (a trial started since). */
    size_t i;
    json_t *l;
    bool missing = t->names == NULL;
    char idb[24];
    json_array_foreach(*out, i, l)
    {
        snprintf(idb, sizeof(idb), "%lld",
                 (long long)json_integer_value(json_object_get(l, "trial_id")));
        if (!missing && json_object_get(t->names, idb) == NULL)
            missing = true;
    }
    if (missing && json_array_size(*out) > 0) {
        json_decref(t->names);
        t->names = trial_names(a, t->ns, t->exp, t->exp_id);
    }
    name_lines(*out, t->names);
out:
    return rc;
}

void api_user_logs(struct api_rq *q)
{
    struct target t;
    struct kd_log_query lq;
    json_t *lines = NULL;
    char err[KD_ERRLEN] = "";
    int rc;
    if (target_of(q, &t) != 0 || parse_query(q, &lq, KD_STORE_LOG_MAX_QUERY) != 0)
        goto out;
    if ((rc = read_lines(q->api, &t, &lq, &lines, err)) != 0) {
        api_fail(q, rc, rc == KD_EINVAL ? "grep" : NULL, err);
        goto out;
    }
    json_t *last = json_array_get(lines, json_array_size(lines) - 1);
    api_json(q, 200,
             json_pack("{s:s,s:s,s:o,s:I}",
                       t.task         ? "task"
                       : t.experiment ? "experiment"
                                      : "trial",
                       t.name, "namespace", t.ns, "logs", lines, "last_id",
                       (json_int_t)(last != NULL ? json_integer_value(json_object_get(last, "id"))
                                                 : lq.after_id)));
    lines = NULL;
out:
    json_decref(lines);
    target_free(&t);
}

/* ---- following (server-sent events) ------------------------------------------------------- */

struct lstream {
    struct kd_api *api;
    struct target t;
    struct kd_log_query lq; /* after_id moves with what was sent */
    char *regex, *contains; /* owned copies for lq */
    struct kd_buf out;
    uint64_t gen;
    int64_t last_write_ms;
    bool ending;   /* the object was seen ended: one more read, then "end" */
    int exit_code; /* a task's, once ended; -1: none */
    bool ended;
};

static void lstream_free(void *p)
{
    struct lstream *s = p;
    target_free(&s->t);
    free(s->regex);
    free(s->contains);
    kd_buf_free(&s->out);
    free(s);
}

static bool terminal(const char *state)
{
    return state != NULL && (strcmp(state, "COMPLETED") == 0 || strcmp(state, "CANCELED") == 0 ||
                             strcmp(state, "ERROR") == 0 || strcmp(state, "TERMINATED") == 0);
}

/* The object's state now (informer cache); gone counts as ended. */
static bool object_ended(struct lstream *s, const char **state)
{
    json_t *o = NULL;
    char err[KD_ERRLEN];
    int rc = s->t.task         ? api_get_task(s->api, s->t.ns, s->t.name, &o, err)
             : s->t.experiment ? api_get_experiment(s->api, s->t.ns, s->t.name, &o, err)
                               : api_get_trial(s->api, s->t.ns, s->t.name, &o, err);
    static const char gone[] = "DELETED";
    bool ended;
    if (rc != 0 ||
        strcmp(kd_k8s_meta_str(o, "uid") ?: "", kd_k8s_meta_str(s->t.obj, "uid") ?: "") != 0) {
        *state = gone;
        ended = rc == KD_ENOTFOUND || rc == 0;
    } else {
        const json_t *ost = json_object_get(o, "status");
        const char *st = json_string_value(json_object_get(ost, "state"));
        ended = terminal(st);
        *state = ended ? (strcmp(st, "COMPLETED") == 0    ? "COMPLETED"
                          : strcmp(st, "CANCELED") == 0   ? "CANCELED"
                          : strcmp(st, "TERMINATED") == 0 ? "TERMINATED"
                                                          : "ERROR")
                       : "";
        json_t *code = json_object_get(ost, "exitCode");
        s->exit_code = ended && json_is_integer(code) ? (int)json_integer_value(code) : -1;
    }
    json_decref(o);
    return ended;
}

/* Wait up to a second for a stored batch (or the API's stop). */
static void wait_batch(struct lstream *s)
{
    struct kd_api *a = s->api;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_mutex_lock(&a->logs_mu);
    if (a->logs_gen == s->gen)
        pthread_cond_timedwait(&a->logs_cond, &a->logs_mu, &ts);
    s->gen = a->logs_gen;
    pthread_mutex_unlock(&a->logs_mu);
}

/* One read of the store into s->out; sets ended once the object ended and nothing is left. */
static void lstream_poll(struct lstream *s)
{
    json_t *lines = NULL;
    char err[KD_ERRLEN] = "";
    const char *state = "";
    /* Checked before reading, so that lines stored before the end are read before "end". */
    bool was_ended = object_ended(s, &state);
    int rc = read_lines(s->api, &s->t, &s->lq, &lines, err);
    if (rc != 0) {
        /* Said once; the client reconnects (retry: 2000) and resumes with Last-Event-ID. */
        json_t *e = json_pack("{s:s}", "error", err);
        char *data = json_dumps(e, JSON_COMPACT);
        int w = kd_buf_printf(&s->out, "event: error\ndata: %s\n\n", data ? data : "{}");
        (void)w;
        free(data);
        json_decref(e);
        s->ended = true;
        goto out;
    }
    if (json_array_size(lines) > 0) {
        json_t *last = json_array_get(lines, json_array_size(lines) - 1);
        int64_t id = json_integer_value(json_object_get(last, "id"));
        json_t *ev = json_pack("{s:O}", "logs", lines);
        char *data = json_dumps(ev, JSON_COMPACT);
        json_decref(ev);
        if (data != NULL &&
            kd_buf_printf(&s->out, "id: %lld\nevent: logs\ndata: %s\n\n", (long long)id, data) == 0)
            s->lq.after_id = id;
        free(data);
        /* Reading from the start goes on with the first lines after, not the last. */
        s->lq.tail = false;
        s->lq.limit = KD_STORE_LOG_MAX_QUERY;
        goto out;
    }
    s->lq.tail = false;
    s->lq.limit = KD_STORE_LOG_MAX_QUERY;
    if (was_ended && s->exit_code >= 0) {
        int w = kd_buf_printf(&s->out,
                              "event: end\ndata: {\"state\":\"%s\",\"last_id\":%lld,"
                              "\"exit_code\":%d}\n\n",
                              state, (long long)s->lq.after_id, s->exit_code);
        (void)w;
        s->ended = true;
    } else if (was_ended) {
        int w = kd_buf_printf(&s->out, "event: end\ndata: {\"state\":\"%s\",\"last_id\":%lld}\n\n",
                              state, (long long)s->lq.after_id);
        (void)w;
        s->ended = true;
    }
out:
    json_decref(lines);
}

static ssize_t lstream_fill(void *p, char *buf, size_t max)
{
    struct lstream *s = p;
    if (s->out.len == 0) {
        if (s->ended)
            return -1;
        lstream_poll(s);
        if (s->out.len == 0)
            wait_batch(s);
    }
    return api_sse_take(&s->out, &s->last_write_ms, buf, max);
}

void api_user_logs_stream(struct api_rq *q)
{
    struct lstream *s = kd_xcalloc(1, sizeof(*s));
    s->api = q->api;
    s->exit_code = -1;
    if (target_of(q, &s->t) != 0 || parse_query(q, &s->lq, KD_STORE_LOG_MAX_QUERY) != 0)
        goto fail;
    /* Last-Event-ID (a reconnecting client): resume after that line. */
    const char *lei = kd_http_header(q->r, "Last-Event-ID");
    int64_t from;
    if (lei != NULL && kd_parse_i64(lei, &from) == 0 && from > 0) {
        s->lq.after_id = from;
        s->lq.tail = false;
        s->lq.limit = KD_STORE_LOG_MAX_QUERY;
    }
    s->lq.before_id = 0; /* a stream only goes forward */
    s->regex = s->lq.regex ? kd_xstrdup(s->lq.regex) : NULL;
    s->contains = s->lq.contains ? kd_xstrdup(s->lq.contains) : NULL;
    s->lq.regex = s->regex;
    s->lq.contains = s->contains;
    if (s->regex != NULL) {
        /* A bad expression is a 400 now, not an error event later. */
        json_t *none = NULL;
        char err[KD_ERRLEN] = "";
        struct kd_log_query probe = {
            .trial_id = 1, .limit = 1, .regex = s->regex, .after_id = INT64_MAX / 2};
        int rc = kd_store_logs_query(q->api->o.store, &probe, &none, err);
        json_decref(none);
        if (rc != 0) {
            api_fail(q, rc, rc == KD_EINVAL ? "grep" : NULL, err);
            goto fail;
        }
    }
    kd_buf_init(&s->out, STREAM_BUF);
    int rc = kd_buf_puts(&s->out, "retry: 2000\n: connected\n\n");
    (void)rc;
    s->last_write_ms = kd_mono_ms();
    pthread_mutex_lock(&q->api->logs_mu);
    s->gen = q->api->logs_gen;
    pthread_mutex_unlock(&q->api->logs_mu);
    /* The first read now: `tail` means the last lines when the request came, not later. */
    lstream_poll(s);
    kd_http_add_header(q->r, "Cache-Control", "no-cache");
    q->status = 200;
    kd_http_respond_stream(q->r, 200, "text/event-stream", lstream_fill, s, lstream_free);
    return;
fail:
    lstream_free(s);
}
