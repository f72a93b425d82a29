/*
 * `dtrain ckpt`: upload, download, list, delete and verify checkpoints in
 * S3 or shared_fs storage, and print (or apply) the GC plan of an
 * experiment's checkpoints.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "storage/checkpoint.h"
#include "storage/gc.h"
#include "ckpt.h"

#define MAX_LIST_ARGS 1024

static const char usage_text[] =
    "usage: dtrain ckpt [STORAGE] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  upload DIR [--uuid UUID] [--metadata JSON]   upload DIR as a checkpoint (manifest last)\n"
    "  download UUID DIR                            restore a checkpoint, verifying every file\n"
    "  ls [--json]                                  list checkpoints (incomplete ones marked)\n"
    "  rm UUID...                                   delete checkpoints (manifest first)\n"
    "  verify UUID... [--deep]                      check sizes; --deep also downloads and hashes\n"
    "  gc (--dry-run | --yes) [POLICY]              plan (or apply) checkpoint garbage collection\n"
    "\n"
    "storage (or $KDET_CHECKPOINT_STORAGE):\n"
    "  --storage URL|JSON     s3://BUCKET[/PREFIX], file:///PATH, or a checkpoint_storage object\n"
    "  --endpoint-url URL     S3-compatible endpoint (path-style addressing by default)\n"
    "  --region REGION        S3 region (default us-east-1)\n"
    "  --virtual-hosted       BUCKET.host addressing   --path-style   host/BUCKET addressing\n"
    "  --parallel N           concurrent transfers (default 16)\n"
    "  --part-size SIZE       multipart part size, e.g. 64MiB (default adaptive)\n"
    "  --quiet                no progress lines\n"
    "credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, $KDET_S3_CREDENTIALS_DIR or "
    "~/.aws/credentials\n"
    "\n"
    "gc policy (defaults: the storage config's, else Determined's 0/1/1):\n"
    "  --save-experiment-best N  --save-trial-best N  --save-trial-latest N\n"
    "  --larger-is-better        the metric grows when the model improves\n"
    "  --metric NAME             use metadata.validation_metrics.NAME (default\n"
    "                            metadata.searcher_metric)\n"
    "  --active-trial ID         a running/paused trial: its latest checkpoint is kept (repeat)\n"
    "  --protect UUID            never delete this checkpoint (model registry) (repeat)\n"
    "  --checkpoints FILE        the experiment's checkpoints as JSON instead of the manifests:\n"
    "                            [{\"uuid\",\"trial_id\",\"steps_completed\",\"metric\",\n"
    "                              \"trial_state\",\"protected\"}]\n";

struct opts {
    struct kd_storage_config cfg;
    int have_storage, quiet, json, deep, dry_run, yes, larger_is_better;
    int eb, tb, tl;
    const char *uuid, *metadata, *metric, *checkpoints;
    const char *pos[MAX_LIST_ARGS];
    int npos;
    const char *active[MAX_LIST_ARGS], *protect[MAX_LIST_ARGS];
    int nactive, nprotect;
};

/* ---- progress ---------------------------------------------------------- */

struct progress {
    int quiet;
    int64_t start, last;
};

static int on_progress(void *arg, const struct kd_ckpt_progress *p)
{
    struct progress *pr = arg;
    int64_t now = kd_mono_ms();
    double secs;
    if (pr->quiet || p->total_bytes == 0 ||
        (now - pr->last < 1000 && p->done_bytes != p->total_bytes))
        return 0;
    pr->last = now;
    secs = (double)(now - pr->start) / 1000.0;
    fprintf(stderr, "%-8s %9.1f / %.1f MiB  (%3.0f%%)  %zu files  %.1f MiB/s\n", p->phase,
            (double)p->done_bytes / 1048576.0, (double)p->total_bytes / 1048576.0,
            p->total_bytes ? 100.0 * (double)p->done_bytes / (double)p->total_bytes : 100.0,
            p->files, secs > 0 ? (double)p->done_bytes / 1048576.0 / secs : 0.0);
    return 0;
}

/* ---- options ----------------------------------------------------------- */

