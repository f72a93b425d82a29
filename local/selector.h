/*
 * Label selectors (=, ==, !=, in, notin, exists, !exists) and field
 * selectors (=, ==, !=) as the Kubernetes API server parses and matches
 * them in list and watch requests.
 */
#ifndef KD_LOCAL_SELECTOR_H
#define KD_LOCAL_SELECTOR_H

#include <jansson.h>
#include <stdbool.h>

#include "core/err.h"

struct kd_selector;

/**
 * Parse a labelSelector string ("" or NULL selects everything). On error
 * returns KD_EINVAL with the position and cause in err. Caller frees *out
 * with kd_selector_free.
 */
int kd_selector_parse_labels(const char *s, struct kd_selector **out, char *err) KD_WUR;

/**
 * Parse a fieldSelector string. `allowed` lists the field labels this kind
 * supports besides metadata.name and metadata.namespace (NULL-terminated,
 * may be NULL); any other field gives KD_EINVAL naming it.
 */
int kd_selector_parse_fields(const char *s, const char *const *allowed, struct kd_selector **out,
                             char *err) KD_WUR;

/** Does obj match? A label selector reads metadata.labels; a field selector reads dotted paths. */
bool kd_selector_match(const struct kd_selector *sel, const json_t *obj);

void kd_selector_free(struct kd_selector *sel);

#endif
