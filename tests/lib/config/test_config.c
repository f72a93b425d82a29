/*
 * Experiment config: every bad config under tests/data/config/bad names the
 * field and position it states in its `# expect:` line; the good ones
 * (Determined's examples among them) load, take defaults and re-validate;
 * template merging, rule by rule.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "core/buf.h"
#include "core/str.h"
#include "yaml/yaml.h"

#define DATA "tests/data/config"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .yaml files of a directory, sorted; caller frees. */
static char **list_yaml(const char *dir, size_t *n)
{
    DIR *d = opendir(dir);
    char **v = NULL;
    *n = 0;
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".yaml"))
            continue;
        v = realloc(v, (*n + 1) * sizeof(*v));
        assert_non_null(v);
        v[*n] = malloc(strlen(dir) + l + 2);
        assert_non_null(v[*n]);
        snprintf(v[*n], strlen(dir) + l + 2, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    qsort(v, *n, sizeof(*v), cmp_str);
    return v;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Read the `# expect: PATH at [FILE:]L:C: MESSAGE` and `# template: FILE` header lines. */
static void read_expect(const char *file, char *prefix, size_t plen, char *msg, size_t mlen,
                        char *tmpl, size_t tlen)
{
    FILE *f = fopen(file, "r");
    char line[1024], line2[1024];
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    tmpl[0] = '\0';
    if (fgets(line2, sizeof(line2), f) && !strncmp(line2, "# template: ", 12)) {
        line2[strcspn(line2, "\n")] = '\0';
        snprintf(tmpl, tlen, DATA "/templates/%s", line2 + 12);
    }
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "# expect: ", 10))
        fail_msg("%s: first line must be `# expect: PATH at L:C: MESSAGE`", file);
    char *path = line + 10;
    char *at = strstr(path, " at ");
    assert_non_null(at);
    *at = '\0';
    char *pos = at + 4;
    char *colon = strstr(pos, ": ");
    assert_non_null(colon);
    *colon = '\0';
    snprintf(msg, mlen, "%s", colon + 2);
    /* pos is "L:C" (in the config) or "templates/FILE:L:C" */
    char where[2048];
    if (!strncmp(pos, "templates/", 10))
        snprintf(where, sizeof(where), DATA "/%s", pos);
    else
        snprintf(where, sizeof(where), "%s:%s", file, pos);
    if (!strcmp(path, "-"))
        snprintf(prefix, plen, "%s: ", where);
    else
        snprintf(prefix, plen, "%s: %s: ", where, path);
}

static void test_bad_configs(void **state)
{
    (void)state;
    size_t n = 0;
    char **files = list_yaml(DATA "/bad", &n);
    int failures = 0;
    printf("%zu bad configs\n", n);
    assert_true(n >= 50);
    for (size_t i = 0; i < n; i++) {
        char prefix[4096], msg[1024], tmpl[2048], err[KD_ERRLEN] = "";
        json_t *out = NULL;
        read_expect(files[i], prefix, sizeof(prefix), msg, sizeof(msg), tmpl, sizeof(tmpl));
        int rc = kd_config_load(files[i], tmpl[0] ? tmpl : NULL, &out, err);
        bool ok = rc != 0 && out == NULL && !strncmp(err, prefix, strlen(prefix)) &&
                  strstr(err + strlen(prefix), msg) != NULL;
        /* Secrets in a config are never echoed back. */
        if (strstr(err, "EXAMPLEKEY") || strstr(err, "wJalrXUtnFEMI"))
            ok = false;
        if (!ok) {
            printf("FAIL %s\n  want: %s...%s\n  got:  %s (rc %d)\n", files[i], prefix, msg, err,
                   rc);
            failures++;
        }
        json_decref(out);
    }
    free_list(files, n);
    assert_int_equal(failures, 0);
}

/*
 * Determined 0.38's forms (tests/data/config/determined-0.38/, one file per
 * form): the header lines say what the loader must do with each:
 *   # expect: accept                       loads, no warning
 *   # expect: warn: TEXT                   loads; a warning starts with TEXT (one line each)
 *   # expect: reject: PATH at L:C: TEXT    fails with FILE:L:C: PATH: TEXT...
 */
