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
 *
 * The text is deflated with a preset dictionary made of the texts of the
 * first objects the cache holds (objects of one kind share most of their
 * bytes: keys, label and owner values, conditions' messages). A 1.1 KB
 * Trial becomes about 100 bytes, so the 10,000-trial cache shrinks from
 * 11 MiB to about 1 MiB, for one deflate per write (9 to 15 microseconds
 * per Trial) and one inflate per read. The dictionary never changes once set, so readers use it
 * without a lock. Text that does not shrink by an eighth is kept as it is.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/log.h"
#include "k8s/informer.h"

#define KEY_MAX 512
#define DICT_SAMPLES 8 /* objects whose texts make the dictionary */
#define DICT_MAX 4096  /* bytes of dictionary: the end of those texts */
#define ZWBITS 13      /* raw deflate with an 8 KiB window: dictionary plus object */
#define ZMEMLEVEL 6    /* about 40 KiB of deflate state, for one write at a time */

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
    unsigned char *data; /* the object's compact JSON text, deflated when raw != 0 */
    uint32_t len;        /* bytes of data */
    uint32_t raw;        /* bytes of the text when data is deflated; 0: data is the text */
    char *rv;            /* metadata.resourceVersion ("" when absent) */
    char *uid;           /* metadata.uid ("" when absent) */
    struct ixref *ix;    /* the indexes this entry is in */
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
    /* The deflate dictionary: set once, by the first write, under the write lock. */
    unsigned char *_Atomic dict;
    size_t dictlen;
};

/*
 * The cache a walk (kd_k8s_cache_each*) of this thread is in. Its lock prefers writers, so a
 * callback that locks the same cache again waits behind a waiting writer that waits for the
 * walk: a deadlock that only shows under load. Locking the walked cache from its own walk is a
 * bug, and it stops the process at once, naming it, instead.
 */
static _Thread_local const struct kd_k8s_cache *walking;

static void lock_check(const struct kd_k8s_cache *c, const char *what)
{
    if (walking == c) {
        KD_ERROR("cache locked again from a walk of the same cache (a deadlock under load)",
                 "op=%s", what);
        abort();
    }
}

static void rd_lock(struct kd_k8s_cache *c)
{
    lock_check(c, "read");
    pthread_rwlock_rdlock(&c->lock);
}

static void wr_lock(struct kd_k8s_cache *c)
{
    lock_check(c, "write");
    pthread_rwlock_wrlock(&c->lock);
}

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
    free(e->data);
    free(e->rv);
    free(e->uid);
    free(e->key);
    free(e);
}

/* Deflate text with the dictionary into *out; false when it would not shrink. */
static bool deflate_text(const unsigned char *dict, size_t dictlen, const char *text, size_t len,
                         unsigned char **out, uint32_t *outlen)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (len < 64 || len > UINT32_MAX ||
        deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -ZWBITS, ZMEMLEVEL,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return false;
    bool ok = false;
    size_t cap = len - len / 8; /* worth it only when it saves an eighth */
    unsigned char *buf = kd_xmalloc(cap);
    if (deflateSetDictionary(&z, dict, (uInt)dictlen) == Z_OK) {
        z.next_in = (unsigned char *)text;
        z.avail_in = (uInt)len;
        z.next_out = buf;
        z.avail_out = (uInt)cap;
        ok = deflate(&z, Z_FINISH) == Z_STREAM_END;
    }
    if (ok) {
        *outlen = (uint32_t)z.total_out;
        *out = kd_xrealloc(buf, z.total_out);
    } else {
        free(buf);
    }
    deflateEnd(&z);
    return ok;
}

/* The entry's text (NUL-terminated); free it unless it is e->data itself. */
static char *entry_text(const struct kd_k8s_cache *c, const struct entry *e)
{
    if (e->raw == 0)
        return (char *)e->data;
    z_stream z;
    memset(&z, 0, sizeof(z));
    char *text = kd_xmalloc((size_t)e->raw + 1);
    int zr = inflateInit2(&z, -ZWBITS);
    if (zr == Z_OK)
        zr = inflateSetDictionary(&z, c->dict, (uInt)c->dictlen);
    if (zr == Z_OK) {
        z.next_in = e->data;
        z.avail_in = e->len;
        z.next_out = (unsigned char *)text;
        z.avail_out = e->raw;
        zr = inflate(&z, Z_FINISH);
    }
    bool ok = zr == Z_STREAM_END && z.total_out == e->raw;
    inflateEnd(&z);
    if (!ok) {
        KD_ERROR("informer cache: a cached object does not inflate", "zlib=%d", zr);
        abort();
    }
    text[e->raw] = '\0';
    return text;
}

