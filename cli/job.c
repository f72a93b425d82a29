/*
 * `det job list|update|update-batch` and `det experiment set gc-policy`:
 * the scheduler's queue as kdet-controller orders it (an experiment is a
 * job: its priority, then its position, which the kdet.io/ahead-of and
 * kdet.io/behind-of annotations move), and changes to it made as merge
 * patches of the Experiment resource, so kubectl sees and makes the same.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "core/time.h"
#include "config/task.h"
#include "k8s/jobupdate.h"

static const struct kd_k8s_gvr exp_gvr = KD_K8S_EXPERIMENTS;
static const struct kd_k8s_gvr trial_gvr = KD_K8S_TRIALS;
static const struct kd_k8s_gvr task_gvr = KD_K8S_TASKS;

/* Shared with kdet-controller's scheduler (controller/ctrl.h). */
#define AHEAD_OF KD_ANN_AHEAD_OF
#define BEHIND_OF KD_ANN_BEHIND_OF
#define DEFAULT_PRIORITY KD_QUEUE_DEFAULT_PRIORITY
#define KUBE_FLAGS "--namespace", "--kubeconfig", "--context"
/* A line of update-batch. */
#define BATCH_LINE_MAX 4096
#define BATCH_MAX_ARGS 16

static const char job_usage[] =
    "usage: det job VERB ...\n"
    "\n"
    "verbs:\n"
    "  list [-o table|json|yaml]          the queue: every experiment not yet ended, in the\n"
    "                                     order the scheduler admits them\n"
    "  update JOB --priority N | --ahead-of JOB | --behind-of JOB | --resource-pool POOL\n"
    "  update-batch [FILE]                one 'JOB --option value' per line (FILE or stdin;\n"
    "                                     '#' comments)\n"
    "\n"
    "A job is an experiment or a task (notebook, command, shell, TensorBoard); JOB is its ID\n"
    "(the resource name or a unique prefix of an experiment's, a task's name).\n"
    "The queue is ordered by priority (1-99, smaller first; 42 when unset), then by\n"
    "submission, which --ahead-of and --behind-of change. Updates patch the Experiment (a\n"
    "task's: spec.config.resources and the same annotations on the Task):\n"
    "  --priority N          spec.resources.priority\n"
    "  --ahead-of JOB        annotation kdet.io/ahead-of=JOB (and JOB's priority)\n"
    "  --behind-of JOB       annotation kdet.io/behind-of=JOB (and JOB's priority)\n"
    "  --resource-pool POOL  spec.resources.resource_pool\n"
    "Every verb takes -n/--namespace, --kubeconfig and --context.\n";

static const char gc_usage[] =
    "usage: det experiment set gc-policy ID [--save-experiment-best N] [--save-trial-best N]\n"
    "                                       [--save-trial-latest N] [-n NS]\n"
    "\n"
    "Change which checkpoints kdet-controller keeps (Determined's checkpoint GC policy):\n"
    "the fields of spec.checkpoint_storage of the same names. At least one is required.\n";

/* Append to the summary line of an update (truncated when full). */
static bool terminal(const char *s)
{
    return s &&
           (strcmp(s, "COMPLETED") == 0 || strcmp(s, "CANCELED") == 0 || strcmp(s, "ERROR") == 0);
}

static const char *annotation(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(det_get(obj, "metadata.annotations"), key));
}

/* The experiment's priority: spec.resources.priority, else its trials', else 42. */
static json_int_t priority_of(const json_t *exp, const json_t *trials)
{
    int64_t p = kd_queue_priority(exp);
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t)
    {
        if (p != 0)
            break;
        json_t *tp = det_get(t, "spec.resources.priority");
        if (json_is_integer(tp) && json_integer_value(tp) >= 1 && json_integer_value(tp) <= 99)
            p = json_integer_value(tp);
    }
    return p != 0 ? p : DEFAULT_PRIORITY;
}

static json_t *find_exp(const json_t *items, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(items, i, e)
    {
        if (strcmp(kd_k8s_meta_str(e, "name") ?: "", name) == 0)
            return e;
    }
    return NULL;
}

