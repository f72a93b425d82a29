/*
 * The training state a checkpoint holds: weights, momentum, optimizer steps
 * taken and the position in the data order (the shuffle of an epoch is a
 * pure function of the seed and the epoch, so the seed and the step count
 * are the whole RNG state), written to one file in a directory.
 */
#ifndef FMNIST_STATE_H
#define FMNIST_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

#define FMNIST_STATE_FILE "state.bin"

struct fm_state {
    int64_t steps;      /* optimizer steps taken since the trial started */
    int64_t seed;       /* the data-order and init seed */
    int64_t ep_correct; /* correct predictions so far in the current epoch */
    double ep_loss;     /* loss sum so far in the current epoch */
    char trial[128];    /* KDET_TRIAL_ID of the trial that wrote it ("" standalone) */
};

/**
 * Write m's params and velocity plus st into DIR/state.bin. Returns the
 * file's size in bytes, or -1 with err (256 bytes) naming the file.
 */
long long fm_state_save(const char *dir, const struct mlp *m, const struct fm_state *st, char *err);

/**
 * Read DIR/state.bin into m (already initialised with the same hidden
 * size) and st. 0, or -1 with err naming the file and what does not match.
 */
int fm_state_load(const char *dir, struct mlp *m, struct fm_state *st, char *err);

#endif
