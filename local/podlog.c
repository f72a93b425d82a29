/*
 * pods/log (from the kubelet's files, or proxied to a node agent) and pods/binding
 * for kdet-local's API server.
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

/* ---- pods/log ------------------------------------------------------------------------ */

/* The run of a container a pods/log follow watches (logstream.h's callback data). */
struct logrun {
    struct kd_api *api;
    char *ns, *pod, *uid, *container;
    int run;
};

static void logrun_free(void *p)
{
    struct logrun *l = p;
    if (l == NULL)
        return;
    free(l->ns);
    free(l->pod);
    free(l->uid);
    free(l->container);
    free(l);
}

/* The status entry of a container, borrowed from pod. */
static const json_t *container_status(const json_t *pod, const char *name)
{
    static const char *const lists[] = {"containerStatuses", "initContainerStatuses"};
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(json_object_get(pod, "status"), lists[l]), i, s)
        {
            if (strcmp(kd_jstr(s, "name") ? kd_jstr(s, "name") : "", name) == 0)
                return s;
        }
    }
    return NULL;
}

/* Is this run of the container still running (so a follow must wait for more)? */
static enum kd_logstream_state logrun_state(void *ud)
{
    struct logrun *l = ud;
    if (atomic_load(&l->api->stop))
        return KD_LOGSTREAM_STOP;
    kd_store_lock(l->api->st);
    json_t *pod = kd_store_get(l->api->st, "/pods", l->ns, l->pod);
    bool live = false;
    if (pod != NULL && strcmp(kd_jstr(json_object_get(pod, "metadata"), "uid")
                                  ? kd_jstr(json_object_get(pod, "metadata"), "uid")
                                  : "",
                              l->uid) == 0) {
        const json_t *cs = container_status(pod, l->container);
        live = cs != NULL &&
               json_integer_value(json_object_get(cs, "restartCount")) == (json_int_t)l->run &&
               json_object_get(json_object_get(cs, "state"), "terminated") == NULL;
    }
    kd_store_unlock(l->api->st);
    return live ? KD_LOGSTREAM_LIVE : KD_LOGSTREAM_ENDED;
}

/*
 * A pod on a node agent (its Node has daemonEndpoints.kubeletEndpoint.Port):
 * answer from that node's kubelet API, as kube-apiserver does. False when
 * the pod is on kdet-local's own node.
 */
static bool node_agent_log(struct kd_api *api, struct kd_http_req *r, const json_t *pod,
                           const struct kd_api_target *t, const char *container)
{
    const char *nn = kd_jstr(json_object_get(pod, "spec"), "nodeName");
    char *url = NULL;
    struct kd_logproxy *lp = NULL;
    int port = 0;
    if (nn == NULL)
        return false;
    kd_store_lock(api->st);
    json_t *node = kd_store_get(api->st, "/nodes", NULL, nn);
    json_t *ep = json_object_get(
        json_object_get(json_object_get(node, "status"), "daemonEndpoints"), "kubeletEndpoint");
    port = (int)json_integer_value(json_object_get(ep, "Port"));
    kd_store_unlock(api->st);
    if (port <= 0 || port > 65535)
        return false;
    struct kd_buf b = KD_BUF_INIT(8192);
    int e = kd_buf_printf(&b, "https://127.0.0.1:%d/containerLogs/%s/%s/%s?x=1", port, t->ns,
                          t->name, container);
    static const char *const keys[] = {"follow", "previous", "tailLines", "limitBytes", NULL};
    for (const char *const *k = keys; *k != NULL && e == 0; k++) {
        const char *v = kd_http_query(r, *k);
        if (v != NULL && strlen(v) < 32 && strspn(v, "0123456789truefalsTRUEFALS") == strlen(v))
            e = kd_buf_printf(&b, "&%s=%s", *k, v);
    }
    if (e != 0) {
        kd_api__bad_request(r, "log request too long");
        goto out;
    }
    url = kd_xstrdup(kd_buf_str(&b));
    int http = 0;
    char err[KD_ERRLEN] = "";
    if (kd_logproxy_open(url, &lp, &http, err) != 0) {
        char *msg = kd_http_printf(r, "Get \"%s\": %s", url, err);
        json_t *st = kd_api__status_new(500, "", msg, NULL); /* kube-apiserver gives no reason */
        kd_http_respond_json(r, 500, st);
        json_decref(st);
        goto out;
    }
    kd_http_respond_stream(r, http, "text/plain", kd_logproxy_read, lp, kd_logproxy_free);
    lp = NULL;
out:
    kd_buf_free(&b);
    kd_logproxy_free(lp);
    free(url);
    return true;
}

