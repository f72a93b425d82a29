/*
 * TensorBoard event files (see tfevents.h). Written by hand: the format is
 * two fixed framings and three small protocol buffer messages, and
 * TensorFlow's own writer is not a C library Debian ships. CRC32C is the
 * table-driven byte-at-a-time form of the Castagnoli polynomial.
 */
#include "tfevents/tfevents.h"

#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t kd_tfevents_crc32c(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t c = 0xFFFFFFFFu;
    pthread_once(&crc_once, crc_init);
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t kd_tfevents_masked_crc(const void *p, size_t n)
{
    uint32_t c = kd_tfevents_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void le32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

int kd_tfevents_record(struct kd_buf *out, const void *data, size_t n)
{
    unsigned char head[12], tail[4];
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)((uint64_t)n >> (8 * i));
    le32(head + 8, kd_tfevents_masked_crc(head, 8));
    le32(tail, kd_tfevents_masked_crc(data, n));
    size_t before = out->len;
    int rc = kd_buf_append(out, head, sizeof(head));
    if (rc == 0)
        rc = kd_buf_append(out, data, n);
    if (rc == 0)
        rc = kd_buf_append(out, tail, sizeof(tail));
    if (rc != 0)
        out->len = before; /* no half record */
    return rc;
}

/* ---- protocol buffers: the few fields kdet writes -------------------------------------------- */

/* A message being built, in a fixed buffer (an Event of one batch stays small). */
struct pb {
    unsigned char *b;
    size_t n, cap;
    bool over;
};

static void pb_byte(struct pb *p, unsigned char c)
{
    if (p->n < p->cap)
        p->b[p->n++] = c;
    else
        p->over = true;
}

static void pb_varint(struct pb *p, uint64_t v)
{
    do {
        unsigned char c = v & 0x7F;
        v >>= 7;
        pb_byte(p, v ? c | 0x80 : c);
    } while (v);
}

/* field number f, wire type w */
static void pb_key(struct pb *p, unsigned f, unsigned w)
{
    pb_varint(p, (uint64_t)f << 3 | w);
}

static void pb_bytes(struct pb *p, unsigned f, const void *d, size_t n)
{
    pb_key(p, f, 2);
    pb_varint(p, n);
    for (size_t i = 0; i < n; i++)
        pb_byte(p, ((const unsigned char *)d)[i]);
}

static void pb_double(struct pb *p, unsigned f, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    pb_key(p, f, 1);
    for (int i = 0; i < 8; i++)
        pb_byte(p, (unsigned char)(u >> (8 * i)));
}

static void pb_float(struct pb *p, unsigned f, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    pb_key(p, f, 5);
    for (int i = 0; i < 4; i++)
        pb_byte(p, (unsigned char)(u >> (8 * i)));
}

/* Event fields: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary = 5.
 * Summary: value = 1 (repeated). Summary.Value: tag = 1, simple_value = 2 (float). */
int kd_tfevents_header(struct kd_buf *out, double wall_time)
{
    unsigned char buf[64];
    struct pb p = {buf, 0, sizeof(buf), false};
    pb_double(&p, 1, wall_time);
    pb_bytes(&p, 3, KD_TFEVENTS_VERSION, strlen(KD_TFEVENTS_VERSION));
    return p.over ? KD_ETOOBIG : kd_tfevents_record(out, buf, p.n);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The largest Event kdet writes: a batch's scalars. */
#define EVENT_MAX (256u << 10)
#define TAG_MAX 512

int kd_tfevents_scalars(struct kd_buf *out, double wall_time, int64_t step, const char *group,
                        const json_t *metrics)
{
    int rc = 0;
    unsigned char *ev = NULL, *sum = NULL;
    const char **keys = NULL;
    if (!json_is_object(metrics))
        return KD_EINVAL;
    size_t nk = 0, i = 0;
    const char *k;
    json_t *v;
    keys = malloc((json_object_size(metrics) + 1) * sizeof(*keys));
    ev = malloc(EVENT_MAX);
    sum = malloc(EVENT_MAX);
    if (keys == NULL || ev == NULL || sum == NULL) {
        rc = KD_ENOMEM;
        goto out;
    }
    json_object_foreach((json_t *)metrics, k, v)
    {
        if (json_is_number(v) && isfinite(json_number_value(v)))
            keys[nk++] = k;
    }
    if (nk == 0)
        goto out;
    qsort(keys, nk, sizeof(*keys), cmp_str);
    struct pb s = {sum, 0, EVENT_MAX, false};
    for (i = 0; i < nk; i++) {
        unsigned char val[TAG_MAX + 32];
        char tag[TAG_MAX];
        int tl = snprintf(tag, sizeof(tag), "%s/%s", group, keys[i]);
        if (tl < 0 || (size_t)tl >= sizeof(tag))
            continue; /* a tag that long is nobody's metric name */
        struct pb vp = {val, 0, sizeof(val), false};
        pb_bytes(&vp, 1, tag, (size_t)tl);
        pb_float(&vp, 2, (float)json_number_value(json_object_get(metrics, keys[i])));
        if (!vp.over)
            pb_bytes(&s, 1, val, vp.n);
    }
    struct pb e = {ev, 0, EVENT_MAX, false};
    pb_double(&e, 1, wall_time);
    pb_key(&e, 2, 0);
    pb_varint(&e, (uint64_t)step);
    pb_bytes(&e, 5, sum, s.n);
    if (s.over || e.over) {
        rc = KD_ETOOBIG;
        goto out;
    }
    rc = kd_tfevents_record(out, ev, e.n);
out:
    free(keys);
    free(ev);
    free(sum);
    return rc;
}

/* A path element of ours: letters, digits, '-', '_' and '.', not "." or "..". */
static bool safe_elem(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > 253 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

int kd_tfevents_experiment_dir(const struct kd_storage_config *sc, const char *exp_uid, char *dir,
                               size_t len)
{
    int n;
    if (!safe_elem(exp_uid))
        return KD_EINVAL;
    if (sc->type == KD_STORAGE_SHARED_FS)
        n = snprintf(dir, len, "%s%s%s/" KD_TFEVENTS_PREFIX "/%s", sc->host_path,
                     sc->storage_path[0] ? "/" : "", sc->storage_path, exp_uid);
    else if (sc->type == KD_STORAGE_S3)
        n = snprintf(dir, len, "s3://%s%s%s/" KD_TFEVENTS_PREFIX "/%s", sc->bucket,
                     sc->prefix[0] ? "/" : "", sc->prefix, exp_uid);
    else
        return KD_EINVAL;
    return n < 0 || (size_t)n >= len ? KD_ETOOBIG : 0;
}

int kd_tfevents_file_key(const char *exp_uid, const char *trial, int64_t secs, const char *tag,
                         char *key, size_t len)
{
    if (!safe_elem(exp_uid) || !safe_elem(trial) || !safe_elem(tag) || secs < 0)
        return KD_EINVAL;
    int n = snprintf(key, len, KD_TFEVENTS_PREFIX "/%s/%s/events.out.tfevents.%010lld.kdet.%s",
                     exp_uid, trial, (long long)secs, tag);
    return n < 0 || (size_t)n >= len ? KD_ETOOBIG : 0;
}
