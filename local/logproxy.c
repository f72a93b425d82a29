/*
 * Streams a container log from a node agent's kubelet API into a kdet-local
 * response. libcurl pushes data from its own thread into a pipe; the HTTP
 * server's stream callback pulls from the pipe, so a slow or gone client
 * stops the transfer (the write fails) and a follow ends when either side does.
 */
#include "logproxy.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"

#define OPEN_TIMEOUT_MS 10000

struct kd_logproxy {
    CURL *curl;
    int rfd, wfd;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool headers_done, done;
    long http;
    CURLcode result;
    char errbuf[CURL_ERROR_SIZE];
    atomic_bool stop;
};

static void signal_headers(struct kd_logproxy *p)
{
    pthread_mutex_lock(&p->mu);
    if (!p->headers_done) {
        curl_easy_getinfo(p->curl, CURLINFO_RESPONSE_CODE, &p->http);
        p->headers_done = true;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
    size_t len = size * n;
    if (len == 2 && buf[0] == '\r' && buf[1] == '\n')
        signal_headers(ud);
    return len;
}

static size_t on_data(char *buf, size_t size, size_t n, void *ud)
{
    struct kd_logproxy *p = ud;
    size_t len = size * n, off = 0;
    signal_headers(p);
    while (off < len) {
        ssize_t w = write(p->wfd, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0; /* the reader is gone: abort */
        off += (size_t)w;
    }
    return len;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    struct kd_logproxy *p = ud;
    return atomic_load(&p->stop) ? 1 : 0;
}

static void *run(void *arg)
{
    struct kd_logproxy *p = arg;
    CURLcode res = curl_easy_perform(p->curl);
    close(p->wfd);
    pthread_mutex_lock(&p->mu);
    p->wfd = -1;
    p->result = res;
    p->done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int kd_logproxy_open(const char *url, struct kd_logproxy **out, int *http, char *err)
{
    int rc = 0;
    int fds[2];
    struct kd_logproxy *p = kd_xcalloc(1, sizeof(*p));
    *out = NULL;
    p->rfd = p->wfd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pipe2(fds, O_CLOEXEC) < 0) {
        rc = kd_seterr(err, -errno, "pipe: %s", strerror(errno));
        goto out;
    }
    p->rfd = fds[0];
    p->wfd = fds[1];
    p->curl = curl_easy_init();
    if (p->curl == NULL) {
        rc = kd_seterr(err, KD_EINTERNAL, "curl_easy_init failed");
        goto out;
    }
    curl_easy_setopt(p->curl, CURLOPT_URL, url);
    curl_easy_setopt(p->curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(p->curl, CURLOPT_SSL_VERIFYHOST, 0L);
    curl_easy_setopt(p->curl, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(p->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(p->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(p->curl, CURLOPT_HEADERDATA, p);
    curl_easy_setopt(p->curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(p->curl, CURLOPT_WRITEDATA, p);
    curl_easy_setopt(p->curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(p->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(p->curl, CURLOPT_XFERINFODATA, p);
    curl_easy_setopt(p->curl, CURLOPT_ERRORBUFFER, p->errbuf);
    curl_easy_setopt(p->curl, CURLOPT_PROTOCOLS_STR, "https");
    if (pthread_create(&p->thread, NULL, run, p) != 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot start the log proxy thread");
        goto out;
    }
    p->started = true;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += OPEN_TIMEOUT_MS / 1000;
    pthread_mutex_lock(&p->mu);
    while (!p->headers_done && !p->done) {
        if (pthread_cond_timedwait(&p->cv, &p->mu, &until) == ETIMEDOUT)
            break;
    }
    bool ok = p->headers_done;
    bool failed = p->done && !ok;
    pthread_mutex_unlock(&p->mu);
    if (failed) {
        rc = kd_seterr(err, KD_ECONNECT, "kubelet %s: %s", url,
                       p->errbuf[0] ? p->errbuf : curl_easy_strerror(p->result));
        goto out;
    }
    if (!ok) {
        rc = kd_seterr(err, KD_ETIMEDOUT, "kubelet %s: no answer in %d s", url,
                       OPEN_TIMEOUT_MS / 1000);
        goto out;
    }
    *http = (int)p->http;
    *out = p;
    p = NULL;
out:
    kd_logproxy_free(p);
    return rc;
}

ssize_t kd_logproxy_read(void *ctx, char *buf, size_t max)
{
    struct kd_logproxy *p = ctx;
    struct pollfd pfd = {.fd = p->rfd, .events = POLLIN};
    int n = poll(&pfd, 1, 1000);
    if (n == 0 || (n < 0 && errno == EINTR))
        return 0;
    ssize_t got = read(p->rfd, buf, max);
    if (got < 0 && errno == EINTR)
        return 0;
    return got > 0 ? got : -1;
}

void kd_logproxy_free(void *ctx)
{
    struct kd_logproxy *p = ctx;
    if (p == NULL)
        return;
    atomic_store(&p->stop, true);
    if (p->rfd >= 0)
        close(p->rfd); /* a blocked write in the transfer fails now */
    if (p->started)
        pthread_join(p->thread, NULL);
    if (p->wfd >= 0)
        close(p->wfd);
    if (p->curl != NULL)
        curl_easy_cleanup(p->curl);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
