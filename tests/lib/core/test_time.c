/* RFC 3339 formatting and parsing; clocks move forward; deadlines for timed waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "core/time.h"

static void test_format(void **state)
{
    (void)state;
    char b[40];
    assert_string_equal(kd_time_rfc3339(0, 0, b, sizeof(b)), "1970-01-01T00:00:00Z");
    assert_string_equal(kd_time_rfc3339(1795282200123LL, 1, b, sizeof(b)),
                        "2026-11-21T17:30:00.123Z");
}

static void test_parse_roundtrip(void **state)
{
    (void)state;
    int64_t ms;
    assert_int_equal(kd_time_parse_rfc3339("2026-11-21T17:30:00.123Z", &ms), 0);
    assert_int_equal(ms, 1795282200123LL);
    assert_int_equal(kd_time_parse_rfc3339("2026-11-21T18:30:00+01:00", &ms), 0);
    assert_int_equal(ms, 1795282200000LL);
    assert_int_equal(kd_time_parse_rfc3339("2026-11-21 17:30:00", &ms), KD_EPARSE);
    assert_int_equal(kd_time_parse_rfc3339("2026-11-21T17:30:00Zjunk", &ms), KD_EPARSE);
}

static void test_monotonic(void **state)
{
    (void)state;
    int64_t a = kd_mono_ms();
    kd_sleep_ms(20);
    int64_t b = kd_mono_ms();
    assert_true(b - a >= 19);
}

/* A deadline is normalised (nanoseconds below a second) and lies ms ahead on its clock. */
static void test_deadline(void **state)
{
    (void)state;
    const int64_t cases[] = {0, 1, 999, 1000, 1999, 61001};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct timespec now, dl;
        clock_gettime(CLOCK_MONOTONIC, &now);
        assert_ptr_equal(kd_deadline_ts(CLOCK_MONOTONIC, cases[i], &dl), &dl);
        assert_true(dl.tv_nsec >= 0 && dl.tv_nsec < 1000000000L);
        int64_t ahead =
            ((int64_t)dl.tv_sec - now.tv_sec) * 1000 + (dl.tv_nsec - now.tv_nsec) / 1000000;
        assert_true(ahead >= cases[i] && ahead <= cases[i] + 50);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_parse_roundtrip),
        cmocka_unit_test(test_monotonic),
        cmocka_unit_test(test_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
