/*
 * The built-in kinds' validation (validate.h). Each kind's OpenAPI schema is
 * built here once, from the types of the Kubernetes API reference (k8s.io/api
 * core/v1 and friends), with every node nullable as Go's decoder accepts a
 * null for any field; lib/openapi then checks an object against it as it
 * checks custom resources. What the schemas cannot say (quantities, names,
 * keys, sizes) is checked by hand below with kube-apiserver's messages.
 */
#include "validate.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "openapi/openapi.h"
#include "quantity.h"

/* ---- schema builders (each returns a new reference) ----------------------------------- */

static json_t *typed(const char *type)
{
    return json_pack("{s:s,s:b}", "type", type, "nullable", 1);
}

static json_t *str(void)
{
    return typed("string");
}

static json_t *integer(void)
{
    return typed("integer");
}

static json_t *boolean(void)
{
    return typed("boolean");
}

/* An object of any content. */
static json_t *any_object(void)
{
    return typed("object");
}

/* An array whose items are `items` (stolen). */
static json_t *array(json_t *items)
{
    json_t *s = typed("array");
    json_object_set_new(s, "items", items);
    return s;
}

/* A map from strings to `values` (stolen). */
static json_t *map(json_t *values)
{
    json_t *s = typed("object");
    json_object_set_new(s, "additionalProperties", values);
    return s;
}

/* An int-or-string (targetPort, maxUnavailable). */
static json_t *int_or_string(void)
{
    return json_pack("{s:b,s:b}", "x-kubernetes-int-or-string", 1, "nullable", 1);
}

/* An object with the properties given as NAME, SCHEMA (stolen) pairs, ending with NULL. */
static json_t *object(const char *first, ...)
{
    json_t *s = typed("object");
    json_t *props = json_object();
    va_list ap;
    va_start(ap, first);
    for (const char *k = first; k != NULL; k = va_arg(ap, const char *))
        json_object_set_new(props, k, va_arg(ap, json_t *));
    va_end(ap);
    json_object_set_new(s, "properties", props);
    return s;
}

/* The same object with `required` (NULL-terminated names) set. */
static json_t *require(json_t *s, const char *first, ...)
{
    json_t *req = json_array();
    va_list ap;
    va_start(ap, first);
    for (const char *k = first; k != NULL; k = va_arg(ap, const char *))
        json_array_append_new(req, json_string(k));
    va_end(ap);
    json_object_set_new(s, "required", req);
    return s;
}

static json_t *strings(void)
{
    return array(str());
}

static json_t *string_map(void)
{
    return map(str());
}

static json_t *object_meta(void)
{
    return object(
        "name", str(), "generateName", str(), "namespace", str(), "uid", str(), "resourceVersion",
        str(), "generation", integer(), "creationTimestamp", str(), "deletionTimestamp", str(),
        "deletionGracePeriodSeconds", integer(), "labels", string_map(), "annotations",
        string_map(), "finalizers", strings(), "managedFields", array(any_object()),
        "ownerReferences",
        array(require(object("apiVersion", str(), "kind", str(), "name", str(), "uid", str(),
                             "controller", boolean(), "blockOwnerDeletion", boolean(), NULL),
                      "apiVersion", "kind", "name", "uid", NULL)),
        NULL);
}

static json_t *security_context(bool pod)
{
    json_t *s = object("runAsUser", integer(), "runAsGroup", integer(), "runAsNonRoot", boolean(),
                       "seLinuxOptions", any_object(), "seccompProfile", any_object(),
                       "windowsOptions", any_object(), NULL);
    json_t *p = json_object_get(s, "properties");
    if (pod) {
        json_object_set_new(p, "fsGroup", integer());
        json_object_set_new(p, "fsGroupChangePolicy", str());
        json_object_set_new(p, "supplementalGroups", array(integer()));
        json_object_set_new(p, "sysctls", array(object("name", str(), "value", str(), NULL)));
    } else {
        json_object_set_new(p, "privileged", boolean());
        json_object_set_new(p, "allowPrivilegeEscalation", boolean());
        json_object_set_new(p, "readOnlyRootFilesystem", boolean());
        json_object_set_new(p, "procMount", str());
        json_object_set_new(p, "capabilities", object("add", strings(), "drop", strings(), NULL));
    }
    return s;
}

