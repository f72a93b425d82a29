#!/bin/bash
# The install suite: kdet installed the way a platform engineer installs it,
# on the real nodes of e2e/kube/node/up.sh (the upstream kubelet on
# containerd, pods with their own IPs on the nodes' bridges, cluster DNS,
# kube-proxy), with nothing from a registry:
#   - the images of `make images` (kdet-controller, kdet-trainer,
#     kdet-postgresql) loaded into each node's containerd with
#     `ctr images import`, as docs/install.md says for air-gapped clusters;
#   - `helm install` of helm/kdet: the CRDs, PostgreSQL as a StatefulSet on a
#     PersistentVolume (a hostPath volume of a local StorageClass), the
#     controller as a Deployment of 2 replicas with leader election, a
#     shared_fs default checkpoint storage (a hostPath), the API on a NodePort;
#   - `det experiment create` through that NodePort and the API server: the
#     fashion-mnist-c example, the PyTorch Trainer-API example
#     (examples/pytorch-fashion-mnist/trainer-api, `import determined`) and a
#     2-pod fashion-mnist-c trial whose pods run on the two nodes and meet
#     over their pod IPs, all to COMPLETED in containers;
#   - interactive tasks in kdet-trainer (install_tasks.sh): `det cmd run`, a
#     notebook (Jupyter through the controller's proxy, a kernel and a
#     terminal over WebSockets, its idle timeout) and a shell (sshd,
#     `det shell open ID -- hostname` through the proxy's tunnel);
#   - the leader's pod deleted, then `helm upgrade` to a new image tag, both
#     while an experiment runs: the other replica takes over, the rollout
#     ends, the experiment completes with every metric stored once;
#   - `helm uninstall`: nothing of kdet is left but the CRDs and the
#     PostgreSQL claim (kept on purpose: it holds the data).
# It prints what it measured: image import times, controller pod start to
# Ready, experiment create to first trial container Running and to first
# worker process running.
#
# Usage (from e2e/kube/run.sh install, which starts the control plane and the
# real nodes): KDET_KUBE_DIR=DIR KD_SRC=TREE KD_BUILD=BUILD e2e/kube/install.sh
#   KDET_INSTALL_TIMEOUT   seconds to wait for an experiment (default 420)
#   KDET_INSTALL_MEASURE=N also create N one-trial experiments one after the
#                          other and print create -> Running and -> first worker
#                          p50/p95 (bench/install)
# Needs root (ctr), BUILD/images/kdet-{controller,trainer,postgresql}.oci.tar
# (make images), BUILD/bin/det, helm (.deps/helm, make deps).
# Prints `N passed, N failed`.
set -uo pipefail

dir="${KDET_KUBE_DIR:-}"
[[ -n "$dir" && -f "$dir/env" && -f "$dir/realnode/env" ]] ||
	{ echo "install: set KDET_KUBE_DIR to an up.sh dir with real nodes (e2e/kube/node/up.sh)" >&2; exit 2; }
set -a
# shellcheck disable=SC1091
source "$dir/env"
# shellcheck disable=SC1091
source "$dir/realnode/env"
set +a
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KD_SRC="${KD_SRC:-$(cd "$here/../.." && pwd)}"
KD_BUILD="${KD_BUILD:-$KD_SRC/build}"
DET="$KD_BUILD/bin/det"
HELM="${HELM:-$KD_SRC/.deps/helm/helm}"
exp_timeout="${KDET_INSTALL_TIMEOUT:-420}"
measure="${KDET_INSTALL_MEASURE:-0}"
# shellcheck source=e2e/kube/checks.sh
source "$here/checks.sh"

