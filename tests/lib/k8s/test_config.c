/*
 * Config resolution: kubeconfig files (fields, *-data, relative paths,
 * contexts), $KUBECONFIG merge rules, broken files with errors that name
 * the file and field, in-cluster service-account configs, the resolution
 * order, and token-file rotation.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/time.h"
#include "k8s/client_int.h"
#include "k8s/config.h"

#define DIR "tests/data/k8s/kubeconfig/"

static void load_ok(const char *paths, const char *ctx, struct kd_k8s_config *cfg)
{
    char err[KD_ERRLEN] = "";
    int rc = kd_k8s_config_kubeconfig(paths, ctx, cfg, err);
    if (rc != 0)
        fail_msg("%s: %s: %s", paths, kd_err_name(rc), err);
}

static void test_basic(void **state)
{
    (void)state;
    struct kd_k8s_config cfg = {0};
    char cwd[PATH_MAX], want[PATH_MAX + 64];
    load_ok(DIR "basic.yaml", NULL, &cfg);
    assert_string_equal(cfg.server, "https://127.0.0.1:6443"); /* trailing slash dropped */
    assert_string_equal(cfg.namespace, "team-a");
    assert_string_equal(cfg.context, "dev");
    assert_string_equal(cfg.token, "abc123-secret-token");
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    snprintf(want, sizeof(want), "%s/" DIR "ca.crt", cwd);
    assert_string_equal(cfg.ca_file, want); /* relative to the kubeconfig, made absolute */
    assert_null(cfg.ca_data);
    assert_false(cfg.insecure);
    /* the token is a registered log secret */
    char out[256];
    kd_redact("sent abc123-secret-token to the server", out, sizeof(out));
    assert_null(strstr(out, "abc123"));
    kd_k8s_config_free(&cfg);
    kd_k8s_config_free(&cfg); /* idempotent */
}

static void test_data_fields_and_contexts(void **state)
{
    (void)state;
    struct kd_k8s_config cfg = {0};
    load_ok(DIR "certs.yaml", NULL, &cfg);
    assert_string_equal(cfg.context, "gpu-admin");
    assert_string_equal(cfg.server, "https://gpu.example.com");
    assert_string_equal(cfg.namespace, "default");
    assert_non_null(cfg.ca_data);
    assert_non_null(strstr(cfg.ca_data, "MIIBfakeCAfortests"));
    assert_int_equal(cfg.ca_data_len, strlen(cfg.ca_data));
    assert_non_null(strstr(cfg.cert_data, "BEGIN CERTIFICATE"));
    assert_non_null(strstr(cfg.key_data, "BEGIN PRIVATE KEY"));
    assert_null(cfg.token);
    kd_k8s_config_free(&cfg);

    load_ok(DIR "certs.yaml", "lab", &cfg);
    assert_string_equal(cfg.server, "http://127.0.0.1:8080");
    assert_string_equal(cfg.namespace, "lab-ns");
    assert_true(cfg.insecure);
    assert_null(cfg.cert_data);
    kd_k8s_config_free(&cfg);
}

static void test_kubeconfig_merge(void **state)
{
    (void)state;
    struct kd_k8s_config cfg = {0};
    /* first file wins for current-context and for each name */
    load_ok(DIR "merge-a.yaml:" DIR "merge-b.yaml", NULL, &cfg);
    assert_string_equal(cfg.context, "a-ctx");
    assert_string_equal(cfg.server, "https://a.example.com");
    assert_string_equal(cfg.token, "token-of-a-user");
    kd_k8s_config_free(&cfg);

    load_ok(DIR "merge-b.yaml:" DIR "merge-a.yaml", NULL, &cfg);
    assert_string_equal(cfg.context, "b-ctx");
    assert_string_equal(cfg.server, "https://b.example.com");
    assert_string_equal(cfg.namespace, "b-ns");
    assert_string_equal(cfg.token, "tok-from-file-5f2b9c"); /* tokenFile, whitespace trimmed */
    assert_non_null(strstr(cfg.token_file, "/" DIR "token.txt"));
    assert_non_null(strstr(cfg.source, "merge-b.yaml"));
    kd_k8s_config_free(&cfg);

    /* a context from b may use a user defined in a */
    load_ok(DIR "merge-a.yaml:" DIR "merge-b.yaml", "b-only", &cfg);
    assert_string_equal(cfg.server, "https://b-only.example.com");
    assert_string_equal(cfg.token, "token-of-a-user");
    kd_k8s_config_free(&cfg);

    /* missing and empty files in the list are skipped; empty entries too */
    load_ok(DIR "nope.yaml::" DIR "empty.yaml:" DIR "merge-b.yaml", NULL, &cfg);
    assert_string_equal(cfg.context, "b-ctx");
    kd_k8s_config_free(&cfg);
}

struct bad {
    const char *paths;
    const char *ctx;
    int rc;
    const char *want[3];
};

