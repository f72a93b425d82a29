/*
 * `det trial profiler`: what a trial's profiler reported (docs/python.md,
 * "Profiling"), read through the controller's user API: system samples
 * (CPU, memory, network, disk, GPUs of each node) and the Trainer's
 * per-phase timings, as tables or -o json|yaml.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/buf.h"
#include "core/str.h"

static const struct kd_k8s_gvr trial_gvr = KD_K8S_TRIALS;

static const char profiler_usage[] =
    "usage: det trial profiler TRIAL [--kind system|timing] [--tail N] [-o table|json|yaml]\n"
    "                          [-n NS]\n"
    "\n"
    "What the trial's profiler reported (the experiment's profiling.enabled, or\n"
    "core_context.profiler.on()), as kdet-controller stored it:\n"
    "  system  one row per sample of a node: CPU use, memory used, network and disk\n"
    "          throughput, and each GPU's use and memory when the node has NVIDIA GPUs\n"
    "  timing  det.pytorch.Trainer's phases, mean milliseconds per batch over each\n"
    "          reporting period (dataloader_next, to_device, train_batch, from_device,\n"
    "          step_lr_schedulers, reduce_metrics)\n"
    "Without --kind, both. TRIAL is the Trial's name, a unique prefix of it (prefixes\n"
    "need the kubeconfig) or its integer id.\n"
    "\n"
    "options:\n"
    "  --kind KIND   system or timing\n"
    "  --tail N      only the last N samples of each kind (1 to 5000; default: the\n"
    "                first 5000)\n"
    "  -o FORMAT     table (default), json or yaml (every field the profiler sent)\n"
    "  -n NS         the trial's namespace (default: the kubeconfig context's)\n"
    "\n"
    "Needs the controller API: KDET_API_URL and KDET_API_TOKEN (or KDET_API_TOKEN_FILE),\n"
    "else the local deployment's (det deploy local up). See docs/cli.md.\n";

/* The Trainer's phases, in the order a batch goes through them. */
static const char *const phases[] = {
    "dataloader_next",    "to_device",      "train_batch", "from_device",
    "step_lr_schedulers", "reduce_metrics", NULL};

/* 1536 -> "1.5KiB", with an optional suffix ("/s"); "" when v is not a number. */
static void fmt_bytes(const json_t *v, const char *suffix, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (!json_is_number(v)) {
        snprintf(buf, len, "%s", "");
        return;
    }
    double x = json_number_value(v);
    int u = 0;
    while (x >= 1024 && u < 5) {
        x /= 1024;
        u++;
    }
    snprintf(buf, len, u == 0 ? "%.0f%s%s" : "%.1f%s%s", x, units[u], suffix);
}

static void fmt_num(const json_t *v, const char *fmt, double scale, char *buf, size_t len)
{
    if (json_is_number(v))
        snprintf(buf, len, fmt, json_number_value(v) * scale);
    else
        snprintf(buf, len, "%s", "");
}

/* When a sample was taken: the profiler's own "time" (seconds since the epoch; samples are
 * sent a few at a time, so the store's reported_at is when they arrived), else reported_at. */
