#!/bin/bash
# Starts the real nodes for a control plane started by e2e/kube/up.sh: the
# upstream kubelet (built by `e2e/kube/build.sh --node`) on Debian's
# containerd (CRI), runc and CNI plugins, as nodes kdet-real-node and
# kdet-real-node-2 (KDET_REALNODE_NODES=1: the first only), plus what a
# cluster gives every node once: kube-proxy, cluster DNS, the `kubernetes`
# Service. Everything it creates lives under DIR/realnode or is recorded
# there, and e2e/kube/node/down.sh DIR (which e2e/kube/down.sh calls first)
# removes it:
#   - per node I: containerd with its own root, state, socket and config (CRI
#     plugin, runc through the v2 shim with its own runc root, cgroupfs,
#     overlayfs or native snapshots, netns mounts under its state dir) and the
#     images of e2e/kube/node/image.sh imported (the sandbox image is one of
#     them: no registry is ever contacted); the bridge kdet-cni(I-1) with
#     10.244.(I-1).1/24, made here, and a CNI config (bridge without gateway
#     mode, so IP forwarding stays off; host-local IPAM on .10-.250 with its
#     state under DIR; routes to the other nodes' pods, 10.244.0.0/16, and to
#     the service range 10.0.0.0/24 only, no default route: pods reach this
#     machine's bridges and services, nothing else); loopback; the kubelet
#     (KubeletConfiguration, root dir and cgroup root of its own, API on its
#     bridge address, webhook authn/authz, cluster DNS), its Node labelled
#     and tainted as kdet's resource pool `real`
#     (kdet.io/resource-pool=real:NoSchedule), so that only pods meant for the
#     real nodes (they tolerate it) land there when other suites run too;
#   - an iptables guard: packets to 10.244.0.0/16 are dropped unless they
#     come from lo or a kdet-cni bridge; forwarding on for those bridges only
#     (net.ipv4.conf.kdet-cniN.forwarding: Services backed by pods, pods of
#     one node reaching pods of the other through this machine) and forwarded
#     packets from a bridge dropped unless they go to one of them;
#   - kube-proxy in iptables mode (user system:kube-proxy), once: the nodes
#     share this machine's network stack, so one set of rules serves both;
#   - cluster DNS: dnsmasq on 10.244.0.1:53 answering NAME.NS.svc.cluster.local
#     for every Service with a ClusterIP (e2e/kube/node/dns.sh keeps its hosts
#     file in step with the Services through a watch), nothing else;
#   - the `kubernetes` Service's endpoint 10.244.0.1:PORT (the API server runs
#     with --endpoint-reconciler-type=none and listens on 127.0.0.1 only), and
#     socat forwarding 10.244.0.1:PORT to it, accepting only 10.244.0.0/16.
# The kernel settings the kubelet and kube-proxy change (kernel.panic,
# kernel.panic_on_oops, vm.overcommit_memory, route_localnet...) are saved
# first and put back as soon as the Nodes are Ready, and again by down.sh.
#
# Usage: e2e/kube/node/up.sh DIR
#   KDET_REALNODE_NODES      how many real nodes, 1 or 2 (default 2)
#   KDET_KUBE_NODE_BIN       kubelet and kube-proxy (default: the node cache;
#                            build with e2e/kube/build.sh --node)
#   KDET_KUBE_START_TIMEOUT  seconds to wait for each step (default 180)
# Needs root. Writes DIR/realnode/env (KDET_REALNODE_*), prints timings.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/../common.sh"
# shellcheck source=e2e/kube/node/lib.sh
source "$here/lib.sh"

dir="${1:-}"
[[ -n "$dir" && -f "$dir/env" && -d "$dir/pids" ]] || kube_die "usage: e2e/kube/node/up.sh DIR (a running e2e/kube/up.sh dir)"
dir="$(cd "$dir" && pwd)"
((EUID == 0)) || kube_die "the real node needs root (containerd, runc, bridges, iptables, cgroups)"
[[ "$RN_COUNT" == 1 || "$RN_COUNT" == 2 ]] || kube_die "KDET_REALNODE_NODES=$RN_COUNT: 1 or 2"
nbin="${KDET_KUBE_NODE_BIN:-$KUBE_NODE_BIN}"
for c in "${KUBE_NODE_COMPONENTS[@]}"; do
	[[ -x "$nbin/$c" ]] || kube_die "$nbin/$c missing: run e2e/kube/build.sh --node first"
