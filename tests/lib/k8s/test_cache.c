/*
 * The informer cache: get/put/delete, the namespace/owner/label indexes,
 * and the relist diff (kd_k8s_cache_replace) on synthetic lists, as an
 * informer does it after a 410.
 */
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/time.h"
#include "k8s/informer.h"

static json_t *obj(const char *ns, const char *name, const char *rv, const char *owner,
                   const char *app)
{
    json_t *o = json_pack("{s:s,s:{s:s,s:s,s:s,s:s}}", "kind", "Pod", "metadata", "namespace", ns,
                          "name", name, "resourceVersion", rv, "uid", name);
    json_t *meta = json_object_get(o, "metadata");
    if (owner != NULL)
        json_object_set_new(meta, "ownerReferences",
                            json_pack("[{s:s,s:s,s:s,s:b}]", "kind", "Trial", "name", owner, "uid",
                                      owner, "controller", 1));
    if (app != NULL)
        json_object_set_new(meta, "labels", json_pack("{s:s,s:s}", "app", app, "tier", "x"));
    return o;
}

struct rec {
    char log[4096];
    int n[3];
};

static void record(enum kd_k8s_event_type t, json_t *old, json_t *new, void *ud)
{
    struct rec *r = ud;
    const json_t *o = new != NULL ? new : old;
    size_t len = strlen(r->log);
    snprintf(r->log + len, sizeof(r->log) - len, "%s %s/%s %s->%s;", kd_k8s_event_type_name(t),
             kd_k8s_meta_str(o, "namespace"), kd_k8s_meta_str(o, "name"),
             old ? kd_k8s_meta_str(old, "resourceVersion") : "-",
             new ? kd_k8s_meta_str(new, "resourceVersion") : "-");
    r->n[t]++;
}

static json_t *list_of(json_t *a, ...)
{
    va_list ap;
    json_t *arr = json_array();
    va_start(ap, a);
    for (json_t *o = a; o != NULL; o = va_arg(ap, json_t *))
        json_array_append_new(arr, o);
    va_end(ap);
    return arr;
}

static size_t arr_len_decref(json_t *a)
{
    size_t n = json_array_size(a);
    json_decref(a);
    return n;
}

static void test_put_get_delete_indexes(void **state)
{
    (void)state;
    struct kd_k8s_cache *c = kd_k8s_cache_new();
    json_t *old = NULL, *got = NULL;
    json_t *a = obj("ns1", "a", "1", "t1", "web");
    assert_int_equal(kd_k8s_cache_put(c, a, &old), 0);
    assert_null(old);
    json_t *b = obj("ns1", "b", "2", "t1", "db");
    assert_int_equal(kd_k8s_cache_put(c, b, NULL), 0);
    json_t *c2 = obj("ns2", "a", "3", "t2", "web");
    assert_int_equal(kd_k8s_cache_put(c, c2, NULL), 0);
    assert_int_equal(kd_k8s_cache_len(c), 3);
    assert_int_equal(kd_k8s_cache_get(c, "ns1/a", &got), 0);
    assert_true(json_equal(got, a));
    assert_ptr_not_equal(got, a); /* a private copy: the caller may change it */
    json_object_set_new(got, "kind", json_string("Changed"));
    json_decref(got);
    assert_int_equal(kd_k8s_cache_get(c, "ns1/a", &got), 0);
    assert_string_equal(json_string_value(json_object_get(got, "kind")), "Pod");
    json_decref(got);
    assert_int_equal(kd_k8s_cache_get(c, "ns3/a", &got), KD_ENOTFOUND);
    assert_int_equal(arr_len_decref(kd_k8s_cache_list(c, "ns1")), 2);
    assert_int_equal(arr_len_decref(kd_k8s_cache_list(c, NULL)), 3);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_owner(c, "t1")), 2);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(c, "app", "web")), 2);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(c, "tier", "x")), 3);

    /* an update moves the object between index values */
    json_t *a2 = obj("ns1", "a", "4", "t2", "db");
    assert_int_equal(kd_k8s_cache_put(c, a2, &old), 0);
    assert_true(json_equal(old, a));
    json_decref(old);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_owner(c, "t1")), 1);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_owner(c, "t2")), 2);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(c, "app", "web")), 1);

    assert_int_equal(kd_k8s_cache_delete(c, "ns1/a", &old), 0);
    assert_true(json_equal(old, a2));
    json_decref(old);
    assert_int_equal(kd_k8s_cache_delete(c, "ns1/a", NULL), KD_ENOTFOUND);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_owner(c, "t2")), 1);
    assert_int_equal(kd_k8s_cache_len(c), 2);

    json_t *noname = json_pack("{s:{}}", "metadata");
    assert_int_equal(kd_k8s_cache_put(c, noname, NULL), KD_EINVAL);
    json_decref(noname);
    json_decref(a);
    json_decref(b);
    json_decref(c2);
    json_decref(a2);
    kd_k8s_cache_free(c);
}

