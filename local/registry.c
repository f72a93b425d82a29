/*
 * Built-in kinds and CRD-registered kinds, and the discovery documents
 * (APIGroupList, APIGroup, APIResourceList) kubectl reads to map a kind or
 * short name to a REST path.
 */
#include "json.h"
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/err.h"

struct kd_registry {
    struct kd_restype *head, *tail;
    kd_strategy_fn strategy_of;
};

/* For a registry without strategies (tests of tables and discovery): the generic verbs only. */
static const struct kd_strategy no_strategy;

static const struct kd_strategy *strategy_for(const struct kd_registry *reg,
                                              const struct kd_restype *rt)
{
    const struct kd_strategy *s = reg->strategy_of != NULL ? reg->strategy_of(rt) : NULL;
    return s != NULL ? s : &no_strategy;
}

struct builtin {
    const char *group, *version, *resource, *kind, *singular;
    bool namespaced, has_status;
    const char *short1, *short2;
    const char *category;
    const char *const *field_labels;
};

static const char *const pod_fields[] = {"status.phase",
                                         "spec.nodeName",
                                         "spec.restartPolicy",
                                         "spec.schedulerName",
                                         "spec.serviceAccountName",
                                         "status.podIP",
                                         "status.nominatedNodeName",
                                         NULL};
static const char *const event_fields[] = {"involvedObject.kind",
                                           "involvedObject.namespace",
                                           "involvedObject.name",
                                           "involvedObject.uid",
                                           "involvedObject.apiVersion",
                                           "involvedObject.resourceVersion",
                                           "involvedObject.fieldPath",
                                           "reason",
                                           "reportingComponent",
                                           "source",
                                           "type",
                                           NULL};
static const char *const secret_fields[] = {"type", NULL};
static const char *const ns_fields[] = {"status.phase", NULL};
static const char *const node_fields[] = {"spec.unschedulable", NULL};

static const struct builtin builtins[] = {
    {"", "v1", "namespaces", "Namespace", "namespace", false, true, "ns", NULL, NULL, ns_fields},
    {"", "v1", "pods", "Pod", "pod", true, true, "po", NULL, "all", pod_fields},
    {"", "v1", "nodes", "Node", "node", false, true, "no", NULL, NULL, node_fields},
    {"", "v1", "configmaps", "ConfigMap", "configmap", true, false, "cm", NULL, NULL, NULL},
    {"", "v1", "secrets", "Secret", "secret", true, false, NULL, NULL, NULL, secret_fields},
    {"", "v1", "serviceaccounts", "ServiceAccount", "serviceaccount", true, false, "sa", NULL, NULL,
     NULL},
    {"", "v1", "services", "Service", "service", true, true, "svc", NULL, "all", NULL},
    {"", "v1", "events", "Event", "event", true, false, "ev", NULL, NULL, event_fields},
    {"coordination.k8s.io", "v1", "leases", "Lease", "lease", true, false, NULL, NULL, NULL, NULL},
    {"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", "priorityclass", false, false,
     "pc", NULL, NULL, NULL},
    {"apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
     "customresourcedefinition", false, true, "crd", "crds", "api-extensions", NULL},
};

static void restype_free(struct kd_restype *rt)
{
    if (rt == NULL)
        return;
    free(rt->group);
    free(rt->version);
    free(rt->resource);
    free(rt->kind);
    free(rt->singular);
    free(rt->gr);
    json_decref(rt->short_names);
    json_decref(rt->categories);
    json_decref(rt->schema);
    json_decref(rt->printer_columns);
    free(rt);
}

static void add(struct kd_registry *reg, struct kd_restype *rt)
{
    if (reg->tail != NULL)
        reg->tail->next = rt;
    else
        reg->head = rt;
    reg->tail = rt;
}

