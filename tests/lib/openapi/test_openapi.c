/* lib/openapi: the table in tests/data/openapi/cases.json (instance, exact
 * causes) against one schema, plus unknown fields and structural checks. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "openapi/openapi.h"

static void test_table(void **state)
{
    (void)state;
    json_error_t je;
    json_t *all = json_load_file("tests/data/openapi/cases.json", 0, &je);
    if (all == NULL)
        fail_msg("cases.json:%d: %s", je.line, je.text);
    const json_t *schema = json_object_get(all, "schema");
    const json_t *cases = json_object_get(all, "cases");
    assert_true(json_array_size(cases) >= 40);
    int failures = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *want = json_object_get(c, "causes");
        json_t *got = NULL;
        int rc = kd_openapi_validate(schema, json_object_get(c, "instance"), "", &got);
        int want_rc = json_array_size(want) ? KD_EINVALID : 0;
        if (rc != want_rc || (got == NULL ? json_array_size(want) != 0 : !json_equal(got, want))) {
            char *g = got ? json_dumps(got, JSON_INDENT(1)) : strdup("null");
            char *w = json_dumps(want, JSON_INDENT(1));
            print_error("case %zu (%s): rc=%d want %d\n got: %s\nwant: %s\n", i, name, rc, want_rc,
                        g, w);
            free(g);
            free(w);
            failures++;
        }
        json_decref(got);
    }
    json_decref(all);
    assert_int_equal(failures, 0);
}

/* Whether v matches pattern through a schema {type: string, pattern}; -1 on a bad pattern
 * (its message, the first cause's, into why). */
static int matches(const char *pattern, const char *v, char *why, size_t whylen)
{
    json_t *s = json_pack("{s:s,s:s}", "type", "string", "pattern", pattern);
    json_t *inst = json_string(v);
    json_t *causes = NULL;
    int rc = kd_openapi_validate(s, inst, "f", &causes);
    int out = rc == 0 ? 1 : 0;
    const char *msg = json_string_value(json_object_get(json_array_get(causes, 0), "message"));
    if (msg != NULL && strstr(msg, "pattern is invalid") != NULL)
        out = -1;
    if (why != NULL)
        snprintf(why, whylen, "%s", msg != NULL ? msg : "");
    json_decref(causes);
    json_decref(inst);
    json_decref(s);
    return out;
}

/* Patterns are compiled once and kept, up to a bound; past it, and for a pattern that does not
 * compile, every check gives the same answer as the first. */
static void test_pattern_cache(void **state)
{
    (void)state;
    char pat[64], yes[64], no[64], why1[1024], why2[1024];
    for (int i = 0; i < 700; i++) { /* more than the table holds */
        snprintf(pat, sizeof(pat), "^k%d-[a-z]+$", i);
        snprintf(yes, sizeof(yes), "k%d-abc", i);
        snprintf(no, sizeof(no), "k%d-ABC", i);
        for (int round = 0; round < 2; round++) {
            if (matches(pat, yes, NULL, 0) != 1 || matches(pat, no, NULL, 0) != 0)
                fail_msg("pattern %s, round %d", pat, round);
        }
    }
    assert_int_equal(matches("^(a$", "a", why1, sizeof(why1)), -1);
    assert_int_equal(matches("^(a$", "a", why2, sizeof(why2)), -1);
    assert_string_equal(why1, why2);
    assert_non_null(strstr(why1, "f in body should match '^(a$, but pattern is invalid: "));
}

static void *pattern_worker(void *arg)
{
    long bad = 0, id = (long)arg;
    for (int i = 0; i < 2000; i++) {
        bad += matches("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", (i + id) % 2 ? "trial-1" : "Trial-1",
                       NULL, 0) != (i + id) % 2;
        bad += matches("^k1-[a-z]+$", "k1-x", NULL, 0) != 1;
    }
    return (void *)bad;
}

/* One kept pattern matched from several threads at once. */
static void test_pattern_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pattern_worker, (void *)i), 0);
    long bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    assert_int_equal(bad, 0);
}

static void test_root_path_and_causes_str(void **state)
{
    (void)state;
    json_t *s = json_pack("{s:s, s:{s:{s:s}}}", "type", "object", "properties", "max_trials",
                          "type", "integer");
    json_t *v = json_pack("{s:s}", "max_trials", "ten");
    json_t *causes = NULL;
    assert_int_equal(kd_openapi_validate(s, v, "spec.searcher", &causes), KD_EINVALID);
    char *str = kd_openapi_causes_str(causes);
    assert_string_equal(str, "* spec.searcher.max_trials: Invalid value: \"string\": "
                             "spec.searcher.max_trials in body must be of type integer: "
                             "\"string\"");
    free(str);
    json_decref(causes);
    str = kd_openapi_causes_str(NULL);
    assert_string_equal(str, "");
    free(str);
    json_decref(s);
    json_decref(v);
}

static void test_bad_schema(void **state)
{
    (void)state;
    json_error_t je;
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"a\":5}}", 0, &je);
    json_t *v = json_pack("{s:i}", "a", 1);
    json_t *causes = (json_t *)1;
    assert_int_equal(kd_openapi_validate(s, v, "", &causes), KD_EINVAL);
    assert_null(causes);
    assert_int_equal(kd_openapi_validate(NULL, v, "", &causes), KD_EINVAL);
    assert_int_equal(kd_openapi_validate(s, NULL, "", &causes), KD_EINVAL);
    assert_int_equal(kd_openapi_validate(s, v, "", NULL), KD_EINVAL);
    json_decref(s);
    json_decref(v);
}

