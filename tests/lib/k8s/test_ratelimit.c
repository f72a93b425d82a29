/* The client-side token bucket (QPS/burst, from several threads) and the jittered retry backoff. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "core/time.h"
#include "k8s/client.h"

static void test_burst_then_rate(void **state)
{
    (void)state;
    struct kd_k8s_bucket *b = kd_k8s_bucket_new(50.0, 5);
    int64_t t0 = kd_mono_ms();
    for (int i = 0; i < 5; i++)
        assert_int_equal(kd_k8s_bucket_take(b), 0); /* the burst is free */
    assert_true(kd_mono_ms() - t0 < 50);
    for (int i = 0; i < 25; i++)
        kd_k8s_bucket_take(b);
    int64_t dt = kd_mono_ms() - t0;
    printf("30 takes at qps=50 burst=5: %lld ms (ideal 500)\n", (long long)dt);
    assert_true(dt >= 480);
    assert_true(dt < 1500);
    kd_k8s_bucket_free(b);
}

static void *taker(void *arg)
{
    for (int i = 0; i < 10; i++)
        kd_k8s_bucket_take(arg);
    return NULL;
}

static void test_threads_share_the_rate(void **state)
{
    (void)state;
    struct kd_k8s_bucket *b = kd_k8s_bucket_new(100.0, 1);
    pthread_t t[4];
    int64_t t0 = kd_mono_ms();
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, taker, b), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    int64_t dt = kd_mono_ms() - t0;
    printf("40 takes from 4 threads at qps=100 burst=1: %lld ms (ideal 390)\n", (long long)dt);
    assert_true(dt >= 370);
    assert_true(dt < 1500);
    kd_k8s_bucket_free(b);
    /* unlimited */
    assert_int_equal(kd_k8s_bucket_take(NULL), 0);
}

static void test_backoff_bounds(void **state)
{
    (void)state;
    long seen_lo = 1L << 30, seen_hi = 0;
    for (int attempt = 0; attempt < 12; attempt++) {
        long d = 100L << (attempt < 7 ? attempt : 7);
        if (d > 5000)
            d = 5000;
        for (int i = 0; i < 200; i++) {
            long v = kd_k8s_backoff_ms(attempt, 100, 5000, 0);
            if (v < d / 2 || v > d)
                fail_msg("attempt %d: %ld outside [%ld, %ld]", attempt, v, d / 2, d);
            if (attempt == 0 && v < seen_lo)
                seen_lo = v;
            if (attempt == 0 && v > seen_hi)
                seen_hi = v;
        }
    }
    assert_true(seen_hi - seen_lo >= 20); /* jittered, not constant */
    /* Retry-After raises the delay, still capped */
    assert_true(kd_k8s_backoff_ms(0, 100, 5000, 2) >= 2000);
    assert_true(kd_k8s_backoff_ms(0, 100, 5000, 2) <= 2000);
    assert_int_equal(kd_k8s_backoff_ms(0, 100, 5000, 60), 5000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_rate),
        cmocka_unit_test(test_threads_share_the_rate),
        cmocka_unit_test(test_backoff_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
