/*
 * Validation of the built-in kinds (local/validate.c): one row per object,
 * with the field and message kube-apiserver would name, or none for a valid
 * object; and the kubelet's log paths, which never leave the pod's
 * directory whatever the names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>

#include <cmocka.h>

#include "../../local/kubelet.h"
#include "../../local/logstream.h"
#include "../../local/validate.h"

struct row {
    const char *kind;
    const char *json;
    const char *field;   /* the first cause's field; NULL: valid */
    const char *message; /* a substring of its message */
};

#define POD(CTR) "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[" CTR "]}}"
#define CTR(EXTRA) "{\"name\":\"c\",\"image\":\"x\",\"command\":[\"true\"]" EXTRA "}"
#define LIMITS(Q) CTR(",\"resources\":{\"limits\":" Q "}")

static const struct row rows[] = {
    /* the objects */
    {"ConfigMap", "{\"metadata\":{\"name\":\"a\"},\"data\":{\"a\":1}}", "data.a",
     "Invalid value: \"integer\": data.a in body must be of type string: \"integer\""},
    {"Pod", POD("{\"name\":\"c\",\"image\":\"x\",\"command\":5}"), "spec.containers[0].command",
     "in body must be of type array: \"integer\""},
    {"Pod",
     "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"volumes\":\"x\",\"containers\":[" CTR("") "]}}",
     "spec.volumes", "must be of type array: \"string\""},
    {"Pod", POD(CTR(",\"resources\":{\"requests\":{\"cpu\":\"abc\"}}")),
     "spec.containers[0].resources.requests[cpu]",
     "Invalid value: \"abc\": quantities must match the regular expression"},
    {"Pod", POD(LIMITS("{\"nvidia.com/gpu\":\"-3\"}")),
     "spec.containers[0].resources.limits[nvidia.com/gpu]",
     "Invalid value: \"-3\": must be greater than or equal to 0"},
    {"Pod", POD(LIMITS("{\"nvidia.com/gpu\":\"99999999999999999999\"}")),
     "spec.containers[0].resources.limits[nvidia.com/gpu]",
     "must be less than or equal to 9000000000000000"},
    {"Pod", POD("{\"name\":\"../../../../tmp/x\",\"image\":\"x\"}"), "spec.containers[0].name",
     "Invalid value: \"../../../../tmp/x\": a lowercase RFC 1123 label"},
    /* more quantities */
    {"Pod", POD(LIMITS("{\"nvidia.com/gpu\":-1}")),
     "spec.containers[0].resources.limits[nvidia.com/gpu]", "Invalid value: -1: must be greater"},
    {"Pod", POD(LIMITS("{\"nvidia.com/gpu\":\"500m\"}")),
     "spec.containers[0].resources.limits[nvidia.com/gpu]", "must be an integer"},
    {"Pod", POD(LIMITS("{\"cpu\":true}")), "spec.containers[0].resources.limits[cpu]",
     "Invalid value: true: quantities must match"},
    {"Pod", POD(CTR(",\"resources\":{\"limits\":{\"cpu\":\"1\"},\"requests\":{\"cpu\":\"2\"}}")),
     "spec.containers[0].resources.requests[cpu]", "must be less than or equal to cpu limit"},
    {"Pod", POD(CTR(",\"resources\":{\"requests\":{\"nvidia.com/gpu\":\"1\"}}")),
     "spec.containers[0].resources.limits", "Limit must be set for non overcommitable resources"},
    {"Pod",
     POD(CTR(",\"resources\":{\"limits\":{\"nvidia.com/gpu\":2},\"requests\":{\"nvidia.com/"
             "gpu\":\"1\"}}")),
     "spec.containers[0].resources.requests[nvidia.com/gpu]",
     "must be equal to nvidia.com/gpu limit"},
    /* names */
    {"Pod", POD(CTR("") "," CTR("")), "spec.containers[1].name", "Duplicate value: \"c\""},
    {"Pod", POD("{\"image\":\"x\"}"), "spec.containers[0].name", "Required value"},
    {"Pod",
     "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"volumes\":[{\"name\":\"A/"
     "b\"}],\"containers\":[" CTR("") "]}}",
     "spec.volumes[0].name", "Invalid value: \"A/b\""},
    {"Pod", POD(CTR(",\"securityContext\":{\"runAsUser\":\"root\"}")),
     "spec.containers[0].securityContext.runAsUser", "must be of type integer"},
    {"Pod", POD(CTR(",\"securityContext\":{\"runAsUser\":-1}")),
     "spec.containers[0].securityContext.runAsUser",
     "Invalid value: -1: must be between 0 and 2147483647, inclusive"},
    {"Pod",
     "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"securityContext\":{\"runAsGroup\":"
     "4294967296},\"containers\":[" CTR("") "]}}",
     "spec.securityContext.runAsGroup", "must be between 0 and 2147483647"},
    /* keys and sizes */
    {"ConfigMap", "{\"metadata\":{\"name\":\"a\"},\"data\":{\"a b\":\"1\"}}", "data[a b]",
     "a valid config key must consist of alphanumeric characters"},
    {"Secret", "{\"metadata\":{\"name\":\"a\"},\"stringData\":{\"k\":7}}", "stringData.k",
     "must be of type string"},
    {"Service", "{\"metadata\":{\"name\":\"a\"},\"spec\":{\"ports\":[{\"port\":\"http\"}]}}",
     "spec.ports[0].port", "must be of type integer"},
    {"Event", "{\"metadata\":{\"name\":\"a\"},\"count\":\"x\"}", "count",
     "must be of type integer"},
    {"Node", "{\"metadata\":{\"name\":\"n\"},\"spec\":{\"unschedulable\":\"yes\"}}",
     "spec.unschedulable", "must be of type boolean"},
    {"Namespace", "{\"metadata\":{\"name\":\"n\",\"labels\":{\"a\":1}}}", "metadata.labels.a",
     "must be of type string"},
    {"Lease", "{\"metadata\":{\"name\":\"l\"},\"spec\":{\"leaseDurationSeconds\":\"15\"}}",
     "spec.leaseDurationSeconds", "must be of type integer"},
    {"PriorityClass", "{\"metadata\":{\"name\":\"p\"},\"value\":\"high\"}", "value",
     "must be of type integer"},
    /* valid objects, nulls included (Go clients send them) */
    {"ConfigMap",
     "{\"metadata\":{\"name\":\"a\",\"creationTimestamp\":null},\"data\":{\"a\":\"1\"}}", NULL,
     NULL},
    {"Pod",
     POD(CTR(",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1,\"cpu\":\"500m\",\"memory\":"
             "\"1Gi\"},\"requests\":{\"cpu\":0.25,\"nvidia.com/gpu\":\"1\"}},\"securityContext\":"
             "{\"runAsUser\":65534,\"runAsNonRoot\":true}")),
     NULL, NULL},
    {"Event",
     "{\"metadata\":{\"name\":\"e\"},\"eventTime\":null,\"firstTimestamp\":\"2026-01-01T00:00:"
     "00Z\",\"count\":1}",
     NULL, NULL},
    {"Service",
     "{\"metadata\":{\"name\":\"s\"},\"spec\":{\"ports\":[{\"port\":80,\"targetPort\":\"http\"}]}}",
     NULL, NULL},
};

