/*
 * The launcher's environment contract (see env.h): inputs read and checked
 * once at start-up, slot detection (CUDA_VISIBLE_DEVICES, then NVML through
 * dlopen so that the launcher runs where no GPU driver exists), and the
 * per-worker environment in the torch.distributed env:// convention.
 */
#include "env.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

extern char **environ;

/* An optional integer input in [lo, hi]; def when unset. */
static int env_int(const char *name, int def, int lo, int hi, int *out, char *err)
{
    const char *v = getenv(name);
    int rc = 0;
    *out = def;
    if (v == NULL)
        goto out;
    if (kd_parse_int(v, out) < 0) {
        rc = kd_seterr(err, KD_EINVAL, "%s=%s: not an integer", name, kd_logq(v));
        goto out;
    }
    if (*out < lo || *out > hi)
        rc = kd_seterr(err, KD_EINVAL, "%s=%s: must be between %d and %d", name, v, lo, hi);
out:
    return rc;
}

/* A string input with a length cap. The value is named in the error
 * message only when show_value is set (never for the token). */
static int env_str(const char *name, size_t max, int show_value, const char **out, char *err)
{
    const char *v = getenv(name);
    int rc = 0;
    *out = v;
    if (v != NULL && strlen(v) > max) {
        if (show_value)
            rc = kd_seterr(err, KD_EINVAL, "%s: %zu bytes, longer than the limit of %zu", name,
                           strlen(v), max);
        else
            rc = kd_seterr(err, KD_EINVAL, "%s: longer than the limit of %zu bytes", name, max);
    }
    return rc;
}

static int check_addr(const char *name, const char *v, char *err)
{
    int rc = 0;
    if (v[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL, "%s is empty: give a host name or an IP address", name);
        goto out;
    }
    if (strlen(v) > KD_LAUNCH_MAX_ADDR) {
        rc = kd_seterr(err, KD_EINVAL, "%s: longer than %d bytes", name, KD_LAUNCH_MAX_ADDR);
        goto out;
    }
    for (size_t i = 0; v[i]; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c <= ' ' || c >= 0x7f || c == ',' || c == '/' || c == '@') {
            rc = kd_seterr(err, KD_EINVAL,
                           "%s=%s: character %zu is not allowed in a host name or address", name,
                           kd_logq(v), i + 1);
            goto out;
        }
    }
out:
    return rc;
}

static int check_run_id(const char *v, char *err)
{
    int rc = 0;
    size_t n = strlen(v);
    if (n == 0 || n > KD_LAUNCH_MAX_RUN_ID) {
        rc = kd_seterr(err, KD_EINVAL, "KDET_RUN_ID: must be 1 to %d characters, got %zu",
                       KD_LAUNCH_MAX_RUN_ID, n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-')) {
            rc = kd_seterr(err, KD_EINVAL,
                           "KDET_RUN_ID=%s: character %zu is not one of A-Z a-z 0-9 . _ -",
                           kd_logq(v), i + 1);
            goto out;
        }
    }
out:
    return rc;
}

static void make_run_id(char *out, size_t len)
{
    uint8_t r[8];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        /* No entropy source: time and pid are unique enough per attempt. */
        uint64_t x = (uint64_t)kd_wall_ms() * 2654435761u ^ (uint64_t)getpid();
        memcpy(r, &x, sizeof(r));
    }
    snprintf(out, len, "%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5], r[6],
             r[7]);
}

