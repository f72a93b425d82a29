# Writes tests/data/config/bad/*.yaml: "@@" in a body marks the expected error position.
import os
B = "/work/main/tests/data/config/bad"
cases = []
def case(name, path, msg, body, template=None):
    cases.append((name, path, msg, body, template))

S = "searcher:\n  name: single\n  metric: loss\n  max_length: {batches: 10}\n"
E = "entrypoint: python3 train.py\n"

case("max_trials_string", "searcher.max_trials", 'expected a positive integer, got "ten"',
 E + "searcher:\n  name: random\n  metric: loss\n  max_trials: @@ten\n  max_length: {batches: 10}\n")
case("max_trials_zero", "searcher.max_trials", "expected a positive integer, got 0",
 E + "searcher:\n  name: adaptive_asha\n  metric: loss\n  max_trials: @@0\n  max_length: {batches: 10}\n")
case("max_trials_float", "searcher.max_trials", "expected a positive integer, got 10.0",
 E + "searcher:\n  name: random\n  max_trials: @@10.0\n  max_length: {batches: 10}\n")
case("max_trials_typo", "searcher.max_trails", "unknown field of the random searcher; did you mean `max_trials`?",
 E + "searcher:\n  name: random\n  @@max_trails: 5\n  max_length: {batches: 10}\n")
case("unknown_top_field", "searcher_name", "unknown field; did you mean `searcher`?",
 E + S + "@@searcher_name: x\n")
case("unknown_top_no_suggestion", "completely_different", "unknown field (known fields: name, description",
 E + S + "@@completely_different: 1\n")
case("missing_entrypoint", "entrypoint", "required field is missing",
 "@@name: x\n" + S)
case("missing_searcher", "searcher", "required field is missing",
 "@@" + E)
case("missing_metric_asha", "searcher.metric", "required field is missing",
 E + "searcher:\n  @@name: adaptive_asha\n  max_trials: 4\n  max_length: {batches: 10}\n")
case("missing_max_length", "searcher.max_length", "required field is missing",
 E + "searcher:\n  @@name: single\n  metric: loss\n")
case("missing_max_trials_random", "searcher.max_trials", "required field is missing",
 E + "searcher:\n  @@name: random\n  max_length: {batches: 10}\n")
case("searcher_unknown_name", "searcher.name", 'unknown searcher "adaptive_ash"; did you mean `adaptive_asha`?',
 E + "searcher:\n  name: @@adaptive_ash\n  max_length: {batches: 10}\n")
case("searcher_custom", "searcher.name", "the custom searcher",
 E + "searcher:\n  name: @@custom\n  metric: loss\n")
case("searcher_legacy_adaptive", "searcher.name", "removed from Determined",
 E + "searcher:\n  name: @@adaptive_simple\n  metric: loss\n")
case("single_with_max_trials", "searcher.max_trials", "unknown field of the single searcher",
 E + "searcher:\n  name: single\n  metric: loss\n  @@max_trials: 3\n  max_length: {batches: 10}\n")
case("asha_bad_mode", "searcher.mode", 'expected one of aggressive, standard, conservative, got "agressive"; did you mean `aggressive`?',
 E + "searcher:\n  name: adaptive_asha\n  metric: loss\n  max_trials: 4\n  max_length: {batches: 10}\n  mode: @@agressive\n")
case("asha_divisor_one", "searcher.divisor", "expected a number greater than 1, got 1",
 E + "searcher:\n  name: adaptive_asha\n  metric: loss\n  max_trials: 4\n  max_length: {batches: 10}\n  divisor: @@1\n")
case("asha_max_rungs_neg", "searcher.max_rungs", "expected a positive integer, got -2",
 E + "searcher:\n  name: adaptive_asha\n  metric: loss\n  max_trials: 4\n  max_length: {batches: 10}\n  max_rungs: @@-2\n")
case("max_length_bad_unit", "searcher.max_length.steps", "unknown unit (expected batches, records or epochs)",
 E + "searcher:\n  name: single\n  metric: loss\n  max_length:\n    @@steps: 10\n")
