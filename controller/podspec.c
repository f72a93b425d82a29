/*
 * Trial pods from a Trial, its experiment configuration and a placement
 * (see podspec.h). Everything the launcher needs travels in the
 * environment, so the pod spec is the whole contract between the
 * controller and the data plane.
 */
#include "podspec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/k8smap.h"
#include "core/alloc.h"
#include "core/str.h"

const char *kd_pod_priority_class(int priority)
{
    const char *name = "kdet-normal";
    if (priority >= 1 && priority <= 29)
        name = "kdet-high";
    else if (priority >= 70)
        name = "kdet-low";
    return name;
}

void kd_pod_service_name(const char *trial_uid, char *buf, size_t len)
{
    char hex[13] = "";
    size_t n = 0;
    for (const char *p = trial_uid != NULL ? trial_uid : ""; *p != '\0' && n < 12; p++) {
        if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))
            hex[n++] = *p;
    }
    hex[n] = '\0';
    snprintf(buf, len, "kdt-%s", hex);
}

int kd_pod_name(const char *trial, int rank, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s-%d", trial, rank);
    return n < 0 || (size_t)n >= len || n > 253 ? KD_ETOOBIG : 0;
}

static const json_t *flavor(const json_t *v, int gpus)
{
    const json_t *r = v;
    if (json_is_object(v)) {
        const char *order_gpu[] = {"cuda", "gpu", "rocm", "cpu", NULL};
        const char *order_cpu[] = {"cpu", "cuda", "gpu", "rocm", NULL};
        const char **order = gpus > 0 ? order_gpu : order_cpu;
        r = NULL;
        for (int i = 0; order[i] != NULL && r == NULL; i++)
            r = json_object_get(v, order[i]);
    }
    return r;
}

static void env_set(json_t *env, const char *name, const char *value)
{
    size_t i;
    json_t *e, *found = NULL;
    json_array_foreach(env, i, e)
    {
        if (found == NULL && strcmp(json_string_value(json_object_get(e, "name")) ?: "", name) == 0)
            found = e;
    }
    if (found != NULL)
        json_object_set_new(found, "value", json_string(value));
    else
        json_array_append_new(env, json_pack("{s:s,s:s}", "name", name, "value", value));
}

static const json_t *get_path(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);
    return b != NULL ? json_object_get(v, b) : v;
}

/* The user's environment.pod_spec, checked: a Pod manifest (object) without metadata.name. */
static int user_pod(const json_t *cfg, json_t **out, char *err)
{
    int rc = 0;
    const json_t *ps = get_path(json_object_get(cfg, "environment"), "pod_spec", NULL);
    *out = NULL;
    if (ps == NULL || json_is_null(ps)) {
        *out = json_object();
        goto out;
    }
    if (!json_is_object(ps)) {
        rc = kd_seterr(err, KD_EINVALID, "environment.pod_spec: expected a Pod manifest (mapping)");
        goto out;
    }
    if (json_object_get(json_object_get(ps, "metadata"), "name") != NULL) {
        rc = kd_seterr(err, KD_EINVALID,
                       "environment.pod_spec.metadata.name: not allowed (kdet names trial pods)");
        goto out;
    }
    json_t *spec = json_object_get(ps, "spec");
    if (spec != NULL && !json_is_object(spec)) {
        rc = kd_seterr(err, KD_EINVALID, "environment.pod_spec.spec: expected a mapping");
        goto out;
    }
    *out = json_deep_copy(ps);
out:
    return rc;
}

static const char *meta(const json_t *obj, const char *field)
{
    const char *s = json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
    return s != NULL ? s : "";
}

static json_t *owner_ref(const json_t *trial)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:b,s:b}", "apiVersion", "kdet.io/v1alpha1", "kind", "Trial",
                     "name", meta(trial, "name"), "uid", meta(trial, "uid"), "controller", 1,
                     "blockOwnerDeletion", 1);
}

/* What workers need to talk to the controller API (docs/launcher.md). */
static void api_env(json_t *env, const json_t *trial, const json_t *cfg,
                    const struct kd_pod_opts *o)
{
    char secret[300];
    const json_t *spec = json_object_get(trial, "spec");
    const json_t *cs = json_object_get(cfg, "checkpoint_storage");
    const char *unit = json_string_value(json_object_get(spec, "lengthUnit"));
    snprintf(secret, sizeof(secret), "%s-token", meta(trial, "name"));
    size_t i;
    json_t *e, *found = NULL;
    json_array_foreach(env, i, e)
    {
        if (found == NULL &&
            strcmp(json_string_value(json_object_get(e, "name")) ?: "", "KDET_TOKEN") == 0)
            found = e;
    }
    if (found == NULL) {
        found = json_pack("{s:s}", "name", "KDET_TOKEN");
        json_array_append_new(env, found);
    }
    json_object_del(found, "value");
    json_object_set_new(found, "valueFrom",
                        json_pack("{s:{s:s,s:s}}", "secretKeyRef", "name", secret, "key", "token"));
    if (o->controller_ca) {
        /* Optional: a Secret made before TLS was turned on has no CA (the pod then fails TLS
         * with a clear message instead of never starting). */
        json_t *ca =
            json_pack("{s:s,s:{s:{s:s,s:s,s:b}}}", "name", "KDET_CONTROLLER_CA", "valueFrom",
                      "secretKeyRef", "name", secret, "key", "ca.crt", "optional", 1);
        size_t k;
        json_t *x;
        json_array_foreach(env, k, x)
        {
            if (strcmp(json_string_value(json_object_get(x, "name")) ?: "", "KDET_CONTROLLER_CA") ==
                0) {
                json_array_remove(env, k);
                break;
            }
        }
        json_array_append_new(env, ca);
    }
    env_set(env, "KDET_NAMESPACE", meta(trial, "namespace"));
    if (json_is_object(cs)) {
        char *js = json_dumps(cs, JSON_COMPACT | JSON_SORT_KEYS);
        env_set(env, "KDET_CHECKPOINT_STORAGE", js);
        free(js);
    }
    env_set(env, "KDET_LENGTH_UNIT", unit != NULL && unit[0] != '\0' ? unit : "batches");
    if (o->latest_checkpoint != NULL && o->latest_checkpoint[0] != '\0')
        env_set(env, "KDET_LATEST_CHECKPOINT", o->latest_checkpoint);
}

/* The user's environment_variables ("NAME=value" strings) into env. */
static int user_env(json_t *env, const json_t *cfg, int gpus, char *err)
{
    int rc = 0;
    const json_t *ev = flavor(get_path(cfg, "environment", "environment_variables"), gpus);
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *s = json_string_value(e);
        const char *eq = s != NULL ? strchr(s, '=') : NULL;
        if (eq == NULL || eq == s) {
            rc = kd_seterr(err, KD_EINVALID,
                           "environment.environment_variables[%zu]: expected NAME=value", i);
            goto out;
        }
        char *name = kd_xstrndup(s, (size_t)(eq - s));
        env_set(env, name, eq + 1);
        free(name);
    }
