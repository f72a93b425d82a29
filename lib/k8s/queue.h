/*
 * A controller work queue with controller-runtime's semantics: keys are
 * de-duplicated, a key is never handed to two workers at once, failed keys
 * come back after a per-key exponential backoff, and keys can be delayed.
 */
#ifndef KD_K8S_QUEUE_H
#define KD_K8S_QUEUE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

struct kd_k8s_queue;

/** Backoff of kd_k8s_queue_add_rate_limited: base * 2^failures, capped. Zero: defaults. */
struct kd_k8s_queue_opts {
    long base_delay_ms; /* [5] */
    long max_delay_ms;  /* [1000000] (1000 s, as client-go) */
};

/** A new queue (opts may be NULL). Free with kd_k8s_queue_free after shutdown. */
struct kd_k8s_queue *kd_k8s_queue_new(const struct kd_k8s_queue_opts *opts);

/**
 * Shut down (if not yet), wait for the workers and free. No other call may
 * be in progress. NULL-safe.
 */
void kd_k8s_queue_free(struct kd_k8s_queue *q);

/**
 * Queue `key` (copied). A key already waiting is not queued twice; a key
 * being processed is queued again once its worker calls done. Ignored
 * after shutdown. Thread-safe, never blocks for long.
 */
void kd_k8s_queue_add(struct kd_k8s_queue *q, const char *key);

/**
 * Queue key after delay_ms (<= 0: now). When the key is already waiting
 * for a delay, the earlier time wins. Thread-safe.
 */
void kd_k8s_queue_add_after(struct kd_k8s_queue *q, const char *key, long delay_ms);

/** add_after with the key's next backoff delay; counts one more failure. Thread-safe. */
void kd_k8s_queue_add_rate_limited(struct kd_k8s_queue *q, const char *key);

/**
 * add_rate_limited with the delay at most cap_ms (<= 0: the queue's own
 * maximum): for failures whose cause comes back on its own, such as a
 * database restart, so that the key is seen again soon after. Thread-safe.
 */
void kd_k8s_queue_add_rate_limited_cap(struct kd_k8s_queue *q, const char *key, long cap_ms);

/**
 * The backoff delay after `failures` earlier failures: base_ms * 2^failures,
 * at most max_ms, and at most cap_ms when cap_ms > 0. Pure.
 */
long kd_k8s_queue_backoff_ms(long base_ms, long max_ms, int failures, long cap_ms);

/*
 * Pacing: a key whose reconcile took PACE_MIN_MS or more is not processed
 * again until PACE times as long (at most PACE_MAX_MS) has passed since it
 * ended (adds meanwhile wait for that time), so that one slow key (an
 * experiment of thousands of trials, whose every Trial event asks for
 * another pass) takes at most about a third of a worker and the events of
 * a burst share one pass; a one-off long pass (creating 5,000 Trials) does
 * not hold the next back for more than PACE_MAX_MS.
 */
#define KD_K8S_QUEUE_PACE 2
#define KD_K8S_QUEUE_PACE_MIN_MS 10
#define KD_K8S_QUEUE_PACE_MAX_MS 5000

/** The key is not processed again for ms from now (the workers call it). Thread-safe. */
void kd_k8s_queue_pace(struct kd_k8s_queue *q, const char *key, long ms);

/** Reset the key's failure count (after a success). Thread-safe. */
void kd_k8s_queue_forget(struct kd_k8s_queue *q, const char *key);

/** Failures counted for key since the last forget. Thread-safe. */
int kd_k8s_queue_num_requeues(struct kd_k8s_queue *q, const char *key);

/** Keys the queue holds any state for (waiting, delayed, paced, failing). Thread-safe. */
size_t kd_k8s_queue_tracked(struct kd_k8s_queue *q);

/** Keys ready now (not counting delayed or in-process ones). Thread-safe. */
size_t kd_k8s_queue_len(struct kd_k8s_queue *q);

/**
 * Block until a key is ready, then mark it processing and return it in
 * *key (malloc'd; caller frees after kd_k8s_queue_done). Returns 0, or
 * KD_ECANCELED once the queue is shut down and no ready key is left.
 * Thread-safe.
 */
int kd_k8s_queue_get(struct kd_k8s_queue *q, char **key) KD_WUR;

/** Mark key processed: if it was added meanwhile it is queued again. Thread-safe. */
void kd_k8s_queue_done(struct kd_k8s_queue *q, const char *key);

/**
 * The function a worker calls for each key. Return 0 for success (the key
 * is forgotten; set *requeue_after_ms > 0 to see it again after that
 * delay), or a negative KD_E* code to requeue it with backoff; with
 * *requeue_after_ms > 0 too, that backoff is at most *requeue_after_ms
 * (add_rate_limited_cap).
 */
typedef int (*kd_k8s_reconcile_fn)(const char *key, long *requeue_after_ms, void *ud);

/**
 * Start n worker threads (1..256) running get → fn → forget/requeue →
 * done. Call at most once. 0 or -errno from pthread_create.
 */
int kd_k8s_queue_start_workers(struct kd_k8s_queue *q, int n, kd_k8s_reconcile_fn fn,
                               void *ud) KD_WUR;

/**
 * Stop accepting keys and drop delayed ones. With drain, block until every
 * ready key has been processed and no key is in process (the workers, if
 * started, are joined); without drain, return at once (workers stop after
 * their current key). Thread-safe; idempotent.
 */
void kd_k8s_queue_shutdown(struct kd_k8s_queue *q, bool drain);

/** Whether kd_k8s_queue_shutdown was called. */
bool kd_k8s_queue_shutting_down(struct kd_k8s_queue *q);

#endif