case("max_length_unit_typo", "searcher.max_length.epoch", "unknown unit; did you mean `epochs`?",
 "records_per_epoch: 100\n" + E + "searcher:\n  name: single\n  metric: loss\n  max_length:\n    @@epoch: 10\n")
case("max_length_two_units", "searcher.max_length", "got several units",
 E + "searcher:\n  name: single\n  metric: loss\n  max_length:\n    @@batches: 10\n    records: 100\n")
case("max_length_zero", "searcher.max_length.batches", "expected a positive integer, got 0",
 E + "searcher:\n  name: single\n  metric: loss\n  max_length:\n    batches: @@0\n")
case("epochs_without_records", "searcher.max_length.epochs", "needs records_per_epoch",
 E + "searcher:\n  name: single\n  metric: loss\n  max_length:\n    epochs: @@3\n")
case("min_validation_epochs", "min_validation_period.epochs", "needs records_per_epoch",
 E + S + "min_validation_period:\n  epochs: @@1\n")
case("grid_missing_count", "hyperparameters.lr.count", "the grid searcher needs it",
 E + "hyperparameters:\n  lr:\n    @@type: double\n    minval: 0.1\n    maxval: 0.5\nsearcher:\n  name: grid\n  metric: loss\n  max_length: {batches: 10}\n")
case("grid_too_large", "hyperparameters", "the grid has more than 100000 points",
 E + "hyperparameters:\n  @@a: {type: int, minval: 0, maxval: 1000, count: 1000}\n  b: {type: int, minval: 0, maxval: 1000, count: 1000}\nsearcher:\n  name: grid\n  max_length: {batches: 10}\n")
case("hp_unknown_type", "hyperparameters.lr.type", 'expected one of const, int, double, log, categorical, got "float"',
 E + S + "hyperparameters:\n  lr:\n    type: @@float\n    minval: 1\n    maxval: 2\n")
case("hp_type_typo", "hyperparameters.lr.type", "did you mean `double`?",
 E + S + "hyperparameters:\n  lr:\n    type: @@doubel\n")
case("hp_int_float_bounds", "hyperparameters.n.minval", "expected an integer, got 1.5",
 E + S + "hyperparameters:\n  n:\n    type: int\n    minval: @@1.5\n    maxval: 4\n")
case("hp_min_ge_max", "hyperparameters.lr.maxval", "must be greater than minval (0.5), got 0.1",
 E + S + "hyperparameters:\n  lr:\n    type: double\n    minval: 0.5\n    maxval: @@0.1\n")
case("hp_log_base_one", "hyperparameters.lr.base", "expected a number greater than 0 (and not 1), got 1",
 E + S + "hyperparameters:\n  lr: {type: log, minval: -3, maxval: -1, base: @@1}\n")
case("hp_log_missing_max", "hyperparameters.lr.maxval", "required field is missing",
 E + S + "hyperparameters:\n  lr: @@{type: log, minval: -3}\n")
case("hp_categorical_empty", "hyperparameters.act.vals", "expected a non-empty list of choices, got an empty list",
 E + S + "hyperparameters:\n  act:\n    type: categorical\n    vals: @@[]\n")
case("hp_const_missing_val", "hyperparameters.c.val", "required field is missing",
 E + S + "hyperparameters:\n  c:\n    @@type: const\n")
case("hp_count_zero", "hyperparameters.w.count", "expected a positive integer, got 0",
 E + S + "hyperparameters:\n  w: {type: int, minval: 1, maxval: 9, count: @@0}\n")
case("hp_extra_field", "hyperparameters.w.step", "unknown field of an int hyperparameter",
 E + S + "hyperparameters:\n  w: {type: int, minval: 1, maxval: 9, @@step: 2}\n")
