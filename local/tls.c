/*
 * kdet-local's serving certificate (see tls.h): lib/http's self-signed
 * certificate for 127.0.0.1 and localhost, kept in the data dir.
 */
#include "tls.h"

#include "http/cert.h"

int kd_local_tls(const char *dir, char **cert_pem, char **key_pem, char *err)
{
    struct kd_http_cert_opts o = {
        .cn = "kdet-local", .san = "IP:127.0.0.1,DNS:localhost", .cert_mode = 0600};
    return kd_http_cert_keep(dir, "server", &o, cert_pem, key_pem, err);
}
