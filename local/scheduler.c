/*
 * kdet-local's scheduler: binds pending pods to any Ready, schedulable Node
 * in the store (its own and node agents'), with per-node fit checks on cpu,
 * memory, pods and nvidia.com/gpu, taints and tolerations, nodeSelector,
 * and priority order, and the real scheduler's Unschedulable messages
 * ("0/2 nodes are available: ...").
 */
#include "json.h"
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/time.h"
#include "events.h"
#include "quantity.h"
#include "store.h"

/* A quantity may be a JSON string ("500m") or a number (YAML's `nvidia.com/gpu: 1`). */
static int64_t q(const json_t *list, const char *name)
{
    int64_t v = 0;
    const json_t *j = json_object_get(list, name);
    if (json_is_number(j))
        return (int64_t)(json_number_value(j) * 1000.0);
    const char *s = json_string_value(j);
    if (s != NULL && kd_quantity_parse_milli(s, &v, NULL) < 0)
        v = 0;
    return v;
}

/* Requests default to limits when only limits are given (as the API server defaults them). */
static void container_requests(const json_t *c, struct kd_res *r)
{
    const json_t *res = json_object_get(c, "resources");
    const json_t *req = json_object_get(res, "requests");
    const json_t *lim = json_object_get(res, "limits");
    r->cpu = json_object_get(req, "cpu") ? q(req, "cpu") : q(lim, "cpu");
    r->memory = json_object_get(req, "memory") ? q(req, "memory") : q(lim, "memory");
    r->gpu = json_object_get(req, "nvidia.com/gpu") ? q(req, "nvidia.com/gpu")
                                                    : q(lim, "nvidia.com/gpu");
    r->pods = 0;
}

void kd_sched_pod_requests(const json_t *pod, struct kd_res *out)
{
    const json_t *spec = json_object_get(pod, "spec");
    struct kd_res sum = {0, 0, 0, 1000};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(spec, "containers"), i, c)
    {
        struct kd_res r;
        container_requests(c, &r);
        sum.cpu += r.cpu;
        sum.memory += r.memory;
        sum.gpu += r.gpu;
    }
    json_array_foreach(json_object_get(spec, "initContainers"), i, c)
    {
        struct kd_res r;
        container_requests(c, &r);
        if (r.cpu > sum.cpu)
            sum.cpu = r.cpu;
        if (r.memory > sum.memory)
            sum.memory = r.memory;
        if (r.gpu > sum.gpu)
            sum.gpu = r.gpu;
    }
    *out = sum;
}

const char *kd_sched_qos_class(const json_t *pod)
{
    bool any = false, guaranteed = true;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c)
    {
        const json_t *res = json_object_get(c, "resources");
        const json_t *req = json_object_get(res, "requests");
        const json_t *lim = json_object_get(res, "limits");
        if (json_object_size(req) > 0 || json_object_size(lim) > 0)
            any = true;
        if (kd_jstr(lim, "cpu") == NULL || kd_jstr(lim, "memory") == NULL)
            guaranteed = false;
        if ((kd_jstr(req, "cpu") && kd_jstr(lim, "cpu") &&
             strcmp(kd_jstr(req, "cpu"), kd_jstr(lim, "cpu"))) ||
            (kd_jstr(req, "memory") && kd_jstr(lim, "memory") &&
             strcmp(kd_jstr(req, "memory"), kd_jstr(lim, "memory"))))
            guaranteed = false;
    }
    return !any ? "BestEffort" : guaranteed ? "Guaranteed" : "Burstable";
}

static bool terminal(const json_t *pod)
{
    const char *phase = kd_jstr(json_object_get(pod, "status"), "phase");
    return phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

struct cand {
    json_t *pod;
    int64_t prio;
    const char *created;
    const char *key;
};

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    int c = strcmp(x->created ? x->created : "", y->created ? y->created : "");
    return c != 0 ? c : strcmp(x->key, y->key);
}

