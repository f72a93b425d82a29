/*
 * The model registry's user routes (docs/models.md): models of a namespace
 * and their versions, each a checkpoint of the checkpoint registry. The
 * bodies are checked by check.c, the rows kept by the store (models.c); a
 * deletion tells the controller which experiments' checkpoints may no
 * longer be protected, so that their next checkpoint GC pass runs again.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/str.h"

#define NS(q) ((q)->seg[3])
#define MODEL(q) ((q)->seg[5])
#define VERSION(q) ((q)->seg[7])
#define METRICS_FLUSH_MS 2000 /* validations still queued reach the store before a capture */

/* 404 for a namespace this controller does not serve (as the experiments' routes answer). */
static bool served(struct api_rq *q)
{
    if (q->api->ns != NULL && strcmp(NS(q), q->api->ns) != 0) {
        api_error(q, 404, NULL, "namespace %s is not served by this controller", kd_logq(NS(q)));
        return false;
    }
    return true;
}

/* The field a store error names ("name: ...", "checkpoint_uuid: ..."), or NULL. */
static const char *field_of(const char *err)
{
    static const char *const fields[] = {
        "name",   "checkpoint_uuid", "metric",        "labels",      "version", "sort",
        "order",  "label",           "metadata",      "description", "comment", "limit",
        "offset", "add_labels",      "remove_labels", NULL};
    for (int i = 0; fields[i] != NULL; i++) {
        size_t n = strlen(fields[i]);
        if (strncmp(err, fields[i], n) == 0 && (err[n] == ':' || err[n] == '['))
            return fields[i];
    }
    return NULL;
}

static void fail(struct api_rq *q, int rc, const char *err)
{
    api_fail(q, rc, field_of(err), err);
}

/* The version number of the path, or 0 after answering 400. */
static int64_t version_of(struct api_rq *q)
{
    int64_t v = api_model_version_arg(VERSION(q));
    if (v <= 0)
        api_error(q, 400, "version", "version: %s is not a version number (1, 2, ...)",
                  kd_logq(VERSION(q)));
    return v;
}

/* Tell the controller that the checkpoints of experiment {name, uid} may no longer be protected. */
static void unprotected(struct api_rq *q, const json_t *exp)
{
    const char *name = json_string_value(json_object_get(exp, "experiment"));
    const char *uid = json_string_value(json_object_get(exp, "experiment_uid"));
    if (q->api->o.unprotected != NULL && name != NULL && uid != NULL)
        q->api->o.unprotected(q->api->o.unprotected_ud, NS(q), name, uid);
}

/* GET .../models[?name=S&label=L&archived=true|false|all&sort=K&order=asc|desc&limit=N&offset=N] */
void api_user_models(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    long limit = 0, offset = 0;
    struct kd_store_model_query mq = {.namespace_ = NS(q)};
    if (!served(q))
        return;
    const char *ar = kd_http_query(q->r, "archived");
    if (ar == NULL || strcmp(ar, "false") == 0)
        mq.archived = 0;
    else if (strcmp(ar, "true") == 0)
        mq.archived = 1;
    else if (strcmp(ar, "all") == 0)
        mq.archived = -1;
    else {
        api_error(q, 400, "archived", "archived: must be true, false or all");
        return;
    }
    if (api_query_int(q, "limit", 1, KD_STORE_MODEL_MAX_LIST, 100, &limit) != 0 ||
        api_query_int(q, "offset", 0, 1000000000, 0, &offset) != 0)
        return;
    mq.limit = (int)limit;
    mq.offset = (int)offset;
    mq.name_contains = kd_http_query(q->r, "name");
    mq.label = kd_http_query(q->r, "label");
    int rc = kd_store_model_sort_parse(kd_http_query(q->r, "sort"), kd_http_query(q->r, "order"),
                                       &mq.sort, &mq.desc, err);
    if (rc == 0)
        rc = kd_store_models_list(q->api->o.store, &mq, &out, err);
    if (rc != 0)
        fail(q, rc, err);
    else
        api_json(q, 200, json_pack("{s:o}", "models", out));
}

