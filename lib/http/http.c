/*
 * libmicrohttpd wrapper: thread-per-connection serving, request heads
 * screened before libmicrohttpd's own lenient framing can be used against
 * us, request bodies gathered under a cap, a per-request arena, and chunked
 * streams whose producer may block (a watch waits for the next event on its
 * own thread).
 */
#include "http/http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "http/door.h"

#define DEFAULT_MAX_BODY (3u << 20)
#define DEFAULT_MAX_CONNS 1024u
#define DEFAULT_MAX_HEADERS 100u
#define DEFAULT_HEAD_TIMEOUT_S 30u
/* Seconds between bytes once a request head has arrived (long polls, streams). */
#define REQUEST_TIMEOUT_S 600u
/* libmicrohttpd's per-connection pool: the request line and all headers must fit. */
#define CONN_MEMORY (32u << 10)
#define ARENA_BLOCK 4096u
/* Body bytes dropped past the cap before the connection is cut (see on_request). */
#define DROP_SLACK (64u << 10)
/* A refusal decided from the head (401, 403, 413...) of a request whose body is at
 * most this long is sent after the body has been read and dropped: closing with
 * unread bytes makes the kernel reset the connection, and a client still sending
 * would get the reset instead of the answer. Longer bodies, chunked ones (of unknown
 * length) and clients that sent Expect: 100-continue (they wait for the answer) get it
 * at once. */
#define DRAIN_MAX (1u << 20)
#define WHY_LEN 200
/* The raw request target kept for kd_http_target, at most. */
#define TARGET_MAX (16u << 10)

struct kd_http_server {
    struct MHD_Daemon *mhd;
    struct kd_http_door *door; /* the listening socket; hands connections to mhd */
    char *cert, *key;          /* PEM, kept for MHD's lifetime */
    struct kd_http_opts opts;
    atomic_bool stopping;
    int port;
    /* Upgraded connections still running (kd_http_respond_upgrade): stop waits for them. */
    pthread_mutex_t up_mu;
    pthread_cond_t up_cond;
    int upgrades;
};

struct arena_block {
    struct arena_block *next;
    size_t used, size;
    max_align_t data[];
};

/* One TCP connection: what the request-target check found, kept until the
 * request's first access-handler call (libmicrohttpd only hands the raw
 * target to the URI log callback, and hands the handler a decoded path that
 * a %00 has cut short). */
struct conn_ctx {
    char bad_target[WHY_LEN]; /* "" when the current request's target is fine */
    char *target;             /* the current request's raw target (malloc'd; NULL: too long) */
};

/* An upgrade answered (kd_http_respond_upgrade): who owns it is decided once, by the first of
 * the upgrade handler (it ran: its thread frees) and the request's end (it never ran). */
struct upgrade {
    struct kd_http_server *srv;
    kd_http_upgrade_fn fn;
    void *ctx;
    void (*free_fn)(void *);
    atomic_bool claimed;
    struct MHD_UpgradeResponseHandle *urh;
    int fd;
    char *extra;
    size_t extra_len;
};

struct kd_http_req {
    struct kd_http_server *srv;
    struct MHD_Connection *conn;
    const char *method;
    const char *path;
    struct kd_buf body;
    const char *target;      /* the raw request target (path and query), in the arena */
    struct upgrade *upgrade; /* an upgrade answer, until it is claimed */
    bool too_big;
    bool deferred;   /* r->resp is the answer, sent once the body has been dropped */
    size_t dropped;  /* body bytes dropped past the cap */
    bool close;      /* answer with Connection: close */
    const void *ctx; /* from the authorize hook */
    struct arena_block *arena;
    struct MHD_Response *resp;
    int status;
    /* headers added before the response exists */
    struct hdr {
        const char *name, *value;
        struct hdr *next;
    } * hdrs;
};

struct stream {
    struct kd_http_server *srv;
    kd_http_stream_fn fn;
    void *ctx;
    void (*free_fn)(void *);
    int fd;
    bool sized; /* Content-Length: an early end is an error, never a short complete answer */
};

/* ---- arena ----------------------------------------------------------------- */

