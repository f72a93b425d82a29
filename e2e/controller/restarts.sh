#!/usr/bin/env bash
# A worker that fails: the trial restarts up to max_restarts (a new attempt
# each time, with backoff), then ERROR; the experiment ends ERROR. The
# trial's message carries the failed worker's last lines of output.
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 2 || exit 1
start_ctrl

failing_spec='  entrypoint: sh -c "echo boom >&2; exit 3"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 2
  resources: {slots_per_trial: 1}'
experiment failing "$failing_spec"
check "trial ERROR" wait_for 60 trial_state_is failing-1 ERROR
check "restarts = max_restarts = 2" test "$(field trial failing-1 '{.status.restarts}')" = 2
msg=$(field trial failing-1 '{.status.message}')
echo "# message: $msg"
check "message names the exit code" eval 'case "$msg" in *"exit code 3"*max_restarts=2*) true ;; *) false ;; esac'
check "three attempts, three run ids" test "$(grep 'msg="trial pods created" trial=failing-1 ' "$T/ctrl.log" |
    sed 's/.*run_id=//' | sort -u | wc -l)" = 3
check "experiment ERROR" wait_for 20 exp_state_is failing ERROR
check "no pods left" wait_for 10 no_pods kdet.io/experiment=failing

# The same while another writer changes the Trial up to 200 times a second, so that the controller's
# status writes often meet 409 Conflict. An attempt whose ACTIVE status did not land stayed
# QUEUED: its pod, failing at once, was then taken for a leftover and deleted, and the attempt
# went uncounted (more run ids than attempts; with every write conflicting, for ever).
python3 "$KD_SRC/e2e/controller/touch.py" "$T/kubeconfig" default busy-1 200 120 "$T/touch.stop" \
    > "$T/touch.out" 2>&1 &
touch_pid=$!
experiment busy "$failing_spec"
check "busy-1 ERROR while another writer changes it" wait_for 60 trial_state_is busy-1 ERROR
: > "$T/touch.stop"
wait "$touch_pid"
echo "# the other writer's patches: $(tail -c 300 "$T/touch.out")"
check "the other writer's patches landed" test "$(tail -1 "$T/touch.out")" -gt 5
check "busy-1: restarts = 2, three attempts, three run ids" eval \
    'test "$(field trial busy-1 "{.status.restarts}")" = 2 &&
     test "$(grep "msg=\"trial pods created\" trial=busy-1 " "$T/ctrl.log" | sed "s/.*run_id=//" | sort -u | wc -l)" = 3'
check "experiment busy ERROR" wait_for 20 exp_state_is busy ERROR

# The reason of a failure is in the worker's last lines of output: the kubelet keeps them in the
# container's terminated.message (FallbackToLogsOnError) and the trial's message carries them.
experiment reason '  entrypoint: '"'"'sh -c "echo starting; echo boom: the reason; exit 1"'"'"'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 1}'
check "trial reason-1 ERROR" wait_for 60 trial_state_is reason-1 ERROR
msg=$(field trial reason-1 '{.status.message}')
echo "# message: $msg"
check "message has the exit code and the worker's last output" eval 'case "$msg" in *"exit code 1"*"last output:"*"boom: the reason"*) true ;; *) false ;; esac'
check "experiment reason ERROR" wait_for 20 exp_state_is reason ERROR
