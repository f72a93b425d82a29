/*
 * The controller's store and API wiring. The token key comes from a file
 * (--token-key-file) or from the Secret kdet-controller-key in the
 * controller's namespace, which the controller creates with 32 random
 * bytes (as 64 hex characters) the first time it starts with a database:
 * trial tokens then survive controller restarts. The trial token Secrets
 * are made here because only this file holds the key.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "api/api.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "ctrl.h"
#include "events.h"
#include "gc.h"
#include "k8s/config.h"
#include "sshkeys.h"
#include "states.h"
#include "wire.h"

#define SECRETS KD_K8S_GVR("", "v1", "secrets")

static const char *ctrl_namespace(struct kd_ctrl *c)
{
    const char *pns = getenv("POD_NAMESPACE");
    return c->o.key_ns != NULL     ? c->o.key_ns
           : pns != NULL && pns[0] ? pns
                                   : kd_k8s_client_namespace(c->client);
}

/* The key from the Secret kdet-controller-key; KD_ENOTFOUND when absent. */
static int key_from_secret(struct kd_ctrl *c, const char *ns, char *err)
{
    int rc = 0;
    json_t *sec = NULL;
    char *dec = NULL;
    size_t declen = 0;
    if ((rc = kd_k8s_get(c->client, &SECRETS, ns, KD_CTRL_KEY_SECRET, &sec, NULL, err)) != 0)
        goto out;
    const char *b64 = kd_ctrl_str(sec, "data", KD_CTRL_KEY_DATA, NULL);
    if (b64 == NULL || kd_k8s_base64_decode(b64, &dec, &declen) != 0) {
        rc = kd_seterr(err, KD_EINVALID, "secret %s/%s: data.%s missing or not base64", ns,
                       KD_CTRL_KEY_SECRET, KD_CTRL_KEY_DATA);
        goto out;
    }
    if (declen < KD_API_KEY_MIN || declen > KD_CTRL_KEY_MAX) {
        rc = kd_seterr(err, KD_EINVALID, "secret %s/%s: data.%s must hold %d to %d bytes", ns,
                       KD_CTRL_KEY_SECRET, KD_CTRL_KEY_DATA, KD_API_KEY_MIN, KD_CTRL_KEY_MAX);
        goto out;
    }
    c->key = (unsigned char *)dec;
    c->keylen = declen;
    dec = NULL;
out:
    free(dec);
    json_decref(sec);
    return rc;
}

/* Create kdet-controller-key with a fresh random key. KD_EEXIST when another replica won. */
static int key_create(struct kd_ctrl *c, const char *ns, char *err)
{
    int rc = 0;
    unsigned char raw[32];
    char hex[2 * sizeof(raw) + 1];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t r = getrandom(raw + got, sizeof(raw) - got, 0);
        if (r < 0 && errno != EINTR) {
            rc = kd_seterr(err, -errno, "getrandom: %s", strerror(errno));
            goto out;
        }
        got += r > 0 ? (size_t)r : 0;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    json_t *s = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s}},s:s,s:{s:s}}", "apiVersion", "v1", "kind",
                          "Secret", "metadata", "name", KD_CTRL_KEY_SECRET, "namespace", ns,
                          "labels", "app.kubernetes.io/name", "kdet-controller", "type", "Opaque",
                          "stringData", KD_CTRL_KEY_DATA, hex);
    rc = kd_k8s_create(c->client, &SECRETS, ns, s, NULL, NULL, err);
    json_decref(s);
    if (rc == 0) {
        c->keylen = 2 * sizeof(raw);
        c->key = (unsigned char *)kd_xstrdup(hex);
        KD_INFO("token key created", "secret=%s/%s", kd_logq(ns), KD_CTRL_KEY_SECRET);
    }
out:
    explicit_bzero(raw, sizeof(raw));
    explicit_bzero(hex, sizeof(hex));
    return rc;
}

