/*
 * Informers: keep a local, indexed cache of one resource in step with the
 * API server (list, then watch from the list's resourceVersion with
 * bookmarks; relist on 410; reconnect with backoff) and tell handlers about
 * every change, typically by queueing the object's key.
 */
#ifndef KD_K8S_INFORMER_H
#define KD_K8S_INFORMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"
#include "k8s/client.h"
#include "k8s/queue.h"

/* ---- cache ---------------------------------------------------------------- */

/**
 * A thread-safe store of objects by "namespace/name" (or "name" for
 * cluster-scoped ones), indexed by namespace, owner uid and label. Objects
 * are stored as compact JSON text (about a ninth of a jansson tree's
 * memory); every getter decodes a private copy that the caller owns
 * (json_decref it) and may change.
 */
struct kd_k8s_cache;

struct kd_k8s_cache *kd_k8s_cache_new(void);

/**
 * Index only the labels with these keys (a NULL-terminated array, copied;
 * { NULL }: no label at all) for kd_k8s_cache_by_label; by default every
 * label is indexed. Each indexed label value costs about 170 bytes per
 * object when it is unique to the object (a trial's request id). Call
 * before the first put; at most once.
 */
void kd_k8s_cache_index_labels(struct kd_k8s_cache *c, const char *const *keys);
void kd_k8s_cache_free(struct kd_k8s_cache *c);

/** A copy of the object under key, or KD_ENOTFOUND. */
int kd_k8s_cache_get(struct kd_k8s_cache *c, const char *key, json_t **obj) KD_WUR;

/** Number of objects. */
size_t kd_k8s_cache_len(struct kd_k8s_cache *c);

/** Bytes the objects take as stored (deflated text), and as text (*text, may be NULL). */
size_t kd_k8s_cache_bytes(struct kd_k8s_cache *c, size_t *text);

/** New array of every object in namespace ns (NULL: all), in no particular order. */
json_t *kd_k8s_cache_list(struct kd_k8s_cache *c, const char *ns);

/**
 * Call fn for every object in namespace ns (NULL: all), in no particular
 * order, with a private copy decoded for that call only (borrowed: freed
 * when fn returns, json_incref to keep it). Unlike kd_k8s_cache_list, at
 * most one object is decoded at a time, so a pass over 10,000 objects does
 * not build 10,000 trees at once. fn returns 0 to go on, non-zero to stop
 * (that value is returned). The cache's read lock is held during the whole
 * walk: fn must not call this cache's functions (other caches are fine),
 * and writers wait until the walk ends.
 */
int kd_k8s_cache_each(struct kd_k8s_cache *c, const char *ns, int (*fn)(json_t *obj, void *ud),
                      void *ud);

/** A kd_k8s_cache_each_if callback's return: mark this object and go on. */
#define KD_K8S_EACH_MARK 1

/**
 * kd_k8s_cache_each, asking want(key, marked, ud) first for each object
 * (key borrowed; want NULL: every object) and decoding and passing to fn
 * only those it returns true for. fn may return KD_K8S_EACH_MARK to mark the object it was given;
 * the mark stays until the object changes (any put or relist that replaces it), so a walker can
 * skip, without decoding them, objects it has seen and that did not change since. One mark per
 * object: a cache has one such walker (the controller's scheduler pass).
 */
int kd_k8s_cache_each_if(struct kd_k8s_cache *c, const char *ns,
                         bool (*want)(const char *key, bool marked, void *ud),
                         int (*fn)(json_t *obj, void *ud), void *ud);

/** kd_k8s_cache_each over the objects with an ownerReference of this uid. */
int kd_k8s_cache_each_owner(struct kd_k8s_cache *c, const char *uid,
                            int (*fn)(json_t *obj, void *ud), void *ud);

/**
 * kd_k8s_cache_each_owner, asking want(key, rv, ud) first for each object (its key and
 * metadata.resourceVersion, "" when it has none; both borrowed) and decoding for fn only the
 * objects it returns true for. A walker that keeps what it read of each object with its
 * resourceVersion decodes only the objects that changed since its last walk. want runs under
 * the read lock, as fn does.
 */
int kd_k8s_cache_each_owner_changed(struct kd_k8s_cache *c, const char *uid,
                                    bool (*want)(const char *key, const char *rv, void *ud),
                                    int (*fn)(json_t *obj, void *ud), void *ud);

/** New array of the objects with an ownerReference of this uid. */
json_t *kd_k8s_cache_by_owner(struct kd_k8s_cache *c, const char *uid);

/** New array of the objects whose label `key` equals `value`. */
json_t *kd_k8s_cache_by_label(struct kd_k8s_cache *c, const char *key, const char *value);

/**
 * Insert or replace obj (encoded; no reference is kept) under its key;
 * *old (if not NULL) gets a copy of the previous object, or NULL. 0 or
 * KD_EINVAL when obj has no metadata.name.
 */
int kd_k8s_cache_put(struct kd_k8s_cache *c, json_t *obj, json_t **old) KD_WUR;

/** Remove key; *old (if not NULL) gets a copy of the removed object. 0 or KD_ENOTFOUND. */
int kd_k8s_cache_delete(struct kd_k8s_cache *c, const char *key, json_t **old) KD_WUR;

/**
 * Called by kd_k8s_cache_replace for each difference: ADDED (old NULL),
 * MODIFIED (both set) or DELETED (new NULL). Objects are borrowed.
 */
typedef void (*kd_k8s_diff_fn)(enum kd_k8s_event_type type, json_t *old, json_t *new, void *ud);

