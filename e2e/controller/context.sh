#!/usr/bin/env bash
# The experiment's context reaches its trials: `det experiment create CONFIG
# DIR` ships DIR in a ConfigMap, the trial pod mounts it, kdet-launch checks
# its sha256, unpacks it and runs the entrypoint (a script of the context,
# reading a data file of the context) there, then removes it. A ConfigMap
# changed after creation makes the trial fail with the digest error.
# A context too large for a ConfigMap (2 MB of random bytes) goes to the
# checkpoint storage at kdet-contexts/<sha256>.tar.gz: shared_fs (a file://
# URL; a second create finds it there and does not upload it again) and,
# with s3rver, s3 (an s3:// URL the launcher fetches with the keys the pod
# gets from checkpoint_storage.credentials_secret by secretKeyRef).
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

# big_config NAME GOFILE STORAGE: a config whose trial checks the large context's data file.
big_config() {
    printf 'name: %s\nentrypoint: ./train.sh\nmax_restarts: 0\n' "$1"
    printf 'searcher: {name: single, metric: loss, max_length: {batches: 1}}\n'
    printf 'resources: {slots_per_trial: 1}\ncheckpoint_storage: {%s}\n' "$3"
    keeper_spec "$2"
}
mkdir -p "$T/big/data"
head -c 2000000 /dev/urandom >"$T/big/data/blob.bin"
blobsum=$(sha256sum <"$T/big/data/blob.bin" | cut -c1-16)
cat >"$T/big/train.sh" <<'SH'
#!/bin/sh
echo "big-context blob=$(sha256sum <data/blob.bin | cut -c1-16) cwd=$(pwd)"
SH
chmod +x "$T/big/train.sh"

# shared_fs
mkdir -p "$T/ckpt"
big_config ctxbig "$T/go-big" "type: shared_fs, host_path: '$T/ckpt'" >"$T/big.yaml"
"$KD_BUILD/bin/det" experiment create "$T/big.yaml" "$T/big" >"$T/det-big.out" 2>&1
check "det experiment create uploads a 2 MB context to shared_fs" test $? = 0
sed 's/^/#   /' "$T/det-big.out"
big=$(kubectl get exp -o name | sed -n 's|.*/\(ctxbig-.*\)|\1|p')
sha=$(field exp "$big" '{.spec.context.sha256}')
check "spec.context.url is file:// under kdet-contexts/<sha256>" test "$(field exp "$big" '{.spec.context.url}')" = "file://$T/ckpt/kdet-contexts/$sha.tar.gz"
check "no ConfigMap for it" test -z "$(field exp "$big" '{.spec.context.configMap}')"
check "the archive is in the storage with the recorded size" test "$(stat -c %s "$T/ckpt/kdet-contexts/$sha.tar.gz" 2>/dev/null)" = "$(field exp "$big" '{.spec.context.size}')"
check "det reported the upload (bytes, time)" grep -q "uploaded context ${sha:0:12} (.* bytes) to .* in .* s" "$T/det-big.out"
check "the trial ran the large context" wait_for 60 log_has "$big" "big-context blob=$blobsum"
out=$(trial_log "$big")
check "the launcher read it from the URL and verified it" eval 'echo "$out" | grep -q "msg=\"context archive read\".*kdet-contexts.*verified=true"'
touch "$T/go-big"
check "experiment $big COMPLETED" wait_for 60 exp_state_is "$big" COMPLETED
sed -e 's/^name: ctxbig/name: ctxbig2/' "$T/big.yaml" >"$T/big2.yaml"
"$KD_BUILD/bin/det" experiment create "$T/big2.yaml" "$T/big" --dry-run >/dev/null 2>"$T/det-big2.out"
check "--dry-run names where it would upload" grep -q "would be uploaded to file://$T/ckpt/kdet-contexts/$sha.tar.gz" "$T/det-big2.out"
"$KD_BUILD/bin/det" experiment create "$T/big2.yaml" "$T/big" >"$T/det-big2.out" 2>&1
check "the same context again: already there, not uploaded again" grep -q "is already at file://" "$T/det-big2.out"
big2=$(kubectl get exp -o name | sed -n 's|.*/\(ctxbig2-.*\)|\1|p')
check "experiment $big2 (the archive already there) COMPLETED" wait_for 60 exp_state_is "$big2" COMPLETED

# s3 on s3rver, the pod's keys from the Secret
S3RVER=$KD_SRC/.deps/s3rver/node_modules/.bin/s3rver
if [ -x "$S3RVER" ]; then
    s3port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$T/s3"
    NODE_OPTIONS=--openssl-legacy-provider "$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$s3port" --silent \
        --configure-bucket ctxs >"$T/s3rver.log" 2>&1 &
    S3PID=$!
    wait_for 10 eval "(exec 3<>/dev/tcp/127.0.0.1/$s3port) 2>/dev/null"
    kubectl create secret generic s3-creds --from-literal=AWS_ACCESS_KEY_ID=S3RVER \
        --from-literal=AWS_SECRET_ACCESS_KEY=S3RVER >/dev/null
    big_config ctxs3 "$T/go-s3" "type: s3, bucket: ctxs, prefix: team, endpoint_url: 'http://127.0.0.1:$s3port', credentials_secret: s3-creds" >"$T/s3.yaml"
    AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "$KD_BUILD/bin/det" experiment create "$T/s3.yaml" "$T/big" >"$T/det-s3.out" 2>&1
    check "det experiment create uploads the context to s3" test $? = 0
    sed 's/^/#   /' "$T/det-s3.out"
    s3e=$(kubectl get exp -o name | sed -n 's|.*/\(ctxs3-.*\)|\1|p')
    check "spec.context.url is s3://bucket/prefix/kdet-contexts/<sha256>" test "$(field exp "$s3e" '{.spec.context.url}')" = "s3://ctxs/team/kdet-contexts/$sha.tar.gz"
    check "det printed no credentials" eval "! grep -q S3RVER '$T/det-s3.out'"
    check "the trial ran the context fetched from s3" wait_for 60 log_has "$s3e" "big-context blob=$blobsum"
    pod=$(kubectl get pods -l "kdet.io/experiment=$s3e" -o name | head -1)
    check "the pod takes the keys from the Secret by secretKeyRef" eval "kubectl get ${pod} -o json | grep -q '\"secretKeyRef\"' && kubectl get ${pod} -o json | grep -q s3-creds"
    check "the pod spec holds no key" eval "! kubectl get ${pod} -o json | grep -q S3RVER"
    out=$(trial_log "$s3e")
    check "the launcher verified the s3 archive" eval 'echo "$out" | grep -q "msg=\"context archive read\".*s3://.*verified=true"'
    touch "$T/go-s3"
    check "experiment $s3e COMPLETED" wait_for 60 exp_state_is "$s3e" COMPLETED
    check "no credentials in the controller log" eval "! grep -q S3RVER '$T/ctrl.log'"
    kill "$S3PID" 2>/dev/null
    wait "$S3PID" 2>/dev/null
else
    bad "s3rver is not installed ($S3RVER): run make deps"
fi
check "no pods left at the end" wait_for 30 no_pods
