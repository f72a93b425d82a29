/*
 * kdet-local's serving certificate for --tls: a self-signed EC P-256
 * certificate for 127.0.0.1 and localhost, made once and kept in the data
 * dir so that kubeconfigs stay valid across restarts.
 */
#ifndef KD_LOCAL_TLS_H
#define KD_LOCAL_TLS_H

#include "core/err.h"

/**
 * Load DIR/server.crt and DIR/server.key, or create them (mode 0600) when
 * absent. *cert_pem and *key_pem are new strings the caller frees. Returns
 * 0 or a negative code with the file or the OpenSSL step named in err.
 */
int kd_local_tls(const char *dir, char **cert_pem, char **key_pem, char *err) KD_WUR;

#endif
