/*
 * Experiment config validation, defaults and template merging, following
 * Determined's experiment configuration reference. Validation is written
 * out by hand, section by section, rather than driven by a JSON Schema:
 * the cross-field rules and the messages (file:line:col, JSON path,
 * "did you mean") are the point, and a generic schema engine gives neither.
 */
#include "config/config.h"
#include "config/check.h"
#include "config/k8smap.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/regex.h"
#include "core/str.h"
#include "core/time.h"
#include "yaml/yaml.h"

/* Caps shared with lib/hparams (KD_HP_MAX_*). */
#define HP_MAX_PARAMS 1024
#define HP_MAX_DEPTH 16
#define HP_MAX_GRID 100000
#define HP_MAX_CATEGORIES 10000
#define ENTRY_MAX_TOKENS 4096

/*
 * A training length {batches|records|epochs: N}. `bare_int`: a plain
 * integer is accepted too (Determined's unitless Core API length; kdet
 * counts it in batches). min is 1 for lengths that must be positive.
 */
static int want_length(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                       const char *key, bool required, bool bare_int, int64_t min)
{
    static const char *const units[] = {"batches", "records", "epochs", NULL};
    char p[PATHLEN], q[PATHLEN], d[96], what[96];
    json_t *v = kd_config__field(obj, key);
    if (!v)
        return required ? kd_config__need(c, obj, opath, key, NULL) : 0;
    kd_config__join(p, opath, key);
    kd_config__int_phrase(min, INT64_MAX, what, sizeof(what));
    if (bare_int && json_is_integer(v)) {
        if (json_integer_value(v) < min)
            return BAD(c, v, p, "expected %s, got %s", what, kd_config__desc(v, d, sizeof(d)));
        return 0;
    }
    if (!json_is_object(v) || json_object_size(v) != 1)
        return BAD(c, v, p,
                   "expected one of batches, records or epochs with a count, e.g. "
                   "{batches: 1000}, got %s",
                   json_is_object(v) && json_object_size(v) > 1 ? "several units"
                                                                : kd_config__desc(v, d, sizeof(d)));
    const char *unit = json_object_iter_key(json_object_iter((json_t *)v));
    json_t *n = json_object_get(v, unit);
    kd_config__join(q, p, unit);
    if (!kd_config__in_list(unit, units)) {
        const char *s = kd_config__suggest(unit, units);
        if (s)
            return BADKEY(c, n, q, "unknown unit; did you mean `%s`?", s);
        return BADKEY(c, n, q, "unknown unit (expected batches, records or epochs)");
    }
    if (!json_is_integer(n) || json_integer_value(n) < min)
        return BAD(c, n, q, "expected %s, got %s", what, kd_config__desc(n, d, sizeof(d)));
    if (!strcmp(unit, "epochs") && c->records_per_epoch <= 0)
        return BAD(c, n, q,
                   "a length in epochs needs records_per_epoch (the number of records in one "
                   "epoch) set at the top level of the config");
    return 0;
}

/* ---- entrypoint ------------------------------------------------------------------------ */

static bool is_ident_path(const char *s, size_t n)
{
    if (n == 0)
        return false;
    bool start = true;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
        bool digit = ch >= '0' && ch <= '9';
        if (ch == '.') {
            if (start)
                return false;
            start = true;
            continue;
        }
        if (start && !alpha)
            return false;
        if (!alpha && !digit)
            return false;
        start = false;
    }
    return !start;
}

/* "module:Class" (module may be dotted or a relative .py path; Class may be dotted). */
static bool is_trial_ref(const char *s)
{
    const char *colon = strchr(s, ':');
    if (!colon || strchr(colon + 1, ':'))
        return false;
    size_t ml = (size_t)(colon - s);
    if (ml == 0 || !is_ident_path(colon + 1, strlen(colon + 1)))
        return false;
    for (size_t i = 0; i < ml; i++)
        if (s[i] == ' ' || s[i] == '\t')
            return false;
    return true;
}

static bool is_python(const char *s)
{
    const char *b = strrchr(s, '/');
    b = b ? b + 1 : s;
    if (!strcmp(b, "python") || !strcmp(b, "python3"))
        return true;
    if (kd_str_has_prefix(b, "python3.")) {
        for (const char *p = b + 8; *p; p++)
            if (*p < '0' || *p > '9')
                return false;
        return b[8] != '\0';
    }
    return false;
}

/* Split a command line: whitespace-separated words, '...' and "..." quoting. */
static int split_words(const char *s, char ***out, size_t *n)
{
    char **w = NULL;
    size_t nw = 0;
    struct kd_buf cur = KD_BUF_INIT(1u << 20);
    int rc = 0;
    const char *p = s;

    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        kd_buf_reset(&cur);
        bool any = false;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') {
            if (*p == '\'' || *p == '"') {
                char q = *p++;
                while (*p && *p != q)
                    if ((rc = kd_buf_putc(&cur, *p++)))
                        goto out;
                if (*p != q) {
                    rc = KD_EPARSE;
                    goto out;
                }
                p++;
                any = true;
                continue;
            }
            if ((rc = kd_buf_putc(&cur, *p++)))
                goto out;
            any = true;
        }
        if (!any)
            continue;
        if (nw >= ENTRY_MAX_TOKENS) {
            rc = KD_ETOOBIG;
            goto out;
        }
        w = kd_xrealloc(w, (nw + 1) * sizeof(*w));
        w[nw++] = kd_xstrdup(kd_buf_str(&cur));
    }
out:
    kd_buf_free(&cur);
    if (rc) {
        for (size_t i = 0; i < nw; i++)
            free(w[i]);
        free(w);
        w = NULL;
        nw = 0;
    }
    *out = w;
    *n = nw;
    return rc;
}

static const char *const launchers[] = {"torch_distributed", "deepspeed", "horovod", NULL};

/*
 * Check an entrypoint given as words. `node_of(i)` is the JSON node to
 * point at for word i (the string itself for the string form).
 */
static int check_entry_words(struct kd_config_vctx *c, char **w, size_t n, const json_t *ep,
                             bool is_list)
{
    char p[PATHLEN];
#define AT(i) (is_list ? json_array_get(ep, (i)) : ep)
#define PATH_OF(i) (is_list ? (kd_config__joinidx(p, "entrypoint", (i)), p) : "entrypoint")
    if (n == 0)
        return BAD(c, ep, "entrypoint", "must not be empty");
    if (n == 1 && is_trial_ref(w[0]))
        return 0; /* legacy model_def:TrialClass */
    if (n >= 3 && is_python(w[0]) && !strcmp(w[1], "-m")) {
        const char *mod = w[2];
        const char *name = NULL;
        if (kd_str_has_prefix(mod, "kdet.launch."))
            name = mod + strlen("kdet.launch.");
        else if (kd_str_has_prefix(mod, "determined.launch."))
            name = mod + strlen("determined.launch.");
        if (name) {
            if (!kd_config__in_list(name, launchers)) {
                const char *s = kd_config__suggest(name, launchers);
                return BAD(
                    c, AT(2), PATH_OF(2),
                    "launcher `%s` is not supported (kdet has kdet.launch.torch_distributed, "
                    "kdet.launch.deepspeed and kdet.launch.horovod)%s%s%s",
                    mod, s ? "; did you mean `" : "", s ? s : "", s ? "`?" : "");
            }
            size_t i = 3, dd = n;
            for (size_t j = 3; j < n; j++) {
                if (!strcmp(w[j], "--")) {
                    dd = j;
                    break;
                }
            }
            if (dd < n) {
                i = dd + 1;
            } else if (i < n && w[i][0] == '-' && strcmp(w[i], "--trial")) {
                return BAD(c, AT(i), PATH_OF(i),
                           "launcher option `%s` must be followed by `--` before what to "
                           "launch, e.g. python3 -m kdet.launch.%s %s ... -- train.py",
                           w[i], name, w[i]);
            }
            if (i >= n)
                return BAD(c, AT(n - 1), PATH_OF(n - 1),
                           "the launcher needs what to launch: --trial MODULE:CLASS or a script "
                           "with its arguments");
            if (!strcmp(w[i], "--trial")) {
                if (i + 1 >= n)
                    return BAD(c, AT(i), PATH_OF(i),
                               "--trial needs MODULE:CLASS, e.g. --trial model_def:MNistTrial");
                if (!is_trial_ref(w[i + 1]))
                    return BAD(c, AT(i + 1), PATH_OF(i + 1),
                               "--trial needs MODULE:CLASS, e.g. model_def:MNistTrial, got \"%s\"",
                               w[i + 1]);
            }
            return 0;
        }
    }
    return 0; /* a custom command or script */
#undef AT
#undef PATH_OF
}

