/*
 * The model registry: models (a name per namespace, description, labels,
 * metadata, owner) and their numbered versions, each pointing at a
 * checkpoint of the checkpoint registry with what was known of it when it
 * was registered (experiment, trial, hyperparameters, validation metrics,
 * config). A checkpoint a version points at is protected from checkpoint
 * GC (controller/gc.c asks kd_store_checkpoint_protected). Values are bound
 * as parameters; results are JSON built by the server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "store/store_int.h"

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

#define MODEL_COLS                                                                                 \
    "m.id, m.namespace, m.name, m.description, to_json(m.labels) AS labels, m.metadata, m.owner,"  \
    " m.archived, (SELECT count(*) FROM model_versions v WHERE v.model_id = m.id) AS versions,"    \
    " coalesce((SELECT max(v.version) FROM model_versions v WHERE v.model_id = m.id), 0)"          \
    " AS latest_version, " TS("m.created_at") " AS created_at, " TS(                               \
        "m.updated_at") " AS updated_at"

/* A version's columns (v: model_versions, m: models, c: checkpoints LEFT JOINed). */
#define VER_COLS                                                                                   \
    "m.name AS model, v.version, v.name, v.comment, to_json(v.labels) AS labels, v.metadata,"      \
    " v.owner, v.checkpoint_uuid, c.state AS checkpoint_state, c.storage_path, c.size_bytes,"      \
    " v.experiment_id, v.experiment, v.experiment_uid, v.trial_id, v.trial_uid,"                   \
    " v.steps_completed, v.hparams, v.metrics, " TS("v.created_at") " AS created_at, " TS(         \
        "v.updated_at") " AS updated_at"
#define VER_FROM                                                                                   \
    " FROM model_versions v JOIN models m ON m.id = v.model_id"                                    \
    " LEFT JOIN checkpoints c ON c.uuid = v.checkpoint_uuid"

/* The labels of a patch: the old ones ($L NULL) or $L, plus $A, less $R, each once, in order. */
#define LABELS_EDIT(L, A, R)                                                                       \
    "labels = ARRAY(SELECT u.l FROM unnest(CASE WHEN " L "::json IS NULL THEN labels"              \
    " ELSE ARRAY(SELECT json_array_elements_text(" L "::json)) END"                                \
    " || ARRAY(SELECT json_array_elements_text(" A "::json))) WITH ORDINALITY AS u(l, i)"          \
    " WHERE u.l <> ALL (ARRAY(SELECT json_array_elements_text(" R "::json)))"                      \
    " GROUP BY u.l ORDER BY min(u.i))"

static int check_text(const char *field, const char *v, size_t max, bool required, char *err)
{
    if (v == NULL || v[0] == '\0')
        return required ? kd_seterr(err, KD_EINVAL, "%s: required", field) : 0;
    if (strlen(v) > max)
        return kd_seterr(err, KD_EINVAL, "%s: %zu bytes, at most %zu", field, strlen(v), max);
    return 0;
}

static int check_ns_name(const char *ns, const char *name, char *err)
{
    int rc = check_text("namespace", ns, KD_STORE_MAX_NAME, true, err);
    if (rc == 0 && !kd_store_model_name_ok(name))
        rc =
            kd_seterr(err, KD_EINVAL,
                      "name: must be 1 to %d of A-Z a-z 0-9 . _ -, starting with a letter or digit",
                      KD_STORE_MODEL_MAX_NAME);
    return rc;
}

