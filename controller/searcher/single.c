/*
 * The single searcher: one trial, hyperparameters sampled once (a const-only space gives exactly
 * its values), trained to max_length.
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
    (void)err;
    /* no max_length: one open operation (KD_SEARCH_OPEN_LENGTH) */

    d = kd_xcalloc(1, sizeof(*d));
    d->total = 1;
    d->propose = propose;
    d->redraw_invalid = false;
    s->mstate = d;
    return 0;
}

const struct kd__method kd__single = {
    .name = "single",
    .init = init,
    .free = kd__simple_free,
    .initial = kd__simple_initial,
    .validated = kd__simple_validated,
    .finished = kd__simple_finished,
    .progress = kd__simple_progress,
    .snapshot = kd__simple_snapshot,
    .restore = kd__simple_restore,
};
