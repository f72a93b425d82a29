/* kd_par_for: every index once, on several threads at once when asked, in order on one. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/par.h"

#define N 1000

struct seen {
    atomic_int count[N];
    atomic_int inside, most; /* calls running at once, and the most seen */
    size_t order[N];
    atomic_size_t norder;
    int sleep_us;
};

static void visit(size_t i, void *ud)
{
    struct seen *s = ud;
    int now = atomic_fetch_add(&s->inside, 1) + 1;
    for (int m = atomic_load(&s->most);
         now > m && !atomic_compare_exchange_weak(&s->most, &m, now);)
        ;
    atomic_fetch_add(&s->count[i], 1);
    s->order[atomic_fetch_add(&s->norder, 1)] = i;
    if (s->sleep_us > 0)
        usleep((useconds_t)s->sleep_us);
    atomic_fetch_sub(&s->inside, 1);
}

static struct seen *fresh(int sleep_us)
{
    static struct seen s;
    for (int i = 0; i < N; i++)
        atomic_init(&s.count[i], 0);
    atomic_init(&s.inside, 0);
    atomic_init(&s.most, 0);
    atomic_init(&s.norder, 0);
    s.sleep_us = sleep_us;
    return &s;
}

static void test_each_index_once(void **state)
{
    (void)state;
    int threads[] = {0, 1, 2, 4, 100};
    for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
        struct seen *s = fresh(0);
        kd_par_for(N, threads[t], visit, s);
        for (int i = 0; i < N; i++)
            assert_int_equal(atomic_load(&s->count[i]), 1);
        assert_int_equal(atomic_load(&s->norder), N);
    }
}

static void test_one_thread_in_order(void **state)
{
    (void)state;
    struct seen *s = fresh(0);
    kd_par_for(N, 1, visit, s);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(s->order[i], i);
    assert_int_equal(atomic_load(&s->most), 1);
}

static void test_runs_at_once(void **state)
{
    (void)state;
    /* 40 calls of 20 ms on 4 threads: some run at the same time, never more than 4. */
    struct seen *s = fresh(20000);
    kd_par_for(40, 4, visit, s);
    assert_true(atomic_load(&s->most) >= 2);
    assert_true(atomic_load(&s->most) <= 4);
    for (int i = 0; i < 40; i++)
        assert_int_equal(atomic_load(&s->count[i]), 1);
}

static void test_nothing_to_do(void **state)
{
    (void)state;
    struct seen *s = fresh(0);
    kd_par_for(0, 8, visit, s);
    assert_int_equal(atomic_load(&s->norder), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_index_once),
        cmocka_unit_test(test_one_thread_in_order),
        cmocka_unit_test(test_runs_at_once),
        cmocka_unit_test(test_nothing_to_do),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