/* Compact JSON text of an optional argument; *out NULL when v is NULL (or def when given). */
static int json_text(const char *field, const json_t *v, bool object, const char *def, char **out,
                     char *err)
{
    *out = NULL;
    if (v == NULL) {
        *out = def != NULL ? kd_xstrdup(def) : NULL;
        return 0;
    }
    if (object && !json_is_object(v))
        return kd_seterr(err, KD_EINVAL, "%s: must be a JSON object", field);
    *out = json_dumps(v, JSON_COMPACT);
    if (*out == NULL)
        return kd_seterr(err, KD_ENOMEM, "%s: cannot serialise", field);
    if (object && strlen(*out) > KD_STORE_MODEL_MAX_METADATA) {
        size_t n = strlen(*out);
        free(*out);
        *out = NULL;
        return kd_seterr(err, KD_EINVAL, "%s: %zu bytes of JSON, at most %u", field, n,
                         KD_STORE_MODEL_MAX_METADATA);
    }
    return 0;
}

/* Run a statement whose first row's first column is JSON (none: KD_ENOTFOUND); *out is new. */
static int json_row(struct kd_store *s, const char *what, const char *sql, int n,
                    const char *const *p, bool retry, json_t **out, char *err)
{
    PGresult *r = NULL;
    json_error_t je;
    *out = NULL;
    int rc = kd_store__exec(s, what, sql, n, p, retry, &r, err);
    if (rc != 0)
        goto out;
    if (PQntuples(r) == 0 || PQgetisnull(r, 0, 0)) {
        rc = kd_seterr(err, KD_ENOTFOUND, "%s: not found", what);
        goto out;
    }
    *out = json_loadb(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0), JSON_DECODE_ANY, &je);
    if (*out == NULL)
        rc = kd_seterr(err, KD_EPROTO, "%s: server returned bad JSON: %s", what, je.text);
out:
    PQclear(r);
    return rc;
}

static void give(json_t *j, json_t **out)
{
    if (out != NULL)
        *out = j;
    else
        json_decref(j);
}

/* ---- models ------------------------------------------------------------------------------ */

int kd_store_model_create(struct kd_store *s, const struct kd_store_model *m, json_t **out,
                          char *err)
{
    char *labels = NULL, *md = NULL;
    json_t *row = NULL;
    int rc;
    if (out != NULL)
        *out = NULL;
    if ((rc = check_ns_name(m->namespace_, m->name, err)) != 0 ||
        (rc = check_text("description", m->description, KD_STORE_MODEL_MAX_TEXT, false, err)) !=
            0 ||
        (rc = check_text("owner", m->owner, KD_STORE_MAX_USER, false, err)) != 0 ||
        (rc = kd_store_model_labels_check(m->labels, "labels", err)) != 0 ||
        (rc = json_text("labels", m->labels, false, "[]", &labels, err)) != 0 ||
        (rc = json_text("metadata", m->metadata, true, "{}", &md, err)) != 0)
        goto out;
    const char *p[6] = {m->namespace_, m->name, m->description ?: "", labels, md, m->owner ?: ""};
    /* Not retried: a lost answer to a create that went through would turn into KD_EEXIST. */
    rc = json_row(s, "create model",
                  "WITH m AS (INSERT INTO models (namespace, name, description, labels, metadata,"
                  " owner) VALUES ($1, $2, $3, ARRAY(SELECT json_array_elements_text($4::json)),"
                  " $5::jsonb, $6) RETURNING *)"
                  " SELECT row_to_json(x) FROM (SELECT " MODEL_COLS " FROM m) x",
                  6, p, false, &row, err);
    if (rc == KD_EEXIST)
        rc = kd_seterr(err, rc, "model %s already exists in namespace %s", m->name, m->namespace_);
    if (rc == 0)
        give(row, out);
    else
        json_decref(row);
out:
    free(labels);
    free(md);
    return rc;
}

int kd_store_model_get(struct kd_store *s, const char *namespace_, const char *name, json_t **out,
                       char *err)
{
    int rc;
    *out = NULL;
    if ((rc = check_ns_name(namespace_, name, err)) != 0)
        return rc;
    const char *p[2] = {namespace_, name};
    rc = json_row(
        s, "model",
        "SELECT json_build_object('model', row_to_json(x), 'versions',"
        " (SELECT coalesce(json_agg(y ORDER BY y.version), '[]') FROM (SELECT " VER_COLS VER_FROM
        " WHERE v.model_id = x.id) y))"
        " FROM (SELECT " MODEL_COLS " FROM models m WHERE m.namespace = $1 AND m.name = $2) x",
        2, p, true, out, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "model %s: not found in namespace %s", name, namespace_);
    return rc;
}

