/*
 * lib/metrics: the exact text of counters, gauges, labelled series and
 * histograms; escaping of label values and help; the series cap; updates
 * from several threads; and Prometheus' own checker (promtool check
 * metrics, from Debian's prometheus package) on a rendering.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "metrics/metrics.h"

static char *render(struct kd_metrics *m)
{
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    assert_int_equal(kd_metrics_render(m, &b), 0);
    return kd_buf_steal(&b);
}

/* The text after the registry's own first family (kd_metrics_dropped_series_total). */
static const char *after_dropped(const char *text)
{
    const char *p = strstr(text, "kd_metrics_dropped_series_total 0\n");
    assert_non_null(p);
    return p + strlen("kd_metrics_dropped_series_total 0\n");
}

/* A gauge set from other state at each render (kd_metrics_on_render). */
struct answer {
    struct kd_metric *g;
    double v;
};

static void set_answer(void *ud)
{
    struct answer *a = ud;
    kd_metric_set(a->g, NULL, a->v);
}

static void test_text(void **s)
{
    (void)s;
    struct kd_metrics *m = kd_metrics_new();
    struct kd_metric *req =
        kd_metrics_counter(m, "kdet_api_requests_total", "API requests.", "verb,code");
    struct kd_metric *depth = kd_metrics_gauge(m, "kdet_queue_depth", "Keys waiting.", "queue");
    struct kd_metric *up = kd_metrics_counter(m, "kdet_starts_total", "Starts.", NULL);
    struct answer a = {kd_metrics_gauge(m, "kdet_answer", "Read at scrape time.", NULL), 42.5};
    kd_metrics_on_render(m, set_answer, &a);
    kd_metric_inc(req, (const char *[]){"GET", "200"});
    kd_metric_inc(req, (const char *[]){"GET", "200"});
    kd_metric_add(req, (const char *[]){"POST", "401"}, 3);
    kd_metric_add(req, (const char *[]){"POST", "401"}, -1); /* counters never go down */
    kd_metric_set(depth, (const char *[]){"trials"}, 7);
    kd_metric_set(depth, (const char *[]){"trials"}, 5);
    kd_metric_inc(up, NULL);
    char *t = render(m);
    assert_string_equal(after_dropped(t), "# HELP kdet_api_requests_total API requests.\n"
                                          "# TYPE kdet_api_requests_total counter\n"
                                          "kdet_api_requests_total{verb=\"GET\",code=\"200\"} 2\n"
                                          "kdet_api_requests_total{verb=\"POST\",code=\"401\"} 3\n"
                                          "# HELP kdet_queue_depth Keys waiting.\n"
                                          "# TYPE kdet_queue_depth gauge\n"
                                          "kdet_queue_depth{queue=\"trials\"} 5\n"
                                          "# HELP kdet_starts_total Starts.\n"
                                          "# TYPE kdet_starts_total counter\n"
                                          "kdet_starts_total 1\n"
                                          "# HELP kdet_answer Read at scrape time.\n"
                                          "# TYPE kdet_answer gauge\n"
                                          "kdet_answer 42.5\n");
    free(t);
    kd_metrics_free(m);
}

static void set_on_render(void *ud)
{
    kd_metric_set(ud, (const char *[]){"ACTIVE"}, 4);
}

/* The render hook runs first, so gauges counted from other state are current. */
static void test_on_render(void **s)
{
    (void)s;
    struct kd_metrics *m = kd_metrics_new();
    struct kd_metric *g = kd_metrics_gauge(m, "kdet_trials", "Trials by state.", "state");
    kd_metrics_on_render(m, set_on_render, g);
    char *t = render(m);
    assert_non_null(strstr(t, "kdet_trials{state=\"ACTIVE\"} 4\n"));
    free(t);
    kd_metrics_free(m);
}

static void test_histogram(void **s)
{
    (void)s;
    struct kd_metrics *m = kd_metrics_new();
    static const double b[] = {0.01, 0.1, 1};
    struct kd_metric *h = kd_metrics_histogram(m, "kdet_db_seconds", "Latency.", "op", b, 3);
    struct kd_metric *p = kd_metrics_histogram(m, "kdet_plain_seconds", "Plain.", NULL, b, 3);
    const char *ins[] = {"insert"};
    kd_metric_observe(h, ins, 0.005);
    kd_metric_observe(h, ins, 0.01); /* le is inclusive */
    kd_metric_observe(h, ins, 0.5);
    kd_metric_observe(h, ins, 7);
    kd_metric_observe(p, NULL, 0.25);
    char *t = render(m);
    assert_string_equal(after_dropped(t), "# HELP kdet_db_seconds Latency.\n"
                                          "# TYPE kdet_db_seconds histogram\n"
                                          "kdet_db_seconds_bucket{op=\"insert\",le=\"0.01\"} 2\n"
                                          "kdet_db_seconds_bucket{op=\"insert\",le=\"0.1\"} 2\n"
                                          "kdet_db_seconds_bucket{op=\"insert\",le=\"1\"} 3\n"
                                          "kdet_db_seconds_bucket{op=\"insert\",le=\"+Inf\"} 4\n"
                                          "kdet_db_seconds_sum{op=\"insert\"} 7.515\n"
                                          "kdet_db_seconds_count{op=\"insert\"} 4\n"
                                          "# HELP kdet_plain_seconds Plain.\n"
                                          "# TYPE kdet_plain_seconds histogram\n"
                                          "kdet_plain_seconds_bucket{le=\"0.01\"} 0\n"
                                          "kdet_plain_seconds_bucket{le=\"0.1\"} 0\n"
                                          "kdet_plain_seconds_bucket{le=\"1\"} 1\n"
                                          "kdet_plain_seconds_bucket{le=\"+Inf\"} 1\n"
                                          "kdet_plain_seconds_sum 0.25\n"
                                          "kdet_plain_seconds_count 1\n");
    free(t);
    kd_metrics_free(m);
}

