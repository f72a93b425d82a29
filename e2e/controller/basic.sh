#!/usr/bin/env bash
# A grid search whose trials exit 0 completes with one Trial and one pod per
# grid point and nothing left; an invalid Experiment gets state ERROR and a
# condition quoting the validation error; a fixed configuration is retried.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
start_ctrl

experiment grid '  entrypoint: sh -c "sleep 0.3; exit 0"
  hyperparameters:
    lr: {type: double, minval: 0.1, maxval: 0.3, count: 3}
    depth: {type: categorical, vals: [1, 2]}
  searcher: {name: grid, metric: loss, max_length: {batches: 100}}
  resources: {slots_per_trial: 1}'
log "grid experiment created"
check "grid experiment COMPLETED" wait_for 60 exp_state_is grid COMPLETED
check "6 trials, all COMPLETED" test "$(kubectl get trial -l kdet.io/experiment=grid \
    -o 'jsonpath={range .items[*]}{.status.state}{"\n"}{end}' | grep -c '^COMPLETED$')" = 6
check "status counts 6 completed" test "$(field exp grid '{.status.trials.completed}')" = 6
check "progress 100%" test "$(field exp grid '{.status.progressPercent}')" = "100%"
n_created=$(grep -c 'msg="trial pods created".*trial=grid-' "$T/ctrl.log")
check "one pod per trial was created ($n_created times pods for 6 trials)" test "$n_created" = 6
check "no pods left" wait_for 10 no_pods kdet.io/experiment=grid
check "searcher state ConfigMap owned by the experiment" test \
    "$(field cm grid-searcher '{.metadata.ownerReferences[0].kind}')" = Experiment
check "trial seed and hparams set" test -n "$(field trial grid-1 '{.spec.seed}')$(field trial grid-1 '{.spec.hparams.lr}')"
check "grid points distinct" test "$(kubectl get trial -l kdet.io/experiment=grid \
    -o 'jsonpath={range .items[*]}{.spec.hparams}{"\n"}{end}' | sort -u | wc -l)" = 6

experiment bad '  entrypoint: sh -c "exit 0"
  hyperparameters:
    lr: {type: double, minval: 0.1, maxval: 0.3}
  searcher: {name: grid, metric: loss, max_length: {batches: 100}}'
check "invalid experiment ERROR" wait_for 20 exp_state_is bad ERROR
msg=$(field exp bad '{.status.conditions[?(@.type=="Valid")].message}')
echo "# condition: $msg"
check "condition quotes the field" eval 'case "$msg" in *hyperparameters.lr*count*) true ;; *) false ;; esac'
check "condition reason InvalidConfig" test "$(field exp bad '{.status.conditions[?(@.type=="Valid")].reason}')" = InvalidConfig
check "no trial for the invalid experiment" test "$(kubectl get trial -l kdet.io/experiment=bad -o name | grep -c .)" = 0
kubectl patch exp bad --type=merge -p '{"spec":{"hyperparameters":{"lr":{"type":"double","minval":0.1,"maxval":0.3,"count":2}}}}' >/dev/null
check "fixed experiment runs to COMPLETED" wait_for 60 exp_state_is bad COMPLETED

# A stored template: a ConfigMap labelled kdet.io/template=NAME, merged under the spec.
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: tmpl-two-gpus
  labels: {kdet.io/template: two-gpus}
data:
  template.yaml: |
    resources: {slots_per_trial: 2, priority: 20}
    environment:
      environment_variables: [FROM_TEMPLATE=yes]
YAML
experiment templ '  template: two-gpus
  entrypoint: [sh, -c, "test \"$FROM_TEMPLATE\" = yes"]
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0'
check "templated experiment COMPLETED" wait_for 40 exp_state_is templ COMPLETED
check "template's slots_per_trial reached the trial" test "$(field trial templ-1 '{.spec.resources.slots}')" = 2
check "template's priority reached the trial" test "$(field trial templ-1 '{.spec.resources.priority}')" = 20
check "the stored spec is not rewritten" test -z "$(field exp templ '{.spec.resources}')"

# Integer fields of the resources refuse numbers that are no integers (1e300 would be stored as a
# float): the API server answers 422 naming the field, and nothing changes.
out=$(kubectl patch trial templ-1 --type=merge -p '{"spec":{"validateAfter":1e300}}' 2>&1)
check "validateAfter 1e300 refused naming the field" eval \
    'case "$out" in *"spec.validateAfter in body must be of type integer"*) true ;; *) false ;; esac'
check "validateAfter unchanged" test "$(field trial templ-1 '{.spec.validateAfter}')" = 10
out=$(kubectl patch exp templ --type=merge -p '{"spec":{"max_restarts":2.5}}' 2>&1)
check "max_restarts 2.5 refused naming the field" eval \
    'case "$out" in *"spec.max_restarts in body must be of type integer"*) true ;; *) false ;; esac'

# A stored template that aliases one 200,000-character string 100,000 times (20 GB once
# expanded, few nodes): the experiment gets ERROR naming the cause, the controller lives on
# and its peak memory stays far below what the expansion would take.
python3 - "$T/bomb.json" <<'PY'
import json, sys
text = 's: &a "' + 'x' * 200000 + '"\nl: [' + ','.join(['*a'] * 100000) + ']\n'
json.dump({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "tmpl-bomb", "labels": {"kdet.io/template": "bomb"}},
           "data": {"template.yaml": text}}, open(sys.argv[1], "w"))
PY
kubectl create -f "$T/bomb.json" >/dev/null
experiment bombed '  template: bomb
  entrypoint: sh -c "exit 0"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}'
check "alias-bomb template: experiment ERROR" wait_for 40 exp_state_is bombed ERROR
msg=$(field exp bombed '{.status.conditions[?(@.type=="Valid")].message}')
echo "# condition: $msg"
check "condition names the template and the alias" eval \
    'case "$msg" in "template bomb:"*"expands to more than 16777216 bytes (alias *a of 200001 bytes used "*) true ;; *) false ;; esac'
check "controller still running" kill -0 "$CTRL_PID"
hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$CTRL_PID/status")
echo "# controller peak RSS: ${hwm} kB"
check "controller peak RSS under 1 GiB" test "${hwm:-9999999}" -lt 1048576
check "no trial for the alias-bomb experiment" test "$(count_trials kdet.io/experiment=bombed)" = 0

# An experiment as det creates it (ConfigMap with the packed context + Experiment).
mkdir -p "$T/ctx" && echo 'print(1)' >"$T/ctx/train.py"
cat >"$T/det.yaml" <<'YAML'
name: det-made
entrypoint: sh -c "exit 0"
hyperparameters:
  lr: {type: double, minval: 0.1, maxval: 0.3}
searcher: {name: random, metric: loss, max_trials: 3, max_length: {batches: 10}}
resources: {slots_per_trial: 1}
YAML
"$KD_BUILD/bin/det" experiment create "$T/det.yaml" "$T/ctx" --dry-run | kubectl apply -f - >/dev/null
dm=$(kubectl get exp -o name | sed -n 's|.*/\(det-made-.*\)|\1|p')
check "det --dry-run | kubectl apply: $dm COMPLETED with 3 trials" wait_for 40 \
    eval 'exp_state_is "$dm" COMPLETED && test "$(field exp "$dm" "{.status.trials.completed}")" = 3'

kubectl delete exp grid --wait=true --timeout=30s >/dev/null 2>&1
check "deleting the experiment removes its trials" wait_for 20 n_is 0 count_trials kdet.io/experiment=grid
