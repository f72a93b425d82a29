/*
 * Internals shared by the API's files: the server struct, the per-request
 * context, JSON error helpers, trial authentication and resolution, the
 * Trial status writer and the live metrics hub. Not for other modules.
 */
#ifndef KD_CONTROLLER_API_INT_H
#define KD_CONTROLLER_API_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "api/api.h"
#include "api/check.h"
#include "core/buf.h"
#include "http/http.h"
#include "k8s/informer.h"

/* Experiment annotations naming the searcher metric when spec does not (stored templates). */
#define API_ANN_METRIC "kdet.io/searcher-metric"
#define API_ANN_SMALLER "kdet.io/smaller-is-better"
#define API_ANN_TIME_METRIC "kdet.io/time-metric"
/* Training reports update status.batchesTrained at most this often per trial. */
#define API_PROGRESS_MS 10000
/* The labels the controller puts on trial pods (as controller/podspec.h). */
#define API_POD_LABEL_TRIAL "kdet.io/trial"
#define API_POD_LABEL_RUN "kdet.io/run-id"
#define API_POD_LABEL_RANK "kdet.io/node-rank"

/* The live metrics hub: a bounded ring of recently stored batches. */
struct api_hub_entry {
    uint64_t seq;
    char *ns, *trial, *experiment;
    char *json; /* the event's data line */
};

#define API_HUB_SLOTS 4096
#define API_HUB_MAX_BYTES (32u << 20)

struct api_hub {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct api_hub_entry ring[API_HUB_SLOTS];
    uint64_t next_seq; /* seq of the next entry; entries hold [first_seq, next_seq) */
    uint64_t first_seq;
    size_t bytes;
};

struct kd_api {
    struct kd_api_opts o;
    unsigned char key[256];
    size_t keylen;
    char *user_token;
    char user_token_sha[65]; /* SHA-256 (hex) of user_token; "" without one */
    int64_t admin_id;        /* the bootstrap administrator's user row; 0 without a user token */
    char *ns;
    struct kd_http_server *http;
    bool tls; /* served over HTTPS (the proxy's session cookie is Secure) */
    struct kd_k8s_informer *trials, *exps;
    struct kd_k8s_informer *tasks; /* NULL: tasks are off (opts.tasks) */

    pthread_mutex_t mu; /* guards changes and ids */
    pthread_cond_t changed;
    uint64_t changes; /* bumped on every informer event */
    json_t *ids;      /* trial uid -> [experiment_id, trial_id] */
    json_t *progress; /* trial uid -> [mono ms of the last batchesTrained write, batches] */
    json_t *activity; /* "ns/task" -> [wall ms of the last proxied byte, open proxied streams] */

    struct api_hub hub;
    /* Log streams wait here for stored batches (they poll the store at least once a second). */
    pthread_mutex_t logs_mu;
    pthread_cond_t logs_cond;
    uint64_t logs_gen;
    struct kd_metric *m_requests, *m_seconds; /* NULL without o.metrics */
    atomic_int downloads;                     /* checkpoint downloads streaming now (download.c) */
    /* SubjectAccessReview answers (authz.c): key -> [allowed, expiry mono ms, reason]. */
    pthread_mutex_t sar_mu;
    json_t *sar;
};

/*
 * Who is calling the user API: a user of the store, or the bootstrap
 * administrator of the configured user token. Lives in the request's arena.
 */
struct api_principal {
    int64_t user_id;  /* the user's row */
    int64_t token_id; /* the token's row; 0: the bootstrap token */
    const char *name;
    bool admin;
    const char **namespaces; /* "*": every namespace */
    size_t nns;
};

/* ---- who may do what in a namespace (authz.c) ---- */
/**
 * Whether p may do `at` in namespace ns: by p's namespaces, or by a
 * SubjectAccessReview (o.authz KD_API_AUTHZ_KUBERNETES; answers cached).
 * 0 with *allowed (and when refused, why: the reviewer's reason, may be
 * ""), or a KD_E* code when the review could not be made (why says why).
 * Thread-safe.
 */
