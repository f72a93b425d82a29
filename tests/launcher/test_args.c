/* kdet-launch's command line and the exact argv of the upstream launchers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../launcher/args.h"

#define ARGV(...) ((char *[]){"kdet-launch", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"kdet-launch", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(a, err, ...) kd_launch_parse_args(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (a), (err))

static int clean(void **state)
{
    (void)state;
    unsetenv("KDET_PYTHON");
    unsetenv("KDET_NODE_ADDRS");
    unsetenv("KDET_NODE_RANK");
    unsetenv("KDET_NUM_NODES");
    unsetenv("KDET_CHIEF_ADDR");
    unsetenv("KDET_MASTER_PORT");
    return 0;
}

/* argv joined with spaces, for exact comparisons. */
static char *join(char **v)
{
    static char buf[4096];
    size_t pos = 0;
    buf[0] = '\0';
    for (char **p = v; *p; p++)
        pos += (size_t)snprintf(buf + pos, sizeof(buf) - pos, "%s%s", p == v ? "" : " ", *p);
    return buf;
}

static void test_plain(void **state)
{
    (void)state;
    struct kd_launch_args a;
    char err[KD_ERRLEN] = "";
    assert_int_equal(PARSE(&a, err, "--nproc", "2", "python3", "train.py", "--lr", "0.1"), 0);
    assert_int_equal(a.nproc, 2);
    assert_int_equal(a.form, KD_FORM_PLAIN);
    assert_int_equal(a.nscript, 4);
    assert_string_equal(a.script[0], "python3");
    assert_string_equal(a.script[3], "0.1");
    assert_true(a.grace_s < 0);

    assert_int_equal(PARSE(&a, err, "--nproc=3", "--grace-period=1.5", "--", "--odd-name", "x"), 0);
    assert_int_equal(a.nproc, 3);
    assert_true(a.grace_s == 1.5);
    assert_string_equal(a.script[0], "--odd-name");
    assert_int_equal(a.nscript, 2);

    /* After `--` a form word is just a program name. */
    assert_int_equal(PARSE(&a, err, "--", "deepspeed", "x"), 0);
    assert_int_equal(a.form, KD_FORM_PLAIN);
    assert_string_equal(a.script[0], "deepspeed");

    assert_int_equal(PARSE(&a, err, "-h"), 0);
    assert_true(a.help);
}

static void test_trial(void **state)
{
    (void)state;
    struct kd_launch_args a;
    struct kd_launch_env e = {.python = "python3"};
    char err[KD_ERRLEN] = "";
    assert_int_equal(PARSE(&a, err, "--trial", "model_def.py:MNistTrial"), 0);
    assert_string_equal(a.trial, "model_def.py:MNistTrial");
    char **cmd = kd_launch_worker_cmd(&a, &e);
    assert_string_equal(join(cmd), "python3 -m kdet.harness --trial model_def.py:MNistTrial");
    free(cmd);
    e.python = "/usr/bin/python3";
    assert_int_equal(PARSE(&a, err, "--nproc", "2", "--", "--trial=pkg/model.py:Outer.Inner"), 0);
    cmd = kd_launch_worker_cmd(&a, &e);
    assert_string_equal(join(cmd),
                        "/usr/bin/python3 -m kdet.harness --trial pkg/model.py:Outer.Inner");
    free(cmd);
}

struct bad {
    int argc;
    char **argv;
    const char *want;
};

static void test_errors(void **state)
{
    (void)state;
#define BAD(want, ...)                                                                             \
    {                                                                                              \
        ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), want                                                 \
    }
    const struct bad cases[] = {
        BAD("no command", "--nproc", "2"),
        BAD("no command", "torch_distributed", "--nnodes", "2", "--"),
        BAD("argument 1: --nproc 0: must be an integer from 1 to 1024", "--nproc", "0"),
        BAD("argument 1: --nproc abc", "--nproc", "abc", "x"),
        BAD("argument 1: --nproc needs a value", "--nproc"),
        BAD("argument 1: --grace-period -1", "--grace-period", "-1", "x"),
        BAD("argument 1: unknown option --nprocs (did you mean --nproc?)", "--nprocs", "2", "x"),
        BAD("argument 1: unknown option --grace (did you mean", "--grace=3", "x"),
        BAD("argument 1: unknown option -x", "-x", "y"),
        BAD("--trial model_def.py: expected FILE:CLASS", "--trial", "model_def.py"),
        BAD("--trial m.py:1Trial: CLASS 1Trial is not a Python class name", "--trial",
            "m.py:1Trial"),
        BAD("argument 3: extra: nothing may follow --trial", "--trial", "m.py:T", "extra"),
        BAD("the SCRIPT is an empty string", "--", ""),
    };
#undef BAD
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_launch_args a;
        char err[KD_ERRLEN] = "";
        assert_int_equal(kd_launch_parse_args(cases[i].argc, cases[i].argv, &a, err), KD_EINVAL);
        if (strstr(err, cases[i].want) == NULL)
            fail_msg("case %zu: error \"%s\" lacks \"%s\"", i, err, cases[i].want);
    }
}

