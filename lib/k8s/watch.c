/*
 * Watch streams: one long GET with watch=true whose body is a sequence of
 * newline-delimited JSON events. Lines are split as they arrive, each at
 * most max_line bytes, and handed to the caller's function on the
 * caller's thread.
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/str.h"
#include "k8s/client_int.h"

#define ERR_BODY_MAX (1u << 20)

struct wstate {
    CURL *h;
    long http; /* 0 until the status line is known */
    struct kd_buf line;
    struct kd_buf errbody; /* body of a non-2xx answer */
    kd_k8s_watch_fn fn;
    void *ud;
    const atomic_int *stop;
    int rc;       /* set when the stream must end */
    int too_long; /* a line passed max_line */
    struct kd_k8s_status *st;
    char *err;
    const char *path;
};

static int handle_line(struct wstate *w, const char *p, size_t n)
{
    json_error_t je;
    json_t *ev = NULL;
    enum kd_k8s_event_type type;
    int rc = 0;
    while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' '))
        n--;
    if (n == 0)
        return 0;
    ev = json_loadb(p, n, 0, &je);
    if (ev == NULL) {
        rc = kd_seterr(w->err, KD_EPROTO, "watch %s: event is not JSON: %s", w->path, je.text);
        goto out;
    }
    json_t *obj = json_object_get(ev, "object");
    if (kd_k8s_event_type_parse(json_string_value(json_object_get(ev, "type")), &type) < 0 ||
        !json_is_object(obj)) {
        rc = kd_seterr(w->err, KD_EPROTO, "watch %s: event without a known type and an object",
                       w->path);
        goto out;
    }
    if (type == KD_K8S_ERROR) {
        char *s = json_dumps(obj, JSON_COMPACT);
        rc = kd_k8s_map_status(200, s, s != NULL ? strlen(s) : 0, w->st, w->err);
        free(s);
        if (rc == 0)
            rc = kd_seterr(w->err, KD_EPROTO, "watch %s: ERROR event without a failure code",
                           w->path);
        goto out;
    }
    rc = w->fn(type, obj, w->ud);
out:
    json_decref(ev);
    return rc;
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    struct wstate *w = ud;
    size_t len = size * n;
    if (w->http == 0)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->http);
    if (w->http < 200 || w->http >= 300) {
        /* A Status for the failed watch: keep it (capped) to map it later. */
        if (kd_buf_append(&w->errbody, p, len) < 0)
            return 0;
        return len;
    }
    const char *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t take = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        if (kd_buf_append(&w->line, p, take) < 0) {
            w->too_long = 1;
            w->rc = kd_seterr(w->err, KD_ETOOBIG,
                              "watch %s: an event line is longer than %zu "
                              "bytes",
                              w->path, w->line.max);
            return 0;
        }
        if (nl == NULL)
            break;
        int rc = handle_line(w, w->line.data != NULL ? w->line.data : "", w->line.len);
        kd_buf_reset(&w->line);
        if (rc != 0) {
            w->rc = rc;
            return 0; /* ends the transfer */
        }
        p = (char *)nl + 1;
    }
    return len;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct wstate *w = ud;
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    return w->stop != NULL && atomic_load(w->stop) != 0;
}

int kd_k8s_watch(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                 const struct kd_k8s_query *q, kd_k8s_watch_fn fn, void *ud, const atomic_int *stop,
                 struct kd_k8s_status *st, char *err)
{
    struct kd_k8s_query wq = {0};
    struct kd_buf path = KD_BUF_INIT(8192);
    struct curl_slist *headers = NULL;
    struct wstate w = {0};
    char cerr[CURL_ERROR_SIZE] = "";
    CURL *h = NULL;
    int rc;

    if (q != NULL)
        wq = *q;
    wq.watch = true;
    wq.limit = 0;
    wq.cont = NULL;
    rc = kd_k8s_path(&path, gvr, ns, NULL, NULL, &wq, err);
    if (rc < 0)
        goto out;
    kd_buf_init(&w.line, c->opts.max_line);
    kd_buf_init(&w.errbody, ERR_BODY_MAX);
    w.fn = fn;
    w.ud = ud;
    w.stop = stop;
    w.st = st;
    w.err = err;
    w.path = kd_buf_str(&path);
    kd_k8s_bucket_take(c->bucket);
    h = kd_k8s__acquire(c);
    w.h = h;
    rc = kd_k8s__setup(c, h, "GET", w.path, NULL, 1, &headers, err);
    if (rc < 0)
        goto out;
    if (wq.timeout_seconds > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (wq.timeout_seconds + 30) * 1000L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &w);
    atomic_fetch_add(&c->requests, 1);
    atomic_fetch_add(&c->watches, 1);
    KD_DEBUG("watch started", "path=%s", kd_logq(w.path));
    CURLcode cc = curl_easy_perform(h);
    if (w.http == 0)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &w.http);
    kd_k8s__count_connects(c, h);
    if (w.rc != 0) {
        rc = w.rc; /* an ERROR event, a callback's stop value, a line too long */
    } else if (cc == CURLE_ABORTED_BY_CALLBACK) {
        rc = kd_seterr(err, KD_ECANCELED, "watch %s: stopped", w.path);
    } else if (w.http != 0 && (w.http < 200 || w.http >= 300)) {
        rc = kd_k8s_map_status((int)w.http, w.errbody.data, w.errbody.len, st, err);
    } else if (cc != CURLE_OK) {
        rc = kd_k8s__curl_err(cc, "GET", w.path, cerr, st, err);
    } else if (w.line.len > 0) {
        /* The stream ended without a final newline: that line is an event too. */
        rc = handle_line(&w, w.line.data, w.line.len);
    }
    KD_DEBUG("watch ended", "path=%s code=%ld rc=%s", kd_logq(w.path), w.http, kd_err_name(rc));
out:
    if (h != NULL)
        kd_k8s__release(c, h);
    curl_slist_free_all(headers);
    kd_buf_free(&w.line);
    kd_buf_free(&w.errbody);
    kd_buf_free(&path);
    return rc;
}
