#!/bin/bash
# Starts kdet's process kubelet (`kdet-local kubelet`) as the node of a
# control plane started by e2e/kube/up.sh: user system:node:kdet-node (group
# system:nodes, so the Node authorizer and NodeRestriction apply), fake GPUs,
# kubelet API on a free port. Its pid goes into DIR/pids like the other
# components, so down.sh stops it first (it kills its pods on SIGTERM).
# Waits, bounded, until the Node is Ready.
#
# Usage: e2e/kube/kubelet.sh DIR KDET_LOCAL_BIN
#   KDET_KUBE_FAKE_GPUS      nvidia.com/gpu the node advertises (default 4)
#   KDET_KUBE_START_TIMEOUT  seconds to wait for the Node (default 180)
# The pods inherit this script's PATH with KDET_LOCAL_BIN's dir in front, so
# entrypoints find kdet's programs (kdet-launch, fashion-mnist-c) there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/common.sh"

dir="${1:-}"
bin="${2:-}"
[[ -n "$dir" && -n "$bin" ]] || kube_die "usage: e2e/kube/kubelet.sh DIR KDET_LOCAL_BIN"
[[ -f "$dir/node.kubeconfig" && -d "$dir/pids" ]] || kube_die "$dir is not an e2e/kube/up.sh dir"
[[ -x "$bin" ]] || kube_die "$bin missing (make O=BUILD BUILD/bin/kdet-local)"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
timeout_s="${KDET_KUBE_START_TIMEOUT:-180}"
gpus="${KDET_KUBE_FAKE_GPUS:-4}"
node=kdet-node

if [[ -f "$dir/pids/kubelet" ]] && kill -0 "$(cat "$dir/pids/kubelet")" 2>/dev/null; then
	kube_log "the process kubelet already runs (pid $(cat "$dir/pids/kubelet"))"
	exit 0
fi
mkdir -p "$dir/kubelet" "$dir/logs"
rm -f "$dir/kubelet/port"
kube_log "starting the process kubelet as node $node ($gpus fake GPUs)..."
PATH="$(dirname "$bin"):$PATH" "$bin" kubelet --kubeconfig "$dir/node.kubeconfig" \
	--node-name "$node" --fake-gpus "$gpus" --port 0 --port-file "$dir/kubelet/port" \
	--state-dir "$dir/kubelet/state" >"$dir/logs/kubelet.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$dir/pids/kubelet"
echo kubelet >>"$dir/pids/order"

node_ready() {
	[[ "$(KUBECONFIG="$dir/kubeconfig" kubectl get node "$node" \
		-o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
deadline=$(($(date +%s) + timeout_s))
until node_ready; do
	if ! kill -0 "$pid" 2>/dev/null; then
		tail -n 20 "$dir/logs/kubelet.log" >&2
		kube_die "the process kubelet exited while registering (log: $dir/logs/kubelet.log)"
	fi
	(($(date +%s) < deadline)) || kube_die "timed out after ${timeout_s}s waiting for node $node to be Ready (log: $dir/logs/kubelet.log)"
	sleep 0.5
done
kube_log "node $node Ready (kubelet API on 127.0.0.1:$(cat "$dir/kubelet/port"))"
