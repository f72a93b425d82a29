/*
 * The scheduler-to-reconciler handoff (handoff.h). Admissions are a small
 * array copied by value; their node names point into an interned set
 * rather than hold 64 x 254-byte arrays each (1,000 admissions at once
 * took 16 MB). Node names are few and kept until the handoff is freed.
 */
#include "handoff.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"

struct kd_handoff {
    pthread_mutex_t mu; /* guards everything below */
    struct kd_handoff_admit *admits;
    size_t nadmits, cap;
    json_t *reasons;    /* trial key -> {"decision":..,"reason":..} from the last pass */
    json_t *preempt;    /* trial key -> reason: stop it and queue it again */
    json_t *node_names; /* node name -> the same name: admissions' nodes point into it */
};

struct kd_handoff *kd_handoff_new(void)
{
    struct kd_handoff *h = kd_xcalloc(1, sizeof(*h));
    pthread_mutex_init(&h->mu, NULL);
    h->reasons = json_object();
    h->preempt = json_object();
    h->node_names = json_object();
    if (h->reasons == NULL || h->preempt == NULL || h->node_names == NULL)
        abort(); /* out of memory, as kd_xmalloc */
    return h;
}

void kd_handoff_free(struct kd_handoff *h)
{
    if (h == NULL)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h->admits);
    json_decref(h->reasons);
    json_decref(h->preempt);
    json_decref(h->node_names);
    free(h);
}

/* A node name that stays valid until the handoff is freed. h->mu held. */
static const char *intern(struct kd_handoff *h, const char *name)
{
    json_t *v = json_object_get(h->node_names, name);
    if (v == NULL) {
        v = json_string(name);
        json_object_set_new(h->node_names, name, v);
    }
    return json_string_value(v);
}

void kd_handoff_admit(struct kd_handoff *h, const char *key, int nplace, const char *const *nodes,
                      int gpus, bool cpu, int64_t at_ms)
{
    pthread_mutex_lock(&h->mu);
    if (h->nadmits == h->cap) {
        h->cap = h->cap != 0 ? 2 * h->cap : 16;
        h->admits = kd_xrealloc(h->admits, h->cap * sizeof(*h->admits));
    }
    struct kd_handoff_admit *ad = &h->admits[h->nadmits++];
    memset(ad, 0, sizeof(*ad));
    kd_strlcpy(ad->key, key, sizeof(ad->key));
    ad->nplace = nplace < KD_SCHED_MAX_PODS ? nplace : KD_SCHED_MAX_PODS;
    ad->gpus = gpus;
    ad->cpu = cpu;
    ad->at_ms = at_ms;
    for (int p = 0; nodes != NULL && p < ad->nplace; p++)
        ad->nodes[p] = nodes[p] != NULL ? intern(h, nodes[p]) : NULL;
    json_object_del(h->reasons, key);
    pthread_mutex_unlock(&h->mu);
}

bool kd_handoff_preempt(struct kd_handoff *h, const char *key, const char *reason)
{
    bool added = false;
    pthread_mutex_lock(&h->mu);
    if (json_object_get(h->preempt, key) == NULL) {
        json_object_set_new(h->preempt, key, json_string(reason));
        added = true;
    }
    pthread_mutex_unlock(&h->mu);
    return added;
}

bool kd_handoff_say(struct kd_handoff *h, const char *key, const char *decision, const char *reason)
{
    pthread_mutex_lock(&h->mu);
    json_t *prev = json_object_get(h->reasons, key);
    bool changed = prev == NULL ||
                   strcmp(json_string_value(json_object_get(prev, "reason")) ?: "", reason) != 0;
    if (changed)
        json_object_set_new(h->reasons, key,
                            json_pack("{s:s,s:s}", "decision", decision, "reason", reason));
    pthread_mutex_unlock(&h->mu);
    return changed;
}

bool kd_handoff_holds(struct kd_handoff *h, const char *key, struct kd_handoff_admit *out)
{
    bool found = false;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->nadmits; i++) {
        if (strcmp(h->admits[i].key, key) == 0) {
            *out = h->admits[i]; /* the latest wins */
            found = true;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return found;
}

bool kd_handoff_preempting(struct kd_handoff *h, const char *key)
{
    pthread_mutex_lock(&h->mu);
    bool yes = json_object_get(h->preempt, key) != NULL;
    pthread_mutex_unlock(&h->mu);
    return yes;
}

void kd_handoff_prune(struct kd_handoff *h, const json_t *seen, const json_t *live, int64_t now_ms,
                      int64_t ttl_ms)
{
    const char *k;
    json_t *v, *tmp;
    size_t w = 0;
    pthread_mutex_lock(&h->mu);
    json_object_foreach_safe(h->reasons, tmp, k, v)
    {
        if (json_object_get(seen, k) == NULL)
            json_object_del(h->reasons, k);
    }
    for (size_t i = 0; i < h->nadmits; i++) {
        const struct kd_handoff_admit *ad = &h->admits[i];
        if ((int)json_array_size(json_object_get(live, ad->key)) < ad->nplace &&
            now_ms - ad->at_ms < ttl_ms)
            h->admits[w++] = *ad;
    }
    h->nadmits = w;
    pthread_mutex_unlock(&h->mu);
}

bool kd_handoff_take_admission(struct kd_handoff *h, const char *key, struct kd_handoff_admit *out)
{
    bool found = false;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->nadmits && !found; i++) {
        if (!h->admits[i].used && strcmp(h->admits[i].key, key) == 0) {
            *out = h->admits[i];
            h->admits[i].used = true;
            found = true;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return found;
}

bool kd_handoff_admitted(struct kd_handoff *h, const char *key)
{
    bool found = false;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->nadmits && !found; i++)
        found = !h->admits[i].used && strcmp(h->admits[i].key, key) == 0;
    pthread_mutex_unlock(&h->mu);
    return found;
}

void kd_handoff_drop_admission(struct kd_handoff *h, const char *key)
{
    size_t w = 0;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->nadmits; i++)
        if (!(h->admits[i].used && strcmp(h->admits[i].key, key) == 0))
            h->admits[w++] = h->admits[i];
    h->nadmits = w;
    pthread_mutex_unlock(&h->mu);
}

void kd_handoff_unuse_admission(struct kd_handoff *h, const char *key)
{
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < h->nadmits; i++)
        if (strcmp(h->admits[i].key, key) == 0)
            h->admits[i].used = false;
    pthread_mutex_unlock(&h->mu);
}

bool kd_handoff_preemption(struct kd_handoff *h, const char *key, char *reason, size_t len)
{
    pthread_mutex_lock(&h->mu);
    const char *r = json_string_value(json_object_get(h->preempt, key));
    if (r != NULL)
        kd_strlcpy(reason, r, len);
    pthread_mutex_unlock(&h->mu);
    return r != NULL;
}

void kd_handoff_take_preemption(struct kd_handoff *h, const char *key)
{
    pthread_mutex_lock(&h->mu);
    json_object_del(h->preempt, key);
    pthread_mutex_unlock(&h->mu);
}

bool kd_handoff_reason(struct kd_handoff *h, const char *key, char *reason, size_t len, bool *never)
{
    pthread_mutex_lock(&h->mu);
    const json_t *why = json_object_get(h->reasons, key);
    const char *r = json_string_value(json_object_get(why, "reason"));
    const char *d = json_string_value(json_object_get(why, "decision"));
    if (r != NULL)
        kd_strlcpy(reason, r, len);
    *never = d != NULL && strcmp(d, "never") == 0;
    pthread_mutex_unlock(&h->mu);
    return r != NULL;
}
