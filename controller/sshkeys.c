/*
 * SSH keys with OpenSSL (see sshkeys.h). The public key's wire form is
 * RFC 5656's: string "ecdsa-sha2-nistp256", string "nistp256", string Q
 * (the uncompressed point), base64 in one line.
 */
#include "sshkeys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "core/alloc.h"

/* Append an SSH string (uint32 length, bytes) at *n. */
static void put_string(unsigned char *buf, size_t *n, const void *p, size_t len)
{
    buf[(*n)++] = (unsigned char)(len >> 24);
    buf[(*n)++] = (unsigned char)(len >> 16);
    buf[(*n)++] = (unsigned char)(len >> 8);
    buf[(*n)++] = (unsigned char)len;
    memcpy(buf + *n, p, len);
    *n += len;
}

int kd_sshkey_make(const char *comment, struct kd_sshkey *out, char *err)
{
    int rc = 0;
    EVP_PKEY *key = NULL;
    BIO *bio = NULL;
    unsigned char q[133], blob[256];
    char b64[400];
    size_t qlen = 0, n = 0;
    memset(out, 0, sizeof(*out));
    key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (key == NULL) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot make an EC key");
        goto out;
    }
    if (EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, q, sizeof(q),
                                        &qlen) != 1 ||
        qlen != 65 || q[0] != 0x04) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot read the public point");
        goto out;
    }
    static const char type[] = "ecdsa-sha2-nistp256", curve[] = "nistp256";
    put_string(blob, &n, type, sizeof(type) - 1);
    put_string(blob, &n, curve, sizeof(curve) - 1);
    put_string(blob, &n, q, qlen);
    int blen = EVP_EncodeBlock((unsigned char *)b64, blob, (int)n);
    if (blen <= 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot encode the public key");
        goto out;
    }
    out->public_line = kd_xasprintf("%s %s%s%s", type, b64, comment != NULL ? " " : "",
                                    comment != NULL ? comment : "");
    if ((bio = BIO_new(BIO_s_secmem())) == NULL ||
        PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) != 1) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot write the private key");
        goto out;
    }
    char *pem = NULL;
    long plen = BIO_get_mem_data(bio, &pem);
    if (plen <= 0) {
        rc = kd_seterr(err, KD_EINTERNAL, "cannot write the private key");
        goto out;
    }
    out->private_pem = kd_xstrndup(pem, (size_t)plen);
out:
    OPENSSL_cleanse(blob, sizeof(blob));
    BIO_free_all(bio); /* secure memory: wiped as it is freed */
    EVP_PKEY_free(key);
    if (rc != 0)
        kd_sshkey_free(out);
    return rc;
}

void kd_sshkey_free(struct kd_sshkey *k)
{
    if (k == NULL)
        return;
    if (k->private_pem != NULL)
        OPENSSL_cleanse(k->private_pem, strlen(k->private_pem));
    free(k->private_pem);
    free(k->public_line);
    k->private_pem = k->public_line = NULL;
}
