/*
 * Kubernetes resource quantities ("500m", "2", "1.5", "128Mi", "1G",
 * "1e3") as integers in thousandths of the unit, which is exact for every
 * quantity the scheduler compares (cpu, memory, pods, GPUs).
 */
#ifndef KD_LOCAL_QUANTITY_H
#define KD_LOCAL_QUANTITY_H

#include <stdint.h>

#include "core/err.h"

/**
 * Parse a quantity string into milli-units (e.g. "500m" -> 500, "2" -> 2000,
 * "1Ki" -> 1024000). Returns 0 or KD_EINVAL (bad syntax, unknown suffix,
 * negative, or too large) with the cause in err (optional).
 */
int kd_quantity_parse_milli(const char *s, int64_t *milli, char *err) KD_WUR;

#endif
