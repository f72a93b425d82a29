/*
 * Table printing for kubectl get: per-kind columns that follow the real
 * API server's printers (pods' READY/STATUS/RESTARTS, configmaps' DATA,
 * ...), CRD printer columns through a small JSONPath subset, and ages
 * formatted as kubectl's HumanDuration does.
 */
#include "json.h"
#include "table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "core/time.h"
#include "registry.h"

const char *kd_table_age(int64_t s, char *buf, size_t len)
{
    if (s < -1) {
        snprintf(buf, len, "<invalid>");
        return buf;
    }
    if (s < 0)
        s = 0;
    int64_t m = s / 60, h = s / 3600, d = h / 24, y = d / 365;
    if (s < 120)
        snprintf(buf, len, "%llds", (long long)s);
    else if (m < 10)
        snprintf(buf, len, s % 60 == 0 ? "%lldm" : "%lldm%llds", (long long)m, (long long)(s % 60));
    else if (m < 180)
        snprintf(buf, len, "%lldm", (long long)m);
    else if (h < 8)
        snprintf(buf, len, m % 60 == 0 ? "%lldh" : "%lldh%lldm", (long long)h, (long long)(m % 60));
    else if (h < 48)
        snprintf(buf, len, "%lldh", (long long)h);
    else if (h < 24 * 8)
        snprintf(buf, len, h % 24 == 0 ? "%lldd" : "%lldd%lldh", (long long)d, (long long)(h % 24));
    else if (d < 365 * 2)
        snprintf(buf, len, "%lldd", (long long)d);
    else if (d < 365 * 8)
        snprintf(buf, len, d % 365 == 0 ? "%lldy" : "%lldy%lldd", (long long)y,
                 (long long)(d % 365));
    else
        snprintf(buf, len, "%lldy", (long long)y);
    return buf;
}

static json_t *age_cell(const char *ts, int64_t now_ms)
{
    int64_t ms;
    char buf[32];
    if (ts == NULL || kd_time_parse_rfc3339(ts, &ms) != 0)
        return json_string("<unknown>");
    return json_string(kd_table_age((now_ms - ms) / 1000, buf, sizeof(buf)));
}

const json_t *kd_table_jsonpath(const json_t *obj, const char *path)
{
    const json_t *cur = obj;
    const char *p = path;
    if (*p == '{')
        p++;
    while (cur != NULL && *p != '\0' && *p != '}') {
        if (*p == '.') {
            p++;
            size_t n = strcspn(p, ".[}");
            char key[128];
            if (n == 0 || n >= sizeof(key))
                return NULL;
            memcpy(key, p, n);
            key[n] = '\0';
            cur = json_object_get(cur, key);
            p += n;
        } else if (*p == '[') {
            const char *close = strchr(p, ']');
            if (close == NULL)
                return NULL;
            if (p[1] == '?') {
                /* [?(@.key=="value")] : the first element whose key equals value */
                const char *at = strstr(p, "@.");
                const char *eq = strstr(p, "==");
                if (at == NULL || eq == NULL || eq > close)
                    return NULL;
                char key[128], val[256];
                size_t kn = (size_t)(eq - at - 2);
                const char *v = eq + 2;
                char quote = (*v == '"' || *v == '\'') ? *v : 0;
                if (quote)
                    v++;
                const char *vend = quote ? strchr(v, quote) : strchr(v, ')');
                if (kn >= sizeof(key) || vend == NULL || (size_t)(vend - v) >= sizeof(val))
                    return NULL;
                memcpy(key, at + 2, kn);
                key[kn] = '\0';
                memcpy(val, v, (size_t)(vend - v));
                val[vend - v] = '\0';
                close = strchr(vend, ']');
                if (close == NULL)
                    return NULL;
                const json_t *found = NULL;
                size_t i;
                json_t *it;
                json_array_foreach(cur, i, it)
                {
                    const char *s = kd_jstr(it, key);
                    if (found == NULL && s != NULL && strcmp(s, val) == 0)
                        found = it;
                }
                cur = found;
            } else {
                char idx[32];
                size_t n = (size_t)(close - p - 1);
                uint64_t k;
                if (n >= sizeof(idx))
                    return NULL;
                memcpy(idx, p + 1, n);
                idx[n] = '\0';
                if (strcmp(idx, "*") == 0)
                    k = 0;
                else if (kd_parse_u64(idx, &k) != 0)
                    return NULL;
                cur = json_array_get(cur, (size_t)k);
            }
            p = close + 1;
        } else {
            return NULL;
        }
    }
    return cur;
}

