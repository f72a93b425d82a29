/*
 * libdtrain in one process: float16/bfloat16 conversions against known bit
 * patterns, the reduction and copy kernels, the transports' plan functions
 * (tables of cases), the env contract's error messages, hyperparameter
 * accessors, argument checks and world-size-1 collectives.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../dtrain/src/internal.h"
#include "dtrain.h"

static void test_half_conversions(void **s)
{
    (void)s;
    assert_int_equal(dt_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(dt_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(dt_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(dt_f32_to_f16(1e6f), 0x7c00); /* overflow to inf */
    assert_int_equal(dt_f32_to_f16(1.0f / 3.0f), 0x3555);
    assert_int_equal(dt_f32_to_f16(5.960464477539063e-08f), 0x0001); /* smallest subnormal */
    assert_int_equal(dt_f32_to_f16(0.0f), 0x0000);
    assert_true(dt_f16_to_f32(0x3555) > 0.3332f && dt_f16_to_f32(0x3555) < 0.3335f);
    assert_true(dt_f16_to_f32(0x0001) == 5.960464477539063e-08f);
    assert_true(isnan(dt_f16_to_f32(dt_f32_to_f16(NAN))));
    assert_int_equal(dt_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(dt_f32_to_bf16(-3.0f), 0xc040);
    assert_int_equal(dt_f32_to_bf16(1.00390625f), 0x3f80); /* tie rounds to even */
    assert_int_equal(dt_f32_to_bf16(1.01171875f), 0x3f82); /* tie rounds to even (up) */
    assert_true(dt_bf16_to_f32(0x4049) == 3.140625f);
    for (int i = -2048; i <= 2048; i++) /* integers up to 2048 are exact in half */
        assert_true(dt_f16_to_f32(dt_f32_to_f16((float)i)) == (float)i);
}

static void test_reduce_kernels(void **s)
{
    (void)s;
    float a[5] = {1, -2, 3, 4, 5}, b[5] = {10, 20, -30, 40, 50};
    dt_reduce(a, b, 5, DTRAIN_FLOAT32, DTRAIN_SUM);
    assert_true(a[0] == 11 && a[1] == 18 && a[2] == -27 && a[4] == 55);
    int64_t x[3] = {5, -7, INT64_MAX}, y[3] = {-5, 9, 1};
    dt_reduce(x, y, 3, DTRAIN_INT64, DTRAIN_MIN);
    assert_true(x[0] == -5 && x[1] == -7 && x[2] == 1);
    int32_t p[3] = {1, 2, 3}, q[3] = {3, 2, 1}, r[3] = {0, 5, 0};
    const void *srcs[3] = {p, q, r};
    int32_t out[3];
    dt_reduce_multi(out, srcs, 3, 3, DTRAIN_INT32, DTRAIN_MAX);
    assert_true(out[0] == 3 && out[1] == 5 && out[2] == 3);
    dt_reduce_multi(out, srcs, 3, 3, DTRAIN_INT32, DTRAIN_SUM);
    assert_true(out[0] == 4 && out[1] == 9 && out[2] == 4);
    uint16_t h1[2] = {dt_f32_to_bf16(1.5f), dt_f32_to_bf16(-4)};
    uint16_t h2[2] = {dt_f32_to_bf16(2.25f), dt_f32_to_bf16(8)};
    dt_reduce(h1, h2, 2, DTRAIN_BFLOAT16, DTRAIN_SUM);
    assert_true(dt_bf16_to_f32(h1[0]) == 3.75f && dt_bf16_to_f32(h1[1]) == 4.0f);
    double d[2] = {3, -9};
    dt_scale_avg(d, 2, DTRAIN_FLOAT64, 3);
    assert_true(d[0] == 1.0 && d[1] == -3.0);
}

/* Both ways of dt_copy (memcpy and the vector loop), whatever this CPU's own choice. */
static void test_copy_any_alignment(void **s)
{
    (void)s;
    static unsigned char src[8192 + 64], dst[8192 + 64], want[8192 + 64];
    const size_t lens[] = {0, 1, 15, 16, 17, 255, 4096, 4096 + 7};
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (unsigned char)(i * 31 + 7);
    for (int mode = 0; mode < 2; mode++) {
        dt_copy_set(mode);
        for (int so = 0; so < 32; so += 3)
            for (int d = 0; d < 32; d += 5)
                for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
                    memset(dst, 0xee, sizeof(dst));
                    memcpy(want, dst, sizeof(dst));
                    memcpy(want + d, src + so, lens[k]);
                    dt_copy(dst + d, src + so, lens[k]);
                    if (memcmp(dst, want, sizeof(dst)) != 0)
                        fail_msg("%s: %zu bytes from offset %d to %d", mode ? "loop" : "memcpy",
                                 lens[k], so, d);
                }
    }
    assert_int_equal(dt_copy_set(-1), 1); /* the last one set; now the CPU decides again */
}