static void test_forms(void **state)
{
    (void)state;
    struct kd_launch_args a;
    char err[KD_ERRLEN] = "";
    assert_int_equal(
        PARSE(&a, err, "torch_distributed", "--rdzv_backend", "c10d", "--", "python3", "t.py"), 0);
    assert_int_equal(a.form, KD_FORM_TORCH);
    assert_int_equal(a.noverrides, 2);
    assert_string_equal(a.overrides[1], "c10d");
    assert_int_equal(a.nscript, 2);
    /* Without `--` there are no overrides. */
    assert_int_equal(PARSE(&a, err, "horovod", "python3", "t.py", "--epochs", "3"), 0);
    assert_int_equal(a.form, KD_FORM_HOROVOD);
    assert_int_equal(a.noverrides, 0);
    assert_int_equal(a.nscript, 4);
    assert_int_equal(PARSE(&a, err, "--nproc", "4", "deepspeed", "--", "--trial", "m.py:T"), 0);
    assert_int_equal(a.form, KD_FORM_DEEPSPEED);
    assert_int_equal(a.nproc, 4);
    assert_string_equal(a.trial, "m.py:T");
}

static void env_two_nodes(struct kd_launch_env *e)
{
    setenv("KDET_NODE_RANK", "1", 1);
    setenv("KDET_NUM_NODES", "2", 1);
    setenv("KDET_CHIEF_ADDR", "10.0.0.1", 1);
    setenv("KDET_MASTER_PORT", "29500", 1);
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_launch_env_load(e, err), 0);
}

static void test_torch_argv(void **state)
{
    (void)state;
    struct kd_launch_args a;
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    char **argv = NULL;
    env_two_nodes(&e);
    assert_int_equal(PARSE(&a, err, "torch_distributed", "--rdzv_backend", "c10d", "--", "python3",
                           "train.py", "--lr", "0.1"),
                     0);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 4, "/opt/kdet/bin/wrap_rank", &argv, err), 0);
    assert_string_equal(join(argv),
                        "torchrun --nnodes 2 --nproc_per_node 4 --node_rank 1 --master_addr "
                        "10.0.0.1 --master_port 29500 --max_restarts 0 --rdzv_backend c10d "
                        "--no_python /opt/kdet/bin/wrap_rank RANK python3 train.py --lr 0.1");
    kd_launch_argv_free(argv);
}

static void test_deepspeed_argv(void **state)
{
    (void)state;
    struct kd_launch_args a;
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    char **argv = NULL;
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_int_equal(PARSE(&a, err, "deepspeed", "--", "--trial", "m.py:T"), 0);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 2, "wrap_rank", &argv, err), 0);
    assert_string_equal(join(argv), "deepspeed --num_nodes 1 --num_gpus 2 --master_addr 127.0.0.1 "
                                    "--master_port 29400 --no_python --no_local_rank -- "
                                    "wrap_rank RANK python3 -m kdet.harness --trial m.py:T");
    kd_launch_argv_free(argv);
    env_two_nodes(&e);
    assert_int_equal(PARSE(&a, err, "deepspeed", "--bind_cores_to_rank", "--", "python3", "t.py"),
                     0);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 8, "wrap_rank", &argv, err), 0);
    assert_string_equal(join(argv), "deepspeed --num_nodes 2 --num_gpus 8 --master_addr 10.0.0.1 "
                                    "--master_port 29500 --node_rank 1 --no_ssh --no_python "
                                    "--no_local_rank --bind_cores_to_rank -- wrap_rank RANK "
                                    "python3 t.py");
    kd_launch_argv_free(argv);
}

static void test_horovod_argv(void **state)
{
    (void)state;
    struct kd_launch_args a;
    struct kd_launch_env e;
    char err[KD_ERRLEN] = "";
    char **argv = NULL;
    assert_int_equal(kd_launch_env_load(&e, err), 0);
    assert_int_equal(
        PARSE(&a, err, "horovod", "--fusion-threshold-mb", "32", "--", "python3", "t.py"), 0);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 4, "wrap_rank", &argv, err), 0);
    assert_string_equal(join(argv), "horovodrun -np 4 -H localhost:4 --fusion-threshold-mb 32 "
                                    "wrap_rank HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK "
                                    "python3 t.py");
    kd_launch_argv_free(argv);

    env_two_nodes(&e);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 4, "wrap_rank", &argv, err), KD_EINVAL);
    assert_non_null(strstr(err, "KDET_NUM_NODES=2 needs KDET_NODE_ADDRS"));
    setenv("KDET_NODE_ADDRS", "10.0.0.1", 1);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 4, "wrap_rank", &argv, err), KD_EINVAL);
    assert_non_null(strstr(err, "KDET_NODE_ADDRS: 1 addresses for KDET_NUM_NODES=2"));
    setenv("KDET_NODE_ADDRS", "10.0.0.1,,x", 1);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 4, "wrap_rank", &argv, err), KD_EINVAL);
    assert_non_null(strstr(err, "KDET_NODE_ADDRS: entry 2"));
    setenv("KDET_NODE_ADDRS", "10.0.0.1,trial-7-1.kdet", 1);
    assert_int_equal(kd_launch_upstream_argv(&a, &e, 4, "wrap_rank", &argv, err), 0);
    assert_string_equal(join(argv), "horovodrun -np 8 -H 10.0.0.1:4,trial-7-1.kdet:4 "
                                    "--fusion-threshold-mb 32 wrap_rank "
                                    "HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK python3 t.py");
    kd_launch_argv_free(argv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_plain, clean),
        cmocka_unit_test_setup(test_trial, clean),
        cmocka_unit_test_setup(test_errors, clean),
        cmocka_unit_test_setup(test_forms, clean),
        cmocka_unit_test_setup(test_torch_argv, clean),
        cmocka_unit_test_setup(test_deepspeed_argv, clean),
        cmocka_unit_test_setup(test_horovod_argv, clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
