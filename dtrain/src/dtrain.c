/*
 * The libdtrain handle: options from the kdet-launch environment, init and
 * finalize, hyperparameter accessors, error messages, and the entry points
 * of the collectives, which check their arguments and hand them to the
 * transport chosen at rendezvous.
 */
#include "internal.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

#define DEFAULT_RDV_MS 300000
#define DEFAULT_OP_MS 600000
#define DEFAULT_FUSION (64u << 20)
#define FINALIZE_MS 30000

int dt_err(struct dtrain *h, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&h->err_lock);
    vsnprintf(h->err, sizeof(h->err), fmt, ap);
    pthread_mutex_unlock(&h->err_lock);
    va_end(ap);
    return code;
}

const char *dtrain_errmsg(const struct dtrain *h)
{
    return h != NULL ? h->err : "";
}

const char *dtrain_strerror(int code)
{
    return kd_strerror(code);
}

void dtrain_opts_default(struct dtrain_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->world_size = 1;
    o->local_rank = o->local_world_size = o->group_rank = -1;
    o->cuda_device = -1;
    o->transport = DTRAIN_TRANSPORT_AUTO;
}

static int env_int(const char *name, int *out, int lo, int hi, bool required, char *err)
{
    const char *v = getenv(name);
    int x = 0;
    if (v == NULL || *v == '\0')
        return required ? kd_seterr(err, DTRAIN_EINVAL, "environment: %s is not set", name) : 0;
    if (kd_parse_int(v, &x) < 0 || x < lo || x > hi)
        return kd_seterr(err, DTRAIN_EINVAL, "environment: %s=%s: expected an integer in %d..%d",
                         name, v, lo, hi);
    *out = x;
    return 0;
}

static int env_seconds(const char *name, int *ms, char *err)
{
    const char *v = getenv(name);
    double s = 0;
    if (v == NULL || *v == '\0')
        return 0;
    if (kd_parse_double(v, &s) < 0 || !(s > 0) || s > 1e6)
        return kd_seterr(err, DTRAIN_EINVAL, "environment: %s=%s: expected seconds (> 0)", name, v);
    *ms = (int)(s * 1000.0 + 0.5);
    if (*ms < 1)
        *ms = 1;
    return 0;
}

int dtrain_opts_from_env(struct dtrain_opts *o, char *err)
{
    int rc = 0, world = 1;
    dtrain_opts_default(o);
    if ((rc = env_int("WORLD_SIZE", &world, 1, DT_MAX_WORLD, false, err)) < 0)
        goto out;
    o->world_size = world;
    if ((rc = env_int("RANK", &o->rank, 0, world - 1, world > 1, err)) < 0)
        goto out;
    if ((rc = env_int("LOCAL_RANK", &o->local_rank, 0, DT_MAX_WORLD, false, err)) < 0 ||
        (rc = env_int("LOCAL_WORLD_SIZE", &o->local_world_size, 1, DT_MAX_WORLD, false, err)) < 0 ||
        (rc = env_int("GROUP_RANK", &o->group_rank, 0, DT_MAX_WORLD, false, err)) < 0 ||
        (rc = env_int("MASTER_PORT", &o->master_port, 1, 65535, world > 1, err)) < 0 ||
        (rc = env_int("DTRAIN_CUDA_DEVICE", &o->cuda_device, 0, 1024, false, err)) < 0)
        goto out;
    o->master_addr = getenv("MASTER_ADDR");
    if (world > 1 && (o->master_addr == NULL || *o->master_addr == '\0')) {
        rc = kd_seterr(err, DTRAIN_EINVAL, "environment: MASTER_ADDR is not set (WORLD_SIZE=%d)",
                       world);
        goto out;
    }
    o->run_id = getenv("KDET_RUN_ID");
    o->hparams_json = getenv("KDET_HPARAMS");
    o->trial_id = getenv("KDET_TRIAL_ID");
    o->controller_url = getenv("KDET_CONTROLLER_URL");
    o->token = getenv("KDET_TOKEN");
    const char *v = getenv("KDET_TRIAL_SEED");
    if (v != NULL && *v != '\0' && kd_parse_i64(v, &o->trial_seed) < 0) {
        rc = kd_seterr(err, DTRAIN_EINVAL, "environment: KDET_TRIAL_SEED=%s: expected an integer",
                       v);
        goto out;
    }
    v = getenv("DTRAIN_TRANSPORT");
    if (v != NULL && *v != '\0' && dtrain_transport_parse(v, &o->transport) < 0) {
        rc = kd_seterr(err, DTRAIN_EINVAL,
                       "environment: DTRAIN_TRANSPORT=%s: expected auto, tcp, shm or nccl", v);
        goto out;
    }
    if ((rc = env_seconds("DTRAIN_TIMEOUT", &o->op_timeout_ms, err)) < 0 ||
        (rc = env_seconds("DTRAIN_RENDEZVOUS_TIMEOUT", &o->rendezvous_timeout_ms, err)) < 0)
        goto out;
    v = getenv("DTRAIN_FUSION_THRESHOLD");
    uint64_t sz = 0;
    if (v != NULL && *v != '\0') {
        if (kd_parse_size(v, &sz) < 0 || sz == 0 || sz > (1ull << 34)) {
            rc = kd_seterr(err, DTRAIN_EINVAL,
                           "environment: DTRAIN_FUSION_THRESHOLD=%s: expected a size such as "
                           "64MiB",
                           v);
            goto out;
        }
        o->fusion_threshold = (size_t)sz;
    }
    int fp16 = 0;
    if ((rc = env_int("DTRAIN_FP16_COMPRESSION", &fp16, 0, 1, false, err)) < 0)
        goto out;
    o->fp16_compression = fp16;
out:
    return rc;
}

