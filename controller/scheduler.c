/*
 * The trial scheduler's decisions (see sched.h and docs/scheduling.md):
 * placement of one trial as a gang, priority order with optional
 * preemption, and fair share by weight. Pure code over arrays, so the
 * table-driven tests exercise exactly what the controller runs.
 */
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"

int kd_sched_type_parse(const char *s, enum kd_sched_type *out)
{
    int rc = 0;
    if (s != NULL && strcmp(s, "priority") == 0)
        *out = KD_SCHED_PRIORITY;
    else if (s != NULL && (strcmp(s, "fair_share") == 0 || strcmp(s, "fair-share") == 0))
        *out = KD_SCHED_FAIR_SHARE;
    else
        rc = KD_EINVAL;
    return rc;
}

int kd_sched_slot_type_parse(const char *s, enum kd_sched_slot_type *out)
{
    int rc = 0;
    if (s != NULL && strcmp(s, "auto") == 0)
        *out = KD_SCHED_SLOT_AUTO;
    else if (s != NULL && strcmp(s, "gpu") == 0)
        *out = KD_SCHED_SLOT_GPU;
    else if (s != NULL && strcmp(s, "cpu") == 0)
        *out = KD_SCHED_SLOT_CPU;
    else
        rc = KD_EINVAL;
    return rc;
}

int kd_sched_cpu_milli(const char *q, int64_t *out)
{
    int rc = KD_EINVAL;
    int64_t whole = 0, frac = 0;
    int ndigits = 0, nfrac = 0;
    const char *p = q;
    if (q == NULL)
        goto out;
    for (; *p >= '0' && *p <= '9' && ndigits < 13; p++, ndigits++)
        whole = whole * 10 + (*p - '0');
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9' && nfrac < 3; p++, nfrac++)
            frac = frac * 10 + (*p - '0');
        for (int k = nfrac; k < 3; k++)
            frac *= 10;
        if (nfrac == 0)
            goto out;
    }
    if (ndigits == 0 && nfrac == 0)
        goto out;
    if (*p == 'm' && p[1] == '\0' && nfrac == 0) {
        *out = whole;
    } else if (*p == '\0') {
        *out = whole * 1000 + frac;
    } else {
        goto out; /* another suffix, a sign, more than three decimals */
    }
    if (*out < 1 || *out > ((int64_t)1 << 40))
        goto out;
    rc = 0;
out:
    return rc;
}

int kd_sched_cpu_slots(int64_t cpu_milli, int64_t per_slot_milli)
{
    int64_t n = 0;
    if (cpu_milli > 0 && per_slot_milli > 0) {
        n = cpu_milli / per_slot_milli;
        if (n < 1)
            n = 1;
        if (n > 1 << 20)
            n = 1 << 20;
    }
    return (int)n;
}

int kd_sched_node_slots(const struct kd_sched_node *n, bool cpu, int64_t per_slot_milli,
                        int *free_slots)
{
    int whole = 0, left = 0;
    if (per_slot_milli <= 0)
        per_slot_milli = 1000;
    if (cpu) {
        whole = kd_sched_cpu_slots(n->cpu_milli, per_slot_milli);
        left = whole;
        /* A node smaller than one slot is one slot only while nothing else holds CPU there. */
        if (n->other_cpu_milli > 0) {
            int64_t rest = n->cpu_milli - n->other_cpu_milli;
            int64_t k = rest > 0 ? rest / per_slot_milli : 0;
            left = k < whole ? (int)k : whole;
        }
    } else {
        whole = n->gpus > 0 ? n->gpus : 0;
        left = whole - (n->other_gpus > 0 ? n->other_gpus : 0);
        if (left < 0)
            left = 0;
    }
    *free_slots = left;
    return whole;
}

enum kd_sched_slot_type kd_sched_pool_slot_type(const struct kd_sched_opts *opts,
                                                const struct kd_sched_node *nodes, size_t nnodes,
                                                const char *pool)
{
    enum kd_sched_slot_type ty = opts->slot_type;
    if (ty == KD_SCHED_SLOT_AUTO) {
        ty = KD_SCHED_SLOT_CPU;
        for (size_t i = 0; i < nnodes; i++)
            if (strcmp(nodes[i].pool, pool) == 0 && nodes[i].gpus > 0)
                ty = KD_SCHED_SLOT_GPU;
    }
    return ty;
}

