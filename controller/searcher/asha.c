/*
 * adaptive_asha, Determined's default searcher: several brackets of
 * asynchronous successive halving (Li et al., "A System for Massively
 * Parallel Hyperparameter Tuning", MLSys 2020) run side by side. The
 * bracket and rung arithmetic follows Determined's adaptive_asha; it is
 * spelled out in docs/searchers.md.
 *
 * Two ways to climb the rungs. With max_length, rungs are lengths: each
 * trial is told to train to its rung (ValidateAfter) and waits there to be
 * promoted. With time_metric and max_time (Determined 0.38), rungs are
 * values of a reported validation metric: trials train on their own (one
 * open operation), every validation says how far they got, and a trial that
 * reaches a rung either goes on or is stopped there (a Close, which its
 * workers see as preemption).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "searcher/searcher_int.h"

#define MAX_RUNGS 32

struct entry {
    int64_t trial;
    double loss;
    bool promoted;
};

struct rung {
    int64_t units; /* total length a trial has trained when it validates in this rung */
    int64_t outstanding;
    struct entry *e; /* sorted by loss, ties in arrival order */
    size_t n, cap;
};

struct bracket {
    int nrungs;
    int64_t max_trials;
    int64_t max_conc;
    int64_t created;
    int64_t completed;
    struct rung rungs[MAX_RUNGS];
};

struct asha {
    double divisor;
    bool timed; /* rungs in searcher.time_metric's values, not lengths */
    int nb;
    struct bracket *b;
};

static int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* int(log(x)/log(d)) + 1, with a little slack so exact powers are not lost to rounding. */
static int log_rungs(double x, double d)
{
    return (int)floor(log(x) / log(d) + 1e-9) + 1;
}

static int cmp_desc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return y - x;
}

