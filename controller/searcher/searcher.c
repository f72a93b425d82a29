/*
 * The searcher core: common config, the trial table, event validation and
 * dispatch to the method, operation emitters, and snapshot/restore of
 * everything the methods share. Methods live one per file behind
 * struct kd__method.
 */
#include "searcher/searcher_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"

static const struct kd__method *const METHODS[] = {
    &kd__single, &kd__grid, &kd__random, &kd__bayesian, &kd__asha, &kd__pbt, NULL,
};
static const char *const METHOD_NAMES[] = {
    "single", "grid", "random", "bayesian", "adaptive_asha", "pbt", NULL,
};

/* ---- ops ---------------------------------------------------------------- */

void kd_search_ops_free(struct kd_search_ops *ops)
{
    if (!ops)
        return;
    for (size_t i = 0; i < ops->n; i++) {
        json_decref(ops->v[i].hparams);
        free(ops->v[i].reason);
    }
    free(ops->v);
    ops->v = NULL;
    ops->n = ops->cap = 0;
}

static struct kd_search_op *op_push(struct kd_searcher *s, enum kd_search_op_type type)
{
    struct kd_search_ops *ops = s->ops;
    if (ops->n == ops->cap) {
        ops->cap = ops->cap ? ops->cap * 2 : 16;
        ops->v = kd_xrealloc(ops->v, ops->cap * sizeof(*ops->v));
    }
    struct kd_search_op *op = &ops->v[ops->n++];
    memset(op, 0, sizeof(*op));
    op->type = type;
    return op;
}

json_t *kd_search_op_to_json(const struct kd_search_op *op, const char *unit)
{
    static const char *const names[] = {"create", "validate_after", "close", "shutdown"};
    json_t *o = json_object();
    json_object_set_new(o, "op", json_string(names[op->type]));
    if (op->type != KD_SEARCH_SHUTDOWN)
        json_object_set_new(o, "request_id", json_string(op->request_id));
    switch (op->type) {
    case KD_SEARCH_CREATE:
        json_object_set_new(o, "hparams", json_incref(op->hparams));
        json_object_set_new(o, "seed", json_integer(op->seed));
        if (op->parent_id[0])
            json_object_set_new(o, "parent", json_string(op->parent_id));
        break;
    case KD_SEARCH_VALIDATE_AFTER:
        json_object_set_new(o, "length", json_integer(op->length));
        if (unit)
            json_object_set_new(o, "unit", json_string(unit));
        break;
    case KD_SEARCH_CLOSE: break;
    case KD_SEARCH_SHUTDOWN: json_object_set_new(o, "failure", json_boolean(op->failure)); break;
    }
    if (op->reason)
        json_object_set_new(o, "reason", json_string(op->reason));
    return o;
}

int kd_search_exit_parse(const char *s, enum kd_search_exit *out)
{
    static const char *const names[] = {"errored", "user_canceled", "invalid_hp", NULL};
    for (int i = 0; s && names[i]; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum kd_search_exit)i;
            return 0;
        }
    }
    return KD_EINVAL;
}

/* ---- JSON helpers ------------------------------------------------------- */

int kd__get_int(const json_t *o, const char *key, const char *path, bool required, int64_t min,
                int64_t *out, char *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required)
            return kd_seterr(err, KD_EINVAL, "%s.%s: required", path, key);
        return 0;
    }
    if (!json_is_integer(v))
        return kd_seterr(err, KD_EINVAL, "%s.%s: expected an integer", path, key);
    if (json_integer_value(v) < min)
        return kd_seterr(err, KD_EINVAL, "%s.%s: must be at least %" PRId64 ", got %" PRId64, path,
                         key, min, (int64_t)json_integer_value(v));
    *out = json_integer_value(v);
    return 0;
}

int kd__get_num(const json_t *o, const char *key, const char *path, bool required, double *out,
                char *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required)
            return kd_seterr(err, KD_EINVAL, "%s.%s: required", path, key);
        return 0;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return kd_seterr(err, KD_EINVAL, "%s.%s: expected a number", path, key);
    *out = json_number_value(v);
    return 0;
}

json_t *kd__u64_json(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%016" PRIx64, v);
    return json_string(buf);
}

int kd__json_u64(const json_t *j, uint64_t *out)
{
    const char *s = json_string_value(j);
    char *end = NULL;
    if (!s || strlen(s) != 16)
        return KD_EINVAL;
    *out = strtoull(s, &end, 16);
    return end && *end == '\0' ? 0 : KD_EINVAL;
}

