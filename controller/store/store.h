/*
 * The controller's PostgreSQL store: schema migrations, a connection pool,
 * write-behind metrics ingestion that survives database outages, and the
 * registry of experiments, trials, checkpoints, searcher snapshots, events
 * and templates. docs/store.md describes the schema and the guarantees.
 *
 * Thread safety: every function taking a struct kd_store may be called from
 * any thread at once, except kd_store_close. Functions block on the network
 * (bounded by the pool's wait and the statement timeout).
 *
 * Ownership: json_t results are new references the caller frees with
 * json_decref; json_t arguments are borrowed. Strings in results live in
 * the returned json_t.
 */
#ifndef KD_CONTROLLER_STORE_H
#define KD_CONTROLLER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"
#include "metrics/metrics.h"

struct kd_store;

struct kd_store_opts {
    /** libpq connection string or URI (required). Never logged: it may hold a password. */
    const char *conninfo;
    /** Connections in the pool (default 4, at most 64). */
    int pool_size;
    /** How long a caller waits for a free connection (default 5000 ms). */
    int pool_wait_ms;
    /**
     * statement_timeout set on every connection (0: the default, 30000 ms).
     * The client also gives up this long plus 5 s after sending a
     * statement (a hung server). Negative: keep the server's setting and
     * wait for answers without a client-side limit.
     */
    int statement_timeout_ms;
    /** Reconnect back-off: first and longest wait (defaults 100 and 5000 ms). */
    int backoff_min_ms;
    int backoff_max_ms;
    /** Skip migrations at open (for tools that only read). */
    bool no_migrate;
    /**
     * Directory for the metrics spool file (metrics.spool). NULL: no disk
     * spill, so while the database is down at most mem_limit bytes of
     * metrics are held and durable puts time out.
     */
    const char *spool_dir;
    /**
     * Optional process metrics (lib/metrics; borrowed, NULL: none): a
     * histogram with one label "op" of statement latency in seconds
     * ("statement" for the pool's statements, "metrics_write" for the
     * writer's batches), and a counter without labels of metric rows
     * written (duplicates not counted).
     */
    struct kd_metric *db_seconds;
    struct kd_metric *rows_written;
    /** Bytes of metric batches held in memory before spilling (default 64 MiB). */
    size_t mem_limit;
    /** Bytes the spool file may grow to (default 1 GiB); beyond that puts fail with KD_EAGAIN. */
    size_t spool_limit;
    /** Most metric rows written in one transaction (default 5000). */
    int flush_rows;
    /**
     * The metric overviews (kd_store_metrics_overview) are folded by a
     * thread at most this often while rows come (default 500 ms);
     * negative: no thread (kd_store_metrics_sketch folds when called).
     */
    int sketch_interval_ms;
};

/**
 * Connect, apply the migrations (unless no_migrate) and start the metrics
 * writer thread. When a spool file from an earlier run exists, its batches
 * are written before any new one. Fails with KD_ECONNECT when the database
 * cannot be reached (the caller retries), or with the failing migration
 * named in err. On success *out is the store; free it with kd_store_close.
 */
int kd_store_open(const struct kd_store_opts *opts, struct kd_store **out, char *err) KD_WUR;

/**
 * Stop the writer (waiting up to 5 s for queued metrics to reach the
 * database or the spool), close every connection and free the store.
 * Metric batches still only in memory then are spooled when a spool_dir is
 * set. NULL-safe. No other call may be running on the store.
 */
void kd_store_close(struct kd_store *s);

/** One round trip to the database (for readiness probes). 0 or KD_ECONNECT/KD_ETIMEDOUT. */
int kd_store_ping(struct kd_store *s, char *err) KD_WUR;

/* ---- migrations -------------------------------------------------------- */

/** Apply the compiled-in migrations (done by kd_store_open). Idempotent; safe across processes. */
int kd_store_migrate(struct kd_store *s, char *err) KD_WUR;

/** The newest schema version this binary knows. */
int kd_store_schema_version(void);

/* ---- metrics ----------------------------------------------------------- */

enum kd_metric_kind {
    KD_METRIC_TRAINING = 0,
    KD_METRIC_VALIDATION = 1,
    KD_METRIC_PROFILING = 2,
};

/** "training" | "validation" | "profiling" -> kind. 0 or KD_EINVAL. */
int kd_metric_kind_parse(const char *s, enum kd_metric_kind *out) KD_WUR;
const char *kd_metric_kind_name(enum kd_metric_kind k);

#define KD_STORE_MAX_BATCH_ROWS 10000
#define KD_STORE_MAX_KEY 128
#define KD_STORE_MAX_BATCH_BYTES (8u << 20)

struct kd_metric_row {
    int64_t step;        /* batches completed when measured, >= 0 */
    int64_t reported_ms; /* wall clock, ms since the epoch; 0 = now */
    json_t *metrics;     /* a JSON object: name -> value (borrowed) */
    /*
     * Optional: the same object as the client wrote it, one line of valid
     * JSON (borrowed; NULL: encode metrics). Stored as it is, which saves
     * encoding it again.
     */
    const char *raw;
    size_t raw_len;
};

