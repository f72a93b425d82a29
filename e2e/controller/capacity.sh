#!/usr/bin/env bash
# 8 trials x 2 slots on a node advertising 4 GPUs: the controller never has
# pods for more than 2 trials at once, and all 8 complete.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
start_ctrl

experiment cap '  entrypoint: sh -c "sleep 1; exit 0"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 8, count: 8}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 2}'
log "8 x 2-slot trials on 4 GPUs"
max=0
samples=0
for i in $(seq 1 300); do
    n=$(live_pods kdet.io/experiment=cap)
    [ "${n:-0}" -gt "$max" ] && max=$n
    samples=$((samples + 1))
    [ -z "${why:-}" ] && why=$(field trial cap-8 '{.status.conditions[?(@.type=="Scheduled")].message}')
    exp_state_is cap COMPLETED && break
    sleep 0.1
done
echo "# samples=$samples max_live_pods=$max"
check "experiment COMPLETED" exp_state_is cap COMPLETED
check "never more than 2 trials' pods at once (max $max)" test "$max" -le 2
check "2 trials did run at once" test "$max" -eq 2
check "8 trials COMPLETED" test "$(field exp cap '{.status.trials.completed}')" = 8
echo "# cap-8 while queued: ${why:-}"
check "a queued trial says why it waits" eval 'case "${why:-}" in *"waiting for 2 GPUs"*|*"queued behind"*) true ;; *) false ;; esac'
check "no pods left" wait_for 10 no_pods kdet.io/experiment=cap

# A trial that can never fit stays QUEUED with a clear reason, and does not block others.
experiment huge '  entrypoint: sh -c "exit 0"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 6}'
experiment small '  entrypoint: sh -c "exit 0"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 1}'
unsched() { [ "$(field trial huge-1 '{.status.conditions[?(@.type=="Scheduled")].reason}')" = Unschedulable ]; }
check "the 6-GPU trial is Unschedulable" wait_for 30 unsched
why=$(field trial huge-1 '{.status.conditions[?(@.type=="Scheduled")].message}')
echo "# huge-1: $why"
check "its reason names the rule" eval 'case "$why" in *"slots_per_trial=6 exceeds the largest node"*"(4 GPUs)"*) true ;; *) false ;; esac'
check "it stays QUEUED" trial_state_is huge-1 QUEUED
check "a later 1-GPU experiment still completes" wait_for 30 exp_state_is small COMPLETED
