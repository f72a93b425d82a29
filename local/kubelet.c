/*
 * The process kubelet. One thread: reap exited containers, schedule, then
 * drive each bound pod (prepare volumes, run init containers in order, run
 * the app containers, restart per restartPolicy with the kubelet's
 * back-off, SIGTERM/SIGKILL on deletion) and write back pod status when it
 * changed. Containers are process groups started with posix_spawn.
 */
#include "json.h"
#include "kubelet.h"
#include "runas.h"
#include "validate.h"
#include "logstream.h"
#include "proctree.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#include "core/fs.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "http/http.h"
#include "k8s/client.h"
#include "k8s/informer.h"
#include "events.h"
#include "quantity.h"
#include "scheduler.h"
#include "store.h"

#define MAX_GPUS 64
#define MAX_ENV 1024
#define BACKOFF_START_MS 10000
#define BACKOFF_MAX_MS 300000
#define LEASE_PERIOD_MS 10000
#define NODE_STATUS_PERIOD_MS 10000
#define POLL_MS 500
#define MAX_PATH_PART 253
#define SA_MOUNT "/var/run/secrets/kubernetes.io/serviceaccount"

extern char **environ;

enum cstate { C_WAITING, C_RUNNING, C_TERMINATED };

struct ctr {
    char *name;
    bool init;
    pid_t pid;
    enum cstate state;
    int restarts;
    bool ever_started;
    char *wait_reason, *wait_msg;
    char started[40], finished[40];
    int exit_code;
    char *term_reason, *term_msg;
    bool logs_on_error; /* terminationMessagePolicy FallbackToLogsOnError */
    json_t *last;       /* lastState.terminated of the previous run, or NULL */
    int64_t next_start_ms;
    int64_t backoff_ms;
};

struct podrt {
    UT_hash_handle hh;
    UT_hash_handle hl; /* in kd_kubelet.live while it runs or has more to do */
    bool in_live;
    char *uid, *ns, *name;
    char *dir;
    int gpus[MAX_GPUS];
    int ngpus;
    struct ctr *c;
    size_t nc, ninit;
    bool prepared;
    bool done; /* terminal: nothing more to run */
    char start_time[40];
    int64_t term_sent_ms;
    int64_t kill_at_ms;
    json_t *cond_times; /* type -> [status, time] */
    json_t *sent;       /* agent mode: the last status the API server accepted */
    /* The runtime state (status_sig) and pod resourceVersion of the last pass that found the
     * pod's status already as it should be: while both stay the same, so does the status. */
    char *shown_sig, *shown_rv;
    char **links; /* symlinks made for volume mounts */
    size_t nlinks;
};

struct kd_kubelet {
    struct kd_store *st;
    char *node;
    char *state_dir;
    char *kubeconfig;
    char *api_server; /* agent mode: for pods' service-account kubeconfig */
    int api_port;
    int ngpus;
    long ncpus; /* the Node's cpu capacity and allocatable */
    bool gpu_used[MAX_GPUS];
    struct podrt *pods;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    int64_t next_lease_ms;
    int max_pods;
    /* Node agent mode (st == NULL): the API server is reached through kc. */
    struct kd_k8s_client *kc;
    pthread_mutex_t mu; /* guards pods for the log server (agent mode) */
    struct kd_http_server *http;
    int kubelet_port;
    char ready_since[40];
    int64_t next_node_ms;
    struct kd_k8s_informer *inf; /* pods with spec.nodeName = node */
    pthread_mutex_t wake_mu;
    pthread_cond_t wake_cv;
    bool dirty; /* the informer saw a change since the last pass */
    /*
     * Local mode: the runtimes still running or with more to do (by uid), and the store's
     * resourceVersion up to which pod changes were seen. A pass visits these and the pods
     * that changed since, not every pod: a finished pod costs nothing until it changes.
     */
    struct podrt *live;
    struct kd_sched *sched;
    uint64_t cursor;
    int64_t next_full_ms; /* a pass over every pod, as a safety net, at most this often */
    /* Tidied folders of gone pods, STATE_DIR/spare/ID, for the next pods (at most max_pods;
     * kd_kubelet_spare_entry), and the mode the kubelet's folders get (spare/'s own). */
    unsigned *spare;
    int nspare;
    unsigned spare_seq;
    mode_t dir_mode;
};

#define FULL_PASS_MS 10000

static void now3339(char *buf, size_t len)
{
    kd_time_rfc3339(kd_wall_ms(), 0, buf, len);
}

/* A file name that stays in its directory: not empty, not "." or "..", no '/'. */
static bool path_component(const char *s)
{
    return s != NULL && s[0] != '\0' && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 &&
           strchr(s, '/') == NULL;
}

/* A run's log file in its container's folder: RUN.log. */
#define LOG_NAME "%d.log"

char *kd_kubelet_log_path(const char *state_dir, const char *uid, const char *container, int run)
{
    /* Names come from API objects: a stored pod from before names were validated, or a
     * request's ?container=, must never reach outside the pod's directory. */
    if (!path_component(uid) || !kd_local_dns_label(container))
        return NULL;
    return kd_xasprintf("%s/pods/%s/%s/" LOG_NAME, state_dir, uid, container, run);
}

static int write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (write(fd, data, len) != (ssize_t)len)
        rc = -EIO;
    close(fd);
    return rc;
}

/* ---- pod folders, recycled -------------------------------------------------------- */

enum kd_spare_entry kd_kubelet_spare_entry(const char *name, bool is_dir, bool is_reg,
                                           const char *const *containers, size_t n)
{
    if (is_reg && strcmp(name, "pids") == 0)
        return KD_SPARE_TRUNCATE;
    for (size_t i = 0; is_dir && i < n; i++) {
        if (containers[i] != NULL && strcmp(name, containers[i]) == 0)
            return KD_SPARE_EMPTY;
    }
    return KD_SPARE_REMOVE;
}

bool kd_kubelet_spare_log(const char *name, bool is_reg)
{
    char first[16];
    snprintf(first, sizeof(first), LOG_NAME, 0);
    return is_reg && strcmp(name, first) == 0;
}

/*
 * Empty the kept log at path for the next pod's first run, if no process has it open: true
 * when it was kept, false when the caller removes it. A write lease, which the kernel grants
 * only while no other open file refers to the file, is the check, taken and given back at
 * once. A reader that still follows a gone pod's log (kdet-local's own log stream, or any
 * other process) holds it, so it goes instead, and the reader keeps what it had; the next
 * pod's log is then a new file. A break of the lease in the moment it is held (an open from
 * elsewhere) is signalled with SIGURG, which is ignored unless handled, not with SIGIO,
 * which would end the process. Only a plain file of this user's with no other link is
 * emptied, never what a container put in its place.
 */
static bool spare_log_keep(const char *path)
{
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat sb;
    bool keep = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_nlink == 1 &&
                sb.st_uid == geteuid() && fcntl(fd, F_SETSIG, SIGURG) == 0 &&
                fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
    if (keep) {
        keep = fcntl(fd, F_SETLEASE, F_UNLCK) == 0 && ftruncate(fd, 0) == 0 &&
               ((sb.st_mode & 07777) == 0644 || fchmod(fd, 0644) == 0);
    }
    close(fd);
    return keep;
}

/*
 * Call each(path, name, lstat of it, ud) for every entry of the folder dir, until one returns
 * non-zero; an entry gone meanwhile is skipped. Then set the folder's mode to `mode` when it
 * differs. 0, or the -errno of the first entry or step that failed.
 */
static int spare_walk(const char *dir, mode_t mode,
                      int (*each)(const char *path, const char *name, const struct stat *sb,
                                  void *ud),
                      void *ud)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -errno;
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *path = kd_xasprintf("%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0)
            rc = errno == ENOENT ? 0 : -errno;
        else
            rc = each(path, de->d_name, &sb, ud);
        free(path);
    }
    struct stat sb;
    if (rc == 0 && fstat(dirfd(d), &sb) == 0 && (sb.st_mode & 07777) != mode &&
        fchmod(dirfd(d), mode) != 0)
        rc = -errno;
    closedir(d);
    return rc;
}

/* An entry of a container's folder in a spare: its first run's log kept (spare_log_keep),
 * the rest removed. */
static int spare_ctr_entry(const char *path, const char *name, const struct stat *sb, void *ud)
{
    (void)ud;
    if (kd_kubelet_spare_log(name, S_ISREG(sb->st_mode)) && spare_log_keep(path))
        return 0;
    return kd_rm_tree(path);
}

struct spare_ctx {
    const struct kd_kubelet *k;
    const char *const *names;
    size_t n;
};

