/*
 * Volcano backend: one PodGroup (scheduling.volcano.sh/v1beta1) per trial
 * attempt, owned by the Trial, with minMember = the trial's pods and
 * minResources = their requests; the pods name schedulerName "volcano" and
 * the PodGroup (annotation scheduling.k8s.io/group-name), so Volcano binds
 * them all or none. The PodGroup's phase and Unschedulable condition say
 * why a trial waits.
 */
#include <stdio.h>
#include <string.h>

#include "core/str.h"
#include "gang.h"
#include "podspec.h"

static const char *meta(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(json_object_get(o, "metadata"), k));
}

static void volcano_name(const struct kd_gang_attempt *a, char *buf, size_t len)
{
    kd_strlcpy(buf, meta(a->trial, "name") ?: "", len);
}

static int volcano_group(const struct kd_gang_attempt *a, json_t **out, char *err)
{
    char name[KD_GANG_NAMELEN];
    const json_t *p0 = json_array_get(a->pods, 0);
    const char *pc =
        json_string_value(json_object_get(json_object_get(p0, "spec"), "priorityClassName"));
    const json_t *labels = json_object_get(json_object_get(p0, "metadata"), "labels");
    volcano_name(a, name, sizeof(name));
    if (name[0] == '\0' || json_array_size(a->pods) == 0 || a->queue == NULL || a->queue[0] == '\0')
        return kd_seterr(err, KD_EINVALID, "PodGroup: a trial name, pods and a queue are needed");
    json_t *pg =
        json_pack("{s:s,s:s,s:{s:s,s:s,s:{},s:[{s:s,s:s,s:s,s:s,s:b,s:b}]},s:{s:i,s:s,s:o}}",
                  "apiVersion", "scheduling.volcano.sh/v1beta1", "kind", "PodGroup", "metadata",
                  "name", name, "namespace", meta(a->trial, "namespace") ?: "default", "labels",
                  "ownerReferences", "apiVersion", "kdet.io/v1alpha1", "kind", "Trial", "name",
                  meta(a->trial, "name") ?: "", "uid", meta(a->trial, "uid") ?: "", "controller", 1,
                  "blockOwnerDeletion", 1, "spec", "minMember", (int)json_array_size(a->pods),
                  "queue", a->queue, "minResources", kd_gang_min_resources(a->pods));
    json_t *pl = json_object_get(json_object_get(pg, "metadata"), "labels");
    static const char *const keep[] = {KD_POD_LABEL_EXPERIMENT, KD_POD_LABEL_TRIAL,
                                       KD_POD_LABEL_RUN, NULL};
    for (int i = 0; keep[i] != NULL; i++)
        if (json_is_string(json_object_get(labels, keep[i])))
            json_object_set(pl, keep[i], json_object_get(labels, keep[i]));
    if (pc != NULL)
        json_object_set_new(json_object_get(pg, "spec"), "priorityClassName", json_string(pc));
    *out = pg;
    return 0;
}

static void volcano_decorate(json_t *pod, const struct kd_gang_attempt *a)
{
    char name[KD_GANG_NAMELEN];
    json_t *md = json_object_get(pod, "metadata");
    json_t *ann = json_object_get(md, "annotations");
    volcano_name(a, name, sizeof(name));
    if (!json_is_object(ann)) {
        ann = json_object();
        json_object_set_new(md, "annotations", ann);
    }
    json_object_set_new(ann, KD_GANG_VOLCANO_GROUP_ANN, json_string(name));
    json_object_set_new(json_object_get(pod, "spec"), "schedulerName",
                        json_string(KD_GANG_VOLCANO_SCHEDULER));
}

/* The message of the PodGroup's last condition of `type` with status True, or NULL. */
static const char *true_condition(const json_t *group, const char *type)
{
    const char *msg = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(group, "status"), "conditions"), i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "type")) ?: "", type) == 0)
            msg = strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") == 0
                      ? json_string_value(json_object_get(c, "message")) ?: ""
                      : NULL;
    }
    return msg;
}

static void volcano_explain(const json_t *group, const json_t *pods, const char *name,
                            const char *queue, struct kd_gang_wait *w)
{
    memset(w, 0, sizeof(*w));
    if (kd_gang_all_bound(pods))
        return;
    w->waiting = true;
    if (group == NULL) {
        kd_strlcpy(w->reason, "Pending", sizeof(w->reason));
        snprintf(w->message, sizeof(w->message),
                 "waiting for volcano: PodGroup %s not found; its pods stay Pending", name);
        return;
    }
    const char *phase =
        json_string_value(json_object_get(json_object_get(group, "status"), "phase")) ?: "Pending";
    const char *unsched = true_condition(group, "Unschedulable");
    kd_strlcpy(w->reason, unsched != NULL ? "Unschedulable" : phase, sizeof(w->reason));
    snprintf(w->message, sizeof(w->message),
             "waiting for volcano: PodGroup %s in queue %s is %s%s%s", name,
             queue != NULL ? queue : "?", phase, unsched != NULL && unsched[0] ? ": " : "",
             unsched != NULL ? unsched : "");
}

const struct kd_gang_ops kd_gang_volcano = {
    .name = "volcano",
    .kdet_admits = false,
    .gvr = &KD_GANG_VOLCANO_GVR,
    .group_name = volcano_name,
    .build_group = volcano_group,
    .decorate_pod = volcano_decorate,
    .explain = volcano_explain,
};
