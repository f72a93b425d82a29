/*
 * det's client of kdet-controller's user API (docs/api.md): where the API,
 * its CA and the user token are found (environment, det user login's file,
 * else the local deployment's files), requests with the bearer token over
 * HTTPS that verifies the controller, and errors turned into messages that
 * say what to do. The token is never printed.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "k8s/config.h"

/* The largest answer det reads (a long metric series). */
#define API_MAX_BODY (256u << 20)
/* A token or URL file. */
#define API_MAX_FILE 4096

/* The first line of a small file, trimmed; malloc'd, or NULL with errno. */
static char *read_line(const char *path)
{
    char buf[API_MAX_FILE + 1];
    char *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto out;
    ssize_t n = read(fd, buf, API_MAX_FILE);
    int e = errno;
    close(fd);
    if (n < 0) {
        errno = e;
        goto out;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    char *s = buf;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strlen(s);
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        s[--len] = '\0';
    if (len == 0) {
        errno = ENODATA;
        goto out;
    }
    out = kd_xstrdup(s);
out:
    return out;
}

void det_deploy_default_dir(char *buf, size_t len)
{
    const char *dir = getenv("KDET_DATA_DIR");
    const char *home = getenv("HOME");
    if (dir != NULL && dir[0] != '\0')
        snprintf(buf, len, "%s", dir);
    else if (geteuid() == 0 || home == NULL || home[0] == '\0')
        snprintf(buf, len, "/var/lib/kdet/local");
    else
        snprintf(buf, len, "%s/.kdet/local", home);
}

static void api_namespace(const struct det_args *a, struct det_api *api)
{
    struct kd_k8s_config_opts o = {.kubeconfig = a->kubeconfig, .context = a->context};
    struct kd_k8s_config cfg = {0};
    const char *ns = a->ns;
    if (ns == NULL && kd_k8s_config_load(&o, &cfg, NULL) == 0)
        ns = cfg.namespace;
    kd_strlcpy(api->ns, ns ? ns : "default", sizeof(api->ns));
    kd_k8s_config_free(&cfg);
}

/* An error: to stderr, or into api->why when the caller asked for quiet. */
KD_PRINTF(2, 3) static void say(struct det_api *api, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (api->why != NULL) {
        vsnprintf(api->why, api->whylen, fmt, ap);
    } else {
        fputs("det: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

int det_api_open_quiet(const struct det_args *a, const char *verb, struct det_api *api, char *why,
                       size_t len)
{
    memset(api, 0, sizeof(*api));
    api->why = why;
    api->whylen = len;
    return det_api_open(a, verb, api);
}

void det_login_file(char *buf, size_t len)
{
    const char *f = getenv("KDET_LOGIN_FILE"), *home = getenv("HOME");
    if (f != NULL && f[0] != '\0')
        snprintf(buf, len, "%s", f);
    else if (home != NULL && home[0] != '\0')
        snprintf(buf, len, "%s/.kdet/user-token", home);
    else
        buf[0] = '\0';
}

/*
 * The user token: $KDET_API_TOKEN, $KDET_API_TOKEN_FILE, the file `det user
 * login` wrote, else (local) the local deployment's bootstrap token. 0 or an
 * exit code (said).
 */
static int find_token(struct det_api *api, const char *verb, const char *localdir)
{
    const char *tok = getenv("KDET_API_TOKEN");
    const char *tokfile = getenv("KDET_API_TOKEN_FILE");
    char login[4000], path[4200];
    int rc = DET_EXIT_OK;
    det_login_file(login, sizeof(login));
    if (tok != NULL && tok[0] != '\0') {
        api->token = kd_xstrdup(tok);
        snprintf(api->source, sizeof(api->source), "$KDET_API_TOKEN");
    } else if (tokfile != NULL && tokfile[0] != '\0') {
        api->token = read_line(tokfile);
        if (api->token == NULL) {
            say(api, "KDET_API_TOKEN_FILE=%s: %s", tokfile,
                errno == ENODATA ? "empty" : strerror(errno));
            rc = DET_EXIT_CLUSTER;
            goto out;
        }
        snprintf(api->source, sizeof(api->source), "%s", tokfile);
    } else if (login[0] != '\0' && (api->token = read_line(login)) != NULL) {
        snprintf(api->source, sizeof(api->source), "%s (det user login)", login);
    } else if (localdir != NULL) {
        if (snprintf(path, sizeof(path), "%s/user-token", localdir) >= (int)sizeof(path))
            errno = ENAMETOOLONG;
        else
            api->token = read_line(path);
        if (api->token == NULL) {
            say(api,
                "%s needs a user token, and %s cannot be read (%s): run det deploy local up, "
                "det user login, or set KDET_API_TOKEN",
                verb, path, strerror(errno));
            rc = DET_EXIT_CLUSTER;
            goto out;
        }
        snprintf(api->source, sizeof(api->source), "the local deployment in %s", localdir);
    } else {
        say(api,
            "%s needs a user token: run det user login, or set KDET_API_TOKEN (or "
            "KDET_API_TOKEN_FILE)",
            verb);
        rc = DET_EXIT_CLUSTER;
    }
out:
    return rc;
}

int det_api_open(const struct det_args *a, const char *verb, struct det_api *api)
{
    int rc = DET_EXIT_OK;
    char dir[4096], path[4200];
    const char *url = getenv("KDET_API_URL");
    const char *ca = getenv("KDET_API_CA_FILE");
    bool local = false;
    char *why = api->why;
    size_t whylen = api->whylen;
    memset(api, 0, sizeof(*api));
    api->why = why;
    api->whylen = whylen;
    det_deploy_default_dir(dir, sizeof(dir));
    if (url != NULL && url[0] != '\0') {
        api->url = kd_xstrdup(url);
    } else {
        /* the local deployment, as 'det deploy local up' left it */
        snprintf(path, sizeof(path), "%s/controller-url", dir);
        api->url = read_line(path);
        if (api->url == NULL) {
            say(api,
                "%s needs the controller API: run det deploy local up, or set KDET_API_URL "
                "and KDET_API_TOKEN (or log in with det user login)",
                verb);
            rc = DET_EXIT_CLUSTER;
            goto out;
        }
        local = true;
    }
    if ((rc = find_token(api, verb, local ? dir : NULL)) != 0)
        goto out;
    if (ca != NULL && ca[0] != '\0') {
        api->ca_file = kd_xstrdup(ca);
        snprintf(api->ca_source, sizeof(api->ca_source), "$KDET_API_CA_FILE");
    } else if (local) {
        /* Trust on first use: the certificate det deploy local up made for its controller. */
        snprintf(path, sizeof(path), "%s/controller.crt", dir);
        api->ca_file = kd_xstrdup(path);
        snprintf(api->ca_source, sizeof(api->ca_source), "the local deployment");
    }
    size_t n = strlen(api->url);
    while (n > 0 && api->url[n - 1] == '/')
        api->url[--n] = '\0';
    if (!kd_str_has_prefix(api->url, "http://") && !kd_str_has_prefix(api->url, "https://")) {
        say(api, "controller API URL \"%s\": must start with http:// or https://", api->url);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (strlen(api->token) > 1024 || strpbrk(api->token, " \t\r\n") != NULL) {
        say(api, "the user token from %s is malformed (whitespace, or over 1024 bytes)",
            api->source);
        rc = DET_EXIT_CLUSTER;
        goto out;
    }
    kd_log_add_secret(api->token);
    api_namespace(a, api);
out:
    return rc;
}

void det_api_close(struct det_api *api)
{
    free(api->url);
    api->url = NULL;
    free(api->ca_file);
    api->ca_file = NULL;
    if (api->token != NULL) {
        memset(api->token, 0, strlen(api->token));
        free(api->token);
        api->token = NULL;
    }
}

int det_urlencode(struct kd_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && rc == 0; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~')
            rc = kd_buf_putc(b, (char)*p);
        else
            rc = kd_buf_printf(b, "%%%c%c", hex[*p >> 4], hex[*p & 15]);
    }
    return rc;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct kd_buf *b = ud;
    return kd_buf_append(b, p, size * n) == 0 ? size * n : 0;
}

int det_api_get(struct det_api *api, const char *path, json_t **out)
{
    return det_api_request(api, "GET", path, out);
}

void det_api_tls(const struct det_api *api, void *curl)
{
    if (api->ca_file != NULL && kd_str_has_prefix(api->url, "https://"))
        curl_easy_setopt((CURL *)curl, CURLOPT_CAINFO, api->ca_file);
}

int det_api_request(struct det_api *api, const char *method, const char *path, json_t **out)
{
    return det_api_send(api, method, path, NULL, out);
}

int det_api_send(struct det_api *api, const char *method, const char *path, const json_t *body_in,
                 json_t **out)
{
    struct kd_buf body = KD_BUF_INIT(API_MAX_BODY);
    struct curl_slist *hl = NULL;
    char *url = kd_xasprintf("%s%s", api->url, path), *auth = NULL;
    char cerr[CURL_ERROR_SIZE] = "";
    long status = 0;
    int rc = DET_EXIT_ERROR;
    json_t *j = NULL;
    json_error_t je;
    char *sent = body_in != NULL ? json_dumps(body_in, JSON_COMPACT) : NULL;
    CURL *h;
    *out = NULL;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    h = curl_easy_init();
    if (h == NULL)
        kd_oom(1);
    auth = kd_xasprintf("Authorization: Bearer %s", api->token);
    hl = curl_slist_append(hl, auth);
    hl = curl_slist_append(hl, "Accept: application/json");
    if (strcmp(method, "DELETE") == 0 && sent == NULL) {
        /* DELETE routes take no body (an announced one is refused with 413) */
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    } else if (strcmp(method, "GET") != 0) {
        hl = curl_slist_append(hl, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, sent != NULL ? sent : "{}");
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kdet-det");
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    det_api_tls(api, h);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK) {
        if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE)
            say(api,
                "the controller API at %s presented a certificate det does not trust (%s): "
                "%s. det trusts %s%s%s",
                api->url, curl_easy_strerror(cc), cerr[0] ? cerr : "",
                api->ca_file != NULL ? api->ca_file : "the system's CAs",
                api->ca_file != NULL ? ", from " : "", api->ca_file != NULL ? api->ca_source : "");
        else if (cc == CURLE_WRITE_ERROR)
            say(api, "the controller API's answer to %s %s is larger than %u bytes", method, path,
                API_MAX_BODY);
        else
            say(api,
                "cannot reach the controller API at %s (from %s): %s. Is kdet-controller "
                "running with a database? (on this machine: det deploy local status)",
                api->url, api->source, cerr[0] ? cerr : curl_easy_strerror(cc));
        rc = cc == CURLE_WRITE_ERROR ? DET_EXIT_ERROR : DET_EXIT_CLUSTER;
        goto out;
    }
    j = json_loadb(body.data ? body.data : "", body.len, 0, &je);
    const char *msg = json_string_value(json_object_get(j, "error"));
    if (status == 401) {
        say(api,
            "the controller API at %s refused the user token (401 Unauthorized%s%s): the "
            "token from %s is wrong or revoked; log in with det user login, or give a user "
            "token (KDET_API_TOKEN; the bootstrap administrator's is the Secret "
            "kdet-user-token in a cluster)",
            api->url, msg ? ": " : "", msg ? msg : "", api->source);
        rc = DET_EXIT_CLUSTER;
    } else if (status == 403) {
        say(api, "the controller API refused %s %s (403 Forbidden): %s", method, path,
            msg ? msg : "not allowed for this user");
        rc = DET_EXIT_CLUSTER;
    } else if (status == 409) {
        say(api, "%s", msg ? msg : "409 Conflict");
        rc = DET_EXIT_ERROR;
    } else if (status == 404) {
        if (!api->quiet_404)
            say(api, "%s (namespace \"%s\")", msg ? msg : "not found", api->ns);
        rc = DET_EXIT_NOTFOUND;
    } else if (status == 400) {
        say(api, "the controller API refused the request: %s", msg ? msg : "400 Bad Request");
        rc = DET_EXIT_USAGE;
    } else if (status < 200 || status >= 300) {
        say(api, "the controller API answered %ld to %s %s%s%s", status, method, path,
            msg ? ": " : "", msg ? msg : "");
        rc = status == 503 ? DET_EXIT_CLUSTER : DET_EXIT_ERROR;
    } else if (!json_is_object(j)) {
        say(api, "the controller API's answer to %s %s is not a JSON object", method, path);
    } else {
        *out = j;
        j = NULL;
        rc = DET_EXIT_OK;
    }
out:
    json_decref(j);
    curl_easy_cleanup(h);
    curl_slist_free_all(hl);
    if (auth != NULL) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    free(url);
    free(sent);
    kd_buf_free(&body);
    return rc;
}
