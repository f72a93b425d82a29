/*
 * det, the kdet command line: shared exit codes, the command table entry
 * points, the argument parser every verb uses, output helpers (tables,
 * -o json|yaml, durations) and the connection to the Kubernetes API.
 */
#ifndef KD_CLI_CLI_H
#define KD_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"
#include "k8s/client.h"

/* Exit codes (documented in docs/cli.md and `det --help`). */
enum det_exit {
    DET_EXIT_OK = 0,
    DET_EXIT_ERROR = 1,    /* anything else: I/O, internal, an API error not listed below */
    DET_EXIT_USAGE = 2,    /* bad command line */
    DET_EXIT_INVALID = 3,  /* invalid config, template or context; the API server refused it */
    DET_EXIT_CLUSTER = 4,  /* no kubeconfig, API unreachable, 401/403, CRDs not installed */
    DET_EXIT_NOTFOUND = 5, /* the experiment, trial or template does not exist */
    DET_EXIT_FAILED = 6,   /* wait: the experiment ended CANCELED or ERROR */
    DET_EXIT_TIMEOUT = 7,  /* wait: --timeout passed */
};

/** Print "det: <message>" to stderr. */
void det_err(const char *fmt, ...) KD_PRINTF(1, 2);

/** Print a usage error with a "did you mean" suggestion among cands (NULL-terminated). */
void det_usage_suggest(const char *what, const char *word, const char *const *cands,
                       const char *help_cmd);

/* ---- arguments ----------------------------------------------------------- */

#define DET_MAX_POS 4

/** Every option any verb takes; a verb lists the ones it accepts. */
struct det_args {
    const char *pos[DET_MAX_POS];
    int npos;
    const char *kubeconfig, *context, *ns, *output, *timeout, *template_ref;
    const char *data_dir, *port, *gpus;
    const char *kind, *metric, *downsample, *trial;              /* trial metrics, checkpoints */
    const char *priority, *ahead_of, *behind_of, *resource_pool; /* job update */
    const char *save_experiment_best, *save_trial_best, *save_trial_latest; /* gc-policy */
    const char *tail;                                                       /* logs --tail N */
    const char *grep;                                                       /* logs --grep RE */
    const char *best;                                                       /* --best N */
    const char *namespaces, *description, *token_file, *user; /* det user, det token */
    const char *workspace, *project;                          /* experiment list filters */
    const char *config_file, *kube_context; /* tasks (their --context is the directory) */
    bool detach;                            /* tasks: -d, do not follow or open */
    bool admin, no_admin;
    bool plain_http; /* det deploy local up */
    bool all, yes, follow, dry_run;
    bool paused, test, local; /* experiment create */
    /* det model: --label, --add-label, --remove-label (comma-separated lists), --name,
     * --comment, --metadata JSON, --order asc|desc, --json */
    const char *label, *add_label, *remove_label, *name, *comment, *metadata, *order;
    bool json;
};

/**
 * Parse argv[1..] (argv[0] is the verb) into a. `flags` is a
 * NULL-terminated list of the long options this verb accepts ("--all",
 * "--kubeconfig", ...; "-n", "-o", "-a", "-y", "-f" are the short forms of
 * --namespace, --output, --all, --yes, --follow). `posnames` names the
 * positional arguments (NULL-terminated); the first `minpos` are required.
 * Returns 0, 1 when --help was printed (usage to stdout), or KD_EINVAL
 * after printing the error (naming the option or argument) to stderr.
 */
int det_parse_args(int argc, char **argv, const char *const *flags, const char *const *posnames,
                   int minpos, const char *usage, const char *cmd, struct det_args *a);

/** Map det_parse_args' result to an exit code (help: 0, error: 2). */
int det_args_exit(int r);

/* ---- output -------------------------------------------------------------- */

enum det_format { DET_FMT_TABLE, DET_FMT_JSON, DET_FMT_YAML };

/** Parse -o: NULL/"table" → table, "json", "yaml". KD_EINVAL after printing an error. */
int det_format_parse(const char *s, enum det_format *out);

/** Print v as JSON or YAML to stdout. 0 or an exit code. */
int det_print_obj(const json_t *v, enum det_format f);

