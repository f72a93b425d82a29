/*
 * The metrics writer's COPY path: the COPY text encoding and the batching
 * policy as tables (pure), and one group of batches written in one
 * transaction where a refused request, a duplicate key, a batch of a
 * trial that does not exist and rows needing escapes do not disturb the
 * others, against a real private PostgreSQL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fx.h"
#include "store/store_int.h"

static void escape_table(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"", ""},
        {"plain", "plain"},
        {"a\\b", "a\\\\b"},
        {"tab\there", "tab\\there"},
        {"line\nbreak\r", "line\\nbreak\\r"},
        {"\\\\", "\\\\\\\\"},
        {"{\"k\":\"x\\ny\"}", "{\"k\":\"x\\\\ny\"}"},
        {"\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_buf b = KD_BUF_INIT(1024);
        assert_int_equal(kd_copy__escape(&b, cases[i].in, strlen(cases[i].in)), 0);
        assert_string_equal(kd_buf_str(&b), cases[i].want);
        kd_buf_free(&b);
    }
}

static void time_table(void **state)
{
    (void)state;
    static const struct {
        int64_t ms;
        const char *want;
    } cases[] = {
        {0, "1970-01-01 00:00:00.000+00"},
        {1, "1970-01-01 00:00:00.001+00"},
        {1795738800123, "2026-11-27 00:20:00.123+00"},
        {951782400999, "2000-02-29 00:00:00.999+00"},
    };
    char out[48];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(kd_copy__time(cases[i].ms, out, sizeof(out)), 0);
        assert_string_equal(out, cases[i].want);
    }
    assert_int_equal(kd_copy__time(-1, out, sizeof(out)), KD_EINVAL);
    assert_int_equal(kd_copy__time(0, out, 10), KD_ETOOBIG);
}

static void encode_batch(void **state)
{
    (void)state;
    json_t *m = json_pack("{ss}", "x", "t\tq");
    struct kd_metric_row rows[2] = {{.step = 3, .reported_ms = 1000, .metrics = m},
                                    {.step = 4, .reported_ms = 0, .metrics = m}};
    struct kd_metric_batch b = {7, KD_METRIC_VALIDATION, "a\"b\\c", rows, 2};
    struct kd_buf copy = KD_BUF_INIT(4096), line = KD_BUF_INIT(4096);
    assert_int_equal(kd_copy__encode(&b, 2000, &copy, &line), 0);
    assert_string_equal(kd_buf_str(&line),
                        "{\"n\":2,\"t\":7,\"k\":\"validation\",\"key\":\"a\\\"b\\\\c\","
                        "\"r\":[[3,1000,{\"x\":\"t\\tq\"}],[4,2000,{\"x\":\"t\\tq\"}]]}\n");
    assert_string_equal(kd_buf_str(&copy),
                        "7\tvalidation\t3\t{\"x\":\"t\\\\tq\"}\t1970-01-01 00:00:01.000+00\t"
                        "a\"b\\\\c\n"
                        "7\tvalidation\t4\t{\"x\":\"t\\\\tq\"}\t1970-01-01 00:00:02.000+00\t"
                        "a\"b\\\\c\n");
    /* The spool line is JSON whose key reads back as sent. */
    json_t *o = json_loads(kd_buf_str(&line), 0, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "key")), "a\"b\\c");
    json_decref(o);
    /* A full buffer is reported, not overrun. */
    struct kd_buf small = KD_BUF_INIT(16);
    kd_buf_free(&line);
    assert_int_equal(kd_copy__encode(&b, 2000, &copy, &small), KD_ETOOBIG);
    kd_buf_free(&small);
    kd_buf_free(&copy);
    json_decref(m);
}

