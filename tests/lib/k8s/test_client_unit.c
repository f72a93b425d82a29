/*
 * Client internals that need no server: which failures are retried for
 * which verbs, Retry-After header parsing, curl error mapping, and option
 * checks of client creation.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "../../../lib/k8s/client.c"

static void test_retry_policy(void **state)
{
    (void)state;
    static const struct {
        const char *method;
        int rc, http;
        CURLcode cc;
        int want;
    } cases[] = {
        {"GET", KD_EAGAIN, 503, CURLE_OK, 1},
        {"GET", KD_EAGAIN, 500, CURLE_OK, 1},
        {"GET", KD_ENOTSUP, 501, CURLE_OK, 0},
        {"GET", KD_EAGAIN, 429, CURLE_OK, 1},
        {"GET", KD_ENOTFOUND, 404, CURLE_OK, 0},
        {"GET", KD_ECONFLICT, 409, CURLE_OK, 0},
        {"GET", KD_ECONNECT, 0, CURLE_RECV_ERROR, 1},
        {"GET", KD_ETIMEDOUT, 0, CURLE_OPERATION_TIMEDOUT, 1},
        {"PUT", KD_EAGAIN, 503, CURLE_OK, 1},
        {"DELETE", KD_ECONNECT, 0, CURLE_GOT_NOTHING, 1},
        {"POST", KD_EAGAIN, 503, CURLE_OK, 0}, /* may have been processed */
        {"POST", KD_EAGAIN, 429, CURLE_OK, 1}, /* was not processed */
        {"POST", KD_ECONNECT, 0, CURLE_RECV_ERROR, 0},
        {"POST", KD_ECONNECT, 0, CURLE_COULDNT_CONNECT, 1}, /* nothing was sent */
        {"PATCH", KD_ETIMEDOUT, 0, CURLE_OPERATION_TIMEDOUT, 0},
        {"PATCH", KD_EAGAIN, 429, CURLE_OK, 1},
        {"PATCH", KD_EINVALID, 422, CURLE_OK, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = retryable(cases[i].method, cases[i].rc, cases[i].http, cases[i].cc);
        if (got != cases[i].want)
            fail_msg("%s HTTP %d curl %d: retry %d, want %d", cases[i].method, cases[i].http,
                     (int)cases[i].cc, got, cases[i].want);
    }
}

static void test_retry_after_header(void **state)
{
    (void)state;
    struct xfer x = {KD_BUF_INIT(64), 0, false};
    char h1[] = "Content-Type: application/json\r\n";
    char h2[] = "retry-after:  7\r\n";
    char h3[] = "Retry-After: Wed, 21 Oct 2026 07:28:00 GMT\r\n";
    assert_int_equal(on_header(h1, 1, strlen(h1), &x), strlen(h1));
    assert_int_equal(x.retry_after_s, 0);
    assert_int_equal(on_header(h2, 1, strlen(h2), &x), strlen(h2));
    assert_int_equal(x.retry_after_s, 7);
    x.retry_after_s = 0;
    assert_int_equal(on_header(h3, 1, strlen(h3), &x), strlen(h3));
    assert_int_equal(x.retry_after_s, 0); /* HTTP dates are ignored: the backoff applies */
}

static void test_curl_errors(void **state)
{
    (void)state;
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN];
    assert_int_equal(
        kd_k8s__curl_err(CURLE_COULDNT_CONNECT, "GET", "/api/v1/pods", "refused", &st, err),
        KD_ECONNECT);
    assert_string_equal(err, "GET /api/v1/pods: Couldn't connect to server: refused");
    assert_int_equal(st.http, 0);
    assert_int_equal(kd_k8s__curl_err(CURLE_OPERATION_TIMEDOUT, "GET", "/x", NULL, NULL, err),
                     KD_ETIMEDOUT);
    assert_int_equal(kd_k8s__curl_err(CURLE_PEER_FAILED_VERIFICATION, "GET", "/x", "", NULL, err),
                     KD_EUNAUTHORIZED);
    assert_int_equal(kd_k8s__curl_err(CURLE_ABORTED_BY_CALLBACK, "GET", "/x", "", NULL, err),
                     KD_ECANCELED);
}

static void test_client_new_checks(void **state)
{
    (void)state;
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_client *c = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(kd_k8s_client_new(&cfg, NULL, &c, err), KD_EINVAL);
    assert_non_null(strstr(err, "server"));
    cfg.server = "https://10.0.0.1:6443";
    assert_int_equal(kd_k8s_client_new(&cfg, NULL, &c, err), 0);
    assert_string_equal(kd_k8s_client_namespace(c), "default");
    assert_int_equal(c->opts.qps, 50.0);
    assert_int_equal(c->opts.burst, 100);
    assert_int_equal(c->opts.max_retries, 5);
    kd_k8s_client_free(c);
    kd_k8s_client_free(NULL);
}

static void test_request_timeout(void **state)
{
    (void)state;
    /* a listening socket that never answers: the TCP handshake completes, no response comes */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char url[64], err[KD_ERRLEN];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
    struct kd_k8s_config cfg = {.server = url};
    struct kd_k8s_client_opts o = {
        .timeout_ms = 300, .max_retries = 1, .backoff_base_ms = 10, .backoff_max_ms = 10};
    struct kd_k8s_client *c = NULL;
    struct kd_k8s_client_stats s;
    assert_int_equal(kd_k8s_client_new(&cfg, &o, &c, err), 0);
    int64_t t0 = kd_mono_ms();
    assert_int_equal(kd_k8s_get(c, &KD_K8S_PODS, "ns", "p", NULL, NULL, err), KD_ETIMEDOUT);
    int64_t dt = kd_mono_ms() - t0;
    kd_k8s_client_stats(c, &s);
    printf("GET timed out twice in %lld ms: %s\n", (long long)dt, err);
    assert_int_equal(s.requests, 2); /* a GET is retried after a timeout */
    assert_true(dt >= 600 && dt < 3000);
    assert_non_null(strstr(err, "GET /api/v1/namespaces/ns/pods/p"));
    /* a POST is not: the server may have acted on it */
    json_t *pod = json_pack("{s:{s:s}}", "metadata", "name", "p");
    assert_int_equal(kd_k8s_create(c, &KD_K8S_PODS, "ns", pod, NULL, NULL, err), KD_ETIMEDOUT);
    kd_k8s_client_stats(c, &s);
    assert_int_equal(s.requests, 3);
    json_decref(pod);
    kd_k8s_client_free(c);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_policy),    cmocka_unit_test(test_retry_after_header),
        cmocka_unit_test(test_curl_errors),     cmocka_unit_test(test_client_new_checks),
        cmocka_unit_test(test_request_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
