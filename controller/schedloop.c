/*
 * The scheduler loop: builds the scheduler's input from the informer
 * caches (Nodes, Trials, Experiments, trial Pods, and the other pods that
 * hold room on the nodes), runs kd_sched_decide,
 * and hands the outcome to the trial reconciler through the handoff
 * (handoff.h): admissions, preemptions and reasons. It never writes to the API itself,
 * so one pass is cheap and runs every second or when kicked.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "capacity.h"
#include "config/task.h"
#include "ctrl.h"
#include "k8s/position.h"
#include "states.h"
#include "taskstate.h"

#define ADMIT_TTL_MS 120000 /* an admission not turned into pods by then is dropped */

/* The slots a live trial pod holds: its CPU slots (KD_POD_ANN_CPU_SLOTS), else its GPUs. */
static int pod_slots(const json_t *p)
{
    const json_t *cs = json_object_get(
        json_object_get(json_object_get(p, "metadata"), "annotations"), KD_POD_ANN_CPU_SLOTS);
    if (cs != NULL)
        return kd_cap_count(cs);
    return kd_cap_count(json_object_get(
        json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0),
                "resources"),
            "limits"),
        "nvidia.com/gpu"));
}

static bool node_ready(const json_t *node)
{
    bool ready = false;
    size_t i;
    json_t *cnd;
    json_array_foreach(json_object_get(json_object_get(node, "status"), "conditions"), i, cnd)
    {
        if (strcmp(json_string_value(json_object_get(cnd, "type")) ?: "", "Ready") == 0)
            ready = strcmp(json_string_value(json_object_get(cnd, "status")) ?: "", "True") == 0;
    }
    return ready;
}

static int node_index(const struct kd_sched_node *nodes, size_t n, const char *name)
{
    int found = -1;
    for (size_t i = 0; name != NULL && i < n && found < 0; i++)
        if (strcmp(nodes[i].name, name) == 0)
            found = (int)i;
    return found;
}

/* The node a pod runs on or is pinned to. */
static const char *pod_node(const json_t *p)
{
    const char *n = kd_ctrl_str(p, "spec", "nodeName", NULL);
    if (n == NULL)
        n = kd_ctrl_str(p, "spec", "nodeSelector", "kubernetes.io/hostname");
    return n;
}

static bool pod_live(const json_t *p)
{
    const char *phase = kd_ctrl_str(p, "status", "phase", NULL) ?: "Pending";
    return strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0;
}

/* What one scheduler pass gathers from the Trial cache (gather_trial). */
struct pass {
    struct kd_ctrl *c;
    const struct kd_sched_node *nodes;
    size_t nn;
    json_t *by_trial; /* "ns/trial" -> [live pods] */
    json_t *exps;     /* "ns/experiment" -> what the pass needs of it, or null when not cached */
    json_t *task_pos; /* [[entry index, Task]]: positions to work out once the walk is over */
    struct kd_sched_trial *ts;
    char **keys, **groups; /* owned; ts[i].key/group point at them once the walk is over */
    size_t n, cap;
};

/*
 * Finished trials (a terminal state and no live pods) are marked in the
 * cache (KD_K8S_EACH_MARK) and not decoded again until they change: with
 * thousands of finished trials cached, decoding them all was most of a
 * pass, every second.
 */
static bool want_trial(const char *key, bool marked, void *ud)
{
    struct pass *ps = ud;
    return !marked || json_object_get(ps->by_trial, key) != NULL;
}

/*
 * The job an ahead-of or behind-of annotation names: an Experiment, else a
 * Task (kd_exp_lookup_fn; ud: the controller).
 */
static json_t *job_lookup(const char *ns, const char *name, void *ud)
{
    struct kd_ctrl *c = ud;
    json_t *o = kd_exp_from_cache(ns, name, kd_k8s_informer_cache(c->exps));
    if (o == NULL && c->tasks != NULL)
        o = kd_exp_from_cache(ns, name, kd_k8s_informer_cache(c->tasks));
    return o;
}

