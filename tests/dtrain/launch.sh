#!/bin/sh
# examples/fashion-mnist-c and `dtrain check rendezvous` under kdet-launch
# --nproc 2: the launcher's env contract is what libdtrain reads, output
# lines carry the rank prefix, and the weights stay identical on both ranks;
# a worker killed while the others block in allreduce ends the whole job.
set -u
pass=0 fail=0
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
log=$(mktemp /tmp/dtrain-launch.XXXXXX)
check() { # name pattern
    if grep -q -- "$2" "$log"; then pass=$((pass + 1)); echo "ok: $1";
    else fail=$((fail + 1)); echo "FAIL: $1 (no '$2' in output)"; sed 's/^/    /' "$log"; fi
}
KDET_MASTER_PORT=$(port) KDET_RUN_ID=launch-test-1 KDET_TOKEN=launch-secret-token \
    timeout 120 "$KD_BUILD/bin/kdet-launch" --nproc 2 "$KD_BUILD/bin/dtrain" check rendezvous > "$log" 2>&1
echo "kdet-launch dtrain check rendezvous: exit $?"
check "rank 0 joined" "\[rank=0\] rendezvous ok: rank 0 of 2"
check "rank 1 joined" "\[rank=1\] rendezvous ok: rank 1 of 2"
check "allreduce" "\[rank=1\] allreduce ok: sum of rank+1 over 2 ranks = 3"
if grep -q launch-secret-token "$log"; then fail=$((fail + 1)); echo "FAIL: token printed"; else pass=$((pass + 1)); fi
KDET_MASTER_PORT=$(port) KDET_RUN_ID=launch-test-2 KDET_HPARAMS='{"global_batch_size": 64}' OPENBLAS_NUM_THREADS=1 \
    timeout 120 "$KD_BUILD/bin/kdet-launch" --nproc 2 "$KD_BUILD/bin/fashion-mnist-c" \
    --train-limit 6400 --test-limit 1000 --epochs 1 --batches 40 --check-sync --quiet > "$log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: kdet-launch exit $rc"; fi
check "weights in sync" "\[rank=0\] weights identical on all 2 ranks after every step"
check "accuracy reported" "\[rank=0\] epoch 1: train_loss="
# Fail fast: rank 1's worker is killed in the middle of a long allreduce run
# while ranks 0 and 2 block in the same collective. The job must end well
# within the grace period with rank 1's exit code, leaving no worker behind.
KDET_MASTER_PORT=$(port) KDET_RUN_ID=launch-test-3 \
    timeout 120 "$KD_BUILD/bin/kdet-launch" --nproc 3 --grace-period 20 -- sh -c '
        if [ "$RANK" = 1 ]; then
            "$0" bench allreduce --size 8M --iters 1000000 & w=$!
            sleep 2; kill -9 $w; wait $w; exit 9
        fi
        exec "$0" bench allreduce --size 8M --iters 1000000' "$KD_BUILD/bin/dtrain" > "$log" 2>&1 &
lp=$!
start=$(date +%s)
wait $lp
rc=$?
secs=$(($(date +%s) - start))
if [ $rc -eq 9 ]; then pass=$((pass + 1)); echo "ok: fail-fast exit code 9 (rank 1's)";
else fail=$((fail + 1)); echo "FAIL: fail-fast exit $rc, expected 9"; sed 's/^/    /' "$log"; fi
# 2 s of training before the kill; the rest must be far below the 20 s grace.
if [ $secs -le 12 ]; then pass=$((pass + 1)); echo "ok: fail-fast ended in ${secs}s";
else fail=$((fail + 1)); echo "FAIL: fail-fast took ${secs}s (grace period 20 s)"; fi
if pgrep -f "launch-test-3|bench allreduce --size 8M --iters 1000000" > /dev/null; then
    fail=$((fail + 1)); echo "FAIL: workers left after fail-fast"; pkill -9 -f "bench allreduce --size 8M --iters 1000000"
else pass=$((pass + 1)); echo "ok: no worker left"; fi
rm -f "$log"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
