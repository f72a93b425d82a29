/* YAML to JSON: typing, positions, caps, aliases, duplicates, streams, emit round trips. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "yaml/yaml.h"

static struct kd_yaml_doc *parse_ok(const char *text)
{
    struct kd_yaml_doc *doc = NULL;
    char err[KD_ERRLEN] = "";
    int rc = kd_yaml_parse("t.yaml", text, strlen(text), &doc, err);
    if (rc)
        fail_msg("parse failed: %s", err);
    return doc;
}

static void expect_err(const char *text, int code, const char *msg)
{
    struct kd_yaml_doc *doc = NULL;
    char err[KD_ERRLEN] = "";
    int rc = kd_yaml_parse("t.yaml", text, strlen(text), &doc, err);
    if (doc || rc != code)
        fail_msg("\"%s\": rc %d (want %d), err \"%s\"", text, rc, code, err);
    if (!strstr(err, msg))
        fail_msg("error \"%s\" does not contain \"%s\"", err, msg);
}

static void test_scalar_types(void **state)
{
    (void)state;
    struct {
        const char *text;
        const char *json;
    } cases[] = {
        {"v: ~", "null"},
        {"v: null", "null"},
        {"v: NULL", "null"},
        {"v:", "null"},
        {"v: true", "true"},
        {"v: False", "false"},
        {"v: yes", "\"yes\""},
        {"v: off", "\"off\""},
        {"v: 42", "42"},
        {"v: -7", "-7"},
        {"v: +3", "3"},
        {"v: 0o17", "15"},
        {"v: 0x1F", "31"},
        {"v: 1.5", "1.5"},
        {"v: 1e-3", "0.001"},
        {"v: .5", "0.5"},
        {"v: 10.", "10.0"},
        {"v: 1_000", "\"1_000\""},
        {"v: \"true\"", "\"true\""},
        {"v: '12'", "\"12\""},
        {"v: !!str 12", "\"12\""},
        {"v: !!float 7", "7.0"},
        {"v: !!int \"12\"", "12"},
        {"v: 9223372036854775807", "9223372036854775807"},
        {"v: -9223372036854775808", "-9223372036854775808"},
        {"v: |\n  a\n  b\n", "\"a\\nb\\n\""},
        {"v: >-\n  a\n  b\n", "\"a b\""},
        {"v: [1, a, {b: c}]", "[1, \"a\", {\"b\": \"c\"}]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kd_yaml_doc *doc = parse_ok(cases[i].text);
        json_error_t je;
        json_t *want = json_loads(cases[i].json, JSON_DECODE_ANY, &je);
        assert_non_null(want);
        json_t *got = json_object_get(kd_yaml_root(doc), "v");
        if (!json_equal(got, want)) {
            char *g = json_dumps(got, JSON_ENCODE_ANY);
            fail_msg("case %zu \"%s\": got %s, want %s", i, cases[i].text, g, cases[i].json);
        }
        /* Reals stay reals and integers stay integers. */
        assert_int_equal(json_typeof(got), json_typeof(want));
        json_decref(want);
        kd_yaml_free(doc);
    }
}

