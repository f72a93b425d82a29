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
#include <uthash.h>
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

/* ---- the state kept between passes --------------------------------------------------- */

/* Pods that the filters cannot tell apart (kd_sched_class_key). */
struct sclass {
    UT_hash_handle hh;
    char *key;
    int refs;
    uint64_t failed_pass; /* the pass in which a pod of the class failed, with msg */
    char *msg;
};

/* A pod the scheduler keeps: pending (in priority order) or bound (for its node's sums). */
struct spod {
    UT_hash_handle hh;
    char *key; /* "ns/name" */
    char *ns, *name;
    bool bound;
    char *node; /* bound: the node */
    struct kd_res r;
    int64_t prio;
    char *created;
    struct sclass *cls; /* pending: its class */
    char *shown;        /* pending: the Unschedulable message it carries, or NULL */
};

struct kd_sched {
    struct spod *pending, *bound;
    struct sclass *classes;
    uint64_t cursor, pass;
    bool synced, dirty;
    int64_t next_ms; /* pass at least this often: node heartbeats age */
};

#define SCHED_PERIOD_MS 1000

struct kd_sched *kd_sched_new(void)
{
    return kd_xcalloc(1, sizeof(struct kd_sched));
}

static void class_put(struct kd_sched *s, struct sclass *c)
{
    if (c == NULL || --c->refs > 0)
        return;
    HASH_DEL(s->classes, c);
    free(c->key);
    free(c->msg);
    free(c);
}

static void spod_free(struct kd_sched *s, struct spod *p)
{
    class_put(s, p->cls);
    free(p->key);
    free(p->ns);
    free(p->name);
    free(p->node);
    free(p->created);
    free(p->shown);
    free(p);
}

static void forget_all(struct kd_sched *s)
{
    struct spod *p, *tmp;
    HASH_ITER(hh, s->pending, p, tmp)
    {
        HASH_DEL(s->pending, p);
        spod_free(s, p);
    }
    HASH_ITER(hh, s->bound, p, tmp)
    {
        HASH_DEL(s->bound, p);
        spod_free(s, p);
    }
}

void kd_sched_free(struct kd_sched *s)
{
    if (s == NULL)
        return;
    forget_all(s);
    free(s);
}

enum kd_sched_track kd_sched_track(const json_t *pod)
{
    const json_t *spec = json_object_get(pod, "spec");
    const char *node = kd_jstr(spec, "nodeName");
    if (terminal(pod))
        return KD_SCHED_NONE;
    if (node != NULL && node[0] != '\0')
        return KD_SCHED_BOUND;
    const char *sn = kd_jstr(spec, "schedulerName");
    if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") != NULL ||
        (sn != NULL && strcmp(sn, "default-scheduler") != 0))
        return KD_SCHED_NONE;
    return KD_SCHED_PENDING;
}

char *kd_sched_class_key(const json_t *pod)
{
    const json_t *spec = json_object_get(pod, "spec");
    struct kd_res r;
    kd_sched_pod_requests(pod, &r);
    char *sel = json_dumps(json_object_get(spec, "nodeSelector"),
                           JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *tol = json_dumps(json_object_get(spec, "tolerations"),
                           JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *key = kd_xasprintf("%lld|%lld|%lld|%lld|%lld|%s|%s",
                             (long long)json_integer_value(json_object_get(spec, "priority")),
                             (long long)r.cpu, (long long)r.memory, (long long)r.gpu,
                             (long long)r.pods, sel ? sel : "", tol ? tol : "");
    free(sel);
    free(tol);
    return key;
}

/* Priority order: higher spec.priority first, then older, then by name. */
static int cmp_spod(const struct spod *x, const struct spod *y)
{
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    int c = strcmp(x->created, y->created);
    if (c == 0)
        c = strcmp(x->name, y->name);
    return c != 0 ? c : strcmp(x->ns, y->ns);
}

/* The message of the pod's PodScheduled=False condition, or NULL. */
static const char *unschedulable_shown(const json_t *pod)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(pod, "status"), "conditions"), i, c)
    {
        if (strcmp(kd_jstr(c, "type") ? kd_jstr(c, "type") : "", "PodScheduled") != 0)
            continue;
        if (strcmp(kd_jstr(c, "status") ? kd_jstr(c, "status") : "", "False") != 0)
            return NULL;
        return kd_jstr(c, "message") ? kd_jstr(c, "message") : "";
    }
    return NULL;
}