out:
    return rc;
}

/* resources.shm_size (bytes or a size string) as a Kubernetes quantity; NULL when unset. */
static char *shm_quantity(const json_t *cfg)
{
    const json_t *v = get_path(cfg, "resources", "shm_size");
    char *q = NULL;
    uint64_t n;
    if (json_is_integer(v) && json_integer_value(v) > 0)
        q = kd_xasprintf("%" PRId64, (int64_t)json_integer_value(v));
    else if (json_is_string(v) && kd_parse_size(json_string_value(v), &n) == 0)
        q = kd_xasprintf("%" PRIu64, n);
    else if (json_is_string(v))
        q = kd_xstrdup(json_string_value(v));
    return q;
}

/* Find (or append) kdet's container (named trial or determined-container in the user's pod_spec)
 * in containers, and name it `name`. */
static json_t *our_container(json_t *containers, const char *name)
{
    size_t i;
    json_t *c, *found = NULL;
    json_array_foreach(containers, i, c)
    {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (found == NULL && n != NULL &&
            (strcmp(n, KD_POD_CONTAINER) == 0 || strcmp(n, "determined-container") == 0))
            found = c;
    }
    if (found == NULL) {
        found = json_object();
        json_array_insert_new(containers, 0, found);
    }
    json_object_set_new(found, "name", json_string(name));
    return found;
}

static json_t *child(json_t *o, const char *key, bool array)
{
    json_t *v = json_object_get(o, key);
    if (array ? !json_is_array(v) : !json_is_object(v)) {
        v = array ? json_array() : json_object();
        json_object_set_new(o, key, v);
    }
    return v;
}

/*
 * shared_fs checkpoint storage: the workers write under host_path, so the
 * node's host_path is mounted at the same path in the container (a
 * hostPath volume; DirectoryOrCreate, as Determined's agents create it).
 * A volume or mount the user's pod_spec already has under that name or at
 * that path is left as it is.
 */
static void ckpt_volume(json_t *ps, json_t *c, const json_t *cfg)
{
    const json_t *cs = json_object_get(cfg, "checkpoint_storage");
    const char *type = json_string_value(json_object_get(cs, "type"));
    const char *hp = json_string_value(json_object_get(cs, "host_path"));
    if (type == NULL || strcmp(type, "shared_fs") != 0 || hp == NULL || hp[0] != '/')
        return;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(ps, "volumes"), i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "name")) ?: "", KD_POD_CKPT_VOLUME) == 0)
            return;
    }
    json_array_foreach(json_object_get(c, "volumeMounts"), i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "mountPath")) ?: "", hp) == 0)
            return;
    }
    json_array_append_new(child(ps, "volumes", true),
                          json_pack("{s:s,s:{s:s,s:s}}", "name", KD_POD_CKPT_VOLUME, "hostPath",
                                    "path", hp, "type", "DirectoryOrCreate"));
    json_array_append_new(child(c, "volumeMounts", true),
                          json_pack("{s:s,s:s}", "name", KD_POD_CKPT_VOLUME, "mountPath", hp));
}

/*
 * The cluster's non-root default (--trial-run-as-user): pod-level runAsUser,
 * runAsGroup and runAsNonRoot, unless the user's pod_spec already chose a
 * user for the pod or for the trial container.
 */
static void run_as(json_t *ps, const json_t *c, long uid)
{
    if (uid <= 0 || json_object_get(json_object_get(ps, "securityContext"), "runAsUser") != NULL ||
        json_object_get(json_object_get(c, "securityContext"), "runAsUser") != NULL)
        return;
    json_t *sc = child(ps, "securityContext", false);
    json_object_set_new(sc, "runAsUser", json_integer(uid));
    if (json_object_get(sc, "runAsGroup") == NULL)
        json_object_set_new(sc, "runAsGroup", json_integer(uid));
    if (json_object_get(sc, "runAsNonRoot") == NULL)
        json_object_set_new(sc, "runAsNonRoot", json_true());
}

static bool env_has(const json_t *env, const char *name)
{
    size_t i;
    const json_t *e;
    json_array_foreach(env, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")) ?: "", name) == 0)
            return true;
    }
    return false;
}

/* At most this much compact JSON in KDET_EXPERIMENT_CONFIG: Linux caps one environment string
 * at 128 KiB (MAX_ARG_STRLEN), and the pod is stored once per attempt. */
#define CONFIG_ENV_MAX (64 * 1024)

/*
 * KDET_EXPERIMENT_CONFIG: the parts of the experiment config that training code reads
 * (Determined's cluster_info.trial.config; the Python Trainer's records_per_epoch,
 * optimizations, min_*_period, searcher metric), unless the user's environment sets it. Past
 * CONFIG_ENV_MAX `data` is left out, then `hyperparameters`, then the variable.
 */
static void config_env(json_t *env, const json_t *cfg)
{
    static const char *const keys[] = {"name",
                                       "description",
                                       "labels",
                                       "searcher",
                                       "records_per_epoch",
                                       "min_validation_period",
                                       "min_checkpoint_period",
                                       "perform_initial_validation",
                                       "checkpoint_policy",
                                       "scheduling_unit",
                                       "optimizations",
                                       "profiling",
                                       "max_restarts",
                                       "hyperparameters",
                                       "data"};
    static const char *const drop[] = {"data", "hyperparameters", NULL};
    if (env_has(env, "KDET_EXPERIMENT_CONFIG"))
        return;
    json_t *sub = json_object();
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (v != NULL && !json_is_null(v))
            json_object_set(sub, keys[i], v);
    }
    char *js = json_dumps(sub, JSON_COMPACT | JSON_SORT_KEYS);
    for (int i = 0; js != NULL && strlen(js) > CONFIG_ENV_MAX && drop[i] != NULL; i++) {
        free(js);
        json_object_del(sub, drop[i]);
        js = json_dumps(sub, JSON_COMPACT | JSON_SORT_KEYS);
    }
    if (js != NULL && strlen(js) <= CONFIG_ENV_MAX)
        env_set(env, "KDET_EXPERIMENT_CONFIG", js);
    free(js);
    json_decref(sub);
}

/*
 * s3 checkpoint storage with a credentials_secret: the trial's workers
 * (checkpoints) and the launcher (an s3:// context) read the keys from that
 * Secret of the experiment's namespace through secretKeyRef, so the values
 * never appear in the pod spec. AWS_SESSION_TOKEN is optional in the
 * Secret. A variable the user's environment or pod_spec already sets wins.
 */