static int load_key(struct kd_ctrl *c, char *err)
{
    int rc = 0;
    if (c->o.key_file != NULL) {
        char *buf = NULL;
        size_t n = 0;
        if ((rc = kd_ctrl_read_small(c->o.key_file, KD_CTRL_KEY_MAX, &buf, &n, err)) == 0 &&
            n < KD_API_KEY_MIN)
            rc = kd_seterr(err, KD_EINVALID, "%s: a token key needs at least %d bytes",
                           c->o.key_file, KD_API_KEY_MIN);
        if (rc == 0) {
            c->key = (unsigned char *)buf;
            c->keylen = n;
            buf = NULL;
        }
        free(buf);
        goto out;
    }
    const char *ns = ctrl_namespace(c);
    for (int attempt = 0; attempt < 3; attempt++) {
        rc = key_from_secret(c, ns, err);
        if (rc == KD_ENOTFOUND)
            rc = key_create(c, ns, err);
        if (rc != KD_EEXIST)
            break;
    }
out:
    return rc;
}

static int load_user_token(struct kd_ctrl *c, char *err)
{
    int rc = 0;
    const char *env = getenv("KDET_USER_TOKEN");
    if (c->o.user_token_file != NULL) {
        size_t n = 0;
        rc = kd_ctrl_read_small(c->o.user_token_file, 4096, &c->user_token, &n, err);
        if (rc == 0 && n == 0)
            rc = kd_seterr(err, KD_EINVAL, "%s: empty user token", c->o.user_token_file);
    } else if (env != NULL && env[0] != '\0') {
        c->user_token = kd_xstrdup(env);
    }
    if (rc == 0 && c->user_token != NULL)
        kd_log_add_secret(c->user_token);
    return rc;
}

/* The API's certificate, key and the CA trials trust, from --tls-*-file (64 KiB each at most). */
static int load_tls(struct kd_ctrl *c, char **cert, char **key, char *err)
{
    int rc = 0;
    size_t n = 0;
    *cert = *key = NULL;
    if (c->o.tls_cert_file == NULL)
        goto out;
    if ((rc = kd_ctrl_read_small(c->o.tls_cert_file, 64 * 1024, cert, &n, err)) != 0 ||
        (rc = kd_ctrl_read_small(c->o.tls_key_file, 64 * 1024, key, &n, err)) != 0 ||
        (rc = kd_ctrl_read_small(c->o.tls_ca_file != NULL ? c->o.tls_ca_file : c->o.tls_cert_file,
                                 64 * 1024, &c->tls_ca, &n, err)) != 0)
        goto out;
    if (strstr(*cert, "-----BEGIN CERTIFICATE-----") == NULL ||
        strstr(c->tls_ca, "-----BEGIN CERTIFICATE-----") == NULL ||
        strstr(*key, "PRIVATE KEY-----") == NULL)
        rc = kd_seterr(err, KD_EINVALID,
                       "--tls-cert-file, --tls-ca-file and --tls-key-file: PEM certificates and "
                       "a PEM private key are required");
out:
    return rc;
}

int kd_ctrl_wire_start(struct kd_ctrl *c, char *err)
{
    int rc = 0;
    char *cert = NULL, *key = NULL;
    if (c->o.database_url == NULL)
        goto out;
    if ((rc = load_key(c, err)) != 0 || (rc = load_user_token(c, err)) != 0 ||
        (rc = load_tls(c, &cert, &key, err)) != 0)
        goto out;
    struct kd_store_opts so = {.conninfo = c->o.database_url,
                               .spool_dir = c->o.spool_dir,
                               .db_seconds = c->m.db_seconds,
                               .rows_written = c->m.rows_written};
    for (int attempt = 0;; attempt++) {
        rc = kd_store_open(&so, &c->store, err);
        if (rc != KD_ECONNECT || attempt >= 30 || atomic_load(&c->stop))
            break;
        KD_WARN("database not reachable yet; retrying", "attempt=%d detail=%s", attempt + 1,
                kd_logq(err));
        usleep(1000 * 1000);
    }
    if (rc != 0)
        goto out;
    struct kd_api_opts ao = {
        .store = c->store,
        .k8s = c->client,
        .ns = c->o.ns,
        .listen_addr = c->o.api_addr,
        .port = c->o.api_port,
        .token_key = c->key,
        .token_key_len = c->keylen,
        .user_token = c->user_token,
        .tls_cert_pem = cert,
        .tls_key_pem = key,
        .metrics = c->metrics,
        .log_max_bytes = c->o.log_max_bytes,
        .slot_type = c->o.slot_type == KD_SCHED_SLOT_GPU   ? "gpu"
                     : c->o.slot_type == KD_SCHED_SLOT_CPU ? "cpu"
                                                           : "auto",
        .cpu_per_slot_milli = c->o.pod.cpu_per_slot_milli,
        .memory_per_slot = c->o.pod.memory_per_slot,
        .max_slots_per_pod = c->o.max_slots_per_pod,
        .tasks = c->tasks != NULL,
        .authz = c->o.authz_kubernetes ? KD_API_AUTHZ_KUBERNETES : KD_API_AUTHZ_NAMESPACES,
        .storage_of = c->storage_of,
        .storage_ud = c,
        .storage_open = kd_ctrl_storage_open,
        .storage_open_ud = c,
        .unprotected = kd_ctrl_gc_unprotected,
        .unprotected_ud = c,
    };
    if ((rc = kd_api_start(&ao, &c->api, err)) != 0)
        goto out;
    KD_INFO("API serving", "listen=%s:%d scheme=%s bootstrap_admin=%s authz=%s",
            c->o.api_addr != NULL ? c->o.api_addr : "127.0.0.1", kd_api_port(c->api),
            cert != NULL ? "https" : "http", c->user_token != NULL ? "on" : "off",
            c->o.authz_kubernetes ? "kubernetes" : "namespaces");
out:
    if (key != NULL)
        explicit_bzero(key, strlen(key));
    free(key);
    free(cert);
    return rc;
}

