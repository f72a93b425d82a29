/*
 * Per-kind behaviour of kdet-local's API server, as kube-apiserver's resource strategies:
 * defaults and validation on create, what an update keeps, status reset.
 */
#include "apiint.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "events.h"
#include "http/http.h"
#include "kubelet.h"
#include "logstream.h"
#include "logproxy.h"
#include "openapi/openapi.h"
#include "validate.h"
#include "patch.h"
#include "proto.h"
#include "registry.h"
#include "scheduler.h"
#include "selector.h"
#include "table.h"
#include "store.h"

/* ---- semantics shared by create and update ------------------------------------------------- */

/* Everything except metadata and status: what a "spec change" means for generation. */
bool kd_api__spec_changed(const json_t *a, const json_t *b)
{
    json_t *x = json_copy((json_t *)a);
    json_t *y = json_copy((json_t *)b);
    json_object_del(x, "metadata");
    json_object_del(x, "status");
    json_object_del(y, "metadata");
    json_object_del(y, "status");
    bool changed = !json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return changed;
}

bool kd_api__same_ignoring_rv(const json_t *a, const json_t *b)
{
    json_t *x = json_deep_copy(a);
    json_t *y = json_deep_copy(b);
    json_object_del(kd_api__meta(x), "resourceVersion");
    json_object_del(kd_api__meta(y), "resourceVersion");
    bool same = json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return same;
}

static void crd_set_status(json_t *crd)
{
    char now[40];
    kd_api__now_rfc3339(now, sizeof(now));
    json_t *spec = json_object_get(crd, "spec");
    json_t *stored = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(spec, "versions"), i, v)
    {
        if (json_is_true(json_object_get(v, "storage")))
            json_array_append_new(stored, json_string(kd_jstr(v, "name")));
    }
    json_t *accepted = json_deep_copy(json_object_get(spec, "names"));
    if (kd_jstr(accepted, "singular") == NULL && kd_jstr(accepted, "kind") != NULL) {
        char *lower = kd_xstrdup(kd_jstr(accepted, "kind"));
        for (char *p = lower; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        json_object_set_new(accepted, "singular", json_string(lower));
        free(lower);
    }
    if (kd_jstr(accepted, "listKind") == NULL && kd_jstr(accepted, "kind") != NULL) {
        char *lk = kd_xasprintf("%sList", kd_jstr(accepted, "kind"));
        json_object_set_new(accepted, "listKind", json_string(lk));
        free(lk);
    }
    json_t *status =
        json_pack("{s:[{s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s}],s:o,s:o}", "conditions", "type",
                  "NamesAccepted", "status", "True", "lastTransitionTime", now, "reason",
                  "NoConflicts", "message", "no conflicts found", "type", "Established", "status",
                  "True", "lastTransitionTime", now, "reason", "InitialNamesAccepted", "message",
                  "the initial names have been accepted", "acceptedNames", accepted,
                  "storedVersions", stored);
    json_object_set_new(crd, "status", status);
}

struct kd_restype *kd_api__ns_type(struct kd_api *api)
{
    return kd_registry_find(api->reg, "", "v1", "namespaces");
}

/* Remove one field named by a path such as "spec.a[2].b" (as lib/openapi writes them). */
static void prune_path(json_t *obj, const char *path)
{
    json_t *cur = obj;
    char buf[512];
    kd_strlcpy(buf, path, sizeof(buf));
    char *p = buf;
    while (cur != NULL && *p != '\0') {
        char *end = p + strcspn(p, ".[");
        char sep = *end;
        *end = '\0';
        if (sep == '\0') {
            if (json_is_object(cur))
                json_object_del(cur, p);
            return;
        }
        if (*p != '\0')
            cur = json_object_get(cur, p);
        p = end + 1;
        while (sep == '[' && cur != NULL) {
            uint64_t idx;
            char *close = strchr(p, ']');
            if (close == NULL)
                return;
            *close = '\0';
            if (kd_parse_u64(p, &idx) < 0)
                return;
            cur = json_array_get(cur, (size_t)idx);
            p = close + 1;
            sep = *p;
            if (sep == '\0')
                return;
            p++;
        }
    }
}

/*
 * kube-apiserver decodes a custom resource's numbers into int64 or float64
 * and encodes a float64 with an integral value without a fraction, so
 * `1.0` (or `1e3`) is stored and read back as `1` (`1000`). The same here:
 * reals with an integral value (within int64) become integers.
 */
static void integral_numbers(json_t *v);

