/*
 * File-system helpers (see fs.h): one recursive delete for the checkpoint
 * staging dirs, the kubelet's pod dirs and libdtrain's upload dirs, and one
 * mkdir -p for the kubelet, `det deploy` and the storage backends.
 */
#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* keep_top: remove what is under the directory path, not path itself. */
static int rm_tree(const char *path, int depth, bool keep_top)
{
    struct stat sb;
    int rc = 0;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT && !keep_top ? 0 : -errno;
    if (!S_ISDIR(sb.st_mode))
        return keep_top ? -ENOTDIR : unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
    if (depth >= 64)
        return -ELOOP;
    DIR *d = opendir(path);
    if (d != NULL) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            char sub[PATH_MAX];
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            int r = (size_t)snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) < sizeof(sub)
                        ? rm_tree(sub, depth + 1, false)
                        : -ENAMETOOLONG;
            if (rc == 0)
                rc = r;
        }
        closedir(d);
    }
    if (d == NULL && rc == 0)
        rc = -errno;
    if (!keep_top && rmdir(path) != 0 && errno != ENOENT && rc == 0)
        rc = -errno;
    return rc;
}

int kd_rm_tree(const char *path)
{
    return rm_tree(path, 0, false);
}

int kd_empty_tree(const char *path)
{
    return rm_tree(path, 0, true);
}

int kd_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    int rc = 0;
    size_t n = strlen(path);
    if (n == 0)
        return -ENOENT;
    if (n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p != '\0' && rc == 0; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            rc = -errno;
        *p = '/';
    }
    if (rc == 0 && mkdir(buf, mode) != 0 && errno != EEXIST)
        rc = -errno;
    return rc;
}

int kd_write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
        } else if (w == 0) {
            return -EIO;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                return -errno;
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}