struct kd_registry *kd_registry_new(kd_strategy_fn strategy_of)
{
    struct kd_registry *reg = kd_xcalloc(1, sizeof(*reg));
    reg->strategy_of = strategy_of;
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
        const struct builtin *b = &builtins[i];
        struct kd_restype *rt = kd_xcalloc(1, sizeof(*rt));
        rt->group = kd_xstrdup(b->group);
        rt->version = kd_xstrdup(b->version);
        rt->resource = kd_xstrdup(b->resource);
        rt->kind = kd_xstrdup(b->kind);
        rt->singular = kd_xstrdup(b->singular);
        rt->gr = kd_xasprintf("%s/%s", b->group, b->resource);
        rt->namespaced = b->namespaced;
        rt->has_status = b->has_status;
        rt->builtin = true;
        rt->generation = strcmp(b->resource, "customresourcedefinitions") == 0;
        rt->strategy = strategy_for(reg, rt);
        rt->short_names = json_array();
        if (b->short1 != NULL)
            json_array_append_new(rt->short_names, json_string(b->short1));
        if (b->short2 != NULL)
            json_array_append_new(rt->short_names, json_string(b->short2));
        rt->categories = json_array();
        if (b->category != NULL)
            json_array_append_new(rt->categories, json_string(b->category));
        rt->field_labels = b->field_labels;
        add(reg, rt);
    }
    return reg;
}

void kd_registry_free(struct kd_registry *reg)
{
    if (reg == NULL)
        return;
    struct kd_restype *rt = reg->head;
    while (rt != NULL) {
        struct kd_restype *next = rt->next;
        restype_free(rt);
        rt = next;
    }
    free(reg);
}

struct kd_restype *kd_registry_first(struct kd_registry *reg)
{
    return reg->head;
}

struct kd_restype *kd_registry_find(struct kd_registry *reg, const char *group, const char *version,
                                    const char *resource)
{
    for (struct kd_restype *rt = reg->head; rt != NULL; rt = rt->next) {
        if (!rt->removed && strcmp(rt->group, group) == 0 && strcmp(rt->version, version) == 0 &&
            strcmp(rt->resource, resource) == 0)
            return rt;
    }
    return NULL;
}

struct kd_restype *kd_registry_find_kind(struct kd_registry *reg, const char *group,
                                         const char *kind)
{
    for (struct kd_restype *rt = reg->head; rt != NULL; rt = rt->next) {
        if (!rt->removed && strcmp(rt->group, group) == 0 && strcmp(rt->kind, kind) == 0)
            return rt;
    }
    return NULL;
}

const char *kd_restype_api_version(const struct kd_restype *rt, char *buf, size_t len)
{
    if (rt->group[0] == '\0')
        snprintf(buf, len, "%s", rt->version);
    else
        snprintf(buf, len, "%s/%s", rt->group, rt->version);
    return buf;
}