/* An integer to replace the integral real x with, or NULL after descending into x. */
static json_t *integral_member(json_t *x)
{
    double d = json_real_value(x);
    if (json_is_real(x) && d == floor(d) && fabs(d) < 9.2e18)
        return json_integer((json_int_t)d);
    integral_numbers(x);
    return NULL;
}

static void integral_numbers(json_t *v)
{
    const char *k;
    json_t *x, *n;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, x)
        {
            if ((n = integral_member(x)) != NULL)
                json_object_set_new(v, k, n);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x)
        {
            if ((n = integral_member(x)) != NULL)
                json_array_set_new(v, i, n);
        }
    }
}

/*
 * Custom resources: unknown fields are an error under fieldValidation=Strict
 * (kubectl's default) and pruned otherwise, then the object is validated
 * against the CRD's schema. 0, or the response has been sent.
 */
static int cr_check(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                    json_t *obj)
{
    int rc = 0;
    json_t *unknown = NULL, *causes = NULL;
    if (!rt->builtin)
        integral_numbers(obj);
    if (rt->builtin || rt->schema == NULL)
        goto out;
    if (kd_openapi_unknown_fields(rt->schema, obj, "", &unknown) == 0) {
        /* The root's apiVersion and kind are always known, like metadata. */
        for (size_t i = 0; i < json_array_size(unknown);) {
            const char *u = json_string_value(json_array_get(unknown, i));
            if (strcmp(u, "apiVersion") == 0 || strcmp(u, "kind") == 0)
                json_array_remove(unknown, i);
            else
                i++;
        }
    }
    if (json_array_size(unknown) > 0) {
        const char *fv = kd_http_query(r, "fieldValidation");
        if (fv != NULL && strcmp(fv, "Strict") == 0) {
            struct kd_buf b = KD_BUF_INIT(8192);
            int e = kd_buf_printf(&b,
                                  "%s in version \"%s\" cannot be handled as a %s: strict "
                                  "decoding error: ",
                                  rt->kind, rt->version, rt->kind);
            size_t i;
            json_t *u;
            json_array_foreach(unknown, i, u)
            {
                e = e ? e
                      : kd_buf_printf(&b, "%sunknown field \"%s\"", i > 0 ? ", " : "",
                                      json_string_value(u));
            }
            kd_api__bad_request(r, kd_buf_str(&b));
            kd_buf_free(&b);
            rc = KD_EINVALID;
            goto out;
        }
        size_t i;
        json_t *u;
        json_array_foreach(unknown, i, u) prune_path(obj, json_string_value(u));
    }
    rc = kd_openapi_validate(rt->schema, obj, "", &causes);
    if (rc == KD_EINVALID) {
        kd_api__invalid(r, rt, name, causes);
        causes = NULL;
    } else if (rc != 0) {
        kd_api__respond_status(r, 500, "InternalError",
                               "the CRD's schema cannot be used for validation", NULL);
    }
out:
    json_decref(unknown);
    json_decref(causes);
    return rc;
}

/*
 * Built-in kinds: their fields' types, quantities, names and size limits
 * (validate.h); every kind: the size of its annotations. 0, or a 422 has
 * been sent.
 */
static int builtin_check(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                         const json_t *obj)
{
    json_t *causes = NULL;
    int rc = kd_local_validate(rt, obj, &causes);
    if (rc == KD_EINVALID)
        kd_api__invalid(r, rt, name, causes);
    else
        json_decref(causes);
    return rc;
}

/* CRDs: every version's schema must be structural. 0, or a 422 has been sent. */
static int crd_check(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                     const json_t *crd)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(crd, "spec"), "versions"), i, v)
    {
        const json_t *schema = json_object_get(json_object_get(v, "schema"), "openAPIV3Schema");
        if (schema == NULL)
            continue;
        char path[128];
        json_t *causes = NULL;
        snprintf(path, sizeof(path), "spec.versions[%zu].schema.openAPIV3Schema", i);
        if (kd_openapi_structural_causes(schema, path, &causes) != 0) {
            kd_api__invalid(r, rt, name,
                            causes ? causes
                                   : json_pack("[o]", kd_api__cause("FieldValueInvalid", path,
                                                                    "Invalid value")));
            return KD_EINVALID;
        }
    }
    return 0;
}

/*
 * Pods: the defaults and admission the real API server applies (restart
 * policy, grace period, scheduler, priority from the PriorityClass). Lock
 * held. 0, or the response has been sent.
 */
