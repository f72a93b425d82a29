/* Searcher methods: single, grid, random, adaptive_asha, bayesian, pbt; bad configs and events. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common.h"
#include "core/log.h"
#include "core/str.h"
#include "searcher/searcher_int.h"

static json_t *ev_json(const char *text)
{
    return sim_config(text);
}

/* Feed an event given as JSON text; return its ops (new ref). */
static json_t *feed(struct kd_searcher *s, const char *fmt, ...) KD_PRINTF(2, 3);
static json_t *feed(struct kd_searcher *s, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_t *ev = ev_json(buf);
    json_t *ops = sim_feed(s, ev);
    json_decref(ev);
    return ops;
}

static const char *op_id(const json_t *ops, size_t i)
{
    return json_string_value(json_object_get(json_array_get(ops, i), "request_id"));
}

static const char *op_kind(const json_t *ops, size_t i)
{
    return json_string_value(json_object_get(json_array_get(ops, i), "op"));
}

static int64_t op_len(const json_t *ops, size_t i)
{
    return json_integer_value(json_object_get(json_array_get(ops, i), "length"));
}

static void test_single(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"lr\": 0.1, \"opt\": {\"type\": \"const\", \"val\": \"adam\"}},"
        " \"searcher\": {\"name\": \"single\", \"metric\": \"loss\","
        "  \"max_length\": {\"epochs\": 3}}}",
        7);
    json_t *ops = feed(s, "{\"event\": \"initial\"}");
    assert_int_equal(json_array_size(ops), 2);
    assert_string_equal(op_kind(ops, 0), "create");
    json_t *hp = json_object_get(json_array_get(ops, 0), "hparams");
    char *txt = json_dumps(hp, JSON_COMPACT);
    assert_string_equal(txt, "{\"lr\":0.10000000000000001,\"opt\":\"adam\"}");
    free(txt);
    char id[KD_SEARCH_IDLEN];
    kd_strlcpy(id, op_id(ops, 0), sizeof(id));
    assert_string_equal(op_kind(ops, 1), "validate_after");
    assert_int_equal(op_len(ops, 1), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ops, 1), "unit")),
                        "epochs");
    /* trial seed is the documented derivation */
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ops, 0), "seed")),
                     kd_hp_trial_seed(7, 0));
    json_decref(ops);
    ops = feed(s, "{\"event\": \"trial_created\", \"request_id\": \"%s\"}", id);
    assert_int_equal(json_array_size(ops), 0);
    json_decref(ops);
    assert_true(kd_searcher_progress(s) < 0.01);
    ops = feed(s,
               "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 0.3,"
               " \"length\": 1}",
               id);
    assert_int_equal(json_array_size(ops), 0); /* an intermediate validation */
    json_decref(ops);
    assert_true(fabs(kd_searcher_progress(s) - 1.0 / 3) < 1e-9);
    ops = feed(s,
               "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 0.2,"
               " \"length\": 3}",
               id);
    assert_int_equal(json_array_size(ops), 1);
    assert_string_equal(op_kind(ops, 0), "close");
    json_decref(ops);
    assert_false(kd_searcher_done(s));
    ops = feed(s, "{\"event\": \"trial_closed\", \"request_id\": \"%s\"}", id);
    assert_int_equal(json_array_size(ops), 1);
    assert_string_equal(op_kind(ops, 0), "shutdown");
    assert_false(json_is_true(json_object_get(json_array_get(ops, 0), "failure")));
    json_decref(ops);
    assert_true(kd_searcher_done(s));
    assert_true(kd_searcher_progress(s) == 1.0);
    kd_searcher_free(s);
}

/* Max number of trials created and not yet closed, over a recorded run. */
static int max_alive(const struct sim *m)
{
    int alive = 0, best = 0;
    size_t i, k;
    json_t *ops, *op;
    json_array_foreach(m->ops, i, ops)
    {
        const char *ev = json_string_value(json_object_get(json_array_get(m->events, i), "event"));
        if (strcmp(ev, "trial_closed") == 0 || strcmp(ev, "trial_exited_early") == 0)
            alive--;
        json_array_foreach(ops, k, op)
        {
            if (strcmp(json_string_value(json_object_get(op, "op")), "create") == 0)
                alive++;
        }
        if (alive > best)
            best = alive;
    }
    return best;
}

static double fn_zero(const json_t *hp, int64_t length, void *ctx)
{
    (void)hp;
    (void)ctx;
    return 1.0 / (double)(length + 1);
}

static void test_grid(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"layers\": {\"type\": \"int\", \"minval\": 1, \"maxval\": 8,"
        "   \"count\": 3}, \"act\": {\"type\": \"categorical\", \"vals\": [\"relu\", \"tanh\"]},"
        "   \"nested\": {\"lr\": {\"type\": \"log\", \"minval\": -3, \"maxval\": -1, \"count\": 3},"
        "   \"bs\": 32}},"
        " \"searcher\": {\"name\": \"grid\", \"metric\": \"loss\", \"max_concurrent_trials\": 2,"
        "  \"max_length\": {\"batches\": 10}}}",
        1);
    struct sim m;
    sim_init(&m, s, fn_zero, NULL, 5);
    m.shuffle = true;
    sim_run(&m, 10000);
    assert_true(m.shutdown);
    assert_string_equal(m.shutdown_reason, "all 18 trials finished");
    assert_int_equal(m.nt, 18); /* 3 * 2 * 3 */
    assert_true(max_alive(&m) <= 2);
    /* all combinations appear once, with Determined's grid values */
    json_t *seen = json_object();
    for (size_t i = 0; i < m.nt; i++) {
        char *k = json_dumps(m.t[i].hp, JSON_SORT_KEYS | JSON_COMPACT);
        assert_null(json_object_get(seen, k));
        json_object_set_new(seen, k, json_true());
        json_int_t l = json_integer_value(json_object_get(m.t[i].hp, "layers"));
        assert_true(l == 1 || l == 5 || l == 8); /* round(1 + i*7/2) */
        double lr = json_real_value(json_object_get(json_object_get(m.t[i].hp, "nested"), "lr"));
        assert_true(fabs(lr - 0.001) < 1e-12 || fabs(lr - 0.01) < 1e-12 || fabs(lr - 0.1) < 1e-12);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(m.t[i].hp, "nested"), "bs")), 32);
        free(k);
    }
    json_decref(seen);
    sim_free(&m);
    kd_searcher_free(s);
}

