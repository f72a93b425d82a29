/*
 * The Trial reconciler: once the scheduler admits a trial, create its pods
 * (all of a gang, deterministic names, so re-creation is idempotent);
 * follow their phases to completion, restart a failed attempt with backoff
 * up to max_restarts, and remove the pods when the trial pauses, is
 * preempted, is canceled or ends. Pods carry owner references, and every
 * path that ends an attempt also deletes them explicitly. With the API on,
 * a trial that waits at its target for the searcher gives its GPUs back
 * (condition Idle) and is queued again from its checkpoint when promoted.
 * With a batch scheduler (gang.h) an attempt's group object (a Volcano
 * PodGroup) is created before its pods and deleted with them, and the
 * trial's Scheduled condition says why the batch scheduler keeps it waiting.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "ctrl.h"
#include "wire.h"
#include "states.h"

struct attempt {
    int npods, running, succeeded, failed, deleting;
    json_int_t target; /* the validateAfter the attempt was started for (smallest over its pods) */
    char run_id[64];
    char failure[512];
};

static void summarize(json_t *pods, struct attempt *a)
{
    size_t i;
    json_t *p;
    memset(a, 0, sizeof(*a));
    json_array_foreach(pods, i, p)
    {
        const char *phase = kd_ctrl_str(p, "status", "phase", NULL) ?: "Pending";
        const char *rid = kd_ctrl_str(p, "metadata", "labels", KD_POD_LABEL_RUN);
        a->npods++;
        const char *tg = kd_ctrl_str(p, "metadata", "annotations", KD_POD_ANN_TARGET);
        int64_t tv;
        if (tg != NULL && kd_parse_i64(tg, &tv) == 0 && (a->target == 0 || tv < a->target))
            a->target = tv;
        if (rid != NULL && a->run_id[0] == '\0')
            kd_strlcpy(a->run_id, rid, sizeof(a->run_id));
        if (kd_ctrl_str(p, "metadata", "deletionTimestamp", NULL) != NULL)
            a->deleting++;
        if (strcmp(phase, "Succeeded") == 0) {
            a->succeeded++;
        } else if (strcmp(phase, "Failed") == 0) {
            a->failed++;
            if (a->failure[0] == '\0') {
                json_t *cs = json_array_get(
                    json_object_get(json_object_get(p, "status"), "containerStatuses"), 0);
                json_t *term = json_object_get(json_object_get(cs, "state"), "terminated");
                snprintf(a->failure, sizeof(a->failure), "pod %s failed (exit code %" JSON_INTEGER_FORMAT ", %s)",
                         kd_k8s_meta_str(p, "name"),
                         json_integer_value(json_object_get(term, "exitCode")),
                         json_string_value(json_object_get(term, "reason"))
                             ?: kd_ctrl_str(p, "status", "reason", NULL) ?: "Error");
            }
        } else {
            a->running++;
        }
    }
}

/* Whether this process deleted the pod (uid) within KD_CTRL_DELETED_MS, with grace 0 when
 * `now` asks for it: then the cache just has not shown its deletionTimestamp yet. */