static int check_entrypoint(struct kd_config_vctx *c, const json_t *cfg)
{
    char d[96], p[PATHLEN];
    json_t *ep = kd_config__field(cfg, "entrypoint");
    char **w = NULL;
    size_t n = 0;
    int rc = 0;

    if (!ep)
        return kd_config__need(
            c, cfg, "", "entrypoint",
            "(the command to run, e.g. \"python3 train.py\", or model_def:TrialClass)");
    if (json_is_string(ep)) {
        rc = split_words(json_string_value(ep), &w, &n);
        if (rc == KD_EPARSE) {
            rc = BAD(c, ep, "entrypoint", "unbalanced quotes");
            goto out;
        }
        if (rc) {
            rc = BAD(c, ep, "entrypoint", "too long");
            goto out;
        }
        rc = check_entry_words(c, w, n, ep, false);
    } else if (json_is_array(ep)) {
        size_t i;
        json_t *e;
        n = json_array_size(ep);
        if (n > ENTRY_MAX_TOKENS) {
            rc = BAD(c, ep, "entrypoint", "more than %d words", ENTRY_MAX_TOKENS);
            goto out;
        }
        w = kd_xcalloc(n ? n : 1, sizeof(*w));
        json_array_foreach(ep, i, e)
        {
            if (!json_is_string(e)) {
                kd_config__joinidx(p, "entrypoint", i);
                rc = BAD(c, e, p, "expected a string, got %s", kd_config__desc(e, d, sizeof(d)));
                n = i;
                goto out;
            }
            w[i] = kd_xstrdup(json_string_value(e));
        }
        rc = check_entry_words(c, w, n, ep, true);
    } else {
        rc = BAD(c, ep, "entrypoint", "expected a string or a list of strings, got %s",
                 kd_config__desc(ep, d, sizeof(d)));
    }
out:
    for (size_t i = 0; i < n; i++)
        free(w[i]);
    free(w);
    return rc;
}

/* ---- hyperparameters -------------------------------------------------------------------- */

static const char *const hp_types[] = {"const", "int", "double", "log", "categorical", NULL};

/* The smallest integer value a global_batch_size definition can take; false if not integral. */
static bool gbs_min(const json_t *v, int64_t *min)
{
    if (json_is_integer(v)) {
        *min = json_integer_value(v);
        return true;
    }
    if (!json_is_object(v))
        return false;
    const char *t = json_string_value(json_object_get(v, "type"));
    if (!t)
        return false;
    if (!strcmp(t, "const")) {
        json_t *val = json_object_get(v, "val");
        if (!json_is_integer(val))
            return false;
        *min = json_integer_value(val);
        return true;
    }
    if (!strcmp(t, "int")) {
        *min = json_integer_value(json_object_get(v, "minval"));
        return true;
    }
    if (!strcmp(t, "categorical")) {
        size_t i;
        json_t *e;
        bool first = true;
        json_array_foreach(json_object_get(v, "vals"), i, e)
        {
            if (!json_is_integer(e))
                return false;
            if (first || json_integer_value(e) < *min)
                *min = json_integer_value(e);
            first = false;
        }
        return !first;
    }
    return false;
}

static int check_hparam(struct kd_config_vctx *c, const json_t *v, const char *path, int depth,
                        uint64_t *grid);

static int check_hparams_obj(struct kd_config_vctx *c, const json_t *obj, const char *path,
                             int depth, uint64_t *grid)
{
    const char *k;
    json_t *v;
    char p[PATHLEN];
    if (depth > HP_MAX_DEPTH)
        return BAD(c, obj, path, "hyperparameters nested deeper than %d levels", HP_MAX_DEPTH);
    json_object_foreach((json_t *)obj, k, v)
    {
        kd_config__join(p, path, k);
        if (check_hparam(c, v, p, depth, grid))
            return c->rc;
    }
    return 0;
}

static void grid_mul(uint64_t *grid, uint64_t n)
{
    if (*grid > HP_MAX_GRID + 1ULL)
        return;
    if (n > HP_MAX_GRID + 1ULL)
        n = HP_MAX_GRID + 1ULL; /* keeps the product from wrapping */
    *grid = *grid * n;
    if (*grid > HP_MAX_GRID + 1ULL)
        *grid = HP_MAX_GRID + 1ULL;
}

static int check_hparam(struct kd_config_vctx *c, const json_t *v, const char *path, int depth,
                        uint64_t *grid)
{
    char p[PATHLEN], d[96], d2[96];
    bool is_grid = c->searcher && !strcmp(c->searcher, "grid");

    if (!json_is_object(v) || !json_object_get(v, "type")) {
        if (json_is_object(v) && json_object_size(v) > 0)
            return check_hparams_obj(c, v, path, depth + 1, grid);
        if (++c->hp_leaves > HP_MAX_PARAMS)
            return BAD(c, v, path, "more than %d hyperparameters", HP_MAX_PARAMS);
        return 0; /* a bare value: a constant */
    }
    if (++c->hp_leaves > HP_MAX_PARAMS)
        return BAD(c, v, path, "more than %d hyperparameters", HP_MAX_PARAMS);
    const char *type = NULL;
    if (kd_config__want_enum(c, v, path, "type", true, hp_types, &type))
        return c->rc;
    if (!strcmp(type, "const")) {
        static const char *const keys[] = {"type", "val", NULL};
        if (kd_config__check_keys(c, v, path, keys, NULL, "a const hyperparameter"))
            return c->rc;
        if (!json_object_get(v, "val"))
            return kd_config__need(c, v, path, "val", NULL);
        return 0;
    }
    if (!strcmp(type, "categorical")) {
        static const char *const keys[] = {"type", "vals", NULL};
        if (kd_config__check_keys(c, v, path, keys, NULL, "a categorical hyperparameter"))
            return c->rc;
        json_t *vals = kd_config__field(v, "vals");
        kd_config__join(p, path, "vals");
        if (!vals)
            return kd_config__need(c, v, path, "vals", NULL);
        if (!json_is_array(vals) || json_array_size(vals) == 0)
            return BAD(c, vals, p, "expected a non-empty list of choices, got %s",
                       json_is_array(vals) ? "an empty list" : kd_config__desc(vals, d, sizeof(d)));
        if (json_array_size(vals) > HP_MAX_CATEGORIES)
            return BAD(c, vals, p, "more than %d choices", HP_MAX_CATEGORIES);
        grid_mul(grid, json_array_size(vals));
        return 0;
    }
    /* int, double, log */
    static const char *const keys_num[] = {"type", "minval", "maxval", "count", NULL};
    static const char *const keys_log[] = {"type", "minval", "maxval", "count", "base", NULL};
    bool is_int = !strcmp(type, "int"), is_log = !strcmp(type, "log");
    char owner[64];
    snprintf(owner, sizeof(owner), "a%s %s hyperparameter", is_int ? "n" : "", type);
    if (kd_config__check_keys(c, v, path, is_log ? keys_log : keys_num, NULL, owner))
        return c->rc;
    int64_t imin = 0, imax = 0, count = 0;
    double dmin = 0, dmax = 0;
    if (is_int) {
        if (kd_config__want_int(c, v, path, "minval", true, INT64_MIN, INT64_MAX, &imin) ||
            kd_config__want_int(c, v, path, "maxval", true, INT64_MIN, INT64_MAX, &imax))
            return c->rc;
        dmin = (double)imin;
        dmax = (double)imax;
    } else {
        const char *what = is_log ? "a number (an exponent of base)" : "a number";
        if (kd_config__want_num(c, v, path, "minval", true, -HUGE_VAL, false, HUGE_VAL, false, what,
                                &dmin) ||
            kd_config__want_num(c, v, path, "maxval", true, -HUGE_VAL, false, HUGE_VAL, false, what,
                                &dmax))
            return c->rc;
    }
    if (dmin >= dmax) {
        kd_config__join(p, path, "maxval");
        json_t *mx = json_object_get(v, "maxval");
        return BAD(c, mx, p, "must be greater than minval (%s), got %s",
                   kd_config__desc(json_object_get(v, "minval"), d2, sizeof(d2)),
                   kd_config__desc(mx, d, sizeof(d)));
    }
    if (is_log) {
        double base = 10;
        if (kd_config__want_num(c, v, path, "base", false, 0, true, HUGE_VAL, false,
                                "a number greater than 0 (and not 1)", &base))
            return c->rc;
        if (base == 1) {
            kd_config__join(p, path, "base");
            return BAD(c, json_object_get(v, "base"), p,
                       "expected a number greater than 0 (and not 1), got 1");
        }
    }
    if (kd_config__want_int(c, v, path, "count", false, 1, INT64_MAX, &count))
        return c->rc;
    if (is_grid && !kd_config__field(v, "count"))
        return kd_config__need(
            c, v, path, "count",
            "(the number of grid points; the grid searcher needs it on int, double and "
            "log hyperparameters)");
    /* An int range has at most maxval - minval + 1 grid points (computed without overflow). */
    uint64_t span = (uint64_t)imax - (uint64_t)imin;
    if (is_int && count > 0 && (uint64_t)count - 1 > span)
        count = (int64_t)(span + 1 > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : span + 1);
    if (count > 0)
        grid_mul(grid, (uint64_t)count);
    return 0;
}

static int check_hyperparameters(struct kd_config_vctx *c, const json_t *cfg)
{
    char d[96], what[64];
    json_t *hp = kd_config__field(cfg, "hyperparameters");
    uint64_t grid = 1;
    if (!hp)
        return 0;
    if (kd_config__want_object(c, hp, "hyperparameters"))
        return c->rc;
    if (check_hparams_obj(c, hp, "hyperparameters", 1, &grid))
        return c->rc;
    if (c->searcher && !strcmp(c->searcher, "grid") && grid > HP_MAX_GRID)
        return BAD(c, hp, "hyperparameters",
                   "the grid has more than %d points (one trial each); lower the counts",
                   HP_MAX_GRID);
    json_t *gbs = kd_config__field(hp, "global_batch_size");
    if (gbs) {
        int64_t min = 0;
        const char *p = "hyperparameters.global_batch_size";
        if (!gbs_min(gbs, &min) || min < 1)
            return BAD(c, gbs, p,
                       "expected a positive integer (or an int, const or categorical "
                       "hyperparameter of positive integers), got %s",
                       json_is_object(gbs) ? "a value that is not a positive integer"
                                           : kd_config__desc(gbs, d, sizeof(d)));
        if (min < c->slots_per_trial) {
            snprintf(what, sizeof(what), "%" PRId64, min);
            return BAD(c, gbs, p,
                       "must be at least resources.slots_per_trial (%" PRId64
                       "), so every slot gets a batch; got %s",
                       c->slots_per_trial, what);
        }
    }
    return 0;
}

