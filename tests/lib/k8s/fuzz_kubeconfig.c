/*
 * libFuzzer target: arbitrary bytes as a kubeconfig file. Loading it must
 * either succeed or fail with an error message, never crash or leak.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "k8s/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    struct kd_k8s_config cfg = {0};
    char err[KD_ERRLEN];
    if (path[0] == '\0') {
        kd_log_init("fuzz", KD_LOG_OFF, -1);
        snprintf(path, sizeof(path), "/tmp/kd-fuzz-kubeconfig-%d.yaml", (int)getpid());
    }
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    if (kd_k8s_config_kubeconfig(path, NULL, &cfg, err) == 0)
        kd_k8s_config_free(&cfg);
    kd_log_clear_secrets();
    unlink(path);
    return 0;
}
