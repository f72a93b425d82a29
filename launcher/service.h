/*
 * A task's service (docs/tasks.md): a notebook's Jupyter, a shell's sshd
 * or a TensorBoard listens on a port kdet-launch picks and reports to the
 * controller API, which proxies /proxy/TASK/ there. The launcher exports
 * it to the process as KDET_TASK_PORT.
 */
#ifndef KD_LAUNCHER_SERVICE_H
#define KD_LAUNCHER_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "env.h"

/** Longest time the report is retried (the controller restarting, say). */
#define KD_SERVICE_REPORT_MS 120000

/**
 * Whether the process is a task's service: KDET_TASK_SERVICE=1 with
 * KDET_TASK_ID, KDET_NAMESPACE, KDET_CONTROLLER_URL and KDET_TOKEN set.
 */
bool kd_service_wanted(void);

/**
 * Pick a free port, set KDET_TASK_PORT, and PUT {run_id, host, port,
 * user} to the controller's tasks/NAME/address (host: KDET_POD_IP, else
 * 127.0.0.1; user: the process's user name, for ssh), retrying connection
 * errors and 5xx/429 with back-off for up to timeout_ms. 0, KD_ETIMEDOUT
 * or another KD_E* (a refusal) with err set; never the token. Blocks.
 */
int kd_service_report(const struct kd_launch_env *e, int64_t timeout_ms, int *port,
                      char *err) KD_WUR;

#endif
