/*
 * The registry against a real private PostgreSQL: experiments, trials,
 * checkpoints, searcher snapshots, events and templates, with
 * injection-shaped values stored verbatim and bad input named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/time.h"
#include "fx.h"

static const char *const NASTY[] = {
    "'; DROP TABLE experiments; --",
    "Robert'); DELETE FROM trials WHERE ('1'='1",
    "$1",
    "quote\" backslash\\ percent% underscore_",
    "ünïcødé ✓",
    "line\nbreak",
};
#define NNASTY (sizeof(NASTY) / sizeof(NASTY[0]))

static void experiments(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "", uid[64];
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t ids[NNASTY];
    for (size_t i = 0; i < NNASTY; i++) {
        json_t *cfg = json_pack("{sss{ss}}", "description", NASTY[i], "searcher", "name",
                                NASTY[(i + 1) % NNASTY]);
        snprintf(uid, sizeof(uid), "uid-%zu", i);
        struct kd_store_experiment e = {uid, i % 2 ? "team-a" : NASTY[i], NASTY[i], cfg, "ACTIVE"};
        assert_int_equal(kd_store_experiment_upsert(s, &e, &ids[i], err), 0);
        assert_true(ids[i] > 0);
        json_t *got = NULL;
        assert_int_equal(kd_store_experiment_get(s, ids[i], &got, err), 0);
        assert_string_equal(json_string_value(json_object_get(got, "name")), NASTY[i]);
        assert_string_equal(json_string_value(json_object_get(got, "uid")), uid);
        assert_true(json_equal(json_object_get(got, "config"), cfg));
        assert_true(json_is_null(json_object_get(got, "ended_at")));
        int64_t ms = 0;
        assert_int_equal(
            kd_time_parse_rfc3339(json_string_value(json_object_get(got, "created_at")), &ms), 0);
        assert_true(llabs(ms - kd_wall_ms()) < 60000);
        json_decref(got);
        json_decref(cfg);
    }
    /* Upsert by uid updates in place. */
    json_t *cfg2 = json_pack("{si}", "v", 2);
    struct kd_store_experiment e = {"uid-0", "ns", "renamed", cfg2, "PAUSED"};
    int64_t again = 0;
    assert_int_equal(kd_store_experiment_upsert(s, &e, &again, err), 0);
    assert_int_equal(again, ids[0]);
    json_decref(cfg2);
    /* Terminal states set ended_at; an unknown id is not found. */
    assert_int_equal(kd_store_experiment_set_state(s, ids[1], "COMPLETED", err), 0);
    json_t *got = NULL;
    assert_int_equal(kd_store_experiment_get(s, ids[1], &got, err), 0);
    assert_string_equal(json_string_value(json_object_get(got, "state")), "COMPLETED");
    assert_true(json_is_string(json_object_get(got, "ended_at")));
    json_decref(got);
    assert_int_equal(kd_store_experiment_set_state(s, 999999, "PAUSED", err), KD_ENOTFOUND);
    assert_int_equal(kd_store_experiment_get(s, 999999, &got, err), KD_ENOTFOUND);
    /* Lists: newest first, filtered by namespace, paged. */
    json_t *list = NULL;
    assert_int_equal(kd_store_experiments_list(s, NULL, 100, 0, &list, err), 0);
    assert_int_equal(json_array_size(list), NNASTY);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "id")),
                     ids[NNASTY - 1]);
    json_decref(list);
    assert_int_equal(kd_store_experiments_list(s, "team-a", 100, 0, &list, err), 0);
    assert_int_equal(json_array_size(list), NNASTY / 2);
    json_decref(list);
    assert_int_equal(kd_store_experiments_list(s, NASTY[0], 100, 0, &list, err), 0);
    assert_int_equal(json_array_size(list), 0); /* uid-0 moved to "ns" */
    json_decref(list);
    assert_int_equal(kd_store_experiments_list(s, NULL, 2, 1, &list, err), 0);
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "id")),
                     ids[NNASTY - 2]);
    json_decref(list);
    /* Bad input is named. */
    assert_int_equal(kd_store_experiments_list(s, NULL, 0, 0, &list, err), KD_EINVAL);
    assert_non_null(strstr(err, "limit"));
    struct kd_store_experiment bad = {"", "ns", "n", NULL, "ACTIVE"};
    assert_int_equal(kd_store_experiment_upsert(s, &bad, &again, err), KD_EINVAL);
    assert_non_null(strstr(err, "uid"));
    json_t *arr = json_array();
    bad = (struct kd_store_experiment){"u", "ns", "n", arr, "ACTIVE"};
    assert_int_equal(kd_store_experiment_upsert(s, &bad, &again, err), KD_EINVAL);
    assert_non_null(strstr(err, "config"));
    json_decref(arr);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM experiments"), NNASTY);
    PQfinish(c);
    kd_store_close(s);
}