done
timeout_s="${KDET_KUBE_START_TIMEOUT:-180}"
for i in $(seq 1 "$RN_COUNT"); do
	[[ -f "$dir/node-$(rn_node "$i").kubeconfig" ]] ||
		kube_die "$dir/node-$(rn_node "$i").kubeconfig missing: the control plane was started by an older up.sh"
done
[[ -f "$dir/kube-proxy.kubeconfig" ]] || kube_die "$dir/kube-proxy.kubeconfig missing: the control plane was started by an older up.sh"

kube_apt_install "${RN_DEB_PACKAGES[@]}"
for t in containerd ctr runc socat iptables iptables-save ip gcc dnsmasq; do
	command -v "$t" >/dev/null || kube_die "$t not found"
done
for p in bridge host-local loopback portmap; do
	[[ -x "$RN_CNI_BIN/$p" ]] || kube_die "$RN_CNI_BIN/$p missing (containernetworking-plugins)"
done

# A run that was killed (machine restart, SIGKILL) leaves its bridges,
# mounts and iptables rules behind with none of its processes alive: reclaim
# those with node/down.sh of the dir that recorded them. A run whose kubelet
# or containerd still lives is left alone (and refused below).
# ($TMPDIR and /tmp, each once.)
for owner in $(printf '%s\n' "${TMPDIR:-/tmp}"/kdet-kube.*/realnode /tmp/kdet-kube.*/realnode | sort -u); do
	[[ -f "$owner/bridges" && "$owner" != "$dir/realnode" ]] || continue
	odir="${owner%/realnode}"
	live=""
	for pf in "$odir"/pids/kubelet-real* "$odir"/pids/containerd*; do
		[[ -f "$pf" ]] && kill -0 "$(cat "$pf")" 2>/dev/null && live="$live ${pf##*/}"
	done
	if [[ -n "$live" ]]; then
		kube_log "the real nodes of $odir are running ($live ); not touching them"
		continue
	fi
	kube_log "reclaiming what a killed run left in $odir (bridges $(tr '\n' ' ' <"$owner/bridges"), mounts, iptables rules)..."
	"$here/down.sh" "$odir" >&2 || kube_log "warning: node/down.sh $odir exited non-zero"
done

# Refuse rather than share: another real node on this machine, or a network
# that already uses the range.
routes="$(ip -4 route show)"
for i in $(seq 1 "$RN_COUNT"); do
	if ip link show "$(rn_bridge "$i")" >/dev/null 2>&1; then
		kube_die "the bridge $(rn_bridge "$i") exists already and no run dir under ${TMPDIR:-/tmp} records it as a dead run's (another real node running? e2e/kube/node/down.sh DIR removes one)"
	fi
	if grep -q "^$(rn_net "$i")\.0/24" <<<"$routes"; then
		kube_die "$(rn_net "$i").0/24 is already routed on this machine: $(grep "^$(rn_net "$i")\." <<<"$routes" | head -n2)"
	fi
done
if grep -q "^$RN_SVC_NET\|^$RN_CLUSTER_NET" <<<"$routes"; then
	kube_die "$RN_SVC_NET or $RN_CLUSTER_NET is already routed on this machine"
fi
if [[ -n "$(rn_kube_chains)" ]]; then
	kube_die "iptables has KUBE-* chains already (another kubelet or kube-proxy on this machine?): $(rn_kube_chains | head -n3 | tr '\n' ' ')"
fi