/* The experiment of that name among the listed ones (all of one namespace), for kd_queue_position.
 */
static json_t *lookup_listed(const char *ns, const char *name, void *ud)
{
    (void)ns;
    return json_incref(find_exp(ud, name));
}

struct job {
    json_t *exp, *trials; /* exp: an Experiment, or a Task (trials NULL) */
    bool task;
    json_int_t priority;
    double position;
};

static int by_queue(const void *pa, const void *pb)
{
    const struct job *a = pa, *b = pb;
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    if (a->position != b->position)
        return a->position < b->position ? -1 : 1;
    return strcmp(kd_k8s_meta_str(a->exp, "name") ?: "", kd_k8s_meta_str(b->exp, "name") ?: "");
}

/* The namespace's jobs in queue order, as JSON rows. Exit code. */
static int queue(struct det_kube *k, json_t **out)
{
    struct kd_k8s_status st = {0};
    json_t *exps = NULL, *trials = NULL, *tasks = NULL, *named = NULL;
    struct job *jobs = NULL;
    char err[KD_ERRLEN] = "";
    size_t n = 0, i, j;
    json_t *e, *t;
    int rc = DET_EXIT_OK, r;
    *out = json_array();
    r = kd_k8s_list_all(k->c, &exp_gvr, k->ns, NULL, &exps, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", &exp_gvr, "experiment", NULL);
        goto out;
    }
    r = kd_k8s_list_all(k->c, &trial_gvr, k->ns, NULL, &trials, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", &trial_gvr, "trial", NULL);
        goto out;
    }
    /* Tasks, where the Task resource is installed. */
    if (kd_k8s_list_all(k->c, &task_gvr, k->ns, NULL, &tasks, NULL, NULL) != 0)
        tasks = NULL;
    json_t *items = json_object_get(exps, "items");
    json_t *titems = json_object_get(tasks, "items");
    /* What ahead-of and behind-of may name: experiments, then tasks. */
    named = json_deep_copy(items);
    json_array_extend(named, titems != NULL ? titems : json_array());
    jobs = kd_xcalloc(json_array_size(items) + json_array_size(titems) + 1, sizeof(*jobs));
    json_array_foreach(items, i, e)
    {
        if (terminal(det_get_str(e, "status.state", NULL)))
            continue;
        struct job *jb = &jobs[n++];
        jb->exp = e;
        jb->trials = json_array();
        json_array_foreach(json_object_get(trials, "items"), j, t)
        {
            if (strcmp(det_get_str(t, "spec.experiment", ""), kd_k8s_meta_str(e, "name")) == 0)
                json_array_append(jb->trials, t);
        }
        jb->priority = priority_of(e, jb->trials);
        jb->position = kd_queue_position(e, lookup_listed, named);
    }
    json_array_foreach(titems, i, e)
    {
        if (strcmp(det_get_str(e, "status.state", ""), "TERMINATED") == 0)
            continue;
        struct job *jb = &jobs[n++];
        jb->exp = e;
        jb->task = true;
        jb->priority = priority_of(e, NULL);
        jb->position = kd_queue_position(e, lookup_listed, named);
    }
    qsort(jobs, n, sizeof(*jobs), by_queue);
    for (i = 0; i < n; i++) {
        if (jobs[i].task) {
            json_t *tc = det_get(jobs[i].exp, "spec.config");
            const char *kind = det_get_str(jobs[i].exp, "spec.kind", "");
            enum kd_task_kind tk = KD_TASK_COMMAND;
            int slots = kd_task_kind_parse(kind, &tk) == 0 ? kd_task_config_slots(tk, tc) : 0;
            const char *ts = det_get_str(jobs[i].exp, "status.state", "QUEUED");
            bool live = strcmp(ts, "QUEUED") != 0;
            json_t *row = json_pack(
                "{s:I,s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:s?,s:s?}", "position", (json_int_t)i + 1,
                "task", kd_k8s_meta_str(jobs[i].exp, "name"), "kind", kind, "name",
                det_get_str(jobs[i].exp, "spec.config.description", kind), "state", ts, "priority",
                jobs[i].priority, "slots", (json_int_t)(live ? slots : 0), "resource_pool",
                det_get_str(jobs[i].exp, "spec.config.resources.resource_pool", "default"),
                "ahead_of", annotation(jobs[i].exp, AHEAD_OF), "behind_of",
                annotation(jobs[i].exp, BEHIND_OF));
            json_object_set_new(row, "slots_requested", json_integer(slots));
            json_array_append_new(*out, row);
            continue;
        }
        json_int_t active = 0, total = (json_int_t)json_array_size(jobs[i].trials), slots = 0;
        const char *pool = det_get_str(jobs[i].exp, "spec.resources.resource_pool", NULL);
        json_array_foreach(jobs[i].trials, j, t)
        {
            const char *ts = det_get_str(t, "status.state", "");
            if (strcmp(ts, "ACTIVE") == 0 || strncmp(ts, "STOPPING_", 9) == 0) {
                active++;
                slots += json_integer_value(det_get(t, "spec.resources.slots"));
            }
            if (pool == NULL)
                pool = det_get_str(t, "spec.resources.resourcePool", NULL);
        }
        json_t *spt = det_get(jobs[i].exp, "spec.resources.slots_per_trial");
        json_t *row = json_pack(
            "{s:I,s:s,s:s,s:s,s:I,s:{s:I,s:I},s:I,s:I,s:s,s:s?,s:s?}", "position",
            (json_int_t)i + 1, "experiment", kd_k8s_meta_str(jobs[i].exp, "name"), "name",
            det_get_str(jobs[i].exp, "spec.name", ""), "state",
            det_get_str(jobs[i].exp, "status.state", "WAITING"), "priority", jobs[i].priority,
            "trials", "active", active, "total", total, "slots", slots, "slots_per_trial",
            json_is_integer(spt) ? json_integer_value(spt) : (json_int_t)1, "resource_pool",
            pool ? pool : "default", "ahead_of", annotation(jobs[i].exp, AHEAD_OF), "behind_of",
            annotation(jobs[i].exp, BEHIND_OF));
        json_array_append_new(*out, row);
    }
out:
    for (i = 0; jobs && i < n; i++)
        json_decref(jobs[i].trials);
    free(jobs);
    json_decref(exps);
    json_decref(trials);
    json_decref(tasks);
    json_decref(named);
    kd_k8s_status_free(&st);
    return rc;
}

