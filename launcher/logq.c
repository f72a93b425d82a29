/*
 * The log shipping queue (see logq.h). Workers print whatever bytes they
 * like, but the controller stores JSON text in PostgreSQL, which takes
 * neither NUL nor invalid UTF-8: lines are made valid here, once, so that a
 * batch can never be refused for its content. The UTF-8 check is written
 * out because jansson only rejects invalid text, it cannot repair it.
 */
#include "logq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/str.h"
#include "core/alloc.h"
#include "core/time.h"

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

void kd_logq_init(struct kd_logq *q, size_t max_bytes)
{
    memset(q, 0, sizeof(*q));
    q->max_bytes = max_bytes ? max_bytes : KD_LOGQ_MAX_BYTES;
}

static void free_list(struct kd_logq_line *l)
{
    while (l != NULL) {
        struct kd_logq_line *next = l->next;
        free(l);
        l = next;
    }
}

void kd_logq_free(struct kd_logq *q)
{
    if (q == NULL)
        return;
    free_list(q->head);
    q->head = q->tail = NULL;
    q->nlines = q->bytes = 0;
}

void kd_logq_batch_free(struct kd_logq_batch *b)
{
    if (b == NULL)
        return;
    free_list(b->head);
    memset(b, 0, sizeof(*b));
}