struct each_rec {
    int n;
    int stop_after;
    char names[256];
};

static int each_fn(json_t *o, void *ud)
{
    struct each_rec *r = ud;
    size_t len = strlen(r->names);
    /* the copy is the caller's own for the call: changing it leaves the cache alone */
    json_object_set_new(o, "changed", json_true());
    snprintf(r->names + len, sizeof(r->names) - len, "%s;", kd_k8s_meta_str(o, "name"));
    return ++r->n == r->stop_after ? 7 : 0;
}

/* want: only the objects not marked; mark_fn marks what it sees. */
static bool unmarked(const char *key, bool marked, void *ud)
{
    (void)ud;
    assert_non_null(strchr(key, '/'));
    return !marked;
}

static int mark_fn(json_t *o, void *ud)
{
    (void)each_fn(o, ud);
    return KD_K8S_EACH_MARK;
}

/* For kd_k8s_cache_each_owner_changed: what a walker saw before (key and resourceVersion). */
struct rv_seen {
    struct each_rec *r;
    const char *keys[2], *rvs[2];
    int asked;
    char rv_of_p0[8];
};

static bool rv_changed(const char *key, const char *rv, void *ud)
{
    struct rv_seen *s = ud;
    s->asked++;
    if (strcmp(key, "ns/p0") == 0)
        snprintf(s->rv_of_p0, sizeof(s->rv_of_p0), "%s", rv);
    for (int i = 0; i < 2; i++)
        if (strcmp(key, s->keys[i]) == 0)
            return strcmp(rv, s->rvs[i]) != 0;
    return true;
}

static int rv_fn(json_t *o, void *ud)
{
    return each_fn(o, ((struct rv_seen *)ud)->r);
}

