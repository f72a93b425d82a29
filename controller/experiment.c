/*
 * The Experiment reconciler: validate and complete the configuration, run
 * the searcher with its state persisted in a ConfigMap owned by the
 * experiment (written before any Trial its decisions ask for), create and
 * update the Trials, and drive the experiment's state and status. Every
 * step is level-triggered and idempotent, so a controller killed at any
 * point resumes with identical decisions (protocol: docs/controller.md).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/k8smap.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/par.h"
#include "core/str.h"
#include "core/time.h"
#include "ctrl.h"
#include "defaults.h"
#include "gc.h"
#include "wire.h"
#include "hparams/rng.h"
#include "searcher/searcher.h"
#include "states.h"
#include "yaml/yaml.h"

#include <uthash.h>

static const char *const own_fields[] = {"paused",   "canceled", "archived",
                                         "template", "context",  NULL};

static bool spec_bool(const json_t *obj, const char *field)
{
    return json_is_true(json_object_get(json_object_get(obj, "spec"), field));
}

uint64_t kd_ctrl_seed_from_uid(const char *uid)
{
    /* FNV-1a over the uid, mixed, cut to the 31 bits experiment_seed allows. */
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = uid != NULL ? uid : ""; *p != '\0'; p++) {
        h ^= (unsigned char)*p;
        h *= 1099511628211ULL;
    }
    return kd_mix64(h) & 0x7fffffffULL;
}

/* The stored template named `name` in ns: the YAML/JSON under KD_CTRL_TEMPLATE_KEY of the
 * ConfigMap labelled kdet.io/template=NAME. KD_ENOTFOUND when there is none. */
static int load_template(struct kd_ctrl *c, const char *ns, const char *name, json_t **out,
                         char *err)
{
    int rc = 0;
    json_t *list = NULL;
    struct kd_yaml_doc *doc = NULL;
    char sel[320];
    *out = NULL;
    snprintf(sel, sizeof(sel), "%s=%s", KD_CTRL_TEMPLATE_LABEL, name);
    struct kd_k8s_query q = {.label_selector = sel};
    if ((rc = kd_k8s_list(c->client, &KD_K8S_CONFIGMAPS, ns, &q, &list, NULL, err)) != 0)
        goto out;
    json_t *items = json_object_get(list, "items");
    if (json_array_size(items) == 0) {
        rc = KD_ENOTFOUND;
        goto out;
    }
    const char *text = kd_ctrl_str(json_array_get(items, 0), "data", KD_CTRL_TEMPLATE_KEY, NULL);
    if (text == NULL) {
        rc = kd_seterr(err, KD_EINVALID, "template %s: ConfigMap %s has no data key %s", name,
                       kd_k8s_meta_str(json_array_get(items, 0), "name"), KD_CTRL_TEMPLATE_KEY);
        goto out;
    }
    char label[300];
    snprintf(label, sizeof(label), "template %s", name);
    if ((rc = kd_yaml_parse(label, text, strlen(text), &doc, err)) != 0) {
        /* bad YAML or past a cap (an alias bomb): the user's error, not a reason to retry */
        if (rc == KD_EPARSE || rc == KD_ETOOBIG)
            rc = KD_EINVALID;
        goto out;
    }
    *out = json_incref(kd_yaml_root(doc));
out:
    kd_yaml_free(doc);
    json_decref(list);
    return rc;
}

int kd_ctrl_exp_config(struct kd_ctrl *c, const json_t *exp, json_t **cfg, uint64_t *seed,
                       char *err)
{
    int rc = 0;
    json_t *spec = NULL, *tmpl = NULL, *merged = NULL;
    const char *uid = kd_k8s_meta_str(exp, "uid");
    json_int_t gen =
        json_integer_value(json_object_get(json_object_get(exp, "metadata"), "generation"));
    *cfg = NULL;
    pthread_mutex_lock(&c->mu);
    json_t *memo = json_object_get(c->cfgs, uid != NULL ? uid : "");
    if (memo != NULL && json_integer_value(json_object_get(memo, "generation")) == gen) {
        *cfg = json_incref(json_object_get(memo, "config"));
        *seed = (uint64_t)json_integer_value(json_object_get(memo, "seed"));
    }
    pthread_mutex_unlock(&c->mu);
    if (*cfg != NULL)
        goto out;
    spec = json_deep_copy(json_object_get(exp, "spec"));
    if (!json_is_object(spec)) {
        rc = kd_seterr(err, KD_EINVALID, "spec: expected a mapping");
        goto out;
    }
    for (int i = 0; own_fields[i] != NULL; i++)
        json_object_del(spec, own_fields[i]);
    const char *tname = kd_ctrl_str(exp, "spec", "template", NULL);
    if (tname != NULL && tname[0] != '\0') {
        rc = load_template(c, kd_k8s_meta_str(exp, "namespace"), tname, &tmpl, err);
        if (rc == KD_ENOTFOUND) {
            /* det records only stored templates in spec.template (a file template is merged
             * by det and named in an annotation), so a missing one is the user's error. */
            rc = kd_seterr(err, KD_EINVALID,
                           "spec.template: template %s not found (no ConfigMap labelled %s=%s in "
                           "namespace %s)",
                           tname, KD_CTRL_TEMPLATE_LABEL, tname,
                           kd_k8s_meta_str(exp, "namespace") ?: "");
            goto out;
        } else if (rc != 0) {
            goto out;
        } else {
            char merr[KD_ERRLEN] = "";
            if ((rc = kd_config_merge_template(tmpl, spec, &merged, merr)) != 0) {
                rc = rc == KD_ETOOBIG ? KD_EINVALID : rc;
                kd_seterr(err, rc, "template %s: %s", tname, merr);
                goto out;
            }
            json_decref(spec);
            spec = json_deep_copy(merged);
        }
    }
    kd_ctrl_default_storage(spec, c->o.default_storage);
    if ((rc = kd_config_check(spec, err)) != 0)
        goto out;
    json_t *repro = json_object_get(spec, "reproducibility");
    json_t *es = json_object_get(repro, "experiment_seed");
    if (json_is_integer(es)) {
        *seed = (uint64_t)json_integer_value(es);
    } else {
        *seed = kd_ctrl_seed_from_uid(uid);
        if (!json_is_object(repro)) {
            repro = json_object();
            json_object_set_new(spec, "reproducibility", repro);
        }
        json_object_set_new(repro, "experiment_seed", json_integer((json_int_t)*seed));
    }
    if ((rc = kd_config_apply_defaults(spec, err)) != 0)
        goto out;
    /* What this cluster's trial pods cannot do (host devices, the rendezvous port). */
    if ((rc = kd_pod_check(spec, &c->o.pod, err)) != 0)
        goto out;
    pthread_mutex_lock(&c->mu);
    json_object_set_new(
        c->cfgs, uid != NULL ? uid : "",
        json_pack("{s:I,s:I,s:O}", "generation", gen, "seed", (json_int_t)*seed, "config", spec));
    pthread_mutex_unlock(&c->mu);
    *cfg = spec;
    spec = NULL;
out:
    json_decref(spec);
    json_decref(tmpl);
    json_decref(merged);
    return rc;
}

/* ---- the searcher state ----------------------------------------------------------------- */

/*
 * state = {"version":1,"seed":N,"unit":"batches","snapshot":{...},"done":false,
 *          "failure":false,"reason":"...","trials":[{"request_id","index","hparams","seed",
 *          "parent","validate_after","closed","created","validated","ended"}]}
 */
/* The state's trials by request_id (borrowed references): the index apply_ops looks them up in.
 * A scan of the table for each operation took a tenth of the controller's CPU with 2,500
 * trials. */
static json_t *state_index(json_t *state)
{
    json_t *ix = json_object();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(state, "trials"), i, t)
    {
        const char *rid = json_string_value(json_object_get(t, "request_id"));
        if (rid != NULL && json_object_get(ix, rid) == NULL) /* the first of equals, as before */
            json_object_set(ix, rid, t);
    }
    return ix;
}