static void s3_creds_env(json_t *env, const json_t *cfg)
{
    static const char *const keys[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                       "AWS_SESSION_TOKEN"};
    const json_t *cs = json_object_get(cfg, "checkpoint_storage");
    const char *type = json_string_value(json_object_get(cs, "type"));
    const char *secret = json_string_value(json_object_get(cs, "credentials_secret"));
    if (type == NULL || strcmp(type, "s3") != 0 || secret == NULL || secret[0] == '\0')
        return;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (env_has(env, keys[i]))
            continue;
        json_array_append_new(env, json_pack("{s:s,s:{s:{s:s,s:s,s:b}}}", "name", keys[i],
                                             "valueFrom", "secretKeyRef", "name", secret, "key",
                                             keys[i], "optional", i == 2));
    }
}

/*
 * The experiment's context (docs/launcher.md): the packed ConfigMap as a
 * read-only volume of its one item, a URL the launcher fetches, or a
 * directory already on the node. The launcher verifies the digest and
 * unpacks; the pod only says where the archive is.
 */
static void context_env(json_t *ps, json_t *c, json_t *env, const json_t *ctx, const json_t *cfg,
                        const char *run_id, int rank)
{
    const char *cm = json_string_value(json_object_get(ctx, "configMap"));
    const char *url = json_string_value(json_object_get(ctx, "url"));
    const char *path = json_string_value(json_object_get(ctx, "path"));
    const char *sha = json_string_value(json_object_get(ctx, "sha256"));
    bool archive = true;
    if (cm != NULL && cm[0] != '\0') {
        char *mount = kd_xasprintf("%s/%s-%d", KD_POD_CONTEXT_MOUNT, run_id, rank);
        char *file = kd_xasprintf("%s/%s", mount, KD_POD_CONTEXT_KEY);
        json_array_append_new(child(ps, "volumes", true),
                              json_pack("{s:s,s:{s:s,s:[{s:s,s:s}]}}", "name",
                                        KD_POD_CONTEXT_VOLUME, "configMap", "name", cm, "items",
                                        "key", KD_POD_CONTEXT_KEY, "path", KD_POD_CONTEXT_KEY));
        json_array_append_new(child(c, "volumeMounts", true),
                              json_pack("{s:s,s:s,s:b}", "name", KD_POD_CONTEXT_VOLUME, "mountPath",
                                        mount, "readOnly", 1));
        env_set(env, "KDET_CONTEXT_ARCHIVE", file);
        free(file);
        free(mount);
    } else if (url != NULL && url[0] != '\0') {
        env_set(env, "KDET_CONTEXT_URL", url);
        /* an s3:// context is fetched with the checkpoint storage's endpoint and region */
        const json_t *cs = json_object_get(cfg, "checkpoint_storage");
        if (kd_str_has_prefix(url, "s3://") && json_is_object(cs) &&
            !env_has(env, "KDET_CHECKPOINT_STORAGE")) {
            char *js = json_dumps(cs, JSON_COMPACT | JSON_SORT_KEYS);
            if (js == NULL)
                kd_oom(0);
            env_set(env, "KDET_CHECKPOINT_STORAGE", js);
            free(js);
        }
    } else {
        archive = false;
        if (path != NULL && path[0] != '\0')
            env_set(env, "KDET_CONTEXT_DIR", path);
    }
    if (archive && sha != NULL && sha[0] != '\0')
        env_set(env, "KDET_CONTEXT_SHA256", sha);
}

/*
 * The CPU (and memory) of `slots` CPU slots as the trial container's
 * requests and limits, as equal quantities (a Guaranteed share): "2",
 * "1500m"; memory in bytes.
 */
static void slot_resources(json_t *c, int slots, const struct kd_pod_opts *o)
{
    char q[32];
    int64_t per = o->cpu_per_slot_milli > 0 ? o->cpu_per_slot_milli : 1000;
    int64_t milli = per * slots;
    json_t *res = child(c, "resources", false);
    json_t *req = child(res, "requests", false), *lim = child(res, "limits", false);
    if (milli % 1000 == 0)
        snprintf(q, sizeof(q), "%" PRId64, milli / 1000);
    else
        snprintf(q, sizeof(q), "%" PRId64 "m", milli);
    json_object_set_new(req, "cpu", json_string(q));
    json_object_set_new(lim, "cpu", json_string(q));
    if (o->memory_per_slot > 0) {
        snprintf(q, sizeof(q), "%" PRIu64, o->memory_per_slot * (uint64_t)slots);
        json_object_set_new(req, "memory", json_string(q));
        json_object_set_new(lim, "memory", json_string(q));
    }
}

/*
 * Keep the pod off `nodes` (exclude_node log policies): node selector terms
 * are ORed, so the NotIn expression goes into every term the user's
 * pod_spec has, or into a new one.
 */
static void exclude_nodes(json_t *ps, const char *const *nodes, int n)
{
    json_t *req = child(child(child(ps, "affinity", false), "nodeAffinity", false),
                        "requiredDuringSchedulingIgnoredDuringExecution", false);
    json_t *terms = child(req, "nodeSelectorTerms", true);
    json_t *values = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(values, json_string(nodes[i]));
    if (json_array_size(terms) == 0)
        json_array_append_new(terms, json_object());
    size_t k;
    json_t *term;
    json_array_foreach(terms, k, term)
    {
        if (!json_is_object(term))
            continue;
        json_array_append_new(child(term, "matchExpressions", true),
                              json_pack("{s:s,s:s,s:O}", "key", "kubernetes.io/hostname",
                                        "operator", "NotIn", "values", values));
    }
    json_decref(values);
}

/* resources.devices other than GPUs (a GPU is the device plugin's), when the cluster allows. */
static int check_devices(const json_t *cfg, const struct kd_pod_opts *o, char *err)
{
    int rc = 0;
    size_t i;
    const json_t *d;
    json_array_foreach(get_path(cfg, "resources", "devices"), i, d)
    {
        const char *hp = json_string_value(json_object_get(d, "host_path"));
        if (kd_device_is_gpu(hp) || o->allow_host_devices)
            continue;
        rc = kd_seterr(err, KD_EINVALID,
                       "resources.devices[%zu]: host device %s: this cluster does not pass host "
                       "devices to trials (that takes a privileged container; kdet-controller "
                       "--allow-host-devices); ask its admin, or request a device plugin's "
                       "resource in environment.pod_spec",
                       i, hp != NULL ? hp : "");
        goto out;
    }
out:
    return rc;
}

static int rendezvous_port(const struct kd_pod_opts *o)
{
    return o->master_port > 0 ? o->master_port : KD_POD_DEFAULT_PORT;
}

