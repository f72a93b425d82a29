/*
 * kdet's trial scheduler as a pure function: given the nodes of the
 * cluster (GPUs per node and resource pool) and the trials that run or
 * wait, decide which waiting trials to admit now (and on which nodes),
 * which running ones to preempt, and why the others wait. No I/O, no
 * clocks, no globals, so every rule is testable from a table.
 */
#ifndef KD_CTRL_SCHEDULER_H
#define KD_CTRL_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define KD_SCHED_MAX_PODS 64   /* nodes one trial may span */
#define KD_SCHED_MAX_EXCLUDE 8 /* nodes one trial may be kept off (exclude_node log policies) */
#define KD_SCHED_NAMELEN 254   /* node names: DNS-1123 subdomain */
#define KD_SCHED_POOLLEN 64    /* resource pool names */
#define KD_SCHED_REASONLEN 256 /* the reason text of a decision */

enum kd_sched_type {
    KD_SCHED_PRIORITY = 0, /* smaller priority number first, FIFO within one */
    KD_SCHED_FAIR_SHARE,   /* slots shared across experiments by weight */
};

/** "priority" | "fair_share" -> type. 0 or KD_EINVAL. */
int kd_sched_type_parse(const char *s, enum kd_sched_type *out) KD_WUR;

/*
 * What a slot is (Determined's slot_type): a GPU, or a share of a node's
 * CPUs (--cpu-per-slot). AUTO decides per resource pool: GPU slots when a
 * node of the pool has GPUs, CPU slots when none has.
 */
enum kd_sched_slot_type {
    KD_SCHED_SLOT_AUTO = 0,
    KD_SCHED_SLOT_GPU,
    KD_SCHED_SLOT_CPU,
};

/** "auto" | "gpu" | "cpu" -> type. 0 or KD_EINVAL. */
int kd_sched_slot_type_parse(const char *s, enum kd_sched_slot_type *out) KD_WUR;

/**
 * A Kubernetes CPU quantity ("2", "500m", "1.5") in millicores, 1..2^40.
 * 0 or KD_EINVAL (empty, negative, zero, another suffix, too precise).
 */
int kd_sched_cpu_milli(const char *q, int64_t *out) KD_WUR;

/**
 * The CPU slots a node of cpu_milli allocatable millicores offers:
 * floor(cpu_milli / per_slot_milli), at least 1 when it has any CPU; 0
 * when it has none (or per_slot_milli <= 0).
 */
int kd_sched_cpu_slots(int64_t cpu_milli, int64_t per_slot_milli);

/**
 * A node: what it has allocatable, what live pods kdet does not schedule
 * (the controller, PostgreSQL, DaemonSets, other users' work) request of
 * it, and the pool it belongs to.
 */
struct kd_sched_node {
    char name[KD_SCHED_NAMELEN];
    char pool[KD_SCHED_POOLLEN]; /* "default" when the node has no pool label */
    int gpus;                    /* allocatable nvidia.com/gpu */
    int64_t cpu_milli;           /* allocatable cpu, millicores */
    int other_gpus;              /* nvidia.com/gpu requested by other pods bound to it */
    int64_t other_cpu_milli;     /* cpu they request, millicores */
    bool unschedulable;          /* cordoned or not Ready: never placed on */
};

/**
 * The capacity rule: the slots node n offers when they are CPU slots of
 * per_slot_milli (cpu) or GPUs. Returns the node's whole count (what it
 * offers with no other pod: its GPUs, or kd_sched_cpu_slots of its
 * CPUs), and in *free_slots what other pods leave: gpus - other_gpus, or
 * floor((cpu_milli - other_cpu_milli) / per_slot_milli), never negative
 * and never more than the whole. The whole count decides the shape of a
 * trial (never fits, pods per node); the free count what may start now.
 * Pure.
 */
int kd_sched_node_slots(const struct kd_sched_node *n, bool cpu, int64_t per_slot_milli,
                        int *free_slots);

/** One pod's share of a trial: a node and the slots it takes there. */
struct kd_sched_place {
    int node; /* index into the node array */
    int gpus; /* slots: GPUs, or CPU slots where the pool's slots are CPU slots */
};

enum kd_sched_state {
    KD_SCHED_WAITING = 0, /* queued: wants to be admitted */
    KD_SCHED_RUNNING,     /* admitted: holds its placement */
};

enum kd_sched_decision {
    KD_SCHED_WAIT = 0, /* stays queued for now (reason says why) */
    KD_SCHED_ADMIT,    /* create its pods on `place` now */
    KD_SCHED_NEVER,    /* can never fit as configured (reason says why); does not block others */
    KD_SCHED_KEEP,     /* running and stays */
    KD_SCHED_PREEMPT,  /* running, and must stop to make room for a higher-priority trial */
};

