#!/usr/bin/env bash
# Two controllers with leader election: only the leader acts; when it is
# killed, the other takes over once the Lease expires and finishes the
# experiment with no duplicate trials.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: kdet}
YAML
ctrl() {
    "$KD_BUILD/bin/kdet-controller" --kubeconfig "$T/kubeconfig" --workers 2 --resync 5 \
        --leader-elect on --lease-namespace kdet >>"$T/ctrl-$1.log" 2>&1 &
    PID=$!
}
ctrl a
A=$PID
check "replica a leads" wait_for 20 grep -q 'msg=leading' "$T/ctrl-a.log"
ctrl b
B=$PID
sleep 1
experiment le '  entrypoint: sh -c "sleep 2; exit 0"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 6, count: 6}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}, max_concurrent_trials: 2}
  resources: {slots_per_trial: 1}'
check "the leader creates trials" wait_for 20 grep -q 'msg="trial created"' "$T/ctrl-a.log"
check "the follower does nothing" test "$(grep -c 'msg="trial created"\|msg="trial pods created"' "$T/ctrl-b.log")" = 0
check "the Lease names replica a" eval 'kubectl get lease -n kdet kdet-controller -o jsonpath="{.spec.holderIdentity}" | grep -q -- "-$A\$"'
kill -9 "$A"
wait "$A" 2>/dev/null
log "leader killed"
check "replica b takes over" wait_for 40 grep -q 'msg=leading' "$T/ctrl-b.log"
check "experiment COMPLETED under the new leader" wait_for 60 exp_state_is le COMPLETED
check "6 trials, no duplicates" test "$(kubectl get trial -l kdet.io/experiment=le -o name | grep -c .)" = 6
check "no pods left" wait_for 10 no_pods
kill -TERM "$B"
wait "$B"
st=$?
check "replica b stopped cleanly (status $st)" test "$st" = 0
check "the Lease is released on a clean stop" test -z "$(kubectl get lease -n kdet kdet-controller -o jsonpath='{.spec.holderIdentity}')"
cat "$T"/ctrl-*.log >>"$T/ctrl.log"
