#!/usr/bin/env bash
# Pause -> every trial pod gone, trials PAUSED; activate -> pods again with a
# new run id; cancel -> CANCELED and nothing left.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
start_ctrl

experiment life '  entrypoint: sh -c "sleep 617"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 2, count: 2}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 1}'
check "two trial pods running" wait_for 30 n_is 2 running_pods kdet.io/experiment=life
run1=$(field pod life-1-0 '{.metadata.labels.kdet\.io/run-id}')

kubectl patch exp life --type=merge -p '{"spec":{"paused":true}}' >/dev/null
log "paused"
check "experiment PAUSED" wait_for 30 exp_state_is life PAUSED
check "all trial pods gone" wait_for 40 no_pods kdet.io/experiment=life
check "trials PAUSED" wait_for 10 trial_state_is life-1 PAUSED
check "trial spec.paused copied" test "$(field trial life-2 '{.spec.paused}')" = true

kubectl patch exp life --type=merge -p '{"spec":{"paused":false}}' >/dev/null
log "activated"
check "experiment ACTIVE" wait_for 20 exp_state_is life ACTIVE
check "pods running again" wait_for 30 n_is 2 running_pods kdet.io/experiment=life
run2=$(field pod life-1-0 '{.metadata.labels.kdet\.io/run-id}')
check "a new run id for the new attempt ($run1 -> $run2)" test -n "$run2" -a "$run1" != "$run2"
check "no restart counted for a pause" test "$(field trial life-1 '{.status.restarts}')" = ""

kubectl patch exp life --type=merge -p '{"spec":{"canceled":true}}' >/dev/null
log "canceled"
check "experiment CANCELED" wait_for 40 exp_state_is life CANCELED
check "trials CANCELED" test "$(kubectl get trial -l kdet.io/experiment=life \
    -o 'jsonpath={range .items[*]}{.status.state}{"\n"}{end}' | grep -c '^CANCELED$')" = 2
check "no pods left" no_pods kdet.io/experiment=life
check "no worker processes left" test -z "$(trial_procs)"
