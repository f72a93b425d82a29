/*
 * The field checks that experiment configs (config.c) and task configs
 * (task.c) share: error messages with file:line:col, JSON path and "did
 * you mean", typed fields, and the pod-shaped sections both kinds of
 * config have (environment, bind_mounts, resources.devices).
 */
#include "config/check.h"
#include "config/k8smap.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/str.h"
#include "yaml/yaml.h"

/* ---- messages ------------------------------------------------------------- */

/* A short rendering of a value for "got ..." (strings quoted, long ones cut). */
const char *kd_config__desc(const json_t *v, char *buf, size_t n)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "a mapping";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t len = strlen(s);
        if (len > 40)
            snprintf(buf, n, "\"%.40s...\"", s);
        else
            snprintf(buf, n, "\"%s\"", s);
        return buf;
    }
    case JSON_INTEGER: snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); return buf;
    case JSON_REAL: {
        double d = json_real_value(v);
        int start = fabs(d) >= 1 && fabs(d) < 1e16 ? (int)floor(log10(fabs(d))) + 1 : 1;
        for (int prec = start; prec <= 17; prec++) { /* the shortest text that reads back */
            snprintf(buf, n, "%.*g", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
        if (!strpbrk(buf, ".e"))
            kd_strlcpy(buf + strlen(buf), ".0", n - strlen(buf));
        return buf;
    }
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "?";
}

static bool locate(struct kd_config_vctx *c, const json_t *node, const char *locpath, bool at_key,
                   const char **name, int *line, int *col)
{
    for (int i = 0; i < 2; i++) {
        if (!c->docs[i] || !node)
            continue;
        int rc = at_key ? kd_yaml_where_node_key(c->docs[i], node, line, col)
                        : kd_yaml_where_node(c->docs[i], node, line, col);
        if (rc == 0) {
            *name = kd_yaml_name(c->docs[i]);
            return true;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (!c->docs[i] || !locpath)
            continue;
        int rc = at_key ? kd_yaml_where_key(c->docs[i], locpath, line, col)
                        : kd_yaml_where(c->docs[i], locpath, line, col);
        if (rc == 0) {
            *name = kd_yaml_name(c->docs[i]);
            return true;
        }
    }
    return false;
}

int kd_config__fail_at(struct kd_config_vctx *c, const json_t *node, const char *locpath,
                       bool at_key, const char *path, const char *fmt, ...)
{
    char msg[KD_ERRLEN];
    const char *name = NULL;
    int line = 0, col = 0;
    va_list ap;

    if (c->rc)
        return c->rc;
    c->rc = KD_EINVALID;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!path || !*path)
        path = "(top level)";
    if (locate(c, node, locpath, at_key, &name, &line, &col))
        kd_seterr(c->err, c->rc, "%s:%d:%d: %s: %s", name, line, col, path, msg);
    else if (c->docs[0])
        kd_seterr(c->err, c->rc, "%s: %s: %s", kd_yaml_name(c->docs[0]), path, msg);
    else
        kd_seterr(c->err, c->rc, "%s: %s", path, msg);
    return c->rc;
}

/* out = base.key (or key at the top), cut to PATHLEN - 1 bytes. */
void kd_config__join(char *out, const char *base, const char *key)
{
    size_t n = 0;
    if (base && *base) {
        n = kd_strlcpy(out, base, PATHLEN);
        if (n < PATHLEN - 1)
            out[n++] = '.';
        if (n >= PATHLEN)
            n = PATHLEN - 1;
        out[n] = '\0';
    }
    kd_strlcpy(out + n, key, PATHLEN - n);
}

/* out = base[i]. */
void kd_config__joinidx(char *out, const char *base, size_t i)
{
    char idx[32];
    size_t n = kd_strlcpy(out, base, PATHLEN);
    if (n >= PATHLEN)
        n = PATHLEN - 1;
    if (snprintf(idx, sizeof(idx), "[%zu]", i) > 0)
        kd_strlcpy(out + n, idx, PATHLEN - n);
}

/* A field's value; NULL when absent or null (null means "use the default"). */
json_t *kd_config__field(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

bool kd_config__in_list(const char *s, const char *const *list)
{
    for (size_t i = 0; list[i]; i++)
        if (!strcmp(s, list[i]))
            return true;
    return false;
}

void kd_config__list_text(const char *const *list, char *buf, size_t n)
{
    buf[0] = '\0';
    for (size_t i = 0; list[i]; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", i ? ", " : "", list[i]);
    }
}

/*
 * The closest plausible candidate: kd_suggest's edit distance, else one that
 * extends or is extended by `word` ("grace" -> "grace_period",
 * "searcher_name" -> "searcher").
 */
const char *kd_config__suggest(const char *word, const char *const *cands)
{
    const char *s = kd_suggest(word, cands);
    size_t wl = strlen(word), best = 0;
    if (s || wl < 3)
        return s;
    for (size_t i = 0; cands[i]; i++) {
        size_t cl = strlen(cands[i]);
        if (cl < 3)
            continue;
        bool ext = cl > wl ? !strncmp(cands[i], word, wl) : !strncmp(word, cands[i], cl);
        if (ext && cl > best) {
            best = cl;
            s = cands[i];
        }
    }
    return s;
}

/* ---- generic checks -------------------------------------------------------------- */

/*
 * Every key of obj must be in `allowed`; `unsup` (may be NULL) names keys
 * that Determined knows but kdet does not support, with the reason.
 */
int kd_config__check_keys(struct kd_config_vctx *c, const json_t *obj, const char *path,
                          const char *const *allowed, const struct kd_config_unsupported *unsup,
                          const char *owner)
{
    const char *k;
    json_t *v;
    char p[PATHLEN];
    json_object_foreach((json_t *)obj, k, v)
    {
        if (kd_config__in_list(k, allowed))
            continue;
        kd_config__join(p, path, k);
        for (size_t i = 0; unsup && unsup[i].key; i++)
            if (!strcmp(unsup[i].key, k))
                return BADKEY(c, v, p, "%s", unsup[i].why);
        const char *s = kd_config__suggest(k, allowed);
        char all[768];
        kd_config__list_text(allowed, all, sizeof(all));
        if (s)
            return BADKEY(c, v, p, "unknown field%s%s; did you mean `%s`?", owner ? " of " : "",
                          owner ? owner : "", s);
        return BADKEY(c, v, p, "unknown field%s%s (known fields: %s)", owner ? " of " : "",
                      owner ? owner : "", all);
    }
    return 0;
}

int kd_config__want_object(struct kd_config_vctx *c, const json_t *v, const char *path)
{
    char d[96];
    if (!json_is_object(v))
        return BAD(c, v, path, "expected a mapping of fields, got %s",
                   kd_config__desc(v, d, sizeof(d)));
    return 0;
}

int kd_config__need(struct kd_config_vctx *c, const json_t *obj, const char *opath, const char *key,
                    const char *why)
{
    char p[PATHLEN];
    if (kd_config__field(obj, key))
        return 0;
    kd_config__join(p, opath, key);
    return kd_config__fail_at(c, obj, opath, false, p, "required field is missing%s%s",
                              why ? " " : "", why ? why : "");
}

void kd_config__int_phrase(int64_t min, int64_t max, char *buf, size_t n)
{
    if (min == INT64_MIN && max == INT64_MAX)
        snprintf(buf, n, "an integer");
    else if (min == 1 && max == INT64_MAX)
        snprintf(buf, n, "a positive integer");
    else if (min == 0 && max == INT64_MAX)
        snprintf(buf, n, "a non-negative integer");
    else if (max == INT64_MAX)
        snprintf(buf, n, "an integer >= %" PRId64, min);
    else
        snprintf(buf, n, "an integer from %" PRId64 " to %" PRId64, min, max);
}

/* An optional (or required) integer field in [min, max]. *out untouched when absent. */
int kd_config__want_int(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                        const char *key, bool required, int64_t min, int64_t max, int64_t *out)
{
    char p[PATHLEN], d[96], what[96];
    json_t *v = kd_config__field(obj, key);
    if (!v)
        return required ? kd_config__need(c, obj, opath, key, NULL) : 0;
    kd_config__join(p, opath, key);
    kd_config__int_phrase(min, max, what, sizeof(what));
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return BAD(c, v, p, "expected %s, got %s", what, kd_config__desc(v, d, sizeof(d)));
    if (out)
        *out = json_integer_value(v);
    return 0;
}

/* A number (integer or real) within bounds; `what` describes the accepted range. */
int kd_config__want_num(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                        const char *key, bool required, double lo, bool lo_excl, double hi,
                        bool hi_excl, const char *what, double *out)
{
    char p[PATHLEN], d[96];
    json_t *v = kd_config__field(obj, key);
    if (!v)
        return required ? kd_config__need(c, obj, opath, key, NULL) : 0;
    kd_config__join(p, opath, key);
    if (!json_is_number(v))
        return BAD(c, v, p, "expected %s, got %s", what, kd_config__desc(v, d, sizeof(d)));
    double x = json_number_value(v);
    if (x < lo || (lo_excl && x == lo) || x > hi || (hi_excl && x == hi))
        return BAD(c, v, p, "expected %s, got %s", what, kd_config__desc(v, d, sizeof(d)));
    if (out)
        *out = x;
    return 0;
}

int kd_config__want_bool(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                         const char *key)
{
    char p[PATHLEN], d[96];
    json_t *v = kd_config__field(obj, key);
    if (!v || json_is_boolean(v))
        return 0;
    kd_config__join(p, opath, key);
    if (json_is_string(v)) {
        static const char *const yaml11[] = {"yes", "no", "on", "off", "Yes", "No", "On", "Off",
                                             "YES", "NO", "ON", "OFF", "y",   "n",  NULL};
        if (kd_config__in_list(json_string_value(v), yaml11))
            return BAD(c, v, p,
                       "expected true or false, got %s (YAML 1.2 reads yes/no/on/off as "
                       "strings)",
                       kd_config__desc(v, d, sizeof(d)));
    }
    return BAD(c, v, p, "expected true or false, got %s", kd_config__desc(v, d, sizeof(d)));
}

int kd_config__want_str(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                        const char *key, bool required, const char **out)
{
    char p[PATHLEN], d[96];
    json_t *v = kd_config__field(obj, key);
    if (!v)
        return required ? kd_config__need(c, obj, opath, key, NULL) : 0;
    kd_config__join(p, opath, key);
    if (!json_is_string(v))
        return BAD(c, v, p, "expected a string, got %s", kd_config__desc(v, d, sizeof(d)));
    if (required && !*json_string_value(v))
        return BAD(c, v, p, "must not be empty");
    if (out)
        *out = json_string_value(v);
    return 0;
}

int kd_config__want_enum(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                         const char *key, bool required, const char *const *vals, const char **out)
{
    char p[PATHLEN], d[96], all[256];
    const char *s = NULL;
    if (kd_config__want_str(c, obj, opath, key, required, &s) || !s)
        return c->rc;
    if (kd_config__in_list(s, vals)) {
        if (out)
            *out = s;
        return 0;
    }
    kd_config__join(p, opath, key);
    kd_config__list_text(vals, all, sizeof(all));
    const char *sug = kd_config__suggest(s, vals);
    json_t *v = kd_config__field(obj, key);
    if (sug)
        return BAD(c, v, p, "expected one of %s, got %s; did you mean `%s`?", all,
                   kd_config__desc(v, d, sizeof(d)), sug);
    return BAD(c, v, p, "expected one of %s, got %s", all, kd_config__desc(v, d, sizeof(d)));
}

int kd_config__want_str_list(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                             const char *key)
{
    char p[PATHLEN], q[PATHLEN], d[96];
    json_t *v = kd_config__field(obj, key);
    size_t i;
    json_t *e;
    if (!v)
        return 0;
    kd_config__join(p, opath, key);
    if (!json_is_array(v))
        return BAD(c, v, p, "expected a list of strings, got %s", kd_config__desc(v, d, sizeof(d)));
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e)) {
            kd_config__joinidx(q, p, i);
            return BAD(c, e, q, "expected a string, got %s", kd_config__desc(e, d, sizeof(d)));
        }
    }
    return 0;
}

