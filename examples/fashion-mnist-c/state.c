/*
 * Checkpoint contents of fashion-mnist-c: one little-endian file with a
 * fixed header (magic, version, hidden units, parameter count, steps, seed,
 * epoch accumulators, trial) followed by the parameters and the momentum
 * buffer as raw float32.
 */
#include "state.h"

#include <stdio.h>
#include <string.h>

#define MAGIC "FMNISTC1"

struct header {
    char magic[8];
    uint32_t version, hidden;
    uint64_t nparams;
    int64_t steps, seed, ep_correct;
    double ep_loss;
    char trial[128];
};

long long fm_state_save(const char *dir, const struct mlp *m, const struct fm_state *st, char *err)
{
    long long size = -1;
    char path[4096];
    FILE *f = NULL;
    struct header h = {.version = 1,
                       .hidden = (uint32_t)m->hidden,
                       .nparams = m->nparams,
                       .steps = st->steps,
                       .seed = st->seed,
                       .ep_correct = st->ep_correct,
                       .ep_loss = st->ep_loss};
    memcpy(h.magic, MAGIC, sizeof(h.magic));
    snprintf(h.trial, sizeof(h.trial), "%s", st->trial);
    snprintf(path, sizeof(path), "%s/%s", dir, FMNIST_STATE_FILE);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(&h, sizeof(h), 1, f) != 1 ||
        fwrite(m->params, sizeof(float), m->nparams, f) != m->nparams ||
        fwrite(m->velocity, sizeof(float), m->nparams, f) != m->nparams) {
        snprintf(err, 256, "cannot write %.200s", path);
        goto out;
    }
    size = (long long)(sizeof(h) + 2 * m->nparams * sizeof(float));
out:
    if (f != NULL && fclose(f) != 0 && size >= 0) {
        snprintf(err, 256, "cannot write %.200s", path);
        size = -1;
    }
    return size;
}

int fm_state_load(const char *dir, struct mlp *m, struct fm_state *st, char *err)
{
    int rc = -1;
    char path[4096];
    struct header h;
    FILE *f = NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, FMNIST_STATE_FILE);
    f = fopen(path, "rb");
    if (f == NULL || fread(&h, sizeof(h), 1, f) != 1 || memcmp(h.magic, MAGIC, 8) != 0 ||
        h.version != 1) {
        snprintf(err, 256, "%.180s: not a fashion-mnist-c checkpoint", path);
        goto out;
    }
    if (h.hidden != (uint32_t)m->hidden || h.nparams != m->nparams) {
        snprintf(err, 256, "%.180s: written with hidden_units %u, this trial has %d", path,
                 h.hidden, m->hidden);
        goto out;
    }
    if (fread(m->params, sizeof(float), m->nparams, f) != m->nparams ||
        fread(m->velocity, sizeof(float), m->nparams, f) != m->nparams) {
        snprintf(err, 256, "%.180s: truncated", path);
        goto out;
    }
    st->steps = h.steps;
    st->seed = h.seed;
    st->ep_correct = h.ep_correct;
    st->ep_loss = h.ep_loss;
    h.trial[sizeof(h.trial) - 1] = '\0';
    snprintf(st->trial, sizeof(st->trial), "%s", h.trial);
    rc = 0;
out:
    if (f != NULL)
        fclose(f);
    return rc;
}
