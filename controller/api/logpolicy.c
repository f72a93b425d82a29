/*
 * Log policies (the experiment's log_policies, Determined's): each stored
 * batch of a trial's lines is matched against the patterns, and a policy
 * that matched is recorded once in the Trial's status.logPolicies, with
 * the node the line came from. The controller acts on the record: no
 * restart after a failure (cancel_retries), or the next attempt kept off
 * that node (exclude_node). Matching is a pure function; recording is a
 * read-modify-write of the status, repeated safely when a batch is sent
 * again.
 */
#include "api/api_int.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/regex.h"
#include "core/time.h"

#define MAX_RECORDS 64
#define MAX_LINE 512

/* A policy's action: the string, or {type: ...} (before Determined 0.38); NULL when neither. */
static const char *action_of(const json_t *p)
{
    const json_t *a = json_object_get(p, "action");
    const char *t =
        json_is_object(a) ? json_string_value(json_object_get(a, "type")) : json_string_value(a);
    return t != NULL && (strcmp(t, "cancel_retries") == 0 || strcmp(t, "exclude_node") == 0) ? t
                                                                                             : NULL;
}

/* The text cut to MAX_LINE bytes, not inside a UTF-8 sequence. */
static json_t *cut_line(const char *text, size_t len)
{
    size_t n = len;
    if (n > MAX_LINE) {
        n = MAX_LINE;
        while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80)
            n--;
    }
    json_t *s = json_stringn(text, n);
    return s != NULL ? s : json_string("");
}

json_t *api_log_policies_match(const json_t *policies, const struct kd_log_line *lines, size_t n)
{
    json_t *out = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(policies, i, p)
    {
        const char *pattern = json_string_value(json_object_get(p, "pattern"));
        const char *action = action_of(p);
        regex_t re;
        if (pattern == NULL || action == NULL ||
            kd_regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB, NULL) != 0)
            continue; /* the configuration was checked at submission: cannot happen */
        for (size_t k = 0; k < n; k++) {
            /* The store's text is NUL-free; a copy makes it a C string. */
            char *text = kd_xstrndup(lines[k].text, lines[k].len);
            bool hit = regexec(&re, text, 0, NULL, 0) == 0;
            free(text);
            if (!hit)
                continue;
            json_t *m = json_pack("{s:s,s:s,s:o}", "pattern", pattern, "action", action, "line",
                                  cut_line(lines[k].text, lines[k].len));
            const char *name = json_string_value(json_object_get(p, "name"));
            if (name != NULL)
                json_object_set_new(m, "name", json_string(name));
            json_array_append_new(out, m);
            break; /* the first line that matches is enough */
        }
        regfree(&re);
    }
    return out;
}

/* Two records are the same match: policy (name, pattern, action), attempt and node. */
static bool same(const json_t *a, const json_t *b)
{
    static const char *const keys[] = {"name", "pattern", "action", "runId", "node", NULL};
    for (size_t i = 0; keys[i] != NULL; i++) {
        const char *x = json_string_value(json_object_get(a, keys[i])) ?: "";
        const char *y = json_string_value(json_object_get(b, keys[i])) ?: "";
        if (strcmp(x, y) != 0)
            return false;
    }
    return true;
}

static bool add_records(json_t *status, void *ctx)
{
    json_t *recs = json_object_get(status, "logPolicies");
    bool changed = false;
    if (!json_is_array(recs)) {
        recs = json_array();
        json_object_set_new(status, "logPolicies", recs);
    }
    size_t i;
    json_t *m;
    json_array_foreach((json_t *)ctx, i, m)
    {
        bool have = false;
        size_t j;
        json_t *r;
        json_array_foreach(recs, j, r) have = have || same(r, m);
        if (!have && json_array_size(recs) < MAX_RECORDS) {
            json_array_append(recs, m);
            changed = true;
        }
    }
    return changed;
}

/* The node of the attempt's pod that sent the batch (run id and node rank), "" when unknown. */
static void node_of(struct kd_api *a, const char *ns, const char *trial, const char *run_id,
                    int node_rank, char *node, size_t len)
{
    char sel[700], err[KD_ERRLEN] = "";
    json_t *list = NULL;
    struct kd_k8s_gvr pods = KD_K8S_PODS;
    node[0] = '\0';
    snprintf(sel, sizeof(sel), API_POD_LABEL_TRIAL "=%s," API_POD_LABEL_RUN "=%s", trial, run_id);
    struct kd_k8s_query q = {.label_selector = sel};
    if (run_id[0] == '\0' || kd_k8s_list_all(a->o.k8s, &pods, ns, &q, &list, NULL, err) != 0)
        goto out;
    size_t i;
    json_t *p;
    char rank[16];
    snprintf(rank, sizeof(rank), "%d", node_rank);
    json_array_foreach(json_object_get(list, "items"), i, p)
    {
        json_t *labels = json_object_get(json_object_get(p, "metadata"), "labels");
        const char *r = json_string_value(json_object_get(labels, API_POD_LABEL_RANK)) ?: "0";
        const char *nn = json_string_value(json_object_get(json_object_get(p, "spec"), "nodeName"));
        if (strcmp(r, rank) == 0 && nn != NULL)
            snprintf(node, len, "%s", nn);
    }
out:
    json_decref(list);
}

int api_log_policies_apply(struct kd_api *a, const json_t *trial, const char *run_id, int node_rank,
                           const struct kd_log_line *lines, size_t n, char *err)
{
    int rc = 0;
    json_t *exp = NULL, *matches = NULL;
    const char *ns = kd_k8s_meta_str(trial, "namespace"), *name = kd_k8s_meta_str(trial, "name");
    const char *ename =
        json_string_value(json_object_get(json_object_get(trial, "spec"), "experiment")) ?: "";
    char node[256] = "", now[40];
    if (api_get_experiment(a, ns, ename, &exp, err) != 0)
        goto out; /* gone: nothing to act on */
    const json_t *policies = json_object_get(json_object_get(exp, "spec"), "log_policies");
    if (json_array_size(policies) == 0)
        goto out;
    matches = api_log_policies_match(policies, lines, n);
    if (json_array_size(matches) == 0)
        goto out;
    kd_time_rfc3339(kd_wall_ms(), 1, now, sizeof(now));
    size_t i;
    json_t *m;
    json_array_foreach(matches, i, m)
    {
        const char *action = json_string_value(json_object_get(m, "action"));
        if (strcmp(action, "exclude_node") == 0 && node[0] == '\0')
            node_of(a, ns, name, run_id ? run_id : "", node_rank, node, sizeof(node));
        if (strcmp(action, "exclude_node") == 0 && node[0] != '\0')
            json_object_set_new(m, "node", json_string(node));
        if (run_id != NULL && run_id[0] != '\0')
            json_object_set_new(m, "runId", json_string(run_id));
        json_object_set_new(m, "time", json_string(now));
        KD_WARN("log policy matched", "trial=%s/%s policy=%s action=%s node=%s", ns, name,
                kd_logq(json_string_value(json_object_get(m, "name")) ?: ""), action,
                json_string_value(json_object_get(m, "node")) ?: "");
    }
    rc = api_status_update(a, ns, name, kd_k8s_meta_str(trial, "uid"), add_records, matches, err);
out:
    json_decref(exp);
    json_decref(matches);
    return rc;
}
