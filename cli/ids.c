/*
 * det's integer ids, as Determined users type them (`det e describe 12`,
 * `det trial logs 34`): the ids are kdet-controller's store ids
 * (experiments.id, trials.id), which only its user API knows, so they are
 * read from there; names stay the primary key of everything else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"

bool det_is_id(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 18 && strspn(s, "0123456789") == n;
}

/* "/api/v1/namespaces/NS/KIND/NAME[/TAIL]" into b (NAME and TAIL may be NULL). 0 or KD_ETOOBIG. */
static int api_path(struct kd_buf *b, const char *ns, const char *kind, const char *name,
                    const char *tail)
{
    int rc = kd_buf_puts(b, "/api/v1/namespaces/");
    if (rc == 0)
        rc = det_urlencode(b, ns);
    if (rc == 0)
        rc = kd_buf_printf(b, "/%s", kind);
    if (rc == 0 && name != NULL && (rc = kd_buf_putc(b, '/')) == 0)
        rc = det_urlencode(b, name);
    if (rc == 0 && tail != NULL)
        rc = kd_buf_printf(b, "/%s", tail);
    return rc;
}

json_t *det_ids(struct det_kube *k, const char *exp, char *why, size_t len)
{
    struct det_api api = {0};
    struct kd_buf path = KD_BUF_INIT(2048);
    json_t *ans = NULL, *ids = NULL;
    static const struct det_args none = {0};
    if (det_api_open_quiet(k->a ? k->a : &none, "looking up integer ids", &api, why, len) != 0)
        goto out;
    if (api_path(&path, k->ns, "experiments", exp, NULL) != 0 ||
        (exp == NULL && kd_buf_puts(&path, "?archived=true") != 0)) {
        snprintf(why, len, "experiment name too long");
        goto out;
    }
    if (det_api_get(&api, kd_buf_str(&path), &ans) != 0)
        goto out;
    ids = json_object();
    json_t *objs = json_object_get(ans, exp ? "trials" : "experiments");
    if (exp != NULL)
        json_array_append(objs, json_object_get(ans, "experiment"));
    size_t i;
    json_t *o;
    json_array_foreach(objs, i, o)
    {
        const char *uid = json_string_value(json_object_get(o, "uid"));
        json_t *id = json_object_get(o, "id");
        if (uid != NULL && json_is_integer(id))
            json_object_set(ids, uid, id);
    }
out:
    json_decref(ans);
    kd_buf_free(&path);
    det_api_close(&api);
    return ids;
}

int det_id_resolve(struct det_kube *k, bool trial, const char *id, char **name)
{
    struct det_api api = {0};
    struct kd_buf path = KD_BUF_INIT(2048);
    json_t *ans = NULL;
    char why[1024] = "";
    const char *what = trial ? "trial" : "experiment";
    static const struct det_args none = {0};
    int rc =
        det_api_open_quiet(k->a ? k->a : &none, "looking up integer ids", &api, why, sizeof(why));
    *name = NULL;
    if (rc != 0) {
        det_err("no %s is named \"%s\" in namespace \"%s\", and %s", what, id, k->ns, why);
        goto out;
    }
    api.why = NULL; /* from here on, errors are printed */
    api.quiet_404 = true;
    if (api_path(&path, k->ns, trial ? "trials" : "experiments", id, NULL) != 0) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = det_api_get(&api, kd_buf_str(&path), &ans);
    if (rc == DET_EXIT_NOTFOUND) {
        det_err("no %s in namespace \"%s\" is named \"%s\" or has the id %s (see 'det %s list%s')",
                what, k->ns, id, id, what, trial ? " EXPERIMENT" : "");
        goto out;
    }
    if (rc != 0)
        goto out;
    const char *n = json_string_value(json_object_get(json_object_get(ans, what), "name"));
    if (n == NULL) {
        det_err("the controller API's answer for %s %s has no name", what, id);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    *name = kd_xstrdup(n);
out:
    json_decref(ans);
    kd_buf_free(&path);
    det_api_close(&api);
    return rc;
}