/* ---- columns -------------------------------------------------------------------------- */

static json_t *col(const char *name, const char *type, const char *format, const char *desc,
                   int priority)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:i}", "name", name, "type", type, "format", format,
                     "description", desc, "priority", priority);
}

static json_t *name_col(void)
{
    return col("Name", "string", "name",
               "Name must be unique within a namespace. More info: "
               "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
               0);
}

static json_t *age_col(void)
{
    return col("Age", "string", "",
               "CreationTimestamp is a timestamp representing the server time when this object "
               "was created.",
               0);
}

static json_t *pod_cells(const json_t *pod, int64_t now_ms)
{
    const json_t *st = json_object_get(pod, "status");
    const char *reason = kd_jstr(st, "reason") ? kd_jstr(st, "reason") : kd_jstr(st, "phase");
    char rbuf[128];
    int total = (int)json_array_size(json_object_get(json_object_get(pod, "spec"), "containers"));
    int ready = 0, restarts = 0;
    const char *last_restart = NULL;
    bool init_busy = false;
    size_t i;
    json_t *cs;
    size_t ninit = json_array_size(json_object_get(json_object_get(pod, "spec"), "initContainers"));
    json_array_foreach(json_object_get(st, "initContainerStatuses"), i, cs)
    {
        const json_t *state = json_object_get(cs, "state");
        const json_t *term = json_object_get(state, "terminated");
        const json_t *wait = json_object_get(state, "waiting");
        restarts += (int)json_integer_value(json_object_get(cs, "restartCount"));
        if (term != NULL && json_integer_value(json_object_get(term, "exitCode")) == 0)
            continue;
        if (term != NULL) {
            snprintf(rbuf, sizeof(rbuf), "Init:%s",
                     kd_jstr(term, "reason") ? kd_jstr(term, "reason") : "Error");
        } else if (wait != NULL && kd_jstr(wait, "reason") != NULL &&
                   strcmp(kd_jstr(wait, "reason"), "PodInitializing") != 0) {
            snprintf(rbuf, sizeof(rbuf), "Init:%s", kd_jstr(wait, "reason"));
        } else {
            snprintf(rbuf, sizeof(rbuf), "Init:%zu/%zu", i, ninit);
        }
        reason = rbuf;
        init_busy = true;
        break;
    }
    bool running = false;
    const json_t *css = json_object_get(st, "containerStatuses");
    for (size_t j = json_array_size(css); j-- > 0;) {
        cs = json_array_get(css, j);
        const json_t *state = json_object_get(cs, "state");
        const json_t *term = json_object_get(state, "terminated");
        const json_t *wait = json_object_get(state, "waiting");
        restarts += (int)json_integer_value(json_object_get(cs, "restartCount"));
        const char *lf =
            kd_jstr(json_object_get(json_object_get(cs, "lastState"), "terminated"), "finishedAt");
        if (lf != NULL && (last_restart == NULL || strcmp(lf, last_restart) > 0))
            last_restart = lf;
        if (init_busy)
            continue;
        if (wait != NULL && kd_jstr(wait, "reason") != NULL) {
            reason = kd_jstr(wait, "reason");
        } else if (term != NULL) {
            reason = kd_jstr(term, "reason") ? kd_jstr(term, "reason") : "Error";
        } else if (json_object_get(state, "running") != NULL &&
                   json_is_true(json_object_get(cs, "ready"))) {
            running = true;
            ready++;
        } else if (json_object_get(state, "running") != NULL) {
            running = true;
        }
    }
    if (!init_busy && reason != NULL && strcmp(reason, "Completed") == 0 && running)
        reason = "Running";
    if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") != NULL)
        reason = "Terminating";
    char rd[32], rs[64];
    snprintf(rd, sizeof(rd), "%d/%d", ready, total);
    if (restarts > 0 && last_restart != NULL) {
        int64_t ms;
        char age[32];
        if (kd_time_parse_rfc3339(last_restart, &ms) == 0)
            snprintf(rs, sizeof(rs), "%d (%s ago)", restarts,
                     kd_table_age((now_ms - ms) / 1000, age, sizeof(age)));
        else
            snprintf(rs, sizeof(rs), "%d", restarts);
    } else {
        snprintf(rs, sizeof(rs), "%d", restarts);
    }
    const char *ip = kd_jstr(st, "podIP");
    const char *node = kd_jstr(json_object_get(pod, "spec"), "nodeName");
    const char *nom = kd_jstr(st, "nominatedNodeName");
    return json_pack(
        "[s,s,s,s,o,s,s,s,s]", kd_jstr(json_object_get(pod, "metadata"), "name"), rd,
        reason ? reason : "Unknown", rs,
        age_cell(kd_jstr(json_object_get(pod, "metadata"), "creationTimestamp"), now_ms),
        ip ? ip : "<none>", node ? node : "<none>", nom ? nom : "<none>", "<none>");
}

