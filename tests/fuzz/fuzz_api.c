/*
 * libFuzzer target for the controller API's decisions on a request, with
 * no database and no Kubernetes API (controller/api/check.c): the input is
 * an HTTP request (request line, header lines, an empty line, the body).
 * Checked on every input:
 *  - routing: a route found matches the method and path segment by
 *    segment, exactly one route of the table does, and a path no route of
 *    the method takes gets as Allow exactly the methods other routes of
 *    that path take; routes that read a namespace or trial segment have it;
 *  - the bearer token: what api_bearer returns is what follows "Bearer "
 *    (any case), 1 to API_MAX_TOKEN bytes, and NULL otherwise;
 *  - the body cap: a Content-Length over the route's cap is refused with
 *    413 and only then;
 *  - every JSON body check of the worker and user routes, on the body: a
 *    refusal is 400 or 413 with a field that its message names; what a
 *    check accepts holds the documented form (a canonical checkpoint
 *    UUID, a run id and address of the allowed characters, a port in
 *    range, namespaces that are DNS labels...); and the body, serialised
 *    again, gets the same verdict.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/check.h"
#include "api/routes.h"
#include "api/usertoken.h"
#include "core/log.h"
#include "storage/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The route table without its handlers. */
#define ROUTE(method, pattern, auth, max_body, fn) {method, pattern, auth, max_body, NULL},
static const struct api_route routes[] = {API_ROUTES(ROUTE)};
#undef ROUTE
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_api: " __VA_ARGS__);                                                 \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* ---- the request ---------------------------------------------------------------------------- */

struct request {
    char *method, *path, *auth, *cl;
    const char *body;
    size_t body_len;
    char *mem; /* owns the strings above */
};

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decode s in place, stopping at a %00 as a C string would (libmicrohttpd does so). */
static void unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p != '\0'; p++) {
        if (p[0] == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
            *o++ = (char)(hexval(p[1]) * 16 + hexval(p[2]));
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* Split data as an HTTP request: false when it has no request line. */
static bool parse_request(const uint8_t *data, size_t size, struct request *rq)
{
    memset(rq, 0, sizeof(*rq));
    rq->mem = malloc(size + 1);
    if (rq->mem == NULL)
        return false;
    memcpy(rq->mem, data, size);
    rq->mem[size] = '\0';
    char *p = rq->mem, *end = rq->mem + size;
    char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL)
        return false;
    *nl = '\0';
    char *sp1 = strchr(p, ' ');
    if (sp1 == NULL)
        return false;
    *sp1 = '\0';
    rq->method = p;
    rq->path = sp1 + 1;
    char *sp2 = strchr(rq->path, ' ');
    if (sp2 != NULL)
        *sp2 = '\0';
    char *q = strchr(rq->path, '?');
    if (q != NULL)
        *q = '\0';
    unescape(rq->path);
    p = nl + 1;
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        char *eol = nl != NULL ? nl : end;
        if (eol > p && eol[-1] == '\r')
            eol[-1] = '\0';
        *eol = '\0';
        if (*p == '\0') {
            p = eol + 1;
            break;
        }
        char *colon = strchr(p, ':');
        if (colon != NULL) {
            *colon = '\0';
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t vl = strlen(v);
            while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                v[--vl] = '\0';
            if (strcasecmp(p, "Authorization") == 0)
                rq->auth = v;
            else if (strcasecmp(p, "Content-Length") == 0)
                rq->cl = v;
        }
        p = eol + 1;
    }
    rq->body = p < end ? p : end;
    rq->body_len = p < end ? (size_t)(end - p) : 0;
    return true;
}

/* ---- routing ------------------------------------------------------------------------------- */

/* Whether pattern takes the n segments (checked apart from api_route_find). */
static bool takes(const char *pattern, const char *const *seg, int n)
{
    char buf[256];
    int i = 0;
    if (pattern[0] == '\0') /* the root: no segment */
        return n == 0;
    snprintf(buf, sizeof(buf), "%s", pattern);
    for (char *s = buf, *slash; s != NULL; s = slash != NULL ? slash + 1 : NULL, i++) {
        slash = strchr(s, '/');
        if (slash != NULL)
            *slash = '\0';
        if (i >= n || (strcmp(s, "*") != 0 && strcmp(s, seg[i]) != 0))
            return false;
    }
    return i == n;
}

