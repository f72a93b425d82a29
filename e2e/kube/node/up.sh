#!/bin/bash
# Starts a real node for a control plane started by e2e/kube/up.sh: the
# upstream kubelet and kube-proxy (built by `e2e/kube/build.sh --node`) on
# Debian's containerd (CRI), runc and CNI plugins, as node kdet-real-node.
# Everything it creates lives under DIR/realnode or is recorded there, and
# e2e/kube/node/down.sh DIR (which e2e/kube/down.sh calls first) removes it:
#   - containerd with its own root, state, socket and config (CRI plugin,
#     runc through the v2 shim with its own runc root, cgroupfs, overlayfs or
#     native snapshots, netns mounts under its state dir) and the images of
#     e2e/kube/node/image.sh imported (the sandbox image is one of them: no
#     registry is ever contacted);
#   - the bridge kdet-cni0 with 10.244.0.1/24, made here, and a CNI config
#     (bridge without gateway mode, so IP forwarding stays off; host-local
#     IPAM on 10.244.0.10-250 with its state under DIR; a route to the service
#     range 10.0.0.0/24 only, no default route: pods reach this machine's
#     bridge and services, nothing else); loopback;
#   - an iptables guard: packets to 10.244.0.0/24 are dropped unless they
#     come from lo or the bridge; forwarding on for the bridge only
#     (net.ipv4.conf.kdet-cni0.forwarding, for Services backed by pods) and
#     forwarded packets from the bridge dropped unless they go back to it;
#   - the kubelet (KubeletConfiguration in DIR/realnode/kubelet.yaml, root dir
#     and cgroup root of its own, API on 10.244.0.1, webhook authn/authz),
#     its Node tainted kdet.io/real-node=true:NoSchedule so that only pods
#     meant for it (they tolerate it) land there when other suites run too;
#   - kube-proxy in iptables mode (user system:kube-proxy);
#   - the `kubernetes` Service's endpoint 10.244.0.1:PORT (the API server runs
#     with --endpoint-reconciler-type=none and listens on 127.0.0.1 only), and
#     socat forwarding 10.244.0.1:PORT to it, accepting only 10.244.0.0/24.
# The kernel settings the kubelet and kube-proxy change (kernel.panic,
# kernel.panic_on_oops, vm.overcommit_memory, route_localnet...) are saved
# first and put back as soon as the Node is Ready, and again by down.sh.
#
# Usage: e2e/kube/node/up.sh DIR
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
nbin="${KDET_KUBE_NODE_BIN:-$KUBE_NODE_BIN}"
for c in "${KUBE_NODE_COMPONENTS[@]}"; do
	[[ -x "$nbin/$c" ]] || kube_die "$nbin/$c missing: run e2e/kube/build.sh --node first"
done
timeout_s="${KDET_KUBE_START_TIMEOUT:-180}"
kc_node="$dir/node-$RN_NODE.kubeconfig"
[[ -f "$kc_node" && -f "$dir/kube-proxy.kubeconfig" ]] ||
	kube_die "$kc_node or kube-proxy.kubeconfig missing: the control plane was started by an older up.sh"

kube_apt_install "${RN_DEB_PACKAGES[@]}"
for t in containerd ctr runc socat iptables iptables-save ip gcc; do
	command -v "$t" >/dev/null || kube_die "$t not found"
done
for p in bridge host-local loopback; do
	[[ -x "$RN_CNI_BIN/$p" ]] || kube_die "$RN_CNI_BIN/$p missing (containernetworking-plugins)"
done

# Refuse rather than share: another real node on this machine, or a network
# that already uses the range.
if ip link show "$RN_BRIDGE" >/dev/null 2>&1; then
	kube_die "the bridge $RN_BRIDGE exists already (another real node running? e2e/kube/node/down.sh DIR removes one)"
fi
routes="$(ip -4 route show)"
if grep -q "^$RN_NET\.0/24\|^$RN_SVC_NET" <<<"$routes"; then
	kube_die "$RN_NET.0/24 or $RN_SVC_NET is already routed on this machine: $(ip -4 route show | grep "^$RN_NET\.\|^${RN_SVC_NET%.*}" | head -n2)"
fi
if [[ -n "$(rn_kube_chains)" ]]; then
	kube_die "iptables has KUBE-* chains already (another kubelet or kube-proxy on this machine?): $(rn_kube_chains | head -n3 | tr '\n' ' ')"