static void test_determined_038(void **state)
{
    (void)state;
    size_t n = 0;
    char **files = list_yaml(DATA "/determined-0.38", &n);
    int failures = 0;
    printf("%zu Determined 0.38 forms\n", n);
    assert_true(n >= 20);
    for (size_t i = 0; i < n; i++) {
        char line[1024], want_err[2048] = "", err[KD_ERRLEN] = "";
        char warns[8][1024];
        size_t nwarn = 0;
        bool accept = false;
        FILE *f = fopen(files[i], "r");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f) && !strncmp(line, "# expect: ", 10)) {
            char *e = line + 10;
            e[strcspn(e, "\n")] = '\0';
            if (!strcmp(e, "accept")) {
                accept = true;
            } else if (!strncmp(e, "warn: ", 6) && nwarn < 8) {
                snprintf(warns[nwarn++], sizeof(warns[0]), "%s", e + 6);
            } else if (!strncmp(e, "reject: ", 8)) {
                /* PATH at L:C: TEXT -> FILE:L:C: PATH: TEXT */
                char *path = e + 8, *at = strstr(path, " at "), *pos, *colon;
                assert_non_null(at);
                *at = '\0';
                pos = at + 4;
                colon = strstr(pos, ": ");
                assert_non_null(colon);
                *colon = '\0';
                snprintf(want_err, sizeof(want_err), "%s:%s: %s: %s", files[i], pos, path,
                         colon + 2);
            } else {
                fail_msg("%s: bad expect line `%s`", files[i], e);
            }
        }
        fclose(f);
        assert_true(accept || nwarn > 0 || want_err[0]);
        json_t *cfg = NULL;
        int rc = kd_config_load(files[i], NULL, &cfg, err);
        bool ok;
        if (want_err[0]) {
            ok = rc == KD_EINVALID && cfg == NULL && !strncmp(err, want_err, strlen(want_err));
        } else {
            ok = rc == 0;
            json_t *w = rc == 0 ? kd_config_warnings(cfg) : NULL;
            if (ok && json_array_size(w) != nwarn)
                ok = false;
            for (size_t k = 0; ok && k < nwarn; k++) {
                const char *got = json_string_value(json_array_get(w, k));
                ok = got && !strncmp(got, warns[k], strlen(warns[k])) && !strchr(got, '\n');
            }
            if (!ok) {
                char *d = w ? json_dumps(w, 0) : NULL;
                printf("FAIL %s: rc %d err \"%s\" warnings %s (want %zu)\n", files[i], rc, err,
                       d ? d : "-", nwarn);
                free(d);
                ok = true; /* reported */
                failures++;
            }
            json_decref(w);
            /* What det accepts, kdet-controller accepts: the spec check and defaults too. */
            if (rc == 0) {
                json_t *copy = json_deep_copy(cfg);
                json_t *cs = json_object_get(copy, "checkpoint_storage");
                if (cs && !json_object_get(cs, "type")) { /* as merged over an s3 default */
                    json_object_set_new(cs, "type", json_string("s3"));
                    json_object_set_new(cs, "bucket", json_string("default-bucket"));
                }
                if (kd_config_check(copy, err) || kd_config_apply_defaults(copy, err) ||
                    kd_config_check(copy, err)) {
                    printf("FAIL %s: as a spec: %s\n", files[i], err);
                    failures++;
                }
                json_decref(copy);
            }
        }
        if (!ok) {
            printf("FAIL %s\n  want: %s\n  got:  %s (rc %d)\n", files[i], want_err, err, rc);
            failures++;
        }
        json_decref(cfg);
    }
    free_list(files, n);
    assert_int_equal(failures, 0);
}

/*
 * kdet-controller checks a spec after merging its default storage under it:
 * there a checkpoint_storage still without type (the cluster has no
 * default) is an error naming the field, and a merged one passes.
 */
static void test_check_partial_storage(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    json_t *cfg =
        json_pack("{s:s, s:{s:s, s:s}, s:{s:i}}", "entrypoint", "python3 train.py", "searcher",
                  "name", "single", "metric", "loss", "checkpoint_storage", "save_trial_best", 2);
    assert_non_null(cfg);
    assert_int_equal(kd_config_check(cfg, err), KD_EINVALID);
    assert_non_null(strstr(err, "checkpoint_storage.type: required field is missing (shared_fs or "
                                "s3; the cluster has no default checkpoint storage to supply it)"));
    json_t *cs = json_object_get(cfg, "checkpoint_storage");
    json_object_set_new(cs, "type", json_string("shared_fs"));
    json_object_set_new(cs, "host_path", json_string("/ckpt"));
    err[0] = '\0';
    if (kd_config_check(cfg, err) != 0)
        fail_msg("%s", err);
    /* the note about a partial storage is for the file only: this one has a type */
    json_t *w = kd_config_warnings(cfg);
    assert_int_equal(json_array_size(w), 1); /* searcher.max_length: not set */
    assert_non_null(
        strstr(json_string_value(json_array_get(w, 0)), "searcher.max_length: not set"));
    json_decref(w);
    json_decref(cfg);
}

