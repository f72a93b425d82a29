/*
 * The chief's address through the controller API (see chief.h and
 * docs/launcher.md, "Finding the chief"): as Determined's master tells each
 * container where the chief is, kdet's controller relays what node rank 0
 * reported, so the pods of a multi-node trial need no cluster DNS (calls
 * through ctlapi.c).
 */
#include "chief.h"
#include "ctlapi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"

static bool set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0';
}

bool kd_chief_via_controller(const struct kd_launch_env *e)
{
    return e->num_nodes > 1 && set("KDET_CONTROLLER_URL") && set("KDET_TOKEN") &&
           set("KDET_TRIAL_ID") && set("KDET_NAMESPACE") &&
           (e->node_rank != 0 || set("KDET_POD_IP"));
}

int64_t kd_chief_timeout_ms(void)
{
    double s = 0;
    const char *v = getenv("DTRAIN_RENDEZVOUS_TIMEOUT");
    if (v == NULL || kd_parse_double(v, &s) < 0 || !(s > 0) || s > 86400)
        return KD_CHIEF_DEFAULT_TIMEOUT_MS;
    return (int64_t)(s * 1000.0);
}

int kd_chief_resolve(struct kd_launch_env *e, int64_t timeout_ms, char *err)
{
    int rc = 0, port = 0;
    long status = 0;
    json_t *ans = NULL;
    char *url = NULL, *body = NULL, cerr[KD_ERRLEN] = "";
    const char *base = getenv("KDET_CONTROLLER_URL");
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    int64_t deadline = kd_mono_ms() + timeout_ms, delay = 250;
    bool chief = e->node_rank == 0;
    const char *pod_ip = getenv("KDET_POD_IP");
    if (chief) {
        if ((rc = kd_ctlapi_free_port(&port, err)) < 0)
            goto out;
        url = kd_xasprintf("%.*s/api/v1/namespaces/%s/trials/%s/rendezvous", (int)bl, base,
                           getenv("KDET_NAMESPACE"), getenv("KDET_TRIAL_ID"));
        json_t *b =
            json_pack("{s:s,s:s,s:i}", "run_id", e->run_id, "address", pod_ip, "port", port);
        body = json_dumps(b, JSON_COMPACT);
        json_decref(b);
    } else {
        url = kd_xasprintf(
            "%.*s/api/v1/namespaces/%s/trials/%s/rendezvous?run_id=%s&timeout=", (int)bl, base,
            getenv("KDET_NAMESPACE"), getenv("KDET_TRIAL_ID"), e->run_id);
    }
    for (;;) {
        int64_t left = deadline - kd_mono_ms();
        long poll_s = left / 1000 < KD_CHIEF_POLL_S ? (long)(left / 1000) : KD_CHIEF_POLL_S;
        char *u = chief ? kd_xstrdup(url) : kd_xasprintf("%s%ld", url, poll_s > 0 ? poll_s : 0);
        json_decref(ans);
        ans = NULL;
        rc = kd_ctlapi_call(chief ? "PUT" : "GET", u, body, chief ? 30 : poll_s, &status, &ans,
                            cerr);
        free(u);
        if (rc == 0 && status >= 200 && status < 300) {
            if (chief)
                break;
            const char *addr = json_string_value(json_object_get(ans, "address"));
            json_int_t p = json_integer_value(json_object_get(ans, "port"));
            if (json_is_true(json_object_get(ans, "ready")) && addr != NULL && addr[0] != '\0' &&
                strlen(addr) <= KD_LAUNCH_MAX_ADDR && p >= 1 && p <= 65535) {
                kd_strlcpy(e->chief_addr, addr, sizeof(e->chief_addr));
                port = (int)p;
                break;
            }
            /* Not reported yet: the long-poll already waited; ask again at once. */
            delay = 250;
        } else if (rc == 0 && kd_ctlapi_final(status)) {
            rc = kd_seterr(err, status == 401 ? KD_EUNAUTHORIZED : KD_EINVAL,
                           "the controller refused the rendezvous %s: %s",
                           chief ? "report" : "query", cerr);
            goto out;
        } else {
            KD_WARN("rendezvous call failed; retrying", "op=%s error=%s retry_ms=%lld",
                    chief ? "report" : "query", kd_logq(cerr), (long long)delay);
            kd_sleep_ms(delay < left ? delay : (left > 0 ? left : 0));
            delay = delay * 2 > 4000 ? 4000 : delay * 2;
        }
        if (kd_mono_ms() >= deadline) {
            rc =
                kd_seterr(err, KD_ETIMEDOUT,
                          "%s within the rendezvous timeout of %lld ms (DTRAIN_RENDEZVOUS_TIMEOUT)",
                          chief ? "cannot report the chief's address to the controller"
                                : "the chief (node rank 0) did not report its address",
                          (long long)timeout_ms);
            goto out;
        }
    }
    if (chief)
        kd_strlcpy(e->chief_addr, pod_ip, sizeof(e->chief_addr));
    e->master_port = port;
    e->port_source = "controller";
    rc = 0;
out:
    json_decref(ans);
    free(url);
    free(body);
    return rc;
}
