/*
 * `det model ...`: the model registry of kdet-controller (docs/models.md),
 * through its user API: models of the namespace, their versions (each a
 * registered checkpoint), the best version by a metric, and restoring a
 * version's checkpoint files the way `det checkpoint download` does.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"

static const char model_usage[] =
    "usage: det model VERB ...\n"
    "\n"
    "verbs:\n"
    "  create NAME [--description D] [--label L1,L2] [--metadata JSON]\n"
    "  list [--name SUBSTR] [--label L] [--all] [--json]   models (--all: archived ones too)\n"
    "  describe NAME [--json] [--best METRIC [--order asc|desc]]\n"
    "                                  the model and its versions; --best: the version whose\n"
    "                                  validation METRIC is best (asc: smaller is better)\n"
    "  list-versions NAME [--json]\n"
    "  register-version NAME CHECKPOINT_UUID [--name N] [--comment C] [--label L1,L2]\n"
    "                                  [--metadata JSON]\n"
    "  update NAME [--description D] [--add-label L] [--remove-label L] [--metadata JSON]\n"
    "  update-version NAME VERSION [--name N] [--comment C] [--add-label L] [--remove-label L]\n"
    "                                  [--metadata JSON]\n"
    "  delete NAME [--yes]             the model and its versions\n"
    "  delete-version NAME VERSION [--yes]\n"
    "  download NAME[:VERSION] [-o DIR]  restore the version's checkpoint (default: the\n"
    "                                  latest version) into DIR (default ./UUID)\n"
    "\n"
    "Labels are comma-separated. Every verb takes -n/--namespace. A checkpoint that a\n"
    "version references is kept by checkpoint GC until the version is deleted.\n"
    "They need the controller API: KDET_API_URL and KDET_API_TOKEN (or\n"
    "KDET_API_TOKEN_FILE), else the local deployment's (det deploy local up).\n";

#define NS_FLAGS "--namespace", "--kubeconfig", "--context"

/* "/api/v1/namespaces/NS/models[/NAME[/SUFFIX]]"; NULL when too long (printed). */
static char *model_path(const struct det_api *api, const char *name, const char *suffix)
{
    struct kd_buf b = KD_BUF_INIT(8192);
    char *out = NULL;
    if (kd_buf_puts(&b, "/api/v1/namespaces/") == 0 && det_urlencode(&b, api->ns) == 0 &&
        kd_buf_puts(&b, "/models") == 0 &&
        (name == NULL || (kd_buf_puts(&b, "/") == 0 && det_urlencode(&b, name) == 0)) &&
        (suffix == NULL || kd_buf_puts(&b, suffix) == 0))
        out = kd_xstrdup(kd_buf_str(&b));
    else
        det_err("model name too long");
    kd_buf_free(&b);
    return out;
}

/* A comma-separated list as a JSON array of its non-empty items (NULL: NULL). */
static json_t *list_arg(const char *s)
{
    if (s == NULL)
        return NULL;
    json_t *a = json_array();
    const char *p = s;
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        if (n > 0)
            json_array_append_new(a, json_stringn(p, n));
        p += n;
        if (*p == ',')
            p++;
    }
    return a;
}

/* --metadata JSON into body["metadata"]; DET_EXIT_USAGE after printing when it is not an object. */
static int metadata_arg(const char *s, json_t *body)
{
    json_error_t je;
    if (s == NULL)
        return 0;
    json_t *md = json_loads(s, 0, &je);
    if (!json_is_object(md)) {
        det_err("--metadata: must be a JSON object%s%s", md == NULL ? ": " : "",
                md == NULL ? je.text : "");
        json_decref(md);
        return DET_EXIT_USAGE;
    }
    json_object_set_new(body, "metadata", md);
    return 0;
}

