/*
 * Reading metrics back: a trial's series (downsampled by the server when
 * asked), every trial's series of an experiment for a chart (from the
 * overviews of sketch.c), and the best validation result of every trial.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "store/store_int.h"

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define MAX_POINTS 100000
#define MAX_METRIC_NAME 256

/*
 * Downsampling keeps m of n rows (n > m >= 2) at positions
 * j_k = floor(k (n-1) / (m-1)), k = 0..m-1: evenly spaced, always the first
 * and the last, all distinct because (n-1)/(m-1) >= 1. Row j (0-based) is
 * kept when, for the smallest k with j_k >= j, that is
 * k = ceil(j (m-1) / (n-1)), j_k == j. With m == 1 only the last row stays.
 */
/*
 * A step reported by several batches (an attempt that resumed from an
 * earlier checkpoint trains and reports those steps again, under its own
 * keys) appears once: the row written last, that is the newest attempt's
 * (one writer inserts, so ids grow in commit order).
 */
static const char *const SERIES_SQL =
    "WITH l AS (SELECT DISTINCT ON (step) id, step, reported_at, metrics"
    "  FROM metrics WHERE trial_id = $1::bigint AND kind = $2 ORDER BY step, id DESC),"
    " r AS (SELECT step, reported_at, metrics,"
    "  row_number() OVER (ORDER BY step, id) - 1 AS j, count(*) OVER () AS n FROM l),"
    " s AS (SELECT * FROM r WHERE $3::bigint <= 0 OR n <= $3::bigint"
    "  OR ($3::bigint = 1 AND j = n - 1)"
    "  OR ($3::bigint > 1 AND ((((j * ($3::bigint - 1) + n - 2) / (n - 1)) * (n - 1))"
    "      / ($3::bigint - 1)) = j))"
    " SELECT coalesce(json_agg(json_build_object('step', step, 'reported_at', " TS(
        "reported_at") ", 'metrics', metrics) ORDER BY j), '[]') FROM s";

int kd_store_metrics_series(struct kd_store *s, int64_t trial_id, enum kd_metric_kind kind,
                            int max_points, json_t **out, char *err)
{
    char tb[24], mb[24];
    *out = NULL;
    if (trial_id <= 0)
        return kd_seterr(err, KD_EINVAL, "trial_id: %lld is not an id", (long long)trial_id);
    if ((int)kind < KD_METRIC_TRAINING || (int)kind > KD_METRIC_PROFILING)
        return kd_seterr(err, KD_EINVAL, "kind: %d is not a metric kind", (int)kind);
    if (max_points < 0 || max_points > MAX_POINTS)
        return kd_seterr(err, KD_EINVAL, "max_points: %d out of range 0..%d", max_points,
                         MAX_POINTS);
    snprintf(tb, sizeof(tb), "%lld", (long long)trial_id);
    snprintf(mb, sizeof(mb), "%d", max_points);
    const char *p[3] = {tb, kd_metric_kind_name(kind), mb};
    return kd_store__json(s, "metric series", SERIES_SQL, 3, p, out, err);
}

/*
 * A chart of every trial of an experiment (kd_store_metrics_overview).
 * Every trial shares the buckets, 2^shift steps from step 0, so that a
 * coarser answer is always a merge of a finer one and of the overviews.
 * From the overviews: the mark says which rows they hold; one statement
 * reads the trials' overviews of one level and, aggregated per trial, the
 * rows written since (usually none, or a second's worth). A trial whose
 * overview is coarser than asked (a narrow range), or whose newer rows
 * report a step again (an attempt resumed from a checkpoint: the point it
 * replaces may be one the overview no longer holds), is read from its rows.
 */
#define MAX_POINTS_ALL 10000
#define MAX_STEP_RANGE ((int64_t)1 << 53) /* steps go through float8 in ROWS_SQL */
#define LAG_MAX 200000 /* rows not in the overviews yet beyond which the rows are read */
#define ANSWER_MAX (256u << 20)

static const char *const STATE_SQL =
    "SELECT (SELECT upto_id FROM metric_sketch_mark), (SELECT coalesce(max(id), 0) FROM metrics),"
    " (SELECT count(*) FROM trials WHERE experiment_id = $1::bigint)";