static void test_good_configs(void **state)
{
    (void)state;
    size_t n = 0;
    char **files = list_yaml(DATA "/good", &n);
    assert_true(n >= 5);
    for (size_t i = 0; i < n; i++) {
        char err[KD_ERRLEN] = "";
        json_t *cfg = NULL;
        if (kd_config_load(files[i], NULL, &cfg, err))
            fail_msg("%s: %s", files[i], err);
        if (kd_config_check(cfg, err))
            fail_msg("%s: check: %s", files[i], err);
        json_t *before = json_deep_copy(cfg);
        if (kd_config_apply_defaults(cfg, err))
            fail_msg("%s: defaults: %s", files[i], err);
        if (kd_config_check(cfg, err))
            fail_msg("%s: check after defaults: %s", files[i], err);
        /* Defaults never change what the user set. */
        const char *k;
        json_t *v;
        json_object_foreach(before, k, v)
        {
            if (json_is_object(v) || json_is_array(v))
                continue; /* sections and list entries gain fields */
            if (!json_equal(v, json_object_get(cfg, k)))
                fail_msg("%s: defaults changed %s", files[i], k);
        }
        /* The CR spec re-emitted as YAML reads back the same. */
        struct kd_buf b = KD_BUF_INIT(1 << 20);
        struct kd_yaml_doc *doc = NULL;
        assert_int_equal(kd_yaml_emit(cfg, &b), 0);
        assert_int_equal(kd_yaml_parse("emitted", kd_buf_str(&b), b.len, &doc, err), 0);
        assert_true(json_equal(kd_yaml_root(doc), cfg));
        kd_yaml_free(doc);
        kd_buf_free(&b);
        json_decref(before);
        json_decref(cfg);
    }
    free_list(files, n);
}

static void test_load_keeps_user_values_only(void **state)
{
    (void)state;
    char err[KD_ERRLEN];
    json_t *cfg = NULL;
    assert_int_equal(kd_config_load(DATA "/good/mnist_const.yaml", NULL, &cfg, err), 0);
    assert_null(json_object_get(cfg, "max_restarts"));
    assert_null(json_object_get(cfg, "resources"));
    assert_string_equal(json_string_value(json_object_get(cfg, "entrypoint")),
                        "model_def:MNistTrial");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(cfg, "hyperparameters"),
                                                        "global_batch_size")),
                     64);
    json_decref(cfg);
}

