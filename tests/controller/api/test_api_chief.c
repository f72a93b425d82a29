/*
 * The launcher's side of the rendezvous through the controller
 * (launcher/chief.c) against the real API, a private PostgreSQL and a real
 * kdet-local: node rank 0 reports a free port and its pod IP, a peer that
 * asked first gets them for the same run id, a peer of another run times
 * out within its bound, a chief of a run with no pods is refused at once,
 * bad tokens fail at once, an unreachable controller is retried until the
 * bound.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/str.h"
#include "core/time.h"
#include "fx.h"
#include "chief.h"

static char tok[64];

static void env_for(const char *trial, const char *token)
{
    setenv("KDET_CONTROLLER_URL", fx.url, 1);
    setenv("KDET_TOKEN", token, 1);
    setenv("KDET_TRIAL_ID", trial, 1);
    setenv("KDET_NAMESPACE", "default", 1);
    setenv("KDET_POD_IP", "127.0.0.1", 1);
}

static void node(struct kd_launch_env *e, int rank, const char *run)
{
    memset(e, 0, sizeof(*e));
    e->num_nodes = 2;
    e->node_rank = rank;
    e->master_port = 29400;
    e->port_source = "default";
    kd_strlcpy(e->chief_addr, "node0.kdet-x.default.svc", sizeof(e->chief_addr));
    kd_strlcpy(e->run_id, run, sizeof(e->run_id));
}

static void test_when(void **state)
{
    (void)state;
    struct kd_launch_env e;
    char uid[64];
    fx_experiment("e-ch", "validation_loss");
    fx_trial("e-ch", "e-ch-1", 100, uid, sizeof(uid));
    fx_token("e-ch-1", uid, tok, sizeof(tok));
    env_for("e-ch-1", tok);
    node(&e, 1, "r1");
    assert_true(kd_chief_via_controller(&e));
    node(&e, 0, "r1");
    assert_true(kd_chief_via_controller(&e));
    e.num_nodes = 1; /* one node: nothing to find */
    assert_false(kd_chief_via_controller(&e));
    node(&e, 0, "r1");
    unsetenv("KDET_POD_IP"); /* the chief cannot say where it is: the DNS name stays */
    assert_false(kd_chief_via_controller(&e));
    node(&e, 1, "r1");
    assert_true(kd_chief_via_controller(&e));
    unsetenv("KDET_CONTROLLER_URL");
    assert_false(kd_chief_via_controller(&e));
    env_for("e-ch-1", tok);
    unsetenv("KDET_TOKEN");
    assert_false(kd_chief_via_controller(&e));
    env_for("e-ch-1", tok);
    setenv("DTRAIN_RENDEZVOUS_TIMEOUT", "7.5", 1);
    assert_int_equal(kd_chief_timeout_ms(), 7500);
    setenv("DTRAIN_RENDEZVOUS_TIMEOUT", "soon", 1);
    assert_int_equal(kd_chief_timeout_ms(), KD_CHIEF_DEFAULT_TIMEOUT_MS);
    unsetenv("DTRAIN_RENDEZVOUS_TIMEOUT");
}

struct peer {
    struct kd_launch_env e;
    int64_t timeout_ms;
    int rc;
    char err[KD_ERRLEN];
};

static void *peer_run(void *p)
{
    struct peer *x = p;
    x->rc = kd_chief_resolve(&x->e, x->timeout_ms, x->err);
    return NULL;
}

static void test_chief_and_peer(void **state)
{
    (void)state;
    env_for("e-ch-1", tok);
    fx_pod("e-ch-1", "run-1", "e-ch-1-run-1");
    /* The peer asks before the chief has reported. */
    struct peer a = {.timeout_ms = 30000};
    node(&a.e, 1, "run-1");
    pthread_t th;
    pthread_create(&th, NULL, peer_run, &a);
    kd_sleep_ms(300);
    struct kd_launch_env c;
    char err[KD_ERRLEN] = "";
    node(&c, 0, "run-1");
    assert_int_equal(kd_chief_resolve(&c, 10000, err), 0);
    assert_string_equal(c.chief_addr, "127.0.0.1");
    assert_string_equal(c.port_source, "controller");
    assert_true(c.master_port > 0 && c.master_port != 29400);
    pthread_join(th, NULL);
    assert_int_equal(a.rc, 0);
    assert_string_equal(a.e.chief_addr, "127.0.0.1");
    assert_int_equal(a.e.master_port, c.master_port);
    /* A peer of another run (a later attempt) never gets run-1's chief. */
    struct peer b = {.timeout_ms = 1500};
    node(&b.e, 1, "run-2");
    int64_t t0 = kd_mono_ms();
    peer_run(&b);
    int64_t took = kd_mono_ms() - t0;
    assert_int_equal(b.rc, KD_ETIMEDOUT);
    assert_non_null(strstr(b.err, "DTRAIN_RENDEZVOUS_TIMEOUT"));
    assert_string_equal(b.e.chief_addr, "node0.kdet-x.default.svc");
    assert_true(took >= 1000 && took < 15000);
    /* run-2 is no attempt of the trial yet: its chief is refused at once. */
    node(&c, 0, "run-2");
    t0 = kd_mono_ms();
    assert_int_equal(kd_chief_resolve(&c, 20000, err), KD_EINVAL);
    assert_non_null(strstr(err, "409"));
    assert_true(kd_mono_ms() - t0 < 10000);
    /* Once it is, its chief reports and its peer gets that port. */
    fx_pod("e-ch-1", "run-2", "e-ch-1-run-2");
    node(&c, 0, "run-2");
    int first = a.e.master_port;
    assert_int_equal(kd_chief_resolve(&c, 10000, err), 0);
    node(&b.e, 1, "run-2");
    peer_run(&b);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.e.master_port, c.master_port);
    (void)first; /* the kernel may hand out the same free port again: only equality matters */
}

static void test_refused_and_unreachable(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    struct kd_launch_env e;
    /* A wrong token is final: no retries until the bound. */
    env_for("e-ch-1", "0000000000000000000000000000000000000000000000000000000000000000");
    node(&e, 1, "run-1");
    int64_t t0 = kd_mono_ms();
    assert_int_equal(kd_chief_resolve(&e, 20000, err), KD_EUNAUTHORIZED);
    assert_true(kd_mono_ms() - t0 < 10000);
    assert_non_null(strstr(err, "401"));
    assert_null(strstr(err, "0000000000000000"));
    node(&e, 0, "run-1");
    assert_int_equal(kd_chief_resolve(&e, 20000, err), KD_EUNAUTHORIZED);
    /* No controller: retried with back-off, then the bound. */
    env_for("e-ch-1", tok);
    fx_api_stop();
    node(&e, 1, "run-1");
    t0 = kd_mono_ms();
    assert_int_equal(kd_chief_resolve(&e, 1500, err), KD_ETIMEDOUT);
    assert_true(kd_mono_ms() - t0 >= 1000);
    fx_api_start(fx.port);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_when),
        cmocka_unit_test(test_chief_and_peer),
        cmocka_unit_test(test_refused_and_unreachable),
    };
    return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
