/*
 * Checkpoint storage: one handle over a backend (shared_fs or s3) that
 * stores objects under keys relative to the configured prefix. The
 * checkpoint layer (checkpoint.h) builds on these calls.
 *
 * Library code: lives inside users' processes (libdtrain), so it never
 * aborts on out-of-memory (KD_ENOMEM), keeps no global state beyond its
 * handles, and installs no signal handlers. The one process-wide step is
 * curl_global_init(CURL_GLOBAL_DEFAULT), done once (pthread_once) by the
 * first kd_storage_open of an s3 backend.
 */
#ifndef KD_STORAGE_STORAGE_H
#define KD_STORAGE_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"

enum kd_storage_type {
    KD_STORAGE_NONE = 0,
    KD_STORAGE_SHARED_FS = 1,
    KD_STORAGE_S3 = 2,
};

#define KD_STORAGE_PATHLEN 1024
#define KD_STORAGE_KEYLEN 1024
#define KD_STORAGE_SECRETLEN 2048

/* Defaults of the tunables (0 in the config means "default"). */
#define KD_STORAGE_DEFAULT_PARALLEL 16
#define KD_STORAGE_DEFAULT_RETRIES 6
#define KD_STORAGE_DEFAULT_TIMEOUT_MS 120000

/**
 * Where checkpoints live. Plain data: copy freely. Credentials are filled
 * by kd_storage_open from the environment or files (see
 * kd_storage_load_credentials), never from an experiment config.
 */
struct kd_storage_config {
    int type; /* enum kd_storage_type */
    /* shared_fs: checkpoints go to host_path/storage_path (storage_path optional). */
    char host_path[KD_STORAGE_PATHLEN];
    char storage_path[KD_STORAGE_PATHLEN];
    /* s3 */
    char bucket[256];
    char prefix[KD_STORAGE_KEYLEN];           /* no leading or trailing '/' */
    char endpoint_url[KD_STORAGE_PATHLEN];    /* "" = https://s3.<region>.amazonaws.com */
    char region[64];                          /* "" = us-east-1 */
    int path_style;                           /* 1 path-style, 0 virtual-hosted, -1 auto */
    char credentials_dir[KD_STORAGE_PATHLEN]; /* a mounted Secret: files AWS_ACCESS_KEY_ID... */
    char credentials_secret[256]; /* name of the Kubernetes Secret (for the controller) */
    int parallel;                 /* concurrent transfers; 0 = default */
    uint64_t part_size;           /* multipart part size; 0 = adaptive */
    int max_retries;              /* per request; 0 = default, -1 = none */
    int retry_base_ms;            /* first backoff; 0 = 200 ms */
    int timeout_ms;               /* per request without progress; 0 = default */
    /* GC policy (Determined's checkpoint_storage fields; -1 = unset). */
    int save_experiment_best;
    int save_trial_best;
    int save_trial_latest;
};

/** Set every field to its unset/default value (type NONE). */
void kd_storage_config_init(struct kd_storage_config *cfg);

/**
 * Fill cfg from an experiment config's `checkpoint_storage` object
 * (Determined's schema: {"type": "shared_fs", "host_path", "storage_path"}
 * or {"type": "s3", "bucket", "prefix", "endpoint_url", "region",
 * "path_style", "credentials_secret", "credentials_dir"}, plus
 * save_experiment_best, save_trial_best, save_trial_latest). Inline
 * access_key/secret_key are refused: credentials belong in a Secret.
 * Errors name the field (`checkpoint_storage.bucket: ...`). Not owned: js.
 */
int kd_storage_config_from_json(const json_t *js, struct kd_storage_config *cfg, char *err) KD_WUR;

/**
 * Fill cfg from a storage URL: `s3://bucket/prefix` or `file:///path` (or a
 * plain absolute path, shared_fs). Options stay as they were in cfg.
 */
int kd_storage_config_from_url(const char *url, struct kd_storage_config *cfg, char *err) KD_WUR;

/** The config as a `checkpoint_storage` JSON object; new reference, NULL on ENOMEM. */
json_t *kd_storage_config_to_json(const struct kd_storage_config *cfg);

/** S3 credentials; secrets, so never logged (registered with kd_log_add_secret). */
struct kd_storage_creds {
    char access_key_id[256];
    char secret_access_key[KD_STORAGE_SECRETLEN];
    char session_token[KD_STORAGE_SECRETLEN];
    char source[KD_STORAGE_PATHLEN]; /* where they came from, for messages */
};

/**
 * Credentials, first found wins: env AWS_ACCESS_KEY_ID +
 * AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); the files of cfg's
 * credentials_dir (or $KDET_S3_CREDENTIALS_DIR), each named like the
 * variable, or one file `credentials` in the AWS format; the AWS shared
 * credentials file ($AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials,
 * profile $AWS_PROFILE or "default"). KD_ENOTFOUND when none. Secrets are
 * registered with kd_log_add_secret. Thread-safe.
 */
