/*
 * Test helper (see kdet_local.h): runs kdet-local as a child process
 * under a temp dir and connects clients to it.
 */
#include "kdet_local.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/str.h"
#include "core/time.h"
#include "k8s/config.h"

static void log_tail(const struct kl *k)
{
    char path[160], buf[4096];
    snprintf(path, sizeof(path), "%s/log", k->dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, n > (long)sizeof(buf) - 1 ? n - (long)sizeof(buf) + 1 : 0, SEEK_SET);
    size_t got = fread(buf, 1, sizeof(buf) - 1, f);
    buf[got] = '\0';
    fclose(f);
    fprintf(stderr, "---- kdet-local log (tail)\n%s----\n", buf);
}

void kl_start(struct kl *k, const char *const *extra, int port)
{
    const char *build = getenv("KD_BUILD");
    char portfile[160], logpath[160], datadir[160], portarg[16];
    const char *argv[40];
    int argc = 0;
    if (k->dir[0] == '\0') {
        snprintf(k->dir, sizeof(k->dir), "/tmp/kd-k8s-test-XXXXXX");
        assert_non_null(mkdtemp(k->dir));
    }
    snprintf(k->bin, sizeof(k->bin), "%s/bin/kdet-local", build != NULL ? build : "build");
    if (access(k->bin, X_OK) != 0)
        fail_msg("kdet-local is missing at %s (%s): the integration tests need it; build it "
                 "with `make O=%s %s`",
                 k->bin, strerror(errno), build != NULL ? build : "build", k->bin);
    snprintf(portfile, sizeof(portfile), "%s/port", k->dir);
    snprintf(logpath, sizeof(logpath), "%s/log", k->dir);
    snprintf(datadir, sizeof(datadir), "%s/data", k->dir);
    snprintf(k->kubeconfig, sizeof(k->kubeconfig), "%s/kubeconfig", k->dir);
    snprintf(portarg, sizeof(portarg), "%d", port);
    unlink(portfile);
    argv[argc++] = k->bin;
    argv[argc++] = "--port";
    argv[argc++] = portarg;
    argv[argc++] = "--port-file";
    argv[argc++] = portfile;
    argv[argc++] = "--data-dir";
    argv[argc++] = datadir;
    argv[argc++] = "--kubeconfig-out";
    argv[argc++] = k->kubeconfig;
    for (int i = 0; extra != NULL && extra[i] != NULL && argc < 38; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    k->pid = fork();
    assert_true(k->pid >= 0);
    if (k->pid == 0) {
        int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int64_t deadline = kd_mono_ms() + 10000;
    for (;;) {
        FILE *f = fopen(portfile, "r");
        if (f != NULL) {
            char line[32] = "";
            int ok = fgets(line, sizeof(line), f) != NULL;
            fclose(f);
            line[strcspn(line, "\n")] = '\0';
            if (ok && kd_parse_int(line, &k->port) == 0 && k->port > 0 &&
                access(k->kubeconfig, R_OK) == 0)
                break;
        }
        int st;
        if (waitpid(k->pid, &st, WNOHANG) == k->pid) {
            k->pid = 0;
            log_tail(k);
            fail_msg("kdet-local exited during start-up (status %d)", st);
        }
        if (kd_mono_ms() > deadline) {
            log_tail(k);
            fail_msg("kdet-local did not write %s within 10 s", portfile);
        }
        kd_sleep_ms(20);
    }
}

void kl_stop(struct kl *k)
{
    int st = 0;
    if (k->pid <= 0)
        return;
    kill(k->pid, SIGTERM);
    int64_t deadline = kd_mono_ms() + 5000;
    while (waitpid(k->pid, &st, WNOHANG) == 0) {
        if (kd_mono_ms() > deadline) {
            kill(k->pid, SIGKILL);
            waitpid(k->pid, &st, 0);
            break;
        }
        kd_sleep_ms(10);
    }
    k->pid = 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void kl_destroy(struct kl *k)
{
    kl_stop(k);
    if (k->dir[0] != '\0') {
        nftw(k->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        assert_int_equal(access(k->dir, F_OK), -1); /* nothing left over */
        k->dir[0] = '\0';
    }
}

struct kd_k8s_client *kl_client(struct kl *k, const struct kd_k8s_client_opts *opts)
{
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_config_opts co = {.kubeconfig = k->kubeconfig};
    struct kd_k8s_client *c = NULL;
    char err[KD_ERRLEN];
    int rc = kd_k8s_config_load(&co, &cfg, err);
    if (rc != 0)
        fail_msg("kubeconfig written by kdet-local: %s", err);
    rc = kd_k8s_client_new(&cfg, opts, &c, err);
    kd_k8s_config_free(&cfg);
    if (rc != 0)
        fail_msg("client: %s", err);
    return c;
}
