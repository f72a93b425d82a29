/*
 * Tasks through the API, against a private PostgreSQL and a real
 * kdet-local: a task's pod reports its service's address and ships its
 * lines with the task's token (checked fields, another task's token
 * refused); users list, describe and kill tasks of their namespace, read
 * a task's logs and follow them to an end event that carries the exit
 * code; the job queue lists live tasks with their priority; the task
 * token differs from a trial's of the same name.
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
#include "api/api_int.h"
#include "fx.h"

#define NSP "/api/v1/namespaces/default/"

static json_t *get_task(const char *name)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    if (kd_k8s_get(fx.k8s, &KD_K8S_TASKS, "default", name, &out, NULL, err) != 0)
        fail_msg("get task %s: %s", name, err);
    return out;
}

/* Wait until the API's cache has the task (its informer lags behind the create). */
static void seen(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), NSP "tasks/%s", name);
    for (int i = 0; i < 100; i++) {
        if (fx_http("GET", path, FX_USER_TOKEN, NULL, NULL) == 200)
            return;
        kd_sleep_ms(50);
    }
    fail_msg("task %s never showed in the API", name);
}

static void test_tokens(void **state)
{
    (void)state;
    char a[64], b[64];
    assert_int_equal(
        kd_api_task_token(fx_key, sizeof(fx_key), "default", "x", "uid-1", a, sizeof(a)), 0);
    assert_int_equal(
        kd_api_trial_token(fx_key, sizeof(fx_key), "default", "x", "uid-1", b, sizeof(b)), 0);
    assert_int_equal(strlen(a), KD_API_TOKEN_LEN);
    assert_string_not_equal(a, b); /* a trial's token is never a task's */
    assert_int_equal(kd_api_task_token(fx_key, sizeof(fx_key), "default", "x", "uid-1", b, 10),
                     KD_EINVAL);
}

static void test_address(void **state)
{
    (void)state;
    char uid[64], tok[64], other_uid[64], other[64];
    json_t *ans = NULL;
    fx_task("nb-addr", "notebook", NULL, uid, sizeof(uid));
    fx_task("nb-other", "notebook", NULL, other_uid, sizeof(other_uid));
    fx_task_token("nb-addr", uid, tok, sizeof(tok));
    fx_task_token("nb-other", other_uid, other, sizeof(other));
    seen("nb-addr");
    const char *path = NSP "tasks/nb-addr/address";
    const char *good = "{\"run_id\":\"r1\",\"host\":\"10.1.2.3\",\"port\":8888,\"user\":\"me\"}";
    assert_int_equal(fx_http("PUT", path, other, good, NULL), 401);
    assert_int_equal(fx_http("PUT", path, FX_USER_TOKEN, good, NULL), 401);
    static const struct {
        const char *body, *field;
    } bad[] = {
        {"{\"host\":\"10.1.2.3\",\"port\":1}", "run_id"},
        {"{\"run_id\":\"r1\",\"host\":\"10.1.2.3; rm -rf\",\"port\":1}", "host"},
        {"{\"run_id\":\"r1\",\"host\":\"10.1.2.3\",\"port\":0}", "port"},
        {"{\"run_id\":\"r1\",\"host\":\"10.1.2.3\",\"port\":65536}", "port"},
        {"{\"run_id\":\"r1\",\"host\":\"h\",\"port\":1,\"user\":\"\"}", "user"},
        {"{\"run_id\":\"r1\",\"host\":\"h\",\"port\":1,\"prot\":2}", "prot"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(fx_http("PUT", path, tok, bad[i].body, &ans), 400);
        const char *f = json_string_value(json_object_get(ans, "field"));
        if (f == NULL || strcmp(f, bad[i].field) != 0)
            fail_msg("%s: field %s, want %s", bad[i].body, f ? f : "(none)", bad[i].field);
        json_decref(ans);
        ans = NULL;
    }
    assert_int_equal(fx_http("PUT", path, tok, good, NULL), 200);
    json_t *t = get_task("nb-addr");
    json_t *addr = json_object_get(json_object_get(t, "status"), "address");
    if (addr == NULL) {
        char *d = json_dumps(t, 0);
        fail_msg("no address: %s", d);
    }
    assert_string_equal(json_string_value(json_object_get(addr, "host")), "10.1.2.3");
    assert_int_equal(json_integer_value(json_object_get(addr, "port")), 8888);
    assert_string_equal(json_string_value(json_object_get(addr, "runId")), "r1");
    assert_string_equal(json_string_value(json_object_get(addr, "user")), "me");
    assert_true(json_is_string(json_object_get(addr, "time")));
    json_decref(t);
}

/* ---- logs and their end ------------------------------------------------------------------- */

static void test_logs(void **state)
{
    (void)state;
    char uid[64], tok[64];
    json_t *ans = NULL;
    fx_task("cmd-logs", "command", "{\"entrypoint\":\"echo hi\"}", uid, sizeof(uid));
    fx_task_token("cmd-logs", uid, tok, sizeof(tok));
    seen("cmd-logs");
    fx_patch("tasks", "cmd-logs", "status", "{\"status\":{\"state\":\"RUNNING\"}}");
    const char *body = "{\"key\":\"k1\",\"run_id\":\"r1\",\"lines\":["
                       "{\"rank\":0,\"stream\":\"stdout\",\"line\":\"hello\"},"
                       "{\"rank\":0,\"stream\":\"stderr\",\"line\":\"world\"}]}";
    assert_int_equal(fx_http("POST", NSP "tasks/cmd-logs/logs", tok, body, &ans), 200);
    assert_int_equal(json_integer_value(json_object_get(ans, "stored")), 2);
    json_decref(ans);
    assert_int_equal(fx_http("POST", NSP "tasks/cmd-logs/logs", tok, body, &ans), 200);
    assert_true(json_is_true(json_object_get(ans, "duplicate")));
    json_decref(ans);
    /* a trial's token of a trial of the same name is not the task's */
    char ttok[64];
    fx_token("cmd-logs", uid, ttok, sizeof(ttok));
    assert_int_equal(fx_http("POST", NSP "tasks/cmd-logs/logs", ttok, body, NULL), 401);
    assert_int_equal(fx_http("GET", NSP "tasks/cmd-logs/logs", FX_USER_TOKEN, NULL, &ans), 200);
    json_t *lines = json_object_get(ans, "logs");
    assert_int_equal(json_array_size(lines), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(lines, 1), "line")),
                        "world");
    assert_string_equal(json_string_value(json_object_get(ans, "task")), "cmd-logs");
    json_decref(ans);
    assert_int_equal(fx_http("GET", NSP "tasks/cmd-logs/logs?tail=1", FX_USER_TOKEN, NULL, &ans),
                     200);
    assert_int_equal(json_array_size(json_object_get(ans, "logs")), 1);
    json_decref(ans);
    /* follow: the lines, then the end with the exit code once the task is TERMINATED */
    struct fx_sse s = {.path = NSP "tasks/cmd-logs/logs/stream"};
    kd_buf_init(&s.got, 1 << 20);
    pthread_t th;
    pthread_create(&th, NULL, fx_sse_thread, &s);
    for (int i = 0; i < 100 && !atomic_load(&s.connected); i++)
        kd_sleep_ms(50);
    fx_patch("tasks", "cmd-logs", "status",
             "{\"status\":{\"state\":\"TERMINATED\",\"exitCode\":3,\"endReason\":\"Failed\"}}");
    pthread_join(th, NULL);
    const char *got = kd_buf_str(&s.got);
    assert_non_null(got);
    assert_non_null(strstr(got, "\"hello\""));
    assert_non_null(strstr(got, "event: end\ndata: {\"state\":\"TERMINATED\""));
    assert_non_null(strstr(got, "\"exit_code\":3}"));
    kd_buf_free(&s.got);
    assert_int_equal(fx_sql_int("select count(*) from task_logs"), 2);
}

