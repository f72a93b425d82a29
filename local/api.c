/*
 * Request handling for kdet-local's API server: URL routing and the
 * writing verbs (create, update, patch, delete) with the real API server's
 * semantics (resourceVersion preconditions, generation, status
 * subresource, finalizers, Status errors); each kind's own rules come from
 * its strategy (strategy.c), reads from list.c, the garbage collector from
 * gc.c.
 */
#include "api.h"
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

/* ---- routing ---------------------------------------------------------------------------- */

static size_t split(struct kd_http_req *r, const char *path, char **segs, size_t max)
{
    char *p = kd_http_strdup(r, path);
    size_t n = 0;
    while (*p != '\0' && n < max) {
        while (*p == '/')
            p++;
        if (*p == '\0')
            break;
        segs[n++] = p;
        char *slash = strchr(p, '/');
        if (slash == NULL)
            break;
        *slash = '\0';
        p = slash + 1;
    }
    return n;
}

bool kd_api__is_true(const char *v)
{
    return v != NULL && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
}

/* Resolve segments after /api/v1 or /apis/G/V into a target. 0, or 404 already sent. */
static int resolve_target(struct kd_api *api, struct kd_http_req *r, const char *group,
                          const char *version, char **s, size_t n, struct kd_api_target *t)
{
    memset(t, 0, sizeof(*t));
    if (n > 0 && strcmp(s[0], "watch") == 0) {
        t->watch_path = true;
        s++;
        n--;
    }
    if (n == 0)
        return KD_ENOTFOUND;
    kd_store_lock(api->st);
    if (n >= 3 && strcmp(s[0], "namespaces") == 0) {
        struct kd_restype *rt = kd_registry_find(api->reg, group, version, s[2]);
        if (rt != NULL && rt->namespaced) {
            t->rt = rt;
            t->ns = s[1];
            t->name = n > 3 ? s[3] : NULL;
            t->sub = n > 4 ? s[4] : NULL;
            if (n > 5)
                t->rt = NULL;
        }
    }
    if (t->rt == NULL && t->ns == NULL) {
        struct kd_restype *rt = kd_registry_find(api->reg, group, version, s[0]);
        if (rt != NULL && n <= 3) {
            t->rt = rt;
            t->name = n > 1 ? s[1] : NULL;
            t->sub = n > 2 ? s[2] : NULL;
            /* A namespaced kind addressed by name needs its namespace. */
            if (rt->namespaced && t->name != NULL)
                t->rt = NULL;
        }
    }
    kd_store_unlock(api->st);
    (void)r;
    return t->rt != NULL ? 0 : KD_ENOTFOUND;
}

/* ---- create --------------------------------------------------------------------------------- */

