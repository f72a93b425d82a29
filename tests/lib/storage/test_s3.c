/*
 * The s3 backend and checkpoints against a real s3rver on 127.0.0.1:
 * objects, credentials errors, multipart and ranged transfers, odd names,
 * incomplete and corrupted checkpoints, and a server killed mid-upload.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "core/log.h"
#include "core/time.h"
#include "s3srv.h"
#include "storage/checkpoint.h"
#include "util.h"

static struct s3srv srv;

static int setup(void **state)
{
    (void)state;
    kd_log_init("test_storage_s3", KD_LOG_WARN, -1);
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
    return 0;
}

static struct kd_storage *open_st(const char *prefix, uint64_t part_size)
{
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN] = "";
    s3srv_config(&srv, prefix, &cfg);
    cfg.part_size = part_size;
    if (kd_storage_open(&cfg, &st, err) != 0)
        fail_msg("open: %s", err);
    return st;
}

static void test_objects(void **state)
{
    (void)state;
    struct kd_storage *st = open_st("objs", 0);
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    struct kd_storage_list l = {0};
    char err[KD_ERRLEN] = "";
    const char *keys[] = {"a/one", "a/two words", "b/üñí"};

    for (int i = 0; i < 3; i++)
        assert_int_equal(kd_storage_put_mem(st, keys[i], keys[i], strlen(keys[i]), err), 0);
    assert_int_equal(kd_storage_put_mem(st, "empty", "", 0, err), 0);
    assert_int_equal(kd_storage_get_mem(st, "a/two words", &b, err), 0);
    assert_string_equal(kd_buf_str(&b), "a/two words");
    kd_buf_reset(&b);
    assert_int_equal(kd_storage_get_mem(st, "b/üñí", &b, err), 0);
    assert_string_equal(kd_buf_str(&b), "b/üñí");
    kd_buf_reset(&b);
    assert_int_equal(kd_storage_get_mem(st, "empty", &b, err), 0);
    assert_int_equal(b.len, 0);
    assert_int_equal(kd_storage_get_mem(st, "missing", &b, err), KD_ENOTFOUND);
    assert_int_equal(kd_storage_list(st, "a/", &l, err), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.objs[0].key, "a/one");
    assert_int_equal(l.objs[1].size, strlen("a/two words"));
    kd_storage_list_free(&l);
    assert_int_equal(kd_storage_delete(st, keys, 3, err), 0);
    assert_int_equal(kd_storage_list(st, "", &l, err), 0);
    assert_int_equal(l.n, 1); /* "empty" */
    kd_storage_list_free(&l);
    /* a bad key is refused before any request */
    assert_int_equal(kd_storage_put_mem(st, "../x", "x", 1, err), KD_EINVAL);
    assert_non_null(strstr(err, ".."));
    kd_buf_free(&b);
    kd_storage_close(st);
}

static void test_virtual_hosted(void **state)
{
    (void)state;
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL, *ps = NULL;
    struct kd_buf b = KD_BUF_INIT(1024);
    char err[KD_ERRLEN] = "";
    const char *k[] = {"vhost/obj"};

    /* BUCKET.s3.localhost:PORT, the bucket in the host name */
    s3srv_config(&srv, "vh", &cfg);
    snprintf(cfg.endpoint_url, sizeof(cfg.endpoint_url), "http://s3.localhost:%d", srv.port);
    cfg.path_style = 0;
    assert_int_equal(kd_storage_open(&cfg, &st, err), 0);
    assert_int_equal(kd_storage_put_mem(st, "vhost/obj", "virtual", 7, err), 0);
    /* the same object seen through path-style addressing */
    ps = open_st("vh", 0);
    assert_int_equal(kd_storage_get_mem(ps, "vhost/obj", &b, err), 0);
    assert_string_equal(kd_buf_str(&b), "virtual");
    assert_int_equal(kd_storage_delete(st, k, 1, err), 0);
    kd_buf_reset(&b);
    assert_int_equal(kd_storage_get_mem(ps, "vhost/obj", &b, err), KD_ENOTFOUND);
    kd_buf_free(&b);
    kd_storage_close(st);
    kd_storage_close(ps);
}

