# Experiment create -> first trial container Running, and -> first worker
# process running, measured the same way on a real cluster
# (e2e/kube/install.sh) and on kdet-local (bench/install): N one-trial
# experiments, one after the other, each created with det, its first
# container polled until it runs (kubectl, every 0.1 s), then killed and
# waited for until its pods are gone.
#
# The container's figure is when the poll saw it Running: it includes up to
# one poll's delay. The worker's figure is exact: the probe's entrypoint
# (LATENCY_ENTRYPOINT) prints LATENCY_MARK as the worker process's first act,
# kdet-launch stamps the line with the wall clock when it reads it and ships
# it to the controller, and lat_worker reads that stamp back from the trial's
# logs. Both clocks are this machine's (kdet-local's pods and the real
# nodes' containers run here).
#
# The caller defines, for sample K:
#   lat_create K   create the experiment (exit status: created)
#   lat_running K  true once its first trial container runs
#   lat_worker K   (optional) print the answer of GET latency_logs_path for
#                  its trial (nothing until the trial exists)
#   lat_kill K     kill it and wait until its pods are gone
# latency_measure N OUT: run the N samples; OUT gets one container time in
# seconds a line, OUT.worker one worker time a line; prints
# "time: experiment create -> first trial container Running, N experiments:
# p50 X s, p95 Y s" (or a line saying why not), the same for "first worker
# process running" when lat_worker is defined, and returns non-zero when a
# sample failed.
#
# Sourced, never run.

LATENCY_MARK=kdet-latency-probe-worker-started

# The probe's entrypoint: it prints LATENCY_MARK and then runs a
# fashion-mnist-c worker in the same process (sh execs it).
LATENCY_ENTRYPOINT="sh -c 'echo $LATENCY_MARK; exec fashion-mnist-c --train-limit 3200 --test-limit 500 --quiet'"

# latency_logs_path NS TRIAL: the API path that finds the mark in the trial's logs.
latency_logs_path() {
	printf '/api/v1/namespaces/%s/trials/%s/logs?contains=%s&limit=1' "$1" "$2" "$LATENCY_MARK"
}

# latency_poll SECONDS CMD...: CMD every 0.1 s until it succeeds.
latency_poll() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || return 1
		sleep 0.1
	done
}

# latency_log_time: the first line's timestamp of a logs answer on stdin, in
# seconds since the epoch; fails when there is no line.
latency_log_time() {
	local ts
	ts=$(jq -r '.logs[0].timestamp // empty' 2>/dev/null)
	[[ -n "$ts" ]] && date -d "$ts" +%s.%N
}

# latency_worker_time K: when sample K's first worker started (lat_worker).
latency_worker_time() {
	lat_worker "$1" | latency_log_time
}

# latency_pct FILE WHAT: the p50/p95 line of the times in FILE.
latency_pct() {
	sort -n "$1" | awk -v what="$2" '{ v[NR] = $1 } END {
		if (NR == 0) { printf "time: experiment create -> %s: no sample\n", what; exit }
		i50 = int((NR + 1) / 2); i95 = int(NR * 0.95 + 0.999); if (i95 > NR) i95 = NR
		printf "time: experiment create -> %s, %d experiments: p50 %.2f s, p95 %.2f s\n", what, NR, v[i50], v[i95] }'
}

latency_measure() {
	local n=$1 out=$2 k t0 tw failed=0 worker=0
	declare -F lat_worker >/dev/null && worker=1
	: >"$out"
	: >"$out.worker"
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
		if ((worker)); then
			# The launcher ships a line within a second or so; 30 s covers a loaded machine.
			if latency_poll 30 latency_worker_time "$k" && tw=$(latency_worker_time "$k"); then
				awk -v a="$t0" -v b="$tw" 'BEGIN { printf "%.3f\n", b - a }' >>"$out.worker"
			else
				echo "latency: sample $k: the worker's first line ('$LATENCY_MARK') not in its trial's logs in 30 s" >&2
				failed=1
			fi
		fi
		lat_kill "$k"
	done
	latency_pct "$out" "first trial container Running"
	((worker)) && latency_pct "$out.worker" "first worker process running"
	return "$failed"
}
