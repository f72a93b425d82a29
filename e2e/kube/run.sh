#!/bin/bash
# Entry point of `make e2e-real`: the end-to-end suites against a real
# upstream control plane. Builds it when the cache is empty (e2e/kube/build.sh),
# starts it (up.sh), runs the suites with the admin kubeconfig, stops it
# (down.sh, also on failure or Ctrl-C), prints `N passed, N failed` and exits
# non-zero when anything failed.
#
# Usage: KD_SRC=TREE KD_BUILD=BUILD_DIR e2e/kube/run.sh [SUITE...]
#   SUITE: api, conformance (default: api). conformance needs a node agent
#   for its pod, log and Node checks; until kdet's process kubelet can
#   register with a real API server those fail (after long waits).
#   KD_BUILD        build dir holding bin/det (default: TREE/build)
#   KDET_KUBE_DIR   use this already running control plane (from up.sh) and
#                   leave it running
#   KDET_KUBE_KEEP=1  keep the control plane's dir (logs, certs, etcd) after
#                   the run; on failure the component logs are always copied
#                   to a kdet-kube-logs.* dir under $TMPDIR, whose path is printed
#   KDET_KUBE_SUITE_TIMEOUT  seconds per suite (default 900)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kube/common.sh
source "$here/common.sh"
KD_SRC="${KD_SRC:-$(cd "$here/../.." && pwd)}"
KD_BUILD="${KD_BUILD:-$KD_SRC/build}"
suite_timeout="${KDET_KUBE_SUITE_TIMEOUT:-900}"
suites=("$@")
((${#suites[@]})) || suites=(api)
for s in "${suites[@]}"; do
	case "$s" in
	api | conformance) ;;
	*) kube_die "unknown suite $s (api, conformance)" ;;
	esac
done
[[ -x "$KD_BUILD/bin/det" ]] || kube_log "warning: $KD_BUILD/bin/det missing; the det checks will fail (make $KD_BUILD/bin/det)"

t0=$(date +%s)
if ! kube_cached; then
	kube_log "building kube-apiserver, kube-scheduler, kube-controller-manager $KUBE_VERSION (cold: ~15 min on 2 idle cores, longer on a busy machine; cached afterwards in $KUBE_BIN)..."
fi
"$here/build.sh"
t_build=$(($(date +%s) - t0))

own_cluster=0
dir="${KDET_KUBE_DIR:-}"
failed_run=0
finish() {
	local rc=$?
	if ((own_cluster)) && [[ -n "$dir" && -d "$dir" ]]; then
		if ((rc != 0 || failed_run)) && [[ -d "$dir/logs" ]]; then
			local keep
			keep="$(mktemp -d "${TMPDIR:-/tmp}/kdet-kube-logs.XXXXXX")"
			cp -r "$dir/logs/." "$keep/"
			kube_log "component logs of the failed run kept in $keep"
		fi
		"$here/down.sh" "$dir" || true
	fi
}
trap finish EXIT
trap 'exit 130' INT TERM

if [[ -z "$dir" ]]; then
	kube_log "starting the control plane..."
	t1=$(date +%s)
	dir="$("$here/up.sh" | tail -n1)"
	own_cluster=1
	kube_log "control plane up in $(($(date +%s) - t1)) s"
fi
[[ -f "$dir/env" ]] || kube_die "$dir/env missing (not an up.sh dir?)"
set -a
# shellcheck disable=SC1091
source "$dir/env"
set +a

total_pass=0 total_fail=0
run_suite() {
	local name=$1 log="$dir/logs/suite-$1.out" rc=0 line p f
	shift
	kube_log "suite $name..."
	local s0
	s0=$(date +%s)
	KD_SRC="$KD_SRC" KD_BUILD="$KD_BUILD" KD_DET="$KD_BUILD/bin/det" \
		timeout "$suite_timeout" "$@" 2>&1 | tee "$log" || rc=$?
	line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n1 || true)"
	if [[ -n "$line" ]]; then
		p=${line%% passed*}
		f=${line#*passed, }
		f=${f%% failed}
	else
		p=0 f=0
	fi
	if ((rc != 0 && f == 0)); then
		f=1 # crashed or timed out without reporting a failure
		echo "FAIL suite $name exited $rc without reporting a failed check"
	fi
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	kube_log "suite $name: $p passed, $f failed in $(($(date +%s) - s0)) s"
}

for s in "${suites[@]}"; do
	case "$s" in
	conformance) run_suite conformance env -u KD_LOCAL_BIN "$KD_SRC/e2e/conformance/run.sh" ;;
	api) run_suite api "$here/api.sh" ;;
	*) kube_die "unknown suite $s (conformance, api)" ;;
	esac
done

((total_fail == 0)) || failed_run=1
kube_log "done in $(($(date +%s) - t0)) s (build/cache check ${t_build} s)"
echo "$total_pass passed, $total_fail failed"
((total_fail == 0))