static void do_create(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    const struct kd_strategy *sg = t->rt->strategy;
    json_t *obj = kd_api__body_object(r);
    json_t *resp = NULL;
    bool locked = false;
    char err[KD_ERRLEN] = "", msg[600];
    if (obj == NULL)
        return;
    char av[256];
    kd_restype_api_version(t->rt, av, sizeof(av));
    const char *okind = kd_jstr(obj, "kind");
    const char *oav = kd_jstr(obj, "apiVersion");
    if (okind != NULL && strcmp(okind, t->rt->kind) != 0) {
        snprintf(msg, sizeof(msg),
                 "the kind in the data (%s) does not match the expected kind (%s)", okind,
                 t->rt->kind);
        kd_api__bad_request(r, msg);
        goto out;
    }
    if (oav != NULL && strcmp(oav, av) != 0) {
        snprintf(msg, sizeof(msg),
                 "the API version in the data (%s) does not match the expected API version (%s)",
                 oav, av);
        kd_api__bad_request(r, msg);
        goto out;
    }
    kd_api__set_kind(t->rt, obj);
    json_t *md = kd_api__meta(obj);
    const char *crv = kd_jstr(md, "resourceVersion");
    if (crv != NULL && crv[0] != '\0') {
        /* As kube-apiserver's storage answers it: a plain error, so a 500 without a reason. */
        kd_api__respond_status(r, 500, "",
                               "resourceVersion should not be set on objects to be created", NULL);
        goto out;
    }
    if (sg->validate != NULL && sg->validate(r, t->rt, kd_jstr(md, "name"), obj, NULL, false) != 0)
        goto out;
    const char *ons = kd_jstr(md, "namespace");
    if (t->rt->namespaced) {
        if (t->ns == NULL) {
            kd_api__bad_request(r, "a namespaced object must be created in a namespace (POST to "
                                   "/api/v1/namespaces/NAMESPACE/...)");
            goto out;
        }
        if (ons != NULL && ons[0] != '\0' && strcmp(ons, t->ns) != 0) {
            kd_api__bad_request(r, "the namespace of the provided object does not match the "
                                   "namespace sent on the request");
            goto out;
        }
        json_object_set_new(md, "namespace", json_string(t->ns));
    } else {
        json_object_del(md, "namespace");
    }
    const char *name = kd_jstr(md, "name");
    const char *gen_name = kd_jstr(md, "generateName");
    kd_store_lock(api->st);
    locked = true;
    if ((name == NULL || name[0] == '\0') && gen_name != NULL && gen_name[0] != '\0') {
        for (int tries = 0; tries < 8; tries++) {
            char suffix[8];
            kd_api__random_suffix(suffix, 5);
            char *gn = kd_xasprintf("%.*s%s", 58, gen_name, suffix);
            json_object_set_new(md, "name", json_string(gn));
            free(gn);
            if (kd_store_get(api->st, t->rt->gr, t->ns, kd_jstr(md, "name")) == NULL)
                break;
        }
        name = kd_jstr(md, "name");
    }
    if (name == NULL || name[0] == '\0') {
        kd_api__invalid(
            r, t->rt, "",
            json_pack("[o]", kd_api__cause("FieldValueRequired", "metadata.name",
                                           "Required value: name or generateName is required")));
        goto out;
    }
    json_t *c = kd_api__check_name(sg->name_rule, name);
    if (c != NULL) {
        kd_api__invalid(r, t->rt, name, json_pack("[o]", c));
        goto out;
    }
    if (t->rt->namespaced) {
        json_t *nsobj = kd_store_get(api->st, "/namespaces", "", t->ns);
        if (nsobj == NULL) {
            kd_api__not_found(r, kd_api__ns_type(api), t->ns);
            goto out;
        }
        if (json_object_get(json_object_get(nsobj, "metadata"), "deletionTimestamp") != NULL) {
            snprintf(msg, sizeof(msg),
                     "%s \"%s\" is forbidden: unable to create new content in namespace %s "
                     "because it is being terminated",
                     t->rt->resource, name, t->ns);
            kd_api__respond_status(r, 403, "Forbidden", msg,
                                   kd_api__details_for(t->rt, name, t->rt->resource));
            goto out;
        }
    }
    if (kd_store_get(api->st, t->rt->gr, t->ns, name) != NULL) {
        char q[256];
        kd_api__qualified(t->rt, q, sizeof(q));
        snprintf(msg, sizeof(msg), "%s \"%s\" already exists", q, name);
        kd_api__respond_status(r, 409, "AlreadyExists", msg,
                               kd_api__details_for(t->rt, name, t->rt->resource));
        goto out;
    }
    char uid[40], now[40];
    kd_api__new_uid(uid, sizeof(uid));
    kd_api__now_rfc3339(now, sizeof(now));
    json_object_set_new(md, "uid", json_string(uid));
    json_object_set_new(md, "creationTimestamp", json_string(now));
    json_object_del(md, "deletionTimestamp");
    json_object_del(md, "deletionGracePeriodSeconds");
    json_object_del(md, "resourceVersion");
    json_object_del(md, "selfLink");
    if (t->rt->generation)
        json_object_set_new(md, "generation", json_integer(1));
    else
        json_object_del(md, "generation");
    if (sg->prepare_create != NULL && sg->prepare_create(api, r, t->rt, name, obj) != 0)
        goto out;
    if (kd_api__dry_run(r)) {
        resp = json_incref(obj);
        goto out;
    }
    if (sg->admit_write != NULL && sg->admit_write(api, NULL, obj, err) != 0) {
        kd_api__invalid(r, t->rt, name,
                        json_pack("[o]", kd_api__cause("FieldValueInvalid", "spec", "%s", err)));
        goto out;
    }
    json_t *stored = NULL;
    int rc = kd_store_put(api->st, t->rt->gr, t->ns, name, json_incref(obj), &stored);
    if (rc == 0)
        resp = kd_api__present(t->rt, stored);
    if (rc == 0 && sg->after_create != NULL)
        rc = sg->after_create(api, obj);
    if (rc != 0) {
        json_decref(resp);
        resp = NULL;
        kd_api__respond_status(r, 500, "InternalError",
                               "the object could not be written to the journal", NULL);
    }
out:
    if (locked)
        kd_store_unlock(api->st);
    if (resp != NULL) {
        kd_http_respond_json(r, 201, resp);
        json_decref(resp);
    }
    json_decref(obj);
}

