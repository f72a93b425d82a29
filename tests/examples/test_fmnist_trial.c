/*
 * examples/fashion-mnist-c as a kdet trial against the real controller API
 * (private PostgreSQL, real kdet-local, the API on 127.0.0.1), run by
 * kdet-launch --nproc 2: the test plays the searcher by patching the
 * Trial's spec.validateAfter and closing it; the validation metrics in the
 * store equal what the program printed, it exits 0 on "stop", its
 * checkpoints are registered and lie in shared_fs storage with a manifest;
 * a second attempt resumes from the latest one, and a pause preempts it
 * (checkpoint, exit 0); a third one checkpoints when kdet-launch gets
 * SIGTERM; a PBT child starts from that checkpoint with lengths in epochs.
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <libpq-fe.h>

#include "core/time.h"
#include "fx.h"

static char tmp[64];                 /* checkpoints and logs */
static char storage[256];            /* KDET_CHECKPOINT_STORAGE */
static const char *unit = "batches"; /* KDET_LENGTH_UNIT */

struct launch {
    pid_t pid;
    char log[128];
};

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(s, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

/* Processes whose environment has our TMPDIR: the launchers' workers. */
static int leftovers(void)
{
    char want[128], path[64], env[65536];
    int n = 0, wl = snprintf(want, sizeof(want), "TMPDIR=%s", tmp);
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%.20s/environ", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t len = fread(env, 1, sizeof(env), f);
        fclose(f);
        for (size_t i = 0; i + (size_t)wl < len; i += strlen(env + i) + 1)
            if (memcmp(env + i, want, (size_t)wl) == 0 && env[i + (size_t)wl] == '\0')
                n++;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* kdet-launch --nproc 2 fashion-mnist-c for trial `name` with its token; latest may be NULL. */
static void start(struct launch *l, const char *name, const char *tok, const char *latest, int run)
{
    char bin[512], prog[512];
    const char *b = getenv("KD_BUILD") ? getenv("KD_BUILD") : "build";
    snprintf(bin, sizeof(bin), "%s/bin/kdet-launch", b);
    snprintf(prog, sizeof(prog), "%s/bin/fashion-mnist-c", b);
    snprintf(l->log, sizeof(l->log), "%s/run%d.log", tmp, run);
    l->pid = fork();
    assert_true(l->pid >= 0);
    if (l->pid == 0) {
        char port[16], rid[32];
        snprintf(port, sizeof(port), "%d", free_port());
        snprintf(rid, sizeof(rid), "fm-run-%d", run);
        setenv("KDET_CONTROLLER_URL", fx.url, 1);
        setenv("KDET_TOKEN", tok, 1);
        setenv("KDET_TRIAL_ID", name, 1);
        setenv("KDET_NAMESPACE", "default", 1);
        setenv("KDET_RUN_ID", rid, 1);
        setenv("KDET_MASTER_PORT", port, 1);
        setenv("KDET_CHECKPOINT_STORAGE", storage, 1);
        setenv("KDET_LENGTH_UNIT", unit, 1);
        setenv("KDET_HPARAMS", "{\"global_batch_size\": 64, \"hidden_units\": 64}", 1);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        setenv("TMPDIR", tmp, 1);
        setenv("DTRAIN_TIMEOUT", "60", 1);
        if (latest != NULL)
            setenv("KDET_LATEST_CHECKPOINT", latest, 1);
        else
            unsetenv("KDET_LATEST_CHECKPOINT");
        FILE *f = freopen(l->log, "w", stdout);
        if (f == NULL || dup2(1, 2) < 0)
            _exit(97);
        execl(bin, bin, "--nproc", "2", "--grace-period", "2", prog, "--train-limit", "3200",
              "--test-limit", "500", "--report-every", "5", "--checkpoint-period", "15", "--quiet",
              (char *)NULL);
        _exit(98);
    }
}

/* Wait for the launcher up to timeout_ms; its exit code (or -1, killed, on a timeout). */
static int finish(struct launch *l, int timeout_ms)
{
    int st = 0;
    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        if (waitpid(l->pid, &st, WNOHANG) == l->pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        kd_sleep_ms(50);
    }
    kill(l->pid, SIGKILL);
    waitpid(l->pid, &st, 0);
    return -1;
}

static char *slurp(const char *path)
{
    static char buf[1 << 18];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

/* The log on stderr (fail_msg truncates); returns "(above)". */
static const char *dump(const char *path)
{
    fprintf(stderr, "---- %s\n%s----\n", path, slurp(path));
    return "(above)";
}

/* One text value of SQL (a static copy; "" when no row). */
static const char *sql_text(const char *sql)
{
    static char v[4096];
    v[0] = '\0';
    assert_int_equal(kd_store_metrics_flush(fx.store, 10000), 0);
    PGconn *c = PQconnectdb(fx.conninfo);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    if (PQntuples(r) > 0)
        snprintf(v, sizeof(v), "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(c);
    return v;
}

static long long count_where(const char *uid, const char *table, const char *cond)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM %s WHERE trial_id = (SELECT id FROM trials WHERE uid = "
             "'%s') AND %s",
             table, uid, cond);
    return strtoll(sql_text(sql), NULL, 10);
}

/* Wait (bounded) until `table` has at least n rows for the trial matching cond. */
static void wait_rows(struct launch *l, const char *uid, const char *table, const char *cond,
                      long long n)
{
    for (int i = 0; i < 600; i++) {
        if (count_where(uid, table, cond) >= n)
            return;
        int st = 0;
        if (waitpid(l->pid, &st, WNOHANG) == l->pid)
            fail_msg("the trial exited (status %d) before %lld %s rows with %s; its log:\n%s", st,
                     n, table, cond, dump(l->log));
        kd_sleep_ms(100);
    }
    fail_msg("no %lld %s rows with %s within 60 s; its log:\n%s", n, table, cond, dump(l->log));
}

/* Every "validation batches=N validation_loss=X accuracy=Y" line equals the stored row. */
static int check_validations(const char *uid, const char *log)
{
    int n = 0;
    for (const char *p = strstr(log, "[rank=0] validation batches="); p != NULL;
         p = strstr(p + 1, "[rank=0] validation batches=")) {
        long long b = 0;
        double loss = 0, acc = 0;
        assert_int_equal(sscanf(p,
                                "[rank=0] validation batches=%lld validation_loss=%lf accuracy=%lf",
                                &b, &loss, &acc),
                         3);
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "SELECT (metrics->>'validation_loss') || ' ' || (metrics->>'accuracy') FROM "
                 "metrics WHERE kind = 'validation' AND step = %lld AND trial_id = (SELECT id "
                 "FROM trials WHERE uid = '%s')",
                 b, uid);
        double sl = -1, sa = -1;
        assert_int_equal(sscanf(sql_text(sql), "%lf %lf", &sl, &sa), 2);
        assert_true(sl == loss); /* %.17g both ways: exact */
        assert_true(sa == acc);
        assert_true(loss > 0 && acc > 0.3);
        n++;
    }
    return n;
}

/* The checkpoint with the most batches: its uuid; its files and manifest are in storage. */
static const char *latest_checkpoint(const char *trial, const char *uid, long long batches)
{
    static char uuid[64];
    char sql[512], path[512];
    snprintf(sql, sizeof(sql),
             "SELECT uuid || ' ' || steps_completed || ' ' || storage_path || ' ' || size_bytes "
             "FROM checkpoints WHERE trial_id = (SELECT id FROM trials WHERE uid = '%s') ORDER "
             "BY steps_completed DESC LIMIT 1",
             uid);
    char sp[512];
    long long steps = 0, size = 0;
    assert_int_equal(sscanf(sql_text(sql), "%63s %lld %511s %lld", uuid, &steps, sp, &size), 4);
    assert_int_equal(steps, batches);
    snprintf(path, sizeof(path), "file://%s/store/%s", tmp, uuid);
    assert_string_equal(sp, path);
    struct stat sb;
    snprintf(path, sizeof(path), "%s/store/%s/kdet-manifest.json", tmp, uuid);
    assert_int_equal(stat(path, &sb), 0);
    snprintf(path, sizeof(path), "%s/store/%s/state.bin", tmp, uuid);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal((long long)sb.st_size, size);
    /* The Trial's status points at it too. */
    json_t *t = fx_get_trial(trial);
    json_t *lc = json_object_get(json_object_get(t, "status"), "latestCheckpoint");
    assert_string_equal(json_string_value(json_object_get(lc, "uuid")), uuid);
    json_decref(t);
    return uuid;
}

static void test_trial(void **state)
{
    (void)state;
    char uid[64], tok[128];
    struct launch l;
    fx_experiment("fm-exp", "validation_loss");
    fx_trial("fm-exp", "fm-exp-1", 20, uid, sizeof(uid));
    fx_token("fm-exp-1", uid, tok, sizeof(tok));

    /* Attempt 1: validate at 20, then at 40 (the searcher moves the target), then stop. */
    start(&l, "fm-exp-1", tok, NULL, 1);
    wait_rows(&l, uid, "metrics", "kind = 'validation' AND step = 20", 1);
    fx_patch("trials", "fm-exp-1", NULL, "{\"spec\":{\"validateAfter\":40}}");
    wait_rows(&l, uid, "metrics", "kind = 'validation' AND step = 40", 1);
    fx_patch("trials", "fm-exp-1", NULL, "{\"spec\":{\"closed\":true}}");
    int rc = finish(&l, 60000);
    const char *log = slurp(l.log);
    if (rc != 0)
        fail_msg("kdet-launch exited %d; its log:\n%s", rc, dump(l.log));
    assert_int_equal(check_validations(uid, log), 2);
    assert_null(strstr(log, tok)); /* the token is never printed */
    assert_true(count_where(uid, "metrics", "kind = 'training'") >= 8); /* every 5 batches */
    assert_int_equal(count_where(uid, "checkpoints", "steps_completed IN (20, 40)"), 2);
    /* --checkpoint-period 15 (min_checkpoint_period) adds 15 and 30, and nothing else */
    assert_int_equal(count_where(uid, "checkpoints", "steps_completed IN (15, 30)"), 2);
    assert_int_equal(count_where(uid, "checkpoints", "true"), 4);
    char first[64];
    snprintf(first, sizeof(first), "%s", latest_checkpoint("fm-exp-1", uid, 40));
    assert_non_null(strstr(log, "registered"));

    /* Attempt 2 resumes from it; a pause preempts it: checkpoint, register, exit 0. */
    fx_patch("trials", "fm-exp-1", NULL, "{\"spec\":{\"validateAfter\":1000000,\"closed\":false}}");
    start(&l, "fm-exp-1", tok, first, 2);
    wait_rows(&l, uid, "metrics", "kind = 'training' AND step > 60", 1);
    fx_patch("trials", "fm-exp-1", NULL, "{\"spec\":{\"paused\":true}}");
    rc = finish(&l, 60000);
    log = slurp(l.log);
    if (rc != 0)
        fail_msg("kdet-launch exited %d after the pause; its log:\n%s", rc, dump(l.log));
    char want[160];
    snprintf(want, sizeof(want), "[rank=0] restored checkpoint %s (batches=40)", first);
    assert_non_null(strstr(log, want));
    const char *p = strstr(log, "[rank=0] preempted at batches=");
    assert_non_null(p);
    long long at = strtoll(p + strlen("[rank=0] preempted at batches="), NULL, 10);
    assert_true(at > 60 && at < 1000000);
    const char *second = latest_checkpoint("fm-exp-1", uid, at);
    assert_string_not_equal(second, first);
    /* No validation for attempt 2: the target was never reached. */
    assert_int_equal(count_where(uid, "metrics", "kind = 'validation'"), 2);

    /* Attempt 3 from the pause's checkpoint, stopped by SIGTERM to kdet-launch (pods deleted):
     * the workers checkpoint on the way out, the launcher reports the signal (143). */
    char third[64];
    snprintf(third, sizeof(third), "%s", second);
    fx_patch("trials", "fm-exp-1", NULL, "{\"spec\":{\"paused\":false}}");
    start(&l, "fm-exp-1", tok, third, 3);
    char cond[128];
    snprintf(cond, sizeof(cond), "kind = 'training' AND step > %lld", at + 20);
    wait_rows(&l, uid, "metrics", cond, 1);
    kill(l.pid, SIGTERM);
    rc = finish(&l, 30000);
    log = slurp(l.log);
    if (rc != 143)
        fail_msg("kdet-launch exited %d after SIGTERM, not 143; its log:\n%s", rc, dump(l.log));
    p = strstr(log, "[rank=0] preempted at batches=");
    assert_non_null(p);
    long long at3 = strtoll(p + strlen("[rank=0] preempted at batches="), NULL, 10);
    assert_non_null(strstr(p, "(SIGTERM)"));
    assert_true(at3 > at + 20);
    snprintf(third, sizeof(third), "%s", latest_checkpoint("fm-exp-1", uid, at3));

    /* A PBT child: another trial starts from that checkpoint (weights only, its own batches
     * from 0), with lengths in epochs (3200 samples / 64 = 50 batches an epoch). */
    char uid2[64], tok2[128];
    fx_trial("fm-exp", "fm-exp-2", 1, uid2, sizeof(uid2));
    fx_token("fm-exp-2", uid2, tok2, sizeof(tok2));
    unit = "epochs";
    start(&l, "fm-exp-2", tok2, third, 4);
    wait_rows(&l, uid2, "metrics", "kind = 'validation'", 1);
    fx_patch("trials", "fm-exp-2", NULL, "{\"spec\":{\"closed\":true}}");
    rc = finish(&l, 60000);
    unit = "batches";
    log = slurp(l.log);
    if (rc != 0)
        fail_msg("the PBT child exited %d; its log:\n%s", rc, dump(l.log));
    snprintf(want, sizeof(want), "[rank=0] restored checkpoint %s (batches=%lld, weights only",
             third, at3);
    assert_non_null(strstr(log, want));
    assert_non_null(strstr(log, "[rank=0] validation batches=50 "));
    assert_int_equal(check_validations(uid2, log), 1);
    latest_checkpoint("fm-exp-2", uid2, 50);
}

static int setup(void **state)
{
    snprintf(tmp, sizeof(tmp), "/tmp/fmnist-trial-XXXXXX");
    if (mkdtemp(tmp) == NULL)
        return -1;
    char d[128];
    snprintf(d, sizeof(d), "%s/store", tmp);
    mkdir(d, 0755);
    snprintf(storage, sizeof(storage), "{\"type\":\"shared_fs\",\"host_path\":\"%s\"}", d);
    return fx_setup(state);
}

static int rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_rf(p);
        else
            unlink(p);
    }
    if (d != NULL)
        closedir(d);
    return rmdir(dir);
}

static int teardown(void **state)
{
    int rc = fx_teardown(state);
    /* No temp dirs of the trial are left (checkpoint dirs are removed after upload). */
    DIR *d = opendir(tmp);
    struct dirent *e;
    int left = 0;
    while (d != NULL && (e = readdir(d)) != NULL)
        left += strncmp(e->d_name, "fashion-mnist-c-", 16) == 0;
    if (d != NULL)
        closedir(d);
    if (left != 0)
        fprintf(stderr, "%d temp dirs of fashion-mnist-c left in %s\n", left, tmp);
    rm_rf(tmp);
    /* No process left: the launchers were reaped, their workers are gone. */
    int procs = leftovers();
    if (procs != 0)
        fprintf(stderr, "%d worker processes left\n", procs);
    left += procs;
    return rc == 0 && left == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_trial)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
