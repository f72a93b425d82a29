/*
 * Hyperparameter spaces: parsing Determined's `hyperparameters` schema
 * into a flat list of leaves, grid enumeration, uniform sampling and
 * building the JSON object a trial receives.
 */
#include "hparams/space.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"

const char *kd_hp_type_name(enum kd_hp_type t)
{
    switch (t) {
    case KD_HP_CONST: return "const";
    case KD_HP_INT: return "int";
    case KD_HP_DOUBLE: return "double";
    case KD_HP_LOG: return "log";
    case KD_HP_CATEGORICAL: return "categorical";
    }
    return "?";
}

static void param_free(struct kd_hp_param *p)
{
    free(p->path);
    for (size_t i = 0; i < p->nkeys; i++)
        free(p->keys[i]);
    free(p->keys);
    json_decref(p->val);
    json_decref(p->vals);
}

void kd_hp_space_free(struct kd_hp_space *sp)
{
    if (!sp)
        return;
    for (size_t i = 0; i < sp->n; i++)
        param_free(&sp->params[i]);
    free(sp->params);
    free(sp);
}

/* Parser state: the path components of the object being walked. */
struct walk {
    struct kd_hp_space *sp;
    size_t cap;
    const char *keys[KD_HP_MAX_DEPTH + 1];
    size_t depth;
    char *err;
};

static char *join_path(const char *const *keys, size_t n)
{
    struct kd_buf b = KD_BUF_INIT(1 << 16);
    char *s = NULL;
    int rc = kd_buf_puts(&b, "hyperparameters");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = kd_buf_putc(&b, '.');
        if (rc == 0)
            rc = kd_buf_puts(&b, keys[i]);
    }
    if (rc != 0) {
        kd_buf_free(&b);
        return kd_xstrdup("hyperparameters.(path too long)");
    }
    s = kd_buf_steal(&b);
    if (!s)
        kd_oom(1);
    return s;
}

static struct kd_hp_param *add_param(struct walk *w, enum kd_hp_type type)
{
    struct kd_hp_space *sp = w->sp;
    if (sp->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 8;
        sp->params = kd_xrealloc(sp->params, w->cap * sizeof(*sp->params));
    }
    struct kd_hp_param *p = &sp->params[sp->n++];
    memset(p, 0, sizeof(*p));
    p->type = type;
    p->nkeys = w->depth;
    p->keys = kd_xcalloc(w->depth ? w->depth : 1, sizeof(char *));
    for (size_t i = 0; i < w->depth; i++)
        p->keys[i] = kd_xstrdup(w->keys[i]);
    /* path without the "hyperparameters." prefix */
    char *full = join_path(w->keys, w->depth);
    p->path = kd_xstrdup(full + strlen("hyperparameters") + (w->depth ? 1 : 0));
    free(full);
    return p;
}

static int num_field(struct walk *w, const json_t *o, const char *key, bool required, bool integer,
                     double *out)
{
    const json_t *v = json_object_get(o, key);
    char *path = join_path(w->keys, w->depth);
    int rc = 0;
    if (!v) {
        if (required)
            rc = kd_seterr(w->err, KD_EINVAL, "%s.%s: required", path, key);
        goto out;
    }
    if (integer) {
        if (!json_is_integer(v)) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.%s: expected an integer", path, key);
            goto out;
        }
        *out = (double)json_integer_value(v);
        if (fabs(*out) > 9007199254740992.0) { /* 2^53: exact in a double */
            rc = kd_seterr(w->err, KD_EINVAL, "%s.%s: magnitude above 2^53", path, key);
            goto out;
        }
    } else {
        if (!json_is_number(v)) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.%s: expected a number", path, key);
            goto out;
        }
        *out = json_number_value(v);
        if (!isfinite(*out)) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.%s: must be finite", path, key);
            goto out;
        }
    }
out:
    free(path);
    return rc;
}