static void trials(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0;
    int64_t t1 = fx_trial(s, "tr", &exp), t2 = 0;
    json_t *hp = json_pack("{sssf}", "opt", NASTY[0], "lr", 0.5);
    struct kd_store_trial t = {"trial-two", exp, NASTY[1], hp, 42, "ACTIVE"};
    assert_int_equal(kd_store_trial_upsert(s, &t, &t2, err), 0);
    assert_true(t2 > t1);
    int restarts = 0;
    assert_int_equal(kd_store_trial_add_restart(s, t2, &restarts, err), 0);
    assert_int_equal(kd_store_trial_add_restart(s, t2, &restarts, err), 0);
    assert_int_equal(restarts, 2);
    assert_int_equal(kd_store_trial_set_state(s, t2, "ERROR", err), 0);
    json_t *got = NULL;
    assert_int_equal(kd_store_trial_get(s, t2, &got, err), 0);
    assert_string_equal(json_string_value(json_object_get(got, "request_id")), NASTY[1]);
    assert_true(json_equal(json_object_get(got, "hparams"), hp));
    assert_int_equal(json_integer_value(json_object_get(got, "seed")), 42);
    assert_int_equal(json_integer_value(json_object_get(got, "restarts")), 2);
    assert_string_equal(json_string_value(json_object_get(got, "state")), "ERROR");
    assert_true(json_is_string(json_object_get(got, "ended_at")));
    json_decref(got);
    json_t *list = NULL;
    assert_int_equal(kd_store_trials_list(s, exp, &list, err), 0);
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "id")), t1);
    json_decref(list);
    /* Restarts set from the Trial's count; a lower (stale) count never lowers them. */
    assert_int_equal(kd_store_trial_set_restarts(s, t2, 5, err), 0);
    assert_int_equal(kd_store_trial_set_restarts(s, t2, 1, err), 0);
    assert_int_equal(kd_store_trial_upsert(s, &t, &t2, err), 0); /* an upsert keeps them too */
    assert_int_equal(kd_store_trial_get(s, t2, &got, err), 0);
    assert_int_equal(json_integer_value(json_object_get(got, "restarts")), 5);
    json_decref(got);
    assert_int_equal(kd_store_trial_set_restarts(s, t2, -1, err), KD_EINVAL);
    assert_non_null(strstr(err, "restarts"));
    assert_int_equal(kd_store_trial_set_restarts(s, 987654, 1, err), KD_ENOTFOUND);
    /* A trial of an unknown experiment. */
    t.uid = "orphan";
    t.experiment_id = exp + 100;
    assert_int_equal(kd_store_trial_upsert(s, &t, &t2, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "upsert trial"));
    assert_int_equal(kd_store_trial_add_restart(s, 987654, &restarts, err), KD_ENOTFOUND);
    json_decref(hp);
    kd_store_close(s);
}

