/*
 * libFuzzer target for the YAML reader and the experiment config loader:
 * any input must parse or fail cleanly, within the reader's byte budget
 * (aliases expanded), a parsed document must re-emit to
 * YAML that reads back to the same JSON, and validation, defaults and
 * template merging must hold up on whatever tree the parser produced.
 * The input is also loaded as files with kd_config_load, split at a line
 * "---8<---" into the config and its template (det experiment create
 * --template): a load that succeeds is the template merge of the two and
 * passes kd_config_check, within the merge's byte budget; one that fails
 * says why, naming the file at fault.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "core/buf.h"
#include "yaml/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_config: " __VA_ARGS__);                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

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

/* The config and template files: memory files, rewritten for each input. */
static int cfg_fd = -1, tmpl_fd = -1;
static char cfg_path[64], tmpl_path[64];

static void put_file(int fd, const char *p, size_t n)
{
    if (ftruncate(fd, 0) != 0 || (n > 0 && pwrite(fd, p, n, 0) != (ssize_t)n))
        abort();
}

/* kd_config_load on the input split at the scissors line into config and template. */
static void check_load(const char *text, size_t size)
{
    static const char cut[] = "\n---8<---\n";
    const char *sc = memmem(text, size, cut, sizeof(cut) - 1);
    size_t clen = sc != NULL ? (size_t)(sc - text) : size;
    const char *t = sc != NULL ? sc + sizeof(cut) - 1 : NULL;
    size_t tlen = t != NULL ? size - clen - (sizeof(cut) - 1) : 0;
    json_t *cfg = NULL, *merged = NULL;
    struct kd_yaml_doc *cdoc = NULL, *tdoc = NULL;
    char err[KD_ERRLEN] = "", perr[KD_ERRLEN];
    if (cfg_fd < 0) {
        cfg_fd = memfd_create("kd-fuzz-config", MFD_CLOEXEC);
        tmpl_fd = memfd_create("kd-fuzz-template", MFD_CLOEXEC);
        if (cfg_fd < 0 || tmpl_fd < 0)
            abort();
        snprintf(cfg_path, sizeof(cfg_path), "/proc/self/fd/%d", cfg_fd);
        snprintf(tmpl_path, sizeof(tmpl_path), "/proc/self/fd/%d", tmpl_fd);
    }
    put_file(cfg_fd, text, clen);
    put_file(tmpl_fd, t, tlen);
    int rc = kd_config_load(cfg_path, t != NULL ? tmpl_path : NULL, &cfg, err);
    if (rc != 0) {
        if (cfg != NULL || err[0] == '\0')
            FAIL("a failed load (%d) %s", rc, cfg != NULL ? "left a config" : "says nothing");
        /* What is wrong in a file is told with the file's name. */
        if (rc == KD_EINVALID && strstr(err, cfg_path) == NULL && strstr(err, tmpl_path) == NULL)
            FAIL("an invalid config's message names no file: %s", err);
        return;
    }
    /* The loaded config is the merge of the files as parsed, passes the check, and fits. */
    if (kd_yaml_parse(cfg_path, text, clen, &cdoc, perr) != 0 ||
        (t != NULL && kd_yaml_parse(tmpl_path, t, tlen, &tdoc, perr) != 0))
        FAIL("a loaded config does not parse from memory: %s", perr);
    if (t != NULL) {
        if (kd_config_merge_template(kd_yaml_root(tdoc), kd_yaml_root(cdoc), &merged, perr) != 0)
            FAIL("a loaded config does not merge from memory: %s", perr);
    } else {
        merged = json_incref(kd_yaml_root(cdoc));
    }
    if (!json_equal(cfg, merged))
        FAIL("the loaded config is not the merge of its files");
    if (kd_config_check(cfg, perr) != 0)
        FAIL("a loaded config fails kd_config_check: %s", perr);
    if (tree_bytes(cfg, KD_CONFIG_MAX_BYTES, 0) > KD_CONFIG_MAX_BYTES)
        FAIL("a loaded config passes the %u-byte budget", (unsigned)KD_CONFIG_MAX_BYTES);
    json_decref(merged);
    json_decref(cfg);
    kd_yaml_free(cdoc);
    kd_yaml_free(tdoc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kd_yaml_doc *doc = NULL, *again = NULL;
    struct kd_buf out = KD_BUF_INIT(16u << 20);
    json_t *docs = NULL, *merged = NULL, *copy = NULL;
    char err[KD_ERRLEN];

    check_load((const char *)data, size);
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
