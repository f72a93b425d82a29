/* Hyperparameter spaces: parsing, errors with paths, grid counts, sampling, building. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include <cmocka.h>

#include "hparams/space.h"

static struct kd_hp_space *parse_ok(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    assert_non_null(j);
    struct kd_hp_space *sp = NULL;
    char err[KD_ERRLEN] = "";
    int rc = kd_hp_space_parse(j, &sp, err);
    if (rc != 0)
        fail_msg("parse failed: %s", err);
    json_decref(j);
    return sp;
}

static void parse_bad(const char *text, const char *want)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    assert_non_null(j);
    struct kd_hp_space *sp = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_hp_space_parse(j, &sp, err), KD_EINVAL);
    assert_null(sp);
    if (!strstr(err, want))
        fail_msg("error \"%s\" does not contain \"%s\"", err, want);
    json_decref(j);
}

static const char *SPACE =
    "{\"global_batch_size\": 64,"
    " \"lr\": {\"type\": \"log\", \"minval\": -4, \"maxval\": -1, \"base\": 10, \"count\": 4},"
    " \"layers\": {\"type\": \"int\", \"minval\": 1, \"maxval\": 3, \"count\": 10},"
    " \"dropout\": {\"type\": \"double\", \"minval\": 0.0, \"maxval\": 0.5, \"count\": 3},"
    " \"optimizer\": {\"name\": {\"type\": \"categorical\", \"vals\": [\"sgd\", \"adam\"]},"
    "                 \"momentum\": {\"type\": \"const\", \"val\": 0.9}}}";

static void test_parse_types(void **state)
{
    (void)state;
    struct kd_hp_space *sp = parse_ok(SPACE);
    assert_int_equal(sp->n, 6);
    assert_string_equal(sp->params[0].path, "global_batch_size");
    assert_int_equal(sp->params[0].type, KD_HP_CONST);
    assert_int_equal(sp->params[1].type, KD_HP_LOG);
    assert_true(sp->params[1].base == 10.0);
    assert_int_equal(sp->params[2].type, KD_HP_INT);
    assert_int_equal(sp->params[3].type, KD_HP_DOUBLE);
    assert_string_equal(sp->params[4].path, "optimizer.name");
    assert_int_equal(sp->params[4].type, KD_HP_CATEGORICAL);
    assert_int_equal(sp->params[4].nvals, 2);
    assert_string_equal(sp->params[5].path, "optimizer.momentum");
    kd_hp_space_free(sp);
}

static void test_grid_counts(void **state)
{
    (void)state;
    struct kd_hp_space *sp = parse_ok(SPACE);
    uint64_t n = 0;
    char err[KD_ERRLEN];
    assert_int_equal(kd_hp_grid_size(sp, &n, err), 0);
    /* 1 * 4 * min(10, 3) * 3 * 2 * 1 */
    assert_int_equal(n, 72);
    /* every grid point is distinct, and the int points are 1, 2, 3 */
    double x[6];
    json_t *seen = json_object();
    int layers_seen[4] = {0};
    for (uint64_t i = 0; i < n; i++) {
        kd_hp_grid_point(sp, i, x);
        json_t *h = kd_hp_build(sp, x);
        char *s = json_dumps(h, JSON_SORT_KEYS | JSON_COMPACT);
        assert_null(json_object_get(seen, s));
        json_object_set_new(seen, s, json_true());
        layers_seen[json_integer_value(json_object_get(h, "layers"))]++;
        double lr = json_real_value(json_object_get(h, "lr"));
        assert_true(lr >= 1e-4 * 0.999 && lr <= 0.1 * 1.001);
        free(s);
        json_decref(h);
    }
    assert_int_equal(json_object_size(seen), 72);
    assert_int_equal(layers_seen[1], 24);
    assert_int_equal(layers_seen[2], 24);
    assert_int_equal(layers_seen[3], 24);
    json_decref(seen);
    /* first point: the lowest of everything; dropout 0, 0.25, 0.5 */
    kd_hp_grid_point(sp, 0, x);
    assert_true(x[1] == -4 && x[2] == 1 && x[3] == 0.0 && x[4] == 0);
    kd_hp_grid_point(sp, 1, x);
    assert_true(x[4] == 1); /* last leaf varies fastest (const leaves count 1) */
    kd_hp_grid_point(sp, 2, x);
    assert_true(x[3] == 0.25);
    kd_hp_space_free(sp);

    /* single points are midpoints; a count-1 int rounds */
    sp = parse_ok("{\"a\": {\"type\": \"int\", \"minval\": 1, \"maxval\": 4, \"count\": 1},"
                  " \"b\": {\"type\": \"double\", \"minval\": 1, \"maxval\": 2, \"count\": 1}}");
    assert_int_equal(kd_hp_grid_size(sp, &n, err), 0);
    assert_int_equal(n, 1);
    kd_hp_grid_point(sp, 0, x);
    assert_true(x[0] == 3 && x[1] == 1.5);
    kd_hp_space_free(sp);

    /* grid needs counts; too-large grids are refused */
    sp = parse_ok("{\"a\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1}}");
    assert_int_equal(kd_hp_grid_size(sp, &n, err), KD_EINVAL);
    assert_non_null(strstr(err, "hyperparameters.a.count"));
    kd_hp_space_free(sp);
    sp = parse_ok("{\"a\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1, \"count\": 1000},"
                  " \"b\": {\"type\": \"double\", \"minval\": 0, \"maxval\": 1, \"count\": 1000}}");
    assert_int_equal(kd_hp_grid_size(sp, &n, err), KD_ETOOBIG);
    kd_hp_space_free(sp);
    /* empty space: one point, the empty object */
    sp = parse_ok("{}");
    assert_int_equal(kd_hp_grid_size(sp, &n, err), 0);
    assert_int_equal(n, 1);
    kd_hp_space_free(sp);
}

