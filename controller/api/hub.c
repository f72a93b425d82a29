/*
 * The live metrics hub: every metric batch the API has stored is kept for a
 * while in a bounded ring (4096 batches, 32 MiB), and server-sent-event
 * streams read from it. A stream that falls behind the ring is told how
 * many batches it missed; the store has them all.
 */
#include "api/api_int.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/time.h"

void api_hub_init(struct api_hub *h)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cond, NULL);
    h->next_seq = h->first_seq = 1;
}

static void entry_free(struct api_hub_entry *e)
{
    free(e->ns);
    free(e->trial);
    free(e->experiment);
    free(e->json);
    memset(e, 0, sizeof(*e));
}

void api_hub_destroy(struct api_hub *h)
{
    for (size_t i = 0; i < API_HUB_SLOTS; i++)
        entry_free(&h->ring[i]);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cond);
}

void api_hub_publish(struct api_hub *h, const char *ns, const char *trial, const char *experiment,
                     const char *data)
{
    size_t len = strlen(data);
    pthread_mutex_lock(&h->mu);
    /* Make room: a full ring or too many bytes drops the oldest entries. */
    while (h->first_seq < h->next_seq &&
           (h->next_seq - h->first_seq >= API_HUB_SLOTS || h->bytes + len > API_HUB_MAX_BYTES)) {
        struct api_hub_entry *old = &h->ring[h->first_seq % API_HUB_SLOTS];
        h->bytes -= strlen(old->json);
        entry_free(old);
        h->first_seq++;
    }
    struct api_hub_entry *e = &h->ring[h->next_seq % API_HUB_SLOTS];
    e->seq = h->next_seq++;
    e->ns = kd_xstrdup(ns);
    e->trial = kd_xstrdup(trial);
    e->experiment = kd_xstrdup(experiment);
    e->json = kd_xstrdup(data);
    h->bytes += len;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
}

void api_hub_wake(struct api_hub *h)
{
    pthread_mutex_lock(&h->mu);
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
}

ssize_t api_sse_take(struct kd_buf *out, int64_t *last_write_ms, char *buf, size_t max)
{
    if (out->len == 0 && kd_mono_ms() - *last_write_ms > API_SSE_KEEPALIVE_MS) {
        int rc = kd_buf_puts(out, ": keepalive\n\n");
        (void)rc;
    }
    size_t n = out->len < max ? out->len : max;
    if (n > 0) {
        memcpy(buf, out->data, n);
        kd_buf_consume(out, n);
        *last_write_ms = kd_mono_ms();
    }
    return (ssize_t)n;
}
