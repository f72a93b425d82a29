/*
 * Connection config resolution: the in-cluster service account, or
 * kubeconfig files merged by kubectl's $KUBECONFIG rules, flattened into
 * struct kd_k8s_config. Errors name the file, the line and the field.
 */
#include "k8s/config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "yaml/yaml.h"

#define MAX_FILES 64
#define MAX_ENTRIES 1024

void kd_k8s_config_free(struct kd_k8s_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->server);
    free(cfg->namespace);
    free(cfg->context);
    free(cfg->source);
    free(cfg->ca_file);
    free(cfg->ca_data);
    free(cfg->cert_file);
    free(cfg->cert_data);
    free(cfg->key_file);
    free(cfg->key_data);
    free(cfg->token);
    free(cfg->token_file);
    free(cfg->username);
    free(cfg->password);
    memset(cfg, 0, sizeof(*cfg));
}

/* Read a whole small file (at most max bytes) into a NUL-terminated string. */
static int read_file(const char *path, size_t max, char **out, size_t *outlen, char *err)
{
    struct kd_buf b = KD_BUF_INIT(max);
    char chunk[4096];
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        kd_seterr(err, rc, "%s: %s", path, strerror(errno));
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            kd_seterr(err, rc, "%s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        rc = kd_buf_append(&b, chunk, (size_t)n);
        if (rc < 0) {
            kd_seterr(err, rc, "%s: larger than %zu bytes", path, max);
            goto out;
        }
    }
    if (outlen != NULL)
        *outlen = b.len;
    *out = kd_buf_steal(&b);
    if (*out == NULL)
        rc = KD_ENOMEM;
out:
    if (fd >= 0)
        close(fd);
    kd_buf_free(&b);
    return rc;
}

int kd_k8s_read_token(const char *path, char **out, char *err)
{
    char *s = NULL;
    size_t len = 0;
    int rc = read_file(path, KD_K8S_TOKEN_MAX, &s, &len, err);
    if (rc < 0)
        goto out;
    while (len > 0 &&
           (s[len - 1] == '\n' || s[len - 1] == '\r' || s[len - 1] == ' ' || s[len - 1] == '\t'))
        s[--len] = '\0';
    size_t skip = strspn(s, " \t\r\n");
    if (skip > 0)
        memmove(s, s + skip, len - skip + 1);
    if (s[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL, "%s: the token file is empty", path);
        goto out;
    }
    kd_log_add_secret(s);
    *out = s;
    s = NULL;
out:
    free(s);
    return rc;
}

static int b64val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+' || ch == '-')
        return 62;
    if (ch == '/' || ch == '_')
        return 63;
    return -1;
}

/* Written by hand: OpenSSL's EVP_DecodeBlock keeps padding bytes and
 * rejects embedded newlines, which kubeconfig data fields may carry. */