/* dst != srcs[0]: the first two sources fold straight into dst, in order. */
static void test_reduce_multi_three_operand(void **s)
{
    (void)s;
    int32_t a[5] = {INT32_MAX, -3, 7, 0, 9}, b[5] = {1, 4, -7, 0, 9}, c[5] = {0, 1, 1, 5, -20};
    int32_t out[5];
    const void *src3[3] = {a, b, c};
    dt_reduce_multi(out, src3, 3, 5, DTRAIN_INT32, DTRAIN_SUM);
    assert_int_equal(out[0], INT32_MIN); /* wraps, no UB */
    assert_true(out[1] == 2 && out[2] == 1 && out[3] == 5 && out[4] == -2);
    dt_reduce_multi(out, src3, 3, 5, DTRAIN_INT32, DTRAIN_MIN);
    assert_true(out[0] == 0 && out[1] == -3 && out[2] == -7 && out[4] == -20);
    dt_reduce_multi(out, src3, 2, 5, DTRAIN_INT32, DTRAIN_MAX);
    assert_true(out[0] == INT32_MAX && out[1] == 4 && out[2] == 7);
    int64_t x[3] = {INT64_MAX, 5, -5}, y[3] = {1, -6, 6};
    int64_t o64[3];
    const void *s64[2] = {x, y};
    dt_reduce_multi(o64, s64, 2, 3, DTRAIN_INT64, DTRAIN_SUM);
    assert_true(o64[0] == INT64_MIN && o64[1] == -1 && o64[2] == 1);
    /* Source order decides ties: min(+0, -0) is +0, min(-0, +0) is -0. */
    float pz[1] = {0.0f}, nz[1] = {-0.0f}, of[1];
    const void *pn[2] = {pz, nz}, *np[2] = {nz, pz};
    dt_reduce_multi(of, pn, 2, 1, DTRAIN_FLOAT32, DTRAIN_MIN);
    assert_false(signbit(of[0]));
    dt_reduce_multi(of, np, 2, 1, DTRAIN_FLOAT32, DTRAIN_MIN);
    assert_true(signbit(of[0]));
    /* Long enough to cross the kernel's blocks; one source copies. */
    enum { N = 5000 };
    static double d0[N], d1[N], d2[N], od[N];
    for (int i = 0; i < N; i++) {
        d0[i] = i * 0.5;
        d1[i] = -i;
        d2[i] = 3;
    }
    const void *sd[3] = {d0, d1, d2};
    dt_reduce_multi(od, sd, 3, N, DTRAIN_FLOAT64, DTRAIN_SUM);
    for (int i = 0; i < N; i++)
        assert_true(od[i] == i * 0.5 - i + 3);
    dt_reduce_multi(od, sd, 3, N, DTRAIN_FLOAT64, DTRAIN_MAX);
    assert_true(od[0] == 3 && od[10] == 5 && od[N - 1] == (N - 1) * 0.5);
    dt_reduce_multi(od, sd + 1, 1, N, DTRAIN_FLOAT64, DTRAIN_SUM);
    assert_memory_equal(od, d1, sizeof(od));
}

#define KIB(n) ((size_t)(n) << 10)
#define MIB(n) ((size_t)(n) << 20)

/*
 * The half-precision sums' block loops give the bits of the element-by-element rule
 * (widen, add in rank order in float32, round once; pairwise: round each add; average:
 * divide, round), NaN, infinities, subnormals and ties included, with the destination
 * aliasing a source. Both bfloat16 and float16.
 */
static bool half_nan(uint16_t h, bool bf)
{
    return bf ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u;
}

/* Equal bits, except that a NaN's sign is whichever operand's the hardware kept. */
static void half_equal(const uint16_t *got, const uint16_t *want, size_t n, bool bf,
                       const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && !(half_nan(got[i], bf) && half_nan(want[i], bf) &&
                                   (got[i] & 0x7fffu) == (want[i] & 0x7fffu)))
            fail_msg("%s %s [%zu]: got %04x, element rule %04x", bf ? "bfloat16" : "float16", what,
                     i, got[i], want[i]);
}

/*
 * The half-precision paths a test runs: the portable loops, and each level of the CPU's
 * instructions it has (AVX2 and F16C; the AVX-512 sums); each with the default
 * floating-point modes and with flush-to-zero and denormals-are-zero set (MXCSR on x86-64),
 * which must not change a bit.
 */
static int half_paths(void)
{
    int levels = dt_half_hw_set(-1) + 1;
    static bool told;
    if (!told) {
        print_message("half-precision paths on this CPU: %d (0: portable, 1: AVX2/F16C, "
                      "2: AVX-512)\n",
                      levels);
        told = true;
    }
#if defined(__x86_64__)
    return 2 * levels;
#else
    return levels;
#endif
}

