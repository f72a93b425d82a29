/*
 * Checkpoint GC and the end-of-life records of the store, run by the
 * experiment reconciler. The registry in PostgreSQL is the list of
 * checkpoints; lib/storage's policy engine decides which to keep; files
 * go first, then the registry row (with its event). Why repeating is
 * harmless: a checkpoint is only deleted when its trial has ended, and
 * for an ended trial the plan never takes a deletion back (its best and
 * latest are fixed; newer checkpoints elsewhere only push it further out
 * of the experiment's best), so a rerun deletes the same files (absent
 * ones are not an error) and marks what was left unmarked.
 */
#include "gc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/str.h"
#include "ctrl.h"
#include "k8s/config.h"
#include "states.h"
#include "storage/checkpoint.h"
#include "storage/gc.h"
#include "storage/storage.h"
#include "store/store.h"

#define SECRETS KD_K8S_GVR("", "v1", "secrets")
#define FLUSH_MS 5000 /* metrics still queued must reach the database before a plan */

/* FNV-1a of a string, for the memo's signature. */
static uint64_t fnv(const char *s, uint64_t h)
{
    for (; s != NULL && *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* The states the run depends on: the experiment's and every trial's (order-independent). */
static json_int_t signature(const struct kd_gc_trial *trials, size_t n, const char *state)
{
    uint64_t sum = fnv(state, 1469598103934665603ULL);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = fnv(trials[i].uid, 1469598103934665603ULL);
        sum += fnv(trials[i].state ?: "QUEUED", h);
    }
    return (json_int_t)(sum & 0x7fffffffffffffffULL);
}

static bool memo_is(struct kd_ctrl *c, const char *uid, json_int_t sig)
{
    pthread_mutex_lock(&c->mu);
    json_t *v = c->gcmemo != NULL ? json_object_get(c->gcmemo, uid) : NULL;
    bool same = v != NULL && json_integer_value(v) == sig;
    pthread_mutex_unlock(&c->mu);
    return same;
}

static void memo_set(struct kd_ctrl *c, const char *uid, json_int_t sig)
{
    pthread_mutex_lock(&c->mu);
    if (c->gcmemo == NULL)
        c->gcmemo = json_object();
    json_object_set_new(c->gcmemo, uid, json_integer(sig));
    pthread_mutex_unlock(&c->mu);
}

void kd_ctrl_gc_unprotected(void *ud, const char *ns, const char *name, const char *uid)
{
    struct kd_ctrl *c = ud;
    char key[600];
    pthread_mutex_lock(&c->mu);
    if (c->gcmemo != NULL)
        (void)json_object_del(c->gcmemo, uid);
    if (c->endmemo != NULL)
        (void)json_object_del(c->endmemo, uid);
    pthread_mutex_unlock(&c->mu);
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    if (c->expq != NULL)
        kd_k8s_queue_add(c->expq, key);
    KD_INFO("checkpoint GC due again: a model version no longer protects a checkpoint",
            "experiment=%s", kd_logq(key));
}

void kd_ctrl_gc_forget(struct kd_ctrl *c)
{
    pthread_mutex_lock(&c->mu);
    json_decref(c->gcmemo);
    c->gcmemo = NULL;
    pthread_mutex_unlock(&c->mu);
}

/* Trial states into the store (rows the API or wire.c created); returns the first error. */
static int sync_trial_states(struct kd_ctrl *c, const json_t *rows,
                             const struct kd_gc_trial *trials, size_t n, char *err)
{
    int rc = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        const struct kd_gc_trial *t =
            kd_gc_trial_find(trials, n, json_string_value(json_object_get(row, "uid")));
        const char *want = t != NULL ? t->state : NULL;
        const char *have = json_string_value(json_object_get(row, "state")) ?: "";
        if (want == NULL || want[0] == '\0' || strcmp(want, have) == 0)
            continue;
        int r = kd_store_trial_set_state(
            c->store, (int64_t)json_integer_value(json_object_get(row, "id")), want, err);
        if (r != 0 && rc == 0)
            rc = r;
    }
    return rc;
}

/*
 * The S3 credentials of checkpoint_storage.credentials_secret (a Secret in
 * the experiment's namespace), written into a private directory that
 * kd_storage_open reads them from: the same files a worker pod gets from
 * the mounted Secret. The caller removes the directory right after the
 * open. Values are never logged (the loader registers them as secrets).
 */
