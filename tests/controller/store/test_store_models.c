/*
 * The model registry against a real private PostgreSQL: models made,
 * listed (filters, sorts), changed and deleted; versions numbered by the
 * store (never reused), each capturing its checkpoint's experiment, trial,
 * hyperparameters, validation metrics and config; only ACTIVE checkpoints
 * of the same namespace; the best version by a metric; the checkpoints a
 * version protects. Plus the pure decisions (names, labels, sorts) as tables.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fx.h"

static void names_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        bool ok;
    } cases[] = {
        {"mnist", true},   {"MNIST-cnn_v2.1", true}, {"0model", true}, {"a", true},
        {"", false},       {".hidden", false},       {"-x", false},    {"_x", false},
        {"a b", false},    {"a/b", false},           {"ü", false},     {"a;drop", false},
        {"../etc", false}, {"x\n", false},
    };
    char longest[KD_STORE_MODEL_MAX_NAME + 2];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (kd_store_model_name_ok(cases[i].name) != cases[i].ok)
            fail_msg("name \"%s\": want %s", cases[i].name, cases[i].ok ? "ok" : "refused");
    assert_false(kd_store_model_name_ok(NULL));
    memset(longest, 'm', sizeof(longest));
    longest[KD_STORE_MODEL_MAX_NAME] = '\0';
    assert_true(kd_store_model_name_ok(longest));
    longest[KD_STORE_MODEL_MAX_NAME] = 'm';
    longest[KD_STORE_MODEL_MAX_NAME + 1] = '\0';
    assert_false(kd_store_model_name_ok(longest));
}

static void labels_table(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        const char *want; /* NULL: accepted; else the start of the error */
    } cases[] = {
        {"[]", NULL},
        {"[\"prod\", \"team a\", \"ünï\"]", NULL},
        {"[\"\"]", "labels[0]: "},
        {"[\"ok\", 3]", "labels[1]: "},
        {"[\"ok\", \"tab\\there\"]", "labels[1]: "},
        {"[\"nul\\u0000x\"]", "labels[0]: "},
        {"{\"a\": 1}", "labels: must be an array"},
        {"\"prod\"", "labels: must be an array"},
    };
    char err[KD_ERRLEN];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *v = json_loads(cases[i].json, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        assert_non_null(v);
        err[0] = '\0';
        int rc = kd_store_model_labels_check(v, "labels", err);
        if (cases[i].want == NULL
                ? rc != 0
                : (rc != KD_EINVAL || strncmp(err, cases[i].want, strlen(cases[i].want)) != 0))
            fail_msg("labels %s: rc %d err \"%s\", want %s", cases[i].json, rc, err,
                     cases[i].want ? cases[i].want : "accepted");
        json_decref(v);
    }
    json_t *many = json_array();
    for (int i = 0; i <= KD_STORE_MODEL_MAX_LABELS; i++)
        json_array_append_new(many, json_sprintf("l%d", i));
    assert_int_equal(kd_store_model_labels_check(many, "labels", err), KD_EINVAL);
    json_decref(many);
    assert_int_equal(kd_store_model_labels_check(NULL, "labels", err), 0);
}

static void sort_table(void **state)
{
    (void)state;
    static const struct {
        const char *sort, *order;
        int rc;
        enum kd_model_sort want;
        bool desc;
    } cases[] = {
        {NULL, NULL, 0, KD_MODEL_SORT_NAME, false},
        {"name", "desc", 0, KD_MODEL_SORT_NAME, true},
        {"created", NULL, 0, KD_MODEL_SORT_CREATED, true},
        {"updated", "asc", 0, KD_MODEL_SORT_UPDATED, false},
        {"versions", NULL, 0, KD_MODEL_SORT_VERSIONS, true},
        {"size", NULL, KD_EINVAL, 0, false},
        {"name", "up", KD_EINVAL, 0, false},
        {"", NULL, KD_EINVAL, 0, false},
    };
    char err[KD_ERRLEN];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum kd_model_sort got = KD_MODEL_SORT_NAME;
        bool desc = false;
        err[0] = '\0';
        int rc = kd_store_model_sort_parse(cases[i].sort, cases[i].order, &got, &desc, err);
        if (rc != cases[i].rc || (rc == 0 && (got != cases[i].want || desc != cases[i].desc)))
            fail_msg("sort %s order %s: rc %d sort %d desc %d", cases[i].sort ?: "(null)",
                     cases[i].order ?: "(null)", rc, (int)got, (int)desc);
        if (rc != 0 &&
            strncmp(err, cases[i].order && strcmp(cases[i].order, "up") == 0 ? "order:" : "sort:",
                    5) != 0)
            fail_msg("sort %s: the error does not name the field: %s", cases[i].sort ?: "", err);
    }
}

