/*
 * kdet-controller: the Kubernetes operator that runs Experiments and
 * Trials. Parses flags, connects to the API server, starts the informers,
 * the work queues with their reconcilers and the scheduler loop (under
 * leader election when asked), and shuts down cleanly on SIGTERM/SIGINT.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "capacity.h"
#include "ctrl.h"
#include "defaults.h"
#include "events.h"
#include "metrics.h"
#include "states.h"
#include "wire.h"

static int sig_pipe[2] = {-1, -1};

/* Signal handler: only writes the signal number into the self-pipe. */
static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t r = write(sig_pipe[1], &b, 1);
    (void)r;
    errno = saved;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kdet-controller [options]\n"
        "  --kubeconfig FILE        kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)\n"
        "  --context NAME           kubeconfig context\n"
        "  --namespace NS           namespace to watch (default: all; $KDET_NAMESPACE)\n"
        "  --workers N              reconcile workers per queue, 1..64 (default 4)\n"
        "  --scheduler TYPE         priority | fair_share (default priority)\n"
        "  --preemption on|off      preempt lower-priority trials (default on)\n"
        "  --slot-type auto|gpu|cpu what a slot is: auto (default) gives GPU slots in a resource\n"
        "                           pool whose nodes have GPUs and CPU slots where none has\n"
        "  --cpu-per-slot CPUS      CPUs of a CPU slot, e.g. 1, 0.5, 2500m (default 1)\n"
        "  --memory-per-slot SIZE   memory of a CPU slot, e.g. 2Gi, 512Mi (default: none)\n"
        "  --max-slots-per-pod N    split a trial of more slots into pods of N slots, several\n"
        "                           to a node where they fit (default 0: one pod, or whole-node\n"
        "                           pods when the trial exceeds the largest node)\n"
        "  --gang-scheduler NAME    who admits trials by capacity: builtin | volcano | kueue |\n"
        "                           auto (by API discovery) (default $KDET_GANG_SCHEDULER or "
        "builtin)\n"
        "  --gang-queue NAME        Volcano Queue / Kueue LocalQueue of all trials (default\n"
        "                           $KDET_GANG_QUEUE, else the trial's resource pool)\n"
        "  --leader-elect on|off    leader election on a Lease (default off)\n"
        "  --events on|off          Kubernetes Events on Experiments and Trials (default on)\n"
        "  --lease-name NAME        the Lease (default kdet-controller)\n"
        "  --lease-namespace NS     its namespace (default: $POD_NAMESPACE or the client's)\n"
        "  --image IMAGE            trial image when the config names none\n"
        "  --launcher PROG          the launcher in the trial image (default kdet-launch)\n"
        "  --tensorboard-image IMAGE  TensorBoard tasks' image when their config names none\n"
        "                           (default kdet/tensorboard:latest)\n"
        "  --trial-run-as-user UID  run trial pods as this non-root uid unless their pod_spec\n"
        "                           names a user (default: the image's user)\n"
        "  --default-checkpoint-storage FILE  checkpoint_storage (JSON) of experiments that set\n"
        "                           none; a partial one is merged over it\n"
        "  --controller-url URL     KDET_CONTROLLER_URL given to trials (default with a database:\n"
        "                           http://127.0.0.1:PORT for --api-listen's port)\n"
        "  --database-url CONNINFO  PostgreSQL (libpq conninfo or URI; $KDET_DATABASE_URL, else\n"
        "                           $PGHOST/$PGDATABASE): turns on the store and the API\n"
        "  --api-listen ADDR:PORT   where the API listens (default 127.0.0.1:8080)\n"
        "  --token-key-file FILE    trial token key (default: Secret kdet-controller-key, "
        "created)\n"
        "  --user-token-file FILE   the bootstrap administrator's token (default\n"
        "                           $KDET_USER_TOKEN; none: only users' tokens of the store)\n"
        "  --authz namespaces|kubernetes  who decides what a user may do in a namespace: the\n"
        "                           user's namespaces (default) or Kubernetes RBAC through\n"
        "                           SubjectAccessReview (user kdet:NAME, groups kdet:users,\n"
        "                           kdet:admins)\n"
        "  --tls-cert-file FILE     the API's certificate (PEM; with --tls-key-file): HTTPS\n"
        "  --tls-key-file FILE      its private key (PEM)\n"
        "  --tls-ca-file FILE       the CA trials trust (default: --tls-cert-file itself)\n"
        "  --plain-http             serve the API over plain HTTP (127.0.0.1 only); with a\n"
        "                           database, either this or --tls-cert-file is required\n"
        "  --spool-dir DIR          spill metrics here while the database is down\n"
        "  --log-max-bytes-per-trial SIZE  trial log text kept per trial, e.g. 64MiB, 1G; 0: no\n"
        "                           limit (default 64MiB)\n"
        "  --priority-classes on|off set priorityClassName on trial pods (default on)\n"
        "  --allow-host-devices on|off  pass an experiment's resources.devices (other than\n"
        "                           GPUs) to a privileged trial container (default off: such an\n"
        "                           experiment fails naming the field)\n"
        "  --resync SECONDS         re-reconcile live experiments this often (default 30)\n"
        "  --idle-release-after SECONDS  release the pods of a trial waiting for the searcher\n"
        "                           after this long, 0..86400 (default $KDET_IDLE_RELEASE_AFTER "
        "or 5)\n"
        "  --kube-api-qps N         requests per second to the API server (default 50; 0: no "
        "limit)\n"
        "  --kube-api-burst N       requests allowed in a burst above that (default 100)\n"
        "  --log-level LEVEL        debug | info | warn | error (default $KDET_LOG_LEVEL or info)\n"
        "  -h, --help               this text\n");
}

