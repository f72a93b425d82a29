/*
 * Experiment configuration in Determined's format: load a YAML file (and
 * an optional template), merge, validate every field and cross-field rule,
 * and fill Determined's defaults. docs/config.md is the user-facing
 * reference for the schema this code accepts.
 */
#ifndef KD_CONFIG_CONFIG_H
#define KD_CONFIG_CONFIG_H

#include <stdbool.h>

#include <jansson.h>

#include "core/err.h"
#include "yaml/yaml.h"

/** The byte budget of a merged config (the YAML reader's, KD_YAML_MAX_BYTES). */
#define KD_CONFIG_MAX_BYTES KD_YAML_MAX_BYTES

/**
 * Load the experiment config at `path`, merge it over the template at
 * `template_path` (NULL for none) with kd_config_merge_template, and
 * validate the result with the rules of kd_config_check.
 *
 * On success *out is a new reference to the merged config exactly as the
 * user wrote it (no defaults filled), a tree of its own that the caller may
 * modify, ready to become an Experiment CR's spec; the caller json_decref()s
 * it. On failure *out is NULL and `err` (KD_ERRLEN bytes, may be NULL)
 * holds one message of the form
 *   exp.yaml:12:5: searcher.max_trials: expected a positive integer, got "ten"
 * naming the file and position of the offending node (of its key for an
 * unknown field; of the parent object for a missing required field; the
 * template's name and position when the node came from the template),
 * then the JSON path, then the cause. Secret values are never echoed.
 *
 * Returns 0, KD_EINVALID (the config is not valid), KD_EPARSE (bad YAML),
 * KD_ETOOBIG, -errno (file unreadable) or KD_EINVAL. Blocks on file I/O;
 * thread-safe.
 */
int kd_config_load(const char *path, const char *template_path, json_t **out, char *err) KD_WUR;

/**
 * The validation of kd_config_load applied to a config held as JSON (from
 * an Experiment CR; no file positions): the error starts with the JSON
 * path, e.g. "searcher.max_trials: expected a positive integer, got 0".
 * Does not modify cfg; it may or may not have defaults filled. kdet's own
 * fields of the Experiment resource's spec (paused, canceled, archived:
 * booleans; template: a string; context: a mapping, checked in detail by
 * the CRD schema) are accepted here, and only here: kd_config_load rejects
 * them in a user's file.
 * Returns 0 or KD_EINVALID (KD_EINVAL for a NULL cfg). Thread-safe.
 */
int kd_config_check(const json_t *cfg, char *err) KD_WUR;

/**
 * Fill in place every field the user left out with Determined's default
 * (each listed in docs/config.md), e.g. resources.slots_per_trial = 1,
 * max_restarts = 5, searcher.smaller_is_better = true, checkpoint_policy =
 * "best", checkpoint_storage.save_trial_latest = 1. Fields the user set are
 * never changed. cfg should have passed kd_config_check; returns 0, or
 * KD_EINVALID when cfg is not an object or a section it must descend into
 * has the wrong type (detail in err). Not thread-safe on the same cfg.
 */
int kd_config_apply_defaults(json_t *cfg, char *err) KD_WUR;

/**
 * The warnings for a config that passed kd_config_load or kd_config_check:
 * one string per field of Determined's reference that kdet accepts but does
 * not honour, "FIELD: why; ignored" (e.g. "slurm: not applicable on kdet:
 * ..."), plus notes on fields kdet honours differently (a searcher without
 * max_length). Never fails: a new array (empty when there
 * is nothing to say) that the caller json_decref()s. Aborts on out-of-memory.
 * Pure and thread-safe.
 */
json_t *kd_config_warnings(const json_t *cfg);

/**
 * Whether `type` is the action of a log policy kdet acts on
 * (log_policies[].action, or its `type` in the older mapping form):
 * "cancel_retries" or "exclude_node". Pure.
 */
bool kd_config_log_action_valid(const char *type);

/**
 * Merge config `cfg` over template `tmpl` with Determined's rules:
 *  - a scalar (or a value of a different type) in cfg overrides tmpl; a
 *    null in cfg means "not set" and keeps tmpl's value; `entrypoint` is
 *    one value even when it is a list (cfg's replaces tmpl's);
 *  - lists concatenate, template entries first, then cfg's;
 *  - except `bind_mounts` and `resources.devices`, where a template entry
 *    whose `container_path` cfg also uses is dropped;
 *  - objects merge recursively; keys only in one side are kept, cfg's key
 *    order first, then the template's extra keys.
 * *out is a new reference; it may share unchanged subtrees with tmpl and
 * cfg by reference (neither input is modified), so json_deep_copy it
 * before modifying it in place. The result is held to a byte budget,
 * KD_CONFIG_MAX_BYTES of expanded size (each string and key its length
 * plus one, every other node one; shared subtrees counted each time they
 * occur), so that a copy of it cannot take unbounded memory.
 * Returns 0, KD_ETOOBIG (over the budget: *out NULL, `err` says so),
 * KD_EINVAL (NULL argument) or KD_ENOMEM; `err` (KD_ERRLEN bytes, may be
 * NULL) gets the detail. Thread-safe.
 */
int kd_config_merge_template(const json_t *tmpl, const json_t *cfg, json_t **out, char *err) KD_WUR;

/**
 * The arguments of `kdet-launch` (without the program name) that run an
 * experiment's `entrypoint` (a string or a list of strings, already
 * validated by kd_config_check):
 *  - `model_def:Class` (the legacy form)     -> --trial model_def:Class
 *  - `python3 -m kdet.launch.FORM ARGS...`   -> FORM ARGS...
 *    (FORM: torch_distributed, deepspeed, horovod; Determined's
 *    `determined.launch.FORM` is mapped to the same)
 *  - any other command `WORD...`             -> -- WORD...
 * A string is split into words the way docs/config.md describes ('...'
 * and "..." quoting, no shell). *argv is NULL-terminated and *argc set;
 * the caller frees it with kd_config_argv_free. Returns 0, or KD_EINVALID
 * (err names the problem) when the entrypoint is missing or malformed.
 * Aborts on out-of-memory. Thread-safe.
 */
int kd_config_launch_argv(const json_t *entrypoint, char ***argv, int *argc, char *err) KD_WUR;

/** Free an array from kd_config_launch_argv (the strings and the array); NULL-safe. */
void kd_config_argv_free(char **argv);

#endif