void kd_ctrl_wire_stop(struct kd_ctrl *c)
{
    kd_ctrl_gc_forget(c);
    kd_api_stop(c->api);
    c->api = NULL;
    kd_store_close(c->store);
    c->store = NULL;
    if (c->key != NULL)
        explicit_bzero(c->key, c->keylen);
    free(c->key);
    c->key = NULL;
    c->keylen = 0;
    free(c->user_token);
    c->user_token = NULL;
    free(c->tls_ca);
    c->tls_ca = NULL;
}

int kd_ctrl_trial_secret(struct kd_ctrl *c, const json_t *trial, char *err)
{
    int rc = 0;
    char tok[KD_API_TOKEN_LEN + 8], name[300];
    const char *ns = kd_k8s_meta_str(trial, "namespace"), *tn = kd_k8s_meta_str(trial, "name"),
               *uid = kd_k8s_meta_str(trial, "uid");
    json_t *s = NULL;
    if (snprintf(name, sizeof(name), "%s%s", tn, KD_CTRL_TOKEN_SUFFIX) >= 254) {
        rc = kd_seterr(err, KD_ETOOBIG, "trial %s: token Secret name too long", tn);
        goto out;
    }
    if ((rc = kd_api_trial_token(c->key, c->keylen, ns, tn, uid, tok, sizeof(tok))) != 0) {
        kd_seterr(err, rc, "trial %s: cannot derive its token", tn);
        goto out;
    }
    s = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s},s:[{s:s,s:s,s:s,s:s,s:b,s:b}]},s:s,s:{s:s,s:s?}}",
                  "apiVersion", "v1", "kind", "Secret", "metadata", "name", name, "namespace", ns,
                  "labels", KD_POD_LABEL_TRIAL, tn, "ownerReferences", "apiVersion",
                  "kdet.io/v1alpha1", "kind", "Trial", "name", tn, "uid", uid, "controller", 1,
                  "blockOwnerDeletion", 1, "type", "Opaque", "stringData", "token", tok, "ca.crt",
                  c->tls_ca);
    rc = kd_k8s_create(c->client, &SECRETS, ns, s, NULL, NULL, err);
    if (rc == KD_EEXIST)
        rc = 0;
out:
    explicit_bzero(tok, sizeof(tok));
    json_decref(s);
    return rc;
}

struct parent_find {
    const char *exp, *rid;
    char *latest;
    size_t len;
};

static int parent_match(json_t *t, void *ud)
{
    struct parent_find *f = ud;
    const char *u = kd_ctrl_str(t, "status", "latestCheckpoint", "uuid");
    if (strcmp(kd_ctrl_str(t, "spec", "experiment", NULL) ?: "", f->exp) == 0 &&
        strcmp(kd_ctrl_str(t, "spec", "requestId", NULL) ?: "", f->rid) == 0 && u != NULL)
        kd_strlcpy(f->latest, u, f->len);
    return 0;
}

