/*
 * The Task state machine (kd_task_next, docs/tasks.md), one row per
 * transition: queueing with the scheduler's reason, admission and the
 * cache's lag, starting and running (a service once its port is
 * reported), a command's exit code, pods that cannot start or disappear,
 * kills (at once) and idle timeouts (graceful, and never while in use),
 * the end and its leftovers, invalid configs; parsing of states and end
 * reasons.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "taskprobe.h"
#include "taskstate.h"

/* FACTS() and WANT() start from defaults that a row's fields override. */
#pragma GCC diagnostic ignored "-Woverride-init"

/* A command with a valid config, nothing running yet; the wall clock at 1000 s. */
#define FACTS(...)                                                                                 \
    {                                                                                              \
        .exit_code = -1, .now_ms = 1000000, .probe_ms = 5000, __VA_ARGS__                          \
    }
#define WANT(...)                                                                                  \
    {                                                                                              \
        .exit_code = -1, __VA_ARGS__                                                               \
    }
#define ACT(w) .what = KD_TASK_DO_##w
#define ST(s) .state = KD_TASK_##s
#define END(e) .end = KD_TASK_END_##e

struct row {
    const char *name;
    struct kd_task_facts f;
    struct kd_task_action want; /* message "": compared not at all */
};

static const struct row rows[] = {
    /* ---- queued ---- */
    {"new: waits for the scheduler", FACTS(),
     WANT(ACT(WAIT), ST(QUEUED), .message = "waiting for the scheduler", .kick = true)},
    {"queued behind higher priority: says why",
     FACTS(.wait_reason = "waiting for 1 GPUs on one node of resource pool default (0 free)"),
     WANT(ACT(WAIT), ST(QUEUED),
          .message = "waiting for 1 GPUs on one node of resource pool default (0 free)",
          .kick = true)},
    {"admitted: the pod is made (once the API server confirms there is none)",
     FACTS(.admitted = true), WANT(ACT(START), ST(STARTING), .confirm_no_pods = true)},
    {"invalid config: ends at once, saying why",
     FACTS(.cfg_rc = -1020, .cfg_err = "invalid config: spec.config.resources.slots: ..."),
     WANT(ACT(END), ST(TERMINATED), END(ERROR),
          .message = "invalid config: spec.config.resources.slots: ...", .drop_admission = true,
          .kick = true)},
    {"queued with a pod (its STARTING write was lost): adopted", FACTS(.npods = 1, .pending = 1),
     WANT(ACT(RUN), ST(STARTING), .message = "pod created; waiting for it to run")},
    /* ---- starting and running ---- */
    {"starting: the pod is pending", FACTS(.cur = KD_TASK_STARTING, .npods = 1, .pending = 1),
     WANT(ACT(RUN), ST(STARTING), .message = "pod created; waiting for it to run")},
    {"a command's pod runs: RUNNING", FACTS(.cur = KD_TASK_STARTING, .npods = 1, .running = 1),
     WANT(ACT(RUN), ST(RUNNING), .message = "running")},
    {"a service's pod runs, its port not reported yet: still STARTING",
     FACTS(.cur = KD_TASK_STARTING, .service = true, .npods = 1, .running = 1),
     WANT(ACT(RUN), ST(STARTING),
          .message = "pod running; waiting for the task's service to report its port",
          .requeue_ms = 5000)},
    {"a service reported its port but does not listen yet: STARTING, looked at again soon",
     FACTS(.cur = KD_TASK_STARTING, .service = true, .npods = 1, .running = 1, .address = true),
     WANT(ACT(RUN), ST(STARTING),
          .message = "pod running; waiting for the task's service to listen on its port",
          .requeue_ms = 500)},
    {"a service listens where it said: RUNNING",
     FACTS(.cur = KD_TASK_STARTING, .service = true, .npods = 1, .running = 1, .address = true,
           .listening = true),
     WANT(ACT(RUN), ST(RUNNING), .message = "running")},
    {"starting without a pod in the cache: ends only once the API server has none either",
     FACTS(.cur = KD_TASK_STARTING),
     WANT(ACT(END), ST(TERMINATED), END(ERROR), .message = "the task's pod disappeared",
          .confirm_no_pods = true, .drop_admission = true, .kick = true)},
    {"running, its pod deleted by someone else: ends (tasks are not restarted)",
     FACTS(.cur = KD_TASK_RUNNING),
     WANT(ACT(END), ST(TERMINATED), END(ERROR), .message = "the task's pod disappeared",
          .confirm_no_pods = true, .drop_admission = true, .kick = true)},
    {"the image cannot be pulled: ends with the reason, the pod goes at once",
     FACTS(.cur = KD_TASK_STARTING, .npods = 1, .pending = 1, .pod_stuck = true,
           .failure = "pod t-0 cannot start: ErrImagePull: not found"),
     WANT(ACT(END), ST(TERMINATED), END(ERROR),
          .message = "pod t-0 cannot start: ErrImagePull: not found", .delete_now = true,
          .drop_admission = true, .kick = true)},
    /* ---- the process ends ---- */
    {"the command exits 0: Completed",
     FACTS(.cur = KD_TASK_RUNNING, .npods = 1, .succeeded = 1, .exit_code = 0),
     WANT(ACT(END), ST(TERMINATED), END(COMPLETED), .exit_code = 0,
          .message = "the task's process exited with code 0", .drop_admission = true,
          .kick = true)},
    {"the command exits 3: Failed with its code",
     FACTS(.cur = KD_TASK_RUNNING, .npods = 1, .failed = 1, .exit_code = 3,
           .failure = "pod t-0 failed (Error)"),
     WANT(ACT(END), ST(TERMINATED), END(FAILED), .exit_code = 3,
          .message = "the task's process exited with code 3", .drop_admission = true,
          .kick = true)},
    {"a failed pod with no exit code: Failed with what the pod says",
     FACTS(.cur = KD_TASK_STARTING, .npods = 1, .failed = 1, .failure = "pod t-0 failed (Evicted)"),
     WANT(ACT(END), ST(TERMINATED), END(FAILED), .message = "pod t-0 failed (Evicted)",
          .drop_admission = true, .kick = true)},
    {"a quick command seen only once it ended: Completed from QUEUED",
     FACTS(.npods = 1, .succeeded = 1, .exit_code = 0),
     WANT(ACT(END), ST(TERMINATED), END(COMPLETED), .exit_code = 0,
          .message = "the task's process exited with code 0", .drop_admission = true,
          .kick = true)},
    /* ---- kills ---- */
    {"killed while running: the pod goes at once",
     FACTS(.cur = KD_TASK_RUNNING, .killed = true, .npods = 1, .running = 1),
     WANT(ACT(STOP), ST(TERMINATING), END(KILLED), .message = "killed: deleting the task's pod",
          .delete_now = true, .kick = true, .requeue_ms = 1000)},
    {"killed while queued: ended, the admission given back",
     FACTS(.killed = true, .admitted = true),
     WANT(ACT(END), ST(TERMINATED), END(KILLED), .message = "killed", .drop_admission = true,
          .kick = true)},
    {"killed, its pod gone: TERMINATED Killed with the exit code seen",
     FACTS(.cur = KD_TASK_TERMINATING, .killed = true, .ended = KD_TASK_END_KILLED),
     WANT(ACT(END), ST(TERMINATED), END(KILLED), .message = "killed", .drop_admission = true,
          .kick = true)},
    {"killed while terminating for idleness: the kill wins, at once",
     FACTS(.cur = KD_TASK_TERMINATING, .ended = KD_TASK_END_IDLE, .killed = true, .npods = 1,
           .running = 1, .deleting = 1),
     WANT(ACT(STOP), ST(TERMINATING), END(KILLED), .message = "killed: deleting the task's pod",
          .delete_now = true, .kick = true, .requeue_ms = 1000)},
    /* ---- idle timeouts ---- */
    {"running with an idle timeout, in use: looked at again",
     FACTS(.cur = KD_TASK_RUNNING, .service = true, .address = true, .npods = 1, .running = 1,
           .idle_ms = 60000, .busy = true, .last_activity_ms = 100000),
     WANT(ACT(RUN), ST(RUNNING), .message = "running", .requeue_ms = 5000)},
    {"idle for less than the timeout: looked at again when it would pass (or sooner)",
     FACTS(.cur = KD_TASK_RUNNING, .service = true, .address = true, .npods = 1, .running = 1,
           .idle_ms = 60000, .last_activity_ms = 998000),
     WANT(ACT(RUN), ST(RUNNING), .message = "running", .requeue_ms = 5000)},
    {"idle for 1.9 s of a 2 s timeout: looked at again in 0.2 s",
     FACTS(.cur = KD_TASK_RUNNING, .service = true, .address = true, .npods = 1, .running = 1,
           .idle_ms = 2000, .last_activity_ms = 998100),
     WANT(ACT(RUN), ST(RUNNING), .message = "running", .requeue_ms = 200)},
    {"idle past the timeout: stopped gracefully, IdleTimeout",
     FACTS(.cur = KD_TASK_RUNNING, .service = true, .address = true, .npods = 1, .running = 1,
           .idle_ms = 60000, .last_activity_ms = 900000),
     WANT(ACT(STOP), ST(TERMINATING), END(IDLE),
          .message = "idle for 100s (idle_timeout 60s): ending the task", .kick = true,
          .requeue_ms = 1000)},
    {"idle for exactly its timeout: stopped",
     FACTS(.cur = KD_TASK_RUNNING, .service = true, .address = true, .npods = 1, .running = 1,
           .idle_ms = 60000, .last_activity_ms = 940000),
     WANT(ACT(STOP), ST(TERMINATING), END(IDLE),
          .message = "idle for 60s (idle_timeout 60s): ending the task", .kick = true,
          .requeue_ms = 1000)},
    {"idle past the timeout but in use (an open kernel channel): kept",
     FACTS(.cur = KD_TASK_RUNNING, .service = true, .address = true, .npods = 1, .running = 1,
           .idle_ms = 60000, .busy = true, .last_activity_ms = 900000),
     WANT(ACT(RUN), ST(RUNNING), .message = "running", .requeue_ms = 5000)},
    {"no idle timeout: never stopped for idleness",
     FACTS(.cur = KD_TASK_RUNNING, .service = true, .address = true, .npods = 1, .running = 1,
           .last_activity_ms = 1),
     WANT(ACT(RUN), ST(RUNNING), .message = "running")},
    {"still STARTING: idleness does not count yet",
     FACTS(.cur = KD_TASK_STARTING, .service = true, .address = true, .listening = true, .npods = 1,
           .running = 1, .idle_ms = 1000, .last_activity_ms = 1),
     WANT(ACT(RUN), ST(RUNNING), .message = "running")},
    {"terminating for idleness, the pod still there: deleted again (idempotent)",
     FACTS(.cur = KD_TASK_TERMINATING, .ended = KD_TASK_END_IDLE, .npods = 1, .running = 1),
     WANT(ACT(STOP), ST(TERMINATING), END(IDLE), .message = "stopping: deleting the task's pod",
          .kick = true, .requeue_ms = 1000)},
    {"terminating, the pod being deleted: wait",
     FACTS(.cur = KD_TASK_TERMINATING, .ended = KD_TASK_END_IDLE, .npods = 1, .deleting = 1,
           .succeeded = 1),
     WANT(ACT(NOTHING), ST(TERMINATING), .requeue_ms = 1000)},
    {"terminating, the pod gone: TERMINATED IdleTimeout",
     FACTS(.cur = KD_TASK_TERMINATING, .ended = KD_TASK_END_IDLE),
     WANT(ACT(END), ST(TERMINATED), END(IDLE), .message = "ended by its idle_timeout",
          .drop_admission = true, .kick = true)},
    /* ---- ended ---- */
    {"ended: leftover pods go at once", FACTS(.cur = KD_TASK_TERMINATED, .npods = 1, .running = 1),
     WANT(ACT(CLEANUP), ST(TERMINATED), .delete_now = true)},
    {"ended, nothing left: nothing to do", FACTS(.cur = KD_TASK_TERMINATED, .killed = true),
     WANT(ACT(NOTHING), ST(TERMINATED))},
};

