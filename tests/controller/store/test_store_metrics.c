/*
 * Metrics against a real private PostgreSQL: what is sent is what is
 * stored, a retried batch is stored once, bad batches are refused with the
 * field named, downsampling keeps the right points, best validation per
 * trial, batches for deleted trials, and an ingestion rate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/time.h"
#include "fx.h"

static const char *const ODD_STRINGS[] = {
    "'); DROP TABLE metrics; --",   "\" OR 1=1 --",        "$1::jsonb",
    "back\\slash and \"quotes\"",   "newline\nand\ttab",   "ünïcødé ✓ 日本語",
    "{\"t\":1,\"k\":\"training\"}", "\\u0000 spelled out",
};

static json_t *row_metrics(unsigned *seed, int64_t step)
{
    json_t *m = json_object();
    json_object_set_new(m, "loss", json_real((double)rand_r(seed) / RAND_MAX * 10.0));
    json_object_set_new(m, "accuracy", json_real(1.0 / (double)(step + 3)));
    json_object_set_new(m, "batches", json_integer(step));
    if (step % 7 == 0)
        json_object_set_new(
            m, "note",
            json_string(ODD_STRINGS[(size_t)step % (sizeof(ODD_STRINGS) / sizeof(*ODD_STRINGS))]));
    if (step % 11 == 0)
        json_object_set_new(m, "nested", json_pack("{s[iii]s{sb}}", "xs", 1, 2, 3, "o", "ok", 1));
    if (step % 13 == 0)
        json_object_set_new(m, "'; DELETE FROM trials; --", json_integer(-1));
    return m;
}

/* Send n rows for trial/kind in batches of 1..max_batch rows; returns the expected series. */
static json_t *send_rows(struct kd_store *s, int64_t trial, enum kd_metric_kind kind, int n,
                         int max_batch, unsigned seed, const char *keyprefix)
{
    json_t *expect = json_array();
    struct kd_metric_row rows[64];
    char key[64], err[KD_ERRLEN] = "";
    memset(rows, 0, sizeof(rows));
    int sent = 0, nb = 0;
    int64_t base = 1700000000000LL + seed;
    while (sent < n) {
        int k = 1 + (int)(rand_r(&seed) % (unsigned)max_batch);
        if (k > n - sent)
            k = n - sent;
        for (int i = 0; i < k; i++) {
            int64_t step = (sent + i) * 10;
            rows[i].step = step;
            rows[i].reported_ms = base + step;
            rows[i].metrics = row_metrics(&seed, step);
            json_array_append_new(expect, json_pack("{sIsIsO}", "step", (json_int_t)step, "ms",
                                                    (json_int_t)rows[i].reported_ms, "metrics",
                                                    rows[i].metrics));
        }
        snprintf(key, sizeof(key), "%s-%d", keyprefix, nb++);
        struct kd_metric_batch b = {trial, kind, key, rows, (size_t)k};
        int rc = kd_store_metrics_put(s, &b, nb % 3 == 0 ? 0 : 10000, err);
        if (rc != 0)
            fail_msg("put %s: %s", key, err);
        for (int i = 0; i < k; i++)
            json_decref(rows[i].metrics);
        sent += k;
    }
    return expect;
}

static void check_series(struct kd_store *s, int64_t trial, enum kd_metric_kind kind,
                         json_t *expect)
{
    json_t *got = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_store_metrics_series(s, trial, kind, 0, &got, err), 0);
    if (json_array_size(got) != json_array_size(expect))
        fail_msg("trial %lld %s: %zu rows stored, %zu sent", (long long)trial,
                 kd_metric_kind_name(kind), json_array_size(got), json_array_size(expect));
    for (size_t i = 0; i < json_array_size(got); i++) {
        json_t *g = json_array_get(got, i), *e = json_array_get(expect, i);
        int64_t ms = 0;
        assert_int_equal(json_integer_value(json_object_get(g, "step")),
                         json_integer_value(json_object_get(e, "step")));
        assert_int_equal(
            kd_time_parse_rfc3339(json_string_value(json_object_get(g, "reported_at")), &ms), 0);
        assert_int_equal(ms, json_integer_value(json_object_get(e, "ms")));
        if (!json_equal(json_object_get(g, "metrics"), json_object_get(e, "metrics"))) {
            char *a = json_dumps(json_object_get(g, "metrics"), JSON_SORT_KEYS);
            char *b = json_dumps(json_object_get(e, "metrics"), JSON_SORT_KEYS);
            fail_msg("row %zu differs:\n stored %s\n sent   %s", i, a, b);
        }
    }
    json_decref(got);
}

