/*
 * A change to a job's place in the queue as one merge patch of its
 * Experiment (or Task): the single rule behind `det job update` and the
 * controller API's PATCH .../jobs/{j}. Pure jansson, no Kubernetes client.
 */
#ifndef KD_K8S_JOBUPDATE_H
#define KD_K8S_JOBUPDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "k8s/position.h"

#define KD_QUEUE_DEFAULT_PRIORITY 42

/**
 * A job's own priority (1..99, smaller first): spec.resources.priority of an
 * Experiment, spec.config.resources.priority of a Task (kind "Task"); 0 when
 * it sets none. Pure.
 */
int64_t kd_queue_priority(const json_t *job);

/** A resource pool's name: 1 to 63 of A-Z a-z 0-9 - _ . (NULL: false). Pure. */
bool kd_queue_pool_ok(const char *s);

/** A change to a job's place in the queue, as `det job update` and the API take it. */
struct kd_queue_update {
    int64_t priority;          /* 1..99, or 0: unchanged */
    const char *ahead_of;      /* another job's name, or NULL */
    const char *behind_of;     /* another job's name, or NULL (not both) */
    const char *resource_pool; /* or NULL */
};

/**
 * The one merge patch that applies u to `job` (an Experiment, or a Task:
 * its resources live in spec.config): spec.resources.priority and
 * resource_pool, and the kdet.io/ahead-of / behind-of annotation naming
 * `other` (the job u->ahead_of or u->behind_of names, already looked up;
 * NULL when neither) with the other one cleared. A position counts within
 * a priority, so a move without a priority of its own takes the other
 * job's when it differs. Caller validates u (ranges, names, not itself)
 * and owns the returned patch; `said` (may be NULL) gets a summary such as
 * "ahead of exp-2 (priority 30, as exp-2's)". Pure.
 */
json_t *kd_queue_update_patch(const json_t *job, const json_t *other,
                              const struct kd_queue_update *u, char *said, size_t len);

#endif
