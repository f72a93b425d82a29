/*
 * The API's decisions on a request that need neither the store nor the
 * Kubernetes API: the route a method and path take, the bearer token of an
 * Authorization header, whether an announced body fits the route's cap,
 * and the checks of the worker and user routes' JSON bodies. A refusal is
 * an HTTP status, the field at fault and a message (struct api_verr) that
 * the handlers answer with. Internal to controller/api (and its fuzz
 * target, which feeds these functions arbitrary requests).
 */
#ifndef KD_CONTROLLER_API_CHECK_H
#define KD_CONTROLLER_API_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"
#include "store/store.h"

#define API_MAX_SEGS 12
/* A bearer token longer than this is refused before it is hashed or compared. */
#define API_MAX_TOKEN 4096
/* A run id (KDET_RUN_ID) is at most this long. */
#define API_MAX_RUN_ID 128
/* Namespaces one user may be given, at most. */
#define API_MAX_USER_NS 256

struct api_rq;

enum api_auth {
    AUTH_NONE,  /* anyone */
    AUTH_USER,  /* a user token; routes under api/v1/namespaces/<ns>/ also need <ns> allowed */
    AUTH_TRIAL, /* the trial's token */
    AUTH_ADMIN, /* a user token of an administrator */
    AUTH_TASK,  /* the task's token (its pod) */
    AUTH_LINK,  /* as AUTH_USER, or a download link (?kdet_ticket=) signed for this path */
};

struct api_route {
    const char *method;
    const char *pattern; /* segments; "*" matches one */
    enum api_auth auth;
    size_t max_body; /* bytes; enforced from the head, before the body is read */
    void (*fn)(struct api_rq *q);
};

/* A refusal: the answer's status (4xx), the field at fault ("" for none) and why. */
struct api_verr {
    int status;
    char field[128];
    char msg[KD_ERRLEN];
};

/* A path split into segments, and the methods a path takes when the method did not match. */
struct api_match {
    const char *seg[API_MAX_SEGS];
    int nseg;
    char allow[64]; /* "GET, POST" or "" */
};

/**
 * The route of the table (n entries) that method and path take, or NULL.
 * path is split in place at '/' (empty segments dropped) into m->seg; a
 * path of more than API_MAX_SEGS segments matches nothing. HEAD takes a
 * GET route. With no route, m->allow lists the methods routes of that path
 * take ("" when none: 404, else 405).
 */
const struct api_route *api_route_find(const struct api_route *routes, size_t n, const char *method,
                                       char *path, struct api_match *m);

/** The index of the namespace segment of a pattern ("api/v1/namespaces/<*>/..."), or -1. */
int api_route_ns_seg(const char *pattern);

/*
 * What a namespaced user route does, in Kubernetes RBAC's terms (group
 * kdet.io), for the SubjectAccessReview mode (docs/security.md): GET of a
 * collection is "list", of one object "get" (its logs: subresource "logs");
 * POST to a collection "create", a proxy ticket "create" of "tasks/proxy",
 * a download (GET .../download) and a download link (POST .../download-link)
 * "get" of subresource "download" (models/download, checkpoints/download),
 * other POSTs (pause, kill, a new model version) and PATCH/PUT "update";
 * DELETE of an object "delete", of a part of it (a model version) "update".
 */
struct api_authz_attrs {
    char verb[16];
    char resource[32];    /* experiments, trials, checkpoints, tasks, models, jobs */
    char subresource[16]; /* "", "logs", "proxy" or "download" */
    char name[254];       /* the object's name, "" for a collection */
};

/**
 * The attributes of a request of `method` on the namespaced route `pattern`
 * with the path's segments seg[0..nseg). 0, or KD_EINVAL for a route
 * outside "api/v1/namespaces/<*>/". Pure.
 */
int api_authz_attrs(const char *method, const char *pattern, const char *const *seg, int nseg,
                    struct api_authz_attrs *out);

