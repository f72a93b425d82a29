/*
 * A stored checkpoint as one tar archive, made piece by piece for a caller
 * that sends it on as it goes (the controller's download route): the files
 * of its manifest, in the manifest's order, under one top directory, as
 * `det checkpoint download` restores them. The archive's exact length is
 * known from the manifest before its first byte. Files are read with
 * ranged reads of at most KD_CKPT_TAR_PIECE bytes, hashed as they pass, and
 * a file whose size or sha256 is not the manifest's fails before its last
 * piece is handed out, so a caller that stops at the first error never
 * sends a complete archive of bad data.
 *
 * Thread safety: as the storage handle (one thread at a time).
 */
#ifndef KD_STORAGE_CKPT_TAR_H
#define KD_STORAGE_CKPT_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "storage/checkpoint.h"
#include "storage/storage.h"

/* The most bytes read from storage at once, and so held in memory by one archive. */
#define KD_CKPT_TAR_PIECE (4u << 20)
/* The longest member path (the top directory, '/', the file's path) the archive takes. */
#define KD_CKPT_TAR_PATH_MAX 4096

/* Member types of kd_tar_header. */
#define KD_TAR_FILE '0'
#define KD_TAR_DIR '5'

/**
 * Append the header of one tar member to out: a POSIX ustar header, first
 * preceded by a pax extended header ('x', with "path" and/or "size"
 * records) when the path does not fit ustar's name and prefix fields, is
 * not ASCII, or the size is 8 GiB or more. path: '/'-separated, relative,
 * 1 to KD_CKPT_TAR_PATH_MAX bytes (a directory's without its trailing
 * '/'); mode the permission bits; mtime in seconds since the epoch (>= 0).
 * Owner and group are 0 and unnamed. 0, KD_EINVAL for a path out of bounds,
 * or the buffer's error (out unchanged then). Pure.
 */
int kd_tar_header(struct kd_buf *out, const char *path, char type, uint64_t size, int64_t mtime,
                  unsigned mode) KD_WUR;

/** The bytes of padding after a member's size bytes of data (to a 512-byte block). Pure. */
uint64_t kd_tar_padding(uint64_t size);

struct kd_ckpt_tar;

/**
 * Prepare checkpoint uuid of st as a tar archive whose members lie under
 * top/ (a relative path of 1 to 255 bytes without "." or ".." parts, e.g.
 * "mnist-v2"): reads and checks the manifest (KD_ENOTFOUND for a
 * checkpoint without one, with err naming it and the storage's location).
 * st is borrowed: it must outlive the archive. Blocking. *out is closed
 * with kd_ckpt_tar_close.
 */
int kd_ckpt_tar_open(struct kd_storage *st, const char *uuid, const char *top,
                     struct kd_ckpt_tar **out, char *err) KD_WUR;

/** The archive's length in bytes, exactly what the reads will give. */
uint64_t kd_ckpt_tar_size(const struct kd_ckpt_tar *t);

/** Its manifest (files, total size), owned by the archive. */
const struct kd_ckpt_manifest *kd_ckpt_tar_manifest(const struct kd_ckpt_tar *t);

/**
 * The next bytes of the archive, up to max, into buf: 0 with *n (0 once the
 * archive is whole), or an error with err naming the file: the storage's
 * (KD_ENOTFOUND: a file of the manifest is missing, ...), or KD_ECORRUPT
 * when a file's bytes are not the manifest's. After an error the archive
 * gives no more bytes (the same error again). Blocking (reads storage).
 */
int kd_ckpt_tar_read(struct kd_ckpt_tar *t, void *buf, size_t max, size_t *n, char *err) KD_WUR;

/** Free the archive (not its storage). NULL-safe. */
void kd_ckpt_tar_close(struct kd_ckpt_tar *t);

#endif
