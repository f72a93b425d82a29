/*
 * The task proxy (docs/tasks.md, "Reaching a task"): /proxy/TASK/... is
 * forwarded to the port the task's pod reported (status.address), for the
 * users who may use the task's namespace. Three ways in: a user token
 * (Authorization: Bearer, as det sends it), a one-minute sign-in ticket in
 * the URL (?kdet_ticket=, made by POST .../tasks/{t}/proxy-ticket), which
 * is traded for a session cookie bound to the task and the token that made
 * it, or that cookie. Plain requests are relayed with libcurl under caps;
 * a WebSocket upgrade (Jupyter's kernel channels) and a shell's tunnel
 * (Upgrade: kdet-tunnel, det shell open's ssh) become byte pipes on
 * threads of their own, ended by the API's stop or 12 hours of silence. A
 * notebook's requests carry the task's token, which is its Jupyter's.
 */
#include "api/api_int.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

#define COOKIE "kdet_proxy"
#define TICKET_PARAM "kdet_ticket"
#define TICKET_S 60
#define SESSION_S (12 * 3600)
/* An upstream's answer head, at most. */
#define HEAD_MAX (16u << 10)
#define CONNECT_MS 5000
#define HEAD_MS 30000
#define HTTP_TIMEOUT_S 300L
/* A pipe that carried nothing this long is closed. */
#define IDLE_MS (12LL * 3600 * 1000)
/* Proxied traffic is noted (for idle timeouts) at most this often per pipe. */
#define NOTE_MS 10000

bool api_proxy_path(const char *path)
{
    return path != NULL && strncmp(path, API_PROXY_PREFIX, strlen(API_PROXY_PREFIX)) == 0;
}

/* What the pre-body decision leaves for the handler (in the request's arena). */
struct proxied {
    const char *ns, *name, *kind, *host, *uid;
    int port;
    const struct api_principal *who;
};

/* ---- tickets and sessions --------------------------------------------------------------- */

/* What a ticket or session of the task (namespace, name, uid) is signed for (ticket.c). */
#define FOR_TASK(kind_, ns_, name_, uid_)                                                          \
    (&(const struct api_ticket_for){                                                               \
        .domain = "kdet-proxy/v1", .kind = (kind_), .ns = (ns_), .name = (name_), .uid = (uid_)})

/* The value of cookie `name` in a Cookie header, into out; false when absent. */
static bool cookie_value(const char *header, const char *name, char *out, size_t len)
{
    size_t nl = strlen(name);
    for (const char *p = header; p != NULL && *p != '\0';) {
        while (*p == ' ' || *p == ';')
            p++;
        const char *end = strchr(p, ';');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t vl = n - nl - 1;
            if (vl >= len)
                return false;
            memcpy(out, p + nl + 1, vl);
            out[vl] = '\0';
            return true;
        }
        p = end;
    }
    return false;
}

/* ---- which task ------------------------------------------------------------------------- */

struct candidates {
    const char *name, *ns;
    json_t *found; /* the Tasks of that name */
};

static int pick(json_t *t, void *ud)
{
    struct candidates *c = ud;
    if (strcmp(kd_k8s_meta_str(t, "name") ?: "", c->name) == 0 &&
        (c->ns == NULL || strcmp(kd_k8s_meta_str(t, "namespace") ?: "", c->ns) == 0))
        json_array_append(c->found, t);
    return 0;
}

/* The task name of a proxy path ("/proxy/NAME/..."), copied into the arena; NULL: none. */
static const char *task_of_path(struct api_rq *q)
{
    const char *p = kd_http_path(q->r) + strlen(API_PROXY_PREFIX);
    size_t n = strcspn(p, "/");
    if (n == 0 || n > 253)
        return NULL;
    char *name = kd_http_alloc(q->r, n + 1);
    memcpy(name, p, n);
    name[n] = '\0';
    return name;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    return json_string_value(json_object_get(json_object_get(o, a), b));
}

