/*
 * The informer cache (see informer.h): objects by key in a uthash table,
 * plus one secondary table whose entries ("n:NS", "o:UID", "l:KEY=VALUE")
 * each hold an array of the objects they index; each object knows its slot
 * in every such array, so removal is a swap with the last. (A hash set per
 * index value cost about 600 bytes per object whose label is unique, such
 * as a trial's request id.) One rwlock guards it.
 *
 * Objects are kept as compact JSON text, not as jansson trees: a tree
 * takes about 8 times the memory of its text (7.7 KB against 0.9 KB for a
 * typical Trial), which would put a controller caching 10,000 trials near
 * 80 MiB. Getters decode a private copy (a few microseconds per object),
 * which also means callers may change what they get.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "core/alloc.h"
#include "k8s/informer.h"

#define KEY_MAX 512

struct entry;

struct ixval {
    char *key;
    struct entry **items; /* the entries with this index value */
    size_t n, cap;
    UT_hash_handle hh;
};

/* One index an entry is in: the value and the entry's slot in its items. */
struct ixref {
    struct ixval *v;
    size_t pos;
};

struct entry {
    char *key;
    char *json; /* compact JSON text of the object */
    size_t len;
    char *rv;         /* metadata.resourceVersion ("" when absent) */
    char *uid;        /* metadata.uid ("" when absent) */
    struct ixref *ix; /* the indexes this entry is in */
    size_t nix;
    unsigned gen;     /* the relist generation that last saw it (kd_k8s_cache_replace_begin) */
    atomic_bool mark; /* set by a kd_k8s_cache_each_if walker; cleared when the object changes */
    UT_hash_handle hh;
};

struct kd_k8s_cache {
    pthread_rwlock_t lock;
    struct entry *entries;
    struct ixval *index;
    size_t n;
    unsigned gen;      /* the current relist generation */
    char **ixlabels;   /* label keys to index (NULL-terminated), when ixlabels_set */
    bool ixlabels_set; /* false: every label */
};

struct kd_k8s_cache *kd_k8s_cache_new(void)
{
    struct kd_k8s_cache *c = kd_xcalloc(1, sizeof(*c));
    pthread_rwlockattr_t a;
    /* glibc's default prefers readers: busy workers reading the cache could
     * starve the informer's writes. */
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&c->lock, &a);
    pthread_rwlockattr_destroy(&a);
    return c;
}

/* Put e under index key ixkey (owned: kept or freed here). */
static void ix_add(struct kd_k8s_cache *c, struct entry *e, char *ixkey)
{
    struct ixval *v = NULL;
    HASH_FIND_STR(c->index, ixkey, v);
    if (v == NULL) {
        v = kd_xcalloc(1, sizeof(*v));
        v->key = ixkey;
        HASH_ADD_KEYPTR(hh, c->index, v->key, strlen(v->key), v);
    } else {
        free(ixkey);
    }
    for (size_t i = 0; i < e->nix; i++)
        if (e->ix[i].v == v)
            return; /* twice in one object (the same owner listed twice) */
    if (v->n == v->cap) {
        v->cap = v->cap != 0 ? 2 * v->cap : 1;
        v->items = kd_xrealloc(v->items, v->cap * sizeof(*v->items));
    }
    e->ix = kd_xrealloc(e->ix, (e->nix + 1) * sizeof(*e->ix));
    e->ix[e->nix++] = (struct ixref){v, v->n};
    v->items[v->n++] = e;
}

static void ix_remove_all(struct kd_k8s_cache *c, struct entry *e)
{
    for (size_t i = 0; i < e->nix; i++) {
        struct ixval *v = e->ix[i].v;
        size_t pos = e->ix[i].pos;
        struct entry *last = v->items[--v->n];
        if (pos != v->n) {
            v->items[pos] = last; /* the last one takes the freed slot */
            for (size_t k = 0; k < last->nix; k++)
                if (last->ix[k].v == v)
                    last->ix[k].pos = pos;
        }
        if (v->n == 0) {
            HASH_DEL(c->index, v);
            free(v->key);
            free(v->items);
            free(v);
        } else if (v->n < v->cap / 4) {
            v->cap /= 2;
            v->items = kd_xrealloc(v->items, v->cap * sizeof(*v->items));
        }
    }
    free(e->ix);
    e->ix = NULL;
    e->nix = 0;
}

static bool label_indexed(const struct kd_k8s_cache *c, const char *key)
{
    bool yes = !c->ixlabels_set;
    for (size_t i = 0; !yes && c->ixlabels[i] != NULL; i++)
        yes = strcmp(c->ixlabels[i], key) == 0;
    return yes;
}

