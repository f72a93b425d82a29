/*
 * det, the kdet command line: shared exit codes, the command table entry
 * points and the small helpers the commands use to report errors.
 */
#ifndef KD_CLI_CLI_H
#define KD_CLI_CLI_H

#include <stddef.h>

#include "core/err.h"

/* Exit codes (documented in docs/cli.md and `det --help`). */
enum det_exit {
    DET_EXIT_OK = 0,
    DET_EXIT_ERROR = 1,      /* anything else: I/O, internal */
    DET_EXIT_USAGE = 2,      /* bad command line */
    DET_EXIT_INVALID = 3,    /* invalid config, template or context */
    DET_EXIT_NO_CONTROL = 4, /* needs kdet-controller, not in this build */
};

/** Print "det: <message>" to stderr. */
void det_err(const char *fmt, ...) KD_PRINTF(1, 2);

/** Print a usage error with a "did you mean" suggestion among cands (NULL-terminated). */
void det_usage_suggest(const char *what, const char *word, const char *const *cands,
                       const char *help_cmd);

/** `det experiment ...`: argv[0] is "experiment". Returns an exit code. */
int det_cmd_experiment(int argc, char **argv);

/** The experiments.kdet.io CRD YAML, built in from crds/experiments.yaml. */
extern const unsigned char det_crd_experiments[];
extern const size_t det_crd_experiments_len;

#endif
