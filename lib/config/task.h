/*
 * Task configuration in Determined's format for notebooks, commands,
 * shells and TensorBoards (description, environment, resources,
 * bind_mounts, idle_timeout, notebook_idle_type, work_dir, entrypoint for
 * commands): load a YAML file (and an optional template), merge, validate
 * with the experiment config's checks and messages (file:line:col, JSON
 * path, "did you mean"), and fill the defaults. docs/tasks.md is the
 * user-facing reference.
 */
#ifndef KD_CONFIG_TASK_H
#define KD_CONFIG_TASK_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"

enum kd_task_kind {
    KD_TASK_NOTEBOOK = 0,
    KD_TASK_COMMAND,
    KD_TASK_SHELL,
    KD_TASK_TENSORBOARD,
};

/** "notebook", "command", "shell", "tensorboard"; static. */
const char *kd_task_kind_name(enum kd_task_kind k);
/** The inverse; KD_EINVAL for anything else. */
int kd_task_kind_parse(const char *s, enum kd_task_kind *out) KD_WUR;

/** The longest idle_timeout accepted: 30 days. */
#define KD_TASK_IDLE_MAX_MS (30LL * 24 * 3600 * 1000)

/**
 * A duration as Determined writes idle_timeout: Go's form ("30m", "1h",
 * "1h30m", "45s", "500ms") or a bare number of seconds; 1 ms to
 * KD_TASK_IDLE_MAX_MS. 0 with *ms set, or KD_EINVAL. Pure.
 */
int kd_task_duration_parse(const char *s, int64_t *ms) KD_WUR;

/**
 * Load the task config at `path` (NULL: an empty config, e.g. `det
 * notebook start` without --config-file), merge it over the template at
 * `template_path` (NULL for none) with kd_config_merge_template, set the
 * top-level fields of `over` (NULL: none; what the command line gives,
 * such as a command's entrypoint) over it, and validate the result for a
 * task of `kind` with kd_task_config_check's
 * rules. Errors name the file, line and column, then the JSON path:
 *   nb.yaml:3:3: resources.slots_per_trial: is an experiment field; a task
 *   asks for resources.slots
 * *out: a new reference to the merged config as written (no defaults), the
 * caller's. Returns 0, KD_EINVALID, KD_EPARSE, KD_ETOOBIG, -errno or
 * KD_EINVAL. Blocks on file I/O; thread-safe.
 */
int kd_task_config_load(enum kd_task_kind kind, const char *path, const char *template_path,
                        const json_t *over, json_t **out, char *err) KD_WUR;

/**
 * Validate a task config held as JSON (a Task's spec.config; no file
 * positions). Rules: known fields only; entrypoint required for a command
 * (a string or a list of strings) and refused for the others (kdet runs
 * Jupyter, sshd or TensorBoard itself); resources.slots 0..2^20,
 * priority 1..99, weight > 0, resource_pool, shm_size, devices; the
 * experiment's environment and bind_mounts rules; idle_timeout a duration
 * (not for commands, which end with their process); notebook_idle_type for
 * notebooks; work_dir an absolute path. Does not modify cfg. 0 or
 * KD_EINVALID with the path in err. Thread-safe.
 */
int kd_task_config_check(enum kd_task_kind kind, const json_t *cfg, char *err) KD_WUR;

/**
 * Fill the defaults in place: resources.slots 1 (0 for a TensorBoard),
 * notebook_idle_type kernels_or_terminals for a notebook. Fields set are
 * never changed. 0, or KD_EINVALID when a section has the wrong type.
 */
int kd_task_config_apply_defaults(enum kd_task_kind kind, json_t *cfg, char *err) KD_WUR;

/** resources.slots of a checked config, else the kind's default. Pure. */
int kd_task_config_slots(enum kd_task_kind kind, const json_t *cfg);

/** idle_timeout of a checked config in ms; 0 when it has none. Pure. */
int64_t kd_task_config_idle_ms(const json_t *cfg);

#endif