static json_t *columns_for(const struct kd_restype *rt)
{
    json_t *c = json_array();
    json_array_append_new(c, name_col());
    if (!rt->builtin) {
        size_t i;
        json_t *pc;
        json_array_foreach(rt->printer_columns, i, pc)
        {
            const char *type = kd_jstr(pc, "type") ? kd_jstr(pc, "type") : "string";
            json_array_append_new(c,
                                  col(kd_jstr(pc, "name") ? kd_jstr(pc, "name") : "",
                                      strcmp(type, "date") == 0 ? "date" : type,
                                      kd_jstr(pc, "format") ? kd_jstr(pc, "format") : "",
                                      kd_jstr(pc, "description") ? kd_jstr(pc, "description") : "",
                                      (int)json_integer_value(json_object_get(pc, "priority"))));
        }
        if (json_array_size(rt->printer_columns) == 0)
            json_array_append_new(c, age_col());
        return c;
    }
    const char *r = rt->resource;
    if (strcmp(r, "pods") == 0) {
        json_array_append_new(c, col("Ready", "string", "",
                                     "The aggregate readiness state of this "
                                     "pod for accepting traffic.",
                                     0));
        json_array_append_new(c, col("Status", "string", "",
                                     "The aggregate status of the "
                                     "containers in this pod.",
                                     0));
        json_array_append_new(c, col("Restarts", "string", "",
                                     "The number of times the "
                                     "containers in this pod have been "
                                     "restarted and when the last "
                                     "container in this pod has "
                                     "restarted.",
                                     0));
        json_array_append_new(c, age_col());
        json_array_append_new(c, col("IP", "string", "", "IP address allocated to the pod.", 1));
        json_array_append_new(c, col("Node", "string", "", "Name of the node the pod is on.", 1));
        json_array_append_new(c, col("Nominated Node", "string", "", "Nominated node.", 1));
        json_array_append_new(c, col("Readiness Gates", "string", "", "Readiness gates.", 1));
    } else if (strcmp(r, "configmaps") == 0) {
        json_array_append_new(c, col("Data", "integer", "", "Number of data items.", 0));
        json_array_append_new(c, age_col());
    } else if (strcmp(r, "secrets") == 0) {
        json_array_append_new(c, col("Type", "string", "", "The type of the secret.", 0));
        json_array_append_new(c, col("Data", "integer", "", "Number of data items.", 0));
        json_array_append_new(c, age_col());
    } else if (strcmp(r, "namespaces") == 0) {
        json_array_append_new(c, col("Status", "string", "", "The status of the namespace.", 0));
        json_array_append_new(c, age_col());
    } else if (strcmp(r, "nodes") == 0) {
        json_array_append_new(c, col("Status", "string", "", "The status of the node.", 0));
        json_array_append_new(c, col("Roles", "string", "", "The roles of the node.", 0));
        json_array_append_new(c, age_col());
        json_array_append_new(c, col("Version", "string", "", "Kubelet version.", 0));
    } else if (strcmp(r, "priorityclasses") == 0) {
        json_array_append_new(c, col("Value", "integer", "", "The priority value.", 0));
        json_array_append_new(c, col("Global-Default", "boolean", "", "Global default.", 0));
        json_array_append_new(c, age_col());
    } else if (strcmp(r, "leases") == 0) {
        json_array_append_new(c, col("Holder", "string", "", "The holder of the lease.", 0));
        json_array_append_new(c, age_col());
    } else if (strcmp(r, "customresourcedefinitions") == 0) {
        json_array_append_new(c, col("Created At", "date", "", "Creation time.", 0));
    } else if (strcmp(r, "events") == 0) {
        json_array_remove(c, 0);
        json_array_append_new(c,
                              col("Last Seen", "string", "", "Time since the last occurrence.", 0));
        json_array_append_new(c, col("Type", "string", "", "Normal or Warning.", 0));
        json_array_append_new(c, col("Reason", "string", "", "Why the event happened.", 0));
        json_array_append_new(c, col("Object", "string", "", "The object it is about.", 0));
        json_array_append_new(c, col("Message", "string", "", "What happened.", 0));
        json_array_append_new(c, col("Count", "integer", "", "Occurrences.", 1));
        json_array_append_new(c, name_col());
        json_object_set_new(json_array_get(c, json_array_size(c) - 1), "priority", json_integer(1));
    } else {
        json_array_append_new(c, age_col());
    }
    return c;
}

