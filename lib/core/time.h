/*
 * Clocks and timestamps: a monotonic clock for timeouts and durations, the
 * wall clock for what users and logs see, RFC 3339 formatting in UTC.
 */
#ifndef KD_CORE_TIME_H
#define KD_CORE_TIME_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/err.h"

/** Monotonic milliseconds / nanoseconds (CLOCK_MONOTONIC). */
int64_t kd_mono_ms(void);
int64_t kd_mono_ns(void);

/** Wall-clock milliseconds since the Unix epoch. */
int64_t kd_wall_ms(void);

/**
 * Format `ms` since the epoch as RFC 3339 UTC: "2026-11-21T17:30:00Z", or
 * with millis "2026-11-21T17:30:00.123Z". buf needs 32 bytes. Returns buf.
 */
char *kd_time_rfc3339(int64_t ms, int millis, char *buf, size_t len);

/** Parse RFC 3339 ("...Z" or "+hh:mm", optional fraction) into ms. 0 or KD_EPARSE. */
int kd_time_parse_rfc3339(const char *s, int64_t *ms) KD_WUR;

/**
 * The absolute time ms milliseconds (>= 0) from now on clock clk, for
 * pthread_cond_timedwait: CLOCK_REALTIME for a condition variable with
 * default attributes, CLOCK_MONOTONIC for one set to it. Returns ts.
 */
struct timespec *kd_deadline_ts(clockid_t clk, int64_t ms, struct timespec *ts);

/** Sleep, restarting after signals, for ms milliseconds. */
void kd_sleep_ms(int64_t ms);

#endif