static bool deleted_lately(struct kd_ctrl *c, const char *uid, bool now)
{
    bool found = false;
    int64_t t = kd_mono_ms();
    if (uid == NULL || uid[0] == '\0')
        return false;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < KD_CTRL_DELETED_MEMO && !found; i++) {
        const struct kd_ctrl_deleted *d = &c->deleted[i];
        found = d->at_ms != 0 && t - d->at_ms < KD_CTRL_DELETED_MS && (d->now || !now) &&
                strcmp(d->uid, uid) == 0;
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void deleted_note(struct kd_ctrl *c, const char *uid, bool now)
{
    if (uid == NULL || uid[0] == '\0' || strlen(uid) >= sizeof(c->deleted[0].uid))
        return;
    pthread_mutex_lock(&c->mu);
    struct kd_ctrl_deleted *d = &c->deleted[c->deleted_next];
    c->deleted_next = (c->deleted_next + 1) % KD_CTRL_DELETED_MEMO;
    kd_strlcpy(d->uid, uid, sizeof(d->uid));
    d->at_ms = kd_mono_ms();
    d->now = now;
    pthread_mutex_unlock(&c->mu);
}

/* Whether a batch scheduler admits this controller's gangs (Volcano, Kueue). */
static bool delegated(const struct kd_ctrl *c)
{
    return c->o.gang != NULL && !c->o.gang->kdet_admits;
}

/* The batch scheduler's queue for a trial: --gang-queue, else its resource pool. */
static const char *gang_queue(const struct kd_ctrl *c, const json_t *trial)
{
    const char *pool = kd_ctrl_str(trial, "spec", "resources", "resourcePool");
    return c->o.gang_queue != NULL ? c->o.gang_queue : pool != NULL && pool[0] ? pool : "default";
}

/*
 * Delete the group object (Volcano's PodGroup) of trial `tname` along with its pods. It is
 * owned by the Trial too, so the garbage collector removes it when the Trial goes; this
 * removes it when the attempt ends. Only backends that create their group object have one.
 */
static void delete_group(struct kd_ctrl *c, const char *ns, const char *tname, const char *run_id)
{
    char name[KD_GANG_NAMELEN], err[KD_ERRLEN] = "";
    if (!delegated(c) || c->o.gang->build_group == NULL || tname == NULL)
        return;
    json_t *t = json_pack("{s:{s:s}}", "metadata", "name", tname);
    struct kd_gang_attempt a = {.trial = t, .run_id = run_id};
    c->o.gang->group_name(&a, name, sizeof(name));
    int r = kd_k8s_delete(c->client, c->o.gang->gvr, ns, name, NULL, NULL, NULL, err);
    if (r == 0)
        KD_INFO("pod group deleted", "namespace=%s group=%s", kd_logq(ns), kd_logq(name));
    else if (r != KD_ENOTFOUND)
        KD_WARN("pod group not deleted", "namespace=%s group=%s err=%s detail=%s", kd_logq(ns),
                kd_logq(name), kd_err_name(r), kd_logq(err));
    json_decref(t);
}

/* Delete the pods; `now`: with gracePeriodSeconds 0 (a kill: no time to checkpoint). */
static int delete_pods(struct kd_ctrl *c, json_t *pods, bool now)
{
    int rc = 0;
    size_t i;
    json_t *p, *deleted = NULL;
    struct kd_k8s_delete_opts at_once = {.has_grace_period = true, .grace_period_seconds = 0};
    json_array_foreach(pods, i, p)
    {
        json_t *grace =
            json_object_get(json_object_get(p, "metadata"), "deletionGracePeriodSeconds");
        if (kd_ctrl_str(p, "metadata", "deletionTimestamp", NULL) != NULL &&
            (!now || (json_is_integer(grace) && json_integer_value(grace) == 0)))
            continue;
        const char *uid = kd_k8s_meta_str(p, "uid");
        if (deleted_lately(c, uid, now))
            continue; /* its deletion is on its way to the cache */
        int r = kd_k8s_delete(c->client, &KD_K8S_PODS, kd_k8s_meta_str(p, "namespace"),
                              kd_k8s_meta_str(p, "name"), now ? &at_once : NULL, NULL, NULL, NULL);
        if (r == 0 || r == KD_ENOTFOUND)
            deleted_note(c, uid, now);
        if (r == 0)
            KD_INFO("pod deleted", "pod=%s", kd_logq(kd_k8s_meta_str(p, "name")));
        if (r != 0 && r != KD_ENOTFOUND && rc == 0)
            rc = r;
        if (r == 0)
            deleted = p;
    }
    if (deleted != NULL) /* the attempt ends: its group object goes with its pods */
        delete_group(c, kd_k8s_meta_str(deleted, "namespace"),
                     kd_ctrl_str(deleted, "metadata", "labels", KD_POD_LABEL_TRIAL),
                     kd_ctrl_str(deleted, "metadata", "labels", KD_POD_LABEL_RUN));
    return rc;
}

static int delete_all(struct kd_ctrl *c, json_t *pods)
{
    return delete_pods(c, pods, false);
}

static json_t *pods_of(struct kd_ctrl *c, const json_t *trial)
{
    json_t *all = kd_k8s_cache_by_label(kd_k8s_informer_cache(c->pods), KD_POD_LABEL_TRIAL,
                                        kd_k8s_meta_str(trial, "name"));
    json_t *out = json_array();
    const char *ns = kd_k8s_meta_str(trial, "namespace") ?: "";
    const char *uid = kd_k8s_meta_str(trial, "uid") ?: "";
    size_t i;
    json_t *p;
    json_array_foreach(all, i, p)
    {
        if (strcmp(kd_k8s_meta_str(p, "namespace") ?: "", ns) != 0)
            continue;
        bool mine = false;
        size_t k;
        json_t *r;
        json_array_foreach(json_object_get(json_object_get(p, "metadata"), "ownerReferences"), k, r)
        {
            if (strcmp(json_string_value(json_object_get(r, "uid")) ?: "", uid) == 0)
                mine = true;
        }
        if (mine)
            json_array_append(out, p);
    }
    json_decref(all);
    return out;
}

/* Whether condition `type` is True in a Trial's status. */
static bool condition_true(const json_t *tstatus, const char *type)
{
    bool yes = false;
    size_t i;
    json_t *cnd;
    json_array_foreach(json_object_get(tstatus, "conditions"), i, cnd)
    {
        if (strcmp(json_string_value(json_object_get(cnd, "type")) ?: "", type) == 0 &&
            strcmp(json_string_value(json_object_get(cnd, "status")) ?: "", "True") == 0)
            yes = true;
    }
    return yes;
}

/* The reason of condition `type` in a Trial's status, "" when it has none, NULL when absent. */
static const char *condition_reason(const json_t *tstatus, const char *type)
{
    const char *why = NULL;
    size_t i;
    json_t *cnd;
    json_array_foreach(json_object_get(tstatus, "conditions"), i, cnd)
    {
        if (strcmp(json_string_value(json_object_get(cnd, "type")) ?: "", type) == 0)
            why = json_string_value(json_object_get(cnd, "reason")) ?: "";
    }
    return why;
}

/*
 * The conditions of a trial that has ended (state s, terminal), written into
 * `status`: Scheduled=True (Admitted) when it ever ran, else Scheduled=False
 * (TrialEnded), so that no stale Scheduled=False/Waiting outlives the queue;
 * an Idle=True becomes False (TrialEnded). Builds on status's own conditions
 * when it has some already (kd_ctrl_set_condition starts from the old ones).
 */
static void end_conditions(const struct kd_ctrl *c, const json_t *trial, json_t *status,
                           enum kd_trial_state s)
{
    const json_t *tstatus = json_object_get(trial, "status");
    json_int_t gen =
        json_integer_value(json_object_get(json_object_get(trial, "metadata"), "generation"));
    char msg[160];
    if (!kd_trial_state_terminal(s))
        return;
    const json_t *cur = json_object_get(status, "conditions") != NULL ? status : tstatus;
    const char *why = condition_reason(cur, "Scheduled");
    /* With a batch scheduler, pods exist (and startTime is set) while it has not admitted them:
     * Scheduled=False with its reason. A trial that ended then was never admitted (and once
     * that says TrialEnded, the repair of an ended trial's conditions keeps it). */
    bool batch_waiting = delegated(c) && why != NULL && !condition_true(cur, "Scheduled") &&
                         json_object_get(tstatus, "latestValidation") == NULL;
    bool ran = !batch_waiting && (json_object_get(tstatus, "startTime") != NULL ||
                                  json_object_get(status, "startTime") != NULL ||
                                  json_object_get(tstatus, "latestValidation") != NULL ||
                                  condition_true(cur, "Scheduled"));
    const char *by = delegated(c) ? c->o.gang->name : "the kdet scheduler";
    if (ran && !condition_true(cur, "Scheduled")) {
        snprintf(msg, sizeof(msg), "admitted by %s", by);
        kd_ctrl_set_condition(status, cur, "Scheduled", true, "Admitted", msg, gen);
    } else if (!ran && strcmp(why ?: "", "TrialEnded") != 0) {
        snprintf(msg, sizeof(msg), "the trial ended before %s admitted it", by);
        kd_ctrl_set_condition(status, cur, "Scheduled", false, "TrialEnded", msg, gen);
    }
    cur = json_object_get(status, "conditions") != NULL ? status : tstatus;
    if (condition_true(cur, KD_TRIAL_COND_IDLE))
        kd_ctrl_set_condition(status, cur, KD_TRIAL_COND_IDLE, false, "TrialEnded",
                              "the trial ended", gen);
}

/* Merge patch of the trial's status with `status` (only the fields given); a terminal state
 * brings its conditions up to date (end_conditions). */
static int set_status(struct kd_ctrl *c, const json_t *trial, json_t *status, char *err)
{
    int rc = 0;
    json_t *old = json_object_get(trial, "status");
    bool same = true;
    const char *k;
    json_t *v;
    enum kd_trial_state s;
    if (kd_trial_state_parse(json_string_value(json_object_get(status, "state")), &s))
        end_conditions(c, trial, status, s);
    json_object_foreach(status, k, v)
    {
        if (!json_equal(v, json_object_get(old, k)))
            same = false;
    }
    if (!same)
        rc = kd_ctrl_patch_status(c, &KD_K8S_TRIALS, trial, status, err);
    return rc;
}

static json_t *state_status(const json_t *trial, enum kd_trial_state s, const char *message)
{
    char ts[40];
    json_t *st = json_pack("{s:s,s:s,s:I}", "state", kd_trial_state_name(s), "message",
                           message != NULL ? message : "", "observedGeneration",
                           (json_int_t)json_integer_value(
                               json_object_get(json_object_get(trial, "metadata"), "generation")));
    if (s == KD_TRIAL_COMPLETED) {
        json_object_set_new(st, "progress", kd_ctrl_number(1.0));
        json_object_set_new(st, "progressPercent", json_string("100%"));
    }
    if (kd_trial_state_terminal(s) && kd_ctrl_str(trial, "status", "endTime", NULL) == NULL)
        json_object_set_new(st, "endTime",
                            json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
    return st;
}

static void new_run_id(const char *trial, char *buf, size_t len)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint64_t)kd_mono_ns() ^ (uint64_t)kd_wall_ms() << 20;
    (void)trial;
    snprintf(buf, len, "%016" PRIx64, r);
}