static int secret_creds(struct kd_ctrl *c, const char *ns, struct kd_storage_config *sc, char *dir,
                        size_t len, char *err)
{
    static const char *const keys[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                       "AWS_SESSION_TOKEN", "credentials", NULL};
    int rc = 0;
    json_t *sec = NULL;
    dir[0] = '\0';
    rc = kd_k8s_get(c->client, &SECRETS, ns, sc->credentials_secret, &sec, NULL, err);
    if (rc != 0) {
        kd_seterr(err, rc, "checkpoint_storage.credentials_secret: secret %s/%s: %s", ns,
                  sc->credentials_secret, kd_err_name(rc));
        goto out;
    }
    snprintf(dir, len, "%s/kdet-creds-XXXXXX", getenv("TMPDIR") ?: "/tmp");
    if (mkdtemp(dir) == NULL) {
        rc = kd_seterr(err, -errno, "cannot make a directory for the storage credentials: %s",
                       strerror(errno));
        dir[0] = '\0';
        goto out;
    }
    for (int i = 0; keys[i] != NULL && rc == 0; i++) {
        const char *b64 = kd_ctrl_str(sec, "data", keys[i], NULL);
        char *val = NULL, path[KD_STORAGE_PATHLEN + 64];
        size_t n = 0;
        if (b64 == NULL)
            continue;
        if (kd_k8s_base64_decode(b64, &val, &n) != 0) {
            rc = kd_seterr(err, KD_EINVALID,
                           "checkpoint_storage.credentials_secret: secret %s/%s: data.%s is not "
                           "base64",
                           ns, sc->credentials_secret, keys[i]);
            break;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, keys[i]);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, val, n) != (ssize_t)n)
            rc = kd_seterr(err, KD_EIO, "cannot write a file of the storage credentials");
        if (fd >= 0)
            close(fd);
        explicit_bzero(val, n);
        free(val);
    }
    kd_strlcpy(sc->credentials_dir, dir, sizeof(sc->credentials_dir));
out:
    json_decref(sec);
    return rc;
}

/* Open checkpoint storage cs of namespace ns (sc gets its configuration), with the keys of its
 * credentials_secret when it names one. */
static int open_cs(struct kd_ctrl *c, const char *ns, const json_t *cs,
                   struct kd_storage_config *sc, struct kd_storage **st, char *err)
{
    int rc = 0;
    char dir[KD_STORAGE_PATHLEN] = "";
    *st = NULL;
    kd_storage_config_init(sc);
    if ((rc = kd_storage_config_from_json(cs, sc, err)) != 0)
        goto out;
    if (sc->type == KD_STORAGE_S3 && sc->credentials_secret[0] != '\0' &&
        sc->credentials_dir[0] == '\0' &&
        (rc = secret_creds(c, ns, sc, dir, sizeof(dir), err)) != 0)
        goto out;
    rc = kd_storage_open(sc, st, err);
out:
    if (dir[0] != '\0')
        (void)kd_rm_tree(dir);
    return rc;
}

/* Open the experiment's checkpoint storage. KD_ENOTFOUND: it has none configured. */
static int open_storage(struct kd_ctrl *c, const json_t *exp, const json_t *cfg,
                        struct kd_storage_config *sc, struct kd_storage **st, char *err)
{
    const json_t *cs = json_object_get(cfg, "checkpoint_storage");
    *st = NULL;
    kd_storage_config_init(sc);
    if (!json_is_object(cs))
        return KD_ENOTFOUND;
    return open_cs(c, kd_k8s_meta_str(exp, "namespace"), cs, sc, st, err);
}

int kd_ctrl_storage_open(void *ud, const char *ns, const json_t *cs, struct kd_storage **out,
                         char *err)
{
    struct kd_storage_config sc;
    return open_cs(ud, ns, cs, &sc, out, err);
}

/* The searcher metric of trial `tid` at each validation step: {"step": value}. */
static int validations(struct kd_ctrl *c, int64_t tid, const char *metric, json_t **out, char *err)
{
    json_t *series = NULL;
    *out = json_object();
    int rc = kd_store_metrics_series(c->store, tid, KD_METRIC_VALIDATION, 0, &series, err);
    size_t i;
    json_t *row;
    json_array_foreach(series, i, row)
    {
        const json_t *v = json_object_get(json_object_get(row, "metrics"), metric);
        char k[24];
        snprintf(k, sizeof(k), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(row, "step")));
        if (json_is_number(v))
            json_object_set_new(*out, k, json_real(json_number_value(v)));
    }
    json_decref(series);
    return rc;
}

