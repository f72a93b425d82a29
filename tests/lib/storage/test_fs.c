/*
 * Storage config parsing, credentials lookup, and the shared_fs backend
 * with checkpoints: atomic writes, odd names, sparse files, incomplete and
 * corrupted checkpoints.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/log.h"
#include "s3srv.h"
#include "storage/checkpoint.h"
#include "util.h"

#define EMPTY_HEX "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static int parse(const char *text, struct kd_storage_config *cfg, char *err)
{
    json_error_t je;
    json_t *js = json_loads(text, 0, &je);
    int rc;
    if (js == NULL)
        fail_msg("bad test JSON: %s", je.text);
    rc = kd_storage_config_from_json(js, cfg, err);
    json_decref(js);
    return rc;
}

static void test_config(void **state)
{
    (void)state;
    struct kd_storage_config cfg;
    char err[KD_ERRLEN];
    json_t *back;

    assert_int_equal(parse("{\"type\":\"shared_fs\",\"host_path\":\"/mnt/ckpt\","
                           "\"storage_path\":\"/kdet/\",\"save_trial_best\":2}",
                           &cfg, err),
                     0);
    assert_int_equal(cfg.type, KD_STORAGE_SHARED_FS);
    assert_string_equal(cfg.storage_path, "kdet");
    assert_int_equal(cfg.save_trial_best, 2);
    assert_int_equal(cfg.save_trial_latest, -1);
    assert_int_equal(parse("{\"type\":\"s3\",\"bucket\":\"b\",\"prefix\":\"/a/b/\","
                           "\"endpoint_url\":\"http://minio:9000\",\"path_style\":false,"
                           "\"region\":\"eu-west-1\",\"credentials_secret\":\"s3-creds\","
                           "\"part_size\":\"64MiB\"}",
                           &cfg, err),
                     0);
    assert_string_equal(cfg.prefix, "a/b");
    assert_int_equal(cfg.path_style, 0);
    assert_int_equal(cfg.part_size, 64u << 20);
    back = kd_storage_config_to_json(&cfg);
    assert_string_equal(json_string_value(json_object_get(back, "credentials_secret")), "s3-creds");
    json_decref(back);

    static const struct {
        const char *json, *want;
        int rc;
    } bad[] = {
        {"{\"type\":\"s3\",\"buckt\":\"b\"}",
         "checkpoint_storage.buckt: unknown field (did you "
         "mean bucket?)",
         KD_EINVALID},
        {"{\"type\":\"s3\",\"bucket\":\"b\",\"secret_key\":\"x\"}", "Kubernetes Secret",
         KD_EINVALID},
        {"{\"type\":\"s3\"}", "checkpoint_storage.bucket: required", KD_EINVALID},
        {"{\"type\":\"shared-fs\",\"host_path\":\"/x\"}", "did you mean shared_fs", KD_ENOTSUP},
        {"{\"type\":\"gcs\",\"bucket\":\"b\"}", "unsupported type gcs", KD_ENOTSUP},
        {"{\"type\":\"shared_fs\",\"host_path\":\"rel\"}", "host_path: required, an absolute",
         KD_EINVALID},
        {"{\"type\":\"s3\",\"bucket\":\"b\",\"endpoint_url\":\"minio:9000\"}",
         "endpoint_url: must start with http", KD_EINVALID},
        {"{\"type\":\"s3\",\"bucket\":\"b\",\"part_size\":\"1MiB\"}",
         "part_size: must be a size between 5MiB and 5GiB", KD_EINVALID},
        {"{\"type\":\"s3\",\"bucket\":\"b\",\"save_trial_latest\":-1}",
         "save_trial_latest: must be an integer >= 0", KD_EINVALID},
        {"[]", "checkpoint_storage: must be an object", KD_EINVALID},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        int rc = parse(bad[i].json, &cfg, err);
        if (rc != bad[i].rc || strstr(err, bad[i].want) == NULL)
            fail_msg("%s: got %d \"%s\", want %d \"%s\"", bad[i].json, rc, err, bad[i].rc,
                     bad[i].want);
    }
    kd_storage_config_init(&cfg);
    assert_int_equal(kd_storage_config_from_url("s3://bkt/some/prefix/", &cfg, err), 0);
    assert_string_equal(cfg.bucket, "bkt");
    assert_string_equal(cfg.prefix, "some/prefix");
    assert_int_equal(kd_storage_config_from_url("file:///mnt/x", &cfg, err), 0);
    assert_int_equal(cfg.type, KD_STORAGE_SHARED_FS);
    assert_string_equal(cfg.host_path, "/mnt/x");
    assert_int_equal(kd_storage_config_from_url("gs://x", &cfg, err), KD_EINVALID);
    assert_non_null(strstr(err, "expected s3://BUCKET"));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_credentials(void **state)
{
    (void)state;
    struct kd_storage_config cfg;
    struct kd_storage_creds c;
    char dir[PATH_MAX], path[PATH_MAX + 32], err[KD_ERRLEN], line[512];

    kd_storage_config_init(&cfg);
    make_tmpdir(dir, sizeof(dir), "creds");
    unsetenv("AWS_SESSION_TOKEN");
    setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "env-secret-1234", 1);
    assert_int_equal(kd_storage_load_credentials(&cfg, &c, err), 0);
    assert_string_equal(c.access_key_id, "AKENV");
    assert_non_null(strstr(c.source, "environment"));
    /* registered: the secret never reaches a log line */
    kd_redact("msg=x detail=env-secret-1234", line, sizeof(line));
    assert_null(strstr(line, "env-secret-1234"));
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");

    /* a mounted Secret: one file per key */
    snprintf(path, sizeof(path), "%s/AWS_ACCESS_KEY_ID", dir);
    write_file(path, "AKDIR\n");
    snprintf(path, sizeof(path), "%s/AWS_SECRET_ACCESS_KEY", dir);
    write_file(path, "dir-secret-5678\n");
    kd_strlcpy(cfg.credentials_dir, dir, sizeof(cfg.credentials_dir));
    assert_int_equal(kd_storage_load_credentials(&cfg, &c, err), 0);
    assert_string_equal(c.access_key_id, "AKDIR");
    assert_string_equal(c.secret_access_key, "dir-secret-5678");
    cfg.credentials_dir[0] = '\0';

    /* the AWS shared credentials file, with a profile */
    snprintf(path, sizeof(path), "%s/credentials", dir);
    write_file(path, "# comment\n[default]\naws_access_key_id = AKDEF\naws_secret_access_key = "
                     "def-secret\n\n[profile ci]\naws_access_key_id=AKCI\n"
                     "aws_secret_access_key=ci-secret-xyz\naws_session_token = tok-123456\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    assert_int_equal(kd_storage_load_credentials(&cfg, &c, err), 0);
    assert_string_equal(c.access_key_id, "AKDEF");
    setenv("AWS_PROFILE", "ci", 1);
    assert_int_equal(kd_storage_load_credentials(&cfg, &c, err), 0);
    assert_string_equal(c.access_key_id, "AKCI");
    assert_string_equal(c.session_token, "tok-123456");
    setenv("AWS_PROFILE", "nope", 1);
    assert_int_equal(kd_storage_load_credentials(&cfg, &c, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "no credentials found"));
    assert_null(strstr(err, "ci-secret-xyz"));
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    s3srv_rm_tree(dir);
}

