/*
 * Task configs (see task.h): the fields Determined's notebook, command,
 * shell and TensorBoard configs have, checked with the same field checks
 * and messages as experiment configs (check.h), so a typo in a task config
 * reads like one in an experiment config.
 */
#include "config/task.h"
#include "config/check.h"
#include "config/config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "yaml/yaml.h"

static const char *const kind_names[] = {"notebook", "command", "shell", "tensorboard"};

const char *kd_task_kind_name(enum kd_task_kind k)
{
    return (size_t)k < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[k] : "unknown";
}

int kd_task_kind_parse(const char *s, enum kd_task_kind *out)
{
    for (size_t i = 0; s != NULL && i < sizeof(kind_names) / sizeof(kind_names[0]); i++) {
        if (strcmp(s, kind_names[i]) == 0) {
            *out = (enum kd_task_kind)i;
            return 0;
        }
    }
    return KD_EINVAL;
}

int kd_task_duration_parse(const char *s, int64_t *ms)
{
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    double total = 0;
    const char *p = s;
    char *end = NULL;
    if (s == NULL || *s == '\0' || strlen(s) > 64)
        return KD_EINVAL;
    if (strspn(s, "0123456789") == strlen(s)) { /* bare seconds */
        total = strtod(s, NULL) * 1000;
        p = s + strlen(s);
    }
    while (*p != '\0') {
        if (!((*p >= '0' && *p <= '9') || *p == '.'))
            return KD_EINVAL;
        double v = strtod(p, &end);
        if (end == p)
            return KD_EINVAL;
        p = end;
        bool found = false;
        /* "ms" before "m": the longest unit that matches. */
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && !found; i++) {
            size_t n = strlen(units[i].unit);
            if (strncmp(p, units[i].unit, n) == 0 &&
                !(n == 1 && units[i].unit[0] == 'm' && p[1] == 's')) {
                total += v * units[i].ms;
                p += n;
                found = true;
            }
        }
        if (!found)
            return KD_EINVAL;
    }
    if (!(total >= 1) || total > (double)KD_TASK_IDLE_MAX_MS)
        return KD_EINVAL;
    *ms = (int64_t)llround(total);
    return 0;
}

/* ---- checks ------------------------------------------------------------------------------ */

static int check_entrypoint(struct kd_config_vctx *c, enum kd_task_kind kind, const json_t *cfg)
{
    char p[PATHLEN], d[96], why[KD_ERRLEN] = "";
    json_t *ep = kd_config__field(cfg, "entrypoint");
    char **argv = NULL;
    int argc = 0;
    if (kind != KD_TASK_COMMAND) {
        if (ep != NULL)
            return BADKEY(c, ep, "entrypoint",
                          "a %s task runs %s itself; entrypoint is for commands (det cmd run)",
                          kd_task_kind_name(kind),
                          kind == KD_TASK_NOTEBOOK ? "Jupyter"
                          : kind == KD_TASK_SHELL  ? "sshd"
                                                   : "TensorBoard");
        return 0;
    }
    if (ep == NULL)
        return kd_config__need(c, cfg, "", "entrypoint", "(the command to run)");
    if (json_is_string(ep)) {
        if (json_string_value(ep)[0] == '\0')
            return BAD(c, ep, "entrypoint", "must not be empty");
    } else if (json_is_array(ep) && json_array_size(ep) > 0) {
        size_t i;
        json_t *w;
        json_array_foreach(ep, i, w)
        {
            kd_config__joinidx(p, "entrypoint", i);
            if (!json_is_string(w))
                return BAD(c, w, p, "expected a string, got %s", kd_config__desc(w, d, sizeof(d)));
        }
    } else {
        return BAD(c, ep, "entrypoint",
                   "expected a command (a string or a list of strings), got %s",
                   kd_config__desc(ep, d, sizeof(d)));
    }
    if (kd_config_launch_argv(ep, &argv, &argc, why) != 0)
        return BAD(c, ep, "entrypoint", "%s",
                   kd_str_has_prefix(why, "entrypoint: ") ? why + 12 : why);
    bool legacy = argc > 0 && strcmp(argv[0], "--trial") == 0;
    kd_config_argv_free(argv);
    if (legacy)
        return BAD(c, ep, "entrypoint",
                   "model_def:Class is a trial class; a command runs a program (e.g. \"python3 "
                   "prep.py\")");
    return 0;
}