int kd_storage_load_credentials(const struct kd_storage_config *cfg, struct kd_storage_creds *creds,
                                char *err) KD_WUR;

struct kd_storage;

/**
 * Open a storage handle. For s3 this loads credentials and initialises
 * libcurl; for shared_fs it checks that the directory exists or can be
 * created. Caller closes with kd_storage_close. Blocking (no network I/O).
 * A handle may be used by one thread at a time.
 */
int kd_storage_open(const struct kd_storage_config *cfg, struct kd_storage **out, char *err) KD_WUR;

/** Close and free; NULL-safe. */
void kd_storage_close(struct kd_storage *st);

/** "shared_fs" or "s3". */
const char *kd_storage_type_name(const struct kd_storage *st);

/** A human-readable location ("s3://bucket/prefix", "/mnt/ckpt/path"). */
const char *kd_storage_location(const struct kd_storage *st);

/** The config the handle was opened with (credentials not included). */
const struct kd_storage_config *kd_storage_get_config(const struct kd_storage *st);

/* ---- objects: keys are relative to the prefix, '/'-separated ---------- */

/** One object to upload from a local file (whole file). */
struct kd_storage_put {
    const char *key;
    const char *path;
    uint64_t size;    /* the file's size, as stat'ed by the caller */
    char *sha256_out; /* 65 bytes, or NULL: filled by a backend that hashes what it sends */
    int hashed;       /* out: sha256_out holds the hex sha256 of the bytes stored */
    int result;       /* out: 0 or a negative code */
};

/** One object to download into a local file (created or truncated). */
struct kd_storage_get {
    const char *key;
    const char *path;
    uint64_t size;      /* expected size (from the manifest); UINT64_MAX = unknown */
    const char *sha256; /* expected hex sha256, or NULL; a backend may check it on the fly */
    int verified;       /* out: the backend checked sha256 (mismatch is KD_ECORRUPT) */
    int result;         /* out */
};

/** Bytes moved so far; called from the calling thread. Return non-zero to cancel. */
typedef int (*kd_storage_progress_fn)(void *arg, uint64_t done_bytes, uint64_t total_bytes);

/**
 * Upload n files, up to cfg.parallel at a time (large files in parallel
 * parts). Each object is written atomically: it either appears whole or
 * not at all. Returns 0 when all succeeded, else the first error (detail
 * in err) with each put's result set. Blocking.
 */
int kd_storage_put_files(struct kd_storage *st, struct kd_storage_put *puts, size_t n,
                         kd_storage_progress_fn progress, void *arg, char *err) KD_WUR;

/** Upload a buffer as one object, atomically. Blocking. */
int kd_storage_put_mem(struct kd_storage *st, const char *key, const void *data, size_t len,
                       char *err) KD_WUR;

/**
 * Download n objects into files (parent directories created), in parallel
 * (large objects by parallel ranged reads). A size that differs from the
 * expected one is KD_ECORRUPT. Blocking.
 */
int kd_storage_get_files(struct kd_storage *st, struct kd_storage_get *gets, size_t n,
                         kd_storage_progress_fn progress, void *arg, char *err) KD_WUR;

/** Download one object into out (at most out->max bytes: KD_ETOOBIG). KD_ENOTFOUND. */
int kd_storage_get_mem(struct kd_storage *st, const char *key, struct kd_buf *out,
                       char *err) KD_WUR;

/**
 * Read len bytes of object key from byte off into out, which is reset
 * first (out->max must allow len): one ranged GET on s3 (retried as the
 * others), a pread on shared_fs. KD_ENOTFOUND when the object is absent,
 * KD_ECORRUPT when it holds fewer than off + len bytes. len 0 reads
 * nothing. Blocking.
 */
int kd_storage_get_range(struct kd_storage *st, const char *key, uint64_t off, size_t len,
                         struct kd_buf *out, char *err) KD_WUR;

/** One listed object. */
struct kd_storage_obj {
    char *key; /* relative to the prefix; owned by the list */
    uint64_t size;
};

struct kd_storage_list {
    struct kd_storage_obj *objs;
    size_t n, cap;
};

/**
 * All objects whose key starts with `prefix` (relative; "" = everything),
 * following pagination; appended to out (which starts zeroed). At most
 * 10,000,000 objects (KD_ETOOBIG). Caller frees with kd_storage_list_free.
 */
int kd_storage_list(struct kd_storage *st, const char *prefix, struct kd_storage_list *out,
                    char *err) KD_WUR;

void kd_storage_list_free(struct kd_storage_list *l);

/**
 * Delete objects (batched: S3 DeleteObjects, 1000 keys a request). Missing
 * keys are not an error. Empty directories left behind on shared_fs are
 * removed. Blocking.
 */
int kd_storage_delete(struct kd_storage *st, const char *const *keys, size_t n, char *err) KD_WUR;

#endif
