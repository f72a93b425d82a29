/*
 * Collectives across real processes on the tcp and shm transports: every
 * dtype x op of allreduce at sizes 0, 1, 7, indivisible by the world size
 * and 16 MiB, with results bit-identical on all ranks (checked by an
 * allgather of checksums); broadcast from every root, allgather, barrier,
 * async allreduce and gradient buckets (with and without fp16 compression).
 * Then the algorithm choices: sizes on each side of every boundary of the
 * plan functions, thousands of back-to-back small allreduces reusing the
 * shared segment, and a mixed sequence of every collective and size class.
 */
#include <arpa/inet.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../dtrain/src/internal.h"
#include "core/str.h"
#include "dtrain.h"
#include "ranks.h"

static const char *const dtype_names[] = {"float32", "float16", "bfloat16",
                                          "float64", "int32",   "int64"};
static const char *const op_names[] = {"sum", "avg", "min", "max"};

static int val(int r, size_t i)
{
    return (int)((r * 7 + i * 13) % 19) - 9;
}

static void put(void *buf, enum dtrain_dtype t, size_t i, double v)
{
    switch (t) {
    case DTRAIN_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case DTRAIN_FLOAT16: ((uint16_t *)buf)[i] = dt_f32_to_f16((float)v); break;
    case DTRAIN_BFLOAT16: ((uint16_t *)buf)[i] = dt_f32_to_bf16((float)v); break;
    case DTRAIN_FLOAT64: ((double *)buf)[i] = v; break;
    case DTRAIN_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DTRAIN_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
    }
}

static double get(const void *buf, enum dtrain_dtype t, size_t i)
{
    switch (t) {
    case DTRAIN_FLOAT32: return ((const float *)buf)[i];
    case DTRAIN_FLOAT16: return dt_f16_to_f32(((const uint16_t *)buf)[i]);
    case DTRAIN_BFLOAT16: return dt_bf16_to_f32(((const uint16_t *)buf)[i]);
    case DTRAIN_FLOAT64: return ((const double *)buf)[i];
    case DTRAIN_INT32: return ((const int32_t *)buf)[i];
    case DTRAIN_INT64: return (double)((const int64_t *)buf)[i];
    default: return 0;
    }
}

