/*
 * Experiment and Trial state machines (see states.h and the diagram in
 * docs/resources.md).
 */
#include "states.h"

#include <stddef.h>
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
