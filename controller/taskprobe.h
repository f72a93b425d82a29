/*
 * Whether a running notebook is in use, asked of its Jupyter server
 * (GET api/status and api/kernels under its base URL, with the task's
 * token): the input of a notebook's idle timeout. The answers' reading is
 * a pure function (kd_taskprobe_read), tested apart from the HTTP calls.
 */
#ifndef KD_CTRL_TASKPROBE_H
#define KD_CTRL_TASKPROBE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"

/* Each answer is read up to this many bytes. */
#define KD_TASKPROBE_MAX_ANSWER (256u << 10)

/** What Jupyter says about its use. */
struct kd_taskprobe {
    bool busy;       /* in use now, by the notebook_idle_type's rule */
    int64_t last_ms; /* its last_activity (wall ms); 0: not given */
    int kernels, busy_kernels, connections, terminals, sessions;
};

/**
 * Whether something accepts TCP connections at host:port within
 * timeout_ms (a connect, then a close). Blocks; thread-safe.
 */
bool kd_taskprobe_listens(const char *host, int port, int timeout_ms);

/**
 * Read Jupyter's answers into *out: api/status (an object: connections,
 * kernels, last_activity), api/kernels (an array of {execution_state,
 * connections, last_activity}), api/terminals (an array of
 * {last_activity}; NULL without terminals) and api/sessions (an array;
 * NULL: none). By idle_type, as Determined decides: "kernels_or_terminals"
 * (the default) busy while any kernel, terminal or session exists;
 * "kernel_connections" while a kernel channel is open; "activity" while a
 * kernel executes. last_ms is the latest last_activity of status, kernels
 * and terminals. 0, or KD_EPROTO when status is not an object. Pure.
 */
int kd_taskprobe_read(const json_t *status, const json_t *kernels, const json_t *terminals,
                      const json_t *sessions, const char *idle_type,
                      struct kd_taskprobe *out) KD_WUR;

/**
 * Ask the notebook at http://host:port (its base URL base_path, e.g.
 * "/proxy/notebook-1/") with its token, 3 s at most per call; the calls
 * say no_track_activity, so that asking is not counted as use. 0, or
 * KD_ECONNECT / KD_EPROTO with the cause in err (the token never appears).
 * Blocks; thread-safe.
 */
int kd_taskprobe_notebook(const char *host, int port, const char *base_path, const char *token,
                          const char *idle_type, struct kd_taskprobe *out, char *err) KD_WUR;

#endif
