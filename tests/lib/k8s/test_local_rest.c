/*
 * The REST client against a real kdet-local: CRUD on ConfigMaps, 409 on a
 * stale resourceVersion, 404/409/422 mapping with the Status kept, the
 * three patch types, delete preconditions, list pagination, the status
 * subresource of a custom resource, bearer-token auth (never logged),
 * the response body cap and retries on connection errors.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/time.h"
#include "k8s/client.h"
#include "kdet_local.h"

#define NS "default"

static struct kl server;
static struct kd_k8s_client *cl;

static int setup(void **state)
{
    (void)state;
    kl_start(&server, NULL, 0);
    cl = kl_client(&server, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kd_k8s_client_free(cl);
    kl_destroy(&server);
    return 0;
}

static json_t *configmap(const char *name, const char *k, const char *v)
{
    return json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                     "metadata", "name", name, "labels", "suite", "rest", "data", k, v);
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        char err_[KD_ERRLEN] = "";                                                                 \
        int rc_ = (call);                                                                          \
        if (rc_ != 0)                                                                              \
            fail_msg("%s: %s: %s", #call, kd_err_name(rc_), err_);                                 \
    } while (0)

static void test_crud_and_conflict(void **state)
{
    (void)state;
    json_t *cm = configmap("crud-1", "a", "1"), *out = NULL, *got = NULL, *stale = NULL;
    struct kd_k8s_status st = {0};
    struct kd_k8s_client_stats s0, s1;
    char err[KD_ERRLEN];
    kd_k8s_client_stats(cl, &s0);
    OK(kd_k8s_create(cl, &KD_K8S_CONFIGMAPS, NS, cm, &out, NULL, err_));
    assert_string_equal(kd_k8s_meta_str(out, "namespace"), NS);
    assert_non_null(kd_k8s_meta_str(out, "uid"));
    stale = json_deep_copy(out);
    json_decref(out);

    /* creating it again: 409 AlreadyExists → KD_EEXIST, Status kept */
    assert_int_equal(kd_k8s_create(cl, &KD_K8S_CONFIGMAPS, NS, cm, NULL, &st, err), KD_EEXIST);
    assert_int_equal(st.http, 409);
    assert_string_equal(st.reason, "AlreadyExists");
    assert_non_null(strstr(err, "already exists"));

    OK(kd_k8s_get(cl, &KD_K8S_CONFIGMAPS, NS, "crud-1", &got, NULL, err_));
    assert_string_equal(json_string_value(json_object_get(json_object_get(got, "data"), "a")), "1");
    /* update with the current resourceVersion works... */
    json_object_set_new(json_object_get(got, "data"), "a", json_string("2"));
    OK(kd_k8s_update(cl, &KD_K8S_CONFIGMAPS, NULL, NULL, got, &out, NULL, err_));
    assert_string_not_equal(kd_k8s_meta_str(out, "resourceVersion"),
                            kd_k8s_meta_str(stale, "resourceVersion"));
    json_decref(out);
    /* ...and with the stale one it is a 409 Conflict → KD_ECONFLICT */
    json_object_set_new(json_object_get(stale, "data"), "a", json_string("lost"));
    assert_int_equal(kd_k8s_update(cl, &KD_K8S_CONFIGMAPS, NULL, NULL, stale, NULL, &st, err),
                     KD_ECONFLICT);
    assert_string_equal(st.reason, "Conflict");
    assert_non_null(strstr(err, "the object has been modified"));

    /* delete with a wrong uid precondition: refused */
    struct kd_k8s_delete_opts pre = {.precondition_uid = "00000000-0000-0000-0000-000000000000"};
    assert_int_equal(kd_k8s_delete(cl, &KD_K8S_CONFIGMAPS, NS, "crud-1", &pre, NULL, &st, err),
                     KD_ECONFLICT);
    struct kd_k8s_delete_opts bg = {.propagation_policy = "Background",
                                    .precondition_uid = kd_k8s_meta_str(got, "uid")};
    OK(kd_k8s_delete(cl, &KD_K8S_CONFIGMAPS, NS, "crud-1", &bg, NULL, NULL, err_));

    /* gone: 404 → KD_ENOTFOUND with the Status */
    assert_int_equal(kd_k8s_get(cl, &KD_K8S_CONFIGMAPS, NS, "crud-1", &out, &st, err),
                     KD_ENOTFOUND);
    assert_null(out);
    assert_int_equal(st.http, 404);
    assert_string_equal(st.reason, "NotFound");
    assert_non_null(strstr(err, "configmaps \"crud-1\" not found"));
    assert_int_equal(kd_k8s_delete(cl, &KD_K8S_CONFIGMAPS, NS, "crud-1", NULL, NULL, &st, err),
                     KD_ENOTFOUND);
    /* calls by verb, failed ones included */
    kd_k8s_client_stats(cl, &s1);
    assert_int_equal(s1.creates - s0.creates, 2);
    assert_int_equal(s1.reads - s0.reads, 2);
    assert_int_equal(s1.updates - s0.updates, 2);
    assert_int_equal(s1.deletes - s0.deletes, 3);
    assert_int_equal(s1.patches - s0.patches, 0);
    assert_int_equal(s1.status_writes - s0.status_writes, 0);
    assert_int_equal(s1.watches - s0.watches, 0);
    assert_int_equal(s1.requests - s0.requests, 9);
    kd_k8s_status_free(&st);
    json_decref(cm);
    json_decref(got);
    json_decref(stale);
}

