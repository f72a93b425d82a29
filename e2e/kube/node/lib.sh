# shellcheck shell=bash disable=SC2034 # sourced: the names are used by the scripts that source it
# Shared by e2e/kube/node/up.sh, down.sh and e2e/kube/realnode.sh: the real
# node's names, addresses and the helpers that set up and undo its host
# state. Sourced after e2e/kube/common.sh, never run.

# The real nodes: RN_COUNT of them (KDET_REALNODE_NODES, 1 or 2; default 2),
# each a kubelet with its own containerd, bridge and /24. Node i (1-based) is
# rn_node i, with the bridge rn_bridge i and the range rn_net i; node 1 also
# carries what the host does once for all of them (kube-proxy, the API
# forwarder, cluster DNS).
RN_COUNT="${KDET_REALNODE_NODES:-2}"
RN_NODE=kdet-real-node
# All pod ranges: 10.244.0.0/24 (node 1), 10.244.1.0/24 (node 2). Nothing
# routes there but this machine's own bridges.
RN_BASE=10.244
RN_CLUSTER_NET="$RN_BASE.0.0/16"
RN_NET="$RN_BASE.0" # node 1's
RN_GW="$RN_NET.1"
RN_BRIDGE=kdet-cni0
# The real nodes are the resource pool `real` of kdet (label) and only pods
# that tolerate the pool's taint run there (kdet's trial pods of that pool
# do; the other suites' pods, meant for the process kubelets, do not).
RN_POOL=real
RN_POOL_LABEL=kdet.io/resource-pool
RN_TAINT="$RN_POOL_LABEL=$RN_POOL"
# The service range of e2e/kube/up.sh (--service-cluster-ip-range) and the
# `kubernetes` Service's ClusterIP in it.
RN_SVC_NET=10.0.0.0/24
RN_API_VIP=10.0.0.1
# Cluster DNS (dnsmasq on node 1's bridge address, fed from the Services).
RN_DNS="$RN_GW"
RN_GUARD=KDET-REALNODE-GUARD
RN_GUARD_FWD=KDET-REALNODE-FWD
RN_CNI_BIN=/usr/lib/cni
RN_PAUSE_IMAGE=kdet.local/pause:e2e
RN_PROBE_IMAGE=kdet.local/probe:e2e
# Installed by node/up.sh when missing (only for the real-node suites).
RN_DEB_PACKAGES=(containerd runc containernetworking-plugins iptables iproute2 socat gcc libc6-dev dnsmasq-base)

# The kernel settings the kubelet (setupKernelTunables, since
# protectKernelDefaults=true would make it exit instead) and kube-proxy
# (route_localnet) change, and those the setup could: saved before, put back
# after.
RN_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
	net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.netfilter.nf_conntrack_max)

# rn_node I, rn_net I, rn_gw I, rn_bridge I: node I's name, /24 prefix,
# bridge address and bridge.
rn_node() { if (($1 == 1)); then echo "$RN_NODE"; else echo "$RN_NODE-$1"; fi; }
rn_net() { echo "$RN_BASE.$(($1 - 1))"; }
rn_gw() { echo "$RN_BASE.$(($1 - 1)).1"; }
rn_bridge() { echo "kdet-cni$(($1 - 1))"; }
# rn_sfx I: the suffix of node I's pid and log names ("" for node 1).
rn_sfx() { if (($1 == 1)); then echo ""; else echo "-$1"; fi; }
# rn_dir RN I: node I's own state dir under DIR/realnode.
rn_dir() { if (($2 == 1)); then echo "$1"; else echo "$1/node$2"; fi; }
# kube_free_port is in common.sh.

rn_secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

rn_sysctl_save() {
	local k v
	: >"$1"
	for k in "${RN_SYSCTLS[@]}"; do
		v="$(sysctl -n "$k" 2>/dev/null)" || continue
		echo "$k=$v" >>"$1"
	done
}

# rn_sysctl_restore FILE: put back every saved value that changed.
rn_sysctl_restore() {
	local line k v cur
	[[ -f "$1" ]] || return 0
	while IFS= read -r line; do
		k="${line%%=*}" v="${line#*=}"
		cur="$(sysctl -n "$k" 2>/dev/null)" || continue
		if [[ "$cur" != "$v" ]]; then
			kube_log "sysctl $k: $cur -> $v (as it was before the real node)"
			sysctl -q -w "$k=$v" >/dev/null || kube_log "warning: could not restore $k=$v"
		fi
	done <"$1"
}

