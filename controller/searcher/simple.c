/*
 * The driver shared by single, grid, random and bayesian: each trial trains
 * to max_length, validates once and is closed; at most max_concurrent_trials
 * run at once; the next point comes from the method's propose(). Its entry
 * points have the method signatures, so those methods' tables name them
 * directly: their state (s->mstate) is, or begins with, a struct kd__simple.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "searcher/searcher_int.h"

static int fill(struct kd_searcher *s, struct kd__simple *d)
{
    int64_t conc = s->max_concurrent > 0 ? s->max_concurrent : 16;
    double *x = kd_xcalloc(s->sp->n ? s->sp->n : 1, sizeof(double));
    while (!s->shutdown && d->counted < d->total && kd__nalive(s) < conc) {
        d->propose(s, d->drawn, x);
        d->drawn++;
        d->counted++;
        struct kd__trial *t = kd__create(s, x, -1, NULL);
        kd__validate_after(s, t, s->max_length > 0 ? s->max_length : KD_SEARCH_OPEN_LENGTH);
    }
    free(x);
    if (!s->shutdown && d->counted >= d->total && kd__nalive(s) == 0) {
        char why[128];
        snprintf(why, sizeof(why), "all %" PRId64 " trials finished", d->total);
        kd__shutdown(s, why, false);
    }
    return 0;
}

int kd__simple_validated(struct kd_searcher *s, struct kd__trial *t, double loss)
{
    (void)loss;
    kd__close(s, t, "reached max_length");
    return 0;
}

int kd__simple_initial(struct kd_searcher *s)
{
    return fill(s, s->mstate);
}

int kd__simple_finished(struct kd_searcher *s, struct kd__trial *t)
{
    struct kd__simple *d = s->mstate;
    /* A trial whose hyperparameters were invalid does not count: draw another, up to a limit. */
    if (t->exited && t->exit_reason == KD_SEARCH_EXIT_INVALID_HP && d->redraw_invalid) {
        if (s->ninvalid > d->total + 100) {
            kd__shutdown(s, "too many trials exited with invalid hyperparameters", true);
            return 0;
        }
        d->counted--;
    }
    return fill(s, d);
}

double kd__simple_progress(const struct kd_searcher *s)
{
    const struct kd__simple *d = s->mstate;
    double done = 0;
    for (size_t i = 0; i < s->ntrials; i++) {
        const struct kd__trial *t = &s->trials[i];
        if (t->finished || t->closing)
            done += 1;
        else if (s->max_length > 0)
            done += fmin(1.0, (double)t->last_len / (double)s->max_length);
    }
    return d->total > 0 ? done / (double)d->total : 0;
}

json_t *kd__simple_snapshot(const struct kd_searcher *s)
{
    const struct kd__simple *d = s->mstate;
    return json_pack("{sIsI}", "counted", (json_int_t)d->counted, "drawn", (json_int_t)d->drawn);
}

int kd__simple_restore(struct kd_searcher *s, const json_t *st, char *err)
{
    struct kd__simple *d = s->mstate;
    if (!json_is_integer(json_object_get(st, "counted")) ||
        !json_is_integer(json_object_get(st, "drawn")))
        return kd_seterr(err, KD_ECORRUPT, "snapshot.method: expected counted and drawn");
    d->counted = json_integer_value(json_object_get(st, "counted"));
    d->drawn = json_integer_value(json_object_get(st, "drawn"));
    return 0;
}

void kd__simple_free(struct kd_searcher *s)
{
    free(s->mstate);
}

int kd__need_max_length(const struct kd_searcher *s, char *err)
{
    if (s->max_length <= 0)
        return kd_seterr(err, KD_EINVAL,
                         "searcher.max_length: required by the %s searcher ({batches|records|"
                         "epochs: N})",
                         s->m->name);
    return 0;
}