/* ---- searcher ---------------------------------------------------------------------------- */

static const char *const methods[] = {"single",   "grid", "random", "adaptive_asha",
                                      "bayesian", "pbt",  NULL};

static int check_early_stopping(struct kd_config_vctx *c, const json_t *s)
{
    static const char *const types[] = {"patience", "threshold", "median", NULL};
    static const char *const k_pat[] = {"type", "patience", "min_delta", NULL};
    static const char *const k_thr[] = {"type", "threshold", "end_experiment", NULL};
    static const char *const k_med[] = {"type", "grace_period", "min_trials", NULL};
    char p[PATHLEN], d[96];
    json_t *es = kd_config__field(s, "early_stopping");
    size_t i;
    json_t *r;
    const char *base = "searcher.early_stopping";
    if (!es)
        return 0;
    if (!json_is_array(es))
        return BAD(c, es, base, "expected a list of rules, got %s",
                   kd_config__desc(es, d, sizeof(d)));
    if (json_array_size(es) > 0 && !kd_config__field(s, "metric"))
        return kd_config__need(c, s, "searcher", "metric",
                               "(early_stopping rules compare this metric)");
    json_array_foreach(es, i, r)
    {
        const char *t = NULL;
        kd_config__joinidx(p, base, i);
        if (kd_config__want_object(c, r, p) ||
            kd_config__want_enum(c, r, p, "type", true, types, &t))
            return c->rc;
        if (!strcmp(t, "patience")) {
            if (kd_config__check_keys(c, r, p, k_pat, NULL, "a patience rule") ||
                kd_config__want_int(c, r, p, "patience", true, 1, INT64_MAX, NULL) ||
                kd_config__want_num(c, r, p, "min_delta", false, 0, false, HUGE_VAL, false,
                                    "a number >= 0", NULL))
                return c->rc;
        } else if (!strcmp(t, "threshold")) {
            if (kd_config__check_keys(c, r, p, k_thr, NULL, "a threshold rule") ||
                kd_config__want_num(c, r, p, "threshold", true, -HUGE_VAL, false, HUGE_VAL, false,
                                    "a number", NULL) ||
                kd_config__want_bool(c, r, p, "end_experiment"))
                return c->rc;
        } else {
            if (kd_config__check_keys(c, r, p, k_med, NULL, "a median rule") ||
                kd_config__want_int(c, r, p, "grace_period", false, 0, INT64_MAX, NULL) ||
                kd_config__want_int(c, r, p, "min_trials", false, 1, INT64_MAX, NULL))
                return c->rc;
        }
    }
    return 0;
}

static int check_searcher(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const k_single[] = {"name",
                                           "metric",
                                           "smaller_is_better",
                                           "source_trial_id",
                                           "source_checkpoint_uuid",
                                           "early_stopping",
                                           "max_length",
                                           NULL};
    static const char *const k_grid[] = {"name",
                                         "metric",
                                         "smaller_is_better",
                                         "source_trial_id",
                                         "source_checkpoint_uuid",
                                         "early_stopping",
                                         "max_length",
                                         "max_concurrent_trials",
                                         NULL};
    static const char *const k_random[] = {"name",
                                           "metric",
                                           "smaller_is_better",
                                           "source_trial_id",
                                           "source_checkpoint_uuid",
                                           "early_stopping",
                                           "max_length",
                                           "max_concurrent_trials",
                                           "max_trials",
                                           NULL};
    static const char *const k_asha[] = {"name",
                                         "metric",
                                         "smaller_is_better",
                                         "source_trial_id",
                                         "source_checkpoint_uuid",
                                         "early_stopping",
                                         "max_length",
                                         "max_concurrent_trials",
                                         "max_trials",
                                         "mode",
                                         "divisor",
                                         "max_rungs",
                                         "bracket_rungs",
                                         "stop_once",
                                         "time_metric",
                                         "max_time",
                                         NULL};
    static const char *const k_bayes[] = {"name",
                                          "metric",
                                          "smaller_is_better",
                                          "source_trial_id",
                                          "source_checkpoint_uuid",
                                          "early_stopping",
                                          "max_length",
                                          "max_concurrent_trials",
                                          "max_trials",
                                          "num_startup_trials",
                                          NULL};
    static const char *const k_pbt[] = {"name",
                                        "metric",
                                        "smaller_is_better",
                                        "source_trial_id",
                                        "source_checkpoint_uuid",
                                        "early_stopping",
                                        "population_size",
                                        "num_rounds",
                                        "length_per_round",
                                        "replace_function",
                                        "explore_function",
                                        NULL};
    static const char *const modes[] = {"aggressive", "standard", "conservative", NULL};
    char p[PATHLEN], d[96];
    const char *sp = "searcher";
    json_t *s = kd_config__field(cfg, "searcher");
    const char *name = NULL;

    if (!s)
        return kd_config__need(
            c, cfg, "", "searcher",
            "(e.g. searcher: {name: single, metric: validation_loss, max_length: "
            "{batches: 1000}})");
    if (kd_config__want_object(c, s, sp) || kd_config__want_str(c, s, sp, "name", true, &name))
        return c->rc;
    json_t *nv = kd_config__field(s, "name");
    if (!strcmp(name, "custom"))
        return BAD(c, nv, "searcher.name",
                   "the custom searcher (driven by user code through Determined's SearchRunner) "
                   "is not supported by kdet; use one of single, grid, random, adaptive_asha, "
                   "bayesian, pbt");
    if (!strcmp(name, "async_halving") || !strcmp(name, "adaptive") ||
        !strcmp(name, "adaptive_simple") || !strcmp(name, "sync_halving"))
        return BAD(c, nv, "searcher.name",
                   "the %s searcher was removed from Determined and is not supported; use "
                   "adaptive_asha",
                   name);
    if (!kd_config__in_list(name, methods)) {
        const char *sug = kd_config__suggest(name, methods);
        if (sug)
            return BAD(c, nv, "searcher.name", "unknown searcher %s; did you mean `%s`?",
                       kd_config__desc(nv, d, sizeof(d)), sug);
        return BAD(c, nv, "searcher.name",
                   "unknown searcher %s (expected one of single, grid, random, adaptive_asha, "
                   "bayesian, pbt)",
                   kd_config__desc(nv, d, sizeof(d)));
    }
    const char *const *keys = !strcmp(name, "single")          ? k_single
                              : !strcmp(name, "grid")          ? k_grid
                              : !strcmp(name, "random")        ? k_random
                              : !strcmp(name, "adaptive_asha") ? k_asha
                              : !strcmp(name, "bayesian")      ? k_bayes
                                                               : k_pbt;
    char owner[64];
    snprintf(owner, sizeof(owner), "the %s searcher", name);
    if (kd_config__check_keys(c, s, sp, keys, NULL, owner))
        return c->rc;

    bool needs_metric =
        !strcmp(name, "adaptive_asha") || !strcmp(name, "bayesian") || !strcmp(name, "pbt");
    if (kd_config__want_str(c, s, sp, "metric", needs_metric, NULL) ||
        kd_config__want_bool(c, s, sp, "smaller_is_better") ||
        kd_config__want_int(c, s, sp, "source_trial_id", false, 1, INT64_MAX, NULL) ||
        kd_config__want_str(c, s, sp, "source_checkpoint_uuid", false, NULL))
        return c->rc;

    if (!strcmp(name, "pbt")) {
        if (kd_config__want_int(c, s, sp, "population_size", true, 1, INT64_MAX, NULL) ||
            kd_config__want_int(c, s, sp, "num_rounds", true, 1, INT64_MAX, NULL) ||
            want_length(c, s, sp, "length_per_round", true, false, 1))
            return c->rc;
        json_t *rf = kd_config__field(s, "replace_function");
        json_t *ef = kd_config__field(s, "explore_function");
        static const char *const k_rf[] = {"truncate_fraction", NULL};
        static const char *const k_ef[] = {"resample_probability", "perturb_factor", NULL};
        if (!rf)
            return kd_config__need(c, s, sp, "replace_function", "(e.g. {truncate_fraction: 0.2})");
        if (kd_config__want_object(c, rf, "searcher.replace_function") ||
            kd_config__check_keys(c, rf, "searcher.replace_function", k_rf, NULL,
                                  "replace_function") ||
            kd_config__want_num(c, rf, "searcher.replace_function", "truncate_fraction", true, 0,
                                false, 0.5, false, "a number from 0 to 0.5", NULL))
            return c->rc;
        if (!ef)
            return kd_config__need(c, s, sp, "explore_function",
                                   "(e.g. {resample_probability: 0.2, perturb_factor: 0.2})");
        if (kd_config__want_object(c, ef, "searcher.explore_function") ||
            kd_config__check_keys(c, ef, "searcher.explore_function", k_ef, NULL,
                                  "explore_function") ||
            kd_config__want_num(c, ef, "searcher.explore_function", "resample_probability", true, 0,
                                false, 1, false, "a number from 0 to 1", NULL) ||
            kd_config__want_num(c, ef, "searcher.explore_function", "perturb_factor", true, 0,
                                false, 1, false, "a number from 0 to 1", NULL))
            return c->rc;
    } else {
        bool needs_trials = strcmp(name, "single") && strcmp(name, "grid");
        bool is_asha = !strcmp(name, "adaptive_asha");
        /* single, grid, random: no max_length means the training code decides the length
         * (Trainer.fit(max_length=...) or its own loop), as Determined 0.38 writes them. */
        bool needs_length =
            !strcmp(name, "bayesian") || (is_asha && !kd_config__field(s, "max_time"));
        int64_t max_trials = 0;
        if (kd_config__want_int(c, s, sp, "max_trials", needs_trials, 1, INT64_MAX, &max_trials))
            return c->rc;
        if (is_asha && !kd_config__field(s, "max_length") && !kd_config__field(s, "max_time"))
            return kd_config__need(
                c, s, sp, "max_length",
                "(or max_time with time_metric: the adaptive_asha searcher needs the "
                "length of its longest rung)");
        if (want_length(c, s, sp, "max_length", needs_length, true, 1) ||
            kd_config__want_int(c, s, sp, "max_concurrent_trials", false, 0, INT64_MAX, NULL))
            return c->rc;
        if (is_asha) {
            if (kd_config__want_str(c, s, sp, "time_metric", false, NULL) ||
                kd_config__want_int(c, s, sp, "max_time", false, 1, INT64_MAX, NULL))
                return c->rc;
            if (kd_config__field(s, "max_time") && !kd_config__field(s, "time_metric"))
                return kd_config__need(
                    c, s, sp, "time_metric",
                    "(max_time is counted in the reported values of time_metric, e.g. "
                    "time_metric: batches)");
            if (kd_config__field(s, "time_metric") && !kd_config__field(s, "max_time"))
                return kd_config__need(c, s, sp, "max_time",
                                       "(the largest value of time_metric a trial trains to)");
            if (kd_config__field(s, "time_metric") &&
                !*json_string_value(kd_config__field(s, "time_metric")))
                return BAD(c, kd_config__field(s, "time_metric"), "searcher.time_metric",
                           "must not be empty");
            if (kd_config__want_enum(c, s, sp, "mode", false, modes, NULL) ||
                kd_config__want_num(c, s, sp, "divisor", false, 1, true, HUGE_VAL, false,
                                    "a number greater than 1", NULL) ||
                kd_config__want_int(c, s, sp, "max_rungs", false, 1, INT64_MAX, NULL) ||
                kd_config__want_bool(c, s, sp, "stop_once"))
                return c->rc;
            json_t *br = kd_config__field(s, "bracket_rungs");
            if (br) {
                size_t i;
                json_t *e;
                if (!json_is_array(br))
                    return BAD(c, br, "searcher.bracket_rungs",
                               "expected a list of positive integers, got %s",
                               kd_config__desc(br, d, sizeof(d)));
                json_array_foreach(br, i, e)
                {
                    kd_config__joinidx(p, "searcher.bracket_rungs", i);
                    if (!json_is_integer(e) || json_integer_value(e) < 1)
                        return BAD(c, e, p, "expected a positive integer, got %s",
                                   kd_config__desc(e, d, sizeof(d)));
                }
            }
        }
        if (!strcmp(name, "bayesian")) {
            int64_t st = 0;
            if (kd_config__want_int(c, s, sp, "num_startup_trials", false, 1, INT64_MAX, &st))
                return c->rc;
            if (st > max_trials)
                return BAD(
                    c, kd_config__field(s, "num_startup_trials"), "searcher.num_startup_trials",
                    "must not exceed max_trials (%" PRId64 "), got %" PRId64, max_trials, st);
        }
    }
    return check_early_stopping(c, s);
}

