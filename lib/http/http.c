/*
 * libmicrohttpd wrapper: thread-per-connection serving, request bodies
 * gathered under a cap, a per-request arena, and chunked streams whose
 * producer may block (a watch waits for the next event on its own thread).
 */
#include "http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"

#define DEFAULT_MAX_BODY (3u << 20)
#define DEFAULT_MAX_CONNS 1024u
#define ARENA_BLOCK 4096u

struct kd_http_server {
    struct MHD_Daemon *mhd;
    char *cert, *key; /* PEM, kept for MHD's lifetime */
    struct kd_http_opts opts;
    atomic_bool stopping;
    int port;
};

struct arena_block {
    struct arena_block *next;
    size_t used, size;
    max_align_t data[];
};

struct kd_http_req {
    struct kd_http_server *srv;
    struct MHD_Connection *conn;
    const char *method;
    const char *path;
    struct kd_buf body;
    bool too_big;
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

static void req_free(struct kd_http_req *r)
{
    if (r == NULL)
        return;
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

struct kd_http_server *kd_http_req_server(const struct kd_http_req *r)
{
    return r->srv;
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

void kd_http_respond_json(struct kd_http_req *r, int status, const json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    if (s == NULL)
        kd_oom(0);
    size_t n = strlen(s);
    /* A trailing newline, as the Kubernetes API server writes. */
    char *t = kd_xrealloc(s, n + 2);
    t[n] = '\n';
    t[n + 1] = '\0';
    struct MHD_Response *resp = MHD_create_response_from_buffer(n + 1, t, MHD_RESPMEM_MUST_FREE);
    set_response(r, status, "application/json", resp);
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
            return MHD_CONTENT_READER_END_OF_STREAM;
        ssize_t n = st->fn(st->ctx, buf, max);
        if (n > 0)
            return n;
        if (n < 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
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

void kd_http_respond_stream(struct kd_http_req *r, int status, const char *content_type,
                            kd_http_stream_fn fn, void *ctx, void (*free_fn)(void *))
{
    struct stream *st = kd_xcalloc(1, sizeof(*st));
    st->srv = r->srv;
    st->fn = fn;
    st->ctx = ctx;
    st->free_fn = free_fn;
    st->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci != NULL)
        st->fd = ci->connect_fd;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
                                                                  stream_read, st, stream_free);
    set_response(r, status, content_type, resp);
}

/* ---- MHD callbacks --------------------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
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
        *con_cls = r;
        ret = MHD_YES;
        goto out;
    }
    if (*upload_size > 0) {
        if (!r->too_big && kd_buf_append(&r->body, upload_data, *upload_size) < 0)
            r->too_big = true;
        *upload_size = 0;
        ret = MHD_YES;
        goto out;
    }
    if (r->too_big) {
        char msg[256];
        int n = snprintf(msg, sizeof(msg),
                         "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                         "\"status\":\"Failure\",\"message\":\"the request body is larger than "
                         "%zu bytes\",\"reason\":\"RequestEntityTooLarge\",\"code\":413}\n",
                         s->opts.max_body);
        kd_http_respond(r, 413, "application/json", msg, (size_t)n);
    } else {
        s->opts.handler(r, s->opts.ud);
    }
    if (r->resp == NULL) {
        static const char msg[] = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                                  "\"status\":\"Failure\",\"message\":\"no response\","
                                  "\"reason\":\"InternalError\",\"code\":500}\n";
        kd_http_respond(r, 500, "application/json", msg, sizeof(msg) - 1);
    }
    ret = MHD_queue_response(conn, (unsigned)r->status, r->resp);
    MHD_destroy_response(r->resp);
    r->resp = NULL;
out:
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    req_free(*con_cls);
    *con_cls = NULL;
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
    if (s->opts.max_body == 0)
        s->opts.max_body = DEFAULT_MAX_BODY;
    if (s->opts.max_conns == 0)
        s->opts.max_conns = DEFAULT_MAX_CONNS;
    const char *addr = opts->bind_addr != NULL ? opts->bind_addr : "127.0.0.1";
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opts->port)};
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
        rc = kd_seterr(err, KD_EINVAL, "http: bind address %s is not a numeric IPv4 address", addr);
        goto out;
    }
    /* Probe the port ourselves so a taken port gives a clear error (MHD only logs it). */
    int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
        int one = 1;
        setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (opts->port != 0 && bind(probe, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
            rc = -errno;
            close(probe);
            kd_seterr(err, rc, "http: cannot listen on %s:%d: %s", addr, opts->port, strerror(-rc));
            goto out;
        }
        close(probe);
    }
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
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
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sin,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
        s->opts.max_conns, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, s, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, s->cert, MHD_OPTION_HTTPS_MEM_KEY, s->key,
        MHD_OPTION_END);
    if (s->mhd == NULL) {
        rc = kd_seterr(err, KD_EIO, "http: cannot start the server on %s:%d", addr, opts->port);
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di != NULL ? di->port : opts->port;
    *out = s;
    s = NULL;
out:
    if (s != NULL) {
        free(s->cert);
        free(s->key);
    }
    free(s);
    return rc;
}

void kd_http_stop(struct kd_http_server *s)
{
    if (s == NULL)
        return;
    atomic_store(&s->stopping, true);
    if (s->mhd != NULL)
        MHD_stop_daemon(s->mhd);
    free(s->cert);
    free(s->key);
    free(s);
}
