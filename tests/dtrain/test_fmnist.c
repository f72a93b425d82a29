/*
 * examples/fashion-mnist-c through libdtrain: weights bit-identical on all
 * ranks after every step (tcp and shm), 1 worker vs 2 workers at the same
 * global batch size give the same model, aggregation_frequency 2 at half
 * the batch equals one step at the full batch, bad flags are named, and
 * (tagged slow) the full run reaches 85% test accuracy.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ranks.h"

static int w_fm(void)
{
    char path[512], *argv[32], *args = getenv("T_ARGS");
    int n = 0;
    snprintf(path, sizeof(path), "%s/bin/fashion-mnist-c",
             getenv("KD_BUILD") ? getenv("KD_BUILD") : "build");
    argv[n++] = path;
    for (char *save = NULL, *tok = strtok_r(args, " ", &save); tok && n < 31;
         tok = strtok_r(NULL, " ", &save))
        argv[n++] = tok;
    argv[n] = NULL;
    execv(path, argv);
    perror("execv fashion-mnist-c");
    return 9;
}

/* Run the example on `world` ranks with args; returns rank 0's log (static). */
static const char *run(int world, const char *transport, const char *args, const char *hparams)
{
    static char log0[1 << 16];
    struct rk_job j;
    char a[512], t[64], hp[256];
    snprintf(a, sizeof(a), "T_ARGS=%s", args);
    snprintf(t, sizeof(t), "DTRAIN_TRANSPORT=%s", transport);
    snprintf(hp, sizeof(hp), "KDET_HPARAMS=%s", hparams ? hparams : "{}");
    const char *extra[] = {a, t, hp, "OPENBLAS_NUM_THREADS=1", NULL};
    rk_init(&j, world);
    for (int r = 0; r < world; r++)
        rk_spawn(&j, "fm", r, extra);
    assert_int_equal(rk_wait_all(&j, 200000), 0);
    for (int i = 0; i < world; i++) {
        if (rk_code(&j, i) != 0)
            fprintf(stderr, "---- rank %d (exit %d):\n%s\n", i, rk_code(&j, i), rk_log(&j, i));
        assert_int_equal(rk_code(&j, i), 0);
    }
    snprintf(log0, sizeof(log0), "%s", rk_log(&j, 0));
    rk_cleanup(&j);
    return log0;
}

static float *load(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *w = malloc((size_t)len);
    assert_non_null(w);
    assert_int_equal(fread(w, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len / sizeof(float);
    return w;
}

static double max_diff(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    float *wa = load(a, &na), *wb = load(b, &nb);
    assert_int_equal(na, nb);
    assert_true(na > 100000);
    double d = 0, norm = 0;
    for (size_t i = 0; i < na; i++) {
        d = fmax(d, fabs((double)wa[i] - wb[i]));
        norm = fmax(norm, fabs((double)wa[i]));
    }
    free(wa);
    free(wb);
    printf("max |w1 - w2| = %.3g (max |w| = %.3g)\n", d, norm);
    return d;
}

#define SMALL "--train-limit 6400 --test-limit 1000 --epochs 1 --quiet"

static void test_sync_tcp(void **s)
{
    (void)s;
    const char *log = run(2, "tcp", SMALL " --batches 40 --check-sync", NULL);
    assert_non_null(strstr(log, "weights identical on all 2 ranks after every step"));
    assert_non_null(strstr(log, "test_accuracy="));
}

static void test_sync_shm_3_ranks(void **s)
{
    (void)s;
    const char *log = run(3, "shm", SMALL " --batches 40 --check-sync",
                          "{\"global_batch_size\": 96, \"hidden_units\": 64}");
    assert_non_null(strstr(log, "weights identical on all 3 ranks after every step"));
    assert_non_null(strstr(log, "hidden 64, global batch 96")); /* hparams were read */
}

static void test_one_vs_two_workers(void **s)
{
    (void)s;
    char w1[] = "/tmp/fm-w1-XXXXXX", w2[] = "/tmp/fm-w2-XXXXXX", w3[] = "/tmp/fm-w3-XXXXXX";
    int fds[3] = {mkstemp(w1), mkstemp(w2), mkstemp(w3)};
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    char args[512];
    snprintf(args, sizeof(args), SMALL " --batches 30 --batch-size 64 --save-weights %s", w1);
    run(1, "tcp", args, NULL);
    snprintf(args, sizeof(args), SMALL " --batches 30 --batch-size 64 --save-weights %s", w2);
    run(2, "tcp", args, NULL);
    assert_true(max_diff(w1, w2) < 1e-5);
    /* aggregation_frequency 2 at half the batch: the same samples per update */
    snprintf(args, sizeof(args),
             SMALL " --batches 30 --batch-size 32 --aggregation-frequency 2 --save-weights %s", w3);
    run(2, "shm", args, NULL);
    assert_true(max_diff(w1, w3) < 1e-5);
    unlink(w1);
    unlink(w2);
    unlink(w3);
}

static void test_bad_flags_are_named(void **s)
{
    (void)s;
    struct rk_job j;
    const char *extra[] = {"T_ARGS=--epochs many", NULL};
    rk_init(&j, 1);
    rk_spawn(&j, "fm", 0, extra);
    assert_int_equal(rk_wait_all(&j, 20000), 0);
    assert_int_equal(rk_code(&j, 0), 2);
    assert_non_null(strstr(rk_log(&j, 0), "--epochs many: expected a number"));
    rk_cleanup(&j);
    const char *nodata[] = {"T_ARGS=--data /nonexistent", NULL};
    rk_init(&j, 1);
    rk_spawn(&j, "fm", 0, nodata);
    assert_int_equal(rk_wait_all(&j, 20000), 0);
    assert_int_equal(rk_code(&j, 0), 1);
    assert_non_null(strstr(rk_log(&j, 0), "/nonexistent/train-images-idx3-ubyte.gz"));
    rk_cleanup(&j);
}

static void test_full_accuracy(void **s)
{
    (void)s;
    if (getenv("T_FULL") == NULL)
        skip();
    const char *log = run(2, "shm", "--epochs 4 --lr 0.02 --quiet --check-sync", NULL);
    const char *p = strstr(log, "final test_accuracy=");
    assert_non_null(p);
    double acc = strtod(p + strlen("final test_accuracy="), NULL);
    printf("2 workers, 4 epochs: test accuracy %.4f\n", acc);
    assert_true(acc >= 0.85);
}

static const struct rk_worker workers[] = {{"fm", w_fm}, {NULL, NULL}};

int main(int argc, char **argv)
{
    rk_dispatch(argc, argv, workers);
    const struct CMUnitTest quick[] = {
        cmocka_unit_test(test_sync_tcp),
        cmocka_unit_test(test_sync_shm_3_ranks),
        cmocka_unit_test(test_one_vs_two_workers),
        cmocka_unit_test(test_bad_flags_are_named),
    };
    const struct CMUnitTest full[] = {cmocka_unit_test(test_full_accuracy)};
    if (argc > 1 && strcmp(argv[1], "--full") == 0) {
        setenv("T_FULL", "1", 1);
        return cmocka_run_group_tests(full, NULL, NULL);
    }
    return cmocka_run_group_tests(quick, NULL, NULL);
}