struct kd_metric_batch {
    int64_t trial_id;
    enum kd_metric_kind kind;
    /**
     * Idempotency key, unique per trial, chosen by the sender and reused
     * when it retries (for instance "rank0-17"): 1-128 printable bytes.
     */
    const char *key;
    const struct kd_metric_row *rows;
    size_t n; /* 1..KD_STORE_MAX_BATCH_ROWS */
};

/**
 * Queue a batch of metric rows for trial `trial_id`. The batch is checked
 * first (every bad field is named in err, nothing is queued). Then:
 * - timeout_ms > 0: block until the batch is acknowledged, that is
 *   committed in PostgreSQL or appended and fsynced to the spool file; only
 *   then is 0 returned. KD_ETIMEDOUT when that did not happen in time (the
 *   batch may still be written later; a retry with the same key is safe).
 * - timeout_ms == 0: return once queued in memory (not durable).
 * Fails with KD_EAGAIN when memory and spool are both full. A batch whose
 * key was already written for this trial is skipped at write time, so
 * retries never duplicate rows. Thread-safe.
 */
int kd_store_metrics_put(struct kd_store *s, const struct kd_metric_batch *b, int timeout_ms,
                         char *err) KD_WUR;

/**
 * Wait until every batch queued so far, and everything in the spool, is
 * committed in PostgreSQL (not just spooled). 0, or KD_ETIMEDOUT.
 */
int kd_store_metrics_flush(struct kd_store *s, int timeout_ms) KD_WUR;

struct kd_store_metrics_stats {
    uint64_t queued_batches; /* in memory, not yet written */
    uint64_t queued_bytes;
    uint64_t spool_bytes;     /* in the spool file, not yet written */
    uint64_t written_batches; /* committed by this process */
    uint64_t written_rows;
    uint64_t duplicate_batches; /* skipped: key already stored */
    uint64_t orphan_batches;    /* skipped: the trial no longer exists */
    uint64_t spilled_batches;   /* ever written to the spool */
    uint64_t rejected_batches;  /* refused by the database after acknowledgement (a bug) */
    bool db_up;                 /* the writer's last attempt succeeded */
};

void kd_store_metrics_stats(struct kd_store *s, struct kd_store_metrics_stats *out);

/**
 * The metric series of one trial and kind, ordered by step:
 * [{"step":N,"reported_at":"RFC3339","metrics":{...}}, ...]. With
 * max_points > 0 and more rows than that, the server returns max_points
 * rows evenly spaced by position, always the first and the last.
 */
int kd_store_metrics_series(struct kd_store *s, int64_t trial_id, enum kd_metric_kind kind,
                            int max_points, json_t **out, char *err) KD_WUR;

/** What kd_store_metrics_overview is asked. */
struct kd_series_ask {
    /** Points per trial and metric at most: 4..10000 (M4 keeps up to 4 a bucket). */
    int max_points;
    /**
     * > 0: about this many points per metric for the whole experiment:
     * max_points is lowered to budget / (the experiment's trials).
     */
    int64_t budget;
    /** Only steps from..to (0 <= from <= to < 2^53), read from the rows. */
    bool range;
    int64_t from, to;
};

/** How kd_store_metrics_overview answered. */
struct kd_series_got {
    int max_points;   /* per trial, after the budget */
    int buckets;      /* across the steps drawn: all trials share the buckets */
    int64_t width;    /* steps per bucket, a power of two; buckets start at step 0 */
    int64_t from, to; /* with a range: the steps covered, whole buckets around it */
    bool rows;        /* all read from the metric rows (profiling, or overviews far behind) */
};

/**
 * The series of every trial of an experiment and one kind, for a chart
 * that draws them all, appended to out as the JSON text
 * [{"trial_id":N,"series":{"loss":{"steps":[...],"values":[...]},...}},...]
 * by trial id, numeric values only, trials without any left out. Each
 * series is downsampled by M4 (per bucket of steps its first, lowest,
 * highest and last point, which draws the same line as all its points at
 * a pixel per bucket): got->buckets buckets of got->width steps, the
 * largest power of two <= max_points / 4 (at most 256) from step 0, or
 * with ask->range that many of at least (to - from + 1) / buckets steps
 * from `from`. A step reported twice counts once, the newest row. The
 * whole range comes from the overviews that the store keeps per trial and
 * kind (metric_sketches, 32 and 256 buckets, folded in by a thread shortly
 * after rows are written; rows newer than them are folded in here), so a
 * page of 1,000 trials costs 1,000 small rows; a range, the profiling
 * kind, or overviews far behind the rows read the rows. Blocks.
 */
