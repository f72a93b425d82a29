/*
 * The capacity rule, row by row: a node's allocatable, the pods kdet does
 * not schedule that are bound to it (their requests counted as
 * kube-scheduler counts them: containers, init containers, sidecars,
 * overhead), and the CPU slots and GPUs left for trials
 * (kd_cap_pod_request, then kd_sched_node_slots).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "capacity.h"
#include "core/str.h"
#include "scheduler.h"

/* Pods are written with ' for " to keep the table readable. */
#define RUNNING "'status':{'phase':'Running'}"
#define ON_N(spec) "{'spec':{'nodeName':'n'," spec "}," RUNNING "}"
#define CPU(q) "{'resources':{'requests':{'cpu':'" q "'}}}"
#define GPU_LIMIT(n) "{'resources':{'limits':{'nvidia.com/gpu':'" n "'}}}"

struct row {
    const char *what;
    const char *cpu;      /* the node's allocatable cpu */
    int gpus;             /* and nvidia.com/gpu */
    const char *per_slot; /* --cpu-per-slot */
    const char *pods;     /* a JSON array of pods */
    int64_t other_cpu;    /* expected: millicores other pods request of node n */
    int other_gpus;       /* and GPUs */
    int cpu_whole, cpu_free, gpu_free;
};

static const struct row rows[] = {
    {"no other pods", "2", 0, "1", "[]", 0, 0, 2, 2, 0},
    {"other CPU leaves a fraction of a slot", "2", 0, "1",
     "[" ON_N("'containers':[" CPU("1500m") "]") "]", 1500, 0, 2, 0, 0},
    {"other CPU leaves whole slots and a fraction", "4", 0, "1",
     "[" ON_N("'containers':[" CPU("500m") "]") "]", 500, 0, 4, 3, 0},
    {"slots of 2 CPUs", "5", 0, "2", "[" ON_N("'containers':[" CPU("1") "]") "]", 1000, 0, 2, 2, 0},
    {"other pods exceed allocatable", "2", 2, "1",
     "[" ON_N("'containers':[" CPU("1500m") "," GPU_LIMIT("2") "]") "," ON_N(
         "'containers':[" CPU("1") "," GPU_LIMIT("1") "]") "]",
     2500, 3, 2, 0, 0},
    {"GPU pods: limits only, requests, two containers", "8", 4, "1",
     "[" ON_N("'containers':[" GPU_LIMIT("1") "]") "," ON_N(
         "'containers':[{'resources':{'requests':{'nvidia.com/gpu':'1'},'limits':{'nvidia.com/"
         "gpu':'1'}}}," GPU_LIMIT("1") "]") "]",
     0, 3, 8, 8, 1},
    {"an init container larger than the containers", "4", 0, "1",
     "[" ON_N("'initContainers':[" CPU("3") "," CPU("1") "],'containers':[" CPU("500m") "," CPU(
         "500m") "]") "]",
     3000, 0, 4, 1, 0},
    {"containers larger than any init container", "4", 0, "1",
     "[" ON_N("'initContainers':[" CPU("1500m") "],'containers':[" CPU("1") "," CPU("1") "]") "]",
     2000, 0, 4, 2, 0},
    {"a sidecar counts with the containers and the init containers after it", "4", 0, "1",
     "[" ON_N("'initContainers':[{'restartPolicy':'Always','resources':{'requests':{'cpu':'250m'}}"
              "}," CPU("2") "],'containers':[" CPU("1") "]") "]",
     2250, 0, 4, 1, 0},
    {"overhead", "2", 0, "1", "[" ON_N("'overhead':{'cpu':'250m'},'containers':[" CPU("1") "]") "]",
     1250, 0, 2, 0, 0},
    {"limits stand for absent requests", "2", 0, "1",
     "[" ON_N("'containers':[{'resources':{'limits':{'cpu':'1'}}}]") "]", 1000, 0, 2, 1, 0},
    {"ended, unbound and elsewhere pods hold nothing here", "2", 1, "1",
     "[{'spec':{'nodeName':'n','containers':[" CPU(
         "2") "]},'status':{'phase':'Succeeded'}},"
              "{'spec':{'nodeName':'n','containers':[" CPU(
                  "2") "]},'status':{'phase':'Failed'}},"
                       "{'spec':{'containers':[" CPU(
                           "2") "]},'status':{'phase':'Pending'}},"
                                "{'spec':{'nodeName':'m','containers':[" CPU("2") "]}," RUNNING
                                                                                  "}]",
     0, 0, 2, 2, 1},
    {"a pod without status is pending on its node", "2", 0, "1",
     "[{'spec':{'nodeName':'n','containers':[" CPU("1") "]}}]", 1000, 0, 2, 1, 0},
    {"a node smaller than one slot is one while nothing else holds CPU", "500m", 0, "1", "[]", 0, 0,
     1, 1, 0},
    {"and none when something does", "500m", 0, "1", "[" ON_N("'containers':[" CPU("100m") "]") "]",
     100, 0, 1, 0, 0},
    {"no requests, no room taken", "2", 2, "1", "[" ON_N("'containers':[{}]") "]", 0, 0, 2, 2, 2},
};

