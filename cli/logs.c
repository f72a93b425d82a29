/*
 * `det trial logs` and `det experiment logs` from kdet-controller's store
 * (docs/api.md, "Trial logs"): the lines kdet-launch shipped, there after
 * the pods are gone. Pages of up to 1000 lines (forwards for the whole log,
 * backwards for --tail), then, with -f, the server-sent-event stream from
 * the last line printed until the trial or experiment ends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "core/time.h"

/* Lines per request (the API's cap). */
#define PAGE 1000
/* One server-sent event, at most (a page of long lines). */
#define EVENT_MAX (64u << 20)
/* Reconnect a stream that broke this long after, at most this many times in a row. */
#define RECONNECT_MS 2000
#define RECONNECT_MAX 30

int det_logs_format(const json_t *line, bool with_trial, struct kd_buf *out)
{
    int rc = 0;
    json_int_t rank = json_integer_value(json_object_get(line, "rank"));
    const char *text = json_string_value(json_object_get(line, "line")) ?: "";
    const char *trial = json_string_value(json_object_get(line, "trial"));
    if (with_trial && trial != NULL && (rc = kd_buf_printf(out, "[%s] ", trial)) != 0)
        goto out;
    /* rank -1: the launcher's or the controller's own note, as it was written */
    if (rank >= 0 && (rc = kd_buf_printf(out, "[rank=%lld] ", (long long)rank)) != 0)
        goto out;
    if ((rc = kd_buf_puts(out, text)) != 0 || (rc = kd_buf_putc(out, '\n')) != 0)
        goto out;
out:
    return rc;
}

/* What logs are read: an experiment's (lines prefixed with their trial), a trial's or a task's
 * (lines as the process wrote them). */
enum what { W_TRIAL, W_EXPERIMENT, W_TASK };

static const char *const what_coll[] = {"/trials/", "/experiments/", "/tasks/"};
static const char *const what_name[] = {"trial", "experiment", "task"};

static void print_lines(const json_t *lines, enum what w)
{
    struct kd_buf b = KD_BUF_INIT(EVENT_MAX);
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l)
    {
        kd_buf_reset(&b);
        if (w == W_TASK) {
            const char *text = json_string_value(json_object_get(l, "line")) ?: "";
            if (kd_buf_puts(&b, text) == 0 && kd_buf_putc(&b, '\n') == 0)
                fwrite(b.data, 1, b.len, stdout);
        } else if (det_logs_format(l, w == W_EXPERIMENT, &b) == 0) {
            fwrite(b.data, 1, b.len, stdout);
        }
    }
    fflush(stdout);
    kd_buf_free(&b);
}

/* ".../namespaces/NS/trials/NAME/logs" (or experiments), then "?" */
static int base_path(struct kd_buf *p, const struct det_api *api, enum what w, const char *name,
                     const char *suffix)
{
    int rc = 0;
    if (kd_buf_puts(p, "/api/v1/namespaces/") != 0 || det_urlencode(p, api->ns) != 0 ||
        kd_buf_puts(p, what_coll[w]) != 0 || det_urlencode(p, name) != 0 ||
        kd_buf_printf(p, "/logs%s?", suffix) != 0)
        rc = KD_ETOOBIG;
    return rc;
}

static int add_grep(struct kd_buf *p, const char *grep)
{
    int rc = 0;
    if (grep != NULL && (kd_buf_puts(p, "&grep=") != 0 || det_urlencode(p, grep) != 0))
        rc = KD_ETOOBIG;
    return rc;
}

/* GET one page into *lines (a new reference); returns an exit code (errors printed). */
static int get_page(struct det_api *api, const char *path, json_t **lines, int64_t *last_id)
{
    json_t *ans = NULL;
    int rc = det_api_get(api, path, &ans);
    *lines = NULL;
    if (rc != 0)
        goto out;
    *lines = json_incref(json_object_get(ans, "logs"));
    if (!json_is_array(*lines)) {
        det_err("the controller API's answer has no logs array");
        json_decref(*lines);
        *lines = NULL;
        rc = DET_EXIT_ERROR;
        goto out;
    }
    if (last_id != NULL && json_is_integer(json_object_get(ans, "last_id")))
        *last_id = json_integer_value(json_object_get(ans, "last_id"));
out:
    json_decref(ans);
    return rc;
}