static void test_defaults(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    json_t *cfg =
        json_pack("{s:s,s:{s:s,s:s,s:i,s:{s:i},s:[{s:s,s:i}]},s:{s:s,s:s},"
                  "s:{s:{s:s,s:i,s:i}},s:[{s:s,s:s}]}",
                  "entrypoint", "python3 train.py", "searcher", "name", "adaptive_asha", "metric",
                  "loss", "max_trials", 4, "max_length", "batches", 100, "early_stopping", "type",
                  "median", "min_trials", 5, "checkpoint_storage", "type", "shared_fs", "host_path",
                  "/ckpt", "hyperparameters", "lr", "type", "log", "minval", -3, "maxval", -1,
                  "bind_mounts", "host_path", "/a", "container_path", "/b");
    assert_int_equal(kd_config_check(cfg, err), 0);
    assert_int_equal(kd_config_apply_defaults(cfg, err), 0);
    json_t *s = json_object_get(cfg, "searcher");
    assert_true(json_is_true(json_object_get(s, "smaller_is_better")));
    assert_string_equal(json_string_value(json_object_get(s, "mode")), "standard");
    assert_true(json_real_value(json_object_get(s, "divisor")) == 4.0);
    assert_int_equal(json_integer_value(json_object_get(s, "max_rungs")), 5);
    assert_int_equal(json_integer_value(json_object_get(s, "max_concurrent_trials")), 0);
    json_t *rule = json_array_get(json_object_get(s, "early_stopping"), 0);
    assert_int_equal(json_integer_value(json_object_get(rule, "grace_period")), 0);
    assert_int_equal(json_integer_value(json_object_get(rule, "min_trials")), 5); /* kept */
    json_t *r = json_object_get(cfg, "resources");
    assert_int_equal(json_integer_value(json_object_get(r, "slots_per_trial")), 1);
    assert_true(json_number_value(json_object_get(r, "weight")) == 1.0);
    assert_int_equal(json_integer_value(json_object_get(cfg, "max_restarts")), 5);
    assert_int_equal(json_integer_value(json_object_get(cfg, "scheduling_unit")), 100);
    assert_string_equal(json_string_value(json_object_get(cfg, "checkpoint_policy")), "best");
    assert_int_equal(json_integer_value(
                         json_object_get(json_object_get(cfg, "min_validation_period"), "batches")),
                     0);
    json_t *cs = json_object_get(cfg, "checkpoint_storage");
    assert_int_equal(json_integer_value(json_object_get(cs, "save_experiment_best")), 0);
    assert_int_equal(json_integer_value(json_object_get(cs, "save_trial_best")), 1);
    assert_int_equal(json_integer_value(json_object_get(cs, "save_trial_latest")), 1);
    assert_string_equal(json_string_value(json_object_get(cs, "propagation")), "rprivate");
    json_t *o = json_object_get(cfg, "optimizations");
    assert_int_equal(json_integer_value(json_object_get(o, "aggregation_frequency")), 1);
    assert_int_equal(json_integer_value(json_object_get(o, "tensor_fusion_threshold")), 64);
    assert_string_equal(json_string_value(json_object_get(o, "mixed_precision")), "O0");
    json_t *seed = json_object_get(json_object_get(cfg, "reproducibility"), "experiment_seed");
    assert_true(json_is_integer(seed) && json_integer_value(seed) >= 0);
    json_t *lr = json_object_get(json_object_get(cfg, "hyperparameters"), "lr");
    assert_true(json_number_value(json_object_get(lr, "base")) == 10.0);
    json_t *bm = json_array_get(json_object_get(cfg, "bind_mounts"), 0);
    assert_true(json_is_false(json_object_get(bm, "read_only")));
    assert_string_equal(json_string_value(json_object_get(bm, "propagation")), "rprivate");
    assert_true(json_is_false(json_object_get(json_object_get(cfg, "profiling"), "enabled")));
    /* A second pass changes nothing (the seed included). */
    json_t *once = json_deep_copy(cfg);
    assert_int_equal(kd_config_apply_defaults(cfg, err), 0);
    assert_true(json_equal(once, cfg));
    json_decref(once);
    json_decref(cfg);

    /* Per-searcher defaults. */
    cfg = json_pack("{s:s,s:{s:s,s:i,s:i}}", "entrypoint", "x", "searcher", "name", "bayesian",
                    "max_trials", 6, "max_length", 10);
    assert_int_equal(kd_config_apply_defaults(cfg, err), 0);
    s = json_object_get(cfg, "searcher");
    assert_int_equal(json_integer_value(json_object_get(s, "num_startup_trials")), 6);
    assert_int_equal(json_integer_value(json_object_get(s, "max_concurrent_trials")), 16);
    json_decref(cfg);
    cfg = json_pack("{s:[]}", "resources");
    assert_int_equal(kd_config_apply_defaults(cfg, err), KD_EINVALID);
    assert_non_null(strstr(err, "resources: expected a mapping"));
    json_decref(cfg);
}