static void round_trip(void **state)
{
    (void)state;
    char ci[512];
    struct kd_store_opts o = {.flush_rows = 300};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    int64_t t1 = fx_trial(s, "rt1", NULL), t2 = fx_trial(s, "rt2", NULL);
    json_t *e1 = send_rows(s, t1, KD_METRIC_TRAINING, 700, 40, 1, "a");
    json_t *e2 = send_rows(s, t1, KD_METRIC_VALIDATION, 60, 5, 2, "b");
    json_t *e3 = send_rows(s, t2, KD_METRIC_TRAINING, 300, 64, 3, "a");
    json_t *e4 = send_rows(s, t2, KD_METRIC_PROFILING, 25, 3, 4, "c");
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    check_series(s, t1, KD_METRIC_TRAINING, e1);
    check_series(s, t1, KD_METRIC_VALIDATION, e2);
    check_series(s, t2, KD_METRIC_TRAINING, e3);
    check_series(s, t2, KD_METRIC_PROFILING, e4);
    json_t *none = json_array();
    check_series(s, t2, KD_METRIC_VALIDATION, none);
    json_decref(none);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metrics"), 700 + 60 + 300 + 25);
    /* The tables the odd strings name are still there. */
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trials"), 2);
    PQfinish(c);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    assert_int_equal(st.written_rows, 700 + 60 + 300 + 25);
    assert_int_equal(st.duplicate_batches, 0);
    assert_int_equal(st.queued_batches, 0);
    json_decref(e1);
    json_decref(e2);
    json_decref(e3);
    json_decref(e4);
    kd_store_close(s);
}

static void duplicate_batches(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t t1 = fx_trial(s, "d1", NULL), t2 = fx_trial(s, "d2", NULL);
    json_t *m = json_pack("{sf}", "loss", 0.5);
    struct kd_metric_row rows[3] = {{.step = 1, .reported_ms = 0, .metrics = m},
                                    {.step = 2, .reported_ms = 0, .metrics = m},
                                    {.step = 3, .reported_ms = 0, .metrics = m}};
    struct kd_metric_batch b = {t1, KD_METRIC_TRAINING, "rank0-1", rows, 3};
    /* Sent, then retried after it was written. */
    assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
    assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
    /* Retried while still queued: both copies go in the same statement. */
    b.key = "rank0-2";
    for (int i = 0; i < 5; i++)
        assert_int_equal(kd_store_metrics_put(s, &b, 0, err), 0);
    /* The same key in another trial is another batch. */
    b.trial_id = t2;
    assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
    assert_int_equal(kd_store_metrics_flush(s, 10000), 0);
    PGconn *c = fx_conn(ci);
    char q[128];
    snprintf(q, sizeof(q), "SELECT count(*) FROM metrics WHERE trial_id = %lld", (long long)t1);
    assert_int_equal(fx_int(c, q), 6);
    snprintf(q, sizeof(q), "SELECT count(*) FROM metrics WHERE trial_id = %lld", (long long)t2);
    assert_int_equal(fx_int(c, q), 3);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metric_batches"), 3);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    assert_int_equal(st.written_batches, 3);
    assert_int_equal(st.duplicate_batches, 5);
    PQfinish(c);
    json_decref(m);
    kd_store_close(s);
}

