/*
 * Snapshot/restore equivalence: for every method, a long run with shuffled
 * answers and failures is recorded; after every event the searcher is
 * restored from that point's snapshot, the rest of the events are fed to
 * it, and every later operation must equal the original's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common.h"
#include "core/log.h"

static double fn_curve(const json_t *hp, int64_t length, void *ctx)
{
    (void)ctx;
    double x = json_number_value(json_object_get(hp, "x"));
    double lr = json_number_value(json_object_get(hp, "lr"));
    double base = branin(x, 7.5) / 100 + fabs(log10(lr) + 2);
    return base + 1.0 / (double)(length + 1);
}

/* Returns how many Close ops were early-stopping decisions. */
static int check_equivalence(const char *searcher, uint64_t seed, double p_error)
{
    int stopped = 0;
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": -5, \"maxval\": 10,"
             "   \"count\": 4}, \"lr\": {\"type\": \"log\", \"minval\": -4, \"maxval\": 0, "
             "\"count\": 3}, \"k\": {\"type\": \"categorical\", \"vals\": [1, \"two\", [3]]},"
             "   \"n\": {\"type\": \"int\", \"minval\": 1, \"maxval\": 9, \"count\": 2}, \"c\": 5},"
             " \"searcher\": %s}",
             searcher);
    struct kd_searcher *s = new_searcher(cfg, seed);
    struct sim m;
    sim_init(&m, s, fn_curve, NULL, seed * 31 + 1);
    m.shuffle = true;
    m.p_error = p_error;
    m.keep_snapshots = true;
    long n = sim_run(&m, 5000);
    assert_true(m.shutdown);
    assert_true(n >= 4);
    {
        size_t a, b;
        json_t *o, *op;
        json_array_foreach(m.ops, a, o)
        {
            json_array_foreach(o, b, op)
            {
                const char *why = json_string_value(json_object_get(op, "reason"));
                stopped += why && strstr(why, "early stopping") != NULL;
            }
        }
    }
    for (long i = 0; i < n; i++) {
        const char *txt = json_string_value(json_array_get(m.snaps, (size_t)i));
        json_error_t je;
        json_t *snap = json_loads(txt, 0, &je);
        struct kd_searcher *r = NULL;
        char err[KD_ERRLEN] = "";
        assert_non_null(snap);
        if (kd_searcher_restore(snap, &r, err) != 0)
            fail_msg("restore after event %ld: %s", i, err);
        json_decref(snap);
        /* the restored searcher's own snapshot is the same document */
        json_t *again = kd_searcher_snapshot(r);
        char *t2 = json_dumps(again, JSON_COMPACT);
        assert_string_equal(t2, txt);
        free(t2);
        json_decref(again);
        for (long k = i + 1; k < n; k++) {
            json_t *ops = sim_feed(r, json_array_get(m.events, (size_t)k));
            if (!json_equal(ops, json_array_get(m.ops, (size_t)k))) {
                char *a = json_dumps(ops, JSON_COMPACT);
                char *b = json_dumps(json_array_get(m.ops, (size_t)k), JSON_COMPACT);
                fail_msg("%s: restored after event %ld, event %ld gave %s, original %s", searcher,
                         i, k, a, b);
            }
            json_decref(ops);
        }
        assert_true(kd_searcher_done(r));
        kd_searcher_free(r);
    }
    sim_free(&m);
    kd_searcher_free(s);
    return stopped;
}

static void test_single(void **state)
{
    (void)state;
    (void)check_equivalence(
        "{\"name\": \"single\", \"metric\": \"l\", \"max_length\": {\"batches\": 8}}", 1, 0);
}

static void test_grid(void **state)
{
    (void)state;
    (void)check_equivalence("{\"name\": \"grid\", \"metric\": \"l\", \"max_concurrent_trials\": 5,"
                            " \"max_length\": {\"batches\": 8}}",
                            2, 0.1);
}

static void test_random(void **state)
{
    (void)state;
    (void)check_equivalence("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 40,"
                            " \"max_concurrent_trials\": 6, \"max_length\": {\"batches\": 8}}",
                            3, 0.1);
}