static void test_positions(void **state)
{
    (void)state;
    const char *text = "name: mnist\n"
                       "searcher:\n"
                       "  name: single\n"
                       "  max_length:\n"
                       "    batches: 100\n"
                       "bind_mounts:\n"
                       "  - host_path: /data\n"
                       "    container_path: /data\n"
                       "  - {host_path: /a, container_path: /b}\n"
                       "\"a.b\": {c: 1}\n";
    struct kd_yaml_doc *doc = parse_ok(text);
    int line = 0, col = 0;
    assert_int_equal(kd_yaml_where(doc, "name", &line, &col), 0);
    assert_int_equal(line, 1);
    assert_int_equal(col, 7);
    assert_int_equal(kd_yaml_where(doc, "searcher.max_length.batches", &line, &col), 0);
    assert_int_equal(line, 5);
    assert_int_equal(col, 14);
    assert_int_equal(kd_yaml_where_key(doc, "searcher.max_length.batches", &line, &col), 0);
    assert_int_equal(line, 5);
    assert_int_equal(col, 5);
    assert_int_equal(kd_yaml_where(doc, "searcher", &line, &col), 0);
    assert_int_equal(line, 3); /* a block mapping starts at its first key */
    assert_int_equal(col, 3);
    assert_int_equal(kd_yaml_where(doc, "bind_mounts[0].container_path", &line, &col), 0);
    assert_int_equal(line, 8);
    assert_int_equal(col, 21);
    assert_int_equal(kd_yaml_where(doc, "bind_mounts[1].container_path", &line, &col), 0);
    assert_int_equal(line, 9);
    assert_int_equal(col, 37);
    assert_int_equal(kd_yaml_where(doc, "bind_mounts[1]", &line, &col), 0);
    assert_int_equal(line, 9);
    assert_int_equal(col, 5);
    assert_int_equal(kd_yaml_where(doc, "[\"a.b\"].c", &line, &col), 0);
    assert_int_equal(line, 10);
    assert_int_equal(col, 12);
    assert_int_equal(kd_yaml_where(doc, "", &line, &col), 0);
    assert_int_equal(line, 1);
    assert_int_equal(kd_yaml_where(doc, "bind_mounts[2]", &line, &col), KD_ENOTFOUND);
    assert_int_equal(kd_yaml_where(doc, "searcher.metric", &line, &col), KD_ENOTFOUND);
    assert_int_equal(kd_yaml_where(doc, "name.x", &line, &col), KD_ENOTFOUND);

    /* By identity: the node found in the tree, also after it is shared elsewhere. */
    json_t *ml = json_object_get(json_object_get(kd_yaml_root(doc), "searcher"), "max_length");
    json_t *other = json_pack("{s:O}", "moved", ml);
    assert_int_equal(kd_yaml_where_node(doc, json_object_get(other, "moved"), &line, &col), 0);
    assert_int_equal(line, 5);
    assert_int_equal(col, 5);
    assert_int_equal(kd_yaml_where_node_key(doc, ml, &line, &col), 0);
    assert_int_equal(line, 4);
    assert_int_equal(col, 3);
    assert_int_equal(kd_yaml_where_node(doc, other, &line, &col), KD_ENOTFOUND);
    json_decref(other);
    kd_yaml_free(doc);
}

static void test_syntax_errors_name_position(void **state)
{
    (void)state;
    expect_err("a: 1\nb: [1, 2\nc: 3\n", KD_EPARSE, "t.yaml:3:");
    expect_err("a: 1\n  b: 2\n", KD_EPARSE, "t.yaml:2:4: mapping values are not allowed");
    expect_err("a: 'open\n", KD_EPARSE, "t.yaml:");
    expect_err("a:\n\tb: 1\n", KD_EPARSE, "t.yaml:2:");
    expect_err("a: 1\na: 2\n", KD_EPARSE, "t.yaml:2:1: duplicate key \"a\" (first at 1:1)");
    expect_err("x:\n  k: 1\n  j: 2\n  k: 3\n", KD_EPARSE, "t.yaml:4:3: duplicate key \"k\"");
    expect_err("v: .inf\n", KD_EPARSE, "t.yaml:1:4: .inf (infinity or NaN)");
    expect_err("v: -.Inf\n", KD_EPARSE, "infinity or NaN");
    expect_err("v: .nan\n", KD_EPARSE, "infinity or NaN");
    expect_err("v: 99999999999999999999\n", KD_EPARSE, "t.yaml:1:4: integer");
    expect_err("v: !custom x\n", KD_EPARSE, "t.yaml:1:4: unsupported tag !custom");
    expect_err("v: !!int abc\n", KD_EPARSE, "does not match its tag");
    expect_err("? [a]\n: 1\n", KD_EPARSE, "mapping keys must be scalars");
    expect_err("a: *nope\n", KD_EPARSE, "t.yaml:1:4: alias *nope");
    expect_err("a: 1\n---\nb: 2\n", KD_EPARSE, "t.yaml:2:1: expected a single YAML document");
    expect_err("a: &x [1, *x]\n", KD_EPARSE, "alias *x");
    expect_err("a: b: c\n", KD_EPARSE, "t.yaml:1:5:");
    expect_err("bad: \xff\xfe\n", KD_EPARSE, "t.yaml:");
    expect_err("m:\n  <<: 5\n", KD_EPARSE, "t.yaml:2:7: the value of a << merge key");
}