/* Doubles that may be infinite: JSON has no inf, so those become strings. */
static json_t *dbl_json(double v)
{
    if (isfinite(v))
        return json_real(v);
    return json_string(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static int json_dbl(const json_t *j, double *out)
{
    const char *s = json_string_value(j);
    if (json_is_number(j)) {
        *out = json_number_value(j);
        return 0;
    }
    if (s && strcmp(s, "inf") == 0)
        *out = INFINITY;
    else if (s && strcmp(s, "-inf") == 0)
        *out = -INFINITY;
    else if (s && strcmp(s, "nan") == 0)
        *out = NAN;
    else
        return KD_EINVAL;
    return 0;
}

/* ---- trials ------------------------------------------------------------- */

bool kd__alive(const struct kd__trial *t)
{
    return !t->closing && !t->finished;
}

int64_t kd__nalive(const struct kd_searcher *s)
{
    return (int64_t)s->ntrials - s->nfinished;
}

static void make_id(const struct kd_searcher *s, size_t idx, char *out)
{
    uint32_t h = (uint32_t)kd_mix64(s->exp_seed ^ kd_mix64((uint64_t)idx + 0x5eedULL));
    snprintf(out, KD_SEARCH_IDLEN, "r%zu-%08" PRIx32, idx, h);
}

static struct kd__trial *trial_add(struct kd_searcher *s)
{
    if (s->ntrials == s->captrials) {
        s->captrials = s->captrials ? s->captrials * 2 : 64;
        s->trials = kd_xrealloc(s->trials, s->captrials * sizeof(*s->trials));
    }
    struct kd__trial *t = &s->trials[s->ntrials];
    memset(t, 0, sizeof(*t));
    make_id(s, s->ntrials, t->id);
    t->seed = kd_hp_trial_seed(s->exp_seed, s->ntrials);
    t->x = kd_xcalloc(s->sp->n ? s->sp->n : 1, sizeof(double));
    t->parent = -1;
    t->best = INFINITY;
    t->last = INFINITY;
    t->pat_best = INFINITY;
    s->ntrials++;
    return t;
}

static void trial_free(struct kd__trial *t)
{
    free(t->x);
    free(t->hlen);
    free(t->hloss);
}

static int find_trial(struct kd_searcher *s, const char *id, const char *ev, struct kd__trial **out,
                      char *err)
{
    char *end = NULL;
    if (!id)
        return kd_seterr(err, KD_EINVAL, "%s.request_id: required", ev);
    if (id[0] == 'r' && id[1] >= '0' && id[1] <= '9') {
        unsigned long long idx = strtoull(id + 1, &end, 10);
        if (end && *end == '-' && idx < s->ntrials && strcmp(s->trials[idx].id, id) == 0) {
            *out = &s->trials[idx];
            return 0;
        }
    }
    return kd_seterr(err, KD_EINVAL, "%s.request_id: unknown request id \"%.64s\"", ev, id);
}

/* ---- emitters ----------------------------------------------------------- */

struct kd__trial *kd__create(struct kd_searcher *s, const double *x, int64_t parent,
                             const char *reason)
{
    struct kd__trial *t = trial_add(s);
    memcpy(t->x, x, s->sp->n * sizeof(double));
    t->parent = parent;
    struct kd_search_op *op = op_push(s, KD_SEARCH_CREATE);
    kd_strlcpy(op->request_id, t->id, sizeof(op->request_id));
    op->hparams = kd_hp_build(s->sp, t->x);
    op->seed = t->seed;
    if (parent >= 0)
        kd_strlcpy(op->parent_id, s->trials[parent].id, sizeof(op->parent_id));
    if (reason)
        op->reason = kd_xstrdup(reason);
    return t;
}

bool kd__validate_after_why(struct kd_searcher *s, struct kd__trial *t, int64_t length,
                            const char *reason)
{
    if (!kd__alive(t) || s->shutdown)
        return false;
    t->awaiting = true;
    t->target = length;
    struct kd_search_op *op = op_push(s, KD_SEARCH_VALIDATE_AFTER);
    kd_strlcpy(op->request_id, t->id, sizeof(op->request_id));
    op->length = length;
    if (reason)
        op->reason = kd_xstrdup(reason);
    return true;
}

bool kd__validate_after(struct kd_searcher *s, struct kd__trial *t, int64_t length)
{
    return kd__validate_after_why(s, t, length, NULL);
}

void kd__close(struct kd_searcher *s, struct kd__trial *t, const char *reason)
{
    if (!kd__alive(t))
        return;
    t->closing = true;
    t->awaiting = false;
    struct kd_search_op *op = op_push(s, KD_SEARCH_CLOSE);
    kd_strlcpy(op->request_id, t->id, sizeof(op->request_id));
    if (reason)
        op->reason = kd_xstrdup(reason);
}

void kd__shutdown(struct kd_searcher *s, const char *reason, bool failure)
{
    if (s->shutdown)
        return;
    s->shutdown = true;
    struct kd_search_op *op = op_push(s, KD_SEARCH_SHUTDOWN);
    if (!failure && s->ntrials > 0 && s->nerrored == (int64_t)s->ntrials) {
        failure = true;
        op->reason = kd_xasprintf("%s; every trial errored", reason);
    } else {
        op->reason = kd_xstrdup(reason);
    }
    op->failure = failure;
    KD_INFO("searcher shutdown", "method=%s failure=%d reason=%s", s->m->name, failure,
            kd_logq(op->reason));
}

/* ---- config ------------------------------------------------------------- */

static int parse_length(const json_t *v, const char *path, char *unit, int64_t *len, char *err)
{
    static const char *const units[] = {"batches", "records", "epochs", NULL};
    const char *k;
    const json_t *n;
    if (json_is_integer(v)) {
        /* Determined's unitless length (Core API): its meaning is the training code's; kdet
         * counts it in batches, as lib/config documents. */
        if (json_integer_value(v) < 1)
            return kd_seterr(err, KD_EINVAL, "%s: expected a positive integer", path);
        kd_strlcpy(unit, "batches", 16);
        *len = json_integer_value(v);
        return 0;
    }
    if (!json_is_object(v) || json_object_size(v) != 1)
        return kd_seterr(err, KD_EINVAL, "%s: expected exactly one of {batches|records|epochs: N}",
                         path);
    json_object_foreach((json_t *)v, k, n)
    {
        bool ok = false;
        for (int i = 0; units[i]; i++)
            ok = ok || strcmp(k, units[i]) == 0;
        if (!ok) {
            const char *sug = kd_suggest(k, units);
            return kd_seterr(err, KD_EINVAL,
                             "%s.%s: unknown unit%s%s%s (batches, records or "
                             "epochs)",
                             path, k, sug ? "; did you mean `" : "", sug ? sug : "",
                             sug ? "`?" : "");
        }
        if (!json_is_integer(n) || json_integer_value(n) < 1)
            return kd_seterr(err, KD_EINVAL, "%s.%s: expected a positive integer", path, k);
        kd_strlcpy(unit, k, 16);
        *len = json_integer_value(n);
    }
    return 0;
}

int kd__parse_length(const json_t *v, const char *path, char *unit, int64_t *len, char *err)
{
    return parse_length(v, path, unit, len, err);
}

static int parse_common(struct kd_searcher *s, const json_t *sc, char *err)
{
    const json_t *v;
    int rc = 0;
    v = json_object_get(sc, "metric");
    if (!json_is_string(v) || json_string_length(v) == 0) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.metric: required: the validation metric to "
                       "optimize (a string)");
        goto out;
    }
    if (json_string_length(v) >= sizeof(s->metric)) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.metric: longer than %zu bytes",
                       sizeof(s->metric) - 1);
        goto out;
    }
    kd_strlcpy(s->metric, json_string_value(v), sizeof(s->metric));
    s->smaller_is_better = true;
    v = json_object_get(sc, "smaller_is_better");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            rc = kd_seterr(err, KD_EINVAL, "searcher.smaller_is_better: expected true or false");
            goto out;
        }
        s->smaller_is_better = json_is_true(v);
    }
    v = json_object_get(sc, "time_metric");
    if (v && !json_is_null(v)) {
        /* adaptive_asha's time_metric and max_time: rungs in the metric's reported values. */
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) >= sizeof(s->time_metric)) {
            rc = kd_seterr(err, KD_EINVAL,
                           "searcher.time_metric: expected the name of a validation metric "
                           "(1 to %zu bytes)",
                           sizeof(s->time_metric) - 1);
            goto out;
        }
        if (!json_is_integer(json_object_get(sc, "max_time"))) {
            rc = kd_seterr(err, KD_EINVAL,
                           "searcher.max_time: required with time_metric (the value of "
                           "time_metric a trial trains to, a positive integer)");
            goto out;
        }
        kd_strlcpy(s->time_metric, json_string_value(v), sizeof(s->time_metric));
        if ((rc = parse_length(json_object_get(sc, "max_time"), "searcher.max_time", s->unit,
                               &s->max_length, err)) != 0)
            goto out;
    } else if ((v = json_object_get(sc, "max_length")) != NULL && !json_is_null(v)) {
        if ((rc = parse_length(v, "searcher.max_length", s->unit, &s->max_length, err)) != 0)
            goto out;
    } else if (json_is_integer(json_object_get(sc, "max_time"))) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.time_metric: required with max_time (the validation metric "
                       "whose reported values measure the rungs)");
        goto out;
    }
    if ((rc = kd__get_int(sc, "max_trials", "searcher", false, 1, &s->max_trials, err)) != 0)
        goto out;
    if (s->max_trials > KD_SEARCH_MAX_TRIALS) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.max_trials: at most %d", KD_SEARCH_MAX_TRIALS);
        goto out;
    }
    s->max_concurrent = 16;
    if ((rc = kd__get_int(sc, "max_concurrent_trials", "searcher", false, 0, &s->max_concurrent,
                          err)) != 0)
        goto out;
    v = json_object_get(sc, "early_stopping");
    if (v && !json_is_null(v) && (rc = kd__rules_parse(s, v, err)) != 0)
        goto out;
