/*
 * libdtrain: the data plane of a kdet trial, linked into the user's training
 * process. It finds the other workers of the trial (rendezvous at the chief),
 * then runs collectives over a ring of TCP connections, over shared memory
 * between ranks of one host, or over NCCL for device buffers.
 *
 * Rules for every call: it returns 0 or a negative DTRAIN_E* code; it never
 * aborts and never installs signal handlers; after an error the handle's
 * dtrain_errmsg() names the cause (the rank that failed, the field that is
 * wrong). One application thread at a time may use a handle; libdtrain runs
 * its own progress and monitor threads internally.
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_WUR __attribute__((warn_unused_result))

/* Error codes; the values equal lib/core's KD_E* codes of the same name. */
#define DTRAIN_EINVAL (-1001)
#define DTRAIN_ENOMEM (-1002)
#define DTRAIN_ENOTFOUND (-1003)
#define DTRAIN_ECONFLICT (-1004)
#define DTRAIN_EAGAIN (-1006)
#define DTRAIN_ETIMEDOUT (-1007)
#define DTRAIN_EIO (-1008)
#define DTRAIN_EPARSE (-1009)
#define DTRAIN_ETOOBIG (-1010)
#define DTRAIN_EUNAUTHORIZED (-1012)
#define DTRAIN_EPROTO (-1015)
#define DTRAIN_ENOTSUP (-1016)
#define DTRAIN_EPEER (-1018)
#define DTRAIN_ESTATE (-1019)
#define DTRAIN_ECONNECT (-1021)
#define DTRAIN_EINTERNAL (-1022)

/** Size of the error buffer passed to dtrain_init*. */
#define DTRAIN_ERRLEN 1024

enum dtrain_dtype {
    DTRAIN_FLOAT32 = 0,
    DTRAIN_FLOAT16 = 1,  /* IEEE half; reduced in float32 */
    DTRAIN_BFLOAT16 = 2, /* reduced in float32 */
    DTRAIN_FLOAT64 = 3,
    DTRAIN_INT32 = 4,
    DTRAIN_INT64 = 5,
    DTRAIN_DTYPE_COUNT
};

enum dtrain_op {
    DTRAIN_SUM = 0,
    DTRAIN_AVG = 1, /* sum / world size (integer division for ints) */
    DTRAIN_MIN = 2,
    DTRAIN_MAX = 3,
    DTRAIN_OP_COUNT
};

enum dtrain_transport {
    DTRAIN_TRANSPORT_AUTO = 0, /* shm when every rank is on one host, else tcp */
    DTRAIN_TRANSPORT_TCP = 1,
    DTRAIN_TRANSPORT_SHM = 2,
    DTRAIN_TRANSPORT_NCCL = 3, /* buffers are CUDA device pointers */
};

/**
 * Everything dtrain_init_opts needs. dtrain_init reads the same fields from
 * the environment set by kdet-launch (names in brackets). Strings are
 * copied; the caller keeps ownership.
 */
struct dtrain_opts {
    int rank;                        /* [RANK] 0..world_size-1 */
    int world_size;                  /* [WORLD_SIZE] >= 1 */
    int local_rank;                  /* [LOCAL_RANK], -1: unknown */
    int local_world_size;            /* [LOCAL_WORLD_SIZE], -1: unknown */
    int group_rank;                  /* [GROUP_RANK] node index, -1: unknown */
    const char *master_addr;         /* [MASTER_ADDR] host or IP of rank 0 */
    int master_port;                 /* [MASTER_PORT] rank 0 listens here */
    const char *run_id;              /* [KDET_RUN_ID] attempt id; NULL: "" */
    const char *hparams_json;        /* [KDET_HPARAMS] JSON object; NULL: {} */
    int64_t trial_seed;              /* [KDET_TRIAL_SEED] */
    const char *trial_id;            /* [KDET_TRIAL_ID] */
    const char *controller_url;      /* [KDET_CONTROLLER_URL] */
    const char *token;               /* [KDET_TOKEN] secret: never logged */
    enum dtrain_transport transport; /* [DTRAIN_TRANSPORT] auto|tcp|shm|nccl */
    int rendezvous_timeout_ms;       /* [DTRAIN_RENDEZVOUS_TIMEOUT] seconds in env; 0: 300 s */
    int op_timeout_ms;               /* [DTRAIN_TIMEOUT] seconds in env; 0: 600 s */
    size_t fusion_threshold;         /* [DTRAIN_FUSION_THRESHOLD] bucket bytes; 0: 64 MiB */
    int fp16_compression;            /* [DTRAIN_FP16_COMPRESSION] 1: float32 grads sent as fp16 */
    int cuda_device;                 /* [DTRAIN_CUDA_DEVICE] NCCL only; -1: local_rank */
};

