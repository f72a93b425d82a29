/*
 * Reading in kdet-local's API server: get, list (selectors, tables, pagination,
 * resourceVersion semantics) and watch streams from the store's event log.
 */
#include "apiint.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/alloc.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "events.h"
#include "http/http.h"
#include "kubelet.h"
#include "logstream.h"
#include "logproxy.h"
#include "openapi/openapi.h"
#include "validate.h"
#include "patch.h"
#include "proto.h"
#include "registry.h"
#include "scheduler.h"
#include "selector.h"
#include "table.h"
#include "store.h"

/* ---- get / list -------------------------------------------------------------------------------
 */

void kd_api__do_get(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    kd_store_lock(api->st);
    json_t *obj = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    json_t *out = obj != NULL ? kd_api__present(t->rt, obj) : NULL;
    kd_store_unlock(api->st);
    if (out == NULL) {
        kd_api__not_found(r, t->rt, t->name);
        return;
    }
    if (kd_api__wants_table(r) && t->sub == NULL) {
        json_t *tbl =
            kd_table_build(t->rt, &out, 1, kd_http_query(r, "includeObject"), NULL, kd_wall_ms());
        json_decref(out);
        out = tbl;
    }
    kd_http_respond_json(r, 200, out);
    json_decref(out);
}

int kd_api__parse_selectors(struct kd_http_req *r, const struct kd_api_target *t,
                            struct kd_selector **ls, struct kd_selector **fs)
{
    char err[KD_ERRLEN];
    *ls = NULL;
    *fs = NULL;
    if (kd_selector_parse_labels(kd_http_query(r, "labelSelector"), ls, err) != 0) {
        char msg[KD_ERRLEN + 100];
        snprintf(msg, sizeof(msg), "unable to parse labelSelector \"%s\": %s",
                 kd_http_query(r, "labelSelector"), err);
        kd_api__bad_request(r, msg);
        return KD_EINVAL;
    }
    if (kd_selector_parse_fields(kd_http_query(r, "fieldSelector"), t->rt->field_labels, fs, err) !=
        0) {
        kd_selector_free(*ls);
        *ls = NULL;
        kd_api__bad_request(r, err);
        return KD_EINVAL;
    }
    return 0;
}

/* kubectl get asks for server-side printing with Accept: ...;as=Table;... */
bool kd_api__wants_table(struct kd_http_req *r)
{
    const char *a = kd_http_header(r, "Accept");
    return a != NULL && strstr(a, "as=Table") != NULL;
}