static void test_each(void **state)
{
    (void)state;
    struct kd_k8s_cache *c = kd_k8s_cache_new();
    json_t *objs = list_of(obj("ns1", "a", "1", NULL, NULL), obj("ns1", "b", "1", NULL, NULL),
                           obj("ns2", "c", "1", NULL, NULL), NULL);
    size_t i;
    json_t *o;
    json_array_foreach(objs, i, o) assert_int_equal(kd_k8s_cache_put(c, o, NULL), 0);
    json_decref(objs);
    struct each_rec r = {0};
    assert_int_equal(kd_k8s_cache_each(c, NULL, each_fn, &r), 0);
    assert_int_equal(r.n, 3);
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_each(c, "ns1", each_fn, &r), 0);
    assert_int_equal(r.n, 2);
    assert_non_null(strstr(r.names, "a;"));
    assert_non_null(strstr(r.names, "b;"));
    assert_null(strstr(r.names, "c;"));
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_each(c, "ns3", each_fn, &r), 0);
    assert_int_equal(r.n, 0);
    /* marked objects are skipped until they change */
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_each_if(c, NULL, unmarked, mark_fn, &r), 0);
    assert_int_equal(r.n, 3);
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_each_if(c, NULL, unmarked, mark_fn, &r), 0);
    assert_int_equal(r.n, 0);
    json_t *b2 = obj("ns1", "b", "2", NULL, NULL);
    assert_int_equal(kd_k8s_cache_put(c, b2, NULL), 0);
    json_decref(b2);
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_each_if(c, "ns1", unmarked, each_fn, &r), 0);
    assert_string_equal(r.names, "b;");
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_each_if(c, "ns2", unmarked, each_fn, &r), 0);
    assert_int_equal(r.n, 0);
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_each_if(c, NULL, NULL, each_fn, &r), 0); /* no filter */
    assert_int_equal(r.n, 3);
    /* a non-zero return stops the walk and is returned */
    memset(&r, 0, sizeof(r));
    r.stop_after = 2;
    assert_int_equal(kd_k8s_cache_each(c, NULL, each_fn, &r), 7);
    assert_int_equal(r.n, 2);
    json_t *got = NULL;
    assert_int_equal(kd_k8s_cache_get(c, "ns1/a", &got), 0);
    assert_null(json_object_get(got, "changed"));
    json_decref(got);
    kd_k8s_cache_free(c);
}

/* Index slots: removing from the middle of an index moves the last object into the hole, and
 * the moved object still leaves cleanly afterwards. */
/* A walk's callback that reads another cache (allowed) and then the walked one (a bug). */
struct nested {
    struct kd_k8s_cache *walked, *other;
    int got_other;
};

static int nested_fn(json_t *o, void *ud)
{
    struct nested *n = ud;
    json_t *x = NULL;
    (void)o;
    if (kd_k8s_cache_get(n->other, "ns1/b", &x) == 0)
        n->got_other++;
    json_decref(x);
    if (n->walked != NULL) {
        if (kd_k8s_cache_get(n->walked, "ns1/a", &x) == 0) /* must not return */
            json_decref(x);
    }
    return 0;
}

/* Locking the walked cache again from its walk deadlocks once a writer waits (the lock prefers
 * writers): it stops the process at once instead, every time. Another cache is fine. */
static void test_walk_relock(void **state)
{
    (void)state;
    struct kd_k8s_cache *c = kd_k8s_cache_new(), *d = kd_k8s_cache_new();
    json_t *a = obj("ns1", "a", "1", NULL, NULL), *b = obj("ns1", "b", "1", NULL, NULL);
    assert_int_equal(kd_k8s_cache_put(c, a, NULL), 0);
    assert_int_equal(kd_k8s_cache_put(d, b, NULL), 0);
    struct nested n = {.walked = NULL, .other = d};
    assert_int_equal(kd_k8s_cache_each(c, NULL, nested_fn, &n), 0);
    assert_int_equal(n.got_other, 1);
    /* After the walk the same thread may lock c again. */
    json_t *x = NULL;
    assert_int_equal(kd_k8s_cache_get(c, "ns1/a", &x), 0);
    json_decref(x);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        n.walked = c;
        (void)kd_k8s_cache_each(c, NULL, nested_fn, &n);
        _exit(0); /* reached only if the relock went through */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGABRT);
    json_decref(a);
    json_decref(b);
    kd_k8s_cache_free(c);
    kd_k8s_cache_free(d);
}