/* The latest checkpoint of the trial with request id `rid` in the same experiment: a walk over
 * the experiment's Trials (owner uid), decoding one at a time. */
static void parent_checkpoint(struct kd_ctrl *c, const json_t *exp, const json_t *trial,
                              const char *rid, char *latest, size_t len)
{
    struct parent_find f = {.exp = kd_ctrl_str(trial, "spec", "experiment", NULL) ?: "",
                            .rid = rid,
                            .latest = latest,
                            .len = len};
    const char *uid = kd_k8s_meta_str(exp, "uid");
    if (uid != NULL)
        (void)kd_k8s_cache_each_owner(kd_k8s_informer_cache(c->trials), uid, parent_match, &f);
    else
        (void)kd_k8s_cache_each(kd_k8s_informer_cache(c->trials),
                                kd_k8s_meta_str(trial, "namespace"), parent_match, &f);
}

int kd_ctrl_wire_rows(struct kd_ctrl *c, const json_t *exp, const json_t *trial, const json_t *cfg,
                      int64_t ids[2], char *err)
{
    int rc = 0;
    int64_t eid = 0, tid = 0;
    const json_t *spec = json_object_get(trial, "spec");
    json_int_t restarts =
        json_integer_value(json_object_get(json_object_get(trial, "status"), "restarts"));
    if (c->store == NULL)
        goto out;
    struct kd_store_experiment se = {
        .uid = kd_k8s_meta_str(exp, "uid"),
        .namespace_ = kd_k8s_meta_str(exp, "namespace"),
        .name = kd_k8s_meta_str(exp, "name"),
        .config = (json_t *)cfg,
        .state = "ACTIVE",
    };
    if ((rc = kd_store_experiment_upsert(c->store, &se, &eid, err)) != 0)
        goto out;
    struct kd_store_trial st = {
        .uid = kd_k8s_meta_str(trial, "uid"),
        .experiment_id = eid,
        .request_id = json_string_value(json_object_get(spec, "requestId")) ?: "",
        .hparams = json_object_get(spec, "hparams"),
        .seed = (int64_t)json_integer_value(json_object_get(spec, "seed")),
        .state = "ACTIVE",
    };
    if ((rc = kd_store_trial_upsert(c->store, &st, &tid, err)) != 0)
        goto out;
    if (ids != NULL) {
        ids[0] = eid;
        ids[1] = tid;
    }
    /* The Trial's count is the truth (the reconciler writes it when an attempt fails); the
     * attempt that starts after a restart brings it to the row. */
    if (restarts > 0 && restarts < INT_MAX)
        rc = kd_store_trial_set_restarts(c->store, tid, (int)restarts, err);
out:
    return rc;
}

int kd_ctrl_wire_trial(struct kd_ctrl *c, const json_t *exp, const json_t *trial, const json_t *cfg,
                       char *latest, size_t len, int64_t ids[2], char *err)
{
    int rc = 0;
    const json_t *spec = json_object_get(trial, "spec");
    const char *own = kd_ctrl_str(trial, "status", "latestCheckpoint", "uuid");
    const char *parent = json_string_value(json_object_get(spec, "parentRequestId"));
    latest[0] = '\0';
    if (own != NULL && own[0] != '\0')
        kd_strlcpy(latest, own, len);
    else if (parent != NULL && parent[0] != '\0')
        parent_checkpoint(c, exp, trial, parent, latest, len);
    if ((rc = kd_ctrl_trial_secret(c, trial, err)) != 0)
        goto out;
    rc = kd_ctrl_wire_rows(c, exp, trial, cfg, ids, err);
out:
    return rc;
}

