/*
 * Worker supervision: start N worker processes with their output piped
 * through rank-prefixed line writers, forward signals, and fail fast (the
 * first worker to fail gets the others terminated, then killed after a
 * grace period). Shared by kdet-launch (N workers) and wrap_rank (one).
 */
#ifndef KD_LAUNCHER_SUPERVISE_H
#define KD_LAUNCHER_SUPERVISE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"
#include "lines.h"

/** One worker to start. */
struct kd_sup_worker {
    int rank;          /* shown in the "[rank=R] " prefix and in logs */
    char *const *argv; /* the command; argv[0] is looked up in PATH */
    char *const *envp; /* its environment, or NULL to inherit */
};

struct kd_sup_opts {
    bool new_pgrp;      /* each worker leads its own process group */
    bool stdin_null;    /* workers read /dev/null instead of our stdin */
    bool quiet;         /* no logfmt lines of our own (wrap_rank) */
    bool no_prefix;     /* lines pass through as they are (an upstream launcher's) */
    bool fail_fast;     /* a failed worker stops the others */
    int64_t grace_ms;   /* SIGTERM -> SIGKILL delay; < 0: never SIGKILL */
    const int *forward; /* signals forwarded to the workers, 0-terminated */
    size_t max_line;    /* line split cap; 0 = KD_LINES_MAX */
    /* Optional: every worker line (without prefix) also goes here, on the supervising thread
     * (lines.h, kd_lines_hook); the hook reads line_ud, rank and stream from its kd_lines. */
    kd_lines_hook line_hook;
    void *line_ud;
};

/** What happened. */
struct kd_sup_result {
    int first_rank;    /* the rank that failed first, -1 if none */
    int first_status;  /* its wait status */
    int signal;        /* the first forwarded signal we received, 0 if none */
    bool signal_first; /* the signal came before any worker failed */
    bool killed;       /* SIGKILL had to be sent after the grace period */
    int exit_code;     /* the launcher's exit code (see docs/launcher.md) */
};

/**
 * Start the workers and supervise them until every one has exited and its
 * output is written out. Installs signal handlers (SIGCHLD, SIGPIPE ignored,
 * and those in opts->forward) that only write to a self-pipe, and restores
 * the previous ones before returning. Blocks; not thread-safe; call once at
 * a time per process. Returns 0 with *res filled in, or a negative code
 * when nothing could be started (err says why; workers already started
 * are killed and reaped first).
 */
int kd_sup_run(const struct kd_sup_worker *workers, int n, const struct kd_sup_opts *opts,
               struct kd_sup_result *res, char *err) KD_WUR;

/** "SIGTERM" for SIGTERM (or the number); written into buf, returned. */
const char *kd_sup_signal_name(int sig, char *buf, size_t len);

/** The exit code for a wait status: the exit status, or 128+signo. */
int kd_sup_exit_code(int status);

/**
 * Whether a command name can be run: an executable file at that path when
 * it holds a '/', else somewhere in $PATH. 0, or -ENOENT / -EACCES.
 */
int kd_sup_find_program(const char *name) KD_WUR;

#endif