static json_t *probe(void)
{
    return object("exec", object("command", strings(), NULL), "httpGet", any_object(), "tcpSocket",
                  any_object(), "grpc", any_object(), "initialDelaySeconds", integer(),
                  "timeoutSeconds", integer(), "periodSeconds", integer(), "successThreshold",
                  integer(), "failureThreshold", integer(), "terminationGracePeriodSeconds",
                  integer(), NULL);
}

/* Quantities are checked by hand (check_resources): a string or a number. */
static json_t *container(void)
{
    return require(
        object("name", str(), "image", str(), "command", strings(), "args", strings(), "workingDir",
               str(), "imagePullPolicy", str(), "env",
               array(require(object("name", str(), "value", str(), "valueFrom", any_object(), NULL),
                             "name", NULL)),
               "envFrom", array(any_object()), "ports",
               array(require(object("containerPort", integer(), "hostPort", integer(), "name",
                                    str(), "protocol", str(), "hostIP", str(), NULL),
                             "containerPort", NULL)),
               "resources",
               object("limits", any_object(), "requests", any_object(), "claims",
                      array(any_object()), NULL),
               "volumeMounts",
               array(require(object("name", str(), "mountPath", str(), "readOnly", boolean(),
                                    "subPath", str(), "subPathExpr", str(), "mountPropagation",
                                    str(), NULL),
                             "name", "mountPath", NULL)),
               "volumeDevices", array(any_object()), "securityContext", security_context(false),
               "livenessProbe", probe(), "readinessProbe", probe(), "startupProbe", probe(),
               "lifecycle", any_object(), "stdin", boolean(), "stdinOnce", boolean(), "tty",
               boolean(), "terminationMessagePath", str(), "terminationMessagePolicy", str(),
               "restartPolicy", str(), NULL),
        "name", NULL);
}

static json_t *volume(void)
{
    return require(object("name", str(), "emptyDir",
                          object("medium", str(), "sizeLimit", int_or_string(), NULL), "hostPath",
                          require(object("path", str(), "type", str(), NULL), "path", NULL),
                          "configMap", any_object(), "secret", any_object(),
                          "persistentVolumeClaim", any_object(), "projected", any_object(),
                          "downwardAPI", any_object(), "nfs", any_object(), "csi", any_object(),
                          "ephemeral", any_object(), NULL),
                   "name", NULL);
}

static json_t *pod_schema(void)
{
    json_t *spec = object(
        "containers", array(container()), "initContainers", array(container()),
        "ephemeralContainers", array(any_object()), "volumes", array(volume()), "restartPolicy",
        str(), "terminationGracePeriodSeconds", integer(), "activeDeadlineSeconds", integer(),
        "dnsPolicy", str(), "dnsConfig", any_object(), "nodeSelector", string_map(),
        "serviceAccountName", str(), "serviceAccount", str(), "automountServiceAccountToken",
        boolean(), "nodeName", str(), "hostNetwork", boolean(), "hostPID", boolean(), "hostIPC",
        boolean(), "shareProcessNamespace", boolean(), "securityContext", security_context(true),
        "imagePullSecrets", array(any_object()), "hostname", str(), "subdomain", str(), "affinity",
        any_object(), "schedulerName", str(), "tolerations",
        array(object("key", str(), "operator", str(), "value", str(), "effect", str(),
                     "tolerationSeconds", integer(), NULL)),
        "hostAliases", array(any_object()), "priorityClassName", str(), "priority", integer(),
        "readinessGates", array(any_object()), "runtimeClassName", str(), "enableServiceLinks",
        boolean(), "preemptionPolicy", str(), "overhead", any_object(), "topologySpreadConstraints",
        array(any_object()), "setHostnameAsFQDN", boolean(), "os", any_object(), "hostUsers",
        boolean(), "schedulingGates", array(any_object()), "resourceClaims", array(any_object()),
        NULL);
    return object("apiVersion", str(), "kind", str(), "metadata", object_meta(), "spec", spec,
                  "status", any_object(), NULL);
}

