/*
 * libFuzzer target for the user API token parser (controller/api/
 * usertoken.c): any input parses or fails cleanly; what parses formats
 * back to exactly the input, with an id above 0 and a 43-character secret.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/usertoken.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), again[KD_UTOKEN_MAX + 1];
    int64_t id = 0;
    const char *secret = NULL;
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (kd_utoken_parse(s, &id, &secret) == 0) {
        if (id <= 0 || secret == NULL || strlen(secret) != KD_UTOKEN_SECRET_LEN ||
            kd_utoken_format(id, secret, again, sizeof(again)) != 0 || strcmp(again, s) != 0)
            abort();
    } else if (id != 0 || secret != NULL) {
        abort();
    }
    free(s);
    return 0;
}