static int check_resources(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const keys[] = {"slots",    "weight",  "priority", "resource_pool",
                                       "shm_size", "devices", NULL};
    static const struct kd_config_unsupported unsup[] = {
        {"slots_per_trial", "is an experiment field; a task asks for resources.slots"},
        {"max_slots", "is an experiment field (the slots all of its trials hold); a task holds "
                      "resources.slots"},
        {"is_single_node", "is an experiment field; a task always runs in one pod on one node"},
        {"agent_label", "was removed from Determined (0.20) and is not supported; use "
                        "resource_pool"},
        {NULL, NULL}};
    const char *rp = "resources";
    json_t *r = kd_config__field(cfg, "resources");
    if (r == NULL)
        return 0;
    if (kd_config__want_object(c, r, rp) ||
        kd_config__check_keys(c, r, rp, keys, unsup, "resources") ||
        kd_config__want_int(c, r, rp, "slots", false, 0, 1 << 20, NULL) ||
        kd_config__want_num(c, r, rp, "weight", false, 0, true, HUGE_VAL, false,
                            "a number greater than 0", NULL) ||
        kd_config__want_int(c, r, rp, "priority", false, 1, 99, NULL) ||
        kd_config__want_str(c, r, rp, "resource_pool", false, NULL))
        return c->rc;
    if (kd_config__check_shm_size(c, r))
        return c->rc;
    return kd_config__check_mounts(c, kd_config__field(r, "devices"), "resources.devices", true);
}

static int check_idle(struct kd_config_vctx *c, enum kd_task_kind kind, const json_t *cfg)
{
    static const char *const idle_types[] = {"kernels_or_terminals", "kernel_connections",
                                             "activity", NULL};
    char d[96];
    int64_t ms;
    json_t *it = kd_config__field(cfg, "idle_timeout");
    json_t *nit = kd_config__field(cfg, "notebook_idle_type");
    if (it != NULL && kind == KD_TASK_COMMAND)
        return BADKEY(c, it, "idle_timeout",
                      "a command ends when its process ends; idle_timeout applies to notebooks, "
                      "shells and TensorBoards");
    if (it != NULL &&
        !(json_is_string(it) && kd_task_duration_parse(json_string_value(it), &ms) == 0))
        return BAD(c, it, "idle_timeout",
                   "expected a duration such as \"30m\", \"1h\" or \"1h30m\" (at most 30 days), "
                   "got %s",
                   kd_config__desc(it, d, sizeof(d)));
    if (nit != NULL && kind != KD_TASK_NOTEBOOK)
        return BADKEY(c, nit, "notebook_idle_type", "applies to notebooks only");
    return kd_config__want_enum(c, cfg, "", "notebook_idle_type", false, idle_types, NULL);
}

static int validate(struct kd_config_vctx *c, enum kd_task_kind kind, const json_t *cfg)
{
    static const char *const keys[] = {"description", "environment",  "resources",
                                       "bind_mounts", "idle_timeout", "notebook_idle_type",
                                       "work_dir",    "entrypoint",   "debug",
                                       "workspace",   "project",      NULL};
    static const struct kd_config_unsupported unsup[] = {
        {"searcher", "is an experiment field; a task runs one process (det experiment create "
                     "runs searches)"},
        {"hyperparameters", "is an experiment field; a task has none (pass values in "
                            "environment.environment_variables)"},
        {"checkpoint_storage", "is an experiment field; a TensorBoard reads each experiment's own "
                               "checkpoint_storage"},
        {"max_restarts", "is an experiment field; kdet does not restart tasks"},
        {"slurm", "not applicable on kdet: tasks run as Kubernetes pods"},
        {"pbs", "not applicable on kdet: tasks run as Kubernetes pods"},
        {NULL, NULL}};
    char d[96];
    if (!json_is_object(cfg))
        return BAD(c, cfg, "", "the task config must be a mapping of fields, got %s",
                   kd_config__desc(cfg, d, sizeof(d)));
    if (kd_config__check_keys(c, cfg, "", keys, unsup, NULL) ||
        kd_config__want_str(c, cfg, "", "description", false, NULL) ||
        kd_config__want_str(c, cfg, "", "workspace", false, NULL) ||
        kd_config__want_str(c, cfg, "", "project", false, NULL) ||
        kd_config__want_bool(c, cfg, "", "debug") || check_resources(c, cfg) ||
        check_entrypoint(c, kind, cfg) || check_idle(c, kind, cfg) ||
        kd_config__want_abs_path(c, cfg, "", "work_dir", false) ||
        kd_config__check_environment(c, cfg) ||
        kd_config__check_mounts(c, kd_config__field(cfg, "bind_mounts"), "bind_mounts", false) ||
        kd_config__check_mount_clashes(c, cfg))
        return c->rc;
    return 0;
}

