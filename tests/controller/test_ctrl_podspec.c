/*
 * Golden-file tests of trial pod generation: each
 * tests/data/controller/pods/NAME.input.json (trial, config, placement) must
 * give exactly NAME.pods.json. KD_UPDATE_GOLDEN=1 rewrites the golden files
 * (review the diff before committing). Also the errors for bad pod_specs and
 * entrypoints, and the priority-class mapping. An input's "context" is the
 * Experiment's spec.context; its "cpu_slots" (an object, optionally with
 * cpu_per_slot_milli and memory_per_slot) says that "gpus" count CPU slots;
 * "allow_host_devices" is kdet-controller's --allow-host-devices.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../support/golden.h"

#include "config/config.h"
#include "config/task.h"
#include "core/alloc.h"
#include "podspec.h"

#define DIR "tests/data/controller/pods/"

static void golden(const char *name)
{
    char path[512], err[KD_ERRLEN] = "";
    json_error_t je;
    snprintf(path, sizeof(path), DIR "%s.input.json", name);
    json_t *in = json_load_file(path, 0, &je);
    if (in == NULL)
        fail_msg("%s:%d: %s", path, je.line, je.text);
    json_t *cfg = json_deep_copy(json_object_get(in, "config"));
    if (kd_config_check(cfg, err) != 0)
        fail_msg("%s: config: %s", name, err);
    assert_int_equal(kd_config_apply_defaults(cfg, err), 0);
    const char *nodes[8] = {0};
    json_t *jn = json_object_get(in, "nodes");
    for (size_t i = 0; i < json_array_size(jn) && i < 8; i++)
        nodes[i] = json_string_value(json_array_get(jn, i));
    struct kd_pod_opts o = {.image = "kdet/trial:test",
                            .controller_url = "http://kdet-controller.kdet:8080",
                            .priority_classes = true};
    const json_t *api = json_object_get(in, "api");
    if (json_is_object(api)) {
        o.api = true;
        o.latest_checkpoint = json_string_value(json_object_get(api, "latest_checkpoint"));
        o.experiment_int_id = json_integer_value(json_object_get(api, "experiment_int_id"));
        o.trial_int_id = json_integer_value(json_object_get(api, "trial_int_id"));
        o.controller_ca = json_is_true(json_object_get(api, "controller_ca"));
    }
    o.context = json_object_get(in, "context"); /* the Experiment's spec.context */
    o.allow_host_devices = json_is_true(json_object_get(in, "allow_host_devices"));
    o.run_as_user = (long)json_integer_value(json_object_get(in, "run_as_user"));
    const json_t *cs = json_object_get(in, "cpu_slots"); /* "gpus" count CPU slots */
    if (json_is_object(cs)) {
        o.cpu_slots = true;
        o.cpu_per_slot_milli = json_integer_value(json_object_get(cs, "cpu_per_slot_milli"));
        o.memory_per_slot = (uint64_t)json_integer_value(json_object_get(cs, "memory_per_slot"));
    }
    json_t *pods = NULL;
    int rc = kd_pod_build(
        json_object_get(in, "trial"), cfg, json_string_value(json_object_get(in, "run_id")),
        json_is_array(jn) ? nodes : NULL, (int)json_integer_value(json_object_get(in, "gpus")),
        (int)json_integer_value(json_object_get(in, "npods")), &o, &pods, err);
    if (rc != 0)
        fail_msg("%s: kd_pod_build: %s (%s)", name, kd_err_name(rc), err);
    snprintf(path, sizeof(path), DIR "%s.pods.json", name);
    kd_golden_check(name, path, pods);
    json_decref(pods);
    json_decref(cfg);
    json_decref(in);
}

/*
 * A task's pod (kd_pod_build_task) against NAME.pods.json: the input holds
 * the Task ("task", its spec.config checked and defaulted here), "node",
 * "slots", "run_id", and as for trials "api", "cpu_slots", plus
 * "tensorboard_logdir".
 */