/* The target without kdet's own query parameters (namespace, the ticket), in the arena. */
static const char *upstream_target(struct api_rq *q)
{
    const char *t = kd_http_target(q->r);
    const char *qm = strchr(t, '?');
    if (qm == NULL)
        return t;
    struct kd_buf b = KD_BUF_INIT(HEAD_MAX);
    int rc = kd_buf_append(&b, t, (size_t)(qm - t));
    bool first = true;
    for (const char *p = qm + 1; *p != '\0' && rc == 0;) {
        size_t n = strcspn(p, "&");
        if (!(n >= 10 && strncmp(p, "namespace=", 10) == 0) &&
            !(n > strlen(TICKET_PARAM) &&
              strncmp(p, TICKET_PARAM "=", strlen(TICKET_PARAM) + 1) == 0)) {
            rc = kd_buf_putc(&b, first ? '?' : '&');
            if (rc == 0)
                rc = kd_buf_append(&b, p, n);
            first = false;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    const char *out = kd_http_strdup(q->r, rc == 0 && kd_buf_str(&b) ? kd_buf_str(&b) : t);
    kd_buf_free(&b);
    return out;
}

/*
 * Decide from the head: the task, the caller, and that it serves now. A ticket is traded for
 * the session cookie here (303 to the same URL without it). Answers every refusal itself.
 */
void api_proxy_authorize(struct api_rq *q)
{
    struct kd_api *a = q->api;
    const char *name = task_of_path(q), *ns = kd_http_query(q->r, "namespace");
    const char *ticket = kd_http_query(q->r, TICKET_PARAM);
    const char *auth = kd_http_header(q->r, "Authorization");
    const char *cookies = kd_http_header(q->r, "Cookie");
    char value[256];
    struct candidates c = {.name = name, .ns = ns, .found = json_array()};
    const json_t *task = NULL;
    const struct api_principal *who = NULL;
    int64_t token_id = 0, user_id = 0;
    q->route = "proxy";
    if (name == NULL) {
        api_error(q, 404, NULL, "no task named in %s (%sTASK/...)", kd_http_path(q->r),
                  API_PROXY_PREFIX);
        goto out;
    }
    if (a->tasks != NULL)
        (void)kd_k8s_cache_each(kd_k8s_informer_cache(a->tasks), NULL, pick, &c);
    size_t n = json_array_size(c.found);
    if (ticket != NULL || (auth == NULL && cookies != NULL)) {
        /* A ticket or the cookie is bound to one task: the one it verifies for. */
        const char *kind = ticket != NULL ? "ticket" : "session";
        bool have = ticket != NULL || cookie_value(cookies, COOKIE, value, sizeof(value));
        for (size_t i = 0; have && i < n && task == NULL; i++) {
            const json_t *t = json_array_get(c.found, i);
            if (api_ticket_check(a,
                                 FOR_TASK(kind, kd_k8s_meta_str(t, "namespace") ?: "", name,
                                          kd_k8s_meta_str(t, "uid") ?: ""),
                                 ticket != NULL ? ticket : value, &token_id, &user_id))
                task = t;
        }
        int rc = task != NULL ? api_auth_session(q, token_id, user_id, &who) : KD_EUNAUTHORIZED;
        if (rc == KD_EAGAIN) {
            api_error(q, 503, NULL, "cannot check the session now; try again");
            goto out;
        }
        if (rc != 0) {
            api_error(q, 401, NULL, "%s: sign in again ('det notebook open %s' prints a new link)",
                      ticket != NULL ? "the sign-in link is not valid (it lasts a minute)"
                                     : "the session is not valid",
                      name);
            goto out;
        }
    } else {
        if (api_auth_user(q, &who) != 0)
            goto out; /* answered 401 (or 503) */
        const json_t *mine = NULL;
        size_t allowed = 0;
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(c.found, i);
            if (api_may_do(q->api, who, kd_k8s_meta_str(t, "namespace"), "get", "tasks", "proxy",
                           kd_k8s_meta_str(t, "name"))) {
                allowed++;
                mine = t;
            }
        }
        if (allowed > 1) {
            api_error(q, 409, "namespace",
                      "tasks named %s exist in several of your namespaces: add ?namespace=NS",
                      name);
            goto out;
        }
        task = mine;
    }
    if (task == NULL || !api_may_do(q->api, who, kd_k8s_meta_str(task, "namespace"), "get", "tasks",
                                    "proxy", kd_k8s_meta_str(task, "name"))) {
        api_error(q, 404, NULL, "no task %s in the namespaces user %s may use", name,
                  kd_logq(who != NULL ? who->name : "?"));
        goto out;
    }
    q->who = who;
    const char *tns = kd_k8s_meta_str(task, "namespace"), *uid = kd_k8s_meta_str(task, "uid");
    if (ticket != NULL) {
        /* Trade it for the session, then go to the same place without it. */
        char cookie[512];
        int64_t until = kd_wall_ms() / 1000 + SESSION_S;
        api_ticket_make(a, FOR_TASK("session", tns, name, uid), token_id, user_id, until, value,
                        sizeof(value));
        snprintf(cookie, sizeof(cookie),
                 COOKIE "=%s; Path=%s%s/; Max-Age=%d; HttpOnly; SameSite=Strict%s", value,
                 API_PROXY_PREFIX, name, SESSION_S, a->tls ? "; Secure" : "");
        OPENSSL_cleanse(value, sizeof(value));
        kd_http_add_header(q->r, "Set-Cookie", cookie);
        OPENSSL_cleanse(cookie, sizeof(cookie));
        kd_http_add_header(q->r, "Location", upstream_target(q));
        kd_http_add_header(q->r, "Cache-Control", "no-store");
        api_json(q, 303, json_pack("{s:s}", "location", upstream_target(q)));
        goto out;
    }
    const char *state = str_at(task, "status", "state");
    const json_t *addr = json_object_get(json_object_get(task, "status"), "address");
    const char *host = json_string_value(json_object_get(addr, "host"));
    int port = (int)json_integer_value(json_object_get(addr, "port"));
    if (state == NULL || strcmp(state, "RUNNING") != 0 || host == NULL || port <= 0) {
        api_error(q, 409, NULL, "task %s is %s%s%s: nothing to proxy to", name,
                  state != NULL ? state : "QUEUED", str_at(task, "status", "message") ? ": " : "",
                  str_at(task, "status", "message") ?: "");
        goto out;
    }
    struct proxied *p = kd_http_alloc(q->r, sizeof(*p));
    p->ns = kd_http_strdup(q->r, tns);
    p->name = name;
    p->uid = kd_http_strdup(q->r, uid ?: "");
    p->kind = kd_http_strdup(q->r, str_at(task, "spec", "kind") ?: "");
    p->host = kd_http_strdup(q->r, host);
    p->port = port;
    p->who = who;
    kd_http_set_ctx(q->r, p);
    kd_http_set_max_body(q->r, API_PROXY_MAX_BODY);
out:
    json_decref(c.found);
}

/* ---- the ticket ------------------------------------------------------------------------- */

void api_user_task_ticket(struct api_rq *q)
{
    json_t *t = NULL;
    char err[KD_ERRLEN] = "", value[256], ts[40];
    int rc = api_get_task(q->api, q->seg[3], q->seg[5], &t, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    int64_t until = kd_wall_ms() / 1000 + TICKET_S;
    api_ticket_make(q->api,
                    FOR_TASK("ticket", q->seg[3], q->seg[5], kd_k8s_meta_str(t, "uid") ?: ""),
                    q->who->token_id, q->who->user_id, until, value, sizeof(value));
    char *url = kd_xasprintf("%s%s/?namespace=%s&" TICKET_PARAM "=%s", API_PROXY_PREFIX, q->seg[5],
                             q->seg[3], value);
    api_json(q, 200,
             json_pack("{s:s,s:s,s:s}", "url", url, "path",
                       kd_http_printf(q->r, "%s%s/", API_PROXY_PREFIX, q->seg[5]), "expires",
                       kd_time_rfc3339(until * 1000, 0, ts, sizeof(ts))));
    OPENSSL_cleanse(value, sizeof(value));
    OPENSSL_cleanse(url, strlen(url));
    free(url);
out:
    json_decref(t);
}

/* ---- upstream connections --------------------------------------------------------------- */

/* A TCP connection to host:port within CONNECT_MS; the fd or -1 (err says why). */
static int dial(const char *host, int port, char *err, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    int fd = -1;
    snprintf(ps, sizeof(ps), "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) {
        snprintf(err, len, "cannot resolve %s: %s", host, gai_strerror(g));
        return -1;
    }
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (poll(&p, 1, CONNECT_MS) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                r = 0;
            else
                errno = soerr != 0 ? soerr : ETIMEDOUT;
        }
        if (r < 0) {
            snprintf(err, len, "cannot connect to %s:%d: %s", host, port, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* Write all of p to a (non-blocking) socket, waiting up to ms for room. 0 or -1. */
static int send_all(int fd, const char *p, size_t n, int ms)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, ms) <= 0)
                return -1;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A request header kdet does not pass on: hop-by-hop, kdet's own credentials. */
static bool dropped_header(const char *name, bool upgrade)
{
    static const char *const hop[] = {"Connection",
                                      "Keep-Alive",
                                      "Proxy-Authenticate",
                                      "Proxy-Authorization",
                                      "TE",
                                      "Trailer",
                                      "Transfer-Encoding",
                                      "Upgrade",
                                      "Authorization",
                                      "Content-Length",
                                      "Cookie",
                                      "Expect",
                                      NULL};
    for (int i = 0; hop[i] != NULL; i++)
        if (strcasecmp(name, hop[i]) == 0)
            return !(upgrade &&
                     (strcasecmp(name, "Upgrade") == 0 || strcasecmp(name, "Connection") == 0));
    return false;
}

/* The Cookie header without kdet's session, into b ("" when nothing is left). */
static void other_cookies(const char *header, struct kd_buf *b)
{
    int rc = 0;
    for (const char *p = header; p != NULL && *p != '\0' && rc == 0;) {
        while (*p == ' ' || *p == ';')
            p++;
        const char *end = strchr(p, ';');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n > 0 && !(n > strlen(COOKIE) && strncmp(p, COOKIE "=", strlen(COOKIE) + 1) == 0)) {
            if (b->len > 0)
                rc = kd_buf_puts(b, "; ");
            if (rc == 0)
                rc = kd_buf_append(b, p, n);
        }
        p = end;
    }
}

struct head_ctx {
    struct kd_buf *b;
    bool upgrade;
    int rc;
};

static void add_head_line(const char *name, const char *value, void *ud)
{
    struct head_ctx *h = ud;
    if (h->rc != 0 || dropped_header(name, h->upgrade))
        return;
    if (strpbrk(value, "\r\n") != NULL || strpbrk(name, "\r\n: ") != NULL)
        return;
    h->rc = kd_buf_printf(h->b, "%s: %s\r\n", name, value);
}

/* The token a notebook's Jupyter takes (its own token is the task's), into tok. */
static bool notebook_token(const struct kd_api *a, const struct proxied *p, char *tok, size_t len)
{
    return strcmp(p->kind, "notebook") == 0 &&
           kd_api_task_token(a->key, a->keylen, p->ns, p->name, p->uid, tok, len) == 0;
}

/* ---- pipes (WebSocket, tunnel) ---------------------------------------------------------- */

struct pipe_ctx {
    struct kd_api *api;
    char ns[256], name[256];
    int up;     /* the upstream socket */
    char *left; /* bytes the upstream sent after its answer's head */
    size_t left_len;
};

static void pipe_free(void *p)
{
    struct pipe_ctx *c = p;
    if (c->up >= 0)
        close(c->up);
    free(c->left);
    free(c);
}

/* Copy both ways until a side closes, the API stops, or IDLE_MS pass without a byte. */
static void pipe_run(void *ctx, int fd, const char *extra, size_t extra_len,
                     struct kd_http_server *srv)
{
    struct pipe_ctx *c = ctx;
    char buf[65536];
    int64_t last = kd_mono_ms(), noted = last;
    api_task_activity_note(c->api, c->ns, c->name, +1);
    if ((extra_len > 0 && send_all(c->up, extra, extra_len, 30000) != 0) ||
        (c->left_len > 0 && send_all(fd, c->left, c->left_len, 30000) != 0))
        goto out;
    while (!kd_http_stopping(srv) && kd_mono_ms() - last < IDLE_MS) {
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = c->up, .events = POLLIN}};
        int r = poll(p, 2, 500);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        bool done = false;
        for (int i = 0; i < 2 && !done; i++) {
            if (p[i].revents == 0)
                continue;
            ssize_t n = recv(p[i].fd, buf, sizeof(buf), 0);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                continue;
            if (n <= 0 || send_all(i == 0 ? c->up : fd, buf, (size_t)n, 30000) != 0)
                done = true;
            last = kd_mono_ms();
        }
        if (done)
            break;
        if (last - noted >= NOTE_MS) {
            api_task_activity_note(c->api, c->ns, c->name, 0);
            noted = last;
        }
    }
out:
    api_task_activity_note(c->api, c->ns, c->name, -1);
    OPENSSL_cleanse(buf, sizeof(buf));
}

