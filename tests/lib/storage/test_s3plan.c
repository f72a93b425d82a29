/*
 * How the s3 backend cuts files into requests: which files go up in one
 * PUT and which in parts, and how large the parts are, with the default
 * settings and with part_size set.
 */
#include "../../../lib/storage/s3.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

static void plan(struct kd_storage *st, uint64_t part_size, int parallel)
{
    memset(st, 0, sizeof(*st));
    st->cfg.part_size = part_size;
    st->cfg.parallel = parallel;
}

static void test_default_single_put_up_to_256mib(void **state)
{
    struct kd_storage st;
    (void)state;
    plan(&st, 0, 0);
    /* checkpoint shards up to 256 MiB are one PUT each: written once by the server */
    assert_true(40 * MiB <= multipart_threshold(&st));
    assert_true(256 * MiB <= multipart_threshold(&st));
    assert_false(256 * MiB + 1 <= multipart_threshold(&st));
    /* above it, parts: two per connection, at least 8 MiB */
    assert_int_equal(part_size_for(&st, 1024 * MiB), 32 * MiB);
    assert_int_equal(part_size_for(&st, 257 * MiB), 9 * MiB);
    plan(&st, 0, 4);
    assert_int_equal(part_size_for(&st, 1024 * MiB), 128 * MiB);
}

static void test_part_size_set(void **state)
{
    struct kd_storage st;
    (void)state;
    /* an explicit part size is also the threshold, as it always was */
    plan(&st, 5 * MiB, 0);
    assert_int_equal(multipart_threshold(&st), 5 * MiB);
    assert_int_equal(part_size_for(&st, 70 * MiB), 5 * MiB);
    /* never more than 10,000 parts */
    assert_int_equal(part_size_for(&st, 100000 * MiB), 10 * MiB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_single_put_up_to_256mib),
        cmocka_unit_test(test_part_size_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