static void test_invalid_keeps_causes(void **state)
{
    (void)state;
    json_t *cm = configmap("Bad_Name", "a", "1");
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN];
    assert_int_equal(kd_k8s_create(cl, &KD_K8S_CONFIGMAPS, NS, cm, NULL, &st, err), KD_EINVALID);
    assert_int_equal(st.http, 422);
    assert_string_equal(st.reason, "Invalid");
    assert_true(json_array_size(st.causes) >= 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(st.causes, 0), "field")),
                        "metadata.name");
    assert_non_null(strstr(err, "metadata.name"));
    kd_k8s_status_free(&st);
    json_decref(cm);
    /* client-side checks name the problem before any request */
    assert_int_equal(kd_k8s_get(cl, &KD_K8S_CONFIGMAPS, NS, "", NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "name"));
    json_t *noname = json_pack("{s:{}}", "metadata");
    assert_int_equal(kd_k8s_update(cl, &KD_K8S_CONFIGMAPS, NS, NULL, noname, NULL, NULL, err),
                     KD_EINVAL);
    assert_non_null(strstr(err, "metadata.name"));
    json_decref(noname);
}

static void test_patch_types(void **state)
{
    (void)state;
    json_t *cm = configmap("patch-1", "a", "1"), *out = NULL, *p;
    OK(kd_k8s_create(cl, &KD_K8S_CONFIGMAPS, NS, cm, NULL, NULL, err_));
    p = json_pack("{s:{s:s,s:n}}", "data", "b", "2", "a");
    OK(kd_k8s_patch(cl, &KD_K8S_CONFIGMAPS, NS, "patch-1", NULL, KD_K8S_PATCH_MERGE, p, &out, NULL,
                    err_));
    json_decref(p);
    assert_null(json_object_get(json_object_get(out, "data"), "a"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "b")), "2");
    json_decref(out);
    p = json_pack("[{s:s,s:s,s:s},{s:s,s:s,s:s}]", "op", "test", "path", "/data/b", "value", "2",
                  "op", "add", "path", "/data/c", "value", "3");
    OK(kd_k8s_patch(cl, &KD_K8S_CONFIGMAPS, NS, "patch-1", NULL, KD_K8S_PATCH_JSON, p, &out, NULL,
                    err_));
    json_decref(p);
    assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "c")), "3");
    json_decref(out);
    /* a failing JSON-patch test op is refused by the server, with a typed error */
    char err[KD_ERRLEN];
    p = json_pack("[{s:s,s:s,s:s}]", "op", "test", "path", "/data/b", "value", "nope");
    int rc = kd_k8s_patch(cl, &KD_K8S_CONFIGMAPS, NS, "patch-1", NULL, KD_K8S_PATCH_JSON, p, NULL,
                          NULL, err);
    printf("failed test op: %s: %s\n", kd_err_name(rc), err);
    assert_true(rc == KD_EINVALID || rc == KD_ECONFLICT || rc == KD_EINVAL);
    json_decref(p);
    p = json_pack("{s:{s:s}}", "data", "d", "4");
    OK(kd_k8s_patch(cl, &KD_K8S_CONFIGMAPS, NS, "patch-1", NULL, KD_K8S_PATCH_STRATEGIC, p, &out,
                    NULL, err_));
    json_decref(p);
    assert_int_equal(json_object_size(json_object_get(out, "data")), 3);
    json_decref(out);
    /* the wrong shape for the patch type is caught before sending */
    p = json_object();
    assert_int_equal(kd_k8s_patch(cl, &KD_K8S_CONFIGMAPS, NS, "patch-1", NULL, KD_K8S_PATCH_JSON, p,
                                  NULL, NULL, err),
                     KD_EINVAL);
    assert_non_null(strstr(err, "array"));
    json_decref(p);
    OK(kd_k8s_delete(cl, &KD_K8S_CONFIGMAPS, NS, "patch-1", NULL, NULL, NULL, err_));
    json_decref(cm);
}

