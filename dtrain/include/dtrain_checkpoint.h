/*
 * libdtrain checkpoints: a background uploader that takes a directory the
 * training loop has just written and uploads it to checkpoint storage
 * (S3 or a shared file system) while training goes on. A checkpoint only
 * becomes usable when its manifest (sizes and sha256 of every file) has
 * been written, last; a failed upload is reported by the next
 * dtrain_checkpoint_wait, never swallowed.
 *
 * Self-contained: standard C types only, error codes are the DTRAIN_E*
 * values of dtrain.h (negative; the same numbers as kdet's KD_E*), `err`
 * buffers are DTRAIN_ERRLEN (1024) bytes and may be NULL. No signal
 * handlers, no abort on out-of-memory, no global state beyond the handle
 * (libcurl's global init runs once, the first time an s3 store is opened).
 */
#ifndef DTRAIN_CHECKPOINT_H
#define DTRAIN_CHECKPOINT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The background uploader. */
struct dtrain_ckpt;

/** Length of a checkpoint uuid buffer (36 characters + NUL). */
#define DTRAIN_CKPT_UUIDLEN 37

/** flags of dtrain_checkpoint_save_async */
#define DTRAIN_CKPT_REMOVE_DIR 1 /* delete the local directory once uploaded */

/**
 * Open checkpoint storage and start the uploader thread. `storage` is the
 * experiment config's checkpoint_storage object as JSON text
 * ({"type":"s3","bucket":...} or {"type":"shared_fs","host_path":...}) or
 * a URL (s3://bucket/prefix, file:///path). S3 credentials come from
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), a
 * mounted Secret directory, or ~/.aws/credentials. Caller closes with
 * dtrain_checkpoint_close.
 */
int dtrain_checkpoint_open(const char *storage, struct dtrain_ckpt **out, char *err);

/**
 * Queue `dir` for upload as checkpoint `uuid` (NULL: a random UUID is
 * made) and return at once; the uuid is copied to uuid_out
 * (DTRAIN_CKPT_UUIDLEN bytes) when given. `metadata_json` is a JSON object
 * stored in the manifest (e.g. {"trial_id":"3","steps_completed":400,
 * "framework":"torch","format":"pickle"}); may be NULL. The caller must not
 * modify dir until the upload has finished (dtrain_checkpoint_wait).
 * Errors here are about the arguments only; upload failures come from
 * dtrain_checkpoint_wait. Thread-safe.
 */
int dtrain_checkpoint_save_async(struct dtrain_ckpt *c, const char *dir, const char *uuid,
                                 const char *metadata_json, int flags, char *uuid_out, char *err);

/**
 * Block until every queued upload has finished. Returns 0, or the first
 * upload failure since the previous wait (err names the checkpoint and the
 * cause, and how many others failed). Thread-safe.
 */
int dtrain_checkpoint_wait(struct dtrain_ckpt *c, char *err);

/** Uploads queued or running now. Thread-safe, non-blocking. */
int dtrain_checkpoint_pending(struct dtrain_ckpt *c);

/**
 * Called from the uploader thread after each upload: rc 0 or the error,
 * err its message (valid during the call). Set before saving; NULL clears.
 */
typedef void (*dtrain_checkpoint_done_fn)(void *arg, const char *uuid, int rc, const char *err);
void dtrain_checkpoint_set_callback(struct dtrain_ckpt *c, dtrain_checkpoint_done_fn fn, void *arg);

/**
 * Download checkpoint `uuid` into dir (created) and verify every size and
 * sha256. DTRAIN_ENOTFOUND for a checkpoint that is missing or incomplete
 * (no manifest). Blocking; runs on the caller's thread, alongside uploads.
 */
int dtrain_checkpoint_restore(struct dtrain_ckpt *c, const char *uuid, const char *dir, char *err);

/**
 * Wait for the queued uploads, stop the thread and free the handle.
 * Returns what dtrain_checkpoint_wait would. NULL-safe.
 */
int dtrain_checkpoint_close(struct dtrain_ckpt *c, char *err);

#ifdef __cplusplus
}
#endif

#endif
