/*
 * Lease-based leader election (see leader.h). Expiry is judged by the
 * local monotonic clock from the moment a change of the lease record was
 * observed, not by comparing renewTime with the local wall clock, so clock
 * skew between replicas cannot make two of them lead.
 */
#include "k8s/leader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "k8s/client_int.h"

#define ID_MAX 256

struct kd_k8s_leader {
    struct kd_k8s_client *client;
    struct kd_k8s_leader_opts opts;
    char *ns, *name, *identity;
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool leading;
    int64_t last_renew_ms;          /* kd_mono_ms of the last successful acquire/renew */
    char observed[ID_MAX * 2 + 64]; /* holder|renewTime|transitions last seen */
    int64_t observed_ms;
    char holder[ID_MAX];
};

/* A Kubernetes MicroTime: RFC 3339 with 6 fractional digits, UTC. */
static void micro_time(char *buf, size_t len)
{
    int64_t ms = kd_wall_ms();
    char base[32];
    kd_time_rfc3339(ms - ms % 1000, 0, base, sizeof(base));
    size_t n = strlen(base);
    if (n > 0 && base[n - 1] == 'Z')
        base[n - 1] = '\0';
    snprintf(buf, len, "%s.%03d000Z", base, (int)(ms % 1000));
}

static int nap(struct kd_k8s_leader *le, long ms)
{
    return kd_k8s__nap(&le->lock, &le->cond, &le->stop, ms);
}

static json_t *new_lease(struct kd_k8s_leader *le, const char *now)
{
    return json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s,s:I,s:s,s:s,s:i}}", "apiVersion",
                     "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name", le->name,
                     "namespace", le->ns, "spec", "holderIdentity", le->identity,
                     "leaseDurationSeconds",
                     (json_int_t)((le->opts.lease_duration_ms + 999) / 1000), "acquireTime", now,
                     "renewTime", now, "leaseTransitions", 0);
}

/* Note the lease record; a change restarts the expiry clock. */
static void observe(struct kd_k8s_leader *le, const char *holder, const char *renew,
                    json_int_t transitions, int64_t now)
{
    char rec[sizeof(le->observed)];
    bool new_holder = false;
    snprintf(rec, sizeof(rec), "%.256s|%.64s|%lld", holder, renew, (long long)transitions);
    pthread_mutex_lock(&le->lock);
    if (strcmp(rec, le->observed) != 0) {
        kd_strlcpy(le->observed, rec, sizeof(le->observed));
        le->observed_ms = now;
    }
    if (strcmp(le->holder, holder) != 0) {
        kd_strlcpy(le->holder, holder, sizeof(le->holder));
        new_holder = holder[0] != '\0' && strcmp(holder, le->identity) != 0;
    }
    pthread_mutex_unlock(&le->lock);
    if (new_holder) {
        KD_INFO("new leader observed", "lease=%s/%s holder=%s", le->ns, le->name, kd_logq(holder));
        if (le->opts.on_new_leader != NULL)
            le->opts.on_new_leader(holder, le->opts.ud);
    }
}

/*
 * One attempt. Returns 0 when this replica holds a freshly renewed lease,
 * 1 when another replica holds a live one, or a negative error (a lost
 * race is KD_ECONFLICT / KD_EEXIST).
 */
