/*
 * `det experiment create`: validate an experiment config (and template)
 * with lib/config, pack the context directory, and turn both into the
 * Kubernetes resources that submit it: a ConfigMap with the packed context
 * and an Experiment custom resource, checked against the built-in CRD
 * schema exactly as the API server will check it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "cli.h"
#include "config/config.h"
#include "context/context.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "openapi/openapi.h"
#include "yaml/yaml.h"

/* A ConfigMap may hold 1 MiB in all; leave room for its metadata. */
#define CM_MAX_BYTES (1u << 20)
#define CM_OVERHEAD 16384
/* The key of the packed context in the ConfigMap's binaryData. */
#define CM_KEY "context.tar.gz"
/* Printed YAML: a context up to 1 MiB in base64 plus the config. */
#define OUT_MAX (8u << 20)

static const char exp_usage[] =
    "usage: det experiment VERB ...\n"
    "\n"
    "verbs:\n"
    "  create CONFIG CONTEXT_DIR [--template FILE] [--dry-run] [--namespace NS]\n"
    "         validate the config, pack the context directory and create the experiment\n"
    "\n"
    "Run 'det experiment VERB --help' for a verb's options.\n";

static const char create_usage[] =
    "usage: det experiment create CONFIG CONTEXT_DIR [--template FILE] [--dry-run]\n"
    "                             [--namespace NS]\n"
    "\n"
    "Validate the experiment config CONFIG (Determined's format, see docs/config.md),\n"
    "pack CONTEXT_DIR (the training code; .detignore is honoured, *.pyc and __pycache__\n"
    "are always left out, 95 MiB at most) and create the experiment.\n"
    "\n"
    "options:\n"
    "  --template FILE    merge CONFIG over the template FILE first (Determined's rules)\n"
    "  --dry-run          print the resources that would be created, as YAML, and stop:\n"
    "                     a ConfigMap holding the packed context (when it fits in 1 MiB)\n"
    "                     and the Experiment. Pipe it to 'kubectl apply -f -'.\n"
    "  -n, --namespace NS namespace of the resources (default: default)\n"
    "  -h, --help         this help\n"
    "\n"
    "Without --dry-run, det needs kdet-controller to submit the experiment; this build\n"
    "does not include it yet, so det validates everything and exits with code 4.\n"
    "\n"
    "exit codes: 0 ok, 1 error, 2 usage, 3 invalid config/template/context,\n"
    "            4 submitting needs kdet-controller (not in this build)\n";

struct create_args {
    const char *config;
    const char *context;
    const char *template_path;
    const char *ns;
    bool dry_run;
};

static void human(uint64_t n, char *buf, size_t len)
{
    if (n >= (1ull << 20))
        snprintf(buf, len, "%.1f MiB", (double)n / (1 << 20));
    else if (n >= 1024)
        snprintf(buf, len, "%.1f KiB", (double)n / 1024);
    else
        snprintf(buf, len, "%llu B", (unsigned long long)n);
}

/* A DNS-1123 label: lowercase alphanumerics and '-', 1-63 chars, alnum at both ends. */
static bool is_dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

/* The experiment's name as a DNS label prefix: lowercase, [a-z0-9-], at most 40 chars. */
static char *slug(const char *name)
{
    char *out = kd_xmalloc(41);
    size_t n = 0;
    bool dash = false;
    for (const char *p = name ? name : ""; *p && n < 40; p++) {
        char c = *p;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            if (dash && n > 0)
                out[n++] = '-';
            if (n < 40)
                out[n++] = c;
            dash = false;
        } else {
            dash = true;
        }
    }
    while (n > 0 && out[n - 1] == '-')
        n--;
    out[n] = '\0';
    if (n == 0) {
        free(out);
        out = kd_xstrdup("experiment");
    }
    return out;
}