int kd_store_models_list(struct kd_store *s, const struct kd_store_model_query *q, json_t **out,
                         char *err)
{
    /* The ORDER BY of each sort: fixed text chosen by the enum, never the caller's. */
    static const char *const order_by[][2] = {
        {"x.name, x.id", "x.name DESC, x.id DESC"},
        {"x.created_at, x.id", "x.created_at DESC, x.id DESC"},
        {"x.updated_at, x.id", "x.updated_at DESC, x.id DESC"},
        {"x.versions, x.id", "x.versions DESC, x.id DESC"},
    };
    char lb[24], ob[24], ab[8], *sql = NULL;
    int rc;
    *out = NULL;
    if ((rc = check_text("namespace", q->namespace_, KD_STORE_MAX_NAME, true, err)) != 0 ||
        (rc = check_text("name", q->name_contains, KD_STORE_MODEL_MAX_NAME, false, err)) != 0 ||
        (rc = check_text("label", q->label, KD_STORE_MODEL_MAX_LABEL, false, err)) != 0)
        return rc;
    if ((unsigned)q->sort > KD_MODEL_SORT_VERSIONS)
        return kd_seterr(err, KD_EINVAL, "sort: unknown");
    if (q->limit <= 0 || q->limit > KD_STORE_MODEL_MAX_LIST)
        return kd_seterr(err, KD_EINVAL, "limit: %d out of range 1..%d", q->limit,
                         KD_STORE_MODEL_MAX_LIST);
    if (q->offset < 0)
        return kd_seterr(err, KD_EINVAL, "offset: %d is negative", q->offset);
    snprintf(lb, sizeof(lb), "%d", q->limit);
    snprintf(ob, sizeof(ob), "%d", q->offset);
    snprintf(ab, sizeof(ab), "%d", q->archived < 0 ? -1 : q->archived > 0);
    const char *ord = order_by[q->sort][q->desc ? 1 : 0];
    sql = kd_xasprintf(
        "SELECT coalesce(json_agg(y ORDER BY y.n), '[]') FROM (SELECT row_number() OVER"
        " (ORDER BY %s) AS n, x.* FROM (SELECT " MODEL_COLS " FROM models m WHERE m.namespace = $1"
        " AND ($2::text IS NULL OR strpos(lower(m.name), lower($2)) > 0)"
        " AND ($3::text IS NULL OR $3 = ANY (m.labels))"
        " AND ($4::int < 0 OR m.archived = ($4::int = 1))) x"
        " ORDER BY %s LIMIT $5::bigint OFFSET $6::bigint) y",
        ord, ord);
    const char *p[6] = {q->namespace_,
                        q->name_contains != NULL && q->name_contains[0] ? q->name_contains : NULL,
                        q->label != NULL && q->label[0] ? q->label : NULL,
                        ab,
                        lb,
                        ob};
    rc = kd_store__json(s, "list models", sql, 6, p, out, err);
    free(sql);
    if (rc == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(*out, i, v) json_object_del(v, "n");
    }
    return rc;
}

/* The patch's JSON arguments: labels (NULL: unchanged), add, remove ("[]" when absent), metadata.
 */
struct patch_args {
    char *labels, *add, *remove, *md;
};

static int patch_args(const struct kd_store_model_patch *p, struct patch_args *a, char *err)
{
    int rc;
    memset(a, 0, sizeof(*a));
    if ((rc = kd_store_model_labels_check(p->labels, "labels", err)) != 0 ||
        (rc = kd_store_model_labels_check(p->add_labels, "add_labels", err)) != 0 ||
        (rc = kd_store_model_labels_check(p->remove_labels, "remove_labels", err)) != 0 ||
        (rc = json_text("labels", p->labels, false, NULL, &a->labels, err)) != 0 ||
        (rc = json_text("add_labels", p->add_labels, false, "[]", &a->add, err)) != 0 ||
        (rc = json_text("remove_labels", p->remove_labels, false, "[]", &a->remove, err)) != 0 ||
        (rc = json_text("metadata", p->metadata, true, NULL, &a->md, err)) != 0)
        return rc;
    return 0;
}