void *kd_http_alloc(struct kd_http_req *r, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    struct arena_block *b = r->arena;
    if (b == NULL || b->size - b->used < n) {
        size_t size = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = kd_xmalloc(sizeof(*b) + size);
        b->size = size;
        b->used = 0;
        b->next = r->arena;
        r->arena = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

char *kd_http_strdup(struct kd_http_req *r, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = kd_http_alloc(r, n);
    memcpy(p, s, n);
    return p;
}

char *kd_http_printf(struct kd_http_req *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = kd_http_alloc(r, (size_t)(n < 0 ? 0 : n) + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)(n < 0 ? 0 : n) + 1, fmt, ap);
    va_end(ap);
    return p;
}

static void upgrade_free(struct upgrade *u)
{
    if (u->free_fn != NULL)
        u->free_fn(u->ctx);
    free(u->extra);
    free(u);
}

static void req_free(struct kd_http_req *r)
{
    if (r == NULL)
        return;
    /* An upgrade answer whose handler never ran (the client went away first). */
    if (r->upgrade != NULL && !atomic_exchange(&r->upgrade->claimed, true))
        upgrade_free(r->upgrade);
    while (r->arena != NULL) {
        struct arena_block *next = r->arena->next;
        free(r->arena);
        r->arena = next;
    }
    if (r->resp != NULL)
        MHD_destroy_response(r->resp);
    kd_buf_free(&r->body);
    free(r);
}

/* ---- accessors ------------------------------------------------------------- */

const char *kd_http_method(const struct kd_http_req *r)
{
    return r->method;
}

const char *kd_http_path(const struct kd_http_req *r)
{
    return r->path;
}

const char *kd_http_body(const struct kd_http_req *r, size_t *len)
{
    if (len != NULL)
        *len = r->body.len;
    return kd_buf_str(&r->body);
}

const char *kd_http_query(const struct kd_http_req *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *kd_http_header(const struct kd_http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *kd_http_target(const struct kd_http_req *r)
{
    return r->target;
}

struct each_header {
    kd_http_header_fn fn;
    void *ud;
};

static enum MHD_Result each_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    struct each_header *e = cls;
    e->fn(key != NULL ? key : "", value != NULL ? value : "", e->ud);
    return MHD_YES;
}

void kd_http_each_header(const struct kd_http_req *r, kd_http_header_fn fn, void *ud)
{
    struct each_header e = {fn, ud};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, each_header, &e);
}

struct kd_http_server *kd_http_req_server(const struct kd_http_req *r)
{
    return r->srv;
}

void kd_http_set_max_body(struct kd_http_req *r, size_t max)
{
    if (r->body.len == 0)
        kd_buf_init(&r->body, max);
}

void kd_http_set_ctx(struct kd_http_req *r, const void *ctx)
{
    r->ctx = ctx;
}

const void *kd_http_ctx(const struct kd_http_req *r)
{
    return r->ctx;
}

bool kd_http_stopping(const struct kd_http_server *s)
{
    return atomic_load(&((struct kd_http_server *)s)->stopping);
}

int kd_http_port(const struct kd_http_server *s)
{
    return s->port;
}

/* ---- responses ------------------------------------------------------------- */

static void respond_status(struct kd_http_req *r, int code, const char *msg);

void kd_http_add_header(struct kd_http_req *r, const char *name, const char *value)
{
    struct hdr *h = kd_http_alloc(r, sizeof(*h));
    h->name = kd_http_strdup(r, name);
    h->value = kd_http_strdup(r, value);
    h->next = r->hdrs;
    r->hdrs = h;
}

static void set_response(struct kd_http_req *r, int status, const char *ctype,
                         struct MHD_Response *resp)
{
    if (resp == NULL)
        kd_oom(0);
    if (r->resp != NULL) {
        /* A second answer is a handler bug; keep the first. */
        KD_WARN("http handler answered twice", "path=%s", kd_logq(r->path));
        MHD_destroy_response(resp);
        return;
    }
    if (ctype != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (struct hdr *h = r->hdrs; h != NULL; h = h->next)
        MHD_add_response_header(resp, h->name, h->value);
    r->resp = resp;
    r->status = status;
}

void kd_http_respond(struct kd_http_req *r, int status, const char *content_type, const void *data,
                     size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    set_response(r, status, content_type, resp);
}

/* The answer when a JSON answer cannot be encoded (NULL, or text that is not UTF-8). */
static const char unencodable[] = "{\"error\":\"the answer could not be encoded as JSON\"}\n";

/*
 * The one JSON encoder of the answers: compact, with a trailing newline as
 * the Kubernetes API server writes; gzip when the text is at least min_gzip
 * bytes and the client takes it (lib/http/gzip.c).
 */
void kd_http_respond_json_gz(struct kd_http_req *r, int status, const json_t *j, size_t min_gzip)
{
    char *s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s == NULL) {
        KD_ERROR("an answer could not be encoded as JSON; answering 500", "status=%d path=%s",
                 status, kd_logq(kd_http_path(r)));
        kd_http_respond(r, 500, "application/json", unencodable, sizeof(unencodable) - 1);
        return;
    }
    kd_http_respond_json_text_gz(r, status, s, strlen(s), min_gzip);
}

void kd_http_respond_json_text_gz(struct kd_http_req *r, int status, char *text, size_t n,
                                  size_t min_gzip)
{
    char *t = kd_xrealloc(text, n + 2);
    t[n++] = '\n';
    t[n] = '\0';
    if (n >= min_gzip && n <= UINT32_MAX / 2) {
        /* Big enough to be either: caches must key on the request's Accept-Encoding. */
        kd_http_add_header(r, "Vary", "Accept-Encoding");
        unsigned char *gz = NULL;
        size_t gzlen = 0;
        if (kd_http_accepts_gzip(kd_http_header(r, "Accept-Encoding")) &&
            kd_gzip(t, n, &gz, &gzlen) == 0) {
            free(t);
            kd_http_add_header(r, "Content-Encoding", "gzip");
            set_response(r, status, "application/json",
                         MHD_create_response_from_buffer(gzlen, gz, MHD_RESPMEM_MUST_FREE));
            return;
        }
    }
    set_response(r, status, "application/json",
                 MHD_create_response_from_buffer(n, t, MHD_RESPMEM_MUST_FREE));
}

void kd_http_respond_json(struct kd_http_req *r, int status, const json_t *j)
{
    kd_http_respond_json_gz(r, status, j, SIZE_MAX);
}

static bool peer_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream *st = cls;
    for (;;) {
        if (kd_http_stopping(st->srv))
            return st->sized ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        ssize_t n = st->fn(st->ctx, buf, max);
        if (n > 0)
            return n;
        if (n < 0)
            return st->sized ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        if (peer_gone(st->fd))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls)
{
    struct stream *st = cls;
    if (st->free_fn != NULL)
        st->free_fn(st->ctx);
    free(st);
}

static void respond_stream(struct kd_http_req *r, int status, const char *content_type, bool sized,
                           uint64_t length, kd_http_stream_fn fn, void *ctx,
                           void (*free_fn)(void *))
{
    struct stream *st = kd_xcalloc(1, sizeof(*st));
    st->sized = sized;
    st->srv = r->srv;
    st->fn = fn;
    st->ctx = ctx;
    st->free_fn = free_fn;
    st->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci != NULL)
        st->fd = ci->connect_fd;
    struct MHD_Response *resp = MHD_create_response_from_callback(
        sized ? length : MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, st, stream_free);
    set_response(r, status, content_type, resp);
}

