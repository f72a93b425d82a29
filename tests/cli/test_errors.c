/* det's error messages for API failures that kdet-local cannot produce (403 from
 * RBAC, 401, 422 with causes), its argument parser, and the duration and
 * time formats, checked on the functions themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../cli/cli.h"
#include "core/str.h"

/* det_err and det_usage_suggest live in cli/main.c; here they record the last message. */
static char last[4096];

void det_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last, sizeof(last), fmt, ap);
    va_end(ap);
}

void det_usage_suggest(const char *what, const char *word, const char *const *cands,
                       const char *help_cmd)
{
    const char *s = kd_suggest(word, cands);
    snprintf(last, sizeof(last), "unknown %s \"%s\"%s%s%s (see '%s --help')", what, word,
             s ? "; did you mean \"" : "", s ? s : "", s ? "\"?" : "", help_cmd);
}

static void fake_kube(struct det_kube *k)
{
    memset(k, 0, sizeof(*k));
    k->cfg.server = "https://10.1.2.3:6443";
    k->cfg.context = "dev";
    k->cfg.source = "/home/u/.kube/config";
    snprintf(k->ns, sizeof(k->ns), "team-a");
}

static void test_forbidden(void **state)
{
    (void)state;
    struct det_kube k;
    struct kd_k8s_status st = {0};
    static const struct kd_k8s_gvr exp = KD_K8S_EXPERIMENTS;
    const char *body = "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Forbidden\","
                       "\"code\":403,\"message\":\"experiments.kdet.io \\\"x\\\" is forbidden: "
                       "User \\\"alice\\\" cannot patch resource \\\"experiments\\\"\"}";
    char err[KD_ERRLEN] = "";
    fake_kube(&k);
    int r = kd_k8s_map_status(403, body, strlen(body), &st, err);
    assert_int_equal(r, KD_EFORBIDDEN);
    assert_int_equal(det_kube_fail(&k, r, &st, err, "patch", &exp, "experiment", "x"),
                     DET_EXIT_CLUSTER);
    assert_non_null(strstr(last, "forbidden: RBAC does not allow the user of kubeconfig context "
                                 "\"dev\" to patch experiments.kdet.io in namespace \"team-a\""));
    assert_non_null(strstr(last, "User \"alice\" cannot patch"));
    kd_k8s_status_free(&st);
}

static void test_unauthorized_invalid_connect(void **state)
{
    (void)state;
    struct det_kube k;
    struct kd_k8s_status st = {0};
    static const struct kd_k8s_gvr exp = KD_K8S_EXPERIMENTS;
    char err[KD_ERRLEN] = "";
    fake_kube(&k);
    int r =
        kd_k8s_map_status(401, "{\"kind\":\"Status\",\"reason\":\"Unauthorized\"}", 43, &st, err);
    assert_int_equal(det_kube_fail(&k, r, &st, err, "list", &exp, "experiment", NULL),
                     DET_EXIT_CLUSTER);
    assert_non_null(strstr(last,
                           "at https://10.1.2.3:6443 refused the credentials of kubeconfig context "
                           "\"dev\""));
    const char *inv =
        "{\"kind\":\"Status\",\"reason\":\"Invalid\",\"code\":422,\"message\":\"bad\","
        "\"details\":{\"causes\":[{\"field\":\"spec.searcher.max_trials\","
        "\"message\":\"must be of type integer\"}]}}";
    r = kd_k8s_map_status(422, inv, strlen(inv), &st, err);
    assert_int_equal(det_kube_fail(&k, r, &st, err, "create", &exp, "experiment", "e1"),
                     DET_EXIT_INVALID);
    assert_non_null(strstr(last, "the API server refused to create experiment e1"));
    assert_non_null(strstr(last, "spec.searcher.max_trials: must be of type integer"));
    snprintf(st.message, sizeof(st.message), "Connection refused");
    assert_int_equal(det_kube_fail(&k, KD_ECONNECT, &st, NULL, "get", &exp, "experiment", "e1"),
                     DET_EXIT_CLUSTER);
    assert_non_null(strstr(last, "cannot reach the Kubernetes API server at "
                                 "https://10.1.2.3:6443 (kubeconfig /home/u/.kube/config, "
                                 "context dev): Connection refused"));
    kd_k8s_status_free(&st);
}

