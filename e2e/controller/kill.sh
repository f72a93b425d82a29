#!/usr/bin/env bash
# kill -9 of the controller at random points, in a bounded loop, while a
# random search runs: afterwards no duplicate trials, no orphan pods, and
# the searcher's decisions (request ids, hyperparameters, seeds) are exactly
# those of an undisturbed run of the same experiment.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
KILLS=${KD_CTRL_KILLS:-12}
start_local 4 || exit 1

spec='  entrypoint: sh -c "sleep 0.3; exit 0"
  hyperparameters:
    lr: {type: log, base: 10, minval: -4, maxval: -1}
    width: {type: int, minval: 8, maxval: 512}
  searcher: {name: random, metric: loss, max_trials: 10, max_concurrent_trials: 3, max_length: {batches: 10}}
  reproducibility: {experiment_seed: 4242}
  resources: {slots_per_trial: 1}'

decisions() {
    kubectl get trial -l "kdet.io/experiment=$1" -o \
        'jsonpath={range .items[*]}{.spec.requestId} {.spec.seed} {.spec.hparams}{"\n"}{end}' | sort
}

start_ctrl
experiment calm "$spec"
check "undisturbed run COMPLETED" wait_for 90 exp_state_is calm COMPLETED
stop_ctrl
decisions calm >"$T/calm"

experiment storm "$spec"
log "killing the controller $KILLS times"
for i in $(seq 1 "$KILLS"); do
    start_ctrl
    sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
    kill -9 "$CTRL_PID" 2>/dev/null
    wait "$CTRL_PID" 2>/dev/null
    CTRL_PID=
    # orphans: every trial pod must have an existing Trial owner
    for p in $(kubectl get pods -l kdet.io/experiment=storm -o 'jsonpath={range .items[*]}{.metadata.labels.kdet\.io/trial}{"\n"}{end}'); do
        kubectl get trial "$p" >/dev/null 2>&1 || echo "orphan pod of $p" >>"$T/orphans"
    done
done
start_ctrl
check "disturbed run COMPLETED" wait_for 120 exp_state_is storm COMPLETED
decisions storm >"$T/storm"
check "10 trials, no duplicates" test "$(wc -l <"$T/storm")" = 10 -a \
    "$(cut -d' ' -f1 "$T/storm" | sort -u | wc -l)" = 10
check "identical searcher decisions" diff "$T/calm" "$T/storm"
check "no orphan pods during the storm" test ! -s "$T/orphans"
check "no pods left" wait_for 20 no_pods
check "trial names are <experiment>-1..10" test "$(kubectl get trial -l kdet.io/experiment=storm -o name |
    sed 's|.*/storm-||' | sort -n | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 "
echo "# restarts of the controller: $(grep -c 'msg=running' "$T/ctrl.log")"
