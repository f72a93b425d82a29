/*
 * Users and tokens over the API: who am I, the users (administrators make
 * and change them), and tokens (anyone makes and revokes their own;
 * administrators anyone's). A new token's text is in the answer that made
 * it and nowhere else: the store keeps its hash, the log its id.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "api/usertoken.h"
#include "core/log.h"
#include "core/str.h"

static json_t *principal_json(const struct api_principal *p)
{
    json_t *ns = json_array();
    if (p->admin && p->token_id == 0)
        json_array_append_new(ns, json_string("*"));
    for (size_t i = 0; i < p->nns; i++)
        json_array_append_new(ns, json_string(p->namespaces[i]));
    return json_pack("{s:s,s:b,s:o,s:b,s:I}", "name", p->name, "admin", p->admin, "namespaces", ns,
                     "bootstrap", p->token_id == 0, "token_id", (json_int_t)p->token_id);
}

void api_me(struct api_rq *q)
{
    api_json(q, 200, json_pack("{s:o}", "user", principal_json(q->who)));
}

void api_users_list(struct api_rq *q)
{
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    int rc = kd_store_users_list(q->api->o.store, &out, err);
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    else
        api_json(q, 200, json_pack("{s:o}", "users", out));
}

/*
 * Make a token of user_id (named user) and answer {"token","id","user"}
 * with `status`, plus `extra` (stolen) as "user_info" when given.
 */