/* One searcher decision for the store's events: {"decision","request_id",...}. */
static json_t *decision(const struct kd_search_op *op)
{
    static const char *const names[] = {[KD_SEARCH_CREATE] = "create",
                                        [KD_SEARCH_VALIDATE_AFTER] = "validate_after",
                                        [KD_SEARCH_CLOSE] = "close",
                                        [KD_SEARCH_SHUTDOWN] = "shutdown"};
    json_t *d = json_pack("{s:s,s:s}", "decision", names[op->type], "request_id", op->request_id);
    if (op->type == KD_SEARCH_VALIDATE_AFTER)
        json_object_set_new(d, "length", json_integer(op->length));
    if (op->reason != NULL)
        json_object_set_new(d, "reason", json_string(op->reason));
    if (op->type == KD_SEARCH_SHUTDOWN)
        json_object_set_new(d, "failure", json_boolean(op->failure));
    return d;
}

/* Fold searcher operations into the state's trial table (ix: its index, state_index, kept up to
 * date); each is appended to log (may be NULL) as a decision. */
static void apply_ops(json_t *state, json_t *ix, struct kd_search_ops *ops, json_t *log)
{
    json_t *trials = json_object_get(state, "trials");
    for (size_t i = 0; i < ops->n; i++) {
        struct kd_search_op *op = &ops->v[i];
        if (log != NULL)
            json_array_append_new(log, decision(op));
        json_t *t = op->type != KD_SEARCH_SHUTDOWN ? json_object_get(ix, op->request_id) : NULL;
        switch (op->type) {
        case KD_SEARCH_CREATE:
            if (t == NULL) {
                t = json_pack(
                    "{s:s,s:I,s:o,s:I,s:s,s:I,s:b,s:b,s:I,s:b}", "request_id", op->request_id,
                    "index", (json_int_t)json_array_size(trials) + 1, "hparams",
                    op->hparams != NULL ? json_incref(op->hparams) : json_object(), "seed",
                    (json_int_t)op->seed, "parent", op->parent_id, "validate_after", (json_int_t)0,
                    "closed", 0, "created", 0, "validated", (json_int_t)0, "ended", 0);
                json_array_append_new(trials, t);
                json_object_set(ix, op->request_id, t);
            }
            break;
        case KD_SEARCH_VALIDATE_AFTER:
            if (t != NULL)
                json_object_set_new(t, "validate_after", json_integer(op->length));
            break;
        case KD_SEARCH_CLOSE:
            if (t != NULL)
                json_object_set_new(t, "closed", json_true());
            break;
        case KD_SEARCH_SHUTDOWN:
            json_object_set_new(state, "done", json_true());
            json_object_set_new(state, "failure", json_boolean(op->failure));
            json_object_set_new(state, "reason", json_string(op->reason != NULL ? op->reason : ""));
            break;
        }
    }
    kd_search_ops_free(ops);
}

static int state_name(const char *exp, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s%s", exp, KD_CTRL_STATE_SUFFIX);
    return n < 0 || (size_t)n >= len || n > 253 ? KD_ETOOBIG : 0;
}

/* Create (cm == NULL) or update (with cm's resourceVersion: a stale write is KD_ECONFLICT). */
static int write_state(struct kd_ctrl *c, const json_t *exp, const json_t *cm, json_t *state,
                       json_t **newcm, char *err)
{
    int rc = 0;
    char name[300];
    char *text = json_dumps(state, JSON_COMPACT);
    json_t *obj = NULL, *data = NULL, *binary = NULL;
    if (text == NULL)
        kd_oom(0);
    if ((rc = kd_ctrl_state_encode(text, &data, &binary, err)) != 0)
        goto out;
    if ((rc = state_name(kd_k8s_meta_str(exp, "name"), name, sizeof(name))) != 0)
        goto out;
    if (cm == NULL) {
        obj = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s},s:[{s:s,s:s,s:s,s:s,s:b,s:b}]}}", "apiVersion",
                        "v1", "kind", "ConfigMap", "metadata", "name", name, "namespace",
                        kd_k8s_meta_str(exp, "namespace"), "labels", KD_POD_LABEL_EXPERIMENT,
                        kd_k8s_meta_str(exp, "name"), "ownerReferences", "apiVersion",
                        "kdet.io/v1alpha1", "kind", "Experiment", "name",
                        kd_k8s_meta_str(exp, "name"), "uid", kd_k8s_meta_str(exp, "uid"),
                        "controller", 1, "blockOwnerDeletion", 1);
    } else {
        obj = json_deep_copy(cm);
        json_object_del(obj, "binaryData");
    }
    json_object_set(obj, "data", data);
    if (binary != NULL)
        json_object_set(obj, "binaryData", binary);
    if (cm == NULL)
        rc = kd_k8s_create(c->client, &KD_K8S_CONFIGMAPS, NULL, obj, newcm, NULL, err);
    else
        rc = kd_k8s_update(c->client, &KD_K8S_CONFIGMAPS, NULL, NULL, obj, newcm, NULL, err);
out:
    json_decref(obj);
    json_decref(data);
    json_decref(binary);
    free(text);
    return rc;
}

/* ---- trials ----------------------------------------------------------------------------- */

static void trial_name(const char *exp, json_int_t index, char *buf, size_t len)
{
    snprintf(buf, len, "%s-%" JSON_INTEGER_FORMAT, exp, index);
}

/*
 * What the reconciler keeps of one Trial of the experiment. The Trials are
 * read with one walk over the cache (kd_k8s_cache_each_owner), decoding one
 * at a time: the trees of 10,000 Trials at once took about 80 MiB, and an
 * active experiment read them at every resync.
 */
struct tsum {
    char *name;
    uint64_t spec_hash; /* of the spec fields ensure_trial compares (spec_digest) */
    json_int_t lv_batches;
    double lv_value; /* status.latestValidation.value; NAN when it is not a number */
    double lv_time;  /* status.latestValidation.timeValue (time_metric); NAN when absent */
    double bv_value; /* status.bestValidation.value; NAN when absent or not a number */
    uint64_t sig;    /* of its uid and state, for tview.sig */
    enum kd_search_exit early_why;
    bool early; /* condition EarlyExit=True */
    char state[24];
};

/*
 * What the passes of one experiment keep of its Trials from one pass to the
 * next (kd_ctrl.views, by experiment uid): each Trial's summary with the
 * resourceVersion it was made from. A pass decodes only the Trials that
 * changed since the last one; an experiment of 5,000 Trials decoded all of
 * them at every pass, and its passes grew with its trials. About 200 bytes a
 * Trial; dropped when the experiment ends or is gone.
 */
struct tmemo {
    struct tsum s; /* s.name: the key of the hash */
    char *rv;
    unsigned seen; /* the last pass that found it in the cache */
    UT_hash_handle hh;
};

struct kd_ctrl_view {
    char *uid;
    struct tmemo *trials;
    unsigned pass;
    bool queued;    /* facts is what the last pass that queued all of the Trials saw */
    uint64_t facts; /* exp_facts */
    /* The searcher state as the state ConfigMap of this resourceVersion holds it (read_state):
     * decoding it took a tenth of the controller's CPU with 2,500 trials. */
    json_t *state;
    char *state_rv;
    UT_hash_handle hh;
};

/* The best bestValidation of the Trials for each direction (best_validation). */
struct best {
    char *name;
    json_t *bv, *lc; /* status.bestValidation and status.latestCheckpoint */
};

