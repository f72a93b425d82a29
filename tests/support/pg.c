/*
 * A private PostgreSQL server for tests (see pg.h). The server runs as an
 * unprivileged user when the tests run as root, listens on a unix socket
 * only, and a watchdog child removes it whatever way the test ends.
 */
#include "pg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "core/str.h"

#define PG_UID 65534 /* nobody */
#define PG_GID 65534 /* nogroup */

static int is_exec(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, X_OK) == 0;
}

/* Where initdb and pg_ctl live: Debian keeps them off PATH. */
static int find_bindir(char *out, size_t len)
{
    const char *env = getenv("KD_PG_BINDIR");
    int rc = KD_ENOTFOUND;
    if (env && is_exec(env, "pg_ctl")) {
        kd_strlcpy(out, env, len);
        return 0;
    }
    FILE *f = popen("pg_config --bindir 2>/dev/null", "r");
    if (f) {
        char line[256] = "";
        if (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = '\0';
            if (is_exec(line, "pg_ctl") && is_exec(line, "initdb")) {
                kd_strlcpy(out, line, len);
                rc = 0;
            }
        }
        pclose(f);
        if (rc == 0)
            return 0;
    }
    DIR *d = opendir("/usr/lib/postgresql");
    if (d) {
        struct dirent *e;
        char best[256] = "";
        while ((e = readdir(d)) != NULL) {
            char p[300];
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof(p), "/usr/lib/postgresql/%s/bin", e->d_name);
            if (is_exec(p, "pg_ctl") && strcmp(p, best) > 0)
                kd_strlcpy(best, p, sizeof(best));
        }
        closedir(d);
        if (best[0]) {
            kd_strlcpy(out, best, len);
            return 0;
        }
    }
    if (is_exec("/usr/local/bin", "pg_ctl")) {
        kd_strlcpy(out, "/usr/local/bin", len);
        return 0;
    }
    if (is_exec("/usr/bin", "pg_ctl")) {
        kd_strlcpy(out, "/usr/bin", len);
        return 0;
    }
    return rc;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * Run bindir/prog with args (NULL-terminated), as nobody when we are root,
 * with output appended to dir/commands.log. Returns the exit status or -1.
 */
static int run_pg(const struct kd_pg *pg, const char *prog, const char *const *args)
{
    char bin[512], log[512];
    const char *argv[32];
    size_t n = 0;
    snprintf(bin, sizeof(bin), "%s/%s", pg->bindir, prog);
    snprintf(log, sizeof(log), "%s/commands.log", pg->dir);
    if (geteuid() == 0) {
        argv[n++] = "setpriv";
        argv[n++] = "--reuid=65534";
        argv[n++] = "--regid=65534";
        argv[n++] = "--clear-groups";
        argv[n++] = "--";
    }
    argv[n++] = bin;
    for (size_t i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (nul >= 0)
            dup2(nul, 0);
        if (chdir(pg->dir) != 0)
            _exit(126);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The last lines of the server's and the commands' logs, for an error message. */
static void log_tail(const struct kd_pg *pg, const char *name, char *out, size_t len)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", pg->dir, name);
    out[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long sz = ftell(f);
        long from = sz > (long)len - 1 ? sz - (long)len + 1 : 0;
        if (fseek(f, from, SEEK_SET) == 0) {
            size_t got = fread(out, 1, len - 1, f);
            out[got] = '\0';
        }
    }
    fclose(f);
}

static int start_server(struct kd_pg *pg, char *err)
{
    char data[300], logf[300], opts[700];
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    snprintf(logf, sizeof(logf), "%s/server.log", pg->dir);
    snprintf(opts, sizeof(opts),
             "-c listen_addresses='' -k %s -c fsync=off -c full_page_writes=off "
             "-c max_connections=60 -c shared_buffers=32MB",
             pg->dir);
    const char *args[] = {"-D", data, "-w", "-t", "60", "-l", logf, "-o", opts, "start", NULL};
    if (run_pg(pg, "pg_ctl", args) != 0) {
        char tail[600];
        log_tail(pg, "server.log", tail, sizeof(tail));
        return kd_seterr(err, KD_EIO, "pg_ctl start failed in %s; server.log ends: %s", pg->dir,
                         tail);
    }
    pg->running = 1;
    return 0;
}

/* The watchdog: waits for EOF on the pipe, then stops the server and removes the dir. */
static void watchdog_main(struct kd_pg *pg, int rfd)
{
    char buf[16];
    setsid();
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    while (read(rfd, buf, sizeof(buf)) != 0) {
        if (errno != EINTR)
            break;
    }
    char pidf[300];
    snprintf(pidf, sizeof(pidf), "%s/data/postmaster.pid", pg->dir);
    if (access(pidf, F_OK) == 0) {
        char data[300];
        snprintf(data, sizeof(data), "%s/data", pg->dir);
        const char *args[] = {"-D", data, "-m", "immediate", "-w", "stop", NULL};
        (void)run_pg(pg, "pg_ctl", args);
    }
    rm_rf(pg->dir);
    _exit(0);
}

int kd_pg_start(struct kd_pg *pg, char *err)
{
    int rc = 0, pfd[2] = {-1, -1};
    memset(pg, 0, sizeof(*pg));
    pg->watchdog_fd = -1;
    if (find_bindir(pg->bindir, sizeof(pg->bindir)) != 0) {
        rc = kd_seterr(err, KD_ENOTFOUND,
                       "PostgreSQL server binaries not found (install the postgresql package "
                       "or set KD_PG_BINDIR)");
        goto out;
    }
    /* The socket path must fit in sun_path (108 bytes): keep the dir short. */
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0] || strlen(tmp) > 60)
        tmp = "/tmp";
    snprintf(pg->dir, sizeof(pg->dir), "%s/kdpg.XXXXXX", tmp);
    if (!mkdtemp(pg->dir)) {
        rc = kd_seterr(err, -errno, "mkdtemp %s: %s", pg->dir, strerror(errno));
        pg->dir[0] = '\0';
        goto out;
    }
    if (geteuid() == 0 && chown(pg->dir, PG_UID, PG_GID) != 0) {
        rc = kd_seterr(err, -errno, "chown %s to nobody: %s", pg->dir, strerror(errno));
        goto out;
    }
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        rc = kd_seterr(err, -errno, "pipe: %s", strerror(errno));
        goto out;
    }
    pid_t wd = fork();
    if (wd < 0) {
        rc = kd_seterr(err, -errno, "fork: %s", strerror(errno));
        goto out;
    }
    if (wd == 0) {
        close(pfd[1]);
        watchdog_main(pg, pfd[0]);
    }
    close(pfd[0]);
    pfd[0] = -1;
    pg->watchdog = wd;
    pg->watchdog_fd = pfd[1];
    pfd[1] = -1;

    char data[300];
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    const char *args[] = {"-D", data,   "-U",       "kdet", "-A",        "trust",
                          "-E", "UTF8", "--locale", "C",    "--no-sync", "--no-instructions",
                          NULL};
    if (run_pg(pg, "initdb", args) != 0) {
        char tail[600];
        log_tail(pg, "commands.log", tail, sizeof(tail));
        rc = kd_seterr(err, KD_EIO, "initdb failed in %s: %s", pg->dir, tail);
        goto out;
    }
    rc = start_server(pg, err);
