/*
 * Metric overviews for charts: M4 and its helpers as tables (pure), then
 * kd_store_metrics_overview against a real private PostgreSQL, checked
 * against M4 computed here from everything sent: before the overviews
 * hold any row (all folded by the reader), after, half and half, after a
 * step was reported again (the overview made again), from the rows for a
 * range of steps, with a budget, for the profiling kind, after a
 * trial was deleted, and with another replica's writer stalled mid-way.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fx.h"
#include "store/store_int.h"

/* ---- pure ---------------------------------------------------------------- */

static void shift_table(void **state)
{
    (void)state;
    static const struct {
        int64_t max_step;
        int buckets, min_shift, want;
    } cases[] = {
        {0, 32, 0, 0},
        {31, 32, 0, 0},
        {32, 32, 0, 1},
        {1000, 32, 0, 5},
        {1023, 32, 0, 5},
        {1024, 32, 0, 6},
        {1000, 256, 0, 2},
        {1000, 1, 0, 10},
        {5, 32, 3, 3},
        {1000, 32, 7, 7},
        {1000, 0, 0, 10},
        {INT64_MAX, 32, 0, 58},
        {(int64_t)1 << 40, 256, 0, 33},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = kd_sketch__shift(cases[i].max_step, cases[i].buckets, cases[i].min_shift);
        if (got != cases[i].want)
            fail_msg("shift(%lld, %d, %d) = %d, want %d", (long long)cases[i].max_step,
                     cases[i].buckets, cases[i].min_shift, got, cases[i].want);
    }
}

static void buckets_table(void **state)
{
    (void)state;
    static const int cases[][2] = {{4, 1},      {7, 1},      {8, 2},      {100, 16},
                                   {128, 32},   {200, 32},   {255, 32},   {256, 64},
                                   {1024, 256}, {4096, 256}, {10000, 256}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (kd_sketch__buckets(cases[i][0]) != cases[i][1])
            fail_msg("buckets(%d) = %d, want %d", cases[i][0], kd_sketch__buckets(cases[i][0]),
                     cases[i][1]);
}

/* Points as "step:value step:value ..." (values as %g). */
static void pts_text(const struct kd_pt *p, size_t n, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%lld:%g", i ? " " : "", (long long)p[i].step,
                               p[i].v);
}

static void m4_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int shift;
        size_t n;
        struct kd_pt in[12];
        const char *want;
    } cases[] = {
        {"empty", 0, 0, {{0, 0}}, ""},
        {"one point", 3, 1, {{5, 1}}, "5:1"},
        {"a bucket each: all kept", 0, 3, {{0, 3}, {1, 2}, {2, 1}}, "0:3 1:2 2:1"},
        {"falling: first and last", 4, 4, {{0, 4}, {1, 3}, {2, 2}, {3, 1}}, "0:4 3:1"},
        {"rising: first and last", 4, 4, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}, "0:1 3:4"},
        {"a dip and a peak inside, in step order",
         3,
         6,
         {{0, 5}, {1, 9}, {2, 5}, {3, 1}, {4, 5}, {5, 6}},
         "0:5 1:9 3:1 5:6"},
        {"peak before dip", 3, 5, {{0, 5}, {1, 1}, {2, 9}, {3, 5}, {4, 4}}, "0:5 1:1 2:9 4:4"},
        {"ties go to the earlier step",
         3,
         5,
         {{0, 2}, {1, 7}, {2, 7}, {3, 0}, {4, 0}},
         "0:2 1:7 3:0 4:0"},
        {"flat", 3, 4, {{0, 1}, {1, 1}, {2, 1}, {3, 1}}, "0:1 3:1"},
        {"two buckets",
         2,
         8,
         {{0, 1}, {1, 0}, {2, 5}, {3, 2}, {4, 2}, {5, 3}, {6, 3}, {7, 1}},
         "0:1 1:0 2:5 3:2 4:2 5:3 7:1"},
        {"sparse steps, empty buckets between",
         1,
         4,
         {{0, 1}, {10, 2}, {11, 3}, {40, 4}},
         "0:1 10:2 11:3 40:4"},
        {"negative and huge values",
         8,
         3,
         {{0, -1e300}, {1, 1e300}, {2, 0}},
         "0:-1e+300 1:1e+300 2:0"},
    };
    char got[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_pt p[12];
        memcpy(p, cases[i].in, sizeof(p));
        size_t n = kd_sketch__m4(p, cases[i].n, cases[i].shift);
        pts_text(p, n, got, sizeof(got));
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("%s: got \"%s\", want \"%s\"", cases[i].name, got, cases[i].want);
    }
}