struct tview {
    struct kd_ctrl *c;
    struct kd_ctrl_view *m; /* taken from c->views during the pass (view_load, view_free) */
    const char *ns;         /* the experiment's namespace (borrowed) */
    bool drop;              /* view_free forgets m: the experiment ended */
    struct tsum *v;         /* sorted by name; names borrowed from m */
    size_t n, cap;
    struct best lo, hi;     /* smaller_is_better, larger is better */
    uint64_t sig;           /* of the Trials' uids and states, order-independent (end_records) */
    struct kd_gc_trial *gc; /* during end_records: what checkpoint GC reads of each Trial */
    size_t ngc, gccap;
};

static uint64_t fnv64(const char *s, uint64_t h)
{
    for (; s != NULL && *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* The digest of the spec fields that ensure_trial keeps up to date (hparams, seed and
 * requestId are fixed at creation). Equal digests: nothing to patch. */
static uint64_t spec_digest(const json_t *spec)
{
    static const char *const keys[] = {"experiment", "validateAfter", "lengthUnit",      "closed",
                                       "paused",     "resources",     "parentRequestId", NULL};
    json_t *sub = json_object();
    for (int i = 0; keys[i] != NULL; i++) {
        json_t *v = json_object_get(spec, keys[i]);
        if (v != NULL)
            json_object_set(sub, keys[i], v);
    }
    char *text = json_dumps(sub, JSON_COMPACT | JSON_SORT_KEYS);
    if (text == NULL)
        kd_oom(0);
    uint64_t h = fnv64(text, 1469598103934665603ULL);
    free(text);
    json_decref(sub);
    return h;
}

static bool early_exit(const json_t *t, enum kd_search_exit *why);

/* The name of a Trial from its cache key (namespace/name). */
static const char *key_name(const char *key)
{
    const char *slash = strchr(key, '/');
    return slash != NULL ? slash + 1 : key;
}

/* kd_k8s_cache_each_owner_changed's filter: decode only the Trials that changed since. */
static bool memo_want(const char *key, const char *rv, void *ud)
{
    struct tview *w = ud;
    struct tmemo *e = NULL;
    const char *name = key_name(key);
    HASH_FIND_STR(w->m->trials, name, e);
    if (e == NULL || rv[0] == '\0' || strcmp(e->rv, rv) != 0)
        return true;
    e->seen = w->m->pass;
    return false;
}

/* kd_k8s_cache_each_owner_changed's callback: keep the summary of one (changed) Trial. */
static int memo_add(json_t *t, void *ud)
{
    struct tview *w = ud;
    const char *name = kd_k8s_meta_str(t, "name") ?: "";
    struct tmemo *e = NULL;
    HASH_FIND_STR(w->m->trials, name, e);
    if (e == NULL) {
        e = kd_xcalloc(1, sizeof(*e));
        e->s.name = kd_xstrdup(name);
        HASH_ADD_KEYPTR(hh, w->m->trials, e->s.name, strlen(e->s.name), e);
    }
    free(e->rv);
    e->rv = kd_xstrdup(kd_k8s_meta_str(t, "resourceVersion") ?: "");
    e->seen = w->m->pass;
    struct tsum *s = &e->s;
    s->spec_hash = spec_digest(json_object_get(t, "spec"));
    const char *state = kd_ctrl_str(t, "status", "state", NULL);
    kd_strlcpy(s->state, state ?: "", sizeof(s->state));
    const json_t *lv = json_object_get(json_object_get(t, "status"), "latestValidation");
    s->lv_batches = json_integer_value(json_object_get(lv, "batches"));
    const json_t *jv = json_object_get(lv, "value");
    s->lv_value = json_is_number(jv) ? json_number_value(jv) : NAN;
    jv = json_object_get(lv, "timeValue");
    s->lv_time = json_is_number(jv) ? json_number_value(jv) : NAN;
    jv = json_object_get(json_object_get(json_object_get(t, "status"), "bestValidation"), "value");
    s->bv_value = json_is_number(jv) ? json_number_value(jv) : NAN;
    s->early = early_exit(t, &s->early_why);
    s->sig = fnv64(state ?: "QUEUED", fnv64(kd_k8s_meta_str(t, "uid"), 1469598103934665603ULL));
    return 0;
}

static void memo_free(struct tmemo *e)
{
    free(e->s.name);
    free(e->rv);
    free(e);
}

static void ctrl_view_free(struct kd_ctrl_view *m)
{
    struct tmemo *e, *tmp;
    HASH_ITER(hh, m->trials, e, tmp)
    {
        HASH_DEL(m->trials, e);
        memo_free(e);
    }
    json_decref(m->state);
    free(m->state_rv);
    free(m->uid);
    free(m);
}

void kd_ctrl_views_prune(struct kd_ctrl *c, const json_t *uids)
{
    struct kd_ctrl_view *m, *tmp;
    pthread_mutex_lock(&c->mu);
    HASH_ITER(hh, c->views, m, tmp)
    {
        if (uids == NULL || json_object_get(uids, m->uid) == NULL) {
            HASH_DEL(c->views, m);
            ctrl_view_free(m);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/*
 * What the Trial reconciler reads of the Experiment (trial.c, gather_exp):
 * when it changes, every Trial of the experiment is reconciled again; else
 * only those that have not ended.
 */
static uint64_t exp_facts(const json_t *exp)
{
    char buf[512];
    const json_t *meta = json_object_get(exp, "metadata");
    snprintf(
        buf, sizeof(buf), "%" JSON_INTEGER_FORMAT "|%" JSON_INTEGER_FORMAT "|%s|%d|%d|%d|%d",
        json_integer_value(json_object_get(meta, "generation")),
        json_integer_value(json_object_get(json_object_get(exp, "status"), "observedGeneration")),
        kd_ctrl_str(exp, "status", "state", NULL) ?: "", spec_bool(exp, "canceled"),
        spec_bool(exp, "paused"), json_object_get(meta, "deletionTimestamp") != NULL,
        kd_ctrl_str(exp, "metadata", "annotations", KD_TRIAL_KILL_ANNOTATION) != NULL);
    return fnv64(buf, 1469598103934665603ULL);
}

/* The Trial of the best bestValidation of the view in one direction (ties: the first name). */
static void best_of(struct tview *w, bool smaller, struct best *b)
{
    const struct tsum *top = NULL;
    for (size_t i = 0; i < w->n; i++) {
        const struct tsum *s = &w->v[i]; /* sorted by name: the first of equals stays */
        if (isnan(s->bv_value))
            continue;
        if (top == NULL || (smaller ? s->bv_value < top->bv_value : s->bv_value > top->bv_value))
            top = s;
    }
    json_t *t = NULL;
    char key[600];
    if (top == NULL)
        return;
    snprintf(key, sizeof(key), "%s/%s", w->ns, top->name);
    if (kd_k8s_cache_get(kd_k8s_informer_cache(w->c->trials), key, &t) != 0)
        return; /* gone since the walk: the next pass sees it */
    const json_t *st = json_object_get(t, "status");
    b->name = kd_xstrdup(top->name);
    b->bv = json_deep_copy(json_object_get(st, "bestValidation"));
    b->lc = json_deep_copy(json_object_get(st, "latestCheckpoint"));
    json_decref(t);
}

/* kd_k8s_cache_each_owner's callback for end_records: the fields checkpoint GC reads, in one
 * allocation per Trial (about 150 bytes; a jansson copy of the same fields took 2 KB). */
static int gc_add(json_t *t, void *ud)
{
    struct tview *w = ud;
    const char *f[5] = {kd_k8s_meta_str(t, "uid") ?: "", kd_ctrl_str(t, "spec", "requestId", NULL),
                        kd_ctrl_str(t, "spec", "parentRequestId", NULL),
                        kd_ctrl_str(t, "status", "latestCheckpoint", "uuid"),
                        kd_ctrl_str(t, "status", "state", NULL)};
    size_t len = 0;
    for (int i = 0; i < 5; i++)
        len += f[i] != NULL ? strlen(f[i]) + 1 : 0;
    if (w->ngc == w->gccap) {
        w->gccap = w->gccap != 0 ? w->gccap * 2 : 64;
        w->gc = kd_xrealloc(w->gc, w->gccap * sizeof(*w->gc));
    }
    char *q = kd_xmalloc(len);
    const char *out[5];
    for (int i = 0; i < 5; i++) {
        out[i] = NULL;
        if (f[i] != NULL) {
            size_t n = strlen(f[i]) + 1;
            memcpy(q, f[i], n);
            out[i] = q;
            q += n;
        }
    }
    /* uid first, never NULL: gc_free frees the block through it. */
    w->gc[w->ngc++] = (struct kd_gc_trial){.uid = out[0],
                                           .request_id = out[1],
                                           .parent_request_id = out[2],
                                           .checkpoint = out[3],
                                           .state = out[4]};
    return 0;
}

static void gc_free(struct tview *w)
{
    for (size_t i = 0; i < w->ngc; i++)
        free((char *)w->gc[i].uid);
    free(w->gc);
    w->gc = NULL;
    w->ngc = w->gccap = 0;
}

static int tsum_cmp(const void *a, const void *b)
{
    return strcmp(((const struct tsum *)a)->name, ((const struct tsum *)b)->name);
}

/* Take the experiment's memo out of c->views for this pass (a new one when it has none). */
static struct kd_ctrl_view *view_take(struct kd_ctrl *c, const char *uid)
{
    struct kd_ctrl_view *m = NULL;
    pthread_mutex_lock(&c->mu);
    HASH_FIND_STR(c->views, uid, m);
    if (m != NULL)
        HASH_DEL(c->views, m);
    pthread_mutex_unlock(&c->mu);
    if (m == NULL) {
        m = kd_xcalloc(1, sizeof(*m));
        m->uid = kd_xstrdup(uid);
    }
    return m;
}

/*
 * Read the experiment's Trials (owner uid) into w: the memo's summaries,
 * refreshed from the Trials that changed. Queue for the Trial reconciler
 * those that have not ended, or all of them when what it reads of the
 * experiment changed (exp_facts).
 */
static void view_load(struct kd_ctrl *c, const json_t *exp, struct tview *w)
{
    const char *uid = kd_k8s_meta_str(exp, "uid") ?: "";
    memset(w, 0, sizeof(*w));
    w->c = c;
    w->ns = kd_k8s_meta_str(exp, "namespace") ?: "";
    w->m = view_take(c, uid);
    w->m->pass++;
    (void)kd_k8s_cache_each_owner_changed(kd_k8s_informer_cache(c->trials), uid, memo_want,
                                          memo_add, w);
    uint64_t facts = exp_facts(exp);
    bool all = !w->m->queued || w->m->facts != facts;
    w->m->queued = true;
    w->m->facts = facts;
    w->cap = HASH_COUNT(w->m->trials);
    w->v = kd_xmalloc((w->cap > 0 ? w->cap : 1) * sizeof(*w->v));
    struct tmemo *e, *tmp;
    HASH_ITER(hh, w->m->trials, e, tmp)
    {
        if (e->seen != w->m->pass) { /* deleted */
            HASH_DEL(w->m->trials, e);
            memo_free(e);
            continue;
        }
        enum kd_trial_state st;
        if (all || !kd_trial_state_parse(e->s.state, &st) || !kd_trial_state_terminal(st)) {
            char key[600];
            snprintf(key, sizeof(key), "%s/%s", w->ns, e->s.name);
            kd_k8s_queue_add(c->trialq, key);
        }
        w->v[w->n++] = e->s;
        w->sig += e->s.sig;
    }
    if (w->n > 1)
        qsort(w->v, w->n, sizeof(*w->v), tsum_cmp);
    best_of(w, true, &w->lo);
    best_of(w, false, &w->hi);
}

/* Put the memo back in c->views for the next pass, or forget it (w->drop). */
static void view_free(struct tview *w)
{
    free(w->v);
    struct best *bs[] = {&w->lo, &w->hi};
    for (int i = 0; i < 2; i++) {
        free(bs[i]->name);
        json_decref(bs[i]->bv);
        json_decref(bs[i]->lc);
    }
    gc_free(w);
    if (w->m != NULL && w->drop) {
        ctrl_view_free(w->m);
    } else if (w->m != NULL) {
        struct kd_ctrl_view *old = NULL;
        pthread_mutex_lock(&w->c->mu);
        HASH_FIND_STR(w->c->views, w->m->uid, old);
        if (old != NULL) /* not expected: one pass of an experiment at a time */
            HASH_DEL(w->c->views, old);
        HASH_ADD_KEYPTR(hh, w->c->views, w->m->uid, strlen(w->m->uid), w->m);
        pthread_mutex_unlock(&w->c->mu);
        if (old != NULL)
            ctrl_view_free(old);
    }
    memset(w, 0, sizeof(*w));
}

/* The searcher state from its ConfigMap (*cm): the one the last pass kept (view_keep_state) when
 * the ConfigMap has not changed since, else decoded. */
static int read_state(struct kd_ctrl *c, const json_t *exp, struct tview *w, json_t **cm,
                      json_t **state, char *err)
{
    int rc = 0;
    char name[300];
    struct kd_ctrl_view *m = w->m;
    *cm = NULL;
    *state = NULL;
    if ((rc = state_name(kd_k8s_meta_str(exp, "name"), name, sizeof(name))) != 0)
        goto out;
    rc = kd_k8s_get(c->client, &KD_K8S_CONFIGMAPS, kd_k8s_meta_str(exp, "namespace"), name, cm,
                    NULL, err);
    if (rc != 0)
        goto out;
    const char *rv = kd_k8s_meta_str(*cm, "resourceVersion");
    if (m->state != NULL && rv != NULL && rv[0] != '\0' && strcmp(rv, m->state_rv) == 0) {
        *state = m->state; /* the pass may change it: kept again only once persisted */
        m->state = NULL;
        goto out;
    }
    rc = kd_ctrl_state_decode(*cm, state, err);
out:
    return rc;
}

/* Keep state for the next pass: what the state ConfigMap cm holds (written or read). */
static void view_keep_state(struct tview *w, const json_t *cm, json_t *state)
{
    struct kd_ctrl_view *m = w->m;
    const char *rv = kd_k8s_meta_str(cm, "resourceVersion");
    json_decref(m->state);
    free(m->state_rv);
    m->state = rv != NULL && rv[0] != '\0' ? json_incref(state) : NULL;
    m->state_rv = kd_xstrdup(rv != NULL ? rv : "");
}

static const struct tsum *find_trial(const struct tview *w, const char *name)
{
    struct tsum k = {.name = (char *)name};
    return w->n > 0 ? bsearch(&k, w->v, w->n, sizeof(*w->v), tsum_cmp) : NULL;
}

/* The desired spec of a state trial. */
static json_t *desired_spec(const json_t *exp, const json_t *cfg, const json_t *st,
                            const char *unit)
{
    const json_t *res = json_object_get(cfg, "resources");
    json_t *r = json_object();
    json_object_set_new(r, "slots",
                        json_integer(json_integer_value(json_object_get(res, "slots_per_trial"))));
    const char *pool = json_string_value(json_object_get(res, "resource_pool"));
    json_object_set_new(r, "resourcePool", json_string(pool != NULL && pool[0] ? pool : "default"));
    json_int_t prio = json_integer_value(json_object_get(res, "priority"));
    if (prio >= 1 && prio <= 99)
        json_object_set_new(r, "priority", json_integer(prio));
    const json_t *w = json_object_get(res, "weight");
    if (json_is_number(w))
        json_object_set_new(r, "weight", kd_ctrl_number(json_number_value(w)));
    if (json_is_true(json_object_get(res, "is_single_node")))
        json_object_set_new(r, "singleNode", json_true());
    json_t *spec = json_pack(
        "{s:s,s:O,s:O,s:O,s:O,s:s,s:O,s:b,s:o}", "experiment", kd_k8s_meta_str(exp, "name"),
        "requestId", json_object_get(st, "request_id"), "hparams", json_object_get(st, "hparams"),
        "seed", json_object_get(st, "seed"), "validateAfter", json_object_get(st, "validate_after"),
        "lengthUnit", unit, "closed", json_object_get(st, "closed"), "paused",
        spec_bool(exp, "paused"), "resources", r);
    const char *parent = json_string_value(json_object_get(st, "parent"));
    if (parent != NULL && parent[0] != '\0')
        json_object_set_new(spec, "parentRequestId", json_string(parent));
    return spec;
}

/* Trial writes made at once by one pass (write_trials): a pass of a search with 200 trials at a
 * time creates about 200 and patches about as many, and one after another they took most of
 * the pass. */
#define WRITE_PARALLEL 4

/*
 * What one Trial the state asks for needs: the object to create, or the
 * difference to patch on the existing one, added to writes (write_trials
 * makes them). A Trial that ended keeps its spec: nothing reads it any more.
 */
static void ensure_trial(struct kd_ctrl *c, const json_t *exp, const json_t *cfg, const json_t *st,
                         const char *unit, const struct tview *trials, json_t *writes)
{
    char name[300], key[600];
    json_t *want = NULL, *obj = NULL, *cur = NULL;
    trial_name(kd_k8s_meta_str(exp, "name"), json_integer_value(json_object_get(st, "index")), name,
               sizeof(name));
    const struct tsum *sum = find_trial(trials, name);
    enum kd_trial_state ts;
    if (sum != NULL && kd_trial_state_parse(sum->state, &ts) && kd_trial_state_terminal(ts))
        goto out;
    want = desired_spec(exp, cfg, st, unit);
    if (sum != NULL && sum->spec_hash == spec_digest(want))
        goto out; /* up to date: no need to decode it */
    snprintf(key, sizeof(key), "%s/%s", kd_k8s_meta_str(exp, "namespace") ?: "", name);
    if (sum != NULL && kd_k8s_cache_get(kd_k8s_informer_cache(c->trials), key, &cur) != 0)
        goto out; /* gone since the walk: the next pass sees it */
    if (cur == NULL) {
        obj = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s},s:[{s:s,s:s,s:s,s:s,s:b,s:b}]},s:O}",
                        "apiVersion", "kdet.io/v1alpha1", "kind", "Trial", "metadata", "name", name,
                        "namespace", kd_k8s_meta_str(exp, "namespace"), "labels",
                        KD_POD_LABEL_EXPERIMENT, kd_k8s_meta_str(exp, "name"), KD_POD_LABEL_REQUEST,
                        json_string_value(json_object_get(st, "request_id")), "ownerReferences",
                        "apiVersion", "kdet.io/v1alpha1", "kind", "Experiment", "name",
                        kd_k8s_meta_str(exp, "name"), "uid", kd_k8s_meta_str(exp, "uid"),
                        "controller", 1, "blockOwnerDeletion", 1, "spec", want);
        kd_pod_scope_labels(json_object_get(json_object_get(obj, "metadata"), "labels"), cfg);
        json_array_append_new(writes, json_pack("{s:O}", "create", obj));
        goto out;
    }
    /* Write only the difference (validateAfter, closed, paused, scheduling hints). */
    json_t *have = json_object_get(cur, "spec");
    json_t *diff = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v)
    {
        if (strcmp(k, "hparams") == 0 || strcmp(k, "seed") == 0 || strcmp(k, "requestId") == 0)
            continue; /* fixed at creation */
        if (!json_equal(v, json_object_get(have, k)))
            json_object_set(diff, k, v);
    }
    if (json_object_size(diff) > 0)
        json_array_append_new(writes, json_pack("{s:s,s:s,s:{s:o}}", "namespace",
                                                kd_k8s_meta_str(cur, "namespace") ?: "", "name",
                                                name, "patch", "spec", diff));
    else
        json_decref(diff);
out:
    json_decref(want);
    json_decref(obj);
    json_decref(cur);
}

