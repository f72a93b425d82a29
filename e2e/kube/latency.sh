# Experiment create -> first trial container Running, measured the same way
# on a real cluster (e2e/kube/install.sh) and on kdet-local (bench/install):
# N one-trial experiments, one after the other, each created with det, its
# first container polled until it runs (kubectl, every 0.1 s), then killed
# and waited for until its pods are gone. Sourced, never run.
#
# The caller defines, for sample K:
#   lat_create K   create the experiment (exit status: created)
#   lat_running K  true once its first trial container runs
#   lat_kill K     kill it and wait until its pods are gone
# latency_measure N OUT: run the N samples; OUT gets one time in seconds a
# line; prints "time: experiment create -> first trial container Running,
# N experiments: p50 X s, p95 Y s" (or a line saying why not) and returns
# non-zero when a sample failed.

# latency_poll SECONDS CMD...: CMD every 0.1 s until it succeeds.
latency_poll() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || return 1
		sleep 0.1
	done
}

latency_measure() {
	local n=$1 out=$2 k t0 failed=0
	: >"$out"
	for k in $(seq 1 "$n"); do
		t0=$(date +%s.%N)
		if ! lat_create "$k"; then
			echo "latency: sample $k: create failed" >&2
			failed=1
			break
		fi
		if latency_poll 180 lat_running "$k"; then
			awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", b - a }' >>"$out"
		else
			echo "latency: sample $k: no running container in 180 s" >&2
			failed=1
		fi
		lat_kill "$k"
	done
	sort -n "$out" | awk -v want="$n" '{ v[NR] = $1 } END {
		if (NR == 0) { print "time: experiment create -> first trial container Running: no sample"; exit }
		i50 = int((NR + 1) / 2); i95 = int(NR * 0.95 + 0.999); if (i95 > NR) i95 = NR
		printf "time: experiment create -> first trial container Running, %d experiments: p50 %.2f s, p95 %.2f s\n", NR, v[i50], v[i95] }'
	return "$failed"
}
