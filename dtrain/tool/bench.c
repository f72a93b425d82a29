/*
 * `dtrain bench allreduce`: latency and algorithm bandwidth (bytes / time,
 * as nccl-tests and OSU report it) of dtrain_allreduce for a range of
 * sizes. Every rank runs the same loop; rank 0 prints one line per size.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/str.h"
#include "core/time.h"
#include "dtrain.h"
#include "tool.h"

#define BENCH_BYTES_PER_SIZE (512ull << 20) /* iterations: about this much data */

static int parse_range(const char *s, uint64_t *lo, uint64_t *hi)
{
    char a[64];
    const char *dots = strstr(s, "..");
    if (dots == NULL)
        return kd_parse_size(s, lo) < 0 ? -1 : (*hi = *lo, 0);
    size_t n = (size_t)(dots - s);
    if (n >= sizeof(a))
        return -1;
    memcpy(a, s, n);
    a[n] = '\0';
    if (kd_parse_size(a, lo) < 0 || kd_parse_size(dots + 2, hi) < 0 || *hi < *lo)
        return -1;
    return 0;
}

static void human(uint64_t b, char *out, size_t len)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(out, len, "%lluM", (unsigned long long)(b >> 20));
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(out, len, "%lluK", (unsigned long long)(b >> 10));
    else
        snprintf(out, len, "%llu", (unsigned long long)b);
}

