/*
 * The random searcher: max_trials trials with hyperparameters drawn uniformly (kd_hp_sample), at
 * most max_concurrent_trials at once, each trained to max_length.
 */
#include <stdlib.h>

#include "core/alloc.h"
#include "searcher/searcher_int.h"

static void propose(struct kd_searcher *s, int64_t idx, double *x)
{
    (void)idx;
    kd_hp_sample(s->sp, &s->rng, x);
}

static int init(struct kd_searcher *s, const json_t *scfg, char *err)
{
    struct kd__simple *d = NULL;
    (void)scfg;
    /* no max_length: one open operation (KD_SEARCH_OPEN_LENGTH) */
    if (s->max_trials <= 0)
        return kd_seterr(err, KD_EINVAL, "searcher.max_trials: required by the random searcher");
    d = kd_xcalloc(1, sizeof(*d));
    d->total = s->max_trials;
    d->propose = propose;
    d->redraw_invalid = true;
    s->mstate = d;
    return 0;
}

const struct kd__method kd__random = {
    .name = "random",
    .init = init,
    .free = kd__simple_free,
    .initial = kd__simple_initial,
    .validated = kd__simple_validated,
    .finished = kd__simple_finished,
    .progress = kd__simple_progress,
    .snapshot = kd__simple_snapshot,
    .restore = kd__simple_restore,
};