/* A store row of a trial: its id and the Trial's uid. */
struct rowref {
    json_int_t id;
    const char *uid;
};

static int by_id(const void *a, const void *b)
{
    json_int_t x = ((const struct rowref *)a)->id, y = ((const struct rowref *)b)->id;
    return (x > y) - (x < y);
}

/*
 * Drop from ckpts (in place) every row whose uuid fails kd_ckpt_check_uuid, marking it DELETED
 * in the registry with a checkpoint_gc event that says its files were not touched; the store
 * records that once (a later run finds the row no longer ACTIVE), and the warning is logged by
 * the run that recorded it. A row that cannot be marked now (the database is away) is still
 * left out of this run's plan and tried again on the next. Returns the rows left.
 */
static size_t retire_invalid(struct kd_ctrl *c, const char *name, json_t *ckpts, char *err)
{
    size_t i = 0;
    while (i < json_array_size(ckpts)) {
        const json_t *ck = json_array_get(ckpts, i);
        const char *uuid = json_string_value(json_object_get(ck, "uuid")) ?: "";
        char why[KD_ERRLEN];
        bool marked = false;
        if (kd_ckpt_check_uuid(uuid, why) == 0) {
            i++;
            continue;
        }
        json_t *d = json_pack("{s:b,s:b,s:s}", "invalid_uuid", 1, "files_deleted", 0, "error", why);
        int rc = kd_store_checkpoint_gc(c->store, uuid,
                                        "invalid checkpoint uuid: no storage path may be built "
                                        "from it, so its files were left alone and the record "
                                        "retired",
                                        d, &marked, err);
        json_decref(d);
        if (rc != 0)
            KD_WARN("checkpoint GC: cannot retire a checkpoint with an invalid uuid",
                    "experiment=%s uuid=%s err=%s", kd_logq(name), kd_logq(uuid), kd_logq(err));
        else if (marked)
            KD_WARN("checkpoint GC: skipped a checkpoint with an invalid uuid, record retired",
                    "experiment=%s uuid=%s trial_id=%" JSON_INTEGER_FORMAT " err=%s", kd_logq(name),
                    kd_logq(uuid), json_integer_value(json_object_get(ck, "trial_id")),
                    kd_logq(why));
        if (json_array_remove(ckpts, i) != 0)
            kd_oom(64);
    }
    return json_array_size(ckpts);
}