/* Steps reported again by a later attempt (other keys) appear once in the series, newest first. */
static void retrained_steps(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t t = fx_trial(s, "rt", NULL);
    json_t *old = json_pack("{sf}", "loss", 0.5), *neu = json_pack("{sf}", "loss", 0.25);
    struct kd_metric_row a[3] = {{.step = 10, .reported_ms = 0, .metrics = old},
                                 {.step = 20, .reported_ms = 0, .metrics = old},
                                 {.step = 30, .reported_ms = 0, .metrics = old}};
    struct kd_metric_row b[2] = {{.step = 20, .reported_ms = 0, .metrics = neu},
                                 {.step = 30, .reported_ms = 0, .metrics = neu}};
    struct kd_metric_batch ba = {t, KD_METRIC_TRAINING, "run1-r0-1", a, 3};
    struct kd_metric_batch bb = {t, KD_METRIC_TRAINING, "run2-r0-1", b, 2};
    assert_int_equal(kd_store_metrics_put(s, &ba, 10000, err), 0);
    assert_int_equal(kd_store_metrics_put(s, &bb, 10000, err), 0);
    json_t *got = NULL;
    assert_int_equal(kd_store_metrics_series(s, t, KD_METRIC_TRAINING, 0, &got, err), 0);
    assert_int_equal(json_array_size(got), 3);
    const double want[] = {0.5, 0.25, 0.25};
    for (size_t i = 0; i < 3; i++) {
        json_t *p = json_array_get(got, i);
        assert_int_equal(json_integer_value(json_object_get(p, "step")), 10 * (json_int_t)(i + 1));
        assert_true(json_real_value(json_object_get(json_object_get(p, "metrics"), "loss")) ==
                    want[i]);
    }
    json_decref(got);
    assert_int_equal(kd_store_metrics_series(s, t, KD_METRIC_TRAINING, 1, &got, err), 0);
    assert_int_equal(json_array_size(got), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(got, 0), "step")), 30);
    json_decref(got);
    json_decref(old);
    json_decref(neu);
    kd_store_close(s);
}

struct bad_case {
    const char *what;
    int64_t trial;
    int kind;
    const char *key;
    int64_t step;
    json_t *metrics;
    size_t n;
    int code;
    const char *want;
};

static void bad_batches_refused(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN];
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t t = fx_trial(s, "bad", NULL);
    json_t *ok = json_pack("{sf}", "loss", 1.0);
    json_t *nul = json_pack("{ss#}", "tag", "a\0b", (size_t)3);
    json_t *deep = json_object(), *cur = deep;
    for (int i = 0; i < 80; i++) {
        json_t *nx = json_object();
        json_object_set_new(cur, "d", nx);
        cur = nx;
    }
    json_t *arr = json_pack("[i]", 1);
    json_t *nulkey = json_object();
    json_object_setn_new_nocheck(nulkey, "k\0x", 3, json_integer(1));
    struct bad_case cases[] = {
        {"trial 0", 0, 0, "k", 0, ok, 1, KD_EINVAL, "trial_id"},
        {"kind 7", t, 7, "k", 0, ok, 1, KD_EINVAL, "kind"},
        {"empty key", t, 0, "", 0, ok, 1, KD_EINVAL, "key"},
        {"control byte in key", t, 0, "a\tb", 0, ok, 1, KD_EINVAL, "key: byte 1"},
        {"negative step", t, 0, "k", -5, ok, 1, KD_EINVAL, "rows[0].step"},
        {"metrics not an object", t, 0, "k", 0, arr, 1, KD_EINVAL, "rows[0].metrics"},
        {"NUL in a string", t, 0, "k", 0, nul, 1, KD_EINVAL, "rows[0].metrics.tag"},
        {"NUL in a key", t, 0, "k", 0, nulkey, 1, KD_EINVAL, "key contains a NUL"},
        {"too deep", t, 0, "k", 0, deep, 1, KD_EINVAL, "nested deeper"},
        {"no rows", t, 0, "k", 0, ok, 0, KD_EINVAL, "at least one row"},
        {"too many rows", t, 0, "k", 0, ok, KD_STORE_MAX_BATCH_ROWS + 1, KD_ETOOBIG, "rows"},
    };
    char longkey[KD_STORE_MAX_KEY + 2];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    struct kd_metric_row *rows = calloc(KD_STORE_MAX_BATCH_ROWS + 1, sizeof(*rows));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) + 1; i++) {
        struct bad_case c =
            i < sizeof(cases) / sizeof(cases[0])
                ? cases[i]
                : (struct bad_case){"key too long", t, 0, longkey, 0, ok, 1, KD_EINVAL,
                                    "at most 128"};
        for (size_t j = 0; j < c.n; j++)
            rows[j] = (struct kd_metric_row){.step = c.step, .metrics = c.metrics};
        struct kd_metric_batch b = {c.trial, (enum kd_metric_kind)c.kind, c.key, rows, c.n};
        err[0] = '\0';
        int rc = kd_store_metrics_put(s, &b, 1000, err);
        if (rc != c.code || !strstr(err, c.want))
            fail_msg("%s: got %s \"%s\", want %s containing \"%s\"", c.what, kd_err_name(rc), err,
                     kd_err_name(c.code), c.want);
    }
    assert_int_equal(kd_store_metrics_flush(s, 5000), 0);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metrics"), 0);
    PQfinish(c);
    free(rows);
    json_decref(ok);
    json_decref(nul);
    json_decref(deep);
    json_decref(arr);
    json_decref(nulkey);
    kd_store_close(s);
}