void kd_api__do_log(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    const char *container = kd_http_query(r, "container");
    bool follow = kd_api__is_true(kd_http_query(r, "follow"));
    bool previous = kd_api__is_true(kd_http_query(r, "previous"));
    int64_t tail = -1, limit = -1;
    const char *tq = kd_http_query(r, "tailLines");
    const char *lq = kd_http_query(r, "limitBytes");
    char msg[1024];
    if ((tq != NULL && (kd_parse_i64(tq, &tail) < 0 || tail < 0)) ||
        (lq != NULL && (kd_parse_i64(lq, &limit) < 0 || limit < 1))) {
        kd_api__bad_request(r, "tailLines and limitBytes must be non-negative integers");
        return;
    }
    kd_store_lock(api->st);
    json_t *pod = kd_store_get(api->st, "/pods", t->ns, t->name);
    pod = pod != NULL ? json_incref(pod) : NULL;
    kd_store_unlock(api->st);
    struct logrun *l = NULL;
    char *path = NULL;
    if (pod == NULL) {
        kd_api__not_found(r, t->rt, t->name);
        goto out;
    }
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *ctrs = json_object_get(spec, "containers");
    if (container == NULL || container[0] == '\0') {
        if (json_array_size(ctrs) != 1) {
            struct kd_buf b = KD_BUF_INIT(4096);
            size_t i;
            json_t *c;
            int e = 0;
            json_array_foreach(ctrs, i, c) e =
                e ? e : kd_buf_printf(&b, "%s%s", i ? " " : "", kd_jstr(c, "name"));
            snprintf(msg, sizeof(msg),
                     "a container name must be specified for pod %s, choose one of: [%s]", t->name,
                     kd_buf_str(&b));
            kd_buf_free(&b);
            kd_api__bad_request(r, msg);
            goto out;
        }
        container = kd_jstr(json_array_get(ctrs, 0), "name");
    }
    const json_t *cs = container_status(pod, container);
    bool known = false;
    static const char *const lists[] = {"containers", "initContainers"};
    for (size_t li = 0; li < 2; li++) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(spec, lists[li]), i, c)
        {
            known = known || strcmp(kd_jstr(c, "name") ? kd_jstr(c, "name") : "", container) == 0;
        }
    }
    if (!known) {
        snprintf(msg, sizeof(msg), "container %s is not valid for pod %s", container, t->name);
        kd_api__bad_request(r, msg);
        goto out;
    }
    if (node_agent_log(api, r, pod, t, container))
        goto out;
    int restarts = (int)json_integer_value(json_object_get(cs, "restartCount"));
    const json_t *waiting = json_object_get(json_object_get(cs, "state"), "waiting");
    if (api->state_dir == NULL || cs == NULL || (waiting != NULL && restarts == 0 && !previous) ||
        kd_jstr(cs, "containerID") == NULL) {
        const char *why =
            kd_jstr(waiting, "reason") ? kd_jstr(waiting, "reason") : "ContainerCreating";
        snprintf(msg, sizeof(msg), "container \"%s\" in pod \"%s\" is waiting to start: %s",
                 container, t->name, why);
        kd_api__bad_request(r, msg);
        goto out;
    }
    int run = restarts;
    if (previous || (waiting != NULL && restarts > 0))
        run = restarts - 1;
    if (previous && json_object_get(cs, "lastState") != NULL &&
        json_object_get(json_object_get(cs, "lastState"), "terminated") == NULL) {
        run = -1;
    }
    if (run < 0) {
        snprintf(msg, sizeof(msg), "previous terminated container \"%s\" in pod \"%s\" not found",
                 container, t->name);
        kd_api__bad_request(r, msg);
        goto out;
    }
    l = kd_xcalloc(1, sizeof(*l));
    l->api = api;
    l->ns = kd_xstrdup(t->ns);
    l->pod = kd_xstrdup(t->name);
    l->uid = kd_xstrdup(kd_jstr(json_object_get(pod, "metadata"), "uid"));
    l->container = kd_xstrdup(container);
    l->run = run;
    path = kd_kubelet_log_path(api->state_dir, l->uid, container, run);
    if (path == NULL) {
        snprintf(msg, sizeof(msg), "container %.200s is not valid for pod %s", container, t->name);
        kd_api__bad_request(r, msg);
        goto out;
    }
    struct kd_logstream_opts lo = {.path = path,
                                   .follow = follow && !previous,
                                   .tail = tail,
                                   .limit = limit,
                                   .state = logrun_state,
                                   .ud = l,
                                   .free_ud = logrun_free};
    l = NULL;
    kd_logstream_respond(r, &lo);