static int init(struct kd_searcher *s, const json_t *sc, char *err)
{
    static const char *const modes[] = {"aggressive", "standard", "conservative", NULL};
    struct asha *a = NULL;
    int64_t max_rungs = 5;
    double divisor = 4;
    int brackets[MAX_RUNGS];
    int nb = 0;
    const char *mode = "standard";
    const json_t *v;
    int rc = 0;
    if ((rc = kd__need_max_length(s, err)) != 0)
        goto out;
    if (s->max_trials <= 0) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.max_trials: required by adaptive_asha");
        goto out;
    }
    if ((rc = kd__get_int(sc, "max_rungs", "searcher", false, 1, &max_rungs, err)) != 0 ||
        (rc = kd__get_num(sc, "divisor", "searcher", false, &divisor, err)) != 0)
        goto out;
    if (divisor <= 1) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.divisor: must be greater than 1, got %g", divisor);
        goto out;
    }
    if (max_rungs > MAX_RUNGS) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.max_rungs: at most %d", MAX_RUNGS);
        goto out;
    }
    v = json_object_get(sc, "mode");
    if (v && !json_is_null(v)) {
        mode = json_string_value(v);
        bool ok = false;
        for (int i = 0; mode && modes[i]; i++)
            ok = ok || strcmp(mode, modes[i]) == 0;
        if (!ok) {
            const char *sug = mode ? kd_suggest(mode, modes) : NULL;
            rc = kd_seterr(err, KD_EINVAL,
                           "searcher.mode: expected aggressive, standard or conservative%s%s%s",
                           sug ? "; did you mean `" : "", sug ? sug : "", sug ? "`?" : "");
            goto out;
        }
    }
    v = json_object_get(sc, "bracket_rungs");
    if (json_is_array(v) && json_array_size(v) > 0) {
        size_t i;
        const json_t *e;
        if (json_array_size(v) > MAX_RUNGS) {
            rc =
                kd_seterr(err, KD_EINVAL, "searcher.bracket_rungs: at most %d brackets", MAX_RUNGS);
            goto out;
        }
        json_array_foreach(v, i, e)
        {
            if (!json_is_integer(e) || json_integer_value(e) < 1 ||
                json_integer_value(e) > MAX_RUNGS) {
                rc = kd_seterr(err, KD_EINVAL,
                               "searcher.bracket_rungs[%zu]: expected an integer in 1..%d", i,
                               MAX_RUNGS);
                goto out;
            }
            brackets[nb++] = (int)json_integer_value(e);
        }
    } else {
        int mr = (int)max_rungs;
        mr = (int)imin(mr, log_rungs((double)s->max_length, divisor));
        mr = (int)imin(mr, log_rungs((double)s->max_trials, divisor));
        if (strcmp(mode, "aggressive") == 0) {
            brackets[nb++] = mr;
        } else {
            int lo = strcmp(mode, "standard") == 0 ? (mr - 1) / 2 + 1 : 1;
            for (int r = lo; r <= mr; r++)
                brackets[nb++] = r;
        }
    }
    /* brackets with more rungs (more early stopping) first */
    qsort(brackets, (size_t)nb, sizeof(int), cmp_desc);
    a = kd_xcalloc(1, sizeof(*a));
    a->divisor = divisor;
    a->timed = s->time_metric[0] != '\0';
    a->nb = nb;
    a->b = kd_xcalloc((size_t)nb, sizeof(*a->b));
    /* Trials per bracket: roughly equal total budget per bracket (weight d^(r-1)/r). */
    double w[MAX_RUNGS], tw = 0;
    int64_t alloc = 0;
    for (int i = 0; i < nb; i++) {
        w[i] = pow(divisor, brackets[i] - 1) / brackets[i];
        tw += w[i];
    }
    for (int i = 0; i < nb; i++) {
        a->b[i].nrungs = brackets[i];
        a->b[i].max_trials = imax((int64_t)(w[i] / tw * (double)s->max_trials), 1);
        alloc += a->b[i].max_trials;
    }
    a->b[0].max_trials += imax(s->max_trials - alloc, 0);
    /* Concurrency per bracket: max_concurrent_trials split evenly, the remainder to the
     * first brackets; 0 means max(trials of the last bracket, divisor). */
    {
        int64_t mc = s->max_concurrent, per, rem = 0;
        if (mc == 0) {
            per = imax(a->b[nb - 1].max_trials, (int64_t)divisor);
        } else {
            mc = imax(mc, nb);
            per = mc / nb;
            rem = mc % nb;
        }
        for (int i = 0; i < nb; i++)
            a->b[i].max_conc = per + (i < rem ? 1 : 0);
    }
    for (int i = 0; i < nb; i++) {
        struct bracket *b = &a->b[i];
        for (int r = 0; r < b->nrungs; r++) {
            double down = pow(divisor, b->nrungs - r - 1);
            b->rungs[r].units = imax((int64_t)((double)s->max_length / down), 1);
        }
    }
    s->mstate = a;
out:
    return rc;
}

static void mfree(struct kd_searcher *s)
{
    struct asha *a = s->mstate;
    for (int i = 0; i < a->nb; i++)
        for (int r = 0; r < a->b[i].nrungs; r++)
            free(a->b[i].rungs[r].e);
    free(a->b);
    free(a);
}

static void create_in(struct kd_searcher *s, int bi)
{
    struct asha *a = s->mstate;
    struct bracket *b = &a->b[bi];
    double *x = kd_xcalloc(s->sp->n ? s->sp->n : 1, sizeof(double));
    kd_hp_sample(s->sp, &s->rng, x);
    struct kd__trial *t = kd__create(s, x, -1, NULL);
    free(x);
    t->b = bi;
    t->r = 0;
    b->created++;
    if (a->timed) {
        /* Trained "until the code ends it"; its validations' time values climb the rungs. */
        kd__validate_after(s, t, KD_SEARCH_OPEN_LENGTH);
        return;
    }
    t->outstanding = true;
    b->rungs[0].outstanding++;
    kd__validate_after(s, t, b->rungs[0].units);
}

