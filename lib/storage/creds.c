/*
 * S3 credentials: from the environment, from a directory mounted from a
 * Kubernetes Secret, or from the AWS shared credentials file. Secrets are
 * registered with the logger's redaction list and never put in messages.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/str.h"
#include "storage/storage.h"

#define CRED_FILE_MAX (64 * 1024)

/* Read a small file, trimming trailing whitespace. 0, KD_ENOTFOUND or an error. */
static int read_small(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "re");
    size_t n;
    int rc = 0;
    if (f == NULL)
        return errno == ENOENT ? KD_ENOTFOUND : -errno;
    n = fread(out, 1, len - 1, f);
    if (ferror(f)) {
        rc = KD_EIO;
        goto out;
    }
    if (n == len - 1 && fgetc(f) != EOF) {
        rc = KD_ETOOBIG;
        goto out;
    }
    out[n] = '\0';
    while (n > 0 &&
           (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ' || out[n - 1] == '\t'))
        out[--n] = '\0';
out:
    fclose(f);
    return rc;
}

static void trim(char **s)
{
    char *e;
    while (**s == ' ' || **s == '\t')
        (*s)++;
    e = *s + strlen(*s);
    while (e > *s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        *--e = '\0';
}

/* Parse the AWS credentials INI format, taking keys from [profile]. */
static int parse_ini(const char *path, const char *profile, struct kd_storage_creds *c, char *err)
{
    char *buf = malloc(CRED_FILE_MAX), *line, *save = NULL;
    int rc, in_profile = 0, lineno = 0;

    if (buf == NULL)
        return kd_seterr(err, KD_ENOMEM, "credentials: out of memory");
    rc = read_small(path, buf, CRED_FILE_MAX);
    if (rc != 0) {
        if (rc != KD_ENOTFOUND)
            rc = kd_seterr(err, rc, "credentials file %s: %s", path, kd_strerror(rc));
        goto out;
    }
    for (line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *eq, *k, *v;
        lineno++;
        trim(&line);
        if (line[0] == '#' || line[0] == ';' || line[0] == '\0')
            continue;
        if (line[0] == '[') {
            char *end = strchr(line, ']');
            if (end == NULL) {
                rc = kd_seterr(err, KD_EPARSE, "credentials file %s: a section without ']'", path);
                goto out;
            }
            *end = '\0';
            k = line + 1;
            trim(&k);
            if (kd_str_has_prefix(k, "profile "))
                k += 8;
            in_profile = strcmp(k, profile) == 0;
            continue;
        }
        if (!in_profile || (eq = strchr(line, '=')) == NULL)
            continue;
        *eq = '\0';
        k = line;
        v = eq + 1;
        trim(&k);
        trim(&v);
        if (strcmp(k, "aws_access_key_id") == 0)
            kd_strlcpy(c->access_key_id, v, sizeof(c->access_key_id));
        else if (strcmp(k, "aws_secret_access_key") == 0)
            kd_strlcpy(c->secret_access_key, v, sizeof(c->secret_access_key));
        else if (strcmp(k, "aws_session_token") == 0)
            kd_strlcpy(c->session_token, v, sizeof(c->session_token));
    }
    if (c->access_key_id[0] == '\0' || c->secret_access_key[0] == '\0') {
        rc = KD_ENOTFOUND;
        c->access_key_id[0] = c->secret_access_key[0] = c->session_token[0] = '\0';
        goto out;
    }
    if (snprintf(c->source, sizeof(c->source), "%s [%s]", path, profile) < 0)
        c->source[0] = '\0';
out:
    if (buf != NULL)
        explicit_bzero(buf, CRED_FILE_MAX);
    free(buf);
    return rc;
}

static int from_dir(const char *dir, const char *profile, struct kd_storage_creds *c, char *err)
{
    char path[PATH_MAX];
    int rc;

    snprintf(path, sizeof(path), "%s/AWS_ACCESS_KEY_ID", dir);
    rc = read_small(path, c->access_key_id, sizeof(c->access_key_id));
    if (rc == 0) {
        snprintf(path, sizeof(path), "%s/AWS_SECRET_ACCESS_KEY", dir);
        rc = read_small(path, c->secret_access_key, sizeof(c->secret_access_key));
        if (rc != 0) {
            c->access_key_id[0] = '\0';
            return kd_seterr(err, KD_EINVALID,
                             "credentials directory %s: AWS_ACCESS_KEY_ID is there but "
                             "AWS_SECRET_ACCESS_KEY is missing or unreadable",
                             dir);
        }
        snprintf(path, sizeof(path), "%s/AWS_SESSION_TOKEN", dir);
        if (read_small(path, c->session_token, sizeof(c->session_token)) != 0)
            c->session_token[0] = '\0';
        if (snprintf(c->source, sizeof(c->source), "directory %s", dir) < 0)
            c->source[0] = '\0';
        return 0;
    }
    snprintf(path, sizeof(path), "%s/credentials", dir);
    return parse_ini(path, profile, c, err);
}

int kd_storage_load_credentials(const struct kd_storage_config *cfg, struct kd_storage_creds *c,
                                char *err)
{
    const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    const char *profile = getenv("AWS_PROFILE");
    const char *dir =
        cfg->credentials_dir[0] ? cfg->credentials_dir : getenv("KDET_S3_CREDENTIALS_DIR");
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE"), *home = getenv("HOME");
    char path[PATH_MAX];
    int rc = KD_ENOTFOUND;

    memset(c, 0, sizeof(*c));
    if (profile == NULL || profile[0] == '\0')
        profile = "default";
    if (ak != NULL && ak[0] && sk != NULL && sk[0]) {
        const char *tok = getenv("AWS_SESSION_TOKEN");
        if (strlen(ak) >= sizeof(c->access_key_id) || strlen(sk) >= sizeof(c->secret_access_key) ||
            (tok != NULL && strlen(tok) >= sizeof(c->session_token))) {
            rc = kd_seterr(err, KD_EINVALID, "credentials from the environment: too long");
            goto out;
        }
        kd_strlcpy(c->access_key_id, ak, sizeof(c->access_key_id));
        kd_strlcpy(c->secret_access_key, sk, sizeof(c->secret_access_key));
        kd_strlcpy(c->session_token, tok ? tok : "", sizeof(c->session_token));
        kd_strlcpy(c->source, "environment (AWS_ACCESS_KEY_ID)", sizeof(c->source));
        rc = 0;
        goto out;
    }
    if (dir != NULL && dir[0]) {
        rc = from_dir(dir, profile, c, err);
        if (rc != KD_ENOTFOUND)
            goto out;
    }
    if (file != NULL && file[0]) {
        rc = parse_ini(file, profile, c, err);
    } else if (home != NULL && home[0]) {
        snprintf(path, sizeof(path), "%s/.aws/credentials", home);
        rc = parse_ini(path, profile, c, err);
    }
    if (rc == KD_ENOTFOUND)
        kd_seterr(err, rc,
                  "s3: no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                  "mount a Secret with those keys at checkpoint_storage.credentials_dir "
                  "(or $KDET_S3_CREDENTIALS_DIR), or write ~/.aws/credentials");
out:
    if (rc == 0) {
        kd_log_add_secret(c->secret_access_key);
        kd_log_add_secret(c->session_token);
    }
    return rc;
}
