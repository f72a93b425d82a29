#!/bin/bash
# API semantics kdet relies on, checked with kubectl against whatever
# KUBECONFIG points at (the real control plane from e2e/kube/up.sh, or
# kdet-local), so the two can be compared line by line:
#   CRD apply and discovery, an Experiment from `det experiment create
#   --dry-run`, CR create/get/patch and the status subresource, 409 on stale
#   updates and duplicate creates, 410 on expired watches and lists, label and
#   field selectors, watch events, and garbage collection through owner
#   references (background, foreground, orphan, dangling owner).
#
# Usage: KUBECONFIG=FILE e2e/kube/api.sh
#   KD_DET        the det binary (default: $KD_BUILD/bin/det, else build-kube/bin/det)
#   KDET_KUBE_ETCD  host:port of the cluster's etcd; enables the checks that
#                 compact etcd with etcdctl (real control plane only)
#   KD_GC_TIMEOUT seconds to wait for garbage collection (default 60)
# Prints `N passed, N failed`; exits 1 when a check failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/../.." && pwd)"
[[ -n "${KUBECONFIG:-}" ]] || { echo "api: set KUBECONFIG" >&2; exit 2; }
det="${KD_DET:-}"
if [[ -z "$det" ]]; then
	for d in "${KD_BUILD:-}" "$src/build-kube" "$src/build"; do
		[[ -n "$d" && -x "$d/bin/det" ]] && { det="$d/bin/det"; break; }
	done
fi
gc_timeout="${KD_GC_TIMEOUT:-60}"

