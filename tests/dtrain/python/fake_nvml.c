/*
 * A stand-in for libnvidia-ml with two GPUs, for the profiler's NVML
 * binding (kdet/_profiler.py): the functions it calls, with the NVML
 * signatures and structure layouts, returning fixed values per GPU. Built
 * by test_profiler.py with cc -shared.
 */
#include <stdio.h>

struct nvml_utilization {
    unsigned int gpu, memory;
};

struct nvml_memory {
    unsigned long long total, free, used;
};

struct dev {
    unsigned int index, util;
    unsigned long long used_gib;
};

static struct dev devs[2] = {{0, 97, 12}, {1, 5, 1}};
static int inited;

int nvmlInit_v2(void)
{
    inited = 1;
    return 0;
}

int nvmlShutdown(void)
{
    inited = 0;
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = 2;
    return inited ? 0 : 1;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, struct dev **h)
{
    if (!inited || i > 1)
        return 2;
    *h = &devs[i];
    return 0;
}

int nvmlDeviceGetUUID(struct dev *h, char *buf, unsigned int len)
{
    snprintf(buf, len, "GPU-fake-%u", h->index);
    return 0;
}

int nvmlDeviceGetUtilizationRates(struct dev *h, struct nvml_utilization *u)
{
    u->gpu = h->util;
    u->memory = h->util / 2;
    return 0;
}

int nvmlDeviceGetMemoryInfo(struct dev *h, struct nvml_memory *m)
{
    m->total = 80ULL << 30;
    m->used = h->used_gib << 30;
    m->free = m->total - m->used;
    return 0;
}
