/* det: help and usage errors with suggestions, exit codes, and
 * `experiment create --dry-run` output that parses back, carries the
 * packed context, validates against the CRD and shows the template merge. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "config/config.h"
#include "context/context.h"
#include "openapi/openapi.h"
#include "run.h"

#define CONFIG                                                                                     \
    "name: Unit Test Exp\n"                                                                        \
    "entrypoint: python3 train.py\n"                                                               \
    "labels: [cfg]\n"                                                                              \
    "hyperparameters:\n"                                                                           \
    "  global_batch_size: 32\n"                                                                    \
    "  lr: {type: log, minval: -3, maxval: -1, base: 10}\n"                                        \
    "searcher:\n"                                                                                  \
    "  name: random\n"                                                                             \
    "  metric: validation_loss\n"                                                                  \
    "  max_trials: 4\n"                                                                            \
    "  max_length: {batches: 100}\n"

static char tmp[64];

static int setup(void **state)
{
    (void)state;
    make_tmp(tmp);
    char p[128];
    snprintf(p, sizeof(p), "%s/ctx", tmp);
    put_file(tmp, "exp.yaml", CONFIG);
    put_file(tmp, "ctx/train.py", "print('training')\n");
    put_file(tmp, "ctx/model/__pycache__/m.cpython-311.pyc", "junk");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rm_rf(tmp);
    return 0;
}

static void expect(const struct det_run *r, int code, const char *in_out, const char *in_err)
{
    if (r->code != code || (in_out && !strstr(r->out, in_out)) ||
        (in_err && !strstr(r->err, in_err)))
        fail_msg("exit %d (want %d)\nstdout: %.2000s\nstderr: %.2000s\nwanted in stdout: %s\n"
                 "wanted in stderr: %s",
                 r->code, code, r->out, r->err, in_out ? in_out : "-", in_err ? in_err : "-");
}

static void test_help_and_usage(void **state)
{
    (void)state;
    struct det_run r;
    det_run(&r, (const char *[]){"--help", NULL});
    expect(&r, 0, "det experiment create CONFIG CONTEXT_DIR", NULL);
    assert_non_null(strstr(r.out, "exit codes:"));
    assert_string_equal(r.err, "");
    det_run_free(&r);
    det_run(&r, (const char *[]){NULL});
    expect(&r, 2, NULL, "usage: det");
    assert_string_equal(r.out, "");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "--help", NULL});
    expect(&r, 0, "create CONFIG CONTEXT_DIR", NULL);
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", "--help", NULL});
    expect(&r, 0, "--dry-run", NULL);
    assert_non_null(strstr(r.out, "--template FILE"));
    det_run_free(&r);
    det_run(&r, (const char *[]){"--version", NULL});
    expect(&r, 0, "det ", NULL);
    det_run_free(&r);
}

static void test_suggestions(void **state)
{
    (void)state;
    struct det_run r;
    det_run(&r, (const char *[]){"experimnt", "create", NULL});
    expect(&r, 2, NULL,
           "det: unknown command \"experimnt\"; did you mean \"experiment\"? (see 'det --help')");
    assert_string_equal(r.out, "");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "creat", NULL});
    expect(&r, 2, NULL, "unknown experiment verb \"creat\"; did you mean \"create\"?");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", "a.yaml", "dir", "--dryrun", NULL});
    expect(&r, 2, NULL, "unknown option \"--dryrun\"; did you mean \"--dry-run\"?");
    det_run_free(&r);
    det_run(&r, (const char *[]){"zzzzzzzz", NULL});
    expect(&r, 2, NULL, "det: unknown command \"zzzzzzzz\" (see 'det --help')");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", "a.yaml", NULL});
    expect(&r, 2, NULL, "det: missing CONTEXT_DIR");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", "a", "b", "c", NULL});
    expect(&r, 2, NULL, "unexpected argument \"c\"");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", "a", "b", "--template", NULL});
    expect(&r, 2, NULL, "--template needs a value");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", "a", "b", "-n", "Bad_NS", NULL});
    expect(&r, 2, NULL, "--namespace \"Bad_NS\": must be a DNS label");
    det_run_free(&r);
}

static char *path(const char *rel)
{
    static char buf[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", tmp, rel);
    return buf[i];
}

/*
 * Every Determined 0.38 form (tests/data/config/determined-0.38, see
 * tests/lib/config/test_config.c for the header format) through `det
 * experiment create --dry-run`: accepted ones exit 0 with exactly their
 * warnings on stderr (and the Experiment passes the CRD check det makes),
 * rejected ones exit 3 with the loader's message.
 */