static struct pipe_ctx *pipe_new(struct api_rq *q, const struct proxied *p, int up)
{
    struct pipe_ctx *c = kd_xcalloc(1, sizeof(*c));
    c->api = q->api;
    c->up = up;
    kd_strlcpy(c->ns, p->ns, sizeof(c->ns));
    kd_strlcpy(c->name, p->name, sizeof(c->name));
    return c;
}

/* A shell's tunnel: straight to its sshd. */
static void tunnel(struct api_rq *q, const struct proxied *p)
{
    char err[256] = "";
    int up = dial(p->host, p->port, err, sizeof(err));
    if (up < 0) {
        api_error(q, 502, NULL, "task %s: %s", p->name, err);
        return;
    }
    KD_INFO("proxy tunnel opened", "task=%s/%s user=%s", kd_logq(p->ns), kd_logq(p->name),
            kd_logq(p->who->name));
    q->status = 101;
    kd_http_respond_upgrade(q->r, "kdet-tunnel", pipe_run, pipe_new(q, p, up), pipe_free);
}

/* The upstream's answer head (up to the blank line) into b; leftover bytes stay after it. */
static int read_head(int fd, struct kd_buf *b, size_t *head_len)
{
    int64_t until = kd_mono_ms() + HEAD_MS;
    char buf[4096];
    while (kd_mono_ms() < until) {
        const char *end = b->len > 0 ? memmem(b->data, b->len, "\r\n\r\n", 4) : NULL;
        if (end != NULL) {
            *head_len = (size_t)(end - b->data) + 4;
            return 0;
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 500) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0 || kd_buf_append(b, buf, (size_t)n) != 0)
            return -1;
    }
    return -1;
}