static struct kd_storage *open_fs(const char *root)
{
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN] = "";
    kd_storage_config_init(&cfg);
    cfg.type = KD_STORAGE_SHARED_FS;
    kd_strlcpy(cfg.host_path, root, sizeof(cfg.host_path));
    kd_strlcpy(cfg.storage_path, "ckpts", sizeof(cfg.storage_path));
    if (kd_storage_open(&cfg, &st, err) != 0)
        fail_msg("open: %s", err);
    return st;
}

static int count_tmp(const char *dir)
{
    char cmd[PATH_MAX + 64];
    int n = -1;
    FILE *p;
    snprintf(cmd, sizeof(cmd), "find '%s' -name '*.kdtmp-*' | wc -l", dir);
    p = popen(cmd, "r");
    if (p != NULL && fscanf(p, "%d", &n) != 1)
        n = -1;
    if (p != NULL)
        pclose(p);
    return n;
}

static void test_fs_objects(void **state)
{
    (void)state;
    char root[PATH_MAX], err[KD_ERRLEN];
    struct kd_storage *st;
    struct kd_buf b = KD_BUF_INIT(100);
    struct kd_storage_list l = {0};
    const char *del[] = {"x/y/z", "missing"};

    make_tmpdir(root, sizeof(root), "fsroot");
    st = open_fs(root);
    assert_string_equal(kd_storage_type_name(st), "shared_fs");
    assert_int_equal(kd_storage_put_mem(st, "x/y/z", "hello", 5, err), 0);
    assert_int_equal(kd_storage_put_mem(st, "x/w", "", 0, err), 0);
    assert_int_equal(kd_storage_get_mem(st, "x/y/z", &b, err), 0);
    assert_string_equal(kd_buf_str(&b), "hello");
    assert_int_equal(kd_storage_get_mem(st, "nope", &b, err), KD_ENOTFOUND);
    assert_int_equal(kd_storage_list(st, "x/", &l, err), 0);
    assert_int_equal(l.n, 2);
    kd_storage_list_free(&l);
    assert_int_equal(kd_storage_delete(st, del, 2, err), 0);
    assert_int_equal(kd_storage_list(st, "", &l, err), 0);
    assert_int_equal(l.n, 1);
    kd_storage_list_free(&l);
    assert_int_equal(count_tmp(root), 0);
    kd_buf_free(&b);
    kd_storage_close(st);
    /* a host_path that is not there names itself */
    {
        struct kd_storage_config cfg;
        kd_storage_config_init(&cfg);
        cfg.type = KD_STORAGE_SHARED_FS;
        kd_strlcpy(cfg.host_path, "/nonexistent/kdet", sizeof(cfg.host_path));
        st = NULL;
        assert_int_equal(kd_storage_open(&cfg, &st, err), KD_ENOTFOUND);
        assert_non_null(strstr(err, "/nonexistent/kdet"));
    }
    s3srv_rm_tree(root);
}

