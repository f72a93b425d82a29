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

/* FACTS() and WANT() start from defaults that a row's fields override. */
#pragma GCC diagnostic ignored "-Woverride-init"

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

/*
 * The Trial state machine (kd_trial_next), one row per transition. FACTS() starts from a trial of
 * a live experiment with a valid configuration (max_restarts 2) and overrides what the row names;
 * WANT() is the whole expected action (restarts -1: unchanged), compared field by field.
 */
#define FACTS(...)                                                                                 \
    {                                                                                              \
        .exp_cached = true, .exp_has_state = true, .exp_state = KD_EXP_ACTIVE,                     \
        .exp_state_current = true, .max_restarts = 2, .resync_ms = 30000, .idle_release_ms = 5000, \
        .now_ms = 1000000, .failure = "pod t-0 failed (exit code 3)", __VA_ARGS__                  \
    }
#define WANT(...)                                                                                  \
    {                                                                                              \
        .restarts = -1, __VA_ARGS__                                                                \
    }
#define ACT(w) .what = KD_TRIAL_DO_##w
#define ST(s) .state = KD_TRIAL_##s

struct trial_row {
    const char *name;
    struct kd_trial_facts f;
    struct kd_trial_action want; /* message: "" compares nothing */
};

static const struct trial_row trial_rows[] = {
    {"experiment not cached yet: look again in 5 s", FACTS(.exp_cached = false),
     WANT(ACT(NOTHING), .requeue_ms = 5000)},
    {"ended: leftover pods go, gracefully", FACTS(.cur = KD_TRIAL_COMPLETED, .npods = 1),
     WANT(ACT(CLEANUP), ST(COMPLETED))},
    {"ended by a kill: leftover pods go at once",
     FACTS(.cur = KD_TRIAL_CANCELED, .npods = 1, .exp_killed = true),
     WANT(ACT(CLEANUP), ST(CANCELED), .delete_now = true)},
    {"early exit, canceled by the user",
     FACTS(.cur = KD_TRIAL_ACTIVE, .early_exit = "UserCanceled"),
     WANT(ACT(SET_STATE), ST(CANCELED), .message = "the trial exited early: UserCanceled",
          .clear_pods = true, .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_EARLY_EXIT)},
    {"early exit, an error", FACTS(.cur = KD_TRIAL_ACTIVE, .early_exit = "Errored"),
     WANT(ACT(SET_STATE), ST(ERROR), .message = "the trial exited early: Errored",
          .clear_pods = true, .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_EARLY_EXIT)},
    {"early exit wins over a failed pod: no restart",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1, .early_exit = "user_canceled"),
     WANT(ACT(SET_STATE), ST(CANCELED), .clear_pods = true, .delete_pods = true, .kick = true,
          .note = KD_TRIAL_NOTE_EARLY_EXIT)},
    {"experiment canceled: stopping while pods go",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 2, .running = 2, .exp_canceled = true),
     WANT(ACT(STOP), ST(STOPPING_CANCELED), .message = "stopping: the experiment was canceled",
          .requeue_ms = 1000, .kick = true)},
    {"experiment killed: pods go at once",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .running = 1, .exp_canceled = true,
           .exp_killed = true),
     WANT(ACT(STOP), ST(STOPPING_KILLED), .message = "stopping: the experiment was killed",
          .delete_now = true, .requeue_ms = 1000, .kick = true)},
    {"experiment canceled, pods gone: CANCELED",
     FACTS(.cur = KD_TRIAL_STOPPING_CANCELED, .exp_canceled = true),
     WANT(ACT(STOP), ST(CANCELED), .message = "the experiment was canceled", .clear_pods = true,
          .idle_reason = "Stopped", .kick = true)},
    {"experiment killed, pods gone: CANCELED",
     FACTS(.cur = KD_TRIAL_STOPPING_KILLED, .exp_state = KD_EXP_STOPPING_CANCELED,
           .exp_killed = true),
     WANT(ACT(STOP), ST(CANCELED), .message = "the experiment was killed", .delete_now = true,
          .clear_pods = true, .idle_reason = "Stopped", .kick = true)},
    {"experiment deleted: its trials stop", FACTS(.cur = KD_TRIAL_QUEUED, .exp_deleting = true),
     WANT(ACT(STOP), ST(CANCELED), .clear_pods = true, .idle_reason = "Stopped", .kick = true)},
    {"experiment STOPPING_ERROR stops its trials",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .running = 1, .exp_state = KD_EXP_STOPPING_ERROR),
     WANT(ACT(STOP), ST(STOPPING_CANCELED), .requeue_ms = 1000, .kick = true)},
    {"experiment COMPLETED stops its trials",
     FACTS(.cur = KD_TRIAL_QUEUED, .exp_state = KD_EXP_COMPLETED),
     WANT(ACT(STOP), ST(CANCELED), .clear_pods = true, .idle_reason = "Stopped", .kick = true)},
    {"experiment ERROR for its current spec stops its trials",
     FACTS(.cur = KD_TRIAL_QUEUED, .exp_state = KD_EXP_ERROR),
     WANT(ACT(STOP), ST(CANCELED), .clear_pods = true, .idle_reason = "Stopped", .kick = true)},
    {"experiment ERROR for an older spec (being retried) does not",
     FACTS(.cur = KD_TRIAL_QUEUED, .exp_state = KD_EXP_ERROR, .exp_state_current = false),
     WANT(ACT(WAIT), ST(QUEUED), .message = "waiting for the scheduler", .kick = true)},
    {"an unknown experiment state does not stop",
     FACTS(.cur = KD_TRIAL_QUEUED, .exp_has_state = false, .exp_state = KD_EXP_CANCELED),
     WANT(ACT(WAIT), ST(QUEUED), .kick = true)},
    {"a kill annotation alone does not stop (pause: graceful)",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .running = 1, .exp_paused = true,
           .exp_killed = true),
     WANT(ACT(STOP), ST(ACTIVE), .message = "pausing: deleting the trial's pods",
          .requeue_ms = 1000, .kick = true)},
    {"trial paused: its pods go, the state stays",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .running = 1, .paused = true),
     WANT(ACT(STOP), ST(ACTIVE), .message = "pausing: deleting the trial's pods",
          .requeue_ms = 1000, .kick = true)},
    {"experiment paused, pods gone: PAUSED", FACTS(.cur = KD_TRIAL_ACTIVE, .exp_paused = true),
     WANT(ACT(STOP), ST(PAUSED), .message = "paused", .clear_pods = true, .idle_reason = "Paused",
          .kick = true)},
    {"cancel wins over pause", FACTS(.cur = KD_TRIAL_PAUSED, .paused = true, .exp_canceled = true),
     WANT(ACT(STOP), ST(CANCELED), .clear_pods = true, .idle_reason = "Stopped", .kick = true)},
    {"no configuration: the reconcile fails", FACTS(.cur = KD_TRIAL_QUEUED, .cfg_rc = -22),
     WANT(ACT(NO_CONFIG), ST(QUEUED))},
    {"search over, target reached: COMPLETED",
     FACTS(.cur = KD_TRIAL_ACTIVE, .exp_state = KD_EXP_STOPPING_COMPLETED, .target = 100,
           .reached = 100),
     WANT(ACT(SET_STATE), ST(COMPLETED), .message = "completed", .clear_pods = true,
          .idle_reason = "Closed", .delete_pods = true)},
    {"search over before the trial ran: CANCELED",
     FACTS(.cur = KD_TRIAL_QUEUED, .exp_state = KD_EXP_STOPPING_COMPLETED, .target = 100),
     WANT(ACT(SET_STATE), ST(CANCELED), .message = "the search ended before this trial ran",
          .clear_pods = true, .idle_reason = "Closed", .delete_pods = true)},
    {"search over, still running: it runs on",
     FACTS(.cur = KD_TRIAL_ACTIVE, .exp_state = KD_EXP_STOPPING_COMPLETED, .npods = 1, .running = 1,
           .target = 100),
     WANT(ACT(RUN), ST(ACTIVE), .message = "running", .idle_reason = "Promoted")},
    {"preempted: queued again, pods go",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .running = 1, .preempted = "priority 10 needs it"),
     WANT(ACT(SET_STATE), ST(QUEUED), .message = "priority 10 needs it", .preempted = true,
          .clear_pods = true, .delete_pods = true, .requeue_ms = 1000, .take_preemption = true,
          .note = KD_TRIAL_NOTE_PREEMPTED)},
    {"a preemption of a trial that does not run is consumed",
     FACTS(.cur = KD_TRIAL_QUEUED, .preempted = "late", .wait_reason = "no free GPU"),
     WANT(ACT(WAIT), ST(QUEUED), .message = "no free GPU", .take_preemption = true, .kick = true)},
    {"queued, pods of an earlier attempt left: clear them first",
     FACTS(.cur = KD_TRIAL_QUEUED, .npods = 1, .failed = 1, .admitted = true),
     WANT(ACT(LEFTOVERS), ST(QUEUED))},
    {"queued, pods being deleted: clear them first",
     FACTS(.cur = KD_TRIAL_QUEUED, .npods = 1, .running = 1, .deleting = 1),
     WANT(ACT(LEFTOVERS), ST(QUEUED))},
    {"queued with running pods (a lost ACTIVE write): adopt them",
     FACTS(.cur = KD_TRIAL_QUEUED, .npods = 2, .running = 2),
     WANT(ACT(ADOPT), ST(ACTIVE), .message = "running")},
    {"queued at its target (API on): idle without pods",
     FACTS(.cur = KD_TRIAL_QUEUED, .api_on = true, .target = 32, .reached = 32, .admitted = true),
     WANT(ACT(IDLE), ST(QUEUED), .drop_admission = true, .kick = true)},
    {"queued at its target, closed: not idle",
     FACTS(.cur = KD_TRIAL_QUEUED, .api_on = true, .target = 32, .reached = 32, .closed = true,
           .admitted = true),
     WANT(ACT(START), ST(QUEUED), .confirm_no_pods = true)},
    {"queued at its target without the API: starts when admitted",
     FACTS(.cur = KD_TRIAL_QUEUED, .target = 32, .reached = 32, .admitted = true),
     WANT(ACT(START), ST(QUEUED), .confirm_no_pods = true)},
    {"queued and admitted: start an attempt", FACTS(.cur = KD_TRIAL_QUEUED, .admitted = true),
     WANT(ACT(START), ST(QUEUED), .confirm_no_pods = true)},
    {"queued after a restart and admitted: the next attempt starts",
     FACTS(.cur = KD_TRIAL_QUEUED, .admitted = true, .restarts = 1),
     WANT(ACT(START), ST(QUEUED), .confirm_no_pods = true)},
    {"queued, the scheduler says why it waits",
     FACTS(.cur = KD_TRIAL_QUEUED, .wait_reason = "needs 8 GPUs; 4 free", .wait_never = true),
     WANT(ACT(WAIT), ST(QUEUED), .message = "needs 8 GPUs; 4 free", .kick = true)},
    {"resumed from PAUSED: queued again", FACTS(.cur = KD_TRIAL_PAUSED, .admitted = true),
     WANT(ACT(START), ST(PAUSED), .confirm_no_pods = true)},
    {"a stop that no longer applies: queued again", FACTS(.cur = KD_TRIAL_STOPPING_CANCELED),
     WANT(ACT(WAIT), ST(QUEUED), .message = "waiting for the scheduler", .kick = true)},
    {"attempt failed: restart 1 of 2 after 1 s",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 2, .running = 1, .failed = 1),
     WANT(ACT(SET_STATE), ST(QUEUED),
          .message = "pod t-0 failed (exit code 3); restart 1 of max_restarts=2", .restarts = 1,
          .clear_pods = true, .delete_pods = true, .requeue_ms = 1000, .kick = true,
          .note = KD_TRIAL_NOTE_RESTART)},
    {"attempt failed again: restart 2 of 2 after 2 s",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1, .restarts = 1),
     WANT(ACT(SET_STATE), ST(QUEUED), .restarts = 2, .clear_pods = true, .delete_pods = true,
          .requeue_ms = 2000, .kick = true, .note = KD_TRIAL_NOTE_RESTART)},
    {"attempt failed, max_restarts used up: ERROR",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1, .restarts = 2),
     WANT(ACT(SET_STATE), ST(ERROR),
          .message = "pod t-0 failed (exit code 3); max_restarts=2 used up", .delete_pods = true,
          .kick = true, .note = KD_TRIAL_NOTE_FAILED)},
    {"log policy cancel_retries matched: the failure ends the trial at once",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1,
           .log_cancel = "\"CUDA OOM\" (pattern .*CUDA out of memory.*)"),
     WANT(ACT(SET_STATE), ST(ERROR),
          .message = "pod t-0 failed (exit code 3); not restarted: log policy \"CUDA OOM\" "
                     "(pattern .*CUDA out of memory.*) matched (cancel_retries)",
          .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_FAILED)},
    {"cancel_retries matched, no failure: the trial runs on",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .running = 1, .log_cancel = "\"x\" (pattern x)"),
     WANT(ACT(RUN), ST(ACTIVE), .message = "running", .idle_reason = "Promoted")},
    {"cancel_retries matched and the trial completes: COMPLETED, not ERROR",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1, .target = 64, .reached = 64,
           .closed = true, .api_on = true, .log_cancel = "\"x\" (pattern x)"),
     WANT(ACT(SET_STATE), ST(COMPLETED), .clear_pods = true, .idle_reason = "Closed",
          .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_COMPLETED)},
    {"an early exit wins over cancel_retries",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1, .early_exit = "Errored",
           .log_cancel = "\"x\" (pattern x)"),
     WANT(ACT(SET_STATE), ST(ERROR), .message = "the trial exited early: Errored",
          .clear_pods = true, .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_EARLY_EXIT)},
    {"log policy exclude_node matched: restarted, the message names the node",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1, .log_exclude = "gpu-3"),
     WANT(ACT(SET_STATE), ST(QUEUED),
          .message = "pod t-0 failed (exit code 3); restart 1 of max_restarts=2; the next "
                     "attempt avoids gpu-3 (exclude_node log policy)",
          .restarts = 1, .clear_pods = true, .delete_pods = true, .requeue_ms = 1000, .kick = true,
          .note = KD_TRIAL_NOTE_RESTART)},
    {"exclude_node with max_restarts used up: ERROR as usual",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1, .restarts = 2, .log_exclude = "gpu-3"),
     WANT(ACT(SET_STATE), ST(ERROR),
          .message = "pod t-0 failed (exit code 3); max_restarts=2 used up", .delete_pods = true,
          .kick = true, .note = KD_TRIAL_NOTE_FAILED)},
    {"max_restarts 0: the first failure ends the trial",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .failed = 1, .max_restarts = 0),
     WANT(ACT(SET_STATE), ST(ERROR), .delete_pods = true, .kick = true,
          .note = KD_TRIAL_NOTE_FAILED)},
    {"without the API, exit 0 records the attempt's target",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1, .attempt_target = 64, .target = 64),
     WANT(ACT(RECORD), ST(ACTIVE),
          .message = "reached the searcher's target; waiting for its next operation",
          .requeue_ms = 1000)},
    {"target reached and closed: COMPLETED",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1, .target = 64, .reached = 64,
           .closed = true, .idle = true),
     WANT(ACT(SET_STATE), ST(COMPLETED), .message = "completed", .clear_pods = true,
          .idle_reason = "Closed", .delete_pods = true, .kick = true,
          .note = KD_TRIAL_NOTE_COMPLETED)},
    {"target reached, workers exited (API on): idle, pods go (ASHA)",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .succeeded = 1, .target = 64,
           .reached = 64),
     WANT(ACT(IDLE), ST(ACTIVE), .delete_pods = true, .requeue_ms = 30000)},
    {"target reached, no pods (API on): stays idle",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .target = 64, .reached = 64, .idle = true),
     WANT(ACT(IDLE), ST(ACTIVE), .delete_pods = true, .requeue_ms = 30000)},
    {"target reached without the API: wait for the searcher",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1, .attempt_target = 64, .target = 64,
           .reached = 64),
     WANT(ACT(NOTHING), ST(ACTIVE), .requeue_ms = 30000)},
    {"at the target within the grace: look again when it ends",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .running = 1, .target = 64,
           .reached = 64, .validated_ms = 998000),
     WANT(ACT(RUN), ST(ACTIVE), .message = "running", .idle_reason = "Promoted",
          .requeue_ms = 3100)},
    {"at the target past the grace: release the GPUs (ASHA)",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .running = 1, .target = 64,
           .reached = 64, .validated_ms = 990000),
     WANT(ACT(RELEASE), ST(ACTIVE), .requeue_ms = 30000, .waited_ms = 10000)},
    {"at the target, validation time an hour ahead (a clock jump): release at once",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .running = 1, .target = 64,
           .reached = 64, .validated_ms = 1000000 + 3600000),
     WANT(ACT(RELEASE), ST(ACTIVE), .requeue_ms = 30000, .waited_ms = 0)},
    {"at the target, validation time within the skew allowed: the grace from that time",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .running = 1, .target = 64,
           .reached = 64, .validated_ms = 1000000 + KD_TRIAL_CLOCK_SKEW_MS),
     WANT(ACT(RUN), ST(ACTIVE), .message = "running", .idle_reason = "Promoted",
          .requeue_ms = 5000 + KD_TRIAL_CLOCK_SKEW_MS + 100)},
    {"at the target, validation time an hour behind: released, waited an hour",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .running = 1, .target = 64,
           .reached = 64, .validated_ms = 1000000 - 3600000),
     WANT(ACT(RELEASE), ST(ACTIVE), .requeue_ms = 30000, .waited_ms = 3600000)},
    {"at the target, already Idle: keep releasing",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .running = 1, .target = 64,
           .reached = 64, .validated_ms = 999999, .idle = true),
     WANT(ACT(RELEASE), ST(ACTIVE), .requeue_ms = 30000, .waited_ms = -1)},
    {"at the target, closed: no release",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .npods = 1, .running = 1, .target = 64,
           .reached = 64, .closed = true),
     WANT(ACT(RUN), ST(ACTIVE), .message = "running", .idle_reason = "Closed")},
    {"at the target without the API: no release",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .running = 1, .target = 64, .reached = 64),
     WANT(ACT(RUN), ST(ACTIVE), .idle_reason = "Promoted")},
    {"attempt done, target raised: a new attempt",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1, .attempt_target = 64, .target = 128,
           .reached = 64, .api_on = true),
     WANT(ACT(SET_STATE), ST(QUEUED), .message = "more training asked by the searcher",
          .clear_pods = true, .idle_reason = "Promoted", .delete_pods = true, .kick = true)},
    {"exit 0 short of the operation's length: a failed attempt, restarted",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1, .attempt_target = 64, .target = 64,
           .reached = 0, .api_on = true),
     WANT(ACT(SET_STATE), ST(QUEUED),
          .message = "the workers exited 0 before completing the searcher's operation (the "
                     "latest validation is at 0 of 64); report a validation at op.length and "
                     "call op.report_completed; restart 1 of max_restarts=2",
          .restarts = 1, .clear_pods = true, .requeue_ms = 1000, .delete_pods = true, .kick = true,
          .note = KD_TRIAL_NOTE_RESTART)},
    {"exit 0 short of the operation's length, restarts used up: ERROR, never an endless relaunch",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 2, .succeeded = 2, .attempt_target = 128, .target = 128,
           .reached = 64, .api_on = true, .restarts = 2),
     WANT(ACT(SET_STATE), ST(ERROR),
          .message = "the workers exited 0 before completing the searcher's operation (the "
                     "latest validation is at 64 of 128); report a validation at op.length and "
                     "call op.report_completed; max_restarts=2 used up",
          .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_FAILED)},
    {"exit 0 short of the length after the searcher closed the trial: COMPLETED, no relaunch",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1, .attempt_target = 64, .target = 64,
           .reached = 32, .api_on = true, .closed = true),
     WANT(ACT(SET_STATE), ST(COMPLETED), .message = "completed: closed by the searcher",
          .clear_pods = true, .idle_reason = "Closed", .delete_pods = true, .kick = true,
          .note = KD_TRIAL_NOTE_COMPLETED)},
    {"no max_length: exit 0 after a validation ends the trial, COMPLETED",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1,
           .attempt_target = KD_TRIAL_OPEN_LENGTH, .target = KD_TRIAL_OPEN_LENGTH, .reached = 937,
           .api_on = true),
     WANT(ACT(SET_STATE), ST(COMPLETED), .message = "completed: the training code ended it",
          .clear_pods = true, .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_COMPLETED)},
    {"no max_length: exit 0 before any validation is still a failed attempt",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 1, .succeeded = 1,
           .attempt_target = KD_TRIAL_OPEN_LENGTH, .target = KD_TRIAL_OPEN_LENGTH, .reached = 0,
           .api_on = true, .restarts = 2),
     WANT(ACT(SET_STATE), ST(ERROR),
          .message = "the workers exited 0 before completing the searcher's operation (the "
                     "latest validation is at 0 of 2147483647); report a validation at op.length "
                     "and call op.report_completed; max_restarts=2 used up",
          .delete_pods = true, .kick = true, .note = KD_TRIAL_NOTE_FAILED)},
    {"idle trial promoted: queued to resume",
     FACTS(.cur = KD_TRIAL_ACTIVE, .api_on = true, .target = 128, .reached = 64, .idle = true),
     WANT(ACT(SET_STATE), ST(QUEUED),
          .message = "promoted by the searcher to 128; queued to resume from its latest checkpoint",
          .clear_pods = true, .idle_reason = "Promoted", .confirm_no_pods = true, .kick = true,
          .note = KD_TRIAL_NOTE_PROMOTED)},
    {"pods disappeared: queued again once the API server agrees",
     FACTS(.cur = KD_TRIAL_ACTIVE, .target = 128),
     WANT(ACT(SET_STATE), ST(QUEUED), .message = "the trial's pods disappeared; queued again",
          .clear_pods = true, .idle_reason = "Promoted", .confirm_no_pods = true, .kick = true)},
    {"running: follow the attempt",
     FACTS(.cur = KD_TRIAL_ACTIVE, .npods = 2, .running = 1, .succeeded = 1, .target = 128),
     WANT(ACT(RUN), ST(ACTIVE), .message = "running", .idle_reason = "Promoted")},
};