void kd_http_respond_stream(struct kd_http_req *r, int status, const char *content_type,
                            kd_http_stream_fn fn, void *ctx, void (*free_fn)(void *))
{
    respond_stream(r, status, content_type, false, 0, fn, ctx, free_fn);
}

void kd_http_respond_sized(struct kd_http_req *r, int status, const char *content_type,
                           uint64_t length, kd_http_stream_fn fn, void *ctx,
                           void (*free_fn)(void *))
{
    respond_stream(r, status, content_type, true, length, fn, ctx, free_fn);
}

/* The upgraded connection's own thread: the handler, then the close, then the count. */
static void *upgrade_main(void *p)
{
    struct upgrade *u = p;
    struct kd_http_server *s = u->srv;
    u->fn(u->ctx, u->fd, u->extra, u->extra_len, s);
    MHD_upgrade_action(u->urh, MHD_UPGRADE_ACTION_CLOSE);
    upgrade_free(u);
    pthread_mutex_lock(&s->up_mu);
    s->upgrades--;
    pthread_cond_broadcast(&s->up_cond);
    pthread_mutex_unlock(&s->up_mu);
    return NULL;
}

/* libmicrohttpd's upgrade handler: it must return at once (with TLS, the connection's thread
 * then relays between the socket pair and TLS), so the work goes to a thread of its own. */
