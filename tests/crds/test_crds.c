/* crds/: the CRDs are well-formed and structural, their printer columns
 * point at schema fields, preserve-unknown-fields appears only where the
 * config is free-form, and sample resources (tests/crds/good, bad) are
 * accepted or rejected with the exact cause the API server gives. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/str.h"
#include "openapi/openapi.h"
#include "yaml/yaml.h"

static json_t *load_crd(const char *path)
{
    struct kd_yaml_doc *doc = NULL;
    char err[KD_ERRLEN];
    if (kd_yaml_parse_file(path, &doc, err) != 0)
        fail_msg("%s", err);
    json_t *j = json_incref(kd_yaml_root(doc));
    kd_yaml_free(doc);
    return j;
}

static const json_t *schema_of(const json_t *crd)
{
    return json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(crd, "spec"), "versions"), 0), "schema"),
        "openAPIV3Schema");
}

static void check_shape(const char *file, const char *name, const char *kind, const char *shortn,
                        const char *const *want)
{
    json_t *crd = load_crd(file);
    json_t *spec = json_object_get(crd, "spec");
    json_t *ver = json_array_get(json_object_get(spec, "versions"), 0);
    char err[KD_ERRLEN] = "";
    assert_string_equal(json_string_value(json_object_get(crd, "apiVersion")),
                        "apiextensions.k8s.io/v1");
    assert_string_equal(json_string_value(json_object_get(crd, "kind")),
                        "CustomResourceDefinition");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(crd, "metadata"), "name")), name);
    assert_string_equal(json_string_value(json_object_get(spec, "group")), "kdet.io");
    assert_string_equal(json_string_value(json_object_get(spec, "scope")), "Namespaced");
    json_t *names = json_object_get(spec, "names");
    assert_string_equal(json_string_value(json_object_get(names, "kind")), kind);
    assert_string_equal(json_string_value(json_array_get(json_object_get(names, "shortNames"), 0)),
                        shortn);
    assert_int_equal(json_array_size(json_object_get(spec, "versions")), 1);
    assert_string_equal(json_string_value(json_object_get(ver, "name")), "v1alpha1");
    assert_true(json_is_true(json_object_get(ver, "served")));
    assert_true(json_is_true(json_object_get(ver, "storage")));
    assert_true(json_is_object(json_object_get(json_object_get(ver, "subresources"), "status")));
    const json_t *schema = schema_of(crd);
    if (kd_openapi_check_structural(schema, NULL, err) != 0)
        fail_msg("%s: not structural: %s", file, err);
    /* each printer column names a field the schema declares */
    json_t *cols = json_object_get(ver, "additionalPrinterColumns");
    for (size_t w = 0; want[w] != NULL; w++) {
        bool found = false;
        for (size_t i = 0; i < json_array_size(cols); i++)
            found |= strcmp(json_string_value(json_object_get(json_array_get(cols, i), "name")),
                            want[w]) == 0;
        if (!found)
            fail_msg("%s: no printer column %s", file, want[w]);
    }
    for (size_t i = 0; i < json_array_size(cols); i++) {
        const char *jp = json_string_value(json_object_get(json_array_get(cols, i), "jsonPath"));
        assert_non_null(jp);
        assert_int_equal(jp[0], '.');
        if (strcmp(jp, ".metadata.creationTimestamp") == 0)
            continue;
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", jp + 1);
        const json_t *node = schema;
        for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok;
             tok = strtok_r(NULL, ".", &save))
            node = json_object_get(json_object_get(node, "properties"), tok);
        if (node == NULL)
            fail_msg("%s: printer column path %s is not in the schema", file, jp);
    }
    json_decref(crd);
}

static void test_shape(void **state)
{
    (void)state;
    static const char *const runs[] = {"State", "Progress", "Best", "Age", NULL};
    static const char *const tasks[] = {"Kind", "State", "Exit", "Reason", "Age", NULL};
    check_shape("crds/experiments.yaml", "experiments.kdet.io", "Experiment", "exp", runs);
    check_shape("crds/trials.yaml", "trials.kdet.io", "Trial", "trial", runs);
    check_shape("crds/tasks.yaml", "tasks.kdet.io", "Task", "tsk", tasks);
}

/* Collect the paths of schema nodes carrying x-kubernetes-preserve-unknown-fields. */
static void preserved(const json_t *s, const char *path, json_t *out)
{
    if (!json_is_object(s))
        return;
    if (json_is_true(json_object_get(s, "x-kubernetes-preserve-unknown-fields")))
        json_array_append_new(out, json_string(path));
    const char *k;
    json_t *x;
    json_object_foreach(json_object_get(s, "properties"), k, x)
    {
        char p[512];
        snprintf(p, sizeof(p), "%s%s%s", path, path[0] ? "." : "", k);
        preserved(x, p, out);
    }
    char p[512];
    snprintf(p, sizeof(p), "%s[*]", path);
    preserved(json_object_get(s, "items"), p, out);
    snprintf(p, sizeof(p), "%s.*", path);
    preserved(json_object_get(s, "additionalProperties"), p, out);
}

