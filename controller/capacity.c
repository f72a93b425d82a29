/*
 * Pods' requests as kube-scheduler counts them (capacity.h). The rule for
 * init containers and sidecars is kube-scheduler's, written from its
 * documentation ("Resource sharing within containers", "Sidecar
 * containers"): an init container runs alone, after the sidecars started
 * before it, so the pod needs the largest of those moments and of its
 * steady state.
 */
#include "capacity.h"

#include <string.h>

#include "core/str.h"
#include "scheduler.h"

#define GPU_KEY "nvidia.com/gpu"

int kd_cap_count(const json_t *quantity)
{
    int64_t v = 0;
    if (json_is_integer(quantity))
        v = json_integer_value(quantity);
    else if (json_is_string(quantity) && kd_parse_i64(json_string_value(quantity), &v) != 0)
        v = 0;
    return v > 0 && v < 1 << 20 ? (int)v : 0;
}

int64_t kd_cap_cpu_milli(const json_t *quantity)
{
    int64_t milli = 0;
    if (json_is_integer(quantity) && json_integer_value(quantity) > 0 &&
        json_integer_value(quantity) < (json_int_t)1 << 30)
        milli = json_integer_value(quantity) * 1000;
    else if (json_is_string(quantity) &&
             kd_sched_cpu_milli(json_string_value(quantity), &milli) != 0)
        milli = 0;
    return milli;
}

/* cpu and GPUs of one resource list ({"cpu": "1", "nvidia.com/gpu": "2"}); absent: 0. */
struct req {
    int64_t cpu;
    int64_t gpus;
};

static struct req of_list(const json_t *list)
{
    return (struct req){kd_cap_cpu_milli(json_object_get(list, "cpu")),
                        kd_cap_count(json_object_get(list, GPU_KEY))};
}

/* A container's request: requests, else limits, resource by resource. */
static struct req of_container(const json_t *c)
{
    const json_t *res = json_object_get(c, "resources");
    const json_t *rq = json_object_get(res, "requests"), *lim = json_object_get(res, "limits");
    struct req r = of_list(rq), l = of_list(lim);
    if (json_object_get(rq, "cpu") == NULL)
        r.cpu = l.cpu;
    if (json_object_get(rq, GPU_KEY) == NULL)
        r.gpus = l.gpus;
    return r;
}

static struct req add(struct req a, struct req b)
{
    return (struct req){a.cpu + b.cpu, a.gpus + b.gpus};
}

static struct req max(struct req a, struct req b)
{
    return (struct req){a.cpu > b.cpu ? a.cpu : b.cpu, a.gpus > b.gpus ? a.gpus : b.gpus};
}

bool kd_cap_pod_request(const json_t *pod, struct kd_cap_request *out)
{
    const json_t *spec = json_object_get(pod, "spec");
    const char *node = json_string_value(json_object_get(spec, "nodeName"));
    const char *phase =
        json_string_value(json_object_get(json_object_get(pod, "status"), "phase")) ?: "";
    struct req run = {0}, sidecars = {0}, init = {0};
    size_t i;
    json_t *c;
    memset(out, 0, sizeof(*out));
    if (node == NULL || node[0] == '\0' || strcmp(phase, "Succeeded") == 0 ||
        strcmp(phase, "Failed") == 0)
        return false;
    json_array_foreach(json_object_get(spec, "containers"), i, c) run = add(run, of_container(c));
    json_array_foreach(json_object_get(spec, "initContainers"), i, c)
    {
        struct req r = of_container(c);
        const char *policy = json_string_value(json_object_get(c, "restartPolicy")) ?: "";
        if (strcmp(policy, "Always") == 0) {
            run = add(run, r); /* a sidecar runs beside the containers */
            sidecars = add(sidecars, r);
            init = max(init, sidecars);
        } else {
            init = max(init, add(r, sidecars));
        }
    }
    struct req total = add(max(run, init), of_list(json_object_get(spec, "overhead")));
    out->node = node;
    out->cpu_milli = total.cpu;
    out->gpus = total.gpus < 1 << 20 ? (int)total.gpus : 1 << 20;
    return true;
}
