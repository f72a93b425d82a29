/*
 * Trial logs through the API, against a private PostgreSQL and a real
 * kdet-local: the worker route stores what is sent (once per key, only with
 * that trial's token, bad bodies named), the user routes read a trial's and
 * an experiment's lines (tail, after, before, grep, contains; integer ids),
 * the per-trial cap, a follow stream that ends when the trial ends and
 * resumes from Last-Event-ID, and kdet-launch's shipper (launcher/logship.c)
 * against the real API: every line stored once across an API restart, a
 * refused token ends shipping, the exit flush is bounded.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/time.h"
#include "api/api_int.h"
#include "fx.h"
#include "logship.h"

#define NSP "/api/v1/namespaces/default/"

/* POST n lines "<prefix> i" with key; returns the status, *ans the answer. */
static int post_lines(const char *trial, const char *tok, const char *key, const char *prefix,
                      int first, int n, int rank, json_t **ans)
{
    json_t *lines = json_array();
    char text[128], path[256];
    for (int i = 0; i < n; i++) {
        snprintf(text, sizeof(text), "%s %d", prefix, first + i);
        json_array_append_new(lines, json_pack("{s:i,s:s,s:s,s:s}", "rank", rank, "stream",
                                               i % 2 ? "stderr" : "stdout", "timestamp",
                                               "2026-11-21T17:30:00.250Z", "line", text));
    }
    json_t *body = json_pack("{s:s,s:s,s:o}", "key", key, "run_id", "run-a", "lines", lines);
    char *s = json_dumps(body, JSON_COMPACT);
    snprintf(path, sizeof(path), NSP "trials/%s/logs", trial);
    int code = fx_http("POST", path, tok, s, ans);
    free(s);
    json_decref(body);
    return code;
}

static json_t *get_logs(const char *path_and_query)
{
    json_t *ans = NULL;
    int code = fx_http("GET", path_and_query, FX_USER_TOKEN, NULL, &ans);
    if (code != 200)
        fail_msg("GET %s: %d", path_and_query, code);
    return ans;
}

static const char *line_at(const json_t *ans, size_t i)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(ans, "logs"), i), "line"));
}