static void patch_args_free(struct patch_args *a)
{
    free(a->labels);
    free(a->add);
    free(a->remove);
    free(a->md);
}

/* A check constraint on the labels' count is the only one a patch can break. */
static int labels_refused(int rc, char *err)
{
    if (rc == KD_EINVAL && err != NULL && strstr(err, "labels") != NULL)
        rc = kd_seterr(err, rc, "labels: a model or version has at most %d labels",
                       KD_STORE_MODEL_MAX_LABELS);
    return rc;
}

int kd_store_model_update(struct kd_store *s, const char *namespace_, const char *name,
                          const struct kd_store_model_patch *p, json_t **out, char *err)
{
    struct patch_args a;
    json_t *row = NULL;
    char ab[8];
    int rc;
    if (out != NULL)
        *out = NULL;
    memset(&a, 0, sizeof(a));
    if ((rc = check_ns_name(namespace_, name, err)) != 0 ||
        (rc = check_text("description", p->description, KD_STORE_MODEL_MAX_TEXT, false, err)) !=
            0 ||
        (rc = patch_args(p, &a, err)) != 0)
        goto out;
    snprintf(ab, sizeof(ab), "%s", p->archived < 0 ? "" : p->archived ? "true" : "false");
    const char *pa[8] = {namespace_, name,  p->description, ab[0] ? ab : NULL,
                         a.labels,   a.add, a.remove,       a.md};
    rc = json_row(
        s, "update model",
        "WITH m AS (UPDATE models SET description = coalesce($3, description),"
        " archived = coalesce($4::boolean, archived), " LABELS_EDIT(
            "$5", "$6", "$7") ", metadata = coalesce($8::jsonb, metadata), updated_at = now()"
                              " WHERE namespace = $1 AND name = $2 RETURNING *)"
                              " SELECT row_to_json(x) FROM (SELECT " MODEL_COLS " FROM m) x",
        8, pa, true, &row, err);
    rc = labels_refused(rc, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "model %s: not found in namespace %s", name, namespace_);
    if (rc == 0) {
        give(row, out);
        row = NULL;
    }
out:
    json_decref(row);
    patch_args_free(&a);
    return rc;
}

int kd_store_model_delete(struct kd_store *s, const char *namespace_, const char *name,
                          json_t **unprotected, char *err)
{
    json_t *row = NULL;
    int rc;
    if (unprotected != NULL)
        *unprotected = NULL;
    if ((rc = check_ns_name(namespace_, name, err)) != 0)
        return rc;
    const char *p[2] = {namespace_, name};
    /* The versions' experiments are read in the same statement as the delete (its snapshot). */
    rc = json_row(s, "delete model",
                  "WITH d AS (DELETE FROM models WHERE namespace = $1 AND name = $2 RETURNING id)"
                  " SELECT (SELECT coalesce(json_agg(DISTINCT jsonb_build_object('experiment',"
                  " v.experiment, 'experiment_uid', v.experiment_uid)), '[]')"
                  " FROM model_versions v WHERE v.model_id IN (SELECT id FROM d)) FROM d",
                  2, p, false, &row, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "model %s: not found in namespace %s", name, namespace_);
    if (rc == 0) {
        give(row, unprotected);
        row = NULL;
    }
    json_decref(row);
    return rc;
}

/* ---- versions -------------------------------------------------------------------------- */

