/*
 * Checkpoints on top of a storage handle. A checkpoint is a directory tree
 * stored under `<prefix>/<uuid>/` plus a manifest, `<uuid>/kdet-manifest.json`
 * (every file's size and sha256, and metadata: trial, steps completed,
 * framework, format), written last. A checkpoint without a manifest is
 * incomplete: it is never listed as usable and never restored. Downloads
 * verify every size and hash.
 *
 * Thread safety: as the storage handle (one thread at a time per handle).
 */
#ifndef KD_STORAGE_CHECKPOINT_H
#define KD_STORAGE_CHECKPOINT_H

#include <stdint.h>

#include <jansson.h>

#include "storage/storage.h"

#define KD_CKPT_MANIFEST "kdet-manifest.json"
#define KD_CKPT_UUIDLEN 128
#define KD_CKPT_MAX_FILES 1000000
#define KD_CKPT_MANIFEST_MAX (256u * 1024 * 1024)

struct kd_ckpt_file {
    char *path; /* relative, '/'-separated */
    uint64_t size;
    char sha256[65];
    int64_t mtime_ns; /* local only, to notice files changed during an upload */
};

struct kd_ckpt_manifest {
    char uuid[KD_CKPT_UUIDLEN];
    char created[40];
    json_t *metadata; /* object: trial_id, steps_completed, framework, format, ... */
    uint64_t total_size;
    struct kd_ckpt_file *files;
    size_t nfiles;
};

/**
 * A checkpoint uuid that storage keys and paths may be built from: 1-127
 * bytes of [A-Za-z0-9._-], not starting with '.' (so never "..", never a
 * '/'). KD_EINVAL with `err` naming the uuid otherwise.
 */
int kd_ckpt_check_uuid(const char *uuid, char *err) KD_WUR;

/**
 * A new checkpoint's uuid as it enters kdet (the controller's API): a UUID
 * in canonical form, 36 characters 8-4-4-4-12 of lowercase hex digits and
 * '-', e.g. 6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11 (what Python's
 * str(uuid.uuid4()) gives). Every such uuid passes kd_ckpt_check_uuid.
 * KD_EINVAL with `err` ("uuid: ...") otherwise. Pure; thread-safe.
 */
int kd_ckpt_check_canonical_uuid(const char *uuid, char *err) KD_WUR;

/**
 * Walk dir and hash every regular file (symlinks followed; other file types
 * are an error naming the path) into a new manifest. `metadata` is copied
 * (may be NULL). Threads: up to `parallel` hash at once. Caller frees with
 * kd_ckpt_manifest_free.
 */
int kd_ckpt_manifest_build(const char *dir, const char *uuid, const json_t *metadata, int parallel,
                           struct kd_ckpt_manifest *m, char *err) KD_WUR;

/** The manifest as JSON text; caller frees. NULL on ENOMEM. */
char *kd_ckpt_manifest_dump(const struct kd_ckpt_manifest *m);

/** Parse and validate a manifest (paths, sizes, hashes); errors name the field. */
int kd_ckpt_manifest_parse(const char *text, size_t len, struct kd_ckpt_manifest *m,
                           char *err) KD_WUR;

void kd_ckpt_manifest_free(struct kd_ckpt_manifest *m);

/**
 * Check every file of m against the copy under dir: size and sha256.
 * KD_ECORRUPT names the first bad file ("model/weights.bin: sha256 ...").
 */
int kd_ckpt_manifest_check_dir(const struct kd_ckpt_manifest *m, const char *dir, int parallel,
                               char *err) KD_WUR;

/** Phases reported by the checkpoint calls' progress callback. */
struct kd_ckpt_progress {
    const char *phase; /* "hash", "upload", "download", "verify" */
    uint64_t done_bytes, total_bytes;
    size_t files;
};
typedef int (*kd_ckpt_progress_fn)(void *arg, const struct kd_ckpt_progress *p);

/**
 * Upload the tree at dir as checkpoint `uuid`, manifest last. `metadata`
 * (an object or NULL) goes into the manifest; not stolen. KD_EEXIST when a
 * complete checkpoint with this uuid exists. On failure the objects
 * already uploaded are deleted (best effort) and no manifest is written,
 * so nothing incomplete ever looks usable. A file changed during the
 * upload is KD_ECORRUPT. Blocking.
 */
int kd_ckpt_upload(struct kd_storage *st, const char *uuid, const char *dir, const json_t *metadata,
                   kd_ckpt_progress_fn progress, void *arg, char *err) KD_WUR;

/**
 * Read a checkpoint's manifest. KD_ENOTFOUND when it has none (missing or
 * incomplete). Caller frees m.
 */
int kd_ckpt_read_manifest(struct kd_storage *st, const char *uuid, struct kd_ckpt_manifest *m,
                          char *err) KD_WUR;

/**
 * Restore checkpoint `uuid` into dir (created), verifying every size and
 * sha256. KD_ENOTFOUND for a checkpoint without a manifest, KD_ECORRUPT
 * naming the file whose data does not match. Blocking.
 */
int kd_ckpt_download(struct kd_storage *st, const char *uuid, const char *dir,
                     kd_ckpt_progress_fn progress, void *arg, char *err) KD_WUR;

/**
 * Verify a stored checkpoint: every file present with its size; with
 * deep, also download and hash every file (into a temp dir, removed).
 */
int kd_ckpt_verify(struct kd_storage *st, const char *uuid, int deep, kd_ckpt_progress_fn progress,
                   void *arg, char *err) KD_WUR;

struct kd_ckpt_info {
    char uuid[KD_CKPT_UUIDLEN];
    int complete;     /* has a manifest */
    uint64_t bytes;   /* stored bytes (all objects, manifest included) */
    size_t objects;   /* stored objects */
    json_t *metadata; /* from the manifest when complete and read; owned */
    char created[40];
};

/**
 * Every checkpoint under the prefix, sorted by uuid; incomplete ones
 * (no manifest) have complete = 0. With read_manifests, complete ones get
 * their metadata. Caller frees with kd_ckpt_list_free.
 */
int kd_ckpt_list(struct kd_storage *st, int read_manifests, struct kd_ckpt_info **out, size_t *n,
                 char *err) KD_WUR;

void kd_ckpt_list_free(struct kd_ckpt_info *infos, size_t n);

/**
 * Delete a checkpoint: the manifest first (so it stops being usable at
 * once), then its files. Deleting an absent checkpoint is not an error.
 */
int kd_ckpt_delete(struct kd_storage *st, const char *uuid, char *err) KD_WUR;

#endif
