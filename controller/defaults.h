/*
 * The cluster's defaults for experiment configs: what a platform engineer
 * sets once (the Helm chart's checkpointStorage, --default-checkpoint-storage)
 * and every experiment gets unless its config says otherwise. Pure: no I/O.
 */
#ifndef KD_CTRL_DEFAULTS_H
#define KD_CTRL_DEFAULTS_H

#include <jansson.h>

#include "core/err.h"

/**
 * Apply the cluster's default checkpoint storage (a JSON object with a
 * "type"; NULL: none) to an experiment config (modified in place):
 * - no checkpoint_storage: a copy of the default;
 * - one without a type, or of the default's type: the default's fields,
 *   then the config's own over them (Determined's partial override, e.g.
 *   only save_trial_best);
 * - one of another type: left alone (it replaces the default whole).
 * A checkpoint_storage that is not a mapping is left as it is, for the
 * config check to name.
 */
void kd_ctrl_default_storage(json_t *cfg, const json_t *def);

/**
 * Parse the default storage file's text (JSON, or YAML 1.2's JSON subset):
 * an object with a string "type". Returns 0 and *out (caller decrefs), or
 * KD_EINVALID with the cause in err naming the file.
 */
int kd_ctrl_default_storage_parse(const char *path, const char *text, json_t **out,
                                  char *err) KD_WUR;

#endif
