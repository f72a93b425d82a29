/* Small helpers shared by the searcher tests (header-only, static). */
#ifndef KD_TEST_SEARCHER_COMMON_H
#define KD_TEST_SEARCHER_COMMON_H

#include <math.h>
#include <string.h>

#include "sim.h"

static inline struct kd_searcher *new_searcher(const char *cfg_text, uint64_t seed)
{
    json_t *cfg = sim_config(cfg_text);
    struct kd_searcher *s = NULL;
    char err[KD_ERRLEN] = "";
    if (kd_searcher_new(cfg, seed, &s, err) != 0)
        fail_msg("searcher rejected the config: %s", err);
    json_decref(cfg);
    return s;
}

/* Count ops of a kind in a JSON array of ops. */
static inline int count_ops(const json_t *ops, const char *kind)
{
    size_t i;
    json_t *op;
    int n = 0;
    json_array_foreach(ops, i, op)
    {
        n += strcmp(json_string_value(json_object_get(op, "op")), kind) == 0;
    }
    return n;
}

/* Branin-Hoo on x in [-5, 10], y in [0, 15]; minimum 0.397887. */
static inline double branin(double x, double y)
{
    double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
    double q = y - b * x * x + c * x - 6;
    return q * q + 10 * (1 - t) * cos(x) + 10;
}

static inline double fn_branin(const json_t *hp, int64_t length, void *ctx)
{
    (void)length;
    (void)ctx;
    return branin(json_number_value(json_object_get(hp, "x")),
                  json_number_value(json_object_get(hp, "y")));
}

#endif