out:
    return rc;
}

static int searcher_build(const json_t *config, uint64_t exp_seed, struct kd_searcher **out,
                          char *err)
{
    struct kd_searcher *s = kd_xcalloc(1, sizeof(*s));
    const json_t *sc = json_object_get(config, "searcher");
    const json_t *hp;
    const char *name;
    int rc = 0;
    *out = NULL;
    s->exp_seed = exp_seed;
    if (!json_is_object(config)) {
        rc = kd_seterr(err, KD_EINVAL, "config: expected an object");
        goto out;
    }
    if (!json_is_object(sc)) {
        rc = kd_seterr(err, KD_EINVAL, "searcher: required (a mapping with name, metric, ...)");
        goto out;
    }
    name = json_string_value(json_object_get(sc, "name"));
    if (!name) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.name: required (one of single, grid, random, "
                       "bayesian, adaptive_asha, pbt)");
        goto out;
    }
    for (int i = 0; METHODS[i]; i++)
        if (strcmp(name, METHOD_NAMES[i]) == 0)
            s->m = METHODS[i];
    if (!s->m) {
        const char *sug = kd_suggest(name, METHOD_NAMES);
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.name: unknown searcher \"%.64s\"%s%s%s (one of single, grid, "
                       "random, bayesian, adaptive_asha, pbt)",
                       name, sug ? "; did you mean `" : "", sug ? sug : "", sug ? "`?" : "");
        goto out;
    }
    if ((rc = kd_hp_space_parse(json_object_get(config, "hyperparameters"), &s->sp, err)) != 0)
        goto out;
    s->config = json_object();
    hp = json_object_get(config, "hyperparameters");
    json_object_set_new(s->config, "hyperparameters", hp ? json_deep_copy(hp) : json_object());
    json_object_set_new(s->config, "searcher", json_deep_copy(sc));
    if ((rc = parse_common(s, sc, err)) != 0)
        goto out;
    if (s->time_metric[0] != '\0' && s->m->timed == NULL) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.time_metric: only the adaptive_asha searcher measures its "
                       "rungs in a metric; the %s searcher counts max_length",
                       s->m->name);
        goto out;
    }
    kd_rng_seed_stream(&s->rng, exp_seed, 0x73656172ULL /* "sear" */);
    if ((rc = s->m->init(s, sc, err)) != 0)
        goto out;
    *out = s;
    s = NULL;