/* ---- update / patch
 * ------------------------------------------------------------------------------ */

/*
 * Write `next` (borrowed) over `cur` (borrowed; lock held, and still held on return):
 * `status_only` is a write to /status. Returns the object to answer with (new reference), or
 * NULL when an error has been sent.
 */
static json_t *commit_update(struct kd_api *api, struct kd_http_req *r,
                             const struct kd_api_target *t, json_t *cur, json_t *next,
                             bool status_only)
{
    const struct kd_restype *rt = t->rt;
    const struct kd_strategy *sg = rt->strategy;
    json_t *resp = NULL, *built = NULL;
    char err[KD_ERRLEN];
    json_t *md = kd_api__meta(next);
    const char *want_rv = kd_jstr(md, "resourceVersion");
    if (want_rv != NULL && want_rv[0] != '\0' &&
        strcmp(want_rv, kd_jstr(json_object_get(cur, "metadata"), "resourceVersion")) != 0) {
        kd_api__conflict(r, rt, t->name);
        goto out;
    }
    const char *nname = kd_jstr(md, "name");
    if (nname != NULL && strcmp(nname, t->name) != 0) {
        char msg[600];
        snprintf(msg, sizeof(msg),
                 "the name of the object (%s) does not match the name on the URL (%s)", nname,
                 t->name);
        kd_api__bad_request(r, msg);
        goto out;
    }
    if (status_only) {
        built = json_deep_copy(cur);
        json_t *st = json_object_get(next, "status");
        if (st != NULL)
            json_object_set(built, "status", st);
        else
            json_object_del(built, "status");
    } else {
        built = json_deep_copy(next);
        json_t *bm = kd_api__meta(built);
        const json_t *cm = json_object_get(cur, "metadata");
        /* Fields the server owns. */
        static const char *const kept[] = {"uid",
                                           "creationTimestamp",
                                           "deletionTimestamp",
                                           "deletionGracePeriodSeconds",
                                           "generation",
                                           "namespace",
                                           "name",
                                           NULL};
        for (const char *const *k = kept; *k != NULL; k++) {
            json_t *v = json_object_get(cm, *k);
            if (v != NULL)
                json_object_set(bm, *k, v);
            else
                json_object_del(bm, *k);
        }
        kd_api__set_kind(rt, built);
        /* With a status subresource, the main resource cannot change the status. */
        if (rt->has_status) {
            json_t *st = json_object_get(cur, "status");
            if (st != NULL)
                json_object_set(built, "status", st);
            else
                json_object_del(built, "status");
        }
        if (sg->prepare_update != NULL)
            sg->prepare_update(cur, built);
        if (rt->generation && kd_api__spec_changed(cur, built)) {
            json_int_t g = json_integer_value(json_object_get(cm, "generation"));
            json_object_set_new(bm, "generation", json_integer(g + 1));
        }
    }
    json_object_set(kd_api__meta(built), "resourceVersion",
                    json_object_get(json_object_get(cur, "metadata"), "resourceVersion"));
    if (sg->admit_write != NULL && !kd_api__dry_run(r) &&
        sg->admit_write(api, cur, built, err) != 0) {
        kd_api__invalid(r, rt, t->name,
                        json_pack("[o]", kd_api__cause("FieldValueInvalid", "spec", "%s", err)));
        goto out;
    }
    if (sg->validate != NULL && sg->validate(r, rt, t->name, built, cur, status_only) != 0)
        goto out;
    if (kd_api__same_ignoring_rv(cur, built) || kd_api__dry_run(r)) {
        /* A no-op update writes nothing and keeps the resourceVersion. */
        resp = kd_api__present(rt, kd_api__dry_run(r) ? built : cur);
        goto out;
    }
    const json_t *bm = json_object_get(built, "metadata");
    int rc;
    if (json_object_get(bm, "deletionTimestamp") != NULL &&
        json_array_size(json_object_get(bm, "finalizers")) == 0) {
        /* The last finalizer is gone: the object goes now. */
        json_t *deleted = NULL;
        rc = kd_api__remove_object(api, rt, t->ns, t->name, &deleted);
        if (rc == 0)
            resp = kd_api__present(rt, deleted);
        json_decref(deleted);
    } else {
        json_t *stored = NULL;
        rc = kd_store_put(api->st, rt->gr, t->ns, t->name, json_incref(built), &stored);
        if (rc == 0)
            resp = kd_api__present(rt, stored);
    }
    if (rc != 0)
        kd_api__respond_status(r, 500, "InternalError", "the journal write failed", NULL);
out:
    json_decref(built);
    return resp;
}

