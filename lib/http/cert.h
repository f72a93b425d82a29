/*
 * Self-signed serving certificates made with OpenSSL, for servers that
 * bring their own TLS where nothing else issues one: kdet-local's API and
 * kubelets, and the controller API of `det deploy local`. The certificate
 * is its own CA (basicConstraints CA:TRUE), so clients pin it as their
 * trust anchor.
 */
#ifndef KD_HTTP_CERT_H
#define KD_HTTP_CERT_H

#include <sys/types.h>

#include "core/err.h"

struct kd_http_cert_opts {
    const char *cn;   /* subject common name (required) */
    const char *san;  /* subjectAltName in OpenSSL's syntax, e.g. "IP:127.0.0.1,DNS:localhost" */
    int days;         /* validity from an hour ago; 0: 3650 */
    mode_t cert_mode; /* mode of the certificate file; 0: 0644 (the key is always 0600) */
};

/**
 * A new EC P-256 key and a certificate for it, signed by itself: *cert_pem
 * and *key_pem (new strings; the caller frees the key after wiping it).
 * 0, KD_EINVAL or KD_EINTERNAL naming the OpenSSL step in err. Pure apart
 * from the random source; thread-safe.
 */
int kd_http_cert_make(const struct kd_http_cert_opts *o, char **cert_pem, char **key_pem,
                      char *err) KD_WUR;

/**
 * Load DIR/NAME.crt and DIR/NAME.key, or make them (kd_http_cert_make) and
 * write them (the key 0600, written first; the directory made 0700 when
 * absent) when either is missing. *cert_pem and *key_pem are new strings.
 * 0 or a negative code with the file or the OpenSSL step in err. Blocks.
 */
int kd_http_cert_keep(const char *dir, const char *name, const struct kd_http_cert_opts *o,
                      char **cert_pem, char **key_pem, char *err) KD_WUR;

#endif
