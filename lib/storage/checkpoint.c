/*
 * Checkpoints as directory trees plus a manifest written last (see
 * checkpoint.h): building and checking manifests, upload, verified
 * download, listing with completeness, and deletion manifest-first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "storage/checkpoint.h"
#include "core/fs.h"
#include "storage/storage_int.h"

#define HASH_BUF (1u << 20)
#define MAX_HASH_THREADS 8

int kd_ckpt_check_uuid(const char *uuid, char *err)
{
    size_t n = strlen(uuid);
    if (n == 0 || n >= KD_CKPT_UUIDLEN || uuid[0] == '.')
        return kd_seterr(err, KD_EINVAL,
                         "checkpoint uuid \"%.*s\": must be 1-%d characters, not starting "
                         "with '.'",
                         40, uuid, KD_CKPT_UUIDLEN - 1);
    for (size_t i = 0; i < n; i++) {
        char c = uuid[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return kd_seterr(err, KD_EINVAL,
                             "checkpoint uuid \"%.*s\": character %zu is not one of "
                             "[A-Za-z0-9._-]",
                             40, uuid, i + 1);
    }
    return 0;
}

int kd_ckpt_check_canonical_uuid(const char *uuid, char *err)
{
    static const char form[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    size_t n = strnlen(uuid, sizeof(form));
    bool ok = n == sizeof(form) - 1;
    for (size_t i = 0; ok && i < n; i++) {
        char c = uuid[i];
        ok = form[i] == '-' ? c == '-' : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    }
    if (!ok)
        return kd_seterr(err, KD_EINVAL,
                         "uuid: \"%.*s%s\" is not a UUID in canonical form (8-4-4-4-12 lowercase "
                         "hex digits, e.g. 6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11)",
                         40, uuid, n > 40 ? "..." : "");
    return 0;
}

void kd_ckpt_manifest_free(struct kd_ckpt_manifest *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nfiles; i++)
        free(m->files[i].path);
    free(m->files);
    json_decref(m->metadata);
    memset(m, 0, sizeof(*m));
}

/* ---- hashing, in parallel over files ---------------------------------- */

static int hash_file(const char *path, uint64_t expect, char out[65], char *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc(HASH_BUF), md[32];
    unsigned int mdlen = 0;
    uint64_t total = 0;
    int fd = -1, rc = 0;
    static const char digits[] = "0123456789abcdef";

    if (ctx == NULL || buf == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "hash: out of memory");
        goto out;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = kd_seterr(err, errno == ENOENT ? KD_ENOTFOUND : -errno, "%s: %s", path,
                       strerror(errno));
        goto out;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (;;) {
        ssize_t r = read(fd, buf, HASH_BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kd_seterr(err, -errno, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        total += (uint64_t)r;
    }
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
    out[64] = '\0';
    if (expect != UINT64_MAX && total != expect)
        rc = kd_seterr(err, KD_ECORRUPT, "%s: size %llu, expected %llu", path,
                       (unsigned long long)total, (unsigned long long)expect);
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    EVP_MD_CTX_free(ctx);
    return rc;
}

struct hash_job {
    const char *dir;
    struct kd_ckpt_file *files;
    size_t n;
    int check; /* compare with files[i].sha256 instead of filling it */
    atomic_size_t next;
    atomic_int stop;
    pthread_mutex_t lock;
    int rc;
    char err[KD_ERRLEN];
};

static void hash_one(struct hash_job *j, size_t i)
{
    char path[PATH_MAX], got[65], e[KD_ERRLEN];
    struct kd_ckpt_file *f = &j->files[i];
    int rc;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", j->dir, f->path) >= sizeof(path)) {
        rc = kd_seterr(e, -ENAMETOOLONG, "%s/%s: path too long", j->dir, f->path);
    } else if ((rc = hash_file(path, f->size, got, e)) == 0) {
        if (!j->check)
            memcpy(f->sha256, got, sizeof(got));
        else if (strcmp(got, f->sha256) != 0)
            rc = kd_seterr(e, KD_ECORRUPT, "%s: sha256 %s, the manifest says %s", f->path, got,
                           f->sha256);
    } else if (rc == KD_ECORRUPT && j->check) {
        kd_seterr(e, rc, "%s: size differs from the manifest's %llu bytes (truncated?)", f->path,
                  (unsigned long long)f->size);
    }
    if (rc != 0) {
        pthread_mutex_lock(&j->lock);
        if (j->rc == 0) {
            j->rc = rc;
            kd_strlcpy(j->err, e, sizeof(j->err));
        }
        pthread_mutex_unlock(&j->lock);
        atomic_store(&j->stop, 1);
    }
}

static void *hash_thread(void *arg)
{
    struct hash_job *j = arg;
    size_t i;
    while (!atomic_load(&j->stop) && (i = atomic_fetch_add(&j->next, 1)) < j->n)
        hash_one(j, i);
    return NULL;
}

static int hash_all(const char *dir, struct kd_ckpt_file *files, size_t n, int check, int parallel,
                    char *err)
{
    struct hash_job j;
    pthread_t th[MAX_HASH_THREADS];
    int started = 0;

    memset(&j, 0, sizeof(j));
    j.dir = dir;
    j.files = files;
    j.n = n;
    j.check = check;
    pthread_mutex_init(&j.lock, NULL);
    if (parallel > MAX_HASH_THREADS)
        parallel = MAX_HASH_THREADS;
    for (int t = 0; t < parallel && (size_t)t < n; t++) {
        if (pthread_create(&th[started], NULL, hash_thread, &j) != 0)
            break;
        started++;
    }
    hash_thread(&j); /* the caller works too (and alone if no thread started) */
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.lock);
    if (j.rc != 0)
        kd_seterr(err, j.rc, "%s", j.err);
    return j.rc;
}