/**
 * The token of an Authorization header value: what follows "Bearer "
 * (scheme case-insensitive), or NULL when the header is absent, names
 * another scheme, or the token is empty or longer than API_MAX_TOKEN.
 */
const char *api_bearer(const char *authorization);

/**
 * Whether a body announced by the Content-Length value cl (NULL: none; lib/http
 * has already refused one that is not 1 to 18 decimal digits) fits route r:
 * 0, or 413 in e naming the route's cap. method and path only go into the
 * message. *len gets the announced length.
 */
int api_body_cap(const struct api_route *r, const char *method, const char *path, const char *cl,
                 unsigned long long *len, struct api_verr *e) KD_WUR;

/**
 * Parse len bytes of body as one JSON object (duplicate keys refused),
 * under cap bytes: 0 with *out (caller decrefs), or 413 / 400 in e.
 */
int api_check_json(const char *body, size_t len, size_t cap, json_t **out,
                   struct api_verr *e) KD_WUR;

/** 0, or 400 in e naming prefix.key for the first key of obj not in allowed (NULL-terminated). */
int api_check_keys(const json_t *obj, const char *prefix, const char *const *allowed,
                   struct api_verr *e) KD_WUR;

/* ---- the worker routes ---- */

/** POST .../metrics before the experiment is read: the keys, kind and idempotency key. */
int api_check_metrics(const json_t *body, enum kd_metric_kind *kind, const char **key,
                      struct api_verr *e) KD_WUR;

/**
 * POST .../metrics: its rows, given the experiment's searcher metric and
 * time metric (NULL: none) and whether the batch is of validations. 0 with
 * *out (n rows, malloc'd, caller frees; metrics borrowed from rows), or 400.
 */
int api_check_metric_rows(const json_t *rows, const char *metric, const char *time_metric,
                          bool validation, struct kd_metric_row **out, size_t *n,
                          struct api_verr *e) KD_WUR;

/** A stretch of a request body's text. */
struct api_span {
    size_t off, len;
};

/**
 * Where the text of each accepted row's metrics object, and of the rows
 * array, lies in body: the request's text, which jansson parsed (without
 * duplicate keys) into the n rows api_check_metric_rows accepted. Then
 * rows[i].raw and raw_len point into body, *all is the rows array, and
 * the API stores and streams those texts instead of encoding the parsed
 * values again. Only when every span is certain: each key on the way
 * written without escapes, the texts free of line breaks (the spool and
 * a server-sent event are one line each). Otherwise false, with rows
 * untouched. Pure.
 */
bool api_metric_spans(const char *body, size_t len, struct kd_metric_row *rows, size_t n,
                      struct api_span *all);

struct api_checkpoint_req {
    const char *uuid; /* canonical: 8-4-4-4-12 lower-case hex */
    int64_t batches, size;
    const char *storage_path;
    const json_t *metadata; /* an object, or NULL */
};

/** POST .../checkpoints: 0 with *out (strings borrowed from body), or 400. */
int api_check_checkpoint(const json_t *body, struct api_checkpoint_req *out,
                         struct api_verr *e) KD_WUR;

struct api_rendezvous_req {
    const char *run_id, *address; /* borrowed from body */
    int64_t port;
};

/** PUT .../rendezvous: 0 with *out, or 400. */
int api_check_rendezvous(const json_t *body, struct api_rendezvous_req *out,
                         struct api_verr *e) KD_WUR;

/** A run id: 1 to API_MAX_RUN_ID of A-Z a-z 0-9 . _ - (NULL: false). */
bool api_run_id_ok(const char *s);

/**
 * POST .../early_exit: 0 with *reason ("errored", "invalid_hp" or
 * "user_canceled"), *cond (the condition's reason: "Errored", "InvalidHP",
 * "UserCanceled") and *message (NULL when absent), or 400.
 */
int api_check_early_exit(const json_t *body, const char **reason, const char **cond,
                         const char **message, struct api_verr *e) KD_WUR;

struct api_logs_req {
    const char *key;
    const char *run_id;        /* NULL when absent */
    int node_rank;             /* 0 when absent */
    struct kd_log_line *lines; /* malloc'd, caller frees; texts borrowed from body */
    size_t n;
};