static json_t *kind_schema(const char *kind)
{
    if (strcmp(kind, "Pod") == 0)
        return pod_schema();
    json_t *s = object("apiVersion", str(), "kind", str(), "metadata", object_meta(), NULL);
    json_t *p = json_object_get(s, "properties");
    if (strcmp(kind, "ConfigMap") == 0) {
        json_object_set_new(p, "data", string_map());
        json_object_set_new(p, "binaryData", string_map());
        json_object_set_new(p, "immutable", boolean());
    } else if (strcmp(kind, "Secret") == 0) {
        json_object_set_new(p, "data", string_map());
        json_object_set_new(p, "stringData", string_map());
        json_object_set_new(p, "type", str());
        json_object_set_new(p, "immutable", boolean());
    } else if (strcmp(kind, "Service") == 0) {
        json_object_set_new(
            p, "spec",
            object("type", str(), "selector", string_map(), "clusterIP", str(), "clusterIPs",
                   strings(), "externalIPs", strings(), "externalName", str(), "sessionAffinity",
                   str(), "publishNotReadyAddresses", boolean(), "ipFamilies", strings(),
                   "ipFamilyPolicy", str(), "loadBalancerIP", str(), "externalTrafficPolicy", str(),
                   "internalTrafficPolicy", str(), "ports",
                   array(require(object("name", str(), "protocol", str(), "appProtocol", str(),
                                        "port", integer(), "targetPort", int_or_string(),
                                        "nodePort", integer(), NULL),
                                 "port", NULL)),
                   NULL));
        json_object_set_new(p, "status", any_object());
    } else if (strcmp(kind, "Event") == 0) {
        json_object_set_new(p, "involvedObject",
                            object("kind", str(), "namespace", str(), "name", str(), "uid", str(),
                                   "apiVersion", str(), "resourceVersion", str(), "fieldPath",
                                   str(), NULL));
        json_object_set_new(p, "reason", str());
        json_object_set_new(p, "message", str());
        json_object_set_new(p, "source", object("component", str(), "host", str(), NULL));
        json_object_set_new(p, "firstTimestamp", str());
        json_object_set_new(p, "lastTimestamp", str());
        json_object_set_new(p, "eventTime", str());
        json_object_set_new(p, "count", integer());
        json_object_set_new(p, "type", str());
        json_object_set_new(p, "series",
                            object("count", integer(), "lastObservedTime", str(), NULL));
        json_object_set_new(p, "action", str());
        json_object_set_new(p, "related", any_object());
        json_object_set_new(p, "reportingComponent", str());
        json_object_set_new(p, "reportingInstance", str());
    } else if (strcmp(kind, "Node") == 0) {
        json_object_set_new(p, "spec",
                            object("podCIDR", str(), "podCIDRs", strings(), "providerID", str(),
                                   "unschedulable", boolean(), "taints",
                                   array(require(object("key", str(), "value", str(), "effect",
                                                        str(), "timeAdded", str(), NULL),
                                                 "key", "effect", NULL)),
                                   NULL));
        json_object_set_new(p, "status", any_object());
    } else if (strcmp(kind, "Namespace") == 0) {
        json_object_set_new(p, "spec", object("finalizers", strings(), NULL));
        json_object_set_new(p, "status",
                            object("phase", str(), "conditions", array(any_object()), NULL));
    } else if (strcmp(kind, "Lease") == 0) {
        json_object_set_new(p, "spec",
                            object("holderIdentity", str(), "leaseDurationSeconds", integer(),
                                   "acquireTime", str(), "renewTime", str(), "leaseTransitions",
                                   integer(), "strategy", str(), "preferredHolder", str(), NULL));
    } else if (strcmp(kind, "PriorityClass") == 0) {
        json_object_set_new(p, "value", integer());
        json_object_set_new(p, "globalDefault", boolean());
        json_object_set_new(p, "description", str());
        json_object_set_new(p, "preemptionPolicy", str());
    } else if (strcmp(kind, "ServiceAccount") == 0) {
        json_object_set_new(p, "secrets", array(any_object()));
        json_object_set_new(p, "imagePullSecrets", array(any_object()));
        json_object_set_new(p, "automountServiceAccountToken", boolean());
    } else {
        json_decref(s);
        s = NULL;
    }
    return s;
}

static const char *const kinds[] = {"Pod",           "ConfigMap",     "Secret",    "Service",
                                    "Event",         "Node",          "Namespace", "Lease",
                                    "PriorityClass", "ServiceAccount"};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))
