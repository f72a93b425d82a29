/*
 * kdet-local's Kubernetes API server: discovery, CRUD, list/watch, patch,
 * status subresources, finalizers and garbage collection over the object
 * store, served on 127.0.0.1 through lib/http.
 */
#ifndef KD_LOCAL_API_H
#define KD_LOCAL_API_H

#include <stdint.h>

#include "core/err.h"

struct kd_store;
struct kd_api;

struct kd_local_api_opts {
    int port;                 /* 0 picks a free port */
    const char *token;        /* bearer token required on every request but health probes */
    int bookmark_ms;          /* interval between watch BOOKMARK events; 0 means 60000 */
    int gc_interval_ms;       /* garbage collector period; 0 means 200 */
    size_t max_body;          /* request body cap; 0 means 3 MiB */
    const char *state_dir;    /* the kubelet state dir, for pods/log; NULL: no logs */
    const char *tls_cert_pem; /* with tls_key_pem: serve HTTPS */
    const char *tls_key_pem;
};

/**
 * Start serving `st` (borrowed; must outlive the API server). Creates the
 * namespaces default, kube-system, kube-public and kube-node-lease when
 * missing, registers the kinds of stored CRDs, and starts the garbage
 * collector thread. Returns 0 or a negative code with detail in err;
 * KD_EINVAL when opts->token is NULL or empty (kdet-local serves no
 * anonymous client).
 */
int kd_local_api_start(const struct kd_local_api_opts *opts, struct kd_store *st,
                       struct kd_api **out, char *err) KD_WUR;

/** The port the API server listens on. */
int kd_local_api_port(const struct kd_api *api);

/** Stop serving: ends watches, joins threads, frees. NULL-safe. Blocks. */
void kd_local_api_stop(struct kd_api *api);

#endif