static void ix_build(struct kd_k8s_cache *c, struct entry *e, const json_t *obj)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    json_t *owners = json_object_get(meta, "ownerReferences");
    json_t *labels = json_object_get(meta, "labels");
    const char *k;
    json_t *v;
    size_t i;
    ix_add(c, e, kd_xasprintf("n:%s", ns != NULL ? ns : ""));
    json_array_foreach(owners, i, v)
    {
        const char *uid = json_string_value(json_object_get(v, "uid"));
        if (uid != NULL)
            ix_add(c, e, kd_xasprintf("o:%s", uid));
    }
    json_object_foreach(labels, k, v)
    {
        if (json_is_string(v) && label_indexed(c, k))
            ix_add(c, e, kd_xasprintf("l:%s=%s", k, json_string_value(v)));
    }
}

static void entry_free(struct entry *e)
{
    free(e->json);
    free(e->rv);
    free(e->uid);
    free(e->key);
    free(e);
}

/* A private copy of the entry's object. The text was written by jansson, so it parses. */
static json_t *decode(const struct entry *e)
{
    json_t *o = json_loadb(e->json, e->len, 0, NULL);
    if (o == NULL)
        kd_oom(e->len);
    return o;
}

void kd_k8s_cache_free(struct kd_k8s_cache *c)
{
    struct entry *e, *tmp;
    if (c == NULL)
        return;
    HASH_ITER(hh, c->entries, e, tmp)
    {
        HASH_DEL(c->entries, e);
        ix_remove_all(c, e);
        entry_free(e);
    }
    for (size_t i = 0; c->ixlabels != NULL && c->ixlabels[i] != NULL; i++)
        free(c->ixlabels[i]);
    free(c->ixlabels);
    pthread_rwlock_destroy(&c->lock);
    free(c);
}

void kd_k8s_cache_index_labels(struct kd_k8s_cache *c, const char *const *keys)
{
    size_t n = 0;
    while (keys[n] != NULL)
        n++;
    pthread_rwlock_wrlock(&c->lock);
    c->ixlabels = kd_xcalloc(n + 1, sizeof(*c->ixlabels));
    for (size_t i = 0; i < n; i++)
        c->ixlabels[i] = kd_xstrdup(keys[i]);
    c->ixlabels_set = true;
    pthread_rwlock_unlock(&c->lock);
}

