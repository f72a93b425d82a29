/*
 * Rendezvous at the chief: rank 0 listens on MASTER_PORT, the others connect
 * with exponential backoff and jitter and say hello (rank, world size, run
 * id), and the chief rejects stale or conflicting workers before sending
 * everyone the peer table. A ready/go round after transport setup makes init
 * succeed or fail on all ranks together; the connections then stay open as
 * the control channel (monitor.c).
 */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

#define HELLO_MAGIC "dtrain/1"
#define HELLO_TIMEOUT_MS 5000
#define BACKOFF_START_MS 50
#define BACKOFF_MAX_MS 2000

static int send_json(int fd, json_t *j, int64_t deadline)
{
    int rc;
    char *s = json_dumps(j, JSON_COMPACT);
    if (s == NULL)
        return DTRAIN_ENOMEM;
    rc = dt_send_msg(fd, s, strlen(s), deadline);
    free(s);
    return rc;
}

static int recv_json(int fd, json_t **out, int64_t deadline, char *err, const char *who)
{
    char *s = NULL;
    int rc = dt_recv_msg(fd, &s, NULL, deadline);
    if (rc < 0) {
        rc = kd_seterr(err, rc == DTRAIN_ETIMEDOUT ? rc : DTRAIN_EPEER, "%s: %s", who,
                       rc == DTRAIN_EPEER ? "connection closed" : kd_strerror(rc));
        goto out;
    }
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (j == NULL || !json_is_object(j)) {
        json_decref(j);
        rc = kd_seterr(err, DTRAIN_EPROTO, "%s: malformed message at column %d: %s", who, je.column,
                       je.text);
        goto out;
    }
    *out = j;
out:
    free(s);
    return rc;
}

static void reject(int fd, const char *why)
{
    json_t *j = json_pack("{s:b,s:s}", "ok", 0, "error", why);
    if (j != NULL)
        (void)send_json(fd, j, kd_mono_ms() + 1000);
    json_decref(j);
}

static const char *transport_str(enum dtrain_transport t)
{
    switch (t) {
    case DTRAIN_TRANSPORT_TCP: return "tcp";
    case DTRAIN_TRANSPORT_SHM: return "shm";
    case DTRAIN_TRANSPORT_NCCL: return "nccl";
    default: return "auto";
    }
}