/* ---- resources, storage, environment --------------------------------------------------- */

/* Determined's memory size syntax: 4096, "4Gi", "512M", "1.5 GB", "100k". */
static int check_resources(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const keys[] = {"slots_per_trial", "max_slots",      "weight",
                                       "priority",        "resource_pool",  "shm_size",
                                       "devices",         "is_single_node", NULL};
    static const struct kd_config_unsupported unsup[] = {
        {"agent_label", "was removed from Determined (0.20) and is not supported; use "
                        "resource_pool"},
        {"native_parallel", "is not supported (it was removed from Determined)"},
        {"slots", "is not a field of resources; did you mean `slots_per_trial`?"},
        {NULL, NULL}};
    const char *rp = "resources";
    json_t *r = kd_config__field(cfg, "resources");
    c->slots_per_trial = 1;
    if (!r)
        return 0;
    if (kd_config__want_object(c, r, rp) || kd_config__check_keys(c, r, rp, keys, unsup, NULL) ||
        kd_config__want_int(c, r, rp, "slots_per_trial", false, 0, 1 << 20, &c->slots_per_trial) ||
        kd_config__want_int(c, r, rp, "max_slots", false, 1, INT64_MAX, NULL) ||
        kd_config__want_num(c, r, rp, "weight", false, 0, true, HUGE_VAL, false,
                            "a number greater than 0", NULL) ||
        kd_config__want_int(c, r, rp, "priority", false, 1, 99, NULL) ||
        kd_config__want_str(c, r, rp, "resource_pool", false, NULL) ||
        kd_config__want_bool(c, r, rp, "is_single_node"))
        return c->rc;
    if (kd_config__check_shm_size(c, r))
        return c->rc;
    int64_t max_slots = 0;
    if (kd_config__want_int(c, r, rp, "max_slots", false, 1, INT64_MAX, &max_slots))
        return c->rc;
    if (max_slots && max_slots < c->slots_per_trial)
        return BAD(c, kd_config__field(r, "max_slots"), "resources.max_slots",
                   "must be at least slots_per_trial (%" PRId64
                   ") or no trial could run, got %" PRId64,
                   c->slots_per_trial, max_slots);
    return kd_config__check_mounts(c, kd_config__field(r, "devices"), "resources.devices", true);
}

static bool is_dns1123(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
            return false;
    }
    return s[0] != '-' && s[0] != '.' && s[n - 1] != '-' && s[n - 1] != '.';
}

static bool is_bucket_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 3 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
            return false;
    }
    return s[0] != '-' && s[0] != '.' && s[n - 1] != '-' && s[n - 1] != '.';
}

