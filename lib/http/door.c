/*
 * The front door: accept, peek at the request line without consuming it,
 * then hand the socket to libmicrohttpd (which reads the same bytes) or
 * refuse it. One thread watches the listening socket and every connection
 * whose first line has not arrived yet.
 */
#include "http/door.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/time.h"
#include "http/http.h"

#ifndef DOOR_PENDING      /* tests include this file with a small one */
#define DOOR_PENDING 1024 /* connections whose first line is awaited; past it, the oldest goes */
#endif
#define DOOR_PEEK 8192 /* bytes of a request line looked at */
#define DOOR_METHOD_MAX 32

struct pending {
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
    int64_t deadline_ms;
    size_t seen; /* bytes peeked so far */
};

struct kd_http_door {
    int lfd;
    int wake[2];
    pthread_t thr;
    bool started;
    bool screen;
    unsigned timeout_s;
    struct MHD_Daemon *mhd;
    struct pending p[DOOR_PENDING];
    size_t n;
    int port;
};

enum line_verdict { LINE_MORE, LINE_OK, LINE_BAD };

bool kd_http__tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/*
 * The verdict on the first n bytes a connection sent: LINE_OK once a whole
 * request line (method SP target SP HTTP/d.d CRLF) is there, LINE_MORE while
 * what came is a valid start of one, LINE_BAD with why as soon as it cannot
 * be one. Empty lines before it are allowed (RFC 9112 section 2.2).
 */
static enum line_verdict screen_line(const char *b, size_t n, char *why, size_t whylen)
{
    static const char proto[] = "HTTP/d.d";
    size_t i = 0, start;
    why[0] = '\0';
    /* Empty lines (CRLF or LF) before it are skipped; a CR that ends no line is not one. */
    for (;;) {
        if (i < n && b[i] == '\n')
            i++;
        else if (i + 1 < n && b[i] == '\r' && b[i + 1] == '\n')
            i += 2;
        else if (i + 1 == n && b[i] == '\r')
            return LINE_MORE;
        else
            break;
    }
    for (start = i; i < n && kd_http__tchar((unsigned char)b[i]) && i - start <= DOOR_METHOD_MAX;
         i++)
        ;
    if (i - start > DOOR_METHOD_MAX) {
        snprintf(why, whylen, "the request line starts with no method (over %d letters)",
                 DOOR_METHOD_MAX);
        return LINE_BAD;
    }
    if (i == n)
        return LINE_MORE;
    if (i == start) {
        snprintf(why, whylen, "the request line does not start with a method (byte 0x%02X at %zu)",
                 (unsigned char)b[i], i);
        return LINE_BAD;
    }
    if (b[i] != ' ') {
        snprintf(why, whylen, "the request line has no space after its method (byte 0x%02X at %zu)",
                 (unsigned char)b[i], i);
        return LINE_BAD;
    }
    for (start = ++i; i < n && (unsigned char)b[i] > 0x20 && b[i] != 0x7f; i++)
        ;
    if (i == n)
        return LINE_MORE;
    if (i == start || b[i] != ' ') {
        snprintf(why, whylen,
                 "the request line has no target and HTTP version (byte 0x%02X at %zu)",
                 (unsigned char)b[i], i);
        return LINE_BAD;
    }
    i++;
    for (size_t k = 0; k < sizeof(proto) - 1; k++, i++) {
        if (i == n)
            return LINE_MORE;
        bool ok = proto[k] == 'd' ? (b[i] >= '0' && b[i] <= '9') : b[i] == proto[k];
        if (!ok) {
            snprintf(why, whylen,
                     "the request line does not end in HTTP/major.minor (byte 0x%02X at %zu)",
                     (unsigned char)b[i], i);
            return LINE_BAD;
        }
    }
    if (i < n && b[i] == '\r')
        i++;
    if (i == n)
        return LINE_MORE;
    if (b[i] != '\n') {
        snprintf(why, whylen,
                 "the request line does not end after its HTTP version (byte 0x%02X at %zu)",
                 (unsigned char)b[i], i);
        return LINE_BAD;
    }
    return LINE_OK;
}

/* Answer `code` with a Status body, drain what the client sent, and close. */
static void refuse(int fd, int code, const char *why)
{
    json_t *j = kd_http_status_json(code, why);
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (body != NULL) {
        char *msg =
            kd_xasprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                         "Connection: close\r\nContent-Length: %zu\r\n\r\n%s\n",
                         code, MHD_get_reason_phrase_for((unsigned)code), strlen(body) + 1, body);
        (void)!send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
        free(msg);
        free(body);
    }
    /* Read what is there so closing sends FIN, not a reset that could destroy the answer. */
    char junk[4096];
    for (int i = 0; i < 16 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++)
        ;
    shutdown(fd, SHUT_WR);
    close(fd);
}

static void set_lowat(int fd, int bytes)
{
    setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes));
}

static void hand_over(struct kd_http_door *d, struct pending *p)
{
    set_lowat(p->fd, 1);
    /* On failure (connection limit) libmicrohttpd has closed the socket itself. */
    (void)MHD_add_connection(d->mhd, p->fd, (struct sockaddr *)&p->addr, p->alen);
    p->fd = -1;
}

/*
 * Look at what p sent so far: hand it over, refuse it, or wait for more
 * (false: done with p). hup: the peer has shut its side, so no more comes.
 */
