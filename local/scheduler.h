/*
 * kdet-local's scheduler: binds pending pods to a Ready, schedulable Node
 * (kdet-local's own or a node agent's) where their requests fit what is
 * left of its allocatable resources, highest spec.priority first, and
 * reports the others as the real scheduler does (condition
 * PodScheduled=False, reason Unschedulable).
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

/** A node other than kdet-local's own whose Ready heartbeat is older than this counts as
 * unreachable (the node lifecycle controller's default grace period). */
#define KD_SCHED_NODE_GRACE_MS 40000

/**
 * One scheduling pass (store lock held): every unbound, undeleted pod whose
 * schedulerName is default-scheduler (or unset) is bound to the first Node
 * in name order that passes the filters (not unschedulable, Ready, taints
 * with effect NoSchedule or NoExecute tolerated, nodeSelector, requests
 * within allocatable minus what the unfinished pods bound to it request),
 * or marked Unschedulable with the reasons counted over all nodes.
 * own_node is kdet-local's own Node: its heartbeat is not checked. Returns
 * the number of pods bound, or a negative code when a journal write failed.
 */
int kd_sched_pass(struct kd_store *st, const char *own_node) KD_WUR;

#endif
