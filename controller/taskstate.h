/*
 * The Task state machine (docs/tasks.md) as a pure function: from what the
 * task reconciler gathered (the Task, its pod, what the scheduler handed
 * over, the activity of its service), what it does next. Tested row by
 * row in test_ctrl_taskstate.
 *
 * QUEUED -> STARTING (pod created) -> RUNNING (pod running; a service
 * task once its port is reported) -> TERMINATING (pod being deleted:
 * killed, idle) -> TERMINATED (endReason Completed, Failed, Killed,
 * IdleTimeout or Error; exitCode when the process ended). Tasks are never
 * restarted and never preemption victims.
 */
#ifndef KD_CTRL_TASKSTATE_H
#define KD_CTRL_TASKSTATE_H

#include <stdbool.h>
#include <stdint.h>

enum kd_task_state {
    KD_TASK_QUEUED = 0,
    KD_TASK_STARTING,
    KD_TASK_RUNNING,
    KD_TASK_TERMINATING,
    KD_TASK_TERMINATED,
};

/** "QUEUED"...; static. */
const char *kd_task_state_name(enum kd_task_state s);
/** Name -> state; "" (new) and NULL parse as QUEUED; false for anything else. */
bool kd_task_state_parse(const char *s, enum kd_task_state *out);

/** Why a TERMINATED task ended (status.endReason). */
enum kd_task_end {
    KD_TASK_END_NONE = 0,
    KD_TASK_END_COMPLETED, /* the process exited 0 */
    KD_TASK_END_FAILED,    /* the process exited non-zero */
    KD_TASK_END_KILLED,    /* spec.killed */
    KD_TASK_END_IDLE,      /* idle_timeout passed */
    KD_TASK_END_ERROR,     /* an invalid config, a pod that could not run or disappeared */
};

/** "Completed", "Failed", "Killed", "IdleTimeout", "Error"; "" for NONE. Static. */
const char *kd_task_end_name(enum kd_task_end e);
/** The inverse; NONE for anything else. */
enum kd_task_end kd_task_end_parse(const char *s);

/** The task reconciler's facts: what it read before deciding; borrowed strings. */
struct kd_task_facts {
    enum kd_task_state cur;
    enum kd_task_end ended; /* status.endReason while TERMINATING (why it stops) */
    bool killed;            /* spec.killed */
    bool service;           /* a notebook, shell or TensorBoard: RUNNING needs its address */
    int cfg_rc;             /* the config check: 0, or why it cannot run */
    const char *cfg_err;    /* ... in words */
    /* Its pod (the current one). */
    int npods, pending, running, succeeded, failed, deleting;
    int exit_code;       /* of the ended container; -1: unknown */
    const char *failure; /* what a pod that could not run says (NULL: nothing) */
    bool pod_stuck;      /* the pod cannot start (image pull, config error): it never will */
    bool address;        /* status.address is the current run's */
    bool listening;      /* ... and something accepts connections there (STARTING) */
    /* What the scheduler handed over. */
    bool admitted;
    const char *wait_reason; /* NULL: no word yet */
    bool wait_never;
    /* Idleness (RUNNING only). */
    int64_t idle_ms;          /* idle_timeout; 0: none */
    bool busy;                /* in use now (a busy kernel, an open connection) */
    bool activity_known;      /* the service could be asked (a notebook answered) */
    int64_t last_activity_ms; /* wall ms: the latest use seen (or the start) */
    int64_t now_ms;
    long probe_ms; /* how often a running task with an idle timeout is looked at again */
};

/** What the task reconciler does next. */
enum kd_task_do {
    KD_TASK_DO_NOTHING = 0, /* come back after requeue_ms (0: on the next event) */
    KD_TASK_DO_WAIT,        /* QUEUED with the scheduler's reason (Scheduled=False) */
    KD_TASK_DO_START,       /* take the admission, create the pod: STARTING */
    KD_TASK_DO_RUN,         /* bring state (STARTING/RUNNING), pods and conditions up to date */
    KD_TASK_DO_STOP,        /* delete the pod (delete_now: at once); TERMINATING, end_reason */
    KD_TASK_DO_END,         /* TERMINATED with end_reason, exit_code and message; delete pods */
    KD_TASK_DO_CLEANUP,     /* TERMINATED: delete leftover pods */
};

struct kd_task_action {
    enum kd_task_do what;
    enum kd_task_state state;
    enum kd_task_end end;
    int exit_code; /* -1: none */
    char message[512];
    bool delete_now;      /* STOP, END, CLEANUP: gracePeriodSeconds 0 */
    bool confirm_no_pods; /* first ask the API server (the cache may lag behind a create) */
    bool drop_admission;  /* give back an admission that will not be used */
    bool kick;            /* wake the scheduler: slots were freed */
    long requeue_ms;
};

/** The decision. Pure: no I/O, no locks, no globals. */
struct kd_task_action kd_task_next(const struct kd_task_facts *f);

/** "NOTHING"...; static. */
const char *kd_task_do_name(enum kd_task_do d);

#endif
