/*
 * Determined's experiment configuration in Kubernetes' terms (see
 * k8smap.h): each rule is the one the Kubernetes API server or the
 * container runtime applies, written down once so that det, the config
 * check and the pod builder give the same answer.
 */
#include "config/k8smap.h"

#include <stdio.h>
#include <string.h>

#include "core/str.h"

int kd_label_value(const char *name, char *out, size_t len)
{
    int rc = 0;
    size_t n = 0;
    bool dash = false;
    if (out == NULL || len < KD_LABEL_VALUE_MAX + 1) {
        rc = KD_EINVALID;
        goto out;
    }
    for (const char *p = name != NULL ? name : ""; *p != '\0' && n < KD_LABEL_VALUE_MAX; p++) {
        char ch = *p;
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) {
            if (dash && n > 0 && n + 1 < KD_LABEL_VALUE_MAX)
                out[n++] = '-';
            dash = false;
            out[n++] = ch;
        } else {
            dash = true;
        }
    }
    out[n] = '\0';
    if (n == 0)
        rc = KD_EINVALID;
out:
    return rc;
}

/* Linux's capabilities (include/uapi/linux/capability.h, up to CAP_CHECKPOINT_RESTORE). */
static const char *const caps[] = {"CHOWN",
                                   "DAC_OVERRIDE",
                                   "DAC_READ_SEARCH",
                                   "FOWNER",
                                   "FSETID",
                                   "KILL",
                                   "SETGID",
                                   "SETUID",
                                   "SETPCAP",
                                   "LINUX_IMMUTABLE",
                                   "NET_BIND_SERVICE",
                                   "NET_BROADCAST",
                                   "NET_ADMIN",
                                   "NET_RAW",
                                   "IPC_LOCK",
                                   "IPC_OWNER",
                                   "SYS_MODULE",
                                   "SYS_RAWIO",
                                   "SYS_CHROOT",
                                   "SYS_PTRACE",
                                   "SYS_PACCT",
                                   "SYS_ADMIN",
                                   "SYS_BOOT",
                                   "SYS_NICE",
                                   "SYS_RESOURCE",
                                   "SYS_TIME",
                                   "SYS_TTY_CONFIG",
                                   "MKNOD",
                                   "LEASE",
                                   "AUDIT_WRITE",
                                   "AUDIT_CONTROL",
                                   "SETFCAP",
                                   "MAC_OVERRIDE",
                                   "MAC_ADMIN",
                                   "SYSLOG",
                                   "WAKE_ALARM",
                                   "BLOCK_SUSPEND",
                                   "AUDIT_READ",
                                   "PERFMON",
                                   "BPF",
                                   "CHECKPOINT_RESTORE",
                                   "ALL",
                                   NULL};

int kd_capability_name(const char *name, char *out, size_t len)
{
    int rc = KD_EINVALID;
    char up[64];
    size_t n = 0;
    const char *p = name != NULL ? name : "";
    if (out == NULL || len < 32)
        goto out;
    out[0] = '\0';
    if (strncmp(p, "CAP_", 4) == 0 || strncmp(p, "cap_", 4) == 0)
        p += 4;
    for (; *p != '\0' && n + 1 < sizeof(up); p++)
        up[n++] = (*p >= 'a' && *p <= 'z') ? (char)(*p - 'a' + 'A') : *p;
    up[n] = '\0';
    if (*p != '\0')
        goto out; /* longer than any capability */
    for (size_t i = 0; caps[i] != NULL; i++) {
        if (strcmp(up, caps[i]) == 0) {
            kd_strlcpy(out, caps[i], len);
            rc = 0;
            goto out;
        }
    }
    const char *s = kd_suggest(up, caps);
    kd_strlcpy(out, s != NULL ? s : "", len);
out:
    return rc;
}

bool kd_port_name_valid(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    bool letter = false;
    if (n == 0 || n > 15 || s[0] == '-' || s[n - 1] == '-' || strstr(s, "--") != NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= 'a' && s[i] <= 'z')
            letter = true;
        else if (!(s[i] >= '0' && s[i] <= '9') && s[i] != '-')
            return false;
    }
    return letter;
}

const char *kd_mount_propagation(const char *p)
{
    const char *k = NULL;
    if (p == NULL)
        k = NULL;
    else if (strcmp(p, "rslave") == 0 || strcmp(p, "slave") == 0)
        k = "HostToContainer";
    else if (strcmp(p, "rshared") == 0 || strcmp(p, "shared") == 0)
        k = "Bidirectional";
    return k;
}

bool kd_device_is_gpu(const char *hp)
{
    return hp != NULL && (kd_str_has_prefix(hp, "/dev/nvidia") || strcmp(hp, "/dev/kfd") == 0 ||
                          strcmp(hp, "/dev/dri") == 0 || kd_str_has_prefix(hp, "/dev/dri/"));
}

bool kd_path_clean(const char *in, char *out, size_t len)
{
    size_t n = 0;
    bool dotdot = false;
    const char *p = in != NULL ? in : "";
    if (len == 0)
        return false;
    while (*p != '\0') {
        while (*p == '/')
            p++;
        const char *e = p + strcspn(p, "/");
        size_t l = (size_t)(e - p);
        if (l == 0 || (l == 1 && p[0] == '.')) {
            p = e;
            continue;
        }
        if (l == 2 && p[0] == '.' && p[1] == '.')
            dotdot = true;
        if (n + 1 < len)
            out[n++] = '/';
        for (size_t i = 0; i < l && n + 1 < len; i++)
            out[n++] = p[i];
        p = e;
    }
    if (n == 0 && len > 1)
        out[n++] = '/';
    out[n] = '\0';
    return dotdot;
}

bool kd_path_within(const char *p, const char *base)
{
    size_t n = strlen(base);
    if (strcmp(base, "/") == 0)
        return true;
    return strncmp(p, base, n) == 0 && (p[n] == '\0' || p[n] == '/');
}