static void test_random(void **state)
{
    (void)state;
    const char *cfg =
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": -5, \"maxval\": 10},"
        "  \"y\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 15}},"
        " \"searcher\": {\"name\": \"random\", \"metric\": \"loss\", \"max_trials\": 25,"
        "  \"max_concurrent_trials\": 3, \"max_length\": {\"records\": 100}}}";
    struct kd_searcher *s = new_searcher(cfg, 11);
    struct sim m;
    sim_init(&m, s, fn_branin, NULL, 2);
    m.shuffle = true;
    sim_run(&m, 10000);
    assert_true(m.shutdown);
    assert_int_equal(m.nt, 25);
    assert_true(max_alive(&m) <= 3);
    assert_int_equal(max_alive(&m), 3);
    for (size_t i = 0; i < m.nt; i++) {
        double x = json_real_value(json_object_get(m.t[i].hp, "x"));
        double y = json_real_value(json_object_get(m.t[i].hp, "y"));
        assert_true(x >= -5 && x < 10 && y >= 0 && y < 15);
    }
    sim_free(&m);
    kd_searcher_free(s);

    /* invalid_hp exits are replaced, errored ones are not */
    s = new_searcher(cfg, 11);
    json_t *ops = feed(s, "{\"event\": \"initial\"}");
    assert_int_equal(count_ops(ops, "create"), 3);
    char id[KD_SEARCH_IDLEN];
    kd_strlcpy(id, op_id(ops, 0), sizeof(id));
    json_decref(ops);
    ops = feed(s,
               "{\"event\": \"trial_exited_early\", \"request_id\": \"%s\","
               " \"reason\": \"invalid_hp\"}",
               id);
    assert_int_equal(count_ops(ops, "create"), 1);
    json_decref(ops);
    /* a trial_closed after an early exit is accepted and does nothing */
    ops = feed(s, "{\"event\": \"trial_closed\", \"request_id\": \"%s\"}", id);
    assert_int_equal(json_array_size(ops), 0);
    json_decref(ops);
    json_t *snap = kd_searcher_snapshot(s);
    /* 4 trials exist, and 25 more may still be created: the invalid one does not count */
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(snap, "method"), "counted")), 3);
    json_decref(snap);
    kd_searcher_free(s);
}

/* ASHA on a hand-worked example: one bracket of 3 rungs (1, 4, 16 batches), divisor 4. */
static void test_asha_hand_worked(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
        " \"searcher\": {\"name\": \"adaptive_asha\", \"metric\": \"loss\", \"mode\": "
        "\"aggressive\", \"max_rungs\": 3, \"divisor\": 4, \"max_trials\": 16,"
        "  \"max_concurrent_trials\": 4, \"max_length\": {\"batches\": 16}}}",
        3);
    json_t *ops = feed(s, "{\"event\": \"initial\"}");
    char ids[32][KD_SEARCH_IDLEN];
    int nid = 0;
    assert_int_equal(json_array_size(ops), 8);
    for (size_t i = 0; i < 8; i += 2) {
        assert_string_equal(op_kind(ops, i), "create");
        kd_strlcpy(ids[nid++], op_id(ops, i), KD_SEARCH_IDLEN);
        assert_int_equal(op_len(ops, i + 1), 1); /* rung 0: 16 / 4^2 */
    }
    json_decref(ops);
    /* rung 0 results; promote the best floor(n/4) as they arrive */
    struct {
        int trial;
        double metric;
        int promote;   /* trial promoted (-1 none) */
        int new_trial; /* 1 when a new trial is created */
    } steps[] = {
        {0, 0.5, -1, 1}, /* n=1: nobody yet */
        {1, 0.4, -1, 1}, {2, 0.3, -1, 1},
        {3, 0.1, 3, 0},                   /* n=4: the best (itself) goes up at once */
        {4, 0.2, -1, 1},                  /* n=5: still 1 promotion due */
        {5, 0.05, 5, 0},                  /* best so far: promoted at once */
        {6, 0.6, -1, 1}, {7, 0.7, -1, 1}, /* n=8: 2 due, rank 2 (trial 3) already promoted */
    };
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        ops = feed(s,
                   "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": "
                   "%g, \"length\": 1}",
                   ids[steps[k].trial], steps[k].metric);
        if (steps[k].promote >= 0) {
            assert_int_equal(json_array_size(ops), 1);
            assert_string_equal(op_kind(ops, 0), "validate_after");
            assert_string_equal(op_id(ops, 0), ids[steps[k].promote]);
            assert_int_equal(op_len(ops, 0), 4);
        }
        if (steps[k].new_trial) {
            assert_int_equal(json_array_size(ops), 2);
            assert_string_equal(op_kind(ops, 0), "create");
            assert_int_equal(op_len(ops, 1), 1);
            kd_strlcpy(ids[nid++], op_id(ops, 0), KD_SEARCH_IDLEN);
        }
        json_decref(ops);
    }
    assert_int_equal(nid, 10);
    /* rung 1: trial 5 reports 0.04 (n=1: no promotion, a new trial), trial 3 0.03 */
    ops = feed(s,
               "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 0.04,"
               " \"length\": 4}",
               ids[5]);
    assert_int_equal(count_ops(ops, "create"), 1);
    json_decref(ops);
    /* trial 8 does well at rung 0: n=9 -> 2 due; it ranks first, so it goes up at once */
    ops = feed(s,
               "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 0.01,"
               " \"length\": 1}",
               ids[8]);
    assert_int_equal(json_array_size(ops), 1);
    assert_string_equal(op_id(ops, 0), ids[8]);
    assert_int_equal(op_len(ops, 0), 4);
    json_decref(ops);
    /* an early exit at rung 0 counts as the worst result and frees a slot */
    ops = feed(s,
               "{\"event\": \"trial_exited_early\", \"request_id\": \"%s\", \"reason\": "
               "\"errored\"}",
               ids[9]);
    assert_int_equal(count_ops(ops, "create"), 1);
    json_decref(ops);
    kd_searcher_free(s);
}

/* The ops of one event in short: "create", "open" (a ValidateAfter with no reason), "promote N",
 * "stop N", "top", "close", "shutdown", joined by ",". */
static void ops_short(const json_t *ops, char *out, size_t len)
{
    size_t i;
    const json_t *op;
    out[0] = '\0';
    json_array_foreach(ops, i, op)
    {
        const char *k = json_string_value(json_object_get(op, "op"));
        const char *why = json_string_value(json_object_get(op, "reason"));
        char one[64];
        int rung = -1;
        if (strcmp(k, "validate_after") == 0 && why == NULL)
            snprintf(one, sizeof(one), "open");
        else if (strcmp(k, "validate_after") == 0 && sscanf(why, "promoted to rung %d", &rung) == 1)
            snprintf(one, sizeof(one), "promote %d", rung);
        else if (strcmp(k, "close") == 0 && why != NULL &&
                 sscanf(why, "stopped in rung %d", &rung) == 1)
            snprintf(one, sizeof(one), "stop %d", rung);
        else if (strcmp(k, "close") == 0 && why != NULL &&
                 strncmp(why, "completed the top rung", 22) == 0)
            snprintf(one, sizeof(one), "top");
        else
            snprintf(one, sizeof(one), "%s", k);
        if (op_id(ops, i) != NULL && strcmp(k, "create") != 0 && strcmp(k, "shutdown") != 0)
            assert_true(strlen(op_id(ops, i)) > 0);
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s", used ? "," : "", one);
    }
}