int kd_store_model_version_add(struct kd_store *s, const struct kd_store_version_reg *r,
                               json_t **out, char *err)
{
    char *labels = NULL, *md = NULL;
    PGresult *res = NULL;
    int rc;
    if (out != NULL)
        *out = NULL;
    if ((rc = check_ns_name(r->namespace_, r->model, err)) != 0 ||
        (rc = check_text("checkpoint_uuid", r->checkpoint_uuid, KD_STORE_MAX_UUID, true, err)) !=
            0 ||
        (rc = check_text("name", r->name, KD_STORE_MODEL_MAX_VNAME, false, err)) != 0 ||
        (rc = check_text("comment", r->comment, KD_STORE_MODEL_MAX_TEXT, false, err)) != 0 ||
        (rc = check_text("owner", r->owner, KD_STORE_MAX_USER, false, err)) != 0 ||
        (rc = kd_store_model_labels_check(r->labels, "labels", err)) != 0 ||
        (rc = json_text("labels", r->labels, false, "[]", &labels, err)) != 0 ||
        (rc = json_text("metadata", r->metadata, true, "{}", &md, err)) != 0)
        goto out;
    const char *p[8] = {
        r->namespace_, r->model, r->checkpoint_uuid, r->name ?: "", r->comment ?: "",
        labels,        md,       r->owner ?: ""};
    /*
     * One statement: the model's row is locked by the UPDATE that takes the next number, so
     * concurrent registrations are numbered one after the other; the checkpoint must be ACTIVE
     * in this namespace. The last columns say which condition failed when nothing was made.
     * Not retried: a lost answer would register a second version.
     */
    rc = kd_store__exec(
        s, "register model version",
        "WITH ck AS (SELECT c.uuid, c.state, c.trial_id, t.uid AS trial_uid, t.experiment_id,"
        " e.name AS experiment, e.uid AS experiment_uid, c.steps_completed, t.hparams, e.config,"
        " coalesce((SELECT x.metrics FROM metrics x WHERE x.trial_id = c.trial_id"
        " AND x.kind = 'validation' AND x.step = c.steps_completed ORDER BY x.id DESC LIMIT 1),"
        " '{}') AS metrics"
        " FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
        " JOIN experiments e ON e.id = t.experiment_id WHERE c.uuid = $3 AND e.namespace = $1),"
        " m AS (UPDATE models SET last_version = last_version + 1, updated_at = now()"
        " WHERE namespace = $1 AND name = $2 AND EXISTS (SELECT 1 FROM ck WHERE state = 'ACTIVE')"
        " RETURNING id, last_version),"
        " v AS (INSERT INTO model_versions (model_id, version, checkpoint_uuid, experiment_id,"
        " experiment, experiment_uid, trial_id, trial_uid, steps_completed, hparams, metrics,"
        " config, name, comment, labels, metadata, owner)"
        " SELECT m.id, m.last_version, ck.uuid, ck.experiment_id, ck.experiment,"
        " ck.experiment_uid, ck.trial_id, ck.trial_uid, ck.steps_completed, ck.hparams,"
        " ck.metrics, ck.config, $4, $5, ARRAY(SELECT json_array_elements_text($6::json)),"
        " $7::jsonb, $8 FROM m, ck RETURNING version)"
        " SELECT (SELECT version FROM v),"
        " (SELECT count(*) FROM models WHERE namespace = $1 AND name = $2),"
        " (SELECT state FROM ck)",
        8, p, false, &res, err);
    if (rc != 0)
        goto out;
    if (PQntuples(res) != 1) {
        rc = kd_seterr(err, KD_EPROTO, "register model version: %d rows", PQntuples(res));
        goto out;
    }
    if (strcmp(PQgetvalue(res, 0, 1), "0") == 0) {
        rc = kd_seterr(err, KD_ENOTFOUND, "model %s: not found in namespace %s", r->model,
                       r->namespace_);
        goto out;
    }
    if (PQgetisnull(res, 0, 2)) {
        rc = kd_seterr(err, KD_ENOTFOUND,
                       "checkpoint_uuid: checkpoint %s is not registered in namespace %s",
                       r->checkpoint_uuid, r->namespace_);
        goto out;
    }
    if (PQgetisnull(res, 0, 0)) {
        rc = kd_seterr(err, KD_ECONFLICT,
                       "checkpoint_uuid: checkpoint %s is %s (its files were removed by "
                       "checkpoint GC): only ACTIVE checkpoints can be registered",
                       r->checkpoint_uuid, PQgetvalue(res, 0, 2));
        goto out;
    }
    int64_t version = 0;
    if (kd_parse_i64(PQgetvalue(res, 0, 0), &version) != 0) {
        rc = kd_seterr(err, KD_EPROTO, "register model version: bad version %s",
                       PQgetvalue(res, 0, 0));
        goto out;
    }
    if (out != NULL)
        rc = kd_store_model_version_get(s, r->namespace_, r->model, version, out, err);
out:
    PQclear(res);
    free(labels);
    free(md);
    return rc;
}