/** A table printed like kubectl's: upper-case headers, columns three spaces apart. */
struct det_table;
struct det_table *det_table_new(const char *const *headers);
/** Add a row: as many cells as headers (NULL prints as ""). Cells are copied. */
void det_table_row(struct det_table *t, const char *const *cells);
void det_table_print(struct det_table *t);
void det_table_free(struct det_table *t);

/** "3s", "4m12s", "2h5m", "3d4h" for a duration in ms (negative: "-"). */
void det_fmt_duration(int64_t ms, char *buf, size_t len);
/** An RFC 3339 timestamp as "2026-11-21 17:30:00" (UTC) or "" when NULL/unparsable. */
void det_fmt_time(const char *rfc3339, char *buf, size_t len);
/** Parse a --timeout: "90", "90s", "15m", "2h" into ms. KD_EINVAL when malformed. */
int det_parse_duration(const char *s, int64_t *ms);

/** Dotted path lookup ("status.trials.total") on obj; borrowed or NULL. */
json_t *det_get(const json_t *obj, const char *path);
/** The string at path, or def. */
const char *det_get_str(const json_t *obj, const char *path, const char *def);

/* ---- the Kubernetes API -------------------------------------------------- */

/** det's connection: the resolved kubeconfig, a client and the namespace to use. */
struct det_kube {
    struct kd_k8s_config cfg;
    struct kd_k8s_client *c;
    char ns[254];
    const struct det_args *a; /* the command line it was opened with (for the controller API) */
};

/**
 * Load the kubeconfig (a->kubeconfig, $KUBECONFIG, in-cluster,
 * ~/.kube/config; a->context) and make a client; the namespace is a->ns,
 * else the context's. Prints the error and returns an exit code
 * (DET_EXIT_CLUSTER when there is no usable config). Blocks on file reads.
 */
int det_kube_open(const struct det_args *a, struct det_kube *k);
void det_kube_close(struct det_kube *k);

/**
 * Explain a failed API call on stderr and return its exit code. `verb`
 * ("get", "patch", ...), `what` ("experiment", "template") and `name`
 * (may be NULL) name the request: 404 names the object and namespace (or
 * says that the CRDs are not installed, when the resource type itself is
 * missing), 403 names the verb and resource RBAC denies, a connection
 * error names the server.
 */
int det_kube_fail(struct det_kube *k, int rc, const struct kd_k8s_status *st, const char *err,
                  const char *verb, const struct kd_k8s_gvr *gvr, const char *what,
                  const char *name);

/**
 * Resolve an ID (exact name, or a unique prefix of one) of a resource in
 * k->ns into *name (malloc'd). Prints the error and returns an exit code:
 * DET_EXIT_NOTFOUND when nothing matches, DET_EXIT_USAGE when the prefix is
 * ambiguous (listing the matches). *obj (optional) gets the object.
 */
int det_resolve(struct det_kube *k, const struct kd_k8s_gvr *gvr, const char *what, const char *id,
                char **name, json_t **obj);

/* ---- one verb's preamble ------------------------------------------------- */

/** What a verb takes: its options and arguments, and what to open before it runs. */
struct det_verb_spec {
    const char *cmd;   /* "det trial list", for messages */
    const char *usage; /* printed by --help */
    const char *const *flags;
    const char *const *pos;
    int minpos;
    bool format;                  /* parse -o table|json|yaml into fmt */
    bool kube;                    /* open the Kubernetes client */
    bool api;                     /* open the controller API client (det_api_open) */
    const struct kd_k8s_gvr *gvr; /* with kube: resolve pos[0] among these into name */
    const char *what;             /* "experiment", "trial" (messages) */
    bool obj;                     /* keep the resolved object in obj */
};

/** det's connection to kdet-controller's user API (docs/cli.md: how det finds it). */
struct det_api {
    char *url;          /* base URL, no trailing '/' */
    char *token;        /* the user bearer token: never printed */
    char *ca_file;      /* the CA det trusts for https:// (NULL: the system's) */
    char ca_source[64]; /* where ca_file came from, for messages */
    char source[4200];  /* where the URL and token came from, for messages */
    char ns[254];       /* the namespace used in paths */
    bool quiet_404;     /* det_api_get prints nothing on 404 (the caller handles it) */
    char *why;          /* when set, errors go here (whylen bytes) instead of stderr */
    size_t whylen;
};

