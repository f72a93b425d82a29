# Interactive tasks on the real nodes, sourced by e2e/kube/install.sh once the
# chart is installed (its variables and helpers: NS, work, DET, U, field,
# within, check, expect, the pods watch in $work/pods.watch, the API's URL,
# token and CA in KDET_API_URL, KDET_API_TOKEN and KDET_API_CA_FILE):
#   - `det cmd run` of a 1-slot command in kdet-trainer: its output, its
#     exit code, its logs kept in the chart's PostgreSQL after the pod went;
#   - a notebook queued behind a priority-10 experiment holding the pool's
#     CPU slots, started once it is killed: Debian's Jupyter server in
#     kdet-trainer, reached through the controller's proxy over HTTPS (401
#     without a token), a kernel and a terminal over their WebSockets, then
#     ended by its idle_timeout;
#   - a 0-slot shell running while the notebook queues: the image's sshd,
#     `det shell open ID -- hostname` through the proxy's tunnel, then
#     `det shell kill`;
#   - two commands holding the pool, a third waiting, started once one of
#     the two is killed;
#   - nothing of the tasks left.
# Never run alone.

PY=/usr/bin/python3
task_state() { field task "$1" '{.status.state}'; }
task_is() { [[ "$(task_state "$1")" == "$2" ]]; }
# task_pod NAME JQ: JQ over the last version the pods watch saw of task NAME's pod.
task_pod() {
	jq -rs --arg t "$1" "[.[] | select(.metadata.labels[\"kdet.io/task\"] == \$t)] | last | $2" \
		"$work/pods.watch" 2>/dev/null
}
# settled NAME: RUNNING or TERMINATED (a task that failed to start is not waited for).
settled() { [[ "$(task_state "$1")" =~ ^(RUNNING|TERMINATED)$ ]]; }
task_detail() {
	echo "state $(task_state "$1"): $(field task "$1" '{.status.message}')"
	"$DET" task logs -n "$NS" "$1" 2>&1 | tail -n 8
}
cat >"$work/cmd.yaml" <<EOF
description: e2e command
resources: {resource_pool: $KDET_REALNODE_POOL, slots: 1}
EOF

# --- det cmd run: the output and the exit code ---------------------------------------
log "det cmd run on the real nodes"
timeout 300 "$DET" cmd run -n "$NS" --config-file "$work/cmd.yaml" \
	sh -c 'echo hello from $(hostname) as $(id -u); exit 3' >"$work/cmd.out" 2>"$work/cmd.err"
rc=$?
C1="$(head -n1 "$work/cmd.out")"
if [[ $rc == 3 ]]; then ok "tasks: det cmd run exits with the command's exit code (3)"; else bad "tasks: det cmd run exits with the command's exit code (3)" "exit $rc" "$(tail -c 600 "$work/cmd.err")" "$(task_detail "$C1")"; fi
expect "tasks: it printed the command's output, from its pod as uid 65532" "^hello from $C1-0 as 65532\$" \
	sed -n 2p "$work/cmd.out"
expect "tasks: the command ran in kdet-trainer on a real node" \
	"^kdet-trainer:${tag[trainer]} kdet-real-node(-2)?\$" \
	task_pod "$C1" '"\(.spec.containers[0].image) \(.spec.nodeName)"'
expect "tasks: the task ended Failed, exit code 3" '^Failed 3$' field task "$C1" '{.status.endReason} {.status.exitCode}'
check "tasks: its pod is gone" within 60 bash -c "[[ -z \"\$(kubectl -n $NS get pods -l kdet.io/task=$C1 -o name)\" ]]"
expect "tasks: det cmd logs reads its output from the store" "hello from $C1-0" "$DET" cmd logs -n "$NS" "$C1"

