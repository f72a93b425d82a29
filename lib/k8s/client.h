/*
 * A Kubernetes REST client over libcurl: resource paths, typed errors that
 * keep the API server's Status, get/list/create/update/patch/delete (and
 * the status subresource), paginated lists, watches, retries with backoff
 * and a client-side QPS limit.
 */
#ifndef KD_K8S_CLIENT_H
#define KD_K8S_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"
#include "k8s/config.h"

/* ---- addressing -------------------------------------------------------- */

/** A group/version/resource. group "" (or NULL) is the core group (/api/v1). */
struct kd_k8s_gvr {
    const char *group;
    const char *version;
    const char *resource; /* plural, lower case: "pods", "experiments" */
};

#define KD_K8S_GVR(g, v, r) ((struct kd_k8s_gvr){(g), (v), (r)})
#define KD_K8S_CONFIGMAPS KD_K8S_GVR("", "v1", "configmaps")
#define KD_K8S_PODS KD_K8S_GVR("", "v1", "pods")
#define KD_K8S_SERVICES KD_K8S_GVR("", "v1", "services")
#define KD_K8S_NODES KD_K8S_GVR("", "v1", "nodes")
#define KD_K8S_NAMESPACES KD_K8S_GVR("", "v1", "namespaces")
#define KD_K8S_EVENTS KD_K8S_GVR("", "v1", "events")
#define KD_K8S_LEASES KD_K8S_GVR("coordination.k8s.io", "v1", "leases")
#define KD_K8S_EXPERIMENTS KD_K8S_GVR("kdet.io", "v1alpha1", "experiments")
#define KD_K8S_TRIALS KD_K8S_GVR("kdet.io", "v1alpha1", "trials")
#define KD_K8S_TASKS KD_K8S_GVR("kdet.io", "v1alpha1", "tasks")

/** Query parameters of list and watch. Unset fields (NULL, 0, false) are left out. */
struct kd_k8s_query {
    const char *label_selector;
    const char *field_selector;
    long limit;
    const char *cont; /* continue token */
    const char *resource_version;
    const char *resource_version_match; /* "Exact" | "NotOlderThan" */
    bool watch;
    bool allow_watch_bookmarks;
    long timeout_seconds;
    const char *dry_run;       /* "All" */
    const char *field_manager; /* for create/update/patch */
};

/**
 * Append the URL path (and query string) of a request to out:
 *   /api/v1/namespaces/NS/pods/NAME[/SUB]
 *   /apis/GROUP/VERSION/namespaces/NS/RESOURCE/NAME[/SUB]
 *   /api/v1/nodes/NAME (ns NULL or "": cluster-scoped, or all namespaces)
 * Path segments and query values are percent-encoded. Returns 0, KD_EINVAL
 * (err names the field) when version/resource are missing, a segment is
 * "." or "..", or `sub` is given without `name`; KD_ETOOBIG from out's cap.
 */
int kd_k8s_path(struct kd_buf *out, const struct kd_k8s_gvr *gvr, const char *ns, const char *name,
                const char *sub, const struct kd_k8s_query *q, char *err) KD_WUR;

/** Append s percent-encoded (RFC 3986 unreserved characters kept) to out. */
int kd_k8s_urlencode(struct kd_buf *out, const char *s) KD_WUR;

/* ---- errors -------------------------------------------------------------- */

/**
 * What the API server said about a failed request: its HTTP code and the
 * fields of its Status object. kd_k8s_status_free releases `causes`.
 */
struct kd_k8s_status {
    int http;           /* HTTP status; 0 when no response arrived */
    char reason[64];    /* Status.reason: "NotFound", "AlreadyExists", "Conflict", ... */
    char message[1024]; /* Status.message (or a transport error) */
    json_t *causes;     /* Status.details.causes (array) or NULL; owned */
    long retry_after_s; /* Retry-After header or details.retryAfterSeconds; 0 if absent */
};

void kd_k8s_status_free(struct kd_k8s_status *st);

/**
 * Map an HTTP code and a response body (a Status object, or anything else)
 * to a KD_E* code, filling st (optional) and err (optional) with
 * "HTTP 409 AlreadyExists: configmaps \"x\" already exists" plus, for 422,
 * every cause "field: message". 2xx returns 0.
 *   404 NOT_FOUND, 409 AlreadyExists EEXIST, other 409 ECONFLICT, 410 EGONE,
 *   422 EINVALID, 400 EINVAL, 401 EUNAUTHORIZED, 403 EFORBIDDEN,
 *   429 and 5xx EAGAIN (504 Timeout too), 405/415 ENOTSUP, others EPROTO.
 * Pure; thread-safe.
 */
int kd_k8s_map_status(int http, const char *body, size_t len, struct kd_k8s_status *st, char *err);