/* Whether the pod's PodScheduled condition already has this status and message. */
static bool scheduled_is(const json_t *pod, const char *status, const char *msg)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(pod, "status"), "conditions"), i, c)
    {
        if (strcmp(kd_jstr(c, "type") ? kd_jstr(c, "type") : "", "PodScheduled") != 0)
            continue;
        return strcmp(kd_jstr(c, "status") ? kd_jstr(c, "status") : "", status) == 0 &&
               strcmp(kd_jstr(c, "message") ? kd_jstr(c, "message") : "", msg ? msg : "") == 0;
    }
    return false;
}

/* Set (or replace) the PodScheduled condition; returns true when it changed. */
static bool set_scheduled(json_t *pod, const char *status, const char *reason, const char *msg)
{
    json_t *st = json_object_get(pod, "status");
    if (!json_is_object(st)) {
        st = json_pack("{s:s}", "phase", "Pending");
        json_object_set_new(pod, "status", st);
    }
    json_t *conds = json_object_get(st, "conditions");
    if (!json_is_array(conds)) {
        conds = json_array();
        json_object_set_new(st, "conditions", conds);
    }
    size_t i;
    json_t *c;
    json_array_foreach(conds, i, c)
    {
        if (strcmp(kd_jstr(c, "type") ? kd_jstr(c, "type") : "", "PodScheduled") != 0)
            continue;
        if (strcmp(kd_jstr(c, "status") ? kd_jstr(c, "status") : "", status) == 0 &&
            strcmp(kd_jstr(c, "message") ? kd_jstr(c, "message") : "", msg ? msg : "") == 0)
            return false;
        json_array_remove(conds, i);
        break;
    }
    char now[40];
    kd_time_rfc3339(kd_wall_ms(), 0, now, sizeof(now));
    json_t *nc = json_pack("{s:s,s:s,s:n,s:s}", "type", "PodScheduled", "status", status,
                           "lastProbeTime", "lastTransitionTime", now);
    if (reason != NULL)
        json_object_set_new(nc, "reason", json_string(reason));
    if (msg != NULL)
        json_object_set_new(nc, "message", json_string(msg));
    json_array_append_new(conds, nc);
    return true;
}

static bool selector_fits(const json_t *pod, const json_t *node)
{
    const json_t *sel = json_object_get(json_object_get(pod, "spec"), "nodeSelector");
    const json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)sel, k, v)
    {
        const char *have = kd_jstr(labels, k);
        if (have == NULL || !json_is_string(v) || strcmp(have, json_string_value(v)) != 0)
            return false;
    }
    return true;
}

/* As the scheduler's TolerationsTolerateTaint: empty key with Exists matches every key, empty
 * effect every effect, Equal (the default operator) compares values. */
static bool tolerated(const json_t *pod, const char *key, const char *value, const char *effect)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "tolerations"), i, t)
    {
        const char *tk = kd_jstr(t, "key") ? kd_jstr(t, "key") : "";
        const char *op = kd_jstr(t, "operator") ? kd_jstr(t, "operator") : "Equal";
        const char *te = kd_jstr(t, "effect") ? kd_jstr(t, "effect") : "";
        if (te[0] != '\0' && strcmp(te, effect) != 0)
            continue;
        if (tk[0] == '\0' && strcmp(op, "Exists") == 0)
            return true;
        if (strcmp(tk, key) != 0)
            continue;
        if (strcmp(op, "Exists") == 0 ||
            strcmp(kd_jstr(t, "value") ? kd_jstr(t, "value") : "", value ? value : "") == 0)
            return true;
    }
    return false;
}

/* A Node as the scheduler sees it during one pass. */
struct node_view {
    const json_t *node;
    const char *name;
    struct kd_res avail;
    const char *down_taint; /* node.kubernetes.io/not-ready or .../unreachable, or NULL */
};

/*
 * Ready=True, and for a node other than kdet-local's own (which this
 * process is), a heartbeat no older than the node lifecycle controller's
 * grace period: a node agent that stopped posting counts as unreachable,
 * as kube-controller-manager would taint it.
 */
