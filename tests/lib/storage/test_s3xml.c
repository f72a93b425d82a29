/*
 * lib/storage/s3xml.c: element text and its references, list pages, Error
 * and DeleteObjects answers, as a table. The references case is what the
 * scanner got wrong before: &#0; and &#256; put a NUL into a key (cutting
 * it short) and &#233; gave the byte 0xE9 instead of the UTF-8 of U+00E9.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "storage/s3xml.h"

static void test_text(void **state)
{
    (void)state;
    static const struct {
        const char *xml, *want; /* want NULL: refused */
    } cases[] = {
        {"<Key>plain</Key>", "plain"},
        {"<Key>a &amp; b &lt;c&gt; &quot;d&quot; &apos;e&apos;</Key>", "a & b <c> \"d\" 'e'"},
        {"<Key>&#x41;&#66;&#X43;</Key>", "ABC"},
        {"<Key>caf&#233;</Key>", "caf\xc3\xa9"},
        {"<Key>&#x20AC;&#x1F600;</Key>", "\xe2\x82\xac\xf0\x9f\x98\x80"},
        {"<Key>line&#xD;&#xA;</Key>", "line\r\n"},
        {"<Key>&unknown; &amp</Key>", "&unknown; &amp"},
        {"<Key>a&#0;../../x</Key>", NULL},
        {"<Key>a&#256;b</Key>", "a\xc4\x80"
                                "b"},
        {"<Key>&#x1;</Key>", NULL},
        {"<Key>&#xD800;</Key>", NULL},
        {"<Key>&#x110000;</Key>", NULL},
        {"<Key>&#99999999999999999999;</Key>", NULL},
        {"<Key>&#;</Key>", NULL},
        {"<Key>&#x41</Key>", NULL},
        {"<Key>&# 65;</Key>", NULL},
        {"<Key>&#-65;</Key>", NULL},
        {"<Key>unclosed", NULL},
        {"<Other>x</Other>", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[64];
        size_t n = 7;
        const char *x = cases[i].xml;
        const char *r = kd_storage__xml_get(x, x + strlen(x), "Key", out, sizeof(out), &n);
        if (cases[i].want == NULL) {
            if (r != NULL)
                fail_msg("%s: read as \"%s\"", x, out);
            assert_string_equal(out, "");
            assert_int_equal(n, 0);
        } else {
            if (r == NULL)
                fail_msg("%s: refused", x);
            assert_string_equal(out, cases[i].want);
            assert_int_equal(n, strlen(cases[i].want));
        }
    }
    /* Too long for the buffer: refused, and the buffer is left "". */
    char small[4];
    const char *x = "<Code>ABCDEFG</Code>";
    assert_null(kd_storage__xml_get(x, x + strlen(x), "Code", small, sizeof(small), NULL));
    assert_string_equal(small, "");
}

/* The scanner reads one element after another (from test_sigv4, where it began). */
static void test_sequence(void **state)
{
    (void)state;
    const char *x = "<R><Key>a &amp; b&#x2F;&lt;c&gt;</Key><Size>12</Size><Key>second</Key></R>";
    const char *end = x + strlen(x), *p;
    char out[64], tiny[4];
    p = kd_storage__xml_get(x, end, "Key", out, sizeof(out), NULL);
    assert_non_null(p);
    assert_string_equal(out, "a & b/<c>");
    assert_non_null(kd_storage__xml_get(p, end, "Key", out, sizeof(out), NULL));
    assert_string_equal(out, "second");
    assert_null(kd_storage__xml_get(x, end, "Missing", out, sizeof(out), NULL));
    assert_null(kd_storage__xml_get(x, end, "Key", tiny, sizeof(tiny), NULL)); /* not cut */
}

static void test_list(void **state)
{
    (void)state;
    const char *page =
        "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1"
        "</NextContinuationToken><Contents><Key>p/a</Key><Size>5</Size></Contents>"
        "<Contents><Key>q/skipped</Key><Size>1</Size></Contents>"
        "<Contents><Key>p/caf&#233;</Key><Size>18446744073709551615</Size></Contents>"
        "</ListBucketResult>";
    struct kd_storage_list l = {0};
    char token[64], err[KD_ERRLEN] = "";
    bool trunc = false;
    assert_int_equal(
        kd_storage__xml_list_page(page, strlen(page), "p/", &l, &trunc, token, sizeof(token), err),
        0);
    assert_true(trunc);
    assert_string_equal(token, "t&1");
    assert_int_equal(l.n, 2);
    assert_string_equal(l.objs[0].key, "a");
    assert_int_equal(l.objs[0].size, 5);
    assert_string_equal(l.objs[1].key, "caf\xc3\xa9");
    assert_true(l.objs[1].size == UINT64_MAX);
    kd_storage_list_free(&l);

    static const char *const bad[] = {
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>"
        "</NextContinuationToken></ListBucketResult>",
        "<Contents><Key>p/a&#0;b</Key><Size>1</Size></Contents>",
        "<Contents><Key>p/a</Key><Size>-1</Size></Contents>",
        "<Contents><Key>p/a</Key></Contents>",
        "<Contents><Key>p/a</Key><Size>1</Size>",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (kd_storage__xml_list_page(bad[i], strlen(bad[i]), "p/", &l, &trunc, token,
                                      sizeof(token), err) != KD_EPROTO)
            fail_msg("accepted: %s", bad[i]);
        assert_true(err[0] != '\0');
        kd_storage_list_free(&l);
    }
}

static void test_errors(void **state)
{
    (void)state;
    char code[8], msg[16], key[32];
    const char *e =
        "<Error><Code>SlowDown</Code><Message>Please reduce your rate</Message></Error>";
    kd_storage__xml_error(e, strlen(e), code, sizeof(code), msg, sizeof(msg));
    assert_string_equal(code, ""); /* 8 bytes do not hold it: nothing rather than a part */
    assert_string_equal(msg, "");
    char code2[32], msg2[64];
    kd_storage__xml_error(e, strlen(e), code2, sizeof(code2), msg2, sizeof(msg2));
    assert_string_equal(code2, "SlowDown");
    assert_string_equal(msg2, "Please reduce your rate");
    kd_storage__xml_error(NULL, 0, code2, sizeof(code2), msg2, sizeof(msg2));
    assert_string_equal(code2, "");

    const char *d = "<DeleteResult><Deleted><Key>a</Key></Deleted><Error><Key>b&amp;c</Key>"
                    "<Code>AccessDenied</Code></Error></DeleteResult>";
    assert_true(kd_storage__xml_delete_error(d, strlen(d), key, sizeof(key), code2, sizeof(code2)));
    assert_string_equal(key, "b&c");
    assert_string_equal(code2, "AccessDenied");
    const char *ok = "<DeleteResult><Deleted><Key>a</Key></Deleted></DeleteResult>";
    assert_false(
        kd_storage__xml_delete_error(ok, strlen(ok), key, sizeof(key), code2, sizeof(code2)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_sequence),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
