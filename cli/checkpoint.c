/*
 * `det checkpoint list|describe|download`: the checkpoint registry that
 * kdet-controller keeps (read through its user API), and restoring one
 * checkpoint's files with lib/storage from the experiment's
 * checkpoint_storage (shared_fs or s3), every file's size and sha256
 * checked against the manifest.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/str.h"
#include "storage/checkpoint.h"
#include "storage/storage.h"

static const char ckpt_usage[] =
    "usage: det checkpoint VERB ...\n"
    "\n"
    "verbs:\n"
    "  list EXPERIMENT | --trial TRIAL [--all]   the registered checkpoints (--all: deleted\n"
    "                                            ones too)\n"
    "  describe UUID                             one checkpoint: trial, batches, size, where\n"
    "  download UUID [-o DIR]                    restore its files into DIR (default ./UUID),\n"
    "                                            checking every file's size and sha256\n"
    "\n"
    "Every verb takes -n/--namespace; list and describe take -o table|json|yaml.\n"
    "They need the controller API: KDET_API_URL and KDET_API_TOKEN (or\n"
    "KDET_API_TOKEN_FILE), else the local deployment's (det deploy local up).\n"
    "download reads the storage the experiment's checkpoint_storage names; S3\n"
    "credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,\n"
    "$KDET_S3_CREDENTIALS_DIR or ~/.aws/credentials.\n";

#define NS_FLAGS "--namespace", "--kubeconfig", "--context"

static const struct kd_k8s_gvr exp_gvr = KD_K8S_EXPERIMENTS;
static const struct kd_k8s_gvr trial_gvr = KD_K8S_TRIALS;

static void fmt_size(json_int_t n, char *buf, size_t len)
{
    if (n >= (1 << 20))
        snprintf(buf, len, "%.1f MiB", (double)n / (1 << 20));
    else if (n >= 1024)
        snprintf(buf, len, "%.1f KiB", (double)n / 1024);
    else
        snprintf(buf, len, "%lld B", (long long)n);
}

static void print_list(const json_t *cks)
{
    struct det_table *t = det_table_new((const char *const[]){
        "UUID", "TRIAL", "BATCHES", "STATE", "SIZE", "REPORTED", "STORAGE PATH", NULL});
    size_t i;
    json_t *c;
    json_array_foreach(cks, i, c)
    {
        char trial[256], batches[32], size[32], when[32];
        /* the Trial's name when the API knows it, else the store's id */
        snprintf(trial, sizeof(trial), "%s", det_get_str(c, "trial", ""));
        if (trial[0] == '\0')
            snprintf(trial, sizeof(trial), "%lld",
                     (long long)json_integer_value(json_object_get(c, "trial_id")));
        snprintf(batches, sizeof(batches), "%lld",
                 (long long)json_integer_value(json_object_get(c, "steps_completed")));
        fmt_size(json_integer_value(json_object_get(c, "size_bytes")), size, sizeof(size));
        det_fmt_time(det_get_str(c, "reported_at", NULL), when, sizeof(when));
        const char *row[] = {det_get_str(c, "uuid", ""),        trial, batches,
                             det_get_str(c, "state", ""),       size,  when,
                             det_get_str(c, "storage_path", "")};
        det_table_row(t, row);
    }
    det_table_print(t);
    det_table_free(t);
}

/* "/api/v1/namespaces/NS/<kind>/<name>/checkpoints" */
static char *ckpt_path(const struct det_api *api, const char *kind, const char *name, bool deleted)
{
    struct kd_buf b = KD_BUF_INIT(4096);
    char *out = NULL;
    if (kd_buf_puts(&b, "/api/v1/namespaces/") == 0 && det_urlencode(&b, api->ns) == 0 &&
        kd_buf_printf(&b, "/%s/", kind) == 0 && det_urlencode(&b, name) == 0 &&
        kd_buf_printf(&b, "/checkpoints%s", deleted ? "?deleted=true" : "") == 0)
        out = kd_xstrdup(kd_buf_str(&b));
    kd_buf_free(&b);
    return out;
}

