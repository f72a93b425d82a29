/*
 * The controller's HTTP API (JSON under /api/v1, docs/api.md): worker
 * endpoints authenticated per trial (metrics, searcher operation,
 * preemption, checkpoints, early exit) and user endpoints behind users'
 * tokens, each user confined to its namespaces (experiments, trials, metric
 * series, checkpoints, events, the job queue, pause/activate/cancel, a live
 * metric stream; users and tokens). It runs inside
 * kdet-controller on top of lib/http, the PostgreSQL store and lib/k8s.
 */
#ifndef KD_CONTROLLER_API_H
#define KD_CONTROLLER_API_H

#include <stddef.h>

#include "core/err.h"
#include "k8s/client.h"
#include "metrics/metrics.h"
#include "store/store.h"

/* Length of a trial token (base64url of an HMAC-SHA256, no padding). */
#define KD_API_TOKEN_LEN 43
/* Shortest accepted token key. */
#define KD_API_KEY_MIN 32

/* Body caps per endpoint, enforced from the request head before the body is
 * read (413 names the cap); GET routes take no body. */
#define KD_API_MAX_METRICS_BODY (8u << 20)
#define KD_API_MAX_CHECKPOINT_BODY (256u << 10)
#define KD_API_MAX_SMALL_BODY (16u << 10)
#define KD_API_MAX_RENDEZVOUS_BODY 4096u
#define KD_API_MAX_LOGS_BODY (1u << 20)
/* Checkpoint downloads streamed at once by default (each holds a 4 MiB piece). */
#define KD_API_DEFAULT_DOWNLOADS 4

struct kd_api;
struct kd_storage;

struct kd_api_opts {
    /** The store (required, borrowed; must outlive the API). */
    struct kd_store *store;
    /** A Kubernetes client (required, borrowed; must outlive the API). */
    struct kd_k8s_client *k8s;
    /** Namespace whose Experiments and Trials are served; NULL: all namespaces. */
    const char *ns;
    /** Numeric IPv4 address to listen on; NULL: 127.0.0.1 ("0.0.0.0" in a cluster). */
    const char *listen_addr;
    /** TCP port; 0 picks a free one (kd_api_port). */
    int port;
    /** The controller's token key (required, at least KD_API_KEY_MIN bytes; copied). */
    const unsigned char *token_key;
    size_t token_key_len;
    /**
     * The bootstrap token (copied): its bearer is the administrator "admin"
     * (a user row made at start). NULL: only the store's user tokens are
     * accepted. Kept in memory as its SHA-256 and compared in constant time.
     */
    const char *user_token;
    /**
     * The serving certificate (chain) and its private key, PEM (copied):
     * HTTPS. Both NULL: plain HTTP, which is refused unless listen_addr is
     * 127.0.0.1 (KD_EINVAL).
     */
    const char *tls_cert_pem;
    const char *tls_key_pem;
    /** Longest long-poll a client may ask for, seconds [60]. */
    int long_poll_max_s;
    /** How long a metrics POST waits for the store to make the batch durable, ms [10000]. */
    int metrics_timeout_ms;
    /** Most simultaneous connections [256]. */
    unsigned max_conns;
    /**
     * Most checkpoint downloads streamed at once [KD_API_DEFAULT_DOWNLOADS]; one more is
     * answered 503 with Retry-After. Each holds a piece of KD_CKPT_TAR_PIECE bytes and a
     * storage handle while it runs.
     */
    int max_downloads;
    /**
     * Process metrics (lib/metrics; borrowed, NULL: GET /metrics answers
     * 404). The API adds kdet_api_requests_total{method,route,code} and
     * kdet_api_request_duration_seconds{method} to it, and serves the whole
     * registry at GET /metrics without a token (Prometheus' scrape).
     */
    struct kd_metrics *metrics;
    /**
     * The most bytes of log text kept per trial (docs/store.md, "Trial
     * logs"); beyond it new lines are dropped after one marker line.
     * 0: KD_STORE_LOG_DEFAULT_CAP; negative: no cap.
     */
    int64_t log_max_bytes;
    /**
     * The scheduler's slot settings, served by GET /api/v1/info so that det can count
     * slots as the scheduler does (docs/scheduling.md): slot_type "auto", "gpu" or "cpu"
     * (NULL: "auto"; copied), a CPU slot's millicores (0: 1000) and memory bytes (0:
     * none), max_slots_per_pod (0: no limit).
     */
    const char *slot_type;
    int64_t cpu_per_slot_milli;
    uint64_t memory_per_slot;
    int max_slots_per_pod;
    /** Serve Tasks (the Task resource is installed): their routes, logs and proxy. */
    bool tasks;
    /**
     * Who decides what a user may do in a namespace (docs/security.md):
     * KD_API_AUTHZ_NAMESPACES, the namespaces of the user's row; or
     * KD_API_AUTHZ_KUBERNETES, Kubernetes RBAC through a SubjectAccessReview
     * of the user's identity (user "kdet:NAME", groups "kdet:users" and, for
     * administrators, "kdet:admins"), each answer kept 10 s.
     */
    enum kd_api_authz { KD_API_AUTHZ_NAMESPACES, KD_API_AUTHZ_KUBERNETES } authz;
    /**
     * The checkpoint storage an Experiment's trials use (its configuration's
     * checkpoint_storage with the controller's default): *out a new reference, or NULL when
     * it has none; 0 or KD_E*. The API writes each trial's metrics as TensorBoard event files
     * there (NULL: it writes none). Called on request threads: thread-safe.
     */
    int (*storage_of)(void *ud, const json_t *exp, json_t **out);
    void *storage_ud;
    /**
     * Open checkpoint storage `cs` (a checkpoint_storage object of an experiment of namespace
     * ns) to read checkpoints (the download routes), with the credentials the controller uses
     * for it (its credentials_secret, a Secret in ns): 0 with *out (the caller closes it), or
     * KD_E* with err naming what failed, never a secret. NULL: the API opens cs with this
     * process's own credentials (kd_storage_open). Called on request threads: thread-safe.
     */
    int (*storage_open)(void *ud, const char *ns, const json_t *cs, struct kd_storage **out,
                        char *err);
    void *storage_open_ud;
    /**
     * Called after a model version, or a model with its versions, was deleted, once per
     * Experiment (namespace, name and metadata.uid) whose checkpoints may have lost their
     * protection from checkpoint GC, so that the controller runs its GC of that experiment again
     * (NULL: nothing is told). Called on request threads: thread-safe, must not block long.
     */
    void (*unprotected)(void *ud, const char *ns, const char *experiment,
                        const char *experiment_uid);
    void *unprotected_ud;
};

