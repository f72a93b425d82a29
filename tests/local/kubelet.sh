#!/usr/bin/env bash
# `kdet-local kubelet` as the node agent of another API server (kdet-local
# itself with --no-kubelet): Node registration and Lease renewal, pods bound to
# the node run with kubelet-shaped status, OnFailure restarts, deletion with
# SIGTERM then SIGKILL after the grace period, logs over HTTPS on the kubelet
# port, and a kill -9 of the agent with its pods' status kept consistent.
# Prints `N passed, N failed`.
set -u
bin="$KD_BUILD/bin/kdet-local"
work=$(mktemp -d /tmp/kd-kubelet.XXXXXX)
pass=0 fail=0 api="" agent=""
export KUBECONFIG="$work/kc"
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '     %s\n' "$@"; }
check() { # NAME COMMAND...: ok when the command succeeds
    local name=$1; shift
    if "$@" >/dev/null 2>&1; then ok "$name"; else bad "$name" "$*"; fi
}
cleanup() {
    for p in $agent $api; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    pkill -9 -f "kd-kubelet-ctr-$$" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
k() { kubectl --request-timeout=10s "$@"; }
jp() { k get "$1" "$2" -o "jsonpath=$3" 2>/dev/null; }
wait_for() { # SECONDS COMMAND...: poll every 0.2 s until the command succeeds
    local n=$(($1 * 5)); shift
    for _ in $(seq 1 "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    return 1
}
start_agent() {
    rm -f "$work/kport"
    "$bin" kubelet --kubeconfig "$work/kc" --node-name n1 --fake-gpus 2 --port 0 \
        --port-file "$work/kport" --state-dir "$work/state" >> "$work/agent.log" 2>&1 &
    agent=$!
    wait_for 10 test -s "$work/kport"
    kport=$(cat "$work/kport")
}

"$bin" --no-kubelet --port 0 --port-file "$work/port" --kubeconfig-out "$work/kc" \
    > "$work/api.log" 2>&1 &
api=$!
wait_for 10 test -s "$work/kc" || { bad "kdet-local started"; echo "$pass passed, $fail failed"; exit 1; }
"$bin" kubelet --kubeconfig "$work/kc" --node-name 'n1,x' >/dev/null 2>&1
check "an invalid --node-name is a usage error" test $? = 2
"$bin" kubelet --node-name n1 >/dev/null 2>&1
check "--kubeconfig is required" test $? = 2
start_agent

# ---- the Node and its Lease ----------------------------------------------------------
wait_for 10 test "$(jp node n1 '{.status.conditions[?(@.type=="Ready")].status}')" = True
check "node n1 is Ready" test "$(jp node n1 '{.status.conditions[?(@.type=="Ready")].status}')" = True
check "capacity has nvidia.com/gpu=2" test "$(jp node n1 '{.status.capacity.nvidia\.com/gpu}')" = 2
check "allocatable has cpu, memory, pods" test -n "$(jp node n1 '{.status.allocatable.cpu}/{.status.allocatable.memory}/{.status.allocatable.pods}' | grep -E '^[0-9]+/[0-9]+Ki/110$')"
check "label kubernetes.io/hostname" test "$(jp node n1 '{.metadata.labels.kubernetes\.io/hostname}')" = n1
check "daemonEndpoints.kubeletEndpoint.Port is the kubelet port" test "$(jp node n1 '{.status.daemonEndpoints.kubeletEndpoint.Port}')" = "$kport"
renew1=$(k -n kube-node-lease get lease n1 -o 'jsonpath={.spec.renewTime}' 2>/dev/null)
hb1=$(jp node n1 '{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
check "lease in kube-node-lease held by n1" test "$(k -n kube-node-lease get lease n1 -o 'jsonpath={.spec.holderIdentity}')" = n1

# ---- pods bound to n1 ------------------------------------------------------------------
cat > "$work/pods.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: ok1}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - {name: main, image: none, command: ["sh", "-c", "echo hello; echo line2; echo line3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: fail1}
spec:
  nodeName: n1
  restartPolicy: OnFailure
  containers:
  - {name: main, image: none, command: ["sh", "-c", "echo failing; exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  nodeName: n1
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: none, command: ["sh", "-c", "trap '' TERM; : kd-kubelet-ctr-$$; echo \$\$ > $work/stubborn.pid; while :; do sleep 0.1; done"]}
---
apiVersion: v1
kind: Pod
metadata: {name: polite}
spec:
  nodeName: n1
  terminationGracePeriodSeconds: 30
  containers:
  - {name: main, image: none, command: ["sh", "-c", "trap 'echo term > $work/polite.term; exit 0' TERM; : kd-kubelet-ctr-$$; while :; do sleep 0.1; done"]}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu1}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - name: main
    image: none
    command: ["sh", "-c", "echo gpus=\$CUDA_VISIBLE_DEVICES"]
    resources: {limits: {nvidia.com/gpu: 2}}
---
apiVersion: v1
kind: Pod
metadata: {name: always}
spec:
  nodeName: n1
  containers:
  - {name: main, image: none, command: ["sh", "-c", "echo up; echo \$\$ > $work/always.pid; sleep 1000; : kd-kubelet-ctr-$$"]}
---
apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - {name: main, image: none, command: ["sh", "-c", "echo up; sleep 999; : kd-kubelet-ctr-$$"]}
---
apiVersion: v1
kind: Pod
metadata: {name: msg-lines}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - {name: main, image: none, terminationMessagePolicy: FallbackToLogsOnError, command: ["sh", "-c", "i=1; while [ \$i -le 100 ]; do echo line \$i; i=\$((i+1)); done; exit 3"]}
---
apiVersion: v1
kind: Pod
metadata: {name: msg-bytes}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - {name: main, image: none, terminationMessagePolicy: FallbackToLogsOnError, command: ["sh", "-c", "i=1; while [ \$i -le 30 ]; do printf '%099d\\n' \$i; i=\$((i+1)); done; echo boom: the reason >&2; exit 1"]}
---
apiVersion: v1
kind: Pod
metadata: {name: msg-ok}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - {name: main, image: none, terminationMessagePolicy: FallbackToLogsOnError, command: ["sh", "-c", "echo all fine; exit 0"]}
---
apiVersion: v1
kind: Pod
metadata: {name: msg-file}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - {name: main, image: none, command: ["sh", "-c", "echo not kept; exit 3"]}
YAML
check "pods created" k apply -f "$work/pods.yaml"
wait_for 20 test "$(jp pod ok1 '{.status.phase}')" = Succeeded
check "ok1 Succeeded" test "$(jp pod ok1 '{.status.phase}')" = Succeeded
check "ok1 exit code 0, reason Completed" test "$(jp pod ok1 '{.status.containerStatuses[0].state.terminated.exitCode}/{.status.containerStatuses[0].state.terminated.reason}')" = 0/Completed
check "ok1 conditions PodScheduled/Initialized True, Ready/ContainersReady False" test "$(jp pod ok1 '{.status.conditions[?(@.type=="PodScheduled")].status}{.status.conditions[?(@.type=="Initialized")].status}{.status.conditions[?(@.type=="Ready")].status}{.status.conditions[?(@.type=="ContainersReady")].status}')" = TrueTrueFalseFalse
check "ok1 podIP/hostIP 127.0.0.1 and a startTime" test -n "$(jp pod ok1 '{.status.podIP} {.status.hostIP} {.status.startTime}' | grep -E '^127.0.0.1 127.0.0.1 20[0-9-]+T')"
wait_for 20 test "$(jp pod fail1 '{.status.containerStatuses[0].restartCount}')" -ge 1
check "fail1 (OnFailure, exit 3) restarted" test "$(jp pod fail1 '{.status.containerStatuses[0].restartCount}')" -ge 1
check "fail1 lastState has exit code 3" test "$(jp pod fail1 '{.status.containerStatuses[0].lastState.terminated.exitCode}')" = 3
check "fail1 stays Running (restarting)" test "$(jp pod fail1 '{.status.phase}')" = Running
# ---- terminationMessagePolicy FallbackToLogsOnError -------------------------------------
term() { jp pod "$1" '{.status.containerStatuses[0].state.terminated.message}'; }
for p in msg-lines msg-bytes msg-ok msg-file; do
    wait_for 20 test -n "$(jp pod $p '{.status.containerStatuses[0].state.terminated.exitCode}')"
done
check "msg-lines exit 3: the message is the log's last 80 lines" test "$(term msg-lines)" = "$(seq 21 100 | sed 's/^/line /')"
check "msg-bytes exit 1: the message is the log's last 2048 bytes" test "$(term msg-bytes | wc -c)" = 2048
check "msg-bytes: the message ends with the reason" test "$(term msg-bytes | tail -n 1)" = "boom: the reason"
check "msg-ok exit 0: no message" test -z "$(term msg-ok)" -a "$(jp pod msg-ok '{.status.phase}')" = Succeeded
check "msg-file (policy File by default) exit 3: no message" test -z "$(term msg-file)" -a "$(jp pod msg-file '{.spec.containers[0].terminationMessagePolicy}')" = File
k apply -f - > "$work/badpolicy.out" 2>&1 <<YAML
apiVersion: v1
kind: Pod
metadata: {name: msg-bad}
spec:
  containers: [{name: main, image: none, terminationMessagePolicy: Sometimes}]
YAML
check "an unknown terminationMessagePolicy is refused, naming the field" grep -q 'spec.containers\[0\].terminationMessagePolicy: Unsupported value: "Sometimes"' "$work/badpolicy.out"
wait_for 20 test "$(jp pod always '{.status.phase}')$(jp pod never '{.status.phase}')$(jp pod polite '{.status.phase}')$(jp pod stubborn '{.status.phase}')" = RunningRunningRunningRunning
check "long-running pods Running and Ready" test "$(jp pod always '{.status.conditions[?(@.type=="Ready")].status}')" = True

# ---- logs on the kubelet port -----------------------------------------------------------
base="https://127.0.0.1:$kport"
check "/healthz over HTTPS" test "$(curl -sk --max-time 5 "$base/healthz")" = ok
got=$(curl -sk --max-time 5 "$base/containerLogs/default/ok1/main")
check "containerLogs of ok1" test "$got" = "$(printf 'hello\nline2\nline3')"
check "containerLogs tailLines=1" test "$(curl -sk --max-time 5 "$base/containerLogs/default/ok1/main?tailLines=1")" = line3
check "containerLogs previous of fail1" test "$(curl -sk --max-time 5 "$base/containerLogs/default/fail1/main?previous=true")" = failing
check "containerLogs follow streams a running container" test "$(curl -sk --max-time 2 "$base/containerLogs/default/always/main?follow=true")" = up
check "unknown pod: 404" test "$(curl -sk -o /dev/null -w '%{http_code}' --max-time 5 "$base/containerLogs/default/nope/main")" = 404
check "plain HTTP is refused" test "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$kport/healthz")" != 200

wait_for 20 test "$(jp pod gpu1 '{.status.phase}')" = Succeeded
check "a pod asking for 2 GPUs sees both fake devices" test "$(k logs gpu1)" = "gpus=0,1"
check "kubectl logs through the API server (proxied to the kubelet port)" test "$(k logs ok1)" = "$(printf 'hello\nline2\nline3')"
check "kubectl logs --tail=1" test "$(k logs ok1 --tail=1)" = line3
check "kubectl logs --previous" test "$(k logs fail1 --previous)" = failing
check "kubectl logs -f streams" test "$(timeout 3 kubectl logs -f always)" = up

# ---- deletion ------------------------------------------------------------------------------
spid=$(cat "$work/stubborn.pid" 2>/dev/null)
t0=$(date +%s%N)
k delete pod polite --wait=false >/dev/null 2>&1
k delete pod stubborn --wait=false >/dev/null 2>&1
wait_for 20 test -z "$(k get pod polite stubborn --ignore-not-found -o name)"
t1=$(date +%s%N)
check "deleted pods go away" test -z "$(k get pod polite stubborn --ignore-not-found -o name)"
check "polite got SIGTERM" test -s "$work/polite.term"
check "stubborn was killed after its 2 s grace period" test "$(( (t1 - t0) / 1000000 ))" -ge 1900
check "stubborn's process is gone" test -n "$spid" -a ! -d "/proc/$spid"

# ---- pod folders are recycled ----------------------------------------------------------------
# A gone pod's folder, tidied, waits in STATE/spare and becomes the next pod's folder.
st="$work/state"
recpod() { # NAME CONTAINER2 SCRIPT
    k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  nodeName: n1
  restartPolicy: Never
  containers:
  - {name: main, image: none, command: ["sh", "-c", "$3"]}
  - {name: $2, image: none, command: ["sh", "-c", "echo $2 was here"]}
YAML
}
recpod rec1 old 'echo rec1 was here; echo x > data; mkdir -p sub/d; touch sub/d/f main/extra; chmod 700 .'
wait_for 20 test "$(jp pod rec1 '{.status.phase}')" = Succeeded
uid1=$(jp pod rec1 '{.metadata.uid}')
ino1=$(stat -c %i "$st/pods/$uid1" 2>/dev/null)
check "rec1 wrote into its folder" test -f "$st/pods/$uid1/data" -a -d "$st/pods/$uid1/old"
# The first run's logs are kept too, emptied, unless something still has one open: here the
# test holds old's log, as a reader following it would.
lino1=$(stat -c %i "$st/pods/$uid1/main/0.log" 2>/dev/null)
exec 7<"$st/pods/$uid1/old/0.log"
k delete pod rec1 --wait=false >/dev/null 2>&1
wait_for 20 test ! -e "$st/pods/$uid1"
spare_of() { for d in "$st"/spare/*; do [ "$(stat -c %i "$d" 2>/dev/null)" = "$1" ] && echo "$d"; done; }
sp=$(spare_of "$ino1")
check "rec1's folder went into the spares" test -n "$ino1" -a -n "$sp"
check "the spare keeps the container folders, main's unheld log and pids, emptied" test "$(cd "$sp" 2>/dev/null && find . | sort | tr '\n' ' ')" = ". ./main ./main/0.log ./old ./pids "
check "the spare's pids file and kept log are empty" test -f "$sp/pids" -a ! -s "$sp/pids" -a -f "$sp/main/0.log" -a ! -s "$sp/main/0.log"
check "the kept log is rec1's main log (the same inode)" test -n "$lino1" -a "$(stat -c %i "$sp/main/0.log" 2>/dev/null)" = "$lino1"
check "the reader of old's log still reads all of it" test "$(cat <&7)" = "old was here"
recpod rec2 new 'sleep 1; ls -A; ls -A main'
wait_for 20 test "$(jp pod rec2 '{.status.phase}')" = Succeeded
uid2=$(jp pod rec2 '{.metadata.uid}')
# The kernel may hand a freed inode number out again, so the spare itself must be gone too.
check "rec2 has rec1's folder (the same inode)" test -n "$uid2" -a -n "$sp" -a "$(stat -c %i "$st/pods/$uid2" 2>/dev/null)" = "$ino1"
check "and it left the spares" test -n "$sp" -a ! -e "$sp" -a -z "$(spare_of "$ino1")"
check "rec2's folder holds only its own: main, new, pids" test "$(ls -A "$st/pods/$uid2" | tr '\n' ' ')" = "main new pids "
check "rec2's main log is rec1's, used again" test "$(stat -c %i "$st/pods/$uid2/main/0.log" 2>/dev/null)" = "$lino1"
check "rec2 saw none of rec1's files or logs" test "$(k logs rec2 -c main)" = "$(printf 'main\nnew\npids\n0.log')"
check "the folder has the kubelet's mode again (rec1 made it 700)" test "$(stat -c %a "$st/pods/$uid2")" = "$(stat -c %a "$st/spare")"
check "pids holds rec2's two containers only" test "$(wc -l < "$st/pods/$uid2/pids")" = 2
exec 7<&-
# A log opened in the spare, after its pod went, is not given to the next pod either.
lino2=$(stat -c %i "$st/pods/$uid2/new/0.log" 2>/dev/null)
k delete pod rec2 --wait=false >/dev/null 2>&1
wait_for 20 test ! -e "$st/pods/$uid2"
sp=$(spare_of "$ino1")
exec 8<"$sp/main/0.log"
recpod rec3 new 'echo rec3 was here'
wait_for 20 test "$(jp pod rec3 '{.status.phase}')" = Succeeded
uid3=$(jp pod rec3 '{.metadata.uid}')
check "rec3 has the folder again, new's log used again" test -n "$sp" -a "$(stat -c %i "$st/pods/$uid3" 2>/dev/null)" = "$ino1" -a -n "$lino2" -a "$(stat -c %i "$st/pods/$uid3/new/0.log" 2>/dev/null)" = "$lino2"
check "but not main's log, held open in the spare" test -n "$lino1" -a -f "$st/pods/$uid3/main/0.log" -a "$(stat -c %i "$st/pods/$uid3/main/0.log" 2>/dev/null)" != "$lino1"
check "rec3's logs are its own" test "$(k logs rec3 -c main)/$(k logs rec3 -c new)" = "rec3 was here/new was here"
exec 8<&-
k delete pod rec3 --wait=false >/dev/null 2>&1

# ---- the agent killed and restarted ----------------------------------------------------------
apid=$(cat "$work/always.pid" 2>/dev/null)
lease_now() { k -n kube-node-lease get lease n1 -o 'jsonpath={.spec.renewTime}' 2>/dev/null; }
wait_for 15 test "$(lease_now)" != "$renew1"
check "lease renewed (every 10 s)" test -n "$renew1" -a -n "$(lease_now)" -a "$(lease_now)" != "$renew1"
wait_for 15 test "$(jp node n1 '{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')" != "$hb1"
check "node heartbeat refreshed (every 10 s)" test "$(jp node n1 '{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')" != "$hb1"
nspare=$(ls "$st/spare" | wc -l)
kill -9 "$agent"
wait "$agent" 2>/dev/null
start_agent
check "an earlier run's spare folders are removed at start ($nspare before)" test "$nspare" -gt 0 -a -d "$st/spare" -a -z "$(ls -A "$st/spare")"
wait_for 20 test "$(jp pod always '{.status.containerStatuses[0].restartCount}')" = 1
check "Always pod restarted once after the agent restart" test "$(jp pod always '{.status.containerStatuses[0].restartCount}/{.status.phase}')" = 1/Running
check "its old process was killed" test -n "$apid" -a ! -d "/proc/$apid"
wait_for 20 test "$(jp pod never '{.status.phase}')" = Failed
check "Never pod running at the crash ends Failed" test "$(jp pod never '{.status.phase}')" = Failed
check "ok1 still Succeeded" test "$(jp pod ok1 '{.status.phase}')" = Succeeded
check "node still Ready" test "$(jp node n1 '{.status.conditions[?(@.type=="Ready")].status}')" = True

# ---- shutdown: nothing left behind ---------------------------------------------------------------
kill "$agent"; wait "$agent" 2>/dev/null; agent=""
kill "$api"; wait "$api" 2>/dev/null; api=""
check "no container process left" test -z "$(pgrep -f "kd-kubelet-ctr-$$")"
check "the spare folders are removed when the kubelet stops" test ! -e "$st/spare"
if [ "$fail" -gt 0 ]; then tail -20 "$work/agent.log"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
