/*
 * The controller API over HTTPS (libmicrohttpd with GnuTLS) with a
 * certificate from lib/http/cert.c: a client that trusts the CA gets
 * through, one that does not (the system's CAs, another certificate) is
 * stopped before any token is sent, plain HTTP to the HTTPS port gets no
 * answer; plain HTTP is refused off 127.0.0.1; libdtrain (KDET_CONTROLLER_CA)
 * and kdet-launch's requests (launcher/cacert.c) trust the CA they are given.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <openssl/crypto.h>

#include "cacert.h"
#include "core/time.h"
#include "dtrain_client.h"
#include "fx.h"
#include "http/cert.h"

static char *cert, *key, *other_cert, *other_key;
static struct kd_api *tls_api;
static char tls_url[64];

static int setup(void **state)
{
    char err[KD_ERRLEN] = "";
    struct kd_http_cert_opts o = {.cn = "kdet-controller", .san = "IP:127.0.0.1,DNS:localhost"};
    if (fx_setup(state) != 0)
        return -1;
    if (kd_http_cert_make(&o, &cert, &key, err) != 0 ||
        kd_http_cert_make(&o, &other_cert, &other_key, err) != 0) {
        fprintf(stderr, "kd_http_cert_make: %s\n", err);
        return -1;
    }
    struct kd_api_opts ao = {.store = fx.store,
                             .k8s = fx.k8s,
                             .ns = "default",
                             .token_key = fx_key,
                             .token_key_len = sizeof(fx_key),
                             .user_token = FX_USER_TOKEN,
                             .tls_cert_pem = cert,
                             .tls_key_pem = key};
    if (kd_api_start(&ao, &tls_api, err) != 0) {
        fprintf(stderr, "kd_api_start (TLS): %s\n", err);
        return -1;
    }
    snprintf(tls_url, sizeof(tls_url), "https://127.0.0.1:%d", kd_api_port(tls_api));
    return 0;
}

static int teardown(void **state)
{
    kd_api_stop(tls_api);
    free(cert);
    free(key);
    free(other_cert);
    free(other_key);
    return fx_teardown(state);
}

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return sz * n;
}

/* GET url+path with the bootstrap token, trusting ca (NULL: the system's CAs). */
static CURLcode get(const char *base, const char *path, const char *ca, long *code)
{
    char url[256];
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Authorization: Bearer " FX_USER_TOKEN);
    snprintf(url, sizeof(url), "%s%s", base, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    if (ca != NULL) {
        struct curl_blob blob = {(void *)ca, strlen(ca), CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    }
    CURLcode cc = curl_easy_perform(h);
    *code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return cc;
}

static void test_https(void **state)
{
    (void)state;
    long code = 0;
    assert_int_equal(get(tls_url, "/api/v1/me", cert, &code), CURLE_OK);
    assert_int_equal(code, 200);
    /* Nobody else's trust: verification fails, nothing is answered. */
    assert_int_equal(get(tls_url, "/api/v1/me", other_cert, &code), CURLE_PEER_FAILED_VERIFICATION);
    assert_int_equal(code, 0);
    assert_int_not_equal(get(tls_url, "/api/v1/me", NULL, &code), CURLE_OK);
    assert_int_equal(code, 0);
    /* Plain HTTP to the HTTPS port gets no HTTP answer. */
    char plain[64];
    snprintf(plain, sizeof(plain), "http://127.0.0.1:%d", kd_api_port(tls_api));
    get(plain, "/healthz", NULL, &code);
    assert_true(code == 0 || code >= 400);
    /* The health probe answers over HTTPS too. */
    assert_int_equal(get(tls_url, "/healthz", cert, &code), CURLE_OK);
    assert_int_equal(code, 200);
}

static void test_plain_only_on_loopback(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    struct kd_api *a = NULL;
    struct kd_api_opts o = {.store = fx.store,
                            .k8s = fx.k8s,
                            .ns = "default",
                            .listen_addr = "0.0.0.0",
                            .token_key = fx_key,
                            .token_key_len = sizeof(fx_key)};
    assert_int_equal(kd_api_start(&o, &a, err), KD_EINVAL);
    assert_non_null(strstr(err, "127.0.0.1"));
    assert_null(a);
    o.listen_addr = NULL;
    o.tls_cert_pem = cert; /* a certificate without its key */
    assert_int_equal(kd_api_start(&o, &a, err), KD_EINVAL);
    assert_null(a);
}

static void test_trial_clients(void **state)
{
    (void)state;
    char uid[64], tok[64], err[DTRAIN_ERRLEN] = "";
    struct dtrain_client *c = NULL;
    fx_experiment("tls-exp", "loss");
    fx_trial("tls-exp", "tls-exp-1", 100, uid, sizeof(uid));
    fx_token("tls-exp-1", uid, tok, sizeof(tok));
    setenv("KDET_CONTROLLER_URL", tls_url, 1);
    setenv("KDET_TOKEN", tok, 1);
    setenv("KDET_TRIAL_ID", "tls-exp-1", 1);
    setenv("KDET_NAMESPACE", "default", 1);
    /* Without the CA, libdtrain cannot reach the controller (and says so). */
    unsetenv("KDET_CONTROLLER_CA");
    struct dtrain_client_opts o = {.url = tls_url,
                                   .token = tok,
                                   .trial = "tls-exp-1",
                                   .retry_ms = 300,
                                   .request_timeout_ms = 3000};
    assert_int_equal(dtrain_client_new(&o, &c, err), 0);
    int preempt = -1;
    assert_int_not_equal(dtrain_should_preempt(c, 0, &preempt, err), 0);
    assert_null(strstr(err, tok));
    dtrain_client_free(c);
    c = NULL;
    /* With KDET_CONTROLLER_CA (what trial pods get from their token Secret) it can. */
    setenv("KDET_CONTROLLER_CA", cert, 1);
    assert_int_equal(dtrain_client_from_env(&c, err), 0);
    assert_int_equal(dtrain_should_preempt(c, 0, &preempt, err), 0);
    assert_int_equal(preempt, 0);
    assert_int_equal(dtrain_report_metrics(c, "validation", 10, "{\"loss\":0.5}", err), 0);
    dtrain_client_free(c);
    /* kdet-launch's requests: the same variables. */
    CURL *h = curl_easy_init();
    char url[256];
    snprintf(url, sizeof(url), "%s/healthz", tls_url);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    kd_launch_ca(h);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_cleanup(h);
    unsetenv("KDET_CONTROLLER_CA");
    setenv("KDET_CONTROLLER_CA_FILE", "/nonexistent/ca.crt", 1);
    h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    kd_launch_ca(h);
    assert_int_not_equal(curl_easy_perform(h), CURLE_OK);
    unsetenv("KDET_CONTROLLER_CA_FILE");
    curl_easy_cleanup(h);
}

static void test_cert_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/kd-cert-XXXXXX", err[KD_ERRLEN] = "", path[128];
    char *c1 = NULL, *k1 = NULL, *c2 = NULL, *k2 = NULL;
    struct stat st;
    assert_non_null(mkdtemp(dir));
    struct kd_http_cert_opts o = {.cn = "x", .san = "IP:127.0.0.1"};
    assert_int_equal(kd_http_cert_keep(dir, "controller", &o, &c1, &k1, err), 0);
    snprintf(path, sizeof(path), "%s/controller.key", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    snprintf(path, sizeof(path), "%s/controller.crt", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    /* Kept: the same certificate the next time. */
    assert_int_equal(kd_http_cert_keep(dir, "controller", &o, &c2, &k2, err), 0);
    assert_string_equal(c1, c2);
    assert_string_equal(k1, k2);
    struct kd_http_cert_opts bad = {.cn = NULL};
    char *c3 = NULL, *k3 = NULL;
    assert_int_equal(kd_http_cert_make(&bad, &c3, &k3, err), KD_EINVAL);
    assert_null(c3);
    unlink(path);
    snprintf(path, sizeof(path), "%s/controller.key", dir);
    unlink(path);
    rmdir(dir);
    free(c1);
    free(c2);
    OPENSSL_cleanse(k1, strlen(k1));
    free(k1);
    free(k2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_https),
        cmocka_unit_test(test_plain_only_on_loopback),
        cmocka_unit_test(test_trial_clients),
        cmocka_unit_test(test_cert_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
