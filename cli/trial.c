/*
 * `det trial list|describe|logs`: an experiment's Trial resources and the
 * logs of their pods, read through the API server's pods/log subresource
 * (following with -f, one stream per pod, lines prefixed by the pod when a
 * trial has several).
 */
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cli.h"
#include "core/alloc.h"
#include "core/buf.h"
#include "core/regex.h"
#include "core/str.h"
#include "core/time.h"

static const struct kd_k8s_gvr exp_gvr = KD_K8S_EXPERIMENTS;
static const struct kd_k8s_gvr trial_gvr = KD_K8S_TRIALS;
static const struct kd_k8s_gvr pod_gvr = KD_K8S_PODS;

#define KUBE_FLAGS "--kubeconfig", "--context", "--namespace"
/* The most pod (or container) logs one command shows. */
#define MAX_STREAMS 256
/* One log line longer than this is passed on in pieces. */
#define LINE_MAX_BYTES (64 * 1024)

static const char trial_usage[] =
    "usage: det trial VERB ...\n"
    "\n"
    "verbs:\n"
    "  list EXPERIMENT [--best N]\n"
    "                    the trials of an experiment (name, unique prefix or integer id);\n"
    "                    --best N: the N best by the searcher metric, best first\n"
    "  describe TRIAL    a trial's state, hyperparameters, progress and pods\n"
    "  logs TRIAL [-f] [--tail N] [--grep RE]\n"
    "                    its logs, each line prefixed [rank=R]: from the controller's store\n"
    "                    when its API is at hand (they outlive the pods), else from the\n"
    "                    pods (-f follows until the trial ends; --tail N: the last N\n"
    "                    lines; --grep RE: only lines matching the regular expression)\n"
    "  metrics TRIAL     its reported metrics (training or validation), from the\n"
    "                    controller API; see 'det trial metrics --help'\n"
    "  profiler TRIAL [--kind system|timing]\n"
    "                    what its profiler reported: its nodes' system metrics and the\n"
    "                    Trainer's timings; see 'det trial profiler --help'\n"
    "  kill TRIAL        end the trial now (CANCELED, no checkpoint, not restarted):\n"
    "                    through the controller API; its pods are deleted at once\n"
    "\n"
    "Every verb takes -n/--namespace, --kubeconfig and --context; list and describe\n"
    "take -o table|json|yaml.\n";

/* Trials by creation time, then name (as the controller numbers them). */
static int cmp_created(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    int c = strcmp(kd_k8s_meta_str(x, "creationTimestamp") ?: "",
                   kd_k8s_meta_str(y, "creationTimestamp") ?: "");
    return c != 0 ? c : strcmp(kd_k8s_meta_str(x, "name") ?: "", kd_k8s_meta_str(y, "name") ?: "");
}

