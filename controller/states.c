/*
 * Experiment and Trial state machines (see states.h and the diagram in
 * docs/resources.md).
 */
#include "states.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const exp_names[] = {
    "ACTIVE",         "PAUSED",    "STOPPING_COMPLETED", "STOPPING_CANCELED",
    "STOPPING_ERROR", "COMPLETED", "CANCELED",           "ERROR",
};

static const char *const trial_names[] = {
    "QUEUED",          "ACTIVE",         "PAUSED",    "STOPPING_COMPLETED", "STOPPING_CANCELED",
    "STOPPING_KILLED", "STOPPING_ERROR", "COMPLETED", "CANCELED",           "ERROR",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *kd_exp_state_name(enum kd_exp_state s)
{
    return (size_t)s < NELEM(exp_names) ? exp_names[s] : "UNKNOWN";
}

bool kd_exp_state_parse(const char *s, enum kd_exp_state *out)
{
    bool ok = false;
    for (size_t i = 0; s != NULL && i < NELEM(exp_names) && !ok; i++) {
        if (strcmp(s, exp_names[i]) == 0) {
            *out = (enum kd_exp_state)i;
            ok = true;
        }
    }
    return ok;
}

bool kd_exp_state_terminal(enum kd_exp_state s)
{
    return s == KD_EXP_COMPLETED || s == KD_EXP_CANCELED || s == KD_EXP_ERROR;
}

enum kd_exp_state kd_exp_next_state(enum kd_exp_state cur, const struct kd_exp_facts *f)
{
    enum kd_exp_state next = cur;
    if (kd_exp_state_terminal(cur))
        goto out;
    if (f->invalid) {
        next = KD_EXP_ERROR;
    } else if (f->canceled || cur == KD_EXP_STOPPING_CANCELED) {
        next = f->live_trials > 0 ? KD_EXP_STOPPING_CANCELED : KD_EXP_CANCELED;
    } else if (cur == KD_EXP_STOPPING_ERROR || (f->searcher_done && f->searcher_failure)) {
        next = f->live_trials > 0 ? KD_EXP_STOPPING_ERROR : KD_EXP_ERROR;
    } else if (f->searcher_done) {
        next = f->live_trials > 0 ? KD_EXP_STOPPING_COMPLETED : KD_EXP_COMPLETED;
    } else if (f->paused) {
        next = KD_EXP_PAUSED;
    } else {
        next = KD_EXP_ACTIVE;
    }
out:
    return next;
}

const char *kd_trial_state_name(enum kd_trial_state s)
{
    return (size_t)s < NELEM(trial_names) ? trial_names[s] : "UNKNOWN";
}

bool kd_trial_state_parse(const char *s, enum kd_trial_state *out)
{
    bool ok = false;
    if (s == NULL || s[0] == '\0') {
        *out = KD_TRIAL_QUEUED;
        ok = true;
    }
    for (size_t i = 0; s != NULL && i < NELEM(trial_names) && !ok; i++) {
        if (strcmp(s, trial_names[i]) == 0) {
            *out = (enum kd_trial_state)i;
            ok = true;
        }
    }
    return ok;
}

bool kd_trial_state_terminal(enum kd_trial_state s)
{
    return s == KD_TRIAL_COMPLETED || s == KD_TRIAL_CANCELED || s == KD_TRIAL_ERROR;
}

bool kd_trial_at_target(long long target, long long reached, bool closed)
{
    return target > 0 && reached >= target && !closed;
}

bool kd_trial_idle_release_parse(const char *s, long *ms)
{
    char *end = NULL;
    bool ok = false;
    if (s != NULL && s[0] >= '0' && s[0] <= '9') {
        long v = strtol(s, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 86400) {
            *ms = v * 1000;
            ok = true;
        }
    }
    return ok;
}

enum kd_trial_failure_action kd_trial_on_failure(int restarts, int max_restarts)
{
    return restarts < max_restarts ? KD_TRIAL_RESTART : KD_TRIAL_FAIL;
}

long kd_trial_restart_backoff_ms(int restarts)
{
    long d = 1000;
    for (int i = 0; i < restarts && d < 60000; i++)
        d *= 2;
    return d < 60000 ? d : 60000;
}

static const char *const do_names[] = {
    "NOTHING", "NO_CONFIG", "CLEANUP", "STOP",   "SET_STATE", "LEFTOVERS", "ADOPT",
    "IDLE",    "START",     "WAIT",    "RECORD", "RELEASE",   "RUN",
};

const char *kd_trial_do_name(enum kd_trial_do d)
{
    return (size_t)d < NELEM(do_names) ? do_names[d] : "UNKNOWN";
}

/* A decision to write state s with message msg (SET_STATE). */
static void set_state(struct kd_trial_action *a, enum kd_trial_state s, const char *msg)
{
    a->what = KD_TRIAL_DO_SET_STATE;
    a->state = s;
    snprintf(a->message, sizeof(a->message), "%s", msg);
}

/* Whether the experiment's state stops its trials: canceled, deleted, or ended (an ERROR only
 * for its current spec: a fixed configuration is being retried). */
static bool exp_stops(const struct kd_trial_facts *f)
{
    bool stop = f->exp_canceled || f->exp_deleting;
    if (f->exp_has_state) {
        switch (f->exp_state) {
        case KD_EXP_STOPPING_CANCELED:
        case KD_EXP_STOPPING_ERROR:
        case KD_EXP_CANCELED:
        case KD_EXP_COMPLETED: stop = true; break;
        case KD_EXP_ERROR: stop = stop || f->exp_state_current; break;
        default: break;
        }
    }
    return stop;
}

/* Paused, or its experiment stops it: the pods go first, then the state follows. */
static void stop_or_pause(const struct kd_trial_facts *f, bool stop, struct kd_trial_action *a)
{
    bool kill = stop && f->exp_killed;
    a->what = KD_TRIAL_DO_STOP;
    a->delete_now = kill;
    a->kick = true;
    if (f->npods > 0) {
        a->state = kill ? KD_TRIAL_STOPPING_KILLED : stop ? KD_TRIAL_STOPPING_CANCELED : f->cur;
        snprintf(a->message, sizeof(a->message), "%s",
                 kill   ? "stopping: the experiment was killed"
                 : stop ? "stopping: the experiment was canceled"
                        : "pausing: deleting the trial's pods");
        a->requeue_ms = 1000;
    } else {
        a->state = stop ? KD_TRIAL_CANCELED : KD_TRIAL_PAUSED;
        snprintf(a->message, sizeof(a->message), "%s",
                 kill   ? "the experiment was killed"
                 : stop ? "the experiment was canceled"
                        : "paused");
        a->clear_pods = true;
        a->idle_reason = stop ? "Stopped" : "Paused";
        a->idle_message = stop ? "the trial was stopped" : "the trial was paused";
    }
}

/* A QUEUED trial (or one resumed from PAUSED or a stop that no longer applies). */
static void queued(const struct kd_trial_facts *f, struct kd_trial_action *a)
{
    if (f->npods > 0 && (f->failed > 0 || f->succeeded > 0 || f->deleting > 0)) {
        a->what = KD_TRIAL_DO_LEFTOVERS;
    } else if (f->npods > 0) {
        a->what = KD_TRIAL_DO_ADOPT;
        a->state = KD_TRIAL_ACTIVE;
        snprintf(a->message, sizeof(a->message), "running");
    } else if (f->api_on && kd_trial_at_target(f->target, f->reached, f->closed)) {
        /* Paused or preempted at its target: nothing to train until the searcher raises the
         * target, so wait without pods. */
        a->what = KD_TRIAL_DO_IDLE;
        a->drop_admission = true;
        a->kick = true;
    } else if (f->admitted) {
        a->what = KD_TRIAL_DO_START;
        a->confirm_no_pods = true;
    } else {
        a->what = KD_TRIAL_DO_WAIT;
        a->state = KD_TRIAL_QUEUED;
        snprintf(a->message, sizeof(a->message), "%s",
                 f->wait_reason != NULL ? f->wait_reason : "waiting for the scheduler");
        a->kick = true;
    }
}

/*
 * A failed attempt: restart it (counted, with back-off) while max_restarts allows, else ERROR;
 * ERROR at once when a cancel_retries log policy matched. A restart names the nodes
 * exclude_node policies keep it off (the scheduler and the pods' affinity do the keeping).
 */
static void fail_attempt(const struct kd_trial_facts *f, const char *why, struct kd_trial_action *a)
{
    if (f->log_cancel != NULL) {
        set_state(a, KD_TRIAL_ERROR, "");
        snprintf(a->message, sizeof(a->message),
                 "%s; not restarted: log policy %s matched (cancel_retries)", why, f->log_cancel);
        a->note = KD_TRIAL_NOTE_FAILED;
    } else if (kd_trial_on_failure(f->restarts, f->max_restarts) == KD_TRIAL_RESTART) {
        set_state(a, KD_TRIAL_QUEUED, "");
        snprintf(a->message, sizeof(a->message), "%s; restart %d of max_restarts=%d%s%s%s", why,
                 f->restarts + 1, f->max_restarts,
                 f->log_exclude != NULL ? "; the next attempt avoids " : "",
                 f->log_exclude != NULL ? f->log_exclude : "",
                 f->log_exclude != NULL ? " (exclude_node log policy)" : "");
        a->restarts = f->restarts + 1;
        a->clear_pods = true;
        a->requeue_ms = kd_trial_restart_backoff_ms(f->restarts);
        a->note = KD_TRIAL_NOTE_RESTART;
    } else {
        set_state(a, KD_TRIAL_ERROR, "");
        snprintf(a->message, sizeof(a->message), "%s; max_restarts=%d used up", why,
                 f->max_restarts);
        a->note = KD_TRIAL_NOTE_FAILED;
    }
    a->delete_pods = true;
    a->kick = true;
}

static void failed(const struct kd_trial_facts *f, struct kd_trial_action *a)
{
    fail_attempt(f, f->failure != NULL ? f->failure : "", a);
}

/* The searcher closed the trial and its workers are done: COMPLETED. */
static void closed_done(struct kd_trial_action *a, const char *message)
{
    set_state(a, KD_TRIAL_COMPLETED, message);
    a->clear_pods = true;
    a->idle_reason = "Closed";
    a->idle_message = "the searcher closed the trial";
    a->delete_pods = true;
    a->kick = true;
    a->note = KD_TRIAL_NOTE_COMPLETED;
}

/* An ACTIVE trial: follow its attempt. */
static void active(const struct kd_trial_facts *f, struct kd_trial_action *a)
{
    bool all_done = f->npods > 0 && f->succeeded == f->npods;
    long idle_in_ms = -1; /* >= 0: within the grace, look again then */
    if (f->failed > 0) {
        failed(f, a);
        return;
    }
    if (all_done && !f->api_on && f->reached < f->attempt_target) {
        /* Interim until metrics flow: exit 0 means the attempt reached the target it was
         * started for; it is recorded with no metric value. */
        a->what = KD_TRIAL_DO_RECORD;
        a->state = KD_TRIAL_ACTIVE;
        snprintf(a->message, sizeof(a->message),
                 "reached the searcher's target; waiting for its next operation");
        a->requeue_ms = 1000;
        return;
    }
    if (all_done && f->api_on && f->closed && f->reached < f->target) {
        /* The searcher closed the trial before its length (the workers were told "stop"): it
         * is done; a new attempt would only be told to stop again. */
        closed_done(a, "completed: closed by the searcher");
        return;
    }
    if (all_done && f->api_on && !f->closed && f->attempt_target >= KD_TRIAL_OPEN_LENGTH &&
        f->reached > 0) {
        /* No max_length in the config: the training code ended the trial after validating. */
        set_state(a, KD_TRIAL_COMPLETED, "completed: the training code ended it");
        a->clear_pods = true;
        a->delete_pods = true;
        a->kick = true;
        a->note = KD_TRIAL_NOTE_COMPLETED;
        return;
    }
    if (all_done && f->api_on && !f->idle && !f->closed && f->attempt_target > 0 &&
        f->reached < f->attempt_target) {
        /* Every worker exited 0 but none reported a validation at the operation's length: the
         * training code ended before completing its searcher operation. Relaunching it would
         * loop for ever, so it counts as a failed attempt. */
        char why[256];
        snprintf(why, sizeof(why),
                 "the workers exited 0 before completing the searcher's operation (the latest "
                 "validation is at %lld of %lld); report a validation at op.length and call "
                 "op.report_completed",
                 f->reached, f->attempt_target);
        fail_attempt(f, why, a);
        return;
    }
    if (f->running == 0 && f->target > 0 && f->reached >= f->target &&
        (f->npods == 0 || all_done)) {
        if (f->closed) {
            closed_done(a, "completed");
        } else if (f->api_on) {
            /* The workers checkpointed and exited while waiting for the searcher (or the pods
             * are gone): the trial waits without pods until the searcher decides. */
            a->what = KD_TRIAL_DO_IDLE;
            a->delete_pods = true;
            a->requeue_ms = f->resync_ms;
        } else {
            a->requeue_ms = f->resync_ms; /* waiting for the searcher's next operation */
        }
        return;
    }
    if (f->api_on && f->running > 0 && kd_trial_at_target(f->target, f->reached, f->closed)) {
        /* The workers wait at their target for the searcher. After a grace (the searcher
         * usually answers at once), Idle tells them to checkpoint and exit, so that queued
         * trials get the GPUs. Counted from the validation's time: level-triggered. */
        a->waited_ms = -1;
        if (!f->idle) {
            /* latestValidation.time comes from the wall clock of the API replica that stored
             * the validation. One further ahead than KD_TRIAL_CLOCK_SKEW_MS (a clock that
             * jumped, a replica whose clock is off) would hold the GPUs until this clock
             * catches up, an hour for an hour's jump: such a time counts as unknown, and an
             * unknown time releases at once, as an absent one does. */
            if (f->validated_ms > f->now_ms + KD_TRIAL_CLOCK_SKEW_MS)
                a->waited_ms = 0;
            else if (f->now_ms - f->validated_ms < f->idle_release_ms)
                idle_in_ms = (long)(f->validated_ms + f->idle_release_ms - f->now_ms) + 100;
            else
                a->waited_ms = f->now_ms - f->validated_ms;
        }
        if (idle_in_ms < 0) {
            a->what = KD_TRIAL_DO_RELEASE;
            a->requeue_ms = f->resync_ms; /* the pods' exit wakes the reconciler */
            return;
        }
    }
    if (f->npods == 0 || all_done) {
        /* The searcher asked for more training (a new attempt continues the trial), or the
         * pods are gone. */
        set_state(a, KD_TRIAL_QUEUED,
                  all_done ? "more training asked by the searcher"
                           : "the trial's pods disappeared; queued again");
        if (f->idle)
            snprintf(a->message, sizeof(a->message),
                     "promoted by the searcher to %lld; queued to resume from its latest "
                     "checkpoint",
                     f->target);
        a->clear_pods = true;
        a->idle_reason = "Promoted";
        a->idle_message = "the searcher raised the trial's target";
        a->delete_pods = all_done;
        a->confirm_no_pods = f->npods == 0; /* pods just created may not be in the cache yet */
        a->kick = true;
        if (f->idle && f->running == 0)
            a->note = KD_TRIAL_NOTE_PROMOTED;
        return;
    }
    a->what = KD_TRIAL_DO_RUN;
    a->state = KD_TRIAL_ACTIVE;
    snprintf(a->message, sizeof(a->message), "running");
    a->idle_reason = f->closed ? "Closed" : "Promoted";
    a->idle_message =
        f->closed ? "the searcher closed the trial" : "the searcher raised the trial's target";
    if (f->idle && f->running == 0)
        a->note = KD_TRIAL_NOTE_PROMOTED;
    if (idle_in_ms >= 0)
        a->requeue_ms = idle_in_ms;
}

struct kd_trial_action kd_trial_next(const struct kd_trial_facts *f)
{
    struct kd_trial_action a = {.what = KD_TRIAL_DO_NOTHING, .state = f->cur, .restarts = -1};
    bool stop;
    if (!f->exp_cached) {
        a.requeue_ms = 5000; /* the experiment is not in the cache (yet) */
    } else if (kd_trial_state_terminal(f->cur)) {
        a.what = KD_TRIAL_DO_CLEANUP;
        a.delete_now = f->exp_killed;
    } else if (f->early_exit != NULL) {
        /* The worker reported an early exit: the trial ends there, whatever its pods do next,
         * and is never restarted. */
        bool canceled = strcmp(f->early_exit, "UserCanceled") == 0 ||
                        strcmp(f->early_exit, "user_canceled") == 0;
        set_state(&a, canceled ? KD_TRIAL_CANCELED : KD_TRIAL_ERROR, "");
        snprintf(a.message, sizeof(a.message), "the trial exited early: %.63s", f->early_exit);
        a.clear_pods = true;
        a.delete_pods = true;
        a.kick = true;
        a.note = KD_TRIAL_NOTE_EARLY_EXIT;
    } else if ((stop = exp_stops(f)) || f->paused || f->exp_paused) {
        stop_or_pause(f, stop, &a);
    } else if (f->cfg_rc != 0) {
        a.what = KD_TRIAL_DO_NO_CONFIG;
    } else if (f->exp_has_state && f->exp_state == KD_EXP_STOPPING_COMPLETED && f->running == 0) {
        /* The search is over: nothing new starts; a trial that reached its target is done. */
        bool done = f->target > 0 && f->reached >= f->target;
        set_state(&a, done ? KD_TRIAL_COMPLETED : KD_TRIAL_CANCELED,
                  done ? "completed" : "the search ended before this trial ran");
        a.clear_pods = true;
        a.idle_reason = "Closed";
        a.idle_message = "the search ended";
        a.delete_pods = true;
    } else {
        a.take_preemption = f->preempted != NULL;
        if (f->preempted != NULL && f->cur == KD_TRIAL_ACTIVE) {
            /* Preempted by the scheduler: stop the attempt and queue the trial again. */
            set_state(&a, KD_TRIAL_QUEUED, f->preempted);
            a.preempted = true;
            a.clear_pods = true;
            a.delete_pods = true;
            a.requeue_ms = 1000;
            a.note = KD_TRIAL_NOTE_PREEMPTED;
        } else if (f->cur == KD_TRIAL_ACTIVE) {
            active(f, &a);
        } else {
            queued(f, &a); /* QUEUED, or resumed from PAUSED or a stop that no longer applies */
        }
    }
    return a;
}