int kd_registry_apply_crd(struct kd_registry *reg, const json_t *crd, char *err)
{
    int rc = 0;
    const char *crd_name = kd_jstr(json_object_get(crd, "metadata"), "name");
    char want[512];
    const json_t *spec = json_object_get(crd, "spec");
    const json_t *names = json_object_get(spec, "names");
    const char *group = kd_jstr(spec, "group");
    const char *plural = kd_jstr(names, "plural");
    const char *kind = kd_jstr(names, "kind");
    const char *scope = kd_jstr(spec, "scope");
    const json_t *versions = json_object_get(spec, "versions");
    if (crd_name == NULL || group == NULL || plural == NULL || kind == NULL ||
        !json_is_array(versions)) {
        rc = kd_seterr(err, KD_EINVALID,
                       "spec.group, spec.names.plural, spec.names.kind and "
                       "spec.versions are required");
        goto out;
    }
    snprintf(want, sizeof(want), "%s.%s", plural, group);
    if (strcmp(crd_name, want) != 0) {
        rc = kd_seterr(err, KD_EINVALID,
                       "metadata.name: Invalid value: \"%s\": must be "
                       "spec.names.plural+\".\"+spec.group",
                       crd_name);
        goto out;
    }
    /* Drop the kinds this CRD registered before, then register the served versions anew. */
    kd_registry_remove_crd(reg, crd_name);
    for (struct kd_restype *rt = reg->head; rt != NULL; rt = rt->next) {
        if (!rt->removed && strcmp(rt->group, group) == 0 && strcmp(rt->resource, plural) == 0) {
            rc = kd_seterr(err, KD_EINVALID, "spec.names.plural: %s.%s is already served", plural,
                           group);
            goto out;
        }
    }
    size_t i;
    const json_t *v;
    json_array_foreach(versions, i, v)
    {
        if (!json_is_true(json_object_get(v, "served")))
            continue;
        const char *vname = kd_jstr(v, "name");
        if (vname == NULL)
            continue;
        struct kd_restype *rt = kd_xcalloc(1, sizeof(*rt));
        rt->group = kd_xstrdup(group);
        rt->version = kd_xstrdup(vname);
        rt->resource = kd_xstrdup(plural);
        rt->kind = kd_xstrdup(kind);
        const char *singular = kd_jstr(names, "singular");
        rt->singular = singular != NULL ? kd_xstrdup(singular) : kd_xstrdup("");
        if (rt->singular[0] == '\0') {
            free(rt->singular);
            rt->singular = kd_xstrdup(kind);
            for (char *p = rt->singular; *p; p++)
                *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        }
        rt->gr = kd_xasprintf("%s/%s", group, plural);
        rt->namespaced = scope == NULL || strcmp(scope, "Namespaced") == 0;
        rt->has_status = json_object_get(json_object_get(v, "subresources"), "status") != NULL;
        rt->generation = true;
        rt->strategy = strategy_for(reg, rt);
        json_t *sn = json_object_get(names, "shortNames");
        rt->short_names = json_is_array(sn) ? json_deep_copy(sn) : json_array();
        json_t *cat = json_object_get(names, "categories");
        rt->categories = json_is_array(cat) ? json_deep_copy(cat) : json_array();
        json_t *schema = json_object_get(json_object_get(v, "schema"), "openAPIV3Schema");
        rt->schema = schema != NULL ? json_deep_copy(schema) : NULL;
        json_t *cols = json_object_get(v, "additionalPrinterColumns");
        rt->printer_columns = json_is_array(cols) ? json_deep_copy(cols) : NULL;
        add(reg, rt);
    }
out:
    return rc;
}

void kd_registry_remove_crd(struct kd_registry *reg, const char *crd_name)
{
    /* A CRD's name is "<plural>.<group>". */
    const char *dot = strchr(crd_name, '.');
    if (dot == NULL)
        return;
    for (struct kd_restype *rt = reg->head; rt != NULL; rt = rt->next) {
        if (rt->builtin || rt->removed)
            continue;
        if (strlen(rt->resource) == (size_t)(dot - crd_name) &&
            strncmp(rt->resource, crd_name, (size_t)(dot - crd_name)) == 0 &&
            strcmp(rt->group, dot + 1) == 0)
            rt->removed = true;
    }
}

static json_t *str_array(const char *const *v)
{
    json_t *a = json_array();
    for (; *v != NULL; v++)
        json_array_append_new(a, json_string(*v));
    return a;
}

json_t *kd_registry_group(struct kd_registry *reg, const char *group)
{
    json_t *versions = json_array();
    for (struct kd_restype *rt = reg->head; rt != NULL; rt = rt->next) {
        if (rt->removed || strcmp(rt->group, group) != 0)
            continue;
        size_t i;
        json_t *v;
        bool seen = false;
        json_array_foreach(versions, i, v)
        {
            if (strcmp(kd_jstr(v, "version"), rt->version) == 0)
                seen = true;
        }
        if (!seen) {
            char *gv = kd_xasprintf("%s/%s", group, rt->version);
            json_array_append_new(
                versions, json_pack("{s:s,s:s}", "groupVersion", gv, "version", rt->version));
            free(gv);
        }
    }
    if (json_array_size(versions) == 0) {
        json_decref(versions);
        return NULL;
    }
    json_t *pref = json_deep_copy(json_array_get(versions, 0));
    return json_pack("{s:s,s:s,s:s,s:o,s:o}", "kind", "APIGroup", "apiVersion", "v1", "name", group,
                     "versions", versions, "preferredVersion", pref);
}

