/*
 * The ownerReference garbage collector of kdet-local, a controller as
 * kube-controller-manager's is: it follows the store's change events
 * (store.h's ring, as a watch does), keeps an index of dependents by owner
 * uid (an owner is found from a reference's kind and name and must have its
 * uid), and looks again only at the objects an event concerns: dependents
 * of a deleted owner (deleted, or their dead references pruned), dependents
 * of an owner in foreground deletion, an owner whose foreground or orphan
 * finalizer can go, and a namespace being deleted. It also expires Events.
 */
#include "apiint.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/time.h"
#include "events.h"
#include "store.h"

/* Objects looked at per hold of the store lock, so that a burst does not stall the API. */
#define GC_BATCH 256

struct gc {
    struct kd_api *api;
    uint64_t rv;   /* events up to here are in the index */
    json_t *deps;  /* owner uid -> {key: [gr, ns, name]} of objects that reference it */
    json_t *queue; /* key -> [gr, ns, name]: objects to look at */
};

/* The queue and index key of an object: "gr\nns\nname". Caller frees. */
static char *obj_key(const char *gr, const char *ns, const char *name)
{
    return kd_xasprintf("%s\n%s\n%s", gr, ns != NULL ? ns : "", name != NULL ? name : "");
}

static void enqueue(struct gc *g, const char *gr, const char *ns, const char *name)
{
    if (gr == NULL || name == NULL)
        return;
    char *k = obj_key(gr, ns, name);
    json_object_set_new(g->queue, k, json_pack("[s,s,s]", gr, ns != NULL ? ns : "", name));
    free(k);
}

static void enqueue_ref(struct gc *g, const json_t *ref /* [gr, ns, name] */)
{
    enqueue(g, json_string_value(json_array_get(ref, 0)), json_string_value(json_array_get(ref, 1)),
            json_string_value(json_array_get(ref, 2)));
}

/* Add (or, with add false, remove) obj under gr in the dependents of each of its owners. */
static void index_refs(struct gc *g, const char *gr, const json_t *obj, bool add)
{
    const json_t *m = json_object_get(obj, "metadata");
    const char *ns = kd_jstr(m, "namespace"), *name = kd_jstr(m, "name");
    char *k = obj_key(gr, ns, name);
    size_t i;
    json_t *ref;
    json_array_foreach(json_object_get(m, "ownerReferences"), i, ref)
    {
        const char *ou = kd_jstr(ref, "uid");
        if (ou == NULL)
            continue;
        json_t *set = json_object_get(g->deps, ou);
        if (add) {
            if (set == NULL) {
                set = json_object();
                json_object_set_new(g->deps, ou, set);
            }
            json_object_set_new(set, k, json_pack("[s,s,s]", gr, ns != NULL ? ns : "", name));
        } else if (set != NULL) {
            json_object_del(set, k);
            if (json_object_size(set) == 0)
                json_object_del(g->deps, ou);
        }
    }
    free(k);
}

/*
 * The live owner an ownerReference of an object in namespace ns names (borrowed, lock held), or
 * NULL: its kind and name, in ns when the kind is namespaced, with the reference's uid. *ort (may
 * be NULL) gets its type.
 */
static json_t *owner_of(struct gc *g, const char *ns, const json_t *ref, struct kd_restype **ort)
{
    const char *av = kd_jstr(ref, "apiVersion"), *kind = kd_jstr(ref, "kind");
    const char *name = kd_jstr(ref, "name"), *uid = kd_jstr(ref, "uid");
    if (av == NULL || kind == NULL || name == NULL || uid == NULL)
        return NULL;
    const char *slash = strchr(av, '/');
    char group[256];
    snprintf(group, sizeof(group), "%.*s", slash != NULL ? (int)(slash - av) : 0, av);
    struct kd_restype *rt = kd_registry_find_kind(g->api->reg, group, kind);
    if (rt == NULL || (rt->namespaced && (ns == NULL || ns[0] == '\0')))
        return NULL;
    json_t *o = kd_store_get(g->api->st, rt->gr, rt->namespaced ? ns : NULL, name);
    const char *ouid = kd_jstr(json_object_get(o, "metadata"), "uid");
    if (ouid == NULL || strcmp(ouid, uid) != 0)
        return NULL;
    if (ort != NULL)
        *ort = rt;
    return o;
}