static bool examine(struct kd_http_door *d, struct pending *p, bool hup)
{
    char buf[DOOR_PEEK], why[200];
    ssize_t n = recv(p->fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    if (n <= 0) {
        close(p->fd);
        p->fd = -1;
        return false;
    }
    enum line_verdict v = screen_line(buf, (size_t)n, why, sizeof(why));
    if (v == LINE_BAD) {
        KD_INFO("http connection refused", "status=400 reason=%s", kd_logq(why));
        refuse(p->fd, 400, why);
        p->fd = -1;
        return false;
    }
    if (v == LINE_OK) {
        hand_over(d, p);
        return false;
    }
    if ((size_t)n == sizeof(buf)) {
        /* libmicrohttpd would close a line too long for its memory unanswered. */
        snprintf(why, sizeof(why), "the request line is longer than %d bytes", DOOR_PEEK);
        KD_INFO("http connection refused", "status=414 reason=%s", kd_logq(why));
        refuse(p->fd, 414, why);
        p->fd = -1;
        return false;
    }
    if (hup) {
        snprintf(why, sizeof(why),
                 "the connection was shut after %zd bytes, inside the request line", n);
        refuse(p->fd, 400, why);
        p->fd = -1;
        return false;
    }
    /* Wake up only when more than what was peeked has arrived (or the peer closes). */
    p->seen = (size_t)n;
    set_lowat(p->fd, (int)n + 1);
    return true;
}

static void accept_one(struct kd_http_door *d)
{
    struct pending p = {.fd = -1, .alen = sizeof(p.addr)};
    p.fd = accept4(d->lfd, (struct sockaddr *)&p.addr, &p.alen, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (p.fd < 0)
        return;
    if (!d->screen) {
        hand_over(d, &p);
        return;
    }
    p.deadline_ms = kd_mono_ms() + (int64_t)d->timeout_s * 1000;
    if (d->n == DOOR_PENDING) {
        /* Full (a flood of silent connections): the one waited on longest makes room, so new
         * clients are never stuck behind it. */
        size_t old = 0;
        for (size_t i = 1; i < d->n; i++)
            if (d->p[i].deadline_ms < d->p[old].deadline_ms)
                old = i;
        close(d->p[old].fd);
        d->p[old] = d->p[--d->n];
    }
    d->p[d->n] = p;
    if (examine(d, &d->p[d->n], false))
        d->n++;
}

static void *door_main(void *arg)
{
    struct kd_http_door *d = arg;
    struct pollfd pf[2 + DOOR_PENDING];
    for (;;) {
        int64_t now = kd_mono_ms(), wait = 1000;
        pf[0] = (struct pollfd){.fd = d->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = d->lfd, .events = POLLIN};
        for (size_t i = 0; i < d->n; i++) {
            pf[2 + i] = (struct pollfd){.fd = d->p[i].fd, .events = POLLIN | POLLRDHUP};
            if (d->p[i].deadline_ms - now < wait)
                wait = d->p[i].deadline_ms - now;
        }
        if (poll(pf, 2 + d->n, wait < 0 ? 0 : (int)wait) < 0 && errno != EINTR)
            break;
        if (pf[0].revents != 0)
            break;
        now = kd_mono_ms();
        size_t keep = 0;
        for (size_t i = 0; i < d->n; i++) {
            struct pending *p = &d->p[i];
            bool alive = true;
            if (pf[2 + i].revents != 0)
                alive = examine(d, p, (pf[2 + i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0);
            if (alive && now >= p->deadline_ms) {
                /* A line begun but never ended is answered; a silent connection is just closed. */
                if (p->seen > 0)
                    refuse(p->fd, 408, "the request line did not arrive in time");
                else
                    close(p->fd);
                alive = false;
            }
            if (alive)
                d->p[keep++] = *p;
        }
        d->n = keep;
        if (pf[1].revents != 0)
            accept_one(d);
    }
    for (size_t i = 0; i < d->n; i++)
        close(d->p[i].fd);
    d->n = 0;
    return NULL;
}

int kd_http__door_start(const struct sockaddr_in *sin, bool screen, unsigned head_timeout_s,
                        struct MHD_Daemon *mhd, struct kd_http_door **out, char *err)
{
    int rc = 0, one = 1;
    char addr[INET_ADDRSTRLEN] = "?";
    struct kd_http_door *d = kd_xcalloc(1, sizeof(*d));
    d->lfd = d->wake[0] = d->wake[1] = -1;
    d->screen = screen;
    d->timeout_s = head_timeout_s;
    d->mhd = mhd;
    *out = NULL;
    inet_ntop(AF_INET, &sin->sin_addr, addr, sizeof(addr));
    if ((d->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        setsockopt(d->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(d->lfd, (const struct sockaddr *)sin, sizeof(*sin)) < 0 || listen(d->lfd, 128) < 0 ||
        pipe2(d->wake, O_CLOEXEC) < 0) {
        rc = -errno;
        kd_seterr(err, rc, "http: cannot listen on %s:%d: %s", addr, ntohs(sin->sin_port),
                  strerror(-rc));
        goto out;
    }
    struct sockaddr_in got;
    socklen_t glen = sizeof(got);
    d->port = getsockname(d->lfd, (struct sockaddr *)&got, &glen) == 0 ? ntohs(got.sin_port)
                                                                       : ntohs(sin->sin_port);
    if ((rc = -pthread_create(&d->thr, NULL, door_main, d)) != 0) {
        kd_seterr(err, rc, "http: cannot start the accepting thread");
        goto out;
    }
    d->started = true;
    *out = d;
    d = NULL;
out:
    kd_http__door_stop(d);
    return rc;
}

int kd_http__door_port(const struct kd_http_door *d)
{
    return d->port;
}

void kd_http__door_stop(struct kd_http_door *d)
{
    if (d == NULL)
        return;
    if (d->started) {
        (void)!write(d->wake[1], "x", 1);
        pthread_join(d->thr, NULL);
    }
    if (d->lfd >= 0)
        close(d->lfd);
    if (d->wake[0] >= 0)
        close(d->wake[0]);
    if (d->wake[1] >= 0)
        close(d->wake[1]);
    free(d);
}