static void test_escaping(void **s)
{
    (void)s;
    struct kd_metrics *m = kd_metrics_new();
    struct kd_metric *c = kd_metrics_counter(m, "kdet_x_total", "a \\ b\nc \"q\"", "path");
    kd_metric_inc(c, (const char *[]){"a\"b\\c\nd"});
    char *t = render(m);
    assert_non_null(strstr(t, "# HELP kdet_x_total a \\\\ b\\nc \"q\"\n"));
    assert_non_null(strstr(t, "kdet_x_total{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
    free(t);
    kd_metrics_free(m);
}

/* Label values from requests cannot grow a family past the cap; the drop is counted. */
static void test_cap(void **s)
{
    (void)s;
    struct kd_metrics *m = kd_metrics_new();
    struct kd_metric *c = kd_metrics_counter(m, "kdet_paths_total", "Paths.", "path");
    char v[32];
    for (int i = 0; i < KD_METRICS_MAX_SERIES + 10; i++) {
        snprintf(v, sizeof(v), "/p%d", i);
        kd_metric_inc(c, (const char *[]){v});
    }
    kd_metric_inc(c, (const char *[]){"/p0"}); /* an existing series still counts */
    char *t = render(m);
    assert_non_null(strstr(t, "kd_metrics_dropped_series_total 10\n"));
    assert_non_null(strstr(t, "kdet_paths_total{path=\"/p0\"} 2\n"));
    snprintf(v, sizeof(v), "\"/p%d\"", KD_METRICS_MAX_SERIES);
    assert_null(strstr(t, v));
    free(t);
    kd_metric_inc(NULL, NULL); /* a metric of a registry never made: ignored */
    kd_metrics_free(m);
}

struct worker {
    struct kd_metric *c, *h;
};

static void *hammer(void *p)
{
    struct worker *w = p;
    for (int i = 0; i < 20000; i++) {
        kd_metric_inc(w->c, (const char *[]){i % 2 ? "odd" : "even"});
        kd_metric_observe(w->h, NULL, 0.5);
    }
    return NULL;
}

static void test_threads(void **s)
{
    (void)s;
    struct kd_metrics *m = kd_metrics_new();
    static const double b[] = {1};
    struct worker w = {kd_metrics_counter(m, "kdet_n_total", "N.", "parity"),
                       kd_metrics_histogram(m, "kdet_h_seconds", "H.", NULL, b, 1)};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &w), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    char *t = render(m);
    assert_non_null(strstr(t, "kdet_n_total{parity=\"even\"} 40000\n"));
    assert_non_null(strstr(t, "kdet_n_total{parity=\"odd\"} 40000\n"));
    assert_non_null(strstr(t, "kdet_h_seconds_count 80000\n"));
    free(t);
    kd_metrics_free(m);
}

/* Prometheus' own checker accepts what we render (a naming lint included). */
static void test_promtool(void **s)
{
    (void)s;
    if (access("/usr/bin/promtool", X_OK) != 0)
        fail_msg("promtool missing: make deps installs Debian's prometheus package");
    struct kd_metrics *m = kd_metrics_new();
    static const double b[] = {0.001, 0.01, 0.1, 1, 10};
    struct kd_metric *c = kd_metrics_counter(m, "kdet_api_requests_total",
                                             "API requests by verb and code.", "verb,code");
    struct kd_metric *h = kd_metrics_histogram(m, "kdet_reconcile_duration_seconds",
                                               "Reconcile latency.", "kind", b, 5);
    struct kd_metric *g = kd_metrics_gauge(m, "kdet_trials", "Trials by state.", "state");
    kd_metric_inc(c, (const char *[]){"GET", "200"});
    kd_metric_observe(h, (const char *[]){"trial"}, 0.02);
    kd_metric_set(g, (const char *[]){"ACTIVE"}, 3);
    char *t = render(m);
    char path[] = "/tmp/kd-metrics-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, t, strlen(t)), (ssize_t)strlen(t));
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[4096] = "";
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    unlink(path);
    if (rc != 0)
        fail_msg("promtool check metrics failed:\n%s\non:\n%s", out, t);
    free(t);
    kd_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),      cmocka_unit_test(test_on_render),
        cmocka_unit_test(test_histogram), cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_cap),       cmocka_unit_test(test_threads),
        cmocka_unit_test(test_promtool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
