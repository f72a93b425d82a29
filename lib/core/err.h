/*
 * Error codes shared by every kdet module. Functions return 0 on success or
 * a negative code: either one of the KD_E* values below or -errno, so a
 * system call's error passes through unchanged.
 */
#ifndef KD_CORE_ERR_H
#define KD_CORE_ERR_H

#include <stddef.h>

#define KD_WUR __attribute__((warn_unused_result))
#define KD_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Size of the optional human-readable error buffers (`char *err`). */
#define KD_ERRLEN 1024

/* XX(name, value, message). Values stay clear of errno's range. */
#define KD_ERRNO_MAP(XX)                                                                           \
    XX(EINVAL, -1001, "invalid argument")                                                          \
    XX(ENOMEM, -1002, "out of memory")                                                             \
    XX(ENOTFOUND, -1003, "not found")                                                              \
    XX(ECONFLICT, -1004, "conflict: the object was modified; re-read and retry")                   \
    XX(EGONE, -1005, "resource version too old; relist")                                           \
    XX(EAGAIN, -1006, "temporarily unavailable; back off and retry")                               \
    XX(ETIMEDOUT, -1007, "timed out")                                                              \
    XX(EIO, -1008, "input/output error")                                                           \
    XX(EPARSE, -1009, "parse error")                                                               \
    XX(ETOOBIG, -1010, "too large")                                                                \
    XX(EFORBIDDEN, -1011, "forbidden")                                                             \
    XX(EUNAUTHORIZED, -1012, "unauthorized")                                                       \
    XX(EEXIST, -1013, "already exists")                                                            \
    XX(ECANCELED, -1014, "canceled")                                                               \
    XX(EPROTO, -1015, "protocol error")                                                            \
    XX(ENOTSUP, -1016, "not supported")                                                            \
    XX(ECORRUPT, -1017, "data corrupt or checksum mismatch")                                       \
    XX(EPEER, -1018, "a peer failed")                                                              \
    XX(ESTATE, -1019, "operation not valid in the current state")                                  \
    XX(EINVALID, -1020, "object failed validation")                                                \
    XX(ECONNECT, -1021, "connection failed")                                                       \
    XX(EINTERNAL, -1022, "internal error")

enum kd_err {
#define KD_ERR_ENUM(name, value, msg) KD_##name = (value),
    KD_ERRNO_MAP(KD_ERR_ENUM)
#undef KD_ERR_ENUM
};

/** Message for a KD_E* code or -errno. Never NULL; thread-safe; static. */
const char *kd_strerror(int err);

/** Symbolic name ("KD_ENOTFOUND", "ENOENT") of a code. Never NULL; static. */
const char *kd_err_name(int err);

/**
 * Format a message into the optional error buffer `err` (KD_ERRLEN bytes).
 * Does nothing when err is NULL. Returns `code`, so callers can write
 * `return kd_seterr(err, KD_EINVAL, "field %s: ...", name);`.
 */
int kd_seterr(char *err, int code, const char *fmt, ...) KD_PRINTF(3, 4);

#endif
