/*
 * libFuzzer target for kdet-local's request handling as a client meets it:
 * an API server (in-memory store, no kubelet) runs in this process on
 * 127.0.0.1, and each input is sent to it as the bytes of one connection
 * (which the client then half-closes). Checked besides "no crash, no
 * leak" (the server is stopped and its store closed at exit):
 *  - every input that holds a whole request (head, and as many body bytes
 *    as Content-Length says) gets an answer that starts with an HTTP/1.1
 *    status line;
 *  - an error answered in JSON is a Status object whose code is the HTTP
 *    status;
 *  - the server keeps serving: /healthz answers 200 every 64 inputs.
 * Requests carry the bearer token "fuzz". Every 4096 inputs the server
 * starts again on a new store, so that what the inputs created stays small.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../../local/api.h"
#include "../../local/store.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/time.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_local_api: " __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#define RESTART_EVERY 4096
#define HEALTH_EVERY 64
#define READ_WAIT_MS 300
#define FIRST_BYTE_CPU_MS 5000
#define FIRST_BYTE_WALL_MS 60000

static struct kd_store *store;
static struct kd_api *api;
static int port;
static unsigned long inputs;

static void stop_server(void)
{
    kd_local_api_stop(api);
    kd_local_store_close(store);
    api = NULL;
    store = NULL;
}

static void start_server(void)
{
    struct kd_store_opts so = {0};
    struct kd_local_api_opts ao = {.port = 0, .token = "fuzz", .gc_interval_ms = 50};
    char err[KD_ERRLEN];
    if (kd_local_store_open(&so, &store, err) != 0 ||
        kd_local_api_start(&ao, store, &api, err) != 0)
        FAIL("cannot start the API server: %s", err);
    port = kd_local_api_port(api);
}

/* How the last exchange ended: the server closed (else a pause or a limit), and after how long. */
static bool exchange_closed;
static int exchange_errno; /* the error that ended the reading, or 0 */
static int64_t exchange_ms;

static int64_t process_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * connect, where libFuzzer's timer signal may interrupt it (it has no SA_RESTART, and a
 * recv with a timeout is never restarted: signal(7)). An interrupted connect goes on in the
 * background; its outcome is waited for.
 */
static bool connected(int fd, const struct sockaddr_in *sin)
{
    if (connect(fd, (const struct sockaddr *)sin, sizeof(*sin)) == 0)
        return true;
    if (errno != EINTR)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t elen = sizeof(err);
    while (poll(&p, 1, 10000) < 0 && errno == EINTR)
        ;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
        errno = err != 0 ? err : errno;
        return false;
    }
    return (p.revents & POLLOUT) != 0;
}

/* Send one connection's bytes, half-close, and read the answer (until close or a pause). */
static void exchange(const uint8_t *data, size_t size, struct kd_buf *out)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {.tv_sec = 0, .tv_usec = READ_WAIT_MS * 1000};
    char buf[65536];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || !connected(fd, &sin))
        FAIL("cannot connect to the API server: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (size_t off = 0; off < size;) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the server refused and closed: its answer is read below */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    /*
     * The pause ends a stream once it has begun. The first byte may take longer when the
     * fuzzer shares the machine (niced, or stopped): it is waited for until this process
     * (the server's threads are in it) has spent FIRST_BYTE_CPU_MS of CPU time on it, or
     * FIRST_BYTE_WALL_MS have passed, whichever comes first.
     */
    int64_t cpu0 = process_cpu_ms(), wall0 = kd_mono_ms();
    exchange_closed = false;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        /* The timer signal (above): not the server's doing. */
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && out->len == 0 &&
            process_cpu_ms() - cpu0 < FIRST_BYTE_CPU_MS &&
            kd_mono_ms() - wall0 < FIRST_BYTE_WALL_MS)
            continue;
        exchange_closed = n == 0;
        exchange_errno = n < 0 ? errno : 0;
        if (n <= 0 || kd_buf_append(out, buf, (size_t)n) != 0)
            break; /* closed, or a stream paused (watch), or 8 MiB read */
    }
    exchange_ms = kd_mono_ms() - wall0;
    close(fd);
}

/*
 * Whether data holds a whole request: a head ended by an empty line, then, when the head
 * announces a body by Content-Length, at least that many bytes. (A client that goes away
 * inside a head or a body need not be answered; chunked bodies are left to fuzz_http.)
 */