static void test_pagination(void **state)
{
    (void)state;
    const int n = 23;
    json_t *page = NULL, *all = NULL;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "page-%02d", i);
        json_t *cm = configmap(name, "i", name);
        json_object_set_new(json_object_get(json_object_get(cm, "metadata"), "labels"), "suite",
                            json_string("paging"));
        OK(kd_k8s_create(cl, &KD_K8S_CONFIGMAPS, NS, cm, NULL, NULL, err_));
        json_decref(cm);
    }
    struct kd_k8s_query q = {.label_selector = "suite=paging", .limit = 5};
    OK(kd_k8s_list(cl, &KD_K8S_CONFIGMAPS, NS, &q, &page, NULL, err_));
    assert_int_equal(json_array_size(json_object_get(page, "items")), 5);
    const char *cont =
        json_string_value(json_object_get(json_object_get(page, "metadata"), "continue"));
    assert_non_null(cont);
    assert_true(cont[0] != '\0');
    json_decref(page);

    struct kd_k8s_client_stats s0, s1;
    kd_k8s_client_stats(cl, &s0);
    q.limit = 7;
    OK(kd_k8s_list_all(cl, &KD_K8S_CONFIGMAPS, NS, &q, &all, NULL, err_));
    kd_k8s_client_stats(cl, &s1);
    assert_int_equal(json_array_size(json_object_get(all, "items")), n);
    assert_int_equal(s1.requests - s0.requests, 4); /* 7 + 7 + 7 + 2 */
    assert_int_equal(s1.connects, s0.connects);     /* the kept-alive connection served them */
    assert_null(json_object_get(json_object_get(all, "metadata"), "continue"));
    assert_non_null(kd_k8s_meta_str(all, "resourceVersion"));
    /* every item once */
    for (int i = 0; i < n; i++) {
        char name[32];
        int found = 0;
        size_t j;
        json_t *it;
        snprintf(name, sizeof(name), "page-%02d", i);
        json_array_foreach(json_object_get(all, "items"), j, it) found +=
            strcmp(kd_k8s_meta_str(it, "name"), name) == 0;
        assert_int_equal(found, 1);
    }
    json_decref(all);
}

static void test_status_subresource(void **state)
{
    (void)state;
    json_error_t je;
    json_t *crd = json_load_file("tests/data/k8s/widgets-crd.json", 0, &je), *out = NULL;
    struct kd_k8s_gvr crds = KD_K8S_GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    struct kd_k8s_gvr widgets = KD_K8S_GVR("test.kdet.io", "v1", "widgets");
    assert_non_null(crd);
    OK(kd_k8s_create(cl, &crds, NULL, crd, NULL, NULL, err_));
    json_decref(crd);
    json_t *w = json_pack("{s:s,s:s,s:{s:s},s:{s:i},s:{s:s}}", "apiVersion", "test.kdet.io/v1",
                          "kind", "Widget", "metadata", "name", "w1", "spec", "size", 2, "status",
                          "phase", "ignored-on-create");
    /* the CRD's kind may take a moment to be served */
    int rc = KD_ENOTFOUND;
    char err[KD_ERRLEN];
    for (int i = 0; i < 50 && rc == KD_ENOTFOUND; i++) {
        rc = kd_k8s_create(cl, &widgets, NS, w, &out, NULL, err);
        if (rc == KD_ENOTFOUND)
            kd_sleep_ms(100);
    }
    if (rc != 0)
        fail_msg("create widget: %s", err);
    assert_null(json_object_get(json_object_get(out, "status"), "phase"));
    struct kd_k8s_client_stats s0, s1;
    kd_k8s_client_stats(cl, &s0);
    /* update /status: status changes, spec changes are ignored */
    json_object_set_new(out, "status", json_pack("{s:s}", "phase", "Running"));
    json_object_set_new(json_object_get(out, "spec"), "size", json_integer(9));
    json_t *st1 = NULL;
    OK(kd_k8s_update(cl, &widgets, NULL, "status", out, &st1, NULL, err_));
    assert_string_equal(json_string_value(json_object_get(json_object_get(st1, "status"), "phase")),
                        "Running");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st1, "spec"), "size")), 2);
    /* patch /status */
    json_t *p = json_pack("{s:{s:s}}", "status", "phase", "Done"), *st2 = NULL;
    OK(kd_k8s_patch(cl, &widgets, NS, "w1", "status", KD_K8S_PATCH_MERGE, p, &st2, NULL, err_));
    assert_string_equal(json_string_value(json_object_get(json_object_get(st2, "status"), "phase")),
                        "Done");
    /* the stale object's status update conflicts */
    assert_int_equal(kd_k8s_update(cl, &widgets, NULL, "status", st1, NULL, NULL, err),
                     KD_ECONFLICT);
    /* the three status writes are counted as such */
    kd_k8s_client_stats(cl, &s1);
    assert_int_equal(s1.status_writes - s0.status_writes, 3);
    assert_int_equal(s1.updates - s0.updates, 2);
    assert_int_equal(s1.patches - s0.patches, 1);
    json_decref(p);
    json_decref(st1);
    json_decref(st2);
    json_decref(out);
    json_decref(w);
}

