#!/bin/bash
# Entry point of `make e2e-real`: the end-to-end suites against a real
# upstream control plane. Builds it when the cache is empty (e2e/kube/build.sh),
# starts it (up.sh) and, for the suites that run pods, kdet's process kubelet
# as its node (kubelet.sh), runs the suites, stops everything (down.sh, also
# on failure or Ctrl-C), prints `N passed, N failed` and exits non-zero when
# anything failed.
#
# Usage: KD_SRC=TREE KD_BUILD=BUILD_DIR e2e/kube/run.sh [SUITE...]
#   SUITE: conformance, api, helm, controller, and, as root, realnode and
#          install (default: all of them in that order; realnode and install
#          are left out, with a warning, when not root):
#          realnode: the upstream kubelet on containerd as nodes
#          kdet-real-node and kdet-real-node-2, kube-proxy, cluster DNS
#          (build.sh --node, node/up.sh), checked by realnode.sh;
#          install: helm install of helm/kdet with the images of
#          `make images` (BUILD/images) on those nodes, experiments in
#          containers, leader failover, helm upgrade and uninstall (install.sh)
#   KD_BUILD        build dir holding bin/det and bin/kdet-local, and for the
#                   controller suite bin/kdet-controller, bin/kdet-launch and
#                   bin/fashion-mnist-c (default: TREE/build)
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
KD_DET="$KD_BUILD/bin/det"
export KD_SRC KD_BUILD KD_DET # for the suites
suite_timeout="${KDET_KUBE_SUITE_TIMEOUT:-900}"
suites=("$@")
if ((${#suites[@]} == 0)); then
	suites=(conformance api helm controller)
	if ((EUID == 0)); then
		suites+=(realnode install)
	else
		kube_log "warning: not root, so the realnode and install suites (containerd, runc, bridges) are left out"
	fi
fi
need_node=0 need_realnode=0
for s in "${suites[@]}"; do
	case "$s" in
	api | helm) ;;
	conformance | controller) need_node=1 ;;
	realnode | install) need_realnode=1 ;;
	*) kube_die "unknown suite $s (conformance, api, helm, controller, realnode, install)" ;;
	esac
done
[[ -x "$KD_BUILD/bin/det" ]] || kube_log "warning: $KD_BUILD/bin/det missing; the det checks will fail (make $KD_BUILD/bin/det)"
for t in kubectl jq curl; do
	command -v "$t" >/dev/null || kube_die "$t not found (the suites need kubectl, jq and curl on PATH)"
done
if ((need_node)) && [[ ! -x "$KD_BUILD/bin/kdet-local" ]]; then
	kube_die "$KD_BUILD/bin/kdet-local missing: the process kubelet runs the pods (make $KD_BUILD/bin/kdet-local)"
fi

t0=$(date +%s)
if ! kube_cached; then
	kube_log "building kube-apiserver, kube-scheduler, kube-controller-manager $KUBE_VERSION (cold: ~15 min on 2 idle cores, longer on a busy machine; cached afterwards in $KUBE_BIN)..."
fi
if ((need_realnode)); then
	((EUID == 0)) || kube_die "the realnode and install suites need root (containerd, runc, bridges, iptables, cgroups)"
	"$here/build.sh" --all # control plane and node in one pass when both are cold
	"$here/build.sh"
	"$here/build.sh" --node
else
	"$here/build.sh"
fi
t_build=$(($(date +%s) - t0))

own_cluster=0
dir="${KDET_KUBE_DIR:-}"
failed_run=0
suite_pid="" tail_pid=""
finish() {
	local rc=$?
	if [[ -n "$suite_pid" ]]; then
		kill -TERM "$suite_pid" 2>/dev/null || true
		wait "$suite_pid" 2>/dev/null || true
	fi
	[[ -z "$tail_pid" ]] || kill "$tail_pid" 2>/dev/null || true
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
	# up.sh picks free ports, but on a shared machine another process may
	# take one before a component binds it: then up.sh stops what it
	# started, and a second or third try picks other ports.
	for try in 1 2 3; do
		if dir="$("$here/up.sh" | tail -n1)" && [[ -f "$dir/env" ]]; then
			break
		fi
		dir=""
		((try < 3)) || kube_die "the control plane did not start (3 tries)"
		kube_log "start failed (try $try); trying again with other ports"
	done
	own_cluster=1
	kube_log "control plane up in $(($(date +%s) - t1)) s"
fi
[[ -f "$dir/env" ]] || kube_die "$dir/env missing (not an up.sh dir?)"
if ((need_node)); then
	# Its pid goes into $dir/pids: down.sh stops it (and so its pods) first.
	"$here/kubelet.sh" "$dir" "$KD_BUILD/bin/kdet-local"
fi
if ((need_realnode)) && [[ ! -f "$dir/realnode/env" ]]; then
	# Recorded under $dir/realnode: down.sh removes it all first.
	t1=$(date +%s)
	"$here/node/up.sh" "$dir"
	kube_log "real node up in $(($(date +%s) - t1)) s"
fi
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
	# In the background, so that a signal to this script interrupts `wait`
	# at once and finish() stops the suite (timeout passes the TERM on).
	: >"$log" # before tail opens it
	timeout -k 30 "$suite_timeout" "$@" >"$log" 2>&1 </dev/null &
	suite_pid=$!
	tail -n +1 -f --pid="$suite_pid" "$log" &
	tail_pid=$!
	wait "$suite_pid" || rc=$?
	suite_pid=""
	wait "$tail_pid" || true
	tail_pid=""
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
	helm) run_suite helm "$here/helm.sh" ;;
	controller) run_suite controller "$here/controller.sh" ;;
	realnode) run_suite realnode env KDET_KUBE_DIR="$dir" "$here/realnode.sh" ;;
	install) run_suite install env KDET_KUBE_DIR="$dir" "$here/install.sh" ;;
	*) kube_die "unknown suite $s (conformance, api, helm, controller, realnode, install)" ;;
	esac
done

((total_fail == 0)) || failed_run=1
kube_log "done in $(($(date +%s) - t0)) s (build/cache check ${t_build} s)"
echo "$total_pass passed, $total_fail failed"
((total_fail == 0))