static json_t *schemas[NKINDS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build_schemas(void)
{
    for (size_t i = 0; i < NKINDS; i++)
        schemas[i] = kind_schema(kinds[i]);
}

static const json_t *schema_for(const char *kind)
{
    pthread_once(&once, build_schemas);
    for (size_t i = 0; i < NKINDS; i++)
        if (strcmp(kinds[i], kind) == 0)
            return schemas[i];
    return NULL;
}

/* ---- rules beyond the types ----------------------------------------------------------- */

static void add(json_t *causes, const char *reason, const char *field, const char *fmt, ...)
    KD_PRINTF(4, 5);
static void add(json_t *causes, const char *reason, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_array_append_new(
        causes, json_pack("{s:s,s:s,s:s}", "reason", reason, "message", msg, "field", field));
}

bool kd_local_dns_name_part(const char *s, size_t max, bool letter_first)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (c != '-' || i == 0 || i == n - 1))
            return false;
    }
    return !letter_first || (s[0] >= 'a' && s[0] <= 'z');
}

bool kd_local_dns_label(const char *s)
{
    return kd_local_dns_name_part(s, 63, false);
}

#define DNS_LABEL_MSG                                                                              \
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "   \
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "     \
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
#define QUANTITY_MSG                                                                               \
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
/* The largest quantity kdet-local's scheduler adds up exactly (thousandths in an int64). */
#define MAX_QUANTITY_UNITS 9000000000000000.0

/* A JSON value for a message: strings quoted, other values as JSON. */
static void show(const json_t *v, char *buf, size_t len)
{
    if (json_is_string(v)) {
        snprintf(buf, len, "\"%.200s\"", json_string_value(v));
        return;
    }
    char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, len, "%.200s", d != NULL ? d : "null");
    free(d);
}

/* Whether a resource name is an extended resource (in a domain other than kubernetes.io). */
static bool extended(const char *name)
{
    const char *slash = strchr(name, '/');
    if (slash == NULL)
        return false;
    static const char dom[] = "kubernetes.io";
    size_t n = (size_t)(slash - name), d = sizeof(dom) - 1;
    if (n == d && strncmp(name, dom, d) == 0)
        return false;
    if (n > d && name[n - d - 1] == '.' && strncmp(name + n - d, dom, d) == 0)
        return false;
    return true;
}

/*
 * One quantity. *milli gets its value when valid (returns true).
 * kube-apiserver decodes "abc" as a 400; here it is a 422 with the same text.
 */
static bool check_quantity(json_t *causes, const char *field, const char *res, const json_t *v,
                           int64_t *milli)
{
    char shown[256], err[KD_ERRLEN];
    show(v, shown, sizeof(shown));
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if (d < 0) {
            add(causes, "FieldValueInvalid", field,
                "Invalid value: %s: must be greater than or equal to 0", shown);
            return false;
        }
        if (d > MAX_QUANTITY_UNITS) {
            add(causes, "FieldValueInvalid", field,
                "Invalid value: %s: must be less than or equal to 9000000000000000", shown);
            return false;
        }
        *milli = (int64_t)(d * 1000.0 + 0.5);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (s[0] == '-' && s[1] != '\0' && kd_quantity_parse_milli(s + 1, milli, NULL) == 0) {
            if (*milli == 0)
                return true;
            add(causes, "FieldValueInvalid", field,
                "Invalid value: %s: must be greater than or equal to 0", shown);
            return false;
        }
        if (kd_quantity_parse_milli(s, milli, err) != 0) {
            /* too large for kdet-local, or not a quantity at all */
            if (strstr(err, "too large") != NULL)
                add(causes, "FieldValueInvalid", field,
                    "Invalid value: %s: must be less than or equal to 9000000000000000", shown);
            else
                add(causes, "FieldValueInvalid", field, "Invalid value: %s: %s", shown,
                    QUANTITY_MSG);
            return false;
        }
        if ((double)*milli > MAX_QUANTITY_UNITS * 1000.0) {
            add(causes, "FieldValueInvalid", field,
                "Invalid value: %s: must be less than or equal to 9000000000000000", shown);
            return false;
        }
    } else {
        add(causes, "FieldValueInvalid", field, "Invalid value: %s: %s", shown, QUANTITY_MSG);
        return false;
    }
    if (extended(res) && *milli % 1000 != 0) {
        add(causes, "FieldValueInvalid", field, "Invalid value: %s: must be an integer", shown);
        return false;
    }
    return true;
}

