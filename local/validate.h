/*
 * Validation of the built-in kinds kdet-local serves (Pod, ConfigMap,
 * Secret, Service, Event, Node, Namespace, Lease, PriorityClass,
 * ServiceAccount): their fields' OpenAPI types, checked with lib/openapi as
 * custom resources are, plus the rules kube-apiserver adds on top (resource
 * quantities, container and volume names, config keys, size limits).
 */
#ifndef KD_LOCAL_VALIDATE_H
#define KD_LOCAL_VALIDATE_H

#include <jansson.h>

#include "core/err.h"
#include "registry.h"

/* kube-apiserver's limits: ConfigMap and Secret data, and all annotations of an object. */
#define KD_LOCAL_MAX_DATA_BYTES (1024 * 1024)
#define KD_LOCAL_MAX_ANNOTATION_BYTES (256 * 1024)

/**
 * Validate `obj` (a whole object as it will be stored) as a `rt` (a
 * built-in type; other types pass). Returns 0, or KD_EINVALID with
 * *causes set to a new JSON array of Status causes ({reason, field,
 * message}, e.g. field "spec.containers[0].command", message "Invalid
 * value: \"integer\": spec.containers[0].command in body must be of type
 * array: \"integer\""); caller json_decref()s. Unknown fields are not an
 * error. Pure function: thread-safe (the schemas are built once), does not
 * block, keeps no reference.
 */
int kd_local_validate(const struct kd_restype *rt, const json_t *obj, json_t **causes) KD_WUR;

/** Whether s is a DNS-1123 label (what container names must be): [a-z0-9]([-a-z0-9]*[a-z0-9])?, 63
 * bytes at most. */
/**
 * s is lower-case alphanumerics and '-', neither first nor last, 1 to max
 * bytes, and starts with a letter when letter_first (DNS-1035); NULL: false.
 */
bool kd_local_dns_name_part(const char *s, size_t max, bool letter_first);
bool kd_local_dns_label(const char *s);

#endif
