/*
 * `det experiment create`: validate an experiment config (and template)
 * with lib/config, pack the context directory, and turn both into the
 * Kubernetes resources that submit it: a ConfigMap with the packed context
 * (or, for a context too large for one, an upload to the experiment's
 * checkpoint storage) and an Experiment custom resource, checked against
 * the built-in CRD schema exactly as the API server will check it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "cli.h"
#include "config/k8smap.h"
#include "config/config.h"
#include "context/context.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "core/time.h"
#include "hparams/rng.h"
#include "hparams/space.h"
#include "openapi/openapi.h"
#include "storage/storage.h"
#include "yaml/yaml.h"

/* A ConfigMap may hold 1 MiB in all; leave room for its metadata. */
#define CM_MAX_BYTES (1u << 20)
#define CM_OVERHEAD 16384
/* The key of the packed context in the ConfigMap's binaryData. */
#define CM_KEY "context.tar.gz"
/* Where large contexts go in checkpoint storage: content-addressed by sha256. */
#define CTX_KEY_DIR "kdet-contexts"
/* Printed YAML: a context up to 1 MiB in base64 plus the config. */
#define OUT_MAX (8u << 20)

const char det_exp_usage[] =
    "usage: det experiment VERB ...\n"
    "\n"
    "verbs:\n"
    "  create CONFIG CONTEXT_DIR   validate, pack the context and submit the experiment\n"
    "  list [--all]                the experiments of the namespace\n"
    "  describe ID                 state, progress, best validation, trials\n"
    "  pause | activate ID         set spec.paused\n"
    "  cancel | kill ID            set spec.canceled (kill: delete the pods at once)\n"
    "  archive | unarchive ID      set spec.archived\n"
    "  delete ID [--yes]           delete the experiment, its trials and pods\n"
    "  wait ID [--timeout D]       follow the progress until the experiment ends\n"
    "  logs ID [-f] [--tail N] [--grep RE]  the logs of all its trials, prefixed [TRIAL]\n"
    "  list-trials ID [--best N]   its trials (det trial list), the N best first\n"
    "  set gc-policy ID ...        change the checkpoint GC policy (--save-trial-best N, ...)\n"
    "\n"
    "ID is the experiment's resource name, a unique prefix of it, or its integer id\n"
    "(det experiment list). Every verb takes\n"
    "-n/--namespace, --kubeconfig and --context like kubectl.\n"
    "Run 'det experiment VERB --help' for a verb's options.\n";

static const char create_usage[] =
    "usage: det experiment create CONFIG CONTEXT_DIR [--template FILE|NAME] [--dry-run]\n"
    "                             [--paused] [--test] [--local] [-f] [-n NS] [--kubeconfig FILE]\n"
    "                             [--context CTX]\n"
    "\n"
    "Validate the experiment config CONFIG (Determined's format, see docs/config.md),\n"
    "pack CONTEXT_DIR (the training code; .detignore is honoured, *.pyc and __pycache__\n"
    "are always left out, 95 MiB at most) and create the experiment: a ConfigMap holding\n"
    "the packed context and the Experiment resource. kdet-controller then runs it.\n"
    "A context too large for a ConfigMap (about 750 KiB packed) is uploaded to the\n"
    "config's checkpoint_storage at kdet-contexts/<sha256>.tar.gz (shared_fs or s3, with\n"
    "your own S3 credentials) and the trials fetch it from there.\n"
    "Submitting the same config and context again creates another experiment, named\n"
    "like the first with -2, -3, ... appended.\n"
    "\n"
    "options:\n"
    "  --template FILE|NAME  merge CONFIG over a template first (Determined's rules): a\n"
    "                        file, or else a template stored with 'det template set'\n"
    "  --dry-run             print the resources that would be created, as YAML, and stop\n"
    "                        (a large context is not uploaded); pipe it to 'kubectl apply -f -'\n"
    "  --paused              create the experiment paused (spec.paused: true); start it\n"
    "                        with 'det experiment activate ID'\n"
    "  --test                a quick test run of the config and code: one trial (the single\n"
    "                        searcher, hyperparameters sampled once) of 1 batch, max_restarts\n"
    "                        0, label `test`; not with a stored template (use a file)\n"
    "  --local               run the entrypoint on this machine with kdet-launch instead\n"
    "                        (no cluster): one trial's hyperparameters, slots_per_trial\n"
    "                        workers, in CONTEXT_DIR; exit 0 when it exits 0\n"
    "  -f, --follow          after creating it, follow the experiment like 'det experiment\n"
    "                        wait' (same exit codes 0, 6)\n"
    "  -n, --namespace NS    namespace of the resources (default: the kubeconfig context's,\n"
    "                        or default)\n"
    "  --kubeconfig FILE     kubeconfig to use (default $KUBECONFIG, ~/.kube/config)\n"
    "  --context CTX         kubeconfig context to use\n"
    "  -h, --help            this help\n"
    "\n"
    "exit codes: 0 ok, 1 error, 2 usage, 3 invalid config/template/context or refused by\n"
    "            the API server, 4 no kubeconfig / API unreachable / CRDs not installed\n";

