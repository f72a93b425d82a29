/*
 * The controller work queue (see queue.h): one table of per-key state
 * (waiting, in process, delayed, failures), a FIFO of ready keys and a
 * min-heap of delayed ones, all under one mutex. Getters wait on a
 * condition variable with a timeout set by the earliest delayed key, so no
 * timer thread is needed.
 */
#include "k8s/queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uthash.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/time.h"

struct item {
    char *key;
    bool dirty;        /* waiting to be processed (in the FIFO, or re-queued on done) */
    bool processing;   /* a worker holds it */
    bool in_fifo;      /* linked into the FIFO */
    int64_t due_ms;    /* delayed until this kd_mono_ms; 0 when not delayed */
    size_t heap_idx;   /* position in the heap when due_ms != 0 */
    int failures;      /* for add_rate_limited */
    int64_t pace_ms;   /* not processed again before this kd_mono_ms (kd_k8s_queue_pace) */
    bool expiring;     /* in the heap only until its pacing ends, then dropped */
    struct item *next; /* FIFO link */
    UT_hash_handle hh;
};

struct kd_k8s_queue {
    pthread_mutex_t lock;
    pthread_cond_t ready; /* a key became ready, a delay changed, or shutdown */
    pthread_cond_t idle;  /* an item finished processing */
    struct item *items;   /* uthash by key */
    struct item *head, *tail;
    size_t nready;
    struct item **heap;
    size_t nheap, heapcap;
    size_t nprocessing;
    bool shutting_down;
    long base_ms, max_ms;

    pthread_t *workers;
    int nworkers;
    kd_k8s_reconcile_fn fn;
    void *ud;
};

struct kd_k8s_queue *kd_k8s_queue_new(const struct kd_k8s_queue_opts *opts)
{
    struct kd_k8s_queue *q = kd_xcalloc(1, sizeof(*q));
    pthread_condattr_t ca;
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->ready, &ca);
    pthread_cond_init(&q->idle, &ca);
    pthread_condattr_destroy(&ca);
    q->base_ms = opts != NULL && opts->base_delay_ms > 0 ? opts->base_delay_ms : 5;
    q->max_ms = opts != NULL && opts->max_delay_ms > 0 ? opts->max_delay_ms : 1000000;
    return q;
}

/* ---- heap of delayed items, ordered by due_ms ------------------------------ */

static void heap_swap(struct kd_k8s_queue *q, size_t a, size_t b)
{
    struct item *t = q->heap[a];
    q->heap[a] = q->heap[b];
    q->heap[b] = t;
    q->heap[a]->heap_idx = a;
    q->heap[b]->heap_idx = b;
}

