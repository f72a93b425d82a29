/*
 * The user endpoints (det, a web UI): experiments and trials read from the
 * informer caches, history (metric series, checkpoints, events) read from
 * the store, writes that map onto resources (pause = merge-patch
 * spec.paused), the job queue, and server-sent-event streams of new
 * metrics.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "k8s/jobupdate.h"

#define NS(q) ((q)->seg[3])
#define NAME(q) ((q)->seg[5])

static json_t *summary(const json_t *obj)
{
    json_t *md = json_object_get(obj, "metadata");
    return json_pack("{s:O?,s:O?,s:O?,s:O?,s:O?,s:O?}", "name", json_object_get(md, "name"),
                     "namespace", json_object_get(md, "namespace"), "uid",
                     json_object_get(md, "uid"), "created",
                     json_object_get(md, "creationTimestamp"), "spec", json_object_get(obj, "spec"),
                     "status", json_object_get(obj, "status"));
}

/* summary() plus the store's integer id (det shows it) when the object has a row. */
static json_t *summary_id(const json_t *obj, const json_t *ids)
{
    json_t *s = summary(obj), *id = json_object_get(ids, kd_k8s_meta_str(obj, "uid") ?: "");
    if (json_is_integer(id))
        json_object_set(s, "id", id);
    return s;
}

/* uid -> id of the namespace's experiment rows; best effort (empty when the store fails). */
static json_t *experiment_ids(struct kd_api *a, const char *ns)
{
    json_t *ids = json_object(), *page = NULL;
    char err[KD_ERRLEN] = "";
    for (int off = 0; off < 100000; off += 1000) {
        size_t i;
        json_t *e;
        if (kd_store_experiments_list(a->o.store, ns, 1000, off, &page, err) != 0)
            break;
        json_array_foreach(page, i, e)
        {
            const char *uid = json_string_value(json_object_get(e, "uid"));
            if (uid != NULL)
                json_object_set(ids, uid, json_object_get(e, "id"));
        }
        size_t n = json_array_size(page);
        json_decref(page);
        page = NULL;
        if (n < 1000)
            break;
    }
    return ids;
}

/* uid -> id of the experiment's row and its trial rows; best effort. */
static json_t *exp_trial_ids(struct kd_api *a, const json_t *exp)
{
    json_t *ids = json_object(), *rows = NULL;
    int64_t eid = 0;
    char err[KD_ERRLEN] = "";
    if (api_exp_row(a, exp, false, &eid, err) == 0)
        json_object_set_new(ids, kd_k8s_meta_str(exp, "uid") ?: "", json_integer(eid));
    if (eid > 0 && kd_store_trials_list(a->o.store, eid, &rows, err) == 0) {
        size_t i;
        json_t *t;
        json_array_foreach(rows, i, t)
        {
            const char *uid = json_string_value(json_object_get(t, "uid"));
            if (uid != NULL)
                json_object_set(ids, uid, json_object_get(t, "id"));
        }
    }
    json_decref(rows);
    return ids;
}

/* "34" -> 34; 0 when s is not 1 to 18 decimal digits (then it is only a name). */
static int64_t digits_id(const char *s)
{
    int64_t n = 0;
    size_t len = strlen(s);
    if (len == 0 || len > 18 || strspn(s, "0123456789") != len)
        return 0;
    for (size_t i = 0; i < len; i++)
        n = n * 10 + (s[i] - '0');
    return n;
}

struct by_uid {
    const char *uid;
    json_t *obj;
};

/* kd_k8s_cache_each's callback: keep the object with this uid. */
static int find_uid(json_t *o, void *ud)
{
    struct by_uid *b = ud;
    const char *u = kd_k8s_meta_str(o, "uid");
    if (u != NULL && strcmp(u, b->uid) == 0) {
        b->obj = json_incref(o);
        return 1;
    }
    return 0;
}

/*
 * The Experiment (or Trial) that NAME(q) names; when no object has that
 * name and it is all digits, the one whose store id it is (the integer ids
 * det shows, docs/cli.md): its row gives the uid and the namespace, the
 * informer cache the object. KD_ENOTFOUND with err saying which.
 */