static int set_storage(struct opts *o, const char *v, char *err)
{
    int rc;
    struct kd_storage_config keep = o->cfg;
    if (v[0] == '{') {
        json_error_t je;
        json_t *js = json_loads(v, 0, &je);
        if (js == NULL)
            return kd_seterr(err, KD_EPARSE, "--storage: JSON column %d: %s", je.column, je.text);
        rc = kd_storage_config_from_json(js, &o->cfg, err);
        json_decref(js);
    } else {
        rc = kd_storage_config_from_url(v, &o->cfg, err);
    }
    if (rc == 0) {
        /* flags given before --storage still apply */
        if (keep.endpoint_url[0])
            kd_strlcpy(o->cfg.endpoint_url, keep.endpoint_url, sizeof(o->cfg.endpoint_url));
        if (keep.region[0])
            kd_strlcpy(o->cfg.region, keep.region, sizeof(o->cfg.region));
        if (keep.path_style >= 0)
            o->cfg.path_style = keep.path_style;
        if (keep.parallel)
            o->cfg.parallel = keep.parallel;
        if (keep.part_size)
            o->cfg.part_size = keep.part_size;
        o->have_storage = 1;
    }
    return rc;
}

static int need_int(const char *flag, const char *v, int min, int *out, char *err)
{
    if (v == NULL || kd_parse_int(v, out) != 0 || *out < min)
        return kd_seterr(err, KD_EINVAL, "%s: expected an integer >= %d, got \"%s\"", flag, min,
                         v ? v : "");
    return 0;
}

static int takes_value(const char *a)
{
    static const char *const with_value[] = {"--storage",
                                             "--endpoint-url",
                                             "--region",
                                             "--parallel",
                                             "--part-size",
                                             "--uuid",
                                             "--metadata",
                                             "--metric",
                                             "--checkpoints",
                                             "--save-experiment-best",
                                             "--save-trial-best",
                                             "--save-trial-latest",
                                             "--active-trial",
                                             "--protect",
                                             NULL};
    for (int i = 0; with_value[i]; i++)
        if (strcmp(a, with_value[i]) == 0)
            return 1;
    return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o, char *err)
{
    static const char *const flags[] = {"--storage",
                                        "--endpoint-url",
                                        "--region",
                                        "--virtual-hosted",
                                        "--path-style",
                                        "--parallel",
                                        "--part-size",
                                        "--quiet",
                                        "--uuid",
                                        "--metadata",
                                        "--json",
                                        "--deep",
                                        "--dry-run",
                                        "--yes",
                                        "--save-experiment-best",
                                        "--save-trial-best",
                                        "--save-trial-latest",
                                        "--larger-is-better",
                                        "--metric",
                                        "--active-trial",
                                        "--protect",
                                        "--checkpoints",
                                        NULL};
    int rc = 0;

    for (int i = 0; i < argc && rc == 0; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (a[0] != '-' || a[1] == '\0') {
            if (o->npos >= MAX_LIST_ARGS)
                return kd_seterr(err, KD_EINVAL, "too many arguments (at most %d)", MAX_LIST_ARGS);
            o->pos[o->npos++] = a;
            continue;
        }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            o->quiet = 1, takes = 0;
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1, takes = 0;
        } else if (strcmp(a, "--deep") == 0) {
            o->deep = 1, takes = 0;
        } else if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = 1, takes = 0;
        } else if (strcmp(a, "--yes") == 0) {
            o->yes = 1, takes = 0;
        } else if (strcmp(a, "--larger-is-better") == 0) {
            o->larger_is_better = 1, takes = 0;
        } else if (strcmp(a, "--virtual-hosted") == 0) {
            o->cfg.path_style = 0, takes = 0;
        } else if (strcmp(a, "--path-style") == 0) {
            o->cfg.path_style = 1, takes = 0;
        } else if (v == NULL && takes_value(a)) {
            return kd_seterr(err, KD_EINVAL, "%s: needs a value", a);
        } else if (strcmp(a, "--storage") == 0) {
            rc = set_storage(o, v, err);
        } else if (strcmp(a, "--endpoint-url") == 0) {
            if (!kd_str_has_prefix(v, "http://") && !kd_str_has_prefix(v, "https://"))
                return kd_seterr(err, KD_EINVAL,
                                 "--endpoint-url %s: must start with http:// or "
                                 "https://",
                                 v);
            kd_strlcpy(o->cfg.endpoint_url, v, sizeof(o->cfg.endpoint_url));
        } else if (strcmp(a, "--region") == 0) {
            kd_strlcpy(o->cfg.region, v, sizeof(o->cfg.region));
        } else if (strcmp(a, "--parallel") == 0) {
            rc = need_int(a, v, 1, &o->cfg.parallel, err);
        } else if (strcmp(a, "--part-size") == 0) {
            if (kd_parse_size(v, &o->cfg.part_size) != 0 || o->cfg.part_size < (5u << 20))
                return kd_seterr(err, KD_EINVAL, "--part-size %s: expected a size >= 5MiB", v);
        } else if (strcmp(a, "--uuid") == 0) {
            o->uuid = v;
        } else if (strcmp(a, "--metadata") == 0) {
            o->metadata = v;
        } else if (strcmp(a, "--metric") == 0) {
            o->metric = v;
        } else if (strcmp(a, "--checkpoints") == 0) {
            o->checkpoints = v;
        } else if (strcmp(a, "--save-experiment-best") == 0) {
            rc = need_int(a, v, 0, &o->eb, err);
        } else if (strcmp(a, "--save-trial-best") == 0) {
            rc = need_int(a, v, 0, &o->tb, err);
        } else if (strcmp(a, "--save-trial-latest") == 0) {
            rc = need_int(a, v, 0, &o->tl, err);
        } else if (strcmp(a, "--active-trial") == 0 || strcmp(a, "--protect") == 0) {
            int act = a[2] == 'a';
            int *n = act ? &o->nactive : &o->nprotect;
            if (*n >= MAX_LIST_ARGS)
                return kd_seterr(err, KD_EINVAL, "%s: at most %d", a, MAX_LIST_ARGS);
            (act ? o->active : o->protect)[(*n)++] = v;
        } else {
            const char *s = kd_suggest(a, flags);
            return kd_seterr(err, KD_EINVAL, "unknown option %s%s%s%s", a,
                             s ? " (did you mean " : "", s ? s : "", s ? "?)" : "");
        }
        i += takes;
    }
    return rc;
}