static void heap_up(struct kd_k8s_queue *q, size_t i)
{
    while (i > 0 && q->heap[(i - 1) / 2]->due_ms > q->heap[i]->due_ms) {
        heap_swap(q, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(struct kd_k8s_queue *q, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->nheap && q->heap[l]->due_ms < q->heap[m]->due_ms)
            m = l;
        if (r < q->nheap && q->heap[r]->due_ms < q->heap[m]->due_ms)
            m = r;
        if (m == i)
            return;
        heap_swap(q, i, m);
        i = m;
    }
}

static void heap_push(struct kd_k8s_queue *q, struct item *it)
{
    if (q->nheap == q->heapcap) {
        q->heapcap = q->heapcap ? q->heapcap * 2 : 16;
        q->heap = kd_xrealloc(q->heap, q->heapcap * sizeof(*q->heap));
    }
    it->heap_idx = q->nheap;
    q->heap[q->nheap++] = it;
    heap_up(q, it->heap_idx);
}

static void heap_remove(struct kd_k8s_queue *q, struct item *it)
{
    size_t i = it->heap_idx;
    q->nheap--;
    if (i != q->nheap) {
        heap_swap(q, i, q->nheap);
        heap_down(q, i);
        heap_up(q, i);
    }
    it->due_ms = 0;
}

/* ---- items ---------------------------------------------------------------- */

static struct item *find(struct kd_k8s_queue *q, const char *key)
{
    struct item *it = NULL;
    HASH_FIND_STR(q->items, key, it);
    return it;
}

/* An item touched again no longer waits in the heap only to be dropped. */
static void claim(struct kd_k8s_queue *q, struct item *it)
{
    if (it->expiring) {
        heap_remove(q, it);
        it->expiring = false;
    }
}

static struct item *find_or_make(struct kd_k8s_queue *q, const char *key)
{
    struct item *it = find(q, key);
    if (it != NULL)
        claim(q, it);
    if (it == NULL) {
        it = kd_xcalloc(1, sizeof(*it));
        it->key = kd_xstrdup(key);
        HASH_ADD_KEYPTR(hh, q->items, it->key, strlen(it->key), it);
    }
    return it;
}

/*
 * Drop an item that holds no state any more. One kept only for its pacing
 * waits in the heap until the pacing ends and is dropped then, so that keys
 * that are never touched again (deleted objects) do not stay for good.
 */
static void maybe_drop(struct kd_k8s_queue *q, struct item *it)
{
    if (it->dirty || it->processing || it->in_fifo || it->due_ms != 0 || it->failures != 0)
        return;
    if (!q->shutting_down && it->pace_ms > kd_mono_ms()) {
        it->expiring = true;
        it->due_ms = it->pace_ms;
        heap_push(q, it);
        return;
    }
    HASH_DEL(q->items, it);
    free(it->key);
    free(it);
}

static void push_fifo(struct kd_k8s_queue *q, struct item *it)
{
    it->next = NULL;
    it->in_fifo = true;
    if (q->tail != NULL)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->nready++;
    pthread_cond_signal(&q->ready);
}

/* An item paced until later waits in the heap until then (lock held): true when it does. */
static bool pace_locked(struct kd_k8s_queue *q, struct item *it)
{
    if (it->pace_ms <= kd_mono_ms())
        return false;
    if (it->due_ms == 0) {
        it->due_ms = it->pace_ms;
        heap_push(q, it);
    } else if (it->pace_ms < it->due_ms) {
        it->due_ms = it->pace_ms;
        heap_up(q, it->heap_idx);
    }
    pthread_cond_broadcast(&q->ready); /* a getter may need a shorter timeout */
    return true;
}

/* The add of client-go's workqueue, with the lock held. */
static void add_locked(struct kd_k8s_queue *q, struct item *it)
{
    if (it->dirty)
        return;
    if (!it->processing && pace_locked(q, it))
        return;
    it->dirty = true;
    if (!it->processing)
        push_fifo(q, it);
}

/* Move delayed items that are due into the FIFO; return ms to the next one (-1: none). */
static int64_t promote_due(struct kd_k8s_queue *q)
{
    int64_t now = kd_mono_ms();
    while (q->nheap > 0 && q->heap[0]->due_ms <= now) {
        struct item *it = q->heap[0];
        heap_remove(q, it);
        if (it->expiring) {
            it->expiring = false;
            maybe_drop(q, it);
            continue;
        }
        add_locked(q, it);
    }
    return q->nheap > 0 ? q->heap[0]->due_ms - now : -1;
}

void kd_k8s_queue_add(struct kd_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    if (!q->shutting_down)
        add_locked(q, find_or_make(q, key));
    pthread_mutex_unlock(&q->lock);
}

void kd_k8s_queue_add_after(struct kd_k8s_queue *q, const char *key, long delay_ms)
{
    if (delay_ms <= 0) {
        kd_k8s_queue_add(q, key);
        return;
    }
    pthread_mutex_lock(&q->lock);
    if (q->shutting_down)
        goto out;
    struct item *it = find_or_make(q, key);
    int64_t due = kd_mono_ms() + delay_ms;
    if (it->due_ms != 0) {
        if (due < it->due_ms) {
            it->due_ms = due;
            heap_up(q, it->heap_idx);
        }
    } else {
        it->due_ms = due;
        heap_push(q, it);
    }
    pthread_cond_broadcast(&q->ready); /* a getter may need a shorter timeout */
out:
    pthread_mutex_unlock(&q->lock);
}

long kd_k8s_queue_backoff_ms(long base_ms, long max_ms, int failures, long cap_ms)
{
    long limit = cap_ms > 0 && cap_ms < max_ms ? cap_ms : max_ms;
    long delay = base_ms;
    for (int i = 0; i < failures && delay < limit; i++)
        delay *= 2;
    return delay > limit ? limit : delay;
}

void kd_k8s_queue_add_rate_limited_cap(struct kd_k8s_queue *q, const char *key, long cap_ms)
{
    pthread_mutex_lock(&q->lock);
    if (q->shutting_down) {
        pthread_mutex_unlock(&q->lock);
        return;
    }
    struct item *it = find_or_make(q, key);
    long delay = kd_k8s_queue_backoff_ms(q->base_ms, q->max_ms, it->failures, cap_ms);
    it->failures++;
    pthread_mutex_unlock(&q->lock);
    kd_k8s_queue_add_after(q, key, delay);
}

void kd_k8s_queue_add_rate_limited(struct kd_k8s_queue *q, const char *key)
{
    kd_k8s_queue_add_rate_limited_cap(q, key, 0);
}

void kd_k8s_queue_forget(struct kd_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct item *it = find(q, key);
    if (it != NULL) {
        it->failures = 0;
        maybe_drop(q, it);
    }
    pthread_mutex_unlock(&q->lock);
}

int kd_k8s_queue_num_requeues(struct kd_k8s_queue *q, const char *key)
{
    int n = 0;
    pthread_mutex_lock(&q->lock);
    struct item *it = find(q, key);
    if (it != NULL)
        n = it->failures;
    pthread_mutex_unlock(&q->lock);
    return n;
}

size_t kd_k8s_queue_tracked(struct kd_k8s_queue *q)
{
    pthread_mutex_lock(&q->lock);
    promote_due(q);
    size_t n = HASH_COUNT(q->items);
    pthread_mutex_unlock(&q->lock);
    return n;
}

size_t kd_k8s_queue_len(struct kd_k8s_queue *q)
{
    pthread_mutex_lock(&q->lock);
    promote_due(q);
    size_t n = q->nready;
    pthread_mutex_unlock(&q->lock);
    return n;
}

static void wait_ms(pthread_cond_t *cv, pthread_mutex_t *lock, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, lock, &ts);
}

