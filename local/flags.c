/*
 * Range-checked command-line values (flags.h): the checks and the wording of
 * their usage errors in one place for kdet-local and its kubelet command.
 */
#include "flags.h"

#include <limits.h>
#include <stdio.h>

#include "core/log.h"
#include "core/str.h"

int kd_flag_int(const char *prog, const char *name, const char *value, int min, int max, int *out)
{
    int v = 0;
    if (kd_parse_int(value, &v) == 0 && v >= min && v <= max) {
        *out = v;
        return 0;
    }
    if (max == INT_MAX)
        fprintf(stderr, "%s: --%s %s: expected an integer >= %d\n", prog, name, value, min);
    else
        fprintf(stderr, "%s: --%s %s: expected an integer in %d..%d\n", prog, name, value, min,
                max);
    return -1;
}

int kd_flag_u64(const char *prog, const char *name, const char *value, uint64_t min, uint64_t *out)
{
    uint64_t v = 0;
    if (kd_parse_u64(value, &v) == 0 && v >= min) {
        *out = v;
        return 0;
    }
    fprintf(stderr, "%s: --%s %s: expected a count >= %llu\n", prog, name, value,
            (unsigned long long)min);
    return -1;
}

int kd_flag_size(const char *prog, const char *name, const char *value, uint64_t *out)
{
    if (kd_parse_size(value, out) == 0)
        return 0;
    fprintf(stderr, "%s: --%s %s: expected a size such as 8MiB\n", prog, name, value);
    return -1;
}

int kd_flag_log_level(const char *prog, const char *value, int *out)
{
    if (kd_log_level_parse(value, out) == 0)
        return 0;
    fprintf(stderr, "%s: --log-level %s: expected debug|info|warn|error\n", prog, value);
    return -1;
}
