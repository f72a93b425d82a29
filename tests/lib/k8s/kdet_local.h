/*
 * Test helper: start a real kdet-local API server on a free 127.0.0.1 port
 * with a temporary data dir, connect lib/k8s clients to it through the
 * kubeconfig it writes, and stop it (checking that it exited) afterwards.
 */
#ifndef KD_TEST_KDET_LOCAL_H
#define KD_TEST_KDET_LOCAL_H

#include <sys/types.h>

#include "k8s/client.h"

struct kl {
    pid_t pid;
    int port;
    char dir[64];         /* temp dir: data/, kubeconfig, port, log */
    char kubeconfig[128]; /* written by kdet-local */
    char bin[512];
};

/**
 * Start kdet-local ($KD_BUILD/bin/kdet-local) with extra arguments (NULL
 * or NULL-terminated). port 0 picks a free one; a fixed port restarts a
 * server on the same address with the same data dir when k->dir is set.
 * Fails the test (cmocka) with a clear message when the binary is missing
 * or does not come up within 10 s.
 */
void kl_start(struct kl *k, const char *const *extra, int port);

/** SIGTERM (SIGKILL after 5 s) and reap; the data dir stays. */
void kl_stop(struct kl *k);

/** kl_stop, then remove the temp dir and everything in it. */
void kl_destroy(struct kl *k);

/** A client for the server from its kubeconfig (opts may be NULL). */
struct kd_k8s_client *kl_client(struct kl *k, const struct kd_k8s_client_opts *opts);

#endif
