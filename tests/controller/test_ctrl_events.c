/*
 * Events about Experiments and Trials: which status change makes which
 * Event (a table of old status, patched status and the expected type,
 * reason and message), and the Event object's fields.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "events.h"

struct row {
    const char *kind, *old, *patch;
    const char *type, *reason, *message; /* NULL type: no event */
};

static const struct row rows[] = {
    {"Trial", NULL, "{\"state\":\"QUEUED\"}", "Normal", "Queued", "Trial (new) -> QUEUED"},
    {"Trial", "{\"state\":\"QUEUED\"}", "{\"state\":\"ACTIVE\"}", "Normal", "Running",
     "Trial QUEUED -> ACTIVE"},
    {"Trial", "{\"state\":\"ACTIVE\"}", "{\"state\":\"ACTIVE\",\"batchesTrained\":10}", NULL, NULL,
     NULL},
    {"Trial", "{\"state\":\"ACTIVE\"}", "{\"batchesTrained\":10}", NULL, NULL, NULL},
    {"Trial", "{\"state\":\"ACTIVE\"}",
     "{\"state\":\"ERROR\",\"message\":\"exit code 1: Traceback\"}", "Warning", "Failed",
     "Trial ACTIVE -> ERROR: exit code 1: Traceback"},
    {"Trial", "{\"state\":\"ACTIVE\",\"restarts\":0}",
     "{\"state\":\"QUEUED\",\"restarts\":1,\"message\":\"exit code 3\"}", "Warning", "Restarted",
     "Trial restarted (restart 1): exit code 3"},
    {"Trial", "{\"state\":\"QUEUED\",\"restarts\":1}", "{\"restarts\":1}", NULL, NULL, NULL},
    {"Trial", "{\"state\":\"ACTIVE\"}", "{\"state\":\"STOPPING_KILLED\"}", "Normal", "Stopping",
     "Trial ACTIVE -> STOPPING_KILLED"},
    {"Trial", "{\"state\":\"STOPPING_CANCELED\"}", "{\"state\":\"CANCELED\"}", "Normal", "Canceled",
     "Trial STOPPING_CANCELED -> CANCELED"},
    {"Experiment", "{\"state\":\"ACTIVE\"}", "{\"state\":\"PAUSED\"}", "Normal", "Paused",
     "Experiment ACTIVE -> PAUSED"},
    {"Experiment", "{\"state\":\"STOPPING_COMPLETED\"}", "{\"state\":\"COMPLETED\"}", "Normal",
     "Completed", "Experiment STOPPING_COMPLETED -> COMPLETED"},
    {"Experiment", "{\"state\":\"ACTIVE\"}", "{\"state\":\"STOPPING_ERROR\"}", "Warning",
     "Stopping", "Experiment ACTIVE -> STOPPING_ERROR"},
    {"Experiment", "{\"state\":\"ACTIVE\"}", "{\"state\":\"NOT_A_STATE\"}", NULL, NULL, NULL},
    /* Tasks: an end says why in its reason. */
    {"Task", "{\"state\":\"QUEUED\"}", "{\"state\":\"STARTING\"}", "Normal", "Starting",
     "Task QUEUED -> STARTING"},
    {"Task", "{\"state\":\"RUNNING\"}",
     "{\"state\":\"TERMINATING\",\"endReason\":\"IdleTimeout\",\"message\":\"idle for 60s\"}",
     "Normal", "Terminating", "Task RUNNING -> TERMINATING: idle for 60s"},
    {"Task", "{\"state\":\"TERMINATING\"}",
     "{\"state\":\"TERMINATED\",\"endReason\":\"IdleTimeout\",\"message\":\"ended by its "
     "idle_timeout\"}",
     "Normal", "IdleTimeout",
     "Task TERMINATING -> TERMINATED (IdleTimeout): ended by its idle_timeout"},
    {"Task", "{\"state\":\"RUNNING\"}",
     "{\"state\":\"TERMINATED\",\"endReason\":\"Failed\",\"exitCode\":3}", "Warning", "Failed",
     "Task RUNNING -> TERMINATED (Failed)"},
    {"Task", "{\"state\":\"TERMINATED\"}", "{\"state\":\"TERMINATED\",\"endReason\":\"Killed\"}",
     NULL, NULL, NULL},
};

static void test_table(void **s)
{
    (void)s;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        json_t *old = r->old ? json_loads(r->old, 0, NULL) : NULL;
        json_t *patch = json_loads(r->patch, 0, NULL);
        struct kd_event ev;
        bool got = kd_event_for_change(r->kind, old, patch, &ev);
        if (got != (r->type != NULL))
            fail_msg("row %zu (%s %s): event %s, want %s", i, r->kind, r->patch,
                     got ? "made" : "none", r->type ? "one" : "none");
        if (got) {
            if (strcmp(ev.type, r->type) != 0 || strcmp(ev.reason, r->reason) != 0 ||
                strcmp(ev.message, r->message) != 0)
                fail_msg("row %zu: got %s/%s \"%s\", want %s/%s \"%s\"", i, ev.type, ev.reason,
                         ev.message, r->type, r->reason, r->message);
        }
        json_decref(old);
        json_decref(patch);
    }
}

