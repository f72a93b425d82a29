/* det trial list --best N: the ranking of trials by the searcher metric
 * (cli/best.c), table-tested on Trial and Experiment objects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../cli/cli.h"

/* det_err lives in cli/main.c (output.c refers to it). */
void det_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* A Trial named NAME whose status.bestValidation.value is v ("-": none, "s": a string). */
static json_t *trial(const char *name, const char *v)
{
    json_t *t = json_pack("{s:{s:s},s:{}}", "metadata", "name", name, "status");
    if (strcmp(v, "-") == 0)
        return t;
    json_t *val = strcmp(v, "s") == 0 ? json_string("0.1")
                  : strchr(v, '.')    ? json_real(strtod(v, NULL))
                                      : json_integer(strtol(v, NULL, 10));
    json_object_set_new(json_object_get(t, "status"), "bestValidation",
                        json_pack("{s:s,s:o}", "metric", "loss", "value", val));
    return t;
}

static const struct {
    const char *values; /* per trial t1, t2, ...: space separated */
    bool smaller;
    size_t n;
    const char *want; /* names, best first */
} cases[] = {
    {"0.5 0.25 0.75", true, 3, "t2 t1 t3"},
    {"0.5 0.25 0.75", false, 3, "t3 t1 t2"},
    {"0.5 0.25 0.75", true, 1, "t2"},
    {"0.5 0.25 0.75", false, 2, "t3 t1"},
    {"0.5 0.25 0.75", true, 10, "t2 t1 t3"},
    {"- 0.3 - 0.1", true, 5, "t4 t2"},           /* no validation: left out */
    {"s 0.3 - 0.1", true, 5, "t4 t2"},           /* a string: left out */
    {"0.2 0.1 0.2 0.1", true, 4, "t2 t4 t1 t3"}, /* ties keep the input order */
    {"0.2 0.1 0.2 0.1", false, 4, "t1 t3 t2 t4"},
    {"3 1.5 -2", true, 3, "t3 t2 t1"}, /* integers and negative values */
    {"- - -", true, 3, ""},
    {"", true, 3, ""},
};

static void test_ranking(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        json_t *ts = json_array();
        char buf[256], got[256] = "", name[16];
        snprintf(buf, sizeof(buf), "%s", cases[c].values);
        int k = 0;
        for (char *save = NULL, *v = strtok_r(buf, " ", &save); v; v = strtok_r(NULL, " ", &save)) {
            snprintf(name, sizeof(name), "t%d", ++k);
            json_array_append_new(ts, trial(name, v));
        }
        json_t *b = det_best_trials(ts, cases[c].smaller, cases[c].n);
        size_t i;
        json_t *t;
        json_array_foreach(b, i, t)
        {
            size_t len = strlen(got);
            snprintf(got + len, sizeof(got) - len, "%s%s", i ? " " : "",
                     det_get_str(t, "metadata.name", "?"));
        }
        if (strcmp(got, cases[c].want) != 0)
            fail_msg("case %zu (%s, %s, n=%zu): got \"%s\", want \"%s\"", c, cases[c].values,
                     cases[c].smaller ? "smaller" : "larger", cases[c].n, got, cases[c].want);
        json_decref(b);
        json_decref(ts);
    }
}

static void test_direction(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        bool want;
    } dc[] = {
        {"{}", true},
        {"{\"spec\":{\"searcher\":{\"metric\":\"loss\"}}}", true},
        {"{\"spec\":{\"searcher\":{\"smaller_is_better\":false}}}", false},
        {"{\"spec\":{\"searcher\":{\"smaller_is_better\":true}}}", true},
        {"{\"metadata\":{\"annotations\":{\"kdet.io/smaller-is-better\":\"false\"}}}", false},
        {"{\"metadata\":{\"annotations\":{\"kdet.io/smaller-is-better\":\"true\"}}}", true},
        /* the spec wins over the annotation */
        {"{\"spec\":{\"searcher\":{\"smaller_is_better\":true}},"
         "\"metadata\":{\"annotations\":{\"kdet.io/smaller-is-better\":\"false\"}}}",
         true},
    };
    for (size_t i = 0; i < sizeof(dc) / sizeof(dc[0]); i++) {
        json_t *e = json_loads(dc[i].json, 0, NULL);
        assert_non_null(e);
        if (det_smaller_is_better(e) != dc[i].want)
            fail_msg("case %zu %s: want %s", i, dc[i].json, dc[i].want ? "true" : "false");
        json_decref(e);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranking),
        cmocka_unit_test(test_direction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
