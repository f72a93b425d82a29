/* Quantities, kubectl-style ages, printer-column JSONPath and the Table rows for pods and CRs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../local/quantity.h"
#include "../../local/registry.h"
#include "../../local/table.h"

static void test_quantity(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t milli;
    } ok[] = {{"500m", 500},         {"2", 2000},      {"1.5", 1500},
              {"0.1", 100},          {"1Ki", 1024000}, {"128Mi", 134217728000},
              {"1G", 1000000000000}, {"1e3", 1000000}, {"+3", 3000},
              {"100000", 100000000}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int64_t v = -1;
        assert_int_equal(kd_quantity_parse_milli(ok[i].s, &v, NULL), 0);
        assert_int_equal(v, ok[i].milli);
    }
    char err[KD_ERRLEN];
    int64_t v;
    assert_int_equal(kd_quantity_parse_milli("12Qi", &v, err), KD_EINVAL);
    assert_non_null(strstr(err, "unknown suffix \"Qi\""));
    assert_int_equal(kd_quantity_parse_milli("-1", &v, err), KD_EINVAL);
    assert_int_equal(kd_quantity_parse_milli("", &v, err), KD_EINVAL);
}

static void test_age(void **state)
{
    (void)state;
    char b[32];
    assert_string_equal(kd_table_age(0, b, sizeof(b)), "0s");
    assert_string_equal(kd_table_age(119, b, sizeof(b)), "119s");
    assert_string_equal(kd_table_age(330, b, sizeof(b)), "5m30s");
    assert_string_equal(kd_table_age(600, b, sizeof(b)), "10m");
    assert_string_equal(kd_table_age(3 * 3600 + 120, b, sizeof(b)), "3h2m");
    assert_string_equal(kd_table_age(30 * 3600, b, sizeof(b)), "30h");
    assert_string_equal(kd_table_age(3 * 86400 + 3600, b, sizeof(b)), "3d1h");
    assert_string_equal(kd_table_age(40 * 86400, b, sizeof(b)), "40d");
    assert_string_equal(kd_table_age(-5, b, sizeof(b)), "<invalid>");
}

static void test_jsonpath(void **state)
{
    (void)state;
    json_t *o = json_loads("{\"spec\":{\"size\":3},\"status\":{\"conditions\":[{\"type\":\"A\","
                           "\"status\":\"False\"},{\"type\":\"Ready\",\"status\":\"True\"}]}}",
                           0, NULL);
    assert_int_equal(json_integer_value(kd_table_jsonpath(o, ".spec.size")), 3);
    assert_string_equal(json_string_value(kd_table_jsonpath(o, ".status.conditions[1].type")),
                        "Ready");
    assert_string_equal(
        json_string_value(kd_table_jsonpath(o, ".status.conditions[?(@.type==\"Ready\")].status")),
        "True");
    assert_null(kd_table_jsonpath(o, ".spec.nope"));
    assert_null(kd_table_jsonpath(o, ".status.conditions[9]"));
    json_decref(o);
}

static void test_pod_row(void **state)
{
    (void)state;
    struct kd_registry *reg = kd_registry_new(NULL);
    struct kd_restype *rt = kd_registry_find(reg, "", "v1", "pods");
    assert_non_null(rt);
    json_t *pod = json_loads(
        "{\"metadata\":{\"name\":\"p\",\"creationTimestamp\":\"2026-01-01T00:00:00Z\"},"
        "\"spec\":{\"nodeName\":\"n\",\"containers\":[{\"name\":\"a\"},{\"name\":\"b\"}]},"
        "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\",\"containerStatuses\":["
        "{\"name\":\"a\",\"ready\":true,\"restartCount\":0,\"state\":{\"running\":{}}},"
        "{\"name\":\"b\",\"ready\":false,\"restartCount\":2,\"state\":{\"waiting\":{\"reason\":"
        "\"CrashLoopBackOff\"}},\"lastState\":{\"terminated\":{\"finishedAt\":"
        "\"2026-01-01T00:00:50Z\"}}}]}}",
        0, NULL);
    assert_non_null(pod);
    int64_t now = 1767225600000LL + 60000; /* 2026-01-01T00:01:00Z */
    json_t *t = kd_table_build(rt, &pod, 1, NULL, "7", now);
    json_t *cells = json_object_get(json_array_get(json_object_get(t, "rows"), 0), "cells");
    char *got = json_dumps(cells, JSON_COMPACT);
    assert_string_equal(got, "[\"p\",\"1/2\",\"CrashLoopBackOff\",\"2 (10s ago)\",\"60s\","
                             "\"127.0.0.1\",\"n\",\"<none>\",\"<none>\"]");
    free(got);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(t, "metadata"), "resourceVersion")), "7");
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(t, "rows"), 0), "object"), "kind")),
        "PartialObjectMetadata");
    json_decref(t);
    json_decref(pod);
    kd_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantity),
        cmocka_unit_test(test_age),
        cmocka_unit_test(test_jsonpath),
        cmocka_unit_test(test_pod_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
