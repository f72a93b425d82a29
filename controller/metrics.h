/*
 * kdet-controller's process metrics (GET /metrics on the controller API,
 * docs/controller.md "Metrics"): reconciles and their latency, work-queue
 * depth, experiments and trials by state, leadership, and, through the
 * store and the API, database latency, metric rows written and API
 * requests. main.c makes the registry and wraps the reconcilers.
 */
#ifndef KD_CTRL_METRICS_H
#define KD_CTRL_METRICS_H

#include "ctrl.h"

/**
 * Make c->metrics and register the controller's families; the queues and
 * informers are read at each scrape, so they may be created later (NULL
 * until then reads as 0). Not thread-safe: call once at start.
 */
void kd_ctrl_metrics_init(struct kd_ctrl *c);

/** Free c->metrics (after everything that updates it has stopped). NULL-safe. */
void kd_ctrl_metrics_free(struct kd_ctrl *c);

/** kd_ctrl_reconcile_experiment and _trial, counted and timed (ud: the kd_ctrl). */
int kd_ctrl_reconcile_experiment_timed(const char *key, long *requeue_after_ms, void *ud);
int kd_ctrl_reconcile_trial_timed(const char *key, long *requeue_after_ms, void *ud);
int kd_ctrl_reconcile_task_timed(const char *key, long *requeue_after_ms, void *ud);

#endif