case("gbs_lt_slots", "hyperparameters.global_batch_size", "must be at least resources.slots_per_trial (8), so every slot gets a batch; got 4",
 E + S + "resources:\n  slots_per_trial: 8\nhyperparameters:\n  global_batch_size: @@4\n")
case("gbs_int_range_lt_slots", "hyperparameters.global_batch_size", "must be at least resources.slots_per_trial (4)",
 E + S + "resources:\n  slots_per_trial: 4\nhyperparameters:\n  global_batch_size:\n    @@type: int\n    minval: 2\n    maxval: 64\n")
case("gbs_string", "hyperparameters.global_batch_size", 'expected a positive integer (or an int, const or categorical hyperparameter of positive integers), got "64"',
 E + S + "hyperparameters:\n  global_batch_size: @@\"64\"\n")
case("slots_negative", "resources.slots_per_trial", "expected an integer from 0 to 1048576, got -1",
 E + S + "resources:\n  slots_per_trial: @@-1\n")
case("priority_out_of_range", "resources.priority", "expected an integer from 1 to 99, got 100",
 E + S + "resources:\n  priority: @@100\n")
case("resources_slots", "resources.slots", "did you mean `slots_per_trial`?",
 E + S + "resources:\n  @@slots: 2\n")
case("shm_size_bad", "resources.shm_size", 'expected a size in bytes or a string such as "4Gi" or "512M", got "lots"',
 E + S + "resources:\n  shm_size: @@lots\n")
case("max_slots_lt_slots", "resources.max_slots", "must be at least slots_per_trial (4)",
 E + S + "resources:\n  slots_per_trial: 4\n  max_slots: @@2\n")
case("device_relative", "resources.devices[0].container_path", 'expected an absolute path (starting with /), got "dev/fuse"',
 E + S + "resources:\n  devices:\n    - host_path: /dev/fuse\n      container_path: @@dev/fuse\n")
case("device_mode_bad", "resources.devices[0].mode", 'expected cgroup permissions made of r, w and m',
 E + S + "resources:\n  devices:\n    - {host_path: /dev/fuse, container_path: /dev/fuse, mode: @@rx}\n")
case("bind_mount_missing_container", "bind_mounts[1].container_path", "required field is missing",
 E + S + "bind_mounts:\n  - host_path: /a\n    container_path: /a\n  - @@host_path: /b\n")
case("bind_mount_relative_host", "bind_mounts[0].host_path", 'expected an absolute path (starting with /), got "data"',
 E + S + "bind_mounts:\n  - host_path: @@data\n    container_path: /data\n")
case("bind_mount_dup_container", "bind_mounts[1].container_path", 'container_path "/data" is already used by bind_mounts[0]',
 E + S + "bind_mounts:\n  - {host_path: /a, container_path: /data}\n  - {host_path: /b, container_path: @@/data}\n")
case("bind_mount_read_only_yes", "bind_mounts[0].read_only", 'expected true or false, got "yes" (YAML 1.2 reads yes/no/on/off as strings)',
 E + S + "bind_mounts:\n  - host_path: /a\n    container_path: /b\n    read_only: @@yes\n")
case("bind_mount_propagation", "bind_mounts[0].propagation", 'did you mean `rshared`?',
 E + S + "bind_mounts:\n  - host_path: /a\n    container_path: /b\n    propagation: @@rshard\n")
case("bind_mounts_not_list", "bind_mounts", "expected a list of bind mounts, got a mapping",
 E + S + "bind_mounts:\n  @@host_path: /a\n")
case("s3_secret_key_literal", "checkpoint_storage.secret_key", "credentials are not accepted in the experiment config",
 E + S + "checkpoint_storage:\n  type: s3\n  bucket: my-bucket\n  access_key: AKIAIOSFODNN7EXAMPLE\n  @@secret_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n".replace("access_key: AKIAIOSFODNN7EXAMPLE\n  ", ""))