static void test_wrong_access_key(void **state)
{
    (void)state;
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN] = "";
    s3srv_config(&srv, "", &cfg);
    setenv("AWS_ACCESS_KEY_ID", "NOTAKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value-123", 1);
    assert_int_equal(kd_storage_open(&cfg, &st, err), 0);
    assert_int_equal(kd_storage_put_mem(st, "x", "x", 1, err), KD_EUNAUTHORIZED);
    assert_non_null(strstr(err, "403"));
    assert_non_null(strstr(err, "InvalidAccessKeyId"));
    assert_non_null(strstr(err, "access key"));
    assert_null(strstr(err, "very-secret-value-123"));
    kd_storage_close(st);
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
}

static void test_no_credentials(void **state)
{
    (void)state;
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN] = "";
    s3srv_config(&srv, "", &cfg);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    unsetenv("KDET_S3_CREDENTIALS_DIR");
    assert_int_equal(kd_storage_open(&cfg, &st, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "AWS_ACCESS_KEY_ID"));
    assert_null(st);
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
}

/* A tree with an empty file, odd names, nesting and a multipart-sized file. */
static void make_tree(const char *dir, size_t big)
{
    assert_int_equal(write_pattern(dir, "model/weights.bin", big, 1), 0);
    assert_int_equal(write_pattern(dir, "model/empty", 0, 0), 0);
    assert_int_equal(write_pattern(dir, "dir with spaces/file name.txt", 1000, 2), 0);
    assert_int_equal(write_pattern(dir, "ünïcödé/файл-数据.bin", 4097, 3), 0);
    assert_int_equal(write_pattern(dir, "opt+state/a&b=c%d#e.pt", 12345, 4), 0);
    assert_int_equal(write_pattern(dir, "metadata.json", 10, 5), 0);
}

static void compare_trees(const char *a, const char *b)
{
    const char *files[] = {"model/weights.bin",
                           "model/empty",
                           "dir with spaces/file name.txt",
                           "ünïcödé/файл-数据.bin",
                           "opt+state/a&b=c%d#e.pt",
                           "metadata.json"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char pa[2 * PATH_MAX], pb[2 * PATH_MAX];
        snprintf(pa, sizeof(pa), "%s/%s", a, files[i]);
        snprintf(pb, sizeof(pb), "%s/%s", b, files[i]);
        if (same_file(pa, pb) != 0)
            fail_msg("%s differs after the round trip", files[i]);
    }
}

static int count_progress(void *arg, const struct kd_ckpt_progress *p)
{
    (void)p;
    (*(int *)arg)++;
    return 0;
}