static const char *const flag_names[] = {
    "--kubeconfig",
    "--context",
    "--namespace",
    "--workers",
    "--scheduler",
    "--preemption",
    "--slot-type",
    "--cpu-per-slot",
    "--max-slots-per-pod",
    "--memory-per-slot",
    "--gang-scheduler",
    "--gang-queue",
    "--leader-elect",
    "--events",
    "--lease-name",
    "--lease-namespace",
    "--image",
    "--launcher",
    "--tensorboard-image",
    "--trial-run-as-user",
    "--default-checkpoint-storage",
    "--controller-url",
    "--database-url",
    "--api-listen",
    "--token-key-file",
    "--user-token-file",
    "--authz",
    "--tls-cert-file",
    "--tls-key-file",
    "--tls-ca-file",
    "--plain-http",
    "--spool-dir",
    "--log-max-bytes-per-trial",
    "--priority-classes",
    "--allow-host-devices",
    "--resync",
    "--idle-release-after",
    "--kube-api-qps",
    "--kube-api-burst",
    "--log-level",
    "--help",
    NULL,
};

/* A memory quantity: "2Gi", "512Mi", "1G" (binary multiples, as kd_parse_size) or bytes. */
static int memory_parse(const char *v, uint64_t *out)
{
    int rc = KD_EINVAL;
    char buf[64];
    size_t n = strlen(v);
    uint64_t b = 0;
    if (n == 0 || n + 2 > sizeof(buf))
        goto out;
    memcpy(buf, v, n + 1);
    if (n >= 2 && buf[n - 1] == 'i' && strchr("KMGTkmgt", buf[n - 2]) != NULL)
        buf[n - 1] = '\0'; /* Kubernetes' Ki, Mi, Gi, Ti */
    if (kd_parse_size(buf, &b) != 0 || b == 0 || b > (uint64_t)1 << 50)
        goto out;
    *out = b;
    rc = 0;
out:
    return rc;
}

