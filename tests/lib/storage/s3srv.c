/*
 * Test helper: starts a real s3rver on 127.0.0.1 (see s3srv.h).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/str.h"
#include "core/time.h"
#include "s3srv.h"

#define S3RVER_REL ".deps/s3rver/node_modules/.bin/s3rver"

const char *s3srv_program(void)
{
    static char path[PATH_MAX];
    const char *src = getenv("KD_SRC");
    snprintf(path, sizeof(path), "%s/%s", src && src[0] ? src : ".", S3RVER_REL);
    if (access(path, X_OK) != 0) {
        fprintf(stderr,
                "s3rver is not installed (%s missing): run `make deps` (it runs npm ci into "
                ".deps/s3rver from lib/storage/s3rver/package-lock.json)\n",
                path);
        return NULL;
    }
    return path;
}

static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int can_connect(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static int spawn(struct s3srv *s)
{
    const char *prog = s3srv_program();
    char port[16];
    int64_t deadline;
    if (prog == NULL)
        return -1;
    snprintf(port, sizeof(port), "%d", s->port);
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        /* never outlive the test, even when it is killed by its timeout */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* s3rver makes list continuation tokens with DES, which Node's
         * OpenSSL 3 only offers through the legacy provider */
        setenv("NODE_OPTIONS", "--openssl-legacy-provider", 1);
        /* --service-endpoint localhost: BUCKET.s3.localhost is virtual-hosted
         * addressing (libcurl resolves *.localhost to the loopback) */
        execl(prog, prog, "-d", s->dir, "-a", "127.0.0.1", "-p", port, "--silent",
              "--service-endpoint", "localhost", "--configure-bucket", s->bucket, (char *)NULL);
        _exit(127);
    }
    deadline = kd_mono_ms() + 20000;
    while (kd_mono_ms() < deadline) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            fprintf(stderr, "s3rver exited at start-up (see %s)\n", s->log);
            s->pid = 0;
            return -1;
        }
        if (can_connect(s->port))
            return 0;
        kd_sleep_ms(50);
    }
    fprintf(stderr, "s3rver did not listen on port %d within 20 s\n", s->port);
    s3srv_kill(s);
    return -1;
}

int s3srv_start(struct s3srv *s, const char *bucket)
{
    const char *tmp = getenv("TMPDIR");
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "%s/kd-s3rver-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(s->dir) == NULL)
        return -1;
    snprintf(s->log, sizeof(s->log), "%s.log", s->dir);
    kd_strlcpy(s->bucket, bucket, sizeof(s->bucket));
    s->port = free_port();
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    unsetenv("AWS_SESSION_TOKEN");
    return s->port > 0 ? spawn(s) : -1;
}

int s3srv_restart(struct s3srv *s)
{
    return spawn(s);
}

void s3srv_kill(struct s3srv *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

void s3srv_rm_tree(const char *path)
{
    struct stat sb;
    DIR *d;
    struct dirent *de;
    if (lstat(path, &sb) != 0)
        return;
    if (!S_ISDIR(sb.st_mode)) {
        unlink(path);
        return;
    }
    if ((d = opendir(path)) != NULL) {
        while ((de = readdir(d)) != NULL) {
            char sub[PATH_MAX];
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) < sizeof(sub))
                s3srv_rm_tree(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

void s3srv_stop(struct s3srv *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        for (int i = 0; i < 50; i++) {
            if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
                s->pid = 0;
                break;
            }
            kd_sleep_ms(20);
        }
        s3srv_kill(s);
    }
    if (s->dir[0]) {
        s3srv_rm_tree(s->dir);
        unlink(s->log);
    }
    s->dir[0] = '\0';
}

void s3srv_config(const struct s3srv *s, const char *prefix, struct kd_storage_config *cfg)
{
    kd_storage_config_init(cfg);
    cfg->type = KD_STORAGE_S3;
    kd_strlcpy(cfg->bucket, s->bucket, sizeof(cfg->bucket));
    kd_strlcpy(cfg->prefix, prefix, sizeof(cfg->prefix));
    snprintf(cfg->endpoint_url, sizeof(cfg->endpoint_url), "http://127.0.0.1:%d", s->port);
    cfg->path_style = 1;
    cfg->retry_base_ms = 250;
}
