/*
 * A checkpoint as a tar stream (ckpt_tar.h). The tar headers are written
 * here rather than with libarchive: a download needs the archive's exact
 * length before its first byte (Content-Length, so that a cut-off transfer
 * is seen as one and a browser shows its progress), which libarchive
 * cannot tell without writing the whole archive; and POSIX ustar with pax
 * records for the few members that need them is a small, fixed format.
 */
#include "storage/ckpt_tar.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

#define BLOCK 512
/* ustar's numeric fields hold 11 octal digits: sizes and times below 8 GiB and year 2242. */
#define USTAR_MAX 077777777777ull
/* Room for one member's headers: a pax header and its records (a path of
 * KD_CKPT_TAR_PATH_MAX bytes, a size) and the ustar header. */
#define HEADERS_MAX (3 * BLOCK + KD_CKPT_TAR_PATH_MAX + 1024)

enum stage { ST_TOP, ST_HEAD, ST_DATA, ST_END, ST_DONE, ST_FAILED };

struct kd_ckpt_tar {
    struct kd_storage *st;
    struct kd_ckpt_manifest m;
    char top[256];
    uint64_t size;
    int64_t mtime;
    enum stage stage;
    size_t file;  /* the member being written */
    uint64_t off; /* bytes of its data read so far */
    EVP_MD_CTX *md;
    struct kd_buf pend; /* bytes made and not yet handed out, from pos */
    size_t pos;
    int rc; /* the error that stopped the archive */
    char err[KD_ERRLEN];
};

uint64_t kd_tar_padding(uint64_t size)
{
    return (BLOCK - size % BLOCK) % BLOCK;
}

/* A numeric field: digits octal digits, zero-padded, then a NUL. */
static void octal(unsigned char *f, int digits, uint64_t v)
{
    char tmp[32];
    snprintf(tmp, sizeof(tmp), "%0*llo", digits, (unsigned long long)v);
    memcpy(f, tmp, (size_t)digits);
    f[digits] = '\0';
}

static bool ascii(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

/* Where path splits into ustar's prefix and name fields ('/' at *cut), false when it cannot. */
static bool ustar_split(const char *path, size_t *cut)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < n && i <= 155; i++)
        if (path[i] == '/' && n - i - 1 <= 100 && n - i - 1 > 0) {
            *cut = i;
            return true;
        }
    return false;
}

/* One 512-byte ustar header block. name and prefix are cut to their fields. */
static void ustar_block(unsigned char *b, const char *prefix, size_t plen, const char *name,
                        size_t nlen, char type, uint64_t size, int64_t mtime, unsigned mode)
{
    memset(b, 0, BLOCK);
    memcpy(b, name, nlen > 100 ? 100 : nlen);
    octal(b + 100, 7, mode & 07777);
    octal(b + 108, 7, 0);
    octal(b + 116, 7, 0);
    octal(b + 124, 11, size);
    octal(b + 136, 11, mtime < 0 ? 0 : (uint64_t)mtime > USTAR_MAX ? USTAR_MAX : (uint64_t)mtime);
    b[156] = (unsigned char)type;
    memcpy(b + 257, "ustar", 6);
    memcpy(b + 263, "00", 2);
    memcpy(b + 345, prefix, plen > 155 ? 155 : plen);
    memset(b + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < BLOCK; i++)
        sum += b[i];
    char ck[8];
    snprintf(ck, sizeof(ck), "%06o", sum & 0777777u);
    memcpy(b + 148, ck, 6);
    b[154] = '\0';
    b[155] = ' ';
}

/* A pax record "LEN key=value\n", LEN counting the whole record, its own digits included. */
static int pax_record(struct kd_buf *b, const char *key, const char *value)
{
    size_t base = 1 + strlen(key) + 1 + strlen(value) + 1, len = base;
    for (;;) {
        char digits[24];
        size_t want = base + (size_t)snprintf(digits, sizeof(digits), "%zu", len);
        if (want == len)
            break;
        len = want;
    }
    return kd_buf_printf(b, "%zu %s=%s\n", len, key, value);
}

