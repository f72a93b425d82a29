/*
 * The launcher's environment contract: the KDET_* inputs the controller
 * sets in a trial's pod, their defaults and checks, the slot count, and the
 * environment each worker starts with (see docs/launcher.md).
 */
#ifndef KD_LAUNCHER_ENV_H
#define KD_LAUNCHER_ENV_H

#include <stdbool.h>

#include "core/err.h"

/* Hard caps on the inputs. */
#define KD_LAUNCH_MAX_NODES 65536
#define KD_LAUNCH_MAX_NPROC 1024
#define KD_LAUNCH_MAX_GRACE_S 86400.0
#define KD_LAUNCH_MAX_ADDR 253   /* a DNS name or an IP address */
#define KD_LAUNCH_MAX_RUN_ID 128 /* [A-Za-z0-9._-] */
#define KD_LAUNCH_MAX_HPARAMS (1 << 20)
#define KD_LAUNCH_MAX_VALUE 4096 /* trial id, experiment, controller URL, token */

#define KD_LAUNCH_DEFAULT_PORT 29400
#define KD_LAUNCH_DEFAULT_GRACE_S 10.0
#define KD_LAUNCH_DEFAULT_ADDR "127.0.0.1"

/** The resolved inputs of one launch. */
struct kd_launch_env {
    int node_rank;           /* KDET_NODE_RANK, default 0 */
    int num_nodes;           /* KDET_NUM_NODES, default 1 */
    int master_port;         /* the rendezvous port (see port_source) */
    const char *port_source; /* "KDET_MASTER_PORT", "MASTER_PORT", "default" or "picked" */
    double grace_s;          /* KDET_GRACE_PERIOD, default 10 */
    bool run_id_made;        /* KDET_RUN_ID was absent and was generated */
    bool token_set;          /* KDET_TOKEN is present (never its value) */
    const char *trial;       /* KDET_TRIAL_ID or NULL (points into environ) */
    const char *python;      /* KDET_PYTHON, default "python3" */
    char chief_addr[KD_LAUNCH_MAX_ADDR + 1];
    char run_id[KD_LAUNCH_MAX_RUN_ID + 1];
};

/**
 * Read and check the KDET_* inputs from the process environment, apply the
 * defaults and generate KDET_RUN_ID when absent. Registers KDET_TOKEN with
 * kd_log_add_secret. Returns 0, or KD_EINVAL with err naming the variable,
 * its value (never the token's) and what is wrong. Not thread-safe (reads
 * environ).
 */
int kd_launch_env_load(struct kd_launch_env *e, char *err) KD_WUR;

/**
 * On a single node (num_nodes == 1) whose port was not chosen on purpose
 * (port_source "default": neither MASTER_PORT set nor KDET_MASTER_PORT set
 * to other than 29400), pick a free port: bind a TCP socket to port 0 on
 * all addresses (where libdtrain's rank 0 listens), read the port the
 * kernel gave, close it; port_source becomes "picked". Trial pods that
 * share a host network then do not all listen on 29400. Otherwise does
 * nothing. Returns 0, or -errno with err set (e is then unchanged). The
 * port is free when picked; another process could take it before rank 0
 * binds it, as with torchrun's own free-port choice.
 */
int kd_launch_env_pick_port(struct kd_launch_env *e, char *err) KD_WUR;

/**
 * Count the devices in a CUDA_VISIBLE_DEVICES value: -1 when val is NULL
 * (unset), else the number of comma-separated entries up to the first
 * empty or invalid one ("", "-1", "none", "void" and "NoDevFiles" give 0).
 */
int kd_launch_cuda_count(const char *val);

/**
 * The number of local workers: nproc_flag when > 0, else the devices in
 * CUDA_VISIBLE_DEVICES when set (at least 1), else the NVML device count
 * (libnvidia-ml.so.1 loaded with dlopen; absent or failing: skipped), else
 * 1. *source (may be NULL) names where the count came from.
 */
int kd_launch_slots(int nproc_flag, const char **source);

/**
 * The NVML device count, or a negative code when libnvidia-ml.so.1 cannot
 * be loaded or fails. Never aborts.
 */
int kd_launch_nvml_count(void);

/**
 * The environment of worker `local_rank` out of nproc: the launcher's own
 * environment with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
 * GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the resolved
 * KDET_* values set (replacing any inherited ones), PYTHONUNBUFFERED=1
 * unless already set, and the Python package's directory
 * (<bindir>/../lib/python, when it holds kdet/__init__.py) appended to
 * PYTHONPATH. Returns a NULL-terminated array the caller frees with
 * kd_launch_envp_free. Aborts on out-of-memory (kd_xmalloc).
 */
char **kd_launch_worker_env(const struct kd_launch_env *e, int nproc, int local_rank);

/**
 * Export the resolved KDET_* values (node rank, number of nodes, chief
 * address, master port, run id, grace period) and the PYTHONPATH workers
 * get (see kd_launch_worker_env) into this process's own environment, for
 * the forms that exec an upstream launcher. 0 or -errno.
 */
int kd_launch_env_export(const struct kd_launch_env *e) KD_WUR;

/** Free an array from kd_launch_worker_env; NULL-safe. */
void kd_launch_envp_free(char **envp);

#endif
