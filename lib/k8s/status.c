/*
 * Kubernetes Status objects to typed errors (STYLE.md rule 7): the HTTP
 * code picks the KD_E* code, and the Status reason, message and causes are
 * kept for the caller instead of being dropped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/str.h"
#include "k8s/client.h"

void kd_k8s_status_free(struct kd_k8s_status *st)
{
    if (st == NULL)
        return;
    json_decref(st->causes);
    st->causes = NULL;
}

static int code_for(int http, const char *reason)
{
    if (http >= 200 && http < 300)
        return 0;
    switch (http) {
    case 400: return KD_EINVAL;
    case 401: return KD_EUNAUTHORIZED;
    case 403: return KD_EFORBIDDEN;
    case 404: return KD_ENOTFOUND;
    case 405:
    case 406:
    case 415: return KD_ENOTSUP;
    case 409: return strcmp(reason, "AlreadyExists") == 0 ? KD_EEXIST : KD_ECONFLICT;
    case 410: return KD_EGONE;
    case 413: return KD_ETOOBIG;
    case 422: return KD_EINVALID;
    case 429: return KD_EAGAIN;
    default: break;
    }
    if (http >= 500 && http < 600)
        return KD_EAGAIN;
    return KD_EPROTO;
}

/* The reason the API server uses for a code when the body has none. */
static const char *default_reason(int http)
{
    switch (http) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 406: return "NotAcceptable";
    case 409: return "Conflict";
    case 410: return "Expired";
    case 413: return "RequestEntityTooLarge";
    case 415: return "UnsupportedMediaType";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return "Unknown";
    }
}

/* Append to text (KD_ERRLEN bytes, *used of them taken), cutting what does not fit. */
static void add(char *text, size_t *used, const char *fmt, ...) KD_PRINTF(3, 4);
static void add(char *text, size_t *used, const char *fmt, ...)
{
    va_list ap;
    if (*used >= KD_ERRLEN - 1)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(text + *used, KD_ERRLEN - *used, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used = *used + (size_t)n < KD_ERRLEN - 1 ? *used + (size_t)n : KD_ERRLEN - 1;
}

int kd_k8s_map_status(int http, const char *body, size_t len, struct kd_k8s_status *st, char *err)
{
    struct kd_k8s_status local = {0};
    json_t *doc = NULL;
    int rc;

    if (st == NULL)
        st = &local;
    kd_k8s_status_free(st);
    memset(st, 0, sizeof(*st));
    st->http = http;
    if (body != NULL && len > 0)
        doc = json_loadb(body, len, JSON_DECODE_ANY, NULL);
    if (json_is_object(doc)) {
        const char *kind = json_string_value(json_object_get(doc, "kind"));
        if (kind != NULL && strcmp(kind, "Status") == 0) {
            const char *r = json_string_value(json_object_get(doc, "reason"));
            const char *m = json_string_value(json_object_get(doc, "message"));
            json_t *details = json_object_get(doc, "details");
            json_int_t code = json_integer_value(json_object_get(doc, "code"));
            if (r != NULL)
                kd_strlcpy(st->reason, r, sizeof(st->reason));
            if (m != NULL)
                kd_strlcpy(st->message, m, sizeof(st->message));
            if (json_is_object(details)) {
                json_t *causes = json_object_get(details, "causes");
                json_int_t ra = json_integer_value(json_object_get(details, "retryAfterSeconds"));
                if (json_is_array(causes))
                    st->causes = json_incref(causes);
                if (ra > 0)
                    st->retry_after_s = (long)ra;
            }
            /* A watch ERROR event carries its Status with HTTP 200. */
            if ((http < 300) && code >= 300 && code < 600)
                st->http = http = (int)code;
        }
    }
    if (st->reason[0] == '\0' && (http < 200 || http >= 300))
        kd_strlcpy(st->reason, default_reason(http), sizeof(st->reason));
    if (st->message[0] == '\0' && body != NULL && len > 0 && doc == NULL) {
        /* Not JSON (a proxy's HTML page, plain text): keep its first line. body holds len
         * bytes and need not end in a NUL, so the line end is looked for within them. */
        size_t n = 0;
        while (n < len && body[n] != '\r' && body[n] != '\n' && body[n] != '\0')
            n++;
        if (n >= sizeof(st->message))
            n = sizeof(st->message) - 1;
        memcpy(st->message, body, n);
        st->message[n] = '\0';
    }
    rc = code_for(http, st->reason);
    if (rc != 0 && err != NULL) {
        /* Cut at KD_ERRLEN rather than dropped: a long Status message still says what failed. */
        char text[KD_ERRLEN] = "";
        size_t used = 0;
        size_t i;
        json_t *cause;
        add(text, &used, "HTTP %d %s: %s", http, st->reason,
            st->message[0] != '\0' ? st->message : kd_strerror(rc));
        json_array_foreach(st->causes, i, cause)
        {
            const char *f = json_string_value(json_object_get(cause, "field"));
            const char *m = json_string_value(json_object_get(cause, "message"));
            add(text, &used, "%s%s %s: %s%s", i == 0 ? " (causes:" : "", i == 0 ? "" : ";",
                f ? f : "(object)", m ? m : "invalid",
                i + 1 == json_array_size(st->causes) ? ")" : "");
        }
        kd_seterr(err, rc, "%s", text);
    }
    json_decref(doc);
    kd_k8s_status_free(&local);
    return rc;
}

const char *kd_k8s_meta_str(const json_t *obj, const char *field)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}

int kd_k8s_obj_key(const json_t *obj, char *buf, size_t len)
{
    const char *ns = kd_k8s_meta_str(obj, "namespace");
    const char *name = kd_k8s_meta_str(obj, "name");
    int n;
    if (name == NULL || name[0] == '\0')
        return KD_EINVAL;
    if (ns != NULL && ns[0] != '\0')
        n = snprintf(buf, len, "%s/%s", ns, name);
    else
        n = snprintf(buf, len, "%s", name);
    return (n < 0 || (size_t)n >= len) ? KD_ETOOBIG : 0;
}

static const char *const event_names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};

int kd_k8s_event_type_parse(const char *s, enum kd_k8s_event_type *out)
{
    for (int i = 0; s != NULL && i <= KD_K8S_ERROR; i++) {
        if (strcmp(s, event_names[i]) == 0) {
            *out = (enum kd_k8s_event_type)i;
            return 0;
        }
    }
    return KD_EPARSE;
}

const char *kd_k8s_event_type_name(enum kd_k8s_event_type t)
{
    return (t >= KD_K8S_ADDED && t <= KD_K8S_ERROR) ? event_names[t] : "UNKNOWN";
}