static void take_table(void **state)
{
    (void)state;
    static const struct {
        size_t taken, rows, bytes, item_rows, item_bytes, flush_rows, max_bytes;
        bool solo;
        int want;
    } cases[] = {
        {0, 0, 0, 10000, 1u << 30, 100, 1024, false, 1}, /* the first always goes */
        {0, 0, 0, 1, 1, 100, 1024, true, 1},             /* also when solo */
        {1, 1, 1, 1, 1, 100, 1024, true, 0},             /* solo: one by one */
        {3, 90, 100, 10, 10, 100, 1024, false, 1},       /* exactly flush_rows */
        {3, 91, 100, 10, 10, 100, 1024, false, 0},       /* one row over */
        {3, 10, 1000, 10, 24, 100, 1024, false, 1},      /* exactly max_bytes */
        {3, 10, 1000, 10, 25, 100, 1024, false, 0},      /* one byte over */
        {99, 99, 99, 1, 1, 5000, 1u << 24, false, 1},    /* many small ones share a write */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(kd_writer__take(cases[i].taken, cases[i].rows, cases[i].bytes,
                                         cases[i].item_rows, cases[i].item_bytes,
                                         cases[i].flush_rows, cases[i].max_bytes, cases[i].solo),
                         cases[i].want);
}

static long long count_where(PGconn *c, const char *fmt, long long v)
{
    char q[256];
    snprintf(q, sizeof(q), fmt, v);
    return fx_int(c, q);
}

static void one_group(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t t1 = fx_trial(s, "g1", NULL), t2 = fx_trial(s, "g2", NULL);
    json_t *m = json_pack("{sfss}", "loss", 0.25, "tag", "tab\there\nnew \\ \"q\" \xc3\xa9");
    json_t *bad = json_pack("{ss#}", "tag", "a\0b", (size_t)3);
    struct kd_metric_row rows[2] = {{.step = 1, .reported_ms = 0, .metrics = m},
                                    {.step = 2, .reported_ms = 1795738800123, .metrics = m}};
    struct kd_metric_row brows[1] = {{.step = 3, .reported_ms = 0, .metrics = bad}};
    struct kd_metric_batch b1 = {t1, KD_METRIC_TRAINING, "k\\1", rows, 2};
    struct kd_metric_batch b2 = {t2, KD_METRIC_VALIDATION, "k\\1", rows, 2};
    struct kd_metric_batch orphan = {t2 + 1000, KD_METRIC_TRAINING, "o", rows, 2};
    struct kd_metric_batch refused = {t1, KD_METRIC_TRAINING, "bad", brows, 1};
    /* Queued without waiting, so they are written together. */
    assert_int_equal(kd_store_metrics_put(s, &b1, 0, err), 0);
    assert_int_equal(kd_store_metrics_put(s, &refused, 0, err), KD_EINVAL);
    assert_non_null(strstr(err, "rows[0].metrics.tag"));
    assert_int_equal(kd_store_metrics_put(s, &orphan, 0, err), 0);
    assert_int_equal(kd_store_metrics_put(s, &b1, 0, err), 0); /* a duplicate in the group */
    assert_int_equal(kd_store_metrics_put(s, &b2, 10000, err), 0);
    assert_int_equal(kd_store_metrics_flush(s, 10000), 0);
    PGconn *c = fx_conn(ci);
    assert_int_equal(count_where(c, "SELECT count(*) FROM metrics WHERE trial_id = %lld", t1), 2);
    assert_int_equal(count_where(c, "SELECT count(*) FROM metrics WHERE trial_id = %lld", t2), 2);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metrics"), 4);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metric_batches"), 2);
    /* What was sent is what is stored: escapes, key, kind, step order and time. */
    assert_int_equal(
        count_where(c,
                    "SELECT count(*) FROM metrics WHERE trial_id = %lld AND kind = 'training'"
                    " AND batch_key = E'k\\\\1' AND metrics->>'tag' = E'tab\\there\\nnew \\\\"
                    " \"q\" \xc3\xa9' AND (metrics->>'loss')::float8 = 0.25",
                    t1),
        2);
    assert_int_equal(count_where(c,
                                 "SELECT count(*) FROM metrics WHERE trial_id = %lld AND step = 2"
                                 " AND reported_at = to_timestamp(1795738800.123)",
                                 t2),
                     1);
    assert_int_equal(count_where(c,
                                 "SELECT count(*) FROM (SELECT step, lag(step) OVER (ORDER BY id)"
                                 " p FROM metrics WHERE trial_id = %lld) x WHERE p > step",
                                 t1),
                     0);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    assert_int_equal(st.written_batches, 2);
    assert_int_equal(st.duplicate_batches, 1);
    assert_int_equal(st.orphan_batches, 1);
    assert_int_equal(st.rejected_batches, 0);
    PQfinish(c);
    json_decref(m);
    json_decref(bad);
    kd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escape_table), cmocka_unit_test(time_table),
        cmocka_unit_test(encode_batch), cmocka_unit_test(take_table),
        cmocka_unit_test(one_group),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
