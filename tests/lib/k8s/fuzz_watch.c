/*
 * libFuzzer target: bytes from the network as an API server answer. The
 * input is fed to the Status mapper and, in chunks, to the watch line
 * splitter (with a small line cap), neither of which may crash or leak.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../../lib/k8s/watch.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count(enum kd_k8s_event_type t, json_t *obj, void *ud)
{
    (void)t;
    (void)obj;
    (*(int *)ud)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kd_k8s_status st = {0};
    char err[KD_ERRLEN];
    int http = size > 0 ? 200 + data[0] % 400 : 200;
    (void)kd_k8s_map_status(http, (const char *)data, size, &st, err);
    kd_k8s_status_free(&st);

    struct wstate w = {0};
    int n = 0;
    kd_buf_init(&w.line, 4096);
    kd_buf_init(&w.errbody, 4096);
    w.http = 200;
    w.fn = count;
    w.ud = &n;
    w.st = &st;
    w.err = err;
    w.path = "/fuzz";
    size_t step = size > 1 ? 1 + data[size - 1] % 64 : 1;
    for (size_t off = 0; off < size; off += step) {
        char chunk[64];
        size_t k = size - off < step ? size - off : step;
        memcpy(chunk, data + off, k);
        if (on_data(chunk, 1, k, &w) != k)
            break;
    }
    kd_buf_free(&w.line);
    kd_buf_free(&w.errbody);
    kd_k8s_status_free(&st);
    return 0;
}
