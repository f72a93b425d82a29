/*
 * libdtrain's client of the kdet controller API (docs/api.md): metric
 * reports (batched, with idempotency keys, retried across controller
 * restarts), the searcher's next operation, the preemption signal,
 * checkpoint registration and early exits, for one trial.
 *
 * Rules as for the rest of libdtrain: every call returns 0 or a negative
 * DTRAIN_E* code, never aborts, installs no signal handlers and keeps no
 * global state beyond the handle. `err` (DTRAIN_ERRLEN bytes, may be NULL)
 * gets the cause: the field the controller refused, the HTTP status, the
 * connection error. The trial token never appears in it.
 *
 * Thread safety: a handle may be used from several threads at once (for
 * example a training thread reporting metrics while another long-polls
 * dtrain_should_preempt); each request uses its own connection. Metric
 * batches are sent in the order they were made.
 */
#ifndef DTRAIN_CLIENT_H
#define DTRAIN_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes shared with dtrain.h (the values of lib/core's KD_E*). */
#ifndef DTRAIN_EINVAL
#define DTRAIN_EINVAL (-1001)
#endif
#ifndef DTRAIN_ENOMEM
#define DTRAIN_ENOMEM (-1002)
#endif
#ifndef DTRAIN_ENOTFOUND
#define DTRAIN_ENOTFOUND (-1003)
#endif
#ifndef DTRAIN_ECONFLICT
#define DTRAIN_ECONFLICT (-1004)
#endif
#ifndef DTRAIN_EAGAIN
#define DTRAIN_EAGAIN (-1006)
#endif
#ifndef DTRAIN_ETIMEDOUT
#define DTRAIN_ETIMEDOUT (-1007)
#endif
#ifndef DTRAIN_EPARSE
#define DTRAIN_EPARSE (-1009)
#endif
#ifndef DTRAIN_ETOOBIG
#define DTRAIN_ETOOBIG (-1010)
#endif
#ifndef DTRAIN_EUNAUTHORIZED
#define DTRAIN_EUNAUTHORIZED (-1012)
#endif
#ifndef DTRAIN_EPROTO
#define DTRAIN_EPROTO (-1015)
#endif
#ifndef DTRAIN_ECONNECT
#define DTRAIN_ECONNECT (-1021)
#endif
#ifndef DTRAIN_ERRLEN
#define DTRAIN_ERRLEN 1024
#endif

struct dtrain_client;

struct dtrain_client_opts {
    const char *url;         /* controller API base URL (http:// or https://), required */
    const char *token;       /* the trial's token, required */
    const char *trial;       /* the Trial's name, or "namespace/name", required */
    const char *ns;          /* the Trial's namespace when `trial` has none ["default"] */
    const char *key_prefix;  /* idempotency-key prefix [RUN_ID-rRANK-RANDOM] */
    long retry_ms;           /* how long a report keeps retrying [600000 = 10 min] */
    long request_timeout_ms; /* one request, long-polls excluded [30000] */
    int batch_rows;          /* training/profiling rows sent together [100], 1..10000 */
    /* The CA that signed the controller's certificate, for https:// (copied): PEM text, or
     * else a PEM file; both NULL: the system's CAs. */
    const char *ca_pem;
    const char *ca_file;
};

/**
 * A client for one trial. Copies the options. 0, DTRAIN_EINVAL (err names
 * the option) or DTRAIN_ENOMEM. Does no I/O. Free with dtrain_client_free.
 */
int dtrain_client_new(const struct dtrain_client_opts *opts, struct dtrain_client **out, char *err);

/**
 * A client from the launcher's environment: KDET_CONTROLLER_URL,
 * KDET_TOKEN, KDET_TRIAL_ID, KDET_NAMESPACE (optional), the controller's
 * CA KDET_CONTROLLER_CA (PEM text) or KDET_CONTROLLER_CA_FILE (optional),
 * and for the key prefix KDET_RUN_ID and RANK. DTRAIN_ENOTFOUND when KDET_CONTROLLER_URL
 * is unset (the process runs outside kdet), DTRAIN_EINVAL naming the
 * variable for a bad value.
 */