/* Windows line endings, a UTF-8 byte order mark and UTF-16 input keep their positions. */
static void test_encodings_and_line_endings(void **state)
{
    (void)state;
    const char crlf[] = "a: 1\r\nb:\r\n  c: x\r\n";
    struct kd_yaml_doc *doc = parse_ok(crlf);
    int line = 0, col = 0;
    assert_int_equal(kd_yaml_where(doc, "b.c", &line, &col), 0);
    assert_int_equal(line, 3);
    assert_int_equal(col, 6);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(kd_yaml_root(doc), "b"), "c")), "x");
    kd_yaml_free(doc);
    doc = parse_ok("\xef\xbb\xbfname: caf\xc3\xa9\n");
    assert_string_equal(json_string_value(json_object_get(kd_yaml_root(doc), "name")),
                        "caf\xc3\xa9");
    kd_yaml_free(doc);
    /* "k: v\n" in UTF-16LE with a byte order mark. */
    const char u16[] = {'\xff', '\xfe', 'k', 0, ':', 0, ' ', 0, 'v', 0, '\n', 0};
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_yaml_parse("u16.yaml", u16, sizeof(u16), &doc, err), 0);
    assert_string_equal(json_string_value(json_object_get(kd_yaml_root(doc), "k")), "v");
    kd_yaml_free(doc);
    /* A NUL byte in the text is an error, not the end of the input. */
    const char nul[] = "a: 1\nb: \0\n";
    assert_int_equal(kd_yaml_parse("nul.yaml", nul, sizeof(nul) - 1, &doc, err), KD_EPARSE);
    assert_non_null(strstr(err, "nul.yaml:"));
}

static void test_empty_and_scalar_documents(void **state)
{
    (void)state;
    struct kd_yaml_doc *doc = parse_ok("");
    assert_true(json_is_null(kd_yaml_root(doc)));
    kd_yaml_free(doc);
    doc = parse_ok("# only a comment\n");
    assert_true(json_is_null(kd_yaml_root(doc)));
    kd_yaml_free(doc);
    doc = parse_ok("just text\n");
    assert_string_equal(json_string_value(kd_yaml_root(doc)), "just text");
    kd_yaml_free(doc);
    kd_yaml_free(NULL);
}

static void test_aliases_and_merge_keys(void **state)
{
    (void)state;
    struct kd_yaml_doc *doc = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_yaml_parse_file("tests/data/yaml/anchors.yaml", &doc, err), 0);
    json_t *r = kd_yaml_root(doc);
    json_t *gpu = json_object_get(r, "gpu");
    assert_string_equal(json_string_value(json_object_get(gpu, "image")), "pytorch:1.13-cuda");
    assert_true(json_is_false(json_object_get(gpu, "force_pull_image")));
    assert_int_equal(json_array_size(json_object_get(gpu, "env")), 2);
    assert_null(json_object_get(gpu, "<<"));
    json_t *cpu = json_object_get(r, "cpu");
    assert_string_equal(json_string_value(json_object_get(cpu, "image")), "pytorch:1.13");
    assert_true(json_is_true(json_object_get(cpu, "extra")));
    assert_string_equal(json_string_value(json_object_get(r, "again")), "hello");
    /* Aliases are copies: changing one leaves the other alone. */
    json_t *envs = json_object_get(r, "envs");
    assert_int_equal(json_array_size(envs), 2);
    assert_true(json_array_get(envs, 0) != json_array_get(envs, 1));
    /* A merged key keeps the position where it was written (in the anchor). */
    int line = 0, col = 0;
    assert_int_equal(kd_yaml_where(doc, "gpu.force_pull_image", &line, &col), 0);
    assert_int_equal(line, 3);
    assert_int_equal(kd_yaml_where(doc, "gpu.image", &line, &col), 0);
    assert_int_equal(line, 7);
    assert_int_equal(kd_yaml_where(doc, "again", &line, &col), 0);
    assert_int_equal(line, 12);
    kd_yaml_free(doc);
}