/* A trial's history entries: the same changes as its Events, with the states and the cause. */
static const struct hrow {
    const char *old, *patch;
    const char *decision, *reason, *details; /* NULL decision: no entry */
} hrows[] = {
    {NULL, "{\"state\":\"QUEUED\",\"message\":\"waiting for 1 GPU\"}", "QUEUED",
     "Trial (new) -> QUEUED: waiting for 1 GPU",
     "{\"from\":null,\"to\":\"QUEUED\",\"message\":\"waiting for 1 GPU\"}"},
    {"{\"state\":\"QUEUED\"}", "{\"state\":\"ACTIVE\",\"message\":\"\"}", "ACTIVE",
     "Trial QUEUED -> ACTIVE", "{\"from\":\"QUEUED\",\"to\":\"ACTIVE\"}"},
    {"{\"state\":\"ACTIVE\"}", "{\"state\":\"COMPLETED\"}", "COMPLETED",
     "Trial ACTIVE -> COMPLETED", "{\"from\":\"ACTIVE\",\"to\":\"COMPLETED\"}"},
    {"{\"state\":\"ACTIVE\"}", "{\"state\":\"ERROR\",\"message\":\"exit code 1: boom\"}", "ERROR",
     "Trial ACTIVE -> ERROR: exit code 1: boom",
     "{\"from\":\"ACTIVE\",\"to\":\"ERROR\",\"message\":\"exit code 1: boom\"}"},
    {"{\"state\":\"ACTIVE\",\"restarts\":1}",
     "{\"state\":\"QUEUED\",\"restarts\":2,\"message\":\"exit code 3; restart 2 of "
     "max_restarts=5\"}",
     "restart", "Trial restarted (restart 2): exit code 3; restart 2 of max_restarts=5",
     "{\"from\":\"ACTIVE\",\"to\":\"QUEUED\",\"restarts\":2,\"message\":\"exit code 3; "
     "restart 2 of max_restarts=5\"}"},
    {"{\"state\":\"ACTIVE\",\"restarts\":0}", "{\"restarts\":1}", "restart",
     "Trial restarted (restart 1)", "{\"from\":\"ACTIVE\",\"to\":\"ACTIVE\",\"restarts\":1}"},
    {"{\"state\":\"ACTIVE\"}", "{\"state\":\"ACTIVE\",\"batchesTrained\":10}", NULL, NULL, NULL},
    {"{\"state\":\"QUEUED\",\"restarts\":1}", "{\"restarts\":1}", NULL, NULL, NULL},
    {"{\"state\":\"ACTIVE\"}", "{\"state\":\"NOT_A_STATE\"}", NULL, NULL, NULL},
};

static void test_history(void **s)
{
    (void)s;
    for (size_t i = 0; i < sizeof(hrows) / sizeof(hrows[0]); i++) {
        const struct hrow *r = &hrows[i];
        json_t *old = r->old ? json_loads(r->old, 0, NULL) : NULL;
        json_t *patch = json_loads(r->patch, 0, NULL);
        struct kd_history h;
        bool got = kd_event_history(old, patch, &h);
        if (got != (r->decision != NULL))
            fail_msg("row %zu (%s): entry %s, want %s", i, r->patch, got ? "made" : "none",
                     r->decision ? "one" : "none");
        if (got) {
            json_t *want = json_loads(r->details, 0, NULL);
            char *d = json_dumps(h.details, JSON_SORT_KEYS | JSON_COMPACT);
            if (strcmp(h.decision, r->decision) != 0 || strcmp(h.reason, r->reason) != 0 ||
                !json_equal(h.details, want))
                fail_msg("row %zu: got %s \"%s\" %s, want %s \"%s\" %s", i, h.decision, h.reason, d,
                         r->decision, r->reason, r->details);
            free(d);
            json_decref(want);
        } else {
            assert_null(h.details);
        }
        json_decref(h.details);
        json_decref(old);
        json_decref(patch);
    }
}

static void test_object(void **s)
{
    (void)s;
    json_t *trial = json_pack("{s:{s:s,s:s,s:s,s:s}}", "metadata", "name", "exp-3", "namespace",
                              "team", "uid", "u-1", "resourceVersion", "42");
    struct kd_event ev = {.type = "Warning", .reason = "Failed"};
    snprintf(ev.message, sizeof(ev.message), "Trial ACTIVE -> ERROR");
    json_t *e = kd_event_object(trial, "kdet.io/v1alpha1", "Trial", &ev, "kdet-controller",
                                1764080000123LL, 7);
    json_t *inv = json_object_get(e, "involvedObject");
    assert_string_equal(json_string_value(json_object_get(e, "kind")), "Event");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(e, "metadata"), "namespace")), "team");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "metadata"), "name")),
                        "exp-3.19abb5c9c7b0007");
    assert_string_equal(json_string_value(json_object_get(inv, "kind")), "Trial");
    assert_string_equal(json_string_value(json_object_get(inv, "apiVersion")), "kdet.io/v1alpha1");
    assert_string_equal(json_string_value(json_object_get(inv, "uid")), "u-1");
    assert_string_equal(json_string_value(json_object_get(inv, "name")), "exp-3");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "Warning");
    assert_string_equal(json_string_value(json_object_get(e, "reason")), "Failed");
    assert_string_equal(json_string_value(json_object_get(e, "firstTimestamp")),
                        "2025-11-25T14:13:20Z");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(e, "source"), "component")),
        "kdet-controller");
    assert_int_equal(json_integer_value(json_object_get(e, "count")), 1);
    json_decref(e);
    json_decref(trial);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_history),
        cmocka_unit_test(test_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