static void test_index_slots(void **state)
{
    (void)state;
    struct kd_k8s_cache *c = kd_k8s_cache_new();
    const char *names[] = {"p0", "p1", "p2", "p3", "p4"};
    for (int i = 0; i < 5; i++) {
        json_t *o = obj("ns", names[i], "1", "t1", "web");
        assert_int_equal(kd_k8s_cache_put(c, o, NULL), 0);
        json_decref(o);
    }
    assert_int_equal(kd_k8s_cache_delete(c, "ns/p1", NULL), 0); /* p4 moves into p1's slot */
    assert_int_equal(kd_k8s_cache_delete(c, "ns/p4", NULL), 0); /* the moved one leaves */
    json_t *o = obj("ns", "p2", "2", "t2", "db");               /* p2 changes its indexes */
    assert_int_equal(kd_k8s_cache_put(c, o, NULL), 0);
    json_decref(o);
    json_t *web = kd_k8s_cache_by_label(c, "app", "web");
    char got[64] = "";
    size_t i;
    json_array_foreach(web, i, o)
    {
        size_t len = strlen(got);
        snprintf(got + len, sizeof(got) - len, "%s;", kd_k8s_meta_str(o, "name"));
    }
    assert_int_equal(json_array_size(web), 2);
    assert_non_null(strstr(got, "p0;"));
    assert_non_null(strstr(got, "p3;"));
    json_decref(web);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_owner(c, "t1")), 2);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_owner(c, "t2")), 1);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(c, "tier", "x")), 3);
    struct each_rec r = {0};
    assert_int_equal(kd_k8s_cache_each_owner(c, "t1", each_fn, &r), 0);
    assert_int_equal(r.n, 2);
    assert_int_equal(kd_k8s_cache_each_owner(c, "nobody", each_fn, &r), 0);
    assert_int_equal(r.n, 2);
    /* by resourceVersion: p0 was seen at "1" and is skipped; p3 was seen at an older one */
    memset(&r, 0, sizeof(r));
    struct rv_seen seen = {.r = &r, .keys = {"ns/p0", "ns/p3"}, .rvs = {"1", "0"}};
    assert_int_equal(kd_k8s_cache_each_owner_changed(c, "t1", rv_changed, rv_fn, &seen), 0);
    assert_string_equal(r.names, "p3;");
    assert_int_equal(seen.asked, 2);
    assert_string_equal(seen.rv_of_p0, "1");
    assert_int_equal(arr_len_decref(kd_k8s_cache_list(c, "ns")), 3);
    for (int k = 0; k < 5; k++) {
        char key[16];
        snprintf(key, sizeof(key), "ns/%s", names[k]);
        int rc = kd_k8s_cache_delete(c, key, NULL);
        assert_true(rc == 0 || (k == 1 || k == 4)); /* p1 and p4 are gone already */
    }
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(c, "tier", "x")), 0);
    assert_int_equal(arr_len_decref(kd_k8s_cache_list(c, "ns")), 0);
    kd_k8s_cache_free(c);
}

/* Only the label keys asked for are indexed; none at all with an empty list. */
static void test_index_labels(void **state)
{
    (void)state;
    static const char *const app_only[] = {"app", NULL}, *const none[] = {NULL};
    struct kd_k8s_cache *c = kd_k8s_cache_new(), *d = kd_k8s_cache_new();
    kd_k8s_cache_index_labels(c, app_only);
    kd_k8s_cache_index_labels(d, none);
    json_t *o = obj("ns", "p0", "1", "t1", "web");
    assert_int_equal(kd_k8s_cache_put(c, o, NULL), 0);
    assert_int_equal(kd_k8s_cache_put(d, o, NULL), 0);
    json_decref(o);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(c, "app", "web")), 1);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(c, "tier", "x")), 0);
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_label(d, "app", "web")), 0);
    /* the other indexes stay */
    assert_int_equal(arr_len_decref(kd_k8s_cache_by_owner(d, "t1")), 1);
    assert_int_equal(arr_len_decref(kd_k8s_cache_list(d, "ns")), 1);
    assert_int_equal(kd_k8s_cache_delete(d, "ns/p0", NULL), 0);
    kd_k8s_cache_free(c);
    kd_k8s_cache_free(d);
}

/* A relist in pages: changes are reported page by page, removals at the end; a round given up
 * half way leaves nothing removed, and an object put between pages is kept. */
