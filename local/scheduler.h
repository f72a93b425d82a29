/*
 * kdet-local's scheduler: binds pending pods to the one node when their
 * requests fit what is left of its allocatable resources, highest
 * spec.priority first, and reports the others as the real scheduler does
 * (condition PodScheduled=False, reason Unschedulable).
 */
#ifndef KD_LOCAL_SCHED_H
#define KD_LOCAL_SCHED_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"

struct kd_store;

/** Resources in milli-units. */
struct kd_res {
    int64_t cpu, memory, gpu, pods;
};

/** The requests of a pod spec: max(sum of containers, each init container), pods = 1. */
void kd_sched_pod_requests(const json_t *pod, struct kd_res *out);

/** The pod's QoS class from its containers' requests and limits (BestEffort, Burstable,
 * Guaranteed). */
const char *kd_sched_qos_class(const json_t *pod);

/**
 * One scheduling pass (store lock held): every unbound, undeleted pod whose
 * schedulerName is default-scheduler (or unset) is bound to node_name when
 * it fits, or marked Unschedulable. Returns the number of pods bound, or a
 * negative code when a journal write failed.
 */
int kd_sched_pass(struct kd_store *st, const char *node_name) KD_WUR;

#endif
