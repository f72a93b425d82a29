/* Fixtures for the API tests (see fx.h). */
#include "fx.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <libpq-fe.h>

#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "lib/k8s/kdet_local.h"
#include "support/pg.h"
#include "yaml/yaml.h"

struct fx fx;
const unsigned char fx_key[32] = "0123456789abcdef0123456789abcdef";
static struct kd_pg pg;
static struct kl kl;
static char last_headers[8192];

static void apply_crd(const char *path)
{
    struct kd_yaml_doc *doc = NULL;
    char err[KD_ERRLEN] = "";
    if (kd_yaml_parse_file(path, &doc, err) != 0)
        fail_msg("%s: %s", path, err);
    struct kd_k8s_gvr crd = KD_K8S_GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    if (kd_k8s_create(fx.k8s, &crd, NULL, kd_yaml_root(doc), NULL, NULL, err) != 0)
        fail_msg("create CRD %s: %s", path, err);
    kd_yaml_free(doc);
}

double fx_kube_qps;
int64_t fx_log_max_bytes;
int fx_max_downloads;

void fx_api_start(int port)
{
    char err[KD_ERRLEN] = "";
    struct kd_api_opts o = {.store = fx.store,
                            .k8s = fx.k8s,
                            .ns = "default",
                            .port = port,
                            .token_key = fx_key,
                            .token_key_len = sizeof(fx_key),
                            .user_token = FX_USER_TOKEN,
                            .long_poll_max_s = 30,
                            .metrics_timeout_ms = 5000,
                            .log_max_bytes = fx_log_max_bytes,
                            .max_downloads = fx_max_downloads,
                            .tasks = true};
    int rc = kd_api_start(&o, &fx.api, err);
    /* A restarted API may find the port still held by closing connections for a moment. */
    for (int i = 0; rc != 0 && port != 0 && i < 50; i++) {
        kd_sleep_ms(100);
        rc = kd_api_start(&o, &fx.api, err);
    }
    if (rc != 0)
        fail_msg("kd_api_start: %s", err);
    fx.port = kd_api_port(fx.api);
    snprintf(fx.url, sizeof(fx.url), "http://127.0.0.1:%d", fx.port);
}

void fx_api_stop(void)
{
    kd_api_stop(fx.api);
    fx.api = NULL;
}

int fx_setup(void **state)
{
    char err[KD_ERRLEN] = "", name[64];
    (void)state;
    kd_log_init("test-api", getenv("KDET_LOG_LEVEL") ? -1 : KD_LOG_WARN, -1);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (kd_pg_start(&pg, err) != 0) {
        fprintf(stderr, "cannot start PostgreSQL: %s\n", err);
        return -1;
    }
    snprintf(name, sizeof(name), "api%d", (int)getpid());
    if (kd_pg_createdb(&pg, name, err) != 0) {
        fprintf(stderr, "createdb: %s\n", err);
        return -1;
    }
    kd_pg_conninfo(&pg, name, fx.conninfo, sizeof(fx.conninfo));
    struct kd_store_opts so = {.conninfo = fx.conninfo};
    if (kd_store_open(&so, &fx.store, err) != 0) {
        fprintf(stderr, "kd_store_open: %s\n", err);
        return -1;
    }
    const char *const extra[] = {"--no-kubelet", NULL};
    kl_start(&kl, extra, 0);
    struct kd_k8s_client_opts ko = {.qps = fx_kube_qps};
    fx.k8s = kl_client(&kl, &ko);
    char path[512];
    const char *src = getenv("KD_SRC") ? getenv("KD_SRC") : ".";
    snprintf(path, sizeof(path), "%s/crds/experiments.yaml", src);
    apply_crd(path);
    snprintf(path, sizeof(path), "%s/crds/trials.yaml", src);
    apply_crd(path);
    snprintf(path, sizeof(path), "%s/crds/tasks.yaml", src);
    apply_crd(path);
    fx_api_start(0);
    return 0;
}