static int pod_defaults(struct kd_api *api, struct kd_http_req *r, const struct kd_restype *rt,
                        const char *name, json_t *pod)
{
    json_t *spec = json_object_get(pod, "spec");
    if (!json_is_object(spec) || json_array_size(json_object_get(spec, "containers")) == 0) {
        kd_api__invalid(r, rt, name,
                        json_pack("[o]", kd_api__cause("FieldValueRequired", "spec.containers",
                                                       "Required value")));
        return KD_EINVALID;
    }
    const char *rp = kd_jstr(spec, "restartPolicy");
    if (rp == NULL) {
        json_object_set_new(spec, "restartPolicy", json_string("Always"));
    } else if (strcmp(rp, "Always") != 0 && strcmp(rp, "OnFailure") != 0 &&
               strcmp(rp, "Never") != 0) {
        kd_api__invalid(
            r, rt, name,
            json_pack("[o]",
                      kd_api__cause("FieldValueNotSupported", "spec.restartPolicy",
                                    "Unsupported value: \"%s\": supported values: \"Always\", "
                                    "\"OnFailure\", \"Never\"",
                                    rp)));
        return KD_EINVALID;
    }
    for (int list = 0; list < 2; list++) {
        const char *key = list == 0 ? "initContainers" : "containers";
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(spec, key), i, c)
        {
            const char *tmp = kd_jstr(c, "terminationMessagePolicy");
            if (tmp == NULL) {
                json_object_set_new(c, "terminationMessagePolicy", json_string("File"));
            } else if (strcmp(tmp, "File") != 0 && strcmp(tmp, "FallbackToLogsOnError") != 0) {
                char path[128];
                snprintf(path, sizeof(path), "spec.%s[%zu].terminationMessagePolicy", key, i);
                kd_api__invalid(
                    r, rt, name,
                    json_pack("[o]", kd_api__cause("FieldValueNotSupported", path,
                                                   "Unsupported value: \"%s\": supported values: "
                                                   "\"File\", \"FallbackToLogsOnError\"",
                                                   tmp)));
                return KD_EINVALID;
            }
            if (kd_jstr(c, "terminationMessagePath") == NULL)
                json_object_set_new(c, "terminationMessagePath",
                                    json_string("/dev/termination-log"));
        }
    }
    if (json_object_get(spec, "terminationGracePeriodSeconds") == NULL)
        json_object_set_new(spec, "terminationGracePeriodSeconds", json_integer(30));
    if (kd_jstr(spec, "schedulerName") == NULL)
        json_object_set_new(spec, "schedulerName", json_string("default-scheduler"));
    if (kd_jstr(spec, "dnsPolicy") == NULL)
        json_object_set_new(spec, "dnsPolicy", json_string("ClusterFirst"));
    const char *pcn = kd_jstr(spec, "priorityClassName");
    json_int_t prio = 0;
    if (pcn != NULL && pcn[0] != '\0') {
        json_t *pc = kd_store_get(api->st, "scheduling.k8s.io/priorityclasses", NULL, pcn);
        if (pc == NULL) {
            char msg[600];
            snprintf(msg, sizeof(msg),
                     "pods \"%s\" is forbidden: no PriorityClass with name %s was found", name,
                     pcn);
            kd_api__respond_status(r, 403, "Forbidden", msg, kd_api__details_for(rt, name, "pods"));
            return KD_EFORBIDDEN;
        }
        prio = json_integer_value(json_object_get(pc, "value"));
    } else {
        json_t **pcs = NULL;
        size_t n = kd_store_list(api->st, "scheduling.k8s.io/priorityclasses", NULL, &pcs);
        for (size_t i = 0; i < n; i++) {
            if (json_is_true(json_object_get(pcs[i], "globalDefault"))) {
                json_object_set(spec, "priorityClassName",
                                json_object_get(json_object_get(pcs[i], "metadata"), "name"));
                prio = json_integer_value(json_object_get(pcs[i], "value"));
            }
        }
        free(pcs);
    }
    json_object_set_new(spec, "priority", json_integer(prio));
    json_object_set_new(
        pod, "status",
        json_pack("{s:s,s:s}", "phase", "Pending", "qosClass", kd_sched_qos_class(pod)));
    return 0;
}

/* Secrets: stringData is merged into data (base64) on every write, as the API server does. */
static void secret_string_data(json_t *obj)
{
    json_t *sd = json_object_get(obj, "stringData");
    if (!json_is_object(sd))
        return;
    json_t *data = json_object_get(obj, "data");
    if (!json_is_object(data)) {
        data = json_object();
        json_object_set_new(obj, "data", data);
    }
    const char *k;
    json_t *v;
    json_object_foreach(sd, k, v)
    {
        const char *s = json_string_value(v);
        if (s == NULL)
            continue;
        size_t n = strlen(s);
        char *enc = kd_xmalloc(4 * ((n + 2) / 3) + 1);
        EVP_EncodeBlock((unsigned char *)enc, (const unsigned char *)s, (int)n);
        json_object_set_new(data, k, json_string(enc));
        free(enc);
    }
    json_object_del(obj, "stringData");
}