static double expect(int n, int shift, size_t i, enum dtrain_dtype t, enum dtrain_op op)
{
    int sum = 0, mn = 1000, mx = -1000;
    for (int r = 0; r < n; r++) {
        int v = val(r + shift, i + (size_t)shift);
        sum += v;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    switch (op) {
    case DTRAIN_SUM: return sum;
    case DTRAIN_MIN: return mn;
    case DTRAIN_MAX: return mx;
    default:
        if (t == DTRAIN_INT32 || t == DTRAIN_INT64)
            return (double)(sum / n); /* C integer division */
        return (double)sum / n;
    }
}

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t x = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        x = (x ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return x;
}

/* Every rank must hold the same bytes: allgather the checksums. */
static int same_everywhere(struct dtrain *h, const void *buf, size_t bytes, const char *what)
{
    int n = dtrain_world_size(h);
    int64_t mine = (int64_t)fnv(buf, bytes), all[RK_MAX];
    if (dtrain_allgather(h, &mine, all, 1, DTRAIN_INT64) < 0) {
        fprintf(stderr, "%s: checksum allgather: %s\n", what, dtrain_errmsg(h));
        return 1;
    }
    for (int r = 0; r < n; r++) {
        if (all[r] != all[0]) {
            fprintf(stderr, "%s: rank %d holds other bytes than rank 0\n", what, r);
            return 1;
        }
    }
    return 0;
}

/* Allreduce of val(rank + shift, i): checks every element and the bits everywhere. */
static int check_allreduce_shift(struct dtrain *h, enum dtrain_dtype t, enum dtrain_op op,
                                 size_t count, int shift, bool everywhere)
{
    int n = dtrain_world_size(h), r = dtrain_rank(h), rc = 1;
    size_t es = dtrain_dtype_size(t);
    char *buf = malloc(count * es + 1);
    char what[128];
    snprintf(what, sizeof(what), "allreduce %s %s count %zu shift %d", dtype_names[t], op_names[op],
             count, shift);
    if (buf == NULL)
        return 1;
    for (size_t i = 0; i < count; i++)
        put(buf, t, i, val(r + shift, i + (size_t)shift));
    if (dtrain_allreduce(h, buf, count, t, op) < 0) {
        fprintf(stderr, "%s: %s\n", what, dtrain_errmsg(h));
        goto out;
    }
    double tol = t == DTRAIN_BFLOAT16 ? 1.0 / 64 : t == DTRAIN_FLOAT16 ? 1.0 / 512 : 1e-6;
    for (size_t i = 0; i < count; i++) {
        double want = expect(n, shift, i, t, op), got = get(buf, t, i);
        if (fabs(got - want) > tol * (fabs(want) + 1)) {
            fprintf(stderr, "%s: element %zu is %g, expected %g\n", what, i, got, want);
            goto out;
        }
    }
    rc = everywhere ? same_everywhere(h, buf, count * es, what) : 0;
out:
    free(buf);
    return rc;
}

static int check_allreduce(struct dtrain *h, enum dtrain_dtype t, enum dtrain_op op, size_t count)
{
    return check_allreduce_shift(h, t, op, count, 0, true);
}

static int check_broadcast(struct dtrain *h, size_t count, int root)
{
    int r = dtrain_rank(h), bad = 0;
    int32_t *b = malloc(count * 4 + 4);
    if (b == NULL)
        return 1;
    for (size_t i = 0; i < count; i++)
        b[i] = r == root ? val(root, i) : -100;
    if (dtrain_broadcast(h, b, count, DTRAIN_INT32, root) < 0)
        bad = 1;
    for (size_t i = 0; !bad && i < count; i++) {
        bad = b[i] != val(root, i);
        if (bad)
            fprintf(stderr, "element %zu is %d, expected %d\n", i, b[i], val(root, i));
    }
    if (bad)
        fprintf(stderr, "broadcast root %d count %zu wrong: %s\n", root, count, dtrain_errmsg(h));
    free(b);
    return bad;
}

static int check_allgather(struct dtrain *h, size_t count)
{
    int n = dtrain_world_size(h), r = dtrain_rank(h), bad = 0;
    double *in = malloc(count * 8 + 8), *all = malloc(count * 8 * (size_t)n + 8);
    if (in == NULL || all == NULL)
        bad = 1;
    for (size_t i = 0; !bad && i < count; i++)
        in[i] = val(r, i) + 0.5;
    if (!bad && dtrain_allgather(h, in, all, count, DTRAIN_FLOAT64) < 0)
        bad = 1;
    for (int q = 0; !bad && q < n; q++)
        for (size_t i = 0; !bad && i < count; i++)
            bad = all[(size_t)q * count + i] != val(q, i) + 0.5;
    if (bad)
        fprintf(stderr, "allgather count %zu wrong: %s\n", count, dtrain_errmsg(h));
    free(in);
    free(all);
    return bad;
}

/*
 * min and max of signed zeros: -0 and +0 compare equal, so the result's sign depends on the
 * order the operands are folded in, and every rank must fold in the same order. Rank r holds
 * +0 where (i + r) is even and -0 elsewhere, at small sizes and past the small-message
 * algorithms.
 */
static int check_signed_zeros(struct dtrain *h)
{
    int r = dtrain_rank(h);
    size_t counts[] = {5, 4099, 300001};
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
        for (int op = DTRAIN_MIN; op <= DTRAIN_MAX; op++) {
            size_t c = counts[k];
            float *v = malloc(c * sizeof(float));
            char what[96];
            if (v == NULL)
                return 1;
            for (size_t i = 0; i < c; i++)
                v[i] = (i + (size_t)r) % 2 ? -0.0f : 0.0f;
            snprintf(what, sizeof(what), "%s of signed zeros, count %zu", op_names[op], c);
            int bad = dtrain_allreduce(h, v, c, DTRAIN_FLOAT32, (enum dtrain_op)op) < 0;
            if (bad)
                fprintf(stderr, "%s: %s\n", what, dtrain_errmsg(h));
            for (size_t i = 0; i < c && !bad; i++)
                if (v[i] != 0.0f) {
                    fprintf(stderr, "%s: [%zu] = %g\n", what, i, (double)v[i]);
                    bad = 1;
                }
            bad = bad || same_everywhere(h, v, c * sizeof(float), what);
            free(v);
            if (bad)
                return 1;
        }
    return 0;
}

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* tcp: the ring's two connections (to peers on this host) carry the send buffer of
 * dt_tcp_sndbuf, or DTRAIN_SOCKET_BUFFER's where set; the kernel caps it at wmem_max and
 * reports twice what it kept.
 * The ring's sockets are the ones whose local or remote port is a peer's data port. */
static int check_ring_sndbuf(struct dtrain *h)
{
    int n = dtrain_world_size(h), r = dtrain_rank(h), found = 0;
    const char *env = getenv("DTRAIN_SOCKET_BUFFER");
    int want = env != NULL ? (int)strtol(env, NULL, 10) : dt_tcp_sndbuf(true, false), cap = 0;
    FILE *f = fopen("/proc/sys/net/core/wmem_max", "r"); /* the kernel's cap on what is set */
    if (f != NULL) {
        if (fscanf(f, "%d", &cap) == 1 && cap > 0 && want > cap)
            want = cap;
        fclose(f);
    }
    want *= 2;
    for (int fd = 3; fd < 1024; fd++) {
        struct sockaddr_in me, peer;
        socklen_t ml = sizeof(me), pl = sizeof(peer);
        int type = 0, sz = 0;
        socklen_t tl = sizeof(type), sl = sizeof(sz);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM ||
            getsockname(fd, (struct sockaddr *)&me, &ml) < 0 || me.sin_family != AF_INET ||
            getpeername(fd, (struct sockaddr *)&peer, &pl) < 0)
            continue;
        int lp = ntohs(me.sin_port), pp = ntohs(peer.sin_port);
        if (lp != h->peers[r].data_port && pp != h->peers[(r + 1) % n].data_port)
            continue;
        found++;
        if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, &sl) < 0 || sz != want) {
            fprintf(stderr, "rank %d: ring socket %d (ports %d-%d): send buffer %d, want %d\n", r,
                    fd, lp, pp, sz, want);
            return 1;
        }
    }
    if (found != 2) {
        fprintf(stderr, "rank %d: found %d ring sockets, want 2\n", r, found);
        return 1;
    }
    return 0;
}

