/*
 * The bayesian searcher: a multivariate Tree-structured Parzen Estimator
 * (Bergstra et al. 2011; the multivariate kernel of Falkner et al. 2018)
 * over every hyperparameter type. Finished trials are split into the best
 * gamma fraction and the rest; each group becomes a mixture of truncated
 * Gaussians (numbers, in [0,1]-normalized coordinates, with adaptive
 * per-dimension bandwidths) times categorical kernels, plus a uniform
 * prior component. Candidates are drawn from the
 * good mixture and the one maximizing l(x)/g(x) is proposed. Trials still
 * running (pending) are ranked with a believed loss, that of their nearest
 * finished trial (a "believer" in the spirit of Ginsbourger et al.'s kriging
 * believer, with a nearest-neighbour prediction): a pending trial in a bad
 * region repels the next suggestions, one in a good region keeps the search
 * there instead of pushing it away as a constant worst-value liar does.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "searcher/searcher_int.h"

#define TPE_STARTUP 10       /* random trials (finished or pending) before the model is used */
#define TPE_MIN_OBS 2        /* ... and reported trials it needs */
#define TPE_CANDIDATES 24    /* candidates drawn from l(x) per suggestion */
#define TPE_GAMMA 0.15       /* fraction of finished trials in the good group ... */
#define TPE_GAMMA_MAX 25     /* ... capped at this many */
#define TPE_PRIOR_WEIGHT 1.0 /* weight of the uniform prior component */
#define TPE_CAT_PRIOR 2.0    /* categorical kernel: P(v) = (a/C + [v == obs]) / (a + 1) */

struct obs {
    int64_t trial;
    double loss;
};

/* One Parzen mixture: ncomp components (observations, then the prior). */
struct mixture {
    size_t ncomp, nd, nc;
    double *logw;    /* ncomp */
    double *mu;      /* ncomp * nd, normalized */
    double *sigd;    /* ncomp * nd: bandwidth per component and dimension */
    double *inv;     /* ncomp * nd: 1 / bandwidth */
    double *cst;     /* ncomp: log weight minus the log normalizers of every dimension */
    double *scratch; /* ncomp: per-component log densities */
    double *catl;    /* 3 per categorical dimension: log P for match, mismatch, prior */
    int *cat;        /* ncomp * nc: observed category, -1 for the prior */
    double *w;       /* ncomp: normalized weights, for sampling */
};

struct tpe {
    struct kd__simple d; /* first: the simple driver's state (searcher_int.h) */
    size_t nd, nc;       /* numeric and categorical leaves */
    size_t *num;         /* leaf index of each numeric dimension */
    size_t *catd;        /* leaf index of each categorical dimension */
};

static double to_unit(const struct kd_hp_param *p, double v)
{
    if (p->type == KD_HP_INT)
        return (v - p->minval + 0.5) / (p->maxval - p->minval + 1);
    return (v - p->minval) / (p->maxval - p->minval);
}

static double from_unit(const struct kd_hp_param *p, double u)
{
    if (p->type == KD_HP_INT)
        return kd_hp_clamp(p, p->minval + floor(u * (p->maxval - p->minval + 1)));
    return kd_hp_clamp(p, p->minval + u * (p->maxval - p->minval));
}

static int cmp_obs_loss(const void *a, const void *b)
{
    const struct obs *x = a, *y = b;
    if (x->loss != y->loss)
        return x->loss < y->loss ? -1 : 1;
    return x->trial < y->trial ? -1 : x->trial > y->trial;
}

static int cmp_obs_trial(const void *a, const void *b)
{
    const struct obs *x = a, *y = b;
    return x->trial < y->trial ? -1 : x->trial > y->trial;
}

static double log_phi_mass(double mu, double sigma)
{
    double z = 0.5 * (erfc(-(1.0 - mu) / (sigma * M_SQRT2)) - erfc(mu / (sigma * M_SQRT2)));
    return log(z > 1e-300 ? z : 1e-300);
}

static void mixture_free(struct mixture *m)
{
    free(m->logw);
    free(m->mu);
    free(m->sigd);
    free(m->inv);
    free(m->cst);
    free(m->scratch);
    free(m->catl);
    free(m->cat);
    free(m->w);
}

struct centre {
    double mu;
    size_t k;
};