static void test_rows(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        struct kd_restype rt = {.kind = (char *)r->kind, .builtin = true};
        json_error_t je;
        json_t *obj = json_loads(r->json, 0, &je);
        if (obj == NULL)
            fail_msg("row %zu: bad JSON: %s", i, je.text);
        json_t *causes = NULL;
        int rc = kd_local_validate(&rt, obj, &causes);
        if (r->field == NULL) {
            if (rc != 0) {
                char *d = json_dumps(causes, 0);
                fail_msg("row %zu (%s): want valid, got %s", i, r->kind, d);
            }
            assert_null(causes);
        } else {
            if (rc != KD_EINVALID)
                fail_msg("row %zu (%s): want invalid %s, got %d", i, r->kind, r->field, rc);
            json_t *c = json_array_get(causes, 0);
            const char *field = json_string_value(json_object_get(c, "field"));
            const char *msg = json_string_value(json_object_get(c, "message"));
            if (field == NULL || strcmp(field, r->field) != 0 || msg == NULL ||
                strstr(msg, r->message) == NULL)
                fail_msg("row %zu (%s): want %s: ...%s..., got %s: %s", i, r->kind, r->field,
                         r->message, field ? field : "(none)", msg ? msg : "(none)");
        }
        json_decref(causes);
        json_decref(obj);
    }
}

