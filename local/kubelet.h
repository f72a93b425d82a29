/*
 * kdet-local's process kubelet: registers one Node for this machine, keeps
 * its Lease fresh, schedules pending pods onto it (scheduler.h), and runs each
 * container's command as a local process group (the image is ignored),
 * writing pod status the way the real kubelet does.
 */
#ifndef KD_LOCAL_KUBELET_H
#define KD_LOCAL_KUBELET_H

#include "core/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kd_store;
struct kd_kubelet;
struct kd_k8s_client;

struct kd_kubelet_opts {
    const char *node_name;  /* NULL: the host name */
    const char *state_dir;  /* pod directories and container logs (required) */
    int fake_gpus;          /* < 0: count GPUs with NVML; >= 0: advertise this many */
    int cpus;               /* the Node's cpu capacity; 0: the machine's online CPUs */
    int api_port;           /* given to containers as KUBERNETES_SERVICE_PORT */
    int max_pods;           /* 0 means 110 */
    const char *kubeconfig; /* given to containers as KUBECONFIG when set (absolute path) */
    /*
     * Agent mode: the API server's URL. A container that mounts a
     * service-account token (at /var/run/secrets/kubernetes.io/serviceaccount)
     * gets KUBECONFIG naming this server, the token and its ca.crt.
     */
    const char *api_server;
    /*
     * Node agent mode when set (then st is NULL): the Node, its Lease, pod
     * status, deletions and events go to this API server (borrowed; it must
     * outlive the kubelet), which binds pods itself; the kubelet API
     * (/healthz, /containerLogs) is served over HTTPS on kubelet_addr:kubelet_port.
     */
    struct kd_k8s_client *client;
    const char *kubelet_addr;               /* NULL: 127.0.0.1 */
    int kubelet_port;                       /* 0 picks a free port */
    const char *tls_cert_pem, *tls_key_pem; /* the kubelet API's certificate (required) */
};

/**
 * Register the Node and start the kubelet thread (and, in agent mode, the
 * kubelet API server). Kills process groups left
 * over by a previous run that died (their pids are kept in the state dir).
 * Returns 0 or a negative code with detail in err.
 */
int kd_kubelet_start(const struct kd_kubelet_opts *opts, struct kd_store *st,
                     struct kd_kubelet **out, char *err) KD_WUR;

/** Stop: SIGTERM every container, SIGKILL after 5 s, join the thread, free. NULL-safe. */
void kd_kubelet_stop(struct kd_kubelet *k);

/**
 * The log file of one run of a container: STATE_DIR/pods/UID/NAME/RUN.log
 * (RUN is the restartCount at start). Caller frees. NULL when UID or NAME
 * could name a file elsewhere (NAME must be a DNS-1123 label, UID a plain
 * file name).
 */
char *kd_kubelet_log_path(const char *state_dir, const char *uid, const char *container, int run);

/*
 * Pod folders are recycled: a gone pod's folder, tidied, waits in
 * STATE_DIR/spare for the next pod, so that a stream of short pods does not
 * create and free inodes at its own rate (on ext4 without a journal the
 * inode allocator skips every inode freed in the last minute, and the scan
 * grows with the rate). What the tidying does with each entry at the top of
 * the folder, given the names of the containers of the pod that had it (going
 * in) or will have it (coming out):
 */
enum kd_spare_entry {
    KD_SPARE_REMOVE,   /* removed with everything under it */
    KD_SPARE_TRUNCATE, /* "pids", a plain file: kept, emptied */
    KD_SPARE_EMPTY,    /* a folder named after one of the containers: kept, emptied but for
                        * the first run's log (kd_kubelet_spare_log) */
};

/** The decision for entry NAME (is_dir and is_reg as lstat sees it, never through a link). */
enum kd_spare_entry kd_kubelet_spare_entry(const char *name, bool is_dir, bool is_reg,
                                           const char *const *containers, size_t n);

/*
 * Inside a kept container folder: true for the entry kept for the next pod, the log of the
 * first run ("0.log", a plain file), so that its inode is used again too. It is emptied, and
 * kept only while no process has it open (a reader of the gone pod's log keeps that log, and
 * the next pod gets a new file). Every other entry is removed.
 */
bool kd_kubelet_spare_log(const char *name, bool is_reg);

/** The kubelet API's port (agent mode; 0 otherwise). */
int kd_kubelet_port(const struct kd_kubelet *k);

#endif
