#!/bin/bash
# Starts kdet's process kubelet (`kdet-local kubelet`) as a node of a
# control plane started by e2e/kube/up.sh: user system:node:NODE (group
# system:nodes, so the Node authorizer and NodeRestriction apply), fake GPUs,
# kubelet API on a free port. Its pid goes into DIR/pids like the other
# components, so down.sh stops it first (it kills its pods on SIGTERM).
# Waits, bounded, until the Node is Ready.
#
# Usage: e2e/kube/kubelet.sh DIR KDET_LOCAL_BIN [NODE]
#   NODE  kdet-node (default; DIR/node.kubeconfig, pid DIR/pids/kubelet, log
#         DIR/logs/kubelet.log) or kdet-node-2 (DIR/node-kdet-node-2.kubeconfig,
#         pid kubelet-kdet-node-2, log kubelet-kdet-node-2.log): the nodes
#         up.sh made credentials for
#   KDET_KUBE_FAKE_GPUS      nvidia.com/gpu the node advertises (default 2)
#   KDET_KUBE_START_TIMEOUT  seconds to wait for the Node (default 180)
# The pods inherit this script's PATH with KDET_LOCAL_BIN's dir in front, so
# entrypoints find kdet's programs (kdet-launch, fashion-mnist-c) there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/common.sh"

dir="${1:-}"
bin="${2:-}"
node="${3:-kdet-node}"
[[ -n "$dir" && -n "$bin" ]] || kube_die "usage: e2e/kube/kubelet.sh DIR KDET_LOCAL_BIN [NODE]"
[[ -f "$dir/node.kubeconfig" && -d "$dir/pids" ]] || kube_die "$dir is not an e2e/kube/up.sh dir"
[[ -x "$bin" ]] || kube_die "$bin missing (make O=BUILD BUILD/bin/kdet-local)"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
timeout_s="${KDET_KUBE_START_TIMEOUT:-180}"
gpus="${KDET_KUBE_FAKE_GPUS:-2}"
if [[ "$node" == kdet-node ]]; then
	name=kubelet kc="$dir/node.kubeconfig"
else
	name="kubelet-$node" kc="$dir/node-$node.kubeconfig"
fi
[[ -f "$kc" ]] || kube_die "$kc missing: up.sh makes node credentials for kdet-node and kdet-node-2 only"

if [[ -f "$dir/pids/$name" ]] && kill -0 "$(cat "$dir/pids/$name")" 2>/dev/null; then
	kube_log "the process kubelet of $node already runs (pid $(cat "$dir/pids/$name"))"
	exit 0
fi
mkdir -p "$dir/$name" "$dir/logs"
rm -f "$dir/$name/port"
kube_log "starting the process kubelet as node $node ($gpus fake GPUs)..."
PATH="$(dirname "$bin"):$PATH" "$bin" kubelet --kubeconfig "$kc" \
	--node-name "$node" --fake-gpus "$gpus" --port 0 --port-file "$dir/$name/port" \
	--state-dir "$dir/$name/state" >"$dir/logs/$name.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/pids/$name"
echo "$name" >>"$dir/pids/order"

node_ready() {
	[[ "$(KUBECONFIG="$dir/kubeconfig" kubectl get node "$node" \
		-o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
deadline=$(($(date +%s) + timeout_s))
until node_ready; do
	if ! kill -0 "$pid" 2>/dev/null; then
		tail -n 20 "$dir/logs/$name.log" >&2
		kube_die "the process kubelet of $node exited while registering (log: $dir/logs/$name.log)"
	fi
	(($(date +%s) < deadline)) || kube_die "timed out after ${timeout_s}s waiting for node $node to be Ready (log: $dir/logs/$name.log)"
	sleep 0.5
done
kube_log "node $node Ready (kubelet API on 127.0.0.1:$(cat "$dir/$name/port"))"
