/*
 * kdet-launch's context step: a packed archive is verified, unpacked into
 * a fresh directory that becomes the working directory, and removed at the
 * end; a wrong digest, a missing file, an archive over the cap and an
 * unsupported URL scheme are refused with the variable named. An s3://
 * archive is fetched from a real s3rver with the endpoint of
 * KDET_CHECKPOINT_STORAGE.
 */
#include <errno.h>
#include <limits.h>
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
#include <dirent.h>

#include "../../launcher/context.h"
#include "../lib/storage/s3srv.h"
#include "context/context.h"
#include "core/fs.h"

static const char *const vars[] = {"KDET_CONTEXT_ARCHIVE",
                                   "KDET_CONTEXT_SHA256",
                                   "KDET_CONTEXT_URL",
                                   "KDET_CONTEXT_DIR",
                                   "KDET_KEEP_CONTEXT",
                                   "KDET_CHECKPOINT_STORAGE",
                                   NULL};

struct fx {
    char root[64];     /* a private temporary tree */
    char archive[128]; /* root/ctx.tar.gz: src/ packed */
    char sha[65];
    char home[PATH_MAX]; /* the cwd to return to */
};

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char err[KD_ERRLEN] = "", path[256];
    struct kd_context c = {0};
    assert_non_null(getcwd(f->home, sizeof(f->home)));
    snprintf(f->root, sizeof(f->root), "/tmp/kd-test-ctx-XXXXXX");
    assert_non_null(mkdtemp(f->root));
    snprintf(path, sizeof(path), "%s/src", f->root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/src/train.sh", f->root);
    write_file(path, "#!/bin/sh\necho hello\n", 0755);
    snprintf(path, sizeof(path), "%s/src/data", f->root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/src/data/x.txt", f->root);
    char big[4097];
    memset(big, 'a', 4096);
    big[4096] = '\0';
    write_file(path, big, 0644); /* compresses well: the archive is smaller than its files */
    snprintf(path, sizeof(path), "%s/src", f->root);
    if (kd_context_pack(path, 0, &c, err) != 0)
        fail_msg("pack: %s", err);
    snprintf(f->archive, sizeof(f->archive), "%s/ctx.tar.gz", f->root);
    FILE *o = fopen(f->archive, "w");
    assert_non_null(o);
    assert_int_equal(fwrite(c.data, 1, c.len, o), c.len);
    assert_int_equal(fclose(o), 0);
    memcpy(f->sha, c.sha256, sizeof(f->sha));
    kd_context_free(&c);
    for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
    setenv("TMPDIR", f->root, 1);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    assert_int_equal(chdir(f->home), 0);
    assert_int_equal(kd_rm_tree(f->root), 0);
    free(f);
    return 0;
}

static void test_good(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "", cwd[PATH_MAX];
    struct stat st;
    setenv("KDET_CONTEXT_ARCHIVE", f->archive, 1);
    setenv("KDET_CONTEXT_SHA256", f->sha, 1);
    if (kd_launch_context_prepare(&ctx, 0, err) != 0)
        fail_msg("prepare: %s", err);
    assert_non_null(ctx.dir);
    assert_true(ctx.remove && ctx.unpacked);
    assert_int_equal(strncmp(ctx.dir, f->root, strlen(f->root)), 0);
    assert_non_null(strstr(ctx.dir, "/kdet-context-"));
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_string_equal(cwd, ctx.dir);
    assert_string_equal(getenv("KDET_CONTEXT_DIR"), ctx.dir);
    assert_int_equal(stat("train.sh", &st), 0);
    assert_true((st.st_mode & 0111) != 0);
    assert_int_equal(stat("data/x.txt", &st), 0);
    assert_int_equal(st.st_size, 4096);
    char *dir = strdup(ctx.dir);
    kd_launch_context_done(&ctx);
    assert_null(ctx.dir);
    assert_int_equal(stat(dir, &st), -1); /* removed at the end */
    free(dir);
}

/* A crafted tar.gz with a setuid root-style program and a setgid, sticky folder: the pod's
 * working directory gets plain modes (0755), never a setuid or setgid bit. */
static void test_special_modes(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "", path[256];
    struct stat st;
    static unsigned char buf[1 << 16];
    size_t used = 0;
    struct archive *a = archive_write_new();
    struct archive_entry *ae = archive_entry_new();
    archive_write_add_filter_gzip(a);
    archive_write_set_format_pax_restricted(a);
    assert_int_equal(archive_write_open_memory(a, buf, sizeof(buf), &used), ARCHIVE_OK);
    archive_entry_set_pathname(ae, "shared");
    archive_entry_set_filetype(ae, AE_IFDIR);
    archive_entry_set_perm(ae, 03777);
    assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
    archive_entry_clear(ae);
    archive_entry_set_pathname(ae, "shared/rootshell");
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 06755);
    archive_entry_set_size(ae, 10);
    assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
    assert_int_equal(archive_write_data(a, "#!/bin/sh\n", 10), 10);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    archive_entry_free(ae);
    snprintf(path, sizeof(path), "%s/suid.tar.gz", f->root);
    FILE *o = fopen(path, "w");
    assert_non_null(o);
    assert_int_equal(fwrite(buf, 1, used, o), used);
    assert_int_equal(fclose(o), 0);
    setenv("KDET_CONTEXT_ARCHIVE", path, 1);
    mode_t old = umask(0);
    int rc = kd_launch_context_prepare(&ctx, 0, err);
    umask(old);
    if (rc != 0)
        fail_msg("prepare: %s", err);
    assert_int_equal(stat("shared/rootshell", &st), 0);
    if ((st.st_mode & 07777) != 0755)
        fail_msg("shared/rootshell: mode %04o (want 0755)", (unsigned)(st.st_mode & 07777));
    assert_int_equal(stat("shared", &st), 0);
    if ((st.st_mode & 07777) != 0755)
        fail_msg("shared: mode %04o (want 0755)", (unsigned)(st.st_mode & 07777));
    kd_launch_context_done(&ctx);
}

