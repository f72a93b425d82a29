/*
 * libdtrain's asynchronous checkpoints (dtrain_checkpoint.h): save returns
 * at once while the upload runs, wait reports failures exactly once, and
 * restore verifies; on shared_fs and on a real s3rver.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/time.h"
#include "dtrain_checkpoint.h"
#include "s3srv.h"
#include "storage/checkpoint.h"
#include "util.h"

struct seen {
    int calls, failures;
    char last[DTRAIN_CKPT_UUIDLEN];
};

static void on_done(void *arg, const char *uuid, int rc, const char *err)
{
    struct seen *s = arg;
    (void)err;
    s->calls++;
    s->failures += rc != 0;
    kd_strlcpy(s->last, uuid, sizeof(s->last));
}

static void test_shared_fs(void **state)
{
    (void)state;
    char root[PATH_MAX], src[PATH_MAX], src2[PATH_MAX], bad[PATH_MAX], dst[PATH_MAX];
    char storage[PATH_MAX + 128], err[1024], uuid[DTRAIN_CKPT_UUIDLEN], path[PATH_MAX * 2];
    struct dtrain_ckpt *c = NULL;
    struct seen seen = {0};
    struct stat sb;

    make_tmpdir(root, sizeof(root), "root");
    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(src2, sizeof(src2), "src2");
    make_tmpdir(bad, sizeof(bad), "bad");
    make_tmpdir(dst, sizeof(dst), "dst");
    assert_int_equal(write_pattern(src, "model.bin", 2u << 20, 1), 0);
    assert_int_equal(write_pattern(src2, "model.bin", 1000, 2), 0);
    snprintf(path, sizeof(path), "%s/pipe", bad);
    assert_int_equal(mkfifo(path, 0644), 0);
    snprintf(storage, sizeof(storage),
             "{\"type\":\"shared_fs\",\"host_path\":\"%s\",\"storage_path\":\"ckpts\"}", root);

    assert_int_equal(dtrain_checkpoint_open("{\"type\":\"shared_fs\"}", &c, err), -1020);
    assert_non_null(strstr(err, "host_path"));
    assert_int_equal(dtrain_checkpoint_open(storage, &c, err), 0);
    dtrain_checkpoint_set_callback(c, on_done, &seen);
    assert_int_equal(dtrain_checkpoint_save_async(c, src, NULL,
                                                  "{\"trial_id\":\"1\",\"steps_completed\":100}", 0,
                                                  uuid, err),
                     0);
    assert_int_equal(strlen(uuid), 36);
    assert_int_equal(uuid[14], '4');
    assert_int_equal(
        dtrain_checkpoint_save_async(c, src2, "second", NULL, DTRAIN_CKPT_REMOVE_DIR, NULL, err),
        0);
    assert_int_equal(dtrain_checkpoint_wait(c, err), 0);
    assert_int_equal(dtrain_checkpoint_pending(c), 0);
    assert_int_equal(seen.calls, 2);
    assert_int_not_equal(stat(src2, &sb), 0); /* removed after its upload */
    assert_int_equal(stat(src, &sb), 0);      /* kept */

    /* failures: a uuid that exists, a directory holding a fifo */
    assert_int_equal(dtrain_checkpoint_save_async(c, src, "second", NULL, 0, NULL, err), 0);
    assert_int_equal(dtrain_checkpoint_save_async(c, bad, "third", NULL, 0, NULL, err), 0);
    assert_int_not_equal(dtrain_checkpoint_wait(c, err), 0);
    assert_non_null(strstr(err, "checkpoint second"));
    assert_non_null(strstr(err, "already exists"));
    assert_non_null(strstr(err, "and 1 more"));
    assert_int_equal(seen.failures, 2);
    assert_int_equal(dtrain_checkpoint_wait(c, err), 0); /* reported once */
    /* argument errors come back at once */
    assert_int_equal(dtrain_checkpoint_save_async(c, "/nonexistent", NULL, NULL, 0, NULL, err),
                     -1003);
    assert_int_equal(dtrain_checkpoint_save_async(c, src, NULL, "[1]", 0, NULL, err), -1001);
    assert_non_null(strstr(err, "JSON object"));

    assert_int_equal(dtrain_checkpoint_restore(c, uuid, dst, err), 0);
    snprintf(path, sizeof(path), "%s/model.bin", dst);
    {
        char orig[PATH_MAX * 2];
        snprintf(orig, sizeof(orig), "%s/model.bin", src);
        assert_int_equal(same_file(orig, path), 0);
    }
    assert_int_equal(dtrain_checkpoint_restore(c, "third", dst, err), -1003);
    assert_non_null(strstr(err, "incomplete"));
    assert_int_equal(dtrain_checkpoint_close(c, err), 0);
    s3srv_rm_tree(root);
    s3srv_rm_tree(src);
    s3srv_rm_tree(bad);
    s3srv_rm_tree(dst);
}

static void test_s3_async(void **state)
{
    (void)state;
    struct s3srv srv;
    char src[PATH_MAX], dst[PATH_MAX], storage[512], err[1024], uuid[DTRAIN_CKPT_UUIDLEN];
    struct dtrain_ckpt *c = NULL;
    int64_t t0, queued_ms, total_ms;

    if (s3srv_start(&srv, "train") != 0)
        fail_msg("cannot start s3rver (make deps)");
    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    assert_int_equal(write_pattern(src, "weights.bin", 96u << 20, 7), 0);
    assert_int_equal(write_pattern(src, "optimizer.bin", 1u << 20, 8), 0);
    snprintf(storage, sizeof(storage),
             "{\"type\":\"s3\",\"bucket\":\"train\",\"prefix\":\"exp-9\",\"endpoint_url\":"
             "\"http://127.0.0.1:%d\"}",
             srv.port);
    assert_int_equal(dtrain_checkpoint_open(storage, &c, err), 0);
    t0 = kd_mono_ms();
    assert_int_equal(dtrain_checkpoint_save_async(c, src, NULL, NULL, 0, uuid, err), 0);
    queued_ms = kd_mono_ms() - t0;
    assert_int_equal(dtrain_checkpoint_pending(c), 1);
    assert_int_equal(dtrain_checkpoint_wait(c, err), 0);
    total_ms = kd_mono_ms() - t0;
    fprintf(stderr, "save_async returned in %lld ms; the upload took %lld ms\n",
            (long long)queued_ms, (long long)total_ms);
    assert_true(queued_ms * 5 < total_ms); /* training was not held up */
    assert_int_equal(dtrain_checkpoint_restore(c, uuid, dst, err), 0);
    assert_int_equal(dtrain_checkpoint_close(c, err), 0);
    s3srv_stop(&srv);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_fs),
        cmocka_unit_test(test_s3_async),
    };
    kd_log_init("test_storage_async", KD_LOG_WARN, -1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