static void test_worker_route(void **state)
{
    (void)state;
    char ua[64], ub[64], ta[64], tb[64];
    json_t *ans = NULL;
    fx_experiment("lg", "loss");
    fx_trial("lg", "lg-1", 100, ua, sizeof(ua));
    fx_trial("lg", "lg-2", 100, ub, sizeof(ub));
    fx_token("lg-1", ua, ta, sizeof(ta));
    fx_token("lg-2", ub, tb, sizeof(tb));
    assert_int_equal(post_lines("lg-1", ta, "k1", "hello", 0, 4, 0, &ans), 200);
    assert_int_equal(json_integer_value(json_object_get(ans, "stored")), 4);
    assert_false(json_is_true(json_object_get(ans, "duplicate")));
    json_decref(ans);
    /* the same key again: acknowledged, stored once */
    assert_int_equal(post_lines("lg-1", ta, "k1", "hello", 0, 4, 0, &ans), 200);
    assert_true(json_is_true(json_object_get(ans, "duplicate")));
    assert_int_equal(json_integer_value(json_object_get(ans, "stored")), 0);
    json_decref(ans);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM trial_logs"), 4);
    /* tokens: none, wrong, another trial's: 401, nothing written */
    assert_int_equal(post_lines("lg-1", NULL, "k2", "x", 0, 1, 0, NULL), 401);
    assert_int_equal(post_lines("lg-1", "not-a-token", "k2", "x", 0, 1, 0, NULL), 401);
    assert_int_equal(post_lines("lg-1", tb, "k2", "x", 0, 1, 0, NULL), 401);
    assert_int_equal(post_lines("lg-1", FX_USER_TOKEN, "k2", "x", 0, 1, 0, NULL), 401);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM trial_logs"), 4);
    /* bad bodies: 400 naming the field */
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"[]", "body"},
        {"{\"lines\":[{\"rank\":0,\"stream\":\"stdout\",\"line\":\"x\"}]}", "key"},
        {"{\"key\":\"b\",\"lines\":[]}", "lines"},
        {"{\"key\":\"b\",\"lines\":\"x\"}", "lines"},
        {"{\"key\":\"b\",\"lines\":[{\"rank\":0,\"stream\":\"stdout\"}]}", "lines[0].line"},
        {"{\"key\":\"b\",\"lines\":[{\"rank\":-2,\"stream\":\"stdout\",\"line\":\"x\"}]}",
         "lines[0].rank"},
        {"{\"key\":\"b\",\"lines\":[{\"rank\":0,\"stream\":\"stdin\",\"line\":\"x\"}]}",
         "lines[0].stream"},
        {"{\"key\":\"b\",\"lines\":[{\"rank\":0,\"stream\":\"stdout\",\"line\":\"x\","
         "\"timestamp\":\"yesterday\"}]}",
         "lines[0].timestamp"},
        {"{\"key\":\"b\",\"lines\":[{\"rank\":0,\"stream\":\"stdout\",\"line\":\"x\","
         "\"colour\":1}]}",
         "lines[0].colour"},
        {"{\"key\":\"b\",\"lines\":[{\"rank\":0,\"stream\":\"stdout\",\"line\":7}]}",
         "lines[0].line"},
        {"{\"key\":\"b\",\"run_id\":5,\"lines\":[{\"rank\":0,\"stream\":\"stdout\",\"line\":\"x\"}]"
         "}",
         "run_id"},
        {"{\"key\":\"has space\",\"lines\":[{\"rank\":0,\"stream\":\"stdout\",\"line\":\"x\"}]}",
         "key"},
        {"{\"key\":\"b\",\"lines\":[{\"rank\":0,\"stream\":\"stdout\",\"line\":\"a\\u0000b\"}]}",
         "body"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int code = fx_http("POST", NSP "trials/lg-1/logs", ta, bad[i].body, &ans);
        const char *f = json_string_value(json_object_get(ans, "field"));
        if (code != 400 || f == NULL || strcmp(f, bad[i].field) != 0)
            fail_msg("case %zu: %d field %s; want 400 field %s", i, code, f ? f : "(none)",
                     bad[i].field);
        json_decref(ans);
    }
    assert_int_equal(fx_sql_int("SELECT count(*) FROM trial_logs"), 4);
    /* over the route's cap: 413 naming it */
    size_t big = KD_API_MAX_LOGS_BODY + 100;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    body[big] = '\0';
    assert_int_equal(fx_http("POST", NSP "trials/lg-1/logs", ta, body, &ans), 413);
    assert_non_null(strstr(json_string_value(json_object_get(ans, "error")), "1024 KiB"));
    json_decref(ans);
    free(body);
    /* the user token cannot read with GET ... it can; a trial token cannot */
    assert_int_equal(fx_http("GET", NSP "trials/lg-1/logs", ta, NULL, NULL), 401);
    assert_int_equal(fx_http("GET", NSP "trials/lg-1/logs", NULL, NULL, NULL), 401);
    assert_int_equal(fx_http("PUT", NSP "trials/lg-1/logs", FX_USER_TOKEN, "{}", NULL), 405);
    assert_non_null(strstr(fx_last_header("Allow"), "POST"));
    assert_non_null(strstr(fx_last_header("Allow"), "GET"));
}