static void golden_task(const char *name)
{
    char path[512], err[KD_ERRLEN] = "";
    json_error_t je;
    enum kd_task_kind kind;
    snprintf(path, sizeof(path), DIR "%s.input.json", name);
    json_t *in = json_load_file(path, 0, &je);
    if (in == NULL)
        fail_msg("%s:%d: %s", path, je.line, je.text);
    const json_t *task = json_object_get(in, "task");
    const json_t *spec = json_object_get(task, "spec");
    assert_int_equal(kd_task_kind_parse(json_string_value(json_object_get(spec, "kind")), &kind),
                     0);
    json_t *cfg = json_deep_copy(json_object_get(spec, "config"));
    if (kd_task_config_check(kind, cfg, err) != 0)
        fail_msg("%s: config: %s", name, err);
    assert_int_equal(kd_task_config_apply_defaults(kind, cfg, err), 0);
    struct kd_pod_opts o = {.image = "kdet/trial:test",
                            .controller_url = "http://kdet-controller.kdet:8080",
                            .priority_classes = true,
                            .tensorboard_image = "kdet/tensorboard:test"};
    const json_t *api = json_object_get(in, "api");
    if (json_is_object(api)) {
        o.api = true;
        o.controller_ca = json_is_true(json_object_get(api, "controller_ca"));
    }
    const json_t *cs = json_object_get(in, "cpu_slots");
    if (json_is_object(cs)) {
        o.cpu_slots = true;
        o.cpu_per_slot_milli = json_integer_value(json_object_get(cs, "cpu_per_slot_milli"));
    }
    o.tensorboard_logdir = json_string_value(json_object_get(in, "tensorboard_logdir"));
    json_t *pod = NULL, *pods = json_array();
    int rc =
        kd_pod_build_task(task, cfg, json_string_value(json_object_get(in, "run_id")),
                          json_string_value(json_object_get(in, "node")),
                          (int)json_integer_value(json_object_get(in, "slots")), &o, &pod, err);
    if (rc != 0)
        fail_msg("%s: kd_pod_build_task: %s (%s)", name, kd_err_name(rc), err);
    json_array_append_new(pods, pod);
    snprintf(path, sizeof(path), DIR "%s.pods.json", name);
    kd_golden_check(name, path, pods);
    json_decref(pods);
    json_decref(cfg);
    json_decref(in);
}

/* A command (its entrypoint under kdet-launch), with a context unpacked into work_dir, GPUs, a
 * resource pool, bind mounts and the user's variables (kdet's names win). */
static void test_task_command(void **s)
{
    (void)s;
    golden_task("task_command");
}

/* A notebook: Jupyter on the reported port under /proxy/TASK/, its token from the Secret (the
 * user's JUPYTER_TOKEN is replaced), the cuda image flavour for its GPU, shared memory. */
static void test_task_notebook(void **s)
{
    (void)s;
    golden_task("task_notebook");
}

/* A shell on CPU slots: sshd with the keys of its Secret mounted per run. */
static void test_task_shell(void **s)
{
    (void)s;
    golden_task("task_shell");
}

/* A TensorBoard: no slot, the TensorBoard image, the experiments' event directories. */
static void test_task_tensorboard(void **s)
{
    (void)s;
    golden_task("task_tensorboard");
}

static void test_task_errors(void **s)
{
    (void)s;
    char err[KD_ERRLEN] = "";
    json_t *pod = NULL, *cfg = json_object();
    struct kd_pod_opts o = {.image = "x"};
    json_t *t = json_pack("{s:{s:s,s:s,s:s},s:{s:s}}", "metadata", "name", "t", "namespace", "d",
                          "uid", "u", "spec", "kind", "lab");
    assert_int_equal(kd_pod_build_task(t, cfg, "r", NULL, 1, &o, &pod, err), KD_EINVALID);
    assert_string_equal(err, "spec.kind: lab is not a kind of task");
    assert_null(pod);
    json_object_set_new(json_object_get(t, "spec"), "kind", json_string("command"));
    assert_int_equal(kd_pod_build_task(t, cfg, "r", NULL, 1, &o, &pod, err), KD_EINVALID);
    assert_null(pod);
    json_object_set_new(cfg, "environment",
                        json_pack("{s:{s:{s:s}}}", "pod_spec", "metadata", "name", "mine"));
    json_object_set_new(cfg, "entrypoint", json_string("true"));
    assert_int_equal(kd_pod_build_task(t, cfg, "r", NULL, 1, &o, &pod, err), KD_EINVALID);
    assert_string_equal(err,
                        "environment.pod_spec.metadata.name: not allowed (kdet names trial pods)");
    json_decref(t);
    json_decref(cfg);
}

static void test_single(void **s)
{
    (void)s;
    golden("single");
}

static void test_multi(void **s)
{
    (void)s;
    golden("multi");
}