static void settle_newest_wins(void **state)
{
    (void)state;
    struct kd_series_set set = {0};
    struct kd_series *s = kd_sketch__series(&set, "loss");
    assert_ptr_equal(kd_sketch__series(&set, "loss"), s);
    const struct kd_pt in[] = {{5, 1}, {1, 2}, {5, 3}, {3, 4}, {1, 5}, {9, 6}, {5, 7}};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
        kd_sketch__add(s, in[i].step, in[i].v);
    kd_sketch__settle(s);
    char got[256];
    pts_text(s->pt, s->n, got, sizeof(got));
    assert_string_equal(got, "1:5 3:4 5:7 9:6");
    kd_sketch__free(&set);
    assert_int_equal(set.n, 0);
    kd_sketch__free(&set); /* twice, and NULL */
    kd_sketch__free(NULL);
}

static void rows_encode_decode(void **state)
{
    (void)state;
    struct kd_series_set set = {0}, back = {0};
    int64_t top = -1;
    char err[KD_ERRLEN] = "";
    static const char *const rows[] = {
        "{\"loss\": 0.5, \"ok\": true, \"note\": \"x\", \"z\\\"q\\n\": 3, \"deep\": {\"a\": 1}}",
        "{\"loss\": 0.25, \"acc\": 1, \"big\": 12345678901234}",
        "{\"loss\": 0.125000000001, \"acc\": null}",
    };
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            kd_sketch__add_row(&set, 10 * (i + 1), rows[i], strlen(rows[i]), &top, err), 0);
    assert_int_equal(top, 30);
    assert_int_equal(kd_sketch__add_row(&set, 40, "[1]", 3, &top, err), KD_EPARSE);
    assert_int_equal(kd_sketch__add_row(&set, 40, "{", 1, &top, err), KD_EPARSE);
    assert_int_equal(top, 30);
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    assert_int_equal(kd_sketch__encode(&b, &set), 0);
    assert_string_equal(kd_buf_str(&b),
                        "{\"acc\":{\"steps\":[20],\"values\":[1]},"
                        "\"big\":{\"steps\":[20],\"values\":[1.23456789e+13]},"
                        "\"loss\":{\"steps\":[10,20,30],\"values\":[0.5,0.25,0.125]},"
                        "\"z\\\"q\\u000a\":{\"steps\":[10],\"values\":[3]}}");
    assert_int_equal(kd_sketch__decode(&back, b.data, b.len, err), 0);
    struct kd_buf b2 = KD_BUF_INIT(1 << 20);
    assert_int_equal(kd_sketch__encode(&b2, &back), 0);
    assert_string_equal(kd_buf_str(&b2), kd_buf_str(&b));
    struct kd_series_set bad = {0};
    static const char *const corrupt[] = {"[]", "{\"a\":{\"steps\":[1,2],\"values\":[1]}}",
                                          "{\"a\":{\"steps\":[\"1\"],\"values\":[1]}}",
                                          "{\"a\":{\"steps\":[1],\"values\":[true]}}", "{\"a\":1}"};
    for (size_t i = 0; i < sizeof(corrupt) / sizeof(corrupt[0]); i++)
        if (kd_sketch__decode(&bad, corrupt[i], strlen(corrupt[i]), err) != KD_ECORRUPT)
            fail_msg("decoded %s", corrupt[i]);
    /* A too small buffer fails without a half-written answer being mistaken for one. */
    struct kd_buf small = KD_BUF_INIT(16);
    assert_int_equal(kd_sketch__encode(&small, &set), KD_ETOOBIG);
    kd_sketch__free(&set);
    kd_sketch__free(&back);
    kd_sketch__free(&bad);
    kd_buf_free(&b);
    kd_buf_free(&b2);
    kd_buf_free(&small);
}

/* ---- against PostgreSQL ---------------------------------------------------- */

#define NT 5       /* trials */
#define MAXP 20000 /* points a series may have */

