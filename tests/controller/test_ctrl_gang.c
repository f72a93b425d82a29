/*
 * Gang backends: golden files of what kdet hands a batch scheduler. Each
 * tests/data/controller/gang/NAME.input.json (a pod-spec input as in
 * tests/data/controller/pods/ plus "gang" and "queue") must give exactly
 * NAME.out.json: {"pods": the decorated pods, "group": the group object or
 * null}. KD_UPDATE_GOLDEN=1 rewrites them (review the diff). Also how a
 * PodGroup's or Workload's status becomes a trial's waiting reason, and the
 * sum of requests for minResources.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../support/golden.h"

#include "config/config.h"
#include "gang.h"
#include "podspec.h"

#define DIR "tests/data/controller/gang/"

static void golden(const char *name)
{
    char path[512], err[KD_ERRLEN] = "";
    json_error_t je;
    snprintf(path, sizeof(path), DIR "%s.input.json", name);
    json_t *in = json_load_file(path, 0, &je);
    if (in == NULL)
        fail_msg("%s:%d: %s", path, je.line, je.text);
    json_t *cfg = json_deep_copy(json_object_get(in, "config"));
    if (kd_config_check(cfg, err) != 0)
        fail_msg("%s: config: %s", name, err);
    assert_int_equal(kd_config_apply_defaults(cfg, err), 0);
    struct kd_pod_opts o = {.image = "kdet/trial:test", .priority_classes = true};
    const char *run_id = json_string_value(json_object_get(in, "run_id"));
    const struct kd_gang_ops *ops = kd_gang_find(json_string_value(json_object_get(in, "gang")));
    assert_non_null(ops);
    json_t *pods = NULL, *group = NULL;
    int rc = kd_pod_build(json_object_get(in, "trial"), cfg, run_id, NULL,
                          (int)json_integer_value(json_object_get(in, "gpus")),
                          (int)json_integer_value(json_object_get(in, "npods")), &o, &pods, err);
    if (rc != 0)
        fail_msg("%s: kd_pod_build: %s (%s)", name, kd_err_name(rc), err);
    struct kd_gang_attempt a = {.trial = json_object_get(in, "trial"),
                                .run_id = run_id,
                                .queue = json_string_value(json_object_get(in, "queue")),
                                .pods = pods};
    rc = kd_gang_prepare(ops, &a, pods, &group, err);
    if (rc != 0)
        fail_msg("%s: kd_gang_prepare: %s (%s)", name, kd_err_name(rc), err);
    json_t *got = json_pack("{s:o,s:o}", "pods", pods, "group", group ? group : json_null());
    snprintf(path, sizeof(path), DIR "%s.out.json", name);
    kd_golden_check(name, path, got);
    json_decref(got);
    json_decref(cfg);
    json_decref(in);
}

/* Two whole-node pods of 8 GPUs in queue "research": one PodGroup, minMember 2, 16 GPUs. */
static void test_volcano_multi(void **s)
{
    (void)s;
    golden("volcano-multi");
}

/* One pod whose pod_spec requests cpu and memory: minResources sums them. */
static void test_volcano_single(void **s)
{
    (void)s;
    golden("volcano-single");
}

/* Kueue: labels and the group's size on every pod, no group object (Kueue makes the Workload). */
static void test_kueue_multi(void **s)
{
    (void)s;
    golden("kueue-multi");
}

static json_t *pod(const char *node)
{
    json_t *p = json_pack("{s:{s:s},s:{}}", "metadata", "name", "t-0", "spec");
    if (node != NULL)
        json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(node));
    return p;
}

