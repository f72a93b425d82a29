/*
 * `det cmd|notebook|shell|tensorboard|task ...` (docs/tasks.md): start a
 * task as a Task resource (its config in Determined's format, checked by
 * lib/config, an optional --context directory packed as for experiments),
 * list, kill and read the logs of tasks, follow a command to its exit
 * code, and reach a running task through the controller API's proxy: a
 * notebook's URL, an ssh session tunneled through the proxy.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "cli.h"
#include "config/task.h"
#include "context/context.h"
#include "core/alloc.h"
#include "core/str.h"
#include "core/time.h"

static const struct kd_k8s_gvr task_gvr = KD_K8S_TASKS;
static const struct kd_k8s_gvr cm_gvr = KD_K8S_CONFIGMAPS;

#define KUBE_FLAGS "--namespace", "--kubeconfig", "--kube-context"
/* A context packed into the ConfigMap: what one ConfigMap holds, base64 and all. */
#define CM_MAX_PACKED (750u << 10)
#define CM_KEY "context.tar.gz"
/* How long `start` waits for a task to run (a queue can be long: it says so and keeps waiting). */
#define WAIT_POLL_MS 500

/* The noun a command line names, and what it means. */
struct noun {
    const char *name;       /* "cmd", "notebook", ... */
    enum kd_task_kind kind; /* its tasks */
    bool all;               /* `det task`: every kind */
};

static const char task_usage[] =
    "usage: det cmd|notebook|shell|tensorboard|task VERB ...\n"
    "\n"
    "  det cmd run [OPTIONS] COMMAND [ARGS...]   run a command on the cluster, print its\n"
    "                                   output until it ends, exit with its exit code\n"
    "  det notebook start [OPTIONS]     start a Jupyter notebook; print its URL\n"
    "  det shell start [OPTIONS]        start an SSH shell and open it\n"
    "  det tensorboard start EXPERIMENT... [OPTIONS]\n"
    "                                   start a TensorBoard over the experiments' event files\n"
    "  det notebook|tensorboard open ID   print the task's URL (a one-minute sign-in link)\n"
    "  det shell open ID [-- COMMAND...]  ssh into the shell (or run one command there)\n"
    "  det cmd|notebook|shell|tensorboard list [-a]   this kind's tasks (-a: ended ones too)\n"
    "  det task list [-a]               every task\n"
    "  det cmd|notebook|shell|tensorboard|task kill ID\n"
    "  det cmd|notebook|shell|tensorboard|task logs ID [-f] [--tail N] [--grep RE]\n"
    "\n"
    "start/run options:\n"
    "  --config-file FILE   the task config (Determined's format: description, environment,\n"
    "                       resources.slots, bind_mounts, idle_timeout, work_dir, ...)\n"
    "  --template FILE|NAME merge the config over a template (a file, or a stored one)\n"
    "  --context DIR        upload DIR (honouring .detignore) as the task's working files\n"
    "  -d, --detach         do not follow the command's output / open the task\n"
    "Every verb takes -n/--namespace, --kubeconfig and --kube-context (for tasks --context\n"
    "is the directory to upload, as in Determined). ID: a task's name or a unique prefix.\n";

/* ---- names and resources ------------------------------------------------------------------ */

static const char *kind_prefix(enum kd_task_kind k)
{
    return k == KD_TASK_COMMAND ? "cmd" : kd_task_kind_name(k);
}

/* "<kind>-<8 hex digits>": random, so that a new task never meets an old one's name. */
static char *new_name(enum kd_task_kind k)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint32_t)kd_mono_ns() ^ (uint32_t)getpid();
    return kd_xasprintf("%s-%08x", kind_prefix(k), r);
}

static char *b64(const unsigned char *data, size_t len)
{
    char *out = kd_xmalloc(4 * ((len + 2) / 3) + 1);
    int n = EVP_EncodeBlock((unsigned char *)out, data, (int)len);
    out[n < 0 ? 0 : n] = '\0';
    return out;
}

/* The user the controller API knows us as (spec.owner), or NULL. */
static char *whoami(const struct det_args *a)
{
    struct det_api api = {0};
    char why[256];
    json_t *me = NULL;
    char *name = NULL;
    if (det_api_open_quiet(a, "det", &api, why, sizeof(why)) == 0 &&
        det_api_get(&api, "/api/v1/me", &me) == 0) {
        const char *n = json_string_value(json_object_get(json_object_get(me, "user"), "name"));
        if (n != NULL)
            name = kd_xstrdup(n);
    }
    json_decref(me);
    det_api_close(&api);
    return name;
}

