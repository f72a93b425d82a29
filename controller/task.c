/*
 * The Task reconciler (docs/tasks.md): gather what a Task, its pod, the
 * scheduler's handoff and its service's activity say, decide with the pure
 * kd_task_next (taskstate.c), then apply the decision in one place: the
 * task's pod (built like a trial's, kd_pod_build_task), its status and
 * conditions, its row in the store. Tasks share the scheduler with trials
 * (schedloop.c hands admissions over under KD_CTRL_TASK_KEY keys); they are
 * never restarted and never preempted.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api/api.h"
#include "config/task.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "ctrl.h"
#include "taskprobe.h"
#include "taskstate.h"
#include "wire.h"

/* A running task with an idle timeout is looked at this often. */
#define PROBE_MS 5000L

/* Container waiting reasons that never clear by themselves: the task cannot start. */
static const char *const stuck_reasons[] = {"ErrImagePull",         "ImagePullBackOff",
                                            "InvalidImageName",     "CreateContainerConfigError",
                                            "CreateContainerError", NULL};

struct gathered {
    const char *key;           /* "ns/name" */
    char hkey[600];            /* the handoff's key: KD_CTRL_TASK_KEY "ns/name" */
    json_t *task, *pods, *cfg; /* owned */
    const json_t *tstatus;
    json_int_t gen;
    enum kd_task_kind kind;
    char run_id[64];
    char failure[600];
    char cfg_err[KD_ERRLEN];
    char reason[KD_SCHED_REASONLEN];
    struct kd_task_facts f;
};

static json_t *pods_of(struct kd_ctrl *c, const json_t *task)
{
    json_t *all = kd_k8s_cache_by_label(kd_k8s_informer_cache(c->taskpods), KD_POD_LABEL_TASK,
                                        kd_k8s_meta_str(task, "name"));
    json_t *out = json_array();
    const char *ns = kd_k8s_meta_str(task, "namespace") ?: "";
    const char *uid = kd_k8s_meta_str(task, "uid") ?: "";
    size_t i, k;
    json_t *p, *r;
    json_array_foreach(all, i, p)
    {
        if (strcmp(kd_k8s_meta_str(p, "namespace") ?: "", ns) != 0)
            continue;
        json_array_foreach(json_object_get(json_object_get(p, "metadata"), "ownerReferences"), k, r)
        {
            if (strcmp(json_string_value(json_object_get(r, "uid")) ?: "", uid) == 0) {
                json_array_append(out, p);
                break;
            }
        }
    }
    json_decref(all);
    return out;
}

/* The pods' phases, exit code and why a pod cannot run, into g->f. */
static void summarize(struct gathered *g)
{
    struct kd_task_facts *f = &g->f;
    size_t i;
    json_t *p;
    f->exit_code = -1;
    json_array_foreach(g->pods, i, p)
    {
        const char *phase = kd_ctrl_str(p, "status", "phase", NULL) ?: "Pending";
        const char *rid = kd_ctrl_str(p, "metadata", "labels", KD_POD_LABEL_RUN);
        json_t *cs =
            json_array_get(json_object_get(json_object_get(p, "status"), "containerStatuses"), 0);
        json_t *term = json_object_get(json_object_get(cs, "state"), "terminated");
        const char *waiting = json_string_value(
            json_object_get(json_object_get(json_object_get(cs, "state"), "waiting"), "reason"));
        f->npods++;
        if (rid != NULL && g->run_id[0] == '\0')
            kd_strlcpy(g->run_id, rid, sizeof(g->run_id));
        if (kd_ctrl_str(p, "metadata", "deletionTimestamp", NULL) != NULL)
            f->deleting++;
        if (json_is_integer(json_object_get(term, "exitCode")))
            f->exit_code = (int)json_integer_value(json_object_get(term, "exitCode"));
        if (strcmp(phase, "Succeeded") == 0) {
            f->succeeded++;
        } else if (strcmp(phase, "Failed") == 0) {
            f->failed++;
            if (g->failure[0] == '\0')
                snprintf(g->failure, sizeof(g->failure), "pod %s failed (%s)",
                         kd_k8s_meta_str(p, "name"),
                         json_string_value(json_object_get(term, "reason"))
                             ?: kd_ctrl_str(p, "status", "reason", NULL) ?: "Error");
        } else if (strcmp(phase, "Running") == 0) {
            f->running++;
        } else {
            f->pending++;
        }
        for (size_t k = 0; waiting != NULL && stuck_reasons[k] != NULL; k++) {
            if (strcmp(waiting, stuck_reasons[k]) == 0) {
                f->pod_stuck = true;
                snprintf(g->failure, sizeof(g->failure), "pod %s cannot start: %s: %s",
                         kd_k8s_meta_str(p, "name"), waiting,
                         json_string_value(json_object_get(
                             json_object_get(json_object_get(cs, "state"), "waiting"), "message"))
                             ?: "");
            }
        }
    }
    f->failure = g->failure[0] != '\0' ? g->failure : NULL;
}