out:
    kd_searcher_free(s);
    return rc;
}

int kd_searcher_new(const json_t *config, uint64_t exp_seed, struct kd_searcher **out, char *err)
{
    return searcher_build(config, exp_seed, out, err);
}

void kd_searcher_free(struct kd_searcher *s)
{
    if (!s)
        return;
    if (s->m && s->m->free && s->mstate)
        s->m->free(s);
    for (size_t i = 0; i < s->ntrials; i++)
        trial_free(&s->trials[i]);
    free(s->trials);
    kd_hp_space_free(s->sp);
    json_decref(s->config);
    free(s);
}

const char *kd_searcher_method(const struct kd_searcher *s)
{
    return s->m->name;
}

const char *kd_searcher_time_metric(const struct kd_searcher *s)
{
    return s->time_metric[0] != '\0' ? s->time_metric : NULL;
}

const char *kd_searcher_unit(const struct kd_searcher *s)
{
    return s->unit[0] ? s->unit : "batches";
}

bool kd_searcher_done(const struct kd_searcher *s)
{
    return s->shutdown;
}

double kd_searcher_progress(const struct kd_searcher *s)
{
    if (s->shutdown)
        return 1.0;
    double p = s->m->progress(s);
    return p < 0 ? 0 : p > 1 ? 1 : p;
}

/* ---- events ------------------------------------------------------------- */

int kd_searcher_initial(struct kd_searcher *s, struct kd_search_ops *ops, char *err)
{
    int rc = 0;
    if (s->initialized) {
        rc = kd_seterr(err, KD_ESTATE, "initial: the searcher was already initialized");
        goto out;
    }
    s->initialized = true;
    s->ops = ops;
    rc = s->m->initial(s);
    s->ops = NULL;
out:
    return rc;
}