/* What a pass needs of experiment ekey, decoded once per pass (borrowed; NULL: not cached). */
static const json_t *exp_facts(struct pass *ps, const char *ekey)
{
    json_t *f = json_object_get(ps->exps, ekey), *exp = NULL;
    if (f != NULL)
        return json_is_null(f) ? NULL : f;
    if (kd_k8s_cache_get(kd_k8s_informer_cache(ps->c->exps), ekey, &exp) != 0) {
        json_object_set_new(ps->exps, ekey, json_null());
        return NULL;
    }
    const json_t *spec = json_object_get(exp, "spec");
    const char *estate = kd_ctrl_str(exp, "status", "state", NULL) ?: "";
    f = json_pack("{s:f,s:I,s:b,s:b}", "position", kd_queue_position(exp, job_lookup, ps->c),
                  "max_slots",
                  (json_int_t)json_integer_value(
                      json_object_get(json_object_get(spec, "resources"), "max_slots")),
                  "paused",
                  json_is_true(json_object_get(spec, "paused")) ||
                      json_is_true(json_object_get(spec, "canceled")),
                  "stopping", strncmp(estate, "STOPPING_", 9) == 0);
    json_object_set_new(ps->exps, ekey, f);
    json_decref(exp);
    return f;
}

static struct kd_sched_trial *pass_entry(struct pass *ps);

/*
 * What a trial or task holds: the places of its live pods, else those of its pending admission
 * (ad may be NULL). Sets t's state RUNNING and its places and returns true when it holds any.
 */
static bool held_places(struct pass *ps, struct kd_sched_trial *t, const json_t *live,
                        const struct kd_handoff_admit *ad)
{
    size_t k;
    json_t *p;
    if (json_array_size(live) == 0 && ad == NULL)
        return false;
    t->state = KD_SCHED_RUNNING;
    json_array_foreach(live, k, p)
    {
        int ni = node_index(ps->nodes, ps->nn, pod_node(p));
        if (ni >= 0 && t->nplace < KD_SCHED_MAX_PODS)
            t->place[t->nplace++] = (struct kd_sched_place){ni, pod_slots(p)};
    }
    for (int i = 0; json_array_size(live) == 0 && i < ad->nplace; i++) {
        int ni = node_index(ps->nodes, ps->nn, ad->nodes[i]);
        if (ni >= 0 && t->nplace < KD_SCHED_MAX_PODS)
            t->place[t->nplace++] = (struct kd_sched_place){ni, ad->gpus};
    }
    return true;
}

