/*
 * Users and tokens against a real private PostgreSQL: create, duplicate
 * names, namespaces kept verbatim (injection-shaped ones too), updates,
 * the bootstrap administrator, token rows holding only the hash, revocation
 * and listings that never show a hash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fx.h"

#define HASH_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HASH_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

static void users(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    json_t *ns = json_pack("[ss]", "team-a", "'; DROP TABLE users; --");
    struct kd_store_user u = {"alice", false, ns};
    int64_t id = 0, id2 = 0;
    assert_int_equal(kd_store_user_create(s, &u, &id, err), 0);
    assert_true(id > 0);
    assert_int_equal(kd_store_user_create(s, &u, &id2, err), KD_EEXIST);
    assert_non_null(strstr(err, "alice"));
    json_t *got = NULL;
    assert_int_equal(kd_store_user_get(s, "alice", &got, err), 0);
    assert_true(json_equal(json_object_get(got, "namespaces"), ns));
    assert_true(json_is_false(json_object_get(got, "admin")));
    assert_int_equal(json_integer_value(json_object_get(got, "tokens")), 0);
    json_decref(got);
    assert_int_equal(kd_store_user_get(s, "nobody", &got, err), KD_ENOTFOUND);

    /* Update: only what is given changes. */
    bool admin = true;
    assert_int_equal(kd_store_user_update(s, "alice", &admin, NULL, err), 0);
    assert_int_equal(kd_store_user_get(s, "alice", &got, err), 0);
    assert_true(json_is_true(json_object_get(got, "admin")));
    assert_true(json_equal(json_object_get(got, "namespaces"), ns));
    json_decref(got);
    json_t *ns2 = json_pack("[s]", "team-b");
    assert_int_equal(kd_store_user_update(s, "alice", NULL, ns2, err), 0);
    assert_int_equal(kd_store_user_get(s, "alice", &got, err), 0);
    assert_true(json_equal(json_object_get(got, "namespaces"), ns2));
    assert_true(json_is_true(json_object_get(got, "admin")));
    json_decref(got);
    assert_int_equal(kd_store_user_update(s, "nobody", &admin, NULL, err), KD_ENOTFOUND);

    /* Bad input is named, never stored. */
    json_t *bad = json_pack("[i]", 3);
    struct kd_store_user b = {"bob", false, bad};
    assert_int_equal(kd_store_user_create(s, &b, NULL, err), KD_EINVAL);
    assert_non_null(strstr(err, "namespaces[0]"));
    struct kd_store_user noname = {"", false, NULL};
    assert_int_equal(kd_store_user_create(s, &noname, NULL, err), KD_EINVAL);

    /* The bootstrap administrator: made once, admin of every namespace. */
    int64_t a1 = 0, a2 = 0;
    assert_int_equal(kd_store_user_ensure_admin(s, "admin", &a1, err), 0);
    assert_int_equal(kd_store_user_ensure_admin(s, "admin", &a2, err), 0);
    assert_int_equal(a1, a2);
    assert_int_equal(kd_store_user_get(s, "admin", &got, err), 0);
    assert_string_equal(json_string_value(json_array_get(json_object_get(got, "namespaces"), 0)),
                        "*");
    json_decref(got);

    json_t *all = NULL;
    assert_int_equal(kd_store_users_list(s, &all, err), 0);
    assert_int_equal(json_array_size(all), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(all, 0), "name")),
                        "admin");
    json_decref(all);
    json_decref(ns);
    json_decref(ns2);
    json_decref(bad);
    kd_store_close(s);
}

static void tokens(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    json_t *ns = json_pack("[s]", "team-a");
    struct kd_store_user u = {"carol", false, ns};
    int64_t uid = 0, t1 = 0, t2 = 0;
    assert_int_equal(kd_store_user_create(s, &u, &uid, err), 0);
    assert_int_equal(kd_store_token_add(s, uid, HASH_A, "laptop", &t1, err), 0);
    assert_int_equal(kd_store_token_add(s, uid, HASH_B, NULL, &t2, err), 0);
    assert_true(t2 > t1);
    assert_int_equal(kd_store_token_add(s, uid + 100, HASH_A, "", NULL, err), KD_ENOTFOUND);
    assert_int_equal(kd_store_token_add(s, uid, "ABC", "", NULL, err), KD_EINVAL);
    assert_int_equal(kd_store_token_add(s, uid, HASH_A "00", "", NULL, err), KD_EINVAL);

    json_t *got = NULL;
    assert_int_equal(kd_store_token_get(s, t1, &got, err), 0);
    assert_string_equal(json_string_value(json_object_get(got, "sha256")), HASH_A);
    assert_true(json_is_false(json_object_get(got, "revoked")));
    json_t *user = json_object_get(got, "user");
    assert_string_equal(json_string_value(json_object_get(user, "name")), "carol");
    assert_true(json_equal(json_object_get(user, "namespaces"), ns));
    json_decref(got);
    assert_int_equal(kd_store_token_get(s, t2 + 1000, &got, err), KD_ENOTFOUND);

    /* Listings never carry the hash. */
    json_t *list = NULL;
    assert_int_equal(kd_store_tokens_list(s, "carol", &list, err), 0);
    assert_int_equal(json_array_size(list), 2);
    char *text = json_dumps(list, 0);
    assert_null(strstr(text, HASH_A));
    assert_null(strstr(text, "sha256"));
    free(text);
    json_decref(list);
    assert_int_equal(kd_store_tokens_list(s, "nobody", &list, err), 0);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);

    assert_int_equal(kd_store_token_revoke(s, t1, err), 0);
    assert_int_equal(kd_store_token_revoke(s, t1, err), 0);
    assert_int_equal(kd_store_token_revoke(s, t2 + 1000, err), KD_ENOTFOUND);
    assert_int_equal(kd_store_token_get(s, t1, &got, err), 0);
    assert_true(json_is_true(json_object_get(got, "revoked")));
    json_decref(got);
    assert_int_equal(kd_store_user_get(s, "carol", &got, err), 0);
    assert_int_equal(json_integer_value(json_object_get(got, "tokens")), 1);
    json_decref(got);

    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM user_tokens WHERE revoked_at IS NOT NULL"), 1);
    PQfinish(c);
    json_decref(ns);
    kd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(users),
        cmocka_unit_test(tokens),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
