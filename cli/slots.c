/*
 * Slots as kdet-controller's scheduler counts them (docs/scheduling.md),
 * seen from det: each resource pool's slot type (GPUs, or CPU slots of
 * --cpu-per-slot CPUs) and slots per node, whether a trial of S slots could
 * ever run in a pool (the warning of `det experiment create`), and the
 * verbs `det agent list` and `det slot list`. The counting is pure
 * (det_pools_count, det_pool_fits); the settings come from the controller
 * API (GET /api/v1/info) when det reaches it, else det says what it assumes.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/str.h"

static const struct kd_k8s_gvr nodes_gvr = KD_K8S_NODES, pods_gvr = KD_K8S_PODS;

/* ---- counting (pure) ------------------------------------------------------------------- */

/* A count quantity (nvidia.com/gpu: a JSON integer or its decimal string); 0 otherwise. */
static int count_of(const json_t *q)
{
    int64_t n = 0;
    if (json_is_integer(q))
        n = json_integer_value(q);
    else if (json_is_string(q) && kd_parse_i64(json_string_value(q), &n) != 0)
        n = 0;
    return n > 0 && n < (1 << 20) ? (int)n : 0;
}

int64_t det_cpu_milli(const char *q)
{
    int64_t whole = 0, frac = 0, scale = 1000;
    const char *p = q;
    if (p == NULL || *p == '\0')
        return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        whole = whole * 10 + (*p - '0');
        if (whole > (INT64_C(1) << 40))
            return 0;
    }
    if (*p == 'm' && p[1] == '\0' && p != q)
        return whole;
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++) {
            if (scale > 1) {
                scale /= 10;
                frac += (*p - '0') * scale;
            }
        }
    }
    return *p == '\0' ? whole * 1000 + frac : 0;
}

static bool node_unschedulable(const json_t *n)
{
    if (json_is_true(det_get(n, "spec.unschedulable")))
        return true;
    size_t i;
    const json_t *c;
    json_array_foreach(det_get(n, "status.conditions"), i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "type")) ?: "", "Ready") == 0)
            return strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True") != 0;
    }
    return true; /* no Ready condition: not ready */
}

void det_node_facts(const json_t *node, struct det_node *out)
{
    memset(out, 0, sizeof(*out));
    kd_strlcpy(out->name, kd_k8s_meta_str(node, "name") ?: "", sizeof(out->name));
    const char *pool = json_string_value(
        json_object_get(det_get(node, "metadata.labels"), "kdet.io/resource-pool"));
    kd_strlcpy(out->pool, pool != NULL && pool[0] != '\0' ? pool : "default", sizeof(out->pool));
    const json_t *alloc = det_get(node, "status.allocatable");
    out->gpus = count_of(json_object_get(alloc, "nvidia.com/gpu"));
    const json_t *cpu = json_object_get(alloc, "cpu");
    if (json_is_integer(cpu))
        out->cpu_milli = json_integer_value(cpu) > 0 ? json_integer_value(cpu) * 1000 : 0;
    else
        out->cpu_milli = det_cpu_milli(json_string_value(cpu));
    out->unschedulable = node_unschedulable(node);
}

