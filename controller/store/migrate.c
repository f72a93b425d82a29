/*
 * Schema migrations: each compiled-in migration runs once, in its own
 * transaction, under a PostgreSQL advisory lock, and is recorded in
 * schema_migrations. A failing migration is rolled back and named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "store/store_int.h"

/* pg_advisory_lock key: "kdet" in ASCII. */
#define MIGRATE_LOCK_KEY "1801741684"

static int exec_simple(PGconn *c, const char *sql, const char *what, char *err)
{
    PGresult *r = PQexec(c, sql);
    int rc = 0;
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        rc = kd_pg_error(c, r, what, err);
    PQclear(r);
    return rc;
}

static int current_version(PGconn *c, int *version, char *err)
{
    int rc = 0;
    PGresult *r = PQexec(c, "SELECT coalesce(max(version), 0) FROM schema_migrations");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = kd_pg_error(c, r, "read schema_migrations", err);
        goto out;
    }
    if (kd_parse_int(PQgetvalue(r, 0, 0), version) != 0)
        rc = kd_seterr(err, KD_EPROTO, "schema_migrations: bad version %s", PQgetvalue(r, 0, 0));
out:
    PQclear(r);
    return rc;
}

static int apply_one(PGconn *c, const struct kd_migration *m, char *err)
{
    int rc = 0;
    char ver[16], cerr[KD_ERRLEN];
    const char *params[2] = {ver, m->name};
    PGresult *r = NULL;
    int64_t t0 = kd_mono_ms();
    snprintf(ver, sizeof(ver), "%d", m->version);
    rc = exec_simple(c, "BEGIN", "begin", err);
    if (rc != 0)
        goto out;
    rc = exec_simple(c, m->sql, "migration", cerr);
    if (rc != 0) {
        (void)exec_simple(c, "ROLLBACK", "rollback", NULL);
        rc = kd_seterr(err, rc, "schema migration %d (%s) failed and was rolled back: %s",
                       m->version, m->name, cerr);
        goto out;
    }
    r = PQexecParams(c, "INSERT INTO schema_migrations (version, name) VALUES ($1::int, $2)", 2,
                     NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        rc = kd_pg_error(c, r, "record migration", cerr);
        (void)exec_simple(c, "ROLLBACK", "rollback", NULL);
        rc = kd_seterr(err, rc, "schema migration %d (%s) rolled back: %s", m->version, m->name,
                       cerr);
        goto out;
    }
    rc = exec_simple(c, "COMMIT", "commit", cerr);
    if (rc != 0) {
        rc = kd_seterr(err, rc, "schema migration %d (%s): commit failed: %s", m->version, m->name,
                       cerr);
        goto out;
    }
    KD_INFO("schema migration applied", "version=%d name=%s ms=%lld", m->version, kd_logq(m->name),
            (long long)(kd_mono_ms() - t0));
out:
    PQclear(r);
    return rc;
}

int kd_store__migrate_conn(PGconn *c, const struct kd_migration *m, size_t n, char *err)
{
    int rc = 0, cur = 0, locked = 0, applied = 0;
    int latest = n ? m[n - 1].version : 0;
    for (size_t i = 1; i < n; i++) {
        if (m[i].version <= m[i - 1].version) {
            rc =
                kd_seterr(err, KD_EINTERNAL, "migrations out of order at version %d", m[i].version);
            goto out;
        }
    }
    rc =
        exec_simple(c, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", "take migration lock", err);
    if (rc != 0)
        goto out;
    locked = 1;
    rc = exec_simple(c,
                     "CREATE TABLE IF NOT EXISTS schema_migrations ("
                     " version integer PRIMARY KEY,"
                     " name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())",
                     "create schema_migrations", err);
    if (rc != 0)
        goto out;
    rc = current_version(c, &cur, err);
    if (rc != 0)
        goto out;
    if (cur > latest) {
        rc = kd_seterr(err, KD_ESTATE,
                       "database schema version %d is newer than this kdet-controller knows (%d): "
                       "run a newer controller",
                       cur, latest);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (m[i].version <= cur)
            continue;
        rc = apply_one(c, &m[i], err);
        if (rc != 0)
            goto out;
        applied++;
    }
    if (applied == 0)
        KD_DEBUG("schema up to date", "version=%d", cur);
out:
    if (locked && PQstatus(c) == CONNECTION_OK)
        (void)exec_simple(c, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")",
                          "release migration lock", NULL);
    return rc;
}

int kd_store_schema_version(void)
{
    return kd_store__migrations[kd_store__nmigrations - 1].version;
}