int kd_store_metrics_overview(struct kd_store *s, int64_t experiment_id, enum kd_metric_kind kind,
                              const struct kd_series_ask *ask, struct kd_buf *out,
                              struct kd_series_got *got, char *err) KD_WUR;

/**
 * Fold up to max_rows (<= 0: 20,000) metric rows written since the last
 * fold into the overviews, in one transaction; *folded (may be NULL) gets
 * how many were read, 0 when none were left. The store's own thread does
 * this (sketch_interval_ms); for tests and tools. Blocks.
 */
int kd_store_metrics_sketch(struct kd_store *s, int max_rows, int *folded, char *err) KD_WUR;

/**
 * Metric rows stored after row id after_id, oldest first, at most limit
 * (1..10000), of one trial (trial_id > 0) or of every trial of an
 * experiment (experiment_id > 0): [{"id","trial_id","kind","step",
 * "reported_at","metrics"}]. For live streams: poll with the last id seen.
 * Ids grow in commit order because one writer thread inserts metrics.
 */
int kd_store_metrics_since(struct kd_store *s, int64_t experiment_id, int64_t trial_id,
                           int64_t after_id, int limit, json_t **out, char *err) KD_WUR;

/**
 * Per trial of an experiment, the validation row with the best numeric
 * value of `metric` (smallest when smaller_is_better):
 * [{"trial_id":N,"step":N,"value":X,"metrics":{...}}, ...] by trial id.
 */
int kd_store_best_validations(struct kd_store *s, int64_t experiment_id, const char *metric,
                              bool smaller_is_better, json_t **out, char *err) KD_WUR;

/* ---- profiler samples (profiler.c) ------------------------------------- */

#define KD_STORE_PROFILER_MAX_QUERY 5000 /* rows per kd_store_profiler_query */

/**
 * A trial's profiler rows: metric rows of kind profiling, whose metrics name their
 * "group" ("system": the node's CPU, memory, network, disk and GPUs; "timing": the
 * Trainer's phases). Of one group (group NULL or "": every profiling row), with an id
 * above after_id, oldest first: the first `limit` (1..KD_STORE_PROFILER_MAX_QUERY), or
 * with `tail` the last `limit`. [{"id","step","reported_at","metrics"}]; unlike
 * kd_store_metrics_series, rows of the same step are all kept (samples are taken in
 * time, not per step). KD_EINVAL for a bad limit or a group over 64 bytes.
 */
int kd_store_profiler_query(struct kd_store *s, int64_t trial_id, const char *group,
                            int64_t after_id, int limit, bool tail, json_t **out, char *err) KD_WUR;

/* ---- experiments and trials ------------------------------------------- */

#define KD_STORE_MAX_NAME 253
#define KD_STORE_MAX_STATE 64

struct kd_store_experiment {
    const char *uid; /* the Experiment resource's metadata.uid */
    const char *namespace_;
    const char *name;
    json_t *config;    /* the expanded experiment config (borrowed) */
    const char *state; /* ACTIVE, PAUSED, COMPLETED, CANCELED, ERROR, ... */
};

/**
 * Insert the experiment or, when its uid exists, update name, config and
 * state. *id gets its numeric id (shown to users). 0 or KD_E*.
 */
int kd_store_experiment_upsert(struct kd_store *s, const struct kd_store_experiment *e, int64_t *id,
                               char *err) KD_WUR;

/** The id of the experiment with this uid; KD_ENOTFOUND when it has no row. */
int kd_store_experiment_lookup(struct kd_store *s, const char *uid, int64_t *id, char *err) KD_WUR;

/** Set the state; a terminal state (COMPLETED, CANCELED, ERROR, DELETED) also sets ended_at. */
int kd_store_experiment_set_state(struct kd_store *s, int64_t id, const char *state,
                                  char *err) KD_WUR;

/** One experiment as JSON (id, uid, namespace, name, config, state, timestamps). */
int kd_store_experiment_get(struct kd_store *s, int64_t id, json_t **out, char *err) KD_WUR;

/** Experiments by id descending, optionally in one namespace (NULL = all); limit <= 1000. */
int kd_store_experiments_list(struct kd_store *s, const char *namespace_, int limit, int offset,
                              json_t **out, char *err) KD_WUR;

/**
 * Delete an experiment and, by cascade, its trials, metrics, checkpoint
 * rows, snapshots and events (`det experiment delete`, retention). The
 * checkpoint files are the caller's to delete first. KD_ENOTFOUND when absent.
 */
int kd_store_experiment_delete(struct kd_store *s, int64_t id, char *err) KD_WUR;

struct kd_store_trial {
    const char *uid; /* the Trial resource's metadata.uid */
    int64_t experiment_id;
    const char *request_id; /* the searcher's request id */
    json_t *hparams;        /* borrowed */
    int64_t seed;
    const char *state;
};

/** Insert or update (hparams, state) a trial by uid; *id gets its numeric id. */
int kd_store_trial_upsert(struct kd_store *s, const struct kd_store_trial *t, int64_t *id,
                          char *err) KD_WUR;
