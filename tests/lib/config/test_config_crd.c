/*
 * Every config that lib/config accepts (the good test configs and the
 * examples), with and without defaults filled, must also be a valid
 * Experiment spec for the CRD in crds/experiments.yaml, with nothing that
 * the API server would prune: the validator and the CRD schema agree.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"
#include "core/str.h"
#include "openapi/openapi.h"
#include "yaml/yaml.h"

static json_t *experiment_schema(void)
{
    struct kd_yaml_doc *doc = NULL;
    char err[KD_ERRLEN];
    if (kd_yaml_parse_file("crds/experiments.yaml", &doc, err))
        fail_msg("%s", err);
    json_t *v =
        json_array_get(json_object_get(json_object_get(kd_yaml_root(doc), "spec"), "versions"), 0);
    json_t *schema = json_incref(json_object_get(json_object_get(v, "schema"), "openAPIV3Schema"));
    kd_yaml_free(doc);
    assert_non_null(schema);
    return schema;
}

/* 0 when cfg as an Experiment's spec is valid and nothing in it would be pruned. */
static int check_as_cr(const json_t *schema, json_t *cfg, const char *what)
{
    json_t *cr = json_pack("{s:s,s:s,s:{s:s},s:O}", "apiVersion", "kdet.io/v1alpha1", "kind",
                           "Experiment", "metadata", "name", "exp", "spec", cfg);
    json_t *causes = NULL, *unknown = NULL;
    int bad = 0;
    if (kd_openapi_validate(schema, cr, "", &causes) != 0) {
        char *s = kd_openapi_causes_str(causes);
        printf("FAIL %s: the CRD rejects it:\n%s\n", what, s);
        free(s);
        bad = 1;
    }
    if (kd_openapi_unknown_fields(schema, cr, "", &unknown) == 0 && json_array_size(unknown)) {
        char *s = json_dumps(unknown, 0);
        printf("FAIL %s: the API server would prune %s\n", what, s);
        free(s);
        bad = 1;
    }
    json_decref(causes);
    json_decref(unknown);
    json_decref(cr);
    return bad;
}

static int check_dir(const json_t *schema, const char *dir, int *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int failures = 0;
    if (!d)
        return 0;
    while ((e = readdir(d))) {
        char path[1024], err[KD_ERRLEN];
        json_t *cfg = NULL;
        if (!kd_str_has_suffix(e->d_name, ".yaml"))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        char head[64] = "";
        FILE *f = fopen(path, "r");
        if (f && !fgets(head, sizeof(head), f))
            head[0] = '\0';
        if (f)
            fclose(f);
        if (kd_str_has_prefix(head, "# expect: reject"))
            continue; /* a form lib/config refuses (tests/data/config/determined-0.38) */
        if (kd_config_load(path, NULL, &cfg, err)) {
            printf("FAIL %s: %s\n", path, err);
            failures++;
            continue;
        }
        failures += check_as_cr(schema, cfg, path);
        if (kd_config_apply_defaults(cfg, err) == 0)
            failures += check_as_cr(schema, cfg, path);
        else
            failures++;
        json_decref(cfg);
        (*count)++;
    }
    closedir(d);
    return failures;
}

static void test_accepted_configs_fit_the_crd(void **state)
{
    (void)state;
    json_t *schema = experiment_schema();
    int count = 0, failures = 0;
    failures += check_dir(schema, "tests/data/config/good", &count);
    failures += check_dir(schema, "tests/data/config/determined-0.38", &count);
    DIR *ex = opendir("examples");
    struct dirent *e;
    while (ex && (e = readdir(ex))) {
        char dir[512];
        if (e->d_name[0] == '.')
            continue;
        snprintf(dir, sizeof(dir), "examples/%s", e->d_name);
        failures += check_dir(schema, dir, &count);
    }
    if (ex)
        closedir(ex);
    printf("%d configs checked against the CRD\n", count);
    /* The oracle itself notices a field the CRD does not declare and a wrong type. */
    json_t *odd = json_pack("{s:s,s:{s:s,s:i},s:i}", "entrypoint", "x", "searcher", "name",
                            "single", "max_length", 1, "not_in_crd", 1);
    assert_int_equal(check_as_cr(schema, odd, "a config with an undeclared field"), 1);
    json_object_del(odd, "not_in_crd");
    json_object_set_new(odd, "max_restarts", json_string("five"));
    assert_int_equal(check_as_cr(schema, odd, "a config with a wrong type"), 1);
    json_decref(odd);
    assert_true(count >= 9);
    json_decref(schema);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepted_configs_fit_the_crd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
