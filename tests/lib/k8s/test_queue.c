/*
 * Work queue semantics: de-duplication, one worker per key, re-queue after
 * done, per-key backoff timing, delayed adds, worker error handling and a
 * shutdown that drains. Multi-threaded where the property is about threads.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/time.h"
#include "k8s/queue.h"

static char *get(struct kd_k8s_queue *q)
{
    char *k = NULL;
    assert_int_equal(kd_k8s_queue_get(q, &k), 0);
    return k;
}

static void test_dedup_and_order(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    kd_k8s_queue_add(q, "ns/a");
    kd_k8s_queue_add(q, "ns/b");
    kd_k8s_queue_add(q, "ns/a");
    assert_int_equal(kd_k8s_queue_len(q), 2);
    char *k = get(q);
    assert_string_equal(k, "ns/a");
    /* re-added while in process: not ready until done, then exactly once */
    kd_k8s_queue_add(q, "ns/a");
    kd_k8s_queue_add(q, "ns/a");
    assert_int_equal(kd_k8s_queue_len(q), 1);
    char *k2 = get(q);
    assert_string_equal(k2, "ns/b");
    assert_int_equal(kd_k8s_queue_len(q), 0);
    kd_k8s_queue_done(q, k);
    assert_int_equal(kd_k8s_queue_len(q), 1);
    kd_k8s_queue_done(q, k2);
    free(k);
    free(k2);
    k = get(q);
    assert_string_equal(k, "ns/a");
    kd_k8s_queue_done(q, k);
    free(k);
    assert_int_equal(kd_k8s_queue_len(q), 0);
    kd_k8s_queue_free(q);
}

#define NKEYS 40
#define NPRODUCERS 3
#define ADDS_EACH 3000

struct mt {
    struct kd_k8s_queue *q;
    atomic_int busy[NKEYS]; /* workers inside fn for this key */
    atomic_int gen[NKEYS];  /* bumped before each add */
    atomic_int seen[NKEYS]; /* gen read when processing started */
    atomic_int violations;  /* a key processed by two workers at once */
    atomic_int running;     /* workers inside fn, any key */
    atomic_int max_running;
    atomic_int processed;
};

static int mt_fn(const char *key, long *after, void *ud)
{
    struct mt *m = ud;
    int k = (int)strtol(key + 1, NULL, 10);
    (void)after;
    if (atomic_fetch_add(&m->busy[k], 1) != 0)
        atomic_fetch_add(&m->violations, 1);
    int r = atomic_fetch_add(&m->running, 1) + 1;
    int mx = atomic_load(&m->max_running);
    while (r > mx && !atomic_compare_exchange_weak(&m->max_running, &mx, r))
        ;
    atomic_store(&m->seen[k], atomic_load(&m->gen[k]));
    kd_sleep_ms(1);
    atomic_fetch_sub(&m->running, 1);
    atomic_fetch_sub(&m->busy[k], 1);
    atomic_fetch_add(&m->processed, 1);
    return 0;
}

static void *producer(void *arg)
{
    struct mt *m = arg;
    unsigned seed = (unsigned)(uintptr_t)arg ^ (unsigned)kd_mono_ns();
    for (int i = 0; i < ADDS_EACH; i++) {
        int k = (int)(rand_r(&seed) % NKEYS);
        char key[16];
        snprintf(key, sizeof(key), "k%d", k);
        atomic_fetch_add(&m->gen[k], 1);
        kd_k8s_queue_add(m->q, key);
        if (i % 64 == 0)
            kd_sleep_ms(1);
    }
    return NULL;
}

static void test_many_workers_never_share_a_key(void **state)
{
    (void)state;
    struct mt *m = calloc(1, sizeof(*m));
    pthread_t prod[NPRODUCERS];
    m->q = kd_k8s_queue_new(NULL);
    assert_int_equal(kd_k8s_queue_start_workers(m->q, 8, mt_fn, m), 0);
    for (int i = 0; i < NPRODUCERS; i++)
        assert_int_equal(pthread_create(&prod[i], NULL, producer, m), 0);
    for (int i = 0; i < NPRODUCERS; i++)
        pthread_join(prod[i], NULL);
    kd_k8s_queue_shutdown(m->q, true);
    printf("processed %d of %d adds, max %d workers at once, %d violations\n",
           atomic_load(&m->processed), NPRODUCERS * ADDS_EACH, atomic_load(&m->max_running),
           atomic_load(&m->violations));
    assert_int_equal(atomic_load(&m->violations), 0);
    assert_true(atomic_load(&m->max_running) > 1);
    assert_true(atomic_load(&m->processed) < NPRODUCERS * ADDS_EACH);
    /* no update lost: every key was processed after its last add */
    for (int k = 0; k < NKEYS; k++) {
        if (atomic_load(&m->gen[k]) > 0)
            assert_int_equal(atomic_load(&m->seen[k]), atomic_load(&m->gen[k]));
    }
    kd_k8s_queue_free(m->q);
    free(m);
}

