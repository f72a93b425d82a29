/*
 * Internals shared by the store's files: the connection pool, the
 * migration runner and the metrics writer. Not for use outside
 * controller/store/ and its tests.
 */
#ifndef KD_CONTROLLER_STORE_INT_H
#define KD_CONTROLLER_STORE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "core/buf.h"
#include "store/store.h"

/* ---- pool.c ------------------------------------------------------------- */

struct kd_pool;

struct kd_pool_opts {
    const char *conninfo;
    int size;
    int wait_ms;
    int statement_timeout_ms;
    int backoff_min_ms;
    int backoff_max_ms;
};

/** Create a pool; connects lazily. Thread-safe afterwards. */
int kd_pool_open(const struct kd_pool_opts *o, struct kd_pool **out, char *err) KD_WUR;

/** Close every connection and free. No connection may be checked out. NULL-safe. */
void kd_pool_close(struct kd_pool *p);

/**
 * Check a connection out, connecting (or reconnecting) when needed. Blocks
 * up to the pool's wait for a free slot (KD_ETIMEDOUT); KD_ECONNECT when
 * the server cannot be reached or the pool is backing off after failures.
 * After a single failed connect the caller waits out the first back-off
 * (when its wait allows) and tries again; after two in a row it fails fast.
 */
int kd_pool_get(struct kd_pool *p, PGconn **out, char *err) KD_WUR;

/** Return a connection; a broken one is closed and reopened on a later get. */
void kd_pool_put(struct kd_pool *p, PGconn *c);

/** Open one connection outside the pool with the pool's settings; caller PQfinish()es it. */
int kd_pool_connect(const struct kd_pool_opts *o, PGconn **out, char *err) KD_WUR;

/* Extra time the client gives the server beyond statement_timeout before it cuts the connection. */
#define KD_STORE_CLIENT_GRACE_MS 5000

/**
 * PQexecParams with a client-side deadline: when no answer came within
 * timeout_ms (> 0), the connection is shut down (unusable afterwards),
 * *timed_out is set and NULL returned. timeout_ms <= 0 waits forever.
 */
PGresult *kd_pg_exec(PGconn *c, const char *sql, int n, const char *const *params, int timeout_ms,
                     bool *timed_out);

/** Map a failed result (or connection) to a KD_E* code and a message in err. */
int kd_pg_error(PGconn *c, const PGresult *r, const char *what, char *err);

/*
 * Taken first by every transaction that inserts into metrics (writer.c): the
 * transactions of every writer, in this process and in other controller
 * replicas, draw their ids and commit one at a time, so ids commit in order
 * and what a reader sees of metrics is always all the rows up to an id (the
 * overviews' mark, sketcher.c, relies on it). "kdem" in ASCII.
 */
#define KD_STORE_METRICS_LOCK_SQL "SELECT pg_advisory_xact_lock(1801741677, 0)"

/* ---- copy.c --------------------------------------------------------------- */

/** Append s (len bytes) to b escaped for COPY's text format. 0 or KD_ENOMEM. */
int kd_copy__escape(struct kd_buf *b, const char *s, size_t len) KD_WUR;

/** "YYYY-MM-DD HH:MM:SS.mmm+00" for epoch milliseconds ms (>= 0) into out. */
int kd_copy__time(int64_t ms, char *out, size_t len) KD_WUR;

/**
 * Encode a checked batch (a row without reported_ms gets now_ms) both ways
 * in one pass, appending to two buffers: `copy` gets COPY text lines for
 * metrics (trial_id, kind, step, metrics, reported_at, batch_key), `line`
 * the spool line {"n":rows,"t":trial,"k":"kind","key":"...",
 * "r":[[step,ms,{...}],...]} and '\n'. 0, KD_ENOMEM or a buffer's KD_ETOOBIG.
 */
int kd_copy__encode(const struct kd_metric_batch *mb, int64_t now_ms, struct kd_buf *copy,
                    struct kd_buf *line) KD_WUR;