static int check_storage(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const types[] = {"shared_fs", "s3", NULL};
    static const char *const k_fs[] = {"type",
                                       "host_path",
                                       "storage_path",
                                       "container_path",
                                       "propagation",
                                       "save_experiment_best",
                                       "save_trial_best",
                                       "save_trial_latest",
                                       NULL};
    static const char *const k_s3[] = {"type",
                                       "bucket",
                                       "prefix",
                                       "endpoint_url",
                                       "region",
                                       "path_style",
                                       "credentials_secret",
                                       "credentials_dir",
                                       "save_experiment_best",
                                       "save_trial_best",
                                       "save_trial_latest",
                                       NULL};
    static const char *const props[] = {"rprivate", "private", "rshared", "shared",
                                        "rslave",   "slave",   NULL};
    static const char *const secret_msg =
        "credentials are not accepted in the experiment config, where anyone who can read the "
        "Experiment would see them; store them in a Kubernetes Secret (kubectl create secret "
        "generic s3-creds --from-literal=AWS_ACCESS_KEY_ID=... "
        "--from-literal=AWS_SECRET_ACCESS_KEY=...) and reference it with `credentials_secret: "
        "s3-creds`";
    const struct kd_config_unsupported unsup[] = {{"secret_key", secret_msg},
                                                  {"access_key", secret_msg},
                                                  {"session_token", secret_msg},
                                                  {NULL, NULL}};
    const char *sp = "checkpoint_storage";
    char d[96];
    json_t *s = kd_config__field(cfg, "checkpoint_storage");
    const char *type = NULL;
    if (!s)
        return 0;
    if (kd_config__want_object(c, s, sp))
        return c->rc;
    json_t *tv = kd_config__field(s, "type");
    if (json_is_string(tv) &&
        (!strcmp(json_string_value(tv), "gcs") || !strcmp(json_string_value(tv), "azure") ||
         !strcmp(json_string_value(tv), "hdfs") || !strcmp(json_string_value(tv), "directory")))
        return BAD(c, tv, "checkpoint_storage.type",
                   "%s storage is not supported by kdet (supported: shared_fs, s3; S3-compatible "
                   "stores work through endpoint_url)",
                   json_string_value(tv));
    if (kd_config__want_enum(c, s, sp, "type", false, types, &type))
        return c->rc;
    if (!type && c->cr)
        /* kdet-controller checks the spec after merging its default storage under it. */
        return kd_config__need(
            c, s, sp, "type",
            "(shared_fs or s3; the cluster has no default checkpoint storage to supply "
            "it)");
    if (!type) {
        /* A partial override of the cluster's default storage (kdet-controller merges it over
         * --default-checkpoint-storage): which type it is for shows in its fields. Only a mix
         * of both types' own fields is known to be invalid once merged. */
        static const char *const k_any[] = {"type",
                                            "host_path",
                                            "storage_path",
                                            "container_path",
                                            "propagation",
                                            "bucket",
                                            "prefix",
                                            "endpoint_url",
                                            "region",
                                            "path_style",
                                            "credentials_secret",
                                            "credentials_dir",
                                            "save_experiment_best",
                                            "save_trial_best",
                                            "save_trial_latest",
                                            NULL};
        const char *fs_only = NULL, *s3_only = NULL, *k;
        json_t *v;
        if (kd_config__check_keys(c, s, sp, k_any, unsup, "checkpoint_storage"))
            return c->rc;
        json_object_foreach((json_t *)s, k, v)
        {
            if (!fs_only && kd_config__in_list(k, k_fs) && !kd_config__in_list(k, k_s3))
                fs_only = k;
            if (!s3_only && kd_config__in_list(k, k_s3) && !kd_config__in_list(k, k_fs))
                s3_only = k;
        }
        if (fs_only && s3_only) {
            char q[PATHLEN];
            kd_config__join(q, sp, s3_only);
            return BADKEY(c, kd_config__field(s, s3_only), q,
                          "is a field of s3 storage but `%s` is one of shared_fs storage; set "
                          "checkpoint_storage.type",
                          fs_only);
        }
        if (!fs_only && !s3_only) /* only the save_* counts: valid over either type */
            return kd_config__want_int(c, s, sp, "save_experiment_best", false, 0, INT64_MAX,
                                       NULL) ||
                           kd_config__want_int(c, s, sp, "save_trial_best", false, 0, INT64_MAX,
                                               NULL) ||
                           kd_config__want_int(c, s, sp, "save_trial_latest", false, 0, INT64_MAX,
                                               NULL)
                       ? c->rc
                       : 0;
        type = fs_only ? "shared_fs" : "s3";
    }
    bool partial = !kd_config__field(s, "type");
    bool s3 = !strcmp(type, "s3");
    if (kd_config__check_keys(c, s, sp, s3 ? k_s3 : k_fs, unsup,
                              s3 ? "s3 storage" : "shared_fs storage") ||
        kd_config__want_int(c, s, sp, "save_experiment_best", false, 0, INT64_MAX, NULL) ||
        kd_config__want_int(c, s, sp, "save_trial_best", false, 0, INT64_MAX, NULL) ||
        kd_config__want_int(c, s, sp, "save_trial_latest", false, 0, INT64_MAX, NULL))
        return c->rc;
    if (!s3) {
        const char *host = NULL, *sub = NULL;
        if (kd_config__want_abs_path(c, s, sp, "host_path", !partial) ||
            kd_config__want_str(c, s, sp, "host_path", !partial, &host) ||
            kd_config__want_str(c, s, sp, "storage_path", false, &sub) ||
            kd_config__want_abs_path(c, s, sp, "container_path", false) ||
            kd_config__want_enum(c, s, sp, "propagation", false, props, NULL))
            return c->rc;
        if (sub && host && kd_config__is_abs_path(sub)) {
            size_t hl = strlen(host);
            while (hl > 1 && host[hl - 1] == '/')
                hl--;
            if (strncmp(sub, host, hl) || (sub[hl] != '/' && sub[hl] != '\0'))
                return BAD(
                    c, kd_config__field(s, "storage_path"), "checkpoint_storage.storage_path",
                    "must be a relative path or a directory under host_path (%s), got %s", host,
                    kd_config__desc(kd_config__field(s, "storage_path"), d, sizeof(d)));
        }
        if (sub && strstr(sub, ".."))
            return BAD(c, kd_config__field(s, "storage_path"), "checkpoint_storage.storage_path",
                       "must not contain `..`");
        return 0;
    }
    const char *bucket = NULL, *url = NULL, *secret = NULL, *prefix = NULL;
    if (kd_config__want_str(c, s, sp, "bucket", !partial, &bucket))
        return c->rc;
    if (bucket && !is_bucket_name(bucket))
        return BAD(c, kd_config__field(s, "bucket"), "checkpoint_storage.bucket",
                   "expected an S3 bucket name (3-63 characters: a-z, 0-9, '-' and '.'), got %s",
                   kd_config__desc(kd_config__field(s, "bucket"), d, sizeof(d)));
    if (kd_config__want_str(c, s, sp, "prefix", false, &prefix) ||
        kd_config__want_str(c, s, sp, "endpoint_url", false, &url) ||
        kd_config__want_str(c, s, sp, "region", false, NULL) ||
        kd_config__want_bool(c, s, sp, "path_style") ||
        kd_config__want_str(c, s, sp, "credentials_secret", false, &secret) ||
        kd_config__want_abs_path(c, s, sp, "credentials_dir", false))
        return c->rc;
    if (prefix && strstr(prefix, ".."))
        return BAD(c, kd_config__field(s, "prefix"), "checkpoint_storage.prefix",
                   "must not contain `..`");
    if (url && !kd_str_has_prefix(url, "http://") && !kd_str_has_prefix(url, "https://"))
        return BAD(c, kd_config__field(s, "endpoint_url"), "checkpoint_storage.endpoint_url",
                   "expected an http:// or https:// URL, got %s",
                   kd_config__desc(kd_config__field(s, "endpoint_url"), d, sizeof(d)));
    if (secret && !is_dns1123(secret))
        return BAD(c, kd_config__field(s, "credentials_secret"),
                   "checkpoint_storage.credentials_secret",
                   "expected the name of a Kubernetes Secret (lowercase letters, digits, '-' and "
                   "'.'), got %s",
                   kd_config__desc(kd_config__field(s, "credentials_secret"), d, sizeof(d)));
    return 0;
}

static int check_misc_sections(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const k_opt[] = {"aggregation_frequency",    "average_aggregated_gradients",
                                        "average_training_metrics", "gradient_compression",
                                        "mixed_precision",          "tensor_fusion_threshold",
                                        "tensor_fusion_cycle_time", "auto_tune_tensor_fusion",
                                        "grad_updates_size_file",   NULL};
    static const char *const k_prof[] = {"enabled", "begin_on_batch", "end_after_batch",
                                         "sync_timings", NULL};
    static const char *const k_rep[] = {"experiment_seed", NULL};
    static const char *const amp[] = {"O0", "O1", "O2", "O3", NULL};
    const char *op = "optimizations", *pp = "profiling", *rp = "reproducibility";
    json_t *o = kd_config__field(cfg, "optimizations");
    if (o &&
        (kd_config__want_object(c, o, op) || kd_config__check_keys(c, o, op, k_opt, NULL, NULL) ||
         kd_config__want_int(c, o, op, "aggregation_frequency", false, 1, INT64_MAX, NULL) ||
         kd_config__want_bool(c, o, op, "average_aggregated_gradients") ||
         kd_config__want_bool(c, o, op, "average_training_metrics") ||
         kd_config__want_bool(c, o, op, "gradient_compression") ||
         kd_config__want_enum(c, o, op, "mixed_precision", false, amp, NULL) ||
         kd_config__want_int(c, o, op, "tensor_fusion_threshold", false, 0, INT64_MAX, NULL) ||
         kd_config__want_int(c, o, op, "tensor_fusion_cycle_time", false, 0, INT64_MAX, NULL) ||
         kd_config__want_bool(c, o, op, "auto_tune_tensor_fusion") ||
         kd_config__want_str(c, o, op, "grad_updates_size_file", false, NULL)))
        return c->rc;
    json_t *p = kd_config__field(cfg, "profiling");
    int64_t begin = 0, end = -1;
    if (p &&
        (kd_config__want_object(c, p, pp) || kd_config__check_keys(c, p, pp, k_prof, NULL, NULL) ||
         kd_config__want_bool(c, p, pp, "enabled") ||
         kd_config__want_int(c, p, pp, "begin_on_batch", false, 0, INT64_MAX, &begin) ||
         kd_config__want_int(c, p, pp, "end_after_batch", false, 0, INT64_MAX, &end) ||
         kd_config__want_bool(c, p, pp, "sync_timings")))
        return c->rc;
    if (p && end >= 0 && end < begin)
        return BAD(c, kd_config__field(p, "end_after_batch"), "profiling.end_after_batch",
                   "must not be before begin_on_batch (%" PRId64 "), got %" PRId64, begin, end);
    json_t *r = kd_config__field(cfg, "reproducibility");
    if (r &&
        (kd_config__want_object(c, r, rp) || kd_config__check_keys(c, r, rp, k_rep, NULL, NULL) ||
         kd_config__want_int(c, r, rp, "experiment_seed", false, 0, INT32_MAX, NULL)))
        return c->rc;
    return 0;
}

/* ---- the whole config ------------------------------------------------------------------ */

static const char *const top_keys[] = {"name",
                                       "description",
                                       "labels",
                                       "workspace",
                                       "project",
                                       "data",
                                       "entrypoint",
                                       "hyperparameters",
                                       "searcher",
                                       "resources",
                                       "records_per_epoch",
                                       "min_validation_period",
                                       "min_checkpoint_period",
                                       "scheduling_unit",
                                       "perform_initial_validation",
                                       "checkpoint_policy",
                                       "checkpoint_storage",
                                       "max_restarts",
                                       "optimizations",
                                       "reproducibility",
                                       "environment",
                                       "bind_mounts",
                                       "profiling",
                                       "debug",
                                       "preemption_timeout",
                                       "log_policies",
                                       "retention_policy",
                                       "integrations",
                                       "slurm",
                                       "pbs",
                                       NULL};

static const struct kd_config_unsupported top_unsup[] = {
    {"internal", "is internal to Determined and not accepted by kdet"},
    {"data_layer", "was removed from Determined and is not supported"},
    {"security", "is a Determined field that kdet does not support"},
    {"tensorboard_storage", "was removed from Determined; TensorBoard reads checkpoint_storage"},
    {NULL, NULL}};

