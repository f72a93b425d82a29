/*
 * The experiment verbs that act on existing Experiment resources through
 * the Kubernetes API: list and describe (Determined-style tables or -o
 * json|yaml), the desired-state patches (pause, activate, cancel, kill,
 * archive, unarchive), delete, and wait (a watch with a progress line).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config/k8smap.h"
#include "core/alloc.h"
#include "core/str.h"
#include "core/time.h"

static const struct kd_k8s_gvr exp_gvr = KD_K8S_EXPERIMENTS;
static const struct kd_k8s_gvr trial_gvr = KD_K8S_TRIALS;

#define KUBE_FLAGS "--kubeconfig", "--context", "--namespace"

static const char list_usage[] =
    "usage: det experiment list [--all] [--workspace NAME] [--project NAME] [-o table|json|yaml]\n"
    "                           [-n NS] [--kubeconfig FILE] [--context CTX]\n"
    "\n"
    "List the experiments of the namespace (archived ones only with --all); --workspace and\n"
    "--project keep those of that workspace or project (names compared as their labels\n"
    "kdet.io/workspace and kdet.io/project: case, spaces and punctuation aside).\n"
    "Columns: ID (the integer id, from the controller API), NAME (the resource name),\n"
    "CONFIG NAME, STATE, PROGRESS, TRIALS, BEST (best validation of the searcher metric),\n"
    "STARTED, DURATION.\n";

static const char describe_usage[] =
    "usage: det experiment describe ID [-o table|json|yaml] [-n NS] [--kubeconfig FILE]\n"
    "\n"
    "Show one experiment: desired and observed state, searcher, progress, best\n"
    "validation, conditions and its trials. ID is the name, a unique prefix of it, or\n"
    "the integer id (det experiment list).\n";

static const char patch_usage[] =
    "usage: det experiment pause|activate|cancel|kill|archive|unarchive ID [-n NS]\n"
    "                      [--kubeconfig FILE] [--context CTX]\n"
    "\n"
    "  pause      spec.paused=true: trials checkpoint and stop, nothing new starts\n"
    "  activate   spec.paused=false: resume from the checkpoints\n"
    "  cancel     spec.canceled=true: trials checkpoint and stop; the experiment ends CANCELED\n"
    "  kill       cancel, and annotate kdet.io/kill so kdet-controller deletes the pods at once\n"
    "             (no checkpoint)\n"
    "  archive    spec.archived=true: hidden from 'det experiment list' (not from --all)\n"
    "  unarchive  spec.archived=false\n";

static const char delete_usage[] =
    "usage: det experiment delete ID [--yes] [-n NS] [--kubeconfig FILE] [--context CTX]\n"
    "\n"
    "Delete the experiment, its context ConfigMap and (by garbage collection) its trials\n"
    "and their pods. Asks for confirmation unless --yes is given.\n";

static const char wait_usage[] =
    "usage: det experiment wait ID [--timeout DURATION] [-n NS] [--kubeconfig FILE]\n"
    "\n"
    "Watch the experiment and print its progress until it ends. Exit code 0 when it is\n"
    "COMPLETED, 6 when it ends CANCELED or ERROR (the reason is printed), 7 when\n"
    "--timeout (e.g. 90s, 15m, 2h; plain numbers are seconds) passes first.\n";

static bool terminal(const char *state)
{
    return state && (strcmp(state, "COMPLETED") == 0 || strcmp(state, "CANCELED") == 0 ||
                     strcmp(state, "ERROR") == 0);
}

/* The state shown to users: status.state, or why there is none. */
static const char *shown_state(const json_t *exp)
{
    const char *s = det_get_str(exp, "status.state", NULL);
    if (s == NULL || s[0] == '\0')
        return "WAITING";
    return s;
}

static void fmt_number(const json_t *v, char *buf, size_t len)
{
    if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_number(v))
        snprintf(buf, len, "%.4g", json_number_value(v));
    else
        snprintf(buf, len, "%s", "");
}

static void fmt_progress(const json_t *obj, char *buf, size_t len)
{
    const char *p = det_get_str(obj, "status.progressPercent", NULL);
    json_t *f = det_get(obj, "status.progress");
    if (p)
        snprintf(buf, len, "%s", p);
    else if (json_is_number(f))
        snprintf(buf, len, "%.0f%%", json_number_value(f) * 100);
    else
        snprintf(buf, len, "%s", "");
}