static json_t *cells_for(const struct kd_restype *rt, const json_t *o, int64_t now_ms)
{
    const json_t *md = json_object_get(o, "metadata");
    const char *name = kd_jstr(md, "name");
    const char *created = kd_jstr(md, "creationTimestamp");
    if (!rt->builtin) {
        json_t *cells = json_pack("[s]", name);
        size_t i;
        json_t *pc;
        json_array_foreach(rt->printer_columns, i, pc)
        {
            const json_t *v =
                kd_table_jsonpath(o, kd_jstr(pc, "jsonPath") ? kd_jstr(pc, "jsonPath") : "");
            const char *type = kd_jstr(pc, "type") ? kd_jstr(pc, "type") : "string";
            if (v == NULL)
                json_array_append_new(cells, json_null());
            else if (strcmp(type, "date") == 0)
                json_array_append_new(cells, age_cell(json_string_value(v), now_ms));
            else
                json_array_append(cells, (json_t *)v);
        }
        if (json_array_size(rt->printer_columns) == 0)
            json_array_append_new(cells, age_cell(created, now_ms));
        return cells;
    }
    const char *r = rt->resource;
    if (strcmp(r, "pods") == 0)
        return pod_cells(o, now_ms);
    if (strcmp(r, "configmaps") == 0)
        return json_pack("[s,I,o]", name,
                         (json_int_t)(json_object_size(json_object_get(o, "data")) +
                                      json_object_size(json_object_get(o, "binaryData"))),
                         age_cell(created, now_ms));
    if (strcmp(r, "secrets") == 0)
        return json_pack("[s,s,I,o]", name, kd_jstr(o, "type") ? kd_jstr(o, "type") : "Opaque",
                         (json_int_t)json_object_size(json_object_get(o, "data")),
                         age_cell(created, now_ms));
    if (strcmp(r, "namespaces") == 0) {
        const char *phase = kd_jstr(json_object_get(o, "status"), "phase");
        return json_pack("[s,s,o]", name, phase ? phase : "Active", age_cell(created, now_ms));
    }
    if (strcmp(r, "nodes") == 0) {
        const json_t *ready =
            kd_table_jsonpath(o, ".status.conditions[?(@.type==\"Ready\")].status");
        const char *rs = json_string_value(ready);
        const char *status = rs == NULL                ? "Unknown"
                             : strcmp(rs, "True") == 0 ? "Ready"
                                                       : "NotReady";
        bool unsched = json_is_true(json_object_get(json_object_get(o, "spec"), "unschedulable"));
        char st[64];
        snprintf(st, sizeof(st), "%s%s", status, unsched ? ",SchedulingDisabled" : "");
        const char *ver =
            kd_jstr(json_object_get(json_object_get(o, "status"), "nodeInfo"), "kubeletVersion");
        return json_pack("[s,s,s,o,s]", name, st, "<none>", age_cell(created, now_ms),
                         ver ? ver : "");
    }
    if (strcmp(r, "priorityclasses") == 0)
        return json_pack("[s,I,b,o]", name, json_integer_value(json_object_get(o, "value")),
                         json_is_true(json_object_get(o, "globalDefault")),
                         age_cell(created, now_ms));
    if (strcmp(r, "leases") == 0) {
        const char *h = kd_jstr(json_object_get(o, "spec"), "holderIdentity");
        return json_pack("[s,s,o]", name, h ? h : "", age_cell(created, now_ms));
    }
    if (strcmp(r, "customresourcedefinitions") == 0)
        return json_pack("[s,s]", name, created ? created : "");
    if (strcmp(r, "events") == 0) {
        const json_t *io = json_object_get(o, "involvedObject");
        char objname[512];
        const char *k = kd_jstr(io, "kind") ? kd_jstr(io, "kind") : "";
        char lower[64];
        size_t i;
        for (i = 0; k[i] != '\0' && i < sizeof(lower) - 1; i++)
            lower[i] = (char)(k[i] >= 'A' && k[i] <= 'Z' ? k[i] + 32 : k[i]);
        lower[i] = '\0';
        snprintf(objname, sizeof(objname), "%s/%s", lower,
                 kd_jstr(io, "name") ? kd_jstr(io, "name") : "");
        const char *last = kd_jstr(o, "lastTimestamp") ? kd_jstr(o, "lastTimestamp") : created;
        return json_pack("[o,s,s,s,s,I,s]", age_cell(last, now_ms),
                         kd_jstr(o, "type") ? kd_jstr(o, "type") : "",
                         kd_jstr(o, "reason") ? kd_jstr(o, "reason") : "", objname,
                         kd_jstr(o, "message") ? kd_jstr(o, "message") : "",
                         json_integer_value(json_object_get(o, "count")), name);
    }
    return json_pack("[s,o]", name, age_cell(created, now_ms));
}

json_t *kd_table_build(const struct kd_restype *rt, json_t *const *objs, size_t n,
                       const char *include, const char *rv, int64_t now_ms)
{
    json_t *rows = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_pack("{s:o}", "cells", cells_for(rt, objs[i], now_ms));
        if (include == NULL || strcmp(include, "Metadata") == 0) {
            json_object_set_new(row, "object",
                                json_pack("{s:s,s:s,s:O}", "kind", "PartialObjectMetadata",
                                          "apiVersion", "meta.k8s.io/v1", "metadata",
                                          json_object_get(objs[i], "metadata")));
        } else if (strcmp(include, "Object") == 0) {
            json_object_set(row, "object", objs[i]);
        }
        json_array_append_new(rows, row);
    }
    json_t *t = json_pack("{s:s,s:s,s:{},s:o,s:o}", "kind", "Table", "apiVersion", "meta.k8s.io/v1",
                          "metadata", "columnDefinitions", columns_for(rt), "rows", rows);
    if (rv != NULL)
        json_object_set_new(json_object_get(t, "metadata"), "resourceVersion", json_string(rv));
    return t;
}
