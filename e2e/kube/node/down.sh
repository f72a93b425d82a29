#!/bin/bash
# Removes the real nodes started by e2e/kube/node/up.sh DIR, in this order:
# their pods through the API (so that the kubelets stop them and CNI removes
# their veths and addresses), kube-proxy (and its rules: kube-proxy
# --cleanup), socat, the cluster DNS, the kubelets, each containerd's
# remaining tasks, the containerds, their shims, the mount namespaces of
# nodes 2 and on (see up.sh), every mount under DIR/realnode (the kubelets'
# rshared root dirs, volumes, rootfs, shm and netns mounts), the cgroup roots, the bridges and leftover veths, the KUBE-*
# iptables chains and the guards, and the kernel settings back as they were.
# e2e/kube/down.sh calls it first; idempotent.
#
# Usage: e2e/kube/node/down.sh DIR
#   KDET_KUBE_NODE_BIN  where kube-proxy is (default: the node cache)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/../common.sh"
# shellcheck source=e2e/kube/node/lib.sh
source "$here/lib.sh"

dir="${1:-}"
[[ -n "$dir" ]] || kube_die "usage: e2e/kube/node/down.sh DIR"
rn="$dir/realnode"
[[ -d "$rn" ]] || exit 0
nbin="${KDET_KUBE_NODE_BIN:-$KUBE_NODE_BIN}"

# stop NAME: TERM the recorded pid, 10 s, then KILL.
stop() {
	local f="$dir/pids/$1" pid
	[[ -f "$f" ]] || return 0
	pid="$(cat "$f")"
	if kill -0 "$pid" 2>/dev/null; then
		kube_log "stopping $1 (pid $pid)"
		kill -TERM "$pid" 2>/dev/null
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && { kube_log "$1 ignored SIGTERM for 10 s; killing it"; kill -KILL "$pid" 2>/dev/null; }
	fi
	rm -f "$f"
}
alive() { [[ -f "$dir/pids/$1" ]] && kill -0 "$(cat "$dir/pids/$1")" 2>/dev/null; }

# The nodes up.sh started: their names, pid suffixes and dirs.
count="$(cat "$rn/count" 2>/dev/null || echo 1)"
[[ "$count" =~ ^[12]$ ]] || count=1
any_kubelet=0
for i in $(seq 1 "$count"); do alive "kubelet-real$(rn_sfx "$i")" && any_kubelet=1; done

# 1. Pods, while the kubelets still run: they stop them through the CRI.
on_real_nodes() {
	local i
	for i in $(seq 1 "$count"); do
		kubectl get pods -A --field-selector "spec.nodeName=$(rn_node "$i")" --no-headers \
			-o custom-columns=NS:.metadata.namespace,N:.metadata.name 2>/dev/null
	done
}
if ((any_kubelet)) && alive kube-apiserver && [[ -f "$dir/kubeconfig" ]]; then
	export KUBECONFIG="$dir/kubeconfig"
	if [[ -n "$(on_real_nodes)" ]]; then
		kube_log "deleting the pods on the real nodes..."
		on_real_nodes | while read -r ns n; do
			kubectl -n "$ns" delete pod "$n" --grace-period=2 --wait=false >/dev/null 2>&1
		done
		for _ in $(seq 1 60); do
			[[ -z "$(on_real_nodes)" ]] && break
			sleep 1
		done
	fi
fi

# 2. kube-proxy and its rules, the forwarder, the cluster DNS, the kubelets.
stop kube-proxy
if [[ -x "$nbin/kube-proxy" ]]; then
	"$nbin/kube-proxy" --cleanup >"$dir/logs/kube-proxy-cleanup.log" 2>&1 ||
		kube_log "kube-proxy --cleanup exited non-zero (without ipset its IPVS part fails; the KUBE-* chains are removed below either way)"
fi
stop socat-api
stop dns-sync
stop dns
for i in $(seq 1 "$count"); do stop "kubelet-real$(rn_sfx "$i")"; done

# 3. Each containerd: what its kubelet left running, then containerd and its
# shims.
for i in $(seq 1 "$count"); do
	nd="$(rn_dir "$rn" "$i")" sfx="$(rn_sfx "$i")"
	sock="$nd/containerd/containerd.sock"
	if alive "containerd$sfx"; then
		for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1
		done
		sleep 1
		for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1
		done
	fi
	stop "containerd$sfx"
	# The v2 shims outlive containerd; ours were started with -address $sock.
	for p in /proc/[0-9]*; do
		[[ -r "$p/cmdline" ]] || continue
		if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "containerd-shim.* -address $sock "; then
			kube_log "killing containerd shim ${p#/proc/}"
			kill -KILL "${p#/proc/}" 2>/dev/null
		fi
	done
	# The runc containers of a killed shim: runc's own state says which.
	if [[ -d "$nd/containerd/runc/k8s.io" ]]; then
		for c in "$nd/containerd/runc/k8s.io"/*; do
			[[ -d "$c" ]] || continue
			runc --root "$nd/containerd/runc/k8s.io" kill "$(basename "$c")" KILL >/dev/null 2>&1
			runc --root "$nd/containerd/runc/k8s.io" delete -f "$(basename "$c")" >/dev/null 2>&1
		done
	fi
	# Node I>1's mount namespace: its mounts go with its last process.
	stop "mountns$sfx"
done

# 4. Mounts, cgroups, network, iptables, sysctls.
rn_unmount_under "$rn"
while read -r cg; do
	[[ -z "$cg" ]] || rn_cgroup_remove "$cg"
done < <(cat "$rn/cgroup-roots" 2>/dev/null)
while read -r br; do
	[[ -n "$br" ]] && ip link show "$br" >/dev/null 2>&1 || continue
	for v in $(ip -o link show master "$br" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
		kube_log "removing leftover veth $v"
		ip link del "$v" 2>/dev/null
	done
	ip link del "$br" && kube_log "removed bridge $br"
done < <(cat "$rn/bridges" 2>/dev/null)
rn_iptables_clean
rn_sysctl_restore "$rn/sysctl.saved"
left="$(rn_kube_chains)"
[[ -z "$left" ]] || kube_log "warning: iptables chains left: $left"
if [[ -n "$(rn_mounts_under "$rn")" ]]; then
	kube_log "warning: mounts left under $rn, so it stays: $(rn_mounts_under "$rn" | head -n3 | tr '\n' ' ')"
	exit 1
fi
rm -rf "$rn" || kube_log "warning: could not remove $rn"
exit 0
