/*
 * The scheduler-to-reconciler handoff: admissions taken once, given back
 * and dropped; reasons that wake the reconciler only when they change;
 * preemptions that stay pending until consumed; pruning; interned node
 * names; and two threads that take admissions at once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "handoff.h"

static void test_admissions(void **s)
{
    (void)s;
    struct kd_handoff *h = kd_handoff_new();
    struct kd_handoff_admit ad;
    char node[32] = "node-a";
    const char *nodes[2] = {node, NULL};
    assert_false(kd_handoff_admitted(h, "ns/t-1"));
    assert_false(kd_handoff_take_admission(h, "ns/t-1", &ad));
    kd_handoff_admit(h, "ns/t-1", 2, nodes, 4, true, 1000);
    snprintf(node, sizeof(node), "changed"); /* the handoff keeps its own copy of the name */
    assert_true(kd_handoff_admitted(h, "ns/t-1"));
    assert_false(kd_handoff_admitted(h, "ns/t-2"));
    assert_true(kd_handoff_take_admission(h, "ns/t-1", &ad));
    assert_string_equal(ad.key, "ns/t-1");
    assert_int_equal(ad.nplace, 2);
    assert_int_equal(ad.gpus, 4);
    assert_true(ad.cpu); /* CPU slots, as admitted */
    assert_string_equal(ad.nodes[0], "node-a");
    assert_null(ad.nodes[1]);
    assert_false(ad.used); /* the copy is the admission as it was taken */
    /* taken once: used, still held as a reservation */
    assert_false(kd_handoff_take_admission(h, "ns/t-1", &ad));
    assert_false(kd_handoff_admitted(h, "ns/t-1"));
    assert_true(kd_handoff_holds(h, "ns/t-1", &ad));
    /* given back, taken again */
    kd_handoff_unuse_admission(h, "ns/t-1");
    assert_true(kd_handoff_admitted(h, "ns/t-1"));
    assert_true(kd_handoff_take_admission(h, "ns/t-1", &ad));
    /* dropped: gone */
    kd_handoff_drop_admission(h, "ns/t-1");
    assert_false(kd_handoff_holds(h, "ns/t-1", &ad));
    /* dropping keeps unused admissions */
    kd_handoff_admit(h, "ns/t-3", 1, NULL, 0, false, 1000);
    kd_handoff_drop_admission(h, "ns/t-3");
    assert_true(kd_handoff_admitted(h, "ns/t-3"));
    assert_true(kd_handoff_holds(h, "ns/t-3", &ad));
    assert_null(ad.nodes[0]);
    /* node names are interned: two admissions on one node share the name */
    struct kd_handoff_admit a2;
    const char *n2[1] = {"node-a"};
    kd_handoff_admit(h, "ns/t-4", 1, n2, 1, false, 1000);
    assert_true(kd_handoff_holds(h, "ns/t-4", &a2));
    kd_handoff_admit(h, "ns/t-5", 1, n2, 1, false, 1000);
    assert_true(kd_handoff_holds(h, "ns/t-5", &ad));
    assert_ptr_equal(ad.nodes[0], a2.nodes[0]);
    kd_handoff_free(h);
}

static void test_reasons_and_preemptions(void **s)
{
    (void)s;
    struct kd_handoff *h = kd_handoff_new();
    char why[16];
    bool never = true;
    assert_false(kd_handoff_reason(h, "ns/t-1", why, sizeof(why), &never));
    assert_false(never);
    assert_true(kd_handoff_say(h, "ns/t-1", "wait", "no free GPU"));
    assert_false(kd_handoff_say(h, "ns/t-1", "wait", "no free GPU")); /* unchanged: no wake-up */
    assert_true(kd_handoff_say(h, "ns/t-1", "never", "needs 9 GPUs on one node"));
    assert_true(kd_handoff_reason(h, "ns/t-1", why, sizeof(why), &never));
    assert_string_equal(why, "needs 9 GPUs on"); /* cut to the buffer */
    assert_true(never);
    /* an admission forgets why the trial waited */
    kd_handoff_admit(h, "ns/t-1", 1, NULL, 1, false, 1000);
    assert_false(kd_handoff_reason(h, "ns/t-1", why, sizeof(why), &never));

    assert_false(kd_handoff_preempting(h, "ns/t-2"));
    assert_true(kd_handoff_preempt(h, "ns/t-2", "priority"));
    assert_false(kd_handoff_preempt(h, "ns/t-2", "again")); /* already asked */
    assert_true(kd_handoff_preempting(h, "ns/t-2"));
    assert_true(kd_handoff_preemption(h, "ns/t-2", why, sizeof(why)));
    assert_string_equal(why, "priority");
    assert_true(kd_handoff_preempting(h, "ns/t-2")); /* a look does not consume it */
    kd_handoff_take_preemption(h, "ns/t-2");
    assert_false(kd_handoff_preempting(h, "ns/t-2"));
    assert_false(kd_handoff_preemption(h, "ns/t-2", why, sizeof(why)));
    kd_handoff_free(h);
}

static void test_prune(void **s)
{
    (void)s;
    struct kd_handoff *h = kd_handoff_new();
    struct kd_handoff_admit ad;
    char why[64];
    bool never;
    kd_handoff_admit(h, "ns/pods-up", 2, NULL, 1, false, 1000);
    kd_handoff_admit(h, "ns/one-pod", 2, NULL, 1, false, 1000);
    kd_handoff_admit(h, "ns/old", 1, NULL, 1, false, 0);
    assert_true(kd_handoff_say(h, "ns/gone", "wait", "x"));
    assert_true(kd_handoff_say(h, "ns/kept", "wait", "y"));
    json_t *seen = json_pack("{s:b}", "ns/kept", 1);
    json_t *live = json_pack("{s:[{},{}],s:[{}]}", "ns/pods-up", "ns/one-pod");
    kd_handoff_prune(h, seen, live, 5000, 5000);
    assert_false(kd_handoff_holds(h, "ns/pods-up", &ad)); /* all its pods exist */
    assert_true(kd_handoff_holds(h, "ns/one-pod", &ad));  /* one of two */
    assert_false(kd_handoff_holds(h, "ns/old", &ad));     /* older than the TTL */
    assert_false(kd_handoff_reason(h, "ns/gone", why, sizeof(why), &never));
    assert_true(kd_handoff_reason(h, "ns/kept", why, sizeof(why), &never));
    json_decref(seen);
    json_decref(live);
    kd_handoff_free(h);
}

#define RACE_N 300

struct racer {
    struct kd_handoff *h;
    int taken;
};

static void *race(void *ud)
{
    struct racer *r = ud;
    struct kd_handoff_admit ad;
    char key[32];
    for (int i = 0; i < RACE_N; i++) {
        snprintf(key, sizeof(key), "ns/t-%d", i);
        if (kd_handoff_take_admission(r->h, key, &ad))
            r->taken++;
    }
    return NULL;
}

/* Two reconcilers take admissions at once: each is taken exactly once. */
static void test_threads(void **s)
{
    (void)s;
    struct kd_handoff *h = kd_handoff_new();
    char key[32];
    for (int i = 0; i < RACE_N; i++) {
        snprintf(key, sizeof(key), "ns/t-%d", i);
        kd_handoff_admit(h, key, 1, NULL, 1, false, 1000);
    }
    struct racer a = {.h = h}, b = {.h = h};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, race, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, race, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.taken + b.taken, RACE_N);
    kd_handoff_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admissions),
        cmocka_unit_test(test_reasons_and_preemptions),
        cmocka_unit_test(test_prune),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
