/*
 * The Kubernetes REST client: pooled libcurl handles (keep-alive, HTTP/2
 * over TLS where offered), bearer-token/client-certificate auth with token
 * rotation, rate limiting, retries with jittered backoff, and the typed
 * verbs built on one request function.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "k8s/client_int.h"

#define DEF_QPS 50.0
#define DEF_BURST 100
#define DEF_TIMEOUT_MS 30000
#define DEF_CONNECT_MS 10000
#define DEF_MAX_BODY (64u << 20)
#define DEF_MAX_LINE (16u << 20)
#define DEF_RETRIES 5
#define DEF_BACKOFF_BASE 200
#define DEF_BACKOFF_MAX 10000
#define DEF_TOKEN_REREAD 60000
#define PATH_CAP 8192
#define LIST_RESTARTS 3

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    struct kd_k8s_client *c = ud;
    (void)h;
    (void)access;
    pthread_mutex_lock(&c->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    struct kd_k8s_client *c = ud;
    (void)h;
    pthread_mutex_unlock(&c->share_locks[data]);
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? kd_xstrdup(s) : NULL;
}

static char *dup_mem(const char *s, size_t n)
{
    if (s == NULL)
        return NULL;
    char *p = kd_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

int kd_k8s_client_new(const struct kd_k8s_config *cfg, const struct kd_k8s_client_opts *opts,
                      struct kd_k8s_client **out, char *err)
{
    struct kd_k8s_client *c = NULL;
    int rc = 0;
    if (cfg == NULL || cfg->server == NULL || cfg->server[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL, "config: server is required");
        goto out;
    }
    pthread_once(&curl_once, curl_init_once);
    c = kd_xcalloc(1, sizeof(*c));
    c->cfg.server = kd_xstrdup(cfg->server);
    c->cfg.namespace = kd_xstrdup(cfg->namespace != NULL ? cfg->namespace : "default");
    c->cfg.context = dup_or_null(cfg->context);
    c->cfg.source = dup_or_null(cfg->source);
    c->cfg.ca_file = dup_or_null(cfg->ca_file);
    c->cfg.ca_data = dup_mem(cfg->ca_data, cfg->ca_data_len);
    c->cfg.ca_data_len = cfg->ca_data_len;
    c->cfg.cert_file = dup_or_null(cfg->cert_file);
    c->cfg.cert_data = dup_mem(cfg->cert_data, cfg->cert_data_len);
    c->cfg.cert_data_len = cfg->cert_data_len;
    c->cfg.key_file = dup_or_null(cfg->key_file);
    c->cfg.key_data = dup_mem(cfg->key_data, cfg->key_data_len);
    c->cfg.key_data_len = cfg->key_data_len;
    c->cfg.insecure = cfg->insecure;
    c->cfg.token = dup_or_null(cfg->token);
    c->cfg.token_file = dup_or_null(cfg->token_file);
    c->cfg.username = dup_or_null(cfg->username);
    c->cfg.password = dup_or_null(cfg->password);
    if (c->cfg.token != NULL)
        kd_log_add_secret(c->cfg.token);
    if (c->cfg.password != NULL)
        kd_log_add_secret(c->cfg.password);
    if (opts != NULL)
        c->opts = *opts;
    if (c->opts.qps == 0)
        c->opts.qps = DEF_QPS;
    if (c->opts.burst <= 0)
        c->opts.burst = DEF_BURST;
    if (c->opts.timeout_ms <= 0)
        c->opts.timeout_ms = DEF_TIMEOUT_MS;
    if (c->opts.connect_timeout_ms <= 0)
        c->opts.connect_timeout_ms = DEF_CONNECT_MS;
    if (c->opts.max_body == 0)
        c->opts.max_body = DEF_MAX_BODY;
    if (c->opts.max_line == 0)
        c->opts.max_line = DEF_MAX_LINE;
    if (c->opts.max_retries == 0)
        c->opts.max_retries = DEF_RETRIES;
    if (c->opts.max_retries < 0)
        c->opts.max_retries = 0;
    if (c->opts.backoff_base_ms <= 0)
        c->opts.backoff_base_ms = DEF_BACKOFF_BASE;
    if (c->opts.backoff_max_ms <= 0)
        c->opts.backoff_max_ms = DEF_BACKOFF_MAX;
    if (c->opts.token_reread_ms <= 0)
        c->opts.token_reread_ms = DEF_TOKEN_REREAD;
    pthread_mutex_init(&c->token_lock, NULL);
    pthread_mutex_init(&c->pool_lock, NULL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_locks[i], NULL);
    c->share = curl_share_init();
    if (c->share != NULL) {
        curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    c->bucket = c->opts.qps > 0 ? kd_k8s_bucket_new(c->opts.qps, c->opts.burst) : NULL;
    c->token_read_ms = kd_mono_ms();
    KD_DEBUG("kubernetes client ready", "server=%s source=%s context=%s", kd_logq(c->cfg.server),
             kd_logq(c->cfg.source ? c->cfg.source : ""),
             kd_logq(c->cfg.context ? c->cfg.context : ""));
    *out = c;
    c = NULL;
out:
    kd_k8s_client_free(c);
    return rc;
}

void kd_k8s_client_free(struct kd_k8s_client *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->npool; i++)
        curl_easy_cleanup(c->pool[i]);
    if (c->share != NULL)
        curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_locks[i]);
    pthread_mutex_destroy(&c->token_lock);
    pthread_mutex_destroy(&c->pool_lock);
    kd_k8s_bucket_free(c->bucket);
    kd_k8s_config_free(&c->cfg);
    free(c);
}

const char *kd_k8s_client_namespace(const struct kd_k8s_client *c)
{
    return c->cfg.namespace;
}

void kd_k8s_client_stats(const struct kd_k8s_client *c, struct kd_k8s_client_stats *out)
{
    out->requests = atomic_load(&c->requests);
    out->retries = atomic_load(&c->retries);
    out->connects = atomic_load(&c->connects);
    out->reads = atomic_load(&c->reads);
    out->watches = atomic_load(&c->watches);
    out->creates = atomic_load(&c->creates);
    out->updates = atomic_load(&c->updates);
    out->patches = atomic_load(&c->patches);
    out->deletes = atomic_load(&c->deletes);
    out->status_writes = atomic_load(&c->status_writes);
}

/* Whether path (a request path, with or without a query) names a status subresource. */
static bool status_path(const char *path)
{
    size_t n = strcspn(path, "?");
    return n >= 7 && memcmp(path + n - 7, "/status", 7) == 0;
}