/* An entry at the top of a pod folder going into or coming out of the spares. */
static int spare_top_entry(const char *path, const char *name, const struct stat *sb, void *ud)
{
    const struct spare_ctx *c = ud;
    int rc = 0;
    switch (
        kd_kubelet_spare_entry(name, S_ISDIR(sb->st_mode), S_ISREG(sb->st_mode), c->names, c->n)) {
    case KD_SPARE_REMOVE: rc = kd_rm_tree(path); break;
    case KD_SPARE_TRUNCATE: {
        int fd = open(path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        rc = fd >= 0 ? 0 : -errno;
        if (fd >= 0)
            close(fd);
        break;
    }
    case KD_SPARE_EMPTY: rc = spare_walk(path, c->k->dir_mode, spare_ctr_entry, NULL); break;
    }
    return rc;
}

static char *spare_path(const struct kd_kubelet *k, unsigned id)
{
    return kd_xasprintf("%s/spare/%u", k->state_dir, id);
}

/*
 * Tidy the pod folder dir for the containers in names (kd_kubelet_spare_entry), and give it
 * and the kept folders the kubelet's mode again: a container may have changed them. 0, or
 * the -errno of the first entry that could not be tidied.
 */
static int spare_tidy(const struct kd_kubelet *k, const char *dir, const char *const *names,
                      size_t n)
{
    struct spare_ctx c = {.k = k, .names = names, .n = n};
    return spare_walk(dir, k->dir_mode, spare_top_entry, &c);
}

/* The containers' names of p, for spare_tidy. Caller frees the array (not the names). */
static const char **ctr_names(const struct podrt *p)
{
    const char **names = kd_xcalloc(p->nc + 1, sizeof(*names));
    for (size_t i = 0; i < p->nc; i++)
        names[i] = p->c[i].name;
    return names;
}

/* A gone pod's folder: tidied into the spares, or removed when there are enough of them. */
static void spare_put(struct kd_kubelet *k, const struct podrt *p)
{
    if (k->nspare < k->max_pods) {
        const char **names = ctr_names(p);
        int rc = spare_tidy(k, p->dir, names, p->nc);
        free(names);
        char *to = spare_path(k, k->spare_seq);
        if (rc == 0 && rename(p->dir, to) == 0) {
            k->spare[k->nspare++] = k->spare_seq++;
            free(to);
            return;
        }
        free(to);
    }
    kd_rm_tree(p->dir);
}

/*
 * A new pod's folder from the spares, tidied for its containers; or nothing, and the caller
 * makes one. A folder already there (the pod's, from before a restart) is left as it is.
 */
static void spare_take(struct kd_kubelet *k, const struct podrt *p)
{
    struct stat sb;
    if (k->nspare == 0 || lstat(p->dir, &sb) == 0 || errno != ENOENT)
        return;
    /* Tidied before it takes the pod's name: a log is kept only while nothing holds it open,
     * and under spare/ no reader can open it in between. */
    char *from = spare_path(k, k->spare[--k->nspare]);
    const char **names = ctr_names(p);
    if (spare_tidy(k, from, names, p->nc) != 0 || rename(from, p->dir) != 0)
        kd_rm_tree(from); /* the caller makes the pod's folder anew */
    free(names);
    free(from);
}

/* ---- GPUs --------------------------------------------------------------------------- */

/* NVML through dlopen, so the binary runs where there is no driver. */
static int count_gpus(void)
{
    int n = 0;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return 0;
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
    int (*shutdown)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
    unsigned c = 0;
    if (init != NULL && count != NULL && init() == 0) {
        if (count(&c) == 0)
            n = (int)c;
        if (shutdown != NULL)
            shutdown();
    }
    dlclose(h);
    return n > MAX_GPUS ? MAX_GPUS : n;
}

/* ---- node and lease -------------------------------------------------------------------- */

static int64_t mem_total_ki(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    int64_t kb = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "MemTotal:", 9) == 0) {
            kb = strtoll(line + 9, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

/* The Node this kubelet registers (uid and creationTimestamp only for the in-process store). */
static json_t *node_object(struct kd_kubelet *k, const char *uid, const char *created)
{
    char now[40], cpu[32], mem[32], gpus[16], pods[16];
    now3339(now, sizeof(now));
    snprintf(cpu, sizeof(cpu), "%ld", k->ncpus);
    snprintf(mem, sizeof(mem), "%lldKi", (long long)mem_total_ki());
    snprintf(gpus, sizeof(gpus), "%d", k->ngpus);
    snprintf(pods, sizeof(pods), "%d", k->max_pods);
    json_t *res = json_pack("{s:s,s:s,s:s,s:s}", "cpu", cpu, "memory", mem, "pods", pods,
                            "nvidia.com/gpu", gpus);
    json_t *node = json_pack(
        "{s:s,s:s,s:{s:s,s:{s:s,s:s,s:s,s:s,s:s}},s:{},"
        "s:{s:O,s:o,s:[{s:s,s:s,s:s,s:s,s:s,s:s}],s:[{s:s,s:s},{s:s,s:s}],"
        "s:{s:s,s:s,s:s,s:s,s:s,s:s},s:{s:{s:i}}}}",
        "kind", "Node", "apiVersion", "v1", "metadata", "name", k->node, "labels",
        "kubernetes.io/hostname", k->node, "kubernetes.io/os", "linux", "kubernetes.io/arch",
        "amd64", "beta.kubernetes.io/os", "linux", "node.kubernetes.io/instance-type", "kdet-local",
        "spec", "status", "capacity", res, "allocatable", res, "conditions", "type", "Ready",
        "status", "True", "lastHeartbeatTime", now, "lastTransitionTime", k->ready_since, "reason",
        "KubeletReady", "message", "kdet-local kubelet is posting ready status", "addresses",
        "type", "InternalIP", "address", "127.0.0.1", "type", "Hostname", "address", k->node,
        "nodeInfo", "kubeletVersion", "v1.32.0-kdet-local", "operatingSystem", "linux",
        "architecture", "amd64", "containerRuntimeVersion", "kdet-local://process", "osImage",
        "Linux", "kernelVersion", "", "daemonEndpoints", "kubeletEndpoint", "Port",
        k->kubelet_port);
    json_t *md = json_object_get(node, "metadata");
    if (uid != NULL)
        json_object_set_new(md, "uid", json_string(uid));
    if (created != NULL)
        json_object_set_new(md, "creationTimestamp", json_string(created));
    return node;
}

static int register_node(struct kd_kubelet *k)
{
    char now[40], uid[40];
    now3339(now, sizeof(now));
    json_t *cur = kd_store_get(k->st, "/nodes", NULL, k->node);
    const char *cur_uid = cur != NULL ? kd_jstr(json_object_get(cur, "metadata"), "uid") : NULL;
    const char *cur_ts =
        cur != NULL ? kd_jstr(json_object_get(cur, "metadata"), "creationTimestamp") : NULL;
    if (cur_uid != NULL) {
        kd_strlcpy(uid, cur_uid, sizeof(uid));
    } else {
        unsigned char b[16] = {0};
        if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
            b[0] = (unsigned char)getpid();
        snprintf(uid, sizeof(uid),
                 "%02x%02x%02x%02x-%02x%02x-4%x%02x-a%x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6] & 15, b[7], b[8] & 15, b[9], b[10], b[11], b[12],
                 b[13], b[14], b[15]);
    }
    json_t *node = node_object(k, uid, cur_ts != NULL ? cur_ts : now);
    json_object_del(json_object_get(node, "status"), "daemonEndpoints");
    return kd_store_put(k->st, "/nodes", NULL, k->node, node, NULL);
}

/*
 * Agent mode: create the Node when absent, then write its status (capacity,
 * Ready with a fresh heartbeat, daemonEndpoints) through the status
 * subresource, as the kubelet's node status loop does.
 */
static int remote_node(struct kd_kubelet *k, char *err)
{
    int rc = 0;
    struct kd_k8s_gvr gvr = KD_K8S_NODES;
    struct kd_k8s_status st = {0};
    json_t *cur = NULL, *node = node_object(k, NULL, NULL);
    rc = kd_k8s_get(k->kc, &gvr, NULL, k->node, &cur, &st, err);
    if (rc == KD_ENOTFOUND) {
        kd_k8s_status_free(&st);
        rc = kd_k8s_create(k->kc, &gvr, NULL, node, NULL, &st, err);
        if (rc == 0)
            KD_INFO("node created", "node=%s", kd_logq(k->node));
    }
    if (rc != 0)
        goto out;
    json_t *patch = json_pack("{s:O}", "status", json_object_get(node, "status"));
    kd_k8s_status_free(&st);
    rc = kd_k8s_patch(k->kc, &gvr, NULL, k->node, "status", KD_K8S_PATCH_MERGE, patch, NULL, &st,
                      err);
    json_decref(patch);
out:
    kd_k8s_status_free(&st);
    json_decref(cur);
    json_decref(node);
    return rc;
}

/* Agent mode: renew (or create) the node's Lease in kube-node-lease. */
static void remote_lease(struct kd_kubelet *k, const char *micro)
{
    struct kd_k8s_gvr gvr = KD_K8S_LEASES;
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN] = "";
    json_t *patch = json_pack("{s:{s:s,s:i,s:s}}", "spec", "holderIdentity", k->node,
                              "leaseDurationSeconds", 40, "renewTime", micro);
    int rc = kd_k8s_patch(k->kc, &gvr, "kube-node-lease", k->node, NULL, KD_K8S_PATCH_MERGE, patch,
                          NULL, &st, err);
    if (rc == KD_ENOTFOUND) {
        json_t *lease =
            json_pack("{s:s,s:s,s:{s:s,s:s},s:O}", "kind", "Lease", "apiVersion",
                      "coordination.k8s.io/v1", "metadata", "name", k->node, "namespace",
                      "kube-node-lease", "spec", json_object_get(patch, "spec"));
        for (int attempt = 0; attempt < 2 && rc == KD_ENOTFOUND; attempt++) {
            kd_k8s_status_free(&st);
            rc = kd_k8s_create(k->kc, &gvr, "kube-node-lease", lease, NULL, &st, err);
            if (rc == KD_ENOTFOUND) {
                /* The namespace is missing (an API server that does not make it itself). */
                struct kd_k8s_gvr nsg = KD_K8S_NAMESPACES;
                json_t *ns = json_pack("{s:s,s:s,s:{s:s}}", "kind", "Namespace", "apiVersion", "v1",
                                       "metadata", "name", "kube-node-lease");
                struct kd_k8s_status st2 = {0};
                if (kd_k8s_create(k->kc, &nsg, NULL, ns, NULL, &st2, NULL) != 0)
                    KD_WARN("cannot create namespace kube-node-lease", "http=%d", st2.http);
                kd_k8s_status_free(&st2);
                json_decref(ns);
            }
        }
        json_decref(lease);
    }
    if (rc != 0)
        KD_WARN("node lease renewal failed", "node=%s err=%s", kd_logq(k->node), kd_logq(err));
    kd_k8s_status_free(&st);
    json_decref(patch);
}

static void renew_lease(struct kd_kubelet *k)
{
    char now[40];
    kd_time_rfc3339(kd_wall_ms(), 1, now, sizeof(now));
    /* RFC 3339 with microseconds, as MicroTime is written. */
    char micro[48];
    snprintf(micro, sizeof(micro), "%.23s000Z", now);
    if (k->kc != NULL) {
        remote_lease(k, micro);
        return;
    }
    json_t *cur = kd_store_get(k->st, "coordination.k8s.io/leases", "kube-node-lease", k->node);
    json_t *lease;
    if (cur != NULL) {
        lease = json_deep_copy(cur);
        json_object_set_new(json_object_get(lease, "spec"), "renewTime", json_string(micro));
    } else {
        char ts[40];
        now3339(ts, sizeof(ts));
        lease =
            json_pack("{s:s,s:s,s:{s:s,s:s,s:s},s:{s:s,s:i,s:s}}", "kind", "Lease", "apiVersion",
                      "coordination.k8s.io/v1", "metadata", "name", k->node, "namespace",
                      "kube-node-lease", "creationTimestamp", ts, "spec", "holderIdentity", k->node,
                      "leaseDurationSeconds", 40, "renewTime", micro);
    }
    if (kd_store_put(k->st, "coordination.k8s.io/leases", "kube-node-lease", k->node, lease,
                     NULL) != 0)
        KD_WARN("node lease renewal failed", "node=%s", kd_logq(k->node));
}

static void pod_event(struct kd_kubelet *k, const json_t *pod, const char *type, const char *reason,
                      const char *fmt, ...) KD_PRINTF(5, 6);
static void pod_event(struct kd_kubelet *k, const json_t *pod, const char *type, const char *reason,
                      const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (k->kc == NULL) {
        if (kd_events_record(k->st, pod, "Pod", "v1", type, reason, msg, "kubelet", k->node) != 0)
            KD_WARN("event not recorded", "reason=%s", reason);
        return;
    }
    /* Agent mode: one Event per occurrence, named as client-go's recorder names them. */
    const json_t *md = json_object_get(pod, "metadata");
    char now[40], name[320];
    now3339(now, sizeof(now));
    snprintf(name, sizeof(name), "%.253s.%llx", kd_jstr(md, "name") ? kd_jstr(md, "name") : "pod",
             (unsigned long long)kd_wall_ms() * 1000000ull);
    json_t *ev = json_pack(
        "{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:s,s:{s:s,s:s},s:s,s:s,s:i}", "kind",
        "Event", "apiVersion", "v1", "metadata", "name", name, "namespace",
        kd_jstr(md, "namespace") ? kd_jstr(md, "namespace") : "default", "involvedObject", "kind",
        "Pod", "apiVersion", "v1", "namespace",
        kd_jstr(md, "namespace") ? kd_jstr(md, "namespace") : "default", "name",
        kd_jstr(md, "name") ? kd_jstr(md, "name") : "", "uid",
        kd_jstr(md, "uid") ? kd_jstr(md, "uid") : "", "type", type, "reason", reason, "message",
        msg, "source", "component", "kubelet", "host", k->node, "firstTimestamp", now,
        "lastTimestamp", now, "count", 1);
    struct kd_k8s_gvr gvr = KD_K8S_EVENTS;
    struct kd_k8s_status st = {0};
    if (kd_k8s_create(k->kc, &gvr, NULL, ev, NULL, &st, NULL) != 0)
        KD_WARN("event not recorded", "reason=%s http=%d", reason, st.http);
    kd_k8s_status_free(&st);
    json_decref(ev);
}

/* ---- pod runtime --------------------------------------------------------------------------- */

static void ctr_clear(struct ctr *c)
{
    free(c->name);
    free(c->wait_reason);
    free(c->wait_msg);
    free(c->term_reason);
    free(c->term_msg);
    json_decref(c->last);
}

static void set_waiting(struct ctr *c, const char *reason, const char *msg)
{
    free(c->wait_reason);
    free(c->wait_msg);
    c->wait_reason = reason ? kd_xstrdup(reason) : NULL;
    c->wait_msg = msg ? kd_xstrdup(msg) : NULL;
    c->state = C_WAITING;
}

static void release_gpus(struct kd_kubelet *k, struct podrt *p)
{
    for (int i = 0; i < p->ngpus; i++)
        k->gpu_used[p->gpus[i]] = false;
    p->ngpus = 0;
}

static void podrt_free(struct kd_kubelet *k, struct podrt *p)
{
    release_gpus(k, p);
    for (size_t i = 0; i < p->nc; i++)
        ctr_clear(&p->c[i]);
    for (size_t i = 0; i < p->nlinks; i++) {
        unlink(p->links[i]);
        free(p->links[i]);
    }
    free(p->links);
    free(p->c);
    free(p->uid);
    free(p->ns);
    free(p->name);
    free(p->dir);
    json_decref(p->cond_times);
    json_decref(p->sent);
    free(p->shown_sig);
    free(p->shown_rv);
    free(p);
}

static const json_t *prev_status(const json_t *pod, const char *list, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(json_object_get(pod, "status"), list), i, s)
    {
        if (strcmp(kd_jstr(s, "name") ? kd_jstr(s, "name") : "", name) == 0)
            return s;
    }
    return NULL;
}

static bool may_restart(const char *policy, int exit_code)
{
    if (strcmp(policy, "Always") == 0)
        return true;
    if (strcmp(policy, "OnFailure") == 0)
        return exit_code != 0;
    return false;
}

