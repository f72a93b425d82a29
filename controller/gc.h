/*
 * What the controller records when trials and experiments end: their
 * states in the store, and checkpoint GC under the experiment's
 * checkpoint_storage policy (save_experiment_best, save_trial_best,
 * save_trial_latest) over the checkpoint registry, deleting the rest from
 * storage. Protocol and guarantees: docs/checkpoints.md.
 */
#ifndef KD_CTRL_GC_H
#define KD_CTRL_GC_H

#include <stdbool.h>

#include <jansson.h>

#include "core/err.h"
#include "gcview.h"

struct kd_storage;

struct kd_ctrl;

/**
 * With the store on, bring the store up to the experiment's state: trial
 * and experiment states, then checkpoint GC over the checkpoints of trials
 * that ended (a trial that is queued, running or paused keeps every
 * checkpoint; at the experiment's end the policy applies to all). Files are
 * deleted before the registry marks them DELETED (with an event, in one
 * transaction), and the plan only ever grows its deletions, so a run cut
 * short by a crash is finished by the next one. Runs only when the trials'
 * or the experiment's states changed since the last complete run (memo in
 * c->gcmemo); a fresh controller runs it once per experiment. `trials` are
 * the n Trials of the experiment (sorted by uid here, in place), `cfg` its
 * effective configuration, `state` the experiment's state name. 0 (also
 * when off or nothing was due) or the first error, with the cause in err;
 * the caller retries later. Blocks (store, storage). Thread-safe.
 */
int kd_ctrl_gc_experiment(struct kd_ctrl *c, const json_t *exp, const json_t *cfg,
                          struct kd_gc_trial *trials, size_t n, const char *state,
                          char *err) KD_WUR;

/**
 * The API's hook after a model version or model was deleted (struct
 * kd_api_opts.unprotected; ud is the struct kd_ctrl): forget that
 * experiment ns/name (uid) was collected and queue it, so that its GC runs
 * again and may now delete the checkpoint no version protects. Thread-safe;
 * does not block.
 */
void kd_ctrl_gc_unprotected(void *ud, const char *ns, const char *name, const char *uid);

/**
 * The API's storage_open (struct kd_api_opts; ud is the struct kd_ctrl): open checkpoint
 * storage cs of an experiment of namespace ns as GC opens it, with the keys of its
 * credentials_secret (a Secret in ns, written to a private directory only for the open).
 * Blocks (the Secret's GET). Thread-safe.
 */
int kd_ctrl_storage_open(void *ud, const char *ns, const json_t *cs, struct kd_storage **out,
                         char *err);

/** Forget the memo of GC runs (frees c->gcmemo). */
void kd_ctrl_gc_forget(struct kd_ctrl *c);

#endif
