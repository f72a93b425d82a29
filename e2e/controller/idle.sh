#!/usr/bin/env bash
# Adaptive ASHA with more trials than GPU slots: 4 fake GPUs, 2 slots per
# trial (2 trials at a time), 6 trials in one ASHA bracket with rungs at
# 32 and 64 batches.
# A trial that waits at its rung for a promotion must give its GPUs back
# (condition Idle, no pods), or the queued trials never start. Checks: an
# idle trial had no pods, a released trial was promoted and resumed from
# its checkpoint, kill -9 of the controller while a trial is idle changes
# nothing, pause and activate of an idle trial, and every trial ends
# COMPLETED at 32 or 64 batches. Then a kill (annotation kdet.io/kill):
# the pods go without a grace period and the trial ends CANCELED.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 4 || exit 1
export KDET_IDLE_RELEASE_AFTER=0 # release at once: the searcher's races decide less
# A fixed API port: the workers of running trials reach the restarted controller there.
APORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_ctrl --database-url "$PG_URL" --api-listen "127.0.0.1:$APORT" --namespace default
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
mkdir -p "$T/ckpt"
# Each worker start leaves "TRIAL CHECKPOINT" (or "none") in $T/starts.
cat >"$T/fm.sh" <<EOF
#!/bin/sh
echo "\$KDET_TRIAL_ID \${KDET_LATEST_CHECKPOINT:-none}" >>"$T/starts"
exec fashion-mnist-c "\$@" 2>>"$T/stderr.\$KDET_TRIAL_ID"
EOF
chmod +x "$T/fm.sh"

experiment asha "  entrypoint: $T/fm.sh --train-limit 1600 --test-limit 300 --quiet
  environment:
    environment_variables: [OPENBLAS_NUM_THREADS=1, DTRAIN_TIMEOUT=60, TMPDIR=$T]
  hyperparameters:
    global_batch_size: 32
    hidden_units: 16
    momentum: 0.9
    learning_rate: {type: log, base: 10, minval: -2.5, maxval: -1.5}
  searcher: {name: adaptive_asha, metric: validation_loss, smaller_is_better: true, max_trials: 6,
             max_concurrent_trials: 6, max_length: {batches: 64}, divisor: 2, max_rungs: 2,
             mode: aggressive}
  reproducibility: {experiment_seed: 7}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: 2}"
log "ASHA experiment created (6 trials, 2 slots each, 4 GPUs)"

# idle_without_pods: the name of a trial that is ACTIVE and Idle with its GPUs released (one
# snapshot) and has no pod.
idle_without_pods() {
    local t
    for t in $(kubectl get trial -l kdet.io/experiment=asha -o \
        'jsonpath={range .items[*]}{.metadata.name}={.status.state}={.status.conditions[?(@.type=="Idle")].status}={.status.message}{"\n"}{end}' 2>/dev/null |
        grep '=ACTIVE=True=idle: waiting for the searcher; GPUs released$' | cut -d= -f1); do
        if [ "$(count_pods "kdet.io/trial=$t")" = 0 ]; then
            echo "$t"
            return 0
        fi
    done
    return 1
}
idle=
for _ in $(seq 1 400); do
    idle=$(idle_without_pods) && break
    sleep 0.2
done
check "a trial waits at its rung: ACTIVE (not admitted), Idle=True, GPUs released, no pod" test -n "$idle"
log "idle trial: ${idle:-none}"

# kill -9 of the controller while trials are idle; a new one carries on from the resources.
kill -9 "$CTRL_PID" 2>/dev/null
wait "$CTRL_PID" 2>/dev/null
CTRL_PID=
log "controller killed (-9); starting another"
start_ctrl --database-url "$PG_URL" --api-listen "127.0.0.1:$APORT" --namespace default

# Pause and activate an idle trial (when one is idle and unpromoted at that moment).
paused=$(idle_without_pods)
if [ -n "$paused" ]; then
    kubectl patch trial "$paused" --type merge -p '{"spec":{"paused":true}}' >/dev/null
    check "an idle trial pauses ($paused)" wait_for 30 eval \
        "trial_state_is $paused PAUSED || trial_state_is $paused COMPLETED"
    kubectl patch trial "$paused" --type merge -p '{"spec":{"paused":false}}' >/dev/null
    check "it leaves PAUSED when activated" wait_for 30 eval "! trial_state_is $paused PAUSED"
fi

