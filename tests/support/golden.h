/*
 * Golden files for tests: compare a JSON value with the file that holds
 * what it must be, or (KD_UPDATE_GOLDEN=1) rewrite the file from it, to
 * be reviewed in the diff before committing.
 */
#ifndef KD_TEST_GOLDEN_H
#define KD_TEST_GOLDEN_H

#include <jansson.h>

/** Fail the running cmocka test (naming `what` and path) unless got equals the file's JSON. */
void kd_golden_check(const char *what, const char *path, const json_t *got);

#endif
