/* Merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch as kubectl sends them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../local/patch.h"

static json_t *J(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (j == NULL)
        fail_msg("bad test JSON: %s: %s", s, e.text);
    return j;
}

static void assert_json(const json_t *got, const char *want)
{
    json_t *w = J(want);
    if (!json_equal(got, w)) {
        char *g = json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT);
        fail_msg("got %s, want %s", g, want);
    }
    json_decref(w);
}

static void test_merge(void **state)
{
    (void)state;
    json_t *doc = J("{\"a\":1,\"b\":{\"c\":2,\"d\":3},\"l\":[1,2]}");
    json_t *p = J("{\"a\":null,\"b\":{\"c\":9},\"l\":[3],\"n\":{\"x\":null,\"y\":1}}");
    json_t *out = NULL;
    assert_int_equal(kd_patch_merge(doc, p, &out, NULL), 0);
    assert_json(out, "{\"b\":{\"c\":9,\"d\":3},\"l\":[3],\"n\":{\"y\":1}}");
    assert_json(doc, "{\"a\":1,\"b\":{\"c\":2,\"d\":3},\"l\":[1,2]}"); /* input untouched */
    json_decref(out);
    json_decref(p);
    char err[KD_ERRLEN];
    p = J("[1]");
    assert_int_equal(kd_patch_merge(doc, p, &out, err), KD_EINVAL);
    assert_null(out);
    json_decref(p);
    json_decref(doc);
}

static void test_json_patch(void **state)
{
    (void)state;
    json_t *doc = J("{\"metadata\":{\"labels\":{\"a/b\":\"1\"}},\"l\":[1,2,3]}");
    json_t *ops = J("[{\"op\":\"add\",\"path\":\"/l/1\",\"value\":9},"
                    "{\"op\":\"add\",\"path\":\"/l/-\",\"value\":4},"
                    "{\"op\":\"remove\",\"path\":\"/metadata/labels/a~1b\"},"
                    "{\"op\":\"replace\",\"path\":\"/l/0\",\"value\":0},"
                    "{\"op\":\"copy\",\"from\":\"/l/0\",\"path\":\"/c\"},"
                    "{\"op\":\"move\",\"from\":\"/c\",\"path\":\"/m\"},"
                    "{\"op\":\"test\",\"path\":\"/m\",\"value\":0}]");
    json_t *out = NULL;
    char err[KD_ERRLEN];
    assert_int_equal(kd_patch_json(doc, ops, &out, err), 0);
    assert_json(out, "{\"metadata\":{\"labels\":{}},\"l\":[0,9,2,3,4],\"m\":0}");
    json_decref(out);
    json_decref(ops);
    ops = J("[{\"op\":\"test\",\"path\":\"/l/0\",\"value\":7}]");
    assert_int_equal(kd_patch_json(doc, ops, &out, err), KD_EINVAL);
    assert_non_null(strstr(err, "operation 0: test failed at /l/0"));
    json_decref(ops);
    ops = J("[{\"op\":\"remove\",\"path\":\"/nope/x\"}]");
    assert_int_equal(kd_patch_json(doc, ops, &out, err), KD_EINVAL);
    assert_non_null(strstr(err, "/nope/x"));
    json_decref(ops);
    ops = J("[{\"op\":\"jump\",\"path\":\"/l\"}]");
    assert_int_equal(kd_patch_json(doc, ops, &out, err), KD_EINVAL);
    assert_non_null(strstr(err, "unknown op \"jump\""));
    json_decref(ops);
    json_decref(doc);
}

/* The API server's limits: copies that double the document (a 3 KB patch once asked for
 * gigabytes), and the number of operations. */
static json_t *copies(const char *from, const char *to, int n)
{
    json_t *ops = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(ops,
                              json_pack("{s:s,s:s,s:s}", "op", "copy", "from", from, "path", to));
    return ops;
}

