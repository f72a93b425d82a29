/*
 * A small PostgreSQL connection pool: a fixed number of slots, lazy
 * (re)connection with exponential back-off after failures, a statement
 * timeout on every connection, and the mapping of libpq errors to KD_E*.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "store/store_int.h"

struct kd_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct kd_pool_opts o;
    char *conninfo;
    PGconn **conns; /* NULL until connected */
    bool *busy;
    int64_t next_try_ms; /* monotonic; no connect attempt before this */
    int backoff_ms;
    int failures; /* connect failures in a row */
    char last_err[256];
};

int kd_pg_error(PGconn *c, const PGresult *r, const char *what, char *err)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    const char *detail = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL) : NULL;
    int code = KD_EIO;
    char cmsg[256];
    if (!msg) {
        kd_strlcpy(cmsg, c ? PQerrorMessage(c) : "no connection", sizeof(cmsg));
        cmsg[strcspn(cmsg, "\n")] = '\0';
        msg = cmsg;
    }
    /* No SQLSTATE: libpq made the error itself (connection lost, server gone). */
    if (!c || PQstatus(c) != CONNECTION_OK || !state)
        code = KD_ECONNECT;
    else if (state && strcmp(state, "57014") == 0)
        code = KD_ETIMEDOUT;
    else if (state && strcmp(state, "23505") == 0)
        code = KD_EEXIST;
    else if (state && strcmp(state, "23503") == 0)
        code = KD_ENOTFOUND;
    else if (state && (strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0))
        code = KD_EINVAL;
    else if (state && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
                       strncmp(state, "53", 2) == 0 || strncmp(state, "57P", 3) == 0))
        code = KD_EAGAIN;
    else if (state && strncmp(state, "08", 2) == 0)
        code = KD_ECONNECT;
    return kd_seterr(err, code, "%s: %s%s%s%s", what, msg, detail ? " (" : "", detail ? detail : "",
                     detail ? ")" : "");
}

/* Server notices ("relation already exists, skipping") go to the debug log. */
static void on_notice(void *arg, const char *msg)
{
    (void)arg;
    KD_DEBUG("postgres notice", "text=%s", kd_logq(msg));
}

PGresult *kd_pg_exec(PGconn *c, const char *sql, int n, const char *const *params, int timeout_ms,
                     bool *timed_out)
{
    PGresult *res = NULL, *r;
    *timed_out = false;
    if (timeout_ms <= 0)
        return PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    if (!PQsendQueryParams(c, sql, n, NULL, params, NULL, NULL, 0))
        return NULL;
    int64_t deadline = kd_mono_ms() + timeout_ms;
    for (;;) {
        while (!PQisBusy(c)) {
            r = PQgetResult(c);
            if (!r)
                return res;
            /*
             * One statement gives one result, but an error that follows it wins: the
             * implicit transaction commits only after the rows were sent, so a server that
             * dies in between answers rows and then a broken connection, and the statement
             * did not commit. (Keeping the rows lost a metrics batch when PostgreSQL was
             * killed mid-stream; the error makes the writer retry it, and the batch keys
             * make the retry safe if it did commit.)
             */
            if (!res) {
                res = r;
            } else if (PQresultStatus(r) == PGRES_FATAL_ERROR &&
                       PQresultStatus(res) != PGRES_FATAL_ERROR) {
                PQclear(res);
                res = r;
            } else {
                PQclear(r);
            }
        }
        int64_t left = deadline - kd_mono_ms();
        if (left <= 0)
            break;
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        int k = poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
        if (k < 0 && errno != EINTR)
            break;
        if (k > 0 && !PQconsumeInput(c))
            continue; /* the connection broke: PQgetResult reports it */
    }
    /*
     * No answer in time: the server or the network hangs, so the server's
     * statement_timeout cannot help. Cut the connection (a cancel request
     * would need the same hung server); the pool drops it.
     */
    *timed_out = true;
    shutdown(PQsocket(c), SHUT_RDWR);
    (void)PQconsumeInput(c);
    while (!PQisBusy(c) && (r = PQgetResult(c)) != NULL)
        PQclear(r);
    PQclear(res);
    return NULL;
}

int kd_pool_connect(const struct kd_pool_opts *o, PGconn **out, char *err)
{
    int rc = 0;
    PGconn *c = NULL;
    PGresult *r = NULL;
    *out = NULL;
    /*
     * Defaults first, then the user's conninfo (expanded from "dbname"),
     * which overrides them: a bounded connect, and TCP keepalives so a dead
     * peer is noticed (ignored on unix sockets).
     */
    const char *const keys[] = {"connect_timeout",  "keepalives_idle", "keepalives_interval",
                                "keepalives_count", "dbname",          NULL};
    const char *const vals[] = {"10", "30", "10", "3", o->conninfo, NULL};
    c = PQconnectdbParams(keys, vals, 1);
    if (!c) {
        rc = kd_seterr(err, KD_ENOMEM, "connect: out of memory");
        goto out;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        rc = kd_pg_error(c, NULL, "connect to PostgreSQL", err);
        goto out;
    }
    PQsetNoticeProcessor(c, on_notice, NULL);
    if (o->statement_timeout_ms > 0) {
        char v[32];
        const char *params[1] = {v};
        snprintf(v, sizeof(v), "%d", o->statement_timeout_ms);
        r = PQexecParams(c, "SELECT set_config('statement_timeout', $1, false)", 1, NULL, params,
                         NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            rc = kd_pg_error(c, r, "set statement_timeout", err);
            goto out;
        }
    }
    *out = c;
    c = NULL;
out:
    PQclear(r);
    if (c)
        PQfinish(c);
    return rc;
}