/* Duration from status.startTime to endTime (or now). */
static void fmt_span(const json_t *obj, char *buf, size_t len)
{
    int64_t t0, t1;
    const char *s = det_get_str(obj, "status.startTime", NULL);
    const char *e = det_get_str(obj, "status.endTime", NULL);
    if (s == NULL || kd_time_parse_rfc3339(s, &t0) != 0) {
        snprintf(buf, len, "%s", "");
        return;
    }
    if (e == NULL || kd_time_parse_rfc3339(e, &t1) != 0)
        t1 = kd_wall_ms();
    det_fmt_duration(t1 - t0, buf, len);
}

/* The integer id of obj from ids (uid -> id) into buf: "-" without ids, "" when it has none. */
static void fmt_id(const json_t *ids, const json_t *obj, char *buf, size_t len)
{
    json_t *id = json_object_get(ids, kd_k8s_meta_str(obj, "uid") ?: "");
    if (ids == NULL)
        snprintf(buf, len, "-");
    else if (json_is_integer(id))
        snprintf(buf, len, "%lld", (long long)json_integer_value(id));
    else
        snprintf(buf, len, "%s", "");
}

/* A note on stderr when a table's ID column is empty for want of the controller API. */
static void ids_note(const json_t *ids, const char *why)
{
    if (ids == NULL)
        fprintf(stderr, "det: note: no integer ids (ID shows -): %s\n", why);
}

static int cmp_created(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    const char *cx = kd_k8s_meta_str(x, "creationTimestamp");
    const char *cy = kd_k8s_meta_str(y, "creationTimestamp");
    int c = strcmp(cx ? cx : "", cy ? cy : "");
    if (c == 0)
        c = strcmp(kd_k8s_meta_str(x, "name"), kd_k8s_meta_str(y, "name"));
    return c;
}

/* items sorted by creation time (a new array of borrowed-then-increfed items). */
static json_t *sorted(json_t *items)
{
    size_t n = json_array_size(items);
    json_t **v = kd_xcalloc(n ? n : 1, sizeof(*v));
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(items, i);
    qsort(v, n, sizeof(*v), cmp_created);
    for (size_t i = 0; i < n; i++)
        json_array_append(out, v[i]);
    free(v);
    return out;
}

/*
 * Whether experiment e is in the workspace (or project) `want` (NULL: any): its label
 * `label` (the controller's), else its spec's `field`, compared as label values.
 */
static bool in_scope(const json_t *e, const char *label, const char *field, const char *want)
{
    char w[KD_LABEL_VALUE_MAX + 1], h[KD_LABEL_VALUE_MAX + 1];
    const char *have = json_string_value(
        json_object_get(json_object_get(json_object_get(e, "metadata"), "labels"), label));
    if (want == NULL)
        return true;
    if (have == NULL)
        have = json_string_value(json_object_get(json_object_get(e, "spec"), field));
    return have != NULL && kd_label_value(want, w, sizeof(w)) == 0 &&
           kd_label_value(have, h, sizeof(h)) == 0 && strcmp(w, h) == 0;
}

