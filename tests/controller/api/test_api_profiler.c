/*
 * Profiler samples through the real API and a private PostgreSQL: rows of
 * kind profiling POSTed by a trial (system samples several per step, the
 * Trainer's timings) are read back by GET .../trials/{t}/profiler, by
 * group, in storage order, with after/limit/tail, by name or integer id;
 * bad parameters are 400 naming them; a trial with nothing stored answers
 * an empty list; the route needs the user token.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fx.h"

#define T "/api/v1/namespaces/default/trials/"

static json_t *samples(const char *query, int want_code)
{
    json_t *out = NULL;
    char path[256];
    snprintf(path, sizeof(path), T "%s", query);
    int code = fx_http("GET", path, FX_USER_TOKEN, NULL, &out);
    if (code != want_code)
        fail_msg("GET %s: %d, want %d", path, code, want_code);
    return out;
}

/* The steps (and for system rows the cpu value) of the samples, "s:v s:v ...". */
static void summary(const json_t *out, char *buf, size_t len)
{
    size_t i, used = 0;
    const json_t *r;
    buf[0] = '\0';
    json_array_foreach(json_object_get(out, "samples"), i, r)
    {
        const json_t *m = json_object_get(r, "metrics");
        const json_t *v = json_object_get(m, "cpu_util_pct");
        if (v == NULL)
            v = json_object_get(m, "train_batch");
        used += (size_t)snprintf(buf + used, len - used, "%s%lld:%g", used ? " " : "",
                                 (long long)json_integer_value(json_object_get(r, "step")),
                                 json_number_value(v));
    }
}

static void test_profiler_route(void **state)
{
    (void)state;
    char uid[64], tok[64], got[512];
    fx_experiment("e-prof", "validation_loss");
    fx_trial("e-prof", "e-prof-1", 100, uid, sizeof(uid));
    fx_token("e-prof-1", uid, tok, sizeof(tok));
    /* Nothing stored yet: an empty list. */
    json_t *out = samples("e-prof-1/profiler", 200);
    assert_int_equal(json_array_size(json_object_get(out, "samples")), 0);
    assert_string_equal(json_string_value(json_object_get(out, "kind")), "all");
    json_decref(out);
    /* Five system samples, three of them at step 10 (sampled in time, not per step), and two
     * timing rows; a training row that is not profiling. */
    const char *sys = "{\"kind\":\"profiling\",\"key\":\"p-1\",\"rows\":["
                      "{\"batches\":0,\"metrics\":{\"group\":\"system\",\"cpu_util_pct\":1}},"
                      "{\"batches\":10,\"metrics\":{\"group\":\"system\",\"cpu_util_pct\":2}},"
                      "{\"batches\":10,\"metrics\":{\"group\":\"system\",\"cpu_util_pct\":3,"
                      "\"gpus\":[{\"index\":0,\"util_pct\":97}]}},"
                      "{\"batches\":10,\"metrics\":{\"group\":\"system\",\"cpu_util_pct\":4}},"
                      "{\"batches\":20,\"metrics\":{\"group\":\"system\",\"cpu_util_pct\":5}}]}";
    const char *tim = "{\"kind\":\"profiling\",\"key\":\"p-2\",\"rows\":["
                      "{\"batches\":10,\"metrics\":{\"group\":\"timing\",\"train_batch\":0.25,"
                      "\"batches\":10}},"
                      "{\"batches\":20,\"metrics\":{\"group\":\"timing\",\"train_batch\":0.5,"
                      "\"batches\":10}}]}";
    const char *trn = "{\"kind\":\"training\",\"key\":\"p-3\",\"rows\":["
                      "{\"batches\":20,\"metrics\":{\"loss\":0.5}}]}";
    assert_int_equal(fx_http("POST", T "e-prof-1/metrics", tok, sys, NULL), 200);
    assert_int_equal(fx_http("POST", T "e-prof-1/metrics", tok, tim, NULL), 200);
    assert_int_equal(fx_http("POST", T "e-prof-1/metrics", tok, trn, NULL), 200);
    assert_int_equal(fx_http("POST", T "e-prof-1/metrics", tok, sys, NULL), 200); /* a retry */
    out = samples("e-prof-1/profiler?kind=system", 200);
    summary(out, got, sizeof(got));
    assert_string_equal(got, "0:1 10:2 10:3 10:4 20:5");
    assert_string_equal(json_string_value(json_object_get(out, "trial")), "e-prof-1");
    json_t *gpu = json_array_get(
        json_object_get(
            json_object_get(json_array_get(json_object_get(out, "samples"), 2), "metrics"), "gpus"),
        0);
    assert_int_equal(json_integer_value(json_object_get(gpu, "util_pct")), 97);
    json_int_t first = json_integer_value(
        json_object_get(json_array_get(json_object_get(out, "samples"), 0), "id"));
    json_int_t last = json_integer_value(json_object_get(out, "last_id"));
    assert_true(last > first);
    json_decref(out);
    out = samples("e-prof-1/profiler?kind=timing", 200);
    summary(out, got, sizeof(got));
    assert_string_equal(got, "10:0.25 20:0.5");
    json_decref(out);
    out = samples("e-prof-1/profiler", 200); /* every profiling row, never the training one */
    assert_int_equal(json_array_size(json_object_get(out, "samples")), 7);
    json_decref(out);
    /* Paging: after the first id, limit 2; tail 2. */
    char q[128];
    snprintf(q, sizeof(q), "e-prof-1/profiler?kind=system&after=%lld&limit=2", (long long)first);
    out = samples(q, 200);
    summary(out, got, sizeof(got));
    assert_string_equal(got, "10:2 10:3");
    json_decref(out);
    out = samples("e-prof-1/profiler?kind=system&tail=2", 200);
    summary(out, got, sizeof(got));
    assert_string_equal(got, "10:4 20:5");
    json_decref(out);
    /* By the trial's integer id, as det shows it. */
    json_t *tr = NULL;
    assert_int_equal(fx_http("GET", T "e-prof-1", FX_USER_TOKEN, NULL, &tr), 200);
    snprintf(q, sizeof(q), "%lld/profiler?kind=timing",
             (long long)json_integer_value(json_object_get(json_object_get(tr, "trial"), "id")));
    json_decref(tr);
    out = samples(q, 200);
    summary(out, got, sizeof(got));
    assert_string_equal(got, "10:0.25 20:0.5");
    json_decref(out);
    /* Bad parameters name themselves; unknown trials are 404; the trial token is not enough. */
    out = samples("e-prof-1/profiler?kind=gpu", 400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "kind");
    json_decref(out);
    out = samples("e-prof-1/profiler?limit=0", 400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "limit");
    json_decref(out);
    out = samples("e-prof-1/profiler?tail=5001", 400);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "tail");
    json_decref(out);
    json_decref(samples("e-prof-9/profiler", 404));
    assert_int_equal(fx_http("GET", T "e-prof-1/profiler", tok, NULL, NULL), 401);
    assert_int_equal(fx_http("POST", T "e-prof-1/profiler", FX_USER_TOKEN, "{}", NULL), 405);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profiler_route),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
