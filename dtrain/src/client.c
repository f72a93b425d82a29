/*
 * libdtrain's client of the controller API (dtrain_client.h): libcurl for
 * HTTP, jansson for JSON, one easy handle per request so threads never
 * share a connection. Metric batches get their idempotency key when they
 * are sealed and keep it across retries, so a batch the controller stored
 * before a lost answer is never stored twice.
 */
#include "dtrain_client.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <curl/curl.h>
#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/str.h"
#include "core/time.h"

#define RESP_MAX (1u << 20)
#define QUEUE_MAX_BYTES (64u << 20)
#define KEY_MAX 128

struct batch {
    char key[KEY_MAX + 1];
    char *body;
    size_t len;
    struct batch *next;
};

struct dtrain_client {
    char *url, *token, *ns, *trial, *prefix;
    char *ca_pem, *ca_file; /* the controller's CA; NULL: the system's */
    char *auth;             /* "Authorization: Bearer ..." */
    long retry_ms, timeout_ms;
    int batch_rows;

    pthread_mutex_t mu; /* rows, queue, seq */
    json_t *rows[3];    /* training, validation, profiling rows not yet sealed */
    struct batch *head, *tail;
    size_t queued_bytes;
    uint64_t seq;
    pthread_mutex_t send_mu; /* one sender at a time keeps batches in order */
};

static const char *const kinds[3] = {"training", "validation", "profiling"};

