/*
 * A two-layer perceptron (784 -> hidden -> 10, ReLU, softmax cross-entropy)
 * with SGD + momentum + weight decay. The parameters live in one contiguous
 * array, so syncing, checksumming and saving them is one call each; the
 * gradients likewise, split per tensor for libdtrain's gradient buckets.
 */
#ifndef FMNIST_MLP_H
#define FMNIST_MLP_H

#include <stddef.h>
#include <stdint.h>

enum { MLP_W1, MLP_B1, MLP_W2, MLP_B2, MLP_NTENSORS };

struct mlp {
    int hidden;
    size_t nparams;
    float *params, *grads, *velocity;            /* nparams each */
    size_t off[MLP_NTENSORS], len[MLP_NTENSORS]; /* tensor views into params/grads */
    /* scratch for a batch of up to max_batch samples */
    int max_batch;
    float *x, *z1, *a1, *logits, *d2, *d1;
};

/** Allocate for `hidden` units and batches of max_batch; init weights from seed. 0 or -1. */
int mlp_init(struct mlp *m, int hidden, int max_batch, uint64_t seed);
void mlp_free(struct mlp *m);

/** Load a batch of bytes (n x 784) scaled to [0,1] into the model's input scratch. */
void mlp_set_input(struct mlp *m, const uint8_t *const *images, int n);

/**
 * Forward over the loaded batch. Adds the loss sum to *loss and the number
 * of correct predictions to *correct. With labels and grad_scale != 0 it
 * also backpropagates, adding grad_scale * dLoss/dparams into m->grads
 * (second layer first: `on_tensor_done(ctx, tensor)` is called as each
 * tensor's gradient is complete, so communication can start early).
 */
void mlp_step(struct mlp *m, int n, const uint8_t *labels, float grad_scale, double *loss,
              long *correct, void (*on_tensor_done)(void *ctx, int tensor), void *ctx);

/** params -= lr * v, v = momentum * v + grads + wd * params; then grads = 0. */
void mlp_update(struct mlp *m, float lr, float momentum, float weight_decay);

#endif