/* A WebSocket (a notebook's kernel channel): the upgrade goes upstream first; its 101 answer
 * is relayed, then the bytes. */
static void websocket(struct api_rq *q, const struct proxied *p)
{
    struct kd_api *a = q->api;
    char err[256] = "", tok[KD_API_TOKEN_LEN + 8] = "";
    struct kd_buf req = KD_BUF_INIT(HEAD_MAX * 2), ans = KD_BUF_INIT(HEAD_MAX),
                  ck = KD_BUF_INIT(HEAD_MAX);
    size_t hlen = 0;
    int up = dial(p->host, p->port, err, sizeof(err));
    if (up < 0) {
        api_error(q, 502, NULL, "task %s: %s", p->name, err);
        goto out;
    }
    struct head_ctx h = {.b = &req, .upgrade = true};
    h.rc = kd_buf_printf(&req, "GET %s HTTP/1.1\r\n", upstream_target(q));
    kd_http_each_header(q->r, add_head_line, &h);
    const char *cookies = kd_http_header(q->r, "Cookie");
    if (cookies != NULL)
        other_cookies(cookies, &ck);
    if (h.rc == 0 && ck.len > 0)
        h.rc = kd_buf_printf(&req, "Cookie: %s\r\n", kd_buf_str(&ck));
    if (h.rc == 0 && notebook_token(a, p, tok, sizeof(tok)))
        h.rc = kd_buf_printf(&req, "Authorization: token %s\r\n", tok);
    if (h.rc == 0)
        h.rc = kd_buf_puts(&req, "\r\n");
    if (h.rc != 0 || send_all(up, req.data, req.len, 30000) != 0 ||
        read_head(up, &ans, &hlen) != 0) {
        api_error(q, 502, NULL, "task %s: its service did not answer the WebSocket upgrade",
                  p->name);
        goto out;
    }
    int status = 0;
    if (sscanf(ans.data, "HTTP/1.%*d %d", &status) != 1 || status != 101) {
        /* Refused upstream (Jupyter: 403 on a bad origin, 404): say so. */
        api_error(q, status >= 400 && status < 600 ? status : 502, NULL,
                  "task %s: its service refused the WebSocket upgrade (HTTP %d)", p->name, status);
        goto out;
    }
    /* The upstream's WebSocket headers go back to the client with kdet's 101. */
    static const char *const keep[] = {"Sec-WebSocket-Accept", "Sec-WebSocket-Protocol",
                                       "Sec-WebSocket-Extensions", NULL};
    char *line = ans.data, *end = ans.data + hlen - 2;
    while (line < end) {
        char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (eol == NULL)
            break;
        *eol = '\0';
        char *colon = strchr(line, ':');
        for (int i = 0; colon != NULL && keep[i] != NULL; i++) {
            if ((size_t)(colon - line) == strlen(keep[i]) &&
                strncasecmp(line, keep[i], strlen(keep[i])) == 0) {
                const char *v = colon + 1;
                while (*v == ' ')
                    v++;
                *colon = '\0';
                kd_http_add_header(q->r, keep[i], v);
            }
        }
        line = eol + 2;
    }
    struct pipe_ctx *c = pipe_new(q, p, up);
    up = -1;
    if (ans.len > hlen) {
        c->left_len = ans.len - hlen;
        c->left = kd_xmalloc(c->left_len);
        memcpy(c->left, ans.data + hlen, c->left_len);
    }
    q->status = 101;
    kd_http_respond_upgrade(q->r, "websocket", pipe_run, c, pipe_free);
out:
    if (up >= 0)
        close(up);
    OPENSSL_cleanse(tok, sizeof(tok));
    if (req.data != NULL)
        OPENSSL_cleanse(req.data, req.len);
    kd_buf_free(&req);
    kd_buf_free(&ans);
    kd_buf_free(&ck);
}