static int w_coll(void)
{
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1;
    if (dtrain_init(&h, err) < 0) {
        fprintf(stderr, "init: %s\n", err);
        return 2;
    }
    int n = dtrain_world_size(h), r = dtrain_rank(h);
    size_t counts[] = {0, 1, 7, (size_t)n * 5 + 1, 300001};
    if (getenv("T_SKIP_AR") == NULL)
        for (int t = 0; t < DTRAIN_DTYPE_COUNT; t++)
            for (int op = 0; op < DTRAIN_OP_COUNT; op++)
                for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                    if (check_allreduce(h, (enum dtrain_dtype)t, (enum dtrain_op)op, counts[k]))
                        goto out;
    if (getenv("T_SKIP_AR") == NULL && check_signed_zeros(h))
        goto out;
    /* large: 16 MiB */
    if (getenv("T_SKIP_AR") == NULL &&
        (check_allreduce(h, DTRAIN_FLOAT32, DTRAIN_SUM, 4u << 20) ||
         check_allreduce(h, DTRAIN_FLOAT32, DTRAIN_AVG, (4u << 20) + 3) ||
         check_allreduce(h, DTRAIN_INT64, DTRAIN_MAX, 2u << 20)))
        goto out;
    /* broadcast from every root, allgather */
    size_t bc[] = {0, 1, 7, 300001};
    for (int root = 0; root < n; root++)
        for (size_t k = 0; k < 4; k++)
            if (check_broadcast(h, bc[k], root))
                goto out;
    for (size_t k = 0; k < 4; k++)
        if (check_allgather(h, bc[k]))
            goto out;
    /* barrier: nobody leaves before the slowest rank arrives. The ranks share this host's
     * monotonic clock, so each compares the time it left with the times all arrived. */
    if (dtrain_barrier(h) < 0)
        goto fail;
    usleep((useconds_t)r * 150000);
    int64_t arrived = mono_ns(), all_arrived[RK_MAX];
    if (dtrain_barrier(h) < 0)
        goto fail;
    int64_t left = mono_ns();
    if (dtrain_allgather(h, &arrived, all_arrived, 1, DTRAIN_INT64) < 0)
        goto fail;
    for (int j = 0; j < n; j++)
        if (left < all_arrived[j]) {
            fprintf(stderr, "barrier: rank %d left %.1f ms before rank %d arrived\n", r,
                    (double)(all_arrived[j] - left) / 1e6, j);
            goto out;
        }
    if (strcmp(dtrain_transport_name(h), "tcp") == 0 && check_ring_sndbuf(h))
        goto out;
    printf("rank %d: all collectives ok (transport %s)\n", r, dtrain_transport_name(h));
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "rank %d: %s\n", r, dtrain_errmsg(h));
out:
    if (dtrain_finalize(h) < 0 && rc == 0)
        rc = 3;
    return rc;
}