int kd_k8s_queue_get(struct kd_k8s_queue *q, char **key)
{
    int rc = 0;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        int64_t next = q->shutting_down ? -1 : promote_due(q);
        if (q->head != NULL)
            break;
        if (q->shutting_down) {
            rc = KD_ECANCELED;
            goto out;
        }
        if (next < 0)
            pthread_cond_wait(&q->ready, &q->lock);
        else
            wait_ms(&q->ready, &q->lock, next + 1);
    }
    struct item *it = q->head;
    q->head = it->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->nready--;
    it->in_fifo = false;
    it->next = NULL;
    it->dirty = false;
    it->processing = true;
    q->nprocessing++;
    *key = kd_xstrdup(it->key);
out:
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void kd_k8s_queue_done(struct kd_k8s_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct item *it = find(q, key);
    if (it != NULL && it->processing) {
        it->processing = false;
        q->nprocessing--;
        if (it->dirty && pace_locked(q, it))
            it->dirty = false; /* added while in process: its turn comes once paced */
        else if (it->dirty)
            push_fifo(q, it); /* added while in process: its turn comes now */
        else
            maybe_drop(q, it);
        pthread_cond_broadcast(&q->idle);
    }
    pthread_mutex_unlock(&q->lock);
}

void kd_k8s_queue_pace(struct kd_k8s_queue *q, const char *key, long ms)
{
    pthread_mutex_lock(&q->lock);
    struct item *it = find(q, key);
    if (it != NULL && ms > 0) {
        claim(q, it);
        it->pace_ms = kd_mono_ms() + ms;
        maybe_drop(q, it); /* an idle item now waits out the new pacing */
    }
    pthread_mutex_unlock(&q->lock);
}

