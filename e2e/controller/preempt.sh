#!/usr/bin/env bash
# A higher-priority experiment that does not fit preempts lower-priority
# trials (their pods are deleted, they queue again), runs, and the preempted
# trials then resume.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
start_ctrl --preemption on

experiment low '  entrypoint: sh -c "sleep 600"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 2, count: 2}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 2, priority: 80}'
check "low-priority trials running" wait_for 30 n_is 2 running_pods kdet.io/experiment=low
check "low pods get priority class kdet-low" test "$(field pod low-1-0 '{.spec.priorityClassName}')" = kdet-low

experiment high '  entrypoint: sh -c "sleep 2; exit 0"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 4, priority: 10}'
log "high-priority experiment created"
check "high-priority experiment COMPLETED" wait_for 60 exp_state_is high COMPLETED
check "low trials were preempted" test "$(grep -c 'msg="trial preempted"' "$T/ctrl.log")" -ge 2
check "Preempted condition on a low trial" test \
    "$(field trial low-1 '{.status.conditions[?(@.type=="Preempted")].reason}')" = Preempted
check "low trials resume" wait_for 30 n_is 2 running_pods kdet.io/experiment=low
check "preemption is not a restart" test "$(field trial low-1 '{.status.restarts}')" = ""
kubectl patch exp low --type=merge -p '{"spec":{"canceled":true}}' >/dev/null
check "low experiment CANCELED" wait_for 40 exp_state_is low CANCELED
check "no pods left" wait_for 10 no_pods
