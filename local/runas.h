/*
 * The identity a container's process runs as, decided from the pod's and
 * the container's securityContext (runAsUser, runAsGroup, runAsNonRoot,
 * supplementalGroups, fsGroup) as the kubelet decides it, with kdet-local's
 * own user standing in for the image's user.
 */
#ifndef KD_LOCAL_RUNAS_H
#define KD_LOCAL_RUNAS_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "core/err.h"

#define KD_RUNAS_MAX_GROUPS 32

struct kd_runas {
    bool change; /* run as uid/gid/groups below; false: as kdet-local itself */
    uid_t uid;
    gid_t gid;
    gid_t groups[KD_RUNAS_MAX_GROUPS]; /* supplementary groups (only when change) */
    size_t ngroups;
};

/**
 * Decide how `container` of `pod` runs. The container's securityContext
 * wins over the pod's, field by field. With neither runAsUser nor
 * runAsGroup set the process runs as kdet-local (own_uid/own_gid: the
 * "image user"); runAsUser without runAsGroup takes the user's primary
 * group from the password database, else 65534. Supplementary groups are
 * the pod's supplementalGroups then fsGroup; none else (root's own are
 * dropped).
 *
 * Returns 0, or KD_EINVALID with the kubelet's message in err (the
 * container's CreateContainerConfigError) when runAsNonRoot is true and the
 * process would run as uid 0: "container's runAsUser breaks non-root policy
 * (pod: ..., container: ...)" for an explicit runAsUser 0, else "container
 * has runAsNonRoot and image will run as root (pod: ..., container: ...)".
 * Reads the password database; otherwise pure. Thread-safe.
 */
int kd_runas_decide(const json_t *pod, const json_t *container, uid_t own_uid, gid_t own_gid,
                    struct kd_runas *out, char *err) KD_WUR;

#endif
