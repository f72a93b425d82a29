/*
 * String helpers (see str.h).
 */
#include "core/str.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t kd_strlcpy(char *dst, const char *src, size_t len)
{
    size_t n = strlen(src);
    if (len > 0) {
        size_t c = n < len - 1 ? n : len - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}

int kd_parse_i64(const char *s, int64_t *out)
{
    if (s == NULL || *s == '\0')
        return KD_EINVAL;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return KD_EINVAL;
    *out = v;
    return 0;
}

int kd_parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s == '\0' || *s == '-')
        return KD_EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return KD_EINVAL;
    *out = v;
    return 0;
}

int kd_parse_int(const char *s, int *out)
{
    int64_t v;
    if (kd_parse_i64(s, &v) < 0 || v < INT_MIN || v > INT_MAX)
        return KD_EINVAL;
    *out = (int)v;
    return 0;
}

int kd_parse_double(const char *s, double *out)
{
    if (s == NULL || *s == '\0')
        return KD_EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return KD_EINVAL;
    *out = v;
    return 0;
}

int kd_parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return KD_EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return KD_EINVAL;
    uint64_t mult = 1;
    if (*end != '\0') {
        switch (*end) {
        case 'k':
        case 'K': mult = 1ULL << 10; break;
        case 'm':
        case 'M': mult = 1ULL << 20; break;
        case 'g':
        case 'G': mult = 1ULL << 30; break;
        case 't':
        case 'T': mult = 1ULL << 40; break;
        default: return KD_EINVAL;
        }
        end++;
        if (strcmp(end, "iB") == 0 || strcmp(end, "i") == 0 || strcmp(end, "B") == 0)
            end += strlen(end);
        if (*end != '\0')
            return KD_EINVAL;
    }
    if (v > UINT64_MAX / mult)
        return KD_EINVAL;
    *out = v * mult;
    return 0;
}

bool kd_str_has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool kd_str_has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

size_t kd_utf8_cut(const unsigned char *s, size_t n)
{
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation byte: keep looking for the lead */
        size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return want > back ? n - back : n;
    }
    return n;
}

size_t kd_utf8_seq(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* nothing past U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

char *kd_utf8_scrub(const char *src, char *dst, size_t dstlen)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t n = strlen(src), o = 0;
    if (dstlen == 0)
        return dst;
    for (size_t i = 0; i < n;) {
        size_t k = kd_utf8_seq(s + i, n - i);
        size_t w = k > 0 ? k : 1;
        if (o + w >= dstlen)
            break;
        if (k > 0)
            memcpy(dst + o, s + i, k);
        else
            dst[o] = '?';
        o += w;
        i += w;
    }
    dst[o] = '\0';
    return dst;
}

size_t kd_edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 256 || m > 256) /* names are short; bound the work */
        return n > m ? n : m;
    size_t row[257];
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

const char *kd_suggest(const char *word, const char *const *cands)
{
    size_t limit = strlen(word) / 3;
    if (limit < 1)
        limit = 1;
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; cands[i] != NULL; i++) {
        size_t d = kd_edit_distance(word, cands[i]);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    return best_d <= limit ? best : NULL;
}
