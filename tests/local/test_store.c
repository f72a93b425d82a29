/*
 * The object store: resourceVersions, events for watches, journal replay
 * (including a torn last record and a damaged one), compaction, and the
 * watch history floor that turns into 410 Gone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../local/store.h"
#include "core/alloc.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kd-store-test.XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char *p = kd_xasprintf("%s/journal", dir);
    unlink(p);
    free(p);
    p = kd_xasprintf("%s/journal.tmp", dir);
    unlink(p);
    free(p);
    rmdir(dir);
    return 0;
}

static json_t *cm(const char *name, const char *val)
{
    return json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                     "metadata", "name", name, "namespace", "default", "data", "v", val);
}

static const char *rv_str(const json_t *o)
{
    return json_string_value(json_object_get(json_object_get(o, "metadata"), "resourceVersion"));
}

static struct kd_store *open_store(size_t ring, size_t compact)
{
    struct kd_store_opts o = {.data_dir = dir, .ring_events = ring, .compact_min_bytes = compact};
    struct kd_store *st = NULL;
    char err[KD_ERRLEN] = "";
    int rc = kd_local_store_open(&o, &st, err);
    if (rc != 0)
        fail_msg("open: %s", err);
    return st;
}

static void test_rv_and_events(void **state)
{
    (void)state;
    struct kd_store *st = open_store(0, 0);
    kd_store_lock(st);
    json_t *stored = NULL;
    assert_int_equal(kd_store_put(st, "/configmaps", "default", "a", cm("a", "1"), &stored), 0);
    assert_string_equal(rv_str(stored), "1");
    assert_int_equal(kd_store_put(st, "/configmaps", "default", "b", cm("b", "1"), NULL), 0);
    assert_int_equal(kd_store_put(st, "/configmaps", "default", "a", cm("a", "2"), &stored), 0);
    assert_string_equal(rv_str(stored), "3");
    json_t *gone = NULL;
    assert_int_equal(kd_store_delete(st, "/configmaps", "default", "b", &gone), 0);
    assert_string_equal(rv_str(gone), "4"); /* DELETED carries a new resourceVersion */
    json_decref(gone);
    assert_int_equal(kd_store_delete(st, "/configmaps", "default", "b", NULL), KD_ENOTFOUND);
    assert_null(kd_store_get(st, "/configmaps", "default", "b"));
    /* Events in order with their types. */
    const struct kd_event *ev;
    enum kd_evtype want[] = {KD_EV_ADDED, KD_EV_ADDED, KD_EV_MODIFIED, KD_EV_DELETED};
    uint64_t rv = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kd_store_next_event(st, rv, &ev, NULL), 0);
        assert_int_equal(ev->rv, rv + 1);
        assert_int_equal(ev->type, want[i]);
        rv = ev->rv;
    }
    assert_int_equal(kd_store_next_event(st, rv, &ev, NULL), KD_EAGAIN);
    json_t **items = NULL;
    assert_int_equal(kd_store_list(st, "/configmaps", "default", &items), 1);
    free(items);
    kd_store_unlock(st);
    kd_local_store_close(st);
}