#define OVERVIEW_SQL(level)                                                                        \
    "SELECT trial_id, o.max_step, o." level "_shift, o." level ", tl.rows FROM"                    \
    " (SELECT s.trial_id, s.max_step, s." level "_shift, s." level " FROM metric_sketches s"       \
    "  JOIN trials t ON t.id = s.trial_id WHERE t.experiment_id = $1::bigint AND s.kind = $2) o"   \
    " FULL JOIN (SELECT m.trial_id,"                                                               \
    "  json_agg(json_build_array(m.step, m.metrics) ORDER BY m.id) AS rows"                        \
    "  FROM metrics m JOIN trials t ON t.id = m.trial_id WHERE t.experiment_id = $1::bigint"       \
    "  AND m.kind = $2 AND m.id > $3::bigint GROUP BY m.trial_id) tl USING (trial_id)"             \
    " ORDER BY trial_id"

/* The longest series' last step, when the rows are read for the whole range. */
static const char *const MAX_STEP_SQL =
    "SELECT coalesce(max(x.m), 0) FROM trials t, LATERAL (SELECT max(m.step) AS m FROM metrics m"
    " WHERE m.trial_id = t.id AND m.kind = $2) x WHERE t.experiment_id = $1::bigint";

/*
 * M4 from the rows: each trial's steps from..to in order from the
 * (trial_id, kind, step) index (the newest row of a step reported twice),
 * bucket (step - from) / width; per bucket the first, last, lowest and
 * highest point by array comparison (ties to the earlier step, as
 * kd_sketch__m4), pivoted to columns per metric name. $6: the trials to
 * read (NULL: all of the experiment's).
 */
static const char *const ROWS_SQL =
    "WITH r AS (SELECT t.id AS trial_id, x.step, x.metrics FROM trials t, LATERAL ("
    "  SELECT DISTINCT ON (m.step) m.step, m.metrics FROM metrics m"
    "  WHERE m.trial_id = t.id AND m.kind = $2 AND m.step BETWEEN $3::bigint AND $4::bigint"
    "  ORDER BY m.step, m.id DESC) x"
    "  WHERE t.experiment_id = $1::bigint AND ($6::bigint[] IS NULL OR t.id = ANY ($6::bigint[]))),"
    " kv AS (SELECT r.trial_id, e.key, r.step::float8 AS s, (e.value::text)::float8 AS v,"
    "  (r.step - $3::bigint) / $5::bigint AS b"
    "  FROM r, jsonb_each(r.metrics) e WHERE jsonb_typeof(e.value) = 'number'),"
    " g AS (SELECT trial_id, key, min(ARRAY[s, v]) AS f, max(ARRAY[s, v]) AS l,"
    "  min(ARRAY[v, s]) AS lo, max(ARRAY[v, -s]) AS hi FROM kv GROUP BY trial_id, key, b),"
    " p AS (SELECT DISTINCT g.trial_id, g.key, x.s, x.v FROM g, LATERAL (VALUES (f[1], f[2]),"
    "  (l[1], l[2]), (lo[2], lo[1]), (-hi[2], hi[1])) AS x (s, v)),"
    " per AS (SELECT trial_id, key, json_build_object('steps', json_agg(s::bigint ORDER BY s),"
    "  'values', json_agg(v ORDER BY s)) AS v FROM p GROUP BY trial_id, key),"
    " pt AS (SELECT trial_id, json_object_agg(key, v ORDER BY key COLLATE \"C\") AS series"
    "  FROM per GROUP BY trial_id)"
    " SELECT coalesce(json_agg(json_build_object('trial_id', trial_id, 'series', series)"
    "  ORDER BY trial_id), '[]') FROM pt";

static int int_at(PGresult *r, int row, int col, int64_t *out)
{
    return PQgetisnull(r, row, col) ? (*out = 0, 0) : kd_parse_i64(PQgetvalue(r, row, col), out);
}

/* What one answer covers: steps from..to (whole buckets) in buckets of 2^shift steps. */
struct span {
    int64_t from, to;
    int shift;
};

