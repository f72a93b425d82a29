/*
 * kdet-local: the embedded control plane (its own node, plus any node agents
 * that register with it). Serves a subset of the Kubernetes API on 127.0.0.1
 * from a journaled store in --data-dir and writes a kubeconfig that kubectl
 * and kdet-controller can use.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <ftw.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "agent.h"
#include "flags.h"
#include "api.h"
#include "kubelet.h"
#include "tls.h"
#include "store.h"

#define MAX_TOKEN 4096
#define P "kdet-local"

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kdet-local [options]\n"
            "       kdet-local kubelet --kubeconfig FILE [options]  (node agent; see --help)\n"
            "  --data-dir DIR          journal and state (default: memory only, lost on exit)\n"
            "  --port N                TCP port on 127.0.0.1 (default 6443; 0 picks a free one)\n"
            "  --token-file FILE       the bearer token every client must present (first line\n"
            "                          of FILE); default: DATA_DIR/token, made once (0600),\n"
            "                          or without --data-dir a new one, known only through\n"
            "                          --kubeconfig-out\n"
            "  --kubeconfig-out FILE   write a kubeconfig for this server (mode 0600, with the\n"
            "                          token and the CA)\n"
            "  --tls                   serve HTTPS (the default) with a self-signed\n"
            "                          certificate kept in DATA_DIR/tls\n"
            "  --plain-http            serve HTTP instead (the token is still required; kubectl\n"
            "                          sends a bearer token only over HTTPS)\n"
            "  --port-file FILE        write the port once listening (for scripts)\n"
            "  --bookmark-interval S   seconds between watch bookmarks (default 60)\n"
            "  --watch-history N       change events kept for watches (default 20000)\n"
            "  --compact-bytes SIZE    journal size before compaction (default 8MiB)\n"
            "  --node-name NAME        the Node this machine registers as (default: host name)\n"
            "  --fake-gpus N           advertise N nvidia.com/gpu without NVML (for tests)\n"
            "  --node-cpus N           advertise N cpu (default: the machine's online CPUs)\n"
            "  --max-pods N            pods the node accepts (default 110)\n"
            "  --no-kubelet            API server only: no Node, pods stay Pending\n"
            "  --log-level LEVEL       debug|info|warn|error (default info, or $KDET_LOG_LEVEL)\n"
            "  -h, --help              this text\n");
}

static int write_file_atomic(const char *path, const char *content, char *err);

static int read_token(const char *path, char **out, char *err)
{
    int rc = 0;
    char buf[MAX_TOKEN + 2];
    FILE *f = fopen(path, "r");
    *out = NULL;
    if (f == NULL) {
        rc = kd_seterr(err, -errno, "--token-file %s: %s", path, strerror(errno));
        goto out;
    }
    if (fgets(buf, sizeof(buf), f) == NULL) {
        rc = kd_seterr(err, KD_EINVAL, "--token-file %s: the file is empty", path);
        goto out;
    }
    size_t n = strlen(buf);
    if (n > MAX_TOKEN) {
        rc = kd_seterr(err, KD_ETOOBIG, "--token-file %s: the token is longer than %d bytes", path,
                       MAX_TOKEN);
        goto out;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n == 0) {
        rc = kd_seterr(err, KD_EINVAL, "--token-file %s: the first line is empty", path);
        goto out;
    }
    *out = kd_xstrdup(buf);
out:
    if (f != NULL)
        fclose(f);
    return rc;
}

/*
 * The token when no --token-file is given: DATA_DIR/token (made once, mode
 * 0600, so that clients keep working across restarts), or, without a data
 * dir, a new one. 32 random bytes in hex.
 */
