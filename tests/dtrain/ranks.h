/*
 * Multi-process test harness for libdtrain: each rank is this same test
 * binary re-executed (fork + exec of /proc/self/exe) with "--worker NAME"
 * and the kdet-launch environment, so ranks are real processes with their
 * own sockets and mappings. Output of each rank goes to a temp file the
 * test reads back.
 */
#ifndef TEST_DTRAIN_RANKS_H
#define TEST_DTRAIN_RANKS_H

#include <stdbool.h>
#include <sys/types.h>

#define RK_MAX 8

struct rk_proc {
    pid_t pid;
    int status; /* from waitpid, valid once done */
    bool done;
    char log[256]; /* path of its output */
};

struct rk_job {
    int world;
    int port;
    char dir[64]; /* temp dir for logs, removed by rk_cleanup */
    struct rk_proc p[RK_MAX * 2];
    int np;
};

/** A free TCP port on 127.0.0.1 (bind to port 0, read it back, close). */
int rk_free_port(void);

/** Start a job: temp dir, free port. */
void rk_init(struct rk_job *j, int world);

/**
 * Start one rank running worker `name`. `extra` is a NULL-terminated list
 * of "KEY=VALUE" strings added to (or overriding) the standard env
 * (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, KDET_RUN_ID=run-1, ...).
 * Returns the index in j->p.
 */
int rk_spawn(struct rk_job *j, const char *name, int rank, const char *const *extra);

/** Wait for process i for at most timeout_ms; true when it exited. */
bool rk_wait(struct rk_job *j, int i, int timeout_ms);

/** Wait for all; SIGKILL stragglers after timeout_ms. Returns how many were killed. */
int rk_wait_all(struct rk_job *j, int timeout_ms);

/** Exit code of process i (-signal when killed by a signal). */
int rk_code(const struct rk_job *j, int i);

/** Contents of process i's log (static buffer, overwritten by the next call). */
const char *rk_log(const struct rk_job *j, int i);

/** Kill leftovers, remove the temp dir; asserts no /dev/shm/dtrain-* of ours remains. */
void rk_cleanup(struct rk_job *j);

/** Dispatch: when argv is "--worker NAME", run the worker and exit. */
typedef int (*rk_worker_fn)(void);
struct rk_worker {
    const char *name;
    rk_worker_fn fn;
};
void rk_dispatch(int argc, char **argv, const struct rk_worker *table);

#endif
