/*
 * Aborting allocators (see alloc.h). One place decides what running out of
 * memory means for a daemon: a last log line and abort(), so a supervisor
 * restarts the process instead of it limping on with half-built state.
 */
#include "core/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kd_oom(size_t n)
{
    char line[128];
    int len = snprintf(line, sizeof(line), "level=error msg=\"out of memory\" bytes=%zu\n", n);
    if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0) {
        /* Nothing more can be done. */
    }
    abort();
}

void *kd_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        kd_oom(n);
    return p;
}

void *kd_xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (p == NULL)
        kd_oom(nmemb * size);
    return p;
}

void *kd_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        kd_oom(n);
    return q;
}

char *kd_xstrdup(const char *s)
{
    char *p = strdup(s);
    if (p == NULL)
        kd_oom(strlen(s) + 1);
    return p;
}

char *kd_xstrndup(const char *s, size_t n)
{
    char *p = strndup(s, n);
    if (p == NULL)
        kd_oom(n + 1);
    return p;
}

char *kd_xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        kd_oom(strlen(fmt));
    return s;
}