static void test_fs_checkpoint(void **state)
{
    (void)state;
    char root[PATH_MAX], src[PATH_MAX], dst[PATH_MAX], path[PATH_MAX * 2], err[KD_ERRLEN];
    struct kd_storage *st;
    struct kd_ckpt_info *infos = NULL;
    size_t n = 0;
    struct stat sb;
    int fd;
    json_t *meta = json_pack("{s:s,s:i}", "trial_id", "7", "steps_completed", 1200);

    make_tmpdir(root, sizeof(root), "fsroot");
    make_tmpdir(src, sizeof(src), "src");
    make_tmpdir(dst, sizeof(dst), "dst");
    st = open_fs(root);
    assert_int_equal(write_pattern(src, "model/weights.bin", 3u << 20, 1), 0);
    assert_int_equal(write_pattern(src, "model/empty", 0, 0), 0);
    assert_int_equal(write_pattern(src, "names with spaces/ünïcödé 数据.pt", 777, 2), 0);
    /* a 256 MiB sparse file: copied as holes (the several-GiB case is in
     * test_storage_slow) */
    snprintf(path, sizeof(path), "%s/sparse.bin", src);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "tail", 4, (256ll << 20) - 4), 4);
    close(fd);

    assert_int_equal(kd_ckpt_upload(st, "ck-1", src, meta, NULL, NULL, err), 0);
    snprintf(path, sizeof(path), "%s/ckpts/ck-1/sparse.bin", root);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 256ll << 20);
    assert_true(sb.st_blocks * 512 < (16 << 20));
    assert_int_equal(count_tmp(root), 0);
    assert_int_equal(kd_ckpt_list(st, 1, &infos, &n, err), 0);
    assert_int_equal(n, 1);
    assert_true(infos[0].complete);
    assert_string_equal(json_string_value(json_object_get(infos[0].metadata, "trial_id")), "7");
    kd_ckpt_list_free(infos, n);
    assert_int_equal(kd_ckpt_download(st, "ck-1", dst, NULL, NULL, err), 0);
    snprintf(path, sizeof(path), "%s/names with spaces/ünïcödé 数据.pt", dst);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 777);
    assert_int_equal(kd_ckpt_verify(st, "ck-1", 1, NULL, NULL, err), 0);

    /* corrupt one byte in storage: the hash catches it, naming the file */
    snprintf(path, sizeof(path), "%s/ckpts/ck-1/model/weights.bin", root);
    fd = open(path, O_WRONLY);
    assert_int_equal(pwrite(fd, "X", 1, 12345), 1);
    close(fd);
    assert_int_equal(kd_ckpt_download(st, "ck-1", dst, NULL, NULL, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "model/weights.bin: sha256"));
    /* truncate it: the size check catches it */
    assert_int_equal(truncate(path, 1000), 0);
    assert_int_equal(kd_ckpt_verify(st, "ck-1", 0, NULL, NULL, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "truncated"));
    /* without its manifest the checkpoint is incomplete: not usable */
    snprintf(path, sizeof(path), "%s/ckpts/ck-1/" KD_CKPT_MANIFEST, root);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(kd_ckpt_list(st, 1, &infos, &n, err), 0);
    assert_int_equal(n, 1);
    assert_false(infos[0].complete);
    kd_ckpt_list_free(infos, n);
    assert_int_equal(kd_ckpt_download(st, "ck-1", dst, NULL, NULL, err), KD_ENOTFOUND);
    assert_int_equal(kd_ckpt_delete(st, "ck-1", err), 0);
    snprintf(path, sizeof(path), "%s/ckpts/ck-1", root);
    assert_int_not_equal(stat(path, &sb), 0); /* no empty directories left */

    /* bad inputs name what is wrong */
    assert_int_equal(kd_ckpt_upload(st, "../evil", src, NULL, NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "checkpoint uuid"));
    assert_int_equal(write_pattern(src, KD_CKPT_MANIFEST, 3, 0), 0);
    assert_int_equal(kd_ckpt_upload(st, "ck-2", src, NULL, NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "reserved"));
    snprintf(path, sizeof(path), "%s/" KD_CKPT_MANIFEST, src);
    unlink(path);
    snprintf(path, sizeof(path), "%s/a-fifo", src);
    assert_int_equal(mkfifo(path, 0644), 0);
    assert_int_equal(kd_ckpt_upload(st, "ck-3", src, NULL, NULL, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "a-fifo: not a regular file"));
    assert_int_equal(kd_ckpt_upload(st, "ck-4", "/nonexistent/dir", NULL, NULL, NULL, err),
                     KD_ENOTFOUND);
    assert_non_null(strstr(err, "/nonexistent/dir"));
    assert_int_equal(kd_ckpt_list(st, 0, &infos, &n, err), 0);
    assert_int_equal(n, 0);
    kd_ckpt_list_free(infos, n);

    json_decref(meta);
    kd_storage_close(st);
    s3srv_rm_tree(root);
    s3srv_rm_tree(src);
    s3srv_rm_tree(dst);
}

