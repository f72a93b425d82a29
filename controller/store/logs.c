/*
 * Trial and task logs: the lines kdet-launch ships, stored per trial (or
 * task) in batches with idempotency keys, under a per-trial cap on their
 * bytes; read back as a tail, after a line (to follow), or filtered by a
 * regular expression or a substring; removed with their experiment.
 *
 * A batch is one transaction: an advisory lock per experiment (per task),
 * so that the experiment's batches commit one at a time and line ids grow
 * in commit order (a follower that saw id N never misses a line committed
 * later with a smaller id); the batch key; the trial's byte count; the
 * lines and the new count. The retention decision between them is a pure
 * function. Trials and tasks have tables of the same shape (trial_logs,
 * task_logs): each statement below exists once per owner, as two fixed
 * strings, and is chosen, never spliced.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "store/store_int.h"

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
/* pg_advisory_xact_lock(LOCK_CLASS, experiment): the first key names the use ("kdeu"). */
#define LOCK_CLASS "1801741685"
/* The same per task ("kdet"). */
#define TASK_LOCK_CLASS "1801741684"
#define MAX_RUN_ID 128
#define DELETE_CHUNK "20000"

void kd_store_logs_retain(int64_t used, bool capped, int64_t cap, const size_t *lens, size_t n,
                          struct kd_log_retain *out)
{
    memset(out, 0, sizeof(*out));
    if (cap <= 0) {
        out->keep = n;
        for (size_t i = 0; i < n; i++)
            out->add_bytes += (int64_t)lens[i];
        return;
    }
    if (capped)
        return; /* the marker is there: nothing more is kept */
    while (out->keep < n && used + out->add_bytes + (int64_t)lens[out->keep] <= cap) {
        out->add_bytes += (int64_t)lens[out->keep];
        out->keep++;
    }
    out->marker = out->keep < n;
}

static int check_batch(const struct kd_log_batch *b, char *err)
{
    int rc = 0;
    if (b->trial_id <= 0 && b->task_id <= 0) {
        rc = kd_seterr(err, KD_EINVAL, "trial_id: %lld is not an id", (long long)b->trial_id);
        goto out;
    }
    if (b->trial_id > 0 && b->task_id > 0) {
        rc = kd_seterr(err, KD_EINVAL, "task_id: a batch is a trial's or a task's, not both");
        goto out;
    }
    size_t kl = b->key ? strlen(b->key) : 0;
    if (kl == 0 || kl > KD_STORE_MAX_KEY) {
        rc = kd_seterr(err, KD_EINVAL, "key: must be 1 to %d bytes", KD_STORE_MAX_KEY);
        goto out;
    }
    for (size_t i = 0; i < kl; i++) {
        if ((unsigned char)b->key[i] < 0x21 || (unsigned char)b->key[i] > 0x7e) {
            rc = kd_seterr(err, KD_EINVAL, "key: byte %zu (0x%02x) is not printable ASCII", i + 1,
                           (unsigned char)b->key[i]);
            goto out;
        }
    }
    if (b->run_id != NULL && strlen(b->run_id) > MAX_RUN_ID) {
        rc = kd_seterr(err, KD_EINVAL, "run_id: at most %d bytes", MAX_RUN_ID);
        goto out;
    }
    if (b->n == 0 || b->n > KD_STORE_LOG_MAX_LINES) {
        rc = kd_seterr(err, KD_EINVAL, "lines: must hold 1 to %d lines", KD_STORE_LOG_MAX_LINES);
        goto out;
    }
    for (size_t i = 0; i < b->n; i++) {
        const struct kd_log_line *l = &b->lines[i];
        if (l->rank < -1) {
            rc = kd_seterr(err, KD_EINVAL, "lines[%zu].rank: %d is below -1", i, l->rank);
            goto out;
        }
        if (l->text == NULL || memchr(l->text, '\0', l->len) != NULL) {
            rc = kd_seterr(err, KD_EINVAL, "lines[%zu].line: %s", i,
                           l->text == NULL ? "required"
                                           : "contains a NUL character, which cannot be stored");
            goto out;
        }
    }
out:
    return rc;
}

/* The batch key and the owner's byte count (T: "trial" or "task"). */
#define BATCH_SQL(T)                                                                               \
    "WITH nb AS (INSERT INTO " T "_log_batches (" T "_id, batch_key, nlines)"                      \
    " VALUES ($1::bigint, $2, $3::int) ON CONFLICT DO NOTHING RETURNING 1)"                        \
    " SELECT log_bytes, log_capped, (SELECT count(*) FROM nb)"                                     \
    " FROM " T "s WHERE id = $1::bigint"