/*
 * The length of the valid UTF-8 sequence at s (n bytes available), or 0
 * when s does not start one: overlong forms, surrogates, code points past
 * U+10FFFF and NUL count as invalid.
 */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t want;
    uint32_t cp;
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        want = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        want = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        want = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < want)
        return 0;
    for (size_t i = 1; i < want; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((want == 3 && cp < 0x800) || (want == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return want;
}

/* Append src (n bytes) to dst as valid UTF-8; returns the new end. dst has 3n bytes of room. */
static char *append_valid(char *dst, const unsigned char *src, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(src + i, n - i);
        if (k == 0) {
            memcpy(dst, REPLACEMENT, 3);
            dst += 3;
            i++;
        } else {
            memcpy(dst, src + i, k);
            dst += k;
            i += k;
        }
    }
    return dst;
}

static void drop_oldest(struct kd_logq *q)
{
    struct kd_logq_line *l = q->head;
    q->head = l->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->nlines--;
    q->bytes -= l->len + KD_LOGQ_OVERHEAD;
    q->dropped++;
    q->dropped_total++;
    q->dropped_ts_ms = l->ts_ms;
    free(l);
}

void kd_logq_push(struct kd_logq *q, int rank, int stream, int64_t ts_ms, int64_t mono_ms,
                  const char *a, size_t alen, const char *b, size_t blen)
{
    size_t total = alen + blen;
    /* A CRLF line ends in "\r": not part of the text. */
    if (total > 0 && (blen > 0 ? b[blen - 1] : a[alen - 1]) == '\r') {
        if (blen > 0)
            blen--;
        else
            alen--;
        total--;
    }
    /* The raw bytes kept: the first KD_LOGQ_LINE_MAX, cut between sequences. */
    size_t keep = total, cut_bytes = 0;
    unsigned char *raw = kd_xmalloc(total + 1);
    memcpy(raw, a, alen);
    memcpy(raw + alen, b, blen);
    if (total > KD_LOGQ_LINE_MAX) {
        keep = kd_utf8_cut(raw, KD_LOGQ_LINE_MAX);
        cut_bytes = total - keep;
    }
    char marker[80] = "";
    if (cut_bytes > 0)
        snprintf(marker, sizeof(marker), " [kdet-launch: line cut, %zu bytes dropped]", cut_bytes);
    size_t mlen = strlen(marker);
    struct kd_logq_line *l = kd_xmalloc(sizeof(*l) + keep * 3 + mlen + 1);
    char *end = append_valid(l->text, raw, keep);
    memcpy(end, marker, mlen);
    end += mlen;
    *end = '\0';
    free(raw);
    l->next = NULL;
    l->ts_ms = ts_ms;
    l->mono_ms = mono_ms;
    l->rank = rank;
    l->stream = stream;
    l->len = (size_t)(end - l->text);
    if (q->head == NULL) {
        q->head = l;
    } else {
        q->tail->next = l;
    }
    q->tail = l;
    q->nlines++;
    q->bytes += l->len + KD_LOGQ_OVERHEAD;
    /* Full: the oldest go (the line just queued stays, whatever its size). */
    while (q->bytes > q->max_bytes && q->head != l)
        drop_oldest(q);
}

bool kd_logq_due(const struct kd_logq *q, int64_t mono_ms, bool flushing)
{
    size_t text = q->bytes - q->nlines * KD_LOGQ_OVERHEAD;
    if (q->nlines == 0)
        return flushing && q->dropped > 0;
    return flushing || text >= KD_LOGQ_BATCH_BYTES || q->nlines >= KD_LOGQ_BATCH_LINES ||
           mono_ms - q->head->mono_ms >= KD_LOGQ_BATCH_MS;
}

static struct kd_logq_line *marker_line(const struct kd_logq *q)
{
    char text[120];
    int n = snprintf(text, sizeof(text), "kdet-launch: %llu line%s dropped: the log queue was full",
                     (unsigned long long)q->dropped, q->dropped == 1 ? "" : "s");
    struct kd_logq_line *l = kd_xmalloc(sizeof(*l) + (size_t)n + 1);
    memcpy(l->text, text, (size_t)n + 1);
    l->next = NULL;
    l->ts_ms = q->dropped_ts_ms;
    l->mono_ms = 0;
    l->rank = KD_LOGQ_RANK_LAUNCHER;
    l->stream = KD_LOGQ_STDERR;
    l->len = (size_t)n;
    return l;
}

size_t kd_logq_take(struct kd_logq *q, struct kd_logq_batch *b)
{
    struct kd_logq_line **tail = &b->head;
    kd_logq_batch_free(b);
    if (q->dropped > 0) {
        struct kd_logq_line *m = marker_line(q);
        *tail = m;
        tail = &m->next;
        b->nlines++;
        b->bytes += m->len;
        q->dropped = 0;
    }
    while (q->head != NULL && b->nlines < KD_LOGQ_BATCH_LINES &&
           (b->bytes == 0 || b->bytes + q->head->len <= KD_LOGQ_BATCH_BYTES)) {
        struct kd_logq_line *l = q->head;
        q->head = l->next;
        q->nlines--;
        q->bytes -= l->len + KD_LOGQ_OVERHEAD;
        l->next = NULL;
        *tail = l;
        tail = &l->next;
        b->nlines++;
        b->bytes += l->len;
    }
    if (q->head == NULL)
        q->tail = NULL;
    return b->nlines;
}

char *kd_logq_batch_json(const struct kd_logq_batch *b, const char *key, const char *run_id,
                         int node_rank)
{
    json_t *lines = json_array();
    char ts[40];
    for (const struct kd_logq_line *l = b->head; l != NULL; l = l->next) {
        json_t *text = json_stringn(l->text, l->len);
        if (text == NULL) /* cannot happen: the text was made valid when queued */
            text = json_string("");
        json_array_append_new(
            lines, json_pack("{s:i,s:s,s:s,s:o}", "rank", l->rank, "stream",
                             l->stream == KD_LOGQ_STDERR ? "stderr" : "stdout", "timestamp",
                             kd_time_rfc3339(l->ts_ms, 1, ts, sizeof(ts)), "line", text));
    }
    json_t *body = json_pack("{s:s,s:s,s:i,s:o}", "key", key, "run_id", run_id ? run_id : "",
                             "node_rank", node_rank, "lines", lines);
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (s == NULL)
        kd_oom(0);
    return s;
}

int64_t kd_logq_backoff_ms(int attempt)
{
    int64_t ms = 250;
    for (int i = 1; i < attempt && ms < 8000; i++)
        ms *= 2;
    return ms < 8000 ? ms : 8000;
}