/* Run fn on every path of half_paths(); the floating-point modes are put back after. */
static void on_each_half_path(void (*fn)(void))
{
#if defined(__x86_64__)
    unsigned saved;
    __asm__ volatile("stmxcsr %0" : "=m"(saved));
#endif
    for (int path = 0; path < half_paths(); path++) {
        dt_half_hw_set(path / 2);
#if defined(__x86_64__)
        unsigned csr = path % 2 ? saved | 0x8040u : saved & ~0x8040u; /* FTZ | DAZ */
        __asm__ volatile("ldmxcsr %0" : : "m"(csr));
#endif
        fn();
    }
#if defined(__x86_64__)
    __asm__ volatile("ldmxcsr %0" : : "m"(saved));
#endif
    dt_half_hw_set(-1);
}

static void half_sum_bits_once(void);

static void test_half_sum_bits(void **s)
{
    (void)s;
    on_each_half_path(half_sum_bits_once);
}

static void half_sum_bits_once(void)
{
    enum { N = 1003, SRC = 3 }; /* not a multiple of a vector's lanes: the tails run too */
    static uint16_t in[SRC][N], want_multi[N], want_pair[N], want_avg[N], got[N];
    static const uint16_t special_bf[] = {0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x0001, 0x8001,
                                          0x0000, 0x8000, 0x7f7f, 0x3f81, 0xbf80, 0x4000};
    static const uint16_t special_f16[] = {0x7e00, 0xfe01, 0x7c00, 0xfc00, 0x0001, 0x8001,
                                           0x0000, 0x8000, 0x7bff, 0x3c01, 0xbc00, 0x03ff};
    for (int bf = 0; bf <= 1; bf++) {
        enum dtrain_dtype t = bf ? DTRAIN_BFLOAT16 : DTRAIN_FLOAT16;
        const uint16_t *special = bf ? special_bf : special_f16;
        float (*widen)(uint16_t) = bf ? dt_bf16_to_f32 : dt_f16_to_f32;
        uint16_t (*narrow)(float) = bf ? dt_f32_to_bf16 : dt_f32_to_f16;
        uint32_t x = 2463534242u;
        for (int k = 0; k < SRC; k++)
            for (int i = 0; i < N; i++) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                in[k][i] = i % 50 < 12 && k == i % 3 ? special[i % 50] : (uint16_t)x;
                /* A stretch of subnormals and zeros of either sign in every source: their
                 * bfloat16 sums are subnormal float32, which VCVTNE2PS2BF16 takes as zero */
                if (i >= 640 && i < 704)
                    in[k][i] = (uint16_t)(x & 0x807fu);
            }
        for (int i = 0; i < N; i++) {
            float m = widen(in[0][i]);
            for (int k = 1; k < SRC; k++)
                m += widen(in[k][i]);
            want_multi[i] = narrow(m);
            want_pair[i] = narrow(widen(in[0][i]) + widen(in[1][i]));
            want_avg[i] = narrow(widen(in[0][i]) / 3.0f);
        }
        const void *srcs[SRC] = {in[0], in[1], in[2]};
        for (enum dtrain_op op = DTRAIN_SUM; op <= DTRAIN_AVG; op++) {
            dt_reduce_multi(got, srcs, SRC, N, t, op);
            half_equal(got, want_multi, N, bf, "sum");
            memcpy(got, in[0], sizeof(got));
            dt_reduce(got, in[1], N, t, op);
            half_equal(got, want_pair, N, bf, "pairwise sum");
            dt_reduce_multi(got, srcs, 2, N, t, op);
            half_equal(got, want_pair, N, bf, "sum of two");
            /* In place: the destination is the first source. */
            memcpy(got, in[0], sizeof(got));
            const void *alias[SRC] = {got, in[1], in[2]};
            dt_reduce_multi(got, alias, SRC, N, t, op);
            half_equal(got, want_multi, N, bf, "sum in place");
        }
        memcpy(got, in[0], sizeof(got));
        dt_scale_avg(got, N, t, 3);
        half_equal(got, want_avg, N, bf, "average");
    }
}

/* Checks n float32 values through the block conversion against dt_f32_to_f16. */
static void narrow_check(const uint32_t *bits, size_t n)
{
    static float f[4096];
    static uint16_t got[4096];
    assert_true(n <= 4096);
    memcpy(f, bits, n * 4);
    dt_half_narrow(got, f, n, false);
    for (size_t i = 0; i < n; i++)
        if (got[i] != dt_f32_to_f16(f[i]))
            fail_msg("float32 %08x: block %04x, element rule %04x", bits[i], got[i],
                     dt_f32_to_f16(f[i]));
}

/*
 * The float16 block conversions against the element functions: every float16 value
 * widened; narrowed, every float32 whose rounding matters (each exponent from below the
 * subnormals to past the largest float16, every kept mantissa with the round bit, with no,
 * one and all sticky bits), infinities, NaNs, and random values.
 */