static void test_backoff_timing(void **state)
{
    (void)state;
    struct kd_k8s_queue_opts o = {.base_delay_ms = 20, .max_delay_ms = 80};
    struct kd_k8s_queue *q = kd_k8s_queue_new(&o);
    const long want[] = {20, 40, 80, 80};
    for (int i = 0; i < 4; i++) {
        int64_t t0 = kd_mono_ms();
        kd_k8s_queue_add_rate_limited(q, "x");
        assert_int_equal(kd_k8s_queue_num_requeues(q, "x"), i + 1);
        assert_int_equal(kd_k8s_queue_len(q), 0);
        char *k = get(q);
        int64_t dt = kd_mono_ms() - t0;
        printf("failure %d: requeued after %lld ms (want %ld)\n", i + 1, (long long)dt, want[i]);
        assert_true(dt >= want[i]);
        assert_true(dt < want[i] + 400); /* generous: the build machine is shared */
        kd_k8s_queue_done(q, k);
        free(k);
    }
    kd_k8s_queue_forget(q, "x");
    assert_int_equal(kd_k8s_queue_num_requeues(q, "x"), 0);
    int64_t t0 = kd_mono_ms();
    kd_k8s_queue_add_rate_limited(q, "x");
    char *k = get(q);
    assert_true(kd_mono_ms() - t0 < 20 + 400);
    kd_k8s_queue_done(q, k);
    free(k);
    kd_k8s_queue_free(q);
}

static void test_add_after(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    int64_t t0 = kd_mono_ms();
    kd_k8s_queue_add_after(q, "late", 5000);
    kd_k8s_queue_add_after(q, "late", 60); /* the earlier time wins */
    kd_k8s_queue_add_after(q, "soon", 30);
    assert_int_equal(kd_k8s_queue_len(q), 0);
    char *a = get(q);
    int64_t ta = kd_mono_ms() - t0;
    char *b = get(q);
    int64_t tb = kd_mono_ms() - t0;
    assert_string_equal(a, "soon");
    assert_string_equal(b, "late");
    assert_true(ta >= 30 && ta < 30 + 400);
    assert_true(tb >= 60 && tb < 60 + 400);
    kd_k8s_queue_done(q, a);
    kd_k8s_queue_done(q, b);
    free(a);
    free(b);
    /* a delayed key that is added directly is ready now, and only once */
    kd_k8s_queue_add_after(q, "k", 40);
    kd_k8s_queue_add(q, "k");
    assert_int_equal(kd_k8s_queue_len(q), 1);
    a = get(q);
    kd_k8s_queue_done(q, a);
    free(a);
    kd_sleep_ms(60);
    assert_int_equal(kd_k8s_queue_len(q),
                     1); /* the delayed add still fires (de-duplicated later) */
    a = get(q);
    kd_k8s_queue_done(q, a);
    free(a);
    kd_k8s_queue_free(q);
}

/* A slow key: each pass takes 60 ms; the test adds it again while one runs. */
struct paced {
    atomic_int calls;
    _Atomic int64_t start[4], end[4];
};

static int paced_fn(const char *key, long *after, void *ud)
{
    (void)key;
    (void)after;
    struct paced *w = ud;
    int i = atomic_fetch_add(&w->calls, 1);
    if (i < 4)
        atomic_store(&w->start[i], kd_mono_ms());
    kd_sleep_ms(60);
    if (i < 4)
        atomic_store(&w->end[i], kd_mono_ms());
    return 0;
}

/* A key whose pass took 60 ms is not taken again before twice that after it ended, however
 * often it is added meanwhile; a fast key (other) is not held back by it. */
