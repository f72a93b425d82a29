#!/usr/bin/env bash
# kdet-local (the API server and the node) crashes and comes back on the same
# port while trials run: the controller's watches reconnect (relisting when
# their resourceVersion is gone) and the experiment still completes.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
PORT=$(cat "$T/port")
start_ctrl
experiment ar '  entrypoint: sh -c "sleep 2; exit 0"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 4, count: 4}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 2}'
check "trials running" wait_for 20 n_is 2 running_pods kdet.io/experiment=ar
kill -9 "$LOCAL_PID"
wait "$LOCAL_PID" 2>/dev/null
log "kdet-local killed"
sleep 2
PATH=$KD_BUILD/bin:$PATH "$KD_BUILD/bin/kdet-local" --data-dir "$T/data" --port "$PORT" \
    --fake-gpus 4 --node-name kdet-e2e --watch-history 1 >>"$T/local.log" 2>&1 &
LOCAL_PID=$!
check "kdet-local back on port $PORT" wait_for 20 kubectl get nodes kdet-e2e
check "experiment COMPLETED after the outage" wait_for 90 exp_state_is ar COMPLETED
check "4 trials" test "$(kubectl get trial -l kdet.io/experiment=ar -o name | grep -c .)" = 4
check "the watches reconnected" grep -q 'watch failed, reconnecting' "$T/ctrl.log"
echo "# relists after 410: $(grep -c 'watch expired, relisting' "$T/ctrl.log")"
check "no pods left" wait_for 20 no_pods