/* A private copy of the entry's object. The text was written by jansson, so it parses. */
static json_t *decode(const struct kd_k8s_cache *c, const struct entry *e)
{
    char *text = entry_text(c, e);
    size_t len = e->raw != 0 ? e->raw : e->len;
    json_t *o = json_loadb(text, len, 0, NULL);
    if (o == NULL)
        kd_oom(len);
    if (text != (char *)e->data)
        free(text);
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
    free(c->dict);
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
    wr_lock(c);
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
    rd_lock(c);
    HASH_FIND_STR(c->entries, key, e);
    if (e != NULL)
        *obj = decode(c, e);
    else
        rc = KD_ENOTFOUND;
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

size_t kd_k8s_cache_len(struct kd_k8s_cache *c)
{
    rd_lock(c);
    size_t n = c->n;
    pthread_rwlock_unlock(&c->lock);
    return n;
}

size_t kd_k8s_cache_bytes(struct kd_k8s_cache *c, size_t *text)
{
    size_t n = 0, t = 0;
    struct entry *e, *tmp;
    rd_lock(c);
    HASH_ITER(hh, c->entries, e, tmp)
    {
        n += e->len;
        t += e->raw != 0 ? e->raw : e->len;
    }
    n += c->dictlen;
    pthread_rwlock_unlock(&c->lock);
    if (text != NULL)
        *text = t;
    return n;
}

static json_t *by_index(struct kd_k8s_cache *c, const char *ixkey)
{
    json_t *arr = json_array();
    struct ixval *v = NULL;
    rd_lock(c);
    HASH_FIND_STR(c->index, ixkey, v);
    for (size_t i = 0; v != NULL && i < v->n; i++)
        json_array_append_new(arr, decode(c, v->items[i]));
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
    rd_lock(c);
    HASH_ITER(hh, c->entries, e, tmp)
    {
        json_array_append_new(arr, decode(c, e));
    }
    pthread_rwlock_unlock(&c->lock);
    return arr;
}

/* Which entries a walk decodes: want asks with the key and the mark, want_rv with the key and the
 * resourceVersion; neither set: all. */
struct walk_filter {
    bool (*want)(const char *key, bool marked, void *ud);
    bool (*want_rv)(const char *key, const char *rv, void *ud);
};

/* One step of a walk: decode e and call fn, unless the filter skips it; fn may mark e. */
static int visit(const struct kd_k8s_cache *c, struct entry *e, bool marking,
                 const struct walk_filter *wf, int (*fn)(json_t *obj, void *ud), void *ud)
{
    int rc = 0;
    if (wf->want != NULL && !wf->want(e->key, atomic_load(&e->mark), ud))
        return 0;
    if (wf->want_rv != NULL && !wf->want_rv(e->key, e->rv, ud))
        return 0;
    json_t *o = decode(c, e);
    rc = fn(o, ud);
    json_decref(o);
    if (rc == KD_K8S_EACH_MARK && marking) {
        atomic_store(&e->mark, true); /* under the read lock: only walkers touch it */
        rc = 0;
    }
    return rc;
}

/* Walk the entries under index key ixkey (NULL: all) decoding one at a time; read lock held. */
static int each_index(struct kd_k8s_cache *c, const char *ixkey, bool marking,
                      const struct walk_filter *wf, int (*fn)(json_t *obj, void *ud), void *ud)
{
    int rc = 0;
    rd_lock(c);
    const struct kd_k8s_cache *outer = walking;
    walking = c;
    if (ixkey != NULL) {
        struct ixval *v = NULL;
        HASH_FIND_STR(c->index, ixkey, v);
        for (size_t i = 0; v != NULL && i < v->n && rc == 0; i++)
            rc = visit(c, v->items[i], marking, wf, fn, ud);
    } else {
        struct entry *e, *tmp;
        HASH_ITER(hh, c->entries, e, tmp)
        {
            rc = visit(c, e, marking, wf, fn, ud);
            if (rc != 0)
                break;
        }
    }
    walking = outer;
    pthread_rwlock_unlock(&c->lock);
    return rc;
}

int kd_k8s_cache_each(struct kd_k8s_cache *c, const char *ns, int (*fn)(json_t *obj, void *ud),
                      void *ud)
{
    char *k = ns != NULL ? kd_xasprintf("n:%s", ns) : NULL;
    int rc = each_index(c, k, false, &(struct walk_filter){0}, fn, ud);
    free(k);
    return rc;
}

int kd_k8s_cache_each_if(struct kd_k8s_cache *c, const char *ns,
                         bool (*want)(const char *key, bool marked, void *ud),
                         int (*fn)(json_t *obj, void *ud), void *ud)
{
    char *k = ns != NULL ? kd_xasprintf("n:%s", ns) : NULL;
    int rc = each_index(c, k, true, &(struct walk_filter){.want = want}, fn, ud);
    free(k);
    return rc;
}

int kd_k8s_cache_each_owner(struct kd_k8s_cache *c, const char *uid,
                            int (*fn)(json_t *obj, void *ud), void *ud)
{
    char *k = kd_xasprintf("o:%s", uid);
    int rc = each_index(c, k, false, &(struct walk_filter){0}, fn, ud);
    free(k);
    return rc;
}

int kd_k8s_cache_each_owner_changed(struct kd_k8s_cache *c, const char *uid,
                                    bool (*want)(const char *key, const char *rv, void *ud),
                                    int (*fn)(json_t *obj, void *ud), void *ud)
{
    char *k = kd_xasprintf("o:%s", uid);
    int rc = each_index(c, k, false, &(struct walk_filter){.want_rv = want}, fn, ud);
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

/* The stored form and versions of obj, computed before taking the lock. */
struct enc {
    unsigned char *data;
    uint32_t len, raw;
    char *rv, *uid;
};

static void encode(struct kd_k8s_cache *c, const json_t *obj, struct enc *x)
{
    const char *rv = kd_k8s_meta_str(obj, "resourceVersion");
    const char *uid = kd_k8s_meta_str(obj, "uid");
    char *text = json_dumps(obj, JSON_COMPACT);
    if (text == NULL)
        kd_oom(0);
    size_t len = strlen(text);
    unsigned char *dict = atomic_load(&c->dict);
    x->raw = 0;
    if (dict != NULL && deflate_text(dict, c->dictlen, text, len, &x->data, &x->len)) {
        x->raw = (uint32_t)len;
        free(text);
    } else if (len > UINT32_MAX) {
        kd_oom(len); /* the API server's limit on an object is 1.5 MB */
    } else {
        x->data = (unsigned char *)text;
        x->len = (uint32_t)len;
    }
    x->rv = kd_xstrdup(rv != NULL ? rv : "");
    x->uid = kd_xstrdup(uid != NULL ? uid : "");
}

/*
 * With the write lock held, once the cache holds DICT_SAMPLES objects: the
 * end of their texts, one after the other, becomes the dictionary, and
 * they are deflated with it too. (One object alone makes a poor
 * dictionary when it is unlike the rest: a failed trial among completed
 * ones doubled their size.)
 */
static void dict_build(struct kd_k8s_cache *c)
{
    struct entry *e, *tmp;
    if (atomic_load(&c->dict) != NULL || c->n < DICT_SAMPLES)
        return;
    unsigned char *d = kd_xmalloc(DICT_MAX);
    size_t n = 0;
    HASH_ITER(hh, c->entries, e, tmp)
    {
        /* Each text's end goes last; what falls off the front is the oldest. */
        size_t take = e->len < DICT_MAX ? e->len : DICT_MAX;
        if (n + take > DICT_MAX) {
            size_t drop = n + take - DICT_MAX;
            memmove(d, d + drop, n - drop);
            n -= drop;
        }
        memcpy(d + n, e->data + (e->len - take), take);
        n += take;
    }
    c->dictlen = n;
    atomic_store(&c->dict, d);
    HASH_ITER(hh, c->entries, e, tmp)
    {
        unsigned char *z = NULL;
        uint32_t zlen = 0;
        if (e->raw == 0 && deflate_text(d, n, (const char *)e->data, e->len, &z, &zlen)) {
            free(e->data);
            e->raw = e->len;
            e->data = z;
            e->len = zlen;
        }
    }
}

/* Insert or replace with the write lock held (x is consumed); returns the old object decoded. */
static json_t *put_locked(struct kd_k8s_cache *c, const char *key, const json_t *obj, struct enc *x)
{
    struct entry *e = NULL;
    json_t *old = NULL;
    HASH_FIND_STR(c->entries, key, e);
    if (e != NULL) {
        ix_remove_all(c, e);
        old = decode(c, e);
        free(e->data);
        free(e->rv);
        free(e->uid);
    } else {
        e = kd_xcalloc(1, sizeof(*e));
        e->key = kd_xstrdup(key);
        HASH_ADD_KEYPTR(hh, c->entries, e->key, strlen(e->key), e);
        c->n++;
    }
    e->data = x->data;
    e->len = x->len;
    e->raw = x->raw;
    e->rv = x->rv;
    e->uid = x->uid;
    e->gen = c->gen;
    atomic_store(&e->mark, false);
    memset(x, 0, sizeof(*x));
    ix_build(c, e, obj);
    dict_build(c);
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
        old = decode(c, e);
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
    encode(c, obj, &x);
    wr_lock(c);
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
    wr_lock(c);
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
    wr_lock(c);
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
    wr_lock(c);
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
        encode(c, item, &x); /* under the lock: a relist is one writer's batch anyway */
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
    wr_lock(c);
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
