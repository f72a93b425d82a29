/*
 * Internals shared by the searcher core and its methods: the trial table,
 * the operation emitters and the method ops struct. Not for use outside
 * controller/searcher/.
 */
#ifndef KD_SEARCHER_SEARCHER_INT_H
#define KD_SEARCHER_SEARCHER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "hparams/rng.h"
#include "hparams/space.h"
#include "searcher/searcher.h"

/* The loss used when a trial exits before reporting: worse than any metric. */
#define KD__WORST 1.79769313486231570e+308

struct kd__trial {
    char id[KD_SEARCH_IDLEN];
    uint32_t seed;
    double *x;        /* point in the space (sp->n coordinates) */
    int64_t parent;   /* index of the PBT parent, -1 when none */
    bool created;     /* trial_created received */
    bool closing;     /* Close emitted */
    bool finished;    /* trial_closed or trial_exited_early received */
    bool exited;      /* it was trial_exited_early */
    int exit_reason;  /* enum kd_search_exit when exited */
    bool awaiting;    /* a ValidateAfter is outstanding */
    int64_t target;   /* length of the last ValidateAfter */
    int64_t last_len; /* length of the last validation */
    double best;      /* best loss so far (smaller is better internally), +inf if none */
    double last;      /* last loss */
    size_t nhist, caphist;
    int64_t *hlen;   /* every validation: length ... */
    double *hloss;   /* ... and loss */
    double pat_best; /* patience rule: best loss that reset the counter */
    int64_t pat_since;
    /* method fields */
    int64_t b;        /* ASHA bracket; PBT round it was created in */
    int64_t r;        /* ASHA rung */
    bool outstanding; /* ASHA: counted in its rung's outstanding trials */
    double m;         /* PBT: loss of the current round */
    double time;      /* the last reported value of searcher.time_metric (0 before any) */
};

enum kd__rule_type { KD__RULE_PATIENCE, KD__RULE_THRESHOLD, KD__RULE_MEDIAN };

struct kd__rule {
    enum kd__rule_type type;
    int64_t patience;
    double min_delta;
    double threshold; /* as a loss (negated when larger is better) */
    double threshold_raw;
    bool end_experiment;
    int64_t grace_period;
    int64_t min_trials;
};

struct kd_searcher;

/** One search method; one file per method. */
struct kd__method {
    const char *name;
    /** Parse the method's options from `searcher` (paths in err); allocate s->mstate. */
    int (*init)(struct kd_searcher *s, const json_t *scfg, char *err);
    void (*free)(struct kd_searcher *s);
    int (*initial)(struct kd_searcher *s);
    /** Trial t reached its ValidateAfter length with `loss`. */
    int (*validated)(struct kd_searcher *s, struct kd__trial *t, double loss);
    /**
     * With searcher.time_metric: every validation of a live trial that carried the time
     * metric's value `time` (not decreasing), instead of `validated`. NULL for methods
     * without time_metric.
     */
    int (*timed)(struct kd_searcher *s, struct kd__trial *t, double loss, double time);
    /** Trial t is gone (closed, or exited early: t->exited). Called once per trial. */
    int (*finished)(struct kd_searcher *s, struct kd__trial *t);
    double (*progress)(const struct kd_searcher *s);
    /** The method's own state (beyond the trial table) or NULL. */
    json_t *(*snapshot)(const struct kd_searcher *s);
    int (*restore)(struct kd_searcher *s, const json_t *st, char *err);
};

extern const struct kd__method kd__single, kd__grid, kd__random, kd__bayesian, kd__asha, kd__pbt;

struct kd_searcher {
    const struct kd__method *m;
    void *mstate;
    json_t *config; /* {"hyperparameters":..., "searcher":...}: kept for snapshots */
    uint64_t exp_seed;
    struct kd_hp_space *sp;
    struct kd_rng rng;

    char metric[128];
    bool smaller_is_better;
    char unit[16];         /* batches | records | epochs */
    int64_t max_length;    /* 0 when not given (pbt); adaptive_asha with time_metric: max_time */
    char time_metric[128]; /* adaptive_asha: rungs in this metric's reported values; "" = lengths */
    int64_t max_trials;    /* 0 when not given */
    int64_t max_concurrent;
    struct kd__rule rules[KD_SEARCH_MAX_RULES];
    size_t nrules;