struct create_args {
    const char *config;
    const char *context;
    const char *template_path;   /* the file merged into the config (a file or a stored one) */
    const char *stored_template; /* a stored template: recorded in spec.template, merged by
                                    kdet-controller */
    const char *ns;
    bool dry_run;
    bool paused;
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

static bool fits_configmap(size_t len)
{
    return 4 * ((len + 2) / 3) + CM_OVERHEAD <= CM_MAX_BYTES;
}

/*
 * Where a context too large for a ConfigMap goes: the checkpoint storage
 * of the (merged) config, at kdet-contexts/<sha256>.tar.gz. Fills scfg and
 * returns the URL trial pods fetch (file:// under a shared_fs host_path,
 * which podspec mounts at the same path; s3://bucket/prefix/...); caller
 * frees. NULL with a message when there is no usable storage.
 */
static char *context_url(const json_t *cs, const struct kd_context *ctx,
                         struct kd_storage_config *scfg)
{
    char err[KD_ERRLEN] = "", h[32];
    kd_storage_config_init(scfg);
    human(ctx->len, h, sizeof(h));
    if (!json_is_object(cs)) {
        det_err("the packed context (%s) is more than a ConfigMap holds (1 MiB) and the config "
                "has no checkpoint_storage to upload it to: set checkpoint_storage (shared_fs or "
                "s3) or shrink the context with .detignore",
                h);
        return NULL;
    }
    if (kd_storage_config_from_json(cs, scfg, err) != 0) {
        det_err("%s", err);
        return NULL;
    }
    if (scfg->type == KD_STORAGE_SHARED_FS) {
        if (scfg->host_path[0] != '/') {
            det_err("checkpoint_storage.host_path: must be an absolute path to hold the context");
            return NULL;
        }
        return kd_xasprintf("file://%s%s%s/%s/%s.tar.gz", scfg->host_path,
                            scfg->storage_path[0] ? "/" : "", scfg->storage_path, CTX_KEY_DIR,
                            ctx->sha256);
    }
    if (scfg->type == KD_STORAGE_S3)
        return kd_xasprintf("s3://%s/%s%s%s/%s.tar.gz", scfg->bucket, scfg->prefix,
                            scfg->prefix[0] ? "/" : "", CTX_KEY_DIR, ctx->sha256);
    det_err("checkpoint_storage.type: a large context can go only to shared_fs or s3 storage");
    return NULL;
}

struct up_progress {
    int64_t t0, last;
};

static int up_progress(void *arg, uint64_t done, uint64_t total)
{
    struct up_progress *p = arg;
    int64_t now = kd_mono_ms();
    if (now - p->last >= 1000 && done < total) {
        char h1[32], h2[32];
        human(done, h1, sizeof(h1));
        human(total, h2, sizeof(h2));
        fprintf(stderr, "det: uploading context: %s of %s (%.1f s)\n", h1, h2,
                (double)(now - p->t0) / 1000);
        p->last = now;
    }
    return 0;
}

/*
 * Upload the packed context to storage at kdet-contexts/<sha256>.tar.gz,
 * unless an object of that name and size is there already (same name,
 * same digest: same bytes). Credentials: the user's (environment,
 * ~/.aws), never printed. 0 or a DET_EXIT_* code, with a message.
 */
static int upload_context(const struct kd_storage_config *scfg, const struct kd_context *ctx,
                          const char *url)
{
    int rc = DET_EXIT_ERROR, r;
    struct kd_storage *st = NULL;
    struct kd_storage_list l = {0};
    char err[KD_ERRLEN] = "", key[128], tmp[64] = "", h[32];
    struct up_progress pr = {kd_mono_ms(), kd_mono_ms()};
    int fd = -1;
    snprintf(key, sizeof(key), "%s/%s.tar.gz", CTX_KEY_DIR, ctx->sha256);
    human(ctx->len, h, sizeof(h));
    if ((r = kd_storage_open(scfg, &st, err)) != 0) {
        det_err("checkpoint storage: %s", err[0] ? err : kd_strerror(r));
        goto out;
    }
    if ((r = kd_storage_list(st, key, &l, err)) != 0) {
        det_err("checkpoint storage %s: cannot look for %s: %s", kd_storage_location(st), key,
                err[0] ? err : kd_strerror(r));
        goto out;
    }
    for (size_t i = 0; i < l.n; i++) {
        if (strcmp(l.objs[i].key, key) == 0 && l.objs[i].size == ctx->len) {
            fprintf(stderr, "det: context %.12s (%s) is already at %s: not uploaded again\n",
                    ctx->sha256, h, url);
            rc = 0;
            goto out;
        }
    }
    /* put_files streams from a file and reports progress */
    const char *td = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/det-context-XXXXXX", td != NULL && td[0] == '/' ? td : "/tmp");
    if (strlen(tmp) < 20 || (fd = mkstemp(tmp)) < 0) {
        det_err("cannot create a temporary file for the context: %s", strerror(errno));
        tmp[0] = '\0';
        goto out;
    }
    for (size_t off = 0; off < ctx->len;) {
        ssize_t w = write(fd, ctx->data + off, ctx->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            det_err("cannot write the context to %s: %s", tmp, strerror(errno));
            goto out;
        }
        off += (size_t)w;
    }
    fprintf(stderr, "det: uploading context (%s) to %s ...\n", h, url);
    pr.t0 = pr.last = kd_mono_ms();
    struct kd_storage_put put = {.key = key, .path = tmp, .size = ctx->len};
    if ((r = kd_storage_put_files(st, &put, 1, up_progress, &pr, err)) != 0) {
        det_err("uploading the context to %s: %s", url, err[0] ? err : kd_strerror(r));
        goto out;
    }
    int64_t ms = kd_mono_ms() - pr.t0;
    fprintf(stderr, "det: uploaded context %.12s (%llu bytes) to %s in %.3f s (%.1f MiB/s)\n",
            ctx->sha256, (unsigned long long)ctx->len, url, (double)ms / 1000,
            ms > 0 ? (double)ctx->len / (1 << 20) / ((double)ms / 1000) : 0.0);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (tmp[0])
        unlink(tmp);
    kd_storage_list_free(&l);
    kd_storage_close(st);
    return rc;
}

/*
 * Build the resources: [ConfigMap (when the context fits), Experiment].
 * Steals nothing; *docs is a new array.
 */
static json_t *build_resources(const struct create_args *a, const json_t *cfg,
                               const struct kd_context *ctx, const char *url, bool *cm_fits)
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
    if (a->stored_template)
        json_object_set_new(spec, "template", json_string(a->stored_template));
    if (a->paused)
        json_object_set_new(spec, "paused", json_true());
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
    } else if (url != NULL) {
        json_object_set_new(context, "url", json_string(url));
    }
    json_t *exp =
        json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:O}", "apiVersion", "kdet.io/v1alpha1",
                  "kind", "Experiment", "metadata", "name", name, "namespace", a->ns, "labels",
                  "app.kubernetes.io/managed-by", "det", "spec", spec);
    if (exp == NULL)
        kd_oom(4096);
    /* kdet.io/workspace and kdet.io/project as kdet-controller sets them (docs/config.md). */
    static const char *const scope[][2] = {{"workspace", KD_LABEL_WORKSPACE},
                                           {"project", KD_LABEL_PROJECT}};
    for (size_t i = 0; i < 2; i++) {
        char lv[KD_LABEL_VALUE_MAX + 1];
        const char *sv = json_string_value(json_object_get(spec, scope[i][0]));
        if (sv != NULL && kd_label_value(sv, lv, sizeof(lv)) == 0)
            json_object_set_new(json_object_get(json_object_get(exp, "metadata"), "labels"),
                                scope[i][1], json_string(lv));
    }
    if (a->template_path && !a->stored_template) {
        /* a template file was merged here: say which, outside spec.template (which names a
         * stored template that kdet-controller merges) */
        char *t = template_name(a->template_path);
        json_object_set_new(json_object_get(exp, "metadata"), "annotations",
                            json_pack("{s:s}", "kdet.io/template-file", t));
        free(t);
    }
    json_array_append_new(docs, exp);
    json_decref(spec);
    free(name);
    free(cm_name);
    free(b64);
    free(dump);
    return docs;
}

