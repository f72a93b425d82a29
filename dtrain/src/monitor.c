/*
 * The control channel's monitor thread: when a worker's connection to the
 * chief drops without a goodbye, the chief tells every other rank which rank
 * died, and when the chief's drops the workers know rank 0 died. Collectives
 * poll the resulting eventfd, so a peer killed with SIGKILL becomes an error
 * naming it on every rank instead of a hang.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"

static int send_frame(struct dtrain *h, int fd, int type, int arg)
{
    unsigned char f[8];
    uint32_t t = (uint32_t)type, a = (uint32_t)arg;
    for (int i = 0; i < 4; i++) {
        f[i] = (unsigned char)(t >> (24 - 8 * i));
        f[4 + i] = (unsigned char)(a >> (24 - 8 * i));
    }
    pthread_mutex_lock(&h->ctrl_lock);
    int rc = dt_write_all(fd, f, sizeof(f), kd_mono_ms() + 2000);
    pthread_mutex_unlock(&h->ctrl_lock);
    return rc;
}

/* Read one frame: 0, or DTRAIN_EPEER when the connection is gone. */
static int read_frame(int fd, int *type, int *arg)
{
    unsigned char f[8];
    int rc = dt_read_all(fd, f, sizeof(f), kd_mono_ms() + 2000);
    if (rc < 0)
        return DTRAIN_EPEER;
    uint32_t t = 0, a = 0;
    for (int i = 0; i < 4; i++) {
        t = t << 8 | f[i];
        a = a << 8 | f[4 + i];
    }
    *type = (int)t;
    *arg = (int)a;
    return 0;
}

static void mark_dead(struct dtrain *h, int rank)
{
    int expect = -1;
    if (atomic_compare_exchange_strong(&h->dead_rank, &expect, rank)) {
        uint64_t one = 1;
        ssize_t w = write(h->dead_efd, &one, sizeof(one));
        (void)w;
        if (!atomic_load(&h->stopping))
            KD_WARN("dtrain peer died", "rank=%d dead_rank=%d", h->rank, rank);
    }
}

static void *chief_loop(struct dtrain *h)
{
    int n = h->world;
    struct pollfd *p = calloc((size_t)n, sizeof(*p));
    if (p == NULL) {
        KD_ERROR("dtrain monitor: out of memory; dead peers are found by timeouts only");
        goto out;
    }
    p[0].fd = h->monitor_wake[0];
    p[0].events = POLLIN;
    for (int r = 1; r < n; r++) {
        p[r].fd = h->ctrl_fds[r];
        p[r].events = POLLIN;
    }
    for (;;) {
        int k = poll(p, (nfds_t)n, -1);
        if (k < 0 && errno != EINTR)
            break;
        if (k <= 0)
            continue;
        if (p[0].revents)
            break;
        for (int r = 1; r < n; r++) {
            if (p[r].fd < 0 || p[r].revents == 0)
                continue;
            int type = 0, arg = 0;
            if (read_frame(p[r].fd, &type, &arg) == 0 && type == DT_CTRL_BYE) {
                h->bye_seen[r] = 1;
            } else {
                if (!h->bye_seen[r]) {
                    mark_dead(h, r);
                    for (int q = 1; q < n; q++)
                        if (q != r && p[q].fd >= 0 && !h->bye_seen[q])
                            (void)send_frame(h, h->ctrl_fds[q], DT_CTRL_DEAD, r);
                }
                p[r].fd = -1;
            }
            if (h->bye_seen[r] || p[r].fd < 0) {
                p[r].fd = -1;
                pthread_mutex_lock(&h->ctrl_lock);
                h->mon_gone++;
                pthread_cond_broadcast(&h->mon_cond);
                pthread_mutex_unlock(&h->ctrl_lock);
            }
        }
    }
out:
    free(p);
    return NULL;
}

static void *worker_loop(struct dtrain *h)
{
    struct pollfd p[2] = {{.fd = h->monitor_wake[0], .events = POLLIN},
                          {.fd = h->ctrl_fd, .events = POLLIN}};
    for (;;) {
        int k = poll(p, 2, -1);
        if (k < 0 && errno != EINTR)
            break;
        if (k <= 0)
            continue;
        if (p[0].revents)
            break;
        int type = 0, arg = 0;
        if (read_frame(h->ctrl_fd, &type, &arg) < 0) {
            if (!atomic_load(&h->stopping))
                mark_dead(h, 0);
            break;
        }
        if (type == DT_CTRL_DEAD && arg > 0 && arg < h->world) {
            mark_dead(h, arg);
        } else if (type == DT_CTRL_BYE_ACK) {
            pthread_mutex_lock(&h->ctrl_lock);
            h->mon_acked = true;
            pthread_mutex_unlock(&h->ctrl_lock);
            break;
        }
    }
    pthread_mutex_lock(&h->ctrl_lock);
    h->mon_exited = true;
    pthread_cond_broadcast(&h->mon_cond);
    pthread_mutex_unlock(&h->ctrl_lock);
    return NULL;
}

static void *monitor_main(void *arg)
{
    struct dtrain *h = arg;
    return h->rank == 0 ? chief_loop(h) : worker_loop(h);
}

int dt_monitor_start(struct dtrain *h)
{
    if (pipe2(h->monitor_wake, O_CLOEXEC) < 0)
        return dt_err(h, -errno, "monitor: pipe: %s", strerror(errno));
    int rc = pthread_create(&h->monitor, NULL, monitor_main, h);
    if (rc != 0)
        return dt_err(h, -rc, "monitor: cannot start thread: %s", strerror(rc));
    h->monitor_started = true;
    return 0;
}

static void wait_until(struct dtrain *h, bool (*done)(struct dtrain *), int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&h->ctrl_lock);
    while (!done(h)) {
        if (pthread_cond_timedwait(&h->mon_cond, &h->ctrl_lock, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(&h->ctrl_lock);
}

static bool all_gone(struct dtrain *h)
{
    return h->mon_gone >= h->world - 1;
}

static bool worker_done(struct dtrain *h)
{
    return h->mon_acked || h->mon_exited;
}

int dt_monitor_shutdown(struct dtrain *h, int timeout_ms)
{
    int rc = 0;
    if (!h->monitor_started)
        return 0;
    atomic_store(&h->stopping, 1);
    if (h->rank == 0) {
        wait_until(h, all_gone, timeout_ms);
        if (!all_gone(h))
            rc = dt_err(h, DTRAIN_ETIMEDOUT, "finalize: not every rank said goodbye within %d ms",
                        timeout_ms);
        for (int r = 1; r < h->world; r++)
            if (h->bye_seen[r])
                (void)send_frame(h, h->ctrl_fds[r], DT_CTRL_BYE_ACK, 0);
    } else {
        if (send_frame(h, h->ctrl_fd, DT_CTRL_BYE, h->rank) == 0)
            wait_until(h, worker_done, timeout_ms);
    }
    char c = 1;
    ssize_t w = write(h->monitor_wake[1], &c, 1);
    (void)w;
    pthread_join(h->monitor, NULL);
    h->monitor_started = false;
    return rc;
}
