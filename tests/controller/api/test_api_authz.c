/*
 * Who may use which route, generated from the API's own route table so
 * that a new route cannot be forgotten: on every route of a namespace,
 * another user's token (a user of other namespaces) gets 403 while the
 * namespace's user gets through; administrators' routes refuse users;
 * user tokens never open worker routes nor one trial's token another's;
 * and each user route without a namespace has its own cross-user check
 * below (a route missing from that list fails the test). Then users and
 * tokens end to end: create, whoami, revoke.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/api_int.h"
#include "core/time.h"
#include "fx.h"

#define CK_UUID "0b0b0b0b-0000-4000-8000-000000000001"

static char tok_alice[128], tok_alice2[128], tok_bob[128], tok_trial[64], tok_trial2[64];
static char tok_task[64], tok_task2[64];
static long long alice2_id;

/* POST /api/v1/users as the bootstrap administrator; the new user's first token into tok. */
static void make_user(const char *name, const char *namespaces, char *tok, size_t len)
{
    char body[256];
    json_t *out = NULL;
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"namespaces\":%s}", name, namespaces);
    assert_int_equal(fx_http("POST", "/api/v1/users", FX_USER_TOKEN, body, &out), 201);
    const char *t = json_string_value(json_object_get(out, "token"));
    assert_non_null(t);
    assert_int_equal(strncmp(t, "kdet_", 5), 0);
    snprintf(tok, len, "%s", t);
    json_decref(out);
}

static int setup(void **state)
{
    char uid[64], uid2[64];
    json_t *out = NULL;
    if (fx_setup(state) != 0)
        return -1;
    make_user("alice", "[\"default\"]", tok_alice, sizeof(tok_alice));
    make_user("bob", "[\"team-b\"]", tok_bob, sizeof(tok_bob));
    /* alice's second token: the one the revoke route's walk revokes. */
    assert_int_equal(fx_http("POST", "/api/v1/tokens", tok_alice, "{\"description\":\"2\"}", &out),
                     201);
    snprintf(tok_alice2, sizeof(tok_alice2), "%s",
             json_string_value(json_object_get(out, "token")));
    alice2_id = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    fx_experiment("z-exp", "validation_loss");
    fx_trial("z-exp", "z-exp-1", 100, uid, sizeof(uid));
    fx_trial("z-exp", "z-exp-2", 100, uid2, sizeof(uid2));
    fx_token("z-exp-1", uid, tok_trial, sizeof(tok_trial));
    fx_token("z-exp-2", uid2, tok_trial2, sizeof(tok_trial2));
    fx_task("z-task", "command", "{\"entrypoint\":\"true\"}", uid, sizeof(uid));
    fx_task_token("z-task", uid, tok_task, sizeof(tok_task));
    fx_task("z-task-2", "command", "{\"entrypoint\":\"true\"}", uid2, sizeof(uid2));
    fx_task_token("z-task-2", uid2, tok_task2, sizeof(tok_task2));
    /* The informers see the objects before the walk. */
    for (int i = 0; i < 100; i++) {
        int code =
            fx_http("GET", "/api/v1/namespaces/default/trials/z-exp-2", FX_USER_TOKEN, NULL, NULL);
        if (code == 200)
            break;
        kd_sleep_ms(50);
    }
    return 0;
}

/* A route's pattern with each "*" filled from the segment before it. */
static void fill(const char *pattern, char *path, size_t len)
{
    char buf[256], prev[64] = "";
    size_t o = 0;
    snprintf(buf, sizeof(buf), "%s", pattern);
    char *save = NULL;
    for (char *s = strtok_r(buf, "/", &save); s != NULL; s = strtok_r(NULL, "/", &save)) {
        const char *v = s;
        char idbuf[32];
        if (strcmp(s, "*") == 0) {
            if (strcmp(prev, "namespaces") == 0)
                v = "default";
            else if (strcmp(prev, "experiments") == 0 || strcmp(prev, "jobs") == 0)
                v = "z-exp";
            else if (strcmp(prev, "trials") == 0)
                v = "z-exp-1";
            else if (strcmp(prev, "tasks") == 0)
                v = "z-task";
            else if (strcmp(prev, "checkpoints") == 0)
                v = CK_UUID;
            else if (strcmp(prev, "models") == 0)
                v = "z-model";
            else if (strcmp(prev, "versions") == 0)
                v = "1";
            else if (strcmp(prev, "users") == 0)
                v = "alice";
            else if (strcmp(prev, "ui") == 0)
                v = "app.js";
            else if (strcmp(prev, "tokens") == 0) {
                snprintf(idbuf, sizeof(idbuf), "%lld", alice2_id);
                v = idbuf;
            } else
                fail_msg("route %s: no value for the '*' after \"%s\"; teach fill() one", pattern,
                         prev);
        }
        o += (size_t)snprintf(path + o, len - o, "/%s", v);
        snprintf(prev, sizeof(prev), "%s", s);
    }
    if (o == 0) /* the root route, "" */
        snprintf(path, len, "/");
}