static void test_check_json_paths(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    json_t *cfg = json_pack("{s:s,s:{s:s,s:s,s:i}}", "entrypoint", "x", "searcher", "name",
                            "random", "max_trials", "ten", "max_length", 10);
    assert_int_equal(kd_config_check(cfg, err), KD_EINVALID);
    assert_string_equal(err, "searcher.max_trials: expected a positive integer, got \"ten\"");
    json_decref(cfg);
    cfg = json_pack("{s:s,s:{s:s,s:i},s:{s:s,s:s,s:s}}", "entrypoint", "x", "searcher", "name",
                    "single", "max_length", 5, "checkpoint_storage", "type", "s3", "bucket", "abc",
                    "secret_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    assert_int_equal(kd_config_check(cfg, err), KD_EINVALID);
    assert_true(kd_str_has_prefix(err, "checkpoint_storage.secret_key: credentials are not"));
    assert_null(strstr(err, "EXAMPLEKEY"));
    json_decref(cfg);
    /* An Experiment resource's spec carries kdet's own fields next to the config. */
    cfg = json_pack("{s:s,s:{s:s,s:i},s:b,s:b,s:b,s:s,s:{s:s}}", "entrypoint", "x", "searcher",
                    "name", "single", "max_length", 5, "paused", 1, "canceled", 0, "archived", 0,
                    "template", "org-default", "context", "configMap", "exp-1-context");
    assert_int_equal(kd_config_check(cfg, err), 0);
    json_object_set_new(cfg, "paused", json_string("yes"));
    assert_int_equal(kd_config_check(cfg, err), KD_EINVALID);
    assert_true(kd_str_has_prefix(err, "paused: expected true or false"));
    json_object_set_new(cfg, "paused", json_false());
    json_object_set_new(cfg, "pasued", json_true());
    assert_int_equal(kd_config_check(cfg, err), KD_EINVALID);
    assert_string_equal(err, "pasued: unknown field; did you mean `paused`?");
    json_decref(cfg);
    assert_int_equal(kd_config_check(NULL, err), KD_EINVAL);
    json_t *list = json_array();
    assert_int_equal(kd_config_check(list, err), KD_EINVALID);
    assert_non_null(strstr(err, "must be a mapping of fields, got a list"));
    json_decref(list);
}

static void test_entrypoint_forms(void **state)
{
    (void)state;
    const char *good[] = {"model_def:MNistTrial",
                          "pkg.model_def:Outer.Trial",
                          "python3 train.py --lr 0.1",
                          "./run.sh",
                          "python3 -m kdet.launch.torch_distributed --trial model_def:MNistTrial",
                          "python3 -m determined.launch.torch_distributed --trial model:T",
                          "python3 -m kdet.launch.torch_distributed -- python3 train.py",
                          "python3 -m kdet.launch.deepspeed --trial model:T",
                          "python3 -m determined.launch.horovod --autotune -- train.py",
                          "python3 -m kdet.launch.torch_distributed train.py --epochs 3",
                          "/usr/bin/python3.11 -m kdet.launch.torch_distributed train.py",
                          "python3 -m mypackage.main",
                          "bash -c 'python3 a.py && python3 b.py'",
                          NULL};
    const char *bad[] = {"python3 -m kdet.launch.tensorflow --trial m:T",
                         "python3 -m determined.launch.torch_distributed --trial",
                         "python3 -m kdet.launch.torch_distributed --trial model_def",
                         "python3 -m kdet.launch.deepspeed --",
                         "python3 -m kdet.launch.horovod --autotune train.py",
                         "   ",
                         "echo 'unterminated",
                         NULL};
    char err[KD_ERRLEN];
    for (size_t i = 0; good[i]; i++) {
        json_t *cfg = json_pack("{s:s,s:{s:s,s:i}}", "entrypoint", good[i], "searcher", "name",
                                "single", "max_length", 5);
        if (kd_config_check(cfg, err))
            fail_msg("\"%s\": %s", good[i], err);
        json_decref(cfg);
    }
    for (size_t i = 0; bad[i]; i++) {
        json_t *cfg = json_pack("{s:s,s:{s:s,s:i}}", "entrypoint", bad[i], "searcher", "name",
                                "single", "max_length", 5);
        if (kd_config_check(cfg, err) != KD_EINVALID)
            fail_msg("\"%s\" was accepted", bad[i]);
        assert_true(kd_str_has_prefix(err, "entrypoint: "));
        json_decref(cfg);
    }
}

/* kdet-launch arguments: "a|b|c" is the expected argv joined with '|'. */
static void expect_argv(json_t *ep, const char *want)
{
    char **argv = NULL, err[KD_ERRLEN] = "";
    int argc = 0;
    if (kd_config_launch_argv(ep, &argv, &argc, err))
        fail_msg("launch argv: %s", err);
    struct kd_buf b = KD_BUF_INIT(4096);
    for (int i = 0; i < argc; i++)
        assert_int_equal(kd_buf_printf(&b, "%s%s", i ? "|" : "", argv[i]), 0);
    assert_null(argv[argc]);
    if (strcmp(kd_buf_str(&b), want))
        fail_msg("got %s, want %s", kd_buf_str(&b), want);
    kd_buf_free(&b);
    kd_config_argv_free(argv);
    json_decref(ep);
}

static void test_launch_argv(void **state)
{
    (void)state;
    expect_argv(json_string("model_def:MNistTrial"), "--trial|model_def:MNistTrial");
    expect_argv(json_string("python3 -m determined.launch.torch_distributed --trial model:T"),
                "torch_distributed|--trial|model:T");
    expect_argv(json_string("python3 -m kdet.launch.deepspeed --num_gpus 2 -- train.py --x 'a b'"),
                "deepspeed|--num_gpus|2|--|train.py|--x|a b");
    expect_argv(json_pack("[s,s,s,s,s]", "python3", "-m", "kdet.launch.horovod", "train.py", "-v"),
                "horovod|train.py|-v");
    expect_argv(json_string("python3 train.py --lr=0.1"), "--|python3|train.py|--lr=0.1");
    expect_argv(json_pack("[s,s]", "./run.sh", "--fast"), "--|./run.sh|--fast");
    char **argv = NULL, err[KD_ERRLEN] = "";
    int argc = 0;
    json_t *bad = json_string("python3 -m kdet.launch.torch --trial m:T");
    assert_int_equal(kd_config_launch_argv(bad, &argv, &argc, err), KD_EINVALID);
    assert_null(argv);
    assert_true(kd_str_has_prefix(err, "entrypoint: launcher `kdet.launch.torch`"));
    json_decref(bad);
    assert_int_equal(kd_config_launch_argv(NULL, &argv, &argc, err), KD_EINVALID);
    assert_non_null(strstr(err, "entrypoint: required field is missing"));
    kd_config_argv_free(NULL);
}

/* ---- template merging: one test per rule -------------------------------------------------- */

static json_t *J(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    if (!v)
        fail_msg("bad JSON in test: %s: %s", text, je.text);
    return v;
}

static void expect_merge(const char *tmpl, const char *cfg, const char *want)
{
    json_t *t = J(tmpl), *c = J(cfg), *w = J(want), *out = NULL;
    json_t *t0 = json_deep_copy(t), *c0 = json_deep_copy(c);
    assert_int_equal(kd_config_merge_template(t, c, &out, NULL), 0);
    if (!json_equal(out, w)) {
        char *got = json_dumps(out, JSON_SORT_KEYS);
        fail_msg("merge(%s, %s) = %s, want %s", tmpl, cfg, got, want);
    }
    /* Neither input is modified. */
    assert_true(json_equal(t, t0));
    assert_true(json_equal(c, c0));
    json_decref(t);
    json_decref(c);
    json_decref(w);
    json_decref(t0);
    json_decref(c0);
    json_decref(out);
}

static void test_merge_scalar_override(void **state)
{
    (void)state;
    expect_merge("{\"max_restarts\": 5, \"name\": \"t\"}", "{\"max_restarts\": 1}",
                 "{\"max_restarts\": 1, \"name\": \"t\"}");
    /* A value of another type in the config wins as well. */
    expect_merge("{\"entrypoint\": [\"a\", \"b\"]}", "{\"entrypoint\": \"c\"}",
                 "{\"entrypoint\": \"c\"}");
    /* null in the config means "not set": the template's value stays. */
    expect_merge("{\"description\": \"t\"}", "{\"description\": null}", "{\"description\": \"t\"}");
}

static void test_merge_lists_concatenate(void **state)
{
    (void)state;
    expect_merge("{\"labels\": [\"a\", \"b\"]}", "{\"labels\": [\"c\"]}",
                 "{\"labels\": [\"a\", \"b\", \"c\"]}");
    expect_merge("{\"environment\": {\"environment_variables\": [\"A=1\"]}}",
                 "{\"environment\": {\"environment_variables\": [\"A=2\"]}}",
                 "{\"environment\": {\"environment_variables\": [\"A=1\", \"A=2\"]}}");
}

static void test_merge_bind_mounts_by_container_path(void **state)
{
    (void)state;
    expect_merge("{\"bind_mounts\": [{\"host_path\": \"/t1\", \"container_path\": \"/data\"},"
                 " {\"host_path\": \"/t2\", \"container_path\": \"/cache\"}]}",
                 "{\"bind_mounts\": [{\"host_path\": \"/c1\", \"container_path\": \"/data\"}]}",
                 "{\"bind_mounts\": [{\"host_path\": \"/t2\", \"container_path\": \"/cache\"},"
                 " {\"host_path\": \"/c1\", \"container_path\": \"/data\"}]}");
}

static void test_merge_devices_by_container_path(void **state)
{
    (void)state;
    expect_merge("{\"resources\": {\"devices\": [{\"host_path\": \"/dev/a\", \"container_path\": "
                 "\"/dev/x\"}, {\"host_path\": \"/dev/b\", \"container_path\": \"/dev/b\"}]}}",
                 "{\"resources\": {\"devices\": [{\"host_path\": \"/dev/c\", "
                 "\"container_path\": \"/dev/x\"}]}}",
                 "{\"resources\": {\"devices\": [{\"host_path\": \"/dev/b\", \"container_path\": "
                 "\"/dev/b\"}, {\"host_path\": \"/dev/c\", \"container_path\": \"/dev/x\"}]}}");
    /* Elsewhere a container_path key means nothing special: plain concatenation. */
    expect_merge("{\"data\": {\"l\": [{\"container_path\": \"/x\"}]}}",
                 "{\"data\": {\"l\": [{\"container_path\": \"/x\"}]}}",
                 "{\"data\": {\"l\": [{\"container_path\": \"/x\"}, {\"container_path\": "
                 "\"/x\"}]}}");
}

static void test_merge_objects_recursive(void **state)
{
    (void)state;
    expect_merge("{\"resources\": {\"slots_per_trial\": 1, \"resource_pool\": \"p\"},"
                 " \"searcher\": {\"name\": \"single\", \"metric\": \"loss\"}}",
                 "{\"resources\": {\"slots_per_trial\": 4}, \"searcher\": {\"max_length\": 10}}",
                 "{\"resources\": {\"slots_per_trial\": 4, \"resource_pool\": \"p\"},"
                 " \"searcher\": {\"name\": \"single\", \"metric\": \"loss\", \"max_length\": "
                 "10}}");
    json_t *out = NULL;
    assert_int_equal(kd_config_merge_template(NULL, NULL, &out, NULL), KD_EINVAL);
}

static void test_load_with_template(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    json_t *cfg = NULL;
    assert_int_equal(
        kd_config_load(DATA "/good/bind_mounts.yaml", DATA "/templates/base.yaml", &cfg, err), 0);
    /* Template-only fields arrive; the config's /data mount replaces the template's. */
    assert_string_equal(json_string_value(json_object_get(cfg, "description")),
                        "from the template");
    json_t *bm = json_object_get(cfg, "bind_mounts");
    assert_int_equal(json_array_size(bm), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(bm, 0), "container_path")),
                        "/cache");
    assert_string_equal(json_string_value(json_object_get(json_array_get(bm, 1), "host_path")),
                        "/mnt/datasets");
    json_t *dev = json_object_get(json_object_get(cfg, "resources"), "devices");
    assert_int_equal(json_array_size(dev), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(cfg, "resources"), "resource_pool")),
        "shared");
    /* The result is the caller's own tree. */
    json_object_set_new(cfg, "name", json_string("changed"));
    json_decref(cfg);

    /* Errors: a missing template file is named. */
    assert_int_equal(
        kd_config_load(DATA "/good/bind_mounts.yaml", DATA "/templates/none.yaml", &cfg, err), -2);
    assert_non_null(strstr(err, "templates/none.yaml: No such file"));
    assert_null(cfg);
}