/* Count one call by its verb (not its attempts). */
static void count_call(struct kd_k8s_client *c, const char *method, const char *path)
{
    if (strcmp(method, "GET") == 0)
        atomic_fetch_add(&c->reads, 1);
    else if (strcmp(method, "POST") == 0)
        atomic_fetch_add(&c->creates, 1);
    else if (strcmp(method, "PUT") == 0)
        atomic_fetch_add(&c->updates, 1);
    else if (strcmp(method, "PATCH") == 0)
        atomic_fetch_add(&c->patches, 1);
    else if (strcmp(method, "DELETE") == 0)
        atomic_fetch_add(&c->deletes, 1);
    if ((strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) && status_path(path))
        atomic_fetch_add(&c->status_writes, 1);
}

void kd_k8s__count_connects(struct kd_k8s_client *c, CURL *h)
{
    long n = 0;
    if (curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &n) == CURLE_OK && n > 0)
        atomic_fetch_add(&c->connects, (uint_fast64_t)n);
}

CURL *kd_k8s__acquire(struct kd_k8s_client *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool > 0)
        h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->pool_lock);
    if (h == NULL) {
        h = curl_easy_init();
        if (h == NULL)
            kd_oom(sizeof(void *));
    } else {
        curl_easy_reset(h); /* keeps live connections and caches */
    }
    return h;
}

void kd_k8s__release(struct kd_k8s_client *c, CURL *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool < KD_K8S_POOL_MAX) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (h != NULL)
        curl_easy_cleanup(h);
}

static void maybe_reread_token(struct kd_k8s_client *c, int force)
{
    char *tok = NULL;
    if (c->cfg.token_file == NULL)
        return;
    int64_t now = kd_mono_ms();
    pthread_mutex_lock(&c->token_lock);
    int due = force || c->cfg.token == NULL || now - c->token_read_ms >= c->opts.token_reread_ms;
    if (due)
        c->token_read_ms = now;
    pthread_mutex_unlock(&c->token_lock);
    if (!due)
        return;
    char err[KD_ERRLEN];
    if (kd_k8s_read_token(c->cfg.token_file, &tok, err) < 0) {
        /* Keep the old token: a rotation may be half-written right now. */
        KD_WARN("cannot re-read the service-account token", "err=%s", kd_logq(err));
        return;
    }
    pthread_mutex_lock(&c->token_lock);
    if (c->cfg.token == NULL || strcmp(c->cfg.token, tok) != 0) {
        free(c->cfg.token);
        c->cfg.token = tok;
        tok = NULL;
        KD_INFO("bearer token reloaded", "file=%s", kd_logq(c->cfg.token_file));
    }
    pthread_mutex_unlock(&c->token_lock);
    free(tok);
}