static void checkpoints(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0;
    int64_t t1 = fx_trial(s, "ck", &exp), t2 = 0;
    struct kd_store_trial tt = {"trial-ck2", exp, "r2", NULL, 0, "ACTIVE"};
    assert_int_equal(kd_store_trial_upsert(s, &tt, &t2, err), 0);
    json_t *md = json_pack("{sssi}", "framework", NASTY[3], "files", 3);
    const struct kd_store_checkpoint cks[] = {
        {"c-300", t1, 300, "s3://bucket/exp/c-300", 1000, md},
        {"c-100", t1, 100, "s3://bucket/exp/c-100", 900, NULL},
        {"c-200", t2, 200, NASTY[0], 800, md},
    };
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(kd_store_checkpoint_add(s, &cks[i], err), 0);
    /* Registering again is a no-op; for another trial it is a conflict. */
    assert_int_equal(kd_store_checkpoint_add(s, &cks[0], err), 0);
    struct kd_store_checkpoint other = cks[0];
    other.trial_id = t2;
    assert_int_equal(kd_store_checkpoint_add(s, &other, err), KD_ECONFLICT);
    assert_non_null(strstr(err, "c-300"));
    other.trial_id = t1 + 999;
    other.uuid = "c-none";
    assert_int_equal(kd_store_checkpoint_add(s, &other, err), KD_ENOTFOUND);
    json_t *list = NULL;
    assert_int_equal(kd_store_checkpoints_list(s, exp, 0, false, &list, err), 0);
    assert_int_equal(json_array_size(list), 3);
    const char *order[] = {"c-100", "c-200", "c-300"};
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(list, i), "uuid")),
                            order[i]);
    json_t *c200 = json_array_get(list, 1);
    assert_string_equal(json_string_value(json_object_get(c200, "storage_path")), NASTY[0]);
    assert_true(json_equal(json_object_get(c200, "metadata"), md));
    assert_int_equal(json_integer_value(json_object_get(c200, "experiment_id")), exp);
    assert_int_equal(json_integer_value(json_object_get(c200, "size_bytes")), 800);
    json_decref(list);
    assert_int_equal(kd_store_checkpoints_list(s, 0, t1, false, &list, err), 0);
    assert_int_equal(json_array_size(list), 2);
    json_decref(list);
    /* GC: deleted ones drop out of the default list and stay on record. */
    assert_int_equal(kd_store_checkpoint_mark_deleted(s, "c-100", err), 0);
    assert_int_equal(kd_store_checkpoint_mark_deleted(s, "c-100", err), 0);
    assert_int_equal(kd_store_checkpoint_mark_deleted(s, "nope", err), KD_ENOTFOUND);
    assert_int_equal(kd_store_checkpoints_list(s, 0, t1, false, &list, err), 0);
    assert_int_equal(json_array_size(list), 1);
    json_decref(list);
    assert_int_equal(kd_store_checkpoints_list(s, 0, t1, true, &list, err), 0);
    assert_int_equal(json_array_size(list), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "state")),
                        "DELETED");
    assert_true(json_is_string(json_object_get(json_array_get(list, 0), "deleted_at")));
    json_decref(list);
    assert_int_equal(kd_store_checkpoints_list(s, 0, 0, false, &list, err), KD_EINVAL);
    json_decref(md);
    kd_store_close(s);
}

/* GC's record: DELETED and its event in one step, once, however often it is repeated. */
static void checkpoint_gc(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0, found = 0;
    int64_t t1 = fx_trial(s, "gc", &exp);
    bool marked = false;
    assert_int_equal(kd_store_experiment_lookup(s, "exp-gc", &found, err), 0);
    assert_int_equal(found, exp);
    assert_int_equal(kd_store_experiment_lookup(s, "exp-none", &found, err), KD_ENOTFOUND);
    assert_int_equal(kd_store_experiment_lookup(s, "", &found, err), KD_EINVAL);
    const struct kd_store_checkpoint ck = {"g-1", t1, 10, "/ck/g-1", 1, NULL};
    assert_int_equal(kd_store_checkpoint_add(s, &ck, err), 0);
    json_t *d = json_pack("{si}", "steps_completed", 10);
    assert_int_equal(kd_store_checkpoint_gc(s, "g-1", NASTY[1], d, &marked, err), 0);
    assert_true(marked);
    assert_int_equal(kd_store_checkpoint_gc(s, "g-1", "again", d, &marked, err), 0);
    assert_false(marked);
    assert_int_equal(kd_store_checkpoint_gc(s, "g-none", "x", NULL, &marked, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "g-none"));
    json_t *list = NULL;
    assert_int_equal(kd_store_checkpoints_list(s, exp, 0, true, &list, err), 0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "state")),
                        "DELETED");
    json_decref(list);
    assert_int_equal(kd_store_events_list(s, exp, 0, 100, &list, err), 0);
    assert_int_equal(json_array_size(list), 1);
    json_t *ev = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(ev, "kind")), "checkpoint_gc");
    assert_string_equal(json_string_value(json_object_get(ev, "decision")), "delete");
    assert_string_equal(json_string_value(json_object_get(ev, "reason")), NASTY[1]);
    assert_int_equal(json_integer_value(json_object_get(ev, "trial_id")), t1);
    json_t *det = json_object_get(ev, "details");
    assert_string_equal(json_string_value(json_object_get(det, "uuid")), "g-1");
    assert_int_equal(json_integer_value(json_object_get(det, "steps_completed")), 10);
    json_decref(list);
    json_decref(d);
    kd_store_close(s);
}