static char *dup_or_empty(const char *s)
{
    return strdup(s != NULL ? s : "");
}

static void host_id(char *out, size_t len)
{
    char hn[64] = "", boot[64] = "";
    if (gethostname(hn, sizeof(hn) - 1) < 0)
        kd_strlcpy(hn, "unknown", sizeof(hn));
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    snprintf(out, len, "%s/%s", hn, boot);
}

static void handle_free(struct dtrain *h)
{
    if (h == NULL)
        return;
    if (h->ops != NULL && h->ops->teardown != NULL)
        h->ops->teardown(h);
    if (h->ctrl_fds != NULL) {
        for (int r = 0; r < h->world; r++)
            if (h->ctrl_fds[r] >= 0)
                close(h->ctrl_fds[r]);
    }
    if (h->ctrl_fd >= 0)
        close(h->ctrl_fd);
    if (h->data_listen_fd >= 0)
        close(h->data_listen_fd);
    if (h->dead_efd >= 0)
        close(h->dead_efd);
    for (int i = 0; i < 2; i++)
        if (h->monitor_wake[i] >= 0)
            close(h->monitor_wake[i]);
    dt_grads_free(h);
    json_decref(h->hparams);
    free(h->hparams_str);
    free(h->ctrl_fds);
    free(h->bye_seen);
    free(h->peers);
    free(h->master_addr);
    free(h->run_id);
    free(h->trial_id);
    free(h->controller_url);
    free(h->token);
    pthread_mutex_destroy(&h->op_lock);
    pthread_mutex_destroy(&h->err_lock);
    pthread_mutex_destroy(&h->ctrl_lock);
    pthread_mutex_destroy(&h->q_lock);
    pthread_cond_destroy(&h->q_cond);
    pthread_cond_destroy(&h->mon_cond);
    free(h);
}

static int check_opts(const struct dtrain_opts *o, char *err)
{
    if (o->world_size < 1 || o->world_size > DT_MAX_WORLD)
        return kd_seterr(err, DTRAIN_EINVAL, "world_size %d out of range 1..%d", o->world_size,
                         DT_MAX_WORLD);
    if (o->rank < 0 || o->rank >= o->world_size)
        return kd_seterr(err, DTRAIN_EINVAL, "rank %d out of range 0..%d", o->rank,
                         o->world_size - 1);
    if (o->world_size > 1 && (o->master_port < 1 || o->master_port > 65535))
        return kd_seterr(err, DTRAIN_EINVAL, "master_port %d out of range 1..65535",
                         o->master_port);
    if (o->world_size > 1 && (o->master_addr == NULL || *o->master_addr == '\0'))
        return kd_seterr(err, DTRAIN_EINVAL, "master_addr is required when world_size > 1");
    if ((unsigned)o->transport > DTRAIN_TRANSPORT_NCCL)
        return kd_seterr(err, DTRAIN_EINVAL, "transport %d unknown", (int)o->transport);
    if (o->run_id != NULL && strlen(o->run_id) >= DT_RUNIDLEN)
        return kd_seterr(err, DTRAIN_EINVAL, "run_id longer than %d bytes", DT_RUNIDLEN - 1);
    return 0;
}

