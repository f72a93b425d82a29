/*
 * A rank killed with SIGKILL in the middle of allreduces: every other rank
 * must return an error naming the dead rank well within the op timeout
 * (30 s here; the test allows 10 s), on tcp and shm, whether the dead rank
 * is a worker or the chief. Nothing may be left over.
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
    size_t n = 1u << 18;
    float *buf = calloc(n, sizeof(float));
    const char *mark = getenv("T_MARK");
    int rc = 0;
    for (int it = 0; buf != NULL; it++) {
        if (dtrain_allreduce(h, buf, n, DTRAIN_FLOAT32, DTRAIN_AVG) < 0) {
            printf("ERROR after %d iterations: %s\n", it, dtrain_errmsg(h));
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

static void kill_one(const char *transport, int world, int victim)
{
    struct rk_job j;
    char tenv[64], mark[128], menv[160];
    rk_init(&j, world);
    snprintf(tenv, sizeof(tenv), "DTRAIN_TRANSPORT=%s", transport);
    snprintf(mark, sizeof(mark), "%s/mark", j.dir);
    snprintf(menv, sizeof(menv), "T_MARK=%s", mark);
    const char *extra[] = {tenv, menv, "DTRAIN_TIMEOUT=30", NULL};
    for (int r = 0; r < world; r++)
        rk_spawn(&j, "loop", r, extra);
    /* wait until every rank is inside the allreduce loop */
    for (int r = 0; r < world; r++) {
        char p[256];
        snprintf(p, sizeof(p), "%s.%d", mark, r);
        for (int t = 0; t < 2000 && access(p, F_OK) != 0; t++)
            usleep(10000);
        assert_int_equal(access(p, F_OK), 0);
        unlink(p);
    }
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
    printf("%s: rank %d killed, the others failed naming it after %.2f s\n", transport, victim,
           took);
    assert_int_equal(killed, 0);
    assert_true(took < 10.0);
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

static const struct rk_worker workers[] = {{"loop", w_loop}, {NULL, NULL}};

int main(int argc, char **argv)
{
    rk_dispatch(argc, argv, workers);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_worker_dies),
        cmocka_unit_test(test_tcp_chief_dies),
        cmocka_unit_test(test_shm_worker_dies),
        cmocka_unit_test(test_shm_chief_dies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