static void test_body_cap(void **state)
{
    (void)state;
    struct kd_k8s_client_opts o = {.max_body = 512};
    struct kd_k8s_client *small = kl_client(&server, &o);
    struct kd_k8s_query q = {.label_selector = "suite=paging"};
    json_t *out = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(kd_k8s_list(small, &KD_K8S_CONFIGMAPS, NS, &q, &out, NULL, err), KD_ETOOBIG);
    assert_null(out);
    assert_non_null(strstr(err, "larger than 512 bytes"));
    kd_k8s_client_free(small);
}

static void test_connection_retries(void **state)
{
    (void)state;
    /* a port where nothing listens: connect errors are retried with backoff, then reported */
    struct kd_k8s_config cfg = {.server = "http://127.0.0.1:1", .namespace = "default"};
    struct kd_k8s_client_opts o = {.max_retries = 3, .backoff_base_ms = 40, .backoff_max_ms = 100};
    struct kd_k8s_client *c = NULL;
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN];
    struct kd_k8s_client_stats s;
    assert_int_equal(kd_k8s_client_new(&cfg, &o, &c, err), 0);
    int64_t t0 = kd_mono_ms();
    assert_int_equal(kd_k8s_get(c, &KD_K8S_CONFIGMAPS, NS, "x", NULL, &st, err), KD_ECONNECT);
    int64_t dt = kd_mono_ms() - t0;
    kd_k8s_client_stats(c, &s);
    printf("connect error after %llu attempts, %lld ms: %s\n", (unsigned long long)s.requests,
           (long long)dt, err);
    assert_int_equal(s.requests, 4);
    assert_int_equal(s.retries, 3);
    assert_int_equal(s.reads, 1);    /* one call, four attempts */
    assert_true(dt >= 20 + 40 + 50); /* at least half of 40, 80, 100 */
    assert_int_equal(st.http, 0);
    assert_non_null(strstr(err, "GET /api/v1/namespaces/default/configmaps/x"));
    /* POST is retried too when the connection could not be opened (nothing was sent) */
    json_t *cm = configmap("x", "a", "b");
    assert_int_equal(kd_k8s_create(c, &KD_K8S_CONFIGMAPS, NS, cm, NULL, NULL, err), KD_ECONNECT);
    kd_k8s_client_stats(c, &s);
    assert_int_equal(s.requests, 8);
    json_decref(cm);
    kd_k8s_client_free(c);
}

struct getter {
    struct kd_k8s_client *c;
    int ok;
    int64_t ms;
};

static void *get_many(void *arg)
{
    struct getter *g = arg;
    int64_t t0 = kd_mono_ms();
    for (int i = 0; i < 100; i++) {
        json_t *out = NULL;
        if (kd_k8s_get(g->c, &KD_K8S_CONFIGMAPS, NS, "page-00", &out, NULL, NULL) == 0)
            g->ok++;
        json_decref(out);
    }
    g->ms = kd_mono_ms() - t0;
    return NULL;
}