/* ---- building a manifest ------------------------------------------ */

static int add_file(struct kd_ckpt_manifest *m, size_t *cap, const char *rel, uint64_t size,
                    int64_t mtime_ns)
{
    if (m->nfiles >= KD_CKPT_MAX_FILES)
        return KD_ETOOBIG;
    if (m->nfiles == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        struct kd_ckpt_file *nf = realloc(m->files, nc * sizeof(*nf));
        if (nf == NULL)
            return KD_ENOMEM;
        m->files = nf;
        *cap = nc;
    }
    memset(&m->files[m->nfiles], 0, sizeof(m->files[0]));
    m->files[m->nfiles].path = strdup(rel);
    if (m->files[m->nfiles].path == NULL)
        return KD_ENOMEM;
    m->files[m->nfiles].size = size;
    m->files[m->nfiles].mtime_ns = mtime_ns;
    m->nfiles++;
    m->total_size += size;
    return 0;
}

static int walk_dir(const char *root, const char *rel, int depth, struct kd_ckpt_manifest *m,
                    size_t *cap, char *err)
{
    char dir[PATH_MAX];
    DIR *d = NULL;
    struct dirent *de;
    int rc = 0;

    if (depth > 64) {
        rc = kd_seterr(err, KD_ETOOBIG, "%s/%s: nested deeper than 64 levels", root, rel);
        goto out;
    }
    if ((size_t)snprintf(dir, sizeof(dir), "%s%s%s", root, rel[0] ? "/" : "", rel) >= sizeof(dir)) {
        rc = kd_seterr(err, -ENAMETOOLONG, "%s/%s: path too long", root, rel);
        goto out;
    }
    d = opendir(dir);
    if (d == NULL) {
        rc =
            kd_seterr(err, errno == ENOENT ? KD_ENOTFOUND : -errno, "%s: %s", dir, strerror(errno));
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        char path[PATH_MAX], key[PATH_MAX];
        struct stat sb;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) ||
            (size_t)snprintf(key, sizeof(key), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >=
                KD_STORAGE_KEYLEN - KD_CKPT_UUIDLEN - 1) {
            rc = kd_seterr(err, -ENAMETOOLONG, "%s/%s: path too long for an object key", dir,
                           de->d_name);
            goto out;
        }
        if (stat(path, &sb) != 0) {
            rc = kd_seterr(err, -errno, "%s: %s", path, strerror(errno));
            goto out;
        }
        if (depth == 0 && strcmp(de->d_name, KD_CKPT_MANIFEST) == 0) {
            rc = kd_seterr(err, KD_EINVAL,
                           "%s: this name is reserved for the checkpoint "
                           "manifest; rename the file",
                           path);
            goto out;
        }
        if (S_ISDIR(sb.st_mode)) {
            rc = walk_dir(root, key, depth + 1, m, cap, err);
        } else if (S_ISREG(sb.st_mode)) {
            rc = add_file(m, cap, key, (uint64_t)sb.st_size,
                          (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec);
            if (rc != 0)
                kd_seterr(err, rc, "%s: %s (at most %d files)", dir, kd_strerror(rc),
                          KD_CKPT_MAX_FILES);
        } else {
            rc = kd_seterr(err, KD_EINVAL,
                           "%s: not a regular file or directory (sockets, fifos and devices "
                           "cannot be checkpointed)",
                           path);
        }
        if (rc != 0)
            goto out;
    }
out:
    if (d != NULL)
        closedir(d);
    return rc;
}

