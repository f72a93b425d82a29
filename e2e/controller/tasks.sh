#!/usr/bin/env bash
# Tasks scheduled like trials, on a kdet-local with 2 fake GPUs, a private
# PostgreSQL and the controller API: `det cmd run` prints the command's
# output and exits with its exit code, its logs are kept in the store
# (det cmd logs, --tail); a command that needs a GPU queues behind a
# higher-priority experiment holding both, says why, shows in det job list
# and /api/v1/jobs, and starts once the experiment is killed; a task is
# never preempted (a higher-priority experiment waits for it); killing a
# task frees its GPUs at once for the next task; det job update --ahead-of
# reorders queued tasks; an invalid task config ends the task naming the
# field; nothing is left behind.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 2 || exit 1
start_ctrl_api
DET=$KD_BUILD/bin/det
# the task a det start printed (first line of its stdout)
first() { head -1 "$1"; }

# ---- det cmd run: output, then the exit code
timeout 60 "$DET" cmd run 'sh -c "echo hello from the cluster; echo to stderr >&2; exit 3"' \
    >"$T/run.out" 2>"$T/run.err"
rc=$?
C1=$(first "$T/run.out")
sed 's/^/#   /' "$T/run.out" "$T/run.err"
check "det cmd run exits with the command's exit code (3, got $rc)" test "$rc" = 3
check "it printed the command's stdout" grep -qx "hello from the cluster" "$T/run.out"
check "and its stderr" grep -qx "to stderr" "$T/run.out"
check "the task ended Failed with exit code 3" eval '[ "$(field task "$C1" "{.status.endReason}")" = Failed ] &&
    [ "$(field task "$C1" "{.status.exitCode}")" = 3 ]'
timeout 60 "$DET" cmd run true >"$T/true.out" 2>&1
check "det cmd run true exits 0" test $? = 0
timeout 60 "$DET" cmd run sh -c 'exit 7' >"$T/seven.out" 2>&1
check "several words are the command's argv (exit 7)" test $? = 7
check "its pods are gone" wait_for 20 no_pods kdet.io/task

# ---- --context DIR: the files, .detignore honoured, in a ConfigMap owned by the Task
mkdir -p "$T/ctx/sub"
echo "from the context" >"$T/ctx/sub/data.txt"
echo "not uploaded" >"$T/ctx/secret.key"
printf '*.key\n' >"$T/ctx/.detignore"
timeout 60 "$DET" cmd run --context "$T/ctx" sh -c 'cat sub/data.txt; ls' >"$T/ctx.out" 2>"$T/ctx.err"
rc=$?
C2=$(first "$T/ctx.out")
sed 's/^/#   /' "$T/ctx.out" "$T/ctx.err"
check "det cmd run --context: exit 0 ($rc)" test "$rc" = 0
check "the command ran among the context's files" grep -qx "from the context" "$T/ctx.out"
check ".detignore was honoured" eval '! grep -q "secret.key" "$T/ctx.out"'
check "the context's ConfigMap is owned by the Task" test \
    "$(kubectl get configmap "$C2-context" -o jsonpath='{.metadata.ownerReferences[0].name}')" = "$C2"

"$DET" cmd logs "$C1" >"$T/logs.out" 2>&1
check "det cmd logs: the lines, from the store after the pod is gone" eval 'grep -qx "hello from the cluster" "$T/logs.out" && grep -qx "to stderr" "$T/logs.out"'
"$DET" cmd logs "$C1" --tail 1 >"$T/tail.out" 2>&1
check "--tail 1: one line" test "$(grep -cv '^\[' "$T/tail.out")" = 1
check "the store holds the task's lines" test "$(psqlq "select count(*) from task_logs l join tasks t on t.id = l.task_id where t.name = '$C1'")" -ge 2
check "the store holds its end" test "$(psqlq "select state || ' ' || exit_code || ' ' || end_reason from tasks where name = '$C1'")" = "TERMINATED 3 Failed"
"$DET" task list -a >"$T/list.out" 2>&1
sed 's/^/#   /' "$T/list.out"
check "det task list -a shows it with its exit code" grep -qE "^$C1 +command +TERMINATED +3 " "$T/list.out"

