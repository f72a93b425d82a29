#!/usr/bin/env bash
# Notebooks on a kdet-local with 2 fake GPUs, a private PostgreSQL and the
# controller API, with Debian's Jupyter server as the notebook process: a
# notebook that asks for 1 GPU queues behind a higher-priority experiment
# holding both and starts when they free up; its Jupyter API answers
# through the controller's proxy with a user token and refuses without one;
# det notebook open's one-minute link signs a browser in (a session cookie)
# once; a kernel started through the proxy runs code over its WebSocket
# channel, and a terminal runs a shell command over its own; while the kernel exists the notebook is in use (Determined's
# kernels_or_terminals); with it shut down and left alone, the notebook is
# ended by its idle_timeout and its GPU is free again; its logs are kept;
# nothing is left behind.
. "$(dirname "$0")/lib.sh"
need_pg || exit 77
PY=/usr/bin/python3
if ! command -v jupyter-server >/dev/null 2>&1 || ! $PY -c 'import websocket, ipykernel' 2>/dev/null; then
    echo "SKIP: no jupyter-server (Debian's python3-jupyter-server, jupyter-server), python3-websocket or python3-ipykernel"
    rm -rf "$T"
    exit 77
fi
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 2 || exit 1
start_ctrl_api
DET=$KD_BUILD/bin/det
mkdir -p "$T/home" "$T/work"

# ---- queued behind a higher-priority experiment
experiment hi "  entrypoint: sh -c 'sleep 600'
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  max_restarts: 0
  resources: {slots_per_trial: 2, priority: 10}"
check "a priority-10 experiment holds both GPUs" wait_for 30 n_is 1 running_pods kdet.io/experiment=hi
cat >"$T/nb.yaml" <<Y
description: e2e notebook
resources: {slots: 1, priority: 50}
idle_timeout: 15s
work_dir: $T/work
environment:
  environment_variables: [HOME=$T/home, JUPYTER_RUNTIME_DIR=$T/home/rt]
Y
"$DET" notebook start -d --config-file "$T/nb.yaml" >"$T/start.out" 2>&1
NB=$(head -1 "$T/start.out")
echo "# notebook: $NB"
check "the notebook waits for a GPU" wait_for 10 eval 'field task "$NB" "{.status.message}" | grep -q "waiting for 1 GPUs"'
sleep 2
check "... QUEUED behind the experiment" task_state_is "$NB" QUEUED
check "det job list shows it after the experiment" eval '"$DET" job list | grep -A5 "^1 .* hi " | grep -q "$NB"'
"$DET" experiment kill hi >/dev/null 2>&1
t0=$(date +%s)
check "once the GPUs free up the notebook runs (Jupyter listening)" wait_for 60 task_state_is "$NB" RUNNING
echo "# RUNNING $(( $(date +%s) - t0 )) s after the experiment was killed"
check "it holds 1 GPU" test "$(kubectl get pod "$NB-0" -o 'jsonpath={.spec.containers[0].resources.limits.nvidia\.com/gpu}')" = 1

# ---- Jupyter through the proxy
code=$(curl -s -o "$T/status.json" -w '%{http_code}' -H "Authorization: Bearer $KDET_API_TOKEN" "$URL/proxy/$NB/api/status")
check "GET /proxy/$NB/api/status with a user token: 200 from Jupyter ($code)" eval '[ "$code" = 200 ] && grep -q "\"started\"" "$T/status.json"'
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/proxy/$NB/api/status")
check "without a token: 401 ($code)" test "$code" = 401
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer not-a-token" "$URL/proxy/$NB/api/status")
check "with a bad token: 401 ($code)" test "$code" = 401
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: token $(kubectl get secret "$NB-token" -o jsonpath='{.data.token}' | base64 -d)" "$URL/proxy/$NB/api/status")
check "the notebook's own token is not a user's: 401 ($code)" test "$code" = 401
"$DET" notebook open "$NB" >"$T/open.out" 2>&1
LINK=$(grep -m1 '^http' "$T/open.out")
check "det notebook open prints a sign-in link" eval 'case "$LINK" in "$URL/proxy/$NB/?namespace=default&kdet_ticket="*) true ;; *) false ;; esac'
code=$(curl -s -o /dev/null -w '%{http_code}' -c "$T/jar" "$LINK")
check "the link sets the session cookie (303, $code)" eval '[ "$code" = 303 ] && grep -q kdet_proxy "$T/jar"'
code=$(curl -s -o /dev/null -w '%{http_code}' -b "$T/jar" "$URL/proxy/$NB/api/status")
check "the browser's cookie opens Jupyter's API (200, $code)" test "$code" = 200
check "a changed link is refused (401)" test "$(curl -s -o /dev/null -w '%{http_code}' "${LINK}x")" = 401