int api_may(struct kd_api *a, const struct api_principal *p, const char *ns,
            const struct api_authz_attrs *at, bool *allowed, char *why, size_t whylen);
/** api_may as a yes or no (a review that fails is a no, logged). */
bool api_may_do(struct kd_api *a, const struct api_principal *p, const char *ns, const char *verb,
                const char *resource, const char *subresource, const char *name);
/** Forget the cached reviews (kd_api_stop). */
void api_authz_free(struct kd_api *a);

/* One request as the handlers see it. */
struct api_rq {
    struct kd_api *api;
    struct kd_http_req *r;
    const char *seg[API_MAX_SEGS];
    int nseg;
    int status;                      /* the answer's status, for the access log */
    const char *route;               /* the matched route's pattern, for metrics; NULL: none */
    const struct api_principal *who; /* user routes: the caller; NULL elsewhere */
};

/* ---- the route table (api.c; its entries are api/routes.h) ---- */
/** The route table (static) and its length, for tests that walk every route. */
const struct api_route *api_routes(size_t *n);

/* ---- responses (api.c) ---- */
/* JSON answers of at least this many bytes go gzip-compressed to clients that take it. */
#define API_GZIP_MIN 4096
/* in[0..n) as unpadded base64url into out (4 * ceil(n / 3) + 1 bytes at most). */
void api_b64url(const unsigned char *in, size_t n, char *out);
void api_json(struct api_rq *q, int status, json_t *j); /* steals j */
int api_error(struct api_rq *q, int status, const char *field, const char *fmt, ...)
    KD_PRINTF(4, 5);
/** Map a KD_E* error to an HTTP answer with err as message; returns rc. */
int api_fail(struct api_rq *q, int rc, const char *field, const char *err);

/** Answer a refusal of check.h (its status, field and message); returns e->status. */
int api_refuse(struct api_rq *q, const struct api_verr *e);
/** Parse the body as a JSON object under a cap (api_check_json); answers 400/413 itself. */
int api_body(struct api_rq *q, size_t cap, json_t **out);
/** Integer query argument in [lo, hi] with a default; answers 400. */
int api_query_int(struct api_rq *q, const char *name, long lo, long hi, long def, long *out);

/* ---- resources (api.c) ---- */
/** A private copy of ns/name from the informer cache, falling back to a GET. KD_ENOTFOUND. */
int api_get_trial(struct kd_api *a, const char *ns, const char *name, json_t **out, char *err);
int api_get_experiment(struct kd_api *a, const char *ns, const char *name, json_t **out, char *err);
/** Authenticate the trial's token; answers 401/404 itself. *trial: the Trial (caller frees). */
int api_auth_trial(struct api_rq *q, const char *ns, const char *name, json_t **trial);
/**
 * The store ids of a Trial; with create, its rows are made when the
 * controller has not made them yet, else KD_ENOTFOUND.
 */
int api_store_ids(struct kd_api *a, const json_t *trial, bool create, int64_t *exp_id,
                  int64_t *trial_id, char *err);
/** The store id of an Experiment (found by uid), created when `create`. */
int api_exp_row(struct kd_api *a, const json_t *exp, bool create, int64_t *id, char *err);
/**
 * Read-modify-write the Trial's status with its resourceVersion (retried on
 * conflict). fn edits status in place and returns true when it changed it.
 */
typedef bool (*api_status_fn)(json_t *status, void *ctx);
int api_status_update(struct kd_api *a, const char *ns, const char *name, const char *uid,
                      api_status_fn fn, void *ctx, char *err);
/** api_status_update on another resource (gvr: Trials, Tasks). */
int api_status_update_gvr(struct kd_api *a, const struct kd_k8s_gvr *gvr, const char *ns,
                          const char *name, const char *uid, api_status_fn fn, void *ctx,
                          char *err);
