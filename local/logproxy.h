/*
 * kdet-local's pods/log for a pod on a node agent (`kdet-local kubelet`):
 * the log is fetched from that node's kubelet API, as kube-apiserver does.
 */
#ifndef KD_LOCAL_LOGPROXY_H
#define KD_LOCAL_LOGPROXY_H

#include <sys/types.h>

#include "core/err.h"

struct kd_logproxy;

/**
 * Start a GET of url (an https:// kubelet API URL; its certificate is not
 * verified, as with kube-apiserver --kubelet-insecure-tls) on a thread, and
 * wait up to 10 s for the response headers. On success *out streams the
 * body (kd_logproxy_read / kd_logproxy_free) and *http is the kubelet's
 * status code. Returns 0, KD_ECONNECT (detail in err) or KD_ETIMEDOUT.
 */
int kd_logproxy_open(const char *url, struct kd_logproxy **out, int *http, char *err) KD_WUR;

/** A kd_http_stream_fn: bytes read, 0 when none arrived within a second, -1 at the end. */
ssize_t kd_logproxy_read(void *ctx, char *buf, size_t max);

/** Abort the transfer, join its thread and free. NULL-safe. */
void kd_logproxy_free(void *ctx);

#endif