static void on_upgrade(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    (void)conn;
    (void)req_cls;
    struct upgrade *u = cls;
    pthread_t t;
    pthread_attr_t at;
    if (atomic_exchange(&u->claimed, true)) { /* cannot happen: the request is still live */
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return;
    }
    u->urh = urh;
    u->fd = sock;
    if (extra_in_size > 0) {
        u->extra = kd_xmalloc(extra_in_size);
        memcpy(u->extra, extra_in, extra_in_size);
        u->extra_len = extra_in_size;
    }
    pthread_mutex_lock(&u->srv->up_mu);
    u->srv->upgrades++;
    pthread_mutex_unlock(&u->srv->up_mu);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, upgrade_main, u) != 0) {
        KD_WARN("cannot start an upgraded connection's thread");
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        struct kd_http_server *s = u->srv;
        upgrade_free(u);
        pthread_mutex_lock(&s->up_mu);
        s->upgrades--;
        pthread_cond_broadcast(&s->up_cond);
        pthread_mutex_unlock(&s->up_mu);
    }
    pthread_attr_destroy(&at);
}

void kd_http_respond_upgrade(struct kd_http_req *r, const char *protocol, kd_http_upgrade_fn fn,
                             void *ctx, void (*free_fn)(void *))
{
    struct upgrade *u = kd_xcalloc(1, sizeof(*u));
    u->srv = r->srv;
    u->fn = fn;
    u->ctx = ctx;
    u->free_fn = free_fn;
    u->fd = -1;
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, u);
    if (resp == NULL) {
        upgrade_free(u);
        respond_status(r, 500, "this server cannot upgrade connections");
        return;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, protocol);
    set_response(r, 101, NULL, resp);
    if (r->resp == resp)
        r->upgrade = u;
    else
        upgrade_free(u); /* a second answer: the first one stays */
}

/* ---- request-head screening (pure) ------------------------------------------ */

/* libmicrohttpd 0.9.75 frames leniently: with both Content-Length and
 * Transfer-Encoding, or two Content-Lengths, it picks one and serves the
 * leftover bytes as the next request; an unknown Transfer-Encoding makes it
 * read until the peer closes; a %00 in the path silently cuts the decoded
 * path short. These checks run on the head alone, before libmicrohttpd reads
 * any body byte, and every refusal closes the connection. */

struct head_line {
    const char *name, *value;
};