rn="$dir/realnode"
mkdir -p "$rn"
# From here on, node/down.sh knows how to undo what is recorded in $rn.
: >"$rn/bridges"
: >"$rn/containerd.socks"
: >"$rn/cgroup-roots"
echo "$RN_COUNT" >"$rn/count"
started_ok=0
on_exit() {
	local rc=$?
	if ((!started_ok)); then
		kube_log "real node start failed (exit $rc). Last log lines:"
		local f
		for f in "$dir"/logs/containerd*.log "$dir"/logs/kubelet-real*.log "$dir"/logs/kube-proxy.log \
			"$dir"/logs/socat-api.log "$dir"/logs/dns*.log; do
			[[ -f "$f" ]] || continue
			echo "---- $f" >&2
			tail -n 25 "$f" >&2
		done
		"$here/down.sh" "$dir" >&2 || true
	fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

t0=$(date +%s.%N)
rn_sysctl_save "$rn/sysctl.saved"

# start NAME CMD...: like up.sh's: DIR/pids, DIR/logs; down.sh stops it.
start() {
	local name=$1
	shift
	"$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/pids/$name"
	echo "$name" >>"$dir/pids/order"
}
wait_until() {
	local name=$1 desc=$2 deadline=$(($(date +%s) + timeout_s))
	shift 2
	until "$@" >/dev/null 2>&1; do
		kill -0 "$(cat "$dir/pids/$name")" 2>/dev/null || kube_die "$name exited while waiting for $desc (log: $dir/logs/$name.log)"
		(($(date +%s) < deadline)) || kube_die "timed out after ${timeout_s}s waiting for $desc (log: $dir/logs/$name.log)"
		sleep 0.5
	done
}

# --- images -----------------------------------------------------------------
kube_log "building the probe and pause images..."
"$here/image.sh" "$rn/images" >"$dir/logs/realnode-image.log" 2>&1 ||
	{ cat "$dir/logs/realnode-image.log" >&2; kube_die "image.sh failed"; }

# --- network: the guards, then a bridge and a CNI config per node --------------
kube_log "iptables guards $RN_GUARD and $RN_GUARD_FWD for $RN_CLUSTER_NET..."
iptables -w 5 -N "$RN_GUARD"
echo guard >"$rn/iptables-guard"
iptables -w 5 -A "$RN_GUARD" -i lo -j RETURN
iptables -w 5 -A "$RN_GUARD" -i kdet-cni+ -j RETURN
iptables -w 5 -A "$RN_GUARD" -j DROP
iptables -w 5 -I INPUT 1 -d "$RN_CLUSTER_NET" -j "$RN_GUARD"
# A pod reaching a Service whose endpoint is a pod, or a pod of the other
# node: this machine routes it from a bridge to a bridge. Only packets that
# come in on a bridge may be forwarded (each bridge's own forwarding flag;
# net.ipv4.ip_forward stays as it is), and only onto a bridge.
iptables -w 5 -N "$RN_GUARD_FWD"
iptables -w 5 -A "$RN_GUARD_FWD" -o kdet-cni+ -j RETURN
iptables -w 5 -A "$RN_GUARD_FWD" -j DROP
iptables -w 5 -I FORWARD 1 -i kdet-cni+ -j "$RN_GUARD_FWD"

# node_net I: node I's bridge and CNI config (in rn_dir I/cni).
node_net() {
	local i=$1 br gw net nd
	br="$(rn_bridge "$i")" gw="$(rn_gw "$i")" net="$(rn_net "$i")" nd="$(rn_dir "$rn" "$i")"
	kube_log "bridge $br with $gw/24..."
	ip link add "$br" type bridge
	echo "$br" >>"$rn/bridges"
	ip addr add "$gw/24" dev "$br"
	ip link set "$br" up
	sysctl -q -w "net.ipv4.conf.$br.forwarding=1" >/dev/null
	mkdir -p "$nd/cni/net.d" "$nd/cni/ipam"
	jq -n --arg br "$br" --arg dir "$nd/cni/ipam" --arg net "$net" --arg gw "$gw" \
		--arg svc "$RN_SVC_NET" --arg all "$RN_CLUSTER_NET" '{
		cniVersion: "0.4.0", name: "kdet-e2e",
		plugins: [
			{type: "bridge", bridge: $br, isGateway: false, ipMasq: false, hairpinMode: true,
			 ipam: {type: "host-local", dataDir: $dir,
			        ranges: [[{subnet: "\($net).0/24", rangeStart: "\($net).10", rangeEnd: "\($net).250", gateway: $gw}]],
			        routes: [{dst: $svc, gw: $gw}, {dst: $all, gw: $gw}]}},
			{type: "portmap", capabilities: {portMappings: true}}]}' >"$nd/cni/net.d/10-kdet.conflist"
	echo '{"cniVersion": "0.4.0", "name": "lo", "type": "loopback"}' >"$nd/cni/net.d/99-loopback.conf"
}
for i in $(seq 1 "$RN_COUNT"); do node_net "$i"; done

