/* The queue position of a kdet Experiment (position.h). */
#include "k8s/position.h"

#include <stdint.h>
#include <stdio.h>

#include "core/time.h"
#include "k8s/client.h"
#include "k8s/informer.h"

#define MAX_DEPTH 8

static const char *annotation(const json_t *obj, const char *key)
{
    json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
    return json_string_value(json_object_get(ann, key));
}

static double position(const json_t *exp, kd_exp_lookup_fn lookup, void *ud, int depth)
{
    int64_t ms = 0;
    const char *ts = kd_k8s_meta_str(exp, "creationTimestamp");
    if (ts == NULL || kd_time_parse_rfc3339(ts, &ms) != 0)
        ms = 0;
    double pos = (double)ms;
    const char *ahead = annotation(exp, KD_ANN_AHEAD_OF);
    const char *other = ahead != NULL ? ahead : annotation(exp, KD_ANN_BEHIND_OF);
    if (other != NULL && depth < MAX_DEPTH) {
        json_t *o = lookup(kd_k8s_meta_str(exp, "namespace") ?: "", other, ud);
        if (o != NULL) {
            pos = position(o, lookup, ud, depth + 1) + (ahead != NULL ? -0.5 : 0.5) / (depth + 1);
            json_decref(o);
        }
    }
    return pos;
}

double kd_queue_position(const json_t *exp, kd_exp_lookup_fn lookup, void *ud)
{
    return position(exp, lookup, ud, 0);
}

json_t *kd_exp_from_cache(const char *ns, const char *name, void *ud)
{
    char key[600];
    json_t *o = NULL;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    if (kd_k8s_cache_get(ud, key, &o) != 0)
        o = NULL;
    return o;
}