INS=kdet-system   # the release's namespace
NS=kdinst-$$      # the users' experiments
RELEASE=kdet
read -r -a nodes <<<"$KDET_REALNODE_NODES"
work="$(mktemp -d "${TMPDIR:-/tmp}/kdet-kube-install.XXXXXX")"
chmod 0755 "$work"
export HOME="$work" # a private kubectl discovery cache and helm config
export KUBECONFIG
log() { echo "# $(date -u +%H:%M:%S) $*"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# within SECONDS CMD...: poll CMD until it succeeds or SECONDS have passed.
within() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || return 1
		sleep 0.5
	done
}
# check NAME CMD...: one check of CMD's exit status.
check() {
	local name=$1
	shift
	if "$@" >/dev/null 2>&1; then ok "$name"; else bad "$name" "${DETAIL:-}"; fi
}
K=(kubectl -n "$INS")
U=(kubectl -n "$NS")
field() { "${U[@]}" get "$1" "$2" -o "jsonpath=$3" 2>/dev/null; }
exp_state() { field exp "$1" '{.status.state}'; }
exp_done() { local s; s="$(exp_state "$1")"; [[ "$s" == COMPLETED || "$s" == ERROR || "$s" == CANCELED ]]; }
# sql QUERY: a query in the chart's PostgreSQL (its local socket trusts kdet).
sql() { "${K[@]}" exec kdet-postgresql-0 -- psql -U kdet -d kdet -tAc "$1" 2>/dev/null; }
exp_metrics() {
	sql "select count(*) from metrics m join trials t on t.id = m.trial_id
		join experiments e on e.id = t.experiment_id where e.name = '$1' and m.kind = '$2'"
}
# dup_metrics EXP: how many (trial, kind, step) occur more than once.
dup_metrics() {
	sql "select count(*) from (select m.trial_id, m.kind, m.step from metrics m
		join trials t on t.id = m.trial_id join experiments e on e.id = t.experiment_id
		where e.name = '$1' group by 1, 2, 3 having count(*) > 1) d"
}
leader() {
	local h
	h="$("${K[@]}" get lease kdet-controller -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null)"
	echo "${h%-*}" # identity: POD-PID
}
ready_replicas() { "${K[@]}" get deploy kdet-controller -o 'jsonpath={.status.readyReplicas}' 2>/dev/null; }
ctrl_pods() {
	"${K[@]}" get pods -l app.kubernetes.io/name=kdet-controller --field-selector=status.phase=Running \
		-o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null
}

port_fwd_pid="" pods_watch_pid=""
cleanup() {
	[[ -z "$port_fwd_pid" ]] || kill "$port_fwd_pid" 2>/dev/null
	[[ -z "$pods_watch_pid" ]] || kill "$pods_watch_pid" 2>/dev/null
	# Experiments first, while the controller runs to take their finalizer
	# off; what it did not get to in 60 s loses the finalizer by hand.
	kubectl delete exp --all -n "$NS" --wait=true --timeout=60s >/dev/null 2>&1 ||
		kubectl get exp -n "$NS" -o name 2>/dev/null | while read -r e; do
			kubectl -n "$NS" patch "$e" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
		done
	kubectl delete ns "$NS" --wait=false >/dev/null 2>&1
	"$HELM" uninstall "$RELEASE" -n "$INS" --wait --timeout 2m >/dev/null 2>&1
	kubectl delete ns "$INS" --wait=false >/dev/null 2>&1
	kubectl delete pv kdet-e2e-pg --wait=false >/dev/null 2>&1
	kubectl delete storageclass kdet-e2e-local >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

for t in ctr jq; do command -v "$t" >/dev/null || { bad "$t not found"; echo "$pass passed, $fail failed"; exit 1; }; done
[[ -x "$HELM" ]] || { bad "helm missing at $HELM (make deps)"; echo "$pass passed, $fail failed"; exit 1; }
[[ -x "$DET" ]] || { bad "det missing at $DET (make)"; echo "$pass passed, $fail failed"; exit 1; }

# A release namespace left by an earlier run (still terminating) would make
# the install fail for a reason of its own.
if ! within 180 bash -c "! kubectl get ns $INS >/dev/null 2>&1"; then
	bad "namespace $INS from an earlier run is still there" "$(kubectl get ns "$INS" -o 'jsonpath={.status.phase}' 2>&1)"
	echo "$pass passed, $fail failed"
	exit 1
fi

# --- images: loaded into each node's containerd, as without a registry --------
declare -A tag
for n in controller trainer postgresql; do
	a="$KD_BUILD/images/kdet-$n.oci.tar"
	if [[ ! -e "$a" ]]; then
		bad "image archive $a (make images)"
		echo "$pass passed, $fail failed"
		exit 1
	fi
	f="$(basename "$(readlink -f "$a")")"
	t="${f#kdet-"$n"-}"
	tag[$n]="${t%.oci.tar}"
	sz="$(stat -L -c %s "$a")"
	echo "image: kdet-$n:${tag[$n]} archive $(awk -v b="$sz" 'BEGIN { printf "%.1f MiB", b / 1048576 }')"
done
i=0
for sock in $KDET_REALNODE_CONTAINERD_SOCKS; do
	node_name="${nodes[$i]}"
	i=$((i + 1))
	for n in controller trainer postgresql; do
		t0=$(now)
		if ctr -a "$sock" -n k8s.io images import "$KD_BUILD/images/kdet-$n.oci.tar" >"$work/import.log" 2>&1 &&
			grep -x "docker.io/library/kdet-$n:${tag[$n]}" <<<"$(ctr -a "$sock" -n k8s.io images ls -q)" >/dev/null; then
			ok "images: kdet-$n:${tag[$n]} imported into $node_name's containerd ($(secs "$t0" "$(now)") s)"
		else
			bad "images: kdet-$n:${tag[$n]} imported into $node_name's containerd" "$(tail -c 400 "$work/import.log")"
		fi
	done
	# The tag `helm upgrade` moves to: the same image under a new name, as a
	# rebuilt image of a new commit would be.
	ctr -a "$sock" -n k8s.io images tag --force "docker.io/library/kdet-controller:${tag[controller]}" \
		"docker.io/library/kdet-controller:${tag[controller]}-next" >/dev/null
done

# --- storage: a local StorageClass, a PersistentVolume, a checkpoint folder ----
mkdir -p "$work/pg" "$work/ckpt"
chown 999:999 "$work/pg"
chmod 0700 "$work/pg"
chown 65532:65532 "$work/ckpt"
kubectl apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: kdet-e2e-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: kdet-e2e-pg}
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: kdet-e2e-local
  hostPath: {path: $work/pg, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [${nodes[0]}]}]
