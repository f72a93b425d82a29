/*
 * The context step of kdet-launch (see context.h). The digest is checked
 * before anything is unpacked: a ConfigMap edited after `det experiment
 * create` must not run as if it were the code the experiment recorded.
 */
#include "context.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context/context.h"
#include "core/alloc.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "storage/storage.h"

/* The whole file at path into *out, refusing more than max bytes. */
static int read_capped(const char *var, const char *path, uint64_t max, unsigned char **out,
                       size_t *len, char *err)
{
    int rc = 0;
    struct stat st;
    unsigned char *data = NULL;
    size_t n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *out = NULL;
    *len = 0;
    if (fd < 0) {
        rc = kd_seterr(err, -errno, "%s: cannot open %s: %s", var, path, strerror(errno));
        goto out;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = kd_seterr(err, KD_EINVAL, "%s: %s is not a regular file", var, path);
        goto out;
    }
    if ((uint64_t)st.st_size > max) {
        rc = kd_seterr(err, KD_ETOOBIG, "%s: %s is %lld bytes, more than the limit of %llu", var,
                       path, (long long)st.st_size, (unsigned long long)max);
        goto out;
    }
    data = kd_xmalloc((size_t)st.st_size + 1);
    for (;;) {
        ssize_t r = read(fd, data + n, (size_t)st.st_size + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kd_seterr(err, -errno, "%s: cannot read %s: %s", var, path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > (size_t)st.st_size) { /* it grew while being read */
            rc = kd_seterr(err, KD_ETOOBIG, "%s: %s changed while it was read", var, path);
            goto out;
        }
    }
    *out = data;
    *len = n;
    data = NULL;
out:
    free(data);
    if (fd >= 0)
        close(fd);
    return rc;
}

/*
 * An s3://BUCKET/KEY archive, read into memory under max bytes. Endpoint,
 * region and addressing come from KDET_CHECKPOINT_STORAGE (the experiment's
 * checkpoint_storage, which podspec sets) when it is s3; the bucket and key
 * always come from the URL. Credentials: lib/storage's usual order (the
 * AWS_* env the pod gets from checkpoint_storage.credentials_secret first).
 */
static int fetch_s3(const char *url, uint64_t max, unsigned char **out, size_t *len, char *err)
{
    int rc = 0;
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    struct kd_buf buf = KD_BUF_INIT((size_t)max);
    struct kd_storage_list l = {0};
    uint64_t size = UINT64_MAX;
    char serr[KD_ERRLEN] = "", bucket[256];
    const char *b = url + strlen("s3://"), *slash = strchr(b, '/');
    const char *js = getenv("KDET_CHECKPOINT_STORAGE");
    *out = NULL;
    *len = 0;
    if (slash == NULL || slash == b || slash[1] == '\0' || (size_t)(slash - b) >= sizeof(bucket))
        return kd_seterr(err, KD_EINVAL, "KDET_CONTEXT_URL: expected s3://BUCKET/KEY");
    memcpy(bucket, b, (size_t)(slash - b));
    bucket[slash - b] = '\0';
    kd_storage_config_init(&cfg);
    if (js != NULL && js[0] != '\0') {
        json_error_t je;
        json_t *j = json_loads(js, 0, &je);
        const char *type = json_string_value(json_object_get(j, "type"));
        if (j == NULL) {
            rc = kd_seterr(err, KD_EINVAL, "KDET_CHECKPOINT_STORAGE: not JSON: %s", je.text);
            goto out;
        }
        if (type != NULL && strcmp(type, "s3") == 0)
            rc = kd_storage_config_from_json(j, &cfg, serr);
        json_decref(j);
        if (rc != 0) {
            kd_seterr(err, rc, "KDET_CHECKPOINT_STORAGE: %s", serr);
            goto out;
        }
    }
    cfg.type = KD_STORAGE_S3;
    kd_strlcpy(cfg.bucket, bucket, sizeof(cfg.bucket));
    cfg.prefix[0] = '\0';
    if ((rc = kd_storage_open(&cfg, &st, serr)) != 0) {
        kd_seterr(err, rc, "KDET_CONTEXT_URL: %s: %s", url, serr);
        goto out;
    }
    /* the object's size first: a clear error for a missing or too large one */
    if ((rc = kd_storage_list(st, slash + 1, &l, serr)) != 0) {
        kd_seterr(err, rc, "KDET_CONTEXT_URL: cannot list %s: %s", url, serr);
        goto out;
    }
    for (size_t i = 0; i < l.n && size == UINT64_MAX; i++)
        if (strcmp(l.objs[i].key, slash + 1) == 0)
            size = l.objs[i].size;
    if (size == UINT64_MAX) {
        rc = kd_seterr(err, KD_ENOTFOUND, "KDET_CONTEXT_URL: %s: no such object", url);
        goto out;
    }
    if (size > max) {
        rc = kd_seterr(err, KD_ETOOBIG,
                       "KDET_CONTEXT_URL: %s is %llu bytes, more than the limit "
                       "of %llu",
                       url, (unsigned long long)size, (unsigned long long)max);
        goto out;
    }
    if ((rc = kd_storage_get_mem(st, slash + 1, &buf, serr)) != 0) {
        kd_seterr(err, rc, "KDET_CONTEXT_URL: cannot fetch %s: %s", url, serr);
        goto out;
    }
    *len = buf.len;
    *out = (unsigned char *)buf.data;
    if (*out == NULL)
        *out = kd_xmalloc(1);
    buf.data = NULL;
out:
    kd_storage_list_free(&l);
    kd_buf_free(&buf);
    kd_storage_close(st);
    return rc;
}

/* The archive's path: KDET_CONTEXT_ARCHIVE, else a file:// or s3:// KDET_CONTEXT_URL; NULL: none.
 */
static int archive_path(const char **var, const char **path, char *err)
{
    const char *a = getenv("KDET_CONTEXT_ARCHIVE");
    const char *u = getenv("KDET_CONTEXT_URL");
    *var = NULL;
    *path = NULL;
    if (a != NULL && a[0] != '\0') {
        *var = "KDET_CONTEXT_ARCHIVE";
        *path = a;
    } else if (u != NULL && u[0] != '\0') {
        const char *colon = strstr(u, "://");
        if (colon == NULL)
            return kd_seterr(err, KD_EINVAL, "KDET_CONTEXT_URL: expected SCHEME://...");
        if (!kd_str_has_prefix(u, "file:///") && !kd_str_has_prefix(u, "s3://"))
            return kd_seterr(err, KD_ENOTSUP,
                             "KDET_CONTEXT_URL: scheme %.*s:// is not supported by this launcher "
                             "(only file:// with an absolute path and s3://; ship the context in "
                             "a ConfigMap or on a volume)",
                             (int)(colon - u < 16 ? colon - u : 16), u);
        *var = "KDET_CONTEXT_URL";
        *path = kd_str_has_prefix(u, "s3://") ? u : u + strlen("file://");
    }
    return 0;
}

/* The directory to unpack into: KDET_CONTEXT_DIR (kept), else a new temporary one (removed). */
static int unpack_dir(struct kd_launch_context *ctx, char *err)
{
    const char *d = getenv("KDET_CONTEXT_DIR");
    if (d != NULL && d[0] != '\0') {
        if (mkdir(d, 0755) < 0 && errno != EEXIST)
            return kd_seterr(err, -errno, "KDET_CONTEXT_DIR: cannot create %s: %s", d,
                             strerror(errno));
        ctx->dir = kd_xstrdup(d);
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    char *t = kd_xasprintf("%s/kdet-context-XXXXXX", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp");
    if (mkdtemp(t) == NULL) {
        int rc = kd_seterr(err, -errno, "cannot create a directory for the context (%s): %s", t,
                           strerror(errno));
        free(t);
        return rc;
    }
    ctx->dir = t;
    ctx->remove = true;
    return 0;
}

int kd_launch_context_prepare(struct kd_launch_context *ctx, uint64_t max_bytes, char *err)
{
    int rc = 0;
    const char *var = NULL, *path = NULL;
    unsigned char *data = NULL;
    size_t len = 0;
    int64_t t0 = kd_mono_ms();
    memset(ctx, 0, sizeof(*ctx));
    if (max_bytes == 0)
        max_bytes = KD_CONTEXT_MAX_BYTES;
    if ((rc = archive_path(&var, &path, err)) != 0)
        goto out;
    if (path == NULL) {
        const char *d = getenv("KDET_CONTEXT_DIR");
        if (d == NULL || d[0] == '\0')
            goto out;
        if (chdir(d) < 0) {
            rc =
                kd_seterr(err, -errno, "KDET_CONTEXT_DIR: cannot enter %s: %s", d, strerror(errno));
            goto out;
        }
        ctx->dir = kd_xstrdup(d);
        KD_INFO("context directory entered", "dir=%s", kd_logq(d));
        goto out;
    }
    if (kd_str_has_prefix(path, "s3://"))
        rc = fetch_s3(path, max_bytes, &data, &len, err);
    else
        rc = read_capped(var, path, max_bytes, &data, &len, err);
    if (rc != 0)
        goto out;
    ctx->bytes = len;
    const char *want = getenv("KDET_CONTEXT_SHA256");
    char got[65];
    kd_context_sha256(data, len, got);
    if (want != NULL && want[0] != '\0' && strcmp(want, got) != 0) {
        rc = kd_seterr(err, KD_ECORRUPT,
                       "context archive %s: sha256 mismatch: expected %.12s..., got %.12s... "
                       "(KDET_CONTEXT_SHA256; the archive changed after the experiment was "
                       "created)",
                       path, want, got);
        goto out;
    }
    KD_INFO("context archive read", "archive=%s bytes=%zu sha256=%.12s verified=%s ms=%lld",
            kd_logq(path), len, got, want != NULL && want[0] != '\0' ? "true" : "false",
            (long long)(kd_mono_ms() - t0));
    if ((rc = unpack_dir(ctx, err)) != 0)
        goto out;
    int64_t t1 = kd_mono_ms();
    char uerr[KD_ERRLEN] = "";
    if ((rc = kd_context_unpack(data, len, ctx->dir, max_bytes, uerr)) != 0) {
        kd_seterr(err, rc, "context archive %s: cannot unpack into %s: %s", path, ctx->dir, uerr);
        goto out;
    }
    if (chdir(ctx->dir) < 0) {
        rc = kd_seterr(err, -errno, "cannot enter the context directory %s: %s", ctx->dir,
                       strerror(errno));
        goto out;
    }
    if (setenv("KDET_CONTEXT_DIR", ctx->dir, 1) < 0) {
        rc = kd_seterr(err, -errno, "cannot set KDET_CONTEXT_DIR: %s", strerror(errno));
        goto out;
    }
    ctx->unpacked = true;
    ctx->ms = kd_mono_ms() - t0;
    KD_INFO("context unpacked", "dir=%s bytes=%zu unpack_ms=%lld ms=%lld removed_at_exit=%s",
            kd_logq(ctx->dir), len, (long long)(kd_mono_ms() - t1), (long long)ctx->ms,
            ctx->remove ? "true" : "false");
out:
    if (rc != 0) {
        if (ctx->remove && ctx->dir != NULL)
            (void)kd_rm_tree(ctx->dir);
        free(ctx->dir);
        memset(ctx, 0, sizeof(*ctx));
    }
    free(data);
    return rc;
}

void kd_launch_context_done(struct kd_launch_context *ctx)
{
    const char *keep = getenv("KDET_KEEP_CONTEXT");
    if (ctx->dir != NULL && ctx->remove) {
        if (keep != NULL && strcmp(keep, "1") == 0) {
            KD_INFO("context kept", "dir=%s", kd_logq(ctx->dir));
        } else {
            /* leave it first: the directory cannot go while it is the cwd on some systems */
            if (chdir("/") < 0)
                KD_WARN("cannot leave the context directory", "error=%s", kd_logq(strerror(errno)));
            int rc = kd_rm_tree(ctx->dir);
            if (rc != 0)
                KD_WARN("cannot remove the context directory", "dir=%s error=%s", kd_logq(ctx->dir),
                        kd_logq(strerror(-rc)));
        }
    }
    free(ctx->dir);
    memset(ctx, 0, sizeof(*ctx));
}
