/*
 * File-system helpers shared by the daemons, the storage backends and
 * libdtrain (libc only, never aborts).
 */
#ifndef KD_CORE_FS_H
#define KD_CORE_FS_H

#include <stddef.h>
#include <sys/types.h>

#include "core/err.h"

/**
 * Remove `path` and, when it is a directory, everything below it. Symbolic
 * links are removed, never followed; the depth is capped at 64 levels.
 * Returns 0 (also when path does not exist) or the -errno of the first
 * entry that could not be removed; it goes on with the rest either way.
 * Not safe against another process changing the tree at the same time.
 */
int kd_rm_tree(const char *path);

/**
 * Remove everything below the directory `path`, as kd_rm_tree, and keep
 * `path` itself. Returns 0, -ENOTDIR when path is not a directory (a link to
 * one is not), -ENOENT when it does not exist, or the first entry's -errno.
 */
int kd_empty_tree(const char *path);

/**
 * Create the directory `path` and any missing parents, as `mkdir -p`:
 * parents with mode 0755, the last with `mode` (both less the umask). An
 * existing directory is fine (its mode is left alone). Returns 0,
 * -ENAMETOOLONG, or the -errno of the component that could not be made.
 */
int kd_mkdir_p(const char *path, mode_t mode);

/**
 * Write all n bytes to fd with as few write(2) calls as the kernel allows,
 * retrying after EINTR and waiting in poll(2) when fd is non-blocking and
 * full. Returns 0 or -errno (-EIO when a write wrote nothing).
 */
int kd_write_all(int fd, const void *p, size_t n) KD_WUR;

#endif
