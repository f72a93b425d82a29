/*
 * The three PATCH formats the Kubernetes API server accepts: JSON merge
 * patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch (lists
 * merged by their merge key, $patch / $deleteFromPrimitiveList /
 * $setElementOrder directives), for the fields kubectl apply touches.
 */
#ifndef KD_LOCAL_PATCH_H
#define KD_LOCAL_PATCH_H

#include <jansson.h>

#include "core/err.h"

/*
 * A JSON patch's limits: at most KD_PATCH_MAX_OPS operations (the API server's number), and
 * the values its "copy" operations duplicate at most KD_PATCH_COPY_BYTES together, encoded
 * as compact JSON (kdet-local's own cap, the size of the largest request body), since each
 * copy can double the document.
 */
#define KD_PATCH_MAX_OPS 10000
#define KD_PATCH_COPY_BYTES (3u << 20)

/**
 * Each returns a new object (caller decrefs) in *out and never modifies its
 * inputs. Errors: KD_EINVAL with the operation index or path in err.
 */
int kd_patch_merge(const json_t *doc, const json_t *patch, json_t **out, char *err) KD_WUR;
int kd_patch_json(const json_t *doc, const json_t *ops, json_t **out, char *err) KD_WUR;
/** `kind` picks merge keys where a field name means different things (Service ports). */
int kd_patch_strategic(const json_t *doc, const json_t *patch, const char *kind, json_t **out,
                       char *err) KD_WUR;

#endif