int kd_k8s__reload_token(struct kd_k8s_client *c)
{
    char *before = NULL;
    int changed;
    if (c->cfg.token_file == NULL)
        return 0;
    pthread_mutex_lock(&c->token_lock);
    before = dup_or_null(c->cfg.token);
    pthread_mutex_unlock(&c->token_lock);
    maybe_reread_token(c, 1);
    pthread_mutex_lock(&c->token_lock);
    changed = (before == NULL) != (c->cfg.token == NULL) ||
              (before != NULL && strcmp(before, c->cfg.token) != 0);
    pthread_mutex_unlock(&c->token_lock);
    free(before);
    return changed;
}

int kd_k8s__setup(struct kd_k8s_client *c, CURL *h, const char *method, const char *path,
                  const char *content_type, int watch, struct curl_slist **headers, char *err)
{
    struct curl_slist *hl = NULL;
    char *url = kd_xasprintf("%s%s", c->cfg.server, path);
    int rc = 0;

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->opts.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
    if (!watch)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->opts.timeout_ms);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kdet");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    if (c->share != NULL)
        curl_easy_setopt(h, CURLOPT_SHARE, c->share);

    /* TLS */
    if (c->cfg.ca_data != NULL) {
        struct curl_blob blob = {c->cfg.ca_data, c->cfg.ca_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    } else if (c->cfg.ca_file != NULL) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg.ca_file);
    }
    if (c->cfg.cert_data != NULL) {
        struct curl_blob blob = {c->cfg.cert_data, c->cfg.cert_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    } else if (c->cfg.cert_file != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cfg.cert_file);
    }
    if (c->cfg.key_data != NULL) {
        struct curl_blob blob = {c->cfg.key_data, c->cfg.key_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (c->cfg.key_file != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->cfg.key_file);
    }
    if (c->cfg.insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }

    /* Auth: the token goes only into this header list, never into a log. */
    maybe_reread_token(c, 0);
    pthread_mutex_lock(&c->token_lock);
    bool has_token = c->cfg.token != NULL;
    if (has_token) {
        char *hdr = kd_xasprintf("Authorization: Bearer %s", c->cfg.token);
        hl = curl_slist_append(hl, hdr);
        explicit_bzero(hdr, strlen(hdr));
        free(hdr);
    }
    pthread_mutex_unlock(&c->token_lock);
    if (!has_token && c->cfg.username != NULL) {
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(h, CURLOPT_USERNAME, c->cfg.username);
        curl_easy_setopt(h, CURLOPT_PASSWORD, c->cfg.password ? c->cfg.password : "");
    }
    hl = curl_slist_append(hl, "Accept: application/json");
    if (content_type != NULL) {
        char *hdr = kd_xasprintf("Content-Type: %s", content_type);
        hl = curl_slist_append(hl, hdr);
        free(hdr);
    }
    hl = curl_slist_append(hl, "Expect:");
    if (hl == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "%s %s: out of memory for headers", method, path);
        goto out;
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    *headers = hl;
    hl = NULL;
out:
    curl_slist_free_all(hl);
    free(url);
    return rc;
}

int kd_k8s__curl_err(CURLcode cc, const char *method, const char *path, const char *detail,
                     struct kd_k8s_status *st, char *err)
{
    int rc;
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: rc = KD_ECONNECT; break;
    case CURLE_OPERATION_TIMEDOUT: rc = KD_ETIMEDOUT; break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM: rc = KD_EUNAUTHORIZED; break;
    case CURLE_ABORTED_BY_CALLBACK: rc = KD_ECANCELED; break;
    default: rc = KD_EIO; break;
    }
    if (st != NULL) {
        kd_k8s_status_free(st);
        memset(st, 0, sizeof(*st));
        snprintf(st->message, sizeof(st->message), "%s%s%s", curl_easy_strerror(cc),
                 detail != NULL && detail[0] ? ": " : "", detail != NULL ? detail : "");
    }
    return kd_seterr(err, rc, "%s %s: %s%s%s", method, path, curl_easy_strerror(cc),
                     detail != NULL && detail[0] ? ": " : "", detail != NULL ? detail : "");
}