/* The lines and the new byte count. */
#define INSERT_SQL(T)                                                                              \
    "WITH ins AS (INSERT INTO " T "_logs (" T "_id, run_id, rank, stream, ts, line)"               \
    " SELECT $1::bigint, $3, (e.v->>0)::int, e.v->>1,"                                             \
    "  to_timestamp((e.v->>2)::double precision / 1000.0), e.v->>3"                                \
    " FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS e(v, i) ORDER BY e.i"                \
    " RETURNING 1)"                                                                                \
    " UPDATE " T "s SET log_bytes = log_bytes + $4::bigint, log_capped = log_capped OR"            \
    " $5::boolean WHERE id = $1::bigint"

struct put_ctx {
    const struct kd_log_batch *b;
    int64_t max_bytes;
    struct kd_log_put_result *res;
};

/* The lines kept, as the JSON parameter [[rank, stream, ts_ms, text], ...]; long ones cut. */
static char *lines_param(const struct kd_log_batch *b, size_t keep, bool marker, int64_t cap)
{
    json_t *a = json_array();
    char mark[160];
    for (size_t i = 0; i < keep; i++) {
        const struct kd_log_line *l = &b->lines[i];
        json_t *text;
        if (l->len > KD_STORE_LOG_LINE_MAX) {
            size_t cut = kd_utf8_cut((const unsigned char *)l->text, KD_STORE_LOG_LINE_MAX - 80);
            char *t = kd_xasprintf("%.*s [kdet-controller: line cut, %zu bytes dropped]", (int)cut,
                                   l->text, l->len - cut);
            text = json_string(t);
            free(t);
        } else {
            text = json_stringn(l->text, l->len);
        }
        if (text == NULL) /* not UTF-8: PostgreSQL would refuse it too */
            text = json_string("\xEF\xBF\xBD");
        json_array_append_new(a, json_pack("[i,s,I,o]", l->rank, l->is_stderr ? "stderr" : "stdout",
                                           (json_int_t)l->ts_ms, text));
    }
    if (marker) {
        const struct kd_log_line *first = &b->lines[keep];
        snprintf(mark, sizeof(mark),
                 "kdet-controller: this %s's logs reached the limit of %lld bytes "
                 "(--log-max-bytes-per-trial); later lines are not kept",
                 b->task_id > 0 ? "task" : "trial", (long long)cap);
        json_array_append_new(a,
                              json_pack("[i,s,I,s]", -1, "stderr", (json_int_t)first->ts_ms, mark));
    }
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    if (s == NULL)
        kd_oom(0);
    return s;
}

/* The bytes a line will take once stored (a cut line is shorter). */
static size_t stored_len(const struct kd_log_line *l)
{
    return l->len > KD_STORE_LOG_LINE_MAX ? KD_STORE_LOG_LINE_MAX : l->len;
}