static void test_user_routes(void **state)
{
    (void)state;
    char ua[64], ub[64], ta[64], tb[64];
    json_t *ans;
    fx_experiment("lu", "loss");
    fx_experiment("lu-other", "loss");
    fx_trial("lu", "lu-1", 100, ua, sizeof(ua));
    fx_trial("lu", "lu-2", 100, ub, sizeof(ub));
    fx_token("lu-1", ua, ta, sizeof(ta));
    fx_token("lu-2", ub, tb, sizeof(tb));
    /* nothing stored yet: an empty list, not an error */
    ans = get_logs(NSP "trials/lu-1/logs");
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 0);
    json_decref(ans);
    assert_int_equal(fx_http("GET", NSP "trials/lu-none/logs", FX_USER_TOKEN, NULL, NULL), 404);
    for (int k = 0; k < 3; k++) {
        char key[16];
        snprintf(key, sizeof(key), "u%d", k);
        assert_int_equal(post_lines("lu-1", ta, key, "one", k * 10, 10, 0, NULL), 200);
        assert_int_equal(post_lines("lu-2", tb, key, "two", k * 10, 10, 1, NULL), 200);
    }
    assert_int_equal(
        post_lines("lu-1", ta, "tb", "Traceback (most recent call last):", 0, 1, 1, NULL), 200);
    ans = get_logs(NSP "trials/lu-1/logs");
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 31);
    json_t *l0 = json_array_get(json_object_get(ans, "logs"), 0);
    assert_string_equal(json_string_value(json_object_get(l0, "line")), "one 0");
    assert_string_equal(json_string_value(json_object_get(l0, "trial")), "lu-1");
    assert_string_equal(json_string_value(json_object_get(l0, "timestamp")),
                        "2026-11-21T17:30:00.250Z");
    assert_string_equal(json_string_value(json_object_get(l0, "run_id")), "run-a");
    json_decref(ans);
    ans = get_logs(NSP "trials/lu-1/logs?tail=3");
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 3);
    assert_string_equal(line_at(ans, 0), "one 28");
    assert_string_equal(line_at(ans, 2), "Traceback (most recent call last): 0");
    int64_t last = json_integer_value(json_object_get(ans, "last_id"));
    json_decref(ans);
    ans = get_logs(NSP "trials/lu-1/logs?grep=%5ETraceback");
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 1);
    json_decref(ans);
    ans = get_logs(NSP "trials/lu-1/logs?contains=one%201");
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 11);
    json_decref(ans);
    assert_int_equal(fx_http("GET", NSP "trials/lu-1/logs?grep=(bad", FX_USER_TOKEN, NULL, &ans),
                     400);
    assert_string_equal(json_string_value(json_object_get(ans, "field")), "grep");
    json_decref(ans);
    assert_int_equal(fx_http("GET", NSP "trials/lu-1/logs?tail=100000", FX_USER_TOKEN, NULL, &ans),
                     400);
    assert_string_equal(json_string_value(json_object_get(ans, "field")), "tail");
    json_decref(ans);
    char path[256];
    snprintf(path, sizeof(path), NSP "trials/lu-1/logs?before=%lld&tail=2", (long long)last);
    ans = get_logs(path);
    assert_string_equal(line_at(ans, 0), "one 28");
    assert_string_equal(line_at(ans, 1), "one 29");
    json_decref(ans);
    snprintf(path, sizeof(path), NSP "trials/lu-1/logs?after=%lld", (long long)last);
    ans = get_logs(path);
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 0);
    json_decref(ans);
    /* the trial by its integer id */
    long long tid = fx_sql_int("SELECT trial_id FROM trial_logs WHERE line = 'two 0'");
    snprintf(path, sizeof(path), NSP "trials/%lld/logs?tail=1", tid);
    ans = get_logs(path);
    assert_string_equal(line_at(ans, 0), "two 29");
    assert_string_equal(json_string_value(json_object_get(ans, "trial")), "lu-2");
    json_decref(ans);
    /* the experiment: both trials in the order stored, each line naming its trial */
    ans = get_logs(NSP "experiments/lu/logs");
    json_t *ls = json_object_get(ans, "logs");
    assert_int_equal(json_array_size(ls), 61);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ls, 10), "trial")),
                        "lu-2");
    assert_string_equal(line_at(ans, 10), "two 0");
    json_decref(ans);
    ans = get_logs(NSP "experiments/lu/logs?tail=2");
    assert_string_equal(line_at(ans, 0), "two 29");
    json_decref(ans);
    ans = get_logs(NSP "experiments/lu-other/logs");
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 0);
    json_decref(ans);
}

