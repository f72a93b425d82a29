/*
 * Table tests of lib/config/k8smap.c: workspace and project names as label
 * values, capability names, port names, mount propagation, GPU devices and
 * path cleaning, each as the Kubernetes API server or runtime reads them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config/k8smap.h"

static void test_label_value(void **s)
{
    (void)s;
    static const struct {
        const char *in, *want; /* want NULL: KD_EINVALID */
    } rows[] = {
        {"Uncategorized", "uncategorized"},
        {"My Project", "my-project"},
        {"  Vision (2024) ", "vision-2024"},
        {"a__b..c", "a-b-c"},
        {"team-a", "team-a"},
        {"ÄÖ x", "x"},
        {"!!!", NULL},
        {"", NULL},
        {"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij-abcdef",
         "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij-ab"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char out[KD_LABEL_VALUE_MAX + 1];
        int rc = kd_label_value(rows[i].in, out, sizeof(out));
        if (rows[i].want == NULL) {
            assert_int_equal(rc, KD_EINVALID);
        } else {
            assert_int_equal(rc, 0);
            assert_string_equal(out, rows[i].want);
            assert_true(strlen(out) <= KD_LABEL_VALUE_MAX);
        }
    }
    char small[8];
    assert_int_equal(kd_label_value("x", small, sizeof(small)), KD_EINVALID);
}

static void test_capability(void **s)
{
    (void)s;
    static const struct {
        const char *in, *want;
        int rc;
    } rows[] = {
        {"SYS_ADMIN", "SYS_ADMIN", 0},
        {"CAP_SYS_PTRACE", "SYS_PTRACE", 0},
        {"cap_ipc_lock", "IPC_LOCK", 0},
        {"net_raw", "NET_RAW", 0},
        {"ALL", "ALL", 0},
        {"all", "ALL", 0},
        {"CHECKPOINT_RESTORE", "CHECKPOINT_RESTORE", 0},
        {"SYS_ADMN", "SYS_ADMIN", KD_EINVALID},
        {"NOPE", "", KD_EINVALID},
        {"", "", KD_EINVALID},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char out[32];
        assert_int_equal(kd_capability_name(rows[i].in, out, sizeof(out)), rows[i].rc);
        assert_string_equal(out, rows[i].want);
    }
}

static void test_port_name(void **s)
{
    (void)s;
    static const struct {
        const char *in;
        bool ok;
    } rows[] = {
        {"tensorboard", true},
        {"jupyter-lab", true},
        {"a1", true},
        {"http2", true},
        {"123", false},
        {"my_port", false},
        {"Web", false},
        {"-x", false},
        {"x-", false},
        {"a--b", false},
        {"", false},
        {"abcdefghijklmnop", false},
        {"abcdefghijklmno", true},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (kd_port_name_valid(rows[i].in) != rows[i].ok)
            fail_msg("%s: want %d", rows[i].in, rows[i].ok);
}

static void test_propagation_and_devices(void **s)
{
    (void)s;
    assert_null(kd_mount_propagation("rprivate"));
    assert_null(kd_mount_propagation("private"));
    assert_null(kd_mount_propagation(NULL));
    assert_string_equal(kd_mount_propagation("rslave"), "HostToContainer");
    assert_string_equal(kd_mount_propagation("slave"), "HostToContainer");
    assert_string_equal(kd_mount_propagation("rshared"), "Bidirectional");
    assert_string_equal(kd_mount_propagation("shared"), "Bidirectional");
    assert_true(kd_device_is_gpu("/dev/nvidia0"));
    assert_true(kd_device_is_gpu("/dev/nvidiactl"));
    assert_true(kd_device_is_gpu("/dev/kfd"));
    assert_true(kd_device_is_gpu("/dev/dri/renderD128"));
    assert_false(kd_device_is_gpu("/dev/fuse"));
    assert_false(kd_device_is_gpu("/dev/infiniband"));
    assert_false(kd_device_is_gpu("/dev/drivers"));
}

static void test_paths(void **s)
{
    (void)s;
    static const struct {
        const char *in, *want;
        bool dotdot;
    } rows[] = {
        {"/data", "/data", false},
        {"/data/", "/data", false},
        {"//data//x/", "/data/x", false},
        {"/data/./x/.", "/data/x", false},
        {"/", "/", false},
        {"/a/../b", "/a/../b", true},
        {"/a/..b", "/a/..b", false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char out[64];
        assert_int_equal(kd_path_clean(rows[i].in, out, sizeof(out)), rows[i].dotdot);
        assert_string_equal(out, rows[i].want);
    }
    assert_true(kd_path_within("/run/kdet", "/run/kdet"));
    assert_true(kd_path_within("/run/kdet/context", "/run/kdet"));
    assert_false(kd_path_within("/run/kdetx", "/run/kdet"));
    assert_false(kd_path_within("/run", "/run/kdet"));
    assert_true(kd_path_within("/x", "/"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_value), cmocka_unit_test(test_capability),
        cmocka_unit_test(test_port_name),   cmocka_unit_test(test_propagation_and_devices),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
