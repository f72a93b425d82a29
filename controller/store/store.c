/*
 * Opening and closing the store, and the one place where statements are
 * run: every query goes through kd_store__exec with bound parameters, so
 * no user data is ever spliced into SQL text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "store/store_int.h"

#define JSON_RESULT_MAX (64u << 20) /* a list result larger than this is refused */

/* How long the client waits for an answer: the server's limit plus a grace period. */
static int client_timeout(const struct kd_store *s)
{
    if (s->opts.statement_timeout_ms <= 0)
        return 0;
    return s->opts.statement_timeout_ms + KD_STORE_CLIENT_GRACE_MS;
}

int kd_store__exec(struct kd_store *s, const char *what, const char *sql, int n,
                   const char *const *params, bool retry, PGresult **res, char *err)
{
    int rc = 0;
    PGconn *c = NULL;
    PGresult *r = NULL;
    if (res)
        *res = NULL;
    /* Every idle connection may have died with the server: try each once, then a new one. */
    for (int attempt = 0; attempt <= s->opts.pool_size; attempt++) {
        rc = kd_pool_get(s->pool, &c, err);
        if (rc != 0)
            goto out;
        bool hung = false;
        int64_t t0 = kd_mono_ns();
        r = kd_pg_exec(c, sql, n, params, client_timeout(s), &hung);
        kd_metric_observe(s->opts.db_seconds, (const char *[]){"statement"},
                          (double)(kd_mono_ns() - t0) / 1e9);
        if (hung) {
            rc = kd_seterr(err, KD_ETIMEDOUT,
                           "%s: no answer from the database in %d ms; connection dropped", what,
                           client_timeout(s));
            goto out;
        }
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
            rc = 0;
            break;
        }
        rc = kd_pg_error(c, r, what, err);
        PQclear(r);
        r = NULL;
        kd_pool_put(s->pool, c);
        c = NULL;
        /* A pooled connection that died while idle (server restart): try another. */
        if (rc != KD_ECONNECT || !retry)
            goto out;
    }
    if (rc == 0 && res) {
        *res = r;
        r = NULL;
    }
out:
    PQclear(r);
    if (c)
        kd_pool_put(s->pool, c);
    return rc;
}

int kd_store__conn_exec(struct kd_store *s, PGconn *c, const char *what, const char *sql, int n,
                        const char *const *params, PGresult **res, char *err)
{
    int rc = 0;
    bool hung = false;
    int64_t t0 = kd_mono_ns();
    PGresult *r = kd_pg_exec(c, sql, n, params, client_timeout(s), &hung);
    kd_metric_observe(s->opts.db_seconds, (const char *[]){"statement"},
                      (double)(kd_mono_ns() - t0) / 1e9);
    if (res)
        *res = NULL;
    if (hung) {
        rc = kd_seterr(err, KD_ETIMEDOUT,
                       "%s: no answer from the database in %d ms; connection dropped", what,
                       client_timeout(s));
        goto out;
    }
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        rc = kd_pg_error(c, r, what, err);
        goto out;
    }
    if (res) {
        *res = r;
        r = NULL;
    }
out:
    PQclear(r);
    return rc;
}

int kd_store__tx(struct kd_store *s, const char *what, kd_store_tx_fn fn, void *ctx, char *err)
{
    int rc = 0;
    PGconn *c = NULL;
    /* BEGIN on a pooled connection that died while idle fails: try each once, then a new one. */
    for (int attempt = 0; attempt <= s->opts.pool_size; attempt++) {
        if ((rc = kd_pool_get(s->pool, &c, err)) != 0)
            goto out;
        rc = kd_store__conn_exec(s, c, what, "BEGIN", 0, NULL, NULL, err);
        if (rc != KD_ECONNECT)
            break;
        kd_pool_put(s->pool, c);
        c = NULL;
    }
    if (rc != 0)
        goto out;
    rc = fn(s, c, ctx, err);
    if (rc == 0)
        rc = kd_store__conn_exec(s, c, what, "COMMIT", 0, NULL, NULL, err);
    else /* a failed ROLLBACK leaves the connection in the transaction: the pool drops it */
        if (kd_store__conn_exec(s, c, what, "ROLLBACK", 0, NULL, NULL, NULL) != 0)
            KD_DEBUG("rollback failed; the connection is dropped", "what=%s", what);
out:
    if (c)
        kd_pool_put(s->pool, c);
    return rc;
}

