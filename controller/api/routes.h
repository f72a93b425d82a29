/*
 * The controller API's route table as one list: X(method, pattern, auth,
 * max_body, handler) per route. api.c expands it into the table it serves
 * with; the fuzz target of the request checks (tests/fuzz/fuzz_api.c)
 * expands the same list without the handlers, so both see every route.
 * Patterns are segments, "*" matching one ("" is the root, GET /); max_body
 * is enforced from the request head, before the body is read (0: no body).
 */
#ifndef KD_CONTROLLER_API_ROUTES_H
#define KD_CONTROLLER_API_ROUTES_H

#include "api/api.h"
#include "api/check.h"

#define API_NSP "api/v1/namespaces/*/"
#define API_SMALL KD_API_MAX_SMALL_BODY
#define API_MODEL KD_API_MAX_MODEL_BODY

/* clang-format off */
#define API_ROUTES(X) \
    X("GET", "healthz", AUTH_NONE, 0, h_health) \
    X("GET", "readyz", AUTH_NONE, 0, h_ready) \
    X("GET", "metrics", AUTH_NONE, 0, h_metrics) \
    X("GET", "", AUTH_NONE, 0, api_ui_serve) \
    X("GET", "ui/*", AUTH_NONE, 0, api_ui_serve) \
    X("POST", API_NSP "trials/*/metrics", AUTH_TRIAL, KD_API_MAX_METRICS_BODY, api_worker_metrics) \
    X("GET", API_NSP "trials/*/searcher/operation", AUTH_TRIAL, 0, api_worker_searcher) \
    X("GET", API_NSP "trials/*/preemption", AUTH_TRIAL, 0, api_worker_preemption) \
    X("POST", API_NSP "trials/*/checkpoints", AUTH_TRIAL, KD_API_MAX_CHECKPOINT_BODY, api_worker_checkpoint) \
    X("POST", API_NSP "trials/*/early_exit", AUTH_TRIAL, API_SMALL, api_worker_early_exit) \
    X("PUT", API_NSP "trials/*/rendezvous", AUTH_TRIAL, KD_API_MAX_RENDEZVOUS_BODY, api_worker_rendezvous_put) \
    X("GET", API_NSP "trials/*/rendezvous", AUTH_TRIAL, 0, api_worker_rendezvous_get) \
    X("POST", API_NSP "trials/*/logs", AUTH_TRIAL, KD_API_MAX_LOGS_BODY, api_worker_logs) \
    X("POST", API_NSP "tasks/*/logs", AUTH_TASK, KD_API_MAX_LOGS_BODY, api_worker_logs) \
    X("PUT", API_NSP "tasks/*/address", AUTH_TASK, KD_API_MAX_RENDEZVOUS_BODY, api_worker_task_address) \
    X("GET", API_NSP "experiments", AUTH_USER, 0, api_user_experiments) \
    X("GET", API_NSP "experiments/*", AUTH_USER, 0, api_user_experiment) \
    X("GET", API_NSP "experiments/*/trials", AUTH_USER, 0, api_user_experiment_trials) \
    X("GET", API_NSP "experiments/*/checkpoints", AUTH_USER, 0, api_user_experiment_checkpoints) \
    X("GET", API_NSP "experiments/*/events", AUTH_USER, 0, api_user_experiment_events) \
    X("GET", API_NSP "experiments/*/metrics", AUTH_USER, 0, api_user_experiment_metrics) \
    X("GET", API_NSP "experiments/*/metrics/stream", AUTH_USER, 0, api_user_stream) \
    X("GET", API_NSP "experiments/*/logs", AUTH_USER, 0, api_user_logs) \
    X("GET", API_NSP "experiments/*/logs/stream", AUTH_USER, 0, api_user_logs_stream) \
    X("POST", API_NSP "experiments/*/pause", AUTH_USER, API_SMALL, api_user_experiment_action) \
    X("POST", API_NSP "experiments/*/activate", AUTH_USER, API_SMALL, api_user_experiment_action) \
    X("POST", API_NSP "experiments/*/cancel", AUTH_USER, API_SMALL, api_user_experiment_action) \
    X("POST", API_NSP "experiments/*/archive", AUTH_USER, API_SMALL, api_user_experiment_action) \
    X("POST", API_NSP "experiments/*/unarchive", AUTH_USER, API_SMALL, api_user_experiment_action) \
    X("GET", API_NSP "trials/*", AUTH_USER, 0, api_user_trial) \
    X("POST", API_NSP "trials/*/kill", AUTH_USER, API_SMALL, api_user_trial_kill) \
    X("GET", API_NSP "trials/*/metrics", AUTH_USER, 0, api_user_trial_metrics) \
    X("GET", API_NSP "trials/*/checkpoints", AUTH_USER, 0, api_user_trial_checkpoints) \
    X("GET", API_NSP "trials/*/profiler", AUTH_USER, 0, api_user_trial_profiler) \
    X("GET", API_NSP "trials/*/metrics/stream", AUTH_USER, 0, api_user_stream) \
    X("GET", API_NSP "trials/*/logs", AUTH_USER, 0, api_user_logs) \
    X("GET", API_NSP "trials/*/logs/stream", AUTH_USER, 0, api_user_logs_stream) \
    X("GET", API_NSP "checkpoints/*", AUTH_USER, 0, api_user_checkpoint) \
    X("GET", API_NSP "checkpoints/*/download", AUTH_LINK, 0, api_user_checkpoint_download) \
    X("POST", API_NSP "checkpoints/*/download-link", AUTH_USER, API_SMALL, api_user_checkpoint_download_link) \
    X("GET", API_NSP "tasks", AUTH_USER, 0, api_user_tasks) \
    X("GET", API_NSP "tasks/*", AUTH_USER, 0, api_user_task) \
    X("POST", API_NSP "tasks/*/kill", AUTH_USER, API_SMALL, api_user_task_kill) \
    X("POST", API_NSP "tasks/*/proxy-ticket", AUTH_USER, API_SMALL, api_user_task_ticket) \
    X("GET", API_NSP "tasks/*/logs", AUTH_USER, 0, api_user_logs) \
    X("GET", API_NSP "tasks/*/logs/stream", AUTH_USER, 0, api_user_logs_stream) \
    X("GET", API_NSP "models", AUTH_USER, 0, api_user_models) \
    X("POST", API_NSP "models", AUTH_USER, API_MODEL, api_user_model_create) \
    X("GET", API_NSP "models/*", AUTH_USER, 0, api_user_model) \
    X("PATCH", API_NSP "models/*", AUTH_USER, API_MODEL, api_user_model_update) \
    X("DELETE", API_NSP "models/*", AUTH_USER, 0, api_user_model_delete) \
    X("GET", API_NSP "models/*/best", AUTH_USER, 0, api_user_model_best) \
    X("GET", API_NSP "models/*/versions", AUTH_USER, 0, api_user_model_versions) \
    X("POST", API_NSP "models/*/versions", AUTH_USER, API_MODEL, api_user_model_version_create) \
    X("GET", API_NSP "models/*/versions/*", AUTH_USER, 0, api_user_model_version) \
    X("PATCH", API_NSP "models/*/versions/*", AUTH_USER, API_MODEL, api_user_model_version_update) \
    X("DELETE", API_NSP "models/*/versions/*", AUTH_USER, 0, api_user_model_version_delete) \
    X("GET", API_NSP "models/*/versions/*/download", AUTH_LINK, 0, api_user_model_download) \
    X("POST", API_NSP "models/*/versions/*/download-link", AUTH_USER, API_SMALL, api_user_model_download_link) \
    X("GET", "api/v1/jobs", AUTH_USER, 0, api_user_jobs) \
    X("PATCH", API_NSP "jobs/*", AUTH_USER, API_SMALL, api_user_job_update) \
    X("GET", "api/v1/info", AUTH_USER, 0, api_user_info) \
    X("GET", "api/v1/me", AUTH_USER, 0, api_me) \
    X("GET", "api/v1/users", AUTH_ADMIN, 0, api_users_list) \
    X("POST", "api/v1/users", AUTH_ADMIN, API_SMALL, api_users_create) \
    X("PATCH", "api/v1/users/*", AUTH_ADMIN, API_SMALL, api_users_update) \
    X("GET", "api/v1/tokens", AUTH_USER, 0, api_tokens_list) \
    X("POST", "api/v1/tokens", AUTH_USER, API_SMALL, api_tokens_create) \
    X("POST", "api/v1/tokens/*/revoke", AUTH_USER, API_SMALL, api_tokens_revoke)
/* clang-format on */

#endif
