/*
 * Trial logs against a real private PostgreSQL: lines stored as sent (hostile
 * text included), retried batches stored once, tail / after / before / regex /
 * substring queries of a trial and of an experiment, the per-trial cap with its
 * one marker, long lines cut, bad batches named, a follower that never misses
 * a line while four writers commit at once, deletion with the experiment; a
 * task's rows and lines, apart from the trials'; the
 * retention decision as a table; and the cost of a line (printed).
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
#include "fx.h"

static const char *const TEXTS[] = {
    "'; DROP TABLE trial_logs; --",
    "Traceback (most recent call last):",
    "  File \"train.py\", line 3, in <module>",
    "ZeroDivisionError: division by zero",
    "tab\there \\ backslash \"quotes\"",
    "ünïcødé ✓ 日本語",
    "",
    "$1 %s %n",
};
#define NTEXTS (sizeof(TEXTS) / sizeof(TEXTS[0]))

static int64_t second_trial(struct kd_store *s, int64_t eid, const char *uid)
{
    char err[KD_ERRLEN] = "";
    int64_t tid = 0;
    struct kd_store_trial t = {uid, eid, "req-2", NULL, 1, "ACTIVE"};
    if (kd_store_trial_upsert(s, &t, &tid, err) != 0)
        fail_msg("trial: %s", err);
    return tid;
}

/* Put n lines "<prefix> i" (i from first) of rank, with key. */
static int put_lines(struct kd_store *s, int64_t tid, const char *key, const char *prefix,
                     int first, int n, int rank, int64_t cap, struct kd_log_put_result *res,
                     char *err)
{
    struct kd_log_line *ls = calloc((size_t)n, sizeof(*ls));
    char **texts = calloc((size_t)n, sizeof(*texts));
    for (int i = 0; i < n; i++) {
        texts[i] = malloc(64);
        snprintf(texts[i], 64, "%s %d", prefix, first + i);
        ls[i] = (struct kd_log_line){rank, i % 2 == 1, 1767225600000 + first + i, texts[i],
                                     strlen(texts[i])};
    }
    struct kd_log_batch b = {tid, "run-1", key, ls, (size_t)n, 0};
    int rc = kd_store_logs_put(s, &b, cap, res, err);
    for (int i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(ls);
    return rc;
}

static json_t *query(struct kd_store *s, const struct kd_log_query *q)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    if (kd_store_logs_query(s, q, &out, err) != 0)
        fail_msg("query: %s", err);
    return out;
}

static const char *line_at(const json_t *a, size_t i)
{
    return json_string_value(json_object_get(json_array_get(a, i), "line"));
}

static void retain_table(void **state)
{
    (void)state;
    static const struct {
        int64_t used;
        bool capped;
        int64_t cap;
        size_t lens[4];
        size_t n;
        size_t keep;
        bool marker;
        int64_t add;
    } cases[] = {
        {0, false, 0, {10, 20}, 2, 2, false, 30},    /* no cap */
        {0, false, -1, {10, 20}, 2, 2, false, 30},   /* negative: no cap */
        {0, false, 100, {10, 20}, 2, 2, false, 30},  /* fits */
        {70, false, 100, {10, 20}, 2, 2, false, 30}, /* fits exactly */
        {71, false, 100, {10, 20}, 2, 1, true, 10},  /* the second does not fit */
        {95, false, 100, {10, 1, 1}, 3, 0, true, 0}, /* no hole: later short lines dropped too */
        {100, false, 100, {0, 0}, 2, 2, false, 0},   /* empty lines cost nothing */
        {100, false, 100, {1}, 1, 0, true, 0},       /* full: the marker */
        {50, true, 100, {1, 1}, 2, 0, false, 0},     /* marked before: nothing, no new marker */
        {0, false, 5, {6}, 1, 0, true, 0},           /* one line over the whole cap */
        {0, true, 0, {3}, 1, 1, false, 3},           /* capped, then the cap was lifted */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_log_retain r;
        kd_store_logs_retain(cases[i].used, cases[i].capped, cases[i].cap, cases[i].lens,
                             cases[i].n, &r);
        if (r.keep != cases[i].keep || r.marker != cases[i].marker || r.add_bytes != cases[i].add)
            fail_msg("case %zu: keep %zu marker %d add %lld; want %zu %d %lld", i, r.keep, r.marker,
                     (long long)r.add_bytes, cases[i].keep, cases[i].marker,
                     (long long)cases[i].add);
    }
}