int kd_k8s_cache_get(struct kd_k8s_cache *c, const char *key, json_t **obj)
{
    struct entry *e = NULL;
    int rc = 0;
    pthread_rwlock_rdlock(&c->lock);
    HASH_FIND_STR(c->entries, key, e);
    if (e != NULL)
        *obj = decode(e);
    else
        rc = KD_ENOTFOUND;
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

size_t kd_k8s_cache_len(struct kd_k8s_cache *c)
{
    pthread_rwlock_rdlock(&c->lock);
    size_t n = c->n;
    pthread_rwlock_unlock(&c->lock);
    return n;
}

static json_t *by_index(struct kd_k8s_cache *c, const char *ixkey)
{
    json_t *arr = json_array();
    struct ixval *v = NULL;
    pthread_rwlock_rdlock(&c->lock);
    HASH_FIND_STR(c->index, ixkey, v);
    for (size_t i = 0; v != NULL && i < v->n; i++)
        json_array_append_new(arr, decode(v->items[i]));
    pthread_rwlock_unlock(&c->lock);
    return arr;
}

json_t *kd_k8s_cache_list(struct kd_k8s_cache *c, const char *ns)
{
    if (ns != NULL) {
        char *k = kd_xasprintf("n:%s", ns);
        json_t *arr = by_index(c, k);
        free(k);
        return arr;
    }
    json_t *arr = json_array();
    struct entry *e, *tmp;
    pthread_rwlock_rdlock(&c->lock);
    HASH_ITER(hh, c->entries, e, tmp)
    {
        json_array_append_new(arr, decode(e));
    }
    pthread_rwlock_unlock(&c->lock);
    return arr;
}

/* One step of a walk: decode e and call fn, unless want says to skip it; fn may mark e. */
static int visit(struct entry *e, bool marking,
                 bool (*want)(const char *key, bool marked, void *ud),
                 int (*fn)(json_t *obj, void *ud), void *ud)
{
    int rc = 0;
    if (want == NULL || want(e->key, atomic_load(&e->mark), ud)) {
        json_t *o = decode(e);
        rc = fn(o, ud);
        json_decref(o);
        if (rc == KD_K8S_EACH_MARK && marking) {
            atomic_store(&e->mark, true); /* under the read lock: only walkers touch it */
            rc = 0;
        }
    }
    return rc;
}

/* Walk the entries under index key ixkey (NULL: all) decoding one at a time; read lock held. */
static int each_index(struct kd_k8s_cache *c, const char *ixkey, bool marking,
                      bool (*want)(const char *key, bool marked, void *ud),
                      int (*fn)(json_t *obj, void *ud), void *ud)
{
    int rc = 0;
    pthread_rwlock_rdlock(&c->lock);
    if (ixkey != NULL) {
        struct ixval *v = NULL;
        HASH_FIND_STR(c->index, ixkey, v);
        for (size_t i = 0; v != NULL && i < v->n && rc == 0; i++)
            rc = visit(v->items[i], marking, want, fn, ud);
    } else {
        struct entry *e, *tmp;
        HASH_ITER(hh, c->entries, e, tmp)
        {
            rc = visit(e, marking, want, fn, ud);
            if (rc != 0)
                break;
        }
    }
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

int kd_k8s_cache_each(struct kd_k8s_cache *c, const char *ns, int (*fn)(json_t *obj, void *ud),
                      void *ud)
{
    char *k = ns != NULL ? kd_xasprintf("n:%s", ns) : NULL;
    int rc = each_index(c, k, false, NULL, fn, ud);
    free(k);
    return rc;
}

int kd_k8s_cache_each_if(struct kd_k8s_cache *c, const char *ns,
                         bool (*want)(const char *key, bool marked, void *ud),
                         int (*fn)(json_t *obj, void *ud), void *ud)
{
    char *k = ns != NULL ? kd_xasprintf("n:%s", ns) : NULL;
    int rc = each_index(c, k, true, want, fn, ud);
    free(k);
    return rc;
}

int kd_k8s_cache_each_owner(struct kd_k8s_cache *c, const char *uid,
                            int (*fn)(json_t *obj, void *ud), void *ud)
{
    char *k = kd_xasprintf("o:%s", uid);
    int rc = each_index(c, k, false, NULL, fn, ud);
    free(k);
    return rc;
}

json_t *kd_k8s_cache_by_owner(struct kd_k8s_cache *c, const char *uid)
{
    char *k = kd_xasprintf("o:%s", uid);
    json_t *arr = by_index(c, k);
    free(k);
    return arr;
}

json_t *kd_k8s_cache_by_label(struct kd_k8s_cache *c, const char *key, const char *value)
{
    char *k = kd_xasprintf("l:%s=%s", key, value);
    json_t *arr = by_index(c, k);
    free(k);
    return arr;
}

/* The text and versions of obj, computed before taking the lock. */
struct enc {
    char *json;
    size_t len;
    char *rv, *uid;
};

static void encode(const json_t *obj, struct enc *x)
{
    const char *rv = kd_k8s_meta_str(obj, "resourceVersion");
    const char *uid = kd_k8s_meta_str(obj, "uid");
    x->json = json_dumps(obj, JSON_COMPACT);
    if (x->json == NULL)
        kd_oom(0);
    x->len = strlen(x->json);
    x->rv = kd_xstrdup(rv != NULL ? rv : "");
    x->uid = kd_xstrdup(uid != NULL ? uid : "");
}

/* Insert or replace with the write lock held (x is consumed); returns the old object decoded. */
static json_t *put_locked(struct kd_k8s_cache *c, const char *key, const json_t *obj, struct enc *x)
{
    struct entry *e = NULL;
    json_t *old = NULL;
    HASH_FIND_STR(c->entries, key, e);
    if (e != NULL) {
        ix_remove_all(c, e);
        old = decode(e);
        free(e->json);
        free(e->rv);
        free(e->uid);
    } else {
        e = kd_xcalloc(1, sizeof(*e));
        e->key = kd_xstrdup(key);
        HASH_ADD_KEYPTR(hh, c->entries, e->key, strlen(e->key), e);
        c->n++;
    }
    e->json = x->json;
    e->len = x->len;
    e->rv = x->rv;
    e->uid = x->uid;
    e->gen = c->gen;
    atomic_store(&e->mark, false);
    memset(x, 0, sizeof(*x));
    ix_build(c, e, obj);
    return old;
}

static json_t *delete_locked(struct kd_k8s_cache *c, const char *key)
{
    struct entry *e = NULL;
    json_t *old = NULL;
    HASH_FIND_STR(c->entries, key, e);
    if (e != NULL) {
        HASH_DEL(c->entries, e);
        ix_remove_all(c, e);
        old = decode(e);
        entry_free(e);
        c->n--;
    }
    return old;
}

int kd_k8s_cache_put(struct kd_k8s_cache *c, json_t *obj, json_t **old)
{
    char key[KEY_MAX];
    struct enc x;
    json_t *prev;
    int rc = kd_k8s_obj_key(obj, key, sizeof(key));
    if (rc < 0)
        return KD_EINVAL;
    encode(obj, &x);
    pthread_rwlock_wrlock(&c->lock);
    prev = put_locked(c, key, obj, &x);
    pthread_rwlock_unlock(&c->lock);
    if (old != NULL)
        *old = prev;
    else
        json_decref(prev);
    return 0;
}

int kd_k8s_cache_delete(struct kd_k8s_cache *c, const char *key, json_t **old)
{
    json_t *prev;
    pthread_rwlock_wrlock(&c->lock);
    prev = delete_locked(c, key);
    pthread_rwlock_unlock(&c->lock);
    if (prev == NULL)
        return KD_ENOTFOUND;
    if (old != NULL)
        *old = prev;
    else
        json_decref(prev);
    return 0;
}

static int same_version(const struct entry *e, const json_t *obj)
{
    const char *rv = kd_k8s_meta_str(obj, "resourceVersion");
    const char *uid = kd_k8s_meta_str(obj, "uid");
    return rv != NULL && e->rv[0] != '\0' && strcmp(e->rv, rv) == 0 &&
           strcmp(e->uid, uid != NULL ? uid : "") == 0;
}

void kd_k8s_cache_replace_begin(struct kd_k8s_cache *c)
{
    pthread_rwlock_wrlock(&c->lock);
    c->gen++;
    pthread_rwlock_unlock(&c->lock);
}

/* Deliver [type, old|null, new|null] triples to fn, without the lock. */
static void deliver_changes(json_t *changes, kd_k8s_diff_fn fn, void *ud)
{
    size_t i;
    json_t *item;
    json_array_foreach(changes, i, item)
    {
        json_t *old = json_array_get(item, 1), *new = json_array_get(item, 2);
        if (fn != NULL)
            fn((enum kd_k8s_event_type)json_integer_value(json_array_get(item, 0)),
               json_is_null(old) ? NULL : old, json_is_null(new) ? NULL : new, ud);
    }
}

int kd_k8s_cache_replace_page(struct kd_k8s_cache *c, json_t *items, kd_k8s_diff_fn fn, void *ud)
{
    json_t *changes = json_array(); /* [type, old|null, new|null] triples */
    char key[KEY_MAX];
    json_t *item;
    size_t i;
    int rc = 0;

    json_array_foreach(items, i, item)
    {
        if (kd_k8s_obj_key(item, key, sizeof(key)) < 0) {
            rc = KD_EINVAL;
            goto out;
        }
    }
    pthread_rwlock_wrlock(&c->lock);
    json_array_foreach(items, i, item)
    {
        struct entry *cur = NULL;
        if (kd_k8s_obj_key(item, key, sizeof(key)) < 0)
            continue;
        HASH_FIND_STR(c->entries, key, cur);
        if (cur != NULL && same_version(cur, item)) {
            cur->gen = c->gen;
            continue;
        }
        struct enc x;
        encode(item, &x); /* under the lock: a relist is one writer's batch anyway */
        json_t *old = put_locked(c, key, item, &x);
        json_array_append_new(changes, json_pack("[i,o,O]", old ? KD_K8S_MODIFIED : KD_K8S_ADDED,
                                                 old ? old : json_null(), item));
    }
    pthread_rwlock_unlock(&c->lock);
    deliver_changes(changes, fn, ud);
out:
    json_decref(changes);
    return rc;
}

void kd_k8s_cache_replace_end(struct kd_k8s_cache *c, kd_k8s_diff_fn fn, void *ud)
{
    json_t *changes = json_array();
    struct entry *e, *etmp;
    pthread_rwlock_wrlock(&c->lock);
    HASH_ITER(hh, c->entries, e, etmp)
    {
        if (e->gen == c->gen)
            continue;
        char *k = kd_xstrdup(e->key);
        json_t *old = delete_locked(c, k);
        free(k);
        json_array_append_new(changes, json_pack("[i,o,n]", KD_K8S_DELETED, old));
    }
    pthread_rwlock_unlock(&c->lock);
    deliver_changes(changes, fn, ud);
    json_decref(changes);
}

int kd_k8s_cache_replace(struct kd_k8s_cache *c, json_t *items, kd_k8s_diff_fn fn, void *ud)
{
    char key[KEY_MAX];
    json_t *item;
    size_t i;
    json_array_foreach(items, i, item)
    {
        if (kd_k8s_obj_key(item, key, sizeof(key)) < 0)
            return KD_EINVAL; /* nothing changed */
    }
    kd_k8s_cache_replace_begin(c);
    int rc = kd_k8s_cache_replace_page(c, items, fn, ud);
    if (rc == 0)
        kd_k8s_cache_replace_end(c, fn, ud);
    return rc;
}