/** Stable name of a decision ("admit"...). Static. */
const char *kd_sched_decision_name(enum kd_sched_decision d);

/**
 * A trial as the scheduler sees it. The caller fills the inputs; the
 * scheduler fills decision, reason and (for ADMIT) nplace/place.
 */
struct kd_sched_trial {
    /* inputs */
    const char *key;   /* "namespace/name", unique; borrowed */
    const char *group; /* the experiment ("namespace/name"): fair share and max_slots; borrowed */
    char pool[KD_SCHED_POOLLEN];
    int slots;           /* slots in all (0: needs no slot, one pod) */
    int priority;        /* 1..99, smaller first */
    double weight;       /* fair-share weight of the group (> 0) */
    int group_max_slots; /* resources.max_slots of the group; 0: no cap */
    double position;     /* queue order within a priority, smaller first (e.g. creation ms) */
    int64_t index;       /* tie-break after position (the trial's number) */
    enum kd_sched_state state;
    bool stopping;   /* RUNNING but already being stopped: never chosen as a victim */
    bool no_preempt; /* never chosen as a victim (a task: docs/tasks.md, "Preemption") */
    int nplace;      /* RUNNING: its placement */
    struct kd_sched_place place[KD_SCHED_MAX_PODS];
    /* Nodes (indices into the node array) it is never placed on: exclude_node log policies. */
    int exclude[KD_SCHED_MAX_EXCLUDE];
    int nexclude;
    /*
     * resources.is_single_node: all its pods on one node. More slots than
     * the pool's largest node has is NEVER; split into pods by
     * max_slots_per_pod, the pods share one node.
     */
    bool single_node;
    /* outputs */
    bool cpu; /* ADMIT: its slots are CPU slots (the pool's slot type) */
    enum kd_sched_decision decision;
    char reason[KD_SCHED_REASONLEN];
};

struct kd_sched_opts {
    enum kd_sched_type type;
    bool preemption; /* priority scheduler: preempt lower-priority trials */
    /*
     * A batch scheduler (Volcano, Kueue) admits by capacity: every waiting
     * trial that passes max_slots and the shape rules (NEVER) is admitted at
     * once with the pod layout it would get on an empty pool; free GPUs,
     * queue blocking, fair share and preemption are left to it.
     */
    bool delegate;
    enum kd_sched_slot_type slot_type; /* what a slot is; AUTO: per pool */
    int64_t cpu_per_slot_milli;        /* the CPUs of a CPU slot; 0: 1000 */
    /*
     * Determined's max_slots_per_pod: a trial of more slots runs as
     * slots/N pods of N slots, packed onto the pool's nodes (several to a
     * node where they fit); 0: no limit (one pod, or whole-node pods).
     */
    int max_slots_per_pod;
};

/**
 * The slot type of resource pool `pool`: opts->slot_type when GPU or CPU;
 * AUTO: GPU when a node of the pool (cordoned or not) has GPUs, else CPU.
 * Pure.
 */
enum kd_sched_slot_type kd_sched_pool_slot_type(const struct kd_sched_opts *opts,
                                                const struct kd_sched_node *nodes, size_t nnodes,
                                                const char *pool);

/**
 * Decide for every trial. Every pool's slots are GPUs or CPU slots
 * (kd_sched_pool_slot_type); a node offers its slots by
 * kd_sched_node_slots (the whole count shapes a trial, the free count
 * places it), and the rules below count slots alike. Rules (docs/scheduling.md): a trial
 * of S slots runs as one pod of S GPUs when S fits the largest node of its pool,
 * otherwise as S/G pods of G GPUs on whole free nodes with G GPUs (G the
 * largest node's count; S not a multiple of G, or more such nodes needed
 * than the pool has, is NEVER); with max_slots_per_pod N and S > N, as S/N
 * pods of N slots, each on the node with the least free slots that holds it
 * (S not a multiple of N, or more pods than the empty pool holds, is NEVER).
 * A single_node trial never spans nodes: S above the largest node is NEVER,
 * and its pods of N slots all go to the node with the least free slots
 * that holds all S. Gang: all pods are placed or none. The
 * priority scheduler takes waiting trials by (priority, position, index)
 * and stops at the first one of a pool that does not fit now (no
 * backfill: a big gang is not starved by small ones behind it); with
 * preemption it first frees room by preempting running trials of strictly
 * lower priority (lowest priority, then newest, first) when that makes the
 * trial fit. The fair-share scheduler repeatedly serves the experiment
 * with the fewest held slots per unit of weight. Returns 0, or KD_EINVAL
 * for a bad input (a node index out of range, negative slots). Pure;
 * thread-safe on distinct arrays.
 */
int kd_sched_decide(const struct kd_sched_opts *opts, const struct kd_sched_node *nodes,
                    size_t nnodes, struct kd_sched_trial *trials, size_t ntrials) KD_WUR;

#endif
