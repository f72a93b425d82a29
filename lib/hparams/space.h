/*
 * Hyperparameter spaces in Determined's schema: parse the experiment
 * config's `hyperparameters` object (const, int, double, log, categorical,
 * nested objects, bare values as const), count and enumerate the grid, and
 * sample points with a kd_rng. A point is a vector of doubles, one per
 * leaf, which the searchers manipulate and kd_hp_build turns into JSON.
 */
#ifndef KD_HPARAMS_SPACE_H
#define KD_HPARAMS_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"
#include "hparams/rng.h"

/* Hard caps on what a config may declare. */
#define KD_HP_MAX_PARAMS 1024 /* leaves in one space */
#define KD_HP_MAX_DEPTH 16    /* nesting of objects */
#define KD_HP_MAX_GRID 100000 /* grid points (one trial each) */
#define KD_HP_MAX_CATEGORIES 10000

enum kd_hp_type {
    KD_HP_CONST = 0,
    KD_HP_INT,
    KD_HP_DOUBLE,
    KD_HP_LOG,
    KD_HP_CATEGORICAL,
};

/**
 * One leaf. Its coordinate in a point vector means:
 *   const: unused (0); int: the integer value; double: the value;
 *   log: the exponent (value = base^x); categorical: the index into vals.
 */
struct kd_hp_param {
    char *path;  /* dotted path for messages: "optimizer.lr" */
    char **keys; /* path components, nkeys of them */
    size_t nkeys;
    enum kd_hp_type type;
    double minval; /* int/double: bounds; log: exponent bounds */
    double maxval;
    double base;  /* log only (default 10) */
    int count;    /* grid points; 0 when not given */
    json_t *val;  /* const: the value (owned) */
    json_t *vals; /* categorical: the choices, an array (owned) */
    size_t nvals;
};

struct kd_hp_space {
    struct kd_hp_param *params; /* leaves in document order, depth first */
    size_t n;
};

/**
 * Parse a `hyperparameters` object (may be NULL: an empty space). On error
 * returns KD_EINVAL with the JSON path and cause in err
 * ("hyperparameters.lr.maxval: must be greater than minval (0.1)").
 * The caller frees *out with kd_hp_space_free. Does not keep `hp`.
 */
int kd_hp_space_parse(const json_t *hp, struct kd_hp_space **out, char *err) KD_WUR;

/** Free a space; NULL-safe. */
void kd_hp_space_free(struct kd_hp_space *sp);

/** Lowercase type name ("int", "log", ...). */
const char *kd_hp_type_name(enum kd_hp_type t);

/**
 * Number of grid points: the product over leaves of const 1, categorical
 * len(vals), int min(count, maxval-minval+1), double/log count. KD_EINVAL
 * naming the leaf when an int/double/log has no count; KD_ETOOBIG when the
 * product exceeds KD_HP_MAX_GRID.
 */
int kd_hp_grid_size(const struct kd_hp_space *sp, uint64_t *n, char *err) KD_WUR;

/**
 * The idx-th grid point (0 <= idx < grid size) into x[sp->n]. The first
 * leaf varies slowest. Values follow Determined: int points are
 * round(min + i*(max-min)/(count-1)), a single point is the midpoint;
 * double and log points are evenly spaced (log in the exponent).
 */
void kd_hp_grid_point(const struct kd_hp_space *sp, uint64_t idx, double *x);

/** Draw one point uniformly: int inclusive, double/log exponent in [min, max). */
void kd_hp_sample(const struct kd_hp_space *sp, struct kd_rng *r, double *x);

/** Draw one leaf's coordinate uniformly (as kd_hp_sample does). */
double kd_hp_sample_param(const struct kd_hp_param *p, struct kd_rng *r);

/** Clamp (and round for int, categorical) a coordinate into the leaf's domain. */
double kd_hp_clamp(const struct kd_hp_param *p, double v);

/** The JSON value of one leaf at coordinate v; a new reference. */
json_t *kd_hp_value(const struct kd_hp_param *p, double v);

/**
 * Build the hyperparameter object for point x: nested objects as declared,
 * leaves in document order. Returns a new reference.
 */
json_t *kd_hp_build(const struct kd_hp_space *sp, const double *x);

#endif