static int open_storage(struct opts *o, struct kd_storage **st, char *err)
{
    const char *env = getenv("KDET_CHECKPOINT_STORAGE");
    int rc;
    if (!o->have_storage) {
        if (env == NULL || env[0] == '\0')
            return kd_seterr(err, KD_EINVAL,
                             "no storage: pass --storage s3://BUCKET/PREFIX (or file:///PATH, or "
                             "a checkpoint_storage JSON object) or set KDET_CHECKPOINT_STORAGE");
        if ((rc = set_storage(o, env, err)) != 0)
            return rc;
    }
    return kd_storage_open(&o->cfg, st, err);
}

/* ---- commands ---------------------------------------------------------- */

static int cmd_upload(struct kd_storage *st, struct opts *o, char *err)
{
    char uuid[KD_CKPT_UUIDLEN];
    struct progress pr = {o->quiet, kd_mono_ms(), 0};
    json_t *meta = NULL;
    int rc;

    if (o->npos != 1)
        return kd_seterr(err, KD_EINVAL, "upload: expected one directory, got %d arguments",
                         o->npos);
    if (o->metadata != NULL) {
        json_error_t je;
        meta = json_loads(o->metadata, 0, &je);
        if (meta == NULL || !json_is_object(meta)) {
            json_decref(meta);
            return kd_seterr(err, KD_EINVAL, "--metadata: expected a JSON object%s%s",
                             meta ? "" : ": ", meta ? "" : je.text);
        }
    }
    if (o->uuid != NULL) {
        kd_strlcpy(uuid, o->uuid, sizeof(uuid));
    } else {
        unsigned char b[16];
        FILE *f = fopen("/dev/urandom", "rb");
        if (f == NULL || fread(b, 1, sizeof(b), f) != sizeof(b)) {
            if (f)
                fclose(f);
            json_decref(meta);
            return kd_seterr(err, KD_EIO, "upload: cannot read /dev/urandom for a uuid");
        }
        fclose(f);
        b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
        b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
        snprintf(uuid, sizeof(uuid),
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                 b[15]);
    }
    rc = kd_ckpt_upload(st, uuid, o->pos[0], meta, on_progress, &pr, err);
    if (rc == 0)
        printf("%s\n", uuid);
    json_decref(meta);
    return rc;
}