static int world_one(struct dtrain *h, char *err)
{
    int rc = 0;
    if (h->o.transport != DTRAIN_TRANSPORT_NCCL) {
        h->transport = DTRAIN_TRANSPORT_AUTO; /* "local": nothing to talk to */
        return 0;
    }
    char e[KD_ERRLEN];
    if ((rc = dt_nccl_get_id(h, h->nccl_id, e)) < 0)
        return kd_seterr(err, rc, "transport nccl: %s", e);
    h->have_nccl_id = 1;
    h->transport = DTRAIN_TRANSPORT_NCCL;
    h->ops = &dt_nccl_ops;
    if ((rc = h->ops->setup(h)) < 0)
        kd_seterr(err, rc, "transport nccl: %s", h->err);
    return rc;
}

int dtrain_init_opts(const struct dtrain_opts *o, struct dtrain **out, char *err)
{
    int rc = 0;
    struct dtrain *h = NULL;
    if (o == NULL || out == NULL) {
        rc = kd_seterr(err, DTRAIN_EINVAL, "dtrain_init_opts: NULL argument");
        goto out;
    }
    if ((rc = check_opts(o, err)) < 0)
        goto out;
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        rc = kd_seterr(err, DTRAIN_ENOMEM, "out of memory");
        goto out;
    }
    h->ctrl_fd = h->data_listen_fd = h->dead_efd = -1;
    h->monitor_wake[0] = h->monitor_wake[1] = -1;
    atomic_init(&h->dead_rank, -1);
    pthread_mutex_init(&h->op_lock, NULL);
    pthread_mutex_init(&h->err_lock, NULL);
    pthread_mutex_init(&h->ctrl_lock, NULL);
    pthread_mutex_init(&h->q_lock, NULL);
    pthread_cond_init(&h->q_cond, NULL);
    pthread_cond_init(&h->mon_cond, NULL);
    h->o = *o;
    h->rank = o->rank;
    h->world = o->world_size;
    if (h->o.rendezvous_timeout_ms <= 0)
        h->o.rendezvous_timeout_ms = DEFAULT_RDV_MS;
    if (h->o.op_timeout_ms <= 0)
        h->o.op_timeout_ms = DEFAULT_OP_MS;
    if (h->o.fusion_threshold == 0)
        h->o.fusion_threshold = DEFAULT_FUSION;
    h->master_addr = dup_or_empty(o->master_addr);
    h->run_id = dup_or_empty(o->run_id);
    h->trial_id = dup_or_empty(o->trial_id);
    h->controller_url = dup_or_empty(o->controller_url);
    h->token = dup_or_empty(o->token);
    h->peers = calloc((size_t)h->world, sizeof(*h->peers));
    h->ctrl_fds = malloc((size_t)h->world * sizeof(int));
    h->bye_seen = calloc((size_t)h->world, 1);
    if (!h->master_addr || !h->run_id || !h->trial_id || !h->controller_url || !h->token ||
        !h->peers || !h->ctrl_fds || !h->bye_seen) {
        rc = kd_seterr(err, DTRAIN_ENOMEM, "out of memory");
        goto out;
    }
    /* Never let the token reach a log line or an error message. */
    kd_log_add_secret(h->token);
    h->o.master_addr = h->o.run_id = h->o.hparams_json = h->o.trial_id = NULL;
    h->o.controller_url = h->o.token = NULL;
    for (int r = 0; r < h->world; r++)
        h->ctrl_fds[r] = -1;
    json_error_t je;
    h->hparams =
        json_loads(o->hparams_json != NULL && *o->hparams_json ? o->hparams_json : "{}", 0, &je);
    if (h->hparams == NULL || !json_is_object(h->hparams)) {
        rc = kd_seterr(err, DTRAIN_EPARSE,
                       h->hparams ? "KDET_HPARAMS: expected a JSON object"
                                  : "KDET_HPARAMS: line %d column %d: %s",
                       je.line, je.column, je.text);
        goto out;
    }
    h->hparams_str = json_dumps(h->hparams, JSON_COMPACT | JSON_SORT_KEYS);
    if (h->hparams_str == NULL) {
        rc = kd_seterr(err, DTRAIN_ENOMEM, "out of memory");
        goto out;
    }
    host_id(h->host, sizeof(h->host));
    if (h->world == 1) {
        if ((rc = world_one(h, err)) < 0)
            goto out;
        *out = h;
        h = NULL;
        goto out;
    }
    h->dead_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->dead_efd < 0) {
        rc = kd_seterr(err, -errno, "eventfd: %s", strerror(errno));
        goto out;
    }
    char e[KD_ERRLEN];
    if ((rc = dt_listen(0, 16, &h->data_listen_fd, &h->peers[h->rank].data_port, e)) < 0) {
        rc = kd_seterr(err, rc, "data listener: %s", e);
        goto out;
    }
    kd_strlcpy(h->peers[h->rank].host, h->host, sizeof(h->peers[h->rank].host));
    h->peers[h->rank].pid = (int)getpid();
    if ((rc = dt_rendezvous(h, err)) < 0)
        goto out;
    if ((rc = dt_monitor_start(h)) < 0) {
        kd_seterr(err, rc, "%s", h->err);
        goto out;
    }
    KD_INFO("dtrain joined", "rank=%d world_size=%d transport=%s", h->rank, h->world,
            dtrain_transport_name(h));
    *out = h;
    h = NULL;
