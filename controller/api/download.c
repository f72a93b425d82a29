/*
 * Checkpoint downloads (docs/api.md, "Downloads"): a model version's
 * checkpoint, or a trial's by uuid, as one tar archive of the files `det
 * checkpoint download` restores (lib/storage/ckpt_tar.h), streamed from
 * the experiment's checkpoint storage with the controller's credentials.
 * The answer has the archive's exact Content-Length and holds one piece of
 * it in memory at a time; a storage failure or a file whose bytes are not
 * its manifest's cuts the transfer short of that length, so no client
 * takes a partial archive for a whole one. A browser's download manager
 * cannot send the user's token, so POST .../download-link checks the same
 * things and makes a one-minute link to the download signed for the
 * caller's token (ticket.c), which the GET takes in ?kdet_ticket=.
 */
#include "api/api_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "storage/ckpt_tar.h"
#include "storage/storage.h"

#define NS(q) ((q)->seg[3])
#define LINK_S 60
#define LINK_DOMAIN "kdet-download/v1"

/* One download: what it is, where it comes from, how far it went. Outlives the request's
 * arena (the stream runs after the handler returned), so it owns copies. */
struct dl {
    struct kd_api *api; /* counted in api->downloads while set */
    struct kd_storage *st;
    struct kd_ckpt_tar *tar;
    char ns[256], uuid[KD_CKPT_UUIDLEN], stem[300], user[128];
    char what[700]; /* "model mnist version 2" or "checkpoint UUID", for messages and the log */
    uint64_t sent;
    int64_t t0;
    bool failed;
};

static void dl_free(void *p)
{
    struct dl *d = p;
    if (d == NULL)
        return;
    if (d->tar != NULL)
        KD_INFO("checkpoint download ended",
                "namespace=%s what=%s checkpoint=%s bytes=%llu of=%llu result=%s ms=%lld by=%s",
                kd_logq(d->ns), kd_logq(d->what), d->uuid, (unsigned long long)d->sent,
                (unsigned long long)kd_ckpt_tar_size(d->tar),
                d->failed                             ? "failed"
                : d->sent == kd_ckpt_tar_size(d->tar) ? "complete"
                                                      : "cut-off",
                (long long)(kd_mono_ms() - d->t0), kd_logq(d->user));
    kd_ckpt_tar_close(d->tar);
    kd_storage_close(d->st);
    if (d->api != NULL)
        atomic_fetch_sub(&d->api->downloads, 1);
    free(d);
}

/* What the link of the request's download is signed for: the namespace and the object, the
 * path's segments after the namespace without the last ("download" or "download-link"),
 * "models/M/versions/V" or "checkpoints/UUID", written into object (len bytes). */
static struct api_ticket_for link_for(const struct api_rq *q, char *object, size_t len)
{
    size_t o = 0;
    object[0] = '\0';
    for (int i = 4; i < q->nseg - 1 && o < len; i++)
        o += (size_t)snprintf(object + o, len - o, "%s%s", i > 4 ? "/" : "", q->seg[i]);
    return (struct api_ticket_for){
        .domain = LINK_DOMAIN, .kind = "link", .ns = NS(q), .name = object, .uid = ""};
}

int api_download_caller(struct api_rq *q, const char *link, const struct api_principal **who)
{
    char object[1024];
    int64_t token_id = 0, user_id = 0;
    const struct api_ticket_for f = link_for(q, object, sizeof(object));
    int rc = api_ticket_check(q->api, &f, link, &token_id, &user_id)
                 ? api_auth_session(q, token_id, user_id, who)
                 : KD_EUNAUTHORIZED;
    if (rc == KD_EAGAIN)
        api_error(q, 503, NULL, "cannot check the download link now; try again");
    else if (rc != 0)
        api_error(q, 401, API_LINK_PARAM,
                  "the download link is not valid (it lasts %d s and only for its own path): "
                  "ask for a new one (POST .../download-link)",
                  LINK_S);
    return rc;
}

/* err for the answer, after what the download is unless err already begins with it. */
static const char *about(const struct dl *d, const char *err, char *out, size_t len)
{
    if (strncmp(err, d->what, strlen(d->what)) == 0)
        return err;
    snprintf(out, len, "%s: %s", d->what, err);
    return out;
}

/* Open checkpoint_storage cs of namespace ns: the controller's hook (its credentials), or
 * with this process's own. */
static int open_storage(struct kd_api *a, const char *ns, const json_t *cs, struct kd_storage **st,
                        char *err)
{
    struct kd_storage_config sc;
    int rc;
    *st = NULL;
    if (a->o.storage_open != NULL)
        return a->o.storage_open(a->o.storage_open_ud, ns, cs, st, err);
    kd_storage_config_init(&sc);
    if ((rc = kd_storage_config_from_json(cs, &sc, err)) != 0)
        return rc;
    return kd_storage_open(&sc, st, err);
}

/*
 * The checkpoint storage of the experiment {ename, euid} of namespace ns: the live
 * Experiment's (as its trials get it, the controller's default included), else `saved` (the
 * configuration the store kept: captured at registration, or the experiment's row). A new
 * reference, or NULL when there is none.
 */