static int seterr(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int seterr(char *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, DTRAIN_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

static char *dupstr(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

static bool dns_name(const char *s)
{
    bool ok = s != NULL && s[0] != '\0' && strlen(s) <= 253;
    for (const char *p = s; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.';
    return ok;
}

void dtrain_client_free(struct dtrain_client *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < 3; i++)
        json_decref(c->rows[i]);
    while (c->head != NULL) {
        struct batch *b = c->head;
        c->head = b->next;
        free(b->body);
        free(b);
    }
    if (c->auth != NULL)
        memset(c->auth, 0, strlen(c->auth));
    if (c->token != NULL)
        memset(c->token, 0, strlen(c->token));
    free(c->url);
    free(c->token);
    free(c->ns);
    free(c->trial);
    free(c->prefix);
    free(c->ca_pem);
    free(c->ca_file);
    free(c->auth);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->send_mu);
    free(c);
}

int dtrain_client_new(const struct dtrain_client_opts *o, struct dtrain_client **out, char *err)
{
    int rc = 0;
    struct dtrain_client *c = NULL;
    *out = NULL;
    if (o == NULL || o->url == NULL ||
        (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0)) {
        rc = seterr(err, DTRAIN_EINVAL, "url: must start with http:// or https://");
        goto out;
    }
    if (o->token == NULL || o->token[0] == '\0' || strlen(o->token) > 4096 ||
        strpbrk(o->token, "\r\n ") != NULL) {
        rc = seterr(err, DTRAIN_EINVAL, "token: required, one line of at most 4096 bytes");
        goto out;
    }
    if (o->batch_rows < 0 || o->batch_rows > 10000) {
        rc = seterr(err, DTRAIN_EINVAL, "batch_rows: %d is not in 0..10000", o->batch_rows);
        goto out;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->send_mu, NULL);
    const char *trial = o->trial != NULL ? o->trial : "";
    const char *slash = strchr(trial, '/');
    c->ns = slash ? strndup(trial, (size_t)(slash - trial)) : dupstr(o->ns ? o->ns : "default");
    c->trial = dupstr(slash ? slash + 1 : trial);
    c->url = dupstr(o->url);
    c->token = dupstr(o->token);
    if (o->ca_pem != NULL && o->ca_pem[0] != '\0' &&
        (c->ca_pem = strndup(o->ca_pem, 1u << 20)) == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    if (o->ca_file != NULL && o->ca_file[0] != '\0' && (c->ca_file = dupstr(o->ca_file)) == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    if (c->ns == NULL || c->trial == NULL || c->url == NULL || c->token == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    size_t ul = strlen(c->url);
    while (ul > 0 && c->url[ul - 1] == '/')
        c->url[--ul] = '\0';
    if (!dns_name(c->trial)) {
        rc = seterr(err, DTRAIN_EINVAL, "trial: \"%.256s\" is not a Trial name", trial);
        goto out;
    }
    if (!dns_name(c->ns)) {
        rc = seterr(err, DTRAIN_EINVAL, "namespace: \"%.256s\" is not a namespace name", c->ns);
        goto out;
    }
    if (o->key_prefix != NULL) {
        c->prefix = strndup(o->key_prefix, 96);
    } else {
        uint32_t r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (uint32_t)kd_mono_ns();
        char p[128];
        snprintf(p, sizeof(p), "w-%08x", r);
        c->prefix = strdup(p);
    }
    size_t al = strlen(c->token) + 32;
    c->auth = malloc(al);
    if (c->prefix == NULL || c->auth == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    snprintf(c->auth, al, "Authorization: Bearer %s", c->token);
    c->retry_ms = o->retry_ms > 0 ? o->retry_ms : 600000;
    c->timeout_ms = o->request_timeout_ms > 0 ? o->request_timeout_ms : 30000;
    c->batch_rows = o->batch_rows > 0 ? o->batch_rows : 100;
    *out = c;
    c = NULL;
out:
    dtrain_client_free(c);
    return rc;
}

int dtrain_client_from_env(struct dtrain_client **out, char *err)
{
    int rc = 0;
    struct dtrain_client_opts o = {0};
    char prefix[128];
    *out = NULL;
    o.url = getenv("KDET_CONTROLLER_URL");
    o.token = getenv("KDET_TOKEN");
    o.trial = getenv("KDET_TRIAL_ID");
    o.ns = getenv("KDET_NAMESPACE");
    o.ca_pem = getenv("KDET_CONTROLLER_CA");
    o.ca_file = getenv("KDET_CONTROLLER_CA_FILE");
    if (o.url == NULL || o.url[0] == '\0') {
        rc = seterr(err, DTRAIN_ENOTFOUND,
                    "KDET_CONTROLLER_URL is not set: not running as a kdet trial");
        goto out;
    }
    if (o.token == NULL || o.token[0] == '\0') {
        rc = seterr(err, DTRAIN_EINVAL, "KDET_TOKEN: required with KDET_CONTROLLER_URL");
        goto out;
    }
    if (o.trial == NULL || o.trial[0] == '\0') {
        rc = seterr(err, DTRAIN_EINVAL, "KDET_TRIAL_ID: required with KDET_CONTROLLER_URL");
        goto out;
    }
    const char *run = getenv("KDET_RUN_ID"), *rank = getenv("RANK");
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint32_t)kd_mono_ns();
    snprintf(prefix, sizeof(prefix), "%.64s-r%.8s-%08x", run ? run : "run", rank ? rank : "0", r);
    o.key_prefix = prefix;
    rc = dtrain_client_new(&o, out, err);
    if (rc == DTRAIN_EINVAL && err != NULL) {
        char tmp[DTRAIN_ERRLEN];
        snprintf(tmp, sizeof(tmp), "kdet environment: %s", err);
        snprintf(err, DTRAIN_ERRLEN, "%s", tmp);
    }
out:
    return rc;
}

/* ---- HTTP ------------------------------------------------------------------------------- */

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    return kd_buf_append(ud, p, sz * n) == 0 ? sz * n : 0;
}

/*
 * One request. *status gets the HTTP status (0 when no answer arrived),
 * *resp the parsed JSON answer (may be NULL). Returns 0 when an answer
 * arrived, DTRAIN_ECONNECT/DTRAIN_ETIMEDOUT/DTRAIN_ENOMEM otherwise.
 */
static int request(struct dtrain_client *c, const char *method, const char *path, const char *body,
                   long timeout_ms, long *status, json_t **resp, char *err)
{
    int rc = 0;
    CURL *h = curl_easy_init();
    struct curl_slist *hd = NULL, *t;
    struct kd_buf b = KD_BUF_INIT(RESP_MAX);
    char url[2048];
    *status = 0;
    *resp = NULL;
    if (h == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    snprintf(url, sizeof(url), "%s%s", c->url, path);
    if ((t = curl_slist_append(hd, c->auth)) == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    hd = t;
    if ((t = curl_slist_append(hd, "Content-Type: application/json")) == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    hd = t;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (c->ca_pem != NULL) {
        struct curl_blob blob = {c->ca_pem, strlen(c->ca_pem), CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    } else if (c->ca_file != NULL) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    }
    if (body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    CURLcode cc = curl_easy_perform(h);
    if (cc == CURLE_OPERATION_TIMEDOUT) {
        rc = seterr(err, DTRAIN_ETIMEDOUT, "%s %s: no answer within %ld ms", method, path,
                    timeout_ms);
        goto out;
    }
    if (cc != CURLE_OK) {
        rc = seterr(err, cc == CURLE_OUT_OF_MEMORY ? DTRAIN_ENOMEM : DTRAIN_ECONNECT, "%s %s%s: %s",
                    method, c->url, path, curl_easy_strerror(cc));
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    *resp = json_loadb(b.data ? b.data : "", b.len, 0, NULL);
out:
    kd_buf_free(&b);
    curl_slist_free_all(hd);
    if (h != NULL)
        curl_easy_cleanup(h);
    return rc;
}

static int map_status(long st, const json_t *resp, const char *method, const char *path, char *err)
{
    int code;
    switch (st) {
    case 400: code = DTRAIN_EINVAL; break;
    case 401:
    case 403: code = DTRAIN_EUNAUTHORIZED; break;
    case 404: code = DTRAIN_ENOTFOUND; break;
    case 409: code = DTRAIN_ECONFLICT; break;
    case 413: code = DTRAIN_ETOOBIG; break;
    case 429:
    case 500:
    case 502:
    case 503:
    case 504: code = DTRAIN_EAGAIN; break;
    default: code = st >= 500 ? DTRAIN_EAGAIN : DTRAIN_EPROTO; break;
    }
    const char *msg = json_string_value(json_object_get(resp, "error"));
    return seterr(err, code, "%s %s: HTTP %ld: %s", method, path, st,
                  msg != NULL ? msg : "(no error message)");
}

/*
 * A request retried on connection errors, timeouts, 429 and 5xx with
 * backoff (100 ms doubling to 5 s) until budget_ms passes. 2xx: 0 and
 * *resp (caller decrefs, may be NULL).
 */
static int call(struct dtrain_client *c, const char *method, const char *path, const char *body,
                long req_timeout_ms, long budget_ms, json_t **resp, char *err)
{
    int rc;
    long st = 0, delay = 100;
    int64_t now = kd_mono_ms();
    /* dtrain_searcher_next without a limit passes a budget near INT64_MAX: saturate. */
    int64_t deadline = budget_ms > INT64_MAX - now ? INT64_MAX : now + budget_ms;
    *resp = NULL;
    for (;;) {
        rc = request(c, method, path, body, req_timeout_ms, &st, resp, err);
        if (rc == 0 && st >= 200 && st < 300)
            break;
        if (rc == 0) {
            rc = map_status(st, *resp, method, path, err);
            json_decref(*resp);
            *resp = NULL;
        }
        if (rc != DTRAIN_ECONNECT && rc != DTRAIN_ETIMEDOUT && rc != DTRAIN_EAGAIN)
            break;
        int64_t left = deadline - kd_mono_ms();
        if (left <= 0) {
            if (rc != DTRAIN_ETIMEDOUT && err != NULL) {
                char tmp[DTRAIN_ERRLEN];
                snprintf(tmp, sizeof(tmp), "gave up after %ld ms: %s", budget_ms, err);
                snprintf(err, DTRAIN_ERRLEN, "%s", tmp);
            }
            rc = DTRAIN_ETIMEDOUT;
            break;
        }
        kd_sleep_ms(delay < left ? delay : left);
        delay = delay * 2 > 5000 ? 5000 : delay * 2;
    }
    return rc;
}

static void trial_path(struct dtrain_client *c, const char *tail, char *buf, size_t len)
{
    snprintf(buf, len, "/api/v1/namespaces/%s/trials/%s/%s", c->ns, c->trial, tail);
}

/* ---- metrics ------------------------------------------------------------------------------ */

/* Seal the buffered rows of kind k into a queued batch with a fresh key. Caller holds mu. */
static int seal(struct dtrain_client *c, int k)
{
    int rc = 0;
    struct batch *b = NULL;
    json_t *body = NULL;
    if (json_array_size(c->rows[k]) == 0)
        goto out;
    b = calloc(1, sizeof(*b));
    if (b == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    snprintf(b->key, sizeof(b->key), "%s-%llu", c->prefix, (unsigned long long)++c->seq);
    body = json_pack("{s:s,s:s,s:O}", "kind", kinds[k], "key", b->key, "rows", c->rows[k]);
    b->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (b->body == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    b->len = strlen(b->body);
    if (c->queued_bytes + b->len > QUEUE_MAX_BYTES) {
        rc = DTRAIN_EAGAIN;
        goto out;
    }
    c->queued_bytes += b->len;
    if (c->tail != NULL)
        c->tail->next = b;
    else
        c->head = b;
    c->tail = b;
    b = NULL;
    json_array_clear(c->rows[k]);
out:
    if (b != NULL) {
        free(b->body);
        free(b);
    }
    json_decref(body);
    return rc;
}

/* Send queued batches in order until the queue is empty or one fails. */
static int send_queue(struct dtrain_client *c, char *err)
{
    int rc = 0;
    char path[600];
    trial_path(c, "metrics", path, sizeof(path));
    pthread_mutex_lock(&c->send_mu);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        struct batch *b = c->head;
        pthread_mutex_unlock(&c->mu);
        if (b == NULL)
            break;
        json_t *resp = NULL;
        rc = call(c, "POST", path, b->body, c->timeout_ms, c->retry_ms, &resp, err);
        json_decref(resp);
        if (rc == DTRAIN_EINVAL || rc == DTRAIN_ETOOBIG) {
            /* Refused for its content: retrying cannot help; drop it so later ones go. */
            pthread_mutex_lock(&c->mu);
            c->head = b->next;
            if (c->head == NULL)
                c->tail = NULL;
            c->queued_bytes -= b->len;
            pthread_mutex_unlock(&c->mu);
            free(b->body);
            free(b);
            break;
        }
        if (rc != 0)
            break; /* kept with its key for the next attempt */
        pthread_mutex_lock(&c->mu);
        c->head = b->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->queued_bytes -= b->len;
        pthread_mutex_unlock(&c->mu);
        free(b->body);
        free(b);
    }
    pthread_mutex_unlock(&c->send_mu);
    return rc;
}

int dtrain_report_metrics(struct dtrain_client *c, const char *kind, int64_t batches,
                          const char *metrics_json, char *err)
{
    int rc = 0, k = -1;
    json_t *m = NULL, *row = NULL;
    json_error_t je;
    bool send = false;
    for (int i = 0; kind != NULL && i < 3; i++)
        if (strcmp(kind, kinds[i]) == 0)
            k = i;
    if (c == NULL || k < 0) {
        rc = seterr(err, DTRAIN_EINVAL, "kind: must be training, validation or profiling");
        goto out;
    }
    if (batches < 0) {
        rc = seterr(err, DTRAIN_EINVAL, "batches: %lld is negative", (long long)batches);
        goto out;
    }
    m = json_loads(metrics_json ? metrics_json : "", JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(m)) {
        rc = seterr(err, DTRAIN_EINVAL, "metrics_json: %s",
                    m == NULL ? je.text : "must be a JSON object");
        goto out;
    }
    row = json_pack("{s:I,s:O}", "batches", (json_int_t)batches, "metrics", m);
    if (row == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    if (c->rows[k] == NULL)
        c->rows[k] = json_array();
    if (c->rows[k] == NULL || json_array_append(c->rows[k], row) != 0) {
        rc = DTRAIN_ENOMEM;
    } else if (k == 1 || (int)json_array_size(c->rows[k]) >= c->batch_rows) {
        /* A validation goes at once, after what is buffered of the other kinds. */
        if (k == 1)
            for (int i = 0; i < 3 && rc == 0; i++)
                rc = seal(c, i);
        else
            rc = seal(c, k);
        send = rc == 0;
    }
    pthread_mutex_unlock(&c->mu);
    if (send)
        rc = send_queue(c, err);
out:
    json_decref(m);
    json_decref(row);
    return rc;
}

int dtrain_client_flush(struct dtrain_client *c, char *err)
{
    int rc = 0;
    if (c == NULL) {
        rc = seterr(err, DTRAIN_EINVAL, "client: NULL");
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = seal(c, i);
    pthread_mutex_unlock(&c->mu);
    if (rc == 0)
        rc = send_queue(c, err);
out:
    return rc;
}

/* ---- searcher, preemption, checkpoints, early exit ------------------------------------------- */

int dtrain_searcher_next(struct dtrain_client *c, int64_t completed, long timeout_ms,
                         int64_t *length, int *stop, char *err)
{
    int rc = 0;
    char tail[128], path[700];
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : kd_mono_ms() + timeout_ms;
    *length = 0;
    *stop = 0;
    if (c == NULL || completed < 0) {
        rc = seterr(err, DTRAIN_EINVAL, "completed: must be >= 0");
        goto out;
    }
    for (;;) {
        int64_t left = deadline - kd_mono_ms();
        if (left <= 0) {
            rc = seterr(err, DTRAIN_ETIMEDOUT, "no searcher operation within %ld ms", timeout_ms);
            goto out;
        }
        long poll_s = left / 1000 > 30 ? 30 : left / 1000;
        snprintf(tail, sizeof(tail), "searcher/operation?completed=%lld&timeout=%ld",
                 (long long)completed, poll_s);
        trial_path(c, tail, path, sizeof(path));
        json_t *resp = NULL;
        rc = call(c, "GET", path, NULL, c->timeout_ms + poll_s * 1000, left, &resp, err);
        if (rc != 0)
            goto out;
        const char *op = json_string_value(json_object_get(resp, "op"));
        if (op != NULL && strcmp(op, "stop") == 0) {
            *stop = DTRAIN_SEARCHER_STOP;
        } else if (json_is_true(json_object_get(resp, "preempt"))) {
            *stop = DTRAIN_SEARCHER_PREEMPT; /* before training further, whatever the target */
        } else if (op != NULL && strcmp(op, "validate_after") == 0) {
            *length = json_integer_value(json_object_get(resp, "length"));
        } else if (op == NULL || strcmp(op, "pending") != 0) {
            rc = seterr(err, DTRAIN_EPROTO, "GET %s: unexpected answer (op %s)", path,
                        op ? op : "missing");
        }
        json_decref(resp);
        if (rc != 0 || *length > 0 || *stop)
            goto out;
        if (poll_s == 0) /* under a second left: the server did not wait, so we do */
            kd_sleep_ms(left < 100 ? left : 100);
    }
out:
    return rc;
}

int dtrain_should_preempt(struct dtrain_client *c, long wait_ms, int *preempt, char *err)
{
    int rc = 0;
    char tail[64], path[700];
    json_t *resp = NULL;
    *preempt = 0;
    if (c == NULL || wait_ms < 0) {
        rc = seterr(err, DTRAIN_EINVAL, "wait_ms: must be >= 0");
        goto out;
    }
    long s = wait_ms / 1000 > 60 ? 60 : wait_ms / 1000;
    snprintf(tail, sizeof(tail), "preemption?timeout=%ld", s);
    trial_path(c, tail, path, sizeof(path));
    rc = call(c, "GET", path, NULL, c->timeout_ms + s * 1000, c->timeout_ms + s * 1000, &resp, err);
    if (rc == 0)
        *preempt = json_is_true(json_object_get(resp, "preempt"));
out:
    json_decref(resp);
    return rc;
}

int dtrain_checkpoint_register(struct dtrain_client *c, const char *uuid, int64_t batches,
                               const char *storage_path, int64_t size_bytes,
                               const char *metadata_json, char *err)
{
    int rc = 0;
    char path[700];
    json_t *md = NULL, *body = NULL, *resp = NULL;
    char *text = NULL;
    if (c == NULL || uuid == NULL || uuid[0] == '\0' || storage_path == NULL ||
        storage_path[0] == '\0' || batches < 0 || size_bytes < 0) {
        rc = seterr(err, DTRAIN_EINVAL,
                    "checkpoint: uuid and storage_path are required, batches and size >= 0");
        goto out;
    }
    if (metadata_json != NULL) {
        json_error_t je;
        md = json_loads(metadata_json, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(md)) {
            rc = seterr(err, DTRAIN_EINVAL, "metadata_json: %s",
                        md == NULL ? je.text : "must be a JSON object");
            goto out;
        }
    }
    body = json_pack("{s:s,s:I,s:s,s:I}", "uuid", uuid, "batches", (json_int_t)batches,
                     "storage_path", storage_path, "size", (json_int_t)size_bytes);
    if (body == NULL || (md != NULL && json_object_set(body, "metadata", md) != 0) ||
        (text = json_dumps(body, JSON_COMPACT)) == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    trial_path(c, "checkpoints", path, sizeof(path));
    rc = call(c, "POST", path, text, c->timeout_ms, c->retry_ms, &resp, err);
out:
    free(text);
    json_decref(md);
    json_decref(body);
    json_decref(resp);
    return rc;
}

int dtrain_exit_early(struct dtrain_client *c, const char *reason, const char *message, char *err)
{
    int rc = 0;
    char path[700];
    json_t *body = NULL, *resp = NULL;
    char *text = NULL;
    if (c == NULL || reason == NULL ||
        (strcmp(reason, "errored") != 0 && strcmp(reason, "invalid_hp") != 0 &&
         strcmp(reason, "user_canceled") != 0)) {
        rc = seterr(err, DTRAIN_EINVAL, "reason: must be errored, invalid_hp or user_canceled");
        goto out;
    }
    body = json_pack("{s:s}", "reason", reason);
    if (body != NULL && message != NULL)
        json_object_set_new(body, "message", json_stringn(message, strnlen(message, 4096)));
    if (body == NULL || (text = json_dumps(body, JSON_COMPACT)) == NULL) {
        rc = DTRAIN_ENOMEM;
        goto out;
    }
    trial_path(c, "early_exit", path, sizeof(path));
    rc = call(c, "POST", path, text, c->timeout_ms, c->retry_ms, &resp, err);
out:
    free(text);
    json_decref(body);
    json_decref(resp);
    return rc;
}
