/*
 * libFuzzer target: bytes from the network as an API server's answer.
 * The input is a watch stream (newline-delimited JSON events) fed to the
 * watch decoder (lib/k8s/watch.c) in pieces of several sizes, with a small
 * and a large line cap, and a body for the Status mapper. Checked:
 *  - the events handed over, and how the stream ends, do not depend on how
 *    the bytes were cut into pieces (partial objects, lines split anywhere);
 *  - they are what a second, plain reading of the stream gives: each line
 *    (CR and spaces at its end dropped) is one event of a known type with
 *    an object, a line past the cap ends the stream with KD_ETOOBIG before
 *    anything of it is handed over, a line that is not JSON ends it with
 *    KD_EPROTO, BOOKMARK events are handed over, ERROR events are not and
 *    end the stream with their Status mapped (410: KD_EGONE);
 *  - a callback's stop value ends the stream at once with that value;
 *  - the Status mapper keeps to STYLE rule 7 (404 KD_ENOTFOUND, 409
 *    KD_ECONFLICT or KD_EEXIST, 410 KD_EGONE, 429 and 5xx KD_EAGAIN),
 *    whatever the body, and always says why it failed.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/k8s/watch.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_k8s_watch: " __VA_ARGS__);                                           \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#define STOP_VALUE (-12345)

struct seen {
    json_t *events;    /* [[type, object], ...] */
    size_t stop_after; /* the callback returns STOP_VALUE at this event; 0: never */
};

static int collect(enum kd_k8s_event_type t, json_t *obj, void *ud)
{
    struct seen *s = ud;
    if (t == KD_K8S_ERROR || !json_is_object(obj))
        FAIL("an ERROR event or a non-object was handed over");
    json_array_append_new(s->events, json_pack("[i,O]", (int)t, obj));
    return s->stop_after != 0 && json_array_size(s->events) == s->stop_after ? STOP_VALUE : 0;
}

/* Feed data in pieces of `step` bytes (0: one piece) and end the stream as kd_k8s_watch does. */
static int run(const char *data, size_t size, size_t step, size_t cap, struct seen *s,
               struct kd_k8s_status *st)
{
    struct wstate w = {0};
    char err[KD_ERRLEN] = "";
    int rc = 0;
    kd_buf_init(&w.line, cap);
    kd_buf_init(&w.errbody, 4096);
    w.http = 200;
    w.fn = collect;
    w.ud = s;
    w.st = st;
    w.err = err;
    w.path = "/fuzz";
    if (step == 0)
        step = size > 0 ? size : 1;
    for (size_t off = 0; off < size; off += step) {
        size_t k = size - off < step ? size - off : step;
        /* A piece of its own, as curl's buffer would be: no byte past it is readable. */
        char *piece = malloc(k);
        if (piece == NULL)
            abort();
        memcpy(piece, data + off, k);
        size_t took = on_data(piece, 1, k, &w);
        free(piece);
        if (took != k) {
            if (took != 0 || w.rc == 0)
                FAIL("the decoder took %zu of %zu bytes without an error", took, k);
            break;
        }
    }
    if (w.rc != 0)
        rc = w.rc;
    else if (w.line.len > 0)
        rc = handle_line(&w, w.line.data, w.line.len);
    /* The library says why it ended a stream; a callback's own stop value is the callback's. */
    if (rc != 0 && rc != STOP_VALUE && err[0] == '\0')
        FAIL("the stream ended with %d and no reason", rc);
    kd_buf_free(&w.line);
    kd_buf_free(&w.errbody);
    return rc;
}

