/* The scheduler's pure decisions, as tables: how a pod counts (bound, pending, neither) and
 * which pods share a class (the same verdict from the same nodes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../local/scheduler.h"

static json_t *pod(const char *js)
{
    json_error_t e;
    json_t *p = json_loads(js, 0, &e);
    if (p == NULL)
        fail_msg("bad test JSON: %s", e.text);
    return p;
}

static void test_track(void **state)
{
    (void)state;
    static const struct {
        const char *pod;
        enum kd_sched_track want;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{}}", KD_SCHED_PENDING},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"nodeName\":\"\"}}", KD_SCHED_PENDING},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"schedulerName\":\"default-scheduler\"}}",
         KD_SCHED_PENDING},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{},\"status\":{\"phase\":\"Pending\"}}",
         KD_SCHED_PENDING},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"schedulerName\":\"other\"}}", KD_SCHED_NONE},
        {"{\"metadata\":{\"name\":\"a\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
         "\"spec\":{}}",
         KD_SCHED_NONE},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{},\"status\":{\"phase\":\"Failed\"}}",
         KD_SCHED_NONE},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"nodeName\":\"n1\"}}", KD_SCHED_BOUND},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"nodeName\":\"n1\"},"
         "\"status\":{\"phase\":\"Running\"}}",
         KD_SCHED_BOUND},
        /* Bound and being deleted still holds its resources until it finishes. */
        {"{\"metadata\":{\"name\":\"a\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
         "\"spec\":{\"nodeName\":\"n1\"}}",
         KD_SCHED_BOUND},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"nodeName\":\"n1\"},"
         "\"status\":{\"phase\":\"Succeeded\"}}",
         KD_SCHED_NONE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *p = pod(cases[i].pod);
        if (kd_sched_track(p) != cases[i].want)
            fail_msg("case %zu: got %d, want %d", i, (int)kd_sched_track(p), (int)cases[i].want);
        json_decref(p);
    }
}

#define CTR(req) "\"containers\":[{\"name\":\"m\",\"resources\":{\"requests\":" req "}}]"

static void test_class(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        bool same;
    } cases[] = {
        /* Names, labels and commands do not matter to the filters. */
        {"{\"metadata\":{\"name\":\"a\",\"labels\":{\"x\":\"1\"}},\"spec\":{" CTR(
             "{\"cpu\":\"10m\"}") "}}",
         "{\"metadata\":{\"name\":\"b\"},\"spec\":{" CTR("{\"cpu\":\"10m\"}") "}}", true},
        /* The same request written two ways. */
        {"{\"spec\":{" CTR("{\"cpu\":\"1\"}") "}}", "{\"spec\":{" CTR("{\"cpu\":\"1000m\"}") "}}",
         true},
        {"{\"spec\":{" CTR("{\"cpu\":\"10m\"}") "}}", "{\"spec\":{" CTR("{\"cpu\":\"20m\"}") "}}",
         false},
        {"{\"spec\":{" CTR("{\"cpu\":\"10m\"}") "}}",
         "{\"spec\":{" CTR("{\"cpu\":\"10m\",\"nvidia.com/gpu\":1}") "}}", false},
        {"{\"spec\":{" CTR("{}") "}}", "{\"spec\":{\"priority\":5," CTR("{}") "}}", false},
        {"{\"spec\":{" CTR("{}") "}}", "{\"spec\":{\"nodeSelector\":{\"a\":\"b\"}," CTR("{}") "}}",
         false},
        {"{\"spec\":{\"nodeSelector\":{\"a\":\"b\",\"c\":\"d\"}," CTR("{}") "}}",
         "{\"spec\":{\"nodeSelector\":{\"c\":\"d\",\"a\":\"b\"}," CTR("{}") "}}", true},
        {"{\"spec\":{" CTR("{}") "}}",
         "{\"spec\":{\"tolerations\":[{\"operator\":\"Exists\"}]," CTR("{}") "}}", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *a = pod(cases[i].a), *b = pod(cases[i].b);
        char *ka = kd_sched_class_key(a), *kb = kd_sched_class_key(b);
        if ((strcmp(ka, kb) == 0) != cases[i].same)
            fail_msg("case %zu: keys %s and %s, want %s", i, ka, kb,
                     cases[i].same ? "equal" : "different");
        free(ka);
        free(kb);
        json_decref(a);
        json_decref(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_track),
        cmocka_unit_test(test_class),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
