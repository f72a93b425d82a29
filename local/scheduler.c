/*
 * The scheduler for kdet-local's single node: a fit check on cpu, memory,
 * pods and nvidia.com/gpu, nodeSelector, and priority order, with the real
 * scheduler's Unschedulable messages ("0/1 nodes are available: ...").
 */
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

static const char *jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

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
        if (jstr(lim, "cpu") == NULL || jstr(lim, "memory") == NULL)
            guaranteed = false;
        if ((jstr(req, "cpu") && jstr(lim, "cpu") && strcmp(jstr(req, "cpu"), jstr(lim, "cpu"))) ||
            (jstr(req, "memory") && jstr(lim, "memory") &&
             strcmp(jstr(req, "memory"), jstr(lim, "memory"))))
            guaranteed = false;
    }
    return !any ? "BestEffort" : guaranteed ? "Guaranteed" : "Burstable";
}

static bool terminal(const json_t *pod)
{
    const char *phase = jstr(json_object_get(pod, "status"), "phase");
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
        if (strcmp(jstr(c, "type") ? jstr(c, "type") : "", "PodScheduled") != 0)
            continue;
        if (strcmp(jstr(c, "status") ? jstr(c, "status") : "", status) == 0 &&
            strcmp(jstr(c, "message") ? jstr(c, "message") : "", msg ? msg : "") == 0)
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
        const char *have = jstr(labels, k);
        if (have == NULL || !json_is_string(v) || strcmp(have, json_string_value(v)) != 0)
            return false;
    }
    return true;
}

int kd_sched_pass(struct kd_store *st, const char *node_name)
{
    int bound = 0;
    json_t **pods = NULL;
    struct cand *cands = NULL;
    json_t *node = kd_store_get(st, "/nodes", NULL, node_name);
    if (node == NULL)
        goto out;
    const json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    struct kd_res avail = {q(alloc, "cpu"), q(alloc, "memory"), q(alloc, "nvidia.com/gpu"),
                           q(alloc, "pods")};
    bool unschedulable =
        json_is_true(json_object_get(json_object_get(node, "spec"), "unschedulable"));
    size_t n = kd_store_list(st, "/pods", NULL, &pods);
    cands = kd_xcalloc(n + 1, sizeof(*cands));
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *spec = json_object_get(pods[i], "spec");
        const char *nn = jstr(spec, "nodeName");
        if (nn != NULL && nn[0] != '\0') {
            if (strcmp(nn, node_name) == 0 && !terminal(pods[i])) {
                struct kd_res r;
                kd_sched_pod_requests(pods[i], &r);
                avail.cpu -= r.cpu;
                avail.memory -= r.memory;
                avail.gpu -= r.gpu;
                avail.pods -= r.pods;
            }
            continue;
        }
        const json_t *md = json_object_get(pods[i], "metadata");
        const char *sn = jstr(spec, "schedulerName");
        if (json_object_get(md, "deletionTimestamp") != NULL || terminal(pods[i]) ||
            (sn != NULL && strcmp(sn, "default-scheduler") != 0))
            continue;
        cands[nc].pod = pods[i];
        cands[nc].prio = json_integer_value(json_object_get(spec, "priority"));
        cands[nc].created = jstr(md, "creationTimestamp");
        cands[nc].key = jstr(md, "name");
        nc++;
    }
    qsort(cands, nc, sizeof(*cands), cmp_cand);
    for (size_t i = 0; i < nc; i++) {
        json_t *pod = cands[i].pod;
        struct kd_res r;
        kd_sched_pod_requests(pod, &r);
        struct kd_buf why = KD_BUF_INIT(1024);
        int e = 0;
        int reasons = 0;
        if (unschedulable) {
            e = e ? e : kd_buf_puts(&why, "1 node(s) were unschedulable");
            reasons++;
        }
        if (!selector_fits(pod, node)) {
            e = e ? e
                  : kd_buf_printf(&why, "%s1 node(s) didn't match Pod's node affinity/selector",
                                  reasons++ ? ", " : "");
        }
        if (r.cpu > avail.cpu)
            e = e ? e : kd_buf_printf(&why, "%s1 Insufficient cpu", reasons++ ? ", " : "");
        if (r.memory > avail.memory)
            e = e ? e : kd_buf_printf(&why, "%s1 Insufficient memory", reasons++ ? ", " : "");
        if (r.gpu > avail.gpu)
            e = e ? e
                  : kd_buf_printf(&why, "%s1 Insufficient nvidia.com/gpu", reasons++ ? ", " : "");
        if (r.pods > avail.pods)
            e = e ? e : kd_buf_printf(&why, "%s1 Too many pods", reasons++ ? ", " : "");
        const json_t *md = json_object_get(pod, "metadata");
        json_t *next = json_deep_copy(pod);
        bool write;
        char *event_msg = NULL;
        if (reasons == 0) {
            json_object_set_new(json_object_get(next, "spec"), "nodeName", json_string(node_name));
            set_scheduled(next, "True", NULL, NULL);
            write = true;
            avail.cpu -= r.cpu;
            avail.memory -= r.memory;
            avail.gpu -= r.gpu;
            avail.pods -= r.pods;
        } else {
            char *msg = kd_xasprintf("0/1 nodes are available: %s. preemption: 0/1 nodes are "
                                     "available: 1 No preemption victims found for incoming pod.",
                                     kd_buf_str(&why));
            write = set_scheduled(next, "False", "Unschedulable", msg);
            event_msg = msg;
        }
        kd_buf_free(&why);
        if (!write) {
            json_decref(next);
            free(event_msg);
            continue;
        }
        /* The put frees the old pod, and md with it: copy the names first. */
        char *ns = kd_xstrdup(jstr(md, "namespace") ? jstr(md, "namespace") : "");
        char *name = kd_xstrdup(jstr(md, "name") ? jstr(md, "name") : "");
        int rc = kd_store_put(st, "/pods", ns, name, next, NULL);
        if (rc == 0) {
            /* next is the stored pod now (valid while the lock is held). */
            char *m = event_msg != NULL
                          ? kd_xstrdup(event_msg)
                          : kd_xasprintf("Successfully assigned %s/%s to %s", ns, name, node_name);
            if (kd_events_record(st, next, "Pod", "v1", reasons ? "Warning" : "Normal",
                                 reasons ? "FailedScheduling" : "Scheduled", m, "default-scheduler",
                                 node_name) != 0)
                KD_WARN("event not recorded", "pod=%s", kd_logq(name));
            free(m);
        }
        free(event_msg);
        if (rc == 0 && reasons == 0) {
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
    free(cands);
    free(pods);
    return bound;
}