/* The config of a new task: the file (or none), merged over the template, checked. */
static int load_config(struct det_kube *k, const struct det_args *a, enum kd_task_kind kind,
                       const json_t *over, json_t **cfg)
{
    char err[KD_ERRLEN] = "", tpath[128] = "";
    char *yaml = NULL;
    const char *tmpl = a->template_ref;
    struct stat sb;
    int rc = DET_EXIT_OK;
    *cfg = NULL;
    if (tmpl != NULL && stat(tmpl, &sb) != 0 && strchr(tmpl, '/') == NULL) {
        /* a stored template: merged here, as its YAML */
        if ((rc = det_template_fetch(k, tmpl, &yaml)) != 0)
            goto out;
        const char *td = getenv("TMPDIR");
        snprintf(tpath, sizeof(tpath), "%s/det-template-XXXXXX",
                 td != NULL && td[0] == '/' && strlen(td) < 80 ? td : "/tmp");
        int fd = mkstemp(tpath);
        if (fd < 0 || write(fd, yaml, strlen(yaml)) != (ssize_t)strlen(yaml)) {
            det_err("cannot write the template to %s: %s", tpath, strerror(errno));
            if (fd >= 0)
                close(fd);
            rc = DET_EXIT_ERROR;
            goto out;
        }
        close(fd);
        tmpl = tpath;
    }
    int r = kd_task_config_load(kind, a->config_file, tmpl, over, cfg, err);
    if (r != 0) {
        det_err("%s", err[0] ? err : kd_strerror(r));
        rc = r == KD_ENOMEM ? DET_EXIT_ERROR : DET_EXIT_INVALID;
    }
out:
    if (tpath[0] != '\0')
        unlink(tpath);
    free(yaml);
    return rc;
}

/*
 * Create the Task (and, with a context, its ConfigMap, then owned by the
 * Task). *name: the new task's name (malloc'd). Exit code.
 */
static int create_task(struct det_kube *k, const struct det_args *a, enum kd_task_kind kind,
                       json_t *cfg, json_t *experiments, char **name)
{
    struct kd_context ctx = {0};
    struct kd_k8s_status st = {0};
    json_t *task = NULL, *cm = NULL, *created = NULL, *patch = NULL;
    char err[KD_ERRLEN] = "", *owner = NULL, *data = NULL, *cmname = NULL;
    const char *dir = a->context; /* --context: the directory (see det_cmd_task) */
    int rc = DET_EXIT_OK, r;
    *name = new_name(kind);
    json_t *spec = json_pack("{s:s,s:O}", "kind", kd_task_kind_name(kind), "config", cfg);
    if ((owner = whoami(a)) != NULL)
        json_object_set_new(spec, "owner", json_string(owner));
    if (experiments != NULL)
        json_object_set(spec, "experiments", experiments);
    if (dir != NULL) {
        r = kd_context_pack(dir, 0, &ctx, err);
        if (r != 0) {
            det_err("--context %s: %s", dir, err[0] ? err : kd_strerror(r));
            rc = DET_EXIT_INVALID;
            goto out;
        }
        if (ctx.len > CM_MAX_PACKED) {
            det_err("--context %s: %zu bytes packed; a task's context must fit a ConfigMap "
                    "(%u KiB packed): leave large files out with .detignore or bind-mount them",
                    dir, ctx.len, CM_MAX_PACKED >> 10);
            rc = DET_EXIT_INVALID;
            goto out;
        }
        cmname = kd_xasprintf("%s-context", *name);
        data = b64(ctx.data, ctx.len);
        cm =
            json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s},s:{s:s}},s:{s:s}}", "apiVersion", "v1",
                      "kind", "ConfigMap", "metadata", "name", cmname, "namespace", k->ns, "labels",
                      "app.kubernetes.io/managed-by", "det", "kdet.io/task", *name, "annotations",
                      "kdet.io/context-sha256", ctx.sha256, "binaryData", CM_KEY, data);
        json_object_set_new(spec, "context",
                            json_pack("{s:s,s:s,s:I,s:I,s:I}", "configMap", cmname, "sha256",
                                      ctx.sha256, "size", (json_int_t)ctx.len, "files",
                                      (json_int_t)ctx.files, "rawSize", (json_int_t)ctx.raw_bytes));
        fprintf(stderr, "det: packed %llu files of %s into %zu bytes\n",
                (unsigned long long)ctx.files, dir, ctx.len);
    }
    task = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s}},s:o}", "apiVersion", "kdet.io/v1alpha1",
                     "kind", "Task", "metadata", "name", *name, "namespace", k->ns, "labels",
                     "app.kubernetes.io/managed-by", "det", "kdet.io/task-kind",
                     kd_task_kind_name(kind), "spec", spec);
    if (cm != NULL) {
        r = kd_k8s_create(k->c, &cm_gvr, k->ns, cm, NULL, &st, err);
        if (r != 0) {
            rc = det_kube_fail(k, r, &st, err, "create", &cm_gvr, "configmap", cmname);
            goto out;
        }
    }
    r = kd_k8s_create(k->c, &task_gvr, k->ns, task, &created, &st, err);
    if (r != 0) {
        rc = r == KD_EINVALID || r == KD_EINVAL
                 ? (det_err("the API server refused task %s: %s", *name, err), DET_EXIT_INVALID)
                 : det_kube_fail(k, r, &st, err, "create", &task_gvr, "task", *name);
        goto out;
    }
    if (cm != NULL) {
        patch = json_pack("{s:{s:[{s:s,s:s,s:s,s:s}]}}", "metadata", "ownerReferences",
                          "apiVersion", "kdet.io/v1alpha1", "kind", "Task", "name", *name, "uid",
                          kd_k8s_meta_str(created, "uid"));
        if (kd_k8s_patch(k->c, &cm_gvr, k->ns, cmname, NULL, KD_K8S_PATCH_MERGE, patch, NULL, NULL,
                         err) != 0)
            det_err("warning: could not make task %s the owner of its context ConfigMap: %s", *name,
                    err);
    }