int fx_teardown(void **state)
{
    (void)state;
    fx_api_stop();
    kd_k8s_client_free(fx.k8s);
    kd_store_close(fx.store);
    kl_destroy(&kl);
    kd_pg_destroy(&pg);
    curl_global_cleanup();
    /* Nothing may be left: kdet-local was reaped by kl_destroy. */
    assert_int_equal(kl.pid, 0);
    return 0;
}

void fx_experiment(const char *name, const char *metric)
{
    char err[KD_ERRLEN] = "";
    json_t *o = json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:{s:s,s:s,s:b,s:i}}}", "apiVersion",
                          "kdet.io/v1alpha1", "kind", "Experiment", "metadata", "name", name,
                          "spec", "entrypoint", "train", "searcher", "name", "single", "metric",
                          metric, "smaller_is_better", 1, "max_length", 1000);
    if (kd_k8s_create(fx.k8s, &KD_K8S_EXPERIMENTS, "default", o, NULL, NULL, err) != 0)
        fail_msg("create experiment %s: %s", name, err);
    json_decref(o);
}

void fx_trial(const char *exp, const char *name, int64_t target, char *uid, size_t uidlen)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    json_t *o = json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:s,s:{s:f},s:i,s:I,s:s}}", "apiVersion",
                          "kdet.io/v1alpha1", "kind", "Trial", "metadata", "name", name, "spec",
                          "experiment", exp, "requestId", "r-1", "hparams", "lr", 0.01, "seed", 7,
                          "validateAfter", (json_int_t)target, "lengthUnit", "batches");
    if (kd_k8s_create(fx.k8s, &KD_K8S_TRIALS, "default", o, &out, NULL, err) != 0)
        fail_msg("create trial %s: %s", name, err);
    kd_strlcpy(uid, kd_k8s_meta_str(out, "uid"), uidlen);
    json_decref(o);
    json_decref(out);
    fx_patch("trials", name, "status", "{\"status\":{\"state\":\"ACTIVE\"}}");
}

void fx_pod(const char *trial, const char *run_id, const char *name)
{
    char err[KD_ERRLEN] = "";
    struct kd_k8s_gvr pods = KD_K8S_PODS;
    /* Bound to a node no kubelet serves: it stays Pending and never runs. */
    json_t *o = json_pack("{s:s,s:s,s:{s:s,s:{s:s,s:s}},s:{s:s,s:[{s:s,s:s,s:[s]}]}}", "apiVersion",
                          "v1", "kind", "Pod", "metadata", "name", name, "labels", "kdet.io/trial",
                          trial, "kdet.io/run-id", run_id, "spec", "nodeName", "kd-test-nowhere",
                          "containers", "name", "trial", "image", "none", "command", "true");
    if (kd_k8s_create(fx.k8s, &pods, "default", o, NULL, NULL, err) != 0)
        fail_msg("create pod %s: %s", name, err);
    json_decref(o);
}

void fx_task(const char *name, const char *kind, const char *config, char *uid, size_t uidlen)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    json_t *cfg = json_loads(config != NULL ? config : "{}", 0, NULL);
    assert_non_null(cfg);
    json_t *o = json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:o,s:s}}", "apiVersion", "kdet.io/v1alpha1",
                          "kind", "Task", "metadata", "name", name, "spec", "kind", kind, "config",
                          cfg, "owner", "alice");
    if (kd_k8s_create(fx.k8s, &KD_K8S_TASKS, "default", o, &out, NULL, err) != 0)
        fail_msg("create task %s: %s", name, err);
    if (uid != NULL)
        kd_strlcpy(uid, kd_k8s_meta_str(out, "uid"), uidlen);
    json_decref(o);
    json_decref(out);
}

void fx_task_token(const char *name, const char *uid, char *tok, size_t len)
{
    assert_int_equal(kd_api_task_token(fx_key, sizeof(fx_key), "default", name, uid, tok, len), 0);
}

void fx_token(const char *name, const char *uid, char *tok, size_t len)
{
    assert_int_equal(kd_api_trial_token(fx_key, sizeof(fx_key), "default", name, uid, tok, len), 0);
}