static struct podrt *podrt_new(struct kd_kubelet *k, const json_t *pod)
{
    const json_t *md = json_object_get(pod, "metadata");
    const json_t *spec = json_object_get(pod, "spec");
    struct podrt *p = kd_xcalloc(1, sizeof(*p));
    p->uid = kd_xstrdup(kd_jstr(md, "uid"));
    p->ns = kd_xstrdup(kd_jstr(md, "namespace"));
    p->name = kd_xstrdup(kd_jstr(md, "name"));
    p->dir = kd_xasprintf("%s/pods/%s", k->state_dir, p->uid);
    p->cond_times = json_object();
    const json_t *ic = json_object_get(spec, "initContainers");
    const json_t *cc = json_object_get(spec, "containers");
    p->ninit = json_array_size(ic);
    p->nc = p->ninit + json_array_size(cc);
    p->c = kd_xcalloc(p->nc + 1, sizeof(*p->c));
    for (size_t i = 0; i < p->nc; i++) {
        bool init = i < p->ninit;
        const json_t *c = json_array_get(init ? ic : cc, init ? i : i - p->ninit);
        p->c[i].name = kd_xstrdup(kd_jstr(c, "name") ? kd_jstr(c, "name") : "");
        p->c[i].init = init;
        p->c[i].logs_on_error =
            strcmp(kd_jstr(c, "terminationMessagePolicy") ?: "", "FallbackToLogsOnError") == 0;
        /* Keep counting restarts across a kdet-local restart. */
        const json_t *ps =
            prev_status(pod, init ? "initContainerStatuses" : "containerStatuses", p->c[i].name);
        struct ctr *ct = &p->c[i];
        const char *policy =
            kd_jstr(spec, "restartPolicy") ? kd_jstr(spec, "restartPolicy") : "Always";
        const json_t *pst = json_object_get(ps, "state");
        const json_t *was_term = json_object_get(pst, "terminated");
        bool was_running = json_object_get(pst, "running") != NULL;
        ct->restarts = (int)json_integer_value(json_object_get(ps, "restartCount"));
        ct->backoff_ms = BACKOFF_START_MS;
        set_waiting(ct, init || p->ninit == 0 ? "ContainerCreating" : "PodInitializing", NULL);
        int code =
            was_term != NULL ? (int)json_integer_value(json_object_get(was_term, "exitCode")) : 137;
        if (!init && (was_term != NULL || was_running) && !may_restart(policy, code)) {
            /* kdet-local stopped meanwhile: a container that may not restart stays ended. */
            ct->state = C_TERMINATED;
            ct->exit_code = code;
            ct->term_reason = kd_xstrdup(was_term != NULL && kd_jstr(was_term, "reason")
                                             ? kd_jstr(was_term, "reason")
                                             : "Error");
            if (was_running)
                ct->term_msg = kd_xstrdup("kdet-local stopped while the container was running");
            else if (kd_jstr(was_term, "message") != NULL)
                ct->term_msg = kd_xstrdup(kd_jstr(was_term, "message"));
            const char *sa =
                kd_jstr(was_term != NULL ? was_term : json_object_get(pst, "running"), "startedAt");
            kd_strlcpy(ct->started, sa != NULL ? sa : "", sizeof(ct->started));
            const char *fa = kd_jstr(was_term, "finishedAt");
            if (fa != NULL)
                kd_strlcpy(ct->finished, fa, sizeof(ct->finished));
            else
                now3339(ct->finished, sizeof(ct->finished));
            ct->ever_started = true;
        } else if (was_running) {
            ct->restarts++;
        }
    }
    now3339(p->start_time, sizeof(p->start_time));
    return p;
}

/* ---- API access: the in-process store or, in agent mode, the API server ---------------- */

/* A ConfigMap (cm) or Secret, as a new reference, or NULL when absent. */
static json_t *get_obj(struct kd_kubelet *k, bool cm, const char *ns, const char *name)
{
    json_t *obj = NULL;
    if (k->kc == NULL) {
        obj = kd_store_get(k->st, cm ? "/configmaps" : "/secrets", ns, name);
        return obj != NULL ? json_incref(obj) : NULL;
    }
    struct kd_k8s_gvr gvr = cm ? KD_K8S_CONFIGMAPS : KD_K8S_GVR("", "v1", "secrets");
    struct kd_k8s_status st = {0};
    if (name[0] == '\0' || kd_k8s_get(k->kc, &gvr, ns, name, &obj, &st, NULL) != 0)
        obj = NULL;
    kd_k8s_status_free(&st);
    return obj;
}

/* ---- volumes ------------------------------------------------------------------------------- */

static unsigned char *b64dec(const char *s, size_t *len)
{
    size_t n = strlen(s);
    unsigned char *out = kd_xmalloc(n + 4);
    int r = n > 0 ? EVP_DecodeBlock(out, (const unsigned char *)s, (int)n) : 0;
    if (r < 0) {
        free(out);
        return NULL;
    }
    /* EVP_DecodeBlock counts the padding bytes. */
    size_t pad = 0;
    if (n >= 1 && s[n - 1] == '=')
        pad++;
    if (n >= 2 && s[n - 2] == '=')
        pad++;
    *len = (size_t)r - pad;
    return out;
}

/* Write a ConfigMap's or Secret's keys (or the listed items) as files into dir. */
static int project_keys(const char *dir, const json_t *src, bool secret, const json_t *items,
                        char *err)
{
    int rc = kd_mkdir_p(dir, 0755);
    if (rc != 0)
        return kd_seterr(err, rc, "cannot create %s: %s", dir, strerror(-rc));
    const json_t *data = json_object_get(src, "data");
    const json_t *bin = json_object_get(src, "binaryData");
    const char *key;
    json_t *v;
    json_t *all = json_object();
    json_object_foreach((json_t *)data, key, v) json_object_set(all, key, v);
    json_object_foreach((json_t *)bin, key, v) json_object_set(all, key, v);
    json_object_foreach(all, key, v)
    {
        const char *path = key;
        if (json_array_size(items) > 0) {
            path = NULL;
            size_t i;
            json_t *it;
            json_array_foreach(items, i, it)
            {
                if (strcmp(kd_jstr(it, "key") ? kd_jstr(it, "key") : "", key) == 0)
                    path = kd_jstr(it, "path");
            }
            if (path == NULL)
                continue;
        }
        if (strstr(path, "..") != NULL || path[0] == '/')
            continue;
        char *file = kd_xasprintf("%s/%s", dir, path);
        char *slash = strrchr(file, '/');
        *slash = '\0';
        kd_mkdir_p(file, 0755);
        *slash = '/';
        const char *s = json_string_value(v);
        bool binary = secret || json_object_get(bin, key) == v;
        if (s != NULL && binary) {
            size_t len = 0;
            unsigned char *raw = b64dec(s, &len);
            if (raw != NULL)
                rc = write_file(file, raw, len, secret ? 0600 : 0644);
            free(raw);
        } else if (s != NULL) {
            rc = write_file(file, s, strlen(s), 0644);
        }
        free(file);
        if (rc != 0)
            break;
    }
    json_decref(all);
    return rc;
}

/* Prepare every volume (lock held for reads of ConfigMaps and Secrets). 0 or the reason in err. */
static int prepare_volumes(struct kd_kubelet *k, struct podrt *p, const json_t *pod, char *err)
{
    spare_take(k, p);
    int rc = kd_mkdir_p(p->dir, 0755);
    if (rc != 0)
        return kd_seterr(err, rc, "cannot create %s: %s", p->dir, strerror(-rc));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "volumes"), i, v)
    {
        const char *name = kd_jstr(v, "name");
        if (name == NULL || strchr(name, '/') != NULL)
            continue;
        char *dir = kd_xasprintf("%s/volumes/%s", p->dir, name);
        const json_t *cm = json_object_get(v, "configMap");
        const json_t *sec = json_object_get(v, "secret");
        const json_t *hp = json_object_get(v, "hostPath");
        if (json_object_get(v, "emptyDir") != NULL) {
            rc = kd_mkdir_p(dir, 0755);
            if (rc != 0)
                kd_seterr(err, rc, "volume %s: cannot create %s", name, dir);
        } else if (cm != NULL || sec != NULL) {
            const char *src = cm != NULL ? kd_jstr(cm, "name") : kd_jstr(sec, "secretName");
            bool optional = json_is_true(json_object_get(cm != NULL ? cm : sec, "optional"));
            json_t *obj = get_obj(k, cm != NULL, p->ns, src != NULL ? src : "");
            if (obj == NULL && !optional) {
                rc = kd_seterr(err, KD_ENOTFOUND, "%s \"%s\" not found",
                               cm != NULL ? "configmap" : "secret", src ? src : "");
            } else {
                rc = project_keys(dir, obj, sec != NULL,
                                  json_object_get(cm != NULL ? cm : sec, "items"), err);
            }
            json_decref(obj);
        } else if (hp != NULL) {
            const char *type = kd_jstr(hp, "type");
            if (type != NULL && strcmp(type, "DirectoryOrCreate") == 0)
                kd_mkdir_p(kd_jstr(hp, "path") ? kd_jstr(hp, "path") : "", 0755);
            free(dir);
            dir = NULL;
            rc = kd_mkdir_p(p->dir, 0755);
        } else {
            rc = kd_mkdir_p(dir, 0755); /* other kinds: an empty directory */
        }
        free(dir);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The directory a volumeMount refers to. Caller frees. */
static char *volume_source(const struct podrt *p, const json_t *pod, const char *vname)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "volumes"), i, v)
    {
        if (strcmp(kd_jstr(v, "name") ? kd_jstr(v, "name") : "", vname) != 0)
            continue;
        const json_t *hp = json_object_get(v, "hostPath");
        if (hp != NULL)
            return kd_xstrdup(kd_jstr(hp, "path") ? kd_jstr(hp, "path") : "/");
        return kd_xasprintf("%s/volumes/%s", p->dir, vname);
    }
    return NULL;
}

/*
 * Without a mount namespace, a volume appears at its mountPath as a
 * symlink: made when the path is free, replaced when it is a symlink into
 * kdet-local's own state dir. The service-account token mount is the
 * exception: its fixed path would be shared by every pod on the machine, so
 * it is left where it is and the container finds it through KUBECONFIG
 * (sa_kubeconfig).
 */
static int mount_volumes(struct kd_kubelet *k, struct podrt *p, const json_t *pod, const json_t *c,
                         char *err)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(c, "volumeMounts"), i, m)
    {
        const char *mp = kd_jstr(m, "mountPath");
        const char *vn = kd_jstr(m, "name");
        if (mp == NULL || vn == NULL || strcmp(mp, SA_MOUNT) == 0)
            continue;
        char *src = volume_source(p, pod, vn);
        if (src == NULL)
            return kd_seterr(err, KD_EINVAL, "volumeMounts: volume \"%s\" is not in spec.volumes",
                             vn);
        const char *sub = kd_jstr(m, "subPath");
        if (sub != NULL && sub[0] != '\0') {
            char *s2 = kd_xasprintf("%s/%s", src, sub);
            free(src);
            src = s2;
        }
        if (strcmp(src, mp) == 0) { /* a hostPath at its own path: already there */
            free(src);
            continue;
        }
        char link[PATH_MAX];
        ssize_t ln = readlink(mp, link, sizeof(link) - 1);
        struct stat sb;
        if (ln >= 0) {
            link[ln] = '\0';
            if (strcmp(link, src) == 0) {
                free(src);
                continue;
            }
            if (!kd_str_has_prefix(link, k->state_dir)) {
                int rc = kd_seterr(err, KD_EEXIST,
                                   "mountPath %s is a symlink on this machine; kdet-local mounts "
                                   "volumes as symlinks at their mountPath",
                                   mp);
                free(src);
                return rc;
            }
            unlink(mp);
        } else if (lstat(mp, &sb) == 0) {
            int rc = kd_seterr(err, KD_EEXIST,
                               "mountPath %s exists on this machine; kdet-local mounts volumes as "
                               "symlinks at their mountPath, so it must be a free path",
                               mp);
            free(src);
            return rc;
        }
        char parent[PATH_MAX];
        kd_strlcpy(parent, mp, sizeof(parent));
        char *slash = strrchr(parent, '/');
        if (slash != NULL && slash != parent) {
            *slash = '\0';
            kd_mkdir_p(parent, 0755);
        }
        if (symlink(src, mp) < 0) {
            int rc = kd_seterr(err, -errno, "mountPath %s: cannot create a symlink: %s", mp,
                               strerror(errno));
            free(src);
            return rc;
        }
        p->links = kd_xrealloc(p->links, (p->nlinks + 1) * sizeof(char *));
        p->links[p->nlinks++] = kd_xstrdup(mp);
        free(src);
    }
    return 0;
}