/** Wait for an informer change after *seen (or timeout_ms); updates *seen. */
void api_wait_change(struct kd_api *a, uint64_t *seen, long timeout_ms);

/* ---- handlers ---- */
void api_worker_metrics(struct api_rq *q);
void api_worker_searcher(struct api_rq *q);
void api_worker_preemption(struct api_rq *q);
void api_worker_checkpoint(struct api_rq *q);
void api_worker_early_exit(struct api_rq *q);
/**
 * Set the Trial's condition EarlyExit=True with reason ("Errored",
 * "InvalidHP", "UserCanceled") and message (read-modify-write of its
 * status, retried on conflict), and record the event in the store (best
 * effort). The same reason again changes nothing. 0 or KD_E* with err.
 */
int api_trial_early_exit(struct kd_api *a, const json_t *trial, const char *reason,
                         const char *message, char *err);
void api_worker_rendezvous_put(struct api_rq *q);
void api_worker_rendezvous_get(struct api_rq *q);

void api_user_experiments(struct api_rq *q);
void api_user_experiment(struct api_rq *q);
void api_user_experiment_trials(struct api_rq *q);
void api_user_experiment_action(struct api_rq *q);
void api_user_experiment_checkpoints(struct api_rq *q);
void api_user_experiment_events(struct api_rq *q);
void api_user_trial(struct api_rq *q);
void api_user_trial_kill(struct api_rq *q);
void api_user_trial_metrics(struct api_rq *q);
void api_user_experiment_metrics(struct api_rq *q);
void api_user_job_update(struct api_rq *q);
void api_user_trial_checkpoints(struct api_rq *q);
void api_user_checkpoint(struct api_rq *q);
void api_user_jobs(struct api_rq *q);
/** GET /api/v1/info: the controller's settings that det needs (slots). */
void api_user_info(struct api_rq *q);
void api_user_stream(struct api_rq *q);
/* GET / and GET /ui/NAME: the web UI's embedded assets (ui.c). */
void api_ui_serve(struct api_rq *q);
/**
 * The Experiment (trial false) or Trial that seg[5] names in namespace
 * seg[3]: a name, or else (1 to 18 digits) the store id of one (docs/api.md
 * "Integer ids"). *obj: a copy (caller frees). KD_ENOTFOUND with err.
 */
int api_user_get(struct api_rq *q, bool trial, json_t **obj, char *err);

/* ---- models.c: the model registry ---- */
void api_user_models(struct api_rq *q);
void api_user_model_create(struct api_rq *q);
void api_user_model(struct api_rq *q);
void api_user_model_update(struct api_rq *q);
void api_user_model_delete(struct api_rq *q);
void api_user_model_best(struct api_rq *q);
void api_user_model_versions(struct api_rq *q);
void api_user_model_version_create(struct api_rq *q);
void api_user_model_version(struct api_rq *q);
void api_user_model_version_update(struct api_rq *q);
void api_user_model_version_delete(struct api_rq *q);

/* ---- download.c: checkpoints as tar archives ---- */
void api_user_model_download(struct api_rq *q);
void api_user_model_download_link(struct api_rq *q);
void api_user_checkpoint_download(struct api_rq *q);
void api_user_checkpoint_download_link(struct api_rq *q);
/**
 * The caller of a download route (AUTH_LINK) that came with a link (`link`,
 * the ?kdet_ticket= value) instead of a token: 0 with *who when the link was
 * made for this namespace and path by a token that is still valid; else
 * answered 401 (503 when the store cannot say) and the code returned.
 */
int api_download_caller(struct api_rq *q, const char *link, const struct api_principal **who);