# rn_kube_chains: "CMD TABLE CHAIN" for every KUBE-* chain of iptables and
# ip6tables (the kubelet's and kube-proxy's).
rn_kube_chains() {
	local cmd t
	for cmd in iptables ip6tables; do
		command -v "$cmd" >/dev/null || continue
		for t in filter nat mangle; do
			"$cmd" -w 5 -t "$t" -S 2>/dev/null | awk -v c="$cmd" -v t="$t" '$1 == "-N" && $2 ~ /^KUBE-/ { print c, t, $2 }'
		done
	done
}

# rn_iptables_clean: remove the jumps to the KUBE-* chains and to the
# guards (KDET-REALNODE-*), then the chains themselves.
rn_iptables_clean() {
	local cmd t rule chains c
	for cmd in iptables ip6tables; do
		command -v "$cmd" >/dev/null || continue
		for t in filter nat mangle; do
			chains="$("$cmd" -w 5 -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|KDET-REALNODE-)/ { print $2 }')"
			[[ -n "$chains" ]] || continue
			# Rules in the built-in chains that jump to them.
			"$cmd" -w 5 -t "$t" -S 2>/dev/null | awk '$1 == "-A" && $2 !~ /^(KUBE-|KDET-REALNODE-)/ && / -j (KUBE-|KDET-REALNODE-)[^ ]*( |$)/' |
				while IFS= read -r rule; do
					# shellcheck disable=SC2086 # a rule as iptables -S prints it
					eval "$cmd -w 5 -t $t -D ${rule#-A }" 2>/dev/null || kube_log "warning: could not delete $cmd -t $t $rule"
				done
			for c in $chains; do "$cmd" -w 5 -t "$t" -F "$c" 2>/dev/null || true; done
			for c in $chains; do "$cmd" -w 5 -t "$t" -X "$c" 2>/dev/null || kube_log "warning: could not delete chain $cmd -t $t $c"; done
		done
	done
}

# rn_overlay_ok DIR: true when an overlay mount works under DIR.
rn_overlay_ok() {
	local d="$1/overlay-check" ok=1
	mkdir -p "$d/l" "$d/u" "$d/w" "$d/m"
	if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
		umount "$d/m"
	else
		ok=0
	fi
	rm -rf "$d"
	((ok))
}

# rn_cgroup_hierarchies: the mounted cgroup v1 hierarchies; with --all the
# cgroup2 one of a hybrid setup too (/sys/fs/cgroup/unified here), where
# runc makes the containers' cgroups as well, so they are removed there too.
rn_cgroup_hierarchies() {
	awk -v all="${1:-}" '$3 == "cgroup" || (all == "--all" && $3 == "cgroup2") { print $2 }' /proc/self/mounts
}

rn_cgroup_make() {
	local h
	for h in $(rn_cgroup_hierarchies); do
		mkdir -p "$h$1"
	done
}

# rn_cgroup_remove ROOT: rmdir ROOT and everything below it, deepest first,
# in every hierarchy (they must hold no process any more).
rn_cgroup_remove() {
	local h
	[[ "$1" == /kdet-* ]] || return 0
	for h in $(rn_cgroup_hierarchies --all); do
		[[ -d "$h$1" ]] || continue
		find "$h$1" -depth -type d -exec rmdir {} \; 2>/dev/null ||
			kube_log "warning: could not remove cgroup $h$1 (processes left: $(find "$h$1" -name cgroup.procs -exec cat {} + 2>/dev/null | head -c 200))"
	done
}

# rn_mounts_under DIR: mount points at or under DIR, deepest first.
rn_mounts_under() {
	# mountinfo's field 5, with its octal escapes (\040 for a space) undone.
	awk '{ print $5 }' /proc/self/mountinfo | while IFS= read -r m; do
		m="$(printf '%b' "$m")"
		[[ "$m" == "$1" || "$m" == "$1"/* ]] && echo "$m"
	done | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2- | uniq
}

# rn_unmount_under DIR: unmount everything at or under DIR (the kubelet's
# volumes and its rshared root dir, containerd's rootfs, shm and netns mounts).
rn_unmount_under() {
	local m n=0
	for _ in 1 2 3; do
		while IFS= read -r m; do
			[[ -n "$m" ]] || continue
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || kube_log "warning: could not unmount $m"
			n=$((n + 1))
		done < <(rn_mounts_under "$1")
		[[ -z "$(rn_mounts_under "$1")" ]] && break
	done
	((n == 0)) || kube_log "unmounted $n mounts under $1"
}
