/*
 * The API's decisions from the request head alone, against a real private
 * PostgreSQL and kdet-local: clients send only the head (announcing a body
 * they never send, with Expect: 100-continue) and still get their answer, so routing (404/405), the
 * per-route body caps (413 naming the cap) and the tokens (401) are decided
 * before any body byte is read; and a %00 in a name is refused (400), not
 * answered for the name it would cut down to.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "fx.h"

#define NSP "/api/v1/namespaces/default/"

/* Send `head` (and nothing after it); everything the API answers until it closes. */
static void head_only(const char *head, struct kd_buf *out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_int_equal(send(fd, head, strlen(head), MSG_NOSIGNAL), (ssize_t)strlen(head));
    kd_buf_reset(out);
    bool closed = false;
    char buf[4096];
    for (int i = 0; i < 1000 && !closed; i++) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            closed = n == 0 || errno == ECONNRESET;
            break;
        }
        assert_int_equal(kd_buf_append(out, buf, (size_t)n), 0);
    }
    close(fd);
    if (!closed)
        fail_msg("the API did not answer and close without the body; got:\n%s", kd_buf_str(out));
}

/* `method path` with Content-Length `len`, Expect: 100-continue (so the answer comes before
 * any body byte; without it, a body of at most 1 MiB is read and dropped first) and an
 * optional bearer token; answer in out. */
static void announce(const char *method, const char *path, const char *token, size_t len,
                     struct kd_buf *out)
{
    char head[1024];
    snprintf(head, sizeof(head),
             "%s %s HTTP/1.1\r\nHost: x\r\n%s%s%sContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nExpect: 100-continue\r\n\r\n",
             method, path, token ? "Authorization: Bearer " : "", token ? token : "",
             token ? "\r\n" : "", len);
    head_only(head, out);
}

static void want(const struct kd_buf *b, int status, const char *words)
{
    char line[32];
    snprintf(line, sizeof(line), "HTTP/1.1 %d ", status);
    const char *s = kd_buf_str(b);
    if (strncmp(s, line, strlen(line)) != 0 || strstr(s, words) == NULL ||
        strstr(s, "Connection: close") == NULL)
        fail_msg("want %d with \"%s\" and Connection: close; got:\n%s", status, words, s);
}

static void test_route_caps_from_the_head(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    char uid[64], tok[KD_API_TOKEN_LEN + 1];
    fx_experiment("c-exp", "loss");
    fx_trial("c-exp", "c-exp-1", 10, uid, sizeof(uid));
    fx_token("c-exp-1", uid, tok, sizeof(tok));
    static const char *const actions[] = {"pause", "activate", "cancel", "archive", "unarchive"};
    for (size_t i = 0; i < 5; i++) {
        char path[256];
        snprintf(path, sizeof(path), NSP "experiments/any/%s", actions[i]);
        announce("POST", path, FX_USER_TOKEN, (16u << 10) + 1, &b);
        want(&b, 413, "at most 16384 bytes (16 KiB)");
    }
    announce("POST", NSP "trials/c-exp-1/early_exit", tok, (16u << 10) + 1, &b);
    want(&b, 413, "at most 16384 bytes");
    announce("PUT", NSP "trials/c-exp-1/rendezvous", tok, 4097, &b);
    want(&b, 413, "at most 4096 bytes");
    announce("POST", NSP "trials/c-exp-1/checkpoints", tok, (256u << 10) + 1, &b);
    want(&b, 413, "at most 262144 bytes");
    announce("POST", NSP "trials/c-exp-1/metrics", tok, (8u << 20) + 1, &b);
    want(&b, 413, "at most 8388608 bytes");
    announce("GET", "/healthz", NULL, 5, &b);
    want(&b, 413, "takes no request body");
    /* Through a real client too, body sent: curl gets the same 413 JSON. */
    char *big = kd_xmalloc(20 << 10);
    memset(big, ' ', (20 << 10) - 1);
    big[(20 << 10) - 1] = '\0';
    json_t *out = NULL;
    assert_int_equal(fx_http("POST", NSP "experiments/any/pause", FX_USER_TOKEN, big, &out), 413);
    assert_string_equal(json_string_value(json_object_get(out, "field")), "body");
    assert_non_null(strstr(json_string_value(json_object_get(out, "error")), "16 KiB"));
    json_decref(out);
    free(big);
    kd_buf_free(&b);
}