/* ---- plain requests --------------------------------------------------------------------- */

struct answer {
    struct api_rq *q;
    struct kd_buf body;
    bool too_big;
};

static size_t on_answer_body(char *ptr, size_t sz, size_t n, void *ud)
{
    struct answer *a = ud;
    if (kd_buf_append(&a->body, ptr, sz * n) != 0) {
        a->too_big = true;
        return 0;
    }
    return sz * n;
}

/* Headers of the answer that go back to the client: all but hop-by-hop ones and the length. */
static size_t on_answer_header(char *ptr, size_t sz, size_t n, void *ud)
{
    static const char *const drop[] = {"Connection",     "Keep-Alive", "Transfer-Encoding",
                                       "Content-Length", "Upgrade",    "Content-Type",
                                       "Date",           "Server",     NULL};
    struct answer *a = ud;
    size_t len = sz * n;
    if (len < 3 || len > 8192 || strncmp(ptr, "HTTP/", 5) == 0)
        return len;
    char *line = kd_http_alloc(a->q->r, len + 1);
    memcpy(line, ptr, len);
    line[len] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    char *colon = strchr(line, ':');
    if (colon == NULL)
        return len;
    *colon = '\0';
    const char *v = colon + 1;
    while (*v == ' ')
        v++;
    for (int i = 0; drop[i] != NULL; i++)
        if (strcasecmp(line, drop[i]) == 0)
            return len;
    kd_http_add_header(a->q->r, line, v);
    return len;
}