int kd_store_trial_set_state(struct kd_store *s, int64_t id, const char *state, char *err) KD_WUR;
/** The id of the trial with this uid; KD_ENOTFOUND when it has no row (yet). */
int kd_store_trial_lookup(struct kd_store *s, const char *uid, int64_t *id, char *err) KD_WUR;
/** Raise the trial's restarts to `restarts` (the Trial's status.restarts, >= 0); a lower count
 * (a stale read) leaves the stored one. 0 or KD_E* (KD_ENOTFOUND: no such trial). */
int kd_store_trial_set_restarts(struct kd_store *s, int64_t id, int restarts, char *err) KD_WUR;
/** restarts += 1; *restarts gets the new count (may be NULL). */
int kd_store_trial_add_restart(struct kd_store *s, int64_t id, int *restarts, char *err) KD_WUR;
int kd_store_trial_get(struct kd_store *s, int64_t id, json_t **out, char *err) KD_WUR;
/** The trials of an experiment by id ascending. */
int kd_store_trials_list(struct kd_store *s, int64_t experiment_id, json_t **out, char *err) KD_WUR;

/* ---- checkpoints -------------------------------------------------------- */

struct kd_store_checkpoint {
    const char *uuid;
    int64_t trial_id;
    int64_t steps_completed;
    const char *storage_path; /* where lib/storage put it (URL or path) */
    int64_t size_bytes;
    json_t *metadata; /* borrowed; NULL = {} */
};

/**
 * Register a checkpoint (state ACTIVE). Registering the same uuid again
 * with the same trial is a no-op (retries are safe); with another trial it
 * fails with KD_ECONFLICT.
 */
int kd_store_checkpoint_add(struct kd_store *s, const struct kd_store_checkpoint *c,
                            char *err) KD_WUR;

/** Mark deleted (after GC removed the files); KD_ENOTFOUND for an unknown uuid. */
int kd_store_checkpoint_mark_deleted(struct kd_store *s, const char *uuid, char *err) KD_WUR;

/**
 * Checkpoint GC: mark an ACTIVE checkpoint DELETED and, in the same
 * transaction, record an event (kind "checkpoint_gc", decision "delete",
 * `reason`, `details` plus {"uuid"}) for its experiment and trial. A
 * checkpoint already DELETED is left as it is and no event is added, so
 * calling it again (a retry, a GC repeated after a crash) is harmless.
 * *marked (may be NULL) says whether this call changed the row.
 * KD_ENOTFOUND for an unknown uuid.
 */
int kd_store_checkpoint_gc(struct kd_store *s, const char *uuid, const char *reason,
                           json_t *details, bool *marked, char *err) KD_WUR;

/**
 * Checkpoints of a trial (trial_id > 0) or of a whole experiment
 * (experiment_id > 0), by steps then time; with include_deleted false only
 * ACTIVE ones. Each element: uuid, trial_id, experiment_id,
 * steps_completed, storage_path, size_bytes, metadata, state, reported_at,
 * deleted_at, protected (a model version references it: GC keeps it).
 */
int kd_store_checkpoints_list(struct kd_store *s, int64_t experiment_id, int64_t trial_id,
                              bool include_deleted, json_t **out, char *err) KD_WUR;

/** The longest checkpoint uuid kd_store_checkpoint_get accepts (lib/storage's limit). */
#define KD_STORE_MAX_UUID 127

/**
 * One checkpoint by its exact uuid, whatever its state (a DELETED one is
 * described with its state and deleted_at), optionally only when its
 * experiment is in `namespace_` (NULL or "": any). *out: uuid, trial_id,
 * trial_uid, experiment_id, experiment (its name), experiment_uid,
 * namespace, steps_completed, storage_path, size_bytes, metadata, state,
 * reported_at, deleted_at. A uuid that is empty, longer than
 * KD_STORE_MAX_UUID, starts with '.' or holds a byte outside [A-Za-z0-9._-]
 * fails with KD_EINVAL naming "uuid"; an unknown one (or one of another
 * namespace) with KD_ENOTFOUND.
 */
int kd_store_checkpoint_get(struct kd_store *s, const char *namespace_, const char *uuid,
                            json_t **out, char *err) KD_WUR;

/* ---- searcher snapshots ------------------------------------------------- */

/**
 * Save the searcher snapshot with sequence number seq (increasing per
 * experiment). Saving the same (experiment, seq) again replaces it. Only
 * the newest 5 snapshots of an experiment are kept.
 */
int kd_store_snapshot_save(struct kd_store *s, int64_t experiment_id, int64_t seq, json_t *snapshot,
                           char *err) KD_WUR;

/** The newest snapshot; KD_ENOTFOUND when there is none. */
int kd_store_snapshot_latest(struct kd_store *s, int64_t experiment_id, int64_t *seq, json_t **out,
                             char *err) KD_WUR;

