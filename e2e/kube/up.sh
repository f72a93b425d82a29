#!/bin/bash
# Starts a real upstream control plane on 127.0.0.1 for end-to-end tests:
# etcd (Debian's etcd-server), kube-apiserver (secure port only, generated CA
# and serving certificate, static token auth, Node+RBAC authorization,
# service-account signing keys), kube-controller-manager (all default
# controllers, GC and node lifecycle included, one service-account identity
# per controller) and kube-scheduler. Everything lives in one temp dir.
#
# Usage: e2e/kube/up.sh [DIR]
#   DIR (default: a new mktemp dir) receives certs, logs, pids, etcd data and
#   the kubeconfigs. On success the processes keep running, DIR/env holds
#   KUBECONFIG=... and friends, and the last line on stdout is DIR. Stop with
#   e2e/kube/down.sh DIR. On failure everything started is stopped again and
#   the logs are printed.
#
#   KDET_KUBE_START_TIMEOUT  seconds to wait for each component (default 180)
#   KDET_KUBE_BIN            use these binaries instead of the cache
#
# Tokens in DIR/tokens.csv: admin (system:masters), the scheduler, the
# controller-manager, the kdet-controller service account
# (system:serviceaccount:kdet:kdet-controller, no groups beyond the service
# account ones, so only the RBAC rules bound to it apply), two nodes
# (system:node:kdet-node and system:node:kdet-node-2 in system:nodes) for
# process kubelets (e2e/kube/kubelet.sh DIR BIN [NODE]), and for the real
# node (e2e/kube/node/up.sh) system:node:kdet-real-node and system:kube-proxy
# (bound to system:node-proxier by the default RBAC).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/common.sh"

bin="${KDET_KUBE_BIN:-$KUBE_BIN}"
timeout_s="${KDET_KUBE_START_TIMEOUT:-180}"
for c in "${KUBE_COMPONENTS[@]}"; do
	[[ -x "$bin/$c" ]] || kube_die "$bin/$c missing: run e2e/kube/build.sh first"
done
for t in etcd etcdctl openssl curl kubectl; do
	command -v "$t" >/dev/null || kube_die "$t not found (apt-get install etcd-server etcd-client openssl curl; kubectl)"
done