/* The reason of a true EarlyExit condition in a Trial's status, or NULL. */
static const char *early_exit_reason(const json_t *tstatus)
{
    const char *why = NULL;
    size_t i;
    json_t *cnd;
    json_array_foreach(json_object_get(tstatus, "conditions"), i, cnd)
    {
        if (why == NULL &&
            strcmp(json_string_value(json_object_get(cnd, "type")) ?: "", "EarlyExit") == 0 &&
            strcmp(json_string_value(json_object_get(cnd, "status")) ?: "", "True") == 0)
            why = json_string_value(json_object_get(cnd, "reason")) ?: "Errored";
    }
    return why;
}

/* The experiment was killed (det experiment kill): pods go at once, no checkpoint. */
static bool killed(const json_t *exp)
{
    return kd_ctrl_str(exp, "metadata", "annotations", KD_TRIAL_KILL_ANNOTATION) != NULL;
}

/*
 * How long a trial waits at its target with its pods before they are
 * released: --idle-release-after, else $KDET_IDLE_RELEASE_AFTER seconds,
 * else the default. The environment is read on
 * each use (cheap), warned about once when invalid.
 */
static long idle_release_ms(const struct kd_ctrl *c)
{
    static atomic_bool warned;
    long ms = KD_TRIAL_IDLE_RELEASE_DEFAULT_MS;
    const char *v = getenv("KDET_IDLE_RELEASE_AFTER");
    if (c->o.idle_release_set)
        return c->o.idle_release_ms;
    if (v != NULL && !kd_trial_idle_release_parse(v, &ms) && !atomic_exchange(&warned, true))
        KD_WARN("ignoring KDET_IDLE_RELEASE_AFTER", "value=%s detail=%s default_s=%ld", kd_logq(v),
                kd_logq("must be a whole number of seconds >= 0"),
                (long)(KD_TRIAL_IDLE_RELEASE_DEFAULT_MS / 1000));
    return ms;
}

/* A status of an ACTIVE trial that waits for the searcher without pods (GPUs released). */
static json_t *idle_status(const json_t *trial, const json_t *tstatus, json_int_t target,
                           json_int_t gen, bool releasing)
{
    char msg[200];
    json_t *st = state_status(trial, KD_TRIAL_ACTIVE,
                              releasing ? "idle: waiting for the searcher; releasing the GPUs "
                                          "(the workers checkpoint and exit)"
                                        : "idle: waiting for the searcher; GPUs released");
    snprintf(msg, sizeof(msg),
             "reached its target of %" JSON_INTEGER_FORMAT
             " and waits for the searcher's next operation without pods",
             target);
    kd_ctrl_set_condition(st, tstatus, KD_TRIAL_COND_IDLE, true, "WaitingForSearcher", msg, gen);
    if (!releasing)
        json_object_set_new(st, "pods", json_array());
    return st;
}

/* Set Idle=False in `st` when the trial was idle (it trains again, or ends). */
static void clear_idle(json_t *st, const json_t *tstatus, const char *reason, const char *msg,
                       json_int_t gen)
{
    if (condition_true(tstatus, KD_TRIAL_COND_IDLE))
        kd_ctrl_set_condition(st, tstatus, KD_TRIAL_COND_IDLE, false, reason, msg, gen);
}