int kd_tar_header(struct kd_buf *out, const char *path, char type, uint64_t size, int64_t mtime,
                  unsigned mode)
{
    struct kd_buf rec = KD_BUF_INIT(KD_CKPT_TAR_PATH_MAX + 256);
    unsigned char blk[BLOCK];
    char full[KD_CKPT_TAR_PATH_MAX + 2], sizebuf[24];
    size_t start = out->len, cut = 0, plen = 0;
    int rc = 0;
    if (path == NULL || path[0] == '\0' || path[0] == '/' || strlen(path) > KD_CKPT_TAR_PATH_MAX) {
        rc = KD_EINVAL;
        goto out;
    }
    /* A directory's name ends with '/', as tar writes it. */
    snprintf(full, sizeof(full), "%s%s", path, type == KD_TAR_DIR ? "/" : "");
    const char *name = full;
    size_t nlen = strlen(full);
    bool fits = ascii(full) && (nlen <= 100 || ustar_split(full, &cut));
    if (fits && nlen > 100) {
        plen = cut;
        name = full + cut + 1;
        nlen -= cut + 1;
    }
    if (!fits)
        rc = pax_record(&rec, "path", full);
    if (rc == 0 && size > USTAR_MAX) {
        snprintf(sizebuf, sizeof(sizebuf), "%llu", (unsigned long long)size);
        rc = pax_record(&rec, "size", sizebuf);
    }
    if (rc != 0)
        goto out;
    if (rec.len > 0) {
        /* The extended header's own name only matters to readers without pax: keep it
         * short and ASCII, after the member's last path element. */
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        char xname[101];
        size_t k = (size_t)snprintf(xname, sizeof(xname), "PaxHeaders/%.88s", base);
        for (size_t i = 0; i < k; i++)
            if ((unsigned char)xname[i] < 0x20 || (unsigned char)xname[i] >= 0x7f)
                xname[i] = '_';
        ustar_block(blk, "", 0, xname, k, 'x', rec.len, mtime, 0644);
        static const char zeros[BLOCK];
        if ((rc = kd_buf_append(out, blk, BLOCK)) != 0 ||
            (rc = kd_buf_append(out, rec.data, rec.len)) != 0 ||
            (rc = kd_buf_append(out, zeros, (size_t)kd_tar_padding(rec.len))) != 0)
            goto out;
    }
    if (!fits) {
        /* What readers without pax see: the path cut to the name field, made ASCII. */
        for (size_t i = 0; i < nlen; i++)
            if ((unsigned char)full[i] < 0x20 || (unsigned char)full[i] >= 0x7f)
                full[i] = '_';
    }
    ustar_block(blk, full, plen, name, nlen, type, size > USTAR_MAX ? 0 : size, mtime, mode);
    rc = kd_buf_append(out, blk, BLOCK);
out:
    if (rc != 0 && out->len > start)
        out->len = start; /* unchanged: drop what this call appended */
    if (out->data != NULL)
        out->data[out->len] = '\0';
    kd_buf_free(&rec);
    return rc;
}

/* "top/path" of member i into out (len bytes). */
static int member_path(const struct kd_ckpt_tar *t, size_t i, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/%s", t->top, t->m.files[i].path);
    return n < 0 || (size_t)n >= len ? KD_ETOOBIG : 0;
}

