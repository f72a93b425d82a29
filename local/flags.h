/*
 * Command-line values of kdet-local and `kdet-local kubelet`: one parser per
 * kind of value, each printing the same usage error (naming the program,
 * the flag and what was expected) so both commands read alike.
 */
#ifndef KD_LOCAL_FLAGS_H
#define KD_LOCAL_FLAGS_H

#include <stdint.h>

#include "core/err.h"

/**
 * An integer in [min, max] (max INT_MAX: no upper bound) into *out. On a
 * bad value prints "PROG: --NAME VALUE: expected an integer in MIN..MAX"
 * (or ">= MIN") to stderr and returns -1 (a usage error, exit status 2).
 */
int kd_flag_int(const char *prog, const char *name, const char *value, int min, int max,
                int *out) KD_WUR;

/** A count >= min into *out; the same error handling as kd_flag_int. */
int kd_flag_u64(const char *prog, const char *name, const char *value, uint64_t min,
                uint64_t *out) KD_WUR;

/** A byte size such as 8MiB into *out; the same error handling. */
int kd_flag_size(const char *prog, const char *name, const char *value, uint64_t *out) KD_WUR;

/** A log level (debug|info|warn|error) into *out; the same error handling. */
int kd_flag_log_level(const char *prog, const char *value, int *out) KD_WUR;

#endif
