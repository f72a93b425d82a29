/*
 * Lease-based leader election against a real kdet-local: of two electors
 * exactly one leads, never both; a released lease passes to the other at
 * once; an abandoned one only after its duration; a leader whose lease is
 * taken away is told to stop.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/time.h"
#include "k8s/leader.h"
#include "kdet_local.h"

#define NS "kube-system"

static struct kl server;
static struct kd_k8s_client *ca, *cb;

static int setup(void **state)
{
    (void)state;
    kl_start(&server, NULL, 0);
    ca = kl_client(&server, NULL);
    cb = kl_client(&server, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kd_k8s_client_free(ca);
    kd_k8s_client_free(cb);
    kl_destroy(&server);
    return 0;
}

struct cbs {
    atomic_int started, stopped, new_leader;
};

static void on_started(void *ud)
{
    atomic_fetch_add(&((struct cbs *)ud)->started, 1);
}

static void on_stopped(void *ud)
{
    atomic_fetch_add(&((struct cbs *)ud)->stopped, 1);
}

static void on_new_leader(const char *id, void *ud)
{
    (void)id;
    atomic_fetch_add(&((struct cbs *)ud)->new_leader, 1);
}

static struct kd_k8s_leader *elector(struct kd_k8s_client *c, const char *lease, const char *id,
                                     struct cbs *cb_, bool release)
{
    struct kd_k8s_leader_opts o = {.ns = NS,
                                   .name = lease,
                                   .identity = id,
                                   .lease_duration_ms = 3000,
                                   .renew_deadline_ms = 2000,
                                   .retry_period_ms = 300,
                                   .on_started = on_started,
                                   .on_stopped = on_stopped,
                                   .on_new_leader = on_new_leader,
                                   .ud = cb_,
                                   .release_on_stop = release};
    struct kd_k8s_leader *le = NULL;
    char err[KD_ERRLEN];
    if (kd_k8s_leader_start(c, &o, &le, err) != 0)
        fail_msg("leader start: %s", err);
    return le;
}

/* Sample both electors for ms; fail if both lead at once. Returns the % of samples with one. */
static int watch_both(struct kd_k8s_leader *a, struct kd_k8s_leader *b, long ms, int *samples)
{
    int one = 0, n = 0;
    for (int64_t end = kd_mono_ms() + ms; kd_mono_ms() < end; n++) {
        bool la = kd_k8s_leader_is_leader(a), lb = kd_k8s_leader_is_leader(b);
        if (la && lb)
            fail_msg("both electors lead at once");
        one += la != lb;
        kd_sleep_ms(20);
    }
    *samples = n;
    return n > 0 ? one * 100 / n : 0;
}

static json_t *get_lease(const char *name)
{
    json_t *l = NULL;
    char err[KD_ERRLEN];
    if (kd_k8s_get(ca, &KD_K8S_LEASES, NS, name, &l, NULL, err) != 0)
        fail_msg("get lease: %s", err);
    return l;
}

static const char *spec_str(json_t *lease, const char *k)
{
    return json_string_value(json_object_get(json_object_get(lease, "spec"), k));
}

static void wait_leader(struct kd_k8s_leader *le, long ms, const char *what)
{
    int64_t end = kd_mono_ms() + ms;
    while (!kd_k8s_leader_is_leader(le)) {
        if (kd_mono_ms() > end)
            fail_msg("%s did not lead within %ld ms", what, ms);
        kd_sleep_ms(10);
    }
}

static void test_one_leader_and_release(void **state)
{
    (void)state;
    struct cbs xa = {0}, xb = {0};
    struct kd_k8s_leader *a = elector(ca, "kdet-controller", "replica-a", &xa, true);
    struct kd_k8s_leader *b = elector(cb, "kdet-controller", "replica-b", &xb, true);
    int samples = 0, one = watch_both(a, b, 3000, &samples);
    printf("one leader in %d%% of %d samples; started a=%d b=%d\n", one, samples,
           atomic_load(&xa.started), atomic_load(&xb.started));
    assert_true(samples > 20);
    assert_true(one >= 80); /* from the first renewal on: not leaderless for long */
    assert_int_equal(atomic_load(&xa.started) + atomic_load(&xb.started), 1);
    struct kd_k8s_leader *leader = kd_k8s_leader_is_leader(a) ? a : b;
    struct kd_k8s_leader *follower = leader == a ? b : a;
    struct cbs *xl = leader == a ? &xa : &xb, *xf = leader == a ? &xb : &xa;
    const char *fid = leader == a ? "replica-b" : "replica-a";
    char holder[64];
    kd_k8s_leader_holder(follower, holder, sizeof(holder));
    assert_string_equal(holder, leader == a ? "replica-a" : "replica-b");
    assert_true(atomic_load(&xf->new_leader) >= 1);
    json_t *l = get_lease("kdet-controller");
    assert_string_equal(spec_str(l, "holderIdentity"), holder);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(l, "spec"), "leaseDurationSeconds")), 3);
    assert_non_null(strchr(spec_str(l, "renewTime"), '.')); /* MicroTime */
    json_decref(l);

    /* the leader stops and releases: the follower takes over within a few retry periods */
    int64_t t0 = kd_mono_ms();
    kd_k8s_leader_stop(leader);
    assert_int_equal(atomic_load(&xl->stopped), 1);
    wait_leader(follower, 2000, fid);
    printf("takeover after release: %lld ms\n", (long long)(kd_mono_ms() - t0));
    l = get_lease("kdet-controller");
    assert_string_equal(spec_str(l, "holderIdentity"), fid);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(l, "spec"), "leaseTransitions")), 1);
    json_decref(l);
    kd_k8s_leader_stop(follower);
}

