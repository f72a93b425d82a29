/*
 * What the files of kdet-local's API server share (api.c, reply.c,
 * discovery.c, strategy.c, list.c, gc.c, podlog.c): the server's state, a
 * parsed resource URL, and the helpers every verb uses. Not a public
 * interface: only those files include it.
 */
#ifndef KD_LOCAL_APIINT_H
#define KD_LOCAL_APIINT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/log.h"
#include "json.h"
#include "registry.h"

struct kd_http_req;
struct kd_selector;
struct kd_store;

#define MAX_SEGS 12
#define MAX_WATCH_BUF (256u << 20)
#define DEFAULT_WATCH_TIMEOUT_S 1800
#define K8S_VERSION_MINOR "32"
#define LIST_RV_WAIT_MS 3000 /* kube-apiserver waits about 3 s for a future resourceVersion */

struct kd_api {
    struct kd_store *st;
    struct kd_registry *reg;
    struct kd_http_server *http;
    char *token;
    char *state_dir;
    int bookmark_ms;
    int gc_ms;
    pthread_t gc;
    bool gc_started;
    atomic_bool stop;
};

/* A parsed resource URL. */
struct kd_api_target {
    struct kd_restype *rt;
    const char *ns;   /* NULL: cluster-scoped or all namespaces */
    const char *name; /* NULL: the collection */
    const char *sub;  /* "status", "log", "binding" or NULL */
    bool watch_path;  /* the legacy /watch/ prefix */
};

/*
 * api.c. Lock held for these three. begin_delete: start deleting (finalizers, propagation
 * policy, the kind's graceful or waiting deletion); *out gets the object's state afterwards (new
 * reference), *gone whether it was removed now. remove_object: remove now, with the kind's
 * after_delete. Both return 0, KD_ENOTFOUND or -errno from the journal.
 */
int kd_api__begin_delete(struct kd_api *api, const struct kd_restype *rt, const char *ns,
                         const char *name, const char *policy, int64_t grace, json_t **out,
                         bool *gone);
bool kd_api__has_finalizer(const json_t *obj, const char *f);
bool kd_api__is_true(const char *v);
int kd_api__remove_object(struct kd_api *api, const struct kd_restype *rt, const char *ns,
                          const char *name, json_t **deleted);
/* discovery.c: each answers r. */
void kd_api__serve_discovery(struct kd_api *api, struct kd_http_req *r, char **s, size_t n);
void kd_api__serve_openapi(struct kd_api *api, struct kd_http_req *r, char **s, size_t n);
void kd_api__serve_version(struct kd_http_req *r);
/* list.c: the reading verbs answer r; the selectors of a request (0, or a 400 was sent). */
void kd_api__do_get(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t);
void kd_api__do_list(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t);
void kd_api__do_watch(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t);
bool kd_api__matches(const struct kd_selector *ls, const struct kd_selector *fs, const json_t *o);
int kd_api__parse_selectors(struct kd_http_req *r, const struct kd_api_target *t,
                            struct kd_selector **ls, struct kd_selector **fs);
bool kd_api__wants_table(struct kd_http_req *r);
/* podlog.c: the pods/binding and pods/log subresources (pod strategy). */
void kd_api__do_binding(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t);
void kd_api__do_log(struct kd_api *api, struct kd_http_req *r, const struct kd_api_target *t);
/*
 * reply.c: Status answers (each sends the response; details and causes are stolen), cause
 * objects for a 422, name checks, the object as answered (present: new reference), request
 * bodies (body_object: a new reference, or NULL when a 4xx was sent), and small metadata helpers.
 */
void kd_api__bad_request(struct kd_http_req *r, const char *message);
json_t *kd_api__body_object(struct kd_http_req *r);
json_t *kd_api__cause(const char *reason, const char *field, const char *fmt, ...) KD_PRINTF(3, 4);
json_t *kd_api__check_name(enum kd_name_rule rule, const char *name);
void kd_api__conflict(struct kd_http_req *r, const struct kd_restype *rt, const char *name);
json_t *kd_api__details_for(const struct kd_restype *rt, const char *name, const char *kind);
bool kd_api__dry_run(struct kd_http_req *r);
void kd_api__invalid(struct kd_http_req *r, const struct kd_restype *rt, const char *name,
                     json_t *causes);
json_t *kd_api__meta(json_t *obj);
void kd_api__new_uid(char *buf, size_t len);
void kd_api__not_found(struct kd_http_req *r, const struct kd_restype *rt, const char *name);
void kd_api__now_rfc3339(char *buf, size_t len);
json_t *kd_api__present(const struct kd_restype *rt, json_t *obj);
void kd_api__qualified(const struct kd_restype *rt, char *buf, size_t len);
void kd_api__random_suffix(char *buf, size_t n);
void kd_api__respond_status(struct kd_http_req *r, int code, const char *reason,
                            const char *message, json_t *details);
void kd_api__set_kind(const struct kd_restype *rt, json_t *obj);
json_t *kd_api__status_new(int code, const char *reason, const char *message, json_t *details);
/* strategy.c: the Namespace type; whether two objects differ outside status and metadata, or
 * at all but for resourceVersion. */
struct kd_restype *kd_api__ns_type(struct kd_api *api);
bool kd_api__same_ignoring_rv(const json_t *a, const json_t *b);
bool kd_api__spec_changed(const json_t *a, const json_t *b);

/** The strategy of rt (strategy.c): by its group/resource, or the custom-resource one. */
const struct kd_strategy *kd_strategy_of(const struct kd_restype *rt);

/** Every namespace has a ServiceAccount "default" (strategy.c). Lock held. */
int kd_api__ensure_default_sa(struct kd_api *api, const char *ns);

/** The garbage collector's thread (gc.c): runs until api->stop; arg is the struct kd_api. */
void *kd_api__gc_main(void *arg);

#endif
