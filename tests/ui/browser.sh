#!/usr/bin/env bash
# The web UI in a real browser: Debian's chromium, headless, driven by puppeteer-core
# (ui/node_modules, pinned by ui/package-lock.json; no browser is downloaded) against a
# real stack: a private PostgreSQL, kdet-local and kdet-controller with the API, running an
# experiment of two trials whose workers report a point every half second and print lines,
# a finished experiment whose trial saved a checkpoint (registered as a model version from
# its page), and a command task that serves HTTP through the proxy (opened and killed from
# the tasks page), and a CPU-only experiment whose worker posts profiler samples (charted on
# its trial's page; the experiment paused, activated, archived from its page), and an
# experiment of forty trials (its charts without legends, a zoom read again in detail). The
# checkpoint is downloaded from the model's and the trial's pages and compared here with what
# was uploaded.
# tests/ui/browser.mjs does the browser's part (login, pages, live curves, logs, keyboard,
# models: registering, editing, archiving, deleting; a trial's history; tasks)
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
# A trial that saves one checkpoint and ends (COMPLETED), for registering it as a model
# version from its page and downloading it: it follows the searcher (one validate_after of 10
# batches, then stop), writes two files and uploads them with dtrain ckpt upload (to the
# experiment's checkpoint_storage, as libdtrain would), reports a validation and the checkpoint.
cat >"$T/ckpt_worker.py" <<'W'
import json, os, subprocess, sys, urllib.request
url = os.environ["KDET_CONTROLLER_URL"].rstrip("/")
base = url + "/api/v1/namespaces/%s/trials/%s" % (os.environ.get("KDET_NAMESPACE", "default"),
                                                   os.environ["KDET_TRIAL_ID"].split("/")[-1])
storage, uuid_file, dtrain, work = sys.argv[1:5]
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Bearer " + os.environ["KDET_TOKEN"], "Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=30).read() or b"{}")
done = 0
while True:
    op = call("GET", "/searcher/operation?completed=%d&timeout=10" % done)
    if op.get("op") == "stop":
        break
    if op.get("op") != "validate_after":
        continue
    n = op["length"]
    uuid = open("/proc/sys/kernel/random/uuid").read().strip()
    d = os.path.join(work, uuid)
    os.makedirs(os.path.join(d, "sub"))
    with open(os.path.join(d, "model.bin"), "wb") as f:
        f.write(bytes((i * 37 + 11) % 256 for i in range(70000)))
    with open(os.path.join(d, "sub", "opt.txt"), "w") as f:
        f.write("optimizer state at %d batches\n" % n)
    subprocess.run([dtrain, "ckpt", "upload", d, "--uuid", uuid, "--quiet"], check=True)
    call("POST", "/metrics", {"kind": "validation", "key": "v-%d" % n, "rows": [{"batches": n, "metrics": {"validation_loss": 0.25}}]})
    call("POST", "/checkpoints", {"uuid": uuid, "batches": n, "storage_path": storage + "/" + uuid, "size": 70031})
    with open(uuid_file, "w") as f:
        f.write(uuid + "\n")
    print("checkpoint %s at %d batches" % (uuid, n), flush=True)
    done = n
W
mkdir -p "$T/ckpt" "$T/w"
experiment ui-reg "  entrypoint: $PY $T/ckpt_worker.py $T/ckpt $T/ckpt-uuid $KD_BUILD/bin/dtrain $T/w
  hyperparameters: {}
  searcher: {name: single, metric: validation_loss, max_length: {batches: 10}}
  checkpoint_storage: {type: shared_fs, host_path: $T/ckpt}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
check "ui-reg saved a checkpoint and completed" wait_for 90 eval 'exp_state_is ui-reg COMPLETED && [ -s "$T/ckpt-uuid" ]'
CKPT_UUID=$(cat "$T/ckpt-uuid" 2>/dev/null)
echo "# checkpoint of ui-reg-1: $CKPT_UUID"

