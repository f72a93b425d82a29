#!/usr/bin/env bash
# Gang admission delegated to Volcano (--gang-scheduler auto finds the
# PodGroup API): on kdet-local with 4 fake GPUs, Volcano's PodGroup CRD
# (tests/data/controller/volcano/podgroup-crd.yaml) and a stand-in for
# Volcano's scheduler (volcano_standin.py: binds a PodGroup's pods all at
# once through pods/binding when the GPUs allow). Not Volcano itself.
# While a 4-GPU trial holds the node, an experiment of 4 x 2-GPU trials
# gets its pods and PodGroups at once (kdet does not hold them back) and
# its trials say why Volcano keeps them waiting; then they run and the
# experiment completes; PodGroups go with their pods, and nothing is left
# once the experiments are deleted.
. "$(dirname "$0")/lib.sh"
STANDIN_PID=
stop_standin() {
    if [ -n "$STANDIN_PID" ]; then
        kill -TERM "$STANDIN_PID" 2>/dev/null
        wait "$STANDIN_PID" 2>/dev/null
        STANDIN_PID=
    fi
}
trap 'stop_standin; finish; exit $?' EXIT
start_local 4 || exit 1
kubectl apply -f "$KD_SRC/tests/data/controller/volcano/podgroup-crd.yaml" >/dev/null || exit 1
wait_for 10 kubectl get podgroups || exit 1
python3 "$KD_SRC/e2e/controller/volcano_standin.py" >"$T/standin.log" 2>&1 &
STANDIN_PID=$!
start_ctrl --gang-scheduler auto
check "auto detects Volcano's PodGroup API" wait_for 10 grep -q 'gang_scheduler=volcano gang_detected=true' "$T/ctrl.log"

count_pg() { kubectl get podgroups -l "$1" -o name 2>/dev/null | grep -c .; }
bound_gpus() {
    kubectl get pods -l kdet.io/trial -o \
        'jsonpath={range .items[*]}{.spec.nodeName}:{.status.phase}:{.spec.containers[0].resources.limits.nvidia\.com/gpu}{"\n"}{end}' 2>/dev/null |
        awk -F: '$1 != "" && $2 != "Succeeded" && $2 != "Failed" { n += $3 } END { print n + 0 }'
}

experiment hog '  entrypoint: sh -c "sleep 600"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 4, priority: 10}'
check "the 4-GPU trial runs (bound by the stand-in)" wait_for 30 n_is 1 running_pods kdet.io/experiment=hog
pg_min=$(field podgroup hog-1 '{.spec.minMember}/{.spec.minResources.nvidia\.com/gpu}/{.spec.queue}/{.spec.priorityClassName}/{.metadata.ownerReferences[0].kind}')
check "PodGroup hog-1: minMember 1, 4 GPUs, queue default, kdet-high, owned by the Trial ($pg_min)" test "$pg_min" = "1/4/default/kdet-high/Trial"
sched=$(field pod hog-1-0 '{.spec.schedulerName}/{.metadata.annotations.scheduling\.k8s\.io/group-name}')
check "its pod names Volcano and the PodGroup ($sched)" test "$sched" = "volcano/hog-1"
sched_msg() { field trial "$1" '{.status.conditions[?(@.type=="Scheduled")].message}'; }
check "the trial is Scheduled=True: admitted by volcano" wait_for 10 n_is "admitted by volcano" sched_msg hog-1

experiment grid '  entrypoint: sh -c "sleep 1; exit 0"
  hyperparameters:
    x: {type: int, minval: 1, maxval: 4, count: 4}
  searcher: {name: grid, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 2}'
log "4 x 2-GPU trials while the node is full"
check "kdet creates all 4 trials' pods at once (Volcano decides)" wait_for 30 n_is 4 count_pods kdet.io/experiment=grid
check "and their 4 PodGroups" wait_for 10 n_is 4 count_pg kdet.io/experiment=grid
waits() {
    [ "$(field trial grid-1 '{.status.conditions[?(@.type=="Scheduled")].reason}')" = Unschedulable ]
}
check "a waiting trial's Scheduled reason is Volcano's Unschedulable" wait_for 20 waits
why=$(field trial grid-1 '{.status.conditions[?(@.type=="Scheduled")].message}')
msg=$(field trial grid-1 '{.status.message}')
echo "# grid-1: $why"
check "its message names the PodGroup, the queue and Volcano's reason" eval \
    'case "$why" in "waiting for volcano: PodGroup grid-1 in queue default is Pending: "*"Insufficient nvidia.com/gpu"*) true ;; *) false ;; esac'
check "status.message says the same" test "$msg" = "$why"
check "grid-1 is ACTIVE (its pods exist) while none of grid's pods is bound" eval \
    'trial_state_is grid-1 ACTIVE && [ "$(bound_gpus)" = 4 ]'

log "a trial canceled while Volcano has not admitted it"
experiment late '  entrypoint: sh -c "sleep 1; exit 0"
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 2}'
late_waits() {
    [ "$(field trial late-1 '{.status.conditions[?(@.type=="Scheduled")].reason}')" = Unschedulable ]
}
check "late-1 waits for Volcano" wait_for 20 late_waits
kubectl patch exp late --type=merge -p '{"spec":{"canceled":true}}' >/dev/null
check "late is CANCELED" wait_for 30 exp_state_is late CANCELED
late_sched=$(field trial late-1 '{.status.conditions[?(@.type=="Scheduled")].status}/{.status.conditions[?(@.type=="Scheduled")].reason}/{.status.conditions[?(@.type=="Scheduled")].message}')
check "late-1 ends Scheduled=False, never admitted ($late_sched)" test \
    "$late_sched" = "False/TrialEnded/the trial ended before volcano admitted it"
kubectl delete exp late --wait=false >/dev/null

log "cancel the 4-GPU experiment"
kubectl patch exp hog --type=merge -p '{"spec":{"canceled":true}}' >/dev/null
check "hog is CANCELED" wait_for 30 exp_state_is hog CANCELED
check "its PodGroup went with its pod" wait_for 10 n_is 0 count_pg kdet.io/experiment=hog
max=0
for i in $(seq 1 600); do
    n=$(bound_gpus)
    [ "${n:-0}" -gt "$max" ] && max=$n
    exp_state_is grid COMPLETED && break
    sleep 0.1
done
check "grid COMPLETED through Volcano's admission" exp_state_is grid COMPLETED
check "4 trials COMPLETED" test "$(field exp grid '{.status.trials.completed}')" = 4
check "never more than the node's 4 GPUs bound (max $max)" test "$max" -le 4
check "the PodGroups of finished trials are deleted" wait_for 10 n_is 0 count_pg kdet.io/experiment=grid
check "grid-1 was admitted by volcano" test \
    "$(field trial grid-1 '{.status.conditions[?(@.type=="Scheduled")].reason}')" = Admitted

log "delete the experiments"
kubectl delete exp hog grid --wait=false >/dev/null
gone() { [ "$(kubectl get exp,trial -o name 2>/dev/null | grep -c .)" = 0 ]; }
check "experiments and trials are gone" wait_for 30 gone
check "no pods left" wait_for 10 no_pods
check "no PodGroups left" wait_for 10 n_is 0 count_pg kdet.io/trial
check "the stand-in bound pods through pods/binding" grep -q '^bound default/grid-' "$T/standin.log"