static void test_determined_038(void **state)
{
    (void)state;
    const char *dir = "tests/data/config/determined-0.38";
    static const char *const files[] = {"asha_max_time_alone.yaml",
                                        "asha_max_time_zero.yaml",
                                        "asha_no_length.yaml",
                                        "asha_time_metric.yaml",
                                        "asha_time_metric_number.yaml",
                                        "full_reference.yaml",
                                        "grid_no_length.yaml",
                                        "integrations.yaml",
                                        "log_policies.yaml",
                                        "log_policies_bad_action.yaml",
                                        "log_policies_bad_pattern.yaml",
                                        "log_policies_no_action.yaml",
                                        "max_length_bare.yaml",
                                        "max_length_legacy_units.yaml",
                                        "preemption_timeout.yaml",
                                        "proxy_ports.yaml",
                                        "proxy_ports_bad_port.yaml",
                                        "proxy_ports_typo.yaml",
                                        "random_no_length.yaml",
                                        "registry_auth.yaml",
                                        "retention_policy.yaml",
                                        "single_no_length.yaml",
                                        "slurm_pbs.yaml",
                                        "storage_partial_counts.yaml",
                                        "storage_partial_mixed.yaml",
                                        "storage_partial_typo.yaml",
                                        "storage_partial_s3.yaml",
                                        "unknown_top_field.yaml",
                                        NULL};
    int failures = 0, n = 0;
    for (size_t i = 0; files[i]; i++, n++) {
        char file[512], line[1024];
        struct det_run r;
        int want_code = 0, nwarn = 0;
        bool ok = true;
        snprintf(file, sizeof(file), "%s/%s", dir, files[i]);
        det_run(&r, (const char *[]){"experiment", "create", file, path("ctx"), "--dry-run", NULL});
        FILE *f = fopen(file, "r");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f) && !strncmp(line, "# expect: ", 10)) {
            char *e = line + 10, want[2048];
            e[strcspn(e, "\n")] = '\0';
            if (!strncmp(e, "warn: ", 6)) {
                snprintf(want, sizeof(want), "det: warning: %s: %s", file, e + 6);
                ok = ok && strstr(r.err, want) != NULL;
                nwarn++;
            } else if (!strncmp(e, "reject: ", 8)) {
                /* PATH at L:C: TEXT */
                char *at = strstr(e + 8, " at "), *colon;
                assert_non_null(at);
                *at = '\0';
                colon = strstr(at + 4, ": ");
                assert_non_null(colon);
                *colon = '\0';
                snprintf(want, sizeof(want), "det: %s:%s: %s: %s", file, at + 4, e + 8, colon + 2);
                ok = ok && strstr(r.err, want) != NULL;
                want_code = 3;
            }
        }
        fclose(f);
        /* exactly the expected warnings */
        int got_warn = 0;
        for (const char *p = r.err; (p = strstr(p, "det: warning: ")) != NULL; p++)
            got_warn++;
        if (!ok || r.code != want_code || got_warn != nwarn ||
            (want_code == 0 && !strstr(r.out, "kind: Experiment"))) {
            printf("FAIL %s: exit %d (want %d), %d warnings (want %d)\nstderr: %.3000s\n", file,
                   r.code, want_code, got_warn, nwarn, r.err);
            failures++;
        }
        det_run_free(&r);
    }
    printf("%d Determined 0.38 forms through det\n", n);
    assert_int_equal(failures, 0);
}

/* --paused sets spec.paused; --test makes a one-trial, one-batch run labelled test. */
static void test_paused_and_test(void **state)
{
    (void)state;
    struct det_run r;
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"), "--dry-run",
                                 "--paused", "--test", NULL});
    expect(&r, 0, "kind: Experiment", "--test: one trial of 1 batch");
    json_t *docs = parse_docs(r.out, r.out_len);
    json_t *spec = json_object_get(json_array_get(docs, 1), "spec");
    assert_true(json_is_true(json_object_get(spec, "paused")));
    json_t *s = json_object_get(spec, "searcher");
    assert_string_equal(json_string_value(json_object_get(s, "name")), "single");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(s, "max_length"), "batches")), 1);
    assert_string_equal(json_string_value(json_object_get(s, "metric")), "validation_loss");
    assert_null(json_object_get(s, "max_trials"));
    assert_int_equal(json_integer_value(json_object_get(spec, "max_restarts")), 0);
    json_t *labels = json_object_get(spec, "labels");
    assert_string_equal(json_string_value(json_array_get(labels, json_array_size(labels) - 1)),
                        "test");
    assert_string_equal(json_string_value(json_object_get(spec, "name")), "Unit Test Exp test");
    /* the test run is a valid experiment as the controller checks it */
    char err[KD_ERRLEN] = "";
    if (kd_config_check(spec, err) != 0)
        fail_msg("%s", err);
    json_decref(docs);
    det_run_free(&r);
    /* without the flags: not paused, the config's searcher */
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"), "--dry-run",
                                 NULL});
    expect(&r, 0, "kind: Experiment", NULL);
    docs = parse_docs(r.out, r.out_len);
    spec = json_object_get(json_array_get(docs, 1), "spec");
    assert_null(json_object_get(spec, "paused"));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(spec, "searcher"), "name")), "random");
    json_decref(docs);
    det_run_free(&r);
}

