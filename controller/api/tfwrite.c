/*
 * Each trial's training and validation metrics, written as TensorBoard
 * event files next to its checkpoints (docs/tasks.md, "TensorBoards"): one
 * file per stored batch, under the experiment's checkpoint storage at
 * tensorboard/<experiment uid>/<trial>/, named after the batch's key, so a
 * retried batch rewrites the same file with the same bytes. The one
 * writer: every metric, from libdtrain or the Python harness, comes
 * through the API. Best effort: a failure is logged and the batch stays
 * stored.
 */
#include "api/api_int.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "storage/storage.h"
#include "tfevents/tfevents.h"

/* A batch's event file, at most. */
#define EVENTS_MAX (16u << 20)

void api_tfevents_write(struct kd_api *a, const json_t *exp, const char *trial, const char *group,
                        const char *key, const struct kd_metric_row *rows, size_t n)
{
    json_t *cs = NULL;
    char err[KD_ERRLEN] = "", fkey[1024], tag[24];
    struct kd_storage_config sc;
    struct kd_storage *st = NULL;
    struct kd_buf b = KD_BUF_INIT(EVENTS_MAX);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int rc = 0;
    if (a->o.storage_of == NULL || n == 0)
        goto out;
    if (a->o.storage_of(a->o.storage_ud, exp, &cs) != 0 || cs == NULL)
        goto out; /* no checkpoint storage: nowhere to write */
    kd_storage_config_init(&sc);
    if ((rc = kd_storage_config_from_json(cs, &sc, err)) != 0 || sc.type == KD_STORAGE_NONE)
        goto out;
    /* The file's name: the batch's key, hashed into a safe path element. */
    EVP_Digest(key, strlen(key), md, &mdlen, EVP_sha256(), NULL);
    for (int i = 0; i < 8; i++)
        snprintf(tag + 2 * i, 3, "%02x", md[i]);
    int64_t first_ms = rows[0].reported_ms > 0 ? rows[0].reported_ms : kd_wall_ms();
    if ((rc = kd_tfevents_file_key(kd_k8s_meta_str(exp, "uid") ?: "", trial, first_ms / 1000, tag,
                                   fkey, sizeof(fkey))) != 0) {
        kd_seterr(err, rc, "no event file name for trial %s", trial);
        goto out;
    }
    if ((rc = kd_tfevents_header(&b, (double)first_ms / 1000.0)) != 0)
        goto out;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int64_t ms = rows[i].reported_ms > 0 ? rows[i].reported_ms : kd_wall_ms();
        rc = kd_tfevents_scalars(&b, (double)ms / 1000.0, rows[i].step, group, rows[i].metrics);
    }
    if (rc != 0) {
        kd_seterr(err, rc, "the batch's events are larger than %u bytes", EVENTS_MAX);
        goto out;
    }
    if ((rc = kd_storage_open(&sc, &st, err)) != 0 ||
        (rc = kd_storage_put_mem(st, fkey, b.data, b.len, err)) != 0)
        goto out;
out:
    if (rc != 0)
        KD_WARN("tensorboard events not written", "trial=%s/%s err=%s detail=%s",
                kd_logq(kd_k8s_meta_str(exp, "namespace")), kd_logq(trial), kd_err_name(rc),
                kd_logq(err));
    kd_storage_close(st);
    kd_buf_free(&b);
    json_decref(cs);
}