/*
 * adaptive_asha with time_metric and max_time, event by event. aggressive, divisor 2, max_rungs
 * 3, max_time 8: one bracket with rungs at 2, 4 and 8 of the time metric; max_trials 4, 2 at
 * once. Each trial gets one open operation; a validation whose time reaches a rung puts the
 * trial there: with n results the best max(floor(n/2), 1) go on, the others are stopped; at 8
 * the trial is done. A new trial starts when one finishes.
 */
static void test_asha_time_metric(void **state)
{
    (void)state;
    static const struct {
        char ev;       /* 'v' validation, 'c' trial_closed, 'x' exited early (errored) */
        int trial;     /* index in creation order */
        double metric; /* validation: the searcher metric (smaller is better) ... */
        double time;   /* ... and the time metric's value */
        const char *want;
    } steps[] = {
        {'v', 0, 0.50, 1, ""},                    /* below the first rung */
        {'v', 0, 0.40, 2, "promote 1"},           /* first in rung 0: n=1, 1 goes on */
        {'v', 1, 0.60, 2.5, "stop 0"},            /* n=2, 1 goes on: trial 0 is better */
        {'v', 1, 0.10, 3, ""},                    /* closing already: nothing more */
        {'c', 1, 0, 0, "create,open"},            /* its place goes to trial 2 */
        {'v', 2, 0.30, 5, "promote 1,promote 2"}, /* jumps over rungs 0 and 1, first in rung 1 */
        {'v', 0, 0.45, 4, "stop 1"},              /* rung 1: n=2, trial 2 (0.30) is better */
        {'c', 0, 0, 0, "create,open"},            /* trial 3, the last */
        {'v', 3, 0.45, 2, "stop 0"},              /* rung 0: 0.30 0.40 0.45 0.60, top 2 */
        {'v', 2, 0.20, 8, "top"},                 /* max_time: done */
        {'c', 3, 0, 0, ""},                       /* trial 2 is still closing */
        {'c', 2, 0, 0, "shutdown"},
    };
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
        " \"searcher\": {\"name\": \"adaptive_asha\", \"metric\": \"loss\", \"mode\": "
        "\"aggressive\", \"max_rungs\": 3, \"divisor\": 2, \"max_trials\": 4,"
        " \"max_concurrent_trials\": 2, \"time_metric\": \"epochs\", \"max_time\": 8}}",
        5);
    assert_string_equal(kd_searcher_time_metric(s), "epochs");
    char ids[8][KD_SEARCH_IDLEN], got[256];
    int nid = 0;
    json_t *ops = feed(s, "{\"event\": \"initial\"}");
    ops_short(ops, got, sizeof(got));
    assert_string_equal(got, "create,open,create,open");
    assert_int_equal(op_len(ops, 1), KD_SEARCH_OPEN_LENGTH);
    kd_strlcpy(ids[nid++], op_id(ops, 0), KD_SEARCH_IDLEN);
    kd_strlcpy(ids[nid++], op_id(ops, 2), KD_SEARCH_IDLEN);
    json_decref(ops);
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        const char *id = ids[steps[k].trial];
        if (steps[k].ev == 'v')
            ops = feed(s,
                       "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\":"
                       " %.17g, \"length\": %d, \"time\": %.17g}",
                       id, steps[k].metric, (int)(steps[k].time * 10), steps[k].time);
        else if (steps[k].ev == 'c')
            ops = feed(s, "{\"event\": \"trial_closed\", \"request_id\": \"%s\"}", id);
        else
            ops = feed(s,
                       "{\"event\": \"trial_exited_early\", \"request_id\": \"%s\", \"reason\":"
                       " \"errored\"}",
                       id);
        ops_short(ops, got, sizeof(got));
        if (strcmp(got, steps[k].want) != 0)
            fail_msg("step %zu (trial %d): ops \"%s\", want \"%s\"", k, steps[k].trial, got,
                     steps[k].want);
        if (json_array_size(ops) > 0 && strcmp(op_kind(ops, 0), "create") == 0)
            kd_strlcpy(ids[nid++], op_id(ops, 0), KD_SEARCH_IDLEN);
        for (size_t i = 0; i < json_array_size(ops); i++)
            if (strcmp(op_kind(ops, i), "validate_after") == 0)
                assert_int_equal(op_len(ops, i), KD_SEARCH_OPEN_LENGTH);
        json_decref(ops);
    }
    assert_int_equal(nid, 4);
    assert_true(kd_searcher_done(s));
    kd_searcher_free(s);

    /* Larger is better; a time going backwards, or not a number, is refused. */
    s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
        " \"searcher\": {\"name\": \"adaptive_asha\", \"metric\": \"acc\", \"smaller_is_better\":"
        " false, \"mode\": \"aggressive\", \"max_rungs\": 2, \"divisor\": 2, \"max_trials\": 2,"
        " \"max_concurrent_trials\": 2, \"time_metric\": \"t\", \"max_time\": 4}}",
        6);
    ops = feed(s, "{\"event\": \"initial\"}");
    kd_strlcpy(ids[0], op_id(ops, 0), KD_SEARCH_IDLEN);
    kd_strlcpy(ids[1], op_id(ops, 2), KD_SEARCH_IDLEN);
    json_decref(ops);
    ops = feed(s,
               "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 0.9,"
               " \"length\": 3, \"time\": 2}",
               ids[0]);
    ops_short(ops, got, sizeof(got));
    assert_string_equal(got, "promote 1");
    json_decref(ops);
    ops = feed(s,
               "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 0.8,"
               " \"length\": 3, \"time\": 3}",
               ids[1]);
    ops_short(ops, got, sizeof(got));
    assert_string_equal(got, "stop 0"); /* 0.8 < 0.9 is worse when larger is better */
    json_decref(ops);
    struct kd_search_ops o = {0};
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_searcher_validation_timed(s, ids[0], 0.95, 4, 1.5, &o, err), KD_EINVAL);
    assert_non_null(strstr(err, "validation_completed.time: 1.5 (t) is below the trial's last"));
    assert_int_equal(kd_searcher_validation_timed(s, ids[0], 0.95, 4, INFINITY, &o, err),
                     KD_EINVAL);
    assert_int_equal(o.n, 0);
    json_t *bad = sim_config("{\"event\": \"validation_completed\", \"request_id\": \"x\","
                             " \"metric\": 1, \"length\": 1, \"time\": \"late\"}");
    assert_int_equal(kd_searcher_event(s, bad, &o, err), KD_EINVAL);
    assert_non_null(strstr(err, "validation_completed.time: expected a number"));
    json_decref(bad);
    /* Without a time the validation feeds only the early-stopping rules. */
    assert_int_equal(kd_searcher_validation_completed(s, ids[0], 0.97, 5, &o, err), 0);
    assert_int_equal(o.n, 0);
    assert_int_equal(kd_searcher_validation_timed(s, ids[0], 0.97, 6, 4, &o, err), 0);
    assert_int_equal(o.n, 1);
    assert_non_null(strstr(o.v[0].reason, "completed the top rung: t reached 4 (max_time 4)"));
    kd_search_ops_free(&o);
    kd_searcher_free(s);
}