/* The template's name as recorded in spec.template: the file name without directory or .yaml. */
static char *template_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *s = kd_xstrdup(base);
    size_t n = strlen(s);
    if (n > 5 && strcmp(s + n - 5, ".yaml") == 0)
        s[n - 5] = '\0';
    else if (n > 4 && strcmp(s + n - 4, ".yml") == 0)
        s[n - 4] = '\0';
    return s;
}

static char *base64(const unsigned char *data, size_t len)
{
    size_t cap = 4 * ((len + 2) / 3) + 1;
    char *out = kd_xmalloc(cap);
    int n = EVP_EncodeBlock((unsigned char *)out, data, (int)len);
    out[n < 0 ? 0 : n] = '\0';
    return out;
}

/* Parse the built-in CRD and return its openAPIV3Schema (new reference). */
static int crd_schema(json_t **schema, char *err)
{
    int rc = 0;
    struct kd_yaml_doc *doc = NULL;
    *schema = NULL;
    rc = kd_yaml_parse("crds/experiments.yaml", (const char *)det_crd_experiments,
                       det_crd_experiments_len, &doc, err);
    if (rc != 0)
        goto out;
    json_t *s = json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(kd_yaml_root(doc), "spec"), "versions"),
                           0),
            "schema"),
        "openAPIV3Schema");
    if (!json_is_object(s)) {
        rc = kd_seterr(err, KD_EINTERNAL, "built-in CRD has no openAPIV3Schema");
        goto out;
    }
    *schema = json_incref(s);
out:
    kd_yaml_free(doc);
    return rc;
}

/*
 * Build the resources: [ConfigMap (when the context fits), Experiment].
 * Steals nothing; *docs is a new array.
 */
static json_t *build_resources(const struct create_args *a, const json_t *cfg,
                               const struct kd_context *ctx, bool *cm_fits)
{
    json_t *spec = json_deep_copy(cfg);
    json_t *docs = json_array();
    json_t *context = json_object();
    char *name = NULL, *cm_name = NULL, *b64 = NULL, *dump = NULL;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (spec == NULL || docs == NULL || context == NULL)
        kd_oom(4096);
    size_t b64len = 4 * ((ctx->len + 2) / 3);
    *cm_fits = b64len + CM_OVERHEAD <= CM_MAX_BYTES;
    if (a->template_path) {
        char *t = template_name(a->template_path);
        json_object_set_new(spec, "template", json_string(t));
        free(t);
    }
    json_object_set_new(context, "sha256", json_string(ctx->sha256));
    json_object_set_new(context, "size", json_integer((json_int_t)ctx->len));
    json_object_set_new(context, "files", json_integer((json_int_t)ctx->files));
    json_object_set_new(context, "rawSize", json_integer((json_int_t)ctx->raw_bytes));
    json_object_set_new(spec, "context", context);

    /* a stable name: the config's name plus a digest of the spec */
    dump = json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT);
    if (dump == NULL)
        kd_oom(4096);
    EVP_Digest(dump, strlen(dump), md, &mdlen, EVP_sha256(), NULL);
    char *s = slug(json_string_value(json_object_get(spec, "name")));
    name = kd_xasprintf("%s-%02x%02x%02x%02x", s, md[0], md[1], md[2], md[3]);
    free(s);
    cm_name = kd_xasprintf("%s-context", name);
    if (*cm_fits) {
        json_object_set_new(context, "configMap", json_string(cm_name));
        b64 = base64(ctx->data, ctx->len);
        json_t *cm = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}, s:{s:s}}, s:{s:s}}",
                               "apiVersion", "v1", "kind", "ConfigMap", "metadata", "name", cm_name,
                               "namespace", a->ns, "labels", "app.kubernetes.io/managed-by", "det",
                               "kdet.io/experiment", name, "annotations", "kdet.io/context-sha256",
                               ctx->sha256, "binaryData", CM_KEY, b64);
        if (cm == NULL)
            kd_oom(b64len);
        json_array_append_new(docs, cm);
    }
    json_t *exp =
        json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:O}", "apiVersion", "kdet.io/v1alpha1",
                  "kind", "Experiment", "metadata", "name", name, "namespace", a->ns, "labels",
                  "app.kubernetes.io/managed-by", "det", "spec", spec);
    if (exp == NULL)
        kd_oom(4096);
    json_array_append_new(docs, exp);
    json_decref(spec);
    free(name);
    free(cm_name);
    free(b64);
    free(dump);
    return docs;
}