/* What was sent, per trial and metric: the newest value per step. */
struct truth {
    int64_t trial[NT];
    double v[NT][2][MAXP]; /* [metric a, b][step] */
    bool has[NT][2][MAXP];
    int64_t top;
};

static double shape(int t, int m, int64_t step, unsigned *seed)
{
    double noise = (double)rand_r(seed) / RAND_MAX - 0.5;
    return m == 0 ? 2.0 * exp(-(0.002 + 0.001 * t) * (double)step) + 0.05 * noise
                  : (double)((step * 7 + t) % 13) + noise;
}

/* Send steps from..to (every `every`) of trial t in batches; metric b only on even steps. */
static void send_steps(struct kd_store *s, struct truth *tr, int t, enum kd_metric_kind kind,
                       int64_t from, int64_t to, int every, const char *key, unsigned seed)
{
    char err[KD_ERRLEN] = "", k[64];
    struct kd_metric_row rows[100];
    int n = 0, nb = 0;
    for (int64_t st = from; st <= to; st += every) {
        double a = shape(t, 0, st, &seed), b = shape(t, 1, st, &seed);
        json_t *m = st % 2 == 0 ? json_pack("{sfsfss}", "a", a, "b", b, "s", "text")
                                : json_pack("{sfsb}", "a", a, "flag", 1);
        rows[n++] = (struct kd_metric_row){.step = st, .metrics = m};
        tr->v[t][0][st] = a;
        tr->has[t][0][st] = true;
        if (st % 2 == 0) {
            tr->v[t][1][st] = b;
            tr->has[t][1][st] = true;
        }
        if (st > tr->top)
            tr->top = st;
        if (n == 100 || st + every > to) {
            snprintf(k, sizeof(k), "%s-%d", key, nb++);
            struct kd_metric_batch bt = {tr->trial[t], kind, k, rows, (size_t)n};
            if (kd_store_metrics_put(s, &bt, 10000, err) != 0)
                fail_msg("put: %s", err);
            for (int i = 0; i < n; i++)
                json_decref(rows[i].metrics);
            n = 0;
        }
    }
}

/* M4 written out here from the truth: buckets (step - from) / width over from..to. */
static void m4_ref(const struct truth *tr, int t, int m, int64_t from, int64_t to, int64_t width,
                   json_t *steps, json_t *values)
{
    int64_t s = from;
    while (s <= to && s <= tr->top) {
        int64_t b = (s - from) / width, end = from + (b + 1) * width - 1;
        int64_t first = -1, last = -1, lo = -1, hi = -1;
        for (int64_t x = s; x <= end && x <= to && x <= tr->top; x++) {
            if (!tr->has[t][m][x])
                continue;
            if (first < 0)
                first = lo = hi = x;
            last = x;
            if (tr->v[t][m][x] < tr->v[t][m][lo])
                lo = x;
            if (tr->v[t][m][x] > tr->v[t][m][hi])
                hi = x;
        }
        int64_t keep[4] = {first, lo < hi ? lo : hi, lo < hi ? hi : lo, last};
        for (int i = 0; i < 4 && first >= 0; i++) {
            if (i > 0 && keep[i] == keep[i - 1])
                continue;
            json_array_append_new(steps, json_integer(keep[i]));
            json_array_append_new(values, json_real(tr->v[t][m][keep[i]]));
        }
        s = end + 1;
    }
}