int kd_ctrl_wire_deleted(struct kd_ctrl *c, const json_t *exp, char *err)
{
    int rc = 0;
    int64_t eid = 0;
    json_t *row = NULL;
    const char *uid = kd_k8s_meta_str(exp, "uid");
    if (c->store == NULL || uid == NULL)
        goto out;
    rc = kd_store_experiment_lookup(c->store, uid, &eid, err);
    if (rc == KD_ENOTFOUND) {
        rc = 0; /* no trial ever started with the store: no row */
        goto out;
    }
    if (rc != 0)
        goto out;
    /* Its trials' logs go with it, whatever its state (idempotent: a repeat finds none). */
    int64_t lines = 0;
    if ((rc = kd_store_logs_delete(c->store, eid, &lines, err)) != 0)
        goto out;
    if (lines > 0)
        KD_INFO("deleted experiment's trial logs removed", "experiment=%s/%s id=%lld lines=%lld",
                kd_logq(kd_k8s_meta_str(exp, "namespace")), kd_logq(kd_k8s_meta_str(exp, "name")),
                (long long)eid, (long long)lines);
    if ((rc = kd_store_experiment_get(c->store, eid, &row, err)) != 0)
        goto out;
    /* An ended experiment keeps its outcome (and ended_at); a live one ends here. */
    const char *have = json_string_value(json_object_get(row, "state")) ?: "";
    enum kd_exp_state es;
    if (strcmp(have, "DELETED") == 0 ||
        (kd_exp_state_parse(have, &es) && kd_exp_state_terminal(es)))
        goto out;
    if ((rc = kd_store_experiment_set_state(c->store, eid, "DELETED", err)) == 0)
        KD_INFO("experiment marked deleted in the store", "experiment=%s/%s id=%lld",
                kd_logq(kd_k8s_meta_str(exp, "namespace")), kd_logq(kd_k8s_meta_str(exp, "name")),
                (long long)eid);
out:
    json_decref(row);
    return rc;
}

void kd_ctrl_wire_decisions(struct kd_ctrl *c, const json_t *exp, const json_t *cfg,
                            const json_t *decisions)
{
    int rc = 0;
    int64_t eid = 0;
    char err[KD_ERRLEN] = "";
    const char *state = kd_ctrl_str(exp, "status", "state", NULL);
    struct kd_store_experiment se = {
        .uid = kd_k8s_meta_str(exp, "uid"),
        .namespace_ = kd_k8s_meta_str(exp, "namespace"),
        .name = kd_k8s_meta_str(exp, "name"),
        .config = (json_t *)cfg,
        .state = state != NULL && state[0] != '\0' ? state : "ACTIVE",
    };
    if ((rc = kd_store_experiment_upsert(c->store, &se, &eid, err)) != 0)
        goto out;
    size_t i;
    json_t *d;
    json_array_foreach(decisions, i, d)
    {
        char reason[512];
        const char *what = json_string_value(json_object_get(d, "decision")) ?: "";
        const char *rid = json_string_value(json_object_get(d, "request_id")) ?: "";
        const char *why = json_string_value(json_object_get(d, "reason"));
        if (why != NULL)
            snprintf(reason, sizeof(reason), "%s", why);
        else if (strcmp(what, "validate_after") == 0)
            snprintf(reason, sizeof(reason), "trial %s: train to %" PRId64, rid,
                     (int64_t)json_integer_value(json_object_get(d, "length")));
        else
            snprintf(reason, sizeof(reason), "trial %s: %s", rid, what);
        struct kd_store_event ev = {.experiment_id = eid,
                                    .kind = "searcher",
                                    .decision = what,
                                    .reason = reason,
                                    .details = (json_t *)d};
        if ((rc = kd_store_event_add(c->store, &ev, NULL, err)) != 0)
            goto out;
    }
out:
    if (rc != 0)
        KD_WARN("cannot record searcher decisions", "experiment=%s err=%s detail=%s",
                kd_logq(kd_k8s_meta_str(exp, "name")), kd_err_name(rc), kd_logq(err));
}

/* The uid of the Experiment a Trial belongs to: its controller owner, else the cached
 * Experiment its spec names. NULL when neither says. */
static const char *experiment_uid(struct kd_ctrl *c, const json_t *trial, char *buf, size_t len)
{
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(json_object_get(trial, "metadata"), "ownerReferences"), i, o)
    {
        const char *kind = json_string_value(json_object_get(o, "kind"));
        const char *uid = json_string_value(json_object_get(o, "uid"));
        if (kind != NULL && strcmp(kind, "Experiment") == 0 && uid != NULL) {
            kd_strlcpy(buf, uid, len);
            return buf;
        }
    }
    char key[600];
    json_t *exp = NULL;
    const char *uid = NULL;
    snprintf(key, sizeof(key), "%s/%s", kd_k8s_meta_str(trial, "namespace") ?: "",
             kd_ctrl_str(trial, "spec", "experiment", NULL) ?: "");
    if (c->exps != NULL && kd_k8s_cache_get(kd_k8s_informer_cache(c->exps), key, &exp) == 0 &&
        (uid = kd_k8s_meta_str(exp, "uid")) != NULL) {
        kd_strlcpy(buf, uid, len);
        uid = buf;
    }
    json_decref(exp);
    return uid;
}