/* The whole log, page after page; *n gets the lines printed, *last the last id. */
static int print_all(struct det_api *api, enum what w, const char *name, const char *grep,
                     size_t *n, int64_t *last)
{
    int rc = DET_EXIT_OK;
    json_t *lines = NULL;
    struct kd_buf p = KD_BUF_INIT(8192);
    *n = 0;
    for (;;) {
        kd_buf_reset(&p);
        if (base_path(&p, api, w, name, "") != 0 ||
            kd_buf_printf(&p, "limit=%d&after=%lld", PAGE, (long long)*last) != 0 ||
            add_grep(&p, grep) != 0) {
            det_err("%s name or --grep too long", what_name[w]);
            rc = DET_EXIT_USAGE;
            goto out;
        }
        if ((rc = get_page(api, kd_buf_str(&p), &lines, last)) != 0)
            goto out;
        print_lines(lines, w);
        size_t got = json_array_size(lines);
        *n += got;
        json_decref(lines);
        lines = NULL;
        if (got < PAGE)
            break;
    }
out:
    json_decref(lines);
    kd_buf_free(&p);
    return rc;
}

/* The last `tail` lines, fetched backwards a page at a time, printed oldest first. */
static int print_tail(struct det_api *api, enum what w, const char *name, const char *grep,
                      long tail, size_t *n, int64_t *last)
{
    int rc = DET_EXIT_OK;
    json_t *all = json_array(), *lines = NULL;
    struct kd_buf p = KD_BUF_INIT(8192);
    int64_t before = 0;
    *n = 0;
    while ((long)json_array_size(all) < tail) {
        long want = tail - (long)json_array_size(all);
        if (want > PAGE)
            want = PAGE;
        kd_buf_reset(&p);
        if (base_path(&p, api, w, name, "") != 0 ||
            kd_buf_printf(&p, "tail=%ld&before=%lld", want, (long long)before) != 0 ||
            add_grep(&p, grep) != 0) {
            det_err("%s name or --grep too long", what_name[w]);
            rc = DET_EXIT_USAGE;
            goto out;
        }
        int64_t page_last = 0;
        if ((rc = get_page(api, kd_buf_str(&p), &lines, &page_last)) != 0)
            goto out;
        if (before == 0)
            *last = page_last; /* the newest line: -f goes on after it */
        size_t got = json_array_size(lines);
        if (got > 0) {
            before = json_integer_value(json_object_get(json_array_get(lines, 0), "id"));
            json_array_extend(lines, all);
            json_decref(all);
            all = lines;
            lines = NULL;
        }
        json_decref(lines);
        lines = NULL;
        if ((long)got < want)
            break;
    }
    print_lines(all, w);
    *n = json_array_size(all);
out:
    json_decref(all);
    json_decref(lines);
    kd_buf_free(&p);
    return rc;
}

/* ---- following ----------------------------------------------------------------------------- */

void det_sse_init(struct det_sse *s, det_sse_fn fn, void *ud)
{
    memset(s, 0, sizeof(*s));
    kd_buf_init(&s->line, EVENT_MAX);
    kd_buf_init(&s->data, EVENT_MAX);
    s->fn = fn;
    s->ud = ud;
}

void det_sse_free(struct det_sse *s)
{
    kd_buf_free(&s->line);
    kd_buf_free(&s->data);
}

/* One complete line of the stream (without its newline). */
static int sse_line(struct det_sse *s, const char *l, size_t n)
{
    int rc = 0;
    if (n == 0) {
        /* the end of an event: dispatch it when it had data */
        if (s->has_data)
            rc = s->fn(s->event[0] ? s->event : "message", kd_buf_str(&s->data), s->ud);
        s->event[0] = '\0';
        s->has_data = false;
        kd_buf_reset(&s->data);
        goto out;
    }
    if (l[0] == ':')
        goto out; /* a comment (": keepalive") */
    const char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = colon ? n - fl - 1 : 0;
    if (vl > 0 && v[0] == ' ') {
        v++;
        vl--;
    }
    if (fl == 5 && memcmp(l, "event", 5) == 0) {
        size_t k = vl < sizeof(s->event) - 1 ? vl : sizeof(s->event) - 1;
        memcpy(s->event, v, k);
        s->event[k] = '\0';
    } else if (fl == 4 && memcmp(l, "data", 4) == 0) {
        if ((s->has_data && kd_buf_putc(&s->data, '\n') != 0) ||
            kd_buf_append(&s->data, v, vl) != 0) {
            rc = KD_ETOOBIG;
            goto out;
        }
        s->has_data = true;
    } else if (fl == 2 && memcmp(l, "id", 2) == 0) {
        char id[32];
        size_t k = vl < sizeof(id) - 1 ? vl : sizeof(id) - 1;
        memcpy(id, v, k);
        id[k] = '\0';
        int64_t x;
        if (kd_parse_i64(id, &x) == 0)
            s->last_id = x;
    }
out:
    return rc;
}

