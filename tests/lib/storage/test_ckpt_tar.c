/*
 * A checkpoint as a tar stream (lib/storage/ckpt_tar.c): headers as a
 * table (ustar fields, the name/prefix split, pax records for long, non-
 * ASCII and huge members), read back by libarchive; then checkpoints on
 * shared_fs and on a real s3rver streamed in odd-sized reads, the length
 * known before the first byte, every member's bytes compared with the
 * files uploaded, and the failures: a file whose bytes changed in storage
 * (its last piece never handed out), a missing file, no manifest, and
 * ranged reads past the end.
 */
#include <locale.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>
#include <cmocka.h>

#include "core/log.h"
#include "s3srv.h"
#include "storage/checkpoint.h"
#include "storage/ckpt_tar.h"
#include "util.h"

static struct s3srv srv;
static char tmp[512];

static int setup(void **state)
{
    (void)state;
    kd_log_init("test_storage_ckpt_tar", KD_LOG_WARN, -1);
    setlocale(LC_CTYPE, "C.UTF-8"); /* libarchive converts pax paths (UTF-8) to the locale's */
    snprintf(tmp, sizeof(tmp), "%s/kd-tar-XXXXXX", getenv("TMPDIR") ?: "/tmp");
    if (mkdtemp(tmp) == NULL)
        return -1;
    if (s3srv_start(&srv, "ckpt") != 0) {
        fprintf(stderr, "FAILED: cannot start s3rver; the s3 tests need it (make deps)\n");
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    s3srv_stop(&srv);
    s3srv_rm_tree(tmp);
    return 0;
}

/* The field at off of a header block as a number (octal, NUL or space ended). */
static unsigned long long field(const unsigned char *b, int off, int len)
{
    char t[16];
    memcpy(t, b + off, (size_t)len);
    t[len] = '\0';
    return strtoull(t, NULL, 8);
}

static bool checksum_ok(const unsigned char *b)
{
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (i >= 148 && i < 156) ? ' ' : b[i];
    return sum == field(b, 148, 7);
}

/* One member read back by libarchive from a header (and size bytes of data) in memory. */
struct back {
    char path[KD_CKPT_TAR_PATH_MAX + 8];
    long long size;
    long long mtime;
    int type; /* AE_IFREG, AE_IFDIR */
};

static int read_back(const void *data, size_t len, struct back *out)
{
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    archive_read_support_format_tar(a);
    int rc = archive_read_open_memory(a, data, len);
    if (rc == ARCHIVE_OK)
        rc = archive_read_next_header(a, &e);
    if (rc == ARCHIVE_OK) {
        snprintf(out->path, sizeof(out->path), "%s", archive_entry_pathname(e));
        out->size = archive_entry_size(e);
        out->mtime = archive_entry_mtime(e);
        out->type = (int)archive_entry_filetype(e);
    }
    archive_read_free(a);
    return rc;
}

static void test_headers(void **state)
{
    (void)state;
    char longname[300], deep[400], huge_name[KD_CKPT_TAR_PATH_MAX + 2];
    memset(longname, 'n', 150);
    longname[150] = '\0'; /* 150 bytes, no '/': cannot split */
    snprintf(deep, sizeof(deep), "%.*s/%.*s", 120, longname, 90, longname); /* splits at 120 */
    memset(huge_name, 'h', KD_CKPT_TAR_PATH_MAX + 1);
    huge_name[KD_CKPT_TAR_PATH_MAX + 1] = '\0';
    const struct {
        const char *path;
        char type;
        uint64_t size;
        size_t len; /* bytes of headers written */
        bool pax;
        const char *want; /* the path libarchive reads back */
    } cases[] = {
        {"top/model.bin", KD_TAR_FILE, 1234, 512, false, "top/model.bin"},
        {"top", KD_TAR_DIR, 0, 512, false, "top/"},
        {deep, KD_TAR_FILE, 7, 512, false, deep},
        {longname, KD_TAR_FILE, 7, 1536, true, longname},
        {"top/ünïcödé.pt", KD_TAR_FILE, 5, 1536, true, "top/ünïcödé.pt"},
        {"top/big", KD_TAR_FILE, 9ull << 30, 1536, true, "top/big"},
        {"top/at-limit", KD_TAR_FILE, 077777777777ull, 512, false, "top/at-limit"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_buf b = KD_BUF_INIT(1 << 20);
        struct back bk;
        assert_int_equal(kd_tar_header(&b, cases[i].path, cases[i].type, cases[i].size, 1795000000,
                                       cases[i].type == KD_TAR_DIR ? 0755 : 0644),
                         0);
        assert_int_equal(b.len, cases[i].len);
        const unsigned char *u = (const unsigned char *)b.data + b.len - 512;
        assert_true(checksum_ok(u));
        assert_memory_equal(u + 257,
                            "ustar\0"
                            "00",
                            8);
        assert_int_equal(u[156], cases[i].type);
        assert_int_equal(field(u, 100, 7), cases[i].type == KD_TAR_DIR ? 0755 : 0644);
        assert_int_equal(field(u, 136, 11), 1795000000);
        assert_int_equal(field(u, 124, 11), cases[i].size > 077777777777ull ? 0 : cases[i].size);
        if (cases[i].pax) {
            assert_int_equal(b.data[156], 'x');
            assert_true(checksum_ok((const unsigned char *)b.data));
        }
        /* libarchive reads it back: a header alone, with zeros after it for the data */
        size_t with_data = b.len + (cases[i].size < 4096 ? (size_t)cases[i].size : 0) + 1024;
        char *whole = calloc(1, with_data + 512);
        memcpy(whole, b.data, b.len);
        assert_int_equal(read_back(whole, with_data + 512, &bk), ARCHIVE_OK);
        assert_string_equal(bk.path, cases[i].want);
        assert_int_equal(bk.size, (long long)cases[i].size);
        assert_int_equal(bk.mtime, 1795000000);
        assert_int_equal(bk.type, cases[i].type == KD_TAR_DIR ? AE_IFDIR : AE_IFREG);
        free(whole);
        kd_buf_free(&b);
    }
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    assert_int_equal(kd_tar_header(&b, huge_name, KD_TAR_FILE, 1, 0, 0644), KD_EINVAL);
    assert_int_equal(kd_tar_header(&b, "", KD_TAR_FILE, 1, 0, 0644), KD_EINVAL);
    assert_int_equal(kd_tar_header(&b, "/abs", KD_TAR_FILE, 1, 0, 0644), KD_EINVAL);
    assert_int_equal(b.len, 0);
    kd_buf_free(&b);
    assert_int_equal(kd_tar_padding(0), 0);
    assert_int_equal(kd_tar_padding(1), 511);
    assert_int_equal(kd_tar_padding(512), 0);
    assert_int_equal(kd_tar_padding(513), 511);
}

/* The files of the test checkpoint: sizes around block and piece boundaries, nesting, a long
 * and a non-ASCII path. */
static const struct {
    const char *rel;
    size_t size;
} files[] = {
    {"empty", 0},
    {"one", 1},
    {"block", 512},
    {"sub/dir/odd.bin", 3 * 512 + 7},
    {"weights/model.bin", KD_CKPT_TAR_PIECE + 12345},
    {"a-rather-long-directory-name-for-the-test/and-another-one-below-it/and-a-file-name-at-"
     "the-end.json",
     77},
    {"ünïcödé/état.pt", 300},
};
#define NFILES (sizeof(files) / sizeof(files[0]))

static void make_tree(const char *dir)
{
    for (size_t i = 0; i < NFILES; i++)
        assert_int_equal(write_pattern(dir, files[i].rel, files[i].size, (unsigned)i + 1), 0);
}

/* Read the whole archive in reads of `chunk` bytes: 0 and its bytes, or the error. */
static int read_all(struct kd_ckpt_tar *t, size_t chunk, struct kd_buf *out, char *err)
{
    char *buf = malloc(chunk);
    size_t n = 0;
    int rc;
    do {
        rc = kd_ckpt_tar_read(t, buf, chunk, &n, err);
        if (rc == 0 && n > 0)
            assert_int_equal(kd_buf_append(out, buf, n), 0);
    } while (rc == 0 && n > 0);
    free(buf);
    return rc;
}

/* Every member of the archive: the top directory, then each file in the manifest's order
 * (by path) with the bytes of dir's. */
static void check_archive(const struct kd_buf *tar, const char *top, const char *dir,
                          const struct kd_ckpt_manifest *m)
{
    bool seen[NFILES] = {false};
    struct archive *a = archive_read_new();
    struct archive_entry *e;
    char want[PATH_MAX], path[PATH_MAX];
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_memory(a, tar->data, tar->len), ARCHIVE_OK);
    assert_int_equal(archive_read_next_header(a, &e), ARCHIVE_OK);
    snprintf(want, sizeof(want), "%s/", top);
    assert_string_equal(archive_entry_pathname(e), want);
    assert_int_equal(archive_entry_filetype(e), AE_IFDIR);
    assert_int_equal(m->nfiles, NFILES);
    for (size_t k = 0; k < NFILES; k++) {
        size_t i = 0;
        while (i < NFILES && strcmp(files[i].rel, m->files[k].path) != 0)
            i++;
        assert_true(i < NFILES && !seen[i]);
        seen[i] = true;
        assert_int_equal(archive_read_next_header(a, &e), ARCHIVE_OK);
        snprintf(want, sizeof(want), "%s/%s", top, files[i].rel);
        assert_string_equal(archive_entry_pathname(e), want);
        assert_int_equal(archive_entry_size(e), (la_int64_t)files[i].size);
        assert_int_equal(archive_entry_filetype(e), AE_IFREG);
        assert_int_equal(archive_entry_perm(e), 0644);
        /* byte for byte against the uploaded file */
        snprintf(path, sizeof(path), "%s/%s", dir, files[i].rel);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char a1[65536], a2[65536];
        size_t got = 0;
        for (;;) {
            la_ssize_t n = archive_read_data(a, a1, sizeof(a1));
            assert_true(n >= 0);
            if (n == 0)
                break;
            assert_int_equal(fread(a2, 1, (size_t)n, f), (size_t)n);
            assert_memory_equal(a1, a2, (size_t)n);
            got += (size_t)n;
        }
        assert_int_equal(got, files[i].size);
        assert_int_equal(fgetc(f), EOF);
        fclose(f);
    }
    assert_int_equal(archive_read_next_header(a, &e), ARCHIVE_EOF);
    archive_read_free(a);
}

/* Upload the tree as checkpoint uuid, stream it as an archive in odd reads, compare. */
static void stream_and_check(struct kd_storage *st, const char *uuid, const char *dir)
{
    char err[KD_ERRLEN] = "";
    struct kd_ckpt_tar *t = NULL;
    struct kd_buf tar = KD_BUF_INIT(64u << 20);
    if (kd_ckpt_upload(st, uuid, dir, NULL, NULL, NULL, err) != 0)
        fail_msg("upload: %s", err);
    if (kd_ckpt_tar_open(st, uuid, "mnist-v2", &t, err) != 0)
        fail_msg("open: %s", err);
    uint64_t size = kd_ckpt_tar_size(t);
    assert_int_equal(kd_ckpt_tar_manifest(t)->nfiles, NFILES);
    if (read_all(t, 7777, &tar, err) != 0)
        fail_msg("read: %s", err);
    printf("checkpoint %s as a tar of %zu bytes (%llu announced)\n", uuid, tar.len,
           (unsigned long long)size);
    assert_int_equal(tar.len, size);
    assert_int_equal(tar.len % 512, 0);
    check_archive(&tar, "mnist-v2", dir, kd_ckpt_tar_manifest(t));
    /* the end of the archive again: nothing more */
    size_t n = 1;
    char c;
    assert_int_equal(kd_ckpt_tar_read(t, &c, 1, &n, err), 0);
    assert_int_equal(n, 0);
    kd_ckpt_tar_close(t);
    kd_buf_free(&tar);
}

/* A file of the manifest whose bytes changed in storage: the archive fails before the file's
 * last piece is handed out, naming it; a missing one likewise. */
static void broken(struct kd_storage *st, const char *uuid, const char *changed_key, bool missing)
{
    char err[KD_ERRLEN] = "";
    struct kd_ckpt_tar *t = NULL;
    struct kd_buf tar = KD_BUF_INIT(64u << 20);
    assert_int_equal(kd_ckpt_tar_open(st, uuid, "x", &t, err), 0);
    int rc = read_all(t, 65536, &tar, err);
    printf("broken checkpoint: %s after %zu of %llu bytes: %s\n", kd_err_name(rc), tar.len,
           (unsigned long long)kd_ckpt_tar_size(t), err);
    assert_int_equal(rc, KD_ECORRUPT);
    assert_non_null(strstr(err, changed_key));
    assert_non_null(strstr(err, missing ? "missing" : "sha256"));
    assert_true(tar.len < kd_ckpt_tar_size(t));
    /* and again: the same error, no more bytes */
    size_t n = 1;
    char c;
    assert_int_equal(kd_ckpt_tar_read(t, &c, 1, &n, err), KD_ECORRUPT);
    assert_int_equal(n, 0);
    kd_ckpt_tar_close(t);
    kd_buf_free(&tar);
}

static void test_shared_fs(void **state)
{
    (void)state;
    char dir[1024], root[1024], err[KD_ERRLEN] = "";
    snprintf(dir, sizeof(dir), "%s/src", tmp);
    snprintf(root, sizeof(root), "%s/fs", tmp);
    assert_int_equal(mkdir(root, 0755), 0);
    make_tree(dir);
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    kd_storage_config_init(&cfg);
    cfg.type = KD_STORAGE_SHARED_FS;
    kd_strlcpy(cfg.host_path, root, sizeof(cfg.host_path));
    assert_int_equal(kd_storage_open(&cfg, &st, err), 0);
    stream_and_check(st, "c0ffee00-0000-4000-8000-000000000001", dir);

    /* a range past the end, an absent object */
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    assert_int_equal(
        kd_storage_get_range(st, "c0ffee00-0000-4000-8000-000000000001/one", 0, 2, &b, err),
        KD_ECORRUPT);
    assert_int_equal(
        kd_storage_get_range(st, "c0ffee00-0000-4000-8000-000000000001/block", 500, 12, &b, err),
        0);
    assert_int_equal(b.len, 12);
    assert_int_equal(kd_storage_get_range(st, "nope/none", 0, 1, &b, err), KD_ENOTFOUND);
    kd_buf_free(&b);

    /* the big file changed in place (same size): its hash fails; a missing file */
    char p[PATH_MAX];
    assert_int_equal(
        kd_ckpt_upload(st, "c0ffee00-0000-4000-8000-000000000002", dir, NULL, NULL, NULL, err), 0);
    snprintf(p, sizeof(p), "%s/c0ffee00-0000-4000-8000-000000000002/weights/model.bin", root);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, KD_CKPT_TAR_PIECE + 100, SEEK_SET);
    fputc('!', f);
    fclose(f);
    broken(st, "c0ffee00-0000-4000-8000-000000000002", "weights/model.bin", false);
    snprintf(p, sizeof(p), "%s/c0ffee00-0000-4000-8000-000000000002/block", root);
    assert_int_equal(unlink(p), 0);
    broken(st, "c0ffee00-0000-4000-8000-000000000002", "block", true);

    /* no manifest: refused at open, naming it */
    struct kd_ckpt_tar *t = NULL;
    assert_int_equal(kd_ckpt_tar_open(st, "c0ffee00-0000-4000-8000-00000000dead", "x", &t, err),
                     KD_ENOTFOUND);
    assert_non_null(strstr(err, "no manifest"));
    assert_null(t);
    /* the top directory is checked */
    const char *bad_tops[] = {"", "/abs", "a/../b", ".", "trail/"};
    for (size_t i = 0; i < sizeof(bad_tops) / sizeof(bad_tops[0]); i++)
        assert_int_equal(
            kd_ckpt_tar_open(st, "c0ffee00-0000-4000-8000-000000000001", bad_tops[i], &t, err),
            KD_EINVAL);
    kd_storage_close(st);
}