int dtrain_client_from_env(struct dtrain_client **out, char *err);

/**
 * Free the handle. Rows still buffered and batches not yet acknowledged
 * are dropped: call dtrain_client_flush first. No I/O. NULL-safe.
 */
void dtrain_client_free(struct dtrain_client *c);

/**
 * Report one row of metrics: kind "training", "validation" or
 * "profiling"; `batches` the batches completed when measured;
 * `metrics_json` a JSON object of metric names to values (copied).
 * Training and profiling rows are buffered and sent batch_rows at a time;
 * a validation row is sent at once (after the buffered rows), because the
 * searcher waits for it. Each batch carries an idempotency key and is
 * retried (backoff from 100 ms to 5 s) on connection errors, 429 and 5xx
 * for up to retry_ms, so a controller restart loses and duplicates
 * nothing. Blocks while sending. Returns 0, DTRAIN_EINVAL (a bad argument,
 * or the controller refused the batch: err names the field),
 * DTRAIN_EUNAUTHORIZED, DTRAIN_ETIMEDOUT (retry_ms passed; the batch stays
 * queued and is sent again by the next call), DTRAIN_ENOMEM.
 */
int dtrain_report_metrics(struct dtrain_client *c, const char *kind, int64_t batches,
                          const char *metrics_json, char *err);

/** Send every buffered row and queued batch now. Errors as dtrain_report_metrics. */
int dtrain_client_flush(struct dtrain_client *c, char *err);

/* What dtrain_searcher_next puts in *stop. */
#define DTRAIN_SEARCHER_STOP 1    /* done: the searcher closed the trial, or it was canceled */
#define DTRAIN_SEARCHER_PREEMPT 2 /* paused or preempted: checkpoint, register it, exit */

/**
 * The searcher's next operation for a worker that has trained `completed`
 * batches (in the trial's length unit): *length gets the length to train
 * to before the next validation (with *stop 0), or *stop is set to
 * DTRAIN_SEARCHER_STOP when the trial should finish (exit 0), or to
 * DTRAIN_SEARCHER_PREEMPT when it should checkpoint and exit now (the
 * experiment or trial was paused, or the scheduler needs the slots).
 * Long-polls until there is an answer, retrying across controller
 * restarts, for up to timeout_ms (< 0: no limit): DTRAIN_ETIMEDOUT then.
 */
int dtrain_searcher_next(struct dtrain_client *c, int64_t completed, long timeout_ms,
                         int64_t *length, int *stop, char *err);

/**
 * Whether the trial should checkpoint and exit now (the experiment or the
 * trial was paused or canceled, or the scheduler preempted it). Waits up to
 * wait_ms for the signal to turn on (0: answers at once). *preempt gets 0
 * or 1.
 */
int dtrain_should_preempt(struct dtrain_client *c, long wait_ms, int *preempt, char *err);

/**
 * Register a checkpoint the worker has written: its uuid, the batches it
 * holds, where it is (URL or path), its size in bytes and optional
 * metadata (a JSON object or NULL). Idempotent; retried like metrics.
 * DTRAIN_ECONFLICT when the uuid belongs to another trial.
 */
int dtrain_checkpoint_register(struct dtrain_client *c, const char *uuid, int64_t batches,
                               const char *storage_path, int64_t size_bytes,
                               const char *metadata_json, char *err);

/**
 * Tell the controller the trial is ending early: reason "errored",
 * "invalid_hp" or "user_canceled", with an optional message (up to 4096
 * bytes). Retried like metrics.
 */
int dtrain_exit_early(struct dtrain_client *c, const char *reason, const char *message, char *err);

#ifdef __cplusplus
}
#endif

#endif
