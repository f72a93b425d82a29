#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2034 # eval bodies expand when check runs them
# A full experiment run by kdet-controller on the real control plane: the
# controller authenticates as the kdet-controller service account with
# exactly manifests/rbac.yaml bound (least privilege, checked by the API
# server's RBAC), stores into a private PostgreSQL and serves the worker API;
# kube-scheduler binds the trial pods to kdet's process kubelet (node
# kdet-node, fake GPUs, e2e/kube/kubelet.sh), which runs fashion-mnist-c;
# the workers report metrics; the experiment COMPLETES; deleting it removes
# its trials and pods through the real garbage collector. Then a second
# process kubelet joins as node kdet-node-2 (its own node identity, with as
# many GPUs as kdet-node) and a fashion-mnist-c trial that needs both nodes
# runs: kube-scheduler binds its two pods to the two nodes, the chief reports
# its pod IP and port to the controller API, the other pod reads them back,
# the workers train and checkpoint, the experiment COMPLETES; a trial larger
# than the cluster stays QUEUED with the reason. The second node is stopped
# and its Node deleted at the end.
#
# Usage (from e2e/kube/run.sh, with an up.sh dir's env loaded and the
# process kubelet running): KD_SRC=TREE KD_BUILD=BUILD e2e/kube/controller.sh
# Needs BUILD/bin/{kdet-controller,kdet-launch,fashion-mnist-c} and the
# PostgreSQL server binaries. Prints `N passed, N failed`.
set -u
: "${KUBECONFIG:?the admin kubeconfig of an e2e/kube/up.sh dir}"
: "${KDET_KUBE_CONTROLLER_KUBECONFIG:?from an e2e/kube/up.sh dir}"
: "${KDET_KUBE_DIR:?from an e2e/kube/up.sh dir}"
ADMIN_KUBECONFIG=$KUBECONFIG
# shellcheck source=e2e/controller/lib.sh
. "$(dirname "$0")/../controller/lib.sh"
NS=kdctl-$$
NODE=kdet-node
NODE2=kdet-node-2

# cleanup_ns: the suite's namespace, and what it applied from manifests/
# besides the CRDs (the priority classes, the controller's RBAC and namespace
# kdet), so that a later suite installing kdet (helm, install) starts clean.
cleanup_ns() {
    KUBECONFIG=$ADMIN_KUBECONFIG kubectl delete ns "$NS" --wait=false >/dev/null 2>&1
    KUBECONFIG=$ADMIN_KUBECONFIG kubectl delete --ignore-not-found --wait=false \
        -f "$KD_SRC/manifests/priorityclasses.yaml" -f "$KD_SRC/manifests/rbac.yaml" \
        -f "$KD_SRC/manifests/rbac-authz-kubernetes.yaml" \
        -f "$KD_SRC/manifests/namespace.yaml" >/dev/null 2>&1
}
# stop_node2: stops the second process kubelet (and so its pods) and deletes its Node.
stop_node2() {
    local f=$KDET_KUBE_DIR/pids/kubelet-$NODE2 pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    rm -f "$f"
    KUBECONFIG=$ADMIN_KUBECONFIG kubectl delete node "$NODE2" --wait=false >/dev/null 2>&1
}
trap 'stop_ctrl; stop_node2; stop_pg; cleanup_ns; finish; exit $?' EXIT
for p in kdet-controller kdet-launch fashion-mnist-c; do
    [ -x "$KD_BUILD/bin/$p" ] || { bad "$KD_BUILD/bin/$p missing (make O=BUILD BUILD/bin/$p)"; exit 1; }
done
need_pg || { PASSED=0 FAILED=1; echo "FAIL - no PostgreSQL server binaries"; exit 1; }

# kubectl here: admin, in the experiment's namespace. The controller: its own identity.
cp "$ADMIN_KUBECONFIG" "$T/kubeconfig"
kubectl config set-context --current --namespace="$NS" >/dev/null
cp "$KDET_KUBE_CONTROLLER_KUBECONFIG" "$T/controller.kubeconfig"
CTRL_KC=$T/controller.kubeconfig
as_ctrl() { kubectl --kubeconfig "$CTRL_KC" "$@"; }

