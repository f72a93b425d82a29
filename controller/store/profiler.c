/*
 * Reading profiler samples back: the rows of kind profiling of one trial,
 * of one group (system metrics or the Trainer's timings), in the order they
 * were stored. They are written by the metrics writer like any metric row.
 */
#include <stdio.h>
#include <string.h>

#include "store/store_int.h"

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define MAX_GROUP 64

/* The direction picks one of two fixed statements; no value is spliced into SQL. */
#define PROFILER_SQL(dir)                                                                          \
    "SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM ("                                      \
    " SELECT m.id, m.step, " TS("m.reported_at") " AS reported_at, m.metrics FROM metrics m"       \
                                                 " WHERE m.trial_id = $1::bigint AND m.kind = "    \
                                                 "'profiling' AND m.id > $2::bigint"               \
                                                 " AND ($3 = '' OR m.metrics->>'group' = $3)"      \
                                                 " ORDER BY m.id " dir " LIMIT $4::bigint) x"

int kd_store_profiler_query(struct kd_store *s, int64_t trial_id, const char *group,
                            int64_t after_id, int limit, bool tail, json_t **out, char *err)
{
    char tb[24], ab[24], lb[24];
    *out = NULL;
    if (trial_id <= 0)
        return kd_seterr(err, KD_EINVAL, "trial_id: %lld is not an id", (long long)trial_id);
    if (limit <= 0 || limit > KD_STORE_PROFILER_MAX_QUERY)
        return kd_seterr(err, KD_EINVAL, "limit: %d out of range 1..%d", limit,
                         KD_STORE_PROFILER_MAX_QUERY);
    if (group != NULL && strlen(group) > MAX_GROUP)
        return kd_seterr(err, KD_EINVAL, "group: at most %d bytes", MAX_GROUP);
    snprintf(tb, sizeof(tb), "%lld", (long long)trial_id);
    snprintf(ab, sizeof(ab), "%lld", (long long)(after_id > 0 ? after_id : 0));
    snprintf(lb, sizeof(lb), "%d", limit);
    const char *p[4] = {tb, ab, group != NULL ? group : "", lb};
    return kd_store__json(s, "profiler samples", tail ? PROFILER_SQL("DESC") : PROFILER_SQL("ASC"),
                          4, p, out, err);
}