/* environment.ports: none on the rendezvous port of the chief. */
static int check_ports(const json_t *cfg, const struct kd_pod_opts *o, char *err)
{
    int rc = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)get_path(cfg, "environment", "ports"), k, v)
    {
        if (json_integer_value(v) == rendezvous_port(o)) {
            rc = kd_seterr(err, KD_EINVALID,
                           "environment.ports.%s: %d is the port kdet's workers meet on "
                           "(kdet-controller --master-port); choose another",
                           k, rendezvous_port(o));
            goto out;
        }
    }
out:
    return rc;
}

/*
 * A stand-in attempt built from the configuration alone: every rule of kd_pod_build that does
 * not depend on the trial (host devices, ports, mounts against the pod_spec, the entrypoint)
 * runs once, when the experiment is read, rather than failing each trial's pods.
 */
int kd_pod_check(const json_t *cfg, const struct kd_pod_opts *o, char *err)
{
    json_t *pods = NULL;
    json_t *trial = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:i}}", "metadata", "name", "check",
                              "namespace", "check", "uid", "", "spec", "experiment", "check",
                              "requestId", "check", "seed", 0);
    struct kd_pod_opts co = *o;
    co.context = NULL;
    co.nexclude = 0;
    int rc = check_devices(cfg, o, err);
    if (rc == 0)
        rc = check_ports(cfg, o, err);
    if (rc == 0)
        rc = kd_pod_build(trial, cfg, "check", NULL, 1, 1, &co, &pods, err);
    json_decref(pods);
    json_decref(trial);
    return rc;
}

/* The trial container's volumeMount at clean path p (its index in *at), or NULL. */
static const json_t *mount_at(const json_t *c, const char *p, size_t *at)
{
    char x[4096];
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(c, "volumeMounts"), i, m)
    {
        kd_path_clean(json_string_value(json_object_get(m, "mountPath")) ?: "", x, sizeof(x));
        if (strcmp(x, p) == 0) {
            *at = i;
            return m;
        }
    }
    return NULL;
}

static const json_t *volume_named(const json_t *ps, const char *name)
{
    size_t i;
    const json_t *v;
    json_array_foreach(json_object_get(ps, "volumes"), i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "name")) ?: "", name) == 0)
            return v;
    }
    return NULL;
}

/*
 * One hostPath mount of bind_mounts[i] or resources.devices[i] (`what`):
 * volume `vname` of host_path, mounted at container_path. A mount already
 * at that path is an error, except kdet's own mount of the same host
 * directory (a bind mount of the shared_fs checkpoint directory).
 */
static int host_mount(json_t *ps, json_t *c, const json_t *e, const char *what, size_t i,
                      const char *vname, char *err)
{
    int rc = 0;
    char cp[4096], hp[4096];
    size_t at = 0;
    kd_path_clean(json_string_value(json_object_get(e, "container_path")), cp, sizeof(cp));
    kd_path_clean(json_string_value(json_object_get(e, "host_path")), hp, sizeof(hp));
    const json_t *m = mount_at(c, cp, &at);
    if (m != NULL) {
        const char *mv = json_string_value(json_object_get(m, "name")) ?: "";
        const json_t *v = volume_named(ps, mv);
        const char *vp = json_string_value(get_path(v, "hostPath", "path"));
        char vpc[4096];
        kd_path_clean(vp != NULL ? vp : "", vpc, sizeof(vpc));
        if (vp != NULL && strcmp(vpc, hp) == 0 && strcmp(mv, KD_POD_CKPT_VOLUME) == 0)
            goto out; /* the same directory, mounted once */
        rc = kd_seterr(err, KD_EINVALID,
                       "%s[%zu].container_path: %s is already mounted in the trial container "
                       "(volumeMounts[%zu], volume %s)",
                       what, i, cp, at, mv);
        goto out;
    }
    if (volume_named(ps, vname) != NULL) {
        rc = kd_seterr(err, KD_EINVALID,
                       "environment.pod_spec.spec.volumes: the name %s is kdet's (for %s[%zu])",
                       vname, what, i);
        goto out;
    }
    json_array_append_new(child(ps, "volumes", true),
                          json_pack("{s:s,s:{s:s}}", "name", vname, "hostPath", "path", hp));
    json_t *mount = json_pack("{s:s,s:s}", "name", vname, "mountPath", cp);
    if (json_is_true(json_object_get(e, "read_only")))
        json_object_set_new(mount, "readOnly", json_true());
    const char *prop = kd_mount_propagation(json_string_value(json_object_get(e, "propagation")));
    if (prop != NULL)
        json_object_set_new(mount, "mountPropagation", json_string(prop));
    json_array_append_new(child(c, "volumeMounts", true), mount);
out:
    return rc;
}

/*
 * bind_mounts, and resources.devices where the cluster allows them: a
 * device node is usable only in a privileged container (the runtime's
 * device cgroup denies the rest), so a device makes the trial container
 * privileged, which also gives it every other device: hence the admin's
 * flag.
 */
static int host_mounts(json_t *ps, json_t *c, const json_t *cfg, const struct kd_pod_opts *o,
                       char *err)
{
    int rc = 0;
    char vname[64];
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(cfg, "bind_mounts"), i, e)
    {
        snprintf(vname, sizeof(vname), "kdet-bind-%zu", i);
        if ((rc = host_mount(ps, c, e, "bind_mounts", i, vname, err)) != 0)
            goto out;
    }
    if ((rc = check_devices(cfg, o, err)) != 0)
        goto out;
    json_array_foreach(get_path(cfg, "resources", "devices"), i, e)
    {
        if (kd_device_is_gpu(json_string_value(json_object_get(e, "host_path"))))
            continue;
        snprintf(vname, sizeof(vname), "kdet-dev-%zu", i);
        if ((rc = host_mount(ps, c, e, "resources.devices", i, vname, err)) != 0)
            goto out;
        json_object_set_new(child(c, "securityContext", false), "privileged", json_true());
    }
out:
    return rc;
}

/*
 * environment.ports as named TCP ports of the trial container, for a
 * Service or a port-forward. A port of the pod_spec's container with the
 * same name and number is the same port; the same name or number alone is
 * an error.
 */