static int put_tx(struct kd_store *s, PGconn *c, void *arg, char *err)
{
    struct put_ctx *x = arg;
    const struct kd_log_batch *b = x->b;
    PGresult *r = NULL;
    char tb[24], nb[24], bb[24], cb[8];
    char *param = NULL;
    size_t *lens = NULL;
    int rc;
    bool task = b->task_id > 0;
    const char *owner = task ? "task" : "trial";
    int64_t oid = task ? b->task_id : b->trial_id;
    snprintf(tb, sizeof(tb), "%lld", (long long)oid);
    snprintf(nb, sizeof(nb), "%zu", b->n);
    const char *p1[1] = {tb};
    rc = kd_store__conn_exec(s, c, "lock the experiment's logs",
                             task ? "SELECT pg_advisory_xact_lock(" TASK_LOCK_CLASS
                                    ", (id % 2147483647)::int) FROM tasks WHERE id = $1::bigint"
                                  : "SELECT pg_advisory_xact_lock(" LOCK_CLASS
                                    ", (experiment_id % 2147483647)::int) FROM trials"
                                    " WHERE id = $1::bigint",
                             1, p1, &r, err);
    if (rc == 0 && PQntuples(r) != 1)
        rc = kd_seterr(err, KD_ENOTFOUND, "%s %lld has no row", owner, (long long)oid);
    PQclear(r);
    r = NULL;
    if (rc != 0)
        goto out;
    /* A new snapshot, after the lock: the count the previous batch committed. */
    const char *p2[3] = {tb, b->key, nb};
    rc = kd_store__conn_exec(s, c, "log batch key", task ? BATCH_SQL("task") : BATCH_SQL("trial"),
                             3, p2, &r, err);
    if (rc != 0)
        goto out;
    if (PQntuples(r) != 1) {
        rc = kd_seterr(err, KD_ENOTFOUND, "%s %lld has no row", owner, (long long)oid);
        goto out;
    }
    int64_t used = 0;
    if (kd_parse_i64(PQgetvalue(r, 0, 0), &used) != 0) {
        rc = kd_seterr(err, KD_EPROTO, "log_bytes: %s is not a number", PQgetvalue(r, 0, 0));
        goto out;
    }
    bool capped = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
    if (strcmp(PQgetvalue(r, 0, 2), "0") == 0) {
        x->res->duplicate = true;
        goto out;
    }
    lens = kd_xcalloc(b->n, sizeof(*lens));
    for (size_t i = 0; i < b->n; i++)
        lens[i] = stored_len(&b->lines[i]);
    struct kd_log_retain keep;
    kd_store_logs_retain(used, capped, x->max_bytes, lens, b->n, &keep);
    x->res->stored = keep.keep;
    x->res->dropped = b->n - keep.keep;
    x->res->capped = keep.marker;
    if (keep.keep == 0 && !keep.marker)
        goto out;
    param = lines_param(b, keep.keep, keep.marker, x->max_bytes);
    snprintf(bb, sizeof(bb), "%lld", (long long)keep.add_bytes);
    snprintf(cb, sizeof(cb), "%s", keep.marker ? "true" : "false");
    const char *p3[5] = {tb, param, b->run_id ? b->run_id : "", bb, cb};
    PQclear(r);
    r = NULL;
    rc = kd_store__conn_exec(s, c, "store log lines",
                             task ? INSERT_SQL("task") : INSERT_SQL("trial"), 5, p3, NULL, err);
out:
    PQclear(r);
    free(param);
    free(lens);
    return rc;
}

int kd_store_logs_put(struct kd_store *s, const struct kd_log_batch *b, int64_t max_bytes,
                      struct kd_log_put_result *res, char *err)
{
    struct kd_log_put_result local;
    struct put_ctx x = {b, max_bytes, res ? res : &local};
    memset(x.res, 0, sizeof(*x.res));
    int rc = check_batch(b, err);
    if (rc == 0)
        rc = kd_store__tx(s, "store log batch", put_tx, &x, err);
    if (rc != 0)
        memset(x.res, 0, sizeof(*x.res));
    return rc;
}

#define QUERY_SQL(dir)                                                                             \
    "SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM ("                                      \
    " SELECT l.id, l.trial_id, l.run_id, l.rank, l.stream, " TS(                                   \
        "l.ts") " AS \"timestamp\", l.line"                                                        \
                " FROM trials t CROSS JOIN LATERAL ("                                              \
                "  SELECT * FROM trial_logs l WHERE l.trial_id = t.id AND l.id > $3::bigint"       \
                "  AND ($4::bigint <= 0 OR l.id < $4::bigint)"                                     \
                "  AND ($5::text IS NULL OR l.line ~ $5::text)"                                    \
                "  AND ($6::text IS NULL OR strpos(l.line, $6::text) > 0)"                         \
                "  ORDER BY l.id " dir " LIMIT $7::bigint) l"                                      \
                " WHERE ($1::bigint > 0 AND t.experiment_id = $1::bigint)"                         \
                " OR ($1::bigint <= 0 AND t.id = $2::bigint)"                                      \
                " ORDER BY l.id " dir " LIMIT $7::bigint) x"

/* A task's lines: the same filters, one table. */
#define TASK_QUERY_SQL(dir)                                                                        \
    "SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM ("                                      \
    " SELECT l.id, l.task_id, l.run_id, l.rank, l.stream, " TS(                                    \
        "l.ts") " AS \"timestamp\", l.line"                                                        \
                " FROM task_logs l WHERE l.task_id = $1::bigint AND l.id > $2::bigint"             \
                " AND ($3::bigint <= 0 OR l.id < $3::bigint)"                                      \
                " AND ($4::text IS NULL OR l.line ~ $4::text)"                                     \
                " AND ($5::text IS NULL OR strpos(l.line, $5::text) > 0)"                          \
                " ORDER BY l.id " dir " LIMIT $6::bigint) x"