/* A template from the cluster, written to a private temp file NAME.yaml for kd_config_load. */
static int template_to_file(const struct det_args *a, const char *name, char *dir, size_t dirlen,
                            char **path)
{
    struct det_kube k = {0};
    char *yaml = NULL;
    FILE *f = NULL;
    int rc = det_kube_open(a, &k);
    *path = NULL;
    if (rc != 0)
        goto out;
    rc = det_template_fetch(&k, name, &yaml);
    if (rc != 0)
        goto out;
    snprintf(dir, dirlen, "/tmp/det-template-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        det_err("cannot make a temp directory for template %s: %s", name, strerror(errno));
        dir[0] = '\0';
        rc = DET_EXIT_ERROR;
        goto out;
    }
    *path = kd_xasprintf("%s/%s.yaml", dir, name);
    f = fopen(*path, "w");
    if (f == NULL || fputs(yaml, f) < 0 || fclose(f) != 0) {
        det_err("cannot write %s: %s", *path, strerror(errno));
        f = NULL;
        rc = DET_EXIT_ERROR;
        goto out;
    }
    f = NULL;
out:
    if (f != NULL)
        fclose(f);
    free(yaml);
    det_kube_close(&k);
    return rc;
}

/*
 * `det experiment create --test`: turn cfg (valid, merged) into Determined's
 * quick test run, in place: the single searcher (metric and direction kept,
 * hyperparameters sampled once) for 1 batch, no periodic validation or
 * checkpoint periods, no restarts, and the label `test`.
 */