wait_for 200 eval 'exp_state_is asha COMPLETED || exp_state_is asha ERROR'
check "ASHA experiment COMPLETED" exp_state_is asha COMPLETED
targets=$(kubectl get trial -l kdet.io/experiment=asha \
    -o 'jsonpath={range .items[*]}{.metadata.name}={.status.state}={.spec.validateAfter}={.status.latestValidation.batches}{"\n"}{end}')
echo "# trial=state=target=validated: $(echo $targets)"
check "6 trials, each COMPLETED at rung 32 or promoted to 64" test \
    "$(echo "$targets" | grep -cE '=COMPLETED=(32=32|64=64)$')" = 6
check "trials released their pods while idle" grep -q 'msg="idle trial released its pods"' "$T/ctrl.log"
# Released trials (Idle set), later started again with KDET_LATEST_CHECKPOINT, validated at 64.
resumed=0
for t in $(grep -v ' none$' "$T/starts" | cut -d' ' -f1 | sort -u); do
    grep -qE "msg=\"trial idle: releasing its GPUs\" trial=\"?default/$t\"? target=32 " "$T/ctrl.log" &&
        [ "$(field trial "$t" '{.status.latestValidation.batches}')" = 64 ] && resumed=$((resumed + 1))
done
log "trials released at rung 32, then resumed from a checkpoint to 64: $resumed"
check "a trial released while idle was promoted and resumed from its checkpoint (KDET_LATEST_CHECKPOINT)" \
    test "$resumed" -ge 1
check "no worker wrote a sanitizer report" eval '! grep -lE "Sanitizer|runtime error:" "$T"/stderr.*' 
check "no trial pod left" no_pods kdet.io/experiment=asha
check "no Idle condition left True" test -z \
    "$(kubectl get trial -l kdet.io/experiment=asha -o 'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Idle")].status}{"\n"}{end}' | grep True)"
# Conditions of ended trials: each COMPLETED trial ran, so it says Scheduled=True (Admitted);
# neither a stale Scheduled=False/Waiting from a queue it left nor a missing Scheduled.
sched=$(kubectl get trial -l kdet.io/experiment=asha -o \
    'jsonpath={range .items[*]}{.metadata.name}={.status.state}={.status.conditions[?(@.type=="Scheduled")].status}/{.status.conditions[?(@.type=="Scheduled")].reason}{"\n"}{end}')
log "Scheduled conditions: $(echo $sched)"
check "every COMPLETED trial has Scheduled=True/Admitted" test \
    "$(echo "$sched" | grep -c '=COMPLETED=True/Admitted$')" = 6
# An ended trial left with a stale Scheduled=False/Waiting (as older controllers wrote) is
# repaired on its next reconcile.
kubectl patch trial asha-1 --subresource=status --type merge -p '{"status":{"conditions":[{"type":"Scheduled","status":"False","reason":"Waiting","message":"waiting for 2 slots","lastTransitionTime":"2026-11-21T00:00:00Z"}]}}' >/dev/null
check "a stale Scheduled=False/Waiting of a COMPLETED trial is repaired" wait_for 30 eval \
    '[ "$(field trial asha-1 "{.status.conditions[?(@.type==\"Scheduled\")].status}/{.status.conditions[?(@.type==\"Scheduled\")].reason}")" = True/Admitted ]'

# A kill (the annotation det experiment kill sets, with spec.canceled): the pods are deleted with
# grace period 0, so a worker that ignores SIGTERM does not hold the slots for its grace period.
printf '#!/bin/sh\ntrap "" TERM\nwhile :; do sleep 1; done\n' >"$T/hold.sh"
chmod +x "$T/hold.sh"
experiment killme "  entrypoint: $T/hold.sh
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 2}"
check "kill: the trial runs" wait_for 60 n_is 1 running_pods kdet.io/experiment=killme
kubectl patch exp killme --type merge -p \
    '{"metadata":{"annotations":{"kdet.io/kill":"2026-11-21T00:00:00Z"}},"spec":{"canceled":true}}' >/dev/null
check "kill: the trial ends CANCELED, 'the experiment was killed'" wait_for 60 eval \
    '[ "$(field trial killme-1 "{.status.state}={.status.message}")" = "CANCELED=the experiment was killed" ]'
check "kill: its pod is gone" wait_for 60 no_pods kdet.io/experiment=killme
check "kill: the pod was not given a grace period" eval \
    '! grep -E "msg=\"pod terminating\".*pod=killme-1-0" "$T/local.log"'
check "kill: the experiment ends CANCELED" wait_for 60 exp_state_is killme CANCELED
check "kill: the trial that ran keeps Scheduled=True" test \
    "$(field trial killme-1 '{.status.conditions[?(@.type=="Scheduled")].status}')" = True