struct dtrain;

/** Fill `o` with defaults (world size 1, rank 0, auto transport, timeouts 0). */
void dtrain_opts_default(struct dtrain_opts *o);

/**
 * Read the env contract of kdet-launch into `o` (the strings point into
 * the environment). `err` (DTRAIN_ERRLEN bytes, may be NULL) names the
 * variable that is missing or malformed. Not thread-safe against setenv.
 */
int dtrain_opts_from_env(struct dtrain_opts *o, char *err) DTRAIN_WUR;

/**
 * Join the trial: rendezvous with every other rank, connect the transport.
 * Blocks until all world_size ranks have joined or the rendezvous timeout
 * passes. Rank 0 rejects workers with another run id or world size, and a
 * second worker claiming a rank already taken. On success *out is a handle
 * the caller frees with dtrain_finalize. With world_size 1 no network is
 * used.
 */
int dtrain_init_opts(const struct dtrain_opts *o, struct dtrain **out, char *err) DTRAIN_WUR;

/** dtrain_opts_from_env then dtrain_init_opts. */
int dtrain_init(struct dtrain **out, char *err) DTRAIN_WUR;

/**
 * Leave the trial: waits for outstanding async operations, says goodbye to
 * the chief (the chief waits for every rank so that no data in flight is
 * lost), closes everything and frees the handle. NULL-safe. Returns the
 * first error of the shutdown (the handle is freed in every case).
 */
int dtrain_finalize(struct dtrain *h);

/* Accessors; constant after init, safe from any thread. */
int dtrain_rank(const struct dtrain *h);
int dtrain_world_size(const struct dtrain *h);
int dtrain_local_rank(const struct dtrain *h);
int dtrain_local_world_size(const struct dtrain *h);
int64_t dtrain_trial_seed(const struct dtrain *h);
/** Name of the transport in use: "local", "tcp", "shm" or "nccl". */
const char *dtrain_transport_name(const struct dtrain *h);
/** The last error's message for this handle ("" when none); valid until the next call. */
const char *dtrain_errmsg(const struct dtrain *h);
/** Message of a DTRAIN_E* code; static, never NULL. */
const char *dtrain_strerror(int code);
/** Bytes per element of a dtype, 0 for an unknown one. */
size_t dtrain_dtype_size(enum dtrain_dtype t);
/** Parse "float32", "fp16", "bf16", "int64", ... and "sum", "avg", ... */
int dtrain_dtype_parse(const char *s, enum dtrain_dtype *out) DTRAIN_WUR;
int dtrain_op_parse(const char *s, enum dtrain_op *out) DTRAIN_WUR;
int dtrain_transport_parse(const char *s, enum dtrain_transport *out) DTRAIN_WUR;

/**
 * Hyperparameters from KDET_HPARAMS. `name` may be a dotted path into
 * nested objects ("optimizer.lr"). Returns 0, DTRAIN_ENOTFOUND when the
 * name is absent (out untouched, so preset the default), DTRAIN_EINVAL when
 * the value has another type (the message names it). Integers convert to
 * double; a double with a fraction is not an int. The string stays valid
 * until dtrain_finalize.
 */
