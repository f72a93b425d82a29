/*
 * Reduction and copy kernels for every dtype and op, and the
 * float16/bfloat16 conversions (half types are widened to float32, reduced,
 * and rounded back to nearest-even). The loops are written so the compiler
 * vectorizes them.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

uint16_t dt_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* inf or nan (keep nan quiet) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f)
        return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
    if (e <= 0) {                          /* subnormal or zero */
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        int shift = 14 - e;
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++; /* may carry into the exponent, which is right */
    return (uint16_t)half;
}

float dt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        x = sign | 0x7f800000u | (man << 13);
    } else {
        x = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t dt_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* nan stays nan */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float dt_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

#define OP_SUM(a, b) ((a) + (b))
#define OP_MIN(a, b) ((b) < (a) ? (b) : (a))
#define OP_MAX(a, b) ((b) > (a) ? (b) : (a))

#define DEF_REDUCE(name, T, OPX)                                                                   \
    static void name(T *restrict d, const T *restrict s, size_t n)                                 \
    {                                                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = OPX(d[i], s[i]);                                                                \
    }

/* d = a op b, into a third buffer: folds the first two sources without a copy. */
#define DEF_REDUCE3(name, T, OPX)                                                                  \
    static void name(T *restrict d, const T *restrict a, const T *restrict b, size_t n)            \
    {                                                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = OPX(a[i], b[i]);                                                                \
    }

/* Integer sums wrap like the hardware does (no UB): add as unsigned. */
#define OP_SUM32W(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define OP_SUM64W(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

#define DEF_ALL(T, sfx, SUM)                                                                       \
    DEF_REDUCE(sum_##sfx, T, SUM)                                                                  \
    DEF_REDUCE(min_##sfx, T, OP_MIN)                                                               \
    DEF_REDUCE(max_##sfx, T, OP_MAX)                                                               \
    DEF_REDUCE3(sum3_##sfx, T, SUM)                                                                \
    DEF_REDUCE3(min3_##sfx, T, OP_MIN)                                                             \
    DEF_REDUCE3(max3_##sfx, T, OP_MAX)

DEF_ALL(float, f32, OP_SUM)
DEF_ALL(double, f64, OP_SUM)
DEF_ALL(int32_t, i32, OP_SUM32W)
DEF_ALL(int64_t, i64, OP_SUM64W)

struct dt_cpu dt_cpu_id(void)
{
    struct dt_cpu cpu = {0};
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d))
        cpu.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" */
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        cpu.family = (a >> 8) & 0xf;
        cpu.model = (a >> 4) & 0xf;
        if (cpu.family == 0xf || cpu.family == 6)
            cpu.model |= ((a >> 16) & 0xf) << 4;
        if (cpu.family == 0xf)
            cpu.family += (a >> 20) & 0xff;
    }
#endif
    return cpu;
}

/*
 * glibc's memcpy copies 2 KiB .. a few hundred KiB with `rep movsb`, which
 * on AMD Zen 3 runs ten times slower when the destination lies just past the
 * source modulo 4 KiB (dst - src = 16: a malloc'd buffer against a
 * page-aligned slot), and on Zen 4 1.4 to 2.1 times. A plain vector loop does
 * not care, so there (dt_avoid_movsb) dt_copy is that loop; elsewhere it is memcpy, which on
 * Zen 5 copied shared-memory slots 1.7 to 1.8 times as fast from 16 to 512
 * KiB in a slow spell of the machine, and about 1.2 times from 256 KiB to
 * 4 MiB in a fast one (1 to 7% behind from 16 to 128 KiB there).
 */
typedef uint64_t dt_v16 __attribute__((vector_size(16), aligned(1), may_alias));

static _Atomic int copy_loop = -1; /* 0 memcpy, 1 the vector loop, -1 not decided yet */

int dt_copy_set(int mode)
{
    if (mode < 0) {
        mode = dt_avoid_movsb(dt_cpu_id(), false, dt_env_switch("DTRAIN_COPY_LOOP"));
    }
    return atomic_exchange_explicit(&copy_loop, mode != 0, memory_order_relaxed);
}

__attribute__((optimize("no-tree-loop-distribute-patterns"))) void
dt_copy(void *restrict dst, const void *restrict src, size_t bytes)
{
    int loop = atomic_load_explicit(&copy_loop, memory_order_relaxed);
    if (loop < 0) {
        dt_copy_set(-1);
        loop = atomic_load_explicit(&copy_loop, memory_order_relaxed);
    }
    if (!loop) {
        memcpy(dst, src, bytes);
        return;
    }
    dt_v16 *d = dst;
    const dt_v16 *s = src;
    size_t k = bytes / sizeof(dt_v16);
    for (size_t i = 0; i < k; i++)
        d[i] = s[i];
    if (bytes > k * sizeof(dt_v16))
        memcpy(d + k, s + k, bytes - k * sizeof(dt_v16));
}

/*
 * Half-precision sums and averages, the common case of gradients, run in
 * blocks: widen a block to float32, add the other sources into it, round
 * it back. The conversions below are written without branches so the
 * compiler turns the loops into vector code, and they give the bits of
 * dt_f16_to_f32 / dt_f32_to_f16 / dt_f32_to_bf16 exactly (under the default
 * round-to-nearest-even mode, which every float32 add here assumes too), so
 * ranks agree whichever path each one takes.
 */
#define HALF_BLK 256

/*
 * The block loops are also built for AVX2 (twice the lanes, per-lane shifts), chosen when
 * the process starts by what the CPU has. Only integer operations and float32 adds and
 * exact scalings run in them, so both builds give the same bits.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__gnu_linux__)
#define HALF_CLONES __attribute__((target_clones("default", "avx2")))
#else
#define HALF_CLONES
#endif

static inline float bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static inline float bf16_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t f32_bf16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t nan = (uint32_t)((x & 0x7fffffffu) > 0x7f800000u);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)(nan ? (x >> 16) | 0x40u : rounded);
}

static inline float f16_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    /* Subnormal: an integer count of 2^-24, converted exactly (no float32 subnormal on the
     * way, so flush-to-zero modes cannot change it). */
    uint32_t sub = f32_bits((float)(int32_t)em * 0x1p-24f);
    uint32_t norm = (em << 13) + ((127u - 15u) << 23);
    uint32_t infnan = (em << 13) | 0x7f800000u;
    /* Selected with masks, not branches, so that the loops vectorise. */
    uint32_t is_sub = 0u - (uint32_t)(em < 0x400u), is_top = 0u - (uint32_t)(em >= 0x7c00u);
    return bits_f32(sign | (sub & is_sub) | (infnan & is_top) | (norm & ~(is_sub | is_top)));
}

static inline uint16_t f32_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    /* Below 2^-14 the result is subnormal: scale to units of 2^-24 and round to an integer
     * (adding and taking away 2^23 rounds to nearest even). Only such values are scaled. */
    float t = bits_f32(a & (0u - (uint32_t)(a < 0x38800000u))) * 0x1p24f;
    t = (t + 0x1p23f) - 0x1p23f;
    uint32_t sub = (uint32_t)(int32_t)t;
    /* Normal: rebias the exponent and round the 13 bits dropped to nearest even; a carry
     * into the exponent is right, up to infinity. */
    uint32_t r = a - ((127u - 15u) << 23);
    uint32_t norm = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000u);
    uint32_t is_big = 0u - (uint32_t)(a >= 0x47800000u); /* infinity, NaN included */
    uint32_t is_norm = (0u - (uint32_t)(a >= 0x38800000u)) & ~is_big;
    uint32_t is_sub = ~(is_big | is_norm);
    uint32_t h = (0x7c00u & is_big) | (0x200u & is_nan) | (norm & is_norm) | (sub & is_sub);
    return (uint16_t)(sign | h);
}

HALF_CLONES static void half_widen_c(float *restrict d, const uint16_t *restrict s, size_t n,
                                     bool bf)
{
    if (bf)
        for (size_t i = 0; i < n; i++)
            d[i] = bf16_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++)
            d[i] = f16_f32(s[i]);
}