/*
 * Every namespace has a ServiceAccount "default", as kube-controller-manager's
 * service-account controller makes it (no token: kdet-local has no
 * service-account admission). Lock held.
 */
int kd_api__ensure_default_sa(struct kd_api *api, const char *ns)
{
    if (kd_store_get(api->st, "/serviceaccounts", ns, "default") != NULL)
        return 0;
    char uid[40], now[40];
    kd_api__new_uid(uid, sizeof(uid));
    kd_api__now_rfc3339(now, sizeof(now));
    json_t *sa = json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:s}}", "kind", "ServiceAccount", "apiVersion",
                           "v1", "metadata", "name", "default", "namespace", ns, "uid", uid,
                           "creationTimestamp", now);
    return kd_store_put(api->st, "/serviceaccounts", ns, "default", sa, NULL);
}

/* ---- the strategies ------------------------------------------------------------------------ */

/* Every kind's annotations, and built-in kinds' OpenAPI types, names and sizes, unless a write
 * changes nothing (or only the status). */
static int builtin_validate(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                            json_t *obj, const json_t *cur, bool status_only)
{
    if (cur != NULL && (status_only || kd_api__same_ignoring_rv(cur, obj)))
        return 0;
    return builtin_check(r, rt, name, obj);
}

/* Namespaces: the kubernetes finalizer, phase Active and the name label. */
static int ns_prepare_create(struct kd_api *api, struct kd_http_req *r, const struct kd_restype *rt,
                             const char *name, json_t *obj)
{
    (void)api, (void)r, (void)rt;
    json_t *md = kd_api__meta(obj);
    json_object_set_new(obj, "spec", json_pack("{s:[s]}", "finalizers", "kubernetes"));
    json_object_set_new(obj, "status", json_pack("{s:s}", "phase", "Active"));
    json_t *labels = json_object_get(md, "labels");
    if (!json_is_object(labels)) {
        labels = json_object();
        json_object_set_new(md, "labels", labels);
    }
    json_object_set_new(labels, "kubernetes.io/metadata.name", json_string(name));
    return 0;
}

static int ns_after_create(struct kd_api *api, const json_t *obj)
{
    return kd_api__ensure_default_sa(api, kd_jstr(json_object_get(obj, "metadata"), "name"));
}

static int secret_prepare_create(struct kd_api *api, struct kd_http_req *r,
                                 const struct kd_restype *rt, const char *name, json_t *obj)
{
    (void)api, (void)r, (void)rt, (void)name;
    secret_string_data(obj);
    return 0;
}

static void secret_prepare_update(const json_t *cur, json_t *built)
{
    (void)cur;
    secret_string_data(built);
}

/* A pod on a node that has not finished ends gracefully: the kubelet stops it, then removes it. */
static bool pod_graceful(const json_t *pod, int64_t grace)
{
    const char *nn = kd_jstr(json_object_get(pod, "spec"), "nodeName");
    const char *phase = kd_jstr(json_object_get(pod, "status"), "phase");
    return grace != 0 && nn != NULL && nn[0] != '\0' &&
           !(phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0));
}

static const struct kd_subresource pod_subresources[] = {
    {"binding", "POST", "create", "Binding", kd_api__do_binding},
    {"log", "GET", "get", NULL, kd_api__do_log},
    {NULL, NULL, NULL, NULL, NULL},
};

/* CRDs: structural schemas, the names and versions a kind needs, status from the spec, and their
 * kinds registered before the write and removed with them. */
static int crd_validate(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                        json_t *obj, const json_t *cur, bool status_only)
{
    if (builtin_validate(r, rt, name, obj, cur, status_only) != 0)
        return KD_EINVALID;
    return crd_check(r, rt, name, obj);
}

static int crd_prepare_create(struct kd_api *api, struct kd_http_req *r,
                              const struct kd_restype *rt, const char *name, json_t *obj)
{
    (void)api;
    const json_t *spec = json_object_get(obj, "spec");
    if (kd_jstr(spec, "group") == NULL ||
        kd_jstr(json_object_get(spec, "names"), "plural") == NULL ||
        kd_jstr(json_object_get(spec, "names"), "kind") == NULL ||
        !json_is_array(json_object_get(spec, "versions"))) {
        kd_api__invalid(r, rt, name,
                        json_pack("[o]", kd_api__cause("FieldValueRequired", "spec",
                                                       "Required value: spec.group, "
                                                       "spec.names.plural, spec.names.kind and "
                                                       "spec.versions are required")));
        return KD_EINVALID;
    }
    crd_set_status(obj);
    return 0;
}