static int check_hparams(const char *v, char *err)
{
    json_error_t jerr;
    int rc = 0;
    json_t *j = json_loads(v, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL) {
        rc = kd_seterr(err, KD_EINVAL, "KDET_HPARAMS: invalid JSON at line %d column %d: %s",
                       jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(j))
        rc = kd_seterr(err, KD_EINVAL, "KDET_HPARAMS: must be a JSON object, got a JSON %s",
                       json_is_array(j)    ? "array"
                       : json_is_string(j) ? "string"
                       : json_is_number(j) ? "number"
                                           : "literal");
out:
    json_decref(j);
    return rc;
}

int kd_launch_env_load(struct kd_launch_env *e, char *err)
{
    int rc = 0;
    const char *v;
    memset(e, 0, sizeof(*e));
    e->grace_s = KD_LAUNCH_DEFAULT_GRACE_S;

    /* The token first, so that it is redacted from anything said below. */
    if ((rc = env_str("KDET_TOKEN", KD_LAUNCH_MAX_VALUE, 0, &v, err)) < 0)
        goto out;
    if (v != NULL) {
        kd_log_add_secret(v);
        e->token_set = true;
    }
    if ((rc = env_int("KDET_NUM_NODES", 1, 1, KD_LAUNCH_MAX_NODES, &e->num_nodes, err)) < 0)
        goto out;
    if ((rc = env_int("KDET_NODE_RANK", 0, 0, KD_LAUNCH_MAX_NODES - 1, &e->node_rank, err)) < 0)
        goto out;
    if (e->node_rank >= e->num_nodes) {
        rc = kd_seterr(err, KD_EINVAL, "KDET_NODE_RANK=%d: must be less than KDET_NUM_NODES=%d",
                       e->node_rank, e->num_nodes);
        goto out;
    }
    if ((rc = env_int("KDET_MASTER_PORT", KD_LAUNCH_DEFAULT_PORT, 1, 65535, &e->master_port, err)) <
        0)
        goto out;
    /* The controller always sets KDET_MASTER_PORT (29400 unless configured
     * otherwise), so only another value counts as chosen. On one node a
     * MASTER_PORT from the experiment's environment wins; with several
     * nodes every pod must agree, so KDET_MASTER_PORT alone counts. */
    e->port_source = e->master_port != KD_LAUNCH_DEFAULT_PORT ? "KDET_MASTER_PORT" : "default";
    if (e->num_nodes == 1 && getenv("MASTER_PORT") != NULL) {
        if ((rc = env_int("MASTER_PORT", KD_LAUNCH_DEFAULT_PORT, 1, 65535, &e->master_port, err)) <
            0)
            goto out;
        e->port_source = "MASTER_PORT";
    }

    v = getenv("KDET_CHIEF_ADDR");
    if (v == NULL)
        v = KD_LAUNCH_DEFAULT_ADDR;
    if ((rc = check_addr("KDET_CHIEF_ADDR", v, err)) < 0)
        goto out;
    kd_strlcpy(e->chief_addr, v, sizeof(e->chief_addr));

    v = getenv("KDET_GRACE_PERIOD");
    if (v != NULL) {
        if (kd_parse_double(v, &e->grace_s) < 0 || !(e->grace_s >= 0) ||
            e->grace_s > KD_LAUNCH_MAX_GRACE_S) {
            rc = kd_seterr(err, KD_EINVAL,
                           "KDET_GRACE_PERIOD=%s: must be a number of seconds from 0 to %.0f",
                           kd_logq(v), KD_LAUNCH_MAX_GRACE_S);
            goto out;
        }
    }

    v = getenv("KDET_RUN_ID");
    if (v != NULL) {
        if ((rc = check_run_id(v, err)) < 0)
            goto out;
        kd_strlcpy(e->run_id, v, sizeof(e->run_id));
    } else {
        make_run_id(e->run_id, sizeof(e->run_id));
        e->run_id_made = true;
    }

    if ((rc = env_str("KDET_TRIAL_ID", KD_LAUNCH_MAX_VALUE, 1, &e->trial, err)) < 0)
        goto out;
    if ((rc = env_str("KDET_EXPERIMENT", KD_LAUNCH_MAX_VALUE, 1, &v, err)) < 0)
        goto out;
    if ((rc = env_str("KDET_CONTROLLER_URL", KD_LAUNCH_MAX_VALUE, 1, &v, err)) < 0)
        goto out;
    if (v != NULL && v[0] != '\0' && !kd_str_has_prefix(v, "http://") &&
        !kd_str_has_prefix(v, "https://")) {
        rc = kd_seterr(err, KD_EINVAL,
                       "KDET_CONTROLLER_URL=%s: must start with http:// or https://", kd_logq(v));
        goto out;
    }

    v = getenv("KDET_TRIAL_SEED");
    if (v != NULL) {
        uint64_t seed;
        if (kd_parse_u64(v, &seed) < 0 || seed > UINT32_MAX) {
            rc = kd_seterr(err, KD_EINVAL,
                           "KDET_TRIAL_SEED=%s: must be an integer from 0 to 4294967295",
                           kd_logq(v));
            goto out;
        }
    }
    if ((rc = env_str("KDET_HPARAMS", KD_LAUNCH_MAX_HPARAMS, 1, &v, err)) < 0)
        goto out;
    if (v != NULL && (rc = check_hparams(v, err)) < 0)
        goto out;

    if ((rc = env_str("KDET_PYTHON", KD_LAUNCH_MAX_VALUE, 1, &e->python, err)) < 0)
        goto out;
    if (e->python == NULL || e->python[0] == '\0')
        e->python = "python3";
out:
    return rc;
}

int kd_launch_env_pick_port(struct kd_launch_env *e, char *err)
{
    int rc = 0, fd = -1;
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (e->num_nodes != 1 || strcmp(e->port_source, "default") != 0)
        goto out;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = 0;
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        rc = kd_seterr(err, -errno, "cannot pick a free rendezvous port: %s", strerror(errno));
        goto out;
    }
    e->master_port = ntohs(sa.sin_port);
    e->port_source = "picked";
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

int kd_launch_cuda_count(const char *val)
{
    int n = 0;
    if (val == NULL)
        return -1;
    if (strcasecmp(val, "none") == 0 || strcasecmp(val, "void") == 0 ||
        strcmp(val, "NoDevFiles") == 0)
        return 0;
    /* CUDA uses the entries up to the first invalid one, as we do. */
    const char *p = val;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == 0 || p[0] == '-')
            break;
        n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return n;
}

