/*
 * The dtrain tool's subcommands. Each takes the arguments after its own
 * words (argv[0] is the subcommand name) and returns the exit status.
 */
#ifndef DTRAIN_TOOL_H
#define DTRAIN_TOOL_H

int dtrain_tool_bench_allreduce(int argc, char **argv);
int dtrain_tool_check_rendezvous(int argc, char **argv);

#endif
