/*
 * SSH key pairs for task shells (docs/tasks.md, "Shells"), made with
 * OpenSSL in the formats OpenSSH reads: the private key as PEM (PKCS#8),
 * the public key as an authorized_keys / known_hosts line. ECDSA P-256,
 * which every OpenSSH built with OpenSSL accepts as identity and host key.
 */
#ifndef KD_CTRL_SSHKEYS_H
#define KD_CTRL_SSHKEYS_H

#include "core/err.h"

struct kd_sshkey {
    char *private_pem; /* secret: never logged */
    char *public_line; /* "ecdsa-sha2-nistp256 AAAA... COMMENT" */
};

/**
 * A new key pair; `comment` (may be NULL) ends the public line. Caller
 * frees with kd_sshkey_free. 0 or KD_EINTERNAL with the cause in err.
 * Thread-safe.
 */
int kd_sshkey_make(const char *comment, struct kd_sshkey *out, char *err) KD_WUR;

/** Wipe and free both keys. NULL-safe. */
void kd_sshkey_free(struct kd_sshkey *k);

#endif
