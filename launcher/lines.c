/*
 * Rank-prefixed line output (see lines.h). A pipe read may end anywhere in
 * a line, so the unfinished tail is kept until its newline arrives; whole
 * lines are batched into one buffer and written with one write(2).
 */
#include "lines.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "core/str.h"

/* Batch up to this many bytes of whole lines before writing. */
#define OUT_BATCH 65536

void kd_lines_init(struct kd_lines *l, int fd, const char *prefix, size_t max_line)
{
    memset(l, 0, sizeof(*l));
    l->fd = fd;
    kd_strlcpy(l->prefix, prefix ? prefix : "", sizeof(l->prefix));
    l->plen = strlen(l->prefix);
    l->max_line = max_line ? max_line : KD_LINES_MAX;
    kd_buf_init(&l->part, l->max_line);
    kd_buf_init(&l->out, l->plen + l->max_line + 1 + OUT_BATCH);
}

void kd_lines_free(struct kd_lines *l)
{
    if (l == NULL)
        return;
    kd_buf_free(&l->part);
    kd_buf_free(&l->out);
}

static int flush_out(struct kd_lines *l)
{
    if (l->out.len > 0 && l->werr == 0)
        l->werr = kd_write_all(l->fd, l->out.data, l->out.len);
    kd_buf_reset(&l->out);
    return l->werr;
}

/* Queue one output line: prefix, a then b (either may be empty), newline. */
static int emit(struct kd_lines *l, const char *a, size_t alen, const char *b, size_t blen)
{
    int rc = 0;
    size_t need = l->plen + alen + blen + 1;
    if (l->out.len + need > l->out.max && (rc = flush_out(l)) < 0)
        goto out;
    /* Cannot fail: out.max holds a whole line of max_line bytes. */
    if (kd_buf_append(&l->out, l->prefix, l->plen) < 0 || kd_buf_append(&l->out, a, alen) < 0 ||
        kd_buf_append(&l->out, b, blen) < 0 || kd_buf_putc(&l->out, '\n') < 0) {
        rc = KD_ENOMEM;
        goto out;
    }
    l->lines++;
    if (l->hook != NULL)
        l->hook(l, a, alen, b, blen);
    if (l->out.len >= OUT_BATCH)
        rc = flush_out(l);
out:
    return rc;
}

int kd_lines_feed(struct kd_lines *l, const void *data, size_t n)
{
    const char *p = data;
    const char *end = p + n;
    int rc = 0;
    /* emit() only fails by a write error, which is kept in l->werr: go on
     * consuming so that the worker is never blocked on a full pipe. */
    while (p < end) {
        if (l->part.len == l->max_line) {
            /* A full unfinished line: it ends here, or it is split. */
            if (*p == '\n') {
                (void)emit(l, l->part.data, l->part.len, "", 0);
                kd_buf_reset(&l->part);
                p++;
            } else {
                size_t cut = kd_utf8_cut((const unsigned char *)l->part.data, l->part.len);
                if (cut == 0) /* one incomplete sequence as long as a line: cut it */
                    cut = l->part.len;
                (void)emit(l, l->part.data, cut, "", 0);
                kd_buf_consume(&l->part, cut);
            }
            continue;
        }
        size_t room = l->max_line - l->part.len;
        size_t avail = (size_t)(end - p);
        size_t take = avail < room ? avail : room;
        /* A newline just after `room` bytes still ends a line of max_line. */
        const char *nl = memchr(p, '\n', take < avail ? take + 1 : take);
        if (nl != NULL) {
            (void)emit(l, l->part.len ? l->part.data : "", l->part.len, p, (size_t)(nl - p));
            kd_buf_reset(&l->part);
            p = nl + 1;
        } else {
            if (kd_buf_append(&l->part, p, take) < 0) {
                rc = KD_ENOMEM; /* cannot happen: take <= room */
                goto out;
            }
            p += take;
        }
    }
    rc = flush_out(l);
out:
    return rc < 0 ? rc : l->werr;
}

int kd_lines_finish(struct kd_lines *l)
{
    int rc = 0;
    if (l->part.len > 0) {
        rc = emit(l, l->part.data, l->part.len, "", 0);
        kd_buf_reset(&l->part);
    }
    int frc = flush_out(l);
    return rc < 0 ? rc : frc;
}

int kd_lines_upstream_rank(const char *s, size_t n, size_t *skip)
{
    static const char tag[] = "[rank=";
    const size_t tlen = sizeof(tag) - 1;
    size_t lim = n < KD_LINES_UPSTREAM_TAG_MAX ? n : KD_LINES_UPSTREAM_TAG_MAX;
    *skip = 0;
    for (size_t i = 0; i + tlen < lim; i++) {
        if (memcmp(s + i, tag, tlen) != 0)
            continue;
        size_t j = i + tlen;
        long r = 0;
        size_t digits = 0;
        while (j < n && s[j] >= '0' && s[j] <= '9' && digits < 11) {
            r = r * 10 + (s[j] - '0');
            j++;
            digits++;
        }
        if (digits == 0 || digits > 10 || r > (1L << 30) || j >= n || s[j] != ']')
            continue;
        j++;
        if (j < n && s[j] == ' ')
            j++;
        *skip = j;
        return (int)r;
    }
    return -1;
}