check "node $NODE is Ready" test "$(kubectl get node "$NODE" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True
check "CRDs, priority classes, namespace kdet and manifests/rbac.yaml applied" eval \
    'kubectl apply -f "$KD_SRC/crds/" -f "$KD_SRC/manifests/priorityclasses.yaml" \
        -f "$KD_SRC/manifests/namespace.yaml" -f "$KD_SRC/manifests/rbac.yaml" >/dev/null'
check "namespace $NS created" eval 'kubectl create ns "$NS" >/dev/null'
wait_for 30 kubectl get crd experiments.kdet.io trials.kdet.io
wait_for 30 kubectl get exp

# Least privilege: what the service account may and may not do, as the API server sees it.
can() { [ "$(as_ctrl auth can-i "$@" 2>/dev/null)" = yes ]; }
check "rbac: the controller may create pods in $NS" can create pods -n "$NS"
check "rbac: the controller may patch trials/status" can patch trials.kdet.io --subresource=status -n "$NS"
check "rbac: the controller may not delete experiments" eval '! can delete experiments.kdet.io -n "$NS"'
check "rbac: the controller may not update pods" eval '! can update pods -n "$NS"'
check "rbac: the controller may not list secrets" eval '! can list secrets -n "$NS"'
check "rbac: the controller may not create leases outside kdet" eval '! can create leases.coordination.k8s.io -n "$NS"'
out=$(as_ctrl -n "$NS" delete exp nope 2>&1)
check "rbac: a forbidden request is 403 for the service account" eval \
    'case "$out" in *Forbidden*system:serviceaccount:kdet:kdet-controller*) true ;; *) false ;; esac'

start_pg || exit 1
"$KD_BUILD/bin/kdet-controller" --kubeconfig "$CTRL_KC" --namespace "$NS" --workers 2 --resync 5 \
    --database-url "$PG_URL" --api-listen 127.0.0.1:0 --plain-http --leader-elect on --lease-namespace kdet \
    >>"$T/ctrl.log" 2>&1 &
CTRL_PID=$!
check "controller: leader election on a Lease in kdet" wait_for 30 grep -q 'msg="became leader"' "$T/ctrl.log"
check "controller: API serving" wait_for 30 grep -q 'msg="API serving"' "$T/ctrl.log"

fmnist_experiment fmnist "{type: double, minval: 0.01, maxval: 0.1}" "{name: random,
             metric: validation_loss, smaller_is_better: true, max_trials: 2, max_concurrent_trials: 2,
             max_length: {batches: 40}}" 1
log "experiment fmnist created in $NS"
wait_for 300 eval 'exp_state_is fmnist COMPLETED || exp_state_is fmnist ERROR'
check "experiment COMPLETED" exp_state_is fmnist COMPLETED
check "2 trials, both COMPLETED" test "$(kubectl get trial -l kdet.io/experiment=fmnist \
    -o 'jsonpath={range .items[*]}{.status.state}{"\n"}{end}' | grep -c '^COMPLETED$')" = 2
check "trial pods created by the controller" test "$(grep -c 'msg="trial pods created".*trial=fmnist-' "$T/ctrl.log")" -ge 2
sched=$(kubectl get events --field-selector reason=Scheduled \
    -o 'jsonpath={range .items[*]}{.involvedObject.name} {.message}{"\n"}{end}' 2>/dev/null | grep '^fmnist-')
echo "# scheduled: $(echo "$sched" | head -4 | tr '\n' ';')"
check "kube-scheduler bound the trial pods to $NODE" test "$(echo "$sched" | grep -c "to $NODE")" -ge 2
check "the process kubelet reported them Started" test "$(kubectl get events --field-selector reason=Started \
    -o 'jsonpath={range .items[*]}{.involvedObject.name}{"\n"}{end}' 2>/dev/null | grep -c '^fmnist-')" -ge 2
