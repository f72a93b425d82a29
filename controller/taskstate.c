/*
 * The Task state machine (see taskstate.h and docs/tasks.md).
 */
#include "taskstate.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const state_names[] = {"QUEUED", "STARTING", "RUNNING", "TERMINATING",
                                          "TERMINATED"};
static const char *const end_names[] = {"",       "Completed",   "Failed",
                                        "Killed", "IdleTimeout", "Error"};
static const char *const do_names[] = {"NOTHING", "WAIT", "START", "RUN", "STOP", "END", "CLEANUP"};

const char *kd_task_state_name(enum kd_task_state s)
{
    return (size_t)s < NELEM(state_names) ? state_names[s] : "UNKNOWN";
}

bool kd_task_state_parse(const char *s, enum kd_task_state *out)
{
    if (s == NULL || s[0] == '\0') {
        *out = KD_TASK_QUEUED;
        return true;
    }
    for (size_t i = 0; i < NELEM(state_names); i++) {
        if (strcmp(s, state_names[i]) == 0) {
            *out = (enum kd_task_state)i;
            return true;
        }
    }
    return false;
}

const char *kd_task_end_name(enum kd_task_end e)
{
    return (size_t)e < NELEM(end_names) ? end_names[e] : "";
}

enum kd_task_end kd_task_end_parse(const char *s)
{
    for (size_t i = 1; s != NULL && i < NELEM(end_names); i++)
        if (strcmp(s, end_names[i]) == 0)
            return (enum kd_task_end)i;
    return KD_TASK_END_NONE;
}

const char *kd_task_do_name(enum kd_task_do d)
{
    return (size_t)d < NELEM(do_names) ? do_names[d] : "UNKNOWN";
}

/* TERMINATED with why, the exit code (-1: none) and a message. */
static void end(struct kd_task_action *a, enum kd_task_end why, int exit_code, const char *msg)
{
    a->what = KD_TASK_DO_END;
    a->state = KD_TASK_TERMINATED;
    a->end = why;
    a->exit_code = exit_code;
    a->drop_admission = true;
    a->kick = true;
    snprintf(a->message, sizeof(a->message), "%s", msg);
}

/* TERMINATING: the pod is deleted (at once for a kill), then TERMINATED follows. */
static void stop(struct kd_task_action *a, enum kd_task_end why, bool now, const char *msg)
{
    a->what = KD_TASK_DO_STOP;
    a->state = KD_TASK_TERMINATING;
    a->end = why;
    a->delete_now = now;
    a->kick = true;
    a->requeue_ms = 1000;
    snprintf(a->message, sizeof(a->message), "%s", msg);
}

/* The process ended (every pod Succeeded, or one Failed): TERMINATED with its exit code. */
static void exited(const struct kd_task_facts *f, struct kd_task_action *a)
{
    char msg[256];
    bool ok = f->failed == 0 && f->exit_code <= 0;
    int code = f->exit_code >= 0 ? f->exit_code : (ok ? 0 : -1);
    if (code >= 0)
        snprintf(msg, sizeof(msg), "the task's process exited with code %d", code);
    else
        snprintf(msg, sizeof(msg), "%s", f->failure != NULL ? f->failure : "the task's pod failed");
    end(a, ok ? KD_TASK_END_COMPLETED : KD_TASK_END_FAILED, code, msg);
}