if [[ $# -ge 1 ]]; then
	dir="$1"
	mkdir -p "$dir"
	[[ -z "$(ls -A "$dir")" ]] || kube_die "$dir is not empty"
else
	dir="$(mktemp -d "${TMPDIR:-/tmp}/kdet-kube.XXXXXX")"
fi
dir="$(cd "$dir" && pwd)"
mkdir -p "$dir/pids" "$dir/logs" "$dir/pki"

started_ok=0
on_exit() {
	local rc=$?
	if ((!started_ok)); then
		kube_log "start failed (exit $rc); stopping what was started. Last log lines:"
		local f
		for f in "$dir"/logs/*.log; do
			[[ -f "$f" && "$f" != */openssl.log ]] || continue
			echo "---- $f" >&2
			tail -n 15 "$f" >&2
		done
		KDET_KUBE_KEEP="${KDET_KUBE_KEEP:-0}" "$here/down.sh" "$dir" >&2 || true
	fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

free_port() { kube_free_port "$dir/ports.used"; }

# start NAME CMD...: run CMD in the background with its log and pid in DIR.
start() {
	local name=$1
	shift
	"$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/pids/$name"
	echo "$name" >>"$dir/pids/order"
}

alive() { kill -0 "$(cat "$dir/pids/$1")" 2>/dev/null; }

# wait_until NAME DESC CMD...: poll CMD until it succeeds, NAME's process
# dies, or the timeout passes.
wait_until() {
	local name=$1 desc=$2 deadline=$(($(date +%s) + timeout_s))
	shift 2
	until "$@" >/dev/null 2>&1; do
		alive "$name" || kube_die "$name exited while waiting for $desc (log: $dir/logs/$name.log)"
		(($(date +%s) < deadline)) || kube_die "timed out after ${timeout_s}s waiting for $desc (log: $dir/logs/$name.log)"
		sleep 0.5
	done
}

# --- certificates and keys ------------------------------------------------
kube_log "generating CA, serving/client certificates and service-account keys in $dir/pki..."
pki="$dir/pki"
(
	cd "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kdet-e2e-ca" \
		-keyout ca.key -out ca.crt
	cat >serving.ext <<-'EOF'
		basicConstraints=CA:FALSE
		keyUsage=digitalSignature,keyEncipherment
		extendedKeyUsage=serverAuth
		subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
	EOF
	openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr
	openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
		-extfile serving.ext -out apiserver.crt
	# The API server's client certificate towards kubelets (kubectl logs/exec).
	printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.ext
	openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
		-keyout kubelet-client.key -out kubelet-client.csr
	openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
		-extfile client.ext -out kubelet-client.crt
	openssl genrsa -out sa.key 2048
	openssl rsa -in sa.key -pubout -out sa.pub
) >"$dir/logs/openssl.log" 2>&1 || { cat "$dir/logs/openssl.log" >&2; kube_die "openssl failed"; }

tok() { openssl rand -hex 16; }
admin_token=$(tok)
sched_token=$(tok)
cm_token=$(tok)
kdet_token=$(tok)
node_token=$(tok)
node2_token=$(tok)
realnode_token=$(tok)
realnode2_token=$(tok)
proxy_token=$(tok)
umask 077
cat >"$dir/tokens.csv" <<EOF
$admin_token,admin,uid-admin,"system:masters"
$sched_token,system:kube-scheduler,uid-kube-scheduler
$cm_token,system:kube-controller-manager,uid-kube-controller-manager
$kdet_token,system:serviceaccount:kdet:kdet-controller,uid-kdet-controller,"system:serviceaccounts,system:serviceaccounts:kdet"
$node_token,system:node:kdet-node,uid-kdet-node,"system:nodes"
$node2_token,system:node:kdet-node-2,uid-kdet-node-2,"system:nodes"
$realnode_token,system:node:kdet-real-node,uid-kdet-real-node,"system:nodes"
$realnode2_token,system:node:kdet-real-node-2,uid-kdet-real-node-2,"system:nodes"
$proxy_token,system:kube-proxy,uid-kube-proxy
EOF
umask 022

etcd_port=$(free_port)
etcd_peer_port=$(free_port)
api_port=$(free_port)
sched_port=$(free_port)
cm_port=$(free_port)
server="https://127.0.0.1:$api_port"

# kubeconfig FILE USER TOKEN
kubeconfig() {
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kdet-e2e
  cluster:
    server: $server
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@kdet-e2e
  context: {cluster: kdet-e2e, user: $2, namespace: default}
current-context: $2@kdet-e2e
EOF
	chmod 600 "$1"
}
kubeconfig "$dir/kubeconfig" admin "$admin_token"
kubeconfig "$dir/scheduler.kubeconfig" system:kube-scheduler "$sched_token"
kubeconfig "$dir/controller-manager.kubeconfig" system:kube-controller-manager "$cm_token"
kubeconfig "$dir/kdet-controller.kubeconfig" kdet-controller "$kdet_token"
kubeconfig "$dir/node.kubeconfig" system:node:kdet-node "$node_token"
kubeconfig "$dir/node-kdet-node-2.kubeconfig" system:node:kdet-node-2 "$node2_token"
kubeconfig "$dir/node-kdet-real-node.kubeconfig" system:node:kdet-real-node "$realnode_token"
kubeconfig "$dir/node-kdet-real-node-2.kubeconfig" system:node:kdet-real-node-2 "$realnode2_token"
kubeconfig "$dir/kube-proxy.kubeconfig" system:kube-proxy "$proxy_token"

# --- etcd -----------------------------------------------------------------
kube_log "starting etcd on 127.0.0.1:$etcd_port..."
start etcd etcd --name kdet-e2e --data-dir "$dir/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" \
	--advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-cluster "kdet-e2e=http://127.0.0.1:$etcd_peer_port"
wait_until etcd "etcd health" env ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$etcd_port" endpoint health

# --- kube-apiserver ---------------------------------------------------------
# kubectl logs goes API server -> kubelet API (Node.status.addresses InternalIP,
# daemonEndpoints port). Without --kubelet-certificate-authority, 1.20 does not
# verify the kubelet's serving certificate (the process kubelet's is
# self-signed); it authenticates itself with the client certificate below.
kube_log "starting kube-apiserver on $server..."
start kube-apiserver "$bin/kube-apiserver" \
	--advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$api_port" \
	--insecure-port=0 \
	--etcd-servers="http://127.0.0.1:$etcd_port" \
	--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
	--client-ca-file="$pki/ca.crt" \
	--token-auth-file="$dir/tokens.csv" \
	--authorization-mode=Node,RBAC \
	--enable-admission-plugins=NodeRestriction \
	--service-account-key-file="$pki/sa.pub" \
	--service-account-signing-key-file="$pki/sa.key" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-cluster-ip-range=10.0.0.0/24 \
	--endpoint-reconciler-type=none \
	--kubelet-client-certificate="$pki/kubelet-client.crt" \
	--kubelet-client-key="$pki/kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP \
	--allow-privileged=true \
	--watch-cache-sizes=podtemplates#0 \
	--profiling=false
api_ready() {
	curl -fsS --max-time 5 --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token" \
		"$server/readyz"
}
wait_until kube-apiserver "kube-apiserver /readyz" api_ready

# --- kube-controller-manager and kube-scheduler ------------------------------
kube_log "starting kube-controller-manager (127.0.0.1:$cm_port) and kube-scheduler (127.0.0.1:$sched_port)..."
cmk="$dir/controller-manager.kubeconfig"
start kube-controller-manager "$bin/kube-controller-manager" \
	--kubeconfig="$cmk" --authentication-kubeconfig="$cmk" --authorization-kubeconfig="$cmk" \
	--bind-address=127.0.0.1 --secure-port="$cm_port" --port=0 \
	--leader-elect=false \
	--use-service-account-credentials=true \
	--service-account-private-key-file="$pki/sa.key" \
	--root-ca-file="$pki/ca.crt" \
	--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
	--controllers='*' \
	--profiling=false
sk="$dir/scheduler.kubeconfig"
start kube-scheduler "$bin/kube-scheduler" \
	--kubeconfig="$sk" --authentication-kubeconfig="$sk" --authorization-kubeconfig="$sk" \
	--bind-address=127.0.0.1 --secure-port="$sched_port" --port=0 \
	--leader-elect=false \
	--profiling=false

healthz() { curl -fsSk --max-time 5 "https://127.0.0.1:$1/healthz"; }
wait_until kube-controller-manager "kube-controller-manager /healthz" healthz "$cm_port"
wait_until kube-scheduler "kube-scheduler /healthz" healthz "$sched_port"
# The token controller works once the default service account has its token.
sa_token_ready() {
	[[ -n "$(KUBECONFIG="$dir/kubeconfig" kubectl get sa default -n default \
		-o 'jsonpath={.secrets[0].name}' 2>/dev/null)" ]]
}
wait_until kube-controller-manager "the default service account's token (token controller)" sa_token_ready

cat >"$dir/env" <<EOF
KUBECONFIG=$dir/kubeconfig
KDET_KUBE_DIR=$dir
KDET_KUBE_SERVER=$server
KDET_KUBE_CA=$pki/ca.crt
KDET_KUBE_ADMIN_TOKEN=$admin_token
KDET_KUBE_CONTROLLER_KUBECONFIG=$dir/kdet-controller.kubeconfig
KDET_KUBE_NODE_KUBECONFIG=$dir/node.kubeconfig
KDET_KUBE_ETCD=127.0.0.1:$etcd_port
EOF
started_ok=1
kube_log "control plane up: KUBECONFIG=$dir/kubeconfig (stop with e2e/kube/down.sh $dir)"
echo "$dir"