/** A verb's state: arguments, format, connection, the resolved name. */
struct det_verb {
    struct det_args a;
    enum det_format fmt;
    struct det_kube k;
    struct det_api api; /* with spec.api */
    char *name;         /* resolved pos[0] (malloc'd) */
    json_t *obj;        /* the resolved object when spec.obj */
};

/**
 * Parse argv for the verb described by s, then (per s) the output format,
 * the Kubernetes client and the resolution of pos[0]. Returns -1 when the
 * verb should go on, else the exit code to return (--help printed: 0; an
 * error was printed: its code). Always call det_verb_end afterwards.
 */
int det_verb_begin(struct det_verb *v, int argc, char **argv, const struct det_verb_spec *s);
void det_verb_end(struct det_verb *v);

/**
 * For verbs that work without the Kubernetes API: resolve id (a name or a
 * unique prefix) like det_resolve when a kubeconfig is found (opening
 * v->k), else take it as given. *name malloc'd. Exit code (errors printed).
 */
int det_resolve_if_kube(struct det_verb *v, const struct kd_k8s_gvr *gvr, const char *what,
                        const char *id, char **name);

/** One verb of a noun: its name, an optional short alias, its handler (argv[0] is the verb). */
struct det_sub {
    const char *name, *alias;
    int (*run)(int argc, char **argv);
};
#define DET_MAX_SUBS 24

/**
 * Run the verb argv[1] of `noun` ("det trial") from subs (ended by a NULL
 * name): no verb prints usage to stderr (exit 2), --help/-h/help prints it
 * to stdout (exit 0), an unknown verb gets a "did you mean". Returns the
 * exit code.
 */
int det_dispatch(int argc, char **argv, const struct det_sub *subs, const char *usage,
                 const char *noun);

/* ---- the controller's HTTP API ------------------------------------------ */

/**
 * Find the API URL and user token: $KDET_API_URL with $KDET_API_TOKEN or
 * $KDET_API_TOKEN_FILE, else the files controller-url and user-token of
 * the local deployment ($KDET_DATA_DIR, else the default data dir). The
 * namespace is a->ns, else the kubeconfig context's, else "default".
 * `verb` ("det trial metrics") names the command in the error printed when
 * nothing is configured. Returns an exit code.
 */
int det_api_open(const struct det_args *a, const char *verb, struct det_api *api);
void det_api_close(struct det_api *api);

/**
 * det_api_open that prints nothing: the reason it failed goes into why
 * (len bytes), and so do the errors of later det_api_get calls on api.
 */
int det_api_open_quiet(const struct det_args *a, const char *verb, struct det_api *api, char *why,
                       size_t len);

/* ---- integer ids (ids.c) ------------------------------------------------- */

/** True when s is 1 to 18 decimal digits: an integer id, unless an object has that name. */
bool det_is_id(const char *s);

/**
 * The store's integer ids, from the controller API (docs/cli.md "IDs"):
 * of the namespace's experiments (exp NULL), or of experiment exp and its
 * trials, as an object uid -> id. NULL when the API is not configured or fails,
 * with the reason in why (nothing printed). Blocks.
 */
json_t *det_ids(struct det_kube *k, const char *exp, char *why, size_t len);

/**
 * The name of the experiment (or trial) whose integer id is id, asked of
 * the controller API (GET .../experiments/ID or .../trials/ID). *name
 * malloc'd. Prints the error (naming the id, or saying that ids need the
 * controller API) and returns an exit code.
 */
int det_id_resolve(struct det_kube *k, bool trial, const char *id, char **name);

/**
 * GET path (starting with '/', e.g. "/api/v1/jobs") and parse the JSON
 * answer into *out. Prints the error (401, 404 with the API's message
 * unless quiet_404, unreachable) and returns an exit code. Blocks (30 s timeout).
 */
int det_api_get(struct det_api *api, const char *path, json_t **out);

/** det_api_get with another method ("POST": an empty JSON object as the body). */
int det_api_request(struct det_api *api, const char *method, const char *path, json_t **out);

