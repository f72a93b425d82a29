#!/usr/bin/env bash
# Pods that kdet does not schedule hold room that trials cannot have. On a
# node of 2 CPUs without GPUs, while a pod of another workload (namespace
# other) requests 1500m, a default experiment (1 CPU slot) stays QUEUED, no
# pod is made for it, and its trial says that other pods hold the room;
# once that pod is deleted, the experiment runs to COMPLETED.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 0 --node-cpus 2 || exit 1
start_ctrl

check "the node has 2 CPUs" test "$(field node kdet-e2e '{.status.allocatable.cpu}')" = 2
check "the node has no GPUs" test "$(field node kdet-e2e '{.status.allocatable.nvidia\.com/gpu}')" = 0

kubectl create namespace other >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: hog, namespace: other}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: busybox
      command: [sh, -c, "while :; do sleep 1; done # $T"]
      resources: {requests: {cpu: 1500m}}
YAML
hog_running() { [ "$(kubectl -n other get pod hog -o 'jsonpath={.status.phase}' 2>/dev/null)" = Running ]; }
check "the other pod runs on the node" wait_for 30 hog_running

experiment plain '  entrypoint: sh -c "exit 0"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}'
waiting() { [ "$(field trial plain-1 '{.status.conditions[?(@.type=="Scheduled")].reason}')" = Waiting ]; }
check "the trial waits (Scheduled=False, Waiting)" wait_for 30 waiting
why=$(field trial plain-1 '{.status.conditions[?(@.type=="Scheduled")].message}')
echo "# plain-1: $why"
check "its reason names the other pods" grep -qF \
    "waiting for 1 CPU slots on one node of resource pool default (0 free in the pool, 2 held by other pods)" <<<"$why"
sleep 3 # several scheduler passes
check "it stays QUEUED" trial_state_is plain-1 QUEUED
check "no pod for it" no_pods kdet.io/experiment=plain

kubectl -n other delete pod hog --wait=true >/dev/null 2>&1
check "the other pod is gone" test -z "$(kubectl -n other get pods -o name 2>/dev/null)"
check "the experiment COMPLETED" wait_for 60 exp_state_is plain COMPLETED
check "its trial COMPLETED" trial_state_is plain-1 COMPLETED
check "admitted on a CPU slot" grep -q 'msg="trial admitted" trial=default/plain-1 slots=1 slot_type=cpu ' "$T/ctrl.log"
kubectl delete exp plain --wait=false >/dev/null 2>&1
check "no pods left" wait_for 30 no_pods