/* One checkpoint by uuid: found (also once DELETED), absent, of another namespace, malformed. */
static void checkpoint_get(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0;
    int64_t t1 = fx_trial(s, "get", &exp);
    json_t *md = json_pack("{ss}", "framework", NASTY[3]);
    const struct kd_store_checkpoint ck = {
        "6f1d0c1e-2a5b-4b8e-9a55-0a4c6e0b7c11", t1, 40, NASTY[0], 4096, md};
    assert_int_equal(kd_store_checkpoint_add(s, &ck, err), 0);
    json_t *got = NULL;
    assert_int_equal(kd_store_checkpoint_get(s, "default", ck.uuid, &got, err), 0);
    assert_string_equal(json_string_value(json_object_get(got, "uuid")), ck.uuid);
    assert_int_equal(json_integer_value(json_object_get(got, "trial_id")), t1);
    assert_string_equal(json_string_value(json_object_get(got, "trial_uid")), "trial-get");
    assert_int_equal(json_integer_value(json_object_get(got, "experiment_id")), exp);
    assert_string_equal(json_string_value(json_object_get(got, "experiment")), "exp-get");
    assert_string_equal(json_string_value(json_object_get(got, "experiment_uid")), "exp-get");
    assert_string_equal(json_string_value(json_object_get(got, "namespace")), "default");
    assert_int_equal(json_integer_value(json_object_get(got, "steps_completed")), 40);
    assert_string_equal(json_string_value(json_object_get(got, "storage_path")), NASTY[0]);
    assert_int_equal(json_integer_value(json_object_get(got, "size_bytes")), 4096);
    assert_true(json_equal(json_object_get(got, "metadata"), md));
    assert_string_equal(json_string_value(json_object_get(got, "state")), "ACTIVE");
    assert_true(json_is_string(json_object_get(got, "reported_at")));
    assert_true(json_is_null(json_object_get(got, "deleted_at")));
    json_decref(got);
    /* Any namespace. */
    assert_int_equal(kd_store_checkpoint_get(s, NULL, ck.uuid, &got, err), 0);
    json_decref(got);
    /* Not found: unknown, a prefix, another namespace. */
    assert_int_equal(kd_store_checkpoint_get(s, "default", "c-none", &got, err), KD_ENOTFOUND);
    assert_null(got);
    assert_non_null(strstr(err, "c-none"));
    assert_int_equal(kd_store_checkpoint_get(s, NULL, "6f1d0c1e", &got, err), KD_ENOTFOUND);
    assert_int_equal(kd_store_checkpoint_get(s, "team-b", ck.uuid, &got, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "team-b"));
    assert_null(got);
    /* Malformed: named, and nothing is sent to the server. */
    const char *bad[] = {"", ".hidden", "a/b", "x'; DROP TABLE checkpoints; --", "sp ace"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(kd_store_checkpoint_get(s, NULL, bad[i], &got, err), KD_EINVAL);
        assert_null(got);
        assert_true(strncmp(err, "uuid: ", 6) == 0);
    }
    char longu[KD_STORE_MAX_UUID + 2];
    memset(longu, 'a', sizeof(longu) - 1);
    longu[sizeof(longu) - 1] = '\0';
    assert_int_equal(kd_store_checkpoint_get(s, NULL, longu, &got, err), KD_EINVAL);
    assert_non_null(strstr(err, "at most"));
    longu[KD_STORE_MAX_UUID] = '\0'; /* the longest one is only not found */
    assert_int_equal(kd_store_checkpoint_get(s, NULL, longu, &got, err), KD_ENOTFOUND);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM checkpoints"), 1);
    PQfinish(c);
    /* A DELETED checkpoint is still described, with its state. */
    assert_int_equal(kd_store_checkpoint_mark_deleted(s, ck.uuid, err), 0);
    assert_int_equal(kd_store_checkpoint_get(s, "default", ck.uuid, &got, err), 0);
    assert_string_equal(json_string_value(json_object_get(got, "state")), "DELETED");
    assert_true(json_is_string(json_object_get(got, "deleted_at")));
    json_decref(got);
    json_decref(md);
    kd_store_close(s);
}

