/*
 * The shared-memory transport for ranks on one host: a POSIX shm segment
 * with one flag per rank and two banks of one slot per rank, unlinked as
 * soon as every rank has mapped it, so nothing outlives the job. Ranks meet
 * by raising their own flag and watching the others' (spin or yield, then
 * futex, always watching for dead peers and the op timeout). Allreduce
 * copies each chunk in once; small messages (and every message of two
 * ranks) are then reduced whole by every rank, larger ones by 1/n each.
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
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/str.h"
#include "core/time.h"

#define SHM_MAGIC 0x64747333u     /* "dts3": per-rank sequence flags, with pid and buffer */
#define SHM_TOTAL_MAX (32u << 20) /* stay well inside a 64 MiB /dev/shm */
#define SLOT_MAX (1u << 20)
#define SLOT_MIN (64u << 10)
#define FUTEX_SLICE_MS 20

/*
 * Each rank owns one flag, on its own cache line, and only ever raises it:
 * seq counts the synchronisation points it has passed. A rank waiting for
 * the others reads their flags (no shared counter to fight over), and one
 * that sleeps registers in the flag's waiters so the owner knows to wake it.
 */
struct shm_flag {
    _Alignas(64) _Atomic uint32_t seq;
    _Atomic uint32_t waiters; /* ranks asleep in FUTEX_WAIT on seq */
    _Atomic int32_t cpu;      /* the core the owner last posted from */
    _Atomic int32_t pid;      /* the owner's process, for process_vm_readv */
    _Atomic int32_t cma;      /* the owner could read its peer's memory: 1, or -1 */
    _Atomic uint64_t addr;    /* the owner's buffer in this collective (CMA) */
    /* The owner's latest trial results per class (dt_pick_turn): least ns per MiB
     * through the slots and direct, and the epoch they are from. */
    _Alignas(64) _Atomic uint64_t tried[DT_PICK_CLASSES][2];
    _Atomic uint64_t tried_epoch[DT_PICK_CLASSES];
};

struct shm_hdr {
    uint32_t magic;
    int32_t world;
    uint64_t slot;
    _Alignas(64) struct shm_flag flags[]; /* world entries */
};

/*
 * Successive steps (across calls too) alternate banks, so a bank is
 * rewritten only after every rank has passed a later synchronisation point,
 * which it reaches only once done reading that bank.
 */
