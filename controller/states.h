/*
 * The Experiment and Trial state machines of docs/resources.md as pure
 * functions, so the rules are tested apart from the API calls that carry
 * them out.
 */
#ifndef KD_CTRL_STATES_H
#define KD_CTRL_STATES_H

#include <stdbool.h>
#include <stdint.h>

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
/*
 * The length of the one operation of a single, random or grid searcher
 * whose config has no max_length (Determined 0.38: the training code
 * decides): workers that exit 0 after at least one validation short of it
 * complete the trial. Equal to KD_SEARCH_OPEN_LENGTH (controller/searcher).
 */
#define KD_TRIAL_OPEN_LENGTH 2147483647LL

/** Whether a trial waits for the searcher: target > 0, reached >= target, not closed. */
bool kd_trial_at_target(long long target, long long reached, bool closed);

/**
 * Parse $KDET_IDLE_RELEASE_AFTER: whole seconds >= 0 (at most a day) into
 * *ms; false (and *ms untouched) for anything else.
 */
bool kd_trial_idle_release_parse(const char *s, long *ms);

/** restarts so far vs max_restarts. */
enum kd_trial_failure_action kd_trial_on_failure(int restarts, int max_restarts);

/**
 * How far in the future a trial's latestValidation.time may be (the clocks of
 * the API replica that wrote it and of the reconciler differ) before it counts
 * as unknown: a trial at its target then releases its pods at once.
 */
#define KD_TRIAL_CLOCK_SKEW_MS 2000

/** Backoff before attempt restarts+1 is queued: 1 s doubling, capped at 60 s. */
long kd_trial_restart_backoff_ms(int restarts);

/** The trial reconciler's facts: what it read before deciding (gather), borrowed strings. */
struct kd_trial_facts {
    enum kd_trial_state cur; /* status.state ("" parses as QUEUED) */
    /* The current attempt, from the trial's pods. */
    int npods, running, succeeded, failed, deleting;
    long long attempt_target; /* the validateAfter the attempt was started for (0: unknown) */
    const char *failure;      /* what the first failed pod says ("pod x failed (...)") */
    /* The Trial. */
    bool paused;            /* spec.paused */
    bool closed;            /* spec.closed: the searcher closed it */
    long long target;       /* spec.validateAfter */
    long long reached;      /* status.latestValidation.batches */
    int64_t validated_ms;   /* status.latestValidation.time, wall ms; 0: absent or unreadable */
    bool idle;              /* condition Idle is True */
    int restarts;           /* status.restarts */
    const char *early_exit; /* the reason of a True EarlyExit condition, NULL: none */
    /* Log policies that matched (status.logPolicies; docs/config.md, log_policies). */
    const char *log_cancel;  /* a cancel_retries policy, as `"NAME" (pattern P)`; NULL: none */
    const char *log_exclude; /* the nodes exclude_node policies keep attempts off ("n1, n2") */
    /* Its Experiment. */
    bool exp_cached;    /* false: not in the cache (yet); nothing else below is set */
    bool exp_has_state; /* status.state parsed */
    enum kd_exp_state exp_state;
    bool exp_state_current; /* status.observedGeneration == metadata.generation */
    bool exp_canceled;      /* spec.canceled */
    bool exp_paused;        /* spec.paused */
    bool exp_deleting;      /* metadata.deletionTimestamp set */
    bool exp_killed;        /* annotation KD_TRIAL_KILL_ANNOTATION set */
    int cfg_rc;             /* kd_ctrl_exp_config's result: 0, or why there is no configuration */
    int max_restarts;       /* the configuration's max_restarts */
    /* What the scheduler handed over. */
    const char *preempted;   /* the reason of a pending preemption, NULL: none */
    bool admitted;           /* an unused admission waits */
    const char *wait_reason; /* why the trial waits, NULL: no word from the scheduler */
    bool wait_never;         /* ... and it never fits */
    /* The controller. */
    bool api_on;          /* the store and API are on: metrics flow, Idle applies */
    int64_t now_ms;       /* wall clock */
    long idle_release_ms; /* how long a trial waits at its target with its pods */
    long resync_ms;
};