static int w_async(void)
{
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1;
    if (dtrain_init(&h, err) < 0) {
        fprintf(stderr, "init: %s\n", err);
        return 2;
    }
    int n = dtrain_world_size(h), r = dtrain_rank(h);
    bool fp16 = getenv("DTRAIN_FP16_COMPRESSION") != NULL;
    /* three async allreduces in flight, waited in order */
    size_t cnt[3] = {1000, 7, 200003};
    float *bufs[3];
    struct dtrain_req *req[3];
    for (int k = 0; k < 3; k++) {
        bufs[k] = malloc(cnt[k] * 4);
        for (size_t i = 0; i < cnt[k]; i++)
            bufs[k][i] = (float)val(r + k, i);
        if (dtrain_allreduce_async(h, bufs[k], cnt[k], DTRAIN_FLOAT32, DTRAIN_SUM, &req[k]) < 0)
            goto fail;
    }
    for (int k = 0; k < 3; k++) {
        int e = dtrain_wait(h, req[k]);
        for (size_t i = 0; e == 0 && i < cnt[k]; i++) {
            int want = 0;
            for (int q = 0; q < n; q++)
                want += val(q + k, i);
            if (bufs[k][i] != (float)want) {
                fprintf(stderr, "async %d: element %zu is %g, expected %d\n", k, i, bufs[k][i],
                        want);
                e = 1;
            }
        }
        free(bufs[k]);
        if (e != 0)
            goto out;
    }
    /* gradient buckets, two steps, ready in reverse order */
    size_t gc[6] = {1000, 10, 2000, 0, 5000, 3};
    float *g[6];
    int id[6];
    for (int k = 0; k < 6; k++) {
        g[k] = malloc(gc[k] * 4 + 4);
        if (dtrain_grads_register(h, g[k], gc[k], &id[k]) < 0)
            goto fail;
    }
    for (int step = 0; step < 2; step++) {
        for (int k = 0; k < 6; k++)
            for (size_t i = 0; i < gc[k]; i++)
                g[k][i] = (float)val(r + step, i + (size_t)k) * 0.25f;
        for (int k = 5; k >= 0; k--)
            if (dtrain_grads_ready(h, id[k]) < 0)
                goto fail;
        if (dtrain_grads_wait(h) < 0)
            goto fail;
        for (int k = 0; k < 6; k++) {
            for (size_t i = 0; i < gc[k]; i++) {
                double want = 0;
                for (int q = 0; q < n; q++)
                    want += val(q + step, i + (size_t)k) * 0.25;
                want /= n;
                double tol = fp16 ? 2e-3 * (fabs(want) + 1) : 1e-6;
                if (fabs(g[k][i] - want) > tol) {
                    fprintf(stderr, "grads step %d: grad %d element %zu is %g, expected %g\n", step,
                            k, i, g[k][i], want);
                    goto out;
                }
            }
            if (same_everywhere(h, g[k], gc[k] * 4, "grads"))
                goto out;
        }
    }
    if (dtrain_grads_nbuckets(h) < 3) {
        fprintf(stderr, "grads: %d buckets with a 4 KiB threshold, expected >= 3\n",
                dtrain_grads_nbuckets(h));
        goto out;
    }
    for (int k = 0; k < 6; k++)
        free(g[k]);
    printf("rank %d: async ok, %d buckets\n", r, dtrain_grads_nbuckets(h));
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "rank %d: %s\n", r, dtrain_errmsg(h));
out:
    if (dtrain_finalize(h) < 0 && rc == 0)
        rc = 3;
    return rc;
}

