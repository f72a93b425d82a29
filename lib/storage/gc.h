/*
 * The checkpoint GC policy engine: given an experiment's checkpoints with
 * their validation metrics, decide which to keep under Determined's
 * save_experiment_best / save_trial_best / save_trial_latest (the union of
 * the three is kept), never deleting the checkpoint a running or paused
 * trial needs to resume, nor one the model registry protects. Pure
 * computation: no I/O, no global state; thread-safe.
 */
#ifndef KD_STORAGE_GC_H
#define KD_STORAGE_GC_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Why a checkpoint is kept (bits); 0 means delete. */
enum kd_gc_keep {
    KD_GC_EXPERIMENT_BEST = 1 << 0,
    KD_GC_TRIAL_BEST = 1 << 1,
    KD_GC_TRIAL_LATEST = 1 << 2,
    KD_GC_RESUME = 1 << 3,    /* latest checkpoint of a trial that is not finished */
    KD_GC_PROTECTED = 1 << 4, /* the protect hook said so (model registry) */
};

struct kd_gc_policy {
    int save_experiment_best; /* Determined's defaults: 0 */
    int save_trial_best;      /* 1 */
    int save_trial_latest;    /* 1 */
    int smaller_is_better;    /* the searcher metric's direction */
};

/** Determined's defaults: 0, 1, 1, smaller_is_better = 1. */
void kd_gc_policy_default(struct kd_gc_policy *p);

struct kd_gc_ckpt {
    const char *uuid;
    const char *trial_id;
    int64_t steps_completed; /* "latest" = most steps; ties: later in the array */
    int has_metric;          /* a validation of the searcher metric at these steps */
    double metric;           /* NaN counts as no metric */
    int trial_active;        /* the trial is running, paused or queued: may resume */
    int protected_;          /* kept regardless (e.g. registered model version) */
};

/**
 * The model-registry hook: return non-zero to protect checkpoint c. May be
 * NULL. Called once per checkpoint, from the calling thread.
 */
typedef int (*kd_gc_protect_fn)(void *arg, const struct kd_gc_ckpt *c);

/**
 * Decide: keep[i] gets the kd_gc_keep bits of ckpts[i] (0 = delete). n may
 * be 0. KD_EINVAL (naming the field) for negative policy numbers or a
 * checkpoint without uuid/trial_id; KD_ENOMEM. Does not modify ckpts.
 */
int kd_gc_plan(const struct kd_gc_policy *p, const struct kd_gc_ckpt *ckpts, size_t n,
               kd_gc_protect_fn protect, void *arg, unsigned *keep, char *err) KD_WUR;

/** "experiment_best,trial_latest" for a keep mask, or "delete"; buf of 96 bytes. */
const char *kd_gc_reason(unsigned keep, char *buf, size_t len);

#endif