static bool top_ok(const char *top)
{
    size_t n = strlen(top);
    if (n == 0 || n > 255 || top[0] == '/' || top[n - 1] == '/')
        return false;
    for (const char *p = top; *p != '\0';) {
        size_t k = strcspn(p, "/");
        if (k == 0 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += k;
        if (*p == '/')
            p++;
    }
    return true;
}

int kd_ckpt_tar_open(struct kd_storage *st, const char *uuid, const char *top,
                     struct kd_ckpt_tar **out, char *err)
{
    struct kd_ckpt_tar *t = NULL;
    struct kd_buf hb = KD_BUF_INIT(HEADERS_MAX);
    char path[KD_CKPT_TAR_PATH_MAX + 1];
    int rc = 0;
    *out = NULL;
    if (top == NULL || !top_ok(top)) {
        rc = kd_seterr(err, KD_EINVAL, "checkpoint %s: %s is not a relative path for the archive",
                       uuid, top != NULL ? top : "(null)");
        goto out;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL || (t->md = EVP_MD_CTX_new()) == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "checkpoint %s: out of memory", uuid);
        goto out;
    }
    t->st = st;
    kd_strlcpy(t->top, top, sizeof(t->top));
    kd_buf_init(&t->pend, KD_CKPT_TAR_PIECE + HEADERS_MAX + BLOCK);
    if ((rc = kd_ckpt_read_manifest(st, uuid, &t->m, err)) != 0)
        goto out;
    int64_t ms = 0;
    if (t->m.created[0] != '\0' && kd_time_parse_rfc3339(t->m.created, &ms) == 0 && ms > 0)
        t->mtime = ms / 1000;
    /* The length: every header as it will be written, the data and its padding, the end. */
    if ((rc = kd_tar_header(&hb, top, KD_TAR_DIR, 0, t->mtime, 0755)) != 0)
        goto bad_path;
    t->size = hb.len;
    for (size_t i = 0; i < t->m.nfiles; i++) {
        kd_buf_reset(&hb);
        if ((rc = member_path(t, i, path, sizeof(path))) != 0 ||
            (rc = kd_tar_header(&hb, path, KD_TAR_FILE, t->m.files[i].size, t->mtime, 0644)) != 0) {
            rc =
                kd_seterr(err, KD_EINVAL, "checkpoint %s: %s: the path is too long for the archive",
                          uuid, t->m.files[i].path);
            goto out;
        }
        t->size += hb.len + t->m.files[i].size + kd_tar_padding(t->m.files[i].size);
    }
    t->size += 2 * BLOCK;
    *out = t;
    t = NULL;
    goto out;
bad_path:
    rc = kd_seterr(err, KD_EINVAL, "checkpoint %s: %s cannot head the archive", uuid, top);
out:
    kd_buf_free(&hb);
    kd_ckpt_tar_close(t);
    return rc;
}

uint64_t kd_ckpt_tar_size(const struct kd_ckpt_tar *t)
{
    return t->size;
}

const struct kd_ckpt_manifest *kd_ckpt_tar_manifest(const struct kd_ckpt_tar *t)
{
    return &t->m;
}

static int fail(struct kd_ckpt_tar *t, int rc, const char *msg)
{
    t->stage = ST_FAILED;
    t->rc = rc;
    kd_strlcpy(t->err, msg, sizeof(t->err));
    kd_buf_reset(&t->pend);
    t->pos = 0;
    return rc;
}

/* The file's whole data has passed: its sha256 against the manifest's. */
static bool hash_ok(struct kd_ckpt_tar *t, const struct kd_ckpt_file *f)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char hex[65];
    EVP_DigestFinal_ex(t->md, md, &n);
    for (unsigned i = 0; i < n && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[64] = '\0';
    return strcmp(hex, f->sha256) == 0;
}

/* The next piece of member t->file's data into t->pend (empty unless it holds the member's
 * header: then the file is empty and there is nothing to read); after its last piece, the
 * check of its sha256 and the padding. */