work="$(mktemp -d "${TMPDIR:-/tmp}/kdet-kube-api.XXXXXX")"
NS="kdapi-$$"
cleanup() {
	kubectl delete ns "$NS" --wait=false >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
export HOME="$work" # a private kubectl discovery cache

K=(kubectl -n "$NS")
# shellcheck source=e2e/kube/checks.sh
source "$here/checks.sh"
# within SECONDS CMD...: retry CMD (every 0.5 s) until it succeeds.
within() {
	local t=$1
	shift
	local deadline=$(($(date +%s) + t))
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || return 1
		sleep 0.5
	done
}
jp() { "${K[@]}" get "$1" -o "jsonpath=$2" 2>&1; }
gone() { ! "${K[@]}" get "$1" >/dev/null 2>&1; }
trial() { # trial NAME [LABELS-JSON] [OWNER-REFS-JSON]
	printf '{"apiVersion":"kdet.io/v1alpha1","kind":"Trial","metadata":{"name":"%s"%s%s},"spec":{"experiment":"e1","requestId":"r-%s","hparams":{"lr":0.1},"seed":7}}' \
		"$1" "${2:+,\"labels\":$2}" "${3:+,\"ownerReferences\":$3}" "$1"
}

echo "== API checks against $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
kubectl create ns "$NS" >/dev/null || { echo "cannot create namespace $NS" >&2; exit 1; }

# --- CRDs -----------------------------------------------------------------
expect "crd: kubectl apply -f crds/" 'experiments.kdet.io (created|configured|unchanged)' kubectl apply -f "$src/crds/"
expect "crd: Established" 'condition met' kubectl wait --for=condition=Established --timeout=60s crd/experiments.kdet.io crd/trials.kdet.io
within 30 kubectl get trials -n "$NS"
expect "crd: discovery lists experiments (short name exp)" 'experiments +exp +kdet.io/v1alpha1 +true +Experiment' kubectl api-resources --api-group=kdet.io
expect "crd: re-apply is unchanged" 'experiments.kdet.io unchanged' kubectl apply -f "$src/crds/"

# --- an Experiment from det ---------------------------------------------------
if [[ -n "$det" ]]; then
	if "$det" experiment create "$src/examples/fashion-mnist-c/const.yaml" "$src/examples/fashion-mnist-c" \
		--dry-run -n "$NS" >"$work/exp.yaml" 2>"$work/det.err"; then
		expect "det --dry-run | kubectl apply" 'experiment.kdet.io/fashion-mnist-c-const-[0-9a-f]+ created' "${K[@]}" apply -f "$work/exp.yaml"
		exp=$(sed -n 's/^  name: \(fashion-mnist-c-const-[0-9a-f]*\)$/\1/p' "$work/exp.yaml" | tail -n1)
		expect "experiment: spec round-trips" '^single/validation_loss/1$' \
			"${K[@]}" get exp "$exp" -o 'jsonpath={.spec.searcher.name}/{.spec.searcher.metric}/{.spec.searcher.max_length.epochs}'
		expect "experiment: printer columns" 'NAME +STATE +PROGRESS +TRIALS +BEST +AGE' "${K[@]}" get exp
		expect "experiment: context ConfigMap" 'context.tar.gz' "${K[@]}" get cm "$exp-context" -o 'jsonpath={.binaryData}'
	else
		bad "det --dry-run" "$(head -c 400 "$work/det.err")"
	fi
else
	bad "det --dry-run" "no det binary (make O=build-kube build-kube/bin/det)"
fi

# --- CR create/get/patch/status -----------------------------------------------
expect "cr: create" 'trial.kdet.io/t1 created' "${K[@]}" create -f <(trial t1 '{"app":"a","tier":"x"}')
expect "cr: get has uid, resourceVersion, generation 1, creationTimestamp" '^[0-9a-f-]{36} [0-9]+ 1 [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$' \
	jp trial/t1 '{.metadata.uid} {.metadata.resourceVersion} {.metadata.generation} {.metadata.creationTimestamp}'
expect "cr: merge patch of spec" 'patched' "${K[@]}" patch trial t1 --type=merge -p '{"spec":{"seed":8}}'
expect "cr: spec patch bumps generation" '^8 2$' jp trial/t1 '{.spec.seed} {.metadata.generation}'
expect "cr: json patch" 'patched' "${K[@]}" patch trial t1 --type=json -p '[{"op":"replace","path":"/spec/seed","value":9}]'
expect "cr: strategic merge patch is refused (415)" 'UnsupportedMediaType|not supported|415' \
	"${K[@]}" patch trial t1 --type=strategic -p '{"spec":{"seed":10}}'
expect "cr: status patch through the subresource" 'patched' \
	"${K[@]}" patch trial t1 --subresource=status --type=merge -p '{"status":{"state":"ACTIVE"}}'
expect "cr: status write keeps spec and generation" '^ACTIVE 9 3$' jp trial/t1 '{.status.state} {.spec.seed} {.metadata.generation}'
expect "cr: an empty string is a valid string (not null)" 'patched' \
	"${K[@]}" patch trial t1 --subresource=status --type=merge -p '{"status":{"message":""}}'
"${K[@]}" patch trial t1 --subresource=status --type=merge -p '{"status":{"progress":1.0}}' >/dev/null 2>&1
expect "cr: an integral number comes back without a fraction (1.0 as 1)" '"progress":1[,}]' \
	kubectl get --raw "/apis/kdet.io/v1alpha1/namespaces/$NS/trials/t1"
"${K[@]}" patch trial t1 --type=merge -p '{"status":{"state":"COMPLETED"}}' >/dev/null 2>&1
expect "cr: status in a main-resource patch is ignored" '^ACTIVE$' jp trial/t1 '{.status.state}'
"${K[@]}" patch trial t1 --subresource=status --type=merge -p '{"spec":{"seed":99},"status":{"state":"PAUSED"}}' >/dev/null 2>&1
expect "cr: spec in a status patch is ignored" '^PAUSED 9$' jp trial/t1 '{.status.state} {.spec.seed}'
expect "cr: schema rejects a wrong type (422 Invalid)" 'Invalid|invalid|422' \
	"${K[@]}" patch trial t1 --type=merge -p '{"spec":{"seed":"seven"}}'
expect "cr: required field enforced" 'Required|required' \
	"${K[@]}" create -f <(printf '{"apiVersion":"kdet.io/v1alpha1","kind":"Trial","metadata":{"name":"t-noseed"},"spec":{"experiment":"e1","requestId":"r","hparams":{}}}')
"${K[@]}" patch trial t1 --type=merge -p '{"spec":{"bogusField":1}}' >/dev/null 2>&1
expect_empty "cr: unknown spec fields are pruned" "${K[@]}" get trial t1 -o 'jsonpath={.spec.bogusField}'
expect "cr: get missing is 404 NotFound" 'NotFound|not found' "${K[@]}" get trial nosuch

# --- 409 -------------------------------------------------------------------
"${K[@]}" get trial t1 -o json >"$work/t1-stale.json"
"${K[@]}" patch trial t1 --type=merge -p '{"metadata":{"labels":{"touched":"yes"}}}' >/dev/null
expect "409: update with a stale resourceVersion" 'Conflict|the object has been modified' \
	"${K[@]}" replace -f "$work/t1-stale.json"
expect "409: status update with a stale resourceVersion" 'Conflict|the object has been modified' \
	"${K[@]}" replace --subresource=status -f "$work/t1-stale.json"
expect "409: create of an existing name (AlreadyExists)" 'AlreadyExists|already exists' \
	"${K[@]}" create -f <(trial t1)
"${K[@]}" get trial t1 -o json | jq 'del(.metadata.resourceVersion)' >"$work/t1-norv.json"
# (kubectl replace fills in a missing resourceVersion itself, so PUT it raw)
expect "cr: update without resourceVersion is 422 (no unconditional update for CRs)" 'is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update' \
	kubectl replace --raw "/apis/kdet.io/v1alpha1/namespaces/$NS/trials/t1" -f "$work/t1-norv.json"
expect "create with metadata.resourceVersion set is refused" 'resourceVersion should not be set on objects to be created' \
	kubectl create --raw "/api/v1/namespaces/$NS/configmaps" \
	-f <(echo '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"withrv","resourceVersion":"5"}}')
expect "list: resourceVersionMatch without resourceVersion is 422 naming the field" 'is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided' \
	kubectl get --raw "/api/v1/namespaces/$NS/configmaps?resourceVersionMatch=Exact"
# (the server waits a few seconds for it first)
expect "list: a resourceVersion newer than the server's is 504 Timeout" 'Timeout.*Too large resource version: 99999999, current: [0-9]+' \
	kubectl get --raw "/api/v1/namespaces/$NS/configmaps?resourceVersion=99999999"
"${K[@]}" get trial t1 -o json | jq '.spec.seed = 11' >"$work/t1-fresh.json"
expect "cr: update with the current resourceVersion" 'replaced' "${K[@]}" replace -f "$work/t1-fresh.json"
"${K[@]}" create -f <(trial tdel) >/dev/null
expect "cr: a DELETE that removes at once answers a Status with the uid" '"kind":"Status".*"status":"Success".*"kind":"trials","uid":"[0-9a-f-]{36}"' \
	kubectl delete --raw "/apis/kdet.io/v1alpha1/namespaces/$NS/trials/tdel"

# --- label and field selectors --------------------------------------------------
"${K[@]}" create -f <(trial t2 '{"app":"b","tier":"x"}') >/dev/null
"${K[@]}" create -f <(trial t3 '{"tier":"y"}') >/dev/null
names() { "${K[@]}" get trials "$@" -o 'jsonpath={range .items[*]}{.metadata.name} {end}' 2>&1; }
expect "labels: app=a" '^t1 $' names -l app=a
expect "labels: app in (a,b)" '^t1 t2 $' names -l 'app in (a,b)'
expect "labels: !app" '^t3 $' names -l '!app'
expect "labels: app!=a (includes objects without app)" '^t2 t3 $' names -l 'app!=a'
expect "labels: tier=x,app" '^t1 t2 $' names -l 'tier=x,app'
expect "labels: tier notin (x)" '^t3 $' names -l 'tier notin (x)'
expect "labels: invalid selector is 400" 'BadRequest|unable to parse|invalid|found' names -l 'app=(a'
expect "fields: metadata.name=t2" '^t2 $' names --field-selector metadata.name=t2
expect "fields: metadata.namespace" '^t1 t2 t3 $' names --field-selector "metadata.namespace=$NS"
expect "fields: unsupported field is 400" 'BadRequest|not a known field|not supported|field label' names --field-selector spec.seed=7
expect_empty "labels: selector on a ConfigMap list" "${K[@]}" get cm -l app=a -o 'jsonpath={.items[*].metadata.name}'

# --- watch ------------------------------------------------------------------
base="/apis/kdet.io/v1alpha1/namespaces/$NS/trials"
# (kubectl get -o jsonpath on a list sees kubectl's own List, whose resourceVersion is empty)
rv=$(kubectl get --raw "$base" | jq -r .metadata.resourceVersion)
(kubectl get --raw "$base?watch=1&resourceVersion=$rv&timeoutSeconds=6" >"$work/watch.out" 2>&1) &
wpid=$!
sleep 1
"${K[@]}" create -f <(trial t4) >/dev/null
"${K[@]}" patch trial t4 --type=merge -p '{"spec":{"seed":1}}' >/dev/null
"${K[@]}" delete trial t4 >/dev/null
wait "$wpid"
expect "watch: ADDED, MODIFIED, DELETED in order" '^ADDED MODIFIED DELETED $' \
	bash -c "grep -o '\"type\":\"[A-Z]*\"' '$work/watch.out' | cut -d'\"' -f4 | tr '\n' ' '"

if [[ -n "${KDET_KUBE_ETCD:-}" ]] && command -v etcdctl >/dev/null; then
	# The watch cache of a real API server starts at its first list; older is expired.
	expect "410: watch from resourceVersion 1 (before the watch cache window)" '410|Gone|Expired|too old' \
		kubectl get --raw "$base?watch=1&resourceVersion=1&timeoutSeconds=3"
	# podtemplates have no watch cache here (up.sh: --watch-cache-sizes=podtemplates#0),
	# so their watches and lists go to etcd and see its compaction.
	pt() { printf '{"apiVersion":"v1","kind":"PodTemplate","metadata":{"name":"pt","labels":{"n":"%s"}},"template":{"spec":{"containers":[{"name":"c","image":"x"}]}}}' "$1"; }
	"${K[@]}" create -f <(pt 0) >/dev/null
	old=$(jp podtemplate/pt '{.metadata.resourceVersion}')
	for i in 1 2 3; do "${K[@]}" patch podtemplate pt --type=merge -p "{\"metadata\":{\"labels\":{\"n\":\"$i\"}}}" >/dev/null; done
	cur=$(jp podtemplate/pt '{.metadata.resourceVersion}')
	ETCDCTL_API=3 etcdctl --endpoints "$KDET_KUBE_ETCD" compact "$cur" >/dev/null 2>&1
	expect "410: watch from a compacted revision (etcd compaction)" '410|Gone|Expired|too old' \
		kubectl get --raw "/api/v1/namespaces/$NS/podtemplates?watch=1&resourceVersion=$old&timeoutSeconds=3"
	expect "410: exact list at a compacted revision" '410|Gone|Expired|too old' \
		kubectl get --raw "/api/v1/namespaces/$NS/podtemplates?resourceVersion=$old&resourceVersionMatch=Exact"
	expect "410: exact list of CRs at a compacted revision" '410|Gone|Expired|too old' \
		kubectl get --raw "$base?resourceVersion=$rv&resourceVersionMatch=Exact"
fi

# --- garbage collection -------------------------------------------------------
cm() { printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"%s}}' "$1" "${2:+,\"ownerReferences\":$2}"; }
owner() { # owner KIND API NAME [blockOwnerDeletion]
	local uid
	uid=$(jp "$1/$3" '{.metadata.uid}')
	printf '[{"apiVersion":"%s","kind":"%s","name":"%s","uid":"%s"%s}]' "$2" "$1" "$3" "$uid" "${4:+,\"blockOwnerDeletion\":true}"
}
# background: deleting an Experiment deletes its Trial
"${K[@]}" create -f <(printf '{"apiVersion":"kdet.io/v1alpha1","kind":"Experiment","metadata":{"name":"gc-exp"},"spec":{"name":"gc","entrypoint":"true","searcher":{"name":"single","metric":"loss","max_length":{"batches":1}},"hyperparameters":{}}}') >/dev/null 2>"$work/gc-exp.err" ||
	bad "gc: create owner Experiment" "$(head -c 400 "$work/gc-exp.err")"
"${K[@]}" create -f <(trial gc-t1 '' "$(owner Experiment kdet.io/v1alpha1 gc-exp)") >/dev/null
"${K[@]}" create -f <(cm gc-cm "$(owner Experiment kdet.io/v1alpha1 gc-exp)") >/dev/null
"${K[@]}" delete exp gc-exp --wait=false >/dev/null
if within "$gc_timeout" gone trial/gc-t1 && within 10 gone cm/gc-cm; then ok "gc: background delete of an Experiment removes its Trial and ConfigMap"; else bad "gc: background delete of an Experiment removes its Trial and ConfigMap" "still there after ${gc_timeout}s"; fi
# foreground: the owner waits (foregroundDeletion finalizer) for blocking dependents
"${K[@]}" create -f <(cm fg-parent) >/dev/null
"${K[@]}" create -f <(cm fg-child "$(owner ConfigMap v1 fg-parent 1)") >/dev/null
"${K[@]}" patch cm fg-child --type=merge -p '{"metadata":{"finalizers":["kdet.io/test-hold"]}}' >/dev/null
"${K[@]}" delete cm fg-parent --cascade=foreground --wait=false >/dev/null
if within 20 bash -c "kubectl -n $NS get cm fg-parent -o jsonpath='{.metadata.finalizers} {.metadata.deletionTimestamp}' | grep -q foregroundDeletion"; then
	ok "gc: foreground delete sets the foregroundDeletion finalizer"
else bad "gc: foreground delete sets the foregroundDeletion finalizer" "$(jp cm/fg-parent '{.metadata}')"; fi
if within "$gc_timeout" bash -c "kubectl -n $NS get cm fg-child -o jsonpath='{.metadata.deletionTimestamp}' | grep -q ."; then
	ok "gc: foreground delete marks the dependent deleted"
else bad "gc: foreground delete marks the dependent deleted" "$(jp cm/fg-child '{.metadata}')"; fi
sleep 2
expect "gc: owner stays while a blocking dependent exists" 'fg-parent' "${K[@]}" get cm fg-parent -o name
"${K[@]}" patch cm fg-child --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
if within "$gc_timeout" gone cm/fg-parent && gone cm/fg-child; then ok "gc: foreground delete completes after the dependent goes"; else bad "gc: foreground delete completes after the dependent goes"; fi
# orphan: dependents stay, their ownerReferences are removed
"${K[@]}" create -f <(cm or-parent) >/dev/null
"${K[@]}" create -f <(cm or-child "$(owner ConfigMap v1 or-parent)") >/dev/null
"${K[@]}" delete cm or-parent --cascade=orphan --wait=false >/dev/null
if within "$gc_timeout" gone cm/or-parent && within 20 bash -c "[ -z \"\$(kubectl -n $NS get cm or-child -o jsonpath='{.metadata.ownerReferences}')\" ]"; then
	ok "gc: orphan delete keeps the dependent and drops its ownerReference"
else bad "gc: orphan delete keeps the dependent and drops its ownerReference" "$(jp cm/or-child '{.metadata}')"; fi
# dangling: an owner uid that does not exist
"${K[@]}" create -f <(cm dangling '[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"00000000-0000-0000-0000-000000000001"}]') >/dev/null
if within "$gc_timeout" gone cm/dangling; then ok "gc: dependent of a missing owner is collected"; else bad "gc: dependent of a missing owner is collected"; fi

# --- RBAC with the kdet-controller identity (real control plane only) ----------
if [[ -n "${KDET_KUBE_CONTROLLER_KUBECONFIG:-}" ]]; then
	C=(env KUBECONFIG="$KDET_KUBE_CONTROLLER_KUBECONFIG" kubectl -n "$NS")
	expect "rbac: kdet-controller is authenticated as its service account" 'system:serviceaccount:kdet:kdet-controller' \
		"${C[@]}" get trials
	expect "rbac: without a binding it is 403 Forbidden" 'Forbidden|cannot list resource "trials"' "${C[@]}" get trials
	"${K[@]}" create role trial-reader --verb=get,list,watch --resource=trials.kdet.io >/dev/null
	"${K[@]}" create rolebinding trial-reader --role=trial-reader --serviceaccount=kdet:kdet-controller >/dev/null
	if within 20 "${C[@]}" get trials; then ok "rbac: a RoleBinding to the service account grants list"; else bad "rbac: a RoleBinding to the service account grants list"; fi
	expect "rbac: and nothing more (delete is 403)" 'Forbidden' "${C[@]}" delete trial t1
fi

# --- the real scheduler (real control plane only: a Node object with no kubelet) ---
if [[ -n "${KDET_KUBE_ETCD:-}" ]]; then
	node="kdapi-node-$$"
	kubectl create -f <(printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"%s","labels":{"kubernetes.io/hostname":"%s"}}}' "$node" "$node") >/dev/null
	kubectl patch node "$node" --subresource=status --type=merge -p "{\"status\":{\"capacity\":{\"cpu\":\"4\",\"memory\":\"8Gi\",\"pods\":\"10\",\"nvidia.com/gpu\":\"2\"},\"allocatable\":{\"cpu\":\"4\",\"memory\":\"8Gi\",\"pods\":\"10\",\"nvidia.com/gpu\":\"2\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"test\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}" >/dev/null
	gpupod() { printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{"nodeSelector":{"kubernetes.io/hostname":"%s"},"tolerations":[{"operator":"Exists"}],"containers":[{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"%s"}}}]}}' "$1" "$node" "$2"; }
	within 60 "${K[@]}" get sa default
	expect "scheduler: pod create (service account admission)" 'pod/gpu1 created' "${K[@]}" create -f <(gpupod gpu1 1)
	if within 60 bash -c "[ \"\$(kubectl -n $NS get pod gpu1 -o jsonpath='{.spec.nodeName}')\" = $node ]"; then
		ok "scheduler: binds a 1-GPU pod to the node"
	else bad "scheduler: binds a 1-GPU pod to the node" "$(jp pod/gpu1 '{.status}')"; fi
	expect "scheduler: a service-account token volume was added" 'kube-api-access|default-token' jp pod/gpu1 '{.spec.volumes[*].name}'
	"${K[@]}" create -f <(gpupod gpu3 3) >/dev/null
	if within 60 bash -c "kubectl -n $NS get pod gpu3 -o jsonpath='{.status.conditions[?(@.type==\"PodScheduled\")].reason}' | grep -q Unschedulable"; then
		ok "scheduler: a 3-GPU pod stays Pending, PodScheduled=False Unschedulable"
	else bad "scheduler: a 3-GPU pod stays Pending, PodScheduled=False Unschedulable" "$(jp pod/gpu3 '{.status}')"; fi
	expect "scheduler: the reason names the GPU shortage" 'Insufficient nvidia.com/gpu' jp pod/gpu3 '{.status.conditions[?(@.type=="PodScheduled")].message}'
	"${K[@]}" delete pod gpu1 gpu3 --grace-period=0 --force >/dev/null 2>&1
	kubectl delete node "$node" --wait=false >/dev/null 2>&1