struct writing {
    struct kd_ctrl *c;
    json_t *writes;
    int *rcs;
    char (*errs)[KD_ERRLEN];
};

/* One of ensure_trial's writes: {"create": obj} or {"namespace", "name", "patch"}. */
static void write_one(size_t i, void *ud)
{
    struct writing *k = ud;
    const json_t *w = json_array_get(k->writes, i);
    json_t *obj = json_object_get(w, "create");
    int rc;
    if (obj != NULL) {
        rc = kd_k8s_create(k->c->client, &KD_K8S_TRIALS, NULL, obj, NULL, NULL, k->errs[i]);
        if (rc == KD_EEXIST)
            rc = 0; /* created before a restart: the cache will show it */
        else if (rc == 0)
            KD_INFO("trial created", "trial=%s request_id=%s",
                    kd_logq(kd_k8s_meta_str(obj, "name")),
                    kd_ctrl_str(obj, "spec", "requestId", NULL));
    } else {
        rc = kd_k8s_patch(k->c->client, &KD_K8S_TRIALS,
                          json_string_value(json_object_get(w, "namespace")),
                          json_string_value(json_object_get(w, "name")), NULL, KD_K8S_PATCH_MERGE,
                          json_object_get(w, "patch"), NULL, NULL, k->errs[i]);
    }
    k->rcs[i] = rc;
}

