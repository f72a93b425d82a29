/*
 * What pods hold of a node, counted as kube-scheduler counts it, and the
 * quantities the scheduler loop reads from Nodes and Pods. Pure: the
 * scheduler loop (schedloop.c) feeds the sums into struct kd_sched_node,
 * and kd_sched_node_slots turns them into slots.
 */
#ifndef KD_CTRL_CAPACITY_H
#define KD_CTRL_CAPACITY_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

/**
 * A count quantity such as nvidia.com/gpu (a JSON integer or its string,
 * "4"); 0 when absent or unreadable (negative, a fraction, 2^20 or more).
 */
int kd_cap_count(const json_t *quantity);

/**
 * A cpu quantity ("2", "500m", "1.5", or a JSON integer) in millicores
 * (kd_sched_cpu_milli); 0 when absent, zero or in another form. The API
 * server stores every cpu quantity in one of these forms.
 */
int64_t kd_cap_cpu_milli(const json_t *quantity);

/** What a pod requests of the node it is bound to. */
struct kd_cap_request {
    const char *node;  /* spec.nodeName, borrowed from the pod */
    int64_t cpu_milli; /* cpu, millicores */
    int gpus;          /* nvidia.com/gpu */
};

/**
 * Whether pod holds room on a node (bound: spec.nodeName set; its phase
 * neither Succeeded nor Failed) and, when it does, its request in *out as
 * kube-scheduler counts it, per resource: the larger of the sum over its
 * containers and each init container, plus spec.overhead. A restartable
 * init container (restartPolicy Always, a sidecar) counts with the
 * containers and with every init container after it. A container's
 * request is resources.requests, else resources.limits (what the API
 * server defaults it to). Pure.
 */
bool kd_cap_pod_request(const json_t *pod, struct kd_cap_request *out);

#endif