/* ---- profiler.c ---- */
void api_user_trial_profiler(struct api_rq *q);
/* ---- auth.c: users, namespaces, the bootstrap administrator ---- */
/** The name of the bootstrap administrator (the configured user token's user). */
#define API_BOOTSTRAP_ADMIN "admin"
/**
 * Authenticate the user token of q's Authorization header: the bootstrap
 * token (compared by SHA-256 in constant time) or a user token of the
 * store. 0 with *who (in the request's arena); else answered 401 (or 503
 * when the store cannot say) and the code returned.
 */
int api_auth_user(struct api_rq *q, const struct api_principal **who);
/**
 * The caller of a proxy session (proxy.c) that was opened with user token
 * token_id (0: the bootstrap token) of user user_id, as it is now: 0 with
 * *who; KD_EUNAUTHORIZED when the token was revoked or is another user's
 * (or the bootstrap token is no longer configured); KD_EAGAIN when the store
 * cannot say. Answers nothing.
 */
int api_auth_session(struct api_rq *q, int64_t token_id, int64_t user_id,
                     const struct api_principal **who);
/** Whether p may use namespace ns: an administrator, "*" or ns in its list. Pure. */
bool api_ns_allowed(const struct api_principal *p, const char *ns);

/* ---- accounts.c: users and tokens ---- */
void api_me(struct api_rq *q);
void api_users_list(struct api_rq *q);
void api_users_create(struct api_rq *q);
void api_users_update(struct api_rq *q);
void api_tokens_list(struct api_rq *q);
void api_tokens_create(struct api_rq *q);
void api_tokens_revoke(struct api_rq *q);

/* ---- logs.c ---- */
void api_worker_logs(struct api_rq *q);
void api_user_logs(struct api_rq *q);
void api_user_logs_stream(struct api_rq *q);
/** Wake the log streams (a batch was stored, or the API stops). */
void api_logs_wake(struct kd_api *a);

/* ---- logpolicy.c ---- */
/**
 * The experiment's log_policies (a JSON array of {name, pattern, action})
 * that match one of the n lines: [{name?, pattern, action, line}], the
 * first matching line of each policy (cut to 512 bytes). Policies with a
 * pattern that does not compile or an unknown action are skipped. Pure;
 * the caller decrefs.
 */
json_t *api_log_policies_match(const json_t *policies, const struct kd_log_line *lines, size_t n);
/**
 * Match the trial's experiment's log_policies against a batch's lines and
 * record each match once in the Trial's status.logPolicies (with the
 * attempt's run id, and for exclude_node the node of the pod of that run
 * and node rank). 0 (also when nothing matched), or the status write's
 * error. Blocks; thread-safe.
 */
int api_log_policies_apply(struct kd_api *a, const json_t *trial, const char *run_id, int node_rank,
                           const struct kd_log_line *lines, size_t n, char *err);

/** Preemption state of a trial from the caches: true with a reason. */
bool api_should_preempt(const json_t *trial, const json_t *exp, const char **reason);

/* ---- tasks.c: notebooks, commands, shells, TensorBoards ---- */
/* Where the proxy serves a task: API_PROXY_PREFIX + task name + "/" (docs/tasks.md). */
#define API_PROXY_PREFIX "/proxy/"
/** The Task ns/name (informer cache, else a GET); KD_ENOTFOUND also when tasks are off. */
int api_get_task(struct kd_api *a, const char *ns, const char *name, json_t **out, char *err);
/** Authenticate the task's token; answers 401 itself. *task: the Task (caller frees). */
int api_auth_task(struct api_rq *q, const char *ns, const char *name, json_t **task);
/** The store id of a Task's row (made when `create` and the controller has not). */
int api_task_row(struct kd_api *a, const json_t *task, bool create, int64_t *id, char *err);
void api_worker_task_address(struct api_rq *q);
void api_user_tasks(struct api_rq *q);
void api_user_task(struct api_rq *q);
void api_user_task_kill(struct api_rq *q);
/**
 * The live tasks (not TERMINATED) of namespace ns (NULL: all) as job
 * rows {namespace, task, kind, state, priority, slots, resource_pool,
 * message, submitted, position_key}. New reference.
 */
