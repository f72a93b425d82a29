/*
 * The controller's metric families and the values read at scrape time.
 * Counting objects by state walks the informer caches (one inflate per
 * object, so about a millisecond per thousand trials per scrape).
 */
#include "metrics.h"

#include "core/time.h"
#include "metrics/metrics.h"
#include "states.h"

#define N_EXP_STATES (KD_EXP_ERROR + 1)
#define N_TRIAL_STATES (KD_TRIAL_ERROR + 1)

struct counts {
    int exp;        /* 1: experiments, 0: trials */
    size_t n[16];   /* by state */
    size_t unknown; /* no state yet (new objects) */
};

static int count_state(json_t *obj, void *ud)
{
    struct counts *k = ud;
    const char *st = json_string_value(json_object_get(json_object_get(obj, "status"), "state"));
    enum kd_exp_state es;
    enum kd_trial_state ts;
    if (k->exp && st != NULL && kd_exp_state_parse(st, &es))
        k->n[es]++;
    else if (!k->exp && st != NULL && kd_trial_state_parse(st, &ts))
        k->n[ts]++;
    else
        k->unknown++;
    return 0;
}

static void by_state(struct kd_k8s_informer *inf, struct kd_metric *g, int exp)
{
    struct counts k = {.exp = exp};
    if (inf != NULL)
        (void)kd_k8s_cache_each(kd_k8s_informer_cache(inf), NULL, count_state, &k);
    int n = exp ? N_EXP_STATES : N_TRIAL_STATES;
    for (int s = 0; s < n; s++) {
        const char *name = exp ? kd_exp_state_name((enum kd_exp_state)s)
                               : kd_trial_state_name((enum kd_trial_state)s);
        kd_metric_set(g, (const char *[]){name}, (double)k.n[s]);
    }
    kd_metric_set(g, (const char *[]){"PENDING"}, (double)k.unknown);
}

static void on_render(void *ud)
{
    struct kd_ctrl *c = ud;
    kd_metric_set(c->m.queue_depth, (const char *[]){"experiments"},
                  c->expq != NULL ? (double)kd_k8s_queue_len(c->expq) : 0);
    kd_metric_set(c->m.queue_depth, (const char *[]){"trials"},
                  c->trialq != NULL ? (double)kd_k8s_queue_len(c->trialq) : 0);
    kd_metric_set(c->m.queue_depth, (const char *[]){"tasks"},
                  c->taskq != NULL ? (double)kd_k8s_queue_len(c->taskq) : 0);
    by_state(c->exps, c->m.experiments, 1);
    by_state(c->trials, c->m.trials, 0);
    kd_metric_set(c->m.leader, NULL,
                  !c->o.leader_elect || (c->leader != NULL && kd_k8s_leader_is_leader(c->leader)));
}

void kd_ctrl_metrics_init(struct kd_ctrl *c)
{
    static const double secs[] = {0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10};
    const size_t nsecs = sizeof(secs) / sizeof(secs[0]);
    struct kd_metrics *m = kd_metrics_new();
    c->metrics = m;
    c->m.reconciles = kd_metrics_counter(m, "kdet_reconciles_total",
                                         "Reconciles by kind (experiment, trial, task) and result "
                                         "(ok, requeue, error).",
                                         "kind,result");
    c->m.reconcile_seconds = kd_metrics_histogram(
        m, "kdet_reconcile_duration_seconds", "Reconcile latency by kind.", "kind", secs, nsecs);
    c->m.queue_depth =
        kd_metrics_gauge(m, "kdet_workqueue_depth", "Keys waiting in a work queue.", "queue");
    c->m.experiments = kd_metrics_gauge(
        m, "kdet_experiments", "Experiments in this controller's cache by state.", "state");
    c->m.trials =
        kd_metrics_gauge(m, "kdet_trials", "Trials in this controller's cache by state.", "state");
    c->m.leader = kd_metrics_gauge(
        m, "kdet_leader", "1 while this replica acts (holds the Lease, or no election).", NULL);
    c->m.db_seconds =
        kd_metrics_histogram(m, "kdet_db_statement_duration_seconds",
                             "PostgreSQL statement latency by operation.", "op", secs, nsecs);
    c->m.rows_written = kd_metrics_counter(m, "kdet_metric_rows_written_total",
                                           "Metric rows written to PostgreSQL (duplicates not "
                                           "counted): their rate is the ingest rate.",
                                           NULL);
    kd_metrics_on_render(m, on_render, c);
}

void kd_ctrl_metrics_free(struct kd_ctrl *c)
{
    kd_metrics_free(c->metrics);
    c->metrics = NULL;
}

static int timed(struct kd_ctrl *c, const char *kind, kd_k8s_reconcile_fn fn, const char *key,
                 long *requeue_after_ms)
{
    int64_t t0 = kd_mono_ns();
    int rc = fn(key, requeue_after_ms, c);
    kd_metric_observe(c->m.reconcile_seconds, (const char *[]){kind},
                      (double)(kd_mono_ns() - t0) / 1e9);
    const char *result = rc != 0 ? "error" : *requeue_after_ms > 0 ? "requeue" : "ok";
    kd_metric_inc(c->m.reconciles, (const char *[]){kind, result});
    return rc;
}

int kd_ctrl_reconcile_experiment_timed(const char *key, long *requeue_after_ms, void *ud)
{
    return timed(ud, "experiment", kd_ctrl_reconcile_experiment, key, requeue_after_ms);
}

int kd_ctrl_reconcile_trial_timed(const char *key, long *requeue_after_ms, void *ud)
{
    return timed(ud, "trial", kd_ctrl_reconcile_trial, key, requeue_after_ms);
}

int kd_ctrl_reconcile_task_timed(const char *key, long *requeue_after_ms, void *ud)
{
    return timed(ud, "task", kd_ctrl_reconcile_task, key, requeue_after_ms);
}