void fx_patch(const char *resource, const char *name, const char *sub, const char *js)
{
    char err[KD_ERRLEN] = "";
    struct kd_k8s_gvr g = KD_K8S_GVR("kdet.io", "v1alpha1", resource);
    json_t *p = json_loads(js, 0, NULL);
    assert_non_null(p);
    if (kd_k8s_patch(fx.k8s, &g, "default", name, sub, KD_K8S_PATCH_MERGE, p, NULL, NULL, err) != 0)
        fail_msg("patch %s %s: %s", resource, name, err);
    json_decref(p);
}

json_t *fx_get_trial(const char *name)
{
    char err[KD_ERRLEN] = "";
    json_t *out = NULL;
    if (kd_k8s_get(fx.k8s, &KD_K8S_TRIALS, "default", name, &out, NULL, err) != 0)
        fail_msg("get trial %s: %s", name, err);
    return out;
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct kd_buf *b = ud;
    return kd_buf_append(b, p, sz * n) == 0 ? sz * n : 0;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    (void)ud;
    size_t l = strlen(last_headers);
    if (l + sz * n + 1 < sizeof(last_headers)) {
        memcpy(last_headers + l, p, sz * n);
        last_headers[l + sz * n] = '\0';
    }
    return sz * n;
}

const char *fx_last_header(const char *header)
{
    static char v[256];
    v[0] = '\0';
    size_t hl = strlen(header);
    for (const char *l = last_headers; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
        if (strncasecmp(l, header, hl) == 0 && l[hl] == ':') {
            const char *s = l + hl + 1;
            while (*s == ' ')
                s++;
            size_t n = strcspn(s, "\r\n");
            if (n >= sizeof(v))
                n = sizeof(v) - 1;
            memcpy(v, s, n);
            v[n] = '\0';
            break;
        }
    }
    return v;
}

int fx_http(const char *method, const char *path, const char *token, const char *body, json_t **out)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hd = NULL;
    struct kd_buf b = KD_BUF_INIT(64u << 20);
    char url[2048], auth[512];
    long code = 0;
    last_headers[0] = '\0';
    snprintf(url, sizeof(url), "%s%s", fx.url, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (token != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hd = curl_slist_append(hd, auth);
    }
    hd = curl_slist_append(hd, "Content-Type: application/json");
    /* A body over a route's cap is refused from the head (413) and the connection closed; a
     * body of at most 1 MiB is read and dropped first, so the client reads the answer. A
     * larger one asks first (Expect: 100-continue, as curl does on its own above 1 MiB) and
     * waits for the answer instead of being reset while it sends. */
    if (body != NULL && strlen(body) > (1u << 20)) {
        hd = curl_slist_append(hd, "Expect: 100-continue");
        curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 30000L);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    if (body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK)
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(cc));
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (out != NULL)
        *out = json_loads(kd_buf_str(&b), 0, NULL);
    kd_buf_free(&b);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return (int)code;
}

long long fx_sql_int(const char *sql)
{
    PGconn *c = PQconnectdb(fx.conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect: %s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return v;
}

static size_t sse_body(char *p, size_t sz, size_t n, void *ud)
{
    struct fx_sse *s = ud;
    if (kd_buf_append(&s->got, p, sz * n) != 0)
        return 0;
    if (strstr(kd_buf_str(&s->got), ": connected") != NULL)
        atomic_store(&s->connected, 1);
    return sz * n;
}

void *fx_sse_thread(void *p)
{
    struct fx_sse *s = p;
    char url[512], lei[64];
    long code = 0;
    snprintf(url, sizeof(url), "%s%s", fx.url, s->path);
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Authorization: Bearer " FX_USER_TOKEN);
    if (s->last_event_id != NULL) {
        snprintf(lei, sizeof(lei), "Last-Event-ID: %s", s->last_event_id);
        hd = curl_slist_append(hd, lei);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sse_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    s->code = (int)code;
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return NULL;
}