# --- a mount namespace for each node after the first ----------------------------
# A 1.20 kubelet keeps pod logs under the constant /var/log/pods, and its
# container GC (once a minute) removes every pod directory there whose pod it
# does not know, so two kubelets on one machine remove each other's: kubectl
# logs then fails with "lstat /var/log/pods/...: no such file or directory".
# Node I>1 runs its containerd and kubelet in a mount namespace of its own in
# which rn_dir I/pod-logs is /var/log/pods. Its propagation is slave: the
# host's mounts reach it, its own (volumes, rootfs, netns) stay in it and go
# with it. Node 1 keeps the host's /var/log/pods.
# node_mountns I: start node I's namespace holder (pid file mountns-I).
node_mountns() {
	local i=$1 nd sfx
	nd="$(rn_dir "$rn" "$i")" sfx="$(rn_sfx "$i")"
	mkdir -p "$nd/pod-logs" /var/log/pods
	rm -f "$nd/mountns.ready"
	# shellcheck disable=SC2016 # expanded by the inner sh
	start "mountns$sfx" unshare --mount --propagation slave -- \
		sh -c 'mount --bind "$1" /var/log/pods && touch "$2" && exec sleep infinity' mountns \
		"$nd/pod-logs" "$nd/mountns.ready"
	wait_until "mountns$sfx" "node $(rn_node "$i")'s mount namespace" test -f "$nd/mountns.ready"
}
# in_node I: the command prefix that runs a program in node I's namespace
# (none for node 1), into the array in_ns.
in_node() {
	in_ns=()
	(($1 == 1)) || in_ns=(nsenter -t "$(cat "$dir/pids/mountns$(rn_sfx "$1")")" -m --)
}
for i in $(seq 2 "$RN_COUNT"); do node_mountns "$i"; done

# --- containerd, one per node ---------------------------------------------------
snap=overlayfs
if ! rn_overlay_ok "$rn"; then
	snap=native
	kube_log "overlay mounts fail here; using the native snapshotter"
fi
# node_containerd I: start node I's containerd and import the probe images.
node_containerd() {
	local i=$1 nd cd_dir sock sfx img imgs
	nd="$(rn_dir "$rn" "$i")" sfx="$(rn_sfx "$i")"
	cd_dir="$nd/containerd"
	mkdir -p "$cd_dir/root" "$cd_dir/state" "$cd_dir/opt" "$cd_dir/runc"
	sock="$cd_dir/containerd.sock"
	cat >"$cd_dir/config.toml" <<-TOML
		version = 2
		root = "$cd_dir/root"
		state = "$cd_dir/state"
		disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
		  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
		  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
		[grpc]
		  address = "$sock"
		[ttrpc]
		  address = "$sock.ttrpc"
		[debug]
		  address = ""
		  level = "info"
		[metrics]
		  address = ""
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$cd_dir/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$RN_PAUSE_IMAGE"
		  stream_server_address = "127.0.0.1"
		  stream_server_port = "0"
		  netns_mounts_under_state_dir = true
		  enable_selinux = false
		  disable_apparmor = true
		  restrict_oom_score_adj = true
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "$snap"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        BinaryName = "$(command -v runc)"
		        Root = "$cd_dir/runc"
		        SystemdCgroup = false
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "$RN_CNI_BIN"
		    conf_dir = "$nd/cni/net.d"
		    max_conf_num = 1
	TOML
	echo "$sock" >>"$rn/containerd.socks"
	kube_log "starting containerd$sfx ($snap snapshots, socket $sock)..."
	in_node "$i"
	start "containerd$sfx" "${in_ns[@]}" containerd --config "$cd_dir/config.toml"
	wait_until "containerd$sfx" "containerd$sfx's socket" ctr -a "$sock" version
	ctr -a "$sock" -n k8s.io images import --all-platforms "$rn/images/images.oci.tar" >"$dir/logs/realnode-import$sfx.log" 2>&1 ||
		{ cat "$dir/logs/realnode-import$sfx.log" >&2; kube_die "ctr images import failed"; }
	imgs="$(ctr -a "$sock" -n k8s.io images ls -q)"
	for img in "$RN_PAUSE_IMAGE" "$RN_PROBE_IMAGE"; do
		grep -qx "$img" <<<"$imgs" || kube_die "$img missing after the import (log: $dir/logs/realnode-import$sfx.log)"
	done
}
for i in $(seq 1 "$RN_COUNT"); do node_containerd "$i"; done
t_cd=$(date +%s.%N)

