/*
 * controller/api/check.c, the API's request checks that need no database:
 * routing (404/405 and Allow), bearer tokens, body caps, and the JSON
 * bodies of the worker and user routes, each refusal naming its field.
 * Table-driven; fuzz_api checks the same functions on arbitrary requests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/check.h"
#include "api/routes.h"
#include "k8s/jobupdate.h"

#define ROUTE(method, pattern, auth, max_body, fn) {method, pattern, auth, max_body, NULL},
static const struct api_route routes[] = {API_ROUTES(ROUTE)};
#undef ROUTE
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

static void test_routes(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path, *pattern, *allow;
    } cases[] = {
        {"POST", "/api/v1/namespaces/ns/trials/t/metrics", API_NSP "trials/*/metrics", ""},
        {"GET", "/api/v1/namespaces/ns/trials/t/metrics", API_NSP "trials/*/metrics", ""},
        {"HEAD", "/api/v1/jobs", "api/v1/jobs", ""},
        {"GET", "//api//v1///jobs/", "api/v1/jobs", ""},
        {"DELETE", "/api/v1/namespaces/ns/trials/t/metrics", NULL, "POST, GET"},
        {"POST", "/api/v1/users/alice", NULL, "PATCH"},
        {"GET", "/api/v1/namespaces/ns/experiments/e/metrics", API_NSP "experiments/*/metrics", ""},
        {"PATCH", "/api/v1/namespaces/ns/jobs/e", API_NSP "jobs/*", ""},
        {"GET", "/api/v1/namespaces/ns/jobs/e", NULL, "PATCH"},
        {"GET", "/api/v1/nothing", NULL, ""},
        {"GET", "/a/b/c/d/e/f/g/h/i/j/k/l/m", NULL, ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct api_match m;
        char *path = strdup(cases[i].path);
        const struct api_route *r = api_route_find(routes, NROUTES, cases[i].method, path, &m);
        if (cases[i].pattern == NULL) {
            assert_null(r);
            assert_string_equal(m.allow, cases[i].allow);
        } else {
            assert_non_null(r);
            assert_string_equal(r->pattern, cases[i].pattern);
        }
        free(path);
    }
}

static void test_bearer_and_cap(void **state)
{
    (void)state;
    char big[API_MAX_TOKEN + 16];
    assert_string_equal(api_bearer("Bearer abc"), "abc");
    assert_string_equal(api_bearer("bEaReR abc"), "abc");
    assert_null(api_bearer(NULL));
    assert_null(api_bearer("Bearer "));
    assert_null(api_bearer("Basic abc"));
    assert_null(api_bearer("Bearerabc"));
    memcpy(big, "Bearer ", 7);
    memset(big + 7, 'x', API_MAX_TOKEN + 1);
    big[7 + API_MAX_TOKEN + 1] = '\0';
    assert_null(api_bearer(big));
    big[7 + API_MAX_TOKEN] = '\0';
    assert_non_null(api_bearer(big));

    const struct api_route get = {"GET", "api/v1/jobs", AUTH_USER, 0, NULL};
    const struct api_route post = {"POST", "x", AUTH_USER, 100, NULL};
    struct api_verr e;
    unsigned long long len;
    assert_int_equal(api_body_cap(&get, "GET", "/api/v1/jobs", NULL, &len, &e), 0);
    assert_int_equal(api_body_cap(&get, "GET", "/api/v1/jobs", "0", &len, &e), 0);
    assert_int_equal(api_body_cap(&get, "GET", "/api/v1/jobs", "1", &len, &e), 413);
    assert_string_equal(e.field, "body");
    assert_non_null(strstr(e.msg, "takes no request body; 1 bytes were announced"));
    assert_int_equal(api_body_cap(&post, "POST", "/x", "100", &len, &e), 0);
    assert_int_equal(api_body_cap(&post, "POST", "/x", "999999999999999999", &len, &e), 413);
    assert_non_null(strstr(e.msg, "accepts at most 100 bytes"));
}

/* A body check's verdict: status and field. */
struct body_case {
    const char *json;
    int status;
    const char *field;
};