static int pattern_segs(const char *pattern)
{
    int n = 1;
    for (const char *p = pattern; *p != '\0'; p++)
        n += *p == '/';
    return n;
}

static void check_routing(const struct request *rq)
{
    struct api_match m;
    char *path = strdup(rq->path), *mine = strdup(rq->path);
    const char *seg[64];
    int nseg = 0;
    if (path == NULL || mine == NULL)
        goto out;
    /* The segments, split apart from api_route_find: what is between slashes. */
    for (char *p = mine; *p != '\0';) {
        char *slash = strchr(p, '/');
        if (slash != NULL)
            *slash = '\0';
        if (*p != '\0' && nseg < 64)
            seg[nseg++] = p;
        if (slash == NULL)
            break;
        p = slash + 1;
    }
    const struct api_route *hit = api_route_find(routes, NROUTES, rq->method, path, &m);
    if (nseg > API_MAX_SEGS) {
        if (hit != NULL || m.allow[0] != '\0')
            FAIL("%s %s: %d segments, yet routed", rq->method, rq->path, nseg);
        goto out;
    }
    if (m.nseg != nseg)
        FAIL("%s: %d segments, expected %d", rq->path, m.nseg, nseg);
    for (int i = 0; i < nseg; i++)
        if (strcmp(m.seg[i], seg[i]) != 0)
            FAIL("%s: segment %d is \"%s\", expected \"%s\"", rq->path, i, m.seg[i], seg[i]);
    /* The routes that take this method and path, and the methods of the others. */
    const struct api_route *want = NULL;
    int nwant = 0;
    bool methods[NROUTES];
    for (size_t i = 0; i < NROUTES; i++) {
        methods[i] = false;
        if (!takes(routes[i].pattern, seg, nseg))
            continue;
        bool same = strcmp(routes[i].method, rq->method) == 0 ||
                    (strcmp(rq->method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0);
        if (same) {
            want = &routes[i];
            nwant++;
        } else {
            methods[i] = true;
        }
    }
    if (nwant > 1)
        FAIL("%d routes take %s %s", nwant, rq->method, rq->path);
    if (hit != want)
        FAIL("%s %s: found %s, expected %s", rq->method, rq->path, hit ? hit->pattern : "none",
             want ? want->pattern : "none");
    if (hit == NULL) {
        for (size_t i = 0; i < NROUTES; i++)
            if (methods[i] && strstr(m.allow, routes[i].method) == NULL)
                FAIL("%s %s: Allow \"%s\" lacks %s", rq->method, rq->path, m.allow,
                     routes[i].method);
        char allow[64], *save = NULL;
        snprintf(allow, sizeof(allow), "%s", m.allow);
        for (char *t = strtok_r(allow, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
            bool listed = false;
            for (size_t i = 0; i < NROUTES; i++)
                listed |= methods[i] && strcmp(routes[i].method, t) == 0;
            if (!listed)
                FAIL("%s %s: Allow names %s, which no route of the path takes", rq->method,
                     rq->path, t);
        }
    } else {
        /* What the handlers index must be there. */
        int ns = api_route_ns_seg(hit->pattern);
        if (ns >= 0 && (ns >= nseg || strcmp(seg[ns - 1], "namespaces") != 0))
            FAIL("%s: no namespace segment", hit->pattern);
        if ((hit->auth == AUTH_TRIAL || hit->auth == AUTH_TASK) && nseg < 6)
            FAIL("%s: a worker route without trial or task segments", hit->pattern);
    }
out:
    free(path);
    free(mine);
}

/* ---- token and cap --------------------------------------------------------------------------- */

static void check_bearer(const char *auth)
{
    const char *tok = api_bearer(auth);
    bool scheme = auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0;
    size_t n = scheme ? strlen(auth + 7) : 0;
    bool ok = scheme && n > 0 && n <= API_MAX_TOKEN;
    if (ok != (tok != NULL) || (tok != NULL && tok != auth + 7))
        FAIL("api_bearer(\"%.60s\") got %s", auth ? auth : "(null)", tok ? "a token" : "none");
    if (tok != NULL) {
        int64_t id = 0;
        const char *secret = NULL;
        char again[KD_UTOKEN_MAX + 1];
        if (kd_utoken_parse(tok, &id, &secret) == 0 &&
            (kd_utoken_format(id, secret, again, sizeof(again)) != 0 || strcmp(again, tok) != 0))
            FAIL("a user token does not format back to itself");
    }
}

static void check_cap(const struct request *rq)
{
    char *path = strdup(rq->path);
    struct api_match m;
    struct api_verr e = {0};
    unsigned long long len = 0, want = 0;
    if (path == NULL)
        return;
    const struct api_route *hit = api_route_find(routes, NROUTES, rq->method, path, &m);
    /* lib/http refuses any other Content-Length before the API sees the request. */
    bool framed = rq->cl == NULL || (rq->cl[0] != '\0' && strlen(rq->cl) <= 18 &&
                                     strspn(rq->cl, "0123456789") == strlen(rq->cl));
    if (hit != NULL && framed) {
        for (const char *p = rq->cl; p != NULL && *p != '\0'; p++)
            want = want * 10 + (unsigned)(*p - '0');
        int rc = api_body_cap(hit, rq->method, rq->path, rq->cl, &len, &e);
        if (len != want || (rc != 0) != (want > hit->max_body))
            FAIL("%s %s with Content-Length %s (cap %zu): %d", rq->method, rq->path, rq->cl,
                 hit->max_body, rc);
        if (rc != 0 &&
            (rc != 413 || e.status != 413 || strcmp(e.field, "body") != 0 || e.msg[0] == '\0'))
            FAIL("a cap refusal without 413 and its field");
    }
    free(path);
}

/* ---- bodies -------------------------------------------------------------------------------- */

/* A refusal: 400 or 413, a field, and a message that names it. */
static void check_refusal(const char *what, int rc, const struct api_verr *e)
{
    if (rc != e->status || (rc != 400 && rc != 413))
        FAIL("%s: refused with %d (status %d)", what, rc, e->status);
    if (e->field[0] == '\0' || e->msg[0] == '\0')
        FAIL("%s: a refusal without a field or message", what);
    /* A long key is cut short in the field; its start is in the message. */
    char start[24];
    snprintf(start, sizeof(start), "%.23s", e->field);
    if (strcmp(e->field, "body") != 0 && strstr(e->msg, start) == NULL)
        FAIL("%s: the message \"%s\" does not name the field %s", what, e->msg, e->field);
}

static bool ns_form(const char *s)
{
    size_t n = strlen(s);
    if (strcmp(s, "*") == 0)
        return true;
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

static bool uuid_form(const char *s)
{
    if (strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : strchr("0123456789abcdef", s[i]) == NULL || s[i] == '\0')
            return false;
    }
    return true;
}

/*
 * Every body check on body (parsed from text, tlen bytes); returns a digest of the verdicts
 * (status and field of each) so that the same body serialised again can be compared.
 */
static void check_bodies(const json_t *body, const char *text, size_t tlen, char *digest,
                         size_t dlen)
{
    struct api_verr e;
    size_t used = 0;
    int rc;
#define NOTE(name, rc)                                                                             \
    used += (size_t)snprintf(digest + used, used < dlen ? dlen - used : 0, "%s=%d:%s;", name, rc,  \
                             rc != 0 ? e.field : "")
    enum kd_metric_kind kind;
    const char *key = NULL;
    rc = api_check_metrics(body, &kind, &key, &e);
    if (rc != 0)
        check_refusal("metrics", rc, &e);
    else if (key == NULL || (kind != KD_METRIC_TRAINING && kind != KD_METRIC_VALIDATION &&
                             kind != KD_METRIC_PROFILING))
        FAIL("metrics accepted without a key or kind");
    NOTE("metrics", rc);

    static const char *const metrics[][2] = {{NULL, NULL}, {"loss", NULL}, {"loss", "epochs"}};
    for (size_t k = 0; k < 3; k++) {
        struct kd_metric_row *rows = NULL;
        size_t n = 0;
        rc = api_check_metric_rows(json_object_get(body, "rows"), metrics[k][0], metrics[k][1],
                                   k > 0, &rows, &n, &e);
        if (rc != 0) {
            check_refusal("rows", rc, &e);
            if (rows != NULL || n != 0)
                FAIL("rows refused with rows");
        } else {
            if (n == 0 || n > KD_STORE_MAX_BATCH_ROWS ||
                n != json_array_size(json_object_get(body, "rows")))
                FAIL("rows accepted: %zu", n);
            for (size_t i = 0; i < n; i++) {
                if (rows[i].step < 0 || !json_is_object(rows[i].metrics))
                    FAIL("row %zu accepted with step %lld", i, (long long)rows[i].step);
                if (k > 0 && !json_is_number(json_object_get(rows[i].metrics, "loss")))
                    FAIL("a validation row without its searcher metric");
                if (k == 2 && json_number_value(json_object_get(rows[i].metrics, "epochs")) < 0)
                    FAIL("a validation row with a negative time metric");
            }
            /* The texts the API stores and streams instead are the same values, on one line. */
            struct api_span all;
            if (api_metric_spans(text, tlen, rows, n, &all)) {
                for (size_t i = 0; i < n; i++) {
                    json_t *m = json_loadb(rows[i].raw, rows[i].raw_len, 0, NULL);
                    if (!json_equal(m, rows[i].metrics) ||
                        memchr(rows[i].raw, '\n', rows[i].raw_len))
                        FAIL("row %zu: metrics text %.*s is not its metrics", i,
                             (int)rows[i].raw_len, rows[i].raw);
                    json_decref(m);
                }
                json_t *a = json_loadb(text + all.off, all.len, 0, NULL);
                if (!json_equal(a, json_object_get(body, "rows")))
                    FAIL("the rows text is not the rows");
                json_decref(a);
            }
        }
        free(rows);
        NOTE("rows", rc);
    }

    struct api_checkpoint_req ck;
    rc = api_check_checkpoint(body, &ck, &e);
    if (rc != 0)
        check_refusal("checkpoint", rc, &e);
    else if (!uuid_form(ck.uuid) || ck.batches < 0 || ck.size < 0 || ck.storage_path == NULL ||
             strlen(ck.storage_path) == 0 || strlen(ck.storage_path) > 4096 ||
             (ck.metadata != NULL && !json_is_object(ck.metadata)))
        FAIL("checkpoint accepted: uuid \"%s\"", ck.uuid);
    NOTE("checkpoint", rc);

    struct api_rendezvous_req rv;
    rc = api_check_rendezvous(body, &rv, &e);
    if (rc != 0)
        check_refusal("rendezvous", rc, &e);
    else if (!api_run_id_ok(rv.run_id) || rv.port < 1 || rv.port > 65535 ||
             strlen(rv.address) == 0 || strlen(rv.address) > 253 ||
             strspn(rv.address,
                    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") !=
                 strlen(rv.address))
        FAIL("rendezvous accepted: %s %s %lld", rv.run_id, rv.address, (long long)rv.port);
    NOTE("rendezvous", rc);

    const char *reason, *cond, *message;
    rc = api_check_early_exit(body, &reason, &cond, &message, &e);
    if (rc != 0)
        check_refusal("early_exit", rc, &e);
    else if (reason == NULL || cond == NULL ||
             (message != NULL && (strlen(message) == 0 || strlen(message) > 4096)))
        FAIL("early exit accepted without a reason");
    NOTE("early_exit", rc);

    struct api_logs_req lr;
    rc = api_check_logs(body, 1, &lr, &e);
    if (rc != 0) {
        check_refusal("logs", rc, &e);
    } else {
        if (lr.key == NULL || lr.n == 0 || lr.n > KD_STORE_LOG_MAX_LINES || lr.node_rank < 0 ||
            lr.node_rank > 65535)
            FAIL("logs accepted: %zu lines, node rank %d", lr.n, lr.node_rank);
        for (size_t i = 0; i < lr.n; i++)
            if (lr.lines[i].rank < -1 || lr.lines[i].text == NULL)
                FAIL("log line %zu accepted with rank %d", i, lr.lines[i].rank);
    }
    free(lr.lines);
    NOTE("logs", rc);

    for (int create = 0; create < 2; create++) {
        struct api_user_req ur;
        rc = api_check_user(body, create, &ur, &e);
        if (rc != 0) {
            check_refusal("user", rc, &e);
        } else {
            size_t i;
            json_t *v;
            json_array_foreach(ur.namespaces, i, v)
            {
                if (!ns_form(json_string_value(v)))
                    FAIL("a user accepted with namespace \"%s\"", json_string_value(v));
            }
            if (create && (!api_user_name_ok(ur.name) ||
                           (ur.description != NULL && strlen(ur.description) > 256)))
                FAIL("a user accepted with name \"%s\"", ur.name);
        }
        NOTE("user", rc);
    }

    const char *user, *desc;
    rc = api_check_token(body, &user, &desc, &e);
    if (rc != 0)
        check_refusal("token", rc, &e);
    else if (desc != NULL && strlen(desc) > 256)
        FAIL("a token accepted with a description of %zu bytes", strlen(desc));
    NOTE("token", rc);

    for (int create = 0; create < 2; create++) {
        struct api_model_req mr;
        struct api_version_req vr;
        char why[KD_ERRLEN];
        rc = api_check_model(body, create, &mr, &e);
        if (rc != 0)
            check_refusal("model", rc, &e);
        else if ((create && !kd_store_model_name_ok(mr.name)) ||
                 kd_store_model_labels_check(mr.labels, "labels", why) != 0 ||
                 (mr.metadata != NULL && !json_is_object(mr.metadata)) ||
                 (mr.description != NULL && strlen(mr.description) > KD_STORE_MODEL_MAX_TEXT))
            FAIL("a model accepted with name \"%s\" or bad labels/metadata", mr.name);
        NOTE("model", rc);
        rc = api_check_model_version(body, create, &vr, &e);
        if (rc != 0)
            check_refusal("model version", rc, &e);
        else if ((create && kd_ckpt_check_uuid(vr.checkpoint_uuid, why) != 0) ||
                 kd_store_model_labels_check(vr.add_labels, "add_labels", why) != 0 ||
                 (vr.comment != NULL && strlen(vr.comment) > KD_STORE_MODEL_MAX_TEXT))
            FAIL("a model version accepted with checkpoint \"%s\" or bad fields",
                 vr.checkpoint_uuid);
        NOTE("model version", rc);
    }
#undef NOTE
}

static void check_body(const struct request *rq)
{
    struct api_verr e;
    json_t *body = NULL, *again = NULL;
    char d1[2048], d2[2048];
    int rc = api_check_json(rq->body, rq->body_len, KD_API_MAX_METRICS_BODY, &body, &e);
    if (rc != 0) {
        check_refusal("json", rc, &e);
        return;
    }
    check_bodies(body, rq->body, rq->body_len, d1, sizeof(d1));
    /* The same value serialised again parses to itself and gets the same verdicts. */
    char *s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s == NULL)
        FAIL("a parsed body does not serialise");
    if (api_check_json(s, strlen(s), KD_API_MAX_METRICS_BODY * 2, &again, &e) != 0)
        FAIL("a serialised body does not parse: %s", e.msg);
    if (!json_equal(body, again))
        FAIL("a body changed through serialisation");
    check_bodies(again, s, strlen(s), d2, sizeof(d2));
    if (strcmp(d1, d2) != 0)
        FAIL("verdicts changed through serialisation:\n%s\n%s", d1, d2);
    free(s);
    json_decref(again);
    json_decref(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    struct request rq;
    if (!init) {
        kd_log_init("fuzz", KD_LOG_OFF, -1);
        /* GET routes take no body. */
        for (size_t i = 0; i < NROUTES; i++)
            if (strcmp(routes[i].method, "GET") == 0 && routes[i].max_body != 0)
                FAIL("GET %s takes a body", routes[i].pattern);
        for (size_t i = 0; i < NROUTES; i++)
            if (pattern_segs(routes[i].pattern) > API_MAX_SEGS)
                FAIL("%s has more than %d segments", routes[i].pattern, API_MAX_SEGS);
        init = true;
    }
    if (parse_request(data, size, &rq)) {
        check_routing(&rq);
        check_bearer(rq.auth);
        check_cap(&rq);
        check_body(&rq);
    }
    free(rq.mem);
    return 0;
}