bool kd_config__is_abs_path(const char *s)
{
    return s && s[0] == '/';
}

int kd_config__want_abs_path(struct kd_config_vctx *c, const json_t *obj, const char *opath,
                             const char *key, bool required)
{
    const char *s = NULL;
    char p[PATHLEN], d[96];
    if (kd_config__want_str(c, obj, opath, key, required, &s) || !s)
        return c->rc;
    if (!kd_config__is_abs_path(s)) {
        kd_config__join(p, opath, key);
        json_t *v = kd_config__field(obj, key);
        return BAD(c, v, p, "expected an absolute path (starting with /), got %s",
                   kd_config__desc(v, d, sizeof(d)));
    }
    return 0;
}

bool kd_config__is_mem_size(const char *s)
{
    size_t i = 0;
    bool digits = false;
    while (s[i] >= '0' && s[i] <= '9')
        i++, digits = true;
    if (s[i] == '.') {
        i++;
        digits = false;
        while (s[i] >= '0' && s[i] <= '9')
            i++, digits = true;
    }
    if (!digits)
        return false;
    if (s[i] == ' ')
        i++;
    if (s[i] && strchr("kmgtpKMGTP", s[i])) {
        i++;
        if (s[i] == 'i' || s[i] == 'I')
            i++;
        if (s[i] == 'b' || s[i] == 'B')
            i++;
    } else if (s[i] == 'b' || s[i] == 'B') {
        i++;
    }
    return s[i] == '\0';
}

