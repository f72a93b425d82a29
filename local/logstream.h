/*
 * A container's log file answered over HTTP the way the kubelet does:
 * tailLines and limitBytes, and with follow a stream that waits for more
 * until the container's run ends. One implementation for kdet-local's
 * pods/log (api.c) and the node agent's /containerLogs (kubelet.c); each
 * says through a callback whether the run is still going.
 */
#ifndef KD_LOCAL_LOGSTREAM_H
#define KD_LOCAL_LOGSTREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct kd_http_req;

/** What a follow does when the file has nothing new. */
enum kd_logstream_state {
    KD_LOGSTREAM_LIVE,  /* the run goes on: wait for more */
    KD_LOGSTREAM_ENDED, /* the run is over: end after one more look at the file */
    KD_LOGSTREAM_STOP,  /* the server is stopping: end now */
};

struct kd_logstream_opts {
    const char *path; /* the log file of one run of the container (copied) */
    bool follow;      /* keep the stream open while the run goes on */
    int64_t tail;     /* < 0: the whole file; else its last `tail` lines */
    int64_t limit;    /* < 1: no limit; else at most this many bytes (without follow) */
    /*
     * Called on the HTTP thread between reads while following, with ud; must
     * not block long. ud belongs to the stream from then on: free_ud(ud)
     * runs exactly once (also when kd_logstream_respond answers at once).
     */
    enum kd_logstream_state (*state)(void *ud);
    void *ud;
    void (*free_ud)(void *ud);
};

/**
 * Answer r with the log: 200 text/plain, streamed; an absent file is an
 * empty log (a follow waits for it). Takes ownership of o->ud in every case.
 */
void kd_logstream_respond(struct kd_http_req *r, const struct kd_logstream_opts *o);

/**
 * Offset of the last `tail` lines of the file at path of `size` bytes (a
 * final newline ends the last line); 0 when the file has fewer lines.
 */
off_t kd_logstream_tail_offset(const char *path, off_t size, int64_t tail);

/** The kubelet's FallbackToLogsOnError bounds: 80 lines, 2048 bytes, whichever is smaller. */
#define KD_LOGSTREAM_MSG_LINES 80
#define KD_LOGSTREAM_MSG_BYTES 2048

/**
 * A termination message made from the log at path, as the kubelet makes one
 * for FallbackToLogsOnError: the last `lines` lines, of which the last
 * `max_bytes` bytes, as valid UTF-8 (a character cut at the start is
 * dropped; other invalid bytes and NULs become U+FFFD). NULL when the file
 * is absent, unreadable or empty. Caller frees with free(). Blocks on file
 * I/O; thread-safe.
 */
char *kd_logstream_last(const char *path, int64_t lines, size_t max_bytes);

/**
 * Copy n bytes of s into a new NUL-terminated string that is valid UTF-8:
 * continuation bytes at the start are dropped (a character cut by a byte
 * limit), every other invalid byte or NUL becomes U+FFFD. Caller frees.
 */
char *kd_logstream_utf8(const char *s, size_t n);

#endif
