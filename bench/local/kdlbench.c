/*
 * Load generator for bench/local: concurrent creates (kdet-local objects or,
 * as the anchor, etcd puts through its JSON gateway), watch delivery
 * latency with N watchers, pod start latency (create -> Running), and many
 * short pods (create N one-container pods that exit at once, wait until all
 * have Succeeded: kdet-local's CPU per pod is measured around it by run.sh).
 * Every run is bounded in count and time.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "core/time.h"

#define MAX_THREADS 64
#define MAX_WATCHERS 64

static const char *base;
static int mode_etcd;
static int mode_pods; /* creates are short pods (sh -c "exit 0") named mp-I */
static int total, conc;
static int next_index;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t *sent_ns; /* per object: when its create was sent */
static int64_t deadline_ms;

/* A handle; for kdet-local with the bearer token of $KDL_BENCH_TOKEN (kdet-local serves no
 * anonymous client). */
static CURL *handle(void)
{
    CURL *c = curl_easy_init();
    const char *tok = getenv("KDL_BENCH_TOKEN");
    if (c != NULL && !mode_etcd && tok != NULL && tok[0] != '\0') {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, tok);
    }
    return c;
}

static size_t discard(char *p, size_t s, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return s * n;
}

static int post(CURL *c, const char *url, const char *body, const char *ctype)
{
    struct curl_slist *h = NULL;
    char ct[128];
    snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
    h = curl_slist_append(h, ct);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    long code = 0;
    int rc = curl_easy_perform(c) == CURLE_OK ? 0 : -1;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return rc == 0 && code >= 200 && code < 300 ? 0 : -1;
}

/* A ConfigMap of about 1 KiB, or an etcd put of the same bytes. */
static char *create_body(int i, const char *prefix, char **url)
{
    char pad[1001];
    memset(pad, 'x', 1000);
    pad[1000] = '\0';
    if (mode_pods) {
        *url = kd_xasprintf("%s/api/v1/namespaces/default/pods", base);
        return kd_xasprintf(
            "{\"metadata\":{\"name\":\"mp-%d\",\"labels\":{\"bench\":\"manypods\"}},"
            "\"spec\":{\"restartPolicy\":\"Never\",\"terminationGracePeriodSeconds\":1,"
            "\"containers\":[{\"name\":\"m\",\"image\":\"busybox\",\"command\":[\"sh\",\"-c\","
            "\"exit 0\"],\"resources\":{\"requests\":{\"cpu\":\"10m\"}}}]}}",
            i);
    }
    char *obj = kd_xasprintf("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                             "\"%s-%d\",\"labels\":{\"bench\":\"yes\"}},\"data\":{\"pad\":\"%s\"}}",
                             prefix, i, pad);
    if (!mode_etcd) {
        *url = kd_xasprintf("%s/api/v1/namespaces/default/configmaps", base);
        return obj;
    }
    char *key = kd_xasprintf("/registry/configmaps/default/%s-%d", prefix, i);
    size_t kl = strlen(key), ol = strlen(obj);
    char *k64 = kd_xmalloc(4 * ((kl + 2) / 3) + 1), *v64 = kd_xmalloc(4 * ((ol + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)k64, (unsigned char *)key, (int)kl);
    EVP_EncodeBlock((unsigned char *)v64, (unsigned char *)obj, (int)ol);
    char *body = kd_xasprintf("{\"key\":\"%s\",\"value\":\"%s\"}", k64, v64);
    *url = kd_xasprintf("%s/v3/kv/put", base);
    free(key);
    free(k64);
    free(v64);
    free(obj);
    return body;
}

static const char *prefix = "b";
static int failures;

static void *creator(void *arg)
{
    (void)arg;
    CURL *c = handle();
    for (;;) {
        pthread_mutex_lock(&mu);
        int i = next_index < total && kd_mono_ms() < deadline_ms ? next_index++ : -1;
        pthread_mutex_unlock(&mu);
        if (i < 0)
            break;
        char *url = NULL;
        char *body = create_body(i, prefix, &url);
        if (sent_ns != NULL)
            sent_ns[i] = kd_mono_ns();
        if (post(c, url, body, "application/json") != 0) {
            pthread_mutex_lock(&mu);
            failures++;
            pthread_mutex_unlock(&mu);
        }
        free(url);
        free(body);
    }
    curl_easy_cleanup(c);
    return NULL;
}

static double run_creates(void)
{
    pthread_t th[MAX_THREADS];
    int64_t t0 = kd_mono_ns();
    for (int i = 0; i < conc; i++)
        pthread_create(&th[i], NULL, creator, NULL);
    for (int i = 0; i < conc; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(kd_mono_ns() - t0) / 1e9;
    return (double)next_index / secs;
}

/* ---- watchers ----------------------------------------------------------------------- */

struct watcher {
    pthread_t th;
    struct kd_buf line;
    int64_t *lat_ns; /* per object index */
    int seen;
    int ready;
};

static struct watcher watchers[MAX_WATCHERS];
static int nwatchers;

static size_t on_watch_data(char *p, size_t s, size_t n, void *ud)
{
    struct watcher *w = ud;
    size_t len = s * n;
    int64_t now = kd_mono_ns();
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '\n') {
            if (kd_buf_putc(&w->line, p[i]) != 0)
                return 0;
            continue;
        }
        /* ..."name":"w-123",... : the index after the prefix. */
        const char *nm = strstr(kd_buf_str(&w->line), "\"name\":\"w-");
        if (nm != NULL && strstr(kd_buf_str(&w->line), "\"type\":\"ADDED\"") != NULL) {
            int idx = 0;
            for (const char *d = nm + 10; *d >= '0' && *d <= '9' && idx < 10000000; d++)
                idx = idx * 10 + (*d - '0');
            if (idx >= 0 && idx < total && w->lat_ns[idx] == 0) {
                w->lat_ns[idx] = now - sent_ns[idx];
                w->seen++;
            }
        }
        kd_buf_reset(&w->line);
    }
    return len;
}