/* --local runs the entrypoint here through kdet-launch: one trial's inputs, no cluster. */
static void test_local(void **state)
{
    (void)state;
    struct det_run r;
    put_file(tmp, "local/run.sh",
             "echo \"hp=$KDET_HPARAMS seed=$KDET_TRIAL_SEED len=$KDET_MAX_LENGTH "
             "rank=$RANK/$WORLD_SIZE foo=$FOO url=${KDET_CONTROLLER_URL:-none}\"\n");
    put_file(tmp, "local.yaml",
             "entrypoint: sh run.sh\n"
             "hyperparameters: {layers: 3, act: {type: categorical, vals: [relu]}}\n"
             "searcher: {name: random, metric: loss, max_trials: 4, max_length: {batches: 7}}\n"
             "resources: {slots_per_trial: 2}\n"
             "reproducibility: {experiment_seed: 5}\n"
             "environment: {environment_variables: [FOO=bar]}\n");
    setenv("KDET_CONTROLLER_URL", "http://127.0.0.1:1", 1); /* --local never talks to it */
    det_run(&r, (const char *[]){"experiment", "create", path("local.yaml"), path("local"),
                                 "--local", NULL});
    unsetenv("KDET_CONTROLLER_URL");
    expect(&r, 0,
           "[rank=0] hp={\"layers\":3,\"act\":\"relu\"} seed=5 len=7 rank=0/2 foo=bar url=none",
           "det: --local: the entrypoint exited 0");
    assert_non_null(strstr(r.out, "[rank=1] hp="));
    det_run_free(&r);
    /* --test shortens it to 1 batch */
    det_run(&r, (const char *[]){"experiment", "create", path("local.yaml"), path("local"),
                                 "--local", "--test", NULL});
    expect(&r, 0, "len=1 rank=0/2", NULL);
    det_run_free(&r);
    /* the entrypoint's failure is det's */
    put_file(tmp, "fail.yaml",
             "entrypoint: sh -c 'exit 3'\nsearcher: {name: single, metric: loss}\n");
    det_run(&r, (const char *[]){"experiment", "create", path("fail.yaml"), path("local"),
                                 "--local", NULL});
    expect(&r, 1, NULL, "det: --local: kdet-launch exited 3");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", path("fail.yaml"), path("local"),
                                 "--local", "--dry-run", NULL});
    expect(&r, 2, NULL, "--local runs the entrypoint here: it does not go with --dry-run");
    det_run_free(&r);
}