static void test_sampling(void **state)
{
    (void)state;
    struct kd_hp_space *sp = parse_ok(SPACE);
    struct kd_rng r;
    kd_rng_seed(&r, 3);
    double x[6];
    int layers[4] = {0}, cats[2] = {0}, lr_decades[3] = {0};
    for (int i = 0; i < 30000; i++) {
        kd_hp_sample(sp, &r, x);
        json_t *h = kd_hp_build(sp, x);
        json_int_t l = json_integer_value(json_object_get(h, "layers"));
        assert_true(l >= 1 && l <= 3);
        layers[l]++;
        double lr = json_real_value(json_object_get(h, "lr"));
        assert_true(lr >= 1e-4 && lr < 1e-1);
        lr_decades[(int)floor(log10(lr)) + 4]++;
        double d = json_real_value(json_object_get(h, "dropout"));
        assert_true(d >= 0 && d < 0.5);
        const char *opt =
            json_string_value(json_object_get(json_object_get(h, "optimizer"), "name"));
        cats[strcmp(opt, "adam") == 0]++;
        assert_true(json_real_value(json_object_get(json_object_get(h, "optimizer"), "momentum")) ==
                    0.9);
        assert_int_equal(json_integer_value(json_object_get(h, "global_batch_size")), 64);
        json_decref(h);
    }
    /* uniform in the exponent: each decade gets about a third */
    for (int i = 0; i < 3; i++) {
        assert_true(lr_decades[i] > 9000 && lr_decades[i] < 11000);
        assert_true(layers[i + 1] > 9000 && layers[i + 1] < 11000);
    }
    assert_true(cats[0] > 14000 && cats[1] > 14000);
    kd_hp_space_free(sp);
}

static void test_log_base(void **state)
{
    (void)state;
    struct kd_hp_space *sp = parse_ok(
        "{\"w\": {\"type\": \"log\", \"minval\": 1, \"maxval\": 5, \"base\": 2, \"count\": 5}}");
    double x[1];
    for (uint64_t i = 0; i < 5; i++) {
        kd_hp_grid_point(sp, i, x);
        json_t *v = kd_hp_value(&sp->params[0], x[0]);
        assert_true(fabs(json_real_value(v) - pow(2, (double)i + 1)) < 1e-12);
        json_decref(v);
    }
    kd_hp_space_free(sp);
    /* default base 10 */
    sp = parse_ok("{\"w\": {\"type\": \"log\", \"minval\": -2, \"maxval\": 0}}");
    assert_true(sp->params[0].base == 10);
    json_t *v = kd_hp_value(&sp->params[0], -2);
    assert_true(fabs(json_real_value(v) - 0.01) < 1e-15);
    json_decref(v);
    kd_hp_space_free(sp);
}