static void test_free_form_only_where_allowed(void **state)
{
    (void)state;
    json_t *exp = load_crd("crds/experiments.yaml");
    json_t *got = json_array();
    preserved(schema_of(exp), "", got);
    /* The last five are Determined fields kdet accepts and does not apply (lib/config checks
     * their shape and warns), kept as written. */
    json_t *want =
        json_pack("[s,s,s,s,s,s,s,s,s,s,s,s,s]", "spec.entrypoint", "spec.hyperparameters.*",
                  "spec.searcher.max_length", "spec.environment.image",
                  "spec.environment.environment_variables", "spec.environment.pod_spec",
                  "spec.environment.registry_auth", "spec.data", "spec.log_policies[*]",
                  "spec.retention_policy", "spec.integrations", "spec.slurm", "spec.pbs");
    char *g = json_dumps(got, 0);
    if (!json_equal(got, want))
        fail_msg("experiments: free-form nodes %s", g);
    free(g);
    json_decref(got);
    json_decref(want);
    json_decref(exp);
    json_t *trial = load_crd("crds/trials.yaml");
    got = json_array();
    preserved(schema_of(trial), "", got);
    want = json_pack("[s]", "spec.hparams");
    assert_true(json_equal(got, want));
    json_decref(got);
    json_decref(want);
    json_decref(trial);
    /* A task's config is checked by lib/config (task.c), like an experiment's. */
    json_t *task = load_crd("crds/tasks.yaml");
    got = json_array();
    preserved(schema_of(task), "", got);
    want = json_pack("[s]", "spec.config");
    assert_true(json_equal(got, want));
    json_decref(got);
    json_decref(want);
    json_decref(task);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Validate every sample in dir; bad ones carry "# expect: FIELD: MESSAGE". */
static int run_samples(const char *dir, bool good, json_t *exp_schema, json_t *trial_schema,
                       json_t *task_schema)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char *names[256];
    size_t n = 0;
    int failures = 0;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL && n < 256)
        if (kd_str_has_suffix(de->d_name, ".yaml"))
            names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_str);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        char path[512], err[KD_ERRLEN], expect[2048] = "";
        struct kd_yaml_doc *doc = NULL;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        if (fgets(expect, sizeof(expect), f) && kd_str_has_prefix(expect, "# expect: ")) {
            memmove(expect, expect + 10, strlen(expect + 10) + 1);
            expect[strcspn(expect, "\n")] = '\0';
        } else {
            expect[0] = '\0';
        }
        fclose(f);
        if (kd_yaml_parse_file(path, &doc, err) != 0)
            fail_msg("%s", err);
        const json_t *cr = kd_yaml_root(doc);
        const char *kind = json_string_value(json_object_get(cr, "kind"));
        json_t *schema = strcmp(kind, "Trial") == 0  ? trial_schema
                         : strcmp(kind, "Task") == 0 ? task_schema
                                                     : exp_schema;
        json_t *causes = NULL;
        int rc = kd_openapi_validate(schema, cr, "", &causes);
        char *got = kd_openapi_causes_str(causes);
        char want[2100];
        snprintf(want, sizeof(want), "* %s", expect);
        if (good ? rc != 0 : (rc != KD_EINVALID || strcmp(got, want) != 0)) {
            print_error("%s: rc=%d\n got: %s\nwant: %s\n", path, rc, got, good ? "(valid)" : want);
            failures++;
        }
        free(got);
        json_decref(causes);
        kd_yaml_free(doc);
        free(names[i]);
    }
    return failures;
}

static void test_samples(void **state)
{
    (void)state;
    json_t *exp = load_crd("crds/experiments.yaml");
    json_t *trial = load_crd("crds/trials.yaml");
    json_t *task = load_crd("crds/tasks.yaml");
    json_t *es = (json_t *)schema_of(exp), *ts = (json_t *)schema_of(trial);
    json_t *ks = (json_t *)schema_of(task);
    int failures = run_samples("tests/crds/good", true, es, ts, ks);
    failures += run_samples("tests/crds/bad", false, es, ts, ks);
    json_decref(exp);
    json_decref(trial);
    json_decref(task);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_free_form_only_where_allowed),
        cmocka_unit_test(test_samples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
