/* det's side of stored trial logs, on the functions themselves: how a stored line is printed,
 * and the server-sent-event parser (events split anywhere, comments, CRLF, multi-line data,
 * ids for Last-Event-ID). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../cli/cli.h"
#include "core/str.h"

/* det_err and det_usage_suggest live in cli/main.c. */
void det_err(const char *fmt, ...)
{
    (void)fmt;
}

void det_usage_suggest(const char *what, const char *word, const char *const *cands,
                       const char *help_cmd)
{
    (void)what;
    (void)word;
    (void)cands;
    (void)help_cmd;
}

static void test_format(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int with_trial;
        const char *want;
    } cases[] = {
        {"{\"rank\":0,\"line\":\"hello\",\"trial\":\"t-1\"}", 0, "[rank=0] hello\n"},
        {"{\"rank\":3,\"line\":\"\",\"trial\":\"t-1\"}", 0, "[rank=3] \n"},
        {"{\"rank\":1,\"line\":\"x\",\"trial\":\"t-1\"}", 1, "[t-1] [rank=1] x\n"},
        {"{\"rank\":-1,\"line\":\"kdet-launch: 5 lines dropped\"}", 0,
         "kdet-launch: 5 lines dropped\n"},
        {"{\"rank\":-1,\"line\":\"note\",\"trial\":\"t-2\"}", 1, "[t-2] note\n"},
        {"{\"rank\":2,\"line\":\"no name\"}", 1, "[rank=2] no name\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_buf b = KD_BUF_INIT(4096);
        json_t *j = json_loads(cases[i].json, 0, NULL);
        assert_non_null(j);
        assert_int_equal(det_logs_format(j, cases[i].with_trial, &b), 0);
        if (strcmp(kd_buf_str(&b), cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, kd_buf_str(&b), cases[i].want);
        kd_buf_free(&b);
        json_decref(j);
    }
}

static char events[4096];

static int collect(const char *event, const char *data, void *ud)
{
    (void)ud;
    size_t n = strlen(events);
    snprintf(events + n, sizeof(events) - n, "<%s|%s>", event, data);
    return 0;
}

static void test_sse(void **state)
{
    (void)state;
    static const char stream[] = "retry: 2000\n: connected\n\n"
                                 "id: 7\nevent: logs\ndata: {\"logs\":[1]}\n\n"
                                 ": keepalive\n\n"
                                 "id: 9\r\nevent: logs\r\ndata: a\r\ndata: b\r\n\r\n"
                                 "data:no-space\n\n"
                                 "event: end\ndata: {\"state\":\"ERROR\"}\n\n"
                                 "event: partial\ndata: never";
    static const char want[] =
        "<logs|{\"logs\":[1]}><logs|a\nb><message|no-space><end|{\"state\":\"ERROR\"}>";
    /* whole, then byte by byte, then in chunks of 7: the same events */
    size_t steps[] = {sizeof(stream) - 1, 1, 7};
    for (size_t k = 0; k < 3; k++) {
        struct det_sse s;
        events[0] = '\0';
        det_sse_init(&s, collect, NULL);
        for (size_t i = 0; i < sizeof(stream) - 1; i += steps[k]) {
            size_t n = sizeof(stream) - 1 - i < steps[k] ? sizeof(stream) - 1 - i : steps[k];
            assert_int_equal(det_sse_feed(&s, stream + i, n), 0);
        }
        if (strcmp(events, want) != 0)
            fail_msg("step %zu: got %s", steps[k], events);
        assert_int_equal(s.last_id, 9);
        det_sse_free(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_sse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
