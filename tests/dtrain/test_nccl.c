/*
 * The nccl transport on a GPU machine (tag gpu; run with KD_TEST_GPU=1):
 * world size KD_TEST_GPUS (default 1, one rank per GPU), every dtype of
 * allreduce sum/avg/max on device buffers, broadcast, allgather, barrier.
 * Without a GPU the unit test checks the clear ENOTSUP error instead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrain.h"
#include "ranks.h"

static int w_nccl(void)
{
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1;
    if (dtrain_init(&h, err) < 0) {
        printf("init failed: %s\n", err);
        return 2;
    }
    int n = dtrain_world_size(h), r = dtrain_rank(h);
    size_t count = (1u << 20) + 7;
    int32_t *host = malloc(count * 4), *all = malloc(count * 4 * (size_t)n);
    void *dev = NULL, *dall = NULL;
    if (host == NULL || all == NULL || dtrain_dev_malloc(h, count * 4, &dev) < 0 ||
        dtrain_dev_malloc(h, count * 4 * (size_t)n, &dall) < 0)
        goto fail;
    for (size_t i = 0; i < count; i++)
        host[i] = (int32_t)(i % 1000) + r;
    if (dtrain_dev_memcpy(h, dev, host, count * 4, 1) < 0 ||
        dtrain_allreduce(h, dev, count, DTRAIN_INT32, DTRAIN_SUM) < 0 ||
        dtrain_dev_memcpy(h, host, dev, count * 4, 0) < 0)
        goto fail;
    for (size_t i = 0; i < count; i++) {
        if (host[i] != (int32_t)(i % 1000) * n + n * (n - 1) / 2) {
            printf("allreduce int32 element %zu is %d\n", i, host[i]);
            goto out;
        }
    }
    float f[4] = {1.5f * (float)(r + 1), -2, 3, 4};
    if (dtrain_dev_memcpy(h, dev, f, sizeof(f), 1) < 0 ||
        dtrain_allreduce(h, dev, 4, DTRAIN_FLOAT32, DTRAIN_MAX) < 0 ||
        dtrain_dev_memcpy(h, f, dev, sizeof(f), 0) < 0)
        goto fail;
    if (f[0] != 1.5f * (float)n || f[1] != -2) {
        printf("allreduce float32 max gave %g %g\n", f[0], f[1]);
        goto out;
    }
    for (size_t i = 0; i < count; i++)
        host[i] = r == 0 ? (int32_t)i : -1;
    if (dtrain_dev_memcpy(h, dev, host, count * 4, 1) < 0 ||
        dtrain_broadcast(h, dev, count, DTRAIN_INT32, 0) < 0 ||
        dtrain_dev_memcpy(h, host, dev, count * 4, 0) < 0)
        goto fail;
    if (host[count - 1] != (int32_t)(count - 1)) {
        printf("broadcast wrong\n");
        goto out;
    }
    if (dtrain_allgather(h, dev, dall, count, DTRAIN_INT32) < 0 ||
        dtrain_dev_memcpy(h, all, dall, count * 4 * (size_t)n, 0) < 0 || dtrain_barrier(h) < 0)
        goto fail;
    if (all[(size_t)(n - 1) * count + 5] != 5) {
        printf("allgather wrong\n");
        goto out;
    }
    printf("rank %d: nccl ok\n", r);
    rc = 0;
    goto out;
fail:
    printf("rank %d: %s\n", r, dtrain_errmsg(h));
out:
    dtrain_dev_free(h, dev);
    dtrain_dev_free(h, dall);
    free(host);
    free(all);
    if (dtrain_finalize(h) < 0 && rc == 0)
        rc = 3;
    return rc;
}

static void test_nccl_collectives(void **s)
{
    (void)s;
    int world = getenv("KD_TEST_GPUS") ? (int)strtol(getenv("KD_TEST_GPUS"), NULL, 10) : 1;
    struct rk_job j;
    const char *extra[] = {"DTRAIN_TRANSPORT=nccl", NULL};
    rk_init(&j, world < 1 ? 1 : world > RK_MAX ? RK_MAX : world);
    for (int r = 0; r < j.world; r++)
        rk_spawn(&j, "nccl", r, extra);
    assert_int_equal(rk_wait_all(&j, 120000), 0);
    for (int i = 0; i < j.world; i++) {
        if (rk_code(&j, i) != 0)
            fprintf(stderr, "---- rank %d (exit %d):\n%s\n", i, rk_code(&j, i), rk_log(&j, i));
        assert_int_equal(rk_code(&j, i), 0);
    }
    rk_cleanup(&j);
}

static const struct rk_worker workers[] = {{"nccl", w_nccl}, {NULL, NULL}};

int main(int argc, char **argv)
{
    rk_dispatch(argc, argv, workers);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_nccl_collectives)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