static void test_bayesian(void **state)
{
    (void)state;
    (void)check_equivalence("{\"name\": \"bayesian\", \"metric\": \"l\", \"max_trials\": 45,"
                            " \"max_concurrent_trials\": 4, \"smaller_is_better\": false,"
                            " \"max_length\": {\"batches\": 8}}",
                            4, 0.05);
}

/* Eight at once: most suggestions are made with pending trials ranked by their believed loss. */
static void test_bayesian_parallel(void **state)
{
    (void)state;
    (void)check_equivalence("{\"name\": \"bayesian\", \"metric\": \"l\", \"max_trials\": 40,"
                            " \"max_concurrent_trials\": 8, \"max_length\": {\"batches\": 4}}",
                            9, 0.05);
}

static void test_asha(void **state)
{
    (void)state;
    (void)check_equivalence(
        "{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 60,"
        " \"mode\": \"conservative\", \"divisor\": 3, \"max_concurrent_trials\": 8,"
        " \"max_length\": {\"batches\": 81}}",
        5, 0.05);
}

/* adaptive_asha with time_metric: rungs in reported time values, trials stopped or completed. */
static void test_asha_time(void **state)
{
    (void)state;
    (void)check_equivalence(
        "{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 30,"
        " \"divisor\": 2, \"max_concurrent_trials\": 6, \"time_metric\": \"epochs\","
        " \"max_time\": 16}",
        8, 0.05);
}

static void test_pbt(void **state)
{
    (void)state;
    (void)check_equivalence("{\"name\": \"pbt\", \"metric\": \"l\", \"population_size\": 8,"
                            " \"num_rounds\": 5, \"length_per_round\": {\"batches\": 10},"
                            " \"replace_function\": {\"truncate_fraction\": 0.25},"
                            " \"explore_function\": {\"resample_probability\": 0.3,"
                            " \"perturb_factor\": 0.2}}",
                            6, 0.05);
}

static void test_early_stopping_state(void **state)
{
    (void)state;
    int stopped =
        check_equivalence("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 40,"
                          " \"max_length\": {\"batches\": 64}, \"early_stopping\": ["
                          " {\"type\": \"patience\", \"patience\": 1},"
                          " {\"type\": \"median\", \"min_trials\": 2},"
                          " {\"type\": \"threshold\", \"threshold\": 0.05}]}",
                          7, 0.02);
    assert_true(stopped > 0);
}

static void test_corrupt_snapshots(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
        " \"searcher\": {\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 3,"
        " \"max_length\": {\"batches\": 1}}}",
        1);
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN];
    assert_int_equal(kd_searcher_initial(s, &ops, err), 0);
    kd_search_ops_free(&ops);
    json_t *snap = kd_searcher_snapshot(s);
    struct kd_searcher *r = NULL;
    json_t *bad = json_deep_copy(snap);
    json_object_set_new(bad, "format", json_string("other/2"));
    assert_int_equal(kd_searcher_restore(bad, &r, err), KD_EINVAL);
    assert_non_null(strstr(err, "snapshot.format"));
    json_decref(bad);
    bad = json_deep_copy(snap);
    json_array_set_new(json_object_get(bad, "rng"), 2, json_string("xyz"));
    assert_int_equal(kd_searcher_restore(bad, &r, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "snapshot.rng[2]"));
    json_decref(bad);
    bad = json_deep_copy(snap);
    json_object_set_new(json_array_get(json_object_get(bad, "trials"), 1), "x", json_array());
    assert_int_equal(kd_searcher_restore(bad, &r, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "snapshot.trials[1]"));
    json_decref(bad);
    bad = json_deep_copy(snap);
    json_object_set_new(json_object_get(json_object_get(bad, "config"), "searcher"), "name",
                        json_string("nope"));
    assert_int_equal(kd_searcher_restore(bad, &r, err), KD_EINVAL);
    assert_non_null(strstr(err, "searcher.name"));
    json_decref(bad);
    assert_null(r);
    json_decref(snap);
    kd_searcher_free(s);
}

int main(void)
{
    kd_log_init("test", KD_LOG_OFF, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_bayesian),
        cmocka_unit_test(test_bayesian_parallel),
        cmocka_unit_test(test_asha),
        cmocka_unit_test(test_asha_time),
        cmocka_unit_test(test_pbt),
        cmocka_unit_test(test_early_stopping_state),
        cmocka_unit_test(test_corrupt_snapshots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
