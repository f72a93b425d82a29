#!/bin/bash
# The real-node suite: checks against the upstream kubelets, containerd, runc,
# CNI, kube-proxy and cluster DNS started by e2e/kube/node/up.sh as nodes
# kdet-real-node and kdet-real-node-2:
#   the Node Ready with the bridge address as InternalIP and containerd as its
#   runtime; a pod of a locally imported image running to Succeeded with its
#   own IP in the bridge's range; a pod reaching a server pod over its pod IP;
#   a pod reaching the API server through the `kubernetes` Service's ClusterIP
#   (kube-proxy's DNAT); a pod reaching the server pod through a ClusterIP
#   Service of its own; kubectl logs and exec through the API server and the
#   kubelet; and deleting a pod removes its veth, its network namespace and
#   its address lease.
#
# Usage: KDET_KUBE_DIR=DIR e2e/kube/realnode.sh    (DIR from up.sh, with a
#   real node from node/up.sh; run.sh realnode does both)
#   KDET_REALNODE_POD_TIMEOUT  seconds to wait for a pod (default 120)
# Prints `N passed, N failed` and the times it measured; exits 1 when a
# check failed.
set -uo pipefail

dir="${KDET_KUBE_DIR:-}"
[[ -n "$dir" && -f "$dir/env" && -f "$dir/realnode/env" ]] ||
	{ echo "realnode: set KDET_KUBE_DIR to an up.sh dir with a real node (e2e/kube/node/up.sh)" >&2; exit 2; }
set -a
# shellcheck disable=SC1091
source "$dir/env"
# shellcheck disable=SC1091
source "$dir/realnode/env"
set +a
pod_timeout="${KDET_REALNODE_POD_TIMEOUT:-120}"
node="$KDET_REALNODE_NODE"
img="$KDET_REALNODE_PROBE_IMAGE"
net="$KDET_REALNODE_NET"

work="$(mktemp -d "${TMPDIR:-/tmp}/kdet-kube-realnode.XXXXXX")"
NS="kdrn-$$"
cleanup() {
	kubectl delete ns "$NS" --wait=false >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
export HOME="$work" # a private kubectl discovery cache

K=(kubectl -n "$NS")
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/checks.sh
source "$here/checks.sh"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# within SECONDS CMD...: poll CMD until it succeeds or SECONDS have passed.
within() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || return 1
		sleep 0.2
	done
}
phase() { "${K[@]}" get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null; }
phase_is() { [[ "$(phase "$1")" == "$2" ]]; }
finished() { local p; p="$(phase "$1")"; [[ "$p" == Succeeded || "$p" == Failed ]]; }
pod_ip() { "${K[@]}" get pod "$1" -o 'jsonpath={.status.podIP}' 2>/dev/null; }
why() { "${K[@]}" get pod "$1" -o 'jsonpath={.status}' 2>&1 | head -c 800; }

# pod NAME ARG...: a pod of the probe image on the real node, never restarted.
# ON_NODE=NODE pod ...: on that real node instead.
pod() {
	local name=$1 a args="" on="${ON_NODE:-$node}"
	shift
	for a in "$@"; do args+="$(printf '%s' "$a" | jq -Rs .),"; done
	cat <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$name", "labels": {"app": "$name"}},
 "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
  "nodeSelector": {"kubernetes.io/hostname": "$on"},
  "tolerations": [{"key": "kdet.io/resource-pool", "operator": "Equal", "value": "$KDET_REALNODE_POOL", "effect": "NoSchedule"}],
  "containers": [{"name": "probe", "image": "$img", "imagePullPolicy": "Never", "args": [${args%,}]}]}}