/**
 * Run `sql` (a COPY ... FROM STDIN) and send data (len bytes) with a
 * client-side deadline as kd_pg_exec: on timeout the connection is shut
 * down, *timed_out set and NULL returned. Otherwise the final result
 * (caller PQclear()s; NULL when the connection broke). Blocks.
 */
PGresult *kd_pg_copy_in(PGconn *c, const char *sql, const char *data, size_t len, int timeout_ms,
                        bool *timed_out);

/* ---- migrate.c ---------------------------------------------------------- */

struct kd_migration {
    int version; /* 1, 2, 3, ... in order */
    const char *name;
    const char *sql; /* one or more statements, run in one transaction */
};

/** The compiled-in migrations (schema.c). */
extern const struct kd_migration kd_store__migrations[];
extern const size_t kd_store__nmigrations;

/**
 * Apply the migrations in `m` newer than the database's version, each in
 * its own transaction, under a session advisory lock so that concurrent
 * processes apply each one once. Refuses a database newer than `m`.
 */
int kd_store__migrate_conn(PGconn *c, const struct kd_migration *m, size_t n, char *err) KD_WUR;

/* ---- writer.c ------------------------------------------------------------ */

struct kd_writer;

int kd_writer__start(struct kd_store *s, struct kd_writer **out, char *err) KD_WUR;
void kd_writer__stop(struct kd_writer *w);

/**
 * The batching policy of one write: whether the next queued batch
 * (item_rows rows, item_bytes bytes) joins a chunk that already holds
 * `taken` batches of `rows` rows and `bytes` bytes. The first batch always
 * joins; after a refused chunk (`solo`) batches go one by one; otherwise
 * up to flush_rows rows and max_bytes bytes. Pure: 1 (take) or 0.
 */
int kd_writer__take(size_t taken, size_t rows, size_t bytes, size_t item_rows, size_t item_bytes,
                    size_t flush_rows, size_t max_bytes, bool solo);

/* ---- sketch.c ------------------------------------------------------------ */

/* The two overviews kept per trial and kind: at most this many buckets of 2^shift steps. */
#define KD_SKETCH_COARSE 32
#define KD_SKETCH_FINE 256

struct kd_pt {
    int64_t step;
    double v;
};

/** One metric's points; sorted by distinct step once settled. */
struct kd_series {
    char *name;
    struct kd_pt *pt;
    size_t n, cap;
};

/** A kind's metrics by name. Zero-initialise; kd_sketch__free releases. */
struct kd_series_set {
    struct kd_series *s;
    size_t n, cap;
};

/**
 * The bucket width's log2 for a series whose last step is max_step: the
 * smallest shift >= min_shift with max_step >> shift < buckets. Pure.
 */
int kd_sketch__shift(int64_t max_step, int buckets, int min_shift);

/**
 * How many buckets a trial's series gets for max_points points: the
 * largest power of two <= max_points / 4 (M4 keeps up to 4 points a
 * bucket), at least 1, at most KD_SKETCH_FINE. Pure.
 */
int kd_sketch__buckets(int max_points);

/**
 * M4 in place: p (n points sorted by distinct step) becomes, per bucket
 * step >> shift, its first, lowest, highest and last point (each once, in
 * step order; ties go to the earlier step). Returns the points kept. Pure.
 */
size_t kd_sketch__m4(struct kd_pt *p, size_t n, int shift);

/** The series of set called name, added empty when missing. */
struct kd_series *kd_sketch__series(struct kd_series_set *set, const char *name);

/** Append a point (any order; kd_sketch__settle sorts). */
void kd_sketch__add(struct kd_series *s, int64_t step, double v);

/** Sort by step; of points with the same step the one added last stays. */
void kd_sketch__settle(struct kd_series *s);

/** Settle then M4 every series of set at shift. */
void kd_sketch__reduce(struct kd_series_set *set, int shift);

/** Keep only the points of steps from..to. */
void kd_sketch__clip(struct kd_series_set *set, int64_t from, int64_t to);

/**
 * Add a row's metrics (a JSON object) at step: its numbers (integers and
 * finite reals; not bools, strings or objects) to the series of their
 * names. Raises *max_step to step.
 */
