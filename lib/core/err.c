/*
 * Error codes: the table in err.h expanded into messages and names, with
 * errno values answered by glibc's thread-safe descriptions.
 */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *kd_strerror(int err)
{
    switch (err) {
    case 0: return "success";
#define KD_ERR_MSG(name, value, msg)                                                               \
    case KD_##name: return msg;
        KD_ERRNO_MAP(KD_ERR_MSG)
#undef KD_ERR_MSG
    default: break;
    }
    if (err < 0 && err > -4096) {
        const char *s = strerrordesc_np(-err);
        if (s != NULL)
            return s;
    }
    return "unknown error";
}

const char *kd_err_name(int err)
{
    switch (err) {
    case 0: return "OK";
#define KD_ERR_NAME(name, value, msg)                                                              \
    case KD_##name: return "KD_" #name;
        KD_ERRNO_MAP(KD_ERR_NAME)
#undef KD_ERR_NAME
    default: break;
    }
    if (err < 0 && err > -4096) {
        const char *s = strerrorname_np(-err);
        if (s != NULL)
            return s;
    }
    return "UNKNOWN";
}

int kd_seterr(char *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, KD_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return code;
}
