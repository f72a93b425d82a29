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
    if ((rc = kd__need_max_length(s, err)) != 0)
        return rc;
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

static void mfree(struct kd_searcher *s)
{
    free(s->mstate);
}

static int initial(struct kd_searcher *s)
{
    return kd__simple_fill(s, s->mstate);
}

static int finished(struct kd_searcher *s, struct kd__trial *t)
{
    return kd__simple_finished(s, s->mstate, t);
}

static double progress(const struct kd_searcher *s)
{
    return kd__simple_progress(s, s->mstate);
}

static json_t *snapshot(const struct kd_searcher *s)
{
    return kd__simple_snapshot(s->mstate);
}

static int restore(struct kd_searcher *s, const json_t *st, char *err)
{
    return kd__simple_restore(s->mstate, st, err);
}

const struct kd__method kd__grid = {
    .name = "grid",
    .init = init,
    .free = mfree,
    .initial = initial,
    .validated = kd__simple_validated,
    .finished = finished,
    .progress = progress,
    .snapshot = snapshot,
    .restore = restore,
};