# ---- an invalid config ends the task, naming the field
printf 'apiVersion: kdet.io/v1alpha1\nkind: Task\nmetadata: {name: bad-1}\nspec:\n  kind: command\n  config: {entrypoint: "true", resources: {slots_per_trial: 2}}\n' |
    kubectl apply -f - >/dev/null
check "an invalid task config: TERMINATED Error" wait_for 20 task_state_is bad-1 TERMINATED
check "the message names the field" eval 'field task bad-1 "{.status.message}" | grep -q "spec.config.resources.slots_per_trial: is an experiment field"'
"$DET" cmd run --config-file /dev/null 'model_def:Trial' >"$T/bad.out" 2>&1
check "det refuses a bad entrypoint before creating anything (exit 3)" test $? = 3

# ---- queueing behind a higher-priority experiment, then killing it
experiment hi "  entrypoint: sh -c 'sleep 600'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 2, priority: 10}"
check "the priority-10 experiment holds both GPUs" wait_for 30 n_is 1 running_pods kdet.io/experiment=hi
printf 'description: needs a GPU\nresources: {slots: 1, priority: 50}\n' >"$T/gpu.yaml"
"$DET" cmd run -d --config-file "$T/gpu.yaml" sh -c 'echo got a GPU' >"$T/q.out" 2>&1
Q=$(first "$T/q.out")
check "the task stays QUEUED" wait_for 10 eval '[ "$(field task "$Q" "{.status.message}")" != "" ]'
sleep 2
check "... still QUEUED" task_state_is "$Q" QUEUED
msg=$(field task "$Q" '{.status.message}')
echo "# $Q: $msg"
check "it says what it waits for" grep -q "waiting for 1 GPUs" <<<"$msg"
check "condition Scheduled=False" test "$(field task "$Q" '{.status.conditions[?(@.type=="Scheduled")].status}')" = False
"$DET" job list >"$T/jobs.out" 2>&1
sed 's/^/#   /' "$T/jobs.out"
check "det job list shows the experiment first, then the task" eval 'grep -n . "$T/jobs.out" | grep -E "hi|$Q" | head -2 | tr "\n" " " | grep -qE "hi .*$Q"'
curl -s -H "Authorization: Bearer $KDET_API_TOKEN" "$URL/api/v1/jobs" >"$T/jobs.json"
check "/api/v1/jobs has the task, queued" eval 'python3 -c "import json,sys; j=json.load(open(\"$T/jobs.json\"))[\"jobs\"]; t=[x for x in j if x.get(\"task\")==\"$Q\"]; sys.exit(0 if t and t[0][\"state\"]==\"QUEUED\" and t[0][\"queue_position\"]==1 else 1)"'
"$DET" experiment kill hi >/dev/null 2>&1
check "once the experiment is killed the task runs and completes" wait_for 60 task_state_is "$Q" TERMINATED
check "it completed" test "$(field task "$Q" '{.status.endReason}')" = Completed
"$DET" cmd logs "$Q" >"$T/q.logs" 2>&1
check "its output was kept" grep -qx "got a GPU" "$T/q.logs"

