/* A container's process family and its killing (proctree.h). */
#include "proctree.h"

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

size_t kd_proc_family(const struct kd_proc_ent *ps, size_t n, pid_t leader, pid_t *out)
{
    size_t k = 0;
    if (leader <= 1)
        return 0;
    bool *in = kd_xcalloc(n ? n : 1, sizeof(*in));
    for (size_t i = 0; i < n; i++) {
        if (ps[i].pid == leader || ps[i].sid == leader) {
            in[i] = true;
            out[k++] = ps[i].pid;
        }
    }
    /* out is also the queue: the children of each member join it, once (O(n) per member). */
    for (size_t m = 0; m < k; m++) {
        for (size_t i = 0; i < n; i++) {
            if (!in[i] && ps[i].pid > 1 && ps[i].ppid == out[m]) {
                in[i] = true;
                out[k++] = ps[i].pid;
            }
        }
    }
    free(in);
    return k;
}

/* pid, ppid and session of /proc/PID/stat: "pid (comm) state ppid pgrp session ...". */
static bool read_stat(const char *pid, struct kd_proc_ent *e)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    int ppid, pgrp, sid;
    char state;
    if (p == NULL || sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4)
        return false;
    e->pid = (pid_t)strtol(pid, NULL, 10);
    e->ppid = (pid_t)ppid;
    e->sid = (pid_t)sid;
    return true;
}

size_t kd_proc_snapshot(struct kd_proc_ent **out)
{
    size_t n = 0, cap = 256;
    *out = NULL;
    DIR *d = opendir("/proc");
    if (d == NULL)
        return 0;
    struct kd_proc_ent *ps = kd_xcalloc(cap, sizeof(*ps));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        if (n == cap) {
            cap *= 2;
            ps = kd_xrealloc(ps, cap * sizeof(*ps));
        }
        if (read_stat(e->d_name, &ps[n]))
            n++;
    }
    closedir(d);
    *out = ps;
    return n;
}

/* The family of leader in a fresh snapshot, into *out (malloc'd). */
static size_t family_now(pid_t leader, pid_t **out)
{
    struct kd_proc_ent *ps = NULL;
    size_t n = kd_proc_snapshot(&ps);
    *out = kd_xcalloc(n ? n : 1, sizeof(**out));
    size_t k = kd_proc_family(ps, n, leader, *out);
    free(ps);
    return k;
}

size_t kd_proc_kill_family(pid_t leader)
{
    pid_t *a = NULL, *b = NULL;
    size_t na = family_now(leader, &a), nb = 0;
    for (size_t i = 0; i < na; i++)
        kill(a[i], SIGSTOP);
    /* The second look is for what forked before the stop; with nothing found, nothing was
     * stopped either (the common case, a container that left nothing behind: each look reads
     * every process's stat, most of kdet-local's CPU per short pod). */
    if (na > 0)
        nb = family_now(leader, &b);
    for (size_t i = 0; i < nb; i++)
        kill(b[i], SIGKILL);
    for (size_t i = 0; i < na; i++)
        kill(a[i], SIGKILL);
    if (leader > 1)
        kill(-leader, SIGKILL);
    free(a);
    free(b);
    return nb > na ? nb : na;
}
