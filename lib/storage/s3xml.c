/*
 * S3's XML, read with a scanner (s3xml.h). S3 answers are small and flat
 * and only a handful of elements are read, so a scanner is enough and keeps
 * an XML library out of libdtrain; what it must get right is that the text
 * it hands back is exactly what the server escaped, or nothing.
 */
#include "storage/s3xml.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "core/str.h"
#include "storage/storage_int.h"

static int digit(char c, int base)
{
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : 99;
    return v < base ? v : -1;
}

/*
 * A numeric character reference at q ("&#...;", q < e): its code point, or
 * -1 when it is not one of XML's characters (RFC-free: XML 1.0 section 2.2,
 * Char). *after gets the ';'.
 */
static long char_ref(const char *q, const char *e, const char **after)
{
    int base = 10;
    long v = 0;
    const char *p = q + 2, *start;
    if (p < e && (*p == 'x' || *p == 'X')) {
        base = 16;
        p++;
    }
    for (start = p; p < e && digit(*p, base) >= 0 && v <= 0x10FFFF; p++)
        v = v * base + digit(*p, base);
    if (p == start || p >= e || *p != ';')
        return -1;
    *after = p;
    if (v == 0x9 || v == 0xA || v == 0xD || (v >= 0x20 && v <= 0xD7FF) ||
        (v >= 0xE000 && v <= 0xFFFD) || (v >= 0x10000 && v <= 0x10FFFF))
        return v;
    return -1;
}

/* v as UTF-8 into out[*o..len - 1) (room for the NUL kept); false when it does not fit. */
static bool put_utf8(long v, char *out, size_t len, size_t *o)
{
    unsigned char u[4];
    size_t k;
    if (v < 0x80) {
        u[0] = (unsigned char)v;
        k = 1;
    } else if (v < 0x800) {
        u[0] = (unsigned char)(0xC0 | (v >> 6));
        u[1] = (unsigned char)(0x80 | (v & 0x3F));
        k = 2;
    } else if (v < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (v >> 12));
        u[1] = (unsigned char)(0x80 | ((v >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (v & 0x3F));
        k = 3;
    } else {
        u[0] = (unsigned char)(0xF0 | (v >> 18));
        u[1] = (unsigned char)(0x80 | ((v >> 12) & 0x3F));
        u[2] = (unsigned char)(0x80 | ((v >> 6) & 0x3F));
        u[3] = (unsigned char)(0x80 | (v & 0x3F));
        k = 4;
    }
    if (*o + k >= len)
        return false;
    memcpy(out + *o, u, k);
    *o += k;
    return true;
}

/* kd_storage__xml_get but for out on failure. */
static const char *get(const char *p, const char *end, const char *tag, char *out, size_t len,
                       size_t *n)
{
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    char open[64], close[64];
    const char *s, *e;
    size_t o = 0;
    int n1 = snprintf(open, sizeof(open), "<%s>", tag);
    int n2 = snprintf(close, sizeof(close), "</%s>", tag);
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof(close) || p == NULL || end < p || len == 0)
        return NULL;
    s = memmem(p, (size_t)(end - p), open, (size_t)n1);
    if (s == NULL)
        return NULL;
    s += n1;
    e = memmem(s, (size_t)(end - s), close, (size_t)n2);
    if (e == NULL)
        return NULL;
    for (const char *q = s; q < e; q++) {
        char c = *q;
        if (c == '\0')
            return NULL; /* no XML text holds a NUL byte */
        if (c == '&' && q + 1 < e && q[1] == '#') {
            const char *semi = NULL;
            long v = char_ref(q, e, &semi);
            if (v < 0 || !put_utf8(v, out, len, &o))
                return NULL;
            q = semi;
            continue;
        }
        if (c == '&') {
            for (size_t k = 0; k < sizeof(ents) / sizeof(ents[0]); k++) {
                size_t l = strlen(ents[k].ent);
                if ((size_t)(e - q) >= l && memcmp(q, ents[k].ent, l) == 0) {
                    c = ents[k].c;
                    q += l - 1;
                    break;
                }
            }
        }
        if (o + 1 >= len)
            return NULL;
        out[o++] = c;
    }
    out[o] = '\0';
    *n = o;
    return e + n2;
}