static void test_relist_pages(void **state)
{
    (void)state;
    struct kd_k8s_cache *c = kd_k8s_cache_new();
    struct rec r = {0};
    json_t *l1 = list_of(obj("ns", "a", "1", NULL, NULL), obj("ns", "b", "2", NULL, NULL),
                         obj("ns", "c", "3", NULL, NULL), NULL);
    assert_int_equal(kd_k8s_cache_replace(c, l1, NULL, NULL), 0);
    json_decref(l1);

    json_t *p1 = list_of(obj("ns", "a", "1", NULL, NULL), obj("ns", "b", "5", NULL, NULL), NULL);
    json_t *p2 = list_of(obj("ns", "d", "6", NULL, NULL), NULL);
    json_t *bad = list_of(obj("ns", "e", "7", NULL, NULL), json_pack("{s:{}}", "metadata"), NULL);
    kd_k8s_cache_replace_begin(c);
    assert_int_equal(kd_k8s_cache_replace_page(c, p1, record, &r), 0);
    assert_string_equal(r.log, "MODIFIED ns/b 2->5;");
    json_t *x = obj("ns", "x", "9", NULL, NULL);
    assert_int_equal(kd_k8s_cache_put(c, x, NULL), 0); /* a watch event between pages */
    json_decref(x);
    assert_int_equal(kd_k8s_cache_replace_page(c, bad, record, &r), KD_EINVAL);
    assert_int_equal(kd_k8s_cache_len(c), 4); /* nothing of the bad page */
    assert_int_equal(kd_k8s_cache_replace_page(c, p2, record, &r), 0);
    assert_int_equal(kd_k8s_cache_len(c), 5);
    kd_k8s_cache_replace_end(c, record, &r);
    assert_string_equal(r.log, "MODIFIED ns/b 2->5;ADDED ns/d -->6;DELETED ns/c 3->-;");
    assert_int_equal(kd_k8s_cache_len(c), 4); /* a, b, d, x */

    /* a round given up after one page removes nothing; the next full round does */
    memset(&r, 0, sizeof(r));
    json_t *only_a = list_of(obj("ns", "a", "1", NULL, NULL), NULL);
    kd_k8s_cache_replace_begin(c);
    assert_int_equal(kd_k8s_cache_replace_page(c, only_a, record, &r), 0);
    assert_int_equal(kd_k8s_cache_len(c), 4);
    kd_k8s_cache_replace_begin(c);
    assert_int_equal(kd_k8s_cache_replace_page(c, only_a, record, &r), 0);
    kd_k8s_cache_replace_end(c, record, &r);
    assert_int_equal(kd_k8s_cache_len(c), 1);
    assert_int_equal(r.n[KD_K8S_DELETED], 3);
    assert_int_equal(r.n[KD_K8S_ADDED] + r.n[KD_K8S_MODIFIED], 0);
    json_decref(only_a);
    json_decref(p1);
    json_decref(p2);
    json_decref(bad);
    kd_k8s_cache_free(c);
}

