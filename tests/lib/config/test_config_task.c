/*
 * Task configs (lib/config/task.c): every bad config under
 * tests/data/config/task/bad fails with the position, path and message of
 * its `# expect:` line for the kind of its `# kind:` line; the good ones
 * load, take their kind's defaults and re-validate as JSON; durations,
 * templates and the JSON form (a Task's spec.config) case by case.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/task.h"
#include "core/str.h"

#define DATA "tests/data/config/task"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .yaml names of dir, sorted (at most 256); returns how many. */
static size_t list_yaml(const char *dir, char **names)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL && n < 256)
        if (kd_str_has_suffix(e->d_name, ".yaml"))
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_str);
    return n;
}

/* The `# kind: K` and `# expect: ...` header lines. */
static void header(const char *path, enum kd_task_kind *kind, char *expect, size_t len)
{
    char line[1024];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    expect[0] = '\0';
    assert_non_null(fgets(line, sizeof(line), f));
    line[strcspn(line, "\n")] = '\0';
    if (!kd_str_has_prefix(line, "# kind: ") || kd_task_kind_parse(line + 8, kind) != 0)
        fail_msg("%s: the first line must be `# kind: notebook|command|shell|tensorboard`", path);
    if (fgets(line, sizeof(line), f) != NULL && kd_str_has_prefix(line, "# expect: ")) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(expect, len, "%s", line + 10);
    }
    fclose(f);
}

static void test_bad(void **state)
{
    (void)state;
    char *names[256];
    size_t n = list_yaml(DATA "/bad", names);
    int failures = 0;
    assert_true(n >= 10);
    for (size_t i = 0; i < n; i++) {
        char path[512], expect[1024], want[1600], err[KD_ERRLEN] = "";
        enum kd_task_kind kind;
        json_t *cfg = NULL;
        snprintf(path, sizeof(path), DATA "/bad/%s", names[i]);
        header(path, &kind, expect, sizeof(expect));
        if (expect[0] == '\0')
            fail_msg("%s: no `# expect:` line", path);
        snprintf(want, sizeof(want), "%s:%s", path, expect);
        int rc = kd_task_config_load(kind, path, NULL, NULL, &cfg, err);
        if (rc != KD_EINVALID || strcmp(err, want) != 0) {
            print_error("%s: rc=%d\n got: %s\nwant: %s\n", path, rc, err, want);
            failures++;
        }
        assert_null(cfg);
        free(names[i]);
    }
    assert_int_equal(failures, 0);
}

static void test_good(void **state)
{
    (void)state;
    char *names[256];
    size_t n = list_yaml(DATA "/good", names);
    assert_true(n >= 4);
    for (size_t i = 0; i < n; i++) {
        char path[512], expect[16], err[KD_ERRLEN] = "";
        enum kd_task_kind kind;
        json_t *cfg = NULL;
        snprintf(path, sizeof(path), DATA "/good/%s", names[i]);
        header(path, &kind, expect, sizeof(expect));
        if (kd_task_config_load(kind, path, NULL, NULL, &cfg, err) != 0)
            fail_msg("%s: %s", path, err);
        assert_int_equal(kd_task_config_apply_defaults(kind, cfg, err), 0);
        if (kd_task_config_check(kind, cfg, err) != 0)
            fail_msg("%s with defaults: %s", path, err);
        assert_true(json_is_integer(json_object_get(json_object_get(cfg, "resources"), "slots")));
        json_decref(cfg);
        free(names[i]);
    }
}

static void test_defaults(void **state)
{
    (void)state;
    static const struct {
        enum kd_task_kind kind;
        int slots;
        const char *idle_type;
    } rows[] = {
        {KD_TASK_NOTEBOOK, 1, "kernels_or_terminals"},
        {KD_TASK_COMMAND, 1, NULL},
        {KD_TASK_SHELL, 1, NULL},
        {KD_TASK_TENSORBOARD, 0, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *cfg = json_object();
        assert_int_equal(kd_task_config_slots(rows[i].kind, cfg), rows[i].slots);
        assert_int_equal(kd_task_config_apply_defaults(rows[i].kind, cfg, NULL), 0);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(cfg, "resources"), "slots")),
            rows[i].slots);
        const char *it = json_string_value(json_object_get(cfg, "notebook_idle_type"));
        if (rows[i].idle_type != NULL)
            assert_string_equal(it, rows[i].idle_type);
        else
            assert_null(it);
        json_decref(cfg);
    }
    /* What the user set stays. */
    json_t *cfg = json_pack("{s:{s:i}}", "resources", "slots", 3);
    assert_int_equal(kd_task_config_apply_defaults(KD_TASK_TENSORBOARD, cfg, NULL), 0);
    assert_int_equal(kd_task_config_slots(KD_TASK_TENSORBOARD, cfg), 3);
    json_decref(cfg);
}