fi

# --- pods/binding (how a scheduler other than the default one, e.g. Volcano, binds) ---
binding() { printf '{"apiVersion":"v1","kind":"Binding","metadata":{"name":"%s"},"target":{"apiVersion":"v1","kind":"Node","name":"%s"}}' "$1" "$2"; }
expect "binding: discovery lists pods/binding" '"pods/binding"' kubectl get --raw /api/v1
"${K[@]}" create -f <(printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bindme"},"spec":{"schedulerName":"kdapi-other","containers":[{"name":"c","image":"x"}]}}') >/dev/null
sleep 1
expect_empty "binding: a pod for another scheduler is not bound by the default one" jp pod/bindme '{.spec.nodeName}'
expect "binding: POST pods/NAME/binding succeeds" 'Success|^$' kubectl create --raw "/api/v1/namespaces/$NS/pods/bindme/binding" -f <(binding bindme kdapi-nowhere)
expect "binding: it sets spec.nodeName" '^kdapi-nowhere$' jp pod/bindme '{.spec.nodeName}'
expect "binding: PodScheduled=True" '^True$' jp pod/bindme '{.status.conditions[?(@.type=="PodScheduled")].status}'
expect "binding: a second binding is a 409 (already assigned)" 'already assigned to node' kubectl create --raw "/api/v1/namespaces/$NS/pods/bindme/binding" -f <(binding bindme kdapi-elsewhere)
expect "binding: a missing pod is 404" 'NotFound|not found' kubectl create --raw "/api/v1/namespaces/$NS/pods/nosuchpod/binding" -f <(binding nosuchpod kdapi-nowhere)
"${K[@]}" delete pod bindme --grace-period=0 --force >/dev/null 2>&1

# --- namespace deletion ---------------------------------------------------------
"${K[@]}" create -f <(trial t-ns) >/dev/null
kubectl delete ns "$NS" --wait=false >/dev/null
# A real namespace controller takes seconds; kdet-local may already be done (404).
ns_gone='Terminating'
ns_late='Forbidden|being terminated'
[[ -n "${KDET_KUBE_ETCD:-}" ]] || { ns_gone+='|NotFound'; ns_late+='|NotFound'; }
expect "namespace: Terminating phase" "$ns_gone" kubectl get ns "$NS" -o 'jsonpath={.status.phase}'
expect "namespace: create in a terminating namespace is refused (403 Forbidden)" "$ns_late" \
	"${K[@]}" create -f <(trial t-late)
if within "$gc_timeout" bash -c "! kubectl get ns $NS >/dev/null 2>&1"; then ok "namespace: deletion removes its CRs and finishes"; else bad "namespace: deletion removes its CRs and finishes" "$(kubectl get ns "$NS" -o jsonpath='{.status}' 2>&1)"; fi

echo "$pass passed, $fail failed"
((fail == 0))