const char *kd_sched_decision_name(enum kd_sched_decision d)
{
    switch (d) {
    case KD_SCHED_WAIT: return "wait";
    case KD_SCHED_ADMIT: return "admit";
    case KD_SCHED_NEVER: return "never";
    case KD_SCHED_KEEP: return "keep";
    case KD_SCHED_PREEMPT: return "preempt";
    }
    return "unknown";
}

enum fit { FIT_OK, FIT_NOT_NOW, FIT_NEVER };

/*
 * What one pass works on: the nodes, the slots each offers under its
 * pool's slot type (cap, the whole count), those other pods hold (held)
 * and whether they are CPU slots.
 */
struct ctx {
    const struct kd_sched_node *nodes;
    size_t nnodes;
    const int *cap;
    const int *held;
    const bool *cpu;
    int64_t per_slot_milli;
    int max_slots_per_pod; /* 0: a pod may take a whole node */
};

static bool in_pool(const struct kd_sched_node *n, const char *pool)
{
    return !n->unschedulable && strcmp(n->pool, pool) == 0;
}

static bool excluded(const struct kd_sched_trial *t, size_t i)
{
    for (int k = 0; k < t->nexclude && k < KD_SCHED_MAX_EXCLUDE; k++)
        if (t->exclude[k] == (int)i)
            return true;
    return false;
}

/* A node t may be placed on: schedulable, in its pool, not excluded by a log policy. */
static bool usable(const struct kd_sched_trial *t, size_t i, const struct kd_sched_node *n)
{
    return in_pool(n, t->pool) && !excluded(t, i);
}

/* "1 CPU", "2 CPUs", "0.5 CPU", "1.25 CPUs" */
static void fmt_cpus(int64_t milli, char *buf, size_t len)
{
    int64_t whole = milli / 1000, frac = milli % 1000;
    if (frac == 0) {
        snprintf(buf, len, "%lld CPU%s", (long long)whole, whole == 1 ? "" : "s");
    } else {
        char f[8];
        snprintf(f, sizeof(f), "%03lld", (long long)frac);
        for (size_t k = strlen(f); k > 0 && f[k - 1] == '0'; k--)
            f[k - 1] = '\0';
        snprintf(buf, len, "%lld.%s CPU%s", (long long)whole, f, whole >= 1 ? "s" : "");
    }
}

/*
 * place_split() for a trial with resources.is_single_node: its slots/per
 * pods all on one node, the one of the pool with the least free slots that
 * holds them all (place() has already made sure that some node could).
 */
static enum fit place_one_node(struct kd_sched_trial *t, const struct ctx *x, int *avail, int per,
                               const char *unit, const char *others, int free_total, char *why,
                               size_t whylen)
{
    int need = t->slots / per, best = -1;
    enum fit rc = FIT_NOT_NOW;
    if (need > KD_SCHED_MAX_PODS) {
        snprintf(why, whylen,
                 "slots_per_trial=%d needs %d pods of %d %s (max_slots_per_pod); a trial has at "
                 "most %d",
                 t->slots, need, per, unit, KD_SCHED_MAX_PODS);
        rc = FIT_NEVER;
        goto out;
    }
    for (size_t i = 0; i < x->nnodes; i++) {
        if (!usable(t, i, &x->nodes[i]) || avail[i] < t->slots)
            continue;
        if (best < 0 || avail[i] < avail[best])
            best = (int)i;
    }
    if (best < 0) {
        snprintf(why, whylen,
                 "waiting for %d pods of %d %s on one node of resource pool %s "
                 "(resources.is_single_node; %d free in the pool%s)",
                 need, per, unit, t->pool, free_total, others);
        goto out;
    }
    for (int k = 0; k < need; k++)
        t->place[k] = (struct kd_sched_place){best, per};
    t->nplace = need;
    avail[best] -= t->slots;
    rc = FIT_OK;
out:
    return rc;
}