static void f16_block_bits_once(void);

static void test_f16_block_bits(void **s)
{
    (void)s;
    on_each_half_path(f16_block_bits_once);
}

static void f16_block_bits_once(void)
{
    static uint16_t h[65536];
    static float w[65536];
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    dt_half_widen(w, h, 65536, false);
    for (int i = 0; i < 65536; i++) {
        float e = dt_f16_to_f32((uint16_t)i);
        if (memcmp(&w[i], &e, 4) != 0)
            fail_msg("float16 %04x widened differently", i);
    }
    static uint32_t b[4096];
    size_t n = 0;
    for (uint32_t sign = 0; sign <= 1; sign++)
        for (uint32_t exp = 100; exp <= 145; exp++)
            for (uint32_t top = 0; top < 4096; top++) {
                /* top: mantissa bits 22..11 (kept bits, round bit and the first sticky
                 * bit for every exponent that rounds to a float16) */
                static const uint32_t low[] = {0, 1, 0x7ff};
                for (int l = 0; l < 3; l++) {
                    b[n++] = sign << 31 | exp << 23 | top << 11 | low[l];
                    if (n == 4096) {
                        narrow_check(b, n);
                        n = 0;
                    }
                }
            }
    static const uint32_t special[] = {0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001,
                                       0x7f800001, 0x00000001, 0x80000000, 0x477fefff,
                                       0x477ff000, 0x477fffff, 0x47800000, 0x38800000,
                                       0x387fffff, 0x33000000, 0x33000001, 0x7f7fffff};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        b[n++] = special[i];
    narrow_check(b, n);
    uint32_t x = 88172645u;
    for (int r = 0; r < 256; r++) {
        for (int i = 0; i < 4096; i++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            b[i] = x;
        }
        narrow_check(b, 4096);
    }
}

static void test_shm_plan_table(void **s)
{
    (void)s;
    static const struct {
        size_t bytes;
        int world;
        size_t slot;
        enum dt_shm_algo algo;
        size_t chunk;
        bool cma, oversub;
    } cases[] = {
        /* Two ranks: flat below 4 KiB, then halves in chunks of up to 512 KiB. */
        {4, 2, MIB(1), DT_SHM_FLAT, KIB(256), false, false},
        {KIB(4) - 4, 2, MIB(1), DT_SHM_FLAT, KIB(256), false, false},
        {KIB(4), 2, MIB(1), DT_SHM_HALF, KIB(512), false, false},
        {KIB(16), 2, MIB(1), DT_SHM_HALF, KIB(512), false, false},
        {MIB(256), 2, MIB(1), DT_SHM_HALF, KIB(512), false, false},
        {MIB(1), 2, KIB(64), DT_SHM_HALF, KIB(64), false, false},  /* the slot caps the chunk */
        {KIB(96), 3, MIB(1), DT_SHM_FLAT, KIB(256), false, false}, /* 2 x 96 KiB of peer data */
        {KIB(96) + 4, 3, MIB(1), DT_SHM_SPLIT, KIB(256), false, false},
        {KIB(64), 4, MIB(1), DT_SHM_FLAT, KIB(256), false, false},
        {KIB(64) + 4, 4, MIB(1), DT_SHM_SPLIT, KIB(256), false, false},
        {MIB(4), 8, MIB(1), DT_SHM_SPLIT, KIB(512), false, false},    /* 64 KiB per rank's share */
        {MIB(4), 64, KIB(256), DT_SHM_SPLIT, KIB(256), false, false}, /* the slot caps the chunk */
        {KIB(8), 2, KIB(16), DT_SHM_HALF, KIB(16), false, false},     /* DTRAIN_SHM_SLOT=16KiB */
        {KIB(2), 2, KIB(16), DT_SHM_FLAT, KIB(16), false, false},
        {MIB(1), 3, KIB(16), DT_SHM_SPLIT, KIB(16), false, false},
        {MIB(1), 8, KIB(64), DT_SHM_SPLIT, KIB(64), false, false},
        /* More ranks than cores: reduce-scatter in whole slots. */
        {KIB(64), 4, MIB(1), DT_SHM_FLAT, KIB(256), false, true},
        {KIB(64) + 4, 4, MIB(1), DT_SHM_SPLIT, MIB(1), false, true},
        {MIB(1), 3, KIB(16), DT_SHM_SPLIT, KIB(16), false, true},
        {MIB(256), 2, MIB(1), DT_SHM_HALF, KIB(512), false, true},
        /* The ranks may read each other's memory: 2 ranks from 512 KiB, straight from the
         * peer's buffer; more ranks never (they would contend for the same pages). */
        {KIB(512) - 4, 2, MIB(1), DT_SHM_HALF, KIB(512), true, false},
        {KIB(4) - 4, 2, MIB(1), DT_SHM_FLAT, KIB(256), true, false},
        {KIB(512), 2, MIB(1), DT_SHM_CMA, KIB(512), true, false},
        {MIB(256), 2, MIB(1), DT_SHM_CMA, KIB(512), true, false},
        {MIB(256), 2, MIB(1), DT_SHM_CMA, KIB(512), true, true},
        {KIB(512), 4, MIB(1), DT_SHM_SPLIT, KIB(256), true, false},
        {KIB(512), 4, MIB(1), DT_SHM_SPLIT, MIB(1), true, true},
        {MIB(4), 3, MIB(1), DT_SHM_SPLIT, KIB(256), true, false},
        {MIB(4), 64, KIB(256), DT_SHM_SPLIT, KIB(256), true, false},
        {MIB(4), 1, MIB(1), DT_SHM_FLAT, KIB(256), true, false}, /* alone: nothing to read */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dt_shm_plan p = dt_shm_plan(cases[i].bytes, cases[i].world, cases[i].slot,
                                           cases[i].cma, cases[i].oversub);
        if (p.algo != cases[i].algo || p.chunk != cases[i].chunk)
            fail_msg("case %zu: %zu bytes, %d ranks, slot %zu: got algo %d chunk %zu", i,
                     cases[i].bytes, cases[i].world, cases[i].slot, (int)p.algo, p.chunk);
    }
}