/*
 * log_policies: a list of {name, pattern, action}, the action a string or
 * (before Determined 0.38) {type: ...}; the pattern a POSIX extended
 * regular expression, compiled here so that a bad one is refused at
 * submission, not when the first line is tested against it.
 */
static int check_log_policies(struct kd_config_vctx *c, const json_t *lp)
{
    static const char *const k_lp[] = {"name", "pattern", "action", NULL};
    static const char *const k_action[] = {"type", NULL};
    char p[PATHLEN], q[PATHLEN], t[PATHLEN], d[96];
    const char *pattern = NULL, *type = NULL;
    size_t i;
    json_t *e;
    if (!lp)
        return 0;
    if (!json_is_array(lp))
        return BAD(c, lp, "log_policies", "expected a list of {name, pattern, action}, got %s",
                   kd_config__desc(lp, d, sizeof(d)));
    json_array_foreach(lp, i, e)
    {
        kd_config__joinidx(p, "log_policies", i);
        if (kd_config__want_object(c, e, p) ||
            kd_config__check_keys(c, e, p, k_lp, NULL, "a log policy") ||
            kd_config__want_str(c, e, p, "name", false, NULL) ||
            kd_config__want_str(c, e, p, "pattern", true, &pattern))
            return c->rc;
        regex_t re;
        char why[KD_ERRLEN];
        if (kd_regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB, why) != 0) {
            kd_config__join(q, p, "pattern");
            return BAD(c, kd_config__field(e, "pattern"), q,
                       "not a POSIX extended regular expression: %s", why);
        }
        regfree(&re);
        json_t *a = kd_config__field(e, "action");
        kd_config__join(q, p, "action");
        if (!a)
            return kd_config__need(c, e, p, "action", NULL);
        if (json_is_object(a)) {
            if (kd_config__check_keys(c, a, q, k_action, NULL, "a log policy action") ||
                kd_config__want_str(c, a, q, "type", true, &type))
                return c->rc;
            kd_config__join(t, q, "type");
            kd_strlcpy(q, t, sizeof(q));
            a = kd_config__field(a, "type");
        } else {
            type = json_string_value(a);
        }
        if (type == NULL || !kd_config_log_action_valid(type))
            return BAD(c, a, q, "expected cancel_retries or exclude_node, got %s",
                       kd_config__desc(a, d, sizeof(d)));
    }
    return 0;
}

/*
 * The fields of Determined 0.38 that kdet accepts but that mean nothing on
 * it: checked for their shape (a mapping, a list of mappings, ...) so that
 * a typo in them is still an error, then ignored with a warning (see
 * kd_config_warnings).
 */
static int check_foreign_sections(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const k_ret[] = {"log_retention_days", NULL};
    const char *rp = "";
    if (kd_config__want_int(c, cfg, rp, "preemption_timeout", false, 1, INT64_MAX, NULL))
        return c->rc;
    static const char *const objs[] = {"slurm", "pbs", "integrations", NULL};
    for (size_t k = 0; objs[k]; k++) {
        json_t *v = kd_config__field(cfg, objs[k]);
        if (v && kd_config__want_object(c, v, objs[k]))
            return c->rc;
    }
    json_t *r = kd_config__field(cfg, "retention_policy");
    if (r && (kd_config__want_object(c, r, "retention_policy") ||
              kd_config__check_keys(c, r, "retention_policy", k_ret, NULL, "retention_policy") ||
              kd_config__want_int(c, r, "retention_policy", "log_retention_days", false, -1, 32767,
                                  NULL)))
        return c->rc;
    return check_log_policies(c, kd_config__field(cfg, "log_policies"));
}

static int validate(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const policies[] = {"best", "all", "none", NULL};
    const char *rp = "";
    char d[96];
    if (!json_is_object(cfg))
        return BAD(c, cfg, "", "the experiment config must be a mapping of fields, got %s",
                   kd_config__desc(cfg, d, sizeof(d)));
    if (c->cr) {
        /* The Experiment resource's spec also holds kdet's desired state and context. */
        static const char *const cr_keys[] = {"paused",   "canceled", "archived",
                                              "template", "context",  NULL};
        const char *all[sizeof(top_keys) / sizeof(top_keys[0]) + 5];
        size_t n = 0;
        for (size_t i = 0; top_keys[i]; i++)
            all[n++] = top_keys[i];
        for (size_t i = 0; cr_keys[i]; i++)
            all[n++] = cr_keys[i];
        all[n] = NULL;
        if (kd_config__check_keys(c, cfg, rp, all, top_unsup, NULL) ||
            kd_config__want_bool(c, cfg, rp, "paused") ||
            kd_config__want_bool(c, cfg, rp, "canceled") ||
            kd_config__want_bool(c, cfg, rp, "archived") ||
            kd_config__want_str(c, cfg, rp, "template", false, NULL))
            return c->rc;
        json_t *ctx = kd_config__field(cfg, "context");
        if (ctx && kd_config__want_object(c, ctx, "context"))
            return c->rc;
    } else if (kd_config__check_keys(c, cfg, rp, top_keys, top_unsup, NULL)) {
        return c->rc;
    }
    /* Facts other sections depend on come first. */
    if (kd_config__want_int(c, cfg, rp, "records_per_epoch", false, 0, INT64_MAX,
                            &c->records_per_epoch))
        return c->rc;
    if (check_resources(c, cfg))
        return c->rc;
    json_t *s = kd_config__field(cfg, "searcher");
    const char *sn = json_string_value(json_object_get(s, "name"));
    c->searcher = sn && kd_config__in_list(sn, methods) ? sn : NULL;

    if (kd_config__want_str(c, cfg, rp, "name", false, NULL) ||
        kd_config__want_str(c, cfg, rp, "description", false, NULL) ||
        kd_config__want_str_list(c, cfg, rp, "labels") ||
        kd_config__want_str(c, cfg, rp, "workspace", false, NULL) ||
        kd_config__want_str(c, cfg, rp, "project", false, NULL))
        return c->rc;
    static const char *const wp[] = {"workspace", "project", NULL};
    for (size_t i = 0; wp[i]; i++) {
        char lv[KD_LABEL_VALUE_MAX + 1];
        json_t *v = kd_config__field(cfg, wp[i]);
        if (v && kd_label_value(json_string_value(v), lv, sizeof(lv)) != 0)
            return BAD(c, v, wp[i], "%s has no letter or digit to make the label kdet.io/%s from",
                       kd_config__desc(v, d, sizeof(d)), wp[i]);
    }
    json_t *name = kd_config__field(cfg, "name");
    if (name && strlen(json_string_value(name)) > 255)
        return BAD(c, name, "name", "longer than 255 characters");
    if (check_entrypoint(c, cfg) || check_hyperparameters(c, cfg) || check_searcher(c, cfg) ||
        want_length(c, cfg, rp, "min_validation_period", false, false, 0) ||
        want_length(c, cfg, rp, "min_checkpoint_period", false, false, 0) ||
        kd_config__want_int(c, cfg, rp, "scheduling_unit", false, 1, INT64_MAX, NULL) ||
        kd_config__want_bool(c, cfg, rp, "perform_initial_validation") ||
        kd_config__want_enum(c, cfg, rp, "checkpoint_policy", false, policies, NULL) ||
        check_storage(c, cfg) ||
        kd_config__want_int(c, cfg, rp, "max_restarts", false, 0, INT64_MAX, NULL) ||
        check_misc_sections(c, cfg) || kd_config__check_environment(c, cfg) ||
        kd_config__check_mounts(c, kd_config__field(cfg, "bind_mounts"), "bind_mounts", false) ||
        kd_config__check_mount_clashes(c, cfg) || kd_config__want_bool(c, cfg, rp, "debug") ||
        check_foreign_sections(c, cfg))
        return c->rc;
    return 0;
}

int kd_config_check(const json_t *cfg, char *err)
{
    struct kd_config_vctx c;
    memset(&c, 0, sizeof(c));
    c.err = err;
    c.cr = true;
    if (!cfg)
        return kd_seterr(err, KD_EINVAL, "kd_config_check: no config");
    return validate(&c, cfg);
}

/* ---- warnings ------------------------------------------------------------------------------ */

/* One warning per field of Determined's reference that kdet accepts and does not honour. */
static const struct kd_config_unsupported ignored_top[] = {
    {"slurm", "not applicable on kdet: trials run as Kubernetes pods, not Slurm jobs; ignored"},
    {"pbs", "not applicable on kdet: trials run as Kubernetes pods, not PBS jobs; ignored"},
    {"integrations", "not applicable on kdet (Pachyderm and webhook integrations); ignored"},
    {"retention_policy", "not applicable on kdet: task logs are the pods' logs, kept by "
                         "Kubernetes; ignored"},
    {"preemption_timeout", "not applicable on kdet: a preempted pod gets its "
                           "terminationGracePeriodSeconds (set it in environment.pod_spec); "
                           "ignored"},
    {NULL, NULL}};

static void warn(json_t *out, const char *path, const char *why)
{
    if (json_array_append_new(out, json_sprintf("%s: %s", path, why)))
        kd_oom(64);
}

