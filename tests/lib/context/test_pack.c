/* Context packing: .detignore applied end to end, always-dropped Python
 * caches, determinism, the size limit and its advice, symlinks, and safe
 * unpacking of hostile archives. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <cmocka.h>

#include "context/context.h"

static char tmp[64];

static void put(const char *rel, const char *content)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp, rel);
    for (char *p = path + strlen(tmp) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_rf(const char *dir)
{
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmp, sizeof(tmp), "/tmp/kd-ctx-XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rm_rf(tmp);
    return 0;
}

/* The entry names of a packed context, one per line, with "@" for symlinks. */
static char *list_entries(const struct kd_context *c)
{
    static char out[8192];
    struct archive *a = archive_read_new();
    struct archive_entry *ae;
    out[0] = '\0';
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_memory(a, c->data, c->len), ARCHIVE_OK);
    while (archive_read_next_header(a, &ae) == ARCHIVE_OK) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof(out) - n, "%s%s%s %o %ld %ld\n", archive_entry_pathname(ae),
                 archive_entry_filetype(ae) == AE_IFLNK ? "@" : "",
                 archive_entry_filetype(ae) == AE_IFLNK ? archive_entry_symlink(ae) : "",
                 (unsigned)archive_entry_perm(ae), (long)archive_entry_mtime(ae),
                 (long)archive_entry_uid(ae));
    }
    archive_read_free(a);
    return out;
}

static void test_detignore_and_caches(void **state)
{
    (void)state;
    put("train.py", "print('hi')\n");
    put("model/net.py", "x = 1\n");
    put("model/net.pyc", "junk");
    put("model/__pycache__/net.cpython-311.pyc", "junk");
    put("data/big.csv", "1,2,3\n");
    put("runs/a.log", "log\n");
    put("runs/keep.log", "keep\n");
    put("notes.txt", "n\n");
    put(".detignore", "# data stays out\n/data/\nruns/*.log\n!runs/keep.log\nnotes.txt\n");
    struct kd_context c;
    char err[KD_ERRLEN] = "";
    int rc = kd_context_pack(tmp, 0, &c, err);
    if (rc != 0)
        fail_msg("pack: %s", err);
    const char *got = list_entries(&c);
    assert_string_equal(got, ".detignore 644 0 0\n"
                             "model/ 755 0 0\n"
                             "model/net.py 644 0 0\n"
                             "runs/ 755 0 0\n"
                             "runs/keep.log 644 0 0\n"
                             "train.py 644 0 0\n");
    assert_int_equal(c.files, 4);
    assert_int_equal(c.entries, 6);
    assert_int_equal(strlen(c.sha256), 64);
    kd_context_free(&c);
}

static void test_deterministic(void **state)
{
    (void)state;
    put("b.py", "b\n");
    put("a/x.py", "x\n");
    put("a/y.sh", "#!/bin/sh\n");
    char p[512];
    snprintf(p, sizeof(p), "%s/a/y.sh", tmp);
    chmod(p, 0700);
    struct kd_context c1, c2;
    char err[KD_ERRLEN];
    assert_int_equal(kd_context_pack(tmp, 0, &c1, err), 0);
    /* new mtimes and a rewrite with the same content: the same bytes */
    sleep(1);
    put("b.py", "b\n");
    snprintf(p, sizeof(p), "%s/a", tmp);
    chmod(p, 0700);
    assert_int_equal(kd_context_pack(tmp, 0, &c2, err), 0);
    assert_int_equal(c1.len, c2.len);
    assert_memory_equal(c1.data, c2.data, c1.len);
    assert_string_equal(c1.sha256, c2.sha256);
    assert_non_null(strstr(list_entries(&c1), "a/y.sh 755 0 0\n"));
    /* a content change changes the digest */
    put("b.py", "c\n");
    kd_context_free(&c2);
    assert_int_equal(kd_context_pack(tmp, 0, &c2, err), 0);
    assert_string_not_equal(c1.sha256, c2.sha256);
    kd_context_free(&c1);
    kd_context_free(&c2);
}

static void test_size_limit(void **state)
{
    (void)state;
    put("train.py", "x\n");
    put("weights/w.bin", "");
    char p[512];
    snprintf(p, sizeof(p), "%s/weights/w.bin", tmp);
    /* sparse: 96 MiB of size, no disk */
    assert_int_equal(truncate(p, 96ll << 20), 0);
    struct kd_context c;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_context_pack(tmp, 0, &c, err), KD_ETOOBIG);
    assert_null(c.data);
    assert_non_null(strstr(err, "is 96.0 MiB, over the 95.0 MiB limit"));
    assert_non_null(strstr(err, "weights/   (.detignore: /weights/)"));
    assert_non_null(strstr(err, "weights/w.bin   (.detignore: /weights/w.bin)"));
    /* ignoring it makes the context fit */
    put(".detignore", "/weights/\n");
    assert_int_equal(kd_context_pack(tmp, 0, &c, err), 0);
    assert_int_equal(c.files, 2);
    kd_context_free(&c);
    /* an explicit small cap */
    put("mid.txt", "0123456789");
    assert_int_equal(kd_context_pack(tmp, 8, &c, err), KD_ETOOBIG);
}

