/*
 * Run one function over the indexes 0..n-1 on a few threads: for a batch of
 * independent blocking calls (API requests), not for computing.
 */
#ifndef KD_CORE_PAR_H
#define KD_CORE_PAR_H

#include <stddef.h>

/* The most threads kd_par_for starts. */
#define KD_PAR_MAX 16

/**
 * Call fn(i, ud) once for every i in [0, n), on up to `threads` threads
 * (the caller's among them; at most KD_PAR_MAX), each taking the next index
 * when it is done with one. Returns when every call has returned. With
 * threads <= 1, n <= 1, or when no thread can be started, the calls run one
 * after another on the caller's thread. fn must be thread-safe.
 */
void kd_par_for(size_t n, int threads, void (*fn)(size_t i, void *ud), void *ud);

#endif
