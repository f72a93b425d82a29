/*
 * The TCP ring transport: each rank sends to rank+1 and receives from rank-1
 * over non-blocking sockets, and allreduce is a reduce-scatter then an
 * allgather whose sends and receives overlap, reducing received bytes in
 * cache-sized chunks as they arrive. Every wait also watches the monitor's
 * eventfd, so a dead peer anywhere in the ring ends the collective.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/time.h"

#define TMP_BYTES (256u << 10)
#define RING_MAGIC 0x64747231u /* "dtr1" */
#define PEER_GRACE_MS 1000

struct tcp {
    int right, left;   /* send to rank+1, receive from rank-1 */
    char *tmp;         /* TMP_BYTES, page-aligned; a split element moves to its start */
    char *gather;      /* DT_TCP_GATHER_CAP: every rank's buffer, small allreduces */
    const void **srcs; /* world entries: reduction sources */
    int64_t yield_ns;  /* how long a stalled transfer yields before it sleeps in poll */
    size_t send_max;   /* bytes per send(2) at most; 0: no limit (dt_wait_policy) */
    bool stage;        /* receive through tmp into destinations just past a page (dt_avoid_movsb) */
};

static uint64_t run_hash(const char *s)
{
    uint64_t x = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        x = (x ^ (unsigned char)*s) * 1099511628211ull;
    return x;
}

static void pack_hello(unsigned char *b, int rank, uint64_t hash)
{
    uint32_t m = htonl(RING_MAGIC), r = htonl((uint32_t)rank);
    memcpy(b, &m, 4);
    memcpy(b + 4, &r, 4);
    for (int i = 0; i < 8; i++)
        b[8 + i] = (unsigned char)(hash >> (56 - 8 * i));
}

/* Give fd, the connection to rank `peer`, the send buffer of dt_tcp_sndbuf; returns it (0: the
 * socket's own kept). */
static int local_sndbuf(struct dtrain *h, int fd, int peer, bool overridden)
{
    int sz = dt_tcp_sndbuf(strcmp(h->peers[peer].host, h->host) == 0, overridden);
    if (sz > 0) /* best effort, as in dt_tune_socket */
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    return sz;
}

