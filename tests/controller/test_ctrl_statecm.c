/*
 * The searcher-state ConfigMap's contents (controller/statecm.c): a small
 * state as text, a large one gzip'd, both read back equal; one that does
 * not fit even gzip'd refused with both sizes; broken contents named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctrl.h"

/* A state with n trials, as the experiment reconciler keeps it. */
static json_t *state_of(int n, unsigned seed)
{
    json_t *trials = json_array();
    for (int i = 0; i < n; i++) {
        char rid[40];
        seed = seed * 1103515245u + 12345u;
        snprintf(rid, sizeof(rid), "%032x", seed ^ (unsigned)i);
        json_array_append_new(trials, json_pack("{s:s,s:i,s:{s:f,s:i},s:I,s:s,s:i,s:b,s:b,s:i,s:b}",
                                                "request_id", rid, "index", i + 1, "hparams", "lr",
                                                (seed % 1000) / 1e4, "layers", (int)(seed % 7),
                                                "seed", (json_int_t)(seed % 100000), "parent", "",
                                                "validate_after", 100, "closed", 0, "created", 1,
                                                "validated", 0, "ended", 0));
    }
    return json_pack("{s:i,s:I,s:s,s:b,s:o}", "version", 1, "seed", (json_int_t)seed, "unit",
                     "batches", "done", 0, "trials", trials);
}

/* encode then decode through a ConfigMap object; returns whether it was gzip'd. */
static bool round_trip(json_t *state)
{
    char err[KD_ERRLEN] = "";
    char *text = json_dumps(state, JSON_COMPACT);
    json_t *data = NULL, *binary = NULL, *back = NULL;
    assert_int_equal(kd_ctrl_state_encode(text, &data, &binary, err), 0);
    json_t *cm = json_pack("{s:{s:s},s:O}", "metadata", "name", "e-searcher", "data", data);
    if (binary != NULL) {
        json_object_set(cm, "binaryData", binary);
        assert_int_equal(json_object_size(data), 0);
        assert_true(strlen(json_string_value(json_object_get(binary, KD_CTRL_STATE_GZ_KEY))) <=
                    KD_CTRL_STATE_MAX);
    } else {
        assert_string_equal(json_string_value(json_object_get(data, KD_CTRL_STATE_KEY)), text);
    }
    assert_int_equal(kd_ctrl_state_decode(cm, &back, err), 0);
    assert_true(json_equal(back, state));
    bool gz = binary != NULL;
    json_decref(back);
    json_decref(cm);
    json_decref(data);
    json_decref(binary);
    free(text);
    return gz;
}

static void test_forms(void **s)
{
    (void)s;
    static const struct {
        int trials;
        bool gzip;
    } cases[] = {{0, false}, {10, false}, {500, false}, {5000, true}, {20000, true}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *st = state_of(cases[i].trials, 7u + (unsigned)i);
        if (round_trip(st) != cases[i].gzip)
            fail_msg("%d trials: gzip'd %d", cases[i].trials, !cases[i].gzip);
        json_decref(st);
    }
}

/* Random text does not compress: past the cap even gzip'd, refused with both sizes. */
static void test_too_big(void **s)
{
    (void)s;
    size_t n = 2u << 20;
    char *text = malloc(n + 1);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        text[i] = (char)(' ' + x % 94);
    }
    text[n] = '\0';
    char err[KD_ERRLEN] = "";
    json_t *data = NULL, *binary = NULL;
    assert_int_equal(kd_ctrl_state_encode(text, &data, &binary, err), KD_ETOOBIG);
    assert_null(data);
    assert_null(binary);
    assert_non_null(strstr(err, "2097152 bytes"));
    assert_non_null(strstr(err, "gzip'd"));
    free(text);
}

static void test_broken(void **s)
{
    (void)s;
    static const struct {
        const char *cm;
        const char *says;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"e-searcher\"}}", "neither data.state.json"},
        {"{\"metadata\":{\"name\":\"e-searcher\"},\"data\":{\"state.json\":\"{\"}}",
         "data.state.json"},
        {"{\"metadata\":{\"name\":\"e-searcher\"},\"binaryData\":{\"state.json.gz\":\"!!\"}}",
         "not base64 of one gzip member"},
        /* base64 of "hello": not gzip */
        {"{\"metadata\":{\"name\":\"e-searcher\"},\"binaryData\":{\"state.json.gz\":\"aGVsbG8=\"}}",
         "not base64 of one gzip member"},
        /* base64 of the gzip of "{": not JSON */
        {"{\"metadata\":{\"name\":\"e-searcher\"},\"binaryData\":{\"state.json.gz\":"
         "\"H4sIAAAAAAAAA6sGADlH1RUBAAAA\"}}",
         "binaryData.state.json.gz"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[KD_ERRLEN] = "";
        json_t *cm = json_loads(cases[i].cm, 0, NULL), *st = NULL;
        assert_non_null(cm);
        assert_int_equal(kd_ctrl_state_decode(cm, &st, err), KD_ECORRUPT);
        assert_null(st);
        if (strstr(err, cases[i].says) == NULL || strstr(err, "e-searcher") == NULL)
            fail_msg("case %zu: %s", i, err);
        json_decref(cm);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_broken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