static void test_relist_diff(void **state)
{
    (void)state;
    struct kd_k8s_cache *c = kd_k8s_cache_new();
    struct rec r = {0};
    json_t *l1 = list_of(obj("ns", "a", "1", NULL, NULL), obj("ns", "b", "2", NULL, NULL),
                         obj("ns", "c", "3", NULL, NULL), NULL);
    assert_int_equal(kd_k8s_cache_replace(c, l1, record, &r), 0);
    assert_int_equal(r.n[KD_K8S_ADDED], 3);
    assert_int_equal(r.n[KD_K8S_MODIFIED] + r.n[KD_K8S_DELETED], 0);

    /* the same list again: nothing changed, no events */
    memset(&r, 0, sizeof(r));
    assert_int_equal(kd_k8s_cache_replace(c, l1, record, &r), 0);
    assert_string_equal(r.log, "");

    /* after a 410: b modified, c deleted, d added, a unchanged */
    memset(&r, 0, sizeof(r));
    json_t *l2 = list_of(obj("ns", "a", "1", NULL, NULL), obj("ns", "b", "7", NULL, NULL),
                         obj("ns", "d", "8", NULL, NULL), NULL);
    assert_int_equal(kd_k8s_cache_replace(c, l2, record, &r), 0);
    printf("diff: %s\n", r.log);
    assert_int_equal(r.n[KD_K8S_ADDED], 1);
    assert_int_equal(r.n[KD_K8S_MODIFIED], 1);
    assert_int_equal(r.n[KD_K8S_DELETED], 1);
    assert_non_null(strstr(r.log, "MODIFIED ns/b 2->7;"));
    assert_non_null(strstr(r.log, "ADDED ns/d -->8;"));
    assert_non_null(strstr(r.log, "DELETED ns/c 3->-;"));
    assert_int_equal(kd_k8s_cache_len(c), 3);
    json_t *got = NULL;
    assert_int_equal(kd_k8s_cache_get(c, "ns/c", &got), KD_ENOTFOUND);
    assert_int_equal(kd_k8s_cache_get(c, "ns/b", &got), 0);
    assert_string_equal(kd_k8s_meta_str(got, "resourceVersion"), "7");
    json_decref(got);

    /* a re-created object (same name, new uid, same rv by chance) is MODIFIED */
    memset(&r, 0, sizeof(r));
    json_t *l3 = json_deep_copy(l2);
    json_object_set_new(json_object_get(json_array_get(l3, 0), "metadata"), "uid",
                        json_string("a-2"));
    assert_int_equal(kd_k8s_cache_replace(c, l3, record, &r), 0);
    assert_string_equal(r.log, "MODIFIED ns/a 1->1;");

    /* an empty list deletes everything */
    memset(&r, 0, sizeof(r));
    json_t *empty = json_array();
    assert_int_equal(kd_k8s_cache_replace(c, empty, record, &r), 0);
    assert_int_equal(r.n[KD_K8S_DELETED], 3);
    assert_int_equal(kd_k8s_cache_len(c), 0);

    /* an item without a name fails and changes nothing */
    json_t *bad = list_of(obj("ns", "x", "1", NULL, NULL), json_pack("{s:{}}", "metadata"), NULL);
    assert_int_equal(kd_k8s_cache_replace(c, bad, NULL, NULL), KD_EINVAL);
    assert_int_equal(kd_k8s_cache_len(c), 0);
    json_decref(bad);
    json_decref(empty);
    json_decref(l1);
    json_decref(l2);
    json_decref(l3);
    kd_k8s_cache_free(c);
}

struct rw {
    struct kd_k8s_cache *c;
    int stop;
};

static void *reader(void *arg)
{
    struct rw *w = arg;
    long n = 0;
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        json_t *o = NULL;
        if (kd_k8s_cache_get(w->c, "ns/k5", &o) == 0) {
            assert_non_null(kd_k8s_meta_str(o, "name"));
            json_decref(o);
        }
        json_decref(kd_k8s_cache_by_label(w->c, "app", "web"));
        n++;
    }
    return (void *)n;
}

static void test_concurrent_readers(void **state)
{
    (void)state;
    struct rw w = {kd_k8s_cache_new(), 0};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader, &w), 0);
    int64_t t0 = kd_mono_ms();
    for (int round = 0; round < 300; round++) {
        char name[16], rv[16];
        snprintf(name, sizeof(name), "k%d", round % 10);
        snprintf(rv, sizeof(rv), "%d", round);
        json_t *o = obj("ns", name, rv, "t", round % 2 ? "web" : "db");
        assert_int_equal(kd_k8s_cache_put(w.c, o, NULL), 0);
        json_decref(o);
        if (round % 7 == 0)
            assert_true(kd_k8s_cache_delete(w.c, "ns/k5", NULL) <= 0);
    }
    int64_t dt = kd_mono_ms() - t0;
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    printf("300 writes against 3 busy readers: %lld ms\n", (long long)dt);
    assert_true(dt < 5000); /* writers are not starved by readers */
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    assert_true(kd_k8s_cache_len(w.c) >= 9);
    kd_k8s_cache_free(w.c);
}