/* A whole time-metric search with shuffled answers: within concurrency, every trial ends,
 * some are stopped at each of the lower rungs, some complete, and the search shuts down. */
static void test_asha_time_metric_run(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": -5, \"maxval\": 10},"
        " \"y\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 15}},"
        " \"searcher\": {\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 40,"
        " \"divisor\": 3, \"max_concurrent_trials\": 5, \"time_metric\": \"records\","
        " \"max_time\": 27}}",
        11);
    struct sim m;
    sim_init(&m, s, fn_branin, NULL, 12);
    m.shuffle = true;
    m.time_step = 2;
    long n = sim_run(&m, 20000);
    assert_true(m.shutdown);
    assert_false(m.shutdown_failure);
    assert_true(n > 40);
    assert_true(max_alive(&m) <= 5);
    int created = 0, stopped = 0, top = 0;
    size_t i, k;
    json_t *ops, *op;
    json_array_foreach(m.ops, i, ops)
    {
        json_array_foreach(ops, k, op)
        {
            const char *why = json_string_value(json_object_get(op, "reason"));
            created += strcmp(json_string_value(json_object_get(op, "op")), "create") == 0;
            stopped += why != NULL && strncmp(why, "stopped in rung", 15) == 0;
            top += why != NULL && strncmp(why, "completed the top rung", 22) == 0;
        }
    }
    assert_int_equal(created, 40);
    assert_true(stopped >= 20);
    assert_true(top >= 2);
    assert_int_equal(stopped + top, 40);
    sim_free(&m);
    kd_searcher_free(s);
}

static void test_asha_brackets(void **state)
{
    (void)state;
    /* standard mode: max_rungs = min(5, log4(256)+1 = 5, int(log4(100))+1 = 4) = 4, brackets
     * 4, 3, 2 with weights 16, 5.33, 2 -> 68, 22, 8 trials (+2 to the first) and
     * max_concurrent_trials 16 split 6, 5, 5 */
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
        " \"searcher\": {\"name\": \"adaptive_asha\", \"metric\": \"acc\", "
        "\"smaller_is_better\": false, \"max_trials\": 100, \"max_length\": {\"batches\": 256}}}",
        4);
    json_t *ops = feed(s, "{\"event\": \"initial\"}");
    assert_int_equal(count_ops(ops, "create"), 16);
    int64_t want[16] = {4, 4, 4, 4, 4, 4, 16, 16, 16, 16, 16, 64, 64, 64, 64, 64};
    for (size_t i = 0; i < 16; i++)
        assert_int_equal(op_len(ops, 2 * i + 1), want[i]);
    json_decref(ops);
    json_t *snap = kd_searcher_snapshot(s);
    json_t *bs = json_object_get(json_object_get(snap, "method"), "brackets");
    assert_int_equal(json_array_size(bs), 3);
    assert_int_equal(json_array_size(json_object_get(json_array_get(bs, 0), "rungs")), 4);
    assert_int_equal(json_array_size(json_object_get(json_array_get(bs, 2), "rungs")), 2);
    json_decref(snap);
    kd_searcher_free(s);

    /* a full run: exactly max_trials trials; lengths only at rung boundaries; closes */
    s = new_searcher("{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0,"
                     " \"maxval\": 1}}, \"searcher\": {\"name\": \"adaptive_asha\", \"metric\": "
                     "\"acc\", \"smaller_is_better\": false, \"max_trials\": 100, \"max_length\": "
                     "{\"batches\": 256}}}",
                     4);
    struct sim m;
    sim_init(&m, s, fn_zero, NULL, 9);
    m.shuffle = true;
    m.p_error = 0.03;
    sim_run(&m, 100000);
    assert_true(m.shutdown);
    assert_int_equal(m.nt, 100);
    size_t i, k;
    json_t *o, *op;
    int top = 0;
    json_array_foreach(m.ops, i, o)
    {
        json_array_foreach(o, k, op)
        {
            const char *kind = json_string_value(json_object_get(op, "op"));
            if (strcmp(kind, "validate_after") == 0) {
                int64_t l = json_integer_value(json_object_get(op, "length"));
                assert_true(l == 4 || l == 16 || l == 64 || l == 256);
            }
            if (strcmp(kind, "close") == 0 &&
                strcmp(json_string_value(json_object_get(op, "reason")),
                       "completed the top rung") == 0)
                top++;
        }
    }
    assert_true(top >= 3); /* each bracket sends someone to the top */
    for (i = 0; i < m.nt; i++)
        assert_int_equal(m.t[i].stage, 3);
    sim_free(&m);
    kd_searcher_free(s);
}

static double fn_lr(const json_t *hp, int64_t length, void *ctx)
{
    (void)length;
    (void)ctx;
    return json_number_value(json_object_get(hp, "lr"));
}

