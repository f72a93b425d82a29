/*
 * The user endpoints against a real private PostgreSQL and kdet-local:
 * listing experiments and trials, pause/activate/cancel as spec patches,
 * events, one checkpoint by uuid, the job queue, the user token, and the
 * server-sent-event stream of new metrics for a trial and for an experiment.
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
#include <curl/curl.h>

#include "core/buf.h"
#include "core/time.h"
#include "fx.h"

#define NSP "/api/v1/namespaces/default/"

static json_t *exp_json(const char *name)
{
    char err[KD_ERRLEN];
    json_t *o = NULL;
    assert_int_equal(kd_k8s_get(fx.k8s, &KD_K8S_EXPERIMENTS, "default", name, &o, NULL, err), 0);
    return o;
}

static void test_user_token(void **state)
{
    (void)state;
    assert_int_equal(fx_http("GET", NSP "experiments", NULL, NULL, NULL), 401);
    assert_int_equal(fx_http("GET", NSP "experiments", "wrong", NULL, NULL), 401);
    assert_int_equal(fx_http("GET", NSP "experiments", FX_USER_TOKEN "x", NULL, NULL), 401);
    assert_int_equal(fx_http("GET", NSP "experiments", FX_USER_TOKEN, NULL, NULL), 200);
    assert_int_equal(fx_http("GET", "/healthz", NULL, NULL, NULL), 200);
    /* Another namespace than the one served. */
    assert_int_equal(
        fx_http("GET", "/api/v1/namespaces/other/experiments/x", FX_USER_TOKEN, NULL, NULL), 404);
}

/* GET /api/v1/info: the slot settings det counts with; a bad slot type is refused at start. */
static void test_info(void **state)
{
    (void)state;
    json_t *out = NULL;
    assert_int_equal(fx_http("GET", "/api/v1/info", NULL, NULL, NULL), 401);
    assert_int_equal(fx_http("GET", "/api/v1/info", FX_USER_TOKEN, NULL, &out), 200);
    json_t *sl = json_object_get(out, "slots");
    assert_string_equal(json_string_value(json_object_get(sl, "slot_type")), "auto");
    assert_int_equal(json_integer_value(json_object_get(sl, "cpu_per_slot_milli")), 1000);
    assert_int_equal(json_integer_value(json_object_get(sl, "max_slots_per_pod")), 0);
    json_decref(out);
    char err[KD_ERRLEN] = "";
    struct kd_api *api = NULL;
    struct kd_api_opts o = {.store = fx.store,
                            .k8s = fx.k8s,
                            .token_key = fx_key,
                            .token_key_len = sizeof(fx_key),
                            .slot_type = "tpu"};
    assert_int_equal(kd_api_start(&o, &api, err), KD_EINVAL);
    assert_non_null(strstr(err, "slot_type must be auto, gpu or cpu"));
    assert_null(api);
}

static void test_user_api_disabled(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "", url[64];
    struct kd_api *api = NULL;
    struct kd_api_opts o = {.store = fx.store,
                            .k8s = fx.k8s,
                            .ns = "default",
                            .token_key = fx_key,
                            .token_key_len = sizeof(fx_key)};
    /* A short key is refused, naming the option. */
    o.token_key_len = 8;
    assert_int_equal(kd_api_start(&o, &api, err), KD_EINVAL);
    assert_non_null(strstr(err, "token_key"));
    o.token_key_len = sizeof(fx_key);
    assert_int_equal(kd_api_start(&o, &api, err), 0);
    /* Without a bootstrap token only the store's user tokens open the user endpoints. */
    snprintf(url, sizeof(url), "%s", fx.url);
    snprintf(fx.url, sizeof(fx.url), "http://127.0.0.1:%d", kd_api_port(api));
    json_t *out = NULL;
    assert_int_equal(fx_http("GET", NSP "experiments", FX_USER_TOKEN, NULL, &out), 401);
    assert_non_null(strstr(json_string_value(json_object_get(out, "error")), "user token"));
    json_decref(out);
    assert_int_equal(fx_http("GET", NSP "experiments", "", NULL, NULL), 401);
    snprintf(fx.url, sizeof(fx.url), "%s", url);
    kd_api_stop(api);
}

