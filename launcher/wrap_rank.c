/*
 * wrap_rank: run one command with every line of its stdout and stderr
 * prefixed "[rank=R] ", for custom launchers and for the workers that an
 * upstream launcher (torchrun, deepspeed, horovodrun) starts. Signals are
 * forwarded to the command; wrap_rank ends the way the command ended.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "core/str.h"
#include "supervise.h"

#define EXIT_USAGE 2

static const char usage[] =
    "usage: wrap_rank RANK [--] CMD [ARGS...]\n"
    "\n"
    "Runs CMD with every line of its stdout and stderr prefixed \"[rank=R] \" (stdout lines\n"
    "to stdout, stderr lines to stderr). RANK is a number, or a comma-separated list of\n"
    "environment variable names whose first set one holds the rank (for example\n"
    "RANK or HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK). SIGTERM, SIGINT, SIGHUP, SIGQUIT,\n"
    "SIGUSR1 and SIGUSR2 are forwarded to CMD's process group; wrap_rank exits with CMD's\n"
    "exit code, or dies by the signal that killed CMD. Processes CMD leaves behind in its\n"
    "process group are killed when it exits.\n";

/* RANK as a number, or the first set variable of a comma-separated list. */
static int resolve_rank(const char *arg, int *rank, char *err)
{
    int rc = 0;
    char names[512];
    if (kd_parse_int(arg, rank) == 0) {
        if (*rank < 0)
            rc = kd_seterr(err, KD_EINVAL, "RANK %s: must not be negative", arg);
        goto out;
    }
    if (strlen(arg) >= sizeof(names)) {
        rc = kd_seterr(err, KD_EINVAL, "RANK: the list of variable names is too long");
        goto out;
    }
    kd_strlcpy(names, arg, sizeof(names));
    char *save = NULL;
    for (char *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
        const char *v = getenv(n);
        if (v == NULL)
            continue;
        if (kd_parse_int(v, rank) < 0 || *rank < 0)
            rc = kd_seterr(err, KD_EINVAL, "RANK: %s=%s is not a non-negative integer", n,
                           kd_logq(v));
        goto out;
    }
    if (arg[0] == '\0' || arg[0] == '-')
        rc =
            kd_seterr(err, KD_EINVAL, "RANK %s: expected a number or variable names", kd_logq(arg));
    else
        rc = kd_seterr(err, KD_EINVAL,
                       "RANK %s: not a number, and no such environment variable is set",
                       kd_logq(arg));
out:
    return rc;
}

int main(int argc, char **argv)
{
    char err[KD_ERRLEN] = "";
    int code = 0;
    int rank = 0;
    int i = 1;
    kd_log_init("wrap_rank", -1, -1);
    if (i < argc && (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)) {
        fputs(usage, stdout);
        goto out;
    }
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (i >= argc) {
        fprintf(stderr, "wrap_rank: missing RANK and CMD\n%s", usage);
        code = EXIT_USAGE;
        goto out;
    }
    if (resolve_rank(argv[i], &rank, err) < 0) {
        fprintf(stderr, "wrap_rank: argument %d: %s\n", i, err);
        code = EXIT_USAGE;
        goto out;
    }
    i++;
    if (i < argc && strcmp(argv[i], "--") == 0)
        i++;
    if (i >= argc) {
        fprintf(stderr, "wrap_rank: missing CMD after RANK\n%s", usage);
        code = EXIT_USAGE;
        goto out;
    }
    int rc = kd_sup_find_program(argv[i]);
    if (rc < 0) {
        fprintf(stderr, "wrap_rank: cannot run %s: %s\n", argv[i],
                rc == -EACCES ? "not executable" : "not found");
        code = rc == -EACCES ? 126 : 127;
        goto out;
    }
    static const int forward[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, 0};
    struct kd_sup_worker w = {.rank = rank, .argv = argv + i, .envp = NULL};
    /* CMD leads a process group of its own, so that forwarded signals and
     * the final clean-up reach what it starts too; but it stays in ours when
     * stdin is a terminal, so that it can still read from it. */
    struct kd_sup_opts o = {
        .quiet = true,
        .new_pgrp = !isatty(STDIN_FILENO),
        .grace_ms = -1,
        .forward = forward,
    };
    struct kd_sup_result res;
    if (kd_sup_run(&w, 1, &o, &res, err) < 0) {
        fprintf(stderr, "wrap_rank: %s\n", err);
        code = 1;
        goto out;
    }
    if (res.first_rank >= 0 && WIFSIGNALED(res.first_status)) {
        /* End the way the command ended, so our parent sees the signal. */
        int sig = WTERMSIG(res.first_status);
        struct rlimit nocore = {0, 0};
        (void)setrlimit(RLIMIT_CORE, &nocore); /* the command dumped core, if any */
        signal(sig, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(sig);
    }
    code = res.first_rank >= 0 ? kd_sup_exit_code(res.first_status) : 0;
out:
    return code;
}
