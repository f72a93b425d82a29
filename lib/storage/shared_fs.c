/*
 * The shared_fs backend: objects are files under host_path/storage_path
 * (an NFS, CephFS or hostPath mount). Every object is written to a temp
 * file in its final directory and renamed into place, so readers see it
 * whole or not at all; data is made durable (syncfs) before put_files
 * returns, and single objects (the manifest) get temp + fsync + rename +
 * fsync of the directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/fs.h"
#include "core/log.h"
#include "core/str.h"
#include "storage/storage_int.h"

#define TMP_TAG ".kdtmp-"
#define FS_MAX_THREADS 8
#define COPY_CHUNK (1u << 20)
#define SMALL_FILE (1u << 20)

struct fs {
    char root[PATH_MAX];
    atomic_uint seq; /* temp-name uniquifier */
};

static int fs_path(struct kd_storage *st, const char *key, char *out, size_t len, char *err)
{
    struct fs *fs = st->impl;
    int n = snprintf(out, len, "%s/%s", fs->root, key);
    if (n < 0 || (size_t)n >= len)
        return kd_seterr(err, -ENAMETOOLONG, "shared_fs: path for key \"%s\" too long", key);
    return 0;
}

static int fs_open(struct kd_storage *st, char *err)
{
    struct fs *fs = calloc(1, sizeof(*fs));
    int n, rc = 0;
    struct stat sb;

    if (fs == NULL)
        return kd_seterr(err, KD_ENOMEM, "shared_fs: out of memory");
    n = snprintf(fs->root, sizeof(fs->root), "%s%s%s", st->cfg.host_path,
                 st->cfg.storage_path[0] ? "/" : "", st->cfg.storage_path);
    if (n < 0 || (size_t)n >= sizeof(fs->root)) {
        rc = kd_seterr(err, -ENAMETOOLONG, "shared_fs: host_path/storage_path too long");
        goto out;
    }
    if (stat(st->cfg.host_path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        rc = kd_seterr(err, KD_ENOTFOUND,
                       "shared_fs: host_path %s: not a directory (is the volume mounted?)",
                       st->cfg.host_path);
        goto out;
    }
    if ((rc = kd_storage__mkdirs(fs->root)) != 0) {
        rc = kd_seterr(err, rc, "shared_fs: cannot create %s: %s", fs->root, kd_strerror(rc));
        goto out;
    }
    kd_strlcpy(st->location, fs->root, sizeof(st->location));
    st->impl = fs;
    fs = NULL;
out:
    free(fs);
    return rc;
}

static void fs_close(struct kd_storage *st)
{
    free(st->impl);
    st->impl = NULL;
}

static int tmp_name(struct fs *fs, const char *dst, char *out, size_t len)
{
    unsigned s = atomic_fetch_add(&fs->seq, 1);
    int n = snprintf(out, len, "%s%s%d-%u", dst, TMP_TAG, (int)getpid(), s);
    return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* Copy the data of src into dst, keeping holes (a sparse file stays sparse). */
static int copy_fd(int src, int dst, uint64_t size, atomic_uint_fast64_t *done)
{
    int rc = 0;
    off_t pos = 0;
    char *buf = NULL;

    if (size <= SMALL_FILE) {
        /* small files: no hole search, the destination is new and empty */
        while ((uint64_t)pos < size) {
            off_t in = pos, outp = pos;
            ssize_t n = copy_file_range(src, &in, dst, &outp, (size_t)size - (size_t)pos, 0);
            if (n < 0 &&
                (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                char small[8192];
                n = pread(src, small, sizeof(small), pos);
                if (n > 0 && pwrite(dst, small, (size_t)n, pos) != n)
                    n = -1;
            }
            if (n < 0) {
                rc = -errno;
                goto out;
            }
            if (n == 0) {
                rc = KD_ECORRUPT;
                goto out;
            }
            pos += n;
            if (done != NULL)
                atomic_fetch_add(done, (uint64_t)n);
        }
        goto out;
    }
    while ((uint64_t)pos < size) {
        off_t data = lseek(src, pos, SEEK_DATA), hole;
        if (data < 0) {
            if (errno == ENXIO) /* only a hole remains */
                break;
            rc = -errno;
            goto out;
        }
        hole = lseek(src, data, SEEK_HOLE);
        if (hole < 0) {
            rc = -errno;
            goto out;
        }
        while (data < hole) {
            off_t in = data, outp = data;
            size_t want = (size_t)((hole - data) > (1 << 30) ? (1 << 30) : (hole - data));
            ssize_t n = copy_file_range(src, &in, dst, &outp, want, 0);
            if (n < 0 &&
                (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                /* Not supported between these files: plain read/write. */
                if (buf == NULL && (buf = malloc(COPY_CHUNK)) == NULL) {
                    rc = KD_ENOMEM;
                    goto out;
                }
                n = pread(src, buf, want > COPY_CHUNK ? COPY_CHUNK : want, data);
                if (n > 0 && pwrite(dst, buf, (size_t)n, data) != n)
                    n = -1;
            }
            if (n < 0) {
                rc = -errno;
                goto out;
            }
            if (n == 0) { /* the file shrank under us */
                rc = KD_ECORRUPT;
                goto out;
            }
            data += n;
            if (done != NULL)
                atomic_fetch_add(done, (uint64_t)n);
        }
        pos = hole;
    }
    if (ftruncate(dst, (off_t)size) != 0)
        rc = -errno;
out:
    free(buf);
    return rc;
}

/* The hex sha256 of the first size bytes of fd (read with pread). */
static int hash_fd(int fd, uint64_t size, char *got_hex)
{
    static const char digits[] = "0123456789abcdef";
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc(COPY_CHUNK), md[32];
    unsigned int mdlen = 0;
    uint64_t pos = 0;
    int rc = 0;

    if (ctx == NULL || buf == NULL) {
        rc = KD_ENOMEM;
        goto out;
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    while (pos < size) {
        ssize_t n =
            pread(fd, buf, size - pos < COPY_CHUNK ? (size_t)(size - pos) : COPY_CHUNK, (off_t)pos);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : KD_EIO;
            goto out;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        pos += (uint64_t)n;
    }
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    for (int i = 0; i < 32; i++) {
        got_hex[2 * i] = digits[md[i] >> 4];
        got_hex[2 * i + 1] = digits[md[i] & 15];
    }
    got_hex[64] = '\0';
out:
    free(buf);
    EVP_MD_CTX_free(ctx);
    return rc;
}

/*
 * Copy while hashing, so the data is read once: a save fills the manifest's
 * sha256 and a restore verifies it (want) in the same pass. All-zero chunks
 * are not written, so holes stay holes. got_hex receives the hex sha256;
 * KD_ECORRUPT when want is given and differs.
 */
static int copy_hashed(int src, int dst, uint64_t size, const char *want,
                       atomic_uint_fast64_t *done, char *got_hex)
{
    static const char digits[] = "0123456789abcdef";
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char *buf = malloc(COPY_CHUNK), md[32];
    unsigned int mdlen = 0;
    uint64_t pos = 0;
    int rc = 0;

    if (ctx == NULL || buf == NULL) {
        rc = KD_ENOMEM;
        goto out;
    }
    posix_fadvise(src, 0, 0, POSIX_FADV_SEQUENTIAL);
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    while (pos < size) {
        size_t want_n = size - pos < COPY_CHUNK ? (size_t)(size - pos) : COPY_CHUNK, k;
        ssize_t n = pread(src, buf, want_n, (off_t)pos);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            goto out;
        }
        if (n == 0) { /* the file shrank under us */
            rc = KD_EIO;
            goto out;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        for (k = 0; k < (size_t)n && buf[k] == 0; k++)
            ;
        for (ssize_t off = 0; k < (size_t)n && off < n;) {
            ssize_t w = pwrite(dst, buf + off, (size_t)(n - off), (off_t)pos + off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = w < 0 ? -errno : KD_EIO;
                goto out;
            }
            off += w;
        }
        pos += (uint64_t)n;
        if (done != NULL)
            atomic_fetch_add(done, (uint64_t)n);
    }
    if (ftruncate(dst, (off_t)size) != 0) {
        rc = -errno;
        goto out;
    }
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    for (int i = 0; i < 32; i++) {
        got_hex[2 * i] = digits[md[i] >> 4];
        got_hex[2 * i + 1] = digits[md[i] & 15];
    }
    got_hex[64] = '\0';
    if (want != NULL && strcmp(got_hex, want) != 0)
        rc = KD_ECORRUPT;
out:
    free(buf);
    EVP_MD_CTX_free(ctx);
    return rc;
}

/*
 * Copy src to dst atomically (temp file + rename), or straight to dst when
 * direct (dst is inside a staging directory nobody reads). `lastdir` (a
 * PATH_MAX buffer of the calling thread) remembers the last directory
 * created, so files of one directory cost one mkdir walk.
 */
static int copy_atomic(struct fs *fs, const char *src, const char *dst, uint64_t expect,
                       const char *want_sha, char *out_sha, int direct, char *lastdir,
                       atomic_uint_fast64_t *done, char *err)
{
    char got[65];
    char tmp[PATH_MAX + 64], dir[PATH_MAX];
    int in = -1, outfd = -1, rc = 0;
    struct stat sb;
    char *slash;

    tmp[0] = '\0';
    if (kd_strlcpy(dir, dst, sizeof(dir)) >= sizeof(dir) || tmp_name(fs, dst, tmp, sizeof(tmp))) {
        rc = kd_seterr(err, -ENAMETOOLONG, "shared_fs: path too long: %s", dst);
        tmp[0] = '\0';
        goto out;
    }
    slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        if (lastdir == NULL || strcmp(lastdir, dir) != 0) {
            if ((rc = kd_storage__mkdirs(dir)) != 0) {
                rc = kd_seterr(err, rc, "shared_fs: mkdir %s: %s", dir, kd_strerror(rc));
                goto out;
            }
            if (lastdir != NULL)
                kd_strlcpy(lastdir, dir, PATH_MAX);
        }
    }
    if (direct)
        kd_strlcpy(tmp, dst, sizeof(tmp));
    in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0 || fstat(in, &sb) != 0) {
        rc = kd_seterr(err, errno == ENOENT ? KD_ENOTFOUND : -errno, "shared_fs: open %s: %s", src,
                       strerror(errno));
        goto out;
    }
    if (expect != UINT64_MAX && (uint64_t)sb.st_size != expect) {
        rc = kd_seterr(err, KD_ECORRUPT, "%s: size %lld, expected %llu", src, (long long)sb.st_size,
                       (unsigned long long)expect);
        goto out;
    }
    outfd = open(tmp, O_RDWR | O_CREAT | (direct ? O_TRUNC : O_EXCL) | O_CLOEXEC, 0644);
    if (outfd < 0) {
        rc = kd_seterr(err, -errno, "shared_fs: create %s: %s", tmp, strerror(errno));
        goto out;
    }
    if ((want_sha != NULL || out_sha != NULL) && (uint64_t)sb.st_size > SMALL_FILE) {
        /* large files: the in-kernel copy plus one hashing read of the copy
         * costs less than moving every byte through user space twice */
        rc = copy_fd(in, outfd, (uint64_t)sb.st_size, done);
        if (rc == 0)
            rc = hash_fd(outfd, (uint64_t)sb.st_size, got);
        if (rc == 0 && want_sha != NULL && strcmp(got, want_sha) != 0) {
            rc = kd_seterr(err, KD_ECORRUPT, "%s: sha256 %s, the manifest says %s", src, got,
                           want_sha);
            goto out;
        }
        if (rc != 0) {
            rc = kd_seterr(err, rc, "shared_fs: copy %s -> %s: %s", src, dst, kd_strerror(rc));
            goto out;
        }
        if (out_sha != NULL)
            memcpy(out_sha, got, sizeof(got));
    } else if (want_sha != NULL || out_sha != NULL) {
        rc = copy_hashed(in, outfd, (uint64_t)sb.st_size, want_sha, done, got);
        if (rc == KD_ECORRUPT) {
            rc = kd_seterr(err, rc, "%s: sha256 %s, the manifest says %s", src, got, want_sha);
            goto out;
        }
        if (rc != 0) {
            rc = kd_seterr(err, rc, "shared_fs: copy %s -> %s: %s", src, dst, kd_strerror(rc));
            goto out;
        }
        if (out_sha != NULL)
            memcpy(out_sha, got, sizeof(got));
    } else if ((rc = copy_fd(in, outfd, (uint64_t)sb.st_size, done)) != 0) {
        rc = kd_seterr(err, rc, "shared_fs: copy %s -> %s: %s", src, dst, kd_strerror(rc));
        goto out;
    }
    if (close(outfd) != 0) {
        outfd = -1;
        rc = kd_seterr(err, -errno, "shared_fs: close %s: %s", tmp, strerror(errno));
        goto out;
    }
    outfd = -1;
    if (!direct && rename(tmp, dst) != 0) {
        rc = kd_seterr(err, -errno, "shared_fs: rename to %s: %s", dst, strerror(errno));
        goto out;
    }
    tmp[0] = '\0';
out:
    if (in >= 0)
        close(in);
    if (outfd >= 0)
        close(outfd);
    if (tmp[0] != '\0')
        unlink(tmp);
    return rc;
}

static int fsync_dir(const char *path)
{
    char dir[PATH_MAX];
    char *slash;
    int fd, rc = 0;
    kd_strlcpy(dir, path, sizeof(dir));
    slash = strrchr(dir, '/');
    if (slash == NULL)
        return 0;
    *slash = '\0';
    fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fsync(fd) != 0)
        rc = -errno;
    close(fd);
    return rc;
}

/* Work shared by the copy threads: an index into the job list. */
struct fs_batch {
    struct fs *fs;
    struct kd_storage *st;
    int put; /* 1: local -> storage; 0: storage -> local */
    struct kd_storage_put *puts;
    struct kd_storage_get *gets;
    size_t n;
    atomic_size_t next;
    atomic_uint_fast64_t done;
    atomic_int stop;
    pthread_mutex_t lock;
    int rc;
    char err[KD_ERRLEN];
    const char *stage; /* puts go to stage/<key after its first part> */
    size_t stage_skip;
};

static void batch_one(struct fs_batch *b, size_t i, char *lastdir)
{
    char path[PATH_MAX], e[KD_ERRLEN];
    int rc = 0;
    e[0] = '\0';
    if (b->put) {
        struct kd_storage_put *p = &b->puts[i];
        if (b->stage != NULL) {
            if ((size_t)snprintf(path, sizeof(path), "%s/%s", b->stage, p->key + b->stage_skip) >=
                sizeof(path))
                rc = kd_seterr(e, -ENAMETOOLONG, "shared_fs: path too long for %s", p->key);
        } else {
            rc = fs_path(b->st, p->key, path, sizeof(path), e);
        }
        if (rc == 0)
            rc = copy_atomic(b->fs, p->path, path, p->size, NULL, p->sha256_out, b->stage != NULL,
                             lastdir, &b->done, e);
        p->hashed = rc == 0 && p->sha256_out != NULL;
        p->result = rc;
    } else {
        struct kd_storage_get *g = &b->gets[i];
        rc = fs_path(b->st, g->key, path, sizeof(path), e);
        if (rc == 0)
            rc = copy_atomic(b->fs, path, g->path, g->size, g->sha256, NULL, 0, lastdir, &b->done,
                             e);
        if (rc == KD_ENOTFOUND)
            kd_seterr(e, rc, "shared_fs: object %s not found", g->key);
        g->verified = rc == 0 && g->sha256 != NULL;
        g->result = rc;
    }
    if (rc != 0) {
        pthread_mutex_lock(&b->lock);
        if (b->rc == 0) {
            b->rc = rc;
            kd_strlcpy(b->err, e, sizeof(b->err));
        }
        pthread_mutex_unlock(&b->lock);
        atomic_store(&b->stop, 1);
    }
}

static void *batch_thread(void *arg)
{
    struct fs_batch *b = arg;
    char lastdir[PATH_MAX] = "";
    size_t i;
    while (!atomic_load(&b->stop) && (i = atomic_fetch_add(&b->next, 1)) < b->n)
        batch_one(b, i, lastdir);
    return NULL;
}

static int run_batch(struct fs_batch *b, uint64_t total, kd_storage_progress_fn progress, void *arg,
                     char *err)
{
    pthread_t th[FS_MAX_THREADS];
    char lastdir[PATH_MAX] = "";
    int nth = kd_storage__parallel(b->st), started = 0;
    size_t i;

    if (nth > FS_MAX_THREADS)
        nth = FS_MAX_THREADS;
    if ((size_t)nth > b->n)
        nth = (int)b->n;
    pthread_mutex_init(&b->lock, NULL);
    for (int t = 1; t < nth; t++) {
        if (pthread_create(&th[started], NULL, batch_thread, b) != 0)
            break; /* fewer threads is fine */
        started++;
    }
    /* The calling thread works too, and is the only one to report progress. */
    while (!atomic_load(&b->stop) && (i = atomic_fetch_add(&b->next, 1)) < b->n) {
        batch_one(b, i, lastdir);
        if (progress != NULL && progress(arg, atomic_load(&b->done), total) != 0) {
            pthread_mutex_lock(&b->lock);
            if (b->rc == 0) {
                b->rc = KD_ECANCELED;
                kd_strlcpy(b->err, "shared_fs: canceled", sizeof(b->err));
            }
            pthread_mutex_unlock(&b->lock);
            atomic_store(&b->stop, 1);
        }
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&b->lock);
    if (b->rc == 0 && progress != NULL)
        progress(arg, atomic_load(&b->done), total);
    if (b->rc != 0)
        kd_seterr(err, b->rc, "%s", b->err);
    return b->rc;
}

/*
 * When every key shares a first part ("<uuid>/...") that does not exist
 * yet, the files are written into a staging directory next to it and the
 * whole directory is renamed into place at the end: one rename instead of
 * one per file, and nothing half-written is ever visible under the name.
 */
static int stage_for(struct fs *fs, struct kd_storage_put *puts, size_t n, char *stage, size_t len,
                     size_t *skip)
{
    const char *slash = n ? strchr(puts[0].key, '/') : NULL;
    size_t tl;
    char final[PATH_MAX];
    struct stat sb;
    if (slash == NULL)
        return 0;
    tl = (size_t)(slash - puts[0].key) + 1;
    for (size_t i = 1; i < n; i++)
        if (strncmp(puts[i].key, puts[0].key, tl) != 0)
            return 0;
    if ((size_t)snprintf(final, sizeof(final), "%s/%.*s", fs->root, (int)(tl - 1), puts[0].key) >=
            sizeof(final) ||
        lstat(final, &sb) == 0 || errno != ENOENT || tmp_name(fs, final, stage, len) != 0)
        return 0;
    *skip = tl;
    return 1;
}

static int fs_put_files(struct kd_storage *st, struct kd_storage_put *puts, size_t n,
                        kd_storage_progress_fn progress, void *arg, char *err)
{
    struct fs *fs = st->impl;
    struct fs_batch b;
    char stage[PATH_MAX + 64], final[PATH_MAX];
    size_t skip = 0;
    uint64_t total = 0;
    int rc, fd, staged;

    memset(&b, 0, sizeof(b));
    b.fs = fs;
    b.st = st;
    b.put = 1;
    b.puts = puts;
    b.n = n;
    staged = stage_for(fs, puts, n, stage, sizeof(stage), &skip);
    if (staged) {
        if ((rc = kd_storage__mkdirs(stage)) != 0) {
            rc = kd_seterr(err, rc, "shared_fs: mkdir %s: %s", stage, kd_strerror(rc));
            staged = 0;
            goto out;
        }
        b.stage = stage;
        b.stage_skip = skip;
        if ((size_t)snprintf(final, sizeof(final), "%s/%.*s", fs->root, (int)(skip - 1),
                             puts[0].key) >= sizeof(final)) {
            rc = kd_seterr(err, -ENAMETOOLONG, "shared_fs: path too long under %s", fs->root);
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++)
        total += puts[i].size;
    if ((rc = run_batch(&b, total, progress, arg, err)) != 0)
        goto out;
    /* One syncfs makes every file and directory entry durable at once, far
     * cheaper than an fsync per file for thousands of small files. */
    fd = open(fs->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || syncfs(fd) != 0)
        rc = kd_seterr(err, -errno, "shared_fs: syncfs %s: %s", fs->root, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (rc == 0 && staged) {
        if (rename(stage, final) != 0) {
            rc = kd_seterr(err, errno == ENOTEMPTY || errno == EEXIST ? KD_ECONFLICT : -errno,
                           "shared_fs: rename %s to %s: %s", stage, final, strerror(errno));
            goto out;
        }
        staged = 0;
        if ((rc = fsync_dir(final)) != 0)
            rc = kd_seterr(err, rc, "shared_fs: fsync %s: %s", fs->root, kd_strerror(rc));
    }
out:
    if (staged)
        kd_rm_tree(stage);
    return rc;
}

static int fs_get_files(struct kd_storage *st, struct kd_storage_get *gets, size_t n,
                        kd_storage_progress_fn progress, void *arg, char *err)
{
    struct fs_batch b;
    uint64_t total = 0;

    memset(&b, 0, sizeof(b));
    b.fs = st->impl;
    b.st = st;
    b.gets = gets;
    b.n = n;
    for (size_t i = 0; i < n; i++)
        total += gets[i].size != UINT64_MAX ? gets[i].size : 0;
    return run_batch(&b, total, progress, arg, err);
}

static int fs_put_mem(struct kd_storage *st, const char *key, const void *data, size_t len,
                      char *err)
{
    char path[PATH_MAX], tmp[PATH_MAX + 64], dir[PATH_MAX];
    int fd = -1, rc;
    size_t off = 0;
    char *slash;

    tmp[0] = '\0';
    if ((rc = fs_path(st, key, path, sizeof(path), err)) != 0)
        goto out;
    kd_strlcpy(dir, path, sizeof(dir));
    slash = strrchr(dir, '/');
    *slash = '\0';
    if ((rc = kd_storage__mkdirs(dir)) != 0) {
        rc = kd_seterr(err, rc, "shared_fs: mkdir %s: %s", dir, kd_strerror(rc));
        goto out;
    }
    if (tmp_name(st->impl, path, tmp, sizeof(tmp)) != 0) {
        tmp[0] = '\0';
        rc = kd_seterr(err, -ENAMETOOLONG, "shared_fs: path too long: %s", path);
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = kd_seterr(err, -errno, "shared_fs: create %s: %s", tmp, strerror(errno));
        tmp[0] = '\0';
        goto out;
    }
    while (off < len) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = kd_seterr(err, -errno, "shared_fs: write %s: %s", tmp, strerror(errno));
            goto out;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        rc = kd_seterr(err, -errno, "shared_fs: fsync %s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rc = kd_seterr(err, -errno, "shared_fs: rename to %s: %s", path, strerror(errno));
        goto out;
    }
    tmp[0] = '\0';
    if ((rc = fsync_dir(path)) != 0)
        rc = kd_seterr(err, rc, "shared_fs: fsync directory of %s: %s", path, kd_strerror(rc));
out:
    if (fd >= 0)
        close(fd);
    if (tmp[0] != '\0')
        unlink(tmp);
    return rc;
}

/* Open object key for reading: *fd, and its file's path in path (for messages). */
static int open_object(struct kd_storage *st, const char *key, char *path, size_t cap, int *fd,
                       char *err)
{
    int rc = fs_path(st, key, path, cap, err);
    if (rc != 0)
        return rc;
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return kd_seterr(err, errno == ENOENT ? KD_ENOTFOUND : -errno, "shared_fs: open %s: %s",
                         path, strerror(errno));
    return 0;
}

static int fs_get_mem(struct kd_storage *st, const char *key, struct kd_buf *out, char *err)
{
    char path[PATH_MAX], chunk[65536];
    int fd = -1, rc;

    if ((rc = open_object(st, key, path, sizeof(path), &fd, err)) != 0)
        goto out;
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kd_seterr(err, -errno, "shared_fs: read %s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        if ((rc = kd_buf_append(out, chunk, (size_t)r)) != 0) {
            rc = kd_seterr(err, rc, "shared_fs: %s: larger than %zu bytes", path, out->max);
            goto out;
        }
    }
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

static int fs_get_range(struct kd_storage *st, const char *key, uint64_t off, size_t len,
                        struct kd_buf *out, char *err)
{
    char path[PATH_MAX], chunk[65536];
    int fd = -1, rc;
    if ((rc = open_object(st, key, path, sizeof(path), &fd, err)) != 0)
        goto out;
    while (out->len < len) {
        size_t want = len - out->len < sizeof(chunk) ? len - out->len : sizeof(chunk);
        ssize_t r = pread(fd, chunk, want, (off_t)(off + out->len));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kd_seterr(err, -errno, "shared_fs: read %s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0) {
            rc = kd_seterr(err, KD_ECORRUPT, "shared_fs: %s is shorter than %llu bytes", path,
                           (unsigned long long)(off + len));
            goto out;
        }
        if ((rc = kd_buf_append(out, chunk, (size_t)r)) != 0) {
            rc = kd_seterr(err, rc, "shared_fs: %s: no room for %zu bytes", path, len);
            goto out;
        }
    }
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Walk dir (whose key is rel) and add every regular file. */
static int walk(const char *dir, const char *rel, int depth, struct kd_storage_list *out, char *err)
{
    DIR *d = NULL;
    struct dirent *de;
    int rc = 0;

    if (depth > 64)
        return kd_seterr(err, KD_ETOOBIG, "shared_fs: %s: nested deeper than 64 levels", dir);
    d = opendir(dir);
    if (d == NULL) {
        rc = errno == ENOENT
                 ? 0
                 : kd_seterr(err, -errno, "shared_fs: opendir %s: %s", dir, strerror(errno));
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        char path[PATH_MAX], key[PATH_MAX];
        struct stat sb;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            strstr(de->d_name, TMP_TAG) != NULL)
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) ||
            (size_t)snprintf(key, sizeof(key), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >=
                sizeof(key)) {
            rc = kd_seterr(err, -ENAMETOOLONG, "shared_fs: path too long under %s", dir);
            goto out;
        }
        if (lstat(path, &sb) != 0)
            continue; /* deleted meanwhile */
        if (S_ISDIR(sb.st_mode))
            rc = walk(path, key, depth + 1, out, err);
        else if (S_ISREG(sb.st_mode))
            rc = kd_storage__list_add(out, key, strlen(key), (uint64_t)sb.st_size);
        if (rc != 0) {
            if (rc == KD_ENOMEM || rc == KD_ETOOBIG)
                kd_seterr(err, rc, "shared_fs: listing %s: %s", dir, kd_strerror(rc));
            goto out;
        }
    }
out:
    if (d != NULL)
        closedir(d);
    return rc;
}

static int fs_list(struct kd_storage *st, const char *prefix, struct kd_storage_list *out,
                   char *err)
{
    struct fs *fs = st->impl;
    char dir[PATH_MAX], rel[PATH_MAX];
    const char *slash = strrchr(prefix, '/');
    size_t start = out->n, keep = start;
    int rc;

    /* Walk the deepest directory named by the prefix, then filter. */
    if (slash != NULL) {
        int a = snprintf(rel, sizeof(rel), "%.*s", (int)(slash - prefix), prefix);
        int b = snprintf(dir, sizeof(dir), "%s/%.*s", fs->root, (int)(slash - prefix), prefix);
        if (a < 0 || b < 0 || (size_t)b >= sizeof(dir)) {
            rc = kd_seterr(err, -ENAMETOOLONG, "shared_fs: list prefix too long");
            goto out;
        }
    } else {
        rel[0] = '\0';
        kd_strlcpy(dir, fs->root, sizeof(dir));
    }
    if ((rc = walk(dir, rel, 0, out, err)) != 0)
        goto out;
    for (size_t i = start; i < out->n; i++) {
        if (kd_str_has_prefix(out->objs[i].key, prefix))
            out->objs[keep++] = out->objs[i];
        else
            free(out->objs[i].key);
    }
    out->n = keep;
out:
    return rc;
}

static int fs_del(struct kd_storage *st, const char *const *keys, size_t n, char *err)
{
    struct fs *fs = st->impl;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        char *slash;
        if ((rc = fs_path(st, keys[i], path, sizeof(path), err)) != 0)
            goto out;
        if (unlink(path) != 0 && errno != ENOENT) {
            rc = kd_seterr(err, -errno, "shared_fs: delete %s: %s", path, strerror(errno));
            goto out;
        }
        /* Remove directories left empty, up to the root. */
        while ((slash = strrchr(path, '/')) != NULL && (size_t)(slash - path) > strlen(fs->root)) {
            *slash = '\0';
            if (rmdir(path) != 0)
                break;
        }
    }
out:
    return rc;
}

const struct kd_storage_ops kd_storage__shared_fs_ops = {
    .name = "shared_fs",
    .open = fs_open,
    .close = fs_close,
    .put_files = fs_put_files,
    .put_mem = fs_put_mem,
    .get_files = fs_get_files,
    .get_mem = fs_get_mem,
    .get_range = fs_get_range,
    .list = fs_list,
    .del = fs_del,
};