static void make_test_run(json_t *cfg)
{
    json_t *old = json_object_get(cfg, "searcher");
    json_t *s = json_pack("{s:s, s:{s:i}}", "name", "single", "max_length", "batches", 1);
    json_t *labels = json_object_get(cfg, "labels");
    if (s == NULL)
        kd_oom(256);
    json_t *m = json_object_get(old, "metric");
    if (json_is_string(m))
        json_object_set(s, "metric", m);
    json_t *sib = json_object_get(old, "smaller_is_better");
    if (json_is_boolean(sib))
        json_object_set(s, "smaller_is_better", sib);
    json_object_set_new(cfg, "searcher", s);
    json_object_del(cfg, "min_validation_period");
    json_object_del(cfg, "min_checkpoint_period");
    json_object_set_new(cfg, "max_restarts", json_integer(0));
    if (!json_is_array(labels)) {
        labels = json_array();
        json_object_set_new(cfg, "labels", labels);
    }
    json_array_append_new(labels, json_string("test"));
    const char *name = json_string_value(json_object_get(cfg, "name"));
    char *tn = kd_xasprintf("%.240s test", name ? name : "experiment");
    json_object_set_new(cfg, "name", json_string(tn));
    free(tn);
}

/*
 * `det experiment create --local`: what to run on this machine for cfg (valid,
 * merged): kdet-launch's arguments after the program name (--nproc N, then
 * the entrypoint's form, as in a trial pod) and the environment to add
 * (*env: NAME -> value): one trial's hyperparameters (sampled once from
 * `seed`, as the single searcher does), its seed, the length when it is in
 * batches (KDET_MAX_LENGTH, which the Python harness uses off-cluster), and
 * environment.environment_variables (the list, or the cpu flavour's).
 * 0, or KD_EINVALID with err. Pure.
 */