/* Plan and apply GC over the experiment's ACTIVE checkpoints. */
static int collect(struct kd_ctrl *c, const json_t *exp, const json_t *cfg,
                   const struct kd_gc_trial *trials, size_t ntrials, const json_t *rows,
                   int64_t eid, char *err)
{
    int rc = 0;
    size_t nparents = 0, nrows = json_array_size(rows);
    const char **parents = NULL;
    struct rowref *refs = NULL;
    json_t *ckpts = NULL, *vals = json_object();
    struct kd_gc_ckpt *in = NULL;
    unsigned *keep = NULL;
    char **tids = NULL;
    struct kd_storage *st = NULL;
    struct kd_storage_config sc;
    size_t n = 0, ndel = 0, deleted = 0;
    const char *name = kd_k8s_meta_str(exp, "name");
    const char *metric = kd_ctrl_str(cfg, "searcher", "metric", NULL) ?: "";
    const json_t *sib = json_object_get(json_object_get(cfg, "searcher"), "smaller_is_better");

    if ((rc = kd_store_checkpoints_list(c->store, eid, 0, false, &ckpts, err)) != 0)
        goto out;
    n = json_array_size(ckpts);
    if (n == 0)
        goto out;
    /* Every validation the workers reported must be in the database, or a checkpoint's metric
     * would look missing (and the checkpoint worse than it is). */
    if ((rc = kd_store_metrics_flush(c->store, FLUSH_MS)) != 0) {
        kd_seterr(err, rc, "checkpoint GC: metrics are not all written yet");
        goto out;
    }
    /* A row whose uuid no storage path may be built from (registered before the API checked
     * ids, or written into the store by hand) is retired on its own, once, and left out of the
     * plan, so that it neither stops GC for the others nor keeps the experiment from ending. */
    n = retire_invalid(c, name, ckpts, err);
    if (n == 0)
        goto out;
    in = kd_xcalloc(n, sizeof(*in));
    keep = kd_xcalloc(n, sizeof(*keep));
    tids = kd_xcalloc(n, sizeof(*tids));
    parents = kd_gc_parent_starts(trials, ntrials, &nparents);
    refs = kd_xcalloc(nrows + 1, sizeof(*refs));
    for (size_t i = 0; i < nrows; i++) {
        const json_t *row = json_array_get(rows, i);
        refs[i].id = json_integer_value(json_object_get(row, "id"));
        refs[i].uid = json_string_value(json_object_get(row, "uid"));
    }
    qsort(refs, nrows, sizeof(*refs), by_id);
    for (size_t i = 0; i < n; i++) {
        const json_t *ck = json_array_get(ckpts, i);
        json_int_t tid = json_integer_value(json_object_get(ck, "trial_id"));
        char key[24];
        snprintf(key, sizeof(key), "%" JSON_INTEGER_FORMAT, tid);
        if (json_object_get(vals, key) == NULL) {
            json_t *v = NULL;
            if ((rc = validations(c, (int64_t)tid, metric, &v, err)) != 0) {
                json_decref(v);
                goto out;
            }
            json_object_set_new(vals, key, v);
        }
        /* The Trial behind the row: a trial whose resource is not seen is treated as live. */
        struct rowref rk = {.id = tid}, *ref = NULL;
        if (nrows > 0)
            ref = bsearch(&rk, refs, nrows, sizeof(*refs), by_id);
        const struct kd_gc_trial *t =
            kd_gc_trial_find(trials, ntrials, ref != NULL ? ref->uid : NULL);
        char step[24];
        snprintf(step, sizeof(step), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(ck, "steps_completed")));
        const json_t *m = json_object_get(json_object_get(vals, key), step);
        tids[i] = kd_xstrdup(key);
        in[i].uuid = json_string_value(json_object_get(ck, "uuid"));
        in[i].trial_id = tids[i];
        in[i].steps_completed = json_integer_value(json_object_get(ck, "steps_completed"));
        in[i].has_metric = m != NULL;
        in[i].metric = m != NULL ? json_number_value(m) : NAN;
        in[i].trial_active = !kd_gc_trial_ended(t);
        /* A live child's start, or a model version (docs/models.md): kept whatever the policy. */
        in[i].protected_ = (t != NULL && kd_gc_parent_start(parents, nparents, t, in[i].uuid)) ||
                           json_is_true(json_object_get(ck, "protected"));
    }
    struct kd_gc_policy p;
    kd_gc_policy_default(&p);
    p.smaller_is_better = !json_is_false(sib);
    kd_storage_config_init(&sc);
    if ((rc = kd_storage_config_from_json(json_object_get(cfg, "checkpoint_storage"), &sc, err)) !=
        0)
        goto out;
    if (sc.save_experiment_best >= 0)
        p.save_experiment_best = sc.save_experiment_best;
    if (sc.save_trial_best >= 0)
        p.save_trial_best = sc.save_trial_best;
    if (sc.save_trial_latest >= 0)
        p.save_trial_latest = sc.save_trial_latest;
    if ((rc = kd_gc_plan(&p, in, n, NULL, NULL, keep, err)) != 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        ndel += keep[i] == 0 && !in[i].trial_active;
    if (ndel == 0) {
        KD_INFO("checkpoint GC", "experiment=%s checkpoints=%zu deleted=0 kept=%zu", kd_logq(name),
                n, n);
        goto out;
    }
    rc = open_storage(c, exp, cfg, &sc, &st, err);
    if (rc == KD_ENOTFOUND) {
        /* The workers stored them somewhere of their own: not the controller's to delete. */
        KD_INFO("checkpoint GC skipped: the experiment has no checkpoint_storage",
                "experiment=%s checkpoints=%zu", kd_logq(name), n);
        rc = 0;
        goto out;
    }
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        char why[160];
        bool marked = false;
        bool prot = false;
        if (keep[i] != 0 || in[i].trial_active)
            continue;
        /* Registered as a model version since the plan was read: keep it. (A registration
         * between this look and the deletion below can still lose; the window is one query.) */
        if ((rc = kd_store_checkpoint_protected(c->store, in[i].uuid, &prot, err)) != 0)
            goto out;
        if (prot) {
            KD_INFO("checkpoint kept: a model version was registered from it",
                    "experiment=%s uuid=%s", kd_logq(name), kd_logq(in[i].uuid));
            continue;
        }
        if ((rc = kd_ckpt_delete(st, in[i].uuid, err)) != 0)
            goto out;
        snprintf(why, sizeof(why),
                 "not kept by the policy (save_experiment_best=%d save_trial_best=%d "
                 "save_trial_latest=%d)",
                 p.save_experiment_best, p.save_trial_best, p.save_trial_latest);
        json_t *d = json_pack("{s:I,s:s,s:i,s:i,s:i}", "steps_completed",
                              (json_int_t)in[i].steps_completed, "storage", kd_storage_location(st),
                              "save_experiment_best", p.save_experiment_best, "save_trial_best",
                              p.save_trial_best, "save_trial_latest", p.save_trial_latest);
        if (in[i].has_metric)
            json_object_set_new(d, "metric", json_real(in[i].metric));
        rc = kd_store_checkpoint_gc(c->store, in[i].uuid, why, d, &marked, err);
        json_decref(d);
        if (rc != 0)
            goto out;
        deleted++;
        KD_INFO("checkpoint deleted", "experiment=%s trial_id=%s uuid=%s steps=%" PRId64,
                kd_logq(name), in[i].trial_id, kd_logq(in[i].uuid), in[i].steps_completed);
    }
    KD_INFO("checkpoint GC", "experiment=%s checkpoints=%zu deleted=%zu kept=%zu", kd_logq(name), n,
            deleted, n - deleted);
