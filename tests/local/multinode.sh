#!/usr/bin/env bash
# kdet-local's scheduler over several nodes: kdet-local's own node (2 fake
# GPUs) and a `kdet-local kubelet` node agent (2 more) on the same server.
# Per-node GPU accounting, nodeSelector, taints and tolerations, cordon,
# the real scheduler's per-node reason counts when nothing fits, GPUs freed
# by a deleted pod, a pod bound to the agent's node run by the agent, and
# nodes not Ready (Ready=False, or an agent's heartbeat older than 40 s).
# Prints `N passed, N failed`.
set -u
bin="$KD_BUILD/bin/kdet-local"
work=$(mktemp -d /tmp/kd-multinode.XXXXXX)
pass=0 fail=0 api="" agent=""
export KUBECONFIG="$work/kc"
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '     %s\n' "$@"; }
check() { # NAME COMMAND...: ok when the command succeeds
    local name=$1; shift
    if "$@" >/dev/null 2>&1; then ok "$name"; else bad "$name" "$*"; fi
}
cleanup() {
    for p in $agent $api; do kill -TERM "$p" 2>/dev/null; done
    wait 2>/dev/null
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
node_of() { jp pod "$1" '{.spec.nodeName}'; }
bound() { test -n "$(node_of "$1")"; }
on_node() { test "$(node_of "$1")" = "$2"; }
phase_is() { test "$(jp pod "$1" '{.status.phase}')" = "$2"; }
why() { jp pod "$1" '{.status.conditions[?(@.type=="PodScheduled")].message}'; }
why_is() { test "$(why "$1")" = "$2"; }
# pod NAME GPUS [EXTRA_SPEC_YAML]
pod() {
    printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  restartPolicy: Never\n%s  containers:\n  - name: main\n    image: none\n    command: ["sleep", "60"]\n    resources: {limits: {nvidia.com/gpu: "%s"}}\n' \
        "$1" "${3:-}" "$2" | k apply -f - >/dev/null
}

"$bin" --port 0 --port-file "$work/port" --kubeconfig-out "$work/kc" --data-dir "$work/data" \
    --node-name n0 --fake-gpus 2 > "$work/api.log" 2>&1 &
api=$!
wait_for 10 test -s "$work/kc" || { bad "kdet-local started"; echo "$pass passed, $fail failed"; exit 1; }
"$bin" kubelet --kubeconfig "$work/kc" --node-name n1 --fake-gpus 2 --port 0 \
    --state-dir "$work/agent" > "$work/agent.log" 2>&1 &
agent=$!
ready() { test "$(jp node "$1" '{.status.conditions[?(@.type=="Ready")].status}')" = True; }
check "kdet-local's own node n0 is Ready" wait_for 10 ready n0
check "the agent's node n1 is Ready" wait_for 10 ready n1

# ---- per-node GPU accounting ----------------------------------------------------------
pod g1 2
check "g1 (2 GPUs) is bound" wait_for 10 bound g1
pod g2 2
check "g2 (2 GPUs) is bound" wait_for 10 bound g2
check "g1 and g2 are on different nodes" test "$(node_of g1)$(node_of g2)" = n0n1
check "g2 runs on the agent's node" wait_for 10 phase_is g2 Running
pod g3 1
full="0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
check "g3 (1 GPU) does not fit: the reasons counted over both nodes" wait_for 10 why_is g3 "$full"
check "g3 stays Pending, unbound" test -z "$(node_of g3)"
check "a FailedScheduling event says so" wait_for 10 eval \
    'k get events --field-selector involvedObject.name=g3,reason=FailedScheduling -o jsonpath="{.items[0].message}" | grep -qF "2 Insufficient nvidia.com/gpu"'

# ---- nodeSelector ---------------------------------------------------------------------
pod s0 0 '  nodeSelector: {kubernetes.io/hostname: nowhere}
'
check "a selector no node matches: counted per node" wait_for 10 why_is s0 \
    "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
pod s1 0 '  nodeSelector: {kubernetes.io/hostname: n1}
'
check "a selector for n1 binds to n1" wait_for 10 on_node s1 n1

# ---- taints, tolerations, cordon ------------------------------------------------------
k patch node n1 --type=merge -p '{"spec":{"taints":[{"key":"dedicated","value":"ml","effect":"NoSchedule"}]}}' >/dev/null
pod t0 0 '  nodeSelector: {kubernetes.io/hostname: n1}
'
check "an untolerated taint on n1, a selector mismatch on n0" wait_for 10 why_is t0 \
    "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: ml}. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
pod t1 0 '  nodeSelector: {kubernetes.io/hostname: n1}
  tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]
'
check "a pod that tolerates the taint is bound to n1" wait_for 10 on_node t1 n1
pod t2 0 '  nodeSelector: {kubernetes.io/hostname: n1}
  tolerations: [{operator: Exists}]
'
check "an Exists toleration without a key tolerates every taint" wait_for 10 on_node t2 n1
k patch node n1 --type=merge -p '{"spec":{"taints":null,"unschedulable":true}}' >/dev/null
pod c0 0 '  nodeSelector: {kubernetes.io/hostname: n1}
'
check "a cordoned node: unschedulable" wait_for 10 eval 'why c0 | grep -qF "1 node(s) were unschedulable"'
k patch node n1 --type=merge -p '{"spec":{"unschedulable":null}}' >/dev/null
check "uncordoned: the waiting pods go to n1" wait_for 10 eval 'test "$(node_of t0)$(node_of c0)" = n1n1'

# ---- freed GPUs -----------------------------------------------------------------------
k delete pod g1 --wait=false >/dev/null
check "g1's GPUs freed: g3 is bound to its node" wait_for 20 on_node g3 n0
[ "$fail" = 0 ] || { k get pods -o wide; k get pod g3 -o yaml | tail -30; tail -5 "$work/api.log"; }
k delete pod --all --grace-period=0 --force >/dev/null 2>&1
no_pods() { test -z "$(k get pods -o name 2>/dev/null)"; }
check "all pods gone" wait_for 30 no_pods

# ---- nodes that are not Ready --------------------------------------------------------
kill -TERM "$agent" 2>/dev/null
wait "$agent" 2>/dev/null
agent=""
ready_status() { # STATUS HEARTBEAT: n1's Ready condition, as a stopped agent leaves it
    k patch node n1 --subresource=status --type=merge -p "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"$1\",\"reason\":\"KubeletNotReady\",\"message\":\"test\",\"lastHeartbeatTime\":\"$2\",\"lastTransitionTime\":\"$2\"}]}}" >/dev/null
}
ready_status False "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
pod r0 0 '  nodeSelector: {kubernetes.io/hostname: n1}
'
check "a node whose Ready is False counts as tainted not-ready" wait_for 10 why_is r0 \
    "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
ready_status True 2020-01-01T00:00:00Z
check "a node agent's heartbeat older than 40 s counts as unreachable" wait_for 10 eval \
    'why r0 | grep -qF "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }"'
ready_status True "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
check "a fresh heartbeat: bound to n1 again" wait_for 10 on_node r0 n1
# The pod's node agent is gone: its log cannot be fetched, and the error says from where.
logs_err() { ! k logs r0 > /dev/null 2> "$work/logs.err" && cat "$work/logs.err"; }
check "the logs of a pod on a stopped node agent: a Status naming the agent's URL" eval \
    'logs_err | grep -qE "Get .https://127\.0\.0\.1:[0-9]+/containerLogs/default/r0/main"'
k delete pod r0 --grace-period=0 --force >/dev/null 2>&1

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
