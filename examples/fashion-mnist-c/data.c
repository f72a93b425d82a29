/*
 * idx file reader on top of zlib's gzread. Headers are checked (magic,
 * 28x28 images, sample counts that agree and stay under a hard cap) and
 * every error names the file.
 */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int read_exact(gzFile f, void *p, size_t n)
{
    int r = gzread(f, p, (unsigned)n);
    return r == (int)n ? 0 : -1;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static int load_file(const char *path, uint32_t magic, size_t limit, uint8_t **out, size_t *n,
                     char *err)
{
    int rc = -1;
    unsigned char hdr[16];
    uint8_t *buf = NULL;
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        snprintf(err, 256, "%s: cannot open: %s (install dataset-fashion-mnist or pass --data)",
                 path, strerror(errno ? errno : ENOENT));
        goto out;
    }
    size_t hlen = magic == 0x803 ? 16 : 8;
    if (read_exact(f, hdr, hlen) < 0) {
        snprintf(err, 256, "%s: truncated header", path);
        goto out;
    }
    if (be32(hdr) != magic) {
        snprintf(err, 256, "%s: bad magic 0x%08x, expected 0x%08x", path, be32(hdr), magic);
        goto out;
    }
    size_t count = be32(hdr + 4), each = 1;
    if (count == 0 || count > FM_MAX_SAMPLES) {
        snprintf(err, 256, "%s: %zu samples, expected 1..%d", path, count, FM_MAX_SAMPLES);
        goto out;
    }
    if (magic == 0x803) {
        if (be32(hdr + 8) != 28 || be32(hdr + 12) != 28) {
            snprintf(err, 256, "%s: images are %ux%u, expected 28x28", path, be32(hdr + 8),
                     be32(hdr + 12));
            goto out;
        }
        each = FM_PIXELS;
    }
    if (limit > 0 && limit < count)
        count = limit;
    buf = malloc(count * each);
    if (buf == NULL) {
        snprintf(err, 256, "%s: out of memory", path);
        goto out;
    }
    if (read_exact(f, buf, count * each) < 0) {
        snprintf(err, 256, "%s: truncated data (wanted %zu samples)", path, count);
        goto out;
    }
    *out = buf;
    buf = NULL;
    *n = count;
    rc = 0;
out:
    free(buf);
    if (f != NULL)
        gzclose(f);
    return rc;
}

int fm_load(const char *dir, const char *prefix, size_t limit, struct fm_set *out, char *err)
{
    char p[1024];
    size_t ni = 0, nl = 0;
    memset(out, 0, sizeof(*out));
    snprintf(p, sizeof(p), "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    if (load_file(p, 0x803, limit, &out->images, &ni, err) < 0)
        goto fail;
    snprintf(p, sizeof(p), "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    if (load_file(p, 0x801, limit, &out->labels, &nl, err) < 0)
        goto fail;
    if (ni != nl) {
        snprintf(err, 256, "%.200s/%s: %zu images but %zu labels", dir, prefix, ni, nl);
        goto fail;
    }
    for (size_t i = 0; i < nl; i++) {
        if (out->labels[i] >= FM_CLASSES) {
            snprintf(err, 256, "%.180s: label %u at sample %zu is not a class 0..9", p,
                     out->labels[i], i);
            goto fail;
        }
    }
    out->n = ni;
    return 0;
fail:
    fm_free(out);
    return -1;
}

void fm_free(struct fm_set *s)
{
    if (s == NULL)
        return;
    free(s->images);
    free(s->labels);
    memset(s, 0, sizeof(*s));
}
