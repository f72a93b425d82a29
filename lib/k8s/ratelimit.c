/*
 * Client-side rate limits: a token bucket for requests per second with a
 * burst (as client-go's flowcontrol), the jittered exponential backoff
 * used between retries, and the interruptible wait between them.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "core/alloc.h"
#include "core/time.h"
#include "k8s/client.h"
#include "k8s/client_int.h"

struct kd_k8s_bucket {
    pthread_mutex_t lock;
    double qps;
    double burst;
    double tokens;   /* may go negative: reservations not yet due */
    int64_t last_ns; /* when tokens was last refilled */
};

struct kd_k8s_bucket *kd_k8s_bucket_new(double qps, int burst)
{
    struct kd_k8s_bucket *b = kd_xcalloc(1, sizeof(*b));
    pthread_mutex_init(&b->lock, NULL);
    b->qps = qps;
    b->burst = burst < 1 ? 1 : burst;
    b->tokens = b->burst;
    b->last_ns = kd_mono_ns();
    return b;
}

void kd_k8s_bucket_free(struct kd_k8s_bucket *b)
{
    if (b == NULL)
        return;
    pthread_mutex_destroy(&b->lock);
    free(b);
}

int64_t kd_k8s_bucket_take(struct kd_k8s_bucket *b)
{
    int64_t wait_ms = 0;
    if (b == NULL || b->qps <= 0)
        return 0;
    pthread_mutex_lock(&b->lock);
    int64_t now = kd_mono_ns();
    b->tokens += (double)(now - b->last_ns) * b->qps / 1e9;
    if (b->tokens > b->burst)
        b->tokens = b->burst;
    b->last_ns = now;
    b->tokens -= 1.0; /* reserve one; a deficit is the wait */
    if (b->tokens < 0)
        wait_ms = (int64_t)(-b->tokens * 1000.0 / b->qps + 0.999);
    pthread_mutex_unlock(&b->lock);
    if (wait_ms > 0)
        kd_sleep_ms(wait_ms);
    return wait_ms;
}

static uint64_t next_random(void)
{
    static _Thread_local uint64_t s;
    if (s == 0)
        s = (uint64_t)kd_mono_ns() ^ ((uint64_t)(uintptr_t)&s << 17) ^ 0x9E3779B97F4A7C15ull;
    s ^= s << 13; /* xorshift64: jitter needs spread, not cryptographic quality */
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

long kd_k8s_backoff_ms(int attempt, long base_ms, long max_ms, long retry_after_s)
{
    long d = base_ms > 0 ? base_ms : 1;
    for (int i = 0; i < attempt && d < max_ms; i++)
        d *= 2;
    if (d > max_ms)
        d = max_ms;
    long half = d / 2;
    long delay = half + (long)(next_random() % (uint64_t)(d - half + 1));
    if (retry_after_s > 0) {
        long ra = retry_after_s * 1000;
        if (ra > max_ms)
            ra = max_ms;
        if (delay < ra)
            delay = ra;
    }
    return delay;
}

int kd_k8s__nap(pthread_mutex_t *lock, pthread_cond_t *cond, const atomic_int *stop, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(lock);
    while (!atomic_load(stop)) {
        if (pthread_cond_timedwait(cond, lock, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(lock);
    return atomic_load(stop);
}
