/*
 * The queue of worker output lines waiting to be shipped to the controller:
 * bounded in bytes (when full, the oldest lines are dropped and counted, and
 * the next batch starts with one marker line saying how many), lines cut at
 * a cap with a marker, text made valid UTF-8, and batches cut by size, line
 * count or age. Pure: no I/O, no clock, no threads (the shipper locks).
 */
#ifndef KD_LAUNCHER_LOGQ_H
#define KD_LAUNCHER_LOGQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/** The longest line shipped, in bytes of text; a longer one is cut with a marker. */
#define KD_LOGQ_LINE_MAX 16384
/** A batch holds at most this many bytes of line text... */
#define KD_LOGQ_BATCH_BYTES 65536
/** ...and this many lines... */
#define KD_LOGQ_BATCH_LINES 2048
/** ...and goes out at the latest this long after its oldest line was queued. */
#define KD_LOGQ_BATCH_MS 1000
/** The default bound of a queue (line text plus KD_LOGQ_OVERHEAD per line). */
#define KD_LOGQ_MAX_BYTES (4u << 20)
/** What one queued line costs besides its text, for the bound. */
#define KD_LOGQ_OVERHEAD 64
/** The rank of lines the launcher itself adds (the drop marker). */
#define KD_LOGQ_RANK_LAUNCHER (-1)

enum kd_logq_stream { KD_LOGQ_STDOUT = 0, KD_LOGQ_STDERR = 1 };

struct kd_logq_line {
    struct kd_logq_line *next;
    int64_t ts_ms;   /* wall clock when the launcher read it */
    int64_t mono_ms; /* monotonic clock then (the batch's age) */
    int rank;        /* the worker's rank, or KD_LOGQ_RANK_LAUNCHER */
    int stream;      /* enum kd_logq_stream */
    size_t len;      /* bytes of text */
    char text[];     /* valid UTF-8 without NUL, NUL-terminated */
};

struct kd_logq {
    struct kd_logq_line *head, *tail;
    size_t nlines;
    size_t bytes;     /* text + KD_LOGQ_OVERHEAD per line */
    size_t max_bytes; /* the bound */
    uint64_t dropped; /* lines dropped since the last marker was taken */
    int64_t dropped_ts_ms;
    uint64_t dropped_total;
};

/** A batch taken from the queue: the lines in order; free with kd_logq_batch_free. */
struct kd_logq_batch {
    struct kd_logq_line *head;
    size_t nlines;
    size_t bytes; /* text bytes */
};

/** An empty queue bounded at max_bytes (0: KD_LOGQ_MAX_BYTES). */
void kd_logq_init(struct kd_logq *q, size_t max_bytes);

/** Free every queued line. NULL-safe. */
void kd_logq_free(struct kd_logq *q);

/**
 * Queue one line, the concatenation of a (alen bytes) and b (blen bytes),
 * read at wall time ts_ms and monotonic time mono_ms: a trailing '\r' is
 * removed, text beyond KD_LOGQ_LINE_MAX bytes is cut (before a UTF-8
 * sequence, not inside it) and replaced by " [kdet-launch: line cut, N
 * bytes dropped]", invalid UTF-8 and NUL bytes become U+FFFD. When the
 * queue then holds more than its bound, the oldest lines are dropped and
 * counted. Never fails (aborts only on out-of-memory, as daemons do).
 */
void kd_logq_push(struct kd_logq *q, int rank, int stream, int64_t ts_ms, int64_t mono_ms,
                  const char *a, size_t alen, const char *b, size_t blen);

/**
 * Whether a batch should be taken now (mono_ms: the monotonic clock): the
 * queue holds a full batch (bytes or lines), its oldest line is
 * KD_LOGQ_BATCH_MS old, or `flushing` and anything (lines or a drop count)
 * is waiting.
 */
bool kd_logq_due(const struct kd_logq *q, int64_t mono_ms, bool flushing);

/**
 * Take the next batch into *b (emptied first): when lines were dropped,
 * first one marker line (rank KD_LOGQ_RANK_LAUNCHER, stderr) "kdet-launch:
 * N lines dropped: the log queue was full", then queued lines in order
 * until KD_LOGQ_BATCH_BYTES or KD_LOGQ_BATCH_LINES (at least one line).
 * Returns the number of lines taken.
 */
size_t kd_logq_take(struct kd_logq *q, struct kd_logq_batch *b);

/** Free a batch's lines. NULL-safe; the batch is empty afterwards. */
void kd_logq_batch_free(struct kd_logq_batch *b);

/**
 * The batch as the JSON body of POST .../trials/NAME/logs: {"key": key,
 * "run_id": run_id, "node_rank": node_rank, "lines": [{"rank", "stream",
 * "timestamp", "line"}]}. Caller frees. Aborts only on out-of-memory.
 */
char *kd_logq_batch_json(const struct kd_logq_batch *b, const char *key, const char *run_id,
                         int node_rank);

/** The wait before retry number `attempt` (1, 2, ...): 250 ms doubling, at most 8 s. */
int64_t kd_logq_backoff_ms(int attempt);

#endif
