/*
 * The worker endpoints against a real private PostgreSQL and a real
 * kdet-local: metrics stored as sent, retries not duplicated, tokens
 * scoped to their trial, caps and malformed payloads, validations and
 * checkpoints in the Trial status, the searcher-operation and preemption
 * long-polls, early exits.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/time.h"
#include "fx.h"

#define T(name) "/api/v1/namespaces/default/trials/" name

static void test_metrics_stored_as_sent(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-metrics", "validation_loss");
    fx_trial("e-metrics", "e-metrics-1", 100, uid, sizeof(uid));
    fx_token("e-metrics-1", uid, tok, sizeof(tok));
    const char *body = "{\"kind\":\"training\",\"key\":\"rank0-1\",\"rows\":["
                       "{\"batches\":10,\"metrics\":{\"loss\":0.75,\"acc\":0.5}},"
                       "{\"batches\":20,\"metrics\":{\"loss\":0.5,\"acc\":0.625,"
                       "\"note\":\"'; DROP TABLE metrics; --\"}}]}";
    assert_int_equal(fx_http("POST", T("e-metrics-1/metrics"), tok, body, &out), 200);
    assert_int_equal(json_integer_value(json_object_get(out, "accepted")), 2);
    json_decref(out);
    /* Training progress reaches the Trial's status. */
    json_t *t = fx_get_trial("e-metrics-1");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(t, "status"), "batchesTrained")), 20);
    json_decref(t);
    /* The same batch again (a retry): not duplicated. */
    assert_int_equal(fx_http("POST", T("e-metrics-1/metrics"), tok, body, NULL), 200);
    assert_int_equal(kd_store_metrics_flush(fx.store, 5000), 0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM metrics"), 2);
    /* What the user API returns equals what was sent. */
    assert_int_equal(
        fx_http("GET", T("e-metrics-1/metrics?kind=training"), FX_USER_TOKEN, NULL, &out), 200);
    json_t *m = json_object_get(out, "metrics");
    assert_int_equal(json_array_size(m), 2);
    json_t *r1 = json_array_get(m, 1);
    assert_int_equal(json_integer_value(json_object_get(r1, "step")), 20);
    json_t *exp =
        json_pack("{s:f,s:f,s:s}", "loss", 0.5, "acc", 0.625, "note", "'; DROP TABLE metrics; --");
    assert_true(json_equal(json_object_get(r1, "metrics"), exp));
    json_decref(exp);
    json_decref(out);
    /* Downsampling on request: the last point only. */
    assert_int_equal(fx_http("GET", T("e-metrics-1/metrics?kind=training&max_points=1"),
                             FX_USER_TOKEN, NULL, &out),
                     200);
    assert_int_equal(json_array_size(json_object_get(out, "metrics")), 1);
    json_decref(out);
}

