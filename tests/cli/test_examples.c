/* Every example experiment (each examples/NAME/ and examples/NAME/SUB/ YAML file, with its
 * folder as the context) goes through `det experiment create --dry-run` and the resulting
 * Experiment validates against crds/experiments.yaml; edited copies of a
 * valid resource are rejected with the API server's causes. */
#include <glob.h>
#include <libgen.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "openapi/openapi.h"
#include "run.h"

static json_t *experiment_of(const char *config)
{
    struct det_run r;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", config);
    det_run(&r, (const char *[]){"experiment", "create", config, dirname(dir), "--dry-run", NULL});
    if (r.code != 0)
        fail_msg("%s: det exited %d: %s", config, r.code, r.err);
    json_t *docs = parse_docs(r.out, r.out_len);
    json_t *exp = json_incref(json_array_get(docs, json_array_size(docs) - 1));
    json_decref(docs);
    det_run_free(&r);
    return exp;
}

static void test_every_example_validates(void **state)
{
    (void)state;
    glob_t g;
    assert_int_equal(glob("examples/*/*.yaml", 0, NULL, &g), 0);
    /* and the Trainer-API configs (examples/pytorch-fashion-mnist/trainer-api/) */
    assert_int_equal(glob("examples/*/*/*.yaml", GLOB_APPEND, NULL, &g), 0);
    /* 7 Fashion-MNIST C searches + the PyTorch one + 3 Trainer-API ones */
    assert_true(g.gl_pathc >= 11);
    json_t *schema = crd_schema_file("crds/experiments.yaml");
    int failures = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        json_t *exp = experiment_of(g.gl_pathv[i]);
        json_t *causes = NULL, *unknown = NULL;
        int rc = kd_openapi_validate(schema, exp, "", &causes);
        assert_int_equal(kd_openapi_unknown_fields(schema, exp, "", &unknown), 0);
        if (rc != 0 || json_array_size(unknown) != 0) {
            char *c = kd_openapi_causes_str(causes);
            char *u = json_dumps(unknown, 0);
            print_error("%s: rc=%d causes:\n%s\nundeclared fields: %s\n", g.gl_pathv[i], rc, c, u);
            free(c);
            free(u);
            failures++;
        } else {
            print_message("ok %s\n", g.gl_pathv[i]);
        }
        json_decref(causes);
        json_decref(unknown);
        json_decref(exp);
    }
    globfree(&g);
    json_decref(schema);
    assert_int_equal(failures, 0);
}

/* Every config lib/config's tests hold valid gives a resource the CRD accepts
 * in full: the two schemas agree on what a valid experiment is. */
static void test_valid_configs_fit_the_crd(void **state)
{
    (void)state;
    glob_t g;
    char ctx[64];
    make_tmp(ctx);
    put_file(ctx, "train.py", "print(1)\n");
    if (glob("tests/data/config/good/*.yaml", 0, NULL, &g) != 0) {
        rm_rf(ctx);
        skip();
    }
    json_t *schema = crd_schema_file("crds/experiments.yaml");
    int failures = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct det_run r;
        det_run(&r,
                (const char *[]){"experiment", "create", g.gl_pathv[i], ctx, "--dry-run", NULL});
        if (r.code != 0) {
            print_error("%s: det exited %d: %s\n", g.gl_pathv[i], r.code, r.err);
            failures++;
            det_run_free(&r);
            continue;
        }
        json_t *docs = parse_docs(r.out, r.out_len);
        json_t *exp = json_array_get(docs, json_array_size(docs) - 1);
        json_t *causes = NULL, *unknown = NULL;
        int rc = kd_openapi_validate(schema, exp, "", &causes);
        assert_int_equal(kd_openapi_unknown_fields(schema, exp, "", &unknown), 0);
        if (rc != 0 || json_array_size(unknown) != 0) {
            char *c = kd_openapi_causes_str(causes);
            char *u = json_dumps(unknown, 0);
            print_error("%s: rc=%d causes:\n%s\nundeclared fields: %s\n", g.gl_pathv[i], rc, c, u);
            free(c);
            free(u);
            failures++;
        }
        json_decref(causes);
        json_decref(unknown);
        json_decref(docs);
        det_run_free(&r);
    }
    globfree(&g);
    json_decref(schema);
    rm_rf(ctx);
    assert_int_equal(failures, 0);
}