/* The merged config has a byte budget: two halves under it that together pass it fail. */
static void test_merge_byte_budget(void **state)
{
    (void)state;
    size_t half = KD_CONFIG_MAX_BYTES / 2 + 16;
    char *big = malloc(half + 1);
    assert_non_null(big);
    memset(big, 'x', half);
    big[half] = '\0';
    json_t *t = json_pack("{s:s}", "description", big);
    json_t *c = json_pack("{s:{s:s}}", "environment", "image", big);
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_config_merge_template(t, c, &out, err), KD_ETOOBIG);
    assert_null(out);
    assert_non_null(strstr(err, "template merge: the config merged over its template expands to "
                                "more than 16777216 bytes"));
    /* Either half alone merges. */
    json_t *e = json_object();
    assert_int_equal(kd_config_merge_template(t, e, &out, err), 0);
    json_decref(out);
    json_decref(e);
    json_decref(t);
    json_decref(c);
    free(big);
}

/* `det experiment create --template FILE` loads through kd_config_load: a template that
 * aliases one long string many times fails with the byte budget's error naming the file. */
static void test_load_template_alias_bomb(void **state)
{
    (void)state;
    char path[] = "/tmp/kd-config-bomb-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("description: &a \"", f);
    for (int i = 0; i < 200000; i++)
        fputc('x', f);
    fputs("\"\nbind_mounts: [", f);
    for (int i = 0; i < 100000; i++)
        fputs(i ? ",*a" : "*a", f);
    fputs("]\n", f);
    assert_int_equal(fclose(f), 0);
    char err[KD_ERRLEN] = "";
    json_t *cfg = NULL;
    assert_int_equal(kd_config_load(DATA "/good/bind_mounts.yaml", path, &cfg, err), KD_ETOOBIG);
    assert_null(cfg);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "expands to more than 16777216 bytes (alias *a of 200001 bytes"));
    unlink(path);
}

