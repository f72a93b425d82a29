/*
 * Population-based training (Jaderberg et al., 2017) as Determined ran it:
 * a population trains in rounds of length_per_round; after each round the
 * worst truncate_fraction are closed and replaced by children of the best
 * truncate_fraction, whose hyperparameters are explored (resampled or
 * perturbed) and who start from their parent's checkpoint (the Create
 * names the parent).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "searcher/searcher_int.h"

struct pbt {
    int64_t population;
    int64_t rounds;
    int64_t per_round;
    double truncate;
    double resample;
    double perturb;
    int64_t round;    /* rounds completed */
    int64_t *members; /* trial indices of the current population */
    size_t nmembers;
};

static int init(struct kd_searcher *s, const json_t *sc, char *err)
{
    struct pbt *p = kd_xcalloc(1, sizeof(*p));
    const json_t *rf = json_object_get(sc, "replace_function");
    const json_t *ef = json_object_get(sc, "explore_function");
    const json_t *lpr = json_object_get(sc, "length_per_round");
    int rc = 0;
    s->mstate = p;
    if ((rc = kd__get_int(sc, "population_size", "searcher", true, 1, &p->population, err)) != 0 ||
        (rc = kd__get_int(sc, "num_rounds", "searcher", true, 1, &p->rounds, err)) != 0)
        goto out;
    if (p->population > KD_SEARCH_MAX_TRIALS || p->rounds > KD_SEARCH_MAX_TRIALS) {
        rc = kd_seterr(err, KD_EINVAL, "searcher.population_size, num_rounds: at most %d",
                       KD_SEARCH_MAX_TRIALS);
        goto out;
    }
    if (!lpr) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.length_per_round: required by pbt "
                       "({batches|records|epochs: N})");
        goto out;
    }
    if ((rc = kd__parse_length(lpr, "searcher.length_per_round", s->unit, &p->per_round, err)) != 0)
        goto out;
    if (!json_is_object(rf)) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.replace_function: required by pbt "
                       "({truncate_fraction: F})");
        goto out;
    }
    if (!json_is_object(ef)) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.explore_function: required by pbt "
                       "({resample_probability: P, perturb_factor: F})");
        goto out;
    }
    if ((rc = kd__get_num(rf, "truncate_fraction", "searcher.replace_function", true, &p->truncate,
                          err)) != 0 ||
        (rc = kd__get_num(ef, "resample_probability", "searcher.explore_function", true,
                          &p->resample, err)) != 0 ||
        (rc = kd__get_num(ef, "perturb_factor", "searcher.explore_function", true, &p->perturb,
                          err)) != 0)
        goto out;
    if (p->truncate < 0 || p->truncate > 0.5) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.replace_function.truncate_fraction: must be in [0, 0.5], got %g",
                       p->truncate);
        goto out;
    }
    if (p->resample < 0 || p->resample > 1) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.explore_function.resample_probability: must be in [0, 1], got %g",
                       p->resample);
        goto out;
    }
    if (p->perturb < 0 || p->perturb > 1) {
        rc = kd_seterr(err, KD_EINVAL,
                       "searcher.explore_function.perturb_factor: must be in [0, 1], got %g",
                       p->perturb);
        goto out;
    }
    p->members = kd_xcalloc((size_t)p->population, sizeof(int64_t));
out:
    return rc;
}

static void mfree(struct kd_searcher *s)
{
    struct pbt *p = s->mstate;
    free(p->members);
    free(p);
}

static int initial(struct kd_searcher *s)
{
    struct pbt *p = s->mstate;
    double *x = kd_xcalloc(s->sp->n ? s->sp->n : 1, sizeof(double));
    for (int64_t i = 0; i < p->population; i++) {
        kd_hp_sample(s->sp, &s->rng, x);
        struct kd__trial *t = kd__create(s, x, -1, NULL);
        t->b = 0;
        t->r = 0;
        p->members[p->nmembers++] = t - s->trials;
        kd__validate_after(s, t, p->per_round);
    }
    free(x);
    return 0;
}