static void test_replay_and_torn_tail(void **state)
{
    (void)state;
    struct kd_store *st = open_store(0, 0);
    kd_store_lock(st);
    for (int i = 0; i < 50; i++) {
        char name[16];
        snprintf(name, sizeof(name), "o%02d", i);
        assert_int_equal(kd_store_put(st, "/configmaps", "default", name, cm(name, "x"), NULL), 0);
    }
    assert_int_equal(kd_store_delete(st, "/configmaps", "default", "o07", NULL), 0);
    kd_store_unlock(st);
    kd_local_store_close(st);
    /* A crash in the middle of a write leaves a torn last line: it was never acknowledged. */
    char *path = kd_xasprintf("%s/journal", dir);
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs(
        "{\"t\":\"p\",\"v\":52,\"g\":\"/configmaps\",\"n\":\"default\",\"m\":\"torn\",\"o\":{\"me",
        f);
    fclose(f);
    st = open_store(0, 0);
    kd_store_lock(st);
    assert_int_equal(kd_store_rv(st), 51);
    json_t **items = NULL;
    assert_int_equal(kd_store_list(st, "/configmaps", NULL, &items), 49);
    free(items);
    assert_null(kd_store_get(st, "/configmaps", "default", "o07"));
    assert_null(kd_store_get(st, "/configmaps", "default", "torn"));
    json_t *o = kd_store_get(st, "/configmaps", "default", "o49");
    assert_non_null(o);
    assert_string_equal(rv_str(o), "50");
    /* New writes continue the resourceVersion sequence. */
    json_t *stored = NULL;
    assert_int_equal(kd_store_put(st, "/configmaps", "default", "n", cm("n", "1"), &stored), 0);
    assert_string_equal(rv_str(stored), "52");
    kd_store_unlock(st);
    kd_local_store_close(st);
    /* A damaged record that is not the last one is corruption, reported with its line. */
    f = fopen(path, "a");
    fputs("garbage\n{\"t\":\"h\",\"v\":1,\"g\":\"\",\"n\":\"\",\"m\":\"\"}\n", f);
    fclose(f);
    struct kd_store_opts opts = {.data_dir = dir};
    char err[KD_ERRLEN] = "";
    assert_int_equal(kd_local_store_open(&opts, &st, err), KD_ECORRUPT);
    assert_non_null(strstr(err, "journal:"));
    assert_non_null(strstr(err, "damaged journal record"));
    unlink(path);
    free(path);
}

static void test_compaction_and_gone(void **state)
{
    (void)state;
    /* A small ring and compaction threshold: history runs out, state does not. */
    struct kd_store *st = open_store(10, 4096);
    kd_store_lock(st);
    for (int i = 0; i < 200; i++)
        assert_int_equal(kd_store_put(st, "/configmaps", "default", "hot", cm("hot", "v"), NULL),
                         0);
    assert_true(kd_store_journal_bytes(st) < 3 * 4096 + 1024);
    const struct kd_event *ev;
    uint64_t oldest = 0;
    assert_int_equal(kd_store_next_event(st, 5, &ev, &oldest), KD_EGONE);
    assert_int_equal(oldest, 191);
    assert_int_equal(kd_store_next_event(st, 195, &ev, NULL), 0);
    assert_int_equal(ev->rv, 196);
    kd_store_unlock(st);
    kd_local_store_close(st);
    st = open_store(10, 4096);
    kd_store_lock(st);
    assert_int_equal(kd_store_rv(st), 200);
    assert_string_equal(rv_str(kd_store_get(st, "/configmaps", "default", "hot")), "200");
    /* After a restart, history before the snapshot is gone: watchers relist. */
    assert_int_equal(kd_store_next_event(st, 150, &ev, NULL), KD_EGONE);
    assert_int_equal(kd_store_next_event(st, 200, &ev, NULL), KD_EAGAIN);
    kd_store_unlock(st);
    kd_local_store_close(st);
}

/* Every line of the journal after its header is a snapshot record ('s'). */
static int journal_all_snapshot(void)
{
    char *path = kd_xasprintf("%s/journal", dir);
    FILE *f = fopen(path, "r");
    free(path);
    if (f == NULL)
        return -1;
    char line[65536];
    int n = 0, bad = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        json_t *r = json_loads(line, 0, NULL);
        const char *t = json_string_value(json_object_get(r, "t"));
        if (t == NULL || (n == 0 ? strcmp(t, "h") : strcmp(t, "s")) != 0)
            bad++;
        json_decref(r);
        n++;
    }
    fclose(f);
    return bad > 0 ? -bad : n;
}