static int parse_onoff(const char *flag, const char *v, bool *out, char *err)
{
    int rc = 0;
    if (strcmp(v, "on") == 0 || strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *out = true;
    else if (strcmp(v, "off") == 0 || strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *out = false;
    else
        rc = kd_seterr(err, KD_EINVAL, "%s=%s: expected on or off", flag, v);
    return rc;
}

/* ADDR:PORT (ADDR numeric IPv4, PORT 0..65535); the address is kept in a static buffer. */
static int parse_listen(const char *v, struct kd_ctrl_opts *o, char *err)
{
    static char addr[64];
    int rc = 0, port = -1;
    const char *colon = strrchr(v, ':');
    struct in_addr ia;
    if (colon == NULL || (size_t)(colon - v) >= sizeof(addr) ||
        kd_parse_int(colon + 1, &port) != 0 || port < 0 || port > 65535) {
        rc = kd_seterr(err, KD_EINVAL, "--api-listen=%s: expected ADDR:PORT", v);
        goto out;
    }
    kd_strlcpy(addr, v, (size_t)(colon - v) + 1);
    if (inet_pton(AF_INET, addr, &ia) != 1) {
        rc = kd_seterr(err, KD_EINVAL, "--api-listen=%s: expected a numeric IPv4 address", v);
        goto out;
    }
    o->api_addr = addr;
    o->api_port = port;
out:
    return rc;
}

/* The database from the environment when no flag names one: KDET_DATABASE_URL, else libpq's own
 * PGHOST/PGDATABASE (conninfo "" lets libpq read them). */
static const char *database_from_env(void)
{
    const char *u = getenv("KDET_DATABASE_URL"), *h = getenv("PGHOST"), *d = getenv("PGDATABASE");
    return u != NULL && u[0] != '\0'                                    ? u
           : (h != NULL && h[0] != '\0') || (d != NULL && d[0] != '\0') ? ""
                                                                        : NULL;
}

/* Whether --gang-scheduler / --gang-queue were given (they win over the environment). */
static bool gang_given, queue_given;

/* "auto" is resolved once the client exists (gang_auto); NULL gang means auto. */
static int gang_parse(const char *what, const char *v, struct kd_ctrl_opts *o, char *err)
{
    int rc = 0;
    if (strcmp(v, "auto") == 0)
        o->gang = NULL;
    else if ((o->gang = kd_gang_find(v)) == NULL)
        rc = kd_seterr(err, KD_EINVAL, "%s=%s: expected builtin, volcano, kueue or auto", what, v);
    return rc;
}

/* A queue name: a DNS-1123 subdomain for Volcano, a label value for Kueue: [a-z0-9.-], <= 63. */
static int gang_queue_parse(const char *what, const char *v, struct kd_ctrl_opts *o, char *err)
{
    size_t n = strlen(v);
    bool ok = n > 0 && n <= 63 && v[0] != '-' && v[0] != '.' && v[n - 1] != '-' && v[n - 1] != '.';
    for (size_t i = 0; i < n && ok; i++)
        ok = (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '-' ||
             v[i] == '.';
    if (!ok)
        return kd_seterr(err, KD_EINVAL,
                         "%s=%s: expected a queue name (lower-case letters, digits, '-' and '.', "
                         "at most 63)",
                         what, v);
    o->gang_queue = v;
    return 0;
}

/* Whether the API server serves `resource` in group/version (discovery). */
static bool served(struct kd_k8s_client *client, const char *gv, const char *resource)
{
    char path[128];
    json_t *list = NULL;
    bool found = false;
    size_t i;
    json_t *r;
    snprintf(path, sizeof(path), "/apis/%s", gv);
    if (kd_k8s_request(client, "GET", path, NULL, NULL, &list, NULL, NULL) == 0)
        json_array_foreach(json_object_get(list, "resources"), i, r) found =
            found || strcmp(json_string_value(json_object_get(r, "name")) ?: "", resource) == 0;
    json_decref(list);
    return found;
}

/* --gang-scheduler auto: Volcano when its PodGroups are served, else Kueue when its
 * Workloads are, else the built-in scheduler. */
static const struct kd_gang_ops *gang_auto(struct kd_k8s_client *client)
{
    const struct kd_gang_ops *g = &kd_gang_builtin;
    if (served(client, "scheduling.volcano.sh/v1beta1", "podgroups"))
        g = &kd_gang_volcano;
    else if (served(client, "kueue.x-k8s.io/v1beta1", "workloads"))
        g = &kd_gang_kueue;
    return g;
}

/*
 * The API's transport: with a database (the API on), HTTPS from
 * --tls-cert-file and --tls-key-file, or plain HTTP only when asked for
 * and only on 127.0.0.1. Pure.
 */
static int tls_check(const struct kd_ctrl_opts *o, char *err)
{
    int rc = 0;
    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL))
        rc = kd_seterr(err, KD_EINVAL, "--tls-cert-file and --tls-key-file go together");
    else if (o->tls_ca_file != NULL && o->tls_cert_file == NULL)
        rc = kd_seterr(err, KD_EINVAL, "--tls-ca-file needs --tls-cert-file and --tls-key-file");
    else if (o->tls_cert_file != NULL && o->plain_http)
        rc = kd_seterr(err, KD_EINVAL, "--plain-http and --tls-cert-file exclude each other");
    else if (o->plain_http && strcmp(o->api_addr, "127.0.0.1") != 0)
        rc = kd_seterr(err, KD_EINVAL,
                       "--plain-http: the API listens on %s; plain HTTP is only served on "
                       "127.0.0.1 (give --tls-cert-file and --tls-key-file)",
                       o->api_addr);
    else if (o->database_url != NULL && o->tls_cert_file == NULL && !o->plain_http)
        rc = kd_seterr(err, KD_EINVAL,
                       "the API (on with a database) needs --tls-cert-file and --tls-key-file, "
                       "or --plain-http to serve plain HTTP on 127.0.0.1");
    return rc;
}

static int parse_args(int argc, char **argv, struct kd_ctrl_opts *o,
                      struct kd_k8s_client_opts *kube, int *log_level, char *err)
{
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        char name[64];
        const char *a = argv[i], *v = NULL, *eq = strchr(a, '=');
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (eq != NULL) {
            kd_strlcpy(name, a,
                       (size_t)(eq - a + 1) < sizeof(name) ? (size_t)(eq - a + 1) : sizeof(name));
            v = eq + 1;
        } else {
            kd_strlcpy(name, a, sizeof(name));
        }
        if (strcmp(name, "--plain-http") == 0) { /* the one flag without a value */
            if (v != NULL)
                rc = parse_onoff(name, v, &o->plain_http, err);
            else
                o->plain_http = true;
            continue;
        }
        bool known = false;
        for (int k = 0; flag_names[k] != NULL; k++)
            known = known || strcmp(flag_names[k], name) == 0;
        if (!known) {
            const char *s = kd_suggest(name, flag_names);
            rc = kd_seterr(err, KD_EINVAL, "argument %d: unknown option %s%s%s%s", i, name,
                           s ? " (did you mean " : "", s ? s : "", s ? "?)" : "");
            break;
        }
        if (v == NULL) {
            if (i + 1 >= argc) {
                rc = kd_seterr(err, KD_EINVAL, "argument %d: %s needs a value", i, name);
                break;
            }
            v = argv[++i];
        }
        int n;
        if (strcmp(name, "--kubeconfig") == 0)
            o->kubeconfig = v;
        else if (strcmp(name, "--context") == 0)
            o->context = v;
        else if (strcmp(name, "--namespace") == 0)
            o->ns = v[0] != '\0' ? v : NULL;
        else if (strcmp(name, "--workers") == 0) {
            if (kd_parse_int(v, &n) != 0 || n < 1 || n > 64)
                rc = kd_seterr(err, KD_EINVAL, "--workers=%s: expected an integer from 1 to 64", v);
            o->workers = n;
        } else if (strcmp(name, "--scheduler") == 0) {
            if (kd_sched_type_parse(v, &o->sched_type) != 0)
                rc =
                    kd_seterr(err, KD_EINVAL, "--scheduler=%s: expected priority or fair_share", v);
        } else if (strcmp(name, "--gang-scheduler") == 0) {
            if ((rc = gang_parse("--gang-scheduler", v, o, err)) != 0)
                break;
            gang_given = true;
        } else if (strcmp(name, "--gang-queue") == 0) {
            if ((rc = gang_queue_parse("--gang-queue", v, o, err)) != 0)
                break;
            queue_given = true;
        } else if (strcmp(name, "--preemption") == 0) {
            rc = parse_onoff(name, v, &o->preemption, err);
        } else if (strcmp(name, "--slot-type") == 0) {
            if (kd_sched_slot_type_parse(v, &o->slot_type) != 0)
                rc = kd_seterr(err, KD_EINVAL, "--slot-type=%s: expected auto, gpu or cpu", v);
        } else if (strcmp(name, "--cpu-per-slot") == 0) {
            if (kd_sched_cpu_milli(v, &o->pod.cpu_per_slot_milli) != 0)
                rc = kd_seterr(err, KD_EINVAL,
                               "--cpu-per-slot=%s: expected a CPU quantity above 0 such as 1, "
                               "0.5 or 2500m",
                               v);
        } else if (strcmp(name, "--max-slots-per-pod") == 0) {
            if (kd_parse_int(v, &n) != 0 || n < 0 || n > 1024)
                rc = kd_seterr(err, KD_EINVAL,
                               "--max-slots-per-pod=%s: expected an integer from 0 (no limit) to "
                               "1024",
                               v);
            else
                o->max_slots_per_pod = n;
        } else if (strcmp(name, "--memory-per-slot") == 0) {
            if ((rc = memory_parse(v, &o->pod.memory_per_slot)) != 0)
                rc = kd_seterr(err, KD_EINVAL,
                               "--memory-per-slot=%s: expected a size above 0 such as 2Gi or 512Mi",
                               v);
        } else if (strcmp(name, "--leader-elect") == 0)
            rc = parse_onoff(name, v, &o->leader_elect, err);
        else if (strcmp(name, "--events") == 0)
            rc = parse_onoff(name, v, &o->events, err);
        else if (strcmp(name, "--lease-name") == 0)
            o->lease_name = v;
        else if (strcmp(name, "--lease-namespace") == 0)
            o->lease_ns = v;
        else if (strcmp(name, "--image") == 0)
            o->pod.image = v;
        else if (strcmp(name, "--launcher") == 0)
            o->pod.launcher = v;
        else if (strcmp(name, "--tensorboard-image") == 0)
            o->pod.tensorboard_image = v;
        else if (strcmp(name, "--trial-run-as-user") == 0) {
            if (kd_parse_int(v, &n) != 0 || n < 1)
                rc = kd_seterr(err, KD_EINVAL,
                               "--trial-run-as-user=%s: expected a non-root uid (1 or more)", v);
            o->pod.run_as_user = n;
        } else if (strcmp(name, "--default-checkpoint-storage") == 0)
            o->default_storage_file = v;
        else if (strcmp(name, "--controller-url") == 0) {
            if (!kd_str_has_prefix(v, "http://") && !kd_str_has_prefix(v, "https://"))
                rc = kd_seterr(err, KD_EINVAL,
                               "--controller-url=%s: must start with http:// or https://", v);
            o->pod.controller_url = v;
        } else if (strcmp(name, "--database-url") == 0)
            o->database_url = v[0] != '\0' ? v : NULL;
        else if (strcmp(name, "--api-listen") == 0)
            rc = parse_listen(v, o, err);
        else if (strcmp(name, "--token-key-file") == 0)
            o->key_file = v;
        else if (strcmp(name, "--user-token-file") == 0)
            o->user_token_file = v;
        else if (strcmp(name, "--authz") == 0) {
            if (strcmp(v, "namespaces") == 0 || strcmp(v, "kubernetes") == 0)
                o->authz_kubernetes = strcmp(v, "kubernetes") == 0;
            else
                rc = kd_seterr(err, KD_EINVAL, "--authz=%s: expected namespaces or kubernetes", v);
        } else if (strcmp(name, "--tls-cert-file") == 0)
            o->tls_cert_file = v;
        else if (strcmp(name, "--tls-key-file") == 0)
            o->tls_key_file = v;
        else if (strcmp(name, "--tls-ca-file") == 0)
            o->tls_ca_file = v;
        else if (strcmp(name, "--spool-dir") == 0)
            o->spool_dir = v;
        else if (strcmp(name, "--log-max-bytes-per-trial") == 0) {
            uint64_t b = 0;
            if (kd_parse_size(v, &b) != 0 || b > ((uint64_t)1 << 50))
                rc = kd_seterr(err, KD_EINVAL,
                               "--log-max-bytes-per-trial=%s: expected a size such as 64MiB, 1G or "
                               "0 (no limit)",
                               v);
            o->log_max_bytes = b == 0 ? -1 : (int64_t)b;
        } else if (strcmp(name, "--priority-classes") == 0)
            rc = parse_onoff(name, v, &o->pod.priority_classes, err);
        else if (strcmp(name, "--allow-host-devices") == 0)
            rc = parse_onoff(name, v, &o->pod.allow_host_devices, err);
        else if (strcmp(name, "--resync") == 0) {
            if (kd_parse_int(v, &n) != 0 || n < 1 || n > 86400)
                rc = kd_seterr(err, KD_EINVAL, "--resync=%s: expected seconds from 1 to 86400", v);
            o->resync_ms = (long)n * 1000;
        } else if (strcmp(name, "--idle-release-after") == 0) {
            if (!kd_trial_idle_release_parse(v, &o->idle_release_ms))
                rc =
                    kd_seterr(err, KD_EINVAL,
                              "--idle-release-after=%s: expected whole seconds from 0 to 86400", v);
            o->idle_release_set = true;
        } else if (strcmp(name, "--kube-api-qps") == 0) {
            if (kd_parse_int(v, &n) != 0 || n < 0 || n > 100000)
                rc = kd_seterr(err, KD_EINVAL,
                               "--kube-api-qps=%s: expected requests per second from 0 to 100000",
                               v);
            kube->qps = n == 0 ? -1 : n; /* the client's "unlimited" is negative */
        } else if (strcmp(name, "--kube-api-burst") == 0) {
            if (kd_parse_int(v, &n) != 0 || n < 1 || n > 100000)
                rc = kd_seterr(err, KD_EINVAL, "--kube-api-burst=%s: expected 1 to 100000", v);
            kube->burst = n;
        } else if (strcmp(name, "--log-level") == 0) {
            if (kd_log_level_parse(v, log_level) != 0)
                rc = kd_seterr(err, KD_EINVAL,
                               "--log-level=%s: expected debug, info, warn or error", v);
        }
    }
    return rc;
}

