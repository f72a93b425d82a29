/*
 * The Experiment and Trial state machines of docs/resources.md as pure
 * functions, so the rules are tested apart from the API calls that carry
 * them out.
 */
#ifndef KD_CTRL_STATES_H
#define KD_CTRL_STATES_H

#include <stdbool.h>

enum kd_exp_state {
    KD_EXP_ACTIVE = 0,
    KD_EXP_PAUSED,
    KD_EXP_STOPPING_COMPLETED,
    KD_EXP_STOPPING_CANCELED,
    KD_EXP_STOPPING_ERROR,
    KD_EXP_COMPLETED,
    KD_EXP_CANCELED,
    KD_EXP_ERROR,
};

/** "ACTIVE"...; static. */
const char *kd_exp_state_name(enum kd_exp_state s);
/** Name -> state; false for anything else ("" included). */
bool kd_exp_state_parse(const char *s, enum kd_exp_state *out);
bool kd_exp_state_terminal(enum kd_exp_state s);

/** What the experiment reconciler knows when it picks the next state. */
struct kd_exp_facts {
    bool invalid;          /* the configuration failed validation */
    bool canceled;         /* spec.canceled */
    bool paused;           /* spec.paused */
    bool searcher_done;    /* the searcher emitted Shutdown */
    bool searcher_failure; /* ... with failure=true */
    int live_trials;       /* trials not yet COMPLETED, CANCELED or ERROR */
};

/**
 * The next state from the current one and the facts. Terminal states stay;
 * cancel wins over everything but a terminal state; a finished search
 * stops (STOPPING_*) until no trial is live, then ends.
 */
enum kd_exp_state kd_exp_next_state(enum kd_exp_state cur, const struct kd_exp_facts *f);

/** Trial states (status.state); "" (new) parses as QUEUED. */
enum kd_trial_state {
    KD_TRIAL_QUEUED = 0,
    KD_TRIAL_ACTIVE,
    KD_TRIAL_PAUSED,
    KD_TRIAL_STOPPING_COMPLETED,
    KD_TRIAL_STOPPING_CANCELED,
    KD_TRIAL_STOPPING_KILLED,
    KD_TRIAL_STOPPING_ERROR,
    KD_TRIAL_COMPLETED,
    KD_TRIAL_CANCELED,
    KD_TRIAL_ERROR,
};

const char *kd_trial_state_name(enum kd_trial_state s);
bool kd_trial_state_parse(const char *s, enum kd_trial_state *out);
bool kd_trial_state_terminal(enum kd_trial_state s);

/** What a trial's attempt came to, from its pods. */
enum kd_attempt {
    KD_ATTEMPT_NONE = 0,  /* no pods */
    KD_ATTEMPT_RUNNING,   /* pods pending or running */
    KD_ATTEMPT_SUCCEEDED, /* every pod exited 0 */
    KD_ATTEMPT_FAILED,    /* a pod failed */
};

/** The trial reconciler's decision for a failed attempt. */
enum kd_trial_failure_action {
    KD_TRIAL_RESTART, /* back to QUEUED with restarts + 1 */
    KD_TRIAL_FAIL,    /* ERROR: max_restarts used up */
};

/*
 * A trial that has reached its target (status.latestValidation.batches >=
 * spec.validateAfter) and is not closed waits for the searcher. With the
 * API on, once it has waited KD_TRIAL_IDLE_RELEASE_DEFAULT_MS (or
 * $KDET_IDLE_RELEASE_AFTER seconds) the controller sets condition Idle:
 * the workers checkpoint and exit 0, the pods are deleted, and the trial
 * stays ACTIVE without pods (the scheduler admits QUEUED trials only)
 * until the searcher raises its target (QUEUED again, resumed from its
 * checkpoint) or closes it (COMPLETED).
 */
#define KD_TRIAL_COND_IDLE "Idle"
#define KD_TRIAL_IDLE_RELEASE_DEFAULT_MS 5000L
/** The Experiment annotation `det experiment kill` sets: pods are deleted at once. */
#define KD_TRIAL_KILL_ANNOTATION "kdet.io/kill"

/** Whether a trial waits for the searcher: target > 0, reached >= target, not closed. */
bool kd_trial_at_target(long long target, long long reached, bool closed);

/**
 * Parse $KDET_IDLE_RELEASE_AFTER: whole seconds >= 0 (at most a day) into
 * *ms; false (and *ms untouched) for anything else.
 */
bool kd_trial_idle_release_parse(const char *s, long *ms);

/** restarts so far vs max_restarts. */
enum kd_trial_failure_action kd_trial_on_failure(int restarts, int max_restarts);

/** Backoff before attempt restarts+1 is queued: 1 s doubling, capped at 60 s. */
long kd_trial_restart_backoff_ms(int restarts);

#endif