static int cmp_files(const void *a, const void *b)
{
    return strcmp(((const struct kd_ckpt_file *)a)->path, ((const struct kd_ckpt_file *)b)->path);
}

/* The manifest without hashes: every file's path, size and mtime. */
static int manifest_walk(const char *dir, const char *uuid, const json_t *metadata,
                         struct kd_ckpt_manifest *m, char *err)
{
    size_t cap = 0;
    int rc;

    memset(m, 0, sizeof(*m));
    if ((rc = kd_ckpt_check_uuid(uuid, err)) != 0)
        goto out;
    kd_strlcpy(m->uuid, uuid, sizeof(m->uuid));
    kd_time_rfc3339(kd_wall_ms(), 1, m->created, sizeof(m->created));
    m->metadata = metadata != NULL ? json_deep_copy(metadata) : json_object();
    if (m->metadata == NULL || !json_is_object(m->metadata)) {
        rc = kd_seterr(err, KD_EINVAL, "checkpoint metadata: must be a JSON object");
        goto out;
    }
    if ((rc = walk_dir(dir, "", 0, m, &cap, err)) != 0)
        goto out;
    if (m->nfiles > 1)
        qsort(m->files, m->nfiles, sizeof(m->files[0]), cmp_files);
out:
    if (rc != 0)
        kd_ckpt_manifest_free(m);
    return rc;
}

int kd_ckpt_manifest_build(const char *dir, const char *uuid, const json_t *metadata, int parallel,
                           struct kd_ckpt_manifest *m, char *err)
{
    int rc = manifest_walk(dir, uuid, metadata, m, err);
    if (rc == 0 && (rc = hash_all(dir, m->files, m->nfiles, 0, parallel, err)) != 0)
        kd_ckpt_manifest_free(m);
    return rc;
}

char *kd_ckpt_manifest_dump(const struct kd_ckpt_manifest *m)
{
    json_t *js = json_object(), *files = json_array();
    char *text = NULL;
    int bad = js == NULL || files == NULL;

    for (size_t i = 0; !bad && i < m->nfiles; i++) {
        json_t *f = json_pack("{s:s, s:I, s:s}", "path", m->files[i].path, "size",
                              (json_int_t)m->files[i].size, "sha256", m->files[i].sha256);
        bad = f == NULL || json_array_append_new(files, f) != 0;
    }
    if (!bad) {
        bad |= json_object_set_new(js, "kdet_manifest", json_integer(1));
        bad |= json_object_set_new(js, "uuid", json_string(m->uuid));
        bad |= json_object_set_new(js, "created", json_string(m->created));
        bad |= json_object_set(js, "metadata", m->metadata ? m->metadata : json_object());
        bad |= json_object_set_new(js, "total_size", json_integer((json_int_t)m->total_size));
        bad |= json_object_set(js, "files", files);
    }
    if (!bad)
        text = json_dumps(js, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(files);
    json_decref(js);
    return text;
}

static int check_rel_path(const char *p)
{
    const char *s = p;
    if (p[0] == '\0' || p[0] == '/')
        return -1;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return -1;
        s += n;
        if (*s == '/')
            s++;
    }
    return 0;
}