int kd_k8s_base64_decode(const char *in, char **out, size_t *outlen)
{
    size_t n = strlen(in);
    unsigned char *res = kd_xmalloc(n / 4 * 3 + 4);
    size_t len = 0;
    unsigned acc = 0;
    int bits = 0, pad = 0, rc = 0;
    for (const char *p = in; *p != '\0'; p++) {
        int v;
        if (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
            continue;
        if (*p == '=') {
            pad++;
            continue;
        }
        if (pad > 0 || (v = b64val((unsigned char)*p)) < 0) {
            rc = KD_EPARSE;
            goto out;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            res[len++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    if (bits >= 6 || pad > 2) {
        rc = KD_EPARSE;
        goto out;
    }
    res[len] = '\0';
    *out = (char *)res;
    *outlen = len;
    res = NULL;
out:
    free(res);
    return rc;
}

/* ---- in-cluster ---------------------------------------------------------- */

int kd_k8s_config_in_cluster(const char *sa_dir, struct kd_k8s_config *cfg, char *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    char path[PATH_MAX];
    char *ns = NULL;
    int rc = 0;
    struct kd_k8s_config c = {0};

    if (sa_dir == NULL)
        sa_dir = KD_K8S_SA_DIR;
    if (host == NULL || host[0] == '\0' || port == NULL || port[0] == '\0') {
        rc = kd_seterr(err, KD_ENOTFOUND,
                       "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                       "are not both set");
        goto out;
    }
    int portnum;
    if (kd_parse_int(port, &portnum) < 0 || portnum < 1 || portnum > 65535) {
        rc =
            kd_seterr(err, KD_EINVAL, "KUBERNETES_SERVICE_PORT: \"%s\" is not a port number", port);
        goto out;
    }
    if (strchr(host, ':') != NULL)
        c.server = kd_xasprintf("https://[%s]:%d", host, portnum);
    else
        c.server = kd_xasprintf("https://%s:%d", host, portnum);
    snprintf(path, sizeof(path), "%s/token", sa_dir);
    c.token_file = kd_xstrdup(path);
    rc = kd_k8s_read_token(path, &c.token, err);
    if (rc < 0)
        goto out;
    snprintf(path, sizeof(path), "%s/ca.crt", sa_dir);
    if (access(path, R_OK) != 0) {
        rc = kd_seterr(err, -errno, "%s: %s", path, strerror(errno));
        goto out;
    }
    c.ca_file = kd_xstrdup(path);
    snprintf(path, sizeof(path), "%s/namespace", sa_dir);
    if (read_file(path, 256, &ns, NULL, NULL) == 0) {
        ns[strcspn(ns, " \t\r\n")] = '\0';
        if (ns[0] != '\0')
            c.namespace = kd_xstrdup(ns);
    }
    if (c.namespace == NULL)
        c.namespace = kd_xstrdup("default");
    c.source = kd_xstrdup("in-cluster");
    *cfg = c;
    memset(&c, 0, sizeof(c));
out:
    free(ns);
    kd_k8s_config_free(&c);
    return rc;
}

/* ---- kubeconfig ---------------------------------------------------------- */

/* One named cluster, user or context, and the file that defined it first. */
struct entry {
    const char *name;
    json_t *val; /* the "cluster" / "user" / "context" object */
    int file;    /* index into files[] */
    size_t idx;  /* position in its file's list, for error paths */
};

struct kubeconfig {
    struct kd_yaml_doc *docs[MAX_FILES];
    char *paths[MAX_FILES];
    int nfiles;
    struct entry clusters[MAX_ENTRIES], users[MAX_ENTRIES], contexts[MAX_ENTRIES];
    size_t nclusters, nusers, ncontexts;
    const char *current;
    int current_file;
};

static void kubeconfig_free(struct kubeconfig *kc)
{
    for (int i = 0; i < kc->nfiles; i++) {
        kd_yaml_free(kc->docs[i]);
        free(kc->paths[i]);
    }
}

/* "FILE:LINE:COL: FIELD: what" (the position when the parser knows it). */
static int field_err(const struct kubeconfig *kc, int file, const char *field, char *err, int code,
                     const char *what)
{
    int line = 0, col = 0;
    char at[160];
    kd_strlcpy(at, field, sizeof(at));
    /* A missing field has no position: point at the mapping that lacks it. */
    while (kd_yaml_where(kc->docs[file], at, &line, &col) != 0) {
        char *dot = strrchr(at, '.');
        if (dot == NULL)
            return kd_seterr(err, code, "%s: %s: %s", kc->paths[file], field, what);
        *dot = '\0';
    }
    return kd_seterr(err, code, "%s:%d:%d: %s: %s", kc->paths[file], line, col, field, what);
}

static struct entry *find_entry(struct entry *list, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i].name, name) == 0)
            return &list[i];
    }
    return NULL;
}

/* Merge one of clusters/users/contexts: the first file to name an entry wins. */
static int merge_list(struct kubeconfig *kc, int file, json_t *root, const char *key,
                      const char *inner, struct entry *list, size_t *n, char *err)
{
    json_t *arr = json_object_get(root, key);
    char field[128];
    size_t i;
    json_t *item;
    int rc = 0;
    if (arr == NULL || json_is_null(arr))
        goto out;
    if (!json_is_array(arr)) {
        rc = field_err(kc, file, key, err, KD_EPARSE, "must be a list");
        goto out;
    }
    json_array_foreach(arr, i, item)
    {
        const char *name = json_string_value(json_object_get(item, "name"));
        json_t *val = json_object_get(item, inner);
        snprintf(field, sizeof(field), "%s[%zu]", key, i);
        if (!json_is_object(item)) {
            rc = field_err(kc, file, field, err, KD_EPARSE, "must be a mapping");
            goto out;
        }
        if (name == NULL || name[0] == '\0') {
            snprintf(field, sizeof(field), "%s[%zu].name", key, i);
            rc = field_err(kc, file, field, err, KD_EPARSE, "a non-empty string is required");
            goto out;
        }
        if (val != NULL && !json_is_object(val) && !json_is_null(val)) {
            snprintf(field, sizeof(field), "%s[%zu].%s", key, i, inner);
            rc = field_err(kc, file, field, err, KD_EPARSE, "must be a mapping");
            goto out;
        }
        if (find_entry(list, *n, name) != NULL)
            continue;
        if (*n >= MAX_ENTRIES) {
            rc = field_err(kc, file, key, err, KD_ETOOBIG, "too many entries");
            goto out;
        }
        list[*n] = (struct entry){name, val, file, i};
        (*n)++;
    }
out:
    return rc;
}

static int load_file(struct kubeconfig *kc, const char *path, char *err)
{
    json_t *root, *cur;
    const char *kind;
    int rc = 0;
    int f = kc->nfiles;
    if (f >= MAX_FILES) {
        rc = kd_seterr(err, KD_ETOOBIG, "KUBECONFIG: more than %d files", MAX_FILES);
        goto out;
    }
    rc = kd_yaml_parse_file(path, &kc->docs[f], err);
    if (rc < 0)
        goto out;
    kc->paths[f] = kd_xstrdup(path);
    kc->nfiles++;
    root = kd_yaml_root(kc->docs[f]);
    if (json_is_null(root))
        goto out; /* an empty file contributes nothing, as with kubectl */
    if (!json_is_object(root)) {
        rc = kd_seterr(err, KD_EPARSE, "%s: a kubeconfig must be a mapping", path);
        goto out;
    }
    kind = json_string_value(json_object_get(root, "kind"));
    if (kind != NULL && strcmp(kind, "Config") != 0) {
        rc = field_err(kc, f, "kind", err, KD_EPARSE, "must be \"Config\"");
        goto out;
    }
    cur = json_object_get(root, "current-context");
    if (cur != NULL && !json_is_null(cur) && !json_is_string(cur)) {
        rc = field_err(kc, f, "current-context", err, KD_EPARSE, "must be a string");
        goto out;
    }
    if (kc->current == NULL && json_string_value(cur) != NULL &&
        json_string_value(cur)[0] != '\0') {
        kc->current = json_string_value(cur);
        kc->current_file = f;
    }
    rc = merge_list(kc, f, root, "clusters", "cluster", kc->clusters, &kc->nclusters, err);
    if (rc == 0)
        rc = merge_list(kc, f, root, "users", "user", kc->users, &kc->nusers, err);
    if (rc == 0)
        rc = merge_list(kc, f, root, "contexts", "context", kc->contexts, &kc->ncontexts, err);
out:
    return rc;
}

/* Optional string field of an entry; KD_EPARSE when present but not a string. */
static int get_str(const struct kubeconfig *kc, const struct entry *e, const char *list,
                   const char *inner, const char *key, const char **out, char *err)
{
    json_t *v = json_object_get(e->val, key);
    int rc = 0;
    *out = NULL;
    if (v == NULL || json_is_null(v))
        goto out;
    if (!json_is_string(v)) {
        char field[160];
        snprintf(field, sizeof(field), "%s[%zu].%s.%s", list, e->idx, inner, key);
        rc = field_err(kc, e->file, field, err, KD_EPARSE, "must be a string");
        goto out;
    }
    *out = json_string_value(v);
out:
    return rc;
}

/* A path relative to the kubeconfig that names it becomes absolute. */
static char *resolve_path(const char *kcpath, const char *p)
{
    char cwd[PATH_MAX] = ".";
    if (p[0] == '/')
        return kd_xstrdup(p);
    if (p[0] == '~' && p[1] == '/' && getenv("HOME") != NULL)
        return kd_xasprintf("%s/%s", getenv("HOME"), p + 2);
    if (kcpath[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL)
        kd_strlcpy(cwd, ".", sizeof(cwd));
    const char *slash = strrchr(kcpath, '/');
    if (slash == NULL)
        return kd_xasprintf("%s/%s", cwd, p);
    if (kcpath[0] == '/')
        return kd_xasprintf("%.*s/%s", (int)(slash - kcpath), kcpath, p);
    return kd_xasprintf("%s/%.*s/%s", cwd, (int)(slash - kcpath), kcpath, p);
}

/* A file field and its *-data twin: data wins, as in client-go. */
static int file_or_data(const struct kubeconfig *kc, const struct entry *e, const char *list,
                        const char *inner, const char *key, char **file, char **data,
                        size_t *datalen, char *err)
{
    const char *f = NULL, *d = NULL;
    char datakey[64], field[160];
    int rc;
    snprintf(datakey, sizeof(datakey), "%s-data", key);
    snprintf(field, sizeof(field), "%s[%zu].%s.%s", list, e->idx, inner, datakey);
    rc = get_str(kc, e, list, inner, key, &f, err);
    if (rc == 0)
        rc = get_str(kc, e, list, inner, datakey, &d, err);
    if (rc < 0)
        goto out;
    if (d != NULL && d[0] != '\0') {
        if (kd_k8s_base64_decode(d, data, datalen) < 0) {
            rc = field_err(kc, e->file, field, err, KD_EPARSE, "not valid base64");
            goto out;
        }
        if (*datalen > KD_K8S_PEM_MAX) {
            rc = field_err(kc, e->file, field, err, KD_ETOOBIG, "larger than 1 MiB");
            goto out;
        }
    } else if (f != NULL && f[0] != '\0') {
        *file = resolve_path(kc->paths[e->file], f);
    }
out:
    return rc;
}

static void names_of(const struct entry *list, size_t n, const char **buf, size_t cap)
{
    size_t i;
    for (i = 0; i < n && i + 1 < cap; i++)
        buf[i] = list[i].name;
    buf[i] = NULL;
}

static int not_found(const char *what, const char *name, const struct entry *list, size_t n,
                     const char *where, char *err)
{
    const char *cands[65];
    names_of(list, n, cands, 65);
    const char *s = kd_suggest(name, cands);
    if (s != NULL)
        return kd_seterr(err, KD_ENOTFOUND, "%s: %s \"%s\" not found (did you mean \"%s\"?)", where,
                         what, name, s);
    return kd_seterr(err, KD_ENOTFOUND, "%s: %s \"%s\" not found (%zu defined)", where, what, name,
                     n);
}

static int flatten(struct kubeconfig *kc, const char *context, const char *where,
                   struct kd_k8s_config *cfg, char *err)
{
    struct entry *ctx, *cl, *user = NULL;
    const char *s = NULL, *clname = NULL, *username = NULL, *ns = NULL;
    int rc = 0;
    char field[160];

    if (context == NULL || context[0] == '\0')
        context = kc->current;
    if (context == NULL) {
        rc = kd_seterr(err, KD_EINVAL,
                       "%s: no current-context is set and no context was given "
                       "(set current-context or pass a context)",
                       where);
        goto out;
    }
    ctx = find_entry(kc->contexts, kc->ncontexts, context);
    if (ctx == NULL) {
        rc = not_found("context", context, kc->contexts, kc->ncontexts, where, err);
        goto out;
    }
    if (!json_is_object(ctx->val)) {
        snprintf(field, sizeof(field), "contexts[%zu].context", ctx->idx);
        rc = field_err(kc, ctx->file, field, err, KD_EPARSE, "is required");
        goto out;
    }
    rc = get_str(kc, ctx, "contexts", "context", "cluster", &clname, err);
    if (rc == 0)
        rc = get_str(kc, ctx, "contexts", "context", "user", &username, err);
    if (rc == 0)
        rc = get_str(kc, ctx, "contexts", "context", "namespace", &ns, err);
    if (rc < 0)
        goto out;
    if (clname == NULL || clname[0] == '\0') {
        snprintf(field, sizeof(field), "contexts[%zu].context.cluster", ctx->idx);
        rc = field_err(kc, ctx->file, field, err, KD_EINVAL, "is required");
        goto out;
    }
    cl = find_entry(kc->clusters, kc->nclusters, clname);
    if (cl == NULL || !json_is_object(cl->val)) {
        snprintf(field, sizeof(field), "contexts[%zu].context.cluster", ctx->idx);
        char where2[PATH_MAX + 200];
        snprintf(where2, sizeof(where2), "%s: %s", kc->paths[ctx->file], field);
        rc = not_found("cluster", clname, kc->clusters, kc->nclusters, where2, err);
        goto out;
    }
    if (username != NULL && username[0] != '\0') {
        user = find_entry(kc->users, kc->nusers, username);
        if (user == NULL) {
            snprintf(field, sizeof(field), "contexts[%zu].context.user", ctx->idx);
            char where2[PATH_MAX + 200];
            snprintf(where2, sizeof(where2), "%s: %s", kc->paths[ctx->file], field);
            rc = not_found("user", username, kc->users, kc->nusers, where2, err);
            goto out;
        }
    }

    rc = get_str(kc, cl, "clusters", "cluster", "server", &s, err);
    if (rc < 0)
        goto out;
    snprintf(field, sizeof(field), "clusters[%zu].cluster.server", cl->idx);
    if (s == NULL || s[0] == '\0') {
        rc = field_err(kc, cl->file, field, err, KD_EINVAL, "is required");
        goto out;
    }
    if (!kd_str_has_prefix(s, "https://") && !kd_str_has_prefix(s, "http://")) {
        rc = field_err(kc, cl->file, field, err, KD_EINVAL, "must be an http:// or https:// URL");
        goto out;
    }
    cfg->server = kd_xstrdup(s);
    while (kd_str_has_suffix(cfg->server, "/"))
        cfg->server[strlen(cfg->server) - 1] = '\0';
    json_t *insecure = json_object_get(cl->val, "insecure-skip-tls-verify");
    if (insecure != NULL && !json_is_null(insecure) && !json_is_boolean(insecure)) {
        snprintf(field, sizeof(field), "clusters[%zu].cluster.insecure-skip-tls-verify", cl->idx);
        rc = field_err(kc, cl->file, field, err, KD_EPARSE, "must be true or false");
        goto out;
    }
    cfg->insecure = json_is_true(insecure);
    rc = file_or_data(kc, cl, "clusters", "cluster", "certificate-authority", &cfg->ca_file,
                      &cfg->ca_data, &cfg->ca_data_len, err);
    if (rc < 0)
        goto out;

    if (user != NULL && json_is_object(user->val)) {
        if (json_object_get(user->val, "exec") != NULL ||
            json_object_get(user->val, "auth-provider") != NULL) {
            snprintf(field, sizeof(field), "users[%zu].user.%s", user->idx,
                     json_object_get(user->val, "exec") != NULL ? "exec" : "auth-provider");
            rc = field_err(kc, user->file, field, err, KD_ENOTSUP,
                           "credential plugins are not supported; use a token, tokenFile or "
                           "client certificate");
            goto out;
        }
        rc = file_or_data(kc, user, "users", "user", "client-certificate", &cfg->cert_file,
                          &cfg->cert_data, &cfg->cert_data_len, err);
        if (rc == 0)
            rc = file_or_data(kc, user, "users", "user", "client-key", &cfg->key_file,
                              &cfg->key_data, &cfg->key_data_len, err);
        if (rc < 0)
            goto out;
        if ((cfg->cert_file || cfg->cert_data) != (cfg->key_file || cfg->key_data)) {
            snprintf(field, sizeof(field), "users[%zu].user", user->idx);
            rc = field_err(kc, user->file, field, err, KD_EINVAL,
                           "client-certificate and client-key must be given together");
            goto out;
        }
        rc = get_str(kc, user, "users", "user", "token", &s, err);
        if (rc < 0)
            goto out;
        if (s != NULL && s[0] != '\0') {
            cfg->token = kd_xstrdup(s);
            kd_log_add_secret(s);
        }
        rc = get_str(kc, user, "users", "user", "tokenFile", &s, err);
        if (rc < 0)
            goto out;
        if (s != NULL && s[0] != '\0' && cfg->token == NULL) {
            cfg->token_file = resolve_path(kc->paths[user->file], s);
            rc = kd_k8s_read_token(cfg->token_file, &cfg->token, err);
            if (rc < 0)
                goto out;
        }
        rc = get_str(kc, user, "users", "user", "username", &s, err);
        if (rc == 0 && s != NULL)
            cfg->username = kd_xstrdup(s);
        if (rc == 0)
            rc = get_str(kc, user, "users", "user", "password", &s, err);
        if (rc < 0)
            goto out;
        if (s != NULL) {
            cfg->password = kd_xstrdup(s);
            kd_log_add_secret(s);
        }
    }
    cfg->namespace = kd_xstrdup(ns != NULL && ns[0] != '\0' ? ns : "default");
    cfg->context = kd_xstrdup(context);
    cfg->source = kd_xstrdup(kc->paths[ctx->file]);
out:
    return rc;
}

int kd_k8s_config_kubeconfig(const char *paths, const char *context, struct kd_k8s_config *cfg,
                             char *err)
{
    struct kubeconfig *kc = kd_xcalloc(1, sizeof(*kc));
    struct kd_k8s_config c = {0};
    char *list = kd_xstrdup(paths != NULL ? paths : "");
    char *save = NULL;
    int rc = 0, nnamed = 0, nmissing = 0;
    char first_missing[PATH_MAX] = "";

    for (char *p = strtok_r(list, ":", &save); p != NULL; p = strtok_r(NULL, ":", &save)) {
        struct stat sb;
        if (p[0] == '\0')
            continue;
        nnamed++;
        if (stat(p, &sb) != 0 && errno == ENOENT) {
            if (nmissing++ == 0)
                kd_strlcpy(first_missing, p, sizeof(first_missing));
            continue;
        }
        rc = load_file(kc, p, err);
        if (rc < 0)
            goto out;
    }
    if (kc->nfiles == 0) {
        if (nnamed == 1)
            rc = kd_seterr(err, -ENOENT, "%s: %s", first_missing, strerror(ENOENT));
        else
            rc = kd_seterr(err, KD_ENOTFOUND, "kubeconfig: none of the %d files in \"%s\" exists",
                           nnamed, paths != NULL ? paths : "");
        goto out;
    }
    rc = flatten(kc, context, nnamed == 1 ? kc->paths[0] : "KUBECONFIG", &c, err);
    if (rc < 0)
        goto out;
    *cfg = c;
    memset(&c, 0, sizeof(c));
out:
    kd_k8s_config_free(&c);
    kubeconfig_free(kc);
    free(kc);
    free(list);
    return rc;
}

int kd_k8s_config_load(const struct kd_k8s_config_opts *opts, struct kd_k8s_config *cfg, char *err)
{
    static const struct kd_k8s_config_opts none = {0};
    const char *env = getenv("KUBECONFIG");
    const char *home = getenv("HOME");
    char *path = NULL;
    int rc;
    if (opts == NULL)
        opts = &none;
    if (opts->kubeconfig != NULL && opts->kubeconfig[0] != '\0') {
        /* An explicit file is used alone, like kubectl --kubeconfig. */
        if (strchr(opts->kubeconfig, ':') != NULL) {
            rc = kd_seterr(err, KD_EINVAL, "kubeconfig \"%s\": one file expected, not a list",
                           opts->kubeconfig);
            goto out;
        }
        rc = kd_k8s_config_kubeconfig(opts->kubeconfig, opts->context, cfg, err);
        goto out;
    }
    if (env != NULL && env[0] != '\0') {
        rc = kd_k8s_config_kubeconfig(env, opts->context, cfg, err);
        goto out;
    }
    if (!opts->no_in_cluster && getenv("KUBERNETES_SERVICE_HOST") != NULL &&
        (opts->context == NULL || opts->context[0] == '\0')) {
        rc = kd_k8s_config_in_cluster(opts->sa_dir, cfg, err);
        goto out;
    }
    if (home != NULL && home[0] != '\0') {
        path = kd_xasprintf("%s/.kube/config", home);
        if (access(path, F_OK) == 0) {
            rc = kd_k8s_config_kubeconfig(path, opts->context, cfg, err);
            goto out;
        }
    }
    rc = kd_seterr(err, KD_ENOTFOUND,
                   "no Kubernetes config: pass a kubeconfig, set KUBECONFIG, run in a pod "
                   "(KUBERNETES_SERVICE_HOST) or create ~/.kube/config");
out:
    free(path);
    return rc;
}