/* Validate one hello; on success the connection becomes ctrl_fds[rank]. */
static int chief_admit(struct dtrain *h, int fd, const struct sockaddr_in *sa, int64_t deadline)
{
    char why[512] = "", addr[64];
    json_t *j = NULL;
    int rc = 0, rank = -1;
    inet_ntop(AF_INET, &sa->sin_addr, addr, sizeof(addr));
    int64_t dl = kd_mono_ms() + HELLO_TIMEOUT_MS;
    if (dl > deadline)
        dl = deadline;
    char e[KD_ERRLEN];
    if (recv_json(fd, &j, dl, e, "hello") < 0) {
        kd_strlcpy(why, e, sizeof(why));
        goto out;
    }
    const char *magic = json_string_value(json_object_get(j, "magic"));
    const char *run_id = json_string_value(json_object_get(j, "run_id"));
    const char *host = json_string_value(json_object_get(j, "host"));
    json_t *jr = json_object_get(j, "rank"), *jw = json_object_get(j, "world_size");
    json_t *jp = json_object_get(j, "data_port"), *jpid = json_object_get(j, "pid");
    if (magic == NULL || strcmp(magic, HELLO_MAGIC) != 0) {
        snprintf(why, sizeof(why), "hello: field magic: expected \"%s\"", HELLO_MAGIC);
        goto out;
    }
    if (!json_is_integer(jr) || !json_is_integer(jw) || !json_is_integer(jp) || run_id == NULL ||
        host == NULL) {
        snprintf(why, sizeof(why),
                 "hello: fields rank, world_size, data_port, run_id and host "
                 "are required");
        goto out;
    }
    rank = (int)json_integer_value(jr);
    if (strcmp(run_id, h->run_id) != 0) {
        snprintf(why, sizeof(why),
                 "run id mismatch: rank %d has KDET_RUN_ID=%s but the chief has %s (a worker "
                 "of another attempt)",
                 rank, run_id, h->run_id);
        goto out;
    }
    if (json_integer_value(jw) != h->world) {
        snprintf(why, sizeof(why),
                 "world size mismatch: rank %d has WORLD_SIZE=%lld but the "
                 "chief has %d",
                 rank, (long long)json_integer_value(jw), h->world);
        goto out;
    }
    if (rank <= 0 || rank >= h->world) {
        snprintf(why, sizeof(why), "rank %d out of range 1..%d (rank 0 is the chief)", rank,
                 h->world - 1);
        goto out;
    }
    if (h->ctrl_fds[rank] >= 0) {
        snprintf(why, sizeof(why), "rank collision: rank %d already joined from %s pid %d", rank,
                 h->peers[rank].addr, h->peers[rank].pid);
        goto out;
    }
    h->ctrl_fds[rank] = fd;
    dt_keepalive(fd);
    kd_strlcpy(h->peers[rank].addr, addr, sizeof(h->peers[rank].addr));
    kd_strlcpy(h->peers[rank].host, host, sizeof(h->peers[rank].host));
    h->peers[rank].data_port = (int)json_integer_value(jp);
    h->peers[rank].pid = (int)json_integer_value(jpid);
    KD_DEBUG("dtrain rank joined", "rank=%d addr=%s", rank, addr);
out:
    if (why[0] != '\0') {
        rc = DTRAIN_EINVAL;
        KD_WARN("dtrain rendezvous rejected a worker", "from=%s rank=%d why=%s", addr, rank,
                kd_logq(why));
        reject(fd, why);
    }
    json_decref(j);
    return rc;
}

static int pick_transport(struct dtrain *h, char *err)
{
    bool same = true;
    for (int r = 1; r < h->world; r++)
        same = same && strcmp(h->peers[r].host, h->host) == 0;
    enum dtrain_transport t = h->o.transport;
    if (t == DTRAIN_TRANSPORT_AUTO)
        t = same ? DTRAIN_TRANSPORT_SHM : DTRAIN_TRANSPORT_TCP;
    if (t == DTRAIN_TRANSPORT_SHM && !same)
        return kd_seterr(err, DTRAIN_EINVAL,
                         "transport shm needs every rank on one host, but the "
                         "ranks run on several (use tcp or auto)");
    h->transport = t;
    return 0;
}

static json_t *peer_table(struct dtrain *h)
{
    json_t *arr = json_array(), *t = NULL;
    if (arr == NULL)
        return NULL;
    for (int r = 0; r < h->world; r++) {
        json_t *p =
            json_pack("{s:s,s:i,s:s,s:i}", "addr", r == 0 ? "" : h->peers[r].addr, "port",
                      h->peers[r].data_port, "host", h->peers[r].host, "pid", h->peers[r].pid);
        if (p == NULL || json_array_append_new(arr, p) < 0)
            goto fail;
    }
    char hex[2 * DT_NCCL_ID_BYTES + 1] = "";
    if (h->have_nccl_id) {
        for (int i = 0; i < DT_NCCL_ID_BYTES; i++)
            snprintf(hex + 2 * i, 3, "%02x", h->nccl_id[i]);
    }
    t = json_pack("{s:b,s:s,s:s,s:s,s:o}", "ok", 1, "transport", transport_str(h->transport), "shm",
                  h->shm_name, "nccl_id", hex, "peers", arr);
    return t;
fail:
    json_decref(arr);
    return NULL;
}