static void labels_text(const json_t *labels, char *buf, size_t len)
{
    size_t i, o = 0;
    json_t *l;
    buf[0] = '\0';
    json_array_foreach(labels, i, l)
    {
        int n = snprintf(buf + o, len - o, "%s%s", i ? "," : "", json_string_value(l) ?: "");
        if (n < 0 || (size_t)n >= len - o)
            break;
        o += (size_t)n;
    }
}

static void print_models(const json_t *models)
{
    struct det_table *t =
        det_table_new((const char *const[]){"NAME", "VERSIONS", "LATEST", "LABELS", "OWNER",
                                            "ARCHIVED", "UPDATED", "DESCRIPTION", NULL});
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m)
    {
        char nv[24], lv[24], labels[512], when[32];
        snprintf(nv, sizeof(nv), "%lld",
                 (long long)json_integer_value(json_object_get(m, "versions")));
        snprintf(lv, sizeof(lv), "%lld",
                 (long long)json_integer_value(json_object_get(m, "latest_version")));
        labels_text(json_object_get(m, "labels"), labels, sizeof(labels));
        det_fmt_time(det_get_str(m, "updated_at", NULL), when, sizeof(when));
        const char *row[] = {det_get_str(m, "name", ""),
                             nv,
                             lv,
                             labels,
                             det_get_str(m, "owner", ""),
                             json_is_true(json_object_get(m, "archived")) ? "yes" : "no",
                             when,
                             det_get_str(m, "description", "")};
        det_table_row(t, row);
    }
    det_table_print(t);
    det_table_free(t);
}

/* The validation metrics of a version as "loss=0.2 accuracy=0.9" (numbers only). */
static void metrics_text(const json_t *metrics, char *buf, size_t len)
{
    const char *k;
    json_t *v;
    size_t o = 0;
    buf[0] = '\0';
    json_object_foreach((json_t *)metrics, k, v)
    {
        if (!json_is_number(v))
            continue;
        int n = snprintf(buf + o, len - o, "%s%s=%.6g", o ? " " : "", k, json_number_value(v));
        if (n < 0 || (size_t)n >= len - o)
            break;
        o += (size_t)n;
    }
}

static void print_versions(const json_t *versions)
{
    struct det_table *t = det_table_new(
        (const char *const[]){"VERSION", "NAME", "CHECKPOINT", "STATE", "EXPERIMENT", "TRIAL",
                              "BATCHES", "METRICS", "LABELS", "CREATED", NULL});
    size_t i;
    json_t *v;
    json_array_foreach(versions, i, v)
    {
        char ver[24], trial[24], batches[24], metrics[256], labels[256], when[32];
        snprintf(ver, sizeof(ver), "%lld",
                 (long long)json_integer_value(json_object_get(v, "version")));
        snprintf(trial, sizeof(trial), "%lld",
                 (long long)json_integer_value(json_object_get(v, "trial_id")));
        snprintf(batches, sizeof(batches), "%lld",
                 (long long)json_integer_value(json_object_get(v, "steps_completed")));
        metrics_text(json_object_get(v, "metrics"), metrics, sizeof(metrics));
        labels_text(json_object_get(v, "labels"), labels, sizeof(labels));
        det_fmt_time(det_get_str(v, "created_at", NULL), when, sizeof(when));
        const char *row[] = {ver,
                             det_get_str(v, "name", ""),
                             det_get_str(v, "checkpoint_uuid", ""),
                             det_get_str(v, "checkpoint_state", "GONE"),
                             det_get_str(v, "experiment", ""),
                             trial,
                             batches,
                             metrics,
                             labels,
                             when};
        det_table_row(t, row);
    }
    det_table_print(t);
    det_table_free(t);
}

