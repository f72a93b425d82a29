/*
 * gzip answers and the header lists they read: the items of a comma-separated
 * header value, whether a client's Accept-Encoding takes gzip, and the gzip
 * member of a buffer (zlib). kd_http_respond_json_gz (http.c) sends JSON
 * answers compressed when that pays (the web UI's lists and series).
 */
#include "http/http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <zlib.h>

#include "core/alloc.h"

bool kd_http_next_item(const char **s, char *tok, size_t toklen)
{
    const char *p = *s;
    while (*p == ' ' || *p == '\t' || *p == ',')
        p++;
    if (*p == '\0')
        return false;
    size_t n = strcspn(p, ",");
    *s = p + n;
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n >= toklen)
        n = toklen - 1;
    memcpy(tok, p, n);
    tok[n] = '\0';
    return true;
}

bool kd_http_accepts_gzip(const char *ae)
{
    char tok[128];
    bool yes = false;
    while (ae != NULL && kd_http_next_item(&ae, tok, sizeof(tok))) {
        char *semi = strchr(tok, ';');
        bool zero = false;
        if (semi != NULL) {
            *semi = '\0';
            const char *q = strstr(semi + 1, "q=");
            /* q=0, q=0.0, q=0.000: refused; anything else is a preference, not a refusal. */
            zero = q != NULL && q[2] == '0' && strspn(q + 3, ".0") == strlen(q + 3);
        }
        size_t n = strlen(tok);
        while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t'))
            tok[--n] = '\0';
        if (strcasecmp(tok, "gzip") == 0 || strcasecmp(tok, "x-gzip") == 0)
            return !zero; /* named: its own q decides */
        if (strcmp(tok, "*") == 0)
            yes = !zero;
    }
    return yes;
}

int kd_gzip(const void *data, size_t n, unsigned char **out, size_t *outlen)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    *out = NULL;
    *outlen = 0;
    /* 15 + 16: a gzip member (header and CRC), not a raw zlib stream. Level 1: JSON shrinks
     * about 5 times already, at a fraction of the default level's time. */
    if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return KD_ENOMEM;
    size_t cap = deflateBound(&z, (uLong)n) + 32;
    unsigned char *buf = kd_xmalloc(cap);
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)n;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    int zr = deflate(&z, Z_FINISH);
    size_t got = cap - z.avail_out;
    deflateEnd(&z);
    if (zr != Z_STREAM_END) {
        free(buf);
        return KD_EIO;
    }
    *out = buf;
    *outlen = got;
    return 0;
}

int kd_gunzip(const void *data, size_t n, size_t max, unsigned char **out, size_t *outlen)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    *out = NULL;
    *outlen = 0;
    if (inflateInit2(&z, 15 + 16) != Z_OK) /* a gzip member only */
        return KD_ENOMEM;
    size_t cap = n * 4 + 256 < max + 1 ? n * 4 + 256 : max + 1, got = 0;
    unsigned char *buf = kd_xmalloc(cap + 1);
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)n;
    int zr = Z_OK, rc = 0;
    while (zr == Z_OK) {
        if (got == cap) {
            if (cap > max) {
                rc = KD_ETOOBIG;
                break;
            }
            cap = cap * 2 < max + 1 ? cap * 2 : max + 1;
            buf = kd_xrealloc(buf, cap + 1);
        }
        z.next_out = buf + got;
        z.avail_out = (uInt)(cap - got);
        zr = inflate(&z, Z_NO_FLUSH);
        got = cap - z.avail_out;
    }
    if (rc == 0 && got > max)
        rc = KD_ETOOBIG;
    else if (rc == 0 && (zr != Z_STREAM_END || z.avail_in != 0))
        rc = KD_EPARSE; /* corrupt, cut short, or bytes after the member */
    inflateEnd(&z);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[got] = '\0';
    *out = buf;
    *outlen = got;
    return 0;
}