static void snapshots(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0, seq = -1;
    fx_trial(s, "snap", &exp);
    json_t *got = NULL;
    assert_int_equal(kd_store_snapshot_latest(s, exp, &seq, &got, err), KD_ENOTFOUND);
    for (int i = 1; i <= 8; i++) {
        json_t *snap = json_pack("{sis[i]ss}", "seq", i, "pending", i, "note", NASTY[i % NNASTY]);
        assert_int_equal(kd_store_snapshot_save(s, exp, i, snap, err), 0);
        json_decref(snap);
    }
    /* Saving the same sequence again replaces it (a retried save). */
    json_t *snap = json_pack("{sisb}", "seq", 8, "replaced", 1);
    assert_int_equal(kd_store_snapshot_save(s, exp, 8, snap, err), 0);
    assert_int_equal(kd_store_snapshot_latest(s, exp, &seq, &got, err), 0);
    assert_int_equal(seq, 8);
    assert_true(json_equal(got, snap));
    json_decref(got);
    json_decref(snap);
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM searcher_snapshots"), 5);
    assert_int_equal(fx_int(c, "SELECT min(seq) FROM searcher_snapshots"), 4);
    PQfinish(c);
    assert_int_equal(kd_store_snapshot_save(s, exp + 50, 1, got = json_object(), err),
                     KD_ENOTFOUND);
    json_decref(got);
    kd_store_close(s);
}

static void events(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    int64_t exp = 0, id = 0, first = 0;
    int64_t t = fx_trial(s, "ev", &exp);
    for (int i = 0; i < 12; i++) {
        json_t *d = json_pack("{sisf}", "rung", i % 3, "metric", 0.1 * i);
        struct kd_store_event e = {exp,
                                   i % 2 ? t : 0,
                                   i % 2 ? "early_stopping" : "searcher",
                                   i % 2 ? "stop" : "create",
                                   NASTY[i % NNASTY],
                                   d};
        assert_int_equal(kd_store_event_add(s, &e, &id, err), 0);
        if (i == 0)
            first = id;
        json_decref(d);
    }
    json_t *list = NULL;
    assert_int_equal(kd_store_events_list(s, exp, 0, 1000, &list, err), 0);
    assert_int_equal(json_array_size(list), 12);
    json_t *e1 = json_array_get(list, 1), *e0 = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(e1, "kind")), "early_stopping");
    assert_string_equal(json_string_value(json_object_get(e1, "decision")), "stop");
    assert_string_equal(json_string_value(json_object_get(e1, "reason")), NASTY[1]);
    assert_int_equal(json_integer_value(json_object_get(e1, "trial_id")), t);
    assert_true(json_is_null(json_object_get(e0, "trial_id")));
    assert_true(json_is_string(json_object_get(e0, "at")));
    json_decref(list);
    /* Polling: after an id, at most limit. */
    assert_int_equal(kd_store_events_list(s, exp, first + 5, 3, &list, err), 0);
    assert_int_equal(json_array_size(list), 3);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "id")), first + 6);
    json_decref(list);
    char big[5000];
    memset(big, 'r', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    struct kd_store_event e = {exp, 0, "searcher", "create", big, NULL};
    assert_int_equal(kd_store_event_add(s, &e, &id, err), KD_EINVAL);
    assert_non_null(strstr(err, "reason"));
    e.reason = "ok";
    e.kind = "";
    assert_int_equal(kd_store_event_add(s, &e, &id, err), KD_EINVAL);
    assert_non_null(strstr(err, "kind"));
    kd_store_close(s);
}

