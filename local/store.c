/*
 * The object store behind kdet-local's API server: hash tables per kind,
 * a ring of change events for watches, and an append-only JSON-lines
 * journal that is fsync'ed before a write is acknowledged and compacted
 * into a snapshot of the live objects once it grows.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#include "core/alloc.h"
#include "core/fs.h"
#include "core/buf.h"
#include "core/log.h"

#define DEFAULT_RING 20000u
#define DEFAULT_COMPACT (8u << 20)
#define MAX_RECORD (64u << 20)

struct entry {
    UT_hash_handle hh;
    char *key; /* "ns/name" ("/name" when cluster-scoped) */
    json_t *obj;
    char *line; /* its last journal record ('p' or 's'), which compaction copies */
    size_t len;
};

struct table {
    UT_hash_handle hh;
    char *gr;
    struct entry *objs;
};

struct kd_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t rv;
    struct table *tables;
    struct kd_event *ring;
    size_t ring_cap, ring_len, ring_head; /* head: index of the oldest event */
    uint64_t floor_rv;                    /* events with rv > floor_rv are all in the ring */
    char *dir;
    char *journal_path;
    int jfd;
    uint64_t jbytes;
    uint64_t snapshot_bytes;
    size_t compact_min;
    /* Background compaction: the snapshot is written without the lock while
     * new records also go to `tail`, which is appended under the lock. */
    bool background;
    bool compacting, compact_wanted, closing;
    struct kd_buf tail;
    pthread_cond_t ccv;
    pthread_t compactor;
    bool compactor_started;
};

static char *make_key(const char *ns, const char *name)
{
    return kd_xasprintf("%s/%s", ns != NULL ? ns : "", name);
}

static struct table *get_table(struct kd_store *st, const char *gr, bool create)
{
    struct table *t = NULL;
    HASH_FIND_STR(st->tables, gr, t);
    if (t == NULL && create) {
        t = kd_xcalloc(1, sizeof(*t));
        t->gr = kd_xstrdup(gr);
        HASH_ADD_KEYPTR(hh, st->tables, t->gr, strlen(t->gr), t);
    }
    return t;
}

static void ring_push(struct kd_store *st, uint64_t rv, const char *gr, enum kd_evtype type,
                      json_t *obj, json_t *prev)
{
    struct kd_event *ev;
    if (st->ring_len == st->ring_cap) {
        ev = &st->ring[st->ring_head];
        st->floor_rv = ev->rv;
        free(ev->gr);
        json_decref(ev->obj);
        json_decref(ev->prev);
        st->ring_head = (st->ring_head + 1) % st->ring_cap;
        st->ring_len--;
    }
    ev = &st->ring[(st->ring_head + st->ring_len) % st->ring_cap];
    ev->rv = rv;
    ev->gr = kd_xstrdup(gr);
    ev->type = type;
    ev->obj = json_incref(obj);
    ev->prev = prev != NULL ? json_incref(prev) : NULL;
    st->ring_len++;
}

static void set_rv(json_t *obj, uint64_t rv)
{
    json_t *md = json_object_get(obj, "metadata");
    if (!json_is_object(md)) {
        md = json_object();
        json_object_set_new(obj, "metadata", md);
    }
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)rv);
    json_object_set_new(md, "resourceVersion", json_string(buf));
}

/* ---- journal ----------------------------------------------------------------------- */

static char *record(char type, uint64_t rv, const char *gr, const char *ns, const char *name,
                    const json_t *obj)
{
    char t[2] = {type, '\0'};
    json_t *r = json_pack("{s:s,s:I,s:s,s:s,s:s,s:O?}", "t", t, "v", (json_int_t)rv, "g", gr, "n",
                          ns != NULL ? ns : "", "m", name, "o", obj);
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    if (s == NULL)
        kd_oom(0);
    size_t n = strlen(s);
    s = kd_xrealloc(s, n + 2);
    s[n] = '\n';
    s[n + 1] = '\0';
    return s;
}

