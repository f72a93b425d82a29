/*
 * GET .../trials/{t}/profiler: the samples a trial's profiler reported
 * (docs/api.md), system metrics or the Trainer's timings, read from the
 * store, for `det trial profiler` and charts.
 */
#include "api/api_int.h"

#include <string.h>

#include "core/log.h"

#define NS(q) ((q)->seg[3])

void api_user_trial_profiler(struct api_rq *q)
{
    json_t *t = NULL, *rows = NULL;
    char err[KD_ERRLEN] = "";
    long tail = 0, limit = 0, after = 0;
    int64_t exp_id = 0, trial_id = 0;
    int rc;
    const char *kind = kd_http_query(q->r, "kind");
    if (kind != NULL && kind[0] == '\0')
        kind = NULL;
    if (kind != NULL && strcmp(kind, "system") != 0 && strcmp(kind, "timing") != 0) {
        api_error(q, 400, "kind", "query parameter kind=%s: must be system or timing",
                  kd_logq(kind));
        goto out;
    }
    if (api_query_int(q, "tail", 0, KD_STORE_PROFILER_MAX_QUERY, 0, &tail) != 0 ||
        api_query_int(q, "limit", 1, KD_STORE_PROFILER_MAX_QUERY, 1000, &limit) != 0 ||
        api_query_int(q, "after", 0, INT64_MAX / 2, 0, &after) != 0)
        goto out;
    if ((rc = api_user_get(q, true, &t, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    rc = api_store_ids(q->api, t, false, &exp_id, &trial_id, err);
    if (rc == KD_ENOTFOUND) { /* nothing stored for it yet */
        rows = json_array();
        rc = 0;
    } else if (rc == 0) {
        rc = kd_store_profiler_query(q->api->o.store, trial_id, kind, after,
                                     (int)(tail > 0 ? tail : limit), tail > 0, &rows, err);
    }
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    json_t *last = json_array_get(rows, json_array_size(rows) - 1);
    api_json(q, 200,
             json_pack("{s:s,s:s,s:s,s:o,s:I}", "trial", kd_k8s_meta_str(t, "name") ?: "",
                       "namespace", NS(q), "kind", kind != NULL ? kind : "all", "samples", rows,
                       "last_id",
                       (json_int_t)(last != NULL ? json_integer_value(json_object_get(last, "id"))
                                                 : after)));
    rows = NULL;
out:
    json_decref(rows);
    json_decref(t);
}
