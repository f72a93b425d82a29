/*
 * Bounded soak (tag slow): four workers stream metric batches into four
 * trials while the private PostgreSQL is killed and restarted at random
 * moments (seeded; the seed is printed). Afterwards every acknowledged
 * batch is stored exactly once and each trial's rows are in order.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/time.h"
#include "fx.h"

enum { WORKERS = 4, BATCHES = 250, ROWS = 4, CYCLES = 8 };

struct worker {
    struct kd_store *s;
    int64_t trial;
    int acked;
    int timeouts;
    int failed;
    char err[KD_ERRLEN];
    unsigned seed;
};

static volatile int stop_flag;

static void *stream(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < BATCHES && !stop_flag; i++) {
        struct kd_metric_row rows[ROWS];
        char key[32];
        for (int j = 0; j < ROWS; j++)
            rows[j] = (struct kd_metric_row){.step = (int64_t)i * ROWS + j,
                                             .metrics = json_pack("{sisi}", "i", i, "j", j)};
        snprintf(key, sizeof(key), "w-%d", i);
        struct kd_metric_batch b = {w->trial, KD_METRIC_TRAINING, key, rows, ROWS};
        int rc;
        /* Retry with the same key until acknowledged, as a worker does. */
        while ((rc = kd_store_metrics_put(w->s, &b, 3000, w->err)) == KD_ETIMEDOUT ||
               rc == KD_EAGAIN)
            w->timeouts++;
        for (int j = 0; j < ROWS; j++)
            json_decref(rows[j].metrics);
        if (rc != 0) {
            w->failed = 1;
            break;
        }
        __atomic_store_n(&w->acked, i + 1, __ATOMIC_RELEASE);
        kd_sleep_ms(10 + (int64_t)(rand_r(&w->seed) % 60));
    }
    return NULL;
}

static void soak(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "", spool[64] = "/tmp/kdsoak.XXXXXX", q[256];
    unsigned seed = (unsigned)kd_wall_ms();
    const char *env = getenv("KD_SOAK_SEED");
    if (env)
        seed = (unsigned)strtoul(env, NULL, 10);
    printf("soak seed %u (set KD_SOAK_SEED to replay)\n", seed);
    assert_non_null(mkdtemp(spool));
    struct kd_store_opts o = {
        .spool_dir = spool, .backoff_min_ms = 20, .backoff_max_ms = 400, .flush_rows = 100};
    struct kd_store *s = fx_store(&o, ci, sizeof(ci));
    struct worker w[WORKERS];
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "soak%d", i);
        w[i] = (struct worker){.s = s, .trial = fx_trial(s, tag, NULL), .seed = seed + (unsigned)i};
        assert_int_equal(pthread_create(&th[i], NULL, stream, &w[i]), 0);
    }
    for (int c = 0; c < CYCLES; c++) {
        kd_sleep_ms(100 + (int64_t)(rand_r(&seed) % 700));
        const char *mode = rand_r(&seed) % 3 ? "immediate" : "fast";
        if (kd_pg_stop(&fx_pg, mode, err) != 0)
            fail_msg("cycle %d: stop: %s", c, err);
        kd_sleep_ms((int64_t)(rand_r(&seed) % 800));
        if (kd_pg_restart(&fx_pg, err) != 0)
            fail_msg("cycle %d: restart: %s", c, err);
        int total = 0;
        for (int i = 0; i < WORKERS; i++)
            total += __atomic_load_n(&w[i].acked, __ATOMIC_ACQUIRE);
        printf("cycle %d: server stopped (%s) and restarted; %d of %d batches acknowledged\n", c,
               mode, total, WORKERS * BATCHES);
        fflush(stdout);
    }
    int timeouts = 0;
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(th[i], NULL);
        if (w[i].failed)
            fail_msg("worker %d: %s", i, w[i].err);
        assert_int_equal(w[i].acked, BATCHES);
        timeouts += w[i].timeouts;
    }
    assert_int_equal(kd_store_metrics_flush(s, 60000), 0);
    struct kd_store_metrics_stats st;
    kd_store_metrics_stats(s, &st);
    printf("soak: %d batches, %llu spilled, %llu duplicates skipped, %d put retries\n",
           WORKERS * BATCHES, (unsigned long long)st.spilled_batches,
           (unsigned long long)st.duplicate_batches, timeouts);
    PGconn *c = fx_conn(ci);
    for (int i = 0; i < WORKERS; i++) {
        snprintf(q, sizeof(q), "SELECT count(*) FROM metrics WHERE trial_id = %lld",
                 (long long)w[i].trial);
        long long rows = fx_int(c, q);
        snprintf(q, sizeof(q), "SELECT count(DISTINCT step) FROM metrics WHERE trial_id = %lld",
                 (long long)w[i].trial);
        long long distinct = fx_int(c, q);
        if (rows != BATCHES * ROWS || distinct != rows)
            fail_msg("trial %lld: %lld rows, %lld distinct, want %d", (long long)w[i].trial, rows,
                     distinct, BATCHES * ROWS);
        snprintf(q, sizeof(q),
                 "SELECT count(*) FROM (SELECT step, lag(step) OVER (ORDER BY id) AS prev"
                 " FROM metrics WHERE trial_id = %lld) x WHERE prev > step",
                 (long long)w[i].trial);
        assert_int_equal(fx_int(c, q), 0);
    }
    PQfinish(c);
    kd_store_close(s);
    char p[128];
    snprintf(p, sizeof(p), "%s/metrics.spool", spool);
    unlink(p);
    rmdir(spool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(soak)};
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