EOF

# --- helm install ------------------------------------------------------------------
pool_tol="{key: kdet.io/resource-pool, operator: Equal, value: $KDET_REALNODE_POOL, effect: NoSchedule}"
cat >"$work/values.yaml" <<EOF
image: {repository: kdet-controller, tag: "${tag[controller]}", pullPolicy: IfNotPresent}
replicas: 2
controller:
  trialImage: kdet-trainer:${tag[trainer]}
  resync: 10
  # CPU slots of 1 CPU; the nodes have 2 CPUs each, part of them held by the
  # controller and PostgreSQL: a trial of 2 slots runs as 2 pods of 1.
  maxSlotsPerPod: 1
api:
  service: {type: NodePort}
  # det and curl reach the API through the node's address: the certificate names it.
  tls: {extraIPs: [$KDET_REALNODE_GW]}
database:
  mode: internal
  internal:
    image: {repository: kdet-postgresql, tag: "${tag[postgresql]}", pullPolicy: IfNotPresent}
    storage: {size: 1Gi, storageClassName: kdet-e2e-local}
    nodeSelector: {kdet.io/resource-pool: $KDET_REALNODE_POOL}
    tolerations: [$pool_tol]
checkpointStorage:
  type: shared_fs
  sharedFs: {hostPath: $work/ckpt}
nodeSelector: {kdet.io/resource-pool: $KDET_REALNODE_POOL}
tolerations: [$pool_tol]
EOF
log "helm install $RELEASE helm/kdet -n $INS ..."
t_install=$(now)
if "$HELM" install "$RELEASE" "$KD_SRC/helm/kdet" -n "$INS" --create-namespace -f "$work/values.yaml" \
	--wait --timeout 6m >"$work/helm-install.log" 2>&1; then
	ok "helm install (--wait: every Deployment and StatefulSet ready) in $(secs "$t_install" "$(now)") s"
else
	bad "helm install" "$(tail -c 800 "$work/helm-install.log")" \
		"$("${K[@]}" get pods -o wide 2>&1 | head -20)" "$("${K[@]}" describe pods 2>&1 | grep -A3 -E 'Warning|Error' | head -30)"
fi
expect "helm: the release is deployed" '^deployed$' bash -c "'$HELM' status $RELEASE -n $INS -o json | jq -r .info.status"
expect "helm: the CRDs from crds/ are installed" '^experiments.kdet.io trials.kdet.io$' \
	kubectl get crd experiments.kdet.io trials.kdet.io -o 'jsonpath={.items[0].metadata.name} {.items[1].metadata.name}'
expect "postgresql: its claim is bound to the local PersistentVolume" '^Bound kdet-e2e-pg$' \
	"${K[@]}" get pvc data-kdet-postgresql-0 -o 'jsonpath={.status.phase} {.spec.volumeName}'
