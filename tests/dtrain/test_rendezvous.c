/*
 * Rendezvous across real processes: the chief started late (workers retry
 * with backoff), a stale worker of another attempt, a wrong world size and
 * a rank collision are rejected while the right workers still join, the
 * timeout names the missing ranks, and `dtrain check rendezvous` works.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtrain.h"
#include "ranks.h"

static int w_join(void)
{
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1;
    if (dtrain_init(&h, err) < 0) {
        printf("init failed: %s\n", err);
        return 2;
    }
    int n = dtrain_world_size(h);
    int64_t v = dtrain_rank(h);
    if (dtrain_allreduce(h, &v, 1, DTRAIN_INT64, DTRAIN_SUM) < 0 || dtrain_barrier(h) < 0) {
        printf("collective failed: %s\n", dtrain_errmsg(h));
        goto out;
    }
    if (v != (int64_t)n * (n - 1) / 2) {
        printf("sum of ranks %lld, expected %d\n", (long long)v, n * (n - 1) / 2);
        goto out;
    }
    printf("joined rank %d of %d\n", dtrain_rank(h), n);
    rc = 0;
out:
    if (dtrain_finalize(h) < 0 && rc == 0)
        rc = 3;
    return rc;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void expect_ok(struct rk_job *j, int i)
{
    if (rk_code(j, i) != 0)
        fprintf(stderr, "---- process %d (exit %d):\n%s\n", i, rk_code(j, i), rk_log(j, i));
    assert_int_equal(rk_code(j, i), 0);
    assert_non_null(strstr(rk_log(j, i), "joined rank"));
}

static void expect_fail(struct rk_job *j, int i, const char *needle)
{
    const char *log = rk_log(j, i);
    if (rk_code(j, i) == 0 || strstr(log, needle) == NULL)
        fprintf(stderr, "---- process %d (exit %d), wanted '%s':\n%s\n", i, rk_code(j, i), needle,
                log);
    assert_int_not_equal(rk_code(j, i), 0);
    assert_non_null(strstr(log, needle));
}

static void test_late_chief(void **s)
{
    (void)s;
    struct rk_job j;
    rk_init(&j, 3);
    rk_spawn(&j, "join", 1, NULL);
    rk_spawn(&j, "join", 2, NULL);
    sleep_ms(1500); /* the workers retry with backoff meanwhile */
    rk_spawn(&j, "join", 0, NULL);
    assert_int_equal(rk_wait_all(&j, 30000), 0);
    for (int i = 0; i < 3; i++)
        expect_ok(&j, i);
    rk_cleanup(&j);
}

static void test_stale_run_id(void **s)
{
    (void)s;
    struct rk_job j;
    const char *stale[] = {"KDET_RUN_ID=run-0", NULL};
    rk_init(&j, 2);
    int chief = rk_spawn(&j, "join", 0, NULL);
    int old = rk_spawn(&j, "join", 1, stale);
    assert_true(rk_wait(&j, old, 15000));
    expect_fail(&j, old, "run id mismatch");
    int good = rk_spawn(&j, "join", 1, NULL);
    assert_int_equal(rk_wait_all(&j, 30000), 0);
    expect_ok(&j, chief);
    expect_ok(&j, good);
    rk_cleanup(&j);
}

static void test_wrong_world_size(void **s)
{
    (void)s;
    struct rk_job j;
    const char *bad[] = {"WORLD_SIZE=3", NULL};
    rk_init(&j, 2);
    int chief = rk_spawn(&j, "join", 0, NULL);
    int wrong = rk_spawn(&j, "join", 1, bad);
    assert_true(rk_wait(&j, wrong, 15000));
    expect_fail(&j, wrong, "world size mismatch");
    int good = rk_spawn(&j, "join", 1, NULL);
    assert_int_equal(rk_wait_all(&j, 30000), 0);
    expect_ok(&j, chief);
    expect_ok(&j, good);
    rk_cleanup(&j);
}

static void test_rank_collision(void **s)
{
    (void)s;
    struct rk_job j;
    rk_init(&j, 3);
    int chief = rk_spawn(&j, "join", 0, NULL);
    int first = rk_spawn(&j, "join", 1, NULL);
    sleep_ms(800); /* let the first rank 1 join */
    int second = rk_spawn(&j, "join", 1, NULL);
    assert_true(rk_wait(&j, second, 15000));
    expect_fail(&j, second, "rank collision");
    int r2 = rk_spawn(&j, "join", 2, NULL);
    assert_int_equal(rk_wait_all(&j, 30000), 0);
    expect_ok(&j, chief);
    expect_ok(&j, first);
    expect_ok(&j, r2);
    rk_cleanup(&j);
}