int det_pools_count(const struct det_node *nodes, size_t n, const struct det_slot_settings *s,
                    struct det_pool *pools, size_t max, size_t *npools)
{
    *npools = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < *npools && strcmp(pools[k].name, nodes[i].pool) != 0)
            k++;
        if (k == *npools) {
            if (*npools == max)
                return KD_ETOOBIG;
            memset(&pools[k], 0, sizeof(pools[k]));
            kd_strlcpy(pools[k].name, nodes[i].pool, sizeof(pools[k].name));
            (*npools)++;
        }
        pools[k].nodes++;
        pools[k].gpus += nodes[i].gpus;
    }
    int64_t per = s->cpu_per_slot_milli > 0 ? s->cpu_per_slot_milli : 1000;
    for (size_t k = 0; k < *npools; k++) {
        struct det_pool *p = &pools[k];
        /* auto: GPU slots where a node of the pool (cordoned or not) has GPUs */
        p->cpu =
            strcmp(s->slot_type, "cpu") == 0 || (strcmp(s->slot_type, "gpu") != 0 && p->gpus == 0);
        for (size_t i = 0; i < n; i++) {
            if (strcmp(nodes[i].pool, p->name) != 0)
                continue;
            int slots = p->cpu ? (nodes[i].cpu_milli <= 0        ? 0
                                  : nodes[i].cpu_milli / per > 0 ? (int)(nodes[i].cpu_milli / per)
                                                                 : 1)
                               : nodes[i].gpus;
            p->slots += slots;
            if (slots > p->largest) {
                p->largest = slots;
                p->nlargest = 0;
            }
            if (slots == p->largest && slots > 0)
                p->nlargest++;
        }
    }
    return 0;
}

/* "GPUs" or "CPU slots" */
static const char *unit_of(const struct det_pool *p)
{
    return p->cpu ? "CPU slots" : "GPUs";
}

bool det_pool_fits(const struct det_pool *p, const struct det_node *nodes, size_t n, int slots,
                   bool single_node, const struct det_slot_settings *s, char *why, size_t len)
{
    int per_pod = s->max_slots_per_pod;
    int64_t per = s->cpu_per_slot_milli > 0 ? s->cpu_per_slot_milli : 1000;
    why[0] = '\0';
    if (slots <= 0)
        return true; /* one pod without slots: always admitted */
    if (p == NULL || p->nodes == 0) {
        snprintf(why, len,
                 "the pool has no nodes (a node joins it with the label "
                 "kdet.io/resource-pool)");
        return false;
    }
    if (!p->cpu && p->gpus == 0) {
        snprintf(why, len, "resource pool %s has no GPUs; the trial needs %d", p->name, slots);
        return false;
    }
    if (single_node && slots > p->largest) {
        snprintf(why, len,
                 "slots_per_trial=%d exceeds the largest node of resource pool %s (%d %s) and "
                 "resources.is_single_node keeps a trial on one node",
                 slots, p->name, p->largest, unit_of(p));
        return false;
    }
    if (per_pod > 0 && slots > per_pod) {
        if (slots % per_pod != 0) {
            snprintf(why, len, "slots_per_trial=%d is not a multiple of max_slots_per_pod=%d",
                     slots, per_pod);
            return false;
        }
        int64_t pods = 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(nodes[i].pool, p->name) != 0)
                continue;
            int64_t ns = p->cpu ? (nodes[i].cpu_milli <= 0        ? 0
                                   : nodes[i].cpu_milli / per > 0 ? nodes[i].cpu_milli / per
                                                                  : 1)
                                : nodes[i].gpus;
            pods += ns / per_pod;
        }
        if (pods < slots / per_pod) {
            snprintf(why, len,
                     "slots_per_trial=%d needs %d pods of %d %s (max_slots_per_pod); resource "
                     "pool %s holds %" PRId64 " such pods",
                     slots, slots / per_pod, per_pod, unit_of(p), p->name, pods);
            return false;
        }
        return true;
    }
    if (slots <= p->largest)
        return true;
    if (slots > p->slots) {
        snprintf(why, len, "slots_per_trial=%d needs %d %s; resource pool %s has %d", slots, slots,
                 unit_of(p), p->name, p->slots);
        return false;
    }
    if (slots % p->largest != 0) {
        snprintf(why, len,
                 "slots_per_trial=%d exceeds the largest node of resource pool %s (%d %s) and "
                 "is not a multiple of it",
                 slots, p->name, p->largest, unit_of(p));
        return false;
    }
    if (p->nlargest < slots / p->largest) {
        snprintf(why, len, "slots_per_trial=%d needs %d nodes with %d %s; resource pool %s has %d",
                 slots, slots / p->largest, p->largest, unit_of(p), p->name, p->nlargest);
        return false;
    }
    return true;
}