static void test_pbt(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"lr\": {\"type\": \"double\", \"minval\": 0.1, \"maxval\": 1.0},"
        "  \"k\": {\"type\": \"categorical\", \"vals\": [1, 2, 3]}},"
        " \"searcher\": {\"name\": \"pbt\", \"metric\": \"loss\", \"population_size\": 4,"
        "  \"num_rounds\": 3, \"length_per_round\": {\"batches\": 10},"
        "  \"replace_function\": {\"truncate_fraction\": 0.25},"
        "  \"explore_function\": {\"resample_probability\": 0.0, \"perturb_factor\": 0.2}}}",
        8);
    struct sim m;
    sim_init(&m, s, fn_lr, NULL, 3);
    m.shuffle = true;
    sim_run(&m, 10000);
    assert_true(m.shutdown);
    assert_string_equal(m.shutdown_reason, "pbt: all 3 rounds finished");
    /* 4 initial + 1 child after round 1 and after round 2 */
    assert_int_equal(m.nt, 6);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(m.t[i].parent, "");
    for (size_t i = 4; i < 6; i++) {
        /* the parent is the best member (lowest lr) of the population at that round */
        struct sim_trial *p = NULL;
        for (size_t j = 0; j < i; j++)
            if (strcmp(m.t[j].id, m.t[i].parent) == 0)
                p = &m.t[j];
        assert_non_null(p);
        double plr = json_real_value(json_object_get(p->hp, "lr"));
        double clr = json_real_value(json_object_get(m.t[i].hp, "lr"));
        double lo = fmax(0.1, plr * 0.8), hi = fmin(1.0, plr * 1.2);
        assert_true(fabs(clr - lo) < 1e-12 || fabs(clr - hi) < 1e-12);
        /* categorical values are kept when not resampled */
        assert_true(json_equal(json_object_get(p->hp, "k"), json_object_get(m.t[i].hp, "k")));
        /* exploit: the parent ranked first among the live members of the first i trials */
        for (size_t j = 0; j < i; j++)
            if (m.t[j].stage == 3 && j != (size_t)(p - m.t))
                (void)0;
    }
    /* the child of round 1 comes from the trial with the lowest lr among the first 4 */
    double best = 2;
    const char *best_id = NULL;
    for (size_t i = 0; i < 4; i++) {
        double lr = json_real_value(json_object_get(m.t[i].hp, "lr"));
        if (lr < best) {
            best = lr;
            best_id = m.t[i].id;
        }
    }
    assert_string_equal(m.t[4].parent, best_id);
    /* the Create carries an explanation */
    size_t i, k;
    json_t *o, *op;
    int explained = 0;
    json_array_foreach(m.ops, i, o)
    {
        json_array_foreach(o, k, op)
        {
            const char *r = json_string_value(json_object_get(op, "reason"));
            explained += json_object_get(op, "parent") && r && strstr(r, "exploit") != NULL;
        }
    }
    assert_int_equal(explained, 2);
    sim_free(&m);
    kd_searcher_free(s);

    /* resample_probability 1: every child is drawn afresh from the space */
    s = new_searcher(
        "{\"hyperparameters\": {\"lr\": {\"type\": \"log\", \"minval\": -4, \"maxval\": -1}},"
        " \"searcher\": {\"name\": \"pbt\", \"metric\": \"loss\", \"population_size\": 10,"
        "  \"num_rounds\": 4, \"length_per_round\": {\"epochs\": 1},"
        "  \"replace_function\": {\"truncate_fraction\": 0.3},"
        "  \"explore_function\": {\"resample_probability\": 1.0, \"perturb_factor\": 0.2}}}",
        8);
    sim_init(&m, s, fn_lr, NULL, 3);
    sim_run(&m, 10000);
    assert_true(m.shutdown);
    assert_int_equal(m.nt, 10 + 3 * 3);
    for (size_t j = 0; j < m.nt; j++) {
        double lr = json_real_value(json_object_get(m.t[j].hp, "lr"));
        assert_true(lr >= 1e-4 && lr <= 1e-1);
    }
    sim_free(&m);
    kd_searcher_free(s);
}

static double run_best(const char *method, uint64_t seed, int trials, int conc)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": -5, \"maxval\": 10},"
             "  \"y\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 15}},"
             " \"searcher\": {\"name\": \"%s\", \"metric\": \"loss\", \"max_trials\": %d,"
             "  \"max_concurrent_trials\": %d, \"max_length\": {\"batches\": 1}}}",
             method, trials, conc);
    struct kd_searcher *s = new_searcher(cfg, seed);
    struct sim m;
    sim_init(&m, s, fn_branin, NULL, seed);
    sim_run(&m, 100000);
    assert_true(m.shutdown);
    double best = m.best;
    sim_free(&m);
    kd_searcher_free(s);
    return best - 0.397887;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_tpe_beats_random_on_branin(void **state)
{
    (void)state;
    double tpe[9], rnd[9];
    for (int i = 0; i < 9; i++) {
        tpe[i] = run_best("bayesian", 100 + (uint64_t)i, 60, 1);
        rnd[i] = run_best("random", 100 + (uint64_t)i, 60, 1);
    }
    qsort(tpe, 9, sizeof(double), cmp_d);
    qsort(rnd, 9, sizeof(double), cmp_d);
    print_message("branin median regret after 60: tpe %.4f random %.4f\n", tpe[4], rnd[4]);
    assert_true(tpe[4] * 3 < rnd[4]);
}

static void test_tpe_parallel_spreads(void **state)
{
    (void)state;
    /* 20 finished trials, then 8 suggestions at once: the constant liar keeps them apart */
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": -5, \"maxval\": 10},"
        "  \"y\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 15}},"
        " \"searcher\": {\"name\": \"bayesian\", \"metric\": \"loss\", \"max_trials\": 40,"
        "  \"max_concurrent_trials\": 1, \"max_length\": {\"batches\": 1}}}",
        5);
    struct sim m;
    sim_init(&m, s, fn_branin, NULL, 5);
    sim_run(&m, 1 + 3 * 20); /* initial + 20 trials (created, validated, closed) */
    assert_int_equal(m.nt, 21);
    json_t *snap = kd_searcher_snapshot(s);
    /* raise the concurrency in the snapshot's config to 8 and restore */
    json_object_set_new(json_object_get(json_object_get(snap, "config"), "searcher"),
                        "max_concurrent_trials", json_integer(8));
    struct kd_searcher *p = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(kd_searcher_restore(snap, &p, err), 0);
    json_decref(snap);
    /* trial 21 is running; close it to let the searcher fill 8 slots */
    char ev[256];
    snprintf(ev, sizeof(ev),
             "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 50,"
             " \"length\": 1}",
             m.t[20].id);
    json_t *e = sim_config(ev);
    json_decref(sim_feed(p, e));
    json_decref(e);
    snprintf(ev, sizeof(ev), "{\"event\": \"trial_closed\", \"request_id\": \"%s\"}", m.t[20].id);
    e = sim_config(ev);
    json_t *ops = sim_feed(p, e);
    json_decref(e);
    assert_int_equal(count_ops(ops, "create"), 8);
    double xs[8], ys[8];
    size_t n = 0, i;
    json_t *op;
    json_array_foreach(ops, i, op)
    {
        json_t *hp = json_object_get(op, "hparams");
        if (hp) {
            xs[n] = json_real_value(json_object_get(hp, "x"));
            ys[n] = json_real_value(json_object_get(hp, "y"));
            n++;
        }
    }
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            assert_true(hypot((xs[a] - xs[b]) / 15, (ys[a] - ys[b]) / 15) > 1e-3);
    json_decref(ops);
    sim_free(&m);
    kd_searcher_free(s);
    kd_searcher_free(p);
}

