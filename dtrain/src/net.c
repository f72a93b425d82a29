/*
 * Socket helpers for the rendezvous and the TCP ring: listening, connecting
 * with a timeout, and reads and writes that finish by a deadline. Writes use
 * MSG_NOSIGNAL so a closed peer gives EPIPE instead of killing the process.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/str.h"
#include "core/time.h"

#define SOCKBUF_BYTES (4 << 20)

int dt_left_ms(int64_t deadline_ms)
{
    int64_t left = deadline_ms - kd_mono_ms();
    if (left < 0)
        return 0;
    return left > 1000000000 ? 1000000000 : (int)left;
}

int dt_set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

bool dt_socket_buffer_env(int *bytes)
{
    uint64_t v = 0;
    const char *env = getenv("DTRAIN_SOCKET_BUFFER");
    if (env == NULL || kd_parse_size(env, &v) != 0 || v > (256u << 20))
        return false;
    *bytes = (int)v;
    return true;
}

int dt_env_switch(const char *name)
{
    const char *v = getenv(name);
    return v == NULL || *v == '\0' ? -1 : strcmp(v, "0") != 0;
}

void dt_tune_socket(int fd)
{
    int one = 1, sz = SOCKBUF_BYTES;
    (void)dt_socket_buffer_env(&sz);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sz > 0) { /* 0: leave the kernel's autotuning on */
        /* Best effort: the kernel caps the buffers at net.core.*mem_max. */
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    }
}

void dt_keepalive(int fd)
{
    /* A host that vanishes without closing its sockets (power loss, network
     * partition) is noticed in about 30 s instead of at the op timeout. */
    int one = 1, idle = 10, intvl = 5, cnt = 4;
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

int dt_listen(int port, int backlog, int *fd, int *out_port, char *err)
{
    int rc = 0, s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        rc = kd_seterr(err, -errno, "socket: %s", strerror(errno));
        goto out;
    }
    int one = 1;
    (void)setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    dt_tune_socket(s); /* accepted sockets inherit the buffer sizes */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = kd_seterr(err, -errno, "bind to port %d: %s", port, strerror(errno));
        goto out;
    }
    if (listen(s, backlog) < 0) {
        rc = kd_seterr(err, -errno, "listen on port %d: %s", port, strerror(errno));
        goto out;
    }
    socklen_t len = sizeof(sa);
    if (getsockname(s, (struct sockaddr *)&sa, &len) < 0) {
        rc = kd_seterr(err, -errno, "getsockname: %s", strerror(errno));
        goto out;
    }
    if (out_port != NULL)
        *out_port = ntohs(sa.sin_port);
    *fd = s;
    s = -1;
out:
    if (s >= 0)
        close(s);
    return rc;
}

int dt_connect(const char *host, int port, int timeout_ms, int *fd, char *err)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char portstr[16];
    int rc = 0, s = -1;
    snprintf(portstr, sizeof(portstr), "%d", port);
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        rc = kd_seterr(err, DTRAIN_ECONNECT, "resolve %s: %s", host, gai_strerror(gai));
        goto out;
    }
    s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        rc = kd_seterr(err, -errno, "socket: %s", strerror(errno));
        goto out;
    }
    dt_tune_socket(s);
    if ((rc = dt_set_nonblock(s, true)) < 0)
        goto out;
    if (connect(s, res->ai_addr, res->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            rc = kd_seterr(err, DTRAIN_ECONNECT, "connect %s:%d: %s", host, port, strerror(errno));
            goto out;
        }
        struct pollfd p = {.fd = s, .events = POLLOUT};
        int n = poll(&p, 1, timeout_ms);
        if (n == 0) {
            rc = kd_seterr(err, DTRAIN_ETIMEDOUT, "connect %s:%d: timed out", host, port);
            goto out;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (n < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr != 0) {
            rc = kd_seterr(err, DTRAIN_ECONNECT, "connect %s:%d: %s", host, port,
                           strerror(soerr ? soerr : errno));
            goto out;
        }
    }
    if ((rc = dt_set_nonblock(s, false)) < 0)
        goto out;
    *fd = s;
    s = -1;
out:
    if (res != NULL)
        freeaddrinfo(res);
    if (s >= 0)
        close(s);
    return rc;
}

static int wait_fd(int fd, short ev, int64_t deadline_ms)
{
    struct pollfd p = {.fd = fd, .events = ev};
    for (;;) {
        int n = poll(&p, 1, dt_left_ms(deadline_ms));
        if (n > 0)
            return 0;
        if (n == 0)
            return DTRAIN_ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

int dt_write_all(int fd, const void *p, size_t n, int64_t deadline_ms)
{
    const char *c = p;
    int rc = 0;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if ((rc = wait_fd(fd, POLLOUT, deadline_ms)) < 0)
                goto out;
            continue;
        }
        rc = w < 0 ? -errno : DTRAIN_EIO;
        goto out;
    }
out:
    return rc;
}

int dt_read_all(int fd, void *p, size_t n, int64_t deadline_ms)
{
    char *c = p;
    int rc = 0;
    while (n > 0) {
        ssize_t r = recv(fd, c, n, MSG_DONTWAIT);
        if (r > 0) {
            c += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) {
            rc = DTRAIN_EPEER; /* orderly close by the peer */
            goto out;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if ((rc = wait_fd(fd, POLLIN, deadline_ms)) < 0)
                goto out;
            continue;
        }
        rc = -errno;
        goto out;
    }
out:
    return rc;
}

int dt_send_msg(int fd, const char *s, size_t n, int64_t deadline_ms)
{
    if (n > DT_MSG_MAX)
        return DTRAIN_ETOOBIG;
    unsigned char hdr[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8), (unsigned char)n};
    int rc = dt_write_all(fd, hdr, 4, deadline_ms);
    if (rc == 0)
        rc = dt_write_all(fd, s, n, deadline_ms);
    return rc;
}

int dt_recv_msg(int fd, char **out, size_t *n, int64_t deadline_ms)
{
    unsigned char hdr[4];
    char *buf = NULL;
    int rc = dt_read_all(fd, hdr, 4, deadline_ms);
    if (rc < 0)
        goto out;
    size_t len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
    if (len > DT_MSG_MAX) {
        rc = DTRAIN_ETOOBIG;
        goto out;
    }
    buf = malloc(len + 1);
    if (buf == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    if ((rc = dt_read_all(fd, buf, len, deadline_ms)) < 0)
        goto out;
    buf[len] = '\0';
    *out = buf;
    buf = NULL;
    if (n != NULL)
        *n = len;
out:
    free(buf);
    return rc;
}
