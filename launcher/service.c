/*
 * A task's service port (see service.h): picked here, reported to the
 * controller, exported to the service, which binds it a moment later.
 */
#include "service.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/str.h"
#include "core/time.h"
#include "ctlapi.h"

static bool set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0';
}

bool kd_service_wanted(void)
{
    const char *v = getenv("KDET_TASK_SERVICE");
    return v != NULL && strcmp(v, "1") == 0 && set("KDET_TASK_ID") && set("KDET_NAMESPACE") &&
           set("KDET_CONTROLLER_URL") && set("KDET_TOKEN");
}

int kd_service_report(const struct kd_launch_env *e, int64_t timeout_ms, int *port, char *err)
{
    int rc = 0;
    long status = 0;
    json_t *ans = NULL, *b = NULL;
    char *url = NULL, *body = NULL, cerr[KD_ERRLEN] = "", num[16];
    const char *base = getenv("KDET_CONTROLLER_URL");
    const char *host = set("KDET_POD_IP") ? getenv("KDET_POD_IP") : "127.0.0.1";
    size_t bl = strlen(base);
    int64_t deadline = kd_mono_ms() + timeout_ms, delay = 250;
    struct passwd pw, *pwp = NULL;
    char pwbuf[1024];
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    if ((rc = kd_ctlapi_free_port(port, err)) < 0)
        goto out;
    snprintf(num, sizeof(num), "%d", *port);
    if (setenv("KDET_TASK_PORT", num, 1) < 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot set KDET_TASK_PORT");
        goto out;
    }
    url = kd_xasprintf("%.*s/api/v1/namespaces/%s/tasks/%s/address", (int)bl, base,
                       getenv("KDET_NAMESPACE"), getenv("KDET_TASK_ID"));
    b = json_pack("{s:s,s:s,s:i}", "run_id", e->run_id, "host", host, "port", *port);
    if (getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp != NULL)
        json_object_set_new(b, "user", json_string(pw.pw_name));
    body = json_dumps(b, JSON_COMPACT);
    for (;;) {
        int64_t left = deadline - kd_mono_ms();
        json_decref(ans);
        ans = NULL;
        rc = kd_ctlapi_call("PUT", url, body, 30, &status, &ans, cerr);
        if (rc == 0 && status >= 200 && status < 300)
            break;
        if (rc == 0 && kd_ctlapi_final(status)) {
            rc = kd_seterr(err, status == 401 ? KD_EUNAUTHORIZED : KD_EINVAL,
                           "the controller refused the task's address: %s", cerr);
            goto out;
        }
        if (left <= 0) {
            rc = kd_seterr(err, KD_ETIMEDOUT,
                           "cannot report the task's address to the controller within %lld ms: "
                           "%s",
                           (long long)timeout_ms, cerr);
            goto out;
        }
        KD_WARN("task address report failed; retrying", "error=%s retry_ms=%lld", kd_logq(cerr),
                (long long)delay);
        kd_sleep_ms(delay < left ? delay : left);
        delay = delay * 2 > 4000 ? 4000 : delay * 2;
    }
    rc = 0;
out:
    json_decref(ans);
    json_decref(b);
    free(url);
    free(body);
    return rc;
}
