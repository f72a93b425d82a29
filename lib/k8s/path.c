/*
 * Resource addressing: group/version/resource/namespace/name to the REST
 * path the API server serves, with percent-encoded segments and list/watch
 * query parameters.
 */
#include <stdio.h>
#include <string.h>

#include "k8s/client.h"

static int unreserved(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

int kd_k8s_urlencode(struct kd_buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && rc == 0; p++) {
        if (unreserved(*p)) {
            rc = kd_buf_putc(out, (char)*p);
        } else {
            char enc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = kd_buf_append(out, enc, 3);
        }
    }
    return rc;
}

/* A path segment must be non-empty, not "." or "..", and free of '/'. */
static int check_segment(const char *what, const char *s, char *err)
{
    if (s[0] == '\0' || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return kd_seterr(err, KD_EINVAL, "%s: \"%s\" is not a valid path segment", what, s);
    if (strchr(s, '/') != NULL)
        return kd_seterr(err, KD_EINVAL, "%s: \"%s\" may not contain '/'", what, s);
    return 0;
}

static int put_segment(struct kd_buf *out, const char *what, const char *s, char *err)
{
    int rc = check_segment(what, s, err);
    if (rc == 0)
        rc = kd_buf_putc(out, '/');
    if (rc == 0)
        rc = kd_k8s_urlencode(out, s);
    return rc;
}

static int put_param(struct kd_buf *out, int *first, const char *key, const char *val)
{
    int rc = kd_buf_printf(out, "%c%s=", *first ? '?' : '&', key);
    *first = 0;
    if (rc == 0)
        rc = kd_k8s_urlencode(out, val);
    return rc;
}

static int put_query(struct kd_buf *out, const struct kd_k8s_query *q)
{
    int first = 1, rc = 0;
    char num[32];
    if (q == NULL)
        return 0;
    if (rc == 0 && q->label_selector != NULL && q->label_selector[0] != '\0')
        rc = put_param(out, &first, "labelSelector", q->label_selector);
    if (rc == 0 && q->field_selector != NULL && q->field_selector[0] != '\0')
        rc = put_param(out, &first, "fieldSelector", q->field_selector);
    if (rc == 0 && q->limit > 0) {
        snprintf(num, sizeof(num), "%ld", q->limit);
        rc = put_param(out, &first, "limit", num);
    }
    if (rc == 0 && q->cont != NULL && q->cont[0] != '\0')
        rc = put_param(out, &first, "continue", q->cont);
    if (rc == 0 && q->resource_version != NULL)
        rc = put_param(out, &first, "resourceVersion", q->resource_version);
    if (rc == 0 && q->resource_version_match != NULL && q->resource_version_match[0] != '\0')
        rc = put_param(out, &first, "resourceVersionMatch", q->resource_version_match);
    if (rc == 0 && q->watch)
        rc = put_param(out, &first, "watch", "true");
    if (rc == 0 && q->allow_watch_bookmarks)
        rc = put_param(out, &first, "allowWatchBookmarks", "true");
    if (rc == 0 && q->timeout_seconds > 0) {
        snprintf(num, sizeof(num), "%ld", q->timeout_seconds);
        rc = put_param(out, &first, "timeoutSeconds", num);
    }
    if (rc == 0 && q->dry_run != NULL && q->dry_run[0] != '\0')
        rc = put_param(out, &first, "dryRun", q->dry_run);
    if (rc == 0 && q->field_manager != NULL && q->field_manager[0] != '\0')
        rc = put_param(out, &first, "fieldManager", q->field_manager);
    return rc;
}

int kd_k8s_path(struct kd_buf *out, const struct kd_k8s_gvr *gvr, const char *ns, const char *name,
                const char *sub, const struct kd_k8s_query *q, char *err)
{
    int rc = 0;
    if (gvr == NULL || gvr->version == NULL || gvr->version[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL, "resource: version is required");
        goto out;
    }
    if (gvr->resource == NULL || gvr->resource[0] == '\0') {
        rc = kd_seterr(err, KD_EINVAL, "resource: resource (plural name) is required");
        goto out;
    }
    if (sub != NULL && sub[0] != '\0' && (name == NULL || name[0] == '\0')) {
        rc = kd_seterr(err, KD_EINVAL, "subresource \"%s\": a name is required", sub);
        goto out;
    }
    if (gvr->group == NULL || gvr->group[0] == '\0') {
        rc = kd_buf_puts(out, "/api");
    } else {
        rc = kd_buf_puts(out, "/apis");
        if (rc == 0)
            rc = put_segment(out, "group", gvr->group, err);
    }
    if (rc == 0)
        rc = put_segment(out, "version", gvr->version, err);
    if (rc == 0 && ns != NULL && ns[0] != '\0') {
        rc = kd_buf_puts(out, "/namespaces");
        if (rc == 0)
            rc = put_segment(out, "namespace", ns, err);
    }
    if (rc == 0)
        rc = put_segment(out, "resource", gvr->resource, err);
    if (rc == 0 && name != NULL && name[0] != '\0')
        rc = put_segment(out, "name", name, err);
    if (rc == 0 && sub != NULL && sub[0] != '\0')
        rc = put_segment(out, "subresource", sub, err);
    if (rc == 0)
        rc = put_query(out, q);
    if (rc == KD_ETOOBIG)
        kd_seterr(err, rc, "request path longer than %zu bytes", out->max);
out:
    return rc;
}
