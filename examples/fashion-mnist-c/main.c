/*
 * fashion-mnist-c: data-parallel training of an MLP on Fashion-MNIST with
 * libdtrain. Every rank sees the same shuffled order and takes its slice of
 * each global batch; gradients are averaged across ranks through
 * libdtrain's gradient buckets (the second layer's allreduce runs while the
 * first layer's gradient is computed), so all ranks apply the same update
 * and keep bit-identical weights. Loss and accuracy are printed per epoch.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "dtrain.h"
#include "mlp.h"

void openblas_set_num_threads(int num_threads);

struct cfg {
    const char *data;
    int epochs, batches, hidden, batch, agg;
    double lr, momentum, wd;
    size_t train_limit, test_limit;
    int64_t seed;
    int check_sync, quiet;
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

int main(int argc, char **argv)
{
    struct cfg c = {.data = "/usr/share/datasets/fashion-mnist",
                    .epochs = 3,
                    .hidden = 128,
                    .batch = 64,
                    .agg = 1,
                    .lr = 0.05,
                    .momentum = 0.9,
                    .wd = 1e-4};
    unsigned set = 0;
    struct dtrain *h = NULL;
    struct fm_set train = {0}, test = {0};
    struct mlp m = {0};
    size_t *perm = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1;
    if (parse_args(argc, argv, &c, &set) < 0)
        return 2;
    if (dtrain_init(&h, err) < 0) {
        fprintf(stderr, "fashion-mnist-c: %s\n", err);
        return 1;
    }
    if (apply_hparams(h, &c, set) < 0)
        goto out;
    int rank = dtrain_rank(h), world = dtrain_world_size(h);
    if (c.hidden < 1 || c.hidden > 8192 || c.batch < world || c.batch > 512 * world || c.agg < 1 ||
        c.agg > 1024 || !(c.lr > 0)) {
        fprintf(stderr,
                "fashion-mnist-c: hidden_units %d must be in 1..8192, global_batch_size %d in "
                "%d..%d (world size %d), aggregation_frequency %d in 1..1024, learning_rate "
                "%g > 0\n",
                c.hidden, c.batch, world, 512 * world, world, c.agg, c.lr);
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
    for (int k = 0; k < MLP_NTENSORS; k++) {
        int tn = order[k];
        if (dtrain_grads_register(h, m.grads + m.off[tn], m.len[tn], &t.ids[tn]) < 0)
            goto dterr;
    }
    /* Same init everywhere by seed; broadcast anyway so a rank with another seed cannot drift. */
    if (dtrain_broadcast(h, m.params, m.nparams, DTRAIN_FLOAT32, 0) < 0)
        goto dterr;
    size_t steps = train.n / (size_t)c.batch / (size_t)c.agg;
    if (c.batches > 0 && (size_t)c.batches < steps)
        steps = (size_t)c.batches;
    perm = malloc(train.n * sizeof(size_t));
    if (perm == NULL || steps == 0) {
        fprintf(stderr, "fashion-mnist-c: %s\n",
                perm ? "fewer training samples than one global batch" : "out of memory");
        goto out;
    }
    if (rank == 0)
        printf("fashion-mnist-c: %d ranks (%s), %zu train / %zu test samples, hidden %d, global "
               "batch %d, aggregation %d, lr %g, momentum %g, weight decay %g, %zu steps/epoch\n",
               world, dtrain_transport_name(h), train.n, test.n, c.hidden, c.batch, c.agg, c.lr,
               c.momentum, c.wd, steps);
    size_t lo = (size_t)c.batch * (size_t)rank / (size_t)world;
    int nl = (int)((size_t)c.batch * (size_t)(rank + 1) / (size_t)world - lo);
    float scale = (float)world / ((float)c.batch * (float)c.agg);
    double test_acc = 0;
    for (int ep = 1; ep <= c.epochs; ep++) {
        double t0 = now_s(), tl = 0;
        long tc = 0;
        shuffle(perm, train.n, (uint64_t)c.seed * 1000003u + (uint64_t)ep);
        for (size_t st = 0; st < steps; st++) {
            for (int a = 0; a < c.agg; a++) {
                const uint8_t *imgs[512];
                uint8_t labels[512];
                size_t base = (st * (size_t)c.agg + (size_t)a) * (size_t)c.batch + lo;
                for (int k = 0; k < nl; k++) {
                    size_t idx = perm[base + (size_t)k];
                    imgs[k] = train.images + idx * FM_PIXELS;
                    labels[k] = train.labels[idx];
                }
                mlp_set_input(&m, imgs, nl);
                t.ready = a == c.agg - 1;
                mlp_step(&m, nl, labels, scale, &tl, &tc, on_tensor_done, &t);
                if (t.err < 0)
                    goto dterr;
            }
            if (dtrain_grads_wait(h) < 0)
                goto dterr;
            mlp_update(&m, (float)c.lr, (float)c.momentum, (float)c.wd);
            if (c.check_sync) {
                int64_t mine = (int64_t)fnv(m.params, m.nparams * sizeof(float)), all[256];
                if (world > 256 || dtrain_allgather(h, &mine, all, 1, DTRAIN_INT64) < 0)
                    goto dterr;
                for (int q = 1; q < world; q++) {
                    if (all[q] != all[0]) {
                        fprintf(stderr,
                                "fashion-mnist-c: weights differ between rank 0 and "
                                "rank %d after epoch %d step %zu\n",
                                q, ep, st + 1);
                        goto out;
                    }
                }
            }
            if (rank == 0 && !c.quiet && (st + 1) % 200 == 0)
                printf("epoch %d step %zu/%zu local_loss=%.4f\n", ep, st + 1, steps,
                       tl / (double)((st + 1) * (size_t)c.agg * (size_t)nl));
            fflush(stdout);
        }
        double sums[3] = {tl, (double)tc, (double)(steps * (size_t)c.agg * (size_t)nl)};
        if (dtrain_allreduce(h, sums, 3, DTRAIN_FLOAT64, DTRAIN_SUM) < 0)
            goto dterr;
        double test_loss = 0;
        if (evaluate(&m, &test, rank, world, &test_loss, &test_acc, h) < 0)
            goto dterr;
        if (rank == 0)
            printf("epoch %d: train_loss=%.4f train_accuracy=%.4f test_loss=%.4f "
                   "test_accuracy=%.4f steps=%zu time=%.1fs\n",
                   ep, sums[0] / sums[2], sums[1] / sums[2], test_loss, test_acc, steps,
                   now_s() - t0);
        fflush(stdout);
    }
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
    if (rank == 0)
        printf("final test_accuracy=%.4f\n", test_acc);
    rc = 0;
    goto out;
dterr:
    fprintf(stderr, "fashion-mnist-c: rank %d: %s\n", dtrain_rank(h), dtrain_errmsg(h));
out:
    free(perm);
    mlp_free(&m);
    fm_free(&train);
    fm_free(&test);
    if (dtrain_finalize(h) < 0 && rc == 0)
        rc = 1;
    return rc;
}