static size_t on_header(char *p, size_t s, size_t n, void *ud)
{
    struct watcher *w = ud;
    if (n * s >= 2 && p[0] == '\r' && p[1] == '\n')
        __atomic_store_n(&w->ready, 1, __ATOMIC_SEQ_CST);
    return s * n;
}

static int xfer_cb(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    struct watcher *w = ud;
    return w->seen >= total || kd_mono_ms() > deadline_ms + 5000;
}

static void *watch_main(void *arg)
{
    struct watcher *w = arg;
    CURL *c = handle();
    char *url = kd_xasprintf("%s/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=%s"
                             "&labelSelector=bench%%3Dwatch&timeoutSeconds=120",
                             base, getenv("KDL_BENCH_RV") ? getenv("KDL_BENCH_RV") : "0");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, w);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, xfer_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
    free(url);
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void percentiles(int64_t *v, size_t n, double *p50, double *p99)
{
    qsort(v, n, sizeof(*v), cmp64);
    *p50 = n ? (double)v[n / 2] / 1e6 : 0;
    *p99 = n ? (double)v[(n * 99) / 100 >= n ? n - 1 : (n * 99) / 100] / 1e6 : 0;
}

/* ---- pods -------------------------------------------------------------------------------- */

static int64_t *pod_lat;
static int pods_seen;
static const char *pod_prefix = "sp-", *pod_phase = "Running";

static size_t on_pod_data(char *p, size_t s, size_t n, void *ud)
{
    struct kd_buf *line = ud;
    int64_t now = kd_mono_ns();
    for (size_t i = 0; i < s * n; i++) {
        if (p[i] != '\n') {
            if (kd_buf_putc(line, p[i]) != 0)
                return 0;
            continue;
        }
        json_t *ev = json_loads(kd_buf_str(line), 0, NULL);
        json_t *obj = json_object_get(ev, "object");
        const char *name =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        const char *phase =
            json_string_value(json_object_get(json_object_get(obj, "status"), "phase"));
        int idx;
        if (name != NULL && phase != NULL && strcmp(phase, pod_phase) == 0 &&
            kd_str_has_prefix(name, pod_prefix) &&
            kd_parse_int(name + strlen(pod_prefix), &idx) == 0 && idx >= 0 && idx < total &&
            pod_lat[idx] == 0) {
            pod_lat[idx] = now - sent_ns[idx] > 0 ? now - sent_ns[idx] : 1;
            pods_seen++;
        }
        json_decref(ev);
        kd_buf_reset(line);
    }
    return s * n;
}

