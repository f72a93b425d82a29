/* The launcher's env contract: defaults, checks with named errors, slot counts, worker env. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../launcher/env.h"
#include "core/log.h"

static const char *const inputs[] = {
    "KDET_TRIAL_ID",   "KDET_EXPERIMENT",      "KDET_CONTROLLER_URL",
    "KDET_TOKEN",      "KDET_NODE_RANK",       "KDET_NUM_NODES",
    "KDET_CHIEF_ADDR", "KDET_MASTER_PORT",     "KDET_RUN_ID",
    "KDET_HPARAMS",    "KDET_TRIAL_SEED",      "KDET_GRACE_PERIOD",
    "KDET_PYTHON",     "CUDA_VISIBLE_DEVICES", "RANK",
    "MASTER_PORT",     "PYTHONUNBUFFERED",     NULL,
};

static int clean(void **state)
{
    (void)state;
    for (int i = 0; inputs[i]; i++)
        unsetenv(inputs[i]);
    kd_log_clear_secrets();
    return 0;
}

static void test_defaults(void **state)
{
    (void)state;
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_int_equal(e.node_rank, 0);
    assert_int_equal(e.num_nodes, 1);
    assert_int_equal(e.master_port, 29400);
    assert_true(e.grace_s == 10.0);
    assert_string_equal(e.chief_addr, "127.0.0.1");
    assert_string_equal(e.python, "python3");
    assert_true(e.run_id_made);
    assert_int_equal(strlen(e.run_id), 16);
    assert_int_equal(strspn(e.run_id, "0123456789abcdef"), 16);
    /* A new attempt gets a new id. */
    struct kd_launch_env e2;
    assert_int_equal(kd_launch_env_load(&e2, err), 0);
    assert_string_not_equal(e.run_id, e2.run_id);
}

static void test_values(void **state)
{
    (void)state;
    setenv("KDET_NODE_RANK", "1", 1);
    setenv("KDET_NUM_NODES", "2", 1);
    setenv("KDET_CHIEF_ADDR", "trial-7-0.kdet.svc", 1);
    setenv("KDET_MASTER_PORT", "29555", 1);
    setenv("KDET_RUN_ID", "exp-3.trial-7_attempt-2", 1);
    setenv("KDET_GRACE_PERIOD", "2.5", 1);
    setenv("KDET_HPARAMS", "{\"lr\": 0.1, \"layers\": [1, 2]}", 1);
    setenv("KDET_TRIAL_SEED", "4294967295", 1);
    setenv("KDET_CONTROLLER_URL", "https://kdet:8080", 1);
    setenv("KDET_TRIAL_ID", "7", 1);
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_int_equal(e.node_rank, 1);
    assert_int_equal(e.num_nodes, 2);
    assert_int_equal(e.master_port, 29555);
    assert_true(e.grace_s == 2.5);
    assert_false(e.run_id_made);
    assert_string_equal(e.run_id, "exp-3.trial-7_attempt-2");
    assert_string_equal(e.chief_addr, "trial-7-0.kdet.svc");
    assert_string_equal(e.trial, "7");
}

struct bad {
    const char *name, *value, *want;
};