static void templates(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    for (size_t i = 0; i < NNASTY; i++) {
        json_t *cfg = json_pack("{s{ss}si}", "resources", "resource_pool", NASTY[i], "i", (int)i);
        assert_int_equal(kd_store_template_set(s, NASTY[i], cfg, err), 0);
        json_decref(cfg);
    }
    json_t *cfg = json_pack("{si}", "replaced", 1), *got = NULL;
    assert_int_equal(kd_store_template_set(s, NASTY[2], cfg, err), 0);
    assert_int_equal(kd_store_template_get(s, NASTY[2], &got, err), 0);
    assert_true(json_equal(json_object_get(got, "config"), cfg));
    assert_string_equal(json_string_value(json_object_get(got, "name")), NASTY[2]);
    json_decref(got);
    json_t *list = NULL;
    assert_int_equal(kd_store_templates_list(s, &list, err), 0);
    assert_int_equal(json_array_size(list), NNASTY);
    json_decref(list);
    assert_int_equal(kd_store_template_delete(s, NASTY[0], err), 0);
    assert_int_equal(kd_store_template_delete(s, NASTY[0], err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "not found"));
    assert_int_equal(kd_store_template_get(s, "absent", &got, err), KD_ENOTFOUND);
    assert_non_null(strstr(err, "template absent"));
    assert_int_equal(kd_store_template_set(s, "x", NULL, err), KD_EINVAL);
    assert_int_equal(kd_store_templates_list(s, &list, err), 0);
    assert_int_equal(json_array_size(list), NNASTY - 1);
    json_decref(list);
    json_decref(cfg);
    /* Every table is still there after all those names. */
    PGconn *c = fx_conn(ci);
    assert_int_equal(fx_int(c, "SELECT count(*) FROM pg_tables WHERE tablename IN"
                               " ('experiments', 'trials', 'templates', 'metrics')"),
                     4);
    PQfinish(c);
    kd_store_close(s);
}

/* Deleting an experiment removes everything hanging off it, and nothing else. */
static void delete_cascades(void **state)
{
    (void)state;
    char ci[512], err[KD_ERRLEN] = "";
    struct kd_store *s = fx_store(NULL, ci, sizeof(ci));
    assert_int_equal(kd_store_ping(s, err), 0);
    int64_t e1 = 0, e2 = 0;
    int64_t t1 = fx_trial(s, "del1", &e1), t2 = fx_trial(s, "del2", &e2);
    int64_t trials[2] = {t1, t2}, exps[2] = {e1, e2};
    for (int i = 0; i < 2; i++) {
        json_t *m = json_pack("{sf}", "loss", 0.1);
        struct kd_metric_row rows[1] = {{.step = 1, .reported_ms = 0, .metrics = m}};
        struct kd_metric_batch b = {trials[i], KD_METRIC_VALIDATION, "k", rows, 1};
        assert_int_equal(kd_store_metrics_put(s, &b, 10000, err), 0);
        char uuid[32];
        snprintf(uuid, sizeof(uuid), "ck-%d", i);
        struct kd_store_checkpoint c = {uuid, trials[i], 1, "/ckpt", 1, NULL};
        assert_int_equal(kd_store_checkpoint_add(s, &c, err), 0);
        struct kd_store_event ev = {exps[i], trials[i], "searcher", "create", "r", NULL};
        assert_int_equal(kd_store_event_add(s, &ev, NULL, err), 0);
        assert_int_equal(kd_store_snapshot_save(s, exps[i], 1, m, err), 0);
        json_decref(m);
    }
    assert_int_equal(kd_store_experiment_delete(s, e1, err), 0);
    assert_int_equal(kd_store_experiment_delete(s, e1, err), KD_ENOTFOUND);
    PGconn *c = fx_conn(ci);
    const char *tables[] = {"experiments", "trials", "metrics",           "metric_batches",
                            "checkpoints", "events", "searcher_snapshots"};
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        char q[96];
        snprintf(q, sizeof(q), "SELECT count(*) FROM %s", tables[i]);
        if (fx_int(c, q) != 1)
            fail_msg("%s: %lld rows left, want the other experiment's 1", tables[i], fx_int(c, q));
    }
    PQfinish(c);
    kd_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(experiments),     cmocka_unit_test(trials),
        cmocka_unit_test(checkpoints),     cmocka_unit_test(snapshots),
        cmocka_unit_test(events),          cmocka_unit_test(templates),
        cmocka_unit_test(delete_cascades), cmocka_unit_test(checkpoint_gc),
        cmocka_unit_test(checkpoint_get),
    };
    return cmocka_run_group_tests(tests, fx_group_setup, fx_group_teardown);
}