static int cmd_list(int argc, char **argv)
{
    static const char *const flags[] = {"--output", KUBE_FLAGS, NULL};
    static const char *const pos[] = {NULL};
    static const struct det_verb_spec spec = {.cmd = "det job list",
                                              .usage = job_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .format = true,
                                              .kube = true};
    struct det_verb v = {0};
    json_t *jobs = NULL;
    struct det_table *t = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    rc = queue(&v.k, &jobs);
    if (rc != 0)
        goto out;
    if (v.fmt != DET_FMT_TABLE) {
        json_t *o = json_pack("{s:s,s:O}", "namespace", v.k.ns, "jobs", jobs);
        rc = det_print_obj(o, v.fmt);
        json_decref(o);
        goto out;
    }
    if (json_array_size(jobs) == 0) {
        fprintf(stderr, "det: no jobs in namespace \"%s\": every experiment and task has ended\n",
                v.k.ns);
        goto out;
    }
    t = det_table_new((const char *const[]){"POSITION", "ID", "NAME", "STATE", "PRIORITY", "TRIALS",
                                            "SLOTS", "POOL", NULL});
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j)
    {
        char p[16], prio[16], trials[48], slots[48];
        snprintf(p, sizeof(p), "%lld",
                 (long long)json_integer_value(json_object_get(j, "position")));
        snprintf(prio, sizeof(prio), "%lld",
                 (long long)json_integer_value(json_object_get(j, "priority")));
        bool task = json_object_get(j, "task") != NULL;
        if (task) {
            snprintf(trials, sizeof(trials), "- (%s)", det_get_str(j, "kind", ""));
            snprintf(slots, sizeof(slots), "%lld (of %lld)",
                     (long long)json_integer_value(json_object_get(j, "slots")),
                     (long long)json_integer_value(json_object_get(j, "slots_requested")));
        } else {
            snprintf(trials, sizeof(trials), "%lld/%lld active",
                     (long long)json_integer_value(det_get(j, "trials.active")),
                     (long long)json_integer_value(det_get(j, "trials.total")));
            snprintf(slots, sizeof(slots), "%lld (%lld per trial)",
                     (long long)json_integer_value(json_object_get(j, "slots")),
                     (long long)json_integer_value(json_object_get(j, "slots_per_trial")));
        }
        const char *row[] = {p,
                             det_get_str(j, task ? "task" : "experiment", ""),
                             det_get_str(j, "name", ""),
                             det_get_str(j, "state", ""),
                             prio,
                             trials,
                             slots,
                             det_get_str(j, "resource_pool", "")};
        det_table_row(t, row);
    }
    det_table_print(t);
