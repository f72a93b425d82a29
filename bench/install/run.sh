#!/usr/bin/env bash
# bench/install: kdet on the real nodes (helm install of helm/kdet, the
# upstream kubelet on containerd, e2e/kube/run.sh install) against the same
# on kdet-local (det deploy local up, the process kubelet), one run each, one
# after the other on this machine:
#   controller start -> Ready    real: each controller pod, created -> Ready
#                                (API timestamps, whole seconds); kdet-local:
#                                `det deploy local up` -> the controller's /readyz
#   create -> Running p50/p95    N one-trial fashion-mnist-c experiments, one
#                                after the other (e2e/kube/latency.sh)
#   image sizes                  the archives of `make images`
# and prints real / kdet-local for each. Needs root (the real nodes),
# `make images`, the kube caches (built when cold: e2e/kube/build.sh --all).
#   KDET_BENCH_INSTALL_N  experiments per side (default 20)
set -u
B=${KD_BUILD:-build}
B=$(cd "$B" && pwd)
SRC=${KD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
N=${KDET_BENCH_INSTALL_N:-20}
[[ "$(id -u)" == 0 ]] || { echo "bench/install: needs root (containerd, runc, bridges on the real nodes)"; exit 1; }
work=$(mktemp -d /tmp/kd-bench-install.XXXXXX)
chmod 0755 "$work"
deploy_dir="$work/local"
cleanup() {
	KDET_DATA_DIR="$deploy_dir" "$B/bin/det" deploy local down --data-dir "$deploy_dir" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# shellcheck source=e2e/kube/latency.sh
source "$SRC/e2e/kube/latency.sh"

echo "-- images (make images)"
for n in controller trainer postgresql; do
	a="$B/images/kdet-$n.oci.tar"
	[[ -e "$a" ]] || { echo "bench/install: $a missing (make images)"; exit 1; }
	grep "^kdet-$n " "$B/images/images.txt" | awk '{ $1 = ""; $2 = ""; sub(/^ +/, ""); print "  " $0 }'
done

echo "-- kdet-local: det deploy local up, then $N one-trial experiments"
t0=$(date +%s.%N)
"$B/bin/det" deploy local up --data-dir "$deploy_dir" --port 0 >"$work/up.log" 2>&1 ||
	{ cat "$work/up.log"; exit 1; }
url=$(cat "$deploy_dir/controller-url")
ca=()
[[ -f "$deploy_dir/controller.crt" ]] && ca=(--cacert "$deploy_dir/controller.crt")
latency_poll 120 curl -fsS "${ca[@]}" "$url/readyz" ||
	{ echo "bench/install: the local controller's /readyz did not answer 200 in 120 s"; exit 1; }
local_ready=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "kdet-local: det deploy local up -> controller /readyz: $local_ready s"
export KUBECONFIG="$deploy_dir/kubeconfig"
mkdir -p "$work/ctx"
echo "fashion-mnist-c from the build" >"$work/ctx/README"
# One experiment at a time: det names it probe-K-<digest> and prints the name.
name=""
lat_create() {
	cat >"$work/probe.yaml" <<EOF
name: probe-$1
entrypoint: fashion-mnist-c --train-limit 3200 --test-limit 500 --quiet
environment:
  environment_variables: [OPENBLAS_NUM_THREADS=1]
hyperparameters: {global_batch_size: 32, hidden_units: 32, momentum: 0.9, learning_rate: 0.05}
searcher: {name: single, metric: validation_loss, smaller_is_better: true, max_length: {batches: 1000000}}
resources: {slots_per_trial: 1}
max_restarts: 0
EOF
	name=$("$B/bin/det" experiment create "$work/probe.yaml" "$work/ctx" 2>/dev/null | tail -n1)
	[[ -n "$name" ]]
}
lat_running() {
	[[ -n "$(kubectl get pods -l "kdet.io/experiment=$name" \
		-o 'jsonpath={.items[0].status.containerStatuses[0].state.running.startedAt}' 2>/dev/null)" ]]
}
lat_kill() {
	"$B/bin/det" experiment kill "$name" >/dev/null 2>&1
	latency_poll 60 bash -c "[[ -z \"\$(kubectl get pods -l kdet.io/experiment=$name -o name)\" ]]"
}
local_line=$(latency_measure "$N" "$work/local-latency")
echo "kdet-local: ${local_line#time: }"
"$B/bin/det" deploy local down --data-dir "$deploy_dir" >/dev/null 2>&1
unset KUBECONFIG

echo "-- real nodes: e2e/kube/run.sh install with $N one-trial experiments"
KDET_INSTALL_MEASURE=$N KD_SRC=$SRC KD_BUILD=$B "$SRC/e2e/kube/run.sh" install >"$work/real.log" 2>&1
rc=$?
grep -E '^(time|image):|passed, .* failed$' "$work/real.log" | sed 's/^/real: /'
((rc == 0)) || echo "real: the install suite failed (exit $rc); its figures may be partial"
real_ready=$(sed -n 's/^time: controller pod .* created -> Ready \([0-9]*\) s.*/\1/p' "$work/real.log" | sort -n | tail -n1)
real_line=$(grep '^time: experiment create -> first trial container Running' "$work/real.log" | tail -n1)

p() { sed -n "s/.*$1 \\([0-9.]*\\) s.*/\\1/p" <<<"$2"; }
echo "-- real node / kdet-local"
echo "controller start -> Ready: real ${real_ready:-?} s (slowest pod, whole seconds), kdet-local $local_ready s, ratio $(ratio "${real_ready:-0}" "$local_ready")"
for q in p50 p95; do
	r=$(p "$q" "$real_line") l=$(p "$q" "$local_line")
	echo "create -> Running $q: real ${r:-?} s, kdet-local ${l:-?} s, ratio $(ratio "${r:-0}" "${l:-0}")"
done