/*
 * A mount's path in the field `key` of e: absolute, no ".." component (the
 * API server refuses those in hostPath and mountPath), cleaned into out.
 * `hint` (may be NULL) follows the "absolute path" error.
 */
static int want_mount_path(struct kd_config_vctx *c, const json_t *e, const char *p,
                           const char *key, const char *hint, char *out, size_t len)
{
    char q[PATHLEN], d[96];
    const char *s = NULL;
    if (kd_config__want_str(c, e, p, key, true, &s))
        return c->rc;
    json_t *v = kd_config__field(e, key);
    kd_config__join(q, p, key);
    if (!kd_config__is_abs_path(s))
        return BAD(c, v, q, "expected an absolute path (starting with /), got %s%s",
                   kd_config__desc(v, d, sizeof(d)), hint ? hint : "");
    if (kd_path_clean(s, out, len))
        return BAD(c, v, q, "must not contain a .. component (Kubernetes refuses it), got %s",
                   kd_config__desc(v, d, sizeof(d)));
    return 0;
}

/*
 * bind_mounts or resources.devices: the shape of each entry, absolute
 * paths, and container paths unique within the list (compared cleaned, so
 * "/data/" and "/data" are one) and clear of kdet's own mounts (the
 * container's root, KD_MOUNT_RESERVED).
 */
