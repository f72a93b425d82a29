/*
 * The log shipper (see logship.h): one thread takes batches from the queue
 * and POSTs them, one at a time and in order, reusing one connection. A
 * batch keeps its key until the controller acknowledges it, so a retry
 * after a lost answer is stored once. Connection errors, 429 and 5xx are
 * retried with back-off; a 400 or 413 drops that batch; 401, 403 and 404
 * (a wrong token, a controller without the route) end shipping for good,
 * since no later batch would fare better.
 */
#include "logship.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cacert.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "logq.h"

struct kd_logship {
    char *url; /* .../trials/NAME/logs */
    char *auth;
    char *run_id;
    int node_rank;
    char key_prefix[48];
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the thread waits here */
    pthread_cond_t done; /* kd_logship_stop waits here */
    struct kd_logq q;
    bool stopping;
    bool finished; /* the thread has ended */
    bool disabled; /* a final refusal: drop everything */
    int64_t deadline_ms;
    uint64_t seq;
    struct kd_logship_stats st;
    uint64_t inflight; /* lines of the batch being sent */
};

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

bool kd_logship_from_env(struct kd_logship_opts *o, const char *run_id, int node_rank)
{
    static char ns[256];
    const char *trial = env("KDET_TRIAL_ID"), *v = env("KDET_LOG_SHIPPING");
    const char *task = env("KDET_TASK_ID");
    memset(o, 0, sizeof(*o));
    o->url = env("KDET_CONTROLLER_URL");
    o->token = env("KDET_TOKEN");
    o->ns = env("KDET_NAMESPACE");
    o->run_id = run_id;
    o->node_rank = node_rank;
    if (trial != NULL && strchr(trial, '/') != NULL) {
        /* "namespace/name", as libdtrain takes it */
        size_t n = (size_t)(strchr(trial, '/') - trial);
        if (n > 0 && n < sizeof(ns)) {
            memcpy(ns, trial, n);
            ns[n] = '\0';
            o->ns = ns;
        }
        trial += n + 1;
    }
    o->trial = trial != NULL && trial[0] != '\0' ? trial : NULL;
    if (o->trial == NULL && task != NULL) { /* a task's pod: its lines go to the task */
        o->trial = task;
        o->task = true;
    }
    return o->url != NULL && o->token != NULL && o->ns != NULL && o->trial != NULL &&
           (v == NULL || strcmp(v, "0") != 0);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    return kd_buf_append(ud, p, sz * n) == 0 ? sz * n : 0;
}

/* One POST. *status: the HTTP status, 0 when no answer came (cerr says why). */
static void post(struct kd_logship *s, CURL *c, struct curl_slist *h, const char *body,
                 long timeout_ms, long *status, char *cerr)
{
    struct kd_buf ans = KD_BUF_INIT(KD_LOGSHIP_MAX_ANSWER);
    *status = 0;
    cerr[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, s->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &ans);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    kd_launch_ca(c);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
        if (*status >= 300) /* the API's {"error": ...}, capped; never holds the token */
            snprintf(cerr, CURL_ERROR_SIZE, "HTTP %ld: %.200s", *status, kd_buf_str(&ans));
    } else if (cerr[0] == '\0') {
        snprintf(cerr, CURL_ERROR_SIZE, "%s", curl_easy_strerror(cc));
    }
    kd_buf_free(&ans);
}

/* Wait on wake until `until` (monotonic ms; < 0: until signalled). Called locked. */
static void wait_until(struct kd_logship *s, int64_t until)
{
    if (until < 0) {
        pthread_cond_wait(&s->wake, &s->mu);
        return;
    }
    int64_t left = until - kd_mono_ms();
    if (left <= 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->wake, &s->mu, &ts);
}

/* When the queue's next batch falls due by age (-1: nothing queued). Called locked. */
static int64_t due_at(const struct kd_logship *s)
{
    return s->q.head != NULL ? s->q.head->mono_ms + KD_LOGQ_BATCH_MS : -1;
}