static void crd_prepare_update(const json_t *cur, json_t *built)
{
    (void)cur;
    crd_set_status(built);
}

static int crd_admit_write(struct kd_api *api, const json_t *cur, const json_t *obj, char *err)
{
    int rc = kd_registry_apply_crd(api->reg, obj, err);
    char err2[KD_ERRLEN];
    if (rc != 0 && cur != NULL && kd_registry_apply_crd(api->reg, cur, err2) != 0)
        KD_WARN("could not restore a CRD's kinds", "err=%s", kd_logq(err2));
    return rc;
}

/* Its kinds go, and so do their objects (newest first). */
static void crd_after_delete(struct kd_api *api, const char *name)
{
    kd_registry_remove_crd(api->reg, name);
    const char *dot = strchr(name, '.');
    if (dot == NULL)
        return;
    char *gr = kd_xasprintf("%s/%.*s", dot + 1, (int)(dot - name), name);
    json_t **items = NULL;
    size_t n = kd_store_list(api->st, gr, NULL, &items);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_incref(items[n - 1 - i]);
        const json_t *m = json_object_get(o, "metadata");
        int r2 = kd_store_delete(api->st, gr, kd_jstr(m, "namespace"), kd_jstr(m, "name"), NULL);
        (void)r2;
        json_decref(o);
    }
    free(items);
    free(gr);
}

/* Custom resources: their CRD's schema (pruning, defaults, integral numbers), unless nothing
 * changed; with a status subresource, create ignores status. */
static int cr_validate(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                       json_t *obj, const json_t *cur, bool status_only)
{
    /* Annotations are checked as for every kind; then the CRD's schema, status included. */
    if (builtin_validate(r, rt, name, obj, cur, status_only) != 0)
        return KD_EINVALID;
    if (cur != NULL && kd_api__same_ignoring_rv(cur, obj))
        return 0;
    return cr_check(r, rt, name, obj);
}

static int cr_prepare_create(struct kd_api *api, struct kd_http_req *r, const struct kd_restype *rt,
                             const char *name, json_t *obj)
{
    (void)api, (void)r, (void)name;
    if (rt->has_status)
        json_object_del(obj, "status");
    return 0;
}

static const struct kd_strategy builtin_strategy = {
    .validate = builtin_validate,
    .strategic_merge = true,
};

static const struct kd_strategy service_strategy = {
    .validate = builtin_validate,
    .strategic_merge = true,
    .name_rule = KD_NAME_DNS1035,
};

static const struct kd_strategy ns_strategy = {
    .validate = builtin_validate,
    .name_rule = KD_NAME_LABEL,
    .prepare_create = ns_prepare_create,
    .after_create = ns_after_create,
    .delete_waits = true,
    .strategic_merge = true,
};

static const struct kd_strategy secret_strategy = {
    .validate = builtin_validate,
    .prepare_create = secret_prepare_create,
    .prepare_update = secret_prepare_update,
    .strategic_merge = true,
};

static const struct kd_strategy pod_strategy = {
    .validate = builtin_validate,
    .prepare_create = pod_defaults,
    .graceful = pod_graceful,
    .delete_returns_object = true,
    .strategic_merge = true,
    .subresources = pod_subresources,
};

static const struct kd_strategy crd_strategy = {
    .validate = crd_validate,
    .prepare_create = crd_prepare_create,
    .prepare_update = crd_prepare_update,
    .admit_write = crd_admit_write,
    .after_delete = crd_after_delete,
    .update_needs_rv = true,
    .strategic_merge = true,
};

static const struct kd_strategy cr_strategy = {
    .validate = cr_validate,
    .prepare_create = cr_prepare_create,
    .update_needs_rv = true,
};

const struct kd_strategy *kd_strategy_of(const struct kd_restype *rt)
{
    static const struct {
        const char *gr;
        const struct kd_strategy *s;
    } kinds[] = {
        {"/namespaces", &ns_strategy},
        {"/secrets", &secret_strategy},
        {"/services", &service_strategy},
        {"/pods", &pod_strategy},
        {"apiextensions.k8s.io/customresourcedefinitions", &crd_strategy},
    };
    if (!rt->builtin)
        return &cr_strategy;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(rt->gr, kinds[i].gr) == 0)
            return kinds[i].s;
    return &builtin_strategy;
}