/* Several pods with the controller API: each also gets KDET_POD_IP from status.podIP. */
static void test_multi_api(void **s)
{
    (void)s;
    golden("multi_api");
}

static void test_cpu(void **s)
{
    (void)s;
    golden("cpu");
}

/* Two CPU slots of the default 1 CPU: cpu 2 requested and limited, no GPU, the cpu image and
 * variables, two workers. */
static void test_cpu_slots(void **s)
{
    (void)s;
    golden("cpuslots");
}

/* Two pods of 3 CPU slots of 1.5 CPUs and 1 GiB each: cpu 4500m and 3 GiB per pod. */
static void test_cpu_slots_multi(void **s)
{
    (void)s;
    golden("cpuslots_multi");
}

static void test_api(void **s)
{
    (void)s;
    golden("api");
}

/* The API over HTTPS: KDET_CONTROLLER_CA from the token Secret's ca.crt (optional). */
static void test_api_tls(void **s)
{
    (void)s;
    golden("api_tls");
}

static void test_sharedfs(void **s)
{
    (void)s;
    golden("sharedfs");
}

/* --trial-run-as-user: the pod runs as that uid and gid, with runAsNonRoot. */
static void test_nonroot(void **s)
{
    (void)s;
    golden("nonroot");
}

/* ...unless the user's pod_spec names a user (here root): theirs is kept, nothing added. */
static void test_asroot(void **s)
{
    (void)s;
    golden("asroot");
}

/*
 * The fields of Determined's config that shape the pod: bind mounts as hostPath volumes
 * (cleaned paths, readOnly, propagation; the checkpoint directory's own bind mount not twice),
 * a host device (with --allow-host-devices) in a privileged container, the GPU device left to
 * the device plugin, named ports (the pod_spec's same port once), imagePullPolicy Always,
 * capabilities (canonical names, the pod_spec's kept), workspace and project labels.
 */
static void test_fields(void **s)
{
    (void)s;
    golden("fields");
}

/* is_single_node, two pods no node pin holds together: a pod affinity by hostname. */
static void test_single_node(void **s)
{
    (void)s;
    golden("single_node");
}

/* The context ConfigMap: a read-only volume per pod, the archive's path and digest. */
static void test_context_configmap(void **s)
{
    (void)s;
    golden("context_cm");
}

/* A context directory on the node: KDET_CONTEXT_DIR only. */
static void test_context_path(void **s)
{
    (void)s;
    golden("context_path");
}

/*
 * An s3:// context URL with s3 storage and a credentials_secret: the keys
 * by secretKeyRef (the session token optional; the user's own wins), the
 * storage JSON for the endpoint, never a key's value.
 */
static void test_context_s3(void **s)
{
    (void)s;
    golden("context_s3");
}

/* A volume the user's pod_spec already mounts at host_path is not mounted twice. */
static void test_sharedfs_user_mount(void **s)
{
    (void)s;
    char err[KD_ERRLEN] = "";
    json_t *trial = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:i,s:{}}}", "metadata", "name", "t-1",
                              "namespace", "default", "uid", "u", "spec", "experiment", "t",
                              "requestId", "r0-1", "seed", 1, "hparams");
    json_t *cfg = json_pack(
        "{s:s,s:{s:s,s:s},s:{s:{s:{s:[{s:s,s:{s:s}}],s:[{s:s,s:[{s:s,s:s}]}]}}}}", "entrypoint",
        "train", "checkpoint_storage", "type", "shared_fs", "host_path", "/data/ck", "environment",
        "pod_spec", "spec", "volumes", "name", "mine", "nfs", "path", "/export", "containers",
        "name", "trial", "volumeMounts", "name", "mine", "mountPath", "/data/ck");
    struct kd_pod_opts o = {0};
    json_t *pods = NULL;
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    json_t *ps = json_object_get(json_array_get(pods, 0), "spec");
    assert_int_equal(json_array_size(json_object_get(ps, "volumes")), 1);
    json_t *c = json_array_get(json_object_get(ps, "containers"), 0);
    assert_int_equal(json_array_size(json_object_get(c, "volumeMounts")), 1);
    json_decref(pods);
    /* A relative host_path mounts nothing (the config check refuses it earlier). */
    json_object_del(cfg, "environment");
    json_object_set_new(json_object_get(cfg, "checkpoint_storage"), "host_path",
                        json_string("rel"));
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    assert_null(json_object_get(json_object_get(json_array_get(pods, 0), "spec"), "volumes"));
    json_decref(pods);
    json_decref(trial);
    json_decref(cfg);
}

