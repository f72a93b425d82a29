/*
 * The kdet Python harness against the real controller API (private
 * PostgreSQL, real kdet-local, the API; tests/controller/api/fx.c): a
 * PyTorchTrial run by `python3 -m kdet.harness` follows the searcher's
 * operations, its metrics and checkpoints are stored, a pause preempts it
 * after a checkpoint, and a wrong token fails without showing the token;
 * Determined's Trainer API (the trainer-api example) follows the searcher,
 * is paused and resumes from its checkpoint.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/time.h"
#include "fx.h"

extern char **environ;

static char out_path[256];

static const char *src_dir(void)
{
    return getenv("KD_SRC") ? getenv("KD_SRC") : ".";
}

/* The env of a worker of `trial` with `token`, as a trial's pod has it. */
static void worker_env(const char *trial, const char *token, const char *sleep_s)
{
    char pypath[1024], lib[1024], ckdir[256];
    const char *build = getenv("KD_BUILD") ? getenv("KD_BUILD") : "build";
    snprintf(pypath, sizeof(pypath), "%s/dtrain/python", src_dir());
    snprintf(lib, sizeof(lib), "%s/lib/libdtrain.so", build);
    snprintf(ckdir, sizeof(ckdir), "/tmp/kdet-pyapi-%d", (int)getpid());
    snprintf(out_path, sizeof(out_path), "/tmp/kdet-pyapi-%d.out", (int)getpid());
    setenv("PYTHONPATH", pypath, 1);
    setenv("KDET_LIBDTRAIN", lib, 1);
    setenv("KDET_CONTROLLER_URL", fx.url, 1);
    setenv("KDET_TOKEN", token, 1);
    setenv("KDET_TRIAL_ID", trial, 1);
    setenv("KDET_RUN_ID", "py0123456789", 1);
    setenv("KDET_CHECKPOINT_DIR", ckdir, 1);
    setenv("KDET_SEARCHER_METRIC", "validation_loss", 1);
    setenv("KDET_TEST_SLEEP", sleep_s, 1);
    setenv("KDET_PREEMPT_EVERY", "5", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("KDET_HPARAMS",
           "{\"synthetic\":true,\"lr\":0.05,\"batch_size\":16,\"train_examples\":512,"
           "\"validation_examples\":256,\"hidden\":16}",
           1);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("KDET_LATEST_CHECKPOINT");
    mkdir(ckdir, 0700);
}

/* Start argv with its output in out_path. */
static pid_t start_worker(char **argv)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("posix_spawn: %s", strerror(rc));
    return pid;
}

/* Wait up to timeout_ms for pid; kill it on timeout (the test fails). */
/* Start the harness for `trial` with `token`; its output goes to out_path. */
static pid_t start_harness(const char *trial, const char *token, const char *cls,
                           const char *sleep_s)
{
    char spec[1024];
    snprintf(spec, sizeof(spec), "%s/tests/dtrain/python/trials.py:%s", src_dir(), cls);
    worker_env(trial, token, sleep_s);
    char *argv[] = {
        "/usr/bin/python3", "-m", "kdet.harness", "--trial", spec, "--report-every", "5", NULL};
    return start_worker(argv);
}

/* Start the Trainer-API example (examples/pytorch-fashion-mnist/trainer-api)
 * as a trial's entrypoint would, with the hyperparameters of its const.yaml. */
static pid_t start_trainer(const char *trial, const char *exp, const char *token,
                           const char *latest)
{
    char script[1024];
    snprintf(script, sizeof(script), "%s/examples/pytorch-fashion-mnist/trainer-api/train.py",
             src_dir());
    worker_env(trial, token, "0");
    setenv("KDET_EXPERIMENT", exp, 1);
    setenv("KDET_LENGTH_UNIT", "batches", 1);
    setenv("KDET_HPARAMS",
           "{\"global_batch_size\":32,\"learning_rate\":0.05,\"hidden_units\":32,"
           "\"momentum\":0.9,\"gamma\":1.0}",
           1);
    if (latest != NULL)
        setenv("KDET_LATEST_CHECKPOINT", latest, 1);
    char *argv[] = {"/usr/bin/python3", script, NULL};
    return start_worker(argv);
}