static int cmd_list(int argc, char **argv)
{
    static const char *const flags[] = {"--trial", "--all", "--output", NS_FLAGS, NULL};
    static const char *const pos[] = {"EXPERIMENT", NULL};
    static const struct det_verb_spec spec = {.cmd = "det checkpoint list",
                                              .usage = ckpt_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .format = true};
    struct det_verb v = {0};
    json_t *res = NULL, *shown = json_array();
    char *path = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if ((v.a.npos == 0) == (v.a.trial == NULL)) {
        det_err("det checkpoint list takes an EXPERIMENT or --trial TRIAL (see 'det checkpoint "
                "--help')");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = det_api_open(&v.a, spec.cmd, &v.api);
    if (rc == 0)
        rc = v.a.trial ? det_resolve_if_kube(&v, &trial_gvr, "trial", v.a.trial, &v.name)
                       : det_resolve_if_kube(&v, &exp_gvr, "experiment", v.a.pos[0], &v.name);
    if (rc != 0)
        goto out;
    path = ckpt_path(&v.api, v.a.trial ? "trials" : "experiments", v.name, true);
    if (path == NULL) {
        det_err("name too long");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = det_api_get(&v.api, path, &res);
    if (rc != 0)
        goto out;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(res, "checkpoints"), i, c)
    {
        if (v.a.all || strcmp(det_get_str(c, "state", ""), "DELETED") != 0)
            json_array_append(shown, c);
    }
    if (v.fmt != DET_FMT_TABLE) {
        json_t *o = json_pack("{s:O}", "checkpoints", shown);
        rc = det_print_obj(o, v.fmt);
        json_decref(o);
    } else if (json_array_size(shown) == 0) {
        fprintf(stderr, "det: no checkpoints registered for %s %s%s\n",
                v.a.trial ? "trial" : "experiment", v.name,
                v.a.all ? "" : " (deleted ones are listed with --all)");
    } else {
        print_list(shown);
    }
out:
    free(path);
    json_decref(res);
    json_decref(shown);
    det_verb_end(&v);
    return rc;
}

/*
 * Checkpoint `uuid` by one request (GET .../checkpoints/UUID): *ck the
 * registry entry, *exp the experiment's summary (its spec names the
 * storage; only its name when the Experiment is gone). DET_EXIT_NOTFOUND,
 * printing nothing, when no checkpoint has exactly this uuid. Exit code.
 */
static int get_ckpt(struct det_api *api, const char *uuid, json_t **ck, json_t **exp)
{
    struct kd_buf path = KD_BUF_INIT(4096);
    json_t *res = NULL;
    int rc = DET_EXIT_USAGE;
    *ck = *exp = NULL;
    if (kd_buf_puts(&path, "/api/v1/namespaces/") != 0 || det_urlencode(&path, api->ns) != 0 ||
        kd_buf_puts(&path, "/checkpoints/") != 0 || det_urlencode(&path, uuid) != 0) {
        det_err("checkpoint ID \"%.40s...\": too long", uuid);
        goto out;
    }
    api->quiet_404 = true;
    rc = det_api_get(api, kd_buf_str(&path), &res);
    api->quiet_404 = false;
    if (rc != 0)
        goto out;
    json_t *c = json_object_get(res, "checkpoint"), *e = json_object_get(res, "experiment");
    if (!json_is_object(c)) {
        det_err("the controller API's answer about checkpoint %s has no \"checkpoint\" object",
                uuid);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    *ck = json_incref(c);
    *exp = json_is_object(e) ? json_incref(e)
                             : json_pack("{s:O?}", "name", json_object_get(c, "experiment"));
out:
    json_decref(res);
    kd_buf_free(&path);
    return rc;
}

/*
 * Find checkpoint `uuid` (or a unique prefix of one) in the namespace:
 * an exact uuid is one request; otherwise the namespace's experiments are
 * listed and their checkpoints searched for the prefix. *ck the registry
 * entry, *exp the experiment's summary (its spec names the storage). Exit
 * code.
 */
static int find_ckpt(struct det_api *api, const char *uuid, json_t **ck, json_t **exp)
{
    json_t *exps = NULL, *cks = NULL;
    struct kd_buf path = KD_BUF_INIT(4096);
    int rc, n = 0;
    *ck = *exp = NULL;
    rc = get_ckpt(api, uuid, ck, exp);
    if (rc != DET_EXIT_NOTFOUND)
        return rc;
    if (kd_buf_puts(&path, "/api/v1/namespaces/") != 0 || det_urlencode(&path, api->ns) != 0 ||
        kd_buf_puts(&path, "/experiments?archived=true") != 0) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    rc = det_api_get(api, kd_buf_str(&path), &exps);
    if (rc != 0)
        goto out;
    size_t i, j;
    json_t *e, *c;
    json_array_foreach(json_object_get(exps, "experiments"), i, e)
    {
        char *p = ckpt_path(api, "experiments", det_get_str(e, "name", ""), true);
        json_decref(cks);
        cks = NULL;
        rc = p ? det_api_get(api, p, &cks) : DET_EXIT_ERROR;
        free(p);
        if (rc == DET_EXIT_NOTFOUND)
            continue; /* deleted meanwhile */
        if (rc != 0)
            goto out;
        json_array_foreach(json_object_get(cks, "checkpoints"), j, c)
        {
            const char *u = det_get_str(c, "uuid", "");
            if (strcmp(u, uuid) == 0 || (n >= 0 && kd_str_has_prefix(u, uuid))) {
                if (strcmp(u, uuid) == 0)
                    n = -1; /* exact: wins over prefixes */
                else
                    n++;
                json_decref(*ck);
                json_decref(*exp);
                *ck = json_incref(c);
                *exp = json_incref(e);
            }
        }
    }
    rc = DET_EXIT_OK;
    if (*ck == NULL) {
        det_err("checkpoint \"%s\" is not registered in namespace \"%s\" (see 'det checkpoint "
                "list EXPERIMENT')",
                uuid, api->ns);
        rc = DET_EXIT_NOTFOUND;
    } else if (n > 1) {
        det_err("checkpoint ID \"%s\" is ambiguous: it starts %d uuids; give more of it", uuid, n);
        rc = DET_EXIT_USAGE;
    }
out:
    if (rc != 0) {
        json_decref(*ck);
        json_decref(*exp);
        *ck = *exp = NULL;
    }
    json_decref(exps);
    json_decref(cks);
    kd_buf_free(&path);
    return rc;
}

static int cmd_describe(int argc, char **argv)
{
    static const char *const flags[] = {"--output", NS_FLAGS, NULL};
    static const char *const pos[] = {"UUID", NULL};
    static const struct det_verb_spec spec = {.cmd = "det checkpoint describe",
                                              .usage = ckpt_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = true,
                                              .api = true};
    struct det_verb v = {0};
    json_t *ck = NULL, *exp = NULL;
    char buf[64];
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    rc = find_ckpt(&v.api, v.a.pos[0], &ck, &exp);
    if (rc != 0)
        goto out;
    json_object_set(ck, "experiment", json_object_get(exp, "name"));
    if (v.fmt != DET_FMT_TABLE) {
        rc = det_print_obj(ck, v.fmt);
        goto out;
    }
    printf("UUID:         %s\n", det_get_str(ck, "uuid", ""));
    printf("Experiment:   %s\n", det_get_str(exp, "name", ""));
    printf("Trial:        %s (id %lld)\n", det_get_str(ck, "trial", "?"),
           (long long)json_integer_value(json_object_get(ck, "trial_id")));
    printf("Batches:      %lld\n",
           (long long)json_integer_value(json_object_get(ck, "steps_completed")));
    printf("State:        %s\n", det_get_str(ck, "state", ""));
    fmt_size(json_integer_value(json_object_get(ck, "size_bytes")), buf, sizeof(buf));
    printf("Size:         %s (%lld bytes)\n", buf,
           (long long)json_integer_value(json_object_get(ck, "size_bytes")));
    det_fmt_time(det_get_str(ck, "reported_at", NULL), buf, sizeof(buf));
    printf("Reported:     %s\n", buf);
    if (json_is_string(json_object_get(ck, "deleted_at"))) {
        det_fmt_time(det_get_str(ck, "deleted_at", NULL), buf, sizeof(buf));
        printf("Deleted:      %s\n", buf);
    }
    printf("Storage path: %s\n", det_get_str(ck, "storage_path", ""));
    json_t *st = det_get(exp, "spec.checkpoint_storage");
    if (json_is_object(st))
        printf("Storage:      %s %s\n", det_get_str(st, "type", "?"),
               det_get_str(st, "bucket", det_get_str(st, "host_path", "")));
    char *md = json_dumps(json_object_get(ck, "metadata"), JSON_COMPACT | JSON_SORT_KEYS);
    printf("Metadata:     %s\n", md ? md : "{}");
    free(md);
    fflush(stdout);
out:
    json_decref(ck);
    json_decref(exp);
    det_verb_end(&v);
    return rc;
}

/* Copy the tree src into dst (created): regular files and directories. 0 or -errno. */
static int copy_tree(const char *src, const char *dst, char *what, size_t whatlen)
{
    DIR *d = NULL;
    int rc = 0;
    if (mkdir(dst, 0755) != 0 && errno != EEXIST) {
        rc = -errno;
        snprintf(what, whatlen, "%s", dst);
        goto out;
    }
    d = opendir(src);
    if (d == NULL) {
        rc = -errno;
        snprintf(what, whatlen, "%s", src);
        goto out;
    }
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *s = kd_xasprintf("%s/%s", src, de->d_name),
             *t = kd_xasprintf("%s/%s", dst, de->d_name);
        struct stat sb;
        if (stat(s, &sb) != 0) {
            rc = -errno;
            snprintf(what, whatlen, "%s", s);
        } else if (S_ISDIR(sb.st_mode)) {
            rc = copy_tree(s, t, what, whatlen);
        } else if (S_ISREG(sb.st_mode)) {
            int in = open(s, O_RDONLY | O_CLOEXEC), out = -1;
            char buf[65536];
            ssize_t n = 0;
            if (in >= 0)
                out = open(t, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
                if (write(out, buf, (size_t)n) != n) {
                    n = -1;
                    break;
                }
            if (in < 0 || out < 0 || n < 0) {
                rc = errno ? -errno : -EIO;
                snprintf(what, whatlen, "%s", in < 0 ? s : t);
            }
            if (in >= 0)
                close(in);
            if (out >= 0 && close(out) != 0 && rc == 0) {
                rc = -errno;
                snprintf(what, whatlen, "%s", t);
            }
        }
        free(s);
        free(t);
    }
out:
    if (d != NULL)
        closedir(d);
    return rc;
}

int det_checkpoint_download(struct det_api *api, const char *id, const char *outdir)
{
    struct kd_storage_config cfg;
    struct kd_storage *st = NULL;
    json_t *ck = NULL, *exp = NULL;
    char err[KD_ERRLEN] = "", what[4200] = "";
    int rc = find_ckpt(api, id, &ck, &exp), r;
    if (rc != 0)
        goto out;
    const char *uuid = det_get_str(ck, "uuid", "");
    const char *dir = outdir ? outdir : uuid;
    if (strcmp(det_get_str(ck, "state", ""), "DELETED") == 0) {
        char when[64];
        det_fmt_time(det_get_str(ck, "deleted_at", NULL), when, sizeof(when));
        det_err("checkpoint %s is DELETED (since %s): its files were removed (checkpoint GC); "
                "'det checkpoint list --all' shows it",
                uuid, when[0] ? when : "?");
        rc = DET_EXIT_NOTFOUND;
        goto out;
    }
    const char *spath = det_get_str(ck, "storage_path", "");
    json_t *sj = det_get(exp, "spec.checkpoint_storage");
    kd_storage_config_init(&cfg);
    /* which step failed decides the message and the exit code */
    const char *step = "reading the experiment's checkpoint_storage";
    if (json_is_object(sj))
        r = kd_storage_config_from_json(sj, &cfg, err);
    else
        r = kd_seterr(err, KD_ENOTFOUND,
                      "experiment %s has no spec.checkpoint_storage (set by a template?)",
                      det_get_str(exp, "name", ""));
    bool nostorage = r == KD_ENOTFOUND;
    if (r == 0) {
        step = "opening the checkpoint storage";
        r = kd_storage_open(&cfg, &st, err);
    }
    if (r == 0) {
        step = "downloading";
        r = kd_ckpt_download(st, uuid, dir, NULL, NULL, err);
    }
    bool missing = r == KD_ENOTFOUND && (nostorage || strcmp(step, "downloading") == 0);
    if (missing && spath[0] == '/' && access(spath, R_OK | X_OK) == 0) {
        /* shared_fs without a manifest (written by other tools): copy the directory as is */
        r = copy_tree(spath, dir, what, sizeof(what));
        if (r != 0) {
            det_err("copying checkpoint %s from %s: %s: %s", uuid, spath, what, strerror(-r));
            rc = DET_EXIT_ERROR;
            goto out;
        }
        fprintf(stderr, "det: checkpoint %s has no manifest: copied %s as it is (not verified)\n",
                uuid, spath);
        printf("%s\n", dir);
        rc = DET_EXIT_OK;
        goto out;
    }
    if (r != 0) {
        det_err("checkpoint %s (storage path %s): %s: %s", uuid, spath, step,
                err[0] ? err : kd_strerror(r));
        rc = missing ? DET_EXIT_NOTFOUND : DET_EXIT_ERROR;
        goto out;
    }
    fprintf(stderr, "det: checkpoint %s restored from %s into %s (every file's sha256 checked)\n",
            uuid, kd_storage_location(st), dir);
    printf("%s\n", dir);
    fflush(stdout);
    rc = DET_EXIT_OK;
out:
    kd_storage_close(st);
    json_decref(ck);
    json_decref(exp);
    return rc;
}

static int cmd_download(int argc, char **argv)
{
    static const char *const flags[] = {"--output", NS_FLAGS, NULL};
    static const char *const pos[] = {"UUID", NULL};
    static const struct det_verb_spec spec = {.cmd = "det checkpoint download",
                                              .usage = ckpt_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .api = true};
    struct det_verb v = {0};
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc < 0)
        rc = det_checkpoint_download(&v.api, v.a.pos[0], v.a.output);
    det_verb_end(&v);
    return rc;
}

int det_cmd_checkpoint(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"list", "ls", cmd_list},
        {"describe", NULL, cmd_describe},
        {"download", NULL, cmd_download},
        {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, ckpt_usage, "det checkpoint");
}