# ---- a kernel over its WebSocket channel
timeout 90 $PY "$KD_SRC/e2e/controller/nbclient.py" "$URL" "$NB" "$KDET_API_TOKEN" kernel 'print(6*7)' 42 >"$T/kernel.out" 2>&1
rc=$?
sed 's/^/#   /' "$T/kernel.out"
check "a kernel ran print(6*7) over the proxied WebSocket channel: 42" test "$rc" = 0
check "the proxy relayed a WebSocket (101)" grep -q "path=/proxy/$NB/api/kernels/[^ ]*/channels status=101" "$T/ctrl.log"

# ---- a terminal (terminado) over its WebSocket, then deleted so it is no longer use
timeout 90 $PY "$KD_SRC/e2e/controller/nbclient.py" "$URL" "$NB" "$KDET_API_TOKEN" terminal 'echo $((6*7))' 42 >"$T/term.out" 2>&1
rc=$?
sed 's/^/#   /' "$T/term.out"
check "a Jupyter terminal ran echo \$((6*7)) over the proxied WebSocket: 42" test "$rc" = 0
check "the proxy relayed the terminal's WebSocket (101)" grep -q "path=/proxy/$NB/terminals/websocket/[^ ]* status=101" "$T/ctrl.log"
check "the terminal was deleted through the proxy (204)" grep -qx "terminal deleted 204" "$T/term.out"

# ---- the idle timeout ends it and frees the GPU
# notebook_idle_type kernels_or_terminals (the default), as Determined: a kernel that exists
# is use, even idle with no channel open; once it is shut down the idle time counts.
sleep 20
check "with its kernel left running, the notebook is not idle past idle_timeout" task_state_is "$NB" RUNNING
K=$(curl -s -H "Authorization: Bearer $KDET_API_TOKEN" "$URL/proxy/$NB/api/kernels" | jq -r '.[0].id // empty')
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $KDET_API_TOKEN" "$URL/proxy/$NB/api/kernels/$K")
check "the kernel is shut down through the proxy (204, $code)" test "$code" = 204
t0=$(date +%s)
check "left alone, the notebook ends by its idle_timeout" wait_for 90 task_state_is "$NB" TERMINATED
echo "# ended $(( $(date +%s) - t0 )) s after its last use (idle_timeout 15s)"
check "endReason IdleTimeout" test "$(field task "$NB" '{.status.endReason}')" = IdleTimeout
check "an IdleTimeout Event on the Task" eval 'kubectl get events --field-selector involvedObject.name=$NB -o jsonpath="{.items[*].reason}" | grep -q IdleTimeout'
check "its pod is gone" wait_for 30 no_pods "kdet.io/task=$NB"
"$DET" cmd run -d --config-file <(printf 'resources: {slots: 2}\n') true >"$T/after.out" 2>&1
A=$(head -1 "$T/after.out")
check "both GPUs are free again (a 2-GPU command runs)" wait_for 30 task_state_is "$A" TERMINATED
check "its logs are kept (Jupyter's own lines)" eval '"$DET" notebook logs "$NB" | grep -qi "jupyter"'
check "the working directory persists" test -d "$T/work"
check "no Jupyter process is left" eval '! pgrep -f "jupyter-server.*$NB" >/dev/null'
check "no task pod is left" wait_for 20 no_pods kdet.io/task
check "no token in the controller log" eval '! grep -q "kdet_ticket=[0-9]" "$T/ctrl.log"'