static int cmp_centre(const void *a, const void *b)
{
    const struct centre *x = a, *y = b;
    if (x->mu != y->mu)
        return x->mu < y->mu ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/*
 * Build the mixture of group g[0..n) (re-sorted by trial for the weights).
 * Bandwidths are per dimension: the larger of the distances from a centre
 * to its neighbours (the other centres, the prior's 0.5 and the bounds),
 * clipped to [1/min(100, n+1), 1] as in Bergstra's "magic clip". Dense
 * regions get narrow kernels, so the search sharpens where it finds good
 * results; the joint (multivariate) components keep correlations.
 */
static void mixture_build(const struct kd_searcher *s, const struct tpe *tp, struct obs *g,
                          size_t n, struct mixture *m)
{
    size_t nd = tp->nd, nc = tp->nc, K = n + 1;
    double minsig = 1.0 / fmin(100.0, 1.0 + (double)n);
    double tot = 0;
    struct centre *cs = kd_xcalloc(K, sizeof(*cs));
    m->ncomp = K;
    m->nd = nd;
    m->nc = nc;
    m->logw = kd_xcalloc(K, sizeof(double));
    m->w = kd_xcalloc(K, sizeof(double));
    m->mu = kd_xcalloc(K * nd + 1, sizeof(double));
    m->sigd = kd_xcalloc(K * nd + 1, sizeof(double));
    m->inv = kd_xcalloc(K * nd + 1, sizeof(double));
    m->cst = kd_xcalloc(K, sizeof(double));
    m->scratch = kd_xcalloc(K, sizeof(double));
    m->catl = kd_xcalloc(3 * nc + 1, sizeof(double));
    m->cat = kd_xcalloc(K * nc + 1, sizeof(int));
    qsort(g, n, sizeof(*g), cmp_obs_trial);
    for (size_t k = 0; k < n; k++) {
        const struct kd__trial *t = &s->trials[g[k].trial];
        /* older observations weigh less once there are more than 25 (a ramp from 1/n to 1) */
        double w = 1.0;
        if (n >= 25 && k < n - 25)
            w = 1.0 / (double)n + (1.0 - 1.0 / (double)n) * (double)k / (double)(n - 25);
        m->w[k] = w;
        for (size_t d = 0; d < nd; d++)
            m->mu[k * nd + d] = to_unit(&s->sp->params[tp->num[d]], t->x[tp->num[d]]);
        for (size_t c = 0; c < nc; c++)
            m->cat[k * nc + c] = (int)t->x[tp->catd[c]];
    }
    /* the prior: centred, wide, uniform over categories */
    m->w[n] = TPE_PRIOR_WEIGHT;
    for (size_t d = 0; d < nd; d++)
        m->mu[n * nd + d] = 0.5;
    for (size_t c = 0; c < nc; c++)
        m->cat[n * nc + c] = -1;
    for (size_t d = 0; d < nd; d++) {
        for (size_t k = 0; k < K; k++)
            cs[k] = (struct centre){m->mu[k * nd + d], k};
        qsort(cs, K, sizeof(*cs), cmp_centre);
        for (size_t i = 0; i < K; i++) {
            size_t k = cs[i].k;
            double mu = cs[i].mu, sg;
            double left = i > 0 ? mu - cs[i - 1].mu : mu;
            double right = i + 1 < K ? cs[i + 1].mu - mu : 1.0 - mu;
            sg = k == n ? 1.0 : fmax(left, right);
            sg = fmin(fmax(sg, minsig), 1.0);
            m->sigd[k * nd + d] = sg;
            m->inv[k * nd + d] = 1.0 / sg;
            /* truncated normal on [0,1]: log(sigma * sqrt(2 pi) * mass) */
            m->cst[k] -= log_phi_mass(mu, sg) + log(sg) + 0.91893853320467274178;
        }
    }
    for (size_t k = 0; k < K; k++)
        tot += m->w[k];
    for (size_t k = 0; k < K; k++) {
        m->w[k] /= tot;
        m->logw[k] = log(m->w[k]);
        m->cst[k] += m->logw[k];
    }
    free(cs);
}

static double mixture_logpdf(const struct kd_searcher *s, const struct tpe *tp,
                             const struct mixture *m, const double *u, const int *c)
{
    double best = -INFINITY, sum = 0;
    double *lp = m->scratch;
    size_t nd = m->nd, nc = m->nc;
    for (size_t j = 0; j < nc; j++) {
        /* the three values the categorical kernel can take for this candidate */
        double C = (double)s->sp->params[tp->catd[j]].nvals;
        m->catl[3 * j] = log((TPE_CAT_PRIOR / C + 1.0) / (TPE_CAT_PRIOR + 1.0));
        m->catl[3 * j + 1] = log((TPE_CAT_PRIOR / C) / (TPE_CAT_PRIOR + 1.0));
        m->catl[3 * j + 2] = -log(C);
    }
    for (size_t k = 0; k < m->ncomp; k++) {
        double q = 0, acc;
        const double *mu = &m->mu[k * nd];
        const double *inv = &m->inv[k * nd];
        for (size_t d = 0; d < nd; d++) {
            double z = (u[d] - mu[d]) * inv[d];
            q += z * z;
        }
        acc = m->cst[k] - 0.5 * q;
        for (size_t j = 0; j < nc; j++) {
            int o = m->cat[k * nc + j];
            acc += m->catl[3 * j + (o < 0 ? 2 : o == c[j] ? 0 : 1)];
        }
        lp[k] = acc;
        if (acc > best)
            best = acc;
    }
    for (size_t k = 0; k < m->ncomp; k++)
        sum += exp(lp[k] - best);
    return best + log(sum);
}

static double trunc_normal01(struct kd_rng *r, double mu, double sigma)
{
    for (int i = 0; i < 64; i++) {
        double v = mu + sigma * kd_rng_normal(r);
        if (v >= 0.0 && v < 1.0)
            return v;
    }
    return kd_rng_uniform(r); /* practically unreachable: sigma is at least 0.01 */
}

static void mixture_sample(const struct kd_searcher *s, struct kd_rng *r, const struct tpe *tp,
                           const struct mixture *m, double *u, int *c)
{
    double pick = kd_rng_uniform(r), acc = 0;
    size_t k = m->ncomp - 1;
    for (size_t i = 0; i < m->ncomp; i++) {
        acc += m->w[i];
        if (pick < acc) {
            k = i;
            break;
        }
    }
    for (size_t d = 0; d < m->nd; d++)
        u[d] = trunc_normal01(r, m->mu[k * m->nd + d], m->sigd[k * m->nd + d]);
    for (size_t j = 0; j < m->nc; j++) {
        const struct kd_hp_param *p = &s->sp->params[tp->catd[j]];
        int obs = m->cat[k * m->nc + j];
        double C = (double)p->nvals, pu = kd_rng_uniform(r);
        /* P(v) = (a/C + [v == obs]) / (a + 1); the prior is uniform */
        if (obs >= 0 && pu < 1.0 / (TPE_CAT_PRIOR + 1.0))
            c[j] = obs;
        else
            c[j] = (int)kd_rng_below(r, (uint64_t)C);
    }
}

void kd__tpe_believe(const bool *cat, size_t dim, const double *ox, const double *oloss, size_t n,
                     const double *px, size_t np, double *out)
{
    for (size_t i = 0; i < np; i++) {
        const double *p = &px[i * dim];
        double bd = INFINITY;
        out[i] = INFINITY;
        for (size_t k = 0; k < n; k++) {
            const double *o = &ox[k * dim];
            double d2 = 0;
            for (size_t d = 0; d < dim; d++) {
                double z = cat[d] ? (double)(p[d] != o[d]) : p[d] - o[d];
                d2 += z * z;
            }
            if (d2 < bd) {
                bd = d2;
                out[i] = oloss[k];
            }
        }
    }
}

/*
 * The believer over the trial table: pend[0..np) take the loss of their
 * nearest observation in ob[0..n) (both in trial order), in normalized
 * coordinates.
 */
static void believe(const struct kd_searcher *s, const struct tpe *tp, const struct obs *ob,
                    size_t n, struct obs *pend, size_t np)
{
    size_t dim = tp->nd + tp->nc;
    bool *cat = kd_xcalloc(dim + 1, sizeof(bool));
    double *ox = kd_xcalloc(n * dim + 1, sizeof(double));
    double *ol = kd_xcalloc(n + 1, sizeof(double));
    double *px = kd_xcalloc(np * dim + 1, sizeof(double));
    double *pl = kd_xcalloc(np + 1, sizeof(double));
    for (size_t j = 0; j < tp->nc; j++)
        cat[tp->nd + j] = true;
    for (size_t k = 0; k < n + np; k++) {
        const struct obs *e = k < n ? &ob[k] : &pend[k - n];
        const double *x = s->trials[e->trial].x;
        double *row = k < n ? &ox[k * dim] : &px[(k - n) * dim];
        for (size_t d = 0; d < tp->nd; d++)
            row[d] = to_unit(&s->sp->params[tp->num[d]], x[tp->num[d]]);
        for (size_t j = 0; j < tp->nc; j++)
            row[tp->nd + j] = x[tp->catd[j]];
        if (k < n)
            ol[k] = e->loss;
    }
    kd__tpe_believe(cat, dim, ox, ol, n, px, np, pl);
    for (size_t i = 0; i < np; i++)
        pend[i].loss = pl[i];
    free(cat);
    free(ox);
    free(ol);
    free(px);
    free(pl);
}

static void propose(struct kd_searcher *s, int64_t idx, double *x)
{
    struct tpe *tp = s->mstate;
    struct obs *ob = kd_xcalloc(s->ntrials + 1, sizeof(*ob));
    struct obs *pend = kd_xcalloc(s->ntrials + 1, sizeof(*pend));
    size_t n = 0, np = 0;
    (void)idx;
    for (size_t i = 0; i < s->ntrials; i++) {
        const struct kd__trial *t = &s->trials[i];
        /* a trial validated at max_length is closing: its loss is final before trial_closed */
        if ((t->finished || t->closing) && t->nhist > 0)
            ob[n++] = (struct obs){(int64_t)i, t->best};
        else if (t->finished && t->exited && t->exit_reason == KD_SEARCH_EXIT_INVALID_HP)
            ob[n++] = (struct obs){(int64_t)i, KD__WORST};
        else if (!t->finished)
            pend[np++] = (struct obs){(int64_t)i, INFINITY};
    }
    kd_hp_sample(s->sp, &s->rng, x); /* consts, and the answer during start-up */
    /* start-up counts pending trials, so running 8 at once does not add 7 random trials */
    if (n >= TPE_MIN_OBS && n + np >= TPE_STARTUP && tp->nd + tp->nc > 0) {
        size_t nall = n + np, nb = (size_t)ceil(TPE_GAMMA * (double)nall);
        struct mixture lo = {0}, hi = {0};
        double *u = kd_xcalloc(tp->nd + 1, sizeof(double));
        double *bu = kd_xcalloc(tp->nd + 1, sizeof(double));
        int *c = kd_xcalloc(tp->nc + 1, sizeof(int));
        int *bc = kd_xcalloc(tp->nc + 1, sizeof(int));
        double best = -INFINITY;
        if (nb > TPE_GAMMA_MAX)
            nb = TPE_GAMMA_MAX;
        if (nb < 1)
            nb = 1;
        /* pending trials join the ranking with their believed loss */
        believe(s, tp, ob, n, pend, np);
        memcpy(ob + n, pend, np * sizeof(*ob));
        qsort(ob, nall, sizeof(*ob), cmp_obs_loss);
        mixture_build(s, tp, ob, nb, &lo);
        mixture_build(s, tp, ob + nb, nall - nb, &hi);
        for (int i = 0; i < TPE_CANDIDATES; i++) {
            mixture_sample(s, &s->rng, tp, &lo, u, c);
            double score = mixture_logpdf(s, tp, &lo, u, c) - mixture_logpdf(s, tp, &hi, u, c);
            if (score > best) {
                best = score;
                memcpy(bu, u, tp->nd * sizeof(double));
                memcpy(bc, c, tp->nc * sizeof(int));
            }
        }
        for (size_t d = 0; d < tp->nd; d++)
            x[tp->num[d]] = from_unit(&s->sp->params[tp->num[d]], bu[d]);
        for (size_t j = 0; j < tp->nc; j++)
            x[tp->catd[j]] = bc[j];
        mixture_free(&lo);
        mixture_free(&hi);
        free(u);
        free(bu);
        free(c);
        free(bc);
    }
    free(ob);
    free(pend);
}

static int init(struct kd_searcher *s, const json_t *scfg, char *err)
{
    struct tpe *tp;
    int rc;
    (void)scfg;
    if ((rc = kd__need_max_length(s, err)) != 0)
        return rc;
    if (s->max_trials <= 0)
        return kd_seterr(err, KD_EINVAL, "searcher.max_trials: required by the bayesian searcher");
    tp = kd_xcalloc(1, sizeof(*tp));
    tp->num = kd_xcalloc(s->sp->n + 1, sizeof(size_t));
    tp->catd = kd_xcalloc(s->sp->n + 1, sizeof(size_t));
    for (size_t i = 0; i < s->sp->n; i++) {
        enum kd_hp_type ty = s->sp->params[i].type;
        if (ty == KD_HP_CATEGORICAL)
            tp->catd[tp->nc++] = i;
        else if (ty != KD_HP_CONST)
            tp->num[tp->nd++] = i;
    }
    tp->d.total = s->max_trials;
    tp->d.propose = propose;
    tp->d.redraw_invalid = true;
    s->mstate = tp;
    return 0;
}

static void mfree(struct kd_searcher *s)
{
    struct tpe *tp = s->mstate;
    free(tp->num);
    free(tp->catd);
    free(tp);
}

const struct kd__method kd__bayesian = {
    .name = "bayesian",
    .init = init,
    .free = mfree,
    .initial = kd__simple_initial,
    .validated = kd__simple_validated,
    .finished = kd__simple_finished,
    .progress = kd__simple_progress,
    .snapshot = kd__simple_snapshot,
    .restore = kd__simple_restore,
};