/* The buckets of an asked range: the smallest power of two that makes at most `buckets`. */
static struct span range_span(int64_t from, int64_t to, int buckets)
{
    struct span sp = {.shift = kd_sketch__shift(to - from, buckets, 0)};
    sp.from = (from >> sp.shift) << sp.shift;
    sp.to = (((to >> sp.shift) + 1) << sp.shift) - 1;
    if (sp.to >= MAX_STEP_RANGE)
        sp.to = MAX_STEP_RANGE - 1;
    return sp;
}

/* ROWS_SQL over sp for the trials in ids ("{1,2}"; NULL: all): the JSON array text in *r. */
static int read_rows(struct kd_store *s, const char *eb, const char *kind, struct span sp,
                     const char *ids, PGresult **r, char *err)
{
    char fb[24], tb[24], wb[24];
    snprintf(fb, sizeof(fb), "%lld", (long long)sp.from);
    snprintf(tb, sizeof(tb), "%lld", (long long)sp.to);
    snprintf(wb, sizeof(wb), "%lld", (long long)((int64_t)1 << sp.shift));
    const char *p[6] = {eb, kind, fb, tb, wb, ids};
    int rc = kd_store__exec(s, "metric series", ROWS_SQL, 6, p, true, r, err);
    if (rc == 0 && (PQntuples(*r) != 1 || PQgetisnull(*r, 0, 0))) {
        PQclear(*r);
        *r = NULL;
        rc = kd_seterr(err, KD_EPROTO, "metric series: no answer");
    }
    return rc;
}

/* Every trial from the rows (profiling, or overviews far behind). */
static int from_rows(struct kd_store *s, const char *eb, const char *kind, int buckets,
                     const struct kd_series_ask *ask, struct kd_buf *out, struct kd_series_got *got,
                     char *err)
{
    PGresult *r = NULL;
    struct span sp;
    int rc = 0;
    if (ask->range) {
        sp = range_span(ask->from, ask->to, buckets);
    } else {
        int64_t top = 0;
        const char *p[2] = {eb, kind};
        rc = kd_store__exec(s, "metric series", MAX_STEP_SQL, 2, p, true, &r, err);
        if (rc == 0 && int_at(r, 0, 0, &top) != 0)
            rc = kd_seterr(err, KD_EPROTO, "metric series: bad last step");
        PQclear(r);
        r = NULL;
        if (rc != 0)
            return rc;
        sp = (struct span){0, MAX_STEP_RANGE - 1, kd_sketch__shift(top, buckets, 0)};
    }
    rc = read_rows(s, eb, kind, sp, NULL, &r, err);
    if (rc == 0 && (rc = kd_buf_append(out, PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0))))
        rc = kd_seterr(err, rc, "metric series: answer too big");
    PQclear(r);
    got->buckets = buckets;
    got->width = (int64_t)1 << sp.shift;
    got->from = ask->range ? sp.from : 0;
    got->to = ask->range ? sp.to : 0;
    got->rows = true;
    return rc;
}

/* The overview of row `row` with the newer rows folded in, clipped to sp, at sp.shift. */
static int fold_trial(PGresult *r, int row, json_t *tail, struct span sp, struct kd_buf *out,
                      char *err)
{
    struct kd_series_set set = {0};
    int64_t top = 0;
    size_t i;
    json_t *x;
    int rc = 0;
    if (!PQgetisnull(r, row, 3))
        rc = kd_sketch__decode(&set, PQgetvalue(r, row, 3), (size_t)PQgetlength(r, row, 3), err);
    json_array_foreach(tail, i, x)
    {
        json_t *st = json_array_get(x, 0), *m = json_array_get(x, 1);
        if (rc == 0 && json_is_integer(st) && json_is_object(m))
            kd_sketch__add_metrics(&set, json_integer_value(st), m, &top);
    }
    if (rc == 0) {
        /* Clipping keeps the points' order, so the settling in reduce (the newest point of a
         * step) picks the same ones after it as before. */
        kd_sketch__clip(&set, sp.from, sp.to);
        kd_sketch__reduce(&set, sp.shift);
        rc = kd_sketch__encode(out, &set);
    }
    kd_sketch__free(&set);
    return rc;
}