/* Make ensure_trial's writes, a few at a time; the first failure (in their order) is returned. */
static int write_trials(struct kd_ctrl *c, json_t *writes, char *err)
{
    size_t n = json_array_size(writes);
    if (n == 0)
        return 0;
    struct writing k = {.c = c,
                        .writes = writes,
                        .rcs = kd_xcalloc(n, sizeof(int)),
                        .errs = kd_xcalloc(n, KD_ERRLEN)};
    kd_par_for(n, WRITE_PARALLEL, write_one, &k);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = k.rcs[i];
        if (rc != 0)
            kd_strlcpy(err, k.errs[i], KD_ERRLEN);
    }
    free(k.rcs);
    free(k.errs);
    return rc;
}

/* ---- events from trial outcomes --------------------------------------------------------- */

static void event_err(const char *exp, const char *what, const char *rid, int rc, const char *err)
{
    KD_WARN("searcher rejected an event", "experiment=%s event=%s request_id=%s err=%s detail=%s",
            kd_logq(exp), what, rid, kd_err_name(rc), kd_logq(err));
}

/* The trial's EarlyExit condition (written by the API), as the searcher's reason. */
static bool early_exit(const json_t *t, enum kd_search_exit *why)
{
    bool found = false;
    size_t i;
    json_t *cnd;
    json_array_foreach(json_object_get(json_object_get(t, "status"), "conditions"), i, cnd)
    {
        const char *type = json_string_value(json_object_get(cnd, "type")) ?: "";
        const char *st = json_string_value(json_object_get(cnd, "status")) ?: "";
        const char *reason = json_string_value(json_object_get(cnd, "reason")) ?: "";
        if (!found && strcmp(type, "EarlyExit") == 0 && strcmp(st, "True") == 0) {
            found = true;
            *why = KD_SEARCH_EXIT_ERRORED;
            if (strcmp(reason, "InvalidHP") == 0 || strcmp(reason, "invalid_hp") == 0)
                *why = KD_SEARCH_EXIT_INVALID_HP;
            else if (strcmp(reason, "UserCanceled") == 0 || strcmp(reason, "user_canceled") == 0)
                *why = KD_SEARCH_EXIT_USER_CANCELED;
        }
    }
    return found;
}

/*
 * Feed the searcher every trial outcome not applied yet, in trial order.
 * Returns the number of events applied (state changed) or a negative error.
 */