EOF
}
RN_API_VIP_RE='10\.0\.0\.1'
in_net() { [[ "$1" =~ ^${net//./\\.}\.([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 2 && BASH_REMATCH[1] <= 254)); }

# --- the Node ------------------------------------------------------------------
jpn() { kubectl get node "$node" -o "jsonpath=$1" 2>&1; }
expect "node: $node Ready" '^True$' jpn '{.status.conditions[?(@.type=="Ready")].status}'
expect "node: InternalIP is the bridge's address $KDET_REALNODE_GW" "^$KDET_REALNODE_GW\$" \
	jpn '{.status.addresses[?(@.type=="InternalIP")].address}'
expect "node: kubelet v1.20.2 on containerd" '^v1\.20\.2 containerd://1\.' \
	jpn '{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}'
expect "node: kdet's resource pool $KDET_REALNODE_POOL, tainted $KDET_REALNODE_TAINT (only pods that tolerate it)" \
	"^$KDET_REALNODE_POOL $KDET_REALNODE_TAINT\$" \
	jpn '{.metadata.labels.kdet\.io/resource-pool} {.spec.taints[0].key}={.spec.taints[0].value}:{.spec.taints[0].effect}'
expect "node: ephemeral-storage capacity reported" '^[0-9]+' jpn '{.status.capacity.ephemeral-storage}'

kubectl create ns "$NS" >/dev/null
within 60 "${K[@]}" get sa default || bad "namespace: default service account" "not created in 60 s"

# --- a pod to Succeeded with its own IP ----------------------------------------
t0=$(now)
"${K[@]}" create -f <(pod addr addr) >/dev/null
if within "$pod_timeout" finished addr && phase_is addr Succeeded; then
	ok "pod: the probe image (imported, never pulled) runs to Succeeded"
else
	bad "pod: the probe image (imported, never pulled) runs to Succeeded" "$(why addr)"
fi
t_addr=$(secs "$t0" "$(now)")
addr_done=$(date +%s)
ip_addr="$(pod_ip addr)"
if in_net "$ip_addr"; then ok "pod: status.podIP $ip_addr is in $net.0/24"; else bad "pod: status.podIP in $net.0/24" "got '$ip_addr'"; fi
expect "pod: kubectl logs shows the pod's own eth0 address, the same as status.podIP" "^ip=$ip_addr iflink=[0-9]+" \
	"${K[@]}" logs addr

# --- pod to pod over pod IPs -----------------------------------------------------
t0=$(now)
"${K[@]}" create -f <(pod server serve 8080) >/dev/null
if within "$pod_timeout" phase_is server Running; then ok "pod: a server pod Running"; else bad "pod: a server pod Running" "$(why server)"; fi
t_server=$(secs "$t0" "$(now)")
ip_server="$(pod_ip server)"
if in_net "$ip_server" && [[ "$ip_server" != "$ip_addr" ]]; then ok "pod: the server has its own IP $ip_server"; else bad "pod: the server has its own IP" "got '$ip_server' (first pod $ip_addr)"; fi
"${K[@]}" create -f <(pod client send "$ip_server" 8080) >/dev/null
if within "$pod_timeout" finished client && phase_is client Succeeded; then
	ok "pod to pod: a client pod connects to the server's pod IP and exits 0"
else
	bad "pod to pod: a client pod connects to the server's pod IP and exits 0" "$(why client)" "logs: $("${K[@]}" logs client 2>&1 | head -c 400)"
fi
expect "pod to pod: the client got the server's answer" "^hello from server ip=$ip_server\$" "${K[@]}" logs client
ip_client="$(pod_ip client)"
if in_net "$ip_client" && [[ "$ip_client" != "$ip_server" ]]; then ok "pod to pod: the client had its own IP $ip_client"; else bad "pod to pod: the client had its own IP" "got '$ip_client'"; fi
expect "pod to pod: the server logged the connection" 'answered a connection' "${K[@]}" logs server

# --- the second node: pods there reach pods here -------------------------------
if [[ -n "${KDET_REALNODE_NODE2:-}" ]]; then
	node2="$KDET_REALNODE_NODE2" net2="$KDET_REALNODE_NET2"
	jpn2() { kubectl get node "$node2" -o "jsonpath=$1" 2>&1; }
	expect "node 2: $node2 Ready, InternalIP $net2.1, in pool $KDET_REALNODE_POOL" "^True $net2\.1 $KDET_REALNODE_POOL\$" \
		jpn2 '{.status.conditions[?(@.type=="Ready")].status} {.status.addresses[?(@.type=="InternalIP")].address} {.metadata.labels.kdet\.io/resource-pool}'
	ON_NODE="$node2" pod client2 send "$ip_server" 8080 | "${K[@]}" create -f - >/dev/null
	if within "$pod_timeout" finished client2 && phase_is client2 Succeeded; then
		ok "node to node: a client pod on $node2 connects to the server pod on $node over its pod IP"
	else
		bad "node to node: a client pod on $node2 connects to the server pod on $node over its pod IP" "$(why client2)" "logs: $("${K[@]}" logs client2 2>&1 | head -c 400)"
	fi
	expect "node to node: and gets the server's answer" "^hello from server ip=$ip_server\$" "${K[@]}" logs client2
	ip_client2="$(pod_ip client2)"
	if [[ "$ip_client2" =~ ^${net2//./\\.}\.[0-9]+$ ]]; then ok "node to node: the client had an IP of $node2's range ($ip_client2)"; else bad "node to node: the client had an IP of $node2's range $net2.0/24" "got '$ip_client2'"; fi
fi

# --- pod to a Service backed by a pod (kube-proxy, forwarding on the bridge) ----
"${K[@]}" create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "server"},
 "spec": {"selector": {"app": "server"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}}
EOF
svc_ip="$("${K[@]}" get svc server -o 'jsonpath={.spec.clusterIP}' 2>/dev/null)"
svc_ep() { [[ "$("${K[@]}" get endpoints server -o 'jsonpath={.subsets[0].addresses[0].ip}' 2>/dev/null)" == "$ip_server" ]]; }
if within 60 svc_ep; then
	ok "service: server's endpoint is the server pod $ip_server"
else
	bad "service: server's endpoint is the server pod $ip_server" "$("${K[@]}" get endpoints server -o json 2>&1 | head -c 400)"
fi
svc_rule() {
	local r
	r="$(iptables -w 5 -t nat -S KUBE-SERVICES 2>/dev/null)" && grep -q -- "-d $svc_ip/32 .*--dport 80" <<<"$r"
}
if within 60 svc_rule; then ok "service: kube-proxy's rule for $svc_ip:80"; else bad "service: kube-proxy's rule for $svc_ip:80" "none in 60 s"; fi
"${K[@]}" create -f <(pod client-svc send "$svc_ip" 80) >/dev/null
if within "$pod_timeout" finished client-svc && phase_is client-svc Succeeded; then
	ok "service: a pod connects to the server through its ClusterIP $svc_ip:80"
else
	bad "service: a pod connects to the server through its ClusterIP $svc_ip:80" "$(why client-svc)" "logs: $("${K[@]}" logs client-svc 2>&1 | head -c 400)"
fi
expect "service: and gets the server pod's answer" "^hello from server ip=$ip_server\$" "${K[@]}" logs client-svc

# --- cluster DNS ------------------------------------------------------------------
# resolved NAME POD [NODE]: run `probe resolve NAME` in a new pod; print its log.
resolved() {
	ON_NODE="${3:-$node}" pod "$2" resolve "$1" | "${K[@]}" create -f - >/dev/null
	within "$pod_timeout" finished "$2"
	"${K[@]}" logs "$2" 2>&1
}
expect "dns: a pod resolves the Service's short name through its search path" "^server $svc_ip\$" resolved server dns-short
expect "dns: and kubernetes.default (the API server's ClusterIP)" "^kubernetes.default $RN_API_VIP_RE\$" resolved kubernetes.default dns-api
if [[ -n "${KDET_REALNODE_NODE2:-}" ]]; then
	expect "dns: a pod on $KDET_REALNODE_NODE2 resolves server.$NS.svc.cluster.local" "^server.$NS.svc.cluster.local $svc_ip\$" \
		resolved "server.$NS.svc.cluster.local" dns-node2 "$KDET_REALNODE_NODE2"
fi
expect "dns: a name outside the cluster does not resolve (no upstream)" "resolve: deb.debian.org: " resolved deb.debian.org dns-out

# --- kubectl exec -----------------------------------------------------------------
expect "exec: kubectl exec runs in the server's container (its eth0 address)" "^ip=$ip_server iflink=[0-9]+" \
	"${K[@]}" exec server -- /probe addr
expect "exec: a failing command's exit status comes back" 'exit code 2' "${K[@]}" exec server -- /probe nosuchmode

# --- the kubernetes Service through kube-proxy ----------------------------------------
expect "service: kubernetes has the endpoint $KDET_REALNODE_GW" "^$KDET_REALNODE_GW\$" \
	kubectl get endpoints kubernetes -o 'jsonpath={.subsets[0].addresses[0].ip}'
vip="$(kubectl get svc kubernetes -o 'jsonpath={.spec.clusterIP}')"
nat="$(iptables -w 5 -t nat -S KUBE-SERVICES 2>&1)"
if grep -q -- "-d $vip/32 .*default/kubernetes:https" <<<"$nat"; then ok "service: kube-proxy's iptables rule for $vip:443"; else bad "service: kube-proxy's iptables rule for $vip:443" "$(head -c 600 <<<"$nat")"; fi
# Go's TLS server answers a plain HTTP request with this 400: the API server.
"${K[@]}" create -f <(pod api send "$vip" 443 $'GET /healthz HTTP/1.0\r\n\r\n') >/dev/null
if within "$pod_timeout" finished api && phase_is api Succeeded; then
	ok "service: a pod connects to the kubernetes Service's ClusterIP $vip:443"
else
	bad "service: a pod connects to the kubernetes Service's ClusterIP $vip:443" "$(why api)" "logs: $("${K[@]}" logs api 2>&1 | head -c 400)"
fi
expect "service: and gets the API server's answer (an HTTPS server)" 'Client sent an HTTP request to an HTTPS server' "${K[@]}" logs api
expect "service: the pod's token volume from the real kubelet" 'token' \
	"${K[@]}" get pod api -o 'jsonpath={.spec.volumes[*].secret.secretName}'

# --- logs outlive the kubelets' container GC ------------------------------------
# Each kubelet's GC (once a minute) removes the /var/log/pods directories of
# pods it does not know; on this machine the other node's pods, unless each
# node has its own (node/up.sh). Wait until both GCs ran since the first
# pods finished, then read their logs again.
gc_wait=$((addr_done + 65 - $(date +%s)))
((gc_wait <= 0)) || { echo "waiting ${gc_wait} s for the kubelets' container GC..."; sleep "$gc_wait"; }
expect "logs: $node's finished pod's log is still there after both kubelets' container GC ran" "^ip=$ip_addr iflink=[0-9]+" \
	"${K[@]}" logs addr
if [[ -n "${KDET_REALNODE_NODE2:-}" ]]; then
	expect "logs: and so is $KDET_REALNODE_NODE2's" "^hello from server ip=$ip_server\$" "${K[@]}" logs client2
fi

# --- deleting a pod removes its network -----------------------------------------------
link="$("${K[@]}" exec server -- /probe addr 2>/dev/null | sed -n 's/.*iflink=\([0-9]*\).*/\1/p')"
veth="$(ip -o link show 2>/dev/null | awk -F': ' -v i="$link" '$1 == i { print $2 }' | cut -d@ -f1)"
if [[ -n "$veth" ]] && grep "^$link: " <<<"$(ip -o link show master "$KDET_REALNODE_BRIDGE")" >/dev/null; then
	ok "network: the server's host veth $veth (ifindex $link) is on $KDET_REALNODE_BRIDGE"
else
	bad "network: the server's host veth is on $KDET_REALNODE_BRIDGE" "iflink '$link', veth '$veth'"
fi
lease="$KDET_REALNODE_IPAM_DIR/kdet-e2e/$ip_server"
if [[ -f "$lease" ]]; then ok "network: host-local holds the lease $ip_server"; else bad "network: host-local holds the lease $ip_server" "no $lease"; fi
netns_before="$(ls "$KDET_REALNODE_NETNS_DIR" 2>/dev/null | sort)"
t0=$(now)
"${K[@]}" delete pod server --wait=false >/dev/null
if within "$pod_timeout" bash -c "! kubectl -n $NS get pod server >/dev/null 2>&1"; then
	ok "network: the server pod is deleted (SIGTERM, exit 0)"
else
	bad "network: the server pod is deleted" "$(why server)"
fi
t_delete=$(secs "$t0" "$(now)")
if [[ -n "$link" ]] && within 30 bash -c "! ip -o link show | grep -q '^$link: '"; then ok "network: its veth is gone"; else bad "network: its veth is gone" "$(ip -o link show master "$KDET_REALNODE_BRIDGE" 2>&1 | head -c 400)"; fi
if within 30 test ! -e "$lease"; then ok "network: its address lease is released"; else bad "network: its address lease is released" "$lease still there"; fi
netns_after="$(ls "$KDET_REALNODE_NETNS_DIR" 2>/dev/null | sort)"
gone="$(comm -23 <(echo "$netns_before") <(echo "$netns_after") | grep -c .)"
if ((gone >= 1)); then ok "network: its network namespace is removed ($gone gone)"; else bad "network: its network namespace is removed" "before: $netns_before" "after: $netns_after"; fi

# The finished pods' sandboxes are stopped too: no network namespace and no
# veth left once every pod is gone.
"${K[@]}" delete pod --all --wait=false >/dev/null 2>&1
within "$pod_timeout" bash -c "[[ -z \"\$(kubectl -n $NS get pods -o name 2>/dev/null)\" ]]"
if within 60 bash -c "[[ -z \"\$(ls '$KDET_REALNODE_NETNS_DIR' 2>/dev/null)\" && -z \"\$(ip -o link show master '$KDET_REALNODE_BRIDGE')\" ]]"; then
	ok "network: no pod, no network namespace and no veth left"
else
	bad "network: no pod, no network namespace and no veth left" "netns: $(ls "$KDET_REALNODE_NETNS_DIR" 2>&1)" "veths: $(ip -o link show master "$KDET_REALNODE_BRIDGE" 2>&1 | head -c 300)"
fi

echo "time: pod create to Succeeded ${t_addr} s, server pod create to Running ${t_server} s, delete to gone ${t_delete} s"
echo "$pass passed, $fail failed"
((fail == 0))