const char *kd_storage__xml_get(const char *p, const char *end, const char *tag, char *out,
                                size_t len, size_t *n)
{
    size_t got = 0;
    const char *r = get(p, end, tag, out, len, &got);
    if (r == NULL && len > 0)
        out[0] = '\0';
    if (n != NULL)
        *n = r != NULL ? got : 0;
    return r;
}

int kd_storage__xml_escape(struct kd_buf *b, const char *s)
{
    int rc = 0;
    for (; *s && rc == 0; s++) {
        switch (*s) {
        case '&': rc = kd_buf_puts(b, "&amp;"); break;
        case '<': rc = kd_buf_puts(b, "&lt;"); break;
        case '>': rc = kd_buf_puts(b, "&gt;"); break;
        case '"': rc = kd_buf_puts(b, "&quot;"); break;
        case '\'': rc = kd_buf_puts(b, "&apos;"); break;
        default: rc = kd_buf_putc(b, *s);
        }
    }
    return rc;
}

int kd_storage__xml_list_page(const char *body, size_t len, const char *keypfx,
                              struct kd_storage_list *out, bool *truncated, char *token,
                              size_t tokenlen, char *err)
{
    const char *p = body != NULL ? body : "", *end = p + len;
    size_t pfxlen = strlen(keypfx), klen = 0;
    char tmp[64], size[32], key[KD_STORAGE_KEYLEN * 2];
    int rc = 0;
    *truncated = kd_storage__xml_get(p, end, "IsTruncated", tmp, sizeof(tmp), NULL) != NULL &&
                 strcmp(tmp, "true") == 0;
    token[0] = '\0';
    if (*truncated &&
        (kd_storage__xml_get(p, end, "NextContinuationToken", token, tokenlen, NULL) == NULL ||
         token[0] == '\0'))
        return kd_seterr(err, KD_EPROTO, "s3 list: truncated without a continuation token");
    while (rc == 0) {
        const char *c = memmem(p, (size_t)(end - p), "<Contents>", 10), *ce;
        uint64_t sz = 0;
        if (c == NULL)
            break;
        ce = memmem(c, (size_t)(end - c), "</Contents>", 11);
        if (ce == NULL || kd_storage__xml_get(c, ce, "Key", key, sizeof(key), &klen) == NULL ||
            kd_storage__xml_get(c, ce, "Size", size, sizeof(size), NULL) == NULL ||
            kd_parse_u64(size, &sz) != 0) {
            rc = kd_seterr(err, KD_EPROTO, "s3 list: malformed <Contents> entry");
            break;
        }
        if (klen >= pfxlen && memcmp(key, keypfx, pfxlen) == 0) {
            rc = kd_storage__list_add(out, key + pfxlen, klen - pfxlen, sz);
            if (rc != 0)
                kd_seterr(err, rc, "s3 list: %s", kd_strerror(rc));
        }
        p = ce + 11;
    }
    return rc;
}

void kd_storage__xml_error(const char *body, size_t len, char *code, size_t codelen, char *msg,
                           size_t msglen)
{
    const char *end = body != NULL ? body + len : NULL;
    code[0] = msg[0] = '\0';
    if (body == NULL)
        return;
    if (kd_storage__xml_get(body, end, "Code", code, codelen, NULL) == NULL)
        code[0] = '\0';
    if (kd_storage__xml_get(body, end, "Message", msg, msglen, NULL) == NULL)
        msg[0] = '\0';
}

bool kd_storage__xml_delete_error(const char *body, size_t len, char *key, size_t keylen,
                                  char *code, size_t codelen)
{
    const char *e = body != NULL ? memmem(body, len, "<Error>", 7) : NULL;
    key[0] = code[0] = '\0';
    if (e == NULL)
        return false;
    if (kd_storage__xml_get(e, body + len, "Key", key, keylen, NULL) == NULL)
        key[0] = '\0';
    if (kd_storage__xml_get(e, body + len, "Code", code, codelen, NULL) == NULL)
        code[0] = '\0';
    return true;
}