static void test_manifest_parse_errors(void **state)
{
    (void)state;
    struct kd_ckpt_manifest m;
    char err[KD_ERRLEN];
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{", "manifest: line 1"},
        {"{\"kdet_manifest\":2}", "kdet_manifest: expected 1"},
        {"{\"kdet_manifest\":1,\"uuid\":\"a/b\"}", "manifest.uuid"},
        {"{\"kdet_manifest\":1,\"uuid\":\"a\",\"metadata\":{},\"files\":[{\"path\":\"../x\","
         "\"size\":1,\"sha256\":\"" EMPTY_HEX "\"}],\"total_size\":1}",
         "files[0].path"},
        {"{\"kdet_manifest\":1,\"uuid\":\"a\",\"metadata\":{},\"files\":[{\"path\":\"x\","
         "\"size\":1,\"sha256\":\"abc\"}],\"total_size\":1}",
         "files[0].sha256"},
        {"{\"kdet_manifest\":1,\"uuid\":\"a\",\"metadata\":{},\"files\":[{\"path\":\"x\","
         "\"size\":1,\"sha256\":\"" EMPTY_HEX "\"}],\"total_size\":5}",
         "total_size: 5"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (kd_ckpt_manifest_parse(bad[i].text, strlen(bad[i].text), &m, err) == 0 ||
            strstr(err, bad[i].want) == NULL)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, err, bad[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_credentials),
        cmocka_unit_test(test_fs_objects),
        cmocka_unit_test(test_fs_checkpoint),
        cmocka_unit_test(test_manifest_parse_errors),
    };
    kd_log_init("test_storage_fs", KD_LOG_WARN, -1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