# --- a notebook queued behind an experiment holding the pool; a shell beside it --------
# The pool's CPU slots (one per node: the controller and PostgreSQL hold part of each
# node's 2 CPUs) taken by a priority-10 experiment's 2 pods.
cat >"$work/hold.yaml" <<EOF
name: hold
entrypoint: sleep 600
hyperparameters: {x: 1}
searcher: {name: single, metric: loss, max_length: {batches: 10}}
resources: {slots_per_trial: 2, priority: 10}
max_restarts: 0
EOF
if create hold; then ok "tasks: det experiment create hold (2 slots, priority 10)"; else bad "tasks: det experiment create hold" "$(tail -c 600 "$work/create-hold.log")"; fi
running_hold() {
	[[ "$(kubectl -n "$NS" get pods -l "kdet.io/experiment=${E[hold]}" \
		-o 'jsonpath={range .items[*]}{.status.containerStatuses[0].state.running.startedAt} {end}' | wc -w)" == 2 ]]
}
check "tasks: the experiment's 2 pods run, holding the pool's slots" within 180 running_hold
cat >"$work/nb.yaml" <<EOF
description: e2e notebook
resources: {resource_pool: $KDET_REALNODE_POOL, slots: 1, priority: 50}
idle_timeout: 20s
EOF
cat >"$work/sh.yaml" <<EOF
description: e2e shell
resources: {resource_pool: $KDET_REALNODE_POOL, slots: 0}
EOF
"$DET" notebook start -d -n "$NS" --config-file "$work/nb.yaml" >"$work/nb.out" 2>&1
NB="$(head -n1 "$work/nb.out")"
"$DET" shell start -d -n "$NS" --config-file "$work/sh.yaml" >"$work/sh.out" 2>&1
SH="$(head -n1 "$work/sh.out")"
log "notebook $NB, shell $SH"
check "tasks: the notebook waits for a slot" within 60 bash -c \
	"kubectl -n $NS get task $NB -o 'jsonpath={.status.message}' | grep -q 'waiting for 1 '"
log "$NB: $(field task "$NB" '{.status.message}')"
within 240 settled "$SH"
if task_is "$SH" RUNNING; then ok "tasks: the 0-slot shell runs meanwhile (sshd in kdet-trainer)"; else bad "tasks: the 0-slot shell runs meanwhile" "$(task_detail "$SH")" "$(tail -c 600 "$work/sh.out")"; fi
expect "tasks: ... while the notebook is still QUEUED" '^QUEUED$' task_state "$NB"
"$DET" experiment kill -n "$NS" "${E[hold]}" >/dev/null 2>&1
t0=$(now)
within 240 settled "$NB"
if task_is "$NB" RUNNING; then ok "tasks: once the experiment is killed, the notebook runs ($(secs "$t0" "$(now)") s later)"; else bad "tasks: once the experiment is killed, the notebook runs" "$(task_detail "$NB")" "$(tail -c 600 "$work/nb.out")"; fi
code() { command curl --cacert "$KDET_API_CA_FILE" -sS -o /dev/null -w '%{http_code}' --max-time 30 "$@"; }
expect "tasks: Jupyter answers through the proxy over HTTPS with the user token (200)" '^200$' \
	code -H "Authorization: Bearer $KDET_API_TOKEN" "$KDET_API_URL/proxy/$NB/api/status"
expect "tasks: and refuses without it (401)" '^401$' code "$KDET_API_URL/proxy/$NB/api/status"
timeout 120 "$PY" "$KD_SRC/e2e/controller/nbclient.py" "$KDET_API_URL" "$NB" "$KDET_API_TOKEN" \
	kernel 'import os; print(6*7, os.getuid())' "42 65532" >"$work/kernel.out" 2>&1
rc=$?
if [[ $rc == 0 ]]; then ok "tasks: a kernel ran code over its proxied WebSocket (wss), as uid 65532"; else bad "tasks: a kernel ran code over its proxied WebSocket" "$(tail -c 800 "$work/kernel.out")"; fi
timeout 120 "$PY" "$KD_SRC/e2e/controller/nbclient.py" "$KDET_API_URL" "$NB" "$KDET_API_TOKEN" \
	terminal 'echo $((6*7))' 42 >"$work/term.out" 2>&1
rc=$?
if [[ $rc == 0 ]]; then ok "tasks: a Jupyter terminal ran a command over its proxied WebSocket"; else bad "tasks: a Jupyter terminal ran a command over its proxied WebSocket" "$(tail -c 800 "$work/term.out")"; fi
kid="$(command curl --cacert "$KDET_API_CA_FILE" -sS --max-time 30 -H "Authorization: Bearer $KDET_API_TOKEN" \
	"$KDET_API_URL/proxy/$NB/api/kernels" | jq -r '.[0].id // empty')"
