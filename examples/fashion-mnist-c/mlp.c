/*
 * The MLP's forward, backward and update with OpenBLAS sgemm. Layout is
 * row-major: X is n x 784, W1 784 x H, W2 H x 10.
 */
#include "mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s)
{
    return (float)((splitmix(s) >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

int mlp_init(struct mlp *m, int hidden, int max_batch, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    m->hidden = hidden;
    m->max_batch = max_batch;
    size_t h = (size_t)hidden;
    m->len[MLP_W1] = FM_PIXELS * h;
    m->len[MLP_B1] = h;
    m->len[MLP_W2] = h * FM_CLASSES;
    m->len[MLP_B2] = FM_CLASSES;
    for (int t = 0; t < MLP_NTENSORS; t++) {
        m->off[t] = m->nparams;
        m->nparams += m->len[t];
    }
    size_t b = (size_t)max_batch;
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    m->velocity = calloc(m->nparams, sizeof(float));
    m->x = malloc(b * FM_PIXELS * sizeof(float));
    m->z1 = malloc(b * h * sizeof(float));
    m->a1 = malloc(b * h * sizeof(float));
    m->d1 = malloc(b * h * sizeof(float));
    m->logits = malloc(b * FM_CLASSES * sizeof(float));
    m->d2 = malloc(b * FM_CLASSES * sizeof(float));
    if (!m->params || !m->grads || !m->velocity || !m->x || !m->z1 || !m->a1 || !m->d1 ||
        !m->logits || !m->d2) {
        mlp_free(m);
        return -1;
    }
    /* He-uniform initialization, the same on every rank for the same seed. */
    uint64_t s = seed;
    float l1 = sqrtf(6.0f / FM_PIXELS), l2 = sqrtf(6.0f / (float)hidden);
    for (size_t i = 0; i < m->len[MLP_W1]; i++)
        m->params[m->off[MLP_W1] + i] = uniform(&s) * l1;
    for (size_t i = 0; i < m->len[MLP_W2]; i++)
        m->params[m->off[MLP_W2] + i] = uniform(&s) * l2;
    return 0;
}

void mlp_free(struct mlp *m)
{
    free(m->params);
    free(m->grads);
    free(m->velocity);
    free(m->x);
    free(m->z1);
    free(m->a1);
    free(m->d1);
    free(m->logits);
    free(m->d2);
    memset(m, 0, sizeof(*m));
}

void mlp_set_input(struct mlp *m, const uint8_t *const *images, int n)
{
    for (int i = 0; i < n; i++)
        for (int p = 0; p < FM_PIXELS; p++)
            m->x[(size_t)i * FM_PIXELS + (size_t)p] = images[i][p] * (1.0f / 255.0f);
}

void mlp_step(struct mlp *m, int n, const uint8_t *labels, float grad_scale, double *loss,
              long *correct, void (*on_tensor_done)(void *ctx, int tensor), void *ctx)
{
    int h = m->hidden;
    float *w1 = m->params + m->off[MLP_W1], *b1 = m->params + m->off[MLP_B1];
    float *w2 = m->params + m->off[MLP_W2], *b2 = m->params + m->off[MLP_B2];
    if (n <= 0)
        return;
    /* z1 = x w1 + b1 ; a1 = relu(z1) */
    for (int i = 0; i < n; i++)
        memcpy(m->z1 + (size_t)i * (size_t)h, b1, (size_t)h * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, h, FM_PIXELS, 1.0f, m->x, FM_PIXELS,
                w1, h, 1.0f, m->z1, h);
    for (size_t i = 0; i < (size_t)n * (size_t)h; i++)
        m->a1[i] = m->z1[i] > 0 ? m->z1[i] : 0;
    /* logits = a1 w2 + b2 */
    for (int i = 0; i < n; i++)
        memcpy(m->logits + (size_t)i * FM_CLASSES, b2, FM_CLASSES * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, FM_CLASSES, h, 1.0f, m->a1, h, w2,
                FM_CLASSES, 1.0f, m->logits, FM_CLASSES);
    /* softmax cross-entropy; d2 = (p - onehot) * grad_scale */
    for (int i = 0; i < n; i++) {
        float *z = m->logits + (size_t)i * FM_CLASSES, *d = m->d2 + (size_t)i * FM_CLASSES;
        int best = 0;
        float mx = z[0];
        for (int c = 1; c < FM_CLASSES; c++) {
            if (z[c] > mx) {
                mx = z[c];
                best = c;
            }
        }
        double sum = 0;
        for (int c = 0; c < FM_CLASSES; c++)
            sum += exp((double)(z[c] - mx));
        int y = labels[i];
        *loss += log(sum) - (double)(z[y] - mx);
        *correct += best == y;
        for (int c = 0; c < FM_CLASSES; c++) {
            double p = exp((double)(z[c] - mx)) / sum;
            d[c] = (float)(p - (c == y)) * grad_scale;
        }
    }
    if (grad_scale == 0.0f)
        return;
    float *gw1 = m->grads + m->off[MLP_W1], *gb1 = m->grads + m->off[MLP_B1];
    float *gw2 = m->grads + m->off[MLP_W2], *gb2 = m->grads + m->off[MLP_B2];
    /* second layer: gw2 += a1^T d2 ; gb2 += sum d2 */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, h, FM_CLASSES, n, 1.0f, m->a1, h, m->d2,
                FM_CLASSES, 1.0f, gw2, FM_CLASSES);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < FM_CLASSES; c++)
            gb2[c] += m->d2[(size_t)i * FM_CLASSES + (size_t)c];
    if (on_tensor_done != NULL) {
        on_tensor_done(ctx, MLP_B2);
        on_tensor_done(ctx, MLP_W2);
    }
    /* d1 = (d2 w2^T) * relu'(z1) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, h, FM_CLASSES, 1.0f, m->d2, FM_CLASSES,
                w2, FM_CLASSES, 0.0f, m->d1, h);
    for (size_t i = 0; i < (size_t)n * (size_t)h; i++)
        if (m->z1[i] <= 0)
            m->d1[i] = 0;
    /* first layer: gw1 += x^T d1 ; gb1 += sum d1 */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, FM_PIXELS, h, n, 1.0f, m->x, FM_PIXELS,
                m->d1, h, 1.0f, gw1, h);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < h; j++)
            gb1[j] += m->d1[(size_t)i * (size_t)h + (size_t)j];
    if (on_tensor_done != NULL) {
        on_tensor_done(ctx, MLP_B1);
        on_tensor_done(ctx, MLP_W1);
    }
}

void mlp_update(struct mlp *m, float lr, float momentum, float weight_decay)
{
    for (size_t i = 0; i < m->nparams; i++) {
        float g = m->grads[i] + weight_decay * m->params[i];
        m->velocity[i] = momentum * m->velocity[i] + g;
        m->params[i] -= lr * m->velocity[i];
        m->grads[i] = 0;
    }
}
