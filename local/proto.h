/*
 * Decoding of the Kubernetes protobuf encoding (application/vnd.kubernetes.protobuf)
 * for the few kinds kubectl's generator commands send that way:
 * `kubectl create configmap|secret|namespace|priorityclass`.
 */
#ifndef KD_LOCAL_PROTO_H
#define KD_LOCAL_PROTO_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"

/**
 * Decode a protobuf request body (the "k8s\0" magic, then a
 * runtime.Unknown envelope) into the object's JSON form, in *out (caller
 * decrefs). Supported kinds: v1 ConfigMap, Secret, Namespace and
 * scheduling.k8s.io/v1 PriorityClass. Returns 0, KD_ENOTSUP for another
 * kind (named in err), or KD_EPARSE with the byte offset in err. Pure.
 */
int kd_proto_decode(const void *data, size_t len, json_t **out, char *err) KD_WUR;

#endif
