/*
 * Informer internals that need no server: how watch events change the
 * cache and reach the handlers (ADDED for a new key, MODIFIED for a known
 * one, DELETED, bookmarks only moving the resourceVersion), and the
 * trimming of managedFields before caching.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../../lib/k8s/informer.c"

static char trace[1024];

static void t_add(json_t *o, void *ud)
{
    (void)ud;
    size_t n = strlen(trace);
    snprintf(trace + n, sizeof(trace) - n, "add %s;", kd_k8s_meta_str(o, "name"));
}

static void t_update(json_t *old, json_t *o, void *ud)
{
    (void)ud;
    size_t n = strlen(trace);
    snprintf(trace + n, sizeof(trace) - n, "update %s %s->%s;", kd_k8s_meta_str(o, "name"),
             kd_k8s_meta_str(old, "resourceVersion"), kd_k8s_meta_str(o, "resourceVersion"));
}

static void t_del(json_t *o, void *ud)
{
    (void)ud;
    size_t n = strlen(trace);
    snprintf(trace + n, sizeof(trace) - n, "delete %s;", kd_k8s_meta_str(o, "name"));
}

static json_t *pod(const char *name, const char *rv)
{
    return json_pack("{s:{s:s,s:s,s:s,s:[{s:s,s:s}]}}", "metadata", "namespace", "ns", "name", name,
                     "resourceVersion", rv, "managedFields", "manager", "kubectl", "operation",
                     "Update");
}

static struct kd_k8s_informer *make(bool keep)
{
    struct kd_k8s_informer *inf = NULL;
    struct kd_k8s_informer_opts o = {.gvr = KD_K8S_PODS, .keep_managed_fields = keep};
    struct kd_k8s_handlers h = {t_add, t_update, t_del, NULL};
    /* the client is never used by on_event; any non-NULL pointer will do */
    assert_int_equal(kd_k8s_informer_new((struct kd_k8s_client *)&o, &o, &inf, NULL), 0);
    assert_int_equal(kd_k8s_informer_add_handlers(inf, &h), 0);
    return inf;
}

static void test_events_update_cache_and_handlers(void **state)
{
    (void)state;
    struct kd_k8s_informer *inf = make(false);
    json_t *got = NULL;
    char rv[32];
    trace[0] = '\0';
    json_t *p1 = pod("a", "10"), *p2 = pod("a", "11"), *p3 = pod("b", "12"), *p4 = pod("a", "13");
    json_t *bm = json_pack("{s:{s:s}}", "metadata", "resourceVersion", "20");
    assert_int_equal(on_event(KD_K8S_ADDED, p1, inf), 0);
    assert_int_equal(on_event(KD_K8S_ADDED, p2, inf), 0);    /* known key: an update */
    assert_int_equal(on_event(KD_K8S_MODIFIED, p3, inf), 0); /* unknown key: an add */
    assert_int_equal(on_event(KD_K8S_DELETED, p4, inf), 0);
    assert_int_equal(on_event(KD_K8S_DELETED, p4, inf), 0); /* not cached: no handler */
    assert_string_equal(trace, "add a;update a 10->11;add b;delete a;");
    kd_k8s_informer_resource_version(inf, rv, sizeof(rv));
    assert_string_equal(rv, "13");
    assert_int_equal(on_event(KD_K8S_BOOKMARK, bm, inf), 0);
    kd_k8s_informer_resource_version(inf, rv, sizeof(rv));
    assert_string_equal(rv, "20");
    assert_int_equal(kd_k8s_cache_len(kd_k8s_informer_cache(inf)), 1);
    assert_int_equal(kd_k8s_cache_get(kd_k8s_informer_cache(inf), "ns/b", &got), 0);
    assert_null(json_object_get(json_object_get(got, "metadata"), "managedFields"));
    json_decref(got);
    struct kd_k8s_informer_stats s;
    kd_k8s_informer_stats(inf, &s);
    assert_int_equal(s.events, 5);
    assert_int_equal(s.bookmarks, 1);
    json_decref(p1);
    json_decref(p2);
    json_decref(p3);
    json_decref(p4);
    json_decref(bm);
    kd_k8s_informer_free(inf);
}

static void test_keep_managed_fields(void **state)
{
    (void)state;
    struct kd_k8s_informer *inf = make(true);
    json_t *p = pod("a", "1"), *got = NULL;
    assert_int_equal(on_event(KD_K8S_ADDED, p, inf), 0);
    assert_int_equal(kd_k8s_cache_get(kd_k8s_informer_cache(inf), "ns/a", &got), 0);
    assert_non_null(json_object_get(json_object_get(got, "metadata"), "managedFields"));
    json_decref(got);
    json_decref(p);
    kd_k8s_informer_free(inf);
}

static void test_new_checks(void **state)
{
    (void)state;
    struct kd_k8s_informer *inf = NULL;
    struct kd_k8s_informer_opts o = {.gvr = {"", NULL, "pods"}};
    char err[KD_ERRLEN];
    assert_int_equal(kd_k8s_informer_new((struct kd_k8s_client *)&o, &o, &inf, err), KD_EINVAL);
    assert_non_null(strstr(err, "resource"));
    assert_null(inf);
}

int main(void)
{
    kd_log_init("test", KD_LOG_ERROR, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_update_cache_and_handlers),
        cmocka_unit_test(test_keep_managed_fields),
        cmocka_unit_test(test_new_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