static int data(struct kd_ckpt_tar *t)
{
    static const char zeros[BLOCK];
    char key[KD_STORAGE_KEYLEN], e[KD_ERRLEN] = "", msg[2 * KD_ERRLEN + 512];
    const struct kd_ckpt_file *f = &t->m.files[t->file];
    uint64_t left = f->size - t->off;
    size_t want = left < KD_CKPT_TAR_PIECE ? (size_t)left : KD_CKPT_TAR_PIECE;
    int rc;
    if (want > 0) {
        snprintf(key, sizeof(key), "%s/%s", t->m.uuid, f->path);
        if ((rc = kd_storage_get_range(t->st, key, t->off, want, &t->pend, e)) != 0) {
            snprintf(msg, sizeof(msg), "checkpoint %s: %s%s: %s", t->m.uuid, f->path,
                     rc == KD_ENOTFOUND ? " (in its manifest) is missing from storage" : "",
                     e[0] ? e : kd_strerror(rc));
            return fail(t, rc == KD_ENOTFOUND ? KD_ECORRUPT : rc, msg);
        }
        EVP_DigestUpdate(t->md, t->pend.data, want);
        t->off += want;
    }
    if (t->off < f->size)
        return 0;
    if (!hash_ok(t, f)) {
        snprintf(msg, sizeof(msg),
                 "checkpoint %s: %s: its bytes in storage do not have the manifest's sha256 %s",
                 t->m.uuid, f->path, f->sha256);
        return fail(t, KD_ECORRUPT, msg);
    }
    if ((rc = kd_buf_append(&t->pend, zeros, (size_t)kd_tar_padding(f->size))) != 0)
        return fail(t, rc, "out of memory");
    t->file++;
    t->stage = ST_HEAD;
    return 0;
}

/* Make the next bytes of the archive into t->pend (empty on entry). */
static int produce(struct kd_ckpt_tar *t)
{
    static const char zeros[2 * BLOCK];
    char path[KD_CKPT_TAR_PATH_MAX + 1];
    switch (t->stage) {
    case ST_TOP:
        if (kd_tar_header(&t->pend, t->top, KD_TAR_DIR, 0, t->mtime, 0755) != 0)
            return fail(t, KD_ENOMEM, "out of memory");
        t->stage = ST_HEAD;
        t->file = 0;
        return 0;
    case ST_HEAD:
        if (t->file == t->m.nfiles) {
            t->stage = ST_END;
            return 0;
        }
        if (member_path(t, t->file, path, sizeof(path)) != 0 ||
            kd_tar_header(&t->pend, path, KD_TAR_FILE, t->m.files[t->file].size, t->mtime, 0644) !=
                0)
            return fail(t, KD_EINVAL, "a path too long for the archive");
        EVP_DigestInit_ex(t->md, EVP_sha256(), NULL);
        t->off = 0;
        t->stage = ST_DATA;
        /* an empty file has no data to read, only its hash to check */
        return t->m.files[t->file].size == 0 ? data(t) : 0;
    case ST_DATA: return data(t);
    case ST_END:
        if (kd_buf_append(&t->pend, zeros, sizeof(zeros)) != 0)
            return fail(t, KD_ENOMEM, "out of memory");
        t->stage = ST_DONE;
        return 0;
    case ST_DONE: return 0;
    case ST_FAILED: return t->rc;
    }
    return 0;
}

int kd_ckpt_tar_read(struct kd_ckpt_tar *t, void *buf, size_t max, size_t *n, char *err)
{
    *n = 0;
    while (t->pos == t->pend.len) {
        if (t->stage == ST_DONE)
            return 0;
        if (t->stage == ST_FAILED)
            return kd_seterr(err, t->rc, "%s", t->err);
        kd_buf_reset(&t->pend);
        t->pos = 0;
        if (produce(t) != 0)
            return kd_seterr(err, t->rc, "%s", t->err);
    }
    size_t k = t->pend.len - t->pos < max ? t->pend.len - t->pos : max;
    memcpy(buf, t->pend.data + t->pos, k);
    t->pos += k;
    *n = k;
    return 0;
}

void kd_ckpt_tar_close(struct kd_ckpt_tar *t)
{
    if (t == NULL)
        return;
    kd_ckpt_manifest_free(&t->m);
    EVP_MD_CTX_free(t->md);
    kd_buf_free(&t->pend);
    free(t);
}