static void test_errors_name_the_input(void **state)
{
    (void)state;
    static const struct bad cases[] = {
        {"KDET_NODE_RANK", "abc", "KDET_NODE_RANK=abc: not an integer"},
        {"KDET_NODE_RANK", "1", "KDET_NODE_RANK=1: must be less than KDET_NUM_NODES=1"},
        {"KDET_NODE_RANK", "-1", "KDET_NODE_RANK=-1: must be between 0"},
        {"KDET_NUM_NODES", "0", "KDET_NUM_NODES=0: must be between 1 and 65536"},
        {"KDET_MASTER_PORT", "70000", "KDET_MASTER_PORT=70000: must be between 1 and 65535"},
        {"KDET_MASTER_PORT", "", "KDET_MASTER_PORT=\"\": not an integer"},
        {"KDET_GRACE_PERIOD", "-1", "KDET_GRACE_PERIOD=-1: must be a number of seconds"},
        {"KDET_GRACE_PERIOD", "ten", "KDET_GRACE_PERIOD=ten"},
        {"KDET_GRACE_PERIOD", "nan", "KDET_GRACE_PERIOD=nan"},
        {"KDET_CHIEF_ADDR", "", "KDET_CHIEF_ADDR is empty"},
        {"KDET_CHIEF_ADDR", "a b", "KDET_CHIEF_ADDR=\"a b\": character 2"},
        {"KDET_RUN_ID", "bad id", "KDET_RUN_ID=\"bad id\": character 4"},
        {"KDET_RUN_ID", "", "KDET_RUN_ID: must be 1 to 128 characters"},
        {"KDET_HPARAMS", "{\"lr\": }", "KDET_HPARAMS: invalid JSON at line 1 column 8"},
        {"KDET_HPARAMS", "[1]", "KDET_HPARAMS: must be a JSON object, got a JSON array"},
        {"KDET_TRIAL_SEED", "-1", "KDET_TRIAL_SEED=-1: must be an integer from 0 to 4294967295"},
        {"KDET_TRIAL_SEED", "4294967296", "KDET_TRIAL_SEED=4294967296"},
        {"KDET_CONTROLLER_URL", "ftp://x", "KDET_CONTROLLER_URL=ftp://x: must start with http"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        clean(NULL);
        setenv(cases[i].name, cases[i].value, 1);
        struct kd_launch_env e;
        char err[KD_ERRLEN] = "";
        assert_int_equal(kd_launch_env_load(&e, err), KD_EINVAL);
        if (strstr(err, cases[i].want) == NULL)
            fail_msg("%s=%s: error \"%s\" lacks \"%s\"", cases[i].name, cases[i].value, err,
                     cases[i].want);
    }
}

static void test_token_is_secret(void **state)
{
    (void)state;
    char big[KD_LAUNCH_MAX_VALUE + 2];
    memset(big, 'k', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    setenv("KDET_TOKEN", big, 1);
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_launch_env_load(&e, err), KD_EINVAL);
    assert_non_null(strstr(err, "KDET_TOKEN: longer than"));
    assert_null(strstr(err, "kkkk"));

    setenv("KDET_TOKEN", "s3cr3t-t0ken-value", 1);
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_true(e.token_set);
    char out[256];
    kd_redact("msg=x cmd=\"train --auth s3cr3t-t0ken-value\"", out, sizeof(out));
    assert_null(strstr(out, "s3cr3t"));
    assert_non_null(strstr(out, "[REDACTED]"));
}

static void test_cuda_count(void **state)
{
    (void)state;
    assert_int_equal(kd_launch_cuda_count(NULL), -1);
    assert_int_equal(kd_launch_cuda_count(""), 0);
    assert_int_equal(kd_launch_cuda_count("0"), 1);
    assert_int_equal(kd_launch_cuda_count("0,1,2"), 3);
    assert_int_equal(kd_launch_cuda_count(" 0 , 1 "), 2);
    assert_int_equal(kd_launch_cuda_count("GPU-8f6e,MIG-1c2d"), 2);
    assert_int_equal(kd_launch_cuda_count("0,,1"), 1);
    assert_int_equal(kd_launch_cuda_count("-1"), 0);
    assert_int_equal(kd_launch_cuda_count("0,-1,2"), 1);
    assert_int_equal(kd_launch_cuda_count("NoDevFiles"), 0);
    assert_int_equal(kd_launch_cuda_count("void"), 0);
}

static void test_slots(void **state)
{
    (void)state;
    const char *src = NULL;
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    assert_int_equal(kd_launch_slots(4, &src), 4);
    assert_string_equal(src, "--nproc");
    assert_int_equal(kd_launch_slots(0, &src), 2);
    assert_string_equal(src, "CUDA_VISIBLE_DEVICES");
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    assert_int_equal(kd_launch_slots(0, &src), 1);
    assert_string_equal(src, "CUDA_VISIBLE_DEVICES");
    unsetenv("CUDA_VISIBLE_DEVICES");
    int nvml = kd_launch_nvml_count();
    if (nvml > 0) {
        assert_int_equal(kd_launch_slots(0, &src), nvml);
        assert_string_equal(src, "nvml");
    } else {
        /* No NVML here (no driver): a clean fall-back to one worker. */
        assert_int_equal(kd_launch_slots(0, &src), 1);
        assert_string_equal(src, "default");
    }
}

static const char *find(char **envp, const char *name)
{
    const char *found = NULL;
    size_t n = strlen(name);
    for (char **p = envp; *p; p++) {
        if (strncmp(*p, name, n) == 0 && (*p)[n] == '=') {
            if (found != NULL)
                fail_msg("%s appears twice", name);
            found = *p + n + 1;
        }
    }
    return found;
}

/* Which port counts as chosen, and the free port picked on one node. */
static void test_port(void **state)
{
    (void)state;
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    /* The controller's default on one node: a free port is picked. */
    setenv("KDET_MASTER_PORT", "29400", 1);
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_string_equal(e.port_source, "default");
    assert_int_equal(kd_launch_env_pick_port(&e, err), 0);
    assert_string_equal(e.port_source, "picked");
    assert_true(e.master_port > 0 && e.master_port <= 65535);
    assert_int_not_equal(e.master_port, 29400);
    /* MASTER_PORT from the experiment's environment wins on one node. */
    setenv("MASTER_PORT", "29777", 1);
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_int_equal(kd_launch_env_pick_port(&e, err), 0);
    assert_int_equal(e.master_port, 29777);
    assert_string_equal(e.port_source, "MASTER_PORT");
    char **envp = kd_launch_worker_env(&e, 2, 1);
    assert_string_equal(find(envp, "MASTER_PORT"), "29777");
    assert_string_equal(find(envp, "KDET_MASTER_PORT"), "29777");
    kd_launch_envp_free(envp);
    setenv("MASTER_PORT", "0", 1);
    assert_int_equal(kd_launch_env_load(&e, err), KD_EINVAL);
    assert_string_equal(err, "MASTER_PORT=0: must be between 1 and 65535");
    unsetenv("MASTER_PORT");
    /* Another KDET_MASTER_PORT is kept. */
    setenv("KDET_MASTER_PORT", "29555", 1);
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_int_equal(kd_launch_env_pick_port(&e, err), 0);
    assert_int_equal(e.master_port, 29555);
    assert_string_equal(e.port_source, "KDET_MASTER_PORT");
    /* Several nodes: KDET_MASTER_PORT as given, MASTER_PORT ignored. */
    setenv("KDET_MASTER_PORT", "29400", 1);
    setenv("MASTER_PORT", "29777", 1);
    setenv("KDET_NUM_NODES", "2", 1);
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_int_equal(kd_launch_env_pick_port(&e, err), 0);
    assert_int_equal(e.master_port, 29400);
    assert_string_equal(e.port_source, "default");
}

static void test_worker_env(void **state)
{
    (void)state;
    setenv("KDET_NODE_RANK", "1", 1);
    setenv("KDET_NUM_NODES", "2", 1);
    setenv("KDET_CHIEF_ADDR", "10.0.0.5", 1);
    setenv("KDET_TRIAL_ID", "42", 1);
    setenv("KDET_HPARAMS", "{\"lr\":0.5}", 1);
    setenv("RANK", "99", 1); /* stale: must be replaced */
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    for (int local = 0; local < 3; local++) {
        char **envp = kd_launch_worker_env(&e, 3, local);
        char want[16];
        snprintf(want, sizeof(want), "%d", 3 + local);
        assert_string_equal(find(envp, "RANK"), want);
        snprintf(want, sizeof(want), "%d", local);
        assert_string_equal(find(envp, "LOCAL_RANK"), want);
        assert_string_equal(find(envp, "WORLD_SIZE"), "6");
        assert_string_equal(find(envp, "LOCAL_WORLD_SIZE"), "3");
        assert_string_equal(find(envp, "GROUP_RANK"), "1");
        assert_string_equal(find(envp, "GROUP_WORLD_SIZE"), "2");
        assert_string_equal(find(envp, "MASTER_ADDR"), "10.0.0.5");
        assert_string_equal(find(envp, "MASTER_PORT"), "29400");
        assert_string_equal(find(envp, "KDET_NODE_RANK"), "1");
        assert_string_equal(find(envp, "KDET_NUM_NODES"), "2");
        assert_string_equal(find(envp, "KDET_RUN_ID"), e.run_id);
        assert_string_equal(find(envp, "KDET_GRACE_PERIOD"), "10");
        assert_string_equal(find(envp, "KDET_TRIAL_ID"), "42");
        assert_string_equal(find(envp, "KDET_HPARAMS"), "{\"lr\":0.5}");
        assert_string_equal(find(envp, "PYTHONUNBUFFERED"), "1");
        kd_launch_envp_free(envp);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clean),
        cmocka_unit_test_setup(test_values, clean),
        cmocka_unit_test_setup(test_errors_name_the_input, clean),
        cmocka_unit_test_setup_teardown(test_token_is_secret, clean, clean),
        cmocka_unit_test_setup(test_cuda_count, clean),
        cmocka_unit_test_setup(test_slots, clean),
        cmocka_unit_test_setup(test_worker_env, clean),
        cmocka_unit_test_setup(test_port, clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
