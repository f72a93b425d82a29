/*
 * The chief's address through the controller API (see chief.h and
 * docs/launcher.md, "Finding the chief"): as Determined's master tells each
 * container where the chief is, kdet's controller relays what node rank 0
 * reported, so the pods of a multi-node trial need no cluster DNS. A few
 * plain libcurl calls: the launcher links no other HTTP client.
 */
#include "chief.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cacert.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

static bool set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0';
}

bool kd_chief_via_controller(const struct kd_launch_env *e)
{
    return e->num_nodes > 1 && set("KDET_CONTROLLER_URL") && set("KDET_TOKEN") &&
           set("KDET_TRIAL_ID") && set("KDET_NAMESPACE") &&
           (e->node_rank != 0 || set("KDET_POD_IP"));
}

int64_t kd_chief_timeout_ms(void)
{
    double s = 0;
    const char *v = getenv("DTRAIN_RENDEZVOUS_TIMEOUT");
    if (v == NULL || kd_parse_double(v, &s) < 0 || !(s > 0) || s > 86400)
        return KD_CHIEF_DEFAULT_TIMEOUT_MS;
    return (int64_t)(s * 1000.0);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    return kd_buf_append(ud, p, sz * n) == 0 ? sz * n : 0;
}

/*
 * One call. *status: the HTTP status (0 when no answer came); *ans: the
 * JSON answer of a 2xx (caller frees). Returns 0 when an answer came,
 * KD_ECONNECT otherwise (err says why).
 */
static int call(const char *method, const char *url, const char *body, long timeout_s, long *status,
                json_t **ans, char *err)
{
    int rc = 0;
    struct curl_slist *h = NULL;
    struct kd_buf b = KD_BUF_INIT(KD_CHIEF_MAX_ANSWER);
    char *auth = kd_xasprintf("Authorization: Bearer %s", getenv("KDET_TOKEN"));
    CURL *c = curl_easy_init();
    *status = 0;
    *ans = NULL;
    if (c == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "cannot create an HTTP handle");
        goto out;
    }
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body != NULL)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s + 10);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    kd_launch_ca(c);
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK) {
        rc = kd_seterr(err, KD_ECONNECT, "%s", curl_easy_strerror(cc));
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (*status >= 200 && *status < 300) {
        *ans = json_loadb(kd_buf_str(&b) ? kd_buf_str(&b) : "", b.len, 0, NULL);
    } else {
        /* The API's error: {"error": "..."}; keep its message for the caller. */
        json_t *j = json_loadb(kd_buf_str(&b) ? kd_buf_str(&b) : "", b.len, 0, NULL);
        kd_seterr(err, 0, "HTTP %ld: %s", *status,
                  json_string_value(json_object_get(j, "message"))
                      ?: json_string_value(json_object_get(j, "error")) ?: "no message");
        json_decref(j);
    }
out:
    curl_slist_free_all(h);
    if (c != NULL)
        curl_easy_cleanup(c);
    kd_buf_free(&b);
    free(auth);
    return rc;
}

/* A free TCP port on all addresses, where libdtrain's rank 0 listens. */
static int free_port(int *port, char *err)
{
    int rc = 0, fd = -1;
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        rc = kd_seterr(err, -errno, "cannot pick a free rendezvous port: %s", strerror(errno));
        goto out;
    }
    *port = ntohs(sa.sin_port);
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* 4xx other than 429 will not change by retrying. */
static bool final_status(long status)
{
    return status >= 400 && status < 500 && status != 429;
}

int kd_chief_resolve(struct kd_launch_env *e, int64_t timeout_ms, char *err)
{
    int rc = 0, port = 0;
    long status = 0;
    json_t *ans = NULL;
    char *url = NULL, *body = NULL, cerr[KD_ERRLEN] = "";
    const char *base = getenv("KDET_CONTROLLER_URL");
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    int64_t deadline = kd_mono_ms() + timeout_ms, delay = 250;
    bool chief = e->node_rank == 0;
    const char *pod_ip = getenv("KDET_POD_IP");
    if (chief) {
        if ((rc = free_port(&port, err)) < 0)
            goto out;
        url = kd_xasprintf("%.*s/api/v1/namespaces/%s/trials/%s/rendezvous", (int)bl, base,
                           getenv("KDET_NAMESPACE"), getenv("KDET_TRIAL_ID"));
        json_t *b =
            json_pack("{s:s,s:s,s:i}", "run_id", e->run_id, "address", pod_ip, "port", port);
        body = json_dumps(b, JSON_COMPACT);
        json_decref(b);
    } else {
        url = kd_xasprintf(
            "%.*s/api/v1/namespaces/%s/trials/%s/rendezvous?run_id=%s&timeout=", (int)bl, base,
            getenv("KDET_NAMESPACE"), getenv("KDET_TRIAL_ID"), e->run_id);
    }
    for (;;) {
        int64_t left = deadline - kd_mono_ms();
        long poll_s = left / 1000 < KD_CHIEF_POLL_S ? (long)(left / 1000) : KD_CHIEF_POLL_S;
        char *u = chief ? kd_xstrdup(url) : kd_xasprintf("%s%ld", url, poll_s > 0 ? poll_s : 0);
        json_decref(ans);
        ans = NULL;
        rc = call(chief ? "PUT" : "GET", u, body, chief ? 30 : poll_s, &status, &ans, cerr);
        free(u);
        if (rc == 0 && status >= 200 && status < 300) {
            if (chief)
                break;
            const char *addr = json_string_value(json_object_get(ans, "address"));
            json_int_t p = json_integer_value(json_object_get(ans, "port"));
            if (json_is_true(json_object_get(ans, "ready")) && addr != NULL && addr[0] != '\0' &&
                strlen(addr) <= KD_LAUNCH_MAX_ADDR && p >= 1 && p <= 65535) {
                kd_strlcpy(e->chief_addr, addr, sizeof(e->chief_addr));
                port = (int)p;
                break;
            }
            /* Not reported yet: the long-poll already waited; ask again at once. */
            delay = 250;
        } else if (rc == 0 && final_status(status)) {
            rc = kd_seterr(err, status == 401 ? KD_EUNAUTHORIZED : KD_EINVAL,
                           "the controller refused the rendezvous %s: %s",
                           chief ? "report" : "query", cerr);
            goto out;
        } else {
            KD_WARN("rendezvous call failed; retrying", "op=%s error=%s retry_ms=%lld",
                    chief ? "report" : "query", kd_logq(cerr), (long long)delay);
            kd_sleep_ms(delay < left ? delay : (left > 0 ? left : 0));
            delay = delay * 2 > 4000 ? 4000 : delay * 2;
        }
        if (kd_mono_ms() >= deadline) {
            rc =
                kd_seterr(err, KD_ETIMEDOUT,
                          "%s within the rendezvous timeout of %lld ms (DTRAIN_RENDEZVOUS_TIMEOUT)",
                          chief ? "cannot report the chief's address to the controller"
                                : "the chief (node rank 0) did not report its address",
                          (long long)timeout_ms);
            goto out;
        }
    }
    if (chief)
        kd_strlcpy(e->chief_addr, pod_ip, sizeof(e->chief_addr));
    e->master_port = port;
    e->port_source = "controller";
    rc = 0;
out:
    json_decref(ans);
    free(url);
    free(body);
    return rc;
}