static int try_acquire(struct kd_k8s_leader *le)
{
    json_t *lease = NULL, *spec, *updated = NULL;
    char now[48], err[KD_ERRLEN];
    int rc;
    int64_t mono = kd_mono_ms();
    micro_time(now, sizeof(now));
    rc = kd_k8s_get(le->client, &KD_K8S_LEASES, le->ns, le->name, &lease, NULL, err);
    if (rc == KD_ENOTFOUND) {
        json_t *obj = new_lease(le, now);
        rc = kd_k8s_create(le->client, &KD_K8S_LEASES, le->ns, obj, NULL, NULL, err);
        json_decref(obj);
        if (rc == 0)
            observe(le, le->identity, now, 0, mono);
        goto out;
    }
    if (rc < 0)
        goto out;
    spec = json_object_get(lease, "spec");
    if (!json_is_object(spec)) {
        spec = json_object();
        json_object_set_new(lease, "spec", spec);
    }
    const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
    const char *renew = json_string_value(json_object_get(spec, "renewTime"));
    json_int_t transitions = json_integer_value(json_object_get(spec, "leaseTransitions"));
    json_int_t dur_s = json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
    int64_t dur_ms = dur_s > 0 ? dur_s * 1000 : le->opts.lease_duration_ms;
    if (holder == NULL)
        holder = "";
    observe(le, holder, renew != NULL ? renew : "", transitions, mono);
    bool mine = strcmp(holder, le->identity) == 0;
    pthread_mutex_lock(&le->lock);
    int64_t observed_ms = le->observed_ms;
    pthread_mutex_unlock(&le->lock);
    if (!mine && holder[0] != '\0' && observed_ms + dur_ms > mono) {
        rc = 1;
        goto out;
    }
    if (!mine) {
        json_object_set_new(spec, "acquireTime", json_string(now));
        json_object_set_new(spec, "leaseTransitions", json_integer(transitions + 1));
    }
    json_object_set_new(spec, "holderIdentity", json_string(le->identity));
    json_object_set_new(spec, "renewTime", json_string(now));
    json_object_set_new(spec, "leaseDurationSeconds",
                        json_integer((le->opts.lease_duration_ms + 999) / 1000));
    /* metadata.resourceVersion from the get makes this a compare-and-swap. */
    rc = kd_k8s_update(le->client, &KD_K8S_LEASES, le->ns, NULL, lease, &updated, NULL, err);
    if (rc == 0)
        observe(le, le->identity, now, mine ? transitions : transitions + 1, mono);
out:
    if (rc < 0 && rc != KD_ECONFLICT && rc != KD_EEXIST)
        KD_WARN("lease acquire/renew failed", "lease=%s/%s err=%s detail=%s", le->ns, le->name,
                kd_err_name(rc), kd_logq(err));
    json_decref(lease);
    json_decref(updated);
    return rc;
}

static void set_leading(struct kd_k8s_leader *le, bool leading)
{
    pthread_mutex_lock(&le->lock);
    bool was = le->leading;
    le->leading = leading;
    pthread_mutex_unlock(&le->lock);
    if (leading && !was) {
        KD_INFO("became leader", "lease=%s/%s identity=%s", le->ns, le->name,
                kd_logq(le->identity));
        if (le->opts.on_started != NULL)
            le->opts.on_started(le->opts.ud);
    } else if (!leading && was) {
        KD_WARN("stopped leading", "lease=%s/%s identity=%s", le->ns, le->name,
                kd_logq(le->identity));
        if (le->opts.on_stopped != NULL)
            le->opts.on_stopped(le->opts.ud);
    }
}

static void release(struct kd_k8s_leader *le)
{
    json_t *lease = NULL;
    char err[KD_ERRLEN], now[48];
    if (kd_k8s_get(le->client, &KD_K8S_LEASES, le->ns, le->name, &lease, NULL, err) != 0)
        return;
    json_t *spec = json_object_get(lease, "spec");
    const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
    if (holder != NULL && strcmp(holder, le->identity) == 0) {
        micro_time(now, sizeof(now));
        json_object_set_new(spec, "holderIdentity", json_string(""));
        json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
        json_object_set_new(spec, "renewTime", json_string(now));
        if (kd_k8s_update(le->client, &KD_K8S_LEASES, le->ns, NULL, lease, NULL, NULL, err) == 0)
            KD_INFO("lease released", "lease=%s/%s", le->ns, le->name);
    }
    json_decref(lease);
}

static void *leader_main(void *arg)
{
    struct kd_k8s_leader *le = arg;
    while (!atomic_load(&le->stop)) {
        int rc = try_acquire(le);
        int64_t now = kd_mono_ms();
        pthread_mutex_lock(&le->lock);
        if (rc == 0)
            le->last_renew_ms = now;
        bool leading = le->leading;
        int64_t last = le->last_renew_ms;
        pthread_mutex_unlock(&le->lock);
        if (rc == 0)
            set_leading(le, true);
        else if (leading && (rc == 1 || now - last >= le->opts.renew_deadline_ms))
            set_leading(le, false); /* someone else holds it, or we could not renew in time */
        long wait = le->opts.retry_period_ms;
        if (!leading && rc != 0)
            wait += kd_k8s_backoff_ms(0, wait / 5 + 1, wait / 5 + 1, 0); /* jitter up to 1.2x */
        nap(le, wait);
    }
    pthread_mutex_lock(&le->lock);
    bool was = le->leading;
    pthread_mutex_unlock(&le->lock);
    if (was && le->opts.release_on_stop)
        release(le);
    set_leading(le, false);
    return NULL;
}