static int container_ports(json_t *c, const json_t *cfg, const struct kd_pod_opts *o, char *err)
{
    int rc = 0;
    const char *k;
    const json_t *v;
    if ((rc = check_ports(cfg, o, err)) != 0)
        goto out;
    json_object_foreach((json_t *)get_path(cfg, "environment", "ports"), k, v)
    {
        json_int_t n = json_integer_value(v);
        bool same = false;
        size_t i;
        const json_t *p;
        json_array_foreach(json_object_get(c, "ports"), i, p)
        {
            bool name = strcmp(json_string_value(json_object_get(p, "name")) ?: "", k) == 0;
            bool num = json_integer_value(json_object_get(p, "containerPort")) == n;
            if (name && num) {
                same = true;
            } else if (name || num) {
                rc = kd_seterr(err, KD_EINVALID,
                               "environment.ports.%s: environment.pod_spec's trial container "
                               "already has %s (ports[%zu]); keep one of them",
                               k, name ? "a port of that name" : "that port", i);
                goto out;
            }
        }
        if (!same)
            json_array_append_new(
                child(c, "ports", true),
                json_pack("{s:s,s:I,s:s}", "name", k, "containerPort", n, "protocol", "TCP"));
    }
out:
    return rc;
}

/* Add the canonical names of capability list `from` to securityContext.capabilities.<key>. */
static void add_caps(json_t *c, const json_t *from, const char *key)
{
    char name[32];
    size_t i, k;
    const json_t *e, *x;
    if (json_array_size(from) == 0)
        return;
    json_t *list =
        child(child(child(c, "securityContext", false), "capabilities", false), key, true);
    json_array_foreach(from, i, e)
    {
        bool have = false;
        if (kd_capability_name(json_string_value(e), name, sizeof(name)) != 0)
            continue; /* refused by the config check */
        json_array_foreach(list, k, x) have = have || strcmp(json_string_value(x) ?: "", name) == 0;
        if (!have)
            json_array_append_new(list, json_string(name));
    }
}

void kd_pod_scope_labels(json_t *labels, const json_t *cfg)
{
    static const char *const keys[][2] = {{"workspace", KD_LABEL_WORKSPACE},
                                          {"project", KD_LABEL_PROJECT}};
    char v[KD_LABEL_VALUE_MAX + 1];
    for (size_t i = 0; i < 2; i++) {
        const char *s = json_string_value(json_object_get(cfg, keys[i][0]));
        if (s != NULL && kd_label_value(s, v, sizeof(v)) == 0)
            json_object_set_new(labels, keys[i][1], json_string(v));
    }
}

/*
 * resources.is_single_node with pods no node pin holds together (a batch
 * scheduler places them): a required affinity to the attempt's pods by
 * hostname. kube-scheduler lets the first pod go anywhere, since it matches
 * its own term.
 */
static void same_node(json_t *ps, const char *trial, const char *run_id)
{
    json_t *req = child(child(child(ps, "affinity", false), "podAffinity", false),
                        "requiredDuringSchedulingIgnoredDuringExecution", true);
    json_array_append_new(req, json_pack("{s:{s:{s:s,s:s}},s:s}", "labelSelector", "matchLabels",
                                         KD_POD_LABEL_TRIAL, trial, KD_POD_LABEL_RUN, run_id,
                                         "topologyKey", "kubernetes.io/hostname"));
}

/* Priority class, restart policy, grace period, the node the scheduler chose and the resource
 * pool's selector and toleration. */
static void placement(json_t *ps, const json_t *cfg, const char *node, const struct kd_pod_opts *o)
{
    const char *pool = json_string_value(get_path(cfg, "resources", "resource_pool"));
    int priority = (int)json_integer_value(get_path(cfg, "resources", "priority"));
    json_object_set_new(ps, "restartPolicy", json_string("Never"));
    json_object_set_new(ps, "terminationGracePeriodSeconds",
                        json_integer(o->grace_period_s > 0 ? o->grace_period_s : 30));
    if (o->priority_classes)
        json_object_set_new(ps, "priorityClassName", json_string(kd_pod_priority_class(priority)));
    json_t *sel = child(ps, "nodeSelector", false);
    if (node != NULL)
        json_object_set_new(sel, "kubernetes.io/hostname", json_string(node));
    if (pool != NULL && pool[0] != '\0' && strcmp(pool, "default") != 0) {
        json_object_set_new(sel, KD_POD_LABEL_POOL, json_string(pool));
        json_array_append_new(child(ps, "tolerations", true),
                              json_pack("{s:s,s:s,s:s,s:s}", "key", KD_POD_LABEL_POOL, "operator",
                                        "Equal", "value", pool, "effect", "NoSchedule"));
    }
    if (json_object_size(sel) == 0)
        json_object_del(ps, "nodeSelector");
}

/* The container's pull policy, capabilities, ports, termination message and user. */
static int container_common(json_t *ps, json_t *c, const json_t *cfg, const struct kd_pod_opts *o,
                            char *err)
{
    int rc = 0;
    if (json_is_true(get_path(cfg, "environment", "force_pull_image")))
        json_object_set_new(c, "imagePullPolicy", json_string("Always"));
    add_caps(c, get_path(cfg, "environment", "add_capabilities"), "add");
    add_caps(c, get_path(cfg, "environment", "drop_capabilities"), "drop");
    if ((rc = container_ports(c, cfg, o, err)) != 0)
        goto out;
    /* A failure's reason is at the end of the output: the kubelet puts the last lines in
     * state.terminated.message, which outlives the pod (unless the template chose). */
    if (json_object_get(c, "terminationMessagePolicy") == NULL)
        json_object_set_new(c, "terminationMessagePolicy", json_string("FallbackToLogsOnError"));
    run_as(ps, c, o->run_as_user);
out:
    return rc;
}

/* `slots` GPUs (limits) or CPU slots (requests and limits, annotated), and /dev/shm. */
static void slots_and_shm(json_t *ps, json_t *md, json_t *c, int slots, const char *shm,
                          const struct kd_pod_opts *o)
{
    char buf[32];
    if (slots > 0 && o->cpu_slots) {
        slot_resources(c, slots, o);
        snprintf(buf, sizeof(buf), "%d", slots);
        json_object_set_new(child(md, "annotations", false), KD_POD_ANN_CPU_SLOTS,
                            json_string(buf));
    } else if (slots > 0) {
        json_t *res = child(c, "resources", false);
        snprintf(buf, sizeof(buf), "%d", slots);
        json_object_set_new(child(res, "limits", false), "nvidia.com/gpu", json_string(buf));
    }
    if (shm != NULL) {
        json_array_append_new(child(ps, "volumes", true),
                              json_pack("{s:s,s:{s:s,s:s}}", "name", "kdet-shm", "emptyDir",
                                        "medium", "Memory", "sizeLimit", shm));
        json_array_append_new(child(c, "volumeMounts", true),
                              json_pack("{s:s,s:s}", "name", "kdet-shm", "mountPath", "/dev/shm"));
    }
}

