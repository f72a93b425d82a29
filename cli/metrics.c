/*
 * `det trial metrics`: a trial's metric series as kdet-controller stored
 * them (training or validation), read through the controller's user API
 * with optional downsampling, as a table of one row per report or -o
 * json|yaml.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"

static const struct kd_k8s_gvr trial_gvr = KD_K8S_TRIALS;

/* Metric columns shown in the table (the rest are in -o json). */
#define MAX_METRIC_COLS 9

static const char metrics_usage[] =
    "usage: det trial metrics TRIAL [--kind training|validation] [--metric NAME]\n"
    "                         [--downsample N] [-o table|json|yaml] [-n NS]\n"
    "\n"
    "The metrics the trial reported, as kdet-controller stored them: one row per report\n"
    "(BATCHES, REPORTED, then a column per metric). TRIAL is the Trial's name or a\n"
    "unique prefix of it (prefixes need the kubeconfig).\n"
    "\n"
    "options:\n"
    "  --kind KIND       training (default), validation or profiling\n"
    "  --metric NAME     only this metric\n"
    "  --downsample N    at most N evenly spaced rows (the first and last kept); 0 = all\n"
    "  -o FORMAT         table (default), json or yaml\n"
    "  -n NS             the trial's namespace (default: the kubeconfig context's)\n"
    "\n"
    "Needs the controller API: KDET_API_URL and KDET_API_TOKEN (or KDET_API_TOKEN_FILE),\n"
    "else the local deployment's (det deploy local up). See docs/cli.md.\n";

static void fmt_value(const json_t *v, char *buf, size_t len)
{
    if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%.6g", json_real_value(v));
    else if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (v == NULL || json_is_null(v))
        snprintf(buf, len, "%s", "");
    else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, len, "%s", s ? s : "");
        free(s);
    }
}

/* Keep only `metric` in every row's metrics (rows without it are dropped). */
static void filter_metric(json_t *rows, const char *metric)
{
    for (size_t i = json_array_size(rows); i-- > 0;) {
        json_t *row = json_array_get(rows, i);
        json_t *m = json_object_get(row, "metrics");
        json_t *v = json_object_get(m, metric);
        if (v == NULL) {
            json_array_remove(rows, i);
            continue;
        }
        json_object_set_new(row, "metrics", json_pack("{s:O}", metric, v));
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void print_table(const json_t *rows)
{
    const char *names[MAX_METRIC_COLS];
    const char *headers[MAX_METRIC_COLS + 3];
    size_t nn = 0, i;
    json_t *row;
    /* the columns: every metric name seen, sorted */
    json_array_foreach(rows, i, row)
    {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(row, "metrics"), k, v)
        {
            bool have = false;
            for (size_t j = 0; j < nn && !have; j++)
                have = strcmp(names[j], k) == 0;
            if (!have && nn < MAX_METRIC_COLS)
                names[nn++] = k;
        }
    }
    qsort(names, nn, sizeof(names[0]), cmp_str);
    headers[0] = "BATCHES";
    headers[1] = "REPORTED";
    /* metric names as reported (what --metric takes), not upper-cased */
    for (size_t j = 0; j < nn; j++)
        headers[2 + j] = names[j];
    headers[2 + nn] = NULL;
    struct det_table *t = det_table_new(headers);
    json_array_foreach(rows, i, row)
    {
        char cells[MAX_METRIC_COLS + 2][64];
        const char *cp[MAX_METRIC_COLS + 2];
        fmt_value(json_object_get(row, "step"), cells[0], sizeof(cells[0]));
        det_fmt_time(json_string_value(json_object_get(row, "reported_at")), cells[1],
                     sizeof(cells[1]));
        for (size_t j = 0; j < nn; j++)
            fmt_value(json_object_get(json_object_get(row, "metrics"), names[j]), cells[2 + j],
                      sizeof(cells[2 + j]));
        for (size_t j = 0; j < nn + 2; j++)
            cp[j] = cells[j];
        det_table_row(t, cp);
    }
    det_table_print(t);
    det_table_free(t);
}

int det_trial_metrics(int argc, char **argv)
{
    static const char *const flags[] = {"--kind",      "--metric",     "--downsample", "--output",
                                        "--namespace", "--kubeconfig", "--context",    NULL};
    static const char *const pos[] = {"TRIAL", NULL};
    static const struct det_verb_spec spec = {.cmd = "det trial metrics",
                                              .usage = metrics_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = true};
    struct det_verb v = {0};
    struct kd_buf path = KD_BUF_INIT(4096);
    json_t *res = NULL;
    int64_t ds = 0;
    const char *kind = "training";
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_USAGE;
    if (v.a.kind != NULL) {
        if (strcmp(v.a.kind, "training") != 0 && strcmp(v.a.kind, "validation") != 0 &&
            strcmp(v.a.kind, "profiling") != 0) {
            det_err("--kind %s: expected training, validation or profiling", v.a.kind);
            goto out;
        }
        kind = v.a.kind;
    }
    if (v.a.downsample != NULL &&
        (kd_parse_i64(v.a.downsample, &ds) != 0 || ds < 0 || ds > 100000)) {
        det_err("--downsample %s: expected a number of rows from 0 (all) to 100000",
                v.a.downsample);
        goto out;
    }
    if (v.a.metric != NULL && v.a.metric[0] == '\0') {
        det_err("--metric: expected a metric name");
        goto out;
    }
    /* the options are checked before the API is looked for */
    rc = det_api_open(&v.a, spec.cmd, &v.api);
    if (rc == 0)
        rc = det_resolve_if_kube(&v, &trial_gvr, "trial", v.a.pos[0], &v.name);
    if (rc != 0)
        goto out;
    if (kd_buf_puts(&path, "/api/v1/namespaces/") != 0 || det_urlencode(&path, v.api.ns) != 0 ||
        kd_buf_puts(&path, "/trials/") != 0 || det_urlencode(&path, v.name) != 0 ||
        kd_buf_printf(&path, "/metrics?kind=%s&max_points=%lld", kind, (long long)ds) != 0) {
        det_err("trial name too long");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = det_api_get(&v.api, kd_buf_str(&path), &res);
    if (rc != 0)
        goto out;
    json_t *rows = json_object_get(res, "metrics");
    if (!json_is_array(rows)) {
        det_err("the controller API's answer has no metrics array");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    if (v.a.metric != NULL)
        filter_metric(rows, v.a.metric);
    if (v.fmt != DET_FMT_TABLE) {
        json_t *o = json_pack("{s:s,s:s,s:s,s:O}", "namespace", v.api.ns, "trial", v.name, "kind",
                              kind, "metrics", rows);
        rc = det_print_obj(o, v.fmt);
        json_decref(o);
    } else if (json_array_size(rows) == 0) {
        fprintf(stderr, "det: trial %s has no %s metrics%s%s%s\n", v.name, kind,
                v.a.metric ? " named \"" : "", v.a.metric ? v.a.metric : "",
                v.a.metric ? "\"" : "");
    } else {
        print_table(rows);
    }
out:
    json_decref(res);
    kd_buf_free(&path);
    det_verb_end(&v);
    return rc;
}
