/*
 * Events (v1) as the scheduler and the kubelet record them, so that
 * `kubectl describe` and `kubectl get events` explain what happened to a
 * pod; repeats of the same reason and message bump `count`.
 */
#ifndef KD_LOCAL_EVENTS_H
#define KD_LOCAL_EVENTS_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"

struct kd_store;

/**
 * Record an event about `obj` (a pod or any namespaced object with kind and
 * apiVersion given). `type` is "Normal" or "Warning"; `component` the
 * reporter ("default-scheduler", "kubelet"). Lock held. Returns 0 or the
 * journal's error.
 */
int kd_events_record(struct kd_store *st, const json_t *obj, const char *kind,
                     const char *api_version, const char *type, const char *reason,
                     const char *message, const char *component, const char *host) KD_WUR;

/** Delete events whose lastTimestamp is older than ttl_s seconds (lock held). Returns the count. */
int kd_events_expire(struct kd_store *st, int64_t ttl_s);

#endif