static char *repeat(const char *unit, size_t n, const char *head, const char *tail)
{
    size_t ul = strlen(unit), hl = strlen(head), tl = strlen(tail);
    char *s = malloc(hl + ul * n + tl + 1);
    assert_non_null(s);
    memcpy(s, head, hl);
    for (size_t i = 0; i < n; i++)
        memcpy(s + hl + i * ul, unit, ul);
    memcpy(s + hl + n * ul, tail, tl + 1);
    return s;
}

static void test_caps(void **state)
{
    (void)state;
    /* Billion laughs: 10 levels of 10 aliases each would be 10^10 nodes. */
    const char *laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                         "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                         "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                         "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                         "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                         "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
                         "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
                         "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]\n";
    expect_err(laughs, KD_ETOOBIG, "t.yaml:6:");

    /* Nesting depth. */
    char *deep = repeat("[", KD_YAML_MAX_DEPTH + 1, "v: ", "");
    expect_err(deep, KD_ETOOBIG, "nesting deeper than 64 levels");
    free(deep);
    char *ok = repeat("[", KD_YAML_MAX_DEPTH - 1, "", "");
    char *okc = repeat("]", KD_YAML_MAX_DEPTH - 1, ok, "");
    struct kd_yaml_doc *doc = parse_ok(okc);
    kd_yaml_free(doc);
    free(ok);
    free(okc);

    /* Node count without aliases. */
    char *many = repeat("- 1\n", KD_YAML_MAX_NODES + 1, "", "");
    expect_err(many, KD_ETOOBIG, "more than 1000000 nodes");
    free(many);

    /* Input size. */
    size_t big = KD_YAML_MAX_INPUT + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, '#', big);
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_yaml_parse("big.yaml", text, big, &doc, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "big.yaml: 4194305 bytes is over"));
    free(text);

    /* Files: missing, and over the cap. */
    assert_int_equal(kd_yaml_parse_file("tests/data/yaml/no-such.yaml", &doc, err), -2);
    assert_non_null(strstr(err, "tests/data/yaml/no-such.yaml: No such file"));
    char path[] = "/tmp/kd-yaml-big-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)KD_YAML_MAX_INPUT + 10), 0);
    close(fd);
    assert_int_equal(kd_yaml_parse_file(path, &doc, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "larger than"));
    unlink(path);
}

/*
 * The attack of a template that aliases one long string many times: few
 * nodes (under KD_YAML_MAX_NODES) but strlen * uses bytes once expanded
 * (200,000 * 100,000 = 20 GB). Caller frees.
 */
static char *string_alias_bomb(size_t strlen_, size_t uses, size_t *len)
{
    struct kd_buf b = KD_BUF_INIT(KD_YAML_MAX_INPUT);
    assert_int_equal(kd_buf_puts(&b, "s: &a \""), 0);
    for (size_t i = 0; i < strlen_; i++)
        assert_int_equal(kd_buf_append(&b, "x", 1), 0);
    assert_int_equal(kd_buf_puts(&b, "\"\nl: ["), 0);
    for (size_t i = 0; i < uses; i++)
        assert_int_equal(kd_buf_puts(&b, i ? ",*a" : "*a"), 0);
    assert_int_equal(kd_buf_puts(&b, "]\n"), 0);
    *len = b.len;
    char *s = kd_xstrdup(kd_buf_str(&b));
    kd_buf_free(&b);
    return s;
}

/* A "Vm...:" line of /proc/self/status in KiB, or -1. */
static long status_kib(const char *key)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    while (v < 0 && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, strlen(key)) == 0)
            v = strtol(line + strlen(key), NULL, 10);
    fclose(f);
    return v;
}

/*
 * The string alias bomb fails with a byte-budget error naming the alias, in a
 * child process whose address space is capped (outside ASan, which reserves
 * terabytes of shadow) so that a regression dies of a failed allocation
 * instead of taking the machine's memory; its peak RSS must grow by little.
 */
