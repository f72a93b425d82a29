#!/bin/sh
# fashion-mnist-c checkpoints on one rank: train N steps and checkpoint to
# shared_fs storage, restart from that checkpoint and train M more; the
# weights equal N+M steps trained straight, bit for bit. Also: the
# checkpoint has a manifest, a missing checkpoint is an error naming it,
# and a checkpoint of another width is refused.
set -u
pass=0 fail=0
B="$KD_BUILD/bin/fashion-mnist-c"
T=$(mktemp -d /tmp/fmnist-resume.XXXXXX)
S="{\"type\":\"shared_fs\",\"host_path\":\"$T/store\"}"
A="--train-limit 6400 --test-limit 500 --epochs 1 --quiet"
mkdir -p "$T/store"
export OPENBLAS_NUM_THREADS=1 TMPDIR="$T"
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; [ -f "$T/log" ] && sed 's/^/    /' "$T/log"; }

KDET_CHECKPOINT_STORAGE=$S timeout 60 "$B" $A --batches 20 > "$T/log" 2>&1
u=$(sed -n 's/^checkpoint \([^ ]*\) batches=20 .*/\1/p' "$T/log")
if [ -n "$u" ] && [ -f "$T/store/$u/kdet-manifest.json" ] && [ -f "$T/store/$u/state.bin" ]; then
    ok "checkpoint $u at 20 batches with its manifest"
else
    bad "no checkpoint at 20 batches"
fi
KDET_CHECKPOINT_STORAGE=$S KDET_LATEST_CHECKPOINT=$u timeout 60 "$B" $A --batches 35 \
    --save-weights "$T/resumed" > "$T/log" 2>&1
if [ $? -eq 0 ] && grep -q "restored checkpoint $u (batches=20)" "$T/log"; then
    ok "restored"
else
    bad "restore"
fi
timeout 60 "$B" $A --batches 35 --save-weights "$T/straight" > "$T/log" 2>&1 || bad "straight run"
if cmp -s "$T/resumed" "$T/straight" && [ -s "$T/straight" ]; then
    ok "20 + 15 steps from the checkpoint == 35 steps straight (bit-identical weights)"
else
    bad "weights differ after the resume"
fi
# The 20-step weights differ from the 35-step ones (the comparison can fail).
KDET_CHECKPOINT_STORAGE=$S KDET_LATEST_CHECKPOINT=$u timeout 60 "$B" $A --batches 20 \
    --save-weights "$T/twenty" > "$T/log" 2>&1
if ! cmp -s "$T/twenty" "$T/straight"; then ok "20-step weights differ"; else bad "20 == 35"; fi
KDET_CHECKPOINT_STORAGE=$S KDET_LATEST_CHECKPOINT=no-such-uuid timeout 60 "$B" $A --batches 5 \
    > "$T/log" 2>&1
if [ $? -eq 1 ] && grep -q "no-such-uuid" "$T/log"; then ok "missing checkpoint named"; else bad "missing checkpoint"; fi
KDET_CHECKPOINT_STORAGE=$S KDET_LATEST_CHECKPOINT=$u timeout 60 "$B" $A --batches 5 --hidden 64 \
    > "$T/log" 2>&1
if [ $? -eq 1 ] && grep -q "hidden_units 128, this trial has 64" "$T/log"; then
    ok "another width refused"
else
    bad "another width"
fi
left=$(find "$T" -maxdepth 1 -name 'fashion-mnist-c-*' | wc -l)
if [ "$left" -eq 0 ]; then ok "no temp dirs left"; else bad "$left temp dirs left"; fi
rm -rf "$T"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
