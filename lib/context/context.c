/*
 * Packing a context directory into a deterministic tar.gz (libarchive) and
 * unpacking one safely. The walk happens first, so a context that is too
 * large is refused with a list of what to drop before anything is
 * compressed.
 */
#include "context/context.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"

enum ent_type { ENT_FILE, ENT_DIR, ENT_LINK };

struct ent {
    char *rel; /* path relative to the context root */
    enum ent_type type;
    uint64_t size;
    bool exec;
    char *target; /* symlink target */
};

struct walk {
    const char *root;
    struct kd_ignore *ig;
    struct ent *v;
    size_t n, cap;
    uint64_t bytes;
    char *err;
    int rc;
};

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Does a relative symlink target, resolved from the directory of `rel`, stay inside the root? */
static bool link_stays_inside(const char *rel, const char *target)
{
    int depth = 0;
    if (target[0] == '/' || target[0] == '\0')
        return false;
    for (const char *p = rel; *p; p++)
        if (*p == '/')
            depth++;
    const char *s = target;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') {
            if (--depth < 0)
                return false;
        } else if (!(n == 0 || (n == 1 && s[0] == '.'))) {
            depth++;
        }
        s += n;
        if (*s == '/')
            s++;
    }
    return true;
}

static void push(struct walk *w, struct ent e)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 256;
        w->v = kd_xrealloc(w->v, w->cap * sizeof(*w->v));
    }
    w->v[w->n++] = e;
}

/* Depth-first walk of root/rel; names sorted bytewise within each directory. */
static void walk_dir(struct walk *w, const char *rel, int depth)
{
    char *path = rel[0] ? kd_xasprintf("%s/%s", w->root, rel) : kd_xstrdup(w->root);
    DIR *d = NULL;
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *de;
    if (depth > 64) {
        w->rc = kd_seterr(w->err, KD_EINVAL, "%s: directories nested deeper than 64", path);
        goto out;
    }
    d = opendir(path);
    if (d == NULL) {
        w->rc = kd_seterr(w->err, -errno, "%s: %s", path, strerror(errno));
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (nn == cap) {
            cap = cap ? cap * 2 : 32;
            names = kd_xrealloc(names, cap * sizeof(*names));
        }
        names[nn++] = kd_xstrdup(de->d_name);
    }
    qsort(names, nn, sizeof(*names), cmp_name);
    for (size_t i = 0; i < nn && w->rc == 0; i++) {
        char *r = rel[0] ? kd_xasprintf("%s/%s", rel, names[i]) : kd_xstrdup(names[i]);
        char *full = kd_xasprintf("%s/%s", w->root, r);
        struct stat st;
        if (strlen(r) > KD_CONTEXT_MAX_PATH) {
            w->rc = kd_seterr(w->err, KD_EINVAL, "%s: path longer than %d bytes", r,
                              KD_CONTEXT_MAX_PATH);
        } else if (w->n >= KD_CONTEXT_MAX_ENTRIES) {
            w->rc = kd_seterr(w->err, KD_EINVAL,
                              "context has more than %d entries; add the bulky directories to "
                              ".detignore",
                              KD_CONTEXT_MAX_ENTRIES);
        } else if (lstat(full, &st) != 0) {
            w->rc = kd_seterr(w->err, -errno, "%s: %s", full, strerror(errno));
        } else {
            bool is_dir = S_ISDIR(st.st_mode);
            bool always = (is_dir && strcmp(names[i], "__pycache__") == 0) ||
                          (!is_dir && kd_str_has_suffix(names[i], ".pyc"));
            if (!always && !kd_ignore_match(w->ig, r, is_dir)) {
                struct ent e = {r, ENT_FILE, 0, (st.st_mode & 0111) != 0, NULL};
                if (S_ISREG(st.st_mode)) {
                    e.size = (uint64_t)st.st_size;
                    w->bytes += e.size;
                    push(w, e);
                    r = NULL;
                } else if (is_dir) {
                    e.type = ENT_DIR;
                    push(w, e);
                    r = NULL;
                    walk_dir(w, e.rel, depth + 1);
                } else if (S_ISLNK(st.st_mode)) {
                    char buf[KD_CONTEXT_MAX_PATH + 1];
                    ssize_t n = readlink(full, buf, sizeof(buf) - 1);
                    if (n < 0 || n >= (ssize_t)sizeof(buf) - 1) {
                        w->rc = kd_seterr(w->err, KD_EINVAL, "%s: unreadable symlink", r);
                    } else {
                        buf[n] = '\0';
                        if (!link_stays_inside(r, buf)) {
                            w->rc = kd_seterr(w->err, KD_EINVAL,
                                              "%s: symlink points outside the context directory "
                                              "(-> %s); copy the file in, or add \"/%s\" to "
                                              ".detignore",
                                              r, buf, r);
                        } else {
                            e.type = ENT_LINK;
                            e.target = kd_xstrdup(buf);
                            push(w, e);
                            r = NULL;
                        }
                    }
                } else {
                    w->rc = kd_seterr(w->err, KD_EINVAL,
                                      "%s: not a regular file, directory or symlink (socket, "
                                      "FIFO or device); add \"/%s\" to .detignore",
                                      r, r);
                }
            }
        }
        free(r);
        free(full);
    }
out:
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    if (d)
        closedir(d);
    free(path);
}

