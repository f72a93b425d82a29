/*
 * Cluster defaults merged into experiment configs before they are checked
 * (controller/experiment.c), so that a config written for Determined, which
 * leans on the master's default checkpoint storage, runs unchanged.
 */
#include "defaults.h"

#include <string.h>

void kd_ctrl_default_storage(json_t *cfg, const json_t *def)
{
    if (!json_is_object(def) || !json_is_object(cfg))
        return;
    json_t *cs = json_object_get(cfg, "checkpoint_storage");
    if (cs == NULL || json_is_null(cs)) {
        json_object_set_new(cfg, "checkpoint_storage", json_deep_copy(def));
        return;
    }
    if (!json_is_object(cs))
        return;
    const char *type = json_string_value(json_object_get(cs, "type"));
    const char *dtype = json_string_value(json_object_get(def, "type"));
    if (type != NULL && (dtype == NULL || strcmp(type, dtype) != 0))
        return;
    json_t *merged = json_deep_copy(def);
    json_object_update(merged, cs); /* the config's own fields win */
    json_object_set_new(cfg, "checkpoint_storage", merged);
}

int kd_ctrl_default_storage_parse(const char *path, const char *text, json_t **out, char *err)
{
    json_error_t je;
    *out = NULL;
    json_t *j = json_loads(text, 0, &je);
    if (j == NULL)
        return kd_seterr(err, KD_EINVALID, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!json_is_object(j) || type == NULL || type[0] == '\0') {
        json_decref(j);
        return kd_seterr(err, KD_EINVALID,
                         "%s: expected a checkpoint_storage object with a \"type\" "
                         "(shared_fs or s3)",
                         path);
    }
    *out = j;
    return 0;
}