int kd_pod_build(const json_t *trial, const json_t *cfg, const char *run_id,
                 const char *const *nodes, int gpus, int npods, const struct kd_pod_opts *o,
                 json_t **out, char *err)
{
    int rc = 0, argc = 0;
    char **argv = NULL;
    json_t *pods = json_array(), *base = NULL;
    char *shm = NULL, *hp = NULL;
    const json_t *spec = json_object_get(trial, "spec");
    const char *tname = meta(trial, "name"), *ns = meta(trial, "namespace");
    int ngpus = o->cpu_slots ? 0 : gpus; /* CPU slots pick the cpu image and variables */
    const char *image = json_string_value(flavor(get_path(cfg, "environment", "image"), ngpus));
    const char *launcher = o->launcher != NULL ? o->launcher : "kdet-launch";
    int port = rendezvous_port(o);
    char svc[32], chief[320], buf[64];
    *out = NULL;
    if (npods < 1 || npods > 65536 || gpus < 0) {
        rc = kd_seterr(err, KD_EINVAL, "pods: %d pods of %d GPUs is not a valid placement", npods,
                       gpus);
        goto out;
    }
    if ((rc = kd_config_launch_argv(json_object_get(cfg, "entrypoint"), &argv, &argc, err)) != 0)
        goto out;
    if ((rc = user_pod(cfg, &base, err)) != 0)
        goto out;
    shm = shm_quantity(cfg);
    hp = json_object_get(spec, "hparams") != NULL
             ? json_dumps(json_object_get(spec, "hparams"), JSON_COMPACT | JSON_SORT_KEYS)
             : kd_xstrdup("{}");
    if (hp == NULL)
        kd_oom(0);
    kd_pod_service_name(meta(trial, "uid"), svc, sizeof(svc));
    if (npods == 1)
        kd_strlcpy(chief, "127.0.0.1", sizeof(chief));
    else
        snprintf(chief, sizeof(chief), "node0.%s.%s.svc", svc, ns);
    bool single = json_is_true(get_path(cfg, "resources", "is_single_node"));
    for (int r = 0; r < npods; r++) {
        json_t *pod = json_deep_copy(base);
        json_object_set_new(pod, "apiVersion", json_string("v1"));
        json_object_set_new(pod, "kind", json_string("Pod"));
        json_t *md = child(pod, "metadata", false);
        char pname[256];
        if ((rc = kd_pod_name(tname, r, pname, sizeof(pname))) != 0) {
            kd_seterr(err, rc, "metadata.name: trial name %s is too long for its pod names", tname);
            json_decref(pod);
            goto out;
        }
        json_object_set_new(md, "name", json_string(pname));
        json_object_set_new(md, "namespace", json_string(ns));
        json_t *labels = child(md, "labels", false);
        snprintf(buf, sizeof(buf), "%d", r);
        json_object_set_new(
            labels, KD_POD_LABEL_EXPERIMENT,
            json_string(json_string_value(json_object_get(spec, "experiment")) ?: ""));
        json_object_set_new(labels, KD_POD_LABEL_TRIAL, json_string(tname));
        json_object_set_new(
            labels, KD_POD_LABEL_REQUEST,
            json_string(json_string_value(json_object_get(spec, "requestId")) ?: ""));
        json_object_set_new(labels, KD_POD_LABEL_RUN, json_string(run_id));
        json_object_set_new(labels, KD_POD_LABEL_RANK, json_string(buf));
        kd_pod_scope_labels(labels, cfg);
        snprintf(buf, sizeof(buf), "%" PRId64,
                 (int64_t)json_integer_value(json_object_get(spec, "validateAfter")));
        json_object_set_new(child(md, "annotations", false), KD_POD_ANN_TARGET, json_string(buf));
        json_t *owners = json_array();
        json_array_append_new(owners, owner_ref(trial));
        json_object_set_new(md, "ownerReferences", owners);

        json_t *ps = child(pod, "spec", false);
        placement(ps, cfg, nodes != NULL ? nodes[r] : NULL, o);
        if (o->nexclude > 0)
            exclude_nodes(ps, o->exclude_nodes, o->nexclude);
        if (npods > 1 && single && (nodes == NULL || nodes[r] == NULL))
            same_node(ps, tname, run_id);
        if (npods > 1) {
            snprintf(buf, sizeof(buf), "node%d", r);
            json_object_set_new(ps, "hostname", json_string(buf));
            json_object_set_new(ps, "subdomain", json_string(svc));
        }

        json_t *c = our_container(child(ps, "containers", true), KD_POD_CONTAINER);
        if (json_object_get(c, "image") == NULL || image != NULL)
            json_object_set_new(c, "image",
                                json_string(image != NULL      ? image
                                            : o->image != NULL ? o->image
                                                               : "kdet/trial:latest"));
        json_t *cmd = json_array();
        json_array_append_new(cmd, json_string(launcher));
        snprintf(buf, sizeof(buf), "%d", gpus > 0 ? gpus : 1);
        json_array_append_new(cmd, json_string("--nproc"));
        json_array_append_new(cmd, json_string(buf));
        for (int i = 0; i < argc; i++)
            json_array_append_new(cmd, json_string(argv[i]));
        json_object_set_new(c, "command", cmd);
        json_object_del(c, "args");
        if ((rc = container_common(ps, c, cfg, o, err)) != 0) {
            json_decref(pod);
            goto out;
        }

        json_t *env = child(c, "env", true);
        if ((rc = user_env(env, cfg, ngpus, err)) != 0) {
            json_decref(pod);
            goto out;
        }
        env_set(env, "KDET_TRIAL_ID", tname);
        env_set(env, "KDET_EXPERIMENT",
                json_string_value(json_object_get(spec, "experiment")) ?: "");
        snprintf(buf, sizeof(buf), "%d", r);
        env_set(env, "KDET_NODE_RANK", buf);
        snprintf(buf, sizeof(buf), "%d", npods);
        env_set(env, "KDET_NUM_NODES", buf);
        env_set(env, "KDET_CHIEF_ADDR", chief);
        snprintf(buf, sizeof(buf), "%d", port);
        env_set(env, "KDET_MASTER_PORT", buf);
        env_set(env, "KDET_RUN_ID", run_id);
        env_set(env, "KDET_HPARAMS", hp);
        snprintf(buf, sizeof(buf), "%" PRId64,
                 (int64_t)json_integer_value(json_object_get(spec, "seed")));
        env_set(env, "KDET_TRIAL_SEED", buf);
        config_env(env, cfg);
        const json_t *prof = json_object_get(cfg, "profiling");
        if (json_is_true(json_object_get(prof, "enabled"))) {
            /* The Python harness's profiler starts itself from this (docs/python.md). */
            char *js = json_dumps(prof, JSON_COMPACT | JSON_SORT_KEYS);
            env_set(env, "KDET_PROFILING", js);
            free(js);
        }
        if (o->controller_url != NULL && o->controller_url[0] != '\0')
            env_set(env, "KDET_CONTROLLER_URL", o->controller_url);
        if (o->api)
            api_env(env, trial, cfg, o);
        if (o->api && o->experiment_int_id > 0 && o->trial_int_id > 0) {
            snprintf(buf, sizeof(buf), "%" PRId64, o->experiment_int_id);
            env_set(env, "KDET_EXPERIMENT_INT_ID", buf);
            snprintf(buf, sizeof(buf), "%" PRId64, o->trial_int_id);
            env_set(env, "KDET_TRIAL_INT_ID", buf);
        }
        if (o->api && npods > 1) {
            /* The chief reports this address to the controller (docs/launcher.md). */
            json_t *ip = json_pack("{s:s,s:{s:{s:s}}}", "name", "KDET_POD_IP", "valueFrom",
                                   "fieldRef", "fieldPath", "status.podIP");
            size_t k;
            json_t *x;
            json_array_foreach(env, k, x)
            {
                if (strcmp(json_string_value(json_object_get(x, "name")) ?: "", "KDET_POD_IP") ==
                    0) {
                    json_array_remove(env, k);
                    break;
                }
            }
            json_array_append_new(env, ip);
        }
        s3_creds_env(env, cfg);

        slots_and_shm(ps, md, c, gpus, shm, o);
        ckpt_volume(ps, c, cfg);
        if ((rc = host_mounts(ps, c, cfg, o, err)) != 0) {
            json_decref(pod);
            goto out;
        }
        if (o->context != NULL)
            context_env(ps, c, env, o->context, cfg, run_id, r);
        json_array_append_new(pods, pod);
    }
    *out = pods;
    pods = NULL;
out:
    kd_config_argv_free(argv);
    json_decref(pods);
    json_decref(base);
    free(shm);
    free(hp);
    return rc;
}