/* The --default-checkpoint-storage file: JSON, at most 64 KiB. */
static int load_default_storage(const char *path, json_t **out, char *err)
{
    char *text = NULL;
    size_t n = 0;
    int rc = kd_ctrl_read_small(path, 64 * 1024, &text, &n, err);
    if (rc == KD_ETOOBIG)
        rc = kd_seterr(err, KD_EINVALID, "%s: larger than 64 KiB", path);
    if (rc == 0)
        rc = kd_ctrl_default_storage_parse(path, text, out, err);
    free(text);
    return rc;
}

static void kick_add(json_t *obj, void *ud)
{
    (void)obj;
    kd_ctrl_kick(ud);
}

static void kick_update(json_t *old, json_t *obj, void *ud)
{
    (void)old;
    (void)obj;
    kd_ctrl_kick(ud);
}

/* How often the scheduler thread hands freed heap pages back to the kernel. */
#define TRIM_PERIOD_MS 5000
#define SCHED_PACE 2
#define SCHED_PACE_MAX_MS 2000

static void *sched_main(void *arg)
{
    struct kd_ctrl *c = arg;
    int64_t trimmed = kd_mono_ms();
    while (!atomic_load(&c->stop)) {
        pthread_mutex_lock(&c->mu);
        if (!c->kicked) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            long ms = c->o.sched_period_ms;
            ts.tv_sec += ms / 1000;
            ts.tv_nsec += (ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->kick, &c->mu, &ts);
        }
        c->kicked = false;
        pthread_mutex_unlock(&c->mu);
        if (atomic_load(&c->stop))
            break;
        int64_t t0 = kd_mono_ms();
        if (kd_ctrl_acting(c) && kd_k8s_informer_has_synced(c->nodes) &&
            kd_k8s_informer_has_synced(c->trials) && kd_k8s_informer_has_synced(c->pods) &&
            kd_k8s_informer_has_synced(c->exps) && kd_k8s_informer_has_synced(c->others) &&
            (c->tasks == NULL ||
             (kd_k8s_informer_has_synced(c->tasks) && kd_k8s_informer_has_synced(c->taskpods))))
            kd_ctrl_schedule(c);
        /* Passes, relists and reconciles decode cached objects into short-lived trees (about
         * eight times their text); glibc keeps the freed pages, so the resident set would stay
         * at the highest such peak. Give them back now and then. */
        if (kd_mono_ms() - trimmed >= TRIM_PERIOD_MS) {
            malloc_trim(0);
            trimmed = kd_mono_ms();
        }
        /* Coalesce bursts of kicks; and after a long pass (thousands of live trials) wait
         * twice as long, so that passes take at most about a third of a core. */
        int64_t pause = (kd_mono_ms() - t0) * SCHED_PACE;
        kd_sleep_ms(pause > SCHED_PACE_MAX_MS ? SCHED_PACE_MAX_MS : pause > 50 ? (int)pause : 50);
    }
    return NULL;
}