/* ---- client -------------------------------------------------------------- */

struct kd_k8s_client;

/** Client tunables; zero fields take the defaults in brackets. */
struct kd_k8s_client_opts {
    double qps;              /* sustained requests per second [50]; < 0: unlimited */
    int burst;               /* token bucket size [100] */
    long timeout_ms;         /* whole request, not watches [30000] */
    long connect_timeout_ms; /* [10000] */
    size_t max_body;         /* response body cap [64 MiB] */
    size_t max_line;         /* watch event line cap [16 MiB] */
    int max_retries;         /* retries after the first attempt [5]; < 0: none */
    long backoff_base_ms;    /* first retry delay [200], doubled each retry */
    long backoff_max_ms;     /* cap on one delay, also on Retry-After [10000] */
    long token_reread_ms;    /* re-read a token file this often [60000] */
};

/**
 * Create a client for cfg (copied; cfg may be freed afterwards). Does no
 * I/O besides reading a token file. *out freed with kd_k8s_client_free.
 * The client is thread-safe: every call may come from any thread; easy
 * handles are pooled so connections are kept alive (HTTP/2 where the
 * server offers it over TLS).
 */
int kd_k8s_client_new(const struct kd_k8s_config *cfg, const struct kd_k8s_client_opts *opts,
                      struct kd_k8s_client **out, char *err) KD_WUR;

/** Free the client. No call may be in progress. NULL-safe. */
void kd_k8s_client_free(struct kd_k8s_client *c);

/** The namespace of the config (never NULL). Borrowed, valid while c lives. */
const char *kd_k8s_client_namespace(const struct kd_k8s_client *c);

/**
 * Counters since the client was created. `requests` counts attempts; the
 * per-verb counters count calls (a call retried three times counts once),
 * so that callers can tell how many reads and writes their logic makes.
 */
struct kd_k8s_client_stats {
    uint64_t requests;      /* attempts sent, retries and watches included */
    uint64_t retries;       /* attempts that were retries */
    uint64_t connects;      /* new connections opened (keep-alive reuses the others) */
    uint64_t reads;         /* GET calls (gets and list pages), watches not included */
    uint64_t watches;       /* watch calls */
    uint64_t creates;       /* POST calls */
    uint64_t updates;       /* PUT calls, status subresource included */
    uint64_t patches;       /* PATCH calls, status subresource included */
    uint64_t deletes;       /* DELETE calls */
    uint64_t status_writes; /* PUT and PATCH calls on a .../status subresource */
};

/** Read the counters. Thread-safe. */
void kd_k8s_client_stats(const struct kd_k8s_client *c, struct kd_k8s_client_stats *out);

/** Content types of kd_k8s_patch. */
enum kd_k8s_patch_type {
    KD_K8S_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    KD_K8S_PATCH_JSON,      /* application/json-patch+json (RFC 6902) */
    KD_K8S_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds) */
    KD_K8S_PATCH_APPLY,     /* application/apply-patch+yaml (server-side apply, JSON body) */
};

/**
 * One raw request. `path` from kd_k8s_path. `body` (may be NULL) is sent
 * with `content_type` (NULL: application/json). On 2xx returns 0 and, when
 * out is not NULL, *out = the parsed body (caller json_decref()s; NULL for
 * an empty body). Otherwise returns the mapped KD_E* code with st/err
 * filled; KD_ECONNECT when the server cannot be reached, KD_ETIMEDOUT on
 * timeout, KD_ETOOBIG when the body passes max_body.
 *
 * Retries (backoff doubling from backoff_base_ms, full jitter, capped at
 * backoff_max_ms, Retry-After honoured up to that cap): GET, PUT and DELETE
 * on 429, 5xx and connection errors; POST and PATCH only on 429 and when
 * the connection could not be opened (nothing was sent). Blocks; thread-safe.
 */
int kd_k8s_request(struct kd_k8s_client *c, const char *method, const char *path, const char *body,
                   const char *content_type, json_t **out, struct kd_k8s_status *st,
                   char *err) KD_WUR;

/** GET one object. */
int kd_k8s_get(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
               const char *name, json_t **out, struct kd_k8s_status *st, char *err) KD_WUR;

/** GET one page of a list (q may be NULL). *out is the List object. */
int kd_k8s_list(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                const struct kd_k8s_query *q, json_t **out, struct kd_k8s_status *st,
                char *err) KD_WUR;

/**
 * List every page (page size q->limit, default 500), following `continue`.
 * A 410 on a continue token (the snapshot expired) restarts the list from
 * scratch, at most 3 times. *out is a List object whose `items` hold every
 * item and whose metadata.resourceVersion is the list's.
 */
int kd_k8s_list_all(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                    const struct kd_k8s_query *q, json_t **out, struct kd_k8s_status *st,
                    char *err) KD_WUR;