/* One experiment's charts: every trial's series of a kind, downsampled by M4, in one answer. */
static void test_experiment_series(void **state)
{
    (void)state;
    char uid[2][64], tok[2][64], name[32];
    json_t *out = NULL;
    struct kd_buf body = KD_BUF_INIT(1 << 20);
    fx_experiment("e-series", "loss");
    for (int t = 0; t < 2; t++) {
        snprintf(name, sizeof(name), "e-series-%d", t + 1);
        fx_trial("e-series", name, 300, uid[t], sizeof(uid[t]));
        fx_token(name, uid[t], tok[t], sizeof(tok[t]));
        /* Steps 1..300; loss falls with a wiggle whose lowest point is step 150 + t. */
        kd_buf_reset(&body);
        assert_int_equal(kd_buf_puts(&body, "{\"kind\":\"training\",\"key\":\"s\",\"rows\":["), 0);
        for (int st = 1; st <= 300; st++) {
            double loss = st == 150 + t ? 0.001 : 1.0 / st + (st % 7) * 0.01;
            assert_int_equal(kd_buf_printf(&body,
                                           "%s{\"batches\":%d,\"metrics\":{\"loss\":%.17g,"
                                           "\"phase\":\"train\"}}",
                                           st > 1 ? "," : "", st, loss),
                             0);
        }
        assert_int_equal(kd_buf_puts(&body, "]}"), 0);
        char path[128];
        snprintf(path, sizeof(path), T("%s/metrics"), name);
        assert_int_equal(fx_http("POST", path, tok[t], kd_buf_str(&body), NULL), 200);
    }
    kd_buf_free(&body);
    assert_int_equal(kd_store_metrics_flush(fx.store, 5000), 0);
    int64_t ids[2] = {0, 0};
    for (int i = 0; i < 100 && ids[1] == 0; i++) { /* the informers see both trials */
        fx_http("GET", "/api/v1/namespaces/default/experiments/e-series", FX_USER_TOKEN, NULL,
                &out);
        json_t *ts = json_object_get(out, "trials");
        if (json_array_size(ts) == 2)
            for (size_t k = 0; k < 2; k++)
                ids[k] = json_integer_value(json_object_get(json_array_get(ts, k), "id"));
        json_decref(out);
        if (ids[1] == 0)
            kd_sleep_ms(50);
    }
    assert_true(ids[0] > 0 && ids[1] > ids[0]);
#define XS "/api/v1/namespaces/default/experiments/e-series/metrics?kind=training"
    /* Folded into the overviews or not yet: the same answer. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            while (fx_sql_int("SELECT upto_id FROM metric_sketch_mark") <
                   fx_sql_int("SELECT max(id) FROM metrics"))
                kd_sleep_ms(50);
        assert_int_equal(fx_http("GET", XS "&max_points=40", FX_USER_TOKEN, NULL, &out), 200);
        assert_string_equal(json_string_value(json_object_get(out, "kind")), "training");
        assert_string_equal(json_string_value(json_object_get(out, "source")), "overview");
        assert_int_equal(json_integer_value(json_object_get(out, "max_points")), 40);
        assert_int_equal(json_integer_value(json_object_get(out, "buckets")), 8);
        assert_int_equal(json_integer_value(json_object_get(out, "width")), 64); /* 300 >> 6 < 8 */
        json_t *ts = json_object_get(out, "trials");
        assert_int_equal(json_array_size(ts), 2);
        for (int t = 0; t < 2; t++) {
            json_t *tr = json_array_get(ts, (size_t)t);
            assert_int_equal(json_integer_value(json_object_get(tr, "trial_id")), ids[t]);
            json_t *ser = json_object_get(tr, "series");
            assert_null(json_object_get(ser, "phase")); /* numbers only */
            json_t *st = json_object_get(json_object_get(ser, "loss"), "steps");
            json_t *va = json_object_get(json_object_get(ser, "loss"), "values");
            size_t n = json_array_size(st);
            assert_true(n >= 2 * 5 && n <= 40 && json_array_size(va) == n);
            /* the first and the last step, and the lowest point, are kept */
            assert_int_equal(json_integer_value(json_array_get(st, 0)), 1);
            assert_int_equal(json_integer_value(json_array_get(st, n - 1)), 300);
            bool best = false;
            for (size_t k = 0; k < n; k++)
                best = best || (json_integer_value(json_array_get(st, k)) == 150 + t &&
                                json_number_value(json_array_get(va, k)) == 0.001);
            assert_true(best);
        }
        json_decref(out);
    }
    /* A budget for the page: 100 points per metric for 2 trials. */
    assert_int_equal(fx_http("GET", XS "&budget=100&max_points=10000", FX_USER_TOKEN, NULL, &out),
                     200);
    assert_int_equal(json_integer_value(json_object_get(out, "max_points")), 50);
    assert_int_equal(json_integer_value(json_object_get(out, "buckets")), 8);
    json_decref(out);
    /* A zoomed range, narrower than the overviews: from the rows, every point as sent. */
    assert_int_equal(
        fx_http("GET", XS "&from=100&to=120&max_points=400", FX_USER_TOKEN, NULL, &out), 200);
    assert_int_equal(json_integer_value(json_object_get(out, "width")), 1);
    assert_int_equal(json_integer_value(json_object_get(out, "from")), 100);
    assert_int_equal(json_integer_value(json_object_get(out, "to")), 120);
    json_t *l = json_object_get(
        json_object_get(json_array_get(json_object_get(out, "trials"), 0), "series"), "loss");
    assert_int_equal(json_array_size(json_object_get(l, "steps")), 21);
    for (int k = 0; k < 21; k++) {
        int st = 100 + k;
        assert_int_equal(json_integer_value(json_array_get(json_object_get(l, "steps"), k)), st);
        assert_true(json_number_value(json_array_get(json_object_get(l, "values"), k)) ==
                    1.0 / st + (st % 7) * 0.01);
    }
    json_decref(out);
    /* Refusals name the parameter. */
    static const struct {
        const char *q, *field;
    } bad[] = {
        {"&max_points=3", "max_points"},
        {"&max_points=10001", "max_points"},
        {"&budget=-1", "budget"},
        {"&from=5", "to"},
        {"&to=5", "from"},
        {"&from=9&to=5", "to"},
        {"&from=-1&to=5", "from"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "%s%s", XS, bad[i].q);
        if (fx_http("GET", path, FX_USER_TOKEN, NULL, &out) != 400)
            fail_msg("%s: not refused", bad[i].q);
        assert_string_equal(json_string_value(json_object_get(out, "field")), bad[i].field);
        json_decref(out);
    }
    assert_int_equal(fx_http("GET",
                             "/api/v1/namespaces/default/experiments/e-series/metrics?kind=x",
                             FX_USER_TOKEN, NULL, &out),
                     400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "kind");
    json_decref(out);
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments/nope/metrics",
                             FX_USER_TOKEN, NULL, &out),
                     404);
    json_decref(out);
    /* Another kind: no trial has any. */
    assert_int_equal(fx_http("GET",
                             "/api/v1/namespaces/default/experiments/e-series/metrics"
                             "?kind=validation",
                             FX_USER_TOKEN, NULL, &out),
                     200);
    assert_int_equal(json_array_size(json_object_get(out, "trials")), 0);
    json_decref(out);
#undef XS
}

