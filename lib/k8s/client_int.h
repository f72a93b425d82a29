/*
 * Internals shared by the REST client's files (client.c, watch.c): the
 * client struct, the easy-handle pool and per-request setup. Not for
 * other modules.
 */
#ifndef KD_K8S_CLIENT_INT_H
#define KD_K8S_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <curl/curl.h>

#include "k8s/client.h"

#define KD_K8S_POOL_MAX 32

struct kd_k8s_client {
    struct kd_k8s_config cfg; /* deep copy; token guarded by token_lock */
    struct kd_k8s_client_opts opts;
    pthread_mutex_t token_lock;
    int64_t token_read_ms; /* kd_mono_ms of the last token-file read */

    pthread_mutex_t pool_lock;
    CURL *pool[KD_K8S_POOL_MAX];
    int npool;
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

    struct kd_k8s_bucket *bucket;
    atomic_uint_fast64_t requests;
    atomic_uint_fast64_t retries;
    atomic_uint_fast64_t connects;
    /* calls by verb (kd_k8s_client_stats) */
    atomic_uint_fast64_t reads, watches, creates, updates, patches, deletes, status_writes;
};

/** A handle from the pool (or a new one); give it back with kd_k8s__release. */
CURL *kd_k8s__acquire(struct kd_k8s_client *c);
void kd_k8s__release(struct kd_k8s_client *c, CURL *h);

/**
 * Set URL, TLS, auth, timeouts and common headers on h for one request.
 * *headers receives the header list (caller curl_slist_free_all()s it
 * after the transfer). `watch` drops the whole-request timeout.
 */
int kd_k8s__setup(struct kd_k8s_client *c, CURL *h, const char *method, const char *path,
                  const char *content_type, int watch, struct curl_slist **headers, char *err);

/** A curl error to a KD_E* code and an err message naming method and path. */
int kd_k8s__curl_err(CURLcode cc, const char *method, const char *path, const char *detail,
                     struct kd_k8s_status *st, char *err);

/** Add the connections h opened in its last transfer to the client's counter. */
void kd_k8s__count_connects(struct kd_k8s_client *c, CURL *h);

/** Re-read the token file now (after a 401). Returns 1 when the token changed. */
int kd_k8s__reload_token(struct kd_k8s_client *c);

/**
 * Wait up to ms on cond (a CLOCK_MONOTONIC condition variable guarded by
 * lock), waking early once *stop is set and cond is signalled. Returns
 * *stop. Used by the informer's and the elector's retry loops.
 */
int kd_k8s__nap(pthread_mutex_t *lock, pthread_cond_t *cond, const atomic_int *stop, long ms);

#endif
