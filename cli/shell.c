/*
 * `det shell open` and the tunnel under it (docs/tasks.md, "Shells"): the
 * local ssh reaches the shell's sshd through the controller API's proxy.
 * ssh runs `det shell tunnel TASK` as its ProxyCommand, which asks the API
 * for an upgraded connection (GET /proxy/TASK/ with Upgrade: kdet-tunnel
 * and the user's token) and then copies bytes between ssh and it. The key
 * pair and the host key come from the task's Secret <task>-ssh, so ssh
 * checks the server it reaches (StrictHostKeyChecking with the Secret's
 * known_hosts line, under the alias TASK).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/fs.h"
#include "core/buf.h"
#include "core/str.h"

/* The answer's head, at most. */
#define HEAD_MAX (16u << 10)
#define SECRET_SUFFIX "-ssh"

/* The decoded value of a Secret's data key (malloc'd, NUL-terminated), or NULL. */
static char *secret_value(const json_t *secret, const char *key, size_t *len)
{
    const char *b = json_string_value(json_object_get(json_object_get(secret, "data"), key));
    if (b == NULL)
        return NULL;
    size_t n = strlen(b);
    unsigned char *out = kd_xmalloc(3 * (n / 4) + 4);
    int m = EVP_DecodeBlock(out, (const unsigned char *)b, (int)n);
    if (m < 0) {
        free(out);
        return NULL;
    }
    while (n > 0 && b[n - 1] == '=' && m > 0) { /* EVP_DecodeBlock counts the padding */
        n--;
        m--;
    }
    out[m] = '\0';
    *len = (size_t)m;
    return (char *)out;
}

static int write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -errno;
    int rc = fchmod(fileno(f), 0600) == 0 && fwrite(data, 1, len, f) == len ? 0 : -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

/* This program's path, for ssh's ProxyCommand. */
static char *self_path(void)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return kd_xstrdup("det");
    buf[n] = '\0';
    return kd_xstrdup(buf);
}

/* s quoted for a POSIX shell (ssh runs the ProxyCommand with one). */
static int shell_quote(struct kd_buf *b, const char *s)
{
    int rc = kd_buf_putc(b, '\'');
    for (; *s != '\0' && rc == 0; s++)
        rc = *s == '\'' ? kd_buf_puts(b, "'\\''") : kd_buf_putc(b, *s);
    if (rc == 0)
        rc = kd_buf_putc(b, '\'');
    return rc;
}