static void free_ents(struct walk *w)
{
    for (size_t i = 0; i < w->n; i++) {
        free(w->v[i].rel);
        free(w->v[i].target);
    }
    free(w->v);
    w->v = NULL;
    w->n = w->cap = 0;
}

/* ---- the "too big" message ---------------------------------------------- */

struct sized {
    const char *rel;
    uint64_t size;
    bool dir;
};

static int cmp_size_desc(const void *a, const void *b)
{
    const struct sized *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return strcmp(x->rel, y->rel);
}

static void human(uint64_t n, char *buf, size_t len)
{
    if (n >= (1ull << 20))
        snprintf(buf, len, "%.1f MiB", (double)n / (1 << 20));
    else if (n >= 1024)
        snprintf(buf, len, "%.1f KiB", (double)n / 1024);
    else
        snprintf(buf, len, "%llu B", (unsigned long long)n);
}

static int too_big(struct walk *w, uint64_t max, char *err)
{
    /* sizes of the top-level entries (directories summed) and of the largest files */
    struct sized *top = kd_xcalloc(w->n + 1, sizeof(*top));
    struct sized *files = kd_xcalloc(w->n + 1, sizeof(*files));
    size_t nt = 0, nf = 0;
    struct kd_buf b = KD_BUF_INIT(KD_ERRLEN - 1);
    char h1[32], h2[32];
    for (size_t i = 0; i < w->n; i++) {
        const struct ent *e = &w->v[i];
        if (strchr(e->rel, '/') == NULL) {
            top[nt].rel = e->rel;
            top[nt].dir = e->type == ENT_DIR;
            top[nt].size = e->size;
            nt++;
        } else if (e->type == ENT_FILE) {
            size_t tl = (size_t)(strchr(e->rel, '/') - e->rel);
            for (size_t j = nt; j-- > 0;)
                if (strncmp(top[j].rel, e->rel, tl) == 0 && top[j].rel[tl] == '\0') {
                    top[j].size += e->size;
                    break;
                }
        }
        if (e->type == ENT_FILE && strchr(e->rel, '/') != NULL) {
            files[nf].rel = e->rel;
            files[nf].size = e->size;
            nf++;
        }
    }
    qsort(top, nt, sizeof(*top), cmp_size_desc);
    qsort(files, nf, sizeof(*files), cmp_size_desc);
    human(w->bytes, h1, sizeof(h1));
    human(max, h2, sizeof(h2));
    if (kd_buf_printf(&b,
                      "context directory %s is %s, over the %s limit; shrink it by moving data "
                      "out (read it from `data` or checkpoint storage) or by adding lines to "
                      "%s/.detignore. Largest entries:",
                      w->root, h1, h2, w->root) != 0)
        goto done;
    /* only what matters: entries of at least 5% of the total (and the largest) */
    for (size_t i = 0; i < nt && i < 5 && (i == 0 || top[i].size * 20 >= w->bytes); i++) {
        human(top[i].size, h1, sizeof(h1));
        if (kd_buf_printf(&b, "\n  %10s  %s%s   (.detignore: /%s%s)", h1, top[i].rel,
                          top[i].dir ? "/" : "", top[i].rel, top[i].dir ? "/" : "") != 0)
            goto done;
    }
    for (size_t i = 0; i < nf && i < 3 && files[i].size * 20 >= w->bytes; i++) {
        human(files[i].size, h1, sizeof(h1));
        if (kd_buf_printf(&b, "\n  %10s  %s   (.detignore: /%s)", h1, files[i].rel, files[i].rel) !=
            0)
            goto done;
    }
done:
    kd_seterr(err, KD_ETOOBIG, "%s", kd_buf_str(&b));
    kd_buf_free(&b);
    free(top);
    free(files);
    return KD_ETOOBIG;
}

