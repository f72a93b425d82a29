#!/usr/bin/env bash
# Trial logs kept in the store: a trial of two workers prints lines on both
# ranks, then rank 1 fails with a Python traceback. kdet-launch ships every
# line to the controller API; once the trial is ERROR its pods are deleted,
# and `det trial logs` still shows every line with its rank prefix (by name
# and by integer id), `--tail 3` the last three (the traceback), `--grep`
# finds the exception, `-f` on the ended trial prints all and returns, and
# `det experiment logs` prefixes the trial. Without the controller API det
# reads the pods and says they are gone. Deleting the experiment removes
# its logs from the store. A cancel_retries log policy ends a failing trial without a restart.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 2 || exit 1
printf 'e2e-user-token-0123456789abcdef\n' >"$T/user-token"
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default \
    --user-token-file "$T/user-token"
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
echo "# controller url: $URL"

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
cat >"$T/worker.sh" <<W
for i in 1 2 3; do echo "rank \$RANK says hello \$i"; done
echo "rank \$RANK warns on stderr" >&2
if [ "\$RANK" = 1 ]; then
    sleep 1
    exec $PY -c 'import sys
def step(x):
    return 1 / x
step(0)'
fi
W
experiment logs "  entrypoint: sh $T/worker.sh
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 2}"
check "trial ERROR" wait_for 90 trial_state_is logs-1 ERROR
kubectl delete pods -l kdet.io/trial=logs-1 --wait=true >/dev/null 2>&1
check "the trial's pods are gone" wait_for 20 no_pods kdet.io/trial=logs-1

export KDET_API_URL=$URL KDET_API_TOKEN=e2e-user-token-0123456789abcdef
DET=$KD_BUILD/bin/det
"$DET" trial logs logs-1 >"$T/all.out" 2>"$T/all.err"
rc=$?
echo "# det trial logs (exit $rc):"
sed 's/^/#   /' "$T/all.out"
check "det trial logs exits 0 after the pods are gone" test "$rc" = 0
for r in 0 1; do
    for i in 1 2 3; do
        check "rank $r line $i, prefixed" grep -qx "\[rank=$r\] rank $r says hello $i" "$T/all.out"
    done
    check "rank $r's stderr line" grep -qx "\[rank=$r\] rank $r warns on stderr" "$T/all.out"
done
check "the traceback, prefixed with rank 1" grep -qx '\[rank=1\] Traceback (most recent call last):' "$T/all.out"
check "the exception line" grep -qx '\[rank=1\] ZeroDivisionError: division by zero' "$T/all.out"
check "each line once" test "$(sort "$T/all.out" | uniq -d | wc -l)" = 0
check "the store holds them once" test "$(psqlq "select count(*) from trial_logs")" = "$(wc -l <"$T/all.out")"

"$DET" trial logs logs-1 --tail 3 >"$T/tail.out" 2>&1
check "--tail 3: three lines" test "$(wc -l <"$T/tail.out")" = 3
check "--tail 3: the last three (the end of the traceback)" test "$(tail -3 "$T/all.out")" = "$(cat "$T/tail.out")"
check "--tail 3 ends with the exception" eval 'tail -1 "$T/tail.out" | grep -qx "\[rank=1\] ZeroDivisionError: division by zero"'

"$DET" trial logs logs-1 --grep 'Error: division' >"$T/grep.out" 2>&1
check "--grep finds the exception, only it" test "$(cat "$T/grep.out")" = "[rank=1] ZeroDivisionError: division by zero"
"$DET" trial logs logs-1 --grep '(' >"$T/badgrep.out" 2>&1
rc=$?
check "a bad --grep: exit 2, naming the expression" eval '[ $rc = 2 ] && grep -q "invalid regular expression" "$T/badgrep.out"'

id=$(psqlq "select id from trials where uid = '$(field trial logs-1 '{.metadata.uid}')'")
"$DET" trial logs "$id" >"$T/byid.out" 2>&1
check "by integer id ($id): the same lines" cmp -s "$T/all.out" "$T/byid.out"

timeout 30 "$DET" trial logs logs-1 -f >"$T/follow.out" 2>&1
rc=$?
check "-f on an ended trial prints everything and returns (exit $rc)" eval '[ $rc = 0 ] && cmp -s "$T/all.out" "$T/follow.out"'
timeout 30 "$DET" trial logs logs-1 -f --tail 1 >"$T/follow1.out" 2>&1
check "-f --tail 1: the last line, then the end" test "$(cat "$T/follow1.out")" = "[rank=1] ZeroDivisionError: division by zero"

"$DET" experiment logs logs >"$T/exp.out" 2>&1
check "det experiment logs prefixes the trial" grep -qx '\[logs-1\] \[rank=1\] ZeroDivisionError: division by zero' "$T/exp.out"
check "det experiment logs: every line" test "$(wc -l <"$T/exp.out")" = "$(wc -l <"$T/all.out")"

# Without the controller API: the pods' logs, which are gone.
env -u KDET_API_URL -u KDET_API_TOKEN KDET_DATA_DIR="$T/no-deploy" "$DET" trial logs logs-1 >"$T/pods.out" 2>&1
rc=$?
cat "$T/pods.out" | sed "s/^/#   /"
check "without the API: the pod path says the pods are gone (exit $rc)" grep -q "has no pods" "$T/pods.out"

# A log policy: cancel_retries on a pattern ends a failed trial at once, max_restarts or not.
printf 'echo starting\necho "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2\nexit 1\n' >"$T/oom.sh"
experiment oom "  entrypoint: sh $T/oom.sh
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 3
  log_policies:
    - name: CUDA OOM
      pattern: 'CUDA out of memory'
      action: cancel_retries
  resources: {slots_per_trial: 1}"
check "oom-1 ERROR" wait_for 60 trial_state_is oom-1 ERROR
msg=$(field trial oom-1 '{.status.message}')
echo "# message: $msg"
r=$(field trial oom-1 '{.status.restarts}')
check "not restarted (restarts ${r:-0} of max_restarts 3)" test "${r:-0}" = 0
check "the message names the policy and its pattern" eval 'case "$msg" in *'"'"'not restarted: log policy "CUDA OOM" (pattern CUDA out of memory) matched (cancel_retries)'"'"'*) true ;; *) false ;; esac'
check "the match is in the trial's status" test "$(field trial oom-1 '{.status.logPolicies[0].action}')" = cancel_retries
check "one attempt only" test "$(grep -c 'msg="trial pods created" trial=oom-1' "$T/ctrl.log")" = 1

# The experiment deleted: its logs go from the store.
kubectl delete experiment logs --wait=false >/dev/null
check "the deleted experiment's logs are removed" wait_for 60 n_is 0 psqlq "select count(*) from trial_logs l
    join trials t on t.id = l.trial_id join experiments e on e.id = t.experiment_id where e.name = 'logs'"
check "the controller said so" wait_for 10 grep -q "msg=\"deleted experiment's trial logs removed\"" "$T/ctrl.log"
