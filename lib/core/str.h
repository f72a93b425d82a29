/*
 * Small string helpers: strict number parsing (the house lint bans atoi),
 * bounded copies, and "did you mean" suggestions by edit distance.
 */
#ifndef KD_CORE_STR_H
#define KD_CORE_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/** Copy with truncation; always NUL-terminates when len > 0. Returns strlen(src). */
size_t kd_strlcpy(char *dst, const char *src, size_t len);

/** Whole-string base-10 parses: no trailing junk, no overflow. 0 or KD_EINVAL. */
int kd_parse_i64(const char *s, int64_t *out) KD_WUR;
int kd_parse_u64(const char *s, uint64_t *out) KD_WUR;
int kd_parse_int(const char *s, int *out) KD_WUR;
int kd_parse_double(const char *s, double *out) KD_WUR;

/**
 * Parse a size such as "95MiB", "1G", "512k" or "4096" into bytes (binary
 * multiples: k/K/KiB = 1024). 0 or KD_EINVAL.
 */
int kd_parse_size(const char *s, uint64_t *out) KD_WUR;

bool kd_str_has_prefix(const char *s, const char *prefix);
bool kd_str_has_suffix(const char *s, const char *suffix);

/**
 * Where to cut the n bytes at s so that no UTF-8 sequence is split: before
 * the last sequence when it is incomplete, else n (0 when s is one
 * incomplete sequence). Invalid bytes are cut anywhere. Pure.
 */
size_t kd_utf8_cut(const unsigned char *s, size_t n);

/**
 * The length of the valid UTF-8 sequence at s (at most n bytes: 1 to 4),
 * or 0 when the bytes there are not one (a stray continuation, an overlong
 * form, a surrogate, past U+10FFFF, cut short). Pure.
 */
size_t kd_utf8_seq(const unsigned char *s, size_t n);

/**
 * Copy the text src into dst (dstlen bytes, NUL-terminated, never cutting a
 * sequence) with every byte that does not belong to a valid UTF-8 sequence
 * replaced by '?': text from a request made safe to put into JSON. Returns
 * dst. Pure.
 */
char *kd_utf8_scrub(const char *src, char *dst, size_t dstlen);

/** Levenshtein distance between a and b (bytes). */
size_t kd_edit_distance(const char *a, const char *b);

/**
 * The candidate closest to `word` by edit distance, if it is close enough
 * to be a plausible typo (distance <= max(1, len/3)); otherwise NULL.
 * `cands` is a NULL-terminated array.
 */
const char *kd_suggest(const char *word, const char *const *cands);

#endif