/* The sizes kube-apiserver enforces: 1 MiB of ConfigMap/Secret data, 256 KiB of annotations. */
static void test_sizes(void **state)
{
    (void)state;
    size_t big = 3 * 1000 * 1000;
    char *s = malloc(big + 1);
    memset(s, 'x', big);
    s[big] = '\0';
    struct kd_restype cm = {.kind = "ConfigMap", .builtin = true};
    struct kd_restype secret = {.kind = "Secret", .builtin = true};
    struct kd_restype cr = {.kind = "Widget", .builtin = false};
    json_t *causes = NULL;

    json_t *o = json_pack("{s:{s:s},s:{s:s}}", "metadata", "name", "a", "data", "a", s);
    assert_int_equal(kd_local_validate(&cm, o, &causes), KD_EINVALID);
    assert_string_equal(json_string_value(json_object_get(json_array_get(causes, 0), "message")),
                        "Too long: must have at most 1048576 bytes");
    json_decref(causes);
    assert_int_equal(kd_local_validate(&secret, o, &causes), KD_EINVALID);
    assert_string_equal(json_string_value(json_object_get(json_array_get(causes, 0), "field")),
                        "data");
    json_decref(causes);
    json_decref(o);

    /* exactly 1 MiB of key and value is allowed */
    s[KD_LOCAL_MAX_DATA_BYTES - 1] = '\0';
    o = json_pack("{s:{s:s},s:{s:s}}", "metadata", "name", "a", "data", "a", s);
    assert_int_equal(kd_local_validate(&cm, o, &causes), 0);
    json_decref(o);

    s[KD_LOCAL_MAX_ANNOTATION_BYTES] = '\0';
    o = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name", "a", "annotations", "k", s);
    assert_int_equal(kd_local_validate(&cm, o, &causes), KD_EINVALID);
    assert_string_equal(json_string_value(json_object_get(json_array_get(causes, 0), "field")),
                        "metadata.annotations");
    json_decref(causes);
    /* custom resources too */
    assert_int_equal(kd_local_validate(&cr, o, &causes), KD_EINVALID);
    json_decref(causes);
    json_decref(o);
    free(s);
}

/* A termination message is valid UTF-8 whatever the log holds. */
static void test_termination_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } utf8_rows[] = {
        {"plain\n", 6, "plain\n"},
        {"\xa9 cut start", 11, " cut start"},                  /* the tail of a cut character */
        {"\x80\x80\x80\x80x", 5, "\xef\xbf\xbdx"},             /* at most 3 skipped, then U+FFFD */
        {"caf\xc3\xa9", 5, "caf\xc3\xa9"},                     /* whole characters kept */
        {"bad \xff byte", 10, "bad \xef\xbf\xbd byte"},        /* invalid byte */
        {"nul\0x", 5, "nul\xef\xbf\xbdx"},                     /* NUL */
        {"over\xc0\xafx", 7, "over\xef\xbf\xbd\xef\xbf\xbdx"}, /* overlong '/' */
        {"sur\xed\xa0\x80", 6, "sur\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
        {"end \xe2\x82", 6, "end \xef\xbf\xbd\xef\xbf\xbd"},               /* cut at the end */
    };
    for (size_t i = 0; i < sizeof(utf8_rows) / sizeof(utf8_rows[0]); i++) {
        char *got = kd_logstream_utf8(utf8_rows[i].in, utf8_rows[i].n);
        if (strcmp(got, utf8_rows[i].want) != 0)
            fail_msg("row %zu: got \"%s\"", i, got);
        free(got);
    }
}

/* The last 80 lines, of which the last 2048 bytes; nothing for an empty or absent log. */
static void test_termination_tail(void **state)
{
    (void)state;
    char path[] = "/tmp/kd-termmsg-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 1; i <= 100; i++)
        fprintf(f, "l%d\n", i);
    fclose(f);
    char *m = kd_logstream_last(path, KD_LOGSTREAM_MSG_LINES, KD_LOGSTREAM_MSG_BYTES);
    assert_non_null(m);
    assert_true(strncmp(m, "l21\nl22\n", 8) == 0);
    assert_int_equal(strlen(m), strlen("l100\n") + 9 * strlen("l99\n") + 70 * strlen("l21\n"));
    free(m);
    m = kd_logstream_last(path, 80, 10);
    assert_string_equal(m, "\nl99\nl100\n");
    free(m);
    f = fopen(path, "w");
    fclose(f);
    assert_null(kd_logstream_last(path, 80, 2048));
    unlink(path);
    assert_null(kd_logstream_last(path, 80, 2048));
}