static int check_keys(struct walk *w, const json_t *o, const char *const *allowed)
{
    const char *k;
    const json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)o, k, v)
    {
        bool ok = false;
        for (size_t i = 0; allowed[i]; i++)
            ok = ok || strcmp(k, allowed[i]) == 0;
        if (!ok) {
            char *path = join_path(w->keys, w->depth);
            const char *sug = kd_suggest(k, allowed);
            rc = kd_seterr(w->err, KD_EINVAL, "%s.%s: unknown field for a %s hyperparameter%s%s%s",
                           path, k, json_string_value(json_object_get(o, "type")),
                           sug ? " (did you mean `" : "", sug ? sug : "", sug ? "`?)" : "");
            free(path);
            break;
        }
    }
    return rc;
}

static int parse_typed(struct walk *w, const json_t *o)
{
    static const char *const types[] = {"const", "int", "double", "log", "categorical", NULL};
    static const char *const k_const[] = {"type", "val", NULL};
    static const char *const k_int[] = {"type", "minval", "maxval", "count", NULL};
    static const char *const k_log[] = {"type", "minval", "maxval", "base", "count", NULL};
    static const char *const k_cat[] = {"type", "vals", NULL};
    const json_t *t = json_object_get(o, "type");
    char *path = join_path(w->keys, w->depth);
    struct kd_hp_param *p = NULL;
    int rc = 0;
    const char *ts = json_string_value(t);
    if (!ts) {
        rc = kd_seterr(w->err, KD_EINVAL,
                       "%s.type: expected a string (one of const, int, double, "
                       "log, categorical)",
                       path);
        goto out;
    }
    if (strcmp(ts, "const") == 0) {
        if ((rc = check_keys(w, o, k_const)) != 0)
            goto out;
        const json_t *v = json_object_get(o, "val");
        if (!v) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.val: required for a const hyperparameter", path);
            goto out;
        }
        p = add_param(w, KD_HP_CONST);
        p->val = json_deep_copy(v);
    } else if (strcmp(ts, "int") == 0 || strcmp(ts, "double") == 0 || strcmp(ts, "log") == 0) {
        enum kd_hp_type ty = ts[0] == 'i' ? KD_HP_INT : ts[0] == 'd' ? KD_HP_DOUBLE : KD_HP_LOG;
        double lo = 0, hi = 0, base = 10, count = 0;
        if ((rc = check_keys(w, o, ty == KD_HP_LOG ? k_log : k_int)) != 0)
            goto out;
        if ((rc = num_field(w, o, "minval", true, ty == KD_HP_INT, &lo)) != 0 ||
            (rc = num_field(w, o, "maxval", true, ty == KD_HP_INT, &hi)) != 0 ||
            (rc = num_field(w, o, "count", false, true, &count)) != 0 ||
            (ty == KD_HP_LOG && (rc = num_field(w, o, "base", false, false, &base)) != 0))
            goto out;
        if (ty == KD_HP_INT ? hi < lo : hi <= lo) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.maxval: must be %s minval (%g), got %g", path,
                           ty == KD_HP_INT ? "at least" : "greater than", lo, hi);
            goto out;
        }
        if (json_object_get(o, "count") && (count < 1 || count > KD_HP_MAX_GRID)) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.count: must be between 1 and %d, got %g", path,
                           KD_HP_MAX_GRID, count);
            goto out;
        }
        if (ty == KD_HP_LOG && (base <= 0 || base == 1)) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.base: must be positive and not 1, got %g", path,
                           base);
            goto out;
        }
        if (ty == KD_HP_LOG && (!isfinite(pow(base, lo)) || !isfinite(pow(base, hi)))) {
            rc = kd_seterr(w->err, KD_EINVAL,
                           "%s: base^minval .. base^maxval overflows a double (minval and "
                           "maxval are exponents)",
                           path);
            goto out;
        }
        p = add_param(w, ty);
        p->minval = lo;
        p->maxval = hi;
        p->base = base;
        p->count = (int)count;
    } else if (strcmp(ts, "categorical") == 0) {
        if ((rc = check_keys(w, o, k_cat)) != 0)
            goto out;
        const json_t *vals = json_object_get(o, "vals");
        if (!json_is_array(vals) || json_array_size(vals) == 0) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.vals: expected a non-empty list", path);
            goto out;
        }
        if (json_array_size(vals) > KD_HP_MAX_CATEGORIES) {
            rc = kd_seterr(w->err, KD_EINVAL, "%s.vals: more than %d values", path,
                           KD_HP_MAX_CATEGORIES);
            goto out;
        }
        p = add_param(w, KD_HP_CATEGORICAL);
        p->vals = json_deep_copy(vals);
        p->nvals = json_array_size(vals);
    } else {
        const char *sug = kd_suggest(ts, types);
        rc = kd_seterr(w->err, KD_EINVAL,
                       "%s.type: unknown hyperparameter type \"%s\"%s%s%s (one of const, int, "
                       "double, log, categorical)",
                       path, ts, sug ? "; did you mean `" : "", sug ? sug : "", sug ? "`?" : "");
        goto out;
    }
