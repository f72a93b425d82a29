/*
 * Asynchronous collectives and gradient buckets. A progress thread, started
 * on first use, runs queued operations in order; synchronous calls go
 * through the same queue once it exists, so every rank executes the same
 * sequence. Buckets fuse consecutive gradients up to the fusion threshold
 * and start their averaging allreduce as soon as all of them are ready.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct dtrain_req {
    enum dt_kind kind;
    void *buf;
    const void *in;
    size_t count;
    enum dtrain_dtype dtype;
    enum dtrain_op op;
    int root;
    int rc;
    bool done;
    struct dtrain_req *next;
};

struct dt_grad {
    float *buf;
    size_t count;
    int bucket;
    bool ready;
};

struct dt_bucket {
    int first, last; /* gradient ids [first, last] */
    size_t count;    /* floats */
    void *fuse;      /* fusion buffer, NULL when one gradient is reduced in place */
    int nready;
    bool launched;
    struct dtrain_req req;
};

static void *progress_main(void *arg)
{
    struct dtrain *h = arg;
    pthread_mutex_lock(&h->q_lock);
    for (;;) {
        while (h->q_head == NULL && !h->q_stop)
            pthread_cond_wait(&h->q_cond, &h->q_lock);
        if (h->q_head == NULL)
            break;
        struct dtrain_req *r = h->q_head;
        h->q_head = r->next;
        if (h->q_head == NULL)
            h->q_tail = NULL;
        pthread_mutex_unlock(&h->q_lock);
        int rc = dt_run(h, r->kind, r->buf, r->in, r->count, r->dtype, r->op, r->root);
        pthread_mutex_lock(&h->q_lock);
        r->rc = rc;
        r->done = true;
        pthread_cond_broadcast(&h->q_cond);
    }
    pthread_mutex_unlock(&h->q_lock);
    return NULL;
}

static int async_start(struct dtrain *h)
{
    int rc = 0;
    pthread_mutex_lock(&h->q_lock);
    if (!h->progress_started) {
        int e = pthread_create(&h->progress, NULL, progress_main, h);
        if (e != 0)
            rc = dt_err(h, -e, "cannot start the progress thread: %s", strerror(e));
        else
            h->progress_started = true;
    }
    pthread_mutex_unlock(&h->q_lock);
    return rc;
}

void dt_async_stop(struct dtrain *h)
{
    pthread_mutex_lock(&h->q_lock);
    bool started = h->progress_started;
    h->q_stop = true;
    pthread_cond_broadcast(&h->q_cond);
    pthread_mutex_unlock(&h->q_lock);
    if (started)
        pthread_join(h->progress, NULL); /* drains the queue first */
    h->progress_started = false;
}

static void enqueue(struct dtrain *h, struct dtrain_req *r)
{
    r->done = false;
    r->next = NULL;
    pthread_mutex_lock(&h->q_lock);
    if (h->q_tail != NULL)
        h->q_tail->next = r;
    else
        h->q_head = r;
    h->q_tail = r;
    pthread_cond_broadcast(&h->q_cond);
    pthread_mutex_unlock(&h->q_lock);
}

static int wait_req(struct dtrain *h, struct dtrain_req *r)
{
    pthread_mutex_lock(&h->q_lock);
    while (!r->done)
        pthread_cond_wait(&h->q_cond, &h->q_lock);
    int rc = r->rc;
    pthread_mutex_unlock(&h->q_lock);
    return rc;
}

int dt_submit(struct dtrain *h, enum dt_kind kind, void *buf, const void *in, size_t count,
              enum dtrain_dtype dtype, enum dtrain_op op, int root)
{
    if (!h->progress_started)
        return dt_run(h, kind, buf, in, count, dtype, op, root);
    struct dtrain_req r = {
        .kind = kind, .buf = buf, .in = in, .count = count, .dtype = dtype, .op = op, .root = root};
    enqueue(h, &r);
    return wait_req(h, &r);
}

int dtrain_allreduce_async(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                           enum dtrain_op op, struct dtrain_req **req)
{
    int rc = 0;
    struct dtrain_req *r = NULL;
    if (h == NULL || req == NULL || (count > 0 && buf == NULL) || dtrain_dtype_size(dtype) == 0 ||
        (unsigned)op >= DTRAIN_OP_COUNT) {
        rc = h ? dt_err(h, DTRAIN_EINVAL,
                        "allreduce_async: bad argument (NULL req or buffer, "
                        "or unknown dtype/op)")
               : DTRAIN_EINVAL;
        goto out;
    }
    if ((rc = async_start(h)) < 0)
        goto out;
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rc = dt_err(h, DTRAIN_ENOMEM, "allreduce_async: out of memory");
        goto out;
    }
    r->kind = DT_OP_ALLREDUCE;
    r->buf = buf;
    r->count = count;
    r->dtype = dtype;
    r->op = op;
    enqueue(h, r);
    *req = r;
out:
    return rc;
}

int dtrain_wait(struct dtrain *h, struct dtrain_req *req)
{
    if (h == NULL || req == NULL)
        return DTRAIN_EINVAL;
    int rc = wait_req(h, req);
    free(req);
    return rc;
}

/* ---- gradient buckets ---------------------------------------------------- */

int dtrain_grads_register(struct dtrain *h, float *buf, size_t count, int *id)
{
    if (h == NULL || id == NULL || (count > 0 && buf == NULL))
        return h ? dt_err(h, DTRAIN_EINVAL, "grads_register: NULL buffer or id") : DTRAIN_EINVAL;
    if (h->buckets_built)
        return dt_err(h, DTRAIN_ESTATE,
                      "grads_register: gradients are already in use; register all of them "
                      "before the first grads_ready");
    if (h->ngrads == h->grads_cap) {
        int cap = h->grads_cap ? 2 * h->grads_cap : 16;
        struct dt_grad *g = realloc(h->grads, (size_t)cap * sizeof(*g));
        if (g == NULL)
            return dt_err(h, DTRAIN_ENOMEM, "grads_register: out of memory");
        h->grads = g;
        h->grads_cap = cap;
    }
    h->grads[h->ngrads] = (struct dt_grad){.buf = buf, .count = count};
    *id = h->ngrads++;
    return 0;
}

