/*
 * Watches and informers against a real kdet-local: events in order, stop
 * flag, bookmarks, 410 on a too-old resourceVersion, an informer whose
 * cache converges to the server's state, and an informer that survives a
 * server restart and resynchronises through a relist after a 410.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/time.h"
#include "k8s/informer.h"
#include "kdet_local.h"

#define NS "default"
#define HISTORY_N 20
#define STR_(x) #x
#define STR(x) STR_(x)
#define HISTORY STR(HISTORY_N)

static struct kl server;
static struct kd_k8s_client *cl;
static const char *const server_args[] = {"--bookmark-interval", "1", "--watch-history", HISTORY,
                                          NULL};

static int setup(void **state)
{
    (void)state;
    kl_start(&server, server_args, 0);
    cl = kl_client(&server, NULL);
    return 0;
}

/* The informer of the running test, stopped here if the test failed half-way. */
static struct kd_k8s_informer *live;

static int teardown(void **state)
{
    (void)state;
    kd_k8s_informer_free(live);
    kd_k8s_client_free(cl);
    kl_destroy(&server);
    return 0;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        char err_[KD_ERRLEN] = "";                                                                 \
        int rc_ = (call);                                                                          \
        if (rc_ != 0)                                                                              \
            fail_msg("%s: %s: %s", #call, kd_err_name(rc_), err_);                                 \
    } while (0)

static void put_cm(const char *suite, const char *name, const char *val)
{
    json_t *cm =
        json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                  "metadata", "name", name, "labels", "suite", suite, "data", "v", val);
    char err[KD_ERRLEN];
    int rc = kd_k8s_create(cl, &KD_K8S_CONFIGMAPS, NS, cm, NULL, NULL, err);
    if (rc == KD_EEXIST) {
        json_t *p = json_pack("{s:{s:s}}", "data", "v", val);
        rc = kd_k8s_patch(cl, &KD_K8S_CONFIGMAPS, NS, name, NULL, KD_K8S_PATCH_MERGE, p, NULL, NULL,
                          err);
        json_decref(p);
    }
    if (rc != 0)
        fail_msg("put %s: %s", name, err);
    json_decref(cm);
}

static void del_cm(const char *name)
{
    OK(kd_k8s_delete(cl, &KD_K8S_CONFIGMAPS, NS, name, NULL, NULL, NULL, err_));
}

static char *list_rv(const char *suite)
{
    json_t *l = NULL;
    char sel[64];
    snprintf(sel, sizeof(sel), "suite=%s", suite);
    struct kd_k8s_query q = {.label_selector = sel};
    OK(kd_k8s_list(cl, &KD_K8S_CONFIGMAPS, NS, &q, &l, NULL, err_));
    char *rv = strdup(kd_k8s_meta_str(l, "resourceVersion"));
    json_decref(l);
    return rv;
}

struct watcher {
    char rv[32];
    const char *selector;
    bool bookmarks;
    atomic_int stop;
    int rc;
    char err[KD_ERRLEN];
    char log[2048];
    int nbookmarks;
    int end_on_delete;
};

static int on_ev(enum kd_k8s_event_type t, json_t *obj, void *ud)
{
    struct watcher *w = ud;
    if (t == KD_K8S_BOOKMARK) {
        w->nbookmarks++;
        return w->end_on_delete ? 0 : 1;
    }
    size_t len = strlen(w->log);
    snprintf(w->log + len, sizeof(w->log) - len, "%s %s=%s;", kd_k8s_event_type_name(t),
             kd_k8s_meta_str(obj, "name"),
             json_string_value(json_object_get(json_object_get(obj, "data"), "v")));
    return t == KD_K8S_DELETED && w->end_on_delete ? 1 : 0;
}

static void *watch_main(void *arg)
{
    struct watcher *w = arg;
    struct kd_k8s_query q = {.label_selector = w->selector,
                             .resource_version = w->rv,
                             .allow_watch_bookmarks = w->bookmarks};
    w->rc = kd_k8s_watch(cl, &KD_K8S_CONFIGMAPS, NS, &q, on_ev, w, &w->stop, NULL, w->err);
    return NULL;
}

