/*
 * The securityContext decision (runas.h), apart from the kubelet that acts
 * on it, so that every combination is a table test.
 */
#include "runas.h"

#include <pwd.h>
#include <stdio.h>
#include <string.h>

static const json_t *field(const json_t *csc, const json_t *psc, const char *name)
{
    const json_t *v = json_object_get(csc, name);
    if (v == NULL || json_is_null(v))
        v = json_object_get(psc, name);
    return v != NULL && !json_is_null(v) ? v : NULL;
}

static gid_t primary_gid(uid_t uid)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res != NULL)
        return pw.pw_gid;
    return 65534;
}

static void add_group(struct kd_runas *r, json_int_t g)
{
    if (g < 0 || r->ngroups >= KD_RUNAS_MAX_GROUPS)
        return;
    for (size_t i = 0; i < r->ngroups; i++)
        if (r->groups[i] == (gid_t)g)
            return;
    r->groups[r->ngroups++] = (gid_t)g;
}

int kd_runas_decide(const json_t *pod, const json_t *container, uid_t own_uid, gid_t own_gid,
                    struct kd_runas *out, char *err)
{
    const json_t *psc = json_object_get(json_object_get(pod, "spec"), "securityContext");
    const json_t *csc = json_object_get(container, "securityContext");
    const json_t *user = field(csc, psc, "runAsUser");
    const json_t *group = field(csc, psc, "runAsGroup");
    const json_t *nonroot = field(csc, psc, "runAsNonRoot");
    const json_t *md = json_object_get(pod, "metadata");
    const char *cname = json_string_value(json_object_get(container, "name"));
    memset(out, 0, sizeof(*out));
    out->uid = own_uid;
    out->gid = own_gid;
    if (json_is_integer(user)) {
        out->change = true;
        out->uid = (uid_t)json_integer_value(user);
        out->gid = primary_gid(out->uid);
    }
    if (json_is_integer(group)) {
        out->change = true;
        out->gid = (gid_t)json_integer_value(group);
    }
    if (out->change) {
        size_t i;
        json_t *g;
        json_array_foreach(json_object_get(psc, "supplementalGroups"), i, g)
        {
            if (json_is_integer(g))
                add_group(out, json_integer_value(g));
        }
        const json_t *fs = json_object_get(psc, "fsGroup");
        if (json_is_integer(fs))
            add_group(out, json_integer_value(fs));
    }
    if (json_is_true(nonroot) && out->uid == 0) {
        char desc[600];
        snprintf(desc, sizeof(desc), "%s_%s(%s)",
                 json_string_value(json_object_get(md, "name")) ?: "",
                 json_string_value(json_object_get(md, "namespace")) ?: "",
                 json_string_value(json_object_get(md, "uid")) ?: "");
        if (json_is_integer(user))
            return kd_seterr(err, KD_EINVALID,
                             "container's runAsUser breaks non-root policy (pod: \"%s\", "
                             "container: %s)",
                             desc, cname != NULL ? cname : "");
        return kd_seterr(err, KD_EINVALID,
                         "container has runAsNonRoot and image will run as root (pod: \"%s\", "
                         "container: %s)",
                         desc, cname != NULL ? cname : "");
    }
    return 0;
}