/* kd_k8s_cache_each_if callback: add the trial to the pass when it runs, is admitted or waits. */
static int gather_trial(json_t *o, void *ud)
{
    struct pass *ps = ud;
    struct kd_ctrl *c = ps->c;
    enum kd_trial_state st;
    char key[600], ekey[600];
    if (!kd_trial_state_parse(kd_ctrl_str(o, "status", "state", NULL), &st))
        st = KD_TRIAL_QUEUED;
    if (kd_k8s_obj_key(o, key, sizeof(key)) != 0)
        return 0;
    json_t *live = json_object_get(ps->by_trial, key);
    if (kd_trial_state_terminal(st) && json_array_size(live) == 0)
        return KD_K8S_EACH_MARK;
    snprintf(ekey, sizeof(ekey), "%s/%s", kd_k8s_meta_str(o, "namespace"),
             kd_ctrl_str(o, "spec", "experiment", NULL) ?: "");
    const json_t *exp = exp_facts(ps, ekey);
    if (exp == NULL)
        return 0;
    struct kd_sched_trial *t = pass_entry(ps);
    const json_t *res = json_object_get(json_object_get(o, "spec"), "resources");
    kd_strlcpy(t->pool, json_string_value(json_object_get(res, "resourcePool")) ?: "default",
               sizeof(t->pool));
    t->slots = (int)json_integer_value(json_object_get(res, "slots"));
    t->single_node = json_is_true(json_object_get(res, "singleNode"));
    t->priority = (int)json_integer_value(json_object_get(res, "priority"));
    if (t->priority < 1 || t->priority > 99)
        t->priority = 42; /* Determined's default priority */
    t->weight = json_is_number(json_object_get(res, "weight"))
                    ? json_number_value(json_object_get(res, "weight"))
                    : 1.0;
    t->group_max_slots = (int)json_integer_value(json_object_get(exp, "max_slots"));
    const char *ex[KD_SCHED_MAX_EXCLUDE];
    int nex = kd_ctrl_excluded_nodes(o, ex, KD_SCHED_MAX_EXCLUDE);
    for (int k = 0; k < nex; k++) {
        int ni = node_index(ps->nodes, ps->nn, ex[k]);
        if (ni >= 0)
            t->exclude[t->nexclude++] = ni;
    }
    t->position = json_number_value(json_object_get(exp, "position"));
    const char *tn = kd_k8s_meta_str(o, "name") ?: "";
    const char *dash = strrchr(tn, '-');
    int64_t idx = 0;
    t->index = dash != NULL && kd_parse_i64(dash + 1, &idx) == 0 ? idx : 0;
    bool paused = json_is_true(json_object_get(json_object_get(o, "spec"), "paused")) ||
                  json_is_true(json_object_get(exp, "paused"));
    bool exp_stopping = json_is_true(json_object_get(exp, "stopping"));
    /* Holding capacity: live pods, else a pending admission. */
    struct kd_handoff_admit held;
    const struct kd_handoff_admit *ad = kd_handoff_holds(c->handoff, key, &held) ? &held : NULL;
    if (held_places(ps, t, live, ad)) {
        /* An admission without pods has not started yet: never a victim. */
        t->stopping = json_array_size(live) == 0 || paused || exp_stopping ||
                      st != KD_TRIAL_ACTIVE || kd_handoff_preempting(c->handoff, key);
    } else if (st == KD_TRIAL_QUEUED && !paused && !exp_stopping) {
        t->state = KD_SCHED_WAITING;
    } else {
        return 0;
    }
    ps->keys[ps->n] = kd_xstrdup(key);
    ps->groups[ps->n] = kd_xstrdup(ekey);
    ps->n++;
    return 0;
}

/* Room for one more entry of the pass. */
static struct kd_sched_trial *pass_entry(struct pass *ps)
{
    if (ps->n == ps->cap) {
        ps->cap = ps->cap != 0 ? 2 * ps->cap : 64;
        ps->ts = kd_xrealloc(ps->ts, ps->cap * sizeof(*ps->ts));
        ps->keys = kd_xrealloc(ps->keys, ps->cap * sizeof(*ps->keys));
        ps->groups = kd_xrealloc(ps->groups, ps->cap * sizeof(*ps->groups));
    }
    struct kd_sched_trial *t = &ps->ts[ps->n];
    memset(t, 0, sizeof(*t));
    return t;
}

/* Ended tasks without live pods are marked in the cache and not decoded again. */
static bool want_task(const char *key, bool marked, void *ud)
{
    struct pass *ps = ud;
    char hk[600];
    snprintf(hk, sizeof(hk), "%s%s", KD_CTRL_TASK_KEY, key);
    return !marked || json_object_get(ps->by_trial, hk) != NULL;
}

/*
 * kd_k8s_cache_each_if callback: a task is scheduled as a trial of its own
 * group, never a preemption victim (docs/tasks.md, "Preemption").
 */