static const char *body_of(const struct api_route *r)
{
    return strcmp(r->method, "GET") == 0 ? NULL : "{}";
}

static bool is_stream(const char *pattern)
{
    size_t n = strlen(pattern);
    return n > 7 && strcmp(pattern + n - 7, "/stream") == 0;
}

/* The user routes that name no namespace, each with the check that another user is refused. */
static void cross_user_jobs(void)
{
    json_t *out = NULL;
    assert_int_equal(fx_http("GET", "/api/v1/jobs", tok_bob, NULL, &out), 200);
    assert_int_equal(json_array_size(json_object_get(out, "jobs")), 0); /* only default's exist */
    json_decref(out);
    assert_int_equal(fx_http("GET", "/api/v1/jobs?namespace=default", tok_bob, NULL, NULL), 403);
    assert_int_equal(fx_http("GET", "/api/v1/jobs", tok_alice, NULL, &out), 200);
    assert_true(json_array_size(json_object_get(out, "jobs")) >= 1);
    json_decref(out);
}

static void cross_user_me(void)
{
    json_t *out = NULL;
    assert_int_equal(fx_http("GET", "/api/v1/me", tok_bob, NULL, &out), 200);
    json_t *u = json_object_get(out, "user");
    assert_string_equal(json_string_value(json_object_get(u, "name")), "bob");
    assert_true(json_is_false(json_object_get(u, "admin")));
    json_decref(out);
}

/* The controller's slot settings: the same for every user, nothing of anyone's. */
static void cross_user_info(void)
{
    json_t *out = NULL;
    const char *k;
    json_t *v;
    assert_int_equal(fx_http("GET", "/api/v1/info", tok_bob, NULL, &out), 200);
    json_object_foreach(out, k, v)
    {
        (void)v;
        assert_true(strcmp(k, "namespace") == 0 || strcmp(k, "slots") == 0);
    }
    assert_non_null(json_object_get(out, "slots"));
    json_decref(out);
}

static void cross_user_tokens_list(void)
{
    json_t *out = NULL;
    size_t i;
    json_t *t;
    assert_int_equal(fx_http("GET", "/api/v1/tokens", tok_bob, NULL, &out), 200);
    assert_true(json_array_size(json_object_get(out, "tokens")) >= 1);
    json_array_foreach(json_object_get(out, "tokens"), i, t)
        assert_string_equal(json_string_value(json_object_get(t, "user")), "bob");
    char *text = json_dumps(out, 0);
    assert_null(strstr(text, "sha256"));
    free(text);
    json_decref(out);
    assert_int_equal(fx_http("GET", "/api/v1/tokens?user=alice", tok_bob, NULL, NULL), 403);
}

static void cross_user_tokens_create(void)
{
    assert_int_equal(fx_http("POST", "/api/v1/tokens", tok_bob, "{\"user\":\"alice\"}", NULL), 403);
}

static void cross_user_tokens_revoke(void)
{
    char path[96];
    snprintf(path, sizeof(path), "/api/v1/tokens/%lld/revoke", alice2_id);
    assert_int_equal(fx_http("POST", path, tok_bob, "{}", NULL), 403);
    assert_int_equal(fx_http("GET", "/api/v1/me", tok_alice2, NULL, NULL), 200);
}

static const struct {
    const char *method, *pattern;
    void (*check)(void);
} unscoped[] = {
    {"GET", "api/v1/jobs", cross_user_jobs},
    {"GET", "api/v1/me", cross_user_me},
    {"GET", "api/v1/info", cross_user_info},
    {"GET", "api/v1/tokens", cross_user_tokens_list},
    {"POST", "api/v1/tokens", cross_user_tokens_create},
    {"POST", "api/v1/tokens/*/revoke", cross_user_tokens_revoke},
};

/* The web UI's page and assets ("" is GET /) hold no data: the page reads it with a token. */
static const char *const public_routes[] = {"healthz", "readyz", "metrics", "", "ui/*", NULL};

