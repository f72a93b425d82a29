#!/usr/bin/env bash
# make fuzz FUZZ_TIME=... / FUZZ_CPU=...: run each libFuzzer target for
# that long.
#
#   mk/fuzz.sh FUZZ_DIR TIME 'NAME|DICT|CORPUS_DIR ...' ...
#
# TIME is seconds, or a number with s, m or h (60s, 10m, 1h). By default
# it is wall time (libFuzzer's -max_total_time). With FUZZ_CLOCK=cpu it is
# the target's own CPU time (user + system, from /proc): the target runs
# until it has used that much and is then interrupted, so a run that
# shares the machine, is niced or is stopped (SIGSTOP) for a while still
# gets its full share. FUZZ_JOBS=N runs N targets at once (default 1).
#
# Each target starts from its folders in the tree plus its working corpus
# FUZZ_DIR/corpus/NAME (new inputs go there, not into the tree); its log
# is FUZZ_DIR/logs/NAME.log, what it finds goes to FUZZ_DIR/findings/NAME/.
# One line per target (wall and CPU seconds, runs, execs/s, coverage,
# corpus, peak RSS, findings; slow units apart) goes to the screen and to
# FUZZ_DIR/summary.txt; in cpu mode a progress line every 10 minutes of
# CPU. Exits 1 when any target found something.
set -u
dir=$1
time=$2
shift 2
clock=${FUZZ_CLOCK:-wall}
jobs=${FUZZ_JOBS:-1}
case "$time" in
*h) secs=$((${time%h} * 3600)) ;;
*m) secs=$((${time%m} * 60)) ;;
*s) secs=${time%s} ;;
*) secs=$time ;;
esac
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
    echo "fuzz: time $time: give seconds or a number with s, m or h (60s, 10m, 1h)" >&2
    exit 2
fi
if [ "$clock" != wall ] && [ "$clock" != cpu ]; then
    echo "fuzz: FUZZ_CLOCK=$clock: wall or cpu" >&2
    exit 2
fi
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz: FUZZ_JOBS=$jobs: a number of targets to run at once, 1 or more" >&2
    exit 2
fi
mkdir -p "$dir/logs" "$dir/findings" "$dir/corpus"
summary="$dir/summary.txt"
tick=$(getconf CLK_TCK)

# cpu_secs PID: the process's user + system CPU seconds so far; fails once it is gone.
cpu_secs() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    # Fields after the command name, which may hold spaces: ") S ppid ..."; utime and stime
    # are fields 14 and 15 of the whole line, 12 and 13 after the ')'.
    set -- ${stat##*) }
    echo $(((${12} + ${13}) / tick))
}

# run_one SPEC: one target, for $secs of $clock; returns 1 when it found something.
run_one() {
    local name dict corpus
    IFS='|' read -r name dict corpus <<< "$1"
    local work="$dir/corpus/$name" art="$dir/findings/$name/" log="$dir/logs/$name.log"
    mkdir -p "$work" "$art"
    local max=$secs
    # In cpu mode the wall limit is only a backstop against a target that never gets the CPU,
    # and a unit is reported slow only past the timeout: libFuzzer times units by the wall
    # clock, so a pause (SIGSTOP) would make any unit look slow.
    # For the same reason a cpu-mode run takes a unit for hung only after two hours (a run
    # paused while a CI run or a benchmark has the machine would otherwise end in a timeout).
    local slow=10 timeout=300
    [ "$clock" = cpu ] && max=$((secs * 50)) && slow=300 && timeout=7200
    local args=(-max_total_time="$max" -timeout="$timeout" -rss_limit_mb=2560 -print_final_stats=1
                -report_slow_units="$slow" -artifact_prefix="$art")
    [ -n "$dict" ] && args+=(-dict="$dict")
    echo "== fuzz $name for ${secs}s of $clock time (log $log)"
    local start cpu=0 last_cpu=0 next=600 rc
    start=$(date +%s)
    # The tree's folders are read, never written: libFuzzer adds new inputs to the first one.
    # shellcheck disable=SC2086
    "$dir/$name" "${args[@]}" "$work" $corpus > "$log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 5
        # Gone meanwhile: keep the last reading.
        cpu=$(cpu_secs "$pid") || cpu=$last_cpu
        last_cpu=$cpu
        if [ "$clock" = cpu ] && [ "$cpu" -ge "$secs" ]; then
            kill -INT "$pid" 2>/dev/null
            break
        fi
        if [ "$clock" = cpu ] && [ "$cpu" -ge "$next" ]; then
            echo "   fuzz $name: ${cpu}s of ${secs}s CPU, $(($(date +%s) - start))s wall"
            next=$((next + 600))
        fi
    done
    wait "$pid"
    rc=$?
    # libFuzzer exits 72 when interrupted: that is how a cpu-mode run ends.
    [ "$clock" = cpu ] && [ "$rc" -eq 72 ] && [ "$cpu" -ge "$secs" ] && rc=0
    local wall=$(($(date +%s) - start))
    local runs eps rss corp cov nart nslow status=ok
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    eps=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    rss=$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    corp=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -nE 's/.*corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p')
    cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -nE 's/.*cov: ([0-9]+).*/\1/p')
    # Slow units are reported apart: they are not crashes, and a look at them decides.
    nart=$(find "$art" -type f ! -name 'slow-unit-*' | wc -l)
    nslow=$(find "$art" -type f -name 'slow-unit-*' | wc -l)
    if [ "$rc" -eq 72 ] && [ "$nart" -eq 0 ]; then
        # libFuzzer's exit on SIGINT before the time was up (someone stopped the run).
        status="interrupted (nothing found)"
    elif [ "$rc" -ne 0 ] || [ "$nart" -gt 0 ]; then
        status="FOUND (exit $rc, $nart file(s) in $art)"
        grep -m 3 -E 'ERROR|SUMMARY|abort|deadly' "$log" | sed 's/^/  | /'
    elif [ "$nslow" -gt 0 ]; then
        status="ok, $nslow slow unit(s) in $art"
    fi
    local line
    line=$(printf '%s %-22s %6ss cpu=%ss runs=%s exec/s=%s cov=%s corp=%s rss=%sMB %s' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name" "$wall" "$cpu" "${runs:-?}" "${eps:-?}" \
        "${cov:-?}" "${corp:-?}" "${rss:-?}" "$status")
    echo "$line"
    echo "$line" >> "$summary"
    [ "${status%%,*}" = ok ]
}

found=0
running=0
for spec in "$@"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || found=1
        running=$((running - 1))
    fi
    run_one "$spec" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || found=1
    running=$((running - 1))
done
exit $found