/*
 * Hand the attempt to the batch scheduler: mark its pods and create its group object (a
 * Volcano PodGroup) before them, so that the batch scheduler never sees a partial gang.
 */
static int create_group(struct kd_ctrl *c, const json_t *trial, const char *run_id, json_t *pods,
                        char *err)
{
    json_t *group = NULL;
    struct kd_gang_attempt a = {
        .trial = trial, .run_id = run_id, .queue = gang_queue(c, trial), .pods = pods};
    int rc = kd_gang_prepare(c->o.gang, &a, pods, &group, err);
    if (rc == 0 && group != NULL) {
        rc = kd_k8s_create(c->client, c->o.gang->gvr, NULL, group, NULL, NULL, err);
        if (rc == KD_EEXIST)
            rc = 0; /* created by an attempt whose pods were not all made; same trial, same shape */
        if (rc == 0)
            KD_INFO("pod group created", "trial=%s group=%s queue=%s scheduler=%s",
                    kd_logq(kd_k8s_meta_str(trial, "name")),
                    kd_logq(kd_k8s_meta_str(group, "name")), kd_logq(a.queue), c->o.gang->name);
    }
    json_decref(group);
    return rc;
}

/*
 * Why the batch scheduler keeps the gang waiting (w->waiting false: it admitted it). Reads
 * the group object (PodGroup, Workload) from the API only while some pod is unbound, and
 * not at all when `fresh` (the pods were just created: the batch scheduler has not looked
 * at them yet).
 */
static void gang_wait(struct kd_ctrl *c, const json_t *trial, json_t *pods, const char *run_id,
                      bool fresh, struct kd_gang_wait *w)
{
    char name[KD_GANG_NAMELEN], err[KD_ERRLEN] = "";
    json_t *group = NULL;
    struct kd_gang_attempt a = {.trial = trial, .run_id = run_id, .pods = pods};
    const char *queue = gang_queue(c, trial);
    memset(w, 0, sizeof(*w));
    if (kd_gang_all_bound(pods))
        return;
    c->o.gang->group_name(&a, name, sizeof(name));
    int r = 0;
    if (fresh)
        group = json_object(); /* no status yet */
    else
        r = kd_k8s_get(c->client, c->o.gang->gvr, kd_k8s_meta_str(trial, "namespace"), name, &group,
                       NULL, err);
    if (r != 0 && r != KD_ENOTFOUND)
        KD_DEBUG("cannot read the pod group", "group=%s err=%s detail=%s", kd_logq(name),
                 kd_err_name(r), kd_logq(err));
    c->o.gang->explain(r == 0 ? group : NULL, pods, name, queue, w);
    json_decref(group);
}

/* Create the pods of an admitted attempt. */
static int start_attempt(struct kd_ctrl *c, const json_t *exp, const json_t *trial,
                         const json_t *cfg, const struct kd_ctrl_admit *ad, const char *run_id,
                         json_t **pods_status, char *err)
{
    int rc = 0;
    json_t *pods = NULL;
    const char *nodes[KD_SCHED_MAX_PODS];
    char latest[256] = "";
    struct kd_pod_opts po = c->o.pod;
    po.context = json_object_get(json_object_get(exp, "spec"), "context");
    for (int r = 0; r < ad->nplace; r++)
        nodes[r] = ad->nodes[r] != NULL && ad->nodes[r][0] != '\0' ? ad->nodes[r] : NULL;
    *pods_status = json_array();
    if (kd_ctrl_api_on(c)) {
        if ((rc = kd_ctrl_wire_trial(c, exp, trial, cfg, latest, sizeof(latest), err)) != 0)
            goto out;
        po.api = true;
        po.latest_checkpoint = latest;
    }
    if ((rc = kd_pod_build(trial, cfg, run_id, nodes, ad->gpus, ad->nplace, &po, &pods, err)) != 0)
        goto out;
    if (delegated(c) && (rc = create_group(c, trial, run_id, pods, err)) != 0)
        goto out;
    if (ad->nplace > 1) {
        char svc[32];
        kd_pod_service_name(kd_k8s_meta_str(trial, "uid"), svc, sizeof(svc));
        json_t *s = json_pack(
            "{s:s,s:s,s:{s:s,s:s,s:{s:s},s:[{s:s,s:s,s:s,s:s,s:b,s:b}]},s:{s:s,s:b,s:{s:s},s:[{s:s,"
            "s:i}]}}",
            "apiVersion", "v1", "kind", "Service", "metadata", "name", svc, "namespace",
            kd_k8s_meta_str(trial, "namespace"), "labels", KD_POD_LABEL_TRIAL,
            kd_k8s_meta_str(trial, "name"), "ownerReferences", "apiVersion", "kdet.io/v1alpha1",
            "kind", "Trial", "name", kd_k8s_meta_str(trial, "name"), "uid",
            kd_k8s_meta_str(trial, "uid"), "controller", 1, "blockOwnerDeletion", 1, "spec",
            "clusterIP", "None", "publishNotReadyAddresses", 1, "selector", KD_POD_LABEL_TRIAL,
            kd_k8s_meta_str(trial, "name"), "ports", "name", "rendezvous", "port",
            c->o.pod.master_port > 0 ? c->o.pod.master_port : KD_POD_DEFAULT_PORT);
        rc = kd_k8s_create(c->client, &KD_K8S_SERVICES, NULL, s, NULL, NULL, err);
        json_decref(s);
        if (rc == KD_EEXIST)
            rc = 0;
        if (rc != 0)
            goto out;
    }
    size_t i;
    json_t *p;
    json_array_foreach(pods, i, p)
    {
        rc = kd_k8s_create(c->client, &KD_K8S_PODS, NULL, p, NULL, NULL, err);
        if (rc == KD_EEXIST)
            rc = 0;
        if (rc != 0)
            goto out;
        json_array_append_new(*pods_status,
                              json_pack("{s:s,s:s,s:s,s:i,s:i}", "name", kd_k8s_meta_str(p, "name"),
                                        "node", ad->nodes[i] ?: "", "phase", "Pending", "slots",
                                        ad->gpus, "rankOffset",
                                        (int)i * (ad->gpus > 0 ? ad->gpus : 1)));
    }
    KD_INFO("trial pods created", "trial=%s pods=%d gpus_per_pod=%d run_id=%s",
            kd_logq(kd_k8s_meta_str(trial, "name")), ad->nplace, ad->gpus, run_id);
out:
    json_decref(pods);
    return rc;
}