out:
    if (rc != DET_EXIT_OK) {
        free(*name);
        *name = NULL;
    }
    kd_context_free(&ctx);
    kd_k8s_status_free(&st);
    json_decref(task);
    json_decref(cm);
    json_decref(created);
    json_decref(patch);
    free(owner);
    free(data);
    free(cmname);
    return rc;
}

/*
 * Wait until task `name` runs (or ends): its state changes are said on
 * stderr. *task: the Task as last read (caller frees). Exit code:
 * DET_EXIT_OK once RUNNING, DET_EXIT_FAILED when it ended first.
 */
static int wait_running(struct det_kube *k, const char *name, json_t **task)
{
    char last[1024] = "", err[KD_ERRLEN] = "";
    int rc = DET_EXIT_OK;
    *task = NULL;
    for (;;) {
        struct kd_k8s_status st = {0};
        json_decref(*task);
        *task = NULL;
        int r = kd_k8s_get(k->c, &task_gvr, k->ns, name, task, &st, err);
        if (r != 0) {
            rc = det_kube_fail(k, r, &st, err, "get", &task_gvr, "task", name);
            kd_k8s_status_free(&st);
            goto out;
        }
        kd_k8s_status_free(&st);
        const char *state = det_get_str(*task, "status.state", "QUEUED");
        const char *msg = det_get_str(*task, "status.message", "");
        char now[1024];
        snprintf(now, sizeof(now), "%s: %s", state, msg);
        if (strcmp(now, last) != 0) {
            fprintf(stderr, "det: task %s %s%s%s\n", name, state, msg[0] ? ": " : "", msg);
            kd_strlcpy(last, now, sizeof(last));
        }
        if (strcmp(state, "RUNNING") == 0)
            goto out;
        if (strcmp(state, "TERMINATED") == 0 || strcmp(state, "TERMINATING") == 0) {
            det_err("task %s ended before it ran (%s)", name,
                    det_get_str(*task, "status.endReason", "?"));
            rc = DET_EXIT_FAILED;
            goto out;
        }
        kd_sleep_ms(WAIT_POLL_MS);
    }
out:
    return rc;
}

/* ---- start / run ---------------------------------------------------------------------------- */

/* Where `det cmd run` splits: the options end at "--" or at the first word that is not an
 * option or an option's value. */
