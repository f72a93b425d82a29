/*
 * Small helpers every part of kdet-controller uses (ctrl.h): reading and
 * writing JSON fields as the API server does, status patches and
 * conditions, whether this replica acts, and the scheduler's wake-up. They
 * call nothing else in controller/, so any file may call them.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/time.h"
#include "ctrl.h"
#include "events.h"
#include "wire.h"

const char *kd_ctrl_str(const json_t *obj, const char *a, const char *b, const char *c2)
{
    const json_t *v = json_object_get(obj, a);
    if (b != NULL)
        v = json_object_get(v, b);
    if (c2 != NULL)
        v = json_object_get(v, c2);
    return json_string_value(v);
}

json_t *kd_ctrl_number(double v)
{
    /* The API server decodes a custom resource's numbers into int64 when they are integral and
     * float64 otherwise, and writes float64 1.0 as 1: jansson's integer 1 and real 1.0 differ. */
    if (isfinite(v) && v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

void kd_ctrl_set_condition(json_t *status, const json_t *old_status, const char *type, bool ok,
                           const char *reason, const char *message, int64_t generation)
{
    char ts[40];
    const char *st = ok ? "True" : "False";
    json_t *conds = json_array();
    const char *ltt = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(old_status, "conditions"), i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t != NULL && strcmp(t, type) == 0) {
            if (strcmp(json_string_value(json_object_get(c, "status")) ?: "", st) == 0)
                ltt = json_string_value(json_object_get(c, "lastTransitionTime"));
            continue;
        }
        json_array_append(conds, c);
    }
    if (ltt == NULL)
        ltt = kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts));
    json_array_append_new(conds, json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "type", type, "status", st,
                                           "observedGeneration", (json_int_t)generation,
                                           "lastTransitionTime", ltt, "reason", reason, "message",
                                           message != NULL ? message : ""));
    json_object_set_new(status, "conditions", conds);
}

int kd_ctrl_patch_status(struct kd_ctrl *c, const struct kd_k8s_gvr *gvr, const json_t *obj,
                         json_t *status, char *err)
{
    /* The resourceVersion makes the patch conditional: a status computed from a stale cache
     * gets 409 Conflict (and the key is retried) instead of overwriting a newer one. */
    json_t *rv = json_object_get(json_object_get(obj, "metadata"), "resourceVersion");
    json_t *patch =
        rv != NULL ? json_pack("{s:{s:O},s:O}", "metadata", "resourceVersion", rv, "status", status)
                   : json_pack("{s:O}", "status", status);
    int rc = kd_k8s_patch(c->client, gvr, kd_k8s_meta_str(obj, "namespace"),
                          kd_k8s_meta_str(obj, "name"), "status", KD_K8S_PATCH_MERGE, patch, NULL,
                          NULL, err);
    json_decref(patch);
    struct kd_event ev;
    const char *kind = strcmp(gvr->resource, "trials") == 0        ? "Trial"
                       : strcmp(gvr->resource, "experiments") == 0 ? "Experiment"
                       : strcmp(gvr->resource, "tasks") == 0       ? "Task"
                                                                   : NULL;
    char apiv[128];
    snprintf(apiv, sizeof(apiv), "%s/%s", gvr->group, gvr->version);
    if (rc == 0 && c->events != NULL && kind != NULL &&
        kd_event_for_change(kind, json_object_get(obj, "status"), status, &ev))
        kd_events_emit(c->events, obj, apiv, kind, &ev);
    /* A trial's state changes and restarts also go into its history in the store. */
    if (rc == 0 && kind != NULL && strcmp(kind, "Trial") == 0)
        kd_ctrl_wire_trial_history(c, obj, json_object_get(obj, "status"), status);
    return rc;
}

bool kd_ctrl_acting(struct kd_ctrl *c)
{
    return c->leader == NULL ? !c->o.leader_elect : kd_k8s_leader_is_leader(c->leader);
}