static int local_plan(const json_t *cfg, uint64_t seed, json_t **env, char ***argv, int *argc,
                      char *err)
{
    struct kd_hp_space *sp = NULL;
    struct kd_rng rng;
    char **la = NULL, **out = NULL;
    double *x = NULL;
    int n = 0, rc;
    *env = json_object();
    *argv = NULL;
    *argc = 0;
    if (*env == NULL)
        kd_oom(64);
    if ((rc = kd_hp_space_parse(json_object_get(cfg, "hyperparameters"), &sp, err)) != 0)
        goto out;
    x = kd_xcalloc(sp->n ? sp->n : 1, sizeof(*x));
    kd_rng_seed(&rng, seed);
    kd_hp_sample(sp, &rng, x);
    json_t *hp = kd_hp_build(sp, x);
    char *hps = json_dumps(hp, JSON_COMPACT);
    json_decref(hp);
    if (hps == NULL)
        kd_oom(64);
    json_object_set_new(*env, "KDET_HPARAMS", json_string(hps));
    free(hps);
    json_object_set_new(*env, "KDET_TRIAL_SEED", json_sprintf("%llu", (unsigned long long)seed));
    const json_t *ml = json_object_get(json_object_get(cfg, "searcher"), "max_length");
    if (json_is_object(ml))
        ml = json_object_get(ml, "batches");
    if (json_is_integer(ml))
        json_object_set_new(*env, "KDET_MAX_LENGTH",
                            json_sprintf("%" JSON_INTEGER_FORMAT, json_integer_value(ml)));
    const json_t *ev =
        json_object_get(json_object_get(cfg, "environment"), "environment_variables");
    if (json_is_object(ev))
        ev = json_object_get(ev, "cpu");
    size_t i;
    const json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *kv = json_string_value(e), *eq = kv ? strchr(kv, '=') : NULL;
        if (eq == NULL)
            continue; /* checked by kd_config_load */
        char *k = kd_xstrdup(kv);
        k[eq - kv] = '\0';
        json_object_set_new(*env, k, json_string(eq + 1));
        free(k);
    }
    if ((rc = kd_config_launch_argv(json_object_get(cfg, "entrypoint"), &la, &n, err)) != 0)
        goto out;
    json_int_t slots = 1;
    const json_t *spt = json_object_get(json_object_get(cfg, "resources"), "slots_per_trial");
    if (json_is_integer(spt) && json_integer_value(spt) > 1)
        slots = json_integer_value(spt);
    out = kd_xcalloc((size_t)n + 3, sizeof(*out));
    out[0] = kd_xstrdup("--nproc");
    out[1] = kd_xasprintf("%" JSON_INTEGER_FORMAT, slots);
    for (int j = 0; j < n; j++)
        out[j + 2] = kd_xstrdup(la[j]);
    *argv = out;
    *argc = n + 2;
    out = NULL;
out:
    kd_config_argv_free(la);
    kd_config_argv_free(out);
    kd_hp_space_free(sp);
    free(x);
    return rc;
}

/*
 * Run kdet-launch (next to det, else on PATH) in dir with the plan's
 * arguments and environment, off-cluster (no controller: the harness's
 * local mode), and wait for it. DET_EXIT_OK when it exits 0.
 */