out:
    kd_storage_close(st);
    for (size_t i = 0; tids != NULL && i < n; i++)
        free(tids[i]);
    free(tids);
    free(parents);
    free(refs);
    free(in);
    free(keep);
    json_decref(vals);
    json_decref(ckpts);
    return rc;
}

int kd_ctrl_gc_experiment(struct kd_ctrl *c, const json_t *exp, const json_t *cfg,
                          struct kd_gc_trial *trials, size_t n, const char *state, char *err)
{
    int rc = 0;
    int64_t eid = 0;
    json_t *rows = NULL, *erow = NULL;
    const char *uid = kd_k8s_meta_str(exp, "uid");
    if (c->store == NULL || !kd_ctrl_api_on(c) || uid == NULL)
        goto out;
    json_int_t sig = signature(trials, n, state);
    if (memo_is(c, uid, sig))
        goto out;
    if (n > 1)
        kd_gc_trials_sort(trials, n);
    rc = kd_store_experiment_lookup(c->store, uid, &eid, err);
    if (rc == KD_ENOTFOUND) {
        rc = 0; /* no trial ever started with the store: nothing recorded, nothing to collect */
        memo_set(c, uid, sig);
        goto out;
    }
    if (rc != 0)
        goto out;
    if ((rc = kd_store_trials_list(c->store, eid, &rows, err)) != 0 ||
        (rc = sync_trial_states(c, rows, trials, n, err)) != 0)
        goto out;
    /* GC only when there is something that may be collected: an ended trial, or the end. */
    enum kd_exp_state es;
    bool due = kd_exp_state_parse(state, &es) && kd_exp_state_terminal(es);
    for (size_t i = 0; i < n && !due; i++)
        due = kd_gc_trial_ended(&trials[i]);
    if (due && (rc = collect(c, exp, cfg, trials, n, rows, eid, err)) != 0)
        goto out;
    /* The experiment's own state last: a terminal one in the store says GC is done. */
    if ((rc = kd_store_experiment_get(c->store, eid, &erow, err)) != 0)
        goto out;
    if (state != NULL && state[0] != '\0' &&
        strcmp(json_string_value(json_object_get(erow, "state")) ?: "", state) != 0 &&
        (rc = kd_store_experiment_set_state(c->store, eid, state, err)) != 0)
        goto out;
    memo_set(c, uid, sig);
out:
    json_decref(rows);
    json_decref(erow);
    return rc;
}