/* A Trial-like object: what the controller caches by the thousand. */
static json_t *trial(int i, const char *rv)
{
    char name[64], rid[40], uid[40];
    snprintf(name, sizeof(name), "exp-%d", i);
    snprintf(rid, sizeof(rid), "%032x", i * 2654435761u);
    snprintf(uid, sizeof(uid), "%08x-0000-4000-8000-%012x", i * 40503u, i);
    return json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:s,s:{s:s,s:s},s:[{s:s,s:s,s:s,s:b}]},"
                     "s:{s:s,s:{s:i,s:f},s:i,s:s},s:{s:s,s:f,s:[{s:s,s:s,s:s}]}}",
                     "apiVersion", "kdet.io/v1alpha1", "kind", "Trial", "metadata", "namespace",
                     "default", "name", name, "resourceVersion", rv, "uid", uid, "labels",
                     "kdet.io/experiment", "exp", "kdet.io/request-id", rid, "ownerReferences",
                     "kind", "Experiment", "name", "exp", "uid",
                     "1cbd2658-18a0-40f2-9dc8-0818c88a693a", "controller", 1, "spec", "experiment",
                     "exp", "hparams", "layers", i % 7, "lr", 1.0 / (i + 3), "seed", i * 7919,
                     "requestId", rid, "status", "state", i % 3 ? "COMPLETED" : "ACTIVE",
                     "progress", (i % 100) / 100.0, "conditions", "type", "Scheduled", "reason",
                     "Admitted", "message", "admitted by the kdet scheduler");
}

/* Objects are stored deflated against the first one's text, and come back exactly. */
static void test_compressed(void **state)
{
    (void)state;
    struct kd_k8s_cache *c = kd_k8s_cache_new();
    char rv[16], key[80];
    size_t text = 0;
    for (int i = 0; i < 2000; i++) {
        snprintf(rv, sizeof(rv), "%d", i + 1);
        json_t *t = trial(i, rv);
        assert_int_equal(kd_k8s_cache_put(c, t, NULL), 0);
        json_decref(t);
    }
    /* A large object (beyond the deflate window), a tiny one, and one with non-ASCII text. */
    json_t *big = obj("default", "big", "9001", NULL, "big");
    char *blob = malloc(40000);
    for (int i = 0; i < 39999; i++)
        blob[i] = (char)('a' + (i * 7 + i / 13) % 26);
    blob[39999] = '\0';
    json_object_set_new(big, "data", json_string(blob));
    free(blob);
    assert_int_equal(kd_k8s_cache_put(c, big, NULL), 0);
    json_t *tiny = json_pack("{s:{s:s,s:s}}", "metadata", "namespace", "t", "name", "x");
    assert_int_equal(kd_k8s_cache_put(c, tiny, NULL), 0);
    json_t *utf = obj("default", "utf", "9002", NULL, "caf\u00e9 \u6f22\u5b57");
    assert_int_equal(kd_k8s_cache_put(c, utf, NULL), 0);

    size_t bytes = kd_k8s_cache_bytes(c, &text);
    assert_true(text > 2000 * 400);
    assert_true(bytes * 3 < text); /* measured: about a tenth for the trials */
    json_t *got = NULL;
    for (int i = 0; i < 2000; i += 37) {
        snprintf(rv, sizeof(rv), "%d", i + 1);
        json_t *want = trial(i, rv);
        snprintf(key, sizeof(key), "default/exp-%d", i);
        assert_int_equal(kd_k8s_cache_get(c, key, &got), 0);
        assert_true(json_equal(got, want));
        json_decref(got);
        json_decref(want);
    }
    json_t *pairs[][2] = {{big, NULL}, {tiny, NULL}, {utf, NULL}};
    const char *keys[] = {"default/big", "t/x", "default/utf"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kd_k8s_cache_get(c, keys[i], &got), 0);
        assert_true(json_equal(got, pairs[i][0]));
        json_decref(got);
        json_decref(pairs[i][0]);
    }
    /* Replacing and deleting keep the accounting and the contents right. */
    json_t *t5 = trial(5, "77777");
    json_object_set_new(t5, "extra", json_string("changed"));
    json_t *old = NULL;
    assert_int_equal(kd_k8s_cache_put(c, t5, &old), 0);
    assert_string_equal(kd_k8s_meta_str(old, "resourceVersion"), "6");
    json_decref(old);
    assert_int_equal(kd_k8s_cache_get(c, "default/exp-5", &got), 0);
    assert_true(json_equal(got, t5));
    json_decref(got);
    json_decref(t5);
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "default/exp-%d", i);
        assert_int_equal(kd_k8s_cache_delete(c, key, NULL), 0);
    }
    assert_int_equal(kd_k8s_cache_len(c), 3);
    assert_true(kd_k8s_cache_bytes(c, &text) < 60000);
    kd_k8s_cache_free(c);
}

