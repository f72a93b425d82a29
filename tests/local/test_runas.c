/*
 * The identity a container runs as (local/runas.c): one row per
 * combination of the pod's and the container's securityContext, with the
 * uid, gid and groups the kubelet must use, or the kubelet's refusal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../local/runas.h"

struct row {
    const char *pod_sc; /* the pod's securityContext as JSON, or NULL */
    const char *ctr_sc; /* the container's */
    int rc;
    bool change;
    unsigned uid, gid;
    const char *groups; /* "1,2" */
    const char *err;    /* a substring of the refusal */
};

static const struct row rows[] = {
    /* nothing set: as kdet-local (uid 0 here) */
    {NULL, NULL, 0, false, 0, 0, "", NULL},
    {"{}", "{}", 0, false, 0, 0, "", NULL},
    /* runAsUser: the user's primary group from /etc/passwd (nobody: 65534), else 65534 */
    {"{\"runAsUser\":65534}", NULL, 0, true, 65534, 65534, "", NULL},
    {NULL, "{\"runAsUser\":4242}", 0, true, 4242, 65534, "", NULL},
    {NULL, "{\"runAsUser\":0}", 0, true, 0, 0, "", NULL},
    /* the container wins, field by field */
    {"{\"runAsUser\":1000,\"runAsGroup\":2000}", "{\"runAsUser\":3000}", 0, true, 3000, 2000, "",
     NULL},
    {"{\"runAsUser\":1000}", "{\"runAsGroup\":7}", 0, true, 1000, 7, "", NULL},
    {NULL, "{\"runAsGroup\":7}", 0, true, 0, 7, "", NULL},
    /* supplementary groups: supplementalGroups then fsGroup, no duplicates */
    {"{\"runAsUser\":1000,\"runAsGroup\":1000,\"supplementalGroups\":[5,6],\"fsGroup\":6}", NULL, 0,
     true, 1000, 1000, "5,6", NULL},
    {"{\"runAsUser\":1000,\"runAsGroup\":1000,\"fsGroup\":9}", NULL, 0, true, 1000, 1000, "9",
     NULL},
    /* runAsNonRoot */
    {"{\"runAsNonRoot\":true}", NULL, KD_EINVALID, false, 0, 0, "",
     "container has runAsNonRoot and image will run as root (pod: \"p_ns(u-1)\", container: c)"},
    {NULL, "{\"runAsNonRoot\":true,\"runAsUser\":0}", KD_EINVALID, false, 0, 0, "",
     "container's runAsUser breaks non-root policy (pod: \"p_ns(u-1)\", container: c)"},
    {"{\"runAsNonRoot\":true}", "{\"runAsUser\":65534}", 0, true, 65534, 65534, "", NULL},
    {"{\"runAsNonRoot\":true,\"runAsUser\":1}", "{\"runAsNonRoot\":false,\"runAsUser\":0}", 0, true,
     0, 0, "", NULL},
    {"{\"runAsNonRoot\":null,\"runAsUser\":null}", "{\"runAsUser\":null}", 0, false, 0, 0, "",
     NULL},
};

static void test_rows(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        json_t *pod = json_pack("{s:{s:s,s:s,s:s},s:{}}", "metadata", "name", "p", "namespace",
                                "ns", "uid", "u-1", "spec");
        json_t *ctr = json_pack("{s:s}", "name", "c");
        if (r->pod_sc != NULL)
            json_object_set_new(json_object_get(pod, "spec"), "securityContext",
                                json_loads(r->pod_sc, 0, NULL));
        if (r->ctr_sc != NULL)
            json_object_set_new(ctr, "securityContext", json_loads(r->ctr_sc, 0, NULL));
        struct kd_runas ra;
        char err[KD_ERRLEN] = "";
        int rc = kd_runas_decide(pod, ctr, 0, 0, &ra, err);
        if (rc != r->rc)
            fail_msg("row %zu: rc %d, want %d (%s)", i, rc, r->rc, err);
        if (rc != 0) {
            if (strstr(err, r->err) == NULL)
                fail_msg("row %zu: err \"%s\", want \"%s\"", i, err, r->err);
        } else {
            char groups[256] = "";
            for (size_t g = 0; g < ra.ngroups; g++)
                snprintf(groups + strlen(groups), sizeof(groups) - strlen(groups), "%s%u",
                         g ? "," : "", (unsigned)ra.groups[g]);
            if (ra.change != r->change || ra.uid != r->uid || ra.gid != r->gid ||
                strcmp(groups, r->groups) != 0)
                fail_msg("row %zu: change=%d uid=%u gid=%u groups=%s, want %d %u %u %s", i,
                         ra.change, (unsigned)ra.uid, (unsigned)ra.gid, groups, r->change, r->uid,
                         r->gid, r->groups);
        }
        json_decref(pod);
        json_decref(ctr);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
