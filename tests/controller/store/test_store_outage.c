/*
 * Database outages against a real private PostgreSQL: the server is killed
 * (pg_ctl stop -m immediate) while metrics stream in, the store is closed
 * and reopened while the server is down, memory and spool fill up, and the
 * spool ends in a torn line. Every acknowledged batch must end up stored
 * exactly once and in order.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/time.h"
#include "fx.h"
#include "store/store_int.h"

#define ROWS 5

static char spool_dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(spool_dir, sizeof(spool_dir), "/tmp/kdspool.XXXXXX");
    return mkdtemp(spool_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char p[128];
    (void)state;
    snprintf(p, sizeof(p), "%s/metrics.spool", spool_dir);
    unlink(p);
    rmdir(spool_dir);
    /* A failed test may leave the server stopped: the next one needs it. */
    if (!fx_pg.running) {
        char err[KD_ERRLEN];
        if (kd_pg_restart(&fx_pg, err) != 0)
            fprintf(stderr, "restart: %s\n", err);
    }
    return 0;
}

static off_t spool_size(void)
{
    char p[128];
    struct stat st;
    snprintf(p, sizeof(p), "%s/metrics.spool", spool_dir);
    return stat(p, &st) == 0 ? st.st_size : -1;
}

static void pg_down(const char *mode)
{
    char err[KD_ERRLEN] = "";
    if (kd_pg_stop(&fx_pg, mode, err) != 0)
        fail_msg("stop: %s", err);
}

static void pg_up(void)
{
    char err[KD_ERRLEN] = "";
    if (kd_pg_restart(&fx_pg, err) != 0)
        fail_msg("restart: %s", err);
}

/* Put batch i (rows i*ROWS .. i*ROWS+ROWS-1) with key prefix-i. */
static int put_batch(struct kd_store *s, int64_t trial, const char *prefix, int i, int timeout_ms,
                     char *err)
{
    struct kd_metric_row rows[ROWS];
    char key[64];
    for (int j = 0; j < ROWS; j++)
        rows[j] = (struct kd_metric_row){
            .step = (int64_t)i * ROWS + j,
            .metrics = json_pack("{sisf}", "i", i, "loss", 1.0 / (i + j + 1))};
    snprintf(key, sizeof(key), "%s-%d", prefix, i);
    struct kd_metric_batch b = {trial, KD_METRIC_TRAINING, key, rows, ROWS};
    int rc = kd_store_metrics_put(s, &b, timeout_ms, err);
    for (int j = 0; j < ROWS; j++)
        json_decref(rows[j].metrics);
    return rc;
}

/* Exactly `batches` batches, each once, and rows in step order by id. */
static void check_stored(const char *ci, int64_t trial, int batches)
{
    char q[256];
    PGconn *c = fx_conn(ci);
    snprintf(q, sizeof(q), "SELECT count(*) FROM metrics WHERE trial_id = %lld", (long long)trial);
    long long rows = fx_int(c, q);
    snprintf(q, sizeof(q),
             "SELECT count(DISTINCT step) FROM metrics WHERE trial_id = %lld AND step < %d",
             (long long)trial, batches * ROWS);
    long long distinct = fx_int(c, q);
    if (rows != (long long)batches * ROWS || distinct != rows)
        fail_msg("trial %lld: %lld rows (%lld distinct steps), want %d", (long long)trial, rows,
                 distinct, batches * ROWS);
    snprintf(q, sizeof(q),
             "SELECT count(*) FROM (SELECT step, lag(step) OVER (ORDER BY id) AS prev"
             " FROM metrics WHERE trial_id = %lld) x WHERE prev > step",
             (long long)trial);
    assert_int_equal(fx_int(c, q), 0);
    PQfinish(c);
}

struct producer {
    struct kd_store *s;
    int64_t trial;
    int batches;
    volatile int done; /* batches acknowledged so far */
    int retries;
    char err[KD_ERRLEN];
    int failed;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    for (int i = 0; i < p->batches; i++) {
        int rc;
        /* A worker retries with the same key until the batch is acknowledged. */
        while ((rc = put_batch(p->s, p->trial, "p", i, 2000, p->err)) == KD_ETIMEDOUT)
            p->retries++;
        if (rc != 0) {
            p->failed = 1;
            break;
        }
        __atomic_store_n(&p->done, i + 1, __ATOMIC_RELEASE);
        kd_sleep_ms(2);
    }
    return NULL;
}

static void wait_done(struct producer *p, int n)
{
    int64_t dl = kd_mono_ms() + 60000;
    while (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) < n && !p->failed) {
        if (kd_mono_ms() > dl)
            fail_msg("producer stuck at %d of %d", p->done, n);
        kd_sleep_ms(5);
    }
}

