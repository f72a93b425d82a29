/*
 * kdet-controller's shared state: options, the API client, informers and
 * work queues, the scheduler's handoff to the trial reconciler, and small
 * memos. The experiment reconciler (experiment.c), the trial reconciler
 * (trial.c) and the scheduler loop (schedloop.c) all work through this
 * struct.
 */
#ifndef KD_CTRL_CTRL_H
#define KD_CTRL_CTRL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "core/err.h"
#include "k8s/client.h"
#include "k8s/informer.h"
#include "k8s/leader.h"
#include "k8s/queue.h"
#include "metrics/metrics.h"
#include "gang.h"
#include "handoff.h"
#include "podspec.h"
#include "scheduler.h"

struct kd_store;
struct kd_api;

#define KD_CTRL_FINALIZER "kdet.io/cleanup"
#define KD_CTRL_STATE_SUFFIX "-searcher" /* the searcher-state ConfigMap: <experiment>-searcher */
#define KD_CTRL_STATE_KEY "state.json"   /* its data key */
#define KD_CTRL_STATE_MAX (900 * 1024)   /* ConfigMaps hold 1 MiB */
/* A state longer than this is kept gzip'd, in binaryData under this key (thousands of trials). */
#define KD_CTRL_STATE_PLAIN_MAX (256 * 1024)
#define KD_CTRL_STATE_GZ_KEY "state.json.gz"
#define KD_CTRL_STATE_TEXT_MAX (64u << 20) /* a gzip'd state decompresses to at most this */

/*
 * statecm.c: the searcher state's text as the ConfigMap's fields: *data
 * (always) and *binary (NULL unless gzip'd, past KD_CTRL_STATE_PLAIN_MAX);
 * KD_ETOOBIG naming both sizes when even the gzip does not fit. Pure.
 */
int kd_ctrl_state_encode(const char *text, json_t **data, json_t **binary, char *err) KD_WUR;
/** The state held by a searcher-state ConfigMap, either form; KD_ECORRUPT naming the field. */
int kd_ctrl_state_decode(const json_t *cm, json_t **state, char *err) KD_WUR;
#define KD_CTRL_TEMPLATE_LABEL "kdet.io/template"
#define KD_CTRL_TEMPLATE_KEY "template.yaml"
#define KD_CTRL_FIELD_MANAGER "kdet-controller"

struct kd_ctrl_opts {
    const char *kubeconfig; /* NULL: $KUBECONFIG, in-cluster, ~/.kube/config */
    const char *context;
    const char *ns; /* namespace to watch; NULL: all */
    int workers;    /* per queue [4] */
    enum kd_sched_type sched_type;
    bool preemption;
    enum kd_sched_slot_type slot_type; /* --slot-type [auto]; a CPU slot's size is in pod */
    int max_slots_per_pod;             /* --max-slots-per-pod [0: no limit] */
    /* Who admits gangs by capacity: kdet (builtin), Volcano or Kueue (docs/scheduling.md). */
    const struct kd_gang_ops *gang;
    const char *gang_queue; /* the batch scheduler's queue; NULL: the trial's resource pool */
    bool leader_elect;
    bool events;            /* Kubernetes Events on Experiments and Trials [on] */
    const char *lease_name; /* [kdet-controller] */
    const char *lease_ns;   /* [the client's namespace] */
    const char *identity;   /* [hostname-pid] */
    struct kd_pod_opts pod;
    long resync_ms;        /* re-reconcile live experiments this often [30000] */
    long sched_period_ms;  /* scheduler pass at least this often [1000] */
    bool idle_release_set; /* --idle-release-after given: it wins over the environment */
    long idle_release_ms;  /* its value */
    /* The store and the API (wire.c); database_url NULL: both off. */
    const char *database_url;    /* libpq conninfo; never logged */
    const char *api_addr;        /* numeric IPv4 to listen on [127.0.0.1] */
    int api_port;                /* [8080]; 0: any free port */
    const char *key_file;        /* token key file; NULL: the Secret kdet-controller-key */
    const char *key_ns;          /* that Secret's namespace [$POD_NAMESPACE or the client's] */
    const char *user_token_file; /* NULL: $KDET_USER_TOKEN, else no bootstrap administrator */
    bool authz_kubernetes;       /* --authz kubernetes: SubjectAccessReview decides (security.md) */
    /* TLS of the API: certificate and key (PEM files) or plain_http (127.0.0.1 only). */
    const char *tls_cert_file, *tls_key_file;
    const char *tls_ca_file; /* the CA trials trust; NULL: tls_cert_file itself */
    bool plain_http;
    const char *spool_dir; /* the store's metrics spool; NULL: none */
    int64_t log_max_bytes; /* trial log text kept per trial [0: the API's default]; < 0: all */
    /* --default-checkpoint-storage: the file, and its JSON object once read (owned). */
    const char *default_storage_file;
    json_t *default_storage;
};