int api_user_get(struct api_rq *q, bool trial, json_t **obj, char *err)
{
    struct kd_api *a = q->api;
    json_t *row = NULL, *erow = NULL;
    const char *what = trial ? "trial" : "experiment";
    int64_t n = digits_id(NAME(q));
    int rc = trial ? api_get_trial(a, NS(q), NAME(q), obj, err)
                   : api_get_experiment(a, NS(q), NAME(q), obj, err);
    if (rc != KD_ENOTFOUND || n == 0)
        goto out;
    rc = trial ? kd_store_trial_get(a->o.store, n, &row, err)
               : kd_store_experiment_get(a->o.store, n, &erow, err);
    if (rc == 0 && trial)
        rc = kd_store_experiment_get(
            a->o.store, json_integer_value(json_object_get(row, "experiment_id")), &erow, err);
    if (rc == 0 && strcmp(json_string_value(json_object_get(erow, "namespace")) ?: "", NS(q)) != 0)
        rc = KD_ENOTFOUND;
    if (rc == KD_ENOTFOUND) {
        rc = kd_seterr(err, KD_ENOTFOUND, "no %s of namespace %s is named %s or has the id %s",
                       what, NS(q), NAME(q), NAME(q));
        goto out;
    }
    if (rc != 0)
        goto out;
    struct by_uid b = {.uid = json_string_value(json_object_get(trial ? row : erow, "uid")) ?: ""};
    (void)kd_k8s_cache_each(kd_k8s_informer_cache(trial ? a->trials : a->exps), NS(q), find_uid,
                            &b);
    *obj = b.obj;
    if (b.obj == NULL)
        rc = kd_seterr(err, KD_ENOTFOUND, "%s id %s of namespace %s: its resource is gone", what,
                       NAME(q), NS(q));
out:
    json_decref(row);
    json_decref(erow);
    return rc;
}

static int by_created(const void *pa, const void *pb)
{
    const json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
    const char *ca = kd_k8s_meta_str(a, "creationTimestamp") ?: "";
    const char *cb = kd_k8s_meta_str(b, "creationTimestamp") ?: "";
    int c = strcmp(ca, cb);
    if (c == 0)
        c = strcmp(kd_k8s_meta_str(a, "name") ?: "", kd_k8s_meta_str(b, "name") ?: "");
    return c;
}

/* The array `items` sorted by creation time (a new array of borrowed... references kept). */
static json_t *sorted(json_t *items)
{
    size_t n = json_array_size(items);
    json_t **v = kd_xcalloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(items, i);
    qsort(v, n, sizeof(*v), by_created);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(out, v[i]);
    free(v);
    return out;
}

struct pick {
    const char *exp; /* trials_of: spec.experiment */
    json_t *out;
};

static int pick_experiment(json_t *t, void *ud)
{
    struct pick *p = ud;
    const char *e = json_string_value(json_object_get(json_object_get(t, "spec"), "experiment"));
    if (e != NULL && strcmp(e, p->exp) == 0)
        json_array_append(p->out, t);
    return 0;
}

/* The experiment's Trials, sorted; a walk of the cache keeps only them decoded. */
static json_t *trials_of(struct kd_api *a, const char *ns, const char *exp)
{
    json_t *mine = json_array();
    struct pick p = {.exp = exp, .out = mine};
    (void)kd_k8s_cache_each(kd_k8s_informer_cache(a->trials), ns, pick_experiment, &p);
    json_t *s = sorted(mine);
    json_decref(mine);
    return s;
}

void api_user_experiments(struct api_rq *q)
{
    struct kd_api *a = q->api;
    bool archived = kd_http_query(q->r, "archived") != NULL &&
                    strcmp(kd_http_query(q->r, "archived"), "true") == 0;
    json_t *all = kd_k8s_cache_list(kd_k8s_informer_cache(a->exps), NS(q));
    json_t *s = sorted(all), *out = json_array(), *ids = experiment_ids(a, NS(q));
    size_t i;
    json_t *e;
    json_array_foreach(s, i, e)
    {
        if (!archived && json_is_true(json_object_get(json_object_get(e, "spec"), "archived")))
            continue;
        json_array_append_new(out, summary_id(e, ids));
    }
    json_decref(ids);
    json_decref(all);
    json_decref(s);
    api_json(q, 200, json_pack("{s:o}", "experiments", out));
}

/* GET .../experiments/{e} and .../experiments/{e}/trials: {e} is a name or a store id. */
static void experiment_and_trials(struct api_rq *q, bool with_exp)
{
    json_t *exp = NULL, *ids = NULL;
    char err[KD_ERRLEN] = "";
    int rc = api_user_get(q, false, &exp, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    ids = exp_trial_ids(q->api, exp);
    json_t *trials = trials_of(q->api, NS(q), kd_k8s_meta_str(exp, "name") ?: ""),
           *ts = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) json_array_append_new(ts, summary_id(t, ids));
    json_decref(trials);
    if (with_exp)
        api_json(q, 200, json_pack("{s:o,s:o}", "experiment", summary_id(exp, ids), "trials", ts));
    else
        api_json(q, 200, json_pack("{s:o}", "trials", ts));
out:
    json_decref(exp);
    json_decref(ids);
}