/*
 * place() for a trial split into pods of `per` slots (--max-slots-per-pod):
 * slots/per pods, each on the node of the pool with the least free slots
 * that still hold it (best fit, so that a trial's pods share nodes where
 * they can), several pods to a node where it has room. NEVER when the
 * slots are not a multiple of per, or when the pool could not hold that
 * many such pods even empty; all pods or none.
 */
static enum fit place_split(struct kd_sched_trial *t, const struct ctx *x, int *avail, int per,
                            const char *unit, const char *others, int free_total, char *why,
                            size_t whylen)
{
    int need = t->slots / per, fits_empty = 0, got = 0;
    int *left = NULL;
    enum fit rc = FIT_NOT_NOW;
    if (t->slots % per != 0) {
        snprintf(why, whylen, "slots_per_trial=%d is not a multiple of max_slots_per_pod=%d",
                 t->slots, per);
        return FIT_NEVER;
    }
    if (t->single_node)
        return place_one_node(t, x, avail, per, unit, others, free_total, why, whylen);
    for (size_t i = 0; i < x->nnodes; i++)
        if (usable(t, i, &x->nodes[i]))
            fits_empty += x->cap[i] / per;
    if (need > KD_SCHED_MAX_PODS || need > fits_empty) {
        snprintf(why, whylen,
                 "slots_per_trial=%d needs %d pods of %d %s (max_slots_per_pod); resource pool %s "
                 "holds %d such pods",
                 t->slots, need, per, unit, t->pool, fits_empty);
        return FIT_NEVER;
    }
    left = kd_xcalloc(x->nnodes + 1, sizeof(int));
    memcpy(left, avail, x->nnodes * sizeof(int));
    for (got = 0; got < need; got++) {
        int best = -1;
        for (size_t i = 0; i < x->nnodes; i++) {
            if (!usable(t, i, &x->nodes[i]) || left[i] < per)
                continue;
            if (best < 0 || left[i] < left[best])
                best = (int)i;
        }
        if (best < 0)
            break;
        t->place[got] = (struct kd_sched_place){best, per};
        left[best] -= per;
    }
    if (got < need) {
        snprintf(why, whylen,
                 "waiting for %d pods of %d %s in resource pool %s (%d free in the pool%s)", need,
                 per, unit, t->pool, free_total, others);
        t->nplace = 0;
        goto out;
    }
    /* Two pods on one node are two placements: each pod keeps to `per` slots. */
    t->nplace = got;
    memcpy(avail, left, x->nnodes * sizeof(int));
    rc = FIT_OK;
out:
    free(left);
    return rc;
}

/*
 * Try to place t on the free GPUs in avail[] (one entry per node). On
 * FIT_OK the placement is written to t->place and subtracted from free.
 */
