/*
 * `det deploy local up|down|status`: a whole kdet on one machine, run from
 * one data directory: kdet-local (API server and process kubelet), a
 * private PostgreSQL on a unix socket, the built-in CRDs and, when it is
 * installed next to det, kdet-controller. Daemons are detached (double
 * fork, own session) with pid files and logs in the data directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/fs.h"
#include "core/buf.h"
#include "core/str.h"
#include "core/time.h"
#include "http/cert.h"
#include "k8s/config.h"
#include "yaml/yaml.h"

#define DEFAULT_PORT 6443
#define START_TIMEOUT_MS 30000
#define STOP_GRACE_MS 15000
/* Output of a helper program (initdb, pg_ctl) kept for messages. */
#define CAPTURE_MAX (64 * 1024)

static const char deploy_usage[] =
    "usage: det deploy local up|down|status [--data-dir DIR] [--port N] [--gpus N]\n"
    "                                        [--plain-http]\n"
    "\n"
    "Run kdet on this machine, from one data directory:\n"
    "  up      start kdet-local (Kubernetes API on 127.0.0.1 and a process kubelet), a\n"
    "          private PostgreSQL (unix socket only) and, when installed next to det,\n"
    "          kdet-controller; install the CRDs; print 'export KUBECONFIG=...'.\n"
    "          On an existing data directory it resumes (same objects, same database).\n"
    "  down    stop them (kdet-controller, PostgreSQL, kdet-local; SIGTERM, then SIGKILL\n"
    "          after 15 s). The data stays.\n"
    "  status  each part's health; exit code 0 when everything that is installed runs.\n"
    "\n"
    "options:\n"
    "  --data-dir DIR  default $KDET_DATA_DIR, else ~/.kdet/local (as root:\n"
    "                  /var/lib/kdet/local)\n"
    "  --port N        API port on 127.0.0.1 (default: the port of the last 'up' in this\n"
    "                  data directory, else 6443; 0 picks a free one below the ephemeral\n"
    "                  range, so that it stays free for the next 'up')\n"
    "  --gpus N        with up: advertise N GPU slots instead of the GPUs NVML finds, so\n"
    "                  trials run on a machine without GPUs (they then train on CPU)\n"
    "  --plain-http    with up: kdet-controller's API over plain HTTP on 127.0.0.1; by\n"
    "                  default it is HTTPS with a certificate made here once\n"
    "                  (DIR/controller.crt, which det trusts; key DIR/controller.key, 0600)\n"
    "\n"
    "As root, PostgreSQL runs as the user $KDET_PG_USER, else 'postgres', else 'nobody'.\n";

struct deploy {
    char dir[PATH_MAX];
    char run[PATH_MAX + 8];
    char logs[PATH_MAX + 8];
    char api[PATH_MAX + 8];
    char pgdata[PATH_MAX + 16];
    char pgsock[PATH_MAX + 16];
    char kubeconfig[PATH_MAX + 16];
    char bindir[PATH_MAX];
    char pgbin[PATH_MAX];
    char pg_user[64];
    uid_t pg_uid;
    gid_t pg_gid;
    bool drop; /* run PostgreSQL as pg_uid */
    int port;
    int gpus;        /* --gpus N, else -1: what NVML finds */
    bool plain_http; /* --plain-http: the controller API without TLS */
    /* what was asked on this command line, and what the last start used (DIR/options) */
    bool port_flag, gpus_flag;
    bool saved; /* DIR/options (or an older det's DIR/port) was read */
    int saved_port, saved_gpus;
};

/* ---- small helpers ---------------------------------------------------------- */

static void progress(const char *part, const char *what, int64_t t0)
{
    char d[32];
    int64_t ms = kd_mono_ms() - t0;
    if (ms < 1000)
        snprintf(d, sizeof(d), "%lldms", (long long)ms);
    else
        snprintf(d, sizeof(d), "%.1fs", (double)ms / 1000);
    fprintf(stderr, "det: %-16s %s (%s)\n", part, what, d);
}

static int read_small(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = -1;
    if (fd >= 0) {
        n = read(fd, buf, len - 1);
        close(fd);
    }
    if (n < 0)
        n = 0;
    buf[n] = '\0';
    return n > 0 ? 0 : -1;
}

static int write_small(const char *path, const char *s, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    int rc = -1;
    if (fd >= 0) {
        size_t n = strlen(s);
        rc = write(fd, s, n) == (ssize_t)n ? 0 : -1;
        if (close(fd) != 0)
            rc = -1;
    }
    return rc;
}

static pid_t read_pid(const char *path)
{
    char buf[64];
    int64_t v;
    if (read_small(path, buf, sizeof(buf)) != 0)
        return 0;
    buf[strcspn(buf, "\n ")] = '\0';
    if (kd_parse_i64(buf, &v) != 0 || v <= 1 || v > INT32_MAX)
        return 0;
    return (pid_t)v;
}

/*
 * Whether pid runs (not a zombie) a program whose command line contains
 * `name` and the data dir `dir` (every part gets a path in it as an argument).
 */