int kd_config__check_shm_size(struct kd_config_vctx *c, const json_t *r)
{
    char d[96];
    json_t *shm = kd_config__field(r, "shm_size");
    if (shm && !(json_is_integer(shm) && json_integer_value(shm) >= 0) &&
        !(json_is_string(shm) && kd_config__is_mem_size(json_string_value(shm))))
        return BAD(c, shm, "resources.shm_size",
                   "expected a size in bytes or a string such as \"4Gi\" or \"512M\", got %s",
                   kd_config__desc(shm, d, sizeof(d)));
    c->shm_set = shm && !(json_is_integer(shm) && json_integer_value(shm) == 0);
    return 0;
}

int kd_config__check_mounts(struct kd_config_vctx *c, const json_t *list, const char *path,
                            bool devices)
{
    static const char *const k_bm[] = {"host_path", "container_path", "read_only", "propagation",
                                       NULL};
    static const char *const k_dev[] = {"host_path", "container_path", "mode", NULL};
    static const char *const props[] = {"rprivate", "private", "rshared", "shared",
                                        "rslave",   "slave",   NULL};
    char p[PATHLEN], q[PATHLEN], d[96], hp[PATHLEN], cp[PATHLEN];
    size_t i;
    json_t *e;
    json_t *seen = NULL;
    int rc = 0;
    if (!list)
        return 0;
    if (!json_is_array(list))
        return BAD(c, list, path, "expected a list of %s, got %s",
                   devices ? "devices" : "bind mounts", kd_config__desc(list, d, sizeof(d)));
    seen = json_object();
    if (!seen)
        kd_oom(64);
    json_array_foreach(list, i, e)
    {
        kd_config__joinidx(p, path, i);
        if (kd_config__want_object(c, e, p) ||
            kd_config__check_keys(c, e, p, devices ? k_dev : k_bm, NULL,
                                  devices ? "a device" : "a bind mount") ||
            want_mount_path(c, e, p, "host_path", NULL, hp, sizeof(hp))) {
            rc = c->rc;
            goto out;
        }
        if (devices) {
            const char *mode = NULL;
            if (want_mount_path(c, e, p, "container_path", NULL, cp, sizeof(cp)) ||
                kd_config__want_str(c, e, p, "mode", false, &mode)) {
                rc = c->rc;
                goto out;
            }
            if (mode && (!*mode || strspn(mode, "rwm") != strlen(mode))) {
                kd_config__join(q, p, "mode");
                rc = BAD(c, kd_config__field(e, "mode"), q,
                         "expected cgroup permissions made of r, w and m (e.g. \"mrw\"), got %s",
                         kd_config__desc(kd_config__field(e, "mode"), d, sizeof(d)));
                goto out;
            }
        } else if (want_mount_path(c, e, p, "container_path",
                                   "; the working directory is the unpacked model context, a new "
                                   "directory for each attempt",
                                   cp, sizeof(cp)) ||
                   kd_config__want_bool(c, e, p, "read_only") ||
                   kd_config__want_enum(c, e, p, "propagation", false, props, NULL)) {
            rc = c->rc;
            goto out;
        }
        json_t *cpv = kd_config__field(e, "container_path");
        kd_config__join(q, p, "container_path");
        if (!strcmp(cp, "/")) {
            rc = BAD(c, cpv, q, "must not be / (the root of the container)");
            goto out;
        }
        if (kd_path_within(cp, KD_MOUNT_RESERVED)) {
            rc = BAD(c, cpv, q,
                     "%s is under " KD_MOUNT_RESERVED
                     ", where kdet mounts the model context; choose another path",
                     kd_config__desc(cpv, d, sizeof(d)));
            goto out;
        }
        /* A set of the container paths seen so far: duplicates found in O(1) each. */
        json_t *first = json_object_get(seen, cp);
        if (first) {
            rc = BAD(c, cpv, q, "container_path %s is already used by %s[%" JSON_INTEGER_FORMAT "]",
                     kd_config__desc(cpv, d, sizeof(d)), path, json_integer_value(first));
            goto out;
        }
        if (json_object_set_new(seen, cp, json_integer((json_int_t)i)))
            kd_oom(64);
    }
out:
    json_decref(seen);
    return rc;
}