/* Take in the pod's current state (NULL: deleted) under ns/name. */
static void observe(struct kd_sched *s, const char *ns, const char *name, const json_t *pod)
{
    char *key = kd_xasprintf("%s/%s", ns != NULL ? ns : "", name);
    struct spod *p = NULL;
    HASH_FIND_STR(s->pending, key, p);
    if (p != NULL) {
        HASH_DEL(s->pending, p);
    } else {
        HASH_FIND_STR(s->bound, key, p);
        if (p != NULL)
            HASH_DEL(s->bound, p);
    }
    if (p != NULL)
        spod_free(s, p);
    enum kd_sched_track t = pod != NULL ? kd_sched_track(pod) : KD_SCHED_NONE;
    if (t == KD_SCHED_NONE) {
        free(key);
        return;
    }
    p = kd_xcalloc(1, sizeof(*p));
    p->key = key;
    p->ns = kd_xstrdup(ns != NULL ? ns : "");
    p->name = kd_xstrdup(name);
    kd_sched_pod_requests(pod, &p->r);
    if (t == KD_SCHED_BOUND) {
        p->bound = true;
        p->node = kd_xstrdup(kd_jstr(json_object_get(pod, "spec"), "nodeName"));
        HASH_ADD_KEYPTR(hh, s->bound, p->key, strlen(p->key), p);
        return;
    }
    const json_t *md = json_object_get(pod, "metadata");
    p->prio = json_integer_value(json_object_get(json_object_get(pod, "spec"), "priority"));
    p->created =
        kd_xstrdup(kd_jstr(md, "creationTimestamp") ? kd_jstr(md, "creationTimestamp") : "");
    const char *shown = unschedulable_shown(pod);
    p->shown = shown != NULL ? kd_xstrdup(shown) : NULL;
    char *ck = kd_sched_class_key(pod);
    struct sclass *c = NULL;
    HASH_FIND_STR(s->classes, ck, c);
    if (c == NULL) {
        c = kd_xcalloc(1, sizeof(*c));
        c->key = ck;
        HASH_ADD_KEYPTR(hh, s->classes, c->key, strlen(c->key), c);
    } else {
        free(ck);
    }
    c->refs++;
    p->cls = c;
    HASH_ADD_KEYPTR_INORDER(hh, s->pending, p->key, strlen(p->key), p, cmp_spod);
}

/* Read the store's changes since the last pass; a full read when they are no longer kept. */
static void catch_up(struct kd_sched *s, struct kd_store *st)
{
    for (;;) {
        const struct kd_event *ev = NULL;
        uint64_t oldest = 0;
        int rc = s->synced ? kd_store_next_event(st, s->cursor, &ev, &oldest) : KD_EGONE;
        if (rc == KD_EAGAIN)
            return;
        if (rc != 0) {
            forget_all(s);
            json_t **pods = NULL;
            s->cursor = kd_store_rv(st);
            size_t n = kd_store_list(st, "/pods", NULL, &pods);
            for (size_t i = 0; i < n; i++) {
                const json_t *md = json_object_get(pods[i], "metadata");
                if (kd_jstr(md, "name") != NULL)
                    observe(s, kd_jstr(md, "namespace"), kd_jstr(md, "name"), pods[i]);
            }
            free(pods);
            s->synced = true;
            s->dirty = true;
            return;
        }
        s->cursor = ev->rv;
        if (strcmp(ev->gr, "/nodes") == 0) {
            s->dirty = true;
        } else if (strcmp(ev->gr, "/pods") == 0) {
            const json_t *md = json_object_get(ev->obj, "metadata");
            if (kd_jstr(md, "name") != NULL)
                observe(s, kd_jstr(md, "namespace"), kd_jstr(md, "name"),
                        ev->type == KD_EV_DELETED ? NULL : ev->obj);
            s->dirty = true;
        }
    }
}

