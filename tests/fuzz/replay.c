/*
 * Runs the fuzz target's checks, without libFuzzer, over every file in the
 * directories given: the regression inputs under tests/fuzz/regress and
 * the YAML test data. Prints `N passed, N failed` for tests/run.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_dir(const char *dir, int *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) {
        fprintf(stderr, "%s: cannot open\n", dir);
        return -1;
    }
    while ((e = readdir(d))) {
        char path[1024];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        struct kd_buf b = KD_BUF_INIT(8u << 20);
        char chunk[65536];
        size_t r;
        int rc = 0;
        while (!rc && (r = fread(chunk, 1, sizeof(chunk), f)) > 0)
            rc = kd_buf_append(&b, chunk, r);
        fclose(f);
        LLVMFuzzerTestOneInput((const uint8_t *)(b.data ? b.data : ""), b.len);
        kd_buf_free(&b);
        (*n)++;
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    const char *defaults[] = {"tests/fuzz/regress",          "tests/data/yaml",
                              "tests/data/config/good",      "tests/data/config/bad",
                              "tests/data/config/templates", NULL};
    int n = 0, bad = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            bad += run_dir(argv[i], &n) != 0;
    } else {
        for (int i = 0; defaults[i]; i++)
            bad += run_dir(defaults[i], &n) != 0;
    }
    /* An input that breaks an invariant aborts, so reaching here means every one held. */
    printf("replayed %d inputs\n%d passed, %d failed\n", n, bad ? 0 : 1, bad);
    return bad ? 1 : 0;
}