/* Whether obj is in deletion with a finalizer the collector finishes. */
static bool finishing(const char *gr, const json_t *obj)
{
    return json_object_get(json_object_get(obj, "metadata"), "deletionTimestamp") != NULL &&
           (kd_api__has_finalizer(obj, "foregroundDeletion") ||
            kd_api__has_finalizer(obj, "orphan") || strcmp(gr, "/namespaces") == 0);
}

static bool same(const json_t *a, const json_t *b)
{
    return a == b || (a != NULL && b != NULL && json_equal(a, b));
}

/*
 * Whether a change can matter to the collector: a new or deleted object, or one whose owner
 * references, finalizers or deletion changed. Status writes (most events: the kubelet's) do not.
 */
static bool gc_relevant(const struct kd_event *ev)
{
    if (ev->prev == NULL || ev->type == KD_EV_DELETED)
        return true;
    const json_t *pm = json_object_get(ev->prev, "metadata");
    const json_t *m = json_object_get(ev->obj, "metadata");
    return !same(json_object_get(pm, "ownerReferences"), json_object_get(m, "ownerReferences")) ||
           !same(json_object_get(pm, "finalizers"), json_object_get(m, "finalizers")) ||
           (json_object_get(pm, "deletionTimestamp") == NULL) !=
               (json_object_get(m, "deletionTimestamp") == NULL);
}

/*
 * Take in one change event (lock held): the index follows it, and the objects whose fate it may
 * decide are queued: the object itself when it has owners or is being finished, its owners that
 * wait for their dependents, its dependents when it is gone or deletes them first, and its
 * namespace when that is being deleted. Changes that touch none of that (status writes) are
 * skipped.
 */
static void take_event(struct gc *g, const struct kd_event *ev)
{
    const json_t *m = json_object_get(ev->obj, "metadata");
    const char *ns = kd_jstr(m, "namespace");
    const char *uid = kd_jstr(m, "uid");
    bool gone = ev->type == KD_EV_DELETED;
    if (!gc_relevant(ev))
        return;
    if (ev->prev != NULL)
        index_refs(g, ev->gr, ev->prev, false);
    index_refs(g, ev->gr, ev->obj, !gone);
    if (!gone &&
        (json_array_size(json_object_get(m, "ownerReferences")) > 0 || finishing(ev->gr, ev->obj)))
        enqueue(g, ev->gr, ns, kd_jstr(m, "name"));
    const json_t *both[] = {ev->prev, ev->obj};
    for (size_t b = 0; b < 2; b++) {
        size_t i;
        json_t *ref;
        json_array_foreach(json_object_get(json_object_get(both[b], "metadata"), "ownerReferences"),
                           i, ref)
        {
            struct kd_restype *ort = NULL;
            json_t *owner = owner_of(g, ns, ref, &ort);
            if (owner != NULL && finishing(ort->gr, owner))
                enqueue(g, ort->gr, ort->namespaced ? ns : "", kd_jstr(ref, "name"));
        }
    }
    if (gone || (json_object_get(m, "deletionTimestamp") != NULL &&
                 kd_api__has_finalizer(ev->obj, "foregroundDeletion"))) {
        const json_t *set = json_object_get(g->deps, uid != NULL ? uid : "");
        const char *k;
        json_t *dep;
        json_object_foreach((json_t *)set, k, dep) enqueue_ref(g, dep);
    }
    if (gone && ns != NULL && ns[0] != '\0') {
        const json_t *nso = kd_store_get(g->api->st, "/namespaces", NULL, ns);
        if (json_object_get(json_object_get(nso, "metadata"), "deletionTimestamp") != NULL)
            enqueue(g, "/namespaces", "", ns);
    }
}

/* Build the index from the store as it is now (lock held): at start, and after events were lost. */
static void relist(struct gc *g)
{
    const char **grs = NULL;
    size_t ng = kd_store_kinds(g->api->st, &grs);
    json_object_clear(g->deps);
    g->rv = kd_store_rv(g->api->st);
    for (size_t k = 0; k < ng; k++) {
        json_t **items = NULL;
        size_t n = kd_store_list(g->api->st, grs[k], NULL, &items);
        for (size_t i = 0; i < n; i++) {
            const json_t *m = json_object_get(items[i], "metadata");
            index_refs(g, grs[k], items[i], true);
            if (json_array_size(json_object_get(m, "ownerReferences")) > 0 ||
                finishing(grs[k], items[i]))
                enqueue(g, grs[k], kd_jstr(m, "namespace"), kd_jstr(m, "name"));
        }
        free(items);
    }
    free(grs);
}