static void *ship_main(void *arg)
{
    struct kd_logship *s = arg;
    struct kd_logq_batch b = {0};
    char *body = NULL, key[96], cerr[CURL_ERROR_SIZE];
    int attempt = 0;
    bool warned = false;
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, s->auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (body == NULL) {
            while (!s->stopping && !s->disabled && !kd_logq_due(&s->q, kd_mono_ms(), false))
                wait_until(s, due_at(s));
            if (s->disabled || !kd_logq_due(&s->q, kd_mono_ms(), s->stopping))
                break; /* stopping with nothing left, or shipping refused for good */
            if (s->stopping && kd_mono_ms() >= s->deadline_ms)
                break;
            kd_logq_take(&s->q, &b);
            snprintf(key, sizeof(key), "%s-%llu", s->key_prefix, (unsigned long long)++s->seq);
            body = kd_logq_batch_json(&b, key, s->run_id, s->node_rank);
            s->inflight = b.nlines;
            attempt = 0;
        }
        int64_t timeout = KD_LOGSHIP_POST_TIMEOUT_MS;
        if (s->stopping && s->deadline_ms - kd_mono_ms() < timeout)
            timeout = s->deadline_ms - kd_mono_ms();
        if (timeout <= 0 || c == NULL)
            break;
        long status = 0;
        pthread_mutex_unlock(&s->mu);
        post(s, c, h, body, (long)timeout, &status, cerr);
        pthread_mutex_lock(&s->mu);
        bool again = status == 0 || status == 429 || status >= 500;
        if (status >= 200 && status < 300) {
            s->st.lines_sent += b.nlines;
            s->st.batches_sent++;
            warned = false;
        } else if (!again) {
            s->st.lines_refused += b.nlines;
            if (status == 401 || status == 403 || status == 404)
                s->disabled = true;
            KD_WARN(s->disabled ? "log shipping stopped: the controller refused the logs"
                                : "a log batch was refused; dropped",
                    "lines=%zu error=%s", b.nlines, kd_logq(cerr));
        }
        if (!again) {
            free(body);
            body = NULL;
            kd_logq_batch_free(&b);
            s->inflight = 0;
            continue;
        }
        s->st.retries++;
        attempt++;
        if (!warned) {
            KD_WARN("cannot ship logs to the controller; retrying", "error=%s lines_queued=%zu",
                    kd_logq(cerr), s->q.nlines + b.nlines);
            warned = true;
        }
        int64_t until = kd_mono_ms() + kd_logq_backoff_ms(attempt);
        if (s->stopping && until > s->deadline_ms)
            until = s->deadline_ms;
        /* The exit flush does not sit out a back-off begun before it: it tries at once. */
        bool was_stopping = s->stopping;
        while (kd_mono_ms() < until && s->stopping == was_stopping)
            wait_until(s, until);
    }
    s->st.lines_unsent = s->q.nlines + (body != NULL ? b.nlines : 0);
    s->inflight = 0;
    free(body);
    kd_logq_batch_free(&b);
    s->finished = true;
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
    curl_slist_free_all(h);
    if (c != NULL)
        curl_easy_cleanup(c);
    return NULL;
}

int kd_logship_start(const struct kd_logship_opts *o, struct kd_logship **out, char *err)
{
    int rc = 0;
    struct kd_logship *s = NULL;
    uint64_t rnd = 0;
    *out = NULL;
    if (o->url == NULL || o->ns == NULL || o->trial == NULL || o->token == NULL) {
        rc = kd_seterr(err, KD_EINVAL,
                       "log shipping needs the controller URL, namespace, trial "
                       "and token");
        goto out;
    }
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)kd_wall_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)kd_mono_ns();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    s = kd_xcalloc(1, sizeof(*s));
    size_t bl = strlen(o->url);
    while (bl > 0 && o->url[bl - 1] == '/')
        bl--;
    s->url = kd_xasprintf("%.*s/api/v1/namespaces/%s/%s/%s/logs", (int)bl, o->url, o->ns,
                          o->task ? "tasks" : "trials", o->trial);
    s->auth = kd_xasprintf("Authorization: Bearer %s", o->token);
    s->run_id = kd_xstrdup(o->run_id != NULL ? o->run_id : "");
    s->node_rank = o->node_rank;
    /* Unique per launcher process: a retried batch keeps its key, a new process never reuses one.
     */
    snprintf(s->key_prefix, sizeof(s->key_prefix), "n%d-%016llx", o->node_rank,
             (unsigned long long)rnd);
    kd_logq_init(&s->q, o->max_bytes);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->done, NULL);
    /* The thread takes no signals: they are the supervisor's (its self-pipe, SIGCHLD). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&s->th, NULL, ship_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        rc = kd_seterr(err, -rc, "cannot start the log shipping thread: %s", strerror(rc));
        goto out;
    }
    *out = s;
    s = NULL;
out:
    if (s != NULL) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->done);
        kd_logq_free(&s->q);
        free(s->url);
        free(s->auth);
        free(s->run_id);
        free(s);
    }
    return rc;
}

void kd_logship_line(struct kd_logship *s, int rank, int stream, const char *a, size_t alen,
                     const char *b, size_t blen)
{
    pthread_mutex_lock(&s->mu);
    s->st.lines_queued++;
    if (!s->disabled) {
        bool was_empty = s->q.head == NULL;
        size_t before = s->q.bytes;
        kd_logq_push(&s->q, rank, stream, kd_wall_ms(), kd_mono_ms(), a, alen, b, blen);
        /* Wake the thread when it has something new to time, or a full batch. */
        size_t text = s->q.bytes - s->q.nlines * KD_LOGQ_OVERHEAD;
        if (was_empty || (before < s->q.bytes && text >= KD_LOGQ_BATCH_BYTES) ||
            s->q.nlines >= KD_LOGQ_BATCH_LINES)
            pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
}

void kd_logship_stop(struct kd_logship *s, int64_t timeout_ms, struct kd_logship_stats *st)
{
    bool finished;
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    s->deadline_ms = kd_mono_ms() + timeout_ms;
    pthread_cond_broadcast(&s->wake);
    /* The thread bounds its own POSTs by the deadline; a little slack for curl to notice. */
    int64_t until = s->deadline_ms + 1000;
    while (!s->finished && kd_mono_ms() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->done, &s->mu, &ts);
    }
    finished = s->finished;
    s->st.lines_dropped = s->q.dropped_total;
    if (!finished)
        s->st.lines_unsent = s->q.nlines + s->inflight;
    if (st != NULL)
        *st = s->st;
    pthread_mutex_unlock(&s->mu);
    if (!finished) {
        (void)pthread_detach(s->th); /* still in a POST: leave it, the process is exiting */
        return;
    }
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->done);
    kd_logq_free(&s->q);
    if (s->auth != NULL)
        explicit_bzero(s->auth, strlen(s->auth));
    free(s->url);
    free(s->auth);
    free(s->run_id);
    free(s);
}