/* Parse create's arguments into a. Returns 0, 1 when help was printed, or
 * KD_EINVAL after printing the usage error. */
static int parse_create_args(int argc, char **argv, struct create_args *a)
{
    static const char *const opts[] = {"--template", "--dry-run", "--namespace", "--help", NULL};
    int npos = 0, rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            fputs(create_usage, stdout);
            rc = 1;
            goto out;
        } else if (strcmp(s, "--dry-run") == 0) {
            a->dry_run = true;
        } else if (strcmp(s, "--template") == 0 || strcmp(s, "--namespace") == 0 ||
                   strcmp(s, "-n") == 0) {
            if (i + 1 >= argc) {
                det_err("%s needs a value (see 'det experiment create --help')", s);
                rc = KD_EINVAL;
                goto out;
            }
            if (strcmp(s, "--template") == 0)
                a->template_path = argv[++i];
            else
                a->ns = argv[++i];
        } else if (kd_str_has_prefix(s, "--template=")) {
            a->template_path = s + strlen("--template=");
        } else if (kd_str_has_prefix(s, "--namespace=")) {
            a->ns = s + strlen("--namespace=");
        } else if (s[0] == '-' && s[1] != '\0') {
            det_usage_suggest("option", s, opts, "det experiment create");
            rc = KD_EINVAL;
            goto out;
        } else if (npos == 0) {
            a->config = s;
            npos++;
        } else if (npos == 1) {
            a->context = s;
            npos++;
        } else {
            det_err("unexpected argument \"%s\": create takes CONFIG and CONTEXT_DIR (see 'det "
                    "experiment create --help')",
                    s);
            rc = KD_EINVAL;
            goto out;
        }
    }
    if (npos < 2) {
        det_err("missing %s (usage: det experiment create CONFIG CONTEXT_DIR [--template FILE] "
                "[--dry-run])",
                npos == 0 ? "CONFIG and CONTEXT_DIR" : "CONTEXT_DIR");
        rc = KD_EINVAL;
        goto out;
    }
    if (!is_dns_label(a->ns)) {
        det_err("--namespace \"%s\": must be a DNS label (lowercase letters, digits and '-', at "
                "most 63)",
                a->ns);
        rc = KD_EINVAL;
    }
out:
    return rc;
}