check "postgresql: initialised in the volume (PG_VERSION)" test -s "$work/pg/pgdata/PG_VERSION"
expect "postgresql: runs kdet-postgresql as uid 999" "^kdet-postgresql:${tag[postgresql]} 999\$" \
	"${K[@]}" get pod kdet-postgresql-0 -o 'jsonpath={.spec.containers[0].image} {.spec.securityContext.runAsUser}'
expect "controller: 2 replicas ready" '^2$' ready_replicas
expect "controller: on the real nodes, with their pod IPs" "^(kdet-real-node(-2)? 10\\.244\\.[01]\\.[0-9]+ ?){2}\$" \
	"${K[@]}" get pods -l app.kubernetes.io/name=kdet-controller \
	-o 'jsonpath={range .items[*]}{.spec.nodeName} {.status.podIP} {end}'
expect "controller: non-root, read-only root, no capabilities, RuntimeDefault seccomp" '^true true \["ALL"\] RuntimeDefault 65532$' \
	"${K[@]}" get deploy kdet-controller -o 'jsonpath={.spec.template.spec.containers[0].securityContext.runAsNonRoot} {.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.template.spec.containers[0].securityContext.capabilities.drop} {.spec.template.spec.containers[0].securityContext.seccompProfile.type} {.spec.template.spec.securityContext.runAsUser}'