long kd_ctrl_retry_cap_ms(int rc)
{
    switch (rc) {
    case KD_ECONNECT:
    case KD_ETIMEDOUT:
    case KD_EAGAIN: return KD_CTRL_TRANSIENT_RETRY_MS;
    default: return 0;
    }
}

void kd_ctrl_reconcile_end(const char *what, const char *key, int rc, const char *err,
                           long *requeue_after_ms)
{
    if (rc == 0)
        return;
    if (rc != KD_ECONFLICT)
        KD_WARN("reconcile failed", "%s=%s err=%s detail=%s", what, kd_logq(key), kd_err_name(rc),
                kd_logq(err));
    long cap = kd_ctrl_retry_cap_ms(rc);
    if (cap > 0)
        *requeue_after_ms = cap;
}

void kd_ctrl_kick(struct kd_ctrl *c)
{
    pthread_mutex_lock(&c->mu);
    c->kicked = true;
    pthread_cond_signal(&c->kick);
    pthread_mutex_unlock(&c->mu);
}

bool kd_ctrl_api_on(const struct kd_ctrl *c)
{
    return c->api != NULL;
}

int kd_ctrl_read_small(const char *path, size_t max, char **out, size_t *len, char *err)
{
    int rc = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = kd_xmalloc(max + 2);
    size_t n = 0;
    if (fd < 0) {
        rc = kd_seterr(err, -errno, "%s: %s", path, strerror(errno));
        goto out;
    }
    for (;;) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kd_seterr(err, -errno, "%s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max) {
            rc = kd_seterr(err, KD_ETOOBIG, "%s: longer than %zu bytes", path, max);
            goto out;
        }
    }
    buf[n] = '\0';
    /* a trailing newline is not part of a token or key written with echo */
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

int kd_ctrl_excluded_nodes(const json_t *trial, const char **names, int max)
{
    int n = 0;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(json_object_get(trial, "status"), "logPolicies"), i, r)
    {
        const char *node = json_string_value(json_object_get(r, "node"));
        const char *action = json_string_value(json_object_get(r, "action")) ?: "";
        bool have = false;
        if (node == NULL || node[0] == '\0' || strcmp(action, "exclude_node") != 0)
            continue;
        for (int k = 0; k < n; k++)
            have = have || strcmp(names[k], node) == 0;
        if (!have && n < max)
            names[n++] = node;
    }
    return n;
}

bool kd_ctrl_log_cancel(const json_t *tstatus, char *buf, size_t len)
{
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(tstatus, "logPolicies"), i, r)
    {
        if (strcmp(json_string_value(json_object_get(r, "action")) ?: "", "cancel_retries") != 0)
            continue;
        const char *name = json_string_value(json_object_get(r, "name"));
        const char *pattern = json_string_value(json_object_get(r, "pattern")) ?: "";
        if (name != NULL)
            snprintf(buf, len, "\"%s\" (pattern %s)", name, pattern);
        else
            snprintf(buf, len, "(pattern %s)", pattern);
        return true;
    }
    return false;
}

bool kd_ctrl_condition_true(const json_t *status, const char *type)
{
    size_t i;
    json_t *cnd;
    json_array_foreach(json_object_get(status, "conditions"), i, cnd)
    {
        if (strcmp(json_string_value(json_object_get(cnd, "type")) ?: "", type) == 0)
            return strcmp(json_string_value(json_object_get(cnd, "status")) ?: "", "True") == 0;
    }
    return false;
}

int kd_ctrl_api_pod_count(struct kd_ctrl *c, const json_t *obj, const char *label, size_t *n,
                          char *err)
{
    char sel[320];
    json_t *list = NULL;
    snprintf(sel, sizeof(sel), "%s=%s", label, kd_k8s_meta_str(obj, "name"));
    struct kd_k8s_query q = {.label_selector = sel};
    int rc = kd_k8s_list(c->client, &KD_K8S_PODS, kd_k8s_meta_str(obj, "namespace"), &q, &list,
                         NULL, err);
    *n = json_array_size(json_object_get(list, "items"));
    json_decref(list);
    return rc;
}