static void test_watch_events_in_order(void **state)
{
    (void)state;
    struct watcher w = {.selector = "suite=watch", .end_on_delete = 1};
    pthread_t t;
    char *rv = list_rv("watch");
    snprintf(w.rv, sizeof(w.rv), "%s", rv);
    free(rv);
    assert_int_equal(pthread_create(&t, NULL, watch_main, &w), 0);
    put_cm("other", "not-mine", "0"); /* filtered out by the label selector */
    put_cm("watch", "w1", "1");
    put_cm("watch", "w1", "2");
    del_cm("w1");
    pthread_join(t, NULL);
    printf("events: %s rc=%s\n", w.log, kd_err_name(w.rc));
    assert_int_equal(w.rc, 1); /* the callback's stop value */
    assert_string_equal(w.log, "ADDED w1=1;MODIFIED w1=2;DELETED w1=2;");
}

static void test_watch_stop_and_bookmarks(void **state)
{
    (void)state;
    struct watcher w = {.selector = "suite=quiet", .bookmarks = true, .end_on_delete = 1};
    pthread_t t;
    char *rv = list_rv("quiet");
    snprintf(w.rv, sizeof(w.rv), "%s", rv);
    free(rv);
    assert_int_equal(pthread_create(&t, NULL, watch_main, &w), 0);
    kd_sleep_ms(2500); /* the server sends a bookmark every second */
    int64_t t0 = kd_mono_ms();
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    int64_t dt = kd_mono_ms() - t0;
    printf("stopped after %lld ms with %d bookmarks: %s\n", (long long)dt, w.nbookmarks, w.err);
    assert_int_equal(w.rc, KD_ECANCELED);
    assert_true(dt < 2500);
    assert_true(w.nbookmarks >= 1);
    assert_string_equal(w.log, "");
}

static void test_watch_too_old_is_gone(void **state)
{
    (void)state;
    struct watcher w = {.selector = "suite=old", .end_on_delete = 1};
    char *rv = list_rv("old");
    snprintf(w.rv, sizeof(w.rv), "%s", rv);
    free(rv);
    for (int i = 0; i < HISTORY_N + 10; i++) {
        char name[32], val[16];
        snprintf(name, sizeof(name), "churn-%d", i % 3);
        snprintf(val, sizeof(val), "%d", i);
        put_cm("churn", name, val);
    }
    watch_main(&w);
    printf("watch from %s: %s: %s\n", w.rv, kd_err_name(w.rc), w.err);
    assert_int_equal(w.rc, KD_EGONE);
    assert_non_null(strstr(w.err, "410"));
}

/* ---- informer ------------------------------------------------------------ */

struct counts {
    atomic_int add, update, del;
};

static void c_add(json_t *o, void *ud)
{
    (void)o;
    atomic_fetch_add(&((struct counts *)ud)->add, 1);
}

static void c_update(json_t *old, json_t *o, void *ud)
{
    (void)old;
    (void)o;
    atomic_fetch_add(&((struct counts *)ud)->update, 1);
}

static void c_del(json_t *o, void *ud)
{
    (void)o;
    atomic_fetch_add(&((struct counts *)ud)->del, 1);
}

/* Whether the informer's cache holds exactly what the server lists, by key and version. */
static bool converged(struct kd_k8s_informer *inf, const char *selector)
{
    struct kd_k8s_query q = {.label_selector = selector};
    json_t *l = NULL, *it;
    size_t i;
    bool ok;
    OK(kd_k8s_list_all(cl, &KD_K8S_CONFIGMAPS, NS, &q, &l, NULL, err_));
    struct kd_k8s_cache *c = kd_k8s_informer_cache(inf);
    ok = json_array_size(json_object_get(l, "items")) == kd_k8s_cache_len(c);
    json_array_foreach(json_object_get(l, "items"), i, it)
    {
        char key[256];
        json_t *mine = NULL;
        assert_int_equal(kd_k8s_obj_key(it, key, sizeof(key)), 0);
        if (kd_k8s_cache_get(c, key, &mine) != 0) {
            ok = false;
            continue;
        }
        ok = ok && strcmp(kd_k8s_meta_str(mine, "resourceVersion"),
                          kd_k8s_meta_str(it, "resourceVersion")) == 0;
        json_decref(mine);
    }
    json_decref(l);
    return ok;
}

