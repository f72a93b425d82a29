/*
 * Who may do what in a namespace. kdet's own mode: the namespaces of the
 * user's row (api_ns_allowed, auth.c). The Kubernetes mode (--authz
 * kubernetes): a SubjectAccessReview of the user's Kubernetes identity,
 * so that RoleBindings decide; answers (yes and no) are kept
 * API_SAR_TTL_MS, as the API server's own webhook authorizer caches them.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "k8s/client.h"

#define API_SAR_TTL_MS 10000
#define API_SAR_MAX 10000 /* cached answers; beyond it the expired ones go, then all */
#define API_SAR_PATH "/apis/authorization.k8s.io/v1/subjectaccessreviews"

void api_authz_free(struct kd_api *a)
{
    json_decref(a->sar);
    a->sar = NULL;
}

/* The request body of a review of p doing `at` in ns. */
static json_t *review_of(const struct api_principal *p, const char *ns,
                         const struct api_authz_attrs *at)
{
    char user[300];
    snprintf(user, sizeof(user), "kdet:%s", p->name);
    json_t *groups = json_pack("[s]", "kdet:users");
    if (p->admin)
        json_array_append_new(groups, json_string("kdet:admins"));
    json_t *ra = json_pack("{s:s,s:s,s:s,s:s}", "namespace", ns, "verb", at->verb, "group",
                           "kdet.io", "resource", at->resource);
    if (at->subresource[0] != '\0')
        json_object_set_new(ra, "subresource", json_string(at->subresource));
    if (at->name[0] != '\0')
        json_object_set_new(ra, "name", json_string(at->name));
    return json_pack("{s:s,s:s,s:{s:s,s:o,s:o}}", "apiVersion", "authorization.k8s.io/v1", "kind",
                     "SubjectAccessReview", "spec", "user", user, "groups", groups,
                     "resourceAttributes", ra);
}

static void cache_put(struct kd_api *a, const char *key, bool allowed, const char *reason,
                      int64_t now)
{
    pthread_mutex_lock(&a->sar_mu);
    if (a->sar == NULL)
        a->sar = json_object();
    if (json_object_size(a->sar) >= API_SAR_MAX) {
        const char *k;
        json_t *v, *tmp;
        json_object_foreach_safe(a->sar, tmp, k, v)
        {
            if (json_integer_value(json_array_get(v, 1)) <= now)
                json_object_del(a->sar, k);
        }
        if (json_object_size(a->sar) >= API_SAR_MAX)
            json_object_clear(a->sar);
    }
    json_object_set_new(a->sar, key,
                        json_pack("[b,I,s]", allowed, (json_int_t)(now + API_SAR_TTL_MS), reason));
    pthread_mutex_unlock(&a->sar_mu);
}

static bool cache_get(struct kd_api *a, const char *key, int64_t now, bool *allowed, char *why,
                      size_t whylen)
{
    bool hit = false;
    pthread_mutex_lock(&a->sar_mu);
    json_t *v = a->sar != NULL ? json_object_get(a->sar, key) : NULL;
    if (v != NULL && json_integer_value(json_array_get(v, 1)) > now) {
        *allowed = json_is_true(json_array_get(v, 0));
        snprintf(why, whylen, "%s", json_string_value(json_array_get(v, 2)) ?: "");
        hit = true;
    }
    pthread_mutex_unlock(&a->sar_mu);
    return hit;
}

int api_may(struct kd_api *a, const struct api_principal *p, const char *ns,
            const struct api_authz_attrs *at, bool *allowed, char *why, size_t whylen)
{
    int rc = 0;
    json_t *body = NULL, *out = NULL;
    char *text = NULL;
    struct kd_k8s_status st = {0}; /* kd_k8s_request frees its causes before it fills it */
    *allowed = false;
    if (whylen > 0)
        why[0] = '\0';
    if (a->o.authz != KD_API_AUTHZ_KUBERNETES) {
        *allowed = api_ns_allowed(p, ns);
        goto out;
    }
    if (p == NULL || ns == NULL)
        goto out;
    char key[1024];
    snprintf(key, sizeof(key), "%s\x1f%d\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s", p->name, p->admin ? 1 : 0,
             ns, at->verb, at->resource, at->subresource, at->name);
    int64_t now = kd_mono_ms();
    if (cache_get(a, key, now, allowed, why, whylen))
        goto out;
    body = review_of(p, ns, at);
    text = json_dumps(body, JSON_COMPACT);
    char err[KD_ERRLEN] = "";
    rc = kd_k8s_request(a->o.k8s, "POST", API_SAR_PATH, text, NULL, &out, &st, err);
    if (rc != 0) {
        snprintf(why, whylen, "SubjectAccessReview: %s", err);
        KD_WARN("access review failed", "user=%s namespace=%s verb=%s resource=%s err=%s",
                kd_logq(p->name), kd_logq(ns), at->verb, at->resource, kd_logq(err));
        goto out;
    }
    const json_t *status = json_object_get(out, "status");
    *allowed = json_is_true(json_object_get(status, "allowed"));
    snprintf(why, whylen, "%s", json_string_value(json_object_get(status, "reason")) ?: "");
    cache_put(a, key, *allowed, why, now);
    KD_DEBUG("access reviewed", "user=%s namespace=%s verb=%s resource=%s%s%s allowed=%s",
             kd_logq(p->name), kd_logq(ns), at->verb, at->resource,
             at->subresource[0] != '\0' ? "/" : "", at->subresource, *allowed ? "true" : "false");
out:
    free(text);
    json_decref(body);
    json_decref(out);
    kd_k8s_status_free(&st);
    return rc;
}

bool api_may_do(struct kd_api *a, const struct api_principal *p, const char *ns, const char *verb,
                const char *resource, const char *subresource, const char *name)
{
    struct api_authz_attrs at = {0};
    bool allowed = false;
    char why[256];
    snprintf(at.verb, sizeof(at.verb), "%s", verb);
    snprintf(at.resource, sizeof(at.resource), "%s", resource);
    snprintf(at.subresource, sizeof(at.subresource), "%s", subresource ?: "");
    snprintf(at.name, sizeof(at.name), "%s", name ?: "");
    return api_may(a, p, ns, &at, &allowed, why, sizeof(why)) == 0 && allowed;
}
