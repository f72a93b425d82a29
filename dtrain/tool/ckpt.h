/*
 * `dtrain ckpt`: checkpoint storage from the command line (upload,
 * download, ls, rm, verify, gc).
 */
#ifndef DTRAIN_TOOL_CKPT_H
#define DTRAIN_TOOL_CKPT_H

/**
 * Run `dtrain ckpt ...`: argv[0] is "ckpt", argv[1] the command. Prints
 * results on stdout, progress and errors on stderr. Returns the exit
 * status: 0 ok, 1 failed, 2 usage error. Expects kd_log_init to have run.
 */
int dtrain_tool_ckpt(int argc, char **argv);

#endif