/*
 * A pod this process deleted a moment ago. The cache shows its
 * deletionTimestamp only when the watch event arrives, so a reconcile in
 * between would DELETE it again; trial.c skips pods deleted within
 * KD_CTRL_DELETED_MS. Only a saving: a restarted controller, or a pod that
 * fell out of the ring, is simply deleted again.
 */
#define KD_CTRL_DELETED_MEMO 256
#define KD_CTRL_DELETED_MS 10000
struct kd_ctrl_deleted {
    char uid[40];
    int64_t at_ms; /* kd_mono_ms() of the delete; 0: free slot */
    bool now;      /* deleted with gracePeriodSeconds 0 */
};

struct kd_ctrl {
    struct kd_ctrl_opts o;
    struct kd_k8s_client *client;
    struct kd_k8s_informer *exps, *trials, *pods, *nodes;
    /* Tasks (notebooks, commands, shells, TensorBoards) and their pods (label kdet.io/task). */
    struct kd_k8s_informer *tasks, *taskpods;
    /* Pods without the trial label, for what they request of the nodes (schedloop.c). */
    struct kd_k8s_informer *others;
    struct kd_k8s_queue *expq, *trialq, *taskq;
    struct kd_k8s_leader *leader;
    struct kd_store *store; /* NULL: API off */
    struct kd_api *api;     /* NULL: API off */
    unsigned char *key;     /* the token key (secret; never logged) */
    size_t keylen;
    char *user_token; /* registered as a log secret */
    char *tls_ca;     /* the CA PEM trials trust (KDET_CONTROLLER_CA); NULL: plain HTTP */
    atomic_int stop;
    /* The scheduler loop writes admissions, preemptions and reasons here, the trial reconciler
     * takes them; it has its own lock (handoff.h). */
    struct kd_handoff *handoff;
    /* Events about Experiments and Trials (events.c): posted by their own thread and client;
     * NULL: off. */
    struct kd_events *events;
    struct kd_k8s_client *events_client;
    /* What the API asks for an experiment's checkpoint storage (main.c: kd_ctrl_storage_of). */
    int (*storage_of)(void *ud, const json_t *exp, json_t **out);
    /* Process metrics (metrics.c): made at start, served at GET /metrics by the API. */
    struct kd_metrics *metrics;
    struct {
        struct kd_metric *reconciles, *reconcile_seconds, *queue_depth, *experiments, *trials,
            *leader, *db_seconds, *rows_written;
    } m;

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t kick;
    json_t *cfgs;    /* experiment uid -> {"generation":N,"config":{...}} effective configs */
    json_t *gcmemo;  /* experiment uid -> signature of the states GC last ran for (gc.c) */
    json_t *endmemo; /* experiment uid -> the same, as experiment.c computes it (NULL: empty) */
    struct kd_ctrl_view *views; /* experiment uid -> its Trials' summaries (experiment.c) */
    struct kd_ctrl_deleted deleted[KD_CTRL_DELETED_MEMO]; /* a ring (trial.c) */
    size_t deleted_next;
    bool kicked;
};

/* Small helpers shared by all of controller/ (ctrl.c): they call nothing else in it. */

/** Whether this replica may act (leader election off, or leading). Thread-safe. */
bool kd_ctrl_acting(struct kd_ctrl *c);

/** Wake the scheduler loop for a pass now. Thread-safe. */
void kd_ctrl_kick(struct kd_ctrl *c);

/*
 * A failure whose cause comes back on its own (the API server or the
 * database unreachable, a timeout, "try again") is retried at most this
 * long after the last try, however often it failed: the work queue's own
 * backoff doubles up to minutes, and an object that no event wakes (an
 * Experiment being deleted) would wait that long after the outage ended.
 */
#define KD_CTRL_TRANSIENT_RETRY_MS 2000

/** The most a failure with code rc waits before its retry (0: the queue's backoff). Pure. */
long kd_ctrl_retry_cap_ms(int rc);

/**
 * The end of a reconcile of `what` (experiment, trial, task) `key` that
 * returns rc: a warning for a failure (a conflict is only a retry), and
 * *requeue_after_ms set to kd_ctrl_retry_cap_ms(rc) for a transient one.
 */
void kd_ctrl_reconcile_end(const char *what, const char *key, int rc, const char *err,
                           long *requeue_after_ms);

/** Whether the API is on (the store is open and the API serves; wire.c starts both). */
bool kd_ctrl_api_on(const struct kd_ctrl *c);

/**
 * The nodes exclude_node log policies keep the trial's attempts off: the
 * `node` of each exclude_node entry of status.logPolicies (written by the
 * controller API), without repeats, at most max, into names[] (borrowed
 * from trial). Returns how many. Pure.
 */
int kd_ctrl_excluded_nodes(const json_t *trial, const char **names, int max);