# A command task that needs no GPU and serves HTTP, reporting its address as a notebook's
# kdet-launch does (PUT .../tasks/{t}/address with the task's token), so that the tasks
# page offers "Open" through the proxy; the page kills it.
cat >"$T/serve.py" <<'W'
import http.server, json, os, urllib.request
name = os.environ["KDET_TASK_ID"]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("<!doctype html><title>%s</title><p id=hello>hello from task %s at %s</p>" % (name, name, self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
req = urllib.request.Request(
    os.environ["KDET_CONTROLLER_URL"].rstrip("/") + "/api/v1/namespaces/%s/tasks/%s/address" % (os.environ["KDET_NAMESPACE"], name),
    method="PUT", data=json.dumps({"run_id": os.environ["KDET_RUN_ID"], "host": "127.0.0.1", "port": srv.server_port}).encode(),
    headers={"Authorization": "Bearer " + os.environ["KDET_TOKEN"], "Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
print("serving on %d" % srv.server_port, flush=True)
srv.serve_forever()
W
printf 'description: ui test server\nresources: {slots: 0}\n' >"$T/task.yaml"
"$KD_BUILD/bin/det" cmd run -d --config-file "$T/task.yaml" "$PY" "$T/serve.py" >"$T/task.out" 2>&1
TASK=$(head -1 "$T/task.out")
echo "# task: $TASK"
check "the command task runs and reported its address" wait_for 60 eval \
    'task_state_is "$TASK" RUNNING && [ -n "$(field task "$TASK" "{.status.address.port}")" ]'

experiment ui-exp "  entrypoint: $PY $T/worker.py $T/stop
  labels: [ui-test, browser]
  hyperparameters:
    lr: {type: categorical, vals: [0.08, 0.4]}
  searcher: {name: grid, metric: validation_loss, max_length: {batches: 100000}}
  max_restarts: 0
  resources: {slots_per_trial: 1}"
check "both trials ACTIVE" wait_for 90 eval 'trial_state_is ui-exp-1 ACTIVE && trial_state_is ui-exp-2 ACTIVE'
check "the workers report metrics" wait_for 60 eval '[ "$(exp_metrics ui-exp validation)" -ge 2 ]'

# A CPU-only experiment with profiling enabled whose worker posts profiler rows as the
# Python harness does (POST .../metrics, kind "profiling": system samples five to a request,
# the Trainer's per-phase timings), then waits; the page pauses, activates, archives and
# unarchives it (a retried batch is stored once, so a restart after Activate adds nothing).
cat >"$T/prof_worker.py" <<'W'
import json, os, sys, time, urllib.request
url = os.environ["KDET_CONTROLLER_URL"].rstrip("/")
trial = os.environ["KDET_TRIAL_ID"].split("/")[-1]
stop = sys.argv[1]
def post(key, rows):
    body = json.dumps({"kind": "profiling", "key": key, "rows": rows}).encode()
    req = urllib.request.Request(url + "/api/v1/namespaces/%s/trials/%s/metrics" % (os.environ.get("KDET_NAMESPACE", "default"), trial),
                                 data=body, method="POST", headers={"Authorization": "Bearer " + os.environ["KDET_TOKEN"],
                                                                    "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
t0 = 1795000000.0
post("sys-1", [{"batches": 10 * i, "metrics": {
    "group": "system", "node": 0, "host": "h", "time": t0 + i, "cpu_util_pct": 20.0 + i,
    "memory_used_bytes": (2 + i) << 30, "memory_total_bytes": 16 << 30,
    "net_recv_bytes_per_s": 1000.0 * i, "net_sent_bytes_per_s": 500.0 * i,
    "disk_read_bytes_per_s": 4096.0 * i, "disk_write_bytes_per_s": 8192.0, "gpus": []}} for i in range(5)])
post("tim-1", [{"batches": 10 * i, "metrics": {
    "group": "timing", "rank": 0, "batches": 10, "time": t0 + i, "dataloader_next": 0.002 * i, "to_device": 0.0005,
    "train_batch": 0.03 + 0.001 * i, "step_lr_schedulers": 0.0001, "from_device": 0.0002}} for i in range(1, 4)])
print("profiler rows posted", flush=True)
while not os.path.exists(stop):
    time.sleep(0.5)
W
# Forty CPU-only trials of 2,000 training points each, posted at once: more trials than a chart
# gives a legend to (drawn one path per colour), more points than its overview keeps (a zoom
# reads the range again, in detail).
cat >"$T/many_worker.py" <<'W'
import json, math, os, urllib.request
url = os.environ["KDET_CONTROLLER_URL"].rstrip("/")
trial = os.environ["KDET_TRIAL_ID"].split("/")[-1]
x = int(json.loads(os.environ.get("KDET_HPARAMS") or "{}").get("x", 1))
def post(kind, rows):
    body = json.dumps({"kind": kind, "key": kind, "rows": rows}).encode()
    req = urllib.request.Request(url + "/api/v1/namespaces/%s/trials/%s/metrics" % (os.environ.get("KDET_NAMESPACE", "default"), trial),
                                 data=body, method="POST", headers={"Authorization": "Bearer " + os.environ["KDET_TOKEN"],
                                                                    "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
post("training", [{"batches": s, "metrics": {"loss": 2 * math.exp(-0.001 * x * s) + 0.05 + 0.02 * math.sin(s)}} for s in range(1, 2001)])
post("validation", [{"batches": s, "metrics": {"validation_loss": 2 * math.exp(-0.001 * x * s) + 0.1}} for s in range(100, 2001, 100)])
W
experiment ui-many "  entrypoint: $PY $T/many_worker.py
  hyperparameters:
    x: {type: int, minval: 1, maxval: 40, count: 40}
  searcher: {name: grid, metric: validation_loss, max_length: {batches: 2000}, max_concurrent_trials: 40}
  max_restarts: 0
  resources: {slots_per_trial: 0}"
check "ui-many's 40 trials posted their points" wait_for 120 eval '[ "$(exp_metrics ui-many training)" -ge 80000 ]'

experiment ui-act "  entrypoint: $PY $T/prof_worker.py $T/stop
  hyperparameters: {}
  profiling: {enabled: true}
  searcher: {name: single, metric: loss, max_length: {batches: 100000}}
  max_restarts: 0
  resources: {slots_per_trial: 0}"
check "ui-act ACTIVE (CPU only)" wait_for 90 eval 'trial_state_is ui-act-1 ACTIVE'
check "ui-act-1 posted its profiler rows" wait_for 60 eval \
    '[ "$(curl -sk -H "Authorization: Bearer $KDET_API_TOKEN" "$URL/api/v1/namespaces/default/trials/ui-act-1/profiler" | jq ".samples | length")" = 8 ]'

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
det_order() { "$DET" job list -o json 2>/dev/null | python3 -c 'import json,sys; print(" ".join(x["experiment"] for x in json.load(sys.stdin)["jobs"] if x.get("experiment") in ("jq-a","jq-b")))'; }
check "jq-a and jq-b queued" wait_for 60 eval '[ "$(det_order)" = "jq-a jq-b" ]'

node "$KD_SRC/tests/ui/browser.mjs" "$URL" "$KDET_API_TOKEN" "$ART" "$CHROMIUM" "$CKPT_UUID" "$TASK" >"$T/browser.out" 2>&1
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
check "the task killed from the page ended Killed" wait_for 30 eval \
    'task_state_is "$TASK" TERMINATED && [ "$(field task "$TASK" "{.status.endReason}")" = Killed ]'
"$DET" model describe ui-model --json >"$T/model.json" 2>"$T/model.err"
check "det model describe ui-model: versions 1 and 2, both the checkpoint of ui-reg-1" eval \
    "jq -e --arg u '$CKPT_UUID' '[.versions[] | [.version, .checkpoint_uuid, .experiment]] == [[1, \$u, \"ui-reg\"], [2, \$u, \"ui-reg\"]]' '$T/model.json' >/dev/null"
check "the refused name made no model" eval "[ \"\$('$DET' model list --json | jq -r '[.[].name] | join(\" \")')\" = ui-model ]"
check "det model describe ui-model: the labels and metadata set from its page" eval \
    "jq -e '.model.labels == [\"vision\", \"prod\"] and .model.metadata == {\"framework\": \"torch\", \"layers\": 3}' '$T/model.json' >/dev/null"
check "... and version 2's name, comment and labels" eval \
    "jq -e '.versions[1] | .name == \"best\" and .comment == \"the one to ship\" and .labels == [\"candidate\"]' '$T/model.json' >/dev/null"
# The archives the page downloaded (Chromium saved them into $ART/downloads): the files the
# worker uploaded, byte for byte, under the archive's top directory.
dl_same() { # dl_same TAR TOP: the archive holds exactly model.bin and sub/opt.txt of the checkpoint
    rm -rf "$T/x" && mkdir -p "$T/x" && tar -xf "$1" -C "$T/x" &&
        [ "$(cd "$T/x" && find . -type f | sort | tr '\n' ' ')" = "./$2/model.bin ./$2/sub/opt.txt " ] &&
        cmp "$T/x/$2/model.bin" "$T/w/$CKPT_UUID/model.bin" && cmp "$T/x/$2/sub/opt.txt" "$T/w/$CKPT_UUID/sub/opt.txt"
}
check "the model page's Download: ui-model-v1.tar, the checkpoint's files byte for byte" dl_same "$ART/downloads/ui-model-v1.tar" ui-model-v1
check "the trial page's Download: $CKPT_UUID.tar, likewise" dl_same "$ART/downloads/$CKPT_UUID.tar" "$CKPT_UUID"
for f in login experiments experiment many hparams trial history jobs checkpoints models model model-edit version-edit tasks profiler experiment-actions; do
    check "screenshot $f.png saved" test -s "$ART/$f.png"
done

check "ui-act: ACTIVE again and not archived after the page's actions" eval \
    'exp_state_is ui-act ACTIVE && [ "$(field exp ui-act "{.spec.archived}")" != true ]'
touch "$T/stop"
kubectl patch experiment ui-act --type merge -p '{"spec":{"canceled":true}}' >/dev/null 2>&1
kubectl patch experiment ui-exp --type merge -p '{"spec":{"canceled":true}}' >/dev/null 2>&1
check "the workers stopped" wait_for 60 eval '[ -z "$(trial_procs)" ]'