static void test_log_paths(void **state)
{
    (void)state;
    char *p = kd_kubelet_log_path("/st", "0b6c-uid", "main", 2);
    assert_string_equal(p, "/st/pods/0b6c-uid/main/2.log");
    free(p);
    static const char *const bad_names[] = {
        "../../../../tmp/x", "..", ".", "", "a/b", "Main", "-a", NULL};
    for (const char *const *n = bad_names; *n != NULL; n++)
        assert_null(kd_kubelet_log_path("/st", "uid", *n, 0));
    assert_null(kd_kubelet_log_path("/st", "../uid", "main", 0));
    assert_null(kd_kubelet_log_path("/st", "..", "main", 0));
    assert_null(kd_kubelet_log_path("/st", NULL, "main", 0));
}

/* What a recycled pod folder keeps at its top (kd_kubelet_spare_entry), as a table. */
static void test_spare_entries(void **state)
{
    (void)state;
    static const char *const ctrs[] = {"main", "init-data"};
    static const struct {
        const char *name;
        bool dir, reg;
        size_t n; /* how many of ctrs */
        enum kd_spare_entry want;
    } cases[] = {
        {"pids", false, true, 2, KD_SPARE_TRUNCATE},
        {"pids", false, false, 2, KD_SPARE_REMOVE}, /* a link or a fifo named pids */
        {"pids", true, false, 2, KD_SPARE_REMOVE},
        {"main", true, false, 2, KD_SPARE_EMPTY},
        {"init-data", true, false, 2, KD_SPARE_EMPTY},
        {"init-data", true, false, 1, KD_SPARE_REMOVE}, /* not a container of this pod */
        {"main", true, false, 0, KD_SPARE_REMOVE},
        {"main", false, true, 2, KD_SPARE_REMOVE},  /* a file in the container folder's place */
        {"main", false, false, 2, KD_SPARE_REMOVE}, /* a link to a folder */
        {"mai", true, false, 2, KD_SPARE_REMOVE},
        {"main2", true, false, 2, KD_SPARE_REMOVE},
        {"volumes", true, false, 2, KD_SPARE_REMOVE},
        {"checkpoint.pt", false, true, 2, KD_SPARE_REMOVE}, /* what a container wrote */
        {"Pids", false, true, 2, KD_SPARE_REMOVE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum kd_spare_entry got =
            kd_kubelet_spare_entry(cases[i].name, cases[i].dir, cases[i].reg, ctrs, cases[i].n);
        if (got != cases[i].want)
            fail_msg("row %zu (%s dir=%d reg=%d n=%zu): %d, want %d", i, cases[i].name,
                     cases[i].dir, cases[i].reg, cases[i].n, got, cases[i].want);
    }
    static const char *const holey[] = {NULL, "main"};
    assert_int_equal(kd_kubelet_spare_entry("main", true, false, holey, 2), KD_SPARE_EMPTY);
}

/* What a kept container folder keeps (kd_kubelet_spare_log): its first run's log only. */
static void test_spare_logs(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        bool reg, want;
    } cases[] = {
        {"0.log", true, true},          {"0.log", false, false}, /* a folder, link or fifo in the
                                                                    log's place */
        {"1.log", true, false}, /* a restart's log: the next pod starts at run 0 */
        {"00.log", true, false},        {"0.log.1", true, false}, {"0.lo", true, false},
        {"checkpoint.pt", true, false}, {"", true, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (kd_kubelet_spare_log(cases[i].name, cases[i].reg) != cases[i].want)
            fail_msg("row %zu (%s reg=%d): want %d", i, cases[i].name, cases[i].reg, cases[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_log_paths),
        cmocka_unit_test(test_spare_entries),
        cmocka_unit_test(test_spare_logs),
        cmocka_unit_test(test_termination_utf8),
        cmocka_unit_test(test_termination_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