static void test_duration(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t ms; /* -1: refused */
    } rows[] = {
        {"30m", 1800000},
        {"1h", 3600000},
        {"1h30m", 5400000},
        {"45s", 45000},
        {"500ms", 500},
        {"1.5h", 5400000},
        {"600", 600000},
        {"2h0m10s", 7210000},
        {"720h", 720LL * 3600000},
        {"721h", -1},
        {"", -1},
        {"m", -1},
        {"10", 10000},
        {"10x", -1},
        {"-5m", -1},
        {"0s", -1},
        {"half an hour", -1},
        {"5 m", -1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t ms = -7;
        int rc = kd_task_duration_parse(rows[i].s, &ms);
        if (rows[i].ms < 0) {
            if (rc == 0)
                fail_msg("\"%s\": accepted as %lld ms", rows[i].s, (long long)ms);
        } else if (rc != 0 || ms != rows[i].ms) {
            fail_msg("\"%s\": rc=%d ms=%lld, want %lld", rows[i].s, rc, (long long)ms,
                     (long long)rows[i].ms);
        }
    }
    assert_int_equal(kd_task_duration_parse(NULL, NULL), KD_EINVAL);
}

static void test_kinds(void **state)
{
    (void)state;
    enum kd_task_kind k;
    for (int i = KD_TASK_NOTEBOOK; i <= KD_TASK_TENSORBOARD; i++) {
        assert_int_equal(kd_task_kind_parse(kd_task_kind_name((enum kd_task_kind)i), &k), 0);
        assert_int_equal(k, i);
    }
    assert_int_equal(kd_task_kind_parse("lab", &k), KD_EINVAL);
    assert_int_equal(kd_task_kind_parse(NULL, &k), KD_EINVAL);
}

