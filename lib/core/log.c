/*
 * logfmt logging (see log.h). Each line is built in a stack buffer and
 * written with one write(2), so lines from several threads or processes
 * sharing a pipe never interleave.
 */
#include "core/log.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/time.h"

#define LINE_MAX_BYTES 8192
#define MAX_SECRETS 64
#define MIN_SECRET_LEN 4

int kd_log_min_level = KD_LOG_INFO;
static int log_fd = STDERR_FILENO;
static char log_comp[64];

static pthread_mutex_t secrets_lock = PTHREAD_MUTEX_INITIALIZER;
static char *secrets[MAX_SECRETS];
static size_t nsecrets;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

int kd_log_level_parse(const char *s, int *level)
{
    if (s == NULL)
        return KD_EINVAL;
    for (int i = 0; i <= KD_LOG_OFF; i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            *level = i;
            return 0;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *level = KD_LOG_WARN;
        return 0;
    }
    return KD_EINVAL;
}

void kd_log_init(const char *component, int level, int fd)
{
    if (component != NULL)
        snprintf(log_comp, sizeof(log_comp), "%s", component);
    if (level < 0) {
        level = KD_LOG_INFO;
        const char *env = getenv("KDET_LOG_LEVEL");
        if (env != NULL && kd_log_level_parse(env, &level) < 0)
            level = KD_LOG_INFO;
    }
    kd_log_min_level = level;
    log_fd = fd >= 0 ? fd : STDERR_FILENO;
}

void kd_log_add_secret(const char *value)
{
    if (value == NULL || strlen(value) < MIN_SECRET_LEN)
        return;
    pthread_mutex_lock(&secrets_lock);
    for (size_t i = 0; i < nsecrets; i++) {
        if (strcmp(secrets[i], value) == 0)
            goto out;
    }
    if (nsecrets < MAX_SECRETS) {
        char *copy = strdup(value);
        if (copy != NULL)
            secrets[nsecrets++] = copy;
    }
out:
    pthread_mutex_unlock(&secrets_lock);
}

void kd_log_clear_secrets(void)
{
    pthread_mutex_lock(&secrets_lock);
    for (size_t i = 0; i < nsecrets; i++)
        free(secrets[i]);
    nsecrets = 0;
    pthread_mutex_unlock(&secrets_lock);
}

static const char *const sensitive_keys[] = {
    "token",      "secret",    "password", "passwd", "authorization", "credential",
    "access_key", "accesskey", "api_key",  "apikey", "private_key",   NULL,
};

static int key_is_sensitive(const char *key, size_t len)
{
    char low[64];
    if (len >= sizeof(low))
        len = sizeof(low) - 1;
    for (size_t i = 0; i < len; i++)
        low[i] = (char)tolower((unsigned char)key[i]);
    low[len] = '\0';
    for (size_t i = 0; sensitive_keys[i] != NULL; i++) {
        if (strstr(low, sensitive_keys[i]) != NULL)
            return 1;
    }
    return 0;
}

/* Appends to out, never past outlen-1; returns the new position. */
static size_t put(char *out, size_t pos, size_t outlen, const char *s, size_t n)
{
    if (pos + 1 >= outlen)
        return pos;
    size_t room = outlen - 1 - pos;
    if (n > room)
        n = room;
    memcpy(out + pos, s, n);
    pos += n;
    out[pos] = '\0';
    return pos;
}

/* Pass 1: values of sensitive logfmt keys. */
static size_t redact_keys(const char *in, char *out, size_t outlen)
{
    size_t pos = 0;
    const char *p = in;
    out[0] = '\0';
    while (*p) {
        /* A key starts after the start or a space and runs to '='. */
        const char *k = p;
        while (*p && *p != '=' && *p != ' ' && *p != '"')
            p++;
        if (*p != '=' || p == k) {
            /* Not a key: copy through the next space (or quoted run). */
            if (*p == '"') {
                const char *q = p + 1;
                while (*q && *q != '"') {
                    if (*q == '\\' && q[1])
                        q++;
                    q++;
                }
                if (*q)
                    q++;
                pos = put(out, pos, outlen, k, (size_t)(q - k));
                p = q;
            } else {
                if (*p)
                    p++;
                pos = put(out, pos, outlen, k, (size_t)(p - k));
            }
            continue;
        }
        size_t klen = (size_t)(p - k);
        p++; /* '=' */
        const char *v = p;
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1])
                    p++;
                p++;
            }
            if (*p)
                p++;
        } else {
            while (*p && *p != ' ')
                p++;
        }
        pos = put(out, pos, outlen, k, klen + 1);
        if (key_is_sensitive(k, klen) && p > v)
            pos = put(out, pos, outlen, "[REDACTED]", 10);
        else
            pos = put(out, pos, outlen, v, (size_t)(p - v));
    }
    return pos;
}

