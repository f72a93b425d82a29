#!/usr/bin/env bash
# Checkpoint storage throughput, side by side in one run on one s3rver:
#   1 GiB checkpoint (4 files) and 10,000 x 4 KiB files,
#   upload and download with kdet (dtrain ckpt), aws s3 cp --recursive
#   (Debian's awscli) and rclone copy (Debian's rclone), all at their
#   default concurrency; then shared_fs against cp -r + sync.
# Prints MB/s for each, the ratio kdet / best anchor, and the s3rver
# process's CPU use: as a share of one core while the transfer ran (near
# 100% = the server is the limit), and as CPU milliseconds per MB moved,
# which compares clients that take different times.
# Env: BENCH_SMALL_FILES (default 10000), BENCH_BIG_MIB (default 1024),
# BENCH_BIG_FILES (default 4; 1 sends one file in parts with every tool),
# BENCH_SETS (default "big small"), BENCH_DIRS (default "up down fs"):
# e.g. BENCH_SETS=big BENCH_DIRS=up runs only the 1 GiB upload.
set -u
KD_BUILD=${KD_BUILD:?run through make bench}
KD_SRC=${KD_SRC:?}
DTRAIN=$KD_BUILD/bin/dtrain
CKPT="$DTRAIN ckpt"
S3RVER=$KD_SRC/.deps/s3rver/node_modules/.bin/s3rver
AWS=/usr/bin/aws
NFILES=${BENCH_SMALL_FILES:-10000}
BIG_MIB=${BENCH_BIG_MIB:-1024}
BIG_FILES=${BENCH_BIG_FILES:-4}
SETS=${BENCH_SETS:-big small}
DIRS=${BENCH_DIRS:-up down fs}
want() { case " $DIRS " in *" $1 "*) return 0 ;; esac; return 1; }

for t in "$DTRAIN" "$S3RVER" "$AWS" "$(command -v rclone)"; do
    if [ ! -x "$t" ]; then
        echo "bench storage: missing $t (make deps; make)" >&2
        exit 1
    fi
done
W=$(mktemp -d "${TMPDIR:-/tmp}/kd-bench-storage-XXXXXX")
srv=
cleanup() {
    [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
trap "exit 1" INT TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$W/s3" "$W/big" "$W/small"
NODE_OPTIONS=--openssl-legacy-provider "$S3RVER" -d "$W/s3" -a 127.0.0.1 -p "$port" --silent \
    --configure-bucket bench > "$W/s3rver.log" 2>&1 &
srv=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

echo "preparing data for: $SETS" >&2
if [[ " $SETS " == *" big "* ]]; then
    for i in $(seq "$BIG_FILES"); do
        head -c $((BIG_MIB * 1024 * 1024 / BIG_FILES)) /dev/urandom > "$W/big/shard-$i.bin"
    done
fi
if [[ " $SETS " == *" small "* ]]; then
    python3 - "$W/small" "$NFILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    sub = os.path.join(d, "d%02d" % (i % 100))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%05d" % i), "wb") as f:
        f.write(os.urandom(4096))
PY
fi
sync

export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true AWS_PAGER=""
export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Other
export RCLONE_CONFIG_BENCH_ENDPOINT=http://127.0.0.1:$port RCLONE_CONFIG_BENCH_REGION=us-east-1
export RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=S3RVER RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=S3RVER
export RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true RCLONE_CONFIG=/dev/null
unset AWS_CA_BUNDLE # rclone refuses a CA bundle on a plain-http endpoint
EP=http://127.0.0.1:$port

srv_cpu() { awk '{ print $14 + $15 }' "/proc/$srv/stat"; }
TICK=$(getconf CLK_TCK)
# run NAME BYTES CMD...: time one transfer; prints "MB/s server-cpu% server-cpu-ms/MB"
run() {
    local name=$1 bytes=$2 t0 t1 c0 c1
    shift 2
    c0=$(srv_cpu)
    t0=$(date +%s.%N)
    if ! "$@" > "$W/$name.log" 2>&1; then
        echo "bench storage: $name failed:" >&2
        tail -5 "$W/$name.log" >&2
        echo "0 0 0"
        return
    fi
    t1=$(date +%s.%N)
    c1=$(srv_cpu)
    awk -v b="$bytes" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v hz="$TICK" \
        'BEGIN { s = t1 - t0; c = (c1 - c0) / hz
                printf "%.1f %.0f %.2f\n", b / 1e6 / s, 100 * c / s, 1000 * c / (b / 1e6) }'
    echo "  $name: $(awk -v t0="$t0" -v t1="$t1" 'BEGIN{printf "%.2f", t1-t0}') s" >&2
}
fresh() { rm -rf "$W/out"; mkdir -p "$W/out"; sync; }

