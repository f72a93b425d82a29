#!/usr/bin/env bash
# The web UI in a real browser: Debian's chromium, headless, driven by puppeteer-core
# (ui/node_modules, pinned by ui/package-lock.json; no browser is downloaded) against a
# real stack: a private PostgreSQL, kdet-local and kdet-controller with the API, running an
# experiment of two trials whose workers report a point every half second and print lines.
# tests/ui/browser.mjs does the browser's part (login, pages, live curves, logs, keyboard)
# and saves screenshots in $KD_BUILD/tests/artifacts/test_ui_browser.
# Anything missing (chromium, puppeteer-core, PostgreSQL) fails the test, naming what to
# install: `make deps` installs all of it.
CHROMIUM=${KD_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
    echo "FAIL - chromium is not installed ($CHROMIUM): 'make deps' installs Debian's chromium"
    echo "0 passed, 1 failed"
    exit 1
fi
. "${KD_SRC:?}/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
PUPPETEER=$KD_SRC/ui/node_modules/puppeteer-core
if [ ! -d "$PUPPETEER" ]; then
    bad "puppeteer-core is not in ui/node_modules: run make deps (npm ci in ui/)"
    exit 1
fi
ART=$KD_BUILD/tests/artifacts/test_ui_browser
rm -rf "$ART" && mkdir -p "$ART"
start_pg || exit 1
start_local 2 || exit 1
start_ctrl_api
echo "# controller url: $URL"

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# A worker that reports like libdtrain does (POST .../metrics with the trial token): a
# training point every half second, a validation every fifth, a log line each time, until
# $T/stop exists.
cat >"$T/worker.py" <<'W'
import json, math, os, sys, time, urllib.request
url = os.environ["KDET_CONTROLLER_URL"].rstrip("/")
ns = os.environ.get("KDET_NAMESPACE", "default")
trial = os.environ["KDET_TRIAL_ID"].split("/")[-1]
run = os.environ.get("KDET_RUN_ID", "r")
lr = float(json.loads(os.environ.get("KDET_HPARAMS") or "{}").get("lr", 0.05))
stop = sys.argv[1]
def post(kind, key, rows):
    body = json.dumps({"kind": kind, "key": key, "rows": rows}).encode()
    req = urllib.request.Request(url + "/api/v1/namespaces/%s/trials/%s/metrics" % (ns, trial), data=body,
                                 method="POST", headers={"Authorization": "Bearer " + os.environ["KDET_TOKEN"],
                                                         "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
step, t0 = 0, time.time()
while not os.path.exists(stop) and time.time() - t0 < 600:
    step += 10
    loss = 2.0 * math.exp(-lr * step / 20) + 0.05
    post("training", "%s-t%d" % (run, step), [{"batches": step, "metrics": {"loss": loss}}])
    if step % 50 == 0:
        post("validation", "%s-v%d" % (run, step),
             [{"batches": step, "metrics": {"validation_loss": loss * 1.1, "accuracy": 1 - loss / 2.2}}])
    print("step %d loss %.4f lr %g" % (step, loss, lr), flush=True)
    time.sleep(0.5)
print("worker done at step %d" % step, flush=True)
W
experiment ui-exp "  entrypoint: $PY $T/worker.py $T/stop
  labels: [ui-test, browser]
  hyperparameters:
    lr: {type: categorical, vals: [0.08, 0.4]}
  searcher: {name: grid, metric: validation_loss, max_length: {batches: 100000}}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
check "both trials ACTIVE" wait_for 90 eval 'trial_state_is ui-exp-1 ACTIVE && trial_state_is ui-exp-2 ACTIVE'
check "the workers report metrics" wait_for 60 eval '[ "$(exp_metrics ui-exp validation)" -ge 2 ]'

# Two experiments that queue behind ui-exp (which holds both GPUs), for the job queue page.
for q in jq-a jq-b; do
    experiment $q "  entrypoint: sleep 600
  hyperparameters: {}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
    sleep 1.1 # distinct creation times: the queue's order
done
DET=$KD_BUILD/bin/det
det_order() { "$DET" job list -o json 2>/dev/null | python3 -c 'import json,sys; print(" ".join(x["experiment"] for x in json.load(sys.stdin)["jobs"] if x["experiment"] in ("jq-a","jq-b")))'; }
check "jq-a and jq-b queued" wait_for 60 eval '[ "$(det_order)" = "jq-a jq-b" ]'

node "$KD_SRC/tests/ui/browser.mjs" "$URL" "$KDET_API_TOKEN" "$ART" "$CHROMIUM" >"$T/browser.out" 2>&1
rc=$?
cat "$T/browser.out"
PASSED=$((PASSED + $(grep -c '^ok - ' "$T/browser.out")))
FAILED=$((FAILED + $(grep -c '^FAIL - ' "$T/browser.out")))
check "the browser script ran to its end (exit $rc)" eval '[ $rc = 0 ] && grep -q "^# browser done" "$T/browser.out"'
check "det job list: jq-b ahead of jq-a after the page's reorder ($(det_order))" eval '[ "$(det_order)" = "jq-b jq-a" ]'
check "the annotation kdet.io/ahead-of=jq-a on jq-b" eval '[ "$(kubectl get exp jq-b -o "jsonpath={.metadata.annotations.kdet\.io/ahead-of}")" = jq-a ]'
check "jq-a's priority 60 set from the page" eval '[ "$(kubectl get exp jq-a -o "jsonpath={.spec.resources.priority}")" = 60 ]'
for q in jq-a jq-b; do kubectl patch experiment $q --type merge -p '{"spec":{"canceled":true}}' >/dev/null 2>&1; done
check "the queued experiments are canceled" wait_for 30 eval 'exp_state_is jq-a CANCELED && exp_state_is jq-b CANCELED'
for f in login experiments experiment hparams trial jobs; do
    check "screenshot $f.png saved" test -s "$ART/$f.png"
done

touch "$T/stop"
kubectl patch experiment ui-exp --type merge -p '{"spec":{"canceled":true}}' >/dev/null 2>&1
check "the workers stopped" wait_for 60 eval '[ -z "$(trial_procs)" ]'
