/*
 * The registry tables: experiments, trials, checkpoints, searcher
 * snapshots, events and templates. Every statement binds its values as
 * parameters; results come back as JSON built by the server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/str.h"
#include "store/store_int.h"

/* A timestamptz as RFC 3339 UTC with milliseconds. */
#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define TERMINAL "('COMPLETED', 'CANCELED', 'ERROR', 'DELETED', 'STOPPED')"
#define MAX_REASON 4096
#define MAX_LIST 1000

static const char *i64(char *buf, int64_t v)
{
    snprintf(buf, 24, "%lld", (long long)v);
    return buf;
}

static int check_str(const char *field, const char *v, size_t max, char *err)
{
    if (!v || !v[0])
        return kd_seterr(err, KD_EINVAL, "%s: required", field);
    if (strlen(v) > max)
        return kd_seterr(err, KD_EINVAL, "%s: %zu bytes, at most %zu", field, strlen(v), max);
    return 0;
}

static int check_id(const char *field, int64_t v, char *err)
{
    if (v <= 0)
        return kd_seterr(err, KD_EINVAL, "%s: %lld is not an id (must be > 0)", field,
                         (long long)v);
    return 0;
}

/* JSON text of an object argument (NULL -> "{}"); caller frees. */
static int json_arg(const char *field, json_t *v, char **out, char *err)
{
    *out = NULL;
    if (!v) {
        *out = strdup("{}");
        return *out ? 0 : KD_ENOMEM;
    }
    if (!json_is_object(v))
        return kd_seterr(err, KD_EINVAL, "%s: must be a JSON object", field);
    *out = json_dumps(v, JSON_COMPACT);
    return *out ? 0 : kd_seterr(err, KD_ENOMEM, "%s: cannot serialise", field);
}

/* Run a statement returning one bigint; *out gets it. */
static int exec_id(struct kd_store *s, const char *what, const char *sql, int n,
                   const char *const *params, bool retry, int64_t *out, char *err)
{
    PGresult *r = NULL;
    int rc = kd_store__exec(s, what, sql, n, params, retry, &r, err);
    if (rc != 0)
        goto out;
    if (PQntuples(r) != 1) {
        rc = kd_seterr(err, KD_ENOTFOUND, "%s: not found", what);
        goto out;
    }
    if (out && kd_parse_i64(PQgetvalue(r, 0, 0), out) != 0)
        rc = kd_seterr(err, KD_EPROTO, "%s: bad id %s", what, PQgetvalue(r, 0, 0));
out:
    PQclear(r);
    return rc;
}

/* Run an UPDATE/DELETE; KD_ENOTFOUND when it touched no row. */
static int exec_one(struct kd_store *s, const char *what, const char *sql, int n,
                    const char *const *params, char *err)
{
    PGresult *r = NULL;
    int rc = kd_store__exec(s, what, sql, n, params, true, &r, err);
    if (rc == 0 && strcmp(PQcmdTuples(r), "0") == 0)
        rc = kd_seterr(err, KD_ENOTFOUND, "%s: not found", what);
    PQclear(r);
    return rc;
}

/* ---- experiments ----------------------------------------------------------- */

#define EXP_COLS                                                                                   \
    "id, uid, namespace, name, config, state, " TS("created_at") " AS created_at, " TS(            \
        "updated_at") " AS updated_at, " TS("ended_at") " AS ended_at"

