#!/usr/bin/env bash
# bench/controller: kdet-controller at scale on a private kdet-local (no
# PostgreSQL: the controller without its store and API), one run, bounded.
#   1. An experiment of N trials (default 1000; KDC_BENCH_N), grid search,
#      all N at once (max_concurrent_trials = N), CPU-only trials whose
#      pods run `sh -c "exit 0"` on kdet-local's process kubelet, so every
#      trial goes the whole way: Trial created, pod created, pod Succeeded,
#      trial COMPLETED, pod deleted. Measured: time until all N Trials
#      exist and until the experiment is COMPLETED; API calls per trial
#      (the controller's client counts them by verb and logs them when it
#      stops); writes per trial besides status writes (goal <= 5);
#      controller RSS (VmRSS, VmHWM) and CPU time; kdet-local's own CPU per 1,000 trials,
#      stretch by stretch of pods gone (500, then every 1,000), which should stay flat.
#      Anchor for the creation time: the same N Trial objects created by
#      `kubectl create -f` (one POST each) against the same kdet-local.
#   2. RSS with M trials in the cache (default 10000; KDC_BENCH_CACHE):
#      the experiment's trials are cloned up to M Trial objects (COMPLETED,
#      like the originals), then a fresh controller syncs its caches and
#      settles; its VmRSS and VmHWM against the goal of 30 MiB.
#   3. The same with M trials of an ACTIVE experiment (KDC_BENCH_ACTIVE=0: skipped): big and
#      its Trials are deleted, experiment live runs one trial whose pod sleeps, and gets M - 1
#      COMPLETED clones; a fresh controller reconciles it at start and again at each resync
#      (30 s), reading all of its M Trials; VmRSS over 35 s and VmHWM.
#   0. (first) the time to create the N Trials alone, against a kdet-local without its kubelet.
# Quick run: KDC_BENCH_N=100 KDC_BENCH_CACHE=1000 make bench BENCH=controller
# KDC_BENCH_KDL_ARGS: more flags for the measured kdet-local (e.g. --compact-bytes 1GiB).
# KDC_BENCH_KDL_PRELOAD=LIB: LD_PRELOAD for the measured kdet-local alone (its pods do not inherit
# it), e.g. another malloc to compare with glibc's.
# KDC_BENCH_TMP=DIR: the work folder (kdet-local's state and the pods' folders) under DIR, e.g. a
# tmpfs, to tell the file system's share in kdet-local's CPU from its own.
# Many trials flowing through, 200 at a time (KDC_BENCH_CONCURRENT; default: all N at once):
#   KDC_BENCH_N=5000 KDC_BENCH_CONCURRENT=200 KDC_BENCH_CACHE=0 KDC_BENCH_QPS=0 make bench BENCH=controller
set -u
B=$(cd "${KD_BUILD:-build}" && pwd) || exit 1 # absolute: pods run in their own directories
S=${KD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
N=${KDC_BENCH_N:-1000}
CONC=${KDC_BENCH_CONCURRENT:-$N} # phase 1's max_concurrent_trials
M=${KDC_BENCH_CACHE:-10000}
QPS=${KDC_BENCH_QPS:-} # the controller's --kube-api-qps (empty: its default, 50)
work=$(mktemp -d "${KDC_BENCH_TMP:-/tmp}/kd-bench-ctrl.XXXXXX") # KDC_BENCH_TMP: another file system
export KUBECONFIG=$work/kubeconfig
kdl=
ctrl=
cleanup() {
    [ -n "$ctrl" ] && kill -TERM "$ctrl" 2>/dev/null
    [ -n "$kdl" ] && kill -TERM "$kdl" 2>/dev/null
    wait 2>/dev/null
    [ -n "${KEEP_T:-}" ] && echo "# kept $work" || rm -rf "$work"
}
trap cleanup EXIT
log() { echo "# $(date -u +%H:%M:%S) $*"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ms() { date +%s%3N; }
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
# cpu_ms PID: user + system CPU time of the process; sys_ms PID: the system part.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%d", ($12 + $13) * 1000 / hz }' "/proc/$1/stat"; }
sys_ms() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%d", $13 * 1000 / hz }' "/proc/$1/stat"; }
# wait_until SECONDS COMMAND...: poll every 0.2 s.
wait_until() {
    local end=$(($(date +%s) + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.2
    done
}
field() { kubectl get "$1" "$2" -o "jsonpath=$3" 2>/dev/null; }
ntrials() { kubectl get trials -o name 2>/dev/null | grep -c .; }
no_trials() { [ "$(ntrials)" = 0 ]; }
# trial_state_is TRIAL STATE (for wait_until, which runs its command again each time)
trial_state_is() { [ "$(field trial "$1" '{.status.state}')" = "$2" ]; }
# settle PID: wait (up to 60 s) until the start-up burst is over: under 20% of a core over 2 s
# (a pass of the scheduler over every cached trial still runs each second).
settle() {
    local a b
    for _ in $(seq 1 30); do
        a=$(cpu_ms "$1")
        sleep 2
        b=$(cpu_ms "$1")
        [ $((b - a)) -lt 400 ] && return 0
    done
    return 1
}
# samples_kb PID FIELD N: N samples 1 s apart, sorted, one per line.
samples_kb() {
    for _ in $(seq 1 "$3"); do
        status_kb "$1" "$2"
        sleep 1
    done | sort -n
}
start_ctrl() {
    "$B/bin/kdet-controller" --kubeconfig "$KUBECONFIG" --log-level info --plain-http ${QPS:+--kube-api-qps "$QPS"} "$@" \
        >>"$work/ctrl.log" 2>&1 &
    ctrl=$!
}
# stop_ctrl: SIGTERM, wait, and keep the "stopped" line (its counters) in $line.
stop_ctrl() {
    kill -TERM "$ctrl" 2>/dev/null
    wait "$ctrl" 2>/dev/null
    ctrl=
    line=$(grep -E 'msg="?stopped' "$work/ctrl.log" | tail -1)
}
counter() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'; }

# clone SRC FROM TO EXP [UID]: POST copies FROM..TO-1 of the Trials in SRC (a kubectl get -o
# json, taken in turn), each with the status of its original; with UID, owned by experiment EXP.
clone() {
    python3 - "$1" "$2" "$3" "$KUBECONFIG" "$4" "${5:-}" <<'EOF'
import base64, http.client, json, re, ssl, sys
src = json.load(open(sys.argv[1]))["items"]
lo, hi, exp, uid = int(sys.argv[2]), int(sys.argv[3]), sys.argv[5], sys.argv[6]
# kdet-local's own kubeconfig: its HTTPS address, its CA and its bearer token.
kc = open(sys.argv[4]).read()
field = lambda k: re.search(r"^\s*%s:\s*(\S+)" % k, kc, re.M).group(1)
host, port = re.match(r"https://([^:/]+):(\d+)", field("server")).groups()
ctx = ssl.create_default_context(cadata=base64.b64decode(field("certificate-authority-data")).decode())
conn = http.client.HTTPSConnection(host, int(port), context=ctx)
auth = {"Content-Type": "application/json", "Authorization": "Bearer " + field("token")}
def req(method, path, body):
    conn.request(method, path, json.dumps(body), auth)
    r = conn.getresponse()
    data = r.read()
    if r.status >= 300:
        sys.exit("%s %s: HTTP %d %s" % (method, path, r.status, data[:200]))
    return json.loads(data)
base = "/apis/kdet.io/v1alpha1/namespaces/default/trials"
for i in range(lo, hi):
    t = src[i % len(src)]
    md = t["metadata"]
    labels, owners, spec = dict(md.get("labels", {})), md.get("ownerReferences", []), dict(t["spec"])
    if uid:
        labels = {"kdet.io/experiment": exp, "kdet.io/request-id": "%032x" % (i + 1)}
        owners = [dict(owners[0], name=exp, uid=uid)]
        spec.update(experiment=exp, requestId="%032x" % (i + 1))
    obj = {"apiVersion": t["apiVersion"], "kind": t["kind"],
           "metadata": {"name": "%s-c%d" % (exp if uid else md["name"], i), "labels": labels,
                        "annotations": md.get("annotations", {}), "ownerReferences": owners},
           "spec": spec}
    out = req("POST", base, obj)
    out["status"] = t.get("status", {})
    req("PUT", base + "/" + out["metadata"]["name"] + "/status", out)
EOF
}

PATH=$B/bin:$PATH LD_PRELOAD=${KDC_BENCH_KDL_PRELOAD:-} "$B/bin/kdet-local" --data-dir "$work/kdl" --port 0 \
    --kubeconfig-out "$KUBECONFIG" --node-name kdc-bench --max-pods 200 --log-level warn \
    ${KDC_BENCH_KDL_ARGS:-} >"$work/kdl.log" 2>&1 &
kdl=$!
wait_until 20 test -s "$KUBECONFIG" || { echo "kdet-local did not start"; exit 1; }
wait_until 20 kubectl get node kdc-bench || { echo "no node"; exit 1; }
kubectl apply -f "$S/crds/" >/dev/null && kubectl apply -f "$S/manifests/priorityclasses.yaml" >/dev/null || exit 1
wait_until 20 kubectl get trials || exit 1

# ---- anchor: N Trial objects through kubectl create (one POST each) ----
python3 - "$N" >"$work/anchor.json" <<'EOF'
import json, sys
n = int(sys.argv[1])
items = [{"apiVersion": "kdet.io/v1alpha1", "kind": "Trial",
          "metadata": {"name": "anchor-%d" % i, "labels": {"kdet.io/experiment": "anchor"}},
          "spec": {"experiment": "anchor", "requestId": "%032x" % i, "hparams": {"x": i}, "seed": i,
                   "resources": {"slots": 0, "priority": 42}}} for i in range(1, n + 1)]
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
EOF
log "anchor: kubectl create -f of $N Trials"
t0=$(ms)
kubectl create --validate=false -f "$work/anchor.json" >/dev/null 2>"$work/anchor.err" || { echo "anchor failed:"; head -3 "$work/anchor.err"; }
anchor_ms=$(($(ms) - t0))
log "anchor: $N Trials in $anchor_ms ms"
kubectl delete trials -l kdet.io/experiment=anchor --wait=false >/dev/null 2>&1
wait_until 60 no_trials || log "anchor trials still there"

# ---- 0. Trial creation alone: a second kdet-local without its kubelet (no pod runs) ----
# With the kubelet, kdet-local also spawns and watches every pod's processes on this machine,
# which paces trial creation as much as the controller does; here the controller (no client
# rate limit) creates the N Trials against an API server that does nothing else.
mkdir -p "$work/bare"
PATH=$B/bin:$PATH "$B/bin/kdet-local" --data-dir "$work/bare/kdl" --port 0 \
    --kubeconfig-out "$work/bare/kubeconfig" --no-kubelet --log-level warn >"$work/bare/kdl.log" 2>&1 &
bare=$!
if wait_until 20 test -s "$work/bare/kubeconfig" &&
    KUBECONFIG=$work/bare/kubeconfig wait_until 20 kubectl get ns default &&
    KUBECONFIG=$work/bare/kubeconfig kubectl apply -f "$S/crds/" >/dev/null &&
    KUBECONFIG=$work/bare/kubeconfig kubectl apply -f "$S/manifests/priorityclasses.yaml" >/dev/null &&
    KUBECONFIG=$work/bare/kubeconfig wait_until 20 kubectl get trials; then
    "$B/bin/kdet-controller" --kubeconfig "$work/bare/kubeconfig" --log-level info --kube-api-qps 0 \
        --workers 4 >"$work/bare/ctrl.log" 2>&1 &
    bctrl=$!
    wait_until 30 grep -q 'msg="caches synced"' "$work/bare/ctrl.log"
    printf 'apiVersion: kdet.io/v1alpha1\nkind: Experiment\nmetadata:\n  name: bare\nspec:\n  name: bare\n  entrypoint: sh -c "exit 0"\n  hyperparameters:\n    x: {type: int, minval: 1, maxval: %d, count: %d}\n  searcher: {name: grid, metric: loss, max_length: {batches: 1}, max_concurrent_trials: %d}\n  resources: {slots_per_trial: 0}\n' \
        "$N" "$N" "$N" >"$work/bare/exp.yaml"
    bare_trials() { [ "$(KUBECONFIG=$work/bare/kubeconfig kubectl get trials -o name 2>/dev/null | grep -c .)" -ge "$N" ]; }
    t0=$(ms)
    KUBECONFIG=$work/bare/kubeconfig kubectl apply -f "$work/bare/exp.yaml" >/dev/null
    if wait_until 300 bare_trials; then
        bare_ms=$(($(ms) - t0))
        echo "time to all $N Trials, kdet-local without kubelet, no client rate limit: controller ${bare_ms} ms, kubectl create ${anchor_ms} ms, ratio $(ratio "$bare_ms" "$anchor_ms")"
    else
        echo "time to all $N Trials without kubelet: not reached in 300 s"
    fi
    kill -TERM "$bctrl" 2>/dev/null
    wait "$bctrl" 2>/dev/null
fi
kill -TERM "$bare" 2>/dev/null
wait "$bare" 2>/dev/null

# ---- 1. N trials through the controller ----
start_ctrl --workers 4
wait_until 30 grep -q 'msg="caches synced"' "$work/ctrl.log" || { echo "controller did not sync"; tail "$work/ctrl.log"; exit 1; }
cpu0=$(cpu_ms "$ctrl")
printf 'apiVersion: kdet.io/v1alpha1\nkind: Experiment\nmetadata:\n  name: big\nspec:\n  name: big\n  entrypoint: sh -c "exit 0"\n  hyperparameters:\n    x: {type: int, minval: 1, maxval: %d, count: %d}\n  searcher: {name: grid, metric: loss, max_length: {batches: 1}, max_concurrent_trials: %d}\n  resources: {slots_per_trial: 0}\n' \
    "$N" "$N" "$CONC" >"$work/exp.yaml"
log "experiment of $N trials (grid, $CONC at once, CPU-only pods running sh -c 'exit 0')"
t0=$(ms)
kubectl apply -f "$work/exp.yaml" >/dev/null || exit 1
created_ms=
done_ms=
hwm=0
# kdet-local's own CPU (not its pods') each time the pods gone (a trial's pod is deleted once it
# succeeded, counted from a watch) pass a mark: 500, then every 1,000 (and N), to print its CPU
# per 1,000 trials stretch by stretch. (The experiment's completed count moves in jumps.)
marks=(500)
for ((m = 1000; m < N; m += 1000)); do marks+=("$m"); done
marks+=("$N")
mi=0
mark_at=(0)
(kubectl get pods --watch --output-watch-events -o json 2>/dev/null |
    awk '/^\{"type":"DELETED"/ { print "DELETED"; fflush() }' >"$work/podwatch") &
podwatch=$!
mark_cpu=($(cpu_ms "$kdl"))
mark_sys=($(sys_ms "$kdl"))
mark_ms=($(ms))
for _ in $(seq 1 6000); do
    # The experiment's status counts its Trials: a LIST of thousands of Trials every half
    # second would cost kdet-local more than the trials themselves.
    st=$(field exp big '{.status.state} {.status.trials.total}')
    total=${st#* }
    st=${st%% *}
    [ -z "$created_ms" ] && [ "${total:-0}" -ge "$N" ] && created_ms=$(($(ms) - t0)) && log "all $N Trials exist after $created_ms ms"
    done_n=$(grep -c '^DELETED' "$work/podwatch")
    # After the end, no pod left means all are gone, whatever the watch (started after the
    # apply) may have missed.
    [ -n "$done_ms" ] && [ "$(kubectl get pods --no-headers 2>/dev/null | wc -l)" -eq 0 ] && done_n=$N
    while [ "$mi" -lt "${#marks[@]}" ] && [ "${done_n:-0}" -ge "${marks[$mi]}" ]; do
        mark_at+=("${done_n}")
        mark_cpu+=("$(cpu_ms "$kdl")")
        mark_sys+=("$(sys_ms "$kdl")")
        mark_ms+=("$(ms)")
        log "$done_n pods gone; kdet-local CPU so far $((mark_cpu[-1] - mark_cpu[0])) ms"
        mi=$((mi + 1))
    done
    [ "$st" = COMPLETED ] && [ -z "$done_ms" ] && done_ms=$(($(ms) - t0)) && done_wait=$(ms)
    # The last pods go after the experiment's end: wait (up to 30 s) for the last mark, so that
    # the last stretch is measured too.
    [ -n "$done_ms" ] && { [ "$mi" -ge "${#marks[@]}" ] || [ $(($(ms) - done_wait)) -gt 30000 ]; } && break
    [ "$st" = ERROR ] && { echo "experiment ERROR"; break; }
    sleep 0.5
done
done_ms=${done_ms:-$(($(ms) - t0))}
[ "$mi" -lt "${#marks[@]}" ] && log "only $done_n pods gone 30 s after the end: the last stretch is not measured"
pkill -f "kubectl get pods --watch --output-watch-events" 2>/dev/null
completed=$(field exp big '{.status.trials.completed}')
log "experiment $(field exp big '{.status.state}') after $done_ms ms ($completed trials completed)"
sleep 2 # the last pod deletions
rss1=$(status_kb "$ctrl" VmRSS)
hwm1=$(status_kb "$ctrl" VmHWM)
cpu1=$(($(cpu_ms "$ctrl") - cpu0))
stop_ctrl
req=$(counter "$line" api_requests)
writes=$(($(counter "$line" api_creates) + $(counter "$line" api_updates) + $(counter "$line" api_patches) + $(counter "$line" api_deletes)))
sw=$(counter "$line" api_status_writes)
echo "controller counters: $(echo "$line" | sed 's/.*msg="*stopped"* //')"
echo "trials: $N, completed $completed"
echo "time to all Trials: controller ${created_ms:-n/a} ms, kubectl create ${anchor_ms} ms, ratio $(ratio "${created_ms:-0}" "$anchor_ms")"
echo "time to COMPLETED: ${done_ms} ms ($(ratio "$done_ms" "$N") ms per trial)"
echo "API calls per trial: $(ratio "$req" "$N") (reads $(ratio "$(counter "$line" api_reads)" "$N"), watches $(counter "$line" api_watches) in all)"
echo "API writes per trial besides status: $(ratio $((writes - sw)) "$N") vs goal 5: ratio $(ratio "$(ratio $((writes - sw)) "$N")" 5); status writes per trial $(ratio "$sw" "$N")"
echo "client rate limit: ${QPS:-50 (default)} requests/s (burst 100): the calls above take $(ratio "$req" "${QPS:-50}") s at that rate"
echo "controller CPU: ${cpu1} ms ($(ratio "$cpu1" "$N") ms per trial); RSS ${rss1} KiB, peak (VmHWM) ${hwm1} KiB"
per=
split=
pace=
for ((k = 1; k < ${#mark_at[@]}; k++)); do
    d=$((mark_at[k] - mark_at[k - 1]))
    [ "$d" -gt 0 ] && per+="$(printf ' %s-%s: %s s' "${mark_at[k - 1]}" "${mark_at[k]}" \
        "$(awk -v c=$((mark_cpu[k] - mark_cpu[k - 1])) -v d="$d" 'BEGIN { printf "%.2f", c / d }')")"
    [ "$d" -gt 0 ] && split+="$(awk -v c=$((mark_cpu[k] - mark_cpu[k - 1])) -v y=$((mark_sys[k] - mark_sys[k - 1])) \
        -v d="$d" -v a="${mark_at[k - 1]}" -v b="${mark_at[k]}" 'BEGIN { printf " %s-%s: %.2f + %.2f s", a, b, (c - y) / d, y / d }')"
    [ "$d" -gt 0 ] && pace+="$(awk -v t=$((mark_ms[k] - mark_ms[k - 1])) -v d="$d" -v a="${mark_at[k - 1]}" \
        -v b="${mark_at[k]}" 'BEGIN { printf " %s-%s: %.1f s", a, b, t / d }')"
done
# The first stretch also holds the creation of all N Trials (max_concurrent_trials = N): flat is
# judged from the second on (from 500 pods).
if [ "${#mark_at[@]}" -gt 3 ]; then
    first=$(awk -v c=$((mark_cpu[2] - mark_cpu[1])) -v d=$((mark_at[2] - mark_at[1])) 'BEGIN { printf "%.4f", c / d }')
    k=$((${#mark_at[@]} - 1))
    last=$(awk -v c=$((mark_cpu[k] - mark_cpu[k - 1])) -v d=$((mark_at[k] - mark_at[k - 1])) 'BEGIN { printf "%.4f", c / d }')
    echo "kdet-local CPU per 1,000 trials, stretch by stretch of pods gone (its own CPU, not the pods'; the first stretch includes the experiment's start, and with all N at once the creation of every Trial):$per; last stretch / the one from ${mark_at[1]}: $(ratio "$last" "$first") (flat: 1)"
    # user space (kdet-local's own code and libraries) apart from the kernel (its file systems)
    echo "the same, user + system:$split"
    # kdet-local's CPU has a part that goes with time (running pods, its loops), so a slower pace
    # of trials costs it more per trial.
    wfirst=$(awk -v t=$((mark_ms[2] - mark_ms[1])) -v d=$((mark_at[2] - mark_at[1])) 'BEGIN { printf "%.4f", t / d }')
    wlast=$(awk -v t=$((mark_ms[k] - mark_ms[k - 1])) -v d=$((mark_at[k] - mark_at[k - 1])) 'BEGIN { printf "%.4f", t / d }')
    echo "wall time per 1,000 trials, the same stretches:$pace; last / the one from ${mark_at[1]}: $(ratio "$wlast" "$wfirst") (a steady pace: 1)"
fi
echo "kdet-local memory: RSS $(status_kb "$kdl" VmRSS) KiB, peak (VmHWM) $(status_kb "$kdl" VmHWM) KiB"
awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "kdet-local CPU up to here (start-up, anchor, phase 1): %d ms; its reaped children (the pods): %d ms\n", ($12 + $13) * 1000 / hz, ($14 + $15) * 1000 / hz }' "/proc/$kdl/stat"

# ---- 2. M trials in the cache ----
if [ "$M" -gt "$N" ]; then
    log "cloning the $N trials up to $M Trial objects"
    kubectl get trials -o json >"$work/trials.json"
    clone "$work/trials.json" "$N" "$M" big
    [ $? = 0 ] || exit 1
    log "$(ntrials) Trials in the API; a fresh controller syncs them"
    : >"$work/ctrl.log"
    start_ctrl --workers 4
    wait_until 120 grep -q 'msg="caches synced"' "$work/ctrl.log" || { echo "controller did not sync"; tail "$work/ctrl.log"; exit 1; }
    grep 'msg="caches synced"' "$work/ctrl.log" | sed 's/.*msg="caches synced" /# synced: /'
    t0=$(ms)
    settle "$ctrl" || log "the controller did not settle within 60 s"
    log "settled $(($(ms) - t0)) ms after the sync; CPU in the next 10 s: $(a=$(cpu_ms "$ctrl"); sleep 10; echo $(($(cpu_ms "$ctrl") - a))) ms"
    # 35 samples span a resync (30 s), when every live experiment is reconciled again.
    log "sampling VmRSS for 35 s"
    samples_kb "$ctrl" VmRSS 35 >"$work/rss"
    rss2=$(sed -n 18p "$work/rss")
    rssmin=$(head -1 "$work/rss")
    rssmax=$(tail -1 "$work/rss")
    anon2=$(status_kb "$ctrl" RssAnon)
    hwm2=$(status_kb "$ctrl" VmHWM)
    stop_ctrl
    echo "controller counters at $M trials: $(echo "$line" | sed 's/.*msg="*stopped"* //')"
    echo "RSS with $M trials cached, median of 35 s: ${rss2} KiB (min ${rssmin}, max ${rssmax}; heap and stacks at the end ${anon2} KiB, the rest shared libraries) vs goal 30720 KiB: ratio $(ratio "$rss2" 30720); max: ratio $(ratio "$rssmax" 30720)"
    echo "peak RSS (VmHWM) with $M trials, start-up included: ${hwm2} KiB: ratio $(ratio "$hwm2" 30720)"
fi

# ---- 3. M trials of an ACTIVE experiment ----
# Experiment big (COMPLETED) and its Trials go; experiment live runs one trial (a pod sleeping
# 590 s, so it stays ACTIVE; not 600: e2e/controller/lifecycle.sh looks for stray `sleep 600`)
# and gets M - 1 COMPLETED clones; a fresh controller reconciles it at start and at every
# resync, when it reads all of its M Trials.
if [ "$M" -gt "$N" ] && [ "${KDC_BENCH_ACTIVE:-1}" != 0 ]; then
    : >"$work/ctrl.log"
    start_ctrl --workers 4
    wait_until 120 grep -q 'msg="caches synced"' "$work/ctrl.log" || { echo "controller did not sync"; exit 1; }
    log "deleting experiment big and its $M Trials"
    kubectl delete exp big --wait=false >/dev/null
    wait_until 300 no_trials || log "big's Trials are still there"
    sed -e 's/name: big/name: live/' -e 's/exit 0/sleep 590/' -e "s/count: $N}/count: 1}/" \
        "$work/exp.yaml" >"$work/live.yaml"
    kubectl apply -f "$work/live.yaml" >/dev/null || exit 1
    wait_until 60 trial_state_is live-1 ACTIVE || { echo "trial live-1 not ACTIVE"; exit 1; }
    uid=$(field exp live '{.metadata.uid}')
    stop_ctrl
    log "cloning $((M - 1)) COMPLETED Trials into experiment live"
    clone "$work/trials.json" 1 "$M" live "$uid" || exit 1
    log "$(ntrials) Trials in the API; a fresh controller syncs them"
    : >"$work/ctrl.log"
    start_ctrl --workers 4
    wait_until 120 grep -q 'msg="caches synced"' "$work/ctrl.log" || { echo "controller did not sync"; exit 1; }
    settle "$ctrl" || log "the controller did not settle within 60 s"
    log "sampling VmRSS for 35 s (a resync reconciles experiment live again)"
    samples_kb "$ctrl" VmRSS 35 >"$work/rss"
    rss3=$(sed -n 18p "$work/rss")
    hwm3=$(status_kb "$ctrl" VmHWM)
    st3=$(field exp live '{.status.state}')
    n3=$(field exp live '{.status.trials.total}')
    stop_ctrl
    echo "RSS with $M trials of an experiment in state $st3 (status.trials.total $n3), median of 35 s: ${rss3} KiB (min $(head -1 "$work/rss"), max $(tail -1 "$work/rss")): ratio $(ratio "$rss3" 30720)"
    echo "peak RSS (VmHWM) with $M trials of an $st3 experiment, start-up and a resync included: ${hwm3} KiB: ratio $(ratio "$hwm3" 30720)"
fi
