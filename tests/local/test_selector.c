/* Label and field selector parsing and matching, including every operator and the errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../local/selector.h"

static json_t *obj(const char *labels_json)
{
    json_t *labels = json_loads(labels_json, 0, NULL);
    assert_non_null(labels);
    return json_pack("{s:{s:s,s:s,s:o},s:{s:s},s:{s:s}}", "metadata", "name", "p1", "namespace",
                     "ns1", "labels", labels, "status", "phase", "Running", "spec", "nodeName",
                     "n1");
}

static bool lmatch(const char *sel, const json_t *o)
{
    struct kd_selector *s = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(kd_selector_parse_labels(sel, &s, err), 0);
    bool m = kd_selector_match(s, o);
    kd_selector_free(s);
    return m;
}

static void test_label_operators(void **state)
{
    (void)state;
    json_t *o = obj("{\"app\":\"web\",\"tier\":\"gold\",\"empty\":\"\"}");
    assert_true(lmatch("", o));
    assert_true(lmatch(NULL, o));
    assert_true(lmatch("app=web", o));
    assert_true(lmatch("app==web", o));
    assert_false(lmatch("app=db", o));
    assert_true(lmatch("app!=db", o));
    assert_false(lmatch("app!=web", o));
    assert_true(lmatch("missing!=x", o)); /* != matches objects without the key */
    assert_true(lmatch("app in (db, web)", o));
    assert_false(lmatch("app in (db)", o));
    assert_true(lmatch("app notin (db)", o));
    assert_false(lmatch("app notin (web,db)", o));
    assert_true(lmatch("missing notin (x)", o));
    assert_true(lmatch("app", o));
    assert_false(lmatch("missing", o));
    assert_true(lmatch("!missing", o));
    assert_false(lmatch("!app", o));
    assert_true(lmatch("app=web,tier=gold", o));
    assert_false(lmatch("app=web,tier=silver", o));
    assert_true(lmatch("empty=", o));
    assert_true(lmatch("example.com/key notin (a),app in (web)", o));
    json_decref(o);
}

static void test_label_errors(void **state)
{
    (void)state;
    struct kd_selector *s = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(kd_selector_parse_labels("app in (a", &s, err), KD_EINVAL);
    assert_null(s);
    assert_non_null(strstr(err, "position"));
    assert_int_equal(kd_selector_parse_labels("app >< b", &s, err), KD_EINVAL);
    assert_non_null(strstr(err, "found '>'"));
    assert_int_equal(kd_selector_parse_labels("a=b,", &s, err), KD_EINVAL);
    assert_non_null(strstr(err, "missing after ','"));
    assert_int_equal(kd_selector_parse_labels("=b", &s, err), KD_EINVAL);
    assert_non_null(strstr(err, "label key is required"));
    assert_int_equal(kd_selector_parse_labels("app in b", &s, err), KD_EINVAL);
    assert_non_null(strstr(err, "expected: '('"));
}

static void test_fields(void **state)
{
    (void)state;
    static const char *const pod_fields[] = {"status.phase", "spec.nodeName", NULL};
    json_t *o = obj("{}");
    struct kd_selector *s = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(
        kd_selector_parse_fields("metadata.name=p1,status.phase=Running", pod_fields, &s, err), 0);
    assert_true(kd_selector_match(s, o));
    kd_selector_free(s);
    assert_int_equal(kd_selector_parse_fields("spec.nodeName!=n1", pod_fields, &s, err), 0);
    assert_false(kd_selector_match(s, o));
    kd_selector_free(s);
    assert_int_equal(kd_selector_parse_fields("metadata.namespace==ns2", NULL, &s, err), 0);
    assert_false(kd_selector_match(s, o));
    kd_selector_free(s);
    assert_int_equal(kd_selector_parse_fields("status.phase=Running", NULL, &s, err), KD_EINVAL);
    assert_string_equal(err, "field label not supported: status.phase");
    assert_int_equal(kd_selector_parse_fields("metadata.name", NULL, &s, err), KD_EINVAL);
    assert_non_null(strstr(err, "metadata.name"));
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_operators),
        cmocka_unit_test(test_label_errors),
        cmocka_unit_test(test_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
