/* The protobuf decoder on bodies encoded here by hand, as kubectl's generators send them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../local/proto.h"

struct enc {
    uint8_t b[4096];
    size_t n;
};

static void put_varint(struct enc *e, uint64_t v)
{
    do {
        uint8_t x = v & 0x7f;
        v >>= 7;
        e->b[e->n++] = x | (v ? 0x80 : 0);
    } while (v);
}

static void put_bytes(struct enc *e, unsigned field, const void *p, size_t n)
{
    put_varint(e, (uint64_t)field << 3 | 2);
    put_varint(e, n);
    memcpy(e->b + e->n, p, n);
    e->n += n;
}

static void put_str(struct enc *e, unsigned field, const char *s)
{
    put_bytes(e, field, s, strlen(s));
}

static void put_map(struct enc *e, unsigned field, const char *k, const char *v)
{
    struct enc m = {.n = 0};
    put_str(&m, 1, k);
    put_str(&m, 2, v);
    put_bytes(e, field, m.b, m.n);
}

static void envelope(struct enc *out, const char *av, const char *kind, const struct enc *raw)
{
    struct enc tm = {.n = 0};
    put_str(&tm, 1, av);
    put_str(&tm, 2, kind);
    memcpy(out->b, "k8s\0", 4);
    out->n = 4;
    put_bytes(out, 1, tm.b, tm.n);
    put_bytes(out, 2, raw->b, raw->n);
    put_str(out, 4, "application/vnd.kubernetes.protobuf");
}

static void test_configmap(void **state)
{
    (void)state;
    struct enc meta = {.n = 0}, cm = {.n = 0}, body;
    put_str(&meta, 1, "cfg");
    put_str(&meta, 3, "team");
    put_map(&meta, 11, "app", "x");
    put_str(&meta, 14, "kdet.io/keep");
    put_varint(&meta, 99 << 3 | 0); /* an unknown field is skipped */
    put_varint(&meta, 5);
    put_bytes(&cm, 1, meta.b, meta.n);
    put_map(&cm, 2, "a", "1");
    put_map(&cm, 2, "b", "");
    put_map(&cm, 3, "bin", "\x01\x02");
    put_varint(&cm, 4 << 3 | 0);
    put_varint(&cm, 1);
    envelope(&body, "v1", "ConfigMap", &cm);
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_proto_decode(body.b, body.n, &out, err), 0);
    char *s = json_dumps(out, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(s, "{\"apiVersion\":\"v1\",\"binaryData\":{\"bin\":\"AQI=\"},\"data\":{"
                           "\"a\":\"1\",\"b\":\"\"},\"immutable\":true,\"kind\":\"ConfigMap\","
                           "\"metadata\":{\"finalizers\":[\"kdet.io/keep\"],\"labels\":{\"app\":"
                           "\"x\"},\"name\":\"cfg\",\"namespace\":\"team\"}}");
    free(s);
    json_decref(out);
}

static void test_errors(void **state)
{
    (void)state;
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_proto_decode("{}", 2, &out, err), KD_EPARSE);
    assert_non_null(strstr(err, "prefix"));
    struct enc raw = {.n = 0}, body;
    put_str(&raw, 1, "x");
    envelope(&body, "apps/v1", "Deployment", &raw);
    assert_int_equal(kd_proto_decode(body.b, body.n, &out, err), KD_ENOTSUP);
    assert_non_null(strstr(err, "not Deployment"));
    /* A truncated body: the length runs past the end. */
    envelope(&body, "v1", "Secret", &raw);
    assert_int_equal(kd_proto_decode(body.b, body.n - 5, &out, err), KD_EPARSE);
    assert_null(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_configmap),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