/* One request of route r to path with token tok (named who in the failure), which must get 401. */
static void want_401(const struct api_route *r, const char *path, const char *tok, const char *who,
                     const char *body)
{
    int code = fx_http(r->method, path, tok, body, NULL);
    if (code != 401)
        fail_msg("%s %s with %s: %d, want 401", r->method, path, who, code);
}
static void test_every_route(void **state)
{
    (void)state;
    size_t n = 0, ns_routes = 0, admin_routes = 0, worker_routes = 0, unscoped_seen = 0;
    size_t task_routes = 0, link_routes = 0;
    const struct api_route *rt = api_routes(&n);
    char path[512], linked[600];
    assert_true(n > 20);
    /* Cross-user checks first, while alice's second token is alive. */
    for (size_t i = 0; i < n; i++) {
        const struct api_route *r = &rt[i];
        if (r->auth != AUTH_USER || api_route_ns_seg(r->pattern) >= 0)
            continue;
        bool known = false;
        for (size_t k = 0; k < sizeof(unscoped) / sizeof(unscoped[0]); k++) {
            if (strcmp(unscoped[k].method, r->method) == 0 &&
                strcmp(unscoped[k].pattern, r->pattern) == 0) {
                unscoped[k].check();
                known = true;
                unscoped_seen++;
            }
        }
        if (!known)
            fail_msg("%s %s: a user route without a namespace and without a cross-user check; "
                     "add one to unscoped[]",
                     r->method, r->pattern);
    }
    assert_int_equal(unscoped_seen, sizeof(unscoped) / sizeof(unscoped[0]));
    for (size_t i = 0; i < n; i++) {
        const struct api_route *r = &rt[i];
        const char *body = body_of(r);
        int code;
        fill(r->pattern, path, sizeof(path));
        switch (r->auth) {
        case AUTH_NONE: {
            bool listed = false;
            for (int k = 0; public_routes[k] != NULL; k++)
                listed |= strcmp(public_routes[k], r->pattern) == 0;
            if (!listed)
                fail_msg("%s %s answers without a token: add it to public_routes[] only if "
                         "it reveals nothing",
                         r->method, r->pattern);
            break;
        }
        case AUTH_TRIAL:
            worker_routes++;
            /* A user token, even the administrator's, is not a trial token. */
            want_401(r, path, FX_USER_TOKEN, "the bootstrap token", body);
            want_401(r, path, tok_alice, "alice's token", body);
            /* Another trial's token. */
            want_401(r, path, tok_trial2, "z-exp-2's token", body);
            break;
        case AUTH_TASK:
            task_routes++;
            /* Neither a user's token nor a trial's nor another task's is this task's. */
            want_401(r, path, FX_USER_TOKEN, "the bootstrap token", body);
            want_401(r, path, tok_alice, "alice's token", body);
            want_401(r, path, tok_trial, "a trial's token", body);
            want_401(r, path, tok_task2, "z-task-2's token", body);
            code = fx_http(r->method, path, tok_task, body, NULL);
            if (code == 401 || code == 403)
                fail_msg("%s %s with its own token: %d", r->method, path, code);
            break;
        case AUTH_ADMIN:
            admin_routes++;
            code = fx_http(r->method, path, tok_alice, body, NULL);
            if (code != 403)
                fail_msg("%s %s with alice's token: %d, want 403", r->method, path, code);
            code = fx_http(r->method, path, tok_bob, body, NULL);
            if (code != 403)
                fail_msg("%s %s with bob's token: %d, want 403", r->method, path, code);
            code = fx_http(r->method, path, NULL, body, NULL);
            if (code != 401)
                fail_msg("%s %s without a token: %d, want 401", r->method, path, code);
            code = fx_http(r->method, path, FX_USER_TOKEN, body, NULL);
            if (code == 401 || code == 403)
                fail_msg("%s %s with the bootstrap token: %d", r->method, path, code);
            break;
        case AUTH_LINK:
            link_routes++;
            /* A link that was not made for it is no token. */
            snprintf(linked, sizeof(linked), "%s?kdet_ticket=0.1.9999999999.forged", path);
            code = fx_http(r->method, linked, NULL, body, NULL);
            if (code != 401)
                fail_msg("%s %s with a forged link: %d, want 401", r->method, path, code);
            /* and with a token, as the other user routes: */
            __attribute__((fallthrough));
        case AUTH_USER:
            if (api_route_ns_seg(r->pattern) < 0)
                break; /* checked above */
            ns_routes++;
            code = fx_http(r->method, path, tok_bob, body, NULL);
            if (code != 403)
                fail_msg("%s %s with bob's token (namespace team-b): %d, want 403", r->method, path,
                         code);
            code = fx_http(r->method, path, NULL, body, NULL);
            if (code != 401)
                fail_msg("%s %s without a token: %d, want 401", r->method, path, code);
            want_401(r, path, tok_trial, "a trial token", body);
            want_401(r, path, tok_task, "a task token", body);
            if (!is_stream(r->pattern)) {
                code = fx_http(r->method, path, tok_alice, body, NULL);
                if (code == 401 || code == 403)
                    fail_msg("%s %s with alice's token (namespace default): %d", r->method, path,
                             code);
            }
            break;
        }
    }
    assert_true(ns_routes >= 15);
    assert_true(admin_routes >= 3);
    assert_true(worker_routes >= 8);
    assert_int_equal(task_routes, 2);
    assert_int_equal(link_routes, 2);
}