/* Explore: per hyperparameter, resample with probability resample_probability, else
 * multiply the value by (1 + f) or (1 - f) (int rounded, log in value space,
 * categorical kept), clamped to the range. */
static void explore(struct kd_searcher *s, const double *from, double *x)
{
    struct pbt *p = s->mstate;
    for (size_t i = 0; i < s->sp->n; i++) {
        const struct kd_hp_param *hp = &s->sp->params[i];
        x[i] = from[i];
        if (hp->type == KD_HP_CONST)
            continue;
        if (kd_rng_uniform(&s->rng) < p->resample) {
            x[i] = kd_hp_sample_param(hp, &s->rng);
            continue;
        }
        double f = kd_rng_uniform(&s->rng) < 0.5 ? 1.0 + p->perturb : 1.0 - p->perturb;
        switch (hp->type) {
        case KD_HP_INT:
        case KD_HP_DOUBLE: x[i] = kd_hp_clamp(hp, from[i] * f); break;
        case KD_HP_LOG: x[i] = kd_hp_clamp(hp, from[i] + log(f) / log(hp->base)); break;
        case KD_HP_CATEGORICAL:
        case KD_HP_CONST: break;
        }
    }
}

static bool reported(const struct pbt *p, const struct kd__trial *t)
{
    return t->r > p->round; /* t->r: rounds this trial has reported */
}

/* Rank reported members by this round's loss (ties by creation order). */
static int cmp_member(const void *a, const void *b, void *ctx)
{
    const struct kd_searcher *s = ctx;
    const struct kd__trial *x = &s->trials[*(const int64_t *)a];
    const struct kd__trial *y = &s->trials[*(const int64_t *)b];
    if (x->m != y->m)
        return x->m < y->m ? -1 : 1;
    return *(const int64_t *)a < *(const int64_t *)b ? -1 : 1;
}

static void end_round(struct kd_searcher *s)
{
    struct pbt *p = s->mstate;
    int64_t *live = kd_xcalloc(p->nmembers + 1, sizeof(int64_t));
    int64_t *next = kd_xcalloc((size_t)p->population + 1, sizeof(int64_t));
    double *x = kd_xcalloc(s->sp->n ? s->sp->n : 1, sizeof(double));
    size_t nlive = 0, nnext = 0, need = 0;
    char why[256];
    for (size_t i = 0; i < p->nmembers; i++) {
        struct kd__trial *t = &s->trials[p->members[i]];
        if (kd__alive(t) && reported(p, t))
            live[nlive++] = p->members[i];
        else
            need++; /* exited or stopped: replaced */
    }
    p->round++;
    if (p->round >= p->rounds) {
        for (size_t i = 0; i < nlive; i++) {
            snprintf(why, sizeof(why), "pbt: finished all %" PRId64 " rounds", p->rounds);
            kd__close(s, &s->trials[live[i]], why);
        }
        goto out;
    }
    qsort_r(live, nlive, sizeof(int64_t), cmp_member, s);
    size_t k = (size_t)floor(p->truncate * (double)p->population);
    size_t ntop = k < nlive ? k : nlive;
    size_t nbottom = nlive > ntop ? (k < nlive - ntop ? k : nlive - ntop) : 0;
    for (size_t i = nlive - nbottom; i < nlive; i++) {
        struct kd__trial *t = &s->trials[live[i]];
        snprintf(why, sizeof(why), "pbt round %" PRId64 ": replaced (rank %zu of %zu, loss %g)",
                 p->round, i + 1, nlive, t->m);
        kd__close(s, t, why);
        need++;
    }
    for (size_t i = 0; i < nlive - nbottom; i++) {
        struct kd__trial *t = &s->trials[live[i]];
        next[nnext++] = live[i];
        kd__validate_after(s, t, t->target + p->per_round);
    }
    if (need > 0 && nlive - nbottom == 0) {
        kd__shutdown(s, "pbt: every member of the population exited", true);
        goto out;
    }
    for (size_t j = 0; j < need; j++) {
        /* parents: the top truncate_fraction, or the best survivors when that is empty */
        size_t pool = ntop > 0 ? ntop : nlive - nbottom;
        int64_t pi = live[j % pool];
        struct kd__trial *parent = &s->trials[pi];
        explore(s, parent->x, x);
        snprintf(why, sizeof(why),
                 "pbt round %" PRId64 ": exploit %s (rank %zu, loss %g) and explore", p->round,
                 parent->id, j % pool + 1, parent->m);
        struct kd__trial *c = kd__create(s, x, pi, why);
        c->b = p->round;
        c->r = p->round;
        next[nnext++] = c - s->trials;
        kd__validate_after(s, c, p->per_round);
    }
    memcpy(p->members, next, nnext * sizeof(int64_t));
    p->nmembers = nnext;
out:
    free(live);
    free(next);
    free(x);
}