static void test_symlinks(void **state)
{
    (void)state;
    put("lib/util.py", "u\n");
    char p[512];
    snprintf(p, sizeof(p), "%s/util.py", tmp);
    assert_int_equal(symlink("lib/util.py", p), 0);
    struct kd_context c;
    char err[KD_ERRLEN];
    assert_int_equal(kd_context_pack(tmp, 0, &c, err), 0);
    assert_non_null(strstr(list_entries(&c), "util.py@lib/util.py 777"));
    kd_context_free(&c);
    snprintf(p, sizeof(p), "%s/lib/escape", tmp);
    assert_int_equal(symlink("../../etc/passwd", p), 0);
    assert_int_equal(kd_context_pack(tmp, 0, &c, err), KD_EINVAL);
    assert_non_null(strstr(err, "lib/escape: symlink points outside the context directory"));
    assert_non_null(strstr(err, "\"/lib/escape\""));
    unlink(p);
    assert_int_equal(symlink("/etc/passwd", p), 0);
    assert_int_equal(kd_context_pack(tmp, 0, &c, err), KD_EINVAL);
    unlink(p);
    /* a symlinked directory is stored as a link, never followed */
    assert_int_equal(symlink("..", p), 0);
    assert_int_equal(kd_context_pack(tmp, 0, &c, err), 0);
    kd_context_free(&c);
}

static void test_roundtrip(void **state)
{
    (void)state;
    put("train.py", "print(1)\n");
    put("pkg/mod.py", "y = 2\n");
    char p[512], q[700], dest[600];
    snprintf(p, sizeof(p), "%s/link.py", tmp);
    assert_int_equal(symlink("pkg/mod.py", p), 0);
    struct kd_context c;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_context_pack(tmp, 0, &c, err), 0);
    snprintf(dest, sizeof(dest), "%s/out", tmp);
    mkdir(dest, 0755);
    /* the "out" dir is inside tmp but was created after packing */
    int rc = kd_context_unpack(c.data, c.len, dest, 0, err);
    if (rc != 0)
        fail_msg("unpack: %s", err);
    snprintf(q, sizeof(q), "%s/pkg/mod.py", dest);
    FILE *f = fopen(q, "r");
    assert_non_null(f);
    char buf[64] = "";
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "y = 2\n");
    snprintf(q, sizeof(q), "%s/link.py", dest);
    ssize_t n = readlink(q, buf, sizeof(buf) - 1);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_string_equal(buf, "pkg/mod.py");
    /* a size cap smaller than the data */
    char dest2[600];
    snprintf(dest2, sizeof(dest2), "%s/out2", tmp);
    mkdir(dest2, 0755);
    assert_int_equal(kd_context_unpack(c.data, c.len, dest2, 5, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "passes the 5-byte limit"));
    kd_context_free(&c);
    assert_int_equal(kd_context_unpack("not a tarball at all", 20, dest2, 0, err), KD_ECORRUPT);
}

struct hostile {
    const char *path;
    int type;
    const char *link; /* symlink target or hardlink source */
    bool hard;
    const char *want;
};

static size_t make_tar(const struct hostile *h, unsigned char *buf, size_t cap)
{
    struct archive *a = archive_write_new();
    struct archive_entry *ae = archive_entry_new();
    size_t used = 0;
    archive_write_set_format_pax_restricted(a);
    assert_int_equal(archive_write_open_memory(a, buf, cap, &used), ARCHIVE_OK);
    /* a harmless entry first */
    archive_entry_set_pathname(ae, "ok.txt");
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0644);
    archive_entry_set_size(ae, 2);
    archive_write_header(a, ae);
    archive_write_data(a, "ok", 2);
    archive_entry_clear(ae);
    archive_entry_set_pathname(ae, h->path);
    archive_entry_set_filetype(ae, (mode_t)h->type);
    archive_entry_set_perm(ae, 0644);
    if (h->hard)
        archive_entry_set_hardlink(ae, h->link);
    else if (h->link)
        archive_entry_set_symlink(ae, h->link);
    archive_entry_set_size(ae, h->type == AE_IFREG && !h->hard ? 4 : 0);
    archive_write_header(a, ae);
    if (h->type == AE_IFREG && !h->hard)
        archive_write_data(a, "evil", 4);
    archive_write_close(a);
    archive_write_free(a);
    archive_entry_free(ae);
    return used;
}