static int initial(struct kd_searcher *s)
{
    struct asha *a = s->mstate;
    for (int i = 0; i < a->nb; i++) {
        int64_t n = imin(a->b[i].max_conc, a->b[i].max_trials);
        for (int64_t k = 0; k < n; k++)
            create_in(s, i);
    }
    return 0;
}

/* Insert (trial, loss) in rung r, after entries with an equal loss; returns its index. */
static size_t rung_insert(struct rung *r, int64_t trial, double loss)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) { /* first entry with loss > new loss */
        size_t mid = (lo + hi) / 2;
        if (r->e[mid].loss > loss)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->e = kd_xrealloc(r->e, r->cap * sizeof(*r->e));
    }
    memmove(&r->e[lo + 1], &r->e[lo], (r->n - lo) * sizeof(*r->e));
    r->n++;
    r->e[lo] = (struct entry){trial, loss, false};
    return lo;
}

/*
 * Record `loss` in rung r and return the trial to promote, or -1: with n
 * results the best floor(n / divisor) deserve promotion; the new result is
 * promoted at once if it ranks among them, otherwise the count may have
 * grown by one and the trial at that rank is promoted if it was not yet.
 */
static int64_t rung_add(struct rung *r, int64_t trial, double loss, double divisor, size_t *rank)
{
    int64_t old = (int64_t)((double)r->n / divisor);
    int64_t now = (int64_t)((double)(r->n + 1) / divisor);
    size_t lo = rung_insert(r, trial, loss);
    bool promote_now = (int64_t)lo < now;
    r->e[lo].promoted = promote_now;
    if (promote_now) {
        *rank = lo + 1;
        return trial;
    }
    if (now != old && !r->e[old].promoted) {
        r->e[old].promoted = true;
        *rank = (size_t)old + 1;
        return r->e[old].trial;
    }
    return -1;
}

static void close_out(struct kd_searcher *s, struct bracket *b)
{
    char why[160];
    for (int ri = 0; ri < b->nrungs; ri++) {
        struct rung *r = &b->rungs[ri];
        if (r->outstanding > 0)
            break;
        for (size_t k = 0; k < r->n; k++) {
            struct kd__trial *t = &s->trials[r->e[k].trial];
            if (!r->e[k].promoted && kd__alive(t)) {
                snprintf(why, sizeof(why),
                         "not promoted: rank %zu of %zu in rung %d (length %" PRId64 ")", k + 1,
                         r->n, ri, r->units);
                kd__close(s, t, why);
            }
        }
    }
}

static void promote(struct kd_searcher *s, struct kd__trial *t, double loss)
{
    struct asha *a = s->mstate;
    struct bracket *b = &a->b[t->b];
    int ri = (int)t->r;
    struct rung *r = &b->rungs[ri];
    bool added = false;
    if (t->outstanding) {
        r->outstanding--;
        t->outstanding = false;
    }
    if (ri == b->nrungs - 1) {
        kd__close(s, t, "completed the top rung");
    } else {
        size_t rank = 0;
        int64_t p = rung_add(r, t - s->trials, loss, a->divisor, &rank);
        if (p >= 0) {
            struct kd__trial *pt = &s->trials[p];
            struct rung *next = &b->rungs[ri + 1];
            pt->r = ri + 1;
            pt->outstanding = true;
            next->outstanding++;
            if (kd__alive(pt)) {
                char why[160];
                snprintf(why, sizeof(why),
                         "promoted to rung %d: rank %zu of %zu in rung %d, top %" PRId64 " go on",
                         ri + 1, rank, r->n, ri, (int64_t)((double)r->n / a->divisor));
                kd__validate_after_why(s, pt, next->units, why);
                added = true;
            } else {
                /* promoted but gone: acts as if it reported the worst result */
                promote(s, pt, KD__WORST);
                return;
            }
        }
    }
    if (!added && b->created < b->max_trials)
        create_in(s, (int)t->b);
    if ((int64_t)b->rungs[0].n == b->max_trials)
        close_out(s, b);
}

static int validated(struct kd_searcher *s, struct kd__trial *t, double loss)
{
    promote(s, t, loss);
    return 0;
}

