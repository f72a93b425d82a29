/*
 * Write-behind metrics ingestion. Batches are checked and serialised on
 * put, queued in memory in arrival order and written by one thread, many
 * batches per statement. While the database is unreachable they stay in
 * memory up to a bound and beyond it (or as soon as a caller waits for
 * durability) go to an append-only, fsynced spool file, which is replayed
 * in order before anything newer once the database is back. Idempotency
 * keys (trial, key) make every replay and retry harmless.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "store/store_int.h"

#define MAX_DEPTH 64
#define SPOOL_NAME "metrics.spool"
#define SPOOL_READ (1u << 20)
#define CHUNK_BYTES (16u << 20) /* most JSON bytes sent in one statement */
#define STOP_WAIT_MS 5000
#define FULL_WAIT_MS 1000 /* how long a put waits for room before KD_EAGAIN */

struct qitem {
    struct qitem *next;
    uint64_t seq;
    size_t nrows;
    size_t len; /* bytes of line, including the trailing '\n' */
    char *line; /* one JSON object and '\n' */
    /* The same rows as COPY text lines, for writing from memory. */
    int64_t trial_id;
    enum kd_metric_kind kind;
    char *key;
    char *copy;
    size_t copy_len;
};

struct kd_writer {
    struct kd_store *s;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the writer waits here */
    pthread_cond_t done; /* callers waiting for durability wait here */
    struct qitem *head, *tail;
    uint64_t qbatches;
    size_t qbytes;
    uint64_t next_seq;      /* last sequence number handed out */
    uint64_t durable_seq;   /* every seq <= this is committed or spooled */
    uint64_t committed_seq; /* every seq <= this is committed */
    uint64_t spool_seq;     /* highest seq in the spool file */
    int waiters;
    bool stop;
    bool db_up;
    int64_t next_try_ms;
    int backoff_ms;
    char last_err[256];
    int solo_left;       /* after a permanent error: write this many batches one by one */
    int64_t progress_ms; /* last replay progress line */
    /* spool */
    char *path;
    int fd;
    off_t spool_size;
    off_t replay_off;
    /* stats */
    uint64_t written_batches, written_rows, dup_batches, orphan_batches, spilled_batches,
        rejected_batches;
    PGconn *conn;
};

static void qitem_free(struct qitem *q)
{
    if (!q)
        return;
    free(q->line);
    free(q->key);
    free(q->copy);
    free(q);
}

/* One multi-batch INSERT: the batches travel as one JSON array parameter. */
static const char *const INSERT_SQL =
    "WITH b AS ("
    " SELECT (x->>'t')::bigint AS trial_id, x->>'k' AS kind, x->>'key' AS batch_key,"
    "  x->'r' AS r, ord"
    " FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS a(x, ord)),"
    " f AS (SELECT DISTINCT ON (trial_id, batch_key) * FROM b ORDER BY trial_id, batch_key, ord),"
    " nb AS (INSERT INTO metric_batches (trial_id, batch_key, kind, nrows)"
    "  SELECT f.trial_id, f.batch_key, f.kind, jsonb_array_length(f.r)"
    "  FROM f JOIN trials t ON t.id = f.trial_id"
    "  ON CONFLICT DO NOTHING RETURNING trial_id, batch_key),"
    " ins AS (INSERT INTO metrics (trial_id, kind, step, metrics, reported_at, batch_key)"
    "  SELECT f.trial_id, f.kind, (e.v->>0)::bigint, e.v->2,"
    "   to_timestamp((e.v->>1)::double precision / 1000.0), f.batch_key"
    "  FROM f JOIN nb USING (trial_id, batch_key)"
    "  CROSS JOIN LATERAL jsonb_array_elements(f.r) WITH ORDINALITY AS e(v, i)"
    "  ORDER BY f.ord, e.i RETURNING 1)"
    " SELECT (SELECT count(*) FROM b), (SELECT count(*) FROM f),"
    " (SELECT count(*) FROM f JOIN trials t ON t.id = f.trial_id),"
    " (SELECT count(*) FROM nb), (SELECT count(*) FROM ins)";

/*
 * Writing from memory: one statement records the chunk's batch keys
 * (ON CONFLICT DO NOTHING) and answers, for each distinct (trial, key) in
 * order, whether its trial exists and whether the key is new; then the
 * rows of the new batches alone are COPYed into metrics in the same
 * transaction. A key that is not new is never copied, and a concurrent
 * writer of the same key waits on the key's index entry until this
 * transaction ends, so no row is stored twice.
 */
static const char *const KEYS_SQL =
    "WITH b AS ("
    " SELECT (x->>0)::bigint AS trial_id, x->>1 AS batch_key, x->>2 AS kind,"
    "  (x->>3)::integer AS nrows, ord"
    " FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS a(x, ord)),"
    " f AS (SELECT DISTINCT ON (trial_id, batch_key) * FROM b ORDER BY trial_id, batch_key, ord),"
    " nb AS (INSERT INTO metric_batches (trial_id, batch_key, kind, nrows)"
    "  SELECT f.trial_id, f.batch_key, f.kind, f.nrows"
    "  FROM f JOIN trials t ON t.id = f.trial_id ORDER BY f.ord"
    "  ON CONFLICT DO NOTHING RETURNING trial_id, batch_key)"
    " SELECT f.ord, EXISTS (SELECT 1 FROM trials t WHERE t.id = f.trial_id),"
    "  nb.batch_key IS NOT NULL"
    " FROM f LEFT JOIN nb USING (trial_id, batch_key) ORDER BY f.ord";