static int wait_exit(pid_t pid, long timeout_ms)
{
    int st = 0;
    int64_t t0 = kd_mono_ms();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (kd_mono_ms() - t0 > timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("the harness did not exit within %ld ms", timeout_ms);
        }
        kd_sleep_ms(50);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *read_out(void)
{
    static char buf[1 << 17];
    FILE *f = fopen(out_path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return buf;
}

static long long count_of(const char *table_where, const char *uid)
{
    char sql[512];
    assert_int_equal(kd_store_metrics_flush(fx.store, 10000), 0);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM %s AND trial_id = (SELECT id FROM trials WHERE uid = '%s')",
             table_where, uid);
    return fx_sql_int(sql);
}

static int64_t status_int(const char *trial, const char *obj, const char *key)
{
    json_t *t = fx_get_trial(trial);
    json_t *o = json_object_get(json_object_get(t, "status"), obj);
    int64_t v = o ? json_integer_value(json_object_get(o, key)) : -1;
    json_decref(t);
    return v;
}

/* The searcher's last operation, as it gives them: the target goes to 30; once the trial has
 * validated there, it is closed (a trial closed below its target would be told to stop at
 * once, through preemption). */
static void raise_then_close(const char *trial, pid_t pid)
{
    fx_patch("trials", trial, NULL, "{\"spec\":{\"validateAfter\":30}}");
    int64_t t0 = kd_mono_ms();
    while (status_int(trial, "latestValidation", "batches") != 30) {
        if (kd_mono_ms() - t0 > 90000 || waitpid(pid, NULL, WNOHANG) != 0)
            fail_msg("no validation at 30 batches; output:\n%s", read_out());
        kd_sleep_ms(100);
    }
    fx_patch("trials", trial, NULL, "{\"spec\":{\"closed\":true}}");
}

static void test_harness_follows_searcher(void **state)
{
    (void)state;
    char uid[64], tok[64];
    fx_experiment("py-exp", "validation_loss");
    fx_trial("py-exp", "py-exp-1", 20, uid, sizeof(uid));
    fx_token("py-exp-1", uid, tok, sizeof(tok));
    pid_t pid = start_harness("py-exp-1", tok, "DumpTrial", "0");
    /* The first operation (20 batches) is validated; then the searcher
     * raises the target to 30 and closes the trial there. */
    int64_t t0 = kd_mono_ms();
    while (status_int("py-exp-1", "latestValidation", "batches") != 20) {
        if (kd_mono_ms() - t0 > 90000 || waitpid(pid, NULL, WNOHANG) != 0)
            fail_msg("no validation at 20 batches; harness output:\n%s", read_out());
        kd_sleep_ms(100);
    }
    raise_then_close("py-exp-1", pid);
    int rc = wait_exit(pid, 90000);
    const char *out = read_out();
    if (rc != 0)
        fail_msg("harness exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "kdet: trial stopped batches_trained=30"));
    assert_null(strstr(out, tok));
    /* Training rows every 5 batches, two validations, two checkpoints. */
    assert_int_equal(count_of("metrics WHERE kind = 'training'", uid), 6);
    assert_int_equal(count_of("metrics WHERE kind = 'validation'", uid), 2);
    assert_int_equal(count_of("checkpoints WHERE true", uid), 2);
    assert_int_equal(status_int("py-exp-1", "latestValidation", "batches"), 30);
    assert_int_equal(status_int("py-exp-1", "latestCheckpoint", "batches"), 30);
}

static void test_pause_preempts_after_checkpoint(void **state)
{
    (void)state;
    char uid[64], tok[64];
    fx_experiment("py-exp2", "validation_loss");
    fx_trial("py-exp2", "py-exp2-1", 100000, uid, sizeof(uid));
    fx_token("py-exp2-1", uid, tok, sizeof(tok));
    pid_t pid = start_harness("py-exp2-1", tok, "SlowTrial", "0.02");
    int64_t t0 = kd_mono_ms();
    while (status_int("py-exp2-1", "latestValidation", "batches") < 0 &&
           count_of("metrics WHERE kind = 'training'", uid) < 100 / 5 &&
           strstr(read_out(), "training metrics") == NULL) {
        if (kd_mono_ms() - t0 > 90000 || waitpid(pid, NULL, WNOHANG) != 0)
            fail_msg("no training; harness output:\n%s", read_out());
        kd_sleep_ms(100);
    }
    fx_patch("experiments", "py-exp2", NULL, "{\"spec\":{\"paused\":true}}");
    int rc = wait_exit(pid, 90000);
    const char *out = read_out();
    if (rc != 0)
        fail_msg("harness exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "kdet: trial preempted batches_trained="));
    assert_int_equal(count_of("checkpoints WHERE true", uid), 1);
    assert_true(status_int("py-exp2-1", "latestCheckpoint", "batches") > 0);
    fx_patch("experiments", "py-exp2", NULL, "{\"spec\":{\"paused\":false}}");
}

static void test_wrong_token(void **state)
{
    (void)state;
    char uid[64];
    fx_trial("py-exp", "py-exp-3", 20, uid, sizeof(uid));
    pid_t pid = start_harness("py-exp-3", "not-the-right-token-123", "DumpTrial", "0");
    int rc = wait_exit(pid, 90000);
    const char *out = read_out();
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "DTRAIN_EUNAUTHORIZED"));
    assert_null(strstr(out, "not-the-right-token-123"));
}

/* Determined's Trainer API under the controller: the searcher's operations
 * set the lengths (fit's max_length is only the off-cluster length), each
 * ends with a validation and a checkpoint. */
static void test_trainer_follows_searcher(void **state)
{
    (void)state;
    char uid[64], tok[64];
    fx_experiment("tr-exp", "validation_loss");
    fx_trial("tr-exp", "tr-exp-4", 20, uid, sizeof(uid));
    fx_token("tr-exp-4", uid, tok, sizeof(tok));
    pid_t pid = start_trainer("tr-exp-4", "tr-exp", tok, NULL);
    int64_t t0 = kd_mono_ms();
    while (status_int("tr-exp-4", "latestValidation", "batches") != 20) {
        if (kd_mono_ms() - t0 > 90000 || waitpid(pid, NULL, WNOHANG) != 0)
            fail_msg("no validation at 20 batches; output:\n%s", read_out());
        kd_sleep_ms(100);
    }
    raise_then_close("tr-exp-4", pid);
    int rc = wait_exit(pid, 90000);
    const char *out = read_out();
    if (rc != 0)
        fail_msg("train.py exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "kdet: trial stopped batches_trained=30"));
    assert_null(strstr(out, tok));
    /* reporting_period Batch(100) is longer than the operations: one
     * training row at the end of each. */
    assert_int_equal(count_of("metrics WHERE kind = 'training'", uid), 2);
    assert_int_equal(count_of("metrics WHERE kind = 'validation'", uid), 2);
    assert_int_equal(count_of("checkpoints WHERE true", uid), 2);
    assert_int_equal(status_int("tr-exp-4", "latestCheckpoint", "batches"), 30);
}

/* A pause preempts the Trainer after a checkpoint; the resumed trial (a
 * name for its id, the latest checkpoint in the env) continues from it. */
static void test_trainer_pause_and_resume(void **state)
{
    (void)state;
    char uid[64], tok[64], latest[128];
    fx_experiment("tr-exp2", "validation_loss");
    fx_trial("tr-exp2", "tr-exp2-1", 100000, uid, sizeof(uid));
    fx_token("tr-exp2-1", uid, tok, sizeof(tok));
    pid_t pid = start_trainer("tr-exp2-1", "tr-exp2", tok, NULL);
    int64_t t0 = kd_mono_ms();
    while (count_of("metrics WHERE kind = 'training'", uid) < 1) {
        if (kd_mono_ms() - t0 > 90000 || waitpid(pid, NULL, WNOHANG) != 0)
            fail_msg("no training; output:\n%s", read_out());
        kd_sleep_ms(100);
    }
    fx_patch("experiments", "tr-exp2", NULL, "{\"spec\":{\"paused\":true}}");
    int rc = wait_exit(pid, 90000);
    const char *out = read_out();
    if (rc != 0)
        fail_msg("train.py exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "kdet: trial preempted batches_trained="));
    int64_t at = status_int("tr-exp2-1", "latestCheckpoint", "batches");
    assert_true(at >= 100);
    json_t *t = fx_get_trial("tr-exp2-1");
    const char *u = json_string_value(
        json_object_get(json_object_get(json_object_get(t, "status"), "latestCheckpoint"), "uuid"));
    assert_non_null(u);
    snprintf(latest, sizeof(latest), "%s", u);
    json_decref(t);
    fx_patch("experiments", "tr-exp2", NULL, "{\"spec\":{\"paused\":false}}");
    fx_patch("trials", "tr-exp2-1", NULL,
             "{\"spec\":{\"validateAfter\":1000000,\"closed\":false}}");
    char want[96];
    snprintf(want, sizeof(want), "batches_trained=%lld", (long long)at);
    long long rows = count_of("metrics WHERE kind = 'training'", uid);
    pid = start_trainer("tr-exp2-1", "tr-exp2", tok, latest);
    t0 = kd_mono_ms();
    while (count_of("metrics WHERE kind = 'training'", uid) <= rows) {
        if (kd_mono_ms() - t0 > 90000 || waitpid(pid, NULL, WNOHANG) != 0)
            fail_msg("the resumed trial did not train; output:\n%s", read_out());
        kd_sleep_ms(100);
    }
    fx_patch("experiments", "tr-exp2", NULL, "{\"spec\":{\"paused\":true}}");
    rc = wait_exit(pid, 90000);
    out = read_out();
    if (rc != 0)
        fail_msg("resumed train.py exit %d:\n%s", rc, out);
    assert_null(strstr(out, "invalid literal"));
    assert_non_null(strstr(out, "kdet: restored checkpoint uuid="));
    assert_non_null(strstr(out, want));
    assert_true(status_int("tr-exp2-1", "latestCheckpoint", "batches") > at);
}

static int teardown(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "/tmp/kdet-pyapi-%d", (int)getpid());
    pid_t pid = -1;
    char *argv[] = {"/bin/rm", "-rf", cmd, out_path, NULL};
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) == 0)
        waitpid(pid, NULL, 0);
    return fx_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harness_follows_searcher),
        cmocka_unit_test(test_pause_preempts_after_checkpoint),
        cmocka_unit_test(test_wrong_token),
        cmocka_unit_test(test_trainer_follows_searcher),
        cmocka_unit_test(test_trainer_pause_and_resume),
    };
    return cmocka_run_group_tests(tests, fx_setup, teardown);
}
