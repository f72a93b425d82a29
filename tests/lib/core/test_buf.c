/* Bounded buffers: growth, the hard cap, steal and consume. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"

static void test_append_and_cap(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(10);
    assert_string_equal(kd_buf_str(&b), "");
    assert_int_equal(kd_buf_puts(&b, "hello"), 0);
    assert_int_equal(kd_buf_printf(&b, "%d", 1234), 0);
    assert_string_equal(kd_buf_str(&b), "hello1234");
    assert_int_equal(kd_buf_puts(&b, "ab"), KD_ETOOBIG);
    assert_string_equal(kd_buf_str(&b), "hello1234"); /* unchanged */
    assert_int_equal(kd_buf_putc(&b, '!'), 0);
    assert_int_equal(b.len, 10);
    assert_int_equal(kd_buf_putc(&b, '!'), KD_ETOOBIG);
    kd_buf_free(&b);
    kd_buf_free(NULL);
}

static void test_large_printf(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(kd_buf_printf(&b, "<%s>", big), 0);
    assert_int_equal(b.len, 5001);
    assert_int_equal(b.data[0], '<');
    assert_int_equal(b.data[5000], '>');
    assert_int_equal(b.data[5001], '\0');
    kd_buf_free(&b);
}

/* SIZE_MAX as the cap means none: the allocation must not be cut to max + 1, which wraps. */
static void test_uncapped(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(SIZE_MAX);
    char chunk[1000];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 100; i++)
        assert_int_equal(kd_buf_append(&b, chunk, sizeof(chunk)), 0);
    assert_int_equal(b.len, 100000);
    assert_true(b.cap > b.len);
    assert_int_equal(b.data[99999], 'x');
    kd_buf_free(&b);
}

static void test_consume_and_steal(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(100);
    assert_int_equal(kd_buf_puts(&b, "line1\nline2\n"), 0);
    kd_buf_consume(&b, 6);
    assert_string_equal(kd_buf_str(&b), "line2\n");
    char *s = kd_buf_steal(&b);
    assert_string_equal(s, "line2\n");
    assert_int_equal(b.len, 0);
    assert_null(b.data);
    free(s);
    s = kd_buf_steal(&b);
    assert_string_equal(s, "");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_cap),
        cmocka_unit_test(test_large_printf),
        cmocka_unit_test(test_consume_and_steal),
        cmocka_unit_test(test_uncapped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