static const char *action_diff(const struct kd_task_action *g, const struct kd_task_action *w)
{
    if (g->what != w->what)
        return "what";
    if (g->state != w->state)
        return "state";
    if (g->end != w->end)
        return "end";
    if (g->exit_code != w->exit_code)
        return "exit_code";
    if (w->message[0] != '\0' && strcmp(g->message, w->message) != 0)
        return "message";
    if (g->delete_now != w->delete_now)
        return "delete_now";
    if (g->confirm_no_pods != w->confirm_no_pods)
        return "confirm_no_pods";
    if (g->drop_admission != w->drop_admission)
        return "drop_admission";
    if (g->kick != w->kick)
        return "kick";
    if (g->requeue_ms != w->requeue_ms)
        return "requeue_ms";
    return NULL;
}

static void test_next(void **s)
{
    (void)s;
    int bad = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        struct kd_task_action got = kd_task_next(&r->f);
        const char *diff = action_diff(&got, &r->want);
        if (diff != NULL) {
            print_error("row %zu \"%s\": %s differs: got %s/%s/%s exit %d \"%s\" requeue %ld, "
                        "want %s/%s/%s\n",
                        i, r->name, diff, kd_task_do_name(got.what), kd_task_state_name(got.state),
                        kd_task_end_name(got.end), got.exit_code, got.message, got.requeue_ms,
                        kd_task_do_name(r->want.what), kd_task_state_name(r->want.state),
                        kd_task_end_name(r->want.end));
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

static void test_names(void **s)
{
    (void)s;
    enum kd_task_state st;
    assert_true(kd_task_state_parse(NULL, &st));
    assert_int_equal(st, KD_TASK_QUEUED);
    assert_true(kd_task_state_parse("", &st));
    assert_int_equal(st, KD_TASK_QUEUED);
    for (int i = KD_TASK_QUEUED; i <= KD_TASK_TERMINATED; i++) {
        assert_true(kd_task_state_parse(kd_task_state_name((enum kd_task_state)i), &st));
        assert_int_equal(st, i);
    }
    assert_false(kd_task_state_parse("ACTIVE", &st));
    for (int e = KD_TASK_END_COMPLETED; e <= KD_TASK_END_ERROR; e++)
        assert_int_equal(kd_task_end_parse(kd_task_end_name((enum kd_task_end)e)), e);
    assert_int_equal(kd_task_end_parse("Preempted"), KD_TASK_END_NONE);
    assert_int_equal(kd_task_end_parse(NULL), KD_TASK_END_NONE);
    assert_string_equal(kd_task_end_name(KD_TASK_END_IDLE), "IdleTimeout");
    assert_string_equal(kd_task_do_name(KD_TASK_DO_CLEANUP), "CLEANUP");
}

/* What Jupyter's answers mean for the idle timeout, by notebook_idle_type (Determined's rules). */
static void test_probe_read(void **state)
{
    (void)state;
    static const struct {
        const char *name, *status, *kernels, *terminals, *sessions, *idle_type;
        bool busy;
        int64_t last_ms;
    } cases[] = {
        {"nothing: idle", "{\"connections\":0,\"kernels\":0}", "[]", "[]", "[]", NULL, false, 0},
        {"an idle kernel exists: in use (kernels_or_terminals)", "{}",
         "[{\"execution_state\":\"idle\",\"connections\":0}]", "[]", "[]", NULL, true, 0},
        {"a terminal is open: in use", "{}", "[]", "[{\"name\":\"1\"}]", "[]",
         "kernels_or_terminals", true, 0},
        {"a session: in use", "{}", "[]", "[]", "[{\"id\":\"s\"}]", NULL, true, 0},
        {"no terminals API (404): kernels decide", "{}", "[]", NULL, NULL, NULL, false, 0},
        {"kernel_connections: an idle kernel without a channel is idle", "{}",
         "[{\"execution_state\":\"idle\",\"connections\":0}]", "[{\"name\":\"1\"}]", "[]",
         "kernel_connections", false, 0},
        {"kernel_connections: an open channel is use", "{}",
         "[{\"execution_state\":\"idle\",\"connections\":1}]", "[]", "[]", "kernel_connections",
         true, 0},
        {"activity: an idle kernel and a terminal are not use", "{}",
         "[{\"execution_state\":\"idle\",\"connections\":1}]", "[{\"name\":\"1\"}]", "[]",
         "activity", false, 0},
        {"activity: an executing kernel is", "{}", "[{\"execution_state\":\"busy\"}]", "[]", "[]",
         "activity", true, 0},
        {"the latest last_activity, a terminal's included",
         "{\"last_activity\":\"2026-11-27T10:00:00Z\"}",
         "[{\"execution_state\":\"idle\",\"last_activity\":\"2026-11-27T10:00:05Z\"}]",
         "[{\"name\":\"1\",\"last_activity\":\"2026-11-27T10:00:09Z\"}]", "[]", "activity", false,
         1795773609000},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *st = json_loads(cases[i].status, 0, NULL);
        json_t *k = cases[i].kernels ? json_loads(cases[i].kernels, 0, NULL) : NULL;
        json_t *t = cases[i].terminals ? json_loads(cases[i].terminals, 0, NULL) : NULL;
        json_t *se = cases[i].sessions ? json_loads(cases[i].sessions, 0, NULL) : NULL;
        struct kd_taskprobe p;
        assert_int_equal(kd_taskprobe_read(st, k, t, se, cases[i].idle_type, &p), 0);
        if (p.busy != cases[i].busy || (cases[i].last_ms != 0 && p.last_ms != cases[i].last_ms))
            fail_msg("%s: busy %d last_ms %lld, want %d %lld", cases[i].name, p.busy,
                     (long long)p.last_ms, cases[i].busy, (long long)cases[i].last_ms);
        json_decref(st);
        json_decref(k);
        json_decref(t);
        json_decref(se);
    }
    struct kd_taskprobe p;
    json_t *arr = json_array();
    assert_int_equal(kd_taskprobe_read(arr, arr, NULL, NULL, NULL, &p), KD_EPROTO);
    json_decref(arr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_next),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_probe_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
