/*
 * The shared-memory transport for ranks on one host: a POSIX shm segment
 * with two banks of one slot per rank, unlinked as soon as every rank has
 * mapped it, so nothing outlives the job. Per chunk every rank copies in,
 * reduces its 1/n share across all slots in one pass and copies the result
 * out, between futex barriers that also watch for dead peers and the op
 * timeout.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/str.h"
#include "core/time.h"

#define SHM_MAGIC 0x64747368u /* "dtsh" */
#define HDR_BYTES 4096
#define SHM_TOTAL_MAX (32u << 20) /* stay well inside a 64 MiB /dev/shm */
#define SLOT_MAX (1u << 20)
#define SLOT_MIN (64u << 10)
#define FUTEX_SLICE_MS 20

struct shm_hdr {
    uint32_t magic;
    int32_t world;
    uint64_t slot;
    _Alignas(64) _Atomic uint32_t count;
    _Alignas(64) _Atomic uint32_t gen;
    _Alignas(64) _Atomic uint32_t waiters; /* ranks asleep in FUTEX_WAIT */
};

/*
 * Successive chunks (across calls too) alternate banks, so a bank is
 * rewritten only after every rank passed a later barrier, which it reaches
 * only once done reading it: two barriers per allreduce chunk, one per
 * broadcast or allgather chunk.
 */
struct shm {
    struct shm_hdr *hdr;
    char *base; /* banks: base + (bank * world + rank) * slot */
    size_t slot, map_len;
    int spin;     /* pause iterations before sleeping */
    bool yield;   /* more ranks than cores: yield instead of spinning */
    uint64_t seq; /* chunks done so far, on every rank alike: picks the bank */
};

static size_t slot_size(int world)
{
    size_t s = SHM_TOTAL_MAX / (2u * (size_t)world);
    s = s > SLOT_MAX ? SLOT_MAX : s < SLOT_MIN ? SLOT_MIN : s;
    const char *env = getenv("DTRAIN_SHM_SLOT");
    uint64_t v = 0;
    if (env != NULL && kd_parse_size(env, &v) == 0 && v >= 4096 && v <= (64u << 20))
        s = (size_t)v;
    return s / 64 * 64;
}

static char *slot_ptr(struct shm *s, int bank, int world, int rank)
{
    return s->base + ((size_t)bank * (size_t)world + (size_t)rank) * s->slot;
}

static int map_segment(struct dtrain *h, bool create, char *err)
{
    int rc = 0, fd = -1;
    struct shm *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return kd_seterr(err, DTRAIN_ENOMEM, "out of memory");
    s->slot = slot_size(h->world);
    s->map_len = HDR_BYTES + 2 * (size_t)h->world * s->slot;
    fd = shm_open(h->shm_name, O_RDWR | (create ? O_CREAT | O_EXCL : 0) | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = kd_seterr(err, -errno, "shm_open %s: %s", h->shm_name, strerror(errno));
        goto out;
    }
    if (create) {
        /* Reserve the pages now: a full /dev/shm is an error here, not a SIGBUS later. */
        int e = ftruncate(fd, (off_t)s->map_len) < 0 ? errno
                                                     : posix_fallocate(fd, 0, (off_t)s->map_len);
        if (e != 0) {
            rc = kd_seterr(err, -e, "cannot reserve %zu bytes in /dev/shm: %s", s->map_len,
                           strerror(e));
            goto out;
        }
    } else {
        struct stat st;
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != s->map_len) {
            rc = kd_seterr(err, DTRAIN_EPROTO,
                           "shm segment %s has the wrong size (ranks disagree on DTRAIN_SHM_SLOT?)",
                           h->shm_name);
            goto out;
        }
    }
    void *m = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        rc = kd_seterr(err, -errno, "mmap %zu bytes: %s", s->map_len, strerror(errno));
        goto out;
    }
    s->hdr = m;
    s->base = (char *)m + HDR_BYTES;
    if (create) {
        s->hdr->world = h->world;
        s->hdr->slot = s->slot;
        atomic_store(&s->hdr->count, 0);
        atomic_store(&s->hdr->gen, 0);
        atomic_store(&s->hdr->waiters, 0);
        s->hdr->magic = SHM_MAGIC;
    } else if (s->hdr->magic != SHM_MAGIC || s->hdr->world != h->world || s->hdr->slot != s->slot) {
        rc = kd_seterr(err, DTRAIN_EPROTO, "shm segment %s: header mismatch", h->shm_name);
        goto out;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* Spinning only pays when every rank has a core of its own. */
    s->spin = ncpu >= h->world ? 2000 : 0;
    s->yield = ncpu < h->world;
    h->tp = s;
    s = NULL;
out:
    if (s != NULL && s->hdr != NULL)
        munmap(s->hdr, s->map_len);
    free(s);
    if (fd >= 0)
        close(fd);
    return rc;
}

int dt_shm_create(struct dtrain *h, char *err)
{
    unsigned seed = (unsigned)kd_mono_ns() ^ (unsigned)getpid();
    snprintf(h->shm_name, sizeof(h->shm_name), "/dtrain-%d-%08x", (int)getpid(),
             (unsigned)rand_r(&seed));
    return map_segment(h, true, err);
}

void dt_shm_unlink(struct dtrain *h)
{
    if (h->shm_name[0] != '\0')
        shm_unlink(h->shm_name);
}

static int shm_setup(struct dtrain *h)
{
    char e[KD_ERRLEN];
    int rc = 0;
    if (h->tp != NULL) /* the chief mapped it when creating it */
        return 0;
    if (h->shm_name[0] == '\0')
        return dt_err(h, DTRAIN_EPROTO, "shm: the chief sent no segment name");
    if ((rc = map_segment(h, false, e)) < 0)
        return dt_err(h, rc, "shm: %s", e);
    return 0;
}