static void test_keep(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "";
    struct stat st;
    setenv("KDET_CONTEXT_ARCHIVE", f->archive, 1);
    setenv("KDET_KEEP_CONTEXT", "1", 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), 0);
    char *dir = strdup(ctx.dir);
    kd_launch_context_done(&ctx);
    assert_int_equal(stat(dir, &st), 0);
    free(dir);
}

/* KDET_CONTEXT_DIR set with an archive: unpacked there and kept. */
static void test_into_dir(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "", dir[128];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s/mine", f->root);
    setenv("KDET_CONTEXT_ARCHIVE", f->archive, 1);
    setenv("KDET_CONTEXT_DIR", dir, 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), 0);
    assert_string_equal(ctx.dir, dir);
    assert_false(ctx.remove);
    kd_launch_context_done(&ctx);
    assert_int_equal(chdir(f->home), 0);
    snprintf(dir, sizeof(dir), "%s/mine/train.sh", f->root);
    assert_int_equal(stat(dir, &st), 0);
}

static void test_bad_digest(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "", cwd[PATH_MAX];
    setenv("KDET_CONTEXT_ARCHIVE", f->archive, 1);
    setenv("KDET_CONTEXT_SHA256",
           "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), KD_ECORRUPT);
    assert_null(ctx.dir);
    assert_non_null(strstr(err, "sha256 mismatch"));
    assert_non_null(strstr(err, "expected 9f86d081884c"));
    char got[32];
    snprintf(got, sizeof(got), "got %.12s", f->sha);
    assert_non_null(strstr(err, got));
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_string_equal(cwd, f->home); /* nothing entered */
}

static void test_missing(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "", path[160];
    snprintf(path, sizeof(path), "%s/nope.tar.gz", f->root);
    setenv("KDET_CONTEXT_ARCHIVE", path, 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), -ENOENT);
    assert_non_null(strstr(err, "KDET_CONTEXT_ARCHIVE"));
    assert_non_null(strstr(err, "nope.tar.gz"));
}

/* Over the cap: the archive itself, then its unpacked files. */
static void test_oversize(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "";
    struct stat st;
    assert_int_equal(stat(f->archive, &st), 0);
    setenv("KDET_CONTEXT_ARCHIVE", f->archive, 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, (uint64_t)st.st_size - 1, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "more than the limit"));
    assert_null(ctx.dir);
    /* the archive fits, its 4 KiB of files do not */
    assert_true(st.st_size < 1024);
    assert_int_equal(kd_launch_context_prepare(&ctx, (uint64_t)st.st_size, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "cannot unpack"));
    assert_null(ctx.dir);
    /* and the half-made directory is gone */
    DIR *d = opendir(f->root);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        assert_null(strstr(de->d_name, "kdet-context-"));
    closedir(d);
}