typedef int (*nvml_fn0)(void);
typedef int (*nvml_count_fn)(unsigned int *);

int kd_launch_nvml_count(void)
{
    int rc = KD_ENOTSUP;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        goto out;
    nvml_fn0 init = (nvml_fn0)dlsym(h, "nvmlInit_v2");
    nvml_fn0 shutdown = (nvml_fn0)dlsym(h, "nvmlShutdown");
    nvml_count_fn count = (nvml_count_fn)dlsym(h, "nvmlDeviceGetCount_v2");
    if (init == NULL || shutdown == NULL || count == NULL)
        goto out;
    if (init() != 0) {
        rc = KD_EIO;
        goto out;
    }
    unsigned int n = 0;
    rc = count(&n) == 0 ? (int)n : KD_EIO;
    shutdown();
out:
    if (h != NULL)
        dlclose(h);
    return rc;
}

int kd_launch_slots(int nproc_flag, const char **source)
{
    const char *src = "default";
    int n = 1;
    if (nproc_flag > 0) {
        n = nproc_flag;
        src = "--nproc";
        goto out;
    }
    int cuda = kd_launch_cuda_count(getenv("CUDA_VISIBLE_DEVICES"));
    if (cuda >= 0) {
        n = cuda > 0 ? cuda : 1;
        src = "CUDA_VISIBLE_DEVICES";
        goto out;
    }
    int nvml = kd_launch_nvml_count();
    if (nvml > 0) {
        n = nvml;
        src = "nvml";
    }
out:
    if (n > KD_LAUNCH_MAX_NPROC)
        n = KD_LAUNCH_MAX_NPROC;
    if (source != NULL)
        *source = src;
    return n;
}

/*
 * The directory holding the Python package (kdet and determined) when it is
 * installed next to this program: <bindir>/../lib/python, as libdtrain.so is
 * <bindir>/../lib/libdtrain.so. NULL when there is none. Caller frees.
 */
static char *python_pkg_dir(void)
{
    char self[PATH_MAX];
    char *dir = NULL, *probe = NULL;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        goto out;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        goto out;
    *slash = '\0'; /* the bin directory */
    slash = strrchr(self, '/');
    if (slash == NULL)
        goto out;
    *slash = '\0'; /* its parent */
    dir = kd_xasprintf("%s/lib/python", self[0] ? self : "");
    probe = kd_xasprintf("%s/kdet/__init__.py", dir);
    if (access(probe, R_OK) != 0) {
        free(dir);
        dir = NULL;
    }
out:
    free(probe);
    return dir;
}

/*
 * PYTHONPATH with dir appended (the user's own entries first, so that a
 * package they put on it wins), or NULL when dir is NULL or already one of
 * its entries. Caller frees.
 */
static char *python_path_with(const char *old, const char *dir)
{
    char *out = NULL;
    if (dir == NULL)
        goto out;
    if (old == NULL || old[0] == '\0') {
        out = kd_xstrdup(dir);
        goto out;
    }
    size_t dl = strlen(dir);
    for (const char *p = old;;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len == dl && memcmp(p, dir, dl) == 0)
            goto out;
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    out = kd_xasprintf("%s:%s", old, dir);
out:
    return out;
}

/* The PYTHONPATH workers get, or NULL to leave it as inherited. */
static char *worker_python_path(void)
{
    char *dir = python_pkg_dir();
    char *v = python_path_with(getenv("PYTHONPATH"), dir);
    free(dir);
    return v;
}

