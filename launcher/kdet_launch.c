/*
 * kdet-launch: the entrypoint of a trial's pod. It starts one worker per
 * slot with the torch.distributed env:// variables and kdet's own, prefixes
 * their output with their rank and fails fast; or it execs an upstream
 * launcher (torchrun, deepspeed, horovodrun) with the peer information set.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "args.h"
#include "context.h"
#include "chief.h"
#include "env.h"
#include "logship.h"
#include "service.h"
#include "supervise.h"

#define EXIT_USAGE 2

static const char usage[] =
    "usage: kdet-launch [--nproc N] [--grace-period S] [--] (--trial FILE:CLASS | SCRIPT "
    "[ARGS...])\n"
    "       kdet-launch [--nproc N] torch_distributed [TORCH_OVERRIDES... --] (--trial "
    "FILE:CLASS | SCRIPT...)\n"
    "       kdet-launch [--nproc N] deepspeed [DEEPSPEED_ARGS... --] (--trial FILE:CLASS | "
    "SCRIPT...)\n"
    "       kdet-launch [--nproc N] horovod [HVD_OVERRIDES... --] (--trial FILE:CLASS | "
    "SCRIPT...)\n"
    "\n"
    "Starts one worker per slot, each with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,\n"
    "GROUP_RANK, MASTER_ADDR, MASTER_PORT and the KDET_* inputs set; prefixes every output\n"
    "line with [rank=R]; when a worker fails, stops the others and exits with its code.\n"
    "\n"
    "options:\n"
    "  --nproc N          workers on this node (default: the devices in CUDA_VISIBLE_DEVICES,\n"
    "                     else the NVML device count, else 1)\n"
    "  --grace-period S   seconds between SIGTERM and SIGKILL when stopping workers\n"
    "                     (default: $KDET_GRACE_PERIOD, else 10)\n"
    "  --trial FILE:CLASS run `python3 -m kdet.harness --trial FILE:CLASS` in each worker\n"
    "  -h, --help         this text\n"
    "\n"
    "inputs (environment): KDET_NODE_RANK, KDET_NUM_NODES, KDET_CHIEF_ADDR, KDET_MASTER_PORT,\n"
    "KDET_RUN_ID, KDET_TRIAL_ID, KDET_EXPERIMENT, KDET_CONTROLLER_URL, KDET_TOKEN, KDET_HPARAMS,\n"
    "KDET_TRIAL_SEED, KDET_GRACE_PERIOD, KDET_PYTHON, KDET_NODE_ADDRS (horovod), "
    "KDET_CONTEXT_ARCHIVE,\n"
    "KDET_CONTEXT_SHA256, KDET_CONTEXT_URL (file://), KDET_CONTEXT_DIR, KDET_KEEP_CONTEXT;\n"
    "tasks: KDET_TASK_ID (logs go to the task), KDET_TASK_SERVICE=1 (pick a port, report it,\n"
    "export it as KDET_TASK_PORT).\n"
    "See docs/launcher.md.\n";

/* Two pipes per worker: make sure the open-files limit allows them. */
static void raise_fd_limit(int nproc)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)nproc * 2 + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            KD_WARN("cannot raise the open-files limit", "want=%lu error=%s", (unsigned long)need,
                    kd_logq(strerror(errno)));
    }
}

/* wrap_rank installed next to this program, else the one on PATH. */
static char *wrap_rank_path(void)
{
    char self[PATH_MAX];
    char *path = NULL;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            path = kd_xasprintf("%s/wrap_rank", self);
            if (access(path, X_OK) == 0)
                goto out;
            free(path);
            path = NULL;
        }
    }
    path = kd_xstrdup("wrap_rank");
out:
    return path;
}

/* The argv as one string, cut at 4 KiB (for logs only). */
static char *join_argv(char *const *argv)
{
    struct kd_buf b = KD_BUF_INIT(4096);
    for (char *const *a = argv; *a; a++) {
        if ((a != argv && kd_buf_putc(&b, ' ') < 0) || kd_buf_puts(&b, *a) < 0)
            break; /* the log shows the command cut at the cap */
    }
    char *s = kd_buf_steal(&b);
    return s ? s : kd_xstrdup("");
}