static void wait_converged(struct kd_k8s_informer *inf, const char *selector, const char *what)
{
    int64_t deadline = kd_mono_ms() + 15000;
    while (!converged(inf, selector)) {
        if (kd_mono_ms() > deadline)
            fail_msg("informer did not converge %s within 15 s", what);
        kd_sleep_ms(50);
    }
}

static void test_informer_converges(void **state)
{
    (void)state;
    struct kd_k8s_informer *inf = NULL;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    static struct counts n; /* outlives a failed test until teardown stops the informer */
    memset(&n, 0, sizeof(n));
    struct kd_k8s_informer_opts o = {
        .gvr = KD_K8S_CONFIGMAPS, .ns = NS, .label_selector = "suite=inf", .page_size = 4};
    char err[KD_ERRLEN];
    for (int i = 0; i < 6; i++) {
        char name[16];
        snprintf(name, sizeof(name), "pre-%d", i);
        put_cm("inf", name, "0");
    }
    assert_int_equal(kd_k8s_informer_new(cl, &o, &inf, err), 0);
    live = inf;
    struct kd_k8s_handlers h = kd_k8s_handlers_enqueue(q);
    struct kd_k8s_handlers hc = {c_add, c_update, c_del, &n};
    assert_int_equal(kd_k8s_informer_add_handlers(inf, &h), 0);
    assert_int_equal(kd_k8s_informer_add_handlers(inf, &hc), 0);
    assert_false(kd_k8s_informer_has_synced(inf));
    assert_int_equal(kd_k8s_informer_start(inf), 0);
    assert_int_equal(kd_k8s_informer_start(inf), KD_ESTATE);
    assert_int_equal(kd_k8s_informer_add_handlers(inf, &hc), KD_ESTATE);
    assert_int_equal(kd_k8s_informer_wait_synced(inf, 10000), 0);
    assert_true(kd_k8s_informer_has_synced(inf));
    assert_int_equal(kd_k8s_cache_len(kd_k8s_informer_cache(inf)), 6);
    assert_int_equal(atomic_load(&n.add), 6);
    /* changes after the sync arrive through the watch */
    for (int i = 0; i < 8; i++) {
        char name[16];
        snprintf(name, sizeof(name), "new-%d", i);
        put_cm("inf", name, "1");
    }
    put_cm("inf", "pre-0", "changed");
    put_cm("inf", "pre-1", "changed");
    del_cm("pre-2");
    del_cm("new-7");
    put_cm("elsewhere", "ignored", "x");
    wait_converged(inf, "suite=inf", "after changes");
    /* the cache changes first, then the handlers run: give them a moment */
    for (int64_t end = kd_mono_ms() + 5000; kd_mono_ms() < end; kd_sleep_ms(20)) {
        if (atomic_load(&n.add) >= 14 && atomic_load(&n.update) >= 2 && atomic_load(&n.del) >= 2)
            break;
    }
    struct kd_k8s_informer_stats s;
    kd_k8s_informer_stats(inf, &s);
    printf("adds %d updates %d deletes %d; lists %llu watches %llu events %llu; queue %zu\n",
           atomic_load(&n.add), atomic_load(&n.update), atomic_load(&n.del),
           (unsigned long long)s.lists, (unsigned long long)s.watches, (unsigned long long)s.events,
           kd_k8s_queue_len(q));
    assert_int_equal(atomic_load(&n.add), 14);
    assert_int_equal(atomic_load(&n.update), 2);
    assert_int_equal(atomic_load(&n.del), 2);
    assert_int_equal(s.lists, 1);
    /* the queue holds each changed key once */
    assert_int_equal(kd_k8s_queue_len(q), 14);
    /* indexes */
    json_t *bylabel = kd_k8s_cache_by_label(kd_k8s_informer_cache(inf), "suite", "inf");
    assert_int_equal(json_array_size(bylabel), 12);
    json_decref(bylabel);
    char rv[64];
    kd_k8s_informer_resource_version(inf, rv, sizeof(rv));
    assert_true(rv[0] != '\0');
    kd_k8s_informer_free(inf);
    live = NULL;
    kd_k8s_queue_free(q);
}

