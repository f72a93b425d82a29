/*
 * The NCCL transport for device buffers: NCCL and the CUDA runtime are loaded
 * with dlopen and the few functions used are declared here by hand, so
 * libdtrain builds and runs where no CUDA exists. Waits poll the stream so a
 * dead peer or the op timeout aborts the communicator instead of hanging.
 */
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/time.h"

typedef struct {
    char internal[DT_NCCL_ID_BYTES];
} nccl_id_t;
typedef void *nccl_comm_t;
typedef void *cuda_stream_t;

enum { CUDA_SUCCESS = 0, CUDA_NOT_READY = 600, CUDA_H2D = 1, CUDA_D2H = 2 };

struct nccl {
    void *lib, *cudart;
    int (*get_unique_id)(nccl_id_t *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_id_t, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cuda_stream_t);
    int (*broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, cuda_stream_t);
    int (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, cuda_stream_t);
    int (*comm_destroy)(nccl_comm_t);
    int (*comm_abort)(nccl_comm_t);
    int (*comm_async_error)(nccl_comm_t, int *);
    const char *(*nccl_strerror)(int);
    int (*device_count)(int *);
    int (*set_device)(int);
    int (*stream_create)(cuda_stream_t *);
    int (*stream_query)(cuda_stream_t);
    int (*stream_destroy)(cuda_stream_t);
    int (*cuda_malloc)(void **, size_t);
    int (*cuda_free)(void *);
    int (*cuda_memcpy)(void *, const void *, size_t, int);
    const char *(*cuda_strerror)(int);
    nccl_comm_t comm;
    cuda_stream_t stream;
};

static void unload(struct nccl *c)
{
    if (c == NULL)
        return;
    if (c->stream != NULL && c->stream_destroy != NULL)
        c->stream_destroy(c->stream);
    if (c->lib != NULL)
        dlclose(c->lib);
    if (c->cudart != NULL)
        dlclose(c->cudart);
    free(c);
}

