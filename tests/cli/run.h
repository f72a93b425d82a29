/* Test helpers: run build/bin/det with arguments, capture its exit code,
 * stdout and stderr; make temp trees; parse and check its YAML output. */
#ifndef KD_TESTS_CLI_RUN_H
#define KD_TESTS_CLI_RUN_H

#include <jansson.h>

struct det_run {
    int code;  /* exit code, or -1 when killed */
    char *out; /* stdout (malloc'd) */
    char *err; /* stderr (malloc'd) */
    size_t out_len;
};

/** Run $KD_BUILD/bin/det with a NULL-terminated argv (without argv[0]). */
void det_run(struct det_run *r, const char *const *args);
void det_run_free(struct det_run *r);

/** Write `content` to dir/rel, creating parent directories. */
void put_file(const char *dir, const char *rel, const char *content);

/** mkdtemp under /tmp into buf (64 bytes); rm_rf removes a tree. */
void make_tmp(char *buf);
void rm_rf(const char *dir);

/** The openAPIV3Schema of a CRD file (new reference). */
json_t *crd_schema_file(const char *path);

/** Parse det's multi-document output into a JSON array (new reference); fails the test on error. */
json_t *parse_docs(const char *text, size_t len);

#endif