struct xfer {
    struct kd_buf body;
    long retry_after_s;
    bool overflow; /* the body passed its cap */
};

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    if (kd_buf_append(&x->body, p, size * n) < 0) {
        x->overflow = true;
        return 0; /* over the cap: abort the transfer */
    }
    return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        char val[32];
        size_t i = sizeof(name) - 1, j = 0;
        while (i < len && (p[i] == ' ' || p[i] == '\t'))
            i++;
        while (i < len && j + 1 < sizeof(val) && isdigit((unsigned char)p[i]))
            val[j++] = p[i++];
        val[j] = '\0';
        int64_t secs;
        if (j > 0 && kd_parse_i64(val, &secs) == 0 && secs >= 0 && secs < 86400)
            x->retry_after_s = (long)secs;
    }
    return len;
}

/* Whether a failed attempt may be repeated, by verb and cause. */
static int retryable(const char *method, int rc, int http, CURLcode cc)
{
    int idempotent = strcmp(method, "GET") == 0 || strcmp(method, "PUT") == 0 ||
                     strcmp(method, "DELETE") == 0 || strcmp(method, "HEAD") == 0;
    if (http == 429)
        return 1; /* the server did not process the request */
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST)
        return 1; /* nothing was sent */
    if (!idempotent)
        return 0;
    if (http >= 500 && http < 600)
        return http != 501;
    return rc == KD_ECONNECT || rc == KD_ETIMEDOUT;
}

int kd_k8s_request(struct kd_k8s_client *c, const char *method, const char *path, const char *body,
                   const char *content_type, json_t **out, struct kd_k8s_status *st, char *err)
{
    struct xfer x = {KD_BUF_INIT(c->opts.max_body), 0, false};
    struct curl_slist *headers = NULL;
    CURL *h = NULL;
    char cerr[CURL_ERROR_SIZE];
    int rc = 0, reauth = 0;
    int64_t t0 = kd_mono_ms();

    if (out != NULL)
        *out = NULL;
    if (body != NULL && content_type == NULL)
        content_type = "application/json";
    count_call(c, method, path);
    for (int attempt = 0;; attempt++) {
        long http = 0;
        CURLcode cc;
        kd_buf_reset(&x.body);
        x.retry_after_s = 0;
        x.overflow = false;
        curl_slist_free_all(headers);
        headers = NULL;
        kd_k8s_bucket_take(c->bucket);
        h = kd_k8s__acquire(c);
        rc = kd_k8s__setup(c, h, method, path, content_type, 0, &headers, err);
        if (rc < 0)
            goto out;
        cerr[0] = '\0';
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
        if (body != NULL) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
        }
        atomic_fetch_add(&c->requests, 1);
        cc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
        kd_k8s__count_connects(c, h);
        kd_k8s__release(c, h);
        h = NULL;
        if (cc == CURLE_WRITE_ERROR && x.overflow) {
            rc = kd_seterr(err, KD_ETOOBIG, "%s %s: response body larger than %zu bytes", method,
                           path, x.body.max);
            if (st != NULL) {
                kd_k8s_status_free(st);
                memset(st, 0, sizeof(*st));
                st->http = (int)http;
                kd_strlcpy(st->message, "response body over the cap", sizeof(st->message));
            }
            goto out;
        }
        if (cc != CURLE_OK) {
            rc = kd_k8s__curl_err(cc, method, path, cerr, st, err);
        } else {
            rc = kd_k8s_map_status((int)http, x.body.data, x.body.len, st, err);
            if (rc == 0 && x.body.len > 0 && out != NULL) {
                json_error_t je;
                *out = json_loadb(x.body.data, x.body.len, JSON_DECODE_ANY, &je);
                if (*out == NULL)
                    rc = kd_seterr(err, KD_EPROTO, "%s %s: response is not JSON: %d:%d: %s", method,
                                   path, je.line, je.column, je.text);
            }
            if (st != NULL && st->retry_after_s < x.retry_after_s)
                st->retry_after_s = x.retry_after_s;
        }
        KD_DEBUG("kubernetes request", "method=%s path=%s code=%ld ms=%lld attempt=%d", method,
                 kd_logq(path), http, (long long)(kd_mono_ms() - t0), attempt);
        if (rc == KD_EUNAUTHORIZED && http == 401 && !reauth && kd_k8s__reload_token(c)) {
            reauth = 1; /* the token rotated under us: one more try with the new one */
            attempt--;
            continue;
        }
        if (rc == 0 || attempt >= c->opts.max_retries || !retryable(method, rc, (int)http, cc))
            break;
        long ra = x.retry_after_s;
        if (st != NULL && st->retry_after_s > ra)
            ra = st->retry_after_s;
        long delay =
            kd_k8s_backoff_ms(attempt, c->opts.backoff_base_ms, c->opts.backoff_max_ms, ra);
        KD_WARN("retrying kubernetes request",
                "method=%s path=%s code=%ld err=%s attempt=%d delay_ms=%ld", method, kd_logq(path),
                http, kd_err_name(rc), attempt + 1, delay);
        atomic_fetch_add(&c->retries, 1);
        kd_sleep_ms(delay);
    }
