/*
 * kdet-launch's command line (see args.h). The grammar follows Determined's
 * launchers: options, then an optional form word whose overrides end at the
 * first `--`, then `--trial FILE:CLASS` or the worker's own command line.
 */
#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"

static const char *const options[] = {"--nproc", "--grace-period", "--trial", "--help", NULL};

static const struct {
    const char *word;
    enum kd_launch_form form;
    const char *program;
} forms[] = {
    {"torch_distributed", KD_FORM_TORCH, "torchrun"},
    {"deepspeed", KD_FORM_DEEPSPEED, "deepspeed"},
    {"horovod", KD_FORM_HOROVOD, "horovodrun"},
};

const char *kd_launch_form_program(enum kd_launch_form form)
{
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        if (forms[i].form == form)
            return forms[i].program;
    }
    return NULL;
}

/* "--name=value" or "--name value": the value, advancing *i past it. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val, char *err)
{
    size_t n = strlen(name);
    int rc = 0;
    if (argv[*i][n] == '=') {
        *val = argv[*i] + n + 1;
    } else if (*i + 1 < argc) {
        *val = argv[++*i];
    } else {
        rc = kd_seterr(err, KD_EINVAL, "argument %d: %s needs a value", *i, name);
    }
    return rc;
}

static int is_opt(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

static int check_trial(const char *v, int pos, char *err)
{
    int rc = 0;
    const char *colon = strrchr(v, ':');
    if (colon == NULL || colon == v || colon[1] == '\0') {
        rc = kd_seterr(err, KD_EINVAL,
                       "argument %d: --trial %s: expected FILE:CLASS, such as model_def.py:MyTrial",
                       pos, kd_logq(v));
        goto out;
    }
    for (const char *p = colon + 1; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (p > colon + 1 && ((c >= '0' && c <= '9') || c == '.'));
        if (!ok) {
            rc = kd_seterr(err, KD_EINVAL,
                           "argument %d: --trial %s: CLASS %s is not a Python class name", pos,
                           kd_logq(v), kd_logq(colon + 1));
            goto out;
        }
    }
out:
    return rc;
}

/* The command part: `--trial FILE:CLASS` alone, or SCRIPT [ARGS...]. */
static int parse_command(int argc, char **argv, int i, struct kd_launch_args *a, char *err)
{
    int rc = 0;
    if (i >= argc) {
        rc = kd_seterr(err, KD_EINVAL,
                       "no command: give --trial FILE:CLASS or SCRIPT [ARGS...] to run in each "
                       "worker");
        goto out;
    }
    if (is_opt(argv[i], "--trial")) {
        int pos = i;
        if ((rc = opt_value(argc, argv, &i, "--trial", &a->trial, err)) < 0)
            goto out;
        if ((rc = check_trial(a->trial, pos, err)) < 0)
            goto out;
        if (i + 1 < argc) {
            rc = kd_seterr(err, KD_EINVAL,
                           "argument %d: %s: nothing may follow --trial FILE:CLASS (give either "
                           "--trial or a SCRIPT, not both)",
                           i + 1, kd_logq(argv[i + 1]));
            goto out;
        }
        goto out;
    }
    a->script = argv + i;
    a->nscript = argc - i;
    if (argv[i][0] == '\0')
        rc = kd_seterr(err, KD_EINVAL, "argument %d: the SCRIPT is an empty string", i);
out:
    return rc;
}

