/*
 * `kdet-local kubelet`: kdet's process kubelet as a node agent for any
 * Kubernetes API server (kdet-local's own or a real kube-apiserver).
 */
#ifndef KD_LOCAL_AGENT_H
#define KD_LOCAL_AGENT_H

/**
 * Run the node agent with the arguments after "kubelet" (argv[0] is
 * "kubelet"). Blocks until SIGINT or SIGTERM; returns the process exit
 * status (0, 1 on failure, 2 on a usage error).
 */
int kd_agent_main(int argc, char **argv);

#endif