/**
 * The first cancel_retries entry of the trial's status.logPolicies as
 * `"NAME" (pattern P)` (or `(pattern P)` without a name) into buf; false
 * when there is none. Pure.
 */
bool kd_ctrl_log_cancel(const json_t *tstatus, char *buf, size_t len);

/**
 * Read a small file (a key, a token, a settings file) into a new buffer the
 * caller frees: at most max bytes (KD_ETOOBIG past it), NUL-terminated,
 * trailing newlines dropped; *len its length. 0, a KD_E* code or -errno, with the
 * path in err. Blocks; thread-safe.
 */
int kd_ctrl_read_small(const char *path, size_t max, char **out, size_t *len, char *err) KD_WUR;

/** The string at obj.a[.b[.c2]] (b, c2 NULL: fewer levels), borrowed; NULL when absent or not
 * a string. */
const char *kd_ctrl_str(const json_t *obj, const char *a, const char *b, const char *c2);

/**
 * The experiment's configuration as the controller runs it: spec without
 * kdet's own fields, merged over its stored template, validated, the
 * experiment seed set (reproducibility.experiment_seed, else derived from
 * metadata.uid), Determined's defaults filled. *cfg is a new reference;
 * *seed the experiment seed. Returns 0, KD_EINVALID with the validation
 * message in err, or an API error reading the template. Memoised per
 * uid and generation. Thread-safe.
 */
int kd_ctrl_exp_config(struct kd_ctrl *c, const json_t *exp, json_t **cfg, uint64_t *seed,
                       char *err) KD_WUR;

/** The experiment seed kdet derives from an experiment's uid when none is configured. */
uint64_t kd_ctrl_seed_from_uid(const char *uid);
/** A new reference to the JSON number v as the API server writes it back: an integer when v is
 * integral (it reads 1.0 as 1), else a real; so that a field compared with what was read back
 * (json_equal) is not taken for a change and written again. */
json_t *kd_ctrl_number(double v);

/** Forget the Trial summaries kept for the experiments whose uid is not in uids (an object;
 * NULL: all of them). Thread-safe. */
void kd_ctrl_views_prune(struct kd_ctrl *c, const json_t *uids);

/** Reconcile one Experiment ("ns/name"); kd_k8s_reconcile_fn. */
int kd_ctrl_reconcile_experiment(const char *key, long *requeue_after_ms, void *ud);

/** Reconcile one Trial ("ns/name"); kd_k8s_reconcile_fn. */
int kd_ctrl_reconcile_trial(const char *key, long *requeue_after_ms, void *ud);

/*
 * Tasks share the scheduler and its handoff with trials: their handoff
 * keys are KD_CTRL_TASK_KEY + "ns/name", so that a Task and a Trial of the
 * same name never meet there.
 */
#define KD_CTRL_TASK_KEY "task:"

/**
 * Where the trials of experiment ns/name write their TensorBoard event
 * files (tensorboard.c: under its checkpoint storage), into dir. 0, or
 * KD_ENOTFOUND / KD_EINVALID with the cause in err. Thread-safe.
 */
int kd_ctrl_tensorboard_dir(struct kd_ctrl *c, const char *ns, const char *name, char *dir,
                            size_t len, char *err) KD_WUR;

/**
 * The checkpoint storage of Experiment exp as its trials get it (its
 * configuration's, over the controller's default): *out a new reference or
 * NULL (tensorboard.c). The API's storage_of (ud: the struct kd_ctrl),
 * where it writes TensorBoard event files. Thread-safe.
 */
int kd_ctrl_storage_of(void *ud, const json_t *exp, json_t **out);

/** Reconcile one Task ("ns/name"; task.c); kd_k8s_reconcile_fn. */
int kd_ctrl_reconcile_task(const char *key, long *requeue_after_ms, void *ud);

/** One scheduler pass over the caches: admissions, preemptions, reasons. */
void kd_ctrl_schedule(struct kd_ctrl *c);

/** Merge-patch the status subresource with {"status": status}. */
int kd_ctrl_patch_status(struct kd_ctrl *c, const struct kd_k8s_gvr *gvr, const json_t *obj,
                         json_t *status, char *err) KD_WUR;
/** Set or replace condition `type` in the conditions array of status (lastTransitionTime kept when
 * status is unchanged). */
void kd_ctrl_set_condition(json_t *status, const json_t *old_status, const char *type, bool ok,
                           const char *reason, const char *message, int64_t generation);
/** Whether condition `type` is True in status (a Trial's or Task's). Pure. */
bool kd_ctrl_condition_true(const json_t *status, const char *type);
/**
 * How many pods of obj's namespace carry label=obj's name, asked of the API server (not the
 * cache, which may lag behind a create). 0 or a KD_E* with err set. Blocks.
 */
int kd_ctrl_api_pod_count(struct kd_ctrl *c, const json_t *obj, const char *label, size_t *n,
                          char *err) KD_WUR;

#endif
