/*
 * Model contexts: the directory of training code that travels with an
 * experiment. Packing honours `.detignore` (gitignore syntax) and gives a
 * byte-identical tar.gz for identical trees, so its sha256 names the
 * content; unpacking refuses anything that would land outside its target.
 */
#ifndef KD_CONTEXT_CONTEXT_H
#define KD_CONTEXT_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"

/* Determined's limit on a context: the files' total size (uncompressed). */
#define KD_CONTEXT_MAX_BYTES (95ull << 20)
/* Hard caps while packing and unpacking. */
#define KD_CONTEXT_MAX_ENTRIES 100000
#define KD_CONTEXT_MAX_PATH 1024

/* ---- .detignore --------------------------------------------------------- */

/** A parsed list of ignore rules. Opaque; immutable after parsing, so it may be shared by threads.
 */
struct kd_ignore;

/**
 * Parse `.detignore` text with gitignore's rules: blank lines and lines
 * starting with `#` are skipped; trailing unescaped spaces are dropped; `!`
 * negates (re-includes); `\#` and `\!` escape a leading `#`/`!`; a trailing
 * `/` matches directories only; a pattern with a `/` at its start or in its
 * middle is anchored at the context root, otherwise it matches a name at
 * any depth; `*` and `?` never match `/`; `[...]` is a class (`!` or `^`
 * negates, ranges allowed); `**` matches across directories (`**` + `/x`,
 * `a/` + `**`, `a/` + `**` + `/b`). The last matching rule wins; a file
 * inside an excluded directory cannot be re-included (as in git).
 * `text` may be NULL for no rules. Returns 0 or KD_EINVAL (a line longer
 * than KD_CONTEXT_MAX_PATH, or an unterminated `[`), with `NAME:LINE: cause`
 * in `err`. Free with kd_ignore_free.
 */
int kd_ignore_parse(const char *name, const char *text, size_t len, struct kd_ignore **out,
                    char *err) KD_WUR;

/**
 * Whether the path `rel` (relative to the context root, `/`-separated, no
 * leading `/`) is excluded by the rules. `is_dir` says whether it is a
 * directory. Does not apply the always-dropped names (see kd_context_pack).
 */
bool kd_ignore_match(const struct kd_ignore *ig, const char *rel, bool is_dir);

void kd_ignore_free(struct kd_ignore *ig);

/* ---- packing ------------------------------------------------------------ */

/** A packed context: gzip'd tar in memory plus what describes it. */
struct kd_context {
    unsigned char *data; /* the tar.gz bytes (malloc'd) */
    size_t len;
    char sha256[65];    /* hex digest of data */
    uint64_t raw_bytes; /* total size of the regular files packed */
    uint64_t files;     /* regular files packed */
    uint64_t entries;   /* all entries (files, directories, symlinks) */
};

/**
 * Pack the directory `dir` into out->data as tar.gz.
 *
 * Included: regular files, directories and symlinks whose target stays
 * inside `dir` (stored as symlinks, never followed). Dropped: what
 * `dir/.detignore` excludes, every `*.pyc` file and every `__pycache__`
 * directory. A symlink that points outside `dir` (absolute, or escaping
 * with `..`), a socket, a FIFO or a device is an error naming the entry
 * and suggesting a .detignore line. The output is deterministic: entries
 * in depth-first order with names sorted bytewise in each directory, mtime 0, uid/gid 0, no owner
 * names, modes normalised to 0755 (directories, executables) or 0644, no gzip timestamp; so the
 * same tree gives the same sha256.
 *
 * When the files total more than `max_bytes` (0 means KD_CONTEXT_MAX_BYTES)
 * it fails with KD_ETOOBIG and a message in `err` that gives the size, the
 * limit, the largest entries and the .detignore lines that would remove
 * them. Returns 0, KD_ETOOBIG, KD_EINVAL (bad .detignore, unsafe entry,
 * a cap passed), KD_EIO or -errno with detail in `err`. Blocks on file I/O;
 * thread-safe. Free the result with kd_context_free.
 */
int kd_context_pack(const char *dir, uint64_t max_bytes, struct kd_context *out, char *err) KD_WUR;

/** Free out->data and zero the struct. NULL-safe. */
void kd_context_free(struct kd_context *ctx);

/**
 * Unpack a tar.gz (or plain tar) held in memory into the existing directory
 * `dest`. Refuses, before writing anything under that name: absolute
 * paths, `..` components, hard links, devices, FIFOs, symlinks whose target
 * is absolute or escapes `dest`, more than KD_CONTEXT_MAX_ENTRIES entries
 * and more than `max_bytes` of file data in total (0 means
 * KD_CONTEXT_MAX_BYTES). Returns 0, KD_EINVAL (unsafe entry, named in
 * `err`), KD_ETOOBIG, KD_ECORRUPT (not a readable archive) or -errno.
 * libarchive also refuses to write through a symlink that is already on
 * disk (one the archive created earlier). `dest` must not contain `..`.
 * Modes are not taken from the archive: see kd_context_unpack_perm.
 * Entries written before a refusal stay on disk: unpack into a fresh
 * directory and remove it on error. Blocks on file I/O; thread-safe.
 */
int kd_context_unpack(const void *data, size_t len, const char *dest, uint64_t max_bytes,
                      char *err) KD_WUR;

/**
 * The permission bits kd_context_unpack gives an entry of file type `type`
 * (AE_IFREG, AE_IFDIR, AE_IFLNK) whose archive header says `perm`: the
 * modes kd_context_pack writes, 0755 for a directory, 0777 for a symlink,
 * 0755 for a file with any execute bit and 0644 for any other file. So a
 * setuid, setgid or sticky bit, or write permission for group and others,
 * never survives an unpack. Pure.
 */
mode_t kd_context_unpack_perm(mode_t type, mode_t perm);

/** Hex sha256 of `len` bytes into hex (65 bytes). */
void kd_context_sha256(const void *data, size_t len, char hex[65]);

#endif
