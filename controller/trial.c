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

/* At most this much of a failed pod's output goes into the Trial's status.message. */
#define KD_TRIAL_OUTPUT_MAX 1024

struct attempt {
    int npods, running, succeeded, failed, deleting;
    json_int_t target; /* the validateAfter the attempt was started for (smallest over its pods) */
    char run_id[64];
    char failure[512];
    char output[KD_TRIAL_OUTPUT_MAX + 1]; /* the failed pod's last lines of output, or "" */
};

/*
 * The last lines of text (a failed container's terminated.message: with
 * terminationMessagePolicy FallbackToLogsOnError the kubelet puts the end of its log there),
 * at most KD_TRIAL_OUTPUT_MAX bytes, starting at a line when one starts in the window, with
 * registered secrets and sensitive key=value pairs redacted. Valid UTF-8 in, valid UTF-8 out.
 */
static void last_lines(const char *text, char *out, size_t outlen)
{
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        n--;
    const char *from = text;
    if (n > KD_TRIAL_OUTPUT_MAX) {
        from = text + n - KD_TRIAL_OUTPUT_MAX;
        const char *nl = memchr(from, '\n', KD_TRIAL_OUTPUT_MAX);
        if (nl != NULL && nl + 1 < text + n)
            from = nl + 1;
        while (((unsigned char)*from & 0xc0) == 0x80) /* not inside a character */
            from++;
    }
    char *cut = kd_xstrndup(from, (size_t)(text + n - from));
    size_t len = kd_redact(cut, out, outlen);
    /* Redaction may have grown it past outlen: do not end inside a character. */
    size_t start = len;
    while (start > 0 && ((unsigned char)out[start - 1] & 0xc0) == 0x80)
        start--;
    if (start > 0 && ((unsigned char)out[start - 1] & 0x80) != 0) {
        unsigned char lead = (unsigned char)out[start - 1];
        size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        if (len - (start - 1) < need)
            out[start - 1] = '\0';
    }
    free(cut);
}

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
                const char *msg = json_string_value(json_object_get(term, "message"));
                if (msg != NULL)
                    last_lines(msg, a->output, sizeof(a->output));
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
    bool batch_waiting = delegated(c) && why != NULL && !kd_ctrl_condition_true(cur, "Scheduled") &&
                         json_object_get(tstatus, "latestValidation") == NULL;
    bool ran = !batch_waiting && (json_object_get(tstatus, "startTime") != NULL ||
                                  json_object_get(status, "startTime") != NULL ||
                                  json_object_get(tstatus, "latestValidation") != NULL ||
                                  kd_ctrl_condition_true(cur, "Scheduled"));
    const char *by = delegated(c) ? c->o.gang->name : "the kdet scheduler";
    if (ran && !kd_ctrl_condition_true(cur, "Scheduled")) {
        snprintf(msg, sizeof(msg), "admitted by %s", by);
        kd_ctrl_set_condition(status, cur, "Scheduled", true, "Admitted", msg, gen);
    } else if (!ran && strcmp(why ?: "", "TrialEnded") != 0) {
        snprintf(msg, sizeof(msg), "the trial ended before %s admitted it", by);
        kd_ctrl_set_condition(status, cur, "Scheduled", false, "TrialEnded", msg, gen);
    }
    cur = json_object_get(status, "conditions") != NULL ? status : tstatus;
    if (kd_ctrl_condition_true(cur, KD_TRIAL_COND_IDLE))
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
    if (kd_ctrl_condition_true(tstatus, KD_TRIAL_COND_IDLE))
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
                         const json_t *cfg, const struct kd_handoff_admit *ad, const char *run_id,
                         json_t **pods_status, char *err)
{
    int rc = 0;
    json_t *pods = NULL;
    const char *nodes[KD_SCHED_MAX_PODS];
    char latest[256] = "";
    struct kd_pod_opts po = c->o.pod;
    const char *excl[KD_SCHED_MAX_EXCLUDE];
    po.context = json_object_get(json_object_get(exp, "spec"), "context");
    po.cpu_slots = ad->cpu;
    po.nexclude = kd_ctrl_excluded_nodes(trial, excl, KD_SCHED_MAX_EXCLUDE);
    po.exclude_nodes = excl;
    for (int r = 0; r < ad->nplace; r++)
        nodes[r] = ad->nodes[r] != NULL && ad->nodes[r][0] != '\0' ? ad->nodes[r] : NULL;
    *pods_status = json_array();
    if (kd_ctrl_api_on(c)) {
        int64_t ids[2] = {0, 0};
        if ((rc = kd_ctrl_wire_trial(c, exp, trial, cfg, latest, sizeof(latest), ids, err)) != 0)
            goto out;
        po.api = true;
        po.controller_ca = c->tls_ca != NULL;
        po.latest_checkpoint = latest;
        po.experiment_int_id = ids[0];
        po.trial_int_id = ids[1];
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

/* What the reconciler read of a trial before deciding: the objects it holds and the facts. */
struct gathered {
    const char *key;
    json_t *trial, *exp, *pods, *cfg; /* owned */
    const json_t *tstatus;
    json_int_t gen;
    struct attempt a;
    char early[64];
    char log_cancel[512];    /* f.log_cancel */
    char log_exclude[600];   /* f.log_exclude */
    char cfg_err[KD_ERRLEN]; /* why there is no configuration (f.cfg_rc) */
    char preempt[KD_SCHED_REASONLEN], reason[KD_SCHED_REASONLEN];
    struct kd_trial_facts f;
};

/* What the trial's status.logPolicies say (f.log_cancel, f.log_exclude). */
static void log_policy_facts(const json_t *trial, struct gathered *g)
{
    const char *nodes[KD_SCHED_MAX_EXCLUDE];
    int n = kd_ctrl_excluded_nodes(trial, nodes, KD_SCHED_MAX_EXCLUDE);
    g->f.log_cancel =
        kd_ctrl_log_cancel(json_object_get(trial, "status"), g->log_cancel, sizeof(g->log_cancel))
            ? g->log_cancel
            : NULL;
    g->log_exclude[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(g->log_exclude);
        snprintf(g->log_exclude + len, sizeof(g->log_exclude) - len, "%s%s", i ? ", " : "",
                 nodes[i]);
    }
    g->f.log_exclude = n > 0 ? g->log_exclude : NULL;
}

/* What the scheduler handed over for trial `key` (copied: the decision holds no lock). */
static void gather_handoff(struct kd_ctrl *c, struct gathered *g)
{
    struct kd_trial_facts *f = &g->f;
    if (kd_handoff_preemption(c->handoff, g->key, g->preempt, sizeof(g->preempt)))
        f->preempted = g->preempt;
    if (kd_handoff_reason(c->handoff, g->key, g->reason, sizeof(g->reason), &f->wait_never))
        f->wait_reason = g->reason;
    f->admitted = kd_handoff_admitted(c->handoff, g->key);
}

/* The facts of the Experiment the trial belongs to (g->exp). */
static void gather_exp(struct kd_ctrl *c, struct gathered *g)
{
    struct kd_trial_facts *f = &g->f;
    uint64_t seed;
    const json_t *est = json_object_get(g->exp, "status");
    f->exp_has_state =
        kd_exp_state_parse(json_string_value(json_object_get(est, "state")), &f->exp_state);
    f->exp_state_current =
        json_integer_value(json_object_get(est, "observedGeneration")) ==
        json_integer_value(json_object_get(json_object_get(g->exp, "metadata"), "generation"));
    f->exp_canceled = json_is_true(json_object_get(json_object_get(g->exp, "spec"), "canceled"));
    f->exp_paused = json_is_true(json_object_get(json_object_get(g->exp, "spec"), "paused"));
    f->exp_deleting = kd_ctrl_str(g->exp, "metadata", "deletionTimestamp", NULL) != NULL;
    f->exp_killed = killed(g->exp);
    if (kd_trial_state_terminal(f->cur) || f->early_exit != NULL)
        return; /* no configuration needed */
    f->cfg_rc = kd_ctrl_exp_config(c, g->exp, &g->cfg, &seed, g->cfg_err);
    f->max_restarts = (int)json_integer_value(json_object_get(g->cfg, "max_restarts"));
}

/* Read what the decision needs (g->trial is set): the experiment, the pods, the handoff. */
static void gather(struct kd_ctrl *c, struct gathered *g)
{
    struct kd_trial_facts *f = &g->f;
    char ekey[600];
    const json_t *spec = json_object_get(g->trial, "spec");
    g->tstatus = json_object_get(g->trial, "status");
    g->gen =
        json_integer_value(json_object_get(json_object_get(g->trial, "metadata"), "generation"));
    if (!kd_trial_state_parse(json_string_value(json_object_get(g->tstatus, "state")), &f->cur))
        f->cur = KD_TRIAL_QUEUED;
    snprintf(ekey, sizeof(ekey), "%s/%s", kd_k8s_meta_str(g->trial, "namespace"),
             json_string_value(json_object_get(spec, "experiment")) ?: "");
    f->exp_cached = kd_k8s_cache_get(kd_k8s_informer_cache(c->exps), ekey, &g->exp) == 0;
    if (!f->exp_cached)
        return;
    g->pods = pods_of(c, g->trial);
    summarize(g->pods, &g->a);
    f->npods = g->a.npods;
    f->running = g->a.running;
    f->succeeded = g->a.succeeded;
    f->failed = g->a.failed;
    f->deleting = g->a.deleting;
    f->attempt_target = g->a.target;
    f->failure = g->a.failure;
    f->paused = json_is_true(json_object_get(spec, "paused"));
    f->closed = json_is_true(json_object_get(spec, "closed"));
    f->target = json_integer_value(json_object_get(spec, "validateAfter"));
    const json_t *lv = json_object_get(g->tstatus, "latestValidation");
    f->reached = json_integer_value(json_object_get(lv, "batches"));
    const char *vt = json_string_value(json_object_get(lv, "time"));
    if (vt == NULL || kd_time_parse_rfc3339(vt, &f->validated_ms) != 0)
        f->validated_ms = 0;
    f->idle = kd_ctrl_condition_true(g->tstatus, KD_TRIAL_COND_IDLE);
    f->restarts = (int)json_integer_value(json_object_get(g->tstatus, "restarts"));
    f->api_on = kd_ctrl_api_on(c);
    /* With the API, a worker may report an early exit (condition EarlyExit). The condition may
     * have been written just before a pod failed: re-read the Trial before treating a failure. */
    if (f->api_on && !kd_trial_state_terminal(f->cur)) {
        json_t *fresh = NULL;
        const char *w = early_exit_reason(g->tstatus);
        /* Every pod exited 0 short of the attempt's target: the validation may be newer than
         * the cache (the API writes it before answering the worker), so read the Trial. */
        bool short_exit = f->npods > 0 && f->succeeded == f->npods && f->attempt_target > 0 &&
                          f->reached < f->attempt_target && !f->idle;
        if (w == NULL && (f->failed > 0 || short_exit) &&
            kd_k8s_get(c->client, &KD_K8S_TRIALS, kd_k8s_meta_str(g->trial, "namespace"),
                       kd_k8s_meta_str(g->trial, "name"), &fresh, NULL, NULL) == 0)
            w = early_exit_reason(json_object_get(fresh, "status"));
        if (w != NULL) {
            kd_strlcpy(g->early, w, sizeof(g->early));
            f->early_exit = g->early;
        }
        /* A log policy is recorded (by the API) before the launcher exits: the fresh read
         * has it when the cache does not yet. */
        log_policy_facts(fresh != NULL ? fresh : g->trial, g);
        if (fresh != NULL && short_exit) {
            const json_t *flv =
                json_object_get(json_object_get(fresh, "status"), "latestValidation");
            long long r = json_integer_value(json_object_get(flv, "batches"));
            if (r > f->reached)
                f->reached = r;
        }
        json_decref(fresh);
    }
    gather_exp(c, g);
    gather_handoff(c, g);
    f->now_ms = kd_wall_ms();
    f->idle_release_ms = idle_release_ms(c);
    f->resync_ms = c->o.resync_ms;
}

/* The log line of a decision. */
static void note(const struct gathered *g, const struct kd_trial_action *act)
{
    const struct kd_trial_facts *f = &g->f;
    switch (act->note) {
    case KD_TRIAL_NOTE_EARLY_EXIT:
        KD_INFO("trial exited early", "trial=%s reason=%s", kd_logq(g->key), kd_logq(g->early));
        break;
    case KD_TRIAL_NOTE_PREEMPTED:
        KD_INFO("trial preempted", "trial=%s reason=%s", kd_logq(g->key), kd_logq(g->preempt));
        break;
    case KD_TRIAL_NOTE_RESTART:
        KD_WARN("trial attempt failed", "trial=%s restarts=%d max_restarts=%d detail=%s",
                kd_logq(g->key), f->restarts + 1, f->max_restarts, kd_logq(g->a.failure));
        break;
    case KD_TRIAL_NOTE_FAILED:
        KD_WARN("trial failed", "trial=%s detail=%s", kd_logq(g->key), kd_logq(act->message));
        break;
    case KD_TRIAL_NOTE_COMPLETED: KD_INFO("trial completed", "trial=%s", kd_logq(g->key)); break;
    case KD_TRIAL_NOTE_PROMOTED:
        KD_INFO("idle trial promoted: queued again", "trial=%s target=%lld", kd_logq(g->key),
                f->target);
        break;
    case KD_TRIAL_NOTE_NONE: break;
    }
}

/* The start time for a status that starts the trial, unless it has one. */
static void set_start_time(json_t *status, const json_t *trial)
{
    char ts[40];
    if (kd_ctrl_str(trial, "status", "startTime", NULL) == NULL)
        json_object_set_new(status, "startTime",
                            json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
}

/* The status of a trial whose attempt's pods (pst) were just created. */
static json_t *start_status(const json_t *trial, json_t *pst, const struct kd_gang_wait *gw)
{
    const json_t *old = json_object_get(trial, "status");
    json_int_t gen =
        json_integer_value(json_object_get(json_object_get(trial, "metadata"), "generation"));
    json_t *status =
        state_status(trial, KD_TRIAL_ACTIVE, gw->waiting ? gw->message : "pods created");
    json_object_set(status, "pods", pst);
    set_start_time(status, trial);
    if (gw->waiting)
        kd_ctrl_set_condition(status, old, "Scheduled", false, gw->reason, gw->message, gen);
    else
        kd_ctrl_set_condition(status, old, "Scheduled", true, "Admitted",
                              "admitted by the kdet scheduler", gen);
    return status;
}

/* START: take the admission and create the attempt's pods. */
static int apply_start(struct kd_ctrl *c, struct gathered *g, long *requeue_after_ms, char *err)
{
    int rc = 0;
    struct kd_handoff_admit ad;
    char run_id[64];
    json_t *pst = NULL, *status = NULL;
    struct kd_gang_wait gw = {0};
    if (!kd_handoff_take_admission(c->handoff, g->key, &ad)) {
        *requeue_after_ms = 200; /* it went away since it was seen: decide again */
        goto out;
    }
    new_run_id(kd_k8s_meta_str(g->trial, "name"), run_id, sizeof(run_id));
    if ((rc = start_attempt(c, g->exp, g->trial, g->cfg, &ad, run_id, &pst, err)) != 0) {
        kd_handoff_unuse_admission(c->handoff, g->key);
        status = state_status(g->trial, KD_TRIAL_QUEUED, err);
        (void)set_status(c, g->trial, status, NULL);
        if (rc == KD_EINVALID) {
            json_decref(status);
            status = state_status(g->trial, KD_TRIAL_ERROR, err);
            rc = set_status(c, g->trial, status, err);
        }
        goto out;
    }
    if (delegated(c))
        gang_wait(c, g->trial, pst, run_id, true, &gw);
    status = start_status(g->trial, pst, &gw);
    rc = set_status(c, g->trial, status, err);
    /* The pods exist, so ACTIVE must land: a Trial still QUEUED would take a pod that fails
     * meanwhile for a leftover and delete it, the attempt never counted. When the Trial
     * changed since the cache's copy (409), write it on a fresh read, a few times, and let
     * the next reconcile decide from there (a pause or a stop since then included). */
    for (int tries = 0; rc == KD_ECONFLICT && tries < 3; tries++) {
        json_t *fresh = NULL;
        rc = kd_k8s_get(c->client, &KD_K8S_TRIALS, kd_k8s_meta_str(g->trial, "namespace"),
                        kd_k8s_meta_str(g->trial, "name"), &fresh, NULL, err);
        if (rc == 0) {
            json_decref(status);
            status = start_status(fresh, pst, &gw);
            rc = set_status(c, fresh, status, err);
        }
        json_decref(fresh);
    }
out:
    json_decref(pst);
    json_decref(status);
    return rc;
}

/* RUN: the attempt runs; status.pods, Idle and (with a batch scheduler) Scheduled. */
static int apply_run(struct kd_ctrl *c, struct gathered *g, const struct kd_trial_action *act,
                     long *requeue_after_ms, char *err)
{
    struct kd_gang_wait gw = {0};
    if (delegated(c))
        gang_wait(c, g->trial, g->pods, g->a.run_id, false, &gw);
    json_t *status =
        state_status(g->trial, KD_TRIAL_ACTIVE, gw.waiting ? gw.message : act->message);
    json_object_set_new(status, "pods", pods_status(g->pods));
    clear_idle(status, g->tstatus, act->idle_reason, act->idle_message, g->gen);
    if (gw.waiting) {
        kd_ctrl_set_condition(status, g->tstatus, "Scheduled", false, gw.reason, gw.message,
                              g->gen);
    } else if (delegated(c) && !kd_ctrl_condition_true(g->tstatus, "Scheduled") &&
               kd_gang_all_bound(g->pods)) {
        /* Admitted once every pod is bound (not when the group went away with a cancel). */
        char msg[128];
        snprintf(msg, sizeof(msg), "admitted by %s", c->o.gang->name);
        kd_ctrl_set_condition(status, g->tstatus, "Scheduled", true, "Admitted", msg, g->gen);
    }
    int rc = set_status(c, g->trial, status, err);
    if (gw.waiting && (*requeue_after_ms <= 0 || *requeue_after_ms > 3000))
        *requeue_after_ms = 3000; /* the group's status is read, not watched */
    json_decref(status);
    return rc;
}

/* LEFTOVERS: pods of an earlier attempt go before a new one starts. But the cache may not show
 * yet that this attempt started (ACTIVE): ask the API server, so that a fast failure or success
 * of the current attempt is never discarded. */
static int apply_leftovers(struct kd_ctrl *c, struct gathered *g, long *requeue_after_ms, char *err)
{
    json_t *fresh = NULL;
    int rc = kd_k8s_get(c->client, &KD_K8S_TRIALS, kd_k8s_meta_str(g->trial, "namespace"),
                        kd_k8s_meta_str(g->trial, "name"), &fresh, NULL, err);
    bool active =
        rc == 0 && strcmp(kd_ctrl_str(fresh, "status", "state", NULL) ?: "", "ACTIVE") == 0;
    json_decref(fresh);
    if (rc == 0 && !active)
        rc = delete_all(c, g->pods);
    *requeue_after_ms = active ? 200 : 1000;
    return rc;
}

/* The status a decision writes (those that write one of their own kind: NULL). */
static json_t *action_status(const struct gathered *g, const struct kd_trial_action *act)
{
    const struct kd_trial_facts *f = &g->f;
    json_t *st = NULL;
    char *msg = NULL;
    switch (act->what) {
    case KD_TRIAL_DO_STOP:
    case KD_TRIAL_DO_SET_STATE:
    case KD_TRIAL_DO_WAIT:
    case KD_TRIAL_DO_ADOPT:
    case KD_TRIAL_DO_RECORD:
        /* A failed attempt's message ends with what its pod printed last: the reason. */
        if ((act->note == KD_TRIAL_NOTE_RESTART || act->note == KD_TRIAL_NOTE_FAILED) &&
            g->a.output[0] != '\0')
            msg = kd_xasprintf("%s; last output:\n%s", act->message, g->a.output);
        st = state_status(g->trial, act->state, msg != NULL ? msg : act->message);
        free(msg);
        break;
    case KD_TRIAL_DO_IDLE:
    case KD_TRIAL_DO_RELEASE:
        st = idle_status(g->trial, g->tstatus, f->target, g->gen, act->what == KD_TRIAL_DO_RELEASE);
        break;
    default: return NULL;
    }
    if (act->restarts >= 0)
        json_object_set_new(st, "restarts", json_integer(act->restarts));
    if (act->preempted)
        kd_ctrl_set_condition(st, g->tstatus, "Preempted", true, "Preempted", act->message, g->gen);
    if (act->clear_pods)
        json_object_set_new(st, "pods", json_array());
    else if (act->what == KD_TRIAL_DO_ADOPT || act->what == KD_TRIAL_DO_RECORD ||
             act->what == KD_TRIAL_DO_RELEASE)
        json_object_set_new(st, "pods", pods_status(g->pods));
    if (act->idle_reason != NULL)
        clear_idle(st, g->tstatus, act->idle_reason, act->idle_message, g->gen);
    if (act->what == KD_TRIAL_DO_WAIT && f->wait_reason != NULL)
        kd_ctrl_set_condition(st, g->tstatus, "Scheduled", false,
                              f->wait_never ? "Unschedulable" : "Waiting", f->wait_reason, g->gen);
    if (act->what == KD_TRIAL_DO_ADOPT) {
        set_start_time(st, g->trial);
        kd_ctrl_set_condition(st, g->tstatus, "Scheduled", true, "Admitted",
                              "admitted by the kdet scheduler", g->gen);
    }
    if (act->what == KD_TRIAL_DO_RECORD)
        json_object_set_new(st, "latestValidation",
                            json_pack("{s:s,s:I}", "metric",
                                      kd_ctrl_str(g->cfg, "searcher", "metric", NULL) ?: "",
                                      "batches", (json_int_t)f->attempt_target));
    return st;
}

/* Carry out a decision of kd_trial_next: the one place the trial reconciler writes. */
static int apply(struct kd_ctrl *c, struct gathered *g, const struct kd_trial_action *act,
                 long *requeue_after_ms, char *err)
{
    int rc = 0;
    size_t n = 0;
    json_t *status = NULL;
    if (g->f.npods > 0)
        kd_handoff_drop_admission(c->handoff,
                                  g->key); /* the pods now hold (or no longer hold) the GPUs */
    if (act->take_preemption)
        kd_handoff_take_preemption(c->handoff, g->key);
    if (act->requeue_ms != 0)
        *requeue_after_ms = act->requeue_ms;
    note(g, act);
    if (act->confirm_no_pods &&
        ((rc = kd_ctrl_api_pod_count(c, g->trial, KD_POD_LABEL_TRIAL, &n, err)) != 0 || n > 0)) {
        if (n > 0 || act->what == KD_TRIAL_DO_START)
            *requeue_after_ms = 500; /* pods just created: the cache lags behind */
        goto out;
    }
    if (act->what == KD_TRIAL_DO_STOP && (rc = delete_pods(c, g->pods, act->delete_now)) != 0)
        goto out;
    if (act->drop_admission) {
        struct kd_handoff_admit ad;
        if (kd_handoff_take_admission(c->handoff, g->key, &ad))
            kd_handoff_drop_admission(c->handoff, g->key);
    }
    switch (act->what) {
    case KD_TRIAL_DO_NOTHING: break;
    case KD_TRIAL_DO_NO_CONFIG:
        rc = g->f.cfg_rc;
        kd_strlcpy(err, g->cfg_err, KD_ERRLEN);
        break;
    case KD_TRIAL_DO_CLEANUP:
        rc = delete_pods(c, g->pods, act->delete_now);
        /* A trial that ended before its conditions were kept consistent: repair them. */
        status = json_object();
        end_conditions(c, g->trial, status, g->f.cur);
        if (rc == 0 && json_object_size(status) > 0)
            rc = set_status(c, g->trial, status, err);
        break;
    case KD_TRIAL_DO_LEFTOVERS: rc = apply_leftovers(c, g, requeue_after_ms, err); break;
    case KD_TRIAL_DO_START: rc = apply_start(c, g, requeue_after_ms, err); break;
    case KD_TRIAL_DO_RUN: rc = apply_run(c, g, act, requeue_after_ms, err); break;
    default:
        status = action_status(g, act);
        rc = set_status(c, g->trial, status, err);
        if (rc == 0 && act->delete_pods)
            rc = delete_all(c, g->pods);
        if (rc == 0 && act->what == KD_TRIAL_DO_IDLE && act->delete_pods && g->f.npods > 0) {
            KD_INFO("idle trial released its pods", "trial=%s target=%lld", kd_logq(g->key),
                    g->f.target);
            kd_ctrl_kick(c);
        }
        if (act->what == KD_TRIAL_DO_RELEASE && act->waited_ms >= 0)
            KD_INFO("trial idle: releasing its GPUs", "trial=%s target=%lld waited_ms=%lld",
                    kd_logq(g->key), g->f.target, (long long)act->waited_ms);
        break;
    }
    if (act->kick)
        kd_ctrl_kick(c);
out:
    json_decref(status);
    return rc;
}

int kd_ctrl_reconcile_trial(const char *key, long *requeue_after_ms, void *ud)
{
    struct kd_ctrl *c = ud;
    int rc = 0;
    struct gathered g = {.key = key};
    char err[KD_ERRLEN] = "";
    if (!kd_ctrl_acting(c)) {
        *requeue_after_ms = 2000;
        goto out;
    }
    if (kd_k8s_cache_get(kd_k8s_informer_cache(c->trials), key, &g.trial) != 0) {
        kd_ctrl_kick(c); /* deleted: its capacity is free */
        goto out;
    }
    if (kd_ctrl_str(g.trial, "metadata", "deletionTimestamp", NULL) != NULL)
        goto out;
    gather(c, &g);
    struct kd_trial_action act = kd_trial_next(&g.f);
    rc = apply(c, &g, &act, requeue_after_ms, err);
out:
    kd_ctrl_reconcile_end("trial", key, rc, err, requeue_after_ms);
    json_decref(g.trial);
    json_decref(g.exp);
    json_decref(g.pods);
    json_decref(g.cfg);
    return rc;
}