static void test_tokens(void **state)
{
    (void)state;
    char ua[64], ub[64], ta[64], tb[64];
    json_t *out = NULL;
    fx_experiment("e-tok", "validation_loss");
    fx_trial("e-tok", "e-tok-a", 100, ua, sizeof(ua));
    fx_trial("e-tok", "e-tok-b", 100, ub, sizeof(ub));
    fx_token("e-tok-a", ua, ta, sizeof(ta));
    fx_token("e-tok-b", ub, tb, sizeof(tb));
    long long before = fx_sql_int("SELECT count(*) FROM metric_batches");
    const char *body =
        "{\"kind\":\"training\",\"key\":\"k1\",\"rows\":[{\"batches\":1,\"metrics\":{\"x\":1}}]}";
    /* Missing, wrong and another trial's token: 401, nothing written. */
    assert_int_equal(fx_http("POST", T("e-tok-a/metrics"), NULL, body, &out), 401);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "Authorization");
    json_decref(out);
    assert_string_equal(fx_last_header("WWW-Authenticate"), "Bearer realm=\"kdet\"");
    assert_int_equal(fx_http("POST", T("e-tok-a/metrics"), "not-a-token", body, NULL), 401);
    assert_int_equal(fx_http("POST", T("e-tok-a/metrics"), tb, body, NULL), 401);
    assert_int_equal(fx_http("POST", T("e-tok-a/checkpoints"), tb,
                             "{\"uuid\":\"u\",\"batches\":1,\"storage_path\":\"/x\",\"size\":1}",
                             NULL),
                     401);
    assert_int_equal(fx_http("POST", T("e-tok-a/early_exit"), tb, "{\"reason\":\"errored\"}", NULL),
                     401);
    assert_int_equal(fx_http("GET", T("e-tok-a/searcher/operation"), tb, NULL, NULL), 401);
    /* A trial that does not exist answers the same as a bad token. */
    assert_int_equal(fx_http("POST", T("e-tok-zz/metrics"), ta, body, NULL), 401);
    /* The user token is not a trial token, and a trial token is not a user token. */
    assert_int_equal(fx_http("POST", T("e-tok-a/metrics"), FX_USER_TOKEN, body, NULL), 401);
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments", ta, NULL, NULL), 401);
    assert_int_equal(kd_store_metrics_flush(fx.store, 5000), 0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM metric_batches"), before);
    json_t *t = fx_get_trial("e-tok-a");
    assert_null(json_object_get(json_object_get(t, "status"), "conditions"));
    json_decref(t);
    /* The right token works. */
    assert_int_equal(fx_http("POST", T("e-tok-a/metrics"), ta, body, NULL), 200);
    /* A token is bound to the trial's uid: a re-created trial of the same name needs a new one. */
    char err[KD_ERRLEN];
    assert_int_equal(
        kd_k8s_delete(fx.k8s, &KD_K8S_TRIALS, "default", "e-tok-b", NULL, NULL, NULL, err), 0);
    char ub2[64];
    for (int i = 0; i < 50; i++) { /* wait for the delete to reach the informer */
        if (fx_http("GET", T("e-tok-b"), FX_USER_TOKEN, NULL, NULL) == 404)
            break;
        kd_sleep_ms(50);
    }
    fx_trial("e-tok", "e-tok-b", 100, ub2, sizeof(ub2));
    assert_string_not_equal(ub, ub2);
    for (int i = 0; i < 100; i++) { /* wait for the new uid to reach the informer */
        json_t *o = NULL;
        fx_http("GET", T("e-tok-b"), FX_USER_TOKEN, NULL, &o);
        const char *u = json_string_value(json_object_get(json_object_get(o, "trial"), "uid"));
        bool fresh = u != NULL && strcmp(u, ub2) == 0;
        json_decref(o);
        if (fresh)
            break;
        kd_sleep_ms(50);
    }
    assert_int_equal(fx_http("POST", T("e-tok-b/metrics"), tb, body, NULL), 401);
}

static void test_caps_and_malformed(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-bad", "validation_loss");
    fx_trial("e-bad", "e-bad-1", 100, uid, sizeof(uid));
    fx_token("e-bad-1", uid, tok, sizeof(tok));
    long long before = fx_sql_int("SELECT count(*) FROM metric_batches");
    /* Oversized: a checkpoint body over 256 KiB. */
    size_t big = 300 * 1024;
    char *b = kd_xmalloc(big + 100);
    int n = snprintf(b, big + 100, "{\"uuid\":\"u1\",\"batches\":1,\"storage_path\":\"");
    memset(b + n, 'x', big);
    snprintf(b + n + big, 100, "\",\"size\":1}");
    assert_int_equal(fx_http("POST", T("e-bad-1/checkpoints"), tok, b, &out), 413);
    assert_non_null(strstr(json_string_value(json_object_get(out, "error")), "262144"));
    json_decref(out);
    free(b);
    /* Over the server-wide cap (metrics bodies up to 8 MiB). */
    big = (9u << 20);
    b = kd_xmalloc(big + 1);
    memset(b, ' ', big);
    b[big] = '\0';
    assert_int_equal(fx_http("POST", T("e-bad-1/metrics"), tok, b, &out), 413);
    json_decref(out);
    free(b);

    struct {
        const char *body, *field, *words;
    } cases[] = {
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":{}}]", "body",
         "invalid JSON"},
        {"[1,2]", "body", "must be a JSON object"},
        {"{\"kind\":\"train\",\"key\":\"k\",\"rows\":[]}", "kind", "training"},
        {"{\"kind\":\"training\",\"rows\":[{\"batches\":1,\"metrics\":{}}]}", "key", "required"},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[]}", "rows", "1 to"},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":\"1\",\"metrics\":{}}]}",
         "rows[0].batches", "integer"},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":{}},"
         "{\"batches\":-2,\"metrics\":{}}]}",
         "rows[1].batches", ">= 0"},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":[1]}]}",
         "rows[0].metrics", "object"},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrix\":{}}]}",
         "rows[0].metrix", "did you mean metrics"},
        {"{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":{},"
         "\"reported_at\":\"yesterday\"}]}",
         "rows[0].reported_at", "RFC 3339"},
        {"{\"kind\":\"validation\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":"
         "{\"loss\":1}}]}",
         "rows[0].metrics.validation_loss", "missing"},
        {"{\"kind\":\"validation\",\"key\":\"k\",\"rows\":[{\"batches\":1,\"metrics\":"
         "{\"validation_loss\":\"low\"}}]}",
         "rows[0].metrics.validation_loss", "not a number"},
        {"{\"kind\":\"training\",\"key\":\"bad\\tkey\",\"rows\":[{\"batches\":1,\"metrics\":{}}]}",
         "key", "printable"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int code = fx_http("POST", T("e-bad-1/metrics"), tok, cases[i].body, &out);
        const char *err = json_string_value(json_object_get(out, "error"));
        const char *field = json_string_value(json_object_get(out, "field"));
        if (code != 400 || field == NULL || strcmp(field, cases[i].field) != 0 || err == NULL ||
            strstr(err, cases[i].words) == NULL)
            fail_msg("case %zu: HTTP %d field=%s error=%s (want 400 %s ~%s)", i, code,
                     field ? field : "-", err ? err : "-", cases[i].field, cases[i].words);
        json_decref(out);
    }
    /* Checkpoint and early-exit payloads. */
    assert_int_equal(fx_http("POST", T("e-bad-1/checkpoints"), tok,
                             "{\"uuid\":\"u\",\"batches\":1,\"size\":1}", &out),
                     400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "storage_path");
    json_decref(out);
    assert_int_equal(fx_http("POST", T("e-bad-1/early_exit"), tok, "{\"reason\":\"bored\"}", &out),
                     400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "reason");
    json_decref(out);
    assert_int_equal(fx_http("GET", T("e-bad-1/searcher/operation?timeout=9999"), tok, NULL, &out),
                     400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "timeout");
    json_decref(out);
    /* Nothing of the above was written. */
    assert_int_equal(kd_store_metrics_flush(fx.store, 5000), 0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM metric_batches"), before);
    /* Routing: unknown route 404, wrong method 405 with Allow. */
    assert_int_equal(fx_http("GET", "/api/v1/nothing", tok, NULL, NULL), 404);
    assert_int_equal(fx_http("DELETE", T("e-bad-1/metrics"), tok, NULL, &out), 405);
    assert_string_equal(fx_last_header("Allow"), "POST, GET");
    json_decref(out);
}