/* The trial container of environment.pod_spec (named trial or determined-container), or NULL. */
static const json_t *pod_spec_container(const json_t *cfg)
{
    const json_t *ps =
        json_object_get(json_object_get(kd_config__field(cfg, "environment"), "pod_spec"), "spec");
    size_t i;
    const json_t *ct;
    json_array_foreach(json_object_get(ps, "containers"), i, ct)
    {
        const char *n = json_string_value(json_object_get(ct, "name"));
        if (n && (!strcmp(n, "trial") || !strcmp(n, "determined-container")))
            return ct;
    }
    return NULL;
}

/*
 * Whether the trial container will be privileged: the pod_spec says so, or
 * a host device other than a GPU is passed (kdet-controller does that with
 * a privileged container, where the cluster allows it).
 */
static bool privileged(const json_t *cfg)
{
    const json_t *ct = pod_spec_container(cfg);
    size_t i;
    const json_t *dv;
    if (json_is_true(json_object_get(json_object_get(ct, "securityContext"), "privileged")))
        return true;
    json_array_foreach(kd_config__field(kd_config__field(cfg, "resources"), "devices"), i, dv)
    {
        if (!kd_device_is_gpu(json_string_value(json_object_get(dv, "host_path"))))
            return true;
    }
    return false;
}