static int cmd_list(int argc, char **argv)
{
    static const char *const flags[] = {"--all",     "--output", "--workspace",
                                        "--project", KUBE_FLAGS, NULL};
    static const char *const pos[] = {NULL};
    static const struct det_verb_spec spec = {.cmd = "det experiment list",
                                              .usage = list_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 0,
                                              .format = true,
                                              .kube = true};
    struct det_verb v = {0};
    struct kd_k8s_status st = {0};
    json_t *list = NULL, *items = NULL, *shown = json_array(), *ids = NULL;
    struct det_table *t = NULL;
    char err[KD_ERRLEN] = "", why[1024] = "";
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_OK;
    char lv[KD_LABEL_VALUE_MAX + 1];
    const char *scopes[][2] = {{"--workspace", v.a.workspace}, {"--project", v.a.project}};
    for (int k = 0; k < 2; k++) {
        if (scopes[k][1] != NULL && kd_label_value(scopes[k][1], lv, sizeof(lv)) != 0) {
            fprintf(stderr, "det: %s %s: no letter or digit to match a label with\n", scopes[k][0],
                    scopes[k][1]);
            rc = DET_EXIT_USAGE;
            goto out;
        }
    }
    r = kd_k8s_list_all(v.k.c, &exp_gvr, v.k.ns, NULL, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(&v.k, r, &st, err, "list", &exp_gvr, "experiment", NULL);
        goto out;
    }
    items = sorted(json_object_get(list, "items"));
    size_t i;
    json_t *e;
    json_array_foreach(items, i, e)
    {
        if (!v.a.all && json_is_true(det_get(e, "spec.archived")))
            continue;
        if (!in_scope(e, KD_LABEL_WORKSPACE, "workspace", v.a.workspace) ||
            !in_scope(e, KD_LABEL_PROJECT, "project", v.a.project))
            continue;
        json_array_append(shown, e);
    }
    if (v.fmt != DET_FMT_TABLE) {
        json_t *l =
            json_pack("{s:s, s:s, s:O}", "apiVersion", "v1", "kind", "List", "items", shown);
        rc = det_print_obj(l, v.fmt);
        json_decref(l);
        goto out;
    }
    if (json_array_size(shown) == 0) {
        fprintf(stderr, "det: no experiments in namespace \"%s\"%s%s\n", v.k.ns,
                v.a.workspace != NULL || v.a.project != NULL ? " in that workspace or project" : "",
                v.a.all ? "" : " (archived ones are listed with --all)");
        goto out;
    }
    ids = det_ids(&v.k, NULL, why, sizeof(why));
    t = det_table_new((const char *const[]){"ID", "NAME", "CONFIG NAME", "STATE", "PROGRESS",
                                            "TRIALS", "BEST", "STARTED", "DURATION", NULL});
    json_array_foreach(shown, i, e)
    {
        char id[32], prog[32], trials[32], best[32], started[32], dur[32];
        fmt_id(ids, e, id, sizeof(id));
        fmt_progress(e, prog, sizeof(prog));
        fmt_number(det_get(e, "status.trials.total"), trials, sizeof(trials));
        fmt_number(det_get(e, "status.bestValidation.value"), best, sizeof(best));
        det_fmt_time(det_get_str(e, "status.startTime", NULL), started, sizeof(started));
        fmt_span(e, dur, sizeof(dur));
        const char *row[] = {id,
                             kd_k8s_meta_str(e, "name"),
                             det_get_str(e, "spec.name", ""),
                             shown_state(e),
                             prog,
                             trials,
                             best,
                             started,
                             dur};
        det_table_row(t, row);
    }
    det_table_print(t);
    ids_note(ids, why);
out:
    det_table_free(t);
    json_decref(list);
    json_decref(items);
    json_decref(shown);
    json_decref(ids);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

/* Trials of experiment `name` (spec.experiment), sorted by creation. New array. */
static int exp_trials(struct det_kube *k, const char *name, json_t **out)
{
    json_t *list = NULL;
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN] = "";
    int rc = DET_EXIT_OK;
    *out = json_array();
    int r = kd_k8s_list_all(k->c, &trial_gvr, k->ns, NULL, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", &trial_gvr, "trial", NULL);
        goto out;
    }
    json_t *all = sorted(json_object_get(list, "items"));
    size_t i;
    json_t *t;
    json_array_foreach(all, i, t)
    {
        if (strcmp(det_get_str(t, "spec.experiment", ""), name) == 0)
            json_array_append(*out, t);
    }
    json_decref(all);
out:
    json_decref(list);
    kd_k8s_status_free(&st);
    return rc;
}