/* ---- the cluster ------------------------------------------------------------------------ */

/*
 * The slot settings: the controller's (GET /api/v1/info) when det reaches its API, else the
 * controller's defaults, marked assumed.
 */
static void settings(const struct det_args *a, struct det_slot_settings *s)
{
    struct det_api api = {0};
    char why[512] = "";
    json_t *info = NULL;
    memset(s, 0, sizeof(*s));
    kd_strlcpy(s->slot_type, "auto", sizeof(s->slot_type));
    s->cpu_per_slot_milli = 1000;
    s->assumed = true;
    if (det_api_open_quiet(a, "det", &api, why, sizeof(why)) == 0 &&
        det_api_get(&api, "/api/v1/info", &info) == 0) {
        const json_t *sl = json_object_get(info, "slots");
        const char *t = json_string_value(json_object_get(sl, "slot_type"));
        if (t != NULL && (strcmp(t, "auto") == 0 || strcmp(t, "gpu") == 0 || strcmp(t, "cpu") == 0))
            kd_strlcpy(s->slot_type, t, sizeof(s->slot_type));
        if (json_integer_value(json_object_get(sl, "cpu_per_slot_milli")) > 0)
            s->cpu_per_slot_milli = json_integer_value(json_object_get(sl, "cpu_per_slot_milli"));
        s->max_slots_per_pod = (int)json_integer_value(json_object_get(sl, "max_slots_per_pod"));
        s->assumed = false;
    }
    json_decref(info);
    det_api_close(&api);
}

static void fmt_cpu(int64_t milli, char *buf, size_t len)
{
    if (milli % 1000 == 0)
        snprintf(buf, len, "%" PRId64, milli / 1000);
    else
        snprintf(buf, len, "%" PRId64 "m", milli);
}

void det_slot_assumption(const struct det_slot_settings *s, char *buf, size_t len)
{
    char cpu[32], per_pod[48] = "";
    fmt_cpu(s->cpu_per_slot_milli, cpu, sizeof(cpu));
    if (s->assumed) {
        snprintf(buf, len,
                 "the controller API was not reached: assuming kdet-controller's defaults "
                 "(--slot-type auto, --cpu-per-slot 1, no --max-slots-per-pod)");
        return;
    }
    if (s->max_slots_per_pod > 0)
        snprintf(per_pod, sizeof(per_pod), ", --max-slots-per-pod %d", s->max_slots_per_pod);
    snprintf(buf, len, "kdet-controller counts with --slot-type %s, --cpu-per-slot %s%s",
             s->slot_type, cpu, per_pod);
}

/* The cluster's nodes as facts (*out malloc'd). Exit code; errors printed. */
static int load_nodes(struct det_kube *k, struct det_node **out, size_t *n)
{
    json_t *list = NULL;
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN] = "";
    int rc = 0;
    *out = NULL;
    *n = 0;
    int r = kd_k8s_list_all(k->c, &nodes_gvr, NULL, NULL, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", &nodes_gvr, "nodes", NULL);
        goto out;
    }
    json_t *items = json_object_get(list, "items");
    *out = kd_xcalloc(json_array_size(items) + 1, sizeof(**out));
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) det_node_facts(it, &(*out)[(*n)++]);
out:
    json_decref(list);
    kd_k8s_status_free(&st);
    return rc;
}

