/*
 * fashion-mnist-c as a kdet trial, rank 0's side: the controller client
 * (searcher operations, metrics, checkpoint registration), a thread that
 * long-polls the preemption signal, and checkpoint storage (asynchronous
 * uploads, restore). The other ranks follow rank 0 through broadcasts in
 * main.c, so none of this runs there.
 */
#ifndef FMNIST_KDET_H
#define FMNIST_KDET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dtrain.h"

enum fm_unit { FM_UNIT_BATCHES, FM_UNIT_RECORDS, FM_UNIT_EPOCHS };

struct fm_kdet {
    struct dtrain_client *cl; /* NULL: not run by the controller */
    struct dtrain_ckpt *ck;   /* NULL: no KDET_CHECKPOINT_STORAGE */
    enum fm_unit unit;        /* KDET_LENGTH_UNIT */
    char base[4096];          /* storage URL that checkpoint uuids are appended to */
    const char *trial;        /* KDET_TRIAL_ID or "" */
    pthread_t th;
    int th_started;
    atomic_int preempt, quit;
    /* the checkpoint queued last, registered once its upload is done */
    char pending[DTRAIN_CKPT_UUIDLEN];
    int64_t pending_batches;
    long long pending_size;
    char *pending_md;
};

/**
 * Read the environment: KDET_CONTROLLER_URL (+ KDET_TOKEN, KDET_TRIAL_ID)
 * makes a client, KDET_CHECKPOINT_STORAGE opens storage, KDET_LENGTH_UNIT
 * the searcher's length unit. 0, or a DTRAIN_E* code with err set.
 */
int fm_kdet_open(struct fm_kdet *k, char *err);

/** Start the preemption watcher (needs a client). */
int fm_kdet_watch(struct fm_kdet *k, char *err);

/**
 * Make a checkpoint of the state written into `dir` (which it takes over
 * and removes once uploaded): registers the previous one (waiting for its
 * upload), then queues this one. *uuid gets its uuid.
 */
int fm_kdet_save(struct fm_kdet *k, const char *dir, int64_t batches, long long size,
                 const char *metadata_json, char *uuid, char *err);

/** Wait for uploads, register the last checkpoint, send buffered metrics. */
int fm_kdet_finish(struct fm_kdet *k, char *err);

/** Download checkpoint uuid into dir (created), verified. */
int fm_kdet_restore(struct fm_kdet *k, const char *uuid, const char *dir, char *err);

/** Stop the watcher, close storage and the client. NULL-safe fields. */
void fm_kdet_close(struct fm_kdet *k);

#endif
