/*
 * Asynchronous checkpoint upload for libdtrain: a queue and one uploader
 * thread per handle, on top of lib/storage's checkpoint calls. Failures
 * are kept until dtrain_checkpoint_wait reports them.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/fs.h"
#include "core/log.h"
#include "core/str.h"
#include "dtrain_checkpoint.h"
#include "storage/checkpoint.h"

struct ckpt_job {
    struct ckpt_job *next;
    char dir[PATH_MAX];
    char uuid[KD_CKPT_UUIDLEN];
    json_t *metadata;
    int flags;
};

struct dtrain_ckpt {
    struct kd_storage_config cfg;
    struct kd_storage *st; /* used by the uploader thread only */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* queue changed or a job finished */
    struct ckpt_job *head, *tail;
    int pending; /* queued + running */
    int stop;
    int rc;      /* first failure since the last wait */
    int nfailed; /* failures since the last wait */
    char err[KD_ERRLEN];
    dtrain_checkpoint_done_fn done;
    void *done_arg;
};

static int make_uuid(char *out)
{
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t r = getrandom(b + got, sizeof(b) - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        got += (size_t)r;
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(out, DTRAIN_CKPT_UUIDLEN,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    return 0;
}

static void *uploader(void *arg)
{
    struct dtrain_ckpt *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        struct ckpt_job *j;
        char err[KD_ERRLEN] = "";
        int rc;
        while (c->head == NULL && !c->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        if (c->head == NULL)
            break; /* stopping, queue drained */
        j = c->head;
        c->head = j->next;
        if (c->head == NULL)
            c->tail = NULL;
        pthread_mutex_unlock(&c->lock);

        rc = kd_ckpt_upload(c->st, j->uuid, j->dir, j->metadata, NULL, NULL, err);
        if (rc == 0 && (j->flags & DTRAIN_CKPT_REMOVE_DIR))
            kd_rm_tree(j->dir);
        if (rc != 0)
            KD_ERROR("checkpoint upload failed", "uuid=%s dir=%s err=%s", j->uuid, kd_logq(j->dir),
                     kd_logq(err));
        if (c->done != NULL)
            c->done(c->done_arg, j->uuid, rc, err);

        pthread_mutex_lock(&c->lock);
        if (rc != 0) {
            if (c->nfailed++ == 0) {
                c->rc = rc;
                kd_seterr(c->err, rc, "checkpoint %s (%s): %s", j->uuid, j->dir, err);
            }
        }
        c->pending--;
        pthread_cond_broadcast(&c->cond);
        json_decref(j->metadata);
        free(j);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static int parse_storage(const char *storage, struct kd_storage_config *cfg, char *err)
{
    int rc;
    kd_storage_config_init(cfg);
    if (storage == NULL || storage[0] == '\0')
        return kd_seterr(err, KD_EINVAL, "checkpoint storage: not configured");
    if (storage[0] == '{') {
        json_error_t je;
        json_t *js = json_loads(storage, 0, &je);
        if (js == NULL)
            return kd_seterr(err, KD_EPARSE, "checkpoint_storage: line %d column %d: %s", je.line,
                             je.column, je.text);
        rc = kd_storage_config_from_json(js, cfg, err);
        json_decref(js);
        return rc;
    }
    return kd_storage_config_from_url(storage, cfg, err);
}

int dtrain_checkpoint_open(const char *storage, struct dtrain_ckpt **out, char *err)
{
    struct dtrain_ckpt *c = NULL;
    int rc;

    *out = NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "checkpoint: out of memory");
        goto out;
    }
    if ((rc = parse_storage(storage, &c->cfg, err)) != 0)
        goto out;
    if ((rc = kd_storage_open(&c->cfg, &c->st, err)) != 0)
        goto out;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    if ((rc = pthread_create(&c->thread, NULL, uploader, c)) != 0) {
        rc = kd_seterr(err, -rc, "checkpoint: cannot start the uploader thread: %s", strerror(rc));
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        goto out;
    }
    *out = c;
    c = NULL;
out:
    if (c != NULL) {
        kd_storage_close(c->st);
        free(c);
    }
    return rc;
}

int dtrain_checkpoint_save_async(struct dtrain_ckpt *c, const char *dir, const char *uuid,
                                 const char *metadata_json, int flags, char *uuid_out, char *err)
{
    struct ckpt_job *j = NULL;
    struct stat sb;
    int rc = 0;

    if (c == NULL || dir == NULL) {
        rc = kd_seterr(err, KD_EINVAL, "checkpoint save: no handle or directory");
        goto out;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        rc = kd_seterr(err, KD_ENOTFOUND, "checkpoint save: %s: not a directory", dir);
        goto out;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        rc = kd_seterr(err, KD_ENOMEM, "checkpoint save: out of memory");
        goto out;
    }
    if (kd_strlcpy(j->dir, dir, sizeof(j->dir)) >= sizeof(j->dir)) {
        rc = kd_seterr(err, KD_EINVAL, "checkpoint save: directory path too long");
        goto out;
    }
    if (uuid != NULL) {
        if ((rc = kd_ckpt_check_uuid(uuid, err)) != 0)
            goto out;
        kd_strlcpy(j->uuid, uuid, sizeof(j->uuid));
    } else if ((rc = make_uuid(j->uuid)) != 0) {
        rc = kd_seterr(err, rc, "checkpoint save: no random bytes for a uuid");
        goto out;
    }
    if (metadata_json != NULL) {
        json_error_t je;
        j->metadata = json_loads(metadata_json, 0, &je);
        if (j->metadata == NULL || !json_is_object(j->metadata)) {
            rc = kd_seterr(err, KD_EINVAL,
                           "checkpoint metadata: must be a JSON object (column %d: %s)",
                           j->metadata ? 1 : je.column, j->metadata ? "not an object" : je.text);
            goto out;
        }
    }
    j->flags = flags;
    if (uuid_out != NULL)
        kd_strlcpy(uuid_out, j->uuid, DTRAIN_CKPT_UUIDLEN);
    pthread_mutex_lock(&c->lock);
    if (c->tail != NULL)
        c->tail->next = j;
    else
        c->head = j;
    c->tail = j;
    c->pending++;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    KD_INFO("checkpoint queued for upload", "uuid=%s dir=%s", j->uuid, kd_logq(dir));
    j = NULL;
out:
    if (j != NULL) {
        json_decref(j->metadata);
        free(j);
    }
    return rc;
}

int dtrain_checkpoint_wait(struct dtrain_ckpt *c, char *err)
{
    int rc;
    if (c == NULL)
        return kd_seterr(err, KD_EINVAL, "checkpoint wait: no handle");
    pthread_mutex_lock(&c->lock);
    while (c->pending > 0)
        pthread_cond_wait(&c->cond, &c->lock);
    rc = c->rc;
    if (rc != 0) {
        if (c->nfailed > 1)
            kd_seterr(err, rc, "%s (and %d more checkpoint uploads failed)", c->err,
                      c->nfailed - 1);
        else
            kd_seterr(err, rc, "%s", c->err);
    }
    c->rc = 0;
    c->nfailed = 0;
    c->err[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int dtrain_checkpoint_pending(struct dtrain_ckpt *c)
{
    int n;
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->lock);
    n = c->pending;
    pthread_mutex_unlock(&c->lock);
    return n;
}

void dtrain_checkpoint_set_callback(struct dtrain_ckpt *c, dtrain_checkpoint_done_fn fn, void *arg)
{
    pthread_mutex_lock(&c->lock);
    c->done = fn;
    c->done_arg = arg;
    pthread_mutex_unlock(&c->lock);
}

int dtrain_checkpoint_restore(struct dtrain_ckpt *c, const char *uuid, const char *dir, char *err)
{
    struct kd_storage *st = NULL;
    int rc;
    if (c == NULL || uuid == NULL || dir == NULL)
        return kd_seterr(err, KD_EINVAL, "checkpoint restore: missing argument");
    /* a handle of its own: the uploader thread owns c->st */
    if ((rc = kd_storage_open(&c->cfg, &st, err)) != 0)
        return rc;
    rc = kd_ckpt_download(st, uuid, dir, NULL, NULL, err);
    kd_storage_close(st);
    return rc;
}

int dtrain_checkpoint_close(struct dtrain_ckpt *c, char *err)
{
    int rc;
    if (c == NULL)
        return 0;
    rc = dtrain_checkpoint_wait(c, err);
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    kd_storage_close(c->st);
    free(c);
    return rc;
}
