/*
 * libdtrain internals: the handle, the transport ops every backend fills
 * in, and the helpers the backends share (socket I/O with deadlines,
 * reduction kernels, the dead-peer state the monitor thread maintains).
 */
#ifndef DTRAIN_INTERNAL_H
#define DTRAIN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "dtrain.h"

#define DT_HOSTLEN 128
#define DT_RUNIDLEN 256
#define DT_NCCL_ID_BYTES 128
/* Cap on one rendezvous message (the peer table of a large job fits). */
#define DT_MSG_MAX (8u << 20)
#define DT_MAX_WORLD 65536

struct dt_peer {
    char addr[64];         /* IPv4 address of its data listener */
    int data_port;         /* TCP ring listener port */
    char host[DT_HOSTLEN]; /* hostname/boot id: equal means same machine */
    int pid;
};

struct dtrain;

/**
 * A transport. setup runs once all peers are known (inside init, before
 * the "ready" round); the collectives run with the handle's op lock held;
 * teardown is NULL-safe on a partly set up transport. Byte counts are
 * bytes, element counts elements. Errors set h's message.
 */
struct dt_transport_ops {
    const char *name;
    int (*setup)(struct dtrain *h);
    int (*allreduce)(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                     enum dtrain_op op);
    int (*broadcast)(struct dtrain *h, void *buf, size_t bytes, int root);
    int (*allgather)(struct dtrain *h, const void *in, void *out, size_t bytes);
    int (*barrier)(struct dtrain *h);
    void (*teardown)(struct dtrain *h);
};

extern const struct dt_transport_ops dt_tcp_ops;
extern const struct dt_transport_ops dt_shm_ops;
extern const struct dt_transport_ops dt_nccl_ops;

struct dt_bucket;
struct dt_grad;

struct dtrain {
    struct dtrain_opts o;
    char *master_addr, *run_id, *trial_id, *controller_url, *token; /* owned copies */
    struct json_t *hparams;
    char *hparams_str;
    int rank, world;
    char host[DT_HOSTLEN];

    /* rendezvous results */
    struct dt_peer *peers; /* world entries */
    int data_listen_fd;
    char shm_name[64];
    unsigned char nccl_id[DT_NCCL_ID_BYTES];
    int have_nccl_id;
    enum dtrain_transport transport;
    const struct dt_transport_ops *ops;
    void *tp; /* the transport's private state */

    /* control channel: chief holds world-1 fds (index = rank), others 1 */
    int *ctrl_fds;
    int ctrl_fd; /* non-chief: connection to the chief */
    pthread_t monitor;
    bool monitor_started;
    int monitor_wake[2];   /* pipe: tells the monitor to stop */
    int dead_efd;          /* eventfd, readable once a peer is known dead */
    _Atomic int dead_rank; /* -1 until a peer died */
    _Atomic int stopping;
    _Atomic int byes;          /* chief: ranks that said goodbye */
    pthread_mutex_t ctrl_lock; /* serialises writes on control fds; guards mon_* */
    pthread_cond_t mon_cond;
    int mon_gone;            /* chief: ranks that said goodbye or died */
    bool mon_acked;          /* worker: the chief acknowledged our goodbye */
    bool mon_exited;         /* the monitor thread has returned */
    unsigned char *bye_seen; /* chief: world entries */

    /* collectives */
    pthread_mutex_t op_lock; /* one collective at a time */
    bool broken;             /* a peer failed or timed out: no more collectives */
    pthread_mutex_t err_lock;
    char err[DTRAIN_ERRLEN];

    /* async progress thread */
    pthread_mutex_t q_lock;
    pthread_cond_t q_cond;
    struct dtrain_req *q_head, *q_tail;
    pthread_t progress;
    bool progress_started;
    bool q_stop;

    /* gradient buckets */
    struct dt_grad *grads;
    int ngrads, grads_cap;
    struct dt_bucket *buckets;
    int nbuckets;
    bool buckets_built;
};

/** Set h's error message and return code. Thread-safe. */
int dt_err(struct dtrain *h, int code, const char *fmt, ...) KD_PRINTF(3, 4);

/** Milliseconds left until deadline_ms (kd_mono_ms clock), at least 0. */
int dt_left_ms(int64_t deadline_ms);

/**
 * After a transport saw a neighbour's connection fail: wait up to grace_ms
 * for the monitor to learn which rank died, then name it (or `suspect`).
 */
int dt_peer_failed(struct dtrain *h, int suspect, const char *what, int grace_ms);
/** If the monitor knows of a dead peer, fail with DTRAIN_EPEER naming it. */
int dt_check_dead(struct dtrain *h);

/* ---- sockets (net.c) ---- */
int dt_set_nonblock(int fd, bool on);
void dt_tune_socket(int fd);
/** DTRAIN_SOCKET_BUFFER's size in *bytes when it is set and valid (then it decides every
 * socket's buffers); false otherwise. */
bool dt_socket_buffer_env(int *bytes);
/** A switch from the environment: 0 when `name` is "0", 1 when set to anything else, -1 when
 * unset or empty. */