/*
 * A validation of a time-metric search: the trial reached `time` of time_metric. For each rung
 * of its bracket it reaches and has not been judged in yet (a validation can jump over
 * several), its result joins the rung; with n results there, the best max(floor(n / divisor),
 * 1) go on (so the first to reach a rung always does) and a trial ranked below them is stopped.
 * The top rung is max_time: reaching it completes the trial. Nothing waits for promotion, and a
 * judgement is never revised, as in Determined's stopping variant of ASHA.
 */
static int timed(struct kd_searcher *s, struct kd__trial *t, double loss, double time)
{
    struct asha *a = s->mstate;
    struct bracket *b = &a->b[t->b];
    char why[256];
    while (kd__alive(t) && t->r < b->nrungs && time >= (double)b->rungs[t->r].units) {
        int ri = (int)t->r;
        struct rung *r = &b->rungs[ri];
        size_t k = rung_insert(r, t - s->trials, loss);
        int64_t go = imax((int64_t)((double)r->n / a->divisor), 1);
        if (ri == b->nrungs - 1) {
            r->e[k].promoted = true;
            snprintf(why, sizeof(why),
                     "completed the top rung: %s reached %.17g (max_time %" PRId64 ")",
                     s->time_metric, time, r->units);
            kd__close(s, t, why);
        } else if ((int64_t)k >= go) {
            snprintf(why, sizeof(why),
                     "stopped in rung %d: rank %zu of %zu at %s %" PRId64 ", top %" PRId64 " go on",
                     ri, k + 1, r->n, s->time_metric, r->units, go);
            kd__close(s, t, why);
        } else {
            r->e[k].promoted = true;
            t->r = ri + 1;
            snprintf(why, sizeof(why),
                     "promoted to rung %d: rank %zu of %zu in rung %d at %s %" PRId64
                     ", top %" PRId64 " go on",
                     ri + 1, k + 1, r->n, ri, s->time_metric, r->units, go);
            kd__validate_after_why(s, t, KD_SEARCH_OPEN_LENGTH, why);
        }
    }
    return 0;
}

static int finished(struct kd_searcher *s, struct kd__trial *t)
{
    struct asha *a = s->mstate;
    struct bracket *b = &a->b[t->b];
    b->completed++;
    if (a->timed) {
        /* A trial stopped, completed or gone: its place goes to the next one. */
        if (b->created < b->max_trials)
            create_in(s, (int)t->b);
    } else if (t->outstanding) {
        promote(s, t, KD__WORST);
    }
    for (int i = 0; i < a->nb; i++)
        if (a->b[i].created < a->b[i].max_trials)
            return 0;
    if (kd__nalive(s) == 0) {
        char why[128];
        snprintf(why, sizeof(why), "all %" PRId64 " trials finished", s->max_trials);
        kd__shutdown(s, why, false);
    }
    return 0;
}

static double progress(const struct kd_searcher *s)
{
    const struct asha *a = s->mstate;
    double sum = 0, tot = 0;
    if (a->timed) {
        /* Each trial counts by how far its time metric got toward max_time; finished: 1. */
        for (int i = 0; i < a->nb; i++)
            tot += (double)a->b[i].max_trials;
        for (size_t i = 0; i < s->ntrials; i++) {
            const struct kd__trial *t = &s->trials[i];
            sum += !kd__alive(t) ? 1.0 : fmin(1.0, t->time / (double)s->max_length);
        }
        return tot > 0 ? sum / tot : 0;
    }
    for (int i = 0; i < a->nb; i++) {
        const struct bracket *b = &a->b[i];
        double mt = (double)b->max_trials;
        double p = (double)b->rungs[0].n / (1.2 * mt);
        if ((int64_t)b->rungs[0].n == b->max_trials)
            p = fmax(p, (double)b->completed / mt);
        sum += p * mt;
        tot += mt;
    }
    return tot > 0 ? sum / tot : 0;
}

