/*
 * xoshiro256** seeded by splitmix64, written out here because no Debian
 * library exposes a seedable generator whose state can be snapshotted and
 * whose output is specified bit for bit (libc's random_r is neither).
 */
#include "hparams/rng.h"

#include <math.h>

uint64_t kd_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t kd_splitmix64(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ULL;
    return kd_mix64(*state);
}

void kd_rng_seed(struct kd_rng *r, uint64_t seed)
{
    uint64_t st = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = kd_splitmix64(&st);
    /* splitmix64 never yields four zero words in a row, but keep the invariant explicit. */
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
        r->s[0] = 1;
}

void kd_rng_seed_stream(struct kd_rng *r, uint64_t seed, uint64_t stream)
{
    kd_rng_seed(r, kd_mix64(seed ^ kd_mix64(stream + 1)));
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t kd_rng_next(struct kd_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double kd_rng_uniform(struct kd_rng *r)
{
    return (double)(kd_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t kd_rng_below(struct kd_rng *r, uint64_t n)
{
    if (n == 0)
        return 0;
    /* Reject the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = kd_rng_next(r);
    } while (x >= limit);
    return x % n;
}

double kd_rng_normal(struct kd_rng *r)
{
    double u1 = 1.0 - kd_rng_uniform(r); /* (0, 1]: log() stays finite */
    double u2 = kd_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint32_t kd_hp_trial_seed(uint64_t exp_seed, uint64_t n)
{
    uint64_t base = kd_mix64(exp_seed ^ 0x6b6465742d747269ULL); /* "kdet-tri" */
    return (uint32_t)(kd_mix64(base + n * 0x9e3779b97f4a7c15ULL) >> 33);
}