static void forward(struct api_rq *q, const struct proxied *p)
{
    struct kd_api *a = q->api;
    struct answer ans = {.q = q};
    struct curl_slist *hl = NULL;
    struct kd_buf hb = KD_BUF_INIT(HEAD_MAX * 2), ck = KD_BUF_INIT(HEAD_MAX);
    char tok[KD_API_TOKEN_LEN + 8] = "", cerr[CURL_ERROR_SIZE] = "", *auth = NULL;
    bool v6 = strchr(p->host, ':') != NULL;
    char *url = kd_xasprintf("http://%s%s%s:%d%s", v6 ? "[" : "", p->host, v6 ? "]" : "", p->port,
                             upstream_target(q));
    CURL *h = curl_easy_init();
    kd_buf_init(&ans.body, API_PROXY_MAX_ANSWER);
    if (h == NULL)
        kd_oom(0);
    struct head_ctx hc = {.b = &hb};
    kd_http_each_header(q->r, add_head_line, &hc);
    for (char *l = hb.data; hc.rc == 0 && l != NULL && *l != '\0';) {
        char *eol = strstr(l, "\r\n");
        if (eol == NULL)
            break;
        *eol = '\0';
        hl = curl_slist_append(hl, l);
        l = eol + 2;
    }
    hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
    const char *cookies = kd_http_header(q->r, "Cookie");
    if (cookies != NULL) {
        other_cookies(cookies, &ck);
        if (ck.len > 0) {
            char *cl = kd_xasprintf("Cookie: %s", kd_buf_str(&ck));
            hl = curl_slist_append(hl, cl);
            free(cl);
        }
    }
    if (notebook_token(a, p, tok, sizeof(tok))) {
        auth = kd_xasprintf("Authorization: token %s", tok);
        hl = curl_slist_append(hl, auth);
    }
    size_t blen = 0;
    const char *body = kd_http_body(q->r, &blen);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, kd_http_method(q->r));
    if (strcmp(kd_http_method(q->r), "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else if (blen > 0 || strcmp(kd_http_method(q->r), "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, kd_http_method(q->r));
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_answer_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &ans);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_answer_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &ans);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, HTTP_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, NULL); /* relayed as it comes */
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    char *ctype = NULL;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctype);
    api_task_activity_note(a, p->ns, p->name, 0);
    if (ans.too_big) {
        api_error(q, 502, NULL, "task %s: the answer is larger than the proxy's %u MiB", p->name,
                  API_PROXY_MAX_ANSWER >> 20);
    } else if (cc != CURLE_OK) {
        api_error(q, 502, NULL, "task %s: its service does not answer (%s)", p->name,
                  cerr[0] ? cerr : curl_easy_strerror(cc));
    } else {
        q->status = (int)status;
        kd_http_respond(q->r, (int)status, ctype, ans.body.data != NULL ? ans.body.data : "",
                        ans.body.len);
    }
    curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    if (auth != NULL) {
        OPENSSL_cleanse(auth, strlen(auth));
        free(auth);
    }
    OPENSSL_cleanse(tok, sizeof(tok));
    kd_buf_free(&ans.body);
    kd_buf_free(&hb);
    kd_buf_free(&ck);
    free(url);
}

