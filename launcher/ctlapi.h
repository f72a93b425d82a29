/*
 * One call from the launcher to the controller API with the pod's token
 * (Authorization: Bearer $KDET_TOKEN, the controller's CA), and a free
 * port to listen on.
 */
#ifndef KD_LAUNCHER_CTLAPI_H
#define KD_LAUNCHER_CTLAPI_H

#include <stdbool.h>

#include <jansson.h>

#include "core/err.h"

/** Cap on the controller's answers. */
#define KD_CTLAPI_MAX_ANSWER 4096

/**
 * method url with the JSON body (NULL: none), timeout_s + 10 s at most.
 * *status: the HTTP status (0 when no answer came); *ans: the JSON answer
 * of a 2xx (caller frees), else err holds the API's message. Returns 0
 * when an answer came, KD_ECONNECT otherwise (err says why; never the
 * token). Blocks.
 */
int kd_ctlapi_call(const char *method, const char *url, const char *body, long timeout_s,
                   long *status, json_t **ans, char *err) KD_WUR;

/** A free TCP port on all addresses (bound, read, closed). 0 or -errno with err. */
int kd_ctlapi_free_port(int *port, char *err) KD_WUR;

/** A 4xx other than 429: retrying will not change the answer. */
bool kd_ctlapi_final(long status);

#endif