static void test_tcp_plan_table(void **s)
{
    (void)s;
    static const struct {
        size_t bytes;
        int world;
        enum dt_tcp_algo algo;
    } cases[] = {
        {0, 2, DT_TCP_RING},
        {4, 2, DT_TCP_GATHER},
        {KIB(512), 2, DT_TCP_GATHER}, /* two ranks: the gather buffer is the limit */
        {KIB(512) + 4, 2, DT_TCP_RING},
        {KIB(128), 3, DT_TCP_GATHER},
        {KIB(128) + 4, 3, DT_TCP_RING},
        {4, 4, DT_TCP_PAIRS}, /* four ranks: recursive doubling over the ring's connections */
        {KIB(64), 4, DT_TCP_PAIRS},
        {KIB(256), 4, DT_TCP_PAIRS},
        {KIB(256) + 4, 4, DT_TCP_RING},
        {0, 4, DT_TCP_RING},
        {43688, 5, DT_TCP_GATHER}, /* 5 ranks: 3 extra buffers, at most 128 KiB in all */
        {43692, 5, DT_TCP_RING},
        {KIB(16), 8, DT_TCP_GATHER},
        {KIB(1), 1024, DT_TCP_RING}, /* fits the buffer, but 1022 extra copies */
        {KIB(4), 1, DT_TCP_RING},
    };
    /* working around rep movsb: tcp's staging buffer (the kernel's copies) on AMD Zen 3,
     * dt_copy's loop on AMD family 0x19 (Zen 3 and Zen 4), unless forced (DTRAIN_TCP_STAGE,
     * DTRAIN_COPY_LOOP) */
    static const struct {
        struct dt_cpu cpu;
        bool kernel;
        int force;
        bool want;
    } movsb[] = {
        {{true, 0x19, 0x01}, true, -1, true}, /* Zen 3 (Milan) */
        {{true, 0x19, 0x01}, false, -1, true},
        {{true, 0x19, 0x21}, true, -1, true},  /* Zen 3 (Vermeer) */
        {{true, 0x19, 0x50}, true, -1, true},  /* Zen 3 (Cezanne) */
        {{true, 0x19, 0x11}, true, -1, false}, /* Zen 4 (Genoa): the kernel's copies direct */
        {{true, 0x19, 0x11}, false, -1, true}, /* ...and dt_copy the loop */
        {{true, 0x19, 0x61}, true, -1, false}, /* Zen 4 (Raphael) */
        {{true, 0x19, 0x74}, true, -1, false}, /* Zen 4 (Phoenix) */
        {{true, 0x19, 0xa0}, true, -1, false}, /* Zen 4 (Bergamo) */
        {{true, 0x19, 0x0f}, true, -1, true},
        {{true, 0x19, 0x20}, true, -1, true},
        {{true, 0x19, 0x5f}, true, -1, true},
        {{true, 0x1a, 0x02}, true, -1, false}, /* Zen 5 */
        {{true, 0x1a, 0x02}, false, -1, false},
        {{false, 0x19, 0x01}, false, -1, false}, /* the same numbers elsewhere */
        {{false, 6, 0x55}, true, -1, false},
        {{false, 6, 0x55}, true, 1, true},
        {{true, 0x19, 0x01}, false, 0, false},
        {{true, 0x19, 0x11}, true, 1, true},
    };
    for (size_t i = 0; i < sizeof(movsb) / sizeof(movsb[0]); i++)
        if (dt_avoid_movsb(movsb[i].cpu, movsb[i].kernel, movsb[i].force) != movsb[i].want)
            fail_msg("movsb case %zu: family 0x%x model 0x%x kernel %d force %d: want %d", i,
                     movsb[i].cpu.family, movsb[i].cpu.model, movsb[i].kernel, movsb[i].force,
                     movsb[i].want);
    /* send buffers: small towards a peer on this host, unless DTRAIN_SOCKET_BUFFER decides */
    assert_int_equal(dt_tcp_sndbuf(true, false), 256 << 10);
    assert_int_equal(dt_tcp_sndbuf(false, false), 0);
    assert_int_equal(dt_tcp_sndbuf(true, true), 0);
    assert_int_equal(dt_tcp_sndbuf(false, true), 0);
    /* sends in pieces only where the send buffer stays large */
    assert_int_equal(dt_tcp_send_max(256 << 10, 0), 256 << 10);
    assert_int_equal(dt_tcp_send_max(256 << 10, 256 << 10), 0);
    assert_int_equal(dt_tcp_send_max(0, 0), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum dt_tcp_algo a = dt_tcp_plan(cases[i].bytes, cases[i].world);
        if (a != cases[i].algo)
            fail_msg("case %zu: %zu bytes, %d ranks: got %d", i, cases[i].bytes, cases[i].world,
                     (int)a);
    }
}

