/* A container's process family (local/proctree.c): the table of the pure rule, and the real
 * thing on this machine (a leader whose workers sit in process groups of their own). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/time.h"
#include "../../local/proctree.h"

static int cmp_pid(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

static void test_family_table(void **state)
{
    (void)state;
    /* pid, ppid, sid. 100 leads a session (a container); 1 is init, 50 the kubelet. */
    static const struct kd_proc_ent snap[] = {
        {1, 0, 1},       {50, 1, 50},     {100, 50, 100}, /* the leader */
        {101, 100, 100},                                  /* a worker, group of its own */
        {102, 101, 100},                                  /* its child */
        {103, 1, 100},                                    /* an orphan of the session */
        {104, 100, 104},                                  /* called setsid (sshd) */
        {105, 104, 104},                                  /* its child */
        {106, 1, 106},                                    /* an orphan that called setsid */
        {200, 50, 200},  {201, 200, 200},                 /* another container */
        {300, 1, 300},                                    /* unrelated */
    };
    static const struct {
        pid_t leader;
        pid_t want[8];
        size_t n;
    } rows[] = {
        {100, {100, 101, 102, 103, 104, 105}, 6},
        {200, {200, 201}, 2},
        {104, {104, 105}, 2},
        {101, {101, 102}, 2}, /* not a session leader: its descendants only */
        {999, {0}, 0},        /* gone, and no session of that id */
        {1, {0}, 0},          /* never init */
        {0, {0}, 0},
    };
    size_t n = sizeof(snap) / sizeof(snap[0]);
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        pid_t out[sizeof(snap) / sizeof(snap[0])];
        size_t k = kd_proc_family(snap, n, rows[r].leader, out);
        qsort(out, k, sizeof(out[0]), cmp_pid);
        print_message("leader %d: %zu processes\n", (int)rows[r].leader, k);
        assert_int_equal(k, rows[r].n);
        for (size_t i = 0; i < k; i++)
            assert_int_equal(out[i], rows[r].want[i]);
    }
    /* A descendant listed before its parent is still found (a chain in reverse order). */
    static const struct kd_proc_ent chain[] = {
        {14, 13, 14}, {13, 12, 13}, {12, 11, 12}, {11, 10, 11}, {10, 1, 10}};
    pid_t out[5];
    assert_int_equal(kd_proc_family(chain, 5, 10, out), 5);
}

/* Alive: there, and not a zombie waiting for its new parent to reap it. */
static int alive(pid_t pid)
{
    char path[64], buf[256] = "";
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' && p[2] != 'Z';
}

/* A leader in its own session with a worker in its own process group (as kdet-launch makes
 * them) and a grandchild: killing the family leaves none of them. */
static void test_kill_family(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t leader = fork();
    assert_true(leader >= 0);
    if (leader == 0) {
        setsid();
        pid_t w = fork();
        if (w == 0) {
            setpgid(0, 0);
            pid_t g = fork();
            if (g == 0) {
                pid_t me = getpid();
                if (write(fds[1], &me, sizeof(me)) != (ssize_t)sizeof(me))
                    _exit(1);
                pause();
                _exit(0);
            }
            if (write(fds[1], &(pid_t){getpid()}, sizeof(pid_t)) != (ssize_t)sizeof(pid_t))
                _exit(1);
            pause();
            _exit(0);
        }
        pause();
        _exit(0);
    }
    close(fds[1]);
    pid_t kids[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(read(fds[0], &kids[i], sizeof(pid_t)), (ssize_t)sizeof(pid_t));
    close(fds[0]);
    assert_true(alive(kids[0]) && alive(kids[1]));
    /* What a kill of the leader's process group alone would miss: the worker's own group. */
    assert_true(getpgid(kids[0]) != leader || getpgid(kids[1]) != leader);
    assert_true(kd_proc_kill_family(leader) >= 3);
    int st;
    assert_int_equal(waitpid(leader, &st, 0), leader);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* The others are reparented and reaped by init (or a subreaper): wait until gone. */
    for (int i = 0; i < 200 && (alive(kids[0]) || alive(kids[1])); i++)
        kd_sleep_ms(10);
    assert_false(alive(kids[0]));
    assert_false(alive(kids[1]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_table),
        cmocka_unit_test(test_kill_family),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