struct shm {
    struct shm_hdr *hdr;
    char *base; /* banks: base + (bank * world + rank) * slot */
    size_t slot, map_len;
    int rank, world;
    struct dt_wait_policy wait;
    uint32_t seq;         /* synchronisation points passed, on every rank alike */
    uint64_t step;        /* data steps so far, on every rank alike: picks the bank */
    const void **srcs;    /* world entries: reduction sources, reused by every call */
    int cma;              /* ranks read each other's memory: 0 not asked yet, 1 yes, -1 no */
    char *tmp;            /* CMA: world chunks, the peers' pieces being reduced */
    uint64_t *addr;       /* CMA: world entries, the ranks' buffers in this call */
    uint64_t probe;       /* CMA: the word the others read to find out whether they can */
    struct {              /* 2 ranks from 512 KiB: slots or direct, per class */
        uint64_t calls;   /* of this class so far, alike on both ranks */
        uint64_t best[2]; /* this epoch's trials: least ns per MiB, slots and direct */
        bool direct;      /* the choice since the last trials */
    } pick[DT_PICK_CLASSES];
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

static size_t hdr_bytes(int world)
{
    size_t b = sizeof(struct shm_hdr) + (size_t)world * sizeof(struct shm_flag);
    return (b + 4095) / 4096 * 4096;
}

static char *slot_ptr(struct shm *s, int bank, int rank)
{
    return s->base + ((size_t)bank * (size_t)s->world + (size_t)rank) * s->slot;
}

static int map_segment(struct dtrain *h, bool create, char *err)
{
    int rc = 0, fd = -1;
    struct shm *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return kd_seterr(err, DTRAIN_ENOMEM, "out of memory");
    s->slot = slot_size(h->world);
    s->rank = h->rank;
    s->world = h->world;
    s->map_len = hdr_bytes(h->world) + 2 * (size_t)h->world * s->slot;
    s->srcs = calloc((size_t)h->world, sizeof(*s->srcs));
    if (s->srcs == NULL) {
        rc = kd_seterr(err, DTRAIN_ENOMEM, "out of memory");
        goto out;
    }
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
    s->base = (char *)m + hdr_bytes(h->world);
    if (create) { /* the flags start at zero: ftruncate zero-fills */
        s->hdr->world = h->world;
        s->hdr->slot = s->slot;
        s->hdr->magic = SHM_MAGIC;
    } else if (s->hdr->magic != SHM_MAGIC || s->hdr->world != h->world || s->hdr->slot != s->slot) {
        rc = kd_seterr(err, DTRAIN_EPROTO, "shm segment %s: header mismatch", h->shm_name);
        goto out;
    }
    s->wait = dt_wait_policy(sysconf(_SC_NPROCESSORS_ONLN), h->world);
    h->tp = s;
    s = NULL;
out:
    if (s != NULL && s->hdr != NULL)
        munmap(s->hdr, s->map_len);
    if (s != NULL)
        free(s->srcs);
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
    free(s->srcs);
    free(s->tmp);
    free(s->addr);
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

/* Wrap-safe: has a flag that reads v passed synchronisation point `want`? */
static bool reached(uint32_t v, uint32_t want)
{
    return (int32_t)(v - want) >= 0;
}

/*
 * The first rank from `from` on whose flag has not reached `want`, or -1;
 * *here tells whether one of the missing ranks last ran on core `cpu`.
 */
static int first_missing(struct shm *s, int from, uint32_t want, int cpu, bool *here)
{
    int first = -1;
    *here = false;
    for (int j = from; j < s->world; j++) {
        struct shm_flag *f = &s->hdr->flags[j];
        if (j == s->rank || reached(atomic_load_explicit(&f->seq, memory_order_acquire), want))
            continue;
        if (first < 0)
            first = j;
        if (atomic_load_explicit(&f->cpu, memory_order_relaxed) == cpu) {
            *here = true;
            break;
        }
    }
    return first;
}

/* Pass the next synchronisation point: raise our flag, wake whoever sleeps on it. */
static void post(struct shm *s)
{
    struct shm_flag *f = &s->hdr->flags[s->rank];
    atomic_store_explicit(&f->cpu, sched_getcpu(), memory_order_relaxed);
    /* seq_cst store then load, against the waiter's increment then load: either
     * it sees the new value or we see it registered. */
    atomic_store(&f->seq, ++s->seq);
    if (atomic_load(&f->waiters) > 0)
        syscall(SYS_futex, &f->seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/*
 * Wait until every rank has passed our latest synchronisation point. While
 * a missing rank last ran on our core it needs that core: yield it. While
 * they all run elsewhere, poll with a pause. Either within the policy's
 * budget; then sleep on the flag of a missing rank, in slices that also
 * watch for a dead peer and the op deadline.
 */
static int wait_all(struct dtrain *h, struct shm *s, int64_t deadline, const char *what)
{
    uint32_t want = s->seq;
    int cpu = sched_getcpu();
    bool here = false;
    int j = first_missing(s, 0, want, cpu, &here);
    if (j < 0)
        return 0;
    int64_t last = kd_mono_ns(), spun = 0, yielded = 0;
    while (spun < s->wait.spin_ns && yielded < s->wait.yield_ns) {
        if (here) {
            sched_yield();
            cpu = sched_getcpu();
        } else {
            for (int i = 0; i < 16; i++)
                cpu_relax();
        }
        int64_t now = kd_mono_ns();
        if (here)
            yielded += now - last;
        else
            spun += now - last;
        last = now;
        if ((j = first_missing(s, j, want, cpu, &here)) < 0)
            return 0;
    }
    for (;;) {
        struct shm_flag *f = &s->hdr->flags[j];
        struct timespec ts = {0, FUTEX_SLICE_MS * 1000000L};
        atomic_fetch_add(&f->waiters, 1);
        uint32_t v = atomic_load(&f->seq);
        if (!reached(v, want))
            syscall(SYS_futex, &f->seq, FUTEX_WAIT, v, &ts, NULL, 0);
        atomic_fetch_sub(&f->waiters, 1);
        if ((j = first_missing(s, j, want, -1, &here)) < 0)
            return 0;
        int rc = dt_check_dead(h);
        if (rc < 0)
            return rc;
        if (dt_left_ms(deadline) == 0)
            return dt_err(h, DTRAIN_ETIMEDOUT,
                          "%s: timed out after %d ms waiting for rank %d in shared memory (is "
                          "it stuck?)",
                          what, h->o.op_timeout_ms, j);
    }
}

static int sync_all(struct dtrain *h, struct shm *s, int64_t deadline, const char *what)
{
    post(s);
    return wait_all(h, s, deadline, what);
}

/*
 * Per chunk: one copy in, one synchronisation, and every rank folds all
 * slots in rank order itself, so all get the same bits. A rank copies the
 * next chunk in as soon as it has read this one.
 */
static int allreduce_flat(struct dtrain *h, struct shm *s, char *b, size_t count,
                          enum dtrain_dtype dtype, enum dtrain_op op, size_t chunk,
                          int64_t deadline)
{
    size_t es = dtrain_dtype_size(dtype), per = chunk / es;
    int rc = 0;
    for (size_t off = 0; off < count; off += per) {
        size_t c = count - off < per ? count - off : per;
        int bank = (int)(s->step++ & 1);
        dt_copy(slot_ptr(s, bank, s->rank), b + off * es, c * es);
        if ((rc = sync_all(h, s, deadline, "allreduce")) < 0)
            return rc;
        for (int j = 0; j < s->world; j++)
            s->srcs[j] = slot_ptr(s, bank, j);
        dt_reduce_multi(b + off * es, s->srcs, s->world, c, dtype, op);
    }
    return 0;
}

static size_t seg_off(size_t count, int n, int i)
{
    return (size_t)((unsigned __int128)count * (unsigned)i / (unsigned)n);
}

/*
 * Larger messages, chunk by chunk: copy in, reduce our 1/n share across all
 * slots into slot 0, copy the whole result out. The copy in of chunk k+1
 * goes into the other bank while the others may still reduce chunk k, and
 * only then does a rank wait for chunk k's result.
 */
static int allreduce_split(struct dtrain *h, struct shm *s, char *b, size_t count,
                           enum dtrain_dtype dtype, enum dtrain_op op, size_t chunk,
                           int64_t deadline)
{
    int n = s->world, r = s->rank, rc = 0, prev = 0;
    size_t es = dtrain_dtype_size(dtype), per = chunk / es, prev_off = 0, prev_c = 0;
    for (size_t off = 0; off < count; off += per) {
        size_t c = count - off < per ? count - off : per;
        int bank = (int)(s->step++ & 1);
        dt_copy(slot_ptr(s, bank, r), b + off * es, c * es);
        if (prev_c > 0) {
            if ((rc = wait_all(h, s, deadline, "allreduce")) < 0)
                return rc;
            dt_copy(b + prev_off * es, slot_ptr(s, prev, 0), prev_c * es);
        }
        if ((rc = sync_all(h, s, deadline, "allreduce")) < 0)
            return rc;
        size_t p0 = seg_off(c, n, r), p1 = seg_off(c, n, r + 1);
        if (p1 > p0) {
            for (int j = 0; j < n; j++)
                s->srcs[j] = slot_ptr(s, bank, j) + p0 * es;
            dt_reduce_multi(slot_ptr(s, bank, 0) + p0 * es, s->srcs, n, p1 - p0, dtype, op);
        }
        post(s);
        prev = bank;
        prev_off = off;
        prev_c = c;
    }
    if (prev_c > 0) {
        if ((rc = wait_all(h, s, deadline, "allreduce")) < 0)
            return rc;
        dt_copy(b + prev_off * es, slot_ptr(s, prev, 0), prev_c * es);
    }
    return 0;
}

/*
 * Two ranks (DT_SHM_HALF), chunk by chunk, each moving only what its peer needs: a rank
 * copies the half of the chunk that its peer reduces to the start of its own slot; after a
 * synchronisation it reduces its own half, its buffer and the peer's slot in rank order (the
 * bits of the other algorithms), into its buffer, and copies the result into the peer's
 * slot over the operand it has just read; after a second one it copies the peer's result
 * out of its own slot. A slot is written again two chunks later, after the peer has posted
 * the second synchronisation of this one, so it has read everything there by then.
 */
static int allreduce_half(struct dtrain *h, struct shm *s, char *b, size_t count,
                          enum dtrain_dtype dtype, enum dtrain_op op, size_t chunk,
                          int64_t deadline)
{
    int r = s->rank, peer = 1 - r, rc;
    size_t es = dtrain_dtype_size(dtype), per = chunk / es;
    for (size_t off = 0; off < count; off += per) {
        size_t c = count - off < per ? count - off : per;
        int bank = (int)(s->step++ & 1);
        size_t h0 = seg_off(c, 2, r), hn = seg_off(c, 2, r + 1) - h0;
        size_t q0 = seg_off(c, 2, peer), qn = seg_off(c, 2, peer + 1) - q0;
        char *mine = slot_ptr(s, bank, r), *theirs = slot_ptr(s, bank, peer);
        char *own = b + (off + h0) * es;
        dt_copy(mine, b + (off + q0) * es, qn * es);
        if ((rc = sync_all(h, s, deadline, "allreduce")) < 0)
            return rc;
        if (hn > 0) {
            s->srcs[r] = own;
            s->srcs[peer] = theirs;
            dt_reduce_multi(own, s->srcs, 2, hn, dtype, op);
            dt_copy(theirs, own, hn * es);
        }
        if ((rc = sync_all(h, s, deadline, "allreduce")) < 0)
            return rc;
        dt_copy(b + (off + q0) * es, mine, qn * es);
    }
    return 0;
}

/* The slots, as plan p says (not DT_SHM_CMA). */
static int allreduce_slots(struct dtrain *h, struct shm *s, char *b, size_t count,
                           enum dtrain_dtype dtype, enum dtrain_op op, struct dt_shm_plan p,
                           int64_t deadline)
{
    switch (p.algo) {
    case DT_SHM_HALF: return allreduce_half(h, s, b, count, dtype, op, p.chunk, deadline);
    case DT_SHM_SPLIT: return allreduce_split(h, s, b, count, dtype, op, p.chunk, deadline);
    default: return allreduce_flat(h, s, b, count, dtype, op, p.chunk, deadline);
    }
}

/*
 * Can every rank read its peers' memory (process_vm_readv: the same user,
 * and no seccomp filter or Yama policy against it)? Asked once, by the
 * first call that wants it, on every rank alike: each reads a word of the
 * next rank, says whether it could, and all go by the answers of all, so
 * they always pick the same algorithm. DTRAIN_SHM_CMA=0 says no.
 */
static int cma_probe(struct dtrain *h, struct shm *s, int64_t deadline)
{
    struct shm_flag *me = &s->hdr->flags[s->rank];
    s->probe = 0x6b646574u + (uint64_t)s->rank;
    atomic_store(&me->pid, (int32_t)getpid());
    atomic_store(&me->addr, (uint64_t)(uintptr_t)&s->probe);
    int rc = sync_all(h, s, deadline, "allreduce (memory access check)");
    if (rc < 0)
        return rc;
    int peer = (s->rank + 1) % s->world;
    struct shm_flag *pf = &s->hdr->flags[peer];
    uint64_t v = 0;
    struct iovec l = {&v, sizeof(v)};
    struct iovec r = {(void *)(uintptr_t)atomic_load(&pf->addr), sizeof(v)};
    bool ok = dt_env_switch("DTRAIN_SHM_CMA") != 0 &&
              process_vm_readv((pid_t)atomic_load(&pf->pid), &l, 1, &r, 1, 0) == sizeof(v) &&
              v == 0x6b646574u + (uint64_t)peer;
    if (ok) {
        s->tmp =
            malloc((size_t)s->world * dt_shm_plan(SIZE_MAX, s->world, s->slot, true, false).chunk);
        s->addr = calloc((size_t)s->world, sizeof(*s->addr));
        ok = s->tmp != NULL && s->addr != NULL;
    }
    atomic_store(&me->cma, ok ? 1 : -1);
    if ((rc = sync_all(h, s, deadline, "allreduce (memory access check)")) < 0)
        return rc;
    s->cma = 1;
    for (int j = 0; j < s->world; j++)
        if (atomic_load(&s->hdr->flags[j].cma) != 1)
            s->cma = -1;
    return 0;
}

/* Read len bytes at `remote` in rank j's memory into `local`. */
static int cma_read(struct dtrain *h, struct shm *s, int j, void *local, uint64_t remote,
                    size_t len)
{
    pid_t pid = (pid_t)atomic_load(&s->hdr->flags[j].pid);
    while (len > 0) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)remote, len};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            if (e == EINTR)
                continue;
            char what[160];
            snprintf(what, sizeof(what), "allreduce: cannot read its buffer: %s", strerror(e));
            if (e == ESRCH) /* gone: the chief's word on it names it best; wait a moment for it */
                return dt_peer_failed(h, j, what, 1000);
            int rc = dt_check_dead(h);
            return rc < 0 ? rc : dt_err(h, -e, "rank %d: %s", j, what);
        }
        local = (char *)local + n;
        remote += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * Straight from the others' buffers. Everyone publishes its buffer; rank r
 * reads its 1/n share of every peer's buffer, chunk by chunk, and reduces
 * them with its own in rank order (the same bits as the other algorithms)
 * into its own buffer; once all shares are done, it reads the others'
 * results into its buffer; and no rank returns before everyone is done
 * reading its own. A rank reads only parts its peers do not write meanwhile.
 */
static int allreduce_cma(struct dtrain *h, struct shm *s, char *b, size_t count,
                         enum dtrain_dtype dtype, enum dtrain_op op, size_t chunk, int64_t deadline)
{
    int n = s->world, r = s->rank, rc;
    size_t es = dtrain_dtype_size(dtype), per = chunk / es;
    atomic_store(&s->hdr->flags[r].addr, (uint64_t)(uintptr_t)b);
    if ((rc = sync_all(h, s, deadline, "allreduce")) < 0)
        return rc;
    uint64_t *addr = s->addr;
    for (int j = 0; j < n; j++)
        addr[j] = atomic_load(&s->hdr->flags[j].addr);
    size_t p0 = seg_off(count, n, r), p1 = seg_off(count, n, r + 1);
    for (size_t off = p0; off < p1; off += per) {
        size_t c = p1 - off < per ? p1 - off : per;
        for (int j = 0; j < n; j++) {
            /* Our own part in place, unless reducing into it would overwrite it first. */
            char *t = s->tmp + (size_t)j * chunk;
            if (j == r && r < 2) {
                s->srcs[j] = b + off * es;
            } else if (j == r) {
                dt_copy(t, b + off * es, c * es);
                s->srcs[j] = t;
            } else {
                if ((rc = cma_read(h, s, j, t, addr[j] + off * es, c * es)) < 0)
                    return rc;
                s->srcs[j] = t;
            }
        }
        dt_reduce_multi(b + off * es, s->srcs, n, c, dtype, op);
    }
    if ((rc = sync_all(h, s, deadline, "allreduce")) < 0)
        return rc;
    for (int j = 0; j < n; j++) {
        size_t q0 = seg_off(count, n, j), q1 = seg_off(count, n, j + 1);
        if (j != r && q1 > q0 &&
            (rc = cma_read(h, s, j, b + q0 * es, addr[j] + q0 * es, (q1 - q0) * es)) < 0)
            return rc;
    }
    return sync_all(h, s, deadline, "allreduce");
}

/* The slots or the peer's buffer, as dt_pick_turn says; trials are timed and published. */
static int allreduce_picked(struct dtrain *h, struct shm *s, char *b, size_t count,
                            enum dtrain_dtype dtype, enum dtrain_op op, size_t chunk,
                            int64_t deadline)
{
    size_t bytes = count * dtrain_dtype_size(dtype);
    unsigned c = dt_pick_class(bytes, dtype);
    uint64_t k = s->pick[c].calls++, epoch = k / DT_PICK_EPOCH;
    struct dt_pick_turn t = dt_pick_turn(k);
    struct shm_flag *me = &s->hdr->flags[s->rank], *peer = &s->hdr->flags[1 - s->rank];
    int rc;
    if (k % DT_PICK_EPOCH == 0)
        s->pick[c].best[0] = s->pick[c].best[1] = UINT64_MAX;
    if (t.decide) {
        /* Both published after their last trial, before posting in the call since. */
        if (atomic_load(&peer->tried_epoch[c]) != epoch + 1 ||
            atomic_load(&me->tried_epoch[c]) != epoch + 1)
            return dt_err(h, DTRAIN_EPROTO, "allreduce: the ranks' trial results disagree");
        uint64_t a[2] = {atomic_load(&me->tried[c][0]), atomic_load(&me->tried[c][1])};
        uint64_t o[2] = {atomic_load(&peer->tried[c][0]), atomic_load(&peer->tried[c][1])};
        s->pick[c].direct = dt_pick_direct(a, o);
    }
    bool direct = t.try_direct >= 0 ? t.try_direct == 1 : s->pick[c].direct;
    if (direct && s->cma == 0 && (rc = cma_probe(h, s, deadline)) < 0)
        return rc;
    direct = direct && s->cma > 0; /* refused: the slots, on both ranks alike */
    int64_t t0 = kd_mono_ns();
    rc = direct ? allreduce_cma(h, s, b, count, dtype, op, chunk, deadline)
                : allreduce_slots(h, s, b, count, dtype, op,
                                  dt_shm_plan(bytes, s->world, s->slot, false, false), deadline);
    if (rc < 0 || !t.record)
        return rc;
    uint64_t ns = (uint64_t)(kd_mono_ns() - t0), per_mib = ns * (1u << 20) / (bytes | 1);
    uint64_t *best = &s->pick[c].best[direct];
    *best = per_mib < *best ? per_mib : *best;
    if (t.publish) {
        atomic_store(&me->tried[c][0], s->pick[c].best[0]);
        atomic_store(&me->tried[c][1], s->pick[c].best[1]);
        atomic_store(&me->tried_epoch[c], epoch + 1);
    }
    return 0;
}

int dt_shm_cma(const struct dtrain *h)
{
    const struct shm *s = h->tp;
    return s != NULL && strcmp(dtrain_transport_name(h), "shm") == 0 ? s->cma : 0;
}

static int shm_allreduce(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                         enum dtrain_op op)
{
    struct shm *s = h->tp;
    size_t bytes = count * dtrain_dtype_size(dtype);
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    if (count == 0)
        return 0;
    struct dt_shm_plan p = dt_shm_plan(bytes, s->world, s->slot, s->cma >= 0, s->wait.oversub);
    if (p.algo == DT_SHM_CMA)
        return allreduce_picked(h, s, buf, count, dtype, op, p.chunk, deadline);
    return allreduce_slots(h, s, buf, count, dtype, op, p, deadline);
}

static int shm_broadcast(struct dtrain *h, void *buf, size_t bytes, int root)
{
    struct shm *s = h->tp;
    int rc = 0;
    size_t per = s->slot * (size_t)s->world; /* a whole bank per step */
    char *b = buf;
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    for (size_t off = 0; off < bytes; off += per) {
        size_t c = bytes - off < per ? bytes - off : per;
        char *bank = slot_ptr(s, (int)(s->step++ & 1), 0);
        if (h->rank == root)
            dt_copy(bank, b + off, c);
        if ((rc = sync_all(h, s, deadline, "broadcast")) < 0)
            break;
        if (h->rank != root)
            dt_copy(b + off, bank, c);
    }
    return rc;
}

static int shm_allgather(struct dtrain *h, const void *in, void *out, size_t bytes)
{
    struct shm *s = h->tp;
    int rc = 0;
    char *o = out;
    const char *i = in;
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    for (size_t off = 0; off < bytes; off += s->slot) {
        size_t c = bytes - off < s->slot ? bytes - off : s->slot;
        int bank = (int)(s->step++ & 1);
        dt_copy(slot_ptr(s, bank, h->rank), i + off, c);
        if ((rc = sync_all(h, s, deadline, "allgather")) < 0)
            break;
        for (int j = 0; j < s->world; j++)
            dt_copy(o + (size_t)j * bytes + off, slot_ptr(s, bank, j), c);
    }
    return rc;
}

static int shm_barrier(struct dtrain *h)
{
    return sync_all(h, h->tp, kd_mono_ms() + h->o.op_timeout_ms, "barrier");
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
