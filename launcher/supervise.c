/*
 * Worker supervision (see supervise.h). One thread, one poll(2) loop over a
 * self-pipe (the signal handlers only write the signal number into it) and
 * every worker's stdout and stderr pipes; children are reaped on SIGCHLD.
 */
#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "lines.h"

extern char **environ;

/* After the last worker exits, how long its pipes may stay open (held by
 * processes it left behind) before those are killed and the pipes closed. */
#define DRAIN_MS 1000
#define CLOSE_MS 500
#define READ_CHUNK 65536
#define MAX_SIGNALS 16

struct worker {
    int rank;
    pid_t pid;
    bool running;
    int status;
    int fd[2]; /* read ends of stdout, stderr; -1 once closed */
    struct kd_lines lines[2];
    bool warned;
};

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char c = (unsigned char)sig;
    ssize_t w = write(sig_pipe[1], &c, 1);
    (void)w; /* a full pipe already holds a wake-up */
    errno = saved;
}

int kd_sup_exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

const char *kd_sup_signal_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL)
        snprintf(buf, len, "SIG%s", abbrev);
    else
        snprintf(buf, len, "%d", sig);
    return buf;
}

int kd_sup_find_program(const char *name)
{
    int rc = -ENOENT;
    char *path = NULL;
    if (name[0] == '\0')
        goto out;
    if (strchr(name, '/') != NULL) {
        struct stat st;
        if (stat(name, &st) < 0)
            rc = -errno;
        else if (S_ISDIR(st.st_mode) || access(name, X_OK) < 0)
            rc = -EACCES;
        else
            rc = 0;
        goto out;
    }
    const char *env = getenv("PATH");
    path = kd_xstrdup(env ? env : "/usr/local/bin:/usr/bin:/bin");
    char *save = NULL;
    for (char *dir = strtok_r(path, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        char full[4096];
        struct stat st;
        if ((size_t)snprintf(full, sizeof(full), "%s/%s", dir[0] ? dir : ".", name) >= sizeof(full))
            continue;
        if (stat(full, &st) == 0 && !S_ISDIR(st.st_mode)) {
            if (access(full, X_OK) == 0) {
                rc = 0;
                goto out;
            }
            rc = -EACCES;
        }
    }
out:
    free(path);
    return rc;
}

/* Signal one worker: its whole process group, or just the process. */
static void signal_worker(const struct worker *w, const struct kd_sup_opts *o, int sig)
{
    if (w->pid <= 0)
        return;
    if (o->new_pgrp)
        (void)killpg(w->pid, sig); /* ESRCH: nothing left in the group */
    else if (w->running)
        (void)kill(w->pid, sig);
}

static void signal_all(struct worker *ws, int n, const struct kd_sup_opts *o, int sig)
{
    for (int i = 0; i < n; i++)
        signal_worker(&ws[i], o, sig);
}

/* In the child, after fork: nothing but async-signal-safe calls. */
static void child_exec(const struct kd_sup_worker *spec, const struct kd_sup_opts *o, int out_fd,
                       int err_fd, int devnull, int exec_fd, pid_t parent)
{
    if (o->new_pgrp)
        (void)setpgid(0, 0);
    /* Die with the launcher even when it is SIGKILLed. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(137);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) {
        if (s != SIGKILL && s != SIGSTOP)
            (void)sigaction(s, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0 ||
        (devnull >= 0 && dup2(devnull, STDIN_FILENO) < 0))
        goto fail;
    execvpe(spec->argv[0], spec->argv, spec->envp ? spec->envp : environ);
fail:;
    int e = errno;
    ssize_t w = write(exec_fd, &e, sizeof(e));
    (void)w;
    _exit(e == ENOENT ? 127 : 126);
}

static int spawn(struct worker *w, const struct kd_sup_worker *spec, const struct kd_sup_opts *o,
                 int devnull, char *err)
{
    int out[2] = {-1, -1}, errp[2] = {-1, -1}, ex[2] = {-1, -1};
    int rc = 0;
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(ex, O_CLOEXEC) < 0) {
        rc = -errno;
        kd_seterr(err, rc, "rank %d: pipe: %s", spec->rank, strerror(errno));
        goto out;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        rc = -errno;
        kd_seterr(err, rc, "rank %d: fork: %s", spec->rank, strerror(errno));
        goto out;
    }
    if (pid == 0)
        child_exec(spec, o, out[1], errp[1], devnull, ex[1], parent);
    if (o->new_pgrp)
        (void)setpgid(pid, pid); /* also done in the child: whoever runs first */
    close(out[1]);
    close(errp[1]);
    close(ex[1]);
    out[1] = errp[1] = ex[1] = -1;
    w->pid = pid;
    w->running = true;
    w->fd[0] = out[0];
    w->fd[1] = errp[0];
    out[0] = errp[0] = -1;
    (void)fcntl(w->fd[0], F_SETFL, O_NONBLOCK);
    (void)fcntl(w->fd[1], F_SETFL, O_NONBLOCK);
    /* The exec pipe closes on a successful exec, or carries errno. */
    int e = 0;
    ssize_t r;
    do
        r = read(ex[0], &e, sizeof(e));
    while (r < 0 && errno == EINTR);
    if (r == (ssize_t)sizeof(e) && !o->quiet)
        KD_ERROR("cannot start worker", "rank=%d cmd=%s error=%s", spec->rank,
                 kd_logq(spec->argv[0]), kd_logq(strerror(e)));
    else if (r == (ssize_t)sizeof(e))
        dprintf(STDERR_FILENO, "wrap_rank: cannot run %s: %s\n", spec->argv[0], strerror(e));
out:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (errp[i] >= 0)
            close(errp[i]);
        if (ex[i] >= 0)
            close(ex[i]);
    }
    return rc;
}