static void test_validation_updates_status(void **state)
{
    (void)state;
    char uid[64], tok[64];
    fx_experiment("e-val", "validation_loss");
    fx_trial("e-val", "e-val-1", 100, uid, sizeof(uid));
    fx_token("e-val-1", uid, tok, sizeof(tok));
    assert_int_equal(fx_http("POST", T("e-val-1/metrics"), tok,
                             "{\"kind\":\"validation\",\"key\":\"v1\",\"rows\":[{\"batches\":100,"
                             "\"metrics\":{\"validation_loss\":0.25,\"acc\":0.9}}]}",
                             NULL),
                     200);
    json_t *t = fx_get_trial("e-val-1");
    json_t *st = json_object_get(t, "status");
    json_t *lv = json_object_get(st, "latestValidation");
    assert_int_equal(json_integer_value(json_object_get(lv, "batches")), 100);
    assert_true(json_number_value(json_object_get(lv, "value")) == 0.25);
    assert_string_equal(json_string_value(json_object_get(lv, "metric")), "validation_loss");
    assert_true(
        json_number_value(json_object_get(json_object_get(st, "bestValidation"), "value")) == 0.25);
    assert_int_equal(json_integer_value(json_object_get(st, "batchesTrained")), 100);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "ACTIVE");
    json_decref(t);
    /* A worse, later validation moves latest but not best. */
    assert_int_equal(fx_http("POST", T("e-val-1/metrics"), tok,
                             "{\"kind\":\"validation\",\"key\":\"v2\",\"rows\":[{\"batches\":200,"
                             "\"metrics\":{\"validation_loss\":0.5}}]}",
                             NULL),
                     200);
    t = fx_get_trial("e-val-1");
    st = json_object_get(t, "status");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(st, "latestValidation"), "batches")),
        200);
    assert_true(
        json_number_value(json_object_get(json_object_get(st, "bestValidation"), "value")) == 0.25);
    json_decref(t);
}

static void test_metric_from_annotations(void **state)
{
    (void)state;
    char uid[64], tok[64], err[KD_ERRLEN] = "";
    /* The searcher metric comes from a stored template: the controller names it in
     * annotations, larger is better here. */
    json_t *o = json_pack("{s:s,s:s,s:{s:s,s:{s:s,s:s}},s:{s:s,s:s,s:{s:s}}}", "apiVersion",
                          "kdet.io/v1alpha1", "kind", "Experiment", "metadata", "name", "e-ann",
                          "annotations", "kdet.io/searcher-metric", "accuracy",
                          "kdet.io/smaller-is-better", "false", "spec", "entrypoint", "train",
                          "template", "gpu-defaults", "searcher", "name", "single");
    assert_int_equal(kd_k8s_create(fx.k8s, &KD_K8S_EXPERIMENTS, "default", o, NULL, NULL, err), 0);
    json_decref(o);
    fx_trial("e-ann", "e-ann-1", 100, uid, sizeof(uid));
    fx_token("e-ann-1", uid, tok, sizeof(tok));
    json_t *out = NULL;
    assert_int_equal(fx_http("POST", T("e-ann-1/metrics"), tok,
                             "{\"kind\":\"validation\",\"key\":\"a1\",\"rows\":[{\"batches\":10,"
                             "\"metrics\":{\"loss\":1}}]}",
                             &out),
                     400);
    assert_string_equal(json_string_value(json_object_get(out, "field")),
                        "rows[0].metrics.accuracy");
    json_decref(out);
    const char *fmt = "{\"kind\":\"validation\",\"key\":\"a%d\",\"rows\":[{\"batches\":%d,"
                      "\"metrics\":{\"accuracy\":%s}}]}";
    char body[256];
    snprintf(body, sizeof(body), fmt, 2, 10, "0.5");
    assert_int_equal(fx_http("POST", T("e-ann-1/metrics"), tok, body, NULL), 200);
    snprintf(body, sizeof(body), fmt, 3, 20, "0.75");
    assert_int_equal(fx_http("POST", T("e-ann-1/metrics"), tok, body, NULL), 200);
    json_t *t = fx_get_trial("e-ann-1");
    json_t *best = json_object_get(json_object_get(t, "status"), "bestValidation");
    assert_true(json_number_value(json_object_get(best, "value")) == 0.75);
    assert_string_equal(json_string_value(json_object_get(best, "metric")), "accuracy");
    json_decref(t);
}

