/*
 * det's connection to the Kubernetes API: kubeconfig loading with kubectl's
 * flags, errors turned into messages that say what to do (no kubeconfig,
 * server unreachable, object or CRD missing, RBAC), and IDs resolved from
 * unique name prefixes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "k8s/config.h"

int det_kube_open(const struct det_args *a, struct det_kube *k)
{
    struct kd_k8s_config_opts o = {0};
    struct kd_k8s_client_opts co = {0};
    char err[KD_ERRLEN] = "";
    int rc = DET_EXIT_OK, r;
    memset(k, 0, sizeof(*k));
    k->a = a;
    o.kubeconfig = a->kubeconfig;
    o.context = a->context;
    r = kd_k8s_config_load(&o, &k->cfg, err);
    if (r != 0) {
        if (r == KD_ENOTFOUND && a->kubeconfig == NULL)
            det_err("%s. For a cluster on this machine run 'det deploy local up' and the "
                    "'export KUBECONFIG=...' it prints.",
                    err);
        else
            det_err("kubeconfig: %s", err[0] ? err : kd_strerror(r));
        rc = DET_EXIT_CLUSTER;
        goto out;
    }
    co.max_retries = 2;
    co.timeout_ms = 20000;
    co.connect_timeout_ms = 5000;
    co.backoff_base_ms = 100;
    co.backoff_max_ms = 1000;
    r = kd_k8s_client_new(&k->cfg, &co, &k->c, err);
    if (r != 0) {
        det_err("kubeconfig %s: %s", k->cfg.source ? k->cfg.source : "", err);
        rc = DET_EXIT_CLUSTER;
        goto out;
    }
    kd_strlcpy(k->ns, a->ns ? a->ns : (k->cfg.namespace ? k->cfg.namespace : "default"),
               sizeof(k->ns));
out:
    return rc;
}

void det_kube_close(struct det_kube *k)
{
    kd_k8s_client_free(k->c);
    k->c = NULL;
    kd_k8s_config_free(&k->cfg);
}

/* Whether the API server serves gvr's resource (discovery). 1 yes, 0 no, -1 unknown. */
static int served(struct det_kube *k, const struct kd_k8s_gvr *gvr)
{
    json_t *doc = NULL;
    int rc = -1;
    char path[256];
    if (gvr->group == NULL || gvr->group[0] == '\0') {
        rc = 1; /* the core group is always there */
        goto out;
    }
    snprintf(path, sizeof(path), "/apis/%s/%s", gvr->group, gvr->version);
    int r = kd_k8s_request(k->c, "GET", path, NULL, NULL, &doc, NULL, NULL);
    if (r == KD_ENOTFOUND) {
        rc = 0;
    } else if (r == 0) {
        size_t i;
        json_t *res;
        rc = 0;
        json_array_foreach(json_object_get(doc, "resources"), i, res)
        {
            const char *n = json_string_value(json_object_get(res, "name"));
            if (n && strcmp(n, gvr->resource) == 0)
                rc = 1;
        }
    }
out:
    json_decref(doc);
    return rc;
}

