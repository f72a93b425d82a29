/*
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go's
 * leaderelection package does it, so that of several controller replicas
 * exactly one acts at a time.
 */
#ifndef KD_K8S_LEADER_H
#define KD_K8S_LEADER_H

#include <stdbool.h>

#include "core/err.h"
#include "k8s/client.h"

struct kd_k8s_leader_opts {
    const char *ns;         /* the Lease's namespace (required) */
    const char *name;       /* the Lease's name (required) */
    const char *identity;   /* this replica's holderIdentity, unique (required) */
    long lease_duration_ms; /* how long a lease lasts without renewal [15000] */
    long renew_deadline_ms; /* the leader gives up when it cannot renew for this long [10000] */
    long retry_period_ms;   /* between attempts to acquire or renew [2000] */
    /* Called on the elector's thread. on_started: this replica leads now.
     * on_stopped: it no longer leads (lost the lease, or stopped) and must
     * stop acting at once. on_new_leader: another identity was observed. */
    void (*on_started)(void *ud);
    void (*on_stopped)(void *ud);
    void (*on_new_leader)(const char *identity, void *ud);
    void *ud;
    bool release_on_stop; /* clear holderIdentity on stop, so a successor need not wait */
};

struct kd_k8s_leader;

/**
 * Validate opts (lease_duration > renew_deadline > retry_period * 1.2,
 * like client-go), copy them and start the elector's thread, which tries
 * to acquire the Lease (creating it if absent) every retry period and,
 * once leading, renews it. Writes use the Lease's resourceVersion, so of
 * two replicas racing for it one gets a 409 and stays a follower. A leader
 * that has not renewed for renew_deadline steps down (on_stopped) and goes
 * back to trying to acquire. The client must outlive the elector.
 */
int kd_k8s_leader_start(struct kd_k8s_client *client, const struct kd_k8s_leader_opts *opts,
                        struct kd_k8s_leader **out, char *err) KD_WUR;

/**
 * Whether this replica leads now: it holds the lease and renewed it less
 * than renew_deadline ago (so a stuck thread never counts as leading).
 * Thread-safe.
 */
bool kd_k8s_leader_is_leader(struct kd_k8s_leader *le);

/** The last holderIdentity observed (copied into buf; "" when none). Thread-safe. */
void kd_k8s_leader_holder(struct kd_k8s_leader *le, char *buf, size_t len);

/**
 * Stop the elector: join its thread, call on_stopped if it was leading,
 * and release the lease when asked to. Then free. NULL-safe.
 */
void kd_k8s_leader_stop(struct kd_k8s_leader *le);

#endif