static void test_experiments_and_actions(void **state)
{
    (void)state;
    char uid[64];
    json_t *out = NULL;
    fx_experiment("u-exp", "validation_loss");
    fx_trial("u-exp", "u-exp-1", 100, uid, sizeof(uid));
    fx_trial("u-exp", "u-exp-2", 100, uid, sizeof(uid));
    for (int i = 0; i < 100; i++) { /* the informers see the new objects */
        fx_http("GET", NSP "experiments/u-exp", FX_USER_TOKEN, NULL, &out);
        size_t n = json_array_size(json_object_get(out, "trials"));
        json_decref(out);
        if (n == 2)
            break;
        assert_true(i < 99);
        kd_sleep_ms(50);
    }
    assert_int_equal(fx_http("GET", NSP "experiments", FX_USER_TOKEN, NULL, &out), 200);
    bool found = false;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(out, "experiments"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")), "u-exp") == 0)
            found = true;
    }
    assert_true(found);
    json_decref(out);
    assert_int_equal(fx_http("GET", NSP "experiments/u-exp/trials", FX_USER_TOKEN, NULL, &out),
                     200);
    json_t *ts = json_object_get(out, "trials");
    assert_int_equal(json_array_size(ts), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ts, 0), "name")),
                        "u-exp-1");
    json_decref(out);
    assert_int_equal(fx_http("GET", NSP "experiments/nope", FX_USER_TOKEN, NULL, &out), 404);
    json_decref(out);

    /* pause / activate / cancel / archive map onto spec. */
    assert_int_equal(fx_http("POST", NSP "experiments/u-exp/pause", FX_USER_TOKEN, NULL, NULL),
                     200);
    json_t *x = exp_json("u-exp");
    assert_true(json_is_true(json_object_get(json_object_get(x, "spec"), "paused")));
    json_decref(x);
    assert_int_equal(fx_http("POST", NSP "experiments/u-exp/activate", FX_USER_TOKEN, NULL, NULL),
                     200);
    x = exp_json("u-exp");
    assert_true(json_is_false(json_object_get(json_object_get(x, "spec"), "paused")));
    json_decref(x);
    assert_int_equal(fx_http("POST", NSP "experiments/u-exp/cancel", FX_USER_TOKEN, NULL, NULL),
                     200);
    x = exp_json("u-exp");
    assert_true(json_is_true(json_object_get(json_object_get(x, "spec"), "canceled")));
    json_decref(x);
    assert_int_equal(fx_http("POST", NSP "experiments/u-exp/archive", FX_USER_TOKEN, NULL, NULL),
                     200);
    assert_int_equal(fx_http("POST", NSP "experiments/nope/pause", FX_USER_TOKEN, NULL, NULL), 404);
    assert_int_equal(fx_http("GET", NSP "experiments/u-exp/pause", FX_USER_TOKEN, NULL, NULL), 405);
    assert_string_equal(fx_last_header("Allow"), "POST");
}

