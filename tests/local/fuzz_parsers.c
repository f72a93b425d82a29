/*
 * libFuzzer target for kdet-local's parsers of client input: the first byte
 * picks the protobuf decoder, the label or field selector parser, or the
 * three patch formats (input split at the first NUL into document and patch).
 * Checked besides "no crash, no leak": no patch format changes its inputs;
 * a JSON merge patch applied twice gives what it gave once (RFC 7386); a
 * failed patch or parse says why; a decoded protobuf body is an object that
 * JSON can carry.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../local/patch.h"
#include "../../local/proto.h"
#include "../../local/selector.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_local_parsers: " __VA_ARGS__);                                       \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* A failure says why; a success leaves a new value. */
static void check_result(const char *what, int rc, const json_t *out, const char *err)
{
    if (rc != 0 && (out != NULL || err[0] == '\0'))
        FAIL("%s failed (%d) %s", what, rc, out != NULL ? "with a result" : "without a reason");
    if (rc == 0 && out == NULL)
        FAIL("%s succeeded without a result", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char err[KD_ERRLEN];
    uint8_t which = data[0] % 4;
    data++;
    size--;
    if (which == 0) {
        json_t *out = NULL;
        err[0] = '\0';
        int rc = kd_proto_decode(data, size, &out, err);
        check_result("protobuf", rc, out, err);
        if (rc == 0) {
            char *text = json_dumps(out, JSON_COMPACT);
            json_t *again = text != NULL ? json_loads(text, 0, NULL) : NULL;
            if (!json_is_object(out) || !json_equal(again, out))
                FAIL("a decoded protobuf body is not a JSON object that reads back");
            json_decref(again);
            free(text);
        }
        json_decref(out);
        return 0;
    }
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (which == 1 || which == 2) {
        static const char *const fields[] = {"status.phase", "spec.nodeName", NULL};
        struct kd_selector *sel = NULL;
        err[0] = '\0';
        int rc = which == 1 ? kd_selector_parse_labels(s, &sel, err)
                            : kd_selector_parse_fields(s, fields, &sel, err);
        if (rc != 0 && err[0] == '\0')
            FAIL("a selector refused without a reason");
        if (rc == 0) {
            json_t *o = json_pack("{s:{s:s,s:{s:s}},s:{s:s}}", "metadata", "name", "x", "labels",
                                  "app", "web", "status", "phase", "Running");
            (void)kd_selector_match(sel, o);
            json_decref(o);
        }
        kd_selector_free(sel);
    } else {
        size_t n = strlen(s);
        json_t *doc = json_loads(s, 0, NULL);
        json_t *patch =
            n < size ? json_loadb((const char *)data + n + 1, size - n - 1, 0, NULL) : NULL;
        if (doc != NULL && patch != NULL) {
            json_t *doc0 = json_deep_copy(doc), *patch0 = json_deep_copy(patch);
            json_t *out = NULL, *twice = NULL;
            err[0] = '\0';
            int rc = kd_patch_merge(doc, patch, &out, err);
            check_result("merge patch", rc, out, err);
            if (rc == 0) {
                err[0] = '\0';
                int rc2 = kd_patch_merge(out, patch, &twice, err);
                if (rc2 != 0 || !json_equal(twice, out))
                    FAIL("a merge patch applied twice gives another result (%d: %s)", rc2, err);
                json_decref(twice);
            }
            json_decref(out);
            out = NULL;
            err[0] = '\0';
            rc = kd_patch_json(doc, patch, &out, err);
            check_result("JSON patch", rc, out, err);
            json_decref(out);
            out = NULL;
            err[0] = '\0';
            rc = kd_patch_strategic(doc, patch, "Pod", &out, err);
            check_result("strategic merge patch", rc, out, err);
            json_decref(out);
            if (!json_equal(doc, doc0) || !json_equal(patch, patch0))
                FAIL("a patch changed its document or patch");
            json_decref(doc0);
            json_decref(patch0);
        }
        json_decref(doc);
        json_decref(patch);
    }
    free(s);
    return 0;
}
