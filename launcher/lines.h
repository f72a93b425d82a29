/*
 * Rank-prefixed line output: bytes read from a worker's pipe go in, whole
 * lines prefixed with "[rank=R] " come out, each batch written with one
 * write(2) so that lines of different ranks never mix inside a line.
 */
#ifndef KD_LAUNCHER_LINES_H
#define KD_LAUNCHER_LINES_H

#include <stddef.h>

#include "core/buf.h"
#include "core/fs.h" /* kd_write_all */
#include "core/err.h"

/**
 * The longest line written as one piece, in bytes (prefix and newline not
 * counted). A longer line is split into pieces of at most this many bytes
 * (cut before a UTF-8 sequence rather than inside it), each written as its
 * own prefixed line.
 */
#define KD_LINES_MAX 65536

/* Largest prefix kept ("[rank=4294967295] " fits easily). */
#define KD_LINES_PREFIX_MAX 64

struct kd_lines;

/**
 * Called with every line written (split pieces one by one), without the
 * prefix and the newline: the line is a (alen bytes) followed by b (blen
 * bytes). Runs on the feeding thread; must not block.
 */
typedef void (*kd_lines_hook)(const struct kd_lines *l, const char *a, size_t alen, const char *b,
                              size_t blen);

struct kd_lines {
    int fd;                           /* where the prefixed lines go */
    char prefix[KD_LINES_PREFIX_MAX]; /* "[rank=R] " */
    size_t plen;
    size_t max_line;     /* split lines longer than this */
    struct kd_buf part;  /* the unfinished line, at most max_line bytes */
    struct kd_buf out;   /* whole prefixed lines waiting for one write */
    int werr;            /* first write error; later output is dropped */
    unsigned long lines; /* lines written (split pieces count one each) */
    /* Optional, set after kd_lines_init: a copy of each line for someone else (log shipping). */
    kd_lines_hook hook;
    void *hook_ud;
    int rank;   /* for the hook: the worker's rank */
    int stream; /* for the hook: 0 stdout, 1 stderr */
};

/**
 * Start a prefixer writing to fd. `prefix` is copied (cut at
 * KD_LINES_PREFIX_MAX-1 bytes); max_line 0 means KD_LINES_MAX. Does not
 * take ownership of fd. Free with kd_lines_free.
 */
void kd_lines_init(struct kd_lines *l, int fd, const char *prefix, size_t max_line);

/**
 * Take n bytes of a worker's output and write every line they complete.
 * Blocks while fd is full. Returns 0, or the first write error (-errno, such
 * as -EPIPE): from then on output is consumed and dropped, so the caller may
 * log once and go on feeding. Not thread-safe per struct.
 */
int kd_lines_feed(struct kd_lines *l, const void *data, size_t n) KD_WUR;

/**
 * End of input: write the unfinished last line, if any, with a newline
 * added. Returns 0 or the first write error.
 */
int kd_lines_finish(struct kd_lines *l) KD_WUR;

/** Free the buffers (NULL-safe); does not close fd. */
void kd_lines_free(struct kd_lines *l);

/* How far into an upstream launcher's line its worker's "[rank=R] " may start. */
#define KD_LINES_UPSTREAM_TAG_MAX 96

/**
 * The worker of a line that an upstream launcher (torchrun, deepspeed,
 * horovodrun) printed: the "[rank=R] " that wrap_rank put first, possibly
 * after the launcher's own tag ("[default0]:", "[1,0]<stdout>:"), starting
 * within the first KD_LINES_UPSTREAM_TAG_MAX bytes. Returns R (0 to 2^30)
 * with *skip the bytes up to and including "] ", or -1 with *skip 0 for a
 * line of the launcher itself. Pure.
 */
int kd_lines_upstream_rank(const char *s, size_t n, size_t *skip);

#endif