static void test_bad_spaces(void **state)
{
    (void)state;
    parse_bad("[1]", "hyperparameters: expected a mapping");
    parse_bad(
        "{\"a\": {\"type\": \"doubel\", \"minval\": 1, \"maxval\": 2}}",
        "hyperparameters.a.type: unknown hyperparameter type \"doubel\"; did you mean `double`?");
    parse_bad("{\"a\": {\"type\": \"int\", \"minval\": 1.5, \"maxval\": 2}}",
              "hyperparameters.a.minval: expected an integer");
    parse_bad("{\"a\": {\"type\": \"int\", \"maxval\": 2}}", "hyperparameters.a.minval: required");
    parse_bad("{\"a\": {\"type\": \"int\", \"minval\": 3, \"maxval\": 2}}",
              "hyperparameters.a.maxval: must be at least minval");
    parse_bad("{\"a\": {\"type\": \"double\", \"minval\": 1, \"maxval\": 1}}",
              "hyperparameters.a.maxval: must be greater than minval");
    parse_bad("{\"a\": {\"type\": \"double\", \"minval\": 0, \"maxval\": \"1\"}}",
              "hyperparameters.a.maxval: expected a number");
    parse_bad("{\"a\": {\"type\": \"log\", \"minval\": 0, \"maxval\": 1, \"base\": 1}}",
              "hyperparameters.a.base: must be positive and not 1");
    parse_bad("{\"a\": {\"type\": \"log\", \"minval\": 0, \"maxval\": 400}}", "overflows");
    parse_bad("{\"a\": {\"type\": \"int\", \"minval\": 0, \"maxval\": 1, \"count\": 0}}",
              "hyperparameters.a.count: must be between 1");
    parse_bad("{\"n\": {\"a\": {\"type\": \"categorical\", \"vals\": []}}}",
              "hyperparameters.n.a.vals: expected a non-empty list");
    parse_bad("{\"a\": {\"type\": \"const\"}}", "hyperparameters.a.val: required");
    parse_bad(
        "{\"a\": {\"type\": \"int\", \"minval\": 0, \"maxval\": 1, \"cout\": 2}}",
        "hyperparameters.a.cout: unknown field for a int hyperparameter (did you mean `count`?)");
    parse_bad("{\"a\": null}", "hyperparameters.a: null is not a hyperparameter value");
    parse_bad("{\"a\": {\"type\": 3}}", "hyperparameters.a.type: expected a string");
    /* nesting deeper than the cap */
    char deep[512];
    size_t off = 0;
    for (int i = 0; i < 20; i++)
        off += (size_t)snprintf(deep + off, sizeof(deep) - off, "{\"x\": ");
    off += (size_t)snprintf(deep + off, sizeof(deep) - off, "1");
    for (int i = 0; i < 20; i++)
        off += (size_t)snprintf(deep + off, sizeof(deep) - off, "}");
    parse_bad(deep, "nested deeper than 16 levels");
    /* NULL is an empty space */
    struct kd_hp_space *sp = NULL;
    assert_int_equal(kd_hp_space_parse(NULL, &sp, NULL), 0);
    assert_int_equal(sp->n, 0);
    kd_hp_space_free(sp);
}

static void test_bare_values_and_clamp(void **state)
{
    (void)state;
    struct kd_hp_space *sp = parse_ok("{\"s\": \"x\", \"l\": [1, 2], \"b\": true, \"e\": {}}");
    assert_int_equal(sp->n, 4);
    for (size_t i = 0; i < sp->n; i++)
        assert_int_equal(sp->params[i].type, KD_HP_CONST);
    double x[4] = {0};
    json_t *h = kd_hp_build(sp, x);
    char *s = json_dumps(h, JSON_COMPACT);
    assert_string_equal(s, "{\"s\":\"x\",\"l\":[1,2],\"b\":true,\"e\":{}}");
    free(s);
    json_decref(h);
    kd_hp_space_free(sp);
    sp = parse_ok("{\"i\": {\"type\": \"int\", \"minval\": -2, \"maxval\": 2},"
                  " \"c\": {\"type\": \"categorical\", \"vals\": [1, 2, 3]}}");
    assert_true(kd_hp_clamp(&sp->params[0], 7.6) == 2);
    assert_true(kd_hp_clamp(&sp->params[0], -0.6) == -1);
    assert_true(kd_hp_clamp(&sp->params[1], 5) == 2);
    assert_true(kd_hp_clamp(&sp->params[1], NAN) == 0);
    kd_hp_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_types), cmocka_unit_test(test_grid_counts),
        cmocka_unit_test(test_sampling),    cmocka_unit_test(test_log_base),
        cmocka_unit_test(test_bad_spaces),  cmocka_unit_test(test_bare_values_and_clamp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