static void run_cases(const struct body_case *c, size_t n,
                      int (*check)(const json_t *body, struct api_verr *e))
{
    for (size_t i = 0; i < n; i++) {
        struct api_verr e = {0};
        json_t *body = NULL;
        int rc = api_check_json(c[i].json, strlen(c[i].json), 1 << 20, &body, &e);
        if (rc == 0)
            rc = check(body, &e);
        if (rc != c[i].status)
            fail_msg("%s: %d (%s: %s), expected %d", c[i].json, rc, e.field, e.msg, c[i].status);
        if (rc != 0) {
            assert_string_equal(e.field, c[i].field);
            assert_non_null(strstr(e.msg, strcmp(e.field, "body") == 0 ? "" : e.field));
        }
        json_decref(body);
    }
}

static int checkpoint(const json_t *body, struct api_verr *e)
{
    struct api_checkpoint_req ck;
    return api_check_checkpoint(body, &ck, e);
}

static void test_checkpoint_ids(void **state)
{
    (void)state;
#define CK(uuid) "{\"uuid\":\"" uuid "\",\"batches\":1,\"storage_path\":\"p\",\"size\":2}"
    static const struct body_case cases[] = {
        {CK("6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11"), 0, NULL},
        {CK("../../../etc/passwd"), 400, "uuid"},
        {CK("6F1D0C1E-2A5B-4B8E-9A55-0A4C6E0B7C11"), 400, "uuid"},
        {CK("6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11/../x"), 400, "uuid"},
        {CK("6f1d0c1e2a5b4b8e9a550a4c6e0b7c11"), 400, "uuid"},
        {CK(""), 400, "uuid"},
        {"{\"uuid\":7}", 400, "uuid"},
        {"[1]", 400, "body"},
        {"{\"uuid\":\"a\",\"uuid\":\"b\"}", 400, "body"},
        {"", 400, "body"},
        {CK("6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11") "x", 400, "body"},
        {"{\"uuid\":\"6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11\",\"batches\":-1}", 400, "batches"},
        {"{\"uuid\":\"6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11\",\"batches\":1,\"storage_path\":"
         "\"p\",\"size\":1,\"metadata\":[]}",
         400, "metadata"},
    };
#undef CK
    run_cases(cases, sizeof(cases) / sizeof(cases[0]), checkpoint);
}

static int user_create(const json_t *body, struct api_verr *e)
{
    struct api_user_req u;
    return api_check_user(body, true, &u, e);
}

/* A key that is empty is named as "" (fuzz_api found it refused with an empty field). */
static void test_fields_named(void **state)
{
    (void)state;
    static const struct body_case cases[] = {
        {"{\"\":1}", 400, "\"\""},
        {"{\"name\":\"alice\",\"nmae\":1}", 400, "nmae"},
        {"{\"name\":\"alice\",\"namespaces\":[\"team-a\",\"Team_B\"]}", 400, "namespaces[1]"},
        {"{\"name\":\"-alice\"}", 400, "name"},
        {"{\"name\":\"alice\",\"admin\":\"yes\"}", 400, "admin"},
        {"{\"name\":\"alice\",\"namespaces\":[\"*\"],\"admin\":true}", 0, NULL},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]), user_create);

    struct api_verr e;
    struct kd_metric_row *rows = NULL;
    size_t n;
    json_t *r = json_loads("[{\"batches\":1,\"metrics\":{}},{\"batches\":2,\"metrics\":{},\"\":0}]",
                           0, NULL);
    assert_int_equal(api_check_metric_rows(r, NULL, NULL, false, &rows, &n, &e), 400);
    assert_string_equal(e.field, "rows[1].\"\"");
    assert_null(rows);
    json_decref(r);
}

/*
 * Where each row's metrics text lies in a metrics body: found only when
 * certain, and then the text parses to the very object jansson gave.
 */
