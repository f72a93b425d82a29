/*
 * A simulated controller for searcher tests: it answers every operation the
 * way the real controller would (trial_created after Create, a validation
 * after ValidateAfter, trial_closed after Close), in an order chosen by its
 * own seeded generator, and records every event and the operations each
 * one produced. For a searcher with time_metric, a trial with an operation
 * reports validations at growing times (time_step apart) until it is closed.
 */
#ifndef KD_TEST_SEARCHER_SIM_H
#define KD_TEST_SEARCHER_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "hparams/rng.h"
#include "searcher/searcher.h"

/** The metric a trial with hyperparameters hp reports after training `length`. */
typedef double (*sim_fn)(const json_t *hp, int64_t length, void *ctx);

struct sim_trial {
    char id[KD_SEARCH_IDLEN];
    json_t *hp;
    int stage;      /* 0: needs trial_created, 1: running, 2: needs trial_closed, 3: done */
    int64_t length; /* pending ValidateAfter, 0 when none */
    char parent[KD_SEARCH_IDLEN];
    uint32_t seed;
    int64_t done; /* a searcher with time_metric: the trial's time so far */
};

struct sim {
    struct kd_searcher *s;
    sim_fn fn;
    void *ctx;
    struct kd_rng r;
    bool shuffle;   /* answer trials in a random order */
    double p_error; /* probability a validation becomes trial_exited_early(errored) */
    struct sim_trial *t;
    size_t nt, capt;
    json_t *events; /* every event fed, in order */
    json_t *ops;    /* ops[i]: the operations event i produced (index 0: initial) */
    json_t *snaps;  /* when keep_snapshots: snapshot text after event i */
    bool keep_snapshots;
    bool shutdown;
    char shutdown_reason[256];
    bool shutdown_failure;
    double best;       /* best metric reported at the trial's final length */
    double progress;   /* the last progress() seen; sim_run fails the test if it decreases */
    int64_t time_step; /* a searcher with time_metric: time added per validation [1] */
};

void sim_init(struct sim *m, struct kd_searcher *s, sim_fn fn, void *ctx, uint64_t seed);
void sim_free(struct sim *m);

/** Run until Shutdown (and every trial closed) or max_events; returns events fed or -1. */
long sim_run(struct sim *m, long max_events);

/** Feed one recorded event to a searcher and return its ops as a JSON array (new ref). */
json_t *sim_feed(struct kd_searcher *s, const json_t *event);

/** Ops (a kd_search_ops) as a JSON array; frees the ops. */
json_t *sim_ops_json(struct kd_searcher *s, struct kd_search_ops *ops);

/** Build a config from JSON text (fails the test on a parse error). */
json_t *sim_config(const char *text);

#endif