static void test_cap(void **state)
{
    (void)state;
    char ua[64], ta[64];
    json_t *ans = NULL;
    fx_api_stop();
    fx_log_max_bytes = 50; /* "cap N" is 5 or 6 bytes: 0..9 fit (50) */
    fx_api_start(0);
    fx_experiment("lc", "loss");
    fx_trial("lc", "lc-1", 100, ua, sizeof(ua));
    fx_token("lc-1", ua, ta, sizeof(ta));
    assert_int_equal(post_lines("lc-1", ta, "c1", "cap", 0, 8, 0, &ans), 200);
    assert_int_equal(json_integer_value(json_object_get(ans, "stored")), 8);
    json_decref(ans);
    assert_int_equal(post_lines("lc-1", ta, "c2", "cap", 8, 8, 0, &ans), 200);
    assert_int_equal(json_integer_value(json_object_get(ans, "stored")), 2);
    assert_int_equal(json_integer_value(json_object_get(ans, "dropped")), 6);
    json_decref(ans);
    assert_int_equal(post_lines("lc-1", ta, "c3", "cap", 16, 8, 0, &ans), 200);
    assert_int_equal(json_integer_value(json_object_get(ans, "stored")), 0);
    json_decref(ans);
    ans = get_logs(NSP "trials/lc-1/logs");
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 11);
    assert_non_null(strstr(line_at(ans, 10), "reached the limit of 50 bytes"));
    json_decref(ans);
    fx_api_stop();
    fx_log_max_bytes = 0;
    fx_api_start(0);
}

/* ---- following ---------------------------------------------------------------------------- */

static void test_follow(void **state)
{
    (void)state;
    char ua[64], ta[64];
    fx_experiment("lf", "loss");
    fx_trial("lf", "lf-1", 100, ua, sizeof(ua));
    fx_token("lf-1", ua, ta, sizeof(ta));
    fx_patch("trials", "lf-1", "status", "{\"status\":{\"state\":\"ACTIVE\"}}");
    assert_int_equal(post_lines("lf-1", ta, "f0", "before", 0, 5, 0, NULL), 200);
    /* -f --tail 2 and a grep'd follower */
    struct fx_sse s1 = {.path = NSP "trials/lf-1/logs/stream?tail=2"};
    struct fx_sse s2 = {.path = NSP "trials/lf-1/logs/stream?grep=after%203"};
    kd_buf_init(&s1.got, 1 << 20);
    kd_buf_init(&s2.got, 1 << 20);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, fx_sse_thread, &s1);
    pthread_create(&t2, NULL, fx_sse_thread, &s2);
    for (int i = 0; i < 200 && !(atomic_load(&s1.connected) && atomic_load(&s2.connected)); i++)
        kd_sleep_ms(25);
    assert_true(atomic_load(&s1.connected) && atomic_load(&s2.connected));
    int64_t t0 = kd_mono_ms();
    assert_int_equal(post_lines("lf-1", ta, "f1", "after", 0, 5, 1, NULL), 200);
    /* the stream gets the new lines within a moment, then the end once the trial ended */
    for (int i = 0; i < 200 && strstr(kd_buf_str(&s1.got), "after 4") == NULL; i++)
        kd_sleep_ms(25);
    int64_t waited = kd_mono_ms() - t0;
    printf("# a stored batch reached the follower in %lld ms\n", (long long)waited);
    assert_non_null(strstr(kd_buf_str(&s1.got), "after 4"));
    assert_true(waited < 3000);
    fx_patch("trials", "lf-1", "status", "{\"status\":{\"state\":\"ERROR\"}}");
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    assert_int_equal(s1.code, 200);
    const char *g = kd_buf_str(&s1.got);
    assert_null(strstr(g, "before 2\""));
    assert_non_null(strstr(g, "before 3\""));
    assert_non_null(strstr(g, "before 4\""));
    assert_non_null(strstr(g, "event: logs\n"));
    assert_non_null(strstr(g, "event: end\ndata: {\"state\":\"ERROR\""));
    g = kd_buf_str(&s2.got);
    assert_non_null(strstr(g, "after 3\""));
    assert_null(strstr(g, "after 2\""));
    assert_null(strstr(g, "before"));
    assert_non_null(strstr(g, "event: end"));
    /* Last-Event-ID: resume after that line (the trial ended: the rest, then the end) */
    long long id2 = fx_sql_int("SELECT id FROM trial_logs WHERE line = 'after 2'");
    char lei[32];
    snprintf(lei, sizeof(lei), "%lld", id2);
    struct fx_sse s3 = {.path = NSP "trials/lf-1/logs/stream", .last_event_id = lei};
    kd_buf_init(&s3.got, 1 << 20);
    fx_sse_thread(&s3);
    g = kd_buf_str(&s3.got);
    assert_null(strstr(g, "after 2\""));
    assert_non_null(strstr(g, "after 3\""));
    assert_non_null(strstr(g, "after 4\""));
    assert_non_null(strstr(g, "event: end"));
    kd_buf_free(&s1.got);
    kd_buf_free(&s2.got);
    kd_buf_free(&s3.got);
    assert_int_equal(
        fx_http("GET", NSP "trials/lf-1/logs/stream?grep=(bad", FX_USER_TOKEN, NULL, NULL), 400);
    assert_int_equal(fx_http("GET", NSP "trials/nope/logs/stream", FX_USER_TOKEN, NULL, NULL), 404);
}