out:
    handle_free(h);
    return rc;
}

int dtrain_init(struct dtrain **out, char *err)
{
    struct dtrain_opts o;
    int rc = dtrain_opts_from_env(&o, err);
    if (rc == 0)
        rc = dtrain_init_opts(&o, out, err);
    return rc;
}

int dtrain_finalize(struct dtrain *h)
{
    int rc = 0;
    if (h == NULL)
        return 0;
    dt_async_stop(h);
    if (h->world > 1)
        rc = dt_monitor_shutdown(h, FINALIZE_MS);
    handle_free(h);
    return rc;
}

int dtrain_rank(const struct dtrain *h)
{
    return h->rank;
}

int dtrain_world_size(const struct dtrain *h)
{
    return h->world;
}

int dtrain_local_rank(const struct dtrain *h)
{
    return h->o.local_rank >= 0 ? h->o.local_rank : h->rank;
}

int dtrain_local_world_size(const struct dtrain *h)
{
    return h->o.local_world_size >= 0 ? h->o.local_world_size : h->world;
}

int64_t dtrain_trial_seed(const struct dtrain *h)
{
    return h->o.trial_seed;
}

const char *dtrain_transport_name(const struct dtrain *h)
{
    return h->ops != NULL ? h->ops->name : "local";
}

size_t dtrain_dtype_size(enum dtrain_dtype t)
{
    static const size_t sz[DTRAIN_DTYPE_COUNT] = {4, 2, 2, 8, 4, 8};
    return (unsigned)t < DTRAIN_DTYPE_COUNT ? sz[t] : 0;
}

int dtrain_dtype_parse(const char *s, enum dtrain_dtype *out)
{
    static const struct {
        const char *name;
        enum dtrain_dtype t;
    } names[] = {
        {"float32", DTRAIN_FLOAT32},   {"f32", DTRAIN_FLOAT32},   {"float", DTRAIN_FLOAT32},
        {"float16", DTRAIN_FLOAT16},   {"fp16", DTRAIN_FLOAT16},  {"half", DTRAIN_FLOAT16},
        {"bfloat16", DTRAIN_BFLOAT16}, {"bf16", DTRAIN_BFLOAT16}, {"float64", DTRAIN_FLOAT64},
        {"double", DTRAIN_FLOAT64},    {"int32", DTRAIN_INT32},   {"int64", DTRAIN_INT64}};
    for (size_t i = 0; s != NULL && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].t;
            return 0;
        }
    }
    return DTRAIN_EINVAL;
}