static void test_abandoned_lease_waits_for_expiry(void **state)
{
    (void)state;
    struct cbs xa = {0}, xb = {0};
    struct kd_k8s_leader *a = elector(ca, "abandoned", "replica-a", &xa, false);
    wait_leader(a, 3000, "replica-a");
    struct kd_k8s_leader *b = elector(cb, "abandoned", "replica-b", &xb, false);
    kd_sleep_ms(700);
    assert_false(kd_k8s_leader_is_leader(b));
    /* a dies without releasing: b must wait out the lease (3 s from its last observed change) */
    int64_t t0 = kd_mono_ms();
    kd_k8s_leader_stop(a);
    wait_leader(b, 6000, "replica-b");
    int64_t dt = kd_mono_ms() - t0;
    printf("takeover of an abandoned lease after %lld ms\n", (long long)dt);
    assert_true(dt >= 3000 - 700);
    kd_k8s_leader_stop(b);
}

static void test_leader_told_to_stop_when_lease_taken(void **state)
{
    (void)state;
    struct cbs xa = {0};
    struct kd_k8s_leader *a = elector(ca, "stolen", "replica-a", &xa, false);
    wait_leader(a, 3000, "replica-a");
    /* someone else writes the lease (as another replica would after a partition) */
    json_t *l = get_lease("stolen");
    json_t *spec = json_object_get(l, "spec");
    char ms[40], now[48];
    kd_time_rfc3339(kd_wall_ms(), 1, ms, sizeof(ms));
    ms[strlen(ms) - 1] = '\0'; /* MicroTime: six fractional digits */
    snprintf(now, sizeof(now), "%s000Z", ms);
    json_object_set_new(spec, "holderIdentity", json_string("intruder"));
    json_object_set_new(spec, "renewTime", json_string(now));
    char err[KD_ERRLEN];
    if (kd_k8s_update(cb, &KD_K8S_LEASES, NS, NULL, l, NULL, NULL, err) != 0)
        fail_msg("update lease: %s", err);
    json_decref(l);
    int64_t end = kd_mono_ms() + 2000;
    while (atomic_load(&xa.stopped) == 0 && kd_mono_ms() < end)
        kd_sleep_ms(10);
    assert_int_equal(atomic_load(&xa.stopped), 1);
    assert_false(kd_k8s_leader_is_leader(a));
    kd_k8s_leader_stop(a);
    assert_int_equal(atomic_load(&xa.stopped), 1); /* not told twice */
}

static void test_bad_options(void **state)
{
    (void)state;
    struct kd_k8s_leader_opts o = {.ns = NS,
                                   .name = "x",
                                   .identity = "a",
                                   .lease_duration_ms = 1000,
                                   .renew_deadline_ms = 2000};
    struct kd_k8s_leader *le = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(kd_k8s_leader_start(ca, &o, &le, err), KD_EINVAL);
    assert_non_null(strstr(err, "lease_duration_ms"));
    o.lease_duration_ms = 3000;
    o.retry_period_ms = 1900;
    assert_int_equal(kd_k8s_leader_start(ca, &o, &le, err), KD_EINVAL);
    assert_non_null(strstr(err, "retry_period_ms"));
    o.identity = "";
    assert_int_equal(kd_k8s_leader_start(ca, &o, &le, err), KD_EINVAL);
    assert_non_null(strstr(err, "identity"));
    assert_null(le);
}

int main(void)
{
    kd_log_init("test", KD_LOG_WARN, -1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_leader_and_release),
        cmocka_unit_test(test_abandoned_lease_waits_for_expiry),
        cmocka_unit_test(test_leader_told_to_stop_when_lease_taken),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
