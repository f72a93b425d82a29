#!/usr/bin/env bash
# bench/local: kdet-local against its anchors, one run, bounded in count and time.
#   creates/s        vs etcd 3.4 puts/s of the same 1 KiB objects, same client
#                    (the real API server writes every create to etcd)
#   watch latency    p50/p99 with 10 watchers vs the Kubernetes API call SLO (p99 <= 1 s)
#   RSS, 10k objects vs etcd's RSS holding the same 10k objects
#   pod start        create -> Running p50/p99 vs the pod startup SLO (p99 <= 5 s)
#   many pods        kdet-local's own CPU per 1,000 short pods at each N of $KDL_BENCH_PODS
#                    (default "500 1000 2000"), each on a fresh kdet-local with --max-pods 200;
#                    the anchor is its own figure at the smallest N (flat: ratio 1.00)
# KDL_BENCH_ONLY=manypods runs only the last part.
set -u
B=${KD_BUILD:-build}
work=$(mktemp -d /tmp/kd-bench-local.XXXXXX)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
N=${KDL_BENCH_N:-10000}
ONLY=${KDL_BENCH_ONLY:-}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# CPU seconds of a process: its own threads (utime + stime) and its reaped children.
cpu_self() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"; }
cpu_children() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f", ($16 + $17) / t }' "/proc/$1/stat"; }

# N short pods (sh -c "exit 0", restartPolicy Never) created through the API by 4 clients on a
# fresh kdet-local, until every one has Succeeded; kdet-local's CPU per 1,000 pods.
many_pods() {
    local n=$1 d="$work/mp-$1"
    mkdir -p "$d"
    "$B/bin/kdet-local" --data-dir "$d/kdl" --port 0 --port-file "$d/port" --max-pods 200 \
        --log-level warn --plain-http 2> "$d/kdl.log" &
    local k=$!
    for _ in $(seq 1 100); do [ -s "$d/port" ] && [ -s "$d/kdl/token" ] && break; sleep 0.1; done
    local c0; c0=$(cpu_self "$k")
    local out
    out=$(KDL_BENCH_TOKEN=$(cat "$d/kdl/token") timeout 3600 "$B/bin/kdet-local-bench" manypods \
        "http://127.0.0.1:$(cat "$d/port")" "$n" 4)
    local c1 ch; c1=$(cpu_self "$k"); ch=$(cpu_children "$k")
    kill "$k" 2>/dev/null; wait "$k" 2>/dev/null
    local own; own=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')
    local per; per=$(awk -v a="$own" -v n="$n" 'BEGIN { printf "%.2f", a * 1000 / n }')
    local cper; cper=$(awk -v a="$ch" -v n="$n" 'BEGIN { printf "%.2f", a * 1000 / n }')
    echo "N=$n: $out kdet_local_cpu_s=$own per_1000_pods_s=$per pods_cpu_per_1000_s=$cper"
    echo "$per" > "$work/mp-per-$n"
}

many_pods_all() {
    local first="" ns=${KDL_BENCH_PODS:-500 1000 2000} per
    for n in $ns; do
        many_pods "$n"
        per=$(cat "$work/mp-per-$n")
        [ -z "$first" ] && first=$per
        echo "kdet-local CPU per 1,000 pods at N=$n: $per s, ratio to N=${ns%% *}: $(ratio "$per" "$first")"
    done
}

if [ "$ONLY" = manypods ]; then
    many_pods_all
    exit 0
fi

# Plain HTTP, as etcd's gateway is measured (the bearer token is still required: $KDL_BENCH_TOKEN).
"$B/bin/kdet-local" --data-dir "$work/kdl" --port 0 --port-file "$work/port" --max-pods 200 --log-level warn \
    --plain-http 2> "$work/kdl.log" &
kdl=$!; pids="$pids $kdl"
ep=$(free_port); pp=$(free_port)
etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$ep" --advertise-client-urls "http://127.0.0.1:$ep" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "default=http://127.0.0.1:$pp" --log-level error > "$work/etcd.log" 2>&1 &
etcd_pid=$!; pids="$pids $etcd_pid"
for _ in $(seq 1 100); do [ -s "$work/port" ] && curl -s "http://127.0.0.1:$ep/version" >/dev/null && break; sleep 0.1; done
url="http://127.0.0.1:$(cat "$work/port")"
KDL_BENCH_TOKEN=$(cat "$work/kdl/token"); export KDL_BENCH_TOKEN
curl() { command curl -H "Authorization: Bearer $KDL_BENCH_TOKEN" "$@"; }

echo "-- creates: $N ConfigMaps of ~1 KiB, 8 concurrent clients (fsync per write on both sides)"
ours=$(timeout 300 "$B/bin/kdet-local-bench" creates "$url" "$N" 8)
anchor=$(timeout 300 "$B/bin/kdet-local-bench" creates "http://127.0.0.1:$ep" "$N" 8 etcd)
o=$(echo "$ours" | sed 's/.*per_second=//'); a=$(echo "$anchor" | sed 's/.*per_second=//')
echo "kdet-local: $ours"
echo "etcd put:   $anchor"
echo "creates/s: kdet-local $o, etcd $a, ratio $(ratio "$o" "$a")"

echo "-- memory with $N objects"
r1=$(rss_kb "$kdl"); r2=$(rss_kb "$etcd_pid")
echo "RSS: kdet-local ${r1} KiB, etcd ${r2} KiB, ratio $(ratio "$r1" "$r2")"

echo "-- watch: 10 watchers, 1000 creates (paced 2 ms)"
w=$(KDL_BENCH_RV=$(curl -s "$url/api/v1/namespaces/default/configmaps?limit=1" | sed -n 's/.*"resourceVersion":"\([0-9]*\)".*/\1/p' | head -1) \
    timeout 200 "$B/bin/kdet-local-bench" watch "$url" 1000 10)
echo "kdet-local: $w"
p99=$(echo "$w" | sed 's/.*p99_ms=\([0-9.]*\).*/\1/')
echo "watch latency p99 ${p99} ms vs SLO 1000 ms: ratio $(ratio "$p99" 1000)"

echo "-- pod start: 30 pods (sleep 20), create -> Running"
p=$(timeout 200 "$B/bin/kdet-local-bench" pods "$url" 30)
echo "kdet-local: $p"
pp99=$(echo "$p" | sed 's/.*p99_ms=\([0-9.]*\).*/\1/')
echo "pod start p99 ${pp99} ms vs SLO 5000 ms: ratio $(ratio "$pp99" 5000)"
curl -s -X DELETE "$url/api/v1/namespaces/default/pods?gracePeriodSeconds=0" > /dev/null

echo "-- many pods: kdet-local CPU per 1,000 short pods (sh -c \"exit 0\"), created through its API"
many_pods_all