/**
 * Start the API: the bootstrap administrator's row (with a user token),
 * informers on Experiments and Trials (waiting up to 10 s for their first
 * list), then the HTTP(S) server. Returns 0 and *out, or a
 * negative KD_E* with the cause in err (KD_ERRLEN, optional): KD_EINVAL
 * for a bad option (named), -EADDRINUSE when the port is taken,
 * KD_ETIMEDOUT when the informers cannot list. Blocks while starting.
 * Stop with kd_api_stop.
 */
int kd_api_start(const struct kd_api_opts *opts, struct kd_api **out, char *err) KD_WUR;

/** The port the API listens on. */
int kd_api_port(const struct kd_api *api);

/**
 * Stop serving (open long-polls and streams end), stop the informers and
 * free everything. Blocks until every connection thread has ended.
 * NULL-safe. The store and client are not closed.
 */
void kd_api_stop(struct kd_api *api);

/**
 * The token of one trial: base64url without padding of
 * HMAC-SHA256(key, "kdet-trial-token/v1\n" ns "\n" name "\n" uid), into out
 * (at least KD_API_TOKEN_LEN + 1 bytes). Pure and thread-safe; the
 * controller calls it to fill the trial's token Secret. 0 or KD_EINVAL.
 */
int kd_api_trial_token(const unsigned char *key, size_t keylen, const char *ns, const char *name,
                       const char *uid, char *out, size_t outlen) KD_WUR;

/**
 * The token of one task (notebook, command, shell, TensorBoard): as
 * kd_api_trial_token over "kdet-task-token/v1\n" ns "\n" name "\n" uid, so
 * a trial's token is never a task's. Its pod ships logs and reports its
 * service's port with it; a notebook's Jupyter takes it as its own token,
 * which the proxy adds to the requests it forwards. Pure and thread-safe.
 * 0 or KD_EINVAL.
 */
int kd_api_task_token(const unsigned char *key, size_t keylen, const char *ns, const char *name,
                      const char *uid, char *out, size_t outlen) KD_WUR;

/**
 * What the proxy saw of task ns/name: *open the streams (WebSocket,
 * tunnel) open now, *last_ms the wall time of its latest proxied traffic.
 * False (and zeros) when it saw nothing since the API started. NULL-safe on
 * api. Thread-safe.
 */
bool kd_api_task_activity(struct kd_api *api, const char *ns, const char *name, int *open,
                          int64_t *last_ms);

#endif