HALF_CLONES static void half_add_widened_c(float *restrict d, const uint16_t *restrict s, size_t n,
                                           bool bf)
{
    if (bf)
        for (size_t i = 0; i < n; i++)
            d[i] += bf16_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++)
            d[i] += f16_f32(s[i]);
}

HALF_CLONES static void half_narrow_c(uint16_t *restrict d, const float *restrict s, size_t n,
                                      bool bf)
{
    if (bf)
        for (size_t i = 0; i < n; i++)
            d[i] = f32_bf16(s[i]);
    else
        for (size_t i = 0; i < n; i++)
            d[i] = f32_f16(s[i]);
}

/*
 * float16 with the CPU's conversions (F16C, with AVX2 for the NaN fix-up): eight lanes per
 * instruction. They convert exactly and round to nearest even like the portable rule; only NaNs
 * differ (the hardware keeps payloads and quiets them), so NaN lanes are given the rule's bits.
 * test_dtrain_unit compares both paths with the rule, also with flush-to-zero and
 * denormals-are-zero set.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define HAVE_F16C_PATH 1

/* The NaN lanes of f16c_widen8, given the rule's bits (rare: kept out of the common path). */
__attribute__((target("avx2,f16c"), noinline)) static __m256 f16c_widen8_nan(__m128i h)
{
    __m256i x = _mm256_cvtepu16_epi32(h);
    __m256i em = _mm256_and_si256(x, _mm256_set1_epi32(0x7fff));
    __m256i nan = _mm256_cmpgt_epi32(em, _mm256_set1_epi32(0x7c00));
    __m256i rule = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16),
                        _mm256_set1_epi32(0x7f800000)),
        _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x3ff)), 13));
    return _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(rule),
                            _mm256_castsi256_ps(nan));
}