static void do_update(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t,
                      bool status_only)
{
    json_t *obj = kd_api__body_object(r), *resp = NULL;
    bool locked = false;
    if (obj == NULL)
        goto out;
    if (!json_is_object(obj)) {
        kd_api__bad_request(r, "the request body must be a JSON object");
        goto out;
    }
    kd_store_lock(api->st);
    locked = true;
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    if (cur == NULL) {
        kd_api__not_found(r, t->rt, t->name);
        goto out;
    }
    const char *urv = kd_jstr(json_object_get(obj, "metadata"), "resourceVersion");
    if (t->rt->strategy->update_needs_rv && (urv == NULL || urv[0] == '\0')) {
        kd_api__invalid(
            r, t->rt, t->name,
            json_pack("[o]", kd_api__cause("FieldValueInvalid", "metadata.resourceVersion",
                                           "Invalid value: 0x0: must be specified for an update")));
        goto out;
    }
    resp = commit_update(api, r, t, cur, obj, status_only);
out:
    if (locked)
        kd_store_unlock(api->st);
    if (resp != NULL)
        kd_http_respond_json(r, 200, resp);
    json_decref(resp);
    json_decref(obj);
}

static void do_patch(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t,
                     bool status_only)
{
    const char *ct = kd_http_header(r, "Content-Type");
    bool strategic = t->rt->strategy->strategic_merge, locked = false;
    char err[KD_ERRLEN] = "";
    json_t *patch = NULL, *next = NULL, *resp = NULL;
    int kind;
    if (ct != NULL && kd_str_has_prefix(ct, "application/merge-patch+json"))
        kind = 0;
    else if (ct != NULL && kd_str_has_prefix(ct, "application/json-patch+json"))
        kind = 1;
    else if (ct != NULL && kd_str_has_prefix(ct, "application/strategic-merge-patch+json") &&
             strategic)
        kind = 2;
    else {
        char msg[600];
        snprintf(msg, sizeof(msg),
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json-patch+json, application/merge-patch+json%s",
                 strategic ? ", application/strategic-merge-patch+json" : "");
        kd_api__respond_status(r, 415, "UnsupportedMediaType", msg, NULL);
        goto out;
    }
    patch = kd_api__body_object(r);
    if (patch == NULL)
        goto out;
    kd_store_lock(api->st);
    locked = true;
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    if (cur == NULL) {
        kd_api__not_found(r, t->rt, t->name);
        goto out;
    }
    /* Preconditions are only what the patch itself says about resourceVersion. */
    json_t *base = json_deep_copy(cur);
    json_object_del(kd_api__meta(base), "resourceVersion");
    int rc;
    if (kind == 0)
        rc = kd_patch_merge(base, patch, &next, err);
    else if (kind == 1)
        rc = kd_patch_json(base, patch, &next, err);
    else
        rc = kd_patch_strategic(base, patch, t->rt->kind, &next, err);
    json_decref(base);
    if (rc != 0 || !json_is_object(next)) {
        char msg[KD_ERRLEN + 64];
        snprintf(msg, sizeof(msg), "the patch could not be applied: %s",
                 err[0] ? err : "the result is not an object");
        kd_api__respond_status(r, rc == 0 || kind == 1 ? 422 : 400,
                               rc == 0 || kind == 1 ? "Invalid" : "BadRequest", msg, NULL);
        goto out;
    }
    resp = commit_update(api, r, t, cur, next, status_only);
out:
    if (locked)
        kd_store_unlock(api->st);
    if (resp != NULL)
        kd_http_respond_json(r, 200, resp);
    json_decref(resp);
    json_decref(next);
    json_decref(patch);
}

/* ---- delete
 * -------------------------------------------------------------------------------------- */

bool kd_api__has_finalizer(const json_t *obj, const char *f)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "finalizers"), i, v)
    {
        if (strcmp(json_string_value(v) ? json_string_value(v) : "", f) == 0)
            return true;
    }
    return false;
}

/* Remove now (lock held), and whatever goes with the object (a CRD's kinds and objects). */
int kd_api__remove_object(struct kd_api *api, const struct kd_restype *rt, const char *ns,
                          const char *name, json_t **deleted)
{
    int rc = kd_store_delete(api->st, rt->gr, ns, name, deleted);
    if (rc == 0 && rt->strategy->after_delete != NULL)
        rt->strategy->after_delete(api, name);
    return rc;
}