json_t *kd_config_warnings(const json_t *cfg)
{
    json_t *out = json_array();
    if (!out)
        kd_oom(64);
    if (!json_is_object(cfg))
        return out;
    for (size_t i = 0; ignored_top[i].key; i++)
        if (kd_config__field(cfg, ignored_top[i].key))
            warn(out, ignored_top[i].key, ignored_top[i].why);
    const json_t *env = kd_config__field(cfg, "environment");
    if (json_is_object(env) && kd_config__field(env, "registry_auth"))
        warn(out, "environment.registry_auth",
             "not applicable on kdet: pods pull images with a Kubernetes image pull Secret (set "
             "imagePullSecrets in environment.pod_spec.spec); ignored");
    if (json_is_object(env) && kd_config__field(env, "proxy_ports"))
        warn(out, "environment.proxy_ports",
             "not applicable on kdet: there is no master proxy; reach a trial's ports with "
             "environment.ports and kubectl port-forward or a Service; ignored");
    const json_t *dev = kd_config__field(kd_config__field(cfg, "resources"), "devices");
    size_t i;
    const json_t *e;
    const char *host = NULL;
    json_array_foreach(dev, i, e)
    {
        const char *hp = json_string_value(json_object_get(e, "host_path"));
        char p[PATHLEN], why[PATHLEN + 160];
        if (kd_device_is_gpu(hp)) {
            kd_config__joinidx(p, "resources.devices", i);
            snprintf(why, sizeof(why),
                     "%s is a GPU: on Kubernetes the device plugin gives a trial its GPUs "
                     "(resources.slots_per_trial); ignored",
                     hp);
            warn(out, p, why);
        } else if (!host) {
            host = hp;
        }
    }
    if (host)
        warn(out, "resources.devices",
             "host devices reach a trial only through a privileged container, where the cluster "
             "allows it (kdet-controller --allow-host-devices; elsewhere the experiment fails "
             "naming this field); `mode` is not enforced");
    const json_t *cs = kd_config__field(cfg, "checkpoint_storage");
    if (json_is_object(cs) && !kd_config__field(cs, "type"))
        warn(out, "checkpoint_storage",
             "no type: a partial override; the cluster's default checkpoint storage "
             "(kdet-controller --default-checkpoint-storage) supplies the rest, and the "
             "experiment fails if the cluster has none or the merge is invalid");
    const json_t *s = kd_config__field(cfg, "searcher");
    const char *sn = json_string_value(json_object_get(s, "name"));
    if (sn && (!strcmp(sn, "single") || !strcmp(sn, "random") || !strcmp(sn, "grid")) &&
        !kd_config__field(s, "max_length"))
        warn(
            out, "searcher.max_length",
            "not set: each trial runs until its training code ends it (Trainer.fit(max_length=...) "
            "or its own loop) and its workers exit 0");
    return out;
}

/* ---- templates --------------------------------------------------------------------------- */

static bool keyed_by_container_path(const char *path)
{
    return !strcmp(path, "bind_mounts") || !strcmp(path, "resources.devices");
}

static json_t *merge(const json_t *t, const json_t *c, const char *path);

static json_t *merge_arrays(const json_t *t, const json_t *c, const char *path)
{
    json_t *out = json_array(), *used = json_object();
    size_t i;
    json_t *e;
    if (!out || !used)
        kd_oom(64);
    bool keyed = keyed_by_container_path(path);
    /* The container paths the config uses, as a set. */
    json_array_foreach(c, i, e)
    {
        const char *cp = json_string_value(json_object_get(e, "container_path"));
        if (keyed && cp && json_object_set_new(used, cp, json_true()))
            kd_oom(64);
    }
    json_array_foreach(t, i, e)
    {
        const char *cp = json_string_value(json_object_get(e, "container_path"));
        if (keyed && cp && json_object_get(used, cp))
            continue; /* the config mounts something else there */
        if (json_array_append(out, e))
            kd_oom(64);
    }
    json_array_foreach(c, i, e)
    {
        if (json_array_append(out, e))
            kd_oom(64);
    }
    json_decref(used);
    return out;
}

static json_t *merge(const json_t *t, const json_t *c, const char *path)
{
    char p[PATHLEN];
    if (json_is_null(c) && t)
        return json_incref((json_t *)t);
    if (json_is_object(t) && json_is_object(c)) {
        json_t *out = json_object();
        const char *k;
        json_t *v;
        if (!out)
            kd_oom(64);
        json_object_foreach((json_t *)c, k, v)
        {
            json_t *tv = json_object_get(t, k);
            json_t *m;
            kd_config__join(p, path, k);
            /* The entrypoint is one command, not a list to extend. */
            if (!tv || !strcmp(p, "entrypoint"))
                m = json_incref(v);
            else
                m = merge(tv, v, p);
            if (json_object_set_new(out, k, m))
                kd_oom(64);
        }
        json_object_foreach((json_t *)t, k, v)
        {
            if (!json_object_get(c, k) && json_object_set(out, k, v))
                kd_oom(64);
        }
        return out;
    }
    if (json_is_array(t) && json_is_array(c))
        return merge_arrays(t, c, path);
    return json_incref((json_t *)c);
}

/*
 * Add the expanded size of v to *total (a string or key costs its length
 * plus one, any other node one, as in the YAML reader's budget) and stop
 * as soon as it passes `cap`: the merged tree shares subtrees by reference,
 * so a walk that did not stop could itself take as long as a copy.
 */
static bool over_budget(const json_t *v, size_t cap, size_t *total, int depth)
{
    const char *k;
    json_t *e;
    size_t i;
    *total += 1 + (json_is_string(v) ? json_string_length(v) : 0);
    if (*total > cap || depth > KD_YAML_MAX_DEPTH * 2)
        return true;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, e)
        {
            *total += strlen(k) + 1;
            if (over_budget(e, cap, total, depth + 1))
                return true;
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, e)
        {
            if (over_budget(e, cap, total, depth + 1))
                return true;
        }
    }
    return false;
}

int kd_config_merge_template(const json_t *tmpl, const json_t *cfg, json_t **out, char *err)
{
    int rc = 0;
    size_t total = 0;
    if (!out)
        return kd_seterr(err, KD_EINVAL, "kd_config_merge_template: invalid arguments");
    *out = NULL;
    if (!tmpl || !cfg) {
        rc = kd_seterr(err, KD_EINVAL, "kd_config_merge_template: invalid arguments");
        goto out;
    }
    *out = merge(tmpl, cfg, "");
    if (!*out) {
        rc = kd_seterr(err, KD_ENOMEM, "template merge: out of memory");
        goto out;
    }
    if (over_budget(*out, KD_CONFIG_MAX_BYTES, &total, 0)) {
        json_decref(*out);
        *out = NULL;
        rc = kd_seterr(err, KD_ETOOBIG,
                       "template merge: the config merged over its template expands to more than "
                       "%u bytes (or nests deeper than %d levels)",
                       (unsigned)KD_CONFIG_MAX_BYTES, KD_YAML_MAX_DEPTH * 2);
    }
out:
    return rc;
}

/* ---- loading ------------------------------------------------------------------------------ */

static int root_mapping(const struct kd_yaml_doc *doc, const char *what, char *err)
{
    json_t *r = kd_yaml_root(doc);
    char d[96];
    if (json_is_object(r))
        return 0;
    if (json_is_null(r))
        return kd_seterr(err, KD_EINVALID,
                         "%s: the %s is empty; an experiment config needs at least entrypoint and "
                         "searcher",
                         kd_yaml_name(doc), what);
    int line = 1, col = 1;
    if (kd_yaml_where(doc, "", &line, &col))
        line = col = 1;
    return kd_seterr(err, KD_EINVALID, "%s:%d:%d: the %s must be a mapping of fields, got %s",
                     kd_yaml_name(doc), line, col, what, kd_config__desc(r, d, sizeof(d)));
}

int kd_config_load(const char *path, const char *template_path, json_t **out, char *err)
{
    struct kd_yaml_doc *doc = NULL, *tdoc = NULL;
    json_t *merged = NULL;
    struct kd_config_vctx c;
    int rc = 0;

    if (!path || !out) {
        rc = kd_seterr(err, KD_EINVAL, "kd_config_load: invalid arguments");
        goto out;
    }
    *out = NULL;
    if ((rc = kd_yaml_parse_file(path, &doc, err)))
        goto out;
    if ((rc = root_mapping(doc, "experiment config", err)))
        goto out;
    if (template_path) {
        if ((rc = kd_yaml_parse_file(template_path, &tdoc, err)))
            goto out;
        if ((rc = root_mapping(tdoc, "template", err)))
            goto out;
        if ((rc = kd_config_merge_template(kd_yaml_root(tdoc), kd_yaml_root(doc), &merged, err)))
            goto out;
    } else {
        merged = json_incref(kd_yaml_root(doc));
    }
    memset(&c, 0, sizeof(c));
    c.err = err;
    c.docs[0] = doc;
    c.docs[1] = tdoc;
    if ((rc = validate(&c, merged)))
        goto out;
    *out = json_deep_copy(merged);
    if (!*out)
        kd_oom(64);
out:
    json_decref(merged);
    kd_yaml_free(doc);
    kd_yaml_free(tdoc);
    return rc;
}

/* ---- defaults ------------------------------------------------------------------------------ */

/* Set obj[key] = v (stolen) when the key is absent or null. */
static void dflt(json_t *obj, const char *key, json_t *v)
{
    if (!v)
        kd_oom(64);
    json_t *cur = json_object_get(obj, key);
    if (cur && !json_is_null(cur)) {
        json_decref(v);
        return;
    }
    if (json_object_set_new(obj, key, v))
        kd_oom(64);
}

