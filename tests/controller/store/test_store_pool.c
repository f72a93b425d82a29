/*
 * The connection pool against a real private PostgreSQL: many threads share
 * a few connections and never exceed them, connections killed by the
 * server are replaced, statement timeouts and pool waits end in time, and
 * an unreachable server is retried with back-off.
 */
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/time.h"
#include "fx.h"
#include "store/store_int.h"

struct worker {
    struct kd_pool *pool;
    int iterations;
    int max_seen;
    int errors;
    char err[KD_ERRLEN];
};

static void *work(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < w->iterations; i++) {
        PGconn *c = NULL;
        char err[KD_ERRLEN];
        if (kd_pool_get(w->pool, &c, err) != 0) {
            w->errors++;
            snprintf(w->err, sizeof(w->err), "%s", err);
            continue;
        }
        /* How many of the pool's connections are running a query right now. */
        PGresult *r = PQexec(c, "SELECT (SELECT count(*) FROM pg_stat_activity WHERE"
                                " application_name = 'kdpooltest' AND state = 'active'),"
                                " pg_sleep(0.002)");
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            int n = (int)strtol(PQgetvalue(r, 0, 0), NULL, 10);
            if (n > w->max_seen)
                w->max_seen = n;
        } else {
            w->errors++;
            snprintf(w->err, sizeof(w->err), "%s", PQerrorMessage(c));
        }
        PQclear(r);
        kd_pool_put(w->pool, c);
    }
    return NULL;
}

static void concurrency_bounded(void **state)
{
    (void)state;
    enum { THREADS = 8, SIZE = 3 };
    char ci[512], ci2[600], err[KD_ERRLEN] = "";
    fx_newdb(ci, sizeof(ci));
    snprintf(ci2, sizeof(ci2), "%s application_name=kdpooltest", ci);
    struct kd_pool_opts o = {ci2, SIZE, 10000, 5000, 50, 1000};
    struct kd_pool *p = NULL;
    assert_int_equal(kd_pool_open(&o, &p, err), 0);
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.pool = p, .iterations = 40};
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    int max_seen = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        if (w[i].errors)
            fail_msg("thread %d: %d errors, last: %s", i, w[i].errors, w[i].err);
        if (w[i].max_seen > max_seen)
            max_seen = w[i].max_seen;
    }
    printf("at most %d of %d pooled connections busy at once\n", max_seen, SIZE);
    assert_true(max_seen >= 2);
    assert_true(max_seen <= SIZE);
    PGconn *c = fx_conn(ci);
    assert_true(fx_int(c, "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
                          " 'kdpooltest'") <= SIZE);
    PQfinish(c);
    kd_pool_close(p);
}

static void reconnects_after_kill(void **state)
{
    (void)state;
    char ci[512], ci2[600], err[KD_ERRLEN] = "";
    struct kd_store *s = NULL;
    fx_newdb(ci, sizeof(ci));
    snprintf(ci2, sizeof(ci2), "%s application_name=kdkilltest", ci);
    struct kd_store_opts o = {.conninfo = ci2, .pool_size = 2};
    assert_int_equal(kd_store_open(&o, &s, err), 0);
    json_t *cfg = json_pack("{si}", "x", 1), *got = NULL;
    assert_int_equal(kd_store_template_set(s, "a", cfg, err), 0);
    /* The server ends every pooled connection (an operator, a failover). */
    PGconn *c = fx_conn(ci);
    assert_true(fx_int(c, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid)"
                          " FROM pg_stat_activity WHERE application_name = 'kdkilltest') x") >= 1);
    kd_sleep_ms(100);
    /* The next calls get fresh connections without the caller noticing. */
    for (int i = 0; i < 4; i++) {
        if (kd_store_template_get(s, "a", &got, err) != 0)
            fail_msg("after terminate, call %d: %s", i, err);
        assert_true(json_equal(json_object_get(got, "config"), cfg));
        json_decref(got);
    }
    PQfinish(c);
    json_decref(cfg);
    kd_store_close(s);
}

static void statement_timeout(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    fx_newdb(ci, sizeof(ci));
    struct kd_store *s = NULL;
    struct kd_store_opts o = {.conninfo = ci, .statement_timeout_ms = 200};
    assert_int_equal(kd_store_open(&o, &s, err), 0);
    int64_t t0 = kd_mono_ms();
    int rc = kd_store__exec(s, "sleep", "SELECT pg_sleep(5)", 0, NULL, true, NULL, err);
    int64_t ms = kd_mono_ms() - t0;
    assert_int_equal(rc, KD_ETIMEDOUT);
    assert_non_null(strstr(err, "statement timeout"));
    assert_true(ms < 2000);
    /* The connection is still good afterwards. */
    assert_int_equal(kd_store__exec(s, "ping", "SELECT 1", 0, NULL, true, NULL, err), 0);
    kd_store_close(s);
}

static void pool_wait_bounded(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    fx_newdb(ci, sizeof(ci));
    struct kd_pool_opts o = {ci, 1, 200, 5000, 50, 1000};
    struct kd_pool *p = NULL;
    PGconn *a = NULL, *b = NULL;
    assert_int_equal(kd_pool_open(&o, &p, err), 0);
    assert_int_equal(kd_pool_get(p, &a, err), 0);
    int64_t t0 = kd_mono_ms();
    assert_int_equal(kd_pool_get(p, &b, err), KD_ETIMEDOUT);
    int64_t ms = kd_mono_ms() - t0;
    assert_true(ms >= 150 && ms < 2000);
    assert_non_null(strstr(err, "busy"));
    kd_pool_put(p, a);
    assert_int_equal(kd_pool_get(p, &b, err), 0);
    assert_ptr_equal(a, b); /* the same connection, reused */
    kd_pool_put(p, b);
    kd_pool_close(p);
}