/* ---- writing ------------------------------------------------------------ */

struct sink {
    struct kd_buf buf;
    int overflow;
};

static la_ssize_t sink_write(struct archive *a, void *p, const void *data, size_t n)
{
    struct sink *s = p;
    if (kd_buf_append(&s->buf, data, n) != 0) {
        s->overflow = 1;
        archive_set_error(a, EFBIG, "archive larger than its cap");
        return -1;
    }
    return (la_ssize_t)n;
}

static int write_file(struct archive *a, const char *full, uint64_t size, char *err)
{
    int rc = 0, fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char buf[65536];
    uint64_t done = 0;
    if (fd < 0) {
        rc = kd_seterr(err, -errno, "%s: %s", full, strerror(errno));
        goto out;
    }
    while (done < size) {
        size_t want = size - done < sizeof(buf) ? (size_t)(size - done) : sizeof(buf);
        ssize_t n = read(fd, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = kd_seterr(err, -errno, "%s: %s", full, strerror(errno));
            goto out;
        }
        if (n == 0) {
            rc = kd_seterr(err, KD_EIO, "%s: file shrank while it was being packed", full);
            goto out;
        }
        if (archive_write_data(a, buf, (size_t)n) != n) {
            rc = kd_seterr(err, KD_EIO, "%s: %s", full, archive_error_string(a));
            goto out;
        }
        done += (uint64_t)n;
    }
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

void kd_context_sha256(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    hex[0] = '\0';
    if (EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1)
        return;
    for (unsigned int i = 0; i < mdlen && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

int kd_context_pack(const char *dir, uint64_t max_bytes, struct kd_context *out, char *err)
{
    int rc = 0;
    struct walk w = {0};
    struct archive *a = NULL;
    struct archive_entry *ae = NULL;
    struct sink sink = {KD_BUF_INIT(0), 0};
    char *ignpath = NULL, *igntext = NULL, *root = NULL;
    struct stat st;
    if (dir == NULL || out == NULL) {
        rc = kd_seterr(err, KD_EINVAL, "context: no directory given");
        goto out;
    }
    memset(out, 0, sizeof(*out));
    if (max_bytes == 0)
        max_bytes = KD_CONTEXT_MAX_BYTES;
    if (stat(dir, &st) != 0) {
        rc = kd_seterr(err, -errno, "%s: cannot read the context directory: %s", dir,
                       strerror(errno));
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = kd_seterr(err, KD_EINVAL, "%s: not a directory (the context is a directory of code)",
                       dir);
        goto out;
    }
    /* "ctx/" and "ctx" name the same tree: keep messages free of "//" */
    root = kd_xstrdup(dir);
    for (size_t n = strlen(root); n > 1 && root[n - 1] == '/'; n--)
        root[n - 1] = '\0';
    ignpath = kd_xasprintf("%s/.detignore", root);
    if (stat(ignpath, &st) == 0) {
        FILE *f = fopen(ignpath, "rb");
        size_t n = 0;
        if (f == NULL || st.st_size > (1 << 20)) {
            if (f)
                fclose(f);
            rc = kd_seterr(err, KD_EINVAL, "%s: unreadable or larger than 1 MiB", ignpath);
            goto out;
        }
        igntext = kd_xmalloc((size_t)st.st_size + 1);
        n = fread(igntext, 1, (size_t)st.st_size, f);
        fclose(f);
        rc = kd_ignore_parse(ignpath, igntext, n, &w.ig, err);
        if (rc != 0)
            goto out;
    }
    w.root = root;
    w.err = err;
    walk_dir(&w, "", 0);
    if (w.rc != 0) {
        rc = w.rc;
        goto out;
    }
    if (w.bytes > max_bytes) {
        rc = too_big(&w, max_bytes, err);
        goto out;
    }
    /* compressed output can exceed the input slightly for random data */
    kd_buf_init(&sink.buf, (size_t)(max_bytes + max_bytes / 8 + (1u << 20)));
    a = archive_write_new();
    ae = archive_entry_new();
    if (a == NULL || ae == NULL)
        kd_oom(4096);
    if (archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
        archive_write_set_filter_option(a, "gzip", "timestamp", NULL) < ARCHIVE_OK ||
        archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open2(a, &sink, NULL, sink_write, NULL, NULL) != ARCHIVE_OK) {
        rc = kd_seterr(err, KD_EIO, "context: %s", archive_error_string(a));
        goto out;
    }
    for (size_t i = 0; i < w.n; i++) {
        const struct ent *e = &w.v[i];
        archive_entry_clear(ae);
        archive_entry_set_pathname(ae, e->rel);
        archive_entry_set_mtime(ae, 0, 0);
        archive_entry_set_uid(ae, 0);
        archive_entry_set_gid(ae, 0);
        switch (e->type) {
        case ENT_DIR:
            archive_entry_set_filetype(ae, AE_IFDIR);
            archive_entry_set_perm(ae, 0755);
            break;
        case ENT_LINK:
            archive_entry_set_filetype(ae, AE_IFLNK);
            archive_entry_set_perm(ae, 0777);
            archive_entry_set_symlink(ae, e->target);
            break;
        case ENT_FILE:
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_perm(ae, e->exec ? 0755 : 0644);
            archive_entry_set_size(ae, (la_int64_t)e->size);
            break;
        }
        if (archive_write_header(a, ae) != ARCHIVE_OK) {
            rc = kd_seterr(err, KD_EIO, "%s: %s", e->rel, archive_error_string(a));
            goto out;
        }
        if (e->type == ENT_FILE) {
            char *full = kd_xasprintf("%s/%s", root, e->rel);
            rc = write_file(a, full, e->size, err);
            free(full);
            if (rc != 0)
                goto out;
            out->files++;
        }
        out->entries++;
    }
    if (archive_write_close(a) != ARCHIVE_OK) {
        rc = kd_seterr(err, KD_EIO, "context: %s", archive_error_string(a));
        goto out;
    }
    out->raw_bytes = w.bytes;
    out->len = sink.buf.len;
    out->data = (unsigned char *)kd_buf_steal(&sink.buf);
    if (out->data == NULL)
        kd_oom(out->len);
    kd_context_sha256(out->data, out->len, out->sha256);
out:
    if (a)
        archive_write_free(a);
    if (ae)
        archive_entry_free(ae);
    kd_buf_free(&sink.buf);
    kd_ignore_free(w.ig);
    free_ents(&w);
    free(ignpath);
    free(igntext);
    free(root);
    if (rc != 0 && out != NULL)
        kd_context_free(out);
    return rc;
}

void kd_context_free(struct kd_context *ctx)
{
    if (ctx == NULL)
        return;
    free(ctx->data);
    memset(ctx, 0, sizeof(*ctx));
}

/* ---- reading ------------------------------------------------------------ */

/* A tar path is safe when it is relative and has no `..` component. */
static bool path_is_safe(const char *p)
{
    if (p == NULL || p[0] == '\0' || p[0] == '/')
        return false;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return false;
        s += n;
        while (*s == '/')
            s++;
    }
    return true;
}

mode_t kd_context_unpack_perm(mode_t type, mode_t perm)
{
    if (type == AE_IFDIR)
        return 0755;
    if (type == AE_IFLNK)
        return 0777;
    return (perm & 0111) != 0 ? 0755 : 0644;
}

int kd_context_unpack(const void *data, size_t len, const char *dest, uint64_t max_bytes, char *err)
{
    int rc = 0, r;
    struct archive *a = archive_read_new();
    struct archive *disk = archive_write_disk_new();
    struct archive_entry *ae = NULL;
    uint64_t total = 0, entries = 0;
    char *full = NULL, *rel = NULL;
    if (a == NULL || disk == NULL)
        kd_oom(4096);
    if (max_bytes == 0)
        max_bytes = KD_CONTEXT_MAX_BYTES;
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_none(a);
    archive_read_support_format_tar(a);
    /* Entry paths are checked above before `dest` is prepended (so dest may
     * be absolute); libarchive additionally refuses to write through a
     * symlink already on disk, which lexical checks cannot see. */
    archive_write_disk_set_options(disk, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                             ARCHIVE_EXTRACT_SECURE_NODOTDOT);
    if (archive_read_open_memory(a, data, len) != ARCHIVE_OK) {
        rc = kd_seterr(err, KD_ECORRUPT, "context archive: %s", archive_error_string(a));
        goto out;
    }
    while ((r = archive_read_next_header(a, &ae)) == ARCHIVE_OK) {
        /* a copy: setting the entry's pathname below frees the original */
        free(rel);
        rel = kd_xstrdup(archive_entry_pathname(ae) ? archive_entry_pathname(ae) : "");
        const char *p = rel;
        mode_t type = archive_entry_filetype(ae);
        if (++entries > KD_CONTEXT_MAX_ENTRIES) {
            rc = kd_seterr(err, KD_ETOOBIG, "context archive: more than %d entries",
                           KD_CONTEXT_MAX_ENTRIES);
            goto out;
        }
        if (p[0] == '\0' || !path_is_safe(p) || strlen(p) > KD_CONTEXT_MAX_PATH) {
            rc = kd_seterr(err, KD_EINVAL,
                           "context archive: entry %llu: unsafe path \"%s\" (absolute, with "
                           "\"..\" or too long)",
                           (unsigned long long)entries, p ? p : "");
            goto out;
        }
        if (archive_entry_hardlink(ae) != NULL ||
            (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)) {
            rc = kd_seterr(err, KD_EINVAL,
                           "context archive: %s: only files, directories and symlinks are "
                           "allowed",
                           p);
            goto out;
        }
        if (type == AE_IFLNK &&
            !link_stays_inside(p, archive_entry_symlink(ae) ? archive_entry_symlink(ae) : "")) {
            rc = kd_seterr(err, KD_EINVAL,
                           "context archive: %s: symlink points outside the context (-> %s)", p,
                           archive_entry_symlink(ae) ? archive_entry_symlink(ae) : "");
            goto out;
        }
        if (type == AE_IFREG) {
            la_int64_t sz = archive_entry_size(ae);
            if (sz < 0 || (uint64_t)sz > max_bytes - total) {
                rc = kd_seterr(err, KD_ETOOBIG,
                               "context archive: %s: unpacking it passes the %llu-byte limit", p,
                               (unsigned long long)max_bytes);
                goto out;
            }
            total += (uint64_t)sz;
        }
        free(full);
        full = kd_xasprintf("%s/%s", dest, p);
        archive_entry_set_pathname(ae, full);
        archive_entry_set_uid(ae, getuid());
        archive_entry_set_gid(ae, getgid());
        /* The modes kd_context_pack writes, whatever the archive says: no setuid, setgid or
         * sticky bit and nothing writable by others survives an unpack (the owner is the
         * unpacking user, so libarchive would otherwise restore a setuid bit). */
        archive_entry_set_perm(ae, kd_context_unpack_perm(type, archive_entry_perm(ae)));
        if (archive_write_header(disk, ae) != ARCHIVE_OK) {
            rc = kd_seterr(err, KD_EIO, "%s: %s", full, archive_error_string(disk));
            goto out;
        }
        if (type == AE_IFREG) {
            const void *buf;
            size_t n;
            la_int64_t off;
            uint64_t got = 0;
            while ((r = archive_read_data_block(a, &buf, &n, &off)) == ARCHIVE_OK) {
                got += n;
                if (got > (uint64_t)archive_entry_size(ae)) {
                    rc = kd_seterr(err, KD_ECORRUPT, "context archive: %s: more data than its size",
                                   p);
                    goto out;
                }
                if (archive_write_data_block(disk, buf, n, off) != ARCHIVE_OK) {
                    rc = kd_seterr(err, KD_EIO, "%s: %s", full, archive_error_string(disk));
                    goto out;
                }
            }
            if (r != ARCHIVE_EOF) {
                rc = kd_seterr(err, KD_ECORRUPT, "context archive: %s: %s", p,
                               archive_error_string(a));
                goto out;
            }
        }
        if (archive_write_finish_entry(disk) != ARCHIVE_OK) {
            rc = kd_seterr(err, KD_EIO, "%s: %s", full, archive_error_string(disk));
            goto out;
        }
    }
    if (r != ARCHIVE_EOF) {
        rc = kd_seterr(err, KD_ECORRUPT, "context archive: %s", archive_error_string(a));
        goto out;
    }
out:
    free(full);
    free(rel);
    archive_read_free(a);
    archive_write_free(disk);
    return rc;
}