__attribute__((target("avx2,f16c"))) static inline __m256 f16c_widen8(const uint16_t *s)
{
    __m128i h = _mm_loadu_si128((const __m128i *)s);
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
    return __builtin_expect(_mm_testz_si128(nan, nan), 1) ? _mm256_cvtph_ps(h) : f16c_widen8_nan(h);
}

__attribute__((target("avx2,f16c"))) static void f16c_widen(float *d, const uint16_t *s, size_t n,
                                                            bool add)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 f = f16c_widen8(s + i);
        _mm256_storeu_ps(d + i, add ? _mm256_add_ps(_mm256_loadu_ps(d + i), f) : f);
    }
    for (; i < n; i++)
        d[i] = add ? d[i] + f16_f32(s[i]) : f16_f32(s[i]);
}

/* The NaN lanes of f16c_narrow8, given the rule's bits. */
__attribute__((target("avx2,f16c"), noinline)) static __m128i f16c_narrow8_nan(__m256 f)
{
    __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i x = _mm256_castps_si256(f);
    __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    __m256i rule =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000)),
                        _mm256_set1_epi32(0x7e00));
    /* 32-bit lanes to 16 (packs work within 128-bit halves; put the halves in order) */
    __m256i r16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(rule, rule), 0x08);
    __m256i m16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(nan, nan), 0x08);
    return _mm_blendv_epi8(h, _mm256_castsi256_si128(r16), _mm256_castsi256_si128(m16));
}

__attribute__((target("avx2,f16c"))) static inline __m128i f16c_narrow8(__m256 f)
{
    __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    return __builtin_expect(_mm256_testz_ps(nan, nan), 1)
               ? _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
               : f16c_narrow8_nan(f);
}

__attribute__((target("avx2,f16c"))) static void f16c_narrow(uint16_t *d, const float *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), f16c_narrow8(_mm256_loadu_ps(s + i)));
    for (; i < n; i++)
        d[i] = f32_f16(s[i]);
}

