#!/usr/bin/env bash
# The experiment's context reaches its trials: `det experiment create CONFIG
# DIR` ships DIR in a ConfigMap, the trial pod mounts it, kdet-launch checks
# its sha256, unpacks it and runs the entrypoint (a script of the context,
# reading a data file of the context) there, then removes it. A ConfigMap
# changed after creation makes the trial fail with the digest error.
# A second container in each pod waits for a file, so the trial container's
# log can be read before the pod ends (pods go when their trial ends).
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 2 || exit 1
start_ctrl

# keeper_spec GOFILE: an environment.pod_spec with a container that holds the pod until GOFILE exists.
keeper_spec() {
    printf 'environment:\n  pod_spec:\n    spec:\n      containers:\n      - name: keeper\n        image: busybox\n        command: [sh, -c, "i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"]\n' "$1"
}
# trial_log EXP: the trial container's log of the experiment's first pod.
trial_log() {
    local pod
    pod=$(kubectl get pods -l "kdet.io/experiment=$1" -o name 2>/dev/null | head -1)
    [ -n "$pod" ] && kubectl logs "${pod#pod/}" -c trial 2>/dev/null
}
log_has() { trial_log "$1" | grep -q -- "$2"; }

mkdir -p "$T/ctx/data"
cat >"$T/ctx/train.sh" <<'SH'
#!/bin/sh
echo "context-marker cwd=$(pwd) dir=$KDET_CONTEXT_DIR"
read -r line <data/input.txt && echo "data-file says: $line"
if [ -e ignored.bin ]; then echo "ignored.bin present=yes"; else echo "ignored.bin present=no"; fi
test "$(pwd)" = "$KDET_CONTEXT_DIR"
SH
chmod +x "$T/ctx/train.sh"
echo "forty-two" >"$T/ctx/data/input.txt"
echo "secret-weights" >"$T/ctx/ignored.bin"
echo "*.bin" >"$T/ctx/.detignore"
{
    printf 'name: ctxgood\nentrypoint: ./train.sh\nmax_restarts: 0\n'
    printf 'searcher: {name: single, metric: loss, max_length: {batches: 1}}\n'
    printf 'resources: {slots_per_trial: 1}\n'
    keeper_spec "$T/go-good"
} >"$T/good.yaml"
"$KD_BUILD/bin/det" experiment create "$T/good.yaml" "$T/ctx" >"$T/det.out" 2>&1
check "det experiment create CONFIG DIR succeeds" test $? = 0
good=$(kubectl get exp -o name | sed -n 's|.*/\(ctxgood-.*\)|\1|p')
log "experiment $good created"
check "the experiment names its context ConfigMap" test -n "$(field exp "$good" '{.spec.context.configMap}')"
check "the entrypoint ran inside the unpacked context" wait_for 60 log_has "$good" "^\[rank=0\] context-marker"
out=$(trial_log "$good")
echo "$out" | sed 's/^/#   /' | head -12
check "it read the context's data file" eval 'echo "$out" | grep -q "data-file says: forty-two"'
check "the launcher verified the digest" eval 'echo "$out" | grep -q "msg=\"context archive read\".*verified=true"'
check "the launcher logged the unpacked directory" eval 'echo "$out" | grep -q "msg=\"context unpacked\".*dir="'
check "the worker exited 0 in the context dir" eval 'echo "$out" | grep -q "msg=\"launch finished\" exit_code=0"'
udir=$(echo "$out" | sed -n 's/.*msg="context unpacked".* dir=\([^ ]*\).*/\1/p' | head -1)
check "the unpacked directory ($udir) is removed at exit" eval 'test -n "$udir" && test ! -e "$udir"'
check ".detignore'd files did not travel" eval 'echo "$out" | grep -q "ignored.bin present=no"'
touch "$T/go-good"
check "experiment $good COMPLETED" wait_for 60 exp_state_is "$good" COMPLETED

# The same context, its ConfigMap swapped for another archive before the trial starts.
sed -e 's/^name: ctxgood/name: ctxbad/' -e "s|$T/go-good|$T/go-bad|" "$T/good.yaml" >"$T/bad.yaml"
"$KD_BUILD/bin/det" experiment create "$T/bad.yaml" "$T/ctx" --dry-run 2>/dev/null >"$T/bad-res.yaml"
mkdir -p "$T/other" && echo 'echo evil' >"$T/other/train.sh"
other=$(tar -czf - -C "$T/other" . | base64 -w0)
sed -i "s|^  context.tar.gz: .*|  context.tar.gz: $other|" "$T/bad-res.yaml"
kubectl apply -f "$T/bad-res.yaml" >/dev/null
bad=$(kubectl get exp -o name | sed -n 's|.*/\(ctxbad-.*\)|\1|p')
want=$(field exp "$bad" '{.spec.context.sha256}')
log "experiment $bad created with a tampered ConfigMap (recorded sha256 ${want:0:12})"
check "the launcher refused the archive" wait_for 60 log_has "$bad" "sha256 mismatch"
out=$(trial_log "$bad")
echo "$out" | sed 's/^/#   /' | head -5
check "the error names the recorded digest" eval 'echo "$out" | grep -q "expected ${want:0:12}"'
check "the error names the archive's digest" eval 'echo "$out" | grep -q "got $(echo "$other" | base64 -d | sha256sum | cut -c1-12)"'
check "the tampered code never ran" eval '! echo "$out" | grep -q evil'
touch "$T/go-bad"
check "experiment $bad ends in ERROR" wait_for 60 exp_state_is "$bad" ERROR
check "its trial failed" eval 'test "$(kubectl get trial -l kdet.io/experiment=$bad -o "jsonpath={.items[0].status.state}")" = ERROR'
check "no pods left" wait_for 20 no_pods