/* The server is killed three times while a worker streams batches. */
static void killed_mid_stream(void **state)
{
    (void)state;
    char ci[512];
    struct kd_store_opts o = {
        .spool_dir = spool_dir, .backoff_min_ms = 20, .backoff_max_ms = 300, .flush_rows = 200};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    struct producer p = {.s = s, .trial = fx_trial(s, "kill", NULL), .batches = 400};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, produce, &p), 0);
    for (int cycle = 1; cycle <= 3; cycle++) {
        wait_done(&p, cycle * p.batches / 4);
        pg_down("immediate");
        kd_sleep_ms(400);
        pg_up();
        /* Under the continuing stream, the spool drains and writes go direct again. */
        struct kd_store_metrics_stats st;
        int64_t dl = kd_mono_ms() + 30000;
        do {
            kd_sleep_ms(20);
            kd_store_metrics_stats(s, &st);
            if (kd_mono_ms() > dl)
                fail_msg("cycle %d: spool not drained (%llu bytes left, db_up %d)", cycle,
                         (unsigned long long)st.spool_bytes, st.db_up);
        } while (!st.db_up || st.spool_bytes > 0);
    }
    pthread_join(th, NULL);
    if (p.failed)
        fail_msg("put failed: %s", p.err);
    assert_int_equal(kd_store_metrics_flush(s, 30000), 0);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    printf("killed_mid_stream: %d batches, %llu spilled to disk, %d put retries, %llu "
           "duplicates skipped\n",
           p.batches, (unsigned long long)st.spilled_batches, p.retries,
           (unsigned long long)st.duplicate_batches);
    assert_true(st.spilled_batches > 0);
    assert_int_equal(st.spool_bytes, 0);
    assert_int_equal(spool_size(), 0);
    check_stored(ci, p.trial, p.batches);
    kd_store_close(s);
}

/* The controller stops while the database is down; the next one writes the spool. */
static void spool_survives_restart(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store_opts o = {.spool_dir = spool_dir, .backoff_min_ms = 20, .backoff_max_ms = 200};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    int64_t t = fx_trial(s, "restart", NULL);
    for (int i = 0; i < 20; i++)
        assert_int_equal(put_batch(s, t, "r", i, 5000, err), 0);
    pg_down("fast");
    /* Acknowledged while the database is down: they are in the spool. */
    for (int i = 20; i < 60; i++) {
        if (put_batch(s, t, "r", i, 5000, err) != 0)
            fail_msg("put %d while down: %s", i, err);
    }
    /* Queued in memory only; close spools them. */
    for (int i = 60; i < 70; i++)
        assert_int_equal(put_batch(s, t, "r", i, 0, err), 0);
    kd_store_close(s);
    assert_true(spool_size() > 0);
    pg_up();
    o.conninfo = ci;
    assert_int_equal(kd_store_open(&o, &s, err), 0);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    assert_int_equal(spool_size(), 0);
    /* A worker that never heard back retries: no duplicates. */
    assert_int_equal(put_batch(s, t, "r", 45, 5000, err), 0);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    check_stored(ci, t, 70);
    kd_store_close(s);
}

/* Without waiting callers, batches stay in memory up to mem_limit, then spill. */
static void memory_bound_spills(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store_opts o = {
        .spool_dir = spool_dir, .backoff_min_ms = 20, .backoff_max_ms = 200, .mem_limit = 4096};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    int64_t t = fx_trial(s, "mem", NULL);
    pg_down("immediate");
    for (int i = 0; i < 200; i++) {
        int rc = put_batch(s, t, "m", i, 0, err);
        if (rc != 0)
            fail_msg("put %d: %s", i, err);
        if (i % 20 == 0)
            kd_sleep_ms(20);
    }
    kd_sleep_ms(300);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    assert_true(st.spilled_batches > 0);
    assert_true(st.queued_bytes <= 2 * 4096);
    assert_true(spool_size() > 0);
    assert_false(st.db_up);
    pg_up();
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    check_stored(ci, t, 200);
    kd_store_close(s);
}

/* No spool: a durable put times out while the database is down, and is written later once. */
static void no_spool_timeout_then_written(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store_opts o = {.backoff_min_ms = 20, .backoff_max_ms = 200};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    int64_t t = fx_trial(s, "nospool", NULL);
    assert_int_equal(put_batch(s, t, "n", 0, 5000, err), 0);
    pg_down("immediate");
    int64_t t0 = kd_mono_ms();
    assert_int_equal(put_batch(s, t, "n", 1, 300, err), KD_ETIMEDOUT);
    assert_true(kd_mono_ms() - t0 < 3000);
    assert_non_null(strstr(err, "retry with the same key is safe"));
    pg_up();
    /* The retry: acknowledged once the first copy or this one is written. */
    assert_int_equal(put_batch(s, t, "n", 1, 20000, err), 0);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    check_stored(ci, t, 2);
    kd_store_close(s);
}

