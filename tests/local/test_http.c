/*
 * lib/http against a real client (libcurl): request accessors, JSON
 * answers, the body cap, a chunked stream, and stopping the server while a
 * stream is open (no hang, no leak under LeakSanitizer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "core/buf.h"
#include "core/time.h"
#include "http/http.h"

static ssize_t count_stream(void *ctx, char *buf, size_t max)
{
    int *n = ctx;
    if (*n >= 3) {
        /* Then stay open, producing nothing, until the client or the server goes. */
        kd_sleep_ms(20);
        return 0;
    }
    int len = snprintf(buf, max, "{\"n\":%d}\n", (*n)++);
    return len;
}

static void handler(struct kd_http_req *r, void *ud)
{
    (void)ud;
    const char *path = kd_http_path(r);
    if (strcmp(path, "/echo") == 0) {
        size_t len;
        const char *body = kd_http_body(r, &len);
        char *scratch = kd_http_printf(r, "%s-%zu", kd_http_method(r), len);
        json_t *j =
            json_pack("{s:s,s:s,s:s?,s:s?,s:s}", "method", kd_http_method(r), "body", body, "q",
                      kd_http_query(r, "q"), "h", kd_http_header(r, "X-Test"), "scratch", scratch);
        kd_http_add_header(r, "X-Reply", "yes");
        kd_http_respond_json(r, 200, j);
        json_decref(j);
    } else if (strcmp(path, "/stream") == 0) {
        int *n = calloc(1, sizeof(int));
        kd_http_respond_stream(r, 200, "application/json", count_stream, n, free);
    } else if (strcmp(path, "/big-arena") == 0) {
        for (int i = 0; i < 1000; i++)
            memset(kd_http_alloc(r, 1000), 'x', 1000);
        kd_http_respond(r, 200, "text/plain", "ok", 2);
    }
    /* anything else: no answer, the wrapper sends 500 */
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    struct kd_buf *b = ud;
    if (kd_buf_append(b, p, size * n) != 0)
        return 0;
    return size * n;
}

static long req(int port, const char *method, const char *path, const char *body,
                struct kd_buf *out, long timeout_ms)
{
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    struct curl_slist *h = curl_slist_append(NULL, "X-Test: hello");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body != NULL)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    long code = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK || rc == CURLE_OPERATION_TIMEDOUT)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return code;
}

static void test_requests(void **state)
{
    (void)state;
    struct kd_http_opts o = {.port = 0, .max_body = 1024, .handler = handler};
    struct kd_http_server *s = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_http_start(&o, &s, err), 0);
    int port = kd_http_port(s);
    assert_true(port > 0);
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    assert_int_equal(req(port, "POST", "/echo?q=a%20b", "{\"x\":1}", &b, 5000), 200);
    json_t *j = json_loads(kd_buf_str(&b), 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(j, "body")), "{\"x\":1}");
    assert_string_equal(json_string_value(json_object_get(j, "q")), "a b");
    assert_string_equal(json_string_value(json_object_get(j, "h")), "hello");
    assert_string_equal(json_string_value(json_object_get(j, "scratch")), "POST-7");
    json_decref(j);
    /* Over the cap: 413 with a Status body naming the cap. */
    char big[2048];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    kd_buf_reset(&b);
    assert_int_equal(req(port, "PUT", "/echo", big, &b, 5000), 413);
    assert_non_null(strstr(kd_buf_str(&b), "larger than 1024 bytes"));
    kd_buf_reset(&b);
    assert_int_equal(req(port, "GET", "/unanswered", NULL, &b, 5000), 500);
    kd_buf_reset(&b);
    assert_int_equal(req(port, "GET", "/big-arena", NULL, &b, 5000), 200);
    assert_string_equal(kd_buf_str(&b), "ok");
    /* A second server on the same port fails with a clear error. */
    struct kd_http_server *s2 = NULL;
    struct kd_http_opts o2 = {.port = port, .handler = handler};
    assert_int_equal(kd_http_start(&o2, &s2, err), -EADDRINUSE);
    assert_non_null(strstr(err, "cannot listen on 127.0.0.1"));
    kd_buf_free(&b);
    kd_http_stop(s);
}

static void test_stream(void **state)
{
    (void)state;
    struct kd_http_opts o = {.port = 0, .handler = handler};
    struct kd_http_server *s = NULL;
    assert_int_equal(kd_http_start(&o, &s, NULL), 0);
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    /* The stream stays open; the client gives up after 500 ms with three chunks. */
    assert_int_equal(req(kd_http_port(s), "GET", "/stream", NULL, &b, 500), 200);
    assert_string_equal(kd_buf_str(&b), "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n");
    kd_buf_free(&b);
    int64_t t0 = kd_mono_ms();
    kd_http_stop(s);
    assert_true(kd_mono_ms() - t0 < 5000);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_stream),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