/* 2 ranks from 512 KiB: which calls try which algorithm, when results are published and
 * the choice made, and how the choice goes. */
static void test_pick_table(void **s)
{
    (void)s;
    static const struct {
        uint64_t k;
        int try_direct;
        bool record, publish, decide;
    } turns[] = {
        {0, 1, true, false, false}, /* direct first: the first large call asks whether it may */
        {1, 0, true, false, false},
        {4, 1, true, false, false},
        {5, 0, true, true, false},   /* the last trial publishes */
        {6, 1, false, false, false}, /* untimed: the peer's results are known to be out after it */
        {7, -1, false, false, true},
        {8, -1, false, false, false},
        {DT_PICK_EPOCH - 1, -1, false, false, false},
        {DT_PICK_EPOCH, 1, true, false, false}, /* the next epoch tries again */
        {DT_PICK_EPOCH + 5, 0, true, true, false},
        {DT_PICK_EPOCH + 7, -1, false, false, true},
    };
    for (size_t i = 0; i < sizeof(turns) / sizeof(turns[0]); i++) {
        struct dt_pick_turn t = dt_pick_turn(turns[i].k);
        if (t.try_direct != turns[i].try_direct || t.record != turns[i].record ||
            t.publish != turns[i].publish || t.decide != turns[i].decide)
            fail_msg("call %llu: try %d record %d publish %d decide %d",
                     (unsigned long long)turns[i].k, t.try_direct, t.record, t.publish, t.decide);
    }
    static const struct {
        size_t bytes;
        enum dtrain_dtype dtype;
        unsigned cls;
    } classes[] = {
        {KIB(512), DTRAIN_FLOAT32, 0},
        {MIB(1) - 4, DTRAIN_FLOAT32, 0},
        {MIB(1), DTRAIN_FLOAT32, 1},
        {MIB(2) - 4, DTRAIN_FLOAT32, 1},
        {MIB(2), DTRAIN_FLOAT32, 2},
        {MIB(256), DTRAIN_FLOAT32, 9},
        {MIB(1024), DTRAIN_FLOAT32, 11},
        {(size_t)1 << 40, DTRAIN_FLOAT32, 11},
        /* each data type has its own classes: they reduce at different speeds */
        {KIB(512), DTRAIN_FLOAT16, DT_PICK_SIZES},
        {MIB(2), DTRAIN_BFLOAT16, 2 * DT_PICK_SIZES + 2},
        {(size_t)1 << 40, DTRAIN_INT64, DT_PICK_CLASSES - 1},
    };
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
        unsigned c = dt_pick_class(classes[i].bytes, classes[i].dtype);
        if (c != classes[i].cls)
            fail_msg("%zu bytes of dtype %d: class %u, want %u", classes[i].bytes,
                     (int)classes[i].dtype, c, classes[i].cls);
    }
    static const struct {
        uint64_t a[2], b[2];
        bool direct;
    } picks[] = {
        {{100, 90}, {100, 90}, true},
        {{100, 110}, {100, 90}, false},        /* the slower rank decides: 110 against 100 */
        {{80, 90}, {100, 95}, true},           /* 95 against 100 */
        {{100, 100}, {100, 100}, false},       /* a tie keeps the slots: no system calls */
        {{100, UINT64_MAX}, {100, 90}, false}, /* not measured on one rank: not chosen */
        {{UINT64_MAX, 90}, {100, 90}, true},
    };
    for (size_t i = 0; i < sizeof(picks) / sizeof(picks[0]); i++) {
        if (dt_pick_direct(picks[i].a, picks[i].b) != picks[i].direct ||
            dt_pick_direct(picks[i].b, picks[i].a) != picks[i].direct)
            fail_msg("case %zu: direct should be %d, on both ranks", i, picks[i].direct);
    }
}