expect "tasks: the kernel is shut down through the proxy (204)" '^204$' \
	code -X DELETE -H "Authorization: Bearer $KDET_API_TOKEN" "$KDET_API_URL/proxy/$NB/api/kernels/${kid:-none}"
t_idle=$(now)

timeout 120 "$DET" shell open -n "$NS" "$SH" -- hostname >"$work/ssh.out" 2>"$work/ssh.err"
rc=$?
if [[ $rc == 0 ]] && grep -qx "$SH-0" "$work/ssh.out"; then
	ok "tasks: det shell open $SH -- hostname ran in its pod through the proxy's tunnel"
else
	bad "tasks: det shell open -- hostname" "exit $rc, stdout: $(head -c 200 "$work/ssh.out")" "$(tail -c 600 "$work/ssh.err")"
fi
"$DET" shell kill -n "$NS" "$SH" >"$work/shkill.out" 2>&1
expect "tasks: det shell kill: the shell ended Killed" '^TERMINATED Killed$' field task "$SH" '{.status.state} {.status.endReason}'

if within 180 task_is "$NB" TERMINATED; then
	ok "tasks: left alone, the notebook ended $(secs "$t_idle" "$(now)") s after its kernel was shut down (idle_timeout 20s)"
else
	bad "tasks: the notebook ends by its idle_timeout" "$(task_detail "$NB")"
fi
expect "tasks: endReason IdleTimeout" '^IdleTimeout$' field task "$NB" '{.status.endReason}'

# --- killing a task frees its slot at once ---------------------------------------------
cat >"$work/one.yaml" <<EOF
resources: {resource_pool: $KDET_REALNODE_POOL, slots: 1}
EOF
"$DET" cmd run -d -n "$NS" --config-file "$work/one.yaml" sleep 600 >"$work/b1.out" 2>&1
"$DET" cmd run -d -n "$NS" --config-file "$work/one.yaml" sleep 600 >"$work/b2.out" 2>&1
B1="$(head -n1 "$work/b1.out")" B2="$(head -n1 "$work/b2.out")"
check "tasks: two 1-slot commands hold the pool" within 180 bash -c \
	"[[ \"\$(kubectl -n $NS get task $B1 $B2 -o 'jsonpath={.items[*].status.state}')\" == 'RUNNING RUNNING' ]]"
"$DET" cmd run -d -n "$NS" --config-file "$work/one.yaml" sh -c 'echo next' >"$work/n.out" 2>&1
N="$(head -n1 "$work/n.out")"
check "tasks: a third waits for a slot" within 60 bash -c \
	"kubectl -n $NS get task $N -o 'jsonpath={.status.message}' | grep -q 'waiting for 1 '"
t0=$(now)
"$DET" cmd kill -n "$NS" "$B1" >/dev/null 2>&1
if within 30 bash -c "[[ \"\$(kubectl -n $NS get task $N -o 'jsonpath={.status.state}')\" =~ ^(RUNNING|TERMINATED)\$ ]]"; then
	ok "tasks: killing one frees its slot: the third started $(secs "$t0" "$(now)") s after det cmd kill was run"
else
	bad "tasks: killing one frees its slot for the third" "$(task_detail "$N")"
fi
"$DET" cmd kill -n "$NS" "$B2" >/dev/null 2>&1
check "tasks: the third completes" within 120 task_is "$N" TERMINATED
expect "tasks: ... with its output" '^next$' "$DET" cmd logs -n "$NS" "$N"
check "tasks: no task pod is left" within 90 bash -c "[[ -z \"\$(kubectl -n $NS get pods -l kdet.io/task -o name)\" ]]"
kubectl -n "$NS" delete tasks --all --wait=true --timeout=60s >/dev/null 2>&1
check "tasks: deleting the Tasks removes their Secrets and ConfigMaps" within 60 bash -c \
	"[[ -z \"\$(kubectl -n $NS get secrets,configmaps -o json | jq -r '.items[] | select(.metadata.ownerReferences[]?.kind == \"Task\") | .metadata.name')\" ]]"
