/*
 * The gang backends' common part: the built-in backend (kdet admits and
 * places, nothing to add to the pods), lookup by name, decorating an
 * attempt's pods, and the sum of their requests for a group's
 * minResources. Volcano and Kueue live in gang_volcano.c and gang_kueue.c.
 */
#include "gang.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/str.h"

const struct kd_gang_ops kd_gang_builtin = {
    .name = "builtin",
    .kdet_admits = true,
};

const struct kd_gang_ops *kd_gang_find(const char *name)
{
    static const struct kd_gang_ops *const all[] = {&kd_gang_builtin, &kd_gang_volcano,
                                                    &kd_gang_kueue};
    const struct kd_gang_ops *ops = NULL;
    for (size_t i = 0; name != NULL && ops == NULL && i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(all[i]->name, name) == 0)
            ops = all[i];
    return ops;
}

int kd_gang_prepare(const struct kd_gang_ops *ops, const struct kd_gang_attempt *a, json_t *pods,
                    json_t **group, char *err)
{
    int rc = 0;
    size_t i;
    json_t *p;
    *group = NULL;
    if (ops->decorate_pod != NULL)
        json_array_foreach(pods, i, p) ops->decorate_pod(p, a);
    if (ops->build_group != NULL)
        rc = ops->build_group(a, group, err);
    return rc;
}

/*
 * A Kubernetes quantity ("500m", "2", "1.5", "4Gi", "1G") times `scale`
 * (1000 for millicores), rounded up. False for what kdet does not parse
 * (exponents, negative or huge values): that resource is left out.
 */
static bool quantity(const json_t *q, double scale, long long *out)
{
    static const struct {
        const char *sfx;
        double mul;
    } sfx[] = {{"", 1},
               {"m", 1e-3},
               {"k", 1e3},
               {"M", 1e6},
               {"G", 1e9},
               {"T", 1e12},
               {"Ki", 1024.0},
               {"Mi", 1048576.0},
               {"Gi", 1073741824.0},
               {"Ti", 1099511627776.0}};
    double v;
    char *end = NULL;
    if (json_is_number(q)) {
        v = json_number_value(q);
        end = "";
    } else if (json_is_string(q)) {
        v = strtod(json_string_value(q), &end);
        if (end == json_string_value(q))
            return false;
    } else {
        return false;
    }
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        if (strcmp(end, sfx[i].sfx) == 0) {
            double r = ceil(v * sfx[i].mul * scale - 1e-9);
            if (!(r >= 0 && r < 9e18))
                return false;
            *out = (long long)r;
            return true;
        }
    }
    return false;
}

json_t *kd_gang_min_resources(const json_t *pods)
{
    static const struct {
        const char *name;
        double scale;
        const char *unit;
    } res[] = {{"cpu", 1000, "m"}, {"memory", 1, ""}, {"nvidia.com/gpu", 1, ""}};
    json_t *out = json_object();
    for (size_t r = 0; r < sizeof(res) / sizeof(res[0]); r++) {
        long long sum = 0;
        bool any = false, bad = false;
        size_t i, k;
        json_t *p, *c;
        json_array_foreach(pods, i, p)
        {
            json_array_foreach(json_object_get(json_object_get(p, "spec"), "containers"), k, c)
            {
                const json_t *rs = json_object_get(c, "resources");
                const json_t *q = json_object_get(json_object_get(rs, "requests"), res[r].name);
                if (q == NULL)
                    q = json_object_get(json_object_get(rs, "limits"), res[r].name);
                long long v = 0;
                if (q == NULL)
                    continue;
                if (!quantity(q, res[r].scale, &v))
                    bad = true;
                sum += v;
                any = true;
            }
        }
        if (any && !bad) {
            char buf[64];
            snprintf(buf, sizeof(buf), "%lld%s", sum, res[r].unit);
            json_object_set_new(out, res[r].name, json_string(buf));
        }
    }
    return out;
}

bool kd_gang_all_bound(const json_t *pods)
{
    size_t i;
    json_t *p;
    bool all = json_array_size(pods) > 0;
    json_array_foreach(pods, i, p)
    {
        const char *n = json_string_value(json_object_get(json_object_get(p, "spec"), "nodeName"));
        if (n == NULL || n[0] == '\0')
            all = false;
    }
    return all;
}
