/*
 * Test helper: a real s3rver (npm, installed by `make deps` into
 * .deps/s3rver) on 127.0.0.1 on a free port, with one bucket, started,
 * killed and restarted on the same data directory by the tests.
 */
#ifndef KD_TEST_S3SRV_H
#define KD_TEST_S3SRV_H

#include <limits.h>
#include <sys/types.h>

#include "storage/storage.h"

struct s3srv {
    pid_t pid;
    int port;
    char dir[PATH_MAX]; /* data directory (removed by s3srv_stop) */
    char bucket[64];
    char log[PATH_MAX + 16];
};

/** Path of the s3rver program, or NULL (with a message on stderr) when not installed. */
const char *s3srv_program(void);

/** Start a server with `bucket` in a fresh temp dir. 0 or -1 (message on stderr). */
int s3srv_start(struct s3srv *s, const char *bucket);

/** Start again on the same port and data directory (after s3srv_kill). */
int s3srv_restart(struct s3srv *s);

/** SIGKILL the server and reap it (the data directory stays). */
void s3srv_kill(struct s3srv *s);

/** Stop the server and remove its data directory. */
void s3srv_stop(struct s3srv *s);

/** A storage config pointing at the server (path-style, S3RVER credentials via env). */
void s3srv_config(const struct s3srv *s, const char *prefix, struct kd_storage_config *cfg);

/** Remove a directory tree (test cleanup). */
void s3srv_rm_tree(const char *path);

#endif