static void test_wait_policy_table(void **s)
{
    (void)s;
    static const struct {
        long ncpu;
        int ranks;
        int64_t spin_ns, yield_ns;
        size_t send_max;
        bool oversub;
    } cases[] = {
        {2, 2, 50000, 50000, 256 << 10, false}, {16, 8, 50000, 50000, 256 << 10, false},
        {2, 4, 5000, 50000, 0, true}, /* oversubscribed: spin little, send all that fits */
        {1, 2, 5000, 50000, 0, true},           {1, 1, 50000, 50000, 256 << 10, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dt_wait_policy w = dt_wait_policy(cases[i].ncpu, cases[i].ranks);
        if (w.spin_ns != cases[i].spin_ns || w.yield_ns != cases[i].yield_ns ||
            w.send_max != cases[i].send_max || w.oversub != cases[i].oversub)
            fail_msg("case %zu: %ld cpus, %d ranks: spin %lld yield %lld send_max %zu", i,
                     cases[i].ncpu, cases[i].ranks, (long long)w.spin_ns, (long long)w.yield_ns,
                     w.send_max);
    }
}

static void test_env_errors_name_the_variable(void **s)
{
    (void)s;
    struct dtrain_opts o;
    char err[DTRAIN_ERRLEN];
    setenv("WORLD_SIZE", "2", 1);
    unsetenv("RANK");
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "RANK is not set"));
    setenv("RANK", "2", 1);
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "RANK=2"));
    setenv("RANK", "1", 1);
    unsetenv("MASTER_PORT");
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "MASTER_PORT"));
    setenv("MASTER_PORT", "70000", 1);
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "MASTER_PORT=70000"));
    setenv("MASTER_PORT", "29500", 1);
    unsetenv("MASTER_ADDR");
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "MASTER_ADDR"));
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("DTRAIN_TRANSPORT", "infiniband", 1);
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "DTRAIN_TRANSPORT=infiniband"));
    setenv("DTRAIN_TRANSPORT", "tcp", 1);
    setenv("DTRAIN_FUSION_THRESHOLD", "lots", 1);
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "DTRAIN_FUSION_THRESHOLD"));
    setenv("DTRAIN_FUSION_THRESHOLD", "8MiB", 1);
    setenv("KDET_TRIAL_SEED", "12x", 1);
    assert_int_equal(dtrain_opts_from_env(&o, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "KDET_TRIAL_SEED"));
    setenv("KDET_TRIAL_SEED", "-42", 1);
    assert_int_equal(dtrain_opts_from_env(&o, err), 0);
    assert_int_equal(o.rank, 1);
    assert_int_equal(o.world_size, 2);
    assert_int_equal(o.master_port, 29500);
    assert_string_equal(o.master_addr, "10.0.0.1");
    assert_int_equal(o.transport, DTRAIN_TRANSPORT_TCP);
    assert_int_equal(o.fusion_threshold, 8u << 20);
    assert_int_equal(o.trial_seed, -42);
    const char *vars[] = {"WORLD_SIZE",       "RANK",
                          "MASTER_PORT",      "MASTER_ADDR",
                          "DTRAIN_TRANSPORT", "DTRAIN_FUSION_THRESHOLD",
                          "KDET_TRIAL_SEED",  NULL};
    for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
}