/* The belief about pending trials: the loss of the nearest observation. */
static void test_tpe_believe_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        size_t dim, n;
        bool cat[2];
        double ox[8], oloss[4], px[2];
        double want;
    } cases[] = {
        {"nearest of three", 1, 3, {false}, {0.1, 0.5, 0.9}, {3, 1, 2}, {0.45}, 1},
        {"the other side", 1, 3, {false}, {0.1, 0.5, 0.9}, {3, 1, 2}, {0.8}, 2},
        {"tie: earliest", 1, 2, {false}, {0.25, 0.75}, {7, 5}, {0.5}, 7},
        {"exact match", 2, 2, {false, false}, {0.3, 0.3, 0.7, 0.7}, {4, 6}, {0.7, 0.7}, 6},
        {"2-D distance", 2, 2, {false, false}, {0.0, 0.5, 0.45, 0.0}, {1, 9}, {0.3, 0.3}, 9},
        {"category mismatch costs 1", 2, 2, {false, true}, {0.5, 0, 0.9, 1}, {8, 2}, {0.5, 1}, 2},
        {"category match wins", 2, 2, {false, true}, {0.0, 1, 0.9, 0}, {8, 2}, {0.5, 1}, 8},
        {"worst loss is believed", 1, 2, {false}, {0.5, 0.0}, {KD__WORST, 1}, {0.6}, KD__WORST},
        {"no observations", 1, 0, {false}, {0}, {0}, {0.5}, INFINITY},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        double out = -1;
        kd__tpe_believe(cases[i].cat, cases[i].dim, cases[i].ox, cases[i].oloss, cases[i].n,
                        cases[i].px, 1, &out);
        if (out != cases[i].want)
            fail_msg("%s: believed %g, want %g", cases[i].name, out, cases[i].want);
    }
    /* several pending points at once, each on its own */
    double ox[] = {0.0, 1.0}, ol[] = {1, 2}, px[] = {0.9, 0.2, 0.6}, out[3];
    kd__tpe_believe((bool[]){false}, 1, ox, ol, 2, px, 3, out);
    assert_true(out[0] == 2 && out[1] == 1 && out[2] == 2);
}

/*
 * Eight trials at once (each suggestion made while seven others have not
 * reported) lose little against one at a time: the median regret over nine
 * seeds stays within twice the sequential one.
 */
static void test_tpe_parallel_quality(void **state)
{
    (void)state;
    double seq[9], par[9];
    for (int i = 0; i < 9; i++) {
        seq[i] = run_best("bayesian", 200 + (uint64_t)i, 100, 1);
        par[i] = run_best("bayesian", 200 + (uint64_t)i, 100, 8);
    }
    qsort(seq, 9, sizeof(double), cmp_d);
    qsort(par, 9, sizeof(double), cmp_d);
    print_message("branin median regret after 100: sequential %.4f, 8 at once %.4f\n", seq[4],
                  par[4]);
    assert_true(par[4] < 2 * seq[4]);
}

static void test_tpe_mixed_types(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"n\": {\"type\": \"int\", \"minval\": 1, \"maxval\": 6},"
        "  \"lr\": {\"type\": \"log\", \"minval\": -5, \"maxval\": 0, \"base\": 10},"
        "  \"opt\": {\"type\": \"categorical\", \"vals\": [\"sgd\", \"adam\", \"rms\"]},"
        "  \"deep\": {\"w\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}, \"c\": 3}},"
        " \"searcher\": {\"name\": \"bayesian\", \"metric\": \"loss\", \"max_trials\": 60,"
        "  \"max_concurrent_trials\": 2, \"max_length\": {\"batches\": 1}}}",
        21);
    struct sim m;
    sim_init(&m, s, fn_zero, NULL, 1);
    sim_run(&m, 100000);
    assert_true(m.shutdown);
    assert_int_equal(m.nt, 60);
    for (size_t i = 0; i < m.nt; i++) {
        const json_t *hp = m.t[i].hp;
        json_int_t n = json_integer_value(json_object_get(hp, "n"));
        double lr = json_real_value(json_object_get(hp, "lr"));
        const char *opt = json_string_value(json_object_get(hp, "opt"));
        assert_true(json_is_integer(json_object_get(hp, "n")) && n >= 1 && n <= 6);
        assert_true(lr >= 1e-5 && lr <= 1.0);
        assert_non_null(opt);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(hp, "deep"), "c")), 3);
    }
    sim_free(&m);
    kd_searcher_free(s);
}

static char *run_log(const char *cfg, uint64_t seed)
{
    struct kd_searcher *s = new_searcher(cfg, seed);
    struct sim m;
    sim_init(&m, s, fn_branin, NULL, 77);
    m.shuffle = true;
    sim_run(&m, 100000);
    char *txt = json_dumps(m.ops, JSON_COMPACT);
    sim_free(&m);
    kd_searcher_free(s);
    return txt;
}

static void test_determinism(void **state)
{
    (void)state;
    const char *methods[] = {"random", "bayesian", "adaptive_asha"};
    for (int i = 0; i < 3; i++) {
        char cfg[1024];
        snprintf(cfg, sizeof(cfg),
                 "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": -5, "
                 "\"maxval\": 10}, \"y\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 15}},"
                 " \"searcher\": {\"name\": \"%s\", \"metric\": \"loss\", \"max_trials\": 30,"
                 "  \"max_concurrent_trials\": 4, \"max_length\": {\"batches\": 64}}}",
                 methods[i]);
        char *a = run_log(cfg, 1), *b = run_log(cfg, 1), *c = run_log(cfg, 2);
        assert_string_equal(a, b);
        assert_string_not_equal(a, c);
        free(a);
        free(b);
        free(c);
    }
    /* PBT: its exploit/explore choices come from the seed too */
    const char *pbt = "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": -5, "
                      "\"maxval\": 10}, \"y\": {\"type\": \"double\", \"minval\": 0, "
                      "\"maxval\": 15}}, \"searcher\": {\"name\": \"pbt\", \"metric\": "
                      "\"loss\", \"population_size\": 8, \"num_rounds\": 4, "
                      "\"length_per_round\": {\"batches\": 4}, \"replace_function\": "
                      "{\"truncate_fraction\": 0.25}, \"explore_function\": "
                      "{\"resample_probability\": 0.3, \"perturb_factor\": 0.2}}}";
    char *a = run_log(pbt, 1), *b = run_log(pbt, 1), *c = run_log(pbt, 2);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    free(a);
    free(b);
    free(c);
}