static void test_checkpoint_roundtrip(void **state)
{
    (void)state;
    /* part size 5 MiB: the big file goes up in parallel parts */
    struct kd_storage *st = open_st("exp-1", 5u << 20);
    char src[PATH_MAX], dst[PATH_MAX], err[KD_ERRLEN] = "";
    struct kd_ckpt_info *infos = NULL;
    size_t n = 0;
    int calls = 0;
    json_t *meta = json_pack("{s:s, s:i, s:s, s:s}", "trial_id", "exp-1-trial-3", "steps_completed",
                             400, "framework", "torch-1.13", "format", "pickle");

    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    /* 70 MiB: up in 5 MiB parts, down in three ranges hashed in order as they arrive */
    make_tree(src, (70u << 20) + 17);
    assert_int_equal(kd_ckpt_upload(st, "c0ffee-01", src, meta, count_progress, &calls, err), 0);
    assert_true(calls >= 2);
    assert_int_equal(kd_ckpt_upload(st, "c0ffee-01", src, meta, NULL, NULL, err), KD_EEXIST);
    assert_int_equal(kd_ckpt_list(st, 1, &infos, &n, err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(infos[0].uuid, "c0ffee-01");
    assert_true(infos[0].complete);
    assert_int_equal(infos[0].objects, 7);
    assert_int_equal(json_integer_value(json_object_get(infos[0].metadata, "steps_completed")),
                     400);
    kd_ckpt_list_free(infos, n);
    assert_int_equal(kd_ckpt_download(st, "c0ffee-01", dst, NULL, NULL, err), 0);
    compare_trees(src, dst);
    assert_int_equal(kd_ckpt_verify(st, "c0ffee-01", 1, NULL, NULL, err), 0);
    {
        /* the same size, other bytes, in a ranged object: caught by the in-order hash */
        char other[PATH_MAX];
        struct kd_storage_put p = {
            "c0ffee-01/model/weights.bin", NULL, (70u << 20) + 17, NULL, 0, 0};
        make_tmpdir(other, sizeof(other), "other");
        assert_int_equal(write_pattern(other, "w.bin", (70u << 20) + 17, 99), 0);
        snprintf(other + strlen(other), sizeof(other) - strlen(other), "/w.bin");
        p.path = other;
        assert_int_equal(kd_storage_put_files(st, &p, 1, NULL, NULL, err), 0);
        assert_int_equal(kd_ckpt_download(st, "c0ffee-01", dst, NULL, NULL, err), KD_ECORRUPT);
        assert_non_null(strstr(err, "model/weights.bin: sha256"));
        *strrchr(other, '/') = '\0';
        s3srv_rm_tree(other);
    }
    assert_int_equal(kd_ckpt_delete(st, "c0ffee-01", err), 0);
    assert_int_equal(kd_ckpt_list(st, 0, &infos, &n, err), 0);
    assert_int_equal(n, 0);
    kd_ckpt_list_free(infos, n);
    assert_int_equal(kd_ckpt_download(st, "c0ffee-01", dst, NULL, NULL, err), KD_ENOTFOUND);
    json_decref(meta);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
    kd_storage_close(st);
}

/* The hex sha256 of a file, computed here rather than by lib/storage. */
static void file_sha256(const char *path, char out[65])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char buf[65536], md[32];
    unsigned int mdlen = 0;
    size_t n;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_non_null(ctx);
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        EVP_DigestUpdate(ctx, buf, n);
    fclose(f);
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/*
 * A multipart upload hashes the file in order while its parts go, parts
 * sent ahead of the cursor included, so the caller needs no second pass:
 * one connection (every part in order), three (parts finishing out of
 * order) and the default sixteen (all parts at once).
 */
static void test_multipart_hashed_on_the_way(void **state)
{
    (void)state;
    const int pars[] = {1, 3, 0};
    const size_t size = 7 * (5u << 20) + 4321; /* 8 parts, the last one short */
    char dir[PATH_MAX], path[2 * PATH_MAX], want[65], got[65], err[KD_ERRLEN] = "";

    make_tmpdir(dir, sizeof(dir), "mph");
    assert_int_equal(write_pattern(dir, "w.bin", size, 11), 0);
    snprintf(path, sizeof(path), "%s/w.bin", dir);
    file_sha256(path, want);
    for (size_t i = 0; i < sizeof(pars) / sizeof(pars[0]); i++) {
        struct kd_storage_config cfg;
        struct kd_storage *st = NULL;
        struct kd_storage_put p = {"w.bin", path, size, got, 0, 0};
        struct kd_storage_get g = {"w.bin", NULL, size, want, 0, 0};
        char back[2 * PATH_MAX + 8];
        s3srv_config(&srv, "mph", &cfg);
        cfg.part_size = 5u << 20;
        cfg.parallel = pars[i];
        if (kd_storage_open(&cfg, &st, err) != 0)
            fail_msg("open: %s", err);
        memset(got, 0, sizeof(got));
        assert_int_equal(kd_storage_put_files(st, &p, 1, NULL, NULL, err), 0);
        assert_int_equal(p.result, 0);
        if (!p.hashed)
            fail_msg("parallel %d: the multipart upload did not hash the file", pars[i]);
        assert_string_equal(got, want);
        /* and the object holds those bytes */
        snprintf(back, sizeof(back), "%s/back", dir);
        g.path = back;
        assert_int_equal(kd_storage_get_files(st, &g, 1, NULL, NULL, err), 0);
        assert_true(g.verified);
        assert_int_equal(same_file(path, back), 0);
        unlink(back);
        kd_storage_close(st);
    }
    s3srv_rm_tree(dir);
}

static void test_incomplete_never_usable(void **state)
{
    (void)state;
    struct kd_storage *st = open_st("exp-2", 0);
    char dst[PATH_MAX], err[KD_ERRLEN] = "";
    struct kd_ckpt_info *infos = NULL;
    size_t n = 0;

    /* the objects of an upload that never wrote its manifest */
    assert_int_equal(kd_storage_put_mem(st, "half-done/model.bin", "abc", 3, err), 0);
    assert_int_equal(kd_ckpt_list(st, 1, &infos, &n, err), 0);
    assert_int_equal(n, 1);
    assert_false(infos[0].complete);
    kd_ckpt_list_free(infos, n);
    make_tmpdir(dst, sizeof(dst), "dst");
    assert_int_equal(kd_ckpt_download(st, "half-done", dst, NULL, NULL, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "incomplete"));
    assert_int_equal(kd_ckpt_verify(st, "half-done", 0, NULL, NULL, err), KD_ENOTFOUND);
    assert_int_equal(kd_ckpt_delete(st, "half-done", err), 0);
    assert_int_equal(kd_ckpt_list(st, 0, &infos, &n, err), 0);
    assert_int_equal(n, 0);
    kd_ckpt_list_free(infos, n);
    s3srv_rm_tree(dst);
    kd_storage_close(st);
}

static void test_corruption_detected(void **state)
{
    (void)state;
    struct kd_storage *st = open_st("exp-3", 0);
    char src[PATH_MAX], dst[PATH_MAX], err[KD_ERRLEN] = "";
    char junk[1000];

    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    make_tree(src, 100000);
    assert_int_equal(kd_ckpt_upload(st, "ck", src, NULL, NULL, NULL, err), 0);
    /* same size, different bytes: only the hash can tell */
    memset(junk, 'x', sizeof(junk));
    assert_int_equal(
        kd_storage_put_mem(st, "ck/dir with spaces/file name.txt", junk, sizeof(junk), err), 0);
    assert_int_equal(kd_ckpt_verify(st, "ck", 0, NULL, NULL, err), 0); /* sizes still agree */
    assert_int_equal(kd_ckpt_download(st, "ck", dst, NULL, NULL, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "dir with spaces/file name.txt"));
    assert_non_null(strstr(err, "sha256"));
    assert_int_equal(kd_ckpt_verify(st, "ck", 1, NULL, NULL, err), KD_ECORRUPT);
    /* truncated: the size check says so before anything is downloaded */
    assert_int_equal(kd_storage_put_mem(st, "ck/model/weights.bin", junk, 10, err), 0);
    assert_int_equal(kd_ckpt_verify(st, "ck", 0, NULL, NULL, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "model/weights.bin"));
    assert_non_null(strstr(err, "truncated"));
    assert_int_equal(kd_ckpt_download(st, "ck", dst, NULL, NULL, err), KD_ECORRUPT);
    /* a missing file */
    {
        const char *k[] = {"ck/metadata.json"};
        assert_int_equal(kd_storage_delete(st, k, 1, err), 0);
        assert_int_equal(kd_ckpt_verify(st, "ck", 0, NULL, NULL, err), KD_ECORRUPT);
        assert_non_null(strstr(err, "metadata.json is missing"));
    }
    assert_int_equal(kd_ckpt_delete(st, "ck", err), 0);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
    kd_storage_close(st);
}

static void test_many_small_files(void **state)
{
    (void)state;
    struct kd_storage *st = open_st("many", 0);
    char src[PATH_MAX], dst[PATH_MAX], err[KD_ERRLEN] = "";
    struct kd_ckpt_manifest m;
    int64_t t0;

    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    for (int i = 0; i < 1000; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "shard-%02d/part-%04d.bin", i % 10, i);
        assert_int_equal(write_pattern(src, rel, (size_t)(i % 7) * 600, (unsigned)i), 0);
    }
    t0 = kd_mono_ms();
    assert_int_equal(kd_ckpt_upload(st, "many-1", src, NULL, NULL, NULL, err), 0);
    fprintf(stderr, "1000 small files up in %lld ms\n", (long long)(kd_mono_ms() - t0));
    t0 = kd_mono_ms();
    assert_int_equal(kd_ckpt_download(st, "many-1", dst, NULL, NULL, err), 0);
    fprintf(stderr, "1000 small files down in %lld ms\n", (long long)(kd_mono_ms() - t0));
    assert_int_equal(kd_ckpt_read_manifest(st, "many-1", &m, err), 0);
    assert_int_equal(m.nfiles, 1000);
    kd_ckpt_manifest_free(&m);
    assert_int_equal(kd_ckpt_delete(st, "many-1", err), 0);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
    kd_storage_close(st);
}

/* The server is killed during an upload and restarted on the same data. */
struct upload_job {
    const char *dir;
    int rc;
    char err[KD_ERRLEN];
};

static void *upload_thread(void *arg)
{
    struct upload_job *j = arg;
    struct kd_storage *st = open_st("killed", 8u << 20);
    j->rc = kd_ckpt_upload(st, "survivor", j->dir, NULL, NULL, NULL, j->err);
    kd_storage_close(st);
    return NULL;
}

static void test_server_killed_mid_upload(void **state)
{
    (void)state;
    char src[PATH_MAX], dst[PATH_MAX], err[KD_ERRLEN] = "";
    struct upload_job job = {0};
    struct kd_ckpt_info *infos = NULL;
    struct kd_storage *st;
    pthread_t th;
    size_t n = 0;

    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    for (int i = 0; i < 4; i++) {
        char rel[32];
        snprintf(rel, sizeof(rel), "shard-%d.bin", i);
        assert_int_equal(write_pattern(src, rel, 60u << 20, (unsigned)i), 0);
    }
    job.dir = src;
    assert_int_equal(pthread_create(&th, NULL, upload_thread, &job), 0);
    kd_sleep_ms(400);
    s3srv_kill(&srv);
    kd_sleep_ms(1500);
    assert_int_equal(s3srv_restart(&srv), 0);
    pthread_join(th, NULL);
    fprintf(stderr, "upload across a server restart: rc=%d %s\n", job.rc, job.err);

    st = open_st("killed", 0);
    assert_int_equal(kd_ckpt_list(st, 0, &infos, &n, err), 0);
    if (job.rc == 0) {
        /* retried through the outage: complete and intact */
        assert_int_equal(n, 1);
        assert_true(infos[0].complete);
        assert_int_equal(kd_ckpt_download(st, "survivor", dst, NULL, NULL, err), 0);
    } else {
        /* cleanly failed: never visible as complete */
        for (size_t i = 0; i < n; i++)
            assert_false(infos[i].complete);
        assert_int_equal(kd_ckpt_download(st, "survivor", dst, NULL, NULL, err), KD_ENOTFOUND);
    }
    kd_ckpt_list_free(infos, n);
    assert_int_equal(kd_ckpt_delete(st, "survivor", err), 0);
    kd_storage_close(st);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_objects),
        cmocka_unit_test(test_virtual_hosted),
        cmocka_unit_test(test_wrong_access_key),
        cmocka_unit_test(test_no_credentials),
        cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_multipart_hashed_on_the_way),
        cmocka_unit_test(test_incomplete_never_usable),
        cmocka_unit_test(test_corruption_detected),
        cmocka_unit_test(test_many_small_files),
        cmocka_unit_test(test_server_killed_mid_upload),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
