/*
 * kdet-launch's command line: options, the launch form (plain workers or
 * an upstream launcher: torchrun, deepspeed, horovodrun), and the command
 * each worker runs; plus the argv that execs an upstream launcher.
 */
#ifndef KD_LAUNCHER_ARGS_H
#define KD_LAUNCHER_ARGS_H

#include <stdbool.h>

#include "core/err.h"
#include "env.h"

enum kd_launch_form {
    KD_FORM_PLAIN = 0, /* kdet-launch supervises one worker per slot */
    KD_FORM_TORCH,     /* torch_distributed: exec torchrun */
    KD_FORM_DEEPSPEED, /* deepspeed: exec deepspeed */
    KD_FORM_HOROVOD,   /* horovod: exec horovodrun */
};

struct kd_launch_args {
    bool help;
    int nproc;      /* --nproc, 0 when not given */
    double grace_s; /* --grace-period, < 0 when not given */
    enum kd_launch_form form;
    char **overrides; /* upstream overrides (borrowed from argv) */
    int noverrides;
    const char *trial; /* --trial FILE:CLASS, or NULL */
    char **script;     /* SCRIPT [ARGS...] (borrowed from argv), or NULL */
    int nscript;
};

/**
 * Parse argv (argv[0] is the program). Pointers in *a borrow from argv.
 * Returns 0 (with a->help set for -h/--help), or KD_EINVAL with err naming
 * the argument, its position and the cause (with a suggestion for a
 * misspelt option).
 */
int kd_launch_parse_args(int argc, char **argv, struct kd_launch_args *a, char *err) KD_WUR;

/**
 * The command each worker runs: SCRIPT [ARGS...], or for --trial
 * `PYTHON -m kdet.harness --trial FILE:CLASS`. NULL-terminated; the caller
 * frees the array (not the strings) with free(). Aborts on out-of-memory.
 */
char **kd_launch_worker_cmd(const struct kd_launch_args *a, const struct kd_launch_env *e);

/**
 * The argv that execs the upstream launcher of a->form with the peer
 * information filled in, then the overrides, then `WRAP_RANK RANKVARS
 * CMD...` (wrap_rank is the path of the wrap_rank program). For the
 * horovod form with KDET_NUM_NODES > 1, KDET_NODE_ADDRS must list every
 * node's address. Returns 0 and a NULL-terminated array of strings the
 * caller frees with kd_launch_argv_free, or KD_EINVAL with err.
 */
int kd_launch_upstream_argv(const struct kd_launch_args *a, const struct kd_launch_env *e,
                            int nproc, const char *wrap_rank, char ***out, char *err) KD_WUR;

/** Free an array from kd_launch_upstream_argv; NULL-safe. */
void kd_launch_argv_free(char **argv);

/** The name of the upstream program of a form ("torchrun", ...), or NULL. */
const char *kd_launch_form_program(enum kd_launch_form form);

#endif
