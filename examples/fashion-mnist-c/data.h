/*
 * Fashion-MNIST in the idx format (gzip-compressed, as Debian's
 * dataset-fashion-mnist package ships it), loaded into memory.
 */
#ifndef FMNIST_DATA_H
#define FMNIST_DATA_H

#include <stddef.h>
#include <stdint.h>

#define FM_PIXELS 784
#define FM_CLASSES 10
#define FM_MAX_SAMPLES 100000

struct fm_set {
    uint8_t *images; /* n * FM_PIXELS */
    uint8_t *labels; /* n */
    size_t n;
};

/**
 * Load DIR/PREFIX-images-idx3-ubyte.gz and DIR/PREFIX-labels-idx1-ubyte.gz
 * (PREFIX "train" or "t10k"), keeping at most `limit` samples (0: all).
 * err (256 bytes) names the file and what is wrong. Free with fm_free.
 */
int fm_load(const char *dir, const char *prefix, size_t limit, struct fm_set *out, char *err);
void fm_free(struct fm_set *s);

#endif