int det_shell_ssh(struct det_kube *k, const char *name, const json_t *task, char **cmd, int ncmd)
{
    static const struct kd_k8s_gvr secrets = KD_K8S_GVR("", "v1", "secrets");
    struct kd_k8s_status st = {0};
    json_t *secret = NULL;
    char err[KD_ERRLEN] = "", dir[256] = "", idp[300] = "", khp[300] = "";
    char *sname = kd_xasprintf("%s%s", name, SECRET_SUFFIX), *id = NULL, *kh = NULL;
    char *self = self_path();
    struct kd_buf pc = KD_BUF_INIT(8192), remote = KD_BUF_INIT(64 * 1024);
    size_t idlen = 0, khlen = 0;
    int rc = DET_EXIT_ERROR, status = 0;
    int r = kd_k8s_get(k->c, &secrets, k->ns, sname, &secret, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "get", &secrets, "secret", sname);
        goto out;
    }
    if ((id = secret_value(secret, "id", &idlen)) == NULL ||
        (kh = secret_value(secret, "known_hosts", &khlen)) == NULL) {
        det_err("secret %s has no ssh key (keys id and known_hosts)", sname);
        goto out;
    }
    const char *td = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/det-shell-XXXXXX",
             td != NULL && td[0] == '/' && strlen(td) < 200 ? td : "/tmp");
    if (mkdtemp(dir) == NULL) {
        det_err("cannot make a directory for the shell's key: %s", strerror(errno));
        dir[0] = '\0';
        goto out;
    }
    snprintf(idp, sizeof(idp), "%s/id", dir);
    snprintf(khp, sizeof(khp), "%s/known_hosts", dir);
    if (write_file(idp, id, idlen) != 0 || write_file(khp, kh, khlen) != 0) {
        det_err("cannot write the shell's key into %s: %s", dir, strerror(errno));
        goto out;
    }
    /* ProxyCommand: this det, with the namespace and kubeconfig it runs with. */
    int qrc = kd_buf_puts(&pc, "ProxyCommand=");
    qrc = qrc != 0 ? qrc : shell_quote(&pc, self);
    qrc = qrc != 0 ? qrc : kd_buf_puts(&pc, " shell tunnel ");
    qrc = qrc != 0 ? qrc : shell_quote(&pc, name);
    qrc = qrc != 0 ? qrc : kd_buf_puts(&pc, " -n ");
    qrc = qrc != 0 ? qrc : shell_quote(&pc, k->ns);
    if (k->a != NULL && k->a->kubeconfig != NULL) {
        qrc = qrc != 0 ? qrc : kd_buf_puts(&pc, " --kubeconfig ");
        qrc = qrc != 0 ? qrc : shell_quote(&pc, k->a->kubeconfig);
    }
    /* One word is a command line for the remote shell, as ssh takes it; several words are a
     * program and its arguments, quoted so that the remote shell hands them over unchanged
     * (ssh itself would join them with spaces). */
    for (int i = 0; ncmd > 1 && i < ncmd && qrc == 0; i++) {
        if (i > 0)
            qrc = kd_buf_putc(&remote, ' ');
        qrc = qrc != 0 ? qrc : shell_quote(&remote, cmd[i]);
    }
    if (qrc != 0) {
        det_err("the ssh command line is too long (%zu bytes at most)", remote.max);
        goto out;
    }
    char alias[300], known[400], ident[320];
    snprintf(alias, sizeof(alias), "HostKeyAlias=%s", name);
    snprintf(known, sizeof(known), "UserKnownHostsFile=%s", khp);
    snprintf(ident, sizeof(ident), "%s", idp);
    const char *user = det_get_str(task, "status.address.user", "root");
    char **argv = kd_xcalloc((size_t)ncmd + 32, sizeof(*argv));
    int n = 0;
    argv[n++] = "ssh";
    argv[n++] = "-i";
    argv[n++] = ident;
    argv[n++] = "-o";
    argv[n++] = "IdentitiesOnly=yes";
    argv[n++] = "-o";
    argv[n++] = known;
    argv[n++] = "-o";
    argv[n++] = "StrictHostKeyChecking=yes";
    argv[n++] = "-o";
    argv[n++] = alias;
    argv[n++] = "-o";
    argv[n++] = (char *)kd_buf_str(&pc);
    argv[n++] = "-o";
    argv[n++] = "BatchMode=yes";
    argv[n++] = "-o";
    argv[n++] = "LogLevel=ERROR";
    argv[n++] = "-l";
    argv[n++] = (char *)user;
    argv[n++] = (char *)name;
    if (ncmd > 0)
        argv[n++] = "--";
    if (ncmd > 0)
        argv[n++] = ncmd == 1 ? cmd[0] : (char *)kd_buf_str(&remote);
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execvp("ssh", argv);
        fprintf(stderr, "det: cannot run ssh: %s (install openssh-client)\n", strerror(errno));
        _exit(127);
    }
    free(argv);
    if (pid < 0) {
        det_err("cannot start ssh: %s", strerror(errno));
        goto out;
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    rc = WIFEXITED(status) ? WEXITSTATUS(status)
                           : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
out:
    if (idp[0] != '\0')
        unlink(idp);
    if (khp[0] != '\0')
        unlink(khp);
    if (dir[0] != '\0')
        rmdir(dir);
    if (id != NULL) {
        explicit_bzero(id, idlen);
        free(id);
    }
    free(kh);
    free(sname);
    free(self);
    kd_buf_free(&pc);
    kd_buf_free(&remote);
    json_decref(secret);
    kd_k8s_status_free(&st);
    return rc;
}

/* ---- the tunnel ------------------------------------------------------------------------------ */

/* Send all of buf on the connected handle (waiting for room). */
static int send_all(CURL *h, curl_socket_t fd, const char *buf, size_t len)
{
    while (len > 0) {
        size_t sent = 0;
        CURLcode cc = curl_easy_send(h, buf, len, &sent);
        if (cc == CURLE_AGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 30000) <= 0)
                return -1;
            continue;
        }
        if (cc != CURLE_OK)
            return -1;
        buf += sent;
        len -= sent;
    }
    return 0;
}