static void test_events_and_jobs(void **state)
{
    (void)state;
    char uid[64], tok[64], err[KD_ERRLEN];
    json_t *out = NULL;
    fx_experiment("u-ev", "validation_loss");
    fx_trial("u-ev", "u-ev-1", 100, uid, sizeof(uid));
    fx_trial("u-ev", "u-ev-2", 100, uid, sizeof(uid));
    fx_patch("trials", "u-ev-2", "status",
             "{\"status\":{\"state\":\"QUEUED\",\"message\":\"waiting for 2 slots\"}}");
    fx_patch("trials", "u-ev-2", NULL, "{\"spec\":{\"resources\":{\"priority\":10,\"slots\":2}}}");
    /* No data stored yet: empty lists. */
    assert_int_equal(fx_http("GET", NSP "experiments/u-ev/events", FX_USER_TOKEN, NULL, &out), 200);
    assert_int_equal(json_array_size(json_object_get(out, "events")), 0);
    json_decref(out);
    /* The store rows appear with the first report; events are listed after an id. */
    json_t *t = fx_get_trial("u-ev-1");
    fx_token("u-ev-1", kd_k8s_meta_str(t, "uid"), tok, sizeof(tok));
    json_decref(t);
    assert_int_equal(fx_http("POST", "/api/v1/namespaces/default/trials/u-ev-1/metrics", tok,
                             "{\"kind\":\"training\",\"key\":\"a\",\"rows\":[{\"batches\":1,"
                             "\"metrics\":{\"loss\":1}}]}",
                             NULL),
                     200);
    long long eid = fx_sql_int("SELECT id FROM experiments WHERE name = 'u-ev'");
    for (int k = 0; k < 3; k++) {
        struct kd_store_event ev = {eid, 0, "early_stopping", "stop", "worse than the median",
                                    NULL};
        assert_int_equal(kd_store_event_add(fx.store, &ev, NULL, err), 0);
    }
    assert_int_equal(
        fx_http("GET", NSP "experiments/u-ev/events?limit=2", FX_USER_TOKEN, NULL, &out), 200);
    json_t *evs = json_object_get(out, "events");
    assert_int_equal(json_array_size(evs), 2);
    long long after = json_integer_value(json_object_get(json_array_get(evs, 1), "id"));
    json_decref(out);
    char path[256];
    snprintf(path, sizeof(path), NSP "experiments/u-ev/events?after=%lld", after);
    assert_int_equal(fx_http("GET", path, FX_USER_TOKEN, NULL, &out), 200);
    assert_int_equal(json_array_size(json_object_get(out, "events")), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(out, "events"), 0), "reason")),
                        "worse than the median");
    json_decref(out);
    assert_int_equal(
        fx_http("GET", NSP "experiments/u-ev/events?limit=0", FX_USER_TOKEN, NULL, &out), 400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "limit");
    json_decref(out);

    /* The job queue: running first, then queued by priority. */
    for (int k = 0; k < 100; k++) {
        fx_http("GET", "/api/v1/jobs?namespace=default", FX_USER_TOKEN, NULL, &out);
        json_t *jobs = json_object_get(out, "jobs");
        bool ok = false;
        size_t i;
        json_t *j;
        json_array_foreach(jobs, i, j)
        {
            if (strcmp(json_string_value(json_object_get(j, "trial")), "u-ev-2") == 0 &&
                json_integer_value(json_object_get(j, "priority")) == 10 &&
                json_integer_value(json_object_get(j, "slots")) == 2)
                ok = true;
        }
        if (ok) {
            /* Every ACTIVE job comes before every QUEUED one. */
            bool seen_queued = false;
            json_array_foreach(jobs, i, j)
            {
                const char *st = json_string_value(json_object_get(j, "state"));
                if (strcmp(st, "QUEUED") == 0)
                    seen_queued = true;
                else if (strcmp(st, "ACTIVE") == 0)
                    assert_false(seen_queued);
            }
            json_decref(out);
            break;
        }
        json_decref(out);
        assert_true(k < 99);
        kd_sleep_ms(50);
    }
}

/* One checkpoint by uuid: found (with its Trial's name and its Experiment), deleted, absent, bad.
 */