/* Positions kept by downsampling n rows to m, computed independently in C. */
static void expected_positions(long n, long m, long *out, long *count)
{
    if (m <= 0 || n <= m) {
        for (long i = 0; i < n; i++)
            out[i] = i;
        *count = n;
        return;
    }
    if (m == 1) {
        out[0] = n - 1;
        *count = 1;
        return;
    }
    for (long k = 0; k < m; k++)
        out[k] = k * (n - 1) / (m - 1);
    *count = m;
}

static void downsampling(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t t = fx_trial(s, "ds", NULL);
    enum { N = 1003 };
    struct kd_metric_row rows[N];
    /* Steps 0, 3, 6, ... sent in reverse order: the series is ordered by step. */
    for (int i = 0; i < N; i++) {
        int64_t step = (int64_t)(N - 1 - i) * 3;
        rows[i] =
            (struct kd_metric_row){.step = step, .metrics = json_pack("{sI}", "step_copy", step)};
    }
    struct kd_metric_batch b = {t, KD_METRIC_TRAINING, "all", rows, N};
    assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
    long want[N], nwant = 0;
    const int ms[] = {0, 1, 2, 3, 7, 10, 100, 334, 1002, 1003, 5000};
    for (size_t q = 0; q < sizeof(ms) / sizeof(ms[0]); q++) {
        json_t *got = NULL;
        assert_int_equal(kd_store_metrics_series(s, t, KD_METRIC_TRAINING, ms[q], &got, err), 0);
        expected_positions(N, ms[q], want, &nwant);
        if ((long)json_array_size(got) != nwant)
            fail_msg("max_points %d: %zu points, want %ld", ms[q], json_array_size(got), nwant);
        for (long i = 0; i < nwant; i++) {
            json_t *p = json_array_get(got, (size_t)i);
            json_int_t step = json_integer_value(json_object_get(p, "step"));
            if (step != want[i] * 3)
                fail_msg("max_points %d: point %ld has step %lld, want %ld", ms[q], i,
                         (long long)step, want[i] * 3);
            assert_int_equal(
                json_integer_value(json_object_get(json_object_get(p, "metrics"), "step_copy")),
                step);
        }
        json_decref(got);
    }
    json_t *got = NULL;
    assert_int_equal(kd_store_metrics_series(s, t, KD_METRIC_TRAINING, -1, &got, err), KD_EINVAL);
    assert_non_null(strstr(err, "max_points"));
    for (int i = 0; i < N; i++)
        json_decref(rows[i].metrics);
    kd_store_close(s);
}