static int run_local(const char *dir, const json_t *env, char **args, int nargs)
{
    char self[4096], *prog = NULL;
    char **argv = kd_xcalloc((size_t)nargs + 2, sizeof(*argv));
    int rc = DET_EXIT_ERROR, status = 0;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            prog = kd_xasprintf("%s/kdet-launch", self);
            if (access(prog, X_OK) != 0) {
                free(prog);
                prog = NULL;
            }
        }
    }
    argv[0] = prog != NULL ? prog : (char *)"kdet-launch";
    for (int i = 0; i < nargs; i++)
        argv[i + 1] = args[i];
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        det_err("cannot start kdet-launch: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        const char *k;
        json_t *v;
        unsetenv("KDET_CONTROLLER_URL");
        unsetenv("KDET_TOKEN");
        json_object_foreach((json_t *)env, k, v) setenv(k, json_string_value(v), 1);
        if (chdir(dir) != 0) {
            fprintf(stderr, "det: %s: %s\n", dir, strerror(errno));
            _exit(127);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "det: cannot run %s: %s (install kdet-launch next to det)\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        fprintf(stderr, "det: --local: the entrypoint exited 0\n");
        rc = DET_EXIT_OK;
    } else if (WIFEXITED(status)) {
        det_err("--local: kdet-launch exited %d", WEXITSTATUS(status));
    } else {
        det_err("--local: kdet-launch was killed by signal %d",
                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
out:
    free(prog);
    free(argv);
    return rc;
}

/* Rename the Experiment (and its context ConfigMap) of docs to `name`. */
static void rename_docs(json_t *docs, const char *name)
{
    size_t n = json_array_size(docs);
    json_t *exp = json_array_get(docs, n - 1), *cm = n > 1 ? json_array_get(docs, 0) : NULL;
    char *cm_name = kd_xasprintf("%s-context", name);
    json_object_set_new(json_object_get(exp, "metadata"), "name", json_string(name));
    if (cm != NULL) {
        json_t *md = json_object_get(cm, "metadata");
        json_object_set_new(md, "name", json_string(cm_name));
        json_object_set_new(json_object_get(md, "labels"), "kdet.io/experiment", json_string(name));
        json_object_set_new(json_object_get(json_object_get(exp, "spec"), "context"), "configMap",
                            json_string(cm_name));
    }
    free(cm_name);
}

/* At most this many experiments of one config and context: NAME, NAME-2, ... NAME-1000. */
#define SAME_NAME_MAX 1000

/*
 * The first of NAME, NAME-2, NAME-3, ... that no Experiment of the namespace
 * has (Determined gives every submission a new experiment); docs renamed to
 * it. 0 or a DET_EXIT_* code with a message.
 */
static int free_name(struct det_kube *k, json_t *docs)
{
    static const struct kd_k8s_gvr exp_gvr = KD_K8S_EXPERIMENTS;
    json_t *exp = json_array_get(docs, json_array_size(docs) - 1);
    char *base = kd_xstrdup(kd_k8s_meta_str(exp, "name"));
    char err[KD_ERRLEN] = "";
    int rc = DET_EXIT_ERROR;
    for (int i = 1; i <= SAME_NAME_MAX; i++) {
        struct kd_k8s_status st = {0};
        json_t *got = NULL;
        char *name = i == 1 ? kd_xstrdup(base) : kd_xasprintf("%s-%d", base, i);
        int r = kd_k8s_get(k->c, &exp_gvr, k->ns, name, &got, &st, err);
        json_decref(got);
        if (r == KD_ENOTFOUND) {
            if (i > 1)
                rename_docs(docs, name);
            kd_k8s_status_free(&st);
            free(name);
            rc = 0;
            goto out;
        }
        if (r != 0) {
            rc = det_kube_fail(k, r, &st, err, "get", &exp_gvr, "experiment", name);
            kd_k8s_status_free(&st);
            free(name);
            goto out;
        }
        kd_k8s_status_free(&st);
        free(name);
    }
    det_err("experiments %s to %s-%d already exist in namespace \"%s\": delete some first", base,
            base, SAME_NAME_MAX, k->ns);
out:
    free(base);
    return rc;
}

/* The ConfigMap and the Experiment, created; the ConfigMap then owned by the Experiment. */
static int submit(const struct det_args *a, json_t *docs)
{
    static const struct kd_k8s_gvr cm_gvr = KD_K8S_CONFIGMAPS, exp_gvr = KD_K8S_EXPERIMENTS;
    struct det_kube k = {0};
    struct kd_k8s_status st = {0};
    json_t *created = NULL, *res = NULL, *patch = NULL;
    char err[KD_ERRLEN] = "";
    int rc = det_kube_open(a, &k), r;
    size_t n = json_array_size(docs);
    json_t *exp = json_array_get(docs, n - 1), *cm = n > 1 ? json_array_get(docs, 0) : NULL;
    const char *name = NULL;
    if (rc != 0)
        goto out;
    if ((rc = free_name(&k, docs)) != 0)
        goto out;
    name = kd_k8s_meta_str(exp, "name");
    json_object_set_new(json_object_get(exp, "metadata"), "namespace", json_string(k.ns));
    if (cm != NULL) {
        json_object_set_new(json_object_get(cm, "metadata"), "namespace", json_string(k.ns));
        r = kd_k8s_create(k.c, &cm_gvr, k.ns, cm, NULL, &st, err);
        if (r != 0 && r != KD_EEXIST) {
            rc = det_kube_fail(&k, r, &st, err, "create", &cm_gvr, "configmap",
                               kd_k8s_meta_str(cm, "name"));
            goto out;
        }
    }
    r = kd_k8s_create(k.c, &exp_gvr, k.ns, exp, &created, &st, err);
    if (r == KD_EEXIST) {
        det_err("experiment %s was created in namespace \"%s\" by someone else just now; "
                "submit again for a new name",
                name, k.ns);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    if (r != 0) {
        rc = det_kube_fail(&k, r, &st, err, "create", &exp_gvr, "experiment", name);
        goto out;
    }
    if (cm != NULL) {
        /* the context goes with the experiment when it is deleted */
        patch = json_pack("{s:{s:[{s:s, s:s, s:s, s:s}]}}", "metadata", "ownerReferences",
                          "apiVersion", "kdet.io/v1alpha1", "kind", "Experiment", "name", name,
                          "uid", kd_k8s_meta_str(created, "uid"));
        if (patch == NULL)
            kd_oom(256);
        r = kd_k8s_patch(k.c, &cm_gvr, k.ns, kd_k8s_meta_str(cm, "name"), NULL, KD_K8S_PATCH_MERGE,
                         patch, &res, &st, err);
        if (r != 0)
            det_err("warning: could not make experiment %s the owner of its context ConfigMap: "
                    "%s",
                    name, err);
    }
    printf("%s\n", name);
    fflush(stdout);
    det_capacity_warn(&k, json_object_get(exp, "spec"));
    if (a->follow) {
        fprintf(stderr,
                "det: created experiment %s in namespace \"%s\"; following it (Ctrl-C "
                "stops following, not the experiment)\n",
                name, k.ns);
        rc = det_exp_wait(&k, name, 0);
        goto out;
    }
    fprintf(stderr,
            "det: created experiment %s in namespace \"%s\"%s\n"
            "det: kdet-controller runs it; follow it with 'det experiment wait %s' or "
            "'kubectl get exp %s -n %s'\n",
            name, k.ns, cm ? " (and its context ConfigMap)" : "", name, name, k.ns);
out:
    json_decref(created);
    json_decref(res);
    json_decref(patch);
    kd_k8s_status_free(&st);
    det_kube_close(&k);
    return rc;
}

int det_exp_create(int argc, char **argv)
{
    static const char *const flags[] = {"--template", "--dry-run", "--follow",    "--paused",
                                        "--test",     "--local",   "--namespace", "--kubeconfig",
                                        "--context",  NULL};
    static const char *const posn[] = {"CONFIG", "CONTEXT_DIR", NULL};
    int rc = DET_EXIT_ERROR, r;
    struct det_args da = {0};
    struct create_args a = {NULL, NULL, NULL, NULL, "default", false, false};
    json_t *cfg = NULL, *docs = NULL, *schema = NULL, *causes = NULL, *unknown = NULL;
    json_t *storage = NULL, *warnings = NULL;
    struct kd_context ctx = {0};
    struct kd_storage_config scfg;
    char *url = NULL;
    struct kd_buf out = KD_BUF_INIT(OUT_MAX);
    char err[KD_ERRLEN] = "", tdir[64] = "";
    char *tpath = NULL;
    char h1[32], h2[32];
    bool cm_fits = false;

    r = det_parse_args(argc, argv, flags, posn, 2, create_usage, "det experiment create", &da);
    if (r != 0) {
        rc = det_args_exit(r);
        goto out;
    }
    a.config = da.pos[0];
    a.context = da.pos[1];
    a.dry_run = da.dry_run;
    a.paused = da.paused;
    if (da.ns != NULL && !is_dns_label(da.ns)) {
        det_err("--namespace \"%s\": must be a DNS label (lowercase letters, digits and '-', at "
                "most 63)",
                da.ns);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (da.ns != NULL)
        a.ns = da.ns;
    if (da.template_ref != NULL) {
        struct stat sb;
        if (stat(da.template_ref, &sb) == 0 || strchr(da.template_ref, '/') != NULL ||
            kd_str_has_suffix(da.template_ref, ".yaml") ||
            kd_str_has_suffix(da.template_ref, ".yml")) {
            a.template_path = da.template_ref;
        } else if (!is_dns_label(da.template_ref)) {
            det_err("--template %s: no such file, and not a template name (a DNS label)",
                    da.template_ref);
            rc = DET_EXIT_INVALID;
            goto out;
        } else {
            rc = template_to_file(&da, da.template_ref, tdir, sizeof(tdir), &tpath);
            if (rc != 0)
                goto out;
            rc = DET_EXIT_ERROR;
            a.template_path = tpath;
            a.stored_template = da.template_ref;
        }
    }
    r = kd_config_load(a.config, a.template_path, &cfg, err);
    if (r != 0) {
        det_err("%s", err[0] ? err : kd_strerror(r));
        /* anything wrong with the files the user named, missing ones included */
        rc = (r == KD_ENOMEM || r == KD_EINTERNAL) ? DET_EXIT_ERROR : DET_EXIT_INVALID;
        goto out;
    }
    warnings = kd_config_warnings(cfg);
    for (size_t i = 0; i < json_array_size(warnings); i++)
        fprintf(stderr, "det: warning: %s: %s\n", a.config,
                json_string_value(json_array_get(warnings, i)));
    if (da.test && a.stored_template != NULL) {
        det_err("--test with a stored template (%s): kdet-controller would merge the template's "
                "searcher back; use the template as a file (--template FILE)",
                a.stored_template);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (da.test) {
        make_test_run(cfg);
        fprintf(stderr, "det: --test: one trial of 1 batch (the single searcher), "
                        "max_restarts 0, label test\n");
    }
    if (da.local) {
        json_t *env = NULL;
        char **args = NULL;
        int nargs = 0;
        const json_t *es =
            json_object_get(json_object_get(cfg, "reproducibility"), "experiment_seed");
        uint64_t seed = json_is_integer(es) ? (uint64_t)json_integer_value(es) : 0;
        if (a.dry_run) {
            det_err("--local runs the entrypoint here: it does not go with --dry-run");
            rc = DET_EXIT_USAGE;
            goto out;
        }
        if (local_plan(cfg, seed, &env, &args, &nargs, err) != 0) {
            det_err("%s", err);
            json_decref(env);
            rc = DET_EXIT_INVALID;
            goto out;
        }
        fprintf(stderr,
                "det: --local: running the entrypoint in %s with kdet-launch (no "
                "cluster; hyperparameters %s)\n",
                a.context, json_string_value(json_object_get(env, "KDET_HPARAMS")));
        rc = run_local(a.context, env, args, nargs);
        kd_config_argv_free(args);
        json_decref(env);
        goto out;
    }
    /* the merged config's storage (a template may set it): where a large context goes */
    storage = json_incref(json_object_get(cfg, "checkpoint_storage"));
    if (a.stored_template != NULL) {
        /* the merged config is valid; submit the config as written, kdet-controller merges
         * the stored template (so that it is merged once, as with kubectl apply) */
        struct kd_yaml_doc *doc = NULL;
        r = kd_yaml_parse_file(a.config, &doc, err);
        if (r != 0) {
            det_err("%s", err);
            rc = DET_EXIT_INVALID;
            goto out;
        }
        json_decref(cfg);
        cfg = json_deep_copy(kd_yaml_root(doc));
        kd_yaml_free(doc);
    }
    fprintf(stderr, "det: %s: config is valid%s%s%s\n", a.config,
            a.template_path ? " (merged over template " : "",
            tpath ? da.template_ref : (a.template_path ? a.template_path : ""),
            a.template_path ? ")" : "");
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

    if (!fits_configmap(ctx.len)) {
        url = context_url(storage, &ctx, &scfg);
        if (url == NULL && !a.dry_run) {
            det_err("not submitted: the context has no location the trials could fetch it from");
            rc = DET_EXIT_INVALID;
            goto out;
        }
        if (url != NULL)
            fprintf(stderr,
                    "det: the packed context (%s) is more than a ConfigMap holds (1 MiB): it goes "
                    "to the checkpoint storage, %s\n",
                    h2, url);
    }
    docs = build_resources(&a, cfg, &ctx, url, &cm_fits);

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
        if (!cm_fits && url != NULL && (rc = upload_context(&scfg, &ctx, url)) != 0)
            goto out;
        rc = submit(&da, docs);
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
    if (url != NULL)
        fprintf(stderr, "det: dry run: the context would be uploaded to %s\n", url);
    rc = DET_EXIT_OK;
out:
    if (tpath != NULL)
        unlink(tpath);
    if (tdir[0])
        rmdir(tdir);
    free(tpath);
    json_decref(cfg);
    json_decref(docs);
    json_decref(schema);
    json_decref(causes);
    json_decref(unknown);
    json_decref(storage);
    json_decref(warnings);
    free(url);
    kd_context_free(&ctx);
    kd_buf_free(&out);
    return rc;
}