/* ---- environment --------------------------------------------------------------------------- */

struct env {
    char *v[MAX_ENV + 1];
    size_t n;
};

static void env_set(struct env *e, const char *name, const char *value)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->v[i], name, nl) == 0 && e->v[i][nl] == '=') {
            free(e->v[i]);
            e->v[i] = kd_xasprintf("%s=%s", name, value);
            return;
        }
    }
    if (e->n < MAX_ENV)
        e->v[e->n++] = kd_xasprintf("%s=%s", name, value);
}

static const char *env_get(const struct env *e, const char *name, size_t nl)
{
    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->v[i], name, nl) == 0 && e->v[i][nl] == '=')
            return e->v[i] + nl + 1;
    }
    return NULL;
}

static void env_free(struct env *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    e->n = 0;
}

/* $(VAR) expansion as the kubelet does it: $$ escapes, unknown references stay as written. */
static char *expand(const struct env *e, const char *s)
{
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    int rc = 0;
    for (const char *p = s; *p != '\0' && rc == 0; p++) {
        if (p[0] == '$' && p[1] == '$') {
            rc = kd_buf_putc(&b, '$');
            p++;
        } else if (p[0] == '$' && p[1] == '(') {
            const char *close = strchr(p + 2, ')');
            const char *val = close != NULL ? env_get(e, p + 2, (size_t)(close - p - 2)) : NULL;
            if (val != NULL) {
                rc = kd_buf_puts(&b, val);
                p = close;
            } else {
                rc = kd_buf_putc(&b, *p);
            }
        } else {
            rc = kd_buf_putc(&b, *p);
        }
    }
    return kd_buf_steal(&b);
}

static const char *field_ref(const json_t *pod, const char *path, char *buf, size_t len)
{
    const json_t *md = json_object_get(pod, "metadata");
    if (strcmp(path, "metadata.name") == 0)
        return kd_jstr(md, "name");
    if (strcmp(path, "metadata.namespace") == 0)
        return kd_jstr(md, "namespace");
    if (strcmp(path, "metadata.uid") == 0)
        return kd_jstr(md, "uid");
    if (strcmp(path, "spec.nodeName") == 0)
        return kd_jstr(json_object_get(pod, "spec"), "nodeName");
    if (strcmp(path, "spec.serviceAccountName") == 0)
        return kd_jstr(json_object_get(pod, "spec"), "serviceAccountName");
    if (strcmp(path, "status.podIP") == 0 || strcmp(path, "status.hostIP") == 0 ||
        strcmp(path, "status.podIPs") == 0 || strcmp(path, "status.hostIPs") == 0)
        return "127.0.0.1";
    const char *which = kd_str_has_prefix(path, "metadata.labels['")        ? "labels"
                        : kd_str_has_prefix(path, "metadata.annotations['") ? "annotations"
                                                                            : NULL;
    if (which != NULL) {
        const char *start = strchr(path, '\'') + 1;
        const char *end = strchr(start, '\'');
        if (end == NULL || (size_t)(end - start) >= len)
            return NULL;
        memcpy(buf, start, (size_t)(end - start));
        buf[end - start] = '\0';
        return kd_jstr(json_object_get(md, which), buf);
    }
    return NULL;
}

/* The key of a ConfigMap (data or binaryData) or Secret (decoded). Caller frees; NULL if absent. */
static char *source_key(struct kd_kubelet *k, const char *ns, bool secret, const char *name,
                        const char *key)
{
    char *out = NULL;
    json_t *obj = get_obj(k, !secret, ns, name);
    const char *v = kd_jstr(json_object_get(obj, "data"), key);
    if (v == NULL || !secret) {
        out = v != NULL ? kd_xstrdup(v) : NULL;
        goto out;
    }
    size_t len = 0;
    unsigned char *raw = b64dec(v, &len);
    if (raw != NULL)
        raw[len] = '\0';
    out = (char *)raw;
out:
    json_decref(obj);
    return out;
}

/*
 * Agent mode: a kubeconfig in the pod's dir for a container that mounts a
 * service-account token, naming the API server, the token file and its CA
 * (the projected Secret's files). NULL when it mounts none. Caller frees.
 */
static char *sa_kubeconfig(const struct kd_kubelet *k, const struct podrt *p, const json_t *pod,
                           const json_t *c)
{
    if (k->api_server == NULL)
        return NULL;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(c, "volumeMounts"), i, m)
    {
        const char *mp = kd_jstr(m, "mountPath");
        const char *vn = kd_jstr(m, "name");
        if (mp == NULL || vn == NULL || strcmp(mp, SA_MOUNT) != 0)
            continue;
        char *src = volume_source(p, pod, vn);
        if (src == NULL)
            return NULL;
        char *path = kd_xasprintf("%s/serviceaccount.kubeconfig", p->dir);
        char *text =
            kd_xasprintf("apiVersion: v1\n"
                         "kind: Config\n"
                         "clusters:\n"
                         "- name: api\n"
                         "  cluster: {server: \"%s\", certificate-authority: \"%s/ca.crt\"}\n"
                         "users:\n"
                         "- name: sa\n"
                         "  user: {tokenFile: \"%s/token\"}\n"
                         "contexts:\n"
                         "- name: sa\n"
                         "  context: {cluster: api, user: sa, namespace: \"%s\"}\n"
                         "current-context: sa\n",
                         k->api_server, src, src, p->ns);
        int rc = write_file(path, text, strlen(text), 0600);
        free(text);
        free(src);
        if (rc != 0) {
            free(path);
            return NULL;
        }
        return path;
    }
    return NULL;
}

/* Build the environment of container c (lock held). 0, or the reason in err. */
static int build_env(struct kd_kubelet *k, struct podrt *p, const json_t *pod, const json_t *c,
                     struct env *e, char *err)
{
    static const char *const keep[] = {
        "PATH", "HOME", "LANG", "LC_ALL", "USER", "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH", NULL};
    for (const char *const *kv = keep; *kv != NULL; kv++) {
        const char *v = getenv(*kv);
        if (v != NULL)
            env_set(e, *kv, v);
    }
    char port[16];
    snprintf(port, sizeof(port), "%d", k->api_port);
    env_set(e, "HOSTNAME", p->name);
    env_set(e, "KUBERNETES_SERVICE_HOST", "127.0.0.1");
    env_set(e, "KUBERNETES_SERVICE_PORT", port);
    /* A process cannot see a token at the usual path: clients find the API through this. */
    char *sakc = sa_kubeconfig(k, p, pod, c);
    if (sakc != NULL)
        env_set(e, "KUBECONFIG", sakc);
    else if (k->kubeconfig != NULL)
        env_set(e, "KUBECONFIG", k->kubeconfig);
    free(sakc);
    char gpus[MAX_GPUS * 4 + 1] = "";
    for (int i = 0; i < p->ngpus; i++) {
        size_t l = strlen(gpus);
        snprintf(gpus + l, sizeof(gpus) - l, "%s%d", i ? "," : "", p->gpus[i]);
    }
    /* A pod sees only its own GPUs (none when it asked for none). */
    env_set(e, "CUDA_VISIBLE_DEVICES", gpus);
    env_set(e, "NVIDIA_VISIBLE_DEVICES", p->ngpus > 0 ? gpus : "void");
    size_t i;
    json_t *ef;
    json_array_foreach(json_object_get(c, "envFrom"), i, ef)
    {
        const json_t *cmr = json_object_get(ef, "configMapRef");
        const json_t *sr = json_object_get(ef, "secretRef");
        const json_t *ref = cmr != NULL ? cmr : sr;
        const char *prefix = kd_jstr(ef, "prefix") ? kd_jstr(ef, "prefix") : "";
        json_t *obj =
            get_obj(k, cmr != NULL, p->ns, kd_jstr(ref, "name") ? kd_jstr(ref, "name") : "");
        if (obj == NULL) {
            if (json_is_true(json_object_get(ref, "optional")))
                continue;
            return kd_seterr(err, KD_ENOTFOUND, "%s \"%s\" not found",
                             cmr != NULL ? "configmap" : "secret", kd_jstr(ref, "name"));
        }
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(obj, "data"), key, v)
        {
            char *name = kd_xasprintf("%s%s", prefix, key);
            if (cmr != NULL) {
                env_set(e, name, json_string_value(v) ? json_string_value(v) : "");
            } else {
                char *val = source_key(k, p->ns, true, kd_jstr(ref, "name"), key);
                env_set(e, name, val ? val : "");
                free(val);
            }
            free(name);
        }
        json_decref(obj);
    }
    json_t *ev;
    json_array_foreach(json_object_get(c, "env"), i, ev)
    {
        const char *name = kd_jstr(ev, "name");
        if (name == NULL)
            continue;
        const json_t *vf = json_object_get(ev, "valueFrom");
        if (vf == NULL) {
            char *val = expand(e, kd_jstr(ev, "value") ? kd_jstr(ev, "value") : "");
            env_set(e, name, val);
            free(val);
            continue;
        }
        const json_t *fr = json_object_get(vf, "fieldRef");
        const json_t *cmk = json_object_get(vf, "configMapKeyRef");
        const json_t *sk = json_object_get(vf, "secretKeyRef");
        if (fr != NULL) {
            char buf[256];
            const char *val = field_ref(
                pod, kd_jstr(fr, "fieldPath") ? kd_jstr(fr, "fieldPath") : "", buf, sizeof(buf));
            env_set(e, name, val ? val : "");
        } else if (cmk != NULL || sk != NULL) {
            const json_t *ref = cmk != NULL ? cmk : sk;
            char *val =
                source_key(k, p->ns, sk != NULL, kd_jstr(ref, "name") ? kd_jstr(ref, "name") : "",
                           kd_jstr(ref, "key") ? kd_jstr(ref, "key") : "");
            if (val == NULL && !json_is_true(json_object_get(ref, "optional")))
                return kd_seterr(err, KD_ENOTFOUND, "couldn't find key %s in %s %s/%s",
                                 kd_jstr(ref, "key"), sk != NULL ? "Secret" : "ConfigMap", p->ns,
                                 kd_jstr(ref, "name"));
            if (val != NULL)
                env_set(e, name, val);
            free(val);
        }
    }
    return 0;
}

/* ---- running containers --------------------------------------------------------------------- */

/* A process's start time in clock ticks since boot (/proc/PID/stat field 22), or 0. */
static unsigned long long proc_starttime(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long start = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    /* Fields after the command: state is field 3, starttime field 22. */
    for (int field = 2; p != NULL && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p != NULL)
        start = strtoull(p + 1, NULL, 10);
    return start;
}

/*
 * Remember each container's process group with its leader's start time, so
 * that a later run kills only these processes (never a reused pid).
 */
static void save_pgid(struct podrt *p, pid_t pid)
{
    char *path = kd_xasprintf("%s/pids", p->dir);
    FILE *f = fopen(path, "a");
    if (f != NULL) {
        fprintf(f, "%d %llu\n", (int)pid, proc_starttime(pid));
        fclose(f);
    }
    free(path);
}

/*
 * fork + exec for a container that runs as another user (runAsUser,
 * runAsGroup): posix_spawn cannot change credentials. Between fork and exec
 * the child makes only async-signal-safe calls and raw system calls (glibc's
 * setuid() would signal the parent's threads, which the child does not
 * have), and a close-on-exec pipe carries what failed back. The same set-up
 * as the posix_spawn path: stdin /dev/null, stdout and stderr to logpath,
 * own process group, empty signal mask, default SIGPIPE/SIGTERM/SIGINT.
 * Returns 0 and *pid, or an errno with the failing step in err.
 */
