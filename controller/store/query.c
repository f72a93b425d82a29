/*
 * Reading metrics back: a trial's series (downsampled by the server when
 * asked) and the best validation result of every trial of an experiment.
 */
#include <stdio.h>
#include <string.h>

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
 * The same choice of rows as SERIES_SQL, per trial of the experiment: each
 * trial's steps come in order from the (trial_id, kind, step) index alone
 * (no sort of the whole experiment's rows: with 1,000 trials of 1,000
 * points this is 2 to 4 times faster than one window over all of them),
 * only the chosen rows are read from the table (the newest row of a step
 * reported twice), then pivoted to columns per metric name: a page
 * with 1,000 trials gets steps and values as plain arrays instead of one
 * object per point with its names repeated (about a third of the bytes).
 */
#define MAX_POINTS_ALL 10000
static const char *const SERIES_ALL_SQL =
    "WITH s AS (SELECT t.id AS trial_id, x.step FROM trials t, LATERAL ("
    "  SELECT step FROM (SELECT step, row_number() OVER (ORDER BY step) - 1 AS j,"
    "   count(*) OVER () AS n FROM (SELECT DISTINCT m.step FROM metrics m"
    "   WHERE m.trial_id = t.id AND m.kind = $2) d) w"
    "  WHERE n <= $3::bigint OR ($3::bigint = 1 AND j = n - 1)"
    "  OR ($3::bigint > 1 AND ((((j * ($3::bigint - 1) + n - 2) / (n - 1)) * (n - 1))"
    "      / ($3::bigint - 1)) = j)) x"
    "  WHERE t.experiment_id = $1::bigint),"
    " r AS (SELECT s.trial_id, s.step, (SELECT m.metrics FROM metrics m"
    "  WHERE m.trial_id = s.trial_id AND m.kind = $2 AND m.step = s.step"
    "  ORDER BY m.id DESC LIMIT 1) AS metrics FROM s),"
    " kv AS (SELECT r.trial_id, r.step, e.key, e.value FROM r, jsonb_each(r.metrics) e"
    "  WHERE jsonb_typeof(e.value) = 'number'),"
    " per AS (SELECT trial_id, key, json_build_object('steps', json_agg(step ORDER BY step),"
    "  'values', json_agg(value ORDER BY step)) AS v FROM kv GROUP BY trial_id, key),"
    " pt AS (SELECT trial_id, json_object_agg(key, v ORDER BY key) AS series FROM per"
    "  GROUP BY trial_id)"
    " SELECT coalesce(json_agg(json_build_object('trial_id', trial_id, 'series', series)"
    "  ORDER BY trial_id), '[]') FROM pt";

int kd_store_metrics_series_all(struct kd_store *s, int64_t experiment_id, enum kd_metric_kind kind,
                                int max_points, json_t **out, char *err)
{
    char eb[24], mb[24];
    *out = NULL;
    if (experiment_id <= 0)
        return kd_seterr(err, KD_EINVAL, "experiment_id: %lld is not an id",
                         (long long)experiment_id);
    if ((int)kind < KD_METRIC_TRAINING || (int)kind > KD_METRIC_PROFILING)
        return kd_seterr(err, KD_EINVAL, "kind: %d is not a metric kind", (int)kind);
    if (max_points < 1 || max_points > MAX_POINTS_ALL)
        return kd_seterr(err, KD_EINVAL, "max_points: %d out of range 1..%d", max_points,
                         MAX_POINTS_ALL);
    snprintf(eb, sizeof(eb), "%lld", (long long)experiment_id);
    snprintf(mb, sizeof(mb), "%d", max_points);
    const char *p[3] = {eb, kd_metric_kind_name(kind), mb};
    return kd_store__json(s, "experiment metric series", SERIES_ALL_SQL, 3, p, out, err);
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