int kd_ckpt_manifest_parse(const char *text, size_t len, struct kd_ckpt_manifest *m, char *err)
{
    json_error_t je;
    json_t *js = json_loadb(text, len, 0, &je), *files, *f;
    const char *uuid, *created;
    size_t cap = 0, i;
    uint64_t total = 0;
    int rc = 0;

    memset(m, 0, sizeof(*m));
    if (js == NULL) {
        rc = kd_seterr(err, KD_EPARSE, "manifest: line %d column %d: %s", je.line, je.column,
                       je.text);
        goto out;
    }
    if (json_integer_value(json_object_get(js, "kdet_manifest")) != 1) {
        rc = kd_seterr(err, KD_EPARSE, "manifest.kdet_manifest: expected 1 (format version)");
        goto out;
    }
    uuid = json_string_value(json_object_get(js, "uuid"));
    if (uuid == NULL || kd_ckpt_check_uuid(uuid, NULL) != 0) {
        rc = kd_seterr(err, KD_EPARSE, "manifest.uuid: missing or invalid");
        goto out;
    }
    kd_strlcpy(m->uuid, uuid, sizeof(m->uuid));
    created = json_string_value(json_object_get(js, "created"));
    kd_strlcpy(m->created, created ? created : "", sizeof(m->created));
    m->metadata = json_object_get(js, "metadata");
    if (!json_is_object(m->metadata)) {
        m->metadata = NULL;
        rc = kd_seterr(err, KD_EPARSE, "manifest.metadata: must be an object");
        goto out;
    }
    json_incref(m->metadata);
    files = json_object_get(js, "files");
    if (!json_is_array(files)) {
        rc = kd_seterr(err, KD_EPARSE, "manifest.files: must be an array");
        goto out;
    }
    json_array_foreach(files, i, f)
    {
        const char *path = json_string_value(json_object_get(f, "path"));
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        json_t *size = json_object_get(f, "size");
        if (path == NULL || check_rel_path(path) != 0 ||
            strlen(path) >= KD_STORAGE_KEYLEN - KD_CKPT_UUIDLEN) {
            rc = kd_seterr(err, KD_EPARSE,
                           "manifest.files[%zu].path: missing or not a "
                           "relative path without . or .. parts",
                           i);
            goto out;
        }
        if (!json_is_integer(size) || json_integer_value(size) < 0) {
            rc = kd_seterr(err, KD_EPARSE, "manifest.files[%zu].size: must be an integer >= 0", i);
            goto out;
        }
        if (sha == NULL || strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64) {
            rc = kd_seterr(err, KD_EPARSE, "manifest.files[%zu].sha256: must be 64 hex digits", i);
            goto out;
        }
        if ((rc = add_file(m, &cap, path, (uint64_t)json_integer_value(size), 0)) != 0) {
            rc = kd_seterr(err, rc, "manifest.files[%zu]: %s", i, kd_strerror(rc));
            goto out;
        }
        memcpy(m->files[m->nfiles - 1].sha256, sha, 65);
        total += (uint64_t)json_integer_value(size);
    }
    if ((uint64_t)json_integer_value(json_object_get(js, "total_size")) != total) {
        rc = kd_seterr(err, KD_EPARSE, "manifest.total_size: %lld, but the files add up to %llu",
                       (long long)json_integer_value(json_object_get(js, "total_size")),
                       (unsigned long long)total);
        goto out;
    }
out:
    json_decref(js);
    if (rc != 0)
        kd_ckpt_manifest_free(m);
    return rc;
}

int kd_ckpt_manifest_check_dir(const struct kd_ckpt_manifest *m, const char *dir, int parallel,
                               char *err)
{
    return hash_all(dir, m->files, m->nfiles, 1, parallel, err);
}

/* ---- checkpoint operations ------------------------------------------- */

static int key_of(const char *uuid, const char *path, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/%s", uuid, path);
    return (n < 0 || (size_t)n >= len) ? KD_ETOOBIG : 0;
}

struct prog_ctx {
    kd_ckpt_progress_fn fn;
    void *arg;
    const char *phase;
    size_t files;
};

static int storage_progress(void *arg, uint64_t done, uint64_t total)
{
    struct prog_ctx *p = arg;
    struct kd_ckpt_progress pr = {p->phase, done, total, p->files};
    return p->fn != NULL ? p->fn(p->arg, &pr) : 0;
}

static void report(kd_ckpt_progress_fn fn, void *arg, const char *phase, uint64_t done,
                   uint64_t total, size_t files)
{
    struct kd_ckpt_progress pr = {phase, done, total, files};
    if (fn != NULL)
        fn(arg, &pr);
}

