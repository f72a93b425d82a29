/*
 * Event recording: one Event object per (object, reason, message), named
 * like the real ones (<object>.<hex>), with count and timestamps updated
 * on repeats, and expiry after a TTL as the API server's --event-ttl does.
 */
#include "json.h"
#include "events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/time.h"
#include "store.h"

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; s != NULL && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

int kd_events_record(struct kd_store *st, const json_t *obj, const char *kind,
                     const char *api_version, const char *type, const char *reason,
                     const char *message, const char *component, const char *host)
{
    const json_t *md = json_object_get(obj, "metadata");
    const char *ns = kd_jstr(md, "namespace") ? kd_jstr(md, "namespace") : "default";
    const char *name = kd_jstr(md, "name") ? kd_jstr(md, "name") : "";
    uint64_t h = fnv1a(fnv1a(fnv1a(14695981039346656037ULL, kd_jstr(md, "uid")), reason), message);
    char ev_name[320], now[40];
    snprintf(ev_name, sizeof(ev_name), "%.200s.%016llx", name, (unsigned long long)h);
    kd_time_rfc3339(kd_wall_ms(), 0, now, sizeof(now));
    json_t *cur = kd_store_get(st, "/events", ns, ev_name);
    json_t *ev;
    if (cur != NULL) {
        ev = json_deep_copy(cur);
        json_object_set_new(ev, "count",
                            json_integer(json_integer_value(json_object_get(cur, "count")) + 1));
        json_object_set_new(ev, "lastTimestamp", json_string(now));
    } else {
        char uid[40];
        snprintf(uid, sizeof(uid), "%08llx-%04llx-4%03llx-8%03llx-%012llx",
                 (unsigned long long)(h >> 32), (unsigned long long)(h >> 16 & 0xffff),
                 (unsigned long long)(h & 0xfff), (unsigned long long)(kd_wall_ms() & 0xfff),
                 (unsigned long long)(kd_mono_ns() & 0xffffffffffffULL));
        ev =
            json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:s},s:{s:s,s:s,s:s,s:s?,s:s,s:s?},s:s,s:s,"
                      "s:{s:s,s:s},s:s,s:s,s:i,s:s,s:n,s:s,s:s}",
                      "kind", "Event", "apiVersion", "v1", "metadata", "name", ev_name, "namespace",
                      ns, "uid", uid, "creationTimestamp", now, "involvedObject", "kind", kind,
                      "namespace", ns, "name", name, "uid", kd_jstr(md, "uid"), "apiVersion",
                      api_version, "resourceVersion", kd_jstr(md, "resourceVersion"), "reason",
                      reason, "message", message, "source", "component", component, "host", host,
                      "firstTimestamp", now, "lastTimestamp", now, "count", 1, "type", type,
                      "eventTime", "reportingComponent", component, "reportingInstance", host);
    }
    return kd_store_put(st, "/events", ns, ev_name, ev, NULL);
}

int kd_events_expire(struct kd_store *st, int64_t ttl_s)
{
    json_t **items = NULL;
    size_t n = kd_store_list(st, "/events", NULL, &items);
    json_t *gone = json_array();
    int64_t now = kd_wall_ms();
    for (size_t i = 0; i < n; i++) {
        int64_t ms;
        const char *last = kd_jstr(items[i], "lastTimestamp");
        if (last != NULL && kd_time_parse_rfc3339(last, &ms) == 0 && now - ms > ttl_s * 1000)
            json_array_append(gone, json_object_get(items[i], "metadata"));
    }
    free(items);
    int count = 0;
    size_t i;
    json_t *m;
    json_array_foreach(gone, i, m)
    {
        if (kd_store_delete(st, "/events", kd_jstr(m, "namespace"), kd_jstr(m, "name"), NULL) == 0)
            count++;
    }
    json_decref(gone);
    return count;
}