static int spawn_as(pid_t *pid_out, char **argv, char **envp, const char *logpath, const char *wd,
                    const struct kd_runas *ra, char *err, size_t errlen)
{
    static const char *const steps[] = {"open", "chdir", "setgroups", "setgid", "setuid", "exec"};
    int pfd[2] = {-1, -1}, rc = 0;
    struct {
        int step, err;
    } msg = {0, 0};
    sigset_t all, old;
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return errno;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &dfl, NULL);
        sigaction(SIGTERM, &dfl, NULL);
        sigaction(SIGINT, &dfl, NULL);
        setsid(); /* a session of its own: proctree.h finds its workers by it */
        int in = open("/dev/null", O_RDONLY);
        int out = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
            msg.step = 0;
        } else if ((in > 2 && close(in) != 0) || (out > 2 && close(out) != 0) || chdir(wd) < 0) {
            msg.step = 1;
        } else if (syscall(SYS_setgroups, ra->ngroups, ra->groups) < 0) {
            msg.step = 2;
        } else if (syscall(SYS_setresgid, ra->gid, ra->gid, ra->gid) < 0) {
            msg.step = 3;
        } else if (syscall(SYS_setresuid, ra->uid, ra->uid, ra->uid) < 0) {
            msg.step = 4;
        } else {
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            execvpe(argv[0], argv, envp);
            msg.step = 5;
        }
        msg.err = errno;
        ssize_t w = write(pfd[1], &msg, sizeof(msg));
        (void)w;
        _exit(127);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(pfd[1]);
    if (pid < 0) {
        rc = fork_errno;
        snprintf(err, errlen, "fork: %s", strerror(rc));
        goto out;
    }
    ssize_t n;
    do
        n = read(pfd[0], &msg, sizeof(msg));
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(msg)) {
        int st;
        waitpid(pid, &st, 0);
        rc = msg.err != 0 ? msg.err : EIO;
        if (msg.step == 5)
            snprintf(err, errlen, "exec: \"%s\": %s", argv[0],
                     rc == ENOENT ? "executable file not found in $PATH" : strerror(rc));
        else
            snprintf(err, errlen, "cannot run as uid %u gid %u: %s: %s", (unsigned)ra->uid,
                     (unsigned)ra->gid, steps[msg.step], strerror(rc));
        goto out;
    }
    *pid_out = pid;
out:
    close(pfd[0]);
    return rc;
}

/* Start container i (lock held). On failure the container is terminated with StartError. */
static void start_container(struct kd_kubelet *k, struct podrt *p, const json_t *pod, size_t i)
{
    struct ctr *c = &p->c[i];
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *cs =
        json_array_get(json_object_get(spec, c->init ? "initContainers" : "containers"),
                       c->init ? i : i - p->ninit);
    char err[KD_ERRLEN] = "";
    struct env e = {.n = 0};
    char **argv = NULL;
    size_t argc = 0;
    char *logdir = NULL, *logpath = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_init = false, attr_init = false;
    logpath = kd_kubelet_log_path(k->state_dir, p->uid, c->name, c->restarts);
    if (logpath == NULL)
        snprintf(err, sizeof(err),
                 "container name \"%.200s\" is not a lowercase RFC 1123 label: it would name "
                 "a file outside the pod's directory",
                 c->name != NULL ? c->name : "");
    struct kd_runas ra;
    if (logpath == NULL || build_env(k, p, pod, cs, &e, err) != 0 ||
        mount_volumes(k, p, pod, cs, err) != 0 ||
        kd_runas_decide(pod, cs, geteuid(), getegid(), &ra, err) != 0) {
        if (c->wait_reason == NULL || strcmp(c->wait_reason, "CreateContainerConfigError") != 0)
            pod_event(k, pod, "Warning", "Failed", "Error: %s", err);
        set_waiting(c, "CreateContainerConfigError", err);
        c->next_start_ms = kd_mono_ms() + 1000;
        goto out;
    }
    const json_t *cmd = json_object_get(cs, "command");
    const json_t *args = json_object_get(cs, "args");
    argv = kd_xcalloc(json_array_size(cmd) + json_array_size(args) + 1, sizeof(char *));
    size_t j;
    json_t *a;
    json_array_foreach(cmd, j, a) argv[argc++] = expand(&e, json_string_value(a) ?: "");
    json_array_foreach(args, j, a) argv[argc++] = expand(&e, json_string_value(a) ?: "");
    logdir = kd_xasprintf("%s/%s", p->dir, c->name);
    kd_mkdir_p(logdir, 0755);
    now3339(c->started, sizeof(c->started));
    /* With no command, args run as the command: an image with no ENTRYPOINT does that. */
    if (json_array_size(cmd) == 0 && json_array_size(args) == 0) {
        snprintf(err, sizeof(err),
                 "kdet-local runs containers as local processes and ignores the image (%s): "
                 "spec.%s[%zu].command (or args) is required",
                 kd_jstr(cs, "image") ? kd_jstr(cs, "image") : "none",
                 c->init ? "initContainers" : "containers", c->init ? i : i - p->ninit);
        goto fail;
    }
    const char *wd = kd_jstr(cs, "workingDir");
    if (wd == NULL || wd[0] == '\0')
        wd = p->dir;
    else
        kd_mkdir_p(wd, 0755);
    pid_t pid;
    if (ra.change) {
        if (spawn_as(&pid, argv, e.v, logpath, wd, &ra, err, sizeof(err)) != 0)
            goto fail;
    } else {
        posix_spawn_file_actions_init(&fa);
        fa_init = true;
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        posix_spawn_file_actions_addchdir_np(&fa, wd);
        posix_spawnattr_init(&attr);
        attr_init = true;
        sigset_t none, def;
        sigemptyset(&none);
        sigemptyset(&def);
        sigaddset(&def, SIGPIPE);
        sigaddset(&def, SIGTERM);
        sigaddset(&def, SIGINT);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &def);
        posix_spawnattr_setpgroup(&attr, 0);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF);
        int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, e.v);
        if (rc != 0) {
            snprintf(err, sizeof(err), "exec: \"%s\": %s", argv[0],
                     rc == ENOENT ? "executable file not found in $PATH" : strerror(rc));
            goto fail;
        }
    }
    save_pgid(p, pid);
    c->pid = pid;
    c->state = C_RUNNING;
    c->ever_started = true;
    pod_event(k, pod, "Normal", "Started", "Started container %s", c->name);
    KD_INFO("container started", "namespace=%s pod=%s container=%s pid=%d restarts=%d",
            kd_logq(p->ns), kd_logq(p->name), kd_logq(c->name), (int)pid, c->restarts);
    goto out;
fail:
    /* As containerd reports a command that cannot start. */
    c->state = C_TERMINATED;
    c->exit_code = 128;
    free(c->term_reason);
    free(c->term_msg);
    c->term_reason = kd_xstrdup("StartError");
    c->term_msg = kd_xstrdup(err);
    now3339(c->finished, sizeof(c->finished));
    if (logpath != NULL) {
        char *line = kd_xasprintf("%s\n", err);
        int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ssize_t w = write(fd, line, strlen(line));
            (void)w;
            close(fd);
        }
        free(line);
    }
    pod_event(k, pod, "Warning", "Failed", "Error: %s", err);
    KD_WARN("container could not start", "namespace=%s pod=%s container=%s err=%s", kd_logq(p->ns),
            kd_logq(p->name), kd_logq(c->name), kd_logq(err));
out:
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_init)
        posix_spawnattr_destroy(&attr);
    for (size_t x = 0; x < argc; x++)
        free(argv[x]);
    free(argv);
    free(logdir);
    free(logpath);
    env_free(&e);
}

/*
 * A container that ended: its exit code and reason, and, as the kubelet does for
 * terminationMessagePolicy FallbackToLogsOnError, a failure's message from the last lines of its
 * log (a process has no termination-message file, so the file is always empty here).
 */
static void on_exit_status(struct kd_kubelet *k, struct podrt *p, struct ctr *c, int status)
{
    c->pid = 0;
    c->state = C_TERMINATED;
    now3339(c->finished, sizeof(c->finished));
    free(c->term_reason);
    free(c->term_msg);
    c->term_msg = NULL;
    if (WIFEXITED(status)) {
        c->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        c->exit_code = 128 + WTERMSIG(status);
    } else {
        c->exit_code = 1;
    }
    c->term_reason = kd_xstrdup(c->exit_code == 0 ? "Completed" : "Error");
    if (c->exit_code != 0 && c->logs_on_error) {
        char *path = kd_kubelet_log_path(k->state_dir, p->uid, c->name, c->restarts);
        if (path != NULL)
            c->term_msg = kd_logstream_last(path, KD_LOGSTREAM_MSG_LINES, KD_LOGSTREAM_MSG_BYTES);
        free(path);
    }
    KD_INFO("container exited", "namespace=%s pod=%s container=%s exit_code=%d", kd_logq(p->ns),
            kd_logq(p->name), kd_logq(c->name), c->exit_code);
}

static void reap(struct kd_kubelet *k)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        struct podrt *p, *tmp;
        /* A runtime with a process is live (set_live), so only those are searched. */
        HASH_ITER(hl, k->live, p, tmp)
        {
            for (size_t i = 0; i < p->nc; i++) {
                if (p->c[i].pid == pid) {
                    on_exit_status(k, p, &p->c[i], status);
                    /* Its session may outlive it (workers in groups of their own): end the
                     * stragglers. */
                    kd_proc_kill_family(pid);
                }
            }
        }
    }
}

/*
 * SIGTERM goes to each container's first process (as a runtime signals PID 1), SIGKILL to all
 * of its processes (its session and their descendants, as a runtime's cgroup holds them).
 */
static void signal_all(struct podrt *p, int sig)
{
    for (size_t i = 0; i < p->nc; i++) {
        if (p->c[i].pid <= 0)
            continue;
        if (sig == SIGKILL)
            kd_proc_kill_family(p->c[i].pid);
        else
            kill(p->c[i].pid, sig);
    }
}

static bool any_running(const struct podrt *p)
{
    for (size_t i = 0; i < p->nc; i++) {
        if (p->c[i].pid > 0)
            return true;
    }
    return false;
}

/* Schedule a restart of a terminated container with the kubelet's back-off. */
static void plan_restart(struct kd_kubelet *k, const struct podrt *p, const json_t *pod,
                         struct ctr *c)
{
    pod_event(k, pod, "Warning", "BackOff",
              "Back-off restarting failed container %s in pod %s_%s(%s)", c->name, p->name, p->ns,
              p->uid);
    json_decref(c->last);
    c->last = json_pack("{s:{s:i,s:s,s:s,s:s}}", "terminated", "exitCode", c->exit_code, "reason",
                        c->term_reason ? c->term_reason : "Error", "startedAt", c->started,
                        "finishedAt", c->finished);
    if (c->term_msg != NULL)
        json_object_set_new(json_object_get(c->last, "terminated"), "message",
                            json_string(c->term_msg));
    c->restarts++;
    char msg[200];
    snprintf(msg, sizeof(msg), "back-off %llds restarting failed container=%s",
             (long long)(c->backoff_ms / 1000), c->name);
    set_waiting(c, "CrashLoopBackOff", msg);
    c->next_start_ms = kd_mono_ms() + c->backoff_ms;
    c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
}

/* Advance one pod (lock held). */
static void drive(struct kd_kubelet *k, struct podrt *p, const json_t *pod)
{
    const json_t *spec = json_object_get(pod, "spec");
    const char *policy = kd_jstr(spec, "restartPolicy") ? kd_jstr(spec, "restartPolicy") : "Always";
    int64_t now = kd_mono_ms();
    const json_t *md = json_object_get(pod, "metadata");
    if (json_object_get(md, "deletionTimestamp") != NULL) {
        if (p->term_sent_ms == 0) {
            p->term_sent_ms = now;
            json_int_t grace =
                json_integer_value(json_object_get(md, "deletionGracePeriodSeconds"));
            p->kill_at_ms = now + grace * 1000;
            signal_all(p, SIGTERM);
            for (size_t i = 0; i < p->nc; i++) {
                if (p->c[i].pid > 0)
                    pod_event(k, pod, "Normal", "Killing", "Stopping container %s", p->c[i].name);
            }
            KD_INFO("pod terminating", "namespace=%s pod=%s grace_s=%lld", kd_logq(p->ns),
                    kd_logq(p->name), (long long)grace);
        } else if (now >= p->kill_at_ms) {
            signal_all(p, SIGKILL);
        }
        p->done = true;
        return;
    }
    if (p->done)
        return;
    if (!p->prepared) {
        char err[KD_ERRLEN] = "";
        /* GPUs: whole devices, never shared. */
        struct kd_res req;
        kd_sched_pod_requests(pod, &req);
        int want = (int)(req.gpu / 1000);
        if (want > 0 && p->ngpus == 0) {
            for (int g = 0; g < k->ngpus && p->ngpus < want; g++) {
                if (!k->gpu_used[g]) {
                    k->gpu_used[g] = true;
                    p->gpus[p->ngpus++] = g;
                }
            }
            if (p->ngpus < want) {
                for (int g = 0; g < p->ngpus; g++)
                    k->gpu_used[p->gpus[g]] = false;
                p->ngpus = 0;
                for (size_t i = 0; i < p->nc; i++)
                    set_waiting(&p->c[i], "ContainerCreating", "waiting for free GPUs");
                return;
            }
        }
        if (prepare_volumes(k, p, pod, err) != 0) {
            for (size_t i = 0; i < p->nc; i++)
                set_waiting(&p->c[i], "ContainerCreating", err);
            return;
        }
        p->prepared = true;
    }
    /* Init containers, in order, each to success. */
    for (size_t i = 0; i < p->ninit; i++) {
        struct ctr *c = &p->c[i];
        if (c->state == C_TERMINATED && c->exit_code == 0)
            continue;
        if (c->state == C_RUNNING)
            return;
        if (c->state == C_TERMINATED) {
            if (strcmp(policy, "Never") == 0) {
                p->done = true;
                return;
            }
            plan_restart(k, p, pod, c);
        }
        if (c->state == C_WAITING && now >= c->next_start_ms)
            start_container(k, p, pod, i);
        return;
    }
    for (size_t i = p->ninit; i < p->nc; i++) {
        struct ctr *c = &p->c[i];
        if (c->state == C_WAITING && c->wait_reason != NULL &&
            strcmp(c->wait_reason, "PodInitializing") == 0)
            set_waiting(c, "ContainerCreating", NULL);
        if (c->state == C_TERMINATED && may_restart(policy, c->exit_code))
            plan_restart(k, p, pod, c);
        if (c->state == C_WAITING && now >= c->next_start_ms)
            start_container(k, p, pod, i);
    }
    bool all_done = p->nc > p->ninit;
    for (size_t i = p->ninit; i < p->nc; i++)
        all_done = all_done && p->c[i].state == C_TERMINATED;
    if (all_done)
        p->done = true;
}

