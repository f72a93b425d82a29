/*
 * The queue position of a kdet Experiment, one rule for the scheduler, the
 * controller API's job list and `det job list` (docs/scheduling.md, "Queue
 * order"): its creation time, moved just ahead of or behind the experiment
 * that its kdet.io/ahead-of or kdet.io/behind-of annotation names, in the
 * same namespace. Chains are followed up to 8 deep; each step moves by half
 * as much as the one before, so a chain keeps its order.
 */
#ifndef KD_K8S_POSITION_H
#define KD_K8S_POSITION_H

#include <jansson.h>

#define KD_ANN_AHEAD_OF "kdet.io/ahead-of"
#define KD_ANN_BEHIND_OF "kdet.io/behind-of"

/** The experiment `name` in namespace `ns` as a new reference, or NULL when there is none. */
typedef json_t *(*kd_exp_lookup_fn)(const char *ns, const char *name, void *ud);

/** A kd_exp_lookup_fn over an informer cache (ud: the struct kd_k8s_cache *). */
json_t *kd_exp_from_cache(const char *ns, const char *name, void *ud);

/** Smaller is earlier. An experiment named by an annotation but not found leaves the time as is. */
double kd_queue_position(const json_t *exp, kd_exp_lookup_fn lookup, void *ud);

#endif
