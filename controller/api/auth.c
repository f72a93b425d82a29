/*
 * Who calls the user API and where they may go: the bootstrap token (the
 * configured user token, whose user is the administrator "admin") or a
 * user token of the store ("kdet_<id>_<secret>", found by id, its secret's
 * SHA-256 compared in constant time), and the namespaces a user may use.
 * Every refusal says the same for an unknown, revoked or wrong token.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "api/usertoken.h"
#include "core/log.h"

bool api_ns_allowed(const struct api_principal *p, const char *ns)
{
    if (p == NULL || ns == NULL)
        return false;
    if (p->admin)
        return true;
    for (size_t i = 0; i < p->nns; i++)
        if (strcmp(p->namespaces[i], "*") == 0 || strcmp(p->namespaces[i], ns) == 0)
            return true;
    return false;
}

static int refuse(struct api_rq *q)
{
    api_error(q, 401, "Authorization", "a valid user token is required (Authorization: Bearer)");
    return KD_EUNAUTHORIZED;
}

/* The principal of a store token row {"user":{id,name,admin,namespaces}}, in the arena. */
static struct api_principal *from_row(struct api_rq *q, const json_t *row)
{
    const json_t *u = json_object_get(row, "user"), *ns = json_object_get(u, "namespaces");
    struct api_principal *p = kd_http_alloc(q->r, sizeof(*p));
    memset(p, 0, sizeof(*p));
    p->user_id = json_integer_value(json_object_get(u, "id"));
    p->token_id = json_integer_value(json_object_get(row, "id"));
    p->name = kd_http_strdup(q->r, json_string_value(json_object_get(u, "name")) ?: "");
    p->admin = json_is_true(json_object_get(u, "admin"));
    p->nns = json_array_size(ns);
    p->namespaces = kd_http_alloc(q->r, (p->nns ? p->nns : 1) * sizeof(*p->namespaces));
    for (size_t i = 0; i < p->nns; i++)
        p->namespaces[i] = kd_http_strdup(q->r, json_string_value(json_array_get(ns, i)) ?: "");
    return p;
}

int api_auth_user(struct api_rq *q, const struct api_principal **who)
{
    struct kd_api *a = q->api;
    const char *tok = api_bearer(kd_http_header(q->r, "Authorization"));
    char sha[KD_UTOKEN_HASH_HEX + 1], err[KD_ERRLEN] = "";
    const char *secret = NULL;
    json_t *row = NULL;
    int64_t id = 0;
    int rc = 0;
    *who = NULL;
    if (tok == NULL) {
        rc = refuse(q);
        goto out;
    }
    if (a->user_token_sha[0] != '\0') {
        kd_utoken_sha256_hex(tok, strlen(tok), sha);
        if (kd_utoken_hash_equal(sha, a->user_token_sha)) {
            struct api_principal *p = kd_http_alloc(q->r, sizeof(*p));
            memset(p, 0, sizeof(*p));
            p->user_id = a->admin_id;
            p->name = API_BOOTSTRAP_ADMIN;
            p->admin = true;
            *who = p;
            goto out;
        }
    }
    if (kd_utoken_parse(tok, &id, &secret) != 0) {
        rc = refuse(q);
        goto out;
    }
    rc = kd_store_token_get(a->o.store, id, &row, err);
    if (rc == KD_ENOTFOUND) {
        rc = refuse(q);
        goto out;
    }
    if (rc != 0) {
        /* The store's message names the statement, never the token. */
        api_error(q, 503, NULL, "cannot check the user token now: %s", err);
        goto out;
    }
    kd_utoken_sha256_hex(secret, strlen(secret), sha);
    bool match = kd_utoken_hash_equal(sha, json_string_value(json_object_get(row, "sha256")) ?: "");
    if (!match || json_is_true(json_object_get(row, "revoked"))) {
        rc = refuse(q);
        goto out;
    }
    *who = from_row(q, row);
out:
    OPENSSL_cleanse(sha, sizeof(sha));
    json_decref(row);
    return rc;
}

int api_auth_session(struct api_rq *q, int64_t token_id, int64_t user_id,
                     const struct api_principal **who)
{
    struct kd_api *a = q->api;
    char err[KD_ERRLEN] = "";
    json_t *row = NULL;
    int rc = KD_EUNAUTHORIZED;
    *who = NULL;
    if (token_id == 0) {
        /* The bootstrap token's session: while that token is configured. */
        if (a->user_token_sha[0] != '\0' && user_id == a->admin_id) {
            struct api_principal *p = kd_http_alloc(q->r, sizeof(*p));
            memset(p, 0, sizeof(*p));
            p->user_id = a->admin_id;
            p->name = API_BOOTSTRAP_ADMIN;
            p->admin = true;
            *who = p;
            rc = 0;
        }
        goto out;
    }
    rc = kd_store_token_get(a->o.store, token_id, &row, err);
    if (rc == KD_ENOTFOUND) {
        rc = KD_EUNAUTHORIZED;
        goto out;
    }
    if (rc != 0) {
        rc = KD_EAGAIN;
        goto out;
    }
    const json_t *u = json_object_get(row, "user");
    if (json_is_true(json_object_get(row, "revoked")) ||
        json_integer_value(json_object_get(u, "id")) != user_id) {
        rc = KD_EUNAUTHORIZED;
        goto out;
    }
    *who = from_row(q, row);
    rc = 0;
out:
    json_decref(row);
    return rc;
}
