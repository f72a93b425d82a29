/*
 * What the scheduler loop (schedloop.c) hands the trial reconciler
 * (trial.c): admissions, preemptions and the reasons a trial waits. The
 * scheduler only writes here and never calls the API; the reconciler
 * takes from here and acts. One lock of its own guards it all, so that
 * neither side holds the controller's other state while it works.
 */
#ifndef KD_CTRL_HANDOFF_H
#define KD_CTRL_HANDOFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "scheduler.h"

/** An admission of one trial, kept until its pods show up in the cache. Copied by value. */
struct kd_handoff_admit {
    char key[512]; /* "ns/trial" */
    int nplace;    /* pods */
    /* NULL: not pinned; else a node name interned by the handoff: valid until kd_handoff_free. */
    const char *nodes[KD_SCHED_MAX_PODS];
    int gpus; /* slots per pod */
    bool cpu; /* the slots are CPU slots */
    int64_t at_ms;
    bool used; /* pods were created for it; kept only as a reservation */
};

struct kd_handoff;

/** A new, empty handoff; aborts when out of memory. Free with kd_handoff_free. */
struct kd_handoff *kd_handoff_new(void);

/** Free h and its interned node names (no admission copy may be used after). NULL-safe. */
void kd_handoff_free(struct kd_handoff *h);

/*
 * The scheduler's side. Every function below is thread-safe and blocks
 * only on the handoff's own lock; none calls out while holding it, so it
 * may be called from a cache walk's callback. Strings are copied.
 */

/** Admit trial `key` on `nplace` pods of `gpus` slots each (GPUs, or CPU slots when `cpu`),
 * pinned to nodes[i] (NULL entries or nodes NULL: not pinned); what was said about why it
 * waited is forgotten. */
void kd_handoff_admit(struct kd_handoff *h, const char *key, int nplace, const char *const *nodes,
                      int gpus, bool cpu, int64_t at_ms);

/** Ask the reconciler to stop trial `key` and queue it again; true when not already asked. */
bool kd_handoff_preempt(struct kd_handoff *h, const char *key, const char *reason);

/** Say why trial `key` waits (decision "wait" or "never"); true when the reason changed (the
 * reconciler should then be woken to write it). */
bool kd_handoff_say(struct kd_handoff *h, const char *key, const char *decision,
                    const char *reason);

/** The latest admission of trial `key`, used or not (copied into *out); false when none. */
bool kd_handoff_holds(struct kd_handoff *h, const char *key, struct kd_handoff_admit *out);

/** Whether a preemption of trial `key` waits for the reconciler. */
bool kd_handoff_preempting(struct kd_handoff *h, const char *key);

/**
 * Forget what was said about trials not in `seen` (an object keyed by trial key), and drop
 * admissions whose pods all exist (live: trial key -> array of live pods) or that are older
 * than ttl_ms at now_ms. Both objects are borrowed.
 */
void kd_handoff_prune(struct kd_handoff *h, const json_t *seen, const json_t *live, int64_t now_ms,
                      int64_t ttl_ms);

/*
 * The trial reconciler's side; thread-safe, the same way.
 */

/** Take an unused admission of trial `key` (copied into *out), which is then marked used: it
 * stays a reservation for the scheduler until the pods show up. False when there is none. */
bool kd_handoff_take_admission(struct kd_handoff *h, const char *key, struct kd_handoff_admit *out);

/** Whether an unused admission of trial `key` waits (kd_handoff_take_admission would take it). */
bool kd_handoff_admitted(struct kd_handoff *h, const char *key);

/** Forget a used admission: the trial's pods are in the cache and account for themselves. */
void kd_handoff_drop_admission(struct kd_handoff *h, const char *key);

/** Give an admission back unused (its pods could not be created). */
void kd_handoff_unuse_admission(struct kd_handoff *h, const char *key);

/** The reason of a pending preemption of trial `key` into reason (len bytes, cut); false when
 * none. It stays pending until kd_handoff_take_preemption. */
bool kd_handoff_preemption(struct kd_handoff *h, const char *key, char *reason, size_t len);

/** Consume the pending preemption of trial `key` (none: nothing happens). */
void kd_handoff_take_preemption(struct kd_handoff *h, const char *key);

/** Why the scheduler keeps trial `key` waiting, into reason (len bytes, cut), *never set when
 * it never fits; false when it said nothing. */
bool kd_handoff_reason(struct kd_handoff *h, const char *key, char *reason, size_t len,
                       bool *never);

#endif