struct val_thread {
    const char *tok;
    int base, code;
};

static void *post_validations(void *p)
{
    struct val_thread *v = p;
    char body[256];
    for (int i = 0; i < 5 && v->code == 200; i++) {
        int b = 1000 + v->base * 10 + i;
        snprintf(body, sizeof(body),
                 "{\"kind\":\"validation\",\"key\":\"cv%d\",\"rows\":[{\"batches\":%d,"
                 "\"metrics\":{\"validation_loss\":%d}}]}",
                 b, b, b);
        v->code = fx_http("POST", T("e-val-1/metrics"), v->tok, body, NULL);
    }
    return NULL;
}

static void test_concurrent_validations(void **state)
{
    (void)state;
    /* 4 workers validating at once: every status write is conditional on the
     * resourceVersion and retried, so the newest validation wins. */
    json_t *t = fx_get_trial("e-val-1");
    char tok[64];
    fx_token("e-val-1", kd_k8s_meta_str(t, "uid"), tok, sizeof(tok));
    json_decref(t);
    struct val_thread v[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        v[i] = (struct val_thread){tok, i, 200};
        pthread_create(&th[i], NULL, post_validations, &v[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(v[i].code, 200);
    }
    t = fx_get_trial("e-val-1");
    json_t *st = json_object_get(t, "status");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(st, "latestValidation"), "batches")),
        1034);
    assert_int_equal(json_integer_value(json_object_get(st, "batchesTrained")), 1034);
    /* The best stays the earlier 0.25. */
    assert_true(
        json_number_value(json_object_get(json_object_get(st, "bestValidation"), "value")) == 0.25);
    json_decref(t);
}

struct later {
    int delay_ms;
    const char *resource, *name, *sub, *patch;
};

static void *patch_later(void *p)
{
    struct later *l = p;
    kd_sleep_ms(l->delay_ms);
    fx_patch(l->resource, l->name, l->sub, l->patch);
    return NULL;
}

static void test_searcher_long_poll(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-op", "validation_loss");
    fx_trial("e-op", "e-op-1", 100, uid, sizeof(uid));
    fx_token("e-op-1", uid, tok, sizeof(tok));
    /* Nothing done yet: train to 100. */
    assert_int_equal(fx_http("GET", T("e-op-1/searcher/operation?completed=0"), tok, NULL, &out),
                     200);
    assert_string_equal(json_string_value(json_object_get(out, "op")), "validate_after");
    assert_int_equal(json_integer_value(json_object_get(out, "length")), 100);
    json_decref(out);
    /* Done 100: waits; a short timeout says pending. */
    int64_t t0 = kd_mono_ms();
    assert_int_equal(
        fx_http("GET", T("e-op-1/searcher/operation?completed=100&timeout=1"), tok, NULL, &out),
        200);
    assert_string_equal(json_string_value(json_object_get(out, "op")), "pending");
    assert_true(kd_mono_ms() - t0 >= 900);
    json_decref(out);
    /* The searcher raises the target while the worker waits: the poll returns at once. */
    pthread_t th;
    struct later l = {500, "trials", "e-op-1", NULL, "{\"spec\":{\"validateAfter\":300}}"};
    pthread_create(&th, NULL, patch_later, &l);
    t0 = kd_mono_ms();
    assert_int_equal(
        fx_http("GET", T("e-op-1/searcher/operation?completed=100&timeout=20"), tok, NULL, &out),
        200);
    int64_t took = kd_mono_ms() - t0;
    pthread_join(th, NULL);
    assert_string_equal(json_string_value(json_object_get(out, "op")), "validate_after");
    assert_int_equal(json_integer_value(json_object_get(out, "length")), 300);
    assert_true(took >= 400 && took < 5000);
    json_decref(out);
    /* Closed: stop once the target is reached. */
    struct later l2 = {300, "trials", "e-op-1", NULL, "{\"spec\":{\"closed\":true}}"};
    pthread_create(&th, NULL, patch_later, &l2);
    assert_int_equal(
        fx_http("GET", T("e-op-1/searcher/operation?completed=300&timeout=20"), tok, NULL, &out),
        200);
    pthread_join(th, NULL);
    assert_string_equal(json_string_value(json_object_get(out, "op")), "stop");
    json_decref(out);
}