static int check_version(int64_t version, char *err)
{
    if (version <= 0 || version > 2147483647)
        return kd_seterr(err, KD_EINVAL, "version: %lld is not a version number (1, 2, ...)",
                         (long long)version);
    return 0;
}

static int version_missing(int rc, const char *ns, const char *model, int64_t version, char *err)
{
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "model %s has no version %lld in namespace %s", model,
                       (long long)version, ns);
    return rc;
}

int kd_store_model_version_get(struct kd_store *s, const char *namespace_, const char *model,
                               int64_t version, json_t **out, char *err)
{
    char vb[24];
    int rc;
    *out = NULL;
    if ((rc = check_ns_name(namespace_, model, err)) != 0 ||
        (rc = check_version(version, err)) != 0)
        return rc;
    snprintf(vb, sizeof(vb), "%lld", (long long)version);
    const char *p[3] = {namespace_, model, vb};
    rc = json_row(s, "model version",
                  "SELECT row_to_json(y) FROM (SELECT " VER_COLS ", v.config" VER_FROM
                  " WHERE m.namespace = $1 AND m.name = $2 AND v.version = $3::int) y",
                  3, p, true, out, err);
    return version_missing(rc, namespace_, model, version, err);
}

int kd_store_model_versions_list(struct kd_store *s, const char *namespace_, const char *model,
                                 json_t **out, char *err)
{
    int rc;
    *out = NULL;
    if ((rc = check_ns_name(namespace_, model, err)) != 0)
        return rc;
    const char *p[2] = {namespace_, model};
    rc = json_row(
        s, "model versions",
        "SELECT (SELECT coalesce(json_agg(y ORDER BY y.version), '[]') FROM (SELECT " VER_COLS
            VER_FROM " WHERE v.model_id = m0.id) y)"
        " FROM models m0 WHERE m0.namespace = $1 AND m0.name = $2",
        2, p, true, out, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "model %s: not found in namespace %s", model, namespace_);
    return rc;
}

int kd_store_model_version_update(struct kd_store *s, const char *namespace_, const char *model,
                                  int64_t version, const struct kd_store_model_patch *p,
                                  json_t **out, char *err)
{
    struct patch_args a;
    json_t *row = NULL;
    char vb[24];
    int rc;
    if (out != NULL)
        *out = NULL;
    memset(&a, 0, sizeof(a));
    if ((rc = check_ns_name(namespace_, model, err)) != 0 ||
        (rc = check_version(version, err)) != 0 ||
        (rc = check_text("name", p->name, KD_STORE_MODEL_MAX_VNAME, false, err)) != 0 ||
        (rc = check_text("comment", p->comment, KD_STORE_MODEL_MAX_TEXT, false, err)) != 0 ||
        (rc = patch_args(p, &a, err)) != 0)
        goto out;
    snprintf(vb, sizeof(vb), "%lld", (long long)version);
    const char *pa[9] = {namespace_, model, vb,       p->name, p->comment,
                         a.labels,   a.add, a.remove, a.md};
    rc = json_row(
        s, "update model version",
        "WITH u AS (UPDATE model_versions SET name = coalesce($4, name),"
        " comment = coalesce($5, comment), " LABELS_EDIT(
            "$6", "$7", "$8") ", metadata = coalesce($9::jsonb, metadata), updated_at = now()"
                              " WHERE version = $3::int AND model_id = (SELECT id FROM models"
                              " WHERE namespace = $1 AND name = $2) RETURNING version)"
                              " SELECT version FROM u",
        9, pa, true, &row, err);
    rc = version_missing(labels_refused(rc, err), namespace_, model, version, err);
    if (rc == 0 && out != NULL)
        rc = kd_store_model_version_get(s, namespace_, model, version, out, err);
out:
    json_decref(row);
    patch_args_free(&a);
    return rc;
}

