/*
 * det's argument parser: every verb accepts a subset of one set of
 * options, so the spelling (--opt VALUE, --opt=VALUE, short forms), the
 * "did you mean" suggestions and the error messages are the same everywhere.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/str.h"

struct opt {
    const char *name;
    const char *shortname;
    bool value;
};

static const struct opt opts[] = {
    {"--kubeconfig", NULL, true},
    {"--context", NULL, true},
    {"--namespace", "-n", true},
    {"--output", "-o", true},
    {"--timeout", NULL, true},
    {"--template", NULL, true},
    {"--data-dir", NULL, true},
    {"--port", NULL, true},
    {"--gpus", NULL, true},
    {"--kind", NULL, true},
    {"--metric", NULL, true},
    {"--downsample", NULL, true},
    {"--trial", NULL, true},
    {"--priority", NULL, true},
    {"--ahead-of", NULL, true},
    {"--behind-of", NULL, true},
    {"--resource-pool", NULL, true},
    {"--save-experiment-best", NULL, true},
    {"--save-trial-best", NULL, true},
    {"--save-trial-latest", NULL, true},
    {"--tail", NULL, true},
    {"--grep", NULL, true},
    {"--best", NULL, true},
    {"--namespaces", NULL, true},
    {"--description", NULL, true},
    {"--token-file", NULL, true},
    {"--user", NULL, true},
    {"--workspace", NULL, true},
    {"--project", NULL, true},
    {"--config-file", NULL, true},
    {"--kube-context", NULL, true},
    {"--label", NULL, true},
    {"--add-label", NULL, true},
    {"--remove-label", NULL, true},
    {"--name", NULL, true},
    {"--comment", NULL, true},
    {"--metadata", NULL, true},
    {"--order", NULL, true},
    {"--json", NULL, false},
    {"--detach", "-d", false},
    {"--admin", NULL, false},
    {"--no-admin", NULL, false},
    {"--plain-http", NULL, false},
    {"--all", "-a", false},
    {"--yes", "-y", false},
    {"--follow", "-f", false},
    {"--dry-run", NULL, false},
    {"--paused", NULL, false},
    {"--test", NULL, false},
    {"--local", NULL, false},
    {"--help", "-h", false},
    {NULL, NULL, false},
};

static bool allowed(const char *name, const char *const *flags)
{
    if (strcmp(name, "--help") == 0)
        return true;
    for (size_t i = 0; flags[i]; i++)
        if (strcmp(flags[i], name) == 0)
            return true;
    return false;
}

static void set(struct det_args *a, const char *name, const char *v)
{
    if (strcmp(name, "--kubeconfig") == 0)
        a->kubeconfig = v;
    else if (strcmp(name, "--context") == 0)
        a->context = v;
    else if (strcmp(name, "--namespace") == 0)
        a->ns = v;
    else if (strcmp(name, "--output") == 0)
        a->output = v;
    else if (strcmp(name, "--timeout") == 0)
        a->timeout = v;
    else if (strcmp(name, "--template") == 0)
        a->template_ref = v;
    else if (strcmp(name, "--data-dir") == 0)
        a->data_dir = v;
    else if (strcmp(name, "--port") == 0)
        a->port = v;
    else if (strcmp(name, "--gpus") == 0)
        a->gpus = v;
    else if (strcmp(name, "--kind") == 0)
        a->kind = v;
    else if (strcmp(name, "--metric") == 0)
        a->metric = v;
    else if (strcmp(name, "--downsample") == 0)
        a->downsample = v;
    else if (strcmp(name, "--trial") == 0)
        a->trial = v;
    else if (strcmp(name, "--priority") == 0)
        a->priority = v;
    else if (strcmp(name, "--ahead-of") == 0)
        a->ahead_of = v;
    else if (strcmp(name, "--behind-of") == 0)
        a->behind_of = v;
    else if (strcmp(name, "--resource-pool") == 0)
        a->resource_pool = v;
    else if (strcmp(name, "--save-experiment-best") == 0)
        a->save_experiment_best = v;
    else if (strcmp(name, "--save-trial-best") == 0)
        a->save_trial_best = v;
    else if (strcmp(name, "--save-trial-latest") == 0)
        a->save_trial_latest = v;
    else if (strcmp(name, "--tail") == 0)
        a->tail = v;
    else if (strcmp(name, "--grep") == 0)
        a->grep = v;
    else if (strcmp(name, "--best") == 0)
        a->best = v;
    else if (strcmp(name, "--namespaces") == 0)
        a->namespaces = v;
    else if (strcmp(name, "--description") == 0)
        a->description = v;
    else if (strcmp(name, "--token-file") == 0)
        a->token_file = v;
    else if (strcmp(name, "--user") == 0)
        a->user = v;
    else if (strcmp(name, "--workspace") == 0)
        a->workspace = v;
    else if (strcmp(name, "--project") == 0)
        a->project = v;
    else if (strcmp(name, "--config-file") == 0)
        a->config_file = v;
    else if (strcmp(name, "--kube-context") == 0)
        a->kube_context = v;
    else if (strcmp(name, "--label") == 0)
        a->label = v;
    else if (strcmp(name, "--add-label") == 0)
        a->add_label = v;
    else if (strcmp(name, "--remove-label") == 0)
        a->remove_label = v;
    else if (strcmp(name, "--name") == 0)
        a->name = v;
    else if (strcmp(name, "--comment") == 0)
        a->comment = v;
    else if (strcmp(name, "--metadata") == 0)
        a->metadata = v;
    else if (strcmp(name, "--order") == 0)
        a->order = v;
    else if (strcmp(name, "--json") == 0)
        a->json = true;
    else if (strcmp(name, "--detach") == 0)
        a->detach = true;
    else if (strcmp(name, "--admin") == 0)
        a->admin = true;
    else if (strcmp(name, "--no-admin") == 0)
        a->no_admin = true;
    else if (strcmp(name, "--plain-http") == 0)
        a->plain_http = true;
    else if (strcmp(name, "--all") == 0)
        a->all = true;
    else if (strcmp(name, "--yes") == 0)
        a->yes = true;
    else if (strcmp(name, "--follow") == 0)
        a->follow = true;
    else if (strcmp(name, "--dry-run") == 0)
        a->dry_run = true;
    else if (strcmp(name, "--paused") == 0)
        a->paused = true;
    else if (strcmp(name, "--test") == 0)
        a->test = true;
    else if (strcmp(name, "--local") == 0)
        a->local = true;
}

int det_parse_args(int argc, char **argv, const char *const *flags, const char *const *posnames,
                   int minpos, const char *usage, const char *cmd, struct det_args *a)
{
    int rc = 0, maxpos = 0;
    while (posnames[maxpos] != NULL && maxpos < DET_MAX_POS)
        maxpos++;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (s[0] != '-' || s[1] == '\0') {
            if (a->npos >= maxpos) {
                if (maxpos == 0)
                    det_err("unexpected argument \"%s\": %s takes no arguments (see '%s --help')",
                            s, cmd, cmd);
                else
                    det_err("unexpected argument \"%s\": %s takes %s%s%s%s (see '%s --help')", s,
                            cmd, posnames[0], maxpos > 1 ? " and " : "",
                            maxpos > 1 ? posnames[1] : "", maxpos > 2 ? " ..." : "", cmd);
                rc = KD_EINVAL;
                goto out;
            }
            a->pos[a->npos++] = s;
            continue;
        }
        const struct opt *o = NULL;
        const char *val = NULL;
        for (size_t j = 0; opts[j].name && o == NULL; j++) {
            size_t n = strlen(opts[j].name);
            if (strcmp(s, opts[j].name) == 0 ||
                (opts[j].shortname && strcmp(s, opts[j].shortname) == 0))
                o = &opts[j];
            else if (opts[j].value && strncmp(s, opts[j].name, n) == 0 && s[n] == '=') {
                o = &opts[j];
                val = s + n + 1;
            }
        }
        if (o == NULL || !allowed(o->name, flags)) {
            det_usage_suggest("option", s, flags, cmd);
            rc = KD_EINVAL;
            goto out;
        }
        if (strcmp(o->name, "--help") == 0) {
            fputs(usage, stdout);
            rc = 1;
            goto out;
        }
        if (o->value && val == NULL) {
            if (i + 1 >= argc) {
                det_err("%s needs a value (see '%s --help')", s, cmd);
                rc = KD_EINVAL;
                goto out;
            }
            val = argv[++i];
        }
        set(a, o->name, val);
    }
    if (a->npos < minpos) {
        char missing[256] = "";
        for (int i = a->npos; i < minpos; i++) {
            size_t n = strlen(missing);
            snprintf(missing + n, sizeof(missing) - n, "%s%s", i > a->npos ? " and " : "",
                     posnames[i]);
        }
        det_err("missing %s (see '%s --help')", missing, cmd);
        rc = KD_EINVAL;
    }
out:
    return rc;
}

int det_args_exit(int r)
{
    return r == 1 ? DET_EXIT_OK : DET_EXIT_USAGE;
}