static int gather_task(json_t *o, void *ud)
{
    struct pass *ps = ud;
    struct kd_ctrl *c = ps->c;
    enum kd_task_state st;
    enum kd_task_kind kind;
    char key[600], hk[620];
    if (!kd_task_state_parse(kd_ctrl_str(o, "status", "state", NULL), &st))
        st = KD_TASK_QUEUED;
    if (kd_k8s_obj_key(o, key, sizeof(key)) != 0)
        return 0;
    snprintf(hk, sizeof(hk), "%s%s", KD_CTRL_TASK_KEY, key);
    json_t *live = json_object_get(ps->by_trial, hk);
    if (st == KD_TASK_TERMINATED && json_array_size(live) == 0)
        return KD_K8S_EACH_MARK;
    const json_t *spec = json_object_get(o, "spec");
    const json_t *cfg = json_object_get(spec, "config");
    const json_t *res = json_object_get(cfg, "resources");
    if (kd_task_kind_parse(json_string_value(json_object_get(spec, "kind")), &kind) != 0)
        return 0;
    struct kd_handoff_admit held;
    const struct kd_handoff_admit *ad = kd_handoff_holds(c->handoff, hk, &held) ? &held : NULL;
    bool killed = json_is_true(json_object_get(spec, "killed"));
    struct kd_sched_trial *t = pass_entry(ps);
    const char *pool = json_string_value(json_object_get(res, "resource_pool"));
    kd_strlcpy(t->pool, pool != NULL && pool[0] ? pool : "default", sizeof(t->pool));
    t->slots = kd_task_config_slots(kind, cfg);
    t->priority = (int)json_integer_value(json_object_get(res, "priority"));
    if (t->priority < 1 || t->priority > 99)
        t->priority = 42;
    t->weight = json_is_number(json_object_get(res, "weight"))
                    ? json_number_value(json_object_get(res, "weight"))
                    : 1.0;
    /* Not here: an ahead-of names another job, looked up in this same cache, whose lock the walk
     * holds (a second read lock waits behind a waiting writer: a deadlock). */
    t->position = 0;
    t->no_preempt = true;
    if (held_places(ps, t, live, ad)) {
        t->stopping = json_array_size(live) == 0 || killed || st == KD_TASK_TERMINATING ||
                      st == KD_TASK_TERMINATED;
    } else if (st == KD_TASK_QUEUED && !killed) {
        t->state = KD_SCHED_WAITING;
    } else {
        return 0;
    }
    ps->keys[ps->n] = kd_xstrdup(hk);
    ps->groups[ps->n] = kd_xstrdup(hk);
    json_array_append_new(ps->task_pos, json_pack("[I,O]", (json_int_t)ps->n, o));
    ps->n++;
    return 0;
}

/*
 * File a live pod under its owner's key in by_trial: prefix + "ns/" + the value of its label
 * (a trial's "ns/trial", a task's handoff key). A pod without the label, or no longer live, is
 * marked so that the walk skips it until it changes.
 */
static int file_pod(json_t *by_trial, json_t *o, const char *label, const char *prefix)
{
    const char *t = kd_ctrl_str(o, "metadata", "labels", label);
    if (t == NULL || !pod_live(o))
        return KD_K8S_EACH_MARK;
    char k[700];
    snprintf(k, sizeof(k), "%s%s/%s", prefix, kd_k8s_meta_str(o, "namespace"), t);
    json_t *arr = json_object_get(by_trial, k);
    if (arr == NULL) {
        arr = json_array();
        json_object_set_new(by_trial, k, arr);
    }
    json_array_append(arr, o);
    return 0;
}

/* kd_k8s_cache_each_if callback: file a live task pod under its task's handoff key. */
static int gather_task_pod(json_t *o, void *ud)
{
    return file_pod(ud, o, KD_POD_LABEL_TASK, KD_CTRL_TASK_KEY);
}

/* Pods that ended (Succeeded, Failed) are marked and not decoded again until they change. */
static bool want_pod(const char *key, bool marked, void *ud)
{
    (void)key;
    (void)ud;
    return !marked;
}

/* kd_k8s_cache_each_if callback: file a live trial pod under its trial's key. */
static int gather_pod(json_t *o, void *ud)
{
    return file_pod(ud, o, KD_POD_LABEL_TRIAL, "");
}

/* What the walk over other pods adds to: the nodes, and their names' indexes. */
struct others {
    struct kd_sched_node *nodes;
    json_t *index; /* node name -> its index in nodes */
};

/* Other pods that hold nothing (ended, or not bound yet) are marked until they change. */
static bool want_other(const char *key, bool marked, void *ud)
{
    (void)key;
    (void)ud;
    return !marked;
}