/* Each trial's series text in pieces (NULL: to be read from the rows), then in order. */
struct piece {
    int64_t trial;
    size_t at, len;
    bool rows;
};

static int from_overviews(struct kd_store *s, const char *eb, const char *kind, int64_t mark,
                          int buckets, const struct kd_series_ask *ask, struct kd_buf *out,
                          struct kd_series_got *got, char *err)
{
    PGresult *r = NULL, *rr = NULL;
    json_t **tails = NULL, *raw = NULL;
    struct piece *pc = NULL;
    struct kd_buf text = KD_BUF_INIT(ANSWER_MAX), ids = KD_BUF_INIT(ANSWER_MAX);
    char mb[24];
    int64_t top = 0;
    int rc = 0, n = 0;
    snprintf(mb, sizeof(mb), "%lld", (long long)mark);
    const char *p[3] = {eb, kind, mb};
    /* A range wants detail: the fine overviews; the whole range the level that suffices. */
    bool coarse = !ask->range && buckets <= KD_SKETCH_COARSE;
    rc = kd_store__exec(s, "metric series", coarse ? OVERVIEW_SQL("coarse") : OVERVIEW_SQL("fine"),
                        3, p, true, &r, err);
    if (rc != 0)
        goto out;
    n = PQntuples(r);
    tails = kd_xcalloc(n ? (size_t)n : 1, sizeof(*tails));
    pc = kd_xcalloc(n ? (size_t)n : 1, sizeof(*pc));
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t ms = 0;
        if (int_at(r, i, 0, &pc[i].trial) != 0 || int_at(r, i, 1, &ms) != 0)
            rc = kd_seterr(err, KD_ECORRUPT, "metric overviews: bad numbers");
        if (ms > top)
            top = ms;
        if (rc == 0 && !PQgetisnull(r, i, 4)) {
            json_error_t je;
            size_t k;
            json_t *x;
            tails[i] = json_loadb(PQgetvalue(r, i, 4), (size_t)PQgetlength(r, i, 4), 0, &je);
            if (!json_is_array(tails[i]))
                rc = kd_seterr(err, KD_EPROTO, "metric series: newer rows: %s", je.text);
            json_array_foreach(tails[i], k, x)
            {
                json_int_t st = json_integer_value(json_array_get(x, 0));
                if (st > top)
                    top = st;
            }
        }
    }
    /* The whole range: buckets every trial shares, after the longest series, newer rows too. */
    struct span sp = ask->range ? range_span(ask->from, ask->to, buckets)
                                : (struct span){0, INT64_MAX, kd_sketch__shift(top, buckets, 0)};
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t lshift = 0, last = -1;
        size_t k;
        json_t *x;
        bool again = false;
        if (int_at(r, i, 2, &lshift) != 0 ||
            (!PQgetisnull(r, i, 1) && int_at(r, i, 1, &last) != 0)) {
            rc = kd_seterr(err, KD_ECORRUPT, "metric overviews: bad numbers");
            break;
        }
        json_array_foreach(tails[i], k, x) again =
            again || json_integer_value(json_array_get(x, 0)) <= last;
        pc[i].at = text.len;
        if (again || lshift > sp.shift) {
            pc[i].rows = true;
            rc = kd_buf_printf(&ids, "%s%lld", ids.len ? "," : "{", (long long)pc[i].trial);
        } else if (!tails[i] && !ask->range && lshift == sp.shift && !PQgetisnull(r, i, 3)) {
            /* an overview at the very buckets asked is the answer as it is stored */
            rc = kd_buf_append(&text, PQgetvalue(r, i, 3), (size_t)PQgetlength(r, i, 3));
        } else {
            rc = fold_trial(r, i, tails[i], sp, &text, err);
        }
        pc[i].len = text.len - pc[i].at;
    }
    if (rc == 0 && ids.len > 0) {
        json_error_t je;
        if ((rc = kd_buf_putc(&ids, '}')) == 0)
            rc = read_rows(s, eb, kind,
                           sp.to > MAX_STEP_RANGE - 1
                               ? (struct span){sp.from, MAX_STEP_RANGE - 1, sp.shift}
                               : sp,
                           kd_buf_str(&ids), &rr, err);
        if (rc == 0) /* json_is_array is a macro: its argument is evaluated twice */
            raw = json_loadb(PQgetvalue(rr, 0, 0), (size_t)PQgetlength(rr, 0, 0), 0, &je);
        if (rc == 0 && !json_is_array(raw))
            rc = kd_seterr(err, KD_EPROTO, "metric series: rows: %s", je.text);
    }
    /* In trial order; trials without a number left out. */
    size_t ri = 0;
    bool first = true;
    if (rc == 0)
        rc = kd_buf_putc(out, '[');
    for (int i = 0; i < n && rc == 0; i++) {
        char *dumped = NULL;
        const char *t = text.data ? text.data + pc[i].at : "";
        size_t len = pc[i].len;
        if (pc[i].rows) {
            json_t *e = json_array_get(raw, ri);
            if (json_integer_value(json_object_get(e, "trial_id")) != pc[i].trial)
                continue; /* nothing in range */
            ri++;
            dumped = json_dumps(json_object_get(e, "series"), JSON_COMPACT);
            t = dumped ? dumped : "{}";
            len = strlen(t);
        }
        if (len > 2) {
            rc = kd_buf_printf(out, "%s{\"trial_id\":%lld,\"series\":", first ? "" : ",",
                               (long long)pc[i].trial);
            if (rc == 0)
                rc = kd_buf_append(out, t, len);
            if (rc == 0)
                rc = kd_buf_putc(out, '}');
            first = false;
        }
        free(dumped);
    }
    if (rc == 0)
        rc = kd_buf_putc(out, ']');
    if (rc == KD_ETOOBIG || rc == KD_ENOMEM)
        rc = kd_seterr(err, rc, "metric series: answer too big");
    got->buckets = buckets;
    got->width = (int64_t)1 << sp.shift;
    got->from = ask->range ? sp.from : 0;
    got->to = ask->range ? sp.to : 0;
    got->rows = false;