int kd_store_experiment_upsert(struct kd_store *s, const struct kd_store_experiment *e, int64_t *id,
                               char *err)
{
    int rc;
    char *cfg = NULL;
    if ((rc = check_str("uid", e->uid, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_str("namespace", e->namespace_, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_str("name", e->name, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_str("state", e->state, KD_STORE_MAX_STATE, err)) != 0 ||
        (rc = json_arg("config", e->config, &cfg, err)) != 0)
        goto out;
    const char *p[5] = {e->uid, e->namespace_, e->name, cfg, e->state};
    rc = exec_id(s, "upsert experiment",
                 "INSERT INTO experiments (uid, namespace, name, config, state)"
                 " VALUES ($1, $2, $3, $4::jsonb, $5)"
                 " ON CONFLICT (uid) DO UPDATE SET namespace = EXCLUDED.namespace,"
                 " name = EXCLUDED.name, config = EXCLUDED.config, state = EXCLUDED.state,"
                 " updated_at = now() RETURNING id",
                 5, p, true, id, err);
out:
    free(cfg);
    return rc;
}

int kd_store_experiment_lookup(struct kd_store *s, const char *uid, int64_t *id, char *err)
{
    int rc = check_str("uid", uid, KD_STORE_MAX_NAME, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {uid};
    return exec_id(s, "experiment by uid", "SELECT id FROM experiments WHERE uid = $1", 1, p, true,
                   id, err);
}

int kd_store_experiment_set_state(struct kd_store *s, int64_t id, const char *state, char *err)
{
    char b[24];
    int rc;
    if ((rc = check_id("experiment_id", id, err)) != 0 ||
        (rc = check_str("state", state, KD_STORE_MAX_STATE, err)) != 0)
        return rc;
    const char *p[2] = {i64(b, id), state};
    return exec_one(s, "set experiment state",
                    "UPDATE experiments SET state = $2, updated_at = now(), ended_at ="
                    " CASE WHEN $2 IN " TERMINAL " THEN coalesce(ended_at, now()) END"
                    " WHERE id = $1::bigint",
                    2, p, err);
}

int kd_store_experiment_delete(struct kd_store *s, int64_t id, char *err)
{
    char b[24];
    int rc = check_id("experiment_id", id, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {i64(b, id)};
    return exec_one(s, "delete experiment", "DELETE FROM experiments WHERE id = $1::bigint", 1, p,
                    err);
}

int kd_store_experiment_get(struct kd_store *s, int64_t id, json_t **out, char *err)
{
    char b[24];
    const char *p[1] = {i64(b, id)};
    *out = NULL;
    return kd_store__json(s, "experiment",
                          "SELECT row_to_json(e) FROM (SELECT " EXP_COLS
                          " FROM experiments WHERE id = $1::bigint) e",
                          1, p, out, err);
}

int kd_store_experiments_list(struct kd_store *s, const char *namespace_, int limit, int offset,
                              json_t **out, char *err)
{
    char l[24], o[24];
    *out = NULL;
    if (limit <= 0 || limit > MAX_LIST)
        return kd_seterr(err, KD_EINVAL, "limit: %d out of range 1..%d", limit, MAX_LIST);
    if (offset < 0)
        return kd_seterr(err, KD_EINVAL, "offset: %d is negative", offset);
    const char *p[3] = {namespace_, i64(l, limit), i64(o, offset)};
    return kd_store__json(
        s, "list experiments",
        "SELECT coalesce(json_agg(e ORDER BY e.id DESC), '[]') FROM (SELECT " EXP_COLS
        " FROM experiments WHERE ($1::text IS NULL OR namespace = $1)"
        " ORDER BY id DESC LIMIT $2::bigint OFFSET $3::bigint) e",
        3, p, out, err);
}

/* ---- trials ------------------------------------------------------------------ */

#define TRIAL_COLS                                                                                 \
    "id, uid, experiment_id, request_id, hparams, seed, state, restarts, " TS(                     \
        "created_at") " AS created_at, " TS("updated_at") " AS updated_at, " TS("ended_at") " AS " \
                                                                                            "ende" \
                                                                                            "d_at"

int kd_store_trial_upsert(struct kd_store *s, const struct kd_store_trial *t, int64_t *id,
                          char *err)
{
    int rc;
    char *hp = NULL, eb[24], sb[24];
    if ((rc = check_str("uid", t->uid, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_id("experiment_id", t->experiment_id, err)) != 0 ||
        (rc = check_str("request_id", t->request_id, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_str("state", t->state, KD_STORE_MAX_STATE, err)) != 0 ||
        (rc = json_arg("hparams", t->hparams, &hp, err)) != 0)
        goto out;
    const char *p[6] = {t->uid, i64(eb, t->experiment_id), t->request_id,
                        hp,     i64(sb, t->seed),          t->state};
    rc = exec_id(s, "upsert trial",
                 "INSERT INTO trials (uid, experiment_id, request_id, hparams, seed, state)"
                 " VALUES ($1, $2::bigint, $3, $4::jsonb, $5::bigint, $6)"
                 " ON CONFLICT (uid) DO UPDATE SET hparams = EXCLUDED.hparams,"
                 " state = EXCLUDED.state, updated_at = now() RETURNING id",
                 6, p, true, id, err);
out:
    free(hp);
    return rc;
}

int kd_store_trial_lookup(struct kd_store *s, const char *uid, int64_t *id, char *err)
{
    int rc = check_str("uid", uid, KD_STORE_MAX_NAME, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {uid};
    return exec_id(s, "trial by uid", "SELECT id FROM trials WHERE uid = $1", 1, p, true, id, err);
}

int kd_store_trial_set_state(struct kd_store *s, int64_t id, const char *state, char *err)
{
    char b[24];
    int rc;
    if ((rc = check_id("trial_id", id, err)) != 0 ||
        (rc = check_str("state", state, KD_STORE_MAX_STATE, err)) != 0)
        return rc;
    const char *p[2] = {i64(b, id), state};
    return exec_one(s, "set trial state",
                    "UPDATE trials SET state = $2, updated_at = now(), ended_at ="
                    " CASE WHEN $2 IN " TERMINAL " THEN coalesce(ended_at, now()) END"
                    " WHERE id = $1::bigint",
                    2, p, err);
}

int kd_store_trial_set_restarts(struct kd_store *s, int64_t id, int restarts, char *err)
{
    char b[24], rb[24];
    int rc = check_id("trial_id", id, err);
    if (rc != 0)
        return rc;
    if (restarts < 0)
        return kd_seterr(err, KD_EINVAL, "restarts: %d is negative", restarts);
    const char *p[2] = {i64(b, id), i64(rb, restarts)};
    return exec_one(s, "set trial restarts",
                    "UPDATE trials SET restarts = greatest(restarts, $2::integer),"
                    " updated_at = CASE WHEN restarts < $2::integer THEN now() ELSE updated_at END"
                    " WHERE id = $1::bigint",
                    2, p, err);
}

int kd_store_trial_add_restart(struct kd_store *s, int64_t id, int *restarts, char *err)
{
    char b[24];
    int64_t n = 0;
    int rc = check_id("trial_id", id, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {i64(b, id)};
    /* Not retried: a lost reply after a commit would count the restart twice. */
    rc = exec_id(s, "count trial restart",
                 "UPDATE trials SET restarts = restarts + 1, updated_at = now()"
                 " WHERE id = $1::bigint RETURNING restarts",
                 1, p, false, &n, err);
    if (rc == 0 && restarts)
        *restarts = (int)n;
    return rc;
}

int kd_store_trial_get(struct kd_store *s, int64_t id, json_t **out, char *err)
{
    char b[24];
    const char *p[1] = {i64(b, id)};
    *out = NULL;
    return kd_store__json(s, "trial",
                          "SELECT row_to_json(t) FROM (SELECT " TRIAL_COLS
                          " FROM trials WHERE id = $1::bigint) t",
                          1, p, out, err);
}

int kd_store_trials_list(struct kd_store *s, int64_t experiment_id, json_t **out, char *err)
{
    char b[24];
    const char *p[1] = {i64(b, experiment_id)};
    *out = NULL;
    return kd_store__json(
        s, "list trials",
        "SELECT coalesce(json_agg(t ORDER BY t.id), '[]') FROM (SELECT " TRIAL_COLS
        " FROM trials WHERE experiment_id = $1::bigint) t",
        1, p, out, err);
}

/* ---- checkpoints ----------------------------------------------------------------- */

int kd_store_checkpoint_add(struct kd_store *s, const struct kd_store_checkpoint *c, char *err)
{
    int rc;
    char *md = NULL, tb[24], sb[24], zb[24];
    PGresult *r = NULL;
    if ((rc = check_str("uuid", c->uuid, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = check_id("trial_id", c->trial_id, err)) != 0 ||
        (rc = check_str("storage_path", c->storage_path, 4096, err)) != 0 ||
        (rc = json_arg("metadata", c->metadata, &md, err)) != 0)
        goto out;
    if (c->steps_completed < 0 || c->size_bytes < 0) {
        rc = kd_seterr(err, KD_EINVAL, "%s: negative",
                       c->steps_completed < 0 ? "steps_completed" : "size_bytes");
        goto out;
    }
    const char *p[6] = {c->uuid,         i64(tb, c->trial_id),   i64(sb, c->steps_completed),
                        c->storage_path, i64(zb, c->size_bytes), md};
    rc = kd_store__exec(s, "register checkpoint",
                        "WITH ins AS (INSERT INTO checkpoints (uuid, trial_id, steps_completed,"
                        " storage_path, size_bytes, metadata)"
                        " VALUES ($1, $2::bigint, $3::bigint, $4, $5::bigint, $6::jsonb)"
                        " ON CONFLICT (uuid) DO NOTHING RETURNING trial_id)"
                        " SELECT (SELECT count(*) FROM ins),"
                        " (SELECT trial_id FROM checkpoints WHERE uuid = $1)",
                        6, p, true, &r, err);
    if (rc != 0)
        goto out;
    if (strcmp(PQgetvalue(r, 0, 0), "0") == 0 && strcmp(PQgetvalue(r, 0, 1), tb) != 0)
        rc = kd_seterr(err, KD_ECONFLICT, "checkpoint %s is already registered for trial %s",
                       c->uuid, PQgetvalue(r, 0, 1));
out:
    PQclear(r);
    free(md);
    return rc;
}

int kd_store_checkpoint_mark_deleted(struct kd_store *s, const char *uuid, char *err)
{
    int rc = check_str("uuid", uuid, KD_STORE_MAX_NAME, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {uuid};
    return exec_one(s, "mark checkpoint deleted",
                    "UPDATE checkpoints SET state = 'DELETED',"
                    " deleted_at = coalesce(deleted_at, now()) WHERE uuid = $1",
                    1, p, err);
}

int kd_store_checkpoint_gc(struct kd_store *s, const char *uuid, const char *reason,
                           json_t *details, bool *marked, char *err)
{
    int rc;
    char *dt = NULL;
    PGresult *r = NULL;
    if (marked)
        *marked = false;
    if ((rc = check_str("uuid", uuid, KD_STORE_MAX_NAME, err)) != 0 ||
        (rc = json_arg("details", details, &dt, err)) != 0)
        goto out;
    if (reason && strlen(reason) > MAX_REASON) {
        rc = kd_seterr(err, KD_EINVAL, "reason: %zu bytes, at most %d", strlen(reason), MAX_REASON);
        goto out;
    }
    /* One statement, so one transaction: the state change and its event are recorded together
     * or not at all, and only by the call that moved the row from ACTIVE (a retry after a lost
     * reply, or a GC repeated after a restart, records nothing twice). */
    const char *p[3] = {uuid, reason ? reason : "", dt};
    rc = kd_store__exec(s, "record checkpoint deletion",
                        "WITH d AS (UPDATE checkpoints SET state = 'DELETED',"
                        " deleted_at = coalesce(deleted_at, now())"
                        " WHERE uuid = $1 AND state = 'ACTIVE' RETURNING trial_id),"
                        " ev AS (INSERT INTO events (experiment_id, trial_id, kind, decision,"
                        " reason, details) SELECT t.experiment_id, d.trial_id, 'checkpoint_gc',"
                        " 'delete', $2, $3::jsonb || jsonb_build_object('uuid', $1::text)"
                        " FROM d JOIN trials t ON t.id = d.trial_id RETURNING id)"
                        " SELECT (SELECT count(*) FROM ev),"
                        " (SELECT count(*) FROM checkpoints WHERE uuid = $1)",
                        3, p, true, &r, err);
    if (rc != 0)
        goto out;
    if (strcmp(PQgetvalue(r, 0, 1), "0") == 0)
        rc = kd_seterr(err, KD_ENOTFOUND, "checkpoint %s: not registered", uuid);
    else if (marked)
        *marked = strcmp(PQgetvalue(r, 0, 0), "0") != 0;
out:
    PQclear(r);
    free(dt);
    return rc;
}

int kd_store_checkpoints_list(struct kd_store *s, int64_t experiment_id, int64_t trial_id,
                              bool include_deleted, json_t **out, char *err)
{
    char eb[24], tb[24];
    *out = NULL;
    if (experiment_id <= 0 && trial_id <= 0)
        return kd_seterr(err, KD_EINVAL, "checkpoints: give an experiment id or a trial id");
    const char *p[3] = {i64(eb, experiment_id > 0 ? experiment_id : 0),
                        i64(tb, trial_id > 0 ? trial_id : 0), include_deleted ? "t" : "f"};
    return kd_store__json(
        s, "list checkpoints",
        "SELECT coalesce(json_agg(x ORDER BY x.steps_completed, x.reported_at, x.uuid), '[]')"
        " FROM (SELECT c.uuid, c.trial_id, t.experiment_id, c.steps_completed, c.storage_path,"
        " c.size_bytes, c.metadata, c.state, " TS("c.reported_at") " AS reported_at, " TS(
            "c.deleted_at") " AS deleted_at,"
                            " EXISTS (SELECT 1 FROM model_versions v"
                            " WHERE v.checkpoint_uuid = c.uuid) AS protected"
                            " FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
                            " WHERE ($1::bigint = 0 OR t.experiment_id = $1::bigint)"
                            " AND ($2::bigint = 0 OR c.trial_id = $2::bigint)"
                            " AND ($3::boolean OR c.state = 'ACTIVE')) x",
        3, p, out, err);
}

/* The uuids lib/storage writes: [A-Za-z0-9._-], not starting with '.' (a path component). */
static int check_uuid(const char *uuid, char *err)
{
    if (!uuid || !uuid[0])
        return kd_seterr(err, KD_EINVAL, "uuid: required");
    size_t n = strlen(uuid);
    if (n > KD_STORE_MAX_UUID)
        return kd_seterr(err, KD_EINVAL, "uuid: %zu bytes, at most %d", n, KD_STORE_MAX_UUID);
    if (uuid[0] == '.')
        return kd_seterr(err, KD_EINVAL, "uuid: must not start with '.'");
    for (size_t i = 0; i < n; i++) {
        char c = uuid[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return kd_seterr(err, KD_EINVAL, "uuid: character %zu is not one of [A-Za-z0-9._-]",
                             i + 1);
    }
    return 0;
}

#define CKPT_TIMES TS("c.reported_at") " AS reported_at, " TS("c.deleted_at") " AS deleted_at"
#define CKPT_GET_SQL                                                                               \
    "SELECT row_to_json(x) FROM (SELECT c.uuid, c.trial_id, t.uid AS trial_uid, t.experiment_id,"  \
    " e.name AS experiment, e.uid AS experiment_uid, e.namespace, c.steps_completed,"              \
    " c.storage_path, c.size_bytes, c.metadata, c.state, " CKPT_TIMES                              \
    " FROM checkpoints c JOIN trials t ON t.id = c.trial_id"                                       \
    " JOIN experiments e ON e.id = t.experiment_id"                                                \
    " WHERE c.uuid = $1 AND ($2 = '' OR e.namespace = $2)) x"

int kd_store_checkpoint_get(struct kd_store *s, const char *namespace_, const char *uuid,
                            json_t **out, char *err)
{
    int rc;
    *out = NULL;
    if ((rc = check_uuid(uuid, err)) != 0)
        return rc;
    if (namespace_ && strlen(namespace_) > KD_STORE_MAX_NAME)
        return kd_seterr(err, KD_EINVAL, "namespace: %zu bytes, at most %d", strlen(namespace_),
                         KD_STORE_MAX_NAME);
    const char *p[2] = {uuid, namespace_ ? namespace_ : ""};
    rc = kd_store__json(s, "checkpoint", CKPT_GET_SQL, 2, p, out, err);
    if (rc == KD_ENOTFOUND)
        rc = p[1][0]
                 ? kd_seterr(err, rc, "checkpoint %s: not registered in namespace %s", uuid, p[1])
                 : kd_seterr(err, rc, "checkpoint %s: not registered", uuid);
    return rc;
}

/* ---- searcher snapshots ------------------------------------------------------------ */

#define KEEP_SNAPSHOTS "5"

int kd_store_snapshot_save(struct kd_store *s, int64_t experiment_id, int64_t seq, json_t *snapshot,
                           char *err)
{
    int rc;
    char *js = NULL, eb[24], qb[24];
    if ((rc = check_id("experiment_id", experiment_id, err)) != 0)
        goto out;
    if (seq < 0) {
        rc = kd_seterr(err, KD_EINVAL, "seq: %lld is negative", (long long)seq);
        goto out;
    }
    if (!snapshot) {
        rc = kd_seterr(err, KD_EINVAL, "snapshot: required");
        goto out;
    }
    js = json_dumps(snapshot, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!js) {
        rc = kd_seterr(err, KD_ENOMEM, "snapshot: cannot serialise");
        goto out;
    }
    const char *p[3] = {i64(eb, experiment_id), i64(qb, seq), js};
    rc = kd_store__exec(s, "save searcher snapshot",
                        "INSERT INTO searcher_snapshots (experiment_id, seq, snapshot)"
                        " VALUES ($1::bigint, $2::bigint, $3::jsonb)"
                        " ON CONFLICT (experiment_id, seq) DO UPDATE SET"
                        " snapshot = EXCLUDED.snapshot, saved_at = now()",
                        3, p, true, NULL, err);
    if (rc != 0)
        goto out;
    rc = kd_store__exec(s, "prune searcher snapshots",
                        "DELETE FROM searcher_snapshots WHERE experiment_id = $1::bigint"
                        " AND seq < (SELECT min(seq) FROM (SELECT seq FROM searcher_snapshots"
                        " WHERE experiment_id = $1::bigint ORDER BY seq DESC"
                        " LIMIT " KEEP_SNAPSHOTS ") k)",
                        1, p, true, NULL, err);
out:
    free(js);
    return rc;
}

int kd_store_snapshot_latest(struct kd_store *s, int64_t experiment_id, int64_t *seq, json_t **out,
                             char *err)
{
    char eb[24];
    json_t *row = NULL;
    const char *p[1] = {i64(eb, experiment_id)};
    *out = NULL;
    int rc = kd_store__json(s, "searcher snapshot",
                            "SELECT json_build_object('seq', seq, 'snapshot', snapshot)"
                            " FROM searcher_snapshots WHERE experiment_id = $1::bigint"
                            " ORDER BY seq DESC LIMIT 1",
                            1, p, &row, err);
    if (rc != 0)
        goto out;
    if (seq)
        *seq = (int64_t)json_integer_value(json_object_get(row, "seq"));
    *out = json_incref(json_object_get(row, "snapshot"));
out:
    json_decref(row);
    return rc;
}

/* ---- events --------------------------------------------------------------------------- */

int kd_store_event_add(struct kd_store *s, const struct kd_store_event *e, int64_t *id, char *err)
{
    int rc;
    char *dt = NULL, eb[24], tb[24];
    if ((rc = check_id("experiment_id", e->experiment_id, err)) != 0 ||
        (rc = check_str("kind", e->kind, KD_STORE_MAX_STATE, err)) != 0 ||
        (rc = check_str("decision", e->decision, KD_STORE_MAX_STATE, err)) != 0 ||
        (rc = json_arg("details", e->details, &dt, err)) != 0)
        goto out;
    if (e->reason && strlen(e->reason) > MAX_REASON) {
        rc = kd_seterr(err, KD_EINVAL, "reason: %zu bytes, at most %d", strlen(e->reason),
                       MAX_REASON);
        goto out;
    }
    if (e->trial_id < 0) {
        rc = kd_seterr(err, KD_EINVAL, "trial_id: %lld is negative", (long long)e->trial_id);
        goto out;
    }
    const char *p[6] = {i64(eb, e->experiment_id),
                        e->trial_id ? i64(tb, e->trial_id) : NULL,
                        e->kind,
                        e->decision,
                        e->reason ? e->reason : "",
                        dt};
    rc = exec_id(s, "record event",
                 "INSERT INTO events (experiment_id, trial_id, kind, decision, reason, details)"
                 " VALUES ($1::bigint, $2::bigint, $3, $4, $5, $6::jsonb) RETURNING id",
                 6, p, false, id, err);
out:
    free(dt);
    return rc;
}

int kd_store_events_list(struct kd_store *s, int64_t experiment_id, int64_t after_id, int limit,
                         json_t **out, char *err)
{
    char eb[24], ab[24], lb[24];
    *out = NULL;
    if (limit <= 0 || limit > MAX_LIST)
        return kd_seterr(err, KD_EINVAL, "limit: %d out of range 1..%d", limit, MAX_LIST);
    const char *p[3] = {i64(eb, experiment_id), i64(ab, after_id), i64(lb, limit)};
    return kd_store__json(s, "list events",
                          "SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM (SELECT id,"
                          " experiment_id, trial_id, kind, decision, reason, details, " TS(
                              "at") " AS at FROM events WHERE experiment_id = $1::bigint"
                                    " AND id > $2::bigint ORDER BY id LIMIT $3::bigint) x",
                          3, p, out, err);
}

/* ---- templates --------------------------------------------------------------------------- */

int kd_store_template_set(struct kd_store *s, const char *name, json_t *config, char *err)
{
    int rc;
    char *cfg = NULL;
    if ((rc = check_str("name", name, KD_STORE_MAX_NAME, err)) != 0)
        goto out;
    if (!config) {
        rc = kd_seterr(err, KD_EINVAL, "config: required");
        goto out;
    }
    if ((rc = json_arg("config", config, &cfg, err)) != 0)
        goto out;
    const char *p[2] = {name, cfg};
    rc = kd_store__exec(s, "set template",
                        "INSERT INTO templates (name, config) VALUES ($1, $2::jsonb)"
                        " ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config,"
                        " updated_at = now()",
                        2, p, true, NULL, err);
out:
    free(cfg);
    return rc;
}

#define TPL_COLS                                                                                   \
    "name, config, " TS("created_at") " AS created_at, " TS("updated_at") " AS updated_at"

int kd_store_template_get(struct kd_store *s, const char *name, json_t **out, char *err)
{
    *out = NULL;
    int rc = check_str("name", name, KD_STORE_MAX_NAME, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {name};
    rc = kd_store__json(s, "template",
                        "SELECT row_to_json(x) FROM (SELECT " TPL_COLS
                        " FROM templates WHERE name = $1) x",
                        1, p, out, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "template %s: not found", name);
    return rc;
}

int kd_store_templates_list(struct kd_store *s, json_t **out, char *err)
{
    *out = NULL;
    return kd_store__json(
        s, "list templates",
        "SELECT coalesce(json_agg(x ORDER BY x.name), '[]') FROM (SELECT " TPL_COLS
        " FROM templates) x",
        0, NULL, out, err);
}

int kd_store_template_delete(struct kd_store *s, const char *name, char *err)
{
    int rc = check_str("name", name, KD_STORE_MAX_NAME, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {name};
    rc = exec_one(s, "delete template", "DELETE FROM templates WHERE name = $1", 1, p, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "template %s: not found", name);
    return rc;
}