/* ---- log policies ------------------------------------------------------------------------ */

static json_t *policies_of(const char *trial)
{
    json_t *t = fx_get_trial(trial);
    json_t *p = json_incref(json_object_get(json_object_get(t, "status"), "logPolicies"));
    json_decref(t);
    return p;
}

static void test_log_policies(void **state)
{
    (void)state;
    char ua[64], ta[64], ub[64], tb[64];
    fx_experiment("lp", "loss");
    fx_patch("experiments", "lp", NULL,
             "{\"spec\":{\"log_policies\":[{\"name\":\"OOM\",\"pattern\":"
             "\"CUDA out of memory\",\"action\":\"cancel_retries\"},{\"pattern\":"
             "\"ECC error\",\"action\":{\"type\":\"exclude_node\"}},{\"name\":\"never\","
             "\"pattern\":\"^no such line$\",\"action\":\"cancel_retries\"}]}}");
    /* the API's cache has the policies before a line is sent */
    for (int i = 0; i < 100; i++) {
        json_t *e = NULL;
        fx_http("GET", NSP "experiments/lp", FX_USER_TOKEN, NULL, &e);
        bool seen =
            json_array_size(json_object_get(
                json_object_get(json_object_get(e, "experiment"), "spec"), "log_policies")) == 3;
        json_decref(e);
        if (seen)
            break;
        kd_sleep_ms(50);
    }
    fx_trial("lp", "lp-1", 100, ua, sizeof(ua));
    fx_token("lp-1", ua, ta, sizeof(ta));
    fx_pod("lp-1", "run-a", "lp-1-0");
    assert_int_equal(post_lines("lp-1", ta, "p1", "fine", 0, 3, 0, NULL), 200);
    json_t *p = policies_of("lp-1");
    assert_int_equal(json_array_size(p), 0);
    json_decref(p);
    assert_int_equal(
        post_lines("lp-1", ta, "p2", "RuntimeError: CUDA out of memory. Tried", 0, 2, 1, NULL),
        200);
    assert_int_equal(
        post_lines("lp-1", ta, "p3", "uncorrectable ECC error encountered", 0, 1, 0, NULL), 200);
    p = policies_of("lp-1");
    assert_int_equal(json_array_size(p), 2);
    json_t *oom = json_array_get(p, 0), *ecc = json_array_get(p, 1);
    assert_string_equal(json_string_value(json_object_get(oom, "name")), "OOM");
    assert_string_equal(json_string_value(json_object_get(oom, "action")), "cancel_retries");
    assert_string_equal(json_string_value(json_object_get(oom, "runId")), "run-a");
    assert_string_equal(json_string_value(json_object_get(oom, "line")),
                        "RuntimeError: CUDA out of memory. Tried 0");
    assert_null(json_object_get(oom, "node"));
    assert_string_equal(json_string_value(json_object_get(ecc, "action")), "exclude_node");
    assert_string_equal(json_string_value(json_object_get(ecc, "node")), "kd-test-nowhere");
    assert_null(json_object_get(ecc, "name"));
    json_decref(p);
    /* the same batch again, and the same match in a new batch: recorded once */
    assert_int_equal(
        post_lines("lp-1", ta, "p3", "uncorrectable ECC error encountered", 0, 1, 0, NULL), 200);
    assert_int_equal(post_lines("lp-1", ta, "p4", "another ECC error", 0, 1, 0, NULL), 200);
    p = policies_of("lp-1");
    assert_int_equal(json_array_size(p), 2);
    json_decref(p);
    /* an experiment without policies: nothing recorded */
    fx_experiment("lq", "loss");
    fx_trial("lq", "lq-1", 100, ub, sizeof(ub));
    fx_token("lq-1", ub, tb, sizeof(tb));
    assert_int_equal(post_lines("lq-1", tb, "q1", "CUDA out of memory", 0, 1, 0, NULL), 200);
    p = policies_of("lq-1");
    assert_null(p);
    /* the pure matcher: the first matching line of each policy, the action's two forms */
    json_t *pol = json_loads("[{\"pattern\":\"b+\",\"action\":\"exclude_node\"},"
                             "{\"name\":\"n\",\"pattern\":\"^c\",\"action\":{\"type\":"
                             "\"cancel_retries\"}},{\"pattern\":\"a\",\"action\":\"reboot\"},"
                             "{\"pattern\":\"(\",\"action\":\"cancel_retries\"}]",
                             0, NULL);
    struct kd_log_line ls[3] = {
        {0, false, 1, "abb", 3}, {0, false, 1, "cbb", 3}, {0, false, 1, "xyz", 3}};
    json_t *m = api_log_policies_match(pol, ls, 3);
    assert_int_equal(json_array_size(m), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 0), "line")), "abb");
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "line")), "cbb");
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "action")),
                        "cancel_retries");
    json_decref(m);
    json_decref(pol);
}