static void test_users_routes(void **state)
{
    (void)state;
    json_t *ans = NULL;
    fx_task("cmd-list", "command",
            "{\"entrypoint\":\"sleep 1\",\"description\":\"d1\",\"resources\":{\"slots\":2,"
            "\"priority\":20}}",
            NULL, 0);
    fx_task("tb-list", "tensorboard", NULL, NULL, 0);
    seen("cmd-list");
    seen("tb-list");
    assert_int_equal(fx_http("GET", NSP "tasks", FX_USER_TOKEN, NULL, &ans), 200);
    json_t *tasks = json_object_get(ans, "tasks");
    bool found = false;
    size_t i;
    json_t *t;
    json_array_foreach(tasks, i, t)
    {
        if (strcmp(json_string_value(json_object_get(t, "name")), "cmd-list") == 0) {
            found = true;
            assert_string_equal(json_string_value(json_object_get(t, "kind")), "command");
            assert_string_equal(json_string_value(json_object_get(t, "description")), "d1");
            assert_string_equal(json_string_value(json_object_get(t, "owner")), "alice");
            assert_int_equal(json_integer_value(json_object_get(t, "slots")), 2);
        }
    }
    assert_true(found);
    json_decref(ans);
    assert_int_equal(fx_http("GET", NSP "tasks?kind=tensorboard", FX_USER_TOKEN, NULL, &ans), 200);
    json_array_foreach(json_object_get(ans, "tasks"), i, t)
        assert_string_equal(json_string_value(json_object_get(t, "kind")), "tensorboard");
    json_decref(ans);
    assert_int_equal(fx_http("GET", NSP "tasks/cmd-list", FX_USER_TOKEN, NULL, &ans), 200);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(ans, "config"), "entrypoint")),
        "sleep 1");
    json_decref(ans);
    assert_int_equal(fx_http("GET", NSP "tasks/nope", FX_USER_TOKEN, NULL, NULL), 404);
    /* the job queue: a live task with its priority */
    assert_int_equal(fx_http("GET", "/api/v1/jobs", FX_USER_TOKEN, NULL, &ans), 200);
    found = false;
    json_array_foreach(json_object_get(ans, "jobs"), i, t)
    {
        const char *n = json_string_value(json_object_get(t, "task"));
        if (n != NULL && strcmp(n, "cmd-list") == 0) {
            found = true;
            assert_int_equal(json_integer_value(json_object_get(t, "priority")), 20);
            assert_string_equal(json_string_value(json_object_get(t, "kind")), "command");
            assert_true(json_integer_value(json_object_get(t, "queue_position")) >= 1);
            assert_null(json_object_get(t, "position_key"));
        }
    }
    assert_true(found);
    json_decref(ans);
    /* kill: spec.killed, for the controller to act on */
    assert_int_equal(fx_http("POST", NSP "tasks/cmd-list/kill", FX_USER_TOKEN, "{}", NULL), 200);
    json_t *obj = get_task("cmd-list");
    assert_true(json_is_true(json_object_get(json_object_get(obj, "spec"), "killed")));
    json_decref(obj);
    assert_int_equal(fx_http("POST", NSP "tasks/nope/kill", FX_USER_TOKEN, "{}", NULL), 404);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_address),
        cmocka_unit_test(test_logs),
        cmocka_unit_test(test_users_routes),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
