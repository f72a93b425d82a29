/*
 * The searcher-state ConfigMap's contents (docs/controller.md, "The
 * persistence protocol"): the state's JSON text in data["state.json"], or,
 * past KD_CTRL_STATE_PLAIN_MAX (an experiment of thousands of trials), its
 * gzip in binaryData["state.json.gz"]. Pure: encoding and decoding only;
 * experiment.c reads and writes the ConfigMap.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/alloc.h"
#include "ctrl.h"
#include "http/http.h"
#include "k8s/config.h"

int kd_ctrl_state_encode(const char *text, json_t **data, json_t **binary, char *err)
{
    size_t len = strlen(text);
    *data = json_object();
    *binary = NULL;
    if (len <= KD_CTRL_STATE_PLAIN_MAX) {
        json_object_set_new(*data, KD_CTRL_STATE_KEY, json_string(text));
        return 0;
    }
    unsigned char *gz = NULL;
    size_t gzlen = 0;
    int rc = kd_gzip(text, len, &gz, &gzlen);
    if (rc != 0)
        rc = kd_seterr(err, rc, "searcher state of %zu bytes: cannot compress it", len);
    else if ((gzlen + 2) / 3 * 4 > KD_CTRL_STATE_MAX)
        rc = kd_seterr(err, KD_ETOOBIG,
                       "searcher state is %zu bytes (%zu gzip'd); a ConfigMap holds at most %d",
                       len, gzlen, KD_CTRL_STATE_MAX);
    if (rc == 0) {
        char *b64 = kd_xmalloc((gzlen + 2) / 3 * 4 + 1);
        EVP_EncodeBlock((unsigned char *)b64, gz, (int)gzlen);
        *binary = json_pack("{s:s}", KD_CTRL_STATE_GZ_KEY, b64);
        free(b64);
    } else {
        json_decref(*data);
        *data = NULL;
    }
    free(gz);
    return rc;
}

int kd_ctrl_state_decode(const json_t *cm, json_t **state, char *err)
{
    json_error_t je;
    const char *name = kd_k8s_meta_str(cm, "name") ?: "";
    const char *text = kd_ctrl_str(cm, "data", KD_CTRL_STATE_KEY, NULL);
    const char *b64 = kd_ctrl_str(cm, "binaryData", KD_CTRL_STATE_GZ_KEY, NULL);
    *state = NULL;
    if (text == NULL && b64 != NULL) {
        char *gz = NULL;
        size_t gzlen = 0, tlen = 0;
        unsigned char *plain = NULL;
        int zr = kd_k8s_base64_decode(b64, &gz, &gzlen);
        if (zr == 0)
            zr = kd_gunzip(gz, gzlen, KD_CTRL_STATE_TEXT_MAX, &plain, &tlen);
        free(gz);
        if (zr != 0)
            return kd_seterr(err, KD_ECORRUPT, "configmap %s: binaryData.%s: %s", name,
                             KD_CTRL_STATE_GZ_KEY,
                             zr == KD_ETOOBIG ? "more than 64 MiB once decompressed"
                                              : "not base64 of one gzip member");
        *state = json_loadb((const char *)plain, tlen, 0, &je);
        free(plain);
    } else if (text != NULL) {
        *state = json_loads(text, 0, &je);
    } else {
        return kd_seterr(err, KD_ECORRUPT, "configmap %s: neither data.%s nor binaryData.%s", name,
                         KD_CTRL_STATE_KEY, KD_CTRL_STATE_GZ_KEY);
    }
    if (*state == NULL)
        return kd_seterr(err, KD_ECORRUPT, "configmap %s: %s.%s: %s", name,
                         text != NULL ? "data" : "binaryData",
                         text != NULL ? KD_CTRL_STATE_KEY : KD_CTRL_STATE_GZ_KEY, je.text);
    return 0;
}
