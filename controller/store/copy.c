/*
 * A checked batch encoded for the metrics writer, once, in the caller's
 * thread: its rows in PostgreSQL's COPY text format (escaping, timestamps
 * from epoch milliseconds) and its spool line (JSON); and
 * sending COPY data with a client-side deadline (as kd_pg_exec does for
 * statements), so a hung server cannot block the writer for ever.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/alloc.h"
#include "core/time.h"
#include "store/store_int.h"

int kd_copy__escape(struct kd_buf *b, const char *s, size_t len)
{
    int rc = 0;
    size_t start = 0;
    for (size_t i = 0; i < len && rc == 0; i++) {
        char e = 0;
        switch (s[i]) {
        case '\\': e = '\\'; break;
        case '\n': e = 'n'; break;
        case '\r': e = 'r'; break;
        case '\t': e = 't'; break;
        default: continue;
        }
        char esc[2] = {'\\', e};
        rc = kd_buf_append(b, s + start, i - start);
        if (rc == 0)
            rc = kd_buf_append(b, esc, 2);
        start = i + 1;
    }
    if (rc == 0)
        rc = kd_buf_append(b, s + start, len - start);
    return rc;
}

int kd_copy__time(int64_t ms, char *out, size_t len)
{
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    if (ms < 0 || gmtime_r(&sec, &tm) == NULL)
        return KD_EINVAL;
    int n = snprintf(out, len, "%04d-%02d-%02d %02d:%02d:%02d.%03d+00", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
    return n > 0 && (size_t)n < len ? 0 : KD_ETOOBIG;
}

/* A key (printable ASCII, checked) as a JSON string's contents. */
static int json_key(struct kd_buf *b, const char *key)
{
    int rc = 0;
    for (const char *p = key; *p && rc == 0; p++) {
        if (*p == '"' || *p == '\\')
            rc = kd_buf_putc(b, '\\');
        if (rc == 0)
            rc = kd_buf_putc(b, *p);
    }
    return rc;
}

int kd_copy__encode(const struct kd_metric_batch *mb, int64_t now_ms, struct kd_buf *copy,
                    struct kd_buf *line)
{
    int rc = 0;
    char head[64], num[64], ts[48];
    int64_t last_ms = -1; /* the time ts holds: rows of a batch mostly share one */
    const char *kind = kd_metric_kind_name(mb->kind);
    int hn = snprintf(head, sizeof(head), "%lld\t%s\t", (long long)mb->trial_id, kind);
    /* "n" first: the spool reader takes the row count from the line's start. */
    rc = kd_buf_printf(line, "{\"n\":%zu,\"t\":%lld,\"k\":\"%s\",\"key\":\"", mb->n,
                       (long long)mb->trial_id, kind);
    if (rc == 0)
        rc = json_key(line, mb->key);
    if (rc == 0)
        rc = kd_buf_puts(line, "\",\"r\":[");
    for (size_t i = 0; i < mb->n && rc == 0; i++) {
        const struct kd_metric_row *r = &mb->rows[i];
        int64_t ms = r->reported_ms ? r->reported_ms : now_ms;
        /* One text of the row's metrics serves both encodings: the client's, or encoded here. */
        char *dumped = NULL;
        const char *m = r->raw;
        size_t mlen = r->raw_len;
        if (m == NULL) {
            if ((dumped = json_dumps(r->metrics, JSON_COMPACT)) == NULL)
                return KD_ENOMEM;
            m = dumped;
            mlen = strlen(m);
        }
        if (ms != last_ms) {
            rc = kd_copy__time(ms, ts, sizeof(ts));
            last_ms = rc == 0 ? ms : -1;
        }
        int nn = snprintf(num, sizeof(num), "%s[%lld,%lld,", i ? "," : "", (long long)r->step,
                          (long long)ms);
        if (rc == 0)
            rc = kd_buf_append(line, num, (size_t)nn);
        if (rc == 0)
            rc = kd_buf_append(line, m, mlen);
        if (rc == 0)
            rc = kd_buf_putc(line, ']');
        nn = snprintf(num, sizeof(num), "%lld\t", (long long)r->step);
        if (rc == 0)
            rc = kd_buf_append(copy, head, (size_t)hn);
        if (rc == 0)
            rc = kd_buf_append(copy, num, (size_t)nn);
        if (rc == 0)
            rc = kd_copy__escape(copy, m, mlen);
        if (rc == 0)
            rc = kd_buf_putc(copy, '\t');
        if (rc == 0)
            rc = kd_buf_append(copy, ts, strlen(ts));
        if (rc == 0)
            rc = kd_buf_putc(copy, '\t');
        if (rc == 0)
            rc = kd_copy__escape(copy, mb->key, strlen(mb->key));
        if (rc == 0)
            rc = kd_buf_putc(copy, '\n');
        free(dumped);
    }
    if (rc == 0)
        rc = kd_buf_puts(line, "]}\n");
    return rc;
}