static void round_trip(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, tid = fx_trial(s, "logs", &eid);
    struct kd_log_line ls[NTEXTS];
    for (size_t i = 0; i < NTEXTS; i++)
        ls[i] = (struct kd_log_line){(int)i % 3 - 1, i % 2 == 1, 1767225600123 + (int64_t)i,
                                     TEXTS[i], strlen(TEXTS[i])};
    struct kd_log_batch b = {tid, "9f2c4e1a", "n0-abc-1", ls, NTEXTS, 0};
    struct kd_log_put_result res;
    assert_int_equal(kd_store_logs_put(s, &b, 0, &res, err), 0);
    assert_int_equal(res.stored, NTEXTS);
    assert_false(res.duplicate);
    /* the same key again: stored once */
    assert_int_equal(kd_store_logs_put(s, &b, 0, &res, err), 0);
    assert_true(res.duplicate);
    assert_int_equal(res.stored, 0);
    struct kd_log_query q = {.trial_id = tid, .limit = 1000};
    json_t *got = query(s, &q);
    assert_int_equal(json_array_size(got), NTEXTS);
    int64_t prev = 0;
    for (size_t i = 0; i < NTEXTS; i++) {
        json_t *l = json_array_get(got, i);
        assert_string_equal(line_at(got, i), TEXTS[i]);
        assert_int_equal(json_integer_value(json_object_get(l, "rank")), (int)i % 3 - 1);
        assert_string_equal(json_string_value(json_object_get(l, "stream")),
                            i % 2 ? "stderr" : "stdout");
        assert_string_equal(json_string_value(json_object_get(l, "run_id")), "9f2c4e1a");
        assert_int_equal(json_integer_value(json_object_get(l, "trial_id")), tid);
        int64_t ms = 0;
        assert_int_equal(
            kd_time_parse_rfc3339(json_string_value(json_object_get(l, "timestamp")), &ms), 0);
        assert_int_equal(ms, 1767225600123 + (int64_t)i);
        int64_t id = json_integer_value(json_object_get(l, "id"));
        assert_true(id > prev);
        prev = id;
    }
    json_decref(got);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_logs"), NTEXTS);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_log_batches"), 1);
    long long bytes = 0;
    for (size_t i = 0; i < NTEXTS; i++)
        bytes += (long long)strlen(TEXTS[i]);
    assert_int_equal(fx_int(c, "SELECT log_bytes FROM trials"), bytes);
    PQfinish(c);
    kd_store_close(s);
}