/*
 * What a task's process is, after `kdet-launch --nproc 1 --`. The services
 * listen on KDET_TASK_PORT, which kdet-launch picks and reports to the
 * controller before it starts them (KDET_TASK_SERVICE). Shell words, so
 * that one image-independent line finds the program in the image's PATH.
 */
/* Jupyter: the classic notebook server when the image has it (a UI), else jupyter-server; the
 * token comes from JUPYTER_TOKEN, the base URL is the controller's proxy path. */
static const char notebook_sh[] =
    "if command -v jupyter-notebook >/dev/null 2>&1; then app=NotebookApp; "
    "prog=jupyter-notebook; else app=ServerApp; prog=jupyter-server; fi; "
    "exec \"$prog\" --ip=0.0.0.0 --port=\"$KDET_TASK_PORT\" --port-retries=0 --no-browser "
    "--allow-root --$app.base_url=\"" KD_POD_TASK_PROXY "$KDET_TASK_ID/\" "
    "--$app.allow_remote_access=True --$app.allow_origin='*'";
/* sshd on the Secret's host key, accepting the Secret's client key only, for the pod's user. */
static const char shell_sh[] =
    "set -e; d=\"${TMPDIR:-/tmp}/kdet-sshd-$KDET_RUN_ID\"; mkdir -p \"$d\"; chmod 700 \"$d\"; "
    "cp \"$KDET_SSH_DIR/host_key\" \"$d/host_key\"; cp \"$KDET_SSH_DIR/authorized_keys\" "
    "\"$d/authorized_keys\"; chmod 600 \"$d/host_key\" \"$d/authorized_keys\"; "
    "if [ \"$(id -u)\" = 0 ]; then mkdir -p /run/sshd; chmod 755 /run/sshd; fi; "
    "sshd=$(command -v sshd || echo /usr/sbin/sshd); "
    "exec \"$sshd\" -D -e -f /dev/null -p \"$KDET_TASK_PORT\" -h \"$d/host_key\" "
    "-o AuthorizedKeysFile=\"$d/authorized_keys\" -o StrictModes=no "
    "-o PasswordAuthentication=no -o KbdInteractiveAuthentication=no "
    "-o PermitRootLogin=prohibit-password -o PidFile=none -o PrintMotd=no";
static const char tensorboard_sh[] =
    "exec tensorboard --logdir_spec \"$KDET_TENSORBOARD_LOGDIR\" --port \"$KDET_TASK_PORT\" "
    "--bind_all --path_prefix \"" KD_POD_TASK_PROXY "$KDET_TASK_ID\"";

/* The environment a task's launcher and process need; the token from the Secret <task>-token. */
static void task_env(json_t *env, const json_t *task, const char *kind, const char *run_id,
                     const struct kd_pod_opts *o, bool service)
{
    char secret[300];
    snprintf(secret, sizeof(secret), "%s-token", meta(task, "name"));
    env_set(env, "KDET_TASK_ID", meta(task, "name"));
    env_set(env, "KDET_TASK_KIND", kind);
    env_set(env, "KDET_NAMESPACE", meta(task, "namespace"));
    env_set(env, "KDET_RUN_ID", run_id);
    if (o->controller_url != NULL && o->controller_url[0] != '\0')
        env_set(env, "KDET_CONTROLLER_URL", o->controller_url);
    if (service)
        env_set(env, "KDET_TASK_SERVICE", "1");
    if (!o->api)
        return;
    /* Secrets by reference only, replacing what the user's environment says of them. */
    static const char *const refs[] = {"KDET_TOKEN", "KDET_CONTROLLER_CA", "JUPYTER_TOKEN",
                                       "KDET_POD_IP"};
    for (size_t r = 0; r < sizeof(refs) / sizeof(refs[0]); r++) {
        size_t k;
        json_t *x;
        json_array_foreach(env, k, x)
        {
            if (strcmp(json_string_value(json_object_get(x, "name")) ?: "", refs[r]) == 0) {
                json_array_remove(env, k);
                break;
            }
        }
    }
    json_array_append_new(env, json_pack("{s:s,s:{s:{s:s,s:s}}}", "name", "KDET_TOKEN", "valueFrom",
                                         "secretKeyRef", "name", secret, "key", "token"));
    if (o->controller_ca)
        json_array_append_new(env, json_pack("{s:s,s:{s:{s:s,s:s,s:b}}}", "name",
                                             "KDET_CONTROLLER_CA", "valueFrom", "secretKeyRef",
                                             "name", secret, "key", "ca.crt", "optional", 1));
    if (strcmp(kind, "notebook") == 0)
        json_array_append_new(env, json_pack("{s:s,s:{s:{s:s,s:s}}}", "name", "JUPYTER_TOKEN",
                                             "valueFrom", "secretKeyRef", "name", secret, "key",
                                             "token"));
    if (service)
        json_array_append_new(env, json_pack("{s:s,s:{s:{s:s}}}", "name", "KDET_POD_IP",
                                             "valueFrom", "fieldRef", "fieldPath", "status.podIP"));
}

