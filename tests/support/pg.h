/*
 * A private PostgreSQL server for tests: initdb into a fresh temp dir, a
 * server that listens only on a unix socket in that dir, and a watchdog
 * process that stops the server and removes the dir when the test process
 * goes away for any reason (a failed assertion, a timeout, SIGKILL).
 */
#ifndef KD_TESTS_SUPPORT_PG_H
#define KD_TESTS_SUPPORT_PG_H

#include <stddef.h>
#include <sys/types.h>

#include "core/err.h"

struct kd_pg {
    char dir[256];    /* temp dir: data/, the socket, server.log */
    char bindir[256]; /* where initdb, pg_ctl and postgres live */
    int running;      /* 1 while the server is up (as far as we know) */
    pid_t watchdog;   /* cleans up when this process dies */
    int watchdog_fd;  /* write end of the pipe the watchdog waits on */
};

/**
 * initdb (user "kdet", trust auth, UTF8, no fsync) into a new temp dir under
 * $TMPDIR or /tmp, then start the server and wait until it accepts
 * connections. As root, initdb and postgres refuse to run, so every server
 * command runs as the unprivileged user nobody (uid/gid 65534, via
 * setpriv) and the dir is chowned to it. The server binaries are looked up
 * in $KD_PG_BINDIR, `pg_config --bindir`, /usr/lib/postgresql/N/bin and
 * PATH. fsync is off (a crash of the machine loses data, a crash of the
 * server does not); synchronous_commit stays on, so a commit that returned
 * survives `kd_pg_stop(pg, "immediate")`. Blocks for a few seconds. 0 or a negative KD_E*, with
 * detail in err.
 */
int kd_pg_start(struct kd_pg *pg, char *err) KD_WUR;

/** Stop the server: mode "fast" (clean) or "immediate" (like a crash). */
int kd_pg_stop(struct kd_pg *pg, const char *mode, char *err) KD_WUR;

/** Start the stopped server again on the same data dir and socket. */
int kd_pg_restart(struct kd_pg *pg, char *err) KD_WUR;

/**
 * Stop the server (fast), end the watchdog and remove the temp dir.
 * NULL-safe and idempotent; call it from the test's teardown.
 */
void kd_pg_destroy(struct kd_pg *pg);

/** A libpq conninfo for database `db` ("postgres" when NULL) into buf. */
const char *kd_pg_conninfo(const struct kd_pg *pg, const char *db, char *buf, size_t len);

/** CREATE DATABASE `name` (letters, digits and _ only). */
int kd_pg_createdb(const struct kd_pg *pg, const char *name, char *err) KD_WUR;

#endif