static void test_preemption_long_poll(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-pre", "validation_loss");
    fx_trial("e-pre", "e-pre-1", 100, uid, sizeof(uid));
    fx_token("e-pre-1", uid, tok, sizeof(tok));
    assert_int_equal(fx_http("GET", T("e-pre-1/preemption"), tok, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    /* Pausing the experiment (through the user API) flips a waiting poll. */
    pthread_t th;
    struct later l = {500, "experiments", "e-pre", NULL, "{\"spec\":{\"paused\":true}}"};
    pthread_create(&th, NULL, patch_later, &l);
    int64_t t0 = kd_mono_ms();
    assert_int_equal(fx_http("GET", T("e-pre-1/preemption?timeout=20"), tok, NULL, &out), 200);
    int64_t took = kd_mono_ms() - t0;
    pthread_join(th, NULL);
    assert_true(json_is_true(json_object_get(out, "preempt")));
    assert_string_equal(json_string_value(json_object_get(out, "reason")),
                        "the experiment was paused");
    assert_true(took >= 400 && took < 5000);
    json_decref(out);
    /* Activate through the user API: no longer preempted. */
    assert_int_equal(fx_http("POST", "/api/v1/namespaces/default/experiments/e-pre/activate",
                             FX_USER_TOKEN, NULL, NULL),
                     200);
    for (int i = 0; i < 100; i++) {
        fx_http("GET", T("e-pre-1/preemption"), tok, NULL, &out);
        bool p = json_is_true(json_object_get(out, "preempt"));
        json_decref(out);
        if (!p)
            break;
        assert_true(i < 99);
        kd_sleep_ms(50);
    }
    /* The scheduler's preemption (state QUEUED with the Preempted condition). */
    fx_patch("trials", "e-pre-1", "status",
             "{\"status\":{\"state\":\"QUEUED\",\"conditions\":[{\"type\":\"Preempted\","
             "\"status\":\"True\",\"lastTransitionTime\":\"2026-11-21T00:00:00Z\",\"reason\":"
             "\"Preempted\",\"message\":\"a higher-priority trial needs the slots\"}]}}");
    assert_int_equal(fx_http("GET", T("e-pre-1/preemption?timeout=10"), tok, NULL, &out), 200);
    assert_true(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
}

/*
 * adaptive_asha with time_metric: every validation must carry the time metric (400 naming it),
 * whose value goes into latestValidation for the controller's searcher; a trial the searcher
 * closes before its target is told to stop through preemption.
 */
static void test_time_metric_and_searcher_stop(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-tm", "validation_loss");
    fx_patch("experiments", "e-tm", NULL, "{\"spec\":{\"searcher\":{\"time_metric\":\"epochs\"}}}");
    fx_trial("e-tm", "e-tm-1", 2147483647LL, uid, sizeof(uid));
    fx_token("e-tm-1", uid, tok, sizeof(tok));
    /* The experiment's spec may reach the API's cache a moment later. */
    int code = 0;
    for (int i = 0; i < 100 && code != 400; i++) {
        code = fx_http("POST", T("e-tm-1/metrics"), tok,
                       "{\"kind\":\"validation\",\"key\":\"tm-0\",\"rows\":[{\"batches\":10,"
                       "\"metrics\":{\"validation_loss\":0.5}}]}",
                       &out);
        if (code != 400) {
            json_decref(out);
            out = NULL;
            kd_sleep_ms(50);
        }
    }
    assert_int_equal(code, 400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "rows[0].metrics.epochs");
    json_decref(out);
    assert_int_equal(fx_http("POST", T("e-tm-1/metrics"), tok,
                             "{\"kind\":\"validation\",\"key\":\"tm-1\",\"rows\":[{\"batches\":10,"
                             "\"metrics\":{\"validation_loss\":0.5,\"epochs\":\"one\"}}]}",
                             &out),
                     400);
    json_decref(out);
    assert_int_equal(fx_http("POST", T("e-tm-1/metrics"), tok,
                             "{\"kind\":\"validation\",\"key\":\"tm-2\",\"rows\":[{\"batches\":20,"
                             "\"metrics\":{\"validation_loss\":0.4,\"epochs\":2.5}}]}",
                             NULL),
                     200);
    json_t *t = fx_get_trial("e-tm-1");
    json_t *lv = json_object_get(json_object_get(t, "status"), "latestValidation");
    assert_string_equal(json_string_value(json_object_get(lv, "timeMetric")), "epochs");
    assert_true(json_number_value(json_object_get(lv, "timeValue")) == 2.5);
    assert_int_equal(json_integer_value(json_object_get(lv, "batches")), 20);
    json_decref(t);
    /* Training metrics need no time metric. */
    assert_int_equal(fx_http("POST", T("e-tm-1/metrics"), tok,
                             "{\"kind\":\"training\",\"key\":\"tm-3\",\"rows\":[{\"batches\":21,"
                             "\"metrics\":{\"loss\":0.4}}]}",
                             NULL),
                     200);
    /* Not stopped yet; the searcher closes it below its (open) target: preempt, and the
     * searcher poll answers preempt too, so libdtrain stops before training further. */
    assert_int_equal(fx_http("GET", T("e-tm-1/preemption"), tok, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
    fx_patch("trials", "e-tm-1", NULL, "{\"spec\":{\"closed\":true}}");
    assert_int_equal(fx_http("GET", T("e-tm-1/preemption?timeout=10"), tok, NULL, &out), 200);
    assert_true(json_is_true(json_object_get(out, "preempt")));
    assert_string_equal(json_string_value(json_object_get(out, "reason")),
                        "the searcher stopped the trial before its target");
    json_decref(out);
    assert_int_equal(
        fx_http("GET", T("e-tm-1/searcher/operation?completed=20&timeout=1"), tok, NULL, &out),
        200);
    assert_true(json_is_true(json_object_get(out, "preempt")));
    json_decref(out);
}

static void test_checkpoint_and_early_exit(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *out = NULL;
    fx_experiment("e-ck", "validation_loss");
    fx_trial("e-ck", "e-ck-1", 100, uid, sizeof(uid));
    fx_token("e-ck-1", uid, tok, sizeof(tok));
    const char *ck = "{\"uuid\":\"6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11\",\"batches\":100,"
                     "\"storage_path\":\"s3://bucket/ckpt/6f1d\",\"size\":4096,"
                     "\"metadata\":{\"framework\":\"c\"}}";
    assert_int_equal(fx_http("POST", T("e-ck-1/checkpoints"), tok, ck, NULL), 200);
    assert_int_equal(fx_http("POST", T("e-ck-1/checkpoints"), tok, ck, NULL), 200); /* retry */
    assert_int_equal(fx_sql_int("SELECT count(*) FROM checkpoints WHERE uuid = "
                                "'6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11' AND size_bytes = 4096 "
                                "AND steps_completed = 100"),
                     1);
    json_t *t = fx_get_trial("e-ck-1");
    json_t *lc = json_object_get(json_object_get(t, "status"), "latestCheckpoint");
    assert_string_equal(json_string_value(json_object_get(lc, "uuid")),
                        "6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11");
    assert_int_equal(json_integer_value(json_object_get(lc, "batches")), 100);
    assert_int_equal(json_integer_value(json_object_get(lc, "size")), 4096);
    json_decref(t);
    /* The user API lists it. */
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments/e-ck/checkpoints",
                             FX_USER_TOKEN, NULL, &out),
                     200);
    assert_int_equal(json_array_size(json_object_get(out, "checkpoints")), 1);
    json_decref(out);
    /* Another trial cannot claim the same uuid. */
    char uid2[64], tok2[64];
    fx_trial("e-ck", "e-ck-2", 100, uid2, sizeof(uid2));
    fx_token("e-ck-2", uid2, tok2, sizeof(tok2));
    assert_int_equal(fx_http("POST", T("e-ck-2/checkpoints"), tok2, ck, &out), 409);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "uuid");
    json_decref(out);
    /* Ids that would name a path outside the checkpoint's folder, or are no UUID at all: 400
     * naming the field, nothing registered (GC once stopped for good on such a row). */
    static const char *const bad_ids[] = {
        "../../../../tmp/x",
        "..",
        "6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c1/",
        "6F1D0C1E-2A5B-4B8E-9A55-0A4C6E0B7C12",
        "6f1d0c1e2a5b4b8e9a550a4c6e0b7c12",
        "6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c1234",
        "ck-0001",
    };
    long long nck = fx_sql_int("SELECT count(*) FROM checkpoints");
    for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
        json_t *body = json_pack("{s:s,s:i,s:s,s:i}", "uuid", bad_ids[i], "batches", 1,
                                 "storage_path", "/ckpt/x", "size", 1);
        char *text = json_dumps(body, JSON_COMPACT);
        int code = fx_http("POST", T("e-ck-1/checkpoints"), tok, text, &out);
        const char *field = json_string_value(json_object_get(out, "field"));
        const char *msg = json_string_value(json_object_get(out, "error"));
        if (code != 400 || field == NULL || strcmp(field, "uuid") != 0 || msg == NULL ||
            strstr(msg, "not a UUID in canonical form") == NULL)
            fail_msg("uuid %s: HTTP %d field=%s error=%s", bad_ids[i], code, field ? field : "-",
                     msg ? msg : "-");
        json_decref(out);
        free(text);
        json_decref(body);
    }
    assert_int_equal(fx_sql_int("SELECT count(*) FROM checkpoints"), nck);
    /* Early exit: recorded as a condition. */
    assert_int_equal(fx_http("POST", T("e-ck-1/early_exit"), tok,
                             "{\"reason\":\"invalid_hp\",\"message\":\"lr too large\"}", NULL),
                     200);
    t = fx_get_trial("e-ck-1");
    json_t *c = json_array_get(json_object_get(json_object_get(t, "status"), "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "type")), "EarlyExit");
    assert_string_equal(json_string_value(json_object_get(c, "reason")), "InvalidHP");
    assert_string_equal(json_string_value(json_object_get(c, "message")), "lr too large");
    json_decref(t);
    /* ... and in the experiment's events. */
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments/e-ck/events",
                             FX_USER_TOKEN, NULL, &out),
                     200);
    json_t *ev = json_array_get(json_object_get(out, "events"), 0);
    assert_string_equal(json_string_value(json_object_get(ev, "decision")), "early_exit");
    assert_string_equal(json_string_value(json_object_get(ev, "reason")), "lr too large");
    json_decref(out);
}

static void test_rendezvous(void **state)
{
    (void)state;
    char uid[64], tok[64], uid2[64], tok2[64];
    json_t *out = NULL;
    fx_experiment("e-rdv", "validation_loss");
    fx_trial("e-rdv", "e-rdv-1", 100, uid, sizeof(uid));
    fx_token("e-rdv-1", uid, tok, sizeof(tok));
    fx_trial("e-rdv", "e-rdv-2", 100, uid2, sizeof(uid2));
    fx_token("e-rdv-2", uid2, tok2, sizeof(tok2));
    const char *rep = "{\"run_id\":\"run-a\",\"address\":\"10.1.2.3\",\"port\":41001}";
    /* The trial's own token only. */
    assert_int_equal(fx_http("PUT", T("e-rdv-1/rendezvous"), NULL, rep, NULL), 401);
    assert_int_equal(fx_http("PUT", T("e-rdv-1/rendezvous"), tok2, rep, NULL), 401);
    assert_int_equal(fx_http("GET", T("e-rdv-1/rendezvous?run_id=run-a"), tok2, NULL, NULL), 401);
    /* Nothing reported yet. */
    assert_int_equal(fx_http("GET", T("e-rdv-1/rendezvous?run_id=run-a"), tok, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "ready")));
    json_decref(out);
    /* Bad reports name the field. */
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"{\"address\":\"10.1.2.3\",\"port\":41001}", "run_id"},
        {"{\"run_id\":\"a/b\",\"address\":\"10.1.2.3\",\"port\":41001}", "run_id"},
        {"{\"run_id\":\"run-a\",\"address\":\"10.1.2.3 x\",\"port\":41001}", "address"},
        {"{\"run_id\":\"run-a\",\"port\":41001}", "address"},
        {"{\"run_id\":\"run-a\",\"address\":\"10.1.2.3\",\"port\":0}", "port"},
        {"{\"run_id\":\"run-a\",\"address\":\"10.1.2.3\",\"port\":65536}", "port"},
        {"{\"run_id\":\"run-a\",\"address\":\"10.1.2.3\",\"port\":1,\"x\":1}", "x"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(fx_http("PUT", T("e-rdv-1/rendezvous"), tok, bad[i].body, &out), 400);
        assert_string_equal(json_string_value(json_object_get(out, "field")), bad[i].field);
        json_decref(out);
    }
    assert_int_equal(fx_http("GET", T("e-rdv-1/rendezvous"), tok, NULL, &out), 400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "run_id");
    json_decref(out);
    /* Only the current attempt (a pod of the trial carries its run id) may report. */
    assert_int_equal(fx_http("PUT", T("e-rdv-1/rendezvous"), tok, rep, &out), 409);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "run_id");
    json_decref(out);
    fx_pod("e-rdv-2", "run-a", "e-rdv-2-0"); /* another trial's pod does not count */
    assert_int_equal(fx_http("PUT", T("e-rdv-1/rendezvous"), tok, rep, NULL), 409);
    /* The chief reports; the Trial's status keeps it. */
    fx_pod("e-rdv-1", "run-a", "e-rdv-1-0");
    assert_int_equal(fx_http("PUT", T("e-rdv-1/rendezvous"), tok, rep, NULL), 200);
    json_t *t = fx_get_trial("e-rdv-1");
    json_t *r = json_object_get(json_object_get(t, "status"), "rendezvous");
    assert_string_equal(json_string_value(json_object_get(r, "runId")), "run-a");
    assert_string_equal(json_string_value(json_object_get(r, "address")), "10.1.2.3");
    assert_int_equal(json_integer_value(json_object_get(r, "port")), 41001);
    json_decref(t);
    /* The other nodes of run-a get it (the cache may lag the write: a long-poll waits). */
    assert_int_equal(
        fx_http("GET", T("e-rdv-1/rendezvous?run_id=run-a&timeout=10"), tok, NULL, &out), 200);
    assert_true(json_is_true(json_object_get(out, "ready")));
    assert_string_equal(json_string_value(json_object_get(out, "address")), "10.1.2.3");
    assert_int_equal(json_integer_value(json_object_get(out, "port")), 41001);
    json_decref(out);
    /* Another run never gets run-a's chief. */
    assert_int_equal(fx_http("GET", T("e-rdv-1/rendezvous?run_id=run-b"), tok, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "ready")));
    json_decref(out);
    /* A waiting poll for run-b returns once run-b's chief reports. */
    pthread_t th;
    struct later l = {500, "trials", "e-rdv-1", "status",
                      "{\"status\":{\"rendezvous\":{\"runId\":\"run-b\",\"address\":\"10.1.2.4\","
                      "\"port\":41002}}}"};
    pthread_create(&th, NULL, patch_later, &l);
    int64_t t0 = kd_mono_ms();
    assert_int_equal(
        fx_http("GET", T("e-rdv-1/rendezvous?run_id=run-b&timeout=20"), tok, NULL, &out), 200);
    int64_t took = kd_mono_ms() - t0;
    pthread_join(th, NULL);
    assert_true(json_is_true(json_object_get(out, "ready")));
    assert_string_equal(json_string_value(json_object_get(out, "address")), "10.1.2.4");
    assert_int_equal(json_integer_value(json_object_get(out, "port")), 41002);
    assert_true(took >= 400 && took < 10000);
    json_decref(out);
    /* ... and from then on run-a (a stale attempt) is told nothing. */
    assert_int_equal(fx_http("GET", T("e-rdv-1/rendezvous?run_id=run-a"), tok, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "ready")));
    json_decref(out);
    /* A short poll with nothing reported answers not ready when its time is up. */
    t0 = kd_mono_ms();
    assert_int_equal(
        fx_http("GET", T("e-rdv-2/rendezvous?run_id=run-a&timeout=1"), tok2, NULL, &out), 200);
    assert_false(json_is_true(json_object_get(out, "ready")));
    assert_true(kd_mono_ms() - t0 >= 900);
    json_decref(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_stored_as_sent),
        cmocka_unit_test(test_experiment_series),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_caps_and_malformed),
        cmocka_unit_test(test_validation_updates_status),
        cmocka_unit_test(test_concurrent_validations),
        cmocka_unit_test(test_metric_from_annotations),
        cmocka_unit_test(test_searcher_long_poll),
        cmocka_unit_test(test_preemption_long_poll),
        cmocka_unit_test(test_time_metric_and_searcher_stop),
        cmocka_unit_test(test_checkpoint_and_early_exit),
        cmocka_unit_test(test_rendezvous),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