/* STARTING or RUNNING with its pod: follow it, and end it when idle too long. */
static void live(const struct kd_task_facts *f, struct kd_task_action *a)
{
    char msg[256];
    if (f->failed > 0 || (f->succeeded > 0 && f->succeeded + f->deleting >= f->npods &&
                          f->running == 0 && f->pending == 0)) {
        exited(f, a);
        return;
    }
    if (f->pod_stuck) {
        end(a, KD_TASK_END_ERROR, -1,
            f->failure != NULL ? f->failure : "the task's pod cannot run");
        a->delete_now = true;
        return;
    }
    a->what = KD_TASK_DO_RUN;
    if (f->running == 0) {
        a->state = KD_TASK_STARTING;
        snprintf(a->message, sizeof(a->message), "pod created; waiting for it to run");
        return;
    }
    if (f->service && !f->address) {
        a->state = KD_TASK_STARTING;
        snprintf(a->message, sizeof(a->message),
                 "pod running; waiting for the task's service to report its port");
        a->requeue_ms = 5000;
        return;
    }
    if (f->service && f->cur != KD_TASK_RUNNING && !f->listening) {
        a->state = KD_TASK_STARTING;
        snprintf(a->message, sizeof(a->message),
                 "pod running; waiting for the task's service to listen on its port");
        a->requeue_ms = 500;
        return;
    }
    a->state = KD_TASK_RUNNING;
    snprintf(a->message, sizeof(a->message), "running");
    if (f->cur != KD_TASK_RUNNING || f->idle_ms <= 0)
        return;
    int64_t idle_for = f->now_ms - f->last_activity_ms;
    long probe = f->probe_ms > 0 ? f->probe_ms : 10000;
    if (f->busy || idle_for < 0) {
        a->requeue_ms = probe;
        return;
    }
    if (idle_for >= f->idle_ms) {
        snprintf(msg, sizeof(msg), "idle for %llds (idle_timeout %llds): ending the task",
                 (long long)(idle_for / 1000), (long long)(f->idle_ms / 1000));
        stop(a, KD_TASK_END_IDLE, false, msg);
        return;
    }
    int64_t left = f->idle_ms - idle_for + 100;
    a->requeue_ms = left < probe ? (long)left : probe;
}

struct kd_task_action kd_task_next(const struct kd_task_facts *f)
{
    struct kd_task_action a = {.what = KD_TASK_DO_NOTHING, .state = f->cur, .exit_code = -1};
    if (f->cur == KD_TASK_TERMINATED) {
        if (f->npods > 0) {
            a.what = KD_TASK_DO_CLEANUP;
            a.delete_now = true;
        }
    } else if (f->killed) {
        if (f->npods > 0)
            stop(&a, KD_TASK_END_KILLED, true, "killed: deleting the task's pod");
        else
            end(&a, KD_TASK_END_KILLED, f->exit_code, "killed");
    } else if (f->cur == KD_TASK_TERMINATING) {
        enum kd_task_end why = f->ended != KD_TASK_END_NONE ? f->ended : KD_TASK_END_ERROR;
        if (f->npods > f->deleting || (f->npods > 0 && f->running + f->pending > 0))
            stop(&a, why, false, "stopping: deleting the task's pod");
        else if (f->npods > 0)
            a.requeue_ms = 1000; /* being deleted */
        else
            end(&a, why, f->exit_code,
                why == KD_TASK_END_IDLE ? "ended by its idle_timeout" : "stopped");
    } else if (f->cfg_rc != 0 && f->npods == 0) {
        end(&a, KD_TASK_END_ERROR, -1, f->cfg_err != NULL ? f->cfg_err : "invalid task config");
    } else if (f->cur == KD_TASK_QUEUED && f->npods == 0) {
        if (f->admitted) {
            a.what = KD_TASK_DO_START;
            a.state = KD_TASK_STARTING;
            a.confirm_no_pods = true;
        } else {
            a.what = KD_TASK_DO_WAIT;
            a.state = KD_TASK_QUEUED;
            snprintf(a.message, sizeof(a.message), "%s",
                     f->wait_reason != NULL ? f->wait_reason : "waiting for the scheduler");
            a.kick = true;
        }
    } else if (f->npods == 0) {
        /* STARTING or RUNNING without a pod: just created (the cache lags), or deleted by
         * someone else. Tasks are not restarted. */
        end(&a, KD_TASK_END_ERROR, -1, "the task's pod disappeared");
        a.confirm_no_pods = true;
    } else {
        live(f, &a); /* QUEUED with a pod: its STARTING write was lost */
    }
    return a;
}