void api_user_experiment(struct api_rq *q)
{
    experiment_and_trials(q, true);
}

void api_user_experiment_trials(struct api_rq *q)
{
    experiment_and_trials(q, false);
}

void api_user_experiment_action(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *exp = NULL, *patch = NULL, *obj = NULL;
    char err[KD_ERRLEN] = "";
    const char *verb = q->seg[6];
    int rc;
    if ((rc = api_get_experiment(a, NS(q), NAME(q), &exp, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    if (strcmp(verb, "pause") == 0)
        patch = json_pack("{s:{s:b}}", "spec", "paused", 1);
    else if (strcmp(verb, "activate") == 0)
        patch = json_pack("{s:{s:b}}", "spec", "paused", 0);
    else if (strcmp(verb, "cancel") == 0)
        patch = json_pack("{s:{s:b}}", "spec", "canceled", 1);
    else if (strcmp(verb, "archive") == 0)
        patch = json_pack("{s:{s:b}}", "spec", "archived", 1);
    else
        patch = json_pack("{s:{s:b}}", "spec", "archived", 0);
    rc = kd_k8s_patch(a->o.k8s, &KD_K8S_EXPERIMENTS, NS(q), NAME(q), NULL, KD_K8S_PATCH_MERGE,
                      patch, &obj, NULL, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("experiment changed through the API", "experiment=%s/%s action=%s", NS(q), NAME(q),
            verb);
    api_json(q, 200, json_pack("{s:o}", "experiment", summary(obj)));
out:
    json_decref(exp);
    json_decref(patch);
    json_decref(obj);
}

/*
 * PATCH .../jobs/{j}: move experiment {j} in the queue (priority, ahead of or
 * behind another experiment of the namespace, resource pool) with the same
 * merge patch `det job update` makes (kd_queue_update_patch).
 */
void api_user_job_update(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *body = NULL, *exp = NULL, *other = NULL, *patch = NULL, *obj = NULL;
    struct kd_queue_update u;
    struct api_verr e;
    char err[KD_ERRLEN] = "", said[512] = "";
    int rc;
    if (api_body(q, KD_API_MAX_SMALL_BODY, &body) != 0)
        goto out;
    if (api_check_job_update(body, &u, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    if ((rc = api_get_experiment(a, NS(q), NAME(q), &exp, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    const char *rel = u.ahead_of ? u.ahead_of : u.behind_of;
    if (rel != NULL) {
        const char *field = u.ahead_of ? "ahead_of" : "behind_of";
        if (strcmp(rel, NAME(q)) == 0) {
            api_error(q, 400, field, "%s: job %s cannot be moved relative to itself", field,
                      kd_logq(rel));
            goto out;
        }
        if ((rc = api_get_experiment(a, NS(q), rel, &other, err)) != 0) {
            if (rc == KD_ENOTFOUND)
                api_error(q, 404, field, "%s: no experiment %s in namespace %s", field,
                          kd_logq(rel), kd_logq(NS(q)));
            else
                api_fail(q, rc, NULL, err);
            goto out;
        }
    }
    patch = kd_queue_update_patch(exp, other, &u, said, sizeof(said));
    rc = kd_k8s_patch(a->o.k8s, &KD_K8S_EXPERIMENTS, NS(q), NAME(q), NULL, KD_K8S_PATCH_MERGE,
                      patch, &obj, NULL, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("job changed through the API", "experiment=%s/%s change=%s", NS(q), NAME(q),
            kd_logq(said));
    api_json(q, 200,
             json_pack("{s:s,s:s,s:I}", "job", NAME(q), "change", said, "priority",
                       (json_int_t)(kd_queue_priority(obj) ?: KD_QUEUE_DEFAULT_PRIORITY)));
out:
    json_decref(body);
    json_decref(exp);
    json_decref(other);
    json_decref(patch);
    json_decref(obj);
}

/* The store id of the experiment NAME(q); answers itself on failure. 0 with *id = 0: no data. */
static int exp_id_of(struct api_rq *q, int64_t *id)
{
    json_t *exp = NULL;
    char err[KD_ERRLEN] = "";
    int rc = api_get_experiment(q->api, NS(q), NAME(q), &exp, err);
    *id = 0;
    if (rc == 0)
        rc = api_exp_row(q->api, exp, false, id, err);
    if (rc == KD_ENOTFOUND && exp != NULL)
        rc = 0; /* exists, nothing stored yet */
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    json_decref(exp);
    return rc;
}

/*
 * Name each checkpoint's trial ("trial": the Trial's name) from the store's
 * trial rows (id -> uid) and the informer cache (uid -> name); best effort.
 */
static void name_trials(struct api_rq *q, int64_t exp_id, json_t *cks)
{
    json_t *rows = NULL, *trials = NULL;
    char err[KD_ERRLEN] = "";
    if (json_array_size(cks) == 0 || kd_store_trials_list(q->api->o.store, exp_id, &rows, err) != 0)
        goto out;
    trials = trials_of(q->api, NS(q), NAME(q));
    size_t i, j, k;
    json_t *c, *row, *t;
    json_array_foreach(cks, i, c)
    {
        json_int_t tid = json_integer_value(json_object_get(c, "trial_id"));
        json_array_foreach(rows, j, row)
        {
            const char *uid = json_string_value(json_object_get(row, "uid"));
            if (json_integer_value(json_object_get(row, "id")) != tid || uid == NULL)
                continue;
            json_array_foreach(trials, k, t)
            {
                const char *u = kd_k8s_meta_str(t, "uid");
                if (u != NULL && strcmp(u, uid) == 0)
                    json_object_set_new(c, "trial", json_string(kd_k8s_meta_str(t, "name")));
            }
        }
    }
out:
    json_decref(rows);
    json_decref(trials);
}

void api_user_experiment_checkpoints(struct api_rq *q)
{
    int64_t id;
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    bool deleted = kd_http_query(q->r, "deleted") != NULL &&
                   strcmp(kd_http_query(q->r, "deleted"), "true") == 0;
    if (exp_id_of(q, &id) != 0)
        goto out;
    int rc = id == 0 ? 0 : kd_store_checkpoints_list(q->api->o.store, id, 0, deleted, &out, err);
    if (rc == 0 && out != NULL)
        name_trials(q, id, out);
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    else
        api_json(q, 200, json_pack("{s:o}", "checkpoints", out ? out : json_array()));
out:
    return;
}

void api_user_experiment_events(struct api_rq *q)
{
    int64_t id;
    long after, limit;
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    if (api_query_int(q, "after", 0, INT64_MAX / 2, 0, &after) != 0 ||
        api_query_int(q, "limit", 1, 1000, 100, &limit) != 0 || exp_id_of(q, &id) != 0)
        goto out;
    int rc = id == 0 ? 0 : kd_store_events_list(q->api->o.store, id, after, (int)limit, &out, err);
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    else
        api_json(q, 200, json_pack("{s:o}", "events", out ? out : json_array()));
out:
    return;
}

void api_user_trial(struct api_rq *q)
{
    json_t *t = NULL, *ids = json_object();
    int64_t eid = 0, tid = 0;
    char err[KD_ERRLEN] = "";
    int rc = api_user_get(q, true, &t, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    if (api_store_ids(q->api, t, false, &eid, &tid, err) == 0)
        json_object_set_new(ids, kd_k8s_meta_str(t, "uid") ?: "", json_integer(tid));
    api_json(q, 200, json_pack("{s:o}", "trial", summary_id(t, ids)));
out:
    json_decref(t);
    json_decref(ids);
}

/*
 * POST .../trials/{t}/kill: the trial ends CANCELED now, as Determined's
 * `det trial kill` does: the condition EarlyExit=True (UserCanceled) makes
 * the controller delete its pods, never restart it, and tell the searcher
 * the user canceled it. A trial that has already ended is 409.
 */
void api_user_trial_kill(struct api_rq *q)
{
    json_t *t = NULL;
    char err[KD_ERRLEN] = "";
    int rc = api_user_get(q, true, &t, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    const char *st = json_string_value(json_object_get(json_object_get(t, "status"), "state"));
    if (st != NULL &&
        (strcmp(st, "COMPLETED") == 0 || strcmp(st, "CANCELED") == 0 || strcmp(st, "ERROR") == 0)) {
        api_error(q, 409, NULL, "trial %s/%s has already ended (%s)", NS(q),
                  kd_k8s_meta_str(t, "name") ?: "", st);
        goto out;
    }
    rc = api_trial_early_exit(q->api, t, "UserCanceled", "killed by the user", err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("trial killed through the API", "trial=%s/%s", NS(q), kd_k8s_meta_str(t, "name") ?: "");
    api_json(q, 200, json_pack("{s:o}", "trial", summary(t)));
out:
    json_decref(t);
}

/* The store id of trial NAME(q); answers itself on failure. 0 with *id = 0: no data. */
static int trial_id_of(struct api_rq *q, int64_t *id)
{
    json_t *t = NULL;
    int64_t eid;
    char err[KD_ERRLEN] = "";
    int rc = api_get_trial(q->api, NS(q), NAME(q), &t, err);
    *id = 0;
    if (rc == 0)
        rc = api_store_ids(q->api, t, false, &eid, id, err);
    if (rc == KD_ENOTFOUND && t != NULL)
        rc = 0;
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    json_decref(t);
    return rc;
}

/* The ?kind= query parameter (training when absent); 400 naming it and -1 when bad. */
static int metric_kind_of(struct api_rq *q, enum kd_metric_kind *kind)
{
    const char *ks = kd_http_query(q->r, "kind");
    *kind = KD_METRIC_TRAINING;
    if (ks != NULL && kd_metric_kind_parse(ks, kind) != 0) {
        api_error(q, 400, "kind",
                  "query parameter kind=%s: must be training, validation or profiling",
                  kd_logq(ks));
        return -1;
    }
    return 0;
}

void api_user_trial_metrics(struct api_rq *q)
{
    int64_t id;
    long maxp;
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    enum kd_metric_kind kind;
    if (metric_kind_of(q, &kind) != 0)
        goto out;
    if (api_query_int(q, "max_points", 0, 100000, 0, &maxp) != 0 || trial_id_of(q, &id) != 0)
        goto out;
    int rc = id == 0 ? 0 : kd_store_metrics_series(q->api->o.store, id, kind, (int)maxp, &out, err);
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    else
        api_json(q, 200,
                 json_pack("{s:s,s:o}", "kind", kd_metric_kind_name(kind), "metrics",
                           out ? out : json_array()));
out:
    return;
}

/*
 * GET .../experiments/{e}/metrics?kind=K&max_points=N[&budget=P][&from=S&to=E]:
 * every trial's series of one kind in one answer, downsampled by M4 for a
 * chart (kd_store_metrics_overview): a page with 1,000 trials makes one
 * request instead of one per trial, and reads the store's overviews rather
 * than a million rows. The text is written by the store as it reads, not
 * built as a json_t: an answer of 300,000 points would be several times
 * its size in objects.
 */
#define SERIES_ANSWER_MAX (64u << 20)
#define STEP_MAX 9007199254740991L /* 2^53 - 1 */

void api_user_experiment_metrics(struct api_rq *q)
{
    int64_t id;
    long maxp, budget, from, to;
    struct kd_buf out = KD_BUF_INIT(SERIES_ANSWER_MAX);
    struct kd_series_got got = {0};
    char err[KD_ERRLEN] = "";
    enum kd_metric_kind kind;
    if (metric_kind_of(q, &kind) != 0)
        goto out;
    if (api_query_int(q, "max_points", 4, 10000, 200, &maxp) != 0 ||
        api_query_int(q, "budget", 0, 100000000, 0, &budget) != 0 ||
        api_query_int(q, "from", 0, STEP_MAX, -1, &from) != 0 ||
        api_query_int(q, "to", 0, STEP_MAX, -1, &to) != 0)
        goto out;
    if ((from < 0) != (to < 0) || to < from) {
        api_error(q, 400, from < 0 ? "from" : "to",
                  "query parameters from and to: a range of steps needs both, from <= to");
        goto out;
    }
    if (exp_id_of(q, &id) != 0)
        goto out;
    struct kd_series_ask ask = {
        .max_points = (int)maxp, .budget = budget, .range = from >= 0, .from = from, .to = to};
    int rc = kd_buf_printf(&out, "{\"kind\":\"%s\",", kd_metric_kind_name(kind));
    size_t head = out.len;
    if (rc == 0 && id > 0)
        rc = kd_store_metrics_overview(q->api->o.store, id, kind, &ask, &out, &got, err);
    else if (rc == 0) /* nothing stored for it yet */
        rc = kd_buf_puts(&out, "[]");
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    /* The store's array goes last; what it reported goes before it. */
    char meta[256];
    int n = snprintf(meta, sizeof(meta),
                     "\"max_points\":%d,\"buckets\":%d,\"width\":%lld,\"source\":\"%s\",",
                     got.max_points ? got.max_points : (int)maxp, got.buckets, (long long)got.width,
                     got.rows ? "rows" : "overview");
    if (ask.range) /* whole buckets around the range asked */
        n += snprintf(meta + n, sizeof(meta) - (size_t)n, "\"from\":%lld,\"to\":%lld,",
                      (long long)got.from, (long long)got.to);
    struct kd_buf all = KD_BUF_INIT(SERIES_ANSWER_MAX + sizeof(meta) + 16);
    rc = kd_buf_append(&all, out.data, head);
    if (rc == 0)
        rc = kd_buf_printf(&all, "%s\"trials\":", meta);
    if (rc == 0)
        rc = kd_buf_append(&all, out.data + head, out.len - head);
    if (rc == 0)
        rc = kd_buf_putc(&all, '}');
    if (rc != 0) {
        kd_buf_free(&all);
        api_error(q, 500, NULL, "the answer could not be built: %s", kd_strerror(rc));
        goto out;
    }
    q->status = 200;
    size_t len = all.len;
    kd_http_respond_json_text_gz(q->r, 200, kd_buf_steal(&all), len, API_GZIP_MIN);
out:
    kd_buf_free(&out);
}

void api_user_trial_checkpoints(struct api_rq *q)
{
    int64_t id;
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    if (trial_id_of(q, &id) != 0)
        goto out;
    int rc = id == 0 ? 0 : kd_store_checkpoints_list(q->api->o.store, 0, id, true, &out, err);
    size_t i;
    json_t *c;
    json_array_foreach(out, i, c) json_object_set_new(c, "trial", json_string(NAME(q)));
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    else
        api_json(q, 200, json_pack("{s:o}", "checkpoints", out ? out : json_array()));
out:
    return;
}

/*
 * One checkpoint by uuid, whatever its state, with its Trial's name and its
 * Experiment (whose spec names the checkpoint storage) when the cluster
 * still has them. One store query: det describe/download need no listing.
 */
struct uid_name {
    const char *uid;
    json_t *ck;
};

/* kd_k8s_cache_each's callback: the name of the Trial with this uid into ck.trial. */
static int name_of_uid(json_t *t, void *ud)
{
    struct uid_name *un = ud;
    const char *u = kd_k8s_meta_str(t, "uid");
    if (u != NULL && strcmp(u, un->uid) == 0) {
        json_object_set_new(un->ck, "trial", json_string(kd_k8s_meta_str(t, "name")));
        return 1; /* uids are unique: done */
    }
    return 0;
}

void api_user_checkpoint(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *ck = NULL, *exp = NULL;
    char err[KD_ERRLEN] = "";
    int rc;
    if (a->ns != NULL && strcmp(NS(q), a->ns) != 0) {
        api_error(q, 404, NULL, "namespace %s is not served by this controller", kd_logq(NS(q)));
        goto out;
    }
    if ((rc = kd_store_checkpoint_get(a->o.store, NS(q), NAME(q), &ck, err)) != 0) {
        api_fail(q, rc, rc == KD_EINVAL ? "uuid" : NULL, err);
        goto out;
    }
    /* Best effort: an Experiment deleted and made again under the same name is not this one. */
    const char *ename = json_string_value(json_object_get(ck, "experiment"));
    const char *euid = json_string_value(json_object_get(ck, "experiment_uid"));
    if (ename != NULL && api_get_experiment(a, NS(q), ename, &exp, err) == 0 &&
        strcmp(kd_k8s_meta_str(exp, "uid") ?: "", euid ?: "") != 0) {
        json_decref(exp);
        exp = NULL;
    }
    const char *tuid = json_string_value(json_object_get(ck, "trial_uid"));
    struct uid_name un = {.uid = tuid, .ck = ck};
    if (tuid != NULL)
        (void)kd_k8s_cache_each(kd_k8s_informer_cache(a->trials), NS(q), name_of_uid, &un);
    api_json(q, 200,
             json_pack("{s:O,s:o?}", "checkpoint", ck, "experiment", exp ? summary(exp) : NULL));
out:
    json_decref(ck);
    json_decref(exp);
}

/* ---- the job queue ---------------------------------------------------------------------- */

static int job_rank(const json_t *t)
{
    const char *st = json_string_value(json_object_get(json_object_get(t, "status"), "state"));
    int rank = -1; /* terminal: not a job */
    if (st == NULL || strcmp(st, "QUEUED") == 0)
        rank = 1;
    else if (strcmp(st, "ACTIVE") == 0 || strncmp(st, "STOPPING_", 9) == 0)
        rank = 0;
    else if (strcmp(st, "PAUSED") == 0)
        rank = 2;
    return rank;
}

static json_int_t prio(const json_t *t)
{
    json_t *p =
        json_object_get(json_object_get(json_object_get(t, "spec"), "resources"), "priority");
    return json_is_integer(p) ? json_integer_value(p) : 42;
}

struct job {
    json_t *t;   /* a Trial... */
    json_t *row; /* ...or a task's job row (api_task_jobs) */
    int rank;
    json_int_t prio;
    double pos;
};

/* Running first, then queued, then paused; within each, the scheduler's order. */
static int by_queue(const void *pa, const void *pb)
{
    const struct job *a = pa, *b = pb;
    int c = a->rank - b->rank;
    if (c == 0 && a->prio != b->prio)
        c = a->prio < b->prio ? -1 : 1;
    if (c == 0 && a->pos != b->pos)
        c = a->pos < b->pos ? -1 : 1;
    if (c == 0 && a->t != NULL && b->t != NULL)
        c = by_created(&a->t, &b->t);
    else if (c == 0)
        c = strcmp(json_string_value(json_object_get(a->row ? a->row : a->t, "submitted")) ?: "",
                   json_string_value(json_object_get(b->row ? b->row : b->t, "submitted")) ?: "");
    return c;
}

/* kd_k8s_cache_each's callback: keep the Trials that are jobs (not ended). */
static int pick_job(json_t *t, void *ud)
{
    if (job_rank(t) >= 0)
        json_array_append(ud, t);
    return 0;
}

/* A task's rank in the queue: running first, then queued. */
static int task_rank(const json_t *row)
{
    const char *st = json_string_value(json_object_get(row, "state"));
    return st == NULL || strcmp(st, "QUEUED") == 0 ? 1 : 0;
}

void api_user_jobs(struct api_rq *q)
{
    struct kd_api *a = q->api;
    const char *ns = kd_http_query(q->r, "namespace");
    json_t *all = json_array(), *tasks = NULL;
    if (ns != NULL && !api_may_do(a, q->who, ns, "list", "jobs", NULL, NULL)) {
        json_decref(all);
        api_error(q, 403, "namespace", "user %s may not use namespace %s", kd_logq(q->who->name),
                  kd_logq(ns));
        return;
    }
    (void)kd_k8s_cache_each(kd_k8s_informer_cache(a->trials), ns, pick_job, all);
    /* Only the jobs of the caller's namespaces. */
    for (size_t i = json_array_size(all); i-- > 0;)
        if (!api_may_do(a, q->who, kd_k8s_meta_str(json_array_get(all, i), "namespace"), "list",
                        "jobs", NULL, NULL))
            json_array_remove(all, i);
    tasks = api_task_jobs(a, ns);
    for (size_t i = json_array_size(tasks); i-- > 0;)
        if (!api_may_do(a, q->who,
                        json_string_value(json_object_get(json_array_get(tasks, i), "namespace")),
                        "list", "jobs", NULL, NULL))
            json_array_remove(tasks, i);
    size_t n = json_array_size(all), nt = json_array_size(tasks), m = 0;
    struct job *v = kd_xcalloc(n + nt + 1, sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(all, i), *exp = NULL;
        int rank = job_rank(t);
        char key[600];
        snprintf(key, sizeof(key), "%s/%s", kd_k8s_meta_str(t, "namespace") ?: "",
                 json_string_value(json_object_get(json_object_get(t, "spec"), "experiment"))
                     ?: "");
        v[m] = (struct job){t, NULL, rank, prio(t), 0};
        if (kd_k8s_cache_get(kd_k8s_informer_cache(a->exps), key, &exp) == 0) {
            v[m].pos = kd_queue_position(exp, api_job_lookup, a);
            json_decref(exp);
        }
        m++;
    }
    for (size_t i = 0; i < nt; i++) {
        json_t *row = json_array_get(tasks, i);
        v[m++] = (struct job){NULL, row, task_rank(row),
                              json_integer_value(json_object_get(row, "priority")),
                              json_real_value(json_object_get(row, "position_key"))};
    }
    qsort(v, m, sizeof(*v), by_queue);
    json_t *jobs = json_array();
    int queued = 0;
    for (size_t i = 0; i < m; i++) {
        json_t *j;
        if (v[i].row != NULL) {
            j = json_deep_copy(v[i].row);
            json_object_del(j, "position_key");
        } else {
            json_t *t = v[i].t, *st = json_object_get(t, "status");
            json_t *res = json_object_get(json_object_get(t, "spec"), "resources");
            j = json_pack(
                "{s:s?,s:s?,s:s?,s:s,s:I,s:I,s:s,s:s,s:s?}", "namespace",
                kd_k8s_meta_str(t, "namespace"), "trial", kd_k8s_meta_str(t, "name"), "experiment",
                json_string_value(json_object_get(json_object_get(t, "spec"), "experiment")),
                "state", json_string_value(json_object_get(st, "state")) ?: "QUEUED", "priority",
                v[i].prio, "slots", json_integer_value(json_object_get(res, "slots")),
                "resource_pool",
                json_string_value(json_object_get(res, "resourcePool")) ?: "default", "message",
                json_string_value(json_object_get(st, "message")) ?: "", "submitted",
                kd_k8s_meta_str(t, "creationTimestamp"));
        }
        if (v[i].rank == 1)
            json_object_set_new(j, "queue_position", json_integer(++queued));
        json_array_append_new(jobs, j);
    }
    free(v);
    json_decref(all);
    json_decref(tasks);
    api_json(q, 200, json_pack("{s:o}", "jobs", jobs));
}

/* ---- live metric streams (server-sent events) ------------------------------------------- */

struct stream {
    struct kd_api *api;
    char ns[256], name[256];
    bool experiment; /* filter on the experiment, else on the trial */
    uint64_t last;   /* last seq sent */
    struct kd_buf out;
    int64_t last_write_ms;
};

static void stream_free(void *p)
{
    struct stream *s = p;
    kd_buf_free(&s->out);
    free(s);
}

static ssize_t stream_fill(void *p, char *buf, size_t max)
{
    struct stream *s = p;
    struct api_hub *h = &s->api->hub;
    if (s->out.len == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_mutex_lock(&h->mu);
        if (h->next_seq <= s->last + 1)
            pthread_cond_timedwait(&h->cond, &h->mu, &ts);
        if (s->last + 1 < h->first_seq) {
            int rc = kd_buf_printf(&s->out, "event: lost\ndata: {\"missed\":%llu}\n\n",
                                   (unsigned long long)(h->first_seq - s->last - 1));
            (void)rc;
            s->last = h->first_seq - 1;
        }
        for (uint64_t q = s->last + 1; q < h->next_seq; q++) {
            const struct api_hub_entry *e = &h->ring[q % API_HUB_SLOTS];
            s->last = q;
            if (strcmp(e->ns, s->ns) != 0 ||
                strcmp(s->experiment ? e->experiment : e->trial, s->name) != 0)
                continue;
            if (kd_buf_printf(&s->out, "id: %llu\nevent: metrics\ndata: %s\n\n",
                              (unsigned long long)e->seq, e->json) != 0) {
                if (s->out.len > 0) {
                    s->last = q - 1; /* the buffer is full: send what it has first */
                    break;
                }
                /* One batch larger than a stream's buffer: say so and go on. */
                int rc = kd_buf_printf(&s->out, "event: lost\ndata: {\"missed\":1}\n\n");
                (void)rc;
            }
        }
        pthread_mutex_unlock(&h->mu);
    }
    return api_sse_take(&s->out, &s->last_write_ms, buf, max);
}

void api_user_stream(struct api_rq *q)
{
    struct kd_api *a = q->api;
    json_t *obj = NULL;
    char err[KD_ERRLEN] = "";
    bool exp = strcmp(q->seg[4], "experiments") == 0;
    int rc = exp ? api_get_experiment(a, NS(q), NAME(q), &obj, err)
                 : api_get_trial(a, NS(q), NAME(q), &obj, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    struct stream *s = kd_xcalloc(1, sizeof(*s));
    s->api = a;
    s->experiment = exp;
    snprintf(s->ns, sizeof(s->ns), "%s", NS(q));
    snprintf(s->name, sizeof(s->name), "%s", NAME(q));
    kd_buf_init(&s->out, 16u << 20);
    pthread_mutex_lock(&a->hub.mu);
    s->last = a->hub.next_seq - 1;
    /* Last-Event-ID: resume after that batch when the ring still holds what follows. */
    const char *lei = kd_http_header(q->r, "Last-Event-ID");
    int64_t from;
    if (lei != NULL && kd_parse_i64(lei, &from) == 0 && from >= 0 &&
        (uint64_t)from < a->hub.next_seq)
        s->last = (uint64_t)from;
    pthread_mutex_unlock(&a->hub.mu);
    rc = kd_buf_puts(&s->out, "retry: 2000\n: connected\n\n");
    (void)rc;
    s->last_write_ms = kd_mono_ms();
    kd_http_add_header(q->r, "Cache-Control", "no-cache");
    q->status = 200;
    kd_http_respond_stream(q->r, 200, "text/event-stream", stream_fill, s, stream_free);
out:
    json_decref(obj);
}

/*
 * GET /api/v1/info: what a slot is on this controller, as its scheduler counts them
 * (docs/scheduling.md), so that det can tell whether a trial could ever fit and show each
 * resource pool's slot type (det agent list, det slot list) as the scheduler sees it.
 */
void api_user_info(struct api_rq *q)
{
    const struct kd_api_opts *o = &q->api->o;
    api_json(q, 200,
             json_pack("{s:s,s:{s:s,s:I,s:I,s:i}}", "namespace", o->ns != NULL ? o->ns : "",
                       "slots", "slot_type", o->slot_type, "cpu_per_slot_milli",
                       (json_int_t)o->cpu_per_slot_milli, "memory_per_slot_bytes",
                       (json_int_t)o->memory_per_slot, "max_slots_per_pod", o->max_slots_per_pod));
}
