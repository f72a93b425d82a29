/*
 * Where the Kubernetes API server is and how to authenticate to it: an
 * in-cluster service account or a kubeconfig file (with $KUBECONFIG's
 * colon-separated merge rules), resolved into one flat struct.
 */
#ifndef KD_K8S_CONFIG_H
#define KD_K8S_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

/* Default directory of the service-account token, CA and namespace files. */
#define KD_K8S_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* Hard caps on what is read from config files. */
#define KD_K8S_TOKEN_MAX (64 * 1024)
#define KD_K8S_PEM_MAX (1024 * 1024)

/**
 * A resolved connection config. Every string is owned by the struct
 * (kd_k8s_config_free releases them) and is NULL when not set. PEM data
 * fields hold the decoded bytes of the *-data kubeconfig fields (or the
 * contents of the files, for the CA of an in-cluster config); the *_file
 * fields hold absolute paths (relative kubeconfig paths are resolved
 * against the directory of the file that names them).
 */
struct kd_k8s_config {
    char *server;    /* "https://10.0.0.1:443" (no trailing slash) */
    char *namespace; /* the context's namespace, or "default" */
    char *context;   /* context name, NULL for in-cluster */
    char *source;    /* "in-cluster" or the kubeconfig file that set the context */

    char *ca_file;
    char *ca_data;
    size_t ca_data_len;
    char *cert_file;
    char *cert_data;
    size_t cert_data_len;
    char *key_file;
    char *key_data;
    size_t key_data_len;
    bool insecure; /* insecure-skip-tls-verify */

    char *token;      /* static bearer token (registered as a log secret) */
    char *token_file; /* re-read as it rotates (tokenFile, in-cluster token) */
    char *username;   /* basic auth (rare) */
    char *password;
};

/** How kd_k8s_config_load picks a config. All fields optional. */
struct kd_k8s_config_opts {
    /* An explicit kubeconfig file (like kubectl --kubeconfig): used alone, no merging. */
    const char *kubeconfig;
    /* A context other than current-context. */
    const char *context;
    /* Override the service-account directory (tests); default KD_K8S_SA_DIR. */
    const char *sa_dir;
    /* Never use the in-cluster config even when it is available. */
    bool no_in_cluster;
};

/**
 * Resolve a config in this order (the order client-go and
 * controller-runtime use):
 *   1. opts->kubeconfig, when given;
 *   2. $KUBECONFIG, a colon-separated list merged by kubectl's rules (the
 *      first file that sets a cluster/user/context name or current-context
 *      wins; missing files are skipped, an unreadable or broken one is an
 *      error);
 *   3. in-cluster: $KUBERNETES_SERVICE_HOST/PORT plus the token, ca.crt and
 *      namespace files of the service-account directory;
 *   4. $HOME/.kube/config.
 * Returns 0, KD_ENOTFOUND when no source exists, KD_EPARSE/KD_EINVAL for a
 * broken file (err names the file and the field), or -errno. The caller
 * frees *cfg's contents with kd_k8s_config_free. Blocks on file reads;
 * thread-safe (reads the environment).
 */
int kd_k8s_config_load(const struct kd_k8s_config_opts *opts, struct kd_k8s_config *cfg,
                       char *err) KD_WUR;

/**
 * Build the in-cluster config from sa_dir (NULL: KD_K8S_SA_DIR) and
 * $KUBERNETES_SERVICE_HOST/PORT. KD_ENOTFOUND when not in a cluster.
 */
int kd_k8s_config_in_cluster(const char *sa_dir, struct kd_k8s_config *cfg, char *err) KD_WUR;

/**
 * Load a kubeconfig from a colon-separated list of files (as in
 * $KUBECONFIG) and pick `context` (NULL: current-context). Missing files
 * are skipped unless the list names only one file; KD_ENOTFOUND when none
 * exists.
 */
int kd_k8s_config_kubeconfig(const char *paths, const char *context, struct kd_k8s_config *cfg,
                             char *err) KD_WUR;

/** Release the strings of cfg and zero it. NULL-safe. */
void kd_k8s_config_free(struct kd_k8s_config *cfg);

/**
 * Read a bearer-token file: surrounding whitespace stripped, at most
 * KD_K8S_TOKEN_MAX bytes. *out is malloc'd (caller frees). The token is
 * registered with kd_log_add_secret.
 */
int kd_k8s_read_token(const char *path, char **out, char *err) KD_WUR;

/** Decode standard base64 (whitespace ignored). *out malloc'd, NUL-terminated. */
int kd_k8s_base64_decode(const char *in, char **out, size_t *outlen) KD_WUR;

#endif