/* ---- events ------------------------------------------------------------- */

struct kd_store_event {
    int64_t experiment_id;
    int64_t trial_id;     /* 0 when the event is about the whole experiment */
    const char *kind;     /* "searcher", "early_stopping", "checkpoint_gc", ... */
    const char *decision; /* "create", "stop", "promote", "delete", ... */
    const char *reason;   /* human-readable, up to 4096 bytes */
    json_t *details;      /* borrowed; NULL = {} */
};

/** Record a decision; *id (may be NULL) gets the event id. Not retried on connection loss. */
int kd_store_event_add(struct kd_store *s, const struct kd_store_event *e, int64_t *id,
                       char *err) KD_WUR;

/** Events of an experiment with id > after_id, oldest first, at most limit (<= 1000). */
int kd_store_events_list(struct kd_store *s, int64_t experiment_id, int64_t after_id, int limit,
                         json_t **out, char *err) KD_WUR;

/* ---- trial logs ---------------------------------------------------------- */

/** The longest stored line, in bytes; a longer one is cut with a marker saying so. */
#define KD_STORE_LOG_LINE_MAX 17408
/** Lines in one batch, at most. */
#define KD_STORE_LOG_MAX_LINES 10000
/** Lines one query returns, at most. */
#define KD_STORE_LOG_MAX_QUERY 1000
/** The default cap on a trial's stored log text, in bytes. */
#define KD_STORE_LOG_DEFAULT_CAP (64 << 20)
/** The longest regular expression or substring a query takes. */
#define KD_STORE_LOG_MAX_PATTERN 1024

struct kd_log_line {
    int rank;         /* the worker's rank; -1: the launcher itself */
    bool is_stderr;   /* the stream: stderr, else stdout */
    int64_t ts_ms;    /* when the launcher read it, ms since the epoch */
    const char *text; /* UTF-8 without NUL (borrowed) */
    size_t len;
};

struct kd_log_batch {
    int64_t trial_id;   /* the trial's lines (> 0), or (0) the task's of task_id */
    const char *run_id; /* the attempt's KDET_RUN_ID; "" when unknown */
    /** Idempotency key, 1-128 printable ASCII bytes, reused when the sender retries. */
    const char *key;
    const struct kd_log_line *lines;
    size_t n;        /* 1..KD_STORE_LOG_MAX_LINES */
    int64_t task_id; /* > 0: a task's lines (trial_id 0) */
};

struct kd_log_put_result {
    size_t stored;  /* lines written (the retention marker not counted) */
    size_t dropped; /* lines not kept: the trial is at its cap */
    bool duplicate; /* the key was stored before: nothing written */
    bool capped;    /* this batch reached the cap (its marker line was written) */
};

/** The retention decision for one batch (pure; kd_store_logs_put applies it). */
struct kd_log_retain {
    size_t keep;       /* the first `keep` lines are stored, the rest dropped */
    bool marker;       /* add the one "limit reached" marker line */
    int64_t add_bytes; /* what the kept lines add to the trial's count */
};

/**
 * Which lines of a batch (their text lengths lens[0..n)) a trial whose
 * stored log text is `used` bytes keeps under `cap` (<= 0: no cap): lines
 * in order while the total stays within the cap; the first line that does
 * not fit and every later one are dropped (a log never has holes before its
 * end). The first batch to drop lines adds one marker (`capped` says one
 * was added before: then nothing more is kept). Pure and thread-safe.
 */
void kd_store_logs_retain(int64_t used, bool capped, int64_t cap, const size_t *lens, size_t n,
                          struct kd_log_retain *out);

/**
 * Store a batch of a trial's log lines, in order, under the trial's cap of
 * max_bytes (<= 0: none), and fill *res (may be NULL). The batch is
 * checked first (the field named in err, KD_EINVAL): key, run_id (at most
 * 128 bytes), 1..KD_STORE_LOG_MAX_LINES lines, ranks >= -1, text without
 * NUL (lines longer than KD_STORE_LOG_LINE_MAX are cut with a marker). A
 * key already stored for the trial stores nothing (res->duplicate), so a
 * retry is safe. The batch and the trial's byte count commit together.
 * Batches of one experiment are written one at a time, so the lines' ids
 * grow in commit order within an experiment (what following relies on).
 * KD_ENOTFOUND when the trial has no row. Thread-safe; blocks.
 */
int kd_store_logs_put(struct kd_store *s, const struct kd_log_batch *b, int64_t max_bytes,
                      struct kd_log_put_result *res, char *err) KD_WUR;

struct kd_log_query {
    int64_t experiment_id; /* > 0: the lines of every trial of this experiment... */
    int64_t trial_id;      /* ...else (> 0) of this trial */
    int64_t after_id;      /* only lines with a larger id (> 0) */
    int64_t before_id;     /* only lines with a smaller id (> 0) */
    bool tail;             /* the last `limit` lines, else the first */
    int limit;             /* 1..KD_STORE_LOG_MAX_QUERY */
    const char *regex;     /* PostgreSQL's POSIX regular expression on the text (NULL: all) */
    const char *contains;  /* a substring of the text (NULL: all) */
    int64_t task_id;       /* experiment_id and trial_id 0: the lines of this task (> 0) */
};

