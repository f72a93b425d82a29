/* Resource paths and query strings: layout, percent-encoding, bad segments, caps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "k8s/client.h"

static const char *path(struct kd_buf *b, struct kd_k8s_gvr g, const char *ns, const char *name,
                        const char *sub, const struct kd_k8s_query *q)
{
    char err[KD_ERRLEN];
    kd_buf_reset(b);
    int rc = kd_k8s_path(b, &g, ns, name, sub, q, err);
    if (rc != 0)
        fail_msg("kd_k8s_path: %s: %s", kd_err_name(rc), err);
    return kd_buf_str(b);
}

static void test_layouts(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(4096);
    assert_string_equal(path(&b, KD_K8S_PODS, "ns1", "p1", NULL, NULL),
                        "/api/v1/namespaces/ns1/pods/p1");
    assert_string_equal(path(&b, KD_K8S_PODS, "ns1", NULL, NULL, NULL),
                        "/api/v1/namespaces/ns1/pods");
    assert_string_equal(path(&b, KD_K8S_PODS, NULL, NULL, NULL, NULL), "/api/v1/pods");
    assert_string_equal(path(&b, KD_K8S_NODES, "", "node-1", NULL, NULL), "/api/v1/nodes/node-1");
    assert_string_equal(path(&b, KD_K8S_NAMESPACES, NULL, "kdet", NULL, NULL),
                        "/api/v1/namespaces/kdet");
    assert_string_equal(path(&b, KD_K8S_EXPERIMENTS, "team-a", "mnist", NULL, NULL),
                        "/apis/kdet.io/v1alpha1/namespaces/team-a/experiments/mnist");
    assert_string_equal(path(&b, KD_K8S_TRIALS, "team-a", "mnist-1", "status", NULL),
                        "/apis/kdet.io/v1alpha1/namespaces/team-a/trials/mnist-1/status");
    assert_string_equal(path(&b, KD_K8S_LEASES, "kube-system", "kdet", NULL, NULL),
                        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kdet");
    assert_string_equal(
        path(&b, KD_K8S_GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions"), NULL,
             "experiments.kdet.io", NULL, NULL),
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/experiments.kdet.io");
    kd_buf_free(&b);
}

static void test_query(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(4096);
    struct kd_k8s_query q = {.label_selector = "app=kdet,tier in (a, b),!canary",
                             .field_selector = "status.phase!=Running",
                             .limit = 50,
                             .cont = "eyJ2Ijoi+/=",
                             .resource_version = "12345",
                             .resource_version_match = "NotOlderThan"};
    assert_string_equal(path(&b, KD_K8S_PODS, "ns", NULL, NULL, &q),
                        "/api/v1/namespaces/ns/pods"
                        "?labelSelector=app%3Dkdet%2Ctier%20in%20%28a%2C%20b%29%2C%21canary"
                        "&fieldSelector=status.phase%21%3DRunning&limit=50"
                        "&continue=eyJ2Ijoi%2B%2F%3D&resourceVersion=12345"
                        "&resourceVersionMatch=NotOlderThan");
    struct kd_k8s_query w = {.watch = true,
                             .resource_version = "0",
                             .allow_watch_bookmarks = true,
                             .timeout_seconds = 300};
    assert_string_equal(path(&b, KD_K8S_EXPERIMENTS, NULL, NULL, NULL, &w),
                        "/apis/kdet.io/v1alpha1/experiments?resourceVersion=0&watch=true"
                        "&allowWatchBookmarks=true&timeoutSeconds=300");
    struct kd_k8s_query empty = {.label_selector = "", .field_selector = ""};
    assert_string_equal(path(&b, KD_K8S_PODS, "ns", NULL, NULL, &empty),
                        "/api/v1/namespaces/ns/pods");
    kd_buf_free(&b);
}

static void test_segments_encoded(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(4096);
    assert_string_equal(path(&b, KD_K8S_CONFIGMAPS, "ns", "a b?c#d%e", NULL, NULL),
                        "/api/v1/namespaces/ns/configmaps/a%20b%3Fc%23d%25e");
    kd_buf_reset(&b);
    assert_int_equal(kd_k8s_urlencode(&b, "é~_.-"), 0);
    assert_string_equal(kd_buf_str(&b), "%C3%A9~_.-");
    kd_buf_free(&b);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(4096);
    char err[KD_ERRLEN];
    struct kd_k8s_gvr g = KD_K8S_PODS;
    assert_int_equal(kd_k8s_path(&b, &g, "ns", "../secrets", NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "name"));
    assert_int_equal(kd_k8s_path(&b, &g, "..", "x", NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "namespace"));
    assert_int_equal(kd_k8s_path(&b, &g, "ns", NULL, "status", NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "subresource \"status\""));
    struct kd_k8s_gvr nov = {"kdet.io", NULL, "experiments"};
    assert_int_equal(kd_k8s_path(&b, &nov, "ns", NULL, NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "version"));
    struct kd_k8s_gvr nor = {"", "v1", ""};
    assert_int_equal(kd_k8s_path(&b, &nor, "ns", NULL, NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "resource"));
    struct kd_buf small = KD_BUF_INIT(16);
    assert_int_equal(kd_k8s_path(&small, &g, "namespace-1", "pod-1", NULL, NULL, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "16 bytes"));
    kd_buf_free(&small);
    kd_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_segments_encoded),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