int dtrain_hparam_double(struct dtrain *h, const char *name, double *out) DTRAIN_WUR;
int dtrain_hparam_int(struct dtrain *h, const char *name, int64_t *out) DTRAIN_WUR;
int dtrain_hparam_string(struct dtrain *h, const char *name, const char **out) DTRAIN_WUR;
/** The hyperparameters as compact JSON (owned by h). */
const char *dtrain_hparams_json(const struct dtrain *h);

/*
 * Collectives. Every rank must call the same collectives in the same order
 * with the same count, dtype and op. They block until done, a peer fails
 * (DTRAIN_EPEER; the message names the rank) or the op timeout passes
 * (DTRAIN_ETIMEDOUT). After DTRAIN_EPEER or DTRAIN_ETIMEDOUT the handle
 * refuses further collectives with DTRAIN_ESTATE: the job must restart.
 * Buffers are host memory, or device memory with the nccl transport.
 */

/** In place: buf[i] = op over ranks of buf[i]. count 0 is valid. */
int dtrain_allreduce(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                     enum dtrain_op op) DTRAIN_WUR;
/** Copy root's count elements of buf into every rank's buf. */
int dtrain_broadcast(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                     int root) DTRAIN_WUR;
/** out (world_size * count elements) gets rank r's `in` at out + r*count. */
int dtrain_allgather(struct dtrain *h, const void *in, void *out, size_t count,
                     enum dtrain_dtype dtype) DTRAIN_WUR;
/** Return once every rank has entered the barrier. */
int dtrain_barrier(struct dtrain *h) DTRAIN_WUR;

/*
 * Asynchronous operations run in order on libdtrain's progress thread, so
 * that communication overlaps the caller's computation. The buffer must
 * stay valid and untouched until dtrain_wait returns.
 */
struct dtrain_req;

/** Queue an allreduce; *req is waited for (and freed) with dtrain_wait. */
int dtrain_allreduce_async(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                           enum dtrain_op op, struct dtrain_req **req) DTRAIN_WUR;
/** Block until req is done, free it, and return its result. */
int dtrain_wait(struct dtrain *h, struct dtrain_req *req);

/*
 * Gradient buckets. Register each float32 gradient buffer once, in the
 * order backpropagation produces them (last layer first). Consecutive
 * gradients are fused into buckets of at most fusion_threshold bytes
 * (optimizations.tensor_fusion_threshold); when every gradient of a bucket
 * is marked ready, the bucket's averaging allreduce starts in the
 * background. dtrain_grads_wait waits for all buckets and leaves every
 * registered buffer averaged over the ranks. With fp16_compression the
 * gradients travel as float16 (about 3 significant digits).
 */

/** Register count floats at buf; *id (0, 1, ...) names it for grads_ready. */
int dtrain_grads_register(struct dtrain *h, float *buf, size_t count, int *id) DTRAIN_WUR;
/** Mark gradient id as computed for this step. */
int dtrain_grads_ready(struct dtrain *h, int id) DTRAIN_WUR;
/** Mark every gradient not yet ready, then wait for all buckets of the step. */
int dtrain_grads_wait(struct dtrain *h) DTRAIN_WUR;
/** Number of buckets the registered gradients form (for logs and tests). */
int dtrain_grads_nbuckets(const struct dtrain *h);

/*
 * Device memory helpers for C programs without CUDA headers (nccl transport
 * only; DTRAIN_ENOTSUP otherwise). They call cudaMalloc, cudaFree and
 * cudaMemcpy of the runtime libdtrain loaded.
 */
int dtrain_dev_malloc(struct dtrain *h, size_t bytes, void **out) DTRAIN_WUR;
void dtrain_dev_free(struct dtrain *h, void *p);
/** to_device 1: host src to device dst; 0: device src to host dst. */
int dtrain_dev_memcpy(struct dtrain *h, void *dst, const void *src, size_t bytes,
                      int to_device) DTRAIN_WUR;

#if defined(__has_include)
#if __has_include("dtrain_checkpoint.h")
#include "dtrain_checkpoint.h"
#endif
#if __has_include("dtrain_client.h")
#include "dtrain_client.h"
#endif
#endif

#ifdef __cplusplus
}
#endif

#endif