/* Memory and spool full: refused with KD_EAGAIN, nothing acknowledged is lost. */
static void full_buffers_refuse(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store_opts o = {.spool_dir = spool_dir,
                              .backoff_min_ms = 20,
                              .backoff_max_ms = 200,
                              .mem_limit = 2048,
                              .spool_limit = 8192};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    int64_t t = fx_trial(s, "full", NULL);
    pg_down("immediate");
    int acked = 0, rc = 0;
    for (int i = 0; i < 500; i++) {
        rc = put_batch(s, t, "f", i, 2000, err);
        if (rc != 0)
            break;
        acked++;
    }
    assert_int_equal(rc, KD_EAGAIN);
    assert_non_null(strstr(err, "buffer full"));
    assert_true(acked > 5);
    pg_up();
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    check_stored(ci, t, acked);
    kd_store_close(s);
}

/* A crash during an append leaves a torn last line: it is cut, the rest is written. A
 * damaged line is dropped alone. */
static void torn_spool_tail(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "", p[128], line[256];
    struct kd_store_opts o = {.spool_dir = spool_dir};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    int64_t t = fx_trial(s, "torn", NULL);
    kd_store_close(s);
    snprintf(p, sizeof(p), "%s/metrics.spool", spool_dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    for (int i = 0; i < 2; i++) {
        snprintf(line, sizeof(line),
                 "{\"n\":1,\"t\":%lld,\"k\":\"validation\",\"key\":\"x%d\","
                 "\"r\":[[%d,1700000000000,{\"acc\":0.5}]]}\n",
                 (long long)t, i, i);
        fputs(line, f);
        /* A damaged line in the middle: refused alone, the others are written. */
        if (i == 0)
            fputs("{\"n\":1,\"t\":garbage}\n", f);
    }
    fputs("{\"n\":1,\"t\":", f);
    fclose(f);
    o.conninfo = ci;
    assert_int_equal(kd_store_open(&o, &s, err), 0);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    assert_int_equal(spool_size(), 0);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM metrics WHERE kind = 'validation'"), 2);
    PQfinish(c);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    assert_int_equal(st.rejected_batches, 1);
    assert_int_equal(st.written_batches, 2);
    kd_store_close(s);
}

/*
 * The writer's backend stops answering in the middle of a write (SIGSTOP).
 * The client gives up after its deadline, spools the batch, reconnects and
 * writes it; when the stopped backend wakes, it may commit the same batch
 * too. Either way it is stored once.
 */
static void hung_writer(void **state)
{
    (void)state;
    char ci[512], ci2[600], err[KD_ERRLEN] = "";
    fx_newdb(ci, sizeof(ci));
    snprintf(ci2, sizeof(ci2), "%s application_name=kdwhang", ci);
    struct kd_store *s = NULL;
    /* No overview thread: its transactions end with COMMIT too, and the backend stopped below
     * must be the writer's. */
    struct kd_store_opts o = {.conninfo = ci2,
                              .spool_dir = spool_dir,
                              .statement_timeout_ms = 300,
                              .backoff_min_ms = 20,
                              .backoff_max_ms = 200,
                              .sketch_interval_ms = -1};
    assert_int_equal(kd_store_open(&o, &s, err), 0);
    int64_t t = fx_trial(s, "hang", NULL);
    assert_int_equal(put_batch(s, t, "h", 0, 5000, err), 0);
    PGconn *c = fx_conn(ci);
    long long pid =
        fx_int(c, "SELECT pid FROM pg_stat_activity WHERE application_name ="
                  " 'kdwhang' AND (query LIKE 'WITH b AS%' OR query = 'COMMIT') LIMIT 1");
    assert_true(pid > 0);
    assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
    int64_t t0 = kd_mono_ms();
    int rc = put_batch(s, t, "h", 1, 20000, err);
    int64_t ms = kd_mono_ms() - t0;
    kill((pid_t)pid, SIGCONT);
    if (rc != 0)
        fail_msg("put while the backend hangs: %s", err);
    assert_true(ms >= 300 + KD_STORE_CLIENT_GRACE_MS - 100);
    assert_int_equal(put_batch(s, t, "h", 2, 5000, err), 0);
    assert_int_equal(kd_store_metrics_flush(s, 20000), 0);
    kd_sleep_ms(200); /* let the woken backend finish whatever it does */
    check_stored(ci, t, 3);
    PQfinish(c);
    kd_store_close(s);
}

/* Two controllers on one spool would interleave their batches: the second is refused. */
static void spool_in_use(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store_opts o = {.spool_dir = spool_dir};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci)), *s2 = NULL;
    o.conninfo = ci;
    assert_int_equal(kd_store_open(&o, &s2, err), KD_ECONFLICT);
    assert_null(s2);
    assert_non_null(strstr(err, "in use by another process"));
    kd_store_close(s);
    /* Free again once the first one closed. */
    assert_int_equal(kd_store_open(&o, &s2, err), 0);
    kd_store_close(s2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(killed_mid_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(spool_survives_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(memory_bound_spills, setup, teardown),
        cmocka_unit_test_setup_teardown(no_spool_timeout_then_written, setup, teardown),
        cmocka_unit_test_setup_teardown(full_buffers_refuse, setup, teardown),
        cmocka_unit_test_setup_teardown(torn_spool_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(spool_in_use, setup, teardown),
        cmocka_unit_test_setup_teardown(hung_writer, setup, teardown),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