static void test_dry_run(void **state)
{
    (void)state;
    struct det_run r, r2;
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"), "--dry-run",
                                 NULL});
    expect(&r, 0, "kind: Experiment", "dry run: printed 2 resources, nothing was submitted");
    assert_non_null(strstr(r.err, "packed 1 files"));
    json_t *docs = parse_docs(r.out, r.out_len);
    assert_int_equal(json_array_size(docs), 2);
    json_t *cm = json_array_get(docs, 0), *exp = json_array_get(docs, 1);
    assert_string_equal(json_string_value(json_object_get(cm, "kind")), "ConfigMap");
    json_t *spec = json_object_get(exp, "spec");
    json_t *ctx = json_object_get(spec, "context");
    const char *name = json_string_value(json_object_get(json_object_get(exp, "metadata"), "name"));
    assert_true(strncmp(name, "unit-test-exp-", 14) == 0 && strlen(name) == 22);
    assert_string_equal(
        json_string_value(json_object_get(ctx, "configMap")),
        json_string_value(json_object_get(json_object_get(cm, "metadata"), "name")));
    assert_int_equal(json_integer_value(json_object_get(ctx, "files")), 1);
    /* the ConfigMap holds exactly the packed context the spec names */
    const char *b64 =
        json_string_value(json_object_get(json_object_get(cm, "binaryData"), "context.tar.gz"));
    assert_non_null(b64);
    size_t blen = strlen(b64);
    unsigned char *bin = malloc(blen);
    int n = EVP_DecodeBlock(bin, (const unsigned char *)b64, (int)blen);
    assert_true(n > 0);
    while (blen > 0 && b64[blen - 1] == '=') {
        n--;
        blen--;
    }
    assert_int_equal(n, json_integer_value(json_object_get(ctx, "size")));
    char hex[65];
    kd_context_sha256(bin, (size_t)n, hex);
    assert_string_equal(hex, json_string_value(json_object_get(ctx, "sha256")));
    free(bin);
    /* the config is carried unchanged, and the resource validates against the CRD */
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(spec, "searcher"), "max_trials")), 4);
    json_t *schema = crd_schema_file("crds/experiments.yaml");
    json_t *causes = NULL, *unknown = NULL;
    assert_int_equal(kd_openapi_validate(schema, exp, "", &causes), 0);
    /* and the controller's full check of the resource's spec accepts it */
    char err[KD_ERRLEN] = "";
    if (kd_config_check(spec, err) != 0)
        fail_msg("kd_config_check(spec): %s", err);
    assert_int_equal(kd_openapi_unknown_fields(schema, exp, "", &unknown), 0);
    assert_int_equal(json_array_size(unknown), 0);
    json_decref(unknown);
    /* the same inputs give the same output, byte for byte */
    det_run(&r2, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"),
                                  "--dry-run", NULL});
    assert_int_equal(r2.code, 0);
    assert_string_equal(r.out, r2.out);
    det_run_free(&r2);
    /* another namespace */
    det_run(&r2, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"),
                                  "--dry-run", "--namespace=team-a", NULL});
    expect(&r2, 0, "namespace: team-a", NULL);
    det_run_free(&r2);
    json_decref(schema);
    json_decref(docs);
    det_run_free(&r);
}

static void test_template_merge(void **state)
{
    (void)state;
    put_file(tmp, "tmpl.yaml",
             "labels: [tmpl]\n"
             "resources: {slots_per_trial: 2, priority: 10}\n"
             "checkpoint_storage: {type: shared_fs, host_path: /mnt/ckpt}\n");
    struct det_run r;
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"),
                                 "--template", path("tmpl.yaml"), "--dry-run", NULL});
    /* a template file is merged here and named in an annotation; spec.template is kept for
     * stored templates, which kdet-controller merges */
    expect(&r, 0, "kdet.io/template-file: tmpl", "(merged over template");
    json_t *docs = parse_docs(r.out, r.out_len);
    json_t *spec = json_object_get(json_array_get(docs, 1), "spec");
    assert_null(json_object_get(spec, "template"));
    json_t *res = json_object_get(spec, "resources");
    assert_int_equal(json_integer_value(json_object_get(res, "slots_per_trial")), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(spec, "checkpoint_storage"), "host_path")),
                        "/mnt/ckpt");
    /* lists concatenate: the template's entries first */
    json_t *labels = json_object_get(spec, "labels");
    assert_int_equal(json_array_size(labels), 2);
    assert_string_equal(json_string_value(json_array_get(labels, 0)), "tmpl");
    assert_string_equal(json_string_value(json_array_get(labels, 1)), "cfg");
    json_decref(docs);
    det_run_free(&r);
}

static void test_invalid_config(void **state)
{
    (void)state;
    put_file(tmp, "bad.yaml",
             "entrypoint: python3 train.py\n"
             "searcher:\n"
             "  name: random\n"
             "  metric: loss\n"
             "  max_trials: ten\n"
             "  max_length: {batches: 10}\n");
    struct det_run r;
    det_run(&r, (const char *[]){"experiment", "create", path("bad.yaml"), path("ctx"), "--dry-run",
                                 NULL});
    expect(&r, 3, NULL, "bad.yaml:5:");
    assert_non_null(strstr(r.err, "searcher.max_trials:"));
    assert_non_null(strstr(r.err, "\"ten\""));
    assert_string_equal(r.out, "");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", path("missing.yaml"), path("ctx"),
                                 "--dry-run", NULL});
    expect(&r, 3, NULL, "missing.yaml");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("nodir"),
                                 "--dry-run", NULL});
    expect(&r, 3, NULL, "nodir: cannot read the context directory: No such file or directory");
    det_run_free(&r);
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("exp.yaml"),
                                 "--dry-run", NULL});
    expect(&r, 3, NULL, "exp.yaml: not a directory");
    det_run_free(&r);
    put_file(tmp, "ctx/.detignore", "data[0-9\n");
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"), "--dry-run",
                                 NULL});
    expect(&r, 3, NULL, ".detignore:1: unterminated '['");
    det_run_free(&r);
}