/* The latest of a status time field (RFC 3339) and *ms. */
static void latest(const json_t *obj, const char *key, int64_t *ms)
{
    int64_t v = 0;
    const char *s = json_string_value(json_object_get(obj, key));
    if (s != NULL && kd_time_parse_rfc3339(s, &v) == 0 && v > *ms)
        *ms = v;
}

/*
 * A running task with an idle timeout: whether it is in use and when it was last. A notebook
 * is asked (its Jupyter's kernels and channels); shells and TensorBoards are used through the
 * proxy, which counts their streams and traffic.
 */
static void gather_activity(struct kd_ctrl *c, struct gathered *g)
{
    struct kd_task_facts *f = &g->f;
    const json_t *addr = json_object_get(g->tstatus, "address");
    int open = 0;
    int64_t proxied = 0;
    latest(g->tstatus, "startTime", &f->last_activity_ms);
    latest(addr, "time", &f->last_activity_ms);
    latest(g->tstatus, "lastActivity", &f->last_activity_ms);
    if (kd_api_task_activity(c->api, kd_k8s_meta_str(g->task, "namespace"),
                             kd_k8s_meta_str(g->task, "name"), &open, &proxied)) {
        f->busy = open > 0;
        if (proxied > f->last_activity_ms)
            f->last_activity_ms = proxied;
    }
    if (g->kind != KD_TASK_NOTEBOOK || !f->address)
        return;
    char tok[KD_API_TOKEN_LEN + 8], base[300], err[KD_ERRLEN] = "";
    struct kd_taskprobe pr;
    if (kd_ctrl_task_token(c, g->task, tok, sizeof(tok)) != 0)
        return;
    snprintf(base, sizeof(base), "%s%s/", KD_POD_TASK_PROXY, kd_k8s_meta_str(g->task, "name"));
    int rc = kd_taskprobe_notebook(
        json_string_value(json_object_get(addr, "host")) ?: "",
        (int)json_integer_value(json_object_get(addr, "port")), base, tok,
        json_string_value(json_object_get(g->cfg, "notebook_idle_type")), &pr, err);
    explicit_bzero(tok, sizeof(tok));
    if (rc != 0) {
        KD_DEBUG("notebook not asked", "task=%s err=%s detail=%s", kd_logq(g->key), kd_err_name(rc),
                 kd_logq(err));
        return;
    }
    f->activity_known = true;
    f->busy = f->busy || pr.busy;
    if (pr.last_ms > f->last_activity_ms)
        f->last_activity_ms = pr.last_ms;
}

