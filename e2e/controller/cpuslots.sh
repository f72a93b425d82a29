#!/usr/bin/env bash
# A node without GPUs offers CPU slots (--slot-type auto, 1 CPU a slot): a
# default experiment (slots_per_trial 1) and one of 2 slots run to
# COMPLETED, their pods request and are limited to 1 and 2 CPUs with no
# nvidia.com/gpu, and kdet-launch starts one worker per slot. A trial that
# asks for more CPU slots than the node has stays QUEUED and says so.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 0 || exit 1
start_ctrl

cpus=$(field node kdet-e2e '{.status.allocatable.cpu}')
log "node kdet-e2e: ${cpus:-?} CPUs, $(field node kdet-e2e '{.status.allocatable.nvidia\.com/gpu}') GPUs"
check "the node has no GPUs" test "$(field node kdet-e2e '{.status.allocatable.nvidia\.com/gpu}')" = 0
check "the node has at least 2 CPUs" test "${cpus:-0}" -ge 2
mkdir -p "$T/ranks"

# cpu_exp NAME [RESOURCES]: each worker records its RANK, then waits (at most 60 s) for
# $T/go.NAME so that the test can read the pod while it runs.
cpu_exp() {
    experiment "$1" "  entrypoint: sh -c 'touch $T/ranks/$1.\$RANK; i=0; while [ ! -e $T/go.$1 ] && [ \$i -lt 300 ]; do sleep 0.2; i=\$((i+1)); done'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}${2:+
  resources: $2}"
}
pod_json() { kubectl get pod "$1" -o json 2>/dev/null; }
pod_has() { pod_json "$1" | python3 -c "import json,sys; p=json.load(sys.stdin); c=p['spec']['containers'][0]; sys.exit(0 if eval(sys.argv[1]) else 1)" "$2"; }

# run_cpu NAME SLOTS [RESOURCES]: the experiment runs on SLOTS CPU slots to COMPLETED.
run_cpu() {
    local e=$1 n=$2
    cpu_exp "$e" "${3:-}"
    check "$e: its pod is created" wait_for 60 pod_json "$e-1-0"
    check "$e: the pod requests $n CPU" pod_has "$e-1-0" "c['resources']['requests']['cpu'] == '$n'"
    check "$e: and is limited to $n CPU" pod_has "$e-1-0" "c['resources']['limits']['cpu'] == '$n'"
    check "$e: no nvidia.com/gpu" pod_has "$e-1-0" "'nvidia.com/gpu' not in json.dumps(c.get('resources', {}))"
    check "$e: kdet-launch --nproc $n" pod_has "$e-1-0" "c['command'][1:3] == ['--nproc', '$n']"
    check "$e: annotated with its CPU slots" pod_has "$e-1-0" "p['metadata']['annotations']['kdet.io/cpu-slots'] == '$n'"
    check "$e: $n workers started" wait_for 60 n_is "$n" eval "ls $T/ranks | grep -c '^$e\\.'"
    touch "$T/go.$e"
    check "$e: experiment COMPLETED" wait_for 60 exp_state_is "$e" COMPLETED
    check "$e: trial COMPLETED" trial_state_is "$e-1" COMPLETED
    check "$e: admitted on CPU slots" grep -q "msg=\"trial admitted\" trial=default/$e-1 slots=$n slot_type=cpu " "$T/ctrl.log"
}

run_cpu plain 1
run_cpu two 2 '{slots_per_trial: 2}'

# More CPU slots than the node has: QUEUED, and the reason names the slot type.
big=$((cpus + 1))
cpu_exp big "{slots_per_trial: $big}"
unsched() { [ "$(field trial big-1 '{.status.conditions[?(@.type=="Scheduled")].reason}')" = Unschedulable ]; }
check "the $big-slot trial is Unschedulable" wait_for 30 unsched
why=$(field trial big-1 '{.status.conditions[?(@.type=="Scheduled")].message}')
echo "# big-1: $why"
check "its reason names the CPU slots" grep -qF \
    "slots_per_trial=$big needs $big CPU slots; resource pool default has $cpus (CPU slots of 1 CPU)" <<<"$why"
check "it stays QUEUED" trial_state_is big-1 QUEUED
check "no pod for it" no_pods kdet.io/experiment=big
kubectl delete exp big --wait=false >/dev/null 2>&1
check "no pods left" wait_for 30 no_pods

# What det shows of it: the pool's slot type and slots (det agent list, det slot list), and a
# warning at once when an experiment asks for more CPU slots than any node could give. No
# controller API here: det says it assumes the controller's defaults.
DET=$KD_BUILD/bin/det
export KDET_DATA_DIR=$T/no-deploy
unset KDET_API_URL KDET_API_TOKEN
"$DET" agent list >"$T/agents.out" 2>&1
sed 's/^/#   /' "$T/agents.out"
check "det agent list: the node, pool default, cpu slots, $cpus of them" \
    grep -qE "^kdet-e2e +default +cpu +$cpus +0 +0 +$cpus +true" "$T/agents.out"
check "det agent list says what it assumed" grep -q "assuming kdet-controller's defaults" "$T/agents.out"
"$DET" slot list -o json >"$T/slots.json" 2>&1
check "det slot list: $cpus cpu slots" python3 -c "
import json; o = json.load(open('$T/slots.json'))
assert len(o['slots']) == $cpus and all(s['type'] == 'cpu' and s['resource_pool'] == 'default' for s in o['slots']), o
assert o['settings']['assumed'] is True, o"
mkdir -p "$T/ctx"
echo 'print("hi")' >"$T/ctx/train.py"
cat >"$T/big.yaml" <<Y
name: toobig
entrypoint: python3 train.py
hyperparameters: {x: 1}
searcher: {name: single, metric: loss, max_length: {batches: 1}}
resources: {slots_per_trial: $big}
Y
"$DET" experiment create "$T/big.yaml" "$T/ctx" >"$T/create.out" 2>"$T/create.err"
rc=$?
sed 's/^/#   /' "$T/create.err"
check "det experiment create still creates it" test $rc = 0
check "and warns at once that no node can ever run it" grep -qF \
    "slots_per_trial=$big needs $big CPU slots; resource pool default has $cpus" "$T/create.err"
cat >"$T/fits.yaml" <<Y
name: fits
entrypoint: python3 train.py
hyperparameters: {x: 1}
searcher: {name: single, metric: loss, max_length: {batches: 1}}
resources: {slots_per_trial: 1}
Y
"$DET" experiment create --paused "$T/fits.yaml" "$T/ctx" >/dev/null 2>"$T/fits.err"
check "no warning for a trial that fits" test "$(grep -c 'no node can ever' "$T/fits.err")" = 0
kubectl delete exp --all --wait=false >/dev/null 2>&1
check "no pods left at the end" wait_for 30 no_pods
