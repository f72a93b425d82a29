/*
 * kdet's hyperparameter searchers: a deterministic, event-driven state
 * machine per experiment. Events go in (initial, trial_created,
 * validation_completed, trial_exited_early, trial_closed); operations come
 * out (Create, ValidateAfter, Close, Shutdown). All randomness comes from
 * the searcher's own xoshiro256** generator seeded from the experiment
 * seed, so the same seed and the same events give the same operations, and
 * a searcher restored from kd_searcher_snapshot() makes exactly the
 * decisions the original would have. docs/searchers.md is the user guide.
 */
#ifndef KD_SEARCHER_SEARCHER_H
#define KD_SEARCHER_SEARCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"

/* Request ids look like "r12-3fa9c01b": creation counter, then a hash of
 * (experiment seed, counter). Lowercase and digits, so they can suffix
 * Kubernetes object names. */
#define KD_SEARCH_IDLEN 32

/* Hard caps. */
#define KD_SEARCH_MAX_TRIALS 1000000 /* max_trials, grid size, population */
/* The operation length of single/random/grid without max_length: "until the code ends it". */
#define KD_SEARCH_OPEN_LENGTH 2147483647LL
#define KD_SEARCH_MAX_HISTORY 100000 /* validations kept per trial */
#define KD_SEARCH_MAX_RULES 16       /* early_stopping rules */

enum kd_search_op_type {
    KD_SEARCH_CREATE = 0,
    KD_SEARCH_VALIDATE_AFTER,
    KD_SEARCH_CLOSE,
    KD_SEARCH_SHUTDOWN,
};

/** One operation. Strings and hparams are owned by the op. */
struct kd_search_op {
    enum kd_search_op_type type;
    char request_id[KD_SEARCH_IDLEN]; /* "" for Shutdown */
    json_t *hparams;                  /* Create: the trial's hyperparameters */
    uint32_t seed;                    /* Create: the trial seed (31 bits) */
    char parent_id[KD_SEARCH_IDLEN];  /* Create: PBT parent, "" when none */
    int64_t length;                   /* ValidateAfter: train until this total length */
    char *reason;                     /* Close/Shutdown (and PBT Create): why; may be NULL */
    bool failure;                     /* Shutdown: the experiment failed */
};

/** A growing list of operations; zero-initialise it. */
struct kd_search_ops {
    struct kd_search_op *v;
    size_t n, cap;
};

/** Free every op and the array; the list is empty and reusable. NULL-safe. */
void kd_search_ops_free(struct kd_search_ops *ops);

/**
 * An op as one JSON object ({"op":"create","request_id":...}; the exact
 * shape is in docs/searchers.md). `unit` is the max_length unit
 * ("batches"...), written on validate_after. New reference.
 */
json_t *kd_search_op_to_json(const struct kd_search_op *op, const char *unit);

enum kd_search_exit {
    KD_SEARCH_EXIT_ERRORED = 0,
    KD_SEARCH_EXIT_USER_CANCELED,
    KD_SEARCH_EXIT_INVALID_HP,
};

/** "errored" | "user_canceled" | "invalid_hp" -> reason. 0 or KD_EINVAL. */
int kd_search_exit_parse(const char *s, enum kd_search_exit *out) KD_WUR;

struct kd_searcher;

/**
 * Create a searcher from an experiment config (jansson, Determined's
 * schema; only `hyperparameters` and `searcher` are read, defaults need not
 * be filled). Returns 0 or KD_EINVAL with the JSON path and cause in err
 * ("searcher.max_trials: expected a positive integer"). Does not keep
 * `config`. The caller frees *out with kd_searcher_free. A searcher is not
 * thread-safe: one caller at a time.
 */
int kd_searcher_new(const json_t *config, uint64_t exp_seed, struct kd_searcher **out,
                    char *err) KD_WUR;

/** NULL-safe. */
void kd_searcher_free(struct kd_searcher *s);

/*
 * Events. Each appends the resulting operations to `ops` (never clears
 * it) and returns 0, or KD_EINVAL / KD_ESTATE with the cause in err when
 * the event is malformed or does not fit the searcher's state (unknown
 * request id, a second `initial`, a length going backwards); a rejected
 * event changes nothing. None blocks.
 */
int kd_searcher_initial(struct kd_searcher *s, struct kd_search_ops *ops, char *err) KD_WUR;
int kd_searcher_trial_created(struct kd_searcher *s, const char *request_id,
                              struct kd_search_ops *ops, char *err) KD_WUR;
/**
 * A validation of `request_id` at total training `length` (in the
 * searcher's unit) gave `metric` (NaN or infinite counts as the worst
 * possible value). Early-stopping rules run on every validation; the
 * method acts when the trial reaches the length of its ValidateAfter.
 */
int kd_searcher_validation_completed(struct kd_searcher *s, const char *request_id, double metric,
                                     int64_t length, struct kd_search_ops *ops, char *err) KD_WUR;
/**
 * The same with the value `time` the validation reported for searcher.time_metric
 * (adaptive_asha with time_metric and max_time: its rungs are measured in that metric). `time`
 * is finite, >= 0 and never below the trial's previous one (KD_EINVAL otherwise). For a
 * searcher without time_metric, `time` is ignored.
 */
int kd_searcher_validation_timed(struct kd_searcher *s, const char *request_id, double metric,
                                 int64_t length, double time, struct kd_search_ops *ops,
                                 char *err) KD_WUR;
int kd_searcher_trial_exited_early(struct kd_searcher *s, const char *request_id,
                                   enum kd_search_exit reason, struct kd_search_ops *ops,
                                   char *err) KD_WUR;
int kd_searcher_trial_closed(struct kd_searcher *s, const char *request_id,
                             struct kd_search_ops *ops, char *err) KD_WUR;

/**
 * One event as JSON: {"event":"initial"}, {"event":"trial_created",
 * "request_id":ID}, {"event":"validation_completed","request_id":ID,
 * "metric":X,"length":N[,"time":T]}, {"event":"trial_exited_early","request_id":ID,
 * "reason":"errored"}, {"event":"trial_closed","request_id":ID}.
 * Errors name the field ("validation_completed.metric: expected a number").
 */
int kd_searcher_event(struct kd_searcher *s, const json_t *event, struct kd_search_ops *ops,
                      char *err) KD_WUR;

/** Progress of the whole search, 0..1 (1 once Shutdown was emitted). */
double kd_searcher_progress(const struct kd_searcher *s);

/** Whether Shutdown has been emitted. */
bool kd_searcher_done(const struct kd_searcher *s);

/** searcher.time_metric when the rungs are measured in it, else NULL. Owned by s. */
const char *kd_searcher_time_metric(const struct kd_searcher *s);

/** The method's name ("adaptive_asha") and the length unit ("batches"). Static strings. */
const char *kd_searcher_method(const struct kd_searcher *s);
const char *kd_searcher_unit(const struct kd_searcher *s);

/**
 * The complete state as JSON (config, experiment seed, generator state,
 * every trial, the method's state); a new reference. Plain JSON: store it
 * anywhere (an Experiment's status, PostgreSQL) and restore it later.
 */
json_t *kd_searcher_snapshot(const struct kd_searcher *s);

/**
 * Rebuild a searcher from a snapshot. Returns 0, or KD_EINVAL / KD_ECORRUPT
 * with the offending JSON path in err. Does not keep `snap`.
 */
int kd_searcher_restore(const json_t *snap, struct kd_searcher **out, char *err) KD_WUR;

#endif