static void bad_config(const char *searcher, const char *want)
{
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
             " \"searcher\": %s}",
             searcher);
    json_t *j = sim_config(cfg);
    struct kd_searcher *s = NULL;
    char err[KD_ERRLEN] = "";
    int rc = kd_searcher_new(j, 1, &s, err);
    json_decref(j);
    assert_null(s);
    if (rc != KD_EINVAL || !strstr(err, want))
        fail_msg("config %s: got %d \"%s\", want \"%s\"", searcher, rc, err, want);
}

/* The first validate_after of a searcher built from `searcher`: its length and unit. */
static void first_length(const char *searcher, int64_t want_len, const char *want_unit)
{
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1,"
             " \"count\": 2}}, \"searcher\": %s}",
             searcher);
    json_t *j = sim_config(cfg);
    struct kd_searcher *s = NULL;
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN] = "";
    if (kd_searcher_new(j, 1, &s, err) != 0)
        fail_msg("config %s: %s", searcher, err);
    json_decref(j);
    assert_int_equal(kd_searcher_initial(s, &ops, err), 0);
    bool found = false;
    for (size_t i = 0; i < ops.n && !found; i++) {
        if (ops.v[i].type != KD_SEARCH_VALIDATE_AFTER)
            continue;
        found = true;
        if (ops.v[i].length != want_len)
            fail_msg("config %s: length %lld, want %lld", searcher, (long long)ops.v[i].length,
                     (long long)want_len);
    }
    assert_true(found);
    assert_string_equal(kd_searcher_unit(s), want_unit);
    kd_search_ops_free(&ops);
    kd_searcher_free(s);
}

/* Determined 0.38's forms: a bare max_length, none at all, adaptive_asha's max_time. */
static void test_lengths_038(void **state)
{
    (void)state;
    first_length("{\"name\": \"single\", \"metric\": \"l\", \"max_length\": 100}", 100, "batches");
    first_length("{\"name\": \"single\", \"metric\": \"l\"}", KD_SEARCH_OPEN_LENGTH, "batches");
    first_length("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 2}",
                 KD_SEARCH_OPEN_LENGTH, "batches");
    first_length("{\"name\": \"grid\", \"metric\": \"l\"}", KD_SEARCH_OPEN_LENGTH, "batches");
    first_length("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 2, \"max_length\":"
                 " {\"records\": 640}}",
                 640, "records");
    /* ASHA with time_metric/max_time: one open operation, rungs in the metric's values. */
    first_length("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 4, "
                 "\"max_rungs\": 1, \"time_metric\": \"batches\", \"max_time\": 64}",
                 KD_SEARCH_OPEN_LENGTH, "batches");
}

static void test_bad_configs(void **state)
{
    (void)state;
    bad_config("{\"metric\": \"loss\"}", "searcher.name: required");
    bad_config("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 4, "
               "\"max_time\": 8}",
               "searcher.time_metric: required with max_time");
    bad_config("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 4, "
               "\"time_metric\": \"epochs\"}",
               "searcher.max_time: required with time_metric");
    bad_config("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 4, "
               "\"time_metric\": \"\", \"max_time\": 8}",
               "searcher.time_metric: expected the name of a validation metric");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 4, "
               "\"time_metric\": \"epochs\", \"max_time\": 8}",
               "searcher.time_metric: only the adaptive_asha searcher");
    bad_config("{\"name\": \"randon\", \"metric\": \"l\"}",
               "searcher.name: unknown searcher \"randon\"; did you mean `random`?");
    bad_config("{\"name\": \"random\", \"max_trials\": 3, \"max_length\": {\"batches\": 1}}",
               "searcher.metric: required");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_length\": {\"batches\": 1}}",
               "searcher.max_trials: required by the random searcher");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 0, \"max_length\": "
               "{\"batches\": 1}}",
               "searcher.max_trials: must be at least 1, got 0");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": \"ten\"}",
               "searcher.max_trials: expected an integer");
    bad_config("{\"name\": \"bayesian\", \"metric\": \"l\", \"max_trials\": 2}",
               "searcher.max_length: required by the bayesian searcher");
    bad_config("{\"name\": \"single\", \"metric\": \"l\", \"max_length\": 0}",
               "searcher.max_length: expected a positive integer");
    bad_config("{\"name\": \"single\", \"metric\": \"l\", \"max_length\": {\"batchs\": 1}}",
               "searcher.max_length.batchs: unknown unit; did you mean `batches`?");
    bad_config("{\"name\": \"single\", \"metric\": \"l\", \"max_length\": {\"epochs\": 0}}",
               "searcher.max_length.epochs: expected a positive integer");
    bad_config("{\"name\": \"single\", \"metric\": \"l\", \"smaller_is_better\": \"yes\","
               " \"max_length\": {\"epochs\": 1}}",
               "searcher.smaller_is_better: expected true or false");
    bad_config("{\"name\": \"grid\", \"metric\": \"l\", \"max_length\": {\"epochs\": 1}}",
               "hyperparameters.x.count: required by the grid searcher");
    bad_config("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 4, \"mode\": "
               "\"agressive\", \"max_length\": {\"epochs\": 1}}",
               "searcher.mode: expected aggressive, standard or conservative; did you mean "
               "`aggressive`?");
    bad_config("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 4, \"divisor\": "
               "1, \"max_length\": {\"epochs\": 1}}",
               "searcher.divisor: must be greater than 1");
    bad_config("{\"name\": \"adaptive_asha\", \"metric\": \"l\", \"max_trials\": 4, \"max_rungs\":"
               " 0, \"max_length\": {\"epochs\": 1}}",
               "searcher.max_rungs: must be at least 1");
    bad_config("{\"name\": \"pbt\", \"metric\": \"l\", \"num_rounds\": 2}",
               "searcher.population_size: required");
    bad_config("{\"name\": \"pbt\", \"metric\": \"l\", \"population_size\": 4, \"num_rounds\": 2,"
               " \"length_per_round\": {\"batches\": 5}, \"replace_function\": "
               "{\"truncate_fraction\": 0.7}, \"explore_function\": {\"resample_probability\": "
               "0.2, \"perturb_factor\": 0.2}}",
               "searcher.replace_function.truncate_fraction: must be in [0, 0.5], got 0.7");
    bad_config("{\"name\": \"pbt\", \"metric\": \"l\", \"population_size\": 4, \"num_rounds\": 2,"
               " \"length_per_round\": {\"batches\": 5}, \"replace_function\": "
               "{\"truncate_fraction\": 0.2}}",
               "searcher.explore_function: required by pbt");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 2, \"max_length\": "
               "{\"batches\": 1}, \"early_stopping\": [{\"type\": \"patience\"}]}",
               "searcher.early_stopping[0].patience: required");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 2, \"max_length\": "
               "{\"batches\": 1}, \"early_stopping\": [{\"type\": \"medain\"}]}",
               "searcher.early_stopping[0].type: unknown rule \"medain\"; did you mean `median`?");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 2, \"max_length\": "
               "{\"batches\": 1}, \"early_stopping\": [{\"type\": \"patience\", \"patience\": 2,"
               " \"min_delta\": -1}]}",
               "searcher.early_stopping[0].min_delta: must be >= 0");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 2, \"max_length\": "
               "{\"batches\": 1}, \"early_stopping\": [{\"type\": \"threshold\", \"treshold\": "
               "1}]}",
               "searcher.early_stopping[0].treshold: unknown field; did you mean `threshold`?");
    bad_config("{\"name\": \"random\", \"metric\": \"l\", \"max_trials\": 2, \"max_length\": "
               "{\"batches\": 1}, \"early_stopping\": {\"type\": \"median\"}}",
               "searcher.early_stopping: expected a list of rules");
    /* hyperparameter errors carry their path too */
    json_t *j = sim_config("{\"hyperparameters\": {\"a\": {\"b\": {\"type\": \"int\", \"minval\":"
                           " 2, \"maxval\": 1}}}, \"searcher\": {\"name\": \"single\", \"metric\":"
                           " \"l\", \"max_length\": {\"batches\": 1}}}");
    struct kd_searcher *s = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_searcher_new(j, 1, &s, err), KD_EINVAL);
    assert_non_null(strstr(err, "hyperparameters.a.b.maxval: must be at least minval"));
    json_decref(j);
    j = sim_config("{\"hyperparameters\": {}}");
    assert_int_equal(kd_searcher_new(j, 1, &s, err), KD_EINVAL);
    assert_non_null(strstr(err, "searcher: required"));
    json_decref(j);
}