static int need_init(struct kd_searcher *s, const char *ev, char *err)
{
    if (!s->initialized)
        return kd_seterr(err, KD_ESTATE, "%s: the searcher has not received `initial` yet", ev);
    return 0;
}

int kd_searcher_trial_created(struct kd_searcher *s, const char *request_id,
                              struct kd_search_ops *ops, char *err)
{
    struct kd__trial *t = NULL;
    int rc;
    (void)ops;
    if ((rc = need_init(s, "trial_created", err)) != 0 ||
        (rc = find_trial(s, request_id, "trial_created", &t, err)) != 0)
        goto out;
    if (t->created) {
        rc = kd_seterr(err, KD_ESTATE, "trial_created: trial %s was already created", t->id);
        goto out;
    }
    t->created = true;
out:
    return rc;
}

static int hist_push(struct kd__trial *t, int64_t len, double loss, char *err)
{
    if (t->nhist >= KD_SEARCH_MAX_HISTORY)
        return kd_seterr(err, KD_ETOOBIG,
                         "validation_completed: trial %s has more than %d "
                         "validations",
                         t->id, KD_SEARCH_MAX_HISTORY);
    if (t->nhist == t->caphist) {
        t->caphist = t->caphist ? t->caphist * 2 : 8;
        t->hlen = kd_xrealloc(t->hlen, t->caphist * sizeof(*t->hlen));
        t->hloss = kd_xrealloc(t->hloss, t->caphist * sizeof(*t->hloss));
    }
    t->hlen[t->nhist] = len;
    t->hloss[t->nhist] = loss;
    t->nhist++;
    return 0;
}

int kd_searcher_validation_completed(struct kd_searcher *s, const char *request_id, double metric,
                                     int64_t length, struct kd_search_ops *ops, char *err)
{
    return kd_searcher_validation_timed(s, request_id, metric, length, NAN, ops, err);
}

int kd_searcher_validation_timed(struct kd_searcher *s, const char *request_id, double metric,
                                 int64_t length, double time, struct kd_search_ops *ops, char *err)
{
    bool timed = s->time_metric[0] != '\0' && !isnan(time);
    struct kd__trial *t = NULL;
    int rc;
    double loss;
    if ((rc = need_init(s, "validation_completed", err)) != 0 ||
        (rc = find_trial(s, request_id, "validation_completed", &t, err)) != 0)
        goto out;
    if (t->finished) {
        rc = kd_seterr(err, KD_ESTATE, "validation_completed: trial %s has already %s", t->id,
                       t->exited ? "exited" : "closed");
        goto out;
    }
    if (length < 0 || length < t->last_len) {
        rc = kd_seterr(err, KD_EINVAL,
                       "validation_completed.length: %" PRId64 " is below the trial's last "
                       "validated length %" PRId64,
                       length, t->last_len);
        goto out;
    }
    if (timed && (!isfinite(time) || time < 0 || time < t->time)) {
        rc = kd_seterr(err, KD_EINVAL, "validation_completed.time: %.17g (%s) is %s", time,
                       s->time_metric,
                       !isfinite(time) || time < 0 ? "not a finite number >= 0"
                                                   : "below the trial's last value");
        goto out;
    }
    loss = isfinite(metric) ? (s->smaller_is_better ? metric : -metric) : KD__WORST;
    if ((rc = hist_push(t, length, loss, err)) != 0)
        goto out;
    if (timed)
        t->time = time;
    t->created = true; /* a validation implies the trial exists */
    t->last = loss;
    t->last_len = length;
    if (loss < t->best)
        t->best = loss;
    if (!kd__alive(t) || s->shutdown)
        goto out;
    s->ops = ops;
    if (s->nrules > 0)
        kd__rules_eval(s, t);
    if (timed) {
        if (kd__alive(t) && !s->shutdown)
            rc = s->m->timed(s, t, loss, time);
    } else if (t->awaiting && length >= t->target && !s->shutdown) {
        t->awaiting = false;
        rc = s->m->validated(s, t, loss);
    }
    s->ops = NULL;
out:
    return rc;
}

static int finish(struct kd_searcher *s, struct kd__trial *t, struct kd_search_ops *ops)
{
    int rc = 0;
    t->finished = true;
    t->awaiting = false;
    s->nfinished++;
    if (!s->shutdown) {
        s->ops = ops;
        rc = s->m->finished(s, t);
        s->ops = NULL;
    }
    return rc;
}