static void on_lost(void *ud)
{
    struct kd_ctrl *c = ud;
    KD_WARN("leadership lost; exiting so that the new leader acts alone");
    atomic_store(&c->stop, 1);
    unsigned char b = 0;
    ssize_t r = write(sig_pipe[1], &b, 1);
    (void)r;
}

static void on_started(void *ud)
{
    kd_ctrl_kick(ud);
    KD_INFO("leading");
}

/*
 * The caches index only the labels that kd_k8s_cache_by_label looks up
 * (pods by trial and by experiment): a label index costs about 170 bytes
 * per object when its value is unique, as a trial's request id is. Add a
 * key here when a new lookup by label needs one.
 */
static const char *const no_labels[] = {NULL};
static const char *const pod_labels[] = {KD_POD_LABEL_TRIAL, KD_POD_LABEL_EXPERIMENT, NULL};

/* Pods that are neither trial nor task pods: what they request is room trials and tasks cannot
 * have (schedloop.c). */
#define OTHERS_SELECTOR "!" KD_POD_LABEL_TRIAL ",!" KD_POD_LABEL_TASK
static const char *const task_pod_labels[] = {KD_POD_LABEL_TASK, NULL};

/*
 * Whether the Task resource is installed: an older install without
 * crds/tasks.yaml still runs experiments (tasks off, said once). Other
 * errors leave it to the informer, which retries.
 */
static bool tasks_served(struct kd_ctrl *c)
{
    struct kd_k8s_query q = {.limit = 1};
    json_t *page = NULL;
    char err[KD_ERRLEN] = "";
    int rc = kd_k8s_list(c->client, &KD_K8S_TASKS, c->o.ns, &q, &page, NULL, err);
    json_decref(page);
    if (rc == KD_ENOTFOUND)
        KD_WARN("the Task resource is not installed: notebooks, commands, shells and TensorBoards "
                "are off (kubectl apply -f crds/tasks.yaml, then restart)",
                "detail=%s", kd_logq(err));
    return rc != KD_ENOTFOUND;
}

/*
 * The namespace the informer of other pods watches: all of them (NULL),
 * since nodes are shared, even when --namespace restricts the rest; the
 * controller's own when RBAC forbids listing pods in all namespaces, with
 * a warning, so that a namespaced install still runs (counting fewer
 * pods). Other errors leave it to the informer, which retries.
 */
static const char *others_namespace(struct kd_ctrl *c)
{
    const char *ns = NULL;
    if (c->o.ns != NULL) {
        struct kd_k8s_query q = {.label_selector = OTHERS_SELECTOR, .limit = 1};
        json_t *page = NULL;
        char err[KD_ERRLEN] = "";
        int rc = kd_k8s_list(c->client, &KD_K8S_PODS, NULL, &q, &page, NULL, err);
        json_decref(page);
        if (rc == KD_EFORBIDDEN) {
            KD_WARN("cannot list pods in all namespaces; trials are placed counting only the "
                    "other pods of the watched namespace: grant list and watch on pods "
                    "cluster-wide (manifests/rbac.yaml)",
                    "namespace=%s detail=%s", kd_logq(c->o.ns), kd_logq(err));
            ns = c->o.ns;
        }
    }
    return ns;
}

/* An update or delete of another pod kicks a pass when it frees room (ended, deleted, smaller). */
static bool frees_room(json_t *old, json_t *obj)
{
    struct kd_cap_request a, b;
    if (!kd_cap_pod_request(old, &a))
        return false;
    if (obj == NULL || !kd_cap_pod_request(obj, &b))
        return true;
    return strcmp(a.node, b.node) != 0 || b.cpu_milli < a.cpu_milli || b.gpus < a.gpus;
}

static void others_update(json_t *old, json_t *obj, void *ud)
{
    if (frees_room(old, obj))
        kd_ctrl_kick(ud);
}

static void others_delete(json_t *obj, void *ud)
{
    if (frees_room(obj, NULL))
        kd_ctrl_kick(ud);
}

static int new_informer(struct kd_ctrl *c, struct kd_k8s_gvr gvr, const char *ns, const char *sel,
                        const char *const *index_labels, struct kd_k8s_informer **out, char *err)
{
    struct kd_k8s_informer_opts io = {
        .gvr = gvr, .ns = ns, .label_selector = sel, .index_labels = index_labels};
    return kd_k8s_informer_new(c->client, &io, out, err);
}