static void test_users_and_tokens(void **state)
{
    (void)state;
    json_t *out = NULL;
    char tok[128];
    /* Names and namespaces are checked, duplicates refused. */
    assert_int_equal(
        fx_http("POST", "/api/v1/users", FX_USER_TOKEN, "{\"name\":\"Bad Name\"}", NULL), 400);
    assert_int_equal(fx_http("POST", "/api/v1/users", FX_USER_TOKEN,
                             "{\"name\":\"carl\",\"namespaces\":[\"../x\"]}", &out),
                     400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "namespaces[0]");
    json_decref(out);
    assert_int_equal(fx_http("POST", "/api/v1/users", FX_USER_TOKEN, "{\"name\":\"alice\"}", NULL),
                     409);
    /* The bootstrap token is the administrator "admin". */
    assert_int_equal(fx_http("GET", "/api/v1/me", FX_USER_TOKEN, NULL, &out), 200);
    json_t *u = json_object_get(out, "user");
    assert_string_equal(json_string_value(json_object_get(u, "name")), "admin");
    assert_true(json_is_true(json_object_get(u, "admin")));
    assert_true(json_is_true(json_object_get(u, "bootstrap")));
    json_decref(out);
    /* An administrator makes a token for a user; it works until revoked. */
    assert_int_equal(fx_http("POST", "/api/v1/tokens", FX_USER_TOKEN, "{\"user\":\"bob\"}", &out),
                     201);
    snprintf(tok, sizeof(tok), "%s", json_string_value(json_object_get(out, "token")));
    long long id = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    assert_int_equal(fx_http("GET", "/api/v1/me", tok, NULL, &out), 200);
    assert_string_equal(json_string_value(json_object_get(json_object_get(out, "user"), "name")),
                        "bob");
    json_decref(out);
    /* Granting a namespace opens it. */
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments", tok, NULL, NULL),
                     403);
    assert_int_equal(fx_http("PATCH", "/api/v1/users/bob", FX_USER_TOKEN,
                             "{\"namespaces\":[\"team-b\",\"default\"]}", NULL),
                     200);
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments", tok, NULL, NULL),
                     200);
    assert_int_equal(
        fx_http("PATCH", "/api/v1/users/bob", FX_USER_TOKEN, "{\"namespaces\":[\"team-b\"]}", NULL),
        200);
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments", tok, NULL, NULL),
                     403);
    char path[96];
    snprintf(path, sizeof(path), "/api/v1/tokens/%lld/revoke", id);
    assert_int_equal(fx_http("POST", path, tok, "{}", NULL), 200);
    assert_int_equal(fx_http("GET", "/api/v1/me", tok, NULL, NULL), 401);
    /* A token of the right form with a wrong secret, or an unknown id, is 401 alike. */
    char forged[128];
    snprintf(forged, sizeof(forged), "%s", tok_bob);
    forged[strlen(forged) - 1] = forged[strlen(forged) - 1] == 'A' ? 'B' : 'A';
    assert_int_equal(fx_http("GET", "/api/v1/me", forged, NULL, &out), 401);
    json_decref(out);
    assert_int_equal(fx_http("GET", "/api/v1/me",
                             "kdet_999999_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", NULL, NULL),
                     401);
    /* The store has hashes only. */
    char q[256];
    snprintf(q, sizeof(q), "SELECT count(*) FROM user_tokens WHERE sha256 LIKE '%%%s%%'",
             strrchr(tok_bob, '_') + 1);
    assert_int_equal(fx_sql_int(q), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_route),
        cmocka_unit_test(test_users_and_tokens),
    };
    return cmocka_run_group_tests(tests, setup, fx_teardown);
}