/* A checkpoint of trial tid at steps, with a validation {"loss": loss} at those steps when loss >=
 * 0. */
static void ckpt(struct kd_store *s, int64_t tid, const char *uuid, int64_t steps, double loss)
{
    char err[KD_ERRLEN] = "", key[64];
    struct kd_store_checkpoint c = {uuid, tid, steps, "/ckpt/x", 10, NULL};
    if (kd_store_checkpoint_add(s, &c, err) != 0)
        fail_msg("checkpoint %s: %s", uuid, err);
    if (loss < 0)
        return;
    json_t *m = json_pack("{sfss}", "loss", loss, "note", "'; DROP TABLE models; --");
    struct kd_metric_row row = {.step = steps, .metrics = m};
    snprintf(key, sizeof(key), "v-%s", uuid);
    struct kd_metric_batch b = {tid, KD_METRIC_VALIDATION, key, &row, 1};
    if (kd_store_metrics_put(s, &b, 10000, err) != 0)
        fail_msg("metrics: %s", err);
    json_decref(m);
}

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k)) ?: "";
}

static long long num(const json_t *o, const char *k)
{
    return (long long)json_integer_value(json_object_get(o, k));
}

static void models(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    json_t *out = NULL, *labels = json_pack("[ss]", "prod", "'; DROP TABLE models; --");
    json_t *md = json_pack("{ss}", "owner-team", "vision");
    struct kd_store_model m = {"default", "mnist", "a \"quoted\" description", "alice", labels, md};
    assert_int_equal(kd_store_model_create(s, &m, &out, err), 0);
    assert_string_equal(str(out, "name"), "mnist");
    assert_string_equal(str(out, "owner"), "alice");
    assert_true(json_equal(json_object_get(out, "labels"), labels));
    assert_true(json_equal(json_object_get(out, "metadata"), md));
    assert_int_equal(num(out, "versions"), 0);
    json_decref(out);
    /* A taken name; the same name in another namespace is another model; bad names named. */
    assert_int_equal(kd_store_model_create(s, &m, NULL, err), KD_EEXIST);
    struct kd_store_model other = {"team-b", "mnist", NULL, "bob", NULL, NULL};
    assert_int_equal(kd_store_model_create(s, &other, NULL, err), 0);
    struct kd_store_model bad = {"default", "../x", NULL, NULL, NULL, NULL};
    assert_int_equal(kd_store_model_create(s, &bad, NULL, err), KD_EINVAL);
    assert_memory_equal(err, "name:", 5);
    const char *names[] = {"zeta", "alpha", "Beta-cnn"};
    for (int i = 0; i < 3; i++) {
        struct kd_store_model x = {"default", names[i], NULL, "bob", NULL, NULL};
        assert_int_equal(kd_store_model_create(s, &x, NULL, err), 0);
    }
    /* Lists: by name; filtered by a substring of the name (any case) and by label; archived. */
    struct kd_store_model_query q = {.namespace_ = "default", .limit = 100};
    assert_int_equal(kd_store_models_list(s, &q, &out, err), 0);
    assert_int_equal(json_array_size(out), 4);
    assert_string_equal(str(json_array_get(out, 0), "name"), "Beta-cnn");
    assert_string_equal(str(json_array_get(out, 3), "name"), "zeta");
    assert_null(json_object_get(json_array_get(out, 0), "n"));
    json_decref(out);
    q.desc = true;
    assert_int_equal(kd_store_models_list(s, &q, &out, err), 0);
    assert_string_equal(str(json_array_get(out, 0), "name"), "zeta");
    json_decref(out);
    q.desc = false;
    q.name_contains = "BETA";
    assert_int_equal(kd_store_models_list(s, &q, &out, err), 0);
    assert_int_equal(json_array_size(out), 1);
    json_decref(out);
    q.name_contains = "%";
    assert_int_equal(kd_store_models_list(s, &q, &out, err), 0);
    assert_int_equal(json_array_size(out), 0);
    json_decref(out);
    q.name_contains = NULL;
    q.label = "'; DROP TABLE models; --";
    assert_int_equal(kd_store_models_list(s, &q, &out, err), 0);
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(str(json_array_get(out, 0), "name"), "mnist");
    json_decref(out);
    q.label = NULL;
    /* Update: labels added once, removed; archived models are left out of the default list. */
    json_t *add = json_pack("[ss]", "prod", "v2"),
           *rm = json_pack("[s]", "'; DROP TABLE models; --");
    struct kd_store_model_patch p = {
        .description = "new", .archived = 1, .add_labels = add, .remove_labels = rm};
    assert_int_equal(kd_store_model_update(s, "default", "mnist", &p, &out, err), 0);
    assert_string_equal(str(out, "description"), "new");
    json_t *want = json_pack("[ss]", "prod", "v2");
    assert_true(json_equal(json_object_get(out, "labels"), want));
    assert_true(json_is_true(json_object_get(out, "archived")));
    json_decref(want);
    json_decref(out);
    assert_int_equal(kd_store_models_list(s, &q, &out, err), 0);
    assert_int_equal(json_array_size(out), 3);
    json_decref(out);
    q.archived = -1;
    assert_int_equal(kd_store_models_list(s, &q, &out, err), 0);
    assert_int_equal(json_array_size(out), 4);
    json_decref(out);
    struct kd_store_model_patch none = {.archived = -1};
    assert_int_equal(kd_store_model_update(s, "default", "nope", &none, NULL, err), KD_ENOTFOUND);
    /* Too many labels after an add: refused naming labels, nothing changed. */
    json_t *many = json_array();
    for (int i = 0; i < KD_STORE_MODEL_MAX_LABELS; i++)
        json_array_append_new(many, json_sprintf("l%d", i));
    struct kd_store_model_patch pm = {.archived = -1, .add_labels = many};
    assert_int_equal(kd_store_model_update(s, "default", "mnist", &pm, NULL, err), KD_EINVAL);
    assert_memory_equal(err, "labels:", 7);
    json_decref(many);
    json_decref(add);
    json_decref(rm);
    json_decref(labels);
    json_decref(md);
    kd_store_close(s);
}