static json_t *storage_of(struct kd_api *a, const char *ns, const char *ename, const char *euid,
                          const json_t *saved)
{
    json_t *exp = NULL, *cs = NULL;
    char err[KD_ERRLEN] = "";
    if (ename != NULL && euid != NULL && api_get_experiment(a, ns, ename, &exp, err) == 0 &&
        strcmp(kd_k8s_meta_str(exp, "uid") ?: "", euid) == 0) {
        if (a->o.storage_of != NULL)
            (void)a->o.storage_of(a->o.storage_ud, exp, &cs);
        else
            cs = json_incref(json_object_get(json_object_get(exp, "spec"), "checkpoint_storage"));
    }
    if (!json_is_object(cs)) {
        json_decref(cs);
        cs = json_incref(json_object_get(saved, "checkpoint_storage"));
    }
    json_decref(exp);
    if (!json_is_object(cs)) {
        json_decref(cs);
        cs = NULL;
    }
    return cs;
}

/*
 * Everything a download needs, checked before the first byte: the checkpoint (a model
 * version's, or seg[5]'s uuid), that it is ACTIVE, its experiment's storage opened, its
 * manifest read. 0 with *out (caller frees with dl_free); else answered (404, 410, 502).
 */
static int prepare(struct api_rq *q, bool version, struct dl **out)
{
    struct kd_api *a = q->api;
    struct dl *d = kd_xcalloc(1, sizeof(*d));
    json_t *row = NULL, *exp_row = NULL, *cs = NULL;
    const json_t *saved = NULL;
    char err[KD_ERRLEN] = "", msg[KD_ERRLEN], buf[KD_ERRLEN + 800];
    int rc = 0;
    *out = NULL;
    d->t0 = kd_mono_ms();
    kd_strlcpy(d->ns, NS(q), sizeof(d->ns));
    kd_strlcpy(d->user, q->who != NULL ? q->who->name : "-", sizeof(d->user));
    if (a->ns != NULL && strcmp(NS(q), a->ns) != 0) {
        rc = api_error(q, 404, NULL, "namespace %s is not served by this controller",
                       kd_logq(NS(q)));
        goto out;
    }
    if (version) {
        int64_t v = api_model_version_arg(q->seg[7]);
        if (v <= 0) {
            rc = api_error(q, 400, "version", "version: %s is not a version number (1, 2, ...)",
                           kd_logq(q->seg[7]));
            goto out;
        }
        if ((rc = kd_store_model_version_get(a->o.store, NS(q), q->seg[5], v, &row, err)) != 0) {
            api_fail(q, rc, NULL, err);
            goto out;
        }
        snprintf(d->what, sizeof(d->what), "model %s version %lld", q->seg[5], (long long)v);
        api_download_stem(q->seg[5], v, d->stem, sizeof(d->stem));
        saved = json_object_get(row, "config");
    } else {
        if ((rc = kd_store_checkpoint_get(a->o.store, NS(q), q->seg[5], &row, err)) != 0) {
            api_fail(q, rc, rc == KD_EINVAL ? "uuid" : NULL, err);
            goto out;
        }
        snprintf(d->what, sizeof(d->what), "checkpoint %s",
                 json_string_value(json_object_get(row, "uuid")) ?: "");
        api_download_stem(json_string_value(json_object_get(row, "uuid")) ?: "", 0, d->stem,
                          sizeof(d->stem));
        json_int_t eid = json_integer_value(json_object_get(row, "experiment_id"));
        if (eid > 0 && kd_store_experiment_get(a->o.store, eid, &exp_row, err) == 0)
            saved = json_object_get(exp_row, "config");
    }
    const char *uuid = json_string_value(json_object_get(row, "checkpoint_uuid"))
                           ?: json_string_value(json_object_get(row, "uuid"));
    const char *state =
        json_string_value(json_object_get(row, version ? "checkpoint_state" : "state"));
    const char *ename = json_string_value(json_object_get(row, "experiment"));
    kd_strlcpy(d->uuid, uuid ?: "", sizeof(d->uuid));
    if (state == NULL || strcmp(state, "ACTIVE") != 0) {
        snprintf(msg, sizeof(msg),
                 "checkpoint %s is %s: its files were deleted (checkpoint GC), nothing is left to "
                 "download",
                 d->uuid, state != NULL ? state : "no longer in the registry");
        rc = api_error(q, 410, NULL, "%s", about(d, msg, buf, sizeof(buf)));
        goto out;
    }
    cs = storage_of(a, NS(q), ename, json_string_value(json_object_get(row, "experiment_uid")),
                    saved);
    if (cs == NULL) {
        rc = api_error(q, 404, NULL,
                       "%s: experiment %s has no checkpoint_storage: nothing to download from",
                       d->what, ename != NULL ? ename : "(unknown)");
        goto out;
    }
    if ((rc = open_storage(a, NS(q), cs, &d->st, err)) != 0) {
        KD_WARN("checkpoint storage not opened for a download",
                "namespace=%s what=%s err=%s detail=%s", kd_logq(NS(q)), kd_logq(d->what),
                kd_err_name(rc), kd_logq(err));
        rc = api_error(q, 502, NULL,
                       "%s: the checkpoint storage of experiment %s cannot be "
                       "opened: %s",
                       d->what, ename != NULL ? ename : "?", err);
        goto out;
    }
    if ((rc = kd_ckpt_tar_open(d->st, d->uuid, d->stem, &d->tar, err)) != 0) {
        KD_WARN("checkpoint not readable for a download", "namespace=%s what=%s err=%s detail=%s",
                kd_logq(NS(q)), kd_logq(d->what), kd_err_name(rc), kd_logq(err));
        rc = api_error(q, rc == KD_ENOTFOUND ? 404 : 502, NULL, "%s",
                       about(d, err, buf, sizeof(buf)));
        goto out;
    }
    *out = d;
    d = NULL;
out:
    json_decref(row);
    json_decref(exp_row);
    json_decref(cs);
    dl_free(d); /* on a refusal: no archive was opened, so no "ended" line */
    return rc;
}

