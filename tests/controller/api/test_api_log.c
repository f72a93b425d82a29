/*
 * The access log: one logfmt line per request with method, path, status
 * and latency, and never a token, whether it came in the Authorization
 * header (trial or user token, right or wrong) or in a query string.
 * stderr (where the log goes) is redirected to a file for the whole run.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fx.h"

static char logpath[] = "/tmp/kd-api-log-XXXXXX";
static int saved_stderr = -1;

static void test_access_log(void **state)
{
    (void)state;
    char uid[64], tok[64];
    fx_experiment("l-exp", "validation_loss");
    fx_trial("l-exp", "l-exp-1", 100, uid, sizeof(uid));
    fx_token("l-exp-1", uid, tok, sizeof(tok));
    assert_int_equal(fx_http("POST", "/api/v1/namespaces/default/trials/l-exp-1/metrics", tok,
                             "{\"kind\":\"training\",\"key\":\"k\",\"rows\":[{\"batches\":1,"
                             "\"metrics\":{\"loss\":1}}]}",
                             NULL),
                     200);
    assert_int_equal(
        fx_http("GET", "/api/v1/namespaces/default/trials/l-exp-1/metrics", tok, NULL, NULL),
        401); /* a trial token on a user endpoint */
    assert_int_equal(fx_http("GET",
                             "/api/v1/namespaces/default/experiments?token=query-secret-value",
                             FX_USER_TOKEN, NULL, NULL),
                     200);
    assert_int_equal(fx_http("GET", "/api/v1/namespaces/default/experiments",
                             "wrong-user-token-value", NULL, NULL),
                     401);
    fflush(stderr);
    dup2(saved_stderr, 2); /* from here on, failures are shown as usual */
    FILE *f = fopen(logpath, "r");
    assert_non_null(f);
    char line[8192];
    int requests = 0;
    bool saw_latency = false, saw_401 = false;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, tok) || strstr(line, FX_USER_TOKEN) ||
            strstr(line, "query-secret-value") || strstr(line, "wrong-user-token-value"))
            fail_msg("a token reached the log: %s", line);
        if (strstr(line, "msg=\"http request\"") == NULL)
            continue;
        requests++;
        if (strstr(line, "latency_ms=") && strstr(line, "method=POST") &&
            strstr(line, "path=/api/v1/namespaces/default/trials/l-exp-1/metrics") &&
            strstr(line, "status=200"))
            saw_latency = true;
        if (strstr(line, "status=401"))
            saw_401 = true;
    }
    fclose(f);
    assert_true(requests >= 4);
    assert_true(saw_latency);
    assert_true(saw_401);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_access_log),
    };
    int fd = mkstemp(logpath);
    saved_stderr = dup(2);
    if (fd < 0 || saved_stderr < 0 || dup2(fd, 2) < 0)
        return 1;
    close(fd);
    setenv("KDET_LOG_LEVEL", "info", 1);
    int rc = cmocka_run_group_tests(tests, fx_setup, fx_teardown);
    unlink(logpath);
    close(saved_stderr);
    return rc;
}
