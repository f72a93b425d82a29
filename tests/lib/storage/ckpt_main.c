/*
 * A stand-alone `dtrain ckpt` for the storage tests and the benchmark,
 * until the dtrain tool's main dispatches to dtrain_tool_ckpt: run as
 * `dtrain-ckpt COMMAND ARGS`.
 */
#include "../../../dtrain/tool/ckpt.h"
#include "core/log.h"

int main(int argc, char **argv)
{
    static char name[] = "ckpt";
    kd_log_init("dtrain", -1, -1);
    argv[0] = name;
    return dtrain_tool_ckpt(argc, argv);
}
