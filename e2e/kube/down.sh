#!/bin/bash
# Stops a control plane started by e2e/kube/up.sh and removes its dir.
#
# Usage: e2e/kube/down.sh DIR   (or KDET_KUBE_DIR=DIR e2e/kube/down.sh)
#   KDET_KUBE_KEEP=1  stop the processes but keep DIR (logs, certs, etcd data)
#
# Stops the components in reverse start order: SIGTERM, up to 10 s, then
# SIGKILL. Only the pids recorded in DIR/pids are signalled. Idempotent.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/common.sh"

dir="${1:-${KDET_KUBE_DIR:-}}"
[[ -n "$dir" ]] || kube_die "usage: e2e/kube/down.sh DIR"
if [[ ! -d "$dir" ]]; then
	kube_log "$dir does not exist; nothing to stop"
	exit 0
fi
[[ -d "$dir/pids" ]] || kube_die "$dir does not look like an e2e/kube/up.sh dir (no pids/)"

# A real node (e2e/kube/node/up.sh) first: its pods, kubelet, kube-proxy,
# containerd, mounts, bridge, iptables rules and cgroups.
if [[ -d "$dir/realnode" ]]; then
	"$here/node/down.sh" "$dir" || kube_log "warning: e2e/kube/node/down.sh failed"
fi

names=()
if [[ -f "$dir/pids/order" ]]; then
	mapfile -t names < <(tac "$dir/pids/order")
fi
for name in "${names[@]}"; do
	f="$dir/pids/$name"
	[[ -f "$f" ]] || continue
	pid="$(cat "$f")"
	if kill -0 "$pid" 2>/dev/null; then
		kube_log "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kube_log "$name (pid $pid) ignored SIGTERM for 10 s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$f"
done

if [[ "${KDET_KUBE_KEEP:-0}" == 1 ]]; then
	kube_log "kept $dir (logs in $dir/logs)"
elif awk -v d="$dir/" 'index($5, d) == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
	kube_log "warning: something is still mounted under $dir, so it is kept (not removed through the mount)"
else
	rm -rf "$dir"
fi
