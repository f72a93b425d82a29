/*
 * kd_regex_check and kd_regcomp: user regular expressions are refused, with
 * Go's reasons, before glibc's regcomp could expand them exponentially;
 * ordinary ones compile and match as before.
 */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/err.h"
#include "core/regex.h"

static void test_regex_table(void **s)
{
    (void)s;
    static const struct {
        const char *ere;
        const char *why; /* NULL: accepted */
    } cases[] = {
        {"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", NULL},
        {"(\\d{1,3}\\.){3}\\d{1,3}", NULL},
        {"[a-z]{1000}", NULL},
        {"([a-z]{1,63}\\.){1,127}", NULL}, /* 8,128 nodes expanded */
        {"x*?", NULL},                     /* non-greedy, as Go reads it */
        {"x+?y??z{2}?", NULL},
        {"[]+*{]+", NULL},       /* operators inside a bracket are characters */
        {"[[:alpha:]+]*", NULL}, /* a class name ends with :], not ] */
        {"a\\++b\\*", NULL},     /* escaped operators are atoms */
        {"a{", NULL},            /* not a count: regcomp decides */
        {"a|*b", NULL},          /* nothing to repeat: regcomp decides */
        {"^Yas+++++++++++++++++++++++tring",
         "invalid nested repetition operator: `+` right after `+`"},
        {"a**", "invalid nested repetition operator: `*` right after `*`"},
        {"a{2}{3}", "invalid nested repetition operator: `{3}` right after `}`"},
        {"a*??", "invalid nested repetition operator: `?` right after `?`"},
        {"(a+)+", NULL}, /* a group's repetition is not nested: Go accepts it too */
        {"a{1001}", "invalid repeat count: `{1001}` (at most 1000)"},
        {"a{2,99999999}", "invalid repeat count"},
        {"((x{100}){100}){100}", "expression too large"},
        {"(x{1000}){11}", "expression too large"},
        {"((((((((((((((((((((((((((((((((x+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)"
         "+)+)+)+)+",
         "expression too large"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char why[KD_ERRLEN] = "";
        int rc = kd_regex_check(cases[i].ere, why);
        if (cases[i].why == NULL ? rc != 0 : rc != KD_EINVAL || strstr(why, cases[i].why) == NULL)
            fail_msg("%s: rc %d why \"%s\", want %s", cases[i].ere, rc, why,
                     cases[i].why != NULL ? cases[i].why : "accepted");
    }
}

static void test_regex_depth(void **s)
{
    (void)s;
    char ere[2 * KD_REGEX_MAX_DEPTH + 8], why[KD_ERRLEN];
    size_t n = 0;
    for (int i = 0; i < KD_REGEX_MAX_DEPTH; i++)
        ere[n++] = '(';
    ere[n++] = 'x';
    for (int i = 0; i < KD_REGEX_MAX_DEPTH; i++)
        ere[n++] = ')';
    ere[n] = '\0';
    assert_int_equal(kd_regex_check(ere, why), 0);
    memmove(ere + 1, ere, n + 1);
    ere[0] = '(';
    ere[n + 1] = ')';
    ere[n + 2] = '\0';
    assert_int_equal(kd_regex_check(ere, why), KD_EINVAL);
    assert_non_null(strstr(why, "nests too deeply"));
}

static void test_regcomp(void **s)
{
    (void)s;
    regex_t re;
    char why[KD_ERRLEN];
    assert_int_equal(kd_regcomp(&re, "^boom: [0-9]+$", REG_EXTENDED | REG_NOSUB, why), 0);
    assert_int_equal(regexec(&re, "boom: 42", 0, NULL, 0), 0);
    assert_int_not_equal(regexec(&re, "boom: x", 0, NULL, 0), 0);
    regfree(&re);
    /* regcomp's own refusal comes back with its text */
    assert_int_equal(kd_regcomp(&re, "(unclosed", REG_EXTENDED, why), KD_EINVAL);
    assert_non_null(strstr(why, "Unmatched"));
    /* refused before regcomp: nothing to free */
    assert_int_equal(kd_regcomp(&re, "x+++", REG_EXTENDED, why), KD_EINVAL);
    assert_non_null(strstr(why, "nested repetition"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regex_table),
        cmocka_unit_test(test_regex_depth),
        cmocka_unit_test(test_regcomp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