static void print_model(const json_t *m)
{
    char labels[1024], when[32];
    char *md = json_dumps(json_object_get(m, "metadata"), JSON_COMPACT | JSON_SORT_KEYS);
    labels_text(json_object_get(m, "labels"), labels, sizeof(labels));
    printf("Model:        %s\n", det_get_str(m, "name", ""));
    printf("Namespace:    %s\n", det_get_str(m, "namespace", ""));
    printf("Description:  %s\n", det_get_str(m, "description", ""));
    printf("Labels:       %s\n", labels);
    printf("Owner:        %s\n", det_get_str(m, "owner", ""));
    printf("Archived:     %s\n", json_is_true(json_object_get(m, "archived")) ? "yes" : "no");
    det_fmt_time(det_get_str(m, "created_at", NULL), when, sizeof(when));
    printf("Created:      %s\n", when);
    det_fmt_time(det_get_str(m, "updated_at", NULL), when, sizeof(when));
    printf("Updated:      %s\n", when);
    printf("Metadata:     %s\n", md ? md : "{}");
    free(md);
}

static void print_version(const json_t *v)
{
    char labels[1024], metrics[1024], when[32];
    char *hp = json_dumps(json_object_get(v, "hparams"), JSON_COMPACT | JSON_SORT_KEYS);
    labels_text(json_object_get(v, "labels"), labels, sizeof(labels));
    metrics_text(json_object_get(v, "metrics"), metrics, sizeof(metrics));
    printf("Model:        %s\n", det_get_str(v, "model", ""));
    printf("Version:      %lld\n", (long long)json_integer_value(json_object_get(v, "version")));
    printf("Name:         %s\n", det_get_str(v, "name", ""));
    printf("Comment:      %s\n", det_get_str(v, "comment", ""));
    printf("Labels:       %s\n", labels);
    printf("Checkpoint:   %s (%s)\n", det_get_str(v, "checkpoint_uuid", ""),
           det_get_str(v, "checkpoint_state", "GONE"));
    printf("Experiment:   %s (id %lld)\n", det_get_str(v, "experiment", ""),
           (long long)json_integer_value(json_object_get(v, "experiment_id")));
    printf("Trial:        %lld\n", (long long)json_integer_value(json_object_get(v, "trial_id")));
    printf("Batches:      %lld\n",
           (long long)json_integer_value(json_object_get(v, "steps_completed")));
    printf("Metrics:      %s\n", metrics);
    printf("Hparams:      %s\n", hp ? hp : "{}");
    det_fmt_time(det_get_str(v, "created_at", NULL), when, sizeof(when));
    printf("Registered:   %s by %s\n", when, det_get_str(v, "owner", ""));
    free(hp);
}

/* -o/--json into v->fmt (table otherwise). */
static void want_json(struct det_verb *v)
{
    if (v->a.json)
        v->fmt = DET_FMT_JSON;
}

#define SPEC(name, fl, ps, min, fmt)                                                               \
    {                                                                                              \
        .cmd = name, .usage = model_usage, .flags = fl, .pos = ps, .minpos = min, .format = fmt,   \
        .api = true                                                                                \
    }

static int cmd_create(int argc, char **argv)
{
    static const char *const flags[] = {"--description", "--label", "--metadata", "--output",
                                        "--json",        NS_FLAGS,  NULL};
    static const char *const pos[] = {"NAME", NULL};
    static const struct det_verb_spec spec = SPEC("det model create", flags, pos, 1, true);
    struct det_verb v = {0};
    json_t *body = NULL, *ans = NULL;
    char *path = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    want_json(&v);
    body = json_pack("{s:s}", "name", v.a.pos[0]);
    if (v.a.description != NULL)
        json_object_set_new(body, "description", json_string(v.a.description));
    if (v.a.label != NULL)
        json_object_set_new(body, "labels", list_arg(v.a.label));
    if ((rc = metadata_arg(v.a.metadata, body)) != 0 ||
        (path = model_path(&v.api, NULL, NULL)) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_send(&v.api, "POST", path, body, &ans)) != 0)
        goto out;
    if (v.fmt != DET_FMT_TABLE)
        rc = det_print_obj(json_object_get(ans, "model"), v.fmt);
    else
        printf("model %s created in namespace %s\n", v.a.pos[0], v.api.ns);
