/*
 * Bounded dynamic buffers (see buf.h). Growth doubles, clamped to max+1 so
 * that a cap of a few MiB never reserves more than it may hold.
 */
#include "core/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kd_buf_init(struct kd_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

static int reserve(struct kd_buf *b, size_t extra)
{
    if (extra > b->max - b->len)
        return KD_ETOOBIG;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (b->max < SIZE_MAX && cap > b->max + 1) /* SIZE_MAX: no cap (max + 1 would wrap) */
        cap = b->max + 1;
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return KD_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int kd_buf_append(struct kd_buf *b, const void *p, size_t n)
{
    int rc = reserve(b, n);
    if (rc < 0)
        return rc;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int kd_buf_puts(struct kd_buf *b, const char *s)
{
    return kd_buf_append(b, s, strlen(s));
}

int kd_buf_putc(struct kd_buf *b, char c)
{
    return kd_buf_append(b, &c, 1);
}

int kd_buf_vprintf(struct kd_buf *b, const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, aq);
    va_end(aq);
    if (n < 0)
        return KD_EINVAL;
    if ((size_t)n < sizeof(small))
        return kd_buf_append(b, small, (size_t)n);
    int rc = reserve(b, (size_t)n);
    if (rc < 0)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int kd_buf_printf(struct kd_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = kd_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

const char *kd_buf_str(const struct kd_buf *b)
{
    return b->data ? b->data : "";
}

void kd_buf_reset(struct kd_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void kd_buf_consume(struct kd_buf *b, size_t n)
{
    if (n >= b->len) {
        kd_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

void kd_buf_free(struct kd_buf *b)
{
    if (b == NULL)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

char *kd_buf_steal(struct kd_buf *b)
{
    char *p = b->data ? b->data : strdup("");
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}