/* The overview's JSON against the reference; values to nine significant digits. */
static void check_against(const char *what, const char *text, const struct truth *tr, int nt,
                          int64_t from, int64_t to, int64_t width)
{
    json_error_t je;
    json_t *got = json_loads(text, 0, &je);
    if (!json_is_array(got))
        fail_msg("%s: not a JSON array: %s: %.200s", what, je.text, text);
    size_t gi = 0;
    for (int t = 0; t < nt; t++) {
        json_t *want[2][2];
        bool any = false;
        for (int m = 0; m < 2; m++) {
            want[m][0] = json_array();
            want[m][1] = json_array();
            m4_ref(tr, t, m, from, to, width, want[m][0], want[m][1]);
            any = any || json_array_size(want[m][0]) > 0;
        }
        if (any) {
            json_t *g = json_array_get(got, gi++);
            if (json_integer_value(json_object_get(g, "trial_id")) != tr->trial[t])
                fail_msg("%s: trial %d missing or out of order", what, t);
            json_t *ser = json_object_get(g, "series");
            if (json_object_get(ser, "flag") || json_object_get(ser, "s"))
                fail_msg("%s: a bool or a string was drawn", what);
            for (int m = 0; m < 2; m++) {
                json_t *gs = json_object_get(ser, m ? "b" : "a");
                if (json_array_size(want[m][0]) == 0) {
                    if (gs)
                        fail_msg("%s: trial %d: a series %c without points", what, t, "ab"[m]);
                    continue;
                }
                json_t *st = json_object_get(gs, "steps"), *va = json_object_get(gs, "values");
                if (!json_equal(st, want[m][0])) {
                    char *a = json_dumps(st, 0), *b = json_dumps(want[m][0], 0);
                    fail_msg("%s: trial %d metric %c steps\n got  %.600s\n want %.600s", what, t,
                             "ab"[m], a ? a : "(none)", b);
                }
                for (size_t i = 0; i < json_array_size(va); i++) {
                    double x = json_number_value(json_array_get(va, i));
                    double y = json_real_value(json_array_get(want[m][1], i));
                    if (fabs(x - y) > 1e-8 * (fabs(y) > 1 ? fabs(y) : 1))
                        fail_msg("%s: trial %d metric %c point %zu: %.17g, want %.17g", what, t,
                                 "ab"[m], i, x, y);
                }
            }
        }
        for (int m = 0; m < 2; m++) {
            json_decref(want[m][0]);
            json_decref(want[m][1]);
        }
    }
    if (gi != json_array_size(got))
        fail_msg("%s: %zu trials in the answer, want %zu", what, json_array_size(got), gi);
    json_decref(got);
}

/* The overview asked with max_points (and budget), checked; returns what it said. */
static struct kd_series_got overview(struct kd_store *s, int64_t exp, enum kd_metric_kind kind,
                                     const struct kd_series_ask *ask, const struct truth *tr,
                                     const char *what)
{
    struct kd_buf out = KD_BUF_INIT(64u << 20);
    struct kd_series_got got;
    char err[KD_ERRLEN] = "";
    if (kd_store_metrics_overview(s, exp, kind, ask, &out, &got, err) != 0)
        fail_msg("%s: %s", what, err);
    int64_t from = ask->range ? got.from : 0, to = ask->range ? got.to : INT64_MAX / 2;
    if (ask->range) {
        /* whole buckets of a power of two steps around the range, at most max_points / 4 + 1 */
        assert_true(got.width > 0 && (got.width & (got.width - 1)) == 0);
        assert_true(got.from <= ask->from && got.from % got.width == 0 && got.to >= ask->to &&
                    (got.to + 1) % got.width == 0);
        assert_true((got.to - got.from + 1) / got.width <= got.max_points / 4 + 1);
    } else {
        int b = kd_sketch__buckets(got.max_points);
        assert_int_equal(got.buckets, b);
        assert_int_equal(got.width, (int64_t)1 << kd_sketch__shift(tr->top, b, 0));
    }
    check_against(what, kd_buf_str(&out), tr, NT, from, to, got.width);
    kd_buf_free(&out);
    return got;
}

static struct truth *setup(struct kd_store **s, int64_t *exp, char *ci, size_t len, int interval)
{
    struct truth *tr = calloc(1, sizeof(*tr));
    assert_non_null(tr);
    struct kd_store_opts o = {.sketch_interval_ms = interval};
    *s = fx_store(&o, ci, len);
    tr->trial[0] = fx_trial(*s, "sk0", exp);
    char err[KD_ERRLEN] = "";
    for (int t = 1; t < NT; t++) {
        char uid[32];
        snprintf(uid, sizeof(uid), "trial-sk%d", t);
        struct kd_store_trial st = {uid, *exp, "req", NULL, 1, "ACTIVE"};
        assert_int_equal(kd_store_trial_upsert(*s, &st, &tr->trial[t], err), 0);
    }
    return tr;
}

static int sketch_all(struct kd_store *s)
{
    int folded = 0, total = 0;
    char err[KD_ERRLEN] = "";
    do {
        if (kd_store_metrics_sketch(s, 700, &folded, err) != 0)
            fail_msg("sketch: %s", err);
        total += folded;
    } while (folded > 0);
    return total;
}