out:
    if (h != NULL)
        kd_k8s__release(c, h);
    curl_slist_free_all(headers);
    kd_buf_free(&x.body);
    return rc;
}

/* ---- typed verbs ----------------------------------------------------------- */

static int do_verb(struct kd_k8s_client *c, const char *method, const struct kd_k8s_gvr *gvr,
                   const char *ns, const char *name, const char *sub, const struct kd_k8s_query *q,
                   const json_t *body, const char *ctype, json_t **out, struct kd_k8s_status *st,
                   char *err)
{
    struct kd_buf path = KD_BUF_INIT(PATH_CAP);
    char *text = NULL;
    int rc = kd_k8s_path(&path, gvr, ns, name, sub, q, err);
    if (rc < 0)
        goto out;
    if (body != NULL) {
        text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text == NULL) {
            rc = kd_seterr(err, KD_EINVAL, "%s %s: the body cannot be encoded as JSON", method,
                           kd_buf_str(&path));
            goto out;
        }
    }
    rc = kd_k8s_request(c, method, kd_buf_str(&path), text, ctype, out, st, err);
out:
    free(text);
    kd_buf_free(&path);
    return rc;
}

int kd_k8s_get(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
               const char *name, json_t **out, struct kd_k8s_status *st, char *err)
{
    if (name == NULL || name[0] == '\0')
        return kd_seterr(err, KD_EINVAL, "get %s: a name is required",
                         gvr != NULL && gvr->resource ? gvr->resource : "?");
    return do_verb(c, "GET", gvr, ns, name, NULL, NULL, NULL, NULL, out, st, err);
}

int kd_k8s_list(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                const struct kd_k8s_query *q, json_t **out, struct kd_k8s_status *st, char *err)
{
    return do_verb(c, "GET", gvr, ns, NULL, NULL, q, NULL, NULL, out, st, err);
}

int kd_k8s_list_all(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                    const struct kd_k8s_query *q, json_t **out, struct kd_k8s_status *st, char *err)
{
    struct kd_k8s_query pq = {0};
    json_t *result = NULL, *page = NULL;
    char *cont = NULL;
    int rc = 0, restarts = 0;
    if (q != NULL)
        pq = *q;
    if (pq.limit <= 0)
        pq.limit = 500;
    pq.watch = false;
restart:
    json_decref(result);
    result = NULL;
    free(cont);
    cont = NULL;
    pq.cont = NULL;
    for (;;) {
        rc = kd_k8s_list(c, gvr, ns, &pq, &page, st, err);
        if (rc == KD_EGONE && pq.cont != NULL && restarts < LIST_RESTARTS) {
            /* The continue token's snapshot was compacted away: start over. */
            KD_INFO("list continue token expired, relisting", "resource=%s restart=%d",
                    gvr->resource, restarts + 1);
            restarts++;
            goto restart;
        }
        if (rc < 0)
            goto out;
        json_t *items = json_object_get(page, "items");
        if (!json_is_array(items) && !json_is_null(items) && items != NULL) {
            rc = kd_seterr(err, KD_EPROTO, "list %s: items is not an array", gvr->resource);
            goto out;
        }
        if (result == NULL) {
            result = page;
            page = NULL;
            if (!json_is_array(json_object_get(result, "items")))
                json_object_set_new(result, "items", json_array());
        } else {
            json_array_extend(json_object_get(result, "items"), items);
            json_object_set(result, "metadata", json_object_get(page, "metadata"));
        }
        json_t *meta = json_object_get(result, "metadata");
        const char *next = json_string_value(json_object_get(meta, "continue"));
        if (next == NULL || next[0] == '\0')
            break;
        free(cont);
        cont = kd_xstrdup(next);
        pq.cont = cont;
        json_decref(page);
        page = NULL;
    }
    json_object_del(json_object_get(result, "metadata"), "continue");
    *out = result;
    result = NULL;
out:
    json_decref(page);
    json_decref(result);
    free(cont);
    return rc;
}