static void close_stream(struct worker *w, int s, const struct kd_sup_opts *o)
{
    if (w->fd[s] < 0)
        return;
    if (kd_lines_finish(&w->lines[s]) < 0 && !w->warned && !o->quiet) {
        w->warned = true;
        KD_WARN("worker output lost", "rank=%d stream=%s error=%s", w->rank,
                s ? "stderr" : "stdout", kd_logq(strerror(-w->lines[s].werr)));
    }
    close(w->fd[s]);
    w->fd[s] = -1;
}

static void read_stream(struct worker *w, int s, const struct kd_sup_opts *o)
{
    char buf[READ_CHUNK];
    ssize_t r = read(w->fd[s], buf, sizeof(buf));
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        close_stream(w, s, o);
        return;
    }
    if (kd_lines_feed(&w->lines[s], buf, (size_t)r) < 0 && !w->warned && !o->quiet) {
        w->warned = true;
        KD_WARN("worker output lost", "rank=%d stream=%s error=%s", w->rank,
                s ? "stderr" : "stdout", kd_logq(strerror(-w->lines[s].werr)));
    }
}

static void log_exit(const struct worker *w, bool first, bool stopping, const struct kd_sup_opts *o)
{
    char sig[32] = "";
    if (o->quiet)
        return;
    if (WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0) {
        KD_INFO("worker exited", "rank=%d pid=%d exit_code=0", w->rank, (int)w->pid);
        return;
    }
    if (WIFSIGNALED(w->status))
        kd_sup_signal_name(WTERMSIG(w->status), sig, sizeof(sig));
    if (first)
        KD_ERROR("worker failed", "rank=%d pid=%d exit_code=%d%s%s first_failure=true", w->rank,
                 (int)w->pid, kd_sup_exit_code(w->status), sig[0] ? " signal=" : "", sig);
    else if (stopping)
        KD_INFO("worker stopped", "rank=%d pid=%d exit_code=%d%s%s", w->rank, (int)w->pid,
                kd_sup_exit_code(w->status), sig[0] ? " signal=" : "", sig);
    else
        KD_ERROR("worker failed", "rank=%d pid=%d exit_code=%d%s%s", w->rank, (int)w->pid,
                 kd_sup_exit_code(w->status), sig[0] ? " signal=" : "", sig);
}

struct state {
    struct worker *ws;
    int n;
    int running;
    const struct kd_sup_opts *o;
    struct kd_sup_result *res;
    bool stopping;
    int64_t kill_at;  /* ms, when stopping and grace_ms >= 0 */
    int64_t drain_at; /* set once, when the last worker has exited */
    int64_t close_at;
    bool drain_armed;
};

static void start_stopping(struct state *st, int sig, const char *why)
{
    char name[32];
    if (!st->stopping && st->o->grace_ms >= 0)
        st->kill_at = kd_mono_ms() + st->o->grace_ms;
    st->stopping = true;
    if (!st->o->quiet && st->running > 0)
        KD_WARN("stopping workers", "reason=%s signal=%s running=%d grace_s=%.3g", why,
                kd_sup_signal_name(sig, name, sizeof(name)), st->running,
                st->o->grace_ms >= 0 ? (double)st->o->grace_ms / 1000.0 : -1.0);
    signal_all(st->ws, st->n, st->o, sig);
}

static void kill_now(struct state *st, const char *why)
{
    if (!st->o->quiet && st->running > 0) {
        char ranks[256] = "";
        size_t pos = 0;
        for (int i = 0; i < st->n && pos + 16 < sizeof(ranks); i++) {
            if (st->ws[i].running)
                pos += (size_t)snprintf(ranks + pos, sizeof(ranks) - pos, "%s%d", pos ? "," : "",
                                        st->ws[i].rank);
        }
        KD_WARN("killing workers", "reason=%s ranks=%s", why, ranks);
    }
    if (st->running > 0)
        st->res->killed = true;
    signal_all(st->ws, st->n, st->o, SIGKILL);
    st->kill_at = -1;
}