static void queries(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, t1 = fx_trial(s, "q", &eid), t2 = second_trial(s, eid, "trial-q2");
    int64_t other_e = 0, t3 = fx_trial(s, "other", &other_e);
    /* interleaved batches of two trials, and one of another experiment */
    for (int k = 0; k < 5; k++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", k);
        assert_int_equal(put_lines(s, t1, key, "one", k * 10, 10, 0, 0, NULL, err), 0);
        assert_int_equal(put_lines(s, t2, key, "two", k * 10, 10, 1, 0, NULL, err), 0);
    }
    assert_int_equal(put_lines(s, t3, "k0", "three", 0, 10, 0, 0, NULL, err), 0);
    /* tail */
    struct kd_log_query q = {.trial_id = t1, .limit = 3, .tail = true};
    json_t *a = query(s, &q);
    assert_int_equal(json_array_size(a), 3);
    assert_string_equal(line_at(a, 0), "one 47");
    assert_string_equal(line_at(a, 2), "one 49");
    int64_t id47 = json_integer_value(json_object_get(json_array_get(a, 0), "id"));
    json_decref(a);
    /* before: the 3 lines before that */
    q.before_id = id47;
    a = query(s, &q);
    assert_int_equal(json_array_size(a), 3);
    assert_string_equal(line_at(a, 0), "one 44");
    assert_string_equal(line_at(a, 2), "one 46");
    json_decref(a);
    /* head and after */
    q = (struct kd_log_query){.trial_id = t1, .limit = 2};
    a = query(s, &q);
    assert_string_equal(line_at(a, 0), "one 0");
    assert_string_equal(line_at(a, 1), "one 1");
    q.after_id = json_integer_value(json_object_get(json_array_get(a, 1), "id"));
    json_decref(a);
    q.limit = 1000;
    a = query(s, &q);
    assert_int_equal(json_array_size(a), 48);
    assert_string_equal(line_at(a, 0), "one 2");
    json_decref(a);
    /* regex and substring */
    q = (struct kd_log_query){.trial_id = t1, .limit = 1000, .regex = "^one [13]$"};
    a = query(s, &q);
    assert_int_equal(json_array_size(a), 2);
    assert_string_equal(line_at(a, 1), "one 3");
    json_decref(a);
    q = (struct kd_log_query){.trial_id = t2, .limit = 1000, .contains = "two 4"};
    a = query(s, &q);
    assert_int_equal(json_array_size(a), 11); /* 4, 40..49 */
    json_decref(a);
    q = (struct kd_log_query){.trial_id = t1, .limit = 1000, .contains = "%"};
    a = query(s, &q); /* a substring, not a LIKE pattern */
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    q = (struct kd_log_query){.trial_id = t1, .limit = 10, .regex = "(unclosed"};
    json_t *bad = NULL;
    assert_int_equal(kd_store_logs_query(s, &q, &bad, err), KD_EINVAL);
    assert_non_null(strstr(err, "regular expression"));
    /* the experiment: both trials, in the order stored, not the other experiment */
    q = (struct kd_log_query){.experiment_id = eid, .limit = 1000};
    a = query(s, &q);
    assert_int_equal(json_array_size(a), 100);
    assert_string_equal(line_at(a, 0), "one 0");
    assert_string_equal(line_at(a, 10), "two 0");
    assert_string_equal(line_at(a, 99), "two 49");
    json_decref(a);
    q = (struct kd_log_query){.experiment_id = eid, .limit = 15, .tail = true};
    a = query(s, &q);
    assert_int_equal(json_array_size(a), 15);
    assert_string_equal(line_at(a, 0), "one 45");
    assert_string_equal(line_at(a, 5), "two 40");
    json_decref(a);
    /* bad queries */
    q = (struct kd_log_query){.limit = 10};
    assert_int_equal(kd_store_logs_query(s, &q, &bad, err), KD_EINVAL);
    q = (struct kd_log_query){.trial_id = t1, .limit = KD_STORE_LOG_MAX_QUERY + 1};
    assert_int_equal(kd_store_logs_query(s, &q, &bad, err), KD_EINVAL);
    assert_non_null(strstr(err, "limit"));
    kd_store_close(s);
}

static void cap_and_marker(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, tid = fx_trial(s, "cap", &eid);
    struct kd_log_put_result res;
    /* "line N" is 6 or 7 bytes: a cap of 40 holds 0..5 (6 * 6 = 36) */
    assert_int_equal(put_lines(s, tid, "a", "line", 0, 3, 0, 40, &res, err), 0);
    assert_int_equal(res.stored, 3);
    assert_false(res.capped);
    assert_int_equal(put_lines(s, tid, "b", "line", 3, 5, 0, 40, &res, err), 0);
    assert_int_equal(res.stored, 3);
    assert_int_equal(res.dropped, 2);
    assert_true(res.capped);
    assert_int_equal(put_lines(s, tid, "c", "line", 8, 5, 0, 40, &res, err), 0);
    assert_int_equal(res.stored, 0);
    assert_int_equal(res.dropped, 5);
    assert_false(res.capped);
    struct kd_log_query q = {.trial_id = tid, .limit = 1000};
    json_t *a = query(s, &q);
    assert_int_equal(json_array_size(a), 7);
    assert_string_equal(line_at(a, 5), "line 5");
    assert_non_null(strstr(line_at(a, 6), "reached the limit of 40 bytes"));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(a, 6), "rank")), -1);
    json_decref(a);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT log_bytes FROM trials"), 36);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_logs WHERE line LIKE '%limit%'"), 1);
    PQfinish(c);
    kd_store_close(s);
}

