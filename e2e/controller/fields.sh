#!/usr/bin/env bash
# Fields of Determined's config that shape the trial pod, end to end on kdet-local: a bind
# mount the worker reads through its container_path, the named container port, the pull
# policy and capabilities on the pod, workspace and project labels on the Experiment, its
# Trial and pod; a host device refused without --allow-host-devices (ERROR naming the field);
# is_single_node keeping a trial that needs two nodes QUEUED with the reason.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
start_ctrl

mkdir -p "$T/host-data" && echo world >"$T/host-data/hello"
experiment fields "  workspace: Team A
  project: Vision (2024)
  entrypoint: [sh, -c, 'test \"\$(cat $T/mnt/data/hello)\" = world && while [ ! -e $T/go ]; do sleep 0.2; done']
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 1}
  bind_mounts:
    - {host_path: $T/host-data, container_path: $T/mnt/data/, read_only: true}
  environment:
    force_pull_image: true
    add_capabilities: [cap_sys_ptrace]
    drop_capabilities: [NET_RAW]
    ports: {tensorboard: 6006}"
log "experiment with a bind mount created"
check "its pod runs" wait_for 30 n_is 1 running_pods kdet.io/experiment=fields
pod=fields-1-0
check "the pod mounts the host directory at the cleaned container_path, read-only" test \
    "$(field pod $pod "{.spec.containers[0].volumeMounts[?(@.name==\"kdet-bind-0\")].mountPath} {.spec.containers[0].volumeMounts[?(@.name==\"kdet-bind-0\")].readOnly} {.spec.volumes[?(@.name==\"kdet-bind-0\")].hostPath.path}")" \
    = "$T/mnt/data true $T/host-data"
check "the named port is a container port" test \
    "$(field pod $pod '{.spec.containers[0].ports[0].name}={.spec.containers[0].ports[0].containerPort}/{.spec.containers[0].ports[0].protocol}')" \
    = "tensorboard=6006/TCP"
check "force_pull_image: imagePullPolicy Always" test "$(field pod $pod '{.spec.containers[0].imagePullPolicy}')" = Always
check "capabilities by their Kubernetes names" test \
    "$(field pod $pod '{.spec.containers[0].securityContext.capabilities.add[0]} {.spec.containers[0].securityContext.capabilities.drop[0]}')" \
    = "SYS_PTRACE NET_RAW"
check "the pod is labelled with workspace and project" test \
    "$(field pod $pod '{.metadata.labels.kdet\.io/workspace} {.metadata.labels.kdet\.io/project}')" = "team-a vision-2024"
check "so is the trial" test "$(kubectl get trial -l kdet.io/workspace=team-a,kdet.io/project=vision-2024 -o name)" = trial.kdet.io/fields-1
check "and the Experiment (applied with kubectl: the controller labels it)" wait_for 10 test \
    "$(kubectl get exp -l kdet.io/workspace=team-a -o name 2>/dev/null)" = experiment.kdet.io/fields
touch "$T/go"
check "the worker read the file through the mount: COMPLETED" wait_for 30 exp_state_is fields COMPLETED

experiment device "  entrypoint: sh -c 'exit 0'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources:
    devices: [{host_path: /dev/null, container_path: /dev/kdet-null}]"
check "a host device without --allow-host-devices: ERROR" wait_for 20 exp_state_is device ERROR
msg=$(field exp device '{.status.conditions[?(@.type=="Valid")].message}')
echo "# condition: $msg"
check "the condition names the field and the flag" eval \
    'case "$msg" in "resources.devices[0]: host device /dev/null:"*--allow-host-devices*) true ;; *) false ;; esac'
check "no trial for it" test "$(count_trials kdet.io/experiment=device)" = 0

experiment onenode "  entrypoint: sh -c 'exit 0'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 8, is_single_node: true}"
check "an is_single_node trial larger than the node: QUEUED" wait_for 20 eval \
    'field trial onenode-1 "{.status.message}" | grep -q "resources.is_single_node keeps a trial on one node"'
check "the Trial carries spec.resources.singleNode" test "$(field trial onenode-1 '{.spec.resources.singleNode}')" = true
check "its Scheduled condition says Unschedulable" test \
    "$(field trial onenode-1 '{.status.conditions[?(@.type=="Scheduled")].reason}')" = Unschedulable
check "no pod for it" no_pods kdet.io/experiment=onenode
kubectl delete exp fields device onenode --wait=true --timeout=30s >/dev/null 2>&1
check "no pods left" wait_for 10 no_pods kdet.io/trial
