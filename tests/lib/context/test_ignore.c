/* .detignore: each gitignore rule on its own, as a table of (rules, path, is_dir, excluded). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "context/context.h"

struct tcase {
    const char *rules;
    const char *path;
    bool is_dir;
    bool excluded;
};

static const struct tcase cases[] = {
    /* plain names match at any depth */
    {"data.csv", "data.csv", false, true},
    {"data.csv", "a/b/data.csv", false, true},
    {"data.csv", "data.csv.bak", false, false},
    /* comments and blank lines */
    {"# data.csv\n\n", "data.csv", false, false},
    {"\\#notes", "#notes", false, true},
    /* trailing spaces are dropped unless escaped */
    {"data.csv   ", "data.csv", false, true},
    {"data\\ ", "data ", false, true},
    /* * and ? do not cross / */
    {"*.log", "x.log", false, true},
    {"*.log", "dir/x.log", false, true},
    {"logs/*.log", "logs/a.log", false, true},
    {"logs/*.log", "logs/sub/a.log", false, false},
    {"file?.txt", "file1.txt", false, true},
    {"file?.txt", "file10.txt", false, false},
    {"a?b", "a/b", false, false},
    /* classes */
    {"run[0-9].out", "run7.out", false, true},
    {"run[0-9].out", "runx.out", false, false},
    {"run[!0-9].out", "runx.out", false, true},
    {"run[^0-9].out", "run5.out", false, false},
    {"[abc].py", "b.py", false, true},
    /* trailing / matches directories only */
    {"build/", "build", true, true},
    {"build/", "build", false, false},
    {"build/", "src/build", true, true},
    /* a leading / anchors at the root */
    {"/secret.txt", "secret.txt", false, true},
    {"/secret.txt", "sub/secret.txt", false, false},
    /* a / in the middle anchors too */
    {"docs/api", "docs/api", true, true},
    {"docs/api", "x/docs/api", true, false},
    /* ** */
    {"**/cache", "cache", true, true},
    {"**/cache", "a/b/cache", true, true},
    {"**/cache/x.bin", "a/cache/x.bin", false, true},
    {"out/**", "out/a", false, true},
    {"out/**", "out/a/b/c", false, true},
    {"out/**", "out", true, false},
    {"a/**/z", "a/z", false, true},
    {"a/**/z", "a/b/c/z", false, true},
    {"a/**/z", "b/a/z", false, false},
    /* negation: the last matching rule wins */
    {"*.ckpt\n!keep.ckpt", "keep.ckpt", false, false},
    {"*.ckpt\n!keep.ckpt", "other.ckpt", false, true},
    {"!keep.ckpt\n*.ckpt", "keep.ckpt", false, true},
    {"\\!important", "!important", false, true},
    /* several stars and double stars in one pattern */
    {"*a*a*b", "xaxaxb", false, true},
    {"*a*a*b", "xaxab/b", false, false}, /* not anchored: the last name, "b", has no a */
    {"/*a*a*b", "xaxab/b", false, false},
    {"a/**/b/**/c", "a/x/b/y/z/c", false, true},
    {"a/**/b/**/c", "a/x/c", false, false},
    {"**/x/**/y", "p/x/q/y", false, true},
    {"/a**b", "a/q/b", false, true},
    {"/a***b", "a/q/b", false, true},
    {"a**b", "a/q/b", false, false}, /* no / inside: matched against the last name */
    /* runs of stars that once took exponential time (fuzz_detignore): now answered at once */
    {"*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b",
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false,
     false},
    {"/**********************************************************************x",
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaay", false,
     false},
    {"/**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**b",
     "a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a", false,
     false},
    {"/**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**a**b",
     "a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/b", false,
     true},
    /* CRLF line ends */
    {"data.csv\r\nmodels/\r\n", "models", true, true},
};

static void test_rules_one_by_one(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct tcase *c = &cases[i];
        struct kd_ignore *ig = NULL;
        char err[KD_ERRLEN] = "";
        assert_int_equal(kd_ignore_parse(".detignore", c->rules, strlen(c->rules), &ig, err), 0);
        bool got = kd_ignore_match(ig, c->path, c->is_dir);
        if (got != c->excluded) {
            print_error("case %zu: rules \"%s\" path \"%s\"%s: got %s, want %s\n", i, c->rules,
                        c->path, c->is_dir ? " (dir)" : "", got ? "excluded" : "kept",
                        c->excluded ? "excluded" : "kept");
            failures++;
        }
        kd_ignore_free(ig);
    }
    assert_int_equal(failures, 0);
}

static void test_parse_errors(void **state)
{
    (void)state;
    struct kd_ignore *ig = NULL;
    char err[KD_ERRLEN];
    const char *bad = "ok.txt\n# c\nrun[0-9.out\n";
    assert_int_equal(kd_ignore_parse(".detignore", bad, strlen(bad), &ig, err), KD_EINVAL);
    assert_null(ig);
    assert_string_equal(err, ".detignore:3: unterminated '[' in pattern \"run[0-9.out\"");
    char longline[KD_CONTEXT_MAX_PATH + 10];
    memset(longline, 'a', sizeof(longline) - 1);
    longline[sizeof(longline) - 1] = '\0';
    assert_int_equal(kd_ignore_parse("x", longline, strlen(longline), &ig, err), KD_EINVAL);
    assert_non_null(strstr(err, "x:1: line longer than"));
    /* no rules at all */
    assert_int_equal(kd_ignore_parse("x", NULL, 0, &ig, err), 0);
    assert_false(kd_ignore_match(ig, "anything", false));
    kd_ignore_free(ig);
    kd_ignore_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_one_by_one),
        cmocka_unit_test(test_parse_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
