/*
 * kdet's one pseudo-random number generator: xoshiro256** (Blackman and
 * Vigna) seeded through splitmix64, plus the documented derivation of
 * per-trial seeds and independent streams from an experiment seed. The
 * whole state is four 64-bit words, so searchers can snapshot it exactly.
 */
#ifndef KD_HPARAMS_RNG_H
#define KD_HPARAMS_RNG_H

#include <stdint.h>

#include "core/err.h"

/** Generator state; copy it to fork, store s[0..3] to snapshot. Not thread-safe. */
struct kd_rng {
    uint64_t s[4];
};

/** One splitmix64 step: advances *state and returns the next output. */
uint64_t kd_splitmix64(uint64_t *state);

/** splitmix64's output function on a single word (a bijective 64-bit mixer). */
uint64_t kd_mix64(uint64_t z);

/** Seed: s[0..3] are four consecutive splitmix64 outputs starting from `seed`. */
void kd_rng_seed(struct kd_rng *r, uint64_t seed);

/**
 * Seed an independent stream: kd_rng_seed(r, kd_mix64(seed ^ kd_mix64(stream + 1))).
 * Different `stream` numbers give statistically independent sequences.
 */
void kd_rng_seed_stream(struct kd_rng *r, uint64_t seed, uint64_t stream);

/** Next 64 random bits (xoshiro256**). */
uint64_t kd_rng_next(struct kd_rng *r);

/** Uniform double in [0, 1) from the top 53 bits. */
double kd_rng_uniform(struct kd_rng *r);

/** Uniform integer in [0, n) without modulo bias (rejection); n == 0 returns 0. */
uint64_t kd_rng_below(struct kd_rng *r, uint64_t n);

/** Standard normal (Box-Muller on two uniforms; no cached second value). */
double kd_rng_normal(struct kd_rng *r);

/**
 * The trial seed of the n-th trial (n = 0, 1, ...) an experiment creates:
 *   kd_mix64(kd_mix64(exp_seed ^ 0x6b6465742d747269) + n * 0x9e3779b97f4a7c15) >> 33
 * a 31-bit value (0 .. 2^31-1), so it is valid for numpy, torch, random and
 * tf seeding alike. Pure function: same inputs, same seed, on every machine.
 */
uint32_t kd_hp_trial_seed(uint64_t exp_seed, uint64_t n);

#endif