/* resources.requests and .limits of one container (path "spec.containers[0]"). */
static void check_resources(json_t *causes, const char *path, const json_t *c)
{
    const json_t *res = json_object_get(c, "resources");
    const json_t *lim = json_object_get(res, "limits");
    const json_t *req = json_object_get(res, "requests");
    char field[512];
    const char *k;
    json_t *v;
    if (json_is_object(lim)) {
        json_object_foreach((json_t *)lim, k, v)
        {
            int64_t m = 0;
            snprintf(field, sizeof(field), "%s.resources.limits[%s]", path, k);
            (void)check_quantity(causes, field, k, v, &m);
        }
    }
    if (!json_is_object(req))
        return;
    json_object_foreach((json_t *)req, k, v)
    {
        int64_t m = 0, lm = 0;
        snprintf(field, sizeof(field), "%s.resources.requests[%s]", path, k);
        if (!check_quantity(causes, field, k, v, &m))
            continue;
        const json_t *l = json_object_get(lim, k);
        json_t *scratch = json_array();
        bool lok = l != NULL && check_quantity(scratch, field, k, l, &lm);
        json_decref(scratch);
        char shown[256];
        show(v, shown, sizeof(shown));
        if (extended(k) && l == NULL) {
            snprintf(field, sizeof(field), "%s.resources.limits", path);
            add(causes, "FieldValueRequired", field,
                "Required value: Limit must be set for non overcommitable resources");
        } else if (extended(k) && lok && m != lm) {
            add(causes, "FieldValueInvalid", field, "Invalid value: %s: must be equal to %s limit",
                shown, k);
        } else if (lok && m > lm) {
            add(causes, "FieldValueInvalid", field,
                "Invalid value: %s: must be less than or equal to %s limit", shown, k);
        }
    }
}

/* runAsUser, runAsGroup (and the pod's fsGroup, supplementalGroups) are ids in 0..2^31-1. */
static void check_ids(json_t *causes, const char *path, const json_t *sc)
{
    static const char *const ids[] = {"runAsUser", "runAsGroup", "fsGroup", NULL};
    char field[256];
    for (const char *const *k = ids; *k != NULL; k++) {
        const json_t *v = json_object_get(sc, *k);
        if (json_is_integer(v) &&
            (json_integer_value(v) < 0 || json_integer_value(v) > 2147483647)) {
            snprintf(field, sizeof(field), "%s.%s", path, *k);
            add(causes, "FieldValueInvalid", field,
                "Invalid value: %lld: must be between 0 and 2147483647, inclusive",
                (long long)json_integer_value(v));
        }
    }
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(sc, "supplementalGroups"), i, g)
    {
        if (json_is_integer(g) &&
            (json_integer_value(g) < 0 || json_integer_value(g) > 2147483647)) {
            snprintf(field, sizeof(field), "%s.supplementalGroups[%zu]", path, i);
            add(causes, "FieldValueInvalid", field,
                "Invalid value: %lld: must be between 0 and 2147483647, inclusive",
                (long long)json_integer_value(g));
        }
    }
}

static void check_containers(json_t *causes, const json_t *spec, const char *list)
{
    size_t i;
    json_t *c;
    char path[128], field[160];
    json_array_foreach(json_object_get(spec, list), i, c)
    {
        snprintf(path, sizeof(path), "spec.%s[%zu]", list, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        snprintf(field, sizeof(field), "%s.name", path);
        if (name != NULL && name[0] == '\0')
            add(causes, "FieldValueRequired", field, "Required value");
        else if (name != NULL && !kd_local_dns_label(name))
            add(causes, "FieldValueInvalid", field, "Invalid value: \"%.200s\": %s", name,
                DNS_LABEL_MSG);
        check_resources(causes, path, c);
        snprintf(field, sizeof(field), "%s.securityContext", path);
        check_ids(causes, field, json_object_get(c, "securityContext"));
    }
}

/* Container names are unique across containers and initContainers; volume names among volumes. */
static void check_unique(json_t *causes, const json_t *spec)
{
    static const char *const lists[] = {"initContainers", "containers"};
    json_t *seen = json_object();
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(spec, lists[l]), i, c)
        {
            const char *name = json_string_value(json_object_get(c, "name"));
            if (name == NULL || name[0] == '\0')
                continue;
            if (json_object_get(seen, name) != NULL) {
                char field[160];
                snprintf(field, sizeof(field), "spec.%s[%zu].name", lists[l], i);
                add(causes, "FieldValueDuplicate", field, "Duplicate value: \"%.200s\"", name);
            }
            json_object_set_new(seen, name, json_true());
        }
    }
    json_object_clear(seen);
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(spec, "volumes"), i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        char field[160];
        snprintf(field, sizeof(field), "spec.volumes[%zu].name", i);
        if (name == NULL)
            continue;
        if (!kd_local_dns_label(name))
            add(causes, "FieldValueInvalid", field, "Invalid value: \"%.200s\": %s", name,
                DNS_LABEL_MSG);
        else if (json_object_get(seen, name) != NULL)
            add(causes, "FieldValueDuplicate", field, "Duplicate value: \"%.200s\"", name);
        json_object_set_new(seen, name, json_true());
    }
    json_decref(seen);
}