static void bad_event(struct kd_searcher *s, const char *text, int want_rc, const char *want)
{
    json_t *ev = sim_config(text);
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN] = "";
    int rc = kd_searcher_event(s, ev, &ops, err);
    json_decref(ev);
    if (rc != want_rc || !strstr(err, want))
        fail_msg("event %s: got %d \"%s\", want %d \"%s\"", text, rc, err, want_rc, want);
    assert_int_equal(ops.n, 0);
}

static void test_bad_events(void **state)
{
    (void)state;
    struct kd_searcher *s = new_searcher(
        "{\"hyperparameters\": {\"x\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}},"
        " \"searcher\": {\"name\": \"random\", \"metric\": \"loss\", \"max_trials\": 3,"
        "  \"max_length\": {\"batches\": 10}}}",
        1);
    bad_event(s, "{\"event\": \"trial_created\", \"request_id\": \"r0-00000000\"}", KD_ESTATE,
              "trial_created: the searcher has not received `initial` yet");
    json_t *ops = feed(s, "{\"event\": \"initial\"}");
    char id[KD_SEARCH_IDLEN];
    kd_strlcpy(id, op_id(ops, 0), sizeof(id));
    json_decref(ops);
    bad_event(s, "{\"event\": \"initial\"}", KD_ESTATE, "already initialized");
    bad_event(s, "[1]", KD_EINVAL, "event: expected a JSON object");
    bad_event(s, "{\"request_id\": \"x\"}", KD_EINVAL, "event: missing \"event\"");
    bad_event(s, "{\"event\": \"trial_creatd\", \"request_id\": \"x\"}", KD_EINVAL,
              "unknown event \"trial_creatd\"; did you mean `trial_created`?");
    bad_event(s, "{\"event\": \"trial_created\"}", KD_EINVAL, "trial_created.request_id: required");
    bad_event(s, "{\"event\": \"trial_created\", \"request_id\": \"r9-12345678\"}", KD_EINVAL,
              "trial_created.request_id: unknown request id \"r9-12345678\"");
    bad_event(s, "{\"event\": \"trial_created\", \"request_id\": \"r0-00000000\"}", KD_EINVAL,
              "unknown request id");
    char buf[512];
    snprintf(buf, sizeof(buf),
             "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"length\": 5}", id);
    bad_event(s, buf, KD_EINVAL, "validation_completed.metric: expected a number");
    snprintf(buf, sizeof(buf),
             "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 1,"
             " \"length\": -5}",
             id);
    bad_event(s, buf, KD_EINVAL, "validation_completed.length: expected a non-negative integer");
    json_decref(feed(s,
                     "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 1,"
                     " \"length\": 5}",
                     id));
    snprintf(buf, sizeof(buf),
             "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 1,"
             " \"length\": 4}",
             id);
    bad_event(s, buf, KD_EINVAL,
              "validation_completed.length: 4 is below the trial's last validated length 5");
    snprintf(buf, sizeof(buf),
             "{\"event\": \"trial_exited_early\", \"request_id\": \"%s\", \"reason\": \"oom\"}",
             id);
    bad_event(s, buf, KD_EINVAL,
              "trial_exited_early.reason: expected errored, user_canceled or invalid_hp");
    json_decref(feed(s, "{\"event\": \"trial_closed\", \"request_id\": \"%s\"}", id));
    snprintf(buf, sizeof(buf), "{\"event\": \"trial_closed\", \"request_id\": \"%s\"}", id);
    bad_event(s, buf, KD_ESTATE, "was already closed");
    snprintf(buf, sizeof(buf),
             "{\"event\": \"validation_completed\", \"request_id\": \"%s\", \"metric\": 1,"
             " \"length\": 9}",
             id);
    bad_event(s, buf, KD_ESTATE, "has already closed");
    /* NaN metrics count as the worst value; larger-is-better flips the sign internally */
    struct kd_search_ops o = {0};
    char err[KD_ERRLEN];
    const char *id1 = s->trials[1].id;
    assert_int_equal(kd_searcher_validation_completed(s, id1, NAN, 10, &o, err), 0);
    assert_true(s->trials[1].best > 1e300);
    kd_search_ops_free(&o);
    kd_searcher_free(s);
}

int main(void)
{
    kd_log_init("test", KD_LOG_WARN, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_asha_hand_worked),
        cmocka_unit_test(test_asha_brackets),
        cmocka_unit_test(test_asha_time_metric),
        cmocka_unit_test(test_asha_time_metric_run),
        cmocka_unit_test(test_pbt),
        cmocka_unit_test(test_tpe_beats_random_on_branin),
        cmocka_unit_test(test_tpe_parallel_spreads),
        cmocka_unit_test(test_tpe_believe_table),
        cmocka_unit_test(test_tpe_parallel_quality),
        cmocka_unit_test(test_tpe_mixed_types),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_lengths_038),
        cmocka_unit_test(test_bad_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