/* Whether the request asks for a protocol upgrade to `proto`. */
static bool upgrade_to(struct api_rq *q, const char *proto)
{
    const char *conn = kd_http_header(q->r, "Connection");
    const char *upg = kd_http_header(q->r, "Upgrade");
    return conn != NULL && upg != NULL && strcasestr(conn, "upgrade") != NULL &&
           strcasecmp(upg, proto) == 0;
}

void api_proxy(struct api_rq *q)
{
    const struct proxied *p = kd_http_ctx(q->r);
    q->route = "proxy";
    q->who = p->who;
    /* The service's base path ends with '/': send the bare name there. */
    if (strcmp(kd_http_path(q->r) + strlen(API_PROXY_PREFIX), p->name) == 0) {
        char *to = kd_http_printf(q->r, "%s%s/", API_PROXY_PREFIX, p->name);
        kd_http_add_header(q->r, "Location", to);
        api_json(q, 301, json_pack("{s:s}", "location", to));
        return;
    }
    if (strcmp(p->kind, "shell") == 0) {
        if (upgrade_to(q, "kdet-tunnel"))
            tunnel(q, p);
        else
            api_error(q, 400, NULL,
                      "task %s is a shell: reach it with 'det shell open %s' (ssh through an "
                      "Upgrade: kdet-tunnel connection)",
                      p->name, p->name);
        return;
    }
    if (upgrade_to(q, "websocket"))
        websocket(q, p);
    else if (kd_http_header(q->r, "Upgrade") != NULL)
        api_error(q, 400, "Upgrade", "only WebSocket upgrades are proxied to a %s", p->kind);
    else
        forward(q, p);
}