/* kd_k8s_cache_each_if callback: add what a pod kdet does not schedule requests to its node. */
static int gather_other(json_t *o, void *ud)
{
    struct others *ot = ud;
    struct kd_cap_request r;
    if (!kd_cap_pod_request(o, &r))
        return KD_K8S_EACH_MARK;
    json_t *ni = json_object_get(ot->index, r.node);
    if (ni != NULL) {
        struct kd_sched_node *nd = &ot->nodes[json_integer_value(ni)];
        nd->other_cpu_milli += r.cpu_milli;
        nd->other_gpus += r.gpus;
    }
    return 0;
}

/*
 * One pass. The Trial cache is walked one decoded object at a time
 * (kd_k8s_cache_each) and only trials that run, are admitted or wait are
 * kept, so a pass over 10,000 finished trials builds neither 10,000 JSON
 * trees nor 10,000 scheduler entries.
 */
void kd_ctrl_schedule(struct kd_ctrl *c)
{
    json_t *nodes_j = kd_k8s_cache_list(kd_k8s_informer_cache(c->nodes), NULL);
    size_t nn = json_array_size(nodes_j);
    struct kd_sched_node *nodes = kd_xcalloc(nn + 1, sizeof(*nodes));
    json_t *by_trial = json_object(); /* trial name@ns -> [live pods] */
    struct pass ps = {.c = c,
                      .nodes = nodes,
                      .nn = nn,
                      .by_trial = by_trial,
                      .exps = json_object(),
                      .task_pos = json_array()};
    struct others ot = {.nodes = nodes, .index = json_object()};
    struct kd_sched_trial *ts = NULL;
    size_t n = 0, i;
    json_t *o;
    int64_t now = kd_mono_ms();

    json_array_foreach(nodes_j, i, o)
    {
        struct kd_sched_node *nd = &nodes[i];
        kd_strlcpy(nd->name, kd_k8s_meta_str(o, "name") ?: "", sizeof(nd->name));
        const char *pool = kd_ctrl_str(o, "metadata", "labels", KD_POD_LABEL_POOL);
        kd_strlcpy(nd->pool, pool != NULL ? pool : "default", sizeof(nd->pool));
        const json_t *alloc = json_object_get(json_object_get(o, "status"), "allocatable");
        nd->gpus = kd_cap_count(json_object_get(alloc, "nvidia.com/gpu"));
        nd->cpu_milli = kd_cap_cpu_milli(json_object_get(alloc, "cpu"));
        nd->unschedulable =
            json_is_true(json_object_get(json_object_get(o, "spec"), "unschedulable")) ||
            !node_ready(o);
        json_object_set_new(ot.index, nd->name, json_integer((json_int_t)i));
    }
    /* The whole cache: every namespace (the nodes are shared), or only the controller's when
     * RBAC allowed no more (main.c). */
    if (c->others != NULL)
        (void)kd_k8s_cache_each_if(kd_k8s_informer_cache(c->others), NULL, want_other, gather_other,
                                   &ot);
    (void)kd_k8s_cache_each_if(kd_k8s_informer_cache(c->pods), c->o.ns, want_pod, gather_pod,
                               by_trial);
    if (c->taskpods != NULL)
        (void)kd_k8s_cache_each_if(kd_k8s_informer_cache(c->taskpods), c->o.ns, want_pod,
                                   gather_task_pod, by_trial);
    (void)kd_k8s_cache_each_if(kd_k8s_informer_cache(c->trials), c->o.ns, want_trial, gather_trial,
                               &ps);
    if (c->tasks != NULL)
        (void)kd_k8s_cache_each_if(kd_k8s_informer_cache(c->tasks), c->o.ns, want_task, gather_task,
                                   &ps);
    size_t pi;
    json_t *pe;
    json_array_foreach(ps.task_pos, pi, pe)
    {
        ps.ts[json_integer_value(json_array_get(pe, 0))].position =
            kd_queue_position(json_array_get(pe, 1), job_lookup, c);
    }
    ts = ps.ts;
    n = ps.n;
    for (size_t k = 0; k < n; k++) {
        ts[k].key = ps.keys[k];
        ts[k].group = ps.groups[k];
    }
    /* Forget the configurations of experiments that are gone. */
    json_t *exps_j = kd_k8s_cache_list(kd_k8s_informer_cache(c->exps), c->o.ns);
    json_t *uids = json_object();
    size_t ei;
    json_t *eo;
    json_array_foreach(exps_j, ei, eo)
    {
        const char *uid = kd_k8s_meta_str(eo, "uid");
        if (uid != NULL)
            json_object_set_new(uids, uid, json_true());
    }
    const char *ck;
    json_t *cv, *ctmp;
    pthread_mutex_lock(&c->mu);
    json_object_foreach_safe(c->cfgs, ctmp, ck, cv)
    {
        if (json_object_get(uids, ck) == NULL)
            json_object_del(c->cfgs, ck);
    }
    pthread_mutex_unlock(&c->mu);
    kd_ctrl_views_prune(c, uids);
    json_decref(uids);
    json_decref(exps_j);
    /* Forget what was said about trials that are gone; admissions whose pods exist now, or
     * that were never used, are dropped. */
    json_t *seen = json_object();
    for (size_t k = 0; k < n; k++)
        json_object_set_new(seen, ts[k].key, json_true());
    kd_handoff_prune(c->handoff, seen, by_trial, now, ADMIT_TTL_MS);
    json_decref(seen);

    bool delegate = c->o.gang != NULL && !c->o.gang->kdet_admits;
    struct kd_sched_opts so = {.type = c->o.sched_type,
                               .preemption = c->o.preemption,
                               .delegate = delegate,
                               .slot_type = c->o.slot_type,
                               .cpu_per_slot_milli = c->o.pod.cpu_per_slot_milli,
                               .max_slots_per_pod = c->o.max_slots_per_pod};
    if (kd_sched_decide(&so, nodes, nn, ts, n) != 0) {
        KD_ERROR("scheduler input rejected", "trials=%zu nodes=%zu", n, nn);
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        struct kd_sched_trial *t = &ts[k];
        /* A task's key names its reconciler's queue and, after the prefix, its object. */
        bool task = strncmp(t->key, KD_CTRL_TASK_KEY, strlen(KD_CTRL_TASK_KEY)) == 0;
        const char *qkey = task ? t->key + strlen(KD_CTRL_TASK_KEY) : t->key;
        struct kd_k8s_queue *q = task ? c->taskq : c->trialq;
        if (t->decision == KD_SCHED_ADMIT) {
            const char *pin[KD_SCHED_MAX_PODS] = {NULL};
            /* Delegated: no node pin, the batch scheduler places the pods. */
            for (int p = 0; p < t->nplace && !delegate; p++)
                pin[p] = nodes[t->place[p].node].name;
            kd_handoff_admit(c->handoff, t->key, t->nplace, pin,
                             t->nplace > 0 ? t->place[0].gpus : 0, t->cpu, now);
            KD_INFO(task ? "task admitted" : "trial admitted",
                    "%s=%s slots=%d slot_type=%s pods=%d node=%s", task ? "task" : "trial",
                    kd_logq(qkey), t->slots, t->cpu ? "cpu" : "gpu", t->nplace,
                    pin[0] != NULL ? kd_logq(pin[0]) : "");
            kd_k8s_queue_add(q, qkey);
        } else if (t->decision == KD_SCHED_PREEMPT) {
            if (kd_handoff_preempt(c->handoff, t->key, t->reason))
                kd_k8s_queue_add(q, qkey);
        } else if (t->decision == KD_SCHED_WAIT || t->decision == KD_SCHED_NEVER) {
            if (kd_handoff_say(c->handoff, t->key, kd_sched_decision_name(t->decision), t->reason))
                kd_k8s_queue_add(q, qkey);
        }
    }
out:
    json_decref(nodes_j);
    json_decref(ot.index);
    json_decref(ps.exps);
    json_decref(ps.task_pos);
    json_decref(by_trial);
    free(nodes);
    for (size_t k = 0; k < n; k++) {
        free(ps.keys[k]);
        free(ps.groups[k]);
    }
    free(ps.keys);
    free(ps.groups);
    free(ts);
}