out:
    for (int i = 0; tails && i < n; i++)
        json_decref(tails[i]);
    free(tails);
    free(pc);
    json_decref(raw);
    kd_buf_free(&text);
    kd_buf_free(&ids);
    PQclear(r);
    PQclear(rr);
    return rc;
}

int kd_store_metrics_overview(struct kd_store *s, int64_t experiment_id, enum kd_metric_kind kind,
                              const struct kd_series_ask *ask, struct kd_buf *out,
                              struct kd_series_got *got, char *err)
{
    PGresult *r = NULL;
    char eb[24];
    int64_t mark = 0, last = 0, ntrials = 0;
    memset(got, 0, sizeof(*got));
    if (experiment_id <= 0)
        return kd_seterr(err, KD_EINVAL, "experiment_id: %lld is not an id",
                         (long long)experiment_id);
    if ((int)kind < KD_METRIC_TRAINING || (int)kind > KD_METRIC_PROFILING)
        return kd_seterr(err, KD_EINVAL, "kind: %d is not a metric kind", (int)kind);
    if (ask->max_points < 4 || ask->max_points > MAX_POINTS_ALL)
        return kd_seterr(err, KD_EINVAL, "max_points: %d out of range 4..%d", ask->max_points,
                         MAX_POINTS_ALL);
    if (ask->budget < 0)
        return kd_seterr(err, KD_EINVAL, "budget: %lld is negative", (long long)ask->budget);
    if (ask->range && (ask->from < 0 || ask->to < ask->from || ask->to >= MAX_STEP_RANGE))
        return kd_seterr(err, KD_EINVAL, "from, to: %lld..%lld is not a range of steps",
                         (long long)ask->from, (long long)ask->to);
    snprintf(eb, sizeof(eb), "%lld", (long long)experiment_id);
    const char *p[1] = {eb};
    int rc = kd_store__exec(s, "metric series", STATE_SQL, 1, p, true, &r, err);
    if (rc == 0 && (PQntuples(r) != 1 || int_at(r, 0, 0, &mark) != 0 ||
                    int_at(r, 0, 1, &last) != 0 || int_at(r, 0, 2, &ntrials) != 0))
        rc = kd_seterr(err, KD_EPROTO, "metric series: bad state");
    PQclear(r);
    if (rc != 0)
        return rc;
    int maxp = ask->max_points;
    if (ask->budget > 0 && ntrials > 0 && ask->budget / ntrials < maxp)
        maxp = ask->budget / ntrials < 4 ? 4 : (int)(ask->budget / ntrials);
    got->max_points = maxp;
    const char *kn = kd_metric_kind_name(kind);
    int b = ask->range ? maxp / 4 : kd_sketch__buckets(maxp);
    if (kind == KD_METRIC_PROFILING || last - mark > LAG_MAX)
        return from_rows(s, eb, kn, b, ask, out, got, err);
    return from_overviews(s, eb, kn, mark, b, ask, out, got, err);
}