/* Elements i .. i + m of the sum by the rule: the vector loops' tails and rare cases. */
static void half_sum_rule(uint16_t *d, const void *const *srcs, int nsrc, size_t i, size_t m,
                          bool bf)
{
    for (size_t j = i; j < i + m; j++) {
        float acc =
            bf ? bf16_f32(((const uint16_t *)srcs[0])[j]) : f16_f32(((const uint16_t *)srcs[0])[j]);
        for (int k = 1; k < nsrc; k++)
            acc += bf ? bf16_f32(((const uint16_t *)srcs[k])[j])
                      : f16_f32(((const uint16_t *)srcs[k])[j]);
        d[j] = bf ? f32_bf16(acc) : f32_f16(acc);
    }
}

/*
 * d = round(sum in source order of srcs) in one pass: eight lanes are widened from every
 * source, added in float32 and narrowed, without a block buffer between. d may be srcs[0].
 */
__attribute__((target("avx2,f16c"))) static void f16c_sum(uint16_t *d, const void *const *srcs,
                                                          int nsrc, size_t n)
{
    const uint16_t *s0 = srcs[0], *s1 = nsrc > 1 ? srcs[1] : NULL;
    size_t i = 0;
    if (nsrc == 2) /* the common case, without the source loop: about 1.18x the loop below */
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(d + i),
                             f16c_narrow8(_mm256_add_ps(f16c_widen8(s0 + i), f16c_widen8(s1 + i))));
    for (; i + 8 <= n; i += 8) {
        __m256 acc = f16c_widen8(s0 + i);
        for (int k = 1; k < nsrc; k++)
            acc = _mm256_add_ps(acc, f16c_widen8((const uint16_t *)srcs[k] + i));
        _mm_storeu_si128((__m128i *)(d + i), f16c_narrow8(acc));
    }
    half_sum_rule(d, srcs, nsrc, i, n - i, false);
}
/*
 * bfloat16 sums with AVX2, in one pass like f16c_sum: widening is a shift, and narrowing
 * the portable rule's integer steps on eight lanes at once (round to nearest even; a NaN
 * keeps its top bits and is made quiet), so the bits are the portable loops' exactly.
 */
__attribute__((target("avx2"))) static inline __m256 bf16_widen8(const uint16_t *s)
{
    __m128i h = _mm_loadu_si128((const __m128i *)s);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2"))) static inline __m128i bf16_narrow8(__m256 f)
{
    __m256i x = _mm256_castps_si256(f);
    __m256i top = _mm256_srli_epi32(x, 16);
    __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i v = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, _mm256_set1_epi32(0x40)), nan);
    /* 32-bit lanes (all below 0x10000) to 16: packs work within 128-bit halves */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08));
}

/* d = round(sum in source order of srcs); d may be srcs[0]. (A loop for exactly two sources,
 * as f16c_sum has, made no difference here.) */
__attribute__((target("avx2"))) static void bf16_sum(uint16_t *d, const void *const *srcs, int nsrc,
                                                     size_t n)
{
    const uint16_t *s0 = srcs[0];
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = bf16_widen8(s0 + i);
        for (int k = 1; k < nsrc; k++)
            acc = _mm256_add_ps(acc, bf16_widen8((const uint16_t *)srcs[k] + i));
        _mm_storeu_si128((__m128i *)(d + i), bf16_narrow8(acc));
    }
    half_sum_rule(d, srcs, nsrc, i, n - i, true);
}

/*
 * The sums again with AVX-512 (F, BW, DQ, VL and BF16), where the CPU has it: sixteen float32
 * lanes per instruction, and bfloat16 rounded by VCVTNE2PS2BF16, one instruction for
 * thirty-two lanes in place of nine per eight. On AMD Zen 5, 2.7 to 4.5 times the AVX2
 * loop's speed for bfloat16 and about twice for float16 (docs/dtrain.md). Both instructions differ
 * from the rule in one case each, found by a mask test and given to the rule, block by block:
 * VCVTNE2PS2BF16 takes a subnormal float32 as zero, and the float16 conversions keep NaN payloads.
 */