static void versions(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, tid = fx_trial(s, "v", &eid);
    ckpt(s, tid, "ck-10", 10, 0.5);
    ckpt(s, tid, "ck-20", 20, 0.2);
    ckpt(s, tid, "ck-30", 30, 0.3);
    ckpt(s, tid, "ck-40", 40, -1);
    struct kd_store_model m = {"default", "mnist", NULL, "alice", NULL, NULL};
    assert_int_equal(kd_store_model_create(s, &m, NULL, err), 0);
    json_t *out = NULL, *vl = json_pack("[s]", "candidate");
    const char *uuids[] = {"ck-10", "ck-20", "ck-30", "ck-40"};
    for (int i = 0; i < 4; i++) {
        struct kd_store_version_reg r = {"default",   "mnist", uuids[i], "v",
                                         "first try", "alice", vl,       NULL};
        assert_int_equal(kd_store_model_version_add(s, &r, &out, err), 0);
        assert_int_equal(num(out, "version"), i + 1);
        json_decref(out);
    }
    assert_int_equal(kd_store_model_version_get(s, "default", "mnist", 2, &out, err), 0);
    assert_string_equal(str(out, "checkpoint_uuid"), "ck-20");
    assert_string_equal(str(out, "checkpoint_state"), "ACTIVE");
    assert_int_equal(num(out, "trial_id"), tid);
    assert_int_equal(num(out, "experiment_id"), eid);
    assert_string_equal(str(out, "experiment"), "exp-v");
    assert_string_equal(str(out, "experiment_uid"), "exp-v");
    assert_int_equal(num(out, "steps_completed"), 20);
    assert_true(json_real_value(json_object_get(json_object_get(out, "hparams"), "lr")) == 0.01);
    assert_true(json_number_value(json_object_get(json_object_get(out, "metrics"), "loss")) == 0.2);
    assert_string_equal(str(json_object_get(out, "metrics"), "note"), "'; DROP TABLE models; --");
    assert_string_equal(str(json_object_get(out, "config"), "searcher"), "random");
    assert_string_equal(str(out, "owner"), "alice");
    json_decref(out);
    /* Without a validation at its steps, a version's metrics are {}. */
    assert_int_equal(kd_store_model_version_get(s, "default", "mnist", 4, &out, err), 0);
    assert_int_equal(json_object_size(json_object_get(out, "metrics")), 0);
    json_decref(out);
    /* The best: smallest loss is version 2 (ck-20), largest version 1. */
    assert_int_equal(kd_store_model_best(s, "default", "mnist", "loss", true, &out, err), 0);
    assert_int_equal(num(out, "version"), 2);
    assert_true(json_number_value(json_object_get(out, "value")) == 0.2);
    json_decref(out);
    assert_int_equal(kd_store_model_best(s, "default", "mnist", "loss", false, &out, err), 0);
    assert_int_equal(num(out, "version"), 1);
    json_decref(out);
    assert_int_equal(kd_store_model_best(s, "default", "mnist", "note", true, &out, err),
                     KD_ENOTFOUND);
    assert_memory_equal(err, "metric:", 7);
    /* Unknown or foreign checkpoints; a DELETED one; an unknown model. */
    struct kd_store_version_reg r = {"default", "mnist", "nope", NULL, NULL, NULL, NULL, NULL};
    assert_int_equal(kd_store_model_version_add(s, &r, NULL, err), KD_ENOTFOUND);
    assert_memory_equal(err, "checkpoint_uuid:", 16);
    struct kd_store_model mb = {"team-b", "mnist", NULL, NULL, NULL, NULL};
    assert_int_equal(kd_store_model_create(s, &mb, NULL, err), 0);
    struct kd_store_version_reg rb = {"team-b", "mnist", "ck-10", NULL, NULL, NULL, NULL, NULL};
    assert_int_equal(kd_store_model_version_add(s, &rb, NULL, err), KD_ENOTFOUND);
    assert_int_equal(kd_store_checkpoint_mark_deleted(s, "ck-40", err), 0);
    r.checkpoint_uuid = "ck-40";
    assert_int_equal(kd_store_model_version_add(s, &r, NULL, err), KD_ECONFLICT);
    r.model = "nomodel";
    r.checkpoint_uuid = "ck-10";
    assert_int_equal(kd_store_model_version_add(s, &r, NULL, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "model nomodel"));
    /* Protection: what versions reference. */
    bool prot = false;
    assert_int_equal(kd_store_checkpoint_protected(s, "ck-30", &prot, err), 0);
    assert_true(prot);
    ckpt(s, tid, "ck-50", 50, -1);
    assert_int_equal(kd_store_checkpoint_protected(s, "ck-50", &prot, err), 0);
    assert_false(prot);
    assert_int_equal(kd_store_checkpoints_list(s, eid, 0, false, &out, err), 0);
    size_t i;
    json_t *c;
    json_array_foreach(out, i, c)
    {
        bool want = strcmp(str(c, "uuid"), "ck-50") != 0;
        if (json_is_true(json_object_get(c, "protected")) != want)
            fail_msg("checkpoint %s: protected should be %d", str(c, "uuid"), want);
    }
    json_decref(out);
    /* Update a version; delete one: its number is not given again, its checkpoint unprotected. */
    json_t *rmv = json_pack("[s]", "candidate"), *addv = json_pack("[s]", "prod");
    struct kd_store_model_patch p = {.archived = -1,
                                     .name = "best so far",
                                     .comment = "c",
                                     .add_labels = addv,
                                     .remove_labels = rmv};
    assert_int_equal(kd_store_model_version_update(s, "default", "mnist", 3, &p, &out, err), 0);
    assert_string_equal(str(out, "name"), "best so far");
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "labels"), 0)),
                        "prod");
    json_decref(out);
    assert_int_equal(kd_store_model_version_update(s, "default", "mnist", 9, &p, NULL, err),
                     KD_ENOTFOUND);
    assert_int_equal(kd_store_model_version_delete(s, "default", "mnist", 4, &out, err), 0);
    assert_string_equal(str(out, "experiment_uid"), "exp-v");
    json_decref(out);
    assert_int_equal(kd_store_model_version_delete(s, "default", "mnist", 4, NULL, err),
                     KD_ENOTFOUND);
    r.model = "mnist";
    r.checkpoint_uuid = "ck-50";
    assert_int_equal(kd_store_model_version_add(s, &r, &out, err), 0);
    assert_int_equal(num(out, "version"), 5);
    json_decref(out);
    /* Describe: the model with its versions, in order. */
    assert_int_equal(kd_store_model_get(s, "default", "mnist", &out, err), 0);
    json_t *vs = json_object_get(out, "versions");
    assert_int_equal(json_array_size(vs), 4);
    assert_int_equal(num(json_object_get(out, "model"), "versions"), 4);
    assert_int_equal(num(json_object_get(out, "model"), "latest_version"), 5);
    assert_int_equal(num(json_array_get(vs, 3), "version"), 5);
    json_decref(out);
    /* Deleting the model deletes its versions and names their experiment once. */
    assert_int_equal(kd_store_model_delete(s, "default", "mnist", &out, err), 0);
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(str(json_array_get(out, 0), "experiment_uid"), "exp-v");
    json_decref(out);
    assert_int_equal(kd_store_checkpoint_protected(s, "ck-30", &prot, err), 0);
    assert_false(prot);
    assert_int_equal(kd_store_model_get(s, "default", "mnist", &out, err), KD_ENOTFOUND);
    assert_int_equal(kd_store_model_delete(s, "default", "mnist", NULL, err), KD_ENOTFOUND);
    PGconn *pc = fx_conn(ci);
    assert_int_equal(fx_int(pc, "SELECT count(*) FROM model_versions"), 0);
    PQfinish(pc);
    json_decref(vl);
    json_decref(rmv);
    json_decref(addv);
    kd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_table), cmocka_unit_test(labels_table), cmocka_unit_test(sort_table),
        cmocka_unit_test(models),      cmocka_unit_test(versions),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
