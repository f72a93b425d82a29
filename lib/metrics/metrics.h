/*
 * Process metrics in the Prometheus text exposition format (version
 * 0.0.4): counters, gauges and histograms, with labels, registered once at
 * start and updated from any thread; rendered on each scrape of /metrics.
 * Kept small on purpose: a few dozen series per process, looked up by a
 * scan under the family's lock.
 */
#ifndef KD_METRICS_METRICS_H
#define KD_METRICS_METRICS_H

#include <stddef.h>

#include "core/buf.h"
#include "core/err.h"

struct kd_metrics;
struct kd_metric;

/** At most this many labels per family, and series per family. */
#define KD_METRICS_MAX_LABELS 4
#define KD_METRICS_MAX_SERIES 512

/** A new, empty registry. Aborts on out-of-memory (kd_xmalloc). */
struct kd_metrics *kd_metrics_new(void);

/** Free the registry and every family in it. NULL-safe. Not concurrent with updates. */
void kd_metrics_free(struct kd_metrics *m);

/**
 * Register a family. name and help are copied; labels is a comma-separated
 * list of label names ("verb,code") or NULL for none. Names must match
 * [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no colon); a bad name or more than
 * KD_METRICS_MAX_LABELS labels is a programming error (assert). A name
 * registered again returns the family it already names (same kind, or an
 * assert), so a module restarted in one process keeps its series.
 * The family lives as long as the registry. Not thread-safe: register at
 * start, before other threads update.
 */
struct kd_metric *kd_metrics_counter(struct kd_metrics *m, const char *name, const char *help,
                                     const char *labels);
struct kd_metric *kd_metrics_gauge(struct kd_metrics *m, const char *name, const char *help,
                                   const char *labels);
/** buckets: nb strictly increasing upper bounds (copied); +Inf is implied. */
struct kd_metric *kd_metrics_histogram(struct kd_metrics *m, const char *name, const char *help,
                                       const char *labels, const double *buckets, size_t nb);

/*
 * Updates. values: one label value per label name of the family, in order
 * (NULL when the family has none). Thread-safe. A NULL metric is ignored,
 * so code may update metrics of a registry that was never made. A new
 * series past KD_METRICS_MAX_SERIES is dropped (and counted in
 * kd_metrics_dropped_series_total), so that label values from requests
 * cannot grow memory without bound.
 */
void kd_metric_add(struct kd_metric *f, const char *const *values, double v);
void kd_metric_inc(struct kd_metric *f, const char *const *values);
void kd_metric_set(struct kd_metric *f, const char *const *values, double v);
void kd_metric_observe(struct kd_metric *f, const char *const *values, double v);

/**
 * Call fn(ud) at the start of every render, before any family is read: the
 * place to set gauges that are counted from some other state (e.g. objects
 * by state from a cache). One hook per registry; a second replaces it.
 * fn runs on the scraping thread and must be thread-safe.
 */
void kd_metrics_on_render(struct kd_metrics *m, void (*fn)(void *ud), void *ud);

/**
 * Append every family to out in the text format (families in registration
 * order, series in creation order). Returns 0 or KD_ETOOBIG/KD_ENOMEM from
 * the buffer. Thread-safe against updates.
 */
int kd_metrics_render(struct kd_metrics *m, struct kd_buf *out) KD_WUR;

/** The exposition format's Content-Type. */
#define KD_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