static int cmd_create(int argc, char **argv)
{
    int rc = DET_EXIT_ERROR, r;
    struct create_args a = {NULL, NULL, NULL, "default", false};
    json_t *cfg = NULL, *docs = NULL, *schema = NULL, *causes = NULL, *unknown = NULL;
    struct kd_context ctx = {0};
    struct kd_buf out = KD_BUF_INIT(OUT_MAX);
    char err[KD_ERRLEN] = "";
    char h1[32], h2[32];
    bool cm_fits = false;

    r = parse_create_args(argc, argv, &a);
    if (r != 0) {
        rc = r == 1 ? DET_EXIT_OK : DET_EXIT_USAGE;
        goto out;
    }
    r = kd_config_load(a.config, a.template_path, &cfg, err);
    if (r != 0) {
        det_err("%s", err[0] ? err : kd_strerror(r));
        /* anything wrong with the files the user named, missing ones included */
        rc = (r == KD_ENOMEM || r == KD_EINTERNAL) ? DET_EXIT_ERROR : DET_EXIT_INVALID;
        goto out;
    }
    fprintf(stderr, "det: %s: config is valid%s%s%s\n", a.config,
            a.template_path ? " (merged over template " : "",
            a.template_path ? a.template_path : "", a.template_path ? ")" : "");
    fprintf(stderr, "det: packing context %s ...\n", a.context);
    r = kd_context_pack(a.context, 0, &ctx, err);
    if (r != 0) {
        det_err("%s", err[0] ? err : kd_strerror(r));
        rc = (r == KD_EIO || r == KD_ENOMEM) ? DET_EXIT_ERROR : DET_EXIT_INVALID;
        goto out;
    }
    human(ctx.raw_bytes, h1, sizeof(h1));
    human(ctx.len, h2, sizeof(h2));
    fprintf(stderr, "det: packed %llu files (%s) into %s tar.gz, sha256 %.12s\n",
            (unsigned long long)ctx.files, h1, h2, ctx.sha256);

    docs = build_resources(&a, cfg, &ctx, &cm_fits);
    if (!cm_fits)
        det_err("note: the packed context (%s) is more than a ConfigMap holds (1 MiB), so no "
                "ConfigMap is created; this version cannot ship it yet (uploading large contexts "
                "to checkpoint storage comes in a later version). Shrink it with .detignore to "
                "run it now.",
                h2);

    /* the API server will check the Experiment against the CRD: do it now */
    r = crd_schema(&schema, err);
    if (r != 0) {
        det_err("built-in CRD: %s", err);
        goto out;
    }
    const json_t *exp = json_array_get(docs, json_array_size(docs) - 1);
    r = kd_openapi_validate(schema, exp, "", &causes);
    if (r != 0) {
        char *s = causes ? kd_openapi_causes_str(causes) : NULL;
        det_err("the Experiment resource is not valid against crds/experiments.yaml:\n%s",
                s ? s : kd_strerror(r));
        free(s);
        rc = DET_EXIT_INVALID;
        goto out;
    }
    if (kd_openapi_unknown_fields(schema, exp, "", &unknown) == 0 && json_array_size(unknown)) {
        char *s = json_dumps(unknown, JSON_COMPACT);
        det_err("internal: the CRD schema does not declare %s; the API server would drop "
                "them. Please report this.",
                s ? s : "some fields");
        free(s);
        goto out;
    }

    if (!a.dry_run) {
        det_err("the config and context are valid, but submitting an experiment needs "
                "kdet-controller, which is not part of this build yet (exit code 4). To see or "
                "apply the resources, run:\n  det experiment create %s %s%s%s --dry-run | kubectl "
                "apply -f -",
                a.config, a.context, a.template_path ? " --template " : "",
                a.template_path ? a.template_path : "");
        rc = DET_EXIT_NO_CONTROL;
        goto out;
    }
    for (size_t i = 0; i < json_array_size(docs); i++) {
        if (kd_buf_puts(&out, "---\n") != 0 || kd_yaml_emit(json_array_get(docs, i), &out) != 0) {
            det_err("the resources are larger than %u bytes of YAML", OUT_MAX);
            goto out;
        }
    }
    if (fwrite(out.data, 1, out.len, stdout) != out.len || fflush(stdout) != 0) {
        det_err("writing to stdout failed");
        goto out;
    }
    fprintf(stderr, "det: dry run: printed %zu resource%s, nothing was submitted\n",
            json_array_size(docs), json_array_size(docs) == 1 ? "" : "s");
    rc = DET_EXIT_OK;
out:
    json_decref(cfg);
    json_decref(docs);
    json_decref(schema);
    json_decref(causes);
    json_decref(unknown);
    kd_context_free(&ctx);
    kd_buf_free(&out);
    return rc;
}

int det_cmd_experiment(int argc, char **argv)
{
    static const char *const verbs[] = {"create", NULL};
    int rc = DET_EXIT_USAGE;
    if (argc < 2) {
        fputs(exp_usage, stderr);
        goto out;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0 || strcmp(verb, "help") == 0) {
        fputs(exp_usage, stdout);
        rc = DET_EXIT_OK;
    } else if (strcmp(verb, "create") == 0) {
        rc = cmd_create(argc - 1, argv + 1);
    } else {
        det_usage_suggest("experiment verb", verb, verbs, "det experiment");
    }
out:
    return rc;
}
