/*
 * Gang admission backends: who decides that all pods of a trial may start.
 * The built-in backend is kdet's own scheduler (scheduler.c); the others
 * hand the capacity decision to a batch scheduler installed in the cluster
 * (Volcano PodGroups, Kueue plain-pod groups) and say why a gang waits
 * there. A backend builds objects and reads statuses; the trial reconciler
 * does the API calls. Pure functions, one file per backend.
 */
#ifndef KD_CTRL_GANG_H
#define KD_CTRL_GANG_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/err.h"
#include "k8s/client.h"

#define KD_GANG_VOLCANO_SCHEDULER "volcano"                      /* Volcano's schedulerName */
#define KD_GANG_VOLCANO_GROUP_ANN "scheduling.k8s.io/group-name" /* pod -> its PodGroup */
#define KD_GANG_KUEUE_QUEUE_LABEL "kueue.x-k8s.io/queue-name"
#define KD_GANG_KUEUE_GROUP_LABEL "kueue.x-k8s.io/pod-group-name"
#define KD_GANG_KUEUE_TOTAL_ANN "kueue.x-k8s.io/pod-group-total-count"
/* "false": a failed pod ends the group (kdet starts a new attempt as a new group). */
#define KD_GANG_KUEUE_RETRIABLE_ANN "kueue.x-k8s.io/retriable-in-group"
#define KD_GANG_VOLCANO_GVR KD_K8S_GVR("scheduling.volcano.sh", "v1beta1", "podgroups")
#define KD_GANG_KUEUE_GVR KD_K8S_GVR("kueue.x-k8s.io", "v1beta1", "workloads")
#define KD_GANG_NAMELEN 254

/** One attempt of a trial as a backend sees it. All borrowed. */
struct kd_gang_attempt {
    const json_t *trial; /* the Trial (metadata.name/namespace/uid) */
    const char *run_id;  /* the attempt's KDET_RUN_ID */
    const char *queue;   /* the batch scheduler's queue (Volcano Queue, Kueue LocalQueue) */
    const json_t *pods;  /* the attempt's pods as kd_pod_build made them (a JSON array) */
};

/** Why a delegated gang waits, from its batch scheduler's point of view. */
struct kd_gang_wait {
    bool waiting;      /* false: the batch scheduler admitted the gang (or there is none) */
    char reason[64];   /* one CamelCase word: Pending, Inqueue, Unschedulable, QuotaReserved... */
    char message[512]; /* for Trial status.message and the Scheduled condition */
};

struct kd_gang_ops {
    const char *name;
    /* Whether kdet's own scheduler checks capacity (true only for built-in). */
    bool kdet_admits;
    /* The group object the backend reads (and, with build_group, creates); NULL: none. */
    const struct kd_k8s_gvr *gvr;
    /* The group's name for the attempt into buf (len >= KD_GANG_NAMELEN). */
    void (*group_name)(const struct kd_gang_attempt *a, char *buf, size_t len);
    /*
     * The group object to create before the pods (*out a new reference), or
     * NULL *out when the batch scheduler makes its own. 0 or KD_EINVALID.
     */
    int (*build_group)(const struct kd_gang_attempt *a, json_t **out, char *err);
    /* Mark one pod of the attempt (schedulerName, group labels and annotations). */
    void (*decorate_pod)(json_t *pod, const struct kd_gang_attempt *a);
    /*
     * Why the gang waits: `group` is the group object read from the API
     * (NULL when absent or not read), `pods` the attempt's pods as cached.
     */
    void (*explain)(const json_t *group, const json_t *pods, const char *group_name,
                    const char *queue, struct kd_gang_wait *w);
};

extern const struct kd_gang_ops kd_gang_builtin;
extern const struct kd_gang_ops kd_gang_volcano;
extern const struct kd_gang_ops kd_gang_kueue;

/** The backend named `name` ("builtin", "volcano", "kueue"), or NULL. Static. */
const struct kd_gang_ops *kd_gang_find(const char *name);

/**
 * Decorate every pod of the attempt and build its group object (*group
 * NULL when none). A no-op for the built-in backend. 0 or KD_EINVALID.
 */
int kd_gang_prepare(const struct kd_gang_ops *ops, const struct kd_gang_attempt *a, json_t *pods,
                    json_t **group, char *err) KD_WUR;

/**
 * The sum of the pods' resource requests (a container's limits where it
 * requests nothing) for cpu, memory and nvidia.com/gpu, as a new JSON
 * object of quantities (cpu in millicores "1500m", memory in bytes); a
 * resource whose quantity kdet cannot parse is left out.
 */
json_t *kd_gang_min_resources(const json_t *pods);

/** Whether every pod is bound to a node (spec.nodeName). False for none. */
bool kd_gang_all_bound(const json_t *pods);

#endif