int dtrain_tool_bench_allreduce(int argc, char **argv)
{
    static const struct option lo[] = {{"size", required_argument, NULL, 's'},
                                       {"iters", required_argument, NULL, 'n'},
                                       {"warmup", required_argument, NULL, 'w'},
                                       {"reps", required_argument, NULL, 'r'},
                                       {"transport", required_argument, NULL, 't'},
                                       {"dtype", required_argument, NULL, 'd'},
                                       {"op", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    uint64_t smin = 4096, smax = 256u << 20;
    int iters = 0, warmup = 2, reps = 1, c, rc = 1;
    enum dtrain_dtype dtype = DTRAIN_FLOAT32;
    enum dtrain_op op = DTRAIN_SUM;
    const char *transport = NULL;
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    char *hbuf = NULL;
    void *buf = NULL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:n:w:r:t:d:o:h", lo, NULL)) != -1) {
        switch (c) {
        case 's':
            if (parse_range(optarg, &smin, &smax) < 0 || smin == 0 || smax > (4ull << 30)) {
                fprintf(stderr,
                        "dtrain bench allreduce: --size %s: expected SIZE or MIN..MAX "
                        "(e.g. 4K..256M, at most 4G)\n",
                        optarg);
                return 2;
            }
            break;
        case 'n':
        case 'w':
        case 'r': {
            int v = 0;
            const char *name = c == 'n' ? "iters" : c == 'w' ? "warmup" : "reps";
            if (kd_parse_int(optarg, &v) < 0 || v < (c == 'w' ? 0 : 1) || v > 1000000) {
                fprintf(stderr, "dtrain bench allreduce: --%s %s: expected a count\n", name,
                        optarg);
                return 2;
            }
            *(c == 'n' ? &iters : c == 'w' ? &warmup : &reps) = v;
            break;
        }
        case 't': transport = optarg; break;
        case 'd':
            if (dtrain_dtype_parse(optarg, &dtype) < 0) {
                fprintf(stderr,
                        "dtrain bench allreduce: --dtype %s: expected float32, float16, "
                        "bfloat16, float64, int32 or int64\n",
                        optarg);
                return 2;
            }
            break;
        case 'o':
            if (dtrain_op_parse(optarg, &op) < 0) {
                fprintf(stderr, "dtrain bench allreduce: --op %s: expected sum, avg, min or max\n",
                        optarg);
                return 2;
            }
            break;
        case 'h':
            printf(
                "usage: dtrain bench allreduce [--size 4K..256M] [--iters N] [--warmup N]\n"
                "       [--reps R] [--transport auto|tcp|shm|nccl] [--dtype float32] [--op sum]\n"
                "Latency is the mean over the iterations; with --reps R the iterations run\n"
                "as R timed groups and the fastest group is reported.\n");
            return 0;
        default: return 2;
        }
    }
    struct dtrain_opts o;
    if (dtrain_opts_from_env(&o, err) < 0) {
        fprintf(stderr, "dtrain bench allreduce: %s\n", err);
        return 1;
    }
    if (transport != NULL && dtrain_transport_parse(transport, &o.transport) < 0) {
        fprintf(stderr,
                "dtrain bench allreduce: --transport %s: expected auto, tcp, shm or "
                "nccl\n",
                transport);
        return 2;
    }
    if (dtrain_init_opts(&o, &h, err) < 0) {
        fprintf(stderr, "dtrain bench allreduce: init: %s\n", err);
        return 1;
    }
    size_t es = dtrain_dtype_size(dtype);
    bool dev = strcmp(dtrain_transport_name(h), "nccl") == 0;
    hbuf = calloc(1, (size_t)smax + es);
    if (hbuf == NULL ||
        (dev ? dtrain_dev_malloc(h, (size_t)smax + es, &buf) < 0 : (buf = hbuf, 0))) {
        fprintf(stderr, "dtrain bench allreduce: cannot allocate %llu bytes\n",
                (unsigned long long)smax);
        goto out;
    }
    if (dev && dtrain_dev_memcpy(h, buf, hbuf, (size_t)smax, 1) < 0)
        goto fail;
    int rank = dtrain_rank(h);
    if (rank == 0) {
        printf(
            "# dtrain allreduce: %d ranks, transport %s, dtype %s, op %s\n", dtrain_world_size(h),
            dtrain_transport_name(h),
            (const char *[]){"float32", "float16", "bfloat16", "float64", "int32", "int64"}[dtype],
            (const char *[]){"sum", "avg", "min", "max"}[op]);
        printf("%10s %8s %14s %14s\n", "size", "iters", "latency_us", "algbw_GBps");
        fflush(stdout);
    }
    for (uint64_t size = smin; size <= smax; size *= 2) {
        size_t count = (size_t)(size / es);
        int n = iters;
        if (n == 0) {
            uint64_t x = BENCH_BYTES_PER_SIZE / size;
            n = x < 5 ? 5 : x > 500 ? 500 : (int)x;
        }
        for (int i = 0; i < warmup; i++)
            if (dtrain_allreduce(h, buf, count, dtype, op) < 0)
                goto fail;
        /* Best of `reps` timed runs of n/reps iterations each (1: one run of n). */
        int per = n / reps > 0 ? n / reps : 1;
        double secs = 0;
        for (int k = 0; k < reps; k++) {
            if (dtrain_barrier(h) < 0)
                goto fail;
            int64_t t0 = kd_mono_ns();
            for (int i = 0; i < per; i++)
                if (dtrain_allreduce(h, buf, count, dtype, op) < 0)
                    goto fail;
            if (dtrain_barrier(h) < 0)
                goto fail;
            double t = (double)(kd_mono_ns() - t0) / 1e9 / per;
            secs = k == 0 || t < secs ? t : secs;
        }
        n = per * reps;
        if (rank == 0) {
            char hs[32];
            human(size, hs, sizeof(hs));
            printf("%10s %8d %14.1f %14.3f\n", hs, n, secs * 1e6, (double)size / secs / 1e9);
            fflush(stdout);
        }
        if (size > smax / 2)
            break;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "dtrain bench allreduce: rank %d: %s\n", dtrain_rank(h), dtrain_errmsg(h));
out:
    if (dev && buf != NULL)
        dtrain_dev_free(h, buf);
    free(hbuf);
    int frc = dtrain_finalize(h);
    if (frc < 0 && rc == 0)
        rc = 1;
    return rc;
}