/**
 * A trial's or an experiment's log lines, oldest first:
 * [{"id","trial_id","run_id","rank","stream","timestamp","line"}] (ids grow
 * with the order lines were stored); a task's with "task_id" instead of
 * "trial_id". An invalid regex is KD_EINVAL with
 * PostgreSQL's reason. Thread-safe; blocks.
 */
int kd_store_logs_query(struct kd_store *s, const struct kd_log_query *q, json_t **out,
                        char *err) KD_WUR;

/**
 * Remove every log line and batch key of the experiment's trials (in
 * chunks, so each statement stays short) and reset their byte counts;
 * *lines (may be NULL) gets how many lines went. For a deleted
 * experiment. Thread-safe; blocks.
 */
int kd_store_logs_delete(struct kd_store *s, int64_t experiment_id, int64_t *lines,
                         char *err) KD_WUR;

/* ---- tasks (notebooks, commands, shells, TensorBoards) ------------------- */

struct kd_store_task {
    const char *uid; /* the Task resource's metadata.uid */
    const char *namespace_;
    const char *name;
    const char *kind;  /* notebook | command | shell | tensorboard */
    const char *owner; /* spec.owner; NULL: "" */
    json_t *config;    /* borrowed; NULL: {} */
    const char *state;
};

/** Insert or update (config, state) a task by uid; *id gets its numeric id. Thread-safe. */
int kd_store_task_upsert(struct kd_store *s, const struct kd_store_task *t, int64_t *id,
                         char *err) KD_WUR;
/**
 * Record a task's state (QUEUED ... TERMINATED); with TERMINATED also its
 * exit code (exit_code < 0: none) and end reason (NULL: none), and ended_at.
 * KD_ENOTFOUND when it has no row. Thread-safe.
 */
int kd_store_task_set_state(struct kd_store *s, int64_t id, const char *state, int exit_code,
                            const char *end_reason, char *err) KD_WUR;
/** The task's id by the Task's uid (KD_ENOTFOUND when it has no row). Thread-safe. */
int kd_store_task_id(struct kd_store *s, const char *uid, int64_t *id, char *err) KD_WUR;
/** {"id","uid","namespace","name","kind","owner","state","exit_code","end_reason",
 * "created_at","ended_at"} of task id. KD_ENOTFOUND. Thread-safe. */
int kd_store_task_get(struct kd_store *s, int64_t id, json_t **out, char *err) KD_WUR;

/* ---- templates ---------------------------------------------------------- */

/** Create or replace a template (name: 1-253 bytes; config: a JSON object). */
int kd_store_template_set(struct kd_store *s, const char *name, json_t *config, char *err) KD_WUR;
/** *out gets {"name":..., "config":{...}, "updated_at":...}; KD_ENOTFOUND when absent. */
int kd_store_template_get(struct kd_store *s, const char *name, json_t **out, char *err) KD_WUR;
/** All templates by name. */
int kd_store_templates_list(struct kd_store *s, json_t **out, char *err) KD_WUR;
/** KD_ENOTFOUND when absent. */
int kd_store_template_delete(struct kd_store *s, const char *name, char *err) KD_WUR;

/* ---- users and their tokens (users.c) ------------------------------------- */

/* A user name is at most this many bytes (the API also checks its form). */
#define KD_STORE_MAX_USER 64
/* A token's description, at most. */
#define KD_STORE_MAX_DESCRIPTION 256

struct kd_store_user {
    const char *name;
    bool admin;
    /** The namespaces the user may use: a JSON array of strings ("*": all); NULL: none. */
    const json_t *namespaces;
};

/** Add a user; *id (may be NULL) gets its id. KD_EEXIST when the name is taken. */
int kd_store_user_create(struct kd_store *s, const struct kd_store_user *u, int64_t *id,
                         char *err) KD_WUR;
/**
 * The user `name` as an administrator of every namespace, made when absent
 * (the bootstrap administrator); *id gets its id. Idempotent.
 */
int kd_store_user_ensure_admin(struct kd_store *s, const char *name, int64_t *id, char *err) KD_WUR;
/**
 * Change a user: admin (NULL: unchanged) and namespaces (a JSON array of
 * strings; NULL: unchanged). KD_ENOTFOUND when there is no such user.
 */
int kd_store_user_update(struct kd_store *s, const char *name, const bool *admin,
                         const json_t *namespaces, char *err) KD_WUR;