int kd_launch_parse_args(int argc, char **argv, struct kd_launch_args *a, char *err)
{
    int rc = 0;
    int i = 1;
    const char *v;
    memset(a, 0, sizeof(*a));
    a->grace_s = -1;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            rc = parse_command(argc, argv, i + 1, a, err);
            goto out;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            a->help = true;
            goto out;
        }
        if (is_opt(arg, "--nproc")) {
            int pos = i;
            if ((rc = opt_value(argc, argv, &i, "--nproc", &v, err)) < 0)
                goto out;
            if (kd_parse_int(v, &a->nproc) < 0 || a->nproc < 1 || a->nproc > KD_LAUNCH_MAX_NPROC) {
                rc = kd_seterr(err, KD_EINVAL,
                               "argument %d: --nproc %s: must be an integer from 1 to %d", pos,
                               kd_logq(v), KD_LAUNCH_MAX_NPROC);
                goto out;
            }
            continue;
        }
        if (is_opt(arg, "--grace-period")) {
            int pos = i;
            if ((rc = opt_value(argc, argv, &i, "--grace-period", &v, err)) < 0)
                goto out;
            if (kd_parse_double(v, &a->grace_s) < 0 || !(a->grace_s >= 0) ||
                a->grace_s > KD_LAUNCH_MAX_GRACE_S) {
                rc = kd_seterr(err, KD_EINVAL,
                               "argument %d: --grace-period %s: must be a number of seconds "
                               "from 0 to %.0f",
                               pos, kd_logq(v), KD_LAUNCH_MAX_GRACE_S);
                goto out;
            }
            continue;
        }
        if (is_opt(arg, "--trial")) {
            rc = parse_command(argc, argv, i, a, err);
            goto out;
        }
        if (arg[0] == '-' && arg[1] != '\0') {
            char name[64];
            kd_strlcpy(name, arg, sizeof(name));
            char *eq = strchr(name, '=');
            if (eq != NULL)
                *eq = '\0';
            const char *sugg = kd_suggest(name, options);
            for (size_t k = 0; sugg == NULL && strlen(name) >= 3 && options[k]; k++) {
                if (kd_str_has_prefix(options[k], name))
                    sugg = options[k]; /* an abbreviation */
            }
            rc = kd_seterr(err, KD_EINVAL, "argument %d: unknown option %s%s%s%s", i, kd_logq(name),
                           sugg ? " (did you mean " : "", sugg ? sugg : "", sugg ? "?)" : "");
            goto out;
        }
        break;
    }
    if (i < argc) {
        for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
            if (strcmp(argv[i], forms[f].word) != 0)
                continue;
            a->form = forms[f].form;
            i++;
            /* Overrides run to the first `--`; without one there are none. */
            int sep = -1;
            for (int j = i; j < argc && sep < 0; j++) {
                if (strcmp(argv[j], "--") == 0)
                    sep = j;
            }
            if (sep >= 0) {
                a->overrides = argv + i;
                a->noverrides = sep - i;
                i = sep + 1;
            }
            break;
        }
    }
    rc = parse_command(argc, argv, i, a, err);
out:
    return rc;
}

char **kd_launch_worker_cmd(const struct kd_launch_args *a, const struct kd_launch_env *e)
{
    char **cmd;
    if (a->trial != NULL) {
        cmd = kd_xcalloc(6, sizeof(char *));
        cmd[0] = (char *)e->python;
        cmd[1] = (char *)"-m";
        cmd[2] = (char *)"kdet.harness";
        cmd[3] = (char *)"--trial";
        cmd[4] = (char *)a->trial;
        cmd[5] = NULL;
    } else {
        cmd = kd_xcalloc((size_t)a->nscript + 1, sizeof(char *));
        for (int i = 0; i < a->nscript; i++)
            cmd[i] = a->script[i];
        cmd[a->nscript] = NULL;
    }
    return cmd;
}

/* A growing argv of owned strings. */
struct vec {
    char **v;
    size_t n, cap;
};

static void push(struct vec *v, const char *s)
{
    if (v->n + 2 > v->cap) {
        v->cap = v->cap ? v->cap * 2 : 32;
        v->v = kd_xrealloc(v->v, v->cap * sizeof(char *));
    }
    v->v[v->n++] = kd_xstrdup(s);
    v->v[v->n] = NULL;
}

static void pushf(struct vec *v, const char *fmt, int x)
{
    char num[32];
    snprintf(num, sizeof(num), fmt, x);
    push(v, num);
}

