/*
 * The storage handle: configuration (from an experiment config's
 * checkpoint_storage object or a URL), opening a backend, and dispatching
 * object calls through its ops struct.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "core/str.h"
#include "storage/storage_int.h"

void kd_storage_config_init(struct kd_storage_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->path_style = -1;
    cfg->save_experiment_best = -1;
    cfg->save_trial_best = -1;
    cfg->save_trial_latest = -1;
}

static int get_str(const json_t *js, const char *name, char *dst, size_t len, char *err)
{
    const json_t *v = json_object_get(js, name);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kd_seterr(err, KD_EINVALID, "checkpoint_storage.%s: must be a string", name);
    if (json_string_length(v) >= len)
        return kd_seterr(err, KD_EINVALID, "checkpoint_storage.%s: longer than %zu bytes", name,
                         len - 1);
    kd_strlcpy(dst, json_string_value(v), len);
    return 0;
}

static int get_int(const json_t *js, const char *name, int *dst, int min, char *err)
{
    const json_t *v = json_object_get(js, name);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > INT_MAX)
        return kd_seterr(err, KD_EINVALID, "checkpoint_storage.%s: must be an integer >= %d", name,
                         min);
    *dst = (int)json_integer_value(v);
    return 0;
}

/* Keep prefixes canonical: no leading or trailing slashes. */
static void trim_slashes(char *s)
{
    size_t n = strlen(s), i = 0;
    while (i < n && s[i] == '/')
        i++;
    memmove(s, s + i, n - i + 1);
    n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
}

