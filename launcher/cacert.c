/* The controller's CA on a libcurl handle, from the environment (see cacert.h). */
#include "cacert.h"

#include <stdlib.h>
#include <string.h>

/* A PEM CA bundle longer than this is ignored (the system's CAs are used). */
#define CA_MAX (1u << 20)

void kd_launch_ca(CURL *c)
{
    const char *pem = getenv("KDET_CONTROLLER_CA");
    const char *file = getenv("KDET_CONTROLLER_CA_FILE");
    if (pem != NULL && pem[0] != '\0' && strlen(pem) <= CA_MAX) {
        struct curl_blob blob = {(void *)pem, strlen(pem), CURL_BLOB_COPY};
        curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
    } else if (file != NULL && file[0] != '\0') {
        curl_easy_setopt(c, CURLOPT_CAINFO, file);
    }
}