static void test_hparams_and_world_one(void **s)
{
    (void)s;
    struct dtrain_opts o;
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    dtrain_opts_default(&o);
    o.hparams_json = "{\"learning_rate\": 0.01, \"hidden_units\": 64, \"name\": \"mlp\", "
                     "\"optimizer\": {\"momentum\": 0.9}, \"epochs\": 3.0}";
    o.token = "very-secret-token";
    assert_int_equal(dtrain_init_opts(&o, &h, err), 0);
    double lr = 0;
    int64_t hu = 0;
    const char *name = NULL;
    assert_int_equal(dtrain_hparam_double(h, "learning_rate", &lr), 0);
    assert_true(lr == 0.01);
    assert_int_equal(dtrain_hparam_int(h, "hidden_units", &hu), 0);
    assert_int_equal(hu, 64);
    assert_int_equal(dtrain_hparam_double(h, "hidden_units", &lr), 0); /* int -> double */
    assert_true(lr == 64.0);
    assert_int_equal(dtrain_hparam_int(h, "epochs", &hu), 0); /* 3.0 is an int */
    assert_int_equal(hu, 3);
    assert_int_equal(dtrain_hparam_int(h, "learning_rate", &hu), DTRAIN_EINVAL);
    assert_non_null(strstr(dtrain_errmsg(h), "learning_rate: expected an integer"));
    assert_int_equal(dtrain_hparam_string(h, "name", &name), 0);
    assert_string_equal(name, "mlp");
    assert_int_equal(dtrain_hparam_double(h, "optimizer.momentum", &lr), 0);
    assert_true(lr == 0.9);
    assert_int_equal(dtrain_hparam_double(h, "dropout", &lr), DTRAIN_ENOTFOUND);
    assert_non_null(strstr(dtrain_errmsg(h), "dropout"));
    assert_int_equal(dtrain_hparam_string(h, "hidden_units", &name), DTRAIN_EINVAL);
    assert_non_null(strstr(dtrain_errmsg(h), "expected a string, got an integer"));
    /* world size 1: collectives are local */
    float v[3] = {1, 2, 3};
    assert_int_equal(dtrain_allreduce(h, v, 3, DTRAIN_FLOAT32, DTRAIN_AVG), 0);
    assert_true(v[0] == 1 && v[2] == 3);
    float all[3];
    assert_int_equal(dtrain_allgather(h, v, all, 3, DTRAIN_FLOAT32), 0);
    assert_true(all[1] == 2);
    assert_int_equal(dtrain_broadcast(h, v, 3, DTRAIN_FLOAT32, 1), DTRAIN_EINVAL);
    assert_non_null(strstr(dtrain_errmsg(h), "root 1"));
    assert_int_equal(dtrain_allreduce(h, NULL, 3, DTRAIN_FLOAT32, DTRAIN_SUM), DTRAIN_EINVAL);
    assert_non_null(strstr(dtrain_errmsg(h), "NULL"));
    assert_int_equal(dtrain_allreduce(h, v, 3, (enum dtrain_dtype)42, DTRAIN_SUM), DTRAIN_EINVAL);
    assert_non_null(strstr(dtrain_errmsg(h), "dtype 42"));
    assert_int_equal(dtrain_barrier(h), 0);
    assert_string_equal(dtrain_transport_name(h), "local");
    assert_int_equal(dtrain_finalize(h), 0);

    o.hparams_json = "{\"lr\": }";
    assert_int_equal(dtrain_init_opts(&o, &h, err), DTRAIN_EPARSE);
    assert_non_null(strstr(err, "KDET_HPARAMS: line 1 column"));
    o.hparams_json = "[1]";
    assert_int_equal(dtrain_init_opts(&o, &h, err), DTRAIN_EPARSE);
    assert_non_null(strstr(err, "expected a JSON object"));
    o.hparams_json = NULL;
    o.rank = 3;
    o.world_size = 2;
    assert_int_equal(dtrain_init_opts(&o, &h, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "rank 3 out of range"));
}

static void test_nccl_absent_is_a_clear_error(void **s)
{
    (void)s;
    struct dtrain_opts o;
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN] = "";
    dtrain_opts_default(&o);
    o.transport = DTRAIN_TRANSPORT_NCCL;
    int rc = dtrain_init_opts(&o, &h, err);
    if (rc == 0) { /* a GPU machine: NCCL works */
        assert_string_equal(dtrain_transport_name(h), "nccl");
        assert_int_equal(dtrain_finalize(h), 0);
        return;
    }
    assert_int_equal(rc, DTRAIN_ENOTSUP);
    assert_non_null(strstr(err, "transport nccl"));
    assert_true(strstr(err, "libcudart") != NULL || strstr(err, "libnccl") != NULL ||
                strstr(err, "CUDA device") != NULL);
}

static void test_parsers(void **s)
{
    (void)s;
    enum dtrain_dtype t;
    enum dtrain_op op;
    assert_int_equal(dtrain_dtype_parse("bf16", &t), 0);
    assert_int_equal(t, DTRAIN_BFLOAT16);
    assert_int_equal(dtrain_dtype_parse("float8", &t), DTRAIN_EINVAL);
    assert_int_equal(dtrain_op_parse("MAX", &op), 0);
    assert_int_equal(op, DTRAIN_MAX);
    assert_int_equal(dtrain_op_parse("prod", &op), DTRAIN_EINVAL);
    assert_int_equal(dtrain_dtype_size(DTRAIN_INT64), 8);
    assert_int_equal(dtrain_dtype_size((enum dtrain_dtype)9), 0);
    assert_non_null(strstr(dtrain_strerror(DTRAIN_EPEER), "peer"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_reduce_kernels),
        cmocka_unit_test(test_copy_any_alignment),
        cmocka_unit_test(test_reduce_multi_three_operand),
        cmocka_unit_test(test_half_sum_bits),
        cmocka_unit_test(test_f16_block_bits),
        cmocka_unit_test(test_shm_plan_table),
        cmocka_unit_test(test_tcp_plan_table),
        cmocka_unit_test(test_wait_policy_table),
        cmocka_unit_test(test_pick_table),
        cmocka_unit_test(test_env_errors_name_the_variable),
        cmocka_unit_test(test_hparams_and_world_one),
        cmocka_unit_test(test_nccl_absent_is_a_clear_error),
        cmocka_unit_test(test_parsers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