/*
 * Compaction copies each object's last record instead of serialising it again: after
 * writes, updates and deletes over two kinds, through compactions, a restart (whose opening
 * compaction copies the replayed records) and another, every object is the one last
 * written, bit for bit, and the journal holds snapshot records only. A record laid out
 * otherwise than the store writes them (keys in another order) is written anew.
 */
static void test_snapshot_is_the_records(void **state)
{
    (void)state;
    struct kd_store *st = open_store(0, 2048);
    json_t *want = json_object(); /* "gr|name" -> object as stored */
    kd_store_lock(st);
    for (int i = 0; i < 300; i++) {
        char name[16], val[32], key[64];
        snprintf(name, sizeof(name), "o%d", i % 37);
        snprintf(val, sizeof(val), "v%d", i);
        const char *gr = i % 3 == 0 ? "kdet.io/trials" : "/configmaps";
        snprintf(key, sizeof(key), "%s|%s", gr, name);
        if (i % 11 == 10) {
            int rc = kd_store_delete(st, gr, "default", name, NULL);
            assert_int_equal(rc, json_object_get(want, key) != NULL ? 0 : KD_ENOTFOUND);
            json_object_del(want, key);
            continue;
        }
        json_t *stored = NULL;
        assert_int_equal(kd_store_put(st, gr, "default", name, cm(name, val), &stored), 0);
        json_object_set_new(want, key, json_deep_copy(stored));
    }
    kd_store_unlock(st);
    kd_local_store_close(st);
    /* Another writer's layout: "v" before "t". */
    char *path = kd_xasprintf("%s/journal", dir);
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs("{\"v\":301,\"t\":\"p\",\"g\":\"/configmaps\",\"n\":\"default\",\"m\":\"odd\",\"o\":"
          "{\"metadata\":{\"name\":\"odd\",\"namespace\":\"default\",\"resourceVersion\":\"301\"}}}"
          "\n",
          f);
    fclose(f);
    free(path);
    json_object_set_new(want, "/configmaps|odd",
                        json_pack("{s:{s:s,s:s,s:s}}", "metadata", "name", "odd", "namespace",
                                  "default", "resourceVersion", "301"));
    for (int round = 0; round < 2; round++) {
        st = open_store(0, 2048);
        kd_store_lock(st);
        assert_int_equal(kd_store_rv(st), 301);
        size_t total = 0;
        const char *k;
        json_t *v;
        json_object_foreach(want, k, v)
        {
            const char *bar = strchr(k, '|');
            char *gr = kd_xstrndup(k, (size_t)(bar - k));
            json_t *got = kd_store_get(st, gr, "default", bar + 1);
            if (got == NULL || !json_equal(got, v))
                fail_msg("round %d: %s differs from the last write", round, k);
            free(gr);
            total++;
        }
        json_t **items = NULL;
        size_t n = kd_store_list(st, "/configmaps", NULL, &items);
        free(items);
        n += kd_store_list(st, "kdet.io/trials", NULL, &items);
        free(items);
        assert_int_equal(n, total);
        kd_store_unlock(st);
        kd_local_store_close(st);
        assert_int_equal(journal_all_snapshot(), (int)total + 1);
    }
    json_decref(want);
}

static void test_memory_only(void **state)
{
    (void)state;
    struct kd_store *st = NULL;
    assert_int_equal(kd_local_store_open(NULL, &st, NULL), 0);
    kd_store_lock(st);
    assert_int_equal(kd_store_put(st, "g/r", NULL, "x", cm("x", "1"), NULL), 0);
    assert_int_equal(kd_store_journal_bytes(st), 0);
    const char **grs = NULL;
    assert_int_equal(kd_store_kinds(st, &grs), 1);
    assert_string_equal(grs[0], "g/r");
    free(grs);
    kd_store_unlock(st);
    kd_local_store_close(st);
    kd_local_store_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rv_and_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replay_and_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction_and_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_is_the_records, setup, teardown),
        cmocka_unit_test(test_memory_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