size_t kd_redact(const char *in, char *out, size_t outlen)
{
    if (outlen == 0)
        return 0;
    char *tmp = malloc(outlen);
    if (tmp == NULL) {
        out[0] = '\0';
        return 0;
    }
    redact_keys(in, tmp, outlen);

    /* Pass 2: registered secret values anywhere. */
    size_t pos = 0;
    out[0] = '\0';
    pthread_mutex_lock(&secrets_lock);
    const char *p = tmp;
    while (*p) {
        size_t hit = 0;
        for (size_t i = 0; i < nsecrets; i++) {
            size_t n = strlen(secrets[i]);
            if (strncmp(p, secrets[i], n) == 0) {
                hit = n;
                break;
            }
        }
        if (hit) {
            pos = put(out, pos, outlen, "[REDACTED]", 10);
            p += hit;
        } else {
            pos = put(out, pos, outlen, p, 1);
            p++;
        }
    }
    pthread_mutex_unlock(&secrets_lock);
    free(tmp);
    return pos;
}

#define LOGQ_SLOTS 8
#define LOGQ_LEN 512

const char *kd_logq(const char *s)
{
    static __thread char ring[LOGQ_SLOTS][LOGQ_LEN];
    static __thread unsigned next;
    char *b = ring[next++ % LOGQ_SLOTS];
    if (s == NULL)
        return "null";
    int plain = *s != '\0';
    for (const char *p = s; *p && plain; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c >= 0x7f)
            plain = 0;
    }
    if (plain && strlen(s) < LOGQ_LEN - 32)
        return s;
    size_t pos = 0;
    b[pos++] = '"';
    for (const char *p = s; *p && pos < LOGQ_LEN - 32; p++) {
        unsigned char c = (unsigned char)*p;
        switch (c) {
        case '"':
            b[pos++] = '\\';
            b[pos++] = '"';
            break;
        case '\\':
            b[pos++] = '\\';
            b[pos++] = '\\';
            break;
        case '\n':
            b[pos++] = '\\';
            b[pos++] = 'n';
            break;
        case '\t':
            b[pos++] = '\\';
            b[pos++] = 't';
            break;
        case '\r':
            b[pos++] = '\\';
            b[pos++] = 'r';
            break;
        default:
            if (c < ' ' || c == 0x7f)
                pos += (size_t)snprintf(b + pos, 5, "\\x%02x", c);
            else
                b[pos++] = (char)c;
        }
    }
    if (strlen(s) >= LOGQ_LEN - 32 && pos >= LOGQ_LEN - 32) {
        memcpy(b + pos, "...", 3);
        pos += 3;
    }
    b[pos++] = '"';
    b[pos] = '\0';
    return b;
}

void kd__log(int level, const char *file, int line, const char *msg, const char *fmt, ...)
{
    if (level < kd_log_min_level || level < 0 || level >= KD_LOG_OFF)
        return;
    char raw[LINE_MAX_BYTES];
    char ts[40];
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(raw, sizeof(raw), "ts=%s level=%s%s%s msg=%s",
                     kd_time_rfc3339(kd_wall_ms(), 1, ts, sizeof(ts)), level_names[level],
                     log_comp[0] ? " comp=" : "", log_comp, kd_logq(msg));
    if (n < 0)
        return;
    size_t pos = (size_t)n < sizeof(raw) ? (size_t)n : sizeof(raw) - 1;
    if (fmt[0] != '\0' && pos + 2 < sizeof(raw)) {
        raw[pos++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(raw + pos, sizeof(raw) - pos, fmt, ap);
        va_end(ap);
        if (m > 0)
            pos += (size_t)m < sizeof(raw) - pos ? (size_t)m : sizeof(raw) - pos - 1;
    }
    if (level != KD_LOG_INFO)
        snprintf(raw + pos, sizeof(raw) - pos, " caller=%s:%d", base, line);

    char out[LINE_MAX_BYTES + 2];
    size_t len = kd_redact(raw, out, LINE_MAX_BYTES);
    out[len++] = '\n';
    ssize_t w = write(log_fd, out, len);
    (void)w; /* a log line that cannot be written has nowhere else to go */
}
