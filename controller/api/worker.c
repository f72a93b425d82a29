/*
 * The worker endpoints: what a trial's processes call with the trial's
 * token. Metric batches go to the store (durably, with idempotency keys);
 * validations, checkpoints and early exits are also written to the Trial's
 * status so the reconcilers act on them level-triggered; the searcher
 * operation and the preemption signal are long-polls over the informer
 * caches. A trial the controller marked Idle (it waits at its target for
 * the searcher) is told to checkpoint and exit, so its GPUs are released.
 * The chief of a multi-node trial reports where it listens, and the other
 * nodes read it back for their attempt (run id), so no cluster DNS is needed.
 */
#include "api/api_int.h"
#include "states.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"

#define NS(q) ((q)->seg[3])
#define TRIAL(q) ((q)->seg[5])

static const char *spec_str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(json_object_get(o, "spec"), k));
}

static bool spec_true(const json_t *o, const char *k)
{
    return json_is_true(json_object_get(json_object_get(o, "spec"), k));
}

static const char *state_of(const json_t *o)
{
    return json_string_value(json_object_get(json_object_get(o, "status"), "state")) ?: "";
}

static void now_rfc3339(char *buf, size_t len)
{
    kd_time_rfc3339(kd_wall_ms(), 0, buf, len);
}

/* ---- metrics ------------------------------------------------------------------------------ */

struct val_ctx {
    const char *metric;
    double value;
    bool has_value;
    const char *time_metric; /* adaptive_asha's searcher.time_metric, NULL without */
    double time_value;       /* its value in the row, when has_time */
    bool has_time;
    bool smaller_is_better;
    int64_t batches;
    char time[40];
};

static bool set_validation(json_t *status, void *ctx)
{
    struct val_ctx *v = ctx;
    bool changed = false;
    json_t *latest = json_object_get(status, "latestValidation");
    json_int_t cur = json_integer_value(json_object_get(latest, "batches"));
    bool had_value = json_is_number(json_object_get(latest, "value"));
    if (latest == NULL || v->batches > cur || (v->batches == cur && !had_value)) {
        json_t *o = json_pack("{s:s,s:I,s:s}", "metric", v->metric ? v->metric : "", "batches",
                              (json_int_t)v->batches, "time", v->time);
        if (v->has_value)
            json_object_set_new(o, "value", json_real(v->value));
        if (v->has_time) {
            json_object_set_new(o, "timeMetric", json_string(v->time_metric));
            json_object_set_new(o, "timeValue", json_real(v->time_value));
        }
        json_object_set_new(status, "latestValidation", o);
        changed = true;
    }
    json_t *best = json_object_get(status, "bestValidation");
    json_t *bv = json_object_get(best, "value");
    if (v->has_value &&
        (!json_is_number(bv) || (v->smaller_is_better ? v->value < json_number_value(bv)
                                                      : v->value > json_number_value(bv)))) {
        json_object_set_new(status, "bestValidation",
                            json_pack("{s:s,s:f,s:I,s:s}", "metric", v->metric, "value", v->value,
                                      "batches", (json_int_t)v->batches, "time", v->time));
        changed = true;
    }
    if (v->batches > json_integer_value(json_object_get(status, "batchesTrained"))) {
        json_object_set_new(status, "batchesTrained", json_integer(v->batches));
        changed = true;
    }
    return changed;
}

static bool set_batches(json_t *status, void *ctx)
{
    int64_t b = *(int64_t *)ctx;
    bool more = b > json_integer_value(json_object_get(status, "batchesTrained"));
    if (more)
        json_object_set_new(status, "batchesTrained", json_integer(b));
    return more;
}

/*
 * Training progress into status.batchesTrained, at most once per
 * API_PROGRESS_MS per trial (each write is a Kubernetes API call). Best
 * effort: the metrics are stored whatever happens here.
 */
