/*
 * The Experiment and Trial state machines: every transition of the diagram
 * in docs/resources.md, the terminal states, parsing, restart decisions and
 * backoff, the experiment seed derived from the uid, and numbers written as the API server
 * writes them back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "ctrl.h"
#include "states.h"

static enum kd_exp_state next(enum kd_exp_state cur, struct kd_exp_facts f)
{
    return kd_exp_next_state(cur, &f);
}

static void test_experiment(void **s)
{
    (void)s;
    assert_int_equal(next(KD_EXP_ACTIVE, (struct kd_exp_facts){0}), KD_EXP_ACTIVE);
    assert_int_equal(next(KD_EXP_ACTIVE, (struct kd_exp_facts){.paused = true}), KD_EXP_PAUSED);
    assert_int_equal(next(KD_EXP_PAUSED, (struct kd_exp_facts){0}), KD_EXP_ACTIVE);
    assert_int_equal(
        next(KD_EXP_PAUSED,
             (struct kd_exp_facts){.paused = true, .canceled = true, .live_trials = 2}),
        KD_EXP_STOPPING_CANCELED);
    assert_int_equal(next(KD_EXP_STOPPING_CANCELED, (struct kd_exp_facts){.live_trials = 0}),
                     KD_EXP_CANCELED);
    assert_int_equal(
        next(KD_EXP_ACTIVE, (struct kd_exp_facts){.searcher_done = true, .live_trials = 1}),
        KD_EXP_STOPPING_COMPLETED);
    assert_int_equal(next(KD_EXP_STOPPING_COMPLETED, (struct kd_exp_facts){.searcher_done = true}),
                     KD_EXP_COMPLETED);
    assert_int_equal(next(KD_EXP_ACTIVE, (struct kd_exp_facts){.searcher_done = true,
                                                               .searcher_failure = true,
                                                               .live_trials = 3}),
                     KD_EXP_STOPPING_ERROR);
    assert_int_equal(next(KD_EXP_STOPPING_ERROR, (struct kd_exp_facts){0}), KD_EXP_ERROR);
    assert_int_equal(next(KD_EXP_ACTIVE, (struct kd_exp_facts){.invalid = true}), KD_EXP_ERROR);
    /* terminal states stay, whatever the spec says */
    assert_int_equal(next(KD_EXP_COMPLETED, (struct kd_exp_facts){.canceled = true}),
                     KD_EXP_COMPLETED);
    assert_int_equal(next(KD_EXP_CANCELED, (struct kd_exp_facts){.paused = false}),
                     KD_EXP_CANCELED);
    assert_int_equal(next(KD_EXP_ERROR, (struct kd_exp_facts){0}), KD_EXP_ERROR);
    /* cancel wins over a finished search */
    assert_int_equal(
        next(KD_EXP_STOPPING_COMPLETED,
             (struct kd_exp_facts){.canceled = true, .searcher_done = true, .live_trials = 1}),
        KD_EXP_STOPPING_CANCELED);
    enum kd_exp_state st;
    for (int i = KD_EXP_ACTIVE; i <= KD_EXP_ERROR; i++) {
        assert_true(kd_exp_state_parse(kd_exp_state_name(i), &st));
        assert_int_equal(st, i);
    }
    assert_false(kd_exp_state_parse("RUNNING", &st));
    assert_false(kd_exp_state_parse("", &st));
    assert_true(kd_exp_state_terminal(KD_EXP_CANCELED));
    assert_false(kd_exp_state_terminal(KD_EXP_STOPPING_CANCELED));
}

static void test_trial(void **s)
{
    (void)s;
    enum kd_trial_state st;
    assert_true(kd_trial_state_parse(NULL, &st));
    assert_int_equal(st, KD_TRIAL_QUEUED);
    for (int i = KD_TRIAL_QUEUED; i <= KD_TRIAL_ERROR; i++) {
        assert_true(kd_trial_state_parse(kd_trial_state_name(i), &st));
        assert_int_equal(st, i);
    }
    assert_false(kd_trial_state_parse("queued", &st));
    assert_int_equal(kd_trial_on_failure(0, 2), KD_TRIAL_RESTART);
    assert_int_equal(kd_trial_on_failure(1, 2), KD_TRIAL_RESTART);
    assert_int_equal(kd_trial_on_failure(2, 2), KD_TRIAL_FAIL);
    assert_int_equal(kd_trial_on_failure(0, 0), KD_TRIAL_FAIL);
    assert_int_equal(kd_trial_restart_backoff_ms(0), 1000);
    assert_int_equal(kd_trial_restart_backoff_ms(1), 2000);
    assert_int_equal(kd_trial_restart_backoff_ms(3), 8000);
    assert_int_equal(kd_trial_restart_backoff_ms(30), 60000);
}

static void test_seed(void **s)
{
    (void)s;
    uint64_t a = kd_ctrl_seed_from_uid("5d1c2a9e-0b4f-4c1e-9a55-1234567890ab");
    assert_true(a <= 0x7fffffffULL);
    assert_int_equal(a, kd_ctrl_seed_from_uid("5d1c2a9e-0b4f-4c1e-9a55-1234567890ab"));
    assert_int_not_equal(a, kd_ctrl_seed_from_uid("5d1c2a9e-0b4f-4c1e-9a55-1234567890ac"));
}

/* A number the controller writes compares equal to what the API server returns for it: a real
 * API server writes an integral float64 as an integer (1.0 comes back as 1). */
static void test_number(void **s)
{
    (void)s;
    static const struct {
        double v;
        const char *back; /* as the API server writes it */
    } cases[] = {{1.0, "1"},   {0.0, "0"},     {-3.0, "-3"},
                 {0.5, "0.5"}, {0.25, "0.25"}, {1e300, "1e300"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *n = kd_ctrl_number(cases[i].v),
               *back = json_loads(cases[i].back, JSON_DECODE_ANY, NULL);
        assert_non_null(back);
        assert_true(json_equal(n, back));
        json_decref(n);
        json_decref(back);
    }
    json_t *n = kd_ctrl_number(2.0);
    assert_true(json_is_integer(n));
    json_decref(n);
    n = kd_ctrl_number(0.1);
    assert_true(json_is_real(n));
    json_decref(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_experiment),
        cmocka_unit_test(test_trial),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_number),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
