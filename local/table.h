/*
 * Server-side printing: the meta.k8s.io/v1 Table that kubectl asks for
 * (Accept: application/json;as=Table;...) with the columns the real API
 * server prints for each built-in kind and a CRD's additionalPrinterColumns.
 */
#ifndef KD_LOCAL_TABLE_H
#define KD_LOCAL_TABLE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct kd_restype;

/**
 * A Table (new reference) for `n` objects of type rt. `include` is the
 * includeObject parameter ("None", "Metadata" (default, NULL) or "Object");
 * `rv` the list's resourceVersion (may be NULL); `now_ms` the wall clock
 * used for ages. Pure: reads only its arguments.
 */
json_t *kd_table_build(const struct kd_restype *rt, json_t *const *objs, size_t n,
                       const char *include, const char *rv, int64_t now_ms);

/** Human-readable age as kubectl prints it ("45s", "5m30s", "3h", "12d"). buf needs 32 bytes. */
const char *kd_table_age(int64_t seconds, char *buf, size_t len);

/**
 * Evaluate a printer-column JSONPath (".spec.size", ".status.conditions[0].type",
 * ".status.conditions[?(@.type==\"Ready\")].status") on obj; the result is
 * borrowed, or NULL when the path matches nothing.
 */
const json_t *kd_table_jsonpath(const json_t *obj, const char *path);

#endif