/* ---- kdet-launch's shipper against the API ---------------------------------------------- */

static struct kd_logship *shipper(const char *trial, const char *tok)
{
    char err[KD_ERRLEN] = "";
    struct kd_logship *s = NULL;
    struct kd_logship_opts o = {.url = fx.url,
                                .ns = "default",
                                .trial = trial,
                                .token = tok,
                                .run_id = "run-ship",
                                .node_rank = 0};
    if (kd_logship_start(&o, &s, err) != 0)
        fail_msg("kd_logship_start: %s", err);
    return s;
}

static void ship(struct kd_logship *s, int rank, const char *prefix, int first, int n)
{
    char text[64];
    for (int i = first; i < first + n; i++) {
        snprintf(text, sizeof(text), "%s %d", prefix, i);
        kd_logship_line(s, rank, i % 2, text, strlen(text), "", 0);
    }
}

static void test_shipper(void **state)
{
    (void)state;
    char ua[64], ta[64];
    struct kd_logship_stats st;
    fx_experiment("ls", "loss");
    fx_trial("ls", "ls-1", 100, ua, sizeof(ua));
    fx_token("ls-1", ua, ta, sizeof(ta));
    /* from the environment: all four variables, and not switched off */
    struct kd_logship_opts o;
    setenv("KDET_CONTROLLER_URL", fx.url, 1);
    setenv("KDET_TOKEN", ta, 1);
    setenv("KDET_TRIAL_ID", "other-ns/ls-1", 1);
    unsetenv("KDET_NAMESPACE");
    assert_true(kd_logship_from_env(&o, "r", 0));
    assert_string_equal(o.ns, "other-ns");
    assert_string_equal(o.trial, "ls-1");
    setenv("KDET_TRIAL_ID", "ls-1", 1);
    assert_false(kd_logship_from_env(&o, "r", 0)); /* no namespace */
    setenv("KDET_NAMESPACE", "default", 1);
    assert_true(kd_logship_from_env(&o, "r", 0));
    setenv("KDET_LOG_SHIPPING", "0", 1);
    assert_false(kd_logship_from_env(&o, "r", 0));
    unsetenv("KDET_LOG_SHIPPING");

    /* 3000 lines of two ranks, the API stopped and restarted in the middle */
    struct kd_logship *s = shipper("ls-1", ta);
    ship(s, 0, "r0", 0, 1000);
    ship(s, 1, "r1", 0, 500);
    kd_sleep_ms(1500);
    int port = fx.port;
    fx_api_stop();
    ship(s, 0, "r0", 1000, 1000);
    ship(s, 1, "r1", 500, 500);
    kd_sleep_ms(1500);
    fx_api_start(port);
    kd_logship_stop(s, 15000, &st);
    assert_int_equal(st.lines_queued, 3000);
    assert_int_equal(st.lines_sent, 3000);
    assert_int_equal(st.lines_unsent, 0);
    assert_int_equal(st.lines_dropped, 0);
    assert_true(st.retries > 0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM trial_logs WHERE run_id = 'run-ship'"), 3000);
    assert_int_equal(fx_sql_int("SELECT count(DISTINCT line) FROM trial_logs WHERE run_id ="
                                " 'run-ship'"),
                     3000);
    /* each rank's lines in the order printed */
    assert_int_equal(fx_sql_int("SELECT count(*) FROM (SELECT line, lag(line) OVER (PARTITION BY"
                                " rank ORDER BY id) AS prev FROM trial_logs WHERE run_id ="
                                " 'run-ship') x WHERE prev IS NOT NULL AND"
                                " split_part(line, ' ', 2)::int <> split_part(prev, ' ', 2)::int"
                                " + 1"),
                     0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM trial_logs WHERE run_id = 'run-ship' AND"
                                " line LIKE 'r1 %' AND rank = 1 AND stream = 'stderr'"),
                     500);

    /* a refused token ends shipping at once; nothing is stored */
    s = shipper("ls-1", "wrong-token");
    ship(s, 0, "refused", 0, 10);
    int64_t t0 = kd_mono_ms();
    kd_logship_stop(s, 5000, &st);
    assert_true(kd_mono_ms() - t0 < 3000);
    assert_int_equal(st.lines_refused, 10);
    assert_int_equal(st.lines_sent, 0);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM trial_logs WHERE line LIKE 'refused%'"), 0);

    /* nobody listening: the flush gives up at its bound, saying how many were not sent */
    fx_api_stop();
    s = shipper("ls-1", ta);
    ship(s, 0, "lost", 0, 10);
    t0 = kd_mono_ms();
    kd_logship_stop(s, 1500, &st);
    int64_t took = kd_mono_ms() - t0;
    assert_true(took >= 1400 && took < 4000);
    assert_int_equal(st.lines_unsent, 10);
    fx_api_start(port);
}

