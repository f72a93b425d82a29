/*
 * The pods of one attempt of a trial, built from the Trial, its
 * experiment's configuration (defaults filled) and the scheduler's
 * placement: the launcher command, the KDET_* environment contract of
 * docs/launcher.md, GPU limits (or the CPU and memory of CPU slots), shared memory, priority class,
 * resource pool, owner references, the shared_fs checkpoint directory (a hostPath volume at the
 * same path), bind mounts, devices, ports, capabilities, workspace and project labels, and the
 * user's environment.pod_spec merged in. Pure: no I/O, so golden files pin the
 * output.
 */
#ifndef KD_CTRL_PODSPEC_H
#define KD_CTRL_PODSPEC_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "core/err.h"

#define KD_POD_CONTAINER "trial"  /* kdet's container in every trial pod */
#define KD_POD_DEFAULT_PORT 29400 /* rendezvous port on the chief */
#define KD_POD_LABEL_EXPERIMENT "kdet.io/experiment"
#define KD_POD_LABEL_TRIAL "kdet.io/trial"
#define KD_POD_LABEL_REQUEST "kdet.io/request-id"
#define KD_POD_LABEL_RUN "kdet.io/run-id"
#define KD_POD_LABEL_RANK "kdet.io/node-rank"
#define KD_POD_LABEL_POOL "kdet.io/resource-pool"
#define KD_POD_CKPT_VOLUME "kdet-checkpoints"      /* shared_fs host_path, mounted as is */
#define KD_POD_ANN_TARGET "kdet.io/validate-after" /* the target an attempt was started for */
#define KD_POD_CONTEXT_VOLUME "kdet-context"       /* the context ConfigMap's volume */
#define KD_POD_CONTEXT_KEY "context.tar.gz"        /* its binaryData key */
#define KD_POD_ANN_CPU_SLOTS "kdet.io/cpu-slots"   /* a pod's CPU slots (CPU-slot pods only) */
/*
 * The context ConfigMap is mounted read-only at
 * KD_POD_CONTEXT_MOUNT/<run id>-<node rank>: a path of its own per pod,
 * because kdet-local's process kubelet shares one filesystem between all
 * the pods of a machine.
 */
#define KD_POD_CONTEXT_MOUNT "/run/kdet/context"

/* Tasks (docs/tasks.md): a task's one pod, its container and labels. */
#define KD_POD_TASK_CONTAINER "task"
#define KD_POD_LABEL_TASK "kdet.io/task"
#define KD_POD_LABEL_TASK_KIND "kdet.io/task-kind"
#define KD_POD_SSH_VOLUME "kdet-ssh"     /* a shell's key Secret <task>-ssh */
#define KD_POD_SSH_MOUNT "/run/kdet/ssh" /* ... mounted at KD_POD_SSH_MOUNT/<run id> */
#define KD_POD_SSH_SUFFIX "-ssh"         /* the Secret's name: <task>-ssh */
#define KD_POD_TASK_PROXY "/proxy/"      /* the controller API serves a task at /proxy/TASK/ */

struct kd_pod_opts {
    const char *image;          /* image when environment.image is unset ["kdet/trial:latest"] */
    const char *launcher;       /* the launcher program in the image ["kdet-launch"] */
    const char *controller_url; /* KDET_CONTROLLER_URL; NULL: not set */
    /* With api: the controller's CA is in the token Secret (key ca.crt): KDET_CONTROLLER_CA. */
    bool controller_ca;
    int master_port;       /* [29400] */
    bool priority_classes; /* set priorityClassName from resources.priority */
    long grace_period_s;   /* terminationGracePeriodSeconds [30] */
    /*
     * > 0: trial pods run as this uid and gid with runAsNonRoot, unless the
     * user's pod_spec sets runAsUser (pod or trial container): that is the
     * documented way to run a trial as another user, root included. 0: the
     * image's user.
     */
    long run_as_user;
    /*
     * The controller API is on: KDET_TOKEN from the Secret <trial>-token,
     * KDET_NAMESPACE, KDET_CHECKPOINT_STORAGE (checkpoint_storage as compact
     * JSON), KDET_LENGTH_UNIT (spec.lengthUnit) and KDET_LATEST_CHECKPOINT.
     */
    bool api;
    const char *latest_checkpoint; /* with api: the checkpoint to start from; NULL: none */
    /* With api: the store's integer ids of the experiment and trial (> 0), as
     * KDET_EXPERIMENT_INT_ID and KDET_TRIAL_INT_ID, so that det.get_cluster_info() shows the ids
     * `det` shows. */
    int64_t experiment_int_id, trial_int_id;
    /*
     * The Experiment's spec.context (borrowed; NULL: none). configMap: a
     * read-only volume of its "context.tar.gz" item, KDET_CONTEXT_ARCHIVE
     * and KDET_CONTEXT_SHA256; url: KDET_CONTEXT_URL (and the digest);
     * path: KDET_CONTEXT_DIR. See docs/launcher.md.
     */
    const json_t *context;
    /*
     * The `gpus` of kd_pod_build count CPU slots (the pool's slot type is
     * CPU): each pod requests and is limited to gpus * cpu_per_slot_milli
     * CPU and gpus * memory_per_slot bytes (0: no memory), no
     * nvidia.com/gpu, and carries KD_POD_ANN_CPU_SLOTS.
     */
    bool cpu_slots;
    int64_t cpu_per_slot_milli; /* [1000] */
    uint64_t memory_per_slot;   /* bytes; 0: none */
    /*
     * Nodes the attempt must not run on (exclude_node log policies; borrowed):
     * a required node affinity `kubernetes.io/hostname NotIn [...]`, added
     * to every node selector term of the user's pod_spec (or as the only one).
     */
    const char *const *exclude_nodes;
    int nexclude;
    /*
     * --allow-host-devices: resources.devices other than GPUs become
     * hostPath volumes of a privileged trial container. false: a config with
     * one is refused (kd_pod_check, kd_pod_build). GPU devices are always
     * left to the device plugin.
     */
    bool allow_host_devices;
    /* Tasks (kd_pod_build_task). */
    const char *tensorboard_image;  /* a TensorBoard's image when its config names none */
    const char *tensorboard_logdir; /* its --logdir_spec (NAME:DIR,...; borrowed; NULL: none) */
};

