/*
 * Figures for the API on the test machine (private PostgreSQL with fsync
 * off, kdet-local): latency of durable metric POSTs, rows per second from
 * 4 concurrent reporting trials through libdtrain's client, and how fast a
 * searcher-operation long-poll wakes after the Trial changes. Loose bounds
 * make it fail only when something is badly wrong; the figures are printed.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/time.h"
#include "dtrain_client.h"
#include "fx.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_post_latency(void **state)
{
    (void)state;
    char uid[64], tok[64], key[32];
    enum { N = 200, ROWS = 100 };
    static int64_t us[N];
    fx_experiment("p-lat", "validation_loss");
    fx_trial("p-lat", "p-lat-1", 100, uid, sizeof(uid));
    fx_token("p-lat-1", uid, tok, sizeof(tok));
    size_t cap = ROWS * 96 + 256;
    char *body = malloc(cap);
    assert_non_null(body);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "b%d", i);
        int n = snprintf(body, cap, "{\"kind\":\"training\",\"key\":\"%s\",\"rows\":[", key);
        for (int r = 0; r < ROWS; r++)
            n += snprintf(body + n, cap - (size_t)n,
                          "%s{\"batches\":%d,\"metrics\":{\"loss\":%.6f,\"acc\":%.6f,\"lr\":0.01,"
                          "\"gnorm\":%.3f}}",
                          r ? "," : "", i * ROWS + r, 1.0 / (r + 1), r / 100.0, r * 0.5);
        snprintf(body + n, cap - (size_t)n, "]}");
        int64_t t0 = kd_mono_ns();
        assert_int_equal(
            fx_http("POST", "/api/v1/namespaces/default/trials/p-lat-1/metrics", tok, body, NULL),
            200);
        us[i] = (kd_mono_ns() - t0) / 1000;
    }
    free(body);
    qsort(us, N, sizeof(us[0]), cmp_i64);
    fprintf(stderr, "durable POST of a %d-row batch: p50 %.1f ms, p99 %.1f ms (%d batches)\n", ROWS,
            us[N / 2] / 1000.0, us[N * 99 / 100] / 1000.0, N);
    assert_true(us[N / 2] < 1000000);
    assert_int_equal(kd_store_metrics_flush(fx.store, 10000), 0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM metrics WHERE kind = 'training' AND "
                                "trial_id = (SELECT max(id) FROM trials)"),
                     N * ROWS);
}

struct rep {
    char trial[32];
    int rc;
    char err[DTRAIN_ERRLEN];
};

static void *reporter(void *p)
{
    struct rep *r = p;
    char uid[64], tok[64], m[96];
    struct dtrain_client *c = NULL;
    fx_trial("p-rate", r->trial, 100, uid, sizeof(uid));
    fx_token(r->trial, uid, tok, sizeof(tok));
    struct dtrain_client_opts o = {.url = fx.url, .token = tok, .trial = r->trial};
    r->rc = dtrain_client_new(&o, &c, r->err);
    for (int i = 1; i <= 5000 && r->rc == 0; i++) {
        snprintf(m, sizeof(m), "{\"loss\":%.5f,\"acc\":%.4f}", 1.0 / i, i / 5000.0);
        r->rc = dtrain_report_metrics(c, "training", i, m, r->err);
    }
    if (r->rc == 0)
        r->rc = dtrain_client_flush(c, r->err);
    dtrain_client_free(c);
    return NULL;
}

static void test_client_rate(void **state)
{
    (void)state;
    enum { T = 4 };
    struct rep reps[T];
    pthread_t th[T];
    fx_experiment("p-rate", "validation_loss");
    int64_t t0 = kd_mono_ms();
    for (int i = 0; i < T; i++) {
        memset(&reps[i], 0, sizeof(reps[i]));
        snprintf(reps[i].trial, sizeof(reps[i].trial), "p-rate-%d", i);
        pthread_create(&th[i], NULL, reporter, &reps[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        if (reps[i].rc != 0)
            fail_msg("%s: %s", reps[i].trial, reps[i].err);
    }
    int64_t ms = kd_mono_ms() - t0;
    fprintf(stderr,
            "libdtrain client: %d trials x 5000 rows (100-row batches) in %lld ms: %.0f "
            "rows/s acknowledged durable\n",
            T, (long long)ms, T * 5000 * 1000.0 / (double)(ms ? ms : 1));
    assert_true(ms < 60000);
}

struct later {
    char patch[80];
    int64_t t_ns; /* when the patch was answered */
};

static void *patch_later(void *p)
{
    struct later *l = p;
    kd_sleep_ms(200);
    fx_patch("trials", "p-wake-1", NULL, l->patch);
    l->t_ns = kd_mono_ns();
    return NULL;
}

static void test_long_poll_wakeup(void **state)
{
    (void)state;
    char uid[64], tok[64], path[160];
    json_t *out = NULL;
    enum { N = 10 };
    int64_t worst = 0, sum = 0;
    fx_experiment("p-wake", "validation_loss");
    fx_trial("p-wake", "p-wake-1", 100, uid, sizeof(uid));
    fx_token("p-wake-1", uid, tok, sizeof(tok));
    for (int i = 0; i < N; i++) {
        /* The worker waits at `completed` = the current target; the searcher raises it. */
        long long target = 100LL * (i + 1);
        struct later l = {.t_ns = 0};
        pthread_t th;
        snprintf(path, sizeof(path),
                 "/api/v1/namespaces/default/trials/p-wake-1/searcher/operation?completed=%lld"
                 "&timeout=20",
                 target);
        snprintf(l.patch, sizeof(l.patch), "{\"spec\":{\"validateAfter\":%lld}}", target + 100);
        pthread_create(&th, NULL, patch_later, &l);
        assert_int_equal(fx_http("GET", path, tok, NULL, &out), 200);
        int64_t t_ans = kd_mono_ns();
        pthread_join(th, NULL);
        assert_int_equal(json_integer_value(json_object_get(out, "length")), target + 100);
        json_decref(out);
        /* The answer may even arrive before the patcher sees its own reply. */
        int64_t d = t_ans > l.t_ns ? (t_ans - l.t_ns) / 1000 : 0;
        sum += d;
        if (d > worst)
            worst = d;
    }
    fprintf(stderr,
            "searcher long-poll answered %.1f ms (mean), %.1f ms (worst) after the Trial patch "
            "returned\n",
            sum / (double)N / 1000.0, worst / 1000.0);
    assert_true(worst < 5000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_latency),
        cmocka_unit_test(test_client_rate),
        cmocka_unit_test(test_long_poll_wakeup),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
