/*
 * The cluster's default checkpoint storage merged into experiment configs
 * (controller/defaults.c): a table of configs, the default, and the
 * checkpoint_storage that must result; then the default file's parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "defaults.h"

struct row {
    const char *name;
    const char *cfg;  /* the experiment config */
    const char *def;  /* the default; NULL: none */
    const char *want; /* the config's checkpoint_storage afterwards; NULL: absent */
};

static const struct row rows[] = {
    {"no default: nothing added", "{}", NULL, NULL},
    {"no storage: the default", "{}", "{\"type\":\"shared_fs\",\"host_path\":\"/ck\"}",
     "{\"type\":\"shared_fs\",\"host_path\":\"/ck\"}"},
    {"null storage: the default", "{\"checkpoint_storage\":null}",
     "{\"type\":\"s3\",\"bucket\":\"b\"}", "{\"type\":\"s3\",\"bucket\":\"b\"}"},
    {"partial without type: merged over", "{\"checkpoint_storage\":{\"save_trial_best\":3}}",
     "{\"type\":\"s3\",\"bucket\":\"b\",\"save_trial_best\":1}",
     "{\"type\":\"s3\",\"bucket\":\"b\",\"save_trial_best\":3}"},
    {"same type: merged, the config's fields win",
     "{\"checkpoint_storage\":{\"type\":\"s3\",\"prefix\":\"team-a\"}}",
     "{\"type\":\"s3\",\"bucket\":\"b\",\"prefix\":\"all\"}",
     "{\"type\":\"s3\",\"bucket\":\"b\",\"prefix\":\"team-a\"}"},
    {"another type: the config's own, whole",
     "{\"checkpoint_storage\":{\"type\":\"shared_fs\",\"host_path\":\"/mine\"}}",
     "{\"type\":\"s3\",\"bucket\":\"b\"}", "{\"type\":\"shared_fs\",\"host_path\":\"/mine\"}"},
    {"not a mapping: left for the config check", "{\"checkpoint_storage\":\"s3\"}",
     "{\"type\":\"s3\",\"bucket\":\"b\"}", "\"s3\""},
};

static void test_table(void **s)
{
    (void)s;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        json_t *cfg = json_loads(r->cfg, JSON_DECODE_ANY, NULL);
        json_t *def = r->def ? json_loads(r->def, 0, NULL) : NULL;
        assert_non_null(cfg);
        kd_ctrl_default_storage(cfg, def);
        json_t *got = json_object_get(cfg, "checkpoint_storage");
        json_t *want = r->want ? json_loads(r->want, JSON_DECODE_ANY, NULL) : NULL;
        if (!(want == NULL ? got == NULL : json_equal(got, want))) {
            char *g = got ? json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
                          : strdup("(absent)");
            fail_msg("%s: got %s, want %s", r->name, g, r->want ? r->want : "(absent)");
        }
        /* the default itself is never changed */
        if (def != NULL) {
            json_t *again = json_loads(r->def, 0, NULL);
            assert_true(json_equal(def, again));
            json_decref(again);
        }
        json_decref(want);
        json_decref(def);
        json_decref(cfg);
    }
}

static void test_parse(void **s)
{
    (void)s;
    char err[KD_ERRLEN] = "";
    json_t *j = NULL;
    assert_int_equal(
        kd_ctrl_default_storage_parse("f.json", "{\"type\":\"s3\",\"bucket\":\"b\"}", &j, err), 0);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "s3");
    json_decref(j);
    assert_int_equal(kd_ctrl_default_storage_parse("f.json", "{\"bucket\":\"b\"}", &j, err),
                     KD_EINVALID);
    assert_null(j);
    assert_non_null(strstr(err, "f.json: expected a checkpoint_storage object with a \"type\""));
    assert_int_equal(kd_ctrl_default_storage_parse("f.json", "{\"type\":", &j, err), KD_EINVALID);
    assert_non_null(strstr(err, "f.json:1:"));
    assert_int_equal(kd_ctrl_default_storage_parse("f.json", "[1]", &j, err), KD_EINVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
