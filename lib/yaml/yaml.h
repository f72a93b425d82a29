/*
 * YAML to JSON: libyaml reads one document (or a stream of them) into a
 * jansson tree, remembering the line and column of every node so that
 * callers can name the place of a bad value; and JSON back to block-style
 * YAML that re-parses to the same JSON.
 */
#ifndef KD_YAML_YAML_H
#define KD_YAML_YAML_H

#include <stddef.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"

/* Hard caps on what the parser accepts; past them it fails with KD_ETOOBIG. */
#define KD_YAML_MAX_INPUT (4u << 20) /* bytes of YAML text */
#define KD_YAML_MAX_DEPTH 64         /* nested mappings/sequences */
#define KD_YAML_MAX_NODES 1000000    /* nodes, counting every alias expansion in full */
#define KD_YAML_MAX_DOCS 1000        /* documents in one stream */
#define KD_YAML_MAX_BYTES                                                                          \
    (16u << 20) /* expanded size: each scalar's length + 1 per node,                               \
                   counting every alias expansion in full */

/** A parsed document: its JSON tree plus the position of every node. Opaque. */
struct kd_yaml_doc;

/**
 * Parse `len` bytes of `text` holding exactly one YAML document into *out.
 * `name` (a file name, or "<stdin>") starts every error message, which has
 * the form "NAME:LINE:COL: message" (1-based) and goes into `err`
 * (KD_ERRLEN bytes, may be NULL).
 *
 * Scalars are typed by the YAML 1.2 core schema: null/Null/NULL/~ and the
 * empty plain scalar are null; true/True/TRUE/false/False/FALSE are
 * booleans; [-+]?[0-9]+, 0o[0-7]+ and 0x[0-9a-fA-F]+ are integers (int64;
 * larger ones are an error); decimal and exponent forms are reals;
 * .inf/.nan are recognised as floats but rejected, because JSON cannot hold
 * them. Quoted and block scalars are always strings, and so is anything
 * else (yes/no/on/off stay strings, unlike YAML 1.1). The tags !!str,
 * !!int, !!float, !!bool, !!null, !!map and !!seq are honoured; any other
 * tag is an error. Mapping keys must be scalars and become their text;
 * duplicate keys are an error naming both positions. Aliases are expanded
 * (deep copies), `<<` merge keys are applied (explicit keys win), and the
 * expanded size counts against both KD_YAML_MAX_NODES and KD_YAML_MAX_BYTES,
 * so "billion laughs" inputs (many small nodes, or a few aliases of one long
 * string) fail fast with an error naming the alias that passed the budget:
 * "NAME:L:C: expands to more than N bytes (alias *a of B bytes used U times)". An empty document
 * gives a null root.
 *
 * Returns 0, KD_EPARSE (syntax, typing, duplicates, several documents),
 * KD_ETOOBIG (a cap was passed) or KD_EINVAL (NULL arguments).
 * The caller frees *out with kd_yaml_free. Thread-safe (no shared state).
 */
int kd_yaml_parse(const char *name, const char *text, size_t len, struct kd_yaml_doc **out,
                  char *err) KD_WUR;

/**
 * kd_yaml_parse on the contents of the file at `path` (also its name in
 * errors). Reads at most KD_YAML_MAX_INPUT bytes: a larger file fails with
 * KD_ETOOBIG; an unreadable one with -errno and "PATH: reason". Blocks on
 * file I/O.
 */
int kd_yaml_parse_file(const char *path, struct kd_yaml_doc **out, char *err) KD_WUR;

/**
 * Parse every document of a multi-document stream (for manifests such as
 * crds/ files) into a new JSON array, one element per document (empty
 * documents are skipped). Same typing, caps and error form as
 * kd_yaml_parse; no positions are kept. The caller json_decref()s *docs.
 */
int kd_yaml_parse_stream(const char *name, const char *text, size_t len, json_t **docs,
                         char *err) KD_WUR;

/** The root of the document's tree: a borrowed reference, valid until kd_yaml_free. */
json_t *kd_yaml_root(const struct kd_yaml_doc *doc);

/** The name given to kd_yaml_parse (borrowed). */
const char *kd_yaml_name(const struct kd_yaml_doc *doc);

/**
 * Position (1-based line and column) of the node at a JSON path such as
 * "searcher.max_trials", "hyperparameters.lr.minval" or
 * "bind_mounts[1].container_path"; "" is the root. Keys that contain '.'
 * or '[' may be written as ["a.b"]. For a mapping or sequence the position
 * is where its first entry (or its flow bracket) starts. Returns 0, or
 * KD_ENOTFOUND when the path names no node.
 */
int kd_yaml_where(const struct kd_yaml_doc *doc, const char *path, int *line, int *col) KD_WUR;

/**
 * Position of the key (not the value) of the mapping entry at `path`
 * (whose last component must be a key). 0 or KD_ENOTFOUND.
 */
int kd_yaml_where_key(const struct kd_yaml_doc *doc, const char *path, int *line, int *col) KD_WUR;

/**
 * Position of `node` found by identity in the document's tree (so a node
 * that moved into another tree by reference, as template merging does, is
 * still found). jansson shares one true, false and null object among all
 * trees, so those are never found this way: use kd_yaml_where. 0 or
 * KD_ENOTFOUND.
 */
int kd_yaml_where_node(const struct kd_yaml_doc *doc, const json_t *node, int *line,
                       int *col) KD_WUR;

/** Like kd_yaml_where_node, but the position of the node's key (for a mapping value). */
int kd_yaml_where_node_key(const struct kd_yaml_doc *doc, const json_t *node, int *line,
                           int *col) KD_WUR;

/** Free a document and its tree (tree nodes still referenced elsewhere live on). NULL-safe. */
void kd_yaml_free(struct kd_yaml_doc *doc);

/**
 * Append `value` to `out` as one block-style YAML document (no "---"),
 * object keys in insertion order. Strings are quoted whenever YAML would
 * read them as something else ("true", "1.0", "null", "yes", "", leading
 * indicator characters, ": " or " #" inside, leading/trailing spaces);
 * multi-line strings become block literals. Reals are written in the
 * shortest form that reads back to the same double, always as floats.
 * kd_yaml_parse of the output gives JSON equal to `value`.
 * Returns 0, KD_ETOOBIG (out's cap), KD_ENOMEM or KD_EINVAL.
 */
int kd_yaml_emit(const json_t *value, struct kd_buf *out) KD_WUR;

#endif
