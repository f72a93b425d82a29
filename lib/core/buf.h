/*
 * Bounded dynamic buffers. Every buffer filled from the network or from a
 * user has a hard cap; appending past it fails with KD_ETOOBIG and leaves
 * the buffer as it was. The contents are always NUL-terminated.
 */
#ifndef KD_CORE_BUF_H
#define KD_CORE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "core/err.h"

struct kd_buf {
    char *data; /* NULL until the first append */
    size_t len; /* bytes used, not counting the terminating NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* hard cap on len */
};

#define KD_BUF_INIT(maxlen)                                                                        \
    {                                                                                              \
        NULL, 0, 0, (maxlen)                                                                       \
    }

/** Start an empty buffer that may hold at most `max` bytes. */
void kd_buf_init(struct kd_buf *b, size_t max);

/**
 * Append n bytes. Returns 0, KD_ETOOBIG when len would pass max, or
 * KD_ENOMEM (never aborts, so libdtrain may use it). On error b is unchanged.
 */
int kd_buf_append(struct kd_buf *b, const void *p, size_t n) KD_WUR;
int kd_buf_puts(struct kd_buf *b, const char *s) KD_WUR;
int kd_buf_putc(struct kd_buf *b, char c) KD_WUR;
int kd_buf_printf(struct kd_buf *b, const char *fmt, ...) KD_PRINTF(2, 3) KD_WUR;
int kd_buf_vprintf(struct kd_buf *b, const char *fmt, va_list ap) KD_WUR;

/** The contents as a string: "" when empty, never NULL. */
const char *kd_buf_str(const struct kd_buf *b);

/** Forget the contents but keep the memory. */
void kd_buf_reset(struct kd_buf *b);

/** Drop the first n bytes (n <= len). */
void kd_buf_consume(struct kd_buf *b, size_t n);

/** Free the memory; the buffer is empty and usable afterwards. NULL-safe. */
void kd_buf_free(struct kd_buf *b);

/**
 * Hand the contents to the caller, who frees them with free(); the buffer
 * is left empty. Returns NULL only when allocation of an empty string fails.
 */
char *kd_buf_steal(struct kd_buf *b);

#endif