#define SUM512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,f16c")))

/*
 * Thirty-two bfloat16 at a time: a 32-bit lane holds two, so shifting it left gives the even
 * element as a float32 and masking the low half gives the odd one. The two sums are rounded
 * together (the even ones into the low half) and put back in order by one permutation.
 */
SUM512 static void bf16_sum512(uint16_t *d, const void *const *srcs, int nsrc, size_t n)
{
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i order =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i v = _mm512_loadu_si512((const uint16_t *)srcs[0] + i);
        __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        __m512 od = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
        for (int k = 1; k < nsrc; k++) {
            v = _mm512_loadu_si512((const uint16_t *)srcs[k] + i);
            ev = _mm512_add_ps(ev, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
            od = _mm512_add_ps(od, _mm512_castsi512_ps(_mm512_and_si512(v, hi)));
        }
        if (__builtin_expect(_mm512_fpclass_ps_mask(ev, 0x20) | _mm512_fpclass_ps_mask(od, 0x20),
                             0)) { /* a subnormal sum */
            half_sum_rule(d, srcs, nsrc, i, 32, true);
            continue;
        }
        __m512i r = (__m512i)_mm512_cvtne2ps_pbh(od, ev);
        _mm512_storeu_si512(d + i, _mm512_permutexvar_epi16(order, r));
    }
    half_sum_rule(d, srcs, nsrc, i, n - i, true);
}

/* Sixteen float16 at a time. A NaN among the sources makes the sum NaN, so one test of the
 * sums finds every block that has one, in or out; such a block goes by the rule. */
SUM512 static void f16_sum512(uint16_t *d, const void *const *srcs, int nsrc, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 acc =
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)srcs[0] + i)));
        for (int k = 1; k < nsrc; k++)
            acc = _mm512_add_ps(acc, _mm512_cvtph_ps(_mm256_loadu_si256(
                                         (const __m256i *)((const uint16_t *)srcs[k] + i))));
        if (__builtin_expect(_mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q), 0)) {
            half_sum_rule(d, srcs, nsrc, i, 16, false);
            continue;
        }
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    half_sum_rule(d, srcs, nsrc, i, n - i, false);
}
#endif

/*
 * Which half-precision loops run. -1: decide from the CPU (DTRAIN_F16C=0 keeps the portable
 * loops, DTRAIN_AVX512=0 stops at AVX2); 0: the portable loops; 1: AVX2 and F16C; 2: also
 * the AVX-512 sums.
 */
static _Atomic int half_hw = -1;

static int half_hw_max(void)
{
#ifdef HAVE_F16C_PATH
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c"))
        return 0;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bf16"))
        return 2;
    return 1;
#else
    return 0;
#endif
}

int dt_half_hw_set(int mode)
{
    int max = half_hw_max();
    atomic_store(&half_hw, mode < 0 ? -1 : mode < max ? mode : max);
    return max;
}

static int half_level(void)
{
    int m = atomic_load_explicit(&half_hw, memory_order_relaxed);
    if (m < 0) {
        m = half_hw_max();
        if (dt_env_switch("DTRAIN_F16C") == 0)
            m = 0;
        if (m > 1 && dt_env_switch("DTRAIN_AVX512") == 0)
            m = 1;
        atomic_store(&half_hw, m);
    }
    return m;
}

static bool f16_hw(void)
{
    return half_level() > 0;
}

void dt_half_widen(float *restrict d, const uint16_t *restrict s, size_t n, bool bf)
{
#ifdef HAVE_F16C_PATH
    if (!bf && f16_hw()) {
        f16c_widen(d, s, n, false);
        return;
    }
#endif
    half_widen_c(d, s, n, bf);
}