    struct kd__trial *trials;
    size_t ntrials, captrials;
    bool initialized; /* initial received */
    bool shutdown;
    int64_t nfinished, nexited, nerrored, ninvalid;

    struct kd_search_ops *ops; /* where the current event's ops go */
};

/* Emitters (searcher.c). */

/** Create a trial at point x (copied) with an optional PBT parent (-1) and reason. */
struct kd__trial *kd__create(struct kd_searcher *s, const double *x, int64_t parent,
                             const char *reason);
/** ValidateAfter(length) unless t is closing or finished; returns whether it was emitted. */
bool kd__validate_after(struct kd_searcher *s, struct kd__trial *t, int64_t length);
/** The same with an explanation (e.g. an ASHA promotion). */
bool kd__validate_after_why(struct kd_searcher *s, struct kd__trial *t, int64_t length,
                            const char *reason);
/** Close(t) unless already closing or finished. */
void kd__close(struct kd_searcher *s, struct kd__trial *t, const char *reason);
/** Shutdown once; later calls do nothing. */
void kd__shutdown(struct kd_searcher *s, const char *reason, bool failure);
/** Neither closing nor finished. */
bool kd__alive(const struct kd__trial *t);
/** Trials created and not finished. */
int64_t kd__nalive(const struct kd_searcher *s);

/* Early stopping (early_stop.c). */
int kd__rules_parse(struct kd_searcher *s, const json_t *list, char *err);
/** Evaluate the rules after t's latest validation; may emit Close / Shutdown. */
void kd__rules_eval(struct kd_searcher *s, struct kd__trial *t);

/*
 * The shared driver of single, grid, random and bayesian: keep up to
 * max_concurrent trials alive, train each to max_length, close it after its
 * validation, create the next until `total` trials exist (not counting
 * invalid_hp exits, which are replaced), then Shutdown.
 */
struct kd__simple {
    int64_t total; /* trials to run */
    int64_t counted;
    /** Fill x with the next point; idx counts the points drawn so far. */
    void (*propose)(struct kd_searcher *s, int64_t idx, double *x);
    int64_t drawn;
    bool redraw_invalid; /* random, bayesian: replace invalid_hp trials */
};
/**
 * The bayesian searcher's belief about pending trials (bayesian.c): each of
 * the np points px (rows of `dim` coordinates) gets, in out[i], the loss of
 * its nearest observation among the n points ox with losses oloss (the
 * earliest row on a tie; +inf when n is 0). Numeric coordinates are
 * normalized to [0,1] and compared by squared distance; a coordinate with
 * cat[d] set is a category index, and a mismatch counts 1. Pure.
 */
void kd__tpe_believe(const bool *cat, size_t dim, const double *ox, const double *oloss, size_t n,
                     const double *px, size_t np, double *out);
/** Parse {batches|records|epochs: N} at `path`. */
int kd__parse_length(const json_t *v, const char *path, char *unit, int64_t *len, char *err);
/** KD_EINVAL "searcher.max_length: required by the X searcher" when it is missing. */
int kd__need_max_length(const struct kd_searcher *s, char *err);
/*
 * The simple driver's method entry points: s->mstate must be, or begin with,
 * a struct kd__simple. kd__simple_free frees a bare one.
 */
int kd__simple_initial(struct kd_searcher *s);
int kd__simple_validated(struct kd_searcher *s, struct kd__trial *t, double loss);
int kd__simple_finished(struct kd_searcher *s, struct kd__trial *t);
double kd__simple_progress(const struct kd_searcher *s);
json_t *kd__simple_snapshot(const struct kd_searcher *s);
int kd__simple_restore(struct kd_searcher *s, const json_t *st, char *err);
void kd__simple_free(struct kd_searcher *s);

/* JSON helpers for snapshots and configs (searcher.c). */
int kd__get_int(const json_t *o, const char *key, const char *path, bool required, int64_t min,
                int64_t *out, char *err);
int kd__get_num(const json_t *o, const char *key, const char *path, bool required, double *out,
                char *err);
json_t *kd__u64_json(uint64_t v);
int kd__json_u64(const json_t *j, uint64_t *out);

#endif