static void bad_batches(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, tid = fx_trial(s, "bad", &eid);
    struct kd_log_line ok = {0, false, 1, "x", 1};
    struct kd_log_line nul = {0, false, 1, "a\0b", 3};
    struct kd_log_line rank = {-2, false, 1, "x", 1};
    static const struct {
        const char *key;
        int which; /* 0 ok, 1 nul, 2 rank */
        size_t n;
        int64_t trial;
        int rc;
        const char *field;
    } cases[] = {
        {"", 0, 1, 0, KD_EINVAL, "key"},
        {"has space", 0, 1, 0, KD_EINVAL, "key: byte 4"},
        {"k", 1, 1, 0, KD_EINVAL, "lines[0].line: contains a NUL"},
        {"k", 2, 1, 0, KD_EINVAL, "lines[0].rank"},
        {"k", 0, 0, 0, KD_EINVAL, "lines: must hold 1 to"},
        {"k", 0, 1, -5, KD_EINVAL, "trial_id"},
        {"k", 0, 1, 987654, KD_ENOTFOUND, "has no row"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct kd_log_line *l = cases[i].which == 1   ? &nul
                                      : cases[i].which == 2 ? &rank
                                                            : &ok;
        struct kd_log_batch b = {
            cases[i].trial ? cases[i].trial : tid, "", cases[i].key, l, cases[i].n, 0};
        err[0] = '\0';
        int rc = kd_store_logs_put(s, &b, 0, NULL, err);
        if (rc != cases[i].rc || strstr(err, cases[i].field) == NULL)
            fail_msg("case %zu: rc %d err \"%s\"; want %d and \"%s\"", i, rc, err, cases[i].rc,
                     cases[i].field);
    }
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_logs"), 0);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_log_batches"), 0);
    PQfinish(c);
    /* a long line is cut at a UTF-8 boundary, with the dropped bytes named */
    size_t n = KD_STORE_LOG_LINE_MAX + 5000;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i += 2)
        memcpy(big + i, "\xC3\xA9", 2);
    big[n] = '\0';
    struct kd_log_line longl = {0, false, 1, big, n};
    struct kd_log_batch b = {tid, "", "long", &longl, 1, 0};
    assert_int_equal(kd_store_logs_put(s, &b, 0, NULL, err), 0);
    struct kd_log_query q = {.trial_id = tid, .limit = 10};
    json_t *a = query(s, &q);
    const char *got = line_at(a, 0);
    assert_true(strlen(got) <= KD_STORE_LOG_LINE_MAX);
    assert_non_null(strstr(got, "\xC3\xA9 [kdet-controller: line cut, "));
    json_decref(a);
    free(big);
    kd_store_close(s);
}

/* Four writers commit at once; a follower polling `after` sees every line exactly once. */
struct writer {
    struct kd_store *s;
    int64_t tid;
    int w;
};

#define W_BATCHES 60
#define W_LINES 20

static void *write_main(void *p)
{
    struct writer *w = p;
    char err[KD_ERRLEN] = "", key[32], prefix[32];
    for (int k = 0; k < W_BATCHES; k++) {
        snprintf(key, sizeof(key), "w%d-%d", w->w, k);
        snprintf(prefix, sizeof(prefix), "w%d", w->w);
        if (put_lines(w->s, w->tid, key, prefix, k * W_LINES, W_LINES, w->w, 0, NULL, err) != 0)
            fprintf(stderr, "writer %d: %s\n", w->w, err);
    }
    return NULL;
}

static void follow_while_writing(void **state)
{
    (void)state;
    char ci[512];
    struct kd_store_opts o = {.pool_size = 8};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    int64_t eid = 0, tids[4];
    tids[0] = fx_trial(s, "f", &eid);
    tids[1] = second_trial(s, eid, "trial-f1");
    tids[2] = second_trial(s, eid, "trial-f2");
    tids[3] = second_trial(s, eid, "trial-f3");
    struct writer ws[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        ws[i] = (struct writer){s, tids[i], i};
        assert_int_equal(pthread_create(&th[i], NULL, write_main, &ws[i]), 0);
    }
    int64_t after = 0, seen = 0, next[4] = {0};
    int64_t deadline = kd_mono_ms() + 60000;
    const int64_t total = 4 * W_BATCHES * W_LINES;
    while (seen < total && kd_mono_ms() < deadline) {
        struct kd_log_query q = {.experiment_id = eid, .after_id = after, .limit = 1000};
        json_t *a = query(s, &q);
        size_t i;
        json_t *l;
        json_array_foreach(a, i, l)
        {
            int r = (int)json_integer_value(json_object_get(l, "rank"));
            char want[32];
            snprintf(want, sizeof(want), "w%d %lld", r, (long long)next[r]);
            if (strcmp(json_string_value(json_object_get(l, "line")), want) != 0)
                fail_msg("follower: got \"%s\", want \"%s\" (a line missed or seen twice)",
                         json_string_value(json_object_get(l, "line")), want);
            next[r]++;
            seen++;
            after = json_integer_value(json_object_get(l, "id"));
        }
        json_decref(a);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(seen, total);
    kd_store_close(s);
}

static void delete_with_experiment(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, t1 = fx_trial(s, "del", &eid), t2 = second_trial(s, eid, "trial-del2");
    int64_t other = 0, t3 = fx_trial(s, "keep", &other);
    for (int k = 0; k < 3; k++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", k);
        assert_int_equal(put_lines(s, t1, key, "a", k * 100, 100, 0, 0, NULL, err), 0);
        assert_int_equal(put_lines(s, t2, key, "b", k * 100, 100, 0, 0, NULL, err), 0);
    }
    assert_int_equal(put_lines(s, t3, "k", "c", 0, 10, 0, 0, NULL, err), 0);
    int64_t n = 0;
    assert_int_equal(kd_store_logs_delete(s, eid, &n, err), 0);
    assert_int_equal(n, 600);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_logs"), 10);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_log_batches"), 1);
    assert_int_equal(fx_int(c, "SELECT sum(log_bytes) FROM trials WHERE log_bytes > 0"), 30);
    /* again: nothing left, no error */
    assert_int_equal(kd_store_logs_delete(s, eid, &n, err), 0);
    assert_int_equal(n, 0);
    /* deleting the experiment row takes the rest with it */
    assert_int_equal(kd_store_experiment_delete(s, other, err), 0);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM trial_logs"), 0);
    PQfinish(c);
    kd_store_close(s);
}