static int pod_xfer(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)ud;
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    return pods_seen >= total || kd_mono_ms() > deadline_ms;
}

static void *pod_watch(void *arg)
{
    (void)arg;
    struct kd_buf line = KD_BUF_INIT(1 << 20);
    CURL *c = handle();
    char *url = kd_xasprintf("%s/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=3600", base);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_pod_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &line);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, pod_xfer);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
    free(url);
    kd_buf_free(&line);
    return NULL;
}

static int usage(void)
{
    fprintf(stderr, "usage: kdet-local-bench creates URL N CONC [etcd]\n"
                    "       kdet-local-bench watch URL N WATCHERS\n"
                    "       kdet-local-bench pods URL N\n"
                    "       kdet-local-bench manypods URL N CONC\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return usage();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    base = argv[2];
    if (kd_parse_int(argv[3], &total) < 0 || total < 1 || total > 1000000)
        return usage();
    deadline_ms = kd_mono_ms() + 120000;
    int rc = 0;
    if (strcmp(argv[1], "creates") == 0 && argc >= 5) {
        if (kd_parse_int(argv[4], &conc) < 0 || conc < 1 || conc > MAX_THREADS)
            return usage();
        mode_etcd = argc > 5 && strcmp(argv[5], "etcd") == 0;
        const char *pf = getenv("KDL_BENCH_PREFIX");
        if (pf != NULL)
            prefix = pf;
        double rate = run_creates();
        printf("creates=%d failures=%d per_second=%.0f\n", next_index, failures, rate);
    } else if (strcmp(argv[1], "watch") == 0 && argc >= 5) {
        if (kd_parse_int(argv[4], &nwatchers) < 0 || nwatchers < 1 || nwatchers > MAX_WATCHERS)
            return usage();
        sent_ns = kd_xcalloc((size_t)total, sizeof(int64_t));
        for (int i = 0; i < nwatchers; i++) {
            kd_buf_init(&watchers[i].line, 1 << 20);
            watchers[i].lat_ns = kd_xcalloc((size_t)total, sizeof(int64_t));
            pthread_create(&watchers[i].th, NULL, watch_main, &watchers[i]);
        }
        for (int i = 0; i < nwatchers; i++)
            while (!__atomic_load_n(&watchers[i].ready, __ATOMIC_SEQ_CST) &&
                   kd_mono_ms() < deadline_ms)
                kd_sleep_ms(5);
        kd_sleep_ms(200);
        /* One writer, paced, so the latency is delivery time, not queueing behind a burst. */
        CURL *c = handle();
        char pad[201];
        memset(pad, 'y', 200);
        pad[200] = '\0';
        char *url = kd_xasprintf("%s/api/v1/namespaces/default/configmaps", base);
        for (int i = 0; i < total && kd_mono_ms() < deadline_ms; i++) {
            char *body = kd_xasprintf("{\"metadata\":{\"name\":\"w-%d\",\"labels\":{\"bench\":"
                                      "\"watch\"}},\"data\":{\"p\":\"%s\"}}",
                                      i, pad);
            sent_ns[i] = kd_mono_ns();
            if (post(c, url, body, "application/json") != 0)
                failures++;
            free(body);
            kd_sleep_ms(2);
        }
        curl_easy_cleanup(c);
        free(url);
        int64_t *all = kd_xcalloc((size_t)total * (size_t)nwatchers, sizeof(int64_t));
        size_t n = 0;
        for (int i = 0; i < nwatchers; i++) {
            pthread_join(watchers[i].th, NULL);
            for (int j = 0; j < total; j++)
                if (watchers[i].lat_ns[j] > 0)
                    all[n++] = watchers[i].lat_ns[j];
            free(watchers[i].lat_ns);
            kd_buf_free(&watchers[i].line);
        }
        double p50, p99;
        percentiles(all, n, &p50, &p99);
        printf("events=%zu expected=%d watchers=%d p50_ms=%.3f p99_ms=%.3f failures=%d\n", n,
               total * nwatchers, nwatchers, p50, p99, failures);
        rc = n == (size_t)total * (size_t)nwatchers ? 0 : 1;
        free(all);
        free(sent_ns);
    } else if (strcmp(argv[1], "pods") == 0) {
        sent_ns = kd_xcalloc((size_t)total, sizeof(int64_t));
        pod_lat = kd_xcalloc((size_t)total, sizeof(int64_t));
        deadline_ms = kd_mono_ms() + 120000;
        pthread_t wt;
        pthread_create(&wt, NULL, pod_watch, NULL);
        kd_sleep_ms(300);
        CURL *c = handle();
        char *url = kd_xasprintf("%s/api/v1/namespaces/default/pods", base);
        for (int i = 0; i < total; i++) {
            char *body = kd_xasprintf(
                "{\"metadata\":{\"name\":\"sp-%d\"},\"spec\":{\"restartPolicy\":\"Never\","
                "\"terminationGracePeriodSeconds\":1,\"containers\":[{\"name\":\"m\",\"image\":"
                "\"busybox\",\"command\":[\"sleep\",\"20\"],\"resources\":{\"requests\":{\"cpu\":"
                "\"10m\"}}}]}}",
                i);
            sent_ns[i] = kd_mono_ns();
            if (post(c, url, body, "application/json") != 0)
                failures++;
            free(body);
            kd_sleep_ms(20);
        }
        curl_easy_cleanup(c);
        free(url);
        pthread_join(wt, NULL);
        int64_t *v = kd_xcalloc((size_t)total, sizeof(int64_t));
        size_t n = 0;
        for (int i = 0; i < total; i++)
            if (pod_lat[i] > 0)
                v[n++] = pod_lat[i];
        double p50, p99;
        percentiles(v, n, &p50, &p99);
        printf("pods=%d running=%zu p50_ms=%.1f p99_ms=%.1f failures=%d\n", total, n, p50, p99,
               failures);
        rc = n == (size_t)total ? 0 : 1;
        free(v);
        free(pod_lat);
        free(sent_ns);
    } else if (strcmp(argv[1], "manypods") == 0 && argc >= 5) {
        /* N short pods from CONC clients; done when every one has Succeeded (1 hour at most). */
        if (kd_parse_int(argv[4], &conc) < 0 || conc < 1 || conc > MAX_THREADS)
            return usage();
        mode_pods = 1;
        pod_prefix = "mp-";
        pod_phase = "Succeeded";
        sent_ns = kd_xcalloc((size_t)total, sizeof(int64_t));
        pod_lat = kd_xcalloc((size_t)total, sizeof(int64_t));
        deadline_ms = kd_mono_ms() + 3600000;
        pthread_t wt, th[MAX_THREADS];
        pthread_create(&wt, NULL, pod_watch, NULL);
        kd_sleep_ms(300);
        int64_t t0 = kd_mono_ns();
        for (int i = 0; i < conc; i++)
            pthread_create(&th[i], NULL, creator, NULL);
        for (int i = 0; i < conc; i++)
            pthread_join(th[i], NULL);
        double created_s = (double)(kd_mono_ns() - t0) / 1e9;
        pthread_join(wt, NULL);
        double done_s = (double)(kd_mono_ns() - t0) / 1e9;
        printf("pods=%d succeeded=%d created_s=%.1f done_s=%.1f failures=%d\n", total, pods_seen,
               created_s, done_s, failures);
        rc = pods_seen == total ? 0 : 1;
        free(pod_lat);
        free(sent_ns);
    } else {
        rc = usage();
    }
    curl_global_cleanup();
    return rc;
}