static const char *const COPY_SQL =
    "COPY metrics (trial_id, kind, step, metrics, reported_at, batch_key) FROM STDIN";

int kd_writer__take(size_t taken, size_t rows, size_t bytes, size_t item_rows, size_t item_bytes,
                    size_t flush_rows, size_t max_bytes, bool solo)
{
    if (taken == 0)
        return 1; /* the first batch always goes, whatever its size */
    if (solo)
        return 0;
    return rows + item_rows <= flush_rows && bytes + item_bytes <= max_bytes;
}

int kd_metric_kind_parse(const char *s, enum kd_metric_kind *out)
{
    static const char *const names[] = {"training", "validation", "profiling", NULL};
    for (int i = 0; names[i]; i++) {
        if (s && strcmp(s, names[i]) == 0) {
            *out = (enum kd_metric_kind)i;
            return 0;
        }
    }
    return KD_EINVAL;
}

const char *kd_metric_kind_name(enum kd_metric_kind k)
{
    switch (k) {
    case KD_METRIC_TRAINING: return "training";
    case KD_METRIC_VALIDATION: return "validation";
    case KD_METRIC_PROFILING: return "profiling";
    }
    return "unknown";
}

/* ---- checking and serialising a batch ----------------------------------- */

/* PostgreSQL's jsonb cannot hold U+0000: refuse it before acknowledging. */
static int check_value(const json_t *v, char *path, size_t plen, size_t used, int depth, char *err)
{
    int rc = 0;
    if (depth > MAX_DEPTH)
        return kd_seterr(err, KD_EINVAL, "%s: nested deeper than %d levels", path, MAX_DEPTH);
    if (json_is_string(v)) {
        if (memchr(json_string_value(v), '\0', json_string_length(v)))
            return kd_seterr(err, KD_EINVAL,
                             "%s: string contains a NUL character, which cannot be stored", path);
    } else if (json_is_object(v)) {
        const char *key;
        size_t klen;
        json_t *x;
        json_object_keylen_foreach((json_t *)v, key, klen, x)
        {
            if (memchr(key, '\0', klen))
                return kd_seterr(err, KD_EINVAL,
                                 "%s: a key contains a NUL character, which cannot be stored",
                                 path);
            snprintf(path + used, plen - used, ".%s", key);
            rc = check_value(x, path, plen, strlen(path), depth + 1, err);
            path[used] = '\0';
            if (rc != 0)
                return rc;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            snprintf(path + used, plen - used, "[%zu]", i);
            rc = check_value(x, path, plen, strlen(path), depth + 1, err);
            path[used] = '\0';
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* Whether check_value would pass v, without building paths (the common case, once per row). */
static bool clean(const json_t *v, int depth)
{
    if (depth > MAX_DEPTH)
        return false;
    if (json_is_string(v))
        return memchr(json_string_value(v), '\0', json_string_length(v)) == NULL;
    if (json_is_object(v)) {
        const char *key;
        size_t klen;
        json_t *x;
        json_object_keylen_foreach((json_t *)v, key, klen, x)
        {
            if (memchr(key, '\0', klen) || !clean(x, depth + 1))
                return false;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (!clean(x, depth + 1))
                return false;
        }
    }
    return true;
}

static int check_batch(const struct kd_metric_batch *b, char *err)
{
    char path[256];
    if (b->trial_id <= 0)
        return kd_seterr(err, KD_EINVAL, "trial_id: %lld is not a trial id (must be > 0)",
                         (long long)b->trial_id);
    if ((int)b->kind < KD_METRIC_TRAINING || (int)b->kind > KD_METRIC_PROFILING)
        return kd_seterr(err, KD_EINVAL, "kind: %d is not training, validation or profiling",
                         (int)b->kind);
    if (!b->key || !b->key[0])
        return kd_seterr(err, KD_EINVAL, "key: the idempotency key is empty");
    size_t klen = strlen(b->key);
    if (klen > KD_STORE_MAX_KEY)
        return kd_seterr(err, KD_EINVAL, "key: %zu bytes, at most %d", klen, KD_STORE_MAX_KEY);
    for (size_t i = 0; i < klen; i++) {
        unsigned char ch = (unsigned char)b->key[i];
        if (ch < 0x20 || ch > 0x7e)
            return kd_seterr(err, KD_EINVAL, "key: byte %zu (0x%02x) is not printable ASCII", i,
                             ch);
    }
    if (b->n == 0 || !b->rows)
        return kd_seterr(err, KD_EINVAL, "rows: a batch needs at least one row");
    if (b->n > KD_STORE_MAX_BATCH_ROWS)
        return kd_seterr(err, KD_ETOOBIG, "rows: %zu rows, at most %d per batch", b->n,
                         KD_STORE_MAX_BATCH_ROWS);
    for (size_t i = 0; i < b->n; i++) {
        const struct kd_metric_row *r = &b->rows[i];
        if (r->step < 0)
            return kd_seterr(err, KD_EINVAL, "rows[%zu].step: %lld is negative", i,
                             (long long)r->step);
        if (r->reported_ms < 0)
            return kd_seterr(err, KD_EINVAL, "rows[%zu].reported_at: before 1970", i);
        if (!json_is_object(r->metrics))
            return kd_seterr(err, KD_EINVAL, "rows[%zu].metrics: not a JSON object", i);
        if (clean(r->metrics, 0))
            continue;
        /* Something is wrong: walk again, naming the field. */
        snprintf(path, sizeof(path), "rows[%zu].metrics", i);
        int rc = check_value(r->metrics, path, sizeof(path), strlen(path), 0, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- the database side --------------------------------------------------- */

static void mark_down(struct kd_writer *w, const char *why)
{
    int64_t now = kd_mono_ms();
    if (w->db_up || !w->last_err[0])
        KD_WARN("metrics writer: database unreachable, buffering", "err=%s", kd_logq(why));
    w->db_up = false;
    kd_strlcpy(w->last_err, why, sizeof(w->last_err));
    w->next_try_ms = now + w->backoff_ms;
    w->backoff_ms = w->backoff_ms * 2 > w->s->opts.backoff_max_ms ? w->s->opts.backoff_max_ms
                                                                  : w->backoff_ms * 2;
    if (w->conn && PQstatus(w->conn) != CONNECTION_OK) {
        PQfinish(w->conn);
        w->conn = NULL;
    }
}

static int ensure_conn(struct kd_writer *w, char *err)
{
    if (w->conn && PQstatus(w->conn) == CONNECTION_OK)
        return 0;
    if (w->conn) {
        PQfinish(w->conn);
        w->conn = NULL;
    }
    return kd_pool_connect(&w->s->pool_opts, &w->conn, err);
}

/*
 * Write the batches in `json` (a JSON array text of `n` batch objects).
 * Returns 0, a transient error (KD_ECONNECT, KD_EAGAIN, KD_ETIMEDOUT) or a
 * permanent one.
 */
struct counts {
    uint64_t fresh, dups, orph, rows;
};

/* One statement of the transaction; 0 or an error in err (the connection is dropped then). */
static int tx_step(struct kd_writer *w, PGresult *r, bool hung, ExecStatusType want, int limit,
                   const char *what, char *err)
{
    int rc = 0;
    if (hung)
        rc = kd_seterr(err, KD_ETIMEDOUT, "%s: no answer from the database in %d ms", what, limit);
    else if (PQresultStatus(r) != want)
        rc = kd_pg_error(w->conn, r, what, err);
    return rc;
}

/* BEGIN a transaction that inserts metrics, and take the lock that orders such transactions. */
static int begin_locked(struct kd_writer *w, int limit, char *err)
{
    bool hung = false;
    PGresult *r = kd_pg_exec(w->conn, "BEGIN", 0, NULL, limit, &hung);
    int rc = tx_step(w, r, hung, PGRES_COMMAND_OK, limit, "write metrics: begin", err);
    PQclear(r);
    if (rc != 0)
        return rc;
    r = kd_pg_exec(w->conn, KD_STORE_METRICS_LOCK_SQL, 0, NULL, limit, &hung);
    rc = tx_step(w, r, hung, PGRES_TUPLES_OK, limit, "write metrics: lock", err);
    PQclear(r);
    return rc;
}

static int write_batches(struct kd_writer *w, const char *json, struct counts *k, char *err)
{
    int rc = 0;
    const char *params[1] = {json};
    PGresult *r = NULL;
    bool hung = false;
    int limit = w->s->opts.statement_timeout_ms;
    limit = limit > 0 ? limit + KD_STORE_CLIENT_GRACE_MS : 0;
    int64_t t0 = kd_mono_ns();
    rc = ensure_conn(w, err);
    if (rc != 0)
        goto out;
    if ((rc = begin_locked(w, limit, err)) != 0)
        goto out;
    r = kd_pg_exec(w->conn, INSERT_SQL, 1, params, limit, &hung);
    if ((rc = tx_step(w, r, hung, PGRES_TUPLES_OK, limit, "write metrics", err)) != 0)
        goto out;
    if (PQntuples(r) != 1) {
        rc = kd_seterr(err, KD_EPROTO, "write metrics: %d rows of counts", PQntuples(r));
        goto out;
    }
    uint64_t total = 0, distinct = 0, with_trial = 0, fresh = 0, nrows = 0;
    if (kd_parse_u64(PQgetvalue(r, 0, 0), &total) != 0 ||
        kd_parse_u64(PQgetvalue(r, 0, 1), &distinct) != 0 ||
        kd_parse_u64(PQgetvalue(r, 0, 2), &with_trial) != 0 ||
        kd_parse_u64(PQgetvalue(r, 0, 3), &fresh) != 0 ||
        kd_parse_u64(PQgetvalue(r, 0, 4), &nrows) != 0) {
        rc = kd_seterr(err, KD_EPROTO, "write metrics: unexpected counts");
        goto out;
    }
    PQclear(r);
    r = kd_pg_exec(w->conn, "COMMIT", 0, NULL, limit, &hung);
    if ((rc = tx_step(w, r, hung, PGRES_COMMAND_OK, limit, "write metrics: commit", err)) != 0)
        goto out;
    k->fresh = fresh;
    kd_metric_add(w->s->opts.rows_written, NULL, (double)nrows); /* rows of new batches */
    k->orph = distinct - with_trial;
    k->dups = total - fresh - k->orph;
    k->rows = nrows;
out:
    kd_metric_observe(w->s->opts.db_seconds, (const char *[]){"metrics_write"},
                      (double)(kd_mono_ns() - t0) / 1e9);
    if (rc != 0 && w->conn) {
        /* A fresh connection starts clean (a statement that hung may still commit when the
         * server wakes); the keys make the retry safe. */
        PQfinish(w->conn);
        w->conn = NULL;
    }
    PQclear(r);
    return rc;
}

/*
 * Write the n batches of `list` from memory in one transaction: their keys
 * first, then the rows of the new ones by COPY. Same results as
 * write_batches.
 */
static int write_copy(struct kd_writer *w, struct qitem *list, size_t n, struct counts *k,
                      char *err)
{
    int rc = 0;
    PGresult *r = NULL;
    json_t *keys = json_array();
    char *kt = NULL;
    bool *fresh = kd_xcalloc(n ? n : 1, sizeof(*fresh));
    struct kd_buf data = KD_BUF_INIT(4 * ((size_t)CHUNK_BYTES + KD_STORE_MAX_BATCH_BYTES));
    uint64_t distinct = 0, with_trial = 0, nfresh = 0, nrows = 0;
    bool hung = false;
    int limit = w->s->opts.statement_timeout_ms;
    limit = limit > 0 ? limit + KD_STORE_CLIENT_GRACE_MS : 0;
    int64_t t0 = kd_mono_ns();
    rc = ensure_conn(w, err);
    if (rc != 0)
        goto out;
    size_t i = 0;
    for (struct qitem *q = list; q && i < n; q = q->next, i++)
        json_array_append_new(keys, json_pack("[IssI]", (json_int_t)q->trial_id, q->key,
                                              kd_metric_kind_name(q->kind), (json_int_t)q->nrows));
    kt = json_dumps(keys, JSON_COMPACT);
    if (!kt) {
        rc = kd_seterr(err, KD_ENOMEM, "write metrics: cannot serialise the keys");
        goto out;
    }
    if ((rc = begin_locked(w, limit, err)) != 0)
        goto out;
    const char *params[1] = {kt};
    r = kd_pg_exec(w->conn, KEYS_SQL, 1, params, limit, &hung);
    if ((rc = tx_step(w, r, hung, PGRES_TUPLES_OK, limit, "write metrics: keys", err)) != 0)
        goto out;
    for (int row = 0; row < PQntuples(r); row++) {
        uint64_t ord = 0;
        if (kd_parse_u64(PQgetvalue(r, row, 0), &ord) != 0 || ord < 1 || ord > n) {
            rc = kd_seterr(err, KD_EPROTO, "write metrics: unexpected batch number");
            goto out;
        }
        distinct++;
        if (PQgetvalue(r, row, 1)[0] == 't')
            with_trial++;
        if (PQgetvalue(r, row, 2)[0] == 't')
            fresh[ord - 1] = true;
    }
    PQclear(r);
    r = NULL;
    i = 0;
    for (struct qitem *q = list; q && i < n && rc == 0; q = q->next, i++) {
        if (fresh[i]) {
            nfresh++;
            nrows += q->nrows;
            rc = kd_buf_append(&data, q->copy, q->copy_len);
        }
    }
    if (rc != 0) {
        rc = kd_seterr(err, rc, "write metrics: cannot build the COPY data");
        goto out;
    }
    if (data.len > 0) {
        r = kd_pg_copy_in(w->conn, COPY_SQL, data.data, data.len, limit, &hung);
        if ((rc = tx_step(w, r, hung, PGRES_COMMAND_OK, limit, "write metrics: copy", err)) != 0)
            goto out;
        PQclear(r);
    }
    r = kd_pg_exec(w->conn, "COMMIT", 0, NULL, limit, &hung);
    if ((rc = tx_step(w, r, hung, PGRES_COMMAND_OK, limit, "write metrics: commit", err)) != 0)
        goto out;
    k->fresh = nfresh;
    k->orph = distinct - with_trial;
    k->dups = n - nfresh - k->orph;
    k->rows = nrows;
    kd_metric_add(w->s->opts.rows_written, NULL, (double)nrows);
out:
    kd_metric_observe(w->s->opts.db_seconds, (const char *[]){"metrics_write"},
                      (double)(kd_mono_ns() - t0) / 1e9);
    if (rc != 0 && w->conn) {
        /* The transaction failed somewhere: a fresh connection starts clean. The keys make a
         * retry safe even if the commit happened and only its answer was lost. */
        PQfinish(w->conn);
        w->conn = NULL;
    }
    PQclear(r);
    kd_buf_free(&data);
    free(fresh);
    free(kt);
    json_decref(keys);
    return rc;
}

static bool transient(int rc)
{
    return rc == KD_ECONNECT || rc == KD_EAGAIN || rc == KD_ETIMEDOUT;
}

/* ---- the spool ------------------------------------------------------------ */

static int spool_append(struct kd_writer *w, struct qitem *list, char *err)
{
    int rc = 0;
    off_t start = w->spool_size, pos = start;
    for (struct qitem *q = list; q; q = q->next) {
        size_t off = 0;
        while (off < q->len) {
            ssize_t k = pwrite(w->fd, q->line + off, q->len - off, pos);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = kd_seterr(err, -errno, "write %s: %s", w->path, strerror(errno));
                goto out;
            }
            off += (size_t)k;
            pos += k;
        }
    }
    if (fdatasync(w->fd) != 0) {
        rc = kd_seterr(err, -errno, "fsync %s: %s", w->path, strerror(errno));
        goto out;
    }
    w->spool_size = pos;
out:
    if (rc != 0 && ftruncate(w->fd, start) != 0)
        KD_ERROR("metrics spool: cannot cut back a failed append", "path=%s", kd_logq(w->path));
    return rc;
}

/*
 * Move the whole memory queue to the spool. Called with mu held; drops it
 * during the I/O. Batches put meanwhile stay in memory (they are newer).
 */
static void spill(struct kd_writer *w)
{
    char err[KD_ERRLEN];
    struct qitem *list = w->head, *last = w->tail;
    uint64_t n = w->qbatches;
    size_t bytes = w->qbytes;
    if (!list || w->fd < 0)
        return;
    if ((size_t)w->spool_size + bytes > w->s->opts.spool_limit)
        return;
    w->head = w->tail = NULL;
    w->qbatches = 0;
    w->qbytes = 0;
    pthread_mutex_unlock(&w->mu);
    int rc = spool_append(w, list, err);
    pthread_mutex_lock(&w->mu);
    if (rc != 0) {
        KD_ERROR("metrics spool: append failed; batches stay in memory", "err=%s", kd_logq(err));
        last->next = w->head;
        w->head = list;
        if (!w->tail)
            w->tail = last;
        w->qbatches += n;
        w->qbytes += bytes;
        return;
    }
    if (w->spilled_batches == 0 || w->spool_size == (off_t)bytes)
        KD_INFO("metrics spilled to disk", "path=%s batches=%llu spool_bytes=%lld",
                kd_logq(w->path), (unsigned long long)n, (long long)w->spool_size);
    w->spilled_batches += n;
    w->spool_seq = last->seq;
    if (last->seq > w->durable_seq)
        w->durable_seq = last->seq;
    while (list) {
        struct qitem *nx = list->next;
        qitem_free(list);
        list = nx;
    }
    pthread_cond_broadcast(&w->done);
}

/*
 * Read complete lines from the spool at replay_off into `chunk` (a JSON
 * array text) up to the row and byte limits. *consumed gets the bytes used.
 * A torn last line (a crash during an append that was never acknowledged)
 * is cut off.
 */
/* The row count at the start of a spool line ({"n":123,...}); 1 when absent. */
static size_t line_rows(const char *p, size_t len)
{
    size_t n = 0, i = 5;
    if (len < 7 || memcmp(p, "{\"n\":", 5) != 0)
        return 1;
    while (i < len && p[i] >= '0' && p[i] <= '9' && n < 1000000)
        n = n * 10 + (size_t)(p[i++] - '0');
    return n ? n : 1;
}

static int spool_chunk(struct kd_writer *w, struct kd_buf *chunk, off_t *consumed, size_t *nb,
                       char *err)
{
    int rc = 0;
    char *buf = NULL;
    size_t cap = SPOOL_READ, have = 0, used = 0, batches = 0, rows = 0;
    off_t off = w->replay_off;
    *consumed = 0;
    *nb = 0;
    buf = kd_xmalloc(cap);
    rc = kd_buf_putc(chunk, '[');
    if (rc != 0)
        goto out;
    for (;;) {
        if (have == cap || (used > 0 && have - used < SPOOL_READ / 2)) {
            if (used > 0) {
                memmove(buf, buf + used, have - used);
                have -= used;
                used = 0;
            } else if (cap < 2 * KD_STORE_MAX_BATCH_BYTES + SPOOL_READ) {
                cap *= 2;
                buf = kd_xrealloc(buf, cap);
            } else {
                rc = kd_seterr(err, KD_ECORRUPT, "%s: a line over %zu bytes at offset %lld",
                               w->path, cap, (long long)off);
                goto out;
            }
        }
        ssize_t k = pread(w->fd, buf + have, cap - have, off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = kd_seterr(err, -errno, "read %s: %s", w->path, strerror(errno));
            goto out;
        }
        if (k == 0) {
            if (have > used) {
                KD_WARN("metrics spool: cutting a torn last line", "path=%s offset=%lld bytes=%zu",
                        kd_logq(w->path), (long long)(w->replay_off + *consumed), have - used);
                if (ftruncate(w->fd, w->replay_off + *consumed) == 0)
                    w->spool_size = w->replay_off + *consumed;
            }
            break;
        }
        off += k;
        have += (size_t)k;
        char *nl;
        while ((nl = memchr(buf + used, '\n', have - used)) != NULL) {
            size_t llen = (size_t)(nl - (buf + used));
            size_t lrows = line_rows(buf + used, llen);
            if (batches > 0 &&
                (chunk->len + llen > CHUNK_BYTES || rows + lrows > (size_t)w->s->opts.flush_rows))
                goto done;
            if (batches > 0)
                rc = kd_buf_putc(chunk, ',');
            if (rc == 0)
                rc = kd_buf_append(chunk, buf + used, llen);
            if (rc != 0)
                goto out;
            batches++;
            *nb = batches;
            rows += lrows;
            used += llen + 1;
            *consumed += (off_t)(llen + 1);
            if (w->solo_left > 0)
                goto done;
        }
    }
done:
    rc = kd_buf_putc(chunk, ']');
out:
    free(buf);
    return rc;
}

/* ---- the writer thread ---------------------------------------------------- */

static void timed_wait(struct kd_writer *w, int64_t ms)
{
    struct timespec ts;
    pthread_cond_timedwait(&w->wake, &w->mu, kd_deadline_ts(CLOCK_REALTIME, ms, &ts));
}

static void account(struct kd_writer *w, const struct counts *k)
{
    w->written_batches += k->fresh;
    w->dup_batches += k->dups;
    w->orphan_batches += k->orph;
    w->written_rows += k->rows;
    if (k->dups)
        KD_DEBUG("metrics: retried batches skipped", "batches=%llu", (unsigned long long)k->dups);
    if (k->orph)
        KD_WARN("metrics for deleted trials skipped", "batches=%llu", (unsigned long long)k->orph);
}

/* Replay one chunk of the spool. Called with mu held; drops it for the I/O. */
static void replay_step(struct kd_writer *w)
{
    char err[KD_ERRLEN];
    struct kd_buf chunk = KD_BUF_INIT(CHUNK_BYTES + 2 * KD_STORE_MAX_BATCH_BYTES + 16);
    struct counts k = {0};
    off_t consumed = 0;
    size_t nb = 0;
    pthread_mutex_unlock(&w->mu);
    int rc = spool_chunk(w, &chunk, &consumed, &nb, err);
    if (rc == 0 && consumed > 0)
        rc = write_batches(w, kd_buf_str(&chunk), &k, err);
    pthread_mutex_lock(&w->mu);
    kd_buf_free(&chunk);
    if (rc == 0 && kd_mono_ms() - w->progress_ms >= 5000) {
        w->progress_ms = kd_mono_ms();
        KD_INFO("replaying metrics spool", "path=%s done_bytes=%lld total_bytes=%lld",
                kd_logq(w->path), (long long)(w->replay_off + consumed), (long long)w->spool_size);
    }
    if (rc != 0 && transient(rc)) {
        mark_down(w, err);
        return;
    }
    if (rc != 0 && nb > 1 && w->solo_left == 0) {
        KD_WARN("metrics spool: a chunk was refused; writing its batches one by one", "err=%s",
                kd_logq(err));
        w->solo_left = (int)nb;
        return;
    }
    if (rc != 0) {
        /* Checked before it was acknowledged, so this is a bug or a corrupt spool. */
        KD_ERROR("metrics batch refused by the database and dropped", "err=%s", kd_logq(err));
        w->rejected_batches++;
        if (consumed == 0) /* unreadable spool: give it up rather than loop */
            consumed = w->spool_size - w->replay_off;
    } else {
        account(w, &k);
        w->db_up = true;
        w->backoff_ms = w->s->opts.backoff_min_ms;
        kd_sketcher__poke(w->s->sketcher);
    }
    if (w->solo_left > 0)
        w->solo_left--;
    w->replay_off += consumed;
    if (w->replay_off >= w->spool_size) {
        if (ftruncate(w->fd, 0) != 0)
            KD_ERROR("metrics spool: cannot truncate", "path=%s", kd_logq(w->path));
        KD_INFO("metrics spool replayed", "path=%s bytes=%lld written_batches=%llu",
                kd_logq(w->path), (long long)w->spool_size, (unsigned long long)w->written_batches);
        w->spool_size = 0;
        w->replay_off = 0;
        if (w->spool_seq > w->committed_seq)
            w->committed_seq = w->spool_seq;
        pthread_cond_broadcast(&w->done);
    }
}

/* Write a chunk of the memory queue. Called with mu held; drops it for the I/O. */
static void write_step(struct kd_writer *w)
{
    char err[KD_ERRLEN];
    struct qitem *list = w->head, *last = NULL;
    uint64_t n = 0;
    struct counts k = {0};
    size_t bytes = 0, nrows = 0;
    int rc = 0;
    for (struct qitem *q = w->head; q; q = q->next) {
        if (!kd_writer__take(n, nrows, bytes, q->nrows, q->len, (size_t)w->s->opts.flush_rows,
                             CHUNK_BYTES, w->solo_left > 0))
            break;
        last = q;
        n++;
        nrows += q->nrows;
        bytes += q->len;
    }
    if (!last)
        return;
    /* Detach the chunk: only this thread removes items, puts only append. */
    w->head = last->next;
    if (!w->head)
        w->tail = NULL;
    last->next = NULL;
    w->qbatches -= n;
    w->qbytes -= bytes;
    pthread_mutex_unlock(&w->mu);
    rc = write_copy(w, list, n, &k, err);
    pthread_mutex_lock(&w->mu);
    bool drop = false;
    if (rc != 0 && !transient(rc)) {
        if (n > 1) {
            KD_WARN("metrics writer: a chunk was refused; writing its batches one by one", "err=%s",
                    kd_logq(err));
            w->solo_left = (int)n;
        } else {
            KD_ERROR("metrics batch refused by the database and dropped", "err=%s", kd_logq(err));
            w->rejected_batches++;
            drop = true;
        }
    }
    if (rc == 0 || drop) {
        if (rc == 0) {
            account(w, &k);
            w->db_up = true;
            w->backoff_ms = w->s->opts.backoff_min_ms;
            kd_sketcher__poke(w->s->sketcher);
        }
        if (w->solo_left > 0)
            w->solo_left--;
        if (last->seq > w->durable_seq)
            w->durable_seq = last->seq;
        if (last->seq > w->committed_seq)
            w->committed_seq = last->seq;
        while (list) {
            struct qitem *nx = list->next;
            qitem_free(list);
            list = nx;
        }
        pthread_cond_broadcast(&w->done);
        return;
    }
    /* Put the chunk back at the head, in order. */
    last->next = w->head;
    w->head = list;
    if (!w->tail)
        w->tail = last;
    w->qbatches += n;
    w->qbytes += bytes;
    if (transient(rc))
        mark_down(w, err);
}

static void *writer_main(void *arg)
{
    struct kd_writer *w = arg;
    int64_t stop_deadline = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        bool spool_pending = w->fd >= 0 && w->replay_off < w->spool_size;
        if (w->stop) {
            if (!stop_deadline)
                stop_deadline = kd_mono_ms() + STOP_WAIT_MS;
            if (!w->head && !spool_pending)
                break;
            if (kd_mono_ms() >= stop_deadline || (!w->db_up && w->last_err[0])) {
                spill(w);
                if (w->head)
                    KD_ERROR("metrics writer stopped with batches only in memory; they are lost",
                             "batches=%llu", (unsigned long long)w->qbatches);
                break;
            }
        }
        if (!w->head && !spool_pending) {
            timed_wait(w, 1000);
            continue;
        }
        /* The spool is written first, to keep the order. Newer batches join
         * it when memory is over its bound, or when someone waits for
         * durability while the database is down. While the database is up
         * they wait in memory for the replay to finish: spilling them too
         * would keep the spool from ever draining under steady load. */
        if (w->head && w->fd >= 0 &&
            ((spool_pending && w->waiters > 0 && !w->db_up) || w->qbytes > w->s->opts.mem_limit)) {
            uint64_t before = w->spilled_batches;
            spill(w);
            if (w->spilled_batches != before)
                continue; /* the queue changed: look again */
        }
        int64_t now = kd_mono_ms();
        if (!w->db_up && now < w->next_try_ms) {
            if (w->waiters > 0 || w->qbytes > w->s->opts.mem_limit)
                spill(w);
            timed_wait(w, w->next_try_ms - now);
            continue;
        }
        if (spool_pending)
            replay_step(w);
        else
            write_step(w);
    }
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- public side ----------------------------------------------------------- */

int kd_writer__start(struct kd_store *s, struct kd_writer **out, char *err)
{
    int rc = 0;
    struct kd_writer *w = kd_xcalloc(1, sizeof(*w));
    *out = NULL;
    w->s = s;
    w->fd = -1;
    w->db_up = true;
    w->backoff_ms = s->opts.backoff_min_ms;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->done, NULL);
    if (s->opts.spool_dir) {
        struct stat st;
        w->path = kd_xasprintf("%s/%s", s->opts.spool_dir, SPOOL_NAME);
        if (mkdir(s->opts.spool_dir, 0700) != 0 && errno != EEXIST) {
            rc = kd_seterr(err, -errno, "spool_dir %s: %s", s->opts.spool_dir, strerror(errno));
            goto out;
        }
        w->fd = open(w->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (w->fd < 0 || fstat(w->fd, &st) != 0) {
            rc = kd_seterr(err, -errno, "spool %s: %s", w->path, strerror(errno));
            goto out;
        }
        /* One process per spool: a second controller on the same dir would interleave. */
        if (flock(w->fd, LOCK_EX | LOCK_NB) != 0) {
            rc = kd_seterr(err, errno == EWOULDBLOCK ? KD_ECONFLICT : -errno,
                           "spool %s is in use by another process", w->path);
            goto out;
        }
        /* Make the file's directory entry durable once, before anything is acknowledged. */
        int dfd = open(s->opts.spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) != 0)
                KD_WARN("metrics spool: cannot fsync its directory", "path=%s",
                        kd_logq(s->opts.spool_dir));
            close(dfd);
        }
        w->spool_size = st.st_size;
        if (st.st_size > 0)
            KD_INFO("metrics spool from an earlier run will be written first", "path=%s bytes=%lld",
                    kd_logq(w->path), (long long)st.st_size);
    }
    if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "metrics writer: cannot start its thread");
        goto out;
    }
    *out = w;
    w = NULL;
out:
    if (w) {
        if (w->fd >= 0)
            close(w->fd);
        free(w->path);
        pthread_cond_destroy(&w->done);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->mu);
        free(w);
    }
    return rc;
}