/* A Task's spec.config is checked as JSON: the path, no position. */
static void test_json(void **state)
{
    (void)state;
    static const struct {
        enum kd_task_kind kind;
        const char *cfg;
        const char *want; /* NULL: valid */
    } rows[] = {
        {KD_TASK_COMMAND, "{\"entrypoint\":\"true\",\"resources\":{\"slots\":-1}}",
         "resources.slots: expected an integer from 0 to 1048576, got -1"},
        {KD_TASK_COMMAND, "{\"entrypoint\":\"model_def:Trial\"}",
         "entrypoint: model_def:Class is a trial class; a command runs a program (e.g. \"python3 "
         "prep.py\")"},
        {KD_TASK_COMMAND, "{\"entrypoint\":\"echo 'unterminated\"}", "entrypoint: "},
        {KD_TASK_COMMAND, "{\"entrypoint\":[]}",
         "entrypoint: expected a command (a string or a list of strings), got a list"},
        {KD_TASK_NOTEBOOK, "{\"resources\":{\"weight\":0}}",
         "resources.weight: expected a number greater than 0, got 0"},
        {KD_TASK_NOTEBOOK, "{\"idle_timeout\":1800}",
         "idle_timeout: expected a duration such as \"30m\", \"1h\" or \"1h30m\" (at most 30 "
         "days), got 1800"},
        {KD_TASK_SHELL, "{\"resources\":{\"is_single_node\":true}}",
         "resources.is_single_node: is an experiment field; a task always runs in one pod on one "
         "node"},
        {KD_TASK_NOTEBOOK,
         "{\"resources\":{\"shm_size\":\"1Gi\"},\"bind_mounts\":[{\"host_path\":\"/x\","
         "\"container_path\":\"/dev/shm\"}]}",
         "bind_mounts[0].container_path: /dev/shm is where kdet mounts the shared memory of "
         "resources.shm_size; set one of them"},
        {KD_TASK_TENSORBOARD, "{\"environment\":{\"image\":\"tb:1\"},\"idle_timeout\":\"5m\"}",
         NULL},
        {KD_TASK_COMMAND, "[]",
         "(top level): the task config must be a mapping of fields, got a list"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char err[KD_ERRLEN] = "";
        json_t *cfg = json_loads(rows[i].cfg, 0, NULL);
        assert_non_null(cfg);
        int rc = kd_task_config_check(rows[i].kind, cfg, err);
        if (rows[i].want == NULL) {
            if (rc != 0)
                fail_msg("row %zu: %s", i, err);
        } else if (rc != KD_EINVALID || !kd_str_has_prefix(err, rows[i].want)) {
            fail_msg("row %zu: rc=%d\n got: %s\nwant: %s", i, rc, err, rows[i].want);
        }
        json_decref(cfg);
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Templates merge as for experiments; an error inside the template names the template. */
static void test_template(void **state)
{
    (void)state;
    char dir[] = "/tmp/kd-task-tmpl.XXXXXX", cfgp[128], tp[128], bad[128], err[KD_ERRLEN] = "";
    json_t *cfg = NULL;
    assert_non_null(mkdtemp(dir));
    snprintf(cfgp, sizeof(cfgp), "%s/nb.yaml", dir);
    snprintf(tp, sizeof(tp), "%s/tmpl.yaml", dir);
    snprintf(bad, sizeof(bad), "%s/bad.yaml", dir);
    write_file(cfgp, "resources:\n  slots: 2\nbind_mounts:\n  - {host_path: /b, container_path: "
                     "/data}\n");
    write_file(tp, "resources:\n  priority: 20\n  slots: 1\nbind_mounts:\n  - {host_path: /a, "
                   "container_path: /data}\n  - {host_path: /c, container_path: /c}\n");
    write_file(bad, "resources:\n  slotz: 1\n");
    assert_int_equal(kd_task_config_load(KD_TASK_NOTEBOOK, cfgp, tp, NULL, &cfg, err), 0);
    json_t *r = json_object_get(cfg, "resources");
    assert_int_equal(json_integer_value(json_object_get(r, "slots")), 2);
    assert_int_equal(json_integer_value(json_object_get(r, "priority")), 20);
    json_t *bm = json_object_get(cfg, "bind_mounts");
    assert_int_equal(json_array_size(bm), 2); /* the template's /data is replaced */
    json_decref(cfg);
    cfg = NULL;
    assert_int_equal(kd_task_config_load(KD_TASK_NOTEBOOK, cfgp, bad, NULL, &cfg, err),
                     KD_EINVALID);
    char want[256];
    snprintf(want, sizeof(want),
             "%s:2:3: resources.slotz: unknown field of resources; did you "
             "mean `slots`?",
             bad);
    assert_string_equal(err, want);
    /* No file at all: an empty config. */
    assert_int_equal(kd_task_config_load(KD_TASK_SHELL, NULL, NULL, NULL, &cfg, err), 0);
    assert_int_equal(json_object_size(cfg), 0);
    json_decref(cfg);
    /* The command line's fields go over the file's, then the whole is checked. */
    json_t *over = json_pack("{s:s}", "entrypoint", "python3 prep.py");
    assert_int_equal(kd_task_config_load(KD_TASK_COMMAND, NULL, NULL, over, &cfg, err), 0);
    assert_string_equal(json_string_value(json_object_get(cfg, "entrypoint")), "python3 prep.py");
    json_decref(cfg);
    assert_int_equal(kd_task_config_load(KD_TASK_COMMAND, NULL, NULL, NULL, &cfg, err),
                     KD_EINVALID);
    assert_string_equal(err, "entrypoint: required field is missing (the command to run)");
    json_object_set_new(over, "entrypoint", json_string("model_def:Trial"));
    assert_int_equal(kd_task_config_load(KD_TASK_COMMAND, cfgp, NULL, over, &cfg, err),
                     KD_EINVALID);
    json_decref(over);
    unlink(cfgp);
    unlink(tp);
    unlink(bad);
    rmdir(dir);
}

static void test_idle_ms(void **state)
{
    (void)state;
    json_t *cfg = json_pack("{s:s}", "idle_timeout", "2m");
    assert_int_equal(kd_task_config_idle_ms(cfg), 120000);
    json_object_set_new(cfg, "idle_timeout", json_string("soon"));
    assert_int_equal(kd_task_config_idle_ms(cfg), 0);
    json_object_del(cfg, "idle_timeout");
    assert_int_equal(kd_task_config_idle_ms(cfg), 0);
    json_decref(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad),      cmocka_unit_test(test_good),
        cmocka_unit_test(test_defaults), cmocka_unit_test(test_duration),
        cmocka_unit_test(test_kinds),    cmocka_unit_test(test_json),
        cmocka_unit_test(test_template), cmocka_unit_test(test_idle_ms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