int kd_ckpt_read_manifest(struct kd_storage *st, const char *uuid, struct kd_ckpt_manifest *m,
                          char *err)
{
    struct kd_buf b = KD_BUF_INIT(KD_CKPT_MANIFEST_MAX);
    char key[KD_STORAGE_KEYLEN];
    int rc;

    memset(m, 0, sizeof(*m));
    if ((rc = kd_ckpt_check_uuid(uuid, err)) != 0)
        goto out;
    key_of(uuid, KD_CKPT_MANIFEST, key, sizeof(key));
    rc = kd_storage_get_mem(st, key, &b, err);
    if (rc == KD_ENOTFOUND) {
        rc = kd_seterr(err, rc,
                       "checkpoint %s: no manifest in %s: the checkpoint does not exist or is "
                       "incomplete (its upload did not finish), so it is not usable",
                       uuid, kd_storage_location(st));
        goto out;
    }
    if (rc != 0)
        goto out;
    if ((rc = kd_ckpt_manifest_parse(kd_buf_str(&b), b.len, m, err)) != 0)
        goto out;
    if (strcmp(m->uuid, uuid) != 0) {
        rc =
            kd_seterr(err, KD_ECORRUPT, "checkpoint %s: its manifest names uuid %s", uuid, m->uuid);
        kd_ckpt_manifest_free(m);
    }
out:
    kd_buf_free(&b);
    return rc;
}

int kd_ckpt_upload(struct kd_storage *st, const char *uuid, const char *dir, const json_t *metadata,
                   kd_ckpt_progress_fn progress, void *arg, char *err)
{
    struct kd_ckpt_manifest m, old;
    struct kd_storage_put *puts = NULL;
    char **keys = NULL, *text = NULL, mkey[KD_STORAGE_KEYLEN];
    struct prog_ctx pc = {progress, arg, "upload", 0};
    int rc, par = kd_storage__parallel(st), uploaded = 0;
    int64_t t0 = kd_mono_ms();

    memset(&m, 0, sizeof(m));
    if ((rc = kd_ckpt_check_uuid(uuid, err)) != 0)
        goto out;
    rc = kd_ckpt_read_manifest(st, uuid, &old, NULL);
    if (rc == 0) {
        kd_ckpt_manifest_free(&old);
        rc = kd_seterr(err, KD_EEXIST,
                       "checkpoint %s already exists in %s (checkpoints are immutable; use a "
                       "new uuid)",
                       uuid, kd_storage_location(st));
        goto out;
    }
    if ((rc = manifest_walk(dir, uuid, metadata, &m, err)) != 0)
        goto out;
    puts = calloc(m.nfiles ? m.nfiles : 1, sizeof(*puts));
    keys = calloc(m.nfiles ? m.nfiles * 2 : 1, sizeof(*keys));
    if (puts == NULL || keys == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "checkpoint upload: out of memory");
        goto out;
    }
    for (size_t i = 0; i < m.nfiles; i++) {
        char path[PATH_MAX], key[KD_STORAGE_KEYLEN];
        if (key_of(uuid, m.files[i].path, key, sizeof(key)) != 0 ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", dir, m.files[i].path) >= sizeof(path)) {
            rc = kd_seterr(err, KD_ETOOBIG, "%s: path too long", m.files[i].path);
            goto out;
        }
        keys[2 * i] = strdup(key);
        keys[2 * i + 1] = strdup(path);
        if (keys[2 * i] == NULL || keys[2 * i + 1] == NULL) {
            rc = kd_seterr(err, KD_ENOMEM, "checkpoint upload: out of memory");
            goto out;
        }
        puts[i].key = keys[2 * i];
        puts[i].path = keys[2 * i + 1];
        puts[i].size = m.files[i].size;
        puts[i].sha256_out = m.files[i].sha256; /* hashed in the same read where possible */
    }
    pc.files = m.nfiles;
    uploaded = 1;
    if ((rc = kd_storage_put_files(st, puts, m.nfiles, storage_progress, &pc, err)) != 0)
        goto out;
    {
        /* hash the files the backend could not hash on the way (multipart) */
        struct kd_ckpt_file *rest = calloc(m.nfiles ? m.nfiles : 1, sizeof(*rest));
        size_t k = 0;
        uint64_t bytes = 0;
        if (rest == NULL) {
            rc = kd_seterr(err, KD_ENOMEM, "checkpoint upload: out of memory");
            goto out;
        }
        for (size_t i = 0; i < m.nfiles; i++)
            if (!puts[i].hashed) {
                rest[k++] = m.files[i];
                bytes += m.files[i].size;
            }
        if (k > 0) {
            report(progress, arg, "hash", 0, bytes, k);
            rc = hash_all(dir, rest, k, 0, par > 4 ? 4 : par, err);
            report(progress, arg, "hash", bytes, bytes, k);
        }
        for (size_t i = 0, j = 0; rc == 0 && i < m.nfiles; i++)
            if (!puts[i].hashed)
                memcpy(m.files[i].sha256, rest[j++].sha256, sizeof(m.files[i].sha256));
        free(rest);
        if (rc != 0)
            goto out;
    }
    /* A file rewritten while we uploaded it would not match its hash. */
    for (size_t i = 0; i < m.nfiles; i++) {
        struct stat sb;
        if (stat(puts[i].path, &sb) != 0 || (uint64_t)sb.st_size != m.files[i].size ||
            (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec != m.files[i].mtime_ns) {
            rc = kd_seterr(err, KD_ECORRUPT,
                           "%s: changed while the checkpoint was being uploaded; write "
                           "checkpoints to a fresh directory and do not touch it until the "
                           "upload finished",
                           puts[i].path);
            goto out;
        }
    }
    text = kd_ckpt_manifest_dump(&m);
    if (text == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "checkpoint upload: out of memory");
        goto out;
    }
    key_of(uuid, KD_CKPT_MANIFEST, mkey, sizeof(mkey));
    if ((rc = kd_storage_put_mem(st, mkey, text, strlen(text), err)) != 0)
        goto out;
    KD_INFO("checkpoint uploaded", "uuid=%s files=%zu bytes=%llu ms=%lld location=%s", uuid,
            m.nfiles, (unsigned long long)m.total_size, (long long)(kd_mono_ms() - t0),
            kd_logq(kd_storage_location(st)));