static json_t *table_of(const struct kd_restype *rt, json_t *items, struct kd_http_req *r,
                        const char *rv)
{
    size_t n = json_array_size(items);
    json_t **v = kd_xcalloc(n + 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(items, i);
    json_t *t = kd_table_build(rt, v, n, kd_http_query(r, "includeObject"), rv, kd_wall_ms());
    free(v);
    return t;
}

bool kd_api__matches(const struct kd_selector *ls, const struct kd_selector *fs, const json_t *o)
{
    return kd_selector_match(ls, o) && kd_selector_match(fs, o);
}

static char *b64(const char *s)
{
    size_t n = strlen(s);
    char *out = kd_xmalloc(4 * ((n + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
    return out;
}

static json_t *unb64_json(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 4096 || n % 4 != 0)
        return NULL;
    unsigned char *buf = kd_xmalloc(n + 1);
    int len = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n);
    json_t *j = NULL;
    if (len > 0) {
        while (len > 0 && buf[len - 1] == '\0')
            len--;
        j = json_loadb((const char *)buf, (size_t)len, 0, NULL);
    }
    free(buf);
    return j;
}

static const char *obj_key_ns(const json_t *o)
{
    const char *ns = kd_jstr(json_object_get(o, "metadata"), "namespace");
    return ns != NULL ? ns : "";
}

void kd_api__do_list(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    struct kd_selector *ls = NULL, *fs = NULL;
    json_t *list = NULL;
    json_t **items = NULL;
    char *start = NULL;
    if (kd_api__parse_selectors(r, t, &ls, &fs) != 0)
        goto out;
    int64_t limit = 0;
    const char *lim = kd_http_query(r, "limit");
    if (lim != NULL && lim[0] != '\0' && (kd_parse_i64(lim, &limit) < 0 || limit < 0)) {
        kd_api__bad_request(r, "limit: must be a non-negative integer");
        goto out;
    }
    const char *rvq = kd_http_query(r, "resourceVersion");
    const char *rvm = kd_http_query(r, "resourceVersionMatch");
    bool has_rv = rvq != NULL && rvq[0] != '\0';
    uint64_t want_rv = 0;
    if (rvm != NULL && rvm[0] != '\0') {
        const char *why = NULL, *field = "resourceVersionMatch";
        if (strcmp(rvm, "Exact") != 0 && strcmp(rvm, "NotOlderThan") != 0)
            why = "Unsupported value: must be one of \"Exact\", \"NotOlderThan\"";
        else if (!has_rv)
            why = "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided";
        else if (strcmp(rvm, "Exact") == 0 && strcmp(rvq, "0") == 0)
            why = "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion "
                  "\"0\"";
        if (why != NULL) {
            char msg[400];
            snprintf(msg, sizeof(msg), "ListOptions.meta.k8s.io \"\" is invalid: %s: %s", field,
                     why);
            json_t *d = json_pack("{s:s,s:s,s:[{s:s,s:s,s:s}]}", "group", "meta.k8s.io", "kind",
                                  "ListOptions", "causes", "reason", "FieldValueInvalid", "message",
                                  why, "field", field);
            kd_api__respond_status(r, 422, "Invalid", msg, d);
            goto out;
        }
    }
    if (has_rv && kd_parse_u64(rvq, &want_rv) < 0) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "resourceVersion: Invalid value: \"%.200s\": must be a resourceVersion returned "
                 "by this server",
                 rvq);
        kd_api__bad_request(r, msg);
        goto out;
    }
    const char *cont = kd_http_query(r, "continue");
    if (cont != NULL && cont[0] != '\0') {
        json_t *tok = unb64_json(cont);
        const char *st = kd_jstr(tok, "start");
        if (st == NULL) {
            json_decref(tok);
            kd_api__bad_request(
                r, "continue key is not valid: the token is not a continue token issued "
                   "by this server");
            goto out;
        }
        start = kd_xstrdup(st);
        json_decref(tok);
    }
    kd_store_lock(api->st);
    if (want_rv > kd_store_rv(api->st)) {
        /* A resourceVersion from the future: wait a little for it, as the watch cache does. */
        int64_t deadline = kd_mono_ms() + LIST_RV_WAIT_MS;
        for (int64_t left = LIST_RV_WAIT_MS; left > 0 && want_rv > kd_store_rv(api->st);
             left = deadline - kd_mono_ms())
            kd_store_wait(api->st, (int)left);
        if (want_rv > kd_store_rv(api->st)) {
            char msg[200];
            snprintf(msg, sizeof(msg), "Too large resource version: %llu, current: %llu",
                     (unsigned long long)want_rv, (unsigned long long)kd_store_rv(api->st));
            kd_store_unlock(api->st);
            json_t *d =
                json_pack("{s:[{s:s,s:s}],s:i}", "causes", "reason", "ResourceVersionTooLarge",
                          "message", "Too large resource version", "retryAfterSeconds", 1);
            kd_api__respond_status(r, 504, "Timeout", msg, d);
            goto out;
        }
    }
    uint64_t rv = kd_store_rv(api->st);
    size_t n = kd_store_list(api->st, t->rt->gr, t->ns, &items);
    json_t *arr = json_array();
    size_t taken = 0, remaining = 0;
    char *next = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *o = items[i];
        if (start != NULL) {
            char *k = kd_xasprintf("%s/%s", obj_key_ns(o),
                                   kd_jstr(json_object_get(o, "metadata"), "name"));
            int c = strcmp(k, start);
            free(k);
            if (c <= 0)
                continue;
        }
        if (!kd_api__matches(ls, fs, o))
            continue;
        if (limit > 0 && taken == (size_t)limit) {
            remaining++;
            continue;
        }
        json_t *p = kd_api__present(t->rt, o);
        if (t->rt->builtin) {
            /* The real server omits kind/apiVersion from the items of built-in lists. */
            json_t *c = json_copy(p);
            json_decref(p);
            p = c;
            json_object_del(p, "kind");
            json_object_del(p, "apiVersion");
        }
        json_array_append_new(arr, p);
        taken++;
        if (limit > 0 && taken == (size_t)limit) {
            free(next);
            next = kd_xasprintf("%s/%s", obj_key_ns(o),
                                kd_jstr(json_object_get(o, "metadata"), "name"));
        }
    }
    kd_store_unlock(api->st);
    char av[256], rvs[32];
    kd_restype_api_version(t->rt, av, sizeof(av));
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    char *lk = kd_xasprintf("%sList", t->rt->kind);
    list = json_pack("{s:s,s:s,s:{s:s},s:o}", "kind", lk, "apiVersion", av, "metadata",
                     "resourceVersion", rvs, "items", arr);
    free(lk);
    if (remaining > 0 && next != NULL) {
        json_t *tok =
            json_pack("{s:s,s:I,s:s}", "v", "meta.k8s.io/v1", "rv", (json_int_t)rv, "start", next);
        char *s = json_dumps(tok, JSON_COMPACT);
        char *enc = b64(s);
        json_t *lm = json_object_get(list, "metadata");
        json_object_set_new(lm, "continue", json_string(enc));
        if (ls == NULL || kd_http_query(r, "labelSelector") == NULL)
            json_object_set_new(lm, "remainingItemCount", json_integer((json_int_t)remaining));
        free(enc);
        free(s);
        json_decref(tok);
    }
    free(next);
    if (kd_api__wants_table(r)) {
        json_t *tbl = table_of(t->rt, arr, r, rvs);
        json_t *cont_tok = json_object_get(json_object_get(list, "metadata"), "continue");
        if (cont_tok != NULL)
            json_object_set(json_object_get(tbl, "metadata"), "continue", cont_tok);
        json_decref(list);
        list = tbl;
    }
    kd_http_respond_json(r, 200, list);