out:
    free(path);
    return rc;
}

static int walk_object(struct walk *w, const json_t *o)
{
    const char *k;
    const json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)o, k, v)
    {
        if (w->depth >= KD_HP_MAX_DEPTH) {
            char *path = join_path(w->keys, w->depth);
            rc = kd_seterr(w->err, KD_EINVAL, "%s: nested deeper than %d levels", path,
                           KD_HP_MAX_DEPTH);
            free(path);
            break;
        }
        if (w->sp->n >= KD_HP_MAX_PARAMS) {
            rc = kd_seterr(w->err, KD_EINVAL, "hyperparameters: more than %d hyperparameters",
                           KD_HP_MAX_PARAMS);
            break;
        }
        w->keys[w->depth++] = k;
        if (json_is_object(v) && json_object_get(v, "type")) {
            rc = parse_typed(w, v);
        } else if (json_is_object(v) && json_object_size(v) > 0) {
            rc = walk_object(w, v); /* nested hyperparameters */
        } else if (json_is_null(v)) {
            char *path = join_path(w->keys, w->depth);
            rc = kd_seterr(w->err, KD_EINVAL, "%s: null is not a hyperparameter value", path);
            free(path);
        } else {
            /* a bare value (number, string, list, bool, {}) is a const */
            struct kd_hp_param *p = add_param(w, KD_HP_CONST);
            p->val = json_deep_copy(v);
        }
        w->depth--;
        if (rc != 0)
            break;
    }
    return rc;
}

int kd_hp_space_parse(const json_t *hp, struct kd_hp_space **out, char *err)
{
    struct kd_hp_space *sp = kd_xcalloc(1, sizeof(*sp));
    struct walk w = {.sp = sp, .err = err};
    int rc = 0;
    *out = NULL;
    if (hp && !json_is_null(hp)) {
        if (!json_is_object(hp)) {
            rc = kd_seterr(err, KD_EINVAL, "hyperparameters: expected a mapping");
            goto out;
        }
        if ((rc = walk_object(&w, hp)) != 0)
            goto out;
    }
    *out = sp;
    sp = NULL;
out:
    kd_hp_space_free(sp);
    return rc;
}

static uint64_t param_grid_count(const struct kd_hp_param *p)
{
    switch (p->type) {
    case KD_HP_CONST: return 1;
    case KD_HP_CATEGORICAL: return p->nvals;
    case KD_HP_INT: {
        double range = p->maxval - p->minval + 1;
        return (double)p->count < range ? (uint64_t)p->count : (uint64_t)range;
    }
    case KD_HP_DOUBLE:
    case KD_HP_LOG: return (uint64_t)p->count;
    }
    return 1;
}

int kd_hp_grid_size(const struct kd_hp_space *sp, uint64_t *n, char *err)
{
    uint64_t total = 1;
    int rc = 0;
    for (size_t i = 0; i < sp->n; i++) {
        const struct kd_hp_param *p = &sp->params[i];
        if ((p->type == KD_HP_INT || p->type == KD_HP_DOUBLE || p->type == KD_HP_LOG) &&
            p->count < 1) {
            rc = kd_seterr(err, KD_EINVAL,
                           "hyperparameters.%s.count: required by the grid searcher for a %s "
                           "hyperparameter",
                           p->path, kd_hp_type_name(p->type));
            goto out;
        }
        total *= param_grid_count(p);
        if (total > KD_HP_MAX_GRID) {
            rc = kd_seterr(err, KD_ETOOBIG,
                           "hyperparameters: the grid has more than %d points (at %s); lower "
                           "the counts",
                           KD_HP_MAX_GRID, p->path);
            goto out;
        }
    }
    *n = total;
out:
    return rc;
}