int dtrain_op_parse(const char *s, enum dtrain_op *out)
{
    static const char *const names[] = {"sum", "avg", "min", "max"};
    for (int i = 0; s != NULL && i < DTRAIN_OP_COUNT; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            *out = (enum dtrain_op)i;
            return 0;
        }
    }
    if (s != NULL && strcasecmp(s, "mean") == 0) {
        *out = DTRAIN_AVG;
        return 0;
    }
    return DTRAIN_EINVAL;
}

int dtrain_transport_parse(const char *s, enum dtrain_transport *out)
{
    static const char *const names[] = {"auto", "tcp", "shm", "nccl"};
    for (int i = 0; s != NULL && i < 4; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            *out = (enum dtrain_transport)i;
            return 0;
        }
    }
    return DTRAIN_EINVAL;
}

/* ---- hyperparameters ---------------------------------------------------- */

static int hparam_get(struct dtrain *h, const char *name, json_t **out)
{
    json_t *cur = h->hparams;
    const char *p = name;
    if (name == NULL || *name == '\0')
        return dt_err(h, DTRAIN_EINVAL, "hyperparameter name is empty");
    while (cur != NULL) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        cur = json_is_object(cur) ? json_object_getn(cur, p, n) : NULL;
        if (dot == NULL)
            break;
        p = dot + 1;
    }
    if (cur == NULL)
        return dt_err(h, DTRAIN_ENOTFOUND, "hyperparameter %s is not set in KDET_HPARAMS", name);
    *out = cur;
    return 0;
}

static const char *json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

int dtrain_hparam_double(struct dtrain *h, const char *name, double *out)
{
    json_t *j = NULL;
    int rc = hparam_get(h, name, &j);
    if (rc < 0)
        return rc;
    if (!json_is_number(j))
        return dt_err(h, DTRAIN_EINVAL, "hyperparameter %s: expected a number, got %s", name,
                      json_type_name(j));
    *out = json_number_value(j);
    return 0;
}

int dtrain_hparam_int(struct dtrain *h, const char *name, int64_t *out)
{
    json_t *j = NULL;
    int rc = hparam_get(h, name, &j);
    if (rc < 0)
        return rc;
    if (json_is_real(j)) {
        double d = json_real_value(j);
        if (d == (double)(int64_t)d && d > -9e18 && d < 9e18) {
            *out = (int64_t)d;
            return 0;
        }
    }
    if (!json_is_integer(j))
        return dt_err(h, DTRAIN_EINVAL, "hyperparameter %s: expected an integer, got %s", name,
                      json_type_name(j));
    *out = json_integer_value(j);
    return 0;
}

int dtrain_hparam_string(struct dtrain *h, const char *name, const char **out)
{
    json_t *j = NULL;
    int rc = hparam_get(h, name, &j);
    if (rc < 0)
        return rc;
    if (!json_is_string(j))
        return dt_err(h, DTRAIN_EINVAL, "hyperparameter %s: expected a string, got %s", name,
                      json_type_name(j));
    *out = json_string_value(j);
    return 0;
}

const char *dtrain_hparams_json(const struct dtrain *h)
{
    return h->hparams_str;
}

/* ---- collectives -------------------------------------------------------- */

int dt_check_dead(struct dtrain *h)
{
    int r = atomic_load(&h->dead_rank);
    if (r < 0)
        return 0;
    const struct dt_peer *p = &h->peers[r];
    return dt_err(h, DTRAIN_EPEER, "rank %d (pid %d on %s) died or lost its connection", r,
                  r == h->rank ? (int)getpid() : p->pid, p->host[0] ? p->host : "?");
}

int dt_peer_failed(struct dtrain *h, int suspect, const char *what, int grace_ms)
{
    if (atomic_load(&h->dead_rank) < 0 && h->dead_efd >= 0) {
        struct pollfd p = {.fd = h->dead_efd, .events = POLLIN};
        (void)poll(&p, 1, grace_ms);
    }
    if (atomic_load(&h->dead_rank) >= 0)
        return dt_check_dead(h);
    const struct dt_peer *p = &h->peers[suspect];
    return dt_err(h, DTRAIN_EPEER, "rank %d (pid %d on %s): %s", suspect, p->pid, p->host, what);
}

static const char *kind_name(enum dt_kind k)
{
    static const char *const n[] = {"allreduce", "broadcast", "allgather", "barrier"};
    return n[k];
}