void kd_sketch__add_metrics(struct kd_series_set *set, int64_t step, const json_t *metrics,
                            int64_t *max_step);

/**
 * Add a stored row's metrics (JSON object text, len bytes) at step: its
 * numbers (integers and finite reals; not bools, strings or objects) to
 * the series of their names. Raises *max_step to step. 0 or KD_EPARSE.
 */
int kd_sketch__add_row(struct kd_series_set *set, int64_t step, const char *metrics, size_t len,
                       int64_t *max_step, char *err) KD_WUR;

/**
 * Append set as {"NAME":{"steps":[...],"values":[...]},...}, names sorted
 * (set is reordered), empty series left out, values with nine significant
 * digits. 0 or the buffer's KD_ETOOBIG.
 */
int kd_sketch__encode(struct kd_buf *b, struct kd_series_set *set) KD_WUR;

/** Add the points of kd_sketch__encode's text to set. 0 or KD_ECORRUPT. */
int kd_sketch__decode(struct kd_series_set *set, const char *text, size_t len, char *err) KD_WUR;

void kd_sketch__free(struct kd_series_set *set);

/* ---- sketcher.c ---------------------------------------------------------- */

struct kd_sketcher;

/** Start the thread that folds new metric rows into metric_sketches. */
int kd_sketcher__start(struct kd_store *s, struct kd_sketcher **out, char *err) KD_WUR;

/** Wake it: rows were committed. Thread-safe, never blocks. NULL-safe. */
void kd_sketcher__poke(struct kd_sketcher *k);

/** Stop and join the thread. NULL-safe. */
void kd_sketcher__stop(struct kd_sketcher *k);

/** The overviews a store keeps between folds (sketcher.c). */
struct kd_sketch_cache;
struct kd_sketch_cache *kd_sketch_cache__new(void);
void kd_sketch_cache__free(struct kd_sketch_cache *c);

/* ---- store.c ------------------------------------------------------------- */

struct kd_store {
    struct kd_store_opts opts;
    char *conninfo; /* owned copy */
    char *spool_dir;
    struct kd_pool_opts pool_opts;
    struct kd_pool *pool;
    struct kd_writer *writer;
    struct kd_sketcher *sketcher; /* NULL when sketch_interval_ms < 0 */
    struct kd_sketch_cache *sketch_cache;
};

/**
 * Run one parameterised statement on a pooled connection. *res (may be
 * NULL) gets the result, which the caller PQclear()s. When the pooled
 * connection turns out to be broken and `retry` is set (idempotent
 * statements only), tries the other pooled connections and then a new one.
 */
int kd_store__exec(struct kd_store *s, const char *what, const char *sql, int n,
                   const char *const *params, bool retry, PGresult **res, char *err) KD_WUR;

/**
 * Run one statement on connection c (checked out by the caller), with the
 * client-side deadline and the latency metric; no retry. *res (may be
 * NULL) gets the result. 0 or KD_E* with err.
 */
int kd_store__conn_exec(struct kd_store *s, PGconn *c, const char *what, const char *sql, int n,
                        const char *const *params, PGresult **res, char *err) KD_WUR;

/** A transaction's body: statements on c with kd_store__conn_exec; non-zero rolls back. */
typedef int (*kd_store_tx_fn)(struct kd_store *s, PGconn *c, void *ctx, char *err);

/**
 * Run fn inside BEGIN ... COMMIT on one pooled connection (ROLLBACK when fn
 * fails). A dead idle connection is replaced before BEGIN; nothing is
 * retried once fn has run, so fn's statements need not be idempotent, but
 * a lost COMMIT leaves the outcome unknown (KD_ECONNECT): callers make
 * their writes idempotent with keys.
 */
int kd_store__tx(struct kd_store *s, const char *what, kd_store_tx_fn fn, void *ctx,
                 char *err) KD_WUR;

/** Like kd_store__exec for a statement returning one row, one JSON column; *out is new. */
int kd_store__json(struct kd_store *s, const char *what, const char *sql, int n,
                   const char *const *params, json_t **out, char *err) KD_WUR;

#endif