/* Append a record and make it durable. The caller keeps `line`. */
static int journal_write(struct kd_store *st, const char *line, size_t n)
{
    int rc = 0;
    if (st->jfd < 0)
        goto out;
    rc = kd_write_all(st->jfd, line, n);
    if (rc == 0 && fdatasync(st->jfd) < 0)
        rc = -errno;
    if (rc == 0 && st->compacting && kd_buf_append(&st->tail, line, n) != 0) {
        KD_WARN("journal compaction tail overflow; the compaction will be dropped", "bytes=%zu",
                st->tail.len);
        st->compacting = false;
    }
    if (rc == 0)
        st->jbytes += n;
    else
        KD_ERROR("journal write failed", "path=%s err=%s", kd_logq(st->journal_path),
                 kd_logq(kd_strerror(rc)));
out:
    return rc;
}

/* The record prefix whose next byte is the record's type. */
#define TYPE_AT 6 /* {"t":"p" */

/*
 * The snapshot: a header record, then every object's last record with its type made 's'
 * (state without history). The records are the bytes the journal already holds, so
 * compaction costs a copy, not a serialisation of every object: with thousands of objects,
 * dumping them all again was the part of kdet-local's CPU per write that grew with the store.
 */
static int snapshot(struct kd_store *st, struct kd_buf *b, size_t *objects)
{
    char *line = record('h', st->rv, "", "", "", NULL);
    int rc = kd_buf_append(b, line, strlen(line));
    free(line);
    *objects = 0;
    struct table *t, *ttmp;
    HASH_ITER(hh, st->tables, t, ttmp)
    {
        struct entry *e, *etmp;
        HASH_ITER(hh, t->objs, e, etmp)
        {
            size_t at = b->len;
            if (rc == 0 && e->len > TYPE_AT && memcmp(e->line, "{\"t\":\"", TYPE_AT) == 0) {
                if ((rc = kd_buf_append(b, e->line, e->len)) == 0)
                    b->data[at + TYPE_AT] = 's';
            } else if (rc == 0) { /* not laid out as record() writes: write it anew */
                const char *slash = strchr(e->key, '/');
                char *ns = kd_xstrndup(e->key, (size_t)(slash - e->key));
                const char *rvs = json_string_value(
                    json_object_get(json_object_get(e->obj, "metadata"), "resourceVersion"));
                line = record('s', rvs != NULL ? strtoull(rvs, NULL, 10) : 0, t->gr, ns, slash + 1,
                              e->obj);
                rc = kd_buf_append(b, line, strlen(line));
                free(ns);
                free(line);
            }
            ++*objects;
        }
    }
    return rc;
}

/* Keep `line` of `len` bytes (ownership passes) as the entry's last record. */
static void entry_set_line(struct entry *e, char *line, size_t len)
{
    free(e->line);
    e->line = line;
    e->len = len;
}

static void entry_free(struct entry *e)
{
    json_decref(e->obj);
    free(e->key);
    free(e->line);
    free(e);
}