check "validation metrics stored for both trials" test \
    "$(psqlq "select count(distinct trial_id) from metrics where kind='validation' and metrics ? 'validation_loss'")" = 2
check "latestValidation at 40 batches" test "$(field trial fmnist-1 '{.status.latestValidation.batches}')" = 40
check "a checkpoint was registered" test "$(psqlq "select count(*) from checkpoints")" -ge 1
check "no trial pod still running" wait_for 30 eval 'test "$(live_pods kdet.io/experiment=fmnist)" = 0'

npods=$(count_pods kdet.io/experiment=fmnist)
ntoken=$(kubectl get secret -o name 2>/dev/null | grep -c 'fmnist-.*token')
log "before delete: $npods pods, $ntoken token secrets"
kubectl delete exp fmnist --wait=false >/dev/null 2>&1
check "deleting the experiment removes its trials (garbage collector)" wait_for 60 n_is 0 count_trials kdet.io/experiment=fmnist
check "... and their pods" wait_for 60 no_pods kdet.io/experiment=fmnist
check "... and the trials' token Secrets" wait_for 60 eval \
    'test "$(kubectl get secret -o name 2>/dev/null | grep -c "fmnist-.*token")" = 0'

# A running trial: its logs through the API server and the kubelet API, then
# an experiment deleted while its pod runs: the garbage collector removes the
# trial and the pod, and the kubelet stops the process.
experiment sleeper "  entrypoint: sh -c 'echo sleeper-up gpus=\$CUDA_VISIBLE_DEVICES; sleep 600; echo $NS-sleeper-done'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 2}"
check "a 2-GPU trial pod runs on $NODE" wait_for 60 eval \
    'test "$(running_pods kdet.io/experiment=sleeper)" = 1'
pod=$(kubectl get pods -l kdet.io/experiment=sleeper -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null)
check "its nodeName is $NODE" test "$(field pod "$pod" '{.spec.nodeName}')" = "$NODE"
check "kubectl logs of the trial pod (its worker's output)" wait_for 30 eval 'kubectl logs "$pod" 2>/dev/null | grep -q "sleeper-up gpus=[0-9]"'
check "the pod sees its 2 fake GPUs" eval 'kubectl logs "$pod" | grep -Eq "sleeper-up gpus=[0-3],[0-3]$"'
check "the pod owns a service-account token volume (admission)" eval \
    'kubectl get pod "$pod" -o jsonpath="{.spec.containers[0].volumeMounts[*].mountPath}" | grep -q /var/run/secrets/kubernetes.io/serviceaccount'
check "its process runs on this machine" eval 'pgrep -f "$NS-sleeper-done" >/dev/null'
kubectl delete exp sleeper --wait=false >/dev/null 2>&1
check "deleting a running experiment removes its trial" wait_for 60 n_is 0 count_trials kdet.io/experiment=sleeper
check "... and its running pod" wait_for 60 no_pods kdet.io/experiment=sleeper
check "... and the kubelet stopped its process" wait_for 30 eval '! pgrep -f "$NS-sleeper-done" >/dev/null'

# Two nodes: a multi-node trial. The second process kubelet advertises as
# many GPUs as kdet-node, so a trial of twice that needs one whole-node pod
# on each.
G=$(field node "$NODE" '{.status.allocatable.nvidia\.com/gpu}')
echo "# $NODE has $G GPUs"
check "a second process kubelet registers node $NODE2 as system:node:$NODE2" \
    env KDET_KUBE_FAKE_GPUS="$G" "$KD_SRC/e2e/kube/kubelet.sh" "$KDET_KUBE_DIR" "$KD_BUILD/bin/kdet-local" "$NODE2"
NODE2_LOG=$KDET_KUBE_DIR/logs/kubelet-$NODE2.log
check "node $NODE2 is Ready with $G GPUs" test "$(field node "$NODE2" \
    '{.status.conditions[?(@.type=="Ready")].status} {.status.allocatable.nvidia\.com/gpu}')" = "True $G"
