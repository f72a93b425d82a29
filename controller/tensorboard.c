/*
 * An experiment's checkpoint storage for the API's TensorBoard event
 * writer (controller/api/tfwrite.c), and where a TensorBoard task finds the
 * event files: under that storage, at KD_TFEVENTS_PREFIX/<experiment
 * uid>/<trial>/ (lib/tfevents).
 */
#include <stdio.h>
#include <string.h>

#include "core/str.h"
#include "ctrl.h"
#include "storage/storage.h"
#include "tfevents/tfevents.h"

int kd_ctrl_storage_of(void *ud, const json_t *exp, json_t **out)
{
    struct kd_ctrl *c = ud;
    json_t *cfg = NULL;
    uint64_t seed = 0;
    char err[KD_ERRLEN] = "";
    *out = NULL;
    int rc = kd_ctrl_exp_config(c, exp, &cfg, &seed, err);
    if (rc == 0) {
        json_t *cs = json_object_get(cfg, "checkpoint_storage");
        *out = json_is_object(cs) ? json_incref(cs) : NULL;
    }
    json_decref(cfg);
    return rc;
}

int kd_ctrl_tensorboard_dir(struct kd_ctrl *c, const char *ns, const char *name, char *dir,
                            size_t len, char *err)
{
    int rc = 0;
    char key[600];
    json_t *exp = NULL, *cfg = NULL;
    uint64_t seed = 0;
    struct kd_storage_config sc;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    if (kd_k8s_cache_get(kd_k8s_informer_cache(c->exps), key, &exp) != 0) {
        rc = kd_seterr(err, KD_EINVALID,
                       "spec.experiments: experiment %s not found in namespace %s", name, ns);
        goto out;
    }
    if ((rc = kd_ctrl_exp_config(c, exp, &cfg, &seed, err)) != 0) {
        rc = KD_EINVALID;
        goto out;
    }
    kd_storage_config_init(&sc);
    if (kd_storage_config_from_json(json_object_get(cfg, "checkpoint_storage"), &sc, err) != 0 ||
        sc.type == KD_STORAGE_NONE) {
        rc = kd_seterr(err, KD_EINVALID,
                       "spec.experiments: experiment %s has no checkpoint_storage, where its "
                       "trials write their TensorBoard event files",
                       name);
        goto out;
    }
    if ((rc = kd_tfevents_experiment_dir(&sc, kd_k8s_meta_str(exp, "uid"), dir, len)) != 0)
        kd_seterr(err, KD_EINVALID,
                  "spec.experiments: experiment %s: its event directory is too "
                  "long",
                  name);
out:
    json_decref(exp);
    json_decref(cfg);
    return rc;
}