int kd_store_metrics_since(struct kd_store *s, int64_t experiment_id, int64_t trial_id,
                           int64_t after_id, int limit, json_t **out, char *err)
{
    char eb[24], tb[24], ab[24], lb[24];
    *out = NULL;
    if (experiment_id <= 0 && trial_id <= 0)
        return kd_seterr(err, KD_EINVAL, "metrics: give an experiment id or a trial id");
    if (limit <= 0 || limit > 10000)
        return kd_seterr(err, KD_EINVAL, "limit: %d out of range 1..10000", limit);
    snprintf(eb, sizeof(eb), "%lld", (long long)(experiment_id > 0 ? experiment_id : 0));
    snprintf(tb, sizeof(tb), "%lld", (long long)(trial_id > 0 ? trial_id : 0));
    snprintf(ab, sizeof(ab), "%lld", (long long)(after_id > 0 ? after_id : 0));
    snprintf(lb, sizeof(lb), "%d", limit);
    const char *p[4] = {eb, tb, ab, lb};
    return kd_store__json(
        s, "new metrics",
        "SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM (SELECT m.id, m.trial_id, m.kind,"
        " m.step, " TS("m.reported_at") " AS reported_at, m.metrics"
                                        " FROM metrics m JOIN trials t ON t.id = m.trial_id"
                                        " WHERE ($1::bigint = 0 OR t.experiment_id = $1::bigint)"
                                        " AND ($2::bigint = 0 OR m.trial_id = $2::bigint) AND m.id "
                                        "> $3::bigint"
                                        " ORDER BY m.id LIMIT $4::bigint) x",
        4, p, out, err);
}

#define BEST_SQL(dir)                                                                              \
    "SELECT coalesce(json_agg(b ORDER BY b.trial_id), '[]') FROM ("                                \
    " SELECT DISTINCT ON (m.trial_id) m.trial_id, m.step,"                                         \
    " (m.metrics->>$2)::double precision AS value, m.metrics"                                      \
    " FROM metrics m JOIN trials t ON t.id = m.trial_id"                                           \
    " WHERE t.experiment_id = $1::bigint AND m.kind = 'validation'"                                \
    " AND jsonb_typeof(m.metrics->$2) = 'number'"                                                  \
    " ORDER BY m.trial_id, (m.metrics->>$2)::double precision " dir ", m.step) b"

int kd_store_best_validations(struct kd_store *s, int64_t experiment_id, const char *metric,
                              bool smaller_is_better, json_t **out, char *err)
{
    char eb[24];
    *out = NULL;
    if (experiment_id <= 0)
        return kd_seterr(err, KD_EINVAL, "experiment_id: %lld is not an id",
                         (long long)experiment_id);
    if (!metric || !metric[0] || strlen(metric) > MAX_METRIC_NAME)
        return kd_seterr(err, KD_EINVAL, "metric: a name of 1 to %d bytes is required",
                         MAX_METRIC_NAME);
    snprintf(eb, sizeof(eb), "%lld", (long long)experiment_id);
    const char *p[2] = {eb, metric};
    /* The direction picks one of two fixed statements: it is never spliced in. */
    return kd_store__json(s, "best validations",
                          smaller_is_better ? BEST_SQL("ASC") : BEST_SQL("DESC"), 2, p, out, err);
}