void kd_ctrl_wire_trial_history(struct kd_ctrl *c, const json_t *trial, const json_t *old_status,
                                const json_t *new_status)
{
    struct kd_history h;
    int64_t eid = 0, tid = 0;
    char err[KD_ERRLEN] = "", ubuf[128];
    int rc = 0;
    if (c->store == NULL || !kd_event_history(old_status, new_status, &h))
        return;
    const char *euid = experiment_uid(c, trial, ubuf, sizeof(ubuf));
    if (euid == NULL || (rc = kd_store_experiment_lookup(c->store, euid, &eid, err)) != 0) {
        /* No row for the experiment yet: nothing to hang the entry on. */
        if (rc != KD_ENOTFOUND && rc != 0)
            goto out;
        rc = 0;
        KD_DEBUG("trial history not recorded: the experiment has no row", "trial=%s/%s",
                 kd_logq(kd_k8s_meta_str(trial, "namespace")),
                 kd_logq(kd_k8s_meta_str(trial, "name")));
        goto out;
    }
    rc = kd_store_trial_lookup(c->store, kd_k8s_meta_str(trial, "uid") ?: "", &tid, err);
    if (rc == KD_ENOTFOUND)
        rc = 0; /* no attempt yet: named by details */
    if (rc != 0)
        goto out;
    json_object_set_new(h.details, "trial", json_string(kd_k8s_meta_str(trial, "name") ?: ""));
    json_object_set_new(h.details, "request_id",
                        json_string(kd_ctrl_str(trial, "spec", "requestId", NULL) ?: ""));
    struct kd_store_event ev = {.experiment_id = eid,
                                .trial_id = tid,
                                .kind = "trial",
                                .decision = h.decision,
                                .reason = h.reason,
                                .details = h.details};
    rc = kd_store_event_add(c->store, &ev, NULL, err);
out:
    if (rc != 0)
        KD_WARN("cannot record a trial's state change", "trial=%s/%s decision=%s err=%s detail=%s",
                kd_logq(kd_k8s_meta_str(trial, "namespace")),
                kd_logq(kd_k8s_meta_str(trial, "name")), h.decision, kd_err_name(rc), kd_logq(err));
    json_decref(h.details);
}

/* ---- tasks ---------------------------------------------------------------------------------- */

/* Create Secret `name` owned by the Task with stringData `data` (stolen); an existing one is
 * kept. */
static int task_secret(struct kd_ctrl *c, const json_t *task, const char *name, json_t *data,
                       char *err)
{
    const char *ns = kd_k8s_meta_str(task, "namespace"), *tn = kd_k8s_meta_str(task, "name");
    json_t *s = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s},s:[{s:s,s:s,s:s,s:s?,s:b,s:b}]},s:s,s:o}",
                          "apiVersion", "v1", "kind", "Secret", "metadata", "name", name,
                          "namespace", ns, "labels", KD_POD_LABEL_TASK, tn, "ownerReferences",
                          "apiVersion", "kdet.io/v1alpha1", "kind", "Task", "name", tn, "uid",
                          kd_k8s_meta_str(task, "uid"), "controller", 1, "blockOwnerDeletion", 1,
                          "type", "Opaque", "stringData", data);
    int rc = kd_k8s_create(c->client, &SECRETS, ns, s, NULL, NULL, err);
    if (rc == KD_EEXIST)
        rc = 0;
    json_decref(s);
    return rc;
}

