/*
 * Fixtures for the API tests: a private PostgreSQL, a real kdet-local with
 * the CRDs applied, a store, a Kubernetes client and the API itself on a
 * free 127.0.0.1 port; helpers to create Experiments and Trials, compute
 * trial tokens and make HTTP requests with libcurl.
 */
#ifndef KD_TESTS_API_FX_H
#define KD_TESTS_API_FX_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "api/api.h"
#include "core/buf.h"
#include "k8s/client.h"
#include "store/store.h"

struct fx {
    struct kd_store *store;
    struct kd_k8s_client *k8s;
    struct kd_api *api;
    char conninfo[512];
    char url[64]; /* http://127.0.0.1:PORT */
    int port;
};

extern struct fx fx;
extern const unsigned char fx_key[32];
#define FX_USER_TOKEN "user-token-0123456789abcdef"

/** cmocka group setup/teardown: PostgreSQL, kdet-local (CRDs applied), store, client, API. */
int fx_setup(void **state);
int fx_teardown(void **state);

/**
 * Requests per second of the API's Kubernetes client, for the next fx_setup (0: the
 * client's default, 50 with a burst of 100; < 0: no limit).
 */
extern double fx_kube_qps;
/** The API's log_max_bytes for the next fx_api_start (0: the default). */
extern int64_t fx_log_max_bytes;
/** The API's max_downloads for the next fx_api_start (0: the default). */
extern int fx_max_downloads;

/** Start the API again (after fx_api_stop) on `port` (0: a free one). */
void fx_api_start(int port);
void fx_api_stop(void);

/** Create an Experiment named `name` (searcher metric `metric`, smaller is better). */
void fx_experiment(const char *name, const char *metric);
/** Create a Trial of `exp` with spec.validateAfter = target; *uid gets its uid. */
void fx_trial(const char *exp, const char *name, int64_t target, char *uid, size_t uidlen);
/** Create a Pending pod of `trial`'s attempt `run_id` (labels as the controller sets them). */
void fx_pod(const char *trial, const char *run_id, const char *name);
/** The trial's token. */
void fx_token(const char *name, const char *uid, char *tok, size_t len);
/** A merge patch on a Trial or Experiment ("trials"/"experiments"), fails the test on error. */
void fx_patch(const char *resource, const char *name, const char *sub, const char *json);
/** GET a Trial from the API server (caller decrefs). */
json_t *fx_get_trial(const char *name);

/**
 * One HTTP request to the API: returns the status; *out (may be NULL) the
 * parsed JSON answer (caller decrefs; NULL when not JSON). token may be NULL.
 */
int fx_http(const char *method, const char *path, const char *token, const char *body,
            json_t **out);
/** Create Task `name` of kind with spec.config (JSON text; NULL: {}), owner alice; uid (may be
 * NULL) gets its uid. */
void fx_task(const char *name, const char *kind, const char *config, char *uid, size_t uidlen);
/** The task token of Task name/uid in namespace default. */
void fx_task_token(const char *name, const char *uid, char *tok, size_t len);
/** The value of `header` of the last fx_http answer ("" when absent). */
const char *fx_last_header(const char *header);

/** Count rows in the store (SQL on a direct connection). */
long long fx_sql_int(const char *sql);

/* A follower of a server-sent event stream (the logs' -f). */
struct fx_sse {
    const char *path;
    const char *last_event_id; /* NULL: none */
    struct kd_buf got;
    atomic_int connected;
    int code;
};

/** GET path with the bootstrap token (and Last-Event-ID when set), appending the body to got
 * and setting connected once the stream says so; code: the answer's status. A pthread start
 * routine; returns NULL when the stream ends (30 s at most). */
void *fx_sse_thread(void *p);

#endif