int main(int argc, char **argv)
{
    int rc = 0, level = -1;
    char err[KD_ERRLEN] = "", url[128];
    struct kd_ctrl c;
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_client_opts kube = {0};
    pthread_t sched_thread;
    bool sched_started = false;
    memset(&c, 0, sizeof(c));
    /* One malloc arena per core instead of eight: the informer, worker and API threads
     * otherwise each grow an arena of their own and keep its freed memory. */
    mallopt(M_ARENA_MAX, 2);
    c.o = (struct kd_ctrl_opts){.workers = 4,
                                .preemption = true,
                                .events = true,
                                .lease_name = "kdet-controller",
                                .resync_ms = 30000,
                                .sched_period_ms = 1000};
    c.o.pod.priority_classes = true;
    c.o.pod.cpu_per_slot_milli = 1000;
    c.o.api_addr = "127.0.0.1";
    c.o.api_port = KD_CTRL_API_PORT;
    c.o.database_url = database_from_env();
    c.o.ns = getenv("KDET_NAMESPACE") != NULL && getenv("KDET_NAMESPACE")[0]
                 ? getenv("KDET_NAMESPACE")
                 : NULL;
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.kick, NULL);
    c.handoff = kd_handoff_new();
    c.storage_of = kd_ctrl_storage_of;
    c.cfgs = json_object();
    c.o.gang = &kd_gang_builtin;
    if ((rc = parse_args(argc, argv, &c.o, &kube, &level, err)) != 0) {
        fprintf(stderr, "kdet-controller: %s\n", err);
        usage(stderr);
        rc = 2;
        goto out;
    }
    /* The environment's gang settings, unless a flag gave them (the flag wins). */
    const char *genv = getenv("KDET_GANG_SCHEDULER"), *qenv = getenv("KDET_GANG_QUEUE");
    if ((!gang_given && genv != NULL && genv[0] != '\0' &&
         (rc = gang_parse("KDET_GANG_SCHEDULER", genv, &c.o, err)) != 0) ||
        (!queue_given && qenv != NULL && qenv[0] != '\0' &&
         (rc = gang_queue_parse("KDET_GANG_QUEUE", qenv, &c.o, err)) != 0)) {
        fprintf(stderr, "kdet-controller: %s\n", err);
        rc = 2;
        goto out;
    }
    if ((rc = tls_check(&c.o, err)) != 0) {
        fprintf(stderr, "kdet-controller: %s\n", err);
        rc = 2;
        goto out;
    }
    kd_log_init("kdet-controller", level, -1);
    kd_ctrl_metrics_init(&c);
    if (c.o.default_storage_file != NULL &&
        (rc = load_default_storage(c.o.default_storage_file, &c.o.default_storage, err)) != 0) {
        fprintf(stderr, "kdet-controller: --default-checkpoint-storage: %s\n", err);
        rc = 2;
        goto out;
    }
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        rc = 1;
        goto out;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct kd_k8s_config_opts co = {.kubeconfig = c.o.kubeconfig, .context = c.o.context};
    if ((rc = kd_k8s_config_load(&co, &cfg, err)) != 0 ||
        (rc = kd_k8s_client_new(&cfg, &kube, &c.client, err)) != 0) {
        KD_ERROR("cannot configure the Kubernetes client", "err=%s detail=%s", kd_err_name(rc),
                 kd_logq(err));
        rc = 1;
        goto out;
    }
    /* Events get a client of their own (its own rate limit and counters), so that posting
     * them never takes from the reconcilers' budget of API calls. */
    struct kd_k8s_client_opts eko = kube;
    eko.qps = 10;
    eko.burst = 50;
    if (c.o.events && kd_k8s_client_new(&cfg, &eko, &c.events_client, err) == 0)
        c.events = kd_events_start(c.events_client, 1024);
    else if (c.o.events)
        KD_WARN("Events are off: cannot make their client", "detail=%s", kd_logq(err));
    bool gang_detected = c.o.gang == NULL;
    if (gang_detected)
        c.o.gang = gang_auto(c.client);
    if (!c.o.gang->kdet_admits && (c.o.sched_type == KD_SCHED_FAIR_SHARE || !c.o.preemption))
        KD_WARN("--scheduler and --preemption do not apply with a batch scheduler: it orders, "
                "shares and preempts",
                "gang_scheduler=%s", c.o.gang->name);
    KD_INFO("starting",
            "server=%s source=%s namespace=%s scheduler=%s preemption=%s workers=%d "
            "leader_elect=%s gang_scheduler=%s%s gang_queue=%s",
            kd_logq(cfg.server), kd_logq(cfg.source), c.o.ns ? kd_logq(c.o.ns) : "(all)",
            c.o.sched_type == KD_SCHED_FAIR_SHARE ? "fair_share" : "priority",
            c.o.preemption ? "on" : "off", c.o.workers, c.o.leader_elect ? "on" : "off",
            c.o.gang->name, gang_detected ? " gang_detected=true" : "",
            c.o.gang_queue != NULL ? kd_logq(c.o.gang_queue) : "(resource pool)");

    /*
     * A failing object is retried at 5 ms doubling up to 5 minutes, not the
     * 1000 s of client-go: an error fixed outside the controller (RBAC, a
     * quota) is seen within minutes. Transient ones retry within
     * KD_CTRL_TRANSIENT_RETRY_MS (kd_ctrl_reconcile_end).
     */
    const struct kd_k8s_queue_opts qo = {.base_delay_ms = 5, .max_delay_ms = 300000};
    c.expq = kd_k8s_queue_new(&qo);
    c.trialq = kd_k8s_queue_new(&qo);
    c.taskq = kd_k8s_queue_new(&qo);
    if ((rc = new_informer(&c, KD_K8S_EXPERIMENTS, c.o.ns, NULL, no_labels, &c.exps, err)) != 0 ||
        (rc = new_informer(&c, KD_K8S_TRIALS, c.o.ns, NULL, no_labels, &c.trials, err)) != 0 ||
        (rc = new_informer(&c, KD_K8S_PODS, c.o.ns, KD_POD_LABEL_TRIAL, pod_labels, &c.pods,
                           err)) != 0 ||
        (rc = new_informer(&c, KD_K8S_NODES, NULL, NULL, NULL, &c.nodes, err)) != 0 ||
        (rc = new_informer(&c, KD_K8S_PODS, others_namespace(&c), OTHERS_SELECTOR, no_labels,
                           &c.others, err)) != 0) {
        KD_ERROR("cannot create informers", "err=%s detail=%s", kd_err_name(rc), kd_logq(err));
        rc = 1;
        goto out;
    }
    if (tasks_served(&c) &&
        ((rc = new_informer(&c, KD_K8S_TASKS, c.o.ns, NULL, no_labels, &c.tasks, err)) != 0 ||
         (rc = new_informer(&c, KD_K8S_PODS, c.o.ns, KD_POD_LABEL_TASK, task_pod_labels,
                            &c.taskpods, err)) != 0)) {
        KD_ERROR("cannot create informers", "err=%s detail=%s", kd_err_name(rc), kd_logq(err));
        rc = 1;
        goto out;
    }
    struct kd_k8s_handlers h_exp = kd_k8s_handlers_enqueue(c.expq);
    struct kd_k8s_handlers h_trial = kd_k8s_handlers_enqueue(c.trialq);
    struct kd_k8s_owner_enqueue own_exp = {.queue = c.expq, .owner_kind = "Experiment"};
    struct kd_k8s_owner_enqueue own_trial = {.queue = c.trialq, .owner_kind = "Trial"};
    struct kd_k8s_handlers h_trial_owner = kd_k8s_handlers_enqueue_owner(&own_exp);
    struct kd_k8s_handlers h_pod_owner = kd_k8s_handlers_enqueue_owner(&own_trial);
    struct kd_k8s_handlers h_kick = {
        .on_add = kick_add, .on_update = kick_update, .on_delete = kick_add, .ud = &c};
    struct kd_k8s_handlers h_others = {
        .on_update = others_update, .on_delete = others_delete, .ud = &c};
    struct kd_k8s_handlers h_task = kd_k8s_handlers_enqueue(c.taskq);
    struct kd_k8s_owner_enqueue own_task = {.queue = c.taskq, .owner_kind = "Task"};
    struct kd_k8s_handlers h_taskpod_owner = kd_k8s_handlers_enqueue_owner(&own_task);
    if ((rc = kd_k8s_informer_add_handlers(c.exps, &h_exp)) != 0 ||
        (rc = kd_k8s_informer_add_handlers(c.trials, &h_trial)) != 0 ||
        (rc = kd_k8s_informer_add_handlers(c.trials, &h_trial_owner)) != 0 ||
        (rc = kd_k8s_informer_add_handlers(c.pods, &h_pod_owner)) != 0 ||
        (rc = kd_k8s_informer_add_handlers(c.pods, &h_kick)) != 0 ||
        (rc = kd_k8s_informer_add_handlers(c.nodes, &h_kick)) != 0 ||
        (rc = kd_k8s_informer_add_handlers(c.others, &h_others)) != 0)
        goto out;
    if (c.tasks != NULL &&
        ((rc = kd_k8s_informer_add_handlers(c.tasks, &h_task)) != 0 ||
         (rc = kd_k8s_informer_add_handlers(c.tasks, &h_kick)) != 0 ||
         (rc = kd_k8s_informer_add_handlers(c.taskpods, &h_taskpod_owner)) != 0 ||
         (rc = kd_k8s_informer_add_handlers(c.taskpods, &h_kick)) != 0 ||
         (rc = kd_k8s_informer_start(c.tasks)) != 0 ||
         (rc = kd_k8s_informer_start(c.taskpods)) != 0))
        goto out;
    if ((rc = kd_k8s_informer_start(c.exps)) != 0 || (rc = kd_k8s_informer_start(c.trials)) != 0 ||
        (rc = kd_k8s_informer_start(c.pods)) != 0 || (rc = kd_k8s_informer_start(c.nodes)) != 0 ||
        (rc = kd_k8s_informer_start(c.others)) != 0)
        goto out;
    KD_INFO("waiting for the caches to sync");
    while ((kd_k8s_informer_wait_synced(c.exps, 1000) != 0 ||
            kd_k8s_informer_wait_synced(c.trials, 1000) != 0 ||
            kd_k8s_informer_wait_synced(c.pods, 1000) != 0 ||
            kd_k8s_informer_wait_synced(c.nodes, 1000) != 0 ||
            kd_k8s_informer_wait_synced(c.others, 1000) != 0 ||
            (c.tasks != NULL && (kd_k8s_informer_wait_synced(c.tasks, 1000) != 0 ||
                                 kd_k8s_informer_wait_synced(c.taskpods, 1000) != 0)))) {
        unsigned char b;
        if (read(sig_pipe[0], &b, 1) == 1)
            goto shutdown;
    }
    {
        struct kd_k8s_informer *infs[] = {c.exps, c.trials, c.pods, c.nodes, c.others};
        size_t stored = 0, text = 0;
        for (size_t i = 0; i < sizeof(infs) / sizeof(infs[0]); i++) {
            size_t t = 0;
            stored += kd_k8s_cache_bytes(kd_k8s_informer_cache(infs[i]), &t);
            text += t;
        }
        KD_INFO("caches synced",
                "experiments=%zu trials=%zu pods=%zu nodes=%zu other_pods=%zu cache_bytes=%zu "
                "cache_text_bytes=%zu",
                kd_k8s_cache_len(kd_k8s_informer_cache(c.exps)),
                kd_k8s_cache_len(kd_k8s_informer_cache(c.trials)),
                kd_k8s_cache_len(kd_k8s_informer_cache(c.pods)),
                kd_k8s_cache_len(kd_k8s_informer_cache(c.nodes)),
                kd_k8s_cache_len(kd_k8s_informer_cache(c.others)), stored, text);
    }
    if ((rc = kd_ctrl_wire_start(&c, err)) != 0) {
        KD_ERROR("cannot start the store and the API", "err=%s detail=%s", kd_err_name(rc),
                 kd_logq(err));
        rc = 1;
        goto shutdown;
    }
    if (kd_ctrl_api_on(&c) && c.o.pod.controller_url == NULL) {
        const char *a = strcmp(c.o.api_addr, "0.0.0.0") == 0 ? "127.0.0.1" : c.o.api_addr;
        snprintf(url, sizeof(url), "%s://%s:%d", c.tls_ca != NULL ? "https" : "http", a,
                 kd_api_port(c.api));
        c.o.pod.controller_url = url;
    }
    if (kd_ctrl_api_on(&c))
        KD_INFO("trials reach the API", "controller_url=%s", kd_logq(c.o.pod.controller_url));
    if (c.o.leader_elect) {
        char ident[300], host[256] = "kdet-controller";
        gethostname(host, sizeof(host) - 1);
        snprintf(ident, sizeof(ident), "%s-%d", host, (int)getpid());
        struct kd_k8s_leader_opts lo = {
            .ns = c.o.lease_ns != NULL              ? c.o.lease_ns
                  : getenv("POD_NAMESPACE") != NULL ? getenv("POD_NAMESPACE")
                                                    : kd_k8s_client_namespace(c.client),
            .name = c.o.lease_name,
            .identity = c.o.identity != NULL ? c.o.identity : ident,
            .on_started = on_started,
            .on_stopped = on_lost,
            .ud = &c,
            .release_on_stop = true,
        };
        if ((rc = kd_k8s_leader_start(c.client, &lo, &c.leader, err)) != 0) {
            KD_ERROR("cannot start leader election", "err=%s detail=%s", kd_err_name(rc),
                     kd_logq(err));
            rc = 1;
            goto shutdown;
        }
    }
    if ((rc = kd_k8s_queue_start_workers(c.expq, c.o.workers, kd_ctrl_reconcile_experiment_timed,
                                         &c)) != 0 ||
        (rc = kd_k8s_queue_start_workers(c.trialq, c.o.workers, kd_ctrl_reconcile_trial_timed,
                                         &c)) != 0 ||
        (c.tasks != NULL && (rc = kd_k8s_queue_start_workers(
                                 c.taskq, c.o.workers, kd_ctrl_reconcile_task_timed, &c)) != 0))
        goto shutdown;
    if (pthread_create(&sched_thread, NULL, sched_main, &c) == 0)
        sched_started = true;
    KD_INFO("running");
    for (;;) {
        struct pollfd pfd = {.fd = sig_pipe[0], .events = POLLIN};
        int pr = poll(&pfd, 1, 1000);
        unsigned char b = 0;
        if (pr > 0 && read(sig_pipe[0], &b, 1) == 1) {
            KD_INFO("shutting down", "signal=%d", b);
            break;
        }
        if (atomic_load(&c.stop))
            break;
    }