static int default_token(const char *data_dir, char **out, char *err)
{
    int rc = 0;
    unsigned char raw[32];
    char hex[2 * sizeof(raw) + 2];
    char *path = data_dir != NULL ? kd_xasprintf("%s/token", data_dir) : NULL;
    *out = NULL;
    if (path != NULL && access(path, F_OK) == 0) {
        rc = read_token(path, out, err);
        goto out;
    }
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        rc = kd_seterr(err, -errno, "cannot make a token: getrandom: %s", strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    if (path != NULL) {
        hex[2 * sizeof(raw)] = '\n';
        hex[2 * sizeof(raw) + 1] = '\0';
        rc = write_file_atomic(path, hex, err);
        if (rc != 0)
            goto out;
    }
    hex[2 * sizeof(raw)] = '\0';
    *out = kd_xstrdup(hex);
out:
    OPENSSL_cleanse(raw, sizeof(raw));
    OPENSSL_cleanse(hex, sizeof(hex));
    free(path);
    return rc;
}

static int write_file_atomic(const char *path, const char *content, char *err)
{
    int rc = 0;
    char *tmp = kd_xasprintf("%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = kd_seterr(err, -errno, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    size_t n = strlen(content);
    if (write(fd, content, n) != (ssize_t)n || fsync(fd) < 0) {
        rc = kd_seterr(err, -errno, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto out;
    }
    close(fd);
    if (rename(tmp, path) < 0) {
        rc = kd_seterr(err, -errno, "%s: %s", path, strerror(errno));
        unlink(tmp);
    }
out:
    free(tmp);
    return rc;
}

static int write_kubeconfig(const char *path, int port, const char *token, const char *cert,
                            char *err)
{
    char *ca = NULL;
    if (cert != NULL) {
        size_t n = strlen(cert);
        ca = kd_xmalloc(4 * ((n + 2) / 3) + 1);
        EVP_EncodeBlock((unsigned char *)ca, (const unsigned char *)cert, (int)n);
    }
    char *cluster = cert != NULL ? kd_xasprintf("    server: https://127.0.0.1:%d\n"
                                                "    certificate-authority-data: %s\n",
                                                port, ca)
                                 : kd_xasprintf("    server: http://127.0.0.1:%d\n", port);
    char *user = kd_xasprintf("    token: %s\n", token);
    char *cfg = kd_xasprintf("apiVersion: v1\n"
                             "kind: Config\n"
                             "clusters:\n"
                             "- name: kdet-local\n"
                             "  cluster:\n"
                             "%s"
                             "contexts:\n"
                             "- name: kdet-local\n"
                             "  context:\n"
                             "    cluster: kdet-local\n"
                             "    user: kdet-local\n"
                             "    namespace: default\n"
                             "current-context: kdet-local\n"
                             "users:\n"
                             "- name: kdet-local\n"
                             "  user:\n"
                             "%s",
                             cluster, user);
    int rc = write_file_atomic(path, cfg, err);
    free(cfg);
    free(user);
    free(cluster);
    free(ca);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0;
    char err[KD_ERRLEN] = "";
    const char *data_dir = NULL, *token_file = NULL, *kubeconfig = NULL, *port_file = NULL;
    int port = 6443, bookmark_s = 60, level = -1;
    uint64_t history = 0, compact = 0;
    char *token = NULL;
    const char *node_name = NULL;
    int fake_gpus = -1, max_pods = 0, node_cpus = 0;
    bool no_kubelet = false;
    bool use_tls = true;
    char *cert = NULL, *key = NULL;
    char *state_dir = NULL;
    bool tmp_state = false;
    struct kd_kubelet *kubelet = NULL;
    struct kd_store *st = NULL;
    struct kd_api *api = NULL;
    static const struct option longopts[] = {{"data-dir", required_argument, NULL, 'd'},
                                             {"port", required_argument, NULL, 'p'},
                                             {"token-file", required_argument, NULL, 't'},
                                             {"kubeconfig-out", required_argument, NULL, 'k'},
                                             {"port-file", required_argument, NULL, 'P'},
                                             {"bookmark-interval", required_argument, NULL, 'b'},
                                             {"watch-history", required_argument, NULL, 'w'},
                                             {"compact-bytes", required_argument, NULL, 'c'},
                                             {"log-level", required_argument, NULL, 'l'},
                                             {"node-name", required_argument, NULL, 'n'},
                                             {"fake-gpus", required_argument, NULL, 'g'},
                                             {"node-cpus", required_argument, NULL, 'C'},
                                             {"max-pods", required_argument, NULL, 'm'},
                                             {"no-kubelet", no_argument, NULL, 'K'},
                                             {"tls", no_argument, NULL, 'T'},
                                             {"plain-http", no_argument, NULL, 'H'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    if (argc > 1 && strcmp(argv[1], "kubelet") == 0)
        return kd_agent_main(argc - 1, argv + 1);
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': data_dir = optarg; break;
        case 't': token_file = optarg; break;
        case 'k': kubeconfig = optarg; break;
        case 'P': port_file = optarg; break;
        case 'p':
            if (kd_flag_int(P, "port", optarg, 0, 65535, &port) < 0)
                return 2;
            break;
        case 'b':
            if (kd_flag_int(P, "bookmark-interval", optarg, 1, INT_MAX, &bookmark_s) < 0)
                return 2;
            break;
        case 'w':
            if (kd_flag_u64(P, "watch-history", optarg, 1, &history) < 0)
                return 2;
            break;
        case 'c':
            if (kd_flag_size(P, "compact-bytes", optarg, &compact) < 0)
                return 2;
            break;
        case 'l':
            if (kd_flag_log_level(P, optarg, &level) < 0)
                return 2;
            break;
        case 'n': node_name = optarg; break;
        case 'K': no_kubelet = true; break;
        case 'T': use_tls = true; break;
        case 'H': use_tls = false; break;
        case 'g':
            if (kd_flag_int(P, "fake-gpus", optarg, 0, 64, &fake_gpus) < 0)
                return 2;
            break;
        case 'C':
            if (kd_flag_int(P, "node-cpus", optarg, 1, 4096, &node_cpus) < 0)
                return 2;
            break;
        case 'm':
            if (kd_flag_int(P, "max-pods", optarg, 1, INT_MAX, &max_pods) < 0)
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kdet-local: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    kd_log_init("kdet-local", level, -1);
    json_object_seed(0);
    /* Signals go to the main thread only, through sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (token_file == NULL && data_dir == NULL && kubeconfig == NULL) {
        fprintf(stderr, "kdet-local: every client must present a bearer token: give --token-file "
                        "FILE, --data-dir DIR (its token file) or --kubeconfig-out FILE (which "
                        "receives it)\n");
        usage(stderr);
        return 2;
    }
    struct kd_store_opts so = {.background_compaction = true,
                               .data_dir = data_dir,
                               .ring_events = (size_t)history,
                               .compact_min_bytes = (size_t)compact};
    int64_t t0 = kd_mono_ms();
    rc = kd_local_store_open(&so, &st, err);
    if (rc != 0)
        goto out;
    kd_store_lock(st);
    uint64_t rv = kd_store_rv(st);
    kd_store_unlock(st);
    KD_INFO("store open", "data_dir=%s resource_version=%llu ms=%lld",
            kd_logq(data_dir != NULL ? data_dir : "(memory)"), (unsigned long long)rv,
            (long long)(kd_mono_ms() - t0));
    /* after kd_local_store_open, which makes the data dir (0700) */
    rc = token_file != NULL ? read_token(token_file, &token, err)
                            : default_token(data_dir, &token, err);
    if (rc != 0)
        goto out;
    kd_log_add_secret(token);
    if (data_dir != NULL) {
        state_dir = kd_xasprintf("%s/kubelet", data_dir);
    } else {
        state_dir = kd_xstrdup("/tmp/kdet-local.XXXXXX");
        if (mkdtemp(state_dir) == NULL) {
            rc = kd_seterr(err, -errno, "cannot create a state dir in /tmp: %s", strerror(errno));
            goto out;
        }
        tmp_state = true;
    }
    if (use_tls) {
        char *tls_dir = kd_xasprintf("%s/tls", data_dir != NULL ? data_dir : state_dir);
        rc = kd_local_tls(tls_dir, &cert, &key, err);
        free(tls_dir);
        if (rc != 0)
            goto out;
    }
    struct kd_local_api_opts ao = {.port = port,
                                   .token = token,
                                   .bookmark_ms = bookmark_s * 1000,
                                   .state_dir = state_dir,
                                   .tls_cert_pem = cert,
                                   .tls_key_pem = key};
    rc = kd_local_api_start(&ao, st, &api, err);
    if (rc != 0)
        goto out;
    int actual = kd_local_api_port(api);
    if (kubeconfig != NULL) {
        rc = write_kubeconfig(kubeconfig, actual, token, cert, err);
        if (rc != 0)
            goto out;
    }
    if (!no_kubelet) {
        struct kd_kubelet_opts ko = {.node_name = node_name,
                                     .state_dir = state_dir,
                                     .fake_gpus = fake_gpus,
                                     .cpus = node_cpus,
                                     .api_port = actual,
                                     .max_pods = max_pods,
                                     .kubeconfig = kubeconfig};
        rc = kd_kubelet_start(&ko, st, &kubelet, err);
        if (rc != 0)
            goto out;
    }
    if (port_file != NULL) {
        char pbuf[16];
        snprintf(pbuf, sizeof(pbuf), "%d\n", actual);
        rc = write_file_atomic(port_file, pbuf, err);
        if (rc != 0)
            goto out;
    }
    KD_INFO("serving", "addr=127.0.0.1 port=%d scheme=%s auth=%s kubeconfig=%s", actual,
            cert != NULL ? "https" : "http", token != NULL ? "bearer" : "none",
            kd_logq(kubeconfig != NULL ? kubeconfig : ""));
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0)
        ;
    KD_INFO("stopping", "signal=%d", sig);
out:
    if (rc != 0) {
        KD_ERROR("kdet-local failed", "err=%s", kd_logq(err[0] ? err : kd_strerror(rc)));
        fprintf(stderr, "kdet-local: %s\n", err[0] ? err : kd_strerror(rc));
    }
    kd_kubelet_stop(kubelet);
    kd_local_api_stop(api);
    kd_local_store_close(st);
    if (tmp_state)
        nftw(state_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(state_dir);
    free(cert);
    if (key != NULL)
        OPENSSL_cleanse(key, strlen(key));
    free(key);
    free(token);
    return rc == 0 ? 0 : 1;
}
