/*
 * det: entry point. Parses the noun, hands the rest of the command line to
 * the noun's handler, and keeps the global help and exit codes in one place.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/log.h"
#include "core/str.h"

#define DET_VERSION "0.1.0"

static const char usage[] =
    "usage: det [--help] [--version] COMMAND ...\n"
    "\n"
    "kdet's command line: experiments on Kubernetes in Determined's format.\n"
    "\n"
    "commands:\n"
    "  experiment (e)  det experiment create CONFIG CONTEXT_DIR [--template FILE|NAME] "
    "[--dry-run]\n"
    "                  det experiment list | describe | pause | activate | cancel | kill |\n"
    "                                 archive | unarchive | delete | wait | logs |\n"
    "                                 set gc-policy\n"
    "  trial (t)       det trial list EXPERIMENT | describe TRIAL |\n"
    "                            logs TRIAL [-f] [--tail N] [--grep RE] |\n"
    "                            metrics TRIAL [--kind K] [--metric M] [--downsample N] |\n"
    "                            profiler TRIAL [--kind system|timing] [--tail N] |\n"
    "                            kill TRIAL\n"
    "  checkpoint (c)  det checkpoint list EXPERIMENT|--trial T | describe UUID |\n"
    "                                 download UUID [-o DIR]\n"
    "  model (m)       det model create NAME | list | describe NAME [--best METRIC] |\n"
    "                            register-version NAME CHECKPOINT_UUID | update | delete |\n"
    "                            list-versions | update-version | delete-version |\n"
    "                            download NAME[:VERSION] [-o DIR]\n"
    "  job (j)         det job list | update JOB --priority N|--ahead-of J|--behind-of J|\n"
    "                                 --resource-pool P | update-batch [FILE]\n"
    "  template        det template set NAME FILE | list | describe NAME | rm NAME\n"
    "  deploy          det deploy local up | down | status [--data-dir DIR] [--port N]\n"
    "  agent (a)       det agent list: nodes, their resource pool, slot type (gpu|cpu), slots\n"
    "  slot            det slot list: every slot, its type and the trial holding it\n"
    "  user            det user create NAME [--namespaces NS,...] [--admin] | list |\n"
    "                           update NAME | whoami | login | logout\n"
    "  token           det token create [--user NAME] | list | revoke ID\n"
    "  cmd             det cmd run [--config-file F] [--context DIR] COMMAND... | list | kill |\n"
    "                          logs: a command on the cluster, its output and exit code\n"
    "  notebook        det notebook start | open | list | kill | logs: Jupyter notebooks\n"
    "  shell           det shell start | open ID [-- CMD] | list | kill: SSH shells\n"
    "  tensorboard     det tensorboard start EXPERIMENT... | open | list | kill\n"
    "  task            det task list [-a] | kill | logs: every kind of task\n"
    "\n"
    "det talks to the Kubernetes API through kubeconfig ($KUBECONFIG, ~/.kube/config,\n"
    "--kubeconfig, --context, -n/--namespace), like kubectl; trial metrics and checkpoint\n"
    "read kdet-controller's API ($KDET_API_URL, det user login's token or $KDET_API_TOKEN,\n"
    "$KDET_API_CA_FILE; or det deploy local's).\n"
    "\n"
    "exit codes:\n"
    "  0  success\n"
    "  1  error (I/O, internal, an API error not listed below)\n"
    "  2  usage error (unknown command or option, missing argument, ambiguous ID)\n"
    "  3  invalid experiment config, template or context directory; refused by the API server\n"
    "  4  no kubeconfig, API server unreachable, credentials or RBAC refused, CRDs not installed\n"
    "  5  the experiment, trial or template does not exist\n"
    "  6  det experiment wait: the experiment ended CANCELED or ERROR\n"
    "  7  det experiment wait: --timeout passed\n"
    "\n"
    "Run 'det COMMAND --help' for a command's options. docs/cli.md has the details.\n";

void det_err(const char *fmt, ...)
{
    va_list ap;
    fputs("det: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void det_usage_suggest(const char *what, const char *word, const char *const *cands,
                       const char *help_cmd)
{
    const char *s = kd_suggest(word, cands);
    if (s != NULL)
        det_err("unknown %s \"%s\"; did you mean \"%s\"? (see '%s --help')", what, word, s,
                help_cmd);
    else
        det_err("unknown %s \"%s\" (see '%s --help')", what, word, help_cmd);
}

int main(int argc, char **argv)
{
    static const char *const nouns[] = {
        "experiment", "trial",       "template", "checkpoint", "job", "deploy",
        "agent",      "slot",        "user",     "token",      "cmd", "notebook",
        "shell",      "tensorboard", "task",     "model",      NULL};
    int rc = DET_EXIT_USAGE;
    /* the client library's retry warnings are noise in a CLI: errors only, unless asked */
    kd_log_init("det", getenv("KDET_LOG_LEVEL") ? -1 : KD_LOG_ERROR, -1);
    if (argc < 2) {
        fputs(usage, stderr);
        goto out;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        rc = DET_EXIT_OK;
    } else if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("det %s\n", DET_VERSION);
        rc = DET_EXIT_OK;
    } else if (strcmp(cmd, "experiment") == 0 || strcmp(cmd, "e") == 0) {
        rc = det_cmd_experiment(argc - 1, argv + 1);
    } else if (strcmp(cmd, "trial") == 0 || strcmp(cmd, "t") == 0) {
        rc = det_cmd_trial(argc - 1, argv + 1);
    } else if (strcmp(cmd, "template") == 0) {
        rc = det_cmd_template(argc - 1, argv + 1);
    } else if (strcmp(cmd, "checkpoint") == 0 || strcmp(cmd, "c") == 0) {
        rc = det_cmd_checkpoint(argc - 1, argv + 1);
    } else if (strcmp(cmd, "model") == 0 || strcmp(cmd, "m") == 0) {
        rc = det_cmd_model(argc - 1, argv + 1);
    } else if (strcmp(cmd, "job") == 0 || strcmp(cmd, "j") == 0) {
        rc = det_cmd_job(argc - 1, argv + 1);
    } else if (strcmp(cmd, "deploy") == 0) {
        rc = det_cmd_deploy(argc - 1, argv + 1);
    } else if (strcmp(cmd, "agent") == 0 || strcmp(cmd, "a") == 0) {
        rc = det_cmd_agent(argc - 1, argv + 1);
    } else if (strcmp(cmd, "slot") == 0) {
        rc = det_cmd_slot(argc - 1, argv + 1);
    } else if (strcmp(cmd, "user") == 0) {
        rc = det_cmd_user(argc - 1, argv + 1);
    } else if (strcmp(cmd, "token") == 0) {
        rc = det_cmd_token(argc - 1, argv + 1);
    } else if (strcmp(cmd, "cmd") == 0 || strcmp(cmd, "command") == 0 ||
               strcmp(cmd, "notebook") == 0 || strcmp(cmd, "shell") == 0 ||
               strcmp(cmd, "tensorboard") == 0 || strcmp(cmd, "task") == 0) {
        rc = det_cmd_task(argc - 1, argv + 1);
    } else if (cmd[0] == '-') {
        det_err("unknown option \"%s\" (see 'det --help')", cmd);
    } else {
        det_usage_suggest("command", cmd, nouns, "det");
    }
out:
    return rc;
}