static void test_checkpoint_by_uuid(void **state)
{
    (void)state;
    char uid[64], tok[64], err[KD_ERRLEN] = "";
    json_t *out = NULL;
    fx_experiment("u-ck", "validation_loss");
    fx_trial("u-ck", "u-ck-1", 100, uid, sizeof(uid));
    fx_token("u-ck-1", uid, tok, sizeof(tok));
    assert_int_equal(
        fx_http(
            "POST", NSP "trials/u-ck-1/checkpoints", tok,
            "{\"uuid\":\"0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d\",\"batches\":100,\"storage_path\":"
            "\"/ckpt/"
            "0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d\",\"size\":4096,\"metadata\":{\"k\":\"v\"}}",
            NULL),
        200);
    assert_int_equal(
        fx_http("GET", NSP "checkpoints/0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d", NULL, NULL, NULL),
        401);
    json_t *ck = NULL;
    for (int i = 0;; i++) { /* the informer sees the Trial */
        assert_int_equal(fx_http("GET", NSP "checkpoints/0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d",
                                 FX_USER_TOKEN, NULL, &out),
                         200);
        ck = json_object_get(out, "checkpoint");
        if (json_is_string(json_object_get(ck, "trial")))
            break;
        json_decref(out);
        assert_true(i < 100);
        kd_sleep_ms(50);
    }
    assert_string_equal(json_string_value(json_object_get(ck, "uuid")),
                        "0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d");
    assert_string_equal(json_string_value(json_object_get(ck, "trial")), "u-ck-1");
    assert_string_equal(json_string_value(json_object_get(ck, "trial_uid")), uid);
    assert_string_equal(json_string_value(json_object_get(ck, "experiment")), "u-ck");
    assert_string_equal(json_string_value(json_object_get(ck, "namespace")), "default");
    assert_int_equal(json_integer_value(json_object_get(ck, "steps_completed")), 100);
    assert_int_equal(json_integer_value(json_object_get(ck, "size_bytes")), 4096);
    assert_string_equal(json_string_value(json_object_get(ck, "storage_path")),
                        "/ckpt/0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ck, "metadata"), "k")),
                        "v");
    assert_string_equal(json_string_value(json_object_get(ck, "state")), "ACTIVE");
    json_t *exp = json_object_get(out, "experiment");
    assert_string_equal(json_string_value(json_object_get(exp, "name")), "u-ck");
    assert_true(json_is_object(json_object_get(exp, "spec")));
    json_decref(out);
    /* Exact uuids only: a prefix, an unknown uuid and another namespace are 404s. */
    const char *absent[] = {
        NSP "checkpoints/0a1b2c3d-4e5f", NSP "checkpoints/nope",
        "/api/v1/namespaces/other/checkpoints/0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"};
    for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++) {
        assert_int_equal(fx_http("GET", absent[i], FX_USER_TOKEN, NULL, &out), 404);
        assert_non_null(json_string_value(json_object_get(out, "error")));
        json_decref(out);
    }
    assert_int_equal(fx_http("GET", NSP "checkpoints/nope", FX_USER_TOKEN, NULL, &out), 404);
    assert_non_null(strstr(json_string_value(json_object_get(out, "error")), "nope"));
    json_decref(out);
    /* Malformed uuids: 400 naming the field. */
    const char *bad[] = {NSP "checkpoints/.hidden", NSP "checkpoints/a~b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(fx_http("GET", bad[i], FX_USER_TOKEN, NULL, &out), 400);
        assert_string_equal(json_string_value(json_object_get(out, "field")), "uuid");
        json_decref(out);
    }
    assert_int_equal(fx_http("POST", NSP "checkpoints/0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d",
                             FX_USER_TOKEN, NULL, NULL),
                     405);
    /* A deleted checkpoint is still described, with its state. */
    assert_int_equal(
        kd_store_checkpoint_mark_deleted(fx.store, "0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d", err), 0);
    assert_int_equal(fx_http("GET", NSP "checkpoints/0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d",
                             FX_USER_TOKEN, NULL, &out),
                     200);
    ck = json_object_get(out, "checkpoint");
    assert_string_equal(json_string_value(json_object_get(ck, "state")), "DELETED");
    assert_true(json_is_string(json_object_get(ck, "deleted_at")));
    json_decref(out);
}

/* Index of trial `name` in the job list, or -1 (polls until `want` says the order is right). */
static int job_index(const json_t *jobs, const char *name)
{
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        if (strcmp(json_string_value(json_object_get(j, "trial")) ?: "", name) == 0)
            return (int)i;
    }
    return -1;
}

/* Poll the queue until trial `first` is listed before `second`; fails after 5 s. */
static void wait_order(const char *first, const char *second)
{
    for (int k = 0;; k++) {
        json_t *out = NULL;
        assert_int_equal(
            fx_http("GET", "/api/v1/jobs?namespace=default", FX_USER_TOKEN, NULL, &out), 200);
        int a = job_index(json_object_get(out, "jobs"), first);
        int b = job_index(json_object_get(out, "jobs"), second);
        json_decref(out);
        if (a >= 0 && b >= 0 && a < b)
            break;
        assert_true(k < 100);
        kd_sleep_ms(50);
    }
}

/* The queue follows the scheduler: kdet.io/ahead-of on the Experiment moves its trials. */
static void test_jobs_ahead_of(void **state)
{
    (void)state;
    char uid[64];
    fx_experiment("u-qa", "loss");
    fx_experiment("u-qb", "loss");
    fx_trial("u-qa", "u-qa-1", 100, uid, sizeof(uid));
    fx_trial("u-qb", "u-qb-1", 100, uid, sizeof(uid));
    fx_patch("trials", "u-qa-1", "status", "{\"status\":{\"state\":\"QUEUED\"}}");
    fx_patch("trials", "u-qb-1", "status", "{\"status\":{\"state\":\"QUEUED\"}}");
    wait_order("u-qa-1", "u-qb-1");
    fx_patch("experiments", "u-qb", NULL,
             "{\"metadata\":{\"annotations\":{\"kdet.io/ahead-of\":\"u-qa\"}}}");
    wait_order("u-qb-1", "u-qa-1");
    fx_patch("experiments", "u-qb", NULL,
             "{\"metadata\":{\"annotations\":{\"kdet.io/ahead-of\":null,"
             "\"kdet.io/behind-of\":\"u-qa\"}}}");
    wait_order("u-qa-1", "u-qb-1");
}

/* ---- SSE --------------------------------------------------------------------------------- */

