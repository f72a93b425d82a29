/*
 * The launcher's calls to the controller API with the pod's token
 * (KDET_TOKEN, KDET_CONTROLLER_URL's CA): a few plain libcurl requests, so
 * the launcher links no other HTTP client. Used to find the chief of a
 * multi-node trial (chief.c) and to report a task's service port
 * (service.c).
 */
#include "ctlapi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "cacert.h"
#include "core/alloc.h"
#include "core/buf.h"

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    return kd_buf_append(ud, p, sz * n) == 0 ? sz * n : 0;
}

/*
 * One call. *status: the HTTP status (0 when no answer came); *ans: the
 * JSON answer of a 2xx (caller frees). Returns 0 when an answer came,
 * KD_ECONNECT otherwise (err says why).
 */
int kd_ctlapi_call(const char *method, const char *url, const char *body, long timeout_s,
                   long *status, json_t **ans, char *err)
{
    int rc = 0;
    struct curl_slist *h = NULL;
    struct kd_buf b = KD_BUF_INIT(KD_CTLAPI_MAX_ANSWER);
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

int kd_ctlapi_free_port(int *port, char *err)
{
    int rc = 0, fd = -1;
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        rc = kd_seterr(err, -errno, "cannot pick a free port: %s", strerror(errno));
        goto out;
    }
    *port = ntohs(sa.sin_port);
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

bool kd_ctlapi_final(long status)
{
    return status >= 400 && status < 500 && status != 429;
}