static void half_add_widened(float *restrict d, const uint16_t *restrict s, size_t n, bool bf)
{
#ifdef HAVE_F16C_PATH
    if (!bf && f16_hw()) {
        f16c_widen(d, s, n, true);
        return;
    }
#endif
    half_add_widened_c(d, s, n, bf);
}

void dt_half_narrow(uint16_t *restrict d, const float *restrict s, size_t n, bool bf)
{
#ifdef HAVE_F16C_PATH
    if (!bf && f16_hw()) {
        f16c_narrow(d, s, n);
        return;
    }
#endif
    half_narrow_c(d, s, n, bf);
}

void dt_half_narrow_scaled(uint16_t *restrict d, const float *restrict s, size_t n, float scale,
                           bool bf)
{
    float tmp[HALF_BLK];
    for (size_t off = 0; off < n; off += HALF_BLK) {
        size_t m = n - off < HALF_BLK ? n - off : HALF_BLK;
        for (size_t j = 0; j < m; j++)
            tmp[j] = s[off + j] * scale;
        dt_half_narrow(d + off, tmp, m, bf);
    }
}

/* d = round(sum in source order of srcs), accumulated in float32; d may be srcs[0]. */
static void multi_half_sum(uint16_t *d, const void *const *srcs, int nsrc, size_t n, bool bf)
{
#ifdef HAVE_F16C_PATH
    int level = half_level();
    if (level > 1) {
        if (bf)
            bf16_sum512(d, srcs, nsrc, n);
        else
            f16_sum512(d, srcs, nsrc, n);
        return;
    }
    if (level > 0) { /* AVX2 and F16C; bfloat16 needs only the first */
        if (bf)
            bf16_sum(d, srcs, nsrc, n);
        else
            f16c_sum(d, srcs, nsrc, n);
        return;
    }
#endif
    float acc[HALF_BLK];
    for (size_t off = 0; off < n; off += HALF_BLK) {
        size_t m = n - off < HALF_BLK ? n - off : HALF_BLK;
        dt_half_widen(acc, (const uint16_t *)srcs[0] + off, m, bf);
        for (int k = 1; k < nsrc; k++)
            half_add_widened(acc, (const uint16_t *)srcs[k] + off, m, bf);
        dt_half_narrow(d + off, acc, m, bf);
    }
}

static float half_get(const uint16_t *p, size_t i, bool bf)
{
    return bf ? dt_bf16_to_f32(p[i]) : dt_f16_to_f32(p[i]);
}

static void reduce_half(uint16_t *d, const uint16_t *s, size_t n, enum dtrain_op op, bool bf)
{
    if (op != DTRAIN_MIN && op != DTRAIN_MAX) {
        const void *srcs[2] = {d, s};
        multi_half_sum(d, srcs, 2, n, bf);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float a = half_get(d, i, bf), b = half_get(s, i, bf);
        float r = op == DTRAIN_MIN ? OP_MIN(a, b) : OP_MAX(a, b);
        d[i] = bf ? dt_f32_to_bf16(r) : dt_f32_to_f16(r);
    }
}

/*
 * Calls kernel `k` (empty: d op= s; 3: d = a op b) of op for the full-width
 * type t with the remaining arguments; half types have their own loops.
 */
