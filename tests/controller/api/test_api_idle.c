/*
 * The worker API for trials the controller released (condition Idle: the
 * trial waits at its target for the searcher) and for killed experiments,
 * against a real private PostgreSQL and a real kdet-local: an idle trial's
 * searcher poll says "checkpoint and exit" (pending + preempt), a stale
 * Idle (target raised, trial closed) does not, a kill says stop without a
 * checkpoint. Also the pure rules of controller/states.c behind Idle.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/time.h"
#include "fx.h"
#include "states.c"

#define T(name) "/api/v1/namespaces/default/trials/" name
#define IDLE_REASON "idle: waiting for the searcher; GPUs released"

/* GET path until the answer's `key` is the string `want` (the API's caches follow the watch). */
static json_t *poll_until(const char *path, const char *tok, const char *key, const char *want)
{
    json_t *out = NULL;
    for (int i = 0; i < 200; i++) {
        json_decref(out);
        out = NULL;
        assert_int_equal(fx_http("GET", path, tok, NULL, &out), 200);
        if (strcmp(json_string_value(json_object_get(out, key)) ?: "", want) == 0)
            break;
        assert_true(i < 199);
        kd_sleep_ms(50);
    }
    return out;
}

static void test_idle_trial_is_told_to_exit(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-idle", "validation_loss");
    fx_trial("e-idle", "e-idle-1", 100, uid, sizeof(uid));
    fx_token("e-idle-1", uid, tok, sizeof(tok));
    /* At its target, not idle: the poll waits and says pending without preempt. */
    fx_patch("trials", "e-idle-1", "status",
             "{\"status\":{\"state\":\"ACTIVE\",\"latestValidation\":{\"metric\":"
             "\"validation_loss\",\"batches\":100,\"value\":0.5}}}");
    assert_int_equal(
        fx_http("GET", T("e-idle-1/searcher/operation?completed=100&timeout=1"), tok, NULL, &out),
        200);
    assert_string_equal(json_string_value(json_object_get(out, "op")), "pending");
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    /* The controller marks it Idle: checkpoint and exit (the long-poll wakes up on the change). */
    fx_patch("trials", "e-idle-1", "status",
             "{\"status\":{\"conditions\":[{\"type\":\"Idle\",\"status\":\"True\","
             "\"lastTransitionTime\":\"2026-11-21T00:00:00Z\",\"reason\":\"WaitingForSearcher\","
             "\"message\":\"reached its target of 100\"}]}}");
    assert_int_equal(
        fx_http("GET", T("e-idle-1/searcher/operation?completed=100&timeout=20"), tok, NULL, &out),
        200);
    assert_string_equal(json_string_value(json_object_get(out, "op")), "pending");
    assert_true(json_is_true(json_object_get(out, "preempt")));
    assert_string_equal(json_string_value(json_object_get(out, "reason")), IDLE_REASON);
    json_decref(out);
    assert_int_equal(fx_http("GET", T("e-idle-1/preemption?timeout=5"), tok, NULL, &out), 200);
    assert_true(json_is_true(json_object_get(out, "preempt")));
    assert_string_equal(json_string_value(json_object_get(out, "reason")), IDLE_REASON);
    json_decref(out);
    /* Promoted (target raised) with Idle still True: train on, no preemption. */
    fx_patch("trials", "e-idle-1", NULL, "{\"spec\":{\"validateAfter\":400}}");
    out = poll_until(T("e-idle-1/searcher/operation?completed=100"), tok, "op", "validate_after");
    assert_int_equal(json_integer_value(json_object_get(out, "length")), 400);
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    assert_int_equal(fx_http("GET", T("e-idle-1/preemption"), tok, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    /* At the new target and closed: stop (no longer idle). */
    fx_patch("trials", "e-idle-1", "status",
             "{\"status\":{\"latestValidation\":{\"metric\":\"validation_loss\",\"batches\":400,"
             "\"value\":0.25}}}");
    fx_patch("trials", "e-idle-1", NULL, "{\"spec\":{\"closed\":true}}");
    out = poll_until(T("e-idle-1/searcher/operation?completed=400"), tok, "op", "stop");
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    assert_int_equal(fx_http("GET", T("e-idle-1/preemption"), tok, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
}

static void test_kill_stops_without_checkpoint(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-kill", "validation_loss");
    fx_trial("e-kill", "e-kill-1", 100, uid, sizeof(uid));
    fx_token("e-kill-1", uid, tok, sizeof(tok));
    /* A cancel asks for a checkpoint (preempt true)... */
    fx_patch("experiments", "e-kill", NULL, "{\"spec\":{\"canceled\":true}}");
    out = poll_until(T("e-kill-1/searcher/operation?completed=10"), tok, "op", "stop");
    assert_true(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    /* ...a kill (det experiment kill's annotation) does not. */
    fx_patch("experiments", "e-kill", NULL,
             "{\"metadata\":{\"annotations\":{\"kdet.io/kill\":\"2026-11-21T00:00:00Z\"}}}");
    out = poll_until(T("e-kill-1/searcher/operation?completed=10"), tok, "reason",
                     "the experiment was killed");
    assert_string_equal(json_string_value(json_object_get(out, "op")), "stop");
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    assert_int_equal(fx_http("GET", T("e-kill-1/preemption"), tok, NULL, &out), 200);
    assert_true(json_is_true(json_object_get(out, "preempt")));
    assert_string_equal(json_string_value(json_object_get(out, "reason")),
                        "the experiment was killed");
    json_decref(out);
}

static void test_idle_rules(void **state)
{
    (void)state;
    long ms = -1;
    assert_true(kd_trial_at_target(100, 100, false));
    assert_true(kd_trial_at_target(100, 150, false));
    assert_false(kd_trial_at_target(100, 99, false));
    assert_false(kd_trial_at_target(100, 100, true)); /* closed: it completes instead */
    assert_false(kd_trial_at_target(0, 0, false));    /* no target yet */
    assert_true(kd_trial_idle_release_parse("0", &ms));
    assert_int_equal(ms, 0);
    assert_true(kd_trial_idle_release_parse("30", &ms));
    assert_int_equal(ms, 30000);
    ms = 7;
    assert_false(kd_trial_idle_release_parse("", &ms));
    assert_false(kd_trial_idle_release_parse("-1", &ms));
    assert_false(kd_trial_idle_release_parse("5s", &ms));
    assert_false(kd_trial_idle_release_parse(" 5", &ms));
    assert_false(kd_trial_idle_release_parse("86401", &ms));
    assert_false(kd_trial_idle_release_parse("99999999999999999999999", &ms));
    assert_false(kd_trial_idle_release_parse(NULL, &ms));
    assert_int_equal(ms, 7); /* untouched on errors */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_rules),
        cmocka_unit_test(test_idle_trial_is_told_to_exit),
        cmocka_unit_test(test_kill_stops_without_checkpoint),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
