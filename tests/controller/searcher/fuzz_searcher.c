/*
 * libFuzzer target: a searcher restored from an untrusted snapshot (the
 * first line) must reject it or behave, whatever events follow (the other
 * lines, at most 256). Snapshots come from Experiment status and the
 * database, so a corrupt one must give an error, never a crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "searcher/searcher.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    const char *p = (const char *)data, *end = p + size;
    const char *nl = memchr(p, '\n', size);
    struct kd_searcher *s = NULL;
    struct kd_search_ops ops = {0};
    char err[KD_ERRLEN];
    json_error_t je;
    json_t *snap;
    if (!init) {
        kd_log_init("fuzz", KD_LOG_OFF, -1);
        init = 1;
    }
    snap = json_loadb(p, nl ? (size_t)(nl - p) : size, 0, &je);
    if (!snap)
        return 0;
    if (kd_searcher_restore(snap, &s, err) == 0) {
        int n = 0;
        json_t *tmp = kd_searcher_snapshot(s);
        json_decref(tmp);
        while (nl && nl + 1 < end && n++ < 256) {
            const char *line = nl + 1;
            nl = memchr(line, '\n', (size_t)(end - line));
            json_t *ev = json_loadb(line, nl ? (size_t)(nl - line) : (size_t)(end - line), 0, &je);
            if (ev && kd_searcher_event(s, ev, &ops, err) == 0)
                (void)kd_searcher_progress(s);
            json_decref(ev);
            kd_search_ops_free(&ops);
        }
    }
    kd_searcher_free(s);
    json_decref(snap);
    return 0;
}