static void test_string_alias_bomb(void **state)
{
    (void)state;
    size_t len = 0;
    char *text = string_alias_bomb(200000, 100000, &len);
    assert_true(len < KD_YAML_MAX_INPUT);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
#ifndef KD_SANITIZE
        struct rlimit rl = {.rlim_cur = 1u << 30, .rlim_max = 1u << 30};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
#endif
        struct kd_yaml_doc *doc = NULL;
        char err[KD_ERRLEN] = "";
        long before = status_kib("VmRSS:");
        int rc = kd_yaml_parse("template big", text, len, &doc, err);
        long grew = status_kib("VmHWM:") - before;
        fprintf(stderr, "alias bomb: rc %d: %s; peak RSS %ld KiB over the start\n", rc, err, grew);
        /* The budget (16 MiB of expanded text) bounds the growth; allow for jansson's per-node
         * cost and ASan's redzones, far below the 20 GB the expansion would take. */
        if (before < 0 || grew > 256 * 1024)
            _exit(4);
        if (rc != KD_ETOOBIG || doc != NULL)
            _exit(1);
        if (!strstr(err, "template big:2:") ||
            !strstr(err, "expands to more than 16777216 bytes (alias *a of 200001 bytes used "))
            _exit(2);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    free(text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child: %s %d", WIFEXITED(status) ? "exit" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));

    /* A stream is held to the same budget. */
    text = string_alias_bomb(1000, 20000, &len);
    json_t *docs = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_yaml_parse_stream("s.yaml", text, len, &docs, err), KD_ETOOBIG);
    assert_non_null(strstr(err, "alias *a of 1001 bytes used 16"));
    free(text);
    /* The small forms kept in the fuzzer's corpus fail the same way. */
    static const char *const corpus[] = {"tests/fuzz/corpus/config/string_alias_bomb.yaml",
                                         "tests/fuzz/corpus/config/string_laughs.yaml"};
    for (size_t i = 0; i < 2; i++) {
        struct kd_yaml_doc *d = NULL;
        assert_int_equal(kd_yaml_parse_file(corpus[i], &d, err), KD_ETOOBIG);
        assert_null(d);
        assert_non_null(strstr(err, "expands to more than 16777216 bytes (alias *"));
    }
    /* Under the budget, the same shape parses. */
    text = string_alias_bomb(1000, 1000, &len);
    struct kd_yaml_doc *doc = NULL;
    assert_int_equal(kd_yaml_parse("ok.yaml", text, len, &doc, err), 0);
    assert_int_equal(json_array_size(json_object_get(kd_yaml_root(doc), "l")), 1000);
    kd_yaml_free(doc);
    free(text);
}

/* Large inputs take linear time: many keys in one mapping, many anchors and aliases. */
static void test_linear_time(void **state)
{
    (void)state;
    size_t n = 250000;
    struct kd_buf b = KD_BUF_INIT(KD_YAML_MAX_INPUT);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(kd_buf_printf(&b, "k%zu: 1\n", i), 0);
    struct kd_yaml_doc *doc = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_yaml_parse("keys.yaml", kd_buf_str(&b), b.len, &doc, err), 0);
    assert_int_equal(json_object_size(kd_yaml_root(doc)), n);
    kd_yaml_free(doc);
    kd_buf_reset(&b);
    n = 100000;
    assert_int_equal(kd_buf_puts(&b, "a:\n"), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(kd_buf_printf(&b, "  - &a%zu %zu\n", i, i), 0);
    assert_int_equal(kd_buf_puts(&b, "b:\n"), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(kd_buf_printf(&b, "  - *a%zu\n", i % 7), 0);
    assert_int_equal(kd_yaml_parse("anchors.yaml", kd_buf_str(&b), b.len, &doc, err), 0);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(kd_yaml_root(doc), "b"), 9)),
                     2);
    kd_yaml_free(doc);
    kd_buf_free(&b);
}

