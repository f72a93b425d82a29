/*
 * Rank 0's link to kdet (see kdet.h): the controller client from the
 * launcher's environment, a preemption watcher thread, and checkpoints that
 * upload in the background and are registered with the controller once
 * their upload (manifest last) has finished.
 */
#include "kdet.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The URL a checkpoint's directory lives under: file:///host_path[/storage_path] or s3://b[/p]. */
static int storage_base(const char *storage, char *out, size_t len, char *err)
{
    int rc = 0;
    json_t *o = NULL;
    if (storage[0] != '{') {
        snprintf(out, len, "%s", storage);
        goto out;
    }
    o = json_loads(storage, 0, NULL);
    const char *type = json_string_value(json_object_get(o, "type"));
    const char *sp = json_string_value(json_object_get(o, "storage_path"));
    if (type != NULL && strcmp(type, "shared_fs") == 0) {
        const char *hp = json_string_value(json_object_get(o, "host_path"));
        snprintf(out, len, "file://%s%s%s", hp ? hp : "", sp && sp[0] ? "/" : "", sp ? sp : "");
    } else if (type != NULL && strcmp(type, "s3") == 0) {
        const char *b = json_string_value(json_object_get(o, "bucket"));
        const char *p = json_string_value(json_object_get(o, "prefix"));
        snprintf(out, len, "s3://%s%s%s", b ? b : "", p && p[0] ? "/" : "", p ? p : "");
    } else {
        rc = DTRAIN_EINVAL;
        snprintf(err, DTRAIN_ERRLEN, "KDET_CHECKPOINT_STORAGE: type must be shared_fs or s3");
    }
out:
    json_decref(o);
    return rc;
}

int fm_kdet_open(struct fm_kdet *k, char *err)
{
    int rc = 0;
    const char *u = getenv("KDET_LENGTH_UNIT"), *s = getenv("KDET_CHECKPOINT_STORAGE");
    k->trial = getenv("KDET_TRIAL_ID") ? getenv("KDET_TRIAL_ID") : "";
    if (u == NULL || u[0] == '\0' || strcmp(u, "batches") == 0)
        k->unit = FM_UNIT_BATCHES;
    else if (strcmp(u, "records") == 0)
        k->unit = FM_UNIT_RECORDS;
    else if (strcmp(u, "epochs") == 0)
        k->unit = FM_UNIT_EPOCHS;
    else {
        rc = DTRAIN_EINVAL;
        snprintf(err, DTRAIN_ERRLEN, "KDET_LENGTH_UNIT=%.64s: must be batches, records or epochs",
                 u);
        goto out;
    }
    rc = dtrain_client_from_env(&k->cl, err);
    if (rc == DTRAIN_ENOTFOUND)
        rc = 0; /* standalone */
    if (rc != 0)
        goto out;
    if (s != NULL && s[0] != '\0') {
        if ((rc = storage_base(s, k->base, sizeof(k->base), err)) != 0 ||
            (rc = dtrain_checkpoint_open(s, &k->ck, err)) != 0)
            goto out;
    }
out:
    return rc;
}

static void *watch(void *arg)
{
    struct fm_kdet *k = arg;
    char err[DTRAIN_ERRLEN];
    while (!atomic_load(&k->quit)) {
        int p = 0;
        /* One-second long-polls, so that quitting never waits long. */
        if (dtrain_should_preempt(k->cl, 1000, &p, err) != 0) {
            fprintf(stderr, "fashion-mnist-c: preemption check: %s\n", err);
            for (int i = 0; i < 10 && !atomic_load(&k->quit); i++)
                sleep_ms(100);
        } else if (p) {
            atomic_store(&k->preempt, 1);
            break;
        }
    }
    return NULL;
}

int fm_kdet_watch(struct fm_kdet *k, char *err)
{
    int rc = 0;
    if (k->cl == NULL || k->th_started)
        goto out;
    if (pthread_create(&k->th, NULL, watch, k) != 0) {
        rc = DTRAIN_ENOMEM;
        snprintf(err, DTRAIN_ERRLEN, "cannot start the preemption watcher");
        goto out;
    }
    k->th_started = 1;
out:
    return rc;
}

/* Wait for the pending upload and register it. */
static int settle(struct fm_kdet *k, char *err)
{
    int rc = 0;
    if (k->pending[0] == '\0')
        goto out;
    if ((rc = dtrain_checkpoint_wait(k->ck, err)) != 0)
        goto out;
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", k->base, k->pending);
    if (k->cl != NULL &&
        (rc = dtrain_checkpoint_register(k->cl, k->pending, k->pending_batches, path,
                                         k->pending_size, k->pending_md, err)) != 0)
        goto out;
    printf("checkpoint %s batches=%lld size=%lld path=%s%s\n", k->pending,
           (long long)k->pending_batches, k->pending_size, path,
           k->cl != NULL ? " registered" : "");
    fflush(stdout);
out:
    k->pending[0] = '\0';
    free(k->pending_md);
    k->pending_md = NULL;
    return rc;
}

int fm_kdet_save(struct fm_kdet *k, const char *dir, int64_t batches, long long size,
                 const char *metadata_json, char *uuid, char *err)
{
    int rc = 0;
    if ((rc = settle(k, err)) != 0)
        goto out;
    k->pending_md = strdup(metadata_json);
    if (k->pending_md == NULL) {
        rc = DTRAIN_ENOMEM;
        snprintf(err, DTRAIN_ERRLEN, "out of memory");
        goto out;
    }
    if ((rc = dtrain_checkpoint_save_async(k->ck, dir, NULL, metadata_json, DTRAIN_CKPT_REMOVE_DIR,
                                           uuid, err)) != 0)
        goto out;
    snprintf(k->pending, sizeof(k->pending), "%s", uuid);
    k->pending_batches = batches;
    k->pending_size = size;
out:
    return rc;
}

int fm_kdet_finish(struct fm_kdet *k, char *err)
{
    int rc = 0;
    if (k->ck != NULL && (rc = settle(k, err)) != 0)
        goto out;
    if (k->cl != NULL)
        rc = dtrain_client_flush(k->cl, err);
out:
    return rc;
}

int fm_kdet_restore(struct fm_kdet *k, const char *uuid, const char *dir, char *err)
{
    int rc = 0;
    if (k->ck == NULL) {
        rc = DTRAIN_EINVAL;
        snprintf(err, DTRAIN_ERRLEN, "KDET_LATEST_CHECKPOINT needs KDET_CHECKPOINT_STORAGE");
        goto out;
    }
    rc = dtrain_checkpoint_restore(k->ck, uuid, dir, err);
out:
    return rc;
}

void fm_kdet_close(struct fm_kdet *k)
{
    char err[DTRAIN_ERRLEN];
    atomic_store(&k->quit, 1);
    if (k->th_started)
        pthread_join(k->th, NULL);
    k->th_started = 0;
    if (k->ck != NULL && dtrain_checkpoint_close(k->ck, err) != 0)
        fprintf(stderr, "fashion-mnist-c: checkpoint upload: %s\n", err);
    k->ck = NULL;
    dtrain_client_free(k->cl);
    k->cl = NULL;
    free(k->pending_md);
    k->pending_md = NULL;
}