static void test_broken_files(void **state)
{
    (void)state;
    static const struct bad cases[] = {
        {DIR "broken-syntax.yaml", NULL, KD_EPARSE, {DIR "broken-syntax.yaml:", NULL}},
        {DIR "no-server.yaml",
         NULL,
         KD_EINVAL,
         {DIR "no-server.yaml:6:", "clusters[0].cluster.server", "is required"}},
        {DIR "bad-base64.yaml",
         NULL,
         KD_EPARSE,
         {DIR "bad-base64.yaml:7:", "clusters[0].cluster.certificate-authority-data",
          "not valid base64"}},
        {DIR "typo-context.yaml",
         NULL,
         KD_ENOTFOUND,
         {DIR "typo-context.yaml", "context \"prodution\" not found",
          "did you mean \"production\""}},
        {DIR "typo-context.yaml", "staging", KD_ENOTFOUND, {"context \"staging\" not found"}},
        {DIR "exec-plugin.yaml",
         NULL,
         KD_ENOTSUP,
         {DIR "exec-plugin.yaml:", "users[0].user.exec", "not supported"}},
        {DIR "missing-cluster.yaml",
         NULL,
         KD_ENOTFOUND,
         {"contexts[0].context.cluster", "cluster \"stagin\" not found",
          "did you mean \"staging\""}},
        {DIR "wrong-types.yaml",
         NULL,
         KD_EPARSE,
         {DIR "wrong-types.yaml:7:", "clusters[0].cluster.insecure-skip-tls-verify",
          "true or false"}},
        {DIR "server-not-url.yaml",
         NULL,
         KD_EINVAL,
         {"clusters[0].cluster.server", "http:// or https://"}},
        {DIR "half-cert.yaml",
         NULL,
         KD_EINVAL,
         {"users[0].user", "client-certificate and client-key must be given together"}},
        {DIR "not-a-list.yaml", NULL, KD_EPARSE, {DIR "not-a-list.yaml:", "clusters", "a list"}},
        {DIR "empty.yaml", NULL, KD_EINVAL, {"no current-context"}},
        {DIR "nope.yaml", NULL, -ENOENT, {DIR "nope.yaml", "No such file"}},
        {DIR "nope.yaml:" DIR "nope2.yaml", NULL, KD_ENOTFOUND, {"none of the 2 files"}},
        /* a broken file in a list is an error even when another file is fine */
        {DIR "merge-a.yaml:" DIR "broken-syntax.yaml", NULL, KD_EPARSE, {"broken-syntax.yaml:"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_k8s_config cfg = {0};
        char err[KD_ERRLEN] = "";
        int rc = kd_k8s_config_kubeconfig(cases[i].paths, cases[i].ctx, &cfg, err);
        printf("%s: %s: %s\n", cases[i].paths, kd_err_name(rc), err);
        if (rc != cases[i].rc)
            fail_msg("%s: got %s, want %s", cases[i].paths, kd_err_name(rc),
                     kd_err_name(cases[i].rc));
        for (int j = 0; j < 3 && cases[i].want[j] != NULL; j++) {
            if (strstr(err, cases[i].want[j]) == NULL)
                fail_msg("%s: \"%s\" lacks \"%s\"", cases[i].paths, err, cases[i].want[j]);
        }
        assert_null(cfg.server);
    }
}

static void test_base64(void **state)
{
    (void)state;
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(kd_k8s_base64_decode("aGVsbG8gd29y\nbGQ=", &out, &len), 0);
    assert_string_equal(out, "hello world");
    assert_int_equal(len, 11);
    free(out);
    assert_int_equal(kd_k8s_base64_decode("YQ", &out, &len), 0); /* unpadded */
    assert_string_equal(out, "a");
    free(out);
    assert_int_equal(kd_k8s_base64_decode("YQ==YQ==", &out, &len), KD_EPARSE);
    assert_int_equal(kd_k8s_base64_decode("Y", &out, &len), KD_EPARSE);
    assert_int_equal(kd_k8s_base64_decode("a$b=", &out, &len), KD_EPARSE);
}

static char tmpdir[64];

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void make_sa_dir(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kd-k8s-sa-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    write_file("token", "sa-token-one-7f3e\n");
    write_file("ca.crt", "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n");
    write_file("namespace", "kdet-system");
}

static void remove_sa_dir(void)
{
    const char *names[] = {"token", "ca.crt", "namespace", "token.new"};
    char path[256];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    assert_int_equal(rmdir(tmpdir), 0);
}

static void test_in_cluster(void **state)
{
    (void)state;
    struct kd_k8s_config cfg = {0};
    char err[KD_ERRLEN];
    make_sa_dir();
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    assert_int_equal(kd_k8s_config_in_cluster(tmpdir, &cfg, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "https", 1);
    assert_int_equal(kd_k8s_config_in_cluster(tmpdir, &cfg, err), KD_EINVAL);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_PORT"));
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(kd_k8s_config_in_cluster(tmpdir, &cfg, err), 0);
    assert_string_equal(cfg.server, "https://10.96.0.1:443");
    assert_string_equal(cfg.token, "sa-token-one-7f3e");
    assert_string_equal(cfg.namespace, "kdet-system");
    assert_string_equal(cfg.source, "in-cluster");
    assert_non_null(strstr(cfg.ca_file, "/ca.crt"));
    kd_k8s_config_free(&cfg);
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    assert_int_equal(kd_k8s_config_in_cluster(tmpdir, &cfg, err), 0);
    assert_string_equal(cfg.server, "https://[fd00::1]:443");
    kd_k8s_config_free(&cfg);
    assert_int_equal(kd_k8s_config_in_cluster("/nonexistent-sa", &cfg, err), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent-sa/token"));
    remove_sa_dir();
}

static void test_resolution_order(void **state)
{
    (void)state;
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_config_opts o = {0};
    char err[KD_ERRLEN];
    char home[64];
    make_sa_dir();
    o.sa_dir = tmpdir;
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    setenv("KUBECONFIG", DIR "merge-a.yaml", 1);
    /* 1. explicit file beats everything */
    o.kubeconfig = DIR "basic.yaml";
    assert_int_equal(kd_k8s_config_load(&o, &cfg, err), 0);
    assert_string_equal(cfg.context, "dev");
    kd_k8s_config_free(&cfg);
    o.kubeconfig = DIR "merge-a.yaml:" DIR "merge-b.yaml";
    assert_int_equal(kd_k8s_config_load(&o, &cfg, err), KD_EINVAL);
    assert_non_null(strstr(err, "one file"));
    /* 2. $KUBECONFIG beats in-cluster */
    o.kubeconfig = NULL;
    assert_int_equal(kd_k8s_config_load(&o, &cfg, err), 0);
    assert_string_equal(cfg.context, "a-ctx");
    kd_k8s_config_free(&cfg);
    /* 3. in-cluster beats ~/.kube/config */
    unsetenv("KUBECONFIG");
    snprintf(home, sizeof(home), "/tmp/kd-k8s-home-XXXXXX");
    assert_non_null(mkdtemp(home));
    char kube[128], cfgpath[160], src[PATH_MAX];
    snprintf(kube, sizeof(kube), "%s/.kube", home);
    assert_int_equal(mkdir(kube, 0700), 0);
    snprintf(cfgpath, sizeof(cfgpath), "%s/config", kube);
    assert_non_null(realpath(DIR "certs.yaml", src));
    assert_int_equal(symlink(src, cfgpath), 0);
    setenv("HOME", home, 1);
    assert_int_equal(kd_k8s_config_load(&o, &cfg, err), 0);
    assert_string_equal(cfg.source, "in-cluster");
    kd_k8s_config_free(&cfg);
    /* ...unless in-cluster is turned off */
    o.no_in_cluster = true;
    assert_int_equal(kd_k8s_config_load(&o, &cfg, err), 0);
    assert_string_equal(cfg.context, "gpu-admin");
    kd_k8s_config_free(&cfg);
    /* 4. ~/.kube/config */
    o.no_in_cluster = false;
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(kd_k8s_config_load(&o, &cfg, err), 0);
    assert_string_equal(cfg.context, "gpu-admin");
    kd_k8s_config_free(&cfg);
    /* nothing at all */
    unlink(cfgpath);
    assert_int_equal(kd_k8s_config_load(&o, &cfg, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "KUBECONFIG"));
    rmdir(kube);
    rmdir(home);
    remove_sa_dir();
}

static void test_token_rotation(void **state)
{
    (void)state;
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_client *c = NULL;
    struct kd_k8s_client_opts opts = {.token_reread_ms = 20};
    char err[KD_ERRLEN], path[256], newpath[256];
    make_sa_dir();
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
    assert_int_equal(kd_k8s_config_in_cluster(tmpdir, &cfg, err), 0);
    assert_int_equal(kd_k8s_client_new(&cfg, &opts, &c, err), 0);
    kd_k8s_config_free(&cfg);
    assert_string_equal(c->cfg.token, "sa-token-one-7f3e");
    /* kubelet rotates the projected token by renaming a new file into place */
    write_file("token.new", "sa-token-two-91ac\n");
    snprintf(path, sizeof(path), "%s/token", tmpdir);
    snprintf(newpath, sizeof(newpath), "%s/token.new", tmpdir);
    assert_int_equal(rename(newpath, path), 0);
    assert_int_equal(kd_k8s__reload_token(c), 1); /* what a 401 triggers */
    assert_string_equal(c->cfg.token, "sa-token-two-91ac");
    assert_int_equal(kd_k8s__reload_token(c), 0);
    /* a half-written (empty) token keeps the old one */
    write_file("token", "");
    assert_int_equal(kd_k8s__reload_token(c), 0);
    assert_string_equal(c->cfg.token, "sa-token-two-91ac");
    kd_k8s_client_free(c);
    remove_sa_dir();
}

int main(void)
{
    kd_log_init("test", KD_LOG_ERROR, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_data_fields_and_contexts),
        cmocka_unit_test(test_kubeconfig_merge),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_in_cluster),
        cmocka_unit_test(test_resolution_order),
        cmocka_unit_test(test_token_rotation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
