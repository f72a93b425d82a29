/*
 * The one JSON accessor every file of kdet-local uses: a member's string
 * value, with jansson's NULL-safety.
 */
#ifndef KD_LOCAL_JSON_H
#define KD_LOCAL_JSON_H

#include <jansson.h>

/** o[k] when it is a string (borrowed from o), else NULL; o may be NULL or not an object. */
static inline const char *kd_jstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

#endif