/* Index of the entry of `list` whose cleaned `key` is the clean path cp; -1 when none. */
static int find_path(const json_t *list, const char *key, const char *cp)
{
    char x[PATHLEN];
    size_t i;
    const json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *s = json_string_value(json_object_get(e, key));
        if (s) {
            kd_path_clean(s, x, sizeof(x));
            if (!strcmp(x, cp))
                return (int)i;
        }
    }
    return -1;
}

/*
 * Where bind_mounts (and devices) meet the rest of the pod: /dev/shm when
 * resources.shm_size mounts it, the shared_fs checkpoint directory (a bind
 * mount of the same host_path there is the same mount and allowed), the
 * volumeMounts of the pod_spec's trial container, each other, and
 * Bidirectional propagation, which the API server allows only in a
 * privileged container.
 */
int kd_config__check_mount_clashes(struct kd_config_vctx *c, const json_t *cfg)
{
    char p[PATHLEN], q[PATHLEN], cp[PATHLEN], hp[PATHLEN], ck[PATHLEN] = "", d[96];
    const json_t *bm = kd_config__field(cfg, "bind_mounts"),
                 *dev = kd_config__field(kd_config__field(cfg, "resources"), "devices");
    const json_t *cs = kd_config__field(cfg, "checkpoint_storage");
    const json_t *ct = pod_spec_container(cfg);
    const char *csh = json_string_value(json_object_get(cs, "host_path"));
    const char *cst = json_string_value(json_object_get(cs, "type"));
    bool priv = privileged(cfg);
    size_t i;
    const json_t *e;
    if (csh && (!cst || !strcmp(cst, "shared_fs")))
        kd_path_clean(csh, ck, sizeof(ck));
    json_array_foreach(dev, i, e)
    {
        kd_config__joinidx(p, "resources.devices", i);
        kd_config__join(q, p, "container_path");
        kd_path_clean(json_string_value(json_object_get(e, "container_path")), cp, sizeof(cp));
        int k = find_path(json_object_get(ct, "volumeMounts"), "mountPath", cp);
        if (k >= 0)
            return BAD(c, kd_config__field(e, "container_path"), q,
                       "%s is also a volumeMount of environment.pod_spec's trial container "
                       "(volumeMounts[%d]); keep one of them",
                       cp, k);
    }
    json_array_foreach(bm, i, e)
    {
        kd_config__joinidx(p, "bind_mounts", i);
        kd_config__join(q, p, "container_path");
        json_t *cpv = kd_config__field(e, "container_path");
        kd_path_clean(json_string_value(cpv), cp, sizeof(cp));
        kd_path_clean(json_string_value(json_object_get(e, "host_path")), hp, sizeof(hp));
        if (c->shm_set && !strcmp(cp, "/dev/shm"))
            return BAD(c, cpv, q,
                       "/dev/shm is where kdet mounts the shared memory of resources.shm_size; "
                       "set one of them");
        if (ck[0] && !strcmp(cp, ck) && strcmp(hp, ck) != 0)
            return BAD(c, cpv, q,
                       "%s is where kdet mounts the shared_fs checkpoint storage "
                       "(checkpoint_storage.host_path); mount %s elsewhere",
                       cp, kd_config__desc(json_object_get(e, "host_path"), d, sizeof(d)));
        int k = find_path(json_object_get(ct, "volumeMounts"), "mountPath", cp);
        if (k >= 0)
            return BAD(c, cpv, q,
                       "%s is also a volumeMount of environment.pod_spec's trial container "
                       "(volumeMounts[%d]); keep one of them",
                       cp, k);
        k = find_path(dev, "container_path", cp);
        if (k >= 0)
            return BAD(c, cpv, q, "%s is also resources.devices[%d].container_path", cp, k);
        const char *prop = json_string_value(kd_config__field(e, "propagation"));
        const char *kp = kd_mount_propagation(prop);
        if (kp && !strcmp(kp, "Bidirectional") && !priv) {
            kd_config__join(q, p, "propagation");
            return BAD(c, kd_config__field(e, "propagation"), q,
                       "%s is Kubernetes' Bidirectional mount propagation, which only a "
                       "privileged container may use; use rslave (HostToContainer), or make the "
                       "trial container privileged in environment.pod_spec",
                       prop);
        }
    }
    return 0;
}

