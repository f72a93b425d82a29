/* The queue position of an Experiment: creation time, ahead-of/behind-of, chains, cycles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "k8s/client.h"
#include "k8s/position.h"

static json_t *mkexp(const char *ns, const char *name, const char *created, const char *ann,
                     const char *other)
{
    json_t *e = json_pack("{s:{s:s,s:s,s:s}}", "metadata", "name", name, "namespace", ns,
                          "creationTimestamp", created);
    if (ann != NULL)
        json_object_set_new(json_object_get(e, "metadata"), "annotations",
                            json_pack("{s:s}", ann, other));
    return e;
}

static json_t *lookup(const char *ns, const char *name, void *ud)
{
    size_t i;
    json_t *e;
    json_array_foreach((json_t *)ud, i, e)
    {
        if (strcmp(kd_k8s_meta_str(e, "namespace"), ns) == 0 &&
            strcmp(kd_k8s_meta_str(e, "name"), name) == 0)
            return json_incref(e);
    }
    return NULL;
}

static double pos(json_t *all, const char *name)
{
    json_t *e = lookup("a", name, all);
    assert_non_null(e);
    double p = kd_queue_position(e, lookup, all);
    json_decref(e);
    return p;
}

static void test_creation_order(void **state)
{
    (void)state;
    json_t *all = json_pack("[o,o,o]", mkexp("a", "x", "2026-01-01T00:00:00Z", NULL, NULL),
                            mkexp("a", "y", "2026-01-01T00:00:01Z", NULL, NULL),
                            mkexp("a", "z", "not a time", NULL, NULL));
    assert_true(pos(all, "x") < pos(all, "y"));
    assert_true(pos(all, "x") == 1767225600000.0);
    assert_true(pos(all, "z") == 0.0); /* an unreadable time sorts first, as time 0 */
    json_decref(all);
}

static void test_ahead_and_behind(void **state)
{
    (void)state;
    json_t *all = json_pack("[o,o,o,o,o]", mkexp("a", "x", "2026-01-01T00:00:00Z", NULL, NULL),
                            mkexp("a", "y", "2026-01-01T00:00:01Z", NULL, NULL),
                            mkexp("a", "late", "2026-01-01T00:00:09Z", KD_ANN_AHEAD_OF, "y"),
                            mkexp("a", "early", "2026-01-01T00:00:00Z", KD_ANN_BEHIND_OF, "y"),
                            mkexp("a", "lost", "2026-01-01T00:00:05Z", KD_ANN_AHEAD_OF, "missing"));
    /* x < late < y < early */
    assert_true(pos(all, "x") < pos(all, "late"));
    assert_true(pos(all, "late") < pos(all, "y"));
    assert_true(pos(all, "y") < pos(all, "early"));
    assert_true(pos(all, "early") < pos(all, "lost"));
    /* a missing target leaves the creation time */
    assert_true(pos(all, "lost") == 1767225605000.0);
    json_decref(all);
}

static void test_chain_and_cycle(void **state)
{
    (void)state;
    /* c ahead of b, b ahead of a: c < b < a, and all before d created earlier than a */
    json_t *all = json_pack("[o,o,o,o,o,o]", mkexp("a", "a", "2026-01-01T00:00:10Z", NULL, NULL),
                            mkexp("a", "b", "2026-01-01T00:00:20Z", KD_ANN_AHEAD_OF, "a"),
                            mkexp("a", "c", "2026-01-01T00:00:30Z", KD_ANN_AHEAD_OF, "b"),
                            mkexp("a", "d", "2026-01-01T00:00:11Z", NULL, NULL),
                            mkexp("a", "p", "2026-01-01T00:00:40Z", KD_ANN_AHEAD_OF, "q"),
                            mkexp("a", "q", "2026-01-01T00:00:50Z", KD_ANN_AHEAD_OF, "p"));
    assert_true(pos(all, "c") < pos(all, "b"));
    assert_true(pos(all, "b") < pos(all, "a"));
    assert_true(pos(all, "a") < pos(all, "d"));
    /* a cycle ends (bounded depth) with a finite answer */
    double p = pos(all, "p"), q = pos(all, "q");
    assert_true(p > 1767225600000.0 && p < 1767225700000.0);
    assert_true(q > 1767225600000.0 && q < 1767225700000.0);
    json_decref(all);
}

static void test_namespace_scoped(void **state)
{
    (void)state;
    json_t *all = json_pack("[o,o]", mkexp("a", "x", "2026-01-01T00:00:09Z", KD_ANN_AHEAD_OF, "y"),
                            mkexp("b", "y", "2026-01-01T00:00:01Z", NULL, NULL));
    /* y lives in another namespace: x keeps its own time */
    assert_true(pos(all, "x") == 1767225609000.0);
    json_decref(all);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_creation_order),
        cmocka_unit_test(test_ahead_and_behind),
        cmocka_unit_test(test_chain_and_cycle),
        cmocka_unit_test(test_namespace_scoped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