static bool alive(pid_t pid, const char *name, const char *dir)
{
    char path[64], buf[4096];
    if (pid <= 1 || kill(pid, 0) != 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (read_small(path, buf, sizeof(buf)) == 0) {
        const char *p = strrchr(buf, ')');
        if (p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'))
            return false;
    }
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[n] = '\0';
    /* the program, and our data dir in its arguments: never another deployment's process */
    return strstr(buf, name) != NULL && strstr(buf, dir) != NULL;
}

/* Close every fd >= lo but `keep` (-1: none). */
static void close_fds_from(int lo, int keep)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) {
        for (int fd = lo; fd < 1024; fd++)
            if (fd != keep)
                close(fd);
        return;
    }
    int dfd = dirfd(d);
    struct dirent *e;
    int fds[1024], n = 0;
    while ((e = readdir(d)) != NULL && n < 1024) {
        int64_t v;
        if (kd_parse_i64(e->d_name, &v) == 0 && v >= lo && v != dfd && v != keep)
            fds[n++] = (int)v;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* In a child: become the PostgreSQL user. Returns 0 or -errno. */
static int drop_to(const struct deploy *d)
{
    if (!d->drop)
        return 0;
    if (setgroups(0, NULL) != 0 || setgid(d->pg_gid) != 0 || setuid(d->pg_uid) != 0)
        return -errno;
    return 0;
}

/*
 * Start argv as a daemon: double fork, its own session, stdin /dev/null,
 * stdout and stderr appended to `log`, no other fds, env additions `env`
 * (NULL-terminated "K=V"). Returns the daemon's pid, or -errno.
 */
static pid_t spawn_daemon(char *const *argv, char *const *env, const char *log)
{
    int pfd[2] = {-1, -1}, st;
    pid_t child, pid = -ECHILD;
    int32_t v = -1;
    char drain[16];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        pid = -errno;
        goto out;
    }
    child = fork();
    if (child < 0) {
        pid = -errno;
        goto out;
    }
    if (child == 0) {
        /* the intermediate child: a new session, the daemon, then exit (never returns) */
        setsid();
        pid_t g = fork();
        if (g != 0) {
            v = (int32_t)g;
            _exit(write(pfd[1], &v, sizeof(v)) == sizeof(v) && g > 0 ? 0 : 1);
        }
        int in = open("/dev/null", O_RDONLY);
        int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (in < 0 || lfd < 0)
            _exit(126);
        dup2(in, 0);
        dup2(lfd, 1);
        dup2(lfd, 2);
        /* pfd[1] is close-on-exec: the parent reads EOF once exec has happened */
        close_fds_from(3, pfd[1]);
        for (size_t i = 0; env && env[i]; i++)
            putenv(env[i]);
        signal(SIGPIPE, SIG_DFL);
        execv(argv[0], argv);
        dprintf(2, "det: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    pfd[1] = -1;
    if (read(pfd[0], &v, sizeof(v)) == sizeof(v) && v > 0)
        pid = v;
    while (read(pfd[0], drain, sizeof(drain)) > 0)
        ; /* EOF: the daemon has exec'd (or died) */
    waitpid(child, &st, 0);
out:
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    return pid;
}

/*
 * Run argv to completion (as the PostgreSQL user when `drop`, after
 * checking that user can enter the data dir), output captured into out
 * (capped; the rest is drained). Returns the exit status, or -1.
 */
static int run_capture(const struct deploy *d, bool drop, char *const *argv, struct kd_buf *out)
{
    int pfd[2] = {-1, -1}, st = 0, rc = -1;
    char buf[4096];
    ssize_t n;
    if (pipe2(pfd, O_CLOEXEC) != 0)
        goto out;
    pid_t pid = fork();
    if (pid < 0)
        goto out;
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close_fds_from(3, -1);
        if (drop) {
            int r = drop_to(d);
            if (r != 0) {
                dprintf(2, "cannot switch to user %s: %s\n", d->pg_user, strerror(-r));
                _exit(126);
            }
            if (access(d->dir, X_OK) != 0) {
                dprintf(2,
                        "user %s (who runs PostgreSQL) cannot enter %s: %s. Choose a --data-dir "
                        "whose parent directories that user may enter (e.g. under /var/lib or "
                        "/tmp), or set KDET_PG_USER.\n",
                        d->pg_user, d->dir, strerror(errno));
                _exit(126);
            }
        }
        umask(077);
        execv(argv[0], argv);
        dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    pfd[1] = -1;
    while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
        if (kd_buf_append(out, buf, (size_t)n) != 0)
            continue; /* over the cap: drain the rest */
    if (waitpid(pid, &st, 0) == pid)
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
out:
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    return rc;
}

/* SIGTERM, wait up to grace_ms, then SIGKILL to the process group and the process. */
static void stop_pid(pid_t pid, const char *name, const char *dir, int64_t grace_ms, bool *killed)
{
    int64_t t0 = kd_mono_ms();
    *killed = false;
    if (!alive(pid, name, dir))
        return;
    kill(pid, SIGTERM);
    while (alive(pid, name, dir) && kd_mono_ms() - t0 < grace_ms)
        kd_sleep_ms(50);
    if (alive(pid, name, dir)) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        *killed = true;
        while (alive(pid, name, dir) && kd_mono_ms() - t0 < grace_ms + 5000)
            kd_sleep_ms(50);
    }
}

static void tail_log(const char *path)
{
    char buf[2048];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    lseek(fd, end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0, SEEK_SET);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n > 0) {
        buf[n] = '\0';
        fprintf(stderr, "det: last lines of %s:\n%s%s", path, buf, buf[n - 1] == '\n' ? "" : "\n");
    }
}

/* ---- locating things ------------------------------------------------------ */

static bool find_in(const char *dir, const char *name, char *out, size_t len)
{
    char p[PATH_MAX + 128];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    if (access(p, X_OK) == 0) {
        kd_strlcpy(out, p, len);
        return true;
    }
    return false;
}

/* A program next to det, else on PATH. */
static bool find_prog(const struct deploy *d, const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    char dir[PATH_MAX];
    if (find_in(d->bindir, name, out, len))
        return true;
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n < sizeof(dir)) {
            memcpy(dir, path, n);
            dir[n] = '\0';
            if (find_in(dir, name, out, len))
                return true;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return false;
}

/* The directory of PostgreSQL's server programs (initdb, pg_ctl, postgres, createdb). */
static bool find_pgbin(struct deploy *d)
{
    static const char *const vers[] = {"17", "16", "15", "14", "13", NULL};
    char p[PATH_MAX], real[PATH_MAX];
    if (find_prog(d, "pg_ctl", p, sizeof(p)) && realpath(p, real) != NULL) {
        char *slash = strrchr(real, '/');
        *slash = '\0';
        snprintf(d->pgbin, sizeof(d->pgbin), "%s", real);
        return true;
    }
    for (size_t i = 0; vers[i]; i++) {
        snprintf(p, sizeof(p), "/usr/lib/postgresql/%s/bin", vers[i]);
        if (find_in(p, "pg_ctl", real, sizeof(real))) {
            snprintf(d->pgbin, sizeof(d->pgbin), "%s", p);
            return true;
        }
    }
    return false;
}

static int mkdir_mode(const char *p, mode_t mode)
{
    int rc = 0;
    if (mkdir(p, mode) != 0 && errno != EEXIST) {
        det_err("cannot create %s: %s", p, strerror(errno));
        rc = DET_EXIT_ERROR;
    } else if (chmod(p, mode) != 0) {
        det_err("cannot chmod %s: %s", p, strerror(errno));
        rc = DET_EXIT_ERROR;
    }
    return rc;
}

static int mkdir_p(const char *path, mode_t mode)
{
    int rc = kd_mkdir_p(path, mode);
    if (rc != 0) {
        det_err("cannot create %s: %s", path, strerror(-rc));
        return DET_EXIT_ERROR;
    }
    return mkdir_mode(path, mode); /* the mode exactly, whatever the umask or an older dir */
}

/* ---- the options of the last start (DIR/options) ----------------------------- */

/*
 * DIR/options holds the options kdet-local was last started with, one
 * `name=value` a line (port=N, gpus=N or gpus=auto), so that an `up` after
 * `down` or after a crash starts it the same way. An older det kept only
 * DIR/port: that is read when there is no options file.
 */
static void read_options(struct deploy *d)
{
    char buf[512], path[PATH_MAX + 16];
    int port = DEFAULT_PORT, gpus = -1;
    bool any = false;
    snprintf(path, sizeof(path), "%s/options", d->dir);
    if (read_small(path, buf, sizeof(buf)) == 0) {
        char *save = NULL;
        for (char *line = strtok_r(buf, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            int v = 0;
            if (strncmp(line, "port=", 5) == 0 && kd_parse_int(line + 5, &v) == 0 && v >= 0 &&
                v <= 65535) {
                port = v;
                any = true;
            } else if (strcmp(line, "gpus=auto") == 0) {
                gpus = -1;
                any = true;
            } else if (strncmp(line, "gpus=", 5) == 0 && kd_parse_int(line + 5, &v) == 0 &&
                       v >= 0 && v <= 64) {
                gpus = v;
                any = true;
            }
        }
    } else {
        snprintf(path, sizeof(path), "%s/port", d->dir);
        if (read_small(path, buf, sizeof(buf)) == 0) {
            int v = 0;
            buf[strcspn(buf, "\n")] = '\0';
            if (kd_parse_int(buf, &v) == 0 && v >= 0 && v <= 65535) {
                port = v;
                any = true;
            }
        }
    }
    d->saved = any;
    d->saved_port = port;
    d->saved_gpus = gpus;
}

/* Records the options kdet-local now runs with (d->port is the actual port). */
static int write_options(const struct deploy *d)
{
    char buf[128], path[PATH_MAX + 16], tmp[PATH_MAX + 32];
    char gpus[16];
    if (d->gpus < 0)
        snprintf(gpus, sizeof(gpus), "auto");
    else
        snprintf(gpus, sizeof(gpus), "%d", d->gpus);
    snprintf(buf, sizeof(buf), "port=%d\ngpus=%s\n", d->port, gpus);
    snprintf(path, sizeof(path), "%s/options", d->dir);
    snprintf(tmp, sizeof(tmp), "%s/options.tmp", d->dir);
    if (write_small(tmp, buf, 0644) != 0 || rename(tmp, path) != 0) {
        det_err("cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return DET_EXIT_ERROR;
    }
    /* DIR/port as before, for scripts that read it */
    snprintf(path, sizeof(path), "%s/port", d->dir);
    snprintf(buf, sizeof(buf), "%d\n", d->port);
    write_small(path, buf, 0644);
    return 0;
}

static void fmt_gpus(int gpus, char *buf, size_t len)
{
    if (gpus < 0)
        snprintf(buf, len, "auto");
    else
        snprintf(buf, len, "%d", gpus);
}

/*
 * `up` on a running kdet-local: an option given on the command line that
 * differs from the one it runs with cannot be applied without a restart (its
 * node's capacity and its port are fixed at start). Returns 0 when every
 * flag matches, else writes into msg which option differs and what to run.
 */
static int running_conflict(const struct deploy *d, char *msg, size_t len)
{
    char want[16], have[16];
    if (d->gpus_flag && d->gpus != d->saved_gpus) {
        fmt_gpus(d->gpus, want, sizeof(want));
        fmt_gpus(d->saved_gpus, have, sizeof(have));
        snprintf(msg, len,
                 "--gpus %s: kdet-local is already running with --gpus %s and cannot change it "
                 "while it runs; run 'det deploy local down --data-dir %s', then 'det deploy "
                 "local up --data-dir %s --gpus %s'",
                 want, have, d->dir, d->dir, want);
        return -1;
    }
    if (d->port_flag && d->port != 0 && d->port != d->saved_port) {
        snprintf(msg, len,
                 "--port %d: kdet-local is already running on port %d and cannot move while it "
                 "runs; run 'det deploy local down --data-dir %s', then 'det deploy local up "
                 "--data-dir %s --port %d'",
                 d->port, d->saved_port, d->dir, d->dir, d->port);
        return -1;
    }
    return 0;
}

static int setup(struct deploy *d, const struct det_args *a, bool create)
{
    char self[PATH_MAX], raw[PATH_MAX];
    int rc = 0;
    memset(d, 0, sizeof(*d));
    d->plain_http = a->plain_http;
    if (a->data_dir != NULL && a->data_dir[0] != '\0')
        snprintf(raw, sizeof(raw), "%s", a->data_dir);
    else
        det_deploy_default_dir(raw, sizeof(raw));
    if (create) {
        rc = mkdir_p(raw, geteuid() == 0 ? 0711 : 0700);
        if (rc != 0)
            goto out;
    }
    if (realpath(raw, d->dir) == NULL) {
        det_err("data directory %s: %s%s", raw, strerror(errno),
                errno == ENOENT ? " (nothing was deployed there: run 'det deploy local up')" : "");
        rc = errno == ENOENT ? DET_EXIT_NOTFOUND : DET_EXIT_ERROR;
        goto out;
    }
    snprintf(d->run, sizeof(d->run), "%s/run", d->dir);
    snprintf(d->logs, sizeof(d->logs), "%s/logs", d->dir);
    snprintf(d->api, sizeof(d->api), "%s/api", d->dir);
    snprintf(d->pgdata, sizeof(d->pgdata), "%s/postgres", d->dir);
    snprintf(d->pgsock, sizeof(d->pgsock), "%s/run/pg", d->dir);
    snprintf(d->kubeconfig, sizeof(d->kubeconfig), "%s/kubeconfig", d->dir);
    if (strlen(d->pgsock) + strlen("/.s.PGSQL.5432") >= 108) {
        det_err("data directory %s: the path is too long for PostgreSQL's unix socket (%zu "
                "bytes at most)",
                d->dir, (size_t)108 - strlen("/run/pg/.s.PGSQL.5432"));
        rc = DET_EXIT_USAGE;
        goto out;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        snprintf(d->bindir, sizeof(d->bindir), "%s", self);
    }
    /* the PostgreSQL user */
    if (geteuid() == 0) {
        const char *names[] = {getenv("KDET_PG_USER"), "postgres", "nobody"};
        for (size_t i = 0; i < 3 && !d->drop; i++) {
            struct passwd pw, *res = NULL;
            char pwbuf[4096];
            if (names[i] == NULL || names[i][0] == '\0')
                continue;
            if (getpwnam_r(names[i], &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res != NULL &&
                pw.pw_uid != 0) {
                d->drop = true;
                d->pg_uid = pw.pw_uid;
                d->pg_gid = pw.pw_gid;
                snprintf(d->pg_user, sizeof(d->pg_user), "%s", names[i]);
            } else if (i == 0) {
                det_err("KDET_PG_USER=%s: no such user (or it is root)", names[i]);
                rc = DET_EXIT_USAGE;
                goto out;
            }
        }
    } else {
        struct passwd pw, *res = NULL;
        char pwbuf[4096];
        if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res != NULL)
            snprintf(d->pg_user, sizeof(d->pg_user), "%s", pw.pw_name);
    }
    /* the options: a flag, else what the last start used here, else the default */
    read_options(d);
    int port = d->saved ? d->saved_port : DEFAULT_PORT;
    if (a->port != NULL) {
        if (kd_parse_int(a->port, &port) != 0 || port < 0 || port > 65535) {
            det_err("--port %s: expected a port number in 0..65535", a->port);
            rc = DET_EXIT_USAGE;
            goto out;
        }
        d->port_flag = true;
    }
    d->port = port;
    d->gpus = d->saved ? d->saved_gpus : -1;
    if (a->gpus != NULL) {
        if (strcmp(a->gpus, "auto") == 0) {
            d->gpus = -1;
        } else if (kd_parse_int(a->gpus, &d->gpus) != 0 || d->gpus < 0 || d->gpus > 64) {
            det_err("--gpus %s: expected a number of GPU slots in 0..64, or auto", a->gpus);
            rc = DET_EXIT_USAGE;
            goto out;
        }
        d->gpus_flag = true;
    }
out:
    return rc;
}

static void pidfile(const struct deploy *d, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s.pid", d->run, name);
}

static pid_t pg_pid(const struct deploy *d)
{
    char p[PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/postmaster.pid", d->pgdata);
    return read_pid(p);
}

/*
 * A bearer token file (mode 0600, made once with 32 random bytes in hex):
 * kdet-local's (DIR/api-token, which every client finds in the kubeconfig)
 * and the controller API's user token (DIR/user-token). Never printed.
 */
static int token_file(const char *path, const char *what)
{
    unsigned char raw[32];
    char hex[2 * sizeof(raw) + 2];
    int rc = 0;
    if (access(path, R_OK) != 0) {
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
            det_err("cannot make a %s token: getrandom: %s", what, strerror(errno));
            rc = DET_EXIT_ERROR;
            goto out;
        }
        for (size_t i = 0; i < sizeof(raw); i++)
            snprintf(hex + 2 * i, 3, "%02x", raw[i]);
        hex[2 * sizeof(raw)] = '\n';
        hex[2 * sizeof(raw) + 1] = '\0';
        if (write_small(path, hex, 0600) != 0) {
            det_err("cannot write %s: %s", path, strerror(errno));
            rc = DET_EXIT_ERROR;
            goto out;
        }
    }
    if (chmod(path, 0600) != 0) {
        det_err("cannot make %s private: %s", path, strerror(errno));
        rc = DET_EXIT_ERROR;
    }
out:
    memset(raw, 0, sizeof(raw));
    memset(hex, 0, sizeof(hex));
    return rc;
}

/* ---- the API server -------------------------------------------------------- */

/* GET /version through the kubeconfig. 0 and the gitVersion, or a KD_E* code. */
static int api_version(const struct deploy *d, char *ver, size_t len, char *err)
{
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_client *c = NULL;
    struct kd_k8s_client_opts o = {
        .max_retries = -1, .timeout_ms = 3000, .connect_timeout_ms = 2000};
    json_t *v = NULL;
    int rc = kd_k8s_config_kubeconfig(d->kubeconfig, NULL, &cfg, err);
    if (rc == 0)
        rc = kd_k8s_client_new(&cfg, &o, &c, err);
    if (rc == 0)
        rc = kd_k8s_request(c, "GET", "/version", NULL, NULL, &v, NULL, err);
    if (rc == 0)
        snprintf(ver, len, "%s",
                 json_string_value(json_object_get(v, "gitVersion"))
                     ? json_string_value(json_object_get(v, "gitVersion"))
                     : "?");
    json_decref(v);
    kd_k8s_client_free(c);
    kd_k8s_config_free(&cfg);
    return rc;
}

static int free_port(void);

static int up_api(struct deploy *d)
{
    char pf[PATH_MAX + 32], portfile[PATH_MAX + 32], log[PATH_MAX + 32], prog[PATH_MAX + 64];
    char port[16], ver[64], err[KD_ERRLEN] = "", pbuf[32];
    int64_t t0 = kd_mono_ms();
    int rc = 0;
    pidfile(d, "kdet-local", pf, sizeof(pf));
    snprintf(portfile, sizeof(portfile), "%s/kdet-local.port", d->run);
    snprintf(log, sizeof(log), "%s/kdet-local.log", d->logs);
    pid_t pid = read_pid(pf);
    if (alive(pid, "kdet-local", d->dir) && api_version(d, ver, sizeof(ver), err) == 0) {
        char msg[PATH_MAX * 2 + 512];
        if (running_conflict(d, msg, sizeof(msg)) != 0) {
            det_err("%s", msg);
            rc = DET_EXIT_USAGE;
            goto out;
        }
        progress("kdet-local", "already running", t0);
        goto out;
    }
    if (!find_prog(d, "kdet-local", prog, sizeof(prog))) {
        det_err("kdet-local not found next to det (%s) nor on PATH; build it with 'make' or "
                "install it",
                d->bindir);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    unlink(portfile);
    /* Every client presents this token: det, kdet-controller and kubectl find it in the
     * kubeconfig kdet-local writes (0600); kept across restarts so running clients go on. */
    char tokfile[PATH_MAX + 32];
    snprintf(tokfile, sizeof(tokfile), "%s/api-token", d->dir);
    rc = token_file(tokfile, "kdet-local");
    if (rc != 0)
        goto out;
    /* --port 0: a free port, kept by the next ups (free_port says where it is taken from) */
    if (d->port == 0 && (d->port = free_port()) < 0) {
        det_err("cannot find a free port for kdet-local: %s", strerror(errno));
        rc = DET_EXIT_ERROR;
        goto out;
    }
    snprintf(port, sizeof(port), "%d", d->port);
    char gpus[16];
    snprintf(gpus, sizeof(gpus), "%d", d->gpus);
    char *argv[] = {prog,          "--data-dir",
                    d->api,        "--port",
                    port,          "--port-file",
                    portfile,      "--kubeconfig-out",
                    d->kubeconfig, "--token-file",
                    tokfile,       NULL,
                    NULL,          NULL};
    if (d->gpus >= 0) {
        argv[11] = "--fake-gpus";
        argv[12] = gpus;
    }
    /* Pods run as local processes: det's own directory (kdet-launch, the
     * examples) comes first on their PATH, so they find the kdet programs
     * installed beside det. */
    const char *path = getenv("PATH");
    char *pathenv = kd_xasprintf("PATH=%s%s%s", d->bindir, path ? ":" : "", path ? path : "");
    char *env[] = {pathenv, NULL};
    pid = spawn_daemon(argv, env, log);
    free(pathenv);
    if (pid < 0) {
        det_err("cannot start %s: %s", prog, strerror(-pid));
        rc = DET_EXIT_ERROR;
        goto out;
    }
    snprintf(pbuf, sizeof(pbuf), "%d\n", (int)pid);
    write_small(pf, pbuf, 0644);
    /* wait for the port file, then for /version */
    while (kd_mono_ms() - t0 < START_TIMEOUT_MS) {
        if (!alive(pid, "kdet-local", d->dir)) {
            det_err("kdet-local exited while starting (port %d in use?)", d->port);
            tail_log(log);
            unlink(pf);
            rc = DET_EXIT_ERROR;
            goto out;
        }
        if (read_small(portfile, pbuf, sizeof(pbuf)) == 0 &&
            api_version(d, ver, sizeof(ver), err) == 0)
            break;
        kd_sleep_ms(50);
    }
    if (api_version(d, ver, sizeof(ver), err) != 0) {
        det_err("kdet-local did not answer within %d s: %s", START_TIMEOUT_MS / 1000, err);
        tail_log(log);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    pbuf[strcspn(pbuf, "\n")] = '\0';
    int actual = d->port;
    if (kd_parse_int(pbuf, &actual) == 0)
        d->port = actual;
    rc = write_options(d);
    if (rc != 0)
        goto out;
    char what[128], g[16];
    fmt_gpus(d->gpus, g, sizeof(g));
    snprintf(what, sizeof(what), "started on 127.0.0.1:%d (pid %d, --gpus %s)", d->port, (int)pid,
             g);
    progress("kdet-local", what, t0);
out:
    return rc;
}

/* ---- PostgreSQL ------------------------------------------------------------- */

static int pg_run(const struct deploy *d, const char *prog, char *const *args, struct kd_buf *out)
{
    char path[PATH_MAX + 32];
    char *argv[16];
    size_t n = 0;
    snprintf(path, sizeof(path), "%s/%s", d->pgbin, prog);
    argv[n++] = path;
    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    kd_buf_reset(out);
    return run_capture(d, d->drop, argv, out);
}

static int up_pg(struct deploy *d)
{
    struct kd_buf out = KD_BUF_INIT(CAPTURE_MAX);
    char ver[PATH_MAX + 32], log[PATH_MAX + 32], conf[PATH_MAX + 32];
    int64_t t0 = kd_mono_ms();
    int rc = 0, r;
    if (!find_pgbin(d)) {
        det_err("PostgreSQL's server programs (initdb, pg_ctl) were not found on PATH nor in "
                "/usr/lib/postgresql/*/bin: install the Debian package postgresql");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    snprintf(ver, sizeof(ver), "%s/PG_VERSION", d->pgdata);
    snprintf(log, sizeof(log), "%s/postgres.log", d->logs);
    if (d->drop) {
        /* the PostgreSQL user owns its data, socket directory and log */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        if (chown(log, d->pg_uid, d->pg_gid) != 0 || chown(d->pgsock, d->pg_uid, d->pg_gid) != 0) {
            det_err("cannot hand %s and %s to user %s: %s", log, d->pgsock, d->pg_user,
                    strerror(errno));
            rc = DET_EXIT_ERROR;
            goto out;
        }
    }
    if (access(ver, F_OK) != 0) {
        rc = mkdir_mode(d->pgdata, 0700);
        if (rc != 0)
            goto out;
        if (d->drop && chown(d->pgdata, d->pg_uid, d->pg_gid) != 0) {
            det_err("cannot hand %s to user %s: %s", d->pgdata, d->pg_user, strerror(errno));
            rc = DET_EXIT_ERROR;
            goto out;
        }
        char *args[] = {"-D",   d->pgdata,           "-U", "kdet", "-A", "trust", "-E",
                        "UTF8", "--no-instructions", NULL};
        r = pg_run(d, "initdb", args, &out);
        if (r != 0) {
            det_err("initdb %s failed (exit %d) as user %s:\n%s", d->pgdata, r,
                    d->pg_user[0] ? d->pg_user : "?", kd_buf_str(&out));
            rc = DET_EXIT_ERROR;
            goto out;
        }
        /* unix socket only, in the data directory's run/pg */
        snprintf(conf, sizeof(conf), "%s/postgresql.conf", d->pgdata);
        FILE *f = fopen(conf, "a");
        if (f == NULL ||
            fprintf(f,
                    "\n# det deploy local: no TCP, a private unix socket\n"
                    "listen_addresses = ''\n"
                    "unix_socket_directories = '%s'\n",
                    d->pgsock) < 0 ||
            fclose(f) != 0) {
            det_err("cannot write %s: %s", conf, strerror(errno));
            rc = DET_EXIT_ERROR;
            goto out;
        }
        progress("postgres", "initialized a new database cluster", t0);
    }
    t0 = kd_mono_ms();
    if (pg_pid(d) > 0 && alive(pg_pid(d), "postgres", d->dir)) {
        progress("postgres", "already running", t0);
        goto out;
    }
    char *args[] = {"-D", d->pgdata, "-l", log, "-w", "-t", "60", "start", NULL};
    r = pg_run(d, "pg_ctl", args, &out);
    if (r != 0) {
        det_err("pg_ctl start failed (exit %d):\n%s", r, kd_buf_str(&out));
        tail_log(log);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    char *cargs[] = {"-h", d->pgsock, "-U", "kdet", "kdet", NULL};
    r = pg_run(d, "createdb", cargs, &out);
    if (r != 0 && strstr(kd_buf_str(&out), "already exists") == NULL) {
        det_err("createdb kdet failed (exit %d):\n%s", r, kd_buf_str(&out));
        rc = DET_EXIT_ERROR;
        goto out;
    }
    char what[PATH_MAX + 160];
    snprintf(what, sizeof(what), "started (pid %d, socket %s, user %s)", (int)pg_pid(d), d->pgsock,
             d->pg_user);
    progress("postgres", what, t0);
out:
    kd_buf_free(&out);
    return rc;
}

/* ---- CRDs ------------------------------------------------------------------ */

static int open_kube(const struct deploy *d, struct det_kube *k)
{
    struct det_args a = {0};
    a.kubeconfig = d->kubeconfig;
    return det_kube_open(&a, k);
}

/* Create obj (cluster-scoped), or replace it when it exists. */
static int apply_object(struct det_kube *k, const struct kd_k8s_gvr *gvr, const char *kind,
                        json_t *obj)
{
    struct kd_k8s_status st = {0};
    json_t *cur = NULL;
    char err[KD_ERRLEN] = "";
    int rc = 0;
    const char *name = kd_k8s_meta_str(obj, "name");
    int r = kd_k8s_create(k->c, gvr, NULL, obj, NULL, &st, err);
    if (r == KD_EEXIST) {
        r = kd_k8s_get(k->c, gvr, NULL, name, &cur, &st, err);
        if (r == 0) {
            json_object_set(json_object_get(obj, "metadata"), "resourceVersion",
                            json_object_get(json_object_get(cur, "metadata"), "resourceVersion"));
            r = kd_k8s_update(k->c, gvr, NULL, NULL, obj, NULL, &st, err);
        }
    }
    if (r != 0)
        rc = det_kube_fail(k, r, &st, err, "apply", gvr, kind, name);
    json_decref(cur);
    kd_k8s_status_free(&st);
    return rc;
}

/* Apply every document of a built-in manifest (file names it in messages). */
static int apply_builtin(struct det_kube *k, const struct kd_k8s_gvr *gvr, const char *kind,
                         const char *file, const unsigned char *data, size_t len)
{
    json_t *docs = NULL, *obj;
    char err[KD_ERRLEN] = "";
    size_t i;
    int rc = 0;
    if (kd_yaml_parse_stream(file, (const char *)data, len, &docs, err) != 0) {
        det_err("built-in %s: %s", file, err);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    json_array_foreach(docs, i, obj)
    {
        if (json_is_object(obj) && (rc = apply_object(k, gvr, kind, obj)) != 0)
            goto out;
    }
out:
    json_decref(docs);
    return rc;
}

/* Whether experiments and trials are served. */
static bool crds_served(struct det_kube *k)
{
    json_t *doc = NULL;
    int found = 0;
    if (kd_k8s_request(k->c, "GET", "/apis/kdet.io/v1alpha1", NULL, NULL, &doc, NULL, NULL) == 0) {
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(doc, "resources"), i, r)
        {
            const char *n = json_string_value(json_object_get(r, "name"));
            if (n && (strcmp(n, "experiments") == 0 || strcmp(n, "trials") == 0))
                found++;
        }
    }
    json_decref(doc);
    return found == 2;
}

static int up_crds(const struct deploy *d)
{
    struct det_kube k = {0};
    int64_t t0 = kd_mono_ms();
    int rc = open_kube(d, &k);
    if (rc != 0)
        goto out;
    static const struct kd_k8s_gvr crd_gvr =
        KD_K8S_GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    static const struct kd_k8s_gvr pc_gvr =
        KD_K8S_GVR("scheduling.k8s.io", "v1", "priorityclasses");
    rc = apply_builtin(&k, &crd_gvr, "CRD", "crds/experiments.yaml", det_crd_experiments,
                       det_crd_experiments_len);
    if (rc == 0)
        rc = apply_builtin(&k, &crd_gvr, "CRD", "crds/trials.yaml", det_crd_trials,
                           det_crd_trials_len);
    if (rc == 0)
        rc =
            apply_builtin(&k, &crd_gvr, "CRD", "crds/tasks.yaml", det_crd_tasks, det_crd_tasks_len);
    if (rc == 0)
        rc = apply_builtin(&k, &pc_gvr, "PriorityClass", "manifests/priorityclasses.yaml",
                           det_priorityclasses, det_priorityclasses_len);
    if (rc != 0)
        goto out;
    while (!crds_served(&k) && kd_mono_ms() - t0 < 10000)
        kd_sleep_ms(50);
    if (!crds_served(&k)) {
        det_err("the CRDs were applied but kdet.io/v1alpha1 is not served after 10 s");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    progress("crds", "experiments.kdet.io, trials.kdet.io and the kdet PriorityClasses applied",
             t0);
out:
    det_kube_close(&k);
    return rc;
}

/* ---- kdet-controller ----------------------------------------------------------- */

/* DIR/controller.crt: the controller API's certificate, which det trusts. */
static void controller_crt(const struct deploy *d, char *buf, size_t len)
{
    snprintf(buf, len, "%s/controller.crt", d->dir);
}

/* GET url/healthz within 2 s (trusting d's controller certificate): whether it answered 200. */
static bool healthz(const struct deploy *d, const char *url)
{
    char crt[PATH_MAX + 32];
    controller_crt(d, crt, sizeof(crt));
    char *u = kd_xasprintf("%s/healthz", url);
    long code = 0;
    CURL *h = curl_easy_init();
    if (h != NULL) {
        curl_easy_setopt(h, CURLOPT_URL, u);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_CAINFO, crt);
        if (curl_easy_perform(h) == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(h);
    }
    free(u);
    return code == 200;
}

/* Whether port is free to listen on at 127.0.0.1 (port 0: the kernel picks one, put in *got). */
static bool port_free(int port, int *got)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
              bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
              getsockname(fd, (struct sockaddr *)&sa, &sl) == 0;
    if (ok && got != NULL)
        *got = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return ok;
}

/*
 * A free TCP port on 127.0.0.1 for a listener that keeps its port across ups, or -1. It is
 * taken below the range the kernel hands out to outgoing connections
 * (net.ipv4.ip_local_port_range, 32768 and up by default): a port from that range, free
 * after a down, can meanwhile be the source port of any program's connection, and the next
 * up could not listen on it. Only when no port below is free does the kernel pick one.
 */
#define KEPT_PORTS 12768 /* how many ports below the ephemeral range: 20000..32767 by default */

static int free_port(void)
{
    int lo = 32768, port = -1;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &lo) != 1)
            lo = 32768;
        fclose(f);
    }
    int base = lo - KEPT_PORTS > 1024 ? lo - KEPT_PORTS : 1024, span = lo - base;
    uint32_t r;
    for (int i = 0; span > 0 && i < 64 && getrandom(&r, sizeof(r), 0) == sizeof(r); i++) {
        int p = base + (int)(r % (uint32_t)span);
        if (port_free(p, NULL))
            return p;
    }
    return port_free(0, &port) ? port : -1;
}

/*
 * The user API's bearer token (a file of mode 0600, made once with 32
 * random bytes in hex) and the API's URL (a free port, kept across ups):
 * det reads both back (cli/api.c). The token is never printed.
 */
static int controller_api(const struct deploy *d, char *tokfile, size_t toklen, char *listen,
                          size_t listenlen)
{
    char path[PATH_MAX + 32], url[128];
    int rc = 0, port = -1;
    snprintf(tokfile, toklen, "%s/user-token", d->dir);
    rc = token_file(tokfile, "user");
    if (rc != 0)
        goto out;
    snprintf(path, sizeof(path), "%s/controller-url", d->dir);
    if (read_small(path, url, sizeof(url)) == 0) {
        const char *colon = strrchr(url, ':');
        int64_t v;
        url[strcspn(url, "\r\n")] = '\0';
        if (colon != NULL && kd_parse_i64(colon + 1, &v) == 0 && v > 0 && v < 65536)
            port = (int)v;
    }
    if (port < 0)
        port = free_port();
    if (port < 0) {
        det_err("cannot find a free port for the controller API: %s", strerror(errno));
        rc = DET_EXIT_ERROR;
        goto out;
    }
    snprintf(url, sizeof(url), "%s://127.0.0.1:%d\n", d->plain_http ? "http" : "https", port);
    if (write_small(path, url, 0644) != 0) {
        det_err("cannot write %s: %s", path, strerror(errno));
        rc = DET_EXIT_ERROR;
        goto out;
    }
    snprintf(listen, listenlen, "127.0.0.1:%d", port);
out:
    return rc;
}

/*
 * The controller API's certificate: self-signed for 127.0.0.1 and
 * localhost, made once (key DIR/controller.key 0600, certificate
 * DIR/controller.crt 0644) and kept, so that what det trusts stays valid.
 */
static int controller_cert(const struct deploy *d)
{
    char err[KD_ERRLEN] = "", *cert = NULL, *key = NULL;
    struct kd_http_cert_opts o = {.cn = "kdet-controller", .san = "IP:127.0.0.1,DNS:localhost"};
    int rc = kd_http_cert_keep(d->dir, "controller", &o, &cert, &key, err);
    if (rc != 0) {
        det_err("cannot make the controller API's certificate: %s", err);
        rc = DET_EXIT_ERROR;
    }
    if (key != NULL)
        memset(key, 0, strlen(key));
    free(key);
    free(cert);
    return rc;
}

static int up_controller(const struct deploy *d, bool *present)
{
    char prog[PATH_MAX + 64], pf[PATH_MAX + 32], log[PATH_MAX + 32], pbuf[32];
    int64_t t0 = kd_mono_ms();
    int rc = 0;
    *present = find_in(d->bindir, "kdet-controller", prog, sizeof(prog));
    if (!*present) {
        progress("kdet-controller", "not installed next to det: skipped", t0);
        goto out;
    }
    pidfile(d, "kdet-controller", pf, sizeof(pf));
    snprintf(log, sizeof(log), "%s/kdet-controller.log", d->logs);
    pid_t pid = read_pid(pf);
    if (alive(pid, "kdet-controller", d->dir)) {
        progress("kdet-controller", "already running", t0);
        goto out;
    }
    char tokfile[PATH_MAX + 32], listen[64];
    rc = controller_api(d, tokfile, sizeof(tokfile), listen, sizeof(listen));
    if (rc != 0)
        goto out;
    char *kc = kd_xasprintf("KUBECONFIG=%s", d->kubeconfig);
    char *pgh = kd_xasprintf("PGHOST=%s", d->pgsock);
    char *dsn = kd_xasprintf("KDET_DATABASE_URL=host=%s user=kdet dbname=kdet", d->pgsock);
    char *env[] = {kc, pgh, "PGUSER=kdet", "PGDATABASE=kdet", dsn, NULL};
    char crt[PATH_MAX + 32], key[PATH_MAX + 32];
    char *argv[] = {prog,
                    "--kubeconfig",
                    (char *)d->kubeconfig,
                    "--api-listen",
                    listen,
                    "--user-token-file",
                    tokfile,
                    d->plain_http ? "--plain-http" : "--tls-cert-file",
                    crt,
                    "--tls-key-file",
                    key,
                    NULL};
    controller_crt(d, crt, sizeof(crt));
    snprintf(key, sizeof(key), "%s/controller.key", d->dir);
    if (d->plain_http) {
        argv[8] = NULL; /* no certificate */
    } else if ((rc = controller_cert(d)) != 0) {
        free(kc);
        free(pgh);
        free(dsn);
        goto out;
    }
    pid = spawn_daemon(argv, env, log);
    free(kc);
    free(pgh);
    free(dsn);
    if (pid < 0) {
        det_err("cannot start %s: %s", prog, strerror(-pid));
        rc = DET_EXIT_ERROR;
        goto out;
    }
    snprintf(pbuf, sizeof(pbuf), "%d\n", (int)pid);
    write_small(pf, pbuf, 0644);
    /* give it a moment to fail on bad settings */
    while (kd_mono_ms() - t0 < 1000 && alive(pid, "kdet-controller", d->dir))
        kd_sleep_ms(50);
    if (!alive(pid, "kdet-controller", d->dir)) {
        det_err("kdet-controller exited right after starting");
        tail_log(log);
        unlink(pf);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    /* ready means its API answers (it opens the database first) */
    char url[96];
    snprintf(url, sizeof(url), "%s://%s", d->plain_http ? "http" : "https", listen);
    while (kd_mono_ms() - t0 < START_TIMEOUT_MS && alive(pid, "kdet-controller", d->dir) &&
           !healthz(d, url))
        kd_sleep_ms(100);
    char what[160];
    if (healthz(d, url))
        snprintf(what, sizeof(what), "started (pid %d), API %s", (int)pid, url);
    else
        snprintf(what, sizeof(what), "started (pid %d), but its API %s does not answer yet",
                 (int)pid, url);
    progress("kdet-controller", what, t0);
out:
    return rc;
}

/* ---- verbs ------------------------------------------------------------------- */

/* status: the controller API's line (running controller only). Whether it is healthy. */
static bool status_api(const struct deploy *d)
{
    char url[128] = "", path[PATH_MAX + 32];
    bool up = false;
    snprintf(path, sizeof(path), "%s/controller-url", d->dir);
    if (read_small(path, url, sizeof(url)) != 0) {
        printf("  %-16s %-9s %s\n", "controller-api", "unknown",
               "no controller-url: started by an older det? run 'det deploy local down' and up");
        return false;
    }
    url[strcspn(url, "\r\n")] = '\0';
    up = healthz(d, url);
    printf("  %-16s %-9s %s, user token in %s/user-token\n", "controller-api",
           up ? "healthy" : "down", url, d->dir);
    printf("  %-16s %-9s %s/\n", "web-ui", up ? "serving" : "down", url);
    return up;
}

/* The controller API's address for det (the token stays in its file: only its name is shown). */
static void print_api_env(const struct deploy *d)
{
    char url[128] = "", path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/controller-url", d->dir);
    if (read_small(path, url, sizeof(url)) == 0) {
        url[strcspn(url, "\r\n")] = '\0';
        if (kd_str_has_prefix(url, "https://"))
            printf("export KDET_API_URL=%s KDET_API_TOKEN_FILE=%s/user-token "
                   "KDET_API_CA_FILE=%s/controller.crt\n",
                   url, d->dir, d->dir);
        else
            printf("export KDET_API_URL=%s KDET_API_TOKEN_FILE=%s/user-token\n", url, d->dir);
    }
}

/* The web UI's address: the controller serves it on the API's listener (docs/ui.md). */
static void print_ui_url(const struct deploy *d)
{
    char url[128] = "", path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/controller-url", d->dir);
    if (read_small(path, url, sizeof(url)) == 0) {
        url[strcspn(url, "\r\n")] = '\0';
        fprintf(stderr, "det: web UI at %s/ (log in with the token in %s/user-token%s)\n", url,
                d->dir,
                kd_str_has_prefix(url, "https://")
                    ? "; the certificate is self-signed: trust controller.crt there"
                    : "");
    }
}

static int cmd_up(const struct det_args *a)
{
    struct deploy d;
    bool ctl = false;
    int64_t t0 = kd_mono_ms();
    int rc = setup(&d, a, true);
    if (rc != 0)
        goto out;
    fprintf(stderr, "det: deploying kdet locally in %s\n", d.dir);
    mode_t m = geteuid() == 0 ? 0711 : 0700;
    if ((rc = mkdir_mode(d.run, m)) != 0 || (rc = mkdir_mode(d.logs, m)) != 0 ||
        (rc = mkdir_mode(d.pgsock, 0700)) != 0)
        goto out;
    if (d.drop) {
        /* PostgreSQL runs as another user: check it can reach the data dir before starting
         * anything */
        struct kd_buf out = KD_BUF_INIT(CAPTURE_MAX);
        char *argv[] = {"/bin/true", NULL};
        int r = run_capture(&d, true, argv, &out);
        if (r != 0) {
            det_err("%s", kd_buf_str(&out));
            rc = DET_EXIT_ERROR;
        }
        kd_buf_free(&out);
        if (rc != 0)
            goto out;
    }
    rc = up_api(&d);
    if (rc == 0)
        rc = up_pg(&d);
    if (rc == 0)
        rc = up_crds(&d);
    if (rc == 0)
        rc = up_controller(&d, &ctl);
    if (rc != 0) {
        det_err("deploy incomplete; see the logs in %s, and 'det deploy local down --data-dir %s' "
                "to stop what started",
                d.logs, d.dir);
        goto out;
    }
    char total[32];
    det_fmt_duration(kd_mono_ms() - t0, total, sizeof(total));
    fprintf(stderr,
            "det: kdet is up in %.1fs: API https://127.0.0.1:%d, PostgreSQL \"host=%s user=kdet "
            "dbname=kdet\"%s\n",
            (double)(kd_mono_ms() - t0) / 1000, d.port, d.pgsock,
            ctl ? "" : " (no kdet-controller: experiments are stored but not run)");
    if (ctl)
        print_ui_url(&d);
    printf("export KUBECONFIG=%s\n", d.kubeconfig);
    if (ctl)
        print_api_env(&d);
    fflush(stdout);
out:
    return rc;
}

static int cmd_down(const struct det_args *a)
{
    struct deploy d;
    struct kd_buf out = KD_BUF_INIT(CAPTURE_MAX);
    char pf[PATH_MAX + 32];
    bool killed;
    int rc = setup(&d, a, false);
    if (rc != 0)
        goto out;
    /* reverse order: the controller, PostgreSQL, the API server (which ends its pods) */
    int64_t t0 = kd_mono_ms();
    pidfile(&d, "kdet-controller", pf, sizeof(pf));
    pid_t pid = read_pid(pf);
    if (alive(pid, "kdet-controller", d.dir)) {
        stop_pid(pid, "kdet-controller", d.dir, STOP_GRACE_MS, &killed);
        progress("kdet-controller", killed ? "killed (SIGKILL after 15 s)" : "stopped", t0);
    } else {
        progress("kdet-controller", "not running", t0);
    }
    unlink(pf);
    t0 = kd_mono_ms();
    pid = pg_pid(&d);
    if (pid > 0 && alive(pid, "postgres", d.dir)) {
        int r = -1;
        if (find_pgbin(&d)) {
            char *args[] = {"-D", d.pgdata, "-m", "fast", "-w", "-t", "30", "stop", NULL};
            r = pg_run(&d, "pg_ctl", args, &out);
        }
        if (r != 0) {
            stop_pid(pid, "postgres", d.dir, STOP_GRACE_MS, &killed);
            progress("postgres", killed ? "killed" : "stopped (SIGTERM)", t0);
        } else {
            progress("postgres", "stopped", t0);
        }
    } else {
        progress("postgres", "not running", t0);
    }
    t0 = kd_mono_ms();
    pidfile(&d, "kdet-local", pf, sizeof(pf));
    pid = read_pid(pf);
    if (alive(pid, "kdet-local", d.dir)) {
        stop_pid(pid, "kdet-local", d.dir, STOP_GRACE_MS, &killed);
        progress("kdet-local", killed ? "killed (SIGKILL after 15 s)" : "stopped", t0);
    } else {
        progress("kdet-local", "not running", t0);
    }
    unlink(pf);
    fprintf(stderr, "det: kdet is down; the data stays in %s ('det deploy local up' resumes)\n",
            d.dir);
out:
    kd_buf_free(&out);
    return rc;
}

static int cmd_status(const struct det_args *a)
{
    struct deploy d;
    struct det_kube k = {0};
    struct kd_buf out = KD_BUF_INIT(CAPTURE_MAX);
    char pf[PATH_MAX + 32], ver[64], err[KD_ERRLEN] = "", prog[PATH_MAX + 64];
    bool ok = true;
    int rc = setup(&d, a, false);
    if (rc != 0)
        goto out;
    printf("kdet local deployment in %s\n", d.dir);
    pidfile(&d, "kdet-local", pf, sizeof(pf));
    pid_t pid = read_pid(pf);
    bool api_up = false;
    if (!alive(pid, "kdet-local", d.dir)) {
        printf("  %-16s %-9s %s\n", "kdet-local", "stopped", "no process");
        ok = false;
    } else if (api_version(&d, ver, sizeof(ver), err) != 0) {
        printf("  %-16s %-9s pid %d, but the API does not answer: %s\n", "kdet-local", "unhealthy",
               (int)pid, err);
        ok = false;
    } else {
        printf("  %-16s %-9s pid %d, https://127.0.0.1:%d, version %s\n", "kdet-local", "healthy",
               (int)pid, d.port, ver);
        api_up = true;
    }
    pid = pg_pid(&d);
    int r = -1;
    if (pid > 0 && alive(pid, "postgres", d.dir) && find_pgbin(&d)) {
        char *args[] = {"-D", d.pgdata, "status", NULL};
        r = pg_run(&d, "pg_ctl", args, &out);
    }
    if (r == 0)
        printf("  %-16s %-9s pid %d, socket %s, dsn \"host=%s user=kdet dbname=kdet\"\n",
               "postgres", "healthy", (int)pid, d.pgsock, d.pgsock);
    else {
        printf("  %-16s %-9s %s\n", "postgres", "stopped",
               pid > 0 ? "pg_ctl status: not running" : "no postmaster.pid");
        ok = false;
    }
    if (api_up && open_kube(&d, &k) == 0) {
        bool served = crds_served(&k);
        printf("  %-16s %-9s %s\n", "crds", served ? "installed" : "missing",
               served ? "experiments.kdet.io, trials.kdet.io" : "run 'det deploy local up'");
        ok = ok && served;
    }
    pidfile(&d, "kdet-controller", pf, sizeof(pf));
    pid = read_pid(pf);
    if (!find_in(d.bindir, "kdet-controller", prog, sizeof(prog)))
        printf("  %-16s %-9s %s\n", "kdet-controller", "absent", "not installed next to det");
    else if (alive(pid, "kdet-controller", d.dir)) {
        printf("  %-16s %-9s pid %d\n", "kdet-controller", "running", (int)pid);
        ok = status_api(&d) && ok;
    } else {
        printf("  %-16s %-9s %s\n", "kdet-controller", "stopped", "no process");
        ok = false;
    }
    printf("export KUBECONFIG=%s\n", d.kubeconfig);
    if (alive(pid, "kdet-controller", d.dir))
        print_api_env(&d);
    fflush(stdout);
    rc = ok ? DET_EXIT_OK : DET_EXIT_ERROR;
out:
    det_kube_close(&k);
    kd_buf_free(&out);
    return rc;
}

int det_cmd_deploy(int argc, char **argv)
{
    static const char *const flags[] = {"--data-dir", "--port", "--gpus", "--plain-http", NULL};
    static const char *const pos[] = {"local", "up|down|status", NULL};
    static const char *const verbs[] = {"up", "down", "status", NULL};
    struct det_args a = {0};
    int rc = det_parse_args(argc, argv, flags, pos, 2, deploy_usage, "det deploy", &a);
    if (rc != 0) {
        rc = det_args_exit(rc);
        goto out;
    }
    if (strcmp(a.pos[0], "local") != 0) {
        det_err("unknown deployment \"%s\": only 'det deploy local' exists (for a cluster, see "
                "docs/deploy-local.md and manifests/)",
                a.pos[0]);
        rc = DET_EXIT_USAGE;
    } else if (strcmp(a.pos[1], "up") == 0) {
        rc = cmd_up(&a);
    } else if (strcmp(a.pos[1], "down") == 0) {
        rc = cmd_down(&a);
    } else if (strcmp(a.pos[1], "status") == 0) {
        rc = cmd_status(&a);
    } else {
        det_usage_suggest("deploy verb", a.pos[1], verbs, "det deploy");
        rc = DET_EXIT_USAGE;
    }
out:
    return rc;
}