static int feed_events(struct kd_searcher *s, json_t *state, const json_t *exp,
                       const struct tview *trials, bool stopping, bool api, json_t *log)
{
    int n = 0;
    char err[KD_ERRLEN];
    const char *ename = kd_k8s_meta_str(exp, "name");
    json_t *ix = state_index(state);
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(state, "trials"), i, st)
    {
        struct kd_search_ops ops = {0};
        char name[300];
        const char *rid = json_string_value(json_object_get(st, "request_id"));
        trial_name(ename, json_integer_value(json_object_get(st, "index")), name, sizeof(name));
        const struct tsum *t = find_trial(trials, name);
        if (t == NULL)
            continue;
        if (!json_is_true(json_object_get(st, "created"))) {
            int rc = kd_searcher_trial_created(s, rid, &ops, err);
            if (rc != 0)
                event_err(ename, "trial_created", rid, rc, err);
            json_object_set_new(st, "created", json_true());
            n++;
        }
        if (json_is_true(json_object_get(st, "ended")))
            goto next;
        const char *tstate = t->state;
        /* With the API, latestValidation is what the workers reported (value = the searcher
         * metric); without it, the interim path of trial.c: pods that exited 0 reached their
         * target, recorded with no value (NaN = worst). Fed once per length: "validated"
         * persists with the searcher state. */
        json_int_t reached = t->lv_batches;
        double value = api ? t->lv_value : NAN;
        enum kd_search_exit early = t->early_why;
        if (api && t->early) {
            int rc = kd_searcher_trial_exited_early(s, rid, early, &ops, err);
            if (rc != 0)
                event_err(ename, "trial_exited_early", rid, rc, err);
            rc = kd_searcher_trial_closed(s, rid, &ops, err);
            if (rc != 0)
                event_err(ename, "trial_closed", rid, rc, err);
            json_object_set_new(st, "ended", json_true());
            n++;
            goto next;
        }
        if (reached > json_integer_value(json_object_get(st, "validated")) && !stopping) {
            /* adaptive_asha with time_metric: the rungs are in the value the validation
             * reported for it (the API requires it in every validation). */
            double tv = kd_searcher_time_metric(s) != NULL && api ? t->lv_time : NAN;
            int rc = kd_searcher_validation_timed(s, rid, value, (int64_t)reached, tv, &ops, err);
            if (rc != 0)
                event_err(ename, "validation_completed", rid, rc, err);
            json_object_set_new(st, "validated", json_integer(reached));
            n++;
        }
        if (strcmp(tstate, "ERROR") == 0 || (strcmp(tstate, "CANCELED") == 0 && !stopping)) {
            enum kd_search_exit why =
                tstate[0] == 'E' ? KD_SEARCH_EXIT_ERRORED : KD_SEARCH_EXIT_USER_CANCELED;
            int rc = kd_searcher_trial_exited_early(s, rid, why, &ops, err);
            if (rc != 0)
                event_err(ename, "trial_exited_early", rid, rc, err);
            rc = kd_searcher_trial_closed(s, rid, &ops, err);
            if (rc != 0)
                event_err(ename, "trial_closed", rid, rc, err);
            json_object_set_new(st, "ended", json_true());
            n++;
        } else if (strcmp(tstate, "COMPLETED") == 0) {
            int rc = kd_searcher_trial_closed(s, rid, &ops, err);
            if (rc != 0)
                event_err(ename, "trial_closed", rid, rc, err);
            json_object_set_new(st, "ended", json_true());
            n++;
        }
    next:
        apply_ops(state, ix, &ops, log);
    }
    json_decref(ix);
    return n;
}

/* ---- status ----------------------------------------------------------------------------- */

static json_t *trial_counts(const struct tview *trials, int *live)
{
    int total = 0, queued = 0, active = 0, paused = 0, stopping = 0, completed = 0, canceled = 0,
        errored = 0;
    *live = 0;
    for (size_t i = 0; i < trials->n; i++) {
        enum kd_trial_state s;
        if (!kd_trial_state_parse(trials->v[i].state, &s))
            s = KD_TRIAL_QUEUED;
        total++;
        if (!kd_trial_state_terminal(s))
            (*live)++;
        switch (s) {
        case KD_TRIAL_QUEUED: queued++; break;
        case KD_TRIAL_ACTIVE: active++; break;
        case KD_TRIAL_PAUSED: paused++; break;
        case KD_TRIAL_COMPLETED: completed++; break;
        case KD_TRIAL_CANCELED: canceled++; break;
        case KD_TRIAL_ERROR: errored++; break;
        default: stopping++;
        }
    }
    return json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "total", total, "queued", queued,
                     "active", active, "paused", paused, "stopping", stopping, "completed",
                     completed, "canceled", canceled, "errored", errored);
}

/*
 * The best of the trials' bestValidation (the searcher metric, as the API
 * writes it), by the searcher's direction; ties go to the earlier trial.
 * NULL when no trial has a value yet.
 */
static json_t *best_validation(const struct tview *trials, const json_t *cfg)
{
    const json_t *sib = json_object_get(json_object_get(cfg, "searcher"), "smaller_is_better");
    const struct best *b = !json_is_false(sib) ? &trials->lo : &trials->hi;
    const json_t *bv = b->bv;
    if (bv == NULL)
        return NULL;
    json_t *out = json_pack("{s:s,s:s,s:f,s:I}", "trial", b->name,
                            "metric",
                            json_string_value(json_object_get(bv, "metric"))
                                ?: kd_ctrl_str(cfg, "searcher", "metric", NULL) ?: "",
                            "value", json_number_value(json_object_get(bv, "value")), "batches",
                            json_integer_value(json_object_get(bv, "batches")));
    const json_t *lc = b->lc;
    if (json_integer_value(json_object_get(lc, "batches")) ==
            json_integer_value(json_object_get(bv, "batches")) &&
        json_is_string(json_object_get(lc, "uuid")))
        json_object_set(out, "checkpoint", json_object_get(lc, "uuid"));
    return out;
}

/*
 * The store's end-of-life records and checkpoint GC (gc.c); a failure is
 * retried later. GC runs again only when a Trial's state or the
 * experiment's changed since its last success (its own memo), so the same
 * signature is kept here too: then the second walk that builds GC's view
 * of the Trials is not needed at every resync.
 */
static void end_records(struct kd_ctrl *c, const json_t *exp, const json_t *cfg,
                        struct tview *trials, const char *state, long *requeue_after_ms)
{
    char err[KD_ERRLEN] = "";
    const char *uid = kd_k8s_meta_str(exp, "uid") ?: "";
    json_int_t sig =
        (json_int_t)((trials->sig + fnv64(state, 1469598103934665603ULL)) & 0x7fffffffffffffffULL);
    pthread_mutex_lock(&c->mu);
    json_t *memo = c->endmemo != NULL ? json_object_get(c->endmemo, uid) : NULL;
    bool same = memo != NULL && json_integer_value(memo) == sig;
    pthread_mutex_unlock(&c->mu);
    if (same)
        return;
    (void)kd_k8s_cache_each_owner(kd_k8s_informer_cache(c->trials), uid, gc_add, trials);
    int rc = kd_ctrl_gc_experiment(c, exp, cfg, trials->gc, trials->ngc, state, err);
    gc_free(trials);
    if (rc == 0) {
        pthread_mutex_lock(&c->mu);
        if (c->endmemo == NULL)
            c->endmemo = json_object();
        json_object_set_new(c->endmemo, uid, json_integer(sig));
        pthread_mutex_unlock(&c->mu);
    }
    if (rc != 0) {
        KD_WARN("store records or checkpoint GC failed; retrying", "experiment=%s err=%s detail=%s",
                kd_logq(kd_k8s_meta_str(exp, "name")), kd_err_name(rc), kd_logq(err));
        if (*requeue_after_ms <= 0 || *requeue_after_ms > 5000)
            *requeue_after_ms = 5000;
    }
}

