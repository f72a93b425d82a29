/*
 * User API tokens as text: "kdet_<id>_<secret>", where id is the token's
 * row in the store and secret 43 base64url characters of 32 random bytes.
 * The store keeps only the SHA-256 of the secret; the id lets the API find
 * that row without comparing secrets in the database. Pure functions
 * (kd_utoken_secret reads the system's random source).
 */
#ifndef KD_CONTROLLER_USERTOKEN_H
#define KD_CONTROLLER_USERTOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define KD_UTOKEN_PREFIX "kdet_"
#define KD_UTOKEN_SECRET_LEN 43
/* The longest token: prefix, 18 digits, '_', the secret. */
#define KD_UTOKEN_MAX (5 + 18 + 1 + KD_UTOKEN_SECRET_LEN)
#define KD_UTOKEN_HASH_HEX 64

/**
 * Split a token: *id (1 to 18 decimal digits, > 0) and *secret (points
 * into tok). KD_EINVAL for anything else, including trailing bytes. Pure;
 * reads at most KD_UTOKEN_MAX + 1 bytes of tok.
 */
int kd_utoken_parse(const char *tok, int64_t *id, const char **secret) KD_WUR;

/** A new secret: 32 random bytes as base64url, NUL-terminated. 0 or KD_EIO. */
int kd_utoken_secret(char out[KD_UTOKEN_SECRET_LEN + 1]) KD_WUR;

/** The token text of id and secret into out (KD_UTOKEN_MAX + 1 bytes). 0 or KD_EINVAL. */
int kd_utoken_format(int64_t id, const char *secret, char *out, size_t len) KD_WUR;

/** Lower-case hex SHA-256 of n bytes of s into out (65 bytes with the NUL). */
void kd_utoken_sha256_hex(const char *s, size_t n, char out[KD_UTOKEN_HASH_HEX + 1]);

/** Whether two 64-digit hex hashes are equal, in time independent of their contents. */
bool kd_utoken_hash_equal(const char *a, const char *b);

#endif
