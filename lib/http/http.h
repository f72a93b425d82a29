/*
 * A small HTTP/1.1 server on top of libmicrohttpd: one thread per
 * connection, a garbage first request line refused (400) before
 * libmicrohttpd sees it, request heads screened for ambiguous framing
 * before anything else (400/501 and close), an optional pre-body hook that
 * may answer or set the body cap from the head alone, the whole request
 * body read (under a hard cap) before the handler runs, a per-request arena freed once when the
 * request ends, JSON responses, chunked streaming responses for
 * long-lived streams such as Kubernetes watches, and upgraded connections
 * (101 Switching Protocols: WebSocket, tunnels) on threads of their own. Generic: kdet-local's API
 * server and the controller's HTTP API both sit on it.
 */
#ifndef KD_HTTP_HTTP_H
#define KD_HTTP_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"

struct kd_http_server;
struct kd_http_req;

/**
 * Called once per request, on the connection's thread, after the whole body
 * has arrived. It must answer with exactly one kd_http_respond* call; when it
 * does not, the client gets 500. Handlers run concurrently on many threads.
 */
typedef void (*kd_http_handler)(struct kd_http_req *req, void *ud);

/**
 * The pre-body hook: called once per request, on the connection's thread,
 * when the request head (method, path, query, headers) has arrived and
 * passed the framing checks, before any body byte is read. It sees the same
 * accessors as a handler except kd_http_body (still empty). It may:
 *  - answer with one kd_http_respond* call: the answer goes out at once with
 *    Connection: close, the handler is not called, the body is never read
 *    and the connection is closed (libmicrohttpd ends it after an answer
 *    given before the body stage, body or not);
 *  - set this request's body cap with kd_http_set_max_body (a body announced
 *    larger gets 413 before it is read);
 *  - leave a pointer for the handler with kd_http_set_ctx;
 *  - or do nothing: the request goes on under the server's cap.
 */
typedef void (*kd_http_authorize_fn)(struct kd_http_req *req, void *ud);

struct kd_http_opts {
    const char *bind_addr; /* numeric IPv4 address; NULL means 127.0.0.1 */
    int port;              /* 0 picks a free port (see kd_http_port) */
    /* Request body cap in bytes; 0 means 3 MiB. A Content-Length over it gets 413 without the
     * body being kept: a body of at most 1 MiB is read and dropped first, so that the client
     * reads the answer instead of a reset (the same for the authorize hook's answers); a
     * longer one, or one announced with Expect: 100-continue, gets it at once. A chunked body
     * past the cap is dropped and gets 413, or, past twice the cap plus 64 KiB, the
     * connection is closed unanswered. */
    size_t max_body;
    unsigned max_conns;   /* 0 means 1024 */
    unsigned max_headers; /* request header lines; more get 431; 0 means 100 */
    /* Seconds allowed for a new connection's request line, and of silence while a later
     * request head is awaited (an idle kept-alive connection); then the connection is closed
     * (with 408 when a first request line was begun). 0 means 30. Once a head has arrived
     * the request may take up to 600 s between bytes (long polls, streams). */
    unsigned head_timeout_s;
    kd_http_handler handler;
    kd_http_authorize_fn authorize; /* optional, see above */
    void *ud;
    const char *tls_cert_pem; /* with tls_key_pem: serve HTTPS (PEM strings, copied) */
    const char *tls_key_pem;
};

/**
 * Start listening and serving on background threads. On success *out is the
 * server (stop it with kd_http_stop). Returns 0, KD_EINVAL or -errno (the
 * port is taken: -EADDRINUSE), with detail in err (KD_ERRLEN, optional).
 */
int kd_http_start(const struct kd_http_opts *opts, struct kd_http_server **out, char *err) KD_WUR;

/** The TCP port the server listens on. */
int kd_http_port(const struct kd_http_server *s);

/** True once kd_http_stop has begun: long-running stream callbacks should end. */
bool kd_http_stopping(const struct kd_http_server *s);

/**
 * Stop accepting, end open streams (their callbacks see kd_http_stopping),
 * wait for every connection thread and free the server. NULL-safe. Blocks.
 */
void kd_http_stop(struct kd_http_server *s);

/* ---- the request (valid only inside the handler / stream) ---------------- */

const char *kd_http_method(const struct kd_http_req *r);
/** The path, percent-decoded, without the query string. */
const char *kd_http_path(const struct kd_http_req *r);
/** The body (NUL-terminated, "" when none) and its length. */
const char *kd_http_body(const struct kd_http_req *r, size_t *len);
/** A query argument (decoded), or NULL when absent. */
const char *kd_http_query(const struct kd_http_req *r, const char *key);
/** A request header (case-insensitive name), or NULL when absent. */
const char *kd_http_header(const struct kd_http_req *r, const char *name);
struct kd_http_server *kd_http_req_server(const struct kd_http_req *r);
/** The request target as received (path and query, not decoded; at most 16 KiB, else the
 * decoded path). */
const char *kd_http_target(const struct kd_http_req *r);
/** Called for each request header, in the order received. */
typedef void (*kd_http_header_fn)(const char *name, const char *value, void *ud);
/** Walk the request's headers (fn must not keep the strings). */
void kd_http_each_header(const struct kd_http_req *r, kd_http_header_fn fn, void *ud);

/**
 * Set this request's body cap (bytes), overriding kd_http_opts.max_body.
 * Only meaningful in the authorize hook, before the body is read.
 */
void kd_http_set_max_body(struct kd_http_req *r, size_t max);
/** A pointer the authorize hook leaves for the handler (not owned; NULL by default). */
void kd_http_set_ctx(struct kd_http_req *r, const void *ctx);
const void *kd_http_ctx(const struct kd_http_req *r);