/* The value of env variable NAME of the first pod's container, or NULL. */
static const char *pod_env(const json_t *pods, const char *name)
{
    const json_t *ps = json_object_get(json_array_get(pods, 0), "spec");
    const json_t *c = json_array_get(json_object_get(ps, "containers"), 0);
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(c, "env"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")) ?: "", name) == 0)
            return json_string_value(json_object_get(e, "value"));
    }
    return NULL;
}

/* KDET_EXPERIMENT_CONFIG: the training loop's fields; a huge `data` left out; the user's wins. */
static void test_experiment_config_env(void **s)
{
    (void)s;
    char err[KD_ERRLEN] = "";
    json_t *trial = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:i,s:{}}}", "metadata", "name", "t-1",
                              "namespace", "default", "uid", "u", "spec", "experiment", "t",
                              "requestId", "r0-1", "seed", 1, "hparams");
    json_t *cfg = json_pack("{s:s,s:i,s:{s:i},s:{s:s},s:{s:s}}", "entrypoint", "train",
                            "records_per_epoch", 60000, "optimizations", "aggregation_frequency", 2,
                            "data", "dir", "/d", "environment", "image", "img");
    struct kd_pod_opts o = {0};
    json_t *pods = NULL;
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    assert_string_equal(
        pod_env(pods, "KDET_EXPERIMENT_CONFIG"),
        "{\"data\":{\"dir\":\"/d\"},\"optimizations\":{\"aggregation_frequency\":2},"
        "\"records_per_epoch\":60000}");
    json_decref(pods);
    char *big = kd_xmalloc(70000);
    memset(big, 'x', 69999);
    big[69999] = '\0';
    json_object_set_new(json_object_get(cfg, "data"), "blob", json_string(big));
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    assert_string_equal(
        pod_env(pods, "KDET_EXPERIMENT_CONFIG"),
        "{\"optimizations\":{\"aggregation_frequency\":2},\"records_per_epoch\":60000}");
    json_decref(pods);
    json_object_set_new(cfg, "environment",
                        json_pack("{s:[s]}", "environment_variables", "KDET_EXPERIMENT_CONFIG={}"));
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    assert_string_equal(pod_env(pods, "KDET_EXPERIMENT_CONFIG"), "{}");
    json_decref(pods);
    free(big);
    json_decref(trial);
    json_decref(cfg);
}

/* exclude_node log policies: a NotIn node affinity, added to every term of the user's. */
static void test_exclude_nodes(void **s)
{
    (void)s;
    char err[KD_ERRLEN] = "";
    json_t *trial = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:i,s:{}}}", "metadata", "name", "t-1",
                              "namespace", "default", "uid", "u", "spec", "experiment", "t",
                              "requestId", "r0-1", "seed", 1, "hparams");
    json_t *cfg = json_pack("{s:s}", "entrypoint", "train");
    static const char *const nodes[] = {"gpu-3", "gpu-7"};
    struct kd_pod_opts o = {.exclude_nodes = nodes, .nexclude = 2};
    json_t *pods = NULL;
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    json_t *want = json_loads(
        "{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{"
        "\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"kubernetes.io/hostname\","
        "\"operator\":\"NotIn\",\"values\":[\"gpu-3\",\"gpu-7\"]}]}]}}}",
        0, NULL);
    assert_true(json_equal(
        json_object_get(json_object_get(json_array_get(pods, 0), "spec"), "affinity"), want));
    json_decref(want);
    json_decref(pods);
    /* the user's two terms (ORed) each get the expression */
    json_decref(cfg);
    cfg = json_loads(
        "{\"entrypoint\":\"train\",\"environment\":{\"pod_spec\":{\"spec\":{"
        "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":"
        "{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":"
        "\"In\",\"values\":[\"a\"]}]},{\"matchExpressions\":[{\"key\":\"zone\","
        "\"operator\":\"In\",\"values\":[\"b\"]}]}]}}}}}}}",
        0, NULL);
    assert_non_null(cfg);
    o.nexclude = 1;
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    json_t *terms = json_object_get(
        json_object_get(
            json_object_get(
                json_object_get(json_object_get(json_array_get(pods, 0), "spec"), "affinity"),
                "nodeAffinity"),
            "requiredDuringSchedulingIgnoredDuringExecution"),
        "nodeSelectorTerms");
    assert_int_equal(json_array_size(terms), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *ex = json_object_get(json_array_get(terms, i), "matchExpressions");
        assert_int_equal(json_array_size(ex), 2);
        assert_string_equal(json_string_value(json_object_get(json_array_get(ex, 1), "operator")),
                            "NotIn");
    }
    json_decref(pods);
    /* none: no affinity */
    o.nexclude = 0;
    json_decref(cfg);
    cfg = json_pack("{s:s}", "entrypoint", "train");
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    assert_null(json_object_get(json_object_get(json_array_get(pods, 0), "spec"), "affinity"));
    json_decref(pods);
    json_decref(trial);
    json_decref(cfg);
}