/* The ready/go round: every rank's transport is up, or init fails everywhere. */
static int chief_ready_round(struct dtrain *h, int setup_rc, const char *setup_err,
                             int64_t deadline, char *err)
{
    char why[KD_ERRLEN] = "";
    int rc = 0;
    if (setup_rc < 0)
        snprintf(why, sizeof(why), "rank 0: %.900s", setup_err);
    for (int r = 1; r < h->world; r++) {
        json_t *j = NULL;
        char e[KD_ERRLEN];
        if (recv_json(h->ctrl_fds[r], &j, deadline, e, "ready") < 0) {
            if (why[0] == '\0')
                snprintf(why, sizeof(why), "rank %d: %.900s", r, e);
            continue;
        }
        if (!json_is_true(json_object_get(j, "ready")) && why[0] == '\0') {
            const char *m = json_string_value(json_object_get(j, "error"));
            snprintf(why, sizeof(why), "rank %d: %.900s", r, m ? m : "transport setup failed");
        }
        json_decref(j);
    }
    if (h->transport == DTRAIN_TRANSPORT_SHM)
        dt_shm_unlink(h); /* everyone has it mapped: nothing is left behind */
    for (int r = 1; r < h->world; r++) {
        json_t *g =
            why[0] ? json_pack("{s:b,s:s}", "go", 0, "error", why) : json_pack("{s:b}", "go", 1);
        if (g != NULL)
            (void)send_json(h->ctrl_fds[r], g, deadline);
        json_decref(g);
    }
    if (why[0] != '\0')
        rc = kd_seterr(err, setup_rc < 0 ? setup_rc : DTRAIN_EPEER, "transport %s: %s",
                       transport_str(h->transport), why);
    return rc;
}

static int chief(struct dtrain *h, int64_t deadline, char *err)
{
    int lfd = -1, rc = 0, joined = 0;
    char e[KD_ERRLEN] = "";
    json_t *table = NULL;
    if ((rc = dt_listen(h->o.master_port, 128, &lfd, NULL, e)) < 0) {
        rc = kd_seterr(err, rc, "rendezvous: rank 0 cannot listen on MASTER_PORT=%d: %s",
                       h->o.master_port, e);
        goto out;
    }
    KD_INFO("dtrain rendezvous waiting", "port=%d world_size=%d", h->o.master_port, h->world);
    while (joined < h->world - 1) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        int n = poll(&p, 1, dt_left_ms(deadline) > 1000 ? 1000 : dt_left_ms(deadline));
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 && dt_left_ms(deadline) == 0) {
            char missing[256] = "";
            size_t m = 0;
            for (int r = 1; r < h->world && m + 12 < sizeof(missing); r++) {
                if (h->ctrl_fds[r] < 0)
                    m +=
                        (size_t)snprintf(missing + m, sizeof(missing) - m, "%s%d", m ? "," : "", r);
            }
            rc = kd_seterr(err, DTRAIN_ETIMEDOUT,
                           "rendezvous: timed out after %d ms with %d of %d ranks joined; "
                           "missing ranks: %s",
                           h->o.rendezvous_timeout_ms, joined + 1, h->world, missing);
            goto out;
        }
        if (n <= 0)
            continue;
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (chief_admit(h, fd, &sa, deadline) == 0)
            joined++;
        else
            close(fd);
    }
    if ((rc = pick_transport(h, err)) < 0)
        goto reject_all;
    if (h->transport == DTRAIN_TRANSPORT_SHM && (rc = dt_shm_create(h, e)) < 0) {
        rc = kd_seterr(err, rc, "transport shm: %s", e);
        goto reject_all;
    }
    if (h->transport == DTRAIN_TRANSPORT_NCCL) {
        if ((rc = dt_nccl_get_id(h, h->nccl_id, e)) < 0) {
            rc = kd_seterr(err, rc, "transport nccl: %s", e);
            goto reject_all;
        }
        h->have_nccl_id = 1;
    }
    if ((table = peer_table(h)) == NULL) {
        rc = kd_seterr(err, DTRAIN_ENOMEM, "rendezvous: out of memory");
        goto out;
    }
    for (int r = 1; r < h->world; r++) {
        if ((rc = send_json(h->ctrl_fds[r], table, deadline)) < 0) {
            rc = kd_seterr(err, DTRAIN_EPEER,
                           "rendezvous: rank %d left before the peer table "
                           "was sent",
                           r);
            goto reject_all;
        }
    }
    h->ops = h->transport == DTRAIN_TRANSPORT_SHM    ? &dt_shm_ops
             : h->transport == DTRAIN_TRANSPORT_NCCL ? &dt_nccl_ops
                                                     : &dt_tcp_ops;
    e[0] = '\0';
    int src = h->ops->setup(h);
    if (src < 0)
        kd_strlcpy(e, dtrain_errmsg(h), sizeof(e));
    rc = chief_ready_round(h, src, e, deadline, err);
    goto out;