static void test_context_sizes(void **state)
{
    (void)state;
    struct det_run r;
    /* over 95 MiB: refused, with advice */
    put_file(tmp, "big/train.py", "x\n");
    put_file(tmp, "big/data/train.bin", "");
    assert_int_equal(truncate(path("big/data/train.bin"), 100ll << 20), 0);
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("big"), "--dry-run",
                                 NULL});
    expect(&r, 3, NULL, "over the 95.0 MiB limit");
    assert_non_null(strstr(r.err, "(.detignore: /data/)"));
    assert_string_equal(r.out, "");
    det_run_free(&r);
    /* over what a ConfigMap holds: the Experiment alone, and a note */
    put_file(tmp, "mid/train.py", "x\n");
    FILE *f = fopen(path("mid/weights.bin"), "w");
    assert_non_null(f);
    unsigned int x = 12345;
    for (int i = 0; i < (3 << 19); i++) {
        x = x * 1103515245u + 12345u;
        fputc((int)(x >> 24), f);
    }
    fclose(f);
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("mid"), "--dry-run",
                                 NULL});
    expect(&r, 0, "kind: Experiment", "more than a ConfigMap holds (1 MiB)");
    json_t *docs = parse_docs(r.out, r.out_len);
    assert_int_equal(json_array_size(docs), 1);
    json_t *ctx = json_object_get(json_object_get(json_array_get(docs, 0), "spec"), "context");
    assert_null(json_object_get(ctx, "configMap"));
    assert_true(json_integer_value(json_object_get(ctx, "size")) > (1 << 20));
    json_decref(docs);
    det_run_free(&r);
    /* with shared_fs storage: the URL under kdet-contexts/<sha256>, nothing uploaded */
    char cfg[1024], want[512];
    struct stat sb;
    snprintf(cfg, sizeof(cfg), CONFIG "checkpoint_storage: {type: shared_fs, host_path: %s}\n",
             path("store"));
    put_file(tmp, "exp-fs.yaml", cfg);
    det_run(&r, (const char *[]){"experiment", "create", path("exp-fs.yaml"), path("mid"),
                                 "--dry-run", NULL});
    expect(&r, 0, "kind: Experiment", "the context would be uploaded to file://");
    docs = parse_docs(r.out, r.out_len);
    ctx = json_object_get(json_object_get(json_array_get(docs, 0), "spec"), "context");
    snprintf(want, sizeof(want), "file://%s/kdet-contexts/%s.tar.gz", path("store"),
             json_string_value(json_object_get(ctx, "sha256")));
    assert_string_equal(json_string_value(json_object_get(ctx, "url")), want);
    assert_int_equal(stat(path("store/kdet-contexts"), &sb), -1);
    json_decref(docs);
    det_run_free(&r);
}

static void test_submit_needs_cluster(void **state)
{
    (void)state;
    struct det_run r;
    /* a kubeconfig that does not exist: the config is checked first, then det says so */
    setenv("KUBECONFIG", path("no-such-kubeconfig"), 1);
    det_run(&r, (const char *[]){"experiment", "create", path("exp.yaml"), path("ctx"), NULL});
    expect(&r, 4, "", "no-such-kubeconfig: No such file or directory");
    assert_non_null(strstr(r.err, "config is valid"));
    assert_string_equal(r.out, "");
    det_run_free(&r);
    /* a server that is not there: named, with the hint */
    put_file(tmp, "kc",
             "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
             "    server: http://127.0.0.1:1\ncontexts:\n- name: x\n  context:\n"
             "    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n"
             "  user: {}\n");
    det_run(&r, (const char *[]){"experiment", "list", "--kubeconfig", path("kc"), NULL});
    expect(&r, 4, "", "cannot reach the Kubernetes API server at http://127.0.0.1:1");
    det_run_free(&r);
    unsetenv("KUBECONFIG");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_usage),
        cmocka_unit_test(test_suggestions),
        cmocka_unit_test_setup_teardown(test_dry_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_determined_038, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paused_and_test, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local, setup, teardown),
        cmocka_unit_test_setup_teardown(test_template_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_submit_needs_cluster, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
