/* libFuzzer target: arbitrary bytes as a context archive. kd_context_unpack
 * must never crash, and must never create anything outside its target (the
 * sandbox's parent is checked after each input). */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context/context.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char sandbox[64];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static size_t entries(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        n++;
    if (d)
        closedir(d);
    return n;
}

/* At exit the sandbox goes, so that a run leaves nothing in /tmp. */
static void remove_sandbox(void)
{
    nftw(sandbox, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dest[128], err[KD_ERRLEN];
    if (sandbox[0] == '\0') {
        snprintf(sandbox, sizeof(sandbox), "/tmp/kd-fuzz-unpack-XXXXXX");
        if (mkdtemp(sandbox) == NULL)
            abort();
        atexit(remove_sandbox);
    }
    snprintf(dest, sizeof(dest), "%s/d", sandbox);
    mkdir(dest, 0755);
    err[0] = '\0';
    /* A refused archive always says why. */
    if (kd_context_unpack(data, size, dest, 1 << 20, err) != 0 && err[0] == '\0')
        abort();
    /* the sandbox holds ".", ".." and "d": anything else escaped */
    if (entries(sandbox) != 3)
        abort();
    nftw(dest, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