static enum fit place(struct kd_sched_trial *t, const struct ctx *x, int *avail, char *why,
                      size_t whylen)
{
    enum fit rc = FIT_NOT_NOW;
    const struct kd_sched_node *nodes = x->nodes;
    size_t nnodes = x->nnodes;
    int largest = 0, nlargest = 0, pool_nodes = 0, free_total = 0, total = 0, held = 0;
    int nexcluded = 0;
    bool cpu = false;
    char per[32], others[48] = "";
    for (size_t i = 0; i < nnodes; i++) {
        if (!usable(t, i, &nodes[i])) {
            nexcluded += in_pool(&nodes[i], t->pool);
            continue;
        }
        pool_nodes++;
        cpu = x->cpu[i];
        free_total += avail[i] > 0 ? avail[i] : 0;
        total += x->cap[i];
        held += x->held[i];
        if (x->cap[i] > largest) {
            largest = x->cap[i];
            nlargest = 0;
        }
        if (x->cap[i] == largest)
            nlargest++;
    }
    fmt_cpus(x->per_slot_milli, per, sizeof(per));
    if (held > 0)
        snprintf(others, sizeof(others), ", %d held by other pods", held);
    const char *unit = cpu ? "CPU slots" : "GPUs";
    t->nplace = 0;
    t->cpu = cpu;
    if (pool_nodes == 0 && nexcluded > 0) {
        snprintf(why, whylen,
                 "every schedulable node of resource pool %s is excluded for this trial by an "
                 "exclude_node log policy",
                 t->pool);
        rc = FIT_NEVER;
        goto out;
    }
    if (pool_nodes == 0) {
        snprintf(why, whylen, "resource pool %s has no schedulable node", t->pool);
        rc = FIT_NEVER;
        goto out;
    }
    if (t->slots == 0) {
        /* CPU only: one pod on the first node of the pool; kube-scheduler checks cpu/memory. */
        for (size_t i = 0; i < nnodes; i++) {
            if (usable(t, i, &nodes[i])) {
                t->place[0] = (struct kd_sched_place){(int)i, 0};
                t->nplace = 1;
                break;
            }
        }
        rc = FIT_OK;
        goto out;
    }
    if (largest == 0) {
        if (cpu)
            snprintf(why, whylen,
                     "resource pool %s has no CPU slots (no allocatable CPU); the "
                     "trial needs %d",
                     t->pool, t->slots);
        else
            snprintf(why, whylen, "resource pool %s has no GPUs; the trial needs %d", t->pool,
                     t->slots);
        rc = FIT_NEVER;
        goto out;
    }
    if (cpu && t->slots > total) {
        snprintf(why, whylen,
                 "slots_per_trial=%d needs %d CPU slots; resource pool %s has %d (CPU slots of %s)",
                 t->slots, t->slots, t->pool, total, per);
        rc = FIT_NEVER;
        goto out;
    }
    if (t->single_node && t->slots > largest) {
        snprintf(why, whylen,
                 "slots_per_trial=%d exceeds the largest node of resource pool %s (%d %s%s%s) and "
                 "resources.is_single_node keeps a trial on one node",
                 t->slots, t->pool, largest, unit, cpu ? " of " : "", cpu ? per : "");
        rc = FIT_NEVER;
        goto out;
    }
    /* Pods of at most max_slots_per_pod slots, several to a node where they fit. */
    if (x->max_slots_per_pod > 0 && t->slots > x->max_slots_per_pod) {
        rc = place_split(t, x, avail, x->max_slots_per_pod, unit, others, free_total, why, whylen);
        goto out;
    }
    if (t->slots <= largest) {
        /* One pod: best fit (the node with the least free GPUs that suffice). */
        int best = -1;
        for (size_t i = 0; i < nnodes; i++) {
            if (!usable(t, i, &nodes[i]) || avail[i] < t->slots)
                continue;
            if (best < 0 || avail[i] < avail[best])
                best = (int)i;
        }
        if (best < 0) {
            snprintf(why, whylen,
                     "waiting for %d %s on one node of resource pool %s (%d free in the pool%s)",
                     t->slots, unit, t->pool, free_total, others);
            goto out;
        }
        t->place[0] = (struct kd_sched_place){best, t->slots};
        t->nplace = 1;
        avail[best] -= t->slots;
        rc = FIT_OK;
        goto out;
    }
    if (t->slots % largest != 0) {
        snprintf(why, whylen,
                 "slots_per_trial=%d exceeds the largest node of resource pool %s (%d %s%s%s) and "
                 "is not a multiple of it",
                 t->slots, t->pool, largest, unit, cpu ? " of " : "", cpu ? per : "");
        rc = FIT_NEVER;
        goto out;
    }
    int need = t->slots / largest;
    if (need > nlargest || need > KD_SCHED_MAX_PODS) {
        snprintf(why, whylen,
                 "slots_per_trial=%d needs %d nodes with %d %s; resource pool %s has %d", t->slots,
                 need, largest, unit, t->pool, nlargest);
        rc = FIT_NEVER;
        goto out;
    }
    int got = 0;
    for (size_t i = 0; i < nnodes && got < need; i++) {
        if (usable(t, i, &nodes[i]) && x->cap[i] == largest && avail[i] == largest)
            t->place[got++] = (struct kd_sched_place){(int)i, largest};
    }
    if (got < need) {
        snprintf(why, whylen,
                 "waiting for %d whole free nodes with %d %s in resource pool %s (%d free%s)", need,
                 largest, unit, t->pool, got, others);
        t->nplace = 0;
        goto out;
    }
    t->nplace = need;
    for (int k = 0; k < need; k++)
        avail[t->place[k].node] -= largest;
    rc = FIT_OK;
out:
    return rc;
}

