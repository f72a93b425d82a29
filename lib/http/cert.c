/*
 * Self-signed certificates with OpenSSL (see cert.h): an EC P-256 key, a
 * random serial, subjectAltName, CA:TRUE with keyCertSign so the
 * certificate is its own trust anchor, serverAuth. Kept in PEM files that
 * outlive restarts, so that what clients pinned stays valid.
 */
#include "http/cert.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "core/alloc.h"

#define MAX_PEM (64 * 1024)

static char *read_small(const char *path)
{
    FILE *f = fopen(path, "re");
    char *buf = NULL;
    if (f == NULL)
        return NULL;
    buf = kd_xcalloc(1, MAX_PEM + 1);
    size_t n = fread(buf, 1, MAX_PEM, f);
    fclose(f);
    if (n == 0 || n == MAX_PEM) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int write_file(const char *path, const char *data, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    size_t n = strlen(data);
    int rc = write(fd, data, n) == (ssize_t)n && fchmod(fd, mode) == 0 && fsync(fd) == 0 ? 0 : -EIO;
    close(fd);
    return rc;
}

static char *bio_string(BIO *b)
{
    char *p = NULL;
    long n = BIO_get_mem_data(b, &p);
    return n > 0 ? kd_xstrndup(p, (size_t)n) : NULL;
}

static int add_ext(X509 *x, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (ext == NULL)
        return -1;
    int ok = X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

static void free_pem(char **p)
{
    if (*p != NULL)
        OPENSSL_cleanse(*p, strlen(*p));
    free(*p);
    *p = NULL;
}

int kd_http_cert_make(const struct kd_http_cert_opts *o, char **cert_pem, char **key_pem, char *err)
{
    int rc = 0;
    EVP_PKEY *pk = NULL;
    X509 *x = NULL;
    BIO *cb = NULL, *kb = NULL;
    unsigned char serial[8];
    const char *step = "checking the options";
    *cert_pem = NULL;
    *key_pem = NULL;
    if (o == NULL || o->cn == NULL || o->cn[0] == '\0' || o->days < 0) {
        rc = kd_seterr(err, KD_EINVAL, "certificate: a common name and days >= 0 are required");
        goto out;
    }
    step = "generating the key";
    pk = EVP_EC_gen("P-256");
    x = X509_new();
    if (pk == NULL || x == NULL || RAND_bytes(serial, sizeof(serial)) != 1)
        goto ssl_fail;
    step = "building the certificate";
    int64_t sn = 0;
    for (size_t i = 0; i < sizeof(serial) - 1; i++)
        sn = (sn << 8) | serial[i];
    if (!X509_set_version(x, 2) || !ASN1_INTEGER_set_int64(X509_get_serialNumber(x), sn + 1) ||
        X509_gmtime_adj(X509_getm_notBefore(x), -3600) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(x), (long)(o->days ? o->days : 3650) * 86400) == NULL ||
        !X509_set_pubkey(x, pk))
        goto ssl_fail;
    X509_NAME *name = X509_get_subject_name(x);
    if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)o->cn, -1, -1,
                                    0) ||
        !X509_set_issuer_name(x, name) ||
        (o->san != NULL && o->san[0] != '\0' && add_ext(x, NID_subject_alt_name, o->san) != 0) ||
        add_ext(x, NID_basic_constraints, "critical,CA:TRUE") != 0 ||
        add_ext(x, NID_key_usage, "critical,digitalSignature,keyCertSign") != 0 ||
        add_ext(x, NID_ext_key_usage, "serverAuth") != 0 ||
        add_ext(x, NID_subject_key_identifier, "hash") != 0)
        goto ssl_fail;
    step = "signing the certificate";
    if (X509_sign(x, pk, EVP_sha256()) == 0)
        goto ssl_fail;
    step = "writing PEM";
    cb = BIO_new(BIO_s_mem());
    kb = BIO_new(BIO_s_mem());
    if (cb == NULL || kb == NULL || !PEM_write_bio_X509(cb, x) ||
        !PEM_write_bio_PrivateKey(kb, pk, NULL, NULL, 0, NULL, NULL))
        goto ssl_fail;
    *cert_pem = bio_string(cb);
    *key_pem = bio_string(kb);
    if (*cert_pem == NULL || *key_pem == NULL)
        goto ssl_fail;
    goto out;
ssl_fail:
    rc = kd_seterr(err, KD_EINTERNAL, "certificate: OpenSSL failed while %s", step);
out:
    if (rc != 0) {
        free_pem(cert_pem);
        free_pem(key_pem);
    }
    BIO_free(cb);
    BIO_free_all(kb);
    X509_free(x);
    EVP_PKEY_free(pk);
    return rc;
}

int kd_http_cert_keep(const char *dir, const char *name, const struct kd_http_cert_opts *o,
                      char **cert_pem, char **key_pem, char *err)
{
    int rc = 0;
    char *crt_path = kd_xasprintf("%s/%s.crt", dir, name);
    char *key_path = kd_xasprintf("%s/%s.key", dir, name);
    char *c = read_small(crt_path), *k = read_small(key_path);
    *cert_pem = NULL;
    *key_pem = NULL;
    if (c != NULL && k != NULL) {
        *cert_pem = c;
        *key_pem = k;
        c = k = NULL;
        goto out;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        rc = kd_seterr(err, -errno, "tls: cannot create %s: %s", dir, strerror(errno));
        goto out;
    }
    if ((rc = kd_http_cert_make(o, cert_pem, key_pem, err)) != 0)
        goto out;
    if ((rc = write_file(key_path, *key_pem, 0600)) != 0) {
        kd_seterr(err, rc, "tls: cannot write %s: %s", key_path, strerror(-rc));
        goto out;
    }
    if ((rc = write_file(crt_path, *cert_pem, o->cert_mode ? o->cert_mode : 0644)) != 0)
        kd_seterr(err, rc, "tls: cannot write %s: %s", crt_path, strerror(-rc));
out:
    if (rc != 0) {
        free_pem(cert_pem);
        free_pem(key_pem);
    }
    free_pem(&c);
    free_pem(&k);
    free(crt_path);
    free(key_path);
    return rc;
}
