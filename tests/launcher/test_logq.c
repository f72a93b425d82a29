/* The log shipping queue: text made valid, long lines cut, batches, the drop policy, the body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "../../launcher/logq.h"

static void push(struct kd_logq *q, int rank, const char *s, int64_t mono)
{
    kd_logq_push(q, rank, KD_LOGQ_STDOUT, 1000 + mono, mono, s, strlen(s), "", 0);
}

/* What one pushed line becomes, as a table. */
static void test_text(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        size_t alen, blen; /* 0: strlen */
        const char *want;
    } cases[] = {
        {"hello", "", 0, 0, "hello"},
        {"hel", "lo", 0, 0, "hello"},
        {"crlf\r", "", 0, 0, "crlf"},
        {"cr", "lf\r", 0, 0, "crlf"},
        {"\r", "", 0, 0, ""},
        {"mid\rdle", "", 0, 0, "mid\rdle"},
        {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "", 0, 0,
         "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
        {"bad \xFF byte", "", 0, 0, "bad \xEF\xBF\xBD byte"},
        {"nul \0 here", "", 10, 0, "nul \xEF\xBF\xBD here"},
        {"overlong \xC0\xAF", "", 0, 0, "overlong \xEF\xBF\xBD\xEF\xBF\xBD"},
        {"surrogate \xED\xA0\x80", "", 0, 0, "surrogate \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"over3 \xE0\x80\xAF", "", 0, 0, "over3 \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"short \xE2\x82", "", 0, 0, "short \xEF\xBF\xBD\xEF\xBF\xBD"},
        {"big \xF5\x80\x80\x80", "", 0, 0, "big \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"split \xE2", "\x82\xAC", 0, 0, "split \xE2\x82\xAC"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_logq q;
        struct kd_logq_batch b = {0};
        kd_logq_init(&q, 0);
        size_t alen = cases[i].alen ? cases[i].alen : strlen(cases[i].a);
        size_t blen = cases[i].blen ? cases[i].blen : strlen(cases[i].b);
        kd_logq_push(&q, 0, KD_LOGQ_STDOUT, 1, 1, cases[i].a, alen, cases[i].b, blen);
        assert_int_equal(kd_logq_take(&q, &b), 1);
        if (strcmp(b.head->text, cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, b.head->text, cases[i].want);
        assert_int_equal(b.head->len, strlen(cases[i].want));
        kd_logq_batch_free(&b);
        kd_logq_free(&q);
    }
}

/* A line over the cap: cut between UTF-8 sequences, with the dropped bytes named. */
static void test_cut(void **state)
{
    (void)state;
    struct kd_logq q;
    struct kd_logq_batch b = {0};
    size_t n = KD_LOGQ_LINE_MAX + 100;
    char *s = malloc(n);
    memset(s, 'x', n);
    /* a 3-byte sequence straddling the cap */
    memcpy(s + KD_LOGQ_LINE_MAX - 1, "\xE2\x82\xAC", 3);
    kd_logq_init(&q, 0);
    kd_logq_push(&q, 2, KD_LOGQ_STDERR, 1, 1, s, n, "", 0);
    assert_int_equal(kd_logq_take(&q, &b), 1);
    char want[80];
    snprintf(want, sizeof(want), " [kdet-launch: line cut, %d bytes dropped]", 101);
    assert_int_equal(b.head->len, KD_LOGQ_LINE_MAX - 1 + strlen(want));
    assert_memory_equal(b.head->text + KD_LOGQ_LINE_MAX - 1, want, strlen(want));
    assert_int_equal(b.head->rank, 2);
    assert_int_equal(b.head->stream, KD_LOGQ_STDERR);
    /* exactly the cap: kept whole */
    kd_logq_batch_free(&b);
    kd_logq_push(&q, 0, 0, 1, 1, s, KD_LOGQ_LINE_MAX - 1, "", 0);
    assert_int_equal(kd_logq_take(&q, &b), 1);
    assert_int_equal(b.head->len, KD_LOGQ_LINE_MAX - 1);
    kd_logq_batch_free(&b);
    kd_logq_free(&q);
    free(s);
}

/* When a batch is due: by age, bytes, lines, or a flush. */
static void test_due(void **state)
{
    (void)state;
    struct kd_logq q;
    kd_logq_init(&q, 0);
    assert_false(kd_logq_due(&q, 0, false));
    assert_false(kd_logq_due(&q, 0, true));
    push(&q, 0, "one", 100);
    assert_false(kd_logq_due(&q, 100, false));
    assert_false(kd_logq_due(&q, 100 + KD_LOGQ_BATCH_MS - 1, false));
    assert_true(kd_logq_due(&q, 100 + KD_LOGQ_BATCH_MS, false));
    assert_true(kd_logq_due(&q, 100, true));
    kd_logq_free(&q);

    /* a full batch of bytes is due at once */
    kd_logq_init(&q, 0);
    char big[1025];
    memset(big, 'b', 1024);
    big[1024] = '\0';
    for (int i = 0; i < KD_LOGQ_BATCH_BYTES / 1024 - 1; i++)
        push(&q, 0, big, 5);
    assert_false(kd_logq_due(&q, 5, false));
    push(&q, 0, big, 5);
    assert_true(kd_logq_due(&q, 5, false));
    kd_logq_free(&q);

    /* so is a full batch of lines */
    kd_logq_init(&q, 0);
    for (int i = 0; i < KD_LOGQ_BATCH_LINES - 1; i++)
        push(&q, 0, "l", 5);
    assert_false(kd_logq_due(&q, 5, false));
    push(&q, 0, "l", 5);
    assert_true(kd_logq_due(&q, 5, false));
    kd_logq_free(&q);
}

/* Batches stop at the byte and line caps, in order, at least one line each. */
static void test_batches(void **state)
{
    (void)state;
    struct kd_logq q;
    struct kd_logq_batch b = {0};
    char big[20001];
    memset(big, 'z', 20000);
    big[20000] = '\0';
    kd_logq_init(&q, 0);
    for (int i = 0; i < 5; i++)
        push(&q, i, big, 1); /* 16384 + marker each: 3 fit in 64 KiB */
    assert_int_equal(kd_logq_take(&q, &b), 3);
    assert_true(b.bytes <= KD_LOGQ_BATCH_BYTES);
    assert_int_equal(b.head->rank, 0);
    assert_int_equal(b.head->next->next->rank, 2);
    assert_int_equal(kd_logq_take(&q, &b), 2);
    assert_int_equal(b.head->rank, 3);
    assert_int_equal(kd_logq_take(&q, &b), 0);
    assert_null(b.head);
    for (int i = 0; i < KD_LOGQ_BATCH_LINES + 10; i++)
        push(&q, 0, "l", 1);
    assert_int_equal(kd_logq_take(&q, &b), KD_LOGQ_BATCH_LINES);
    assert_int_equal(kd_logq_take(&q, &b), 10);
    assert_int_equal(q.nlines, 0);
    assert_int_equal(q.bytes, 0);
    kd_logq_batch_free(&b);
    kd_logq_free(&q);
}

/* A full queue drops its oldest lines; the next batch starts with one marker naming how many. */
static void test_drop_oldest(void **state)
{
    (void)state;
    struct kd_logq q;
    struct kd_logq_batch b = {0};
    /* room for 10 lines of 6 bytes */
    kd_logq_init(&q, 10 * (6 + KD_LOGQ_OVERHEAD));
    char line[16];
    for (int i = 0; i < 25; i++) {
        snprintf(line, sizeof(line), "line%02d", i);
        push(&q, i % 2, line, i);
    }
    assert_int_equal(q.nlines, 10);
    assert_int_equal(q.dropped, 15);
    assert_int_equal(q.dropped_total, 15);
    assert_true(kd_logq_due(&q, 0, true));
    assert_int_equal(kd_logq_take(&q, &b), 11);
    assert_int_equal(b.head->rank, KD_LOGQ_RANK_LAUNCHER);
    assert_string_equal(b.head->text, "kdet-launch: 15 lines dropped: the log queue was full");
    assert_int_equal(b.head->ts_ms, 1000 + 14); /* the last dropped line's time */
    assert_string_equal(b.head->next->text, "line15");
    assert_int_equal(q.dropped, 0);
    /* one more drop: one marker, singular */
    kd_logq_batch_free(&b);
    for (int i = 0; i < 11; i++)
        push(&q, 0, "line99", 50);
    assert_int_equal(kd_logq_take(&q, &b), 11);
    assert_string_equal(b.head->text, "kdet-launch: 1 line dropped: the log queue was full");
    kd_logq_batch_free(&b);
    /* a marker alone is still shipped at a flush */
    for (int i = 0; i < 11; i++)
        push(&q, 0, "line98", 60);
    assert_int_equal(kd_logq_take(&q, &b), 11);
    kd_logq_batch_free(&b);
    assert_int_equal(q.dropped_total, 17);
    kd_logq_free(&q);

    /* one line larger than the bound stays (the newest is never dropped) */
    kd_logq_init(&q, 100);
    push(&q, 0, "a", 1);
    char big[300];
    memset(big, 'q', 299);
    big[299] = '\0';
    push(&q, 0, big, 2);
    assert_int_equal(q.nlines, 1);
    assert_int_equal(q.dropped, 1);
    kd_logq_free(&q);
}

/* The POST body parses back to what was queued. */
static void test_json(void **state)
{
    (void)state;
    struct kd_logq q;
    struct kd_logq_batch b = {0};
    kd_logq_init(&q, 0);
    kd_logq_push(&q, 3, KD_LOGQ_STDERR, 1767225600123, 1, "Traceback \"x\"\t\\",
                 strlen("Traceback \"x\"\t\\"), "", 0);
    push(&q, 0, "caf\xC3\xA9", 2);
    kd_logq_take(&q, &b);
    char *s = kd_logq_batch_json(&b, "n0-00ff-1", "run7", 2);
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "key")), "n0-00ff-1");
    assert_string_equal(json_string_value(json_object_get(j, "run_id")), "run7");
    assert_int_equal(json_integer_value(json_object_get(j, "node_rank")), 2);
    json_t *lines = json_object_get(j, "lines");
    assert_int_equal(json_array_size(lines), 2);
    json_t *l0 = json_array_get(lines, 0);
    assert_int_equal(json_integer_value(json_object_get(l0, "rank")), 3);
    assert_string_equal(json_string_value(json_object_get(l0, "stream")), "stderr");
    assert_string_equal(json_string_value(json_object_get(l0, "timestamp")),
                        "2026-01-01T00:00:00.123Z");
    assert_string_equal(json_string_value(json_object_get(l0, "line")), "Traceback \"x\"\t\\");
    assert_string_equal(json_string_value(json_object_get(json_array_get(lines, 1), "line")),
                        "caf\xC3\xA9");
    json_decref(j);
    free(s);
    kd_logq_batch_free(&b);
    kd_logq_free(&q);
}

static void test_backoff(void **state)
{
    (void)state;
    static const int64_t want[] = {250, 250, 500, 1000, 2000, 4000, 8000, 8000, 8000};
    for (int i = 0; i < 9; i++)
        assert_int_equal(kd_logq_backoff_ms(i), want[i]);
    assert_int_equal(kd_logq_backoff_ms(1000), 8000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_due),         cmocka_unit_test(test_batches),
        cmocka_unit_test(test_drop_oldest), cmocka_unit_test(test_json),
        cmocka_unit_test(test_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
