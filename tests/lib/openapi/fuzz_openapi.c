/* libFuzzer target: a JSON array [schema, instance]. Validation, the
 * unknown-field walk, the structural check and the causes' rendering must
 * never crash, whatever the schema says. */
#include <stdint.h>
#include <stdlib.h>

#include "openapi/openapi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *in = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    json_t *causes = NULL, *unknown = NULL;
    char err[KD_ERRLEN];
    if (in == NULL)
        return 0;
    json_t *schema = json_array_get(in, 0), *inst = json_array_get(in, 1);
    if (schema && inst) {
        if (kd_openapi_validate(schema, inst, "spec", &causes) == KD_EINVALID)
            free(kd_openapi_causes_str(causes));
        if (kd_openapi_unknown_fields(schema, inst, "", &unknown) == 0)
            json_decref(unknown);
        err[0] = '\0';
        /* A schema refused as not structural always says why. */
        if (kd_openapi_check_structural(schema, NULL, err) != 0 && err[0] == '\0')
            abort();
    }
    json_decref(causes);
    json_decref(in);
    return 0;
}
