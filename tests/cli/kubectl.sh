#!/bin/bash
# det and kubectl against kdet-local: the CRDs install, and the resources
# `det experiment create --dry-run` prints for every example are accepted
# by `kubectl apply --dry-run=client`, `--dry-run=server` and a real apply;
# an invalid one is refused with the API server's causes.
set -u
build=${KD_BUILD:-$PWD/build}
cd "${KD_SRC:-.}"
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2"; fail=$((fail + 1)); }

if ! command -v kubectl >/dev/null; then
    echo "skip: kubectl is not installed"; echo "1 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d /tmp/kd-cli-kubectl-XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "starting kdet-local..."
"$build/bin/kdet-local" --port 0 --port-file "$tmp/port" --kubeconfig-out "$tmp/kubeconfig" \
    --data-dir "$tmp/data" --log-level warn > "$tmp/kdet-local.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && [ -s "$tmp/kubeconfig" ] && break; sleep 0.1; done
if [ ! -s "$tmp/kubeconfig" ]; then
    bad "kdet-local did not start" "$tmp/kdet-local.log"; echo "$pass passed, $fail failed"; exit 1
fi
export KUBECONFIG=$tmp/kubeconfig
k() { timeout 30 kubectl --request-timeout=20s "$@"; }

if k apply --dry-run=client -f crds/ > "$tmp/out" 2>&1; then ok "kubectl apply --dry-run=client -f crds/"
else bad "kubectl apply --dry-run=client -f crds/" "$tmp/out"; fi
if k apply -f crds/ > "$tmp/out" 2>&1; then ok "kubectl apply -f crds/"
else bad "kubectl apply -f crds/" "$tmp/out"; fi
for _ in $(seq 50); do k get exp > /dev/null 2>&1 && break; sleep 0.1; done

n=0
for cfg in examples/*/*.yaml examples/*/*/*.yaml; do
    dir=$(dirname "$cfg")
    if ! "$build/bin/det" experiment create "$cfg" "$dir" --dry-run > "$tmp/res.yaml" 2> "$tmp/det.err"; then
        bad "det experiment create $cfg --dry-run" "$tmp/det.err"; continue
    fi
    for mode in client server; do
        if k apply --dry-run=$mode -f "$tmp/res.yaml" > "$tmp/out" 2>&1 && grep -q "experiment.kdet.io/.* created" "$tmp/out"; then
            ok "$cfg: kubectl apply --dry-run=$mode"
        else
            bad "$cfg: kubectl apply --dry-run=$mode" "$tmp/out"
        fi
    done
    n=$((n + 1))
done
[ $n -ge 11 ] && ok "$n example configs checked" || bad "only $n example configs found"

# a real apply stores the spec as det printed it
cfg=examples/fashion-mnist-c/adaptive.yaml
"$build/bin/det" experiment create "$cfg" examples/fashion-mnist-c --dry-run > "$tmp/res.yaml" 2>/dev/null
name=$(sed -n '/^kind: Experiment/,$ s/^  name: //p' "$tmp/res.yaml" | head -1)
if k apply -f "$tmp/res.yaml" > "$tmp/out" 2>&1 &&
    [ "$(k get exp "$name" -o jsonpath='{.spec.searcher.name}/{.spec.searcher.max_trials}/{.spec.context.configMap}')" = "adaptive_asha/16/$name-context" ] &&
    [ -n "$(k get configmap "$name-context" -o jsonpath='{.binaryData.context\.tar\.gz}')" ]; then
    ok "kubectl apply stores the Experiment and its context ConfigMap ($name)"
else
    bad "kubectl apply and read back $name" "$tmp/out"
fi
if k get trial > "$tmp/out" 2>&1; then ok "kubectl get trial"; else bad "kubectl get trial" "$tmp/out"; fi

# an invalid resource is refused with the API server's causes
sed 's/^  max_restarts: 1$/  max_restarts: -1/; s/^    max_trials: 16$/    max_trials: sixteen/' \
    "$tmp/res.yaml" > "$tmp/bad.yaml"
if k apply --dry-run=server -f "$tmp/bad.yaml" > "$tmp/out" 2>&1; then
    bad "an invalid Experiment was accepted" "$tmp/out"
elif grep -qF '* spec.searcher.max_trials: Invalid value: "string": spec.searcher.max_trials in body must be of type integer: "string"' "$tmp/out" &&
    grep -qF '* spec.max_restarts: Invalid value: -1: spec.max_restarts in body should be greater than or equal to 0' "$tmp/out"; then
    ok "an invalid Experiment is refused with both causes"
else
    bad "an invalid Experiment: unexpected message" "$tmp/out"
fi

kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