/** {"id","name","admin","namespaces":[...],"created_at","tokens":N live}; KD_ENOTFOUND. */
int kd_store_user_get(struct kd_store *s, const char *name, json_t **out, char *err) KD_WUR;
/** Every user as kd_store_user_get gives them, by name. */
int kd_store_users_list(struct kd_store *s, json_t **out, char *err) KD_WUR;

/**
 * Record a token of user_id by the hex SHA-256 of its text (64 lower-case
 * hex digits; the token itself is never stored). *id gets the token's id.
 * KD_ENOTFOUND when the user does not exist.
 */
int kd_store_token_add(struct kd_store *s, int64_t user_id, const char *sha256_hex,
                       const char *description, int64_t *id, char *err) KD_WUR;
/**
 * One token with its user, for authentication: {"id","sha256","revoked":bool,
 * "user":{"id","name","admin","namespaces"}}. KD_ENOTFOUND when absent.
 * The caller compares the hash (in constant time) and never shows it.
 */
int kd_store_token_get(struct kd_store *s, int64_t id, json_t **out, char *err) KD_WUR;
/**
 * Tokens without their hashes, newest first: {"id","user","description",
 * "created_at","revoked_at"}; of the user `user`, or of everyone (NULL).
 */
int kd_store_tokens_list(struct kd_store *s, const char *user, json_t **out, char *err) KD_WUR;
/** Revoke a token (again: no change). KD_ENOTFOUND when there is no such token. */
int kd_store_token_revoke(struct kd_store *s, int64_t id, char *err) KD_WUR;

/* ---- the model registry (models.c) ---------------------------------------- */

/* A model's name: 1 to KD_STORE_MODEL_MAX_NAME of [A-Za-z0-9._-], starting with a letter or digit.
 */
#define KD_STORE_MODEL_MAX_NAME 128
/* A description or a version's comment, at most. */
#define KD_STORE_MODEL_MAX_TEXT 4096
/* A version's name, at most. */
#define KD_STORE_MODEL_MAX_VNAME 256
/* Labels of one model or version, at most, and the bytes of one (no control characters). */
#define KD_STORE_MODEL_MAX_LABELS 64
#define KD_STORE_MODEL_MAX_LABEL 128
/* metadata as compact JSON text, at most. */
#define KD_STORE_MODEL_MAX_METADATA (64u << 10)
/* Models one list returns, at most. */
#define KD_STORE_MODEL_MAX_LIST 1000

/** Whether s is a model name (see KD_STORE_MODEL_MAX_NAME). Pure. */
bool kd_store_model_name_ok(const char *s);

/**
 * Check labels (NULL: none): an array of at most KD_STORE_MODEL_MAX_LABELS
 * strings of 1 to KD_STORE_MODEL_MAX_LABEL bytes without control
 * characters. 0, or KD_EINVAL naming field ("labels[2]") in err. Pure.
 */
int kd_store_model_labels_check(const json_t *labels, const char *field, char *err) KD_WUR;

/** How a list of models is ordered. */
enum kd_model_sort {
    KD_MODEL_SORT_NAME = 0,
    KD_MODEL_SORT_CREATED,
    KD_MODEL_SORT_UPDATED,
    KD_MODEL_SORT_VERSIONS, /* by how many versions it has */
};

/**
 * sort ("name", "created", "updated", "versions"; NULL: "name") and order
 * ("asc", "desc"; NULL: asc for names, desc otherwise) into *sort and *desc.
 * KD_EINVAL naming "sort" or "order" in err. Pure.
 */
int kd_store_model_sort_parse(const char *sort, const char *order, enum kd_model_sort *out,
                              bool *desc, char *err) KD_WUR;

struct kd_store_model {
    const char *namespace_;
    const char *name;        /* kd_store_model_name_ok */
    const char *description; /* NULL: "" */
    const char *owner;       /* the user who made it; NULL: "" */
    const json_t *labels;    /* an array of strings; NULL: none */
    const json_t *metadata;  /* an object; NULL: {} */
};

/**
 * Make a model. *out (may be NULL) gets it as kd_store_model_get's "model".
 * KD_EEXIST when the namespace has a model of that name; KD_EINVAL naming
 * the field. Thread-safe; blocks.
 */
int kd_store_model_create(struct kd_store *s, const struct kd_store_model *m, json_t **out,
                          char *err) KD_WUR;

/**
 * A model with its versions: {"model": {id, namespace, name, description,
 * labels, metadata, owner, archived, versions (how many), latest_version
 * (0: none), created_at, updated_at}, "versions": [...]} with versions as
 * kd_store_model_versions_list gives them. KD_ENOTFOUND. Thread-safe.
 */
int kd_store_model_get(struct kd_store *s, const char *namespace_, const char *name, json_t **out,
                       char *err) KD_WUR;

struct kd_store_model_query {
    const char *namespace_;
    const char *name_contains; /* a substring of the name, any case (NULL: all) */
    const char *label;         /* only models with this label (NULL: all) */
    int archived;              /* 0: not archived, 1: archived only, -1: both */
    enum kd_model_sort sort;
    bool desc;
    int limit; /* 1..KD_STORE_MODEL_MAX_LIST */
    int offset;
};

