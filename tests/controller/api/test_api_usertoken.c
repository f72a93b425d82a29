/*
 * The pure parts of users and namespaces, table-driven: token text
 * (parse, format, secrets, hashes), user and namespace names, which
 * namespaces a principal may use and which routes name one. The fuzz
 * target's checks run over the same inputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "api/api_int.h"
#include "api/usertoken.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define S43 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA_"

static const struct {
    const char *in;
    int rc;
    int64_t id;
} parse_cases[] = {
    {"kdet_1_" S43, 0, 1},
    {"kdet_123456789012345678_" S43, 0, 123456789012345678LL},
    {"kdet_1234567890123456789_" S43, KD_EINVAL, 0}, /* 19 digits */
    {"kdet_0_" S43, KD_EINVAL, 0},
    {"kdet_08_" S43, KD_EINVAL, 0}, /* found by fuzz_utoken: one spelling per id */
    {"kdet__" S43, KD_EINVAL, 0},
    {"kdet_1_" S43 "x", KD_EINVAL, 0},                                   /* trailing byte */
    {"kdet_1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", KD_EINVAL, 0}, /* 42 */
    {"kdet_1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=A", KD_EINVAL, 0},
    {"kdet_1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA+A", KD_EINVAL, 0},
    {"KDET_1_" S43, KD_EINVAL, 0},
    {"kdet_-1_" S43, KD_EINVAL, 0},
    {"kdet_1 _" S43, KD_EINVAL, 0},
    {"", KD_EINVAL, 0},
    {"user-token-0123456789abcdef", KD_EINVAL, 0},
};

static void test_parse(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parse_cases) / sizeof(parse_cases[0]); i++) {
        int64_t id = -1;
        const char *secret = NULL;
        int rc = kd_utoken_parse(parse_cases[i].in, &id, &secret);
        if (rc != parse_cases[i].rc || id != parse_cases[i].id)
            fail_msg("case %zu (%s): rc %d id %lld", i, parse_cases[i].in, rc, (long long)id);
        LLVMFuzzerTestOneInput((const uint8_t *)parse_cases[i].in, strlen(parse_cases[i].in));
    }
    int64_t id;
    const char *secret;
    assert_int_equal(kd_utoken_parse(NULL, &id, &secret), KD_EINVAL);
}

static void test_make_and_hash(void **state)
{
    (void)state;
    char s1[KD_UTOKEN_SECRET_LEN + 1], s2[KD_UTOKEN_SECRET_LEN + 1], tok[KD_UTOKEN_MAX + 1];
    char h1[65], h2[65];
    assert_int_equal(kd_utoken_secret(s1), 0);
    assert_int_equal(kd_utoken_secret(s2), 0);
    assert_int_equal(strlen(s1), KD_UTOKEN_SECRET_LEN);
    assert_string_not_equal(s1, s2);
    assert_int_equal(kd_utoken_format(42, s1, tok, sizeof(tok)), 0);
    int64_t id;
    const char *secret;
    assert_int_equal(kd_utoken_parse(tok, &id, &secret), 0);
    assert_int_equal(id, 42);
    assert_string_equal(secret, s1);
    assert_int_equal(kd_utoken_format(0, s1, tok, sizeof(tok)), KD_EINVAL);
    assert_int_equal(kd_utoken_format(1, "short", tok, sizeof(tok)), KD_EINVAL);
    assert_int_equal(kd_utoken_format(1, s1, tok, 10), KD_EINVAL);
    /* SHA-256("abc") */
    kd_utoken_sha256_hex("abc", 3, h1);
    assert_string_equal(h1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    kd_utoken_sha256_hex("abd", 3, h2);
    assert_true(kd_utoken_hash_equal(h1, h1));
    assert_false(kd_utoken_hash_equal(h1, h2));
    assert_false(kd_utoken_hash_equal(h1, "ba78"));
    assert_false(kd_utoken_hash_equal(h1, NULL));
}

static void test_names(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        bool ok;
    } names[] = {
        {"alice", true},
        {"a", true},
        {"a.b_c-d", true},
        {"9lives", true},
        {"", false},
        {"-a", false},
        {"a-", false},
        {"Alice", false},
        {"a b", false},
        {"a/b", false},
        {"é", false},
        {"..", false},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", true},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (api_user_name_ok(names[i].s) != names[i].ok)
            fail_msg("user name \"%s\": want %s", names[i].s, names[i].ok ? "ok" : "refused");
}

static void test_namespaces(void **state)
{
    (void)state;
    const char *ab[] = {"team-a", "team-b"}, *all[] = {"*"};
    struct api_principal none = {.name = "n"}, two = {.name = "t", .namespaces = ab, .nns = 2},
                         star = {.name = "s", .namespaces = all, .nns = 1},
                         admin = {.name = "a", .admin = true};
    static const struct {
        int who; /* 0 none, 1 two, 2 star, 3 admin */
        const char *ns;
        bool ok;
    } cases[] = {
        {0, "team-a", false}, {1, "team-a", true}, {1, "team-b", true},   {1, "team-c", false},
        {1, "team", false},   {1, "*", false},     {2, "anything", true}, {3, "kube-system", true},
    };
    const struct api_principal *ps[] = {&none, &two, &star, &admin};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (api_ns_allowed(ps[cases[i].who], cases[i].ns) != cases[i].ok)
            fail_msg("case %zu: principal %d, namespace %s", i, cases[i].who, cases[i].ns);
    assert_false(api_ns_allowed(NULL, "team-a"));
    assert_int_equal(api_route_ns_seg("api/v1/namespaces/*/experiments"), 3);
    assert_int_equal(api_route_ns_seg("api/v1/jobs"), -1);
    assert_int_equal(api_route_ns_seg("api/v1/namespaces"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_make_and_hash),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_namespaces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