int kd_task_config_check(enum kd_task_kind kind, const json_t *cfg, char *err)
{
    struct kd_config_vctx c;
    memset(&c, 0, sizeof(c));
    c.err = err;
    if (cfg == NULL)
        return kd_seterr(err, KD_EINVAL, "kd_task_config_check: no config");
    return validate(&c, kind, cfg);
}

/* ---- loading ------------------------------------------------------------------------------ */

/* The document's root: a mapping, or (an empty file) an empty config. *root a new reference. */
static int root_of(const struct kd_yaml_doc *doc, const char *what, json_t **root, char *err)
{
    json_t *r = kd_yaml_root(doc);
    char d[96];
    int line = 1, col = 1;
    if (json_is_object(r)) {
        *root = json_incref(r);
        return 0;
    }
    if (json_is_null(r)) {
        *root = json_object();
        return 0;
    }
    if (kd_yaml_where(doc, "", &line, &col))
        line = col = 1;
    return kd_seterr(err, KD_EINVALID, "%s:%d:%d: the %s must be a mapping of fields, got %s",
                     kd_yaml_name(doc), line, col, what, kd_config__desc(r, d, sizeof(d)));
}

int kd_task_config_load(enum kd_task_kind kind, const char *path, const char *template_path,
                        const json_t *over, json_t **out, char *err)
{
    struct kd_yaml_doc *doc = NULL, *tdoc = NULL;
    json_t *root = NULL, *troot = NULL, *merged = NULL;
    struct kd_config_vctx c;
    int rc = 0;
    if (out == NULL) {
        rc = kd_seterr(err, KD_EINVAL, "kd_task_config_load: invalid arguments");
        goto out;
    }
    *out = NULL;
    if (path != NULL) {
        if ((rc = kd_yaml_parse_file(path, &doc, err)) != 0 ||
            (rc = root_of(doc, "task config", &root, err)) != 0)
            goto out;
    } else {
        root = json_object();
    }
    if (template_path != NULL) {
        if ((rc = kd_yaml_parse_file(template_path, &tdoc, err)) != 0 ||
            (rc = root_of(tdoc, "template", &troot, err)) != 0 ||
            (rc = kd_config_merge_template(troot, root, &merged, err)) != 0)
            goto out;
    } else {
        merged = json_incref(root);
    }
    if (over != NULL && json_object_size(over) > 0) {
        json_t *copy = json_deep_copy(merged);
        if (copy == NULL || json_object_update(copy, (json_t *)over) != 0)
            kd_oom(64);
        json_decref(merged);
        merged = copy;
    }
    memset(&c, 0, sizeof(c));
    c.err = err;
    c.docs[0] = doc;
    c.docs[1] = tdoc;
    if ((rc = validate(&c, kind, merged)) != 0)
        goto out;
    *out = json_deep_copy(merged);
    if (*out == NULL)
        kd_oom(64);
out:
    json_decref(merged);
    json_decref(root);
    json_decref(troot);
    kd_yaml_free(doc);
    kd_yaml_free(tdoc);
    return rc;
}

/* ---- defaults ------------------------------------------------------------------------------ */

int kd_task_config_apply_defaults(enum kd_task_kind kind, json_t *cfg, char *err)
{
    if (!json_is_object(cfg))
        return kd_seterr(err, KD_EINVALID, "the task config must be a mapping of fields");
    json_t *r = json_object_get(cfg, "resources");
    if (r == NULL || json_is_null(r)) {
        r = json_object();
        json_object_set_new(cfg, "resources", r);
    }
    if (!json_is_object(r))
        return kd_seterr(err, KD_EINVALID, "resources: expected a mapping of fields");
    json_t *s = json_object_get(r, "slots");
    if (s == NULL || json_is_null(s))
        json_object_set_new(r, "slots", json_integer(kd_task_config_slots(kind, cfg)));
    json_t *nit = json_object_get(cfg, "notebook_idle_type");
    if (kind == KD_TASK_NOTEBOOK && (nit == NULL || json_is_null(nit)))
        json_object_set_new(cfg, "notebook_idle_type", json_string("kernels_or_terminals"));
    return 0;
}

int kd_task_config_slots(enum kd_task_kind kind, const json_t *cfg)
{
    const json_t *s = json_object_get(json_object_get(cfg, "resources"), "slots");
    if (json_is_integer(s) && json_integer_value(s) >= 0 && json_integer_value(s) <= 1 << 20)
        return (int)json_integer_value(s);
    return kind == KD_TASK_TENSORBOARD ? 0 : 1;
}

int64_t kd_task_config_idle_ms(const json_t *cfg)
{
    int64_t ms = 0;
    const char *s = json_string_value(json_object_get(cfg, "idle_timeout"));
    if (s == NULL || kd_task_duration_parse(s, &ms) != 0)
        ms = 0;
    return ms;
}