/* Bind the pod to chosen, or mark it Unschedulable with msg; records the Event. */
static int write_verdict(struct kd_store *st, const json_t *pod, const struct node_view *chosen,
                         const char *msg, const char *own_node, bool *bound)
{
    *bound = false;
    json_t *next = json_deep_copy(pod);
    bool write;
    if (chosen != NULL) {
        json_object_set_new(json_object_get(next, "spec"), "nodeName", json_string(chosen->name));
        set_scheduled(next, "True", NULL, NULL);
        write = true;
    } else {
        write = set_scheduled(next, "False", "Unschedulable", msg);
    }
    if (!write) {
        json_decref(next);
        return 0;
    }
    const json_t *md = json_object_get(pod, "metadata");
    /* The put frees the old pod, and md with it: copy the names first. */
    char *ns = kd_xstrdup(kd_jstr(md, "namespace") ? kd_jstr(md, "namespace") : "");
    char *name = kd_xstrdup(kd_jstr(md, "name") ? kd_jstr(md, "name") : "");
    const char *node_name = chosen != NULL ? chosen->name : "";
    int rc = kd_store_put(st, "/pods", ns, name, next, NULL);
    if (rc == 0) {
        /* next is the stored pod now (valid while the lock is held). */
        char *m = msg != NULL
                      ? kd_xstrdup(msg)
                      : kd_xasprintf("Successfully assigned %s/%s to %s", ns, name, node_name);
        if (kd_events_record(st, next, "Pod", "v1", chosen ? "Normal" : "Warning",
                             chosen ? "Scheduled" : "FailedScheduling", m, "default-scheduler",
                             chosen ? node_name : own_node) != 0)
            KD_WARN("event not recorded", "pod=%s", kd_logq(name));
        free(m);
        if (chosen != NULL) {
            *bound = true;
            KD_INFO("pod bound", "namespace=%s pod=%s node=%s", kd_logq(ns), kd_logq(name),
                    kd_logq(node_name));
        }
    }
    free(ns);
    free(name);
    return rc;
}

int kd_sched_pass(struct kd_sched *s, struct kd_store *st, const char *own_node)
{
    int bound = 0;
    json_t **nodes = NULL;
    struct node_view *nv = NULL;
    int64_t now = kd_wall_ms(), mono = kd_mono_ms();
    catch_up(s, st);
    if (!s->dirty && mono < s->next_ms)
        return 0;
    s->dirty = false;
    s->next_ms = mono + SCHED_PERIOD_MS;
    s->pass++;
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
    struct spod *p, *tmp;
    HASH_ITER(hh, s->bound, p, tmp)
    {
        struct node_view key = {.name = p->node};
        struct node_view *hit = bsearch(&key, nv, nn, sizeof(*nv), cmp_node);
        if (hit != NULL)
            take(&hit->avail, &p->r);
    }
    HASH_ITER(hh, s->pending, p, tmp)
    {
        struct sclass *c = p->cls;
        if (c->failed_pass == s->pass && p->shown != NULL && strcmp(p->shown, c->msg) == 0)
            continue; /* fails as the earlier pod of its class did, and already says so */
        json_t *pod = kd_store_get(st, "/pods", p->ns, p->name);
        if (pod == NULL)
            continue; /* its DELETED event comes next pass */
        struct node_view *chosen = NULL;
        char *event_msg = NULL;
        if (c->failed_pass == s->pass) {
            event_msg = kd_xstrdup(c->msg);
        } else {
            json_t *reasons = json_object(), *preempt = json_object();
            for (size_t j = 0; j < nn; j++) {
                struct kd_buf why = KD_BUF_INIT(1024);
                bool fits, helps;
                filter(pod, &p->r, &nv[j], &why, &fits, &helps);
                if (fits && chosen == NULL)
                    chosen = &nv[j];
                if (!fits) {
                    const char *w = kd_buf_str(&why);
                    for (const char *nl; w != NULL && (nl = strchr(w, '\n')) != NULL; w = nl + 1) {
                        char *one = kd_xstrndup(w, (size_t)(nl - w));
                        count(reasons, one);
                        free(one);
                    }
                    count(preempt, helps ? "No preemption victims found for incoming pod"
                                         : "Preemption is not helpful for scheduling");
                }
                kd_buf_free(&why);
            }
            if (chosen == NULL) {
                event_msg = unschedulable_msg(nn, reasons, preempt);
                c->failed_pass = s->pass;
                free(c->msg);
                c->msg = kd_xstrdup(event_msg);
            }
            json_decref(reasons);
            json_decref(preempt);
        }
        if (chosen == NULL && scheduled_is(pod, "False", event_msg)) {
            /* Still unschedulable for the same reasons: nothing to write (and no copy). */
            free(p->shown);
            p->shown = event_msg;
            continue;
        }
        bool did_bind = false;
        int rc = write_verdict(st, pod, chosen, event_msg, own_node, &did_bind);
        free(event_msg);
        if (rc != 0) {
            bound = rc;
            goto out;
        }
        if (did_bind) {
            take(&chosen->avail, &p->r);
            bound++;
        }
        /* The write's event updates p (or moves it to the bound) at the next catch_up. */
    }
out:
    free(nv);
    free(nodes);
    return bound;
}