/* Wait until the socket is ready for `events` or the deadline passes (false). */
static bool wait_sock(PGconn *c, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - kd_mono_ms();
        if (left <= 0)
            return false;
        struct pollfd pfd = {.fd = PQsocket(c), .events = events};
        int k = poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
        if (k > 0)
            return true;
        if (k < 0 && errno != EINTR)
            return false;
    }
}

/* Flush what libpq holds for the server; false on a broken connection or the deadline. */
static bool flush_out(PGconn *c, int64_t deadline)
{
    for (;;) {
        int f = PQflush(c);
        if (f == 0)
            return true;
        if (f < 0 || !wait_sock(c, POLLOUT | POLLIN, deadline))
            return false;
        if (!PQconsumeInput(c))
            return false;
    }
}

/* The final result of what was sent (an error wins over success), or NULL at the deadline. */
static PGresult *final_result(PGconn *c, int64_t deadline, bool *hung)
{
    PGresult *res = NULL, *r;
    for (;;) {
        while (!PQisBusy(c)) {
            r = PQgetResult(c);
            if (r == NULL)
                return res;
            if (res == NULL || (PQresultStatus(r) == PGRES_FATAL_ERROR &&
                                PQresultStatus(res) != PGRES_FATAL_ERROR)) {
                PQclear(res);
                res = r;
            } else {
                PQclear(r);
            }
            if (PQresultStatus(res) == PGRES_COPY_IN || PQresultStatus(res) == PGRES_COPY_OUT)
                return res; /* in COPY mode PQgetResult would answer the same for ever */
        }
        if (!wait_sock(c, POLLIN, deadline))
            break;
        if (!PQconsumeInput(c))
            continue; /* broken: PQgetResult reports it */
    }
    *hung = true;
    PQclear(res);
    return NULL;
}

PGresult *kd_pg_copy_in(PGconn *c, const char *sql, const char *data, size_t len, int timeout_ms,
                        bool *timed_out)
{
    PGresult *r = NULL;
    int64_t deadline = kd_mono_ms() + (timeout_ms > 0 ? timeout_ms : 24 * 3600 * 1000);
    *timed_out = false;
    if (PQsetnonblocking(c, 1) != 0 || !PQsendQuery(c, sql))
        goto out;
    if (!flush_out(c, deadline)) {
        *timed_out = PQstatus(c) == CONNECTION_OK;
        goto out;
    }
    r = final_result(c, deadline, timed_out);
    if (r == NULL || PQresultStatus(r) != PGRES_COPY_IN)
        goto out;
    PQclear(r);
    r = NULL;
    size_t off = 0;
    while (off < len) {
        size_t part = len - off > (1u << 20) ? (1u << 20) : len - off;
        int k = PQputCopyData(c, data + off, (int)part);
        if (k < 0)
            break;
        if (k == 0) { /* libpq's buffer is full: let the socket drain */
            if (!flush_out(c, deadline)) {
                *timed_out = PQstatus(c) == CONNECTION_OK;
                goto out;
            }
            continue;
        }
        off += part;
    }
    if (off == len && PQputCopyEnd(c, NULL) == 1 && !flush_out(c, deadline)) {
        *timed_out = PQstatus(c) == CONNECTION_OK;
        goto out;
    }
    r = final_result(c, deadline, timed_out);
out:
    if (*timed_out) {
        /* As in kd_pg_exec: cut the connection; the caller drops it. */
        shutdown(PQsocket(c), SHUT_RDWR);
        (void)PQconsumeInput(c);
        PQclear(r);
        r = NULL;
    }
    if (PQstatus(c) == CONNECTION_OK)
        (void)PQsetnonblocking(c, 0);
    return r;
}