int kd_storage_config_from_json(const json_t *js, struct kd_storage_config *cfg, char *err)
{
    static const char *const known[] = {"type",
                                        "host_path",
                                        "storage_path",
                                        "propagation",
                                        "container_path",
                                        "checkpoint_path",
                                        "tensorboard_path",
                                        "bucket",
                                        "prefix",
                                        "endpoint_url",
                                        "region",
                                        "path_style",
                                        "credentials_secret",
                                        "credentials_dir",
                                        "parallel",
                                        "part_size",
                                        "max_retries",
                                        "save_experiment_best",
                                        "save_trial_best",
                                        "save_trial_latest",
                                        NULL};
    int rc = 0;
    char type[32] = "";
    const char *key;
    const json_t *val;

    kd_storage_config_init(cfg);
    if (!json_is_object(js)) {
        rc = kd_seterr(err, KD_EINVALID, "checkpoint_storage: must be an object");
        goto out;
    }
    json_object_foreach((json_t *)js, key, val)
    {
        int found = 0;
        for (size_t i = 0; known[i] != NULL; i++)
            found |= strcmp(known[i], key) == 0;
        if (strcmp(key, "access_key") == 0 || strcmp(key, "secret_key") == 0) {
            rc = kd_seterr(err, KD_EINVALID,
                           "checkpoint_storage.%s: credentials are not accepted in the "
                           "experiment config; store them in a Kubernetes Secret and name it "
                           "in checkpoint_storage.credentials_secret (or set AWS_ACCESS_KEY_ID/"
                           "AWS_SECRET_ACCESS_KEY)",
                           key);
            goto out;
        }
        if (!found) {
            const char *s = kd_suggest(key, known);
            rc = kd_seterr(err, KD_EINVALID, "checkpoint_storage.%s: unknown field%s%s%s", key,
                           s ? " (did you mean " : "", s ? s : "", s ? "?)" : "");
            goto out;
        }
    }
    if ((rc = get_str(js, "type", type, sizeof(type), err)) != 0)
        goto out;
    if (strcmp(type, "shared_fs") == 0) {
        cfg->type = KD_STORAGE_SHARED_FS;
        if ((rc = get_str(js, "host_path", cfg->host_path, sizeof(cfg->host_path), err)) != 0 ||
            (rc = get_str(js, "storage_path", cfg->storage_path, sizeof(cfg->storage_path), err)) !=
                0)
            goto out;
        if (cfg->host_path[0] != '/') {
            rc = kd_seterr(err, KD_EINVALID,
                           "checkpoint_storage.host_path: required, an absolute path");
            goto out;
        }
        trim_slashes(cfg->storage_path);
    } else if (strcmp(type, "s3") == 0) {
        const json_t *ps = json_object_get(js, "path_style");
        cfg->type = KD_STORAGE_S3;
        if ((rc = get_str(js, "bucket", cfg->bucket, sizeof(cfg->bucket), err)) != 0 ||
            (rc = get_str(js, "prefix", cfg->prefix, sizeof(cfg->prefix), err)) != 0 ||
            (rc = get_str(js, "endpoint_url", cfg->endpoint_url, sizeof(cfg->endpoint_url), err)) !=
                0 ||
            (rc = get_str(js, "region", cfg->region, sizeof(cfg->region), err)) != 0 ||
            (rc = get_str(js, "credentials_secret", cfg->credentials_secret,
                          sizeof(cfg->credentials_secret), err)) != 0 ||
            (rc = get_str(js, "credentials_dir", cfg->credentials_dir, sizeof(cfg->credentials_dir),
                          err)) != 0)
            goto out;
        if (cfg->bucket[0] == '\0' || strchr(cfg->bucket, '/') != NULL) {
            rc = kd_seterr(err, KD_EINVALID,
                           "checkpoint_storage.bucket: required, a bucket name without '/'");
            goto out;
        }
        if (cfg->endpoint_url[0] != '\0' && !kd_str_has_prefix(cfg->endpoint_url, "http://") &&
            !kd_str_has_prefix(cfg->endpoint_url, "https://")) {
            rc = kd_seterr(err, KD_EINVALID,
                           "checkpoint_storage.endpoint_url: must start with http:// or https://");
            goto out;
        }
        if (ps != NULL && !json_is_null(ps)) {
            if (!json_is_boolean(ps)) {
                rc =
                    kd_seterr(err, KD_EINVALID, "checkpoint_storage.path_style: must be a boolean");
                goto out;
            }
            cfg->path_style = json_is_true(ps) ? 1 : 0;
        }
        trim_slashes(cfg->prefix);
    } else {
        static const char *const types[] = {"shared_fs", "s3", NULL};
        const char *s = kd_suggest(type, types);
        rc = kd_seterr(err, type[0] ? KD_ENOTSUP : KD_EINVALID,
                       "checkpoint_storage.type: %s%s%s%s (supported: shared_fs, s3)",
                       type[0] ? "unsupported type " : "required", type, s ? ", did you mean " : "",
                       s ? s : "");
        goto out;
    }
    if ((rc = get_int(js, "parallel", &cfg->parallel, 1, err)) != 0 ||
        (rc = get_int(js, "max_retries", &cfg->max_retries, -1, err)) != 0 ||
        (rc = get_int(js, "save_experiment_best", &cfg->save_experiment_best, 0, err)) != 0 ||
        (rc = get_int(js, "save_trial_best", &cfg->save_trial_best, 0, err)) != 0 ||
        (rc = get_int(js, "save_trial_latest", &cfg->save_trial_latest, 0, err)) != 0)
        goto out;
    if (json_object_get(js, "part_size") != NULL) {
        const json_t *v = json_object_get(js, "part_size");
        uint64_t sz = 0;
        if (json_is_integer(v) && json_integer_value(v) > 0)
            sz = (uint64_t)json_integer_value(v);
        else if (!json_is_string(v) || kd_parse_size(json_string_value(v), &sz) != 0)
            sz = 0;
        if (sz < (5u << 20) || sz > (5ull << 30)) {
            rc = kd_seterr(err, KD_EINVALID,
                           "checkpoint_storage.part_size: must be a size between 5MiB and 5GiB");
            goto out;
        }
        cfg->part_size = sz;
    }
out:
    return rc;
}