static void note_progress(struct kd_api *a, const json_t *trial, int64_t batches)
{
    const char *uid = kd_k8s_meta_str(trial, "uid");
    int64_t now = kd_mono_ms();
    bool write = false;
    char err[KD_ERRLEN] = "";
    pthread_mutex_lock(&a->mu);
    json_t *p = json_object_get(a->progress, uid);
    if (p == NULL || (batches > json_integer_value(json_array_get(p, 1)) &&
                      now - json_integer_value(json_array_get(p, 0)) >= API_PROGRESS_MS)) {
        json_object_set_new(a->progress, uid,
                            json_pack("[I,I]", (json_int_t)now, (json_int_t)batches));
        write = true;
    }
    pthread_mutex_unlock(&a->mu);
    if (write &&
        api_status_update(a, kd_k8s_meta_str(trial, "namespace"), kd_k8s_meta_str(trial, "name"),
                          uid, set_batches, &batches, err) != 0)
        KD_WARN("cannot record training progress", "trial=%s/%s err=%s",
                kd_k8s_meta_str(trial, "namespace"), kd_k8s_meta_str(trial, "name"), kd_logq(err));
}

void api_worker_metrics(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *body = NULL, *exp = NULL;
    struct kd_metric_row *rows = NULL;
    char err[KD_ERRLEN] = "";
    struct api_verr e;
    int rc;
    int64_t exp_id, trial_id;
    enum kd_metric_kind kind;
    const char *key = NULL;
    if (api_auth_trial(q, NS(q), TRIAL(q), &trial) != 0)
        goto out;
    if (api_body(q, KD_API_MAX_METRICS_BODY, &body) != 0)
        goto out;
    if (api_check_metrics(body, &kind, &key, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    const char *ks = kd_metric_kind_name(kind);
    const char *ename = spec_str(trial, "experiment") ?: "";
    if ((rc = api_get_experiment(a, NS(q), ename, &exp, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    json_t *searcher = json_object_get(json_object_get(exp, "spec"), "searcher");
    const char *metric = json_string_value(json_object_get(searcher, "metric"));
    json_t *sib = json_object_get(searcher, "smaller_is_better");
    bool smaller = sib == NULL || json_is_true(sib);
    if (metric == NULL) {
        /* From a stored template: the controller names it in annotations. */
        json_t *ann = json_object_get(json_object_get(exp, "metadata"), "annotations");
        metric = json_string_value(json_object_get(ann, API_ANN_METRIC));
        const char *s = json_string_value(json_object_get(ann, API_ANN_SMALLER));
        smaller = s == NULL || strcmp(s, "false") != 0;
    }
    const char *time_metric = json_string_value(json_object_get(searcher, "time_metric"));
    if (time_metric == NULL)
        time_metric = json_string_value(json_object_get(
            json_object_get(json_object_get(exp, "metadata"), "annotations"), API_ANN_TIME_METRIC));
    if (time_metric != NULL && time_metric[0] == '\0')
        time_metric = NULL;
    size_t n = 0;
    if (api_check_metric_rows(json_object_get(body, "rows"), metric, time_metric,
                              kind == KD_METRIC_VALIDATION, &rows, &n, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    if ((rc = api_store_ids(a, trial, true, &exp_id, &trial_id, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    /* The rows' text as the client wrote it is stored and streamed, when it can be found. */
    size_t blen = 0;
    const char *btext = kd_http_body(q->r, &blen);
    struct api_span all = {0, 0};
    bool spans = api_metric_spans(btext, blen, rows, n, &all);
    struct kd_metric_batch b = {trial_id, kind, key, rows, n};
    rc = kd_store_metrics_put(a->o.store, &b, a->o.metrics_timeout_ms, err);
    if (rc != 0) {
        if (rc == KD_EINVAL) {
            /* The store names the field: "rows[3].metrics.tag: ..." or "key: ...". */
            char field[200] = "";
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
    if (kind == KD_METRIC_VALIDATION) {
        /* The row with the most batches is the trial's latest validation. */
        size_t last = 0;
        for (size_t i = 1; i < n; i++)
            if (rows[i].step >= rows[last].step)
                last = i;
        struct val_ctx v = {
            .metric = metric, .batches = rows[last].step, .smaller_is_better = smaller};
        json_t *mv = metric ? json_object_get(rows[last].metrics, metric) : NULL;
        if (json_is_number(mv) && isfinite(json_number_value(mv))) {
            v.value = json_number_value(mv);
            v.has_value = true;
        }
        if (time_metric != NULL) {
            v.time_metric = time_metric;
            v.time_value = json_number_value(json_object_get(rows[last].metrics, time_metric));
            v.has_time = true;
        }
        now_rfc3339(v.time, sizeof(v.time));
        rc = api_status_update(a, NS(q), TRIAL(q), kd_k8s_meta_str(trial, "uid"), set_validation,
                               &v, err);
        if (rc != 0) {
            api_error(q, 503, NULL,
                      "the metrics are stored but the trial's status could not be updated (%s); "
                      "retry with the same key",
                      err);
            goto out;
        }
    }
    if (kind != KD_METRIC_PROFILING)
        api_tfevents_write(a, exp, TRIAL(q), ks, key, rows, n);
    if (kind == KD_METRIC_TRAINING) {
        int64_t most = 0;
        for (size_t i = 0; i < n; i++)
            if (rows[i].step > most)
                most = rows[i].step;
        note_progress(a, trial, most);
    }
    /* Tell the live streams. */
    json_t *ev = json_pack("{s:s,s:s,s:s,s:s,s:s}", "namespace", NS(q), "trial", TRIAL(q),
                           "experiment", ename, "kind", ks, "key", key);
    if (!spans)
        json_object_set(ev, "rows", json_object_get(body, "rows"));
    char *data = json_dumps(ev, JSON_COMPACT);
    if (data != NULL && spans) {
        /* {"namespace":...,"key":"K"} -> {"namespace":...,"key":"K","rows":[...]} */
        size_t hl = strlen(data);
        struct kd_buf eb = KD_BUF_INIT(KD_API_MAX_METRICS_BODY + hl + 16);
        if (kd_buf_append(&eb, data, hl - 1) == 0 && kd_buf_puts(&eb, ",\"rows\":") == 0 &&
            kd_buf_append(&eb, btext + all.off, all.len) == 0 && kd_buf_putc(&eb, '}') == 0)
            api_hub_publish(&a->hub, NS(q), TRIAL(q), ename, kd_buf_str(&eb));
        kd_buf_free(&eb);
    } else if (data != NULL) {
        api_hub_publish(&a->hub, NS(q), TRIAL(q), ename, data);
    }
    free(data);
    json_decref(ev);
    api_json(q, 200, json_pack("{s:I,s:s}", "accepted", (json_int_t)n, "key", key));
out:
    free(rows);
    json_decref(trial);
    json_decref(body);
    json_decref(exp);
}

/* ---- searcher operation and preemption ---------------------------------------------------- */

static bool preempted_condition(const json_t *trial)
{
    bool yes = false;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(trial, "status"), "conditions"), i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "type")) ?: "", "Preempted") == 0 &&
            strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") == 0)
            yes = true;
    }
    return yes;
}

/*
 * The controller set Idle (states.h) and the trial still waits at its
 * target: its workers should checkpoint and exit. A stale Idle (the target
 * was raised or the trial closed since) does not count.
 */
static bool idle_released(const json_t *trial)
{
    bool idle = false;
    size_t i;
    json_t *c;
    const json_t *st = json_object_get(trial, "status");
    json_array_foreach(json_object_get(st, "conditions"), i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "type")) ?: "", KD_TRIAL_COND_IDLE) == 0 &&
            strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") == 0)
            idle = true;
    }
    /* As kd_trial_at_target (libkd_api does not link the controller's state machines). */
    json_int_t target =
        json_integer_value(json_object_get(json_object_get(trial, "spec"), "validateAfter"));
    json_int_t reached =
        json_integer_value(json_object_get(json_object_get(st, "latestValidation"), "batches"));
    return idle && target > 0 && reached >= target && !spec_true(trial, "closed");
}

/*
 * The searcher closed the trial before it reached its operation's length (an early-stopping
 * rule, adaptive_asha's time_metric rungs): its workers should checkpoint and stop now rather
 * than train on to a length nobody needs.
 */
static bool stopped_by_searcher(const json_t *trial)
{
    json_int_t target =
        json_integer_value(json_object_get(json_object_get(trial, "spec"), "validateAfter"));
    json_int_t reached = json_integer_value(json_object_get(
        json_object_get(json_object_get(trial, "status"), "latestValidation"), "batches"));
    return spec_true(trial, "closed") && reached < target;
}

static bool exp_killed(const json_t *exp)
{
    return json_object_get(json_object_get(json_object_get(exp, "metadata"), "annotations"),
                           KD_TRIAL_KILL_ANNOTATION) != NULL;
}

bool api_should_preempt(const json_t *trial, const json_t *exp, const char **reason)
{
    const char *st = state_of(trial);
    if (trial == NULL || exp == NULL)
        *reason = "the trial or its experiment was deleted";
    else if (kd_k8s_meta_str(trial, "deletionTimestamp") ||
             kd_k8s_meta_str(exp, "deletionTimestamp"))
        *reason = "the trial is being deleted";
    else if (exp_killed(exp))
        *reason = "the experiment was killed";
    else if (spec_true(exp, "canceled"))
        *reason = "the experiment was canceled";
    else if (spec_true(exp, "paused"))
        *reason = "the experiment was paused";
    else if (spec_true(trial, "paused"))
        *reason = "the trial was paused";
    else if (strncmp(st, "STOPPING_", 9) == 0 || strcmp(st, "PAUSED") == 0 ||
             strcmp(st, "CANCELED") == 0 || strcmp(st, "ERROR") == 0 ||
             strcmp(st, "COMPLETED") == 0)
        *reason = "the trial is stopping";
    else if (strcmp(st, "QUEUED") == 0 && preempted_condition(trial))
        *reason = "the scheduler preempted the trial";
    else if (stopped_by_searcher(trial))
        *reason = "the searcher stopped the trial before its target";
    else if (idle_released(trial))
        *reason = "idle: waiting for the searcher; GPUs released";
    else
        *reason = "";
    return (*reason)[0] != '\0';
}

/* Read the trial (uid checked) and its experiment from the caches; NULL when gone. */
static void load_pair(struct kd_api *a, const char *ns, const char *name, const char *uid,
                      json_t **trial, json_t **exp)
{
    char err[KD_ERRLEN];
    *trial = *exp = NULL;
    if (api_get_trial(a, ns, name, trial, err) != 0)
        goto out;
    if (strcmp(kd_k8s_meta_str(*trial, "uid") ?: "", uid) != 0) {
        json_decref(*trial);
        *trial = NULL;
        goto out;
    }
    if (api_get_experiment(a, ns, spec_str(*trial, "experiment") ?: "", exp, err) != 0)
        *exp = NULL;
out:
    return;
}

void api_worker_searcher(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *t = NULL, *e = NULL, *ans = NULL;
    long completed, timeout_s;
    uint64_t seen = 0;
    if (api_auth_trial(q, NS(q), TRIAL(q), &trial) != 0)
        goto out;
    if (api_query_int(q, "completed", 0, INT64_MAX / 2, 0, &completed) != 0 ||
        api_query_int(q, "timeout", 0, a->o.long_poll_max_s, 0, &timeout_s) != 0)
        goto out;
    const char *uid = kd_k8s_meta_str(trial, "uid");
    int64_t deadline = kd_mono_ms() + timeout_s * 1000;
    for (;;) {
        const char *reason = "";
        json_decref(t);
        json_decref(e);
        load_pair(a, NS(q), TRIAL(q), uid, &t, &e);
        bool preempt = api_should_preempt(t, e, &reason);
        const char *st = state_of(t);
        json_int_t target =
            json_integer_value(json_object_get(json_object_get(t, "spec"), "validateAfter"));
        if (t == NULL || e == NULL || spec_true(e, "canceled") ||
            kd_k8s_meta_str(t, "deletionTimestamp") || strcmp(st, "CANCELED") == 0 ||
            strcmp(st, "ERROR") == 0 || strcmp(st, "COMPLETED") == 0 ||
            strcmp(st, "STOPPING_CANCELED") == 0 || strcmp(st, "STOPPING_KILLED") == 0 ||
            strcmp(st, "STOPPING_ERROR") == 0) {
            /* Killed: stop without a checkpoint (the pods are deleted at once anyway). */
            ans = json_pack("{s:s,s:s,s:b}", "op", "stop", "reason",
                            reason[0] ? reason : "the trial has ended", "preempt", !exp_killed(e));
        } else if (target > completed) {
            ans = json_pack("{s:s,s:I,s:s,s:b}", "op", "validate_after", "length", target, "unit",
                            spec_str(t, "lengthUnit") ?: "batches", "preempt", preempt);
        } else if (spec_true(t, "closed")) {
            ans = json_pack("{s:s,s:s,s:b}", "op", "stop", "reason",
                            "the searcher needs no more training", "preempt", preempt);
        } else if (preempt || kd_mono_ms() >= deadline ||
                   kd_http_stopping(kd_http_req_server(q->r))) {
            ans = json_pack("{s:s,s:b}", "op", "pending", "preempt", preempt);
            if (preempt)
                json_object_set_new(ans, "reason", json_string(reason));
        }
        if (ans != NULL)
            break;
        int64_t left = deadline - kd_mono_ms();
        api_wait_change(a, &seen, left < 1000 ? (left > 0 ? left : 1) : 1000);
    }
    api_json(q, 200, ans);
out:
    json_decref(trial);
    json_decref(t);
    json_decref(e);
}

void api_worker_preemption(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *t = NULL, *e = NULL;
    long timeout_s;
    uint64_t seen = 0;
    if (api_auth_trial(q, NS(q), TRIAL(q), &trial) != 0)
        goto out;
    if (api_query_int(q, "timeout", 0, a->o.long_poll_max_s, 0, &timeout_s) != 0)
        goto out;
    const char *uid = kd_k8s_meta_str(trial, "uid");
    int64_t deadline = kd_mono_ms() + timeout_s * 1000;
    const char *reason = "";
    bool preempt;
    for (;;) {
        json_decref(t);
        json_decref(e);
        load_pair(a, NS(q), TRIAL(q), uid, &t, &e);
        preempt = api_should_preempt(t, e, &reason);
        if (preempt || kd_mono_ms() >= deadline || kd_http_stopping(kd_http_req_server(q->r)))
            break;
        int64_t left = deadline - kd_mono_ms();
        api_wait_change(a, &seen, left < 1000 ? (left > 0 ? left : 1) : 1000);
    }
    json_t *ans = json_pack("{s:b}", "preempt", preempt);
    if (preempt)
        json_object_set_new(ans, "reason", json_string(reason));
    api_json(q, 200, ans);
out:
    json_decref(trial);
    json_decref(t);
    json_decref(e);
}

/* ---- checkpoints -------------------------------------------------------------------------- */

struct ckpt_ctx {
    const char *uuid;
    int64_t batches, size;
    char time[40];
};

static bool set_checkpoint(json_t *status, void *ctx)
{
    struct ckpt_ctx *c = ctx;
    json_t *cur = json_object_get(status, "latestCheckpoint");
    if (cur != NULL && json_integer_value(json_object_get(cur, "batches")) > c->batches)
        return false;
    if (cur != NULL && strcmp(json_string_value(json_object_get(cur, "uuid")) ?: "", c->uuid) == 0)
        return false;
    json_object_set_new(status, "latestCheckpoint",
                        json_pack("{s:s,s:I,s:s,s:I}", "uuid", c->uuid, "batches",
                                  (json_int_t)c->batches, "time", c->time, "size",
                                  (json_int_t)c->size));
    return true;
}

void api_worker_checkpoint(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *body = NULL;
    char err[KD_ERRLEN] = "";
    struct ckpt_ctx c = {0};
    struct api_checkpoint_req ck;
    struct api_verr e;
    int64_t exp_id, trial_id;
    int rc;
    if (api_auth_trial(q, NS(q), TRIAL(q), &trial) != 0)
        goto out;
    if (api_body(q, KD_API_MAX_CHECKPOINT_BODY, &body) != 0)
        goto out;
    if (api_check_checkpoint(body, &ck, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    c.uuid = ck.uuid;
    c.batches = ck.batches;
    c.size = ck.size;
    const char *path = ck.storage_path;
    json_t *md = (json_t *)ck.metadata;
    if ((rc = api_store_ids(a, trial, true, &exp_id, &trial_id, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    struct kd_store_checkpoint sc = {c.uuid, trial_id, c.batches, path, c.size, md};
    if ((rc = kd_store_checkpoint_add(a->o.store, &sc, err)) != 0) {
        api_fail(q, rc, rc == KD_ECONFLICT || rc == KD_EINVAL ? "uuid" : NULL, err);
        goto out;
    }
    now_rfc3339(c.time, sizeof(c.time));
    rc = api_status_update(a, NS(q), TRIAL(q), kd_k8s_meta_str(trial, "uid"), set_checkpoint, &c,
                           err);
    if (rc != 0) {
        api_error(q, 503, NULL,
                  "the checkpoint is registered but the trial's status could not be updated (%s); "
                  "retry",
                  err);
        goto out;
    }
    KD_INFO("checkpoint registered", "trial=%s/%s uuid=%s batches=%lld size=%lld", NS(q), TRIAL(q),
            kd_logq(c.uuid), (long long)c.batches, (long long)c.size);
    api_json(q, 200, json_pack("{s:s,s:I}", "uuid", c.uuid, "batches", (json_int_t)c.batches));
out:
    json_decref(trial);
    json_decref(body);
}

/* ---- rendezvous --------------------------------------------------------------------------- */

struct rdv_ctx {
    const char *run_id, *address;
    int64_t port;
    char time[40];
};

static bool set_rendezvous(json_t *status, void *ctx)
{
    struct rdv_ctx *r = ctx;
    json_t *cur = json_object_get(status, "rendezvous");
    if (strcmp(json_string_value(json_object_get(cur, "runId")) ?: "", r->run_id) == 0 &&
        strcmp(json_string_value(json_object_get(cur, "address")) ?: "", r->address) == 0 &&
        json_integer_value(json_object_get(cur, "port")) == r->port)
        return false;
    json_object_set_new(status, "rendezvous",
                        json_pack("{s:s,s:s,s:I,s:s}", "runId", r->run_id, "address", r->address,
                                  "port", (json_int_t)r->port, "time", r->time));
    return true;
}

/*
 * Whether run_id is the trial's current attempt: one of its pods, not being
 * deleted, carries the run id (asked of the API server, not a cache, since
 * the chief's own pod was created just before it reports). A chief left
 * over from an earlier attempt is refused, so it cannot replace the report
 * of the attempt that runs now.
 */
static int run_is_current(struct kd_api *a, const char *ns, const char *trial, const char *run_id,
                          bool *current, char *err)
{
    char sel[512];
    json_t *list = NULL;
    struct kd_k8s_gvr pods = KD_K8S_PODS;
    *current = false;
    snprintf(sel, sizeof(sel), "%s=%s,%s=%s", API_POD_LABEL_TRIAL, trial, API_POD_LABEL_RUN,
             run_id);
    struct kd_k8s_query lq = {.label_selector = sel};
    int rc = kd_k8s_list(a->o.k8s, &pods, ns, &lq, &list, NULL, err);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(list, "items"), i, p)
    {
        if (kd_k8s_meta_str(p, "deletionTimestamp") == NULL)
            *current = true;
    }
    json_decref(list);
    return rc;
}

void api_worker_rendezvous_put(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *body = NULL;
    char err[KD_ERRLEN] = "";
    struct rdv_ctx r = {0};
    struct api_rendezvous_req rq;
    struct api_verr e;
    if (api_auth_trial(q, NS(q), TRIAL(q), &trial) != 0)
        goto out;
    if (api_body(q, KD_API_MAX_RENDEZVOUS_BODY, &body) != 0)
        goto out;
    if (api_check_rendezvous(body, &rq, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    r.run_id = rq.run_id;
    r.address = rq.address;
    r.port = rq.port;
    bool current = false;
    int rc = run_is_current(a, NS(q), TRIAL(q), r.run_id, &current, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    if (!current) {
        api_error(q, 409, "run_id",
                  "run_id: %s is not the current attempt of trial %s/%s (none of its pods "
                  "carries it)",
                  r.run_id, NS(q), TRIAL(q));
        goto out;
    }
    now_rfc3339(r.time, sizeof(r.time));
    rc = api_status_update(a, NS(q), TRIAL(q), kd_k8s_meta_str(trial, "uid"), set_rendezvous, &r,
                           err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("rendezvous address reported", "trial=%s/%s run_id=%s address=%s port=%lld", NS(q),
            TRIAL(q), kd_logq(r.run_id), kd_logq(r.address), (long long)r.port);
    api_json(q, 200,
             json_pack("{s:s,s:s,s:I}", "run_id", r.run_id, "address", r.address, "port",
                       (json_int_t)r.port));
out:
    json_decref(trial);
    json_decref(body);
}

void api_worker_rendezvous_get(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *t = NULL, *e = NULL, *ans = NULL;
    long timeout_s;
    uint64_t seen = 0;
    if (api_auth_trial(q, NS(q), TRIAL(q), &trial) != 0)
        goto out;
    const char *run_id = kd_http_query(q->r, "run_id");
    if (run_id == NULL || !api_run_id_ok(run_id)) {
        api_error(q, 400, "run_id",
                  "run_id: %s (the attempt's KDET_RUN_ID, 1 to %d of A-Z a-z 0-9 . _ -)",
                  run_id == NULL ? "required" : "invalid", API_MAX_RUN_ID);
        goto out;
    }
    if (api_query_int(q, "timeout", 0, a->o.long_poll_max_s, 0, &timeout_s) != 0)
        goto out;
    const char *uid = kd_k8s_meta_str(trial, "uid");
    int64_t deadline = kd_mono_ms() + timeout_s * 1000;
    for (;;) {
        json_decref(t);
        json_decref(e);
        load_pair(a, NS(q), TRIAL(q), uid, &t, &e);
        const json_t *rdv = json_object_get(json_object_get(t, "status"), "rendezvous");
        if (t != NULL &&
            strcmp(json_string_value(json_object_get(rdv, "runId")) ?: "", run_id) == 0) {
            ans = json_pack("{s:b,s:s,s:O,s:O}", "ready", 1, "run_id", run_id, "address",
                            json_object_get(rdv, "address"), "port", json_object_get(rdv, "port"));
            break;
        }
        if (t == NULL || kd_mono_ms() >= deadline || kd_http_stopping(kd_http_req_server(q->r))) {
            ans = json_pack("{s:b,s:s}", "ready", 0, "run_id", run_id);
            break;
        }
        int64_t left = deadline - kd_mono_ms();
        api_wait_change(a, &seen, left < 1000 ? (left > 0 ? left : 1) : 1000);
    }
    api_json(q, 200, ans);
out:
    json_decref(trial);
    json_decref(t);
    json_decref(e);
}

/* ---- early exit --------------------------------------------------------------------------- */

struct exit_ctx {
    const char *reason, *message;
    char time[40];
};

static bool set_early_exit(json_t *status, void *ctx)
{
    struct exit_ctx *x = ctx;
    json_t *conds = json_object_get(status, "conditions");
    if (!json_is_array(conds)) {
        conds = json_array();
        json_object_set_new(status, "conditions", conds);
    }
    size_t i;
    json_t *c;
    bool same = false;
    json_array_foreach(conds, i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "type")) ?: "", "EarlyExit") == 0) {
            /* The same reason again is a retry: nothing to change. */
            same = strcmp(json_string_value(json_object_get(c, "reason")) ?: "", x->reason) == 0;
            if (!same)
                json_array_remove(conds, i);
            break;
        }
    }
    if (!same)
        json_array_append_new(conds, json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "EarlyExit",
                                               "status", "True", "lastTransitionTime", x->time,
                                               "reason", x->reason, "message", x->message));
    return !same;
}

void api_worker_early_exit(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *trial = NULL, *body = NULL;
    char err[KD_ERRLEN] = "";
    const char *why = NULL, *cond = NULL, *message = NULL;
    struct api_verr e;
    int rc;
    if (api_auth_trial(q, NS(q), TRIAL(q), &trial) != 0)
        goto out;
    if (api_body(q, KD_API_MAX_SMALL_BODY, &body) != 0)
        goto out;
    if (api_check_early_exit(body, &why, &cond, &message, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    rc = api_trial_early_exit(a, trial, cond, message ? message : why, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("trial exited early", "trial=%s/%s reason=%s", NS(q), TRIAL(q), why);
    api_json(q, 200, json_pack("{s:s}", "reason", why));
out:
    json_decref(trial);
    json_decref(body);
}

int api_trial_early_exit(struct kd_api *a, const json_t *trial, const char *reason,
                         const char *message, char *err)
{
    struct exit_ctx x = {.reason = reason, .message = message};
    const char *ns = kd_k8s_meta_str(trial, "namespace"), *name = kd_k8s_meta_str(trial, "name");
    now_rfc3339(x.time, sizeof(x.time));
    int rc = api_status_update(a, ns, name, kd_k8s_meta_str(trial, "uid"), set_early_exit, &x, err);
    if (rc != 0)
        goto out;
    /* Also in the experiment's event history (best effort: the condition is what counts). */
    int64_t exp_id, trial_id;
    if (api_store_ids(a, trial, true, &exp_id, &trial_id, err) == 0) {
        json_t *details = json_pack("{s:s}", "trial", name);
        struct kd_store_event ev = {exp_id, trial_id, "trial", "early_exit", message, details};
        if (kd_store_event_add(a->o.store, &ev, NULL, err) != 0)
            KD_WARN("cannot record the early exit event", "trial=%s/%s err=%s", ns, name,
                    kd_logq(err));
        json_decref(details);
    }
out:
    return rc;
}