/* Byte sizes on each side of every point where the transport's plan changes; -1 when
 * they do not fit in `cap`. */
/* Nothing forbids a rank to read a sibling's memory: no DTRAIN_SHM_CMA=0, no Yama ptrace
 * restriction, no seccomp filter. */
static bool cma_allowed(void)
{
    const char *env = getenv("DTRAIN_SHM_CMA");
    char line[256];
    bool ok = env == NULL || strcmp(env, "0") != 0;
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f != NULL) {
        ok = ok && fgets(line, sizeof(line), f) != NULL && strtol(line, NULL, 10) == 0;
        fclose(f);
    }
    f = fopen("/proc/self/status", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "Seccomp:", 8) == 0)
            ok = ok && strtol(line + 8, NULL, 10) == 0;
    if (f != NULL)
        fclose(f);
    return ok;
}

static int plan_edges(const char *transport, int n, size_t slot, size_t *edges, int cap)
{
    int ne = 0;
    /* The library decides with the same facts: may it read the peers (asked), and are there
     * more ranks than cores. */
    bool oversub = dt_wait_policy(sysconf(_SC_NPROCESSORS_ONLN), n).oversub;
    struct dt_shm_plan prev = dt_shm_plan(4, n, slot, true, oversub);
    enum dt_tcp_algo tprev = dt_tcp_plan(4, n);
    for (size_t b = 8; b <= (2u << 20); b += 4) {
        if (ne + 4 > cap)
            return -1;
        bool shm = strcmp(transport, "shm") == 0, change = false;
        if (shm) {
            struct dt_shm_plan p = dt_shm_plan(b, n, slot, true, oversub);
            change = p.algo != prev.algo || p.chunk != prev.chunk;
            /* a chunk boundary: one chunk, then a chunk and one element */
            if (b == p.chunk || b == 2 * p.chunk) {
                edges[ne++] = b;
                edges[ne++] = b + 4;
            }
            prev = p;
        } else {
            enum dt_tcp_algo a = dt_tcp_plan(b, n);
            change = a != tprev;
            tprev = a;
        }
        if (change) {
            edges[ne++] = b - 4;
            edges[ne++] = b;
        }
    }
    return ne;
}

