/*
 * Users and their tokens: who may use the controller's user API and in
 * which namespaces. A token is kept only as the SHA-256 of its text; the
 * API finds the row by the id the token carries and compares the hash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "store/store_int.h"

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define USER_COLS                                                                                  \
    "u.id, u.name, u.admin, to_json(u.namespaces) AS namespaces, " TS("u.created_at") " AS "       \
                                                                                      "created_at"
#define LIVE_TOKENS                                                                                \
    "(SELECT count(*) FROM user_tokens t WHERE t.user_id = u.id AND t.revoked_at IS NULL) AS "     \
    "tokens"

static int check_name(const char *v, char *err)
{
    if (v == NULL || v[0] == '\0')
        return kd_seterr(err, KD_EINVAL, "name: required");
    if (strlen(v) > KD_STORE_MAX_USER)
        return kd_seterr(err, KD_EINVAL, "name: %zu bytes, at most %d", strlen(v),
                         KD_STORE_MAX_USER);
    return 0;
}

/* The namespaces as JSON text (an array of strings; NULL: "[]"). Caller frees. */
static int ns_arg(const json_t *ns, char **out, char *err)
{
    size_t i;
    json_t *v;
    *out = NULL;
    if (ns == NULL) {
        *out = kd_xstrdup("[]");
        return 0;
    }
    if (!json_is_array(ns))
        return kd_seterr(err, KD_EINVAL, "namespaces: must be an array of strings");
    json_array_foreach(ns, i, v)
    {
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > KD_STORE_MAX_NAME)
            return kd_seterr(err, KD_EINVAL, "namespaces[%zu]: must be a name of 1 to %d bytes", i,
                             KD_STORE_MAX_NAME);
    }
    *out = json_dumps(ns, JSON_COMPACT);
    return *out != NULL ? 0 : kd_seterr(err, KD_ENOMEM, "namespaces: cannot serialise");
}

static int one_id(struct kd_store *s, const char *what, const char *sql, int n,
                  const char *const *p, bool retry, int64_t *id, char *err)
{
    PGresult *r = NULL;
    int rc = kd_store__exec(s, what, sql, n, p, retry, &r, err);
    if (rc == 0 && PQntuples(r) != 1)
        rc = kd_seterr(err, KD_ENOTFOUND, "%s: not found", what);
    if (rc == 0 && id != NULL && kd_parse_i64(PQgetvalue(r, 0, 0), id) != 0)
        rc = kd_seterr(err, KD_EPROTO, "%s: bad id", what);
    PQclear(r);
    return rc;
}

int kd_store_user_create(struct kd_store *s, const struct kd_store_user *u, int64_t *id, char *err)
{
    char *ns = NULL;
    int rc;
    if ((rc = check_name(u->name, err)) != 0 || (rc = ns_arg(u->namespaces, &ns, err)) != 0)
        goto out;
    const char *p[3] = {u->name, u->admin ? "true" : "false", ns};
    /* Not retried: a lost answer to a create that went through would turn into KD_EEXIST. */
    rc = one_id(s, "create user",
                "INSERT INTO users (name, admin, namespaces) VALUES ($1, $2::boolean,"
                " ARRAY(SELECT json_array_elements_text($3::json))) RETURNING id",
                3, p, false, id, err);
    if (rc == KD_EEXIST)
        rc = kd_seterr(err, rc, "user %s already exists", u->name);
out:
    free(ns);
    return rc;
}