void det_capacity_warn(struct det_kube *k, const json_t *spec)
{
    struct det_node *nodes = NULL;
    size_t n = 0, np = 0;
    struct det_pool pools[64];
    struct det_slot_settings s;
    char why[512], note[256];
    const json_t *res = json_object_get(spec, "resources");
    const json_t *sp = json_object_get(res, "slots_per_trial");
    int slots = json_is_integer(sp) ? (int)json_integer_value(sp) : 1;
    const char *pool = json_string_value(json_object_get(res, "resource_pool"));
    bool one = json_is_true(json_object_get(res, "is_single_node"));
    if (pool == NULL || pool[0] == '\0')
        pool = "default";
    if (slots <= 0)
        return;
    /* Nodes are cluster-scoped: a user who may not list them gets no check, not an error. */
    json_t *list = NULL;
    char err[KD_ERRLEN] = "";
    if (kd_k8s_list_all(k->c, &nodes_gvr, NULL, NULL, &list, NULL, err) != 0) {
        json_decref(list);
        return;
    }
    json_t *items = json_object_get(list, "items");
    nodes = kd_xcalloc(json_array_size(items) + 1, sizeof(*nodes));
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) det_node_facts(it, &nodes[n++]);
    json_decref(list);
    settings(k->a, &s);
    if (det_pools_count(nodes, n, &s, pools, 64, &np) != 0)
        goto out;
    const struct det_pool *mine = NULL;
    for (size_t j = 0; j < np; j++)
        if (strcmp(pools[j].name, pool) == 0)
            mine = &pools[j];
    if (det_pool_fits(mine, nodes, n, slots, one, &s, why, sizeof(why)))
        goto out;
    det_slot_assumption(&s, note, sizeof(note));
    fprintf(stderr,
            "det: warning: no node of resource pool %s can ever run a trial of this experiment: "
            "%s; it stays QUEUED until the pool changes\n"
            "det: warning: (slots counted as the scheduler does; %s)\n",
            pool, why, note);
    for (size_t j = 0; j < np; j++) {
        char w2[512];
        if (&pools[j] != mine && det_pool_fits(&pools[j], nodes, n, slots, one, &s, w2, sizeof(w2)))
            fprintf(stderr,
                    "det: warning: resource pool %s (%s) could run it: set "
                    "resources.resource_pool: %s\n",
                    pools[j].name, unit_of(&pools[j]), pools[j].name);
    }
out:
    free(nodes);
}

/* ---- det agent list, det slot list ------------------------------------------------------ */

/* Slots that kdet's trial pods hold on each node: pods labelled kdet.io/trial, bound, not
 * ended; their nvidia.com/gpu or kdet.io/cpu-slots. held[i] for nodes[i]; names of the
 * trials in trial[i] (malloc'd, comma-separated). */
static void held_slots(struct det_kube *k, const struct det_node *nodes, size_t n, int *held,
                       json_t *trials)
{
    struct kd_k8s_query q = {.label_selector = "kdet.io/trial"};
    json_t *list = NULL;
    char err[KD_ERRLEN] = "";
    if (kd_k8s_list_all(k->c, &pods_gvr, NULL, &q, &list, NULL, err) != 0) {
        json_decref(list);
        return;
    }
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(list, "items"), i, p)
    {
        const char *node = det_get_str(p, "spec.nodeName", NULL);
        const char *phase = det_get_str(p, "status.phase", "");
        if (node == NULL || strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)
            continue;
        int slots =
            count_of(json_object_get(det_get(p, "metadata.annotations"), "kdet.io/cpu-slots"));
        size_t c;
        const json_t *ct;
        json_array_foreach(det_get(p, "spec.containers"), c, ct)
        {
            slots += count_of(json_object_get(det_get(ct, "resources.limits"), "nvidia.com/gpu"));
        }
        const char *trial =
            json_string_value(json_object_get(det_get(p, "metadata.labels"), "kdet.io/trial"));
        for (size_t j = 0; j < n; j++) {
            if (strcmp(nodes[j].name, node) != 0)
                continue;
            held[j] += slots;
            for (int s = 0; s < slots; s++)
                json_array_append_new(json_array_get(trials, j), json_string(trial ?: ""));
        }
    }
    json_decref(list);
}

static int node_slots(const struct det_node *nd, const struct det_pool *p,
                      const struct det_slot_settings *s)
{
    int64_t per = s->cpu_per_slot_milli > 0 ? s->cpu_per_slot_milli : 1000;
    if (!p->cpu)
        return nd->gpus;
    return nd->cpu_milli <= 0 ? 0 : nd->cpu_milli / per > 0 ? (int)(nd->cpu_milli / per) : 1;
}