static void test_errors(void **s)
{
    (void)s;
    char err[KD_ERRLEN] = "";
    json_t *trial = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:i,s:{}}}", "metadata", "name", "t-1",
                              "namespace", "default", "uid", "u", "spec", "experiment", "t",
                              "requestId", "r0-1", "seed", 1, "hparams");
    json_t *cfg = json_pack("{s:s,s:{s:{s:{s:s}}}}", "entrypoint", "train", "environment",
                            "pod_spec", "metadata", "name", "mine");
    struct kd_pod_opts o = {0};
    json_t *pods = NULL;
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), KD_EINVALID);
    assert_non_null(strstr(err, "environment.pod_spec.metadata.name"));
    assert_null(pods);
    json_object_set_new(json_object_get(cfg, "environment"), "pod_spec", json_string("x"));
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), KD_EINVALID);
    assert_non_null(strstr(err, "environment.pod_spec"));
    json_object_del(cfg, "environment");
    json_object_set_new(cfg, "entrypoint", json_integer(3));
    assert_int_not_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err), 0);
    assert_int_equal(kd_pod_build(trial, cfg, "r", NULL, 1, 0, &o, &pods, err), KD_EINVAL);
    json_decref(trial);
    json_decref(cfg);
}

/*
 * What the pod builder refuses in the new fields, each naming the field: a host device when the
 * cluster does not allow them, a port on the rendezvous port, and a bind mount or port that the
 * pod_spec's trial container already has otherwise. kd_pod_check, which the controller runs when
 * it reads an experiment, refuses the same from the configuration alone.
 */