/* Xorshift: every rank draws the same sequence. */
static uint32_t rnd(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static int w_stress(void)
{
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1;
    if (dtrain_init(&h, err) < 0) {
        fprintf(stderr, "init: %s\n", err);
        return 2;
    }
    int n = dtrain_world_size(h), r = dtrain_rank(h);
    const char *tr = dtrain_transport_name(h);
    /* shm plans depend on the slot, so shm jobs set it; tcp sizes its mixed sequence by 64 KiB */
    uint64_t slot = 64u << 10;
    const char *slot_env = getenv("DTRAIN_SHM_SLOT");
    if ((slot_env == NULL && strcmp(tr, "shm") == 0) ||
        (slot_env != NULL && kd_parse_size(slot_env, &slot) < 0)) {
        fprintf(stderr, "DTRAIN_SHM_SLOT is not set or not a size\n");
        goto out;
    }
    /* 1. every plan boundary, a few dtypes and ops */
    size_t edges[64];
    int ne = plan_edges(tr, n, (size_t)slot, edges, 64);
    if (ne < 2) {
        fprintf(stderr, "%s: found %d plan edges (-1: more than 64)\n", tr, ne);
        goto out;
    }
    for (int k = 0; k < ne; k++) {
        if (check_allreduce(h, DTRAIN_FLOAT32, DTRAIN_SUM, edges[k] / 4) ||
            check_allreduce(h, DTRAIN_FLOAT16, DTRAIN_AVG, edges[k] / 2 + 1) ||
            check_allreduce(h, DTRAIN_INT64, DTRAIN_MAX, edges[k] / 8 + 1))
            goto out;
    }
    /* 2. back-to-back small allreduces reusing the segment, changing sizes */
    for (int it = 0; it < 3000; it++) {
        size_t count = 1 + ((size_t)it * 37) % 1500;
        if (check_allreduce_shift(h, DTRAIN_FLOAT32, it % 3 ? DTRAIN_SUM : DTRAIN_MAX, count, it,
                                  it % 500 == 0))
            goto out;
    }
    /* 3. one large size again and again (2 ranks on shm): both algorithms tried, the choice
     * made and used, and tried again in the next epoch (dt_pick_turn) */
    if (strcmp(tr, "shm") == 0 && n == 2)
        for (int k = 0; k < DT_PICK_EPOCH + 10; k++)
            if (check_allreduce_shift(h, DTRAIN_FLOAT32, DTRAIN_SUM, (512u << 10) / 4, k,
                                      k % 64 == 0))
                goto out;
    /* 4. a mixed sequence: every collective, every size class */
    size_t sizes[] = {0,
                      1,
                      3,
                      1000,
                      (size_t)slot / 8 + 1,
                      (size_t)slot / 4,
                      (size_t)slot + 3,
                      3 * (size_t)slot / 2 + 5,
                      70001};
    uint32_t x = 2463534242u;
    for (int k = 0; k < 150; k++) {
        size_t count = sizes[rnd(&x) % (sizeof(sizes) / sizeof(sizes[0]))];
        int bad = 0;
        switch (rnd(&x) % 5) {
        case 0:
        case 1:
            bad =
                check_allreduce_shift(h, (enum dtrain_dtype)(rnd(&x) % DTRAIN_DTYPE_COUNT),
                                      (enum dtrain_op)(rnd(&x) % DTRAIN_OP_COUNT), count, k, true);
            break;
        case 2: bad = check_broadcast(h, count, (int)(rnd(&x) % (uint32_t)n)); break;
        case 3: bad = check_allgather(h, count / 4); break;
        default: bad = dtrain_barrier(h) < 0; break;
        }
        if (bad) {
            fprintf(stderr, "mixed sequence: step %d failed: %s\n", k, dtrain_errmsg(h));
            goto out;
        }
    }
    /* Where nothing forbids reading a sibling's memory, the large allreduces of 2 ranks above
     * read it; more ranks never ask. */
    if (strcmp(tr, "shm") == 0) {
        int want = n != 2 ? 0 : cma_allowed() ? 1 : -1, got = dt_shm_cma(h);
        if (got != want) {
            fprintf(stderr, "shm: reading the peers' memory: %d, want %d\n", got, want);
            goto out;
        }
    }
    printf("rank %d: stress ok (transport %s, %d plan edges)\n", r, tr, ne);
    rc = 0;
out:
    if (dtrain_finalize(h) < 0 && rc == 0)
        rc = 3;
    return rc;
}

static void run_job2(const char *worker, int world, const char *transport, const char *extra1,
                     const char *extra2)
{
    struct rk_job j;
    char tenv[64];
    snprintf(tenv, sizeof(tenv), "DTRAIN_TRANSPORT=%s", transport);
    const char *extra[] = {tenv, "DTRAIN_FUSION_THRESHOLD=4KiB", extra1, extra2, NULL};
    if (extra1 == NULL)
        extra[2] = extra2;
    rk_init(&j, world);
    for (int r = 0; r < world; r++)
        rk_spawn(&j, worker, r, extra);
    int killed = rk_wait_all(&j, 100000);
    for (int i = 0; i < j.np; i++) {
        if (rk_code(&j, i) != 0)
            fprintf(stderr, "---- rank %d (exit %d):\n%s\n", i, rk_code(&j, i), rk_log(&j, i));
    }
    for (int i = 0; i < j.np; i++) {
        assert_int_equal(rk_code(&j, i), 0);
        assert_non_null(strstr(rk_log(&j, i), transport));
    }
    assert_int_equal(killed, 0);
    rk_cleanup(&j);
}

static void run_job(const char *worker, int world, const char *transport, const char *extra1)
{
    run_job2(worker, world, transport, extra1, NULL);
}

/* Receiving straight into malloc'd buffers and through the page-aligned one (dt_avoid_movsb),
 * whatever this CPU's own choice. */
static void test_tcp_2(void **s)
{
    (void)s;
    run_job("coll", 2, "tcp", "DTRAIN_TCP_STAGE=0");
}
static void test_tcp_3(void **s)
{
    (void)s;
    run_job("coll", 3, "tcp", "DTRAIN_TCP_STAGE=1");
}
static void test_tcp_4(void **s)
{
    (void)s;
    /* small allreduces by recursive doubling; the send buffer set by DTRAIN_SOCKET_BUFFER */
    run_job("coll", 4, "tcp", "DTRAIN_SOCKET_BUFFER=1048576");
}
static void test_shm_2(void **s)
{
    (void)s;
    run_job("coll", 2, "shm", NULL);
}
static void test_shm_3(void **s)
{
    (void)s;
    run_job("coll", 3, "shm", "DTRAIN_COPY_LOOP=1"); /* the copy loop of AMD Zen 3, anywhere */
}
static void test_async_tcp(void **s)
{
    (void)s;
    run_job("async", 3, "tcp", NULL);
}
static void test_async_shm_fp16(void **s)
{
    (void)s;
    run_job("async", 2, "shm", "DTRAIN_FP16_COMPRESSION=1");
}

/* Small slots make every chunk boundary small; 1 MiB is the default for 2..16 ranks (the
 * stress worker plans with the slot, so shm jobs always set it). */
static void test_stress_shm_2_small_slot(void **s)
{
    (void)s;
    run_job("stress", 2, "shm", "DTRAIN_SHM_SLOT=16KiB");
}
static void test_stress_shm_3_small_slot(void **s)
{
    (void)s;
    run_job("stress", 3, "shm", "DTRAIN_SHM_SLOT=16KiB");
}
static void test_stress_shm_3(void **s)
{
    (void)s;
    run_job("stress", 3, "shm", "DTRAIN_SHM_SLOT=1MiB");
}
/* 2 ranks without reading the peer's memory: flat through the slots at every size. */
static void test_stress_shm_2_no_cma(void **s)
{
    (void)s;
    run_job2("stress", 2, "shm", "DTRAIN_SHM_SLOT=1MiB", "DTRAIN_SHM_CMA=0");
}
static void test_stress_shm_2(void **s)
{
    (void)s;
    run_job("stress", 2, "shm", "DTRAIN_SHM_SLOT=1MiB");
}
static void test_stress_tcp_2(void **s)
{
    (void)s;
    run_job("stress", 2, "tcp", NULL);
}
static void test_stress_tcp_3(void **s)
{
    (void)s;
    run_job("stress", 3, "tcp", NULL);
}
static void test_stress_tcp_4(void **s)
{
    (void)s;
    run_job("stress", 4, "tcp", NULL);
}

static const struct rk_worker workers[] = {
    {"coll", w_coll}, {"async", w_async}, {"stress", w_stress}, {NULL, NULL}};

int main(int argc, char **argv)
{
    rk_dispatch(argc, argv, workers);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_2),
        cmocka_unit_test(test_tcp_3),
        cmocka_unit_test(test_tcp_4),
        cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3),
        cmocka_unit_test(test_async_tcp),
        cmocka_unit_test(test_async_shm_fp16),
        cmocka_unit_test(test_stress_shm_2_small_slot),
        cmocka_unit_test(test_stress_shm_3_small_slot),
        cmocka_unit_test(test_stress_shm_3),
        cmocka_unit_test(test_stress_shm_2_no_cma),
        cmocka_unit_test(test_stress_shm_2),
        cmocka_unit_test(test_stress_tcp_2),
        cmocka_unit_test(test_stress_tcp_3),
        cmocka_unit_test(test_stress_tcp_4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
