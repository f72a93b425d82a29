/*
 * libFuzzer target for the YAML reader and the experiment config checks:
 * any input must parse or fail cleanly, within the reader's byte budget
 * (aliases expanded), a parsed document must re-emit to
 * YAML that reads back to the same JSON, and validation, defaults and
 * template merging must hold up on whatever tree the parser produced.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/buf.h"
#include "yaml/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The expanded size of a parsed tree, counted as the reader counts it (a
 * string or key its length plus one, any other node one); stops once past
 * `cap`, so an input that slipped past the reader's budget costs little to
 * find.
 */
static size_t tree_bytes(const json_t *v, size_t cap, size_t total)
{
    const char *k;
    json_t *e;
    size_t i;
    total += 1 + (json_is_string(v) ? json_string_length(v) : 0);
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, e)
        {
            if (total > cap)
                break;
            total = tree_bytes(e, cap, total + strlen(k) + 1);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, e)
        {
            if (total > cap)
                break;
            total = tree_bytes(e, cap, total);
        }
    }
    return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kd_yaml_doc *doc = NULL, *again = NULL;
    struct kd_buf out = KD_BUF_INIT(16u << 20);
    json_t *docs = NULL, *merged = NULL, *copy = NULL;
    char err[KD_ERRLEN];

    if (kd_yaml_parse_stream("fuzz", (const char *)data, size, &docs, err) == 0)
        json_decref(docs);
    if (kd_yaml_parse("fuzz", (const char *)data, size, &doc, err) != 0)
        goto out;
    json_t *root = kd_yaml_root(doc);
    /* The byte budget holds: no document, aliases expanded, is bigger than KD_YAML_MAX_BYTES. */
    if (tree_bytes(root, KD_YAML_MAX_BYTES, 0) > KD_YAML_MAX_BYTES) {
        fprintf(stderr, "parsed tree passes the %u-byte budget\n", (unsigned)KD_YAML_MAX_BYTES);
        abort();
    }
    int line, col;
    if (kd_yaml_where(doc, "searcher.max_length", &line, &col) == 0 && (line < 1 || col < 1))
        abort();

    /* Round trip: emit, parse, compare (aliases can expand past the parser's input cap). */
    if (kd_yaml_emit(root, &out) == 0 && out.len <= KD_YAML_MAX_INPUT) {
        if (kd_yaml_parse("emitted", kd_buf_str(&out), out.len, &again, err) != 0) {
            fprintf(stderr, "emitted YAML does not parse: %s\n%s\n", err, kd_buf_str(&out));
            abort();
        }
        if (!json_equal(kd_yaml_root(again), root)) {
            fprintf(stderr, "round trip changed the value:\n%s\n", kd_buf_str(&out));
            abort();
        }
    }

    /* Validation never crashes; a valid config stays valid with defaults filled. */
    int valid = kd_config_check(root, err) == 0;
    copy = json_deep_copy(root);
    if (copy && kd_config_apply_defaults(copy, err) == 0 && valid &&
        kd_config_check(copy, err) != 0) {
        fprintf(stderr, "defaults broke a valid config: %s\n", err);
        abort();
    }
    /* Merging a config with itself and checking the result must not crash. */
    if (json_is_object(root) && kd_config_merge_template(root, root, &merged, err) == 0 &&
        kd_config_check(merged, err) != 0 && err[0] == '\0')
        abort(); /* a failed check always says why */
    /* ... and a merge that succeeds stays within its budget. */
    if (merged && tree_bytes(merged, KD_CONFIG_MAX_BYTES, 0) > KD_CONFIG_MAX_BYTES)
        abort();
out:
    json_decref(merged);
    json_decref(copy);
    kd_yaml_free(again);
    kd_yaml_free(doc);
    kd_buf_free(&out);
    return 0;
}
