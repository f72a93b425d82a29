/*
 * A rank killed with SIGKILL in the middle of allreduces: every other rank
 * must return an error naming the dead rank well within the op timeout
 * (30 s here; the test allows 10 s), on tcp and shm, whether the dead rank
 * is a worker or the chief, for large messages and for the small-message
 * paths (shm flat, tcp gather). A rank that stops (SIGSTOP) without dying
 * makes the others fail with a timeout naming what they waited for. Nothing
 * may be left over.
 */
#include <setjmp.h>
#include <signal.h>
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

static int w_loop(void)
{
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    if (dtrain_init(&h, err) < 0) {
        printf("init failed: %s\n", err);
        return 2;
    }
    size_t n = getenv("T_COUNT") != NULL ? (size_t)strtoul(getenv("T_COUNT"), NULL, 10) : 1u << 18;
    float *buf = calloc(n, sizeof(float));
    const char *mark = getenv("T_MARK");
    int rc = 0;
    for (int it = 0; buf != NULL; it++) {
        if (dtrain_allreduce(h, buf, n, DTRAIN_FLOAT32, DTRAIN_AVG) < 0) {
            printf("ERROR after %d iterations: %s\n", it, dtrain_errmsg(h));
            fflush(stdout); /* the test watches for it while we finalize */
            rc = 3;
            break;
        }
        if (it == 3 && mark != NULL) {
            char p[256];
            snprintf(p, sizeof(p), "%s.%d", mark, dtrain_rank(h));
            FILE *f = fopen(p, "w");
            if (f != NULL)
                fclose(f);
        }
    }
    /* A second collective after the failure is refused, not hung. */
    if (rc == 3 && dtrain_barrier(h) != DTRAIN_ESTATE)
        rc = 4;
    free(buf);
    dtrain_finalize(h);
    fflush(stdout);
    return rc;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* Start `world` ranks looping over allreduces of `count` floats; returns once all loop. */
static void start_loop(struct rk_job *j, const char *transport, int world, size_t count,
                       const char *timeout)
{
    char tenv[64], mark[128], menv[160], cenv[64], toenv[64];
    rk_init(j, world);
    snprintf(tenv, sizeof(tenv), "DTRAIN_TRANSPORT=%s", transport);
    snprintf(mark, sizeof(mark), "%s/mark", j->dir);
    snprintf(menv, sizeof(menv), "T_MARK=%s", mark);
    snprintf(cenv, sizeof(cenv), "T_COUNT=%zu", count);
    snprintf(toenv, sizeof(toenv), "DTRAIN_TIMEOUT=%s", timeout);
    const char *extra[] = {tenv, menv, cenv, toenv, NULL};
    for (int r = 0; r < world; r++)
        rk_spawn(j, "loop", r, extra);
    /* wait until every rank is inside the allreduce loop */
    for (int r = 0; r < world; r++) {
        char p[256];
        snprintf(p, sizeof(p), "%s.%d", mark, r);
        for (int t = 0; t < 2000 && access(p, F_OK) != 0; t++)
            usleep(10000);
        assert_int_equal(access(p, F_OK), 0);
        unlink(p);
    }
}

static void kill_one_count(const char *transport, int world, int victim, size_t count)
{
    struct rk_job j;
    start_loop(&j, transport, world, count, "30");
    double t0 = now_s();
    kill(j.p[victim].pid, SIGKILL);
    int killed = rk_wait_all(&j, 20000);
    double took = now_s() - t0;
    char needle[32];
    snprintf(needle, sizeof(needle), "rank %d ", victim);
    for (int i = 0; i < world; i++) {
        if (i == victim) {
            assert_int_equal(rk_code(&j, i), -SIGKILL);
            continue;
        }
        const char *log = rk_log(&j, i);
        if (rk_code(&j, i) != 3 || strstr(log, needle) == NULL)
            fprintf(stderr, "---- rank %d (exit %d):\n%s\n", i, rk_code(&j, i), log);
        assert_int_equal(rk_code(&j, i), 3);
        assert_non_null(strstr(log, needle));
    }
    printf("%s, %zu floats: rank %d killed, the others failed naming it after %.2f s\n", transport,
           count, victim, took);
    assert_int_equal(killed, 0);
    assert_true(took < 10.0);
    rk_cleanup(&j);
}

static void kill_one(const char *transport, int world, int victim)
{
    kill_one_count(transport, world, victim, 1u << 18);
}

/* A worker that stops without dying: the others time out (2 s) naming what they waited for. */
static void stop_one(const char *transport, int world, int victim, size_t count)
{
    struct rk_job j;
    start_loop(&j, transport, world, count, "2");
    double t0 = now_s();
    kill(j.p[victim].pid, SIGSTOP);
    for (int i = 0; i < world; i++) {
        if (i == victim)
            continue;
        for (int t = 0; t < 1000 && strstr(rk_log(&j, i), "ERROR after") == NULL; t++)
            usleep(10000);
    }
    double took = now_s() - t0;
    kill(j.p[victim].pid, SIGKILL); /* lets the chief's finalize see it gone */
    int killed = rk_wait_all(&j, 20000);
    char needle[32];
    snprintf(needle, sizeof(needle), "rank %d ", victim);
    for (int i = 0; i < world; i++) {
        if (i == victim)
            continue;
        const char *log = rk_log(&j, i);
        const char *e = strstr(log, "timed out after 2000 ms");
        if (rk_code(&j, i) != 3 || e == NULL || strstr(e, needle) == NULL)
            fprintf(stderr, "---- rank %d (exit %d):\n%s\n", i, rk_code(&j, i), log);
        assert_int_equal(rk_code(&j, i), 3);
        assert_non_null(e);
        assert_non_null(strstr(e, needle));
    }
    printf("%s, %zu floats: rank %d stopped, the others timed out after %.2f s\n", transport, count,
           victim, took);
    assert_int_equal(killed, 0);
    assert_true(took > 1.5 && took < 8.0);
    rk_cleanup(&j);
}

static void test_tcp_worker_dies(void **s)
{
    (void)s;
    kill_one("tcp", 4, 2);
}
static void test_tcp_chief_dies(void **s)
{
    (void)s;
    kill_one("tcp", 3, 0);
}
static void test_shm_worker_dies(void **s)
{
    (void)s;
    kill_one("shm", 3, 1);
}
static void test_shm_chief_dies(void **s)
{
    (void)s;
    kill_one("shm", 2, 0);
}

static void test_shm_small_worker_dies(void **s)
{
    (void)s;
    kill_one_count("shm", 3, 2, 64);
}
static void test_shm_small_chief_dies(void **s)
{
    (void)s;
    kill_one_count("shm", 2, 0, 1000);
}
static void test_tcp_small_worker_dies(void **s)
{
    (void)s;
    kill_one_count("tcp", 2, 1, 64);
}
static void test_shm_small_stopped_rank_times_out(void **s)
{
    (void)s;
    stop_one("shm", 3, 1, 64);
}
static void test_tcp_small_stopped_rank_times_out(void **s)
{
    (void)s;
    stop_one("tcp", 3, 2, 64);
}

static const struct rk_worker workers[] = {{"loop", w_loop}, {NULL, NULL}};

int main(int argc, char **argv)
{
    rk_dispatch(argc, argv, workers);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_worker_dies),
        cmocka_unit_test(test_tcp_chief_dies),
        cmocka_unit_test(test_shm_worker_dies),
        cmocka_unit_test(test_shm_chief_dies),
        cmocka_unit_test(test_shm_small_worker_dies),
        cmocka_unit_test(test_shm_small_chief_dies),
        cmocka_unit_test(test_tcp_small_worker_dies),
        cmocka_unit_test(test_shm_small_stopped_rank_times_out),
        cmocka_unit_test(test_tcp_small_stopped_rank_times_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