shutdown:
    atomic_store(&c.stop, 1);
    kd_ctrl_kick(&c);
    if (sched_started)
        pthread_join(sched_thread, NULL);
    kd_k8s_queue_shutdown(c.expq, false);
    kd_k8s_queue_shutdown(c.trialq, false);
    kd_k8s_queue_shutdown(c.taskq, false);
    /* Join the workers (they read the informers' caches), but free the queues only once the
     * informers have stopped: until then a watch event still calls their add. */
    kd_k8s_queue_shutdown(c.expq, true);
    kd_k8s_queue_shutdown(c.trialq, true);
    kd_k8s_queue_shutdown(c.taskq, true);
    kd_ctrl_wire_stop(&c);
    kd_k8s_leader_stop(c.leader);
    c.leader = NULL;
    kd_k8s_informer_free(c.exps);
    kd_k8s_informer_free(c.trials);
    kd_k8s_informer_free(c.pods);
    kd_k8s_informer_free(c.nodes);
    kd_k8s_informer_free(c.others);
    kd_k8s_informer_free(c.tasks);
    kd_k8s_informer_free(c.taskpods);
    kd_k8s_queue_free(c.expq);
    kd_k8s_queue_free(c.trialq);
    kd_k8s_queue_free(c.taskq);
    c.expq = c.trialq = c.taskq = NULL;
    struct kd_k8s_client_stats cs;
    kd_k8s_client_stats(c.client, &cs);
    KD_INFO("stopped",
            "api_requests=%llu api_retries=%llu connections=%llu api_reads=%llu "
            "api_watches=%llu api_creates=%llu api_updates=%llu api_patches=%llu "
            "api_deletes=%llu api_status_writes=%llu",
            (unsigned long long)cs.requests, (unsigned long long)cs.retries,
            (unsigned long long)cs.connects, (unsigned long long)cs.reads,
            (unsigned long long)cs.watches, (unsigned long long)cs.creates,
            (unsigned long long)cs.updates, (unsigned long long)cs.patches,
            (unsigned long long)cs.deletes, (unsigned long long)cs.status_writes);
out:
    kd_k8s_queue_free(c.expq);
    kd_k8s_queue_free(c.trialq);
    kd_k8s_queue_free(c.taskq);
    kd_ctrl_wire_stop(&c);
    kd_events_stop(c.events, 2000);
    kd_k8s_client_free(c.events_client);
    kd_k8s_client_free(c.client);
    kd_k8s_config_free(&cfg);
    kd_handoff_free(c.handoff);
    kd_ctrl_views_prune(&c, NULL);
    json_decref(c.cfgs);
    json_decref(c.endmemo);
    json_decref(c.o.default_storage);
    kd_ctrl_metrics_free(&c);
    if (sig_pipe[0] >= 0) {
        close(sig_pipe[0]);
        close(sig_pipe[1]);
    }
    return rc == 0 ? 0 : (rc > 0 ? rc : 1);
}