static void test_metric_spans(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        bool found;
        const char *first; /* rows[0]'s metrics text when found */
    } cases[] = {
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":{\"a\":1}},"
         "{\"metrics\":{\"a\":2.5e-3},\"batches\":2}]}",
         true, "{\"a\":1}"},
        {" { \"rows\" : [ { \"batches\" : 1 , \"metrics\" : { \"a\" : 1 } } ] , \"key\":\"k\","
         "\"kind\":\"training\" } ",
         true, "{ \"a\" : 1 }"},
        /* Brackets, braces and escaped quotes inside strings do not end anything. */
        {"{\"key\":\"]}\",\"kind\":\"training\",\"rows\":[{\"batches\":1,\"metrics\":"
         "{\"tag\":\"a]\\\"}b\",\"x\":[1,{\"y\":\"}\"}]}}]}",
         true, "{\"tag\":\"a]\\\"}b\",\"x\":[1,{\"y\":\"}\"}]}"},
        /* A key written with an escape might spell rows or metrics: unsure. */
        {"{\"k\\u0069nd\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":{}}]}",
         false, NULL},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"m\\u0065trics\":{}}]}",
         false, NULL},
        /* Line breaks: the spool and the event stream want one line. */
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[\n{\"batches\":1,\"metrics\":{}}]}", false,
         NULL},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":{\"a\":\r1}}]}",
         false, NULL},
        /* A line break outside the rows does no harm. */
        {"{\"kind\":\"training\",\n\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":{}}]}\n",
         true, "{}"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *t = cases[c].body;
        json_t *body = json_loads(t, JSON_REJECT_DUPLICATES, NULL);
        assert_non_null(body);
        struct kd_metric_row *rows = NULL;
        size_t n = 0;
        struct api_verr e;
        struct api_span all = {0, 0};
        assert_int_equal(
            api_check_metric_rows(json_object_get(body, "rows"), NULL, NULL, false, &rows, &n, &e),
            0);
        bool found = api_metric_spans(t, strlen(t), rows, n, &all);
        if (found != cases[c].found)
            fail_msg("case %zu: found %d, want %d", c, found, cases[c].found);
        for (size_t i = 0; i < n; i++) {
            if (!found) {
                assert_null(rows[i].raw);
                continue;
            }
            json_t *m = json_loadb(rows[i].raw, rows[i].raw_len, 0, NULL);
            if (!json_equal(m, rows[i].metrics))
                fail_msg("case %zu row %zu: %.*s", c, i, (int)rows[i].raw_len, rows[i].raw);
            json_decref(m);
        }
        if (found) {
            assert_int_equal(rows[0].raw_len, strlen(cases[c].first));
            assert_memory_equal(rows[0].raw, cases[c].first, rows[0].raw_len);
            json_t *a = json_loadb(t + all.off, all.len, 0, NULL);
            assert_true(json_equal(a, json_object_get(body, "rows")));
            json_decref(a);
        }
        /* One row fewer or more than the text holds: not found. */
        if (n > 1)
            assert_false(api_metric_spans(t, strlen(t), rows, n - 1, &all));
        free(rows);
        json_decref(body);
    }
}

static int rendezvous(const json_t *body, struct api_verr *e)
{
    struct api_rendezvous_req rv;
    return api_check_rendezvous(body, &rv, e);
}

static void test_rendezvous(void **state)
{
    (void)state;
    static const struct body_case cases[] = {
        {"{\"run_id\":\"r-1\",\"address\":\"10.0.0.1\",\"port\":29500}", 0, NULL},
        {"{\"run_id\":\"r 1\",\"address\":\"10.0.0.1\",\"port\":29500}", 400, "run_id"},
        {"{\"run_id\":\"r\",\"address\":\"h/x\",\"port\":29500}", 400, "address"},
        {"{\"run_id\":\"r\",\"address\":\"h\",\"port\":65536}", 400, "port"},
        {"{\"run_id\":\"r\",\"address\":\"h\",\"port\":1.5}", 400, "port"},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]), rendezvous);
}

static int job_update(const json_t *body, struct api_verr *e)
{
    struct kd_queue_update u;
    return api_check_job_update(body, &u, e);
}

static void test_job_update(void **state)
{
    (void)state;
    static const struct body_case cases[] = {
        {"{\"priority\":10}", 0, NULL},
        {"{\"ahead_of\":\"exp-2\"}", 0, NULL},
        {"{\"behind_of\":\"exp-2\",\"priority\":99,\"resource_pool\":\"gpu.a\"}", 0, NULL},
        {"{}", 400, "priority"},
        {"{\"priority\":0}", 400, "priority"},
        {"{\"priority\":100}", 400, "priority"},
        {"{\"priority\":\"1\"}", 400, "priority"},
        {"{\"ahead_of\":\"Exp_2\"}", 400, "ahead_of"},
        {"{\"ahead_of\":\"\"}", 400, "ahead_of"},
        {"{\"behind_of\":7}", 400, "behind_of"},
        {"{\"ahead_of\":\"a\",\"behind_of\":\"b\"}", 400, "behind_of"},
        {"{\"resource_pool\":\"a b\"}", 400, "resource_pool"},
        {"{\"position\":1}", 400, "position"},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]), job_update);
}

