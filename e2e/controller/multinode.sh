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
mkdir -p "$T/ckpt"

experiment mn "  entrypoint: fashion-mnist-c --train-limit 3200 --test-limit 500 --quiet
  environment:
    environment_variables: [OPENBLAS_NUM_THREADS=1, DTRAIN_TIMEOUT=60, DTRAIN_RENDEZVOUS_TIMEOUT=60, TMPDIR=$T]
  hyperparameters:
    global_batch_size: 32
    hidden_units: 32
    momentum: 0.9
    learning_rate: 0.05
  searcher: {name: single, metric: validation_loss, smaller_is_better: true,
             max_length: {batches: 40}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: 4}"
log "experiment mn created (4 slots)"
pod_nodes() {
    kubectl get pods -l kdet.io/experiment=mn -o \
        'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' 2>/dev/null | grep . | sort
}
check "the trial gets 2 pods, both bound" wait_for 60 n_is 2 eval 'pod_nodes | grep -c .'
nodes=$(pod_nodes | tr '\n' ' ')
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
check "its trial COMPLETED" trial_state_is mn-1 COMPLETED
run=$(field trial mn-1 '{.status.rendezvous.runId}')
check "the chief reported its address for the run (status.rendezvous)" test -n "$run"
check "the chief reported a pod IP and a port" test -n "$(field trial mn-1 '{.status.rendezvous.address}')" -a \
    "$(field trial mn-1 '{.status.rendezvous.port}')" -gt 0
check "the controller logged the report" grep -q 'msg="rendezvous address reported"' "$T/ctrl.log"
check "node rank 1 read it from the controller" grep -q \
    'method=GET path=/api/v1/namespaces/default/trials/mn-1/rendezvous status=200' "$T/ctrl.log"
check "the other pod ran on the node agent" grep -q 'msg="container exited" namespace=default pod=mn-1-1 container=trial exit_code=0' "$T/agent.log"
check "validation metrics stored" test \
    "$(psqlq "select count(*) from metrics where kind='validation' and metrics ? 'validation_loss'")" -ge 1
check "training metrics stored" test "$(psqlq "select count(*) from metrics where kind='training'")" -ge 1
check "latestValidation at 40 batches" test "$(field trial mn-1 '{.status.latestValidation.batches}')" = 40
check "a checkpoint was registered" test "$(psqlq "select count(*) from checkpoints")" -ge 1
check "checkpoint files in the storage" test -n "$(ls -A "$T/ckpt" 2>/dev/null)"

check "experiment big is ACTIVE, waiting" exp_state_is big ACTIVE
check "its trial stays QUEUED" trial_state_is big-1 QUEUED
msg=$(field trial big-1 '{.status.message}')
echo "# big-1: $msg"
check "the reason names what is missing" eval 'echo "$msg" | grep -q "slots_per_trial=6 needs 3 nodes"'
check "no pod was created for it" no_pods kdet.io/experiment=big
kubectl delete exp big --wait=false >/dev/null 2>&1