static bool config_key(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 253 || strcmp(k, ".") == 0 || strcmp(k, "..") == 0 ||
        strncmp(k, "..", 2) == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* ConfigMap/Secret keys, and the 1 MiB of data (keys and values) they may hold. */
static void check_data(json_t *causes, const json_t *obj, bool secret)
{
    static const char *const cm_maps[] = {"data", "binaryData", NULL};
    static const char *const secret_maps[] = {"data", "stringData", NULL};
    size_t total = 0;
    for (const char *const *m = secret ? secret_maps : cm_maps; *m != NULL; m++) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(obj, *m), k, v)
        {
            if (!config_key(k)) {
                char field[320];
                snprintf(field, sizeof(field), "%s[%.250s]", *m, k);
                add(causes, "FieldValueInvalid", field,
                    "Invalid value: \"%.250s\": a valid config key must consist of alphanumeric "
                    "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
                    "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                    k);
            }
            total += strlen(k) + (json_is_string(v) ? json_string_length(v) : 0);
        }
    }
    if (total > KD_LOCAL_MAX_DATA_BYTES) {
        if (secret)
            add(causes, "FieldValueTooLong", "data", "Too long: must have at most %d bytes",
                KD_LOCAL_MAX_DATA_BYTES);
        else
            add(causes, "FieldValueTooLong", "[]", "Too long: must have at most %d bytes",
                KD_LOCAL_MAX_DATA_BYTES);
    }
}

static void check_annotations(json_t *causes, const json_t *obj)
{
    size_t total = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(json_object_get(obj, "metadata"), "annotations"), k, v)
        total += strlen(k) + (json_is_string(v) ? json_string_length(v) : 0);
    if (total > KD_LOCAL_MAX_ANNOTATION_BYTES)
        add(causes, "FieldValueTooLong", "metadata.annotations",
            "Too long: must have at most %d bytes", KD_LOCAL_MAX_ANNOTATION_BYTES);
}

int kd_local_validate(const struct kd_restype *rt, const json_t *obj, json_t **causes)
{
    int rc = 0;
    json_t *all = json_array();
    *causes = NULL;
    check_annotations(all, obj);
    if (rt->builtin) {
        const json_t *schema = schema_for(rt->kind);
        json_t *type_causes = NULL;
        if (schema != NULL && kd_openapi_validate(schema, obj, "", &type_causes) == KD_EINVALID)
            json_array_extend(all, type_causes);
        json_decref(type_causes);
        /* The rules below read fields of the right types only: skip them after a type error. */
        if (json_array_size(all) == 0) {
            if (strcmp(rt->kind, "Pod") == 0) {
                const json_t *spec = json_object_get(obj, "spec");
                check_ids(all, "spec.securityContext", json_object_get(spec, "securityContext"));
                check_containers(all, spec, "initContainers");
                check_containers(all, spec, "containers");
                check_unique(all, spec);
            } else if (strcmp(rt->kind, "ConfigMap") == 0) {
                check_data(all, obj, false);
            } else if (strcmp(rt->kind, "Secret") == 0) {
                check_data(all, obj, true);
            }
        }
    }
    if (json_array_size(all) > 0) {
        *causes = all;
        all = NULL;
        rc = KD_EINVALID;
    }
    json_decref(all);
    return rc;
}