/* The names the launcher sets for each worker; inherited values are dropped. */
static const char *const worker_keys[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "KDET_NODE_RANK",
    "KDET_NUM_NODES",
    "KDET_CHIEF_ADDR",
    "KDET_MASTER_PORT",
    "KDET_RUN_ID",
    "KDET_GRACE_PERIOD",
    NULL,
};

static int is_worker_key(const char *entry)
{
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    for (size_t i = 0; worker_keys[i] != NULL; i++) {
        if (strlen(worker_keys[i]) == n && memcmp(worker_keys[i], entry, n) == 0)
            return 1;
    }
    return 0;
}

char **kd_launch_worker_env(const struct kd_launch_env *e, int nproc, int local_rank)
{
    size_t inherited = 0;
    for (char **p = environ; p && *p; p++)
        inherited++;
    size_t nkeys = sizeof(worker_keys) / sizeof(worker_keys[0]);
    char **envp = kd_xcalloc(inherited + nkeys + 3, sizeof(char *));
    char *pypath = worker_python_path();
    size_t n = 0;
    for (char **p = environ; p && *p; p++) {
        if (!is_worker_key(*p) && !(pypath != NULL && kd_str_has_prefix(*p, "PYTHONPATH=")))
            envp[n++] = kd_xstrdup(*p);
    }
    if (pypath != NULL)
        envp[n++] = kd_xasprintf("PYTHONPATH=%s", pypath);
    free(pypath);
    int world = e->num_nodes * nproc;
    envp[n++] = kd_xasprintf("RANK=%d", e->node_rank * nproc + local_rank);
    envp[n++] = kd_xasprintf("LOCAL_RANK=%d", local_rank);
    envp[n++] = kd_xasprintf("WORLD_SIZE=%d", world);
    envp[n++] = kd_xasprintf("LOCAL_WORLD_SIZE=%d", nproc);
    envp[n++] = kd_xasprintf("GROUP_RANK=%d", e->node_rank);
    envp[n++] = kd_xasprintf("GROUP_WORLD_SIZE=%d", e->num_nodes);
    envp[n++] = kd_xasprintf("MASTER_ADDR=%s", e->chief_addr);
    envp[n++] = kd_xasprintf("MASTER_PORT=%d", e->master_port);
    envp[n++] = kd_xasprintf("KDET_NODE_RANK=%d", e->node_rank);
    envp[n++] = kd_xasprintf("KDET_NUM_NODES=%d", e->num_nodes);
    envp[n++] = kd_xasprintf("KDET_CHIEF_ADDR=%s", e->chief_addr);
    envp[n++] = kd_xasprintf("KDET_MASTER_PORT=%d", e->master_port);
    envp[n++] = kd_xasprintf("KDET_RUN_ID=%s", e->run_id);
    envp[n++] = kd_xasprintf("KDET_GRACE_PERIOD=%g", e->grace_s);
    if (getenv("PYTHONUNBUFFERED") == NULL)
        envp[n++] = kd_xstrdup("PYTHONUNBUFFERED=1");
    envp[n] = NULL;
    return envp;
}

int kd_launch_env_export(const struct kd_launch_env *e)
{
    char num[32];
    int rc = 0;
    snprintf(num, sizeof(num), "%d", e->node_rank);
    if (setenv("KDET_NODE_RANK", num, 1) < 0)
        goto fail;
    snprintf(num, sizeof(num), "%d", e->num_nodes);
    if (setenv("KDET_NUM_NODES", num, 1) < 0)
        goto fail;
    snprintf(num, sizeof(num), "%d", e->master_port);
    if (setenv("KDET_MASTER_PORT", num, 1) < 0)
        goto fail;
    snprintf(num, sizeof(num), "%g", e->grace_s);
    if (setenv("KDET_GRACE_PERIOD", num, 1) < 0 ||
        setenv("KDET_CHIEF_ADDR", e->chief_addr, 1) < 0 || setenv("KDET_RUN_ID", e->run_id, 1) < 0)
        goto fail;
    char *pypath = worker_python_path();
    if (pypath != NULL && setenv("PYTHONPATH", pypath, 1) < 0) {
        free(pypath);
        goto fail;
    }
    free(pypath);
    goto out;
fail:
    rc = -errno;
out:
    return rc;
}

void kd_launch_envp_free(char **envp)
{
    if (envp == NULL)
        return;
    for (char **p = envp; *p; p++)
        free(*p);
    free(envp);
}