/*
 * Start deleting (lock held): with finalizers (or Foreground/Orphan, which
 * add theirs), for kinds whose deletion always waits, and for a graceful
 * deletion, the object gets a deletionTimestamp; otherwise it goes now.
 * *out: the object's state afterwards (new ref). *gone: removed now.
 */
int kd_api__begin_delete(struct kd_api *api, const struct kd_restype *rt, const char *ns,
                         const char *name, const char *policy, int64_t grace, json_t **out,
                         bool *gone)
{
    int rc = 0;
    json_t *cur = kd_store_get(api->st, rt->gr, ns, name);
    *out = NULL;
    *gone = false;
    if (cur == NULL)
        return KD_ENOTFOUND;
    const json_t *cm = json_object_get(cur, "metadata");
    bool fin = json_array_size(json_object_get(cm, "finalizers")) > 0;
    const struct kd_strategy *sg = rt->strategy;
    const char *extra = NULL;
    if (policy != NULL && strcmp(policy, "Foreground") == 0)
        extra = "foregroundDeletion";
    else if (policy != NULL && strcmp(policy, "Orphan") == 0)
        extra = "orphan";
    bool graceful = sg->graceful != NULL && sg->graceful(cur, grace);
    if (!fin && extra == NULL && !sg->delete_waits && !graceful) {
        rc = kd_api__remove_object(api, rt, ns, name, out);
        *gone = rc == 0;
        return rc;
    }
    if (json_object_get(cm, "deletionTimestamp") != NULL && extra == NULL) {
        *out = json_incref(cur);
        return 0;
    }
    json_t *next = json_deep_copy(cur);
    json_t *md = kd_api__meta(next);
    if (json_object_get(md, "deletionTimestamp") == NULL) {
        char now[40];
        kd_api__now_rfc3339(now, sizeof(now));
        json_object_set_new(md, "deletionTimestamp", json_string(now));
        int64_t g = 0;
        if (graceful) {
            json_t *tg =
                json_object_get(json_object_get(next, "spec"), "terminationGracePeriodSeconds");
            g = grace > 0 ? grace : json_is_integer(tg) ? json_integer_value(tg) : 30;
        }
        json_object_set_new(md, "deletionGracePeriodSeconds", json_integer(g));
    }
    if (extra != NULL && !kd_api__has_finalizer(next, extra)) {
        json_t *f = json_object_get(md, "finalizers");
        if (!json_is_array(f)) {
            f = json_array();
            json_object_set_new(md, "finalizers", f);
        }
        json_array_append_new(f, json_string(extra));
    }
    if (sg->delete_waits)
        json_object_set_new(next, "status", json_pack("{s:s}", "phase", "Terminating"));
    json_t *stored = NULL;
    rc = kd_store_put(api->st, rt->gr, ns, name, next, &stored);
    if (rc == 0)
        *out = json_incref(stored);
    return rc;
}

static const char *delete_policy(struct kd_http_req *r, json_t **opts)
{
    const char *p = kd_http_query(r, "propagationPolicy");
    size_t len;
    kd_http_body(r, &len);
    *opts = NULL;
    if (len > 0) {
        *opts = json_loadb(kd_http_body(r, NULL), len, 0, NULL);
        const char *bp = kd_jstr(*opts, "propagationPolicy");
        if (bp != NULL)
            p = bp;
        /* The legacy orphanDependents flag. */
        json_t *od = json_object_get(*opts, "orphanDependents");
        if (p == NULL && json_is_true(od))
            p = "Orphan";
    }
    return p;
}

static bool valid_policy(const char *p)
{
    return p == NULL || strcmp(p, "Background") == 0 || strcmp(p, "Foreground") == 0 ||
           strcmp(p, "Orphan") == 0;
}

