/* Logging: logfmt shape, level filtering, quoting, secret redaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"

static int fds[2];

static char *drain(void)
{
    static char buf[16384];
    ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static int setup(void **state)
{
    (void)state;
    if (pipe(fds) < 0)
        return -1;
    kd_log_init("test", KD_LOG_INFO, fds[1]);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    close(fds[0]);
    close(fds[1]);
    kd_log_clear_secrets();
    return 0;
}

static void test_shape(void **state)
{
    (void)state;
    KD_INFO("trial created", "trial=%s slots=%d", "exp-1-3", 2);
    char *line = drain();
    assert_true(strncmp(line, "ts=", 3) == 0);
    assert_non_null(
        strstr(line, " level=info comp=test msg=\"trial created\" trial=exp-1-3 slots=2\n"));
    KD_WARN("plain");
    line = drain();
    assert_non_null(strstr(line, "level=warn comp=test msg=plain caller=test_log.c:"));
}

static void test_level_filter(void **state)
{
    (void)state;
    KD_DEBUG("hidden", "x=%d", 1);
    KD_ERROR("shown");
    char *line = drain();
    assert_null(strstr(line, "hidden"));
    assert_non_null(strstr(line, "msg=shown"));
    int lvl;
    assert_int_equal(kd_log_level_parse("WARNING", &lvl), 0);
    assert_int_equal(lvl, KD_LOG_WARN);
    assert_int_equal(kd_log_level_parse("loud", &lvl), KD_EINVAL);
}

static void test_quote(void **state)
{
    (void)state;
    assert_string_equal(kd_logq("simple"), "simple");
    assert_string_equal(kd_logq("two words"), "\"two words\"");
    assert_string_equal(kd_logq("a\"b\nc"), "\"a\\\"b\\nc\"");
    assert_string_equal(kd_logq(""), "\"\"");
    assert_string_equal(kd_logq(NULL), "null");
}

static void test_redaction(void **state)
{
    (void)state;
    kd_log_add_secret("s3cr3t-value-xyz");
    KD_INFO("connecting", "endpoint=%s token=%s secret_key=%s note=%s", "http://127.0.0.1:9000",
            "abc.def", kd_logq("has s3cr3t-value-xyz inside"), "ok");
    char *line = drain();
    assert_null(strstr(line, "abc.def"));
    assert_null(strstr(line, "s3cr3t-value-xyz"));
    assert_non_null(strstr(line, "token=[REDACTED]"));
    assert_non_null(strstr(line, "secret_key=[REDACTED]"));
    assert_non_null(strstr(line, "endpoint=http://127.0.0.1:9000"));
    assert_non_null(strstr(line, "note=ok"));

    char out[256];
    kd_redact("error: auth failed for key s3cr3t-value-xyz", out, sizeof(out));
    assert_string_equal(out, "error: auth failed for key [REDACTED]");
    kd_redact("Authorization=\"Bearer zzz\" x=1", out, sizeof(out));
    assert_string_equal(out, "Authorization=[REDACTED] x=1");
}

static void test_long_line_truncated(void **state)
{
    (void)state;
    char big[20000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    KD_INFO("big", "v=%s", big);
    char *line = drain();
    size_t n = strlen(line);
    assert_true(n <= 8192 + 1);
    assert_int_equal(line[n - 1], '\n');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_level_filter),
        cmocka_unit_test(test_quote),
        cmocka_unit_test(test_redaction),
        cmocka_unit_test(test_long_line_truncated),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