case("s3_access_key_literal", "checkpoint_storage.access_key", "reference it with `credentials_secret: s3-creds`",
 E + S + "checkpoint_storage:\n  type: s3\n  bucket: my-bucket\n  @@access_key: AKIAIOSFODNN7EXAMPLEKEY\n  secret_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
case("s3_missing_bucket", "checkpoint_storage.bucket", "required field is missing",
 E + S + "checkpoint_storage:\n  @@type: s3\n  credentials_secret: creds\n")
case("s3_bad_bucket", "checkpoint_storage.bucket", 'expected an S3 bucket name (3-63 characters',
 E + S + "checkpoint_storage:\n  type: s3\n  bucket: @@My_Bucket\n")
case("s3_endpoint_scheme", "checkpoint_storage.endpoint_url", 'expected an http:// or https:// URL, got "minio:9000"',
 E + S + "checkpoint_storage:\n  type: s3\n  bucket: ckpts\n  endpoint_url: @@minio:9000\n")
case("s3_secret_name", "checkpoint_storage.credentials_secret", "expected the name of a Kubernetes Secret",
 E + S + "checkpoint_storage:\n  type: s3\n  bucket: ckpts\n  credentials_secret: @@S3_Creds\n")
case("storage_gcs", "checkpoint_storage.type", "gcs storage is not supported by kdet",
 E + S + "checkpoint_storage:\n  type: @@gcs\n  bucket: b\n")
case("storage_type_typo", "checkpoint_storage.type", "did you mean `shared_fs`?",
 E + S + "checkpoint_storage:\n  type: @@shared-fs\n  host_path: /x\n")
case("shared_fs_missing_host", "checkpoint_storage.host_path", "required field is missing",
 E + S + "checkpoint_storage:\n  @@type: shared_fs\n  storage_path: x\n")
case("shared_fs_storage_outside", "checkpoint_storage.storage_path", "must be a relative path or a directory under host_path (/mnt/ckpt)",
 E + S + "checkpoint_storage:\n  type: shared_fs\n  host_path: /mnt/ckpt\n  storage_path: @@/mnt/other\n")
case("save_trial_best_neg", "checkpoint_storage.save_trial_best", "expected a non-negative integer, got -1",
 E + S + "checkpoint_storage:\n  type: shared_fs\n  host_path: /mnt/ckpt\n  save_trial_best: @@-1\n")
case("checkpoint_policy_bad", "checkpoint_policy", 'expected one of best, all, none, got "latest"',
 E + S + "checkpoint_policy: @@latest\n")
case("max_restarts_neg", "max_restarts", "expected a non-negative integer, got -3",
 E + S + "max_restarts: @@-3\n")
case("scheduling_unit_zero", "scheduling_unit", "expected a positive integer, got 0",
 E + S + "scheduling_unit: @@0\n")
case("records_per_epoch_str", "records_per_epoch", 'expected a non-negative integer, got "60k"',
 E + S + "records_per_epoch: @@60k\n")
case("debug_not_bool", "debug", "expected true or false, got 1",
 E + S + "debug: @@1\n")
case("labels_not_strings", "labels[1]", "expected a string, got a mapping",
 E + S + "labels:\n  - ok\n  - @@{a: b}\n")
case("name_not_string", "name", "expected a string, got a list",
 E + S + "name: @@[a, b]\n")
case("entrypoint_number", "entrypoint", "expected a string or a list of strings, got 42",
 "entrypoint: @@42\n" + S)
case("entrypoint_empty_list", "entrypoint", "must not be empty",
 "entrypoint: @@[]\n" + S)
case("entrypoint_list_non_string", "entrypoint[1]", "expected a string, got 3",
 "entrypoint: [python3, @@3]\n" + S)
case("launcher_unknown", "entrypoint", "launcher `kdet.launch.torch_distribute` is not supported",
 "entrypoint: @@python3 -m kdet.launch.torch_distribute --trial model_def:Trial\n" + S)
case("launcher_options_without_dashes", "entrypoint", "launcher option `--nproc_per_node` must be followed by `--`",
 "entrypoint: @@python3 -m kdet.launch.torch_distributed --nproc_per_node 2 train.py\n" + S)
case("launcher_trial_bad", "entrypoint[4]", '--trial needs MODULE:CLASS, e.g. model_def:MNistTrial, got "model_def"',
 "entrypoint: [python3, -m, determined.launch.deepspeed, --trial, @@model_def]\n" + S)
case("launcher_nothing", "entrypoint", "the launcher needs what to launch",
 "entrypoint: @@python3 -m kdet.launch.horovod --\n" + S)
case("entrypoint_unbalanced_quote", "entrypoint", "unbalanced quotes",
 "entrypoint: @@\"python3 train.py --name 'x\"\n" + S)
case("pbt_missing_population", "searcher.population_size", "required field is missing",
 E + "searcher:\n  @@name: pbt\n  metric: loss\n  num_rounds: 2\n  length_per_round: {batches: 10}\n  replace_function: {truncate_fraction: 0.2}\n  explore_function: {resample_probability: 0.2, perturb_factor: 0.2}\n")
case("pbt_truncate_fraction", "searcher.replace_function.truncate_fraction", "expected a number from 0 to 0.5, got 0.8",
 E + "searcher:\n  name: pbt\n  metric: loss\n  population_size: 4\n  num_rounds: 2\n  length_per_round: {batches: 10}\n  replace_function: {truncate_fraction: @@0.8}\n  explore_function: {resample_probability: 0.2, perturb_factor: 0.2}\n")
case("pbt_max_length", "searcher.max_length", "unknown field of the pbt searcher",
 E + "searcher:\n  name: pbt\n  metric: loss\n  population_size: 4\n  @@max_length: {batches: 10}\n")
case("pbt_missing_explore", "searcher.explore_function", "required field is missing",
 E + "searcher:\n  @@name: pbt\n  metric: loss\n  population_size: 4\n  num_rounds: 2\n  length_per_round: {batches: 10}\n  replace_function: {truncate_fraction: 0.2}\n")
case("bayes_startup_gt_trials", "searcher.num_startup_trials", "must not exceed max_trials (5), got 10",
 E + "searcher:\n  name: bayesian\n  metric: loss\n  max_trials: 5\n  max_length: {batches: 10}\n  num_startup_trials: @@10\n")
case("es_missing_patience", "searcher.early_stopping[0].patience", "required field is missing",
 E + "searcher:\n  name: random\n  metric: loss\n  max_trials: 2\n  max_length: {batches: 10}\n  early_stopping:\n    - @@type: patience\n")
case("es_bad_type", "searcher.early_stopping[1].type", "did you mean `median`?",
 E + "searcher:\n  name: random\n  metric: loss\n  max_trials: 2\n  max_length: {batches: 10}\n  early_stopping:\n    - {type: threshold, threshold: 0.9}\n    - type: @@medain\n")
case("es_min_delta_negative", "searcher.early_stopping[0].min_delta", "expected a number >= 0, got -0.1",
 E + "searcher:\n  name: single\n  metric: loss\n  max_length: {batches: 10}\n  early_stopping:\n    - {type: patience, patience: 2, min_delta: @@-0.1}\n")
case("es_needs_metric", "searcher.metric", "early_stopping rules compare this metric",
 E + "searcher:\n  @@name: single\n  max_length: {batches: 10}\n  early_stopping:\n    - {type: median}\n")
case("es_unknown_field", "searcher.early_stopping[0].grace", "did you mean `grace_period`?",
 E + "searcher:\n  name: single\n  metric: loss\n  max_length: {batches: 10}\n  early_stopping:\n    - {type: median, @@grace: 2}\n")
case("optimizations_typo", "optimizations.aggregation_frequence", "did you mean `aggregation_frequency`?",
 E + S + "optimizations:\n  @@aggregation_frequence: 2\n")
case("mixed_precision_bad", "optimizations.mixed_precision", 'expected one of O0, O1, O2, O3, got "O4"',
 E + S + "optimizations:\n  mixed_precision: @@O4\n")
case("seed_negative", "reproducibility.experiment_seed", "expected an integer from 0 to 2147483647, got -1",
 E + S + "reproducibility:\n  experiment_seed: @@-1\n")
case("env_var_no_equals", "environment.environment_variables[1]", 'expected NAME=value, got "NOEQUALS"',
 E + S + "environment:\n  environment_variables:\n    - A=1\n    - @@NOEQUALS\n")
case("env_image_number", "environment.image", "expected an image name or {cpu: IMAGE, cuda: IMAGE}, got 3",
 E + S + "environment:\n  image: @@3\n")
case("env_image_flavor", "environment.image.gpus", "did you mean `gpu`?",
 E + S + "environment:\n  image:\n    @@gpus: img\n")
case("pod_spec_name", "environment.pod_spec.metadata.name", "the pod name is set by kdet",
 E + S + "environment:\n  pod_spec:\n    metadata:\n      @@name: mine\n")
case("profiling_end_before_begin", "profiling.end_after_batch", "must not be before begin_on_batch (10), got 5",
 E + S + "profiling:\n  enabled: true\n  begin_on_batch: 10\n  end_after_batch: @@5\n")
case("unsupported_tensorboard_storage", "tensorboard_storage", "TensorBoard reads checkpoint_storage",
 E + S + "@@tensorboard_storage: {type: shared_fs}\n")
case("root_is_list", "-", "the experiment config must be a mapping of fields, got a list",
 "@@- entrypoint: x\n")
case("yaml_syntax_error", "-", "mapping values are not allowed",
 E + "searcher:\n  name: single\n  metric: loss\n  max_length: {batches: 10}\n  nested: x@@: y\n")
case("yaml_duplicate_key", "-", 'duplicate key "metric" (first at 5:3)',
 E + "searcher:\n  name: single\n  metric: loss\n  @@metric: acc\n  max_length: {batches: 10}\n")
case("yaml_inf", "-", "(infinity or NaN) cannot be represented in JSON",
 E + S + "hyperparameters:\n  lr: @@.inf\n")
case("template_error_in_template", "checkpoint_storage.type", "gcs storage is not supported",
 E + S, template=("bad_storage.yaml", "# A template whose storage kdet does not support.\ncheckpoint_storage:\n  type: @@gcs\n  bucket: b\n"))
case("template_unknown_field", "resources.slots_per_tria", "did you mean `slots_per_trial`?",
 E + S, template=("bad_resources.yaml", "resources:\n  @@slots_per_tria: 2\n"))
case("template_config_overrides_bad", "resources.slots_per_trial", "expected an integer from 0 to 1048576, got \"two\"",
 E + S + "resources:\n  slots_per_trial: @@two\n", template=("base.yaml", None))

os.makedirs(B, exist_ok=True)
for f in os.listdir(B):
    os.remove(os.path.join(B, f))
T = "/work/main/tests/data/config/templates"
def place(text, nhead):
    assert text.count("@@") == 1
    idx = text.index("@@")
    before = text[:idx]
    line = before.count("\n") + 1 + nhead
    col = idx - (before.rfind("\n") + 1) + 1
    return line, col, text.replace("@@", "")
for name, path, msg, body, tmpl in cases:
    if tmpl and tmpl[1] is not None:
        line, col, ttext = place(tmpl[1], 0)
        with open(os.path.join(T, tmpl[0]), "w") as fh:
            fh.write(ttext)
        out = "# expect: %s at templates/%s:%d:%d: %s\n# template: %s\n" % (path, tmpl[0], line, col, msg, tmpl[0])
        text = body
    else:
        line, col, text = place(body, 2 if tmpl else 1)
        out = "# expect: %s at %d:%d: %s\n" % (path, line, col, msg)
        if tmpl:
            out += "# template: %s\n" % tmpl[0]
    with open(os.path.join(B, name + ".yaml"), "w") as fh:
        fh.write(out + text)
print(len(cases), "bad configs")