/* The patch det job update and the API both send (lib/k8s/position.c). */
static void test_job_patch(void **state)
{
    (void)state;
    json_t *me = json_loads("{\"kind\":\"Experiment\",\"spec\":{}}", 0, NULL);
    json_t *it =
        json_loads("{\"kind\":\"Experiment\",\"spec\":{\"resources\":{\"priority\":30}}}", 0, NULL);
    char said[256];
    struct kd_queue_update u = {0, "exp-2", NULL, NULL};
    json_t *p = kd_queue_update_patch(me, it, &u, said, sizeof(said));
    char *s = json_dumps(p, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s,
                        "{\"metadata\":{\"annotations\":{\"kdet.io/ahead-of\":\"exp-2\","
                        "\"kdet.io/behind-of\":null}},\"spec\":{\"resources\":{\"priority\":30}}}");
    assert_string_equal(said, "ahead of exp-2 (priority 30, as exp-2's)");
    free(s);
    json_decref(p);
    struct kd_queue_update v = {5, NULL, NULL, NULL};
    p = kd_queue_update_patch(me, NULL, &v, said, sizeof(said));
    s = json_dumps(p, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"spec\":{\"resources\":{\"priority\":5}}}");
    free(s);
    json_decref(p);
    json_decref(me);
    json_decref(it);
}

