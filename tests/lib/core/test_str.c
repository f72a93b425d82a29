/* Strict parsing, sizes and suggestions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/str.h"

static void test_parse_numbers(void **state)
{
    (void)state;
    int64_t v;
    int i;
    double d;
    assert_int_equal(kd_parse_i64("-42", &v), 0);
    assert_int_equal(v, -42);
    assert_int_equal(kd_parse_i64("42x", &v), KD_EINVAL);
    assert_int_equal(kd_parse_i64("", &v), KD_EINVAL);
    assert_int_equal(kd_parse_i64("99999999999999999999", &v), KD_EINVAL);
    assert_int_equal(kd_parse_int("2147483648", &i), KD_EINVAL);
    assert_int_equal(kd_parse_int("7", &i), 0);
    assert_int_equal(i, 7);
    assert_int_equal(kd_parse_double("1e-3", &d), 0);
    assert_true(d > 0.00099 && d < 0.00101);
    assert_int_equal(kd_parse_double("nan", &d), KD_EINVAL);
    uint64_t u;
    assert_int_equal(kd_parse_u64("-1", &u), KD_EINVAL);
}

static void test_parse_size(void **state)
{
    (void)state;
    uint64_t s;
    assert_int_equal(kd_parse_size("95MiB", &s), 0);
    assert_int_equal(s, 95ULL << 20);
    assert_int_equal(kd_parse_size("1G", &s), 0);
    assert_int_equal(s, 1ULL << 30);
    assert_int_equal(kd_parse_size("4096", &s), 0);
    assert_int_equal(s, 4096);
    assert_int_equal(kd_parse_size("4 MB", &s), KD_EINVAL);
    assert_int_equal(kd_parse_size("12X", &s), KD_EINVAL);
}

static void test_suggest(void **state)
{
    (void)state;
    const char *const keys[] = {"max_trials", "max_length", "metric", "smaller_is_better", NULL};
    assert_string_equal(kd_suggest("max_trails", keys), "max_trials");
    assert_string_equal(kd_suggest("metrc", keys), "metric");
    assert_null(kd_suggest("completely_else", keys));
    assert_int_equal(kd_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(kd_edit_distance("", "abc"), 3);
}

/* kd_utf8_cut: never inside a sequence; 0 for one incomplete sequence. */
static void test_utf8_cut(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t n, want;
    } rows[] = {
        {"abc", 3, 3},                  /* ASCII: anywhere */
        {"ab\xc3\xa9", 4, 4},           /* a whole 2-byte sequence at the end */
        {"ab\xc3\xa9", 3, 2},           /* its lead only: cut before it */
        {"a\xe2\x82\xac", 3, 1},        /* 2 of 3 bytes of the euro sign */
        {"a\xe2\x82\xac", 4, 4},        /* all of it */
        {"\xf0\x9f\x98\x80x", 3, 0},    /* 3 of a 4-byte sequence: nothing fits */
        {"\xf0\x9f\x98\x80x", 4, 4},    /* the whole emoji */
        {"\x80\x80\x80\x80\x80", 5, 5}, /* continuation bytes only: cut anywhere */
        {"", 0, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t got = kd_utf8_cut((const unsigned char *)rows[i].s, rows[i].n);
        if (got != rows[i].want)
            fail_msg("row %zu: kd_utf8_cut(n=%zu) = %zu, want %zu", i, rows[i].n, got,
                     rows[i].want);
    }
}

static void test_prefix_suffix_strlcpy(void **state)
{
    (void)state;
    char b[5];
    assert_true(kd_str_has_prefix("kdet.io/x", "kdet.io/"));
    assert_false(kd_str_has_suffix("a.pyc", ".py"));
    assert_int_equal(kd_strlcpy(b, "abcdefgh", sizeof(b)), 8);
    assert_string_equal(b, "abcd");
}

/* Request text made valid UTF-8 for JSON: each stray byte becomes '?', whole sequences stay. */
static void test_utf8_scrub(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain", "plain"},
        {"", ""},
        {"caf\xc3\xa9", "caf\xc3\xa9"},           /* é */
        {"\xe2\x82\xac 1", "\xe2\x82\xac 1"},     /* € */
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"}, /* U+1F600 */
        {"tr\xcd\xcd\xcdue", "tr???ue"},          /* lead bytes without continuations */
        {"\x80x", "?x"},                          /* a stray continuation */
        {"\xc0\xaf", "??"},                       /* overlong / */
        {"\xe0\x80\xaf", "???"},                  /* overlong, 3 bytes */
        {"\xed\xa0\x80", "???"},                  /* a surrogate */
        {"\xf4\x90\x80\x80", "????"},             /* past U+10FFFF */
        {"\xff\xfe", "??"},
        {"ab\xe2\x82", "ab??"}, /* cut short */
    };
    char out[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_utf8_scrub(cases[i].in, out, sizeof(out));
        if (strcmp(out, cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, out, cases[i].want);
    }
    /* a small buffer: cut before a whole sequence, never inside one */
    char small[5];
    assert_string_equal(kd_utf8_scrub("ab\xe2\x82\xac", small, sizeof(small)), "ab");
    assert_string_equal(kd_utf8_scrub("abcdef", small, sizeof(small)), "abcd");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_numbers), cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_suggest),       cmocka_unit_test(test_utf8_cut),
        cmocka_unit_test(test_utf8_scrub),    cmocka_unit_test(test_prefix_suffix_strlcpy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
