#!/bin/sh
# The PyTorch example trains: a short run of train.py (one process, then two
# ranks over gloo) reports validation metrics that beat chance.
set -u
cd "${KD_SRC:-.}"
py=/usr/bin/python3
pass=0 fail=0
if ! $py -c 'import torch' 2>/dev/null || [ ! -d /usr/share/datasets/fashion-mnist ]; then
    echo "skip: needs python3-torch and dataset-fashion-mnist"
    echo "1 passed, 0 failed"
    exit 0
fi
out=$(mktemp -d /tmp/kd-pt-XXXXXX)
trap 'rm -rf "$out"' EXIT

check() { # name file
    acc=$(sed -n 's/.*"type": "validation".*"accuracy": \([0-9.]*\).*/\1/p' "$2" | tail -1)
    if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }'; then
        echo "ok   $1 (accuracy $acc)"; pass=$((pass + 1))
    else
        echo "FAIL $1"; cat "$2"; fail=$((fail + 1))
    fi
}

echo "training 100 batches on one process..."
KDET_HPARAMS='{"hidden_units": 64, "learning_rate": 0.1}' KDET_TRIAL_SEED=1 \
    timeout 120 $py examples/pytorch-fashion-mnist/train.py --batches 100 --validate-every 100 \
    > "$out/one.txt" 2>&1
check "single process" "$out/one.txt"

echo "training 60 batches on two ranks (gloo)..."
port=$($py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 1 0; do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \
        KDET_HPARAMS='{"learning_rate": 0.1}' timeout 120 \
        $py examples/pytorch-fashion-mnist/train.py --batches 60 --validate-every 60 \
        > "$out/rank$r.txt" 2>&1 &
done
wait
check "two ranks" "$out/rank0.txt"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
