/*
 * Asking a notebook's Jupyter whether it is in use (see taskprobe.h). Two
 * plain GETs with libcurl, answers capped, then a pure reading.
 */
#include "taskprobe.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/buf.h"
#include "core/str.h"
#include "core/time.h"

static void later(int64_t *acc, const json_t *v)
{
    int64_t ms = 0;
    const char *s = json_string_value(v);
    if (s != NULL && kd_time_parse_rfc3339(s, &ms) == 0 && ms > *acc)
        *acc = ms;
}

bool kd_taskprobe_listens(const char *host, int port, int timeout_ms)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    bool ok = false;
    snprintf(ps, sizeof(ps), "%d", port);
    if (host == NULL || port <= 0 || getaddrinfo(host, ps, &hints, &res) != 0)
        return false;
    for (struct addrinfo *ai = res; ai != NULL && !ok; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r == 0) {
            ok = true;
        } else if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            ok = poll(&p, 1, timeout_ms) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

int kd_taskprobe_read(const json_t *status, const json_t *kernels, const json_t *terminals,
                      const json_t *sessions, const char *idle_type, struct kd_taskprobe *out)
{
    memset(out, 0, sizeof(*out));
    if (!json_is_object(status))
        return KD_EPROTO;
    const char *t = idle_type != NULL ? idle_type : "kernels_or_terminals";
    out->connections = (int)json_integer_value(json_object_get(status, "connections"));
    out->kernels = json_is_array(kernels)
                       ? (int)json_array_size(kernels)
                       : (int)json_integer_value(json_object_get(status, "kernels"));
    out->terminals = json_is_array(terminals) ? (int)json_array_size(terminals) : 0;
    out->sessions = json_is_array(sessions) ? (int)json_array_size(sessions) : 0;
    later(&out->last_ms, json_object_get(status, "last_activity"));
    size_t i;
    const json_t *k;
    int kconn = 0;
    json_array_foreach(kernels, i, k)
    {
        const char *st = json_string_value(json_object_get(k, "execution_state"));
        if (st != NULL && strcmp(st, "busy") == 0)
            out->busy_kernels++;
        kconn += (int)json_integer_value(json_object_get(k, "connections"));
        later(&out->last_ms, json_object_get(k, "last_activity"));
    }
    json_array_foreach(terminals, i, k)
    {
        later(&out->last_ms, json_object_get(k, "last_activity"));
    }
    if (kconn > out->connections)
        out->connections = kconn;
    /* Determined's rules: a kernel, terminal or session that exists; an open kernel channel;
     * a kernel executing (idle time then counts from the last activity, terminals' too). */
    if (strcmp(t, "kernel_connections") == 0)
        out->busy = kconn > 0;
    else if (strcmp(t, "activity") == 0)
        out->busy = out->busy_kernels > 0;
    else
        out->busy = out->kernels > 0 || out->terminals > 0 || out->sessions > 0;
    return 0;
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    return kd_buf_append(ud, p, sz * n) == 0 ? sz * n : 0;
}

/* GET path (under the server's base URL) on the probe's handle; *out the JSON answer of a 200. */
static int get(CURL *c, const char *base, const char *path, json_t **out, char *err)
{
    int rc = 0;
    long status = 0;
    char cerr[CURL_ERROR_SIZE] = "", url[700];
    struct kd_buf ans = KD_BUF_INIT(KD_TASKPROBE_MAX_ANSWER);
    *out = NULL;
    snprintf(url, sizeof(url), "%s%s?no_track_activity=1", base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &ans);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK) {
        rc = kd_seterr(err, KD_ECONNECT, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status == 404) {
        rc = kd_seterr(err, KD_ENOTFOUND, "HTTP 404");
        goto out;
    }
    if (status != 200) {
        rc = kd_seterr(err, KD_EPROTO, "HTTP %ld", status);
        goto out;
    }
    *out = json_loadb(ans.data != NULL ? ans.data : "", ans.len, 0, NULL);
    if (*out == NULL)
        rc = kd_seterr(err, KD_EPROTO, "the answer is not JSON");
out:
    /* Nothing of this frame stays on the handle. */
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, NULL);
    kd_buf_free(&ans);
    return rc;
}

/*
 * The four reads of one probe go over one handle, so over one kept-alive connection: a probe
 * every few seconds per running notebook costs one connect, not four.
 */
int kd_taskprobe_notebook(const char *host, int port, const char *base_path, const char *token,
                          const char *idle_type, struct kd_taskprobe *out, char *err)
{
    char base[600];
    json_t *status = NULL, *kernels = NULL, *terminals = NULL, *sessions = NULL;
    bool v6 = strchr(host, ':') != NULL;
    struct curl_slist *h = NULL;
    char *auth = NULL;
    int rc = 0;
    memset(out, 0, sizeof(*out));
    CURL *c = curl_easy_init();
    size_t alen = strlen(token) + 32;
    if (c == NULL || (auth = malloc(alen)) == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "cannot make an HTTP client");
        goto out;
    }
    snprintf(auth, alen, "Authorization: token %s", token);
    h = curl_slist_append(h, auth);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 3000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    snprintf(base, sizeof(base), "http://%s%s%s:%d%s", v6 ? "[" : "", host, v6 ? "]" : "", port,
             base_path);
    if ((rc = get(c, base, "api/status", &status, err)) != 0 ||
        (rc = get(c, base, "api/kernels", &kernels, err)) != 0)
        goto out;
    /* Terminals are Jupyter's optional part (terminado): 404 without them. */
    if ((rc = get(c, base, "api/terminals", &terminals, err)) != 0 && rc != KD_ENOTFOUND)
        goto out;
    if ((rc = get(c, base, "api/sessions", &sessions, err)) != 0 && rc != KD_ENOTFOUND)
        goto out;
    if ((rc = kd_taskprobe_read(status, kernels, terminals, sessions, idle_type, out)) != 0)
        kd_seterr(err, rc, "api/status is not an object");
out:
    if (auth != NULL) {
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    curl_slist_free_all(h);
    if (c != NULL)
        curl_easy_cleanup(c);
    json_decref(status);
    json_decref(kernels);
    json_decref(terminals);
    json_decref(sessions);
    return rc;
}