int det_trial_list(int argc, char **argv)
{
    static const char *const flags[] = {"--output", "--best", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"EXPERIMENT", NULL};
    static const struct det_verb_spec spec = {.cmd = "det trial list",
                                              .usage = trial_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = true,
                                              .kube = true,
                                              .gvr = &exp_gvr,
                                              .what = "experiment",
                                              .obj = true};
    struct det_verb v = {0};
    struct kd_k8s_status st = {0};
    json_t *list = NULL, *mine = json_array(), *all = json_array();
    json_t **sorted = NULL;
    char err[KD_ERRLEN] = "";
    int64_t best = 0;
    int rc = det_verb_begin(&v, argc, argv, &spec), r;
    if (rc >= 0)
        goto out;
    rc = DET_EXIT_OK;
    if (v.a.best != NULL && (kd_parse_i64(v.a.best, &best) != 0 || best < 1)) {
        det_err("--best %s: expected a number of trials (1 or more)", v.a.best);
        rc = DET_EXIT_USAGE;
        goto out;
    }
    r = kd_k8s_list_all(v.k.c, &trial_gvr, v.k.ns, NULL, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(&v.k, r, &st, err, "list", &trial_gvr, "trial", NULL);
        goto out;
    }
    size_t i, n = 0;
    json_t *t;
    json_array_foreach(json_object_get(list, "items"), i, t)
    {
        if (strcmp(det_get_str(t, "spec.experiment", ""), v.name) == 0)
            json_array_append(all, t);
    }
    sorted = kd_xcalloc(json_array_size(all) + 1, sizeof(*sorted));
    json_array_foreach(all, i, t) sorted[n++] = t;
    qsort(sorted, n, sizeof(*sorted), cmp_created);
    for (i = 0; i < n; i++)
        json_array_append(mine, sorted[i]);
    if (best > 0) {
        bool smaller = det_smaller_is_better(v.obj);
        json_t *b = det_best_trials(mine, smaller, (size_t)best);
        fprintf(stderr, "det: the %zu best of %zu trials by %s (%s is better)\n",
                json_array_size(b), json_array_size(mine),
                det_get_str(v.obj, "spec.searcher.metric", "the searcher metric"),
                smaller ? "smaller" : "larger");
        json_decref(mine);
        mine = b;
    }
    if (v.fmt != DET_FMT_TABLE) {
        json_t *l = json_pack("{s:s, s:s, s:O}", "apiVersion", "v1", "kind", "List", "items", mine);
        rc = det_print_obj(l, v.fmt);
        json_decref(l);
    } else if (json_array_size(mine) == 0 && best > 0) {
        fprintf(stderr, "det: no trial of experiment %s has reported a validation yet\n", v.name);
    } else if (json_array_size(mine) == 0) {
        fprintf(stderr, "det: experiment %s has no trials yet%s\n", v.name,
                "; kdet-controller creates them once it runs the experiment");
    } else {
        char why[1024] = "";
        json_t *ids = det_ids(&v.k, v.name, why, sizeof(why));
        det_print_trials(mine, ids);
        if (ids == NULL)
            fprintf(stderr, "det: note: no integer ids (ID shows -): %s\n", why);
        json_decref(ids);
    }
out:
    free(sorted);
    json_decref(list);
    json_decref(mine);
    json_decref(all);
    kd_k8s_status_free(&st);
    det_verb_end(&v);
    return rc;
}

/* Names of the trial's pods: status.pods[].name, else pods labelled kdet.io/trial=NAME. */
static int trial_pods(struct det_kube *k, const json_t *trial, const char *name, json_t **pods)
{
    struct kd_k8s_status st = {0};
    json_t *list = NULL;
    char sel[300], err[KD_ERRLEN] = "";
    int rc = DET_EXIT_OK;
    size_t i;
    json_t *p;
    *pods = json_array();
    json_array_foreach(det_get(trial, "status.pods"), i, p)
    {
        const char *pn = det_get_str(p, "name", NULL);
        if (pn)
            json_array_append_new(*pods, json_string(pn));
    }
    if (json_array_size(*pods) > 0)
        goto out;
    snprintf(sel, sizeof(sel), "kdet.io/trial=%s", name);
    struct kd_k8s_query q = {.label_selector = sel};
    int r = kd_k8s_list_all(k->c, &pod_gvr, k->ns, &q, &list, &st, err);
    if (r != 0) {
        rc = det_kube_fail(k, r, &st, err, "list", &pod_gvr, "pod", NULL);
        goto out;
    }
    json_array_foreach(json_object_get(list, "items"), i, p)
    {
        json_array_append_new(*pods, json_string(kd_k8s_meta_str(p, "name")));
    }
out:
    json_decref(list);
    kd_k8s_status_free(&st);
    return rc;
}