/**
 * The PriorityClass name for a Determined priority (1..99; 0 = unset):
 * 1..29 "kdet-high", 30..69 and unset "kdet-normal", 70..99 "kdet-low".
 * Static string.
 */
const char *kd_pod_priority_class(int priority);

/** The headless Service of a multi-pod trial: "kdt-" + 12 hex digits of the trial's uid. */
void kd_pod_service_name(const char *trial_uid, char *buf, size_t len);

/** The name of the pod of node rank `rank`: "<trial>-<rank>". 0 or KD_ETOOBIG (> 253 bytes). */
int kd_pod_name(const char *trial, int rank, char *buf, size_t len) KD_WUR;

/**
 * The configuration's workspace and project as the labels kdet.io/workspace and
 * kdet.io/project (kd_label_value: "My Team" -> "my-team"), set in `labels`; the ones
 * it has none for are left out. Experiments, Trials and pods carry the same. Pure.
 */
void kd_pod_scope_labels(json_t *labels, const json_t *cfg);

/**
 * What kd_pod_build refuses in a configuration (defaults applied, passed
 * kd_config_check) whatever the trial: a host device other than a GPU when
 * o->allow_host_devices is off, an environment.ports entry on the
 * rendezvous port, a bind mount or port the pod_spec's trial container
 * has otherwise, an entrypoint with no launcher command. The controller
 * calls it when it reads an experiment's configuration, so the experiment
 * fails at once naming the field. Returns 0 or KD_EINVALID (err names the
 * field). Aborts on out-of-memory. Pure; thread-safe.
 */
int kd_pod_check(const json_t *cfg, const struct kd_pod_opts *o, char *err) KD_WUR;

/**
 * Build the npods pods of one attempt. `trial` is the Trial object (its
 * metadata.name/namespace/uid, spec.hparams/seed/requestId/experiment are
 * read); `cfg` the experiment configuration with defaults applied;
 * `run_id` the attempt's KDET_RUN_ID; nodes[r] the node chosen for rank r
 * (NULL entries or a NULL array: no pin) and gpus the GPUs of every pod.
 * *out is a new JSON array of Pod objects (caller json_decref()s). Returns
 * 0 or KD_EINVALID with the field in err (an entrypoint that cannot be
 * turned into a launcher command, a pod_spec that is not an object or
 * names metadata.name, what kd_pod_check refuses, a bind mount, device or
 * port that the pod_spec's trial container already has differently).
 * Aborts on out-of-memory. Thread-safe.
 *
 * From the configuration: bind_mounts and (allowed) resources.devices as
 * hostPath volumes (kdet-bind-I, kdet-dev-I) mounted at container_path
 * (read_only, propagation as mountPropagation; a device makes the trial
 * container privileged), environment.ports as named TCP container ports,
 * force_pull_image as imagePullPolicy Always, add/drop_capabilities in the
 * container's securityContext, workspace and project as the labels
 * kdet.io/workspace and kdet.io/project, and with
 * resources.is_single_node a required pod affinity to the attempt's other
 * pods by kubernetes.io/hostname when several pods are not pinned to nodes
 * (a batch scheduler places them).
 */
int kd_pod_build(const json_t *trial, const json_t *cfg, const char *run_id,
                 const char *const *nodes, int gpus, int npods, const struct kd_pod_opts *o,
                 json_t **out, char *err) KD_WUR;

/**
 * The pod of one run of a Task (notebook, command, shell or TensorBoard),
 * named "<task>-0": `task` is the Task (metadata.name/namespace/uid,
 * spec.kind, spec.context), `cfg` its config with defaults applied,
 * `run_id` the run's KDET_RUN_ID, `node` the node the scheduler chose
 * (NULL: no pin), `slots` its GPUs (or CPU slots with o->cpu_slots). Built
 * like a trial's pod (kd_pod_build): image, environment variables, GPU or
 * CPU-slot resources, shared memory, bind mounts, devices, ports,
 * capabilities, priority class, resource pool, the user's pod_spec, the
 * context (unpacked into work_dir when the config sets one). The container
 * `task` runs `kdet-launch --nproc 1 -- ...`: the entrypoint for a
 * command; for a notebook Jupyter (jupyter-notebook, else jupyter-server,
 * from the image's PATH) with base URL /proxy/TASK/ and its token from the
 * task's token Secret; for a shell sshd with the host key and authorized
 * key of the Secret <task>-ssh; for a TensorBoard `tensorboard` over
 * o->tensorboard_logdir. A service (all but commands) reports the port
 * kdet-launch picked for it (KDET_TASK_SERVICE). *out is a new Pod
 * object. 0 or KD_EINVALID with the field in err. Aborts on out-of-memory.
 * Pure; thread-safe.
 */
int kd_pod_build_task(const json_t *task, const json_t *cfg, const char *run_id, const char *node,
                      int slots, const struct kd_pod_opts *o, json_t **out, char *err) KD_WUR;

#endif
