/*
 * The experiment's context in a trial pod: the packed archive the
 * controller mounts (KDET_CONTEXT_ARCHIVE, or a file:// or s3:// KDET_CONTEXT_URL)
 * is read under a cap, checked against KDET_CONTEXT_SHA256 and unpacked
 * into a fresh directory that becomes the workers' working directory; a
 * KDET_CONTEXT_DIR without an archive is entered as it is.
 */
#ifndef KD_LAUNCH_CONTEXT_H
#define KD_LAUNCH_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"

struct kd_launch_context {
    char *dir;      /* the working directory entered; NULL: no context given */
    bool remove;    /* dir was made here and goes at exit (KDET_KEEP_CONTEXT=1 keeps it) */
    bool unpacked;  /* dir came from an archive */
    uint64_t bytes; /* size of the archive */
    int64_t ms;     /* time to read, verify and unpack */
};

/**
 * Set up the context from the environment (docs/launcher.md): with an
 * archive, read at most `max_bytes` of it (0: KD_CONTEXT_MAX_BYTES; a
 * larger file is KD_ETOOBIG), verify its sha256 when KDET_CONTEXT_SHA256
 * is set (KD_ECORRUPT naming the first 12 hex digits of both digests),
 * unpack it into KDET_CONTEXT_DIR when set, else into a new
 * $TMPDIR/kdet-context-XXXXXX (removed again on error), chdir there and
 * export KDET_CONTEXT_DIR. Without an archive, chdir to KDET_CONTEXT_DIR
 * when set. An s3://BUCKET/KEY KDET_CONTEXT_URL is fetched into memory
 * (endpoint and region from KDET_CHECKPOINT_STORAGE when it is s3,
 * credentials from AWS_* env as lib/storage loads them; a missing object
 * is KD_ENOTFOUND, a larger one KD_ETOOBIG, both before any download).
 * Other schemes than file:// and s3:// are KD_ENOTSUP naming the scheme. Without any of these, does
 * nothing and returns 0 with ctx->dir NULL. Logs one line per step. Returns 0 or a negative KD_E* /
 * -errno with the variable at fault in `err`. Blocks on file I/O; changes the process's working
 * directory and environment, so not thread-safe. Release with kd_launch_context_done.
 */
int kd_launch_context_prepare(struct kd_launch_context *ctx, uint64_t max_bytes, char *err) KD_WUR;

/** Remove an unpacked directory this process made (unless KDET_KEEP_CONTEXT=1) and free ctx. */
void kd_launch_context_done(struct kd_launch_context *ctx);

#endif