static void test_field_errors(void **s)
{
    (void)s;
    static const struct {
        const char *cfg; /* JSON, with "entrypoint" */
        bool allow_devices;
        int master_port;
        int check_rc, build_rc;
        const char *want; /* in err */
    } rows[] = {
        {"{\"resources\":{\"devices\":[{\"host_path\":\"/dev/fuse\",\"container_path\":"
         "\"/dev/fuse\"}]}}",
         false, 0, KD_EINVALID, KD_EINVALID,
         "resources.devices[0]: host device /dev/fuse: this cluster does not pass host devices"},
        {"{\"resources\":{\"devices\":[{\"host_path\":\"/dev/fuse\",\"container_path\":"
         "\"/dev/fuse\"}]}}",
         true, 0, 0, 0, ""},
        {"{\"resources\":{\"devices\":[{\"host_path\":\"/dev/nvidia0\",\"container_path\":"
         "\"/dev/nvidia0\"}]}}",
         false, 0, 0, 0, ""},
        {"{\"environment\":{\"ports\":{\"rdzv\":29400}}}", false, 0, KD_EINVALID, KD_EINVALID,
         "environment.ports.rdzv: 29400 is the port kdet's workers meet on"},
        {"{\"environment\":{\"ports\":{\"web\":29400}}}", false, 31000, 0, 0, ""},
        {"{\"environment\":{\"ports\":{\"web\":8080}}}", false, 8080, KD_EINVALID, KD_EINVALID,
         "environment.ports.web: 8080"},
        {"{\"environment\":{\"ports\":{\"web\":8080},\"pod_spec\":{\"spec\":{\"containers\":"
         "[{\"name\":\"trial\",\"ports\":[{\"name\":\"web\",\"containerPort\":80}]}]}}}}",
         false, 0, KD_EINVALID, KD_EINVALID,
         "environment.ports.web: environment.pod_spec's trial container already has a port of "
         "that name (ports[0])"},
        {"{\"bind_mounts\":[{\"host_path\":\"/mnt/d\",\"container_path\":\"/data\"}],"
         "\"environment\":{\"pod_spec\":{\"spec\":{\"volumes\":[{\"name\":\"v\","
         "\"emptyDir\":{}}],\"containers\":[{\"name\":\"trial\",\"volumeMounts\":[{"
         "\"name\":\"v\",\"mountPath\":\"/data/\"}]}]}}}}",
         false, 0, KD_EINVALID, KD_EINVALID,
         "bind_mounts[0].container_path: /data is already mounted in the trial container "
         "(volumeMounts[0], volume v)"},
        {"{\"bind_mounts\":[{\"host_path\":\"/mnt/d\",\"container_path\":\"/data\"}],"
         "\"environment\":{\"pod_spec\":{\"spec\":{\"volumes\":[{\"name\":\"kdet-bind-0\","
         "\"emptyDir\":{}}]}}}}",
         false, 0, KD_EINVALID, KD_EINVALID,
         "environment.pod_spec.spec.volumes: the name kdet-bind-0"},
    };
    json_t *trial = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:i,s:{}}}", "metadata", "name", "t-1",
                              "namespace", "default", "uid", "u", "spec", "experiment", "t",
                              "requestId", "r0-1", "seed", 1, "hparams");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char err[KD_ERRLEN] = "";
        json_error_t je;
        json_t *cfg = json_loads(rows[i].cfg, 0, &je);
        if (cfg == NULL)
            fail_msg("row %zu: %s", i, je.text);
        json_object_set_new(cfg, "entrypoint", json_string("train"));
        struct kd_pod_opts o = {.allow_host_devices = rows[i].allow_devices,
                                .master_port = rows[i].master_port};
        json_t *pods = NULL;
        int crc = kd_pod_check(cfg, &o, err);
        int brc = kd_pod_build(trial, cfg, "r", NULL, 1, 1, &o, &pods, err);
        if (crc != rows[i].check_rc || brc != rows[i].build_rc ||
            (brc != 0 && strstr(err, rows[i].want) == NULL))
            fail_msg("row %zu: check %d build %d err \"%s\", want %d %d \"%s\"", i, crc, brc, err,
                     rows[i].check_rc, rows[i].build_rc, rows[i].want);
        assert_true(brc == 0 ? pods != NULL : pods == NULL);
        json_decref(pods);
        json_decref(cfg);
    }
    json_decref(trial);
}

static void test_priority_classes(void **s)
{
    (void)s;
    assert_string_equal(kd_pod_priority_class(1), "kdet-high");
    assert_string_equal(kd_pod_priority_class(29), "kdet-high");
    assert_string_equal(kd_pod_priority_class(30), "kdet-normal");
    assert_string_equal(kd_pod_priority_class(0), "kdet-normal");
    assert_string_equal(kd_pod_priority_class(42), "kdet-normal");
    assert_string_equal(kd_pod_priority_class(69), "kdet-normal");
    assert_string_equal(kd_pod_priority_class(70), "kdet-low");
    assert_string_equal(kd_pod_priority_class(99), "kdet-low");
    char b[64];
    kd_pod_service_name("aaaabbbb-cccc-dddd", b, sizeof(b));
    assert_string_equal(b, "kdt-aaaabbbbcccc");
    assert_int_equal(kd_pod_name("x", 3, b, sizeof(b)), 0);
    assert_string_equal(b, "x-3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_multi),
        cmocka_unit_test(test_multi_api),
        cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_cpu_slots),
        cmocka_unit_test(test_cpu_slots_multi),
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_api_tls),
        cmocka_unit_test(test_sharedfs),
        cmocka_unit_test(test_nonroot),
        cmocka_unit_test(test_asroot),
        cmocka_unit_test(test_sharedfs_user_mount),
        cmocka_unit_test(test_exclude_nodes),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_single_node),
        cmocka_unit_test(test_context_configmap),
        cmocka_unit_test(test_context_path),
        cmocka_unit_test(test_context_s3),
        cmocka_unit_test(test_experiment_config_env),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_field_errors),
        cmocka_unit_test(test_priority_classes),
        cmocka_unit_test(test_task_command),
        cmocka_unit_test(test_task_notebook),
        cmocka_unit_test(test_task_shell),
        cmocka_unit_test(test_task_tensorboard),
        cmocka_unit_test(test_task_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