static void overview_states(void **state)
{
    (void)state;
    char ci[512];
    struct kd_store *s = NULL;
    int64_t exp = 0;
    struct truth *tr = setup(&s, &exp, ci, sizeof(ci), -1);
    /* Trials of different lengths and spacing; trial 4 has no training rows. */
    for (int t = 0; t < NT - 1; t++)
        send_steps(s, tr, t, KD_METRIC_TRAINING, t, 1500 + 900 * t, 1 + t % 3, "a",
                   10u + (unsigned)t);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    const int asks[] = {4, 7, 64, 128, 200, 1024, 10000};
    char what[128];
    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
            struct kd_series_ask ask = {.max_points = asks[i]};
            snprintf(what, sizeof(what), "%s, max_points %d",
                     pass == 0   ? "rows not folded yet"
                     : pass == 1 ? "all folded"
                                 : "half folded",
                     asks[i]);
            struct kd_series_got got = overview(s, exp, KD_METRIC_TRAINING, &ask, tr, what);
            assert_false(got.rows);
        }
        if (pass == 0) {
            assert_true(sketch_all(s) > 0);
            PGconn *c = fx_conn(ci);
            assert_int_equal(fx_int(c, "SELECT count(*) FROM metric_sketches"), NT - 1);
            assert_int_equal(fx_int(c, "SELECT upto_id FROM metric_sketch_mark"),
                             fx_int(c, "SELECT max(id) FROM metrics"));
            PQfinish(c);
        }
        if (pass == 1) {
            /* More steps after the folded ones: half the rows are only in the table. */
            for (int t = 0; t < NT; t++)
                send_steps(s, tr, t, KD_METRIC_TRAINING, 6000 + t, 9000 + 500 * t, 2, "b",
                           20u + (unsigned)t);
            assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
        }
    }
    sketch_all(s);
    overview(s, exp, KD_METRIC_TRAINING, &(struct kd_series_ask){.max_points = 128}, tr,
             "all folded again");
    free(tr);
    kd_store_close(s);
}

static void retried_steps_rebuild(void **state)
{
    (void)state;
    char ci[512];
    struct kd_store *s = NULL;
    int64_t exp = 0;
    struct truth *tr = setup(&s, &exp, ci, sizeof(ci), -1);
    for (int t = 0; t < NT; t++)
        send_steps(s, tr, t, KD_METRIC_VALIDATION, 0, 3000, 1, "a", 30u + (unsigned)t);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    sketch_all(s);
    /* An attempt resumed from step 1000 reports 1000..2500 again, other values: newest wins. */
    send_steps(s, tr, 2, KD_METRIC_VALIDATION, 1000, 2500, 1, "retry", 99);
    send_steps(s, tr, 3, KD_METRIC_VALIDATION, 3001, 3200, 1, "more", 98);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    overview(s, exp, KD_METRIC_VALIDATION, &(struct kd_series_ask){.max_points = 1024}, tr,
             "retried, not folded: the reader's fold");
    sketch_all(s);
    for (int mp = 4; mp <= 1024; mp *= 4)
        overview(s, exp, KD_METRIC_VALIDATION, &(struct kd_series_ask){.max_points = mp}, tr,
                 "retried, folded: made again");
    free(tr);
    kd_store_close(s);
}

/* Exec sql on c, or fail naming it. */
static void exec_ok(PGconn *c, const char *sql, ExecStatusType want)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != want)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

struct sender {
    struct kd_store *s;
    struct truth *tr;
    bool done;
};

static void *send_b(void *arg)
{
    struct sender *x = arg;
    send_steps(x->s, x->tr, 1, KD_METRIC_TRAINING, 0, 600, 1, "b", 42u);
    __atomic_store_n(&x->done, true, __ATOMIC_SEQ_CST);
    return NULL;
}

/*
 * Another controller replica's writer, stalled inside its transaction with a row drawn (its
 * id) but not committed: this process's writes wait for it, so no later id commits first and
 * the overviews' mark never passes the row (which would then be missing from every chart).
 */