/* The first field of the action that differs from the row's, or NULL. */
static const char *action_diff(const struct kd_trial_action *got, const struct kd_trial_action *w)
{
    if (got->what != w->what)
        return "what";
    if (got->state != w->state)
        return "state";
    if (w->message[0] != '\0' && strcmp(got->message, w->message) != 0)
        return "message";
    if (got->restarts != w->restarts)
        return "restarts";
    if (got->delete_pods != w->delete_pods)
        return "delete_pods";
    if (got->delete_now != w->delete_now)
        return "delete_now";
    if (got->clear_pods != w->clear_pods)
        return "clear_pods";
    if (got->preempted != w->preempted)
        return "preempted";
    if (got->confirm_no_pods != w->confirm_no_pods)
        return "confirm_no_pods";
    if (strcmp(got->idle_reason ?: "", w->idle_reason ?: "") != 0)
        return "idle_reason";
    if (got->drop_admission != w->drop_admission)
        return "drop_admission";
    if (got->take_preemption != w->take_preemption)
        return "take_preemption";
    if (got->note != w->note)
        return "note";
    if (got->kick != w->kick)
        return "kick";
    if (got->requeue_ms != w->requeue_ms)
        return "requeue_ms";
    if (w->what == KD_TRIAL_DO_RELEASE && got->waited_ms != w->waited_ms)
        return "waited_ms";
    return NULL;
}