check "NodeRestriction: $NODE2 may not label $NODE" eval '! kubectl --kubeconfig "$KDET_KUBE_DIR/node-$NODE2.kubeconfig" \
    label node "$NODE" kdet.io/x=y >/dev/null 2>&1'
fmnist_experiment mn 0.05 "{name: single, metric: validation_loss, smaller_is_better: true,
             max_length: {batches: 40}}" $((2 * G))
log "experiment mn created ($((2 * G)) slots)"
check "the trial gets 2 pods, both bound" wait_for 60 n_is 2 eval 'pod_nodes mn | grep -c .'
nodes=$(pod_nodes mn | tr '\n' ' ')
echo "# pods bound to: $nodes"
check "the pods are on the 2 different nodes" test "$nodes" = "$NODE $NODE2 "
podnodes=$(kubectl get pods -l kdet.io/experiment=mn -o \
    'jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName}{"\n"}{end}' 2>/dev/null)
check "each pod asks for $G GPUs" test "$(kubectl get pods -l kdet.io/experiment=mn -o \
    'jsonpath={range .items[*]}{.spec.containers[0].resources.limits.nvidia\.com/gpu}{" "}{end}')" = "$G $G "
check "the controller pinned each pod to its node (nodeSelector kubernetes.io/hostname)" test \
    "$(kubectl get pods -l kdet.io/experiment=mn -o 'jsonpath={range .items[*]}{.spec.nodeSelector.kubernetes\.io/hostname}={.spec.nodeName}{" "}{end}' |
        tr ' ' '\n' | grep -c '^\(.*\)=\1$')" = 2
sched=$(kubectl get events --field-selector reason=Scheduled \
    -o 'jsonpath={range .items[*]}{.involvedObject.name} {.message}{"\n"}{end}' 2>/dev/null | grep '^mn-1-')
echo "# scheduled: $(echo "$sched" | tr '\n' ';')"
check "kube-scheduler bound one pod to each node" test "$(echo "$sched" | grep -c " to $NODE$")/$(echo "$sched" |
    grep -c " to $NODE2$")" = 1/1
check "the trial has a headless rendezvous Service" test "$(kubectl get svc -l kdet.io/trial=mn-1 \
    -o 'jsonpath={.items[*].spec.clusterIP}')" = None

fmnist_experiment big 0.05 "{name: single, metric: validation_loss, max_length: {batches: 10}}" $((3 * G))
log "experiment big created ($((3 * G)) slots)"

