/*
 * Checkpoint GC decisions with Determined's semantics (see gc.h and
 * docs/checkpoints.md): rank checkpoints with a metric over the whole
 * experiment and within each trial, rank all checkpoints of a trial by
 * steps, keep the union of the three top-N sets, plus resume points and
 * protected checkpoints.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/str.h"
#include "storage/gc.h"

void kd_gc_policy_default(struct kd_gc_policy *p)
{
    p->save_experiment_best = 0;
    p->save_trial_best = 1;
    p->save_trial_latest = 1;
    p->smaller_is_better = 1;
}

struct rank_ctx {
    const struct kd_gc_ckpt *c;
    int smaller_is_better;
};

/* qsort has no context argument; sort index records that carry it. */
struct idx {
    size_t i;
    const struct rank_ctx *ctx;
};

static int has_metric(const struct kd_gc_ckpt *c)
{
    return c->has_metric && !isnan(c->metric);
}

/* Better metric first; ties: fewer steps first, then array order (stable, deterministic). */
static int cmp_best(const void *a, const void *b)
{
    const struct idx *x = a, *y = b;
    const struct kd_gc_ckpt *cx = &x->ctx->c[x->i], *cy = &y->ctx->c[y->i];
    if (cx->metric != cy->metric) {
        int xbetter = x->ctx->smaller_is_better ? cx->metric < cy->metric : cx->metric > cy->metric;
        return xbetter ? -1 : 1;
    }
    if (cx->steps_completed != cy->steps_completed)
        return cx->steps_completed < cy->steps_completed ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* Latest first: most steps, then later in the array. */
static int cmp_latest(const void *a, const void *b)
{
    const struct idx *x = a, *y = b;
    const struct kd_gc_ckpt *cx = &x->ctx->c[x->i], *cy = &y->ctx->c[y->i];
    if (cx->steps_completed != cy->steps_completed)
        return cx->steps_completed > cy->steps_completed ? -1 : 1;
    return x->i > y->i ? -1 : (x->i < y->i);
}

static int cmp_trial(const void *a, const void *b)
{
    const struct idx *x = a, *y = b;
    int c = strcmp(x->ctx->c[x->i].trial_id, y->ctx->c[y->i].trial_id);
    return c != 0 ? c : (x->i < y->i ? -1 : (x->i > y->i));
}

int kd_gc_plan(const struct kd_gc_policy *p, const struct kd_gc_ckpt *ckpts, size_t n,
               kd_gc_protect_fn protect, void *arg, unsigned *keep, char *err)
{
    struct rank_ctx ctx = {ckpts, p->smaller_is_better};
    struct idx *all = NULL, *grp = NULL;
    size_t nm = 0;
    int rc = 0;

    if (p->save_experiment_best < 0 || p->save_trial_best < 0 || p->save_trial_latest < 0) {
        rc = kd_seterr(err, KD_EINVAL, "checkpoint_storage.%s: must be >= 0",
                       p->save_experiment_best < 0 ? "save_experiment_best"
                       : p->save_trial_best < 0    ? "save_trial_best"
                                                   : "save_trial_latest");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (ckpts[i].uuid == NULL || ckpts[i].uuid[0] == '\0' || ckpts[i].trial_id == NULL) {
            rc = kd_seterr(err, KD_EINVAL, "checkpoints[%zu]: %s missing", i,
                           ckpts[i].trial_id == NULL ? "trial_id" : "uuid");
            goto out;
        }
        keep[i] = 0;
    }
    if (n == 0)
        goto out;
    all = calloc(n, sizeof(*all));
    grp = calloc(n, sizeof(*grp));
    if (all == NULL || grp == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "gc: out of memory");
        goto out;
    }
    /* save_experiment_best: the N best checkpoints with a metric, across trials */
    for (size_t i = 0; i < n; i++)
        if (has_metric(&ckpts[i]))
            all[nm++] = (struct idx){i, &ctx};
    qsort(all, nm, sizeof(*all), cmp_best);
    for (size_t k = 0; k < nm && k < (size_t)p->save_experiment_best; k++)
        keep[all[k].i] |= KD_GC_EXPERIMENT_BEST;
    /* per trial: group the checkpoints by trial_id */
    for (size_t i = 0; i < n; i++)
        all[i] = (struct idx){i, &ctx};
    qsort(all, n, sizeof(*all), cmp_trial);
    for (size_t s = 0; s < n;) {
        size_t e = s, ng = 0, latest;
        while (e < n && strcmp(ckpts[all[e].i].trial_id, ckpts[all[s].i].trial_id) == 0)
            e++;
        /* save_trial_latest, and the resume point of a trial that is not finished */
        memcpy(grp, all + s, (e - s) * sizeof(*grp));
        qsort(grp, e - s, sizeof(*grp), cmp_latest);
        latest = grp[0].i;
        for (size_t k = 0; k < e - s && k < (size_t)p->save_trial_latest; k++)
            keep[grp[k].i] |= KD_GC_TRIAL_LATEST;
        if (ckpts[latest].trial_active)
            keep[latest] |= KD_GC_RESUME;
        /* save_trial_best: the trial's N best checkpoints with a metric */
        for (size_t k = s; k < e; k++)
            if (has_metric(&ckpts[all[k].i]))
                grp[ng++] = all[k];
        qsort(grp, ng, sizeof(*grp), cmp_best);
        for (size_t k = 0; k < ng && k < (size_t)p->save_trial_best; k++)
            keep[grp[k].i] |= KD_GC_TRIAL_BEST;
        s = e;
    }
    for (size_t i = 0; i < n; i++)
        if (ckpts[i].protected_ || (protect != NULL && protect(arg, &ckpts[i]) != 0))
            keep[i] |= KD_GC_PROTECTED;
out:
    free(all);
    free(grp);
    return rc;
}

const char *kd_gc_reason(unsigned keep, char *buf, size_t len)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{KD_GC_EXPERIMENT_BEST, "experiment_best"},
                 {KD_GC_TRIAL_BEST, "trial_best"},
                 {KD_GC_TRIAL_LATEST, "trial_latest"},
                 {KD_GC_RESUME, "resume_point"},
                 {KD_GC_PROTECTED, "protected"}};
    size_t off = 0;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    if (keep == 0) {
        kd_strlcpy(buf, "delete", len);
        return buf;
    }
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        if (!(keep & names[k].bit))
            continue;
        int w = snprintf(buf + off, len - off, "%s%s", off ? "," : "", names[k].name);
        if (w < 0 || (size_t)w >= len - off)
            break;
        off += (size_t)w;
    }
    return buf;
}