static void best_validation(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0, exp2 = 0;
    int64_t t1 = fx_trial(s, "b1", &exp);
    /* Two more trials of the same experiment. */
    struct kd_store_trial tr = {"trial-b2", exp, "req-2", NULL, 1, "ACTIVE"};
    int64_t t2 = 0, t3 = 0;
    assert_int_equal(kd_store_trial_upsert(s, &tr, &t2, err), 0);
    tr.uid = "trial-b3";
    assert_int_equal(kd_store_trial_upsert(s, &tr, &t3, err), 0);
    int64_t other = fx_trial(s, "other", &exp2);
    const double v1[] = {0.9, 0.4, 0.6}, v2[] = {0.7, 0.8}, v3[] = {0.3};
    struct {
        int64_t t;
        const double *v;
        int n;
    } sets[] = {{t1, v1, 3}, {t2, v2, 2}, {t3, v3, 1}, {other, v3, 1}};
    for (size_t i = 0; i < 4; i++) {
        struct kd_metric_row rows[4];
        for (int j = 0; j < sets[i].n; j++)
            rows[j] = (struct kd_metric_row){
                .step = (j + 1) * 100,
                .metrics = json_pack("{sfsf}", "loss", sets[i].v[j], "acc", 1.0 - sets[i].v[j])};
        /* A row whose loss is not a number is ignored. */
        rows[sets[i].n] =
            (struct kd_metric_row){.step = 999, .metrics = json_pack("{ss}", "loss", "NaN")};
        char key[32];
        snprintf(key, sizeof(key), "v%zu", i);
        struct kd_metric_batch b = {sets[i].t, KD_METRIC_VALIDATION, key, rows,
                                    (size_t)sets[i].n + 1};
        assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
        for (int j = 0; j <= sets[i].n; j++)
            json_decref(rows[j].metrics);
    }
    json_t *best = NULL;
    assert_int_equal(kd_store_best_validations(s, exp, "loss", true, &best, err), 0);
    assert_int_equal(json_array_size(best), 3);
    const double wmin[] = {0.4, 0.7, 0.3};
    const int64_t wstep[] = {200, 100, 100};
    for (size_t i = 0; i < 3; i++) {
        json_t *b = json_array_get(best, i);
        assert_int_equal(json_integer_value(json_object_get(b, "trial_id")), sets[i].t);
        assert_true(json_number_value(json_object_get(b, "value")) == wmin[i]);
        assert_int_equal(json_integer_value(json_object_get(b, "step")), wstep[i]);
    }
    json_decref(best);
    assert_int_equal(kd_store_best_validations(s, exp, "loss", false, &best, err), 0);
    assert_true(json_number_value(json_object_get(json_array_get(best, 0), "value")) == 0.9);
    assert_true(json_number_value(json_object_get(json_array_get(best, 1), "value")) == 0.8);
    json_decref(best);
    /* An unknown metric: no rows, not an error; an injection-shaped name is just a key. */
    assert_int_equal(kd_store_best_validations(s, exp, "x') OR 1=1 --", true, &best, err), 0);
    assert_int_equal(json_array_size(best), 0);
    json_decref(best);
    assert_int_equal(kd_store_best_validations(s, exp, "", true, &best, err), KD_EINVAL);
    kd_store_close(s);
}

/* Polling for new rows: everything exactly once, in order, per trial or per experiment. */
static void since_polling(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0;
    int64_t t1 = fx_trial(s, "p1", &exp), t2 = 0;
    struct kd_store_trial tr = {"trial-p2", exp, "r2", NULL, 0, "ACTIVE"};
    assert_int_equal(kd_store_trial_upsert(s, &tr, &t2, err), 0);
    int64_t other = fx_trial(s, "p3", NULL);
    int64_t seen_exp = 0, seen_t1 = 0;
    int got_exp = 0, got_t1 = 0;
    for (int round = 0; round < 5; round++) {
        int64_t ts[3] = {t1, t2, other};
        for (int k = 0; k < 3; k++) {
            struct kd_metric_row rows[3];
            for (int j = 0; j < 3; j++)
                rows[j] = (struct kd_metric_row){.step = round * 3 + j,
                                                 .metrics = json_pack("{si}", "r", round)};
            char key[32];
            snprintf(key, sizeof(key), "r%d", round);
            struct kd_metric_batch b = {ts[k], KD_METRIC_TRAINING, key, rows, 3};
            assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
            for (int j = 0; j < 3; j++)
                json_decref(rows[j].metrics);
        }
        /* Poll in small pages until nothing new. */
        for (;;) {
            json_t *page = NULL;
            assert_int_equal(kd_store_metrics_since(s, exp, 0, seen_exp, 4, &page, err), 0);
            size_t n = json_array_size(page);
            for (size_t i = 0; i < n; i++) {
                json_t *r = json_array_get(page, i);
                int64_t id = json_integer_value(json_object_get(r, "id"));
                assert_true(id > seen_exp);
                assert_int_not_equal(json_integer_value(json_object_get(r, "trial_id")), other);
                seen_exp = id;
                got_exp++;
            }
            json_decref(page);
            if (n == 0)
                break;
        }
        json_t *page = NULL;
        assert_int_equal(kd_store_metrics_since(s, 0, t1, seen_t1, 1000, &page, err), 0);
        for (size_t i = 0; i < json_array_size(page); i++) {
            json_t *r = json_array_get(page, i);
            assert_int_equal(json_integer_value(json_object_get(r, "trial_id")), t1);
            seen_t1 = json_integer_value(json_object_get(r, "id"));
            got_t1++;
        }
        json_decref(page);
    }
    assert_int_equal(got_exp, 5 * 3 * 2);
    assert_int_equal(got_t1, 5 * 3);
    json_t *page = NULL;
    assert_int_equal(kd_store_metrics_since(s, 0, 0, 0, 10, &page, err), KD_EINVAL);
    assert_int_equal(kd_store_metrics_since(s, exp, 0, 0, 0, &page, err), KD_EINVAL);
    assert_non_null(strstr(err, "limit"));
    kd_store_close(s);
}