int kd_store_model_version_delete(struct kd_store *s, const char *namespace_, const char *model,
                                  int64_t version, json_t **out, char *err)
{
    json_t *row = NULL;
    char vb[24];
    int rc;
    if (out != NULL)
        *out = NULL;
    if ((rc = check_ns_name(namespace_, model, err)) != 0 ||
        (rc = check_version(version, err)) != 0)
        return rc;
    snprintf(vb, sizeof(vb), "%lld", (long long)version);
    const char *p[3] = {namespace_, model, vb};
    rc =
        json_row(s, "delete model version",
                 "WITH d AS (DELETE FROM model_versions WHERE version = $3::int AND model_id ="
                 " (SELECT id FROM models WHERE namespace = $1 AND name = $2) RETURNING *),"
                 " t AS (UPDATE models SET updated_at = now() WHERE id IN (SELECT model_id FROM d))"
                 " SELECT row_to_json(y) FROM (SELECT $2::text AS model, d.version, d.name,"
                 " d.checkpoint_uuid, d.experiment_id, d.experiment, d.experiment_uid,"
                 " d.trial_id, d.steps_completed FROM d) y",
                 3, p, false, &row, err);
    rc = version_missing(rc, namespace_, model, version, err);
    if (rc == 0) {
        give(row, out);
        row = NULL;
    }
    json_decref(row);
    return rc;
}

int kd_store_model_best(struct kd_store *s, const char *namespace_, const char *model,
                        const char *metric, bool smaller_is_better, json_t **out, char *err)
{
    int rc;
    *out = NULL;
    if ((rc = check_ns_name(namespace_, model, err)) != 0 ||
        (rc = check_text("metric", metric, KD_STORE_MAX_NAME, true, err)) != 0)
        return rc;
    const char *p[4] = {namespace_, model, metric, smaller_is_better ? "1" : "-1"};
    rc = json_row(s, "best model version",
                  "SELECT row_to_json(y) FROM (SELECT " VER_COLS
                  ", (v.metrics->>$3::text)::float8 AS value" VER_FROM
                  " WHERE m.namespace = $1 AND m.name = $2"
                  " AND jsonb_typeof(v.metrics->$3::text) = 'number'"
                  " ORDER BY (v.metrics->>$3::text)::float8 * $4::int, v.version LIMIT 1) y",
                  4, p, true, out, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc,
                       "metric: no version of model %s in namespace %s has the validation metric "
                       "%s as a number",
                       model, namespace_, metric);
    return rc;
}

int kd_store_checkpoint_protected(struct kd_store *s, const char *uuid, bool *out, char *err)
{
    PGresult *r = NULL;
    int rc = check_text("uuid", uuid, KD_STORE_MAX_NAME, true, err);
    *out = false;
    if (rc != 0)
        return rc;
    const char *p[1] = {uuid};
    rc = kd_store__exec(s, "checkpoint protected",
                        "SELECT EXISTS (SELECT 1 FROM model_versions WHERE checkpoint_uuid = $1)",
                        1, p, true, &r, err);
    if (rc == 0)
        *out = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    return rc;
}