static void issue(struct api_rq *q, int64_t user_id, const char *user, const char *description,
                  int status, json_t *extra)
{
    char secret[KD_UTOKEN_SECRET_LEN + 1], sha[KD_UTOKEN_HASH_HEX + 1], tok[KD_UTOKEN_MAX + 1];
    char err[KD_ERRLEN] = "";
    int64_t id = 0;
    int rc = kd_utoken_secret(secret);
    if (rc != 0) {
        api_error(q, 500, NULL, "cannot make a token: no random bytes");
        goto out;
    }
    kd_utoken_sha256_hex(secret, strlen(secret), sha);
    if ((rc = kd_store_token_add(q->api->o.store, user_id, sha, description, &id, err)) != 0 ||
        (rc = kd_utoken_format(id, secret, tok, sizeof(tok))) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("user token created", "token_id=%lld user=%s by=%s", (long long)id, kd_logq(user),
            kd_logq(q->who->name));
    json_t *ans = json_pack("{s:s,s:I,s:s}", "token", tok, "id", (json_int_t)id, "user", user);
    if (extra != NULL) {
        json_object_set_new(ans, "user_info", extra);
        extra = NULL;
    }
    api_json(q, status, ans);
out:
    json_decref(extra);
    OPENSSL_cleanse(secret, sizeof(secret));
    OPENSSL_cleanse(tok, sizeof(tok));
}

/* POST /api/v1/users {name, admin?, namespaces?, description?}: the user and its first token. */
void api_users_create(struct api_rq *q)
{
    json_t *body = NULL, *row = NULL;
    char err[KD_ERRLEN] = "";
    struct api_user_req ur;
    struct api_verr e;
    int64_t id = 0;
    if (api_body(q, KD_API_MAX_SMALL_BODY, &body) != 0)
        goto out;
    if (api_check_user(body, true, &ur, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    const char *name = ur.name;
    bool admin = ur.admin;
    struct kd_store_user u = {.name = name, .admin = admin, .namespaces = ur.namespaces};
    int rc = kd_store_user_create(q->api->o.store, &u, &id, err);
    if (rc == 0)
        rc = kd_store_user_get(q->api->o.store, name, &row, err);
    if (rc != 0) {
        api_fail(q, rc, "name", err);
        goto out;
    }
    KD_INFO("user created", "user=%s admin=%s by=%s", kd_logq(name), admin ? "true" : "false",
            kd_logq(q->who->name));
    issue(q, id, name, ur.description ?: "first token", 201, row);
    row = NULL;
out:
    json_decref(row);
    json_decref(body);
}

/* PATCH /api/v1/users/{name} {admin?, namespaces?}. */
void api_users_update(struct api_rq *q)
{
    json_t *body = NULL, *row = NULL;
    char err[KD_ERRLEN] = "";
    struct api_user_req ur;
    struct api_verr e;
    const char *name = q->seg[3];
    if (api_body(q, KD_API_MAX_SMALL_BODY, &body) != 0)
        goto out;
    if (api_check_user(body, false, &ur, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    int rc = kd_store_user_update(q->api->o.store, name, ur.admin_set ? &ur.admin : NULL,
                                  ur.namespaces, err);
    if (rc == 0)
        rc = kd_store_user_get(q->api->o.store, name, &row, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("user changed", "user=%s by=%s", kd_logq(name), kd_logq(q->who->name));
    api_json(q, 200, json_pack("{s:o}", "user", row));
    row = NULL;
out:
    json_decref(row);
    json_decref(body);
}

/* GET /api/v1/tokens[?user=NAME]: one's own; an administrator's: anyone's (all without user). */
void api_tokens_list(struct api_rq *q)
{
    const char *user = kd_http_query(q->r, "user");
    json_t *out = NULL;
    char err[KD_ERRLEN] = "";
    if (!q->who->admin && user != NULL && strcmp(user, q->who->name) != 0) {
        api_error(q, 403, "user", "only an administrator may list the tokens of another user");
        return;
    }
    if (!q->who->admin)
        user = q->who->name;
    int rc = kd_store_tokens_list(q->api->o.store, user, &out, err);
    if (rc != 0)
        api_fail(q, rc, NULL, err);
    else
        api_json(q, 200, json_pack("{s:o}", "tokens", out));
}

/* POST /api/v1/tokens {user?, description?}: a new token, for oneself or (an administrator) anyone.
 */
void api_tokens_create(struct api_rq *q)
{
    json_t *body = NULL, *row = NULL;
    char err[KD_ERRLEN] = "";
    const char *ju = NULL, *desc = NULL;
    struct api_verr e;
    if (api_body(q, KD_API_MAX_SMALL_BODY, &body) != 0)
        goto out;
    if (api_check_token(body, &ju, &desc, &e) != 0) {
        api_refuse(q, &e);
        goto out;
    }
    const char *user = ju ?: q->who->name;
    int64_t uid = q->who->user_id;
    if (strcmp(user, q->who->name) != 0) {
        if (!q->who->admin) {
            api_error(q, 403, "user", "only an administrator may make tokens for another user");
            goto out;
        }
        int rc = kd_store_user_get(q->api->o.store, user, &row, err);
        if (rc != 0) {
            api_fail(q, rc, "user", err);
            goto out;
        }
        uid = json_integer_value(json_object_get(row, "id"));
    }
    issue(q, uid, user, desc ?: "", 201, NULL);
out:
    json_decref(row);
    json_decref(body);
}

/* POST /api/v1/tokens/{id}/revoke: one's own token, or (an administrator) anyone's. */
void api_tokens_revoke(struct api_rq *q)
{
    json_t *row = NULL;
    char err[KD_ERRLEN] = "";
    int64_t id = 0;
    if (kd_parse_i64(q->seg[3], &id) != 0 || id <= 0) {
        api_error(q, 400, "id", "token id %s: must be a positive integer", kd_logq(q->seg[3]));
        goto out;
    }
    int rc = kd_store_token_get(q->api->o.store, id, &row, err);
    if (rc != 0) {
        api_fail(q, rc, NULL, rc == KD_ENOTFOUND ? "no such token" : err);
        goto out;
    }
    const char *owner =
        json_string_value(json_object_get(json_object_get(row, "user"), "name")) ?: "";
    if (!q->who->admin && strcmp(owner, q->who->name) != 0) {
        api_error(q, 403, NULL, "token %lld is not yours: only an administrator may revoke it",
                  (long long)id);
        goto out;
    }
    if ((rc = kd_store_token_revoke(q->api->o.store, id, err)) != 0) {
        api_fail(q, rc, NULL, err);
        goto out;
    }
    KD_INFO("user token revoked", "token_id=%lld user=%s by=%s", (long long)id, kd_logq(owner),
            kd_logq(q->who->name));
    api_json(q, 200, json_pack("{s:I,s:s,s:b}", "id", (json_int_t)id, "user", owner, "revoked", 1));
out:
    json_decref(row);
}