static void writers_commit_in_order(void **state)
{
    (void)state;
    char ci[512], sql[512];
    struct kd_store *s = NULL;
    int64_t exp = 0;
    struct truth *tr = setup(&s, &exp, ci, sizeof(ci), -1);
    send_steps(s, tr, 0, KD_METRIC_TRAINING, 0, 400, 2, "a", 41u);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    sketch_all(s);
    PGconn *other = fx_conn(ci);
    exec_ok(other, "BEGIN", PGRES_COMMAND_OK);
    exec_ok(other, KD_STORE_METRICS_LOCK_SQL, PGRES_TUPLES_OK);
    snprintf(sql, sizeof(sql),
             "INSERT INTO metrics (trial_id, kind, step, metrics, reported_at, batch_key) "
             "VALUES (%lld, 'training', 401, '{\"a\": 7.5}', now(), 'other-0')",
             (long long)tr->trial[0]);
    exec_ok(other, sql, PGRES_COMMAND_OK);
    tr->v[0][0][401] = 7.5;
    tr->has[0][0][401] = true;
    /* This process's rows after it (a put returns once durable): they wait for the other. */
    struct sender snd = {s, tr, false};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, send_b, &snd), 0);
    usleep(1500 * 1000);
    assert_false(__atomic_load_n(&snd.done, __ATOMIC_SEQ_CST));
    sketch_all(s);
    PGconn *c = fx_conn(ci);
    long long mark = fx_int(c, "SELECT upto_id FROM metric_sketch_mark");
    long long committed = fx_int(c, "SELECT coalesce(max(id), 0) FROM metrics");
    if (mark != committed)
        fail_msg("the mark (%lld) is not the last committed id (%lld)", mark, committed);
    exec_ok(other, "COMMIT", PGRES_COMMAND_OK);
    PQfinish(other);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(snd.done);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    sketch_all(s);
    assert_int_equal(fx_int(c, "SELECT upto_id FROM metric_sketch_mark"),
                     fx_int(c, "SELECT max(id) FROM metrics"));
    PQfinish(c);
    /* Every step of every trial, the other replica's row included, from the overviews. */
    struct kd_series_got got =
        overview(s, exp, KD_METRIC_TRAINING, &(struct kd_series_ask){.max_points = 10000}, tr,
                 "two writers, folded");
    assert_false(got.rows);
    free(tr);
    kd_store_close(s);
}