out:
    det_table_free(t);
    json_decref(jobs);
    det_verb_end(&v);
    return rc;
}

/*
 * The job `id` names: a Task of exactly that name, else an Experiment (its
 * name or a unique prefix, as det_resolve). *name and *obj are the caller's;
 * *rc an exit code (errors printed). Returns whether it is a task.
 */
static bool job_resolve(struct det_kube *k, const char *id, char **name, json_t **obj, int *rc)
{
    *rc = 0;
    if (kd_k8s_get(k->c, &task_gvr, k->ns, id, obj, NULL, NULL) == 0) {
        *name = kd_xstrdup(id);
        return true;
    }
    *rc = det_resolve(k, &exp_gvr, "experiment", id, name, obj);
    return false;
}

/*
 * Apply one update (the options in u) to job `id`: one merge patch of the
 * Experiment. `where` prefixes messages ("" or "line 3: "). Exit code.
 */
static int update_one(struct det_kube *k, const char *id, const struct det_args *u,
                      const char *where)
{
    struct kd_k8s_status st = {0};
    json_t *exp = NULL, *other = NULL, *patch = json_object(), *res = NULL;
    char *name = NULL, *oname = NULL, err[KD_ERRLEN] = "", said[1024] = "";
    int rc, r,
        nopts = (u->priority != NULL) + (u->ahead_of != NULL) + (u->behind_of != NULL) +
                (u->resource_pool != NULL);
    int64_t prio = 0;
    if (nopts == 0) {
        det_err("%sjob %s: nothing to change: give --priority, --ahead-of, --behind-of or "
                "--resource-pool",
                where, id);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (u->ahead_of != NULL && u->behind_of != NULL) {
        det_err("%s--ahead-of and --behind-of: give one of them", where);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (u->priority != NULL && (kd_parse_i64(u->priority, &prio) != 0 || prio < 1 || prio > 99)) {
        det_err("%s--priority %s: expected a number from 1 (first) to 99 (last)", where,
                u->priority);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (u->resource_pool != NULL && !kd_queue_pool_ok(u->resource_pool)) {
        det_err("%s--resource-pool \"%s\": expected a pool name (letters, digits, '-', '_', '.')",
                where, u->resource_pool);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    bool task = job_resolve(k, id, &name, &exp, &rc);
    if (rc != 0)
        goto out;
    const char *rel = u->ahead_of ? u->ahead_of : u->behind_of;
    if (rel != NULL) {
        (void)job_resolve(k, rel, &oname, &other, &rc);
        if (rc != 0)
            goto out;
        if (strcmp(oname, name) == 0) {
            det_err("%sjob %s cannot be moved %s itself", where, name,
                    u->ahead_of ? "ahead of" : "behind");
            rc = DET_EXIT_USAGE;
            goto out;
        }
    }
    struct kd_queue_update qu = {prio, u->ahead_of ? oname : NULL, u->ahead_of ? NULL : oname,
                                 u->resource_pool};
    json_decref(patch);
    patch = kd_queue_update_patch(exp, other, &qu, said, sizeof(said));
    const struct kd_k8s_gvr *g = task ? &task_gvr : &exp_gvr;
    r = kd_k8s_patch(k->c, g, k->ns, name, NULL, KD_K8S_PATCH_MERGE, patch, &res, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "patch", g, task ? "task" : "experiment", name);
        goto out;
    }
    printf("job %s: %s\n", name, said);
    fflush(stdout);
out:
    free(name);
    free(oname);
    json_decref(exp);
    json_decref(other);
    json_decref(patch);
    json_decref(res);
    kd_k8s_status_free(&st);
    return rc;
}

static const char *const update_flags[] = {"--priority",      "--ahead-of", "--behind-of",
                                           "--resource-pool", KUBE_FLAGS,   NULL};

static int cmd_update(int argc, char **argv)
{
    static const char *const pos[] = {"JOB", NULL};
    static const struct det_verb_spec spec = {.cmd = "det job update",
                                              .usage = job_usage,
                                              .flags = update_flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .kube = true};
    struct det_verb v = {0};
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc < 0)
        rc = update_one(&v.k, v.a.pos[0], &v.a, "");
    det_verb_end(&v);
    return rc;
}

static int cmd_update_batch(int argc, char **argv)
{
    static const char *const pos[] = {"FILE", NULL};
    static const char *const flags[] = {KUBE_FLAGS, NULL};
    static const struct det_verb_spec spec = {.cmd = "det job update-batch",
                                              .usage = job_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .kube = true};
    static const char *const line_pos[] = {"JOB", NULL};
    struct det_verb v = {0};
    FILE *f = NULL;
    char line[BATCH_LINE_MAX + 2];
    int rc = det_verb_begin(&v, argc, argv, &spec), lineno = 0, nok = 0, nbad = 0;
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_OK;
    const char *src = v.a.npos > 0 ? v.a.pos[0] : "-";
    f = strcmp(src, "-") == 0 ? stdin : fopen(src, "r");
    if (f == NULL) {
        det_err("%s: cannot open: %s", src, strerror(errno));
        rc = DET_EXIT_ERROR;
        goto out;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *args[BATCH_MAX_ARGS + 2], *save = NULL, where[64], cmd[96];
        int n = 1, r;
        lineno++;
        snprintf(where, sizeof(where), "%s:%d: ", strcmp(src, "-") == 0 ? "stdin" : src, lineno);
        if (strlen(line) > BATCH_LINE_MAX) {
            det_err("%sline longer than %d bytes", where, BATCH_LINE_MAX);
            rc = DET_EXIT_USAGE;
            break;
        }
        line[strcspn(line, "#")] = '\0';
        args[0] = "update";
        for (char *tok = strtok_r(line, " \t\r\n", &save); tok != NULL;
             tok = strtok_r(NULL, " \t\r\n", &save)) {
            if (n > BATCH_MAX_ARGS)
                break;
            args[n++] = tok;
        }
        if (n == 1)
            continue;
        if (n > BATCH_MAX_ARGS) {
            det_err("%smore than %d words", where, BATCH_MAX_ARGS);
            nbad++;
            if (rc == 0)
                rc = DET_EXIT_USAGE;
            continue;
        }
        args[n] = NULL;
        struct det_args u = {0};
        snprintf(cmd, sizeof(cmd), "%sdet job update", where);
        r = det_parse_args(n, args, update_flags, line_pos, 1, job_usage, cmd, &u);
        if (r == 0)
            r = update_one(&v.k, u.pos[0], &u, where);
        else
            r = DET_EXIT_USAGE;
        if (r == 0) {
            nok++;
        } else {
            nbad++;
            if (rc == 0)
                rc = r;
        }
    }
    if (ferror(f)) {
        det_err("%s: read error", src);
        rc = DET_EXIT_ERROR;
    }
    fprintf(stderr, "det: %d job update%s applied, %d failed\n", nok, nok == 1 ? "" : "s", nbad);
out:
    if (f != NULL && f != stdin)
        fclose(f);
    det_verb_end(&v);
    return rc;
}

int det_cmd_job(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"list", "ls", cmd_list},
        {"update", NULL, cmd_update},
        {"update-batch", NULL, cmd_update_batch},
        {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, job_usage, "det job");
}

/* ---- det experiment set gc-policy ---------------------------------------------------- */

static int gc_policy(int argc, char **argv)
{
    static const char *const flags[] = {"--save-experiment-best",
                                        "--save-trial-best",
                                        "--save-trial-latest",
                                        "--output",
                                        KUBE_FLAGS,
                                        NULL};
    static const char *const pos[] = {"ID", NULL};
    static const struct det_verb_spec spec = {.cmd = "det experiment set gc-policy",
                                              .usage = gc_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = true,
                                              .kube = true,
                                              .gvr = &exp_gvr,
                                              .what = "experiment",
                                              .obj = true};
    struct det_verb v = {0};
    struct kd_k8s_status st = {0};
    json_t *patch = NULL, *res = NULL, *cs = json_object();
    char err[KD_ERRLEN] = "";
    const char *names[] = {"save_experiment_best", "save_trial_best", "save_trial_latest"};
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_OK;
    const char *vals[] = {v.a.save_experiment_best, v.a.save_trial_best, v.a.save_trial_latest};
    for (size_t i = 0; i < 3; i++) {
        int64_t n;
        if (vals[i] == NULL)
            continue;
        if (kd_parse_i64(vals[i], &n) != 0 || n < 0 || n > 1000000) {
            det_err("%s %s: expected a count >= 0", flags[i], vals[i]);
            rc = DET_EXIT_USAGE;
            goto out;
        }
        json_object_set_new(cs, names[i], json_integer(n));
    }
    if (json_object_size(cs) == 0) {
        det_err("nothing to change: give --save-experiment-best, --save-trial-best or "
                "--save-trial-latest (see 'det experiment set gc-policy --help')");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if (!json_is_object(det_get(v.obj, "spec.checkpoint_storage"))) {
        det_err("experiment %s has no spec.checkpoint_storage (its storage comes from a "
                "template or the controller's default): the GC policy can only be set where "
                "the storage is named; add checkpoint_storage to the experiment config",
                v.name);
        rc = DET_EXIT_INVALID;
        goto out;
    }
    patch = json_pack("{s:{s:O}}", "spec", "checkpoint_storage", cs);
    r = kd_k8s_patch(v.k.c, &exp_gvr, v.k.ns, v.name, NULL, KD_K8S_PATCH_MERGE, patch, &res, &st,
                     err);
    if (r != 0) {
        rc = det_kube_fail(&v.k, r, &st, err, "patch", &exp_gvr, "experiment", v.name);
        goto out;
    }
    json_t *now = det_get(res, "spec.checkpoint_storage");
    if (v.fmt != DET_FMT_TABLE) {
        rc = det_print_obj(now, v.fmt);
        goto out;
    }
    printf("experiment %s: checkpoint GC policy", v.name);
    for (size_t i = 0; i < 3; i++) {
        json_t *x = json_object_get(now, names[i]);
        if (json_is_integer(x))
            printf(" %s=%lld", names[i], (long long)json_integer_value(x));
    }
    printf("\n");
    fflush(stdout);
out:
    json_decref(patch);
    json_decref(res);
    json_decref(cs);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

int det_exp_set(int argc, char **argv)
{
    static const char *const what[] = {"gc-policy", NULL};
    int rc = DET_EXIT_USAGE;
    if (argc < 2) {
        fputs(gc_usage, stderr);
        goto out;
    }
    if (strcmp(argv[1], "gc-policy") == 0)
        rc = gc_policy(argc - 1, argv + 1);
    else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(gc_usage, stdout);
        rc = DET_EXIT_OK;
    } else
        det_usage_suggest("setting", argv[1], what, "det experiment set");
out:
    return rc;
}
