/*
 * What checkpoint GC reads of the Trials (controller/gcview.c): lookups by
 * uid, ended trials, and the PBT rule that a checkpoint a live child will
 * start from is kept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gcview.h"

/* An experiment of PBT trials:
 *   a: ended, latest a-30, parent of b (live, no checkpoint yet) and of c (live, has its own)
 *   d: ended, latest d-20, parent of e (ended, never checkpointed) only
 *   f: ended, latest f-10, parent of g (queued: no state yet, no checkpoint)
 *   h: live, latest h-10, no children */
static struct kd_gc_trial trials[] = {
    {.uid = "u-h", .request_id = "rh", .checkpoint = "h-10", .state = "ACTIVE"},
    {.uid = "u-a", .request_id = "ra", .checkpoint = "a-30", .state = "COMPLETED"},
    {.uid = "u-c",
     .request_id = "rc",
     .parent_request_id = "ra",
     .checkpoint = "c-10",
     .state = "ACTIVE"},
    {.uid = "u-b", .request_id = "rb", .parent_request_id = "ra", .state = "ACTIVE"},
    {.uid = "u-e", .request_id = "re", .parent_request_id = "rd", .state = "CANCELED"},
    {.uid = "u-d", .request_id = "rd", .checkpoint = "d-20", .state = "COMPLETED"},
    {.uid = "u-g", .request_id = "rg", .parent_request_id = "rf"},
    {.uid = "u-f", .request_id = "rf", .checkpoint = "f-10", .state = "ERROR"},
};
#define N (sizeof(trials) / sizeof(trials[0]))

static void test_find_and_ended(void **s)
{
    (void)s;
    kd_gc_trials_sort(trials, N);
    for (size_t i = 1; i < N; i++)
        assert_true(strcmp(trials[i - 1].uid, trials[i].uid) < 0);
    const char *uids[] = {"u-a", "u-b", "u-c", "u-d", "u-e", "u-f", "u-g", "u-h"};
    for (size_t i = 0; i < N; i++) {
        const struct kd_gc_trial *t = kd_gc_trial_find(trials, N, uids[i]);
        assert_non_null(t);
        assert_string_equal(t->uid, uids[i]);
    }
    assert_null(kd_gc_trial_find(trials, N, "u-x"));
    assert_null(kd_gc_trial_find(trials, N, NULL));
    assert_null(kd_gc_trial_find(trials, 0, "u-a"));
    assert_true(kd_gc_trial_ended(kd_gc_trial_find(trials, N, "u-a")));
    assert_true(kd_gc_trial_ended(kd_gc_trial_find(trials, N, "u-e")));
    assert_true(kd_gc_trial_ended(kd_gc_trial_find(trials, N, "u-f")));
    assert_false(kd_gc_trial_ended(kd_gc_trial_find(trials, N, "u-b")));
    assert_false(kd_gc_trial_ended(kd_gc_trial_find(trials, N, "u-g"))); /* queued */
    assert_false(kd_gc_trial_ended(NULL));
}

static void test_parent_starts(void **s)
{
    (void)s;
    size_t np = 0;
    kd_gc_trials_sort(trials, N);
    const char **parents = kd_gc_parent_starts(trials, N, &np);
    /* b (live, no checkpoint) names ra; g (queued) names rf; c has its own checkpoint and e
     * ended, so they protect nothing. */
    assert_int_equal(np, 2);
    assert_string_equal(parents[0], "ra");
    assert_string_equal(parents[1], "rf");
    const struct kd_gc_trial *a = kd_gc_trial_find(trials, N, "u-a");
    const struct kd_gc_trial *d = kd_gc_trial_find(trials, N, "u-d");
    const struct kd_gc_trial *f = kd_gc_trial_find(trials, N, "u-f");
    const struct kd_gc_trial *h = kd_gc_trial_find(trials, N, "u-h");
    assert_true(kd_gc_parent_start(parents, np, a, "a-30"));
    assert_false(kd_gc_parent_start(parents, np, a, "a-20")); /* not its latest */
    assert_false(kd_gc_parent_start(parents, np, d, "d-20")); /* its child ended */
    assert_true(kd_gc_parent_start(parents, np, f, "f-10"));  /* its child is queued */
    assert_false(kd_gc_parent_start(parents, np, h, "h-10")); /* no child */
    assert_false(kd_gc_parent_start(parents, np, a, NULL));
    assert_false(kd_gc_parent_start(parents, 0, a, "a-30"));
    free(parents);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_and_ended),
        cmocka_unit_test(test_parent_starts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