/* ---- status ------------------------------------------------------------------------------------
 */

static json_t *ctr_status(const struct podrt *p, const struct ctr *c, const json_t *cs)
{
    json_t *state;
    if (c->state == C_RUNNING) {
        state = json_pack("{s:{s:s}}", "running", "startedAt", c->started);
    } else if (c->state == C_TERMINATED) {
        state = json_pack("{s:{s:i,s:s,s:s,s:s,s:s}}", "terminated", "exitCode", c->exit_code,
                          "reason", c->term_reason ? c->term_reason : "Error", "startedAt",
                          c->started, "finishedAt", c->finished, "containerID", "");
        char cid[64];
        snprintf(cid, sizeof(cid), "kdet-local://%s-%s-%d", p->uid, c->name, c->restarts);
        json_object_set_new(json_object_get(state, "terminated"), "containerID", json_string(cid));
        if (c->term_msg != NULL)
            json_object_set_new(json_object_get(state, "terminated"), "message",
                                json_string(c->term_msg));
    } else {
        state = json_pack("{s:{}}", "waiting");
        if (c->wait_reason != NULL)
            json_object_set_new(json_object_get(state, "waiting"), "reason",
                                json_string(c->wait_reason));
        if (c->wait_msg != NULL)
            json_object_set_new(json_object_get(state, "waiting"), "message",
                                json_string(c->wait_msg));
    }
    const char *image = kd_jstr(cs, "image") ? kd_jstr(cs, "image") : "";
    json_t *s = json_pack("{s:s,s:o,s:o,s:b,s:i,s:s,s:s,s:b}", "name", c->name, "state", state,
                          "lastState", c->last != NULL ? json_incref(c->last) : json_object(),
                          "ready", c->state == C_RUNNING && !c->init, "restartCount", c->restarts,
                          "image", image, "imageID", "", "started", c->state == C_RUNNING);
    if (c->ever_started) {
        char cid[64];
        snprintf(cid, sizeof(cid), "kdet-local://%s-%s-%d", p->uid, c->name, c->restarts);
        json_object_set_new(s, "containerID", json_string(cid));
    }
    return s;
}

static json_t *condition(struct podrt *p, const char *type, bool ok, const char *reason,
                         const char *msg)
{
    const char *status = ok ? "True" : "False";
    json_t *prev = json_object_get(p->cond_times, type);
    if (prev == NULL || strcmp(json_string_value(json_array_get(prev, 0)), status) != 0) {
        char now[40];
        now3339(now, sizeof(now));
        json_object_set_new(p->cond_times, type, json_pack("[s,s]", status, now));
        prev = json_object_get(p->cond_times, type);
    }
    json_t *c = json_pack("{s:s,s:s,s:n,s:s}", "type", type, "status", status, "lastProbeTime",
                          "lastTransitionTime", json_string_value(json_array_get(prev, 1)));
    if (!ok && reason != NULL)
        json_object_set_new(c, "reason", json_string(reason));
    if (!ok && msg != NULL)
        json_object_set_new(c, "message", json_string(msg));
    return c;
}

static json_t *pod_status(struct podrt *p, const json_t *pod)
{
    const json_t *spec = json_object_get(pod, "spec");
    const char *policy = kd_jstr(spec, "restartPolicy") ? kd_jstr(spec, "restartPolicy") : "Always";
    json_t *ics = json_array(), *cs = json_array();
    bool init_done = true, init_failed = false;
    for (size_t i = 0; i < p->ninit; i++) {
        const struct ctr *c = &p->c[i];
        json_array_append_new(
            ics, ctr_status(p, c, json_array_get(json_object_get(spec, "initContainers"), i)));
        if (!(c->state == C_TERMINATED && c->exit_code == 0))
            init_done = false;
        if (c->state == C_TERMINATED && c->exit_code != 0 && strcmp(policy, "Never") == 0)
            init_failed = true;
    }
    bool all_running = p->nc > p->ninit, any_run = false, all_term = p->nc > p->ninit,
         all_ok = true;
    struct kd_buf unready = KD_BUF_INIT(4096);
    int e = 0;
    for (size_t i = p->ninit; i < p->nc; i++) {
        const struct ctr *c = &p->c[i];
        json_array_append_new(
            cs,
            ctr_status(p, c, json_array_get(json_object_get(spec, "containers"), i - p->ninit)));
        if (c->state != C_RUNNING) {
            all_running = false;
            e = e ? e : kd_buf_printf(&unready, "%s%s", unready.len ? " " : "", c->name);
        } else {
            any_run = true;
        }
        if (c->state != C_TERMINATED)
            all_term = false;
        else if (c->exit_code != 0)
            all_ok = false;
        if (c->state == C_WAITING && c->restarts > 0)
            any_run = true; /* restarting: the pod stays Running */
    }
    const char *phase = "Pending";
    if (init_failed)
        phase = "Failed";
    else if (all_term && strcmp(policy, "Always") == 0)
        phase = "Running"; /* about to restart */
    else if (all_term && all_ok)
        phase = "Succeeded";
    else if (all_term && strcmp(policy, "Never") == 0)
        phase = "Failed";
    else if (all_term || any_run)
        phase = "Running";
    char unready_msg[4200];
    snprintf(unready_msg, sizeof(unready_msg), "containers with unready status: [%s]",
             kd_buf_str(&unready));
    kd_buf_free(&unready);
    bool terminal = strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0;
    json_t *conds = json_array();
    json_array_append_new(
        conds, condition(p, "PodReadyToStartContainers", p->prepared && !terminal, NULL, NULL));
    json_array_append_new(conds, condition(p, "Initialized", init_done, "ContainersNotInitialized",
                                           "containers with incomplete status: [init]"));
    bool ready = all_running && init_done;
    json_array_append_new(conds, condition(p, "Ready", ready,
                                           terminal ? "PodCompleted" : "ContainersNotReady",
                                           terminal ? NULL : unready_msg));
    json_array_append_new(conds, condition(p, "ContainersReady", ready,
                                           terminal ? "PodCompleted" : "ContainersNotReady",
                                           terminal ? NULL : unready_msg));
    json_array_append_new(conds, condition(p, "PodScheduled", true, NULL, NULL));
    json_t *st =
        json_pack("{s:s,s:o,s:s,s:[{s:s}],s:s,s:[{s:s}],s:s,s:o,s:s}", "phase", phase, "conditions",
                  conds, "hostIP", "127.0.0.1", "hostIPs", "ip", "127.0.0.1", "podIP", "127.0.0.1",
                  "podIPs", "ip", "127.0.0.1", "startTime", p->start_time, "containerStatuses", cs,
                  "qosClass", kd_sched_qos_class(pod));
    if (p->ninit > 0)
        json_object_set_new(st, "initContainerStatuses", ics);
    else
        json_decref(ics);
    return st;
}

/* ---- the loop
 * ------------------------------------------------------------------------------------ */

/* Returns true when nothing needed writing (the pod already shows status). */
static bool write_status(struct kd_kubelet *k, struct podrt *p, json_t *pod, json_t *status)
{
    const json_t *cur = json_object_get(pod, "status");
    /* Keep what others wrote next to ours (nominatedNodeName, ...), replace the rest. */
    json_t *merged = json_is_object(cur) ? json_deep_copy(cur) : json_object();
    json_object_update(merged, status);
    if (json_equal(merged, cur)) {
        json_decref(merged);
        return true;
    }
    if (k->kc != NULL && p->sent != NULL && json_equal(p->sent, status)) {
        /* Unchanged since the last write (the server may drop fields it does not know). */
        json_decref(merged);
        return true;
    }
    if (k->kc != NULL) {
        /* Through the status subresource, guarded by the uid as the kubelet's status manager. */
        struct kd_k8s_gvr gvr = KD_K8S_PODS;
        struct kd_k8s_status st = {0};
        char err[KD_ERRLEN] = "";
        json_t *patch = json_pack("{s:{s:s},s:O}", "metadata", "uid", p->uid, "status", status);
        if (kd_k8s_patch(k->kc, &gvr, p->ns, p->name, "status", KD_K8S_PATCH_MERGE, patch, NULL,
                         &st, err) != 0) {
            KD_WARN("pod status write failed", "pod=%s err=%s", kd_logq(p->name), kd_logq(err));
        } else {
            json_decref(p->sent);
            p->sent = json_deep_copy(status);
        }
        kd_k8s_status_free(&st);
        json_decref(patch);
        json_decref(merged);
        return false;
    }
    json_t *next = json_deep_copy(pod);
    json_object_set_new(next, "status", merged);
    if (kd_store_put(k->st, "/pods", p->ns, p->name, next, NULL) != 0)
        KD_WARN("pod status write failed", "pod=%s", kd_logq(p->name));
    return false;
}

/*
 * Everything of the runtime that pod_status reads, as a string (malloc'd), or NULL when it
 * does not fit the cap. Equal strings and an unchanged pod give an equal status, so the
 * pass can skip building it: with hundreds of pods on the node, building and comparing
 * every pod's status on every change of the store was most of kdet-local's CPU time.
 */
static char *status_sig(const struct podrt *p)
{
    struct kd_buf b = KD_BUF_INIT(64 * 1024);
    int e = kd_buf_printf(&b, "%d|%s|%zu", p->prepared, p->start_time, p->nc);
    for (size_t i = 0; i < p->nc && e == 0; i++) {
        const struct ctr *c = &p->c[i];
        e = kd_buf_printf(
            &b, "\n%d|%d|%d|%d|%s|%s|%d|%s|%s|%s|%s|%s", (int)c->state, c->restarts,
            c->ever_started, c->exit_code, c->started, c->finished, c->last != NULL,
            c->wait_reason ? c->wait_reason : "\x01", c->wait_msg ? c->wait_msg : "\x01",
            c->term_reason ? c->term_reason : "\x01", c->term_msg ? c->term_msg : "\x01", c->name);
    }
    if (e != 0) {
        kd_buf_free(&b);
        return NULL;
    }
    return kd_buf_steal(&b);
}

static void finish_deleted(struct kd_kubelet *k, struct podrt *p, json_t *pod)
{
    const json_t *md = json_object_get(pod, "metadata");
    if (k->kc != NULL) {
        /* As the kubelet: the final delete, at once and only of this very pod. */
        struct kd_k8s_gvr gvr = KD_K8S_PODS;
        struct kd_k8s_status st = {0};
        char err[KD_ERRLEN] = "";
        struct kd_k8s_delete_opts o = {
            .precondition_uid = p->uid, .has_grace_period = true, .grace_period_seconds = 0};
        int rc = kd_k8s_delete(k->kc, &gvr, p->ns, p->name, &o, NULL, &st, err);
        if (rc == 0)
            KD_INFO("pod deleted", "namespace=%s pod=%s", kd_logq(p->ns), kd_logq(p->name));
        else if (rc != KD_ENOTFOUND && rc != KD_ECONFLICT)
            KD_WARN("pod delete failed", "pod=%s err=%s", kd_logq(p->name), kd_logq(err));
        kd_k8s_status_free(&st);
        return;
    }
    if (json_array_size(json_object_get(md, "finalizers")) > 0) {
        if (json_integer_value(json_object_get(md, "deletionGracePeriodSeconds")) != 0) {
            json_t *next = json_deep_copy(pod);
            json_object_set_new(json_object_get(next, "metadata"), "deletionGracePeriodSeconds",
                                json_integer(0));
            if (kd_store_put(k->st, "/pods", p->ns, p->name, next, NULL) != 0)
                KD_WARN("pod update failed", "pod=%s", kd_logq(p->name));
        }
        return;
    }
    if (kd_store_delete(k->st, "/pods", p->ns, p->name, NULL) == 0)
        KD_INFO("pod deleted", "namespace=%s pod=%s", kd_logq(p->ns), kd_logq(p->name));
}