int kd_searcher_trial_exited_early(struct kd_searcher *s, const char *request_id,
                                   enum kd_search_exit reason, struct kd_search_ops *ops, char *err)
{
    struct kd__trial *t = NULL;
    int rc;
    if ((rc = need_init(s, "trial_exited_early", err)) != 0 ||
        (rc = find_trial(s, request_id, "trial_exited_early", &t, err)) != 0)
        goto out;
    if ((int)reason < 0 || reason > KD_SEARCH_EXIT_INVALID_HP) {
        rc = kd_seterr(err, KD_EINVAL, "trial_exited_early.reason: unknown reason %d", (int)reason);
        goto out;
    }
    if (t->finished) {
        rc = kd_seterr(err, KD_ESTATE, "trial_exited_early: trial %s has already %s", t->id,
                       t->exited ? "exited" : "closed");
        goto out;
    }
    t->exited = true;
    t->exit_reason = (int)reason;
    s->nexited++;
    if (reason == KD_SEARCH_EXIT_ERRORED)
        s->nerrored++;
    if (reason == KD_SEARCH_EXIT_INVALID_HP)
        s->ninvalid++;
    KD_INFO("trial exited early", "trial=%s reason=%s", t->id,
            reason == KD_SEARCH_EXIT_ERRORED         ? "errored"
            : reason == KD_SEARCH_EXIT_USER_CANCELED ? "user_canceled"
                                                     : "invalid_hp");
    rc = finish(s, t, ops);
out:
    return rc;
}

int kd_searcher_trial_closed(struct kd_searcher *s, const char *request_id,
                             struct kd_search_ops *ops, char *err)
{
    struct kd__trial *t = NULL;
    int rc;
    if ((rc = need_init(s, "trial_closed", err)) != 0 ||
        (rc = find_trial(s, request_id, "trial_closed", &t, err)) != 0)
        goto out;
    if (t->finished) {
        if (!t->exited)
            rc = kd_seterr(err, KD_ESTATE, "trial_closed: trial %s was already closed", t->id);
        goto out; /* closed after exiting early: nothing more to do */
    }
    rc = finish(s, t, ops);
out:
    return rc;
}

int kd_searcher_event(struct kd_searcher *s, const json_t *ev, struct kd_search_ops *ops, char *err)
{
    static const char *const names[] = {
        "initial", "trial_created", "validation_completed", "trial_exited_early", "trial_closed",
        NULL};
    const char *name = json_string_value(json_object_get(ev, "event"));
    const char *id = json_string_value(json_object_get(ev, "request_id"));
    int rc = 0;
    if (!json_is_object(ev)) {
        rc = kd_seterr(err, KD_EINVAL, "event: expected a JSON object");
        goto out;
    }
    if (!name) {
        rc = kd_seterr(err, KD_EINVAL,
                       "event: missing \"event\" (one of initial, trial_created, "
                       "validation_completed, trial_exited_early, trial_closed)");
        goto out;
    }
    if (strcmp(name, "initial") != 0 && !id) {
        rc = kd_seterr(err, KD_EINVAL, "%.64s.request_id: required (a string)", name);
        goto out;
    }
    if (strcmp(name, "initial") == 0) {
        rc = kd_searcher_initial(s, ops, err);
    } else if (strcmp(name, "trial_created") == 0) {
        rc = kd_searcher_trial_created(s, id, ops, err);
    } else if (strcmp(name, "validation_completed") == 0) {
        const json_t *m = json_object_get(ev, "metric");
        const json_t *l = json_object_get(ev, "length");
        if (!json_is_number(m)) {
            rc = kd_seterr(err, KD_EINVAL, "validation_completed.metric: expected a number");
            goto out;
        }
        if (!json_is_integer(l) || json_integer_value(l) < 0) {
            rc = kd_seterr(err, KD_EINVAL,
                           "validation_completed.length: expected a non-negative integer");
            goto out;
        }
        const json_t *tv = json_object_get(ev, "time");
        if (tv != NULL && !json_is_number(tv)) {
            rc = kd_seterr(err, KD_EINVAL,
                           "validation_completed.time: expected a number (the value of "
                           "time_metric)");
            goto out;
        }
        rc = kd_searcher_validation_timed(s, id, json_number_value(m), json_integer_value(l),
                                          tv != NULL ? json_number_value(tv) : NAN, ops, err);
    } else if (strcmp(name, "trial_exited_early") == 0) {
        enum kd_search_exit r;
        if (kd_search_exit_parse(json_string_value(json_object_get(ev, "reason")), &r) != 0) {
            rc = kd_seterr(err, KD_EINVAL,
                           "trial_exited_early.reason: expected errored, "
                           "user_canceled or invalid_hp");
            goto out;
        }
        rc = kd_searcher_trial_exited_early(s, id, r, ops, err);
    } else if (strcmp(name, "trial_closed") == 0) {
        rc = kd_searcher_trial_closed(s, id, ops, err);
    } else {
        const char *sug = kd_suggest(name, names);
        rc = kd_seterr(err, KD_EINVAL, "event: unknown event \"%.64s\"%s%s%s", name,
                       sug ? "; did you mean `" : "", sug ? sug : "", sug ? "`?" : "");
    }
out:
    return rc;
}