static void reap(struct state *st)
{
    for (int i = 0; i < st->n; i++) {
        struct worker *w = &st->ws[i];
        if (!w->running)
            continue;
        int status;
        pid_t r = waitpid(w->pid, &status, WNOHANG);
        if (r != w->pid)
            continue;
        w->running = false;
        w->status = status;
        st->running--;
        bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        bool first = failed && st->res->first_rank < 0;
        if (first) {
            st->res->first_rank = w->rank;
            st->res->first_status = status;
        }
        log_exit(w, first && st->res->signal == 0, st->stopping, st->o);
        if (first && st->o->fail_fast && !st->stopping && st->running > 0) {
            char why[64];
            snprintf(why, sizeof(why), "rank-%d-failed", w->rank);
            start_stopping(st, SIGTERM, why);
        }
    }
    if (st->running == 0 && !st->drain_armed) {
        st->drain_armed = true;
        st->drain_at = kd_mono_ms() + DRAIN_MS;
    }
}

static void on_forwarded(struct state *st, int sig)
{
    char name[32];
    bool again = st->res->signal != 0;
    if (!again) {
        st->res->signal = sig;
        st->res->signal_first = st->res->first_rank < 0;
    }
    if (!st->o->quiet)
        KD_WARN("signal received", "signal=%s action=%s",
                kd_sup_signal_name(sig, name, sizeof(name)),
                again && st->o->grace_ms >= 0 ? "kill" : "forward");
    if (again && st->o->grace_ms >= 0 && (sig == SIGTERM || sig == SIGINT))
        kill_now(st, "second-signal");
    else if (sig == SIGTERM || sig == SIGINT)
        start_stopping(st, sig, "signal");
    else
        signal_all(st->ws, st->n, st->o, sig);
}

static bool is_forwarded(const struct kd_sup_opts *o, int sig)
{
    for (const int *s = o->forward; s && *s; s++) {
        if (*s == sig)
            return true;
    }
    return false;
}

static int open_streams(const struct state *st)
{
    int k = 0;
    for (int i = 0; i < st->n; i++)
        k += (st->ws[i].fd[0] >= 0) + (st->ws[i].fd[1] >= 0);
    return k;
}

static void loop(struct state *st)
{
    struct pollfd *pfds = kd_xcalloc((size_t)st->n * 2 + 1, sizeof(*pfds));
    int *map = kd_xcalloc((size_t)st->n * 2 + 1, sizeof(int));
    for (;;) {
        if (st->running == 0 && open_streams(st) == 0)
            break;
        int64_t now = kd_mono_ms();
        if (st->kill_at >= 0 && now >= st->kill_at)
            kill_now(st, "grace-period-over");
        if (st->running == 0 && st->drain_at >= 0 && now >= st->drain_at) {
            /* Output held open by left-over processes: end them. */
            if (st->o->new_pgrp)
                signal_all(st->ws, st->n, st->o, SIGKILL);
            st->drain_at = -1;
            st->close_at = now + CLOSE_MS;
        }
        if (st->close_at >= 0 && now >= st->close_at) {
            for (int i = 0; i < st->n; i++) {
                close_stream(&st->ws[i], 0, st->o);
                close_stream(&st->ws[i], 1, st->o);
            }
            continue;
        }
        int64_t wake = -1;
        int64_t dl[3] = {st->kill_at, st->drain_at, st->close_at};
        for (int i = 0; i < 3; i++) {
            if (dl[i] >= 0 && (wake < 0 || dl[i] < wake))
                wake = dl[i];
        }
        int timeout = wake < 0 ? -1 : (int)(wake > now ? wake - now : 0);
        int np = 0;
        pfds[np].fd = sig_pipe[0];
        pfds[np].events = POLLIN;
        map[np++] = -1;
        for (int i = 0; i < st->n; i++) {
            for (int s = 0; s < 2; s++) {
                if (st->ws[i].fd[s] < 0)
                    continue;
                pfds[np].fd = st->ws[i].fd[s];
                pfds[np].events = POLLIN;
                map[np++] = i * 2 + s;
            }
        }
        int pr = poll(pfds, (nfds_t)np, timeout);
        if (pr < 0 && errno != EINTR)
            break; /* cannot happen with valid fds; leave rather than spin */
        if (pr <= 0)
            continue;
        for (int k = 1; k < np; k++) {
            if (pfds[k].revents == 0)
                continue;
            struct worker *w = &st->ws[map[k] / 2];
            read_stream(w, map[k] % 2, st->o);
        }
        if (pfds[0].revents & POLLIN) {
            unsigned char sigs[64];
            ssize_t r = read(sig_pipe[0], sigs, sizeof(sigs));
            bool child = false;
            for (ssize_t i = 0; i < r; i++) {
                if (sigs[i] == SIGCHLD)
                    child = true;
                else if (is_forwarded(st->o, sigs[i]))
                    on_forwarded(st, sigs[i]);
            }
            if (child)
                reap(st);
        }
    }
    free(pfds);
    free(map);
}

