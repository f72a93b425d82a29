/*
 * Inside lib/storage: the backend ops struct every backend implements
 * (one file each: shared_fs.c, s3.c) and helpers they share.
 */
#ifndef KD_STORAGE_STORAGE_INT_H
#define KD_STORAGE_STORAGE_INT_H

#include "storage/storage.h"

struct kd_storage_ops {
    const char *name;
    int (*open)(struct kd_storage *st, char *err);
    void (*close)(struct kd_storage *st);
    int (*put_files)(struct kd_storage *st, struct kd_storage_put *puts, size_t n,
                     kd_storage_progress_fn progress, void *arg, char *err);
    int (*put_mem)(struct kd_storage *st, const char *key, const void *data, size_t len, char *err);
    int (*get_files)(struct kd_storage *st, struct kd_storage_get *gets, size_t n,
                     kd_storage_progress_fn progress, void *arg, char *err);
    int (*get_mem)(struct kd_storage *st, const char *key, struct kd_buf *out, char *err);
    int (*get_range)(struct kd_storage *st, const char *key, uint64_t off, size_t len,
                     struct kd_buf *out, char *err);
    int (*list)(struct kd_storage *st, const char *prefix, struct kd_storage_list *out, char *err);
    int (*del)(struct kd_storage *st, const char *const *keys, size_t n, char *err);
};

struct kd_storage {
    const struct kd_storage_ops *ops;
    struct kd_storage_config cfg;
    char location[KD_STORAGE_PATHLEN * 2 + 16];
    void *impl; /* the backend's state */
};

extern const struct kd_storage_ops kd_storage__shared_fs_ops;
extern const struct kd_storage_ops kd_storage__s3_ops;

/** Append one object to a list (key copied). 0, KD_ENOMEM or KD_ETOOBIG. */
int kd_storage__list_add(struct kd_storage_list *l, const char *key, size_t keylen, uint64_t size);

/** Create dir and its parents (mode 0755); existing ones are fine. 0 or -errno. */
int kd_storage__mkdirs(const char *dir);

/** Check a relative key: non-empty, no leading '/', no "." or ".." parts, no NUL. */
int kd_storage__check_key(const char *key, char *err);

/** The parallelism to use (cfg or the default). */
int kd_storage__parallel(const struct kd_storage *st);

#endif
