/*
 * User API token text: parse, make, hash. Kept apart from the API so that
 * the parser can be fuzzed alone (tests/fuzz/fuzz_utoken.c).
 */
#include "api/usertoken.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

static bool b64url_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

int kd_utoken_parse(const char *tok, int64_t *id, const char **secret)
{
    int rc = KD_EINVAL;
    size_t plen = strlen(KD_UTOKEN_PREFIX), n = 0;
    int64_t v = 0;
    *id = 0;
    *secret = NULL;
    if (tok == NULL || strnlen(tok, KD_UTOKEN_MAX + 1) > KD_UTOKEN_MAX ||
        strncmp(tok, KD_UTOKEN_PREFIX, plen) != 0)
        goto out;
    const char *p = tok + plen;
    if (p[0] == '0') /* one spelling per id: no leading zeros */
        goto out;
    for (n = 0; p[n] >= '0' && p[n] <= '9'; n++) {
        if (n == 18)
            goto out;
        v = v * 10 + (p[n] - '0');
    }
    if (n == 0 || v <= 0 || p[n] != '_')
        goto out;
    const char *s = p + n + 1;
    for (size_t i = 0; i < KD_UTOKEN_SECRET_LEN; i++)
        if (!b64url_char(s[i]))
            goto out;
    if (s[KD_UTOKEN_SECRET_LEN] != '\0')
        goto out;
    *id = v;
    *secret = s;
    rc = 0;
out:
    return rc;
}

int kd_utoken_secret(char out[KD_UTOKEN_SECRET_LEN + 1])
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char raw[33] = {0}; /* 32 random bytes, one zero pad: 11 groups of 3 */
    size_t o = 0;
    if (RAND_bytes(raw, 32) != 1)
        return KD_EIO;
    for (size_t i = 0; i < 33; i += 3) {
        uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 | raw[i + 2];
        for (int k = 18; k >= 0 && o < KD_UTOKEN_SECRET_LEN; k -= 6)
            out[o++] = tab[(v >> k) & 63];
    }
    out[o] = '\0';
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}

int kd_utoken_format(int64_t id, const char *secret, char *out, size_t len)
{
    if (id <= 0 || id > 999999999999999999LL || secret == NULL ||
        strlen(secret) != KD_UTOKEN_SECRET_LEN || len < KD_UTOKEN_MAX + 1)
        return KD_EINVAL;
    snprintf(out, len, "%s%lld_%s", KD_UTOKEN_PREFIX, (long long)id, secret);
    return 0;
}

void kd_utoken_sha256_hex(const char *s, size_t n, char out[KD_UTOKEN_HASH_HEX + 1])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    static const char hex[] = "0123456789abcdef";
    if (EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32) {
        memset(out, '0', KD_UTOKEN_HASH_HEX); /* matches no stored hash of a real token */
        out[0] = 'x';
        mdlen = 0;
    }
    for (unsigned int i = 0; i < mdlen; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[KD_UTOKEN_HASH_HEX] = '\0';
    OPENSSL_cleanse(md, sizeof(md));
}

bool kd_utoken_hash_equal(const char *a, const char *b)
{
    if (a == NULL || b == NULL || strnlen(a, KD_UTOKEN_HASH_HEX + 1) != KD_UTOKEN_HASH_HEX ||
        strnlen(b, KD_UTOKEN_HASH_HEX + 1) != KD_UTOKEN_HASH_HEX)
        return false;
    return CRYPTO_memcmp(a, b, KD_UTOKEN_HASH_HEX) == 0;
}