int kd_sup_run(const struct kd_sup_worker *workers, int n, const struct kd_sup_opts *opts,
               struct kd_sup_result *res, char *err)
{
    int rc = 0;
    int devnull = -1;
    int nsig = 0;
    int sigs[MAX_SIGNALS];
    struct sigaction old[MAX_SIGNALS];
    struct sigaction old_pipe;
    bool pipe_saved = false;
    sigset_t all, oldmask;
    struct state st = {
        .n = n, .o = opts, .res = res, .kill_at = -1, .drain_at = -1, .close_at = -1};
    memset(res, 0, sizeof(*res));
    res->first_rank = -1;
    st.ws = kd_xcalloc((size_t)(n > 0 ? n : 1), sizeof(*st.ws));
    for (int i = 0; i < n; i++) {
        st.ws[i].rank = workers[i].rank;
        st.ws[i].fd[0] = st.ws[i].fd[1] = -1;
        char prefix[KD_LINES_PREFIX_MAX];
        if (opts->no_prefix)
            prefix[0] = '\0';
        else
            snprintf(prefix, sizeof(prefix), "[rank=%d] ", workers[i].rank);
        kd_lines_init(&st.ws[i].lines[0], STDOUT_FILENO, prefix, opts->max_line);
        kd_lines_init(&st.ws[i].lines[1], STDERR_FILENO, prefix, opts->max_line);
        for (int s = 0; s < 2; s++) {
            st.ws[i].lines[s].hook = opts->line_hook;
            st.ws[i].lines[s].hook_ud = opts->line_ud;
            st.ws[i].lines[s].rank = workers[i].rank;
            st.ws[i].lines[s].stream = s;
        }
    }
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        rc = -errno;
        kd_seterr(err, rc, "self-pipe: %s", strerror(errno));
        goto out;
    }
    if (opts->stdin_null && (devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
        rc = -errno;
        kd_seterr(err, rc, "/dev/null: %s", strerror(errno));
        goto out;
    }

    /* Handlers are installed with every signal blocked, and stay blocked
     * across fork so that no child runs our handler before its exec. */
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &oldmask);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    sigs[nsig] = SIGCHLD;
    sigaction(SIGCHLD, &sa, &old[nsig++]);
    for (const int *s = opts->forward; s && *s && nsig < MAX_SIGNALS; s++) {
        sigs[nsig] = *s;
        sigaction(*s, &sa, &old[nsig++]);
    }
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    pipe_saved = true;

    for (int i = 0; i < n; i++) {
        rc = spawn(&st.ws[i], &workers[i], opts, devnull, err);
        if (rc < 0)
            break;
        st.running++;
        if (!opts->quiet)
            KD_INFO("worker started", "rank=%d pid=%d", workers[i].rank, (int)st.ws[i].pid);
    }
    sigprocmask(SIG_SETMASK, &oldmask, NULL);
    if (rc < 0) {
        /* Nothing half-started stays behind. */
        signal_all(st.ws, n, opts, SIGKILL);
        for (int i = 0; i < n; i++) {
            if (st.ws[i].running)
                (void)waitpid(st.ws[i].pid, NULL, 0);
            st.ws[i].running = false;
        }
        goto out;
    }
    reap(&st); /* a worker may have ended before the handler ran */
    loop(&st);
    /* Whatever the workers left in their process groups goes with them. */
    if (opts->new_pgrp)
        signal_all(st.ws, n, opts, SIGKILL);
    if (res->signal_first)
        res->exit_code = 128 + res->signal;
    else if (res->first_rank >= 0)
        res->exit_code = kd_sup_exit_code(res->first_status);
    else
        res->exit_code = 0;
out:
    for (int i = 0; i < nsig; i++)
        sigaction(sigs[i], &old[i], NULL);
    if (pipe_saved)
        sigaction(SIGPIPE, &old_pipe, NULL);
    for (int i = 0; i < n; i++) {
        for (int s = 0; s < 2; s++) {
            if (st.ws[i].fd[s] >= 0)
                close(st.ws[i].fd[s]);
            kd_lines_free(&st.ws[i].lines[s]);
        }
    }
    free(st.ws);
    if (devnull >= 0)
        close(devnull);
    for (int i = 0; i < 2; i++) {
        if (sig_pipe[i] >= 0)
            close(sig_pipe[i]);
        sig_pipe[i] = -1;
    }
    return rc;
}
