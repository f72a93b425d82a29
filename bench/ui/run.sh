#!/usr/bin/env bash
# bench/ui: the web UI's experiment page at scale, one run, reported (not asserted).
#   A real stack (private PostgreSQL, kdet-local, kdet-controller with its API) runs a grid
#   experiment of N trials (default 1000; KDU_BENCH_N) whose CPU-only pods each report P
#   training points (default 1000; KDU_BENCH_P) and P/10 validation points through the
#   API, as workers do (POST .../trials/{t}/metrics with the trial's token, one batch each).
#   Then headless Chromium (Debian's, driven by puppeteer-core) opens the experiment page
#   once the experiment is COMPLETED and the store's metric overviews hold every row, and
#   bench/ui/bench.mjs reports the time to first render (the trials table drawn), to
#   interactive (the table and every trial's curves drawn, then a quiet main thread), the
#   bytes transferred, the rows in the DOM, and the anchor: the first slice's two requests
#   per trial of up to 1,000 points each, and the ratio.
#   (KDU_BENCH_ANCHOR=0 skips the anchor, which takes about 100 s with 1,000 trials.)
# Goal: under 1 s to interactive. Quick run: KDU_BENCH_N=100 make bench BENCH=ui
CHROMIUM=${KD_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { echo "bench ui: chromium is not installed ($CHROMIUM): run make deps"; exit 1; }
. "${KD_SRC:?}/e2e/controller/lib.sh"
need_pg || { echo "bench ui: PostgreSQL is not installed: run make deps"; exit 1; }
trap 'stop_pg; finish >/dev/null; exit $?' EXIT
N=${KDU_BENCH_N:-1000}
P=${KDU_BENCH_P:-1000}
start_pg || exit 1
start_local 0 --max-pods 250 || exit 1
start_ctrl_api >/dev/null
log "controller at $URL; $N trials of $P points"

# Ten bodies, one per curve shape; a trial posts the one of its x (mod 10).
python3 - "$T" "$P" <<'PY'
import json, math, sys
d, p = sys.argv[1], int(sys.argv[2])
for k in range(10):
    lr = 0.02 + 0.01 * k
    tr = [{"batches": s, "metrics": {"loss": 2 * math.exp(-lr * s / 20) + 0.05 + 0.01 * math.sin(s)}} for s in range(1, p + 1)]
    va = [{"batches": s, "metrics": {"validation_loss": 2.2 * math.exp(-lr * s / 20) + 0.06,
                                     "accuracy": 1 - math.exp(-lr * s / 20) / 2}} for s in range(10, p + 1, 10)]
    json.dump({"kind": "training", "key": "t", "rows": tr}, open("%s/t%d.json" % (d, k), "w"))
    json.dump({"kind": "validation", "key": "v", "rows": va}, open("%s/v%d.json" % (d, k), "w"))
PY
cat >"$T/worker.sh" <<'W'
#!/bin/sh
# KDET_HPARAMS is {"x": N}; post the bodies of shape N mod 10.
x=$(printf '%s' "$KDET_HPARAMS" | tr -dc 0-9)
k=$((x % 10))
u="${KDET_CONTROLLER_URL%/}/api/v1/namespaces/${KDET_NAMESPACE:-default}/trials/${KDET_TRIAL_ID##*/}/metrics"
for f in t v; do
    curl -sf -o /dev/null -H "Authorization: Bearer $KDET_TOKEN" -H 'Content-Type: application/json' \
        --data-binary "@$(dirname "$0")/$f$k.json" "$u" || exit 1
done
W
chmod +x "$T/worker.sh"
t0=$(date +%s)
experiment big "  entrypoint: $T/worker.sh
  hyperparameters:
    x: {type: int, minval: 1, maxval: $N, count: $N}
  searcher: {name: grid, metric: validation_loss, max_length: {batches: $P}, max_concurrent_trials: $N}
  max_restarts: 0
  resources: {slots_per_trial: 0}"
want=$((N * P))
if ! wait_for 900 eval '[ "$(exp_metrics big training)" -ge '"$want"' ]'; then
    echo "bench ui: only $(exp_metrics big training) of $want training points stored after 900 s"
    tail -5 "$T/ctrl.log"
    exit 1
fi
log "loaded: $(exp_metrics big training) training and $(exp_metrics big validation) validation points in $(($(date +%s) - t0)) s"
# The page is measured on the finished experiment, not while its last trials are still being
# closed (1,000 Trial updates contend with the page's reads) or the overviews still fold.
wait_for 300 exp_state_is big COMPLETED || log "big is not COMPLETED after 300 s: $(field exp big '{.status.state}')"
wait_for 120 eval '[ "$(psqlq "select upto_id >= (select coalesce(max(id), 0) from metrics) from metric_sketch_mark")" = t ]' ||
    log "the metric overviews are behind the rows"
sleep 5
log "settled: big $(field exp big '{.status.state}') after $(($(date +%s) - t0)) s"
node "$KD_SRC/bench/ui/bench.mjs" "$URL" "$KDET_API_TOKEN" big "$N" "$CHROMIUM"
rc=$?
kubectl delete experiment big --wait=false >/dev/null 2>&1
stop_ctrl >/dev/null
exit $rc