int kd_store_user_ensure_admin(struct kd_store *s, const char *name, int64_t *id, char *err)
{
    int rc = check_name(name, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {name};
    return one_id(s, "ensure administrator",
                  "INSERT INTO users (name, admin, namespaces) VALUES ($1, true, '{*}')"
                  " ON CONFLICT (name) DO UPDATE SET admin = true, updated_at = now()"
                  " RETURNING id",
                  1, p, true, id, err);
}

int kd_store_user_update(struct kd_store *s, const char *name, const bool *admin,
                         const json_t *namespaces, char *err)
{
    char *ns = NULL;
    int rc;
    if ((rc = check_name(name, err)) != 0)
        goto out;
    if (namespaces != NULL && (rc = ns_arg(namespaces, &ns, err)) != 0)
        goto out;
    const char *p[3] = {name, admin == NULL ? NULL : *admin ? "true" : "false", ns};
    rc = one_id(s, "update user",
                "UPDATE users SET admin = coalesce($2::boolean, admin),"
                " namespaces = CASE WHEN $3::json IS NULL THEN namespaces"
                " ELSE ARRAY(SELECT json_array_elements_text($3::json)) END,"
                " updated_at = now() WHERE name = $1 RETURNING id",
                3, p, true, NULL, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "user %s: not found", name);
out:
    free(ns);
    return rc;
}

int kd_store_user_get(struct kd_store *s, const char *name, json_t **out, char *err)
{
    *out = NULL;
    int rc = check_name(name, err);
    if (rc != 0)
        return rc;
    const char *p[1] = {name};
    rc = kd_store__json(s, "user",
                        "SELECT row_to_json(x) FROM (SELECT " USER_COLS ", " LIVE_TOKENS
                        " FROM users u WHERE u.name = $1) x",
                        1, p, out, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "user %s: not found", name);
    return rc;
}

int kd_store_users_list(struct kd_store *s, json_t **out, char *err)
{
    *out = NULL;
    return kd_store__json(
        s, "list users",
        "SELECT coalesce(json_agg(x ORDER BY x.name), '[]') FROM (SELECT " USER_COLS
        ", " LIVE_TOKENS " FROM users u) x",
        0, NULL, out, err);
}

int kd_store_token_add(struct kd_store *s, int64_t user_id, const char *sha256_hex,
                       const char *description, int64_t *id, char *err)
{
    char b[24];
    if (user_id <= 0)
        return kd_seterr(err, KD_EINVAL, "user_id: %lld is not an id", (long long)user_id);
    if (sha256_hex == NULL || strlen(sha256_hex) != 64 ||
        strspn(sha256_hex, "0123456789abcdef") != 64)
        return kd_seterr(err, KD_EINVAL, "sha256: must be 64 lower-case hex digits");
    if (description != NULL && strlen(description) > KD_STORE_MAX_DESCRIPTION)
        return kd_seterr(err, KD_EINVAL, "description: %zu bytes, at most %d", strlen(description),
                         KD_STORE_MAX_DESCRIPTION);
    snprintf(b, sizeof(b), "%lld", (long long)user_id);
    const char *p[3] = {b, sha256_hex, description != NULL ? description : ""};
    int rc = one_id(s, "add token",
                    "INSERT INTO user_tokens (user_id, sha256, description)"
                    " VALUES ($1::bigint, $2, $3) RETURNING id",
                    3, p, false, id, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "user id %lld: not found", (long long)user_id);
    return rc;
}

int kd_store_token_get(struct kd_store *s, int64_t id, json_t **out, char *err)
{
    char b[24];
    *out = NULL;
    snprintf(b, sizeof(b), "%lld", (long long)id);
    const char *p[1] = {b};
    return kd_store__json(
        s, "token",
        "SELECT json_build_object('id', t.id, 'sha256', t.sha256, 'revoked',"
        " t.revoked_at IS NOT NULL, 'user', json_build_object('id', u.id, 'name', u.name,"
        " 'admin', u.admin, 'namespaces', to_json(u.namespaces)))"
        " FROM user_tokens t JOIN users u ON u.id = t.user_id WHERE t.id = $1::bigint",
        1, p, out, err);
}

int kd_store_tokens_list(struct kd_store *s, const char *user, json_t **out, char *err)
{
    *out = NULL;
    const char *p[1] = {user};
    return kd_store__json(
        s, "list tokens",
        "SELECT coalesce(json_agg(x ORDER BY x.id DESC), '[]') FROM (SELECT"
        " t.id, u.name AS user, t.description, " TS(
            "t.created_at") " AS "
                            "created_at, " TS(
                                "t.revoked_at") " AS revoked_at"
                                                " FROM user_tokens t JOIN users u ON u.id = "
                                                "t.user_id"
                                                " WHERE $1::text IS NULL OR u.name = $1) x",
        1, p, out, err);
}

int kd_store_token_revoke(struct kd_store *s, int64_t id, char *err)
{
    char b[24];
    snprintf(b, sizeof(b), "%lld", (long long)id);
    const char *p[1] = {b};
    int rc = one_id(s, "revoke token",
                    "UPDATE user_tokens SET revoked_at = coalesce(revoked_at, now())"
                    " WHERE id = $1::bigint RETURNING id",
                    1, p, true, NULL, err);
    if (rc == KD_ENOTFOUND)
        rc = kd_seterr(err, rc, "token %lld: not found", (long long)id);
    return rc;
}