struct edit {
    const char *path; /* object path under spec, '.'-separated; last part is set */
    const char *json; /* new value, or NULL to delete */
    const char *want; /* the one cause, as kubectl prints it */
};

static void set_path(json_t *root, const char *path, json_t *v)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *node = root;
    char *save = NULL, *tok = strtok_r(buf, ".", &save);
    for (;;) {
        char *next = strtok_r(NULL, ".", &save);
        if (next == NULL) {
            if (v)
                json_object_set_new(node, tok, v);
            else
                json_object_del(node, tok);
            return;
        }
        json_t *child = json_object_get(node, tok);
        if (child == NULL) {
            child = json_object();
            json_object_set_new(node, tok, child);
        }
        node = child;
        tok = next;
    }
}

static void test_edited_resources_are_rejected(void **state)
{
    (void)state;
    static const struct edit edits[] = {
        {"spec.searcher.max_trials", "\"ten\"",
         "* spec.searcher.max_trials: Invalid value: \"string\": spec.searcher.max_trials in body "
         "must be of type integer: \"string\""},
        {"spec.searcher", NULL, "* spec.searcher: Required value"},
        {"spec.entrypoint", NULL, "* spec.entrypoint: Required value"},
        {"spec.resources.slots_per_trial", "-1",
         "* spec.resources.slots_per_trial: Invalid value: -1: spec.resources.slots_per_trial in "
         "body should be greater than or equal to 0"},
        {"spec.checkpoint_storage.type", "\"gcs\"",
         "* spec.checkpoint_storage.type: Unsupported value: \"gcs\": supported values: "
         "\"shared_fs\", \"s3\""},
        {"spec.canceled", "\"true\"",
         "* spec.canceled: Invalid value: \"string\": spec.canceled in body must be of type "
         "boolean: \"string\""},
        {"spec.context.sha256", "\"XYZ\"",
         "* spec.context.sha256: Invalid value: \"XYZ\": spec.context.sha256 in body should match "
         "'^[0-9a-f]{64}$'"},
        {"spec.labels", "[1]",
         "* spec.labels[0]: Invalid value: \"integer\": spec.labels[0] in body must be of type "
         "string: \"integer\""},
        {"spec.hyperparameters.anything", "{\"type\": \"whatever\", \"x\": [1, {}]}", ""},
        {"spec.data", "{\"free\": {\"form\": true}}", ""},
    };
    json_t *schema = crd_schema_file("crds/experiments.yaml");
    json_t *base = experiment_of("examples/fashion-mnist-c/const.yaml");
    int failures = 0;
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        json_t *exp = json_deep_copy(base);
        json_t *v = NULL;
        if (edits[i].json) {
            json_error_t je;
            v = json_loads(edits[i].json, JSON_DECODE_ANY, &je);
            assert_non_null(v);
        }
        set_path(exp, edits[i].path, v);
        json_t *causes = NULL;
        int rc = kd_openapi_validate(schema, exp, "", &causes);
        char *got = kd_openapi_causes_str(causes);
        bool want_ok = edits[i].want[0] == '\0';
        if (want_ok ? rc != 0 : (rc != KD_EINVALID || strcmp(got, edits[i].want) != 0)) {
            print_error("edit %s = %s: rc=%d\n got: %s\nwant: %s\n", edits[i].path,
                        edits[i].json ? edits[i].json : "(deleted)", rc, got, edits[i].want);
            failures++;
        }
        free(got);
        json_decref(causes);
        json_decref(exp);
    }
    json_decref(base);
    json_decref(schema);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_example_validates),
        cmocka_unit_test(test_valid_configs_fit_the_crd),
        cmocka_unit_test(test_edited_resources_are_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