int kd_k8s_leader_start(struct kd_k8s_client *client, const struct kd_k8s_leader_opts *opts,
                        struct kd_k8s_leader **out, char *err)
{
    struct kd_k8s_leader *le = NULL;
    pthread_condattr_t ca;
    int rc = 0;
    if (client == NULL || opts == NULL || opts->ns == NULL || opts->ns[0] == '\0' ||
        opts->name == NULL || opts->name[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL,
                       "leader election: the lease namespace and name are "
                       "required");
        goto out;
    }
    if (opts->identity == NULL || opts->identity[0] == '\0' || strlen(opts->identity) >= ID_MAX) {
        rc = kd_seterr(err, KD_EINVAL, "leader election: identity must be 1-%d bytes", ID_MAX - 1);
        goto out;
    }
    le = kd_xcalloc(1, sizeof(*le));
    le->client = client;
    le->opts = *opts;
    if (le->opts.lease_duration_ms <= 0)
        le->opts.lease_duration_ms = 15000;
    if (le->opts.renew_deadline_ms <= 0)
        le->opts.renew_deadline_ms = 10000;
    if (le->opts.retry_period_ms <= 0)
        le->opts.retry_period_ms = 2000;
    if (le->opts.lease_duration_ms <= le->opts.renew_deadline_ms) {
        rc = kd_seterr(err, KD_EINVAL,
                       "leader election: lease_duration_ms (%ld) must be greater than "
                       "renew_deadline_ms (%ld)",
                       le->opts.lease_duration_ms, le->opts.renew_deadline_ms);
        goto out;
    }
    if (le->opts.renew_deadline_ms * 5 <= le->opts.retry_period_ms * 6) {
        rc = kd_seterr(err, KD_EINVAL,
                       "leader election: renew_deadline_ms (%ld) must be greater than 1.2 x "
                       "retry_period_ms (%ld)",
                       le->opts.renew_deadline_ms, le->opts.retry_period_ms);
        goto out;
    }
    le->ns = kd_xstrdup(opts->ns);
    le->name = kd_xstrdup(opts->name);
    le->identity = kd_xstrdup(opts->identity);
    le->opts.ns = le->ns;
    le->opts.name = le->name;
    le->opts.identity = le->identity;
    pthread_mutex_init(&le->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&le->cond, &ca);
    pthread_condattr_destroy(&ca);
    int e = pthread_create(&le->thread, NULL, leader_main, le);
    if (e != 0) {
        rc = kd_seterr(err, -e, "leader election: cannot start its thread");
        pthread_cond_destroy(&le->cond);
        pthread_mutex_destroy(&le->lock);
        free(le->ns);
        free(le->name);
        free(le->identity);
        goto out;
    }
    *out = le;
    le = NULL;
out:
    free(le);
    return rc;
}

bool kd_k8s_leader_is_leader(struct kd_k8s_leader *le)
{
    pthread_mutex_lock(&le->lock);
    bool l = le->leading && kd_mono_ms() - le->last_renew_ms < le->opts.renew_deadline_ms;
    pthread_mutex_unlock(&le->lock);
    return l;
}

void kd_k8s_leader_holder(struct kd_k8s_leader *le, char *buf, size_t len)
{
    pthread_mutex_lock(&le->lock);
    kd_strlcpy(buf, le->holder, len);
    pthread_mutex_unlock(&le->lock);
}

void kd_k8s_leader_stop(struct kd_k8s_leader *le)
{
    if (le == NULL)
        return;
    pthread_mutex_lock(&le->lock);
    atomic_store(&le->stop, 1);
    pthread_cond_broadcast(&le->cond);
    pthread_mutex_unlock(&le->lock);
    pthread_join(le->thread, NULL);
    pthread_cond_destroy(&le->cond);
    pthread_mutex_destroy(&le->lock);
    free(le->ns);
    free(le->name);
    free(le->identity);
    free(le);
}
