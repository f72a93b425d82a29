/*
 * Finding the chief of a multi-node trial without cluster DNS: node rank 0
 * reports its pod IP and a free port to the controller API, the other nodes
 * ask the controller for them, for their own attempt's run id only.
 */
#ifndef KD_LAUNCHER_CHIEF_H
#define KD_LAUNCHER_CHIEF_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "env.h"

/** The rendezvous timeout when DTRAIN_RENDEZVOUS_TIMEOUT is unset (libdtrain's default). */
#define KD_CHIEF_DEFAULT_TIMEOUT_MS 300000
/** Longest wait of one long-poll for the chief's address, in seconds. */
#define KD_CHIEF_POLL_S 20

/**
 * Whether the chief is found through the controller: several nodes,
 * KDET_CONTROLLER_URL, KDET_TOKEN, KDET_TRIAL_ID and KDET_NAMESPACE set, and
 * on node rank 0 also KDET_POD_IP. Otherwise KDET_CHIEF_ADDR (a DNS name)
 * is used as given.
 */
bool kd_chief_via_controller(const struct kd_launch_env *e);

/**
 * On node rank 0: pick a free TCP port, PUT {run_id, address: KDET_POD_IP,
 * port} to the controller's trials/NAME/rendezvous, retrying with back-off
 * on connection errors and 5xx/429 answers. On the other nodes: GET
 * trials/NAME/rendezvous?run_id=RUN (long-polls of up to KD_CHIEF_POLL_S
 * seconds, back-off between failed calls) until the controller knows the
 * chief of this run. Both give up after timeout_ms in all. On success sets
 * e->chief_addr and e->master_port (port_source "controller"). Returns 0,
 * KD_ETIMEDOUT, or another KD_E* code (a 4xx answer) with err set; the
 * token never appears in err or in logs. Blocks; not thread-safe.
 */
int kd_chief_resolve(struct kd_launch_env *e, int64_t timeout_ms, char *err) KD_WUR;

/** DTRAIN_RENDEZVOUS_TIMEOUT in milliseconds (seconds in the environment), else the default. */
int64_t kd_chief_timeout_ms(void);

#endif
