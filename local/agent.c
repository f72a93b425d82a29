/*
 * `kdet-local kubelet`: runs kdet's process kubelet (kubelet.c) as the node
 * agent of an API server reached through a kubeconfig. The server's own
 * scheduler binds pods; this process registers the Node, keeps it and its
 * Lease fresh, runs the pods bound to it and serves their logs over HTTPS.
 */
#include "agent.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "flags.h"
#include "kubelet.h"
#include "tls.h"

#define P "kdet-local kubelet"

static void usage(FILE *f)
{
    fprintf(f, "usage: kdet-local kubelet --kubeconfig FILE [options]\n"
               "  --kubeconfig FILE     the API server to register with (required)\n"
               "  --node-name NAME      the Node's name (default: host name)\n"
               "  --fake-gpus N         advertise N nvidia.com/gpu without NVML (for tests)\n"
               "  --node-cpus N         advertise N cpu (default: the machine's online CPUs)\n"
               "  --max-pods N          pods the node accepts (default 110)\n"
               "  --state-dir DIR       pod directories, logs, the serving certificate\n"
               "                        (default: a temporary directory removed at exit)\n"
               "  --address ADDR        kubelet API address (default 127.0.0.1)\n"
               "  --port N              kubelet API port, HTTPS (default 10250; 0 picks one)\n"
               "  --port-file FILE      write the kubelet API port once serving (for scripts)\n"
               "  --log-level LEVEL     debug|info|warn|error (default info)\n"
               "  -h, --help            this text\n");
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* The port of an http(s)://HOST:PORT server URL, or the scheme's default. */
static int server_port(const char *server)
{
    int port = kd_str_has_prefix(server, "https://") ? 443 : 80;
    const char *host = strstr(server, "://");
    const char *colon = host != NULL ? strrchr(host + 3, ':') : NULL;
    if (colon != NULL && kd_parse_int(colon + 1, &port) < 0)
        port = 443;
    return port;
}

/* A Node name is a DNS subdomain (it also goes into a field selector unescaped). */
static bool valid_node_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.')
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-.") == n;
}

int kd_agent_main(int argc, char **argv)
{
    int rc = 0, level = -1;
    char err[KD_ERRLEN] = "";
    const char *kubeconfig = NULL, *node_name = NULL, *state_arg = NULL, *addr = NULL;
    const char *port_file = NULL;
    int fake_gpus = -1, max_pods = 0, port = 10250, node_cpus = 0;
    char *state_dir = NULL, *tls_dir = NULL, *cert = NULL, *key = NULL;
    bool tmp_state = false;
    struct kd_k8s_config cfg = {0};
    struct kd_k8s_client *kc = NULL;
    struct kd_kubelet *kubelet = NULL;
    static const struct option longopts[] = {{"kubeconfig", required_argument, NULL, 'k'},
                                             {"node-name", required_argument, NULL, 'n'},
                                             {"fake-gpus", required_argument, NULL, 'g'},
                                             {"node-cpus", required_argument, NULL, 'C'},
                                             {"max-pods", required_argument, NULL, 'm'},
                                             {"state-dir", required_argument, NULL, 's'},
                                             {"address", required_argument, NULL, 'a'},
                                             {"port", required_argument, NULL, 'p'},
                                             {"port-file", required_argument, NULL, 'P'},
                                             {"log-level", required_argument, NULL, 'l'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'k': kubeconfig = optarg; break;
        case 'n': node_name = optarg; break;
        case 's': state_arg = optarg; break;
        case 'a': addr = optarg; break;
        case 'P': port_file = optarg; break;
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
        case 'p':
            if (kd_flag_int(P, "port", optarg, 0, 65535, &port) < 0)
                return 2;
            break;
        case 'l':
            if (kd_flag_log_level(P, optarg, &level) < 0)
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || kubeconfig == NULL) {
        fprintf(stderr, "kdet-local kubelet: %s\n",
                kubeconfig == NULL ? "--kubeconfig is required" : "unexpected argument");
        usage(stderr);
        return 2;
    }
    if (node_name != NULL && !valid_node_name(node_name)) {
        fprintf(stderr,
                "kdet-local kubelet: --node-name %s: expected a DNS subdomain "
                "(lower case letters, digits, '-' and '.', at most 253)\n",
                node_name);
        return 2;
    }
    kd_log_init("kdet-kubelet", level, -1);
    json_object_seed(0);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct kd_k8s_config_opts co = {.kubeconfig = kubeconfig, .no_in_cluster = true};
    rc = kd_k8s_config_load(&co, &cfg, err);
    if (rc != 0)
        goto out;
    rc = kd_k8s_client_new(&cfg, NULL, &kc, err);
    if (rc != 0)
        goto out;
    if (state_arg != NULL) {
        state_dir = kd_xstrdup(state_arg);
    } else {
        state_dir = kd_xstrdup("/tmp/kdet-kubelet.XXXXXX");
        if (mkdtemp(state_dir) == NULL) {
            rc = kd_seterr(err, -errno, "cannot create a state dir in /tmp: %s", strerror(errno));
            goto out;
        }
        tmp_state = true;
    }
    tls_dir = kd_xasprintf("%s/tls", state_dir);
    if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
        rc = kd_seterr(err, -errno, "--state-dir %s: %s", state_dir, strerror(errno));
        goto out;
    }
    rc = kd_local_tls(tls_dir, &cert, &key, err);
    if (rc != 0)
        goto out;
    struct kd_kubelet_opts ko = {.node_name = node_name,
                                 .state_dir = state_dir,
                                 .fake_gpus = fake_gpus,
                                 .cpus = node_cpus,
                                 .api_port = server_port(cfg.server),
                                 .max_pods = max_pods,
                                 .api_server = cfg.server,
                                 .client = kc,
                                 .kubelet_addr = addr,
                                 .kubelet_port = port,
                                 .tls_cert_pem = cert,
                                 .tls_key_pem = key};
    rc = kd_kubelet_start(&ko, NULL, &kubelet, err);
    if (rc != 0)
        goto out;
    if (port_file != NULL) {
        FILE *f = fopen(port_file, "w");
        if (f == NULL || fprintf(f, "%d\n", kd_kubelet_port(kubelet)) < 0 || fclose(f) != 0) {
            rc = kd_seterr(err, KD_EIO, "--port-file %s: cannot write", port_file);
            goto out;
        }
    }
    KD_INFO("kubelet serving", "server=%s port=%d", kd_logq(cfg.server), kd_kubelet_port(kubelet));
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0)
        ;
    KD_INFO("stopping", "signal=%d", sig);
out:
    if (rc != 0) {
        KD_ERROR("kdet-local kubelet failed", "err=%s", kd_logq(err[0] ? err : kd_strerror(rc)));
        fprintf(stderr, "kdet-local kubelet: %s\n", err[0] ? err : kd_strerror(rc));
    }
    kd_kubelet_stop(kubelet);
    kd_k8s_client_free(kc);
    kd_k8s_config_free(&cfg);
    if (tmp_state)
        nftw(state_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(state_dir);
    free(tls_dir);
    free(cert);
    if (key != NULL)
        OPENSSL_cleanse(key, strlen(key));
    free(key);
    return rc == 0 ? 0 : 1;
}
