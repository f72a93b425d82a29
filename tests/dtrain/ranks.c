/* The multi-process test harness (see ranks.h). */
#include "ranks.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int rk_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(s, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

void rk_init(struct rk_job *j, int world)
{
    memset(j, 0, sizeof(*j));
    j->world = world;
    j->port = rk_free_port();
    snprintf(j->dir, sizeof(j->dir), "/tmp/dtrain-test-XXXXXX");
    if (mkdtemp(j->dir) == NULL) {
        perror("mkdtemp");
        exit(99);
    }
}

int rk_spawn(struct rk_job *j, const char *name, int rank, const char *const *extra)
{
    int i = j->np++;
    struct rk_proc *p = &j->p[i];
    snprintf(p->log, sizeof(p->log), "%s/proc%d-rank%d.log", j->dir, i, rank);
    char env[16][160];
    int ne = 0;
    snprintf(env[ne++], 160, "RANK=%d", rank);
    snprintf(env[ne++], 160, "LOCAL_RANK=%d", rank);
    snprintf(env[ne++], 160, "WORLD_SIZE=%d", j->world);
    snprintf(env[ne++], 160, "LOCAL_WORLD_SIZE=%d", j->world);
    snprintf(env[ne++], 160, "MASTER_ADDR=127.0.0.1");
    snprintf(env[ne++], 160, "MASTER_PORT=%d", j->port);
    snprintf(env[ne++], 160, "KDET_RUN_ID=run-1");
    snprintf(env[ne++], 160, "DTRAIN_RENDEZVOUS_TIMEOUT=30");
    snprintf(env[ne++], 160, "DTRAIN_TIMEOUT=60");
    p->pid = fork();
    if (p->pid < 0) {
        perror("fork");
        exit(99);
    }
    if (p->pid == 0) {
        for (int k = 0; k < ne; k++)
            putenv(env[k]);
        for (int k = 0; extra != NULL && extra[k] != NULL; k++)
            putenv((char *)extra[k]);
        int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        char *argv[] = {"dtrain-test-rank", "--worker", (char *)name, NULL};
        execve("/proc/self/exe", argv, environ);
        _exit(98);
    }
    return i;
}

bool rk_wait(struct rk_job *j, int i, int timeout_ms)
{
    struct rk_proc *p = &j->p[i];
    for (int waited = 0; !p->done; waited += 10) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid) {
            p->done = true;
            break;
        }
        if (waited >= timeout_ms)
            return false;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return true;
}

int rk_wait_all(struct rk_job *j, int timeout_ms)
{
    int killed = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < j->np; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int spent = (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
        if (!rk_wait(j, i, timeout_ms > spent ? timeout_ms - spent : 0)) {
            kill(j->p[i].pid, SIGKILL);
            rk_wait(j, i, 5000);
            killed++;
        }
    }
    return killed;
}

int rk_code(const struct rk_job *j, int i)
{
    const struct rk_proc *p = &j->p[i];
    if (!p->done)
        return -1000;
    if (WIFSIGNALED(p->status))
        return -WTERMSIG(p->status);
    return WEXITSTATUS(p->status);
}

const char *rk_log(const struct rk_job *j, int i)
{
    static char buf[1 << 16];
    buf[0] = '\0';
    FILE *f = fopen(j->p[i].log, "r");
    if (f != NULL) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

void rk_cleanup(struct rk_job *j)
{
    for (int i = 0; i < j->np; i++) {
        if (!j->p[i].done) {
            kill(j->p[i].pid, SIGKILL);
            rk_wait(j, i, 5000);
        }
    }
    int leftovers = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        for (int i = 0; i < j->np; i++) {
            char prefix[64];
            snprintf(prefix, sizeof(prefix), "dtrain-%d-", (int)j->p[i].pid);
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
                fprintf(stderr, "left over: /dev/shm/%s\n", e->d_name);
                leftovers++;
            }
        }
    }
    if (d != NULL)
        closedir(d);
    for (int i = 0; i < j->np; i++)
        unlink(j->p[i].log);
    rmdir(j->dir);
    if (leftovers > 0) {
        fprintf(stderr, "FAIL: %d shared-memory segments left over\n", leftovers);
        exit(1);
    }
}

void rk_dispatch(int argc, char **argv, const struct rk_worker *table)
{
    if (argc < 3 || strcmp(argv[1], "--worker") != 0)
        return;
    for (int i = 0; table[i].name != NULL; i++) {
        if (strcmp(table[i].name, argv[2]) == 0) {
            int rc = table[i].fn();
            fflush(stdout);
            exit(rc);
        }
    }
    fprintf(stderr, "unknown worker %s\n", argv[2]);
    exit(97);
}
