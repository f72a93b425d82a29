/*
 * kdet-local's object store: every object of every kind, keyed by
 * "group/resource", namespace and name; one global, monotonic
 * resourceVersion; a bounded ring of recent change events that watches
 * read from; and an append-only journal (fsync per write, compacted into a
 * snapshot) so that a kill -9 loses no acknowledged write.
 */
#ifndef KD_LOCAL_STORE_H
#define KD_LOCAL_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

enum kd_evtype { KD_EV_ADDED, KD_EV_MODIFIED, KD_EV_DELETED };

struct kd_event {
    uint64_t rv;
    char *gr;
    enum kd_evtype type;
    json_t *obj;  /* the object after the change (for DELETED: its last state) */
    json_t *prev; /* the object before, or NULL for ADDED */
};

struct kd_store_opts {
    bool background_compaction; /* compact on a thread, writing without the lock */
    const char *data_dir;       /* NULL keeps everything in memory only */
    size_t ring_events;         /* watch history kept; 0 means 20000 */
    size_t compact_min_bytes;   /* journal size that allows compaction; 0 means 8 MiB */
};

struct kd_store;

/**
 * Open the store, replaying DATA_DIR/journal when it exists (a torn last
 * record, left by a crash before its write was acknowledged, is dropped).
 * Returns 0, KD_ECORRUPT (a damaged record before the end, with its line in
 * err) or -errno.
 */
int kd_local_store_open(const struct kd_store_opts *opts, struct kd_store **out, char *err) KD_WUR;

/** Close the journal and free everything. NULL-safe. No other thread may use it. */
void kd_local_store_close(struct kd_store *st);

/*
 * One mutex guards the store (and, by convention, kdet-local's registry).
 * Every function below except kd_store_lock/unlock requires it held.
 */
void kd_store_lock(struct kd_store *st);
void kd_store_unlock(struct kd_store *st);

/** The newest resourceVersion handed out. */
uint64_t kd_store_rv(const struct kd_store *st);

/** The object, borrowed (valid while the lock is held and it is not replaced), or NULL. */
json_t *kd_store_get(struct kd_store *st, const char *gr, const char *ns, const char *name);

/**
 * Store obj (stolen) under gr/ns/name with the next resourceVersion written
 * into its metadata, journal it (fsync) and emit ADDED or MODIFIED. On
 * success *stored (optional) borrows the stored object. Returns 0 or -errno
 * from the journal (then nothing changed).
 */
int kd_store_put(struct kd_store *st, const char *gr, const char *ns, const char *name, json_t *obj,
                 json_t **stored) KD_WUR;

/**
 * Remove the object, journal it and emit DELETED carrying its last state
 * with a new resourceVersion. *deleted (optional) receives a new reference
 * to that state. Returns 0, KD_ENOTFOUND or -errno.
 */
int kd_store_delete(struct kd_store *st, const char *gr, const char *ns, const char *name,
                    json_t **deleted) KD_WUR;

/**
 * The objects of gr (in namespace ns, or all when ns is NULL), sorted by
 * namespace then name, as borrowed pointers in a malloc'd array the caller
 * frees. Returns the count.
 */
size_t kd_store_list(struct kd_store *st, const char *gr, const char *ns, json_t ***items);

/** Every group/resource key that holds objects; malloc'd array of borrowed strings. */
size_t kd_store_kinds(struct kd_store *st, const char ***grs);

/**
 * The first event with resourceVersion > rv, borrowed, in *ev. Returns 0,
 * KD_EAGAIN when there is none yet, or KD_EGONE when events after rv are no
 * longer kept (then *oldest is the oldest resourceVersion still available).
 */
int kd_store_next_event(struct kd_store *st, uint64_t rv, const struct kd_event **ev,
                        uint64_t *oldest) KD_WUR;

/** Wait (lock held; released while waiting) until the store changes or ms pass. */
void kd_store_wait(struct kd_store *st, int ms);

/** Wake every waiter (used at shutdown). */
void kd_store_broadcast(struct kd_store *st);

/** Journal bytes written since the last compaction (for tests and metrics). */
uint64_t kd_store_journal_bytes(const struct kd_store *st);

/** Rewrite the journal as a snapshot of the live objects now. Returns 0 or -errno. */
int kd_store_compact(struct kd_store *st) KD_WUR;

#endif