/* What a line costs: bytes on disk with the index, and the time of a 100-line batch. */
static void cost(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, tid = fx_trial(s, "cost", &eid);
    enum { BATCHES = 200, PER = 100 };
    struct kd_log_line ls[PER];
    char texts[PER][96];
    int64_t t0 = kd_mono_ns();
    for (int k = 0; k < BATCHES; k++) {
        char key[16];
        for (int i = 0; i < PER; i++) {
            snprintf(texts[i], sizeof(texts[i]),
                     "epoch 3 batch %05d loss=0.%06d accuracy=0.%06d lr=0.0100 step_time=0.031s",
                     k * PER + i, (k * 7919 + i * 104729) % 1000000, (k * 31 + i) % 1000000);
            ls[i] = (struct kd_log_line){i % 2, false, kd_wall_ms(), texts[i], strlen(texts[i])};
        }
        snprintf(key, sizeof(key), "c%d", k);
        struct kd_log_batch b = {tid, "run-cost", key, ls, PER, 0};
        assert_int_equal(kd_store_logs_put(s, &b, 0, NULL, err), 0);
    }
    double secs = (double)(kd_mono_ns() - t0) / 1e9;
    PGconn *c = fx_conn(ci);
    long long total = fx_int(c, "SELECT pg_total_relation_size('trial_logs')");
    long long text = fx_int(c, "SELECT sum(octet_length(line)) FROM trial_logs");
    PQfinish(c);
    const int n = BATCHES * PER;
    printf("# trial logs: %d lines of %lld bytes of text on average: %lld bytes per line with the "
           "index (pg_total_relation_size); %.2f ms per %d-line batch, %.0f lines/s\n",
           n, text / n, total / n, secs * 1000 / BATCHES, PER, n / secs);
    assert_true(total / n < 1000);
    kd_store_close(s);
}

/* A task's row and its logs: a table of their own, the same queries, the same cap; a trial's
 * lines never mix with a task's. */