out:
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    if (rc != 0)
        kd_pg_destroy(pg);
    return rc;
}

int kd_pg_stop(struct kd_pg *pg, const char *mode, char *err)
{
    char data[300];
    snprintf(data, sizeof(data), "%s/data", pg->dir);
    const char *args[] = {"-D", data, "-m", mode, "-w", "-t", "60", "stop", NULL};
    if (run_pg(pg, "pg_ctl", args) != 0)
        return kd_seterr(err, KD_EIO, "pg_ctl stop -m %s failed in %s", mode, pg->dir);
    pg->running = 0;
    return 0;
}

int kd_pg_restart(struct kd_pg *pg, char *err)
{
    return start_server(pg, err);
}

void kd_pg_destroy(struct kd_pg *pg)
{
    if (!pg || !pg->dir[0])
        return;
    if (pg->running) {
        char data[300];
        snprintf(data, sizeof(data), "%s/data", pg->dir);
        const char *args[] = {"-D", data, "-m", "fast", "-w", "-t", "60", "stop", NULL};
        (void)run_pg(pg, "pg_ctl", args);
        pg->running = 0;
    }
    rm_rf(pg->dir);
    if (pg->watchdog_fd >= 0) {
        close(pg->watchdog_fd);
        pg->watchdog_fd = -1;
    }
    if (pg->watchdog > 0) {
        while (waitpid(pg->watchdog, NULL, 0) < 0 && errno == EINTR)
            ;
        pg->watchdog = 0;
    }
    pg->dir[0] = '\0';
}

const char *kd_pg_conninfo(const struct kd_pg *pg, const char *db, char *buf, size_t len)
{
    snprintf(buf, len, "host=%s dbname=%s user=kdet connect_timeout=5", pg->dir,
             db ? db : "postgres");
    return buf;
}

int kd_pg_createdb(const struct kd_pg *pg, const char *name, char *err)
{
    char ci[512], sql[160];
    int rc = 0;
    PGconn *c = NULL;
    PGresult *r = NULL;
    for (const char *p = name; *p; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return kd_seterr(err, KD_EINVAL, "database name %s: only a-z, 0-9 and _", name);
    }
    if (!name[0] || strlen(name) > 60)
        return kd_seterr(err, KD_EINVAL, "database name: 1 to 60 characters");
    c = PQconnectdb(kd_pg_conninfo(pg, NULL, ci, sizeof(ci)));
    if (PQstatus(c) != CONNECTION_OK) {
        rc = kd_seterr(err, KD_ECONNECT, "connect: %s", PQerrorMessage(c));
        goto out;
    }
    /* The name was checked above: identifiers cannot be bound as parameters. */
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = kd_seterr(err, KD_EIO, "%s: %s", sql, PQerrorMessage(c));
out:
    PQclear(r);
    PQfinish(c);
    return rc;
}
