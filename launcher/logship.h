/*
 * Shipping worker output to the controller: every line kdet-launch writes
 * is also queued (logq.h) and a thread of its own POSTs batches of them to
 * the controller API (POST .../trials/NAME/logs), so that a trial's logs
 * outlive its pods. The workers never wait for it: the queue is bounded and
 * drops its oldest lines when the controller is slow or away.
 */
#ifndef KD_LAUNCHER_LOGSHIP_H
#define KD_LAUNCHER_LOGSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/** How long kdet-launch waits at exit for the last lines to reach the controller. */
#define KD_LOGSHIP_FLUSH_MS 5000
/** The longest a single POST may take before it is retried. */
#define KD_LOGSHIP_POST_TIMEOUT_MS 10000
/** The cap on the controller's answer. */
#define KD_LOGSHIP_MAX_ANSWER 4096

struct kd_logship;

struct kd_logship_opts {
    const char *url;    /* the API's base URL (KDET_CONTROLLER_URL); copied */
    const char *ns;     /* the trial's namespace; copied */
    const char *trial;  /* the Trial's (or, with task, the Task's) name; copied */
    bool task;          /* the lines are a task's (KDET_TASK_ID) */
    const char *token;  /* the trial token; copied, never logged */
    const char *run_id; /* the attempt (KDET_RUN_ID); copied */
    int node_rank;      /* names the sender in batch keys */
    size_t max_bytes;   /* the queue's bound; 0: KD_LOGQ_MAX_BYTES */
};

struct kd_logship_stats {
    uint64_t lines_queued;  /* lines given to kd_logship_line */
    uint64_t lines_sent;    /* lines in batches the controller acknowledged */
    uint64_t batches_sent;  /* batches the controller acknowledged */
    uint64_t lines_dropped; /* dropped because the queue was full */
    uint64_t lines_refused; /* in batches the controller refused (4xx) */
    uint64_t lines_unsent;  /* still queued when the flush timed out */
    uint64_t retries;       /* POSTs that failed and were tried again */
};

/**
 * Whether the environment asks for shipping: KDET_CONTROLLER_URL,
 * KDET_TOKEN, KDET_TRIAL_ID (or KDET_TASK_ID: a task's lines) and KDET_NAMESPACE are set
 * (KDET_TRIAL_ID may be "namespace/name") and KDET_LOG_SHIPPING is not "0". Fills o from the
 * environment (the strings point into it) with run_id and node_rank given.
 */
bool kd_logship_from_env(struct kd_logship_opts *o, const char *run_id, int node_rank);

/**
 * Start the shipping thread. Call before other threads use libcurl (it
 * runs curl_global_init). 0 and *out, or a negative KD_E* with err set.
 */
int kd_logship_start(const struct kd_logship_opts *o, struct kd_logship **out, char *err) KD_WUR;

/**
 * Queue one line (a then b, without newline) of worker `rank` on stream 0
 * (stdout) or 1 (stderr). Thread-safe; never blocks on I/O: a full queue
 * drops its oldest lines.
 */
void kd_logship_line(struct kd_logship *s, int rank, int stream, const char *a, size_t alen,
                     const char *b, size_t blen);

/**
 * Send what is queued (retrying failed POSTs) for at most timeout_ms, then
 * stop the thread and free everything; *st (may be NULL) gets the counts.
 * When the time runs out while a POST is still in flight, that thread is
 * left to finish on its own and its memory is not freed (the process is
 * about to exit). NULL-safe.
 */
void kd_logship_stop(struct kd_logship *s, int64_t timeout_ms, struct kd_logship_stats *st);

#endif