static void test_volcano_explain(void **s)
{
    (void)s;
    struct kd_gang_wait w;
    json_t *pods = json_pack("[o,o]", pod("n1"), pod(NULL));
    kd_gang_volcano.explain(NULL, pods, "t", "q", &w);
    assert_true(w.waiting);
    assert_string_equal(w.reason, "Pending");
    assert_non_null(strstr(w.message, "PodGroup t not found"));
    json_t *pg = json_pack("{s:{s:s}}", "status", "phase", "Inqueue");
    kd_gang_volcano.explain(pg, pods, "t", "q", &w);
    assert_string_equal(w.reason, "Inqueue");
    assert_string_equal(w.message, "waiting for volcano: PodGroup t in queue q is Inqueue");
    json_decref(pg);
    pg = json_pack("{s:{s:s,s:[{s:s,s:s,s:s},{s:s,s:s,s:s}]}}", "status", "phase", "Pending",
                   "conditions", "type", "Scheduled", "status", "False", "message", "old", "type",
                   "Unschedulable", "status", "True", "message",
                   "2/2 tasks in gang unschedulable: 2 Insufficient nvidia.com/gpu");
    kd_gang_volcano.explain(pg, pods, "t", "q", &w);
    assert_string_equal(w.reason, "Unschedulable");
    assert_string_equal(w.message, "waiting for volcano: PodGroup t in queue q is Pending: 2/2 "
                                   "tasks in gang unschedulable: 2 Insufficient nvidia.com/gpu");
    json_decref(pods);
    /* All pods bound: not waiting, whatever the PodGroup says. */
    pods = json_pack("[o,o]", pod("n1"), pod("n2"));
    kd_gang_volcano.explain(pg, pods, "t", "q", &w);
    assert_false(w.waiting);
    json_decref(pg);
    json_decref(pods);
}

static void test_kueue_explain(void **s)
{
    (void)s;
    struct kd_gang_wait w;
    json_t *pods = json_pack("[o]", pod(NULL));
    kd_gang_kueue.explain(NULL, pods, "kdt-x", "lq", &w);
    assert_true(w.waiting);
    assert_non_null(strstr(w.message, "no Workload kdt-x yet"));
    json_t *wl = json_pack("{s:{s:[{s:s,s:s,s:s,s:s}]}}", "status", "conditions", "type",
                           "QuotaReserved", "status", "False", "reason", "Pending", "message",
                           "couldn't assign flavors to pod set main: insufficient quota");
    kd_gang_kueue.explain(wl, pods, "kdt-x", "lq", &w);
    assert_string_equal(w.reason, "Pending");
    assert_string_equal(w.message, "waiting for kueue: Workload kdt-x in LocalQueue lq: couldn't "
                                   "assign flavors to pod set main: insufficient quota");
    json_decref(wl);
    wl = json_pack("{s:{s:[{s:s,s:s,s:s}]}}", "status", "conditions", "type", "Admitted", "status",
                   "True", "message", "");
    kd_gang_kueue.explain(wl, pods, "kdt-x", "lq", &w);
    assert_string_equal(w.reason, "Admitted");
    json_decref(wl);
    json_decref(pods);
}

static void test_min_resources(void **s)
{
    (void)s;
    json_t *pods = json_pack(
        "[{s:{s:[{s:{s:{s:s,s:s},s:{s:s}}},{s:{s:{s:i,s:s}}}]}},{s:{s:[{s:{s:{s:s,s:s,s:s}}}]}}]",
        "spec", "containers", "resources", "requests", "cpu", "500m", "memory", "1Gi", "limits",
        "nvidia.com/gpu", "2", "resources", "requests", "cpu", 1, "memory", "512Mi", "spec",
        "containers", "resources", "limits", "cpu", "1.5", "memory", "1G", "nvidia.com/gpu", "2");
    json_t *r = kd_gang_min_resources(pods);
    json_t *want =
        json_pack("{s:s,s:s,s:s}", "cpu", "3000m", "memory", "2610612736", "nvidia.com/gpu", "4");
    if (!json_equal(r, want))
        fail_msg("got %s", json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS));
    json_decref(r);
    json_decref(want);
    /* A quantity kdet cannot read leaves that resource out rather than under-count it. */
    json_object_set_new(
        json_object_get(
            json_object_get(
                json_array_get(
                    json_object_get(json_object_get(json_array_get(pods, 1), "spec"), "containers"),
                    0),
                "resources"),
            "limits"),
        "memory", json_string("1Pi"));
    r = kd_gang_min_resources(pods);
    assert_null(json_object_get(r, "memory"));
    assert_string_equal(json_string_value(json_object_get(r, "cpu")), "3000m");
    json_decref(r);
    json_decref(pods);
    assert_ptr_equal(kd_gang_find("volcano"), &kd_gang_volcano);
    assert_ptr_equal(kd_gang_find("kueue"), &kd_gang_kueue);
    assert_ptr_equal(kd_gang_find("builtin"), &kd_gang_builtin);
    assert_null(kd_gang_find("yunikorn"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_volcano_multi), cmocka_unit_test(test_volcano_single),
        cmocka_unit_test(test_kueue_multi),   cmocka_unit_test(test_volcano_explain),
        cmocka_unit_test(test_kueue_explain), cmocka_unit_test(test_min_resources),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