int dt_run(struct dtrain *h, enum dt_kind kind, void *buf, const void *in, size_t count,
           enum dtrain_dtype dtype, enum dtrain_op op, int root)
{
    int rc = 0;
    size_t es = dtrain_dtype_size(dtype);
    pthread_mutex_lock(&h->op_lock);
    if (h->broken) {
        rc = dt_err(h, DTRAIN_ESTATE, "%s: an earlier collective failed (%s); restart the job",
                    kind_name(kind), h->err);
        goto out;
    }
    if (h->ops == NULL) { /* world size 1 */
        if (kind == DT_OP_ALLGATHER && count > 0 && buf != in)
            memmove(buf, in, count * es);
        goto out;
    }
    switch (kind) {
    case DT_OP_ALLREDUCE:
        rc = h->ops->allreduce(h, buf, count, dtype, op);
        if (rc == 0 && op == DTRAIN_AVG && h->transport != DTRAIN_TRANSPORT_NCCL)
            dt_scale_avg(buf, count, dtype, h->world);
        break;
    case DT_OP_BROADCAST: rc = h->ops->broadcast(h, buf, count * es, root); break;
    case DT_OP_ALLGATHER: rc = h->ops->allgather(h, in, buf, count * es); break;
    case DT_OP_BARRIER: rc = h->ops->barrier(h); break;
    }
    if (rc == DTRAIN_EPEER || rc == DTRAIN_ETIMEDOUT || rc == -EPIPE || rc == -ECONNRESET)
        h->broken = true;
out:
    pthread_mutex_unlock(&h->op_lock);
    return rc;
}

static int check_args(struct dtrain *h, const char *what, const void *buf, size_t count,
                      enum dtrain_dtype dtype, int op)
{
    if (h == NULL)
        return DTRAIN_EINVAL;
    if (dtrain_dtype_size(dtype) == 0)
        return dt_err(h, DTRAIN_EINVAL, "%s: dtype %d unknown", what, (int)dtype);
    if (op < 0 || op >= DTRAIN_OP_COUNT)
        return dt_err(h, DTRAIN_EINVAL, "%s: op %d unknown", what, op);
    if (count > 0 && buf == NULL)
        return dt_err(h, DTRAIN_EINVAL, "%s: buffer is NULL with count %zu", what, count);
    if (count > ((size_t)1 << 40) / dtrain_dtype_size(dtype))
        return dt_err(h, DTRAIN_ETOOBIG, "%s: count %zu too large", what, count);
    return 0;
}

int dtrain_allreduce(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype,
                     enum dtrain_op op)
{
    int rc = check_args(h, "allreduce", buf, count, dtype, (int)op);
    if (rc < 0)
        return rc;
    return dt_submit(h, DT_OP_ALLREDUCE, buf, NULL, count, dtype, op, 0);
}

int dtrain_broadcast(struct dtrain *h, void *buf, size_t count, enum dtrain_dtype dtype, int root)
{
    int rc = check_args(h, "broadcast", buf, count, dtype, 0);
    if (rc < 0)
        return rc;
    if (root < 0 || root >= h->world)
        return dt_err(h, DTRAIN_EINVAL, "broadcast: root %d out of range 0..%d", root,
                      h->world - 1);
    return dt_submit(h, DT_OP_BROADCAST, buf, NULL, count, dtype, DTRAIN_SUM, root);
}

int dtrain_allgather(struct dtrain *h, const void *in, void *out, size_t count,
                     enum dtrain_dtype dtype)
{
    int rc = check_args(h, "allgather", out, count, dtype, 0);
    if (rc < 0)
        return rc;
    if (count > 0 && in == NULL)
        return dt_err(h, DTRAIN_EINVAL, "allgather: input buffer is NULL with count %zu", count);
    return dt_submit(h, DT_OP_ALLGATHER, out, in, count, dtype, DTRAIN_SUM, 0);
}

int dtrain_barrier(struct dtrain *h)
{
    if (h == NULL)
        return DTRAIN_EINVAL;
    return dt_submit(h, DT_OP_BARRIER, NULL, NULL, 0, DTRAIN_INT32, DTRAIN_SUM, 0);
}