void kd_writer__stop(struct kd_writer *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    while (w->head) {
        struct qitem *nx = w->head->next;
        qitem_free(w->head);
        w->head = nx;
    }
    if (w->conn)
        PQfinish(w->conn);
    if (w->fd >= 0)
        close(w->fd);
    free(w->path);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/*
 * Whether a batch of len bytes may be queued now. Memory takes up to
 * mem_limit; beyond that (up to twice as much, while the writer moves it)
 * only when the spool has room for everything queued. A caller who waits
 * for durability while the database is down needs room in the spool.
 */
static bool has_room(const struct kd_writer *w, size_t len, bool durable)
{
    const struct kd_store_opts *o = &w->s->opts;
    bool fits_mem = w->qbytes + len <= o->mem_limit;
    bool fits_spool = w->fd >= 0 && (size_t)w->spool_size + w->qbytes + len <= o->spool_limit;
    if (durable && !w->db_up)
        return fits_spool && w->qbytes + len <= 2 * o->mem_limit;
    return fits_mem || (fits_spool && w->qbytes + len <= 2 * o->mem_limit);
}

int kd_store_metrics_put(struct kd_store *s, const struct kd_metric_batch *b, int timeout_ms,
                         char *err)
{
    int rc = 0;
    struct kd_writer *w = s->writer;
    struct qitem *q = NULL;
    size_t len = 0;
    rc = check_batch(b, err);
    if (rc != 0)
        goto out;
    /* Encoded here, in the caller's thread, so that the one writer thread only sends. */
    struct kd_buf cb = KD_BUF_INIT(4 * (size_t)KD_STORE_MAX_BATCH_BYTES);
    struct kd_buf lb = KD_BUF_INIT(2 * (size_t)KD_STORE_MAX_BATCH_BYTES);
    rc = kd_copy__encode(b, kd_wall_ms(), &cb, &lb);
    if (rc == 0 && lb.len - 1 > KD_STORE_MAX_BATCH_BYTES)
        rc = KD_ETOOBIG;
    if (rc != 0) {
        if (rc == KD_ETOOBIG)
            rc = kd_seterr(err, KD_ETOOBIG, "batch: %zu bytes of JSON or more, at most %u",
                           lb.len ? lb.len - 1 : lb.len, KD_STORE_MAX_BATCH_BYTES);
        else
            rc = kd_seterr(err, rc, "metrics: cannot encode the batch");
        kd_buf_free(&cb);
        kd_buf_free(&lb);
        goto out;
    }
    len = lb.len;
    q = kd_xcalloc(1, sizeof(*q));
    q->line = lb.data;
    q->len = lb.len;
    q->nrows = b->n;
    q->trial_id = b->trial_id;
    q->kind = b->kind;
    q->key = kd_xstrdup(b->key);
    q->copy = cb.data;
    q->copy_len = cb.len;
    pthread_mutex_lock(&w->mu);
    if (w->stop) {
        pthread_mutex_unlock(&w->mu);
        rc = kd_seterr(err, KD_ESTATE, "metrics: the store is closing");
        goto out;
    }
    /* Room check, waiting up to FULL_WAIT_MS for the writer to make room. */
    int64_t full_dl = kd_mono_ms() + FULL_WAIT_MS;
    while (!has_room(w, len, timeout_ms > 0)) {
        if (kd_mono_ms() >= full_dl || w->stop) {
            rc = kd_seterr(err, KD_EAGAIN,
                           "metrics buffer full (%zu bytes in memory, %lld in the spool); "
                           "database: %s",
                           w->qbytes, (long long)(w->spool_size - w->replay_off),
                           w->db_up ? "writing" : w->last_err);
            pthread_mutex_unlock(&w->mu);
            goto out;
        }
        struct timespec ts;
        kd_deadline_ts(CLOCK_REALTIME, 50, &ts);
        pthread_cond_signal(&w->wake);
        pthread_cond_timedwait(&w->done, &w->mu, &ts);
    }
    q->seq = ++w->next_seq;
    if (w->tail)
        w->tail->next = q;
    else
        w->head = q;
    w->tail = q;
    w->qbatches++;
    w->qbytes += len;
    uint64_t seq = q->seq;
    q = NULL;
    pthread_cond_signal(&w->wake);
    if (timeout_ms > 0) {
        struct timespec dl;
        kd_deadline_ts(CLOCK_REALTIME, timeout_ms, &dl);
        w->waiters++;
        pthread_cond_signal(&w->wake);
        while (w->durable_seq < seq && !w->stop) {
            if (pthread_cond_timedwait(&w->done, &w->mu, &dl) == ETIMEDOUT)
                break;
        }
        w->waiters--;
        if (w->durable_seq < seq)
            rc = kd_seterr(err, KD_ETIMEDOUT,
                           "metrics: batch %s not yet durable after %d ms (database: %s); it "
                           "stays queued, and a retry with the same key is safe",
                           b->key, timeout_ms, w->db_up ? "writing" : w->last_err);
    }
    pthread_mutex_unlock(&w->mu);
out:
    qitem_free(q);
    return rc;
}

int kd_store_metrics_flush(struct kd_store *s, int timeout_ms)
{
    struct kd_writer *w = s->writer;
    struct timespec dl;
    int rc = 0;
    kd_deadline_ts(CLOCK_REALTIME, timeout_ms, &dl);
    pthread_mutex_lock(&w->mu);
    uint64_t target = w->next_seq;
    pthread_cond_signal(&w->wake);
    /* Also wait for a spool left by an earlier run, which has no sequence numbers. */
    while (w->committed_seq < target || (w->fd >= 0 && w->replay_off < w->spool_size)) {
        if (pthread_cond_timedwait(&w->done, &w->mu, &dl) == ETIMEDOUT) {
            rc = KD_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void kd_store_metrics_stats(struct kd_store *s, struct kd_store_metrics_stats *out)
{
    struct kd_writer *w = s->writer;
    pthread_mutex_lock(&w->mu);
    out->queued_batches = w->qbatches;
    out->queued_bytes = w->qbytes;
    out->spool_bytes = (uint64_t)(w->spool_size - w->replay_off);
    out->written_batches = w->written_batches;
    out->written_rows = w->written_rows;
    out->duplicate_batches = w->dup_batches;
    out->orphan_batches = w->orphan_batches;
    out->spilled_batches = w->spilled_batches;
    out->rejected_batches = w->rejected_batches;
    out->db_up = w->db_up;
    pthread_mutex_unlock(&w->mu);
}
