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

struct kd_api;
struct kd_api_target;
struct kd_http_req;
struct kd_restype;

/** A subresource a kind serves besides status (pods/log, pods/binding). */
struct kd_subresource {
    const char *name;   /* "log" */
    const char *method; /* the one method it answers; others get 405 */
    const char *verb;   /* what discovery lists: "get", "create" */
    const char *kind;   /* what discovery lists; NULL: the kind itself */
    void (*serve)(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t);
};

/** What a kind's metadata.name must be. */
enum kd_name_rule {
    KD_NAME_SUBDOMAIN, /* an RFC 1123 subdomain (most kinds) */
    KD_NAME_LABEL,     /* an RFC 1123 label (namespaces) */
    KD_NAME_DNS1035,   /* a DNS-1035 label (services) */
};

/*
 * What one kind does differently from the generic verbs of kdet-local's API
 * server, as kube-apiserver's resource strategies (strategy.c). Every hook
 * may be NULL. Hooks that take r answer it themselves when they refuse and
 * then return non-zero. "Lock held": called with the store lock held.
 */
struct kd_strategy {
    /** A client's object: cur NULL on create; on update the stored object (status_only for
     *  the status subresource). 0, or a 422 has been sent. */
    int (*validate)(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                    json_t *obj, const json_t *cur, bool status_only);
    /** Create, lock held, after the generic checks: defaults, admission, status reset. 0, or
     *  the response has been sent. */
    int (*prepare_create)(struct kd_api *api, struct kd_http_req *r, const struct kd_restype *rt,
                          const char *name, json_t *obj);
    /** Update of the main resource: what the server derives in built (cur is the stored one). */
    void (*prepare_update)(const json_t *cur, json_t *built);
    /** Before a real (not dry-run) write, lock held: 0, or KD_EINVALID with err (the field
     *  "spec" is at fault). cur is NULL on create; on failure the state of cur is kept. */
    int (*admit_write)(struct kd_api *api, const json_t *cur, const json_t *obj, char *err);
    /** After a create was stored, lock held. */
    int (*after_create)(struct kd_api *api, const json_t *obj);
    /** After the object named name was removed, lock held. */
    void (*after_delete)(struct kd_api *api, const char *name);
    /** Whether deleting cur waits for a node (a running pod with a grace period != 0). */
    bool (*graceful)(const json_t *cur, int64_t grace);
    bool delete_waits;          /* deletion always goes through a finalizing phase (namespaces) */
    bool delete_returns_object; /* a delete answers with the object, not a Status (pods) */
    bool update_needs_rv;       /* no unconditional update (custom resources, CRDs) */
    bool strategic_merge;       /* accepts application/strategic-merge-patch+json */
    enum kd_name_rule name_rule;
    const struct kd_subresource *subresources; /* terminated by a NULL name, or NULL */
};

/** Picks a kind's strategy when the registry makes the kind; NULL: the generic verbs only. */
typedef const struct kd_strategy *(*kd_strategy_fn)(const struct kd_restype *rt);

struct kd_restype {
    char *group;    /* "" for the core group */
    char *version;  /* "v1" */
    char *resource; /* plural, "configmaps" */
    char *kind;     /* "ConfigMap" */
    char *singular; /* "configmap" */
    char *gr;       /* storage key "group/resource" ("/configmaps" for core) */
    bool namespaced;
    bool has_status; /* a status subresource */
    bool builtin;
    bool generation;                 /* metadata.generation tracks spec changes */
    bool removed;                    /* its CRD was deleted; kept so borrowed pointers stay valid */
    json_t *short_names;             /* array of strings, owned */
    json_t *categories;              /* array of strings, owned */
    json_t *schema;                  /* CRs: openAPIV3Schema, owned, or NULL */
    json_t *printer_columns;         /* CRs: additionalPrinterColumns, owned, or NULL */
    const char *const *field_labels; /* extra fieldSelector labels, NULL-terminated */
    const struct kd_strategy *strategy; /* never NULL */
    struct kd_restype *next;
};

struct kd_registry;

/**
 * A registry holding the built-in kinds, each with the strategy strategy_of
 * picks (kdet-local's API server passes kd_strategy_of; NULL gives every kind
 * an empty strategy). Caller frees with kd_registry_free.
 */
struct kd_registry *kd_registry_new(kd_strategy_fn strategy_of);
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
