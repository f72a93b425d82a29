/*
 * Metric ingest through the controller's API against a raw COPY: a private
 * PostgreSQL, kdet-local and the real API (tests/controller/api/fx.c), 100
 * trials reporting at once over keep-alive HTTP (each batch acknowledged
 * durable), then the same rows COPYed by libpq into a table with the
 * metrics table's indexes. Prints rows/s of both and their ratio.
 */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/time.h"
#include "fx.h"

#define ROWS 100 /* rows per batch */

static int trials = 100, batches = 20;

struct rep {
    int idx;
    char trial[32];
    char tok[64];
    int failures;
    char err[256];
};

static size_t sink(char *p, size_t sz, size_t n, void *u)
{
    (void)p;
    (void)u;
    return sz * n;
}

/* The metrics of row r of batch b (the same text for the API and the anchor). */
static int row_metrics(char *out, size_t cap, int b, int r)
{
    return snprintf(out, cap, "{\"loss\":%.6f,\"acc\":%.6f,\"lr\":0.01,\"gnorm\":%.3f}",
                    1.0 / (b * ROWS + r + 1), r / 100.0, r * 0.5);
}

static void *reporter(void *p)
{
    struct rep *rp = p;
    char url[256], auth[128], m[160];
    size_t cap = ROWS * 128 + 256;
    char *body = malloc(cap);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    snprintf(url, sizeof(url), "%s/api/v1/namespaces/default/trials/%s/metrics", fx.url, rp->trial);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", rp->tok);
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    for (int b = 0; b < batches; b++) {
        int n = snprintf(body, cap, "{\"kind\":\"training\",\"key\":\"b%d\",\"rows\":[", b);
        for (int r = 0; r < ROWS; r++) {
            row_metrics(m, sizeof(m), b, r);
            n += snprintf(body + n, cap - (size_t)n, "%s{\"batches\":%d,\"metrics\":%s}",
                          r ? "," : "", b * ROWS + r, m);
        }
        snprintf(body + n, cap - (size_t)n, "]}");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        long code = 0;
        CURLcode cc = curl_easy_perform(c);
        if (cc == CURLE_OK)
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        if (code != 200) {
            /* Not acknowledged: retry with the same key, as a worker does. */
            if (++rp->failures > 100) {
                snprintf(rp->err, sizeof(rp->err), "batch %d: curl %d, HTTP %ld", b, (int)cc, code);
                break;
            }
            b--;
        }
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(body);
    return NULL;
}

/* CPU seconds of this process (the API and the clients). */
static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* CPU seconds of the postmaster `pm` and its children that are alive now (from /proc). */
static double pg_cpu(long pm)
{
    double sum = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    long tck = sysconf(_SC_CLK_TCK);
    while (d && (e = readdir(d)) != NULL) {
        char path[300], buf[1024];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *p = strrchr(buf, ')');
        long pid = strtol(e->d_name, NULL, 10), ppid = 0;
        unsigned long ut = 0, st = 0;
        if (!p || sscanf(p + 2, "%*c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ppid, &ut,
                         &st) != 3)
            continue;
        if (pid == pm || ppid == pm)
            sum += (double)(ut + st) / (double)tck;
    }
    if (d)
        closedir(d);
    return sum;
}

static void exec_ok(PGconn *pc, const char *sql)
{
    PGresult *r = PQexec(pc, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(pc));
    PQclear(r);
}

/* The anchor: one COPY of the same rows into a table indexed as `metrics` is. */
static double copy_anchor(long pm, double *cpu_per_row)
{
    PGconn *pc = PQconnectdb(fx.conninfo);
    assert_int_equal(PQstatus(pc), CONNECTION_OK);
    exec_ok(pc, "DROP TABLE IF EXISTS anchor_metrics;"
                "CREATE TABLE anchor_metrics (id bigserial PRIMARY KEY, trial_id bigint NOT NULL,"
                " kind text NOT NULL, step bigint NOT NULL, metrics jsonb NOT NULL,"
                " reported_at timestamptz NOT NULL, batch_key text NOT NULL);"
                "CREATE INDEX anchor_trial_kind_step ON anchor_metrics (trial_id, kind, step)");
    double cpu0 = self_cpu(), pg0 = pg_cpu(pm);
    struct kd_buf line = KD_BUF_INIT(1 << 20);
    char m[160];
    int64_t t0 = kd_mono_ns();
    exec_ok(pc, "BEGIN");
    PGresult *r = PQexec(pc, "COPY anchor_metrics (trial_id, kind, step, metrics, reported_at,"
                             " batch_key) FROM STDIN");
    assert_int_equal(PQresultStatus(r), PGRES_COPY_IN);
    PQclear(r);
    for (int t = 0; t < trials; t++) {
        for (int b = 0; b < batches; b++) {
            for (int i = 0; i < ROWS; i++) {
                char tmp[320];
                row_metrics(m, sizeof(m), b, i);
                int n = snprintf(tmp, sizeof(tmp),
                                 "%d\ttraining\t%d\t%s\t2026-11-27 00:00:00+00\tb%d\n", t + 1,
                                 b * ROWS + i, m, b);
                assert_int_equal(kd_buf_append(&line, tmp, (size_t)n), 0);
            }
            if (line.len > (512u << 10)) {
                assert_int_equal(PQputCopyData(pc, line.data, (int)line.len), 1);
                line.len = 0;
            }
        }
    }
    if (line.len > 0)
        assert_int_equal(PQputCopyData(pc, line.data, (int)line.len), 1);
    assert_int_equal(PQputCopyEnd(pc, NULL), 1);
    r = PQgetResult(pc);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        fail_msg("COPY: %s", PQerrorMessage(pc));
    PQclear(r);
    while ((r = PQgetResult(pc)) != NULL)
        PQclear(r);
    exec_ok(pc, "COMMIT");
    int64_t ns = kd_mono_ns() - t0;
    *cpu_per_row = (self_cpu() - cpu0 + pg_cpu(pm) - pg0) / ((double)trials * batches * ROWS);
    kd_buf_free(&line);
    PQfinish(pc);
    return (double)trials * batches * ROWS / ((double)ns / 1e9);
}

static void bench_ingest(void **state)
{
    (void)state;
    struct rep *reps = calloc((size_t)trials, sizeof(*reps));
    pthread_t *th = calloc((size_t)trials, sizeof(*th));
    char uid[64];
    fx_experiment("ingest", "validation_loss");
    for (int i = 0; i < trials; i++) {
        reps[i].idx = i;
        snprintf(reps[i].trial, sizeof(reps[i].trial), "ingest-%d", i);
        fx_trial("ingest", reps[i].trial, 100, uid, sizeof(uid));
        fx_token(reps[i].trial, uid, reps[i].tok, sizeof(reps[i].tok));
    }
    long pm = 0;
    {
        PGconn *pc = PQconnectdb(fx.conninfo);
        PGresult *r = PQexec(pc, "SELECT pg_backend_pid()");
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%s/status", PQgetvalue(r, 0, 0));
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof(line), f))
            if (strncmp(line, "PPid:", 5) == 0)
                pm = strtol(line + 5, NULL, 10);
        if (f)
            fclose(f);
        PQclear(r);
        PQfinish(pc);
    }
    /* The anchor runs before and after the API, and the two are averaged: the machine is shared. */
    double acpu1 = 0, anchor = copy_anchor(pm, &acpu1);
    double cpu0 = self_cpu(), pg0 = pg_cpu(pm);
    int64_t t0 = kd_mono_ns();
    for (int i = 0; i < trials; i++)
        pthread_create(&th[i], NULL, reporter, &reps[i]);
    int retried = 0;
    for (int i = 0; i < trials; i++) {
        pthread_join(th[i], NULL);
        if (reps[i].err[0])
            fail_msg("%s: %s", reps[i].trial, reps[i].err);
        retried += reps[i].failures;
    }
    int64_t ns = kd_mono_ns() - t0;
    double cpu = self_cpu() - cpu0, pgc = pg_cpu(pm) - pg0;
    long long total = (long long)trials * batches * ROWS;
    double api = (double)total / ((double)ns / 1e9);
    /* Every acknowledged row is stored once. */
    assert_int_equal(fx_sql_int("SELECT count(*) FROM metrics"), total);
    assert_int_equal(fx_sql_int("SELECT count(*) FROM metric_batches"),
                     (long long)trials * batches);
    double acpu = 0, acpu2 = 0;
    double anchor2 = copy_anchor(pm, &acpu2);
    anchor = (anchor + anchor2) / 2;
    acpu = (acpu1 + acpu2) / 2;
    printf("ingest: %d trials x %d batches x %d rows, each batch acknowledged durable "
           "(%d retried)\n",
           trials, batches, ROWS, retried);
    if (fx_kube_qps < 0)
        printf("  the API's Kubernetes client without its rate limit (each trial's first report "
               "reads its Trial and Experiment; KD_BENCH_INGEST_KUBE_QPS=50: the default)\n");
    else if (fx_kube_qps > 0)
        printf("  the API's Kubernetes client at %.0f requests/s\n", fx_kube_qps);
    else
        printf("  the API's Kubernetes client at its default rate limit\n");
    printf("  API (HTTP -> durable in PostgreSQL): %8.0f rows/s\n", api);
    printf("  CPU per 1,000 rows: API and clients %.1f ms, PostgreSQL %.1f ms\n",
           cpu * 1e6 / (double)total, pgc * 1e6 / (double)total);
    printf(
        "  raw COPY, same rows and indexes:      %8.0f rows/s (before the API %.0f, after %.0f)\n",
        anchor, 2 * anchor - anchor2, anchor2);
    printf("  CPU per 1,000 rows: COPY client and PostgreSQL %.1f ms\n", acpu * 1e6);
    printf("  ratio API / COPY:                     %8.2fx (goal >= 0.50x)\n", api / anchor);
    printf("  ratio of CPU per row, COPY / API:     %8.2fx\n",
           acpu / ((cpu + pgc) / (double)total));
    free(reps);
    free(th);
}

int main(void)
{
    if (getenv("KD_BENCH_INGEST_TRIALS"))
        trials = (int)strtol(getenv("KD_BENCH_INGEST_TRIALS"), NULL, 10);
    if (getenv("KD_BENCH_INGEST_BATCHES"))
        batches = (int)strtol(getenv("KD_BENCH_INGEST_BATCHES"), NULL, 10);
    /* Without the client's limit, as `--kube-api-qps 0` runs the controller: the first report of
     * each of 100 trials at once reads its Trial and Experiment, and at 50 requests/s after a burst
     * of 100 that alone took about 4 s, whatever the number of batches. */
    fx_kube_qps = -1;
    if (getenv("KD_BENCH_INGEST_KUBE_QPS"))
        fx_kube_qps = strtod(getenv("KD_BENCH_INGEST_KUBE_QPS"), NULL);
    const struct CMUnitTest t[] = {cmocka_unit_test(bench_ingest)};
    return cmocka_run_group_tests(t, fx_setup, fx_teardown);
}
