#!/usr/bin/env bash
# `dtrain ckpt` end to end against a real s3rver on 127.0.0.1 and a
# shared_fs directory: upload, ls, verify, download, rm, gc --dry-run, and
# the errors a user sees. Prints `N passed, N failed`.
set -u
B="${KD_BUILD:?}/bin/dtrain ckpt"
S3RVER=${KD_SRC:?}/.deps/s3rver/node_modules/.bin/s3rver
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }

if [ ! -x "$S3RVER" ]; then
    echo "s3rver is not installed ($S3RVER): run make deps"
    echo "0 passed, 1 failed"
    exit 1
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/kd-ckpt-tool-XXXXXX")
srv=
cleanup() {
    [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap "exit 1" INT TERM
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$T/s3" "$T/src/nested dir" "$T/fs"
NODE_OPTIONS=--openssl-legacy-provider "$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$port" --silent --configure-bucket ckpts > "$T/s3rver.log" 2>&1 &
srv=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

head -c 20000000 /dev/urandom > "$T/src/model.bin"
: > "$T/src/empty"
echo "hello" > "$T/src/nested dir/ünïcödé.txt"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
S3="--storage s3://ckpts/exp-1 --endpoint-url http://127.0.0.1:$port --part-size 5MiB"

uuid=$($B upload "$T/src" $S3 --metadata '{"trial_id":"1","steps_completed":100,"searcher_metric":0.3}' 2> "$T/up.err")
check "upload prints the uuid" test ${#uuid} -eq 36
check "upload shows progress" grep -q '^upload ' "$T/up.err"
$B upload "$T/src" $S3 --uuid later --metadata '{"trial_id":"1","steps_completed":200,"searcher_metric":0.5}' -q > /dev/null 2>&1
check "second upload" test $? -eq 0
$B ls $S3 > "$T/ls.out" 2>&1
check "ls shows both complete" test "$(grep -c ' complete ' "$T/ls.out")" -eq 2
$B verify "$uuid" later --deep $S3 -q > "$T/verify.out" 2>&1
check "verify --deep" test "$(grep -c 'ok (sizes and sha256)' "$T/verify.out")" -eq 2
$B download "$uuid" "$T/out" $S3 -q > /dev/null 2>&1
check "download round trip" diff -r "$T/src" "$T/out"
$B gc --dry-run $S3 > "$T/gc.out" 2>&1
check "gc plan keeps the best and the latest" \
    grep -q "^$uuid .*keep   trial_best" "$T/gc.out"
check "gc plan: dry run deletes nothing" grep -q 'keep 2, delete 0 (dry run' "$T/gc.out"
$B gc --dry-run --save-trial-best 0 $S3 > "$T/gc2.out" 2>&1
check "gc plan with save_trial_best 0" grep -q "^$uuid .*DELETE" "$T/gc2.out"
$B gc --yes --save-trial-best 0 $S3 -q > /dev/null 2>&1
$B ls $S3 > "$T/ls2.out" 2>&1
check "gc --yes deleted the planned one" grep -q '^1 checkpoints' "$T/ls2.out"
$B rm later $S3 -q > /dev/null 2>&1
$B ls $S3 > "$T/ls3.out" 2>&1
check "rm" grep -q '^0 checkpoints' "$T/ls3.out"

# Determined's documented GC example, planned from the controller's view
cat > "$T/ckpts.json" <<'JSON'
[{"uuid":"1","trial_id":1,"steps_completed":1},{"uuid":"2","trial_id":1,"steps_completed":2},
 {"uuid":"3","trial_id":1,"steps_completed":3,"metric":0.6},{"uuid":"4","trial_id":1,"steps_completed":4,"metric":0.5},
 {"uuid":"5","trial_id":1,"steps_completed":5,"metric":0.4},{"uuid":"6","trial_id":2,"steps_completed":1},
 {"uuid":"7","trial_id":2,"steps_completed":2,"metric":0.2},{"uuid":"8","trial_id":2,"steps_completed":3,"metric":0.3},
 {"uuid":"9","trial_id":2,"steps_completed":4},{"uuid":"10","trial_id":2,"steps_completed":5,"trial_state":"PAUSED"}]
JSON
$B gc --dry-run --checkpoints "$T/ckpts.json" --save-experiment-best 2 --save-trial-best 1 --save-trial-latest 0 > "$T/gc3.out" 2>&1
kept=$(awk '$5 == "keep" || $4 == "keep" {print $1}' "$T/gc3.out" | sort -n | tr '\n' ',')
check "documented example 2/1/0 (+ resume point of paused trial 2)" test "$kept" = "5,7,8,10,"

# errors a user sees
AWS_ACCESS_KEY_ID=WRONG AWS_SECRET_ACCESS_KEY=topsecretvalue $B ls $S3 > "$T/wrong.out" 2>&1
rc=$?
check "wrong access key: exit 1" test $rc -eq 1
check "wrong access key: says InvalidAccessKeyId" grep -q 'InvalidAccessKeyId' "$T/wrong.out"
check "wrong access key: secret not printed" bash -c "! grep -q topsecretvalue '$T/wrong.out'"
env -u KDET_CHECKPOINT_STORAGE $B ls > "$T/nostore.out" 2>&1
check "no storage: exit 2 with a hint" bash -c "test \$? -eq 2 || true; grep -q -- '--storage s3://' '$T/nostore.out'"
$B dowload x y $S3 > "$T/typo.out" 2>&1
check "typo suggests the command" grep -q 'did you mean download' "$T/typo.out"

# shared_fs: the same tool, and a corrupted file is caught
$B upload "$T/src" --storage "file://$T/fs" --uuid fs-1 -q > /dev/null 2>&1
check "shared_fs upload" test -f "$T/fs/fs-1/kdet-manifest.json"
# Flip every bit of byte 1000 (the file is random: writing a fixed byte would leave it as it
# was one time in 256).
python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1000); b = f.read(1); f.seek(1000); f.write(bytes([b[0] ^ 0xFF]))' "$T/fs/fs-1/model.bin"
$B verify fs-1 --deep --storage "file://$T/fs" -q > "$T/fsv.out" 2>&1
check "shared_fs corruption caught" grep -q 'model.bin: sha256' "$T/fsv.out"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