int det_sse_feed(struct det_sse *s, const char *p, size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (p[i] == '\n') {
            size_t len = s->line.len;
            if (len > 0 && s->line.data[len - 1] == '\r')
                len--;
            rc = sse_line(s, len ? s->line.data : "", len);
            kd_buf_reset(&s->line);
        } else if (kd_buf_putc(&s->line, p[i]) != 0) {
            rc = KD_ETOOBIG;
        }
    }
    return rc;
}

struct follow {
    enum what w;
    bool ended;
    char state[32];
    int exit_code; /* a task's, from the end event; -1: none */
    long http;
    struct kd_buf errbody;
    struct det_sse sse;
};

/* An event of the stream: print lines, note the end, say errors. */
static int on_event(const char *event, const char *data, void *ud)
{
    struct follow *f = ud;
    json_t *j = json_loads(data, 0, NULL);
    if (strcmp(event, "logs") == 0) {
        print_lines(json_object_get(j, "logs"), f->w);
    } else if (strcmp(event, "end") == 0) {
        f->ended = true;
        if (json_is_integer(json_object_get(j, "exit_code")))
            f->exit_code = (int)json_integer_value(json_object_get(j, "exit_code"));
        kd_strlcpy(f->state, json_string_value(json_object_get(j, "state")) ?: "",
                   sizeof(f->state));
    } else if (strcmp(event, "error") == 0) {
        det_err("reading the logs: %s", json_string_value(json_object_get(j, "error")) ?: data);
    }
    json_decref(j);
    return 0;
}

static size_t on_stream(char *p, size_t size, size_t n, void *ud)
{
    struct follow *f = ud;
    size_t len = size * n;
    if (f->http != 200) {
        if (kd_buf_append(&f->errbody, p, len) != 0)
            return len; /* the answer's error, capped: the rest is dropped */
        return len;
    }
    return det_sse_feed(&f->sse, p, len) == 0 ? len : 0;
}

static size_t on_head(char *p, size_t size, size_t n, void *ud)
{
    struct follow *f = ud;
    size_t len = size * n;
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        f->http = sp != NULL ? strtol(sp + 1, NULL, 10) : 0;
    }
    return len;
}

