/*
 * A container's processes, as a runtime's cgroup would hold them: the
 * process kubelet starts each container as the leader of a session of its
 * own, and kdet-launch puts each worker in a process group of its own (in
 * that session), so killing the leader's group is not enough. Its family is
 * every process of its session, and every descendant of the leader or of a
 * member (one that called setsid itself, as sshd does per connection, is
 * found through its parent while that lives).
 */
#ifndef KD_LOCAL_PROCTREE_H
#define KD_LOCAL_PROCTREE_H

#include <stddef.h>
#include <sys/types.h>

struct kd_proc_ent {
    pid_t pid, ppid, sid;
};

/**
 * The family of leader among the n processes of a snapshot, leader itself
 * included when it is there: written to out (room for n), their count
 * returned. Pure.
 */
size_t kd_proc_family(const struct kd_proc_ent *ps, size_t n, pid_t leader, pid_t *out);

/**
 * Reads /proc into *out (malloc'd, the caller frees): every process's pid,
 * parent and session. Returns the count; 0 with *out NULL when /proc cannot
 * be read.
 */
size_t kd_proc_snapshot(struct kd_proc_ent **out);

/**
 * SIGKILLs the family of leader: the processes of one snapshot are stopped
 * first (SIGSTOP, so that none forks away meanwhile), a second snapshot
 * finds what forked before that (none is taken when the first found
 * nothing), then all are killed. Returns how many
 * processes were signalled.
 */
size_t kd_proc_kill_family(pid_t leader);

#endif