json_t *api_task_jobs(struct kd_api *a, const char *ns);
/** A job named by kdet.io/ahead-of or behind-of, an Experiment or else a Task
 * (kd_exp_lookup_fn; ud: the struct kd_api). */
json_t *api_job_lookup(const char *ns, const char *name, void *ud);
/* ---- ticket.c: signed values that stand for a user token in a URL or a cookie ---- */
/* What a value is for: "domain\nkind\nns\nname\nuid" is signed with the token, user, expiry. */
struct api_ticket_for {
    const char *domain;          /* "kdet-proxy/v1", "kdet-download/v1" */
    const char *kind;            /* "ticket", "session", "link" */
    const char *ns, *name, *uid; /* the object it is bound to (uid may be NULL) */
};
/** "TOKEN.USER.UNTIL.MAC" for f, made with token token_id of user user_id, valid until `until`
 * (wall seconds), into out (at least 128 bytes). Pure but for the key. */
void api_ticket_make(const struct kd_api *a, const struct api_ticket_for *f, int64_t token_id,
                     int64_t user_id, int64_t until, char *out, size_t len);
/** Whether value is a live value for f; *token_id and *user_id its maker (to be checked with
 * api_auth_session). Constant-time comparison of the MAC. */
bool api_ticket_check(const struct kd_api *a, const struct api_ticket_for *f, const char *value,
                      int64_t *token_id, int64_t *user_id);

/* ---- proxy.c: /proxy/TASK/ ---- */
/* Body caps of proxied requests and answers. */
#define API_PROXY_MAX_BODY (32u << 20)
#define API_PROXY_MAX_ANSWER (64u << 20)
/** Whether path is under API_PROXY_PREFIX: the proxy answers it, not the routes. */
bool api_proxy_path(const char *path);
/** The pre-body decision on a proxied request: the task, the caller (a user token, a sign-in
 * ticket or the session cookie), the body cap; answers the refusals itself. */
void api_proxy_authorize(struct api_rq *q);
/** Forward a proxied request (HTTP, WebSocket, or a shell's tunnel). */
void api_proxy(struct api_rq *q);
/** POST .../tasks/{t}/proxy-ticket: a one-minute sign-in link to the task's proxy path. */
void api_user_task_ticket(struct api_rq *q);
/** Note proxied traffic of a task now; open_delta +1/-1 when a stream opens or closes. */
void api_task_activity_note(struct kd_api *a, const char *ns, const char *name, int open_delta);
/* ---- tfwrite.c ---- */
/**
 * Write a stored batch of `group` ("training", "validation") metrics of
 * trial (the Trial's name) of Experiment exp as a TensorBoard event file
 * under its checkpoint storage (named by the batch's key). Best effort:
 * failures are logged. Blocks on storage.
 */
void api_tfevents_write(struct kd_api *a, const json_t *exp, const char *trial, const char *group,
                        const char *key, const struct kd_metric_row *rows, size_t n);

/* ---- hub.c ---- */
void api_hub_init(struct api_hub *h);
void api_hub_destroy(struct api_hub *h);
/** Publish one stored batch (data is copied). */
void api_hub_publish(struct api_hub *h, const char *ns, const char *trial, const char *experiment,
                     const char *data);
/** Wake streams (at stop). */
void api_hub_wake(struct api_hub *h);

/* An event stream's reader: a ": keepalive" comment goes into OUT when it is empty and
 * nothing was sent for API_SSE_KEEPALIVE_MS; then up to MAX bytes of OUT move to BUF
 * (*LAST_WRITE_MS set when some did). Returns how many, 0 when none is ready yet. */
#define API_SSE_KEEPALIVE_MS 15000
ssize_t api_sse_take(struct kd_buf *out, int64_t *last_write_ms, char *buf, size_t max);

#endif