int kd_storage_config_from_url(const char *url, struct kd_storage_config *cfg, char *err)
{
    int rc = 0;
    if (kd_str_has_prefix(url, "s3://")) {
        const char *b = url + 5, *slash = strchr(b, '/');
        size_t blen = slash ? (size_t)(slash - b) : strlen(b);
        if (blen == 0 || blen >= sizeof(cfg->bucket)) {
            rc = kd_seterr(err, KD_EINVALID, "storage URL %s: expected s3://BUCKET[/PREFIX]", url);
            goto out;
        }
        cfg->type = KD_STORAGE_S3;
        memcpy(cfg->bucket, b, blen);
        cfg->bucket[blen] = '\0';
        if (kd_strlcpy(cfg->prefix, slash ? slash + 1 : "", sizeof(cfg->prefix)) >=
            sizeof(cfg->prefix)) {
            rc = kd_seterr(err, KD_EINVALID, "storage URL: prefix too long");
            goto out;
        }
        trim_slashes(cfg->prefix);
    } else if (kd_str_has_prefix(url, "file://") || url[0] == '/') {
        const char *p = url[0] == '/' ? url : url + 7;
        if (p[0] != '/' ||
            kd_strlcpy(cfg->host_path, p, sizeof(cfg->host_path)) >= sizeof(cfg->host_path)) {
            rc = kd_seterr(err, KD_EINVALID, "storage URL %s: expected file:///ABSOLUTE/PATH", url);
            goto out;
        }
        cfg->type = KD_STORAGE_SHARED_FS;
        cfg->storage_path[0] = '\0';
    } else {
        rc = kd_seterr(err, KD_EINVALID,
                       "storage URL %s: expected s3://BUCKET[/PREFIX], file:///PATH or /PATH", url);
    }
out:
    return rc;
}

json_t *kd_storage_config_to_json(const struct kd_storage_config *cfg)
{
    json_t *js = json_object();
    if (js == NULL)
        return NULL;
    if (cfg->type == KD_STORAGE_SHARED_FS) {
        json_object_set_new(js, "type", json_string("shared_fs"));
        json_object_set_new(js, "host_path", json_string(cfg->host_path));
        if (cfg->storage_path[0])
            json_object_set_new(js, "storage_path", json_string(cfg->storage_path));
    } else if (cfg->type == KD_STORAGE_S3) {
        json_object_set_new(js, "type", json_string("s3"));
        json_object_set_new(js, "bucket", json_string(cfg->bucket));
        if (cfg->prefix[0])
            json_object_set_new(js, "prefix", json_string(cfg->prefix));
        if (cfg->endpoint_url[0])
            json_object_set_new(js, "endpoint_url", json_string(cfg->endpoint_url));
        if (cfg->region[0])
            json_object_set_new(js, "region", json_string(cfg->region));
        if (cfg->path_style >= 0)
            json_object_set_new(js, "path_style", json_boolean(cfg->path_style));
        if (cfg->credentials_secret[0])
            json_object_set_new(js, "credentials_secret", json_string(cfg->credentials_secret));
        if (cfg->credentials_dir[0])
            json_object_set_new(js, "credentials_dir", json_string(cfg->credentials_dir));
    }
    if (cfg->save_experiment_best >= 0)
        json_object_set_new(js, "save_experiment_best", json_integer(cfg->save_experiment_best));
    if (cfg->save_trial_best >= 0)
        json_object_set_new(js, "save_trial_best", json_integer(cfg->save_trial_best));
    if (cfg->save_trial_latest >= 0)
        json_object_set_new(js, "save_trial_latest", json_integer(cfg->save_trial_latest));
    return js;
}

int kd_storage_open(const struct kd_storage_config *cfg, struct kd_storage **out, char *err)
{
    int rc = 0;
    struct kd_storage *st = NULL;

    *out = NULL;
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "storage: out of memory");
        goto out;
    }
    st->cfg = *cfg;
    switch (cfg->type) {
    case KD_STORAGE_SHARED_FS: st->ops = &kd_storage__shared_fs_ops; break;
    case KD_STORAGE_S3: st->ops = &kd_storage__s3_ops; break;
    default:
        rc = kd_seterr(err, KD_EINVALID, "storage: no checkpoint_storage type configured");
        goto out;
    }
    if ((rc = st->ops->open(st, err)) != 0)
        goto out;
    *out = st;
    st = NULL;
out:
    free(st);
    return rc;
}

void kd_storage_close(struct kd_storage *st)
{
    if (st == NULL)
        return;
    if (st->ops != NULL && st->impl != NULL)
        st->ops->close(st);
    free(st);
}

const char *kd_storage_type_name(const struct kd_storage *st)
{
    return st->ops->name;
}

const char *kd_storage_location(const struct kd_storage *st)
{
    return st->location;
}

