/*
 * libFuzzer target for kdet-local's parsers of client input: the first byte
 * picks the protobuf decoder, the label or field selector parser, or the
 * three patch formats (input split at the first NUL into document and patch).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../local/patch.h"
#include "../../local/proto.h"
#include "../../local/selector.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        if (kd_proto_decode(data, size, &out, err) == 0)
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
        int rc = which == 1 ? kd_selector_parse_labels(s, &sel, err)
                            : kd_selector_parse_fields(s, fields, &sel, err);
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
            json_t *out = NULL;
            if (kd_patch_merge(doc, patch, &out, err) == 0)
                json_decref(out);
            out = NULL;
            if (kd_patch_json(doc, patch, &out, err) == 0)
                json_decref(out);
            out = NULL;
            if (kd_patch_strategic(doc, patch, "Pod", &out, err) == 0)
                json_decref(out);
        }
        json_decref(doc);
        json_decref(patch);
    }
    free(s);
    return 0;
}
