/* Early-stopping rules: patience, threshold (with end_experiment) and the median rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common.h"
#include "core/log.h"
#include "core/str.h"

struct run {
    struct kd_searcher *s;
    char ids[8][KD_SEARCH_IDLEN];
};

static void start(struct run *r, const char *extra, bool larger)
{
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
             " \"searcher\": {\"name\": \"random\", \"metric\": \"m\", \"max_trials\": 6,"
             " \"max_concurrent_trials\": 6, \"smaller_is_better\": %s,"
             " \"max_length\": {\"batches\": 100}, \"early_stopping\": [%s]}}",
             larger ? "false" : "true", extra);
    r->s = new_searcher(cfg, 1);
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN];
    assert_int_equal(kd_searcher_initial(r->s, &ops, err), 0);
    size_t n = 0;
    for (size_t i = 0; i < ops.n; i++)
        if (ops.v[i].type == KD_SEARCH_CREATE)
            kd_strlcpy(r->ids[n++], ops.v[i].request_id, KD_SEARCH_IDLEN);
    assert_int_equal(n, 6);
    kd_search_ops_free(&ops);
}

/* Report a validation; return the reason of a Close for that trial ("" when none). */
static const char *val(struct run *r, int trial, int64_t len, double metric, bool *shutdown)
{
    static char why[512];
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN];
    why[0] = '\0';
    if (kd_searcher_validation_completed(r->s, r->ids[trial], metric, len, &ops, err) != 0)
        fail_msg("validation rejected: %s", err);
    if (shutdown)
        *shutdown = false;
    for (size_t i = 0; i < ops.n; i++) {
        if (ops.v[i].type == KD_SEARCH_CLOSE && strcmp(ops.v[i].request_id, r->ids[trial]) == 0)
            kd_strlcpy(why, ops.v[i].reason ? ops.v[i].reason : "(none)", sizeof(why));
        if (ops.v[i].type == KD_SEARCH_SHUTDOWN && shutdown)
            *shutdown = true;
    }
    kd_search_ops_free(&ops);
    return why;
}

static void test_patience(void **state)
{
    (void)state;
    struct run r;
    start(&r, "{\"type\": \"patience\", \"patience\": 2, \"min_delta\": 0.1}", false);
    assert_string_equal(val(&r, 0, 10, 1.0, NULL), "");
    assert_string_equal(val(&r, 0, 20, 0.95, NULL), ""); /* not better by 0.1: 1 */
    assert_string_equal(val(&r, 0, 30, 0.8, NULL), "");  /* better: reset */
    assert_string_equal(val(&r, 0, 40, 0.79, NULL), ""); /* 1 */
    const char *why = val(&r, 0, 50, 0.85, NULL);        /* 2: stop */
    assert_string_equal(why, "early stopping (patience): m did not improve by at least 0.1 in 2 "
                             "validations (best 0.8)");
    /* the next validation of a closing trial is recorded but changes nothing */
    assert_string_equal(val(&r, 0, 60, 0.1, NULL), "");
    /* another trial that keeps improving is never stopped */
    for (int i = 1; i <= 9; i++)
        assert_string_equal(val(&r, 1, i * 10, 1.0 - 0.11 * i, NULL), "");
    /* and its final validation closes it for the usual reason */
    assert_string_equal(val(&r, 1, 100, 0.0, NULL), "reached max_length");
    kd_searcher_free(r.s);
}

static void test_threshold(void **state)
{
    (void)state;
    struct run r;
    bool sd;
    start(&r, "{\"type\": \"threshold\", \"threshold\": 0.5}", false);
    assert_string_equal(val(&r, 0, 10, 0.6, &sd), "");
    assert_string_equal(val(&r, 0, 20, 0.5, &sd), ""); /* equal is not better */
    assert_string_equal(val(&r, 0, 30, 0.4, &sd),
                        "early stopping (threshold): m 0.4 is better than the threshold 0.5 at "
                        "length 30");
    assert_false(sd);
    assert_false(kd_searcher_done(r.s));
    kd_searcher_free(r.s);

    /* larger is better, end_experiment: the whole experiment ends */
    start(&r, "{\"type\": \"threshold\", \"threshold\": 0.9, \"end_experiment\": true}", true);
    assert_string_equal(val(&r, 2, 10, 0.85, &sd), "");
    assert_false(sd);
    const char *why = val(&r, 3, 10, 0.95, &sd);
    assert_non_null(strstr(why, "m 0.95 is better than the threshold 0.9 at length 10; "
                                "end_experiment is set"));
    assert_true(sd);
    assert_true(kd_searcher_done(r.s));
    /* trials still report closing; no more operations come */
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN];
    assert_int_equal(kd_searcher_trial_closed(r.s, r.ids[3], &ops, err), 0);
    assert_int_equal(kd_searcher_trial_closed(r.s, r.ids[0], &ops, err), 0);
    assert_int_equal(ops.n, 0);
    kd_searcher_free(r.s);
}

static void test_median(void **state)
{
    (void)state;
    struct run r;
    start(&r, "{\"type\": \"median\", \"grace_period\": 20, \"min_trials\": 2}", false);
    assert_string_equal(val(&r, 0, 10, 1.0, NULL), "");
    assert_string_equal(val(&r, 0, 20, 0.9, NULL), "");
    assert_string_equal(val(&r, 1, 10, 2.0, NULL), "");
    /* trial 1 at 20: only one other trial has reached 20: fewer than min_trials */
    assert_string_equal(val(&r, 1, 20, 1.8, NULL), "");
    assert_string_equal(val(&r, 2, 10, 5.0, NULL), ""); /* inside the grace period */
    /* at 20 the others' running averages are 0.95 and 1.9: median 1.425 < 4 */
    assert_string_equal(val(&r, 2, 20, 4.0, NULL),
                        "early stopping (median): best m 4 is worse than the median 1.425 of 2 "
                        "other trials' running averages at length 20");
    /* a trial better than the median keeps going */
    assert_string_equal(val(&r, 3, 10, 0.5, NULL), "");
    assert_string_equal(val(&r, 3, 20, 0.4, NULL), "");
    kd_searcher_free(r.s);

    /* with min_trials 3 the same history does not stop it */
    start(&r, "{\"type\": \"median\", \"grace_period\": 20, \"min_trials\": 3}", false);
    val(&r, 0, 20, 0.9, NULL);
    val(&r, 1, 20, 1.8, NULL);
    assert_string_equal(val(&r, 2, 20, 4.0, NULL), "");
    kd_searcher_free(r.s);
}

static void test_rules_combined(void **state)
{
    (void)state;
    struct run r;
    start(&r,
          "{\"type\": \"patience\", \"patience\": 1}, {\"type\": \"threshold\", \"threshold\": "
          "0.1}",
          false);
    /* the first rule that fires wins and is the one named */
    assert_string_equal(val(&r, 0, 10, 0.5, NULL), "");
    assert_non_null(strstr(val(&r, 0, 20, 0.6, NULL), "early stopping (patience)"));
    assert_non_null(strstr(val(&r, 1, 10, 0.05, NULL), "early stopping (threshold)"));
    kd_searcher_free(r.s);
}

int main(void)
{
    kd_log_init("test", KD_LOG_WARN, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patience),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_rules_combined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
