/*
 * What the controller writes into its store about experiments and trials
 * (wire.c), against a private PostgreSQL: a trial's restarts reach its row
 * (and never go down on a stale read), and an experiment being deleted is
 * no longer ACTIVE there, while an ended one keeps its outcome.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "controller/store/fx.h"
#include "ctrl.h"
#include "wire.h"

static json_t *experiment(const char *uid, const char *name)
{
    return json_pack("{s:{s:s,s:s,s:s}}", "metadata", "uid", uid, "namespace", "default", "name",
                     name);
}

static json_t *trial(const char *uid, int restarts)
{
    return json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:{s:f},s:i},s:{s:s,s:i}}", "metadata", "uid", uid,
                     "namespace", "default", "name", "t", "spec", "requestId", "r-1", "hparams",
                     "lr", 0.1, "seed", 7, "status", "state", "ACTIVE", "restarts", restarts);
}

static long long q(PGconn *pc, const char *fmt, const char *arg)
{
    char sql[256];
    snprintf(sql, sizeof(sql), fmt, arg);
    return fx_int(pc, sql);
}

static void test_restarts(void **s)
{
    (void)s;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_ctrl c = {.store = fx_store(NULL, ci, sizeof(ci))};
    PGconn *pc = fx_conn(ci);
    json_t *e = experiment("e-uid-1", "exp"), *cfg = json_object();
    json_t *t0 = trial("t-uid-1", 0), *t2 = trial("t-uid-1", 2), *t1 = trial("t-uid-1", 1);
    assert_int_equal(kd_ctrl_wire_rows(&c, e, t0, cfg, NULL, err), 0);
    assert_int_equal(q(pc, "SELECT restarts FROM trials WHERE uid = '%s'", "t-uid-1"), 0);
    /* the third attempt starts after two restarts */
    assert_int_equal(kd_ctrl_wire_rows(&c, e, t2, cfg, NULL, err), 0);
    assert_int_equal(q(pc, "SELECT restarts FROM trials WHERE uid = '%s'", "t-uid-1"), 2);
    /* a stale cache does not take it back */
    assert_int_equal(kd_ctrl_wire_rows(&c, e, t1, cfg, NULL, err), 0);
    assert_int_equal(q(pc, "SELECT restarts FROM trials WHERE uid = '%s'", "t-uid-1"), 2);
    assert_int_equal(q(pc, "SELECT count(*) FROM trials WHERE uid = '%s'", "t-uid-1"), 1);
    json_decref(e);
    json_decref(cfg);
    json_decref(t0);
    json_decref(t1);
    json_decref(t2);
    PQfinish(pc);
    kd_store_close(c.store);
}

static void test_deleted(void **s)
{
    (void)s;
    char ci[512], err[KD_ERRLEN] = "";
    int64_t id = 0;
    struct kd_ctrl c = {.store = fx_store(NULL, ci, sizeof(ci))};
    PGconn *pc = fx_conn(ci);
    json_t *live = experiment("e-live", "live"), *ended = experiment("e-ended", "ended"),
           *none = experiment("e-none", "none"), *cfg = json_object(), *t = trial("t-x", 0),
           *t2 = trial("t-y", 0);
    assert_int_equal(kd_ctrl_wire_rows(&c, live, t, cfg, NULL, err), 0);
    assert_int_equal(kd_ctrl_wire_rows(&c, ended, t2, cfg, NULL, err), 0);
    assert_int_equal(kd_store_experiment_lookup(c.store, "e-ended", &id, err), 0);
    assert_int_equal(kd_store_experiment_set_state(c.store, id, "COMPLETED", err), 0);

    assert_int_equal(kd_ctrl_wire_deleted(&c, live, err), 0);
    assert_int_equal(
        q(pc, "SELECT count(*) FROM experiments WHERE uid = '%s' AND state = 'DELETED'", "e-live"),
        1);
    assert_int_equal(q(pc,
                       "SELECT count(*) FROM experiments WHERE uid = '%s' AND ended_at IS NOT NULL",
                       "e-live"),
                     1);
    assert_int_equal(q(pc, "SELECT count(*) FROM trials WHERE uid = '%s'", "t-x"), 1);
    /* again (a retried reconcile): still DELETED */
    assert_int_equal(kd_ctrl_wire_deleted(&c, live, err), 0);
    assert_int_equal(
        q(pc, "SELECT count(*) FROM experiments WHERE uid = '%s' AND state = 'DELETED'", "e-live"),
        1);
    /* an ended experiment keeps its outcome */
    assert_int_equal(kd_ctrl_wire_deleted(&c, ended, err), 0);
    assert_int_equal(q(pc,
                       "SELECT count(*) FROM experiments WHERE uid = '%s' AND state = 'COMPLETED'",
                       "e-ended"),
                     1);
    /* no row (no trial ever started with the store): none is made */
    assert_int_equal(kd_ctrl_wire_deleted(&c, none, err), 0);
    assert_int_equal(q(pc, "SELECT count(*) FROM experiments WHERE uid = '%s'", "e-none"), 0);
    /* without a store: nothing to do */
    struct kd_ctrl off = {0};
    assert_int_equal(kd_ctrl_wire_deleted(&off, live, err), 0);
    json_decref(live);
    json_decref(ended);
    json_decref(none);
    json_decref(cfg);
    json_decref(t);
    json_decref(t2);
    PQfinish(pc);
    kd_store_close(c.store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restarts),
        cmocka_unit_test(test_deleted),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
