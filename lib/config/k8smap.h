/*
 * How fields of Determined's experiment configuration become parts of a
 * Kubernetes object: label values for workspace and project, Linux
 * capability names, container port names, mount propagation, host device
 * kinds and mount paths. Shared by the config check (lib/config), the
 * controller's pod builder and det, so that all three agree. Pure.
 */
#ifndef KD_CONFIG_K8SMAP_H
#define KD_CONFIG_K8SMAP_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

#define KD_LABEL_WORKSPACE "kdet.io/workspace" /* experiment, trials, pods */
#define KD_LABEL_PROJECT "kdet.io/project"
#define KD_LABEL_VALUE_MAX 63 /* Kubernetes label values */
/* kdet's own mounts in a trial container live under this path (the context). */
#define KD_MOUNT_RESERVED "/run/kdet"

/**
 * The label value for a workspace or project name: lower case, every run
 * of characters other than a-z and 0-9 becomes one '-', no '-' at either
 * end, at most 63 characters ("My Project" -> "my-project"). `out` gets at
 * least KD_LABEL_VALUE_MAX + 1 bytes. Returns 0, or KD_EINVALID when
 * nothing is left (no letter or digit) or len is too small.
 */
int kd_label_value(const char *name, char *out, size_t len) KD_WUR;

/**
 * A Linux capability as Kubernetes writes it: upper case without the
 * CAP_ prefix ("cap_sys_admin" -> "SYS_ADMIN"), or "ALL". Returns 0, or
 * KD_EINVALID for a name that is no capability (then `out` holds the
 * closest one, or "" when none is close). `out` gets at least 32 bytes.
 */
int kd_capability_name(const char *name, char *out, size_t len) KD_WUR;

/** Whether s is a Kubernetes container port name (IANA_SVC_NAME: 1..15 of a-z 0-9 '-'). */
bool kd_port_name_valid(const char *s);

/**
 * Kubernetes' mountPropagation for Determined's `propagation`: NULL
 * (Kubernetes' default, None) for rprivate and private, "HostToContainer"
 * for rslave and slave, "Bidirectional" (privileged containers only) for
 * rshared and shared; NULL for anything else. Static strings.
 */
const char *kd_mount_propagation(const char *propagation);

/** Whether a host device path is a GPU's (/dev/nvidia*, /dev/kfd, /dev/dri/...). */
bool kd_device_is_gpu(const char *host_path);

/**
 * An absolute path with "//" and "/." components collapsed and no trailing
 * '/' (except for "/"), cut to len - 1 bytes. Returns whether it has a
 * ".." component (Kubernetes refuses those in host and mount paths).
 */
bool kd_path_clean(const char *in, char *out, size_t len);

/** Whether clean path p is base or lies under it (both cleaned). */
bool kd_path_within(const char *p, const char *base);

#endif