static void test_stream(void **state)
{
    (void)state;
    FILE *f = fopen("tests/data/yaml/manifest.yaml", "r");
    assert_non_null(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof(text), f);
    fclose(f);
    json_t *docs = NULL;
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_yaml_parse_stream("manifest.yaml", text, n, &docs, err), 0);
    assert_int_equal(json_array_size(docs), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(docs, 2), "kind")),
                        "ClusterRole");
    json_decref(docs);

    const char *bad = "a: 1\n---\nb: [\n";
    assert_int_equal(kd_yaml_parse_stream("s.yaml", bad, strlen(bad), &docs, err), KD_EPARSE);
    assert_null(docs);
    assert_non_null(strstr(err, "s.yaml:4:"));
    const char *dup = "a: 1\n---\nb: 1\nb: 2\n";
    assert_int_equal(kd_yaml_parse_stream("s.yaml", dup, strlen(dup), &docs, err), KD_EPARSE);
    assert_non_null(strstr(err, "s.yaml:4:1: duplicate key"));
    assert_int_equal(kd_yaml_parse_stream("s.yaml", "", 0, &docs, err), 0);
    assert_int_equal(json_array_size(docs), 0);
    json_decref(docs);
}

/* emit, then parse: the JSON must be equal. */
static void roundtrip(const json_t *v, const char *what)
{
    struct kd_buf b = KD_BUF_INIT(16u << 20);
    char err[KD_ERRLEN] = "";
    int rc = kd_yaml_emit(v, &b);
    if (rc)
        fail_msg("%s: emit failed: %d", what, rc);
    struct kd_yaml_doc *doc = NULL;
    rc = kd_yaml_parse(what, kd_buf_str(&b), b.len, &doc, err);
    if (rc)
        fail_msg("%s: re-parse failed: %s\n----\n%s", what, err, kd_buf_str(&b));
    if (!json_equal(kd_yaml_root(doc), v)) {
        char *a = json_dumps(v, JSON_ENCODE_ANY),
             *c = json_dumps(kd_yaml_root(doc), JSON_ENCODE_ANY);
        fail_msg("%s: round trip changed the value\nwant %s\ngot  %s\nyaml:\n%s", what, a, c,
                 kd_buf_str(&b));
    }
    /* Types are kept exactly (json_equal treats 1 and 1.0 as different already). */
    kd_yaml_free(doc);
    kd_buf_free(&b);
}

static void test_emit_quoting(void **state)
{
    (void)state;
    const char *strs[] = {"true",
                          "false",
                          "True",
                          "null",
                          "Null",
                          "~",
                          "",
                          "yes",
                          "no",
                          "on",
                          "off",
                          "y",
                          "n",
                          "1",
                          "1.0",
                          "-1",
                          "+1",
                          "0x10",
                          "0o7",
                          "1e3",
                          ".5",
                          ".inf",
                          ".nan",
                          "-.inf",
                          "1_000",
                          "0b11",
                          "12:30",
                          "<<",
                          "=",
                          "- a",
                          "a: b",
                          "a #b",
                          "#c",
                          " lead",
                          "trail ",
                          "&a",
                          "*a",
                          "!a",
                          "%a",
                          "@a",
                          "`a",
                          "'a'",
                          "\"a\"",
                          "|a",
                          ">a",
                          "[a]",
                          "{a}",
                          "?",
                          "? a",
                          "-",
                          ":",
                          "a\nb",
                          "a\nb\n",
                          "a\n\nb\n\n",
                          "  indented\nnext",
                          "tab\there",
                          "ctl\001x",
                          "café ✓",
                          "ends with newline\n",
                          "\n",
                          "x\r\ny",
                          "trailing space \nline",
                          NULL};
    for (size_t i = 0; strs[i]; i++) {
        json_t *v = json_pack("{s:s}", "k", strs[i]);
        roundtrip(v, strs[i]);
        json_decref(v);
        /* The same text as a key. */
        v = json_object();
        json_object_set_new(v, strs[i], json_integer(1));
        roundtrip(v, strs[i]);
        json_decref(v);
    }
    /* Numbers keep their JSON type. */
    json_t *nums = json_pack("[i,i,f,f,f,f,f,f,b,b,n]", 0, -5, 1.0, 0.1, -0.0, 1e300, 2.5e-8,
                             123456789.125, 1, 0);
    json_array_append_new(nums, json_integer(INT64_MIN));
    json_array_append_new(nums, json_integer(INT64_MAX));
    roundtrip(nums, "numbers");
    json_decref(nums);
    /* A key too long for a simple key is written in the explicit "? key" form. */
    char longkey[300];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    json_t *lk = json_pack("{s:{s:i}}", longkey, "x", 1);
    roundtrip(lk, "long key");
    json_decref(lk);
    json_t *empty = json_pack("{s:{},s:[],s:[{},[]]}", "o", "a", "n");
    roundtrip(empty, "empties");
    json_decref(empty);
    json_t *scalar = json_string("top level");
    roundtrip(scalar, "scalar");
    json_decref(scalar);
    /* Keys in insertion order, block style. */
    json_t *o = json_pack("{s:i,s:i,s:i}", "zeta", 1, "alpha", 2, "mid", 3);
    struct kd_buf b = KD_BUF_INIT(1024);
    assert_int_equal(kd_yaml_emit(o, &b), 0);
    assert_string_equal(kd_buf_str(&b), "zeta: 1\nalpha: 2\nmid: 3\n");
    kd_buf_free(&b);
    json_decref(o);
    /* The output buffer's cap is honoured and the buffer is left as it was. */
    json_t *l = json_pack("{s:s}", "key", "a long enough value to pass a tiny cap");
    struct kd_buf small = KD_BUF_INIT(16);
    assert_int_equal(kd_yaml_emit(l, &small), KD_ETOOBIG);
    assert_int_equal(small.len, 0);
    kd_buf_free(&small);
    json_decref(l);
}

