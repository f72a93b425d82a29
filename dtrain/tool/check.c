/*
 * `dtrain check rendezvous`: says what the environment holds (the token
 * only as "set"), joins the trial, runs one allreduce and one barrier, and
 * prints what it found, so a broken launch shows which piece is missing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/time.h"
#include "dtrain.h"
#include "tool.h"

static const char *const env_names[] = {
    "RANK",          "LOCAL_RANK",       "WORLD_SIZE",     "LOCAL_WORLD_SIZE",
    "GROUP_RANK",    "MASTER_ADDR",      "MASTER_PORT",    "KDET_RUN_ID",
    "KDET_TRIAL_ID", "KDET_TRIAL_SEED",  "KDET_HPARAMS",   "KDET_CONTROLLER_URL",
    "KDET_TOKEN",    "DTRAIN_TRANSPORT", "DTRAIN_TIMEOUT", NULL};

int dtrain_tool_check_rendezvous(int argc, char **argv)
{
    struct dtrain *h = NULL;
    char err[DTRAIN_ERRLEN];
    int rc = 1;
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: dtrain check rendezvous\n");
        return 2;
    }
    const char *rank = getenv("RANK");
    for (int i = 0; env_names[i] != NULL; i++) {
        const char *v = getenv(env_names[i]);
        if (v == NULL)
            printf("env %-20s (not set)\n", env_names[i]);
        else if (strcmp(env_names[i], "KDET_TOKEN") == 0)
            printf("env %-20s set (%zu bytes, not shown)\n", env_names[i], strlen(v));
        else
            printf("env %-20s %s\n", env_names[i], v);
    }
    int64_t t0 = kd_mono_ms();
    if (dtrain_init(&h, err) < 0) {
        printf("rendezvous FAILED (rank %s): %s\n", rank ? rank : "?", err);
        return 1;
    }
    int r = dtrain_rank(h), n = dtrain_world_size(h);
    printf("rendezvous ok: rank %d of %d (local rank %d of %d), transport %s, %lld ms\n", r, n,
           dtrain_local_rank(h), dtrain_local_world_size(h), dtrain_transport_name(h),
           (long long)(kd_mono_ms() - t0));
    if (strcmp(dtrain_transport_name(h), "nccl") == 0) {
        printf("allreduce skipped: device buffers (nccl); run dtrain bench allreduce\n");
        rc = dtrain_barrier(h) < 0 ? 1 : 0;
        goto out;
    }
    double v = r + 1, want = (double)n * (n + 1) / 2;
    if (dtrain_allreduce(h, &v, 1, DTRAIN_FLOAT64, DTRAIN_SUM) < 0 || dtrain_barrier(h) < 0) {
        printf("allreduce FAILED: %s\n", dtrain_errmsg(h));
        goto out;
    }
    if (v != want) {
        printf("allreduce WRONG: sum of rank+1 over %d ranks is %g, expected %g\n", n, v, want);
        goto out;
    }
    printf("allreduce ok: sum of rank+1 over %d ranks = %g\n", n, v);
    rc = 0;
out:
    if (dtrain_finalize(h) < 0 && rc == 0) {
        printf("finalize FAILED\n");
        rc = 1;
    }
    return rc;
}