/** POST .../logs: 0 with *out (a line without timestamp gets now_ms), or 400. */
int api_check_logs(const json_t *body, int64_t now_ms, struct api_logs_req *out,
                   struct api_verr *e) KD_WUR;

/* ---- the user routes ---- */

/** Form of a user name: 1 to 64 of [a-z0-9._-], starting and ending with [a-z0-9]. */
bool api_user_name_ok(const char *s);

struct api_user_req {
    const char *name;        /* create only: the user's name */
    const char *description; /* create only; NULL when absent */
    bool admin_set, admin;
    const json_t *namespaces; /* an array of namespaces, or NULL when absent */
};

/** POST /api/v1/users (create true) or PATCH /api/v1/users/{name}: 0 with *out, or 400. */
int api_check_user(const json_t *body, bool create, struct api_user_req *out,
                   struct api_verr *e) KD_WUR;

/** POST /api/v1/tokens: 0 with *user and *description (NULL when absent), or 400. */
int api_check_token(const json_t *body, const char **user, const char **description,
                    struct api_verr *e) KD_WUR;

/* ---- the model registry's routes ---- */

/* Body cap of the model registry's POST and PATCH routes (metadata may be up to 64 KiB). */
#define KD_API_MAX_MODEL_BODY (128u << 10)

struct api_model_req {
    const char *name;                                  /* create only */
    const char *description;                           /* NULL when absent */
    const json_t *labels, *add_labels, *remove_labels; /* update: add/remove; NULL when absent */
    const json_t *metadata;                            /* an object, or NULL */
    int archived;                                      /* update: 1, 0, or -1 when absent */
};

/**
 * POST .../models {name, description?, labels?, metadata?} (create) or
 * PATCH .../models/{m} {description?, labels?, add_labels?, remove_labels?,
 * metadata?, archived?}: 0 with *out (borrowed from body), or 400 naming
 * the field.
 */
int api_check_model(const json_t *body, bool create, struct api_model_req *out,
                    struct api_verr *e) KD_WUR;

struct api_version_req {
    const char *checkpoint_uuid; /* create only */
    const char *name, *comment;  /* NULL when absent */
    const json_t *labels, *add_labels, *remove_labels, *metadata;
};

/**
 * POST .../models/{m}/versions {checkpoint_uuid, name?, comment?, labels?,
 * metadata?} (create) or PATCH .../versions/{v} {name?, comment?, labels?,
 * add_labels?, remove_labels?, metadata?}: 0 with *out, or 400 naming the field.
 */
int api_check_model_version(const json_t *body, bool create, struct api_version_req *out,
                            struct api_verr *e) KD_WUR;

struct kd_queue_update;

/**
 * PATCH .../jobs/{j} {priority?, ahead_of?, behind_of?, resource_pool?}: at
 * least one, not both ahead_of and behind_of; priority 1..99; names of 1 to
 * 253 of a-z 0-9 . - (Kubernetes object names); a pool as kd_queue_pool_ok.
 * 0 with *out (strings borrowed from body), or 400 naming the field.
 */
int api_check_job_update(const json_t *body, struct kd_queue_update *out,
                         struct api_verr *e) KD_WUR;

/** A version number in a path: 1 to 9 digits, > 0 (0 when it is not one). Pure. */
int64_t api_model_version_arg(const char *s);

/* The query parameter of a download link (controller/api/download.c). */
#define API_LINK_PARAM "kdet_ticket"

/**
 * The name of a download (its file, NAME.tar, and the archive's top
 * directory) into out: `name` with every byte outside A-Z a-z 0-9 . _ -
 * made '_', leading dots made '_', cut to 200 bytes, then "-vVERSION" when
 * version > 0 ("checkpoint" when name is empty). Safe in a
 * Content-Disposition's quoted filename and as a path element. Pure.
 */
void api_download_stem(const char *name, int64_t version, char *out, size_t len);

#endif