static void test_s3(void **state)
{
    (void)state;
    char dir[1024], err[KD_ERRLEN] = "";
    snprintf(dir, sizeof(dir), "%s/src3", tmp);
    make_tree(dir);
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    s3srv_config(&srv, "tar", &cfg);
    assert_int_equal(kd_storage_open(&cfg, &st, err), 0);
    stream_and_check(st, "c0ffee00-0000-4000-8000-000000000003", dir);

    struct kd_buf b = KD_BUF_INIT(1 << 20);
    assert_int_equal(kd_storage_get_range(st,
                                          "c0ffee00-0000-4000-8000-000000000003/sub/dir/odd.bin",
                                          1000, 543, &b, err),
                     0);
    assert_int_equal(b.len, 543);
    assert_int_equal(
        kd_storage_get_range(st, "c0ffee00-0000-4000-8000-000000000003/one", 0, 1, &b, err), 0);
    assert_int_equal(b.len, 1);
    int rc = kd_storage_get_range(st, "c0ffee00-0000-4000-8000-000000000003/one", 5, 2, &b, err);
    printf("a range past the end on s3: %s: %s\n", kd_err_name(rc), err);
    assert_int_equal(rc, KD_ECORRUPT);
    assert_int_equal(kd_storage_get_range(st, "nope/none", 0, 1, &b, err), KD_ENOTFOUND);
    kd_buf_free(&b);

    /* an object of the manifest replaced by other bytes of the same size */
    assert_int_equal(
        kd_ckpt_upload(st, "c0ffee00-0000-4000-8000-000000000004", dir, NULL, NULL, NULL, err), 0);
    char other[512];
    memset(other, 'z', sizeof(other));
    assert_int_equal(
        kd_storage_put_mem(st, "c0ffee00-0000-4000-8000-000000000004/block", other, 512, err), 0);
    broken(st, "c0ffee00-0000-4000-8000-000000000004", "block", false);
    const char *gone = "c0ffee00-0000-4000-8000-000000000004/block";
    assert_int_equal(kd_storage_delete(st, &gone, 1, err), 0);
    broken(st, "c0ffee00-0000-4000-8000-000000000004", "block", true);
    kd_storage_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_shared_fs),
        cmocka_unit_test(test_s3),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