int det_shell_tunnel(int argc, char **argv)
{
    static const char *const flags[] = {"--namespace", "--kubeconfig", "--kube-context", NULL};
    static const char *const pos[] = {"ID", NULL};
    struct det_args a = {0};
    struct det_api api = {0};
    struct kd_buf req = KD_BUF_INIT(8192), head = KD_BUF_INIT(HEAD_MAX);
    CURL *h = NULL;
    char cerr[CURL_ERROR_SIZE] = "";
    int rc = det_parse_args(argc, argv, flags, pos, 1, "usage: det shell tunnel ID\n",
                            "det shell tunnel", &a);
    if (rc != 0) {
        rc = det_args_exit(rc);
        goto out;
    }
    a.context = a.kube_context;
    if ((rc = det_api_open(&a, "det shell tunnel", &api)) != 0)
        goto out;
    rc = DET_EXIT_ERROR;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if ((h = curl_easy_init()) == NULL)
        kd_oom(1);
    curl_easy_setopt(h, CURLOPT_URL, api.url);
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    det_api_tls(&api, h);
    CURLcode cc = curl_easy_perform(h);
    curl_socket_t fd = CURL_SOCKET_BAD;
    if (cc != CURLE_OK || curl_easy_getinfo(h, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
        fd == CURL_SOCKET_BAD) {
        det_err("cannot reach the controller API at %s: %s", api.url,
                cerr[0] ? cerr : curl_easy_strerror(cc));
        rc = DET_EXIT_CLUSTER;
        goto out;
    }
    const char *host = strstr(api.url, "://");
    host = host != NULL ? host + 3 : api.url;
    int qrc = kd_buf_puts(&req, "GET /proxy/");
    qrc = qrc == 0 ? det_urlencode(&req, a.pos[0]) : qrc;
    qrc = qrc == 0 ? kd_buf_puts(&req, "/?namespace=") : qrc;
    qrc = qrc == 0 ? det_urlencode(&req, api.ns) : qrc;
    qrc = qrc == 0 ? kd_buf_printf(&req,
                                   " HTTP/1.1\r\nHost: %.*s\r\nConnection: Upgrade\r\nUpgrade: "
                                   "kdet-tunnel\r\nAuthorization: Bearer %s\r\n\r\n",
                                   (int)strcspn(host, "/"), host, api.token)
                   : qrc;
    if (qrc != 0 || send_all(h, fd, req.data, req.len) != 0) {
        det_err("cannot send the tunnel request");
        goto out;
    }
    explicit_bzero(req.data, req.len);
    /* The answer's head: 101 Switching Protocols, or an error with a JSON body. */
    char *end = NULL;
    while (end == NULL) {
        char buf[4096];
        size_t got = 0;
        cc = curl_easy_recv(h, buf, sizeof(buf), &got);
        if (cc == CURLE_AGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 30000) <= 0) {
                det_err("the controller API did not answer the tunnel request");
                goto out;
            }
            continue;
        }
        if (cc != CURLE_OK || got == 0 || kd_buf_append(&head, buf, got) != 0) {
            det_err("the controller API closed the tunnel before answering");
            goto out;
        }
        end = memmem(head.data, head.len, "\r\n\r\n", 4);
    }
    size_t hlen = (size_t)(end - head.data) + 4;
    if (head.len < 12 || strncmp(head.data + 9, "101", 3) != 0) {
        const char *body = memchr(head.data, '{', head.len);
        det_err("the controller API refused the tunnel: %.*s%s%.*s",
                (int)strcspn(head.data, "\r\n"), head.data, body ? ": " : "",
                body ? (int)(head.len - (size_t)(body - head.data)) : 0, body ? body : "");
        rc = strncmp(head.data + 9, "401", 3) == 0 || strncmp(head.data + 9, "403", 3) == 0
                 ? DET_EXIT_CLUSTER
             : strncmp(head.data + 9, "404", 3) == 0 ? DET_EXIT_NOTFOUND
                                                     : DET_EXIT_ERROR;
        goto out;
    }
    if (head.len > hlen && kd_write_all(1, head.data + hlen, head.len - hlen) != 0)
        goto out;
    /* Copy both ways until either side ends. */
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[0].revents != 0) {
            char buf[32768];
            size_t got = 0;
            cc = curl_easy_recv(h, buf, sizeof(buf), &got);
            if (cc == CURLE_AGAIN)
                continue;
            if (cc != CURLE_OK || got == 0 || kd_write_all(1, buf, got) != 0)
                break;
        }
        if (p[1].revents != 0) {
            char buf[32768];
            ssize_t n = read(0, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break; /* ssh is done with the connection */
            if (send_all(h, fd, buf, (size_t)n) != 0)
                break;
        }
    }
    rc = DET_EXIT_OK;
out:
    if (h != NULL)
        curl_easy_cleanup(h);
    if (req.data != NULL)
        explicit_bzero(req.data, req.len);
    kd_buf_free(&req);
    kd_buf_free(&head);
    det_api_close(&api);
    return rc;
}
