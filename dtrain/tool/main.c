/*
 * `dtrain`: command-line companion of libdtrain. Subcommands are rows of one
 * table (group word, optional second word, handler), so adding one is a
 * single line here plus its file.
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/str.h"
#include "ckpt.h"
#include "tool.h"

struct cmd {
    const char *group; /* first word */
    const char *name;  /* second word, or NULL for a one-word command */
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct cmd cmds[] = {
    {"bench", "allreduce", dtrain_tool_bench_allreduce,
     "[--size 4K..256M] [--iters N] [--transport tcp|shm|nccl] [--dtype T] [--op OP]\n"
     "      allreduce latency and bandwidth; run under kdet-launch or once per rank"},
    {"check", "rendezvous", dtrain_tool_check_rendezvous,
     "\n      check the environment, the rendezvous and one allreduce"},
    {"ckpt", NULL, dtrain_tool_ckpt,
     "upload|download|ls|rm|verify|gc [ARGS]\n"
     "      checkpoints in shared_fs or S3 storage; 'dtrain ckpt --help' (docs/checkpoints.md)"},
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: dtrain COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < NCMDS; i++)
        fprintf(f, "  dtrain %s%s%s %s\n", cmds[i].group, cmds[i].name ? " " : "",
                cmds[i].name ? cmds[i].name : "", cmds[i].help);
    fprintf(f, "\nThe ranks find each other through RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
               "and KDET_RUN_ID (set by kdet-launch); see docs/dtrain.md.\n");
}

int main(int argc, char **argv)
{
    kd_log_init("dtrain", -1, -1);
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *words[NCMDS * 2 + 1];
    size_t nw = 0;
    for (size_t i = 0; i < NCMDS; i++) {
        if (strcmp(argv[1], cmds[i].group) != 0) {
            words[nw++] = cmds[i].group;
            continue;
        }
        if (cmds[i].name == NULL)
            return cmds[i].run(argc - 1, argv + 1);
        if (argc >= 3 && strcmp(argv[2], cmds[i].name) == 0)
            return cmds[i].run(argc - 2, argv + 2);
        words[nw++] = cmds[i].name;
    }
    words[nw] = NULL;
    const char *bad = argc >= 3 ? argv[2] : "";
    const char *s = kd_suggest(argv[1], words);
    if (s == NULL && argc >= 3)
        s = kd_suggest(bad, words);
    fprintf(stderr, "dtrain: unknown command '%s%s%s'%s%s%s\n", argv[1], argc >= 3 ? " " : "", bad,
            s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
    usage(stderr);
    return 2;
}
