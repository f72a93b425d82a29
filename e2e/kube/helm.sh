#!/bin/bash
# The Helm chart against a real API server: the CRDs of helm/kdet/crds are
# applied (server-side validation of their schemas), then the chart is
# rendered by helm with the default values and with every value set
# (tests/helm/values-full.yaml) and each rendering is applied with
# `kubectl apply --dry-run=server`, so that the API server's own validation,
# defaulting and admission see every object. Then the ServiceAccount's RBAC,
# applied for real, is checked with `kubectl auth can-i` for what the
# controller needs and for what it must not have.
#
# Usage: KUBECONFIG=FILE e2e/kube/helm.sh
#   HELM   the helm binary (default: $KD_SRC/.deps/helm/helm, from make deps)
# Prints `N passed, N failed`; exits 1 when a check failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/../.." && pwd)"
[[ -n "${KUBECONFIG:-}" ]] || { echo "helm: set KUBECONFIG" >&2; exit 2; }
HELM="${HELM:-$src/.deps/helm/helm}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kdet-kube-helm.XXXXXX")"
NS="kdhelm-$$"
cleanup() {
	[[ -f "$work/rbac.yaml" ]] && kubectl delete -f "$work/rbac.yaml" --wait=false >/dev/null 2>&1
	kubectl delete ns "$NS" --wait=false >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
export HOME="$work" # a private kubectl discovery cache
# shellcheck source=e2e/kube/checks.sh
source "$here/checks.sh"
if [[ ! -x "$HELM" ]]; then
	bad "helm present at $HELM (make deps)"
	echo "$pass passed, $fail failed"
	exit 1
fi

if out=$(kubectl apply -f "$src/helm/kdet/crds/" 2>&1); then ok "the chart's CRDs apply"; else bad "the chart's CRDs apply" "$out"; fi
kubectl create ns "$NS" >/dev/null 2>&1 || bad "create namespace $NS"

# render NAME ARGS...: helm template into $work/NAME.yaml
render() {
	local name=$1 out
	shift
	if out=$("$HELM" template kdet "$src/helm/kdet" --namespace "$NS" "$@" 2>&1 >"$work/$name.yaml"); then
		ok "helm template ($name)"
	else
		bad "helm template ($name)" "$out"
	fi
}
# dry NAME: kubectl apply --dry-run=server of the rendering, every object
# accepted, once as a client-side apply and once as a server-side apply (the
# way helm 4 installs: an API server's structured-merge rules, such as the
# keys of a Service's port list, apply only there)
dry() {
	local name=$1 out n mode
	n=$(grep -c '^kind:' "$work/$name.yaml")
	for mode in client server; do
		local args=(--dry-run=server)
		[[ $mode == server ]] && args+=(--server-side --field-manager=helm)
		if out=$(kubectl apply "${args[@]}" -f "$work/$name.yaml" 2>&1); then
			local got
			got=$(printf '%s\n' "$out" | grep -c 'server dry run')
			if ((got == n)); then ok "apply --dry-run=server, $mode-side ($name): $n objects accepted"; else bad "apply --dry-run=server, $mode-side ($name): $got of $n objects" "$out"; fi
		else
			bad "apply --dry-run=server, $mode-side ($name)" "$(printf '%s' "$out" | head -c 1500)"
		fi
	done
}
render defaults
dry defaults
render full -f "$src/tests/helm/values-full.yaml" --set controller.watchNamespace="$NS"
dry full
render sharedfs --set checkpointStorage.type=shared_fs --set checkpointStorage.sharedFs.hostPath=/var/lib/kdet/checkpoints --set replicas=1
dry sharedfs

# RBAC for real: the ServiceAccount may do what the controller does, and no more.
"$HELM" template kdet "$src/helm/kdet" --namespace "$NS" --show-only templates/rbac.yaml >"$work/rbac.yaml" 2>/dev/null
if out=$(kubectl apply -f "$work/rbac.yaml" 2>&1); then ok "RBAC applies"; else bad "RBAC applies" "$out"; fi
sa="system:serviceaccount:$NS:kdet-controller"
can() { # can WANT VERB RESOURCE[/SUBRESOURCE] [NS]
	local want=$1 verb=$2 res=$3 ns=${4:-default} got sub=()
	# kubectl reads RESOURCE/NAME, so a subresource goes in its own flag
	if [[ "$res" == */* ]]; then sub=(--subresource="${res#*/}"); res=${res%%/*}; fi
	got=$(kubectl auth can-i "$verb" "$res" "${sub[@]}" --as="$sa" -n "$ns" 2>/dev/null)
	if [[ "$got" == "$want" ]]; then ok "controller can-i $verb $res: $want"; else bad "controller can-i $verb $res: want $want, got '$got'"; fi
}
for vr in "create trials.kdet.io" "patch experiments.kdet.io/status" "create pods" "delete pods" \
	"watch nodes" "get secrets" "create services" "list configmaps" "create events"; do
	# shellcheck disable=SC2086
	can yes $vr
done
can yes update leases.coordination.k8s.io "$NS"
# The pods kdet does not schedule are watched in all namespaces for the room they hold.
for verb in list watch; do
	got=$(kubectl auth can-i "$verb" pods --all-namespaces --as="$sa" 2>/dev/null)
	if [[ "$got" == yes ]]; then ok "controller can-i $verb pods --all-namespaces: yes"; else bad "controller can-i $verb pods --all-namespaces: want yes, got '$got'"; fi
done
for vr in "list secrets" "watch secrets" "create pods/exec" "delete nodes" "create clusterroles" \
	"delete experiments.kdet.io" "create deployments.apps" "escalate roles.rbac.authorization.k8s.io"; do
	# shellcheck disable=SC2086
	can no $vr
done

echo "$pass passed, $fail failed"
((fail == 0))