BIG_BYTES=$((BIG_MIB * 1024 * 1024 / BIG_FILES * BIG_FILES))
SMALL_BYTES=$((NFILES * 4096))
declare -A R
for set in $SETS; do
    bytes=$BIG_BYTES
    [ $set = small ] && bytes=$SMALL_BYTES
    if want up; then
        echo "== $set: upload" >&2
        R[kdet,$set,up]=$(run kdet-$set-up $bytes $CKPT upload "$W/$set" --uuid kdet-$set \
            --storage "s3://bench/k" --endpoint-url "$EP" -q)
        R[aws,$set,up]=$(run aws-$set-up $bytes "$AWS" s3 cp --recursive --only-show-errors \
            --endpoint-url "$EP" "$W/$set" "s3://bench/a/$set")
        R[rclone,$set,up]=$(run rclone-$set-up $bytes rclone copy "$W/$set" "bench:bench/r/$set")
    fi
    if want down; then # needs the uploads above
        echo "== $set: download" >&2
        fresh
        R[kdet,$set,down]=$(run kdet-$set-down $bytes $CKPT download kdet-$set "$W/out/k" \
            --storage "s3://bench/k" --endpoint-url "$EP" -q)
        fresh
        R[aws,$set,down]=$(run aws-$set-down $bytes "$AWS" s3 cp --recursive --only-show-errors \
            --endpoint-url "$EP" "s3://bench/a/$set" "$W/out/a")
        fresh
        R[rclone,$set,down]=$(run rclone-$set-down $bytes rclone copy "bench:bench/r/$set" "$W/out/r")
    fi
    if want fs; then
        echo "== $set: shared_fs" >&2
        rm -rf "$W/fs" "$W/cp"; mkdir -p "$W/fs"; sync
        R[kdet,$set,fsup]=$(run kdet-$set-fsup $bytes $CKPT upload "$W/$set" --uuid f \
            --storage "file://$W/fs" -q)
        R[cp,$set,fsup]=$(run cp-$set-fsup $bytes sh -c "cp -r '$W/$set' '$W/cp' && sync")
        fresh
        R[kdet,$set,fsdown]=$(run kdet-$set-fsdown $bytes sh -c "$CKPT download f '$W/out/k' \
            --storage 'file://$W/fs' -q && sync")
        fresh
        R[cp,$set,fsdown]=$(run cp-$set-fsdown $bytes sh -c "cp -r '$W/cp' '$W/out/c' && sync")
        rm -rf "$W/fs" "$W/cp" "$W/out"
    fi
done

mb() { echo "${1%% *}"; }
cpu() { local x=${1#* }; echo "${x%% *}"; }
cpumb() { echo "${1##* }"; }
printf '\n%-26s %9s %9s %9s %9s   %s\n' "MB/s" kdet aws rclone "kdet/best" \
    "s3rver CPU % and ms/MB: kdet / aws / rclone"
for set in $SETS; do
    for dir in up down; do
        want "$dir" || continue
        k=${R[kdet,$set,$dir]} a=${R[aws,$set,$dir]} r=${R[rclone,$set,$dir]}
        label="1 GiB $dir"
        [ $set = small ] && label="$NFILES x 4 KiB $dir"
        [ $set = big ] && [ "$BIG_MIB" != 1024 ] && label="$BIG_MIB MiB $dir"
        [ $set = big ] && [ "$BIG_FILES" != 4 ] && label="$label ($BIG_FILES files)"
        awk -v l="$label" -v k="$(mb "$k")" -v a="$(mb "$a")" -v r="$(mb "$r")" \
            -v kc="$(cpu "$k")" -v ac="$(cpu "$a")" -v rc="$(cpu "$r")" \
            -v km="$(cpumb "$k")" -v am="$(cpumb "$a")" -v rm="$(cpumb "$r")" 'BEGIN {
                best = a > r ? a : r
                printf "%-26s %9.1f %9.1f %9.1f %8.2fx   %s%%/%s%%/%s%%, %s/%s/%s ms/MB\n", l,
                       k, a, r, (best > 0 ? k / best : 0), kc, ac, rc, km, am, rm }'
    done
done
if want fs; then
    printf '\n%-26s %9s %9s %9s\n' "shared_fs MB/s" kdet "cp+sync" "kdet/cp"
    for set in $SETS; do
        for dir in fsup fsdown; do
            k=${R[kdet,$set,$dir]} c=${R[cp,$set,$dir]}
            label="1 GiB"
            [ $set = small ] && label="$NFILES x 4 KiB"
            [ $dir = fsup ] && label="$label save" || label="$label restore"
            awk -v l="$label" -v k="$(mb "$k")" -v c="$(mb "$c")" 'BEGIN {
                printf "%-26s %9.1f %9.1f %8.2fx\n", l, k, c, (c > 0 ? k / c : 0) }'
        done
    done
fi
echo "(kdet hashes every file (sha256) and writes a manifest; restores verify every hash;"
echo " the anchors do neither. shared_fs rows include a sync on both sides, which flushes"
echo " the whole file system: other writers on the machine add noise. Page cache warm; one run.)"