static int check_env_vars(struct kd_config_vctx *c, const json_t *v, const char *path)
{
    char p[PATHLEN], d[96];
    size_t i;
    json_t *e;
    if (!json_is_array(v))
        return BAD(c, v, path, "expected a list of NAME=value strings, got %s",
                   kd_config__desc(v, d, sizeof(d)));
    json_array_foreach(v, i, e)
    {
        kd_config__joinidx(p, path, i);
        const char *s = json_string_value(e);
        const char *eq = s ? strchr(s, '=') : NULL;
        if (!s || !eq || eq == s)
            return BAD(c, e, p, "expected NAME=value, got %s", kd_config__desc(e, d, sizeof(d)));
        for (const char *q = s; q < eq; q++) {
            bool ok = (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || *q == '_' ||
                      (q > s && *q >= '0' && *q <= '9');
            if (!ok)
                return BAD(c, e, p, "invalid environment variable name in %s",
                           kd_config__desc(e, d, sizeof(d)));
        }
    }
    return 0;
}

/* environment.proxy_ports: a list of {proxy_port (required, 1..65535), proxy_tcp, unauthenticated}.
 */
static int check_proxy_ports(struct kd_config_vctx *c, const json_t *pp)
{
    static const char *const keys[] = {"proxy_port", "proxy_tcp", "unauthenticated", NULL};
    const char *base = "environment.proxy_ports";
    char p[PATHLEN], d[96];
    size_t i;
    json_t *e;
    if (!pp)
        return 0;
    if (!json_is_array(pp))
        return BAD(c, pp, base,
                   "expected a list of {proxy_port, proxy_tcp, unauthenticated}, got %s",
                   kd_config__desc(pp, d, sizeof(d)));
    json_array_foreach(pp, i, e)
    {
        kd_config__joinidx(p, base, i);
        if (kd_config__want_object(c, e, p) ||
            kd_config__check_keys(c, e, p, keys, NULL, "a proxy port") ||
            kd_config__want_int(c, e, p, "proxy_port", true, 1, 65535, NULL) ||
            kd_config__want_bool(c, e, p, "proxy_tcp") ||
            kd_config__want_bool(c, e, p, "unauthenticated"))
            return c->rc;
    }
    return 0;
}

/*
 * environment.ports: names to container ports of the trial container, so a
 * name must be a Kubernetes port name and a port appear once.
 */
static int check_ports(struct kd_config_vctx *c, const json_t *ports)
{
    const char *k;
    json_t *v;
    char p[PATHLEN], d[96];
    if (!ports)
        return 0;
    if (kd_config__want_object(c, ports, "environment.ports"))
        return c->rc;
    json_object_foreach((json_t *)ports, k, v)
    {
        kd_config__join(p, "environment.ports", k);
        if (kd_config__want_int(c, ports, "environment.ports", k, false, 1, 65535, NULL))
            return c->rc;
        if (!kd_port_name_valid(k))
            return BADKEY(c, v, p,
                          "not a Kubernetes port name: 1 to 15 characters of a-z, 0-9 and '-', "
                          "with a letter, no '-' at either end or twice in a row (e.g. "
                          "\"tensorboard\", \"jupyter-lab\")");
        const char *k2;
        json_t *v2;
        json_object_foreach((json_t *)ports, k2, v2)
        {
            if (k2 == k || !json_is_integer(v2) || !strcmp(k2, k))
                break;
            if (json_integer_value(v2) == json_integer_value(v))
                return BAD(c, v, p, "port %s is already environment.ports.%s",
                           kd_config__desc(v, d, sizeof(d)), k2);
        }
    }
    return 0;
}

/* environment.add_capabilities / drop_capabilities: Linux capability names ("CAP_" optional). */
static int check_capabilities(struct kd_config_vctx *c, const json_t *e, const char *key)
{
    char p[PATHLEN], q[PATHLEN], d[96], near[32];
    size_t i;
    json_t *v;
    kd_config__join(p, "environment", key);
    if (kd_config__want_str_list(c, e, "environment", key))
        return c->rc;
    json_array_foreach(kd_config__field(e, key), i, v)
    {
        if (kd_capability_name(json_string_value(v), near, sizeof(near)) == 0)
            continue;
        kd_config__joinidx(q, p, i);
        if (near[0])
            return BAD(c, v, q, "%s is not a Linux capability; did you mean `%s`?",
                       kd_config__desc(v, d, sizeof(d)), near);
        return BAD(c, v, q,
                   "%s is not a Linux capability (such as SYS_PTRACE, IPC_LOCK or ALL; "
                   "CAP_ in front is optional)",
                   kd_config__desc(v, d, sizeof(d)));
    }
    return 0;
}

int kd_config__check_environment(struct kd_config_vctx *c, const json_t *cfg)
{
    static const char *const keys[] = {"image",
                                       "environment_variables",
                                       "pod_spec",
                                       "force_pull_image",
                                       "registry_auth",
                                       "add_capabilities",
                                       "drop_capabilities",
                                       "ports",
                                       "proxy_ports",
                                       NULL};
    static const char *const flavors[] = {"cpu", "cuda", "rocm", "gpu", NULL};
    const char *ep = "environment";
    char p[PATHLEN], d[96];
    json_t *e = kd_config__field(cfg, "environment");
    if (!e)
        return 0;
    if (kd_config__want_object(c, e, ep) || kd_config__check_keys(c, e, ep, keys, NULL, NULL) ||
        kd_config__want_bool(c, e, ep, "force_pull_image"))
        return c->rc;
    json_t *img = kd_config__field(e, "image");
    if (img) {
        if (json_is_object(img)) {
            const char *k;
            json_t *v;
            if (kd_config__check_keys(c, img, "environment.image", flavors, NULL, NULL))
                return c->rc;
            json_object_foreach(img, k, v)
            {
                if (kd_config__want_str(c, img, "environment.image", k, false, NULL))
                    return c->rc;
            }
        } else if (!json_is_string(img) || !*json_string_value(img)) {
            return BAD(c, img, "environment.image",
                       "expected an image name or {cpu: IMAGE, cuda: IMAGE}, got %s",
                       kd_config__desc(img, d, sizeof(d)));
        }
    }
    json_t *ev = kd_config__field(e, "environment_variables");
    if (ev) {
        if (json_is_object(ev)) {
            const char *k;
            json_t *v;
            if (kd_config__check_keys(c, ev, "environment.environment_variables", flavors, NULL,
                                      NULL))
                return c->rc;
            json_object_foreach(ev, k, v)
            {
                kd_config__join(p, "environment.environment_variables", k);
                if (!json_is_null(v) && check_env_vars(c, v, p))
                    return c->rc;
            }
        } else if (check_env_vars(c, ev, "environment.environment_variables")) {
            return c->rc;
        }
    }
    json_t *ps = kd_config__field(e, "pod_spec");
    if (ps) {
        if (kd_config__want_object(c, ps, "environment.pod_spec"))
            return c->rc;
        json_t *md = json_object_get(ps, "metadata");
        if (json_is_object(md) && json_object_get(md, "name"))
            return BADKEY(c, json_object_get(md, "name"), "environment.pod_spec.metadata.name",
                          "the pod name is set by kdet and cannot be configured");
    }
    json_t *ra = kd_config__field(e, "registry_auth");
    if (ra && kd_config__want_object(c, ra, "environment.registry_auth"))
        return c->rc;
    if (check_proxy_ports(c, kd_config__field(e, "proxy_ports")))
        return c->rc;
    if (check_capabilities(c, e, "add_capabilities") ||
        check_capabilities(c, e, "drop_capabilities"))
        return c->rc;
    return check_ports(c, kd_config__field(e, "ports"));
}