static int missing_program(const char *name, int code, const char *hint)
{
    KD_ERROR("cannot run command", "cmd=%s error=%s hint=%s", kd_logq(name),
             kd_logq(code == -EACCES ? "not executable" : "not found"), kd_logq(hint));
    return code == -EACCES ? 126 : 127;
}

/* horovodrun drives the other nodes from the chief: stay up until told. */
static int horovod_peer_wait(const struct kd_launch_env *e)
{
    sigset_t set;
    int sig = 0;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    KD_INFO("waiting for horovodrun on the chief node", "node_rank=%d chief=%s", e->node_rank,
            e->chief_addr);
    while (sigwait(&set, &sig) != 0)
        ;
    KD_INFO("launch finished", "exit_code=0 reason=signal");
    return 0;
}

/*
 * torchrun of torch 1.x cannot parse its own default --redirects/--tee
 * ("0") on Python 3.11 and newer (Std.from_str returns None there), so it
 * fails before starting a worker. It reads the defaults from PET_REDIRECTS
 * and PET_TEE: "9:3" parses on every Python and redirects only a local
 * rank 9, like "0" for every rank below. Kept when the environment or the
 * overrides choose them (dtrain/python/kdet/launch does the same for
 * `python3 -m determined.launch.torch_distributed`).
 */
static void torchrun_std_workaround(const struct kd_launch_args *a)
{
    static const char *const opts[][3] = {{"PET_REDIRECTS", "--redirects", "-r"},
                                          {"PET_TEE", "--tee", "-t"}};
    for (size_t k = 0; k < 2; k++) {
        bool given = false;
        for (int i = 0; i < a->noverrides && !given; i++) {
            const char *o = a->overrides[i];
            size_t n = strlen(opts[k][1]);
            given = strcmp(o, opts[k][2]) == 0 || strncmp(o, opts[k][1], n) == 0;
        }
        if (!given)
            setenv(opts[k][0], "9:3", 0);
    }
}

/* The supervisor's line hook: a copy of each worker line for the controller. */
static void ship_line(const struct kd_lines *l, const char *a, size_t alen, const char *b,
                      size_t blen)
{
    kd_logship_line(l->hook_ud, l->rank, l->stream, a, alen, b, blen);
}

/* Start shipping worker lines to the controller when its API is known; NULL otherwise. */
static struct kd_logship *start_shipping(const struct kd_launch_env *e)
{
    struct kd_logship_opts lo;
    struct kd_logship *s = NULL;
    char err[KD_ERRLEN] = "";
    if (!kd_logship_from_env(&lo, e->run_id, e->node_rank))
        goto out;
    if (kd_logship_start(&lo, &s, err) != 0)
        KD_WARN("cannot ship logs to the controller", "error=%s", kd_logq(err));
    else
        KD_INFO("shipping logs to the controller", "trial=%s/%s", lo.ns, lo.trial);
out:
    return s;
}

/* Send the last lines (a failed worker's traceback among them), bounded in time. */
static void stop_shipping(struct kd_logship *s)
{
    struct kd_logship_stats st;
    if (s == NULL)
        return;
    kd_logship_stop(s, KD_LOGSHIP_FLUSH_MS, &st);
    if (st.lines_unsent > 0 || st.lines_dropped > 0 || st.lines_refused > 0)
        KD_WARN("log shipping finished with lines missing",
                "lines=%llu sent=%llu dropped=%llu refused=%llu unsent=%llu retries=%llu",
                (unsigned long long)st.lines_queued, (unsigned long long)st.lines_sent,
                (unsigned long long)st.lines_dropped, (unsigned long long)st.lines_refused,
                (unsigned long long)st.lines_unsent, (unsigned long long)st.retries);
    else
        KD_INFO("log shipping finished", "lines=%llu batches=%llu retries=%llu",
                (unsigned long long)st.lines_sent, (unsigned long long)st.batches_sent,
                (unsigned long long)st.retries);
}

