/*
 * Structured logging: one logfmt line per event,
 *   ts=2026-11-21T17:30:00.123Z level=info comp=kdet-controller msg="trial created" trial=exp-1-3
 * The level is checked before anything is formatted; secrets are redacted
 * in one place (kd_redact) whether they appear under a sensitive key or as
 * a registered value anywhere in the line.
 */
#ifndef KD_CORE_LOG_H
#define KD_CORE_LOG_H

#include <stddef.h>

#include "core/err.h"

enum kd_log_level {
    KD_LOG_DEBUG = 0,
    KD_LOG_INFO = 1,
    KD_LOG_WARN = 2,
    KD_LOG_ERROR = 3,
    KD_LOG_OFF = 4,
};

/** The minimum level that is written; read without locking. */
extern int kd_log_min_level;

/**
 * Set the component name written as comp=..., the level (or -1 to read
 * $KDET_LOG_LEVEL, default info) and the output fd (-1 for stderr).
 * Call once at start-up, before threads.
 */
void kd_log_init(const char *component, int level, int fd);

/** "debug" | "info" | "warn" | "warning" | "error" | "off" -> level. 0 or KD_EINVAL. */
int kd_log_level_parse(const char *s, int *level) KD_WUR;

/**
 * Register a secret value (a token, an S3 secret key): it is replaced by
 * [REDACTED] wherever it appears in a log line or in text passed to
 * kd_redact. Values shorter than 4 bytes are ignored. Thread-safe.
 */
void kd_log_add_secret(const char *value);
void kd_log_clear_secrets(void);

/**
 * Copy `in` to `out` (outlen bytes, always NUL-terminated) with secrets
 * redacted: values of sensitive keys (token=, secret=, password=,
 * authorization=, ... in logfmt pairs) and every registered secret value.
 * Returns the length written. Thread-safe.
 */
size_t kd_redact(const char *in, char *out, size_t outlen);

/**
 * A logfmt value for s: unchanged when it is a plain word, otherwise
 * quoted with \" \\ \n \t escapes. The result lives in a small per-thread
 * ring of buffers (8 of them, values cut at 480 bytes): use it inside one
 * log call, never keep it.
 */
const char *kd_logq(const char *s);

void kd__log(int level, const char *file, int line, const char *msg, const char *fmt, ...)
    KD_PRINTF(5, 6);

/* kd_log(level, "message", "key=%s n=%d", ...): the pairs are optional. */
#define kd_log(level, msg, ...)                                                                    \
    do {                                                                                           \
        if ((level) >= kd_log_min_level)                                                           \
            kd__log((level), __FILE__, __LINE__, (msg), "" __VA_ARGS__);                           \
    } while (0)

#define KD_DEBUG(...) kd_log(KD_LOG_DEBUG, __VA_ARGS__)
#define KD_INFO(...) kd_log(KD_LOG_INFO, __VA_ARGS__)
#define KD_WARN(...) kd_log(KD_LOG_WARN, __VA_ARGS__)
#define KD_ERROR(...) kd_log(KD_LOG_ERROR, __VA_ARGS__)

#endif