out:
    if (rc != 0 && uploaded && rc != KD_EEXIST) {
        /* Best effort: without a manifest these objects are never used, but
         * do not leave them behind. */
        char e2[KD_ERRLEN];
        size_t nk = 0;
        const char **del = calloc(m.nfiles ? m.nfiles : 1, sizeof(*del));
        for (size_t i = 0; del != NULL && i < m.nfiles; i++)
            if (puts[i].result == 0 && keys[2 * i] != NULL)
                del[nk++] = keys[2 * i];
        if (del != NULL && nk > 0 && kd_storage_delete(st, del, nk, e2) != 0)
            KD_WARN("could not remove the objects of a failed checkpoint upload; it has no "
                    "manifest and is never used",
                    "uuid=%s err=%s", uuid, kd_logq(e2));
        free(del);
    }
    for (size_t i = 0; keys != NULL && i < 2 * m.nfiles; i++)
        free(keys[i]);
    free(keys);
    free(puts);
    free(text);
    kd_ckpt_manifest_free(&m);
    return rc;
}

int kd_ckpt_download(struct kd_storage *st, const char *uuid, const char *dir,
                     kd_ckpt_progress_fn progress, void *arg, char *err)
{
    struct kd_ckpt_manifest m;
    struct kd_storage_get *gets = NULL;
    char **strs = NULL;
    struct prog_ctx pc = {progress, arg, "download", 0};
    int rc, par = kd_storage__parallel(st);
    int64_t t0 = kd_mono_ms();

    if ((rc = kd_ckpt_read_manifest(st, uuid, &m, err)) != 0)
        return rc;
    if ((rc = kd_storage__mkdirs(dir)) != 0) {
        rc = kd_seterr(err, rc, "%s: cannot create: %s", dir, kd_strerror(rc));
        goto out;
    }
    gets = calloc(m.nfiles ? m.nfiles : 1, sizeof(*gets));
    strs = calloc(m.nfiles ? m.nfiles * 2 : 1, sizeof(*strs));
    if (gets == NULL || strs == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "checkpoint download: out of memory");
        goto out;
    }
    for (size_t i = 0; i < m.nfiles; i++) {
        char key[KD_STORAGE_KEYLEN], path[PATH_MAX];
        if (key_of(uuid, m.files[i].path, key, sizeof(key)) != 0 ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", dir, m.files[i].path) >= sizeof(path)) {
            rc = kd_seterr(err, KD_ETOOBIG, "%s: path too long", m.files[i].path);
            goto out;
        }
        strs[2 * i] = strdup(key);
        strs[2 * i + 1] = strdup(path);
        if (strs[2 * i] == NULL || strs[2 * i + 1] == NULL) {
            rc = kd_seterr(err, KD_ENOMEM, "checkpoint download: out of memory");
            goto out;
        }
        gets[i].key = strs[2 * i];
        gets[i].path = strs[2 * i + 1];
        gets[i].size = m.files[i].size;
        gets[i].sha256 = m.files[i].sha256;
    }
    pc.files = m.nfiles;
    if ((rc = kd_storage_get_files(st, gets, m.nfiles, storage_progress, &pc, err)) != 0) {
        if (rc == KD_ENOTFOUND)
            rc = kd_seterr(err, KD_ECORRUPT,
                           "checkpoint %s: a file listed in its manifest is missing from "
                           "storage (%s)",
                           uuid, err ? err : "");
        goto out;
    }
    report(progress, arg, "verify", 0, m.total_size, m.nfiles);
    {
        /* hash what the backend did not already check while copying */
        struct kd_ckpt_manifest rest = m;
        size_t k = 0;
        rest.files = calloc(m.nfiles ? m.nfiles : 1, sizeof(*rest.files));
        if (rest.files == NULL) {
            rc = kd_seterr(err, KD_ENOMEM, "checkpoint download: out of memory");
            goto out;
        }
        for (size_t i = 0; i < m.nfiles; i++)
            if (!gets[i].verified)
                rest.files[k++] = m.files[i];
        rest.nfiles = k;
        rc = kd_ckpt_manifest_check_dir(&rest, dir, par > 4 ? 4 : par, err);
        free(rest.files);
        if (rc != 0)
            goto out;
    }
    report(progress, arg, "verify", m.total_size, m.total_size, m.nfiles);
    KD_INFO("checkpoint restored", "uuid=%s files=%zu bytes=%llu ms=%lld", uuid, m.nfiles,
            (unsigned long long)m.total_size, (long long)(kd_mono_ms() - t0));