static struct kd_restype *type_of(struct gc *g, const char *gr)
{
    for (struct kd_restype *x = kd_registry_first(g->api->reg); x != NULL; x = x->next)
        if (strcmp(x->gr, gr) == 0)
            return x;
    return NULL;
}

/* Without the references to owners that are gone; NULL when none is. New reference. */
static json_t *without_refs(const json_t *o, struct gc *g, const char *only_uid)
{
    const char *ns = kd_jstr(json_object_get(o, "metadata"), "namespace");
    json_t *next = json_deep_copy(o);
    json_t *refs = json_object_get(kd_api__meta(next), "ownerReferences");
    size_t before = json_array_size(refs);
    for (size_t j = 0; j < json_array_size(refs);) {
        const char *u = kd_jstr(json_array_get(refs, j), "uid");
        bool drop = only_uid != NULL ? u != NULL && strcmp(u, only_uid) == 0
                                     : owner_of(g, ns, json_array_get(refs, j), NULL) == NULL;
        if (drop)
            json_array_remove(refs, j);
        else
            j++;
    }
    if (json_array_size(refs) == before) {
        json_decref(next);
        return NULL;
    }
    return next;
}

/* A foreground or orphan owner, or a namespace, in deletion: its dependents first, then it. */
static void finish(struct gc *g, const struct kd_restype *rt, const char *ns, const char *name,
                   json_t *cur)
{
    struct kd_api *api = g->api;
    const char *uid = kd_jstr(json_object_get(cur, "metadata"), "uid");
    bool is_ns = strcmp(rt->gr, "/namespaces") == 0;
    bool orphan = kd_api__has_finalizer(cur, "orphan");
    size_t remaining = 0;
    if (is_ns) {
        const char **grs = NULL;
        size_t ng = kd_store_kinds(api->st, &grs);
        for (size_t k = 0; k < ng; k++) {
            struct kd_restype *drt = type_of(g, grs[k]);
            json_t **items = NULL;
            size_t n =
                drt != NULL && drt->namespaced ? kd_store_list(api->st, grs[k], name, &items) : 0;
            for (size_t i = 0; i < n; i++) {
                json_t *o = json_incref(items[i]);
                json_t *out = NULL;
                bool gone;
                if (kd_api__begin_delete(api, drt, name,
                                         kd_jstr(json_object_get(o, "metadata"), "name"), NULL, -1,
                                         &out, &gone) == 0 &&
                    !gone)
                    remaining++;
                json_decref(out);
                json_decref(o);
            }
            free(items);
        }
        free(grs);
    } else {
        json_t *set = json_deep_copy(json_object_get(g->deps, uid != NULL ? uid : ""));
        const char *k;
        json_t *dep;
        json_object_foreach(set, k, dep)
        {
            const char *dgr = json_string_value(json_array_get(dep, 0));
            const char *dns = json_string_value(json_array_get(dep, 1));
            json_t *o = kd_store_get(api->st, dgr, dns[0] != '\0' ? dns : NULL,
                                     json_string_value(json_array_get(dep, 2)));
            if (o == NULL)
                continue;
            if (!orphan) {
                remaining++;
                continue;
            }
            json_t *next = without_refs(o, g, uid);
            if (next == NULL)
                continue;
            if (json_array_size(json_object_get(kd_api__meta(next), "ownerReferences")) == 0)
                json_object_del(kd_api__meta(next), "ownerReferences");
            const json_t *dm = json_object_get(o, "metadata");
            if (kd_store_put(api->st, dgr, kd_jstr(dm, "namespace"), kd_jstr(dm, "name"), next,
                             NULL) != 0)
                remaining++;
        }
        json_decref(set);
    }
    if (remaining > 0)
        return;
    json_t *next = json_deep_copy(cur);
    json_t *fins = json_object_get(kd_api__meta(next), "finalizers");
    for (size_t k = 0; k < json_array_size(fins);) {
        const char *f = json_string_value(json_array_get(fins, k));
        if (f != NULL && (strcmp(f, "orphan") == 0 || strcmp(f, "foregroundDeletion") == 0))
            json_array_remove(fins, k);
        else
            k++;
    }
    if (is_ns)
        json_object_set_new(next, "spec", json_object());
    if (json_array_size(fins) == 0) {
        json_decref(next);
        if (kd_api__remove_object(api, rt, ns, name, NULL) == 0)
            KD_INFO("deleted after finalization", "resource=%s name=%s", rt->resource,
                    kd_logq(name));
    } else if (kd_store_put(api->st, rt->gr, ns, name, next, NULL) != 0) {
        KD_WARN("gc: write failed", "name=%s", kd_logq(name));
    }
}

