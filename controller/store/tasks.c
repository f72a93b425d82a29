/*
 * The tasks table: one row per Task resource (notebook, command, shell,
 * TensorBoard), made before its pod starts, so that its logs have a row to
 * hang from and its outcome outlives the resource.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/str.h"
#include "store/store_int.h"

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

static int check_str(const char *field, const char *v, size_t max, char *err)
{
    if (v == NULL || v[0] == '\0')
        return kd_seterr(err, KD_EINVAL, "%s: required", field);
    if (strlen(v) > max)
        return kd_seterr(err, KD_EINVAL, "%s: %zu bytes, at most %zu", field, strlen(v), max);
    return 0;
}

int kd_store_task_upsert(struct kd_store *s, const struct kd_store_task *t, int64_t *id, char *err)
{
    int rc;
    char *cfg = NULL;
    PGresult *r = NULL;
    if ((rc = check_str("uid", t->uid, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_str("namespace", t->namespace_, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_str("name", t->name, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_str("kind", t->kind, KD_STORE_MAX_STATE, err)) != 0 ||
        (rc = check_str("state", t->state, KD_STORE_MAX_STATE, err)) != 0)
        goto out;
    if (t->owner != NULL && strlen(t->owner) > KD_STORE_MAX_NAME) {
        rc = kd_seterr(err, KD_EINVAL, "owner: at most %d bytes", KD_STORE_MAX_NAME);
        goto out;
    }
    if (t->config != NULL && !json_is_object(t->config)) {
        rc = kd_seterr(err, KD_EINVAL, "config: must be a JSON object");
        goto out;
    }
    cfg = t->config != NULL ? json_dumps(t->config, JSON_COMPACT) : strdup("{}");
    if (cfg == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "config: cannot serialise");
        goto out;
    }
    const char *p[7] = {t->uid, t->namespace_, t->name, t->kind, t->owner ? t->owner : "",
                        cfg,    t->state};
    rc = kd_store__exec(s, "upsert task",
                        "INSERT INTO tasks (uid, namespace, name, kind, owner, config, state)"
                        " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)"
                        " ON CONFLICT (uid) DO UPDATE SET config = EXCLUDED.config,"
                        " updated_at = now() RETURNING id",
                        7, p, true, &r, err);
    if (rc != 0)
        goto out;
    if (PQntuples(r) != 1 || kd_parse_i64(PQgetvalue(r, 0, 0), id) != 0)
        rc = kd_seterr(err, KD_EPROTO, "upsert task: no id returned");
out:
    PQclear(r);
    free(cfg);
    return rc;
}

int kd_store_task_set_state(struct kd_store *s, int64_t id, const char *state, int exit_code,
                            const char *end_reason, char *err)
{
    char ib[24], eb[24];
    int rc;
    PGresult *r = NULL;
    if (id <= 0)
        return kd_seterr(err, KD_EINVAL, "task_id: %lld is not an id", (long long)id);
    if ((rc = check_str("state", state, KD_STORE_MAX_STATE, err)) != 0)
        return rc;
    if (end_reason != NULL && strlen(end_reason) > KD_STORE_MAX_STATE)
        return kd_seterr(err, KD_EINVAL, "end_reason: at most %d bytes", KD_STORE_MAX_STATE);
    snprintf(ib, sizeof(ib), "%lld", (long long)id);
    snprintf(eb, sizeof(eb), "%d", exit_code);
    const char *p[4] = {ib, state, exit_code >= 0 ? eb : NULL, end_reason};
    rc = kd_store__exec(s, "set task state",
                        "UPDATE tasks SET state = $2, updated_at = now(),"
                        " exit_code = coalesce($3::int, exit_code),"
                        " end_reason = coalesce($4, end_reason),"
                        " ended_at = CASE WHEN $2 = 'TERMINATED' THEN coalesce(ended_at, now()) END"
                        " WHERE id = $1::bigint RETURNING id",
                        4, p, true, &r, err);
    if (rc == 0 && PQntuples(r) != 1)
        rc = kd_seterr(err, KD_ENOTFOUND, "task %lld has no row", (long long)id);
    PQclear(r);
    return rc;
}

int kd_store_task_id(struct kd_store *s, const char *uid, int64_t *id, char *err)
{
    int rc;
    PGresult *r = NULL;
    if ((rc = check_str("uid", uid, KD_STORE_MAX_NAME, err)) != 0)
        return rc;
    const char *p[1] = {uid};
    rc = kd_store__exec(s, "task id", "SELECT id FROM tasks WHERE uid = $1", 1, p, true, &r, err);
    if (rc == 0 && PQntuples(r) != 1)
        rc = kd_seterr(err, KD_ENOTFOUND, "task %s has no row", uid);
    else if (rc == 0 && kd_parse_i64(PQgetvalue(r, 0, 0), id) != 0)
        rc = kd_seterr(err, KD_EPROTO, "task id: bad id %s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return rc;
}

int kd_store_task_get(struct kd_store *s, int64_t id, json_t **out, char *err)
{
    char ib[24];
    int rc;
    *out = NULL;
    if (id <= 0)
        return kd_seterr(err, KD_EINVAL, "task_id: %lld is not an id", (long long)id);
    snprintf(ib, sizeof(ib), "%lld", (long long)id);
    const char *p[1] = {ib};
    rc = kd_store__json(s, "task",
                        "SELECT json_build_object('id', id, 'uid', uid, 'namespace', namespace,"
                        " 'name', name, 'kind', kind, 'owner', owner, 'state', state,"
                        " 'exit_code', exit_code, 'end_reason', end_reason,"
                        " 'created_at', " TS("created_at") ", 'ended_at', " TS(
                            "ended_at") ")"
                                        " FROM tasks WHERE id = $1::bigint",
                        1, p, out, err);
    return rc;
}