/** POST obj to the collection (ns NULL: obj's metadata.namespace). *out: the created object. */
int kd_k8s_create(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                  json_t *obj, json_t **out, struct kd_k8s_status *st, char *err) KD_WUR;

/**
 * PUT obj (name and namespace from its metadata unless ns is given); with
 * metadata.resourceVersion set, a stale object gives KD_ECONFLICT.
 * `sub` = NULL for the object, "status" for the status subresource.
 */
int kd_k8s_update(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                  const char *sub, json_t *obj, json_t **out, struct kd_k8s_status *st,
                  char *err) KD_WUR;

/** PATCH name (sub NULL or "status") with `patch` of the given type. */
int kd_k8s_patch(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                 const char *name, const char *sub, enum kd_k8s_patch_type type, json_t *patch,
                 json_t **out, struct kd_k8s_status *st, char *err) KD_WUR;

/** DeleteOptions. Unset fields are left out. */
struct kd_k8s_delete_opts {
    const char *propagation_policy; /* "Foreground" | "Background" | "Orphan" */
    const char *precondition_uid;
    const char *precondition_rv;
    bool has_grace_period; /* send grace_period_seconds (0 deletes at once) */
    long grace_period_seconds;
};

/** DELETE name (opts may be NULL). *out (optional): the Status or the deleted object. */
int kd_k8s_delete(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                  const char *name, const struct kd_k8s_delete_opts *opts, json_t **out,
                  struct kd_k8s_status *st, char *err) KD_WUR;

/* ---- watch ---------------------------------------------------------------- */

enum kd_k8s_event_type {
    KD_K8S_ADDED,
    KD_K8S_MODIFIED,
    KD_K8S_DELETED,
    KD_K8S_BOOKMARK,
    KD_K8S_ERROR,
};

/** "ADDED" ... "ERROR" → type. 0 or KD_EPARSE. */
int kd_k8s_event_type_parse(const char *s, enum kd_k8s_event_type *out) KD_WUR;
const char *kd_k8s_event_type_name(enum kd_k8s_event_type t);

/**
 * Called for every event of a watch, on the watching thread. `obj` is
 * borrowed (json_incref to keep it). Return 0 to go on, non-zero to end the
 * watch (kd_k8s_watch then returns that value).
 */
typedef int (*kd_k8s_watch_fn)(enum kd_k8s_event_type type, json_t *obj, void *ud);

/**
 * Watch a collection from q->resource_version (watch=true is implied),
 * calling fn for each event line (at most max_line bytes each; a longer
 * line ends the watch with KD_ETOOBIG). Blocks until the server ends the
 * stream (returns 0: re-watch from the last resourceVersion seen), fn
 * returns non-zero, *stop becomes non-zero (checked at least every second;
 * returns KD_ECANCELED), or an error: KD_EGONE on HTTP 410 or on an ERROR
 * event carrying a 410 Status (relist), other ERROR events map like
 * kd_k8s_map_status. ERROR events are not passed to fn. Not retried here:
 * reconnecting is the caller's policy (the informer's). Thread-safe; one
 * thread per watch.
 */
int kd_k8s_watch(struct kd_k8s_client *c, const struct kd_k8s_gvr *gvr, const char *ns,
                 const struct kd_k8s_query *q, kd_k8s_watch_fn fn, void *ud, const atomic_int *stop,
                 struct kd_k8s_status *st, char *err) KD_WUR;

/* ---- helpers -------------------------------------------------------------- */

/** metadata.FIELD of obj as a borrowed string, or NULL. */
const char *kd_k8s_meta_str(const json_t *obj, const char *field);

/** "ns/name" (or "name" when ns is empty) of obj into buf. 0 or KD_ETOOBIG / KD_EINVAL. */
int kd_k8s_obj_key(const json_t *obj, char *buf, size_t len) KD_WUR;

/**
 * A token bucket: `burst` tokens, refilled at `qps` per second. Thread-safe.
 * kd_k8s_bucket_take blocks until a token is available (it reserves the
 * next token, so callers are served in order) and returns the ms waited.
 */
struct kd_k8s_bucket;
struct kd_k8s_bucket *kd_k8s_bucket_new(double qps, int burst);
void kd_k8s_bucket_free(struct kd_k8s_bucket *b);
int64_t kd_k8s_bucket_take(struct kd_k8s_bucket *b);

/**
 * Delay before retry `attempt` (0-based): uniform in
 * [d/2, d] with d = min(base * 2^attempt, max) ("equal jitter"); a
 * retry_after_s > 0 raises it to at least that many seconds, still capped
 * at max. Thread-safe.
 */
long kd_k8s_backoff_ms(int attempt, long base_ms, long max_ms, long retry_after_s);

#endif