int dt_env_switch(const char *name);
/** TCP keepalive (10 s idle, 4 probes 5 s apart) for the control channel. */
void dt_keepalive(int fd);
/** Listen on 0.0.0.0:port (0: any free port); *out_port gets the port. */
int dt_listen(int port, int backlog, int *fd, int *out_port, char *err);
/** Connect once to host:port within timeout_ms; *fd is a blocking socket. */
int dt_connect(const char *host, int port, int timeout_ms, int *fd, char *err);
/** Write/read exactly n bytes before the deadline (blocking or not). */
int dt_write_all(int fd, const void *p, size_t n, int64_t deadline_ms);
int dt_read_all(int fd, void *p, size_t n, int64_t deadline_ms);
/** Length-prefixed message (4-byte big-endian length, cap DT_MSG_MAX). */
int dt_send_msg(int fd, const char *s, size_t n, int64_t deadline_ms);
/** Reads one message into a new NUL-terminated string; caller frees. */
int dt_recv_msg(int fd, char **out, size_t *n, int64_t deadline_ms);

/* ---- control frames (monitor.c) ---- */
enum { DT_CTRL_BYE = 1, DT_CTRL_BYE_ACK = 2, DT_CTRL_DEAD = 3 };
int dt_monitor_start(struct dtrain *h);
/** Goodbye handshake then stop the monitor (see dtrain_finalize). */
int dt_monitor_shutdown(struct dtrain *h, int timeout_ms);

/* ---- rendezvous (rendezvous.c) ---- */
int dt_rendezvous(struct dtrain *h, char *err);

/* ---- reductions (reduce.c) ---- */
/** dst[i] = dst[i] op src[i]; AVG reduces as SUM. */
void dt_reduce(void *dst, const void *src, size_t n, enum dtrain_dtype t, enum dtrain_op op);
/** memcpy for bulk data, at full speed whatever the two buffers' alignments. */
void dt_copy(void *restrict dst, const void *restrict src, size_t bytes);
/** dt_copy's way: -1 by the CPU (dt_avoid_movsb, DTRAIN_COPY_LOOP), 0 memcpy, 1 the vector
 * loop (tests). Returns the previous one (-1: not decided yet). */
int dt_copy_set(int mode);
/** The CPU's vendor (AMD or not), family and model, from cpuid (all 0 elsewhere). */
struct dt_cpu {
    bool amd;
    unsigned family, model; /* with their extended parts, as the vendors number them */
};
struct dt_cpu dt_cpu_id(void);
/**
 * dst[i] = op over srcs[k][i], folded in source order (dst may be srcs[0],
 * no other source); AVG reduces as SUM.
 */
void dt_reduce_multi(void *dst, const void *const *srcs, int nsrc, size_t n, enum dtrain_dtype t,
                     enum dtrain_op op);
/** buf /= world (the AVG finish). */
void dt_scale_avg(void *buf, size_t n, enum dtrain_dtype t, int world);
uint16_t dt_f32_to_f16(float f);
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f32_to_bf16(float f);
float dt_bf16_to_f32(uint16_t h);
/** Block conversions used by the half-precision kernels (bf: bfloat16, else float16); the
 * same bits as the element functions above. */
void dt_half_widen(float *restrict d, const uint16_t *restrict s, size_t n, bool bf);
void dt_half_narrow(uint16_t *restrict d, const float *restrict s, size_t n, bool bf);
/** d = s * scale, rounded to the half type (the product is rounded to float32 first). */
void dt_half_narrow_scaled(uint16_t *restrict d, const float *restrict s, size_t n, float scale,
                           bool bf);
/** Half-precision loops: -1 by the CPU (and DTRAIN_F16C, DTRAIN_AVX512), 0 the portable
 * loops, 1 AVX2 and F16C, 2 also the AVX-512 sums; capped at what the CPU has (tests).
 * Returns the highest level the CPU has. */
int dt_half_hw_set(int mode);

/* ---- decisions (plan.c): pure functions, table-tested ---- */
enum dt_shm_algo {
    DT_SHM_FLAT,  /* one copy in, one sync, every rank reduces all slots itself */
    DT_SHM_SPLIT, /* per chunk: copy in, reduce 1/world each, copy the result out */
    DT_SHM_CMA,   /* each rank reads its 1/world of the others' buffers, reduces it, then reads
                     the others' results: process_vm_readv, one kernel copy each way */
    DT_SHM_HALF,  /* 2 ranks, per chunk: copy in the peer's half, reduce our half, hand the
                     result back through the same slot, copy the peer's result out */
};
struct dt_shm_plan {
    enum dt_shm_algo algo;
    size_t chunk; /* bytes per step (<= slot) */
};
/**
 * The shm allreduce for a message of `bytes` among `world` ranks with
 * `slot`-byte slots; `cma`: the ranks may read each other's memory (not
 * known to be refused); `oversub`: more ranks than cores. For DT_SHM_CMA,
 * chunk is the piece of the peer's buffer read and reduced at a time.
 */
