/*
 * Discovery for kdet-local's API server: /version, /api, /apis and their group and
 * version documents, and /openapi/v2 and /openapi/v3.
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

/* ---- discovery ----------------------------------------------------------------------- */

void kd_api__serve_version(struct kd_http_req *r)
{
    json_t *v =
        json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "major", "1", "minor", K8S_VERSION_MINOR,
                  "gitVersion", "v1." K8S_VERSION_MINOR ".0-kdet-local", "gitCommit", "",
                  "gitTreeState", "clean", "buildDate", "2026-11-21T00:00:00Z", "goVersion", "",
                  "compiler", "gcc", "platform", "linux/amd64");
    kd_http_respond_json(r, 200, v);
    json_decref(v);
}

void kd_api__serve_discovery(struct kd_api *api, struct kd_http_req *r, char **s, size_t n)
{
    json_t *doc = NULL;
    kd_store_lock(api->st);
    if (strcmp(s[0], "api") == 0 && n == 1) {
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", kd_http_port(api->http));
        doc = json_pack("{s:s,s:[s],s:[{s:s,s:s}]}", "kind", "APIVersions", "versions", "v1",
                        "serverAddressByClientCIDRs", "clientCIDR", "0.0.0.0/0", "serverAddress",
                        addr);
    } else if (strcmp(s[0], "api") == 0 && n == 2) {
        doc = kd_registry_resource_list(api->reg, "", s[1]);
    } else if (strcmp(s[0], "apis") == 0 && n == 1) {
        doc = kd_registry_group_list(api->reg);
    } else if (strcmp(s[0], "apis") == 0 && n == 2) {
        doc = kd_registry_group(api->reg, s[1]);
    } else if (strcmp(s[0], "apis") == 0 && n == 3) {
        doc = kd_registry_resource_list(api->reg, s[1], s[2]);
    }
    kd_store_unlock(api->st);
    if (doc == NULL) {
        kd_api__respond_status(r, 404, "NotFound",
                               "the server could not find the requested resource", json_object());
        return;
    }
    kd_http_respond_json(r, 200, doc);
    json_decref(doc);
}

/*
 * OpenAPI v3: enough for kubectl to see that the server validates fields
 * itself (the fieldValidation parameter on every PATCH), so kubectl apply
 * skips client-side schema validation. Schemas are not served.
 */
static void add_gv_doc(json_t *root, const char *group, const char *version)
{
    char *key = group[0] == '\0' ? kd_xasprintf("api/%s", version)
                                 : kd_xasprintf("apis/%s/%s", group, version);
    if (json_object_get(root, key) == NULL) {
        char *url = kd_xasprintf("/openapi/v3/%s", key);
        json_object_set_new(root, key, json_pack("{s:s}", "serverRelativeURL", url));
        free(url);
    }
    free(key);
}

void kd_api__serve_openapi(struct kd_api *api, struct kd_http_req *r, char **s, size_t n)
{
    json_t *doc = NULL;
    kd_store_lock(api->st);
    if (n == 2) {
        json_t *paths = json_object();
        for (struct kd_restype *rt = kd_registry_first(api->reg); rt != NULL; rt = rt->next) {
            if (!rt->removed)
                add_gv_doc(paths, rt->group, rt->version);
        }
        doc = json_pack("{s:o}", "paths", paths);
    } else if (n >= 4 && n <= 5) {
        bool core = strcmp(s[2], "api") == 0;
        const char *group = core ? "" : s[3];
        const char *version = core ? s[3] : (n == 5 ? s[4] : "");
        json_t *paths = json_object();
        for (struct kd_restype *rt = kd_registry_first(api->reg); rt != NULL; rt = rt->next) {
            if (rt->removed || strcmp(rt->group, group) != 0 || strcmp(rt->version, version) != 0)
                continue;
            char prefix[300];
            if (core)
                snprintf(prefix, sizeof(prefix), "/api/%s", version);
            else
                snprintf(prefix, sizeof(prefix), "/apis/%s/%s", group, version);
            char *path = rt->namespaced ? kd_xasprintf("%s/namespaces/{namespace}/%s/{name}",
                                                       prefix, rt->resource)
                                        : kd_xasprintf("%s/%s/{name}", prefix, rt->resource);
            json_t *op =
                json_pack("{s:{s:s,s:s,s:s},s:s,s:[{s:s,s:s,s:{s:s}},{s:s,s:s,s:{s:s}}]}",
                          "x-kubernetes-group-version-kind", "group", group, "version", version,
                          "kind", rt->kind, "x-kubernetes-action", "patch", "parameters", "name",
                          "fieldValidation", "in", "query", "schema", "type", "string", "name",
                          "dryRun", "in", "query", "schema", "type", "string");
            json_object_set_new(paths, path, json_pack("{s:o}", "patch", op));
            free(path);
        }
        if (json_object_size(paths) > 0)
            doc = json_pack("{s:s,s:{s:s,s:s},s:o,s:{s:{}}}", "openapi", "3.0.0", "info", "title",
                            "Kubernetes", "version", "v1." K8S_VERSION_MINOR ".0", "paths", paths,
                            "components", "schemas");
        else
            json_decref(paths);
    }
    kd_store_unlock(api->st);
    if (doc == NULL) {
        kd_api__respond_status(r, 404, "NotFound",
                               "the server could not find the requested resource", json_object());
        return;
    }
    kd_http_respond_json(r, 200, doc);
    json_decref(doc);
}