/**
 * Make the cache hold exactly `items` (a JSON array of objects, as a
 * relist returns them) and report the differences: objects not cached
 * before are ADDED, those whose metadata.resourceVersion (or uid) changed
 * are MODIFIED, cached ones missing from items are DELETED; unchanged
 * objects produce no call. fn (may be NULL) runs after the cache holds the
 * new state, without the cache lock. Returns 0 or KD_EINVAL for an item
 * without a name (nothing changed then).
 */
int kd_k8s_cache_replace(struct kd_k8s_cache *c, json_t *items, kd_k8s_diff_fn fn, void *ud) KD_WUR;

/**
 * kd_k8s_cache_replace in steps, for a list that arrives page by page:
 * begin, then page for each page (objects not cached before are ADDED,
 * changed ones MODIFIED, as soon as the page is applied), then end, which
 * removes every object no page of this round held and reports it DELETED.
 * Only one page needs to be decoded at a time. A round that is given up
 * (a failed list) needs no end: the next begin starts afresh; objects put
 * meanwhile with kd_k8s_cache_put count as seen. page returns 0 or
 * KD_EINVAL when an item has no name (nothing of that page changed). One
 * round at a time (the informer's thread); fn runs without the lock.
 */
void kd_k8s_cache_replace_begin(struct kd_k8s_cache *c);
int kd_k8s_cache_replace_page(struct kd_k8s_cache *c, json_t *items, kd_k8s_diff_fn fn,
                              void *ud) KD_WUR;
void kd_k8s_cache_replace_end(struct kd_k8s_cache *c, kd_k8s_diff_fn fn, void *ud);

/* ---- informer --------------------------------------------------------------- */

/**
 * Change handlers, all optional, called on the informer's thread after the
 * cache holds the new state. Objects are borrowed. They should be quick
 * (queue a key); they must not stop or free the informer.
 */
struct kd_k8s_handlers {
    void (*on_add)(json_t *obj, void *ud);
    void (*on_update)(json_t *old, json_t *obj, void *ud);
    void (*on_delete)(json_t *obj, void *ud);
    void *ud;
};

/** Handlers that queue the object's "namespace/name" key into ud (a struct kd_k8s_queue *). */
struct kd_k8s_handlers kd_k8s_handlers_enqueue(struct kd_k8s_queue *q);

/** For kd_k8s_handlers_enqueue_owner: queue the key of the controlling owner of this kind. */
struct kd_k8s_owner_enqueue {
    struct kd_k8s_queue *queue;
    const char *owner_kind; /* "Trial" */
};

/** Handlers that queue "namespace/ownerName" of the object's controller owner of o->owner_kind. */
struct kd_k8s_handlers kd_k8s_handlers_enqueue_owner(struct kd_k8s_owner_enqueue *o);

struct kd_k8s_informer_opts {
    struct kd_k8s_gvr gvr;
    const char *ns;             /* NULL: all namespaces */
    const char *label_selector; /* optional */
    const char *field_selector; /* optional */
    long page_size;             /* list page size [100] */
    long watch_timeout_s;       /* server-side watch timeout; each watch uses 1-2x this [300] */
    long backoff_base_ms;       /* reconnect backoff [500] */
    long backoff_max_ms;        /* [30000] */
    /* metadata.managedFields (server-side apply bookkeeping, often a third of
     * an object) is dropped before caching and delivery unless this is set. */
    bool keep_managed_fields;
    /* Label keys the cache indexes for kd_k8s_cache_by_label (kd_k8s_cache_index_labels);
     * NULL: every label. Borrowed until kd_k8s_informer_new returns. */
    const char *const *index_labels;
};

struct kd_k8s_informer;

/** Counters for tests and metrics. */
struct kd_k8s_informer_stats {
    uint64_t lists;     /* successful (re)lists */
    uint64_t watches;   /* watch requests started */
    uint64_t gone;      /* 410s seen (HTTP or ERROR event) */
    uint64_t events;    /* watch events applied */
    uint64_t bookmarks; /* BOOKMARK events */
    uint64_t errors;    /* failed lists/watches */
};

/**
 * A new informer for opts (strings copied). The client must outlive it.
 * Add handlers, then start. *out freed with kd_k8s_informer_free.
 */
int kd_k8s_informer_new(struct kd_k8s_client *client, const struct kd_k8s_informer_opts *opts,
                        struct kd_k8s_informer **out, char *err) KD_WUR;

/** Register handlers (at most 8) before kd_k8s_informer_start. KD_ESTATE after start. */
int kd_k8s_informer_add_handlers(struct kd_k8s_informer *inf,
                                 const struct kd_k8s_handlers *h) KD_WUR;

/** Start the informer's thread. 0, KD_ESTATE when started (or stopped) before, or -errno. */
int kd_k8s_informer_start(struct kd_k8s_informer *inf) KD_WUR;

/** Whether the first list has been loaded into the cache. Thread-safe. */
bool kd_k8s_informer_has_synced(struct kd_k8s_informer *inf);

/** Block up to timeout_ms for has_synced. 0 or KD_ETIMEDOUT. Thread-safe. */
int kd_k8s_informer_wait_synced(struct kd_k8s_informer *inf, long timeout_ms) KD_WUR;

/** The informer's cache (borrowed; valid until kd_k8s_informer_free). */
struct kd_k8s_cache *kd_k8s_informer_cache(struct kd_k8s_informer *inf);

/** The last resourceVersion seen (copied into buf). Thread-safe. */
void kd_k8s_informer_resource_version(struct kd_k8s_informer *inf, char *buf, size_t len);

void kd_k8s_informer_stats(struct kd_k8s_informer *inf, struct kd_k8s_informer_stats *out);

/** Stop the thread (ends a watch within about a second) and join it. Idempotent. */
void kd_k8s_informer_stop(struct kd_k8s_informer *inf);

/** Stop and free. NULL-safe. */
void kd_k8s_informer_free(struct kd_k8s_informer *inf);

#endif