wait_for 240 eval 'exp_state_is mn COMPLETED || exp_state_is mn ERROR'
check "experiment mn COMPLETED" exp_state_is mn COMPLETED
check_multinode_trial mn "$NS"
for pn in $podnodes; do
    pod=${pn%%=*} n=${pn#*=}
    [ "$n" = "$NODE" ] && lg=$KDET_KUBE_DIR/logs/kubelet.log || lg=$NODE2_LOG
    check "pod $pod ran to exit 0 on $n" grep -q "msg=\"container exited\" namespace=$NS pod=$pod container=trial exit_code=0" "$lg"
done
check_queued_big big $((3 * G)) 3 "$G"
# The API server writes a number like weight 1.0 back as 1: the controller
# must not take that for a change and patch the spec again on every pass.
check "the waiting trial's spec was not rewritten (generation $(field trial big-1 '{.metadata.generation}'))" \
    test "$(field trial big-1 '{.metadata.generation}')" -le 2

kubectl delete exp mn big --wait=false >/dev/null 2>&1
check "deleting the experiments removes their trials" wait_for 60 eval \
    'n_is 0 count_trials kdet.io/experiment=mn && n_is 0 count_trials kdet.io/experiment=big'
check "... their pods" wait_for 60 eval 'no_pods kdet.io/experiment=mn && no_pods kdet.io/experiment=big'
check "... and the rendezvous Service" wait_for 60 eval \
    'test -z "$(kubectl get svc -l kdet.io/trial=mn-1 -o name 2>/dev/null)"'
check "the API server rejected none of the controller's writes as invalid (422)" \
    test "$(grep -c 'err=KD_EINVALID' "$T/ctrl.log")" = 0
stop_ctrl
stop_node2
check "node $NODE2 deleted" wait_for 30 eval '! kubectl get node "$NODE2" >/dev/null 2>&1'

# --authz kubernetes: Kubernetes RBAC decides what a kdet user may do, through a
# SubjectAccessReview of the user kdet:NAME (groups kdet:users, and kdet:admins for
# administrators), answered by this API server's RBAC authorizer.
check "authz: manifests/rbac-authz-kubernetes.yaml applied" eval \
    'kubectl apply -f "$KD_SRC/manifests/rbac-authz-kubernetes.yaml" >/dev/null'
check "rbac: with it the controller may create SubjectAccessReviews" wait_for 10 \
    can create subjectaccessreviews.authorization.k8s.io
ADMIN_TOK=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
KDET_USER_TOKEN=$ADMIN_TOK "$KD_BUILD/bin/kdet-controller" --kubeconfig "$CTRL_KC" --namespace "$NS" \
    --workers 2 --database-url "$PG_URL" --api-listen 127.0.0.1:0 --plain-http --leader-elect off \
    --authz kubernetes >>"$T/ctrl-authz.log" 2>&1 &
CTRL_PID=$!
check "authz: the controller serves with authz=kubernetes" wait_for 30 \
    grep -q 'msg="API serving".*authz=kubernetes' "$T/ctrl-authz.log"
API=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl-authz.log" | tail -1 | tr -d '"')
# api TOKEN METHOD PATH [CURL_ARGS...]: the status code, the body in $T/body
api() { curl -s -o "$T/body" -w '%{http_code}' -X "$2" -H "Authorization: Bearer $1" "${@:4}" "$API/$3"; }
api "$ADMIN_TOK" POST api/v1/users -d '{"name": "alice"}' >/dev/null
ALICE=$(jq -r '.token // empty' "$T/body" 2>/dev/null)
check "authz: the administrator made user alice" test -n "$ALICE"
check "authz: alice without a RoleBinding: 403 saying what Kubernetes RBAC refused" eval \
    '[ "$(api "$ALICE" GET "api/v1/namespaces/$NS/experiments")" = 403 ] &&
     grep -q "kdet:alice.*may not list experiments in namespace $NS (Kubernetes RBAC)" "$T/body"'
check "authz: the administrator (group kdet:admins, bound by the manifest) lists experiments" \
    eval '[ "$(api "$ADMIN_TOK" GET "api/v1/namespaces/$NS/experiments")" = 200 ]'
kubectl -n "$NS" create role kdet-reader --verb=get,list --resource=experiments.kdet.io >/dev/null
kubectl -n "$NS" create rolebinding alice-reader --role=kdet-reader --user=kdet:alice >/dev/null
# Answers are kept 10 s: the refusal above expires within that.
check "authz: with a RoleBinding to a reader Role, alice lists experiments" wait_for 20 eval \
    '[ "$(api "$ALICE" GET "api/v1/namespaces/$NS/experiments")" = 200 ]'
check "authz: but may not pause one (update)" eval \
    '[ "$(api "$ALICE" POST "api/v1/namespaces/$NS/experiments/x/pause")" = 403 ] &&
     grep -q "may not update experiments" "$T/body"'
check "authz: nor read logs (experiments/logs)" eval \
    '[ "$(api "$ALICE" GET "api/v1/namespaces/$NS/experiments/x/logs")" = 403 ] &&
     grep -q "may not get experiments/logs" "$T/body"'
check "authz: nor list in another namespace" eval \
    '[ "$(api "$ALICE" GET "api/v1/namespaces/default/experiments")" = 403 ]'
check "authz: no token is still 401" eval '[ "$(api x GET "api/v1/namespaces/$NS/experiments")" = 401 ]'
check "authz: the reviews were made as the controller, none failed" eval \
    '! grep -q "msg=\"access review failed\"" "$T/ctrl-authz.log"'
stop_ctrl