# ---- tasks are not preempted; killing one frees its GPUs at once
printf 'resources: {slots: 2, priority: 90}\n' >"$T/low.yaml"
"$DET" cmd run -d --config-file "$T/low.yaml" sleep 600 >"$T/low.out" 2>&1
L=$(first "$T/low.out")
check "a priority-90 command holds both GPUs" wait_for 30 task_state_is "$L" RUNNING
experiment urgent "  entrypoint: sh -c 'exit 0'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 1, priority: 5}"
check "a priority-5 trial waits" wait_for 20 eval 'field trial urgent-1 "{.status.message}" | grep -q "waiting for 1 GPUs"'
sleep 3
check "the task was not preempted" task_state_is "$L" RUNNING
check "the trial still waits" trial_state_is urgent-1 QUEUED
kubectl delete experiment urgent --wait=false >/dev/null 2>&1
check "the trial is gone" wait_for 20 eval '! kubectl get trial urgent-1 >/dev/null 2>&1'
printf 'resources: {slots: 2}\n' >"$T/two.yaml"
"$DET" cmd run -d --config-file "$T/two.yaml" sh -c 'echo second' >"$T/next.out" 2>&1
N=$(first "$T/next.out")
check "the next 2-GPU task waits" wait_for 10 eval 'field task "$N" "{.status.message}" | grep -q "waiting for 2 GPUs"'
t0=$(date +%s%N)
"$DET" cmd kill "$L" >"$T/kill.out" 2>&1
check "det cmd kill: the task ended Killed" eval '[ "$(field task "$L" "{.status.endReason}")" = Killed ]'
check "the next task starts within 5 s" wait_for 5 eval 'task_state_is "$N" RUNNING || task_state_is "$N" TERMINATED'
echo "# the next task started $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"
check "the killed task's pod is gone" wait_for 10 no_pods "kdet.io/task=$L"
check "the next task completes" wait_for 30 task_state_is "$N" TERMINATED

# ---- ahead-of reorders queued tasks
"$DET" cmd run -d --config-file "$T/low.yaml" sleep 600 >"$T/block.out" 2>&1
B=$(first "$T/block.out")
check "a task holds both GPUs" wait_for 30 task_state_is "$B" RUNNING
"$DET" cmd run -d --config-file "$T/two.yaml" sh -c 'echo A' >"$T/a.out" 2>&1
A=$(first "$T/a.out")
sleep 1
"$DET" cmd run -d --config-file "$T/two.yaml" sh -c 'echo Z' >"$T/z.out" 2>&1
Z=$(first "$T/z.out")
check "the later task waits behind the earlier one" wait_for 10 eval 'field task "$Z" "{.status.message}" | grep -q "queued behind\|waiting for"'
"$DET" job update "$Z" --ahead-of "$A" >"$T/upd.out" 2>&1
check "det job update moves the task ahead (annotation)" test "$(field task "$Z" '{.metadata.annotations.kdet\.io/ahead-of}')" = "$A"
z_before_a() { "$DET" job list 2>/dev/null | awk -v a="$A" -v z="$Z" '$2 == z { zl = NR } $2 == a { al = NR } END { exit !(zl && al && zl < al) }'; }
check "det job list shows the moved task ahead" wait_for 15 z_before_a
# det job list reads the API server; the scheduler orders its queue from the controller's own
# cache. Wait until the scheduler has used the move (A now waits behind Z) before the GPUs free
# up, or a loaded machine can admit A first from a queue that predates it.
check "the scheduler has A queued behind the moved task" wait_for 15 eval \
    'field task "$A" "{.status.message}" | grep -q "queued behind" &&
     field task "$Z" "{.status.message}" | grep -q "waiting for"'
"$DET" cmd kill "$B" >/dev/null 2>&1
check "the moved task runs first" wait_for 20 eval 'task_state_is "$Z" RUNNING || task_state_is "$Z" TERMINATED'
check "both complete" wait_for 40 eval 'task_state_is "$A" TERMINATED && task_state_is "$Z" TERMINATED'
admitted_at() { grep -n "msg=\"task admitted\" task=default/$1 " "$T/ctrl.log" | head -1 | cut -d: -f1; }
check "the scheduler admitted the moved task before the other" test "$(admitted_at "$Z")" -lt "$(admitted_at "$A")"

check "no task pod is left" wait_for 20 no_pods kdet.io/task
check "no trial pod is left" wait_for 20 no_pods kdet.io/trial
check "no task token leaked into the controller log" eval '! grep -q "kdet-task-token" "$T/ctrl.log"'
