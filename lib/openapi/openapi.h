/*
 * Validation of a JSON instance against an OpenAPI v3 structural schema,
 * the way the Kubernetes API server validates custom resources: the same
 * keywords, the same field paths and the same cause messages as its
 * 422 Invalid responses, so kdet-local, `det` and the tests agree with a
 * real cluster about what a valid Experiment or Trial is.
 */
#ifndef KD_OPENAPI_OPENAPI_H
#define KD_OPENAPI_OPENAPI_H

#include <jansson.h>

#include "core/err.h"

/*
 * Supported keywords: type (object, array, string, integer, number,
 * boolean), properties, required, additionalProperties (bool or schema),
 * items, enum, minimum, maximum, exclusiveMinimum, exclusiveMaximum,
 * multipleOf, minLength, maxLength, pattern (POSIX extended regular
 * expressions, see docs/resources.md for the subset), minItems, maxItems,
 * uniqueItems, minProperties, maxProperties, nullable, format (on
 * strings: date-time, date, uuid, byte, ipv4; others, and int32/int64 on
 * integers, are accepted unchecked, as the API server does), oneOf, anyOf,
 * allOf, not, x-kubernetes-preserve-unknown-fields (affects only
 * kd_openapi_unknown_fields), x-kubernetes-int-or-string.
 * Not supported: x-kubernetes-embedded-resource's metadata checks,
 * x-kubernetes-validations (CEL), list-type/map-type uniqueness.
 *
 * Unknown fields: like the API server, fields that the schema does not
 * name are not a validation error here (the server prunes them); use
 * kd_openapi_unknown_fields() to list them.
 */

/**
 * Validate `instance` against `schema` (an openAPIV3Schema object).
 * `root_path` names the instance in field paths ("" or NULL for none,
 * e.g. "spec" gives "spec.searcher.max_trials").
 *
 * Returns 0 when the instance is valid (and sets *causes to NULL), or
 * KD_EINVALID with *causes set to a new JSON array (caller json_decref()s)
 * of every violation found. Each cause is an object with "reason"
 * (FieldValueInvalid, FieldValueRequired, FieldValueNotSupported,
 * FieldValueTypeInvalid, FieldValueTooLong or FieldValueTooMany), "field"
 * ("spec.searcher.max_trials"; oneOf/anyOf/allOf/not failures are reported
 * at root_path, or "<nil>" when it is empty, as the API server reports
 * them) and "message", e.g.
 *   Invalid value: "string": spec.searcher.max_trials in body must be of
 *   type integer: "string"
 * (the API server's own text: for a type error the value shown is the
 * JSON type found). Causes come in the order the API server's validators
 * find them: per node type, oneOf/anyOf/allOf/not, string, number, array,
 * enum, object; an object's properties in the schema's order, then its
 * missing required fields.
 *
 * A pattern that does not compile is reported as a cause against the
 * value, as the API server does. Returns KD_EINVAL (and no causes) when
 * the schema cannot be used at all (it, or a subschema, is not an object)
 * or an argument is NULL. Pure function: thread-safe, does not block,
 * keeps no reference.
 */
int kd_openapi_validate(const json_t *schema, const json_t *instance, const char *root_path,
                        json_t **causes) KD_WUR;

/**
 * List the fields of `instance` that `schema` does not declare (what the
 * API server would prune, or reject under fieldValidation=Strict) as a new
 * JSON array of path strings ("spec.searcher.max_trails"); caller
 * json_decref()s. Fields under x-kubernetes-preserve-unknown-fields are
 * kept, and so is the root's `metadata` (ObjectMeta, which the API server
 * checks on its own). Returns 0 (the array may be empty), KD_EINVAL for a
 * NULL `paths`.
 */
int kd_openapi_unknown_fields(const json_t *schema, const json_t *instance, const char *root_path,
                              json_t **paths) KD_WUR;

/**
 * Check that a CRD version's schema is structural, as the API server
 * requires for apiextensions.k8s.io/v1: the root is of type object; every
 * field and array item specifies a type (unless x-kubernetes-int-or-string
 * or x-kubernetes-preserve-unknown-fields); `items` is set for arrays;
 * `additionalProperties` is neither at the root nor beside `properties`;
 * int-or-string is not combined with preserve-unknown-fields; nodes under
 * oneOf/anyOf/allOf/not are value validations only (no type, default,
 * description, title, nullable, additionalProperties, externalDocs,
 * x-kubernetes-* extensions or `metadata` property), except that exactly
 * `anyOf: [{type: integer}, {type: string}]`, directly or as the first
 * item of an allOf, is allowed (IntOrString, resource.Quantity); and the
 * root's junctors name only properties the schema declares. Returns 0 or
 * KD_EINVALID with the violations, sorted as the API server sorts them and
 * newline separated, written to `err` (KD_ERRLEN bytes, truncated; may be
 * NULL) as
 * "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty
 * for specified object fields". Pure function: thread-safe, keeps no
 * reference.
 */
int kd_openapi_check_structural(const json_t *schema, const char *root_path, char *err) KD_WUR;

/**
 * kd_openapi_check_structural() with the violations as a new JSON array of
 * causes in *causes (caller json_decref()s; NULL unless KD_EINVALID), one
 * per violation as the API server lists them: "reason"
 * (FieldValueForbidden, FieldValueRequired or FieldValueInvalid), "field"
 * ("spec.versions[0].schema.openAPIV3Schema.properties[spec].anyOf[0].type")
 * and "message" ("Forbidden: must be empty to be structural"). Violations
 * beyond KD_ERRLEN bytes of text are left out. Pure function.
 */
int kd_openapi_structural_causes(const json_t *schema, const char *root_path,
                                 json_t **causes) KD_WUR;

/**
 * Render the causes array as the lines kubectl prints for a 422, one per
 * cause ("* spec.searcher.max_trials: Invalid value: ...", newline
 * separated, no trailing newline). Returns a new string the caller
 * free()s; "" for an empty or NULL array. Aborts on out-of-memory.
 */
char *kd_openapi_causes_str(const json_t *causes);

#endif