static int list_cmd(int argc, char **argv, bool per_slot)
{
    static const char *const flags[] = {"--output", "--kubeconfig", "--context", NULL};
    static const char *const pos[] = {NULL};
    static const char agent_usage[] =
        "usage: det agent list [-o table|json|yaml]\n"
        "\n"
        "The cluster's nodes as kdet-controller's scheduler sees them: each node's resource\n"
        "pool (label kdet.io/resource-pool, else default), what a slot is in that pool\n"
        "(gpu: one of its nvidia.com/gpu; cpu: --cpu-per-slot CPUs, where no node of the\n"
        "pool has GPUs under --slot-type auto), its slots, how many kdet trials hold, and\n"
        "whether it takes new trials. The slot settings come from the controller API when\n"
        "det reaches it (else kdet-controller's defaults, said below the table).\n";
    static const char slot_usage[] =
        "usage: det slot list [-o table|json|yaml]\n"
        "\n"
        "Every slot of the cluster, one row each: its node, index, type (gpu or cpu),\n"
        "resource pool and the trial that holds it. See 'det agent list' for how slots\n"
        "are counted.\n";
    const struct det_verb_spec spec = {.cmd = per_slot ? "det slot list" : "det agent list",
                                       .usage = per_slot ? slot_usage : agent_usage,
                                       .flags = flags,
                                       .pos = pos,
                                       .minpos = 0,
                                       .format = true,
                                       .kube = true};
    struct det_verb v = {0};
    struct det_node *nodes = NULL;
    size_t n = 0, np = 0;
    struct det_pool pools[64];
    struct det_slot_settings s;
    int *held = NULL;
    json_t *trials = NULL, *out = NULL;
    char note[256];
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if ((rc = load_nodes(&v.k, &nodes, &n)) != 0)
        goto out;
    settings(&v.a, &s);
    if (det_pools_count(nodes, n, &s, pools, 64, &np) != 0) {
        det_err("more than 64 resource pools");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    held = kd_xcalloc(n + 1, sizeof(*held));
    trials = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(trials, json_array());
    held_slots(&v.k, nodes, n, held, trials);
    out = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct det_pool *p = NULL;
        for (size_t j = 0; j < np; j++)
            if (strcmp(pools[j].name, nodes[i].pool) == 0)
                p = &pools[j];
        int slots = node_slots(&nodes[i], p, &s);
        const char *type = p->cpu ? "cpu" : "gpu";
        if (per_slot) {
            for (int k = 0; k < slots; k++) {
                const char *t = json_string_value(json_array_get(json_array_get(trials, i), k));
                json_array_append_new(out, json_pack("{s:s,s:i,s:s,s:s,s:s?,s:b}", "agent",
                                                     nodes[i].name, "slot", k, "type", type,
                                                     "resource_pool", nodes[i].pool, "trial", t,
                                                     "enabled", !nodes[i].unschedulable));
            }
            continue;
        }
        char cpu[32];
        fmt_cpu(nodes[i].cpu_milli, cpu, sizeof(cpu));
        json_array_append_new(
            out, json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:s,s:b}", "agent", nodes[i].name,
                           "resource_pool", nodes[i].pool, "slot_type", type, "slots", slots,
                           "used", held[i] < slots ? held[i] : slots, "gpus", nodes[i].gpus, "cpu",
                           cpu, "enabled", !nodes[i].unschedulable));
    }
    det_slot_assumption(&s, note, sizeof(note));
    if (v.fmt != DET_FMT_TABLE) {
        json_t *o = json_pack("{s:O,s:{s:s,s:I,s:i,s:b}}", per_slot ? "slots" : "agents", out,
                              "settings", "slot_type", s.slot_type, "cpu_per_slot_milli",
                              (json_int_t)s.cpu_per_slot_milli, "max_slots_per_pod",
                              s.max_slots_per_pod, "assumed", s.assumed);
        rc = det_print_obj(o, v.fmt);
        json_decref(o);
        goto out;
    }
    static const char *const agent_h[] = {"AGENT", "RESOURCE POOL", "SLOT TYPE", "SLOTS", "USED",
                                          "GPUS",  "CPU",           "ENABLED",   NULL};
    static const char *const slot_h[] = {"AGENT",   "SLOT",  "TYPE", "RESOURCE POOL",
                                         "ENABLED", "TRIAL", NULL};
    struct det_table *t = det_table_new(per_slot ? slot_h : agent_h);
    size_t i;
    json_t *r;
    json_array_foreach(out, i, r)
    {
        char c[8][256];
        const char *cp[8];
        const char *en = json_is_true(json_object_get(r, "enabled")) ? "true" : "false";
        if (per_slot) {
            snprintf(c[0], sizeof(c[0]), "%s", json_string_value(json_object_get(r, "agent")));
            snprintf(c[1], sizeof(c[1]), "%lld",
                     (long long)json_integer_value(json_object_get(r, "slot")));
            snprintf(c[2], sizeof(c[2]), "%s", json_string_value(json_object_get(r, "type")));
            snprintf(c[3], sizeof(c[3]), "%s",
                     json_string_value(json_object_get(r, "resource_pool")));
            snprintf(c[4], sizeof(c[4]), "%s", en);
            snprintf(c[5], sizeof(c[5]), "%s",
                     json_string_value(json_object_get(r, "trial")) ?: "");
        } else {
            snprintf(c[0], sizeof(c[0]), "%s", json_string_value(json_object_get(r, "agent")));
            snprintf(c[1], sizeof(c[1]), "%s",
                     json_string_value(json_object_get(r, "resource_pool")));
            snprintf(c[2], sizeof(c[2]), "%s", json_string_value(json_object_get(r, "slot_type")));
            snprintf(c[3], sizeof(c[3]), "%lld",
                     (long long)json_integer_value(json_object_get(r, "slots")));
            snprintf(c[4], sizeof(c[4]), "%lld",
                     (long long)json_integer_value(json_object_get(r, "used")));
            snprintf(c[5], sizeof(c[5]), "%lld",
                     (long long)json_integer_value(json_object_get(r, "gpus")));
            snprintf(c[6], sizeof(c[6]), "%s", json_string_value(json_object_get(r, "cpu")));
            snprintf(c[7], sizeof(c[7]), "%s", en);
        }
        for (int k = 0; k < 8; k++)
            cp[k] = c[k];
        det_table_row(t, cp);
    }
    det_table_print(t);
    det_table_free(t);
    printf("(%s)\n", note);
    fflush(stdout);
out:
    free(nodes);
    free(held);
    json_decref(trials);
    json_decref(out);
    det_verb_end(&v);
    return rc;
}

static int agent_list(int argc, char **argv)
{
    return list_cmd(argc, argv, false);
}

static int slot_list(int argc, char **argv)
{
    return list_cmd(argc, argv, true);
}

int det_cmd_agent(int argc, char **argv)
{
    static const char usage[] =
        "usage: det agent list [-o table|json|yaml]\n"
        "\n"
        "The cluster's nodes (Determined's agents) with their resource pool, slot type and\n"
        "slots; see 'det agent list --help'.\n";
    static const struct det_sub subs[] = {{"list", "ls", agent_list}, {NULL, NULL, NULL}};
    return det_dispatch(argc, argv, subs, usage, "det agent");
}

int det_cmd_slot(int argc, char **argv)
{
    static const char usage[] = "usage: det slot list [-o table|json|yaml]\n"
                                "\n"
                                "Every slot of the cluster with its type and the trial that "
                                "holds it; see 'det slot list --help'.\n";
    static const struct det_sub subs[] = {{"list", "ls", slot_list}, {NULL, NULL, NULL}};
    return det_dispatch(argc, argv, subs, usage, "det slot");
}