static int cmd_download(struct kd_storage *st, struct opts *o, char *err)
{
    struct progress pr = {o->quiet, kd_mono_ms(), 0};
    if (o->npos != 2)
        return kd_seterr(err, KD_EINVAL, "download: expected UUID DIR");
    return kd_ckpt_download(st, o->pos[0], o->pos[1], on_progress, &pr, err);
}

static int cmd_ls(struct kd_storage *st, struct opts *o, char *err)
{
    struct kd_ckpt_info *infos = NULL;
    size_t n = 0, incomplete = 0;
    int rc = kd_ckpt_list(st, 1, &infos, &n, err);
    if (rc != 0)
        return rc;
    if (o->json) {
        json_t *arr = json_array();
        for (size_t i = 0; arr != NULL && i < n; i++)
            json_array_append_new(arr, json_pack("{s:s, s:b, s:I, s:I, s:s, s:O?}", "uuid",
                                                 infos[i].uuid, "complete", infos[i].complete,
                                                 "bytes", (json_int_t)infos[i].bytes, "objects",
                                                 (json_int_t)infos[i].objects, "created",
                                                 infos[i].created, "metadata", infos[i].metadata));
        if (arr != NULL)
            json_dumpf(arr, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(arr);
    } else {
        printf("%-38s %-10s %8s %12s %-10s %s\n", "UUID", "STATE", "FILES", "BYTES", "TRIAL",
               "STEPS");
        for (size_t i = 0; i < n; i++) {
            const json_t *m = infos[i].metadata;
            const json_t *t = json_object_get(m, "trial_id");
            char trial[64] = "-", steps[32] = "-";
            if (json_is_string(t))
                kd_strlcpy(trial, json_string_value(t), sizeof(trial));
            else if (json_is_integer(t))
                snprintf(trial, sizeof(trial), "%lld", (long long)json_integer_value(t));
            if (json_is_integer(json_object_get(m, "steps_completed")))
                snprintf(steps, sizeof(steps), "%lld",
                         (long long)json_integer_value(json_object_get(m, "steps_completed")));
            printf("%-38s %-10s %8zu %12llu %-10s %s\n", infos[i].uuid,
                   infos[i].complete ? "complete" : "INCOMPLETE",
                   infos[i].objects - (infos[i].complete ? 1 : 0),
                   (unsigned long long)infos[i].bytes, trial, steps);
            incomplete += !infos[i].complete;
        }
        printf("%zu checkpoints in %s", n, kd_storage_location(st));
        if (incomplete)
            printf(" (%zu incomplete: no manifest, never restored; an upload may be running)",
                   incomplete);
        printf("\n");
    }
    kd_ckpt_list_free(infos, n);
    return 0;
}

static int cmd_rm(struct kd_storage *st, struct opts *o, char *err)
{
    if (o->npos < 1)
        return kd_seterr(err, KD_EINVAL, "rm: expected at least one UUID");
    for (int i = 0; i < o->npos; i++) {
        int rc = kd_ckpt_delete(st, o->pos[i], err);
        if (rc != 0)
            return rc;
        if (!o->quiet)
            fprintf(stderr, "deleted %s\n", o->pos[i]);
    }
    return 0;
}

static int cmd_verify(struct kd_storage *st, struct opts *o, char *err)
{
    struct progress pr = {o->quiet, kd_mono_ms(), 0};
    int bad = 0, first = 0;
    if (o->npos < 1)
        return kd_seterr(err, KD_EINVAL, "verify: expected at least one UUID");
    for (int i = 0; i < o->npos; i++) {
        char e[KD_ERRLEN] = "";
        int rc = kd_ckpt_verify(st, o->pos[i], o->deep, on_progress, &pr, e);
        if (rc == 0) {
            printf("%s: ok%s\n", o->pos[i], o->deep ? " (sizes and sha256)" : " (sizes)");
        } else {
            printf("%s: FAILED: %s\n", o->pos[i], e);
            if (bad++ == 0) {
                first = rc;
                kd_seterr(err, rc, "%s", e);
            }
        }
    }
    if (bad > 1)
        kd_seterr(err, first, "%d of %d checkpoints failed verification", bad, o->npos);
    return first;
}

/* The plan's inputs: from a JSON file (the controller's view) or the manifests. */
struct gc_input {
    struct kd_gc_ckpt *c;
    char **strs; /* owned uuid/trial strings */
    size_t n, nstr;
};

static void gc_input_free(struct gc_input *in)
{
    for (size_t i = 0; i < in->nstr; i++)
        free(in->strs[i]);
    free(in->strs);
    free(in->c);
}

static const char *keep_str(struct gc_input *in, const char *s)
{
    char *d = strdup(s ? s : "");
    if (d != NULL)
        in->strs[in->nstr++] = d;
    return d;
}

static int metric_of(const json_t *obj, const char *metric, double *out)
{
    const json_t *v = metric ? json_object_get(json_object_get(obj, "validation_metrics"), metric)
                             : json_object_get(obj, "searcher_metric");
    if (v == NULL)
        v = json_object_get(obj, "metric");
    if (!json_is_number(v))
        return 0;
    *out = json_number_value(v);
    return !isnan(*out);
}

static void trial_str(const json_t *v, char *buf, size_t len)
{
    if (json_is_string(v))
        kd_strlcpy(buf, json_string_value(v), len);
    else if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else
        kd_strlcpy(buf, "", len);
}

static int gc_load_file(const char *path, const char *metric, struct gc_input *in, char *err)
{
    json_error_t je;
    json_t *arr = json_load_file(path, 0, &je), *e;
    size_t i;
    int rc = 0;
    if (arr == NULL)
        return kd_seterr(err, KD_EPARSE, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    if (!json_is_array(arr)) {
        rc = kd_seterr(err, KD_EINVALID, "%s: expected a JSON array of checkpoints", path);
        goto out;
    }
    in->c = calloc(json_array_size(arr) + 1, sizeof(*in->c));
    in->strs = calloc(2 * json_array_size(arr) + 1, sizeof(*in->strs));
    if (in->c == NULL || in->strs == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "gc: out of memory");
        goto out;
    }
    json_array_foreach(arr, i, e)
    {
        struct kd_gc_ckpt *c = &in->c[in->n];
        const char *uuid = json_string_value(json_object_get(e, "uuid"));
        const char *state = json_string_value(json_object_get(e, "trial_state"));
        char trial[128];
        trial_str(json_object_get(e, "trial_id"), trial, sizeof(trial));
        if (uuid == NULL || trial[0] == '\0') {
            rc = kd_seterr(err, KD_EINVALID, "%s: [%zu]: \"uuid\" and \"trial_id\" are required",
                           path, i);
            goto out;
        }
        c->uuid = keep_str(in, uuid);
        c->trial_id = keep_str(in, trial);
        c->steps_completed = json_integer_value(json_object_get(e, "steps_completed"));
        c->has_metric = metric_of(e, metric, &c->metric);
        /* Determined's states: a trial that can still resume needs its latest checkpoint */
        c->trial_active = state != NULL && strcmp(state, "COMPLETED") != 0 &&
                          strcmp(state, "CANCELED") != 0 && strcmp(state, "ERROR") != 0 &&
                          strcmp(state, "STOPPED") != 0;
        c->protected_ = json_is_true(json_object_get(e, "protected"));
        in->n++;
    }
out:
    json_decref(arr);
    return rc;
}

static int gc_load_storage(struct kd_storage *st, const char *metric, struct gc_input *in,
                           struct kd_ckpt_info **infos, size_t *ninfo, char *err)
{
    int rc = kd_ckpt_list(st, 1, infos, ninfo, err);
    if (rc != 0)
        return rc;
    in->c = calloc(*ninfo + 1, sizeof(*in->c));
    in->strs = calloc(2 * *ninfo + 1, sizeof(*in->strs));
    if (in->c == NULL || in->strs == NULL)
        return kd_seterr(err, KD_ENOMEM, "gc: out of memory");
    for (size_t i = 0; i < *ninfo; i++) {
        const struct kd_ckpt_info *f = &(*infos)[i];
        struct kd_gc_ckpt *c = &in->c[in->n];
        char trial[128];
        if (!f->complete)
            continue; /* an upload may be running: never collected */
        trial_str(json_object_get(f->metadata, "trial_id"), trial, sizeof(trial));
        c->uuid = f->uuid;
        c->trial_id = keep_str(in, trial[0] ? trial : "(no trial)");
        c->steps_completed = json_integer_value(json_object_get(f->metadata, "steps_completed"));
        c->has_metric = metric_of(f->metadata, metric, &c->metric);
        in->n++;
    }
    return 0;
}

static int cmd_gc(struct kd_storage *st, struct opts *o, char *err)
{
    struct gc_input in = {0};
    struct kd_ckpt_info *infos = NULL;
    struct kd_gc_policy p;
    unsigned *keep = NULL;
    size_t ninfo = 0, ndel = 0, nincomplete = 0;
    int rc;

    if (o->dry_run == o->yes) {
        rc = kd_seterr(err, KD_EINVAL,
                       "gc: pass --dry-run to print the plan, or --yes to delete what it says");
        goto out;
    }
    if (o->checkpoints != NULL && !o->dry_run) {
        rc = kd_seterr(err, KD_EINVAL, "gc: --checkpoints plans only; use it with --dry-run");
        goto out;
    }
    kd_gc_policy_default(&p);
    if (o->cfg.save_experiment_best >= 0)
        p.save_experiment_best = o->cfg.save_experiment_best;
    if (o->cfg.save_trial_best >= 0)
        p.save_trial_best = o->cfg.save_trial_best;
    if (o->cfg.save_trial_latest >= 0)
        p.save_trial_latest = o->cfg.save_trial_latest;
    if (o->eb >= 0)
        p.save_experiment_best = o->eb;
    if (o->tb >= 0)
        p.save_trial_best = o->tb;
    if (o->tl >= 0)
        p.save_trial_latest = o->tl;
    p.smaller_is_better = !o->larger_is_better;
    rc = o->checkpoints ? gc_load_file(o->checkpoints, o->metric, &in, err)
                        : gc_load_storage(st, o->metric, &in, &infos, &ninfo, err);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < in.n; i++) {
        for (int k = 0; k < o->nactive; k++)
            in.c[i].trial_active |= strcmp(in.c[i].trial_id, o->active[k]) == 0;
        for (int k = 0; k < o->nprotect; k++)
            in.c[i].protected_ |= strcmp(in.c[i].uuid, o->protect[k]) == 0;
    }
    keep = calloc(in.n + 1, sizeof(*keep));
    if (keep == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "gc: out of memory");
        goto out;
    }
    if ((rc = kd_gc_plan(&p, in.c, in.n, NULL, NULL, keep, err)) != 0)
        goto out;
    printf("gc policy: save_experiment_best=%d save_trial_best=%d save_trial_latest=%d "
           "(%s is better)\n",
           p.save_experiment_best, p.save_trial_best, p.save_trial_latest,
           p.smaller_is_better ? "smaller" : "larger");
    printf("%-38s %-12s %8s %12s  %-6s %s\n", "UUID", "TRIAL", "STEPS", "METRIC", "PLAN", "REASON");
    for (size_t i = 0; i < in.n; i++) {
        char metric[32] = "-", why[96];
        if (in.c[i].has_metric)
            snprintf(metric, sizeof(metric), "%.6g", in.c[i].metric);
        printf("%-38s %-12s %8lld %12s  %-6s %s\n", in.c[i].uuid, in.c[i].trial_id,
               (long long)in.c[i].steps_completed, metric, keep[i] ? "keep" : "DELETE",
               keep[i] ? kd_gc_reason(keep[i], why, sizeof(why)) : "-");
        ndel += keep[i] == 0;
    }
    for (size_t i = 0; i < ninfo; i++)
        if (!infos[i].complete) {
            printf("%-38s %-12s %8s %12s  %-6s %s\n", infos[i].uuid, "-", "-", "-", "skip",
                   "incomplete (no manifest; an upload may be running)");
            nincomplete++;
        }
    printf("plan: keep %zu, delete %zu%s", in.n - ndel, ndel,
           o->dry_run ? " (dry run: nothing deleted)" : "");
    if (nincomplete)
        printf(", %zu incomplete left alone", nincomplete);
    printf("\n");
    fflush(stdout);
    for (size_t i = 0; o->yes && i < in.n; i++) {
        if (keep[i] != 0)
            continue;
        if ((rc = kd_ckpt_delete(st, in.c[i].uuid, err)) != 0)
            goto out;
        if (!o->quiet)
            fprintf(stderr, "deleted %s\n", in.c[i].uuid);
    }