static void maybe_end_round(struct kd_searcher *s)
{
    struct pbt *p = s->mstate;
    if (p->round >= p->rounds) {
        if (kd__nalive(s) == 0) {
            char why[128];
            snprintf(why, sizeof(why), "pbt: all %" PRId64 " rounds finished", p->rounds);
            kd__shutdown(s, why, false);
        }
        return;
    }
    for (size_t i = 0; i < p->nmembers; i++) {
        const struct kd__trial *t = &s->trials[p->members[i]];
        if (kd__alive(t) && !reported(p, t))
            return;
    }
    end_round(s);
    if (p->round >= p->rounds && kd__nalive(s) == 0)
        maybe_end_round(s);
}

static int validated(struct kd_searcher *s, struct kd__trial *t, double loss)
{
    t->m = loss;
    t->r++;
    maybe_end_round(s);
    return 0;
}

static int finished(struct kd_searcher *s, struct kd__trial *t)
{
    (void)t;
    maybe_end_round(s);
    return 0;
}

static double progress(const struct kd_searcher *s)
{
    const struct pbt *p = s->mstate;
    size_t done = 0;
    for (size_t i = 0; i < p->nmembers; i++)
        done += reported(p, &s->trials[p->members[i]]);
    double frac = p->nmembers ? (double)done / (double)p->nmembers : 0;
    return ((double)p->round + (p->round < p->rounds ? frac : 0)) / (double)p->rounds;
}

static json_t *snapshot(const struct kd_searcher *s)
{
    const struct pbt *p = s->mstate;
    json_t *m = json_array();
    for (size_t i = 0; i < p->nmembers; i++)
        json_array_append_new(m, json_integer(p->members[i]));
    return json_pack("{sIso}", "round", (json_int_t)p->round, "members", m);
}

static int restore(struct kd_searcher *s, const json_t *st, char *err)
{
    struct pbt *p = s->mstate;
    const json_t *m = json_object_get(st, "members");
    const json_t *v;
    size_t i;
    if (!json_is_array(m) || json_array_size(m) > (size_t)p->population ||
        !json_is_integer(json_object_get(st, "round")))
        return kd_seterr(err, KD_ECORRUPT, "snapshot.method: expected round and members");
    p->round = json_integer_value(json_object_get(st, "round"));
    json_array_foreach(m, i, v)
    {
        json_int_t ti = json_integer_value(v);
        if (ti < 0 || (size_t)ti >= s->ntrials)
            return kd_seterr(err, KD_ECORRUPT, "snapshot.method.members[%zu]: out of range", i);
        p->members[i] = ti;
    }
    p->nmembers = json_array_size(m);
    return 0;
}

const struct kd__method kd__pbt = {
    .name = "pbt",
    .init = init,
    .free = mfree,
    .initial = initial,
    .validated = validated,
    .finished = finished,
    .progress = progress,
    .snapshot = snapshot,
    .restore = restore,
};