#define BY_OP(op, k, sfx, ...)                                                                     \
    ((op) == DTRAIN_MIN   ? min##k##_##sfx(__VA_ARGS__)                                            \
     : (op) == DTRAIN_MAX ? max##k##_##sfx(__VA_ARGS__)                                            \
                          : sum##k##_##sfx(__VA_ARGS__))
#define BY_TYPE(t, op, k, ...)                                                                     \
    switch (t) {                                                                                   \
    case DTRAIN_FLOAT32: BY_OP(op, k, f32, __VA_ARGS__); break;                                    \
    case DTRAIN_FLOAT64: BY_OP(op, k, f64, __VA_ARGS__); break;                                    \
    case DTRAIN_INT32: BY_OP(op, k, i32, __VA_ARGS__); break;                                      \
    case DTRAIN_INT64: BY_OP(op, k, i64, __VA_ARGS__); break;                                      \
    default: break;                                                                                \
    }

void dt_reduce(void *dst, const void *src, size_t n, enum dtrain_dtype t, enum dtrain_op op)
{
    if (t == DTRAIN_FLOAT16 || t == DTRAIN_BFLOAT16)
        reduce_half(dst, src, n, op, t == DTRAIN_BFLOAT16);
    else
        BY_TYPE(t, op, , dst, src, n)
}

/* dst = a op b for the full-width types; dst aliases neither. */
static void reduce3(void *dst, const void *a, const void *b, size_t n, enum dtrain_dtype t,
                    enum dtrain_op op)
{
    BY_TYPE(t, op, 3, dst, a, b, n)
}

/* Half types with several sources: accumulate in float32, round once. */
static void multi_half(uint16_t *d, const void *const *srcs, int nsrc, size_t n, enum dtrain_op op,
                       bool bf)
{
    if (op != DTRAIN_MIN && op != DTRAIN_MAX) {
        multi_half_sum(d, srcs, nsrc, n, bf);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float r = half_get(srcs[0], i, bf);
        for (int k = 1; k < nsrc; k++) {
            float b = half_get(srcs[k], i, bf);
            r = op == DTRAIN_MIN ? OP_MIN(r, b) : OP_MAX(r, b);
        }
        d[i] = bf ? dt_f32_to_bf16(r) : dt_f32_to_f16(r);
    }
}

void dt_reduce_multi(void *dst, const void *const *srcs, int nsrc, size_t n, enum dtrain_dtype t,
                     enum dtrain_op op)
{
    if (t == DTRAIN_FLOAT16 || t == DTRAIN_BFLOAT16) {
        multi_half(dst, srcs, nsrc, n, op, t == DTRAIN_BFLOAT16);
        return;
    }
    size_t es = dtrain_dtype_size(t);
    /* Blocks small enough to stay in L1 while every source is folded in. */
    const size_t blk = 2048;
    for (size_t off = 0; off < n; off += blk) {
        size_t m = n - off < blk ? n - off : blk;
        char *d = (char *)dst + off * es;
        const char *s0 = (const char *)srcs[0] + off * es;
        int k = 1;
        if (d != s0 && nsrc >= 2)
            reduce3(d, s0, (const char *)srcs[k++] + off * es, m, t, op);
        else if (d != s0)
            dt_copy(d, s0, m * es);
        for (; k < nsrc; k++)
            dt_reduce(d, (const char *)srcs[k] + off * es, m, t, op);
    }
}

void dt_scale_avg(void *buf, size_t n, enum dtrain_dtype t, int world)
{
    if (world <= 1)
        return;
    switch (t) {
    case DTRAIN_FLOAT32: {
        float *p = buf, inv = 1.0f / (float)world;
        for (size_t i = 0; i < n; i++)
            p[i] *= inv;
        break;
    }
    case DTRAIN_FLOAT64: {
        double *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] /= world;
        break;
    }
    case DTRAIN_INT32: {
        int32_t *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] /= world;
        break;
    }
    case DTRAIN_INT64: {
        int64_t *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] /= world;
        break;
    }
    case DTRAIN_FLOAT16:
    case DTRAIN_BFLOAT16: {
        uint16_t *p = buf;
        bool bf = t == DTRAIN_BFLOAT16;
        float acc[HALF_BLK], w = (float)world;
        for (size_t off = 0; off < n; off += HALF_BLK) {
            size_t m = n - off < HALF_BLK ? n - off : HALF_BLK;
            dt_half_widen(acc, p + off, m, bf);
            for (size_t i = 0; i < m; i++)
                acc[i] /= w;
            dt_half_narrow(p + off, acc, m, bf);
        }
        break;
    }
    default: break;
    }
}