void kd_hp_grid_point(const struct kd_hp_space *sp, uint64_t idx, double *x)
{
    /* mixed radix, last leaf fastest */
    for (size_t j = sp->n; j-- > 0;) {
        const struct kd_hp_param *p = &sp->params[j];
        uint64_t c = param_grid_count(p);
        uint64_t i = c ? idx % c : 0;
        idx = c ? idx / c : idx;
        switch (p->type) {
        case KD_HP_CONST: x[j] = 0; break;
        case KD_HP_CATEGORICAL: x[j] = (double)i; break;
        case KD_HP_INT:
            x[j] = c == 1
                       ? round((p->minval + p->maxval) / 2.0)
                       : round(p->minval + (double)i * (p->maxval - p->minval) / (double)(c - 1));
            break;
        case KD_HP_DOUBLE:
        case KD_HP_LOG:
            x[j] = c == 1 ? (p->minval + p->maxval) / 2.0
                          : p->minval + (double)i * (p->maxval - p->minval) / (double)(c - 1);
            break;
        }
    }
}

double kd_hp_sample_param(const struct kd_hp_param *p, struct kd_rng *r)
{
    switch (p->type) {
    case KD_HP_CONST: return 0;
    case KD_HP_CATEGORICAL: return (double)kd_rng_below(r, p->nvals);
    case KD_HP_INT:
        return p->minval + (double)kd_rng_below(r, (uint64_t)(p->maxval - p->minval) + 1);
    case KD_HP_DOUBLE:
    case KD_HP_LOG: return p->minval + kd_rng_uniform(r) * (p->maxval - p->minval);
    }
    return 0;
}

void kd_hp_sample(const struct kd_hp_space *sp, struct kd_rng *r, double *x)
{
    for (size_t i = 0; i < sp->n; i++)
        x[i] = kd_hp_sample_param(&sp->params[i], r);
}

double kd_hp_clamp(const struct kd_hp_param *p, double v)
{
    if (!isfinite(v))
        v = p->minval;
    switch (p->type) {
    case KD_HP_CONST: return 0;
    case KD_HP_CATEGORICAL:
        v = round(v);
        return v < 0 ? 0 : v > (double)p->nvals - 1 ? (double)p->nvals - 1 : v;
    case KD_HP_INT: v = round(v); break;
    case KD_HP_DOUBLE:
    case KD_HP_LOG: break;
    }
    return v < p->minval ? p->minval : v > p->maxval ? p->maxval : v;
}

json_t *kd_hp_value(const struct kd_hp_param *p, double v)
{
    switch (p->type) {
    case KD_HP_CONST: return json_deep_copy(p->val);
    case KD_HP_CATEGORICAL: {
        size_t i = (size_t)kd_hp_clamp(p, v);
        return json_deep_copy(json_array_get(p->vals, i));
    }
    case KD_HP_INT: return json_integer((json_int_t)kd_hp_clamp(p, v));
    case KD_HP_DOUBLE: return json_real(kd_hp_clamp(p, v));
    case KD_HP_LOG: return json_real(pow(p->base, kd_hp_clamp(p, v)));
    }
    return json_null();
}

json_t *kd_hp_build(const struct kd_hp_space *sp, const double *x)
{
    json_t *root = json_object();
    if (!root)
        kd_oom(64);
    for (size_t i = 0; i < sp->n; i++) {
        const struct kd_hp_param *p = &sp->params[i];
        json_t *o = root;
        for (size_t k = 0; k + 1 < p->nkeys; k++) {
            json_t *c = json_object_get(o, p->keys[k]);
            if (!json_is_object(c)) {
                c = json_object();
                json_object_set_new(o, p->keys[k], c);
            }
            o = c;
        }
        if (p->nkeys > 0)
            json_object_set_new(o, p->keys[p->nkeys - 1], kd_hp_value(p, x[i]));
    }
    return root;
}
