/*
 * fashion-mnist-c: data-parallel training of an MLP on Fashion-MNIST with
 * libdtrain. Every rank sees the same shuffled order and takes its slice of
 * each global batch; gradients are averaged across ranks through
 * libdtrain's gradient buckets (the second layer's allreduce runs while the
 * first layer's gradient is computed), so all ranks apply the same update
 * and keep bit-identical weights. Loss and accuracy are printed per epoch.
 * Run by the kdet controller (KDET_CONTROLLER_URL set) it is a trial: rank 0
 * asks the searcher how far to train, reports metrics, watches for
 * preemption and makes checkpoints, and broadcasts every decision so all
 * ranks take the same steps (docs/launcher.md lists the environment).
 */
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "dtrain.h"
#include "kdet.h"
#include "mlp.h"
#include "state.h"

void openblas_set_num_threads(int num_threads);

struct cfg {
    const char *data;
    int epochs, batches, hidden, batch, agg;
    double lr, momentum, wd;
    size_t train_limit, test_limit;
    int64_t seed;
    int check_sync, quiet;
    int print_reports; /* print every metric row handed to the controller, and each ack */
    int report_every, preempt_every; /* optimizer steps, as a kdet trial */
    int ckpt_period;                 /* batches between checkpoints of a trial, 0: none */
    const char *save;
};

struct train {
    struct dtrain *h;
    int ids[MLP_NTENSORS];
    int ready; /* 1 on the last micro-step of an aggregation window */
    int err;
};

