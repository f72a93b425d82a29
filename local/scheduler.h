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

/** The scheduler's memory between passes (which pods wait, which hold resources). */
struct kd_sched;

/** A scheduler with nothing seen yet; free with kd_sched_free. */
struct kd_sched *kd_sched_new(void);

/** NULL-safe. */
void kd_sched_free(struct kd_sched *s);

/** What the scheduler keeps of a pod: nothing, its place on a node, or its wait for one. */
enum kd_sched_track { KD_SCHED_NONE, KD_SCHED_BOUND, KD_SCHED_PENDING };

/**
 * Pure: how a pod in this state counts. Bound to a node and not finished:
 * BOUND (its requests are taken from that node). Unbound, undeleted,
 * unfinished and for the default scheduler: PENDING. Anything else: NONE.
 */
enum kd_sched_track kd_sched_track(const json_t *pod);

/**
 * Pure: the key of what the filters read from a pod (requests,
 * nodeSelector, tolerations) and its priority, malloc'd. Pods with equal
 * keys get the same verdict from the same nodes, so once one fails in a
 * pass the rest fail too.
 */
char *kd_sched_class_key(const json_t *pod);

/**
 * One scheduling pass (store lock held), driven by the store's changes
 * since the previous one: it reads the pod and node events, keeps the
 * pending pods in priority order and the bound ones' requests, and does
 * nothing when no pod or node changed (nor in the last second: node
 * heartbeats age). Each pending pod, highest spec.priority first, is bound
 * to the first Node in name order that passes the filters (not
 * unschedulable, Ready, taints with effect NoSchedule or NoExecute
 * tolerated, nodeSelector, requests within allocatable minus what the
 * unfinished pods bound to it request), or marked Unschedulable with the
 * reasons counted over all nodes (once a pod fails, the later ones of its
 * class get the same message without another look). own_node is
 * kdet-local's own Node: its heartbeat is not checked. Returns the number
 * of pods bound, or a negative code when a journal write failed.
 */
int kd_sched_pass(struct kd_sched *s, struct kd_store *st, const char *own_node) KD_WUR;

#endif