int kd_store__json(struct kd_store *s, const char *what, const char *sql, int n,
                   const char *const *params, json_t **out, char *err)
{
    int rc;
    PGresult *r = NULL;
    json_error_t je;
    *out = NULL;
    rc = kd_store__exec(s, what, sql, n, params, true, &r, err);
    if (rc != 0)
        goto out;
    if (PQntuples(r) == 0 || PQgetisnull(r, 0, 0)) {
        rc = kd_seterr(err, KD_ENOTFOUND, "%s: not found", what);
        goto out;
    }
    if ((size_t)PQgetlength(r, 0, 0) > JSON_RESULT_MAX) {
        rc = kd_seterr(err, KD_ETOOBIG, "%s: result of %d bytes is over the %u byte cap", what,
                       PQgetlength(r, 0, 0), JSON_RESULT_MAX);
        goto out;
    }
    *out = json_loadb(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0),
                      JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!*out)
        rc = kd_seterr(err, KD_EPROTO, "%s: server returned bad JSON: %s", what, je.text);
out:
    PQclear(r);
    return rc;
}

int kd_store_ping(struct kd_store *s, char *err)
{
    return kd_store__exec(s, "ping", "SELECT 1", 0, NULL, true, NULL, err);
}

int kd_store_migrate(struct kd_store *s, char *err)
{
    PGconn *c = NULL;
    int rc = kd_pool_get(s->pool, &c, err);
    if (rc != 0)
        return rc;
    rc = kd_store__migrate_conn(c, kd_store__migrations, kd_store__nmigrations, err);
    kd_pool_put(s->pool, c);
    return rc;
}

int kd_store_open(const struct kd_store_opts *opts, struct kd_store **out, char *err)
{
    int rc = 0;
    struct kd_store *s = NULL;
    *out = NULL;
    if (!opts || !opts->conninfo || !opts->conninfo[0]) {
        rc = kd_seterr(err, KD_EINVAL, "store: conninfo is required");
        goto out;
    }
    s = kd_xcalloc(1, sizeof(*s));
    s->sketch_cache = kd_sketch_cache__new();
    s->opts = *opts;
    s->conninfo = kd_xstrdup(opts->conninfo);
    s->opts.conninfo = s->conninfo;
    if (opts->spool_dir) {
        s->spool_dir = kd_xstrdup(opts->spool_dir);
        s->opts.spool_dir = s->spool_dir;
    }
    if (s->opts.pool_size == 0)
        s->opts.pool_size = 4;
    if (s->opts.pool_wait_ms <= 0)
        s->opts.pool_wait_ms = 5000;
    if (s->opts.statement_timeout_ms == 0)
        s->opts.statement_timeout_ms = 30000;
    if (s->opts.backoff_min_ms <= 0)
        s->opts.backoff_min_ms = 100;
    if (s->opts.backoff_max_ms < s->opts.backoff_min_ms)
        s->opts.backoff_max_ms = s->opts.backoff_min_ms > 5000 ? s->opts.backoff_min_ms : 5000;
    if (s->opts.mem_limit == 0)
        s->opts.mem_limit = 64u << 20;
    if (s->opts.spool_limit == 0)
        s->opts.spool_limit = (size_t)1 << 30;
    if (s->opts.flush_rows <= 0)
        s->opts.flush_rows = 5000;
    if (s->opts.sketch_interval_ms == 0)
        s->opts.sketch_interval_ms = 500;
    s->pool_opts = (struct kd_pool_opts){
        .conninfo = s->conninfo,
        .size = s->opts.pool_size,
        .wait_ms = s->opts.pool_wait_ms,
        .statement_timeout_ms = s->opts.statement_timeout_ms,
        .backoff_min_ms = s->opts.backoff_min_ms,
        .backoff_max_ms = s->opts.backoff_max_ms,
    };
    rc = kd_pool_open(&s->pool_opts, &s->pool, err);
    if (rc != 0)
        goto out;
    if (!s->opts.no_migrate) {
        rc = kd_store_migrate(s, err);
        if (rc != 0)
            goto out;
    }
    /* The sketcher first: the writer pokes it after each commit. */
    if (s->opts.sketch_interval_ms > 0 && (rc = kd_sketcher__start(s, &s->sketcher, err)) != 0)
        goto out;
    rc = kd_writer__start(s, &s->writer, err);
    if (rc != 0)
        goto out;
    *out = s;
    s = NULL;
out:
    kd_store_close(s);
    return rc;
}

void kd_store_close(struct kd_store *s)
{
    if (!s)
        return;
    kd_writer__stop(s->writer);
    kd_sketcher__stop(s->sketcher);
    kd_sketch_cache__free(s->sketch_cache);
    kd_pool_close(s->pool);
    free(s->conninfo);
    free(s->spool_dir);
    free(s);
}
