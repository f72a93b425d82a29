/*
 * Allocation for daemons and the CLI: every kd_x* function aborts with a
 * log line on out-of-memory instead of returning NULL. Library code that
 * lives in users' processes (libdtrain) uses plain malloc and returns
 * KD_ENOMEM instead.
 */
#ifndef KD_CORE_ALLOC_H
#define KD_CORE_ALLOC_H

#include <stddef.h>

#include "core/err.h"

void *kd_xmalloc(size_t n) __attribute__((malloc, returns_nonnull));
void *kd_xcalloc(size_t nmemb, size_t size) __attribute__((malloc, returns_nonnull));
void *kd_xrealloc(void *p, size_t n) __attribute__((returns_nonnull));
char *kd_xstrdup(const char *s) __attribute__((malloc, returns_nonnull));
char *kd_xstrndup(const char *s, size_t n) __attribute__((malloc, returns_nonnull));
/** printf into a new string; caller frees. */
char *kd_xasprintf(const char *fmt, ...) KD_PRINTF(1, 2) __attribute__((returns_nonnull));

/** Abort after logging that `n` bytes could not be allocated. */
void kd_oom(size_t n) __attribute__((noreturn));

#endif