int kd_ctrl_task_secrets(struct kd_ctrl *c, const json_t *task, bool shell, char *err)
{
    int rc = 0;
    char tok[KD_API_TOKEN_LEN + 8], name[300];
    const char *ns = kd_k8s_meta_str(task, "namespace"), *tn = kd_k8s_meta_str(task, "name");
    struct kd_sshkey client = {0}, host = {0};
    if (snprintf(name, sizeof(name), "%s%s", tn, KD_CTRL_TOKEN_SUFFIX) >= 254) {
        rc = kd_seterr(err, KD_ETOOBIG, "task %s: token Secret name too long", tn);
        goto out;
    }
    if ((rc = kd_api_task_token(c->key, c->keylen, ns, tn, kd_k8s_meta_str(task, "uid"), tok,
                                sizeof(tok))) != 0) {
        kd_seterr(err, rc, "task %s: cannot derive its token", tn);
        goto out;
    }
    if ((rc = task_secret(c, task, name, json_pack("{s:s,s:s?}", "token", tok, "ca.crt", c->tls_ca),
                          err)) != 0)
        goto out;
    if (!shell)
        goto out;
    /* The shell's keys: the pod's sshd holds the host key and accepts the client key, which
     * det reads from this Secret (docs/tasks.md, "Shells"). Made once: a Secret that exists
     * (a retried start) keeps its keys. */
    snprintf(name, sizeof(name), "%s%s", tn, KD_POD_SSH_SUFFIX);
    json_t *have = NULL;
    if (kd_k8s_get(c->client, &SECRETS, ns, name, &have, NULL, NULL) == 0) {
        json_decref(have);
        goto out;
    }
    if ((rc = kd_sshkey_make(tn, &client, err)) != 0 || (rc = kd_sshkey_make(tn, &host, err)) != 0)
        goto out;
    char *known = kd_xasprintf("%s %s\n", tn, host.public_line);
    char *auth = kd_xasprintf("%s\n", client.public_line);
    rc = task_secret(c, task, name,
                     json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", client.private_pem, "id.pub",
                               client.public_line, "ssh_host_key", host.private_pem,
                               "ssh_host_key.pub", host.public_line, "authorized_keys", auth,
                               "known_hosts", known),
                     err);
    free(known);
    free(auth);
    if (rc == 0)
        KD_INFO("shell keys made", "task=%s/%s secret=%s", kd_logq(ns), kd_logq(tn), kd_logq(name));
out:
    explicit_bzero(tok, sizeof(tok));
    kd_sshkey_free(&client);
    kd_sshkey_free(&host);
    return rc;
}

int kd_ctrl_wire_task(struct kd_ctrl *c, const json_t *task, const json_t *cfg, int64_t *id,
                      char *err)
{
    int rc = 0;
    const json_t *spec = json_object_get(task, "spec");
    const char *kind = json_string_value(json_object_get(spec, "kind")) ?: "";
    *id = 0;
    if ((rc = kd_ctrl_task_secrets(c, task, strcmp(kind, "shell") == 0, err)) != 0)
        goto out;
    if (c->store == NULL)
        goto out;
    struct kd_store_task st = {
        .uid = kd_k8s_meta_str(task, "uid"),
        .namespace_ = kd_k8s_meta_str(task, "namespace"),
        .name = kd_k8s_meta_str(task, "name"),
        .kind = kind,
        .owner = json_string_value(json_object_get(spec, "owner")),
        .config = (json_t *)cfg,
        .state = "STARTING",
    };
    rc = kd_store_task_upsert(c->store, &st, id, err);
out:
    return rc;
}

void kd_ctrl_wire_task_state(struct kd_ctrl *c, const json_t *task, const char *state,
                             int exit_code, const char *end_reason)
{
    int64_t id = 0;
    char err[KD_ERRLEN] = "";
    if (c->store == NULL)
        return;
    int rc = kd_store_task_id(c->store, kd_k8s_meta_str(task, "uid"), &id, err);
    if (rc == 0)
        rc = kd_store_task_set_state(c->store, id, state, exit_code, end_reason, err);
    if (rc != 0 && rc != KD_ENOTFOUND)
        KD_WARN("task state not stored", "task=%s/%s state=%s err=%s detail=%s",
                kd_logq(kd_k8s_meta_str(task, "namespace")), kd_logq(kd_k8s_meta_str(task, "name")),
                state, kd_err_name(rc), kd_logq(err));
}

int kd_ctrl_task_token(struct kd_ctrl *c, const json_t *task, char *out, size_t len)
{
    if (c->key == NULL)
        return KD_EINVAL;
    return kd_api_task_token(c->key, c->keylen, kd_k8s_meta_str(task, "namespace"),
                             kd_k8s_meta_str(task, "name"), kd_k8s_meta_str(task, "uid"), out, len);
}