static void test_hostile_archives(void **state)
{
    (void)state;
    static const struct hostile cases[] = {
        {"../evil.txt", AE_IFREG, NULL, false, "unsafe path \"../evil.txt\""},
        {"a/../../evil.txt", AE_IFREG, NULL, false, "unsafe path \"a/../../evil.txt\""},
        {"/tmp/evil.txt", AE_IFREG, NULL, false, "unsafe path \"/tmp/evil.txt\""},
        {"link", AE_IFLNK, "../../../etc", false, "link: symlink points outside the context"},
        {"abs", AE_IFLNK, "/etc/passwd", false, "abs: symlink points outside the context"},
        {"hard", AE_IFREG, "/etc/passwd", true, "hard: only files, directories and symlinks"},
        {"fifo", AE_IFIFO, NULL, false, "fifo: only files, directories and symlinks"},
    };
    static unsigned char buf[1 << 16];
    char dest[600], err[KD_ERRLEN];
    snprintf(dest, sizeof(dest), "%s/dest", tmp);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = make_tar(&cases[i], buf, sizeof(buf));
        mkdir(dest, 0755);
        err[0] = '\0';
        int rc = kd_context_unpack(buf, n, dest, 0, err);
        if (rc != KD_EINVAL || strstr(err, cases[i].want) == NULL)
            fail_msg("case %zu (%s): rc=%d err=%s", i, cases[i].path, rc, err);
        /* nothing landed outside dest */
        char p[700];
        snprintf(p, sizeof(p), "%s/evil.txt", tmp);
        assert_int_not_equal(access(p, F_OK), 0);
        rm_rf(dest);
    }
}

/* Modes of a crafted archive: setuid, setgid, sticky and world-writable bits do not survive. */
static void test_special_modes_stripped(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        int type;
        mode_t perm, want;
    } cases[] = {
        {"suid", AE_IFREG, 04755, 0755},         {"sgid", AE_IFREG, 02755, 0755},
        {"both", AE_IFREG, 06711, 0755},         {"sgid-data", AE_IFREG, 02644, 0644},
        {"open", AE_IFREG, 0666, 0644},          {"exec-other", AE_IFREG, 0001, 0755},
        {"sticky", AE_IFDIR, 01777, 0755},       {"sgid-dir", AE_IFDIR, 02775, 0755},
        {"sticky/inner", AE_IFREG, 07777, 0755},
    };
    static unsigned char buf[1 << 16];
    struct archive *a = archive_write_new();
    struct archive_entry *ae = archive_entry_new();
    size_t used = 0;
    archive_write_set_format_pax_restricted(a);
    assert_int_equal(archive_write_open_memory(a, buf, sizeof(buf), &used), ARCHIVE_OK);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        archive_entry_clear(ae);
        archive_entry_set_pathname(ae, cases[i].path);
        archive_entry_set_filetype(ae, (mode_t)cases[i].type);
        archive_entry_set_perm(ae, cases[i].perm);
        archive_entry_set_size(ae, cases[i].type == AE_IFREG ? 2 : 0);
        assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
        if (cases[i].type == AE_IFREG)
            assert_int_equal(archive_write_data(a, "#!", 2), 2);
    }
    archive_write_close(a);
    archive_write_free(a);
    archive_entry_free(ae);

    char dest[600], err[KD_ERRLEN] = "";
    snprintf(dest, sizeof(dest), "%s/dest", tmp);
    assert_int_equal(mkdir(dest, 0755), 0);
    mode_t old = umask(0);
    int rc = kd_context_unpack(buf, used, dest, 0, err);
    umask(old);
    if (rc != 0)
        fail_msg("unpack: %d %s", rc, err);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char p[700];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", dest, cases[i].path);
        assert_int_equal(lstat(p, &st), 0);
        if ((st.st_mode & 07777) != cases[i].want)
            fail_msg("%s: mode %04o in the archive, %04o on disk (want %04o)", cases[i].path,
                     (unsigned)cases[i].perm, (unsigned)(st.st_mode & 07777),
                     (unsigned)cases[i].want);
    }
    /* The rule, as a table. */
    assert_int_equal(kd_context_unpack_perm(AE_IFREG, 04755), 0755);
    assert_int_equal(kd_context_unpack_perm(AE_IFREG, 0600), 0644);
    assert_int_equal(kd_context_unpack_perm(AE_IFDIR, 0700), 0755);
    assert_int_equal(kd_context_unpack_perm(AE_IFLNK, 0700), 0777);
}

/* Inputs the fuzzer once crashed on: unpacking them must fail cleanly (run
 * under ASan in the sanitizer build). */
static void test_fuzz_regressions(void **state)
{
    (void)state;
    DIR *d = opendir("tests/data/context/unpack-regress");
    struct dirent *de;
    int n = 0;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[512], dest[600], err[KD_ERRLEN] = "";
        snprintf(path, sizeof(path), "tests/data/context/unpack-regress/%s", de->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static unsigned char buf[1 << 20];
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        snprintf(dest, sizeof(dest), "%s/r", tmp);
        mkdir(dest, 0755);
        int rc = kd_context_unpack(buf, len, dest, 1 << 20, err);
        assert_int_not_equal(rc, 0);
        assert_true(strlen(err) > 0);
        rm_rf(dest);
        n++;
    }
    closedir(d);
    assert_true(n >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_detignore_and_caches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deterministic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlinks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_archives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_special_modes_stripped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuzz_regressions, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