/* ---- an upstream launcher's workers, through kdet-launch ----------------------------------- */

/* torchrun's stand-in: a line of its own, then two workers as torchrun runs them after
 * --no_python (wrap_rank RANK CMD...), exiting with their worst status. */
static const char fake_torchrun[] =
    "#!/bin/sh\n"
    "echo 'torchrun stand-in starting'\n"
    "while [ $# -gt 0 ] && [ \"$1\" != --no_python ]; do shift; done\n"
    "shift\n"
    "RANK=0 LOCAL_RANK=0 \"$@\" & p0=$!\n"
    "RANK=1 LOCAL_RANK=1 \"$@\" & p1=$!\n"
    "wait $p0; a=$?; wait $p1; b=$?\n"
    "exit $((a > b ? a : b))\n";

/* A file's text (at most 1 MiB), NUL-terminated; the test fails without it. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("%s: %s", path, strerror(errno));
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Run cmd with /bin/sh; its wait status. */
static int sh(const char *cmd)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static void test_upstream_form(void **state)
{
    (void)state;
    char ua[64], ta[64], dir[] = "/tmp/kd-upstream-XXXXXX", path[256], cmd[4096];
    fx_experiment("up", "loss");
    fx_trial("up", "up-1", 100, ua, sizeof(ua));
    fx_token("up-1", ua, ta, sizeof(ta));
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/torchrun", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(fake_torchrun, f);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
    /* Rank 1 fails after its lines; the stand-in exits with its status, and so does kdet-launch. */
    snprintf(cmd, sizeof(cmd),
             "cd %s && PATH=%s:$PATH KDET_CONTROLLER_URL=%s KDET_TOKEN=%s KDET_TRIAL_ID=up-1 "
             "KDET_NAMESPACE=default KDET_RUN_ID=run-up %s/bin/kdet-launch --nproc 2 "
             "torch_distributed -- sh -c 'echo \"out $RANK\"; echo \"err $RANK\" >&2; "
             "[ $RANK = 1 ] && exit 3; exit 0' >out.txt 2>err.txt",
             dir, dir, fx.url, ta, getenv("KD_BUILD"));
    int st = sh(cmd);
    assert_true(WIFEXITED(st));
    snprintf(path, sizeof(path), "%s/out.txt", dir);
    char *out = slurp(path);
    snprintf(path, sizeof(path), "%s/err.txt", dir);
    char *err = slurp(path);
    if (WEXITSTATUS(st) != 3)
        fail_msg("kdet-launch exit %d, want 3\nstdout:\n%s\nstderr:\n%s", WEXITSTATUS(st), out,
                 err);
    /* the pod's log is as before: the workers' lines with wrap_rank's prefix */
    assert_non_null(strstr(out, "[rank=0] out 0\n"));
    assert_non_null(strstr(out, "[rank=1] out 1\n"));
    assert_non_null(strstr(out, "torchrun stand-in starting\n"));
    assert_non_null(strstr(err, "[rank=1] err 1\n"));
    assert_non_null(strstr(err, "msg=\"starting upstream launcher\" launcher=torchrun"));
    assert_non_null(strstr(err, "msg=\"log shipping finished\""));
    /* the controller has every line, with its worker's rank and without the prefix */
    static const struct {
        int rank;
        const char *stream, *line;
    } want[] = {
        {-1, "stdout", "torchrun stand-in starting"},
        {0, "stdout", "out 0"},
        {0, "stderr", "err 0"},
        {1, "stdout", "out 1"},
        {1, "stderr", "err 1"},
    };
    char sql[512];
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM trial_logs WHERE run_id = 'run-up' AND rank = %d AND "
                 "stream = '%s' AND line = '%s'",
                 want[i].rank, want[i].stream, want[i].line);
        if (fx_sql_int(sql) != 1)
            fail_msg("not stored once: rank %d %s \"%s\"\nstderr:\n%s", want[i].rank,
                     want[i].stream, want[i].line, err);
    }
    assert_int_equal(fx_sql_int("SELECT count(*) FROM trial_logs WHERE run_id = 'run-up'"), 5);
    free(out);
    free(err);
    assert_int_equal(kd_rm_tree(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_route),  cmocka_unit_test(test_user_routes),
        cmocka_unit_test(test_cap),           cmocka_unit_test(test_follow),
        cmocka_unit_test(test_shipper),       cmocka_unit_test(test_log_policies),
        cmocka_unit_test(test_upstream_form),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