static void test_json_patch_limits(void **state)
{
    (void)state;
    char err[KD_ERRLEN];
    json_t *out = NULL;
    json_t *doc = J("{\"a\":[1,2,3]}");
    json_t *ops = copies("/a", "/a/-", 40);
    assert_int_equal(kd_patch_json(doc, ops, &out, err), KD_EINVAL);
    assert_null(out);
    assert_non_null(
        strstr(err, "(copy /a): the copies of this patch add up to more than 3145728 bytes"));
    assert_json(doc, "{\"a\":[1,2,3]}");
    json_decref(ops);
    json_decref(doc);

    /* The edge: a string of 1 MiB encoded, copied three times is exactly the budget. */
    size_t len = (1u << 20) - 2;
    char *big = malloc(len + 1);
    memset(big, 'x', len);
    big[len] = '\0';
    doc = json_pack("{s:s}", "s", big);
    ops = copies("/s", "/c", 3);
    assert_int_equal(kd_patch_json(doc, ops, &out, err), 0);
    assert_int_equal(json_string_length(json_object_get(out, "c")), len);
    json_decref(out);
    json_decref(ops);
    ops = copies("/s", "/c", 4);
    assert_int_equal(kd_patch_json(doc, ops, &out, err), KD_EINVAL);
    assert_non_null(strstr(err, "operation 3 (copy /s)"));
    json_decref(ops);
    json_decref(doc);
    free(big);

    /* At most 10,000 operations. */
    doc = J("{\"a\":1}");
    ops = json_array();
    for (int i = 0; i < KD_PATCH_MAX_OPS; i++)
        json_array_append_new(ops, J("{\"op\":\"test\",\"path\":\"/a\",\"value\":1}"));
    assert_int_equal(kd_patch_json(doc, ops, &out, err), 0);
    json_decref(out);
    json_array_append_new(ops, J("{\"op\":\"test\",\"path\":\"/a\",\"value\":1}"));
    assert_int_equal(kd_patch_json(doc, ops, &out, err), KD_EINVAL);
    assert_non_null(strstr(err, "at most 10000 operations; this one has 10001"));
    json_decref(ops);
    json_decref(doc);
}

static void test_strategic(void **state)
{
    (void)state;
    json_t *doc =
        J("{\"metadata\":{\"finalizers\":[\"a\"]},\"spec\":{\"containers\":["
          "{\"name\":\"main\",\"image\":\"x\",\"env\":[{\"name\":\"A\",\"value\":\"1\"}]},"
          "{\"name\":\"side\",\"image\":\"y\"}],\"tolerations\":[{\"key\":\"k\"}]}}");
    /* What kubectl apply sends: keyed list merge, directives, atomic lists. */
    json_t *p = J("{\"metadata\":{\"finalizers\":[\"b\"]},\"spec\":{"
                  "\"$setElementOrder/containers\":[{\"name\":\"side\"},{\"name\":\"main\"}],"
                  "\"containers\":[{\"name\":\"main\",\"image\":\"x2\",\"env\":[{\"name\":\"B\","
                  "\"value\":\"2\"}]},{\"name\":\"side\",\"$patch\":\"delete\"},{\"name\":\"new\","
                  "\"image\":\"z\"}],\"tolerations\":[{\"key\":\"t\"}]}}");
    json_t *out = NULL;
    assert_int_equal(kd_patch_strategic(doc, p, "Pod", &out, NULL), 0);
    assert_json(out,
                "{\"metadata\":{\"finalizers\":[\"a\",\"b\"]},\"spec\":{\"containers\":["
                "{\"name\":\"main\",\"image\":\"x2\",\"env\":[{\"name\":\"A\",\"value\":\"1\"},"
                "{\"name\":\"B\",\"value\":\"2\"}]},{\"name\":\"new\",\"image\":\"z\"}],"
                "\"tolerations\":[{\"key\":\"t\"}]}}");
    json_decref(out);
    json_decref(p);
    p = J("{\"metadata\":{\"$deleteFromPrimitiveList/finalizers\":[\"a\"]},"
          "\"spec\":{\"containers\":[{\"$patch\":\"replace\"},{\"name\":\"only\"}]}}");
    assert_int_equal(kd_patch_strategic(doc, p, "Pod", &out, NULL), 0);
    assert_json(out, "{\"metadata\":{\"finalizers\":[]},\"spec\":{\"containers\":["
                     "{\"name\":\"only\"}],\"tolerations\":[{\"key\":\"k\"}]}}");
    json_decref(out);
    json_decref(p);
    /* Service ports merge by port, container ports by containerPort. */
    json_t *svc = J("{\"spec\":{\"ports\":[{\"port\":80,\"name\":\"http\"}]}}");
    p = J("{\"spec\":{\"ports\":[{\"port\":80,\"name\":\"web\"},{\"port\":443}]}}");
    assert_int_equal(kd_patch_strategic(svc, p, "Service", &out, NULL), 0);
    assert_json(out, "{\"spec\":{\"ports\":[{\"port\":80,\"name\":\"web\"},{\"port\":443}]}}");
    json_decref(out);
    json_decref(p);
    json_decref(svc);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_json_patch),
        cmocka_unit_test(test_json_patch_limits),
        cmocka_unit_test(test_strategic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
