/*
 * The big cases against a real s3rver (tag slow): 10,000 small files and a
 * sparse file of several GiB, uploaded, listed, restored and verified;
 * and the same sparse file on shared_fs, where it stays sparse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/time.h"
#include "s3srv.h"
#include "storage/checkpoint.h"
#include "util.h"

#define SPARSE_SIZE (3ll << 30)

static struct s3srv srv;

static int setup(void **state)
{
    (void)state;
    kd_log_init("test_storage_slow", KD_LOG_WARN, -1);
    return s3srv_start(&srv, "big") == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    s3srv_stop(&srv);
    return 0;
}

static struct kd_storage *open_s3(void)
{
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN];
    s3srv_config(&srv, "slow", &cfg);
    if (kd_storage_open(&cfg, &st, err) != 0)
        fail_msg("open: %s", err);
    return st;
}

static void test_ten_thousand_files(void **state)
{
    (void)state;
    struct kd_storage *st = open_s3();
    char src[PATH_MAX], dst[PATH_MAX], err[KD_ERRLEN];
    struct kd_ckpt_info *infos = NULL;
    size_t n = 0;
    int64_t t0;

    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    for (int i = 0; i < 10000; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "d%02d/f%05d", i % 100, i);
        assert_int_equal(write_pattern(src, rel, (size_t)(i % 5) * 1024, (unsigned)i), 0);
    }
    t0 = kd_mono_ms();
    assert_int_equal(kd_ckpt_upload(st, "ten-k", src, NULL, NULL, NULL, err), 0);
    fprintf(stderr, "10,000 files up: %lld ms\n", (long long)(kd_mono_ms() - t0));
    if (kd_ckpt_list(st, 0, &infos, &n, err) != 0)
        fail_msg("list: %s", err);
    assert_int_equal(n, 1);
    assert_int_equal(infos[0].objects, 10001); /* and the list paginated past 1000 */
    kd_ckpt_list_free(infos, n);
    t0 = kd_mono_ms();
    assert_int_equal(kd_ckpt_download(st, "ten-k", dst, NULL, NULL, err), 0);
    fprintf(stderr, "10,000 files down: %lld ms\n", (long long)(kd_mono_ms() - t0));
    t0 = kd_mono_ms();
    assert_int_equal(kd_ckpt_delete(st, "ten-k", err), 0);
    fprintf(stderr, "10,000 files deleted (DeleteObjects): %lld ms\n",
            (long long)(kd_mono_ms() - t0));
    assert_int_equal(kd_ckpt_list(st, 0, &infos, &n, err), 0);
    assert_int_equal(n, 0);
    kd_ckpt_list_free(infos, n);
    kd_storage_close(st);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
}

static void make_sparse(const char *dir)
{
    char path[PATH_MAX * 2];
    int fd;
    snprintf(path, sizeof(path), "%s/huge.bin", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "head", 4, 0), 4);
    assert_int_equal(pwrite(fd, "middle", 6, SPARSE_SIZE / 2), 6);
    assert_int_equal(pwrite(fd, "tail", 4, SPARSE_SIZE - 4), 4);
    close(fd);
}

static void test_sparse_several_gib_s3(void **state)
{
    (void)state;
    struct kd_storage *st = open_s3();
    char src[PATH_MAX], dst[PATH_MAX], path[PATH_MAX * 2], err[KD_ERRLEN];
    struct stat sb;
    int64_t t0;

    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    make_sparse(src);
    t0 = kd_mono_ms();
    assert_int_equal(kd_ckpt_upload(st, "huge", src, NULL, NULL, NULL, err), 0);
    fprintf(stderr, "3 GiB up: %lld ms\n", (long long)(kd_mono_ms() - t0));
    t0 = kd_mono_ms();
    assert_int_equal(kd_ckpt_download(st, "huge", dst, NULL, NULL, err), 0);
    fprintf(stderr, "3 GiB down and verified: %lld ms\n", (long long)(kd_mono_ms() - t0));
    snprintf(path, sizeof(path), "%s/huge.bin", dst);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, SPARSE_SIZE);
    assert_int_equal(kd_ckpt_delete(st, "huge", err), 0);
    kd_storage_close(st);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
}

static void test_sparse_several_gib_fs(void **state)
{
    (void)state;
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char root[PATH_MAX], src[PATH_MAX], path[PATH_MAX * 2], err[KD_ERRLEN];
    struct stat sb;

    make_tmpdir(root, sizeof(root), "root");
    make_tmpdir(src, sizeof(src), "src");
    make_sparse(src);
    kd_storage_config_init(&cfg);
    cfg.type = KD_STORAGE_SHARED_FS;
    kd_strlcpy(cfg.host_path, root, sizeof(cfg.host_path));
    assert_int_equal(kd_storage_open(&cfg, &st, err), 0);
    assert_int_equal(kd_ckpt_upload(st, "huge", src, NULL, NULL, NULL, err), 0);
    snprintf(path, sizeof(path), "%s/huge/huge.bin", root);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, SPARSE_SIZE);
    assert_true(sb.st_blocks * 512 < (16 << 20)); /* still sparse */
    assert_int_equal(kd_ckpt_verify(st, "huge", 0, NULL, NULL, err), 0);
    kd_storage_close(st);
    s3srv_rm_tree(root);
    s3srv_rm_tree(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ten_thousand_files),
        cmocka_unit_test(test_sparse_several_gib_s3),
        cmocka_unit_test(test_sparse_several_gib_fs),
    };
    if (getenv("KD_TEST_FILTER") != NULL) /* run one case while working on it */
        cmocka_set_test_filter(getenv("KD_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