const struct kd_storage_config *kd_storage_get_config(const struct kd_storage *st)
{
    return &st->cfg;
}

int kd_storage__parallel(const struct kd_storage *st)
{
    return st->cfg.parallel > 0 ? st->cfg.parallel : KD_STORAGE_DEFAULT_PARALLEL;
}

int kd_storage__check_key(const char *key, char *err)
{
    const char *p = key;
    if (key[0] == '\0' || key[0] == '/')
        return kd_seterr(err, KD_EINVAL, "object key \"%s\": must be relative and non-empty", key);
    if (strlen(key) >= KD_STORAGE_KEYLEN)
        return kd_seterr(err, KD_EINVAL, "object key: longer than %d bytes", KD_STORAGE_KEYLEN - 1);
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return kd_seterr(err, KD_EINVAL,
                             "object key \"%s\": empty, \".\" or \"..\" path component", key);
        p += n;
        if (*p == '/')
            p++;
    }
    return 0;
}

int kd_storage_put_files(struct kd_storage *st, struct kd_storage_put *puts, size_t n,
                         kd_storage_progress_fn progress, void *arg, char *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = kd_storage__check_key(puts[i].key, err);
        if (rc != 0)
            return rc;
    }
    return st->ops->put_files(st, puts, n, progress, arg, err);
}

int kd_storage_put_mem(struct kd_storage *st, const char *key, const void *data, size_t len,
                       char *err)
{
    int rc = kd_storage__check_key(key, err);
    return rc != 0 ? rc : st->ops->put_mem(st, key, data, len, err);
}

int kd_storage_get_files(struct kd_storage *st, struct kd_storage_get *gets, size_t n,
                         kd_storage_progress_fn progress, void *arg, char *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = kd_storage__check_key(gets[i].key, err);
        if (rc != 0)
            return rc;
    }
    return st->ops->get_files(st, gets, n, progress, arg, err);
}

int kd_storage_get_mem(struct kd_storage *st, const char *key, struct kd_buf *out, char *err)
{
    int rc = kd_storage__check_key(key, err);
    return rc != 0 ? rc : st->ops->get_mem(st, key, out, err);
}

int kd_storage_get_range(struct kd_storage *st, const char *key, uint64_t off, size_t len,
                         struct kd_buf *out, char *err)
{
    int rc = kd_storage__check_key(key, err);
    if (rc != 0)
        return rc;
    kd_buf_reset(out);
    if (len == 0)
        return 0;
    if (len > out->max)
        return kd_seterr(err, KD_ETOOBIG, "%s: a read of %zu bytes does not fit in %zu", key, len,
                         out->max);
    rc = st->ops->get_range(st, key, off, len, out, err);
    if (rc == 0 && out->len != len)
        rc = kd_seterr(err, KD_ECORRUPT, "%s: %zu bytes at %llu read instead of %zu", key, out->len,
                       (unsigned long long)off, len);
    return rc;
}

int kd_storage_list(struct kd_storage *st, const char *prefix, struct kd_storage_list *out,
                    char *err)
{
    return st->ops->list(st, prefix ? prefix : "", out, err);
}

int kd_storage_delete(struct kd_storage *st, const char *const *keys, size_t n, char *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = kd_storage__check_key(keys[i], err);
        if (rc != 0)
            return rc;
    }
    return n == 0 ? 0 : st->ops->del(st, keys, n, err);
}

int kd_storage__list_add(struct kd_storage_list *l, const char *key, size_t keylen, uint64_t size)
{
    char *k;
    if (l->n >= 10000000)
        return KD_ETOOBIG;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        struct kd_storage_obj *no = realloc(l->objs, nc * sizeof(*no));
        if (no == NULL)
            return KD_ENOMEM;
        l->objs = no;
        l->cap = nc;
    }
    k = strndup(key, keylen);
    if (k == NULL)
        return KD_ENOMEM;
    l->objs[l->n].key = k;
    l->objs[l->n].size = size;
    l->n++;
    return 0;
}

void kd_storage_list_free(struct kd_storage_list *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->objs[i].key);
    free(l->objs);
    memset(l, 0, sizeof(*l));
}

int kd_storage__mkdirs(const char *dir)
{
    return kd_mkdir_p(dir, 0755);
}