static void test_trial_next(void **s)
{
    (void)s;
    int bad = 0;
    for (size_t i = 0; i < sizeof(trial_rows) / sizeof(trial_rows[0]); i++) {
        const struct trial_row *r = &trial_rows[i];
        struct kd_trial_action got = kd_trial_next(&r->f);
        const char *diff = action_diff(&got, &r->want);
        if (diff != NULL) {
            print_error("row %zu \"%s\": %s differs: got %s/%s \"%s\" requeue %ld, want %s/%s\n", i,
                        r->name, diff, kd_trial_do_name(got.what), kd_trial_state_name(got.state),
                        got.message, got.requeue_ms, kd_trial_do_name(r->want.what),
                        kd_trial_state_name(r->want.state));
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* What status.logPolicies (written by the API) give the trial reconciler and the scheduler. */
static void test_log_policy_records(void **s)
{
    (void)s;
    json_t *t = json_loads(
        "{\"status\":{\"logPolicies\":["
        "{\"name\":\"ECC\",\"pattern\":\"ECC\",\"action\":\"exclude_node\",\"node\":\"g3\"},"
        "{\"pattern\":\"ECC\",\"action\":\"exclude_node\",\"node\":\"g3\",\"runId\":\"r2\"},"
        "{\"pattern\":\"x\",\"action\":\"exclude_node\"},"
        "{\"pattern\":\"OOM\",\"action\":\"cancel_retries\"},"
        "{\"name\":\"ECC\",\"pattern\":\"ECC\",\"action\":\"exclude_node\",\"node\":\"g7\"}]}}",
        0, NULL);
    assert_non_null(t);
    const char *nodes[4];
    assert_int_equal(kd_ctrl_excluded_nodes(t, nodes, 4), 2);
    assert_string_equal(nodes[0], "g3");
    assert_string_equal(nodes[1], "g7");
    assert_int_equal(kd_ctrl_excluded_nodes(t, nodes, 1), 1);
    char buf[128];
    assert_true(kd_ctrl_log_cancel(json_object_get(t, "status"), buf, sizeof(buf)));
    assert_string_equal(buf, "(pattern OOM)");
    json_decref(t);
    t = json_loads("{\"status\":{\"logPolicies\":[{\"name\":\"CUDA OOM\",\"pattern\":\"a.*b\","
                   "\"action\":\"cancel_retries\"}]}}",
                   0, NULL);
    assert_true(kd_ctrl_log_cancel(json_object_get(t, "status"), buf, sizeof(buf)));
    assert_string_equal(buf, "\"CUDA OOM\" (pattern a.*b)");
    assert_int_equal(kd_ctrl_excluded_nodes(t, nodes, 4), 0);
    json_decref(t);
    t = json_loads("{\"status\":{}}", 0, NULL);
    assert_false(kd_ctrl_log_cancel(json_object_get(t, "status"), buf, sizeof(buf)));
    json_decref(t);
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

/* Which failures are retried soon: those of a dependency that comes back on its own. */
static void test_retry_cap(void **state)
{
    (void)state;
    static const struct {
        int rc;
        long want;
    } cases[] = {
        {KD_ECONNECT, KD_CTRL_TRANSIENT_RETRY_MS}, /* the database or the API server down */
        {KD_ETIMEDOUT, KD_CTRL_TRANSIENT_RETRY_MS},
        {KD_EAGAIN, KD_CTRL_TRANSIENT_RETRY_MS},
        {KD_EINVALID, 0}, /* the object's own fault: the growing backoff */
        {KD_EFORBIDDEN, 0},
        {KD_ECONFLICT, 0},
        {KD_ENOMEM, 0},
        {0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (kd_ctrl_retry_cap_ms(cases[i].rc) != cases[i].want)
            fail_msg("%s: got %ld, want %ld", kd_err_name(cases[i].rc),
                     kd_ctrl_retry_cap_ms(cases[i].rc), cases[i].want);
    }
    long after = 0;
    kd_ctrl_reconcile_end("experiment", "ns/x", KD_ECONNECT, "database unreachable", &after);
    assert_int_equal(after, KD_CTRL_TRANSIENT_RETRY_MS);
    after = 0;
    kd_ctrl_reconcile_end("experiment", "ns/x", KD_EINVALID, "bad", &after);
    assert_int_equal(after, 0);
    after = 700; /* a success keeps what the reconcile asked for */
    kd_ctrl_reconcile_end("experiment", "ns/x", 0, "", &after);
    assert_int_equal(after, 700);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_experiment),         cmocka_unit_test(test_trial),
        cmocka_unit_test(test_trial_next),         cmocka_unit_test(test_seed),
        cmocka_unit_test(test_log_policy_records), cmocka_unit_test(test_number),
        cmocka_unit_test(test_retry_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