static void gather(struct kd_ctrl *c, struct gathered *g)
{
    struct kd_task_facts *f = &g->f;
    const json_t *spec = json_object_get(g->task, "spec");
    g->tstatus = json_object_get(g->task, "status");
    g->gen =
        json_integer_value(json_object_get(json_object_get(g->task, "metadata"), "generation"));
    snprintf(g->hkey, sizeof(g->hkey), "%s%s", KD_CTRL_TASK_KEY, g->key);
    if (!kd_task_state_parse(json_string_value(json_object_get(g->tstatus, "state")), &f->cur))
        f->cur = KD_TASK_QUEUED;
    f->ended = kd_task_end_parse(json_string_value(json_object_get(g->tstatus, "endReason")));
    f->killed = json_is_true(json_object_get(spec, "killed"));
    const json_t *cfg = json_object_get(spec, "config");
    g->cfg = cfg != NULL ? json_deep_copy(cfg) : json_object();
    if (kd_task_kind_parse(json_string_value(json_object_get(spec, "kind")), &g->kind) != 0) {
        f->cfg_rc = KD_EINVALID;
        snprintf(g->cfg_err, sizeof(g->cfg_err), "spec.kind: not a kind of task");
    } else if ((f->cfg_rc = kd_task_config_check(g->kind, g->cfg, g->cfg_err)) == 0) {
        f->cfg_rc = kd_task_config_apply_defaults(g->kind, g->cfg, g->cfg_err);
    } else {
        /* The message names spec.config's field. */
        char tmp[KD_ERRLEN];
        kd_strlcpy(tmp, g->cfg_err, sizeof(tmp));
        snprintf(g->cfg_err, sizeof(g->cfg_err), "invalid config: spec.config.%.*s",
                 (int)(sizeof(g->cfg_err) - 40), tmp);
    }
    if (f->cfg_rc == 0 && !kd_ctrl_api_on(c)) {
        f->cfg_rc = KD_EINVAL;
        snprintf(g->cfg_err, sizeof(g->cfg_err),
                 "tasks need the controller API (kdet-controller --database-url): their logs, "
                 "ports and tokens go through it");
    }
    f->cfg_err = g->cfg_err;
    f->service = g->kind != KD_TASK_COMMAND;
    g->pods = pods_of(c, g->task);
    summarize(g);
    const json_t *addr = json_object_get(g->tstatus, "address");
    f->address = addr != NULL && g->run_id[0] != '\0' &&
                 strcmp(json_string_value(json_object_get(addr, "runId")) ?: "", g->run_id) == 0;
    /* A service counts as RUNNING once it accepts connections where it said it would. */
    if (f->service && f->address && f->cur != KD_TASK_RUNNING && f->running > 0)
        f->listening =
            kd_taskprobe_listens(json_string_value(json_object_get(addr, "host")),
                                 (int)json_integer_value(json_object_get(addr, "port")), 1000);
    f->admitted = kd_handoff_admitted(c->handoff, g->hkey);
    if (kd_handoff_reason(c->handoff, g->hkey, g->reason, sizeof(g->reason), &f->wait_never))
        f->wait_reason = g->reason;
    f->idle_ms = kd_task_config_idle_ms(g->cfg);
    f->now_ms = kd_wall_ms();
    f->probe_ms = PROBE_MS;
    if (f->cur == KD_TASK_RUNNING && f->idle_ms > 0 && f->cfg_rc == 0)
        gather_activity(c, g);
}

/* ---- apply ---------------------------------------------------------------------------------- */

static json_t *pods_status(const json_t *pods)
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

/* Merge-patch the status with the fields of `status` that changed (events follow). */
static int set_status(struct kd_ctrl *c, const json_t *task, json_t *status, char *err)
{
    const json_t *old = json_object_get(task, "status");
    const char *k;
    json_t *v;
    bool same = true;
    json_object_foreach(status, k, v)
    {
        if (!json_equal(v, json_object_get(old, k)))
            same = false;
    }
    return same ? 0 : kd_ctrl_patch_status(c, &KD_K8S_TASKS, task, status, err);
}