static const char *down_taint(const json_t *node, bool own, int64_t now_ms)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(node, "status"), "conditions"), i, c)
    {
        if (strcmp(kd_jstr(c, "type") ? kd_jstr(c, "type") : "", "Ready") != 0)
            continue;
        if (strcmp(kd_jstr(c, "status") ? kd_jstr(c, "status") : "", "True") != 0)
            return strcmp(kd_jstr(c, "status") ? kd_jstr(c, "status") : "", "Unknown") == 0
                       ? "node.kubernetes.io/unreachable"
                       : "node.kubernetes.io/not-ready";
        int64_t hb = 0;
        const char *ts = kd_jstr(c, "lastHeartbeatTime");
        if (!own && (ts == NULL || kd_time_parse_rfc3339(ts, &hb) != 0 ||
                     now_ms - hb > KD_SCHED_NODE_GRACE_MS))
            return "node.kubernetes.io/unreachable";
        return NULL;
    }
    return "node.kubernetes.io/not-ready";
}

/*
 * The filters in the real scheduler's order (NodeUnschedulable,
 * TaintToleration, NodeAffinity, NodeResourcesFit); the first that fails
 * gives the node's reasons (resources give every one that is short).
 * Appends "reason\n" lines to why; *fits says whether the pod fits, and
 * *preempt_helps whether evicting pods could make it fit (only a shortage
 * of resources can be helped).
 */
static void filter(const json_t *pod, const struct kd_res *r, const struct node_view *nv,
                   struct kd_buf *why, bool *fits, bool *preempt_helps)
{
    const json_t *spec = json_object_get(nv->node, "spec");
    int e = 0;
    *fits = false;
    *preempt_helps = false;
    if (json_is_true(json_object_get(spec, "unschedulable")) &&
        !tolerated(pod, "node.kubernetes.io/unschedulable", NULL, "NoSchedule")) {
        e = kd_buf_puts(why, "node(s) were unschedulable\n");
        goto out;
    }
    if (nv->down_taint != NULL && !tolerated(pod, nv->down_taint, NULL, "NoSchedule")) {
        e = kd_buf_printf(why, "node(s) had untolerated taint {%s: }\n", nv->down_taint);
        goto out;
    }
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(spec, "taints"), i, t)
    {
        const char *effect = kd_jstr(t, "effect") ? kd_jstr(t, "effect") : "";
        if (strcmp(effect, "NoSchedule") != 0 && strcmp(effect, "NoExecute") != 0)
            continue;
        if (!tolerated(pod, kd_jstr(t, "key") ? kd_jstr(t, "key") : "", kd_jstr(t, "value"),
                       effect)) {
            e = kd_buf_printf(why, "node(s) had untolerated taint {%s: %s}\n",
                              kd_jstr(t, "key") ? kd_jstr(t, "key") : "",
                              kd_jstr(t, "value") ? kd_jstr(t, "value") : "");
            goto out;
        }
    }
    if (!selector_fits(pod, nv->node)) {
        e = kd_buf_puts(why, "node(s) didn't match Pod's node affinity/selector\n");
        goto out;
    }
    *preempt_helps = true;
    *fits = true;
    if (r->cpu > nv->avail.cpu) {
        e = e ? e : kd_buf_puts(why, "Insufficient cpu\n");
        *fits = false;
    }
    if (r->memory > nv->avail.memory) {
        e = e ? e : kd_buf_puts(why, "Insufficient memory\n");
        *fits = false;
    }
    if (r->gpu > nv->avail.gpu) {
        e = e ? e : kd_buf_puts(why, "Insufficient nvidia.com/gpu\n");
        *fits = false;
    }
    if (r->pods > nv->avail.pods) {
        e = e ? e : kd_buf_puts(why, "Too many pods\n");
        *fits = false;
    }
out:
    (void)e; /* a reason cut by the buffer cap only shortens the message */
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "N reason, M reason" from a counts object; the "N reason" strings sorted, as the scheduler's
 * FitError sorts them. */