/*
 * The line hook for an upstream launcher's output: the worker is the
 * "[rank=R] " wrap_rank put in the line (after the launcher's own tag, if
 * any), which the shipped copy leaves out; a line without one is the
 * launcher's own (rank -1).
 */
static void ship_upstream_line(const struct kd_lines *l, const char *a, size_t alen, const char *b,
                               size_t blen)
{
    char head[KD_LINES_UPSTREAM_TAG_MAX];
    size_t hn = alen < sizeof(head) ? alen : sizeof(head);
    memcpy(head, a, hn);
    if (hn < sizeof(head)) {
        size_t more = blen < sizeof(head) - hn ? blen : sizeof(head) - hn;
        memcpy(head + hn, b, more);
        hn += more;
    }
    size_t skip = 0;
    int rank = kd_lines_upstream_rank(head, hn, &skip);
    if (skip <= alen) {
        a += skip;
        alen -= skip;
    } else {
        b += skip - alen;
        blen -= skip - alen;
        alen = 0;
    }
    kd_logship_line(l->hook_ud, rank, l->stream, a, alen, b, blen);
}

/*
 * With log shipping, the upstream launcher runs as kdet-launch's one child
 * instead of replacing it: its output passes through unchanged and a copy
 * of each line goes to the controller; SIGTERM and SIGINT go to its process
 * group (it and its workers), and its exit status is kdet-launch's.
 */
static int supervise_upstream(char **argv, const struct kd_launch_env *e, struct kd_logship *ship)
{
    char err[KD_ERRLEN] = "";
    static const int forward[] = {SIGTERM, SIGINT, 0};
    /* rank: only for the supervisor's own lines (the launcher's lines carry no prefix). */
    struct kd_sup_worker w = {.rank = 0, .argv = argv, .envp = NULL};
    struct kd_sup_opts o = {
        .new_pgrp = true,
        .no_prefix = true,
        .grace_ms = (int64_t)(e->grace_s * 1000.0),
        .forward = forward,
        .line_hook = ship_upstream_line,
        .line_ud = ship,
    };
    struct kd_sup_result res;
    int rc = kd_sup_run(&w, 1, &o, &res, err);
    stop_shipping(ship);
    if (rc < 0) {
        KD_ERROR("cannot start the upstream launcher", "launcher=%s error=%s", kd_logq(argv[0]),
                 kd_logq(err));
        return 1;
    }
    char sig[32];
    if (res.signal_first)
        KD_WARN("launch finished", "exit_code=%d reason=signal signal=%s killed=%s", res.exit_code,
                kd_sup_signal_name(res.signal, sig, sizeof(sig)), res.killed ? "true" : "false");
    else if (res.exit_code != 0)
        KD_ERROR("launch finished", "exit_code=%d reason=launcher-failed launcher=%s",
                 res.exit_code, kd_logq(argv[0]));
    else
        KD_INFO("launch finished", "exit_code=0 launcher=%s", kd_logq(argv[0]));
    return res.exit_code;
}