static int cmp_priority(const void *a, const void *b)
{
    const struct kd_sched_trial *x = *(struct kd_sched_trial *const *)a;
    const struct kd_sched_trial *y = *(struct kd_sched_trial *const *)b;
    if (x->priority != y->priority)
        return x->priority < y->priority ? -1 : 1;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return strcmp(x->key, y->key);
}

static int cmp_fifo(const void *a, const void *b)
{
    const struct kd_sched_trial *x = *(struct kd_sched_trial *const *)a;
    const struct kd_sched_trial *y = *(struct kd_sched_trial *const *)b;
    if (x->position != y->position)
        return x->position < y->position ? -1 : 1;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Victims first: lowest priority (largest number), then the newest. */
static int cmp_victim(const void *a, const void *b)
{
    const struct kd_sched_trial *x = *(struct kd_sched_trial *const *)a;
    const struct kd_sched_trial *y = *(struct kd_sched_trial *const *)b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    if (x->position != y->position)
        return x->position > y->position ? -1 : 1;
    if (x->index != y->index)
        return x->index > y->index ? -1 : 1;
    return strcmp(x->key, y->key);
}

static int group_held(struct kd_sched_trial *trials, size_t ntrials, const char *group)
{
    int held = 0;
    for (size_t i = 0; i < ntrials; i++) {
        const struct kd_sched_trial *t = &trials[i];
        if (strcmp(t->group, group) == 0 &&
            (t->decision == KD_SCHED_KEEP || t->decision == KD_SCHED_ADMIT ||
             t->decision == KD_SCHED_PREEMPT))
            held += t->slots;
    }
    return held;
}

/* Whether t's experiment may take t->slots more under its max_slots. */
static bool under_cap(struct kd_sched_trial *t, struct kd_sched_trial *trials, size_t ntrials)
{
    bool ok = true;
    if (t->group_max_slots > 0) {
        int held = group_held(trials, ntrials, t->group);
        if (held + t->slots > t->group_max_slots) {
            snprintf(t->reason, sizeof(t->reason),
                     "experiment holds %d of its max_slots=%d; this trial needs %d more", held,
                     t->group_max_slots, t->slots);
            ok = false;
        }
    }
    return ok;
}

/*
 * Free room for w by preempting lower-priority running trials. On success
 * marks the victims PREEMPT, reserves w's placement in avail[] and returns
 * true; otherwise changes nothing.
 */
static bool victim_ok(const struct kd_sched_trial *v, const struct kd_sched_trial *w)
{
    return v->decision == KD_SCHED_KEEP && !v->stopping && !v->no_preempt &&
           v->priority > w->priority && strcmp(v->pool, w->pool) == 0;
}

static bool preempt_for(struct kd_sched_trial *w, const struct ctx *x, int *avail,
                        struct kd_sched_trial **victims, size_t nv)
{
    size_t nnodes = x->nnodes;
    bool ok = false;
    int *soon = kd_xmalloc(nnodes * sizeof(int) + 1);
    int *copy = kd_xmalloc(nnodes * sizeof(int) + 1);
    size_t used = 0, k;
    char why[KD_SCHED_REASONLEN];
    memcpy(soon, avail, nnodes * sizeof(int));
    /* Trials already stopping free their GPUs anyway. */
    for (k = 0; k < nv; k++) {
        if (victims[k]->decision == KD_SCHED_KEEP && victims[k]->stopping)
            for (int p = 0; p < victims[k]->nplace; p++)
                soon[victims[k]->place[p].node] += victims[k]->place[p].gpus;
    }
    memcpy(copy, soon, nnodes * sizeof(int));
    if (place(w, x, copy, why, sizeof(why)) == FIT_OK) {
        snprintf(w->reason, sizeof(w->reason), "waiting for stopping trials to free their %s",
                 w->cpu ? "CPU slots" : "GPUs");
        w->nplace = 0;
        memcpy(avail, copy, nnodes * sizeof(int));
        ok = true;
        goto out;
    }
    for (k = 0; k < nv && !ok; k++) {
        struct kd_sched_trial *v = victims[k];
        if (!victim_ok(v, w))
            continue;
        for (int p = 0; p < v->nplace; p++)
            soon[v->place[p].node] += v->place[p].gpus;
        used = k + 1;
        memcpy(copy, soon, nnodes * sizeof(int));
        if (place(w, x, copy, why, sizeof(why)) == FIT_OK) {
            ok = true;
            memcpy(avail, copy, nnodes * sizeof(int));
        }
    }
    if (ok) {
        /* Mark exactly the eligible victims up to the one that made it fit. */
        int n = 0;
        for (k = 0; k < used; k++) {
            struct kd_sched_trial *v = victims[k];
            if (!victim_ok(v, w))
                continue;
            v->decision = KD_SCHED_PREEMPT;
            snprintf(v->reason, sizeof(v->reason), "preempted by %s (priority %d < %d)", w->key,
                     w->priority, v->priority);
            n++;
        }
        snprintf(w->reason, sizeof(w->reason), "waiting for %d preempted trial(s) to stop", n);
        w->nplace = 0;
    }
out:
    free(soon);
    free(copy);
    return ok;
}

static int decide_priority(const struct kd_sched_opts *opts, const struct ctx *x, int *avail,
                           struct kd_sched_trial *trials, size_t ntrials)
{
    struct kd_sched_trial **q = kd_xcalloc(ntrials + 1, sizeof(*q));
    struct kd_sched_trial **v = kd_xcalloc(ntrials + 1, sizeof(*v));
    char(*blocked)[KD_SCHED_POOLLEN] = kd_xcalloc(ntrials + 1, KD_SCHED_POOLLEN);
    size_t nq = 0, nv = 0, nblocked = 0;
    for (size_t i = 0; i < ntrials; i++) {
        if (trials[i].state == KD_SCHED_WAITING)
            q[nq++] = &trials[i];
        else
            v[nv++] = &trials[i];
    }
    qsort(q, nq, sizeof(*q), cmp_priority);
    qsort(v, nv, sizeof(*v), cmp_victim);
    for (size_t k = 0; k < nq; k++) {
        struct kd_sched_trial *t = q[k];
        /* A 0-slot job takes no slot, so the slot queue's order does not hold it back. */
        bool is_blocked = false;
        for (size_t b = 0; b < nblocked && t->slots > 0; b++)
            is_blocked = is_blocked || strcmp(blocked[b], t->pool) == 0;
        if (is_blocked) {
            t->decision = KD_SCHED_WAIT;
            snprintf(t->reason, sizeof(t->reason),
                     "queued behind a trial of higher priority or earlier in resource pool %s",
                     t->pool);
            continue;
        }
        if (!under_cap(t, trials, ntrials)) {
            t->decision = KD_SCHED_WAIT;
            continue;
        }
        enum fit f = place(t, x, avail, t->reason, sizeof(t->reason));
        if (f == FIT_OK) {
            t->decision = KD_SCHED_ADMIT;
            snprintf(t->reason, sizeof(t->reason), "admitted");
        } else if (f == FIT_NEVER) {
            t->decision = KD_SCHED_NEVER;
        } else {
            t->decision = KD_SCHED_WAIT;
            if (opts->preemption)
                (void)preempt_for(t, x, avail, v, nv);
            /* Nothing behind it in this pool may jump ahead (no backfill). */
            kd_strlcpy(blocked[nblocked++], t->pool, KD_SCHED_POOLLEN);
        }
    }
    free(q);
    free(v);
    free(blocked);
    return 0;
}

/* One experiment in the fair-share pass: its slots held, weight and next waiting trial. */
struct fs_group {
    const char *name;
    double held;
    double weight;
    size_t next; /* index into the FIFO queue of its first trial still waiting */
    bool done;   /* sits out the rest of the pass */
};

static struct fs_group *fs_group_of(struct fs_group *g, size_t *ng, const char *name)
{
    for (size_t i = 0; i < *ng; i++)
        if (strcmp(g[i].name, name) == 0)
            return &g[i];
    g[*ng] = (struct fs_group){.name = name, .weight = 1.0, .next = SIZE_MAX};
    return &g[(*ng)++];
}

/*
 * Fair share: repeatedly serve the experiment with the fewest held slots
 * per unit of weight. Each group's held slots and its next waiting trial
 * are kept up to date as the pass admits, so one pass over N trials of G
 * experiments costs O(N log N + admissions * G) rather than rescanning
 * every trial for every admission.
 */
static int decide_fair_share(const struct ctx *x, int *avail, struct kd_sched_trial *trials,
                             size_t ntrials)
{
    struct kd_sched_trial **q = kd_xcalloc(ntrials + 1, sizeof(*q));
    struct fs_group *g = kd_xcalloc(ntrials + 1, sizeof(*g));
    size_t *gof = kd_xcalloc(ntrials + 1, sizeof(*gof)); /* queue index -> group index */
    size_t nq = 0, ng = 0;
    for (size_t i = 0; i < ntrials; i++) {
        struct kd_sched_trial *t = &trials[i];
        struct fs_group *gr = fs_group_of(g, &ng, t->group);
        if (t->decision == KD_SCHED_KEEP || t->decision == KD_SCHED_PREEMPT)
            gr->held += t->slots;
        if (t->state == KD_SCHED_WAITING) {
            q[nq++] = t;
            t->decision = KD_SCHED_WAIT;
            snprintf(t->reason, sizeof(t->reason), "waiting for its fair share of resource pool %s",
                     t->pool);
        }
    }
    /* FIFO within an experiment: position, then index. Priority is ignored. */
    qsort(q, nq, sizeof(*q), cmp_fifo);
    for (size_t k = nq; k-- > 0;) {
        struct fs_group *gr = fs_group_of(g, &ng, q[k]->group);
        gof[k] = (size_t)(gr - g);
        gr->next = k; /* ends at the group's first waiting trial */
        if (q[k]->weight > 0)
            gr->weight = q[k]->weight;
    }
    for (;;) {
        struct fs_group *best = NULL;
        for (size_t i = 0; i < ng; i++) {
            struct fs_group *gr = &g[i];
            if (gr->done || gr->next == SIZE_MAX)
                continue;
            double share = gr->held / gr->weight, best_share = 0;
            if (best != NULL)
                best_share = best->held / best->weight;
            if (best == NULL || share < best_share ||
                (share == best_share && cmp_fifo(&q[gr->next], &q[best->next]) < 0))
                best = gr;
        }
        if (best == NULL)
            break;
        struct kd_sched_trial *t = q[best->next];
        if (!under_cap(t, trials, ntrials)) {
            best->done = true;
            continue;
        }
        enum fit f = place(t, x, avail, t->reason, sizeof(t->reason));
        if (f == FIT_OK) {
            t->decision = KD_SCHED_ADMIT;
            snprintf(t->reason, sizeof(t->reason), "admitted");
            best->held += t->slots;
        } else if (f == FIT_NEVER) {
            t->decision = KD_SCHED_NEVER;
        } else {
            /* The group waits for room; the others may still fit smaller trials. */
            best->done = true;
            continue;
        }
        /* On to the group's next waiting trial. */
        size_t k = best->next + 1;
        while (k < nq && gof[k] != (size_t)(best - g))
            k++;
        best->next = k < nq ? k : SIZE_MAX;
    }
    free(gof);
    free(g);
    free(q);
    return 0;
}

/*
 * A batch scheduler admits by capacity (opts->delegate): kdet only applies
 * max_slots and the shape rules, placing each trial on the pool as if it
 * were empty so that the pod layout (one pod of S GPUs, or S/G whole-node
 * pods) is the one the built-in scheduler would use.
 */
static int decide_delegated(const struct ctx *x, struct kd_sched_trial *trials, size_t ntrials)
{
    size_t nnodes = x->nnodes;
    struct kd_sched_trial **q = kd_xcalloc(ntrials + 1, sizeof(*q));
    int *empty = kd_xcalloc(nnodes + 1, sizeof(int));
    size_t nq = 0;
    for (size_t i = 0; i < ntrials; i++)
        if (trials[i].state == KD_SCHED_WAITING)
            q[nq++] = &trials[i];
    qsort(q, nq, sizeof(*q), cmp_priority);
    for (size_t k = 0; k < nq; k++) {
        struct kd_sched_trial *t = q[k];
        if (!under_cap(t, trials, ntrials))
            continue;
        for (size_t i = 0; i < nnodes; i++)
            empty[i] = x->cap[i];
        enum fit f = place(t, x, empty, t->reason, sizeof(t->reason));
        if (f == FIT_OK) {
            t->decision = KD_SCHED_ADMIT;
            snprintf(t->reason, sizeof(t->reason),
                     "admitted (capacity left to the batch scheduler)");
        } else {
            t->decision = KD_SCHED_NEVER;
        }
    }
    free(empty);
    free(q);
    return 0;
}

int kd_sched_decide(const struct kd_sched_opts *opts, const struct kd_sched_node *nodes,
                    size_t nnodes, struct kd_sched_trial *trials, size_t ntrials)
{
    int rc = 0;
    int *free_gpus = kd_xcalloc(nnodes + 1, sizeof(int));
    int *cap = kd_xcalloc(nnodes + 1, sizeof(int));
    int *held = kd_xcalloc(nnodes + 1, sizeof(int));
    bool *cpu = kd_xcalloc(nnodes + 1, sizeof(bool));
    struct ctx x = {.nodes = nodes,
                    .nnodes = nnodes,
                    .cap = cap,
                    .held = held,
                    .cpu = cpu,
                    .per_slot_milli =
                        opts->cpu_per_slot_milli > 0 ? opts->cpu_per_slot_milli : 1000,
                    .max_slots_per_pod = opts->max_slots_per_pod > 0 ? opts->max_slots_per_pod : 0};
    for (size_t i = 0; i < nnodes; i++) {
        cpu[i] = kd_sched_pool_slot_type(opts, nodes, nnodes, nodes[i].pool) == KD_SCHED_SLOT_CPU;
        cap[i] = kd_sched_node_slots(&nodes[i], cpu[i], x.per_slot_milli, &free_gpus[i]);
        held[i] = cap[i] - free_gpus[i];
    }
    for (size_t i = 0; i < ntrials; i++) {
        struct kd_sched_trial *t = &trials[i];
        t->reason[0] = '\0';
        t->cpu = false;
        if (t->slots < 0 || t->key == NULL || t->group == NULL ||
            (t->state == KD_SCHED_RUNNING && (t->nplace < 0 || t->nplace > KD_SCHED_MAX_PODS))) {
            rc = KD_EINVAL;
            goto out;
        }
        if (t->pool[0] == '\0')
            kd_strlcpy(t->pool, "default", sizeof(t->pool));
        if (t->state == KD_SCHED_RUNNING) {
            t->decision = KD_SCHED_KEEP;
            for (int p = 0; p < t->nplace; p++) {
                if (t->place[p].node < 0 || (size_t)t->place[p].node >= nnodes) {
                    rc = KD_EINVAL;
                    goto out;
                }
                free_gpus[t->place[p].node] -= t->place[p].gpus;
            }
        } else {
            t->decision = KD_SCHED_WAIT;
            t->nplace = 0;
        }
    }
    if (opts->delegate)
        rc = decide_delegated(&x, trials, ntrials);
    else if (opts->type == KD_SCHED_FAIR_SHARE)
        rc = decide_fair_share(&x, free_gpus, trials, ntrials);
    else
        rc = decide_priority(opts, &x, free_gpus, trials, ntrials);
out:
    free(cap);
    free(held);
    free(cpu);
    free(free_gpus);
    return rc;
}
