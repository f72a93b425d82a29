/* A job's queue change as a merge patch (jobupdate.h). */
#include "k8s/jobupdate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"

static bool is_task(const json_t *job)
{
    const char *k = json_string_value(json_object_get(job, "kind"));
    return k != NULL && strcmp(k, "Task") == 0;
}

int64_t kd_queue_priority(const json_t *job)
{
    json_t *spec = json_object_get(job, "spec");
    if (is_task(job))
        spec = json_object_get(spec, "config");
    json_t *p = json_object_get(json_object_get(spec, "resources"), "priority");
    if (json_is_integer(p) && json_integer_value(p) >= 1 && json_integer_value(p) <= 99)
        return json_integer_value(p);
    return 0;
}

bool kd_queue_pool_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return false;
    return true;
}

static void say(char *buf, size_t len, const char *fmt, ...) KD_PRINTF(3, 4);
static void say(char *buf, size_t len, const char *fmt, ...)
{
    if (buf == NULL || len == 0)
        return;
    size_t n = strlen(buf);
    if (n + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

json_t *kd_queue_update_patch(const json_t *job, const json_t *other,
                              const struct kd_queue_update *u, char *said, size_t len)
{
    json_t *patch = json_object(), *spec = json_object(), *res = json_object();
    if (said != NULL && len > 0)
        said[0] = '\0';
    if (u->priority > 0) {
        json_object_set_new(res, "priority", json_integer(u->priority));
        say(said, len, "priority %lld", (long long)u->priority);
    }
    if (u->resource_pool != NULL) {
        json_object_set_new(res, "resource_pool", json_string(u->resource_pool));
        say(said, len, "%sresource pool %s", said && said[0] ? ", " : "", u->resource_pool);
    }
    const char *rel = u->ahead_of ? u->ahead_of : u->behind_of;
    if (rel != NULL) {
        json_object_set_new(patch, "metadata",
                            json_pack("{s:{s:s?,s:s?}}", "annotations", KD_ANN_AHEAD_OF,
                                      u->ahead_of ? rel : NULL, KD_ANN_BEHIND_OF,
                                      u->ahead_of ? NULL : rel));
        say(said, len, "%s%s %s", said && said[0] ? ", " : "", u->ahead_of ? "ahead of" : "behind",
            rel);
        /* the position counts within a priority: take the other job's */
        int64_t mine = kd_queue_priority(job), theirs = kd_queue_priority(other);
        if (mine == 0)
            mine = KD_QUEUE_DEFAULT_PRIORITY;
        if (theirs == 0)
            theirs = KD_QUEUE_DEFAULT_PRIORITY;
        if (u->priority == 0 && mine != theirs) {
            json_object_set_new(res, "priority", json_integer(theirs));
            say(said, len, " (priority %lld, as %s's)", (long long)theirs, rel);
        }
    }
    if (json_object_size(res) > 0 && is_task(job)) /* a task's resources are in its config */
        json_object_set_new(spec, "config", json_pack("{s:o}", "resources", res));
    else if (json_object_size(res) > 0)
        json_object_set_new(spec, "resources", res);
    else
        json_decref(res);
    if (json_object_size(spec) > 0)
        json_object_set_new(patch, "spec", spec);
    else
        json_decref(spec);
    return patch;
}