/**
 * Memory from the request's arena: freed all at once when the request ends.
 * Aborts on out-of-memory like kd_xmalloc. Not thread-safe per request.
 */
void *kd_http_alloc(struct kd_http_req *r, size_t n);
char *kd_http_strdup(struct kd_http_req *r, const char *s);
char *kd_http_printf(struct kd_http_req *r, const char *fmt, ...) KD_PRINTF(2, 3);

/** Add a response header; call before kd_http_respond*. */
void kd_http_add_header(struct kd_http_req *r, const char *name, const char *value);

/** Answer with a copy of `len` bytes of `data`. */
void kd_http_respond(struct kd_http_req *r, int status, const char *content_type, const void *data,
                     size_t len);

/** Answer with `j` serialised compactly as application/json. Does not steal j. */
void kd_http_respond_json(struct kd_http_req *r, int status, const json_t *j);

/**
 * A refusal as a Kubernetes Status object: kind Status, status Failure,
 * `code`, `msg`, and the reason kube-apiserver gives that code
 * (BadRequest, Timeout, RequestEntityTooLarge, RequestURITooLong,
 * RequestHeaderFieldsTooLarge, NotImplemented; InternalError otherwise).
 * The caller owns the result; NULL only when out of memory.
 */
json_t *kd_http_status_json(int code, const char *msg);

/**
 * kd_http_respond_json, gzip-compressed (Content-Encoding: gzip) when the
 * request's Accept-Encoding takes gzip and the text is at least min_gzip
 * bytes; an answer that could be either says Vary: Accept-Encoding.
 * kd_http_respond_json is this with no gzip. JSON that cannot be encoded
 * (NULL, text that is not UTF-8) is a logged 500. Does not steal j.
 */
void kd_http_respond_json_gz(struct kd_http_req *r, int status, const json_t *j, size_t min_gzip);

/**
 * kd_http_respond_json_gz for JSON text the caller wrote itself (n bytes,
 * no trailing newline: one is added), for answers too big to build as a
 * json_t first. Steals text (malloc'd); does not check that it is JSON.
 */
void kd_http_respond_json_text_gz(struct kd_http_req *r, int status, char *text, size_t n,
                                  size_t min_gzip);

/**
 * Whether an Accept-Encoding value takes gzip: "gzip" or "x-gzip" named
 * with a q other than 0 (its own q decides), else "*" with a q other than
 * 0. NULL: no. Pure.
 */
bool kd_http_accepts_gzip(const char *accept_encoding);

/**
 * The next element of a comma-separated header value at *s (Accept-Encoding,
 * If-None-Match), blanks trimmed, into tok (cut at toklen - 1); *s moves
 * past it. false when none is left. Pure.
 */
bool kd_http_next_item(const char **s, char *tok, size_t toklen);

/** data[0..n) as one gzip member into *out (malloc'd), *outlen bytes: 0, KD_ENOMEM or KD_EIO. */
int kd_gzip(const void *data, size_t n, unsigned char **out, size_t *outlen);

/**
 * The one gzip member data[0..n) decompressed into *out (malloc'd, NUL
 * after its *outlen bytes): 0; KD_ETOOBIG when it holds more than max
 * bytes (read no further than that); KD_EPARSE when it is not one whole
 * gzip member; KD_ENOMEM.
 */
int kd_gunzip(const void *data, size_t n, size_t max, unsigned char **out, size_t *outlen);

/**
 * Fill up to `max` bytes of the next chunk into buf. Return the number of
 * bytes (> 0), 0 when there is nothing yet (the callback is called again at
 * once, so it should wait up to about a second itself), or -1 to end the
 * stream. Runs on the connection's thread.
 */
typedef ssize_t (*kd_http_stream_fn)(void *ctx, char *buf, size_t max);

/**
 * Answer with a chunked stream produced by fn. free_fn(ctx) runs exactly
 * once when the stream ends, whether the client went away, fn ended it, or
 * the server stopped (fn is not called after kd_http_stopping turns true).
 */
void kd_http_respond_stream(struct kd_http_req *r, int status, const char *content_type,
                            kd_http_stream_fn fn, void *ctx, void (*free_fn)(void *));

/**
 * Answer with exactly `length` bytes that fn produces (Content-Length:
 * length; fn as for kd_http_respond_stream, called again while it gives
 * 0). A body that cannot be whole, because fn returns -1 before `length`
 * bytes or the server stops, is cut off and the connection closed, so the
 * client sees a short answer, never a complete one. free_fn(ctx) runs
 * exactly once when the answer ends, however it ends. For downloads.
 */
void kd_http_respond_sized(struct kd_http_req *r, int status, const char *content_type,
                           uint64_t length, kd_http_stream_fn fn, void *ctx,
                           void (*free_fn)(void *));

/**
 * The upgraded connection's work, on a thread of its own once the 101
 * answer went out: fd is the client's side (with TLS, one end of a socket
 * pair the server encrypts; read, write, shutdown, never close), extra the
 * bytes the client sent after its request head. It should end when
 * kd_http_stopping(srv) turns true (kd_http_stop waits for it). When it
 * returns the connection is closed.
 */
typedef void (*kd_http_upgrade_fn)(void *ctx, int fd, const char *extra, size_t extra_len,
                                   struct kd_http_server *srv);

/**
 * Answer 101 Switching Protocols with `Upgrade: protocol` and the headers
 * added with kd_http_add_header (libmicrohttpd adds Connection: Upgrade),
 * then run fn(ctx, ...) on a thread of its own. free_fn(ctx) runs exactly
 * once: after fn, or when the client went away before the upgrade.
 */
void kd_http_respond_upgrade(struct kd_http_req *r, const char *protocol, kd_http_upgrade_fn fn,
                             void *ctx, void (*free_fn)(void *));

#endif