int kd_store_logs_query(struct kd_store *s, const struct kd_log_query *q, json_t **out, char *err)
{
    char eb[24], tb[24], ab[24], bb[24], lb[24];
    int rc = 0;
    *out = NULL;
    if (q->experiment_id <= 0 && q->trial_id <= 0 && q->task_id <= 0) {
        rc = kd_seterr(err, KD_EINVAL, "logs: give an experiment id, a trial id or a task id");
        goto out;
    }
    if (q->limit <= 0 || q->limit > KD_STORE_LOG_MAX_QUERY) {
        rc = kd_seterr(err, KD_EINVAL, "limit: %d out of range 1..%d", q->limit,
                       KD_STORE_LOG_MAX_QUERY);
        goto out;
    }
    if ((q->regex && strlen(q->regex) > KD_STORE_LOG_MAX_PATTERN) ||
        (q->contains && strlen(q->contains) > KD_STORE_LOG_MAX_PATTERN)) {
        rc = kd_seterr(err, KD_EINVAL, "%s: at most %d bytes", q->regex ? "regex" : "contains",
                       KD_STORE_LOG_MAX_PATTERN);
        goto out;
    }
    if (q->regex != NULL) {
        /* A bad expression is an error even when no line would be tested against it. */
        const char *p[1] = {q->regex};
        if ((rc = kd_store__exec(s, "regular expression", "SELECT '' ~ $1::text", 1, p, true, NULL,
                                 err)) != 0)
            goto out;
    }
    snprintf(eb, sizeof(eb), "%lld", (long long)(q->experiment_id > 0 ? q->experiment_id : 0));
    snprintf(tb, sizeof(tb), "%lld", (long long)(q->trial_id > 0 ? q->trial_id : 0));
    snprintf(ab, sizeof(ab), "%lld", (long long)(q->after_id > 0 ? q->after_id : 0));
    snprintf(bb, sizeof(bb), "%lld", (long long)(q->before_id > 0 ? q->before_id : 0));
    snprintf(lb, sizeof(lb), "%d", q->limit);
    if (q->experiment_id <= 0 && q->trial_id <= 0) {
        char kb[24];
        snprintf(kb, sizeof(kb), "%lld", (long long)q->task_id);
        const char *pk[6] = {kb, ab, bb, q->regex, q->contains, lb};
        rc =
            kd_store__json(s, "task logs", q->tail ? TASK_QUERY_SQL("DESC") : TASK_QUERY_SQL("ASC"),
                           6, pk, out, err);
        goto out;
    }
    const char *p[7] = {eb, tb, ab, bb, q->regex, q->contains, lb};
    /* The direction picks one of two fixed statements: it is never spliced in. */
    rc = kd_store__json(s, "trial logs", q->tail ? QUERY_SQL("DESC") : QUERY_SQL("ASC"), 7, p, out,
                        err);
out:
    return rc;
}

int kd_store_logs_delete(struct kd_store *s, int64_t experiment_id, int64_t *lines, char *err)
{
    char eb[24];
    int rc = 0;
    int64_t total = 0, n = 0;
    PGresult *r = NULL;
    if (experiment_id <= 0) {
        rc =
            kd_seterr(err, KD_EINVAL, "experiment_id: %lld is not an id", (long long)experiment_id);
        goto out;
    }
    snprintf(eb, sizeof(eb), "%lld", (long long)experiment_id);
    const char *p[1] = {eb};
    do {
        rc = kd_store__exec(s, "delete log lines",
                            "WITH d AS (DELETE FROM trial_logs WHERE id IN (SELECT l.id FROM"
                            " trials t JOIN trial_logs l ON l.trial_id = t.id"
                            " WHERE t.experiment_id = $1::bigint LIMIT " DELETE_CHUNK ")"
                            " RETURNING 1) SELECT count(*) FROM d",
                            1, p, true, &r, err);
        if (rc != 0)
            goto out;
        if (kd_parse_i64(PQgetvalue(r, 0, 0), &n) != 0)
            n = 0;
        total += n;
        PQclear(r);
        r = NULL;
    } while (n > 0);
    rc = kd_store__exec(s, "delete log batch keys",
                        "WITH d AS (DELETE FROM trial_log_batches WHERE trial_id IN"
                        " (SELECT id FROM trials WHERE experiment_id = $1::bigint))"
                        " UPDATE trials SET log_bytes = 0, log_capped = false"
                        " WHERE experiment_id = $1::bigint AND (log_bytes <> 0 OR log_capped)",
                        1, p, true, NULL, err);
out:
    PQclear(r);
    if (lines != NULL)
        *lines = total;
    return rc;
}