static json_t *pods_of(const char *text)
{
    char buf[4096];
    kd_strlcpy(buf, text, sizeof(buf));
    assert_true(strlen(text) < sizeof(buf));
    for (char *p = buf; *p != '\0'; p++)
        if (*p == '\'')
            *p = '"';
    json_error_t e;
    json_t *a = json_loads(buf, 0, &e);
    if (a == NULL)
        fail_msg("bad pods JSON at %d: %s", e.position, e.text);
    return a;
}

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        struct kd_sched_node n = {.name = "n", .pool = "default", .gpus = r->gpus};
        int64_t per = 0;
        assert_int_equal(kd_sched_cpu_milli(r->cpu, &n.cpu_milli), 0);
        assert_int_equal(kd_sched_cpu_milli(r->per_slot, &per), 0);
        json_t *pods = pods_of(r->pods), *p;
        size_t k;
        json_array_foreach(pods, k, p)
        {
            struct kd_cap_request q;
            if (kd_cap_pod_request(p, &q) && strcmp(q.node, n.name) == 0) {
                n.other_cpu_milli += q.cpu_milli;
                n.other_gpus += q.gpus;
            }
        }
        json_decref(pods);
        int cpu_free = -1, gpu_free = -1;
        int cpu_whole = kd_sched_node_slots(&n, true, per, &cpu_free);
        int gpu_whole = kd_sched_node_slots(&n, false, per, &gpu_free);
        print_message("%s: other cpu %lldm gpus %d; %d of %d CPU slots, %d of %d GPUs free\n",
                      r->what, (long long)n.other_cpu_milli, n.other_gpus, cpu_free, cpu_whole,
                      gpu_free, gpu_whole);
        if (n.other_cpu_milli != r->other_cpu || n.other_gpus != r->other_gpus ||
            cpu_whole != r->cpu_whole || cpu_free != r->cpu_free || gpu_whole != r->gpus ||
            gpu_free != r->gpu_free)
            fail_msg("%s: expected other cpu %lldm gpus %d; %d of %d CPU slots, %d of %d GPUs free",
                     r->what, (long long)r->other_cpu, r->other_gpus, r->cpu_free, r->cpu_whole,
                     r->gpu_free, r->gpus);
    }
}

/* Quantities as the scheduler loop reads them from Nodes and Pods. */
static void test_quantities(void **state)
{
    (void)state;
    json_t *q = json_string("3800m");
    assert_int_equal(kd_cap_cpu_milli(q), 3800);
    json_decref(q);
    q = json_integer(4);
    assert_int_equal(kd_cap_cpu_milli(q), 4000);
    assert_int_equal(kd_cap_count(q), 4);
    json_decref(q);
    q = json_string("0");
    assert_int_equal(kd_cap_cpu_milli(q), 0);
    assert_int_equal(kd_cap_count(q), 0);
    json_decref(q);
    q = json_string("-1");
    assert_int_equal(kd_cap_count(q), 0);
    json_decref(q);
    q = json_string("1.5");
    assert_int_equal(kd_cap_count(q), 0);
    json_decref(q);
    assert_int_equal(kd_cap_cpu_milli(NULL), 0);
    assert_int_equal(kd_cap_count(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_quantities),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