static json_t *state_status(const struct gathered *g, enum kd_task_state s, const char *msg)
{
    char ts[40];
    json_t *st = json_pack("{s:s,s:s,s:I}", "state", kd_task_state_name(s), "message",
                           msg != NULL ? msg : "", "observedGeneration", g->gen);
    if (s == KD_TASK_TERMINATED && kd_ctrl_str(g->task, "status", "endTime", NULL) == NULL)
        json_object_set_new(st, "endTime",
                            json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
    return st;
}

/* Delete the task's pods (now: gracePeriodSeconds 0); a 404 is success. */
static int delete_pods(struct kd_ctrl *c, const json_t *pods, bool now)
{
    int rc = 0;
    size_t i;
    json_t *p;
    struct kd_k8s_delete_opts at_once = {.has_grace_period = true, .grace_period_seconds = 0};
    json_array_foreach(pods, i, p)
    {
        json_t *grace =
            json_object_get(json_object_get(p, "metadata"), "deletionGracePeriodSeconds");
        if (kd_ctrl_str(p, "metadata", "deletionTimestamp", NULL) != NULL &&
            (!now || (json_is_integer(grace) && json_integer_value(grace) == 0)))
            continue;
        int r = kd_k8s_delete(c->client, &KD_K8S_PODS, kd_k8s_meta_str(p, "namespace"),
                              kd_k8s_meta_str(p, "name"), now ? &at_once : NULL, NULL, NULL, NULL);
        if (r == 0)
            KD_INFO("task pod deleted", "pod=%s now=%s", kd_logq(kd_k8s_meta_str(p, "name")),
                    now ? "true" : "false");
        else if (r != KD_ENOTFOUND && rc == 0)
            rc = r;
    }
    return rc;
}

/* The task's pods on the API server (the cache may lag behind a create). */
static void new_run_id(char *buf, size_t len)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint64_t)kd_mono_ns() ^ (uint64_t)kd_wall_ms() << 20;
    snprintf(buf, len, "%016" PRIx64, r);
}

/* A TensorBoard's --logdir_spec: NAME:DIR for each experiment of spec.experiments whose trials
 * write event files (kd_ctrl_tensorboard_dir), into a new string; NULL when none has. */
static char *tensorboard_logdir(struct kd_ctrl *c, const json_t *task, char *err)
{
    struct kd_buf b = KD_BUF_INIT(64 * 1024);
    const json_t *exps = json_object_get(json_object_get(task, "spec"), "experiments");
    char *out = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(exps, i, e)
    {
        char dir[4096];
        const char *name = json_string_value(e);
        if (name == NULL || kd_ctrl_tensorboard_dir(c, kd_k8s_meta_str(task, "namespace"), name,
                                                    dir, sizeof(dir), err) != 0)
            goto out;
        if (kd_buf_printf(&b, "%s%s:%s", b.len ? "," : "", name, dir) != 0) {
            kd_seterr(err, KD_ETOOBIG, "spec.experiments: too many experiments");
            goto out;
        }
    }
    out = kd_xstrdup(b.len > 0 ? kd_buf_str(&b) : "");
out:
    kd_buf_free(&b);
    return out;
}