static int split_command(int argc, char **argv, int *opt_end, int *cmd_at)
{
    static const char *const with_value[] = {"--config-file",  "--template", "--context",
                                             "--namespace",    "-n",         "--kubeconfig",
                                             "--kube-context", NULL};
    *opt_end = argc;
    *cmd_at = argc;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--") == 0) {
            *opt_end = i;
            *cmd_at = i + 1;
            break;
        }
        if (s[0] != '-' || s[1] == '\0') {
            *opt_end = *cmd_at = i;
            break;
        }
        bool needs = false;
        for (size_t k = 0; with_value[k] != NULL; k++)
            needs = needs || strcmp(s, with_value[k]) == 0;
        if (needs)
            i++;
    }
    return 0;
}

/* `det cmd run`: the command's output until it ends, then its exit code. */
static int cmd_run(int argc, char **argv)
{
    static const char *const flags[] = {"--config-file", "--template", "--context",
                                        "--detach",      KUBE_FLAGS,   NULL};
    static const char *const pos[] = {NULL};
    struct det_args a = {0};
    struct det_kube k = {0};
    struct det_api api = {0};
    json_t *cfg = NULL, *task = NULL;
    char *name = NULL, err[KD_ERRLEN] = "";
    int opt_end, cmd_at, rc;
    split_command(argc, argv, &opt_end, &cmd_at);
    rc = det_parse_args(opt_end, argv, flags, pos, 0, task_usage, "det cmd run", &a);
    if (rc != 0) {
        rc = det_args_exit(rc);
        goto out;
    }
    if (cmd_at >= argc) {
        det_err("det cmd run: a command is required (det cmd run [OPTIONS] COMMAND [ARGS...])");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    /* --context is the directory to upload; the kubeconfig's context is --kube-context */
    const char *dir = a.context;
    a.context = a.kube_context;
    if ((rc = det_kube_open(&a, &k)) != 0)
        goto out;
    if (!a.detach && (rc = det_api_open(&a, "det cmd run", &api)) != 0)
        goto out;
    /* One word: a command line to split (Determined's 'python3 prep.py'); more: the argv. */
    json_t *ep = json_array(), *over = json_object();
    for (int i = cmd_at; i < argc; i++)
        json_array_append_new(ep, json_string(argv[i]));
    json_object_set_new(over, "entrypoint", argc - cmd_at == 1 ? json_string(argv[cmd_at]) : ep);
    if (argc - cmd_at == 1)
        json_decref(ep);
    rc = load_config(&k, &a, KD_TASK_COMMAND, over, &cfg);
    json_decref(over);
    if (rc != 0)
        goto out;
    a.context = dir;
    rc = create_task(&k, &a, KD_TASK_COMMAND, cfg, NULL, &name);
    a.context = a.kube_context;
    if (rc != 0)
        goto out;
    printf("%s\n", name);
    fflush(stdout);
    if (a.detach) {
        fprintf(stderr, "det: started command %s; 'det cmd logs -f %s' follows it\n", name, name);
        goto out;
    }
    fprintf(stderr,
            "det: started command %s; following its output (Ctrl-C stops following, not "
            "the command)\n",
            name);
    kd_strlcpy(api.ns, k.ns, sizeof(api.ns));
    int code = -1;
    rc = det_api_task_logs(&api, name, true, -1, NULL, NULL, &code);
    if (rc != DET_EXIT_OK)
        goto out;
    /* The stream ended with the task: its exit code is the command's. */
    struct kd_k8s_status st = {0};
    if (kd_k8s_get(k.c, &task_gvr, k.ns, name, &task, &st, err) == 0) {
        json_t *ec = det_get(task, "status.exitCode");
        if (json_is_integer(ec))
            code = (int)json_integer_value(ec);
    }
    kd_k8s_status_free(&st);
    const char *why = det_get_str(task, "status.endReason", "");
    if (code >= 0) {
        if (code != 0)
            fprintf(stderr, "det: command %s exited with code %d\n", name, code);
        rc = code;
    } else {
        det_err("command %s ended without an exit code (%s: %s)", name, why[0] ? why : "?",
                det_get_str(task, "status.message", ""));
        rc = DET_EXIT_FAILED;
    }
out:
    json_decref(cfg);
    json_decref(task);
    free(name);
    det_kube_close(&k);
    det_api_close(&api);
    return rc;
}

static int start_open(const struct noun *n, const char *name, struct det_kube *k,
                      const struct det_args *a);

/* `det notebook|shell|tensorboard start`. */
static int task_start(const struct noun *n, int argc, char **argv)
{
    static const char *const flags[] = {"--config-file", "--template", "--context",
                                        "--detach",      KUBE_FLAGS,   NULL};
    static const char *const none[] = {NULL};
    static const char *const exps[] = {"EXPERIMENT", "EXPERIMENT", "EXPERIMENT", "EXPERIMENT",
                                       NULL};
    struct det_args a = {0};
    struct det_kube k = {0};
    json_t *cfg = NULL, *experiments = NULL;
    char *name = NULL, cmd[64];
    snprintf(cmd, sizeof(cmd), "det %s start", n->name);
    bool tb = n->kind == KD_TASK_TENSORBOARD;
    int rc = det_parse_args(argc, argv, flags, tb ? exps : none, tb ? 1 : 0, task_usage, cmd, &a);
    if (rc != 0) {
        rc = det_args_exit(rc);
        goto out;
    }
    const char *dir = a.context;
    a.context = a.kube_context;
    if ((rc = det_kube_open(&a, &k)) != 0 || (rc = load_config(&k, &a, n->kind, NULL, &cfg)) != 0)
        goto out;
    if (tb) {
        experiments = json_array();
        for (int i = 0; i < a.npos; i++) {
            char *en = NULL;
            static const struct kd_k8s_gvr exp_gvr = KD_K8S_EXPERIMENTS;
            if ((rc = det_is_id(a.pos[i])
                          ? det_id_resolve(&k, false, a.pos[i], &en)
                          : det_resolve(&k, &exp_gvr, "experiment", a.pos[i], &en, NULL)) != 0)
                goto out;
            json_array_append_new(experiments, json_string(en));
            free(en);
        }
    }
    a.context = dir;
    rc = create_task(&k, &a, n->kind, cfg, experiments, &name);
    a.context = a.kube_context;
    if (rc != 0)
        goto out;
    printf("%s\n", name);
    fflush(stdout);
    if (a.detach) {
        fprintf(stderr, "det: started %s %s; 'det %s open %s' once it runs\n", n->name, name,
                n->name, name);
        goto out;
    }
    rc = start_open(n, name, &k, &a);
out:
    json_decref(cfg);
    json_decref(experiments);
    free(name);
    det_kube_close(&k);
    return rc;
}

/* ---- list, kill, logs ----------------------------------------------------------------------- */

static int by_created(const void *pa, const void *pb)
{
    const json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
    int c = strcmp(kd_k8s_meta_str(a, "creationTimestamp") ?: "",
                   kd_k8s_meta_str(b, "creationTimestamp") ?: "");
    return c != 0 ? c : strcmp(kd_k8s_meta_str(a, "name") ?: "", kd_k8s_meta_str(b, "name") ?: "");
}

static int task_list(const struct noun *n, int argc, char **argv)
{
    static const char *const flags[] = {"--all", "--output", KUBE_FLAGS, NULL};
    static const char *const pos[] = {NULL};
    struct det_verb v = {0};
    struct det_verb_spec spec = {.usage = task_usage, .flags = flags, .pos = pos, .format = true};
    char cmd[64], err[KD_ERRLEN] = "";
    struct kd_k8s_status st = {0};
    json_t *list = NULL, *rows = json_array();
    struct det_table *t = NULL;
    json_t **items = NULL;
    snprintf(cmd, sizeof(cmd), "det %s list", n->name);
    spec.cmd = cmd;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    v.a.context = v.a.kube_context;
    if ((rc = det_kube_open(&v.a, &v.k)) != 0)
        goto out;
    int r = kd_k8s_list_all(v.k.c, &task_gvr, v.k.ns, NULL, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(&v.k, r, &st, err, "list", &task_gvr, "task", NULL);
        goto out;
    }
    json_t *all = json_object_get(list, "items");
    size_t m = 0, i;
    items = kd_xcalloc(json_array_size(all) + 1, sizeof(*items));
    json_t *o;
    json_array_foreach(all, i, o)
    {
        const char *kind = det_get_str(o, "spec.kind", "");
        if (!n->all && strcmp(kind, kd_task_kind_name(n->kind)) != 0)
            continue;
        if (!v.a.all && strcmp(det_get_str(o, "status.state", ""), "TERMINATED") == 0)
            continue;
        items[m++] = o;
    }
    qsort(items, m, sizeof(*items), by_created);
    if (v.fmt != DET_FMT_TABLE) {
        for (i = 0; i < m; i++)
            json_array_append(rows, items[i]);
        rc = det_print_obj(rows, v.fmt);
        goto out;
    }
    if (m == 0) {
        fprintf(stderr, "det: no %s%s in namespace \"%s\"%s\n", n->all ? "tasks" : n->name,
                n->all || n->kind != KD_TASK_COMMAND ? "" : "s", v.k.ns,
                v.a.all ? "" : " (-a: ended ones too)");
        goto out;
    }
    t = det_table_new((const char *const[]){"ID", "KIND", "STATE", "EXIT", "SLOTS", "OWNER",
                                            "SUBMITTED", "DESCRIPTION", NULL});
    for (i = 0; i < m; i++) {
        char exitc[16] = "", slots[16] = "", when[32];
        json_t *ec = det_get(items[i], "status.exitCode");
        if (json_is_integer(ec))
            snprintf(exitc, sizeof(exitc), "%lld", (long long)json_integer_value(ec));
        enum kd_task_kind kind = KD_TASK_COMMAND;
        if (kd_task_kind_parse(det_get_str(items[i], "spec.kind", ""), &kind) == 0)
            snprintf(slots, sizeof(slots), "%d",
                     kd_task_config_slots(kind, det_get(items[i], "spec.config")));
        det_fmt_time(kd_k8s_meta_str(items[i], "creationTimestamp"), when, sizeof(when));
        const char *row[] = {kd_k8s_meta_str(items[i], "name"),
                             det_get_str(items[i], "spec.kind", ""),
                             det_get_str(items[i], "status.state", "QUEUED"),
                             exitc,
                             slots,
                             det_get_str(items[i], "spec.owner", ""),
                             when,
                             det_get_str(items[i], "spec.config.description", "")};
        det_table_row(t, row);
    }
    det_table_print(t);
out:
    free(items);
    det_table_free(t);
    json_decref(rows);
    json_decref(list);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

/* Open the kube client and resolve pos[0] among Tasks (of the noun's kind, unless `det task`). */
static int resolve(const struct noun *n, struct det_verb *v)
{
    int rc;
    v->a.context = v->a.kube_context;
    if ((rc = det_kube_open(&v->a, &v->k)) != 0 ||
        (rc = det_resolve(&v->k, &task_gvr, "task", v->a.pos[0], &v->name, &v->obj)) != 0)
        return rc;
    const char *kind = det_get_str(v->obj, "spec.kind", "");
    if (!n->all && strcmp(kind, kd_task_kind_name(n->kind)) != 0) {
        det_err("task %s is a %s, not a %s (see 'det %s list')", v->name, kind,
                kd_task_kind_name(n->kind), strcmp(kind, "command") == 0 ? "cmd" : kind);
        return DET_EXIT_NOTFOUND;
    }
    return 0;
}

static int task_kill(const struct noun *n, int argc, char **argv)
{
    static const char *const flags[] = {KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    struct det_verb v = {0};
    char cmd[64], err[KD_ERRLEN] = "";
    struct kd_k8s_status st = {0};
    json_t *patch = NULL, *task = NULL;
    snprintf(cmd, sizeof(cmd), "det %s kill", n->name);
    struct det_verb_spec spec = {
        .cmd = cmd, .usage = task_usage, .flags = flags, .pos = pos, .minpos = 1};
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0 || (rc = resolve(n, &v)) != 0)
        goto out;
    rc = DET_EXIT_OK;
    patch = json_pack("{s:{s:b}}", "spec", "killed", 1);
    int r = kd_k8s_patch(v.k.c, &task_gvr, v.k.ns, v.name, NULL, KD_K8S_PATCH_MERGE, patch, NULL,
                         &st, err);
    if (r != 0) {
        rc = det_kube_fail(&v.k, r, &st, err, "patch", &task_gvr, "task", v.name);
        goto out;
    }
    /* The controller deletes its pod at once: wait (a little) until the task says it ended. */
    int64_t until = kd_mono_ms() + 30000;
    const char *state = "";
    while (kd_mono_ms() < until) {
        json_decref(task);
        task = NULL;
        if (kd_k8s_get(v.k.c, &task_gvr, v.k.ns, v.name, &task, NULL, NULL) != 0)
            break;
        state = det_get_str(task, "status.state", "");
        if (strcmp(state, "TERMINATED") == 0)
            break;
        kd_sleep_ms(200);
    }
    if (strcmp(state, "TERMINATED") == 0)
        fprintf(stderr, "det: task %s killed (%s)\n", v.name,
                det_get_str(task, "status.endReason", ""));
    else
        fprintf(stderr, "det: asked kdet-controller to kill task %s (it is %s)\n", v.name,
                state[0] ? state : "QUEUED");
out:
    json_decref(patch);
    json_decref(task);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

static int task_logs(const struct noun *n, int argc, char **argv)
{
    static const char *const flags[] = {"--follow", "--tail", "--grep", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    struct det_verb v = {0};
    char cmd[64];
    long tail = -1;
    size_t printed = 0;
    snprintf(cmd, sizeof(cmd), "det %s logs", n->name);
    struct det_verb_spec spec = {
        .cmd = cmd, .usage = task_usage, .flags = flags, .pos = pos, .minpos = 1};
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if (det_parse_tail(v.a.tail, &tail) != 0) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = resolve(n, &v)) != 0 || (rc = det_api_open(&v.a, cmd, &v.api)) != 0)
        goto out;
    kd_strlcpy(v.api.ns, v.k.ns, sizeof(v.api.ns));
    rc = det_api_task_logs(&v.api, v.name, v.a.follow, tail, v.a.grep, &printed, NULL);
    if (rc == DET_EXIT_OK && printed == 0 && !v.a.follow)
        det_err("task %s has no stored logs%s", v.name,
                v.a.grep != NULL ? " matching --grep" : " yet");
out:
    det_verb_end(&v);
    return rc;
}

/* ---- open: the proxy ------------------------------------------------------------------------ */

/* A one-minute sign-in link to the task's proxy path (the controller API makes the ticket). */
static int task_url(struct det_api *api, const char *ns, const char *name, char **url)
{
    struct kd_buf p = KD_BUF_INIT(1024);
    json_t *ans = NULL;
    int rc;
    *url = NULL;
    if (kd_buf_puts(&p, "/api/v1/namespaces/") != 0 || det_urlencode(&p, ns) != 0 ||
        kd_buf_puts(&p, "/tasks/") != 0 || det_urlencode(&p, name) != 0 ||
        kd_buf_puts(&p, "/proxy-ticket") != 0) {
        det_err("task name too long");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    if ((rc = det_api_request(api, "POST", kd_buf_str(&p), &ans)) != 0)
        goto out;
    const char *path = json_string_value(json_object_get(ans, "url"));
    if (path == NULL) {
        det_err("the controller API's answer has no url");
        rc = DET_EXIT_ERROR;
        goto out;
    }
    *url = kd_xasprintf("%s%s", api->url, path);
out:
    kd_buf_free(&p);
    json_decref(ans);
    return rc;
}

/* After start: a notebook's or TensorBoard's URL, a shell's session. */
static int start_open(const struct noun *n, const char *name, struct det_kube *k,
                      const struct det_args *a)
{
    json_t *task = NULL;
    struct det_api api = {0};
    char *url = NULL;
    int rc = wait_running(k, name, &task);
    if (rc != 0)
        goto out;
    if (n->kind == KD_TASK_SHELL) {
        rc = det_shell_ssh(k, name, task, NULL, 0);
        goto out;
    }
    if ((rc = det_api_open(a, "det open", &api)) != 0)
        goto out;
    kd_strlcpy(api.ns, k->ns, sizeof(api.ns));
    if ((rc = task_url(&api, k->ns, name, &url)) != 0)
        goto out;
    fprintf(stderr, "det: %s %s runs; open it (the link signs you in once, for a minute):\n",
            n->name, name);
    printf("%s\n", url);
out:
    free(url);
    json_decref(task);
    det_api_close(&api);
    return rc;
}

static int task_open(const struct noun *n, int argc, char **argv)
{
    static const char *const flags[] = {KUBE_FLAGS, NULL};
    static const char *const pos[] = {"ID", NULL};
    struct det_verb v = {0};
    char cmd[64], *url = NULL;
    int opt_end = argc, cmd_at = argc;
    snprintf(cmd, sizeof(cmd), "det %s open", n->name);
    struct det_verb_spec spec = {
        .cmd = cmd, .usage = task_usage, .flags = flags, .pos = pos, .minpos = 1};
    if (n->kind == KD_TASK_SHELL) {
        /* det shell open ID [-- COMMAND...] */
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "--") == 0) {
                opt_end = i;
                cmd_at = i + 1;
                break;
            }
        }
    }
    int rc = det_verb_begin(&v, opt_end, argv, &spec);
    if (rc >= 0 || (rc = resolve(n, &v)) != 0)
        goto out;
    if (strcmp(det_get_str(v.obj, "status.state", ""), "RUNNING") != 0) {
        det_err("task %s is %s, not RUNNING%s%s", v.name,
                det_get_str(v.obj, "status.state", "QUEUED"),
                det_get_str(v.obj, "status.message", "")[0] ? ": " : "",
                det_get_str(v.obj, "status.message", ""));
        rc = DET_EXIT_FAILED;
        goto out;
    }
    if (n->kind == KD_TASK_SHELL) {
        rc = det_shell_ssh(&v.k, v.name, v.obj, argv + cmd_at, argc - cmd_at);
        goto out;
    }
    if ((rc = det_api_open(&v.a, cmd, &v.api)) != 0)
        goto out;
    kd_strlcpy(v.api.ns, v.k.ns, sizeof(v.api.ns));
    if ((rc = task_url(&v.api, v.k.ns, v.name, &url)) != 0)
        goto out;
    printf("%s\n", url);
out:
    free(url);
    det_verb_end(&v);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static const struct noun *noun_of(const char *s)
{
    static const struct noun nouns[] = {
        {"cmd", KD_TASK_COMMAND, false},
        {"command", KD_TASK_COMMAND, false},
        {"notebook", KD_TASK_NOTEBOOK, false},
        {"shell", KD_TASK_SHELL, false},
        {"tensorboard", KD_TASK_TENSORBOARD, false},
        {"task", KD_TASK_COMMAND, true},
    };
    for (size_t i = 0; i < sizeof(nouns) / sizeof(nouns[0]); i++)
        if (strcmp(nouns[i].name, s) == 0)
            return &nouns[i];
    return NULL;
}

int det_cmd_task(int argc, char **argv)
{
    const struct noun *n = noun_of(argv[0]);
    char help[64];
    snprintf(help, sizeof(help), "det %s", argv[0]);
    if (n == NULL || argc < 2) {
        fputs(task_usage, stderr);
        return DET_EXIT_USAGE;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0 || strcmp(verb, "help") == 0) {
        fputs(task_usage, stdout);
        return DET_EXIT_OK;
    }
    if (strcmp(verb, "list") == 0 || strcmp(verb, "ls") == 0)
        return task_list(n, argc - 1, argv + 1);
    if (strcmp(verb, "kill") == 0)
        return task_kill(n, argc - 1, argv + 1);
    if (strcmp(verb, "logs") == 0)
        return task_logs(n, argc - 1, argv + 1);
    if (!n->all && n->kind == KD_TASK_COMMAND && strcmp(verb, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (!n->all && n->kind != KD_TASK_COMMAND && strcmp(verb, "start") == 0)
        return task_start(n, argc - 1, argv + 1);
    if (!n->all && n->kind != KD_TASK_COMMAND && strcmp(verb, "open") == 0)
        return task_open(n, argc - 1, argv + 1);
    if (!n->all && n->kind == KD_TASK_SHELL && strcmp(verb, "tunnel") == 0)
        return det_shell_tunnel(argc - 1, argv + 1);
    const char *const cmd_verbs[] = {"run", "list", "kill", "logs", NULL};
    const char *const svc_verbs[] = {"start", "open", "list", "kill", "logs", NULL};
    const char *const all_verbs[] = {"list", "kill", "logs", NULL};
    det_usage_suggest("verb", verb,
                      n->all                       ? all_verbs
                      : n->kind == KD_TASK_COMMAND ? cmd_verbs
                                                   : svc_verbs,
                      help);
    return DET_EXIT_USAGE;
}
