/*
 * Container logs over HTTP (logstream.h): where to start (tailLines), a
 * bounded slice (limitBytes), and a follow that polls the file and asks its
 * owner whether the run is over.
 */
#include "logstream.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/time.h"
#include "http/http.h"

#define FOLLOW_POLL_MS 200

struct logstream {
    char *path;
    bool follow;
    off_t off;
    int idle_rounds;
    int fd; /* held open: the kubelet removes a deleted pod's files */
    enum kd_logstream_state (*state)(void *ud);
    void *ud;
    void (*free_ud)(void *ud);
};

static void logstream_free(void *ctx)
{
    struct logstream *l = ctx;
    if (l == NULL)
        return;
    if (l->free_ud != NULL)
        l->free_ud(l->ud);
    free(l->path);
    if (l->fd >= 0)
        close(l->fd);
    free(l);
}

static ssize_t logstream_read(void *ctx, char *buf, size_t max)
{
    struct logstream *l = ctx;
    ssize_t n = 0;
    if (l->fd < 0)
        l->fd = open(l->path, O_RDONLY | O_CLOEXEC);
    if (l->fd >= 0)
        n = pread(l->fd, buf, max, l->off);
    if (n > 0) {
        l->off += n;
        return n;
    }
    if (!l->follow)
        return -1;
    /* Nothing new: end once the run is over, after one more look at the file. */
    enum kd_logstream_state s = l->state != NULL ? l->state(l->ud) : KD_LOGSTREAM_ENDED;
    if (s == KD_LOGSTREAM_STOP || (s == KD_LOGSTREAM_ENDED && ++l->idle_rounds > 1))
        return -1;
    kd_sleep_ms(FOLLOW_POLL_MS);
    return 0;
}

off_t kd_logstream_tail_offset(const char *path, off_t size, int64_t tail)
{
    off_t start = 0;
    int fd = -1;
    if (tail == 0) {
        start = size;
        goto out;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto out;
    char chunk[4096];
    off_t pos = size;
    int64_t seen = 0;
    while (pos > 0) {
        size_t want = pos > (off_t)sizeof(chunk) ? sizeof(chunk) : (size_t)pos;
        ssize_t got = pread(fd, chunk, want, pos - (off_t)want);
        if (got != (ssize_t)want)
            goto out;
        for (size_t i = want; i-- > 0;) {
            off_t at = pos - (off_t)want + (off_t)i;
            if (chunk[i] == '\n' && at != size - 1 && ++seen == tail) {
                start = at + 1;
                goto out;
            }
        }
        pos -= (off_t)want;
    }
out:
    if (fd >= 0)
        close(fd);
    return start;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. Strict
 * as jansson is: no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp, min;
    if (s[0] >= 0x01 && s[0] < 0x80)
        return 1;
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2, cp = s[0] & 0x1f, min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3, cp = s[0] & 0x0f, min = 0x800;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4, cp = s[0] & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

char *kd_logstream_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    char *out = kd_xmalloc(3 * n + 1);
    size_t i = 0, o = 0;
    while (i < n && i < 3 && (u[i] & 0xc0) == 0x80)
        i++;
    while (i < n) {
        size_t len = utf8_seq(u + i, n - i);
        if (len == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, u + i, len);
            o += len;
            i += len;
        }
    }
    out[o] = '\0';
    return out;
}

char *kd_logstream_last(const char *path, int64_t lines, size_t max_bytes)
{
    char *msg = NULL, *raw = NULL;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size == 0)
        goto out;
    off_t start = kd_logstream_tail_offset(path, sb.st_size, lines);
    if (sb.st_size - start > (off_t)max_bytes)
        start = sb.st_size - (off_t)max_bytes;
    size_t want = (size_t)(sb.st_size - start);
    raw = kd_xmalloc(want + 1);
    ssize_t got = pread(fd, raw, want, start);
    if (got <= 0)
        goto out;
    msg = kd_logstream_utf8(raw, (size_t)got);
out:
    if (fd >= 0)
        close(fd);
    free(raw);
    return msg;
}

void kd_logstream_respond(struct kd_http_req *r, const struct kd_logstream_opts *o)
{
    char *data = NULL;
    struct logstream *l = kd_xcalloc(1, sizeof(*l));
    l->path = kd_xstrdup(o->path);
    l->follow = o->follow;
    l->state = o->state;
    l->ud = o->ud;
    l->free_ud = o->free_ud;
    l->fd = open(l->path, O_RDONLY | O_CLOEXEC);
    /* Where to start: the last tail lines (or limit bytes), read from the end. */
    struct stat sb;
    if (l->fd >= 0 && fstat(l->fd, &sb) == 0) {
        off_t start = o->tail >= 0 ? kd_logstream_tail_offset(l->path, sb.st_size, o->tail) : 0;
        l->off = start;
        if (o->limit > 0 && !l->follow && sb.st_size - start > o->limit) {
            data = kd_xmalloc((size_t)o->limit);
            ssize_t got = pread(l->fd, data, (size_t)o->limit, start);
            kd_http_respond(r, 200, "text/plain", data, got > 0 ? (size_t)got : 0);
            goto out;
        }
    }
    kd_http_respond_stream(r, 200, "text/plain", logstream_read, l, logstream_free);
    l = NULL;
out:
    free(data);
    logstream_free(l);
}
