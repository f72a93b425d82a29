/*
 * Early-stopping rules (searcher.early_stopping), evaluated after every
 * validation of a live trial: patience, threshold (optionally ending the
 * experiment) and the median stopping rule. Each decision becomes a Close
 * (or Shutdown) whose reason says which rule fired and why, and is logged.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "searcher/searcher_int.h"

static const char *const RULE_NAMES[] = {"patience", "threshold", "median", NULL};

static int check_keys(const json_t *o, const char *path, const char *const *allowed, char *err)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        bool ok = false;
        for (int i = 0; allowed[i]; i++)
            ok = ok || strcmp(k, allowed[i]) == 0;
        if (!ok) {
            const char *sug = kd_suggest(k, allowed);
            return kd_seterr(err, KD_EINVAL, "%s.%s: unknown field%s%s%s", path, k,
                             sug ? "; did you mean `" : "", sug ? sug : "", sug ? "`?" : "");
        }
    }
    return 0;
}

int kd__rules_parse(struct kd_searcher *s, const json_t *list, char *err)
{
    static const char *const k_pat[] = {"type", "patience", "min_delta", NULL};
    static const char *const k_thr[] = {"type", "threshold", "end_experiment", NULL};
    static const char *const k_med[] = {"type", "grace_period", "min_trials", NULL};
    const json_t *item;
    size_t i;
    bool seen[3] = {false, false, false};
    int rc = 0;
    if (!json_is_array(list)) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.early_stopping: expected a list of rules");
        goto out;
    }
    if (json_array_size(list) > KD_SEARCH_MAX_RULES) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.early_stopping: at most %d rules",
                       KD_SEARCH_MAX_RULES);
        goto out;
    }
    json_array_foreach(list, i, item)
    {
        char path[64];
        struct kd__rule *r = &s->rules[s->nrules];
        const char *type = json_string_value(json_object_get(item, "type"));
        snprintf(path, sizeof(path), "searcher.early_stopping[%zu]", i);
        memset(r, 0, sizeof(*r));
        if (!json_is_object(item) || !type) {
            rc = kd_seterr(err, KD_EINVAL, "%s.type: required (patience, threshold or median)",
                           path);
            goto out;
        }
        if (strcmp(type, "patience") == 0) {
            r->type = KD__RULE_PATIENCE;
            if ((rc = check_keys(item, path, k_pat, err)) != 0 ||
                (rc = kd__get_int(item, "patience", path, true, 1, &r->patience, err)) != 0 ||
                (rc = kd__get_num(item, "min_delta", path, false, &r->min_delta, err)) != 0)
                goto out;
            if (r->min_delta < 0) {
                rc = kd_seterr(err, KD_EINVAL, "%s.min_delta: must be >= 0, got %g", path,
                               r->min_delta);
                goto out;
            }
        } else if (strcmp(type, "threshold") == 0) {
            const json_t *e = json_object_get(item, "end_experiment");
            r->type = KD__RULE_THRESHOLD;
            if ((rc = check_keys(item, path, k_thr, err)) != 0 ||
                (rc = kd__get_num(item, "threshold", path, true, &r->threshold_raw, err)) != 0)
                goto out;
            if (e && !json_is_null(e) && !json_is_boolean(e)) {
                rc = kd_seterr(err, KD_EINVAL, "%s.end_experiment: expected true or false", path);
                goto out;
            }
            r->end_experiment = json_is_true(e);
            r->threshold = s->smaller_is_better ? r->threshold_raw : -r->threshold_raw;
        } else if (strcmp(type, "median") == 0) {
            r->type = KD__RULE_MEDIAN;
            r->min_trials = 3;
            if ((rc = check_keys(item, path, k_med, err)) != 0 ||
                (rc = kd__get_int(item, "grace_period", path, false, 0, &r->grace_period, err)) !=
                    0 ||
                (rc = kd__get_int(item, "min_trials", path, false, 1, &r->min_trials, err)) != 0)
                goto out;
        } else {
            const char *sug = kd_suggest(type, RULE_NAMES);
            rc = kd_seterr(err, KD_EINVAL,
                           "%s.type: unknown rule \"%.64s\"%s%s%s (patience, threshold or median)",
                           path, type, sug ? "; did you mean `" : "", sug ? sug : "",
                           sug ? "`?" : "");
            goto out;
        }
        if (seen[r->type]) {
            rc = kd_seterr(err, KD_EINVAL, "%s: a second %s rule; give each type at most once",
                           path, RULE_NAMES[r->type]);
            goto out;
        }
        seen[r->type] = true;
        s->nrules++;
    }
out:
    return rc;
}

/* The user's view of an internal loss. */
static double raw(const struct kd_searcher *s, double loss)
{
    return s->smaller_is_better ? loss : -loss;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the other trials' running averages at length L; count in *n. */
static double median_at(const struct kd_searcher *s, const struct kd__trial *self, int64_t L,
                        size_t *n)
{
    double *avg = kd_xmalloc((s->ntrials + 1) * sizeof(double));
    double med = 0;
    size_t m = 0;
    for (size_t i = 0; i < s->ntrials; i++) {
        const struct kd__trial *o = &s->trials[i];
        if (o == self || o->nhist == 0 || o->hlen[o->nhist - 1] < L)
            continue;
        double sum = 0;
        size_t k = 0;
        for (; k < o->nhist && o->hlen[k] <= L; k++)
            sum += o->hloss[k];
        if (k > 0)
            avg[m++] = sum / (double)k;
    }
    if (m > 0) {
        qsort(avg, m, sizeof(double), cmp_double);
        med = m % 2 ? avg[m / 2] : (avg[m / 2 - 1] + avg[m / 2]) / 2.0;
    }
    free(avg);
    *n = m;
    return med;
}

static void stop(struct kd_searcher *s, struct kd__trial *t, const char *rule, const char *why)
{
    KD_INFO("early stop", "trial=%s rule=%s reason=%s", t->id, rule, kd_logq(why));
    kd__close(s, t, why);
}

void kd__rules_eval(struct kd_searcher *s, struct kd__trial *t)
{
    double loss = t->last;
    char why[512];
    for (size_t i = 0; i < s->nrules && kd__alive(t) && !s->shutdown; i++) {
        const struct kd__rule *r = &s->rules[i];
        switch (r->type) {
        case KD__RULE_PATIENCE:
            if (t->nhist == 1 || loss < t->pat_best - r->min_delta) {
                t->pat_best = loss < t->pat_best ? loss : t->pat_best;
                t->pat_since = 0;
            } else {
                t->pat_since++;
            }
            if (t->pat_since >= r->patience) {
                snprintf(why, sizeof(why),
                         "early stopping (patience): %s did not improve by at least %g in %" PRId64
                         " validations (best %g)",
                         s->metric, r->min_delta, t->pat_since, raw(s, t->pat_best));
                stop(s, t, "patience", why);
            }
            break;
        case KD__RULE_THRESHOLD:
            if (loss < r->threshold) {
                snprintf(why, sizeof(why),
                         "early stopping (threshold): %s %g is better than the threshold %g at "
                         "length %" PRId64 "%s",
                         s->metric, raw(s, loss), r->threshold_raw, t->last_len,
                         r->end_experiment ? "; end_experiment is set" : "");
                stop(s, t, "threshold", why);
                if (r->end_experiment)
                    kd__shutdown(s, why, false);
            }
            break;
        case KD__RULE_MEDIAN: {
            size_t n = 0;
            double med;
            if (t->last_len < r->grace_period)
                break;
            med = median_at(s, t, t->last_len, &n);
            if ((int64_t)n >= r->min_trials && t->best > med) {
                snprintf(why, sizeof(why),
                         "early stopping (median): best %s %g is worse than the median %g of %zu "
                         "other trials' running averages at length %" PRId64,
                         s->metric, raw(s, t->best), raw(s, med), n, t->last_len);
                stop(s, t, "median", why);
            }
            break;
        }
        }
    }
}
