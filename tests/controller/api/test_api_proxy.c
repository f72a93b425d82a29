/*
 * The task proxy (/proxy/TASK/), against a private PostgreSQL, a real
 * kdet-local and real upstream servers in this process (lib/http, the
 * same server the API runs on; and a TCP echo): who gets in (user tokens
 * by namespace, a one-minute ticket traded for a session cookie bound to
 * the task and its token, revoked tokens, tampered and foreign cookies),
 * what goes upstream (the task's token instead of the user's, no kdet
 * cookie or query parameter, the raw path), what comes back (status,
 * headers, body), WebSocket upgrades relayed with the upstream's accept
 * header and bytes both ways, a shell's tunnel, activity counted for idle
 * timeouts, tasks that do not serve, and the API's stop ending open pipes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "core/buf.h"
#include "core/time.h"
#include "api/api_int.h"
#include "http/http.h"
#include "fx.h"

#define NSP "/api/v1/namespaces/default/"

static char tok_alice[128], tok_bob[128], uid_nb[64], uid_sh[64];
static struct kd_http_server *up_http;
static int echo_fd = -1, echo_port;
static pthread_t echo_thread;
static atomic_int echo_stop;
/* What the upstream saw of the last request. */
static char seen_auth[256], seen_cookie[512], seen_target[512], seen_body[256];

/* ---- the upstream: a notebook-like HTTP server, and a TCP echo ---------------------------- */

static void up_ws(void *ctx, int fd, const char *extra, size_t extra_len,
                  struct kd_http_server *srv)
{
    (void)ctx;
    char buf[4096];
    if (extra_len > 0 && write(fd, extra, extra_len) < 0)
        return;
    while (!kd_http_stopping(srv)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) /* the echo says it went through the upstream */
            if (buf[i] >= 'a' && buf[i] <= 'z')
                buf[i] = (char)(buf[i] - 'a' + 'A');
        if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
            break;
    }
}

static void up_handler(struct kd_http_req *r, void *ud)
{
    (void)ud;
    const char *a = kd_http_header(r, "Authorization"), *c = kd_http_header(r, "Cookie");
    size_t blen = 0;
    const char *body = kd_http_body(r, &blen);
    snprintf(seen_auth, sizeof(seen_auth), "%s", a ? a : "");
    snprintf(seen_cookie, sizeof(seen_cookie), "%s", c ? c : "");
    snprintf(seen_target, sizeof(seen_target), "%s", kd_http_target(r));
    snprintf(seen_body, sizeof(seen_body), "%.*s", (int)blen, body);
    const char *path = kd_http_path(r);
    const char *upg = kd_http_header(r, "Upgrade");
    if (upg != NULL && strcasecmp(upg, "websocket") == 0) {
        kd_http_add_header(r, "Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        kd_http_respond_upgrade(r, "websocket", up_ws, NULL, NULL);
    } else if (strstr(path, "/teapot") != NULL) {
        kd_http_add_header(r, "X-Upstream", "yes");
        kd_http_respond(r, 418, "text/plain", "short and stout", 15);
    } else {
        kd_http_add_header(r, "Set-Cookie", "_xsrf=abc; Path=/proxy/nb/");
        char out[1024];
        int n = snprintf(out, sizeof(out), "%s %s", kd_http_method(r), kd_http_target(r));
        kd_http_respond(r, 200, "text/plain", out, (size_t)n);
    }
}

static void *echo_main(void *p)
{
    (void)p;
    while (!atomic_load(&echo_stop)) {
        struct pollfd pf = {.fd = echo_fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        int c = accept(echo_fd, NULL, NULL);
        if (c < 0)
            continue;
        char buf[4096];
        ssize_t n;
        while ((n = recv(c, buf, sizeof(buf), 0)) > 0)
            if (send(c, buf, (size_t)n, MSG_NOSIGNAL) != n)
                break;
        close(c);
    }
    return NULL;
}

/* ---- clients ------------------------------------------------------------------------------ */

struct got {
    long code;
    struct kd_buf body, headers;
};

static size_t on_data(char *p, size_t sz, size_t n, void *ud)
{
    return kd_buf_append(ud, p, sz * n) == 0 ? sz * n : 0;
}

/* One request to the API with any headers (NULL-terminated), no redirects followed. */
static void req(const char *method, const char *path, const char *const *headers, const char *body,
                struct got *g)
{
    char url[2048];
    CURL *h = curl_easy_init();
    struct curl_slist *hl = NULL;
    kd_buf_init(&g->body, 1 << 20);
    kd_buf_init(&g->headers, 64 << 10);
    snprintf(url, sizeof(url), "%s%s", fx.url, path);
    for (int i = 0; headers != NULL && headers[i] != NULL; i++)
        hl = curl_slist_append(hl, headers[i]);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    if (body != NULL)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &g->body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &g->headers);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    if (curl_easy_perform(h) != CURLE_OK)
        fail_msg("%s %s: no answer", method, path);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &g->code);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
}

