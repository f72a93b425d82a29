/*
 * The grid searcher: one trial per point of the grid (kd_hp_grid_size / kd_hp_grid_point, first
 * hyperparameter slowest), at most max_concurrent_trials at once.
 */
#include <stdlib.h>

#include "core/alloc.h"
#include "searcher/searcher_int.h"

static void propose(struct kd_searcher *s, int64_t idx, double *x)
{
    kd_hp_grid_point(s->sp, (uint64_t)idx, x);
}

static int init(struct kd_searcher *s, const json_t *scfg, char *err)
{
    struct kd__simple *d = NULL;
    int rc;
    (void)scfg;
    /* no max_length: one open operation (KD_SEARCH_OPEN_LENGTH) */
    uint64_t n = 0;
    if ((rc = kd_hp_grid_size(s->sp, &n, err)) != 0)
        return rc;
    d = kd_xcalloc(1, sizeof(*d));
    d->total = (int64_t)n;
    d->propose = propose;
    d->redraw_invalid = false;
    s->mstate = d;
    return 0;
}

const struct kd__method kd__grid = {
    .name = "grid",
    .init = init,
    .free = kd__simple_free,
    .initial = kd__simple_initial,
    .validated = kd__simple_validated,
    .finished = kd__simple_finished,
    .progress = kd__simple_progress,
    .snapshot = kd__simple_snapshot,
    .restore = kd__simple_restore,
};