static int exec_upstream(const struct kd_launch_args *a, struct kd_launch_env *e, int nproc,
                         const char *src)
{
    char err[KD_ERRLEN] = "";
    char **argv = NULL;
    char *wrap = wrap_rank_path();
    char *line = NULL;
    int code = 0;
    const char *prog = kd_launch_form_program(a->form);
    if (a->form == KD_FORM_HOROVOD && e->node_rank > 0) {
        code = horovod_peer_wait(e);
        goto out;
    }
    if (kd_launch_upstream_argv(a, e, nproc, wrap, &argv, err) < 0) {
        KD_ERROR("invalid environment", "error=%s", kd_logq(err));
        code = EXIT_USAGE;
        goto out;
    }
    int rc = kd_sup_find_program(prog);
    if (rc < 0) {
        code = missing_program(prog, rc,
                               a->form == KD_FORM_TORCH       ? "install PyTorch (python3-torch)"
                               : a->form == KD_FORM_DEEPSPEED ? "install DeepSpeed in the image"
                                                              : "install Horovod in the image");
        goto out;
    }
    if ((rc = kd_sup_find_program(wrap)) < 0) {
        code = missing_program(wrap, rc, "install wrap_rank next to kdet-launch or on PATH");
        goto out;
    }
    if (kd_launch_env_export(e) < 0) {
        KD_ERROR("cannot set environment", "error=%s", kd_logq(strerror(errno)));
        code = 1;
        goto out;
    }
    if (a->form == KD_FORM_TORCH)
        torchrun_std_workaround(a);
    line = join_argv(argv);
    struct kd_logship *ship = start_shipping(e);
    KD_INFO(ship == NULL ? "exec upstream launcher" : "starting upstream launcher",
            "launcher=%s nproc=%d nproc_source=%s node_rank=%d "
            "num_nodes=%d port=%d port_source=%s run_id=%s cmd=%s",
            prog, nproc, src, e->node_rank, e->num_nodes, e->master_port, e->port_source, e->run_id,
            kd_logq(line));
    if (ship == NULL) {
        execvp(argv[0], argv);
        code = missing_program(prog, -errno, strerror(errno));
        goto out;
    }
    code = supervise_upstream(argv, e, ship);
out:
    free(line);
    free(wrap);
    kd_launch_argv_free(argv);
    return code;
}

static int run_workers(const struct kd_launch_args *a, struct kd_launch_env *e, int nproc,
                       const char *src)
{
    struct kd_logship *ship = NULL;
    char err[KD_ERRLEN] = "";
    char **cmd = kd_launch_worker_cmd(a, e);
    char **envs[KD_LAUNCH_MAX_NPROC] = {0};
    struct kd_sup_worker ws[KD_LAUNCH_MAX_NPROC];
    char *line = NULL;
    int code = 0;
    int rc = kd_sup_find_program(cmd[0]);
    if (rc < 0) {
        code = missing_program(cmd[0], rc,
                               a->trial ? "set KDET_PYTHON to the Python interpreter"
                                        : "give a path or a program on PATH");
        goto out;
    }
    line = join_argv(cmd);
    KD_INFO("launch starting",
            "nproc=%d nproc_source=%s node_rank=%d num_nodes=%d world_size=%d chief=%s port=%d "
            "port_source=%s run_id=%s%s trial=%s grace_s=%g cmd=%s",
            nproc, src, e->node_rank, e->num_nodes, e->num_nodes * nproc, e->chief_addr,
            e->master_port, e->port_source, e->run_id,
            e->run_id_made ? " run_id_generated=true" : "", kd_logq(e->trial ? e->trial : ""),
            e->grace_s, kd_logq(line));
    raise_fd_limit(nproc);
    for (int i = 0; i < nproc; i++) {
        envs[i] = kd_launch_worker_env(e, nproc, i);
        ws[i].rank = e->node_rank * nproc + i;
        ws[i].argv = cmd;
        ws[i].envp = envs[i];
    }
    static const int forward[] = {SIGTERM, SIGINT, 0};
    struct kd_sup_opts o = {
        .new_pgrp = true,
        .stdin_null = true,
        .fail_fast = true,
        .grace_ms = (int64_t)(e->grace_s * 1000.0),
        .forward = forward,
    };
    if ((ship = start_shipping(e)) != NULL) {
        o.line_hook = ship_line;
        o.line_ud = ship;
    }
    struct kd_sup_result res;
    int sup_rc = kd_sup_run(ws, nproc, &o, &res, err);
    stop_shipping(ship);
    if (sup_rc < 0) {
        KD_ERROR("cannot start workers", "error=%s", kd_logq(err));
        code = 1;
        goto out;
    }
    code = res.exit_code;
    char sig[32];
    if (res.signal_first)
        KD_WARN("launch finished", "exit_code=%d reason=signal signal=%s killed=%s", code,
                kd_sup_signal_name(res.signal, sig, sizeof(sig)), res.killed ? "true" : "false");
    else if (res.first_rank >= 0)
        KD_ERROR("launch finished",
                 "exit_code=%d reason=worker-failed first_failed_rank=%d "
                 "killed=%s",
                 code, res.first_rank, res.killed ? "true" : "false");
    else
        KD_INFO("launch finished", "exit_code=0 workers=%d", nproc);
out:
    for (int i = 0; i < nproc; i++)
        kd_launch_envp_free(envs[i]);
    free(line);
    free(cmd);
    return code;
}

