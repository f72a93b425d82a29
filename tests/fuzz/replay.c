/*
 * The main of every fuzz target's replay test (test_fuzz_*): runs the
 * target's LLVMFuzzerTestOneInput, without libFuzzer, over each file under
 * the folders the target keeps in the tree (KD_FUZZ_CORPUS, set by the
 * kd_fuzz macro; arguments replace them). A broken invariant aborts, so
 * reaching the end means every input held. Prints `N passed, N failed`
 * for tests/run.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/buf.h"

#ifndef KD_FUZZ_CORPUS
#define KD_FUZZ_CORPUS ""
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Targets that need set-up once define it; libFuzzer calls it before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path, int *n)
{
    FILE *f = fopen(path, "rb");
    struct kd_buf b = KD_BUF_INIT(64u << 20);
    char chunk[65536];
    size_t r;
    int rc = 0;
    if (f == NULL) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    while (rc == 0 && (r = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = kd_buf_append(&b, chunk, r);
    fclose(f);
    if (rc != 0) {
        fprintf(stderr, "%s: larger than 64 MiB\n", path);
        kd_buf_free(&b);
        return -1;
    }
    fprintf(stderr, "replay %s (%zu bytes)\n", path, b.len);
    /* An exact-size copy, so that a read past the input is caught under ASan. */
    uint8_t *copy = malloc(b.len > 0 ? b.len : 1);
    if (copy == NULL) {
        kd_buf_free(&b);
        return -1;
    }
    if (b.len > 0)
        memcpy(copy, b.data, b.len);
    LLVMFuzzerTestOneInput(copy, b.len);
    free(copy);
    kd_buf_free(&b);
    (*n)++;
    return 0;
}

/* Every regular file under dir (sub-folders too, in name order). */
static int run_dir(const char *dir, int *n)
{
    struct dirent **ents = NULL;
    int rc = 0, k = scandir(dir, &ents, NULL, alphasort);
    if (k < 0) {
        fprintf(stderr, "%s: cannot open the folder\n", dir);
        return -1;
    }
    for (int i = 0; i < k; i++) {
        char path[4096];
        struct stat st;
        if (ents[i]->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name);
            if (stat(path, &st) != 0)
                rc = -1;
            else if (S_ISDIR(st.st_mode))
                rc |= run_dir(path, n);
            else if (S_ISREG(st.st_mode))
                rc |= run_file(path, n);
        }
        free(ents[i]);
    }
    free(ents);
    return rc;
}

int main(int argc, char **argv)
{
    int n = 0, bad = 0;
    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    /* Arguments that start with '-' are libFuzzer's flags (a harness may add some): skipped. */
    int dirs_given = 0;
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') {
            bad += run_dir(argv[i], &n) != 0;
            dirs_given++;
        }
    if (dirs_given == 0) {
        char dirs[] = KD_FUZZ_CORPUS, *save = NULL;
        for (char *d = strtok_r(dirs, " ", &save); d != NULL; d = strtok_r(NULL, " ", &save))
            bad += run_dir(d, &n) != 0;
    }
    if (n == 0) {
        fprintf(stderr, "no inputs to replay\n");
        bad++;
    }
    printf("replayed %d inputs\n%d passed, %d failed\n", n, bad ? 0 : 1, bad);
    return bad ? 1 : 0;
}