/* The stream read plainly: the events and the end, as the contract in client.h says. */
static int reference(const char *data, size_t size, size_t cap, struct seen *s)
{
    const char *p = data, *end = data + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        if (n > cap)
            return KD_ETOOBIG;
        size_t t = n;
        while (t > 0 && (p[t - 1] == '\r' || p[t - 1] == ' '))
            t--;
        if (t > 0) {
            json_t *ev = json_loadb(p, t, 0, NULL);
            json_t *obj = json_object_get(ev, "object");
            const char *type = json_string_value(json_object_get(ev, "type"));
            static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"};
            int ti = -1;
            for (int i = 0; i < 4 && type != NULL; i++)
                if (strcmp(type, names[i]) == 0)
                    ti = i;
            bool error = type != NULL && strcmp(type, "ERROR") == 0;
            if (ev == NULL || !json_is_object(obj) || (ti < 0 && !error)) {
                json_decref(ev);
                return KD_EPROTO;
            }
            if (error) {
                char *body = json_dumps(obj, JSON_COMPACT);
                int rc = kd_k8s_map_status(200, body, body ? strlen(body) : 0, NULL, NULL);
                json_int_t code = json_integer_value(json_object_get(obj, "code"));
                bool status =
                    strcmp(json_string_value(json_object_get(obj, "kind")) ?: "", "Status") == 0;
                free(body);
                json_decref(ev);
                if (code == 410 && status && rc != KD_EGONE)
                    FAIL("an ERROR event of a 410 Status maps to %d", rc);
                return rc != 0 ? rc : KD_EPROTO;
            }
            json_array_append_new(s->events, json_pack("[i,O]", ti, obj));
            json_decref(ev);
            if (s->stop_after != 0 && json_array_size(s->events) == s->stop_after)
                return STOP_VALUE;
        }
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    return 0;
}

static void check_stream(const char *data, size_t size, size_t cap, size_t stop_after, size_t step)
{
    struct seen want = {json_array(), stop_after};
    int want_rc = reference(data, size, cap, &want);
    const size_t steps[] = {0, 1, 7, step};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        struct seen got = {json_array(), stop_after};
        struct kd_k8s_status st = {0};
        int rc = run(data, size, steps[i], cap, &got, &st);
        if (rc != want_rc || !json_equal(got.events, want.events)) {
            char *a = json_dumps(got.events, JSON_COMPACT), *b = json_dumps(want.events, 0);
            FAIL("pieces of %zu, cap %zu: ended %d with %s; the plain reading ends %d with %s",
                 steps[i], cap, rc, a, want_rc, b);
        }
        if (rc == KD_EGONE && st.http != 410)
            FAIL("KD_EGONE from a Status of HTTP %d", st.http);
        kd_k8s_status_free(&st);
        json_decref(got.events);
    }
    json_decref(want.events);
}

static void check_status(int http, const char *body, size_t len)
{
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN] = "";
    int rc = kd_k8s_map_status(http, body, len, &st, err);
    if (strnlen(st.reason, sizeof(st.reason)) == sizeof(st.reason) ||
        strnlen(st.message, sizeof(st.message)) == sizeof(st.message))
        FAIL("a Status field is not terminated");
    if ((rc != 0) != (st.http < 200 || st.http >= 300))
        FAIL("HTTP %d (mapped %d) gives %d", http, st.http, rc);
    if (rc != 0 && err[0] == '\0')
        FAIL("HTTP %d fails without a reason", st.http);
    int want = st.http == 404                                        ? KD_ENOTFOUND
               : st.http == 410                                      ? KD_EGONE
               : st.http == 429 || (st.http >= 500 && st.http < 600) ? KD_EAGAIN
               : st.http == 422                                      ? KD_EINVALID
                                                                     : rc;
    if (st.http == 409 && rc != KD_ECONFLICT && rc != KD_EEXIST)
        FAIL("HTTP 409 gives %d", rc);
    if (rc != want)
        FAIL("HTTP %d gives %d, not %d", st.http, rc, want);
    if (http >= 300 && st.http != http)
        FAIL("a Status body changed the HTTP code %d to %d", http, st.http);
    kd_k8s_status_free(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    if (!init) {
        kd_log_init("fuzz", KD_LOG_OFF, -1);
        init = true;
    }
    const char *p = (const char *)data;
    int http = size > 0 ? 100 + data[0] % 500 : 200;
    size_t stop_after = size > 1 ? data[1] % 6 : 0;
    size_t step = size > 1 ? 1 + data[size - 1] % 64 : 1;
    check_status(http, p, size);
    check_status(200, p, size);
    check_stream(p, size, 256, stop_after, step);
    check_stream(p, size, 1u << 20, 0, step);
    return 0;
}