int main(int argc, char **argv)
{
    char err[KD_ERRLEN] = "";
    struct kd_launch_args a;
    struct kd_launch_env e;
    struct kd_launch_context ctx = {0};
    int code = 0;
    kd_log_init("kdet-launch", -1, -1);
    if (kd_launch_parse_args(argc, argv, &a, err) < 0) {
        fprintf(stderr, "kdet-launch: %s\nRun 'kdet-launch --help' for usage.\n", err);
        code = EXIT_USAGE;
        goto out;
    }
    if (a.help) {
        fputs(usage, stdout);
        goto out;
    }
    if (kd_launch_env_load(&e, err) < 0) {
        KD_ERROR("invalid environment", "error=%s", kd_logq(err));
        code = EXIT_USAGE;
        goto out;
    }
    if (a.grace_s >= 0)
        e.grace_s = a.grace_s;
    if (kd_launch_env_pick_port(&e, err) < 0)
        KD_WARN("keeping the default rendezvous port", "port=%d error=%s", e.master_port,
                kd_logq(err));
    if (kd_chief_via_controller(&e)) {
        int64_t t0 = kd_mono_ms(), limit = kd_chief_timeout_ms();
        if (kd_chief_resolve(&e, limit, err) < 0) {
            KD_ERROR("cannot find the chief", "node_rank=%d num_nodes=%d run_id=%s error=%s",
                     e.node_rank, e.num_nodes, e.run_id, kd_logq(err));
            code = 1;
            goto out;
        }
        KD_INFO(e.node_rank == 0 ? "chief address reported" : "chief address received",
                "node_rank=%d chief=%s port=%d run_id=%s wait_ms=%lld", e.node_rank, e.chief_addr,
                e.master_port, e.run_id, (long long)(kd_mono_ms() - t0));
    }
    if (e.run_id_made && e.num_nodes > 1)
        KD_WARN("KDET_RUN_ID is not set on a trial of several nodes",
                "num_nodes=%d run_id=%s hint=%s", e.num_nodes, e.run_id,
                kd_logq("each node generates its own id and the rendezvous rejects peers with "
                        "another one: set the same KDET_RUN_ID in every pod of the attempt"));
    if (kd_launch_context_prepare(&ctx, 0, err) < 0) {
        KD_ERROR("cannot set up the context", "error=%s", kd_logq(err));
        code = 1;
        goto out;
    }
    if (kd_service_wanted()) {
        /* A task's service: its port, known to the controller before the service starts. */
        int port = 0;
        if (kd_service_report(&e, KD_SERVICE_REPORT_MS, &port, err) < 0) {
            KD_ERROR("cannot report the task's port", "task=%s error=%s",
                     kd_logq(getenv("KDET_TASK_ID")), kd_logq(err));
            code = 1;
            goto out;
        }
        KD_INFO("task port reported", "task=%s port=%d run_id=%s", kd_logq(getenv("KDET_TASK_ID")),
                port, e.run_id);
    }
    const char *src = NULL;
    int nproc = kd_launch_slots(a.nproc, &src);
    if (a.form != KD_FORM_PLAIN)
        code = exec_upstream(&a, &e, nproc, src);
    else
        code = run_workers(&a, &e, nproc, src);
out:
    kd_launch_context_done(&ctx);
    kd_log_clear_secrets();
    return code;
}