json_t *kd_registry_group_list(struct kd_registry *reg)
{
    json_t *groups = json_array();
    for (struct kd_restype *rt = reg->head; rt != NULL; rt = rt->next) {
        if (rt->removed || rt->group[0] == '\0')
            continue;
        size_t i;
        json_t *g;
        bool seen = false;
        json_array_foreach(groups, i, g)
        {
            if (strcmp(kd_jstr(g, "name"), rt->group) == 0)
                seen = true;
        }
        if (seen)
            continue;
        json_t *grp = kd_registry_group(reg, rt->group);
        if (grp == NULL)
            continue;
        json_object_del(grp, "kind");
        json_object_del(grp, "apiVersion");
        json_array_append_new(groups, grp);
    }
    return json_pack("{s:s,s:s,s:o}", "kind", "APIGroupList", "apiVersion", "v1", "groups", groups);
}

json_t *kd_registry_resource_list(struct kd_registry *reg, const char *group, const char *version)
{
    static const char *const verbs_all[] = {
        "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch", NULL};
    static const char *const verbs_ns[] = {"create", "delete", "get",   "list",
                                           "patch",  "update", "watch", NULL};
    static const char *const verbs_sub[] = {"get", "patch", "update", NULL};
    json_t *res = json_array();
    bool any = false;
    for (struct kd_restype *rt = reg->head; rt != NULL; rt = rt->next) {
        if (rt->removed || strcmp(rt->group, group) != 0 || strcmp(rt->version, version) != 0)
            continue;
        any = true;
        const char *const *verbs = strcmp(rt->resource, "namespaces") == 0 ? verbs_ns : verbs_all;
        json_t *r =
            json_pack("{s:s,s:s,s:b,s:s,s:o}", "name", rt->resource, "singularName", rt->singular,
                      "namespaced", rt->namespaced, "kind", rt->kind, "verbs", str_array(verbs));
        if (json_array_size(rt->short_names) > 0)
            json_object_set(r, "shortNames", rt->short_names);
        json_t *cats = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(rt->categories, i, c)
        {
            if (json_string_length(c) > 0)
                json_array_append(cats, c);
        }
        if (json_array_size(cats) > 0)
            json_object_set_new(r, "categories", cats);
        else
            json_decref(cats);
        json_array_append_new(res, r);
        if (rt->has_status) {
            char *n = kd_xasprintf("%s/status", rt->resource);
            json_array_append_new(res, json_pack("{s:s,s:s,s:b,s:s,s:o}", "name", n, "singularName",
                                                 "", "namespaced", rt->namespaced, "kind", rt->kind,
                                                 "verbs", str_array(verbs_sub)));
            free(n);
        }
        for (const struct kd_subresource *sub = rt->strategy->subresources;
             sub != NULL && sub->name != NULL; sub++) {
            char *n = kd_xasprintf("%s/%s", rt->resource, sub->name);
            json_array_append_new(res, json_pack("{s:s,s:s,s:b,s:s,s:[s]}", "name", n,
                                                 "singularName", "", "namespaced", rt->namespaced,
                                                 "kind", sub->kind != NULL ? sub->kind : rt->kind,
                                                 "verbs", sub->verb));
            free(n);
        }
    }
    if (!any) {
        json_decref(res);
        return NULL;
    }
    char *gv = group[0] == '\0' ? kd_xstrdup(version) : kd_xasprintf("%s/%s", group, version);
    json_t *out = json_pack("{s:s,s:s,s:s,s:o}", "kind", "APIResourceList", "apiVersion", "v1",
                            "groupVersion", gv, "resources", res);
    free(gv);
    return out;
}