# --- kubelets --------------------------------------------------------------------
# node_kubelet I: write node I's KubeletConfiguration and start its kubelet.
node_kubelet() {
	local i=$1 nd sfx name gw kport cg_root sock
	nd="$(rn_dir "$rn" "$i")" sfx="$(rn_sfx "$i")" name="$(rn_node "$i")" gw="$(rn_gw "$i")"
	sock="$nd/containerd/containerd.sock"
	kport=$(kube_free_port "$dir/ports.used")
	cg_root="/kdet-$(basename "$dir")$sfx"
	rn_cgroup_make "$cg_root"
	echo "$cg_root" >>"$rn/cgroup-roots"
	mkdir -p "$nd/kubelet"
	cat >"$nd/kubelet.yaml" <<-YAML
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		address: $gw
		port: $kport
		readOnlyPort: 0
		healthzPort: 0
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		  x509: {clientCAFile: $dir/pki/ca.crt}
		authorization:
		  mode: Webhook
		cgroupDriver: cgroupfs
		cgroupRoot: $cg_root
		cgroupsPerQOS: true
		enforceNodeAllocatable: [pods]
		cpuManagerPolicy: none
		failSwapOn: false
		protectKernelDefaults: false
		makeIPTablesUtilChains: true
		hairpinMode: hairpin-veth
		resolvConf: ""
		clusterDomain: cluster.local
		clusterDNS: [$RN_DNS]
		staticPodPath: ""
		serializeImagePulls: false
		# 1 min by default: a deleted pod stays Terminating until the next sync of
		# its pod worker, about a minute, although its containers stopped at once.
		syncFrequency: 10s
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
		rotateCertificates: false
		serverTLSBootstrap: false
	YAML
	kube_log "starting the kubelet as node $name (API on $gw:$kport, cgroup root $cg_root)..."
	in_node "$i"
	start "kubelet-real$sfx" "${in_ns[@]}" "$nbin/kubelet" --config="$nd/kubelet.yaml" \
		--kubeconfig="$dir/node-$name.kubeconfig" \
		--container-runtime=remote --container-runtime-endpoint="unix://$sock" \
		--runtime-request-timeout=2m \
		--root-dir="$nd/kubelet" --cert-dir="$nd/kubelet/pki" \
		--hostname-override="$name" --node-ip="$gw" \
		--fail-swap-on=false \
		--node-labels="$RN_POOL_LABEL=$RN_POOL" \
		--register-with-taints="$RN_TAINT:NoSchedule" \
		--v=2
}
node_ready() {
	[[ "$(KUBECONFIG="$dir/kubeconfig" kubectl get node "$1" \
		-o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
t_kl=$(date +%s.%N)
for i in $(seq 1 "$RN_COUNT"); do node_kubelet "$i"; done
for i in $(seq 1 "$RN_COUNT"); do
	wait_until "kubelet-real$(rn_sfx "$i")" "node $(rn_node "$i") Ready" node_ready "$(rn_node "$i")"
done
t_ready=$(date +%s.%N)
# The kubelets set kernel.panic, kernel.panic_on_oops, vm.overcommit_memory...
# at start; put this machine's values back.
rn_sysctl_restore "$rn/sysctl.saved"

# --- cluster DNS -------------------------------------------------------------------
mkdir -p "$rn/dns"
: >"$rn/dns/hosts"
kube_log "cluster DNS: dnsmasq on $RN_DNS:53 (cluster.local only), fed from the Services..."
# --user=root: it re-reads the hosts file (in this root-only dir) on SIGHUP.
start dns dnsmasq --keep-in-foreground --log-facility=- --user=root --port=53 \
	--listen-address="$RN_DNS" --bind-interfaces --no-resolv --no-hosts --no-poll \
	--domain-needed --local=/cluster.local/ --addn-hosts="$rn/dns/hosts" --cache-size=0
start dns-sync env KUBECONFIG="$dir/kubeconfig" "$here/dns.sh" "$rn/dns/hosts" "$dir/pids/dns"
dns_ready() { grep -q ' kubernetes.default.svc.cluster.local$' "$rn/dns/hosts"; }
wait_until dns-sync "the kubernetes Service in the DNS hosts file" dns_ready

# --- kube-proxy and the kubernetes Service --------------------------------------
api_port="$(sed -n 's/^KDET_KUBE_SERVER=https:\/\/127.0.0.1://p' "$dir/env")"
[[ -n "$api_port" ]] || kube_die "no KDET_KUBE_SERVER port in $dir/env"
kube_log "socat $RN_GW:$api_port -> 127.0.0.1:$api_port (clients from $RN_CLUSTER_NET only)..."
start socat-api socat "TCP-LISTEN:$api_port,bind=$RN_GW,reuseaddr,fork,range=$RN_CLUSTER_NET" "TCP:127.0.0.1:$api_port"
jq -n --arg gw "$RN_GW" --argjson port "$api_port" '{apiVersion: "v1", kind: "Endpoints",
	metadata: {name: "kubernetes", namespace: "default"},
	subsets: [{addresses: [{ip: $gw}], ports: [{name: "https", port: $port, protocol: "TCP"}]}]}' |
	KUBECONFIG="$dir/kubeconfig" kubectl apply -f - >/dev/null
hz=$(kube_free_port "$dir/ports.used")
mp=$(kube_free_port "$dir/ports.used")
np_addrs="$(for i in $(seq 1 "$RN_COUNT"); do printf '%s/32,' "$(rn_gw "$i")"; done)"
kube_log "starting kube-proxy (iptables mode, cluster CIDR $RN_CLUSTER_NET)..."
start kube-proxy "$nbin/kube-proxy" --kubeconfig="$dir/kube-proxy.kubeconfig" \
	--proxy-mode=iptables --cluster-cidr="$RN_CLUSTER_NET" --hostname-override="$RN_NODE" \
	--bind-address=127.0.0.1 --healthz-bind-address="127.0.0.1:$hz" --metrics-bind-address="127.0.0.1:$mp" \
	--conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
	--nodeport-addresses="${np_addrs%,}" \
	--v=2
svc_rules() {
	local r
	r="$(iptables -w 5 -t nat -S KUBE-SERVICES 2>/dev/null)" && grep -q -- "-d $RN_API_VIP/32 .*--dport 443" <<<"$r"
}
wait_until kube-proxy "kube-proxy's rules for the kubernetes Service ($RN_API_VIP:443)" svc_rules
# kube-proxy sets route_localnet=1 at start.
rn_sysctl_restore "$rn/sysctl.saved"
t_end=$(date +%s.%N)

nodes="$(for i in $(seq 1 "$RN_COUNT"); do printf '%s ' "$(rn_node "$i")"; done)"
{
	echo "KDET_REALNODE_NODE=$RN_NODE"
	echo "KDET_REALNODE_NODES=\"${nodes% }\""
	echo "KDET_REALNODE_POOL=$RN_POOL"
	echo "KDET_REALNODE_TAINT=$RN_TAINT:NoSchedule"
	echo "KDET_REALNODE_NET=$RN_NET"
	echo "KDET_REALNODE_CLUSTER_NET=$RN_CLUSTER_NET"
	echo "KDET_REALNODE_BRIDGE=$RN_BRIDGE"
	echo "KDET_REALNODE_GW=$RN_GW"
	echo "KDET_REALNODE_DNS=$RN_DNS"
	echo "KDET_REALNODE_CONTAINERD_SOCK=$rn/containerd/containerd.sock"
	echo "KDET_REALNODE_CONTAINERD_SOCKS=\"$(tr '\n' ' ' <"$rn/containerd.socks" | sed 's/ $//')\""
	echo "KDET_REALNODE_PROBE_IMAGE=$RN_PROBE_IMAGE"
	echo "KDET_REALNODE_NETNS_DIR=$rn/containerd/state/io.containerd.grpc.v1.cri/netns"
	echo "KDET_REALNODE_IPAM_DIR=$rn/cni/ipam"
	if ((RN_COUNT > 1)); then
		echo "KDET_REALNODE_NODE2=$(rn_node 2)"
		echo "KDET_REALNODE_NET2=$(rn_net 2)"
		echo "KDET_REALNODE_BRIDGE2=$(rn_bridge 2)"
	fi
} >"$rn/env"
started_ok=1
kube_log "real nodes Ready ($RN_COUNT): containerd and images $(rn_secs "$t0" "$t_cd") s, kubelet start to Ready $(rn_secs "$t_kl" "$t_ready") s, DNS and kube-proxy $(rn_secs "$t_ready" "$t_end") s, total $(rn_secs "$t0" "$t_end") s"