static void test_pacing(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    struct paced w = {0};
    assert_int_equal(kd_k8s_queue_start_workers(q, 2, paced_fn, &w), 0);
    kd_k8s_queue_add(q, "slow");
    for (int i = 0; i < 100 && atomic_load(&w.calls) < 1; i++)
        kd_sleep_ms(5);
    for (int i = 0; i < 5; i++) { /* added while it runs, then after it ended */
        kd_k8s_queue_add(q, "slow");
        kd_sleep_ms(20);
    }
    for (int i = 0; i < 300 && atomic_load(&w.calls) < 2; i++)
        kd_sleep_ms(5);
    assert_int_equal(atomic_load(&w.calls), 2); /* the adds meanwhile made one more pass */
    int64_t gap = atomic_load(&w.start[1]) - atomic_load(&w.end[0]);
    if (gap < KD_K8S_QUEUE_PACE * 60 - 5)
        fail_msg("taken again %lld ms after a 60 ms pass", (long long)gap);
    kd_sleep_ms(200);
    assert_int_equal(atomic_load(&w.calls), 2);
    /* Paced until then, not for ever. */
    kd_sleep_ms(KD_K8S_QUEUE_PACE * 60);
    kd_k8s_queue_add(q, "slow");
    for (int i = 0; i < 300 && atomic_load(&w.calls) < 3; i++)
        kd_sleep_ms(2);
    assert_int_equal(atomic_load(&w.calls), 3);
    kd_k8s_queue_free(q);
}

struct errs {
    atomic_int calls_e, calls_r;
};

static int err_fn(const char *key, long *after, void *ud)
{
    struct errs *e = ud;
    if (strcmp(key, "e") == 0)
        return atomic_fetch_add(&e->calls_e, 1) < 3 ? -1006 /* KD_EAGAIN */ : 0;
    if (atomic_fetch_add(&e->calls_r, 1) == 0)
        *after = 30;
    return 0;
}

static void test_worker_errors_and_requeue_after(void **state)
{
    (void)state;
    struct kd_k8s_queue_opts o = {.base_delay_ms = 5, .max_delay_ms = 50};
    struct kd_k8s_queue *q = kd_k8s_queue_new(&o);
    struct errs e = {0};
    assert_int_equal(kd_k8s_queue_start_workers(q, 2, err_fn, &e), 0);
    assert_int_equal(kd_k8s_queue_start_workers(q, 2, err_fn, &e), KD_EINVAL);
    kd_k8s_queue_add(q, "e");
    kd_k8s_queue_add(q, "r");
    for (int i = 0; i < 200 && (atomic_load(&e.calls_e) < 4 || atomic_load(&e.calls_r) < 2); i++)
        kd_sleep_ms(10);
    assert_int_equal(atomic_load(&e.calls_e), 4);
    assert_int_equal(atomic_load(&e.calls_r), 2);
    assert_int_equal(kd_k8s_queue_num_requeues(q, "e"), 0); /* forgotten after the success */
    kd_k8s_queue_free(q);
}

static void test_backoff_table(void **state)
{
    (void)state;
    static const struct {
        long base, max;
        int failures;
        long cap, want;
    } cases[] = {
        {5, 1000000, 0, 0, 5},
        {5, 1000000, 1, 0, 10},
        {5, 1000000, 10, 0, 5120},
        {5, 1000000, 20, 0, 1000000},   /* the queue's maximum */
        {5, 1000000, 1000, 0, 1000000}, /* no overflow */
        {5, 1000000, 20, 2000, 2000},   /* the cap */
        {5, 1000000, 3, 2000, 40},      /* below the cap: the backoff */
        {5, 1000, 20, 2000, 1000},      /* a cap above the maximum: the maximum */
        {5, 1000000, 20, -1, 1000000},  /* no cap */
        {20, 80, 2, 0, 80},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long got =
            kd_k8s_queue_backoff_ms(cases[i].base, cases[i].max, cases[i].failures, cases[i].cap);
        if (got != cases[i].want)
            fail_msg("case %zu: base %ld max %ld failures %d cap %ld: got %ld, want %ld", i,
                     cases[i].base, cases[i].max, cases[i].failures, cases[i].cap, got,
                     cases[i].want);
    }
}

/* Fails 14 times asking for retries within 20 ms: uncapped, the 14th backoff alone is 41 s. */
static atomic_int capped_calls;

static int capped_fn(const char *key, long *after, void *ud)
{
    (void)key;
    (void)ud;
    if (atomic_fetch_add(&capped_calls, 1) < 14) {
        *after = 20;
        return -1021; /* KD_ECONNECT */
    }
    return 0;
}