struct dt_shm_plan dt_shm_plan(size_t bytes, int world, size_t slot, bool cma, bool oversub);
/*
 * For 2 ranks from 512 KiB the slots and the direct reads are both tried, and
 * the faster kept, per data type and size class (dt_pick_class: floor(log2(bytes))
 * - 19 from 512 KiB, the last size open-ended, then DT_PICK_SIZES classes per
 * data type: the types reduce at different speeds, and the direct reads pay
 * per page they pin where the slots copy). dt_pick_turn(k) says what the k-th call
 * of a class does (counted alike on both ranks, from 0). dt_pick_direct
 * chooses from both ranks' trial results (least ns per MiB, [0] slots,
 * [1] direct; UINT64_MAX when not measured).
 */
#define DT_PICK_SIZES 12
#define DT_PICK_CLASSES (DT_PICK_SIZES * DTRAIN_DTYPE_COUNT)
#define DT_PICK_EPOCH 256
struct dt_pick_turn {
    int try_direct; /* 1: direct reads, 0: the slots, -1: the class's choice */
    bool record;    /* time this call as a trial */
    bool publish;   /* after it, publish this epoch's trial results */
    bool decide;    /* before it, choose from both ranks' published results */
};
unsigned dt_pick_class(size_t bytes, enum dtrain_dtype dtype);
struct dt_pick_turn dt_pick_turn(uint64_t k);
bool dt_pick_direct(const uint64_t a[2], const uint64_t b[2]);
/** Over shm: whether the ranks read each other's memory (1), cannot (-1), or were not asked (0). */
int dt_shm_cma(const struct dtrain *h);

enum dt_tcp_algo {
    DT_TCP_RING,   /* reduce-scatter then allgather around the ring */
    DT_TCP_GATHER, /* allgather whole buffers, every rank reduces all of them */
    DT_TCP_PAIRS,  /* 4 ranks: recursive doubling over the ring's connections */
};
/* Bytes of the buffer gathered messages land in (world * message bytes at most). */
#define DT_TCP_GATHER_CAP (1u << 20)
/** Whether to work around `rep movsb`: for the kernel's copies (`kernel`: tcp receives such
 * destinations through a page-aligned buffer) on AMD Zen 3, for dt_copy (a vector loop) on
 * AMD family 0x19 (Zen 3 and Zen 4); unless `force` (0 or 1; -1: decide). */
bool dt_avoid_movsb(struct dt_cpu cpu, bool kernel, int force);
/** The send buffer for a tcp ring connection to a peer on this host or another: bytes to set,
 * or 0 to keep the socket's (a remote peer, or DTRAIN_SOCKET_BUFFER `overridden`). */
int dt_tcp_sndbuf(bool same_host, bool overridden);
/** Bytes per send(2) at most (0: no limit), from the wait policy's and the send buffer set
 * by dt_tcp_sndbuf towards the ring's right neighbour. */
size_t dt_tcp_send_max(size_t policy_max, int sndbuf);
/** The tcp allreduce for a message of `bytes` among `world` ranks. */
enum dt_tcp_algo dt_tcp_plan(size_t bytes, int world);

struct dt_wait_policy {
    int64_t spin_ns;  /* at most this long polling with a pause while peers run elsewhere, */
    int64_t yield_ns; /* at most this long yielding to a peer that shares our core; then sleep */
    size_t send_max;  /* tcp: bytes handed to one send(2) at most; 0: no limit */
    bool oversub;     /* more ranks on this host than cores */
};
/** How a rank waits for its peers (and paces its sends), given the online cores and the
 * ranks on this host. */
struct dt_wait_policy dt_wait_policy(long ncpu, int local_ranks);

/* ---- async (async.c) ---- */
void dt_async_stop(struct dtrain *h);
void dt_grads_free(struct dtrain *h);

/** Run one collective under the op lock (the sync path and the progress thread). */
enum dt_kind { DT_OP_ALLREDUCE, DT_OP_BROADCAST, DT_OP_ALLGATHER, DT_OP_BARRIER };
int dt_run(struct dtrain *h, enum dt_kind kind, void *buf, const void *in, size_t count,
           enum dtrain_dtype dtype, enum dtrain_op op, int root);
/** dt_run, or through the progress thread's queue once it runs (keeps the order). */
int dt_submit(struct dtrain *h, enum dt_kind kind, void *buf, const void *in, size_t count,
              enum dtrain_dtype dtype, enum dtrain_op op, int root);

/* ---- transports' hooks used by the rendezvous ---- */
/** Chief: create and map the shm segment (name into h->shm_name) before the table goes out. */
int dt_shm_create(struct dtrain *h, char *err);
/** Chief: unlink the segment once every rank has mapped it. */
void dt_shm_unlink(struct dtrain *h);
/** Get an ncclUniqueId (loads NCCL); fails clearly where NCCL or a GPU is absent. */
int dt_nccl_get_id(struct dtrain *h, unsigned char *id, char *err);

#endif