int det_kube_fail(struct det_kube *k, int rc, const struct kd_k8s_status *st, const char *err,
                  const char *verb, const struct kd_k8s_gvr *gvr, const char *what,
                  const char *name)
{
    const char *server = k->cfg.server ? k->cfg.server : "?";
    const char *msg = err && err[0] ? err : kd_strerror(rc);
    char res[128];
    int code = DET_EXIT_ERROR;
    snprintf(res, sizeof(res), "%s%s%s", gvr->resource, gvr->group && gvr->group[0] ? "." : "",
             gvr->group ? gvr->group : "");
    switch (rc) {
    case KD_ECONNECT:
    case KD_ETIMEDOUT:
        det_err("cannot reach the Kubernetes API server at %s (kubeconfig %s%s%s): %s. Is the "
                "cluster running? (on this machine: det deploy local up)",
                server, k->cfg.source ? k->cfg.source : "?", k->cfg.context ? ", context " : "",
                k->cfg.context ? k->cfg.context : "", st && st->message[0] ? st->message : msg);
        code = DET_EXIT_CLUSTER;
        break;
    case KD_ENOTFOUND:
        if (strcmp(verb, "create") == 0) {
            det_err("cannot create %s %s in namespace \"%s\": %s (does the namespace exist? "
                    "kubectl create namespace %s)",
                    what, name ? name : "", k->ns, st && st->message[0] ? st->message : msg, k->ns);
            code = DET_EXIT_NOTFOUND;
        } else if (served(k, gvr) == 0) {
            det_err("the API server at %s does not serve %s: the kdet CRDs are not installed. "
                    "Install them with: kubectl apply -f crds/",
                    server, res);
            code = DET_EXIT_CLUSTER;
        } else if (name != NULL) {
            det_err("%s \"%s\" not found in namespace \"%s\" (see 'det %s list%s')", what, name,
                    k->ns, what, strcmp(what, "trial") == 0 ? " EXPERIMENT" : "");
            code = DET_EXIT_NOTFOUND;
        } else {
            det_err("%s %s in namespace \"%s\": %s", verb, res, k->ns, msg);
            code = DET_EXIT_NOTFOUND;
        }
        break;
    case KD_EFORBIDDEN:
        det_err("forbidden: RBAC does not allow the user of kubeconfig context \"%s\" to %s %s "
                "in namespace \"%s\" (%s)",
                k->cfg.context ? k->cfg.context : "?", verb, res, k->ns,
                st && st->message[0] ? st->message : msg);
        code = DET_EXIT_CLUSTER;
        break;
    case KD_EUNAUTHORIZED:
        det_err("the API server at %s refused the credentials of kubeconfig context \"%s\": %s",
                server, k->cfg.context ? k->cfg.context : "?", msg);
        code = DET_EXIT_CLUSTER;
        break;
    case KD_EINVALID:
    case KD_EINVAL:
        det_err("the API server refused to %s %s%s%s: %s", verb, what, name ? " " : "",
                name ? name : "", msg);
        code = DET_EXIT_INVALID;
        break;
    default: det_err("%s %s%s%s: %s", verb, what, name ? " " : "", name ? name : "", msg); break;
    }
    return code;
}

int det_resolve(struct det_kube *k, const struct kd_k8s_gvr *gvr, const char *what, const char *id,
                char **name, json_t **obj)
{
    json_t *o = NULL, *list = NULL, *match = NULL;
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN] = "";
    int rc = DET_EXIT_OK, r, n = 0;
    struct kd_buf names = KD_BUF_INIT(4096);
    *name = NULL;
    if (obj)
        *obj = NULL;
    if (id[0] == '\0') {
        det_err("an empty %s ID", what);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    r = kd_k8s_get(k->c, gvr, k->ns, id, &o, &st, err);
    if (r == 0) {
        *name = kd_xstrdup(id);
        if (obj) {
            *obj = o;
            o = NULL;
        }
        goto out;
    }
    if (r != KD_ENOTFOUND) {
        rc = det_kube_fail(k, r, &st, err, "get", gvr, what, id);
        goto out;
    }
    bool trial = strcmp(gvr->resource, "trials") == 0;
    if (det_is_id(id) && (trial || strcmp(gvr->resource, "experiments") == 0)) {
        /* all digits and no object has that name: an integer id (docs/cli.md "IDs") */
        rc = det_id_resolve(k, trial, id, name);
        if (rc == 0 && obj != NULL && (r = kd_k8s_get(k->c, gvr, k->ns, *name, obj, &st, err)) != 0)
            rc = det_kube_fail(k, r, &st, err, "get", gvr, what, *name);
        goto out;
    }
    r = kd_k8s_list_all(k->c, gvr, k->ns, NULL, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", gvr, what, NULL);
        goto out;
    }
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(list, "items"), i, it)
    {
        const char *nm = kd_k8s_meta_str(it, "name");
        if (nm && kd_str_has_prefix(nm, id)) {
            n++;
            match = it;
            if (kd_buf_printf(&names, "%s%s", n > 1 ? ", " : "", nm) != 0)
                break;
        }
    }
    if (n == 0) {
        rc = det_kube_fail(k, KD_ENOTFOUND, NULL, NULL, "get", gvr, what, id);
    } else if (n > 1) {
        det_err("%s ID \"%s\" is ambiguous in namespace \"%s\": it starts %d names (%s); give "
                "more of it",
                what, id, k->ns, n, kd_buf_str(&names));
        rc = DET_EXIT_USAGE;
    } else {
        *name = kd_xstrdup(kd_k8s_meta_str(match, "name"));
        if (obj)
            *obj = json_incref(match);
    }
out:
    json_decref(o);
    json_decref(list);
    kd_buf_free(&names);
    kd_k8s_status_free(&st);
    return rc;
}