static void test_tokens_before_the_body(void **state)
{
    (void)state;
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    char uid[64], tok[KD_API_TOKEN_LEN + 1];
    fx_experiment("l-exp", "loss");
    fx_trial("l-exp", "l-exp-1", 10, uid, sizeof(uid));
    fx_token("l-exp-1", uid, tok, sizeof(tok));
    /* 8 MiB announced, not one byte sent: the refusal still comes, so nothing was buffered. */
    announce("POST", NSP "experiments/l-exp/pause", NULL, 8u << 20, &b);
    want(&b, 401, "user token is required");
    assert_non_null(strstr(kd_buf_str(&b), "WWW-Authenticate: Bearer"));
    announce("POST", NSP "experiments/l-exp/pause", "wrong", 100, &b);
    want(&b, 401, "user token is required");
    /* The token comes before the cap: an unauthenticated client learns no more. */
    announce("POST", NSP "experiments/l-exp/pause", NULL, 1u << 30, &b);
    want(&b, 401, "user token is required");
    announce("POST", NSP "trials/l-exp-1/metrics", NULL, 8u << 20, &b);
    want(&b, 401, "trial token is required");
    announce("POST", NSP "trials/l-exp-1/metrics", "wrong", 8u << 20, &b);
    want(&b, 401, "not valid for trial default/l-exp-1");
    announce("POST", NSP "trials/no-such/metrics", tok, 8u << 20, &b);
    want(&b, 401, "not valid for trial default/no-such");
    /* Another trial's token. */
    announce("POST", NSP "trials/l-exp-2/checkpoints", tok, 1000, &b);
    want(&b, 401, "not valid");
    /* Routing too: unknown routes and wrong methods are answered from the head. */
    announce("POST", NSP "nothing/here", FX_USER_TOKEN, 8u << 20, &b);
    want(&b, 404, "no such endpoint");
    announce("PUT", NSP "trials/l-exp-1/metrics", tok, 8u << 20, &b);
    want(&b, 405, "allowed: POST");
    assert_non_null(strstr(kd_buf_str(&b), "Allow: POST"));
    /* The right tokens still get through to the handlers, body and all. */
    assert_int_equal(fx_http("POST", NSP "experiments/l-exp/pause", FX_USER_TOKEN, "{}", NULL),
                     200);
    assert_int_equal(fx_http("POST", NSP "experiments/l-exp/activate", FX_USER_TOKEN, NULL, NULL),
                     200);
    json_t *out = NULL;
    assert_int_equal(fx_http("POST", NSP "trials/l-exp-1/early_exit", tok,
                             "{\"reason\":\"invalid_hp\",\"message\":\"x\"}", &out),
                     200);
    json_decref(out);
    kd_buf_free(&b);
}

static void test_nul_in_a_name(void **state)
{
    (void)state;
    char uid[64];
    json_t *out = NULL;
    fx_experiment("n-exp", "loss");
    fx_trial("n-exp", "n-exp-1", 10, uid, sizeof(uid));
    assert_int_equal(fx_http("GET", NSP "trials/n-exp-1", FX_USER_TOKEN, NULL, NULL), 200);
    /* Before, the decoded path ended at the NUL and the answer was n-exp-1's. */
    assert_int_equal(fx_http("GET", NSP "trials/n-exp-1%00x", FX_USER_TOKEN, NULL, &out), 400);
    assert_non_null(strstr(json_string_value(json_object_get(out, "message")), "NUL byte (%00)"));
    json_decref(out);
    assert_int_equal(fx_http("GET", NSP "experiments/n-exp%0a", FX_USER_TOKEN, NULL, &out), 400);
    assert_non_null(strstr(json_string_value(json_object_get(out, "message")), "control byte"));
    json_decref(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_caps_from_the_head),
        cmocka_unit_test(test_tokens_before_the_body),
        cmocka_unit_test(test_nul_in_a_name),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
