/*
 * TensorBoard event files (lib/tfevents): CRC32C against the published
 * check values (RFC 3720 B.4 and the "123456789" check), and what the
 * writer produces read back by a decoder written here from the formats'
 * descriptions, not from the writer: TFRecord framing (little-endian
 * length, masked CRC32C of the length, data, masked CRC32C of the data),
 * then Event and Summary protocol buffers field by field (wire types,
 * varints, doubles, floats, nested messages). A flipped byte is caught.
 * Paths and file names under a checkpoint storage.
 */
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tfevents/tfevents.h"

/* ---- the decoder ------------------------------------------------------------------------ */

/* CRC32C bit by bit (the reflected Castagnoli polynomial), apart from the table the writer
 * uses. */
static uint32_t crc_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

static uint32_t masked(const unsigned char *p, size_t n)
{
    uint32_t c = crc_bitwise(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The next TFRecord at *off: its data and length; false at the end or on a bad frame. */
static bool next_record(const unsigned char *buf, size_t len, size_t *off, const unsigned char **d,
                        size_t *dn)
{
    if (*off + 12 > len)
        return false;
    const unsigned char *h = buf + *off;
    uint64_t n = le(h, 8);
    if ((uint32_t)le(h + 8, 4) != masked(h, 8))
        fail_msg("record at %zu: bad length CRC", *off);
    if (*off + 12 + n + 4 > len)
        fail_msg("record at %zu: %llu bytes do not fit", *off, (unsigned long long)n);
    *d = h + 12;
    *dn = (size_t)n;
    if ((uint32_t)le(h + 12 + n, 4) != masked(h + 12, (size_t)n))
        fail_msg("record at %zu: bad data CRC", *off);
    *off += 12 + (size_t)n + 4;
    return true;
}

static uint64_t varint(const unsigned char *p, size_t n, size_t *i)
{
    uint64_t v = 0;
    for (int shift = 0; *i < n && shift < 64; shift += 7) {
        unsigned char c = p[(*i)++];
        v |= (uint64_t)(c & 0x7f) << shift;
        if ((c & 0x80) == 0)
            return v;
    }
    fail_msg("bad varint");
    return 0;
}

struct value {
    char tag[128];
    float v;
};

struct event {
    double wall_time;
    int64_t step;
    char version[32];
    struct value values[16];
    int nvalues;
    bool has_summary;
};

/* Summary.Value: tag = 1 (bytes), simple_value = 2 (float). */
static void decode_value(const unsigned char *p, size_t n, struct value *out)
{
    size_t i = 0;
    memset(out, 0, sizeof(*out));
    while (i < n) {
        uint64_t key = varint(p, n, &i);
        unsigned f = (unsigned)(key >> 3), w = key & 7;
        if (f == 1 && w == 2) {
            uint64_t l = varint(p, n, &i);
            snprintf(out->tag, sizeof(out->tag), "%.*s", (int)l, (const char *)p + i);
            i += l;
        } else if (f == 2 && w == 5) {
            uint32_t u = (uint32_t)le(p + i, 4);
            memcpy(&out->v, &u, 4);
            i += 4;
        } else {
            fail_msg("Summary.Value: unexpected field %u (wire type %u)", f, w);
        }
    }
}

/* Event: wall_time = 1 (double), step = 2 (varint), file_version = 3 (bytes), summary = 5. */
static void decode_event(const unsigned char *p, size_t n, struct event *e)
{
    size_t i = 0;
    memset(e, 0, sizeof(*e));
    while (i < n) {
        uint64_t key = varint(p, n, &i);
        unsigned f = (unsigned)(key >> 3), w = key & 7;
        if (f == 1 && w == 1) {
            uint64_t u = le(p + i, 8);
            memcpy(&e->wall_time, &u, 8);
            i += 8;
        } else if (f == 2 && w == 0) {
            e->step = (int64_t)varint(p, n, &i);
        } else if (f == 3 && w == 2) {
            uint64_t l = varint(p, n, &i);
            snprintf(e->version, sizeof(e->version), "%.*s", (int)l, (const char *)p + i);
            i += l;
        } else if (f == 5 && w == 2) {
            uint64_t l = varint(p, n, &i);
            size_t end = i + l, j = i;
            e->has_summary = true;
            while (j < end) { /* Summary: value = 1, repeated */
                uint64_t k2 = varint(p, end, &j);
                if ((k2 >> 3) != 1 || (k2 & 7) != 2)
                    fail_msg("Summary: unexpected field");
                uint64_t vl = varint(p, end, &j);
                if (e->nvalues < 16)
                    decode_value(p + j, (size_t)vl, &e->values[e->nvalues++]);
                j += vl;
            }
            i = end;
        } else {
            fail_msg("Event: unexpected field %u (wire type %u)", f, w);
        }
    }
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_crc(void **s)
{
    (void)s;
    unsigned char zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof(ones));
    for (int i = 0; i < 32; i++)
        inc[i] = (unsigned char)i;
    assert_int_equal(kd_tfevents_crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(kd_tfevents_crc32c(zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
    assert_int_equal(kd_tfevents_crc32c(ones, 32), 0x62A8AB43u);
    assert_int_equal(kd_tfevents_crc32c(inc, 32), 0x46DD794Eu);
    assert_int_equal(kd_tfevents_crc32c("", 0), 0);
    assert_int_equal(kd_tfevents_masked_crc("123456789", 9),
                     masked((const unsigned char *)"123456789", 9));
    for (size_t n = 0; n < 200; n += 7) {
        unsigned char buf[200];
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)(i * 31 + 7);
        assert_int_equal(kd_tfevents_crc32c(buf, n), crc_bitwise(buf, n));
    }
}

static void test_file(void **s)
{
    (void)s;
    struct kd_buf b = KD_BUF_INIT(1 << 20);
    json_t *m1 =
        json_pack("{s:f,s:i,s:s,s:f}", "loss", 0.5, "batches", 100, "note", "x", "accuracy", 0.875);
    json_t *m2 = json_pack("{s:f}", "loss", 0.25);
    json_t *nothing = json_pack("{s:s}", "note", "no number");
    json_object_set_new(nothing, "nan", json_real(NAN));
    assert_int_equal(kd_tfevents_header(&b, 1767225600.5), 0);
    assert_int_equal(kd_tfevents_scalars(&b, 1767225601.25, 100, "training", m1), 0);
    assert_int_equal(kd_tfevents_scalars(&b, 1767225602.0, 1LL << 40, "validation", m2), 0);
    size_t before = b.len;
    assert_int_equal(kd_tfevents_scalars(&b, 1.0, 1, "training", nothing), 0);
    assert_int_equal(b.len, before); /* nothing to say: no record */
    assert_int_equal(kd_tfevents_scalars(&b, 1.0, 1, "training", NULL), KD_EINVAL);

    size_t off = 0, dn = 0;
    const unsigned char *d = NULL;
    struct event e;
    assert_true(next_record((const unsigned char *)b.data, b.len, &off, &d, &dn));
    decode_event(d, dn, &e);
    assert_string_equal(e.version, "brain.Event:2");
    assert_true(e.wall_time == 1767225600.5);
    assert_false(e.has_summary);
    assert_true(next_record((const unsigned char *)b.data, b.len, &off, &d, &dn));
    decode_event(d, dn, &e);
    assert_true(e.wall_time == 1767225601.25);
    assert_int_equal(e.step, 100);
    assert_int_equal(e.nvalues, 3); /* the numbers, keys sorted; the string left out */
    assert_string_equal(e.values[0].tag, "training/accuracy");
    assert_true(e.values[0].v == 0.875f);
    assert_string_equal(e.values[1].tag, "training/batches");
    assert_true(e.values[1].v == 100.0f);
    assert_string_equal(e.values[2].tag, "training/loss");
    assert_true(e.values[2].v == 0.5f);
    assert_true(next_record((const unsigned char *)b.data, b.len, &off, &d, &dn));
    decode_event(d, dn, &e);
    assert_int_equal(e.step, 1LL << 40); /* a multi-byte varint */
    assert_string_equal(e.values[0].tag, "validation/loss");
    assert_true(e.values[0].v == 0.25f);
    assert_false(next_record((const unsigned char *)b.data, b.len, &off, &d, &dn));
    assert_int_equal(off, b.len);

    /* A full buffer: nothing half-written. */
    struct kd_buf small = KD_BUF_INIT(20);
    assert_int_equal(kd_tfevents_scalars(&small, 1.0, 1, "training", m1), KD_ETOOBIG);
    assert_int_equal(small.len, 0);
    kd_buf_free(&small);
    kd_buf_free(&b);
    json_decref(m1);
    json_decref(m2);
    json_decref(nothing);
}

/* The decoder is no rubber stamp: one flipped bit anywhere fails the frame's CRC. */
static void test_corruption_caught(void **s)
{
    (void)s;
    struct kd_buf b = KD_BUF_INIT(4096);
    json_t *m = json_pack("{s:f}", "loss", 1.5);
    assert_int_equal(kd_tfevents_scalars(&b, 2.0, 3, "training", m), 0);
    for (size_t i = 0; i < b.len; i++) {
        unsigned char *p = (unsigned char *)b.data;
        p[i] ^= 0x10;
        uint64_t n = le(p, 8);
        bool len_ok = (uint32_t)le(p + 8, 4) == masked(p, 8);
        bool data_ok = len_ok && 12 + n + 4 <= b.len &&
                       (uint32_t)le(p + 12 + n, 4) == masked(p + 12, (size_t)n);
        if (len_ok && data_ok)
            fail_msg("flipping a bit of byte %zu went unnoticed", i);
        p[i] ^= 0x10;
    }
    kd_buf_free(&b);
    json_decref(m);
}

static void test_paths(void **s)
{
    (void)s;
    struct kd_storage_config sc;
    char dir[256], key[512];
    kd_storage_config_init(&sc);
    sc.type = KD_STORAGE_SHARED_FS;
    snprintf(sc.host_path, sizeof(sc.host_path), "/mnt/ckpt");
    assert_int_equal(kd_tfevents_experiment_dir(&sc, "0a1b-2c", dir, sizeof(dir)), 0);
    assert_string_equal(dir, "/mnt/ckpt/tensorboard/0a1b-2c");
    snprintf(sc.storage_path, sizeof(sc.storage_path), "team");
    assert_int_equal(kd_tfevents_experiment_dir(&sc, "u", dir, sizeof(dir)), 0);
    assert_string_equal(dir, "/mnt/ckpt/team/tensorboard/u");
    kd_storage_config_init(&sc);
    sc.type = KD_STORAGE_S3;
    snprintf(sc.bucket, sizeof(sc.bucket), "b");
    snprintf(sc.prefix, sizeof(sc.prefix), "p/q");
    assert_int_equal(kd_tfevents_experiment_dir(&sc, "u", dir, sizeof(dir)), 0);
    assert_string_equal(dir, "s3://b/p/q/tensorboard/u");
    assert_int_equal(kd_tfevents_experiment_dir(&sc, "../x", dir, sizeof(dir)), KD_EINVAL);
    assert_int_equal(kd_tfevents_experiment_dir(&sc, "u", dir, 8), KD_ETOOBIG);
    kd_storage_config_init(&sc);
    assert_int_equal(kd_tfevents_experiment_dir(&sc, "u", dir, sizeof(dir)), KD_EINVAL);
    assert_int_equal(kd_tfevents_file_key("u", "mnist-1", 1767225600, "0a1b", key, sizeof(key)), 0);
    assert_string_equal(key, "tensorboard/u/mnist-1/events.out.tfevents.1767225600.kdet.0a1b");
    assert_int_equal(kd_tfevents_file_key("u", "a/b", 1, "t", key, sizeof(key)), KD_EINVAL);
    assert_int_equal(kd_tfevents_file_key("u", "..", 1, "t", key, sizeof(key)), KD_EINVAL);
    assert_int_equal(kd_tfevents_file_key("u", "t", -1, "t", key, sizeof(key)), KD_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_corruption_caught),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