void det_print_trials(const json_t *trials, const json_t *ids)
{
    struct det_table *t = det_table_new((const char *const[]){
        "ID", "NAME", "STATE", "PROGRESS", "BATCHES", "BEST", "RESTARTS", "HPARAMS", NULL});
    size_t i;
    json_t *tr;
    json_array_foreach(trials, i, tr)
    {
        char id[32], prog[32], batches[32], best[32], restarts[32];
        char *hp = json_dumps(det_get(tr, "spec.hparams"),
                              JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
        const char *state = det_get_str(tr, "status.state", "WAITING");
        fmt_progress(tr, prog, sizeof(prog));
        fmt_number(det_get(tr, "status.batchesTrained"), batches, sizeof(batches));
        fmt_number(det_get(tr, "status.bestValidation.value"), best, sizeof(best));
        fmt_number(det_get(tr, "status.restarts"), restarts, sizeof(restarts));
        if (hp && strlen(hp) > 60)
            memcpy(hp + 56, "...}", 5);
        fmt_id(ids, tr, id, sizeof(id));
        const char *row[] = {
            id, kd_k8s_meta_str(tr, "name"), state, prog, batches, best, restarts, hp ? hp : ""};
        det_table_row(t, row);
        free(hp);
    }
    det_table_print(t);
    det_table_free(t);
}

/* ids: uid -> integer id of the experiment and its trials (NULL without the controller API). */
static void describe_print(const json_t *e, const json_t *trials, const json_t *ids)
{
    const char *state = det_get_str(e, "status.state", NULL);
    json_t *og = det_get(e, "status.observedGeneration");
    json_int_t gen = json_integer_value(det_get(e, "metadata.generation"));
    char buf[64], buf2[64];
    fmt_id(ids, e, buf, sizeof(buf));
    printf("ID:          %s\n", buf[0] ? buf : "(none yet: the controller has not stored it)");
    printf("Resource:    %s\n", kd_k8s_meta_str(e, "name"));
    printf("Name:        %s\n", det_get_str(e, "spec.name", ""));
    printf("Namespace:   %s\n", kd_k8s_meta_str(e, "namespace"));
    if (state == NULL || state[0] == '\0' || !json_is_integer(og)) {
        printf("State:       WAITING for kdet-controller: nothing has acted on this experiment "
               "yet (no status.state / status.observedGeneration). Is kdet-controller running "
               "and watching namespace \"%s\"?\n",
               kd_k8s_meta_str(e, "namespace"));
    } else {
        printf("State:       %s\n", state);
        if (json_integer_value(og) < gen)
            printf("             (kdet-controller has not yet acted on the latest change: "
                   "generation %lld, observed %lld)\n",
                   (long long)gen, (long long)json_integer_value(og));
    }
    const char *msg = det_get_str(e, "status.message", NULL);
    if (msg && msg[0])
        printf("Message:     %s\n", msg);
    printf("Desired:     paused=%s canceled=%s archived=%s%s\n",
           json_is_true(det_get(e, "spec.paused")) ? "true" : "false",
           json_is_true(det_get(e, "spec.canceled")) ? "true" : "false",
           json_is_true(det_get(e, "spec.archived")) ? "true" : "false",
           json_object_get(json_object_get(json_object_get(e, "metadata"), "annotations"),
                           DET_KILL_ANNOTATION)
               ? " (killed)"
               : "");
    fmt_number(det_get(e, "spec.searcher.max_trials"), buf, sizeof(buf));
    printf("Searcher:    %s, metric %s (%s)%s%s\n", det_get_str(e, "spec.searcher.name", "?"),
           det_get_str(e, "spec.searcher.metric", "?"),
           json_is_true(det_get(e, "spec.searcher.smaller_is_better")) ||
                   !det_get(e, "spec.searcher.smaller_is_better")
               ? "smaller is better"
               : "larger is better",
           buf[0] ? ", max_trials " : "", buf);
    fmt_progress(e, buf, sizeof(buf));
    if (buf[0])
        printf("Progress:    %s\n", buf);
    json_t *tc = det_get(e, "status.trials");
    if (json_is_object(tc)) {
        const char *keys[] = {"total",    "queued",    "active",   "paused",
                              "stopping", "completed", "canceled", "errored"};
        printf("Trials:     ");
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
            json_t *v = json_object_get(tc, keys[i]);
            if (json_is_integer(v))
                printf(" %s %lld", keys[i], (long long)json_integer_value(v));
        }
        printf("\n");
    }
    json_t *best = det_get(e, "status.bestValidation");
    if (json_is_object(best)) {
        fmt_number(json_object_get(best, "value"), buf, sizeof(buf));
        fmt_number(json_object_get(best, "batches"), buf2, sizeof(buf2));
        printf("Best:        %s = %s (trial %s, %s batches%s%s)\n",
               det_get_str(best, "metric", "?"), buf, det_get_str(best, "trial", "?"), buf2,
               json_object_get(best, "checkpoint") ? ", checkpoint " : "",
               det_get_str(best, "checkpoint", ""));
    }
    det_fmt_time(kd_k8s_meta_str(e, "creationTimestamp"), buf, sizeof(buf));
    printf("Created:     %s\n", buf);
    det_fmt_time(det_get_str(e, "status.startTime", NULL), buf, sizeof(buf));
    if (buf[0])
        printf("Started:     %s\n", buf);
    det_fmt_time(det_get_str(e, "status.endTime", NULL), buf, sizeof(buf));
    if (buf[0])
        printf("Ended:       %s\n", buf);
    fmt_span(e, buf, sizeof(buf));
    if (buf[0])
        printf("Duration:    %s\n", buf);
    const char *cm = det_get_str(e, "spec.context.configMap", NULL);
    printf("Context:     %s%s, sha256 %.12s\n", cm ? "ConfigMap " : "",
           cm ? cm : det_get_str(e, "spec.context.url", det_get_str(e, "spec.context.path", "-")),
           det_get_str(e, "spec.context.sha256", "-"));
    json_t *conds = det_get(e, "status.conditions");
    if (json_array_size(conds) > 0) {
        printf("Conditions:\n");
        size_t i;
        json_t *c;
        json_array_foreach(conds, i, c)
        {
            printf("  %-14s %-7s %s%s%s\n", det_get_str(c, "type", "?"),
                   det_get_str(c, "status", "?"), det_get_str(c, "reason", ""),
                   json_object_get(c, "message") ? ": " : "", det_get_str(c, "message", ""));
        }
    }
    if (json_array_size(trials) == 0) {
        printf("Trials:      none yet\n");
    } else {
        printf("\n");
        det_print_trials(trials, ids);
    }
    fflush(stdout);
}

