#!/usr/bin/env bash
# make fuzz FUZZ_TIME=...: run each libFuzzer target, one after the other,
# for that long.
#
#   mk/fuzz.sh FUZZ_DIR TIME 'NAME|DICT|CORPUS_DIR ...' ...
#
# TIME is seconds, or a number with s, m or h (60s, 10m, 1h). Each target
# starts from its folders in the tree plus its working corpus
# FUZZ_DIR/corpus/NAME (new inputs go there, not into the tree); its log
# is FUZZ_DIR/logs/NAME.log, what it finds goes to FUZZ_DIR/findings/NAME/.
# One line per target (runs, execs/s, corpus, peak RSS, findings) goes to
# the screen and to FUZZ_DIR/summary.txt. Exits 1 when any target found
# something. One target at a time, one process each.
set -u
dir=$1
time=$2
shift 2
case "$time" in
*h) secs=$((${time%h} * 3600)) ;;
*m) secs=$((${time%m} * 60)) ;;
*s) secs=${time%s} ;;
*) secs=$time ;;
esac
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
    echo "fuzz: FUZZ_TIME=$time: give seconds or a number with s, m or h (60s, 10m, 1h)" >&2
    exit 2
fi
mkdir -p "$dir/logs" "$dir/findings" "$dir/corpus"
summary="$dir/summary.txt"
found=0
for spec in "$@"; do
    IFS='|' read -r name dict corpus <<< "$spec"
    work="$dir/corpus/$name"
    art="$dir/findings/$name/"
    log="$dir/logs/$name.log"
    mkdir -p "$work" "$art"
    args=(-max_total_time="$secs" -timeout=300 -rss_limit_mb=2560 -print_final_stats=1
          -artifact_prefix="$art")
    [ -n "$dict" ] && args+=(-dict="$dict")
    echo "== fuzz $name for ${secs}s (log $log)"
    start=$(date +%s)
    # The tree's folders are read, never written: libFuzzer adds new inputs to the first one.
    # shellcheck disable=SC2086
    "$dir/$name" "${args[@]}" "$work" $corpus > "$log" 2>&1
    rc=$?
    wall=$(($(date +%s) - start))
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    eps=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    rss=$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    corp=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -nE 's/.*corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p')
    cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -nE 's/.*cov: ([0-9]+).*/\1/p')
    nart=$(find "$art" -type f | wc -l)
    status=ok
    if [ $rc -ne 0 ] || [ "$nart" -gt 0 ]; then
        status="FOUND (exit $rc, $nart file(s) in $art)"
        found=1
        grep -m 3 -E 'ERROR|SUMMARY|abort|deadly' "$log" | sed 's/^/  | /'
    fi
    line=$(printf '%s %-22s %6ss runs=%s exec/s=%s cov=%s corp=%s rss=%sMB %s' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name" "$wall" "${runs:-?}" "${eps:-?}" "${cov:-?}" \
        "${corp:-?}" "${rss:-?}" "$status")
    echo "$line"
    echo "$line" >> "$summary"
done
exit $found