/* "%.40s" of s with bytes outside printable ASCII shown as '?'. */
static void printable(const char *s, char *out, size_t outlen)
{
    size_t i = 0;
    for (; s[i] != '\0' && i + 1 < outlen && i < 40; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[i] = '\0';
}

/*
 * The verdict on a request head: 0 when it may be served, else the HTTP
 * status to answer with (then close), and why.
 */
static int screen_head(const char *version, const struct head_line *h, size_t n, size_t max_headers,
                       char *why, size_t whylen)
{
    int status = 0;
    const char *cl = NULL, *te = NULL;
    size_t ncl = 0, nte = 0;
    char shown[48];
    why[0] = '\0';
    if (n > max_headers) {
        snprintf(why, whylen, "the request has more than %zu header lines", max_headers);
        status = 431;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *c = (const unsigned char *)h[i].name;
        bool token = *c != '\0';
        for (; *c != '\0' && token; c++)
            token = kd_http__tchar(*c);
        if (!token) {
            printable(h[i].name, shown, sizeof(shown));
            snprintf(why, whylen, "header name \"%s\" is not a token", shown);
            status = 400;
            goto out;
        }
        if (strcasecmp(h[i].name, "Content-Length") == 0) {
            ncl++;
            cl = h[i].value;
        } else if (strcasecmp(h[i].name, "Transfer-Encoding") == 0) {
            nte++;
            te = h[i].value;
        }
    }
    status = 400;
    if (ncl > 1) {
        snprintf(why, whylen,
                 "more than one Content-Length header: the body's length is ambiguous");
    } else if (nte > 1) {
        snprintf(why, whylen, "more than one Transfer-Encoding header");
    } else if (cl != NULL && te != NULL) {
        snprintf(why, whylen,
                 "both Content-Length and Transfer-Encoding: the body's length is ambiguous");
    } else if (cl != NULL &&
               (cl[0] == '\0' || strlen(cl) > 18 || strspn(cl, "0123456789") != strlen(cl))) {
        printable(cl, shown, sizeof(shown));
        snprintf(why, whylen, "Content-Length \"%s\" is not a decimal number", shown);
    } else if (te != NULL && version != NULL && strcmp(version, "HTTP/1.0") == 0) {
        snprintf(why, whylen, "Transfer-Encoding in an HTTP/1.0 request");
    } else if (te != NULL && strcasecmp(te, "chunked") != 0) {
        printable(te, shown, sizeof(shown));
        snprintf(why, whylen, "Transfer-Encoding \"%s\" is not supported; only chunked is", shown);
        status = 501;
    } else {
        status = 0;
    }
out:
    return status;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
}

/*
 * The verdict on a raw request target (path and query, not yet decoded):
 * 0, or 400 with why when it holds a raw space or control byte, when its
 * path holds a percent-encoded control byte, or its query a %00 (either
 * would cut a decoded name short or smuggle a line break into it).
 */
static int screen_target(const char *raw, char *why, size_t whylen)
{
    int status = 0;
    bool query = false;
    why[0] = '\0';
    for (size_t i = 0; raw[i] != '\0' && status == 0; i++) {
        unsigned c = (unsigned char)raw[i];
        bool enc =
            c == '%' && isxdigit((unsigned char)raw[i + 1]) && isxdigit((unsigned char)raw[i + 2]);
        if (c == '?')
            query = true;
        if (c <= 0x20 || c == 0x7f) {
            snprintf(why, whylen, "the request target holds a raw %s (0x%02X) at byte %zu",
                     c == 0x20 ? "space" : "control byte", c, i);
            status = 400;
        } else if (enc) {
            c = (unsigned)(hexval(raw[i + 1]) * 16 + hexval(raw[i + 2]));
            if ((c < 0x20 || c == 0x7f) && (!query || c == 0)) {
                snprintf(why, whylen, "the request %s holds %s (%%%02X) at byte %zu of the target",
                         query ? "query" : "path", c == 0 ? "a NUL byte" : "a control byte", c, i);
                status = 400;
            }
        }
    }
    return status;
}

/* ---- MHD callbacks --------------------------------------------------------- */

static const char *reason_of(int code)
{
    switch (code) {
    case 400: return "BadRequest";
    case 408: return "Timeout";
    case 413: return "RequestEntityTooLarge";
    case 414: return "RequestURITooLong";
    case 431: return "RequestHeaderFieldsTooLarge";
    case 501: return "NotImplemented";
    default: return "InternalError";
    }
}

json_t *kd_http_status_json(int code, const char *msg)
{
    return json_pack("{s:s,s:s,s:{},s:s,s:s,s:s,s:i}", "kind", "Status", "apiVersion", "v1",
                     "metadata", "status", "Failure", "message", msg, "reason", reason_of(code),
                     "code", code);
}

static void respond_status(struct kd_http_req *r, int code, const char *msg)
{
    json_t *j = kd_http_status_json(code, msg);
    kd_http_respond_json(r, code, j);
    json_decref(j);
}

struct collect {
    struct head_line *h;
    size_t n, max;
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    struct collect *c = cls;
    if (c->n < c->max) {
        c->h[c->n].name = key != NULL ? key : "";
        c->h[c->n].value = value != NULL ? value : "";
    }
    c->n++;
    return MHD_YES;
}

static struct conn_ctx *conn_ctx_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

static void set_timeout(struct MHD_Connection *conn, unsigned seconds)
{
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

/* The request head has arrived: screen it, ask the authorize hook, check the
 * announced body length against the cap. May leave an answer in r->resp. */
static void on_head(struct kd_http_req *r, const char *version)
{
    struct kd_http_server *s = r->srv;
    struct conn_ctx *cc = conn_ctx_of(r->conn);
    char why[WHY_LEN] = "";
    int code = 0;
    size_t max = s->opts.max_headers + 1;
    struct collect c = {.h = kd_http_alloc(r, max * sizeof(*c.h)), .max = max};
    set_timeout(r->conn, REQUEST_TIMEOUT_S);
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect_header, &c);
    if (cc != NULL && cc->bad_target[0] != '\0') {
        snprintf(why, sizeof(why), "%s", cc->bad_target);
        code = 400;
    } else {
        code = screen_head(version, c.h, c.n, s->opts.max_headers, why, sizeof(why));
    }
    if (cc != NULL)
        cc->bad_target[0] = '\0';
    if (code != 0) {
        KD_INFO("http request refused", "method=%s status=%d reason=%s", kd_logq(r->method), code,
                kd_logq(why));
        r->close = true;
        respond_status(r, code, why);
        return;
    }
    if (s->opts.authorize != NULL)
        s->opts.authorize(r, s->opts.ud);
    const char *cl = kd_http_header(r, "Content-Length");
    unsigned long long len = cl != NULL ? strtoull(cl, NULL, 10) : 0;
    if (r->resp == NULL && len > r->body.max) {
        snprintf(why, sizeof(why), "the request body is larger than %zu bytes", r->body.max);
        respond_status(r, 413, why);
    }
    if (r->resp == NULL)
        return;
    /* The connection is closed after an answer decided before the body stage; a short
     * body is read and dropped first (DRAIN_MAX). */
    r->close = true;
    const char *expect = kd_http_header(r, "Expect");
    if (len > 0 && len <= DRAIN_MAX &&
        (expect == NULL || strcasecmp(expect, "100-continue") != 0)) {
        r->deferred = true;
        r->too_big = true; /* drop what comes */
        kd_buf_free(&r->body);
    }
}

/* Whether a request whose body is being dropped has sent more than it may. */
static bool dropped_too_much(const struct kd_http_req *r)
{
    return r->deferred ? r->dropped > DRAIN_MAX : r->dropped > r->body.max + DROP_SLACK;
}

static enum MHD_Result queue(struct kd_http_req *r)
{
    if (r->close)
        MHD_add_response_header(r->resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)r->status, r->resp);
    MHD_destroy_response(r->resp);
    r->resp = NULL;
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    struct kd_http_server *s = cls;
    struct kd_http_req *r = *con_cls;
    enum MHD_Result ret = MHD_NO;
    if (r == NULL) {
        r = kd_xcalloc(1, sizeof(*r));
        r->srv = s;
        r->conn = conn;
        kd_buf_init(&r->body, s->opts.max_body);
        r->method = kd_http_strdup(r, method);
        r->path = kd_http_strdup(r, url);
        struct conn_ctx *cc = conn_ctx_of(conn);
        r->target = kd_http_strdup(r, cc != NULL && cc->target != NULL ? cc->target : url);
        *con_cls = r;
        on_head(r, version);
        ret = r->resp != NULL && !r->deferred ? queue(r) : MHD_YES;
        goto out;
    }
    if (*upload_size > 0) {
        if (r->too_big)
            r->dropped += *upload_size;
        else if (kd_buf_append(&r->body, upload_data, *upload_size) < 0) {
            r->too_big = true;
            kd_buf_free(&r->body);
        }
        *upload_size = 0;
        ret = MHD_YES;
        /* A chunked body past the cap is dropped so a slightly long one still gets its 413;
         * one that goes on past another cap's worth (and DROP_SLACK) is cut off: libmicrohttpd
         * cannot answer in the middle of a body, so the connection is closed unanswered. */
        if (dropped_too_much(r)) {
            KD_INFO("http request body cut off", "method=%s path=%s cap=%zu", kd_logq(r->method),
                    kd_logq(r->path), r->body.max);
            ret = MHD_NO;
        }
        goto out;
    }
    if (r->deferred) {
        /* the answer decided from the head */
    } else if (r->too_big) {
        char msg[WHY_LEN];
        snprintf(msg, sizeof(msg), "the request body is larger than %zu bytes", r->body.max);
        respond_status(r, 413, msg);
    } else {
        s->opts.handler(r, s->opts.ud);
    }
    if (r->resp == NULL)
        respond_status(r, 500, "no response");
    ret = queue(r);
out:
    return ret;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    struct conn_ctx *cc = conn_ctx_of(conn);
    if (cc != NULL && uri != NULL) {
        (void)screen_target(uri, cc->bad_target, sizeof(cc->bad_target));
        free(cc->target);
        cc->target = strlen(uri) <= TARGET_MAX ? kd_xstrdup(uri) : NULL;
    }
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct kd_http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = kd_xcalloc(1, sizeof(struct conn_ctx));
        set_timeout(conn, s->opts.head_timeout_s);
    } else {
        struct conn_ctx *cc = *socket_context;
        if (cc != NULL)
            free(cc->target);
        free(cc);
        *socket_context = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct kd_http_server *s = cls;
    req_free(*con_cls);
    *con_cls = NULL;
    /* Kept alive: the next request head gets the short timeout again. */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        set_timeout(conn, s->opts.head_timeout_s);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    KD_DEBUG("http server", "detail=%s", kd_logq(line));
}