out:
    free(items);
    free(start);
    json_decref(list);
    kd_selector_free(ls);
    kd_selector_free(fs);
}

/* ---- watch -------------------------------------------------------------------------------------
 */

struct watch {
    struct kd_api *api;
    const struct kd_restype *rt;
    char *ns;
    struct kd_selector *ls, *fs;
    uint64_t cursor;
    bool bookmarks;
    bool ended;
    int64_t deadline_ms;
    int64_t next_bookmark_ms;
    struct kd_buf out;
    bool table;    /* events carry one-row Tables (kubectl get -w) */
    char *include; /* includeObject for those Tables */
};

static void watch_free(void *p)
{
    struct watch *w = p;
    if (w == NULL)
        return;
    free(w->ns);
    free(w->include);
    kd_selector_free(w->ls);
    kd_selector_free(w->fs);
    kd_buf_free(&w->out);
    free(w);
}

static void watch_emit(struct watch *w, const char *type, json_t *obj /* stolen */)
{
    if (w->table && type[0] != 'B' && type[0] != 'E') {
        json_t *t = kd_table_build(w->rt, &obj, 1, w->include, NULL, kd_wall_ms());
        json_decref(obj);
        obj = t;
    }
    json_t *ev = json_pack("{s:s,s:o}", "type", type, "object", obj);
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (s == NULL)
        kd_oom(0);
    if (kd_buf_puts(&w->out, s) < 0 || kd_buf_putc(&w->out, '\n') < 0) {
        KD_WARN("watch buffer full; ending the watch", "resource=%s", w->rt->resource);
        w->ended = true;
    }
    free(s);
}

static void watch_gone(struct watch *w, uint64_t asked, uint64_t oldest)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "too old resource version: %llu (%llu)", (unsigned long long)asked,
             (unsigned long long)oldest);
    watch_emit(w, "ERROR", kd_api__status_new(410, "Expired", msg, NULL));
    w->ended = true;
}

/* Scan new events (lock held); appends lines to w->out. */
static void watch_scan(struct watch *w)
{
    struct kd_store *st = w->api->st;
    for (int batch = 0; batch < 256 && !w->ended; batch++) {
        const struct kd_event *ev;
        uint64_t oldest = 0;
        int rc = kd_store_next_event(st, w->cursor, &ev, &oldest);
        if (rc == KD_EGONE) {
            watch_gone(w, w->cursor, oldest);
            return;
        }
        if (rc != 0) {
            w->cursor = kd_store_rv(st);
            return;
        }
        w->cursor = ev->rv;
        if (strcmp(ev->gr, w->rt->gr) != 0)
            continue;
        if (w->ns != NULL && strcmp(obj_key_ns(ev->obj), w->ns) != 0)
            continue;
        bool now = kd_api__matches(w->ls, w->fs, ev->obj);
        bool before = ev->prev != NULL && kd_api__matches(w->ls, w->fs, ev->prev);
        const char *type = NULL;
        switch (ev->type) {
        case KD_EV_ADDED: type = now ? "ADDED" : NULL; break;
        case KD_EV_MODIFIED:
            type = now && before ? "MODIFIED" : now ? "ADDED" : before ? "DELETED" : NULL;
            break;
        case KD_EV_DELETED: type = before || now ? "DELETED" : NULL; break;
        }
        if (type != NULL)
            watch_emit(w, type, kd_api__present(w->rt, ev->obj));
    }
}