static void do_delete(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    json_t *opts = NULL;
    json_t *out = NULL;
    bool gone = false;
    const char *policy = delete_policy(r, &opts);
    if (!valid_policy(policy)) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "propagationPolicy: Unsupported value: \"%.100s\": supported values: "
                 "\"Foreground\", \"Background\", \"Orphan\"",
                 policy);
        kd_api__bad_request(r, msg);
        goto out;
    }
    int64_t grace = -1;
    const char *gq = kd_http_query(r, "gracePeriodSeconds");
    if (json_is_integer(json_object_get(opts, "gracePeriodSeconds")))
        grace = json_integer_value(json_object_get(opts, "gracePeriodSeconds"));
    else if (gq != NULL && (kd_parse_i64(gq, &grace) < 0 || grace < 0)) {
        kd_api__bad_request(r, "gracePeriodSeconds: must be a non-negative integer");
        goto out;
    }
    kd_store_lock(api->st);
    json_t *cur = kd_store_get(api->st, t->rt->gr, t->ns, t->name);
    const char *pre_rv = kd_jstr(json_object_get(opts, "preconditions"), "resourceVersion");
    const char *pre_uid = kd_jstr(json_object_get(opts, "preconditions"), "uid");
    const json_t *cm = json_object_get(cur, "metadata");
    int rc;
    if (cur != NULL && ((pre_rv != NULL && strcmp(pre_rv, kd_jstr(cm, "resourceVersion")) != 0) ||
                        (pre_uid != NULL && strcmp(pre_uid, kd_jstr(cm, "uid")) != 0)))
        rc = KD_ECONFLICT;
    else if (kd_api__dry_run(r))
        rc = cur != NULL ? 0 : KD_ENOTFOUND;
    else
        rc = kd_api__begin_delete(api, t->rt, t->ns, t->name, policy, grace, &out, &gone);
    if (rc == 0 && kd_api__dry_run(r))
        out = json_incref(cur);
    kd_store_unlock(api->st);
    if (rc == KD_ECONFLICT) {
        kd_api__conflict(r, t->rt, t->name);
        goto out;
    }
    if (rc == KD_ENOTFOUND) {
        kd_api__not_found(r, t->rt, t->name);
        goto out;
    }
    if (rc != 0) {
        kd_api__respond_status(r, 500, "InternalError", "the journal write failed", NULL);
        goto out;
    }
    /* Gone at once: a Status, as kube-apiserver answers (pods, graceful, return the object). */
    if (gone && !t->rt->strategy->delete_returns_object) {
        json_t *d = kd_api__details_for(t->rt, t->name, t->rt->resource);
        json_object_set(d, "uid", json_object_get(json_object_get(out, "metadata"), "uid"));
        kd_api__respond_status(r, 200, "", "", d);
        goto out;
    }
    json_t *p = kd_api__present(t->rt, out);
    kd_http_respond_json(r, gone ? 200 : 200, p);
    json_decref(p);
out:
    json_decref(out);
    json_decref(opts);
}

