/*
 * Wiring the controller to its PostgreSQL store and HTTP API: the token
 * key (from a file, or the Secret kdet-controller-key, created when
 * absent), the user token, opening the store and starting the API, and
 * the per-trial token Secrets.
 */
#ifndef KD_CTRL_WIRE_H
#define KD_CTRL_WIRE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/err.h"

struct kd_ctrl;

#define KD_CTRL_KEY_SECRET "kdet-controller-key" /* the token key's Secret */
#define KD_CTRL_KEY_DATA "key"                   /* its data key */
#define KD_CTRL_KEY_MAX 4096                     /* longest token key accepted */
#define KD_CTRL_TOKEN_SUFFIX "-token"            /* a trial's token Secret: <trial>-token */
#define KD_CTRL_API_PORT 8080                    /* --api-listen's default port */

/**
 * Load the token key and the user token, open the store and start the API
 * when c->o.database_url is set; do nothing (0) otherwise. On failure the
 * cause is in err and whatever was started is stopped again by
 * kd_ctrl_wire_stop. Blocks (store connection, informer sync).
 */
int kd_ctrl_wire_start(struct kd_ctrl *c, char *err) KD_WUR;

/** Stop the API, then close the store. NULL-safe members; idempotent. */
void kd_ctrl_wire_stop(struct kd_ctrl *c);

/**
 * Ensure the trial's token Secret `<trial>-token` exists, owned by the
 * Trial, with key `token` = kd_api_trial_token(...). An existing Secret is
 * kept (its token depends only on the key and the Trial's uid). 0 or KD_E*
 * with the cause in err. Blocks on the API server. Thread-safe.
 */
int kd_ctrl_trial_secret(struct kd_ctrl *c, const json_t *trial, char *err) KD_WUR;

/**
 * Before a trial's pods are created (API on): its token Secret, the
 * experiment and trial rows in the store, and the checkpoint the attempt
 * starts from (status.latestCheckpoint.uuid; for a trial that has none
 * and a spec.parentRequestId, the parent trial's) into latest (len bytes;
 * "" when none). ids (optional) gets the store's integer ids of the
 * experiment and the trial (what `det` and the API show). 0 or KD_E* with
 * the cause in err. Blocks. Thread-safe.
 */
int kd_ctrl_wire_trial(struct kd_ctrl *c, const json_t *exp, const json_t *trial, const json_t *cfg,
                       char *latest, size_t len, int64_t ids[2], char *err) KD_WUR;

/**
 * The experiment and trial rows in the store (c->store NULL: nothing, 0): the experiment
 * ACTIVE, the trial ACTIVE with status.restarts. 0 or KD_E* with the cause in err. Blocks.
 * Thread-safe.
 */
int kd_ctrl_wire_rows(struct kd_ctrl *c, const json_t *exp, const json_t *trial, const json_t *cfg,
                      int64_t ids[2], char *err) KD_WUR; /* ids: as kd_ctrl_wire_trial's */

/**
 * The experiment is being deleted: its row in the store (when it has one and it has not ended
 * yet) becomes DELETED, so that it no longer shows as ACTIVE; an ended one keeps its outcome.
 * The row and its trials stay (`det experiment delete` removes them). c->store NULL: nothing, 0. 0
 * or KD_E* with the cause in err. Blocks. Thread-safe.
 */
int kd_ctrl_wire_deleted(struct kd_ctrl *c, const json_t *exp, char *err) KD_WUR;

/**
 * Record searcher decisions (an array of {"decision","request_id",
 * "length"?,"reason"?,"failure"?}) as events of the experiment in the store
 * (kind "searcher"). Best effort: failures are logged, not returned.
 * Blocks. Thread-safe.
 */
void kd_ctrl_wire_decisions(struct kd_ctrl *c, const json_t *exp, const json_t *cfg,
                            const json_t *decisions);

/**
 * Record a Trial's status change in its history (c->store NULL: nothing): the entry
 * kd_event_history decides, as an event of kind "trial" of its experiment in the store, with
 * the trial's id once it has a row (before its first attempt it has none, and the event names
 * it by details.trial and details.request_id, as the searcher's decisions do). Best effort:
 * failures are logged. Blocks (the store). Thread-safe.
 */
void kd_ctrl_wire_trial_history(struct kd_ctrl *c, const json_t *trial, const json_t *old_status,
                                const json_t *new_status);

/**
 * A task's Secrets, owned by the Task: `<task>-token` (key `token`, the
 * task token of kd_api_task_token, and `ca.crt`), and for a shell
 * `<task>-ssh` (a new client key pair and host key pair: `id`, `id.pub`,
 * `ssh_host_key`, `ssh_host_key.pub`, `authorized_keys`, `known_hosts`).
 * Existing ones are kept. 0 or KD_E* with the cause in err (never a key).
 * Blocks. Thread-safe.
 */
int kd_ctrl_task_secrets(struct kd_ctrl *c, const json_t *task, bool shell, char *err) KD_WUR;

/**
 * Before a task's pod is created (API on): its Secrets and its row in the
 * store (state STARTING); *id its store id (0 without a store). 0 or KD_E*
 * with the cause in err. Blocks. Thread-safe.
 */
int kd_ctrl_wire_task(struct kd_ctrl *c, const json_t *task, const json_t *cfg, int64_t *id,
                      char *err) KD_WUR;

/** Record a task's state (and its end) in the store; best effort, logged. Blocks. */
void kd_ctrl_wire_task_state(struct kd_ctrl *c, const json_t *task, const char *state,
                             int exit_code, const char *end_reason);

/** The task's token (kd_api_task_token with the controller's key) into out. 0 or KD_EINVAL
 * (no key: the API is off). */
int kd_ctrl_task_token(struct kd_ctrl *c, const json_t *task, char *out, size_t len) KD_WUR;

#endif