static void test_enqueue_handlers(void **state)
{
    (void)state;
    struct kd_k8s_queue *q = kd_k8s_queue_new(NULL);
    struct kd_k8s_owner_enqueue oe = {q, "Trial"};
    struct kd_k8s_handlers by_key = kd_k8s_handlers_enqueue(q);
    struct kd_k8s_handlers by_owner = kd_k8s_handlers_enqueue_owner(&oe);
    json_t *pod = obj("team", "trial-7-pod-0", "5", "trial-7", NULL);
    json_t *orphan = obj("team", "lonely", "6", NULL, NULL);
    json_t *other = obj("team", "svc", "7", "trial-8", NULL);
    json_object_set_new(
        json_array_get(json_object_get(json_object_get(other, "metadata"), "ownerReferences"), 0),
        "kind", json_string("Experiment"));
    by_key.on_add(pod, by_key.ud);
    by_key.on_update(pod, pod, by_key.ud);
    by_key.on_delete(orphan, by_key.ud);
    by_owner.on_add(pod, by_owner.ud);
    by_owner.on_update(pod, pod, by_owner.ud);
    by_owner.on_delete(orphan, by_owner.ud); /* no owner: nothing */
    by_owner.on_add(other, by_owner.ud);     /* owner of another kind: nothing */
    char *k1 = NULL, *k2 = NULL, *k3 = NULL;
    assert_int_equal(kd_k8s_queue_len(q), 3);
    assert_int_equal(kd_k8s_queue_get(q, &k1), 0);
    assert_int_equal(kd_k8s_queue_get(q, &k2), 0);
    assert_int_equal(kd_k8s_queue_get(q, &k3), 0);
    assert_string_equal(k1, "team/trial-7-pod-0");
    assert_string_equal(k2, "team/lonely");
    assert_string_equal(k3, "team/trial-7");
    kd_k8s_queue_done(q, k1);
    kd_k8s_queue_done(q, k2);
    kd_k8s_queue_done(q, k3);
    free(k1);
    free(k2);
    free(k3);
    json_decref(pod);
    json_decref(orphan);
    json_decref(other);
    kd_k8s_queue_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_delete_indexes),
        cmocka_unit_test(test_relist_diff),
        cmocka_unit_test(test_each),
        cmocka_unit_test(test_walk_relock),
        cmocka_unit_test(test_relist_pages),
        cmocka_unit_test(test_index_slots),
        cmocka_unit_test(test_index_labels),
        cmocka_unit_test(test_concurrent_readers),
        cmocka_unit_test(test_enqueue_handlers),
        cmocka_unit_test(test_compressed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