int kd_pool_open(const struct kd_pool_opts *o, struct kd_pool **out, char *err)
{
    struct kd_pool *p;
    *out = NULL;
    if (!o->conninfo || !o->conninfo[0])
        return kd_seterr(err, KD_EINVAL, "store: conninfo is empty");
    if (o->size < 1 || o->size > 64)
        return kd_seterr(err, KD_EINVAL, "store: pool_size %d out of range 1..64", o->size);
    p = kd_xcalloc(1, sizeof(*p));
    p->o = *o;
    p->conninfo = kd_xstrdup(o->conninfo);
    p->o.conninfo = p->conninfo;
    p->conns = kd_xcalloc((size_t)o->size, sizeof(*p->conns));
    p->busy = kd_xcalloc((size_t)o->size, sizeof(*p->busy));
    p->backoff_ms = o->backoff_min_ms;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    *out = p;
    return 0;
}

void kd_pool_close(struct kd_pool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->o.size; i++) {
        if (p->conns[i])
            PQfinish(p->conns[i]);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->conns);
    free(p->busy);
    free(p->conninfo);
    free(p);
}

static void release_slot(struct kd_pool *p, int i)
{
    pthread_mutex_lock(&p->mu);
    p->busy[i] = false;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int kd_pool_get(struct kd_pool *p, PGconn **out, char *err)
{
    int rc = 0, slot = -1;
    struct timespec dl;
    *out = NULL;
    kd_deadline_ts(CLOCK_REALTIME, p->o.wait_ms, &dl);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        /* Prefer a slot with an open connection. */
        for (int i = 0; i < p->o.size && slot < 0; i++) {
            if (!p->busy[i] && p->conns[i])
                slot = i;
        }
        for (int i = 0; i < p->o.size && slot < 0; i++) {
            if (!p->busy[i])
                slot = i;
        }
        if (slot >= 0)
            break;
        if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) == ETIMEDOUT) {
            pthread_mutex_unlock(&p->mu);
            rc = kd_seterr(err, KD_ETIMEDOUT, "store: all %d database connections busy for %d ms",
                           p->o.size, p->o.wait_ms);
            goto out;
        }
    }
    p->busy[slot] = true;
    if (p->conns[slot] && PQstatus(p->conns[slot]) != CONNECTION_OK) {
        PQfinish(p->conns[slot]);
        p->conns[slot] = NULL;
    }
    if (p->conns[slot]) {
        *out = p->conns[slot];
        pthread_mutex_unlock(&p->mu);
        goto out;
    }
    int64_t now = kd_mono_ms();
    /*
     * One failure alone is often the server ending a connection as it was made
     * (a terminated backend, a restart finishing): wait out the first, short
     * back-off if the caller's wait allows. After two in a row, fail fast.
     */
    if (now < p->next_try_ms && p->failures == 1 && p->next_try_ms - now <= p->o.wait_ms) {
        int64_t ms = p->next_try_ms - now;
        pthread_mutex_unlock(&p->mu);
        kd_sleep_ms(ms);
        pthread_mutex_lock(&p->mu);
        now = kd_mono_ms();
    }
    if (now < p->next_try_ms) {
        rc = kd_seterr(err, KD_ECONNECT, "database unreachable, next attempt in %lld ms: %s",
                       (long long)(p->next_try_ms - now), p->last_err);
        pthread_mutex_unlock(&p->mu);
        release_slot(p, slot);
        goto out;
    }
    pthread_mutex_unlock(&p->mu);

    PGconn *c = NULL;
    char cerr[KD_ERRLEN];
    rc = kd_pool_connect(&p->o, &c, cerr);
    pthread_mutex_lock(&p->mu);
    if (rc != 0) {
        bool first = p->backoff_ms == p->o.backoff_min_ms;
        kd_strlcpy(p->last_err, cerr, sizeof(p->last_err));
        p->failures++;
        p->next_try_ms = kd_mono_ms() + p->backoff_ms;
        p->backoff_ms =
            p->backoff_ms * 2 > p->o.backoff_max_ms ? p->o.backoff_max_ms : p->backoff_ms * 2;
        pthread_mutex_unlock(&p->mu);
        if (first)
            KD_WARN("database connection failed", "err=%s", kd_logq(cerr));
        kd_seterr(err, rc, "%s", cerr);
        release_slot(p, slot);
        goto out;
    }
    if (p->backoff_ms != p->o.backoff_min_ms)
        KD_INFO("database connection restored");
    p->backoff_ms = p->o.backoff_min_ms;
    p->failures = 0;
    p->next_try_ms = 0;
    p->conns[slot] = c;
    *out = c;
    pthread_mutex_unlock(&p->mu);
out:
    return rc;
}

void kd_pool_put(struct kd_pool *p, PGconn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->o.size; i++) {
        if (p->conns[i] != c)
            continue;
        /* A connection left inside a transaction or broken is not reused. */
        if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE) {
            PQfinish(c);
            p->conns[i] = NULL;
        }
        p->busy[i] = false;
        pthread_cond_signal(&p->cv);
        break;
    }
    pthread_mutex_unlock(&p->mu);
}