static void test_informer_relists_after_restart(void **state)
{
    (void)state;
    struct kd_k8s_informer *inf = NULL;
    static struct counts n; /* outlives a failed test until teardown stops the informer */
    memset(&n, 0, sizeof(n));
    struct kd_k8s_informer_opts o = {.gvr = KD_K8S_CONFIGMAPS,
                                     .ns = NS,
                                     .label_selector = "suite=restart",
                                     .backoff_base_ms = 6000,
                                     .backoff_max_ms = 6000};
    char err[KD_ERRLEN];
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof(name), "r-%d", i);
        put_cm("restart", name, "0");
    }
    assert_int_equal(kd_k8s_informer_new(cl, &o, &inf, err), 0);
    live = inf;
    struct kd_k8s_handlers hc = {c_add, c_update, c_del, &n};
    assert_int_equal(kd_k8s_informer_add_handlers(inf, &hc), 0);
    assert_int_equal(kd_k8s_informer_start(inf), 0);
    assert_int_equal(kd_k8s_informer_wait_synced(inf, 10000), 0);
    assert_int_equal(atomic_load(&n.add), 5);

    /* Restart the server on the same port and data dir. The informer's watch
     * drops and it backs off (3-6 s); meanwhile more changes than the watch
     * history holds happen, so its resourceVersion is too old when it comes
     * back: 410, relist, and the differences are delivered. */
    int port = server.port;
    kl_stop(&server);
    kl_start(&server, server_args, port);
    del_cm("r-0");
    del_cm("r-1");
    put_cm("restart", "r-2", "changed");
    for (int i = 0; i < HISTORY_N + 5; i++)
        put_cm("restart", "r-new", i % 2 ? "a" : "b");
    wait_converged(inf, "suite=restart", "after the restart");
    /* the cache changes first, then the handlers run: give them a moment */
    struct kd_k8s_informer_stats s;
    for (int64_t end = kd_mono_ms() + 5000; kd_mono_ms() < end; kd_sleep_ms(20)) {
        kd_k8s_informer_stats(inf, &s);
        if (s.lists >= 2 && atomic_load(&n.del) >= 2 && atomic_load(&n.add) >= 6 &&
            atomic_load(&n.update) >= 1)
            break;
    }
    kd_k8s_informer_stats(inf, &s);
    printf("after restart: lists %llu gone %llu errors %llu; adds %d updates %d deletes %d\n",
           (unsigned long long)s.lists, (unsigned long long)s.gone, (unsigned long long)s.errors,
           atomic_load(&n.add), atomic_load(&n.update), atomic_load(&n.del));
    /* the dropped watch ends with an error (reset) or normally (graceful stop) */
    assert_true(s.gone >= 1);  /* the 410 */
    assert_true(s.lists >= 2); /* the relist */
    assert_int_equal(atomic_load(&n.del), 2);
    assert_int_equal(atomic_load(&n.add), 6); /* r-new, once: the relist diff */
    assert_int_equal(atomic_load(&n.update), 1);
    kd_k8s_informer_free(inf);
    live = NULL;
}

int main(void)
{
    kd_log_init("test", KD_LOG_WARN, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watch_events_in_order),
        cmocka_unit_test(test_watch_stop_and_bookmarks),
        cmocka_unit_test(test_watch_too_old_is_gone),
        cmocka_unit_test(test_informer_converges),
        cmocka_unit_test(test_informer_relists_after_restart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