static int cmd_describe(int argc, char **argv)
{
    static const char *const flags[] = {"--output", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"TRIAL", NULL};
    static const struct det_verb_spec spec = {.cmd = "det trial describe",
                                              .usage = trial_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .format = true,
                                              .kube = true,
                                              .gvr = &trial_gvr,
                                              .what = "trial",
                                              .obj = true};
    struct det_verb v = {0};
    json_t *pods = NULL;
    char buf[64];
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    const json_t *t = v.obj;
    const char *name = v.name;
    if (v.fmt != DET_FMT_TABLE) {
        rc = det_print_obj(t, v.fmt);
        goto out;
    }
    rc = trial_pods(&v.k, t, name, &pods);
    if (rc != 0)
        goto out;
    char why[1024] = "";
    json_t *ids = det_ids(&v.k, det_get_str(t, "spec.experiment", ""), why, sizeof(why));
    json_t *id = json_object_get(ids, kd_k8s_meta_str(t, "uid") ?: "");
    if (json_is_integer(id))
        printf("ID:           %lld\n", (long long)json_integer_value(id));
    else
        printf("ID:           - (%s)\n", ids ? "the controller has not stored it yet" : why);
    json_decref(ids);
    char *hp = json_dumps(det_get(t, "spec.hparams"),
                          JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
    printf("Name:         %s\n", name);
    printf("Experiment:   %s\n", det_get_str(t, "spec.experiment", ""));
    printf("State:        %s\n",
           det_get_str(t, "status.state", "WAITING for kdet-controller (no status yet)"));
    if (det_get_str(t, "status.message", NULL))
        printf("Message:      %s\n", det_get_str(t, "status.message", ""));
    printf("Hparams:      %s\n", hp ? hp : "{}");
    free(hp);
    json_t *seed = det_get(t, "spec.seed");
    printf("Seed:         %lld\n", (long long)json_integer_value(seed));
    json_t *va = det_get(t, "spec.validateAfter");
    if (json_is_integer(va))
        printf("Target:       %lld %s%s\n", (long long)json_integer_value(va),
               det_get_str(t, "spec.lengthUnit", "batches"),
               json_is_true(det_get(t, "spec.closed")) ? " (closed: last target)" : "");
    json_t *bt = det_get(t, "status.batchesTrained");
    if (json_is_integer(bt))
        printf("Trained:      %lld batches\n", (long long)json_integer_value(bt));
    json_t *rs = det_get(t, "status.restarts");
    if (json_is_integer(rs))
        printf("Restarts:     %lld\n", (long long)json_integer_value(rs));
    json_t *best = det_get(t, "status.bestValidation");
    if (json_is_object(best))
        printf("Best:         %s = %g at %lld batches\n", det_get_str(best, "metric", "?"),
               json_number_value(json_object_get(best, "value")),
               (long long)json_integer_value(json_object_get(best, "batches")));
    json_t *ck = det_get(t, "status.latestCheckpoint");
    if (json_is_object(ck))
        printf("Checkpoint:   %s at %lld batches\n", det_get_str(ck, "uuid", "?"),
               (long long)json_integer_value(json_object_get(ck, "batches")));
    det_fmt_time(det_get_str(t, "status.startTime", NULL), buf, sizeof(buf));
    if (buf[0])
        printf("Started:      %s\n", buf);
    det_fmt_time(det_get_str(t, "status.endTime", NULL), buf, sizeof(buf));
    if (buf[0])
        printf("Ended:        %s\n", buf);
    printf("Pods:        ");
    size_t i;
    json_t *p;
    if (json_array_size(pods) == 0)
        printf(" none");
    json_array_foreach(pods, i, p)
    {
        printf(" %s", json_string_value(p));
    }
    printf("\n");
    fflush(stdout);
out:
    json_decref(pods);
    det_verb_end(&v);
    return rc;
}

/* ---- kill ---------------------------------------------------------------- */

int det_kill_trial_pods(struct det_kube *k, const char *trial)
{
    struct kd_k8s_delete_opts now = {.has_grace_period = true, .grace_period_seconds = 0};
    struct kd_k8s_status st = {0};
    json_t *pods = NULL;
    char sel[320], err[KD_ERRLEN] = "";
    int n = 0;
    snprintf(sel, sizeof(sel), "kdet.io/trial=%s", trial);
    struct kd_k8s_query q = {.label_selector = sel};
    if (kd_k8s_list_all(k->c, &pod_gvr, k->ns, &q, &pods, &st, err) != 0) {
        det_err("warning: listing the pods of trial %s: %s", trial, err);
        goto out;
    }
    size_t j;
    json_t *p;
    json_array_foreach(json_object_get(pods, "items"), j, p)
    {
        int r =
            kd_k8s_delete(k->c, &pod_gvr, k->ns, kd_k8s_meta_str(p, "name"), &now, NULL, &st, err);
        if (r == 0)
            n++;
        else if (r != KD_ENOTFOUND)
            det_err("warning: deleting pod %s: %s", kd_k8s_meta_str(p, "name"), err);
    }
out:
    json_decref(pods);
    kd_k8s_status_free(&st);
    return n;
}

static int cmd_kill(int argc, char **argv)
{
    static const char *const flags[] = {KUBE_FLAGS, NULL};
    static const char *const pos[] = {"TRIAL", NULL};
    static const struct det_verb_spec spec = {.cmd = "det trial kill",
                                              .usage = trial_usage,
                                              .flags = flags,
                                              .pos = pos,
                                              .minpos = 1,
                                              .kube = true,
                                              .api = true,
                                              .gvr = &trial_gvr,
                                              .what = "trial",
                                              .obj = true};
    struct det_verb v = {0};
    struct kd_buf path = KD_BUF_INIT(2048);
    json_t *ans = NULL;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    const char *state = det_get_str(v.obj, "status.state", "");
    if (strcmp(state, "COMPLETED") == 0 || strcmp(state, "CANCELED") == 0 ||
        strcmp(state, "ERROR") == 0) {
        det_err("trial %s has already ended (%s): nothing to kill", v.name, state);
        rc = DET_EXIT_ERROR;
        goto out;
    }
    if (kd_buf_puts(&path, "/api/v1/namespaces/") != 0 || det_urlencode(&path, v.k.ns) != 0 ||
        kd_buf_puts(&path, "/trials/") != 0 || det_urlencode(&path, v.name) != 0 ||
        kd_buf_puts(&path, "/kill") != 0) {
        rc = DET_EXIT_USAGE;
        goto out;
    }
    /* the controller ends it (EarlyExit UserCanceled: not restarted, the searcher is told) */
    rc = det_api_request(&v.api, "POST", kd_buf_str(&path), &ans);
    if (rc != 0)
        goto out;
    int n = det_kill_trial_pods(&v.k, v.name);
    fprintf(stderr,
            "det: trial %s killed: kdet-controller ends it CANCELED and does not restart it; "
            "deleted %d pod%s with grace period 0\n",
            v.name, n, n == 1 ? "" : "s");
out:
    json_decref(ans);
    kd_buf_free(&path);
    det_verb_end(&v);
    return rc;
}

/* ---- logs ---------------------------------------------------------------- */

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

struct stream {
    struct det_kube *k;
    const char *pod;
    const char *container; /* NULL: the only one */
    const char *prefix;    /* "" or "[pod] " */
    const regex_t *grep;   /* only lines matching it; NULL: all */
    bool follow;
    long tail;          /* >= 0: tailLines */
    struct kd_buf line; /* partial line */
    struct kd_buf errbody;
    long http;
    bool waiting; /* 400: the container has not started yet */
    int rc;       /* exit code */
    char curlerr[CURL_ERROR_SIZE];
};

static void emit(struct stream *s, const char *p, size_t n)
{
    if (s->grep != NULL) {
        char *line = kd_xstrndup(p, n);
        line[strcspn(line, "\n")] = '\0';
        bool match = regexec(s->grep, line, 0, NULL, 0) == 0;
        free(line);
        if (!match)
            return;
    }
    pthread_mutex_lock(&out_lock);
    fputs(s->prefix, stdout);
    fwrite(p, 1, n, stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    struct stream *s = ud;
    size_t len = size * n;
    if (s->http >= 300 || s->http == 0) {
        /* an error body: keep it (capped, the rest dropped) for the message */
        if (kd_buf_append(&s->errbody, p, len) != 0)
            return len;
        return len;
    }
    for (size_t i = 0; i < len; i++) {
        if (kd_buf_putc(&s->line, p[i]) != 0 || p[i] == '\n') {
            emit(s, s->line.data, s->line.len);
            kd_buf_reset(&s->line);
            if (p[i] != '\n' && kd_buf_putc(&s->line, p[i]) != 0)
                return 0;
        }
    }
    return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct stream *s = ud;
    size_t len = size * n;
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        if (sp != NULL) {
            long code = 0;
            for (sp++; sp < p + len && *sp >= '0' && *sp <= '9'; sp++)
                code = code * 10 + (*sp - '0');
            s->http = code;
        }
    }
    return len;
}

/* Stream one pod's log to stdout. Sets s->rc. */
static void stream_log(struct stream *s)
{
    struct kd_k8s_config *cfg = &s->k->cfg;
    struct kd_buf url = KD_BUF_INIT(4096);
    struct curl_slist *hl = NULL;
    char *auth = NULL;
    CURL *h = curl_easy_init();
    static const struct kd_k8s_gvr pods = KD_K8S_PODS;
    if (h == NULL)
        kd_oom(1);
    s->rc = DET_EXIT_ERROR;
    if (kd_buf_puts(&url, cfg->server) != 0 ||
        kd_k8s_path(&url, &pods, s->k->ns, s->pod, "log", NULL, NULL) != 0 ||
        kd_buf_printf(&url, "?follow=%s", s->follow ? "true" : "false") != 0 ||
        (s->tail >= 0 && kd_buf_printf(&url, "&tailLines=%ld", s->tail) != 0))
        goto out;
    if (s->container &&
        (kd_buf_puts(&url, "&container=") != 0 || kd_k8s_urlencode(&url, s->container) != 0))
        goto out;
    curl_easy_setopt(h, CURLOPT_URL, kd_buf_str(&url));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "kdet-det");
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, s->curlerr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
    if (!s->follow)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 60000L);
    /* TLS and credentials exactly as lib/k8s sets them */
    if (cfg->ca_data != NULL) {
        struct curl_blob blob = {cfg->ca_data, cfg->ca_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    } else if (cfg->ca_file != NULL) {
        curl_easy_setopt(h, CURLOPT_CAINFO, cfg->ca_file);
    }
    if (cfg->cert_data != NULL) {
        struct curl_blob blob = {cfg->cert_data, cfg->cert_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    } else if (cfg->cert_file != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, cfg->cert_file);
    }
    if (cfg->key_data != NULL) {
        struct curl_blob blob = {cfg->key_data, cfg->key_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (cfg->key_file != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, cfg->key_file);
    }
    if (cfg->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    char *token = cfg->token;
    if (token == NULL && cfg->token_file != NULL &&
        kd_k8s_read_token(cfg->token_file, &token, NULL) != 0)
        token = NULL;
    if (token != NULL) {
        auth = kd_xasprintf("Authorization: Bearer %s", token);
        hl = curl_slist_append(hl, auth);
        if (token != cfg->token)
            free(token);
    } else if (cfg->username != NULL) {
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(h, CURLOPT_USERNAME, cfg->username);
        curl_easy_setopt(h, CURLOPT_PASSWORD, cfg->password ? cfg->password : "");
    }
    hl = curl_slist_append(hl, "Accept: */*");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    CURLcode cc = curl_easy_perform(h);
    if (s->line.len > 0) {
        emit(s, s->line.data, s->line.len);
        emit(s, "\n", 1);
    }
    if (cc != CURLE_OK && s->http == 0) {
        struct kd_k8s_status st = {0};
        snprintf(st.message, sizeof(st.message), "%s",
                 s->curlerr[0] ? s->curlerr : curl_easy_strerror(cc));
        s->rc = det_kube_fail(s->k, KD_ECONNECT, &st, NULL, "get", &pods, "pod", s->pod);
    } else if (s->http >= 300) {
        struct kd_k8s_status st = {0};
        char err[KD_ERRLEN] = "";
        int r = kd_k8s_map_status((int)s->http, s->errbody.data, s->errbody.len, &st, err);
        if (r == KD_EINVAL) {
            /* 400: the container has not started (or the pod has several containers) */
            s->waiting = strstr(st.message, "waiting to start") != NULL ||
                         strstr(st.message, "ContainerCreating") != NULL;
            if (!s->waiting || !s->follow)
                det_err("logs of pod %s: %s", s->pod, st.message);
            s->rc = DET_EXIT_ERROR;
        } else {
            s->rc = det_kube_fail(s->k, r, &st, err, "get", &pods, "pod", s->pod);
        }
        kd_k8s_status_free(&st);
    } else {
        s->rc = DET_EXIT_OK;
    }
out:
    free(auth);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    kd_buf_free(&url);
}

/* stream_log; with -f, a container that has not started yet is waited for (5 min at most). */
static void stream_wait(struct stream *s)
{
    int64_t t0 = kd_mono_ms();
    bool said = false;
    for (;;) {
        s->http = 0;
        s->waiting = false;
        kd_buf_reset(&s->errbody);
        stream_log(s);
        if (!s->follow || !s->waiting || kd_mono_ms() - t0 > 300000)
            break;
        if (!said) {
            pthread_mutex_lock(&out_lock);
            fprintf(stderr, "det: pod %s: waiting for its container to start...\n", s->pod);
            pthread_mutex_unlock(&out_lock);
            said = true;
        }
        kd_sleep_ms(1000);
    }
    if (s->waiting && s->follow)
        det_err("pod %s: its container did not start within 5 minutes", s->pod);
}

static void *stream_thread(void *ud)
{
    stream_wait(ud);
    return NULL;
}

int det_parse_tail(const char *s, long *n)
{
    int64_t v = -1;
    int rc = 0;
    if (s != NULL && (kd_parse_i64(s, &v) != 0 || v < 0 || v > 100000000)) {
        det_err("--tail %s: expected a number of lines (0 or more)", s);
        rc = KD_EINVAL;
    }
    *n = (long)v;
    return rc;
}

static bool ended(const char *state)
{
    return strcmp(state, "COMPLETED") == 0 || strcmp(state, "CANCELED") == 0 ||
           strcmp(state, "ERROR") == 0;
}

/* Say why a trial has no logs to show: not started yet, or its pods (and their logs) are gone. */
static void no_pods(const json_t *t, const char *name)
{
    const char *state = det_get_str(t, "status.state", NULL);
    if (state == NULL || strcmp(state, "QUEUED") == 0)
        det_err("trial %s has no pods yet (state %s): nothing to show yet", name,
                state ? state : "WAITING for kdet-controller");
    else
        det_err("trial %s has no pods (state %s): its logs went with its pods (kdet keeps no "
                "logs once a trial's pods are deleted%s)",
                name, state,
                ended(state) ? "; 'det trial metrics' still has what it reported" : "");
}

/*
 * The streams of one trial into targets ([prefix, pod, container or null]), one per pod, or
 * per container when a pod has several. Returns how many, or -1 after printing an error.
 */
static int trial_targets(struct det_kube *k, const json_t *t, bool by_trial, bool alone,
                         json_t *targets)
{
    struct kd_k8s_status st = {0};
    json_t *pods = NULL, *mine = json_array();
    const char *name = kd_k8s_meta_str(t, "name");
    int n = -1;
    if (trial_pods(k, t, name, &pods) != 0)
        goto out;
    size_t pi;
    json_t *pv;
    json_array_foreach(pods, pi, pv)
    {
        json_t *pod = NULL, *cs;
        const char *pn = json_string_value(pv);
        int gr = kd_k8s_get(k->c, &pod_gvr, k->ns, pn, &pod, &st, NULL);
        if (gr == KD_ENOTFOUND) {
            /* status.pods still names a pod that was deleted: its logs went with it */
        } else if (gr == 0 && json_array_size(cs = det_get(pod, "spec.containers")) > 1) {
            size_t ci;
            json_t *c;
            json_array_foreach(cs, ci, c)
            {
                json_array_append_new(mine, json_pack("[s,s]", pn, det_get_str(c, "name", "")));
            }
        } else {
            json_array_append_new(mine, json_pack("[s,n]", pn));
        }
        json_decref(pod);
    }
    size_t i;
    json_t *tg;
    n = (int)json_array_size(mine);
    json_array_foreach(mine, i, tg)
    {
        const char *pod = json_string_value(json_array_get(tg, 0));
        const char *ctr = json_string_value(json_array_get(tg, 1));
        char *where = ctr ? kd_xasprintf("%s/%s", pod, ctr) : kd_xstrdup(pod), *prefix;
        if (by_trial)
            prefix = n == 1 ? kd_xasprintf("[%s] ", name) : kd_xasprintf("[%s %s] ", name, where);
        else
            prefix = n == 1 && alone ? kd_xstrdup("") : kd_xasprintf("[%s] ", where);
        json_array_append_new(targets, json_pack("[s,s,s?]", prefix, pod, ctr));
        free(where);
        free(prefix);
    }
out:
    json_decref(pods);
    json_decref(mine);
    kd_k8s_status_free(&st);
    return n;
}

int det_trial_logs(struct det_kube *k, const json_t *trials, bool by_trial, bool follow, long tail,
                   const char *grep)
{
    json_t *targets = json_array();
    regex_t re;
    bool have_re = false;
    struct stream *ss = NULL;
    pthread_t *th = NULL;
    size_t n = 0;
    int rc = DET_EXIT_OK;
    size_t ti;
    json_t *t;
    json_array_foreach(trials, ti, t)
    {
        int m = trial_targets(k, t, by_trial, json_array_size(trials) == 1, targets);
        if (m < 0) {
            rc = DET_EXIT_ERROR;
            goto out;
        }
        if (m == 0)
            no_pods(t, kd_k8s_meta_str(t, "name"));
    }
    n = json_array_size(targets);
    if (n == 0) {
        rc = DET_EXIT_NOTFOUND;
        goto out;
    }
    if (grep != NULL) {
        char msg[KD_ERRLEN];
        if (kd_regcomp(&re, grep, REG_EXTENDED | REG_NOSUB, msg) != 0) {
            det_err("--grep %s: %s", grep, msg);
            rc = DET_EXIT_USAGE;
            n = 0;
            goto out;
        }
        have_re = true;
    }
    if (n > MAX_STREAMS) {
        det_err("warning: %zu pod logs; showing the first %d", n, MAX_STREAMS);
        n = MAX_STREAMS;
    }
    ss = kd_xcalloc(n, sizeof(*ss));
    th = kd_xcalloc(n, sizeof(*th));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    for (size_t i = 0; i < n; i++) {
        json_t *tg = json_array_get(targets, i);
        ss[i].k = k;
        ss[i].prefix = json_string_value(json_array_get(tg, 0));
        ss[i].pod = json_string_value(json_array_get(tg, 1));
        ss[i].container = json_string_value(json_array_get(tg, 2));
        ss[i].follow = follow;
        ss[i].tail = tail;
        ss[i].grep = have_re ? &re : NULL;
        kd_buf_init(&ss[i].line, LINE_MAX_BYTES);
        kd_buf_init(&ss[i].errbody, 64 * 1024);
    }
    if (follow && n > 1) {
        for (size_t i = 0; i < n; i++)
            if (pthread_create(&th[i], NULL, stream_thread, &ss[i]) != 0)
                kd_oom(0);
        for (size_t i = 0; i < n; i++)
            pthread_join(th[i], NULL);
    } else {
        for (size_t i = 0; i < n; i++)
            stream_wait(&ss[i]);
    }
    for (size_t i = 0; i < n; i++)
        if (ss[i].rc != 0 && rc == 0)
            rc = ss[i].rc;
out:
    for (size_t i = 0; ss && i < n; i++) {
        kd_buf_free(&ss[i].line);
        kd_buf_free(&ss[i].errbody);
    }
    free(ss);
    free(th);
    json_decref(targets);
    if (have_re)
        regfree(&re);
    return rc;
}

static int cmd_logs(int argc, char **argv)
{
    static const char *const flags[] = {"--follow", "--tail", "--grep", KUBE_FLAGS, NULL};
    static const char *const pos[] = {"TRIAL", NULL};
    static const struct det_verb_spec spec = {
        .cmd = "det trial logs", .usage = trial_usage, .flags = flags, .pos = pos, .minpos = 1};
    struct det_verb v = {0};
    json_t *one = NULL;
    long tail;
    bool done = false;
    int rc = det_verb_begin(&v, argc, argv, &spec);
    if (rc >= 0)
        goto out;
    if (det_parse_tail(v.a.tail, &tail) != 0 || (v.a.grep != NULL && v.a.grep[0] == '\0')) {
        if (v.a.grep != NULL && v.a.grep[0] == '\0')
            det_err("--grep: expected a regular expression");
        rc = DET_EXIT_USAGE;
        goto out;
    }
    /* The controller's store first: it keeps the logs after the pods are gone. */
    rc = det_logs_api_or_pods(&v, false, &trial_gvr, tail, &done);
    if (done)
        goto out;
    if (v.k.c == NULL && (rc = det_kube_open(&v.a, &v.k)) != 0)
        goto out;
    if ((rc = det_resolve(&v.k, &trial_gvr, "trial", v.a.pos[0], &v.name, &v.obj)) != 0)
        goto out;
    one = json_pack("[O]", v.obj);
    rc = det_trial_logs(&v.k, one, false, v.a.follow, tail, v.a.grep);
out:
    json_decref(one);
    det_verb_end(&v);
    return rc;
}

int det_cmd_trial(int argc, char **argv)
{
    static const struct det_sub subs[] = {
        {"list", "ls", det_trial_list},
        {"describe", NULL, cmd_describe},
        {"logs", NULL, cmd_logs},
        {"metrics", NULL, det_trial_metrics},
        {"profiler", NULL, det_trial_profiler},
        {"kill", NULL, cmd_kill},
        {NULL, NULL, NULL},
    };
    return det_dispatch(argc, argv, subs, trial_usage, "det trial");
}