static void test_unknown_fields(void **state)
{
    (void)state;
    json_error_t je;
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"spec\":{\"type\":\"object\","
                           "\"properties\":{\"a\":{\"type\":\"integer\"},"
                           "\"free\":{\"type\":\"object\",\"x-kubernetes-preserve-unknown-fields\":"
                           "true},\"list\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
                           "\"properties\":{\"x\":{\"type\":\"string\"}}}},"
                           "\"map\":{\"type\":\"object\",\"additionalProperties\":{\"type\":"
                           "\"object\",\"properties\":{\"k\":{\"type\":\"string\"}}}}}}}}",
                           0, &je);
    assert_non_null(s);
    json_t *v = json_loads("{\"spec\":{\"a\":1,\"b\":2,\"free\":{\"z\":1},\"list\":[{\"x\":\"1\"},"
                           "{\"y\":2}],\"map\":{\"m\":{\"k\":\"v\",\"q\":1}}},\"extra\":true}",
                           0, &je);
    assert_non_null(v);
    json_t *paths = NULL;
    assert_int_equal(kd_openapi_unknown_fields(s, v, "", &paths), 0);
    json_t *want = json_pack("[s,s,s,s]", "spec.b", "spec.list[1].y", "spec.map.m.q", "extra");
    char *g = json_dumps(paths, 0);
    if (!json_equal(paths, want))
        fail_msg("unknown fields: %s", g);
    free(g);
    json_decref(want);
    json_decref(paths);
    json_decref(s);
    json_decref(v);
}

static void test_structural(void **state)
{
    (void)state;
    char err[KD_ERRLEN];
    json_error_t je;
    json_t *fixed = json_loads(
        "{\"type\":\"object\",\"properties\":{\"spec\":{\"type\":\"object\",\"properties\":{"
        "\"port\":{\"x-kubernetes-int-or-string\":true},\"l\":{\"type\":\"array\",\"items\":"
        "{\"type\":\"string\"}}}}}}",
        0, &je);
    assert_int_equal(kd_openapi_check_structural(fixed, NULL, err), 0);
    json_t *notype =
        json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"properties\":{}}}}", 0, &je);
    assert_int_equal(kd_openapi_check_structural(notype, NULL, err), KD_EINVALID);
    assert_string_equal(err, "openAPIV3Schema.properties[a].type: Required value: must not be "
                             "empty for specified object fields");
    json_t *noitems =
        json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\"}}}", 0, &je);
    assert_int_equal(kd_openapi_check_structural(noitems, NULL, err), KD_EINVALID);
    assert_non_null(strstr(err, "properties[a].items: Required value"));
    json_decref(fixed);
    json_decref(notype);
    json_decref(noitems);
}

/* tests/data/openapi/structural.json: schemas and the exact error (sorted
 * causes, as the API server lists them), "" for a structural schema. */
static void test_structural_cases(void **state)
{
    (void)state;
    json_error_t je;
    json_t *all = json_load_file("tests/data/openapi/structural.json", 0, &je);
    if (all == NULL)
        fail_msg("structural.json:%d: %s", je.line, je.text);
    const json_t *cases = json_object_get(all, "cases");
    assert_true(json_array_size(cases) >= 15);
    int failures = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *want = json_string_value(json_object_get(c, "error"));
        char err[KD_ERRLEN] = "";
        int rc = kd_openapi_check_structural(json_object_get(c, "schema"), NULL, err);
        if (rc != (want[0] ? KD_EINVALID : 0) || strcmp(err, want) != 0) {
            print_error("case %zu (%s): rc=%d\n got: %s\nwant: %s\n", i,
                        json_string_value(json_object_get(c, "name")), rc, err, want);
            failures++;
        }
    }
    /* the same violations as causes: one per line, split at the reason */
    json_t *causes = NULL;
    const json_t *third = json_object_get(json_array_get(cases, 6), "schema");
    assert_int_equal(kd_openapi_structural_causes(third, "s", &causes), KD_EINVALID);
    assert_int_equal(json_array_size(causes), 3);
    json_t *want = json_pack("{s:s,s:s,s:s}", "reason", "FieldValueForbidden", "field",
                             "s.properties[spec].properties[port].anyOf[2].type", "message",
                             "Forbidden: must be empty to be structural");
    assert_true(json_equal(json_array_get(causes, 2), want));
    json_decref(want);
    json_decref(causes);
    json_t *sentinel = json_array();
    causes = sentinel;
    const json_t *ok = json_object_get(json_array_get(cases, 0), "schema");
    assert_int_equal(kd_openapi_structural_causes(ok, NULL, &causes), 0);
    assert_null(causes);
    json_decref(sentinel);
    json_decref(all);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),         cmocka_unit_test(test_root_path_and_causes_str),
        cmocka_unit_test(test_bad_schema),    cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_structural),    cmocka_unit_test(test_structural_cases),
        cmocka_unit_test(test_pattern_cache), cmocka_unit_test(test_pattern_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
