/*
 * libdtrain's controller client against the real API server (private
 * PostgreSQL, real kdet-local): metrics batched and stored exactly once,
 * including across a restart of the API in the middle of reporting; the
 * searcher's next operation; the preemption signal; checkpoints; early
 * exits; errors that name the cause and never the token.
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

#include "core/time.h"
#include "dtrain_client.h"
#include "fx.h"

static struct dtrain_client *client_for(const char *trial, char *tok, size_t toklen)
{
    char uid[64], err[DTRAIN_ERRLEN] = "";
    struct dtrain_client *c = NULL;
    fx_trial("d-exp", trial, 100, uid, sizeof(uid));
    fx_token(trial, uid, tok, toklen);
    setenv("KDET_CONTROLLER_URL", fx.url, 1);
    setenv("KDET_TOKEN", tok, 1);
    setenv("KDET_TRIAL_ID", trial, 1);
    setenv("KDET_RUN_ID", "0123456789abcdef", 1);
    setenv("RANK", "0", 1);
    if (dtrain_client_from_env(&c, err) != 0)
        fail_msg("dtrain_client_from_env: %s", err);
    return c;
}

static long long rows_of(const char *uid, const char *kind)
{
    char sql[512];
    assert_int_equal(kd_store_metrics_flush(fx.store, 10000), 0);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM metrics WHERE kind = '%s' AND trial_id = (SELECT id FROM "
             "trials WHERE uid = '%s')",
             kind, uid);
    return fx_sql_int(sql);
}

static const char *uid_of(const char *trial)
{
    static char uid[64];
    json_t *t = fx_get_trial(trial);
    snprintf(uid, sizeof(uid), "%s", kd_k8s_meta_str(t, "uid"));
    json_decref(t);
    return uid;
}

static void test_env(void **state)
{
    (void)state;
    struct dtrain_client *c = NULL;
    char err[DTRAIN_ERRLEN] = "";
    unsetenv("KDET_CONTROLLER_URL");
    assert_int_equal(dtrain_client_from_env(&c, err), DTRAIN_ENOTFOUND);
    assert_null(c);
    setenv("KDET_CONTROLLER_URL", "ftp://x", 1);
    setenv("KDET_TOKEN", "t0k3n-secret", 1);
    setenv("KDET_TRIAL_ID", "x-1", 1);
    assert_int_equal(dtrain_client_from_env(&c, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "url"));
    setenv("KDET_CONTROLLER_URL", "http://127.0.0.1:1", 1);
    setenv("KDET_TRIAL_ID", "Bad_Name", 1);
    assert_int_equal(dtrain_client_from_env(&c, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "trial"));
    assert_null(strstr(err, "t0k3n-secret"));
    unsetenv("KDET_TOKEN");
    assert_int_equal(dtrain_client_from_env(&c, err), DTRAIN_EINVAL);
    assert_non_null(strstr(err, "KDET_TOKEN"));
}

static void test_report_and_ops(void **state)
{
    (void)state;
    char tok[64], err[DTRAIN_ERRLEN] = "", m[128];
    fx_experiment("d-exp", "validation_loss");
    struct dtrain_client *c = client_for("d-exp-1", tok, sizeof(tok));
    /* 250 training rows: two batches of 100 go by themselves, the rest with the validation. */
    for (int i = 1; i <= 250; i++) {
        snprintf(m, sizeof(m), "{\"loss\":%g,\"step\":%d}", 1.0 / i, i);
        assert_int_equal(dtrain_report_metrics(c, "training", i, m, err), 0);
    }
    assert_int_equal(rows_of(uid_of("d-exp-1"), "training"), 200);
    assert_int_equal(
        dtrain_report_metrics(c, "validation", 250, "{\"validation_loss\":0.125,\"acc\":0.9}", err),
        0);
    const char *uid = uid_of("d-exp-1");
    assert_int_equal(rows_of(uid, "training"), 250);
    assert_int_equal(rows_of(uid, "validation"), 1);
    json_t *t = fx_get_trial("d-exp-1");
    json_t *lv = json_object_get(json_object_get(t, "status"), "latestValidation");
    assert_true(json_number_value(json_object_get(lv, "value")) == 0.125);
    json_decref(t);
    /* The controller's refusals come back with the field named. */
    assert_int_equal(dtrain_report_metrics(c, "validation", 260, "{\"acc\":1}", err),
                     DTRAIN_EINVAL);
    assert_non_null(strstr(err, "rows[0].metrics.validation_loss"));
    assert_int_equal(dtrain_report_metrics(c, "weird", 1, "{}", err), DTRAIN_EINVAL);
    assert_int_equal(dtrain_report_metrics(c, "training", 1, "[1]", err), DTRAIN_EINVAL);

    /* Searcher operations. */
    int64_t len = 0;
    int stop = 0;
    assert_int_equal(dtrain_searcher_next(c, 0, 5000, &len, &stop, err), 0);
    assert_int_equal(len, 100);
    assert_int_equal(stop, 0);
    assert_int_equal(dtrain_searcher_next(c, 100, 1500, &len, &stop, err), DTRAIN_ETIMEDOUT);
    fx_patch("trials", "d-exp-1", NULL, "{\"spec\":{\"validateAfter\":400}}");
    assert_int_equal(dtrain_searcher_next(c, 100, 10000, &len, &stop, err), 0);
    assert_int_equal(len, 400);
    /* Closed once it got there (closed below its target it would be preempted). */
    fx_patch("trials", "d-exp-1", NULL, "{\"spec\":{\"closed\":true}}");
    assert_int_equal(dtrain_searcher_next(c, 400, 10000, &len, &stop, err), 0);
    assert_int_equal(stop, DTRAIN_SEARCHER_STOP);
    /* Paused while waiting: the worker is told to checkpoint and exit, at once. */
    fx_patch("trials", "d-exp-1", NULL, "{\"spec\":{\"validateAfter\":800,\"closed\":false}}");
    fx_patch("trials", "d-exp-1", NULL, "{\"spec\":{\"paused\":true}}");
    int64_t t0 = kd_mono_ms();
    for (int i = 0; i < 100; i++) { /* until the informer has the pause */
        assert_int_equal(dtrain_searcher_next(c, 400, 10000, &len, &stop, err), 0);
        if (stop == DTRAIN_SEARCHER_PREEMPT)
            break;
        kd_sleep_ms(20);
    }
    assert_int_equal(stop, DTRAIN_SEARCHER_PREEMPT);
    assert_true(kd_mono_ms() - t0 < 5000);
    fx_patch("trials", "d-exp-1", NULL, "{\"spec\":{\"paused\":false}}");

    /* Preemption. */
    int pre = -1;
    for (int i = 0; i < 250; i++) { /* until the informer has the trial's unpause */
        assert_int_equal(dtrain_should_preempt(c, 0, &pre, err), 0);
        if (pre == 0)
            break;
        kd_sleep_ms(20);
    }
    assert_int_equal(pre, 0);
    fx_patch("experiments", "d-exp", NULL, "{\"spec\":{\"paused\":true}}");
    assert_int_equal(dtrain_should_preempt(c, 10000, &pre, err), 0);
    assert_int_equal(pre, 1);
    fx_patch("experiments", "d-exp", NULL, "{\"spec\":{\"paused\":false}}");

    /* Checkpoints and early exit. */
    assert_int_equal(dtrain_checkpoint_register(c, "c0ffee00-0000-4000-8000-000000000001", 400,
                                                "/ckpt/c0ffee00", 123, "{\"epoch\":1}", err),
                     0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM checkpoints WHERE uuid = "
                                "'c0ffee00-0000-4000-8000-000000000001' AND size_bytes = 123"),
                     1);
    assert_int_equal(dtrain_exit_early(c, "user_canceled", "stopped by the user", err), 0);
    assert_int_equal(dtrain_exit_early(c, "tired", NULL, err), DTRAIN_EINVAL);
    t = fx_get_trial("d-exp-1");
    json_t *cond = json_array_get(json_object_get(json_object_get(t, "status"), "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(cond, "reason")), "UserCanceled");
    json_decref(t);
    dtrain_client_free(c);

    /* A wrong token: unauthorized, and the token is not in the message. */
    struct dtrain_client_opts o = {.url = fx.url, .token = "wrong-token-value", .trial = "d-exp-1"};
    assert_int_equal(dtrain_client_new(&o, &c, err), 0);
    assert_int_equal(dtrain_report_metrics(c, "validation", 1, "{\"validation_loss\":1}", err),
                     DTRAIN_EUNAUTHORIZED);
    assert_null(strstr(err, "wrong-token-value"));
    assert_non_null(strstr(err, "HTTP 401"));
    dtrain_client_free(c);
}

struct reporter {
    struct dtrain_client *c;
    int n, rc;
    char err[DTRAIN_ERRLEN];
};

static void *report_many(void *p)
{
    struct reporter *r = p;
    char m[64];
    for (int i = 1; i <= r->n && r->rc == 0; i++) {
        snprintf(m, sizeof(m), "{\"loss\":%d}", i);
        r->rc = dtrain_report_metrics(r->c, "training", i, m, r->err);
        if (i % 5 == 0)
            kd_sleep_ms(10);
    }
    if (r->rc == 0)
        r->rc = dtrain_client_flush(r->c, r->err);
    return NULL;
}

static void test_api_restart(void **state)
{
    (void)state;
    char tok[64], uid[64], err[DTRAIN_ERRLEN] = "";
    fx_trial("d-exp", "d-exp-2", 100, uid, sizeof(uid));
    fx_token("d-exp-2", uid, tok, sizeof(tok));
    struct dtrain_client_opts o = {.url = fx.url,
                                   .token = tok,
                                   .trial = "default/d-exp-2",
                                   .batch_rows = 20,
                                   .retry_ms = 60000};
    struct reporter r = {.n = 1000};
    assert_int_equal(dtrain_client_new(&o, &r.c, err), 0);
    pthread_t th;
    pthread_create(&th, NULL, report_many, &r);
    kd_sleep_ms(600);
    int port = fx.port;
    fx_api_stop(); /* the controller goes away in the middle of reporting ... */
    kd_sleep_ms(1500);
    fx_api_start(port); /* ... and comes back on the same address */
    pthread_join(th, NULL);
    if (r.rc != 0)
        fail_msg("reporting across the restart: %s", r.err);
    assert_int_equal(rows_of(uid, "training"), 1000);
    /* Every step exactly once. */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT count(DISTINCT step) FROM metrics WHERE trial_id = (SELECT id FROM trials "
             "WHERE uid = '%s')",
             uid);
    assert_int_equal(fx_sql_int(sql), 1000);
    dtrain_client_free(r.c);
}

struct shared {
    struct dtrain_client *c;
    int base, rc;
    char err[DTRAIN_ERRLEN];
};

static void *report_shared(void *p)
{
    struct shared *s = p;
    char m[64];
    for (int i = 0; i < 500 && s->rc == 0; i++) {
        snprintf(m, sizeof(m), "{\"thread\":%d}", s->base);
        s->rc = dtrain_report_metrics(s->c, "training", s->base * 1000 + i, m, s->err);
    }
    return NULL;
}

static void test_shared_handle(void **state)
{
    (void)state;
    char tok[64], uid[64], err[DTRAIN_ERRLEN] = "";
    struct dtrain_client *c = NULL;
    fx_trial("d-exp", "d-exp-3", 100, uid, sizeof(uid));
    fx_token("d-exp-3", uid, tok, sizeof(tok));
    struct dtrain_client_opts o = {
        .url = fx.url, .token = tok, .trial = "d-exp-3", .batch_rows = 7};
    assert_int_equal(dtrain_client_new(&o, &c, err), 0);
    struct shared sh[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        sh[i] = (struct shared){.c = c, .base = i + 1};
        pthread_create(&th[i], NULL, report_shared, &sh[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (sh[i].rc != 0)
            fail_msg("thread %d: %s", i, sh[i].err);
    }
    assert_int_equal(dtrain_client_flush(c, err), 0);
    dtrain_client_free(c);
    /* 4 x 500 rows from one handle, each stored once. */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT count(DISTINCT step) FROM metrics WHERE trial_id = (SELECT id FROM trials "
             "WHERE uid = '%s')",
             uid);
    assert_int_equal(fx_sql_int(sql), 2000);
    assert_int_equal(rows_of(uid, "training"), 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_report_and_ops),
        cmocka_unit_test(test_api_restart),
        cmocka_unit_test(test_shared_handle),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