/* Follow the stream after line `after` until the end event; reconnects when it breaks. */
static int follow(struct det_api *api, enum what w, const char *name, const char *grep,
                  int64_t after, int *exit_code)
{
    int rc = DET_EXIT_OK, fails = 0;
    struct kd_buf p = KD_BUF_INIT(8192);
    struct follow f = {.w = w, .exit_code = -1};
    char *auth = kd_xasprintf("Authorization: Bearer %s", api->token), *url = NULL;
    char lei[64], cerr[CURL_ERROR_SIZE];
    kd_buf_init(&f.errbody, 64 * 1024);
    det_sse_init(&f.sse, on_event, &f);
    f.sse.last_id = after;
    if (base_path(&p, api, w, name, "/stream") != 0 || add_grep(&p, grep) != 0) {
        det_err("%s name or --grep too long", what_name[w]);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    url = kd_xasprintf("%s%s", api->url, kd_buf_str(&p));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    while (!f.ended) {
        CURL *h = curl_easy_init();
        struct curl_slist *hl = NULL;
        if (h == NULL)
            kd_oom(1);
        snprintf(lei, sizeof(lei), "Last-Event-ID: %lld", (long long)f.sse.last_id);
        hl = curl_slist_append(hl, auth);
        hl = curl_slist_append(hl, "Accept: text/event-stream");
        hl = curl_slist_append(hl, lei);
        cerr[0] = '\0';
        f.http = 0;
        kd_buf_reset(&f.errbody);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        det_api_tls(api, h);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_USERAGENT, "kdet-det");
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &f);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_head);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &f);
        /* keepalives come every 15 s: a minute of silence is a dead connection */
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
        CURLcode cc = curl_easy_perform(h);
        curl_slist_free_all(hl);
        curl_easy_cleanup(h);
        if (f.ended)
            break;
        if (f.http != 0 && f.http != 200) {
            json_t *j = json_loads(kd_buf_str(&f.errbody), 0, NULL);
            const char *msg = json_string_value(json_object_get(j, "error"));
            det_err("following the logs: the controller API answered %ld%s%s", f.http,
                    msg ? ": " : "", msg ? msg : "");
            rc = f.http == 401   ? DET_EXIT_CLUSTER
                 : f.http == 404 ? DET_EXIT_NOTFOUND
                 : f.http == 400 ? DET_EXIT_USAGE
                                 : DET_EXIT_ERROR;
            json_decref(j);
            goto out;
        }
        if (++fails > RECONNECT_MAX) {
            det_err("following the logs: the stream keeps breaking (%s); giving up",
                    cerr[0] ? cerr : curl_easy_strerror(cc));
            rc = DET_EXIT_CLUSTER;
            goto out;
        }
        kd_sleep_ms(RECONNECT_MS); /* then resume after the last line printed */
        if (f.http == 200)
            fails = 0;
    }
out:
    if (exit_code != NULL)
        *exit_code = f.exit_code;
    det_sse_free(&f.sse);
    kd_buf_free(&f.errbody);
    kd_buf_free(&p);
    free(url);
    if (auth != NULL) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    return rc;
}

static int logs(struct det_api *api, enum what w, const char *name, bool follow_, long tail,
                const char *grep, size_t *printed, int *exit_code)
{
    int rc = DET_EXIT_OK;
    size_t n = 0;
    int64_t last = 0;
    if (exit_code != NULL)
        *exit_code = -1;
    if (tail >= 0)
        rc = print_tail(api, w, name, grep, tail, &n, &last);
    else if (!follow_)
        rc = print_all(api, w, name, grep, &n, &last);
    if (rc == DET_EXIT_OK && follow_)
        rc = follow(api, w, name, grep, last, exit_code);
    if (printed != NULL)
        *printed = n;
    return rc;
}

int det_api_logs(struct det_api *api, bool experiment, const char *name, bool follow_, long tail,
                 const char *grep, size_t *printed)
{
    return logs(api, experiment ? W_EXPERIMENT : W_TRIAL, name, follow_, tail, grep, printed, NULL);
}

int det_api_task_logs(struct det_api *api, const char *name, bool follow_, long tail,
                      const char *grep, size_t *printed, int *exit_code)
{
    return logs(api, W_TASK, name, follow_, tail, grep, printed, exit_code);
}

int det_logs_api_or_pods(struct det_verb *v, bool experiment, const struct kd_k8s_gvr *gvr,
                         long tail, bool *done)
{
    char why[1024] = "";
    const char *what = experiment ? "experiment" : "trial";
    size_t n = 0;
    int rc = DET_EXIT_OK;
    *done = false;
    if (det_api_open_quiet(&v->a, experiment ? "det experiment logs" : "det trial logs", &v->api,
                           why, sizeof(why)) != 0)
        goto out;      /* no controller API: the pods' logs */
    v->api.why = NULL; /* from here on errors are printed */
    if ((rc = det_resolve_if_kube(v, gvr, what, v->a.pos[0], &v->name)) != 0) {
        *done = true;
        goto out;
    }
    rc = det_api_logs(&v->api, experiment, v->name, v->a.follow, tail, v->a.grep, &n);
    if (rc == DET_EXIT_CLUSTER && v->k.c != NULL) {
        det_err("warning: reading the pods' logs instead (they hold only what the pods still "
                "have)");
        free(v->name);
        v->name = NULL;
        rc = DET_EXIT_OK;
        goto out;
    }
    *done = true;
    if (rc == DET_EXIT_OK && n == 0 && !v->a.follow)
        det_err("%s %s has no stored logs%s", what, v->name,
                v->a.grep != NULL ? " matching --grep" : " yet");
out:
    return rc;
}
