/*
 * The kinds kdet-local serves: the built-in ones (namespaces, pods, ...)
 * and those that CustomResourceDefinitions register at run time, with what
 * discovery reports about each (verbs, scope, short names, subresources).
 */
#ifndef KD_LOCAL_REGISTRY_H
#define KD_LOCAL_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>

#include "core/err.h"

struct kd_restype {
    char *group;    /* "" for the core group */
    char *version;  /* "v1" */
    char *resource; /* plural, "configmaps" */
    char *kind;     /* "ConfigMap" */
    char *singular; /* "configmap" */
    char *gr;       /* storage key "group/resource" ("/configmaps" for core) */
    bool namespaced;
    bool has_status; /* a status subresource */
    bool has_log;    /* pods/log */
    bool builtin;
    bool generation;                 /* metadata.generation tracks spec changes */
    bool removed;                    /* its CRD was deleted; kept so borrowed pointers stay valid */
    json_t *short_names;             /* array of strings, owned */
    json_t *categories;              /* array of strings, owned */
    json_t *schema;                  /* CRs: openAPIV3Schema, owned, or NULL */
    json_t *printer_columns;         /* CRs: additionalPrinterColumns, owned, or NULL */
    const char *const *field_labels; /* extra fieldSelector labels, NULL-terminated */
    struct kd_restype *next;
};

struct kd_registry;

/** A registry holding the built-in kinds. Caller frees with kd_registry_free. */
struct kd_registry *kd_registry_new(void);
void kd_registry_free(struct kd_registry *reg);

/*
 * The functions below are not thread-safe: kdet-local calls them with the
 * store lock held. Returned pointers stay valid until kd_registry_free.
 */

/** The served type for group/version/resource, or NULL. */
struct kd_restype *kd_registry_find(struct kd_registry *reg, const char *group, const char *version,
                                    const char *resource);

/** Any served version of group + kind (for ownerReferences), or NULL. */
struct kd_restype *kd_registry_find_kind(struct kd_registry *reg, const char *group,
                                         const char *kind);

/** First type in registration order (iterate with ->next; skip ->removed). */
struct kd_restype *kd_registry_first(struct kd_registry *reg);

/**
 * Register (or refresh) the kinds a CRD object describes: one type per
 * served version. Returns 0 or KD_EINVALID with a message in err.
 */
int kd_registry_apply_crd(struct kd_registry *reg, const json_t *crd, char *err) KD_WUR;

/** Mark the kinds of the CRD named crd_name removed. */
void kd_registry_remove_crd(struct kd_registry *reg, const char *crd_name);

/** Discovery documents, new JSON (caller decrefs). */
json_t *kd_registry_group_list(struct kd_registry *reg);
json_t *kd_registry_group(struct kd_registry *reg, const char *group);
/** APIResourceList for group/version ("" group = core), or NULL when not served. */
json_t *kd_registry_resource_list(struct kd_registry *reg, const char *group, const char *version);

/** "v1" or "group/version". Returned string is static per type (owned by it). */
const char *kd_restype_api_version(const struct kd_restype *rt, char *buf, size_t len);

#endif