/* ---- snapshot / restore ------------------------------------------------- */

enum { F_CREATED = 1, F_CLOSING = 2, F_FINISHED = 4, F_EXITED = 8, F_AWAITING = 16, F_OUT = 32 };

json_t *kd_searcher_snapshot(const struct kd_searcher *s)
{
    json_t *o = json_object();
    json_t *rng = json_array();
    json_t *trials = json_array();
    json_object_set_new(o, "format", json_string("kdet-searcher/1"));
    json_object_set_new(o, "config", json_deep_copy(s->config));
    json_object_set_new(o, "experiment_seed", kd__u64_json(s->exp_seed));
    for (int i = 0; i < 4; i++)
        json_array_append_new(rng, kd__u64_json(s->rng.s[i]));
    json_object_set_new(o, "rng", rng);
    json_object_set_new(o, "initialized", json_boolean(s->initialized));
    json_object_set_new(o, "shutdown", json_boolean(s->shutdown));
    json_object_set_new(o, "counts",
                        json_pack("[IIII]", (json_int_t)s->nfinished, (json_int_t)s->nexited,
                                  (json_int_t)s->nerrored, (json_int_t)s->ninvalid));
    for (size_t i = 0; i < s->ntrials; i++) {
        const struct kd__trial *t = &s->trials[i];
        json_t *jt = json_object();
        json_t *x = json_array();
        json_t *h = json_array();
        for (size_t k = 0; k < s->sp->n; k++)
            json_array_append_new(x, dbl_json(t->x[k]));
        for (size_t k = 0; k < t->nhist; k++)
            json_array_append_new(h,
                                  json_pack("[Io]", (json_int_t)t->hlen[k], dbl_json(t->hloss[k])));
        int flags = (t->created ? F_CREATED : 0) | (t->closing ? F_CLOSING : 0) |
                    (t->finished ? F_FINISHED : 0) | (t->exited ? F_EXITED : 0) |
                    (t->awaiting ? F_AWAITING : 0) | (t->outstanding ? F_OUT : 0);
        json_object_set_new(jt, "x", x);
        json_object_set_new(jt, "parent", json_integer(t->parent));
        json_object_set_new(jt, "flags", json_integer(flags));
        json_object_set_new(jt, "exit_reason", json_integer(t->exit_reason));
        json_object_set_new(jt, "target", json_integer(t->target));
        json_object_set_new(jt, "best", dbl_json(t->best));
        json_object_set_new(jt, "hist", h);
        json_object_set_new(jt, "patience",
                            json_pack("[oI]", dbl_json(t->pat_best), (json_int_t)t->pat_since));
        json_object_set_new(jt, "b", json_integer(t->b));
        json_object_set_new(jt, "r", json_integer(t->r));
        json_object_set_new(jt, "m", dbl_json(t->m));
        if (t->time != 0)
            json_object_set_new(jt, "time", dbl_json(t->time));
        json_array_append_new(trials, jt);
    }
    json_object_set_new(o, "trials", trials);
    if (s->m->snapshot) {
        json_t *ms = s->m->snapshot(s);
        if (ms)
            json_object_set_new(o, "method", ms);
    }
    return o;
}

