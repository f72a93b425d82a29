/*
 * Kueue backend: Kueue's plain-pod groups. Each pod of an attempt carries
 * the LocalQueue (label kueue.x-k8s.io/queue-name), the group's name
 * (label kueue.x-k8s.io/pod-group-name), its size (annotation
 * kueue.x-k8s.io/pod-group-total-count) and retriable-in-group "false" (a
 * failed pod ends the group: kdet retries with a new attempt, a new group,
 * so Kueue must not wait for a replacement pod). Kueue's webhook gates the
 * pods (scheduling gate kueue.x-k8s.io/admission), Kueue creates the
 * group's Workload under the group's name and removes the gates of all
 * pods once the Workload is admitted. The Workload's QuotaReserved and
 * Admitted conditions say why a trial waits.
 */
#include <stdio.h>
#include <string.h>

#include "core/str.h"
#include "gang.h"

/* "kdt-" + 12 hex digits of the trial's uid + "-" + 8 of the run id: a label value (<= 63). */
static void kueue_name(const struct kd_gang_attempt *a, char *buf, size_t len)
{
    const char *uid =
        json_string_value(json_object_get(json_object_get(a->trial, "metadata"), "uid")) ?: "";
    char hex[13];
    size_t n = 0;
    for (const char *p = uid; *p != '\0' && n < 12; p++)
        if (*p != '-')
            hex[n++] = *p;
    hex[n] = '\0';
    snprintf(buf, len, "kdt-%s-%.8s", hex, a->run_id != NULL ? a->run_id : "");
}

static json_t *child(json_t *o, const char *k)
{
    json_t *c = json_object_get(o, k);
    if (!json_is_object(c)) {
        c = json_object();
        json_object_set_new(o, k, c);
    }
    return c;
}

static void kueue_decorate(json_t *pod, const struct kd_gang_attempt *a)
{
    char name[KD_GANG_NAMELEN], n[16];
    json_t *md = child(pod, "metadata");
    kueue_name(a, name, sizeof(name));
    snprintf(n, sizeof(n), "%zu", json_array_size(a->pods));
    json_object_set_new(child(md, "labels"), KD_GANG_KUEUE_QUEUE_LABEL,
                        json_string(a->queue != NULL ? a->queue : ""));
    json_object_set_new(child(md, "labels"), KD_GANG_KUEUE_GROUP_LABEL, json_string(name));
    json_object_set_new(child(md, "annotations"), KD_GANG_KUEUE_TOTAL_ANN, json_string(n));
    json_object_set_new(child(md, "annotations"), KD_GANG_KUEUE_RETRIABLE_ANN,
                        json_string("false"));
}

/* Condition `type` of the Workload: its status ("True"...) and message, or NULL. */
static const char *condition(const json_t *wl, const char *type, const char **msg)
{
    const char *st = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(wl, "status"), "conditions"), i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "type")) ?: "", type) == 0) {
            st = json_string_value(json_object_get(c, "status")) ?: "";
            *msg = json_string_value(json_object_get(c, "message")) ?: "";
        }
    }
    return st;
}

static void kueue_explain(const json_t *wl, const json_t *pods, const char *name, const char *queue,
                          struct kd_gang_wait *w)
{
    const char *msg = "";
    memset(w, 0, sizeof(*w));
    if (kd_gang_all_bound(pods))
        return;
    w->waiting = true;
    if (wl == NULL) {
        kd_strlcpy(w->reason, "Pending", sizeof(w->reason));
        snprintf(w->message, sizeof(w->message),
                 "waiting for kueue: no Workload %s yet for the pod group in LocalQueue %s", name,
                 queue != NULL ? queue : "?");
        return;
    }
    const char *adm = condition(wl, "Admitted", &msg);
    if (adm != NULL && strcmp(adm, "True") == 0) {
        kd_strlcpy(w->reason, "Admitted", sizeof(w->reason));
        snprintf(w->message, sizeof(w->message),
                 "admitted by kueue (Workload %s); waiting for the pods to be bound", name);
        return;
    }
    const char *qr = condition(wl, "QuotaReserved", &msg);
    kd_strlcpy(w->reason, qr != NULL && strcmp(qr, "True") == 0 ? "QuotaReserved" : "Pending",
               sizeof(w->reason));
    snprintf(w->message, sizeof(w->message), "waiting for kueue: Workload %s in LocalQueue %s%s%s",
             name, queue != NULL ? queue : "?", qr != NULL && msg[0] ? ": " : "",
             qr != NULL ? msg : "");
}

const struct kd_gang_ops kd_gang_kueue = {
    .name = "kueue",
    .kdet_admits = false,
    .gvr = &KD_GANG_KUEUE_GVR,
    .group_name = kueue_name,
    .decorate_pod = kueue_decorate,
    .explain = kueue_explain,
};