/* Write status when it differs from what is stored (conditions' times aside). */
static int put_status(struct kd_ctrl *c, const json_t *exp, json_t *status, char *err)
{
    int rc = 0;
    json_t *old = json_object_get(exp, "status");
    char ts[40];
    if (json_object_get(old, "startTime") != NULL)
        json_object_set(status, "startTime", json_object_get(old, "startTime"));
    else
        json_object_set_new(status, "startTime",
                            json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
    enum kd_exp_state st;
    if (kd_exp_state_parse(kd_ctrl_str(status, "state", NULL, NULL), &st) &&
        kd_exp_state_terminal(st)) {
        if (json_object_get(old, "endTime") != NULL)
            json_object_set(status, "endTime", json_object_get(old, "endTime"));
        else
            json_object_set_new(status, "endTime",
                                json_string(kd_time_rfc3339(kd_wall_ms(), 0, ts, sizeof(ts))));
    }
    bool same = true;
    const char *k;
    json_t *v;
    json_object_foreach(status, k, v)
    {
        if (!json_equal(v, json_object_get(old, k)))
            same = false;
    }
    if (!same)
        rc = kd_ctrl_patch_status(c, &KD_K8S_EXPERIMENTS, exp, status, err);
    return rc;
}

static json_t *base_status(const json_t *exp, enum kd_exp_state st, const char *message)
{
    return json_pack("{s:s,s:s,s:I}", "state", kd_exp_state_name(st), "message",
                     message != NULL ? message : "", "observedGeneration",
                     (json_int_t)json_integer_value(
                         json_object_get(json_object_get(exp, "metadata"), "generation")));
}

/*
 * The merge patch of metadata.labels that gives the Experiment the workspace and project
 * labels of its configuration (null removes a stale one), or NULL when it has them.
 */
static json_t *scope_label_patch(const json_t *exp, const json_t *cfg)
{
    static const char *const keys[] = {KD_LABEL_WORKSPACE, KD_LABEL_PROJECT};
    const json_t *have = json_object_get(json_object_get(exp, "metadata"), "labels");
    json_t *want = json_object(), *patch = json_object();
    kd_pod_scope_labels(want, cfg);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const json_t *w = json_object_get(want, keys[i]), *h = json_object_get(have, keys[i]);
        if (w != NULL && !json_equal(w, h))
            json_object_set(patch, keys[i], (json_t *)w);
        else if (w == NULL && h != NULL)
            json_object_set_new(patch, keys[i], json_null());
    }
    json_decref(want);
    if (json_object_size(patch) == 0) {
        json_decref(patch);
        patch = NULL;
    }
    return patch;
}

/* Label the Experiment with its workspace and project, so that selectors find it. */
static int ensure_scope_labels(struct kd_ctrl *c, const json_t *exp, const json_t *cfg, char *err)
{
    int rc = 0;
    json_t *labels = scope_label_patch(exp, cfg), *patch = NULL;
    if (labels == NULL)
        goto out;
    patch = json_pack("{s:{s:o}}", "metadata", "labels", labels);
    rc = kd_k8s_patch(c->client, &KD_K8S_EXPERIMENTS, kd_k8s_meta_str(exp, "namespace"),
                      kd_k8s_meta_str(exp, "name"), NULL, KD_K8S_PATCH_MERGE, patch, NULL, NULL,
                      err);
out:
    json_decref(patch);
    return rc;
}

static int ensure_finalizer(struct kd_ctrl *c, const json_t *exp, bool want, char *err)
{
    int rc = 0;
    json_t *fins = json_object_get(json_object_get(exp, "metadata"), "finalizers");
    json_t *next = json_array(), *patch = NULL;
    bool have = false;
    size_t i;
    json_t *f;
    json_array_foreach(fins, i, f)
    {
        if (strcmp(json_string_value(f) ?: "", KD_CTRL_FINALIZER) == 0)
            have = true;
        else
            json_array_append(next, f);
    }
    if (want == have)
        goto out;
    if (want)
        json_array_append_new(next, json_string(KD_CTRL_FINALIZER));
    patch = json_pack("{s:{s:O,s:O}}", "metadata", "finalizers", next, "resourceVersion",
                      json_object_get(json_object_get(exp, "metadata"), "resourceVersion"));
    rc = kd_k8s_patch(c->client, &KD_K8S_EXPERIMENTS, kd_k8s_meta_str(exp, "namespace"),
                      kd_k8s_meta_str(exp, "name"), NULL, KD_K8S_PATCH_MERGE, patch, NULL, NULL,
                      err);
out:
    json_decref(next);
    json_decref(patch);
    return rc;
}

/* Delete the pods of every trial of the experiment (explicit cleanup besides GC). */
static int delete_pods(struct kd_ctrl *c, const json_t *exp, int *left)
{
    int rc = 0;
    json_t *pods = kd_k8s_cache_by_label(kd_k8s_informer_cache(c->pods), KD_POD_LABEL_EXPERIMENT,
                                         kd_k8s_meta_str(exp, "name"));
    const char *ns = kd_k8s_meta_str(exp, "namespace");
    size_t i;
    json_t *p;
    *left = 0;
    json_array_foreach(pods, i, p)
    {
        if (strcmp(kd_k8s_meta_str(p, "namespace") ?: "", ns) != 0)
            continue;
        (*left)++;
        int r = kd_k8s_delete(c->client, &KD_K8S_PODS, ns, kd_k8s_meta_str(p, "name"), NULL, NULL,
                              NULL, NULL);
        if (r != 0 && r != KD_ENOTFOUND && rc == 0)
            rc = r;
    }
    json_decref(pods);
    return rc;
}