static void do_delete_collection(struct kd_api *api, struct kd_http_req *r,
                                 const struct kd_api_target *t)
{
    struct kd_selector *ls = NULL, *fs = NULL;
    json_t *opts = NULL;
    json_t *deleted = json_array();
    if (kd_api__parse_selectors(r, t, &ls, &fs) != 0)
        goto out;
    const char *policy = delete_policy(r, &opts);
    if (!valid_policy(policy)) {
        kd_api__bad_request(r, "propagationPolicy: must be Foreground, Background or Orphan");
        goto out;
    }
    kd_store_lock(api->st);
    json_t **items = NULL;
    size_t n = kd_store_list(api->st, t->rt->gr, t->ns, &items);
    json_t *names = json_array();
    for (size_t i = 0; i < n; i++) {
        if (kd_api__matches(ls, fs, items[i]))
            json_array_append(names, json_object_get(items[i], "metadata"));
    }
    free(items);
    size_t i;
    json_t *m;
    json_array_foreach(names, i, m)
    {
        json_t *out = NULL;
        bool gone;
        if (kd_api__dry_run(r))
            continue;
        if (kd_api__begin_delete(api, t->rt, kd_jstr(m, "namespace"), kd_jstr(m, "name"), policy,
                                 -1, &out, &gone) == 0 &&
            out != NULL)
            json_array_append_new(deleted, kd_api__present(t->rt, out));
        json_decref(out);
    }
    json_decref(names);
    uint64_t rv = kd_store_rv(api->st);
    kd_store_unlock(api->st);
    char av[256], rvs[32];
    snprintf(rvs, sizeof(rvs), "%llu", (unsigned long long)rv);
    char *lk = kd_xasprintf("%sList", t->rt->kind);
    json_t *list = json_pack("{s:s,s:s,s:{s:s},s:O}", "kind", lk, "apiVersion",
                             kd_restype_api_version(t->rt, av, sizeof(av)), "metadata",
                             "resourceVersion", rvs, "items", deleted);
    free(lk);
    kd_http_respond_json(r, 200, list);
    json_decref(list);
out:
    json_decref(deleted);
    json_decref(opts);
    kd_selector_free(ls);
    kd_selector_free(fs);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static bool authorized(struct kd_api *api, struct kd_http_req *r)
{
    if (api->token == NULL)
        return false; /* kd_local_api_start refuses to run without one: fail closed all the same */
    const char *h = kd_http_header(r, "Authorization");
    if (h == NULL || !kd_str_has_prefix(h, "Bearer "))
        return false;
    const char *got = h + 7;
    size_t n = strlen(api->token);
    return strlen(got) == n && CRYPTO_memcmp(got, api->token, n) == 0;
}

static void method_not_allowed(struct kd_http_req *r)
{
    kd_api__respond_status(r, 405, "MethodNotAllowed",
                           "the server does not allow this method on the requested resource", NULL);
}

static void serve_resource(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t)
{
    const char *m = kd_http_method(r);
    bool get = strcmp(m, "GET") == 0;
    if (t->sub != NULL) {
        for (const struct kd_subresource *sub = t->rt->strategy->subresources;
             sub != NULL && sub->name != NULL && t->name != NULL; sub++) {
            if (strcmp(t->sub, sub->name) == 0) {
                if (strcmp(m, sub->method) == 0)
                    sub->serve(api, r, t);
                else
                    method_not_allowed(r);
                return;
            }
        }
        if (strcmp(t->sub, "status") == 0 && t->rt->has_status) {
            if (get)
                kd_api__do_get(api, r, t);
            else if (strcmp(m, "PUT") == 0)
                do_update(api, r, t, true);
            else if (strcmp(m, "PATCH") == 0)
                do_patch(api, r, t, true);
            else
                method_not_allowed(r);
            return;
        }
        kd_api__respond_status(r, 404, "NotFound",
                               "the server could not find the requested resource", json_object());
        return;
    }
    if (t->name == NULL) {
        if (get && (t->watch_path || kd_api__is_true(kd_http_query(r, "watch"))))
            kd_api__do_watch(api, r, t);
        else if (get)
            kd_api__do_list(api, r, t);
        else if (strcmp(m, "POST") == 0)
            do_create(api, r, t);
        else if (strcmp(m, "DELETE") == 0)
            do_delete_collection(api, r, t);
        else
            method_not_allowed(r);
        return;
    }
    if (get && t->watch_path)
        kd_api__do_watch(api, r, t);
    else if (get)
        kd_api__do_get(api, r, t);
    else if (strcmp(m, "PUT") == 0)
        do_update(api, r, t, false);
    else if (strcmp(m, "PATCH") == 0)
        do_patch(api, r, t, false);
    else if (strcmp(m, "DELETE") == 0)
        do_delete(api, r, t);
    else
        method_not_allowed(r);
}

static void handle(struct kd_http_req *r, void *ud)
{
    struct kd_api *api = ud;
    const char *path = kd_http_path(r);
    int64_t t0 = kd_mono_ms();
    char *segs[MAX_SEGS];
    size_t n = split(r, path, segs, MAX_SEGS);
    if (n == 1 && (strcmp(segs[0], "healthz") == 0 || strcmp(segs[0], "livez") == 0 ||
                   strcmp(segs[0], "readyz") == 0)) {
        kd_http_respond(r, 200, "text/plain", "ok", 2);
        goto out;
    }
    if (!authorized(api, r)) {
        kd_api__respond_status(r, 401, "Unauthorized", "Unauthorized", NULL);
        goto out;
    }
    if (n == 1 && strcmp(segs[0], "version") == 0) {
        kd_api__serve_version(r);
        goto out;
    }
    if (n >= 2 && strcmp(segs[0], "openapi") == 0 && strcmp(segs[1], "v3") == 0) {
        kd_api__serve_openapi(api, r, segs, n);
        goto out;
    }
    if (n >= 1 && (strcmp(segs[0], "api") == 0 || strcmp(segs[0], "apis") == 0)) {
        bool core = strcmp(segs[0], "api") == 0;
        size_t disc = core ? 2 : 3;
        if (n <= disc) {
            if (strcmp(kd_http_method(r), "GET") != 0)
                method_not_allowed(r);
            else
                kd_api__serve_discovery(api, r, segs, n);
            goto out;
        }
        const char *group = core ? "" : segs[1];
        const char *version = core ? segs[1] : segs[2];
        struct kd_api_target t;
        if (resolve_target(api, r, group, version, segs + disc, n - disc, &t) != 0) {
            kd_api__respond_status(r, 404, "NotFound",
                                   "the server could not find the requested resource",
                                   json_object());
            goto out;
        }
        serve_resource(api, r, &t);
        goto out;
    }
    kd_api__respond_status(r, 404, "NotFound", "the server could not find the requested resource",
                           json_object());
out:
    KD_DEBUG("request", "method=%s path=%s ms=%lld", kd_http_method(r), kd_logq(path),
             (long long)(kd_mono_ms() - t0));
}

/* ---- lifecycle --------------------------------------------------------------------------------
 */

static int ensure_namespace(struct kd_api *api, const char *name)
{
    if (kd_store_get(api->st, "/namespaces", NULL, name) != NULL)
        return 0;
    char uid[40], now[40];
    kd_api__new_uid(uid, sizeof(uid));
    kd_api__now_rfc3339(now, sizeof(now));
    json_t *ns = json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:{s:s}},s:{s:[s]},s:{s:s}}", "kind",
                           "Namespace", "apiVersion", "v1", "metadata", "name", name, "uid", uid,
                           "creationTimestamp", now, "labels", "kubernetes.io/metadata.name", name,
                           "spec", "finalizers", "kubernetes", "status", "phase", "Active");
    return kd_store_put(api->st, "/namespaces", NULL, name, ns, NULL);
}