within 60 bash -c "[[ -n \"\$(kubectl -n $INS get lease kdet-controller -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null)\" ]]"
lead="$(leader)"
if grep -x "$lead" <<<"$(ctrl_pods)" >/dev/null; then ok "controller: one replica holds the Lease ($lead)"; else bad "controller: one replica holds the Lease" "holder '$lead', pods: $(ctrl_pods | tr '\n' ' ')"; fi
# Pod created -> Ready, and its container started -> Ready (API timestamps: whole seconds).
for p in $(ctrl_pods); do
	"${K[@]}" get pod "$p" -o json | jq -r '[.metadata.creationTimestamp,
		(.status.containerStatuses[0].state.running.startedAt // ""),
		((.status.conditions // [])[] | select(.type == "Ready") | .lastTransitionTime)] | @tsv' |
		while IFS=$'\t' read -r c s r; do
			echo "time: controller pod $p created -> Ready $(($(date -d "$r" +%s) - $(date -d "$c" +%s))) s, container started -> Ready $(($(date -d "$r" +%s) - $(date -d "$s" +%s))) s"
		done
done
log "pods: $("${K[@]}" get pods -o wide --no-headers 2>&1 | awk '{ print $1, $3, $7 }' | tr '\n' ';')"

# --- the API through the NodePort; det's settings -----------------------------------
nodeport="$("${K[@]}" get svc kdet-controller -o 'jsonpath={.spec.ports[0].nodePort}')"
export KDET_API_URL="https://$KDET_REALNODE_GW:$nodeport"
KDET_API_TOKEN="$("${K[@]}" get secret kdet-user-token -o 'jsonpath={.data.token}' | base64 -d)"
export KDET_API_TOKEN
# The API's CA, from the chart's Secret: det and curl trust it (docs/install.md).
"${K[@]}" get secret kdet-api-tls -o 'jsonpath={.data.ca\.crt}' | base64 -d >"$work/api-ca.crt"
export KDET_API_CA_FILE="$work/api-ca.crt"
curl() { command curl --cacert "$KDET_API_CA_FILE" "$@"; }
expect "api: plain HTTP is not served" '000' \
	curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "http://$KDET_REALNODE_GW:$nodeport/healthz"
expect "api: /readyz through the NodePort $nodeport over HTTPS (the chart's CA)" '"status": ?"ready"' curl -sS --max-time 10 "$KDET_API_URL/readyz"
expect "api: a request without the user token is 401" '^401$' \
	curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$KDET_API_URL/api/v1/jobs"
expect "api: and 200 with it" '^200$' \
	curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $KDET_API_TOKEN" "$KDET_API_URL/api/v1/jobs"
curl -sS --max-time 10 "$KDET_API_URL/metrics" >"$work/metrics.txt" 2>&1
check "api: /metrics in Prometheus' format (kdet_leader, reconciles)" \
	grep -qE '^kdet_leader(\{[^}]*\})? [01]' "$work/metrics.txt"
"${K[@]}" port-forward svc/kdet-controller 0:8080 >"$work/pf.log" 2>&1 &
port_fwd_pid=$!
within 30 grep -q 'Forwarding from 127.0.0.1:' "$work/pf.log"
pf_port="$(sed -n 's/^Forwarding from 127.0.0.1:\([0-9]*\).*/\1/p' "$work/pf.log" | head -n1)"
expect "api: /healthz through kubectl port-forward (API server, kubelet, containerd)" '"status": ?"ok"' \
	curl -sS --max-time 10 "https://127.0.0.1:${pf_port:-1}/healthz"
kill "$port_fwd_pid" 2>/dev/null
port_fwd_pid=""

# --- experiments, created with det ----------------------------------------------------
kubectl create ns "$NS" >/dev/null
within 60 "${U[@]}" get sa default
mkdir -p "$work/ctx"
echo "fashion-mnist-c runs from the trainer image" >"$work/ctx/README"
# The pool of the real nodes, as a template: the configs themselves stay plain.
echo "resources: {resource_pool: $KDET_REALNODE_POOL}" >"$work/pool.yaml"
# fmnist NAME SEARCHER SLOTS [ENTRYPOINT]: $work/NAME.yaml, a fashion-mnist-c experiment.
fmnist() {
	cat >"$work/$1.yaml" <<EOF
name: $1
entrypoint: ${4:-fashion-mnist-c --train-limit 3200 --test-limit 500 --quiet}
environment:
  environment_variables: [OPENBLAS_NUM_THREADS=1, DTRAIN_TIMEOUT=120, DTRAIN_RENDEZVOUS_TIMEOUT=120]
hyperparameters:
  global_batch_size: 32
  hidden_units: 32
  momentum: 0.9
  learning_rate: 0.05
searcher: $2
min_validation_period: {batches: 20}
resources: {slots_per_trial: $3}
max_restarts: 0
EOF
}
# create NAME [CONTEXT]: det experiment create of $work/NAME.yaml; det names
# the resource NAME-<digest of the spec> and prints it: E[NAME].
declare -A E
create() {
	local out
	out="$("$DET" experiment create "$work/$1.yaml" "${2:-$work/ctx}" --template "$work/pool.yaml" -n "$NS" 2>"$work/create-$1.log")" || return 1
	E[$1]="$(tail -n1 <<<"$out")"
	[[ -n "${E[$1]}" ]]
}
# finished NAME: wait for it; COMPLETED or say why not.
finished() {
	local e=$1
	within "$exp_timeout" exp_done "$e"
	if [[ "$(exp_state "$e")" == COMPLETED ]]; then
		ok "experiment $e COMPLETED"
	else
		bad "experiment $e COMPLETED" "state '$(exp_state "$e")': $(field exp "$e" '{.status.message}')" \
			"trials: $("${U[@]}" get trials -l "kdet.io/experiment=$e" -o 'jsonpath={range .items[*]}{.metadata.name} {.status.state} {.status.message}{"\n"}{end}' 2>&1 | head -c 800)" \
			"pods: $("${U[@]}" get pods -l "kdet.io/experiment=$e" -o wide 2>&1 | head -c 600)"
	fi
}
# Every version of every pod of the namespace, from a watch started before
# the first experiment: pods go when their trial ends, often within a
# second or two of starting, too soon to be caught by polling.
kubectl -n "$NS" get pods --watch -o json >"$work/pods.watch" 2>/dev/null &
pods_watch_pid=$!
# snap_pods NAME N: wait until the watch has seen N pods of experiment NAME
# with a pod IP; keep the last such version of each in $work/pods-NAME.json.
snap_pods() {
	local f="$work/pods-$1.json"
	within 240 bash -c "jq -s --arg e '$1' '[.[] | select(.metadata.labels[\"kdet.io/experiment\"] == \$e and .status.podIP != null)]
		| group_by(.metadata.name) | map(last) | {items: .}' '$work/pods.watch' >'$f.tmp' 2>/dev/null &&
		[[ \$(jq '.items | length' '$f.tmp') -ge $2 ]]" && mv "$f.tmp" "$f"
}
# pod_field NAME JQ: JQ over the snapshot of NAME's pods.
pod_field() { jq -r "$2" "$work/pods-$1.json" 2>/dev/null; }

# 1. fashion-mnist-c, one trial.
fmnist fmnist "{name: single, metric: validation_loss, smaller_is_better: true, max_length: {batches: 60}}" 1
if create fmnist; then ok "det experiment create fmnist (through the API server)"; else bad "det experiment create fmnist" "$(tail -c 600 "$work/create-fmnist.log")"; fi
snap_pods "${E[fmnist]}" 1
finished "${E[fmnist]}"
expect "fmnist: its pod ran kdet-trainer:${tag[trainer]} on a real node, with a pod IP" \
	"^kdet-trainer:${tag[trainer]} kdet-real-node(-2)? 10\\.244\\.[01]\\.[0-9]+\$" \
	pod_field "${E[fmnist]}" '.items[0] | "\(.spec.containers[0].image) \(.spec.nodeName) \(.status.podIP)"'
expect "fmnist: the trial pod ran as uid 65532 (the chart's trials.runAsUser)" '^65532$' \
	pod_field "${E[fmnist]}" '.items[0].spec.securityContext.runAsUser'
expect "fmnist: its validation stored" '^1$' exp_metrics "${E[fmnist]}" validation
expect "fmnist: its training metrics stored (every 50 batches, and the last)" '^2$' exp_metrics "${E[fmnist]}" training
check "fmnist: a checkpoint in the chart's shared_fs storage ($work/ckpt)" \
	bash -c "[[ -n \"\$(ls -A '$work/ckpt')\" ]]"
expect "fmnist: det trial metrics reads them through the controller API" 'validation_loss' \
	"$DET" trial metrics "${E[fmnist]}-1" --kind validation -n "$NS"

# 2. The PyTorch Trainer-API example, its code unchanged.
cat >"$work/pytorch.yaml" <<EOF
name: pytorch
entrypoint: python3 train.py
environment:
  environment_variables: [OMP_NUM_THREADS=1]
hyperparameters: {global_batch_size: 64, learning_rate: 0.05, hidden_units: 64, momentum: 0.9, gamma: 0.9}
searcher: {name: single, metric: validation_loss, smaller_is_better: true, max_length: {batches: 150}}
data: {train_examples: 6400, validation_examples: 1000}
resources: {slots_per_trial: 1}
max_restarts: 0
EOF
if create pytorch "$KD_SRC/examples/pytorch-fashion-mnist/trainer-api"; then ok "det experiment create pytorch (examples/pytorch-fashion-mnist/trainer-api)"; else bad "det experiment create pytorch" "$(tail -c 600 "$work/create-pytorch.log")"; fi
finished "${E[pytorch]}"
v="$(exp_metrics "${E[pytorch]}" validation)"
if [[ "$v" =~ ^[0-9]+$ ]] && ((v >= 1)); then ok "pytorch: validation metrics stored ($v)"; else bad "pytorch: validation metrics stored" "got '$v'"; fi
expect "pytorch: the Trainer reported validation_loss" 'validation_loss' "$DET" trial metrics "${E[pytorch]}-1" --kind validation -n "$NS"

# 3. A 2-pod trial: one pod on each node, meeting over their pod IPs.
fmnist twopod "{name: single, metric: validation_loss, smaller_is_better: true, max_length: {batches: 40}}" 2
if create twopod; then ok "det experiment create twopod (slots_per_trial 2)"; else bad "det experiment create twopod" "$(tail -c 600 "$work/create-twopod.log")"; fi
snap_pods "${E[twopod]}" 2
finished "${E[twopod]}"
expect "twopod: two pods of 1 CPU slot, one on each real node" "^${nodes[0]} 1 ${nodes[1]:-none} 1\$" \
	pod_field "${E[twopod]}" '[.items[] | "\(.spec.nodeName) \(.spec.containers[0].resources.requests.cpu)"] | sort | join(" ")'
ips="$(pod_field "${E[twopod]}" '[.items[].status.podIP] | sort | join(" ")')"
expect "twopod: the chief reported its pod IP (one of the two: $ips) for the rendezvous" "^(${ips// /|}) [0-9]+\$" \
	field trial "${E[twopod]}-1" '{.status.rendezvous.address} {.status.rendezvous.port}'
expect "twopod: its validation stored" '^1$' exp_metrics "${E[twopod]}" validation

# 3b. Interactive tasks: a command, a notebook and a shell in kdet-trainer.
# shellcheck source=e2e/kube/install_tasks.sh
source "$here/install_tasks.sh"

# 4. The leader's pod deleted, then helm upgrade to a new tag, while an experiment runs.
# Long enough to outlive the failover and the rollout: 512 hidden units make
# a batch about 2 ms of one core (30,000 batches: a minute alone, two on a
# busy machine); a report every 1000 batches.
fmnist longrun "{name: random, metric: validation_loss, smaller_is_better: true, max_trials: 2, max_concurrent_trials: 2, max_length: {batches: 30000}}" 1
sed -i 's/ --quiet$/ --quiet --report-every 1000/; s/hidden_units: 32/hidden_units: 512/' "$work/longrun.yaml"
if create longrun; then ok "det experiment create longrun (2 trials of 30000 batches)"; else bad "det experiment create longrun" "$(tail -c 600 "$work/create-longrun.log")"; fi
# Both trials' workers running (a trial is ACTIVE from its creation on).
if within 120 bash -c "[[ \"\$(kubectl -n $NS get pods -l kdet.io/experiment=${E[longrun]} -o 'jsonpath={range .items[*]}{.status.containerStatuses[0].state.running.startedAt} {end}' | wc -w)\" == 2 ]]"; then
	ok "longrun: both trials' containers running"
else
	bad "longrun: both trials' containers running" "$("${U[@]}" get pods -l "kdet.io/experiment=${E[longrun]}" -o wide 2>&1 | head -c 600)"
fi
old="$(leader)"
log "deleting the leader's pod $old"
t0=$(now)
"${K[@]}" delete pod "$old" --wait=false >/dev/null
if within 90 bash -c "h=\$(kubectl -n $INS get lease kdet-controller -o 'jsonpath={.spec.holderIdentity}'); [[ -n \"\$h\" && \"\${h%-*}\" != '$old' ]]"; then
	ok "failover: another replica holds the Lease ($(leader)) $(secs "$t0" "$(now)") s after the leader's pod was deleted"
else
	bad "failover: another replica holds the Lease" "holder $("${K[@]}" get lease kdet-controller -o 'jsonpath={.spec.holderIdentity}')"
fi
expect "failover: longrun still ACTIVE" '^ACTIVE$' exp_state "${E[longrun]}"
check "failover: the Deployment replaced the pod (2 ready)" within 120 bash -c "[[ \"\$(kubectl -n $INS get deploy kdet-controller -o 'jsonpath={.status.readyReplicas}')\" == 2 ]]"
log "helm upgrade to kdet-controller:${tag[controller]}-next"
t0=$(now)
if "$HELM" upgrade "$RELEASE" "$KD_SRC/helm/kdet" -n "$INS" -f "$work/values.yaml" \
	--set image.tag="${tag[controller]}-next" --wait --timeout 5m >"$work/helm-upgrade.log" 2>&1; then
	ok "helm upgrade to a new image tag: rolled out in $(secs "$t0" "$(now)") s"
else
	bad "helm upgrade to a new image tag" "$(tail -c 800 "$work/helm-upgrade.log")"
fi
expect "upgrade: longrun still ACTIVE when the rollout ended" '^ACTIVE$' exp_state "${E[longrun]}"
images_now() {
	"${K[@]}" get pods -l app.kubernetes.io/name=kdet-controller -o 'jsonpath={range .items[*]}{.spec.containers[0].image} {end}'
}
within 120 bash -c "[[ \"\$(kubectl -n $INS get pods -l app.kubernetes.io/name=kdet-controller -o 'jsonpath={range .items[*]}{.spec.containers[0].image} {end}')\" =~ ^(kdet-controller:${tag[controller]}-next ?){2}\$ ]]"
expect "upgrade: the old pods are gone, both replicas run the new tag" "^(kdet-controller:${tag[controller]}-next ?){2}\$" images_now
expect "upgrade: the user token and the trial-token key survived (lookup)" "^$KDET_API_TOKEN\$" \
	bash -c "kubectl -n $INS get secret kdet-user-token -o 'jsonpath={.data.token}' | base64 -d"
expect "upgrade: the API's CA survived (lookup): det still trusts the controller" '"status": ?"ready"' \
	curl -sS --max-time 10 "$KDET_API_URL/readyz"
finished "${E[longrun]}"
expect "longrun: both trials COMPLETED, never restarted" '^COMPLETED 0? COMPLETED 0? ?$' \
	"${U[@]}" get trials -l kdet.io/experiment=${E[longrun]} -o 'jsonpath={range .items[*]}{.status.state} {.status.restarts} {end}'
expect "longrun: every validation stored (one per trial)" '^2$' exp_metrics "${E[longrun]}" validation
expect "longrun: every training report stored (2 trials x 30000/1000)" '^60$' exp_metrics "${E[longrun]}" training
expect "longrun: no metric stored twice" '^0$' dup_metrics "${E[longrun]}"

# 5. Experiment create -> first trial container Running, and -> first worker process running
# (KDET_INSTALL_MEASURE=N).
if ((measure > 0)); then
	# shellcheck source=e2e/kube/latency.sh
	source "$here/latency.sh"
	# Long enough never to end before it is killed; the worker's first line marks its start.
	fmnist probe "{name: single, metric: validation_loss, smaller_is_better: true, max_length: {batches: 1000000}}" 1 \
		"$LATENCY_ENTRYPOINT"
	lat_create() { create probe; }
	lat_running() {
		[[ -n "$("${U[@]}" get pods -l "kdet.io/experiment=${E[probe]}" \
			-o 'jsonpath={.items[0].status.containerStatuses[0].state.running.startedAt}' 2>/dev/null)" ]]
	}
	lat_worker() {
		local trial
		trial="$("${U[@]}" get trials -l "kdet.io/experiment=${E[probe]}" -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null)"
		[[ -n "$trial" ]] && curl -fsS --max-time 10 -H "Authorization: Bearer $KDET_API_TOKEN" \
			"$KDET_API_URL$(latency_logs_path "$NS" "$trial")"
	}
	lat_kill() {
		"$DET" experiment kill "${E[probe]}" -n "$NS" >/dev/null 2>&1
		latency_poll 60 bash -c "[[ -z \"\$(kubectl -n $NS get pods -l kdet.io/experiment=${E[probe]} -o name)\" ]]"
	}
	if latency_measure "$measure" "$work/latency"; then ok "measure: $measure samples"; else bad "measure: $measure samples" "$(wc -l <"$work/latency") taken"; fi
fi

# --- helm uninstall ---------------------------------------------------------------------
# The users' experiments go first (helm does not own them; they would stay with the CRDs).
kubectl delete exp --all -n "$NS" --wait=true --timeout=120s >/dev/null 2>&1
check "uninstall: deleting the experiments removes their trials, pods and context ConfigMaps" within 120 bash -c \
	"[[ -z \"\$(kubectl -n $NS get trials,pods,configmaps -l kdet.io/experiment -o name 2>/dev/null)\" ]]"
t0=$(now)
if "$HELM" uninstall "$RELEASE" -n "$INS" --wait --timeout 3m >"$work/helm-uninstall.log" 2>&1; then
	ok "helm uninstall in $(secs "$t0" "$(now)") s"
else
	bad "helm uninstall" "$(tail -c 600 "$work/helm-uninstall.log")"
fi
within 120 bash -c "[[ -z \"\$(kubectl -n $INS get pods -o name 2>/dev/null)\" ]]"
left="$(kubectl -n "$INS" get all,configmaps,secrets,serviceaccounts,roles,rolebindings,leases,pvc -o name 2>/dev/null |
	grep -v -e '^configmap/kube-root-ca.crt$' -e '^serviceaccount/default$' -e '^secret/default-token-')"
if [[ "$left" == "persistentvolumeclaim/data-kdet-postgresql-0" ]]; then
	ok "uninstall: nothing left in $INS but PostgreSQL's claim (kept: it holds the data)"
else
	bad "uninstall: nothing left in $INS but PostgreSQL's claim" "left: $(tr '\n' ' ' <<<"$left")"
fi
cluster_left="$(kubectl get clusterroles,clusterrolebindings,priorityclasses -o name 2>/dev/null | grep -E 'kdet' || true)"
if [[ -z "$cluster_left" ]]; then ok "uninstall: no cluster role, binding or priority class of kdet left"; else bad "uninstall: no cluster-wide object left" "$cluster_left"; fi
expect "uninstall: the CRDs stay (helm never deletes them; docs/install.md)" '^experiments.kdet.io trials.kdet.io$' \
	kubectl get crd experiments.kdet.io trials.kdet.io -o 'jsonpath={.items[0].metadata.name} {.items[1].metadata.name}'
"${K[@]}" delete pvc data-kdet-postgresql-0 --wait=false >/dev/null 2>&1

echo "$pass passed, $fail failed"
((fail == 0))
