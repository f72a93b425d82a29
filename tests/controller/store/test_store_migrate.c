/*
 * Migrations against a real private PostgreSQL: a fresh database gets every
 * table, a second run changes nothing, processes migrating at once apply
 * each version once, a failing migration is rolled back and named, and a
 * database newer than the binary is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fx.h"
#include "store/store_int.h"

static const char *const TABLES[] = {"experiments", "trials",      "metric_batches",
                                     "metrics",     "checkpoints", "searcher_snapshots",
                                     "events",      "templates",   NULL};

static long long table_exists(PGconn *c, const char *name)
{
    const char *p[1] = {name};
    PGresult *r = PQexecParams(c, "SELECT count(*) FROM pg_tables WHERE tablename = $1", 1, NULL, p,
                               NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

static void fresh_and_idempotent(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    PGconn *c = fx_conn(ci);
    int n = kd_store_schema_version();
    assert_true(n >= 3);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM schema_migrations"), n);
    assert_int_equal(fx_int(c, "SELECT max(version) FROM schema_migrations"), n);
    for (int i = 0; TABLES[i]; i++) {
        if (table_exists(c, TABLES[i]) != 1)
            fail_msg("table %s missing after migration", TABLES[i]);
    }
    long long t0 = fx_int(c, "SELECT extract(epoch FROM max(applied_at)) * 1000000 "
                             "FROM schema_migrations");
    /* Again: nothing is applied twice, nothing changes. */
    assert_int_equal(kd_store_migrate(s, err), 0);
    assert_int_equal(kd_store_migrate(s, err), 0);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM schema_migrations"), n);
    assert_int_equal(fx_int(c, "SELECT extract(epoch FROM max(applied_at)) * 1000000 "
                               "FROM schema_migrations"),
                     t0);
    PQfinish(c);
    kd_store_close(s);
}

/* Several processes migrate one fresh database at the same moment. */
static void concurrent_processes(void **state)
{
    (void)state;
    enum { NPROC = 4 };
    char ci[512];
    int go[2];
    pid_t pids[NPROC];
    fx_newdb(ci, sizeof(ci));
    assert_int_equal(pipe(go), 0);
    for (int i = 0; i < NPROC; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            char b, err[KD_ERRLEN] = "";
            close(go[1]);
            PGconn *c = PQconnectdb(ci);
            if (PQstatus(c) != CONNECTION_OK)
                _exit(2);
            /* Wait for the start signal (EOF when the parent closes the pipe). */
            if (read(go[0], &b, 1) < 0)
                _exit(3);
            int rc = kd_store__migrate_conn(c, kd_store__migrations, kd_store__nmigrations, err);
            if (rc != 0)
                fprintf(stderr, "child %d: %s\n", i, err);
            PQfinish(c);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    close(go[0]);
    close(go[1]);
    for (int i = 0; i < NPROC; i++) {
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("migrating process %d failed (status %d)", i, st);
    }
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM schema_migrations"),
                     (long long)kd_store__nmigrations);
    assert_int_equal(fx_int(c, "SELECT count(DISTINCT version) FROM schema_migrations"),
                     (long long)kd_store__nmigrations);
    PQfinish(c);
}

static void failing_migration_rolled_back(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    size_t n = kd_store__nmigrations;
    struct kd_migration m[16];
    assert_true(n + 2 <= 16);
    memcpy(m, kd_store__migrations, n * sizeof(m[0]));
    m[n] = (struct kd_migration){(int)n + 1, "add run notes",
                                 "CREATE TABLE run_notes (id int);"
                                 "ALTER TABLE experiments ADD COLUMN notes text;"
                                 "SELECT 1 / 0;"};
    m[n + 1] = (struct kd_migration){(int)n + 2, "never reached", "CREATE TABLE later (id int)"};
    fx_newdb(ci, sizeof(ci));
    PGconn *c = fx_conn(ci);
    int rc = kd_store__migrate_conn(c, m, n + 2, err);
    assert_int_not_equal(rc, 0);
    char want[64];
    snprintf(want, sizeof(want), "migration %zu (add run notes)", n + 1);
    if (!strstr(err, want) || !strstr(err, "division by zero") || !strstr(err, "rolled back"))
        fail_msg("error does not name the migration and the cause: %s", err);
    /* The good ones are in, the bad one left nothing behind, the next did not run. */
    assert_int_equal(fx_int(c, "SELECT max(version) FROM schema_migrations"), (long long)n);
    assert_int_equal(table_exists(c, "run_notes"), 0);
    assert_int_equal(table_exists(c, "later"), 0);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM information_schema.columns "
                               "WHERE table_name = 'experiments' AND column_name = 'notes'"),
                     0);
    /* The connection is usable and the lock was released: a fixed list applies. */
    m[n].sql = "CREATE TABLE run_notes (id int)";
    assert_int_equal(kd_store__migrate_conn(c, m, n + 2, err), 0);
    assert_int_equal(fx_int(c, "SELECT max(version) FROM schema_migrations"), (long long)n + 2);
    assert_int_equal(table_exists(c, "run_notes"), 1);
    PQfinish(c);
}

static void newer_database_refused(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    PGconn *c = fx_conn(ci);
    PQclear(PQexec(c, "INSERT INTO schema_migrations (version, name) VALUES (999, 'future')"));
    assert_int_equal(kd_store_migrate(s, err), KD_ESTATE);
    assert_non_null(strstr(err, "newer"));
    assert_non_null(strstr(err, "999"));
    /* And a store cannot open on it. */
    struct kd_store *s2 = NULL;
    struct kd_store_opts o = {.conninfo = ci};
    assert_int_equal(kd_store_open(&o, &s2, err), KD_ESTATE);
    assert_null(s2);
    PQfinish(c);
    kd_store_close(s);
}

static void out_of_order_list_refused(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_migration m[2] = {{2, "b", "SELECT 1"}, {1, "a", "SELECT 1"}};
    fx_newdb(ci, sizeof(ci));
    PGconn *c = fx_conn(ci);
    assert_int_equal(kd_store__migrate_conn(c, m, 2, err), KD_EINTERNAL);
    assert_non_null(strstr(err, "out of order"));
    PQfinish(c);
}

static void unreachable_database(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    struct kd_store *s = NULL;
    struct kd_store_opts o = {.conninfo = "host=/nonexistent/kdet dbname=x user=kdet "
                                          "password=hunter2-secret connect_timeout=2"};
    assert_int_equal(kd_store_open(&o, &s, err), KD_ECONNECT);
    assert_null(s);
    assert_null(strstr(err, "hunter2-secret"));
    assert_non_null(strstr(err, "connect"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fresh_and_idempotent),          cmocka_unit_test(concurrent_processes),
        cmocka_unit_test(failing_migration_rolled_back), cmocka_unit_test(newer_database_refused),
        cmocka_unit_test(out_of_order_list_refused),     cmocka_unit_test(unreachable_database),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