static int build_buckets(struct dtrain *h)
{
    size_t limit = h->o.fusion_threshold / sizeof(float);
    int nb = 0;
    h->buckets = calloc((size_t)(h->ngrads > 0 ? h->ngrads : 1), sizeof(*h->buckets));
    if (h->buckets == NULL)
        return dt_err(h, DTRAIN_ENOMEM, "gradient buckets: out of memory");
    for (int i = 0; i < h->ngrads; i++) {
        struct dt_bucket *b = nb > 0 ? &h->buckets[nb - 1] : NULL;
        if (b == NULL || b->count + h->grads[i].count > limit) {
            b = &h->buckets[nb++];
            b->first = i;
            b->count = 0;
        }
        b->last = i;
        b->count += h->grads[i].count;
        h->grads[i].bucket = nb - 1;
    }
    h->nbuckets = nb;
    for (int k = 0; k < nb; k++) {
        struct dt_bucket *b = &h->buckets[k];
        if (b->first == b->last && !h->o.fp16_compression)
            continue;
        b->fuse = malloc(b->count * (h->o.fp16_compression ? 2 : 4) + 1);
        if (b->fuse == NULL)
            return dt_err(h, DTRAIN_ENOMEM, "gradient buckets: out of memory (%zu floats)",
                          b->count);
    }
    h->buckets_built = true;
    return 0;
}

static void launch(struct dtrain *h, struct dt_bucket *b)
{
    struct dtrain_req *r = &b->req;
    memset(r, 0, sizeof(*r));
    r->kind = DT_OP_ALLREDUCE;
    if (b->fuse == NULL) {
        r->buf = h->grads[b->first].buf;
        r->dtype = DTRAIN_FLOAT32;
        r->op = DTRAIN_AVG;
    } else if (h->o.fp16_compression) {
        /* scale first so the float16 sum cannot overflow where the average would not */
        uint16_t *p = b->fuse;
        float inv = 1.0f / (float)h->world;
        for (int i = b->first; i <= b->last; i++) {
            dt_half_narrow_scaled(p, h->grads[i].buf, h->grads[i].count, inv, false);
            p += h->grads[i].count;
        }
        r->buf = b->fuse;
        r->dtype = DTRAIN_FLOAT16;
        r->op = DTRAIN_SUM;
    } else {
        char *p = b->fuse;
        for (int i = b->first; i <= b->last; i++) {
            if (h->grads[i].count > 0)
                memcpy(p, h->grads[i].buf, h->grads[i].count * 4);
            p += h->grads[i].count * 4;
        }
        r->buf = b->fuse;
        r->dtype = DTRAIN_FLOAT32;
        r->op = DTRAIN_AVG;
    }
    r->count = b->count;
    b->launched = true;
    enqueue(h, r);
}

static void unpack(struct dtrain *h, struct dt_bucket *b)
{
    if (b->fuse == NULL)
        return;
    if (h->o.fp16_compression) {
        const uint16_t *p = b->fuse;
        for (int i = b->first; i <= b->last; i++) {
            dt_half_widen(h->grads[i].buf, p, h->grads[i].count, false);
            p += h->grads[i].count;
        }
        return;
    }
    const char *p = b->fuse;
    for (int i = b->first; i <= b->last; i++) {
        if (h->grads[i].count > 0)
            memcpy(h->grads[i].buf, p, h->grads[i].count * 4);
        p += h->grads[i].count * 4;
    }
}

int dtrain_grads_ready(struct dtrain *h, int id)
{
    int rc = 0;
    if (h == NULL)
        return DTRAIN_EINVAL;
    if (id < 0 || id >= h->ngrads)
        return dt_err(h, DTRAIN_EINVAL, "grads_ready: gradient id %d not registered (0..%d)", id,
                      h->ngrads - 1);
    if (!h->buckets_built && (rc = build_buckets(h)) < 0)
        return rc;
    if ((rc = async_start(h)) < 0)
        return rc;
    struct dt_grad *g = &h->grads[id];
    if (g->ready)
        return 0;
    g->ready = true;
    struct dt_bucket *b = &h->buckets[g->bucket];
    if (++b->nready == b->last - b->first + 1)
        launch(h, b);
    return 0;
}

int dtrain_grads_wait(struct dtrain *h)
{
    int rc = 0;
    if (h == NULL)
        return DTRAIN_EINVAL;
    for (int i = 0; i < h->ngrads; i++) {
        if (!h->grads[i].ready && (rc = dtrain_grads_ready(h, i)) < 0)
            return rc;
    }
    for (int k = 0; k < h->nbuckets; k++) {
        struct dt_bucket *b = &h->buckets[k];
        int r = b->launched ? wait_req(h, &b->req) : 0;
        if (r == 0)
            unpack(h, b);
        else if (rc == 0)
            rc = r;
        b->launched = false;
        b->nready = 0;
    }
    for (int i = 0; i < h->ngrads; i++)
        h->grads[i].ready = false;
    return rc;
}

int dtrain_grads_nbuckets(const struct dtrain *h)
{
    return h->buckets_built ? h->nbuckets : 0;
}

void dt_grads_free(struct dtrain *h)
{
    for (int k = 0; k < h->nbuckets; k++)
        free(h->buckets[k].fuse);
    free(h->buckets);
    free(h->grads);
}