static int restore_trial(struct kd_searcher *s, const json_t *jt, size_t i, char *err)
{
    struct kd__trial *t = trial_add(s);
    const json_t *x = json_object_get(jt, "x");
    const json_t *h = json_object_get(jt, "hist");
    const json_t *pat = json_object_get(jt, "patience");
    const json_t *v;
    size_t k;
    int flags;
    if (!json_is_array(x) || json_array_size(x) != s->sp->n || !json_is_array(h) ||
        !json_is_array(pat) || json_array_size(pat) != 2 ||
        !json_is_integer(json_object_get(jt, "flags")) ||
        !json_is_integer(json_object_get(jt, "parent")))
        return kd_seterr(err, KD_ECORRUPT, "snapshot.trials[%zu]: malformed trial", i);
    json_array_foreach(x, k, v)
    {
        if (json_dbl(v, &t->x[k]) != 0)
            return kd_seterr(err, KD_ECORRUPT, "snapshot.trials[%zu].x[%zu]: expected a number", i,
                             k);
    }
    json_array_foreach(h, k, v)
    {
        double loss;
        if (!json_is_array(v) || !json_is_integer(json_array_get(v, 0)) ||
            json_dbl(json_array_get(v, 1), &loss) != 0)
            return kd_seterr(err, KD_ECORRUPT,
                             "snapshot.trials[%zu].hist[%zu]: expected [length, "
                             "loss]",
                             i, k);
        if (hist_push(t, json_integer_value(json_array_get(v, 0)), loss, err) != 0)
            return KD_ECORRUPT;
        t->last = loss;
        t->last_len = json_integer_value(json_array_get(v, 0));
    }
    flags = (int)json_integer_value(json_object_get(jt, "flags"));
    t->created = flags & F_CREATED;
    t->closing = flags & F_CLOSING;
    t->finished = flags & F_FINISHED;
    t->exited = flags & F_EXITED;
    t->awaiting = flags & F_AWAITING;
    t->outstanding = flags & F_OUT;
    t->parent = json_integer_value(json_object_get(jt, "parent"));
    if (t->parent >= (int64_t)i || t->parent < -1)
        return kd_seterr(err, KD_ECORRUPT, "snapshot.trials[%zu].parent: out of range", i);
    t->exit_reason = (int)json_integer_value(json_object_get(jt, "exit_reason"));
    t->target = json_integer_value(json_object_get(jt, "target"));
    t->b = json_integer_value(json_object_get(jt, "b"));
    t->r = json_integer_value(json_object_get(jt, "r"));
    t->pat_since = json_integer_value(json_array_get(pat, 1));
    if (json_dbl(json_object_get(jt, "best"), &t->best) != 0 ||
        json_dbl(json_array_get(pat, 0), &t->pat_best) != 0 ||
        json_dbl(json_object_get(jt, "m"), &t->m) != 0 ||
        (json_object_get(jt, "time") != NULL &&
         (json_dbl(json_object_get(jt, "time"), &t->time) != 0 || !isfinite(t->time) ||
          t->time < 0)))
        return kd_seterr(err, KD_ECORRUPT, "snapshot.trials[%zu]: malformed numbers", i);
    return 0;
}

int kd_searcher_restore(const json_t *snap, struct kd_searcher **out, char *err)
{
    struct kd_searcher *s = NULL;
    uint64_t seed = 0;
    const json_t *rng = json_object_get(snap, "rng");
    const json_t *trials = json_object_get(snap, "trials");
    const json_t *counts = json_object_get(snap, "counts");
    const json_t *v;
    size_t i;
    int rc = 0;
    *out = NULL;
    if (!json_is_object(snap) || !json_is_string(json_object_get(snap, "format")) ||
        strcmp(json_string_value(json_object_get(snap, "format")), "kdet-searcher/1") != 0) {
        rc = kd_seterr(err, KD_EINVAL, "snapshot.format: expected \"kdet-searcher/1\"");
        goto out;
    }
    if (kd__json_u64(json_object_get(snap, "experiment_seed"), &seed) != 0) {
        rc = kd_seterr(err, KD_ECORRUPT, "snapshot.experiment_seed: expected 16 hex digits");
        goto out;
    }
    if ((rc = searcher_build(json_object_get(snap, "config"), seed, &s, err)) != 0)
        goto out;
    if (!json_is_array(rng) || json_array_size(rng) != 4 || !json_is_array(trials) ||
        !json_is_array(counts) || json_array_size(counts) != 4) {
        rc = kd_seterr(err, KD_ECORRUPT, "snapshot: rng, trials or counts malformed");
        goto out;
    }
    for (i = 0; i < 4; i++) {
        if (kd__json_u64(json_array_get(rng, i), &s->rng.s[i]) != 0) {
            rc = kd_seterr(err, KD_ECORRUPT, "snapshot.rng[%zu]: expected 16 hex digits", i);
            goto out;
        }
    }
    s->initialized = json_is_true(json_object_get(snap, "initialized"));
    s->shutdown = json_is_true(json_object_get(snap, "shutdown"));
    s->nfinished = json_integer_value(json_array_get(counts, 0));
    s->nexited = json_integer_value(json_array_get(counts, 1));
    s->nerrored = json_integer_value(json_array_get(counts, 2));
    s->ninvalid = json_integer_value(json_array_get(counts, 3));
    json_array_foreach(trials, i, v)
    {
        if ((rc = restore_trial(s, v, i, err)) != 0)
            goto out;
    }
    if (s->m->restore && (rc = s->m->restore(s, json_object_get(snap, "method"), err)) != 0)
        goto out;
    *out = s;
    s = NULL;
out:
    kd_searcher_free(s);
    return rc;
}
