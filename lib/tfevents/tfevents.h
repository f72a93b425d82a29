/*
 * TensorBoard event files: TFRecord framing (length, masked CRC32C of the
 * length, data, masked CRC32C of the data) around Event protocol buffers
 * (tensorflow/core/util/event.proto: wall_time, step, file_version or a
 * Summary of scalar values), and where kdet keeps them: under a
 * checkpoint storage, at KD_TFEVENTS_PREFIX/<experiment uid>/<trial>/.
 * Pure functions: the controller API writes the bytes with lib/storage.
 */
#ifndef KD_TFEVENTS_TFEVENTS_H
#define KD_TFEVENTS_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"
#include "storage/storage.h"

/* The directory of event files under a checkpoint storage's root. */
#define KD_TFEVENTS_PREFIX "tensorboard"
/* The version string of an event file's first record. */
#define KD_TFEVENTS_VERSION "brain.Event:2"

/** CRC32C (Castagnoli) of n bytes. Pure. */
uint32_t kd_tfevents_crc32c(const void *p, size_t n);
/** TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. Pure. */
uint32_t kd_tfevents_masked_crc(const void *p, size_t n);

/** Append one TFRecord holding n bytes of data to out. 0 or KD_ETOOBIG (out's cap). */
int kd_tfevents_record(struct kd_buf *out, const void *data, size_t n) KD_WUR;

/** Append the first record of an event file: Event{wall_time, file_version}. */
int kd_tfevents_header(struct kd_buf *out, double wall_time) KD_WUR;

/**
 * Append one Event{wall_time, step, summary} whose Summary holds a
 * simple_value for each number of the object `metrics` (keys sorted;
 * non-numbers and non-finite values are left out), tagged "group/key"
 * ("training/loss", "validation/accuracy"). Nothing is appended when no
 * value is left. 0, KD_EINVAL (metrics not an object) or KD_ETOOBIG.
 */
int kd_tfevents_scalars(struct kd_buf *out, double wall_time, int64_t step, const char *group,
                        const json_t *metrics) KD_WUR;

/**
 * The directory TensorBoard reads for an experiment: <host_path>[/<storage_path>]/
 * KD_TFEVENTS_PREFIX/<uid> for shared_fs, s3://<bucket>[/<prefix>]/KD_TFEVENTS_PREFIX/<uid>
 * for s3. 0, KD_EINVAL (no storage, a uid that is not a safe path element) or KD_ETOOBIG.
 */
int kd_tfevents_experiment_dir(const struct kd_storage_config *sc, const char *exp_uid, char *dir,
                               size_t len) KD_WUR;

/**
 * The storage key (relative to the storage's root) of a new event file of
 * a trial: KD_TFEVENTS_PREFIX/<exp uid>/<trial>/events.out.tfevents.<secs>.kdet.<tag>.
 * tag makes files of one second distinct (a batch key). 0, KD_EINVAL or KD_ETOOBIG.
 */
int kd_tfevents_file_key(const char *exp_uid, const char *trial, int64_t secs, const char *tag,
                         char *key, size_t len) KD_WUR;

#endif