/* START: take the admission, make the Secrets and the store row, create the pod. */
static int apply_start(struct kd_ctrl *c, struct gathered *g, long *requeue_after_ms, char *err)
{
    int rc = 0;
    struct kd_handoff_admit ad;
    char run_id[64], ts[40];
    json_t *pod = NULL, *status = NULL;
    char *logdir = NULL;
    int64_t id = 0;
    if (!kd_handoff_take_admission(c->handoff, g->hkey, &ad)) {
        *requeue_after_ms = 200; /* it went away since it was seen: decide again */
        goto out;
    }
    new_run_id(run_id, sizeof(run_id));
    struct kd_pod_opts po = c->o.pod;
    po.cpu_slots = ad.cpu;
    po.exclude_nodes = NULL;
    po.nexclude = 0;
    po.api = kd_ctrl_api_on(c);
    po.controller_ca = c->tls_ca != NULL;
    if (g->kind == KD_TASK_TENSORBOARD) {
        if ((logdir = tensorboard_logdir(c, g->task, err)) == NULL) {
            rc = KD_EINVALID;
            goto fail;
        }
        po.tensorboard_logdir = logdir;
    }
    if ((rc = kd_ctrl_wire_task(c, g->task, g->cfg, &id, err)) != 0 ||
        (rc = kd_pod_build_task(g->task, g->cfg, run_id, ad.nplace > 0 ? ad.nodes[0] : NULL,
                                ad.gpus, &po, &pod, err)) != 0)
        goto fail;
    rc = kd_k8s_create(c->client, &KD_K8S_PODS, NULL, pod, NULL, NULL, err);
    if (rc == KD_EEXIST)
        rc = 0;
    if (rc != 0)
        goto fail;
    KD_INFO("task pod created", "task=%s kind=%s pod=%s slots=%d slot_type=%s run_id=%s",
            kd_logq(g->key), kd_task_kind_name(g->kind), kd_logq(kd_k8s_meta_str(pod, "name")),
            ad.gpus, ad.cpu ? "cpu" : "gpu", run_id);
    status = state_status(g, KD_TASK_STARTING, "pod created; waiting for it to run");
    json_object_set_new(status, "pods",
                        json_pack("[{s:s,s:s,s:s}]", "name", kd_k8s_meta_str(pod, "name"), "node",
                                  ad.nodes[0] ?: "", "phase", "Pending"));
    json_object_set_new(status, "slots", json_integer(ad.gpus));
    if (kd_ctrl_str(g->task, "status", "startTime", NULL) == NULL)
        json_object_set_new(status, "startTime",
                            json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
    kd_ctrl_set_condition(status, g->tstatus, "Scheduled", true, "Admitted",
                          "admitted by the kdet scheduler", g->gen);
    rc = set_status(c, g->task, status, err);
    kd_ctrl_wire_task_state(c, g->task, "STARTING", -1, NULL);
    goto out;
fail:
    if (rc != KD_EINVALID) {
        kd_handoff_unuse_admission(c->handoff, g->hkey); /* tried again */
    } else {
        /* No pod could ever be made: the task ends, saying why. */
        char msg[KD_ERRLEN];
        kd_strlcpy(msg, err, sizeof(msg));
        kd_handoff_drop_admission(c->handoff, g->hkey);
        status = state_status(g, KD_TASK_TERMINATED, msg);
        json_object_set_new(status, "endReason", json_string("Error"));
        rc = set_status(c, g->task, status, err);
        kd_ctrl_wire_task_state(c, g->task, "TERMINATED", -1, "Error");
        kd_ctrl_kick(c);
    }
out:
    free(logdir);
    json_decref(pod);
    json_decref(status);
    return rc;
}

static int apply(struct kd_ctrl *c, struct gathered *g, const struct kd_task_action *a,
                 long *requeue_after_ms, char *err)
{
    int rc = 0;
    size_t n = 0;
    json_t *status = NULL;
    if (g->f.npods > 0)
        kd_handoff_drop_admission(c->handoff, g->hkey); /* the pod holds the slots now */
    if (a->requeue_ms != 0)
        *requeue_after_ms = a->requeue_ms;
    if (a->confirm_no_pods &&
        ((rc = kd_ctrl_api_pod_count(c, g->task, KD_POD_LABEL_TASK, &n, err)) != 0 || n > 0)) {
        if (n > 0)
            *requeue_after_ms = 500; /* pods just created: the cache lags behind */
        goto out;
    }
    if (a->drop_admission) {
        struct kd_handoff_admit ad;
        if (kd_handoff_take_admission(c->handoff, g->hkey, &ad))
            kd_handoff_drop_admission(c->handoff, g->hkey);
    }
    switch (a->what) {
    case KD_TASK_DO_NOTHING: break;
    case KD_TASK_DO_START: rc = apply_start(c, g, requeue_after_ms, err); break;
    case KD_TASK_DO_CLEANUP: rc = delete_pods(c, g->pods, a->delete_now); break;
    case KD_TASK_DO_WAIT:
        status = state_status(g, KD_TASK_QUEUED, a->message);
        if (g->f.wait_reason != NULL)
            kd_ctrl_set_condition(status, g->tstatus, "Scheduled", false,
                                  g->f.wait_never ? "Unschedulable" : "Waiting", g->f.wait_reason,
                                  g->gen);
        rc = set_status(c, g->task, status, err);
        break;
    case KD_TASK_DO_RUN:
        status = state_status(g, a->state, a->message);
        json_object_set_new(status, "pods", pods_status(g->pods));
        /* What START wrote, in case its status write lost a race (409) after the pod was made. */
        if (json_object_get(g->tstatus, "slots") == NULL)
            json_object_set_new(status, "slots",
                                json_integer(kd_task_config_slots(g->kind, g->cfg)));
        if (kd_ctrl_str(g->task, "status", "startTime", NULL) == NULL) {
            char ts[40];
            json_object_set_new(status, "startTime",
                                json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
        }
        if (!kd_ctrl_condition_true(g->tstatus, "Scheduled"))
            kd_ctrl_set_condition(status, g->tstatus, "Scheduled", true, "Admitted",
                                  "admitted by the kdet scheduler", g->gen);
        if (a->state == KD_TASK_RUNNING && !kd_ctrl_condition_true(g->tstatus, "Ready"))
            kd_ctrl_set_condition(status, g->tstatus, "Ready", true, "Running",
                                  g->f.service ? "the task's service listens" : "the task runs",
                                  g->gen);
        rc = set_status(c, g->task, status, err);
        if (rc == 0 && a->state != g->f.cur)
            kd_ctrl_wire_task_state(c, g->task, kd_task_state_name(a->state), -1, NULL);
        break;
    case KD_TASK_DO_STOP:
        status = state_status(g, KD_TASK_TERMINATING, a->message);
        json_object_set_new(status, "endReason", json_string(kd_task_end_name(a->end)));
        if ((rc = set_status(c, g->task, status, err)) == 0)
            rc = delete_pods(c, g->pods, a->delete_now);
        if (g->f.cur != KD_TASK_TERMINATING)
            KD_INFO("task stopping", "task=%s reason=%s detail=%s", kd_logq(g->key),
                    kd_task_end_name(a->end), kd_logq(a->message));
        break;
    case KD_TASK_DO_END:
        status = state_status(g, KD_TASK_TERMINATED, a->message);
        json_object_set_new(status, "endReason", json_string(kd_task_end_name(a->end)));
        if (a->exit_code >= 0)
            json_object_set_new(status, "exitCode", json_integer(a->exit_code));
        json_object_set_new(status, "pods", pods_status(g->pods));
        if (kd_ctrl_condition_true(g->tstatus, "Ready"))
            kd_ctrl_set_condition(status, g->tstatus, "Ready", false, "Terminated",
                                  "the task ended", g->gen);
        if ((rc = set_status(c, g->task, status, err)) == 0)
            rc = delete_pods(c, g->pods, a->delete_now);
        kd_ctrl_wire_task_state(c, g->task, "TERMINATED", a->exit_code, kd_task_end_name(a->end));
        KD_INFO("task ended", "task=%s reason=%s exit_code=%d detail=%s", kd_logq(g->key),
                kd_task_end_name(a->end), a->exit_code, kd_logq(a->message));
        break;
    }
    if (a->kick)
        kd_ctrl_kick(c);
out:
    json_decref(status);
    return rc;
}

int kd_ctrl_reconcile_task(const char *key, long *requeue_after_ms, void *ud)
{
    struct kd_ctrl *c = ud;
    int rc = 0;
    struct gathered g = {.key = key};
    char err[KD_ERRLEN] = "";
    if (!kd_ctrl_acting(c)) {
        *requeue_after_ms = 2000;
        goto out;
    }
    if (kd_k8s_cache_get(kd_k8s_informer_cache(c->tasks), key, &g.task) != 0) {
        kd_ctrl_kick(c); /* deleted: its slots are free */
        goto out;
    }
    if (kd_ctrl_str(g.task, "metadata", "deletionTimestamp", NULL) != NULL)
        goto out;
    gather(c, &g);
    struct kd_task_action act = kd_task_next(&g.f);
    rc = apply(c, &g, &act, requeue_after_ms, err);
out:
    kd_ctrl_reconcile_end("task", key, rc, err, requeue_after_ms);
    json_decref(g.task);
    json_decref(g.pods);
    json_decref(g.cfg);
    return rc;
}
