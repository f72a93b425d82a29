#!/usr/bin/env bash
# The fair_share scheduler: two experiments of 1-GPU trials with weights 3
# and 1 share a node of 4 GPUs 3 to 1 while both have trials waiting.
# A 4-GPU experiment holds the node until both have queued their trials,
# so that the split starts from an empty node.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
start_ctrl --scheduler fair_share

experiment hold '  entrypoint: sh -c "sleep 600"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 4}'
check "the 4-GPU trial holds the node" wait_for 30 n_is 1 running_pods kdet.io/experiment=hold

experiment heavy '  entrypoint: sh -c "sleep 5; exit 0"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 6, count: 6}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}, max_concurrent_trials: 6}
  resources: {slots_per_trial: 1, weight: 3}'
experiment light '  entrypoint: sh -c "sleep 5; exit 0"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 4, count: 4}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}, max_concurrent_trials: 4}
  resources: {slots_per_trial: 1, weight: 1}'
check "6 heavy trials queued" wait_for 30 n_is 6 count_trials kdet.io/experiment=heavy
check "4 light trials queued" wait_for 30 n_is 4 count_trials kdet.io/experiment=light
why1=$(field trial light-1 '{.status.conditions[?(@.type=="Scheduled")].message}')
why2=$(field trial light-2 '{.status.conditions[?(@.type=="Scheduled")].message}')
echo "# while the node is held: light-1: $why1; light-2: $why2"
check "the head of light's queue waits for a GPU" eval 'case "$why1" in "waiting for 1 GPUs"*) true ;; *) false ;; esac'
check "the trial behind it waits for its fair share" eval 'case "$why2" in *"fair share"*) true ;; *) false ;; esac'

log "the holder ends: 4 GPUs free at once"
kubectl patch exp hold --type=merge -p '{"spec":{"canceled":true}}' >/dev/null
# Sample while both experiments still have trials waiting.
split_31=0
over=0
samples=
for _ in $(seq 1 400); do
    h=$(running_pods kdet.io/experiment=heavy)
    l=$(running_pods kdet.io/experiment=light)
    hq=$(kubectl get trials -l kdet.io/experiment=heavy -o jsonpath='{range .items[*]}{.status.state}{"\n"}{end}' 2>/dev/null | grep -c QUEUED)
    lq=$(kubectl get trials -l kdet.io/experiment=light -o jsonpath='{range .items[*]}{.status.state}{"\n"}{end}' 2>/dev/null | grep -c QUEUED)
    samples="$samples $h:$l"
    [ "$h" = 3 ] && [ "$l" = 1 ] && split_31=$((split_31 + 1))
    # with both queues non-empty, light never holds more than its share of 1
    [ "$hq" -gt 0 ] && [ "$lq" -gt 0 ] && [ "$l" -gt 1 ] && over=$((over + 1))
    [ "$hq" = 0 ] && [ "$lq" = 0 ] && break
    sleep 0.2
done
echo "# running heavy:light samples:$(echo "$samples" | tr ' ' '\n' | uniq -c | awk '{printf " %sx%s", $1, $2}')"
check "heavy (weight 3) and light (weight 1) ran 3:1 on the 4 GPUs" test "$split_31" -gt 0
check "light never held more than 1 GPU while both waited ($over samples)" test "$over" = 0
check "heavy COMPLETED" wait_for 60 exp_state_is heavy COMPLETED
check "light COMPLETED" wait_for 60 exp_state_is light COMPLETED
check "hold CANCELED" wait_for 30 exp_state_is hold CANCELED
check "no pods left" wait_for 20 no_pods