static int counts_text(const json_t *counts, struct kd_buf *out)
{
    size_t n = json_object_size(counts), i = 0;
    char **items = kd_xcalloc(n + 1, sizeof(*items));
    const char *k;
    json_t *v;
    int e = 0;
    json_object_foreach((json_t *)counts, k, v) items[i++] =
        kd_xasprintf("%" JSON_INTEGER_FORMAT " %s", json_integer_value(v), k);
    qsort(items, n, sizeof(*items), cmp_str);
    for (i = 0; i < n; i++) {
        e = e ? e : kd_buf_printf(out, "%s%s", i ? ", " : "", items[i]);
        free(items[i]);
    }
    free(items);
    return e;
}

static void count(json_t *counts, const char *reason)
{
    json_t *c = json_object_get(counts, reason);
    json_object_set_new(counts, reason, json_integer(json_integer_value(c) + 1));
}

/* The FailedScheduling message for n nodes, from the reasons each node gave. */
static char *unschedulable_msg(size_t n, const json_t *reasons, const json_t *preempt)
{
    struct kd_buf b = KD_BUF_INIT(4096);
    int e = kd_buf_printf(&b, "0/%zu nodes are available: ", n);
    e = e ? e : counts_text(reasons, &b);
    e = e ? e : kd_buf_printf(&b, ". preemption: 0/%zu nodes are available: ", n);
    e = e ? e : counts_text(preempt, &b);
    e = e ? e : kd_buf_puts(&b, ".");
    (void)e; /* cut at the cap: still a message */
    char *s = kd_buf_steal(&b);
    return s ? s : kd_xstrdup("0 nodes are available");
}

static int cmp_node(const void *a, const void *b)
{
    return strcmp(((const struct node_view *)a)->name, ((const struct node_view *)b)->name);
}

static void take(struct kd_res *avail, const struct kd_res *r)
{
    avail->cpu -= r->cpu;
    avail->memory -= r->memory;
    avail->gpu -= r->gpu;
    avail->pods -= r->pods;
}