static void ranges_budget_kinds(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = NULL;
    int64_t exp = 0;
    struct truth *tr = setup(&s, &exp, ci, sizeof(ci), 50); /* with the thread */
    for (int t = 0; t < NT; t++)
        send_steps(s, tr, t, KD_METRIC_TRAINING, 1, 4000, 1, "a", 40u + (unsigned)t);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    /* The thread folds them soon. */
    PGconn *c = fx_conn(ci);
    for (int i = 0; i < 200 && fx_int(c, "SELECT upto_id FROM metric_sketch_mark") <
                                   fx_int(c, "SELECT max(id) FROM metrics");
         i++)
        usleep(50000);
    assert_int_equal(fx_int(c, "SELECT upto_id FROM metric_sketch_mark"),
                     fx_int(c, "SELECT max(id) FROM metrics"));
    /* Ranges: from the fine overviews where they are fine enough, else from the rows; narrow
     * ones every point. */
    static const int64_t ranges[][3] = {
        {0, 99, 400}, {100, 130, 4000}, {1000, 2999, 200}, {3990, 5000, 64}, {0, 4095, 512}};
    char what[128];
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        struct kd_series_ask ask = {.max_points = (int)ranges[i][2],
                                    .range = true,
                                    .from = ranges[i][0],
                                    .to = ranges[i][1]};
        snprintf(what, sizeof(what), "range %lld..%lld", (long long)ask.from, (long long)ask.to);
        struct kd_series_got got = overview(s, exp, KD_METRIC_TRAINING, &ask, tr, what);
        assert_false(got.rows);
        assert_int_equal(got.buckets, ranges[i][2] / 4);
    }
    /* A range of a power of two per bucket from 0 is the overview itself. */
    struct kd_buf a = KD_BUF_INIT(1 << 24), b = KD_BUF_INIT(1 << 24);
    struct kd_series_got ga, gb;
    struct kd_series_ask all = {.max_points = 128};
    assert_int_equal(kd_store_metrics_overview(s, exp, KD_METRIC_TRAINING, &all, &a, &ga, err), 0);
    struct kd_series_ask rng = {
        .max_points = 128, .range = true, .from = 0, .to = 32 * ga.width - 1};
    assert_int_equal(kd_store_metrics_overview(s, exp, KD_METRIC_TRAINING, &rng, &b, &gb, err), 0);
    assert_int_equal(gb.width, ga.width);
    check_against("range of the overview's buckets", kd_buf_str(&b), tr, NT, 0, rng.to, ga.width);
    check_against("overview", kd_buf_str(&a), tr, NT, 0, rng.to, ga.width);
    /* A budget of 400 points for 5 trials: 80 each, 16 buckets. */
    struct kd_series_got g =
        overview(s, exp, KD_METRIC_TRAINING,
                 &(struct kd_series_ask){.max_points = 10000, .budget = 400}, tr, "budget");
    assert_int_equal(g.max_points, 80);
    assert_int_equal(g.buckets, 16);
    g = overview(s, exp, KD_METRIC_TRAINING,
                 &(struct kd_series_ask){.max_points = 10000, .budget = 3}, tr, "tiny budget");
    assert_int_equal(g.max_points, 4);
    /* Nothing of another kind; profiling rows are read from the rows. */
    struct kd_buf o = KD_BUF_INIT(1 << 20);
    struct kd_series_ask ask = {.max_points = 200};
    assert_int_equal(kd_store_metrics_overview(s, exp, KD_METRIC_VALIDATION, &ask, &o, &g, err), 0);
    assert_string_equal(kd_buf_str(&o), "[]");
    kd_buf_reset(&o);
    assert_int_equal(kd_store_metrics_overview(s, exp, KD_METRIC_PROFILING, &ask, &o, &g, err), 0);
    assert_true(g.rows);
    assert_string_equal(kd_buf_str(&o), "[]");
    /* Refusals name the field. */
    static const struct {
        struct kd_series_ask ask;
        const char *field;
    } bad[] = {
        {{.max_points = 3}, "max_points"},
        {{.max_points = 10001}, "max_points"},
        {{.max_points = 100, .budget = -1}, "budget"},
        {{.max_points = 100, .range = true, .from = 5, .to = 4}, "from, to"},
        {{.max_points = 100, .range = true, .from = -1, .to = 4}, "from, to"},
        {{.max_points = 100, .range = true, .from = 0, .to = (int64_t)1 << 53}, "from, to"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kd_buf_reset(&o);
        assert_int_equal(
            kd_store_metrics_overview(s, exp, KD_METRIC_TRAINING, &bad[i].ask, &o, &g, err),
            KD_EINVAL);
        assert_non_null(strstr(err, bad[i].field));
    }
    assert_int_equal(kd_store_metrics_overview(s, 0, KD_METRIC_TRAINING, &ask, &o, &g, err),
                     KD_EINVAL);
    /* A deleted trial's overview goes with it. */
    char q[128];
    snprintf(q, sizeof(q), "DELETE FROM trials WHERE id = %lld", (long long)tr->trial[1]);
    PQclear(PQexec(c, q));
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metric_sketches"), NT - 1);
    /* And its rows (a trigger: metrics has no per-row foreign key). */
    snprintf(q, sizeof(q), "SELECT count(*) FROM metrics WHERE trial_id = %lld",
             (long long)tr->trial[1]);
    assert_int_equal(fx_int(c, q), 0);
    assert_true(fx_int(c, "SELECT count(*) FROM metrics") > 0);
    kd_buf_reset(&o);
    assert_int_equal(kd_store_metrics_overview(s, exp, KD_METRIC_TRAINING, &ask, &o, &g, err), 0);
    json_t *j = json_loads(kd_buf_str(&o), 0, NULL);
    assert_int_equal(json_array_size(j), NT - 1);
    json_decref(j);
    PQfinish(c);
    kd_buf_free(&a);
    kd_buf_free(&b);
    kd_buf_free(&o);
    free(tr);
    kd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shift_table),
        cmocka_unit_test(buckets_table),
        cmocka_unit_test(m4_table),
        cmocka_unit_test(settle_newest_wins),
        cmocka_unit_test(rows_encode_decode),
        cmocka_unit_test(overview_states),
        cmocka_unit_test(retried_steps_rebuild),
        cmocka_unit_test(writers_commit_in_order),
        cmocka_unit_test(ranges_budget_kinds),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