static const char *obj_ns(const json_t *obj, const char *ns)
{
    if (ns != NULL && ns[0] != '\0')
        return ns;
    return kd_k8s_meta_str(obj, "namespace");
}

int kd_k8s_create(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                  json_t *obj, json_t **out, struct kd_k8s_status *st, char *err)
{
    if (!json_is_object(obj))
        return kd_seterr(err, KD_EINVAL, "create %s: the object must be a JSON object",
                         gvr->resource);
    return do_verb(c, "POST", gvr, obj_ns(obj, ns), NULL, NULL, NULL, obj, NULL, out, st, err);
}

int kd_k8s_update(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                  const char *sub, json_t *obj, json_t **out, struct kd_k8s_status *st, char *err)
{
    const char *name = kd_k8s_meta_str(obj, "name");
    if (name == NULL || name[0] == '\0')
        return kd_seterr(err, KD_EINVAL, "update %s: metadata.name is required", gvr->resource);
    return do_verb(c, "PUT", gvr, obj_ns(obj, ns), name, sub, NULL, obj, NULL, out, st, err);
}

int kd_k8s_patch(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                 const char *name, const char *sub, enum kd_k8s_patch_type type, json_t *patch,
                 json_t **out, struct kd_k8s_status *st, char *err)
{
    static const char *const ctypes[] = {
        "application/merge-patch+json", "application/json-patch+json",
        "application/strategic-merge-patch+json", "application/apply-patch+yaml"};
    struct kd_k8s_query q = {0};
    if (name == NULL || name[0] == '\0')
        return kd_seterr(err, KD_EINVAL, "patch %s: a name is required", gvr->resource);
    if ((int)type < 0 || type > KD_K8S_PATCH_APPLY)
        return kd_seterr(err, KD_EINVAL, "patch %s/%s: unknown patch type %d", gvr->resource, name,
                         (int)type);
    if (type == KD_K8S_PATCH_JSON ? !json_is_array(patch) : !json_is_object(patch))
        return kd_seterr(err, KD_EINVAL, "patch %s/%s: a %s patch must be a JSON %s", gvr->resource,
                         name, type == KD_K8S_PATCH_JSON ? "JSON" : "merge",
                         type == KD_K8S_PATCH_JSON ? "array" : "object");
    if (type == KD_K8S_PATCH_APPLY)
        q.field_manager = "kdet";
    return do_verb(c, "PATCH", gvr, ns, name, sub, &q, patch, ctypes[type], out, st, err);
}

int kd_k8s_delete(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                  const char *name, const struct kd_k8s_delete_opts *opts, json_t **out,
                  struct kd_k8s_status *st, char *err)
{
    json_t *body = NULL;
    int rc;
    if (name == NULL || name[0] == '\0')
        return kd_seterr(err, KD_EINVAL, "delete %s: a name is required", gvr->resource);
    if (opts != NULL) {
        body = json_pack("{s:s,s:s}", "kind", "DeleteOptions", "apiVersion", "v1");
        if (opts->propagation_policy != NULL)
            json_object_set_new(body, "propagationPolicy", json_string(opts->propagation_policy));
        if (opts->has_grace_period)
            json_object_set_new(body, "gracePeriodSeconds",
                                json_integer(opts->grace_period_seconds));
        if (opts->precondition_uid != NULL || opts->precondition_rv != NULL) {
            json_t *pre = json_object();
            if (opts->precondition_uid != NULL)
                json_object_set_new(pre, "uid", json_string(opts->precondition_uid));
            if (opts->precondition_rv != NULL)
                json_object_set_new(pre, "resourceVersion", json_string(opts->precondition_rv));
            json_object_set_new(body, "preconditions", pre);
        }
    }
    rc = do_verb(c, "DELETE", gvr, ns, name, NULL, NULL, body, NULL, out, st, err);
    json_decref(body);
    return rc;
}