struct sse {
    const char *path;
    struct kd_buf got;
    atomic_int connected;
    const char *want; /* stop once this text arrives */
    int code;
};

static size_t sse_body(char *p, size_t sz, size_t n, void *ud)
{
    struct sse *s = ud;
    if (kd_buf_append(&s->got, p, sz * n) != 0)
        return 0;
    if (strstr(kd_buf_str(&s->got), ": connected") != NULL)
        atomic_store(&s->connected, 1);
    if (strstr(kd_buf_str(&s->got), s->want) != NULL)
        return 0; /* enough: end the transfer */
    return sz * n;
}

static void *sse_thread(void *p)
{
    struct sse *s = p;
    char url[512];
    long code = 0;
    snprintf(url, sizeof(url), "%s%s", fx.url, s->path);
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Authorization: Bearer " FX_USER_TOKEN);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sse_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    s->code = (int)code;
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return NULL;
}

static void test_stream(void **state)
{
    (void)state;
    char ua[64], ub[64], uc[64], ta[64], tb[64], tc[64];
    fx_experiment("u-sse", "validation_loss");
    fx_experiment("u-sse-other", "validation_loss");
    fx_trial("u-sse", "u-sse-1", 100, ua, sizeof(ua));
    fx_trial("u-sse", "u-sse-2", 100, ub, sizeof(ub));
    fx_trial("u-sse-other", "u-sse-other-1", 100, uc, sizeof(uc));
    fx_token("u-sse-1", ua, ta, sizeof(ta));
    fx_token("u-sse-2", ub, tb, sizeof(tb));
    fx_token("u-sse-other-1", uc, tc, sizeof(tc));
    struct sse st = {.path = NSP "trials/u-sse-1/metrics/stream", .want = "\"marker\":3"};
    struct sse se = {.path = NSP "experiments/u-sse/metrics/stream", .want = "\"marker\":3"};
    kd_buf_init(&st.got, 1 << 20);
    kd_buf_init(&se.got, 1 << 20);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, sse_thread, &st);
    pthread_create(&t2, NULL, sse_thread, &se);
    for (int i = 0; i < 200 && !(atomic_load(&st.connected) && atomic_load(&se.connected)); i++)
        kd_sleep_ms(25);
    assert_true(atomic_load(&st.connected) && atomic_load(&se.connected));
    const char *fmt = "{\"kind\":\"training\",\"key\":\"s%d\",\"rows\":[{\"batches\":%d,"
                      "\"metrics\":{\"marker\":%d}}]}";
    char body[256];
    snprintf(body, sizeof(body), fmt, 1, 1, 1);
    assert_int_equal(fx_http("POST", NSP "trials/u-sse-other-1/metrics", tc, body, NULL), 200);
    snprintf(body, sizeof(body), fmt, 2, 2, 2);
    assert_int_equal(fx_http("POST", NSP "trials/u-sse-2/metrics", tb, body, NULL), 200);
    snprintf(body, sizeof(body), fmt, 3, 3, 3);
    assert_int_equal(fx_http("POST", NSP "trials/u-sse-1/metrics", ta, body, NULL), 200);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(st.code, 200);
    /* The trial stream: only its own batch. */
    const char *g = kd_buf_str(&st.got);
    assert_non_null(strstr(g, "event: metrics\n"));
    assert_non_null(strstr(g, "\"marker\":3"));
    assert_null(strstr(g, "\"marker\":2"));
    assert_null(strstr(g, "\"marker\":1"));
    assert_non_null(strstr(g, "\"trial\":\"u-sse-1\""));
    /* The experiment stream: both of its trials, not the other experiment. */
    g = kd_buf_str(&se.got);
    assert_non_null(strstr(g, "\"marker\":2"));
    assert_non_null(strstr(g, "\"marker\":3"));
    assert_null(strstr(g, "\"marker\":1"));
    kd_buf_free(&st.got);
    kd_buf_free(&se.got);
    /* A stream of a trial that does not exist is a 404, not an empty stream. */
    assert_int_equal(fx_http("GET", NSP "trials/nope/metrics/stream", FX_USER_TOKEN, NULL, NULL),
                     404);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_token),         cmocka_unit_test(test_info),
        cmocka_unit_test(test_user_api_disabled),  cmocka_unit_test(test_experiments_and_actions),
        cmocka_unit_test(test_events_and_jobs),    cmocka_unit_test(test_jobs_ahead_of),
        cmocka_unit_test(test_checkpoint_by_uuid), cmocka_unit_test(test_stream),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