static void got_free(struct got *g)
{
    kd_buf_free(&g->body);
    kd_buf_free(&g->headers);
}

static const char *body_of(struct got *g)
{
    return kd_buf_str(&g->body) ? kd_buf_str(&g->body) : "";
}

/* A raw connection to the API, an upgrade request sent, the answer head read into head. */
static int raw_upgrade(const char *path, const char *auth, const char *proto, char *head,
                       size_t len)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char rq[1024];
    int n = snprintf(rq, sizeof(rq),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: "
                     "%s\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: "
                     "13\r\nAuthorization: Bearer %s\r\n\r\n",
                     path, proto, auth);
    assert_int_equal(send(fd, rq, (size_t)n, 0), n);
    size_t got = 0;
    head[0] = '\0';
    while (strstr(head, "\r\n\r\n") == NULL && got + 1 < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            fail_msg("no answer to the upgrade of %s", path);
        ssize_t r = recv(fd, head + got, 1, 0); /* a byte at a time: nothing past the head */
        if (r <= 0)
            break;
        got += (size_t)r;
        head[got] = '\0';
    }
    return fd;
}

/* Send s through fd and read the same length back. */
static void roundtrip(int fd, const char *s, char *out, size_t len)
{
    size_t n = strlen(s), got = 0;
    assert_int_equal(send(fd, s, n, 0), (ssize_t)n);
    while (got < n && got + 1 < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            break;
        ssize_t r = recv(fd, out + got, n - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    out[got] = '\0';
}

/* ---- setup ------------------------------------------------------------------------------ */

static void make_user(const char *name, const char *namespaces, char *tok, size_t len)
{
    char body[256];
    json_t *out = NULL;
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"namespaces\":%s}", name, namespaces);
    assert_int_equal(fx_http("POST", "/api/v1/users", FX_USER_TOKEN, body, &out), 201);
    snprintf(tok, len, "%s", json_string_value(json_object_get(out, "token")));
    json_decref(out);
}

static void running(const char *task, int port)
{
    char js[512];
    snprintf(js, sizeof(js),
             "{\"status\":{\"state\":\"RUNNING\",\"address\":{\"runId\":\"r1\",\"host\":"
             "\"127.0.0.1\",\"port\":%d}}}",
             port);
    fx_patch("tasks", task, "status", js);
}

static void wait_seen(const char *task, const char *state)
{
    char path[256];
    for (int i = 0; i < 100; i++) {
        json_t *ans = NULL;
        snprintf(path, sizeof(path), NSP "tasks/%s", task);
        if (fx_http("GET", path, FX_USER_TOKEN, NULL, &ans) == 200 &&
            strcmp(json_string_value(json_object_get(ans, "state")) ?: "", state) == 0) {
            json_decref(ans);
            return;
        }
        json_decref(ans);
        kd_sleep_ms(50);
    }
    fail_msg("task %s never %s in the API's cache", task, state);
}

static int setup(void **state)
{
    char err[KD_ERRLEN] = "";
    if (fx_setup(state) != 0)
        return -1;
    struct kd_http_opts ho = {.handler = up_handler};
    if (kd_http_start(&ho, &up_http, err) != 0)
        fail_msg("upstream: %s", err);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    echo_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(echo_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(echo_fd, 8), 0);
    getsockname(echo_fd, (struct sockaddr *)&sa, &sl);
    echo_port = ntohs(sa.sin_port);
    pthread_create(&echo_thread, NULL, echo_main, NULL);
    make_user("alice", "[\"default\"]", tok_alice, sizeof(tok_alice));
    make_user("bob", "[\"team-b\"]", tok_bob, sizeof(tok_bob));
    fx_task("nb", "notebook", NULL, uid_nb, sizeof(uid_nb));
    fx_task("sh", "shell", NULL, uid_sh, sizeof(uid_sh));
    fx_task("queued", "notebook", NULL, NULL, 0);
    running("nb", kd_http_port(up_http));
    running("sh", echo_port);
    wait_seen("nb", "RUNNING");
    wait_seen("sh", "RUNNING");
    wait_seen("queued", "QUEUED");
    return 0;
}

static int teardown(void **state)
{
    atomic_store(&echo_stop, 1);
    pthread_join(echo_thread, NULL);
    close(echo_fd);
    kd_http_stop(up_http);
    return fx_teardown(state);
}

/* ---- cases ------------------------------------------------------------------------------ */

static void test_tokens_and_namespaces(void **state)
{
    (void)state;
    struct got g;
    char bearer[256], task_tok[64];
    req("GET", "/proxy/nb/", NULL, NULL, &g);
    assert_int_equal(g.code, 401);
    got_free(&g);
    snprintf(bearer, sizeof(bearer), "Authorization: Bearer %s", tok_alice);
    const char *hs[] = {bearer, "Cookie: _xsrf=abc; kdet_proxy=forged; theme=dark", NULL};
    req("GET", "/proxy/nb/api/contents/a%20b.ipynb?namespace=default&type=file", hs, NULL, &g);
    assert_int_equal(g.code, 200);
    assert_string_equal(body_of(&g), "GET /proxy/nb/api/contents/a%20b.ipynb?type=file");
    /* upstream: the task's token, never the user's; kdet's cookie and parameter left out */
    fx_task_token("nb", uid_nb, task_tok, sizeof(task_tok));
    char want[128];
    snprintf(want, sizeof(want), "token %s", task_tok);
    assert_string_equal(seen_auth, want);
    assert_string_equal(seen_cookie, "_xsrf=abc; theme=dark");
    assert_true(strstr(kd_buf_str(&g.headers), "Set-Cookie: _xsrf=abc; Path=/proxy/nb/") != NULL);
    got_free(&g);
    /* a status, a body and a header of the upstream come back as they are */
    req("GET", "/proxy/nb/teapot", hs, NULL, &g);
    assert_int_equal(g.code, 418);
    assert_string_equal(body_of(&g), "short and stout");
    assert_true(strstr(kd_buf_str(&g.headers), "X-Upstream: yes") != NULL);
    got_free(&g);
    req("PUT", "/proxy/nb/api/contents/x", hs, "{\"content\":1}", &g);
    assert_int_equal(g.code, 200);
    assert_string_equal(seen_body, "{\"content\":1}");
    got_free(&g);
    /* another namespace's user sees no such task */
    snprintf(bearer, sizeof(bearer), "Authorization: Bearer %s", tok_bob);
    const char *hb[] = {bearer, NULL};
    req("GET", "/proxy/nb/", hb, NULL, &g);
    assert_int_equal(g.code, 404);
    got_free(&g);
    snprintf(bearer, sizeof(bearer), "Authorization: Bearer %s", tok_alice);
    const char *ha[] = {bearer, NULL};
    req("GET", "/proxy/nb", ha, NULL, &g); /* the base path ends with '/' */
    assert_int_equal(g.code, 301);
    assert_true(strstr(kd_buf_str(&g.headers), "Location: /proxy/nb/") != NULL);
    got_free(&g);
    req("GET", "/proxy/queued/", ha, NULL, &g);
    assert_int_equal(g.code, 409);
    assert_true(strstr(body_of(&g), "QUEUED") != NULL);
    got_free(&g);
    req("GET", "/proxy/nope/", ha, NULL, &g);
    assert_int_equal(g.code, 404);
    got_free(&g);
    req("GET", "/proxy/sh/", ha, NULL, &g); /* a shell is no web service */
    assert_int_equal(g.code, 400);
    got_free(&g);
}

/* The value of cookie kdet_proxy in a Set-Cookie header of headers, into out. */
static bool set_cookie(const char *headers, char *out, size_t len)
{
    const char *p = strstr(headers, "Set-Cookie: kdet_proxy=");
    if (p == NULL)
        return false;
    p += strlen("Set-Cookie: kdet_proxy=");
    size_t n = strcspn(p, ";\r\n");
    snprintf(out, len, "%.*s", (int)n, p);
    return true;
}

static void test_ticket_and_session(void **state)
{
    (void)state;
    json_t *ans = NULL;
    struct got g;
    char cookie[512], hdr[600], tok2[128];
    /* a second token of alice's, to revoke later */
    assert_int_equal(fx_http("POST", "/api/v1/tokens", tok_alice, "{}", &ans), 201);
    snprintf(tok2, sizeof(tok2), "%s", json_string_value(json_object_get(ans, "token")));
    int64_t tok2_id = json_integer_value(json_object_get(ans, "id"));
    json_decref(ans);
    assert_int_equal(fx_http("POST", NSP "tasks/nb/proxy-ticket", tok2, "{}", &ans), 200);
    const char *url = json_string_value(json_object_get(ans, "url"));
    assert_non_null(url);
    assert_int_equal(strncmp(url, "/proxy/nb/?namespace=default&kdet_ticket=", 41), 0);
    char ticket_url[512];
    snprintf(ticket_url, sizeof(ticket_url), "%s", url);
    json_decref(ans);
    assert_int_equal(fx_http("POST", NSP "tasks/nb/proxy-ticket", tok_bob, "{}", NULL), 403);
    /* the ticket is traded for the cookie, then the same place without it */
    req("GET", ticket_url, NULL, NULL, &g);
    assert_int_equal(g.code, 303);
    assert_true(strstr(kd_buf_str(&g.headers), "Location: /proxy/nb/\r\n") != NULL);
    assert_true(strstr(kd_buf_str(&g.headers), "HttpOnly; SameSite=Strict") != NULL);
    assert_true(strstr(kd_buf_str(&g.headers), "Path=/proxy/nb/;") != NULL);
    assert_true(set_cookie(kd_buf_str(&g.headers), cookie, sizeof(cookie)));
    got_free(&g);
    snprintf(hdr, sizeof(hdr), "Cookie: kdet_proxy=%s", cookie);
    const char *hc[] = {hdr, NULL};
    req("GET", "/proxy/nb/tree", hc, NULL, &g);
    assert_int_equal(g.code, 200);
    assert_string_equal(body_of(&g), "GET /proxy/nb/tree");
    assert_string_equal(seen_cookie, ""); /* the session stays with kdet */
    got_free(&g);
    /* the cookie is the notebook's, not another task's */
    req("GET", "/proxy/sh/", hc, NULL, &g);
    assert_int_equal(g.code, 401);
    got_free(&g);
    /* tampered: one character of the signature changed */
    char bad[600];
    snprintf(bad, sizeof(bad), "%s", hdr);
    bad[strlen(bad) - 2] = bad[strlen(bad) - 2] == 'A' ? 'B' : 'A';
    const char *hbad[] = {bad, NULL};
    req("GET", "/proxy/nb/tree", hbad, NULL, &g);
    assert_int_equal(g.code, 401);
    got_free(&g);
    /* a ticket is good once a minute, not a garbled one */
    char garbled[600];
    snprintf(garbled, sizeof(garbled), "%.*sx", (int)strlen(ticket_url) - 1, ticket_url);
    req("GET", garbled, NULL, NULL, &g);
    assert_int_equal(g.code, 401);
    got_free(&g);
    /* revoking the token that made the session ends the session */
    char path[64];
    snprintf(path, sizeof(path), "/api/v1/tokens/%lld/revoke", (long long)tok2_id);
    assert_int_equal(fx_http("POST", path, tok_alice, "{}", NULL), 200);
    req("GET", "/proxy/nb/tree", hc, NULL, &g);
    assert_int_equal(g.code, 401);
    got_free(&g);
}

static void test_websocket(void **state)
{
    (void)state;
    char head[4096], out[64];
    int open = 0;
    int64_t last = 0;
    int fd = raw_upgrade("/proxy/nb/api/kernels/k1/channels?session_id=s", tok_alice, "websocket",
                         head, sizeof(head));
    if (strncmp(head, "HTTP/1.1 101", 12) != 0) {
        char rest[512] = "";
        ssize_t rn = recv(fd, rest, sizeof(rest) - 1, 0);
        rest[rn > 0 ? rn : 0] = '\0';
        fail_msg("upgrade answered: %s%s", head, rest);
    }
    assert_non_null(strstr(head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
    assert_non_null(strcasestr(head, "Upgrade: websocket"));
    char task_tok[64], want[128];
    fx_task_token("nb", uid_nb, task_tok, sizeof(task_tok));
    snprintf(want, sizeof(want), "token %s", task_tok);
    assert_string_equal(seen_auth, want); /* the upgrade went upstream with the task's token */
    roundtrip(fd, "hello kernel", out, sizeof(out));
    assert_string_equal(out, "HELLO KERNEL");
    assert_true(kd_api_task_activity(fx.api, "default", "nb", &open, &last));
    assert_int_equal(open, 1);
    assert_true(last > kd_wall_ms() - 60000);
    close(fd);
    for (int i = 0; i < 50 && open != 0; i++) {
        kd_sleep_ms(100);
        (void)kd_api_task_activity(fx.api, "default", "nb", &open, &last);
    }
    assert_int_equal(open, 0);
    /* without a token: refused before anything goes upstream */
    fd = raw_upgrade("/proxy/nb/api/kernels/k1/channels", "nope", "websocket", head, sizeof(head));
    assert_int_equal(strncmp(head, "HTTP/1.1 401", 12), 0);
    close(fd);
    /* a tunnel is only for shells */
    fd = raw_upgrade("/proxy/nb/", tok_alice, "kdet-tunnel", head, sizeof(head));
    assert_int_equal(strncmp(head, "HTTP/1.1 400", 12), 0);
    close(fd);
}

static void test_tunnel(void **state)
{
    (void)state;
    char head[4096], out[128];
    int fd =
        raw_upgrade("/proxy/sh/?namespace=default", tok_alice, "kdet-tunnel", head, sizeof(head));
    assert_int_equal(strncmp(head, "HTTP/1.1 101", 12), 0);
    roundtrip(fd, "SSH-2.0-OpenSSH_9.2\r\n", out, sizeof(out));
    assert_string_equal(out, "SSH-2.0-OpenSSH_9.2\r\n");
    roundtrip(fd, "more bytes", out, sizeof(out));
    assert_string_equal(out, "more bytes");
    /* bob may not use the namespace */
    int fd2 = raw_upgrade("/proxy/sh/", tok_bob, "kdet-tunnel", head, sizeof(head));
    assert_int_equal(strncmp(head, "HTTP/1.1 404", 12), 0);
    close(fd2);
    /* stopping the API ends the open tunnel (and does not hang) */
    int64_t t0 = kd_mono_ms();
    fx_api_stop();
    assert_true(kd_mono_ms() - t0 < 5000);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_true(recv(fd, out, sizeof(out), 0) <= 0);
    close(fd);
    fx_api_start(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_and_namespaces),
        cmocka_unit_test(test_ticket_and_session),
        cmocka_unit_test(test_websocket),
        cmocka_unit_test(test_tunnel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