static void deleted_trial(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t t = fx_trial(s, "gone", NULL);
    json_t *m = json_pack("{si}", "x", 1);
    struct kd_metric_row rows[1] = {{.step = 1, .reported_ms = 0, .metrics = m}};
    struct kd_metric_batch b = {t + 1000, KD_METRIC_TRAINING, "k1", rows, 1};
    assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
    b.trial_id = t;
    b.key = "k2";
    assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    assert_int_equal(st.orphan_batches, 1);
    assert_int_equal(st.written_batches, 1);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metrics"), 1);
    PQfinish(c);
    json_decref(m);
    kd_store_close(s);
}

/* How many rows per second go in, in batches of 100 rows with 4 metrics each. */
static void ingestion_rate(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t t = fx_trial(s, "rate", NULL);
    enum { BATCHES = 300, ROWS = 100 };
    struct kd_metric_row rows[ROWS];
    memset(rows, 0, sizeof(rows));
    for (int i = 0; i < ROWS; i++)
        rows[i].metrics =
            json_pack("{sfsfsfsi}", "loss", 0.25 * i, "accuracy", 0.5, "lr", 1e-3, "batches", i);
    int64_t t0 = kd_mono_ms();
    for (int b = 0; b < BATCHES; b++) {
        char key[32];
        for (int i = 0; i < ROWS; i++) {
            rows[i].step = (int64_t)b * ROWS + i;
            rows[i].reported_ms = 0;
        }
        snprintf(key, sizeof(key), "b%d", b);
        struct kd_metric_batch mb = {t, KD_METRIC_TRAINING, key, rows, ROWS};
        assert_int_equal(kd_store_metrics_put(s, &mb, 0, err), 0);
    }
    assert_int_equal(kd_store_metrics_flush(s, 60000), 0);
    int64_t ms = kd_mono_ms() - t0;
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metrics"), BATCHES * ROWS);
    PQfinish(c);
    printf("ingestion: %d rows in %lld ms = %.0f rows/s (queued, then flushed)\n", BATCHES * ROWS,
           (long long)ms, BATCHES * ROWS * 1000.0 / (double)(ms ? ms : 1));
    /* Durable puts one at a time: the latency a worker sees. */
    t0 = kd_mono_ms();
    for (int b = 0; b < 50; b++) {
        char key[32];
        snprintf(key, sizeof(key), "d%d", b);
        struct kd_metric_batch mb = {t, KD_METRIC_TRAINING, key, rows, ROWS};
        assert_int_equal(kd_store_metrics_put(s, &mb, 10000, err), 0);
    }
    ms = kd_mono_ms() - t0;
    printf("durable put of a %d-row batch: %.2f ms on average\n", ROWS, (double)ms / 50.0);
    for (int i = 0; i < ROWS; i++)
        json_decref(rows[i].metrics);
    kd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),          cmocka_unit_test(duplicate_batches),
        cmocka_unit_test(bad_batches_refused), cmocka_unit_test(downsampling),
        cmocka_unit_test(best_validation),     cmocka_unit_test(deleted_trial),
        cmocka_unit_test(since_polling),       cmocka_unit_test(ingestion_rate),
        cmocka_unit_test(retrained_steps),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