fi

rn="$dir/realnode"
mkdir -p "$rn"
# From here on, node/down.sh knows how to undo what is recorded in $rn.
echo "$RN_BRIDGE" >"$rn/bridge"
started_ok=0
on_exit() {
	local rc=$?
	if ((!started_ok)); then
		kube_log "real node start failed (exit $rc). Last log lines:"
		local f
		for f in "$dir"/logs/containerd.log "$dir"/logs/kubelet-real.log "$dir"/logs/kube-proxy.log "$dir"/logs/socat-api.log; do
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

# --- network: bridge, guard, CNI config ----------------------------------------
kube_log "bridge $RN_BRIDGE with $RN_GW/24, iptables guards $RN_GUARD and $RN_GUARD_FWD..."
ip link add "$RN_BRIDGE" type bridge
ip addr add "$RN_GW/24" dev "$RN_BRIDGE"
ip link set "$RN_BRIDGE" up
iptables -w 5 -N "$RN_GUARD"
echo guard >"$rn/iptables-guard"
iptables -w 5 -A "$RN_GUARD" -i lo -j RETURN
iptables -w 5 -A "$RN_GUARD" -i "$RN_BRIDGE" -j RETURN
iptables -w 5 -A "$RN_GUARD" -j DROP
iptables -w 5 -I INPUT 1 -d "$RN_NET.0/24" -j "$RN_GUARD"
# A pod reaching a Service whose endpoint is a pod: the host DNATs it and
# routes it back out of the bridge, which is forwarding. Only packets that
# come in on the bridge may be forwarded (this interface's forwarding flag;
# net.ipv4.ip_forward stays as it is), and only back onto the bridge.
sysctl -q -w "net.ipv4.conf.$RN_BRIDGE.forwarding=1" >/dev/null
iptables -w 5 -N "$RN_GUARD_FWD"
iptables -w 5 -A "$RN_GUARD_FWD" -o "$RN_BRIDGE" -j RETURN
iptables -w 5 -A "$RN_GUARD_FWD" -j DROP
iptables -w 5 -I FORWARD 1 -i "$RN_BRIDGE" -j "$RN_GUARD_FWD"

mkdir -p "$rn/cni/net.d" "$rn/cni/ipam"
cat >"$rn/cni/net.d/10-kdet.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kdet-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$RN_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$rn/cni/ipam",
        "ranges": [[{"subnet": "$RN_NET.0/24", "rangeStart": "$RN_NET.10", "rangeEnd": "$RN_NET.250", "gateway": "$RN_GW"}]],
        "routes": [{"dst": "$RN_SVC_NET", "gw": "$RN_GW"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
cat >"$rn/cni/net.d/99-loopback.conf" <<EOF
{"cniVersion": "0.4.0", "name": "lo", "type": "loopback"}
EOF

# --- containerd ---------------------------------------------------------------
cd_dir="$rn/containerd"
mkdir -p "$cd_dir/root" "$cd_dir/state" "$cd_dir/opt" "$cd_dir/runc"
sock="$cd_dir/containerd.sock"
snap=overlayfs
if ! rn_overlay_ok "$rn"; then
	snap=native
	kube_log "overlay mounts fail here; using the native snapshotter"
fi
cat >"$cd_dir/config.toml" <<EOF
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
    conf_dir = "$rn/cni/net.d"
    max_conf_num = 1
EOF
echo "$sock" >"$rn/containerd.sock.path"
kube_log "starting containerd ($snap snapshots, socket $sock)..."
start containerd containerd --config "$cd_dir/config.toml"
wait_until containerd "containerd's socket" ctr -a "$sock" version
ctr -a "$sock" -n k8s.io images import --all-platforms "$rn/images/images.oci.tar" >"$dir/logs/realnode-import.log" 2>&1 ||
	{ cat "$dir/logs/realnode-import.log" >&2; kube_die "ctr images import failed"; }
imgs="$(ctr -a "$sock" -n k8s.io images ls -q)"
for img in "$RN_PAUSE_IMAGE" "$RN_PROBE_IMAGE"; do
	grep -qx "$img" <<<"$imgs" || kube_die "$img missing after the import (log: $dir/logs/realnode-import.log)"
done
t_cd=$(date +%s.%N)

# --- kubelet -------------------------------------------------------------------
kport=$(kube_free_port "$dir/ports.used")
cg_root="/kdet-$(basename "$dir")"
rn_cgroup_make "$cg_root"
echo "$cg_root" >"$rn/cgroup-root"
mkdir -p "$rn/kubelet"
cat >"$rn/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $RN_GW
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
EOF
kube_log "starting the kubelet as node $RN_NODE (API on $RN_GW:$kport, cgroup root $cg_root)..."
t_kl=$(date +%s.%N)
start kubelet-real "$nbin/kubelet" --config="$rn/kubelet.yaml" \
	--kubeconfig="$kc_node" \
	--container-runtime=remote --container-runtime-endpoint="unix://$sock" \
	--runtime-request-timeout=2m \
	--root-dir="$rn/kubelet" --cert-dir="$rn/kubelet/pki" \
	--hostname-override="$RN_NODE" --node-ip="$RN_GW" \
	--fail-swap-on=false \
	--register-with-taints="$RN_TAINT:NoSchedule" \
	--v=2
node_ready() {
	[[ "$(KUBECONFIG="$dir/kubeconfig" kubectl get node "$RN_NODE" \
		-o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
wait_until kubelet-real "node $RN_NODE Ready" node_ready
t_ready=$(date +%s.%N)
# The kubelet set kernel.panic, kernel.panic_on_oops, vm.overcommit_memory...
# at start; put this machine's values back.
rn_sysctl_restore "$rn/sysctl.saved"

# --- kube-proxy and the kubernetes Service --------------------------------------
api_port="$(sed -n 's/^KDET_KUBE_SERVER=https:\/\/127.0.0.1://p' "$dir/env")"
[[ -n "$api_port" ]] || kube_die "no KDET_KUBE_SERVER port in $dir/env"
kube_log "socat $RN_GW:$api_port -> 127.0.0.1:$api_port (clients from $RN_NET.0/24 only)..."
start socat-api socat "TCP-LISTEN:$api_port,bind=$RN_GW,reuseaddr,fork,range=$RN_NET.0/24" "TCP:127.0.0.1:$api_port"
KUBECONFIG="$dir/kubeconfig" kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Endpoints
metadata: {name: kubernetes, namespace: default}
subsets:
- addresses: [{ip: $RN_GW}]
  ports: [{name: https, port: $api_port, protocol: TCP}]
EOF
hz=$(kube_free_port "$dir/ports.used")
mp=$(kube_free_port "$dir/ports.used")
kube_log "starting kube-proxy (iptables mode, cluster CIDR $RN_NET.0/24)..."
start kube-proxy "$nbin/kube-proxy" --kubeconfig="$dir/kube-proxy.kubeconfig" \
	--proxy-mode=iptables --cluster-cidr="$RN_NET.0/24" --hostname-override="$RN_NODE" \
	--bind-address=127.0.0.1 --healthz-bind-address="127.0.0.1:$hz" --metrics-bind-address="127.0.0.1:$mp" \
	--conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
	--nodeport-addresses="$RN_GW/32" \
	--v=2
svc_rules() {
	local r
	r="$(iptables -w 5 -t nat -S KUBE-SERVICES 2>/dev/null)" && grep -q -- "-d $RN_API_VIP/32 .*--dport 443" <<<"$r"
}
wait_until kube-proxy "kube-proxy's rules for the kubernetes Service ($RN_API_VIP:443)" svc_rules
# kube-proxy sets route_localnet=1 at start.
rn_sysctl_restore "$rn/sysctl.saved"
t_end=$(date +%s.%N)

cat >"$rn/env" <<EOF
KDET_REALNODE_NODE=$RN_NODE
KDET_REALNODE_NET=$RN_NET
KDET_REALNODE_BRIDGE=$RN_BRIDGE
KDET_REALNODE_GW=$RN_GW
KDET_REALNODE_CONTAINERD_SOCK=$sock
KDET_REALNODE_PROBE_IMAGE=$RN_PROBE_IMAGE
KDET_REALNODE_NETNS_DIR=$cd_dir/state/io.containerd.grpc.v1.cri/netns
KDET_REALNODE_IPAM_DIR=$rn/cni/ipam
EOF
started_ok=1
kube_log "real node $RN_NODE Ready: containerd and images $(rn_secs "$t0" "$t_cd") s, kubelet start to Ready $(rn_secs "$t_kl" "$t_ready") s, kube-proxy $(rn_secs "$t_ready" "$t_end") s, total $(rn_secs "$t0" "$t_end") s"