/** What the trial reconciler does next (kd_trial_next). */
enum kd_trial_do {
    KD_TRIAL_DO_NOTHING = 0, /* nothing, come back after requeue_ms (0: on the next event) */
    KD_TRIAL_DO_NO_CONFIG,   /* the configuration could not be had: fail with cfg_rc */
    KD_TRIAL_DO_CLEANUP,     /* ended: delete leftover pods, repair the end conditions */
    KD_TRIAL_DO_STOP,        /* paused or stopped: delete the pods first, then write state */
    KD_TRIAL_DO_SET_STATE,   /* write state and message, then delete the pods when asked */
    KD_TRIAL_DO_LEFTOVERS,   /* pods of an earlier attempt: delete them unless the trial is
                                ACTIVE on the API server (the cache lags) */
    KD_TRIAL_DO_ADOPT,       /* pods whose ACTIVE write was lost: ACTIVE, Scheduled */
    KD_TRIAL_DO_IDLE,        /* wait at the target without pods (Idle=True) */
    KD_TRIAL_DO_START,       /* take the admission and create the attempt's pods */
    KD_TRIAL_DO_WAIT,        /* QUEUED with the scheduler's reason (Scheduled=False) */
    KD_TRIAL_DO_RECORD,      /* without the API: record the attempt's target as reached */
    KD_TRIAL_DO_RELEASE, /* at the target too long: Idle=True, the workers checkpoint and exit */
    KD_TRIAL_DO_RUN,     /* running: bring status.pods and conditions up to date */
};

/** What the reconciler logs about a decision. */
enum kd_trial_note {
    KD_TRIAL_NOTE_NONE = 0,
    KD_TRIAL_NOTE_EARLY_EXIT, /* the worker reported an early exit */
    KD_TRIAL_NOTE_PREEMPTED,
    KD_TRIAL_NOTE_RESTART, /* the attempt failed; restarted */
    KD_TRIAL_NOTE_FAILED,  /* the attempt failed; max_restarts used up */
    KD_TRIAL_NOTE_COMPLETED,
    KD_TRIAL_NOTE_PROMOTED, /* an idle trial was queued again by the searcher */
};

/** The decision (kd_trial_next); strings are static or in message. */
struct kd_trial_action {
    enum kd_trial_do what;
    enum kd_trial_state state; /* to write (SET_STATE, STOP) */
    char message[700];         /* status.message to write */
    int restarts;              /* status.restarts to write; -1: unchanged */
    bool delete_pods;          /* SET_STATE, IDLE: delete the pods once the status is written */
    bool delete_now;           /* with gracePeriodSeconds 0 (a kill) */
    bool clear_pods;           /* status.pods = [] */
    bool preempted;            /* SET_STATE: condition Preempted=True with the message */
    bool confirm_no_pods;      /* first ask the API server that there are no pods (the cache
                                  may lag behind creates); when there are: requeue 500 ms */
    const char *idle_reason;   /* Idle becomes False with this reason (when it was True) */
    const char *idle_message;
    bool drop_admission;  /* IDLE: give back an admission made meanwhile */
    bool take_preemption; /* the pending preemption is consumed */
    enum kd_trial_note note;
    bool kick;         /* wake the scheduler */
    long requeue_ms;   /* 0: none */
    int64_t waited_ms; /* RELEASE: how long the trial waited at its target (-1: Idle
                          already; not logged again) */
};

/**
 * The Trial state machine of docs/resources.md: from the facts, what the
 * reconciler does. Pure: no I/O, no locks, no globals.
 */
struct kd_trial_action kd_trial_next(const struct kd_trial_facts *f);

/** "NOTHING"...; static. */
const char *kd_trial_do_name(enum kd_trial_do d);

#endif