/** det_api_request with `body` (borrowed; NULL: "{}" for methods other than GET). */
int det_api_send(struct det_api *api, const char *method, const char *path, const json_t *body,
                 json_t **out);

/** The CA of api (when it has one) on a libcurl handle, for requests made outside det_api_send. */
void det_api_tls(const struct det_api *api, void *curl);

/**
 * Where `det user login` keeps the user's token: $KDET_LOGIN_FILE, else
 * ~/.kdet/user-token (mode 0600). "" when there is no home directory.
 */
void det_login_file(char *buf, size_t len);

/** Append s to b URL-encoded (RFC 3986 unreserved kept). 0 or KD_ETOOBIG. */
int det_urlencode(struct kd_buf *b, const char *s);

/** Default data dir of 'det deploy local' into buf: $KDET_DATA_DIR, ~/.kdet/local, ... */
void det_deploy_default_dir(char *buf, size_t len);

/* ---- commands ------------------------------------------------------------ */

/** `det user ...` and `det token ...` (user.c): argv[0] is the noun. Exit code. */
int det_cmd_user(int argc, char **argv);
int det_cmd_token(int argc, char **argv);
/** `det experiment ...`: argv[0] is "experiment". Returns an exit code. */
int det_cmd_experiment(int argc, char **argv);
/** `det experiment create` (experiment.c); argv[0] is "create". */
int det_exp_create(int argc, char **argv);
/** `det experiment --help`. */
extern const char det_exp_usage[];
/**
 * Watch experiment `name` in k->ns until it ends, printing a progress line
 * on stderr at each change; timeout_ms 0 waits for ever. Returns
 * DET_EXIT_OK (COMPLETED, printed on stdout), DET_EXIT_FAILED (CANCELED or
 * ERROR, with status.message), DET_EXIT_TIMEOUT, DET_EXIT_NOTFOUND
 * (deleted meanwhile) or another exit code from det_kube_fail. Blocks.
 */
int det_exp_wait(struct det_kube *k, const char *name, int64_t timeout_ms);
/** Print trials (Trial objects) as det's trial table on stdout; ids: uid -> id, or NULL. */
void det_print_trials(const json_t *trials, const json_t *ids);
/**
 * Delete the pods of trial `trial` (label kdet.io/trial) with grace period
 * 0. Returns how many were deleted; errors are printed as warnings. Blocks.
 */
int det_kill_trial_pods(struct det_kube *k, const char *trial);
/**
 * `det trial logs` and `det experiment logs`: print the logs of the pods of
 * trials (Trial objects, at least one) on stdout. by_trial: prefix each
 * line with its trial ("[TRIAL] ", "[TRIAL POD] " when it has several
 * pods); else a single trial's lines are prefixed only when it has several
 * pods. tail >= 0: the last tail lines of each pod (and container). follow:
 * until the pods end. Returns an exit code (a trial without pods is said
 * on stderr; none with pods at all is DET_EXIT_NOTFOUND). Blocks.
 */
int det_trial_logs(struct det_kube *k, const json_t *trials, bool by_trial, bool follow, long tail,
                   const char *grep);
/**
 * The logs of trial (or, with experiment, of experiment) `name` from the
 * controller API (logs.c): the whole log, or its last `tail` lines (tail
 * >= 0), only lines matching the regular expression grep (NULL: all); with
 * follow, then every new line until the trial or experiment ends. Lines
 * print as "[rank=R] line" ("[TRIAL] [rank=R] line" for an experiment).
 * *printed (may be NULL) gets the lines printed before following. Returns
 * an exit code (errors printed). Blocks.
 */
int det_api_logs(struct det_api *api, bool experiment, const char *name, bool follow, long tail,
                 const char *grep, size_t *printed);
/**
 * The controller API's side of `det trial logs` / `det experiment logs`
 * (v parsed, pos[0] the ID): when the API is configured, resolve the ID
 * and print from the store (det_api_logs with v->a's -f, --grep and tail),
 * *done true, and return the exit code. *done false (return 0): use the
 * pods' logs instead: no API is configured, or it cannot be reached (said
 * on stderr) while a kubeconfig is at hand.
 */