#define SYM(lib, field, name)                                                                      \
    do {                                                                                           \
        *(void **)&c->field = dlsym(lib, name);                                                    \
        if (c->field == NULL) {                                                                    \
            rc =                                                                                   \
                kd_seterr(err, DTRAIN_ENOTSUP, "symbol %s missing from the loaded library", name); \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static int load(struct dtrain *h, char *err)
{
    static const char *const cudarts[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                          "libcudart.so.11.0", NULL};
    int rc = 0, ndev = 0;
    if (h->tp != NULL)
        return 0;
    struct nccl *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return kd_seterr(err, DTRAIN_ENOMEM, "out of memory");
    for (int i = 0; cudarts[i] != NULL && c->cudart == NULL; i++)
        c->cudart = dlopen(cudarts[i], RTLD_NOW | RTLD_LOCAL);
    if (c->cudart == NULL) {
        rc = kd_seterr(err, DTRAIN_ENOTSUP,
                       "the CUDA runtime (libcudart.so) is not installed or not on "
                       "LD_LIBRARY_PATH; use transport tcp or shm on machines without GPUs");
        goto out;
    }
    c->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (c->lib == NULL) {
        rc = kd_seterr(err, DTRAIN_ENOTSUP,
                       "NCCL (libnccl.so.2) is not installed or not on LD_LIBRARY_PATH: %s",
                       dlerror());
        goto out;
    }
    SYM(c->cudart, device_count, "cudaGetDeviceCount");
    SYM(c->cudart, set_device, "cudaSetDevice");
    SYM(c->cudart, stream_create, "cudaStreamCreate");
    SYM(c->cudart, stream_query, "cudaStreamQuery");
    SYM(c->cudart, stream_destroy, "cudaStreamDestroy");
    SYM(c->cudart, cuda_malloc, "cudaMalloc");
    SYM(c->cudart, cuda_free, "cudaFree");
    SYM(c->cudart, cuda_memcpy, "cudaMemcpy");
    SYM(c->cudart, cuda_strerror, "cudaGetErrorString");
    SYM(c->lib, get_unique_id, "ncclGetUniqueId");
    SYM(c->lib, comm_init_rank, "ncclCommInitRank");
    SYM(c->lib, all_reduce, "ncclAllReduce");
    SYM(c->lib, broadcast, "ncclBroadcast");
    SYM(c->lib, all_gather, "ncclAllGather");
    SYM(c->lib, comm_destroy, "ncclCommDestroy");
    SYM(c->lib, comm_abort, "ncclCommAbort");
    SYM(c->lib, comm_async_error, "ncclCommGetAsyncError");
    SYM(c->lib, nccl_strerror, "ncclGetErrorString");
    int e = c->device_count(&ndev);
    if (e != CUDA_SUCCESS || ndev == 0) {
        rc = kd_seterr(err, DTRAIN_ENOTSUP, "no CUDA device is visible (%s)",
                       e != CUDA_SUCCESS ? c->cuda_strerror(e) : "device count 0");
        goto out;
    }
    int dev = h->o.cuda_device >= 0 ? h->o.cuda_device : dtrain_local_rank(h) % ndev;
    if ((e = c->set_device(dev)) != CUDA_SUCCESS) {
        rc = kd_seterr(err, DTRAIN_ENOTSUP, "cudaSetDevice(%d): %s", dev, c->cuda_strerror(e));
        goto out;
    }
    h->tp = c;
    c = NULL;
out:
    unload(c);
    return rc;
}

int dt_nccl_get_id(struct dtrain *h, unsigned char *id, char *err)
{
    int rc = load(h, err);
    if (rc < 0)
        return rc;
    struct nccl *c = h->tp;
    nccl_id_t nid;
    int e = c->get_unique_id(&nid);
    if (e != 0)
        return kd_seterr(err, DTRAIN_EIO, "ncclGetUniqueId: %s", c->nccl_strerror(e));
    memcpy(id, nid.internal, DT_NCCL_ID_BYTES);
    return 0;
}

static int nccl_setup(struct dtrain *h)
{
    char e[KD_ERRLEN];
    int rc = load(h, e);
    if (rc < 0)
        return dt_err(h, rc, "nccl: %s", e);
    struct nccl *c = h->tp;
    if (!h->have_nccl_id)
        return dt_err(h, DTRAIN_EPROTO, "nccl: the chief sent no ncclUniqueId");
    int x = c->stream_create(&c->stream);
    if (x != CUDA_SUCCESS)
        return dt_err(h, DTRAIN_EIO, "nccl: cudaStreamCreate: %s", c->cuda_strerror(x));
    nccl_id_t nid;
    memcpy(nid.internal, h->nccl_id, DT_NCCL_ID_BYTES);
    if ((x = c->comm_init_rank(&c->comm, h->world, nid, h->rank)) != 0)
        return dt_err(h, DTRAIN_EIO, "nccl: ncclCommInitRank(rank %d of %d): %s", h->rank, h->world,
                      c->nccl_strerror(x));
    return 0;
}

static void nccl_teardown(struct dtrain *h)
{
    struct nccl *c = h->tp;
    if (c == NULL)
        return;
    if (c->comm != NULL)
        (h->broken ? c->comm_abort : c->comm_destroy)(c->comm);
    unload(c);
    h->tp = NULL;
}

/* Wait for the stream, watching for dead peers, NCCL errors and the timeout. */
static int sync_stream(struct dtrain *h, struct nccl *c, const char *what)
{
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    int rc = 0;
    for (;;) {
        int q = c->stream_query(c->stream);
        if (q == CUDA_SUCCESS)
            break;
        if (q != CUDA_NOT_READY) {
            rc = dt_err(h, DTRAIN_EIO, "%s: CUDA: %s", what, c->cuda_strerror(q));
            break;
        }
        int ae = 0;
        if (c->comm_async_error(c->comm, &ae) == 0 && ae != 0) {
            rc = dt_err(h, DTRAIN_EPEER, "%s: NCCL: %s", what, c->nccl_strerror(ae));
            break;
        }
        if ((rc = dt_check_dead(h)) < 0)
            break;
        if (dt_left_ms(deadline) == 0) {
            rc = dt_err(h, DTRAIN_ETIMEDOUT, "%s: timed out after %d ms", what, h->o.op_timeout_ms);
            break;
        }
        usleep(20);
    }
    return rc;
}

static int nccl_type(enum dtrain_dtype t)
{
    static const int m[DTRAIN_DTYPE_COUNT] = {7, 6, 9, 8, 2, 4};
    return m[t];
}

static int nccl_allreduce(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                          enum dtrain_op op)
{
    static const int ops[DTRAIN_OP_COUNT] = {0, 4, 3, 2}; /* sum avg min max */
    struct nccl *c = h->tp;
    if (count == 0)
        return 0;
    int e = c->all_reduce(buf, buf, count, nccl_type(dtype), ops[op], c->comm, c->stream);
    if (e != 0)
        return dt_err(h, DTRAIN_EIO, "allreduce: ncclAllReduce: %s", c->nccl_strerror(e));
    return sync_stream(h, c, "allreduce");
}

static int nccl_broadcast(struct dtrain *h, void *buf, size_t bytes, int root)
{
    struct nccl *c = h->tp;
    if (bytes == 0)
        return 0;
    int e = c->broadcast(buf, buf, bytes, 1 /* uint8 */, root, c->comm, c->stream);
    if (e != 0)
        return dt_err(h, DTRAIN_EIO, "broadcast: ncclBroadcast: %s", c->nccl_strerror(e));
    return sync_stream(h, c, "broadcast");
}

static int nccl_allgather(struct dtrain *h, const void *in, void *out, size_t bytes)
{
    struct nccl *c = h->tp;
    if (bytes == 0)
        return 0;
    int e = c->all_gather(in, out, bytes, 1, c->comm, c->stream);
    if (e != 0)
        return dt_err(h, DTRAIN_EIO, "allgather: ncclAllGather: %s", c->nccl_strerror(e));
    return sync_stream(h, c, "allgather");
}

static int nccl_barrier(struct dtrain *h)
{
    struct nccl *c = h->tp;
    void *d = NULL;
    int e = c->cuda_malloc(&d, 4 * sizeof(float));
    if (e != CUDA_SUCCESS)
        return dt_err(h, DTRAIN_ENOMEM, "barrier: cudaMalloc: %s", c->cuda_strerror(e));
    int rc = nccl_allreduce(h, d, 1, DTRAIN_FLOAT32, DTRAIN_SUM);
    c->cuda_free(d);
    return rc;
}

const struct dt_transport_ops dt_nccl_ops = {
    .name = "nccl",
    .setup = nccl_setup,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .teardown = nccl_teardown,
};

int dtrain_dev_malloc(struct dtrain *h, size_t bytes, void **out)
{
    struct nccl *c = h->transport == DTRAIN_TRANSPORT_NCCL ? h->tp : NULL;
    if (c == NULL)
        return dt_err(h, DTRAIN_ENOTSUP, "dev_malloc: only with the nccl transport");
    int e = c->cuda_malloc(out, bytes ? bytes : 1);
    return e == CUDA_SUCCESS
               ? 0
               : dt_err(h, DTRAIN_ENOMEM, "cudaMalloc(%zu): %s", bytes, c->cuda_strerror(e));
}

void dtrain_dev_free(struct dtrain *h, void *p)
{
    struct nccl *c = h->transport == DTRAIN_TRANSPORT_NCCL ? h->tp : NULL;
    if (c != NULL && p != NULL)
        c->cuda_free(p);
}

int dtrain_dev_memcpy(struct dtrain *h, void *dst, const void *src, size_t bytes, int to_device)
{
    struct nccl *c = h->transport == DTRAIN_TRANSPORT_NCCL ? h->tp : NULL;
    if (c == NULL)
        return dt_err(h, DTRAIN_ENOTSUP, "dev_memcpy: only with the nccl transport");
    int e = c->cuda_memcpy(dst, src, bytes, to_device ? CUDA_H2D : CUDA_D2H);
    return e == CUDA_SUCCESS ? 0 : dt_err(h, DTRAIN_EIO, "cudaMemcpy: %s", c->cuda_strerror(e));
}
