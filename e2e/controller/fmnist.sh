#!/usr/bin/env bash
# fashion-mnist-c under kdet-controller with a database, on kdet-local with
# fake GPUs: a small random search (3 trials, 2 at a time, 40 batches each)
# and a small adaptive ASHA (4 trials, rungs at 32 and 64 batches). Workers
# report through the API; the experiments COMPLETE, every trial has
# validation metrics in the store and was validated at the target length
# the searcher gave it, ASHA promotes some trials and stops others, and
# checkpoints were registered.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 2 || exit 1
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
fmnist_experiment fmnist "{type: double, minval: 0.01, maxval: 0.1}" "{name: random,
             metric: validation_loss, smaller_is_better: true, max_trials: 3, max_concurrent_trials: 2,
             max_length: {batches: 40}}" 1
log "experiment created"
wait_for 240 eval 'exp_state_is fmnist COMPLETED || exp_state_is fmnist ERROR'
check "experiment COMPLETED" exp_state_is fmnist COMPLETED
check "3 trials, all COMPLETED" test "$(kubectl get trial -l kdet.io/experiment=fmnist \
    -o 'jsonpath={range .items[*]}{.status.state}{"\n"}{end}' | grep -c '^COMPLETED$')" = 3
check "each trial's target is the searcher's 40 batches" test "$(kubectl get trial -l kdet.io/experiment=fmnist \
    -o 'jsonpath={range .items[*]}{.spec.validateAfter}{"\n"}{end}' | sort -u | tr '\n' ' ')" = "40 "
check "validation metrics stored for every trial" test \
    "$(psqlq "select count(distinct trial_id) from metrics where kind='validation' and metrics ? 'validation_loss'")" = 3
check "latestValidation at 40 batches" test "$(field trial fmnist-1 '{.status.latestValidation.batches}')" = 40
check "a checkpoint was registered" test "$(psqlq "select count(*) from checkpoints")" -ge 1
check "checkpoint files in the storage" test -n "$(ls -A "$T/ckpt" 2>/dev/null)"
check "the experiment row is in the store" test "$(psqlq "select count(*) from experiments where name='fmnist'")" = 1

fmnist_experiment asha "{type: log, base: 10, minval: -3, maxval: -0.5}" "{name: adaptive_asha,
             metric: validation_loss, smaller_is_better: true, max_trials: 4, max_concurrent_trials: 2,
             max_length: {batches: 64}, divisor: 2, max_rungs: 2, mode: standard}" 1
log "ASHA experiment created"
wait_for 240 eval 'exp_state_is asha COMPLETED || exp_state_is asha ERROR'
check "ASHA experiment COMPLETED" exp_state_is asha COMPLETED
targets=$(kubectl get trial -l kdet.io/experiment=asha \
    -o 'jsonpath={range .items[*]}{.spec.validateAfter}={.status.latestValidation.batches}{"\n"}{end}')
echo "# ASHA target=validated per trial: $(echo $targets)"
check "4 ASHA trials, each stopped at rung 32 or promoted to 64, and validated there" test \
    "$(echo "$targets" | grep -cE '^(32=32|64=64)$')" = 4
check "ASHA promoted at least one trial" test "$(echo "$targets" | grep -c '^64=64$')" -ge 1
check "ASHA validations stored for every trial" test "$(psqlq "select count(distinct m.trial_id) from metrics m \
    join trials t on t.id = m.trial_id join experiments e on e.id = t.experiment_id \
    where e.name = 'asha' and m.kind = 'validation'")" = 4