reject_all:
    for (int r = 1; r < h->world; r++)
        if (h->ctrl_fds[r] >= 0)
            reject(h->ctrl_fds[r], err != NULL ? err : "rendezvous failed at rank 0");
out:
    json_decref(table);
    if (lfd >= 0)
        close(lfd);
    return rc;
}

static int parse_table(struct dtrain *h, json_t *j, char *err)
{
    const char *t = json_string_value(json_object_get(j, "transport"));
    const char *shm = json_string_value(json_object_get(j, "shm"));
    const char *nid = json_string_value(json_object_get(j, "nccl_id"));
    json_t *peers = json_object_get(j, "peers");
    if (t == NULL || dtrain_transport_parse(t, &h->transport) < 0 ||
        h->transport == DTRAIN_TRANSPORT_AUTO)
        return kd_seterr(err, DTRAIN_EPROTO, "peer table: field transport: bad value");
    if (!json_is_array(peers) || json_array_size(peers) != (size_t)h->world)
        return kd_seterr(err, DTRAIN_EPROTO, "peer table: field peers: expected %d entries",
                         h->world);
    for (int r = 0; r < h->world; r++) {
        json_t *p = json_array_get(peers, (size_t)r);
        const char *addr = json_string_value(json_object_get(p, "addr"));
        const char *host = json_string_value(json_object_get(p, "host"));
        if (addr == NULL || host == NULL)
            return kd_seterr(err, DTRAIN_EPROTO, "peer table: peers[%d]: addr and host required",
                             r);
        if (r != 0)
            kd_strlcpy(h->peers[r].addr, addr, sizeof(h->peers[r].addr));
        kd_strlcpy(h->peers[r].host, host, sizeof(h->peers[r].host));
        h->peers[r].data_port = (int)json_integer_value(json_object_get(p, "port"));
        h->peers[r].pid = (int)json_integer_value(json_object_get(p, "pid"));
    }
    kd_strlcpy(h->shm_name, shm ? shm : "", sizeof(h->shm_name));
    if (nid != NULL && strlen(nid) == 2 * DT_NCCL_ID_BYTES) {
        for (int i = 0; i < DT_NCCL_ID_BYTES; i++) {
            unsigned v = 0;
            if (sscanf(nid + 2 * i, "%2x", &v) != 1)
                return kd_seterr(err, DTRAIN_EPROTO, "peer table: field nccl_id: not hex");
            h->nccl_id[i] = (unsigned char)v;
        }
        h->have_nccl_id = 1;
    }
    return 0;
}