static void unreachable_backs_off(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    struct kd_pool_opts o = {
        "host=/nonexistent/kd dbname=x user=kdet connect_timeout=2", 2, 200, 0, 500, 4000};
    struct kd_pool *p = NULL;
    PGconn *c = NULL;
    assert_int_equal(kd_pool_open(&o, &p, err), 0);
    assert_int_equal(kd_pool_get(p, &c, err), KD_ECONNECT);
    /* Within the back-off window no new attempt is made, and the caller is told when. */
    assert_int_equal(kd_pool_get(p, &c, err), KD_ECONNECT);
    assert_non_null(strstr(err, "next attempt in"));
    assert_non_null(strstr(err, "No such file"));
    kd_sleep_ms(550);
    assert_int_equal(kd_pool_get(p, &c, err), KD_ECONNECT);
    assert_null(strstr(err, "next attempt in"));
    kd_pool_close(p);
    /* Bad settings are named. */
    o.size = 0;
    assert_int_equal(kd_pool_open(&o, &p, err), KD_EINVAL);
    assert_non_null(strstr(err, "pool_size"));
}

/* A backend that stops answering (SIGSTOP): the server's statement_timeout cannot fire, the
 * client's deadline does, and the next call gets a new connection. */
static void hung_server(void **state)
{
    (void)state;
    char ci[512], ci2[600], err[KD_ERRLEN] = "";
    fx_newdb(ci, sizeof(ci));
    snprintf(ci2, sizeof(ci2), "%s application_name=kdhang", ci);
    struct kd_store *s = NULL;
    /* No overview thread: the pool's one connection is the test's alone. */
    struct kd_store_opts o = {
        .conninfo = ci2, .pool_size = 1, .statement_timeout_ms = 300, .sketch_interval_ms = -1};
    assert_int_equal(kd_store_open(&o, &s, err), 0);
    /* The pooled connection's own backend (the writer has another). */
    PGresult *r = NULL;
    assert_int_equal(kd_store__exec(s, "ping", "SELECT pg_backend_pid()", 0, NULL, true, &r, err),
                     0);
    long long pid = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PGconn *c = fx_conn(ci);
    assert_true(pid > 0);
    assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
    int64_t t0 = kd_mono_ms();
    int rc = kd_store__exec(s, "ping", "SELECT 1", 0, NULL, true, NULL, err);
    int64_t ms = kd_mono_ms() - t0;
    kill((pid_t)pid, SIGCONT);
    assert_int_equal(rc, KD_ETIMEDOUT);
    assert_non_null(strstr(err, "no answer"));
    assert_true(ms >= 300 + KD_STORE_CLIENT_GRACE_MS - 100 &&
                ms < 300 + KD_STORE_CLIENT_GRACE_MS + 3000);
    assert_int_equal(kd_store__exec(s, "ping", "SELECT 1", 0, NULL, true, NULL, err), 0);
    PQfinish(c);
    kd_store_close(s);
}

/* One failed connect alone (a backend ended as it was made) is waited out within the caller's
 * wait; two in a row make the pool fail fast until its back-off passes. */
static void one_failure_waited_out(void **state)
{
    (void)state;
    char ci[512], admin[512], sql[256], err[KD_ERRLEN] = "";
    fx_newdb(ci, sizeof(ci));
    const char *db = strstr(ci, "dbname=");
    assert_non_null(db);
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)strcspn(db + 7, " "), db + 7);
    PGconn *a = fx_conn(kd_pg_conninfo(&fx_pg, "postgres", admin, sizeof(admin)));
    struct kd_pool_opts o = {ci, 2, 5000, 0, 300, 5000};
    struct kd_pool *p = NULL;
    PGconn *c = NULL;
    assert_int_equal(kd_pool_open(&o, &p, err), 0);
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS false", name);
    PQclear(PQexec(a, sql));
    assert_int_equal(kd_pool_get(p, &c, err), KD_ECONNECT);
    assert_null(strstr(err, "next attempt in"));
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS true", name);
    PQclear(PQexec(a, sql));
    /* Within the first back-off: the caller waits for it, then connects. */
    if (kd_pool_get(p, &c, err) != 0)
        fail_msg("after one failure: %s", err);
    kd_pool_put(p, c);
    kd_pool_close(p);

    /* Two failures in a row: the third call is told when the next attempt is, at once. */
    assert_int_equal(kd_pool_open(&o, &p, err), 0);
    snprintf(sql, sizeof(sql), "ALTER DATABASE %s ALLOW_CONNECTIONS false", name);
    PQclear(PQexec(a, sql));
    assert_int_equal(kd_pool_get(p, &c, err), KD_ECONNECT);
    assert_int_equal(kd_pool_get(p, &c, err), KD_ECONNECT);
    assert_null(strstr(err, "next attempt in"));
    assert_int_equal(kd_pool_get(p, &c, err), KD_ECONNECT);
    assert_non_null(strstr(err, "next attempt in"));
    assert_non_null(strstr(err, "not currently accepting connections"));
    kd_pool_close(p);
    PQfinish(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(concurrency_bounded),    cmocka_unit_test(reconnects_after_kill),
        cmocka_unit_test(statement_timeout),      cmocka_unit_test(pool_wait_bounded),
        cmocka_unit_test(unreachable_backs_off),  cmocka_unit_test(hung_server),
        cmocka_unit_test(one_failure_waited_out),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