static ssize_t dl_read(void *ctx, char *buf, size_t max)
{
    struct dl *d = ctx;
    char err[KD_ERRLEN] = "";
    size_t n = 0;
    int rc = kd_ckpt_tar_read(d->tar, buf, max, &n, err);
    if (rc != 0) {
        /* The answer is cut off short of its Content-Length: the client sees a failed
         * transfer; the cause goes to the log. */
        if (!d->failed)
            KD_WARN("checkpoint download failed",
                    "namespace=%s what=%s after=%llu err=%s detail=%s", kd_logq(d->ns),
                    kd_logq(d->what), (unsigned long long)d->sent, kd_err_name(rc), kd_logq(err));
        d->failed = true;
        return -1;
    }
    if (n == 0)
        return -1;
    d->sent += n;
    return (ssize_t)n;
}

static void download(struct api_rq *q, bool version)
{
    struct dl *d = NULL;
    /* Each download holds a piece of the archive and a storage handle while it streams: a
     * bounded number at once, counted from here until its end (dl_free). */
    int running = atomic_fetch_add(&q->api->downloads, 1);
    if (running >= q->api->o.max_downloads) {
        atomic_fetch_sub(&q->api->downloads, 1);
        api_error(q, 503, NULL,
                  "%d checkpoint downloads are running, the most this controller streams at "
                  "once: try again in a moment",
                  running);
        return;
    }
    if (prepare(q, version, &d) != 0) {
        atomic_fetch_sub(&q->api->downloads, 1);
        return;
    }
    d->api = q->api;
    char *cd = kd_http_printf(q->r, "attachment; filename=\"%s.tar\"", d->stem);
    kd_http_add_header(q->r, "Content-Disposition", cd);
    kd_http_add_header(q->r, "Cache-Control", "no-store");
    kd_http_add_header(q->r, "X-Content-Type-Options", "nosniff");
    kd_http_add_header(q->r, "X-Kdet-Checkpoint", d->uuid);
    KD_INFO("checkpoint download", "namespace=%s what=%s checkpoint=%s files=%zu bytes=%llu by=%s",
            kd_logq(d->ns), kd_logq(d->what), d->uuid, kd_ckpt_tar_manifest(d->tar)->nfiles,
            (unsigned long long)kd_ckpt_tar_size(d->tar), kd_logq(d->user));
    q->status = 200;
    kd_http_respond_sized(q->r, 200, "application/x-tar", kd_ckpt_tar_size(d->tar), dl_read, d,
                          dl_free);
}

static void download_link(struct api_rq *q, bool version)
{
    struct dl *d = NULL;
    char object[1024], value[256], ts[40];
    if (prepare(q, version, &d) != 0)
        return;
    const struct api_ticket_for f = link_for(q, object, sizeof(object));
    int64_t until = kd_wall_ms() / 1000 + LINK_S;
    api_ticket_make(q->api, &f, q->who->token_id, q->who->user_id, until, value, sizeof(value));
    char *url = kd_xasprintf("/api/v1/namespaces/%s/%s/download?" API_LINK_PARAM "=%s", NS(q),
                             object, value);
    api_json(q, 200,
             json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}", "url", url, "expires",
                       kd_time_rfc3339(until * 1000, 0, ts, sizeof(ts)), "filename",
                       kd_http_printf(q->r, "%s.tar", d->stem), "checkpoint_uuid", d->uuid, "size",
                       (json_int_t)kd_ckpt_tar_size(d->tar), "files",
                       (json_int_t)kd_ckpt_tar_manifest(d->tar)->nfiles));
    OPENSSL_cleanse(value, sizeof(value));
    OPENSSL_cleanse(url, strlen(url));
    free(url);
    kd_ckpt_tar_close(d->tar);
    d->tar = NULL; /* only checked, nothing sent */
    dl_free(d);
}

void api_user_model_download(struct api_rq *q)
{
    download(q, true);
}

void api_user_model_download_link(struct api_rq *q)
{
    download_link(q, true);
}

void api_user_checkpoint_download(struct api_rq *q)
{
    download(q, false);
}

void api_user_checkpoint_download_link(struct api_rq *q)
{
    download_link(q, false);
}
