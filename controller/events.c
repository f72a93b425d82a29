/*
 * Events about Experiments, Trials and Tasks: the decision (kd_event_for_change),
 * the object (kd_event_object), and the sender thread with its bounded
 * queue.
 */
#include "events.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

struct state_event {
    const char *state, *type, *reason;
};

static const struct state_event state_events[] = {
    {"QUEUED", "Normal", "Queued"},
    {"ACTIVE", "Normal", "Running"},
    {"PAUSED", "Normal", "Paused"},
    {"STOPPING_COMPLETED", "Normal", "Stopping"},
    {"STOPPING_CANCELED", "Normal", "Stopping"},
    {"STOPPING_KILLED", "Normal", "Stopping"},
    {"STOPPING_ERROR", "Warning", "Stopping"},
    {"COMPLETED", "Normal", "Completed"},
    {"CANCELED", "Normal", "Canceled"},
    {"ERROR", "Warning", "Failed"},
    /* Tasks (TERMINATED: by its end reason, below) */
    {"STARTING", "Normal", "Starting"},
    {"RUNNING", "Normal", "Running"},
    {"TERMINATING", "Normal", "Terminating"},
};

/* A Task's end, by status.endReason: idle and killed tasks say so in the reason. */
static const struct state_event task_ends[] = {
    {"Completed", "Normal", "Completed"}, {"Failed", "Warning", "Failed"},
    {"Killed", "Normal", "Killed"},       {"IdleTimeout", "Normal", "IdleTimeout"},
    {"Error", "Warning", "Failed"},
};

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

bool kd_event_for_change(const char *kind, const json_t *old_status, const json_t *new_status,
                         struct kd_event *out)
{
    const char *was = str(old_status, "state"), *now = str(new_status, "state");
    const char *msg = str(new_status, "message");
    json_t * or = json_object_get(old_status, "restarts"),
             *nr = json_object_get(new_status, "restarts");
    memset(out, 0, sizeof(*out));
    if (json_is_integer(nr) && json_integer_value(nr) > json_integer_value(or)) {
        /* a failed attempt was restarted (the state may stay the same) */
        out->type = "Warning";
        out->reason = "Restarted";
        snprintf(out->message, sizeof(out->message),
                 "%s restarted (restart %" JSON_INTEGER_FORMAT ")%s%s", kind,
                 json_integer_value(nr), msg != NULL && msg[0] ? ": " : "", msg != NULL ? msg : "");
        return true;
    }
    if (now == NULL || (was != NULL && strcmp(was, now) == 0))
        return false;
    const char *why = str(new_status, "endReason");
    for (size_t i = 0; strcmp(now, "TERMINATED") == 0 && why != NULL &&
                       i < sizeof(task_ends) / sizeof(task_ends[0]);
         i++) {
        if (strcmp(task_ends[i].state, why) != 0)
            continue;
        out->type = task_ends[i].type;
        out->reason = task_ends[i].reason;
        snprintf(out->message, sizeof(out->message), "%s %s -> TERMINATED (%s)%s%s", kind,
                 was != NULL ? was : "(new)", why, msg != NULL && msg[0] ? ": " : "",
                 msg != NULL ? msg : "");
        return true;
    }
    for (size_t i = 0; i < sizeof(state_events) / sizeof(state_events[0]); i++) {
        if (strcmp(state_events[i].state, now) != 0)
            continue;
        out->type = state_events[i].type;
        out->reason = state_events[i].reason;
        snprintf(out->message, sizeof(out->message), "%s %s -> %s%s%s", kind,
                 was != NULL ? was : "(new)", now, msg != NULL && msg[0] ? ": " : "",
                 msg != NULL ? msg : "");
        return true;
    }
    return false;
}

bool kd_event_history(const json_t *old_status, const json_t *new_status, struct kd_history *out)
{
    struct kd_event ev;
    memset(out, 0, sizeof(*out));
    if (!kd_event_for_change("Trial", old_status, new_status, &ev))
        return false;
    const char *was = str(old_status, "state"), *now = str(new_status, "state");
    const char *msg = str(new_status, "message");
    bool restart = strcmp(ev.reason, "Restarted") == 0;
    snprintf(out->decision, sizeof(out->decision), "%s", restart ? "restart" : now);
    snprintf(out->reason, sizeof(out->reason), "%s", ev.message);
    out->details = json_pack("{s:s?,s:s?}", "from", was, "to", now != NULL ? now : was);
    if (json_object_get(out->details, "from") == NULL)
        json_object_set_new(out->details, "from", json_null());
    if (restart)
        json_object_set(out->details, "restarts", json_object_get(new_status, "restarts"));
    if (msg != NULL && msg[0] != '\0')
        json_object_set_new(out->details, "message", json_string(msg));
    return true;
}