static json_t *snapshot(const struct kd_searcher *s)
{
    const struct asha *a = s->mstate;
    json_t *bs = json_array();
    for (int i = 0; i < a->nb; i++) {
        const struct bracket *b = &a->b[i];
        json_t *rs = json_array();
        for (int ri = 0; ri < b->nrungs; ri++) {
            const struct rung *r = &b->rungs[ri];
            json_t *es = json_array();
            for (size_t k = 0; k < r->n; k++)
                json_array_append_new(es, json_pack("[Ifb]", (json_int_t)r->e[k].trial,
                                                    r->e[k].loss, r->e[k].promoted));
            json_array_append_new(
                rs, json_pack("{sIso}", "outstanding", (json_int_t)r->outstanding, "entries", es));
        }
        json_array_append_new(bs, json_pack("{sIsIso}", "created", (json_int_t)b->created,
                                            "completed", (json_int_t)b->completed, "rungs", rs));
    }
    return json_pack("{so}", "brackets", bs);
}

static int restore(struct kd_searcher *s, const json_t *st, char *err)
{
    struct asha *a = s->mstate;
    const json_t *bs = json_object_get(st, "brackets");
    if (!json_is_array(bs) || json_array_size(bs) != (size_t)a->nb)
        return kd_seterr(err, KD_ECORRUPT, "snapshot.method.brackets: expected %d brackets", a->nb);
    for (int i = 0; i < a->nb; i++) {
        struct bracket *b = &a->b[i];
        const json_t *jb = json_array_get(bs, (size_t)i);
        const json_t *rs = json_object_get(jb, "rungs");
        if (!json_is_array(rs) || json_array_size(rs) != (size_t)b->nrungs)
            return kd_seterr(err, KD_ECORRUPT, "snapshot.method.brackets[%d]: malformed", i);
        b->created = json_integer_value(json_object_get(jb, "created"));
        b->completed = json_integer_value(json_object_get(jb, "completed"));
        for (int ri = 0; ri < b->nrungs; ri++) {
            struct rung *r = &b->rungs[ri];
            const json_t *jr = json_array_get(rs, (size_t)ri);
            const json_t *es = json_object_get(jr, "entries");
            const json_t *e;
            size_t k;
            r->outstanding = json_integer_value(json_object_get(jr, "outstanding"));
            if (!json_is_array(es))
                return kd_seterr(err, KD_ECORRUPT,
                                 "snapshot.method.brackets[%d].rungs[%d]: malformed", i, ri);
            r->cap = json_array_size(es) + 1;
            r->e = kd_xcalloc(r->cap, sizeof(*r->e));
            json_array_foreach(es, k, e)
            {
                json_int_t tr = json_integer_value(json_array_get(e, 0));
                if (tr < 0 || (size_t)tr >= s->ntrials || !json_is_number(json_array_get(e, 1)))
                    return kd_seterr(err, KD_ECORRUPT,
                                     "snapshot.method.brackets[%d].rungs[%d].entries[%zu]: "
                                     "malformed",
                                     i, ri, k);
                r->e[k] = (struct entry){tr, json_number_value(json_array_get(e, 1)),
                                         json_is_true(json_array_get(e, 2))};
            }
            r->n = json_array_size(es);
        }
    }
    for (size_t i = 0; i < s->ntrials; i++) {
        const struct kd__trial *t = &s->trials[i];
        if (t->b < 0 || t->b >= a->nb || t->r < 0 || t->r >= a->b[t->b].nrungs)
            return kd_seterr(err, KD_ECORRUPT,
                             "snapshot.trials[%zu]: bracket %" PRId64 " / rung %" PRId64
                             " out of range",
                             i, t->b, t->r);
    }
    return 0;
}

const struct kd__method kd__asha = {
    .name = "adaptive_asha",
    .init = init,
    .free = mfree,
    .initial = initial,
    .validated = validated,
    .timed = timed,
    .finished = finished,
    .progress = progress,
    .snapshot = snapshot,
    .restore = restore,
};