/* POST .../models {name, description?, labels?, metadata?} */
void api_user_model_create(struct api_rq *q)
{
    json_t *body = NULL, *row = NULL;
    char err[KD_ERRLEN] = "";
    struct api_model_req mr;
    struct api_verr e;
    if (!served(q) || api_body(q, KD_API_MAX_MODEL_BODY, &body) != 0)
        goto out;
    if (api_check_model(body, true, &mr, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    struct kd_store_model m = {.namespace_ = NS(q),
                               .name = mr.name,
                               .description = mr.description,
                               .owner = q->who->name,
                               .labels = mr.labels,
                               .metadata = mr.metadata};
    int rc = kd_store_model_create(q->api->o.store, &m, &row, err);
    if (rc != 0) {
        api_fail(q, rc, rc == KD_EEXIST ? "name" : field_of(err), err);
        goto out;
    }
    KD_INFO("model created", "namespace=%s model=%s by=%s", kd_logq(NS(q)), kd_logq(mr.name),
            kd_logq(q->who->name));
    api_json(q, 201, json_pack("{s:o}", "model", row));
    row = NULL;
out:
    json_decref(row);
    json_decref(body);
}

/* GET .../models/{m}: the model and its versions. */
void api_user_model(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    if (!served(q))
        return;
    int rc = kd_store_model_get(q->api->o.store, NS(q), MODEL(q), &out, err);
    if (rc != 0)
        fail(q, rc, err);
    else
        api_json(q, 200, out);
}

/* PATCH .../models/{m} {description?, labels?, add_labels?, remove_labels?, metadata?, archived?}
 */
void api_user_model_update(struct api_rq *q)
{
    json_t *body = NULL, *row = NULL;
    char err[KD_ERRLEN] = "";
    struct api_model_req mr;
    struct api_verr e;
    if (!served(q) || api_body(q, KD_API_MAX_MODEL_BODY, &body) != 0)
        goto out;
    if (api_check_model(body, false, &mr, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    struct kd_store_model_patch p = {.description = mr.description,
                                     .archived = mr.archived,
                                     .labels = mr.labels,
                                     .add_labels = mr.add_labels,
                                     .remove_labels = mr.remove_labels,
                                     .metadata = mr.metadata};
    int rc = kd_store_model_update(q->api->o.store, NS(q), MODEL(q), &p, &row, err);
    if (rc != 0) {
        fail(q, rc, err);
        goto out;
    }
    KD_INFO("model changed", "namespace=%s model=%s by=%s", kd_logq(NS(q)), kd_logq(MODEL(q)),
            kd_logq(q->who->name));
    api_json(q, 200, json_pack("{s:o}", "model", row));
    row = NULL;
out:
    json_decref(row);
    json_decref(body);
}

/* DELETE .../models/{m}: the model and its versions; their checkpoints lose their protection. */
void api_user_model_delete(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    json_t *exps = NULL;
    if (!served(q))
        return;
    int rc = kd_store_model_delete(q->api->o.store, NS(q), MODEL(q), &exps, err);
    if (rc != 0) {
        fail(q, rc, err);
        return;
    }
    size_t i;
    json_t *x;
    json_array_foreach(exps, i, x) unprotected(q, x);
    KD_INFO("model deleted", "namespace=%s model=%s by=%s", kd_logq(NS(q)), kd_logq(MODEL(q)),
            kd_logq(q->who->name));
    api_json(q, 200, json_pack("{s:s,s:s}", "deleted", MODEL(q), "namespace", NS(q)));
    json_decref(exps);
}

/* GET .../models/{m}/versions */
void api_user_model_versions(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    if (!served(q))
        return;
    int rc = kd_store_model_versions_list(q->api->o.store, NS(q), MODEL(q), &out, err);
    if (rc != 0)
        fail(q, rc, err);
    else
        api_json(q, 200, json_pack("{s:s,s:o}", "model", MODEL(q), "versions", out));
}

/* POST .../models/{m}/versions {checkpoint_uuid, name?, comment?, labels?, metadata?} */
void api_user_model_version_create(struct api_rq *q)
{
    json_t *body = NULL, *row = NULL;
    char err[KD_ERRLEN] = "";
    struct api_version_req vr;
    struct api_verr e;
    if (!served(q) || api_body(q, KD_API_MAX_MODEL_BODY, &body) != 0)
        goto out;
    if (api_check_model_version(body, true, &vr, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    /* The checkpoint's validation is captured: what the writer still holds goes in first. */
    if (kd_store_metrics_flush(q->api->o.store, METRICS_FLUSH_MS) != 0)
        KD_DEBUG("metrics not all written before a model version's capture", "model=%s",
                 kd_logq(MODEL(q)));
    struct kd_store_version_reg r = {.namespace_ = NS(q),
                                     .model = MODEL(q),
                                     .checkpoint_uuid = vr.checkpoint_uuid,
                                     .name = vr.name,
                                     .comment = vr.comment,
                                     .owner = q->who->name,
                                     .labels = vr.labels,
                                     .metadata = vr.metadata};
    int rc = kd_store_model_version_add(q->api->o.store, &r, &row, err);
    if (rc != 0) {
        fail(q, rc, err);
        goto out;
    }
    KD_INFO("model version registered", "namespace=%s model=%s version=%lld checkpoint=%s by=%s",
            kd_logq(NS(q)), kd_logq(MODEL(q)),
            (long long)json_integer_value(json_object_get(row, "version")),
            kd_logq(vr.checkpoint_uuid), kd_logq(q->who->name));
    api_json(q, 201, json_pack("{s:o}", "version", row));
    row = NULL;
out:
    json_decref(row);
    json_decref(body);
}

/* GET .../models/{m}/versions/{v} */
void api_user_model_version(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    int64_t v;
    if (!served(q) || (v = version_of(q)) <= 0)
        return;
    int rc = kd_store_model_version_get(q->api->o.store, NS(q), MODEL(q), v, &out, err);
    if (rc != 0)
        fail(q, rc, err);
    else
        api_json(q, 200, json_pack("{s:o}", "version", out));
}

/* PATCH .../models/{m}/versions/{v} {name?, comment?, labels?, add_labels?, remove_labels?,
 * metadata?} */
void api_user_model_version_update(struct api_rq *q)
{
    json_t *body = NULL, *row = NULL;
    char err[KD_ERRLEN] = "";
    struct api_version_req vr;
    struct api_verr e;
    int64_t v;
    if (!served(q) || (v = version_of(q)) <= 0 || api_body(q, KD_API_MAX_MODEL_BODY, &body) != 0)
        goto out;
    if (api_check_model_version(body, false, &vr, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    struct kd_store_model_patch p = {.archived = -1,
                                     .name = vr.name,
                                     .comment = vr.comment,
                                     .labels = vr.labels,
                                     .add_labels = vr.add_labels,
                                     .remove_labels = vr.remove_labels,
                                     .metadata = vr.metadata};
    int rc = kd_store_model_version_update(q->api->o.store, NS(q), MODEL(q), v, &p, &row, err);
    if (rc != 0) {
        fail(q, rc, err);
        goto out;
    }
    api_json(q, 200, json_pack("{s:o}", "version", row));
    row = NULL;
out:
    json_decref(row);
    json_decref(body);
}

/* DELETE .../models/{m}/versions/{v}: its checkpoint loses this version's protection. */
void api_user_model_version_delete(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    json_t *row = NULL;
    int64_t v;
    if (!served(q) || (v = version_of(q)) <= 0)
        return;
    int rc = kd_store_model_version_delete(q->api->o.store, NS(q), MODEL(q), v, &row, err);
    if (rc != 0) {
        fail(q, rc, err);
        return;
    }
    unprotected(q, row);
    KD_INFO("model version deleted", "namespace=%s model=%s version=%lld by=%s", kd_logq(NS(q)),
            kd_logq(MODEL(q)), (long long)v, kd_logq(q->who->name));
    api_json(q, 200, json_pack("{s:o}", "deleted", row));
}

/* GET .../models/{m}/best?metric=M[&order=asc|desc]: asc (the default) when smaller is better. */
void api_user_model_best(struct api_rq *q)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    if (!served(q))
        return;
    const char *metric = kd_http_query(q->r, "metric");
    const char *order = kd_http_query(q->r, "order");
    if (metric == NULL || metric[0] == '\0') {
        api_error(q, 400, "metric", "metric: required (a validation metric's name)");
        return;
    }
    if (order != NULL && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0) {
        api_error(q, 400, "order",
                  "order: must be \"asc\" (smaller is better) or \"desc\" (larger is better)");
        return;
    }
    bool smaller = order == NULL || strcmp(order, "asc") == 0;
    int rc = kd_store_model_best(q->api->o.store, NS(q), MODEL(q), metric, smaller, &out, err);
    if (rc != 0)
        fail(q, rc, err);
    else
        api_json(q, 200,
                 json_pack("{s:s,s:s,s:o}", "metric", metric, "order", smaller ? "asc" : "desc",
                           "version", out));
}