/* horovodrun -H: host:slots for every node, from KDET_NODE_ADDRS. */
static int horovod_hosts(const struct kd_launch_env *e, int nproc, struct vec *v, char *err)
{
    int rc = 0;
    const char *addrs = getenv("KDET_NODE_ADDRS");
    struct kd_buf hosts = KD_BUF_INIT(KD_LAUNCH_MAX_NODES * 16);
    if (e->num_nodes == 1 && (addrs == NULL || addrs[0] == '\0')) {
        if (kd_buf_printf(&hosts, "localhost:%d", nproc) < 0)
            goto toobig;
        goto done;
    }
    if (addrs == NULL || addrs[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL,
                       "horovod with KDET_NUM_NODES=%d needs KDET_NODE_ADDRS, the comma-separated "
                       "addresses of all nodes in node-rank order",
                       e->num_nodes);
        goto out;
    }
    int count = 0;
    const char *p = addrs;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        count++;
        if (len == 0 || len > KD_LAUNCH_MAX_ADDR || memchr(p, ':', len) != NULL ||
            memchr(p, ' ', len) != NULL) {
            rc = kd_seterr(err, KD_EINVAL,
                           "KDET_NODE_ADDRS: entry %d is not a host name or IPv4 address "
                           "(empty, too long, or containing ':' or a space)",
                           count);
            goto out;
        }
        if (hosts.len > 0 && kd_buf_putc(&hosts, ',') < 0)
            goto toobig;
        if (kd_buf_append(&hosts, p, len) < 0 || kd_buf_printf(&hosts, ":%d", nproc) < 0)
            goto toobig;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (count != e->num_nodes) {
        rc = kd_seterr(err, KD_EINVAL, "KDET_NODE_ADDRS: %d addresses for KDET_NUM_NODES=%d", count,
                       e->num_nodes);
        goto out;
    }
done:
    push(v, "-H");
    push(v, kd_buf_str(&hosts));
    goto out;
toobig:
    rc = kd_seterr(err, KD_EINVAL, "KDET_NODE_ADDRS: longer than %d bytes",
                   KD_LAUNCH_MAX_NODES * 16);
out:
    kd_buf_free(&hosts);
    return rc;
}

int kd_launch_upstream_argv(const struct kd_launch_args *a, const struct kd_launch_env *e,
                            int nproc, const char *wrap_rank, char ***out, char *err)
{
    struct vec v = {0};
    int rc = 0;
    const char *rankvars = "RANK";
    *out = NULL;
    switch (a->form) {
    case KD_FORM_TORCH:
        push(&v, "torchrun");
        push(&v, "--nnodes");
        pushf(&v, "%d", e->num_nodes);
        push(&v, "--nproc_per_node");
        pushf(&v, "%d", nproc);
        push(&v, "--node_rank");
        pushf(&v, "%d", e->node_rank);
        push(&v, "--master_addr");
        push(&v, e->chief_addr);
        push(&v, "--master_port");
        pushf(&v, "%d", e->master_port);
        push(&v, "--max_restarts");
        push(&v, "0");
        break;
    case KD_FORM_DEEPSPEED:
        push(&v, "deepspeed");
        push(&v, "--num_nodes");
        pushf(&v, "%d", e->num_nodes);
        push(&v, "--num_gpus");
        pushf(&v, "%d", nproc);
        push(&v, "--master_addr");
        push(&v, e->chief_addr);
        push(&v, "--master_port");
        pushf(&v, "%d", e->master_port);
        if (e->num_nodes > 1) {
            /* Every pod runs its own deepspeed launcher: no ssh between pods. */
            push(&v, "--node_rank");
            pushf(&v, "%d", e->node_rank);
            push(&v, "--no_ssh");
        }
        push(&v, "--no_python");
        push(&v, "--no_local_rank");
        break;
    case KD_FORM_HOROVOD:
        push(&v, "horovodrun");
        push(&v, "-np");
        pushf(&v, "%d", e->num_nodes * nproc);
        if ((rc = horovod_hosts(e, nproc, &v, err)) < 0)
            goto out;
        rankvars = "HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK";
        break;
    default: rc = kd_seterr(err, KD_EINVAL, "not an upstream launcher form"); goto out;
    }
    for (int i = 0; i < a->noverrides; i++)
        push(&v, a->overrides[i]);
    if (a->form == KD_FORM_TORCH)
        push(&v, "--no_python");
    if (a->form == KD_FORM_DEEPSPEED)
        push(&v, "--");
    push(&v, wrap_rank);
    push(&v, rankvars);
    char **cmd = kd_launch_worker_cmd(a, e);
    for (char **c = cmd; *c; c++)
        push(&v, *c);
    free(cmd);
    *out = v.v;
    v.v = NULL;
out:
    kd_launch_argv_free(v.v);
    return rc;
}

void kd_launch_argv_free(char **argv)
{
    if (argv == NULL)
        return;
    for (char **p = argv; *p; p++)
        free(*p);
    free(argv);
}