static int worker(struct dtrain *h, int64_t deadline, char *err)
{
    int rc = 0, fd = -1, attempts = 0;
    int64_t backoff = BACKOFF_START_MS;
    unsigned seed = (unsigned)getpid() ^ (unsigned)kd_mono_ns();
    char e[KD_ERRLEN] = "";
    json_t *hello = NULL, *reply = NULL, *ready = NULL, *go = NULL;
    for (;;) {
        attempts++;
        int left = dt_left_ms(deadline);
        rc = dt_connect(h->master_addr, h->o.master_port, left < 2000 ? left : 2000, &fd, e);
        if (rc == 0)
            break;
        if (dt_left_ms(deadline) == 0) {
            rc = kd_seterr(err, DTRAIN_ETIMEDOUT,
                           "rendezvous: rank %d could not reach the chief at MASTER_ADDR=%s "
                           "MASTER_PORT=%d within %d ms (%d attempts; last: %s)",
                           h->rank, h->master_addr, h->o.master_port, h->o.rendezvous_timeout_ms,
                           attempts, e);
            goto out;
        }
        /* exponential backoff with +-25% jitter, capped by the deadline */
        int64_t jit = backoff / 2 > 0 ? (int64_t)(rand_r(&seed) % (unsigned)(backoff / 2)) : 0;
        int64_t d = backoff - backoff / 4 + jit;
        if (d > dt_left_ms(deadline))
            d = dt_left_ms(deadline);
        kd_sleep_ms(d);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) == 0)
        inet_ntop(AF_INET, &sa.sin_addr, h->peers[0].addr, sizeof(h->peers[0].addr));
    hello = json_pack("{s:s,s:i,s:i,s:s,s:s,s:i,s:i,s:s}", "magic", HELLO_MAGIC, "rank", h->rank,
                      "world_size", h->world, "run_id", h->run_id, "host", h->host, "data_port",
                      h->peers[h->rank].data_port, "pid", (int)getpid(), "transport",
                      transport_str(h->o.transport));
    if (hello == NULL) {
        rc = kd_seterr(err, DTRAIN_ENOMEM, "rendezvous: out of memory");
        goto out;
    }
    if ((rc = send_json(fd, hello, deadline)) < 0) {
        rc = kd_seterr(err, DTRAIN_EPEER, "rendezvous: sending hello to the chief: %s",
                       kd_strerror(rc));
        goto out;
    }
    if ((rc = recv_json(fd, &reply, deadline, e, "waiting for the peer table")) < 0) {
        rc = kd_seterr(err, rc, "rendezvous: %s", e);
        goto out;
    }
    if (!json_is_true(json_object_get(reply, "ok"))) {
        const char *m = json_string_value(json_object_get(reply, "error"));
        rc = kd_seterr(err, DTRAIN_EINVAL, "rendezvous: rejected by the chief at %s:%d: %s",
                       h->master_addr, h->o.master_port, m ? m : "no reason given");
        goto out;
    }
    if ((rc = parse_table(h, reply, err)) < 0)
        goto out;
    h->ctrl_fd = fd;
    dt_keepalive(fd);
    fd = -1;
    h->ops = h->transport == DTRAIN_TRANSPORT_SHM    ? &dt_shm_ops
             : h->transport == DTRAIN_TRANSPORT_NCCL ? &dt_nccl_ops
                                                     : &dt_tcp_ops;
    int src = h->ops->setup(h);
    ready = src < 0 ? json_pack("{s:b,s:s}", "ready", 0, "error", dtrain_errmsg(h))
                    : json_pack("{s:b}", "ready", 1);
    if (ready == NULL || send_json(h->ctrl_fd, ready, deadline) < 0 ||
        recv_json(h->ctrl_fd, &go, deadline, e, "waiting for go") < 0) {
        rc = kd_seterr(err, DTRAIN_EPEER, "rendezvous: the chief left during transport setup%s%s",
                       e[0] ? ": " : "", e);
        goto out;
    }
    if (!json_is_true(json_object_get(go, "go"))) {
        const char *m = json_string_value(json_object_get(go, "error"));
        rc = kd_seterr(err, src < 0 ? src : DTRAIN_EPEER, "transport %s: %s",
                       transport_str(h->transport), m ? m : "setup failed");
        goto out;
    }
out:
    json_decref(hello);
    json_decref(reply);
    json_decref(ready);
    json_decref(go);
    if (fd >= 0)
        close(fd);
    return rc;
}

int dt_rendezvous(struct dtrain *h, char *err)
{
    int64_t deadline = kd_mono_ms() + h->o.rendezvous_timeout_ms;
    return h->rank == 0 ? chief(h, deadline, err) : worker(h, deadline, err);
}
