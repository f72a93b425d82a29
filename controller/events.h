/*
 * Kubernetes Events on Experiments and Trials, so that `kubectl describe`
 * tells an object's story: every state change, and each restart of a
 * trial. Which event a status change makes is decided by a pure function
 * (kd_event_for_change, table-tested); the Events are posted by one
 * background thread with its own client, so a slow or failing API server
 * never delays a reconcile, and a full queue drops events (counted) rather
 * than blocking.
 */
#ifndef KD_CTRL_EVENTS_H
#define KD_CTRL_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "k8s/client.h"

/** What one status change says: an Event's type, reason and message. */
struct kd_event {
    const char *type;   /* "Normal" or "Warning" (static) */
    const char *reason; /* CamelCase, static */
    char message[1024];
};

/**
 * The event for a status change of an Experiment or Trial (kind
 * "Experiment" or "Trial"), from its status before and after a patch
 * (old may be NULL; new holds only the fields patched). Returns false when
 * the change says nothing worth an Event (no new state, no new restart).
 * Pure.
 */
bool kd_event_for_change(const char *kind, const json_t *old_status, const json_t *new_status,
                         struct kd_event *out);

/**
 * A trial's history entry: the store event (kind "trial") a Trial's status
 * change adds, so that the trial's page shows its state changes and
 * restarts beside the searcher's decisions (docs/ui.md, "A trial's
 * history").
 */
struct kd_history {
    char decision[32]; /* the new state ("QUEUED", "ACTIVE", "COMPLETED", "ERROR", ...), or
                          "restart" */
    char reason[1024]; /* the Kubernetes Event's message: "Trial QUEUED -> ACTIVE", its cause */
    json_t *details;   /* {"from", "to", "restarts"?, "message"?}; owned, the caller decrefs */
};

/**
 * The history entry of a Trial's status change (old_status may be NULL; new
 * holds only the fields patched): exactly the changes that make a
 * Kubernetes Event (kd_event_for_change), a restart before a state change.
 * "from" is the old state (null for a new trial), "to" the new one (the old
 * one when the patch has none), "restarts" the count after a restart,
 * "message" the status message when there is one. False, with details
 * NULL, when the change makes no entry. Pure.
 */
bool kd_event_history(const json_t *old_status, const json_t *new_status, struct kd_history *out);

/**
 * The core/v1 Event object for ev about obj (its metadata; api_version and
 * kind name it, as list items carry neither), at time now_ms (wall clock), from component; seq
 * makes the names of events of one millisecond distinct. New reference.
 * Pure.
 */
json_t *kd_event_object(const json_t *obj, const char *api_version, const char *kind,
                        const struct kd_event *ev, const char *component, int64_t now_ms,
                        unsigned seq);

struct kd_events;

/**
 * Start the sender: a thread posting queued Events with client (borrowed;
 * must outlive the sender), at most `max_queue` waiting (0: 1024).
 */
struct kd_events *kd_events_start(struct kd_k8s_client *client, size_t max_queue);

/**
 * Queue the Event about obj (copied). Never blocks on the network; drops
 * it when the queue is full. NULL-safe on e (events off). Thread-safe.
 */
void kd_events_emit(struct kd_events *e, const json_t *obj, const char *api_version,
                    const char *kind, const struct kd_event *ev);

/**
 * Stop: post what is queued for at most drain_ms, log how many Events were
 * posted, failed and dropped, then end the thread and free. NULL-safe.
 * Blocks.
 */
void kd_events_stop(struct kd_events *e, long drain_ms);

#endif
