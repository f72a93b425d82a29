/*
 * Short-lived signed values that stand for a user token where a request
 * cannot carry one (a link opened in a browser tab or by its download
 * manager): "TOKEN.USER.UNTIL.MAC", an HMAC with the API's key over what
 * the value is for (a domain, a kind, the object it is bound to), the user
 * token that made it and its user, and until when. The value holds no
 * secret of the token; the request that uses it is checked against that
 * token as it is then (api_auth_session), so revoking the token ends it.
 * The task proxy's sign-in tickets and sessions, and download links.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/alloc.h"
#include "core/time.h"

static void sign(const struct kd_api *a, const struct api_ticket_for *f, int64_t token_id,
                 int64_t user_id, int64_t until, char *out)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char *msg = kd_xasprintf("%s\n%s\n%s\n%s\n%s\n%lld\n%lld\n%lld", f->domain, f->kind, f->ns,
                             f->name, f->uid != NULL ? f->uid : "", (long long)token_id,
                             (long long)user_id, (long long)until);
    HMAC(EVP_sha256(), a->key, (int)a->keylen, (const unsigned char *)msg, strlen(msg), mac, &n);
    api_b64url(mac, n, out);
    OPENSSL_cleanse(mac, sizeof(mac));
    free(msg);
}

void api_ticket_make(const struct kd_api *a, const struct api_ticket_for *f, int64_t token_id,
                     int64_t user_id, int64_t until, char *out, size_t len)
{
    char mac[64];
    sign(a, f, token_id, user_id, until, mac);
    snprintf(out, len, "%lld.%lld.%lld.%s", (long long)token_id, (long long)user_id,
             (long long)until, mac);
    OPENSSL_cleanse(mac, sizeof(mac));
}

bool api_ticket_check(const struct kd_api *a, const struct api_ticket_for *f, const char *value,
                      int64_t *token_id, int64_t *user_id)
{
    long long t, u, until;
    char mac[128], want[64];
    if (value == NULL || strlen(value) > 200 ||
        sscanf(value, "%lld.%lld.%lld.%100[A-Za-z0-9_-]", &t, &u, &until, mac) != 4)
        return false;
    if (until < kd_wall_ms() / 1000 || t < 0 || u < 0)
        return false;
    sign(a, f, t, u, until, want);
    bool ok = strlen(mac) == strlen(want) && CRYPTO_memcmp(mac, want, strlen(want)) == 0;
    OPENSSL_cleanse(want, sizeof(want));
    *token_id = t;
    *user_id = u;
    return ok;
}