static void test_args(void **state)
{
    (void)state;
    static const char *const flags[] = {"--all", "--output", "--namespace", "--timeout", NULL};
    static const char *const pos[] = {"ID", NULL};
    struct det_args a = {0};
    char *argv1[] = {"list", "-n", "ns1", "--output=json", "--all", "abc", NULL};
    assert_int_equal(det_parse_args(6, argv1, flags, pos, 1, "u", "det x", &a), 0);
    assert_string_equal(a.ns, "ns1");
    assert_string_equal(a.output, "json");
    assert_true(a.all);
    assert_string_equal(a.pos[0], "abc");
    struct det_args b = {0};
    char *argv2[] = {"list", "--yes", NULL};
    assert_int_equal(det_parse_args(2, argv2, flags, pos, 0, "u", "det x", &b), KD_EINVAL);
    assert_non_null(strstr(last, "unknown option \"--yes\""));
    struct det_args c = {0};
    char *argv3[] = {"list", "--timout", "5", NULL};
    assert_int_equal(det_parse_args(3, argv3, flags, pos, 0, "u", "det x", &c), KD_EINVAL);
    assert_non_null(strstr(last, "did you mean \"--timeout\""));
    struct det_args d = {0};
    char *argv4[] = {"list", "a", "b", NULL};
    assert_int_equal(det_parse_args(3, argv4, flags, pos, 0, "u", "det x", &d), KD_EINVAL);
    assert_non_null(strstr(last, "unexpected argument \"b\": det x takes ID"));
    struct det_args e = {0};
    char *argv5[] = {"list", "-n", NULL};
    assert_int_equal(det_parse_args(2, argv5, flags, pos, 0, "u", "det x", &e), KD_EINVAL);
    assert_non_null(strstr(last, "-n needs a value"));
    struct det_args f = {0};
    char *argv6[] = {"list", NULL};
    assert_int_equal(det_parse_args(1, argv6, flags, pos, 1, "u", "det x", &f), KD_EINVAL);
    assert_non_null(strstr(last, "missing ID"));
}

static void test_formats(void **state)
{
    (void)state;
    char b[64];
    int64_t ms;
    det_fmt_duration(59999, b, sizeof(b));
    assert_string_equal(b, "59s");
    det_fmt_duration(3723000, b, sizeof(b));
    assert_string_equal(b, "1h2m");
    det_fmt_duration(90061000, b, sizeof(b));
    assert_string_equal(b, "1d1h");
    det_fmt_duration(-1, b, sizeof(b));
    assert_string_equal(b, "-");
    det_fmt_time("2026-11-21T17:30:05Z", b, sizeof(b));
    assert_string_equal(b, "2026-11-21 17:30:05");
    det_fmt_time("yesterday", b, sizeof(b));
    assert_string_equal(b, "");
    assert_int_equal(det_parse_duration("90", &ms), 0);
    assert_int_equal(ms, 90000);
    assert_int_equal(det_parse_duration("15m", &ms), 0);
    assert_int_equal(ms, 900000);
    assert_int_equal(det_parse_duration("2h", &ms), 0);
    assert_int_equal(ms, 7200000);
    assert_int_equal(det_parse_duration("2d", &ms), KD_EINVAL);
    assert_int_equal(det_parse_duration("-5s", &ms), KD_EINVAL);
    assert_int_equal(det_parse_duration("", &ms), KD_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forbidden),
        cmocka_unit_test(test_unauthorized_invalid_connect),
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
