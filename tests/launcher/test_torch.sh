#!/usr/bin/env bash
# Real PyTorch (Debian's python3-torch, CPU, gloo) under kdet-launch: a
# two-process all_reduce through the env:// variables kdet-launch sets, and
# the same through the torch_distributed form (the real torchrun). Skips
# when /usr/bin/python3 has no torch.
set -u
B="$KD_BUILD/bin"
PY=/usr/bin/python3
T=$(mktemp -d /tmp/kd-launch-torch.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
if ! "$PY" -c 'import torch.distributed.run' 2> /dev/null || ! command -v torchrun > /dev/null; then
    echo "skip: $PY has no torch.distributed (install python3-torch)"
    echo "0 passed, 0 failed"
    exit 0
fi
free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
result() { # NAME: count, and show the output when it failed
    # torchrun --tee puts its own "[default0]:" in front of our prefix.
    if [ "$RC" = 0 ] && grep -qE '^(\[default0\]:)?\[rank=0\] allreduce sum=3.0 world=2 local_rank=0$' "$T/out" &&
        grep -qE '^(\[default1\]:)?\[rank=1\] allreduce sum=3.0 world=2 local_rank=1$' "$T/out"; then
        pass=$((pass + 1))
        echo "ok   $1"
    else
        fail=$((fail + 1))
        echo "FAIL $1 (exit $RC)"
        cat "$T/out"
        tail -n 30 "$T/err"
    fi
}
script="$KD_SRC/tests/launcher/data/allreduce.py"

KDET_MASTER_PORT=$(free_port) "$B/kdet-launch" --nproc 2 "$PY" "$script" > "$T/out" 2> "$T/err"
RC=$?
result "kdet-launch env:// gloo all_reduce"

# torch 1.13 on Python 3.11 (Debian 12) cannot parse its own default
# --redirects/--tee value "0" (IntFlag iteration skips NONE); give values it
# can parse as overrides, which also shows that overrides pass through.
overrides=()
if [ "$("$PY" -c 'from torch.distributed.elastic.multiprocessing.api import Std
print(Std.from_str("0") is None)')" = True ]; then
    overrides=(--redirects 1 --tee 1)
fi
KDET_MASTER_PORT=$(free_port) "$B/kdet-launch" --nproc 2 torch_distributed "${overrides[@]}" -- \
    "$PY" "$script" > "$T/out" 2> "$T/err"
RC=$?
result "torch_distributed form through torchrun"

# Without overrides: kdet-launch sets PET_REDIRECTS/PET_TEE to values torchrun
# parses on every Python, so the form works as a Determined config writes it.
KDET_MASTER_PORT=$(free_port) "$B/kdet-launch" --nproc 2 torch_distributed -- \
    "$PY" "$script" > "$T/out" 2> "$T/err"
RC=$?
result "torch_distributed form without overrides (PET_REDIRECTS/PET_TEE set by kdet-launch)"

left=$(pgrep -f "$script")
if [ -n "$left" ]; then
    echo "FAIL processes left: $left"
    kill -KILL $left
    fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
