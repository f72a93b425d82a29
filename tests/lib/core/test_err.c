/* Error codes: names, messages, errno pass-through, kd_seterr. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "core/err.h"

static void test_names_and_messages(void **state)
{
    (void)state;
    assert_string_equal(kd_err_name(KD_ENOTFOUND), "KD_ENOTFOUND");
    assert_string_equal(kd_err_name(KD_EGONE), "KD_EGONE");
    assert_string_equal(kd_err_name(0), "OK");
    assert_string_equal(kd_strerror(KD_ETOOBIG), "too large");
    assert_non_null(strstr(kd_strerror(KD_ECONFLICT), "re-read"));
}

static void test_errno_passthrough(void **state)
{
    (void)state;
    assert_string_equal(kd_err_name(-ENOENT), "ENOENT");
    assert_string_equal(kd_strerror(-ENOENT), "No such file or directory");
    assert_string_equal(kd_err_name(-99999), "UNKNOWN");
}

static void test_codes_are_distinct(void **state)
{
    (void)state;
    int codes[] = {
#define XX(name, value, msg) KD_##name,
        KD_ERRNO_MAP(XX)
#undef XX
    };
    size_t n = sizeof(codes) / sizeof(codes[0]);
    for (size_t i = 0; i < n; i++) {
        assert_true(codes[i] < -1000);
        for (size_t j = i + 1; j < n; j++)
            assert_int_not_equal(codes[i], codes[j]);
    }
}

static void test_seterr(void **state)
{
    (void)state;
    char err[KD_ERRLEN];
    assert_int_equal(kd_seterr(err, KD_EINVAL, "field %s: bad", "x.y"), KD_EINVAL);
    assert_string_equal(err, "field x.y: bad");
    assert_int_equal(kd_seterr(NULL, KD_EIO, "ignored"), KD_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_messages),
        cmocka_unit_test(test_errno_passthrough),
        cmocka_unit_test(test_codes_are_distinct),
        cmocka_unit_test(test_seterr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