int kd_http_start(const struct kd_http_opts *opts, struct kd_http_server **out, char *err)
{
    int rc = 0;
    struct kd_http_server *s = NULL;
    *out = NULL;
    if (opts == NULL || opts->handler == NULL || opts->port < 0 || opts->port > 65535) {
        rc = kd_seterr(err, KD_EINVAL, "http: a handler and a port in 0..65535 are required");
        goto out;
    }
    s = kd_xcalloc(1, sizeof(*s));
    s->opts = *opts;
    pthread_mutex_init(&s->up_mu, NULL);
    pthread_cond_init(&s->up_cond, NULL);
    if (s->opts.max_body == 0)
        s->opts.max_body = DEFAULT_MAX_BODY;
    if (s->opts.max_conns == 0)
        s->opts.max_conns = DEFAULT_MAX_CONNS;
    if (s->opts.max_headers == 0)
        s->opts.max_headers = DEFAULT_MAX_HEADERS;
    if (s->opts.head_timeout_s == 0)
        s->opts.head_timeout_s = DEFAULT_HEAD_TIMEOUT_S;
    const char *addr = opts->bind_addr != NULL ? opts->bind_addr : "127.0.0.1";
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opts->port)};
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
        rc = kd_seterr(err, KD_EINVAL, "http: bind address %s is not a numeric IPv4 address", addr);
        goto out;
    }
    /* The door owns the listening socket and hands connections over (door.h). */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC | MHD_ALLOW_UPGRADE;
    bool tls = opts->tls_cert_pem != NULL && opts->tls_key_pem != NULL;
    if (tls) {
        if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
            rc = kd_seterr(err, KD_ENOTSUP, "http: this libmicrohttpd was built without TLS");
            goto out;
        }
        s->cert = kd_xstrdup(opts->tls_cert_pem);
        s->key = kd_xstrdup(opts->tls_key_pem);
        flags |= MHD_USE_TLS;
    }
    /* Without TLS the option list ends before the certificate pair. */
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_LIMIT, s->opts.max_conns, MHD_OPTION_CONNECTION_TIMEOUT,
        REQUEST_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END,
        s->cert, MHD_OPTION_HTTPS_MEM_KEY, s->key, MHD_OPTION_END);
    if (s->mhd == NULL) {
        rc = kd_seterr(err, KD_EIO, "http: cannot start the server on %s:%d", addr, opts->port);
        goto out;
    }
    if ((rc = kd_http__door_start(&sin, !tls, s->opts.head_timeout_s, s->mhd, &s->door, err)) !=
        0) {
        MHD_stop_daemon(s->mhd);
        goto out;
    }
    s->port = kd_http__door_port(s->door);
    *out = s;
    s = NULL;
out:
    if (s != NULL) {
        free(s->cert);
        free(s->key);
        pthread_mutex_destroy(&s->up_mu);
        pthread_cond_destroy(&s->up_cond);
    }
    free(s);
    return rc;
}

void kd_http_stop(struct kd_http_server *s)
{
    if (s == NULL)
        return;
    atomic_store(&s->stopping, true);
    kd_http__door_stop(s->door);
    /* Upgraded connections see kd_http_stopping and end; libmicrohttpd wants them closed before
     * it stops. */
    pthread_mutex_lock(&s->up_mu);
    while (s->upgrades > 0)
        pthread_cond_wait(&s->up_cond, &s->up_mu);
    pthread_mutex_unlock(&s->up_mu);
    if (s->mhd != NULL)
        MHD_stop_daemon(s->mhd);
    pthread_mutex_destroy(&s->up_mu);
    pthread_cond_destroy(&s->up_cond);
    free(s->cert);
    free(s->key);
    free(s);
}