/** The models of a namespace as kd_store_model_get's "model", filtered and ordered (ties by id). */
int kd_store_models_list(struct kd_store *s, const struct kd_store_model_query *q, json_t **out,
                         char *err) KD_WUR;

/** A change to a model or a version; a NULL (or, for archived, negative) field is left as it is. */
struct kd_store_model_patch {
    const char *description;     /* models */
    int archived;                /* models: 1 or 0; -1 unchanged */
    const char *name;            /* versions: its name */
    const char *comment;         /* versions */
    const json_t *labels;        /* replaces the labels */
    const json_t *add_labels;    /* then these are added (once each)... */
    const json_t *remove_labels; /* ...and these removed */
    const json_t *metadata;      /* replaces the metadata (an object) */
};

/** Change model ns/name; *out (may be NULL) gets it as kd_store_model_get's "model". KD_ENOTFOUND.
 */
int kd_store_model_update(struct kd_store *s, const char *namespace_, const char *name,
                          const struct kd_store_model_patch *p, json_t **out, char *err) KD_WUR;

/**
 * Delete model ns/name and its versions. *unprotected (may be NULL) gets
 * the experiments of the versions' checkpoints, each once, as
 * [{"experiment": name, "experiment_uid": uid}] (their GC may now collect
 * them). KD_ENOTFOUND. Thread-safe.
 */
int kd_store_model_delete(struct kd_store *s, const char *namespace_, const char *name,
                          json_t **unprotected, char *err) KD_WUR;

struct kd_store_version_reg {
    const char *namespace_;
    const char *model;
    const char *checkpoint_uuid;
    const char *name;    /* NULL: "" */
    const char *comment; /* NULL: "" */
    const char *owner;   /* NULL: "" */
    const json_t *labels;
    const json_t *metadata;
};

/**
 * Register checkpoint checkpoint_uuid as the next version (1, 2, ...; never
 * reused after a deletion) of the model, capturing what the store knows of
 * it now: experiment (id, name, uid), trial (id, uid), steps completed, the
 * trial's hyperparameters, the validation metrics reported at the
 * checkpoint's steps (the newest row; {} when none), and the experiment's
 * config. The checkpoint must be ACTIVE in the checkpoint registry and of an
 * experiment of the same namespace. *out (may be NULL) gets the version as
 * kd_store_model_version_get gives it. KD_ENOTFOUND naming "model" or
 * "checkpoint_uuid"; KD_ECONFLICT when the checkpoint is DELETED. One
 * statement: concurrent registrations get distinct numbers. Thread-safe.
 */
int kd_store_model_version_add(struct kd_store *s, const struct kd_store_version_reg *r,
                               json_t **out, char *err) KD_WUR;

/**
 * One version: {model, version, name, comment, labels, metadata, owner,
 * checkpoint_uuid, checkpoint_state (ACTIVE, DELETED, or null when the row
 * is gone), storage_path, size_bytes, experiment_id, experiment,
 * experiment_uid, trial_id, trial_uid, steps_completed, hparams, metrics,
 * config, created_at, updated_at}. KD_ENOTFOUND. Thread-safe.
 */
int kd_store_model_version_get(struct kd_store *s, const char *namespace_, const char *model,
                               int64_t version, json_t **out, char *err) KD_WUR;

/** The versions of a model, by number, as kd_store_model_version_get without "config". */
int kd_store_model_versions_list(struct kd_store *s, const char *namespace_, const char *model,
                                 json_t **out, char *err) KD_WUR;

/** Change a version (name, comment, labels, metadata); *out (may be NULL) the version. */
int kd_store_model_version_update(struct kd_store *s, const char *namespace_, const char *model,
                                  int64_t version, const struct kd_store_model_patch *p,
                                  json_t **out, char *err) KD_WUR;

/**
 * Delete a version; *out (may be NULL) gets it as it was (its
 * experiment_uid: whose GC may now collect its checkpoint). KD_ENOTFOUND.
 */
int kd_store_model_version_delete(struct kd_store *s, const char *namespace_, const char *model,
                                  int64_t version, json_t **out, char *err) KD_WUR;

/**
 * The version of the model whose captured validation metric `metric` is
 * best (smallest when smaller_is_better; ties: the lower version), as
 * kd_store_model_versions_list gives it plus "value". KD_ENOTFOUND naming
 * "metric" when no version has that metric as a number (or no model).
 */
int kd_store_model_best(struct kd_store *s, const char *namespace_, const char *model,
                        const char *metric, bool smaller_is_better, json_t **out, char *err) KD_WUR;

/** Whether a model version references checkpoint uuid (checkpoint GC must keep it). */
int kd_store_checkpoint_protected(struct kd_store *s, const char *uuid, bool *out,
                                  char *err) KD_WUR;

#endif