static void test_timeouts_name_what_is_missing(void **s)
{
    (void)s;
    struct rk_job j;
    const char *quick[] = {"DTRAIN_RENDEZVOUS_TIMEOUT=1", NULL};
    rk_init(&j, 3);
    int chief = rk_spawn(&j, "join", 0, quick);
    int r1 = rk_spawn(&j, "join", 1, quick);
    assert_int_equal(rk_wait_all(&j, 10000), 0);
    expect_fail(&j, chief, "missing ranks: 2");
    expect_fail(&j, r1, "rendezvous");
    rk_cleanup(&j);

    rk_init(&j, 2); /* no chief at all */
    int lone = rk_spawn(&j, "join", 1, quick);
    assert_int_equal(rk_wait_all(&j, 10000), 0);
    expect_fail(&j, lone, "could not reach the chief");
    rk_cleanup(&j);
}

static int w_tool(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/bin/dtrain",
             getenv("KD_BUILD") ? getenv("KD_BUILD") : "build");
    char *argv[] = {path, "check", "rendezvous", NULL};
    execv(path, argv);
    perror("execv dtrain");
    return 9;
}

static void test_check_tool(void **s)
{
    (void)s;
    struct rk_job j;
    const char *tok[] = {"KDET_TOKEN=s3cr3t-t0ken-value", NULL};
    rk_init(&j, 2);
    rk_spawn(&j, "tool", 0, tok);
    rk_spawn(&j, "tool", 1, tok);
    assert_int_equal(rk_wait_all(&j, 30000), 0);
    for (int i = 0; i < 2; i++) {
        const char *log = rk_log(&j, i);
        if (rk_code(&j, i) != 0)
            fprintf(stderr, "---- %d:\n%s\n", i, log);
        assert_int_equal(rk_code(&j, i), 0);
        assert_non_null(strstr(log, "rendezvous ok"));
        assert_non_null(strstr(log, "allreduce ok: sum of rank+1 over 2 ranks = 3"));
        assert_null(strstr(log, "s3cr3t")); /* the token is never printed */
    }
    rk_cleanup(&j);
}

static int w_bench(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/bin/dtrain",
             getenv("KD_BUILD") ? getenv("KD_BUILD") : "build");
    char *argv[] = {path, "bench",  "allreduce", "--size",  "4K..16K", "--iters",
                    "6",  "--reps", "3",         "--dtype", "bf16",    NULL};
    execv(path, argv);
    perror("execv dtrain");
    return 9;
}

static void test_bench_tool(void **s)
{
    (void)s;
    struct rk_job j;
    const char *tcp[] = {"DTRAIN_TRANSPORT=tcp", NULL};
    rk_init(&j, 2);
    rk_spawn(&j, "bench", 0, tcp);
    rk_spawn(&j, "bench", 1, tcp);
    assert_int_equal(rk_wait_all(&j, 30000), 0);
    const char *log = rk_log(&j, 0);
    if (rk_code(&j, 0) != 0 || rk_code(&j, 1) != 0)
        fprintf(stderr, "---- rank 0:\n%s\n---- rank 1:\n%s\n", log, rk_log(&j, 1));
    assert_int_equal(rk_code(&j, 0), 0);
    assert_int_equal(rk_code(&j, 1), 0);
    assert_non_null(strstr(log, "2 ranks, transport tcp, dtype bfloat16, op sum"));
    const char *sizes[] = {"4K", "8K", "16K"};
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof(want), "%10s %8d ", sizes[i], 6);
        assert_non_null(strstr(log, want));
    }
    assert_null(strstr(log, "32K"));
    rk_cleanup(&j);
}

static const struct rk_worker workers[] = {
    {"join", w_join}, {"tool", w_tool}, {"bench", w_bench}, {NULL, NULL}};

int main(int argc, char **argv)
{
    rk_dispatch(argc, argv, workers);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_chief),
        cmocka_unit_test(test_stale_run_id),
        cmocka_unit_test(test_wrong_world_size),
        cmocka_unit_test(test_rank_collision),
        cmocka_unit_test(test_timeouts_name_what_is_missing),
        cmocka_unit_test(test_check_tool),
        cmocka_unit_test(test_bench_tool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