out:
    free(path);
    json_decref(body);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int cmd_list(int argc, char **argv)
{
    static const char *const flags[] = {"--name", "--label", "--all", "--output",
                                        "--json", NS_FLAGS,  NULL};
    static const char *const pos[] = {NULL};
    static const struct det_verb_spec spec = SPEC("det model list", flags, pos, 0, true);
    struct det_verb v = {0};
    struct kd_buf b = KD_BUF_INIT(8192);
    json_t *ans = NULL;
    char *path = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    want_json(&v);
    rc = 0;
    if ((path = model_path(&v.api, NULL, NULL)) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (kd_buf_puts(&b, path) != 0 ||
        kd_buf_puts(&b, v.a.all ? "?archived=all" : "?archived=false") != 0 ||
        (v.a.name != NULL &&
         (kd_buf_puts(&b, "&name=") != 0 || det_urlencode(&b, v.a.name) != 0)) ||
        (v.a.label != NULL &&
         (kd_buf_puts(&b, "&label=") != 0 || det_urlencode(&b, v.a.label) != 0)))
        rc = DET_EXIT_USAGE;
    if (rc != 0 || (rc = det_api_get(&v.api, kd_buf_str(&b), &ans)) != 0)
        goto out;
    json_t *models = json_object_get(ans, "models");
    if (v.fmt != DET_FMT_TABLE)
        rc = det_print_obj(models, v.fmt);
    else if (json_array_size(models) == 0)
        fprintf(stderr, "det: no models in namespace %s%s\n", v.api.ns,
                v.a.all ? "" : " (archived ones are listed with --all)");
    else
        print_models(models);
out:
    kd_buf_free(&b);
    free(path);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

/* GET .../models/NAME/best?metric=M&order=O: print the best version. */
static int best(struct det_verb *v, const char *name)
{
    struct kd_buf b = KD_BUF_INIT(8192);
    json_t *ans = NULL;
    char *path = model_path(&v->api, name, "/best?metric=");
    int rc = DET_EXIT_USAGE;
    if (path == NULL || kd_buf_puts(&b, path) != 0 || det_urlencode(&b, v->a.best) != 0 ||
        (v->a.order != NULL &&
         (kd_buf_puts(&b, "&order=") != 0 || det_urlencode(&b, v->a.order) != 0)))
        goto out;
    if ((rc = det_api_get(&v->api, kd_buf_str(&b), &ans)) != 0)
        goto out;
    json_t *ver = json_object_get(ans, "version");
    if (v->fmt != DET_FMT_TABLE) {
        rc = det_print_obj(ver, v->fmt);
        goto out;
    }
    printf("Best version of %s by %s (%s is better): %lld (%s = %.6g)\n", name, v->a.best,
           strcmp(det_get_str(ans, "order", "asc"), "asc") == 0 ? "smaller" : "larger",
           (long long)json_integer_value(json_object_get(ver, "version")), v->a.best,
           json_number_value(json_object_get(ver, "value")));
    print_version(ver);
out:
    kd_buf_free(&b);
    free(path);
    json_decref(ans);
    return rc;
}

static int cmd_describe(int argc, char **argv)
{
    static const char *const flags[] = {"--best", "--order", "--output", "--json", NS_FLAGS, NULL};
    static const char *const pos[] = {"NAME", NULL};
    static const struct det_verb_spec spec = SPEC("det model describe", flags, pos, 1, true);
    struct det_verb v = {0};
    json_t *ans = NULL;
    char *path = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    want_json(&v);
    if (v.a.best != NULL) {
        rc = best(&v, v.a.pos[0]);
        goto out;
    }
    if (v.a.order != NULL) {
        det_err("--order goes with --best METRIC (see 'det model --help')");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((path = model_path(&v.api, v.a.pos[0], NULL)) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_get(&v.api, path, &ans)) != 0)
        goto out;
    if (v.fmt != DET_FMT_TABLE) {
        rc = det_print_obj(ans, v.fmt);
        goto out;
    }
    print_model(json_object_get(ans, "model"));
    json_t *vs = json_object_get(ans, "versions");
    printf("\n");
    if (json_array_size(vs) == 0)
        printf("no versions yet ('det model register-version %s CHECKPOINT_UUID')\n", v.a.pos[0]);
    else
        print_versions(vs);
out:
    free(path);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int cmd_list_versions(int argc, char **argv)
{
    static const char *const flags[] = {"--output", "--json", NS_FLAGS, NULL};
    static const char *const pos[] = {"NAME", NULL};
    static const struct det_verb_spec spec = SPEC("det model list-versions", flags, pos, 1, true);
    struct det_verb v = {0};
    json_t *ans = NULL;
    char *path = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    want_json(&v);
    if ((path = model_path(&v.api, v.a.pos[0], "/versions")) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_get(&v.api, path, &ans)) != 0)
        goto out;
    json_t *vs = json_object_get(ans, "versions");
    if (v.fmt != DET_FMT_TABLE)
        rc = det_print_obj(vs, v.fmt);
    else if (json_array_size(vs) == 0)
        fprintf(stderr, "det: model %s has no versions\n", v.a.pos[0]);
    else
        print_versions(vs);
out:
    free(path);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int cmd_register(int argc, char **argv)
{
    static const char *const flags[] = {"--name",   "--comment", "--label", "--metadata",
                                        "--output", "--json",    NS_FLAGS,  NULL};
    static const char *const pos[] = {"NAME", "CHECKPOINT_UUID", NULL};
    static const struct det_verb_spec spec =
        SPEC("det model register-version", flags, pos, 2, true);
    struct det_verb v = {0};
    json_t *body = NULL, *ans = NULL;
    char *path = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    want_json(&v);
    body = json_pack("{s:s}", "checkpoint_uuid", v.a.pos[1]);
    if (v.a.name != NULL)
        json_object_set_new(body, "name", json_string(v.a.name));
    if (v.a.comment != NULL)
        json_object_set_new(body, "comment", json_string(v.a.comment));
    if (v.a.label != NULL)
        json_object_set_new(body, "labels", list_arg(v.a.label));
    if ((rc = metadata_arg(v.a.metadata, body)) != 0 ||
        (path = model_path(&v.api, v.a.pos[0], "/versions")) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_send(&v.api, "POST", path, body, &ans)) != 0)
        goto out;
    json_t *ver = json_object_get(ans, "version");
    if (v.fmt != DET_FMT_TABLE)
        rc = det_print_obj(ver, v.fmt);
    else
        printf("registered checkpoint %s as version %lld of model %s\n", v.a.pos[1],
               (long long)json_integer_value(json_object_get(ver, "version")), v.a.pos[0]);
out:
    free(path);
    json_decref(body);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

/* The fields update and update-version share: labels to add and remove, metadata. */
static int patch_common(const struct det_args *a, json_t *body)
{
    if (a->add_label != NULL)
        json_object_set_new(body, "add_labels", list_arg(a->add_label));
    if (a->remove_label != NULL)
        json_object_set_new(body, "remove_labels", list_arg(a->remove_label));
    return metadata_arg(a->metadata, body);
}

/* A version number argument: 1 to 9 digits. 0 after printing when it is not one. */
static long version_arg(const char *s)
{
    size_t n = strlen(s);
    long v = 0;
    for (size_t i = 0; i < n && n <= 9; i++) {
        if (!isdigit((unsigned char)s[i]))
            break;
        v = v * 10 + (s[i] - '0');
        if (i + 1 == n && v > 0)
            return v;
    }
    det_err("VERSION \"%s\": must be a version number (1, 2, ...)", s);
    return 0;
}

/* PATCH path with body, then show the answer's `key` object (print in table form). */
static int patch_show(struct det_verb *v, const char *path, json_t *body, const char *key,
                      void (*print)(const json_t *))
{
    json_t *ans = NULL;
    int rc = det_api_send(&v->api, "PATCH", path, body, &ans);
    if (rc == 0) {
        if (v->fmt != DET_FMT_TABLE)
            rc = det_print_obj(json_object_get(ans, key), v->fmt);
        else
            print(json_object_get(ans, key));
    }
    json_decref(ans);
    return rc;
}

static int cmd_update(int argc, char **argv)
{
    static const char *const flags[] = {"--description", "--add-label", "--remove-label",
                                        "--metadata",    "--output",    "--json",
                                        NS_FLAGS,        NULL};
    static const char *const pos[] = {"NAME", NULL};
    static const struct det_verb_spec spec = SPEC("det model update", flags, pos, 1, true);
    struct det_verb v = {0};
    json_t *body = json_object();
    char *path = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    want_json(&v);
    if (v.a.description != NULL)
        json_object_set_new(body, "description", json_string(v.a.description));
    if ((rc = patch_common(&v.a, body)) != 0 ||
        (path = model_path(&v.api, v.a.pos[0], NULL)) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (json_object_size(body) == 0) {
        det_err("nothing to change: give --description, --add-label, --remove-label or --metadata");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = patch_show(&v, path, body, "model", print_model);
out:
    free(path);
    json_decref(body);
    det_verb_end(&v);
    return rc;
}

static int cmd_update_version(int argc, char **argv)
{
    static const char *const flags[] = {"--name",         "--comment",  "--add-label",
                                        "--remove-label", "--metadata", "--output",
                                        "--json",         NS_FLAGS,     NULL};
    static const char *const pos[] = {"NAME", "VERSION", NULL};
    static const struct det_verb_spec spec = SPEC("det model update-version", flags, pos, 2, true);
    struct det_verb v = {0};
    json_t *body = json_object();
    char *path = NULL, suffix[64];
    long ver;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    want_json(&v);
    rc = DET_EXIT_USAGE;
    if ((ver = version_arg(v.a.pos[1])) == 0)
        goto out;
    if (v.a.name != NULL)
        json_object_set_new(body, "name", json_string(v.a.name));
    if (v.a.comment != NULL)
        json_object_set_new(body, "comment", json_string(v.a.comment));
    snprintf(suffix, sizeof(suffix), "/versions/%ld", ver);
    if (patch_common(&v.a, body) != 0 || (path = model_path(&v.api, v.a.pos[0], suffix)) == NULL)
        goto out;
    if (json_object_size(body) == 0) {
        det_err("nothing to change: give --name, --comment, --add-label, --remove-label or "
                "--metadata");
        goto out;
    }
    rc = patch_show(&v, path, body, "version", print_version);
out:
    free(path);
    json_decref(body);
    det_verb_end(&v);
    return rc;
}

/* Ask "what? [y/N]" unless --yes; 0 to go on, else the exit code (printed). */
static int confirm(const struct det_args *a, const char *what)
{
    char line[16] = "";
    if (a->yes)
        return 0;
    if (!isatty(0)) {
        det_err("refusing to delete %s without confirmation: stdin is not a terminal; pass --yes",
                what);
        return DET_EXIT_USAGE;
    }
    fprintf(stderr, "Delete %s? Its checkpoints are no longer protected from checkpoint GC. [y/N] ",
            what);
    if (fgets(line, sizeof(line), stdin) == NULL || (line[0] != 'y' && line[0] != 'Y')) {
        det_err("not deleted");
        return DET_EXIT_ERROR;
    }
    return 0;
}

static int cmd_delete(int argc, char **argv)
{
    static const char *const flags[] = {"--yes", NS_FLAGS, NULL};
    static const char *const pos[] = {"NAME", NULL};
    static const struct det_verb_spec spec = SPEC("det model delete", flags, pos, 1, false);
    struct det_verb v = {0};
    json_t *ans = NULL;
    char *path = NULL, what[300];
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    snprintf(what, sizeof(what), "model %s and all its versions", v.a.pos[0]);
    if ((rc = confirm(&v.a, what)) != 0)
        goto out;
    if ((path = model_path(&v.api, v.a.pos[0], NULL)) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_send(&v.api, "DELETE", path, NULL, &ans)) == 0)
        printf("model %s deleted\n", v.a.pos[0]);
out:
    free(path);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int cmd_delete_version(int argc, char **argv)
{
    static const char *const flags[] = {"--yes", NS_FLAGS, NULL};
    static const char *const pos[] = {"NAME", "VERSION", NULL};
    static const struct det_verb_spec spec = SPEC("det model delete-version", flags, pos, 2, false);
    struct det_verb v = {0};
    json_t *ans = NULL;
    char *path = NULL, what[300], suffix[64];
    long ver;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_USAGE;
    if ((ver = version_arg(v.a.pos[1])) == 0)
        goto out;
    snprintf(what, sizeof(what), "version %ld of model %s", ver, v.a.pos[0]);
    snprintf(suffix, sizeof(suffix), "/versions/%ld", ver);
    if ((rc = confirm(&v.a, what)) != 0)
        goto out;
    if ((path = model_path(&v.api, v.a.pos[0], suffix)) == NULL) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_send(&v.api, "DELETE", path, NULL, &ans)) == 0)
        printf("version %ld of model %s deleted (checkpoint %s)\n", ver, v.a.pos[0],
               det_get_str(json_object_get(ans, "deleted"), "checkpoint_uuid", "?"));
out:
    free(path);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

static int cmd_download(int argc, char **argv)
{
    static const char *const flags[] = {"--output", NS_FLAGS, NULL};
    static const char *const pos[] = {"NAME[:VERSION]", NULL};
    static const struct det_verb_spec spec = SPEC("det model download", flags, pos, 1, false);
    struct det_verb v = {0};
    json_t *ans = NULL;
    char *path = NULL, *name = NULL, suffix[64];
    long ver = 0;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    name = kd_xstrdup(v.a.pos[0]);
    char *colon = strrchr(name, ':');
    rc = DET_EXIT_USAGE;
    if (colon != NULL) {
        *colon = '\0';
        if ((ver = version_arg(colon + 1)) == 0)
            goto out;
    }
    if (ver > 0)
        snprintf(suffix, sizeof(suffix), "/versions/%ld", ver);
    if ((path = model_path(&v.api, name, ver > 0 ? suffix : NULL)) == NULL)
        goto out;
    if ((rc = det_api_get(&v.api, path, &ans)) != 0)
        goto out;
    const json_t *version = json_object_get(ans, "version");
    if (ver == 0) {
        json_t *vs = json_object_get(ans, "versions");
        version = json_array_get(vs, json_array_size(vs) - 1);
        if (version == NULL) {
            det_err("model %s has no versions to download", name);
            rc = DET_EXIT_NOTFOUND;
            goto out;
        }
    }
    fprintf(stderr, "det: model %s version %lld is checkpoint %s\n", name,
            (long long)json_integer_value(json_object_get(version, "version")),
            det_get_str(version, "checkpoint_uuid", ""));
    rc = det_checkpoint_download(&v.api, det_get_str(version, "checkpoint_uuid", ""), v.a.output);
out:
    free(name);
    free(path);
    json_decref(ans);
    det_verb_end(&v);
    return rc;
}

int det_cmd_model(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"create", NULL, cmd_create},
        {"list", "ls", cmd_list},
        {"describe", NULL, cmd_describe},
        {"list-versions", NULL, cmd_list_versions},
        {"register-version", NULL, cmd_register},
        {"update", NULL, cmd_update},
        {"update-version", NULL, cmd_update_version},
        {"delete", "rm", cmd_delete},
        {"delete-version", NULL, cmd_delete_version},
        {"download", NULL, cmd_download},
        {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, model_usage, "det model");
}