/* What each kind of namespaced route asks Kubernetes RBAC (--authz kubernetes). */
static void test_authz_attrs(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path, *verb, *resource, *sub, *name;
    } cases[] = {
        {"GET", "/api/v1/namespaces/t/experiments", "list", "experiments", "", ""},
        {"GET", "/api/v1/namespaces/t/experiments/e1", "get", "experiments", "", "e1"},
        {"GET", "/api/v1/namespaces/t/experiments/e1/trials", "get", "experiments", "", "e1"},
        {"GET", "/api/v1/namespaces/t/experiments/e1/metrics", "get", "experiments", "", "e1"},
        {"GET", "/api/v1/namespaces/t/experiments/e1/logs", "get", "experiments", "logs", "e1"},
        {"GET", "/api/v1/namespaces/t/experiments/e1/logs/stream", "get", "experiments", "logs",
         "e1"},
        {"POST", "/api/v1/namespaces/t/experiments/e1/pause", "update", "experiments", "", "e1"},
        {"POST", "/api/v1/namespaces/t/experiments/e1/cancel", "update", "experiments", "", "e1"},
        {"GET", "/api/v1/namespaces/t/trials/r1", "get", "trials", "", "r1"},
        {"GET", "/api/v1/namespaces/t/trials/r1/logs", "get", "trials", "logs", "r1"},
        {"POST", "/api/v1/namespaces/t/trials/r1/kill", "update", "trials", "", "r1"},
        {"GET", "/api/v1/namespaces/t/checkpoints/c1", "get", "checkpoints", "", "c1"},
        {"GET", "/api/v1/namespaces/t/tasks", "list", "tasks", "", ""},
        {"POST", "/api/v1/namespaces/t/tasks/k1/kill", "update", "tasks", "", "k1"},
        {"POST", "/api/v1/namespaces/t/tasks/k1/proxy-ticket", "create", "tasks", "proxy", "k1"},
        {"GET", "/api/v1/namespaces/t/models", "list", "models", "", ""},
        {"POST", "/api/v1/namespaces/t/models", "create", "models", "", ""},
        {"PATCH", "/api/v1/namespaces/t/models/m1", "update", "models", "", "m1"},
        {"DELETE", "/api/v1/namespaces/t/models/m1", "delete", "models", "", "m1"},
        {"POST", "/api/v1/namespaces/t/models/m1/versions", "update", "models", "", "m1"},
        {"DELETE", "/api/v1/namespaces/t/models/m1/versions/2", "update", "models", "", "m1"},
        {"GET", "/api/v1/namespaces/t/models/m1/versions/2", "get", "models", "", "m1"},
        {"GET", "/api/v1/namespaces/t/models/m1/versions/2/download", "get", "models", "download",
         "m1"},
        {"HEAD", "/api/v1/namespaces/t/models/m1/versions/2/download", "get", "models", "download",
         "m1"},
        {"POST", "/api/v1/namespaces/t/models/m1/versions/2/download-link", "get", "models",
         "download", "m1"},
        {"GET", "/api/v1/namespaces/t/checkpoints/c1/download", "get", "checkpoints", "download",
         "c1"},
        {"POST", "/api/v1/namespaces/t/checkpoints/c1/download-link", "get", "checkpoints",
         "download", "c1"},
        {"PATCH", "/api/v1/namespaces/t/jobs/j1", "update", "jobs", "", "j1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[256];
        struct api_match m;
        struct api_authz_attrs at;
        snprintf(path, sizeof(path), "%s", cases[i].path);
        const struct api_route *r =
            api_route_find(routes, sizeof(routes) / sizeof(routes[0]), cases[i].method, path, &m);
        if (r == NULL)
            fail_msg("%s %s: no route", cases[i].method, cases[i].path);
        assert_int_equal(api_authz_attrs(cases[i].method, r->pattern, m.seg, m.nseg, &at), 0);
        if (strcmp(at.verb, cases[i].verb) != 0 || strcmp(at.resource, cases[i].resource) != 0 ||
            strcmp(at.subresource, cases[i].sub) != 0 || strcmp(at.name, cases[i].name) != 0)
            fail_msg("%s %s: got %s %s/%s name %s, want %s %s/%s name %s", cases[i].method,
                     cases[i].path, at.verb, at.resource, at.subresource, at.name, cases[i].verb,
                     cases[i].resource, cases[i].sub, cases[i].name);
    }
    /* every namespaced route has attributes; the others have none */
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        struct api_authz_attrs at;
        const char *seg[8] = {"api", "v1", "namespaces", "t", "x", "n"};
        int rc = api_authz_attrs(routes[i].method, routes[i].pattern, seg, 6, &at);
        if ((api_route_ns_seg(routes[i].pattern) >= 0) != (rc == 0))
            fail_msg("%s %s: api_authz_attrs %d", routes[i].method, routes[i].pattern, rc);
        if (rc == 0 && (at.verb[0] == '\0' || at.resource[0] == '\0'))
            fail_msg("%s %s: no verb or resource", routes[i].method, routes[i].pattern);
    }
}

/* A download's name: safe in a quoted Content-Disposition filename and as a path element. */
static void test_download_stem(void **state)
{
    (void)state;
    const struct {
        const char *name;
        int64_t version;
        const char *want;
    } cases[] = {
        {"mnist", 2, "mnist-v2"},
        {"a.b_c-D9", 12, "a.b_c-D9-v12"},
        {"0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d", 0, "0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"},
        {"..", 0, "_."},
        {".hidden", 1, "_hidden-v1"},
        {"a\"b;c d/e\\f\r\n", 3, "a_b_c_d_e_f__-v3"},
        {"ümlaut", 1, "__mlaut-v1"},
        {"", 4, "model-v4"},
        {"", 0, "checkpoint"},
        {NULL, 0, "checkpoint"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[300];
        api_download_stem(cases[i].name, cases[i].version, out, sizeof(out));
        assert_string_equal(out, cases[i].want);
    }
    char longname[400], out[300];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    api_download_stem(longname, 7, out, sizeof(out));
    assert_int_equal(strlen(out), 200 + 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),         cmocka_unit_test(test_bearer_and_cap),
        cmocka_unit_test(test_checkpoint_ids), cmocka_unit_test(test_fields_named),
        cmocka_unit_test(test_rendezvous),     cmocka_unit_test(test_job_update),
        cmocka_unit_test(test_job_patch),      cmocka_unit_test(test_authz_attrs),
        cmocka_unit_test(test_download_stem),  cmocka_unit_test(test_metric_spans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
