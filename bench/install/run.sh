#!/usr/bin/env bash
# bench/install: kdet on the real nodes (helm install of helm/kdet, the
# upstream kubelet on containerd, e2e/kube/run.sh install) against the same
# on kdet-local (det deploy local up, the process kubelet), one run each, one
# after the other on this machine:
#   controller start -> Ready    real: each controller pod, created -> Ready
#                                (API timestamps, whole seconds); kdet-local:
#                                `det deploy local up` -> the controller's /readyz
#   create -> Running p50/p95    N one-trial fashion-mnist-c experiments, one
#                                after the other: the first trial container seen
#                                Running (polled), and the first worker process's
#                                own start (e2e/kube/latency.sh); kdet-local's
#                                worker figures also against the goal of 1 s
#   image sizes                  the archives of `make images`
# and prints real / kdet-local for each. The real side needs root, `make
# images` and the kube caches (built when cold: e2e/kube/build.sh --all); the
# kdet-local side needs none of them.
#   KDET_BENCH_INSTALL_N     experiments per side (default 20)
#   KDET_BENCH_INSTALL_REAL  1: the real side too, 0: kdet-local only; auto (the
#                            default): the real side when root and the images are there
set -u
B=${KD_BUILD:-build}
B=$(cd "$B" && pwd)
SRC=${KD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
N=${KDET_BENCH_INSTALL_N:-20}
GOAL=1 # seconds, experiment create -> first worker process running on kdet-local (p50 and p95)
images=("$B/images/kdet-controller.oci.tar" "$B/images/kdet-trainer.oci.tar" "$B/images/kdet-postgresql.oci.tar")
real=${KDET_BENCH_INSTALL_REAL:-auto}
why=""
if [[ "$(id -u)" != 0 ]]; then
	why="not root (containerd, runc and the bridges need it)"
else
	for a in "${images[@]}"; do [[ -e "$a" ]] || why="$a missing (make images)"; done
fi
case "$real" in
auto) [[ -z "$why" ]] && real=1 || real=0 ;;
1) [[ -z "$why" ]] || { echo "bench/install: the real nodes: $why; KDET_BENCH_INSTALL_REAL=0 measures kdet-local alone"; exit 1; } ;;
0) why="KDET_BENCH_INSTALL_REAL=0" ;;
*) echo "bench/install: KDET_BENCH_INSTALL_REAL must be 0, 1 or auto, not '$real'"; exit 2 ;;
esac
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

if [[ "$real" == 1 ]]; then
	echo "-- images (make images)"
	for n in controller trainer postgresql; do
		grep "^kdet-$n " "$B/images/images.txt" | awk '{ $1 = ""; $2 = ""; sub(/^ +/, ""); print "  " $0 }'
	done
fi

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
token=$(cat "$deploy_dir/user-token")
lat_create() {
	cat >"$work/probe.yaml" <<EOF
name: probe-$1
entrypoint: $LATENCY_ENTRYPOINT
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
lat_worker() {
	local ns trial
	read -r ns trial < <(kubectl get trials -l "kdet.io/experiment=$name" \
		-o 'jsonpath={.items[0].metadata.namespace} {.items[0].metadata.name}' 2>/dev/null)
	[[ -n "${trial:-}" ]] &&
		curl -fsS "${ca[@]}" -H "Authorization: Bearer $token" --max-time 10 \
			"$url$(latency_logs_path "$ns" "$trial")"
}
lat_kill() {
	"$B/bin/det" experiment kill "$name" >/dev/null 2>&1
	latency_poll 60 bash -c "[[ -z \"\$(kubectl get pods -l kdet.io/experiment=$name -o name)\" ]]"
}
latency_measure "$N" "$work/local-latency" >"$work/local-lines" ||
	echo "kdet-local: a sample failed; the figures are of the others"
sed 's/^time: /kdet-local: /' "$work/local-lines"
"$B/bin/det" deploy local down --data-dir "$deploy_dir" >/dev/null 2>&1
unset KUBECONFIG

# p Q LINE: the Q (p50, p95) seconds of a latency_measure line.
p() { sed -n "s/.*$1 \\([0-9.]*\\) s.*/\\1/p" <<<"$2"; }
local_ctr=$(grep 'first trial container Running' "$work/local-lines")
local_wrk=$(grep 'first worker process running' "$work/local-lines")
echo "-- kdet-local / goal"
for q in p50 p95; do
	l=$(p "$q" "$local_wrk")
	echo "create -> first worker process running $q: kdet-local ${l:-?} s, goal $GOAL s, ratio $(ratio "${l:-0}" "$GOAL") (at most 1: within the goal)"
done
if [[ "$real" != 1 ]]; then
	echo "real nodes: not measured: $why"
	exit 0
fi

echo "-- real nodes: e2e/kube/run.sh install with $N one-trial experiments"
KDET_INSTALL_MEASURE=$N KD_SRC=$SRC KD_BUILD=$B "$SRC/e2e/kube/run.sh" install >"$work/real.log" 2>&1
rc=$?
grep -E '^(time|image):|passed, .* failed$' "$work/real.log" | sed 's/^/real: /'
((rc == 0)) || echo "real: the install suite failed (exit $rc); its figures may be partial"
real_ready=$(sed -n 's/^time: controller pod .* created -> Ready \([0-9]*\) s.*/\1/p' "$work/real.log" | sort -n | tail -n1)
real_ctr=$(grep '^time: experiment create -> first trial container Running' "$work/real.log" | tail -n1)
real_wrk=$(grep '^time: experiment create -> first worker process running' "$work/real.log" | tail -n1)

echo "-- real node / kdet-local"
echo "controller start -> Ready: real ${real_ready:-?} s (slowest pod, whole seconds), kdet-local $local_ready s, ratio $(ratio "${real_ready:-0}" "$local_ready")"
for q in p50 p95; do
	r=$(p "$q" "$real_ctr") l=$(p "$q" "$local_ctr")
	echo "create -> first trial container Running $q: real ${r:-?} s, kdet-local ${l:-?} s, ratio $(ratio "${r:-0}" "${l:-0}")"
	r=$(p "$q" "$real_wrk") l=$(p "$q" "$local_wrk")
	echo "create -> first worker process running $q: real ${r:-?} s, kdet-local ${l:-?} s, ratio $(ratio "${r:-0}" "${l:-0}")"
done