static void test_keepalive_and_threads(void **state)
{
    (void)state;
    struct kd_k8s_client_stats s0, s1;
    struct kd_k8s_client_opts o = {.qps = -1}; /* no client-side limit: measure the transport */
    struct kd_k8s_client *c = kl_client(&server, &o);
    pthread_t t[4];
    struct getter g[4] = {{0}};
    kd_k8s_client_stats(c, &s0);
    for (int i = 0; i < 4; i++) {
        g[i].c = c;
        assert_int_equal(pthread_create(&t[i], NULL, get_many, &g[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    kd_k8s_client_stats(c, &s1);
    kd_k8s_client_free(c);
    printf("400 GETs from 4 threads: %lld ms, %llu new connections\n", (long long)g[0].ms,
           (unsigned long long)(s1.connects - s0.connects));
    for (int i = 0; i < 4; i++)
        assert_int_equal(g[i].ok, 100);
    assert_int_equal(s1.requests - s0.requests, 400);
    assert_true(s1.connects - s0.connects <= 4); /* pooled handles keep their connections */
}

static void test_bearer_token(void **state)
{
    (void)state;
    struct kl ts = {0};
    char tokpath[160], logpath[160], err[KD_ERRLEN];
    const char *token = "kd-test-token-3a9f1c77e2";
    snprintf(ts.dir, sizeof(ts.dir), "/tmp/kd-k8s-tok-XXXXXX");
    assert_non_null(mkdtemp(ts.dir));
    snprintf(tokpath, sizeof(tokpath), "%s/token", ts.dir);
    FILE *f = fopen(tokpath, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", token);
    fclose(f);
    /* plain HTTP, so that the clients below can be built by hand from the port */
    const char *extra[] = {"--token-file", tokpath, "--plain-http", NULL};
    kl_start(&ts, extra, 0);
    /* log everything at debug level to a file, then look for the token in it */
    snprintf(logpath, sizeof(logpath), "%s/client.log", ts.dir);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    kd_log_init("test", KD_LOG_DEBUG, fd);
    struct kd_k8s_client *c = kl_client(&ts, NULL); /* the kubeconfig carries the token */
    json_t *out = NULL;
    OK(kd_k8s_list(c, &KD_K8S_CONFIGMAPS, NS, NULL, &out, NULL, err_));
    json_decref(out);
    kd_k8s_client_free(c);
    /* without the token: 401 → KD_EUNAUTHORIZED; with a wrong one too */
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ts.port);
    struct kd_k8s_config cfg = {.server = url, .namespace = "default"};
    assert_int_equal(kd_k8s_client_new(&cfg, NULL, &c, err), 0);
    assert_int_equal(kd_k8s_list(c, &KD_K8S_CONFIGMAPS, NS, NULL, &out, NULL, err),
                     KD_EUNAUTHORIZED);
    kd_k8s_client_free(c);
    cfg.token = "wrong-token-value-1234";
    assert_int_equal(kd_k8s_client_new(&cfg, NULL, &c, err), 0);
    assert_int_equal(kd_k8s_list(c, &KD_K8S_CONFIGMAPS, NS, NULL, &out, NULL, err),
                     KD_EUNAUTHORIZED);
    assert_null(strstr(err, "wrong-token-value"));
    kd_k8s_client_free(c);
    /* a rotated token file: the 401 makes the client re-read it and retry once */
    char stale[160];
    snprintf(stale, sizeof(stale), "%s/client-token", ts.dir);
    f = fopen(stale, "w");
    assert_non_null(f);
    fprintf(f, "old-token-before-rotation\n");
    fclose(f);
    cfg.token = NULL;
    cfg.token_file = stale;
    assert_int_equal(kd_k8s_client_new(&cfg, NULL, &c, err), 0);
    assert_int_equal(kd_k8s_list(c, &KD_K8S_CONFIGMAPS, NS, NULL, &out, NULL, err),
                     KD_EUNAUTHORIZED);
    f = fopen(stale, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", token);
    fclose(f);
    OK(kd_k8s_list(c, &KD_K8S_CONFIGMAPS, NS, NULL, &out, NULL, err_));
    json_decref(out);
    kd_k8s_client_free(c);
    kd_log_init("test", KD_LOG_ERROR, -1);
    close(fd);
    char buf[65536];
    f = fopen(logpath, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_true(n > 0); /* requests were logged at debug level... */
    assert_non_null(strstr(buf, "kubernetes request"));
    assert_null(strstr(buf, token)); /* ...without the token */
    assert_null(strstr(buf, "wrong-token-value"));
    kl_destroy(&ts);
}

int main(void)
{
    kd_log_init("test", KD_LOG_ERROR, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crud_and_conflict),  cmocka_unit_test(test_invalid_keeps_causes),
        cmocka_unit_test(test_patch_types),        cmocka_unit_test(test_pagination),
        cmocka_unit_test(test_status_subresource), cmocka_unit_test(test_body_cap),
        cmocka_unit_test(test_connection_retries), cmocka_unit_test(test_keepalive_and_threads),
        cmocka_unit_test(test_bearer_token),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