int det_logs_api_or_pods(struct det_verb *v, bool experiment, const struct kd_k8s_gvr *gvr,
                         long tail, bool *done);
/**
 * det_api_logs for task `name`: its lines as its process wrote them; with
 * follow, until it ends, and then *exit_code (may be NULL) is its process's
 * exit code (-1 when unknown). Returns an exit code (errors printed).
 * Blocks.
 */
int det_api_task_logs(struct det_api *api, const char *name, bool follow, long tail,
                      const char *grep, size_t *printed, int *exit_code);
/** One stored line as det prints it, with a newline, appended to out. 0 or KD_ETOOBIG. Pure. */
int det_logs_format(const json_t *line, bool with_trial, struct kd_buf *out);

/** A server-sent-event parser (logs.c): complete events go to fn(event, data, ud). */
typedef int (*det_sse_fn)(const char *event, const char *data, void *ud);
struct det_sse {
    struct kd_buf line, data; /* the line being read; the event's data lines */
    char event[32];           /* the event's name ("" until an event: line) */
    bool has_data;
    int64_t last_id; /* the last id: field seen (what Last-Event-ID resumes after) */
    det_sse_fn fn;
    void *ud;
};
void det_sse_init(struct det_sse *s, det_sse_fn fn, void *ud);
void det_sse_free(struct det_sse *s);
/** Feed n bytes of the stream; fn runs for each event completed. 0, fn's error or KD_ETOOBIG. */
int det_sse_feed(struct det_sse *s, const char *p, size_t n);

/** Parse --tail N (a number >= 0) into *n (-1 when s is NULL). KD_EINVAL after printing. */
int det_parse_tail(const char *s, long *n);
/**
 * Whether smaller values of the experiment's searcher metric are better:
 * spec.searcher.smaller_is_better, else the annotation
 * kdet.io/smaller-is-better ("false": larger is better) the controller sets
 * when the metric comes from a stored template, else true. Pure.
 */
bool det_smaller_is_better(const json_t *exp);
/**
 * The n best of trials (Trial objects) by status.bestValidation.value, the
 * best first; trials without a numeric value are left out, equal
 * values keep their input order. A new array of borrowed-then-increfed
 * items. Pure.
 */
json_t *det_best_trials(const json_t *trials, bool smaller_is_better, size_t n);
/** `det trial list` (also `det experiment list-trials`); argv[0] is the verb. */
int det_trial_list(int argc, char **argv);
/** `det trial ...`. */
int det_cmd_trial(int argc, char **argv);
/** `det template ...`. */
int det_cmd_template(int argc, char **argv);
/** `det checkpoint ...`. */
int det_cmd_checkpoint(int argc, char **argv);
/**
 * Restore checkpoint id (a uuid, or a unique prefix of one) of api's
 * namespace into outdir (NULL: ./UUID) from its experiment's
 * checkpoint_storage, every file's size and sha256 checked, as `det
 * checkpoint download` does; prints the directory on stdout. Exit code
 * (errors printed). Blocks.
 */
int det_checkpoint_download(struct det_api *api, const char *id, const char *outdir);
/** `det model ...` (model.c): the model registry. */
int det_cmd_model(int argc, char **argv);
/** `det cmd|notebook|shell|tensorboard|task ...` (task.c): argv[0] is the noun. */
int det_cmd_task(int argc, char **argv);
/**
 * ssh into shell task `name` (its Task object `task`, RUNNING) through the
 * controller API's proxy, with the key and host key of its Secret
 * <name>-ssh; cmd (ncmd words, may be 0) runs one command instead of a
 * session. Returns ssh's exit code (the command's), or a det exit code when
 * ssh could not start. Blocks (shell.c).
 */
int det_shell_ssh(struct det_kube *k, const char *name, const json_t *task, char **cmd, int ncmd);
/** `det shell tunnel ID`: ssh's ProxyCommand; copies stdin/stdout to the proxied sshd. */
int det_shell_tunnel(int argc, char **argv);
/** `det job ...`. */
int det_cmd_job(int argc, char **argv);
/** `det trial metrics` (trial_metrics.c). */
int det_trial_metrics(int argc, char **argv);
/* ---- slots (slots.c): resource pools as kdet-controller's scheduler counts them ---- */