/*
 * Every integer field of the config (and so of an Experiment's spec) refuses a number that
 * is not an integer, huge or fractional, with an error naming the field: such a value in a
 * CR arrives as a JSON real (1e300 has no int64 form).
 */
static void test_integer_fields_refuse_reals(void **state)
{
    (void)state;
    static const char *const base =
        "{\"entrypoint\": \"python3 train.py\", \"searcher\": {\"name\": \"random\", \"metric\": "
        "\"loss\", \"max_trials\": 4, \"max_length\": {\"batches\": 10}}}";
    static const struct {
        const char *patch; /* merged into base */
        const char *path;  /* named in the error */
    } cases[] = {
        {"{\"max_restarts\": 1e300}", "max_restarts"},
        {"{\"max_restarts\": 2.5}", "max_restarts"},
        {"{\"searcher\": {\"max_trials\": 1e300}}", "searcher.max_trials"},
        {"{\"searcher\": {\"max_trials\": 4.0}}", "searcher.max_trials"},
        {"{\"searcher\": {\"max_length\": {\"batches\": 1e300}}}", "searcher.max_length"},
        {"{\"searcher\": {\"max_length\": {\"batches\": 0.5}}}", "searcher.max_length"},
        {"{\"searcher\": {\"max_concurrent_trials\": -1e300}}", "searcher.max_concurrent_trials"},
        {"{\"resources\": {\"slots_per_trial\": 1e300}}", "resources.slots_per_trial"},
        {"{\"resources\": {\"priority\": 1.5}}", "resources.priority"},
        {"{\"records_per_epoch\": 1e19}", "records_per_epoch"},
        {"{\"scheduling_unit\": 1e300}", "scheduling_unit"},
        {"{\"min_validation_period\": {\"batches\": 1e300}}", "min_validation_period"},
        {"{\"min_checkpoint_period\": {\"batches\": 2.5}}", "min_checkpoint_period"},
        {"{\"checkpoint_storage\": {\"type\": \"shared_fs\", \"host_path\": \"/c\", "
         "\"save_trial_latest\": 1e300}}",
         "checkpoint_storage.save_trial_latest"},
        {"{\"reproducibility\": {\"experiment_seed\": 1e300}}", "reproducibility.experiment_seed"},
        {"{\"reproducibility\": {\"experiment_seed\": 4294967296}}",
         "reproducibility.experiment_seed"},
        {"{\"environment\": {\"ports\": {\"p\": 1e300}}}", "environment.ports"},
        {"{\"hyperparameters\": {\"n\": {\"type\": \"int\", \"minval\": 1, \"maxval\": 1e300}}}",
         "hyperparameters.n.maxval"},
        {"{\"hyperparameters\": {\"global_batch_size\": 1e300}}",
         "hyperparameters.global_batch_size"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *cfg = json_loads(base, 0, NULL), *patch = json_loads(cases[i].patch, 0, NULL);
        assert_non_null(cfg);
        assert_non_null(patch);
        const char *k;
        json_t *v;
        json_object_foreach(patch, k, v)
        {
            json_t *cur = json_object_get(cfg, k);
            if (json_is_object(cur) && json_is_object(v))
                json_object_update(cur, v);
            else
                json_object_set(cfg, k, v);
        }
        char err[KD_ERRLEN] = "";
        int rc = kd_config_check(cfg, err);
        if (rc != KD_EINVALID || strncmp(err, cases[i].path, strlen(cases[i].path)) != 0)
            fail_msg("%s: rc %d, err \"%s\" (want an error naming %s)", cases[i].patch, rc, err,
                     cases[i].path);
        json_decref(patch);
        json_decref(cfg);
    }
}

static void test_load_errors(void **state)
{
    (void)state;
    char err[KD_ERRLEN] = "";
    json_t *cfg = NULL;
    char path[] = "/tmp/kd-config-empty-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(kd_config_load(path, NULL, &cfg, err), KD_EINVALID);
    assert_non_null(strstr(err, "is empty"));
    unlink(path);
    assert_int_equal(kd_config_load(DATA "/nope.yaml", NULL, &cfg, err), -2);
    assert_int_equal(kd_config_load(NULL, NULL, &cfg, err), KD_EINVAL);
}

int main(void)
{
#ifndef KD_SANITIZE
    /* A regression of the byte budgets fails on a failed allocation, not by taking the
     * machine's memory (ASan reserves terabytes of address space, so not there). */
    struct rlimit rl = {.rlim_cur = 2ul << 30, .rlim_max = 2ul << 30};
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 1;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_good_configs),
        cmocka_unit_test(test_determined_038),
        cmocka_unit_test(test_check_partial_storage),
        cmocka_unit_test(test_load_keeps_user_values_only),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_check_json_paths),
        cmocka_unit_test(test_entrypoint_forms),
        cmocka_unit_test(test_launch_argv),
        cmocka_unit_test(test_merge_scalar_override),
        cmocka_unit_test(test_merge_lists_concatenate),
        cmocka_unit_test(test_merge_bind_mounts_by_container_path),
        cmocka_unit_test(test_merge_devices_by_container_path),
        cmocka_unit_test(test_merge_objects_recursive),
        cmocka_unit_test(test_load_with_template),
        cmocka_unit_test(test_merge_byte_budget),
        cmocka_unit_test(test_integer_fields_refuse_reals),
        cmocka_unit_test(test_load_template_alias_bomb),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
