/*
 * The informer loop (see informer.h), on its own thread: list every page,
 * replace the cache and deliver the differences, then watch from the
 * list's resourceVersion with bookmarks; a 410 (as HTTP status or ERROR
 * event) means relist, any other failure re-watches from the last version
 * seen after a jittered backoff.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "k8s/client_int.h"
#include "k8s/informer.h"

#define MAX_HANDLERS 8
#define RV_MAX 128

struct kd_k8s_informer {
    struct kd_k8s_client *client;
    struct kd_k8s_informer_opts opts; /* strings below are owned copies */
    char *group, *version, *resource, *ns, *lsel, *fsel;
    struct kd_k8s_handlers handlers[MAX_HANDLERS];
    int nhandlers;
    struct kd_k8s_cache *cache;

    pthread_t thread;
    bool started;
    atomic_int stop;
    pthread_mutex_t lock; /* guards synced, rv, stats and the sleeps below */
    pthread_cond_t cond;
    bool synced;
    char rv[RV_MAX];
    struct kd_k8s_informer_stats stats;
};

static char *dup_opt(const char *s)
{
    return s != NULL && s[0] != '\0' ? kd_xstrdup(s) : NULL;
}

int kd_k8s_informer_new(struct kd_k8s_client *client, const struct kd_k8s_informer_opts *opts,
                        struct kd_k8s_informer **out, char *err)
{
    struct kd_k8s_informer *inf;
    pthread_condattr_t ca;
    if (client == NULL || opts == NULL || opts->gvr.version == NULL || opts->gvr.resource == NULL)
        return kd_seterr(err, KD_EINVAL,
                         "informer: a client and a group/version/resource are "
                         "required");
    inf = kd_xcalloc(1, sizeof(*inf));
    inf->client = client;
    inf->opts = *opts;
    inf->group = kd_xstrdup(opts->gvr.group != NULL ? opts->gvr.group : "");
    inf->version = kd_xstrdup(opts->gvr.version);
    inf->resource = kd_xstrdup(opts->gvr.resource);
    inf->ns = dup_opt(opts->ns);
    inf->lsel = dup_opt(opts->label_selector);
    inf->fsel = dup_opt(opts->field_selector);
    inf->opts.gvr = KD_K8S_GVR(inf->group, inf->version, inf->resource);
    inf->opts.ns = inf->ns;
    inf->opts.label_selector = inf->lsel;
    inf->opts.field_selector = inf->fsel;
    if (inf->opts.page_size <= 0)
        inf->opts.page_size = 100;
    if (inf->opts.watch_timeout_s <= 0)
        inf->opts.watch_timeout_s = 300;
    if (inf->opts.backoff_base_ms <= 0)
        inf->opts.backoff_base_ms = 500;
    if (inf->opts.backoff_max_ms <= 0)
        inf->opts.backoff_max_ms = 30000;
    inf->cache = kd_k8s_cache_new();
    if (opts->index_labels != NULL)
        kd_k8s_cache_index_labels(inf->cache, opts->index_labels);
    inf->opts.index_labels = NULL; /* borrowed: not kept */
    pthread_mutex_init(&inf->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&inf->cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = inf;
    return 0;
}

int kd_k8s_informer_add_handlers(struct kd_k8s_informer *inf, const struct kd_k8s_handlers *h)
{
    if (inf->started)
        return KD_ESTATE;
    if (inf->nhandlers >= MAX_HANDLERS)
        return KD_ETOOBIG;
    inf->handlers[inf->nhandlers++] = *h;
    return 0;
}

static void deliver(struct kd_k8s_informer *inf, enum kd_k8s_event_type type, json_t *old,
                    json_t *obj)
{
    for (int i = 0; i < inf->nhandlers; i++) {
        const struct kd_k8s_handlers *h = &inf->handlers[i];
        if (type == KD_K8S_ADDED && h->on_add != NULL)
            h->on_add(obj, h->ud);
        else if (type == KD_K8S_MODIFIED && h->on_update != NULL)
            h->on_update(old, obj, h->ud);
        else if (type == KD_K8S_DELETED && h->on_delete != NULL)
            h->on_delete(old != NULL ? old : obj, h->ud);
    }
}

static void on_diff(enum kd_k8s_event_type type, json_t *old, json_t *new, void *ud)
{
    deliver(ud, type, old, new);
}

static void set_rv(struct kd_k8s_informer *inf, const char *rv)
{
    if (rv == NULL || rv[0] == '\0')
        return;
    pthread_mutex_lock(&inf->lock);
    kd_strlcpy(inf->rv, rv, sizeof(inf->rv));
    pthread_mutex_unlock(&inf->lock);
}

/* Drop what the informer's users never read before it takes memory in the cache. */
static void trim(const struct kd_k8s_informer *inf, json_t *obj)
{
    if (!inf->opts.keep_managed_fields)
        json_object_del(json_object_get(obj, "metadata"), "managedFields");
}

static int on_event(enum kd_k8s_event_type type, json_t *obj, void *ud)
{
    struct kd_k8s_informer *inf = ud;
    json_t *old = NULL;
    char key[512];
    int rc = 0;
    trim(inf, obj); /* the event is ours: kd_k8s_watch parsed it for this call */
    if (type == KD_K8S_BOOKMARK) {
        pthread_mutex_lock(&inf->lock);
        inf->stats.bookmarks++;
        pthread_mutex_unlock(&inf->lock);
        set_rv(inf, kd_k8s_meta_str(obj, "resourceVersion"));
        return 0;
    }
    if (kd_k8s_obj_key(obj, key, sizeof(key)) < 0) {
        KD_WARN("watch event without a usable name ignored", "resource=%s type=%s", inf->resource,
                kd_k8s_event_type_name(type));
        return 0;
    }
    if (type == KD_K8S_DELETED) {
        if (kd_k8s_cache_delete(inf->cache, key, &old) == 0) {
            deliver(inf, KD_K8S_DELETED, old, obj);
            json_decref(old);
        }
    } else {
        rc = kd_k8s_cache_put(inf->cache, obj, &old);
        if (rc == 0)
            deliver(inf, old != NULL ? KD_K8S_MODIFIED : KD_K8S_ADDED, old, obj);
        json_decref(old);
        rc = 0;
    }
    set_rv(inf, kd_k8s_meta_str(obj, "resourceVersion"));
    pthread_mutex_lock(&inf->lock);
    inf->stats.events++;
    pthread_mutex_unlock(&inf->lock);
    return rc;
}

static int nap(struct kd_k8s_informer *inf, long ms)
{
    return kd_k8s__nap(&inf->lock, &inf->cond, &inf->stop, ms);
}

static void count_error(struct kd_k8s_informer *inf, int gone)
{
    pthread_mutex_lock(&inf->lock);
    if (gone)
        inf->stats.gone++;
    else
        inf->stats.errors++;
    pthread_mutex_unlock(&inf->lock);
}

/*
 * One list into the cache, page by page: each page is applied (and its
 * changes delivered) before the next is fetched, so a relist of 10,000
 * objects never holds more than one page of decoded objects. A 410 on a
 * continue token (its snapshot was compacted) starts the round over, at
 * most LIST_RESTARTS times. 0 or the list's error.
 */
#define LIST_RESTARTS 3
static int relist(struct kd_k8s_informer *inf)
{
    struct kd_k8s_query q = {
        .label_selector = inf->lsel, .field_selector = inf->fsel, .limit = inf->opts.page_size};
    json_t *page = NULL;
    char err[KD_ERRLEN], rv[RV_MAX] = "";
    char *cont = NULL;
    int rc = 0, restarts = 0;
    kd_k8s_cache_replace_begin(inf->cache);
    for (;;) {
        q.cont = cont;
        json_decref(page);
        page = NULL;
        rc = kd_k8s_list(inf->client, &inf->opts.gvr, inf->ns, &q, &page, NULL, err);
        if (rc == KD_EGONE && cont != NULL && restarts < LIST_RESTARTS) {
            KD_INFO("list continue token expired, relisting", "resource=%s restart=%d",
                    inf->resource, restarts + 1);
            restarts++;
            free(cont);
            cont = NULL;
            kd_k8s_cache_replace_begin(inf->cache);
            continue;
        }
        if (rc < 0) {
            KD_WARN("informer list failed", "resource=%s err=%s detail=%s", inf->resource,
                    kd_err_name(rc), kd_logq(err));
            goto out;
        }
        json_t *items = json_object_get(page, "items");
        size_t i;
        json_t *item;
        json_array_foreach(items, i, item) trim(inf, item);
        rc = kd_k8s_cache_replace_page(inf->cache, items, on_diff, inf);
        if (rc < 0) {
            KD_WARN("informer list has an item without a name", "resource=%s", inf->resource);
            goto out;
        }
        json_t *meta = json_object_get(page, "metadata");
        kd_strlcpy(rv, json_string_value(json_object_get(meta, "resourceVersion")) ?: "",
                   sizeof(rv));
        const char *next = json_string_value(json_object_get(meta, "continue"));
        if (next == NULL || next[0] == '\0')
            break;
        free(cont);
        cont = kd_xstrdup(next);
    }
    kd_k8s_cache_replace_end(inf->cache, on_diff, inf);
    pthread_mutex_lock(&inf->lock);
    kd_strlcpy(inf->rv, rv, sizeof(inf->rv));
    inf->stats.lists++;
    bool first = !inf->synced;
    inf->synced = true;
    pthread_cond_broadcast(&inf->cond);
    pthread_mutex_unlock(&inf->lock);
    if (first)
        KD_INFO("informer synced", "resource=%s objects=%zu", inf->resource,
                kd_k8s_cache_len(inf->cache));
out:
    json_decref(page);
    free(cont);
    return rc;
}

static void *informer_main(void *arg)
{
    struct kd_k8s_informer *inf = arg;
    int failures = 0;
    while (!atomic_load(&inf->stop)) {
        int rc = relist(inf);
        if (rc < 0) {
            count_error(inf, 0);
            nap(inf, kd_k8s_backoff_ms(failures++, inf->opts.backoff_base_ms,
                                       inf->opts.backoff_max_ms, 0));
            continue;
        }
        failures = 0;
        while (!atomic_load(&inf->stop)) {
            char rv[RV_MAX], err[KD_ERRLEN];
            /* Spread watch timeouts over [t, 2t) as client-go does, so that
             * many informers do not reconnect at the same moment. */
            long t = inf->opts.watch_timeout_s;
            struct kd_k8s_query q = {.label_selector = inf->lsel,
                                     .field_selector = inf->fsel,
                                     .resource_version = rv,
                                     .allow_watch_bookmarks = true,
                                     .timeout_seconds = kd_k8s_backoff_ms(0, 2 * t, 2 * t, 0)};
            pthread_mutex_lock(&inf->lock);
            kd_strlcpy(rv, inf->rv, sizeof(rv));
            inf->stats.watches++;
            pthread_mutex_unlock(&inf->lock);
            int64_t t0 = kd_mono_ms();
            rc = kd_k8s_watch(inf->client, &inf->opts.gvr, inf->ns, &q, on_event, inf, &inf->stop,
                              NULL, err);
            if (rc == KD_ECANCELED || atomic_load(&inf->stop))
                break;
            if (rc == KD_EGONE) {
                KD_INFO("watch expired, relisting", "resource=%s rv=%s", inf->resource, rv);
                count_error(inf, 1);
                break;
            }
            if (rc == 0 && kd_mono_ms() - t0 >= 1000) {
                failures = 0; /* a normal end of a watch: go on from the last version */
                continue;
            }
            if (rc < 0) {
                KD_WARN("watch failed, reconnecting", "resource=%s err=%s detail=%s", inf->resource,
                        kd_err_name(rc), kd_logq(err));
                count_error(inf, 0);
            }
            if (nap(inf, kd_k8s_backoff_ms(failures++, inf->opts.backoff_base_ms,
                                           inf->opts.backoff_max_ms, 0)))
                break;
        }
    }
    return NULL;
}

int kd_k8s_informer_start(struct kd_k8s_informer *inf)
{
    if (inf->started || atomic_load(&inf->stop))
        return KD_ESTATE; /* running, or stopped for good */
    int e = pthread_create(&inf->thread, NULL, informer_main, inf);
    if (e != 0)
        return -e;
    inf->started = true;
    return 0;
}

bool kd_k8s_informer_has_synced(struct kd_k8s_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
    bool s = inf->synced;
    pthread_mutex_unlock(&inf->lock);
    return s;
}

int kd_k8s_informer_wait_synced(struct kd_k8s_informer *inf, long timeout_ms)
{
    struct timespec ts;
    int rc = 0;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&inf->lock);
    while (!inf->synced) {
        if (pthread_cond_timedwait(&inf->cond, &inf->lock, &ts) != 0) {
            rc = inf->synced ? 0 : KD_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&inf->lock);
    return rc;
}

struct kd_k8s_cache *kd_k8s_informer_cache(struct kd_k8s_informer *inf)
{
    return inf->cache;
}

void kd_k8s_informer_resource_version(struct kd_k8s_informer *inf, char *buf, size_t len)
{
    pthread_mutex_lock(&inf->lock);
    kd_strlcpy(buf, inf->rv, len);
    pthread_mutex_unlock(&inf->lock);
}

void kd_k8s_informer_stats(struct kd_k8s_informer *inf, struct kd_k8s_informer_stats *out)
{
    pthread_mutex_lock(&inf->lock);
    *out = inf->stats;
    pthread_mutex_unlock(&inf->lock);
}

void kd_k8s_informer_stop(struct kd_k8s_informer *inf)
{
    if (!inf->started)
        return;
    pthread_mutex_lock(&inf->lock);
    atomic_store(&inf->stop, 1);
    pthread_cond_broadcast(&inf->cond);
    pthread_mutex_unlock(&inf->lock);
    pthread_join(inf->thread, NULL);
    inf->started = false;
}

void kd_k8s_informer_free(struct kd_k8s_informer *inf)
{
    if (inf == NULL)
        return;
    kd_k8s_informer_stop(inf);
    kd_k8s_cache_free(inf->cache);
    pthread_cond_destroy(&inf->cond);
    pthread_mutex_destroy(&inf->lock);
    free(inf->group);
    free(inf->version);
    free(inf->resource);
    free(inf->ns);
    free(inf->lsel);
    free(inf->fsel);
    free(inf);
}

/* ---- handlers that queue keys ---------------------------------------------- */

static void enqueue_obj(json_t *obj, void *ud)
{
    char key[512];
    if (kd_k8s_obj_key(obj, key, sizeof(key)) == 0)
        kd_k8s_queue_add(ud, key);
}

static void enqueue_update(json_t *old, json_t *obj, void *ud)
{
    (void)old;
    enqueue_obj(obj, ud);
}

struct kd_k8s_handlers kd_k8s_handlers_enqueue(struct kd_k8s_queue *q)
{
    return (struct kd_k8s_handlers){enqueue_obj, enqueue_update, enqueue_obj, q};
}

static void enqueue_owner(json_t *obj, void *ud)
{
    struct kd_k8s_owner_enqueue *o = ud;
    const char *ns = kd_k8s_meta_str(obj, "namespace");
    json_t *refs = json_object_get(json_object_get(obj, "metadata"), "ownerReferences");
    json_t *ref;
    size_t i;
    json_array_foreach(refs, i, ref)
    {
        const char *kind = json_string_value(json_object_get(ref, "kind"));
        const char *name = json_string_value(json_object_get(ref, "name"));
        if (!json_is_true(json_object_get(ref, "controller")) || kind == NULL || name == NULL ||
            strcmp(kind, o->owner_kind) != 0)
            continue;
        char *key =
            ns != NULL && ns[0] != '\0' ? kd_xasprintf("%s/%s", ns, name) : kd_xstrdup(name);
        kd_k8s_queue_add(o->queue, key);
        free(key);
    }
}

static void enqueue_owner_update(json_t *old, json_t *obj, void *ud)
{
    if (old != NULL)
        enqueue_owner(old, ud); /* the owner may have changed */
    enqueue_owner(obj, ud);
}

struct kd_k8s_handlers kd_k8s_handlers_enqueue_owner(struct kd_k8s_owner_enqueue *o)
{
    return (struct kd_k8s_handlers){enqueue_owner, enqueue_owner_update, enqueue_owner, o};
}
