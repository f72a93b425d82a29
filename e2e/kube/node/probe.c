/* The one program of the real-node suite's images (e2e/kube/node/image.sh
 * builds it statically and packs it as /probe): the pod sandbox's pause
 * process and the test pods' entrypoint.
 *
 *   probe pause                 wait for SIGTERM or SIGINT, reap children, exit 0
 *   probe addr [IF]             print "ip=A.B.C.D iflink=N" for IF (default eth0);
 *                               iflink is the host-side veth's ifindex
 *   probe serve PORT            accept on 0.0.0.0:PORT (in the pod's own network
 *                               namespace), answer each connection with
 *                               "hello from HOSTNAME ip=A.B.C.D", until SIGTERM
 *   probe send HOST PORT [DATA] connect (up to 30 tries a second apart), write
 *                               DATA, print what comes back until EOF (at most
 *                               64 KiB, 10 s)
 *   probe sleep SECONDS         sleep, then exit 0
 *   probe resolve NAME          print the IPv4 address NAME resolves to through
 *                               the pod's /etc/resolv.conf (the cluster DNS),
 *                               search list included (glibc 2.34 and later
 *                               resolve DNS names in a static binary too)
 *
 * Exit status 0 on success, 1 on an error (printed on stderr), 2 on bad usage.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROBE_MAX_REPLY (64 * 1024)

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void on_child(int sig)
{
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

/* As PID 1 of its namespace the program gets no default signal actions:
 * SIGTERM is ignored unless it is handled. No SA_RESTART, so that a blocked
 * accept() returns EINTR. */
static void handle_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
}

static int parse_port(const char *s, int *port)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 65535)
        return -1;
    *port = (int)v;
    return 0;
}

/* The IPv4 address of interface name, as text. */
static int if_ipv4(const char *name, char *out, size_t len)
{
    struct ifaddrs *ifs = NULL, *i;
    int rc = -1;

    if (getifaddrs(&ifs) != 0)
        return -1;
    for (i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || strcmp(i->ifa_name, name) != 0)
            continue;
        if (inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)len))
            rc = 0;
        break;
    }
    freeifaddrs(ifs);
    return rc;
}

static int cmd_pause(void)
{
    sigset_t none;

    handle_signals();
    sigemptyset(&none);
    while (!stop_requested)
        sigsuspend(&none);
    return 0;
}

static int cmd_addr(const char *name)
{
    char ip[INET_ADDRSTRLEN], path[128], link[32] = "";
    FILE *f;

    if (if_ipv4(name, ip, sizeof(ip)) != 0) {
        fprintf(stderr, "probe addr: no IPv4 address on %s\n", name);
        return 1;
    }
    snprintf(path, sizeof(path), "/sys/class/net/%s/iflink", name);
    f = fopen(path, "r");
    if (f) {
        if (!fgets(link, sizeof(link), f))
            link[0] = 0;
        fclose(f);
    }
    link[strcspn(link, "\n")] = 0;
    printf("ip=%s iflink=%s\n", ip, link[0] ? link : "?");
    return 0;
}

static int cmd_serve(int port)
{
    struct sockaddr_in a;
    char host[64] = "?", ip[INET_ADDRSTRLEN] = "?", msg[160];
    int fd, c, one = 1, n;

    handle_signals();
    gethostname(host, sizeof(host) - 1);
    if (if_ipv4("eth0", ip, sizeof(ip)) != 0)
        snprintf(ip, sizeof(ip), "?");
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        perror("probe serve: socket");
        return 1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 16) != 0) {
        perror("probe serve: bind/listen");
        close(fd);
        return 1;
    }
    printf("serving on port %d ip=%s\n", port, ip);
    fflush(stdout);
    n = snprintf(msg, sizeof(msg), "hello from %s ip=%s\n", host, ip);
    while (!stop_requested) {
        c = accept(fd, NULL, NULL);
        if (c < 0)
            continue; /* EINTR: check stop_requested */
        if (write(c, msg, (size_t)n) != n)
            perror("probe serve: write");
        close(c);
        printf("answered a connection\n");
        fflush(stdout);
    }
    close(fd);
    printf("stopped\n");
    return 0;
}

static int cmd_send(const char *host, int port, const char *data)
{
    struct sockaddr_in a;
    struct timeval tv = {.tv_sec = 10};
    char buf[4096];
    size_t total = 0;
    ssize_t r;
    int fd = -1, tries, rc = 1;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        fprintf(stderr, "probe send: HOST must be an IPv4 address, got %s\n", host);
        return 2;
    }
    for (tries = 0; tries < 30; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
            perror("probe send: socket");
            return 1;
        }
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            break;
        fprintf(stderr, "probe send: connect %s:%d: %s (try %d)\n", host, port, strerror(errno),
                tries + 1);
        close(fd);
        fd = -1;
        sleep(1);
    }
    if (fd < 0)
        goto out;
    if (data && *data && write(fd, data, strlen(data)) != (ssize_t)strlen(data)) {
        perror("probe send: write");
        goto out;
    }
    while (total < PROBE_MAX_REPLY && (r = read(fd, buf, sizeof(buf))) > 0) {
        fwrite(buf, 1, (size_t)r, stdout);
        total += (size_t)r;
    }
    fflush(stdout);
    rc = total > 0 ? 0 : 1;
    if (!total)
        fprintf(stderr, "probe send: no reply from %s:%d\n", host, port);
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

static int cmd_resolve(const char *name)
{
    struct addrinfo hints, *res = NULL;
    char ip[INET_ADDRSTRLEN] = "";
    int e;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if ((e = getaddrinfo(name, NULL, &hints, &res)) != 0) {
        fprintf(stderr, "probe resolve: %s: %s\n", name, gai_strerror(e));
        return 1;
    }
    inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, sizeof(ip));
    freeaddrinfo(res);
    printf("%s %s\n", name, ip);
    return 0;
}

int main(int argc, char **argv)
{
    int port;

    if (argc >= 2 && strcmp(argv[1], "pause") == 0)
        return cmd_pause();
    if (argc >= 2 && strcmp(argv[1], "addr") == 0)
        return cmd_addr(argc >= 3 ? argv[2] : "eth0");
    if (argc == 3 && strcmp(argv[1], "serve") == 0 && parse_port(argv[2], &port) == 0)
        return cmd_serve(port);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "send") == 0 && parse_port(argv[3], &port) == 0)
        return cmd_send(argv[2], port, argc == 5 ? argv[4] : NULL);
    if (argc == 3 && strcmp(argv[1], "resolve") == 0)
        return cmd_resolve(argv[2]);
    if (argc == 3 && strcmp(argv[1], "sleep") == 0 && parse_port(argv[2], &port) == 0) {
        sleep((unsigned)port); /* 1 to 65535 seconds */
        return 0;
    }
    fprintf(stderr,
            "usage: probe pause | addr [IF] | serve PORT | send HOST PORT [DATA] | sleep SECONDS | "
            "resolve NAME\n");
    return 2;
}
