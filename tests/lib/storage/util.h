/* Test helpers shared by the storage tests: temp trees and file contents. */
#ifndef KD_TEST_STORAGE_UTIL_H
#define KD_TEST_STORAGE_UTIL_H

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/str.h"
#include "storage/storage_int.h"

/* Write `len` bytes of a pattern derived from seed into dir/rel (parents created). */
static inline int write_pattern(const char *dir, const char *rel, size_t len, unsigned seed)
{
    char path[PATH_MAX], parent[PATH_MAX], *slash;
    unsigned char buf[65536];
    size_t done = 0;
    int fd;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, rel) >= sizeof(path))
        return -1;
    kd_strlcpy(parent, path, sizeof(parent));
    slash = strrchr(parent, '/');
    *slash = '\0';
    if (kd_storage__mkdirs(parent) != 0)
        return -1;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    while (done < len) {
        size_t n = len - done < sizeof(buf) ? len - done : sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)((done + i) * 31 + seed * 7 + ((done + i) >> 13));
        if (write(fd, buf, n) != (ssize_t)n) {
            close(fd);
            return -1;
        }
        done += n;
    }
    return close(fd);
}

/* 0 when the two files have the same bytes. */
static inline int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int rc = -1;
    if (fa != NULL && fb != NULL) {
        int ca, cb;
        do {
            ca = getc(fa);
            cb = getc(fb);
        } while (ca == cb && ca != EOF);
        rc = ca == cb ? 0 : -1;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return rc;
}

static inline void make_tmpdir(char *out, size_t len, const char *tag)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, len, "%s/kd-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", tag);
    if (mkdtemp(out) == NULL)
        out[0] = '\0';
}

#endif