static void fmt_when(const json_t *r, char *buf, size_t len)
{
    const json_t *t = json_object_get(json_object_get(r, "metrics"), "time");
    struct tm tm;
    time_t secs = json_is_number(t) ? (time_t)json_number_value(t) : 0;
    if (secs > 0 && gmtime_r(&secs, &tm) != NULL && strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
        return;
    det_fmt_time(json_string_value(json_object_get(r, "reported_at")), buf, len);
}

/* The GPUs of a sample as "97%,12.0GiB 95%,11.9GiB" (use and memory used of each). */
static void fmt_gpus(const json_t *gpus, char *util, size_t ulen, char *mem, size_t mlen)
{
    size_t i, uo = 0, mo = 0;
    const json_t *g;
    util[0] = mem[0] = '\0';
    json_array_foreach(gpus, i, g)
    {
        char u[32], m[32];
        fmt_num(json_object_get(g, "util_pct"), "%.0f%%", 1, u, sizeof(u));
        fmt_bytes(json_object_get(g, "memory_used_bytes"), "", m, sizeof(m));
        if (uo < ulen)
            uo += (size_t)snprintf(util + uo, ulen - uo, "%s%s", i ? " " : "", u);
        if (mo < mlen)
            mo += (size_t)snprintf(mem + mo, mlen - mo, "%s%s", i ? " " : "", m);
    }
}

static void print_system(const json_t *rows)
{
    static const char *const headers[] = {"TIME",       "NODE",     "BATCHES",  "CPU",
                                          "MEM USED",   "NET RECV", "NET SENT", "DISK READ",
                                          "DISK WRITE", "GPU",      "GPU MEM",  NULL};
    struct det_table *t = det_table_new(headers);
    size_t i;
    const json_t *r;
    json_array_foreach(rows, i, r)
    {
        const json_t *m = json_object_get(r, "metrics");
        char c[11][128];
        const char *cp[11];
        fmt_when(r, c[0], sizeof(c[0]));
        const char *host = json_string_value(json_object_get(m, "host"));
        if (host != NULL)
            snprintf(c[1], sizeof(c[1]), "%.100s", host);
        else
            fmt_num(json_object_get(m, "node"), "%.0f", 1, c[1], sizeof(c[1]));
        fmt_num(json_object_get(r, "step"), "%.0f", 1, c[2], sizeof(c[2]));
        fmt_num(json_object_get(m, "cpu_util_pct"), "%.1f%%", 1, c[3], sizeof(c[3]));
        fmt_bytes(json_object_get(m, "memory_used_bytes"), "", c[4], sizeof(c[4]));
        fmt_bytes(json_object_get(m, "net_recv_bytes_per_s"), "/s", c[5], sizeof(c[5]));
        fmt_bytes(json_object_get(m, "net_sent_bytes_per_s"), "/s", c[6], sizeof(c[6]));
        fmt_bytes(json_object_get(m, "disk_read_bytes_per_s"), "/s", c[7], sizeof(c[7]));
        fmt_bytes(json_object_get(m, "disk_write_bytes_per_s"), "/s", c[8], sizeof(c[8]));
        fmt_gpus(json_object_get(m, "gpus"), c[9], sizeof(c[9]), c[10], sizeof(c[10]));
        for (int k = 0; k < 11; k++)
            cp[k] = c[k];
        det_table_row(t, cp);
    }
    det_table_print(t);
    det_table_free(t);
}

static void print_timing(const json_t *rows)
{
    /* BATCHES, REPORTED, the phases in milliseconds, PERIOD (batches timed). */
    const char *headers[16];
    int nh = 0;
    headers[nh++] = "BATCHES";
    headers[nh++] = "TIME";
    for (int k = 0; phases[k] != NULL; k++)
        headers[nh++] = phases[k];
    headers[nh++] = "TIMED";
    headers[nh] = NULL;
    struct det_table *t = det_table_new(headers);
    size_t i;
    const json_t *r;
    json_array_foreach(rows, i, r)
    {
        const json_t *m = json_object_get(r, "metrics");
        char c[16][64];
        const char *cp[16];
        int n = 0;
        fmt_num(json_object_get(r, "step"), "%.0f", 1, c[n], sizeof(c[n]));
        n++;
        fmt_when(r, c[n], sizeof(c[n]));
        n++;
        for (int k = 0; phases[k] != NULL; k++, n++)
            fmt_num(json_object_get(m, phases[k]), "%.3fms", 1000, c[n], sizeof(c[n]));
        fmt_num(json_object_get(m, "batches"), "%.0f", 1, c[n], sizeof(c[n]));
        n++;
        for (int k = 0; k < n; k++)
            cp[k] = c[k];
        det_table_row(t, cp);
    }
    det_table_print(t);
    det_table_free(t);
}

/* GET the samples of one kind into *out (new reference). Exit code. */
static int fetch(struct det_verb *v, const char *kind, const char *tail, json_t **out)
{
    struct kd_buf path = KD_BUF_INIT(4096);
    json_t *res = NULL;
    int rc = 0;
    *out = NULL;
    if (kd_buf_puts(&path, "/api/v1/namespaces/") != 0 || det_urlencode(&path, v->api.ns) != 0 ||
        kd_buf_puts(&path, "/trials/") != 0 || det_urlencode(&path, v->name) != 0 ||
        kd_buf_printf(&path, "/profiler?kind=%s&%s=%s", kind, tail ? "tail" : "limit",
                      tail ? tail : "5000") != 0) {
        det_err("trial name too long");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_get(&v->api, kd_buf_str(&path), &res)) != 0)
        goto out;
    if (!json_is_array(json_object_get(res, "samples"))) {
        det_err("the controller API's answer has no samples array");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    *out = json_incref(json_object_get(res, "samples"));
out:
    json_decref(res);
    kd_buf_free(&path);
    return rc;
}

int det_trial_profiler(int argc, char **argv)
{
    static const char *const flags[] = {"--kind",       "--tail",    "--output", "--namespace",
                                        "--kubeconfig", "--context", NULL};
    static const char *const pos[] = {"TRIAL", NULL};
    static const struct det_verb_spec spec = {.cmd = "det trial profiler",
                                              .usage = profiler_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = true};
    static const char *const kinds[] = {"system", "timing", NULL};
    struct det_verb v = {0};
    json_t *got[2] = {NULL, NULL};
    int64_t n = 0;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_USAGE;
    if (v.a.kind != NULL && strcmp(v.a.kind, "system") != 0 && strcmp(v.a.kind, "timing") != 0) {
        det_err("--kind %s: expected system or timing", v.a.kind);
        goto out;
    }
    if (v.a.tail != NULL && (kd_parse_i64(v.a.tail, &n) != 0 || n < 1 || n > 5000)) {
        det_err("--tail %s: expected a number of samples from 1 to 5000", v.a.tail);
        goto out;
    }
    /* the options are checked before the API is looked for */
    rc = det_api_open(&v.a, spec.cmd, &v.api);
    if (rc == 0)
        rc = det_resolve_if_kube(&v, &trial_gvr, "trial", v.a.pos[0], &v.name);
    for (int k = 0; rc == 0 && kinds[k] != NULL; k++)
        if (v.a.kind == NULL || strcmp(v.a.kind, kinds[k]) == 0)
            rc = fetch(&v, kinds[k], v.a.tail, &got[k]);
    if (rc != 0)
        goto out;
    if (v.fmt != DET_FMT_TABLE) {
        json_t *o = json_pack("{s:s,s:s}", "namespace", v.api.ns, "trial", v.name);
        for (int k = 0; kinds[k] != NULL; k++)
            if (got[k] != NULL)
                json_object_set(o, kinds[k], got[k]);
        rc = det_print_obj(o, v.fmt);
        json_decref(o);
        goto out;
    }
    for (int k = 0; kinds[k] != NULL; k++) {
        if (got[k] == NULL)
            continue;
        if (v.a.kind == NULL)
            printf("%s%s\n", k > 0 ? "\n" : "",
                   k == 0 ? "SYSTEM METRICS" : "TIMINGS (mean per batch)");
        if (json_array_size(got[k]) == 0)
            printf("(none: the trial's profiler reported no %s samples)\n", kinds[k]);
        else if (k == 0)
            print_system(got[k]);
        else
            print_timing(got[k]);
    }
    fflush(stdout);
out:
    json_decref(got[0]);
    json_decref(got[1]);
    det_verb_end(&v);
    return rc;
}