static int cmd_describe(int argc, char **argv)
{
    static const char *const flags[] = {"--output", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    static const struct det_verb_spec spec = {.cmd = "det experiment describe",
                                              .usage = describe_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = true,
                                              .kube = true,
                                              .gvr = &exp_gvr,
                                              .what = "experiment",
                                              .obj = true};
    struct det_verb v = {0};
    json_t *trials = NULL, *tids = NULL;
    char why[1024] = "";
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    rc = exp_trials(&v.k, v.name, &trials);
    if (rc != 0)
        goto out;
    if (v.fmt != DET_FMT_TABLE) {
        json_t *both = json_pack("{s:O, s:O}", "experiment", v.obj, "trials", trials);
        rc = det_print_obj(both, v.fmt);
        json_decref(both);
    } else {
        tids = det_ids(&v.k, v.name, why, sizeof(why));
        describe_print(v.obj, trials, tids);
        ids_note(tids, why);
    }
out:
    json_decref(trials);
    json_decref(tids);
    det_verb_end(&v);
    return rc;
}

static const char logs_usage[] =
    "usage: det experiment logs ID [-f] [--tail N] [--grep RE] [-n NS] [--kubeconfig FILE]\n"
    "                           [--context CTX]\n"
    "\n"
    "The logs of all the experiment's trials, each line prefixed [TRIAL] [rank=R]. With\n"
    "the controller API (KDET_API_URL and KDET_API_TOKEN, or det deploy local), from its\n"
    "store, in the order they were stored, also after the pods are gone: -f follows until\n"
    "the experiment ends (trials started later included), --tail N prints the last N lines,\n"
    "--grep RE only lines matching the regular expression. Without it, from the pods of the\n"
    "trials, oldest trial first ([TRIAL POD] when a trial has several pods): -f follows\n"
    "until the pods end, --tail N the last N lines of each pod.\n";

static int cmd_logs(int argc, char **argv)
{
    static const char *const flags[] = {"--follow", "--tail", "--grep", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    static const struct det_verb_spec spec = {
        .cmd = "det experiment logs", .usage = logs_usage, .flags = flags, .pos = pos, .minpos = 1};
    struct det_verb v = {0};
    json_t *trials = NULL;
    long tail;
    bool done = false;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if (det_parse_tail(v.a.tail, &tail) != 0 || (v.a.grep != NULL && v.a.grep[0] == '\0')) {
        if (v.a.grep != NULL && v.a.grep[0] == '\0')
            det_err("--grep: expected a regular expression");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = det_logs_api_or_pods(&v, true, &exp_gvr, tail, &done);
    if (done)
        goto out;
    if (v.k.c == NULL && (rc = det_kube_open(&v.a, &v.k)) != 0)
        goto out;
    if ((rc = det_resolve(&v.k, &exp_gvr, "experiment", v.a.pos[0], &v.name, NULL)) != 0)
        goto out;
    rc = exp_trials(&v.k, v.name, &trials);
    if (rc != 0)
        goto out;
    if (json_array_size(trials) == 0) {
        det_err("experiment %s has no trials yet: nothing to show", v.name);
        rc = DET_EXIT_NOTFOUND;
        goto out;
    }
    rc = det_trial_logs(&v.k, trials, true, v.a.follow, tail, v.a.grep);
out:
    json_decref(trials);
    det_verb_end(&v);
    return rc;
}

/*
 * kill: delete the pods of the experiment's trials at once (grace period 0), so
 * that they stop now whether or not kdet-controller has seen the annotation yet.
 * Returns the number of pods deleted; errors are warnings.
 */
static int kill_pods(struct det_kube *k, const char *name)
{
    json_t *trials = NULL;
    int n = 0;
    if (exp_trials(k, name, &trials) != 0)
        goto out;
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) n += det_kill_trial_pods(k, kd_k8s_meta_str(t, "name"));
out:
    json_decref(trials);
    return n;
}

/* pause, activate, cancel, kill, archive, unarchive: argv[0] is the verb. */
static int cmd_patch(int argc, char **argv)
{
    static const char *const flags[] = {KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    const char *verb = argv[0];
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "det experiment %s", verb);
    const struct det_verb_spec spec = {.cmd = cmd,
                                       .usage = patch_usage,
                                       .flags = flags,
                                       .pos = pos,
                                       .minpos = 1,
                                       .kube = true,
                                       .gvr = &exp_gvr,
                                       .what = "experiment",
                                       .obj = true};
    struct det_verb v = {0};
    struct det_kube *k = &v.k;
    struct kd_k8s_status st = {0};
    json_t *patch = NULL, *res = NULL;
    char err[KD_ERRLEN] = "", now[32];
    const char *what;
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_OK;
    const json_t *e = v.obj;
    const char *name = v.name;
    const char *state = det_get_str(e, "status.state", "");
    bool canceled = json_is_true(det_get(e, "spec.canceled"));
    if ((strcmp(verb, "pause") == 0 || strcmp(verb, "activate") == 0) &&
        (canceled || terminal(state))) {
        det_err("experiment %s is %s; it cannot be %s", name, terminal(state) ? state : "canceled",
                strcmp(verb, "pause") == 0 ? "paused" : "activated");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    kd_time_rfc3339(kd_wall_ms(), 0, now, sizeof(now));
    if (strcmp(verb, "pause") == 0) {
        patch = json_pack("{s:{s:b}}", "spec", "paused", 1);
        what = "paused (spec.paused=true): its trials checkpoint and stop";
    } else if (strcmp(verb, "activate") == 0) {
        patch = json_pack("{s:{s:b}}", "spec", "paused", 0);
        what = "activated (spec.paused=false): its trials resume from their checkpoints";
    } else if (strcmp(verb, "cancel") == 0) {
        patch = json_pack("{s:{s:b}}", "spec", "canceled", 1);
        what = "canceled (spec.canceled=true): its trials checkpoint and stop";
    } else if (strcmp(verb, "kill") == 0) {
        patch = json_pack("{s:{s:b}, s:{s:{s:s}}}", "spec", "canceled", 1, "metadata",
                          "annotations", DET_KILL_ANNOTATION, now);
        what = "killed (spec.canceled=true, annotation " DET_KILL_ANNOTATION
               "): its pods are deleted at once, without a checkpoint";
    } else if (strcmp(verb, "archive") == 0) {
        patch = json_pack("{s:{s:b}}", "spec", "archived", 1);
        what = "archived (spec.archived=true): 'det experiment list' shows it only with --all";
    } else {
        patch = json_pack("{s:{s:b}}", "spec", "archived", 0);
        what = "unarchived (spec.archived=false)";
    }
    if (patch == NULL)
        kd_oom(256);
    r = kd_k8s_patch(k->c, &exp_gvr, k->ns, name, NULL, KD_K8S_PATCH_MERGE, patch, &res, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "patch", &exp_gvr, "experiment", name);
        goto out;
    }
    printf("experiment %s %s\n", name, what);
    if (strcmp(verb, "kill") == 0) {
        int n = kill_pods(k, name);
        printf("deleted %d trial pod%s with grace period 0\n", n, n == 1 ? "" : "s");
    }
    if (strcmp(verb, "archive") == 0 && !terminal(state))
        fprintf(stderr, "det: note: archiving takes effect in a terminal state; %s is %s\n", name,
                state[0] ? state : "not started by kdet-controller yet");
out:
    json_decref(patch);
    json_decref(res);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

static int cmd_delete(int argc, char **argv)
{
    static const char *const flags[] = {"--yes", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    static const struct det_verb_spec spec = {.cmd = "det experiment delete",
                                              .usage = delete_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = false,
                                              .kube = true,
                                              .gvr = &exp_gvr,
                                              .what = "experiment",
                                              .obj = true};
    struct det_verb v = {0};
    struct det_kube *k = &v.k;
    struct kd_k8s_status st = {0};
    struct kd_k8s_delete_opts del = {.propagation_policy = "Background"};
    static const struct kd_k8s_gvr cm_gvr = KD_K8S_CONFIGMAPS;
    char err[KD_ERRLEN] = "";
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_OK;
    const json_t *e = v.obj;
    const char *name = v.name;
    if (!v.a.yes) {
        char line[16] = "";
        if (!isatty(0)) {
            det_err("refusing to delete experiment %s without confirmation: stdin is not a "
                    "terminal; pass --yes",
                    name);
            rc = DET_EXIT_USAGE;
            goto out;
        }
        fprintf(stderr, "Delete experiment %s, its trials, their pods and its context? [y/N] ",
                name);
        if (fgets(line, sizeof(line), stdin) == NULL || (line[0] != 'y' && line[0] != 'Y')) {
            det_err("not deleted");
            rc = DET_EXIT_ERROR;
            goto out;
        }
    }
    r = kd_k8s_delete(k->c, &exp_gvr, k->ns, name, &del, NULL, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "delete", &exp_gvr, "experiment", name);
        goto out;
    }
    const char *cm = det_get_str(e, "spec.context.configMap", NULL);
    if (cm != NULL) {
        r = kd_k8s_delete(k->c, &cm_gvr, k->ns, cm, NULL, NULL, &st, err);
        if (r != 0 && r != KD_ENOTFOUND)
            det_err("warning: the context ConfigMap %s was not deleted: %s", cm, err);
    }
    printf("experiment %s deleted (its trials and pods are removed by garbage collection)\n", name);
out:
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

/* ---- wait ------------------------------------------------------------------ */

struct waiter {
    const char *name;
    int64_t t0;
    bool tty;
    char last[256];
    char state[32];
    char message[512];
    bool deleted;
};

static void progress_line(struct waiter *w, const json_t *e)
{
    char line[512], pct[32], prog[64], best[32], el[32];
    const char *state = det_get_str(e, "status.state", "");
    json_t *frac = det_get(e, "status.progress");
    fmt_progress(e, pct, sizeof(pct));
    if (json_is_number(frac)) {
        /* a 20-column bar, as Determined's progress bars */
        char bar[21];
        double f = json_number_value(frac);
        int full = (int)(f * 20 + 0.5);
        full = full < 0 ? 0 : full > 20 ? 20 : full;
        for (int i = 0; i < 20; i++)
            bar[i] = i < full ? '#' : '.';
        bar[20] = '\0';
        snprintf(prog, sizeof(prog), "[%s] %s", bar, pct);
    } else {
        snprintf(prog, sizeof(prog), "%s", pct);
    }
    fmt_number(det_get(e, "status.bestValidation.value"), best, sizeof(best));
    det_fmt_duration(kd_mono_ms() - w->t0, el, sizeof(el));
    if (state[0] == '\0')
        snprintf(line, sizeof(line), "%s: waiting for kdet-controller to act on it", w->name);
    else
        snprintf(line, sizeof(line), "%s: %s%s%s, trials %lld (%lld active, %lld completed)%s%s",
                 w->name, state, prog[0] ? " " : "", prog,
                 (long long)json_integer_value(det_get(e, "status.trials.total")),
                 (long long)json_integer_value(det_get(e, "status.trials.active")),
                 (long long)json_integer_value(det_get(e, "status.trials.completed")),
                 best[0] ? ", best " : "", best);
    if (strcmp(line, w->last) != 0 || w->tty) {
        if (w->tty)
            fprintf(stderr, "\r\033[K%s  [%s]", line, el);
        else
            fprintf(stderr, "%s  [%s]\n", line, el);
        kd_strlcpy(w->last, line, sizeof(w->last));
    }
    kd_strlcpy(w->state, state, sizeof(w->state));
    kd_strlcpy(w->message, det_get_str(e, "status.message", ""), sizeof(w->message));
}

static int on_event(enum kd_k8s_event_type type, json_t *obj, void *ud)
{
    struct waiter *w = ud;
    if (type == KD_K8S_DELETED) {
        w->deleted = true;
        return 1;
    }
    if (type != KD_K8S_ADDED && type != KD_K8S_MODIFIED)
        return 0;
    progress_line(w, obj);
    return terminal(w->state) ? 1 : 0;
}

int det_exp_wait(struct det_kube *k, const char *name, int64_t timeout_ms)
{
    struct kd_k8s_status st = {0};
    struct waiter w = {0};
    json_t *e = NULL;
    char err[KD_ERRLEN] = "", sel[300], rv[64], tmo[32];
    int64_t deadline = 0;
    int rc = DET_EXIT_OK, r;
    static const atomic_int no_stop = 0;
    r = kd_k8s_get(k->c, &exp_gvr, k->ns, name, &e, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "get", &exp_gvr, "experiment", name);
        goto out;
    }
    w.name = name;
    w.t0 = kd_mono_ms();
    w.tty = isatty(2);
    deadline = timeout_ms ? w.t0 + timeout_ms : 0;
    snprintf(sel, sizeof(sel), "metadata.name=%s", name);
    kd_strlcpy(rv, kd_k8s_meta_str(e, "resourceVersion"), sizeof(rv));
    progress_line(&w, e);
    while (!terminal(w.state) && !w.deleted) {
        long secs = 60;
        if (deadline) {
            int64_t left = deadline - kd_mono_ms();
            if (left <= 0)
                break;
            secs = (long)((left + 999) / 1000);
            if (secs > 60)
                secs = 60;
        }
        struct kd_k8s_query q = {.field_selector = sel,
                                 .resource_version = rv,
                                 .timeout_seconds = secs,
                                 .allow_watch_bookmarks = true};
        r = kd_k8s_watch(k->c, &exp_gvr, k->ns, &q, on_event, &w, &no_stop, &st, err);
        if (r < 0 && r != KD_EGONE) {
            if (w.tty)
                fputc('\n', stderr);
            rc = det_kube_fail(k, r, &st, err, "watch", &exp_gvr, "experiment", name);
            goto out;
        }
        /* re-read to resume (after a 410, or a server-side timeout) from a fresh version */
        json_decref(e);
        e = NULL;
        r = kd_k8s_get(k->c, &exp_gvr, k->ns, name, &e, &st, err);
        if (r == KD_ENOTFOUND) {
            w.deleted = true;
            break;
        }
        if (r != 0) {
            rc = det_kube_fail(k, r, &st, err, "get", &exp_gvr, "experiment", name);
            goto out;
        }
        kd_strlcpy(rv, kd_k8s_meta_str(e, "resourceVersion"), sizeof(rv));
        progress_line(&w, e);
    }
    if (w.tty)
        fputc('\n', stderr);
    if (w.deleted) {
        det_err("experiment %s was deleted while waiting", name);
        rc = DET_EXIT_NOTFOUND;
    } else if (!terminal(w.state)) {
        det_fmt_duration(timeout_ms, tmo, sizeof(tmo));
        det_err("timed out after %s waiting for experiment %s (state %s)", tmo, name,
                w.state[0] ? w.state : "WAITING for kdet-controller");
        rc = DET_EXIT_TIMEOUT;
    } else if (strcmp(w.state, "COMPLETED") == 0) {
        printf("experiment %s COMPLETED\n", name);
        fflush(stdout);
    } else {
        det_err("experiment %s ended %s%s%s", name, w.state, w.message[0] ? ": " : "", w.message);
        rc = DET_EXIT_FAILED;
    }
out:
    json_decref(e);
    kd_k8s_status_free(&st);
    return rc;
}

static int cmd_wait(int argc, char **argv)
{
    static const char *const flags[] = {"--timeout", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    static const struct det_verb_spec spec = {
        .cmd = "det experiment wait", .usage = wait_usage, .flags = flags, .pos = pos, .minpos = 1};
    struct det_verb v = {0};
    int64_t timeout_ms = 0;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    /* the timeout is checked before the cluster is asked */
    if (v.a.timeout && (det_parse_duration(v.a.timeout, &timeout_ms) != 0 || timeout_ms == 0)) {
        det_err("--timeout %s: expected a duration such as 90s, 15m or 2h", v.a.timeout);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = det_kube_open(&v.a, &v.k);
    if (rc == 0)
        rc = det_resolve(&v.k, &exp_gvr, "experiment", v.a.pos[0], &v.name, NULL);
    if (rc == 0)
        rc = det_exp_wait(&v.k, v.name, timeout_ms);
out:
    det_verb_end(&v);
    return rc;
}

int det_cmd_experiment(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"create", NULL, det_exp_create},
        {"list", "ls", cmd_list},
        {"describe", NULL, cmd_describe},
        {"pause", NULL, cmd_patch},
        {"activate", NULL, cmd_patch},
        {"cancel", NULL, cmd_patch},
        {"kill", NULL, cmd_patch},
        {"archive", NULL, cmd_patch},
        {"unarchive", NULL, cmd_patch},
        {"delete", NULL, cmd_delete},
        {"wait", NULL, cmd_wait},
        {"logs", NULL, cmd_logs},
        {"list-trials", "lt", det_trial_list},
        {"set", NULL, det_exp_set},
        {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, det_exp_usage, "det experiment");
}