static void task_logs(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t eid = 0, tid = fx_trial(s, "beside", &eid), kid = 0, kid2 = 0;
    json_t *cfg = json_pack("{s:s}", "entrypoint", "python3 prep.py");
    struct kd_store_task t = {.uid = "task-uid-1",
                              .namespace_ = "default",
                              .name = "cmd-1",
                              .kind = "command",
                              .owner = "alice",
                              .config = cfg,
                              .state = "STARTING"};
    assert_int_equal(kd_store_task_upsert(s, &t, &kid, err), 0);
    assert_true(kid > 0);
    assert_int_equal(kd_store_task_upsert(s, &t, &kid2, err), 0);
    assert_int_equal(kid2, kid); /* by uid: the same row */
    int64_t found = 0;
    assert_int_equal(kd_store_task_id(s, "task-uid-1", &found, err), 0);
    assert_int_equal(found, kid);
    assert_int_equal(kd_store_task_id(s, "no-such-uid", &found, err), KD_ENOTFOUND);
    struct kd_store_task bad = t;
    bad.kind = "lab";
    bad.uid = "task-uid-2";
    assert_int_not_equal(kd_store_task_upsert(s, &bad, &kid2, err), 0); /* the kind is checked */
    struct kd_log_line ls[3];
    for (int i = 0; i < 3; i++)
        ls[i] = (struct kd_log_line){i == 2 ? -1 : 0, i == 1, 1767225600000 + i, TEXTS[i + 1],
                                     strlen(TEXTS[i + 1])};
    struct kd_log_batch b = {
        .run_id = "r1", .key = "n0-task-1", .lines = ls, .n = 3, .task_id = kid};
    struct kd_log_put_result res;
    assert_int_equal(kd_store_logs_put(s, &b, 0, &res, err), 0);
    assert_int_equal(res.stored, 3);
    assert_int_equal(kd_store_logs_put(s, &b, 0, &res, err), 0);
    assert_true(res.duplicate);
    /* a trial's batch with the same key is the trial's, not a duplicate */
    struct kd_log_batch tb = {tid, "r1", "n0-task-1", ls, 1, 0};
    assert_int_equal(kd_store_logs_put(s, &tb, 0, &res, err), 0);
    assert_false(res.duplicate);
    struct kd_log_query q = {.limit = 1000, .task_id = kid};
    json_t *got = query(s, &q);
    assert_int_equal(json_array_size(got), 3);
    assert_string_equal(line_at(got, 0), TEXTS[1]);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(got, 0), "task_id")), kid);
    assert_null(json_object_get(json_array_get(got, 0), "trial_id"));
    json_decref(got);
    q = (struct kd_log_query){.limit = 1, .tail = true, .task_id = kid};
    got = query(s, &q);
    assert_int_equal(json_array_size(got), 1);
    assert_string_equal(line_at(got, 0), TEXTS[3]);
    json_decref(got);
    q = (struct kd_log_query){.limit = 10, .regex = "^Zero", .task_id = kid};
    got = query(s, &q);
    assert_int_equal(json_array_size(got), 1);
    json_decref(got);
    q = (struct kd_log_query){.limit = 1000, .trial_id = tid};
    got = query(s, &q);
    assert_int_equal(json_array_size(got), 1); /* the trial's line only */
    json_decref(got);
    /* both ids in one batch, or neither: refused, naming the field */
    struct kd_log_batch both = b;
    both.trial_id = tid;
    assert_int_equal(kd_store_logs_put(s, &both, 0, &res, err), KD_EINVAL);
    assert_true(strstr(err, "task_id") != NULL);
    /* the task's cap and marker name the task */
    t.uid = "task-uid-3";
    t.name = "cmd-3";
    int64_t k3 = 0;
    assert_int_equal(kd_store_task_upsert(s, &t, &k3, err), 0);
    struct kd_log_batch capped = {.key = "k3", .lines = ls, .n = 3, .task_id = k3};
    assert_int_equal(kd_store_logs_put(s, &capped, 40, &res, err), 0);
    assert_true(res.capped);
    /* states: TERMINATED records the exit code, the reason and the end */
    assert_int_equal(kd_store_task_set_state(s, kid, "RUNNING", -1, NULL, err), 0);
    assert_int_equal(kd_store_task_set_state(s, kid, "TERMINATED", 3, "Failed", err), 0);
    json_t *row = NULL;
    assert_int_equal(kd_store_task_get(s, kid, &row, err), 0);
    assert_string_equal(json_string_value(json_object_get(row, "state")), "TERMINATED");
    assert_int_equal(json_integer_value(json_object_get(row, "exit_code")), 3);
    assert_string_equal(json_string_value(json_object_get(row, "end_reason")), "Failed");
    assert_string_equal(json_string_value(json_object_get(row, "owner")), "alice");
    assert_true(json_is_string(json_object_get(row, "ended_at")));
    json_decref(row);
    assert_int_equal(kd_store_task_set_state(s, 999999, "RUNNING", -1, NULL, err), KD_ENOTFOUND);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM task_logs WHERE line LIKE '%this task''s "
                               "logs reached the limit%'"),
                     1);
    PQfinish(c);
    json_decref(cfg);
    kd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(retain_table),
        cmocka_unit_test(round_trip),
        cmocka_unit_test(queries),
        cmocka_unit_test(cap_and_marker),
        cmocka_unit_test(bad_batches),
        cmocka_unit_test(follow_while_writing),
        cmocka_unit_test(delete_with_experiment),
        cmocka_unit_test(cost),
        cmocka_unit_test(task_logs),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