int kd_local_api_start(const struct kd_local_api_opts *opts, struct kd_store *st,
                       struct kd_api **out, char *err)
{
    int rc = 0;
    *out = NULL;
    if (opts->token == NULL || opts->token[0] == '\0')
        return kd_seterr(err, KD_EINVAL,
                         "a bearer token is required: kdet-local serves no anonymous client");
    struct kd_api *api = kd_xcalloc(1, sizeof(*api));
    api->st = st;
    api->reg = kd_registry_new(kd_strategy_of);
    api->token = opts->token != NULL && opts->token[0] != '\0' ? kd_xstrdup(opts->token) : NULL;
    api->state_dir = opts->state_dir != NULL ? kd_xstrdup(opts->state_dir) : NULL;
    api->bookmark_ms = opts->bookmark_ms > 0 ? opts->bookmark_ms : 60000;
    api->gc_ms = opts->gc_interval_ms > 0 ? opts->gc_interval_ms : 200;
    kd_store_lock(st);
    static const char *const base_ns[] = {"default", "kube-system", "kube-public",
                                          "kube-node-lease"};
    for (size_t i = 0; i < 4 && rc == 0; i++)
        rc = ensure_namespace(api, base_ns[i]);
    json_t **nss = NULL;
    size_t nns = kd_store_list(st, "/namespaces", NULL, &nss);
    for (size_t i = 0; i < nns && rc == 0; i++) {
        const json_t *md = json_object_get(nss[i], "metadata");
        if (json_object_get(md, "deletionTimestamp") == NULL)
            rc = kd_api__ensure_default_sa(api, kd_jstr(md, "name"));
    }
    free(nss);
    json_t **crds = NULL;
    size_t n = kd_store_list(st, "apiextensions.k8s.io/customresourcedefinitions", NULL, &crds);
    for (size_t i = 0; i < n; i++) {
        char e[KD_ERRLEN];
        if (kd_registry_apply_crd(api->reg, crds[i], e) != 0)
            KD_WARN("stored CRD not served", "err=%s", kd_logq(e));
    }
    free(crds);
    kd_store_unlock(st);
    if (rc != 0) {
        kd_seterr(err, rc, "cannot write the default namespaces: %s", kd_strerror(rc));
        goto out;
    }
    struct kd_http_opts ho = {.bind_addr = "127.0.0.1",
                              .port = opts->port,
                              .max_body = opts->max_body,
                              .handler = handle,
                              .ud = api,
                              .tls_cert_pem = opts->tls_cert_pem,
                              .tls_key_pem = opts->tls_key_pem};
    rc = kd_http_start(&ho, &api->http, err);
    if (rc != 0)
        goto out;
    if (pthread_create(&api->gc, NULL, kd_api__gc_main, api) != 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot start the garbage collector thread");
        goto out;
    }
    api->gc_started = true;
    *out = api;
    api = NULL;
out:
    kd_local_api_stop(api);
    return rc;
}

int kd_local_api_port(const struct kd_api *api)
{
    return kd_http_port(api->http);
}

void kd_local_api_stop(struct kd_api *api)
{
    if (api == NULL)
        return;
    atomic_store(&api->stop, true);
    kd_store_lock(api->st);
    kd_store_broadcast(api->st);
    kd_store_unlock(api->st);
    kd_http_stop(api->http);
    if (api->gc_started)
        pthread_join(api->gc, NULL);
    kd_registry_free(api->reg);
    free(api->token);
    free(api->state_dir);
    free(api);
}