/** What det needs of a Node. */
struct det_node {
    char name[254];
    char pool[64];      /* label kdet.io/resource-pool, else "default" */
    int gpus;           /* allocatable nvidia.com/gpu */
    int64_t cpu_milli;  /* allocatable cpu */
    bool unschedulable; /* cordoned or not Ready */
};

/** The scheduler's slot settings (GET /api/v1/info), or its defaults when assumed. */
struct det_slot_settings {
    char slot_type[8];          /* auto | gpu | cpu */
    int64_t cpu_per_slot_milli; /* a CPU slot */
    int max_slots_per_pod;      /* 0: no limit */
    bool assumed;               /* the controller API was not reached */
};

/** A resource pool: its slot type and slots, counted over all its nodes. */
struct det_pool {
    char name[64];
    bool cpu;     /* CPU slots (else GPUs) */
    int nodes;    /* nodes in the pool */
    int gpus;     /* GPUs in all */
    int slots;    /* slots in all */
    int largest;  /* slots of its largest node */
    int nlargest; /* nodes with that many */
};

/** A Node's facts. Pure. */
void det_node_facts(const json_t *node, struct det_node *out);
/** A cpu quantity ("2", "1500m", "0.5") in millicores; 0 when unreadable. Pure. */
int64_t det_cpu_milli(const char *q);
/** The pools of nodes[0..n) (at most max; KD_ETOOBIG beyond), in order of first node. Pure. */
int det_pools_count(const struct det_node *nodes, size_t n, const struct det_slot_settings *s,
                    struct det_pool *pools, size_t max, size_t *npools) KD_WUR;
/**
 * Whether a trial of `slots` slots could ever run in pool p (NULL: no such pool), on an
 * empty pool, by the scheduler's shape rules (docs/scheduling.md; `single_node`:
 * resources.is_single_node); when not, why (len bytes) in the scheduler's words. Pure.
 */
bool det_pool_fits(const struct det_pool *p, const struct det_node *nodes, size_t n, int slots,
                   bool single_node, const struct det_slot_settings *s, char *why, size_t len);
/** The settings in words: what the controller said, or what det assumed. */
void det_slot_assumption(const struct det_slot_settings *s, char *buf, size_t len);
/**
 * det experiment create: warn on stderr when no node of the experiment's resource pool
 * could ever run one of its trials (spec: the Experiment's spec). Says nothing when the
 * Nodes cannot be listed. Blocks on the Kubernetes API and the controller API.
 */
void det_capacity_warn(struct det_kube *k, const json_t *spec);
/** det agent ..., det slot ... */
int det_cmd_agent(int argc, char **argv);
int det_cmd_slot(int argc, char **argv);

/** det trial profiler (profiler.c). */
int det_trial_profiler(int argc, char **argv);
/** `det experiment set gc-policy` (job.c). */
int det_exp_set(int argc, char **argv);
/** `det deploy ...`. */
int det_cmd_deploy(int argc, char **argv);

/**
 * Fetch template NAME's YAML from the cluster (ConfigMap labelled
 * kdet.io/template=NAME, key template.yaml). *yaml malloc'd. Exit code.
 */
int det_template_fetch(struct det_kube *k, const char *name, char **yaml);

/* Labels and keys shared with kdet-controller (docs/cli.md). */
#define DET_TEMPLATE_LABEL "kdet.io/template"
#define DET_TEMPLATE_KEY "template.yaml"
#define DET_KILL_ANNOTATION "kdet.io/kill"

/** The CRD YAML built in from crds/ (experiments.yaml, trials.yaml, tasks.yaml). */
extern const unsigned char det_crd_experiments[];
extern const size_t det_crd_experiments_len;
extern const unsigned char det_crd_trials[];
extern const size_t det_crd_trials_len;
extern const unsigned char det_crd_tasks[];
extern const size_t det_crd_tasks_len;
/** manifests/priorityclasses.yaml built in (a multi-document stream). */
extern const unsigned char det_priorityclasses[];
extern const size_t det_priorityclasses_len;

#endif