out:
    free(path);
    logrun_free(l);
    json_decref(pod);
}

/*
 * POST pods/NAME/binding: how a scheduler other than the built-in one (a
 * batch scheduler such as Volcano) assigns a pod to a node. As in
 * kube-apiserver, it sets spec.nodeName once and PodScheduled=True; a pod
 * already assigned, or being deleted, is a 409 Conflict.
 */
void kd_api__do_binding(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    json_t *b = kd_api__body_object(r);
    if (b == NULL)
        return;
    const char *node = kd_jstr(json_object_get(b, "target"), "name");
    if (node == NULL || node[0] == '\0') {
        json_decref(b);
        kd_api__bad_request(r, "Binding target.name: Required value");
        return;
    }
    kd_store_lock(api->st);
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    if (cur == NULL) {
        kd_store_unlock(api->st);
        json_decref(b);
        kd_api__not_found(r, t->rt, t->name);
        return;
    }
    const char *bound = kd_jstr(json_object_get(cur, "spec"), "nodeName");
    char msg[700];
    if ((bound != NULL && bound[0] != '\0') ||
        kd_jstr(kd_api__meta(cur), "deletionTimestamp") != NULL) {
        snprintf(msg, sizeof(msg),
                 bound != NULL && bound[0] != '\0'
                     ? "Operation cannot be fulfilled on pods/binding \"%s\": "
                       "pod %s is already assigned to node \"%s\""
                     : "Operation cannot be fulfilled on pods/binding \"%s\": "
                       "pod %s is being deleted, cannot be assigned to a host%s",
                 t->name, t->name, bound != NULL ? bound : "");
        kd_store_unlock(api->st);
        json_decref(b);
        kd_api__respond_status(r, 409, "Conflict", msg,
                               kd_api__details_for(t->rt, t->name, "pods/binding"));
        return;
    }
    json_t *next = json_deep_copy(cur);
    json_object_set_new(json_object_get(next, "spec"), "nodeName", json_string(node));
    json_t *st = json_object_get(next, "status");
    if (!json_is_object(st)) {
        st = json_pack("{s:s}", "phase", "Pending");
        json_object_set_new(next, "status", st);
    }
    json_t *conds = json_array(), *c;
    size_t i;
    char now[40];
    json_array_foreach(json_object_get(st, "conditions"), i, c)
    {
        if (strcmp(kd_jstr(c, "type") ? kd_jstr(c, "type") : "", "PodScheduled") != 0)
            json_array_append(conds, c);
    }
    kd_time_rfc3339(kd_wall_ms(), 0, now, sizeof(now));
    json_array_append_new(conds, json_pack("{s:s,s:s,s:n,s:s}", "type", "PodScheduled", "status",
                                           "True", "lastProbeTime", "lastTransitionTime", now));
    json_object_set_new(st, "conditions", conds);
    int rc = kd_store_put(api->st, t->rt->gr, t->ns, t->name, next, NULL);
    kd_store_unlock(api->st);
    if (rc == 0)
        KD_INFO("pod bound", "namespace=%s pod=%s node=%s by=binding", kd_logq(t->ns),
                kd_logq(t->name), kd_logq(node));
    json_decref(b); /* node points into it */
    if (rc != 0)
        kd_api__respond_status(r, 500, "InternalError", "the pod could not be stored", NULL);
    else
        kd_api__respond_status(r, 201, "", "", NULL);
}
