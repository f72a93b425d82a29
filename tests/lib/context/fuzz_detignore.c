/* libFuzzer target: the first line is a path, the rest .detignore text.
 * Parsing and matching must never crash or read out of bounds. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "context/context.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nl = memchr(text, '\n', size);
    size_t plen = nl ? (size_t)(nl - text) : size;
    char *path = malloc(plen + 1);
    struct kd_ignore *ig = NULL;
    char err[KD_ERRLEN];
    if (path == NULL)
        return 0;
    memcpy(path, text, plen);
    path[plen] = '\0';
    if (kd_ignore_parse("fuzz", nl ? nl + 1 : NULL, nl ? size - plen - 1 : 0, &ig, err) == 0) {
        (void)kd_ignore_match(ig, path, false);
        (void)kd_ignore_match(ig, path, true);
    }
    kd_ignore_free(ig);
    free(path);
    return 0;
}