static void rfc3339(int64_t ms, char *buf, size_t n)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

json_t *kd_event_object(const json_t *obj, const char *api_version, const char *kind,
                        const struct kd_event *ev, const char *component, int64_t now_ms,
                        unsigned seq)
{
    const json_t *md = json_object_get(obj, "metadata");
    const char *name = str(md, "name"), *ns = str(md, "namespace");
    char ename[254], ts[40];
    snprintf(ename, sizeof(ename), "%.*s.%" PRIx64 "%04x", 220, name != NULL ? name : "object",
             (uint64_t)now_ms, seq & 0xffffu);
    rfc3339(now_ms, ts, sizeof(ts));
    json_t *inv = json_pack("{s:s?,s:s?,s:s?,s:s?,s:s?,s:s?}", "apiVersion", api_version, "kind",
                            kind, "name", name, "namespace", ns, "uid", str(md, "uid"),
                            "resourceVersion", str(md, "resourceVersion"));
    return json_pack("{s:s,s:s,s:{s:s,s:s?},s:o,s:s,s:s,s:s,s:{s:s},s:s,s:s,s:i,s:s}", "apiVersion",
                     "v1", "kind", "Event", "metadata", "name", ename, "namespace", ns,
                     "involvedObject", inv, "reason", ev->reason, "message", ev->message, "type",
                     ev->type, "source", "component", component, "firstTimestamp", ts,
                     "lastTimestamp", ts, "count", 1, "reportingComponent", component);
}

/* ---- the sender ------------------------------------------------------------------------- */

struct kd_events {
    struct kd_k8s_client *client;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t **q; /* ring of Event objects */
    size_t cap, head, len;
    bool stopping;
    int64_t drain_until_ms;
    unsigned seq;
    unsigned long long posted, failed, dropped;
};

static void *sender(void *p)
{
    struct kd_events *e = p;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (e->len == 0 && !e->stopping)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->len == 0 || (e->stopping && kd_mono_ms() > e->drain_until_ms))
            break;
        json_t *ev = e->q[e->head];
        e->head = (e->head + 1) % e->cap;
        e->len--;
        pthread_mutex_unlock(&e->mu);
        char err[KD_ERRLEN] = "";
        int rc = kd_k8s_create(e->client, &KD_K8S_EVENTS, NULL, ev, NULL, NULL, err);
        if (rc != 0)
            KD_DEBUG("event not posted", "err=%s detail=%s", kd_err_name(rc), kd_logq(err));
        json_decref(ev);
        pthread_mutex_lock(&e->mu);
        if (rc == 0)
            e->posted++;
        else
            e->failed++;
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

struct kd_events *kd_events_start(struct kd_k8s_client *client, size_t max_queue)
{
    struct kd_events *e = kd_xcalloc(1, sizeof(*e));
    e->client = client;
    e->cap = max_queue ? max_queue : 1024;
    e->q = kd_xcalloc(e->cap, sizeof(*e->q));
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (pthread_create(&e->thread, NULL, sender, e) != 0) {
        KD_WARN("cannot start the event sender; Events are off", "");
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e->q);
        free(e);
        return NULL;
    }
    return e;
}

void kd_events_emit(struct kd_events *e, const json_t *obj, const char *api_version,
                    const char *kind, const struct kd_event *ev)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    if (e->stopping || e->len == e->cap) {
        e->dropped++;
    } else {
        json_t *o =
            kd_event_object(obj, api_version, kind, ev, "kdet-controller", kd_wall_ms(), e->seq++);
        e->q[(e->head + e->len) % e->cap] = o;
        e->len++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

void kd_events_stop(struct kd_events *e, long drain_ms)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    e->drain_until_ms = kd_mono_ms() + drain_ms;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    KD_INFO("event sender stopped", "posted=%llu failed=%llu dropped=%llu", e->posted, e->failed,
            e->dropped);
    while (e->len > 0) {
        json_decref(e->q[e->head]);
        e->head = (e->head + 1) % e->cap;
        e->len--;
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->q);
    free(e);
}