int kd_sched_pass(struct kd_store *st, const char *own_node)
{
    int bound = 0;
    json_t **pods = NULL, **nodes = NULL;
    struct cand *cands = NULL;
    struct node_view *nv = NULL;
    int64_t now = kd_wall_ms();
    size_t nn = kd_store_list(st, "/nodes", NULL, &nodes);
    if (nn == 0)
        goto out;
    nv = kd_xcalloc(nn, sizeof(*nv));
    for (size_t i = 0; i < nn; i++) {
        const json_t *alloc = json_object_get(json_object_get(nodes[i], "status"), "allocatable");
        nv[i].node = nodes[i];
        nv[i].name = kd_jstr(json_object_get(nodes[i], "metadata"), "name");
        if (nv[i].name == NULL)
            nv[i].name = "";
        nv[i].avail = (struct kd_res){q(alloc, "cpu"), q(alloc, "memory"),
                                      q(alloc, "nvidia.com/gpu"), q(alloc, "pods")};
        nv[i].down_taint = down_taint(nodes[i], strcmp(nv[i].name, own_node) == 0, now);
    }
    qsort(nv, nn, sizeof(*nv), cmp_node);
    size_t n = kd_store_list(st, "/pods", NULL, &pods);
    cands = kd_xcalloc(n + 1, sizeof(*cands));
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *spec = json_object_get(pods[i], "spec");
        const char *bound_to = kd_jstr(spec, "nodeName");
        if (bound_to != NULL && bound_to[0] != '\0') {
            if (terminal(pods[i]))
                continue;
            struct node_view key = {.name = bound_to};
            struct node_view *hit = bsearch(&key, nv, nn, sizeof(*nv), cmp_node);
            if (hit != NULL) {
                struct kd_res r;
                kd_sched_pod_requests(pods[i], &r);
                take(&hit->avail, &r);
            }
            continue;
        }
        const json_t *md = json_object_get(pods[i], "metadata");
        const char *sn = kd_jstr(spec, "schedulerName");
        if (json_object_get(md, "deletionTimestamp") != NULL || terminal(pods[i]) ||
            (sn != NULL && strcmp(sn, "default-scheduler") != 0))
            continue;
        cands[nc].pod = pods[i];
        cands[nc].prio = json_integer_value(json_object_get(spec, "priority"));
        cands[nc].created = kd_jstr(md, "creationTimestamp");
        cands[nc].key = kd_jstr(md, "name");
        nc++;
    }
    qsort(cands, nc, sizeof(*cands), cmp_cand);
    for (size_t i = 0; i < nc; i++) {
        json_t *pod = cands[i].pod;
        struct kd_res r;
        kd_sched_pod_requests(pod, &r);
        struct node_view *chosen = NULL;
        json_t *reasons = json_object(), *preempt = json_object();
        for (size_t j = 0; j < nn; j++) {
            struct kd_buf why = KD_BUF_INIT(1024);
            bool fits, helps;
            filter(pod, &r, &nv[j], &why, &fits, &helps);
            if (fits && chosen == NULL)
                chosen = &nv[j];
            if (!fits) {
                const char *s = kd_buf_str(&why);
                for (const char *nl; s != NULL && (nl = strchr(s, '\n')) != NULL; s = nl + 1) {
                    char *one = kd_xstrndup(s, (size_t)(nl - s));
                    count(reasons, one);
                    free(one);
                }
                count(preempt, helps ? "No preemption victims found for incoming pod"
                                     : "Preemption is not helpful for scheduling");
            }
            kd_buf_free(&why);
        }
        const json_t *md = json_object_get(pod, "metadata");
        char *event_msg = chosen == NULL ? unschedulable_msg(nn, reasons, preempt) : NULL;
        json_decref(reasons);
        json_decref(preempt);
        if (chosen == NULL && scheduled_is(pod, "False", event_msg)) {
            /* Still unschedulable for the same reasons: nothing to write (and no copy). */
            free(event_msg);
            continue;
        }
        json_t *next = json_deep_copy(pod);
        bool write;
        if (chosen != NULL) {
            json_object_set_new(json_object_get(next, "spec"), "nodeName",
                                json_string(chosen->name));
            set_scheduled(next, "True", NULL, NULL);
            write = true;
            take(&chosen->avail, &r);
        } else {
            write = set_scheduled(next, "False", "Unschedulable", event_msg);
        }
        if (!write) {
            json_decref(next);
            free(event_msg);
            continue;
        }
        /* The put frees the old pod, and md with it: copy the names first. */
        char *ns = kd_xstrdup(kd_jstr(md, "namespace") ? kd_jstr(md, "namespace") : "");
        char *name = kd_xstrdup(kd_jstr(md, "name") ? kd_jstr(md, "name") : "");
        const char *node_name = chosen != NULL ? chosen->name : "";
        int rc = kd_store_put(st, "/pods", ns, name, next, NULL);
        if (rc == 0) {
            /* next is the stored pod now (valid while the lock is held). */
            char *m = event_msg != NULL
                          ? kd_xstrdup(event_msg)
                          : kd_xasprintf("Successfully assigned %s/%s to %s", ns, name, node_name);
            if (kd_events_record(st, next, "Pod", "v1", chosen ? "Normal" : "Warning",
                                 chosen ? "Scheduled" : "FailedScheduling", m, "default-scheduler",
                                 chosen ? node_name : own_node) != 0)
                KD_WARN("event not recorded", "pod=%s", kd_logq(name));
            free(m);
        }
        free(event_msg);
        if (rc == 0 && chosen != NULL) {
            bound++;
            KD_INFO("pod bound", "namespace=%s pod=%s node=%s", kd_logq(ns), kd_logq(name),
                    kd_logq(node_name));
        }
        free(ns);
        free(name);
        if (rc != 0) {
            bound = rc;
            goto out;
        }
    }
out:
    free(nv);
    free(cands);
    free(pods);
    free(nodes);
    return bound;
}
