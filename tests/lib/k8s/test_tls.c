/*
 * TLS settings end to end against a real TLS server (openssl s_server with
 * certificates made for the test): CA file, CA data, a CA the server does
 * not match, insecure-skip-tls-verify, and mutual TLS with client
 * certificate and key data taken from a kubeconfig. s_server answers with
 * an HTML page, so a completed handshake shows as KD_EPROTO ("not JSON").
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/time.h"
#include "k8s/client.h"
#include "k8s/config.h"

static char dir[64];
static pid_t srv_plain, srv_mtls;
static int port_plain, port_mtls;

static int run(const char *cmd)
{
    int st = 0;
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static pid_t start_server(int port, int mtls)
{
    char accept[32], logf[128];
    snprintf(accept, sizeof(accept), "127.0.0.1:%d", port);
    snprintf(logf, sizeof(logf), "%s/s_server-%d.log", dir, port);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(logf, "w", stdout);
        (void)f;
        dup2(1, 2);
        if (chdir(dir) != 0)
            _exit(126);
        if (mtls)
            execlp("openssl", "openssl", "s_server", "-accept", accept, "-cert", "srv.crt", "-key",
                   "srv.key", "-CAfile", "ca.crt", "-Verify", "1", "-www", "-quiet", (char *)NULL);
        else
            execlp("openssl", "openssl", "s_server", "-accept", accept, "-cert", "srv.crt", "-key",
                   "srv.key", "-www", "-quiet", (char *)NULL);
        _exit(127);
    }
    /* wait until it accepts connections */
    for (int i = 0; i < 200; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        if (ok)
            return pid;
        kd_sleep_ms(25);
    }
    fail_msg("openssl s_server did not start on port %d", port);
    return -1;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kd-k8s-tls-XXXXXX");
    assert_non_null(mkdtemp(dir));
    int rc = run("set -e; exec 2>gen.log;"
                 "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 "
                 "-subj /CN=kd-test-ca;"
                 "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.crt "
                 "-days 2 -subj /CN=kd-other-ca;"
                 "openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr "
                 "-subj /CN=127.0.0.1;"
                 "printf 'subjectAltName=IP:127.0.0.1\\n' > srv.ext;"
                 "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
                 "-out srv.crt -days 2 -extfile srv.ext;"
                 "openssl req -newkey rsa:2048 -nodes -keyout cli.key -out cli.csr "
                 "-subj /CN=kdet-controller/O=system:masters;"
                 "openssl x509 -req -in cli.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
                 "-out cli.crt -days 2");
    if (rc != 0)
        fail_msg("making test certificates failed (rc %d); see %s/gen.log", rc, dir);
    port_plain = free_port();
    srv_plain = start_server(port_plain, 0);
    port_mtls = free_port();
    srv_mtls = start_server(port_mtls, 1);
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    (void)state;
    pid_t pids[] = {srv_plain, srv_mtls};
    for (int i = 0; i < 2; i++) {
        if (pids[i] > 0) {
            kill(pids[i], SIGTERM);
            waitpid(pids[i], NULL, 0);
        }
    }
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    assert_int_equal(access(dir, F_OK), -1);
    return 0;
}

/* One GET with cfg; returns the client's code. */
static int get_once(struct kd_k8s_config *cfg, char *err)
{
    struct kd_k8s_client_opts o = {.max_retries = -1, .timeout_ms = 5000};
    struct kd_k8s_client *c = NULL;
    json_t *out = NULL;
    int rc = kd_k8s_client_new(cfg, &o, &c, err);
    if (rc == 0)
        rc = kd_k8s_get(c, &KD_K8S_NAMESPACES, NULL, "default", &out, NULL, err);
    json_decref(out);
    kd_k8s_client_free(c);
    return rc;
}

static char *slurp(const char *name, size_t *len)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 65536);
    *len = fread(buf, 1, 65535, f);
    fclose(f);
    return buf;
}

static void test_server_ca(void **state)
{
    (void)state;
    char url[64], ca[128], other[128], err[KD_ERRLEN];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d", port_plain);
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(other, sizeof(other), "%s/other.crt", dir);
    struct kd_k8s_config cfg = {.server = url, .ca_file = ca};
    int rc = get_once(&cfg, err);
    printf("CA file: %s: %s\n", kd_err_name(rc), err);
    assert_int_equal(rc, KD_EPROTO); /* handshake done, the page is not JSON */
    assert_non_null(strstr(err, "not JSON"));

    size_t len;
    cfg.ca_file = NULL;
    cfg.ca_data = slurp("ca.crt", &len);
    cfg.ca_data_len = len;
    rc = get_once(&cfg, err);
    printf("CA data: %s: %s\n", kd_err_name(rc), err);
    assert_int_equal(rc, KD_EPROTO);
    free(cfg.ca_data);
    cfg.ca_data = NULL;

    cfg.ca_file = other; /* a CA that did not sign the server's certificate */
    rc = get_once(&cfg, err);
    printf("wrong CA: %s: %s\n", kd_err_name(rc), err);
    assert_int_equal(rc, KD_EUNAUTHORIZED);

    cfg.insecure = true; /* insecure-skip-tls-verify */
    rc = get_once(&cfg, err);
    assert_int_equal(rc, KD_EPROTO);
}

static void test_mutual_tls_from_kubeconfig(void **state)
{
    (void)state;
    char cmd[1024], kc[128], err[KD_ERRLEN];
    snprintf(cmd, sizeof(cmd),
             "b() { base64 -w0 \"$1\"; };"
             "printf 'apiVersion: v1\\nkind: Config\\nclusters:\\n- name: c\\n  cluster:\\n"
             "    server: https://127.0.0.1:%d\\n    certificate-authority-data: %%s\\n"
             "contexts:\\n- name: x\\n  context: {cluster: c, user: u}\\n"
             "- name: nocert\\n  context: {cluster: c}\\ncurrent-context: x\\n"
             "users:\\n- name: u\\n  user:\\n    client-certificate-data: %%s\\n"
             "    client-key-data: %%s\\n' \"$(b ca.crt)\" \"$(b cli.crt)\" \"$(b cli.key)\" "
             "> kubeconfig",
             port_mtls);
    assert_int_equal(run(cmd), 0);
    snprintf(kc, sizeof(kc), "%s/kubeconfig", dir);
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_config_opts co = {.kubeconfig = kc};
    assert_int_equal(kd_k8s_config_load(&co, &cfg, err), 0);
    assert_non_null(cfg.cert_data);
    int rc = get_once(&cfg, err);
    printf("client certificate: %s: %s\n", kd_err_name(rc), err);
    assert_int_equal(rc, KD_EPROTO);
    kd_k8s_config_free(&cfg);
    co.context = "nocert";
    assert_int_equal(kd_k8s_config_load(&co, &cfg, err), 0);
    assert_null(cfg.cert_data);
    rc = get_once(&cfg, err);
    printf("no client certificate: %s: %s\n", kd_err_name(rc), err);
    assert_true(rc < 0);
    assert_int_not_equal(rc, KD_EPROTO); /* the server refused the handshake */
    kd_k8s_config_free(&cfg);
}

int main(void)
{
    kd_log_init("test", KD_LOG_ERROR, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_ca),
        cmocka_unit_test(test_mutual_tls_from_kubeconfig),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