static void shm_teardown(struct dtrain *h)
{
    struct shm *s = h->tp;
    if (s == NULL)
        return;
    if (h->rank == 0)
        dt_shm_unlink(h); /* when init failed before the ready round */
    munmap(s->hdr, s->map_len);
    free(s);
    h->tp = NULL;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int barrier(struct dtrain *h, struct shm *s, int64_t deadline, const char *what)
{
    struct shm_hdr *hd = s->hdr;
    uint32_t g = atomic_load_explicit(&hd->gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&hd->count, 1, memory_order_acq_rel) == (uint32_t)h->world - 1) {
        atomic_store_explicit(&hd->count, 0, memory_order_relaxed);
        atomic_fetch_add(&hd->gen, 1); /* seq_cst: pairs with the waiters count */
        if (atomic_load(&hd->waiters) > 0)
            syscall(SYS_futex, &hd->gen, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
        return 0;
    }
    for (int i = 0; i < s->spin; i++) {
        if (atomic_load_explicit(&hd->gen, memory_order_acquire) != g)
            return 0;
        cpu_relax();
    }
    for (int i = 0; i < (s->yield ? 16 : 4); i++) {
        if (atomic_load_explicit(&hd->gen, memory_order_acquire) != g)
            return 0;
        sched_yield();
    }
    for (;;) {
        struct timespec ts = {0, FUTEX_SLICE_MS * 1000000L};
        if (atomic_load_explicit(&hd->gen, memory_order_acquire) != g)
            return 0;
        atomic_fetch_add(&hd->waiters, 1);
        syscall(SYS_futex, &hd->gen, FUTEX_WAIT, g, &ts, NULL, 0);
        atomic_fetch_sub(&hd->waiters, 1);
        if (atomic_load_explicit(&hd->gen, memory_order_acquire) != g)
            return 0;
        int rc = dt_check_dead(h);
        if (rc < 0)
            return rc;
        if (dt_left_ms(deadline) == 0)
            return dt_err(h, DTRAIN_ETIMEDOUT,
                          "%s: timed out after %d ms waiting for the other ranks in shared "
                          "memory (is a peer stuck?)",
                          what, h->o.op_timeout_ms);
    }
}

static size_t seg_off(size_t count, int n, int i)
{
    return (size_t)((unsigned __int128)count * (unsigned)i / (unsigned)n);
}

static int shm_allreduce(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                         enum dtrain_op op)
{
    struct shm *s = h->tp;
    int n = h->world, r = h->rank, rc = 0;
    size_t es = dtrain_dtype_size(dtype), per = s->slot / es;
    char *b = buf;
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    const void *srcs[DT_MAX_WORLD > 256 ? 256 : DT_MAX_WORLD];
    const void **sp = n <= 256 ? srcs : malloc((size_t)n * sizeof(void *));
    if (sp == NULL)
        return dt_err(h, DTRAIN_ENOMEM, "allreduce: out of memory");
    for (size_t off = 0; off < count; off += per) {
        size_t c = count - off < per ? count - off : per;
        int bank = (int)(s->seq++ & 1);
        memcpy(slot_ptr(s, bank, n, r), b + off * es, c * es);
        if ((rc = barrier(h, s, deadline, "allreduce")) < 0)
            goto out;
        size_t p0 = seg_off(c, n, r), p1 = seg_off(c, n, r + 1);
        if (p1 > p0) {
            for (int j = 0; j < n; j++)
                sp[j] = slot_ptr(s, bank, n, j) + p0 * es;
            dt_reduce_multi(slot_ptr(s, bank, n, 0) + p0 * es, sp, n, p1 - p0, dtype, op);
        }
        if ((rc = barrier(h, s, deadline, "allreduce")) < 0)
            goto out;
        memcpy(b + off * es, slot_ptr(s, bank, n, 0), c * es);
    }
out:
    if (sp != srcs)
        free(sp);
    return rc;
}

static int shm_broadcast(struct dtrain *h, void *buf, size_t bytes, int root)
{
    struct shm *s = h->tp;
    int n = h->world, rc = 0;
    size_t per = s->slot * (size_t)n; /* a whole bank per chunk */
    char *b = buf;
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    for (size_t off = 0; off < bytes; off += per) {
        size_t c = bytes - off < per ? bytes - off : per;
        char *bank = slot_ptr(s, (int)(s->seq++ & 1), n, 0);
        if (h->rank == root)
            memcpy(bank, b + off, c);
        if ((rc = barrier(h, s, deadline, "broadcast")) < 0)
            break;
        if (h->rank != root)
            memcpy(b + off, bank, c);
    }
    return rc;
}

static int shm_allgather(struct dtrain *h, const void *in, void *out, size_t bytes)
{
    struct shm *s = h->tp;
    int n = h->world, rc = 0;
    char *o = out;
    const char *i = in;
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    for (size_t off = 0; off < bytes; off += s->slot) {
        size_t c = bytes - off < s->slot ? bytes - off : s->slot;
        int bank = (int)(s->seq++ & 1);
        memcpy(slot_ptr(s, bank, n, h->rank), i + off, c);
        if ((rc = barrier(h, s, deadline, "allgather")) < 0)
            break;
        for (int j = 0; j < n; j++)
            memcpy(o + (size_t)j * bytes + off, slot_ptr(s, bank, n, j), c);
    }
    return rc;
}

static int shm_barrier(struct dtrain *h)
{
    return barrier(h, h->tp, kd_mono_ms() + h->o.op_timeout_ms, "barrier");
}

const struct dt_transport_ops dt_shm_ops = {
    .name = "shm",
    .setup = shm_setup,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .allgather = shm_allgather,
    .barrier = shm_barrier,
    .teardown = shm_teardown,
};
