/* kd_rm_tree and kd_empty_tree: nested trees, symlinks left pointing nowhere, missing paths. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/fs.h"

static void touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    close(fd);
}

static void test_tree(void **state)
{
    (void)state;
    char root[] = "/tmp/kd-fs-XXXXXX", keep[] = "/tmp/kd-fs-keep-XXXXXX", p[512];
    assert_non_null(mkdtemp(root));
    assert_non_null(mkdtemp(keep));
    snprintf(p, sizeof(p), "%s/kept", keep);
    touch(p);
    snprintf(p, sizeof(p), "%s/a", root);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/a/b", root);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/a/b/file with space", root);
    touch(p);
    snprintf(p, sizeof(p), "%s/a/link", root);
    assert_int_equal(symlink(keep, p), 0); /* a link to a directory: removed, not followed */
    assert_int_equal(kd_rm_tree(root), 0);
    struct stat sb;
    assert_int_equal(lstat(root, &sb), -1);
    snprintf(p, sizeof(p), "%s/kept", keep);
    assert_int_equal(lstat(p, &sb), 0); /* the link's target is untouched */
    assert_int_equal(kd_rm_tree(keep), 0);
    assert_int_equal(kd_rm_tree(keep), 0); /* missing: fine */
}

/* kd_empty_tree: everything below goes, the folder stays; a file or a link is not a folder. */
static void test_empty_tree(void **state)
{
    (void)state;
    char root[] = "/tmp/kd-fs-empty-XXXXXX", keep[] = "/tmp/kd-fs-ekeep-XXXXXX", p[512];
    struct stat before, sb;
    assert_non_null(mkdtemp(root));
    assert_non_null(mkdtemp(keep));
    assert_int_equal(lstat(root, &before), 0);
    snprintf(p, sizeof(p), "%s/kept", keep);
    touch(p);
    snprintf(p, sizeof(p), "%s/a/b", root);
    assert_int_equal(kd_mkdir_p(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/a/b/f", root);
    touch(p);
    snprintf(p, sizeof(p), "%s/g", root);
    touch(p);
    snprintf(p, sizeof(p), "%s/link", root);
    assert_int_equal(symlink(keep, p), 0);
    assert_int_equal(kd_empty_tree(p), -ENOTDIR); /* a link to a folder: not emptied */
    snprintf(p, sizeof(p), "%s/kept", keep);
    assert_int_equal(lstat(p, &sb), 0);
    snprintf(p, sizeof(p), "%s/g", root);
    assert_int_equal(kd_empty_tree(p), -ENOTDIR);
    assert_int_equal(lstat(p, &sb), 0); /* and a file is left alone */
    assert_int_equal(kd_empty_tree(root), 0);
    assert_int_equal(lstat(root, &sb), 0);
    assert_int_equal(sb.st_ino, before.st_ino); /* the same folder */
    assert_int_equal(rmdir(root), 0);           /* which is empty */
    snprintf(p, sizeof(p), "%s/kept", keep);
    assert_int_equal(lstat(p, &sb), 0); /* the link's target is untouched */
    assert_int_equal(kd_empty_tree(root), -ENOENT);
    assert_int_equal(kd_rm_tree(keep), 0);
}

/* mkdir -p: parents made, the last with its mode, existing dirs fine, a file in the way an error.
 */
static void test_mkdir_p(void **state)
{
    (void)state;
    char root[] = "/tmp/kd-mkdirp-XXXXXX", path[256], file[256];
    struct stat sb;
    assert_non_null(mkdtemp(root));
    mode_t old = umask(022);
    snprintf(path, sizeof(path), "%s/a/b/c", root);
    assert_int_equal(kd_mkdir_p(path, 0700), 0);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0700);
    snprintf(file, sizeof(file), "%s/a/b", root);
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0755);
    assert_int_equal(kd_mkdir_p(path, 0700), 0); /* again: fine */
    snprintf(file, sizeof(file), "%s/f", root);
    touch(file);
    snprintf(path, sizeof(path), "%s/f/x", root);
    assert_int_equal(kd_mkdir_p(path, 0755), -ENOTDIR);
    assert_int_equal(kd_mkdir_p("", 0755), -ENOENT);
    char longp[5000];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(kd_mkdir_p(longp, 0755), -ENAMETOOLONG);
    umask(old);
    assert_int_equal(kd_rm_tree(root), 0);
}

static void test_file(void **state)
{
    (void)state;
    char f[] = "/tmp/kd-fs-file-XXXXXX";
    int fd = mkstemp(f);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(kd_rm_tree(f), 0);
    assert_int_equal(access(f, F_OK), -1);
}

static void test_depth_cap(void **state)
{
    (void)state;
    char root[] = "/tmp/kd-fs-deep-XXXXXX", p[8192];
    assert_non_null(mkdtemp(root));
    size_t n = (size_t)snprintf(p, sizeof(p), "%s", root);
    for (int i = 0; i < 70; i++) {
        n += (size_t)snprintf(p + n, sizeof(p) - n, "/d");
        assert_int_equal(mkdir(p, 0755), 0);
    }
    assert_int_equal(kd_rm_tree(root), -ELOOP); /* too deep: reported, not followed forever */
    /* what is left can still be removed level by level from below */
    char sub[8192];
    snprintf(sub, sizeof(sub), "%s", p);
    for (int i = 0; i < 8; i++)
        *strrchr(sub, '/') = '\0';
    assert_int_equal(kd_rm_tree(sub), 0);
    assert_int_equal(kd_rm_tree(root), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree),      cmocka_unit_test(test_empty_tree),
        cmocka_unit_test(test_mkdir_p),   cmocka_unit_test(test_file),
        cmocka_unit_test(test_depth_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