int kd_pod_build_task(const json_t *task, const json_t *cfg, const char *run_id, const char *node,
                      int slots, const struct kd_pod_opts *o, json_t **out, char *err)
{
    int rc = 0, argc = 0;
    char **argv = NULL, *shm = NULL;
    json_t *pod = NULL;
    const json_t *spec = json_object_get(task, "spec");
    const char *tname = meta(task, "name"), *ns = meta(task, "namespace");
    const char *kind = json_string_value(json_object_get(spec, "kind")) ?: "";
    int ngpus = o->cpu_slots ? 0 : slots;
    const char *image = json_string_value(flavor(get_path(cfg, "environment", "image"), ngpus));
    const char *launcher = o->launcher != NULL ? o->launcher : "kdet-launch";
    const char *script = NULL;
    char pname[256];
    *out = NULL;
    if (slots < 0) {
        rc = kd_seterr(err, KD_EINVAL, "resources.slots: %d is not a number of slots", slots);
        goto out;
    }
    if (strcmp(kind, "command") == 0) {
        if ((rc = kd_config_launch_argv(json_object_get(cfg, "entrypoint"), &argv, &argc, err)) !=
            0)
            goto out;
    } else if (strcmp(kind, "notebook") == 0) {
        script = notebook_sh;
    } else if (strcmp(kind, "shell") == 0) {
        script = shell_sh;
    } else if (strcmp(kind, "tensorboard") == 0) {
        script = tensorboard_sh;
        if (image == NULL)
            image = o->tensorboard_image;
    } else {
        rc = kd_seterr(err, KD_EINVALID, "spec.kind: %s is not a kind of task", kind);
        goto out;
    }
    if ((rc = kd_pod_name(tname, 0, pname, sizeof(pname))) != 0) {
        kd_seterr(err, rc, "metadata.name: task name %s is too long for its pod's name", tname);
        goto out;
    }
    if ((rc = user_pod(cfg, &pod, err)) != 0)
        goto out;
    shm = shm_quantity(cfg);
    json_object_set_new(pod, "apiVersion", json_string("v1"));
    json_object_set_new(pod, "kind", json_string("Pod"));
    json_t *md = child(pod, "metadata", false);
    json_object_set_new(md, "name", json_string(pname));
    json_object_set_new(md, "namespace", json_string(ns));
    json_t *labels = child(md, "labels", false);
    json_object_set_new(labels, KD_POD_LABEL_TASK, json_string(tname));
    json_object_set_new(labels, KD_POD_LABEL_TASK_KIND, json_string(kind));
    json_object_set_new(labels, KD_POD_LABEL_RUN, json_string(run_id));
    kd_pod_scope_labels(labels, cfg);
    json_object_set_new(md, "ownerReferences",
                        json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion", "kdet.io/v1alpha1",
                                  "kind", "Task", "name", tname, "uid", meta(task, "uid"),
                                  "controller", 1, "blockOwnerDeletion", 1));
    json_t *ps = child(pod, "spec", false);
    placement(ps, cfg, node, o);
    json_t *c = our_container(child(ps, "containers", true), KD_POD_TASK_CONTAINER);
    if (json_object_get(c, "image") == NULL || image != NULL)
        json_object_set_new(c, "image",
                            json_string(image != NULL      ? image
                                        : o->image != NULL ? o->image
                                                           : "kdet/trial:latest"));
    json_t *cmd = json_pack("[s,s,s]", launcher, "--nproc", "1");
    if (script != NULL) {
        json_array_append_new(cmd, json_string("--"));
        json_array_append_new(cmd, json_string("sh"));
        json_array_append_new(cmd, json_string("-c"));
        json_array_append_new(cmd, json_string(script));
    }
    for (int i = 0; i < argc; i++)
        json_array_append_new(cmd, json_string(argv[i]));
    json_object_set_new(c, "command", cmd);
    json_object_del(c, "args");
    if ((rc = container_common(ps, c, cfg, o, err)) != 0)
        goto out;
    json_t *env = child(c, "env", true);
    if ((rc = user_env(env, cfg, ngpus, err)) != 0)
        goto out;
    task_env(env, task, kind, run_id, o, script != NULL);
    if (strcmp(kind, "tensorboard") == 0)
        env_set(env, "KDET_TENSORBOARD_LOGDIR",
                o->tensorboard_logdir != NULL ? o->tensorboard_logdir : "");
    s3_creds_env(env, cfg);
    slots_and_shm(ps, md, c, slots, shm, o);
    if ((rc = host_mounts(ps, c, cfg, o, err)) != 0)
        goto out;
    const char *wd = json_string_value(json_object_get(cfg, "work_dir"));
    const json_t *ctx = json_object_get(spec, "context");
    if (ctx != NULL)
        context_env(ps, c, env, ctx, cfg, run_id, 0);
    if (wd != NULL && wd[0] == '/') {
        /* The context is unpacked there, and kept: the directory persists with the node's
         * file system or the volume mounted at it (docs/tasks.md). */
        if (ctx != NULL && json_object_get(ctx, "path") == NULL)
            env_set(env, "KDET_CONTEXT_DIR", wd);
        json_object_set_new(c, "workingDir", json_string(wd));
    }
    if (strcmp(kind, "shell") == 0) {
        /* Readable by whatever user the pod runs as (the image's, often not root, and without
         * an fsGroup): sshd starts from copies it makes 0600 in a directory of its own. */
        char *mount = kd_xasprintf("%s/%s", KD_POD_SSH_MOUNT, run_id);
        char *secret = kd_xasprintf("%s%s", tname, KD_POD_SSH_SUFFIX);
        json_array_append_new(child(ps, "volumes", true),
                              json_pack("{s:s,s:{s:s,s:i,s:[{s:s,s:s},{s:s,s:s}]}}", "name",
                                        KD_POD_SSH_VOLUME, "secret", "secretName", secret,
                                        "defaultMode", 0444, "items", "key", "ssh_host_key", "path",
                                        "host_key", "key", "authorized_keys", "path",
                                        "authorized_keys"));
        json_array_append_new(child(c, "volumeMounts", true),
                              json_pack("{s:s,s:s,s:b}", "name", KD_POD_SSH_VOLUME, "mountPath",
                                        mount, "readOnly", 1));
        env_set(env, "KDET_SSH_DIR", mount);
        free(mount);
        free(secret);
    }
    *out = pod;
    pod = NULL;
out:
    kd_config_argv_free(argv);
    json_decref(pod);
    free(shm);
    return rc;
}