/*
 * Agent mode: the pods bound to this node, from the informer's cache (a list
 * and watch with fieldSelector spec.nodeName), as borrowed pointers into
 * *list. False until the first list is in: then nothing may be taken as
 * deleted.
 */
static bool list_remote(struct kd_kubelet *k, json_t **list, json_t ***pods, size_t *n)
{
    *list = NULL;
    if (!kd_k8s_informer_has_synced(k->inf))
        return false;
    *list = kd_k8s_cache_list(kd_k8s_informer_cache(k->inf), NULL);
    *n = json_array_size(*list);
    *pods = kd_xcalloc(*n + 1, sizeof(**pods));
    for (size_t i = 0; i < *n; i++)
        (*pods)[i] = json_array_get(*list, i);
    return true;
}

/* Informer handlers: wake the loop. */
static void wake(struct kd_kubelet *k)
{
    pthread_mutex_lock(&k->wake_mu);
    k->dirty = true;
    pthread_cond_signal(&k->wake_cv);
    pthread_mutex_unlock(&k->wake_mu);
}

static void on_pod_add(json_t *obj, void *ud)
{
    (void)obj;
    wake(ud);
}

static void on_pod_update(json_t *old, json_t *obj, void *ud)
{
    (void)old;
    (void)obj;
    wake(ud);
}

/* Sleep until the informer reports a change or POLL_MS pass (timers: restarts, grace periods). */
static void wait_change(struct kd_kubelet *k)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)POLL_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&k->wake_mu);
    while (!k->dirty && !atomic_load(&k->stop)) {
        if (pthread_cond_timedwait(&k->wake_cv, &k->wake_mu, &until) != 0)
            break;
    }
    k->dirty = false;
    pthread_mutex_unlock(&k->wake_mu);
}

/* Keep p in k->live exactly while it has a process or is not finished. */
static void set_live(struct kd_kubelet *k, struct podrt *p)
{
    bool live = !p->done || any_running(p);
    if (live && !p->in_live) {
        HASH_ADD_KEYPTR(hl, k->live, p->uid, strlen(p->uid), p);
        p->in_live = true;
    } else if (!live && p->in_live) {
        HASH_DELETE(hl, k->live, p);
        p->in_live = false;
    }
}

static void drop_runtime(struct kd_kubelet *k, struct podrt *p)
{
    if (p->in_live)
        HASH_DELETE(hl, k->live, p);
    p->in_live = false;
    HASH_DEL(k->pods, p);
}

/* A runtime whose pod is gone: kill what is left (reaped next round), else clean up. */
static void pod_gone(struct kd_kubelet *k, struct podrt *p)
{
    if (any_running(p)) {
        signal_all(p, SIGKILL);
        return;
    }
    drop_runtime(k, p);
    spare_put(k, p);
    podrt_free(k, p);
}

static int cmp_pod_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Local mode, store lock held: the pods this pass must visit, as borrowed pointers in
 * *pods (sorted by namespace and name): those changed since k->cursor and bound to this
 * node, and those of live runtimes. Every runtime that may have lost its pod goes into
 * check (uid -> true). False when the changes are no longer in the store's history (then
 * the caller makes a full pass).
 */
static bool changed_pods(struct kd_kubelet *k, json_t *check, json_t ***pods, size_t *n)
{
    json_t *keys = json_object();
    bool ok = true;
    for (;;) {
        const struct kd_event *ev = NULL;
        uint64_t oldest = 0;
        int rc = kd_store_next_event(k->st, k->cursor, &ev, &oldest);
        if (rc == KD_EAGAIN)
            break;
        if (rc != 0) {
            ok = false;
            break;
        }
        k->cursor = ev->rv;
        if (strcmp(ev->gr, "/pods") != 0)
            continue;
        const json_t *md = json_object_get(ev->obj, "metadata");
        const char *uid = kd_jstr(md, "uid"), *ns = kd_jstr(md, "namespace"),
                   *name = kd_jstr(md, "name");
        if (ev->type == KD_EV_DELETED) {
            if (uid != NULL)
                json_object_set_new(check, uid, json_true());
            continue;
        }
        const char *nn = kd_jstr(json_object_get(ev->obj, "spec"), "nodeName");
        if (name == NULL || nn == NULL || strcmp(nn, k->node) != 0)
            continue;
        char *key = kd_xasprintf("%s/%s", ns != NULL ? ns : "", name);
        json_object_set_new(keys, key, json_true());
        free(key);
    }
    struct podrt *p, *tmp;
    HASH_ITER(hl, k->live, p, tmp)
    {
        char *key = kd_xasprintf("%s/%s", p->ns != NULL ? p->ns : "", p->name);
        json_object_set_new(keys, key, json_true());
        json_object_set_new(check, p->uid, json_true());
        free(key);
    }
    size_t nk = json_object_size(keys), i = 0;
    const char **sorted = kd_xcalloc(nk + 1, sizeof(*sorted));
    const char *key;
    json_t *v;
    json_object_foreach(keys, key, v) sorted[i++] = key;
    qsort(sorted, nk, sizeof(*sorted), cmp_pod_key);
    *pods = kd_xcalloc(nk + 1, sizeof(**pods));
    *n = 0;
    for (i = 0; i < nk; i++) {
        const char *slash = strchr(sorted[i], '/');
        char *ns = kd_xstrndup(sorted[i], (size_t)(slash - sorted[i]));
        json_t *pod = kd_store_get(k->st, "/pods", ns, slash + 1);
        free(ns);
        if (pod != NULL)
            (*pods)[(*n)++] = pod;
    }
    free(sorted);
    json_decref(keys);
    return ok;
}

static void loop_once(struct kd_kubelet *k)
{
    json_t **pods = NULL, *list = NULL;
    json_t *check = NULL; /* NULL: every runtime may have lost its pod */
    size_t n = 0;
    bool listed = true;
    pthread_mutex_lock(&k->mu);
    reap(k);
    int64_t now = kd_mono_ms();
    if (k->kc == NULL) {
        kd_store_lock(k->st);
        if (now >= k->next_lease_ms) {
            renew_lease(k);
            k->next_lease_ms = now + LEASE_PERIOD_MS;
        }
        if (kd_sched_pass(k->sched, k->st, k->node) < 0)
            KD_WARN("scheduling pass failed", "node=%s", kd_logq(k->node));
        check = json_object();
        if (now < k->next_full_ms && changed_pods(k, check, &pods, &n)) {
            /* pods: what changed and what is live */
        } else {
            free(pods);
            json_decref(check);
            check = NULL;
            k->cursor = kd_store_rv(k->st);
            k->next_full_ms = now + FULL_PASS_MS;
            n = kd_store_list(k->st, "/pods", NULL, &pods);
        }
    } else {
        if (now >= k->next_lease_ms) {
            renew_lease(k);
            k->next_lease_ms = now + LEASE_PERIOD_MS;
        }
        if (now >= k->next_node_ms) {
            char err[KD_ERRLEN] = "";
            if (remote_node(k, err) != 0)
                KD_WARN("node status update failed", "node=%s err=%s", kd_logq(k->node),
                        kd_logq(err));
            k->next_node_ms = now + NODE_STATUS_PERIOD_MS;
        }
        listed = list_remote(k, &list, &pods, &n);
    }
    /* Mark runtimes still backed by a pod. */
    json_t *seen = json_object();
    for (size_t i = 0; i < n; i++) {
        json_t *pod = json_incref(pods[i]);
        const json_t *md = json_object_get(pod, "metadata");
        const char *nn = kd_jstr(json_object_get(pod, "spec"), "nodeName");
        const char *uid = kd_jstr(md, "uid");
        if (nn == NULL || strcmp(nn, k->node) != 0 || uid == NULL) {
            json_decref(pod);
            continue;
        }
        json_object_set_new(seen, uid, json_true());
        struct podrt *p = NULL;
        HASH_FIND_STR(k->pods, uid, p);
        const char *phase = kd_jstr(json_object_get(pod, "status"), "phase");
        bool terminal_now =
            phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
        if (p == NULL) {
            if (terminal_now && json_object_get(md, "deletionTimestamp") == NULL) {
                json_decref(pod);
                continue;
            }
            p = podrt_new(k, pod);
            HASH_ADD_KEYPTR(hh, k->pods, p->uid, strlen(p->uid), p);
        }
        drive(k, p, pod);
        set_live(k, p);
        if (p->done && !any_running(p) && p->ngpus > 0) {
            /* A finished pod's GPUs go back to the pool (its status keeps showing them). */
            release_gpus(k, p);
        }
        if (json_object_get(md, "deletionTimestamp") != NULL) {
            if (!any_running(p))
                finish_deleted(k, p, pod);
        } else {
            char *sig = status_sig(p);
            const char *rv = kd_jstr(md, "resourceVersion");
            if (sig == NULL || rv == NULL || p->shown_sig == NULL ||
                strcmp(sig, p->shown_sig) != 0 || strcmp(rv, p->shown_rv) != 0) {
                json_t *status = pod_status(p, pod);
                bool settled = write_status(k, p, pod, status);
                json_decref(status);
                free(p->shown_sig);
                free(p->shown_rv);
                p->shown_sig = NULL;
                p->shown_rv = NULL;
                if (settled && sig != NULL && rv != NULL) {
                    p->shown_sig = sig;
                    p->shown_rv = kd_xstrdup(rv);
                    sig = NULL;
                }
            }
            free(sig);
        }
        json_decref(pod);
    }
    free(pods);
    json_decref(list);
    /* Runtimes whose pod is gone: kill what is left and clean up. */
    struct podrt *p, *tmp;
    if (check == NULL) {
        HASH_ITER(hh, k->pods, p, tmp)
        {
            if (listed && json_object_get(seen, p->uid) == NULL)
                pod_gone(k, p);
        }
    } else {
        const char *uid;
        json_t *v;
        json_object_foreach(check, uid, v)
        {
            HASH_FIND_STR(k->pods, uid, p);
            if (p != NULL && json_object_get(seen, uid) == NULL)
                pod_gone(k, p);
        }
    }
    json_decref(seen);
    json_decref(check);
    if (k->kc == NULL) {
        kd_store_wait(k->st, 100);
        kd_store_unlock(k->st);
        pthread_mutex_unlock(&k->mu);
        return;
    }
    pthread_mutex_unlock(&k->mu);
    wait_change(k);
}

static void *kubelet_main(void *arg)
{
    struct kd_kubelet *k = arg;
    while (!atomic_load(&k->stop))
        loop_once(k);
    return NULL;
}

/* ---- the kubelet API (agent mode): /healthz and /containerLogs over HTTPS ------------------- */

/* The run of a container a /containerLogs follow watches (logstream.h's callback data). */
struct logrun {
    struct kd_kubelet *k;
    char *uid, *container;
    int run;
};

static void logrun_free(void *ud)
{
    struct logrun *l = ud;
    if (l == NULL)
        return;
    free(l->uid);
    free(l->container);
    free(l);
}

/* The container named `name` of p, or NULL. */
static struct ctr *find_ctr(struct podrt *p, const char *name)
{
    for (size_t i = 0; i < p->nc; i++) {
        if (strcmp(p->c[i].name, name) == 0)
            return &p->c[i];
    }
    return NULL;
}

/* Is this run of the container still running (so a follow waits for more)? */
static enum kd_logstream_state logrun_state(void *ud)
{
    struct logrun *l = ud;
    if (atomic_load(&l->k->stop) || kd_http_stopping(l->k->http))
        return KD_LOGSTREAM_STOP;
    struct podrt *p = NULL;
    pthread_mutex_lock(&l->k->mu);
    HASH_FIND_STR(l->k->pods, l->uid, p);
    struct ctr *c = p != NULL ? find_ctr(p, l->container) : NULL;
    bool live = c != NULL && c->state == C_RUNNING && c->restarts == l->run;
    pthread_mutex_unlock(&l->k->mu);
    return live ? KD_LOGSTREAM_LIVE : KD_LOGSTREAM_ENDED;
}