static void test_worker_error_with_cap(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL); /* 5 ms doubling to 1000 s */
    atomic_store(&capped_calls, 0);
    assert_int_equal(kd_k8s_queue_start_workers(q, 1, capped_fn, NULL), 0);
    int64_t t0 = kd_mono_ms();
    kd_k8s_queue_add(q, "k");
    for (int i = 0; i < 1000 && atomic_load(&capped_calls) < 15; i++)
        kd_sleep_ms(10);
    printf("15 calls in %lld ms\n", (long long)(kd_mono_ms() - t0));
    assert_int_equal(atomic_load(&capped_calls), 15);
    assert_int_equal(kd_k8s_queue_num_requeues(q, "k"), 0);
    kd_k8s_queue_free(q);
}

static atomic_int drained;

static int slow_fn(const char *key, long *after, void *ud)
{
    (void)key;
    (void)after;
    (void)ud;
    kd_sleep_ms(20);
    atomic_fetch_add(&drained, 1);
    return 0;
}

static void test_shutdown_drains(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    atomic_store(&drained, 0);
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "d%d", i);
        kd_k8s_queue_add(q, key);
    }
    kd_k8s_queue_add_after(q, "never", 10000);
    assert_int_equal(kd_k8s_queue_start_workers(q, 1, slow_fn, NULL), 0);
    int64_t t0 = kd_mono_ms();
    kd_k8s_queue_shutdown(q, true);
    assert_int_equal(atomic_load(&drained), 5);
    assert_true(kd_mono_ms() - t0 < 5000); /* the delayed key was dropped, not waited for */
    assert_true(kd_k8s_queue_shutting_down(q));
    kd_k8s_queue_add(q, "late");
    char *k = NULL;
    assert_int_equal(kd_k8s_queue_get(q, &k), KD_ECANCELED);
    assert_null(k);
    kd_k8s_queue_free(q);
}

static void *blocked_getter(void *arg)
{
    char *k = NULL;
    int rc = kd_k8s_queue_get(arg, &k);
    free(k);
    return (void *)(intptr_t)rc;
}

static void test_shutdown_wakes_getters(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    pthread_t t;
    void *res;
    assert_int_equal(pthread_create(&t, NULL, blocked_getter, q), 0);
    kd_sleep_ms(20);
    kd_k8s_queue_shutdown(q, false);
    pthread_join(t, &res);
    assert_int_equal((int)(intptr_t)res, KD_ECANCELED);
    kd_k8s_queue_free(q);
}

/* A key kept only for its pacing is dropped when the pacing ends (a deleted object's key is
 * never touched again), and one added meanwhile still gets its turn. */
static void test_paced_key_dropped(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    char *key = NULL;
    kd_k8s_queue_add(q, "gone");
    kd_k8s_queue_add(q, "back");
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kd_k8s_queue_get(q, &key), 0);
        kd_k8s_queue_pace(q, key, 500);
        kd_k8s_queue_forget(q, key);
        kd_k8s_queue_done(q, key);
        free(key);
    }
    assert_int_equal(kd_k8s_queue_tracked(q), 2); /* both still paced */
    kd_k8s_queue_add(q, "back");
    assert_int_equal(kd_k8s_queue_len(q), 0); /* not before its pacing ends */
    kd_sleep_ms(600);
    assert_int_equal(kd_k8s_queue_len(q), 1);
    assert_int_equal(kd_k8s_queue_tracked(q), 1); /* "gone" dropped, "back" waiting */
    assert_int_equal(kd_k8s_queue_get(q, &key), 0);
    assert_string_equal(key, "back");
    kd_k8s_queue_done(q, key);
    free(key);
    assert_int_equal(kd_k8s_queue_tracked(q), 0);
    kd_k8s_queue_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dedup_and_order),
        cmocka_unit_test(test_many_workers_never_share_a_key),
        cmocka_unit_test(test_backoff_timing),
        cmocka_unit_test(test_add_after),
        cmocka_unit_test(test_worker_errors_and_requeue_after),
        cmocka_unit_test(test_backoff_table),
        cmocka_unit_test(test_worker_error_with_cap),
        cmocka_unit_test(test_shutdown_drains),
        cmocka_unit_test(test_shutdown_wakes_getters),
        cmocka_unit_test(test_pacing),
        cmocka_unit_test(test_paced_key_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