out:
    free(keep);
    gc_input_free(&in);
    kd_ckpt_list_free(infos, ninfo);
    return rc;
}

int dtrain_tool_ckpt(int argc, char **argv)
{
    static const char *const cmds[] = {"upload", "download", "ls", "rm", "verify", "gc", NULL};
    struct opts *o = calloc(1, sizeof(*o));
    struct kd_storage *st = NULL;
    char err[KD_ERRLEN] = "";
    const char *cmd;
    int rc = 0, status = 1;

    if (o == NULL) {
        fprintf(stderr, "dtrain ckpt: out of memory\n");
        return 1;
    }
    kd_storage_config_init(&o->cfg);
    o->eb = o->tb = o->tl = -1;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        status = argc < 2 ? 2 : 0;
        goto out;
    }
    if ((rc = parse_opts(argc - 1, argv + 1, o, err)) != 0) {
        fprintf(stderr, "dtrain ckpt: %s\n", err);
        status = 2;
        goto out;
    }
    if (o->npos == 0) {
        fprintf(stderr, "dtrain ckpt: no command (one of upload, download, ls, rm, verify, gc)\n");
        status = 2;
        goto out;
    }
    cmd = o->pos[0];
    memmove(o->pos, o->pos + 1, (size_t)(--o->npos) * sizeof(o->pos[0]));
    {
        int known = 0;
        for (int i = 0; cmds[i]; i++)
            known |= strcmp(cmds[i], cmd) == 0;
        if (!known) {
            const char *s = kd_suggest(cmd, cmds);
            fprintf(stderr, "dtrain ckpt: unknown command \"%s\"%s%s%s\n", cmd,
                    s ? " (did you mean " : "", s ? s : "", s ? "?)" : "");
            status = 2;
            goto out;
        }
    }
    if (strcmp(cmd, "gc") == 0 && o->checkpoints != NULL && !o->have_storage &&
        getenv("KDET_CHECKPOINT_STORAGE") == NULL) {
        rc = cmd_gc(NULL, o, err); /* a plan from the file alone */
    } else if ((rc = open_storage(o, &st, err)) == 0) {
        if (strcmp(cmd, "upload") == 0)
            rc = cmd_upload(st, o, err);
        else if (strcmp(cmd, "download") == 0)
            rc = cmd_download(st, o, err);
        else if (strcmp(cmd, "ls") == 0)
            rc = cmd_ls(st, o, err);
        else if (strcmp(cmd, "rm") == 0)
            rc = cmd_rm(st, o, err);
        else if (strcmp(cmd, "verify") == 0)
            rc = cmd_verify(st, o, err);
        else
            rc = cmd_gc(st, o, err);
    }
    if (rc != 0) {
        char red[KD_ERRLEN];
        kd_redact(err, red, sizeof(red));
        fprintf(stderr, "dtrain ckpt %s: %s\n", cmd, red);
        status = rc == KD_EINVAL ? 2 : 1;
    } else {
        status = 0;
    }
out:
    kd_storage_close(st);
    free(o);
    return status;
}