static void test_url(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "", url[200];
    setenv("KDET_CONTEXT_URL", "https://host/ctx.tar.gz?token=secret", 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), KD_ENOTSUP);
    assert_non_null(strstr(err, "scheme https://"));
    assert_null(strstr(err, "secret"));
    snprintf(url, sizeof(url), "file://%s", f->archive);
    setenv("KDET_CONTEXT_URL", url, 1);
    setenv("KDET_CONTEXT_SHA256", f->sha, 1);
    if (kd_launch_context_prepare(&ctx, 0, err) != 0)
        fail_msg("prepare: %s", err);
    assert_true(ctx.unpacked);
    kd_launch_context_done(&ctx);
}

/*
 * s3://: fetched with the endpoint from KDET_CHECKPOINT_STORAGE and the
 * AWS_* credentials, verified and unpacked; a wrong digest, a missing
 * object and an object over the cap are refused naming the URL.
 */
static void test_s3(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    struct s3srv srv;
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN] = "", url[300], js[300];
    FILE *in;
    unsigned char data[65536];
    size_t n;
    if (s3srv_start(&srv, "ctxb") != 0)
        fail_msg("cannot start s3rver (make deps)");
    in = fopen(f->archive, "r");
    assert_non_null(in);
    n = fread(data, 1, sizeof(data), in);
    fclose(in);
    assert_true(n > 0 && n < sizeof(data));
    s3srv_config(&srv, "team/kdet-contexts", &cfg);
    if (kd_storage_open(&cfg, &st, err) != 0 || kd_storage_put_mem(st, "c.tar.gz", data, n, err))
        fail_msg("put: %s", err);
    kd_storage_close(st);
    /* the storage's prefix is not used: the key is the URL's path */
    snprintf(js, sizeof(js),
             "{\"type\":\"s3\",\"bucket\":\"other\",\"prefix\":\"elsewhere\","
             "\"endpoint_url\":\"http://127.0.0.1:%d\"}",
             srv.port);
    setenv("KDET_CHECKPOINT_STORAGE", js, 1);
    setenv("KDET_CONTEXT_URL", "s3://ctxb/team/kdet-contexts/c.tar.gz", 1);
    setenv("KDET_CONTEXT_SHA256", f->sha, 1);
    if (kd_launch_context_prepare(&ctx, 0, err) != 0)
        fail_msg("prepare: %s", err);
    assert_true(ctx.unpacked);
    assert_int_equal(ctx.bytes, n);
    assert_int_equal(access("train.sh", X_OK), 0);
    kd_launch_context_done(&ctx);
    assert_int_equal(chdir(f->home), 0);
    /* over the cap */
    assert_int_equal(kd_launch_context_prepare(&ctx, (uint64_t)n - 1, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "more than the limit"));
    /* a wrong digest */
    setenv("KDET_CONTEXT_SHA256",
           "0000000000000000000000000000000000000000000000000000000000000000", 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "sha256 mismatch"));
    /* a missing object */
    snprintf(url, sizeof(url), "s3://ctxb/team/kdet-contexts/absent.tar.gz");
    setenv("KDET_CONTEXT_URL", url, 1);
    assert_int_not_equal(kd_launch_context_prepare(&ctx, 0, err), 0);
    assert_non_null(strstr(err, "absent.tar.gz"));
    assert_null(strstr(err, "S3RVER"));
    /* no key */
    setenv("KDET_CONTEXT_URL", "s3://ctxb", 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), KD_EINVAL);
    assert_non_null(strstr(err, "s3://BUCKET/KEY"));
    assert_null(ctx.dir);
    s3srv_stop(&srv);
}

/* KDET_CONTEXT_DIR alone: entered as it is; a missing one is an error. */
static void test_path(void **state)
{
    struct fx *f = *state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "", dir[128], cwd[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/src", f->root);
    setenv("KDET_CONTEXT_DIR", dir, 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), 0);
    assert_false(ctx.remove || ctx.unpacked);
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_string_equal(cwd, dir);
    kd_launch_context_done(&ctx);
    snprintf(dir, sizeof(dir), "%s/absent", f->root);
    setenv("KDET_CONTEXT_DIR", dir, 1);
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), -ENOENT);
    assert_non_null(strstr(err, "KDET_CONTEXT_DIR"));
}

static void test_none(void **state)
{
    (void)state;
    struct kd_launch_context ctx;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_launch_context_prepare(&ctx, 0, err), 0);
    assert_null(ctx.dir);
    kd_launch_context_done(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_good, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_special_modes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_into_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_digest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_url, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_none, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