static bool query_true(const char *v)
{
    return v != NULL && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* GET /containerLogs/NS/POD/CONTAINER?follow=&tailLines=&previous=&limitBytes= */
static void container_logs(struct kd_kubelet *k, struct kd_http_req *r, const char *rest)
{
    char ns[MAX_PATH_PART + 1], pod[MAX_PATH_PART + 1], ctr[MAX_PATH_PART + 1];
    struct logrun *l = NULL;
    char *path = NULL;
    int64_t tail = -1, limit = -1;
    const char *tq = kd_http_query(r, "tailLines"), *lq = kd_http_query(r, "limitBytes");
    bool previous = query_true(kd_http_query(r, "previous"));
    const char *s1 = strchr(rest, '/'), *s2 = s1 != NULL ? strchr(s1 + 1, '/') : NULL;
    if (s1 == NULL || s2 == NULL || strchr(s2 + 1, '/') != NULL || s1 == rest || s2 == s1 + 1 ||
        s2[1] == '\0' || (size_t)(s1 - rest) > MAX_PATH_PART ||
        (size_t)(s2 - s1 - 1) > MAX_PATH_PART || strlen(s2 + 1) > MAX_PATH_PART) {
        kd_http_respond(r, 400, "text/plain", "expected /containerLogs/NS/POD/CONTAINER\n", 41);
        goto out;
    }
    if ((tq != NULL && (kd_parse_i64(tq, &tail) < 0 || tail < 0)) ||
        (lq != NULL && (kd_parse_i64(lq, &limit) < 0 || limit < 1))) {
        kd_http_respond(r, 400, "text/plain", "tailLines and limitBytes must be integers\n", 42);
        goto out;
    }
    snprintf(ns, sizeof(ns), "%.*s", (int)(s1 - rest), rest);
    snprintf(pod, sizeof(pod), "%.*s", (int)(s2 - s1 - 1), s1 + 1);
    snprintf(ctr, sizeof(ctr), "%s", s2 + 1);
    pthread_mutex_lock(&k->mu);
    struct podrt *p, *tmp, *found = NULL;
    HASH_ITER(hh, k->pods, p, tmp)
    {
        if (strcmp(p->ns, ns) == 0 && strcmp(p->name, pod) == 0)
            found = p;
    }
    struct ctr *c = found != NULL ? find_ctr(found, ctr) : NULL;
    int run = -1;
    if (c != NULL) {
        run = c->restarts;
        if (previous || (c->state == C_WAITING && c->restarts > 0))
            run = c->restarts - 1;
        if (!previous && !c->ever_started)
            run = -1;
        l = kd_xcalloc(1, sizeof(*l));
        l->k = k;
        l->uid = kd_xstrdup(found->uid);
        l->container = kd_xstrdup(ctr);
        l->run = run;
        path = kd_kubelet_log_path(k->state_dir, found->uid, ctr, run);
        if (path == NULL)
            run = -1;
    }
    pthread_mutex_unlock(&k->mu);
    if (l == NULL || run < 0) {
        char *msg =
            kd_http_printf(r, "container %s of pod %s/%s: no logs on this node\n", ctr, ns, pod);
        kd_http_respond(r, 404, "text/plain", msg, strlen(msg));
        goto out;
    }
    struct kd_logstream_opts lo = {.path = path,
                                   .follow = query_true(kd_http_query(r, "follow")) && !previous,
                                   .tail = tail,
                                   .limit = limit,
                                   .state = logrun_state,
                                   .ud = l,
                                   .free_ud = logrun_free};
    l = NULL;
    kd_logstream_respond(r, &lo);
out:
    free(path);
    logrun_free(l);
}

static void kubelet_api(struct kd_http_req *r, void *ud)
{
    struct kd_kubelet *k = ud;
    const char *path = kd_http_path(r);
    if (strcmp(kd_http_method(r), "GET") != 0) {
        kd_http_respond(r, 405, "text/plain", "method not allowed\n", 19);
    } else if (strcmp(path, "/healthz") == 0) {
        kd_http_respond(r, 200, "text/plain", "ok", 2);
    } else if (kd_str_has_prefix(path, "/containerLogs/")) {
        container_logs(k, r, path + strlen("/containerLogs/"));
    } else {
        kd_http_respond(r, 404, "text/plain", "not found\n", 10);
    }
}

/* ---- start and stop ---------------------------------------------------------------------- */

/* Kill process groups a previous run left behind (it died without stopping them). */
static void kill_leftovers(const char *state_dir)
{
    char *pods = kd_xasprintf("%s/pods", state_dir);
    DIR *d = opendir(pods);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char *path = kd_xasprintf("%s/%s/pids", pods, e->d_name);
            FILE *f = fopen(path, "r");
            int pid;
            unsigned long long start;
            while (f != NULL && fscanf(f, "%d %llu", &pid, &start) == 2) {
                if (pid > 1 && start != 0 && proc_starttime(pid) == start &&
                    kd_proc_kill_family(pid) > 0)
                    KD_INFO("killed a container left by a previous run", "pgid=%d", pid);
            }
            if (f != NULL)
                fclose(f);
            unlink(path);
            free(path);
        }
        closedir(d);
    }
    free(pods);
}

/*
 * An empty STATE_DIR/spare (an earlier run's spares go) and STATE_DIR/pods, which the spares
 * are renamed into; the mode spare/ gets is the mode of every folder the kubelet makes.
 */
static int spares_init(struct kd_kubelet *k, char *err)
{
    char *spare = kd_xasprintf("%s/spare", k->state_dir);
    char *pods = kd_xasprintf("%s/pods", k->state_dir);
    struct stat sb;
    int rc = kd_rm_tree(spare);
    if (rc == 0)
        rc = kd_mkdir_p(spare, 0755);
    if (rc == 0)
        rc = kd_mkdir_p(pods, 0755);
    if (rc == 0 && stat(spare, &sb) != 0)
        rc = -errno;
    if (rc != 0)
        kd_seterr(err, rc, "state dir %s: %s", spare, strerror(-rc));
    else
        k->dir_mode = sb.st_mode & 07777;
    k->spare = kd_xcalloc((size_t)k->max_pods, sizeof(*k->spare));
    free(pods);
    free(spare);
    return rc;
}

int kd_kubelet_start(const struct kd_kubelet_opts *opts, struct kd_store *st,
                     struct kd_kubelet **out, char *err)
{
    int rc = 0;
    struct kd_kubelet *k = kd_xcalloc(1, sizeof(*k));
    *out = NULL;
    k->st = st;
    k->kc = opts->client;
    k->max_pods = opts->max_pods > 0 ? opts->max_pods : 110;
    k->sched = kd_sched_new();
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->wake_mu, NULL);
    pthread_cond_init(&k->wake_cv, NULL);
    now3339(k->ready_since, sizeof(k->ready_since));
    char host[256] = "localhost";
    if (opts->node_name != NULL) {
        kd_strlcpy(host, opts->node_name, sizeof(host));
    } else if (gethostname(host, sizeof(host)) < 0 || host[0] == '\0') {
        kd_strlcpy(host, "localhost", sizeof(host));
    }
    for (char *c = host; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
    k->node = kd_xstrdup(host);
    k->api_port = opts->api_port;
    k->kubeconfig = opts->kubeconfig != NULL ? realpath(opts->kubeconfig, NULL) : NULL;
    k->api_server = opts->api_server != NULL ? kd_xstrdup(opts->api_server) : NULL;
    k->ngpus = opts->fake_gpus >= 0 ? opts->fake_gpus : count_gpus();
    if (k->ngpus > MAX_GPUS)
        k->ngpus = MAX_GPUS;
    k->ncpus = opts->cpus > 0 ? opts->cpus : sysconf(_SC_NPROCESSORS_ONLN);
    if (k->ncpus < 1)
        k->ncpus = 1;
    rc = kd_mkdir_p(opts->state_dir, 0755);
    if (rc != 0) {
        kd_seterr(err, rc, "state dir %s: %s", opts->state_dir, strerror(-rc));
        goto out;
    }
    /* Absolute, because volume symlinks point into it. */
    k->state_dir = realpath(opts->state_dir, NULL);
    if (k->state_dir == NULL) {
        rc = kd_seterr(err, -errno, "state dir %s: %s", opts->state_dir, strerror(errno));
        goto out;
    }
    kill_leftovers(k->state_dir);
    rc = spares_init(k, err);
    if (rc != 0)
        goto out;
    if (k->kc != NULL) {
        struct kd_http_opts ho = {.bind_addr = opts->kubelet_addr,
                                  .port = opts->kubelet_port,
                                  .handler = kubelet_api,
                                  .ud = k,
                                  .tls_cert_pem = opts->tls_cert_pem,
                                  .tls_key_pem = opts->tls_key_pem};
        rc = kd_http_start(&ho, &k->http, err);
        if (rc != 0)
            goto out;
        k->kubelet_port = kd_http_port(k->http);
        char why[KD_ERRLEN] = "";
        rc = remote_node(k, why);
        k->next_node_ms = kd_mono_ms() + NODE_STATUS_PERIOD_MS;
        if (rc != 0) {
            kd_seterr(err, rc, "cannot register node %s: %s", k->node,
                      why[0] ? why : kd_strerror(rc));
            goto out;
        }
        char sel[320];
        snprintf(sel, sizeof(sel), "spec.nodeName=%s", k->node);
        struct kd_k8s_informer_opts io = {.gvr = KD_K8S_PODS, .field_selector = sel};
        struct kd_k8s_handlers h = {
            .on_add = on_pod_add, .on_update = on_pod_update, .on_delete = on_pod_add, .ud = k};
        rc = kd_k8s_informer_new(k->kc, &io, &k->inf, err);
        if (rc == 0)
            rc = kd_k8s_informer_add_handlers(k->inf, &h);
        if (rc == 0)
            rc = kd_k8s_informer_start(k->inf);
        if (rc != 0) {
            kd_seterr(err, rc, "cannot watch the pods of node %s: %s", k->node, kd_strerror(rc));
            goto out;
        }
    } else {
        kd_store_lock(st);
        rc = register_node(k);
        kd_store_unlock(st);
        if (rc != 0) {
            kd_seterr(err, rc, "cannot register node %s: %s", k->node, kd_strerror(rc));
            goto out;
        }
    }
    KD_INFO("node registered", "node=%s gpus=%d cpus=%ld", kd_logq(k->node), k->ngpus, k->ncpus);
    if (pthread_create(&k->thread, NULL, kubelet_main, k) != 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot start the kubelet thread");
        goto out;
    }
    k->started = true;
    *out = k;
    k = NULL;
out:
    kd_kubelet_stop(k);
    return rc;
}

void kd_kubelet_stop(struct kd_kubelet *k)
{
    if (k == NULL)
        return;
    atomic_store(&k->stop, true);
    kd_http_stop(k->http);
    if (k->started) {
        pthread_mutex_lock(&k->wake_mu);
        pthread_cond_signal(&k->wake_cv);
        pthread_mutex_unlock(&k->wake_mu);
        pthread_join(k->thread, NULL);
    }
    kd_k8s_informer_free(k->inf);
    /* SIGTERM everything, then SIGKILL what is left after 5 s. */
    struct podrt *p, *tmp;
    HASH_ITER(hh, k->pods, p, tmp) signal_all(p, SIGTERM);
    int64_t deadline = kd_mono_ms() + 5000;
    for (;;) {
        reap(k);
        bool running = false;
        HASH_ITER(hh, k->pods, p, tmp) running = running || any_running(p);
        if (!running)
            break;
        if (kd_mono_ms() >= deadline) {
            HASH_ITER(hh, k->pods, p, tmp) signal_all(p, SIGKILL);
            deadline = kd_mono_ms() + 500; /* again, if something is still there then */
        }
        kd_sleep_ms(20);
    }
    HASH_ITER(hh, k->pods, p, tmp)
    {
        drop_runtime(k, p);
        char *pids = kd_xasprintf("%s/pids", p->dir);
        unlink(pids);
        free(pids);
        podrt_free(k, p);
    }
    kd_sched_free(k->sched);
    free(k->node);
    if (k->spare != NULL) {
        char *spare = kd_xasprintf("%s/spare", k->state_dir);
        kd_rm_tree(spare);
        free(spare);
        free(k->spare);
    }
    free(k->state_dir);
    free(k->kubeconfig);
    free(k->api_server);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->wake_cv);
    pthread_mutex_destroy(&k->wake_mu);
    free(k);
}

int kd_kubelet_port(const struct kd_kubelet *k)
{
    return k->kubelet_port;
}
