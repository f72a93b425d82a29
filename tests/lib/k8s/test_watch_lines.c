/*
 * The watch stream's line splitter, fed the way libcurl feeds it (events
 * cut at arbitrary byte positions): events reach the callback whole, an
 * ERROR event with a 410 Status ends the watch with KD_EGONE, and a line
 * over the cap ends it with KD_ETOOBIG.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../../lib/k8s/watch.c"

struct seen {
    int n[5];
    char names[512];
    int stop_after;
};

static int on_ev(enum kd_k8s_event_type t, json_t *obj, void *ud)
{
    struct seen *s = ud;
    s->n[t]++;
    size_t len = strlen(s->names);
    snprintf(s->names + len, sizeof(s->names) - len, "%s:%s,", kd_k8s_event_type_name(t),
             kd_k8s_meta_str(obj, "name") ? kd_k8s_meta_str(obj, "name")
                                          : kd_k8s_meta_str(obj, "resourceVersion"));
    if (s->stop_after > 0 && s->n[0] + s->n[1] + s->n[2] + s->n[3] >= s->stop_after)
        return 7;
    return 0;
}

static const char stream[] =
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
    "\"resourceVersion\":\"10\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
    "\"resourceVersion\":\"11\"}}}\r\n"
    "\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"resourceVersion\":"
    "\"15\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
    "\"resourceVersion\":\"16\"}}}\n"
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
    "\"status\":\"Failure\",\"message\":\"too old resource version: 16 (20)\",\"reason\":"
    "\"Expired\",\"code\":410}}\n";

/* Feed the stream in chunks of `step` bytes; return the first chunk whose write failed (or -1). */
static int feed(struct wstate *w, const char *data, size_t len, size_t step)
{
    for (size_t off = 0; off < len; off += step) {
        size_t n = len - off < step ? len - off : step;
        char chunk[4096];
        memcpy(chunk, data + off, n);
        if (on_data(chunk, 1, n, w) != n)
            return (int)off;
    }
    return -1;
}

static void init(struct wstate *w, struct seen *s, size_t max_line, struct kd_k8s_status *st,
                 char *err)
{
    memset(w, 0, sizeof(*w));
    memset(s, 0, sizeof(*s));
    kd_buf_init(&w->line, max_line);
    kd_buf_init(&w->errbody, 4096);
    w->http = 200;
    w->fn = on_ev;
    w->ud = s;
    w->st = st;
    w->err = err;
    w->path = "/api/v1/configmaps?watch=true";
}

static void test_events_split_anywhere(void **state)
{
    (void)state;
    for (size_t step = 1; step <= sizeof(stream); step += (step < 16 ? 1 : 37)) {
        struct wstate w;
        struct seen s;
        struct kd_k8s_status st = {0};
        char err[KD_ERRLEN] = "";
        init(&w, &s, 1 << 16, &st, err);
        int stopped = feed(&w, stream, sizeof(stream) - 1, step);
        assert_true(stopped >= 0); /* the ERROR event ends the stream */
        assert_int_equal(w.rc, KD_EGONE);
        assert_string_equal(s.names, "ADDED:a,MODIFIED:a,BOOKMARK:15,DELETED:a,");
        assert_int_equal(st.http, 410);
        assert_string_equal(st.reason, "Expired");
        assert_non_null(strstr(err, "too old resource version"));
        kd_buf_free(&w.line);
        kd_buf_free(&w.errbody);
        kd_k8s_status_free(&st);
    }
}

static void test_callback_stops(void **state)
{
    (void)state;
    struct wstate w;
    struct seen s;
    init(&w, &s, 1 << 16, NULL, NULL);
    s.stop_after = 2;
    assert_true(feed(&w, stream, sizeof(stream) - 1, 64) >= 0);
    assert_int_equal(w.rc, 7);
    assert_int_equal(s.n[KD_K8S_ADDED] + s.n[KD_K8S_MODIFIED], 2);
    kd_buf_free(&w.line);
    kd_buf_free(&w.errbody);
}

static void test_line_cap(void **state)
{
    (void)state;
    struct wstate w;
    struct seen s;
    char err[KD_ERRLEN] = "";
    init(&w, &s, 60, NULL, err);
    assert_true(feed(&w, stream, sizeof(stream) - 1, 7) >= 0);
    assert_int_equal(w.rc, KD_ETOOBIG);
    assert_true(w.too_long);
    assert_non_null(strstr(err, "longer than 60 bytes"));
    assert_int_equal(s.n[KD_K8S_ADDED], 0);
    kd_buf_free(&w.line);
    kd_buf_free(&w.errbody);
}

static void test_garbage_line(void **state)
{
    (void)state;
    struct wstate w;
    struct seen s;
    char err[KD_ERRLEN] = "";
    static const char bad[] = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
                              "not json\n";
    init(&w, &s, 4096, NULL, err);
    assert_true(feed(&w, bad, sizeof(bad) - 1, 5) >= 0);
    assert_int_equal(w.rc, KD_EPROTO);
    assert_non_null(strstr(err, "not JSON"));
    assert_int_equal(s.n[KD_K8S_ADDED], 1);
    static const char notype[] = "{\"type\":\"RENAMED\",\"object\":{}}\n";
    kd_buf_reset(&w.line);
    w.rc = 0;
    assert_true(feed(&w, notype, sizeof(notype) - 1, 100) >= 0);
    assert_int_equal(w.rc, KD_EPROTO);
    kd_buf_free(&w.line);
    kd_buf_free(&w.errbody);
}

static void test_error_status_kept(void **state)
{
    (void)state;
    struct wstate w;
    struct seen s;
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN] = "";
    static const char ev[] =
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":"
        "\"etcdserver: request timed out\",\"reason\":\"InternalError\",\"code\":500}}\n";
    init(&w, &s, 4096, &st, err);
    assert_true(feed(&w, ev, sizeof(ev) - 1, 11) >= 0);
    assert_int_equal(w.rc, KD_EAGAIN);
    assert_int_equal(st.http, 500);
    assert_string_equal(st.message, "etcdserver: request timed out");
    kd_buf_free(&w.line);
    kd_buf_free(&w.errbody);
    kd_k8s_status_free(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_split_anywhere),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_line_cap),
        cmocka_unit_test(test_garbage_line),
        cmocka_unit_test(test_error_status_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
