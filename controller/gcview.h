/*
 * What checkpoint GC knows of an experiment's Trials, and the lookups it
 * makes over them: pure functions, no I/O (gc.c does the store and the
 * storage). A checkpoint is protected while a live PBT child will start
 * from it: the child names the checkpoint's trial as its parent and has
 * no checkpoint of its own yet, and the checkpoint is that trial's latest.
 */
#ifndef KD_CTRL_GCVIEW_H
#define KD_CTRL_GCVIEW_H

#include <stdbool.h>
#include <stddef.h>

/** What checkpoint GC reads of one Trial (strings NULL when absent). */
struct kd_gc_trial {
    const char *uid;
    const char *request_id;        /* spec.requestId */
    const char *parent_request_id; /* spec.parentRequestId (PBT) */
    const char *checkpoint;        /* status.latestCheckpoint.uuid */
    const char *state;             /* status.state; NULL: not set yet (queued) */
};

/** Whether the trial is in a terminal state (NULL: no). */
bool kd_gc_trial_ended(const struct kd_gc_trial *t);

/** Sort n trials by uid, for kd_gc_trial_find. */
void kd_gc_trials_sort(struct kd_gc_trial *t, size_t n);

/** The trial with this uid among n trials sorted by uid, or NULL (also for uid NULL). */
const struct kd_gc_trial *kd_gc_trial_find(const struct kd_gc_trial *t, size_t n, const char *uid);

/**
 * The request ids that live children name as their parent while they have
 * no checkpoint of their own (they will start from the parent's latest),
 * sorted; *np of them. Free the array (not the strings: they are the
 * trials').
 */
const char **kd_gc_parent_starts(const struct kd_gc_trial *t, size_t n, size_t *np);

/** Whether checkpoint uuid of trial ck is one a live child will start from. */
bool kd_gc_parent_start(const char *const *parents, size_t np, const struct kd_gc_trial *ck,
                        const char *uuid);

#endif
