#!/usr/bin/env bash
# Determined's Trainer API on the whole stack: a private PostgreSQL,
# kdet-local (process kubelet), kdet-controller with its API. The
# examples/pytorch-fashion-mnist/trainer-api script runs as the trial's
# entrypoint unchanged (`import determined` found through kdet-launch's
# PYTHONPATH, nothing set by the experiment): the searcher's 40 batches
# set the length, metrics and a checkpoint are stored, the experiment
# COMPLETES. A second experiment is paused after its first training report
# and resumed: the new pod restores the checkpoint under the trial's name
# and finishes. A third runs the Core API example through Determined's
# `python3 -m determined.launch.torch_distributed` entrypoint (torchrun).
# A fourth trial's worker is SIGKILLed mid-epoch and restarted by the
# controller: it resumes at the same batch and ends with the weights of an
# uninterrupted run.
. "$KD_SRC/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 1 || exit 1 # slots are GPUs: one fake GPU for one trial
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
mkdir -p "$T/ckpt"
EX=$KD_SRC/examples/pytorch-fashion-mnist/trainer-api

# trainer_experiment NAME BATCHES [ARGS]: ARGS go to train.py
trainer_experiment() {
    experiment "$1" "  entrypoint: /usr/bin/python3 $EX/train.py ${3:-}
  environment:
    environment_variables: [OMP_NUM_THREADS=1, TMPDIR=$T]
  hyperparameters:
    global_batch_size: 32
    learning_rate: 0.05
    hidden_units: 32
    momentum: 0.9
    gamma: 1.0
  searcher: {name: single, metric: validation_loss, smaller_is_better: true,
             max_length: {batches: $2}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
}

trial_metrics() { # TRIAL KIND: its metric rows' steps, in order
    psqlq "select string_agg(m.step::text, ' ' order by m.step) from metrics m
        join trials t on t.id = m.trial_id where t.uid = '$(field trial "$1" '{.metadata.uid}')'
        and m.kind = '$2'"
}

trainer_experiment tapi 40
log "experiment created"
wait_for 180 eval 'exp_state_is tapi COMPLETED || exp_state_is tapi ERROR'
check "experiment COMPLETED" exp_state_is tapi COMPLETED
check "validated at the searcher's 40 batches" test \
    "$(field trial tapi-1 '{.status.latestValidation.batches}')" = 40
check "one training row at the end of the operation (reporting_period 100)" test \
    "$(trial_metrics tapi-1 training)" = 40
check "validation metrics stored" test "$(trial_metrics tapi-1 validation)" = 40
check "checkpoint registered at 40" test "$(field trial tapi-1 '{.status.latestCheckpoint.batches}')" = 40
ck=$(field trial tapi-1 '{.status.latestCheckpoint.uuid}')
check "checkpoint files in the storage" test -f "$T/ckpt/$ck/state_dict.pth"

# Long enough (1500 batches, a validation on the 10000 test images every
# 100) that the pause lands mid-training.
trainer_experiment tpause 1500 "--validation-period 100"
check "trained to a first report" wait_for 120 eval '[ -n "$(trial_metrics tpause-1 training)" ]'
kubectl patch exp tpause --type=merge -p '{"spec":{"paused":true}}' >/dev/null
log "paused"
check "trial PAUSED" wait_for 60 trial_state_is tpause-1 PAUSED
check "its pod is gone" wait_for 60 no_pods kdet.io/trial=tpause-1
at=$(field trial tpause-1 '{.status.latestCheckpoint.batches}')
check "checkpointed when paused (at $at)" test -n "$at" -a "${at:-0}" -ge 100 -a "${at:-0}" -lt 1500
kubectl patch exp tpause --type=merge -p '{"spec":{"paused":false}}' >/dev/null
log "resumed"
wait_for 180 eval 'exp_state_is tpause COMPLETED || exp_state_is tpause ERROR'
check "resumed experiment COMPLETED" exp_state_is tpause COMPLETED
check "validated at 1500" test "$(field trial tpause-1 '{.status.latestValidation.batches}')" = 1500
# Reports every 100 batches, each once: a run from scratch would have
# reported (and checkpointed) the first ones again.
check "training continued from the checkpoint" test \
    "$(trial_metrics tpause-1 training)" = "$(seq -s ' ' 100 100 1500)"
check "one checkpoint at $at" test "$(psqlq "select count(*) from checkpoints c join trials t
    on t.id = c.trial_id where t.uid = '$(field trial tpause-1 '{.metadata.uid}')'
    and c.steps_completed = $at")" = 1
check "no early exit recorded" test "$(field trial tpause-1 '{.status.state}')" = COMPLETED

# A worker SIGKILLed mid-epoch (by itself, before batch 17 of its first
# attempt) is restarted by the controller (max_restarts: 1) from the
# checkpoint at 14 (min_checkpoint_period 7); with records_per_epoch 80 and
# 8 records a batch the searcher's 3 epochs are 30 batches. The restarted
# worker trains batches 14 to 29 on the data of an uninterrupted run and
# ends with its weights, bit for bit (the same trial seed, off-cluster).
HT=$KD_SRC/tests/dtrain/python/harness_trial.py
HP='{"global_batch_size": 8, "records": 80, "dropout": 0.2, "noise": true, "momentum": 0.5, "lr": 0.02}'
mkdir -p "$T/kill" "$T/straight" "$T/straight-ckpt"
experiment tkill "  entrypoint: /usr/bin/python3 $HT
  environment:
    environment_variables: [OMP_NUM_THREADS=1, TMPDIR=$T, KDET_TEST_OUT=$T/kill,
                            KDET_TEST_LOG=$T/kill.log, KDET_TEST_KILL_AT=17]
  hyperparameters: $HP
  records_per_epoch: 80
  min_checkpoint_period: {batches: 7}
  searcher: {name: single, metric: validation_loss, max_length: {epochs: 3}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 1
  resources: {slots_per_trial: 1}"
log "SIGKILL experiment created"
wait_for 240 eval 'exp_state_is tkill COMPLETED || exp_state_is tkill ERROR'
check "SIGKILLed experiment COMPLETED" exp_state_is tkill COMPLETED
check "restarted once" test "$(field trial tkill-1 '{.status.restarts}')" = 1
check "validated at 3 epochs (30 batches)" test \
    "$(field trial tkill-1 '{.status.latestValidation.batches}')" = 30
check "checkpoints at 7, 14 (first attempt), 21, 28 and 30" test "$(psqlq "select
    string_agg(c.steps_completed::text, ' ' order by c.steps_completed) from checkpoints c
    join trials t on t.id = c.trial_id where t.uid = '$(field trial tkill-1 '{.metadata.uid}')'")" \
    = "7 14 21 28 30"
seed=$(field trial tkill-1 '{.spec.seed}')
env -u KDET_CONTROLLER_URL PYTHONPATH="$KD_BUILD/lib/python" OMP_NUM_THREADS=1 \
    KDET_TRIAL_SEED="$seed" KDET_CHECKPOINT_DIR="$T/straight-ckpt" KDET_TEST_OUT="$T/straight" \
    KDET_TEST_LOG="$T/straight.log" KDET_TEST_HP="$HP" \
    KDET_TEST_CONF='{"records_per_epoch": 80, "min_checkpoint_period": {"batches": 7}}' \
    KDET_TEST_FIT='{"max_length": {"epochs": 3}}' /usr/bin/python3 "$HT" >"$T/straight.out" 2>&1
check "uninterrupted run off-cluster" grep -q "trial stopped batches_trained=30" "$T/straight.out"
batches() { cut -d' ' -f2 "$1" | tr '\n' ' '; }
check "trained 0-16, then 14-29 after the restart" test "$(batches "$T/kill.log")" = \
    "$(seq -s ' ' 0 16) $(seq -s ' ' 14 29) "
check "the same batches in the same order as the uninterrupted run" test \
    "$(sort -u "$T/kill.log" | sort -n -k2)" = "$(sort -n -k2 "$T/straight.log")"
check "the same final weights, bit for bit" /usr/bin/python3 -c "
import sys, torch
a, b = (torch.load(sys.argv[i]) for i in (1, 2))
sys.exit(0 if all(torch.equal(a[k], b[k]) for k in a) else 1)" "$T/kill/rank0.pth" "$T/straight/rank0.pth"

CORE=$KD_SRC/examples/core-api-fashion-mnist
experiment tcore "  entrypoint: python3 -m determined.launch.torch_distributed /usr/bin/python3 $CORE/train.py
  environment:
    environment_variables: [OMP_NUM_THREADS=1, TMPDIR=$T, PET_REDIRECTS=9:3, PET_TEE=9:3]
  hyperparameters:
    learning_rate: 0.05
    hidden_units: 32
    global_batch_size: 64
    train_examples: 3200
    validation_examples: 500
  searcher: {name: single, metric: validation_loss, smaller_is_better: true,
             max_length: {batches: 60}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
log "Core API experiment created"
wait_for 180 eval 'exp_state_is tcore COMPLETED || exp_state_is tcore ERROR'
check "Core API experiment COMPLETED" exp_state_is tcore COMPLETED
check "training reported at 50" test "$(trial_metrics tcore-1 training)" = 50
check "validated at the searcher's 60 batches" test "$(trial_metrics tcore-1 validation)" = 60
check "Core API checkpoint at 60" test "$(field trial tcore-1 '{.status.latestCheckpoint.batches}')" = 60
