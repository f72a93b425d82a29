/*
 * libFuzzer target for the YAML reader and the experiment config checks:
 * any input must parse or fail cleanly, a parsed document must re-emit to
 * YAML that reads back to the same JSON, and validation, defaults and
 * template merging must hold up on whatever tree the parser produced.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/config.h"
#include "core/buf.h"
#include "yaml/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
out:
    json_decref(merged);
    json_decref(copy);
    kd_yaml_free(again);
    kd_yaml_free(doc);
    kd_buf_free(&out);
    return 0;
}