static void on_tensor_done(void *ctx, int tensor)
{
    struct train *t = ctx;
    if (t->ready && t->err == 0)
        t->err = dtrain_grads_ready(t->h, t->ids[tensor]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        x = (x ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return x;
}

static void shuffle(size_t *perm, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        size_t j = (size_t)(s % (i + 1));
        size_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fashion-mnist-c [--data DIR] [--epochs N] [--batches N] [--lr X]\n"
               "         [--hidden N] [--momentum X] [--weight-decay X] [--batch-size N]\n"
               "         [--aggregation-frequency N] [--train-limit N] [--test-limit N]\n"
               "         [--seed N] [--check-sync] [--save-weights FILE] [--quiet]\n"
               "         [--report-every STEPS] [--preempt-check-every STEPS]\n"
               "         [--checkpoint-period BATCHES] [--print-reports]\n"
               "Hyperparameters come from KDET_HPARAMS (learning_rate, hidden_units, momentum,\n"
               "weight_decay, global_batch_size, aggregation_frequency); flags override them.\n"
               "Run one process per rank under kdet-launch (see docs/dtrain.md).\n");
}

static int parse_args(int argc, char **argv, struct cfg *c, unsigned *set)
{
    static const struct option lo[] = {{"data", required_argument, NULL, 'd'},
                                       {"epochs", required_argument, NULL, 'e'},
                                       {"batches", required_argument, NULL, 'n'},
                                       {"lr", required_argument, NULL, 'l'},
                                       {"hidden", required_argument, NULL, 'H'},
                                       {"momentum", required_argument, NULL, 'm'},
                                       {"weight-decay", required_argument, NULL, 'w'},
                                       {"batch-size", required_argument, NULL, 'b'},
                                       {"aggregation-frequency", required_argument, NULL, 'a'},
                                       {"train-limit", required_argument, NULL, 'T'},
                                       {"test-limit", required_argument, NULL, 't'},
                                       {"seed", required_argument, NULL, 's'},
                                       {"check-sync", no_argument, NULL, 'c'},
                                       {"save-weights", required_argument, NULL, 'S'},
                                       {"quiet", no_argument, NULL, 'q'},
                                       {"report-every", required_argument, NULL, 'r'},
                                       {"preempt-check-every", required_argument, NULL, 'p'},
                                       {"checkpoint-period", required_argument, NULL, 'k'},
                                       {"print-reports", no_argument, NULL, 'P'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int o, li = 0;
    while ((o = getopt_long(argc, argv, "h", lo, &li)) != -1) {
        const char *opt = o == 'h' || o == '?' ? "" : lo[li].name;
        char *end = NULL;
        double v = 0;
        if (optarg != NULL) {
            v = strtod(optarg, &end);
            if (o != 'd' && o != 'S' && (end == optarg || *end != '\0')) {
                fprintf(stderr, "fashion-mnist-c: --%s %s: expected a number\n", opt, optarg);
                return -1;
            }
        }
        bool isint = v == (double)(long long)v;
        switch (o) {
        case 'd': c->data = optarg; break;
        case 'e': c->epochs = (int)v; break;
        case 'n': c->batches = (int)v; break;
        case 'l': c->lr = v, *set |= 1; break;
        case 'H': c->hidden = (int)v, *set |= 2; break;
        case 'm': c->momentum = v, *set |= 4; break;
        case 'w': c->wd = v, *set |= 8; break;
        case 'b': c->batch = (int)v, *set |= 16; break;
        case 'a': c->agg = (int)v, *set |= 32; break;
        case 'T': c->train_limit = (size_t)v; break;
        case 't': c->test_limit = (size_t)v; break;
        case 's': c->seed = (int64_t)v, *set |= 64; break;
        case 'c': c->check_sync = 1; break;
        case 'S': c->save = optarg; break;
        case 'q': c->quiet = 1; break;
        case 'r': c->report_every = (int)v; break;
        case 'p': c->preempt_every = (int)v; break;
        case 'k': c->ckpt_period = (int)v; break;
        case 'P': c->print_reports = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (optarg != NULL && o != 'd' && o != 'S' && o != 'l' && o != 'm' && o != 'w' &&
            (!isint || v < 0)) {
            fprintf(stderr, "fashion-mnist-c: --%s %s: expected a non-negative integer\n", opt,
                    optarg);
            return -1;
        }
    }
    return 0;
}

/* Hyperparameters from KDET_HPARAMS where no flag set them. */
static int apply_hparams(struct dtrain *h, struct cfg *c, unsigned set)
{
    int64_t i = 0;
    int rc = 0;
#define HP_D(name, field, bit)                                                                     \
    if (!(set & (bit)) && (rc = dtrain_hparam_double(h, name, &c->field)) < 0 &&                   \
        rc != DTRAIN_ENOTFOUND)                                                                    \
        goto bad;
#define HP_I(name, field, bit)                                                                     \
    if (!(set & (bit)) && (rc = dtrain_hparam_int(h, name, &i)) == 0)                              \
        c->field = (int)i;                                                                         \
    else if (!(set & (bit)) && rc != DTRAIN_ENOTFOUND)                                             \
        goto bad;
    HP_D("learning_rate", lr, 1)
    HP_I("hidden_units", hidden, 2)
    HP_D("momentum", momentum, 4)
    HP_D("weight_decay", wd, 8)
    HP_I("global_batch_size", batch, 16)
    HP_I("aggregation_frequency", agg, 32)
#undef HP_D
#undef HP_I
    if (!(set & 64))
        c->seed = dtrain_trial_seed(h);
    return 0;
bad:
    fprintf(stderr, "fashion-mnist-c: %s\n", dtrain_errmsg(h));
    return -1;
}

static int evaluate(struct mlp *m, const struct fm_set *s, int rank, int world, double *loss,
                    double *acc, struct dtrain *h)
{
    size_t lo = s->n * (size_t)rank / (size_t)world, hi = s->n * (size_t)(rank + 1) / (size_t)world;
    double sums[3] = {0, 0, (double)(hi - lo)};
    long correct = 0;
    const uint8_t *imgs[512];
    for (size_t i = lo; i < hi; i += (size_t)m->max_batch) {
        int n = (int)(hi - i < (size_t)m->max_batch ? hi - i : (size_t)m->max_batch);
        for (int k = 0; k < n; k++)
            imgs[k] = s->images + (i + (size_t)k) * FM_PIXELS;
        mlp_set_input(m, imgs, n);
        mlp_step(m, n, s->labels + i, 0.0f, &sums[0], &correct, NULL, NULL);
    }
    sums[1] = (double)correct;
    if (dtrain_allreduce(h, sums, 3, DTRAIN_FLOAT64, DTRAIN_SUM) < 0)
        return -1;
    *loss = sums[0] / sums[2];
    *acc = sums[1] / sums[2];
    return 0;
}

/* Set by SIGTERM in a trial (kdet-launch forwards it when the pods are deleted). */
static volatile sig_atomic_t got_term;

static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
}

/* Everything the training loop carries between steps. */
struct run {
    struct cfg *c;
    struct dtrain *h;
    struct mlp *m;
    struct train *t;
    const struct fm_set *train, *test;
    size_t *perm;
    struct fm_kdet *k;
    int rank, world, nl, perm_ep;
    int ckpt;       /* rank 0 has checkpoint storage */
    size_t lo, spe; /* this rank's slice of a batch; optimizer steps per epoch */
    float scale;
    int64_t g;         /* optimizer steps taken */
    double tl, t0, wl; /* loss sums: this epoch, window of training metrics */
    long tc, wc;       /* correct predictions: this epoch, window */
    int64_t wn;        /* samples in the window */
    double test_acc;
    char err[DTRAIN_ERRLEN];
};

/*
 * One optimizer step (aggregation_frequency micro-batches). Returns 1 when
 * it ended an epoch, 0, or -1 after a libdtrain error (-2 weights differ).
 */
static int one_step(struct run *r)
{
    struct cfg *c = r->c;
    struct mlp *m = r->m;
    int ep = (int)(r->g / (int64_t)r->spe) + 1;
    size_t st = (size_t)(r->g % (int64_t)r->spe);
    if (r->perm_ep != ep) {
        shuffle(r->perm, r->train->n, (uint64_t)c->seed * 1000003u + (uint64_t)ep);
        r->perm_ep = ep;
    }
    if (st == 0) {
        r->tl = 0;
        r->tc = 0;
        r->t0 = now_s();
    }
    double before = r->tl;
    long cbefore = r->tc;
    for (int a = 0; a < c->agg; a++) {
        const uint8_t *imgs[512];
        uint8_t labels[512];
        size_t base = (st * (size_t)c->agg + (size_t)a) * (size_t)c->batch + r->lo;
        for (int q = 0; q < r->nl; q++) {
            size_t idx = r->perm[base + (size_t)q];
            imgs[q] = r->train->images + idx * FM_PIXELS;
            labels[q] = r->train->labels[idx];
        }
        mlp_set_input(m, imgs, r->nl);
        r->t->ready = a == c->agg - 1;
        mlp_step(m, r->nl, labels, r->scale, &r->tl, &r->tc, on_tensor_done, r->t);
        if (r->t->err < 0)
            return -1;
    }
    r->wl += r->tl - before;
    r->wc += r->tc - cbefore;
    r->wn += (int64_t)c->agg * r->nl;
    if (dtrain_grads_wait(r->h) < 0)
        return -1;
    mlp_update(m, (float)c->lr, (float)c->momentum, (float)c->wd);
    if (c->check_sync) {
        int64_t mine = (int64_t)fnv(m->params, m->nparams * sizeof(float)), all[256];
        if (r->world > 256 || dtrain_allgather(r->h, &mine, all, 1, DTRAIN_INT64) < 0)
            return -1;
        for (int q = 1; q < r->world; q++) {
            if (all[q] != all[0]) {
                fprintf(stderr,
                        "fashion-mnist-c: weights differ between rank 0 and rank %d after epoch "
                        "%d step %zu\n",
                        q, ep, st + 1);
                return -2;
            }
        }
    }
    if (r->rank == 0 && !c->quiet && (st + 1) % 200 == 0)
        printf("epoch %d step %zu/%zu local_loss=%.4f\n", ep, st + 1, r->spe,
               r->tl / (double)((st + 1) * (size_t)c->agg * (size_t)r->nl));
    fflush(stdout);
    r->g++;
    return r->g % (int64_t)r->spe == 0;
}

/* The standalone end of an epoch: train and test loss and accuracy. */
static int epoch_end(struct run *r)
{
    int ep = (int)(r->g / (int64_t)r->spe);
    double sums[3] = {r->tl, (double)r->tc, (double)(r->spe * (size_t)r->c->agg * (size_t)r->nl)};
    double test_loss = 0;
    if (dtrain_allreduce(r->h, sums, 3, DTRAIN_FLOAT64, DTRAIN_SUM) < 0 ||
        evaluate(r->m, r->test, r->rank, r->world, &test_loss, &r->test_acc, r->h) < 0)
        return -1;
    if (r->rank == 0)
        printf("epoch %d: train_loss=%.4f train_accuracy=%.4f test_loss=%.4f "
               "test_accuracy=%.4f steps=%zu time=%.1fs\n",
               ep, sums[0] / sums[2], sums[1] / sums[2], test_loss, r->test_acc, r->spe,
               now_s() - r->t0);
    fflush(stdout);
    return 0;
}

/* Rank 0's value v on every rank (-1 and h's message when the broadcast fails). */
static int64_t agree(struct run *r, int64_t v)
{
    if (dtrain_broadcast(r->h, &v, 1, DTRAIN_INT64, 0) < 0) {
        snprintf(r->err, sizeof(r->err), "%s", dtrain_errmsg(r->h));
        return DTRAIN_EPEER;
    }
    return v;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static int make_dir(char *out, size_t len, const char *what)
{
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(out, len, "%s/fashion-mnist-c-%s-XXXXXX", tmp, what);
    return mkdtemp(out) != NULL ? 0 : -1;
}

/*
 * A checkpoint at the current step (every rank calls it: the epoch sums
 * are collected to rank 0). `val` is the validation's metrics or NULL.
 */
static int checkpoint(struct run *r, const char *val)
{
    int rc = 0;
    double sums[2] = {r->tl, (double)r->tc};
    char dir[512], uuid[DTRAIN_CKPT_UUIDLEN], md[1024], e[256];
    if (dtrain_allreduce(r->h, sums, 2, DTRAIN_FLOAT64, DTRAIN_SUM) < 0) {
        snprintf(r->err, sizeof(r->err), "%s", dtrain_errmsg(r->h));
        return DTRAIN_EPEER;
    }
    if (r->rank == 0) {
        struct fm_state st = {
            .steps = r->g, .seed = r->c->seed, .ep_loss = sums[0], .ep_correct = (int64_t)sums[1]};
        snprintf(st.trial, sizeof(st.trial), "%s", r->k->trial);
        long long size = -1;
        if (make_dir(dir, sizeof(dir), "ckpt") != 0) {
            rc = DTRAIN_EIO;
            snprintf(r->err, sizeof(r->err), "cannot make a checkpoint directory in %.400s", dir);
        } else if ((size = fm_state_save(dir, r->m, &st, e)) < 0) {
            rc = DTRAIN_EIO;
            snprintf(r->err, sizeof(r->err), "%s", e);
            nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
        } else {
            int n = snprintf(md, sizeof(md),
                             "{\"trial_id\":\"%s\",\"steps_completed\":%lld,\"framework\":"
                             "\"fashion-mnist-c\",\"format\":\"fmnistc1\",\"hidden_units\":%d",
                             r->k->trial, (long long)(r->g * r->c->agg), r->m->hidden);
            snprintf(md + n, sizeof(md) - (size_t)n, "%s%s}", val ? ",\"validation_metrics\":" : "",
                     val ? val : "");
            rc = fm_kdet_save(r->k, dir, r->g * r->c->agg, size, md, uuid, r->err);
            if (rc != 0)
                nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
        }
    }
    return (int)agree(r, rc);
}

/* Restore KDET_LATEST_CHECKPOINT (rank 0 downloads; every rank gets the state). */
static int restore(struct run *r, const char *uuid)
{
    int64_t hdr[3] = {0, 0, 0}; /* rc, steps, epoch correct */
    double tl = 0;
    char dir[512], e[256];
    if (r->rank == 0) {
        struct fm_state st = {0};
        int rc = make_dir(dir, sizeof(dir), "restore");
        if (rc != 0) {
            snprintf(r->err, sizeof(r->err), "cannot make a directory in %.400s", dir);
        } else {
            if ((rc = fm_kdet_restore(r->k, uuid, dir, r->err)) == 0 &&
                (rc = fm_state_load(dir, r->m, &st, e)) != 0)
                snprintf(r->err, sizeof(r->err), "checkpoint %s: %s", uuid, e);
            nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS); /* read: not needed any more */
        }
        /* Another trial's checkpoint (PBT, warm start): its weights, our own step count. */
        bool warm = strcmp(st.trial, r->k->trial) != 0;
        hdr[0] = rc != 0 ? DTRAIN_EIO : 0;
        if (rc == 0 && !warm) {
            hdr[1] = st.steps;
            hdr[2] = st.ep_correct;
            tl = st.ep_loss;
        }
        if (rc == 0)
            printf("restored checkpoint %s (batches=%lld%s)\n", uuid,
                   (long long)(st.steps * r->c->agg),
                   warm ? ", weights only: another trial's" : "");
    }
    if (dtrain_broadcast(r->h, hdr, 3, DTRAIN_INT64, 0) < 0 ||
        (hdr[0] == 0 &&
         dtrain_broadcast(r->h, r->m->velocity, r->m->nparams, DTRAIN_FLOAT32, 0) < 0)) {
        snprintf(r->err, sizeof(r->err), "%s", dtrain_errmsg(r->h));
        return DTRAIN_EPEER;
    }
    if (hdr[0] != 0)
        return (int)hdr[0];
    r->g = hdr[1];
    if (r->rank == 0) { /* epoch sums held by rank 0 only: the others add their share */
        r->tl = tl;
        r->tc = (long)hdr[2];
    }
    r->perm_ep = 0;
    if (r->g % (int64_t)r->spe != 0)
        r->t0 = now_s();
    return 0;
}

/* Lengths in the searcher's unit <-> optimizer steps. */
static int64_t to_steps(const struct run *r, int64_t len)
{
    int64_t per = (int64_t)r->c->batch * r->c->agg;
    switch (r->k->unit) {
    case FM_UNIT_EPOCHS: return len * (int64_t)r->spe;
    case FM_UNIT_RECORDS: return (len + per - 1) / per;
    default: return (len + r->c->agg - 1) / r->c->agg;
    }
}

static int64_t from_steps(const struct run *r, int64_t steps)
{
    switch (r->k->unit) {
    case FM_UNIT_EPOCHS: return steps / (int64_t)r->spe;
    case FM_UNIT_RECORDS: return steps * r->c->batch * r->c->agg;
    default: return steps * r->c->agg;
    }
}

/* Training metrics of the window since the last report (every rank; rank 0 sends them). */
static int report_training(struct run *r)
{
    double s[3] = {r->wl, (double)r->wc, (double)r->wn};
    char js[256];
    r->wl = 0, r->wc = 0, r->wn = 0;
    if (dtrain_allreduce(r->h, s, 3, DTRAIN_FLOAT64, DTRAIN_SUM) < 0) {
        snprintf(r->err, sizeof(r->err), "%s", dtrain_errmsg(r->h));
        return DTRAIN_EPEER;
    }
    if (r->rank == 0 && s[2] > 0 && isfinite(s[0])) {
        snprintf(js, sizeof(js), "{\"loss\":%.17g,\"accuracy\":%.17g,\"batches\":%lld}",
                 s[0] / s[2], s[1] / s[2], (long long)(r->g * r->c->agg));
        if (r->c->print_reports) {
            printf("report training batches=%lld %s\n", (long long)(r->g * r->c->agg), js);
            fflush(stdout);
        }
        /* A refused or late training report is not worth stopping the trial for. */
        if (dtrain_report_metrics(r->k->cl, "training", r->g * r->c->agg, js, r->err) != 0)
            fprintf(stderr, "fashion-mnist-c: training metrics: %s\n", r->err);
    }
    return 0;
}

/*
 * Train to `target` optimizer steps, checking for preemption every
 * preempt_every steps. 1 when preempted, 0, or an error.
 */
static int train_to(struct run *r, int64_t target, int64_t *last_ckpt)
{
    while (r->g < target) {
        if (r->g % r->c->preempt_every == 0) {
            int64_t p = agree(r, r->rank == 0 ? atomic_load(&r->k->preempt) || got_term : 0);
            if (p != 0)
                return p < 0 ? (int)p : 1;
        }
        int rc = one_step(r);
        if (rc < 0) {
            snprintf(r->err, sizeof(r->err), "%s",
                     rc == -1 ? dtrain_errmsg(r->h) : "weights differ between ranks");
            return DTRAIN_EPEER;
        }
        if (r->g % r->c->report_every == 0 && (rc = report_training(r)) != 0)
            return rc;
        /* min_checkpoint_period: on the first step at or past each multiple (at the target,
         * the checkpoint after the validation is the one) */
        int64_t per = r->c->ckpt_period, b = r->g * r->c->agg;
        if (r->ckpt && per > 0 && b / per != (b - r->c->agg) / per && r->g != target) {
            if ((rc = checkpoint(r, NULL)) != 0)
                return rc;
            *last_ckpt = r->g;
        }
    }
    return 0;
}

/* Validate and report (all ranks evaluate; rank 0 reports). js gets the metrics. */
static int validate(struct run *r, char *js, size_t len)
{
    double loss = 0, acc = 0;
    int rc = 0;
    if (evaluate(r->m, r->test, r->rank, r->world, &loss, &acc, r->h) < 0) {
        snprintf(r->err, sizeof(r->err), "%s", dtrain_errmsg(r->h));
        return DTRAIN_EPEER;
    }
    r->test_acc = acc;
    snprintf(js, len, "{\"validation_loss\":%.17g,\"accuracy\":%.17g}", loss, acc);
    if (r->rank == 0) {
        printf("validation batches=%lld validation_loss=%.17g accuracy=%.17g\n",
               (long long)(r->g * r->c->agg), loss, acc);
        fflush(stdout);
        if ((rc = report_training(r)) == 0) {
            if (r->c->print_reports) {
                printf("report validation batches=%lld %s\n", (long long)(r->g * r->c->agg), js);
                fflush(stdout);
            }
            rc = dtrain_report_metrics(r->k->cl, "validation", r->g * r->c->agg, js, r->err);
            /* A validation is sent at once after the rows buffered before it: 0 means the
             * controller acknowledged all of them. */
            if (rc == 0 && r->c->print_reports) {
                printf("acked validation batches=%lld\n", (long long)(r->g * r->c->agg));
                fflush(stdout);
            }
        }
    } else {
        rc = report_training(r);
    }
    return (int)agree(r, rc);
}

/*
 * The searcher loop of a kdet trial: ask how far to train, train, validate,
 * report, checkpoint; until "stop" (0) or preemption (checkpoint, 0).
 */
static int run_trial(struct run *r)
{
    int rc = 0, preempted = 0;
    int64_t last_ckpt = r->g;
    char js[256];
    for (;;) {
        int64_t msg[3] = {0, 0, 0}; /* rc, stop, target steps */
        if (r->rank == 0) {
            int64_t len = 0;
            int stop = 0;
            msg[0] = dtrain_searcher_next(r->k->cl, from_steps(r, r->g), -1, &len, &stop, r->err);
            msg[1] = msg[0] == 0 && got_term ? DTRAIN_SEARCHER_PREEMPT : stop;
            msg[2] = to_steps(r, len);
        }
        if (dtrain_broadcast(r->h, msg, 3, DTRAIN_INT64, 0) < 0) {
            snprintf(r->err, sizeof(r->err), "%s", dtrain_errmsg(r->h));
            rc = DTRAIN_EPEER;
            goto out;
        }
        if ((rc = (int)msg[0]) != 0)
            goto out;
        if (msg[1] == DTRAIN_SEARCHER_STOP)
            break;
        if (msg[1] == DTRAIN_SEARCHER_PREEMPT) {
            preempted = 1;
            break;
        }
        if ((rc = train_to(r, msg[2], &last_ckpt)) < 0)
            goto out;
        if (rc == 1) {
            preempted = 1;
            rc = 0;
            break;
        }
        if ((rc = validate(r, js, sizeof(js))) != 0)
            goto out;
        if (r->ckpt) {
            if ((rc = checkpoint(r, js)) != 0)
                goto out;
            last_ckpt = r->g;
        }
    }
    if (r->rank == 0 && preempted)
        printf("preempted at batches=%lld%s: checkpoint and exit\n", (long long)(r->g * r->c->agg),
               got_term ? " (SIGTERM)" : "");
    if (r->ckpt && r->g != last_ckpt)
        rc = checkpoint(r, NULL);
out:
    return rc;
}

int main(int argc, char **argv)
{
    struct cfg c = {.data = "/usr/share/datasets/fashion-mnist",
                    .epochs = 3,
                    .hidden = 128,
                    .batch = 64,
                    .agg = 1,
                    .lr = 0.05,
                    .momentum = 0.9,
                    .wd = 1e-4,
                    .report_every = 50,
                    .preempt_every = 10};
    unsigned set = 0;
    struct dtrain *h = NULL;
    struct fm_set train = {0}, test = {0};
    struct mlp m = {0};
    struct fm_kdet k = {0};
    struct run r = {0};
    size_t *perm = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1, trc = 0;
    if (parse_args(argc, argv, &c, &set) < 0)
        return 2;
    if (c.report_every < 1 || c.preempt_every < 1) {
        fprintf(stderr, "fashion-mnist-c: --report-every and --preempt-check-every must be >= 1\n");
        return 2;
    }
    if (dtrain_init(&h, err) < 0) {
        fprintf(stderr, "fashion-mnist-c: %s\n", err);
        return 1;
    }
    if (apply_hparams(h, &c, set) < 0)
        goto out;
    int rank = dtrain_rank(h), world = dtrain_world_size(h);
    /* Rank 0 talks to kdet; whether this is a trial is its word, for every rank. */
    if (rank == 0 && (trc = fm_kdet_open(&k, err)) != 0)
        fprintf(stderr, "fashion-mnist-c: %s\n", err);
    const char *latest = getenv("KDET_LATEST_CHECKPOINT");
    int64_t mode[4] = {trc, k.cl != NULL, k.ck != NULL, latest != NULL && latest[0] != '\0'};
    if (dtrain_broadcast(h, mode, 4, DTRAIN_INT64, 0) < 0)
        goto dterr;
    if (mode[0] != 0)
        goto out;
    if (rank != 0)
        k.trial = getenv("KDET_TRIAL_ID") ? getenv("KDET_TRIAL_ID") : "";
    int managed = (int)mode[1];
    if (c.hidden < 1 || c.hidden > 8192 || c.batch < world || c.batch > 512 * world || c.agg < 1 ||
        c.agg > 1024 || !(c.lr > 0)) {
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "hidden_units %d must be in 1..8192, global_batch_size %d in %d..%d (world "
                 "size %d), aggregation_frequency %d in 1..1024, learning_rate %g > 0",
                 c.hidden, c.batch, world, 512 * world, world, c.agg, c.lr);
        fprintf(stderr, "fashion-mnist-c: %s\n", msg);
        if (k.cl != NULL && dtrain_exit_early(k.cl, "invalid_hp", msg, err) != 0)
            fprintf(stderr, "fashion-mnist-c: early exit: %s\n", err);
        goto out;
    }
    if (dtrain_local_world_size(h) > 1)
        openblas_set_num_threads(1); /* one core per rank */
    char e[256];
    if (fm_load(c.data, "train", c.train_limit, &train, e) < 0 ||
        fm_load(c.data, "t10k", c.test_limit, &test, e) < 0) {
        fprintf(stderr, "fashion-mnist-c: %s\n", e);
        goto out;
    }
    int local_max = (c.batch + world - 1) / world;
    if (mlp_init(&m, c.hidden, local_max > 256 ? local_max : 256, (uint64_t)c.seed) < 0) {
        fprintf(stderr, "fashion-mnist-c: out of memory\n");
        goto out;
    }
    struct train t = {.h = h};
    static const int order[] = {MLP_B2, MLP_W2, MLP_B1, MLP_W1}; /* backprop order */
    for (int q = 0; q < MLP_NTENSORS; q++) {
        int tn = order[q];
        if (dtrain_grads_register(h, m.grads + m.off[tn], m.len[tn], &t.ids[tn]) < 0)
            goto dterr;
    }
    size_t steps = train.n / (size_t)c.batch / (size_t)c.agg;
    if (c.batches > 0 && (size_t)c.batches < steps)
        steps = (size_t)c.batches;
    perm = malloc(train.n * sizeof(size_t));
    if (perm == NULL || steps == 0) {
        fprintf(stderr, "fashion-mnist-c: %s\n",
                perm ? "fewer training samples than one global batch" : "out of memory");
        goto out;
    }
    r = (struct run){.c = &c,
                     .h = h,
                     .m = &m,
                     .t = &t,
                     .train = &train,
                     .test = &test,
                     .perm = perm,
                     .k = &k,
                     .rank = rank,
                     .world = world,
                     .spe = steps,
                     .lo = (size_t)c.batch * (size_t)rank / (size_t)world,
                     .scale = (float)world / ((float)c.batch * (float)c.agg),
                     .ckpt = (int)mode[2],
                     .t0 = now_s()};
    r.nl = (int)((size_t)c.batch * (size_t)(rank + 1) / (size_t)world - r.lo);
    if (mode[3] && (trc = restore(&r, latest)) != 0) /* only rank 0 reads `latest` */
        goto trerr;
    /* Same init everywhere by seed; broadcast anyway so a rank with another seed cannot drift. */
    if (dtrain_broadcast(h, m.params, m.nparams, DTRAIN_FLOAT32, 0) < 0)
        goto dterr;
    if (rank == 0)
        printf("fashion-mnist-c: %d ranks (%s), %zu train / %zu test samples, hidden %d, global "
               "batch %d, aggregation %d, lr %g, momentum %g, weight decay %g, %zu steps/epoch\n",
               world, dtrain_transport_name(h), train.n, test.n, c.hidden, c.batch, c.agg, c.lr,
               c.momentum, c.wd, steps);
    if (managed) {
        /* Every rank: the launcher signals them all; rank 0's flag decides for everyone. */
        struct sigaction sa = {.sa_handler = on_term, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        if (rank == 0 && (trc = fm_kdet_watch(&k, r.err)) != 0)
            goto trerr;
        if ((trc = run_trial(&r)) != 0)
            goto trerr;
    } else {
        int64_t total = (int64_t)c.epochs * (int64_t)steps;
        while (r.g < total) {
            int s = one_step(&r);
            if (s == -2)
                goto out;
            if (s < 0 || (s == 1 && epoch_end(&r) < 0))
                goto dterr;
        }
        if (r.ckpt && (trc = checkpoint(&r, NULL)) != 0)
            goto trerr;
    }
    if (rank == 0 && (trc = fm_kdet_finish(&k, r.err)) != 0)
        goto trerr;
    if (c.check_sync && rank == 0)
        printf("weights identical on all %d ranks after every step\n", world);
    if (c.save != NULL && rank == 0) {
        FILE *f = fopen(c.save, "wb");
        if (f == NULL || fwrite(m.params, sizeof(float), m.nparams, f) != m.nparams) {
            fprintf(stderr, "fashion-mnist-c: cannot write %s\n", c.save);
            if (f != NULL)
                fclose(f);
            goto out;
        }
        fclose(f);
    }
    if (rank == 0 && !managed)
        printf("final test_accuracy=%.4f\n", r.test_acc);
    rc = 0;
    goto out;
trerr:
    /* Rank 0 has the cause; the others only know that rank 0 gave up. */
    fprintf(stderr, "fashion-mnist-c: rank %d: %s\n", rank, r.err[0] ? r.err : "failed");
    goto out;
dterr:
    fprintf(stderr, "fashion-mnist-c: rank %d: %s\n", dtrain_rank(h), dtrain_errmsg(h));
out:
    fm_kdet_close(&k);
    free(perm);
    mlp_free(&m);
    fm_free(&train);
    fm_free(&test);
    if (dtrain_finalize(h) < 0 && rc == 0)
        rc = 1;
    return rc;
}