out:
    for (size_t i = 0; strs != NULL && i < 2 * m.nfiles; i++)
        free(strs[i]);
    free(strs);
    free(gets);
    kd_ckpt_manifest_free(&m);
    return rc;
}

int kd_ckpt_verify(struct kd_storage *st, const char *uuid, int deep, kd_ckpt_progress_fn progress,
                   void *arg, char *err)
{
    struct kd_ckpt_manifest m;
    struct kd_storage_list l = {0};
    char pfx[KD_STORAGE_KEYLEN], tmpl[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    int rc;

    if ((rc = kd_ckpt_read_manifest(st, uuid, &m, err)) != 0)
        return rc;
    snprintf(pfx, sizeof(pfx), "%s/", uuid);
    if ((rc = kd_storage_list(st, pfx, &l, err)) != 0)
        goto out;
    for (size_t i = 0; i < m.nfiles; i++) {
        char key[KD_STORAGE_KEYLEN];
        size_t j;
        key_of(uuid, m.files[i].path, key, sizeof(key));
        for (j = 0; j < l.n; j++)
            if (strcmp(l.objs[j].key, key) == 0)
                break;
        if (j == l.n) {
            rc = kd_seterr(err, KD_ECORRUPT, "checkpoint %s: %s is missing from storage", uuid,
                           m.files[i].path);
            goto out;
        }
        if (l.objs[j].size != m.files[i].size) {
            rc = kd_seterr(err, KD_ECORRUPT,
                           "checkpoint %s: %s is %llu bytes in storage, the manifest says %llu "
                           "(truncated or overwritten)",
                           uuid, m.files[i].path, (unsigned long long)l.objs[j].size,
                           (unsigned long long)m.files[i].size);
            goto out;
        }
    }
    if (deep) {
        if ((size_t)snprintf(tmpl, sizeof(tmpl), "%s/kdet-verify-XXXXXX",
                             tmp && tmp[0] ? tmp : "/tmp") >= sizeof(tmpl) ||
            mkdtemp(tmpl) == NULL) {
            rc = kd_seterr(err, -errno, "verify: cannot create a temp directory: %s",
                           strerror(errno));
            goto out;
        }
        rc = kd_ckpt_download(st, uuid, tmpl, progress, arg, err);
        kd_rm_tree(tmpl);
    }
out:
    kd_storage_list_free(&l);
    kd_ckpt_manifest_free(&m);
    return rc;
}

static int cmp_info(const void *a, const void *b)
{
    return strcmp(((const struct kd_ckpt_info *)a)->uuid, ((const struct kd_ckpt_info *)b)->uuid);
}

void kd_ckpt_list_free(struct kd_ckpt_info *infos, size_t n)
{
    for (size_t i = 0; infos != NULL && i < n; i++)
        json_decref(infos[i].metadata);
    free(infos);
}

int kd_ckpt_list(struct kd_storage *st, int read_manifests, struct kd_ckpt_info **out, size_t *n,
                 char *err)
{
    struct kd_storage_list l = {0};
    struct kd_ckpt_info *infos = NULL;
    size_t ni = 0, cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    if ((rc = kd_storage_list(st, "", &l, err)) != 0)
        goto out;
    for (size_t i = 0; i < l.n; i++) {
        const char *k = l.objs[i].key, *slash = strchr(k, '/');
        size_t ul = slash ? (size_t)(slash - k) : 0, j;
        char uuid[KD_CKPT_UUIDLEN];
        if (slash == NULL || ul == 0 || ul >= sizeof(uuid))
            continue; /* not a checkpoint object */
        memcpy(uuid, k, ul);
        uuid[ul] = '\0';
        if (kd_ckpt_check_uuid(uuid, NULL) != 0)
            continue;
        /* objects of one checkpoint are mostly adjacent: look back first */
        for (j = ni; j > 0; j--)
            if (strcmp(infos[j - 1].uuid, uuid) == 0)
                break;
        if (j == 0) {
            if (ni == cap) {
                size_t nc = cap ? cap * 2 : 16;
                struct kd_ckpt_info *nn = realloc(infos, nc * sizeof(*nn));
                if (nn == NULL) {
                    rc = kd_seterr(err, KD_ENOMEM, "checkpoint list: out of memory");
                    goto out;
                }
                infos = nn;
                cap = nc;
            }
            memset(&infos[ni], 0, sizeof(infos[ni]));
            memcpy(infos[ni].uuid, uuid, ul + 1);
            j = ++ni;
        }
        infos[j - 1].objects++;
        infos[j - 1].bytes += l.objs[i].size;
        if (strcmp(slash + 1, KD_CKPT_MANIFEST) == 0)
            infos[j - 1].complete = 1;
    }
    if (ni > 1)
        qsort(infos, ni, sizeof(*infos), cmp_info);
    for (size_t i = 0; read_manifests && i < ni; i++) {
        struct kd_ckpt_manifest m;
        char e[KD_ERRLEN];
        if (!infos[i].complete)
            continue;
        if (kd_ckpt_read_manifest(st, infos[i].uuid, &m, e) != 0) {
            KD_WARN("unreadable checkpoint manifest; listed as incomplete", "uuid=%s err=%s",
                    infos[i].uuid, kd_logq(e));
            infos[i].complete = 0;
            continue;
        }
        infos[i].metadata = json_incref(m.metadata);
        kd_strlcpy(infos[i].created, m.created, sizeof(infos[i].created));
        kd_ckpt_manifest_free(&m);
    }
    *out = infos;
    *n = ni;
    infos = NULL;
out:
    kd_ckpt_list_free(infos, ni);
    kd_storage_list_free(&l);
    return rc;
}

int kd_ckpt_delete(struct kd_storage *st, const char *uuid, char *err)
{
    struct kd_storage_list l = {0};
    const char **keys = NULL;
    char pfx[KD_STORAGE_KEYLEN], mkey[KD_STORAGE_KEYLEN];
    const char *mk[1] = {mkey};
    size_t nk = 0;
    int rc;

    if ((rc = kd_ckpt_check_uuid(uuid, err)) != 0)
        goto out;
    key_of(uuid, KD_CKPT_MANIFEST, mkey, sizeof(mkey));
    if ((rc = kd_storage_delete(st, mk, 1, err)) != 0)
        goto out;
    snprintf(pfx, sizeof(pfx), "%s/", uuid);
    if ((rc = kd_storage_list(st, pfx, &l, err)) != 0)
        goto out;
    keys = calloc(l.n ? l.n : 1, sizeof(*keys));
    if (keys == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "checkpoint delete: out of memory");
        goto out;
    }
    for (size_t i = 0; i < l.n; i++)
        keys[nk++] = l.objs[i].key;
    if ((rc = kd_storage_delete(st, keys, nk, err)) != 0)
        goto out;
    KD_INFO("checkpoint deleted", "uuid=%s objects=%zu", uuid, nk + 1);
out:
    free(keys);
    kd_storage_list_free(&l);
    return rc;
}
