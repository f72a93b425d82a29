/*
 * The s3 backend (being written): S3 and S3-compatible servers over libcurl.
 */
#include "storage/storage_int.h"

static int s3_open(struct kd_storage *st, char *err)
{
    (void)st;
    return kd_seterr(err, KD_ENOTSUP, "s3: not available in this build yet");
}

const struct kd_storage_ops kd_storage__s3_ops = {
    .name = "s3",
    .open = s3_open,
};
