/*
 * Internal to lib/config: the field checks that experiment configs
 * (config.c) and task configs (task.c) share. Each check records the first
 * error in its context as "FILE:LINE:COL: PATH: message" (no position for a
 * config held as JSON) and returns the context's code; later checks on a
 * failed context return at once, so a chain of `a || b || c` stops at the
 * first failure. Not for other modules.
 */
#ifndef KD_CONFIG_CHECK_H
#define KD_CONFIG_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"
#include "yaml/yaml.h"

/* The longest JSON path a message names. */
#define PATHLEN 512

/** One validation: where errors go, the YAML documents positions come from, and what earlier
 * sections found that later ones need. */
struct kd_config_vctx {
    char *err;
    const struct kd_yaml_doc *docs[2]; /* the config, then the template; may be NULL */
    int rc;
    bool cr; /* checking an Experiment resource's spec: kdet's own fields are allowed */
    const char *searcher; /* searcher.name when it is a known method, else NULL */
    int64_t records_per_epoch;
    int64_t slots_per_trial;
    size_t hp_leaves;
    bool shm_set; /* resources.shm_size is set: kdet mounts /dev/shm */
};

/** A key Determined knows and kdet refuses, with the reason. */
struct kd_config_unsupported {
    const char *key;
    const char *why;
};

/** A short rendering of a value for "got ..." (strings quoted, long ones cut), in buf. */
const char *kd_config__desc(const json_t *v, char *buf, size_t n);

/**
 * Record the first error: "FILE:LINE:COL: PATH: message". `node`, or else
 * `locpath` (a JSON path), says where to point; `at_key`: at its key.
 * Returns the context's code (KD_EINVALID).
 */
int kd_config__fail_at(struct kd_config_vctx *c, const json_t *node, const char *locpath,
                       bool at_key, const char *path, const char *fmt, ...) KD_PRINTF(6, 7);

#define BAD(c, node, path, ...) kd_config__fail_at((c), (node), (path), false, (path), __VA_ARGS__)
#define BADKEY(c, node, path, ...)                                                                 \
    kd_config__fail_at((c), (node), (path), true, (path), __VA_ARGS__)

/** out = base.key (or key at the top), cut to PATHLEN - 1 bytes. */
void kd_config__join(char *out, const char *base, const char *key);
/** out = base[i]. */
void kd_config__joinidx(char *out, const char *base, size_t i);
/** A field's value; NULL when absent or null (null means "use the default"). */
json_t *kd_config__field(const json_t *obj, const char *key);
bool kd_config__in_list(const char *s, const char *const *list);
/** "a, b, c" of a NULL-terminated list. */
void kd_config__list_text(const char *const *list, char *buf, size_t n);
/** The closest plausible candidate for a misspelt word, or NULL. */
const char *kd_config__suggest(const char *word, const char *const *cands);
/** "an integer from 1 to 99" and the like. */
void kd_config__int_phrase(int64_t min, int64_t max, char *buf, size_t n);

/**
 * Every key of obj must be in `allowed`; `unsup` (may be NULL) names keys
 * that Determined knows but kdet does not support, with the reason; an
 * unknown key gets "did you mean". `owner` (may be NULL) names what obj is.
 */
int kd_config__check_keys(struct kd_config_vctx *c, const json_t *obj, const char *path,
                          const char *const *allowed, const struct kd_config_unsupported *unsup,
                          const char *owner);
int kd_config__want_object(struct kd_config_vctx *c, const json_t *v, const char *path);
/** A required field of obj (at opath): "required field is missing" plus why. */
int kd_config__need(struct kd_config_vctx *c, const json_t *obj, const char *opath, const char *key,
                    const char *why);
/** An optional (or required) integer field in [min, max]; *out untouched when absent. */
int kd_config__want_int(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                        const char *key, bool required, int64_t min, int64_t max, int64_t *out);
/** A number within bounds; `what` describes the accepted range. */
int kd_config__want_num(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                        const char *key, bool required, double lo, bool lo_excl, double hi,
                        bool hi_excl, const char *what, double *out);
int kd_config__want_bool(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                         const char *key);
int kd_config__want_str(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                        const char *key, bool required, const char **out);
int kd_config__want_enum(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                         const char *key, bool required, const char *const *vals, const char **out);
int kd_config__want_str_list(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                             const char *key);
bool kd_config__is_abs_path(const char *s);
int kd_config__want_abs_path(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                             const char *key, bool required);
/** "4Gi", "512M", "1.5 GB", "100": a memory size as Determined writes them. */
bool kd_config__is_mem_size(const char *s);

/*
 * The pod-shaped sections.
 */

/** resources.shm_size of the resources section r: bytes or a size string; sets c->shm_set. */
int kd_config__check_shm_size(struct kd_config_vctx *c, const json_t *r);
/** bind_mounts (devices false) or resources.devices: entries, absolute paths, unique
 * container paths clear of kdet's own mounts. */
int kd_config__check_mounts(struct kd_config_vctx *c, const json_t *list, const char *path,
                            bool devices);
/** Where bind_mounts and devices meet /dev/shm (c->shm_set), shared_fs checkpoints, the
 * pod_spec's volumeMounts, each other, and Bidirectional propagation. */
int kd_config__check_mount_clashes(struct kd_config_vctx *c, const json_t *cfg);
/** The environment section: image, environment_variables, pod_spec, force_pull_image,
 * registry_auth, add/drop_capabilities, ports, proxy_ports. */
int kd_config__check_environment(struct kd_config_vctx *c, const json_t *cfg);

#endif
