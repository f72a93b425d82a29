/*
 * Clocks and RFC 3339 timestamps (see time.h). Only the reentrant time
 * functions are used; the house lint rejects the others.
 */
#include "core/time.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/err.h"

int64_t kd_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t kd_mono_ms(void)
{
    return kd_mono_ns() / 1000000;
}

int64_t kd_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *kd_time_rfc3339(int64_t ms, int millis, char *buf, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    int frac = (int)(ms % 1000);
    if (frac < 0) {
        frac += 1000;
        secs -= 1;
    }
    struct tm tm;
    gmtime_r(&secs, &tm);
    if (millis)
        snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
    else
        snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    return buf;
}

int kd_time_parse_rfc3339(const char *s, int64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (p == NULL)
        return KD_EPARSE;
    int64_t frac_ms = 0;
    if (*p == '.') {
        int64_t scale = 100;
        p++;
        if (*p < '0' || *p > '9')
            return KD_EPARSE;
        while (*p >= '0' && *p <= '9') {
            frac_ms += (*p - '0') * scale;
            scale /= 10;
            p++;
        }
    }
    int64_t offset_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p == '-' ? -1 : 1;
        int hh, mm, used = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &hh, &mm, &used) != 2 || used != 5)
            return KD_EPARSE;
        offset_s = sign * (hh * 3600 + mm * 60);
        p += 6;
    } else {
        return KD_EPARSE;
    }
    if (*p != '\0')
        return KD_EPARSE;
    time_t t = timegm(&tm);
    *ms = ((int64_t)t - offset_s) * 1000 + frac_ms;
    return 0;
}

struct timespec *kd_deadline_ts(clockid_t clk, int64_t ms, struct timespec *ts)
{
    clock_gettime(clk, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
    return ts;
}

void kd_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}