bool kd_k8s_queue_shutting_down(struct kd_k8s_queue *q)
{
    pthread_mutex_lock(&q->lock);
    bool s = q->shutting_down;
    pthread_mutex_unlock(&q->lock);
    return s;
}

static void *worker_main(void *arg)
{
    struct kd_k8s_queue *q = arg;
    char *key = NULL;
    while (kd_k8s_queue_get(q, &key) == 0) {
        long after = 0;
        int64_t t0 = kd_mono_ms();
        int rc = q->fn(key, &after, q->ud);
        int64_t took = kd_mono_ms() - t0;
        if (took >= KD_K8S_QUEUE_PACE_MIN_MS)
            kd_k8s_queue_pace(q, key,
                              KD_K8S_QUEUE_PACE * took < KD_K8S_QUEUE_PACE_MAX_MS
                                  ? (long)(KD_K8S_QUEUE_PACE * took)
                                  : KD_K8S_QUEUE_PACE_MAX_MS);
        if (rc < 0) {
            KD_DEBUG("reconcile failed, requeued with backoff", "key=%s err=%s cap_ms=%ld",
                     kd_logq(key), kd_err_name(rc), after);
            kd_k8s_queue_add_rate_limited_cap(q, key, after);
        } else {
            kd_k8s_queue_forget(q, key);
            if (after > 0)
                kd_k8s_queue_add_after(q, key, after);
        }
        kd_k8s_queue_done(q, key);
        free(key);
        key = NULL;
    }
    return NULL;
}

int kd_k8s_queue_start_workers(struct kd_k8s_queue *q, int n, kd_k8s_reconcile_fn fn, void *ud)
{
    int rc = 0;
    if (n < 1 || n > 256 || fn == NULL || q->workers != NULL)
        return KD_EINVAL;
    q->fn = fn;
    q->ud = ud;
    q->workers = kd_xcalloc((size_t)n, sizeof(*q->workers));
    for (int i = 0; i < n; i++) {
        int e = pthread_create(&q->workers[i], NULL, worker_main, q);
        if (e != 0) {
            rc = -e;
            break;
        }
        q->nworkers++;
    }
    return rc;
}

void kd_k8s_queue_shutdown(struct kd_k8s_queue *q, bool drain)
{
    pthread_mutex_lock(&q->lock);
    q->shutting_down = true;
    while (q->nheap > 0) {
        struct item *it = q->heap[0];
        heap_remove(q, it);
        maybe_drop(q, it);
    }
    pthread_cond_broadcast(&q->ready);
    if (drain && q->workers == NULL) {
        while (q->nprocessing > 0)
            pthread_cond_wait(&q->idle, &q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    if (drain && q->workers != NULL) {
        for (int i = 0; i < q->nworkers; i++)
            pthread_join(q->workers[i], NULL);
        free(q->workers);
        q->workers = NULL;
        q->nworkers = 0;
    }
}

void kd_k8s_queue_free(struct kd_k8s_queue *q)
{
    struct item *it, *tmp;
    if (q == NULL)
        return;
    kd_k8s_queue_shutdown(q, true);
    HASH_ITER(hh, q->items, it, tmp)
    {
        HASH_DEL(q->items, it);
        free(it->key);
        free(it);
    }
    free(q->heap);
    pthread_cond_destroy(&q->ready);
    pthread_cond_destroy(&q->idle);
    pthread_mutex_destroy(&q->lock);
    free(q);
}