static json_t *pods_status(json_t *pods)
{
    json_t *arr = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(pods, i, p)
    {
        json_t *e = json_pack("{s:s,s:s}", "name", kd_k8s_meta_str(p, "name"), "phase",
                              kd_ctrl_str(p, "status", "phase", NULL) ?: "Pending");
        const char *node = kd_ctrl_str(p, "spec", "nodeName", NULL);
        if (node != NULL)
            json_object_set_new(e, "node", json_string(node));
        json_array_append_new(arr, e);
    }
    return arr;
}

/* Pods of the trial according to the API server (not the cache). */
static int api_pod_count(struct kd_ctrl *c, const json_t *trial, size_t *n, char *err)
{
    char sel[320];
    json_t *list = NULL;
    snprintf(sel, sizeof(sel), "%s=%s", KD_POD_LABEL_TRIAL, kd_k8s_meta_str(trial, "name"));
    struct kd_k8s_query q = {.label_selector = sel};
    int rc = kd_k8s_list(c->client, &KD_K8S_PODS, kd_k8s_meta_str(trial, "namespace"), &q, &list,
                         NULL, err);
    *n = json_array_size(json_object_get(list, "items"));
    json_decref(list);
    return rc;
}

int kd_ctrl_reconcile_trial(const char *key, long *requeue_after_ms, void *ud)
{
    struct kd_ctrl *c = ud;
    int rc = 0;
    json_t *trial = NULL, *exp = NULL, *pods = NULL, *cfg = NULL, *status = NULL, *pst = NULL;
    char err[KD_ERRLEN] = "";
    char ekey[600];
    uint64_t seed;
    if (!kd_ctrl_acting(c)) {
        *requeue_after_ms = 2000;
        goto out;
    }
    if (kd_k8s_cache_get(kd_k8s_informer_cache(c->trials), key, &trial) != 0) {
        kd_ctrl_kick(c);
        goto out;
    }
    if (kd_ctrl_str(trial, "metadata", "deletionTimestamp", NULL) != NULL)
        goto out;
    const char *tname = kd_k8s_meta_str(trial, "name");
    json_int_t gen =
        json_integer_value(json_object_get(json_object_get(trial, "metadata"), "generation"));
    snprintf(ekey, sizeof(ekey), "%s/%s", kd_k8s_meta_str(trial, "namespace"),
             kd_ctrl_str(trial, "spec", "experiment", NULL) ?: "");
    if (kd_k8s_cache_get(kd_k8s_informer_cache(c->exps), ekey, &exp) != 0) {
        *requeue_after_ms = 5000; /* the experiment is not in the cache (yet) */
        goto out;
    }
    pods = pods_of(c, trial);
    struct attempt a;
    summarize(pods, &a);
    if (a.npods > 0)
        kd_ctrl_admission_drop(c, key); /* the pods now hold (or no longer hold) the GPUs */
    enum kd_trial_state cur;
    if (!kd_trial_state_parse(kd_ctrl_str(trial, "status", "state", NULL), &cur))
        cur = KD_TRIAL_QUEUED;
    const json_t *tstatus = json_object_get(trial, "status");

    if (kd_trial_state_terminal(cur)) {
        rc = delete_pods(c, pods, killed(exp));
        /* A trial that ended before its conditions were kept consistent: repair them. */
        status = json_object();
        end_conditions(c, trial, status, cur);
        if (rc == 0 && json_object_size(status) > 0)
            rc = set_status(c, trial, status, err);
        goto out;
    }
    /* With the API, a worker may report an early exit (condition EarlyExit): the trial ends
     * there, whatever its pods do next, and is never restarted. The condition may have been
     * written just before a pod failed: re-read the Trial before treating a failure. */
    char early[64] = "";
    if (kd_ctrl_api_on(c)) {
        json_t *fresh = NULL;
        const char *w = early_exit_reason(tstatus);
        if (w == NULL && a.failed > 0 &&
            kd_k8s_get(c->client, &KD_K8S_TRIALS, kd_k8s_meta_str(trial, "namespace"), tname,
                       &fresh, NULL, NULL) == 0)
            w = early_exit_reason(json_object_get(fresh, "status"));
        if (w != NULL)
            kd_strlcpy(early, w, sizeof(early));
        json_decref(fresh);
    }
    if (early[0] != '\0') {
        char msg[300];
        bool canceled = strcmp(early, "UserCanceled") == 0 || strcmp(early, "user_canceled") == 0;
        snprintf(msg, sizeof(msg), "the trial exited early: %s", early);
        status = state_status(trial, canceled ? KD_TRIAL_CANCELED : KD_TRIAL_ERROR, msg);
        json_object_set_new(status, "pods", json_array());
        KD_INFO("trial exited early", "trial=%s reason=%s", kd_logq(key), kd_logq(early));
        if ((rc = set_status(c, trial, status, err)) == 0)
            rc = delete_all(c, pods);
        kd_ctrl_kick(c);
        goto out;
    }
    const char *estate = kd_ctrl_str(exp, "status", "state", NULL) ?: "";
    if (strcmp(estate, "ERROR") == 0 &&
        json_integer_value(json_object_get(json_object_get(exp, "status"), "observedGeneration")) !=
            json_integer_value(json_object_get(json_object_get(exp, "metadata"), "generation")))
        estate = ""; /* an ERROR for an older spec (a fixed configuration is being retried) */
    bool stop = json_is_true(json_object_get(json_object_get(exp, "spec"), "canceled")) ||
                strcmp(estate, "STOPPING_CANCELED") == 0 || strcmp(estate, "STOPPING_ERROR") == 0 ||
                strcmp(estate, "CANCELED") == 0 || strcmp(estate, "ERROR") == 0 ||
                strcmp(estate, "COMPLETED") == 0 ||
                kd_ctrl_str(exp, "metadata", "deletionTimestamp", NULL) != NULL;
    bool paused = json_is_true(json_object_get(json_object_get(trial, "spec"), "paused")) ||
                  json_is_true(json_object_get(json_object_get(exp, "spec"), "paused"));
    if (stop || paused) {
        bool kill = stop && killed(exp);
        if ((rc = delete_pods(c, pods, kill)) != 0)
            goto out;
        if (a.npods > 0) {
            status = state_status(trial,
                                  kill   ? KD_TRIAL_STOPPING_KILLED
                                  : stop ? KD_TRIAL_STOPPING_CANCELED
                                         : cur,
                                  kill   ? "stopping: the experiment was killed"
                                  : stop ? "stopping: the experiment was canceled"
                                         : "pausing: deleting the trial's pods");
            *requeue_after_ms = 1000;
        } else {
            status = state_status(trial, stop ? KD_TRIAL_CANCELED : KD_TRIAL_PAUSED,
                                  kill   ? "the experiment was killed"
                                  : stop ? "the experiment was canceled"
                                         : "paused");
            json_object_set_new(status, "pods", json_array());
            clear_idle(status, tstatus, stop ? "Stopped" : "Paused",
                       stop ? "the trial was stopped" : "the trial was paused", gen);
        }
        rc = set_status(c, trial, status, err);
        kd_ctrl_kick(c);
        goto out;
    }
    if ((rc = kd_ctrl_exp_config(c, exp, &cfg, &seed, err)) != 0)
        goto out;
    json_int_t target0 =
        json_integer_value(json_object_get(json_object_get(trial, "spec"), "validateAfter"));
    json_int_t reached0 = json_integer_value(
        json_object_get(json_object_get(tstatus, "latestValidation"), "batches"));
    bool closed0 = json_is_true(json_object_get(json_object_get(trial, "spec"), "closed"));
    if (strcmp(estate, "STOPPING_COMPLETED") == 0 && a.running == 0) {
        /* The search is over: nothing new starts; a trial that reached its target is done. */
        bool done = target0 > 0 && reached0 >= target0;
        status = state_status(trial, done ? KD_TRIAL_COMPLETED : KD_TRIAL_CANCELED,
                              done ? "completed" : "the search ended before this trial ran");
        json_object_set_new(status, "pods", json_array());
        clear_idle(status, tstatus, "Closed", "the search ended", gen);
        if ((rc = set_status(c, trial, status, err)) == 0)
            rc = delete_all(c, pods);
        goto out;
    }
    int max_restarts = (int)json_integer_value(json_object_get(cfg, "max_restarts"));
    int restarts = (int)json_integer_value(json_object_get(tstatus, "restarts"));

    /* Preempted by the scheduler: stop the attempt and queue the trial again. */
    pthread_mutex_lock(&c->mu);
    json_t *pre = json_incref(json_object_get(c->preempt, key));
    json_object_del(c->preempt, key);
    json_t *why = json_incref(json_object_get(c->reasons, key));
    pthread_mutex_unlock(&c->mu);
    if (pre != NULL && cur == KD_TRIAL_ACTIVE) {
        status = state_status(trial, KD_TRIAL_QUEUED, json_string_value(pre));
        kd_ctrl_set_condition(status, tstatus, "Preempted", true, "Preempted",
                              json_string_value(pre), gen);
        KD_INFO("trial preempted", "trial=%s reason=%s", kd_logq(key),
                kd_logq(json_string_value(pre)));
        json_decref(pre);
        json_object_set_new(status, "pods", json_array());
        if ((rc = set_status(c, trial, status, err)) == 0)
            rc = delete_all(c, pods);
        *requeue_after_ms = 1000;
        json_decref(why);
        goto out;
    }
    json_decref(pre);

    if (cur == KD_TRIAL_PAUSED || cur == KD_TRIAL_STOPPING_CANCELED ||
        cur == KD_TRIAL_STOPPING_KILLED || cur == KD_TRIAL_STOPPING_ERROR ||
        cur == KD_TRIAL_STOPPING_COMPLETED)
        cur = KD_TRIAL_QUEUED; /* resumed (or a stop that no longer applies) */

    if (cur == KD_TRIAL_QUEUED) {
        struct kd_ctrl_admit ad;
        if (a.npods > 0 && (a.failed > 0 || a.succeeded > 0 || a.deleting > 0)) {
            /* Leftovers of an earlier attempt: remove them before a new one starts. But the
             * cache may not show yet that this attempt started (ACTIVE): ask the API server,
             * so that a fast failure or success of the current attempt is never discarded. */
            json_t *fresh = NULL;
            rc = kd_k8s_get(c->client, &KD_K8S_TRIALS, kd_k8s_meta_str(trial, "namespace"), tname,
                            &fresh, NULL, err);
            bool active =
                rc == 0 && strcmp(kd_ctrl_str(fresh, "status", "state", NULL) ?: "", "ACTIVE") == 0;
            json_decref(fresh);
            if (rc == 0 && !active)
                rc = delete_all(c, pods);
            *requeue_after_ms = active ? 200 : 1000;
        } else if (a.npods > 0) {
            /* Pods of an attempt whose status write was lost: adopt them. */
            char ts[40];
            status = state_status(trial, KD_TRIAL_ACTIVE, "running");
            json_object_set_new(status, "pods", pods_status(pods));
            if (kd_ctrl_str(trial, "status", "startTime", NULL) == NULL)
                json_object_set_new(status, "startTime",
                                    json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
            kd_ctrl_set_condition(status, tstatus, "Scheduled", true, "Admitted",
                                  "admitted by the kdet scheduler", gen);
            rc = set_status(c, trial, status, err);
        } else if (kd_ctrl_api_on(c) && kd_trial_at_target(target0, reached0, closed0)) {
            /* Paused or preempted at its target: nothing to train until the searcher raises
             * the target, so wait without pods (and give back an admission made meanwhile). */
            if (kd_ctrl_admission(c, key, &ad))
                kd_ctrl_admission_drop(c, key);
            status = idle_status(trial, tstatus, target0, gen, false);
            rc = set_status(c, trial, status, err);
            kd_ctrl_kick(c);
        } else if (kd_ctrl_admission(c, key, &ad)) {
            char run_id[64];
            size_t existing = 0;
            /* The pod cache may lag behind our own creates: ask the API server. */
            if ((rc = api_pod_count(c, trial, &existing, err)) != 0 || existing > 0) {
                kd_ctrl_admission_unuse(c, key);
                *requeue_after_ms = 500;
                json_decref(why);
                goto out;
            }
            new_run_id(tname, run_id, sizeof(run_id));
            if ((rc = start_attempt(c, exp, trial, cfg, &ad, run_id, &pst, err)) != 0) {
                kd_ctrl_admission_unuse(c, key);
                status = state_status(trial, KD_TRIAL_QUEUED, err);
                (void)set_status(c, trial, status, NULL);
                if (rc == KD_EINVALID) {
                    json_decref(status);
                    status = state_status(trial, KD_TRIAL_ERROR, err);
                    rc = set_status(c, trial, status, err);
                }
                json_decref(why);
                goto out;
            }
            struct kd_gang_wait gw = {0};
            if (delegated(c))
                gang_wait(c, trial, pst, run_id, true, &gw);
            status = state_status(trial, KD_TRIAL_ACTIVE, gw.waiting ? gw.message : "pods created");
            json_object_set_new(status, "pods", pst);
            pst = NULL;
            char ts[40];
            if (kd_ctrl_str(trial, "status", "startTime", NULL) == NULL)
                json_object_set_new(status, "startTime",
                                    json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
            if (gw.waiting)
                kd_ctrl_set_condition(status, tstatus, "Scheduled", false, gw.reason, gw.message,
                                      gen);
            else
                kd_ctrl_set_condition(status, tstatus, "Scheduled", true, "Admitted",
                                      "admitted by the kdet scheduler", gen);
            rc = set_status(c, trial, status, err);
        } else {
            const char *reason = json_string_value(json_object_get(why, "reason"));
            const char *decision = json_string_value(json_object_get(why, "decision"));
            bool never = decision != NULL && strcmp(decision, "never") == 0;
            status = state_status(trial, KD_TRIAL_QUEUED,
                                  reason != NULL ? reason : "waiting for the scheduler");
            if (reason != NULL)
                kd_ctrl_set_condition(status, tstatus, "Scheduled", false,
                                      never ? "Unschedulable" : "Waiting", reason, gen);
            rc = set_status(c, trial, status, err);
            kd_ctrl_kick(c);
        }
        json_decref(why);
        goto out;
    }
    json_decref(why);

    /* ACTIVE: follow the attempt. */
    if (a.failed > 0) {
        if (kd_trial_on_failure(restarts, max_restarts) == KD_TRIAL_RESTART) {
            char msg[700];
            snprintf(msg, sizeof(msg), "%s; restart %d of max_restarts=%d", a.failure, restarts + 1,
                     max_restarts);
            status = state_status(trial, KD_TRIAL_QUEUED, msg);
            json_object_set_new(status, "restarts", json_integer(restarts + 1));
            json_object_set_new(status, "pods", json_array());
            KD_WARN("trial attempt failed", "trial=%s restarts=%d max_restarts=%d detail=%s",
                    kd_logq(key), restarts + 1, max_restarts, kd_logq(a.failure));
            if ((rc = set_status(c, trial, status, err)) == 0)
                rc = delete_all(c, pods);
            *requeue_after_ms = kd_trial_restart_backoff_ms(restarts);
        } else {
            char msg[700];
            snprintf(msg, sizeof(msg), "%s; max_restarts=%d used up", a.failure, max_restarts);
            status = state_status(trial, KD_TRIAL_ERROR, msg);
            KD_WARN("trial failed", "trial=%s detail=%s", kd_logq(key), kd_logq(msg));
            if ((rc = set_status(c, trial, status, err)) == 0)
                rc = delete_all(c, pods);
        }
        kd_ctrl_kick(c);
        goto out;
    }
    json_int_t target =
        json_integer_value(json_object_get(json_object_get(trial, "spec"), "validateAfter"));
    bool closed = json_is_true(json_object_get(json_object_get(trial, "spec"), "closed"));
    json_int_t reached = json_integer_value(
        json_object_get(json_object_get(tstatus, "latestValidation"), "batches"));
    if (a.npods > 0 && a.succeeded == a.npods && !kd_ctrl_api_on(c)) {
        if (reached < a.target) {
            /* Interim until metrics flow: exit 0 means the attempt reached the target it was
             * started for; it is recorded with no metric value. */
            status = state_status(trial, KD_TRIAL_ACTIVE,
                                  "reached the searcher's target; waiting for its next operation");
            json_object_set_new(status, "latestValidation",
                                json_pack("{s:s,s:I}", "metric",
                                          kd_ctrl_str(cfg, "searcher", "metric", NULL) ?: "",
                                          "batches", a.target));
            json_object_set_new(status, "pods", pods_status(pods));
            rc = set_status(c, trial, status, err);
            *requeue_after_ms = 1000;
            goto out;
        }
    }
    if (a.running == 0 && target > 0 && reached >= target &&
        (a.npods == 0 || a.succeeded == a.npods)) {
        if (closed) {
            status = state_status(trial, KD_TRIAL_COMPLETED, "completed");
            json_object_set_new(status, "pods", json_array());
            clear_idle(status, tstatus, "Closed", "the searcher closed the trial", gen);
            if ((rc = set_status(c, trial, status, err)) == 0)
                rc = delete_all(c, pods);
            KD_INFO("trial completed", "trial=%s", kd_logq(key));
            kd_ctrl_kick(c);
        } else if (kd_ctrl_api_on(c)) {
            /* The workers checkpointed and exited while waiting for the searcher (or the pods
             * are gone): the trial waits without pods until the searcher decides. */
            status = idle_status(trial, tstatus, target, gen, false);
            if ((rc = set_status(c, trial, status, err)) == 0)
                rc = delete_all(c, pods);
            if (rc == 0 && a.npods > 0) {
                KD_INFO("idle trial released its pods", "trial=%s target=%" JSON_INTEGER_FORMAT,
                        kd_logq(key), target);
                kd_ctrl_kick(c);
            }
            *requeue_after_ms = c->o.resync_ms;
        } else {
            *requeue_after_ms = c->o.resync_ms; /* waiting for the searcher's next operation */
        }
        goto out;
    }
    long idle_in_ms = -1; /* >= 0: within the grace, look again then */
    if (kd_ctrl_api_on(c) && a.running > 0 && kd_trial_at_target(target, reached, closed)) {
        /* The workers wait at their target for the searcher. After a grace (the searcher
         * usually answers at once), Idle tells them to checkpoint and exit, so that queued
         * trials get the GPUs. Counted from the validation's time: level-triggered. */
        bool idle = condition_true(tstatus, KD_TRIAL_COND_IDLE);
        int64_t since = 0, now = kd_wall_ms();
        if (!idle) {
            const char *vt = kd_ctrl_str(tstatus, "latestValidation", "time", NULL);
            long grace = idle_release_ms(c);
            if (vt == NULL || kd_time_parse_rfc3339(vt, &since) != 0)
                since = 0;
            if (now - since < grace)
                idle_in_ms = (long)(since + grace - now) + 100;
            else
                KD_INFO("trial idle: releasing its GPUs",
                        "trial=%s target=%" JSON_INTEGER_FORMAT " waited_ms=%lld", kd_logq(key),
                        target, (long long)(now - since));
        }
        if (idle_in_ms < 0) {
            status = idle_status(trial, tstatus, target, gen, true);
            json_object_set_new(status, "pods", pods_status(pods));
            rc = set_status(c, trial, status, err);
            *requeue_after_ms = c->o.resync_ms; /* the pods' exit wakes the reconciler */
            goto out;
        }
    }
    char promoted[300];
    bool was_idle = condition_true(tstatus, KD_TRIAL_COND_IDLE);
    snprintf(promoted, sizeof(promoted),
             "promoted by the searcher to %" JSON_INTEGER_FORMAT
             "; queued to resume from its latest checkpoint",
             target);
    if (was_idle && a.running == 0)
        KD_INFO("idle trial promoted: queued again", "trial=%s target=%" JSON_INTEGER_FORMAT,
                kd_logq(key), target);
    if (a.npods > 0 && a.succeeded == a.npods) {
        /* The searcher asked for more training: a new attempt continues the trial. */
        status = state_status(trial, KD_TRIAL_QUEUED,
                              was_idle ? promoted : "more training asked by the searcher");
        json_object_set_new(status, "pods", json_array());
        clear_idle(status, tstatus, "Promoted", "the searcher raised the trial's target", gen);
        if ((rc = set_status(c, trial, status, err)) == 0)
            rc = delete_all(c, pods);
        kd_ctrl_kick(c);
        goto out;
    }
    if (a.npods == 0) {
        /* Pods just created may not be in the cache yet: ask the API server. */
        size_t n = 0;
        if ((rc = api_pod_count(c, trial, &n, err)) != 0)
            goto out;
        if (n > 0) {
            *requeue_after_ms = 500;
            goto out;
        }
        status = state_status(trial, KD_TRIAL_QUEUED,
                              was_idle ? promoted : "the trial's pods disappeared; queued again");
        json_object_set_new(status, "pods", json_array());
        clear_idle(status, tstatus, "Promoted", "the searcher raised the trial's target", gen);
        rc = set_status(c, trial, status, err);
        kd_ctrl_kick(c);
        goto out;
    }
    struct kd_gang_wait gw = {0};
    if (delegated(c))
        gang_wait(c, trial, pods, a.run_id, false, &gw);
    status = state_status(trial, KD_TRIAL_ACTIVE, gw.waiting ? gw.message : "running");
    json_object_set_new(status, "pods", pods_status(pods));
    clear_idle(status, tstatus, closed ? "Closed" : "Promoted",
               closed ? "the searcher closed the trial" : "the searcher raised the trial's target",
               gen);
    if (gw.waiting) {
        kd_ctrl_set_condition(status, tstatus, "Scheduled", false, gw.reason, gw.message, gen);
    } else if (delegated(c) && !condition_true(tstatus, "Scheduled") && kd_gang_all_bound(pods)) {
        /* Admitted once every pod is bound (not when the group went away with a cancel). */
        char msg[128];
        snprintf(msg, sizeof(msg), "admitted by %s", c->o.gang->name);
        kd_ctrl_set_condition(status, tstatus, "Scheduled", true, "Admitted", msg, gen);
    }
    rc = set_status(c, trial, status, err);
    if (idle_in_ms >= 0)
        *requeue_after_ms = idle_in_ms;
    if (gw.waiting && (*requeue_after_ms <= 0 || *requeue_after_ms > 3000))
        *requeue_after_ms = 3000; /* the group's status is read, not watched */
out:
    if (rc != 0 && rc != KD_ECONFLICT)
        KD_WARN("trial reconcile failed", "trial=%s err=%s detail=%s", kd_logq(key),
                kd_err_name(rc), kd_logq(err));
    json_decref(trial);
    json_decref(exp);
    json_decref(pods);
    json_decref(cfg);
    json_decref(status);
    json_decref(pst);
    return rc;
}