static int tcp_setup(struct dtrain *h)
{
    int rc = 0, n = h->world, rnk = h->rank;
    int right = (rnk + 1) % n, left = (rnk + n - 1) % n;
    int64_t deadline = kd_mono_ms() + h->o.rendezvous_timeout_ms;
    char e[KD_ERRLEN];
    unsigned char hello[16], got[16], want[16];
    struct tcp *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return dt_err(h, DTRAIN_ENOMEM, "tcp: out of memory");
    t->right = t->left = -1;
    h->tp = t;
    t->tmp = aligned_alloc(4096, TMP_BYTES);
    t->gather = aligned_alloc(4096, DT_TCP_GATHER_CAP);
    t->srcs = calloc((size_t)n, sizeof(*t->srcs));
    if (t->tmp == NULL || t->gather == NULL || t->srcs == NULL) {
        rc = dt_err(h, DTRAIN_ENOMEM, "tcp: out of memory");
        goto out;
    }
    const struct dt_peer *pr = &h->peers[right];
    if ((rc = dt_connect(pr->addr, pr->data_port, dt_left_ms(deadline), &t->right, e)) < 0) {
        rc = dt_err(h, rc, "tcp ring: rank %d cannot reach rank %d at %s:%d: %s", rnk, right,
                    pr->addr, pr->data_port, e);
        goto out;
    }
    uint64_t hash = run_hash(h->run_id);
    pack_hello(hello, rnk, hash);
    pack_hello(want, left, hash);
    if ((rc = dt_write_all(t->right, hello, sizeof(hello), deadline)) < 0) {
        rc = dt_err(h, rc, "tcp ring: hello to rank %d: %s", right, kd_strerror(rc));
        goto out;
    }
    while (t->left < 0) {
        struct pollfd p = {.fd = h->data_listen_fd, .events = POLLIN};
        int k = poll(&p, 1, dt_left_ms(deadline));
        if (k == 0) {
            rc = dt_err(h, DTRAIN_ETIMEDOUT, "tcp ring: rank %d never connected to rank %d", left,
                        rnk);
            goto out;
        }
        if (k < 0)
            continue;
        int fd = accept4(h->data_listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        int64_t dl = kd_mono_ms() + 5000;
        if (dt_read_all(fd, got, sizeof(got), dl < deadline ? dl : deadline) == 0 &&
            memcmp(got, want, sizeof(want)) == 0) {
            t->left = fd;
        } else {
            close(fd); /* not our left neighbour of this run: ignore it */
        }
    }
    struct dt_wait_policy wp =
        dt_wait_policy(sysconf(_SC_NPROCESSORS_ONLN), dtrain_local_world_size(h));
    t->yield_ns = wp.yield_ns;
    t->send_max = wp.send_max;
    t->stage = dt_avoid_movsb(dt_cpu_id(), true, dt_env_switch("DTRAIN_TCP_STAGE"));
    dt_tune_socket(t->left);
    /* a smaller send buffer towards peers on this host (dt_tcp_sndbuf); the ring sends right */
    int env_bytes;
    bool overridden = dt_socket_buffer_env(&env_bytes);
    int sr = local_sndbuf(h, t->right, right, overridden);
    (void)local_sndbuf(h, t->left, left, overridden);
    t->send_max = dt_tcp_send_max(t->send_max, sr);
    if ((rc = dt_set_nonblock(t->left, true)) < 0 || (rc = dt_set_nonblock(t->right, true)) < 0) {
        rc = dt_err(h, rc, "tcp ring: fcntl: %s", kd_strerror(rc));
        goto out;
    }
out:
    return rc;
}

static void tcp_teardown(struct dtrain *h)
{
    struct tcp *t = h->tp;
    if (t == NULL)
        return;
    if (t->right >= 0)
        close(t->right);
    if (t->left >= 0)
        close(t->left);
    free(t->tmp);
    free(t->gather);
    free(t->srcs);
    free(t);
    h->tp = NULL;
}

/*
 * Send slen bytes of sbuf to the right while receiving rlen bytes from the
 * left into rbuf, reducing them into rbuf when `reduce` (elements of dtype
 * under op). With `relay`, only bytes already received may be sent (sbuf
 * then equals rbuf): the pipelined broadcast chain.
 */
struct xfer {
    const char *sbuf;
    size_t slen;
    char *rbuf;
    size_t rlen;
    bool reduce, relay;
    int via; /* 0: the ring (send right, receive left); 1: both ways with the right
              * neighbour; -1: both ways with the left */
    enum dtrain_dtype dtype;
    enum dtrain_op op;
};

/*
 * The kernel copies received bytes with `rep movsb`, which on AMD Zen 3
 * runs four times slower when the destination lies just past the (page
 * aligned) socket data modulo 4 KiB, as malloc'd buffers do (offset 16).
 * There (dt_avoid_movsb) those receive into the page-aligned tmp and are
 * copied from there.
 */
static bool bad_offset(const void *p)
{
    uintptr_t o = (uintptr_t)p & 4095;
    return o != 0 && (o < 512 || o > 4096 - 512);
}

static int xfer(struct dtrain *h, const struct xfer *x, int64_t deadline, const char *what)
{
    struct tcp *t = h->tp;
    int n = h->world, right = (h->rank + 1) % n, left = (h->rank + n - 1) % n;
    int sfd = x->via < 0 ? t->left : t->right, rfd = x->via > 0 ? t->right : t->left;
    if (x->via > 0)
        left = right; /* the rank we receive from */
    else if (x->via < 0)
        right = left; /* the rank we send to */
    size_t sent = 0, recvd = 0, tfill = 0, es = dtrain_dtype_size(x->dtype);
    bool stage = t->stage && bad_offset(x->rbuf);
    int64_t stalled = 0; /* when the loop last stopped making progress */
    int rc = 0;
    while (sent < x->slen || recvd < x->rlen) {
        bool progress = false;
        size_t sendable = x->relay && recvd < x->slen ? recvd : x->slen;
        if (sent < sendable) {
            size_t sn = sendable - sent;
            if (t->send_max > 0 && sn > t->send_max)
                sn = t->send_max;
            ssize_t w = send(sfd, x->sbuf + sent, sn, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                sent += (size_t)w;
                progress = true;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                rc = dt_peer_failed(h, right, "connection lost while sending", PEER_GRACE_MS);
                goto out;
            }
        }
        if (recvd < x->rlen) {
            ssize_t r;
            if (x->reduce || stage) {
                size_t want = x->rlen - recvd - tfill;
                if (want > TMP_BYTES - tfill)
                    want = TMP_BYTES - tfill;
                r = recv(rfd, t->tmp + tfill, want, MSG_DONTWAIT);
                if (r > 0 && x->reduce) {
                    tfill += (size_t)r;
                    size_t whole = tfill / es * es;
                    dt_reduce(x->rbuf + recvd, t->tmp, whole / es, x->dtype, x->op);
                    recvd += whole;
                    if (tfill > whole)
                        memmove(t->tmp, t->tmp + whole, tfill - whole);
                    tfill -= whole;
                } else if (r > 0) {
                    dt_copy(x->rbuf + recvd, t->tmp, (size_t)r);
                    recvd += (size_t)r;
                }
            } else {
                r = recv(rfd, x->rbuf + recvd, x->rlen - recvd, MSG_DONTWAIT);
                if (r > 0)
                    recvd += (size_t)r;
            }
            if (r > 0) {
                progress = true;
            } else if (r == 0) {
                rc = dt_peer_failed(h, left, "closed its connection", PEER_GRACE_MS);
                goto out;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                rc = dt_peer_failed(h, left, "connection lost while receiving", PEER_GRACE_MS);
                goto out;
            }
        }
        if (progress) {
            stalled = 0;
            continue;
        }
        if ((rc = dt_check_dead(h)) < 0)
            goto out;
        /* A peer that is running answers within microseconds: yield (to it,
         * when it shares this core) and try again for a while before paying
         * for a sleep and a wake-up in poll(2). */
        int64_t now = kd_mono_ns();
        if (stalled == 0)
            stalled = now;
        if (now - stalled < t->yield_ns) {
            sched_yield();
            continue;
        }
        struct pollfd p[3];
        int np = 0;
        p[np++] = (struct pollfd){.fd = h->dead_efd, .events = POLLIN};
        if (sent < sendable)
            p[np++] = (struct pollfd){.fd = sfd, .events = POLLOUT};
        if (recvd < x->rlen)
            p[np++] = (struct pollfd){.fd = rfd, .events = POLLIN};
        int k = poll(p, (nfds_t)np, dt_left_ms(deadline));
        if (k == 0) {
            rc = dt_err(h, DTRAIN_ETIMEDOUT,
                        "%s: timed out after %d ms (rank %d waiting on rank %d to send or rank "
                        "%d to receive; is a peer stuck?)",
                        what, h->o.op_timeout_ms, h->rank, left, right);
            goto out;
        }
    }
out:
    return rc;
}

static size_t seg_off(size_t count, int n, int i)
{
    return (size_t)((unsigned __int128)count * (unsigned)i / (unsigned)n);
}

/* Ring allgather of `bytes` per rank in `o`, whose slot `r` already holds ours. */
static int ring_gather(struct dtrain *h, char *o, size_t bytes, int64_t deadline, const char *what)
{
    int n = h->world, r = h->rank, rc = 0;
    for (int s = 0; s < n - 1 && rc == 0; s++) {
        int si = ((r - s) % n + n) % n, ri = ((r - s - 1) % n + n) % n;
        struct xfer x = {.sbuf = o + (size_t)si * bytes,
                         .slen = bytes,
                         .rbuf = o + (size_t)ri * bytes,
                         .rlen = bytes,
                         .dtype = DTRAIN_INT32};
        rc = xfer(h, &x, deadline, what);
    }
    return rc;
}

/* Small messages: n-1 steps of whole buffers, then every rank folds all of
 * them in rank order, so all get the same bits. */
static int allreduce_gather(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                            enum dtrain_op op, int64_t deadline)
{
    struct tcp *t = h->tp;
    size_t bytes = count * dtrain_dtype_size(dtype);
    dt_copy(t->gather + (size_t)h->rank * bytes, buf, bytes);
    int rc = ring_gather(h, t->gather, bytes, deadline, "allreduce");
    if (rc < 0)
        return rc;
    for (int j = 0; j < h->world; j++)
        t->srcs[j] = t->gather + (size_t)j * bytes;
    dt_reduce_multi(buf, t->srcs, h->world, count, dtype, op);
    return 0;
}

/*
 * Four ranks: recursive doubling over the ring's own connections, each used both ways.
 * First 0-1 and 2-3 exchange their buffers and each reduces the pair's; then 1-2 and 3-0
 * exchange those and reduce again: two steps of the whole buffer, where the gather takes
 * three. Every rank folds in the same order, (v0 op v1) op (v2 op v3), so all get the
 * same bits.
 */
static int allreduce_pairs(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                           enum dtrain_op op, int64_t deadline)
{
    struct tcp *t = h->tp;
    int r = h->rank, rc = 0;
    size_t bytes = count * dtrain_dtype_size(dtype);
    for (int step = 0; step < 2 && rc == 0; step++) {
        bool even = r % 2 == 0;
        /* step 0: even ranks with their right neighbour (0-1, 2-3); step 1: odd ones (1-2, 3-0) */
        struct xfer x = {.sbuf = buf,
                         .slen = bytes,
                         .rbuf = t->gather,
                         .rlen = bytes,
                         .via = (step == 0) == even ? 1 : -1,
                         .dtype = DTRAIN_INT32};
        if ((rc = xfer(h, &x, deadline, "allreduce")) < 0)
            break;
        /* the operand from the lower ranks first: the even rank's, then ranks 0 and 1's */
        if (step == 0 ? even : r < 2) {
            dt_reduce(buf, t->gather, count, dtype, op);
        } else {
            dt_reduce(t->gather, buf, count, dtype, op);
            dt_copy(buf, t->gather, bytes);
        }
    }
    return rc;
}

static int tcp_allreduce(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                         enum dtrain_op op)
{
    int n = h->world, r = h->rank, rc = 0;
    size_t es = dtrain_dtype_size(dtype);
    char *b = buf;
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    enum dt_tcp_algo algo = dt_tcp_plan(count * es, n);
    if (algo == DT_TCP_PAIRS)
        return allreduce_pairs(h, buf, count, dtype, op, deadline);
    if (algo == DT_TCP_GATHER)
        return allreduce_gather(h, buf, count, dtype, op, deadline);
    for (int s = 0; s < n - 1 && rc == 0; s++) {
        int si = ((r - s) % n + n) % n, ri = ((r - s - 1) % n + n) % n;
        struct xfer x = {.sbuf = b + seg_off(count, n, si) * es,
                         .slen = (seg_off(count, n, si + 1) - seg_off(count, n, si)) * es,
                         .rbuf = b + seg_off(count, n, ri) * es,
                         .rlen = (seg_off(count, n, ri + 1) - seg_off(count, n, ri)) * es,
                         .reduce = true,
                         .dtype = dtype,
                         .op = op};
        rc = xfer(h, &x, deadline, "allreduce");
    }
    for (int s = 0; s < n - 1 && rc == 0; s++) {
        int si = ((r + 1 - s) % n + n) % n, ri = ((r - s) % n + n) % n;
        struct xfer x = {.sbuf = b + seg_off(count, n, si) * es,
                         .slen = (seg_off(count, n, si + 1) - seg_off(count, n, si)) * es,
                         .rbuf = b + seg_off(count, n, ri) * es,
                         .rlen = (seg_off(count, n, ri + 1) - seg_off(count, n, ri)) * es,
                         .dtype = dtype};
        rc = xfer(h, &x, deadline, "allreduce");
    }
    return rc;
}

static int tcp_broadcast(struct dtrain *h, void *buf, size_t bytes, int root)
{
    int n = h->world, r = h->rank;
    int64_t deadline = kd_mono_ms() + h->o.op_timeout_ms;
    bool last = (r + 1) % n == root;
    struct xfer x = {.sbuf = buf, .rbuf = buf, .dtype = DTRAIN_INT32};
    if (r == root) {
        x.slen = bytes;
    } else {
        x.rlen = bytes;
        x.slen = last ? 0 : bytes;
        x.relay = true;
    }
    return xfer(h, &x, deadline, "broadcast");
}

static int tcp_allgather(struct dtrain *h, const void *in, void *out, size_t bytes)
{
    char *o = out;
    if (bytes > 0 && o + (size_t)h->rank * bytes != in)
        memmove(o + (size_t)h->rank * bytes, in, bytes);
    return ring_gather(h, o, bytes, kd_mono_ms() + h->o.op_timeout_ms, "allgather");
}

static int tcp_barrier(struct dtrain *h)
{
    /* An allreduce with one element per rank: every rank hears from all. */
    int32_t v[64] = {0};
    int32_t *p = h->world <= 64 ? v : calloc((size_t)h->world, sizeof(int32_t));
    if (p == NULL)
        return dt_err(h, DTRAIN_ENOMEM, "barrier: out of memory");
    int rc = tcp_allreduce(h, p, (size_t)h->world, DTRAIN_INT32, DTRAIN_SUM);
    if (p != v)
        free(p);
    return rc;
}

const struct dt_transport_ops dt_tcp_ops = {
    .name = "tcp",
    .setup = tcp_setup,
    .allreduce = tcp_allreduce,
    .broadcast = tcp_broadcast,
    .allgather = tcp_allgather,
    .barrier = tcp_barrier,
    .teardown = tcp_teardown,
};