/* The object at obj[key], created when absent or null; NULL (error set) on a wrong type. */
static json_t *section(json_t *obj, const char *key, const char *path, char *err)
{
    dflt(obj, key, json_object());
    json_t *s = json_object_get(obj, key);
    if (!json_is_object(s)) {
        kd_seterr(err, KD_EINVALID, "%s: expected a mapping of fields", path);
        return NULL;
    }
    return s;
}

static void dflt_hparams(json_t *hp)
{
    const char *k;
    json_t *v;
    json_object_foreach(hp, k, v)
    {
        if (!json_is_object(v))
            continue;
        const char *t = json_string_value(json_object_get(v, "type"));
        if (!json_object_get(v, "type"))
            dflt_hparams(v);
        else if (t && !strcmp(t, "log"))
            dflt(v, "base", json_real(10.0));
    }
}

int kd_config_apply_defaults(json_t *cfg, char *err)
{
    json_t *s;
    size_t i;
    json_t *e;
    int rc = 0;

    if (!json_is_object(cfg)) {
        rc = kd_seterr(err, KD_EINVALID, "the experiment config must be a mapping of fields");
        goto out;
    }
    dflt(cfg, "labels", json_array());
    dflt(cfg, "data", json_object());
    dflt(cfg, "hyperparameters", json_object());
    dflt(cfg, "bind_mounts", json_array());
    dflt(cfg, "checkpoint_policy", json_string("best"));
    dflt(cfg, "max_restarts", json_integer(5));
    dflt(cfg, "records_per_epoch", json_integer(0));
    dflt(cfg, "scheduling_unit", json_integer(100));
    dflt(cfg, "perform_initial_validation", json_false());
    dflt(cfg, "debug", json_false());
    dflt(cfg, "min_validation_period", json_pack("{s:i}", "batches", 0));
    dflt(cfg, "min_checkpoint_period", json_pack("{s:i}", "batches", 0));
    if (json_is_object(json_object_get(cfg, "hyperparameters")))
        dflt_hparams(json_object_get(cfg, "hyperparameters"));

    if (!(s = section(cfg, "resources", "resources", err))) {
        rc = KD_EINVALID;
        goto out;
    }
    dflt(s, "slots_per_trial", json_integer(1));
    dflt(s, "weight", json_real(1.0));
    dflt(s, "resource_pool", json_string(""));
    dflt(s, "is_single_node", json_false());
    dflt(s, "devices", json_array());
    json_array_foreach(json_object_get(s, "devices"), i, e)
    {
        if (json_is_object(e))
            dflt(e, "mode", json_string("mrw"));
    }
    json_array_foreach(json_object_get(cfg, "bind_mounts"), i, e)
    {
        if (json_is_object(e)) {
            dflt(e, "read_only", json_false());
            dflt(e, "propagation", json_string("rprivate"));
        }
    }

    if (!(s = section(cfg, "optimizations", "optimizations", err))) {
        rc = KD_EINVALID;
        goto out;
    }
    dflt(s, "aggregation_frequency", json_integer(1));
    dflt(s, "average_aggregated_gradients", json_true());
    dflt(s, "average_training_metrics", json_true());
    dflt(s, "gradient_compression", json_false());
    dflt(s, "mixed_precision", json_string("O0"));
    dflt(s, "tensor_fusion_threshold", json_integer(64));
    dflt(s, "tensor_fusion_cycle_time", json_integer(5));
    dflt(s, "auto_tune_tensor_fusion", json_false());

    if (!(s = section(cfg, "reproducibility", "reproducibility", err))) {
        rc = KD_EINVALID;
        goto out;
    }
    dflt(s, "experiment_seed", json_integer((json_int_t)((kd_wall_ms() / 1000) & INT32_MAX)));

    if (!(s = section(cfg, "environment", "environment", err))) {
        rc = KD_EINVALID;
        goto out;
    }
    dflt(s, "environment_variables", json_array());
    dflt(s, "force_pull_image", json_false());
    dflt(s, "add_capabilities", json_array());
    dflt(s, "drop_capabilities", json_array());

    if (!(s = section(cfg, "profiling", "profiling", err))) {
        rc = KD_EINVALID;
        goto out;
    }
    dflt(s, "enabled", json_false());
    dflt(s, "begin_on_batch", json_integer(0));
    dflt(s, "sync_timings", json_true());

    s = kd_config__field(cfg, "checkpoint_storage");
    if (s) {
        if (!json_is_object(s)) {
            rc = kd_seterr(err, KD_EINVALID, "checkpoint_storage: expected a mapping of fields");
            goto out;
        }
        dflt(s, "save_experiment_best", json_integer(0));
        dflt(s, "save_trial_best", json_integer(1));
        dflt(s, "save_trial_latest", json_integer(1));
        const char *t = json_string_value(json_object_get(s, "type"));
        if (t && !strcmp(t, "shared_fs"))
            dflt(s, "propagation", json_string("rprivate"));
    }

    s = kd_config__field(cfg, "searcher");
    if (s) {
        if (!json_is_object(s)) {
            rc = kd_seterr(err, KD_EINVALID, "searcher: expected a mapping of fields");
            goto out;
        }
        const char *n = json_string_value(json_object_get(s, "name"));
        dflt(s, "smaller_is_better", json_true());
        if (n && (!strcmp(n, "random") || !strcmp(n, "grid") || !strcmp(n, "bayesian")))
            dflt(s, "max_concurrent_trials", json_integer(16));
        if (n && !strcmp(n, "adaptive_asha")) {
            dflt(s, "max_concurrent_trials", json_integer(0));
            dflt(s, "mode", json_string("standard"));
            dflt(s, "divisor", json_real(4.0));
            dflt(s, "max_rungs", json_integer(5));
            dflt(s, "stop_once", json_false());
            dflt(s, "bracket_rungs", json_array());
        }
        if (n && !strcmp(n, "bayesian")) {
            json_int_t mt = json_integer_value(json_object_get(s, "max_trials"));
            dflt(s, "num_startup_trials", json_integer(mt > 0 && mt < 10 ? mt : 10));
        }
        json_array_foreach(json_object_get(s, "early_stopping"), i, e)
        {
            const char *t = json_string_value(json_object_get(e, "type"));
            if (!t)
                continue;
            if (!strcmp(t, "patience"))
                dflt(e, "min_delta", json_real(0.0));
            else if (!strcmp(t, "threshold"))
                dflt(e, "end_experiment", json_false());
            else if (!strcmp(t, "median")) {
                dflt(e, "grace_period", json_integer(0));
                dflt(e, "min_trials", json_integer(3));
            }
        }
    }
out:
    return rc;
}

/* ---- the kdet-launch command line ------------------------------------------------------ */

void kd_config_argv_free(char **argv)
{
    if (!argv)
        return;
    for (size_t i = 0; argv[i]; i++)
        free(argv[i]);
    free(argv);
}

int kd_config_launch_argv(const json_t *entrypoint, char ***argv, int *argc, char *err)
{
    struct kd_config_vctx c;
    char **w = NULL, **out = NULL;
    size_t n = 0, k = 0;
    int rc = 0;

    if (!argv || !argc) {
        rc = kd_seterr(err, KD_EINVAL, "kd_config_launch_argv: invalid arguments");
        goto out;
    }
    *argv = NULL;
    *argc = 0;
    /* Validate with the same rules (and messages) as the config check. */
    memset(&c, 0, sizeof(c));
    c.err = err;
    json_t *holder = json_object();
    if (!holder)
        kd_oom(64);
    if (entrypoint && json_object_set(holder, "entrypoint", (json_t *)entrypoint))
        kd_oom(64);
    rc = check_entrypoint(&c, holder);
    json_decref(holder);
    if (rc)
        goto out;
    if (json_is_string(entrypoint)) {
        if (split_words(json_string_value(entrypoint), &w, &n)) {
            rc = kd_seterr(err, KD_EINVALID, "entrypoint: cannot be split into words");
            goto out;
        }
    } else {
        size_t i;
        json_t *e;
        n = json_array_size(entrypoint);
        w = kd_xcalloc(n ? n : 1, sizeof(*w));
        json_array_foreach(entrypoint, i, e) w[i] = kd_xstrdup(json_string_value(e));
    }
    out = kd_xcalloc(n + 3, sizeof(*out));
    if (n == 1 && is_trial_ref(w[0])) {
        out[k++] = kd_xstrdup("--trial");
        out[k++] = kd_xstrdup(w[0]);
    } else if (n >= 3 && is_python(w[0]) && !strcmp(w[1], "-m") &&
               (kd_str_has_prefix(w[2], "kdet.launch.") ||
                kd_str_has_prefix(w[2], "determined.launch."))) {
        out[k++] = kd_xstrdup(strrchr(w[2], '.') + 1);
        for (size_t i = 3; i < n; i++)
            out[k++] = kd_xstrdup(w[i]);
    } else {
        out[k++] = kd_xstrdup("--");
        for (size_t i = 0; i < n; i++)
            out[k++] = kd_xstrdup(w[i]);
    }
    out[k] = NULL;
    *argv = out;
    *argc = (int)k;
    out = NULL;
out:
    for (size_t i = 0; i < n; i++)
        free(w[i]);
    free(w);
    kd_config_argv_free(out);
    return rc;
}

bool kd_config_log_action_valid(const char *type)
{
    return type != NULL &&
           (strcmp(type, "cancel_retries") == 0 || strcmp(type, "exclude_node") == 0);
}