/* Look at one queued object (lock held): collect it, prune its dead references, or finish it. */
static void attempt(struct gc *g, const char *gr, const char *ns, const char *name)
{
    struct kd_api *api = g->api;
    const char *nsarg = ns[0] != '\0' ? ns : NULL;
    json_t *cur = kd_store_get(api->st, gr, nsarg, name);
    struct kd_restype *rt = cur != NULL ? type_of(g, gr) : NULL;
    if (rt == NULL)
        return;
    const json_t *m = json_object_get(cur, "metadata");
    const json_t *refs = json_object_get(m, "ownerReferences");
    size_t live = 0, dead = 0, j;
    bool foreground_owner = false;
    json_t *ref;
    json_array_foreach(refs, j, ref)
    {
        json_t *owner = owner_of(g, ns, ref, NULL);
        if (owner == NULL) {
            dead++;
        } else {
            live++;
            if (json_object_get(json_object_get(owner, "metadata"), "deletionTimestamp") != NULL &&
                kd_api__has_finalizer(owner, "foregroundDeletion"))
                foreground_owner = true;
        }
    }
    bool deleting = json_object_get(m, "deletionTimestamp") != NULL;
    if (json_array_size(refs) > 0 && (live == 0 || foreground_owner) && !deleting) {
        json_t *out = NULL;
        bool gone;
        if (kd_api__begin_delete(api, rt, nsarg, name, "Background", -1, &out, &gone) == 0)
            KD_INFO("garbage collected", "resource=%s namespace=%s name=%s", rt->resource,
                    kd_logq(ns), kd_logq(name));
        json_decref(out);
        return;
    }
    if (dead > 0 && live > 0) {
        json_t *next = without_refs(cur, g, NULL);
        if (next != NULL && kd_store_put(api->st, gr, nsarg, name, next, NULL) != 0)
            KD_WARN("gc: write failed", "name=%s", kd_logq(name));
        cur = kd_store_get(api->st, gr, nsarg, name);
    }
    if (cur != NULL && finishing(gr, cur))
        finish(g, rt, nsarg, name, cur);
}

/* Take in the events since the last round, then look at what they queued (lock held). */
static void round_once(struct gc *g)
{
    for (;;) {
        const struct kd_event *ev = NULL;
        uint64_t oldest = 0;
        int rc = kd_store_next_event(g->api->st, g->rv, &ev, &oldest);
        if (rc == KD_EGONE) {
            KD_INFO("gc: events lost, listing again", "from_rv=%llu oldest=%llu",
                    (unsigned long long)g->rv, (unsigned long long)oldest);
            relist(g);
            continue;
        }
        if (rc != 0)
            break;
        take_event(g, ev);
        g->rv = ev->rv;
    }
    json_t *batch = json_object();
    const char *k;
    json_t *v;
    void *tmp;
    size_t n = 0;
    json_object_foreach_safe(g->queue, tmp, k, v)
    {
        if (n++ == GC_BATCH)
            break;
        json_object_set(batch, k, v);
        json_object_del(g->queue, k);
    }
    json_object_foreach(batch, k, v)
    {
        attempt(g, json_string_value(json_array_get(v, 0)), json_string_value(json_array_get(v, 1)),
                json_string_value(json_array_get(v, 2)));
    }
    json_decref(batch);
}

void *kd_api__gc_main(void *arg)
{
    struct gc g = {.api = arg, .deps = json_object(), .queue = json_object()};
    struct kd_api *api = g.api;
    int64_t next_expiry = kd_mono_ms() + 60000;
    kd_store_lock(api->st);
    relist(&g);
    kd_store_unlock(api->st);
    while (!atomic_load(&api->stop)) {
        kd_store_lock(api->st);
        if (kd_mono_ms() >= next_expiry) {
            /* Events live an hour, as with kube-apiserver's default --event-ttl. */
            int n = kd_events_expire(api->st, 3600);
            if (n > 0)
                KD_INFO("expired events", "count=%d", n);
            next_expiry = kd_mono_ms() + 60000;
        }
        round_once(&g);
        bool more = json_object_size(g.queue) > 0;
        kd_store_unlock(api->st);
        if (!more)
            kd_sleep_ms(api->gc_ms);
    }
    json_decref(g.deps);
    json_decref(g.queue);
    return NULL;
}