int kd_ctrl_reconcile_experiment(const char *key, long *requeue_after_ms, void *ud)
{
    struct kd_ctrl *c = ud;
    int rc = 0, live = 0;
    json_t *exp = NULL, *cfg = NULL, *cm = NULL, *state = NULL, *newcm = NULL, *status = NULL;
    json_t *writes = json_array(); /* to the Trials (ensure_trial) */
    struct tview trials = {0};
    struct kd_searcher *s = NULL;
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN] = "";
    uint64_t seed = 0;
    if (!kd_ctrl_acting(c)) {
        *requeue_after_ms = 2000;
        goto out;
    }
    if (kd_k8s_cache_get(kd_k8s_informer_cache(c->exps), key, &exp) != 0)
        goto out; /* deleted: owner references remove the rest */
    const char *name = kd_k8s_meta_str(exp, "name");
    json_int_t gen =
        json_integer_value(json_object_get(json_object_get(exp, "metadata"), "generation"));
    view_load(c, exp, &trials);

    if (kd_ctrl_str(exp, "metadata", "deletionTimestamp", NULL) != NULL) {
        trials.drop = true;
        int left = 0;
        if ((rc = delete_pods(c, exp, &left)) != 0)
            goto out;
        if (left > 0) {
            *requeue_after_ms = 1000;
            goto out;
        }
        /* Before the finalizer goes: once it has, nothing is left to say the experiment ended. */
        if ((rc = kd_ctrl_wire_deleted(c, exp, err)) != 0)
            goto out;
        rc = ensure_finalizer(c, exp, false, err);
        goto out;
    }
    enum kd_exp_state cur = KD_EXP_ACTIVE;
    bool had_state = kd_exp_state_parse(kd_ctrl_str(exp, "status", "state", NULL), &cur);
    json_int_t observed =
        json_integer_value(json_object_get(json_object_get(exp, "status"), "observedGeneration"));
    if (had_state && kd_exp_state_terminal(cur)) {
        /* A configuration error is re-checked when the spec changes; other ends are final. */
        if (!(cur == KD_EXP_ERROR && observed < gen &&
              json_object_get(json_object_get(exp, "status"), "searcher") == NULL &&
              trials.n == 0)) {
            /* Ended: the store's records and checkpoint GC, finished after a restart. */
            trials.drop = true;
            if (kd_ctrl_api_on(c) && kd_ctrl_exp_config(c, exp, &cfg, &seed, err) == 0)
                end_records(c, exp, cfg, &trials, kd_exp_state_name(cur), requeue_after_ms);
            goto out;
        }
        cur = KD_EXP_ACTIVE;
    }
    if ((rc = ensure_finalizer(c, exp, true, err)) != 0)
        goto out;

    struct kd_exp_facts f = {.canceled = spec_bool(exp, "canceled"),
                             .paused = spec_bool(exp, "paused")};
    rc = kd_ctrl_exp_config(c, exp, &cfg, &seed, err);
    if (rc == KD_EINVALID || rc == KD_EINVAL) {
        f.invalid = true;
        status = base_status(exp, kd_exp_next_state(cur, &f), err);
        kd_ctrl_set_condition(status, json_object_get(exp, "status"), "Valid", false,
                              kd_str_has_prefix(err, "spec.template:") ? "TemplateNotFound"
                                                                       : "InvalidConfig",
                              err, gen);
        KD_WARN("experiment configuration invalid", "experiment=%s err=%s", kd_logq(key),
                kd_logq(err));
        rc = put_status(c, exp, status, err);
        goto out;
    } else if (rc != 0) {
        goto out;
    }
    if ((rc = ensure_scope_labels(c, exp, cfg, err)) != 0)
        goto out;

    /* The searcher: restore its persisted state, or start it and persist before acting. */
    rc = read_state(c, exp, &trials, &cm, &state, err);
    if (rc == KD_ENOTFOUND) {
        if ((rc = kd_searcher_new(cfg, seed, &s, err)) != 0) {
            f.invalid = true;
            status = base_status(exp, kd_exp_next_state(cur, &f), err);
            kd_ctrl_set_condition(status, json_object_get(exp, "status"), "Valid", false,
                                  "InvalidSearcher", err, gen);
            rc = put_status(c, exp, status, err);
            goto out;
        }
        if ((rc = kd_searcher_initial(s, &ops, err)) != 0)
            goto out;
        state =
            json_pack("{s:i,s:I,s:s,s:b,s:b,s:s,s:[]}", "version", 1, "seed", (json_int_t)seed,
                      "unit", kd_searcher_unit(s), "done", 0, "failure", 0, "reason", "", "trials");
        json_t *first = json_array(); /* the first trials' create and validate_after */
        json_t *ix = state_index(state);
        apply_ops(state, ix, &ops, first);
        json_decref(ix);
        json_object_set_new(state, "snapshot", kd_searcher_snapshot(s));
        rc = write_state(c, exp, NULL, state, &newcm, err);
        if (rc == KD_EEXIST)
            rc = KD_ECONFLICT; /* another writer got there first: start over from its state */
        if (rc == 0 && kd_ctrl_api_on(c) && json_array_size(first) > 0)
            kd_ctrl_wire_decisions(c, exp, cfg, first); /* persisted: record them too */
        json_decref(first);
        if (rc != 0)
            goto out;
        KD_INFO("searcher started", "experiment=%s method=%s seed=%" PRIu64, kd_logq(key),
                kd_searcher_method(s), seed);
        json_decref(cm);
        cm = newcm;
        newcm = NULL;
    } else if (rc != 0) {
        goto out;
    } else if ((rc = kd_searcher_restore(json_object_get(state, "snapshot"), &s, err)) != 0) {
        goto out;
    }
    const char *unit = json_string_value(json_object_get(state, "unit")) ?: "batches";

    /* Trial outcomes → events → new operations, persisted before they are acted upon. */
    bool stopping = f.canceled || cur == KD_EXP_STOPPING_CANCELED || cur == KD_EXP_STOPPING_ERROR;
    json_t *decisions = json_array();
    int n = feed_events(s, state, exp, &trials, stopping, kd_ctrl_api_on(c), decisions);
    if (n > 0) {
        json_object_set_new(state, "snapshot", kd_searcher_snapshot(s));
        if ((rc = write_state(c, exp, cm, state, &newcm, err)) != 0) {
            json_decref(decisions);
            goto out; /* KD_ECONFLICT: requeued, and the next pass starts from the stored state */
        }
        json_decref(cm);
        cm = newcm;
        newcm = NULL;
        /* Persisted: record the decisions (best effort; the searcher state is the truth). */
        if (kd_ctrl_api_on(c) && json_array_size(decisions) > 0)
            kd_ctrl_wire_decisions(c, exp, cfg, decisions);
    }
    json_decref(decisions);
    view_keep_state(&trials, cm, state); /* what cm holds: nothing below changes it */

    /* The Trials the state asks for, and the difference on existing ones. */
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(state, "trials"), i, st)
    {
        char tname[300];
        trial_name(name, json_integer_value(json_object_get(st, "index")), tname, sizeof(tname));
        if (stopping && find_trial(&trials, tname) == NULL)
            continue; /* nothing new starts once the experiment stops */
        ensure_trial(c, exp, cfg, st, unit, &trials, writes);
    }
    if ((rc = write_trials(c, writes, err)) != 0)
        goto out;

    /* State and status. Trials created just now are live too. */
    json_t *counts = trial_counts(&trials, &live);
    size_t want_trials = stopping ? trials.n : json_array_size(json_object_get(state, "trials"));
    if (want_trials > trials.n)
        live += (int)(want_trials - trials.n);
    f.live_trials = live;
    f.searcher_done = json_is_true(json_object_get(state, "done"));
    f.searcher_failure = json_is_true(json_object_get(state, "failure"));
    enum kd_exp_state next = kd_exp_next_state(cur, &f);
    const char *msg = "";
    if (next == KD_EXP_ERROR || next == KD_EXP_STOPPING_ERROR || next == KD_EXP_COMPLETED ||
        next == KD_EXP_STOPPING_COMPLETED)
        msg = json_string_value(json_object_get(state, "reason")) ?: "";
    else if (next == KD_EXP_CANCELED || next == KD_EXP_STOPPING_CANCELED)
        msg = "canceled by the user";
    else if (next == KD_EXP_PAUSED)
        msg = "paused by the user";
    status = base_status(exp, next, msg);
    json_object_set_new(status, "trials", counts);
    json_t *best = best_validation(&trials, cfg);
    if (best != NULL)
        json_object_set_new(status, "bestValidation", best);
    double progress = kd_searcher_progress(s);
    if (next == KD_EXP_COMPLETED)
        progress = 1.0;
    char pct[16];
    snprintf(pct, sizeof(pct), "%d%%", (int)floor(progress * 100.0 + 1e-9));
    json_object_set_new(status, "progress", kd_ctrl_number(floor(progress * 1e6) / 1e6));
    json_object_set_new(status, "progressPercent", json_string(pct));
    kd_ctrl_set_condition(status, json_object_get(exp, "status"), "Valid", true, "ConfigValid",
                          "the configuration passed validation", gen);
    if (next != cur)
        KD_INFO("experiment state", "experiment=%s from=%s to=%s", kd_logq(key),
                kd_exp_state_name(cur), kd_exp_state_name(next));
    if ((rc = put_status(c, exp, status, err)) != 0)
        goto out;
    if (!kd_exp_state_terminal(next))
        *requeue_after_ms = c->o.resync_ms;
    else
        kd_ctrl_kick(c);
    trials.drop = kd_exp_state_terminal(next);
    if (kd_ctrl_api_on(c))
        end_records(c, exp, cfg, &trials, kd_exp_state_name(next), requeue_after_ms);
out:
    kd_ctrl_reconcile_end("experiment", key, rc, err, requeue_after_ms);
    kd_search_ops_free(&ops);
    kd_searcher_free(s);
    json_decref(exp);
    json_decref(cfg);
    view_free(&trials);
    json_decref(cm);
    json_decref(newcm);
    json_decref(state);
    json_decref(status);
    json_decref(writes);
    return rc;
}