static void test_emit_literal_block(void **state)
{
    (void)state;
    json_t *r = json_pack("{s:f,s:f,s:f}", "a", 10.0, "b", 0.1, "c", 6.02e23);
    struct kd_buf rb = KD_BUF_INIT(1024);
    assert_int_equal(kd_yaml_emit(r, &rb), 0);
    assert_string_equal(kd_buf_str(&rb), "a: 10.0\nb: 0.1\nc: 6.02e+23\n");
    kd_buf_free(&rb);
    json_decref(r);

    json_t *v = json_pack("{s:s}", "script", "line one\nline two\n");
    struct kd_buf b = KD_BUF_INIT(1024);
    assert_int_equal(kd_yaml_emit(v, &b), 0);
    assert_string_equal(kd_buf_str(&b), "script: |\n  line one\n  line two\n");
    kd_buf_free(&b);
    json_decref(v);
}

/* Every YAML file under the test data round-trips. */
static void roundtrip_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[1024];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        size_t nl = strlen(e->d_name);
        if (nl > 5 && !strcmp(e->d_name + nl - 5, ".yaml")) {
            struct kd_yaml_doc *doc = NULL;
            char err[KD_ERRLEN];
            if (kd_yaml_parse_file(path, &doc, err) == 0) {
                roundtrip(kd_yaml_root(doc), path);
                (*count)++;
            } else if (!strcmp(dir, "tests/data/yaml")) {
                json_t *docs = NULL;
                FILE *f = fopen(path, "r");
                char text[65536];
                size_t n = f ? fread(text, 1, sizeof(text), f) : 0;
                if (f)
                    fclose(f);
                assert_int_equal(kd_yaml_parse_stream(path, text, n, &docs, err), 0);
                roundtrip(docs, path);
                json_decref(docs);
                (*count)++;
            }
            kd_yaml_free(doc);
        } else if (e->d_type == DT_DIR) {
            roundtrip_dir(path, count);
        }
    }
    closedir(d);
}

static void test_roundtrip_test_data(void **state)
{
    (void)state;
    int count = 0;
    roundtrip_dir("tests/data/yaml", &count);
    roundtrip_dir("tests/data/config", &count);
    assert_true(count >= 3);
    printf("round-tripped %d files\n", count);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_types),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_syntax_errors_name_position),
        cmocka_unit_test(test_encodings_and_line_endings),
        cmocka_unit_test(test_empty_and_scalar_documents),
        cmocka_unit_test(test_aliases_and_merge_keys),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_string_alias_bomb),
        cmocka_unit_test(test_linear_time),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_emit_quoting),
        cmocka_unit_test(test_emit_literal_block),
        cmocka_unit_test(test_roundtrip_test_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
