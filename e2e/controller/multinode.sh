#!/usr/bin/env bash
# A multi-node trial end to end on two nodes: kdet-local with 2 fake GPUs on
# its own node plus a `kdet-local kubelet` node agent with 2 more. A
# fashion-mnist-c trial with slots_per_trial 4 gets one whole-node pod on
# each node; the chief reports its address to the controller API, the
# other pod reads it back for the same run id (no cluster DNS), the four
# workers rendezvous over libdtrain's TCP transport, train, checkpoint and
# report metrics, and the experiment COMPLETES. A trial of 6 slots, more
# than the cluster has, stays QUEUED with the scheduler's reason.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
AGENT_PID=
stop_agent() {
    if [ -n "$AGENT_PID" ]; then
        kill -TERM "$AGENT_PID" 2>/dev/null
        wait "$AGENT_PID" 2>/dev/null
        AGENT_PID=
    fi
}
trap 'stop_ctrl; stop_agent; stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 2 || exit 1
PATH=$KD_BUILD/bin:$PATH "$KD_BUILD/bin/kdet-local" kubelet --kubeconfig "$T/kubeconfig" \
    --node-name kdet-e2e-n1 --fake-gpus 2 --port 0 --state-dir "$T/agent" >"$T/agent.log" 2>&1 &
AGENT_PID=$!
check "the node agent registered a Ready node" wait_for 20 eval \
    '[ "$(field node kdet-e2e-n1 "{.status.conditions[?(@.type==\"Ready\")].status}")" = True ]'
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
fmnist_experiment mn 0.05 "{name: single, metric: validation_loss, smaller_is_better: true,
             max_length: {batches: 40}}" 4
log "experiment mn created (4 slots)"
check "the trial gets 2 pods, both bound" wait_for 60 n_is 2 eval 'pod_nodes mn | grep -c .'
nodes=$(pod_nodes mn | tr '\n' ' ')
echo "# pods bound to: $nodes"
check "the pods are on the 2 different nodes" test "$nodes" = "kdet-e2e kdet-e2e-n1 "
check "each pod asks for 2 GPUs" test "$(kubectl get pods -l kdet.io/experiment=mn -o \
    'jsonpath={range .items[*]}{.spec.containers[0].resources.limits.nvidia\.com/gpu}{" "}{end}')" = "2 2 "

experiment big "  entrypoint: fashion-mnist-c --quiet
  hyperparameters: {global_batch_size: 32}
  searcher: {name: single, metric: validation_loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 6}"
log "experiment big created (6 slots)"

wait_for 100 eval 'exp_state_is mn COMPLETED || exp_state_is mn ERROR'
check "experiment mn COMPLETED" exp_state_is mn COMPLETED
check_multinode_trial mn default
check "the other pod ran on the node agent" grep -q 'msg="container exited" namespace=default pod=mn-1-1 container=trial exit_code=0' "$T/agent.log"

check_queued_big big 6 3 2
kubectl delete exp big --wait=false >/dev/null 2>&1
