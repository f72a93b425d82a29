/*
 * The GC policy engine, table-driven: the worked example of Determined's
 * checkpoint GC documentation (docs/checkpoints.md reproduces it), plus
 * resume points, the registry hook, larger-is-better, NaN and bad input.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "storage/gc.h"

/* Two trials; checkpoint ids 1-10 in the order they were written. */
#define NOM -1.0 /* no validation metric */
static const double example_metric[10] = {NOM, NOM, 0.6, 0.5, 0.4, NOM, 0.2, 0.3, NOM, NOM};
static const char *const example_uuid[10] = {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"};

static void example(struct kd_gc_ckpt *c)
{
    for (int i = 0; i < 10; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].uuid = example_uuid[i];
        c[i].trial_id = i < 5 ? "1" : "2";
        c[i].steps_completed = (i % 5 + 1) * 100;
        c[i].has_metric = example_metric[i] != NOM;
        c[i].metric = example_metric[i];
    }
}

/* The kept ids, highest first, as the documentation lists them ("10,8,7,5"). */
static void kept(const struct kd_gc_ckpt *c, const unsigned *keep, size_t n, char *out, size_t len)
{
    size_t off = 0;
    out[0] = '\0';
    for (size_t k = n; k > 0; k--) {
        if (keep[k - 1] == 0)
            continue;
        off += (size_t)snprintf(out + off, len - off, "%s%s", off ? "," : "", c[k - 1].uuid);
    }
    if (off == 0)
        snprintf(out, len, "none");
}

static const struct {
    int eb, tb, tl;
    const char *saved;
} doc_table[] = {
    {0, 0, 0, "none"},  {2, 0, 0, "8,7"},       {5, 0, 0, "8,7,5,4,3"}, {9, 0, 0, "8,7,5,4,3"},
    {0, 1, 0, "7,5"},   {0, 3, 0, "8,7,5,4,3"}, {0, 0, 1, "10,5"},      {0, 0, 3, "10,9,8,5,4,3"},
    {2, 1, 0, "8,7,5"}, {2, 0, 1, "10,8,7,5"},  {0, 1, 1, "10,7,5"},    {2, 1, 1, "10,8,7,5"},
};

static void test_determined_example(void **state)
{
    (void)state;
    struct kd_gc_ckpt c[10];
    unsigned keep[10];
    char got[64], err[KD_ERRLEN];
    example(c);
    for (size_t t = 0; t < sizeof(doc_table) / sizeof(doc_table[0]); t++) {
        struct kd_gc_policy p = {doc_table[t].eb, doc_table[t].tb, doc_table[t].tl, 1};
        assert_int_equal(kd_gc_plan(&p, c, 10, NULL, NULL, keep, err), 0);
        kept(c, keep, 10, got, sizeof(got));
        if (strcmp(got, doc_table[t].saved) != 0)
            fail_msg("policy %d/%d/%d: kept %s, expected %s", doc_table[t].eb, doc_table[t].tb,
                     doc_table[t].tl, got, doc_table[t].saved);
    }
}

static void test_reasons(void **state)
{
    (void)state;
    struct kd_gc_ckpt c[10];
    unsigned keep[10];
    char buf[96];
    struct kd_gc_policy p;
    example(c);
    kd_gc_policy_default(&p);
    assert_int_equal(p.save_experiment_best, 0);
    assert_int_equal(p.save_trial_best, 1);
    assert_int_equal(p.save_trial_latest, 1);
    p.save_experiment_best = 1;
    assert_int_equal(kd_gc_plan(&p, c, 10, NULL, NULL, keep, NULL), 0);
    assert_string_equal(kd_gc_reason(keep[6], buf, sizeof(buf)), "experiment_best,trial_best");
    assert_string_equal(kd_gc_reason(keep[4], buf, sizeof(buf)), "trial_best,trial_latest");
    assert_string_equal(kd_gc_reason(keep[9], buf, sizeof(buf)), "trial_latest");
    assert_string_equal(kd_gc_reason(keep[0], buf, sizeof(buf)), "delete");
}

static void test_larger_is_better(void **state)
{
    (void)state;
    struct kd_gc_ckpt c[10];
    unsigned keep[10];
    char got[64];
    struct kd_gc_policy p = {2, 1, 0, 0};
    example(c);
    assert_int_equal(kd_gc_plan(&p, c, 10, NULL, NULL, keep, NULL), 0);
    kept(c, keep, 10, got, sizeof(got));
    /* best overall: 0.6 (3), 0.5 (4); trial bests: 3 and 8 */
    assert_string_equal(got, "8,4,3");
}

static int registry(void *arg, const struct kd_gc_ckpt *c)
{
    (*(int *)arg)++;
    return strcmp(c->uuid, "2") == 0;
}

static void test_resume_and_registry(void **state)
{
    (void)state;
    struct kd_gc_ckpt c[10];
    unsigned keep[10];
    char got[64];
    int calls = 0;
    struct kd_gc_policy p = {0, 0, 0, 1};
    example(c);
    /* trial 2 is paused: its latest checkpoint (10) is its resume point */
    for (int i = 5; i < 10; i++)
        c[i].trial_active = 1;
    c[0].protected_ = 1; /* flagged by the caller */
    assert_int_equal(kd_gc_plan(&p, c, 10, registry, &calls, keep, NULL), 0);
    assert_int_equal(calls, 9); /* the hook is asked about the rest */
    kept(c, keep, 10, got, sizeof(got));
    assert_string_equal(got, "10,2,1");
    assert_int_equal(keep[9], KD_GC_RESUME);
    assert_int_equal(keep[1], KD_GC_PROTECTED);
}

static void test_nan_and_ties(void **state)
{
    (void)state;
    struct kd_gc_ckpt c[4] = {
        {"a", "t", 100, 1, NAN, 0, 0},
        {"b", "t", 200, 1, 0.5, 0, 0},
        {"c", "t", 300, 1, 0.5, 0, 0},
        {"d", "t", 400, 0, 0.0, 0, 0},
    };
    unsigned keep[4];
    struct kd_gc_policy p = {1, 0, 0, 1};
    assert_int_equal(kd_gc_plan(&p, c, 4, NULL, NULL, keep, NULL), 0);
    /* NaN is no metric; a tie goes to the earlier checkpoint */
    assert_int_equal(keep[0], 0);
    assert_int_equal(keep[1], KD_GC_EXPERIMENT_BEST);
    assert_int_equal(keep[2], 0);
    assert_int_equal(keep[3], 0);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct kd_gc_ckpt c[1] = {{"a", NULL, 1, 0, 0, 0, 0}};
    unsigned keep[1];
    char err[KD_ERRLEN];
    struct kd_gc_policy p = {0, -1, 0, 1};
    assert_int_equal(kd_gc_plan(&p, c, 1, NULL, NULL, keep, err), KD_EINVAL);
    assert_non_null(strstr(err, "save_trial_best"));
    p.save_trial_best = 1;
    assert_int_equal(kd_gc_plan(&p, c, 1, NULL, NULL, keep, err), KD_EINVAL);
    assert_non_null(strstr(err, "checkpoints[0]: trial_id"));
    assert_int_equal(kd_gc_plan(&p, c, 0, NULL, NULL, keep, err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_determined_example), cmocka_unit_test(test_reasons),
        cmocka_unit_test(test_larger_is_better),   cmocka_unit_test(test_resume_and_registry),
        cmocka_unit_test(test_nan_and_ties),       cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