static int fsync_dir(const char *dir)
{
    int rc = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

int kd_store_compact(struct kd_store *st)
{
    int rc = 0;
    int fd = -1;
    char *tmp = NULL;
    struct kd_buf snap = KD_BUF_INIT(SIZE_MAX);
    size_t objects = 0;
    if (st->dir == NULL)
        goto out;
    tmp = kd_xasprintf("%s/journal.tmp", st->dir);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    /* A header record keeps the resourceVersion counter across compactions. */
    if ((rc = snapshot(st, &snap, &objects)) == 0)
        rc = kd_write_all(fd, snap.data, snap.len);
    uint64_t bytes = snap.len;
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    fd = -1;
    if (rc != 0)
        goto out;
    if (rename(tmp, st->journal_path) < 0) {
        rc = -errno;
        goto out;
    }
    rc = fsync_dir(st->dir);
    if (rc != 0)
        goto out;
    if (st->jfd >= 0)
        close(st->jfd);
    st->jfd = open(st->journal_path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (st->jfd < 0) {
        rc = -errno;
        goto out;
    }
    KD_INFO("journal compacted", "bytes_before=%llu bytes_after=%llu objects=%zu",
            (unsigned long long)st->jbytes, (unsigned long long)bytes, objects);
    st->jbytes = bytes;
    st->snapshot_bytes = bytes;
out:
    if (fd >= 0)
        close(fd);
    if (rc != 0 && tmp != NULL)
        unlink(tmp);
    free(tmp);
    kd_buf_free(&snap);
    return rc;
}

/* The compactor thread: copy the snapshot's bytes under the lock, write them without it. */
static void *compactor_main(void *arg)
{
    struct kd_store *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->compact_wanted && !st->closing)
            pthread_cond_wait(&st->ccv, &st->mu);
        if (st->closing)
            break;
        st->compact_wanted = false;
        struct kd_buf snap = KD_BUF_INIT(SIZE_MAX);
        size_t n = 0;
        int rc = snapshot(st, &snap, &n);
        uint64_t before = st->jbytes;
        kd_buf_init(&st->tail, 1u << 30);
        st->compacting = true;
        char *tmp = kd_xasprintf("%s/journal.tmp", st->dir);
        pthread_mutex_unlock(&st->mu);

        uint64_t bytes = snap.len;
        int fd = -1;
        if (rc == 0 && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
            rc = -errno;
        if (rc == 0)
            rc = kd_write_all(fd, snap.data, snap.len);
        kd_buf_free(&snap);
        if (rc == 0 && fsync(fd) < 0)
            rc = -errno;

        pthread_mutex_lock(&st->mu);
        if (rc == 0 && !st->compacting)
            rc = KD_ETOOBIG;
        if (rc == 0 && st->tail.len > 0) {
            rc = kd_write_all(fd, st->tail.data, st->tail.len);
            if (rc == 0 && fdatasync(fd) < 0)
                rc = -errno;
        }
        if (fd >= 0 && close(fd) < 0 && rc == 0)
            rc = -errno;
        if (rc == 0 && rename(tmp, st->journal_path) < 0)
            rc = -errno;
        if (rc == 0)
            rc = fsync_dir(st->dir);
        if (rc == 0) {
            int nfd = open(st->journal_path, O_WRONLY | O_APPEND | O_CLOEXEC);
            if (nfd < 0) {
                rc = -errno;
            } else {
                close(st->jfd);
                st->jfd = nfd;
                st->jbytes = bytes + st->tail.len;
                st->snapshot_bytes = bytes;
            }
        }
        if (rc != 0) {
            unlink(tmp);
            KD_WARN("journal compaction failed; will retry", "err=%s", kd_logq(kd_strerror(rc)));
            /* Back off: wait for as many new bytes again before the next try. */
            st->snapshot_bytes = st->jbytes;
        } else {
            KD_INFO("journal compacted", "bytes_before=%llu bytes_after=%llu objects=%zu",
                    (unsigned long long)before, (unsigned long long)st->jbytes, n);
        }
        st->compacting = false;
        kd_buf_free(&st->tail);
        free(tmp);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static void maybe_compact(struct kd_store *st)
{
    if (st->jfd < 0 || st->jbytes < st->compact_min || st->jbytes < 2 * st->snapshot_bytes)
        return;
    if (st->background) {
        if (!st->compacting && !st->compact_wanted) {
            st->compact_wanted = true;
            pthread_cond_signal(&st->ccv);
        }
        return;
    }
    int rc = kd_store_compact(st);
    if (rc != 0)
        KD_WARN("journal compaction failed; will retry", "err=%s", kd_logq(kd_strerror(rc)));
}

/* Apply one replayed record (ownership of obj passes to the store; `line` is copied). */
static void apply_record(struct kd_store *st, char type, uint64_t rv, const char *gr,
                         const char *ns, const char *name, json_t *obj, const char *line,
                         size_t len)
{
    if (rv > st->rv)
        st->rv = rv;
    struct table *t = get_table(st, gr, true);
    char *key = make_key(ns, name);
    struct entry *e = NULL;
    HASH_FIND_STR(t->objs, key, e);
    /* 's' records are the snapshot part: state without history. */
    if (type == 'p' || type == 's') {
        if (e == NULL) {
            e = kd_xcalloc(1, sizeof(*e));
            e->key = key;
            key = NULL;
            HASH_ADD_KEYPTR(hh, t->objs, e->key, strlen(e->key), e);
            if (type == 'p')
                ring_push(st, rv, gr, KD_EV_ADDED, obj, NULL);
        } else {
            if (type == 'p')
                ring_push(st, rv, gr, KD_EV_MODIFIED, obj, e->obj);
            json_decref(e->obj);
        }
        e->obj = obj;
        obj = NULL;
        entry_set_line(e, kd_xstrndup(line, len), len);
    } else if (type == 'd' && e != NULL) {
        ring_push(st, rv, gr, KD_EV_DELETED, obj != NULL ? obj : e->obj, e->obj);
        HASH_DEL(t->objs, e);
        entry_free(e);
    }
    json_decref(obj);
    free(key);
}

static int replay(struct kd_store *st, char *err)
{
    int rc = 0;
    FILE *f = fopen(st->journal_path, "r");
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    if (f == NULL) {
        rc = errno == ENOENT ? 0
                             : kd_seterr(err, -errno, "%s: %s", st->journal_path, strerror(errno));
        goto out;
    }
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        bool complete = line[n - 1] == '\n';
        json_error_t jerr;
        json_t *r = json_loadb(line, (size_t)n, 0, &jerr);
        if (r == NULL || !complete) {
            json_decref(r);
            /* Only the last record may be torn: its write was never acknowledged. */
            int c = fgetc(f);
            if (c == EOF && (!complete || n < (ssize_t)MAX_RECORD)) {
                KD_WARN("journal: dropping a torn last record", "line=%ld", lineno);
                break;
            }
            rc = kd_seterr(err, KD_ECORRUPT, "%s:%ld: damaged journal record: %s", st->journal_path,
                           lineno, jerr.text);
            goto out;
        }
        const char *t = json_string_value(json_object_get(r, "t"));
        json_int_t v = json_integer_value(json_object_get(r, "v"));
        const char *g = json_string_value(json_object_get(r, "g"));
        const char *ns = json_string_value(json_object_get(r, "n"));
        const char *m = json_string_value(json_object_get(r, "m"));
        if (t == NULL || g == NULL || ns == NULL || m == NULL || v < 0) {
            json_decref(r);
            rc = kd_seterr(err, KD_ECORRUPT, "%s:%ld: journal record lacks t/v/g/n/m",
                           st->journal_path, lineno);
            goto out;
        }
        if (t[0] == 'h') {
            if ((uint64_t)v > st->rv)
                st->rv = (uint64_t)v;
            st->floor_rv = (uint64_t)v;
        } else {
            json_t *o = json_incref(json_object_get(r, "o"));
            apply_record(st, t[0], (uint64_t)v, g, ns, m, o, line, (size_t)n);
        }
        json_decref(r);
        st->jbytes += (uint64_t)n;
    }
out:
    free(line);
    if (f != NULL)
        fclose(f);
    return rc;
}

/* ---- public ------------------------------------------------------------------------- */

int kd_local_store_open(const struct kd_store_opts *opts, struct kd_store **out, char *err)
{
    int rc = 0;
    struct kd_store *st = kd_xcalloc(1, sizeof(*st));
    *out = NULL;
    pthread_mutex_init(&st->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&st->ccv, NULL);
    st->ring_cap = opts != NULL && opts->ring_events > 0 ? opts->ring_events : DEFAULT_RING;
    st->ring = kd_xcalloc(st->ring_cap, sizeof(*st->ring));
    st->compact_min =
        opts != NULL && opts->compact_min_bytes > 0 ? opts->compact_min_bytes : DEFAULT_COMPACT;
    st->jfd = -1;
    if (opts != NULL && opts->data_dir != NULL) {
        st->dir = kd_xstrdup(opts->data_dir);
        if (mkdir(st->dir, 0700) < 0 && errno != EEXIST) {
            rc = kd_seterr(err, -errno, "data dir %s: %s", st->dir, strerror(errno));
            goto out;
        }
        st->journal_path = kd_xasprintf("%s/journal", st->dir);
        rc = replay(st, err);
        if (rc != 0)
            goto out;
        /* Start each run from a fresh snapshot: it also drops a torn tail. */
        st->snapshot_bytes = 0;
        rc = kd_store_compact(st);
        if (rc != 0) {
            kd_seterr(err, rc, "journal %s: %s", st->journal_path, kd_strerror(rc));
            goto out;
        }
    }
    /* Replayed history is served to watches that resume from a resourceVersion. */
    if (st->ring_len == 0)
        st->floor_rv = st->rv;
    if (st->dir != NULL && opts->background_compaction) {
        st->background = true;
        if (pthread_create(&st->compactor, NULL, compactor_main, st) != 0) {
            rc = kd_seterr(err, KD_EINTERNAL, "cannot start the journal compactor thread");
            goto out;
        }
        st->compactor_started = true;
    }
    *out = st;
    st = NULL;
out:
    kd_local_store_close(st);
    return rc;
}

void kd_local_store_close(struct kd_store *st)
{
    if (st == NULL)
        return;
    if (st->compactor_started) {
        pthread_mutex_lock(&st->mu);
        st->closing = true;
        pthread_cond_signal(&st->ccv);
        pthread_mutex_unlock(&st->mu);
        pthread_join(st->compactor, NULL);
    }
    kd_buf_free(&st->tail);
    pthread_cond_destroy(&st->ccv);
    struct table *t, *ttmp;
    HASH_ITER(hh, st->tables, t, ttmp)
    {
        struct entry *e, *etmp;
        HASH_ITER(hh, t->objs, e, etmp)
        {
            HASH_DEL(t->objs, e);
            entry_free(e);
        }
        HASH_DEL(st->tables, t);
        free(t->gr);
        free(t);
    }
    for (size_t i = 0; i < st->ring_len; i++) {
        struct kd_event *ev = &st->ring[(st->ring_head + i) % st->ring_cap];
        free(ev->gr);
        json_decref(ev->obj);
        json_decref(ev->prev);
    }
    free(st->ring);
    if (st->jfd >= 0)
        close(st->jfd);
    free(st->journal_path);
    free(st->dir);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
}

void kd_store_lock(struct kd_store *st)
{
    pthread_mutex_lock(&st->mu);
}

void kd_store_unlock(struct kd_store *st)
{
    pthread_mutex_unlock(&st->mu);
}

uint64_t kd_store_rv(const struct kd_store *st)
{
    return st->rv;
}

uint64_t kd_store_journal_bytes(const struct kd_store *st)
{
    return st->jbytes;
}

json_t *kd_store_get(struct kd_store *st, const char *gr, const char *ns, const char *name)
{
    struct table *t = get_table(st, gr, false);
    json_t *obj = NULL;
    if (t == NULL)
        goto out;
    char *key = make_key(ns, name);
    struct entry *e = NULL;
    HASH_FIND_STR(t->objs, key, e);
    free(key);
    if (e != NULL)
        obj = e->obj;
out:
    return obj;
}

int kd_store_put(struct kd_store *st, const char *gr, const char *ns, const char *name, json_t *obj,
                 json_t **stored)
{
    int rc = 0;
    uint64_t rv = st->rv + 1;
    set_rv(obj, rv);
    char *line = record('p', rv, gr, ns, name, obj);
    size_t n = strlen(line);
    rc = journal_write(st, line, n);
    if (rc != 0) {
        free(line);
        json_decref(obj);
        goto out;
    }
    st->rv = rv;
    struct table *t = get_table(st, gr, true);
    char *key = make_key(ns, name);
    struct entry *e = NULL;
    HASH_FIND_STR(t->objs, key, e);
    if (e == NULL) {
        e = kd_xcalloc(1, sizeof(*e));
        e->key = key;
        HASH_ADD_KEYPTR(hh, t->objs, e->key, strlen(e->key), e);
        ring_push(st, rv, gr, KD_EV_ADDED, obj, NULL);
    } else {
        free(key);
        ring_push(st, rv, gr, KD_EV_MODIFIED, obj, e->obj);
        json_decref(e->obj);
    }
    e->obj = obj;
    if (st->dir != NULL)
        entry_set_line(e, line, n);
    else
        free(line); /* no journal, no compaction */
    if (stored != NULL)
        *stored = obj;
    pthread_cond_broadcast(&st->cv);
    maybe_compact(st);
out:
    return rc;
}

int kd_store_delete(struct kd_store *st, const char *gr, const char *ns, const char *name,
                    json_t **deleted)
{
    int rc = 0;
    struct table *t = get_table(st, gr, false);
    char *key = make_key(ns, name);
    struct entry *e = NULL;
    json_t *last = NULL;
    if (t != NULL)
        HASH_FIND_STR(t->objs, key, e);
    if (e == NULL) {
        rc = KD_ENOTFOUND;
        goto out;
    }
    uint64_t rv = st->rv + 1;
    last = json_deep_copy(e->obj);
    set_rv(last, rv);
    char *line = record('d', rv, gr, ns, name, last);
    rc = journal_write(st, line, strlen(line));
    free(line);
    if (rc != 0)
        goto out;
    st->rv = rv;
    ring_push(st, rv, gr, KD_EV_DELETED, last, e->obj);
    HASH_DEL(t->objs, e);
    entry_free(e);
    if (deleted != NULL)
        *deleted = json_incref(last);
    pthread_cond_broadcast(&st->cv);
    maybe_compact(st);
out:
    json_decref(last);
    free(key);
    return rc;
}

struct sort_item {
    const char *key;
    json_t *obj;
};

static int cmp_item(const void *a, const void *b)
{
    return strcmp(((const struct sort_item *)a)->key, ((const struct sort_item *)b)->key);
}

size_t kd_store_list(struct kd_store *st, const char *gr, const char *ns, json_t ***items)
{
    *items = NULL;
    struct table *t = get_table(st, gr, false);
    size_t n = 0;
    if (t == NULL)
        return 0;
    size_t total = HASH_COUNT(t->objs);
    struct sort_item *v = kd_xcalloc(total + 1, sizeof(*v));
    size_t nslen = ns != NULL ? strlen(ns) : 0;
    struct entry *e, *etmp;
    HASH_ITER(hh, t->objs, e, etmp)
    {
        if (ns != NULL && (strncmp(e->key, ns, nslen) != 0 || e->key[nslen] != '/'))
            continue;
        v[n].key = e->key;
        v[n].obj = e->obj;
        n++;
    }
    qsort(v, n, sizeof(*v), cmp_item);
    json_t **out = kd_xcalloc(n + 1, sizeof(*out));
    for (size_t i = 0; i < n; i++)
        out[i] = v[i].obj;
    free(v);
    *items = out;
    return n;
}

size_t kd_store_kinds(struct kd_store *st, const char ***grs)
{
    size_t n = 0;
    const char **out = kd_xcalloc(HASH_COUNT(st->tables) + 1, sizeof(*out));
    struct table *t, *ttmp;
    HASH_ITER(hh, st->tables, t, ttmp)
    {
        if (HASH_COUNT(t->objs) > 0)
            out[n++] = t->gr;
    }
    *grs = out;
    return n;
}

int kd_store_next_event(struct kd_store *st, uint64_t rv, const struct kd_event **ev,
                        uint64_t *oldest)
{
    int rc = KD_EAGAIN;
    *ev = NULL;
    if (rv < st->floor_rv) {
        if (oldest != NULL)
            *oldest = st->floor_rv + 1;
        rc = KD_EGONE;
        goto out;
    }
    /* Binary search for the first event with ev.rv > rv. */
    size_t lo = 0, hi = st->ring_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->ring[(st->ring_head + mid) % st->ring_cap].rv <= rv)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < st->ring_len) {
        *ev = &st->ring[(st->ring_head + lo) % st->ring_cap];
        rc = 0;
    }
out:
    return rc;
}

void kd_store_wait(struct kd_store *st, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&st->cv, &st->mu, &ts);
}

void kd_store_broadcast(struct kd_store *st)
{
    pthread_cond_broadcast(&st->cv);
}