static ssize_t watch_read(void *ctx, char *buf, size_t max)
{
    struct watch *w = ctx;
    ssize_t n = 0;
    if (w->out.len == 0 && !w->ended) {
        int64_t now = kd_mono_ms();
        if (now >= w->deadline_ms || atomic_load(&w->api->stop))
            return -1;
        struct kd_store *st = w->api->st;
        kd_store_lock(st);
        watch_scan(w);
        if (w->out.len == 0 && !w->ended) {
            if (w->bookmarks && now >= w->next_bookmark_ms) {
                char rvs[32], av[256];
                snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)w->cursor);
                json_t *bm = json_pack("{s:s,s:s,s:{s:s}}", "kind", w->rt->kind, "apiVersion",
                                       kd_restype_api_version(w->rt, av, sizeof(av)), "metadata",
                                       "resourceVersion", rvs);
                watch_emit(w, "BOOKMARK", bm);
                w->next_bookmark_ms = now + w->api->bookmark_ms;
            } else {
                int64_t wait = w->deadline_ms - now;
                if (w->bookmarks && w->next_bookmark_ms - now < wait)
                    wait = w->next_bookmark_ms - now;
                kd_store_wait(st, (int)(wait < 1000 ? (wait < 1 ? 1 : wait) : 1000));
                watch_scan(w);
            }
        }
        kd_store_unlock(st);
    }
    if (w->out.len > 0) {
        n = (ssize_t)(w->out.len < max ? w->out.len : max);
        memcpy(buf, w->out.data, (size_t)n);
        kd_buf_consume(&w->out, (size_t)n);
        return n;
    }
    return w->ended ? -1 : 0;
}

void kd_api__do_watch(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    struct watch *w = kd_xcalloc(1, sizeof(*w));
    w->api = api;
    w->rt = t->rt;
    w->ns = t->ns != NULL ? kd_xstrdup(t->ns) : NULL;
    kd_buf_init(&w->out, MAX_WATCH_BUF);
    if (kd_api__parse_selectors(r, t, &w->ls, &w->fs) != 0)
        goto fail;
    if (t->name != NULL) {
        /* /watch/.../NAME: a field selector on the name. */
        char err[KD_ERRLEN];
        char *fsel = kd_xasprintf("metadata.name=%s", t->name);
        kd_selector_free(w->fs);
        w->fs = NULL;
        int rc = kd_selector_parse_fields(fsel, NULL, &w->fs, err);
        free(fsel);
        if (rc != 0) {
            kd_api__bad_request(r, err);
            goto fail;
        }
    }
    const char *rvq = kd_http_query(r, "resourceVersion");
    uint64_t from = 0;
    bool initial = rvq == NULL || rvq[0] == '\0' || strcmp(rvq, "0") == 0;
    if (!initial && kd_parse_u64(rvq, &from) < 0) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "resourceVersion: Invalid value: \"%.200s\": must be a "
                 "resourceVersion returned by this server",
                 rvq);
        kd_api__bad_request(r, msg);
        goto fail;
    }
    int64_t timeout = DEFAULT_WATCH_TIMEOUT_S;
    const char *tq = kd_http_query(r, "timeoutSeconds");
    if (tq != NULL && (kd_parse_i64(tq, &timeout) < 0 || timeout < 0)) {
        kd_api__bad_request(r, "timeoutSeconds: must be a non-negative integer");
        goto fail;
    }
    if (timeout == 0)
        timeout = DEFAULT_WATCH_TIMEOUT_S;
    w->deadline_ms = kd_mono_ms() + timeout * 1000;
    w->bookmarks = kd_api__is_true(kd_http_query(r, "allowWatchBookmarks"));
    w->table = kd_api__wants_table(r);
    if (kd_http_query(r, "includeObject") != NULL)
        w->include = kd_xstrdup(kd_http_query(r, "includeObject"));
    w->next_bookmark_ms = kd_mono_ms() + api->bookmark_ms;
    kd_store_lock(api->st);
    if (initial) {
        json_t **items = NULL;
        size_t n = kd_store_list(api->st, t->rt->gr, t->ns, &items);
        for (size_t i = 0; i < n; i++) {
            if (kd_api__matches(w->ls, w->fs, items[i]))
                watch_emit(w, "ADDED", kd_api__present(t->rt, items[i]));
        }
        free(items);
        w->cursor = kd_store_rv(api->st);
    } else {
        w->cursor = from;
        const struct kd_event *ev;
        uint64_t oldest = 0;
        if (kd_store_next_event(api->st, from, &ev, &oldest) == KD_EGONE)
            watch_gone(w, from, oldest);
    }
    kd_store_unlock(api->st);
    kd_http_respond_stream(r, 200, "application/json", watch_read, w, watch_free);
    return;
fail:
    watch_free(w);
}