static bool whole_request(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = NULL;
    /* Empty lines before the request line are skipped, as servers do (RFC 9112, 2.2). */
    while (size > 0 && (p[0] == '\n' || (size > 1 && p[0] == '\r' && p[1] == '\n'))) {
        size_t k = p[0] == '\n' ? 1 : 2;
        p += k;
        size -= k;
    }
    const char *crlf = memmem(p, size, "\r\n\r\n", 4), *lf = memmem(p, size, "\n\n", 2);
    if (crlf != NULL && (lf == NULL || crlf < lf))
        end = crlf + 4;
    else if (lf != NULL)
        end = lf + 2;
    if (end == NULL)
        return false;
    size_t head = (size_t)(end - p);
    char *h = strndup(p, head); /* header names in any case; a NUL ends the search early */
    if (h == NULL)
        return false;
    const char *te = strcasestr(h, "transfer-encoding"), *cl = strcasestr(h, "content-length:");
    char digits[24] = "";
    size_t k = 0;
    for (const char *q = cl != NULL ? cl + 15 : "";
         *q != '\0' && (*q == ' ' || (*q >= '0' && *q <= '9')) && k < 20; q++)
        if (*q != ' ')
            digits[k++] = *q;
    bool chunked = te != NULL, sized = cl != NULL;
    free(h);
    if (chunked || memchr(p, '\0', head) != NULL)
        return false;
    if (!sized)
        return true;
    return k > 0 && k < 19 && strtoull(digits, NULL, 10) <= size - head;
}

static void check_answer(const char *a, size_t n)
{
    int status = 0;
    if (n < 12 || memcmp(a, "HTTP/1.1 ", 9) != 0 || sscanf(a + 9, "%3d", &status) != 1 ||
        status < 100 || status > 599)
        FAIL("the answer does not start with a status line: \"%.40s\" (%s after %lld ms)",
             n > 0 ? a : "",
             exchange_closed  ? "the server closed"
             : exchange_errno ? strerror(exchange_errno)
                              : "no more bytes",
             (long long)exchange_ms);
    const char *head_end = memmem(a, n, "\r\n\r\n", 4);
    if (head_end == NULL || status < 400)
        return;
    /* A JSON error is a Status with the answer's code, when its body came whole. */
    const char *cl = memmem(a, (size_t)(head_end - a), "Content-Length: ", 16);
    bool json = memmem(a, (size_t)(head_end - a), "application/json", 16) != NULL;
    const char *body = head_end + 4;
    size_t blen = n - (size_t)(body - a);
    if (!json || cl == NULL || strtoul(cl + 16, NULL, 10) != blen)
        return;
    json_t *j = json_loadb(body, blen, 0, NULL);
    const char *kind = json_string_value(json_object_get(j, "kind"));
    if (kind == NULL || strcmp(kind, "Status") != 0 ||
        json_integer_value(json_object_get(j, "code")) != status)
        FAIL("HTTP %d answered with %.200s", status, body);
    json_decref(j);
}

static void check_health(void)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    struct kd_buf b = KD_BUF_INIT(1u << 20);
    exchange((const uint8_t *)req, sizeof(req) - 1, &b);
    if (b.len < 12 || memcmp(b.data, "HTTP/1.1 200", 12) != 0)
        FAIL("the server stopped serving /healthz: \"%.60s\"", kd_buf_str(&b));
    kd_buf_free(&b);
}

/*
 * libFuzzer's leak check after each input is off here (-detect_leaks=0, unless the command
 * line says otherwise): the server's own threads allocate and free while it runs (a
 * connection being freed, a watch building its next bookmark), and in two runs (5 and 8
 * minutes in) it reported such memory as leaked, which no single input reproduces. Leaks are still
 * looked for where the server is stopped first: `test_fuzz_local_api` replays the corpus under ASan
 * and checks at exit, and so do kdet-local's own tests.
 */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    for (int i = 1; i < *argc; i++)
        if (strncmp((*argv)[i], "-detect_leaks=", 14) == 0)
            return 0;
    static char off[] = "-detect_leaks=0";
    static char *args[64]; /* for the process's life, as argv is */
    if (*argc + 2 > (int)(sizeof(args) / sizeof(args[0])))
        return 0; /* (more arguments than make fuzz gives: left as they are) */
    memcpy(args, *argv, (size_t)*argc * sizeof(char *));
    args[(*argc)++] = off;
    args[*argc] = NULL;
    *argv = args;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (api == NULL) {
        if (inputs == 0) {
            kd_log_init("fuzz", KD_LOG_OFF, -1);
            atexit(stop_server);
        }
        start_server();
    }
    struct kd_buf b = KD_BUF_INIT(8u << 20);
    exchange(data, size, &b);
    if (size > 0 && whole_request(data, size))
        check_answer(kd_buf_str(&b), b.len);
    kd_buf_free(&b);
    if (++inputs % HEALTH_EVERY == 0)
        check_health();
    if (inputs % RESTART_EVERY == 0)
        stop_server();
    return 0;
}
