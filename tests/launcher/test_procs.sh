#!/usr/bin/env bash
# kdet-launch and wrap_rank end to end: exit codes, the env contract, slot
# detection, fail-fast timing, signal forwarding, rank-prefixed output under
# heavy concurrent writes, and the upstream launcher forms (with recording
# torchrun/deepspeed/horovodrun stand-ins on PATH). Every launcher runs in a
# session of its own; each case ends by checking that no process of that
# session is left.
set -u
B="$KD_BUILD/bin"
T=$(mktemp -d /tmp/kd-launch-test.XXXXXX)
pass=0
fail=0
LPID=
SESSIONS=""
cleanup() {
    local s
    s=$(strays)
    [ -n "$s" ] && kill -KILL $(printf '%s\n' "$s" | awk '{ print $2 }') 2> /dev/null
    rm -rf "$T"
}
trap cleanup EXIT

say() { printf '%s\n' "$*"; }

# start CMD...: run CMD in a new session in the background; out/err to files.
start() {
    rm -f "$T"/ready.* "$T"/out "$T"/err
    setsid "$@" > "$T/out" 2> "$T/err" < /dev/null &
    LPID=$!
    SESSIONS="$SESSIONS $LPID"
    T0=$(date +%s%N)
}
# finish: wait for the launcher; RC and MS (elapsed milliseconds).
finish() {
    wait "$LPID"
    RC=$?
    MS=$((($(date +%s%N) - T0) / 1000000))
}
run() {
    start "$@"
    finish
}
# wait_ready N: until N workers have touched $T/ready.*.
wait_ready() {
    local i=0
    while [ "$(find "$T" -maxdepth 1 -name 'ready.*' | wc -l)" -lt "$1" ]; do
        sleep 0.05
        i=$((i + 1))
        [ $i -gt 300 ] && return 1
    done
    return 0
}
# The live (non-zombie) processes of the sessions this case started.
strays() {
    ps -eo sid=,pid=,stat=,args= | awk -v s="$SESSIONS" '
        BEGIN { n = split(s, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
        ($1 in want) && $3 !~ /^Z/'
}
# no_strays: nothing of the session may remain (1 s for SIGKILLs to land).
no_strays() {
    local i s
    for i in $(seq 20); do
        s=$(strays)
        [ -z "$s" ] && return 0
        sleep 0.05
    done
    say "  left over: $s"
    kill -KILL $(printf '%s\n' "$s" | awk '{ print $2 }') 2> /dev/null
    return 1
}
check() { # check DESCRIPTION CONDITION...
    local what=$1
    shift
    if ! "$@"; then
        say "  not true: $what"
        say "  --- stdout (head)"; head -n 20 "$T/out" | cut -c 1-300
        say "  --- stderr (head)"; head -n 30 "$T/err" | cut -c 1-300
        return 1
    fi
}
t() { # t NAME: run test_NAME, count it
    SESSIONS=""
    if "test_$1" && no_strays; then
        pass=$((pass + 1))
        say "ok   $1"
    else
        fail=$((fail + 1))
        say "FAIL $1"
    fi
}
has() { grep -qF -- "$2" "$1"; }
lacks() { ! grep -qF -- "$2" "$1"; }

test_all_zero() {
    run "$B/kdet-launch" --nproc 3 true
    check "exit 0" [ "$RC" = 0 ] &&
        check "3 workers exited" [ "$(grep -c 'msg="worker exited"' "$T/err")" = 3 ] &&
        check "finished line" has "$T/err" 'msg="launch finished" exit_code=0 workers=3' &&
        no_strays
}

test_one_fails_3() {
    run "$B/kdet-launch" --nproc 3 sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 1000'
    check "exit 3, got $RC" [ "$RC" = 3 ] &&
        check "fast ($MS ms)" [ "$MS" -lt 5000 ] &&
        check "first failure named" has "$T/err" 'reason=worker-failed first_failed_rank=1' &&
        check "failure logged" has "$T/err" 'msg="worker failed" rank=1' &&
        no_strays
}

test_sigkill_137() {
    run "$B/kdet-launch" --nproc 2 sh -c 'if [ "$RANK" = 0 ]; then kill -KILL $$; fi; exec sleep 1000'
    check "exit 137, got $RC" [ "$RC" = 137 ] &&
        check "signal named" has "$T/err" 'exit_code=137 signal=SIGKILL first_failure=true' &&
        no_strays
}

test_env_contract() {
    KDET_NODE_RANK=1 KDET_NUM_NODES=2 KDET_CHIEF_ADDR=10.1.2.3 KDET_MASTER_PORT=29555 \
        KDET_TRIAL_ID=17 KDET_EXPERIMENT=exp-4 KDET_CONTROLLER_URL=http://ctl:8080 \
        KDET_TOKEN=tok-SECRET-0123456789 KDET_HPARAMS='{"lr":0.1}' KDET_TRIAL_SEED=77 \
        RANK=999 run "$B/kdet-launch" --nproc 3 sh -c 'env > "$0/env.$LOCAL_RANK"' "$T"
    check "exit 0" [ "$RC" = 0 ] || return 1
    local l rid=""
    for l in 0 1 2; do
        local f="$T/env.$l" r=$((3 + l))
        check "rank $r env" grep -qx "RANK=$r" "$f" &&
            check "local rank" grep -qx "LOCAL_RANK=$l" "$f" &&
            check "one RANK" [ "$(grep -c '^RANK=' "$f")" = 1 ] &&
            check "world" grep -qx "WORLD_SIZE=6" "$f" &&
            check "local world" grep -qx "LOCAL_WORLD_SIZE=3" "$f" &&
            check "group rank" grep -qx "GROUP_RANK=1" "$f" &&
            check "master addr" grep -qx "MASTER_ADDR=10.1.2.3" "$f" &&
            check "master port" grep -qx "MASTER_PORT=29555" "$f" &&
            check "node rank" grep -qx "KDET_NODE_RANK=1" "$f" &&
            check "num nodes" grep -qx "KDET_NUM_NODES=2" "$f" &&
            check "chief" grep -qx "KDET_CHIEF_ADDR=10.1.2.3" "$f" &&
            check "trial" grep -qx "KDET_TRIAL_ID=17" "$f" &&
            check "experiment" grep -qx "KDET_EXPERIMENT=exp-4" "$f" &&
            check "controller" grep -qx "KDET_CONTROLLER_URL=http://ctl:8080" "$f" &&
            check "token passed" grep -qx "KDET_TOKEN=tok-SECRET-0123456789" "$f" &&
            check "hparams" grep -qx 'KDET_HPARAMS={"lr":0.1}' "$f" &&
            check "seed" grep -qx "KDET_TRIAL_SEED=77" "$f" &&
            check "grace" grep -qx "KDET_GRACE_PERIOD=10" "$f" || return 1
        local id
        id=$(sed -n 's/^KDET_RUN_ID=//p' "$f")
        check "run id generated ($id)" grep -qxE '[0-9a-f]{16}' <<< "$id" || return 1
        [ -z "$rid" ] && rid=$id
        check "same run id on every rank" [ "$id" = "$rid" ] || return 1
    done
    check "token never logged" lacks "$T/err" "tok-SECRET" &&
        check "run id logged" has "$T/err" "run_id=$rid run_id_generated=true" &&
        no_strays
}

test_cuda_nproc() {
    CUDA_VISIBLE_DEVICES=0,1,2,3 run "$B/kdet-launch" sh -c \
        'echo "$CUDA_VISIBLE_DEVICES" > "$0/env.$LOCAL_RANK"' "$T"
    check "exit 0" [ "$RC" = 0 ] &&
        check "4 workers" [ "$(find "$T" -name 'env.*' | wc -l)" = 4 ] &&
        check "all devices visible to each worker" [ "$(cat "$T"/env.* | sort -u)" = 0,1,2,3 ] &&
        check "source logged" has "$T/err" "nproc=4 nproc_source=CUDA_VISIBLE_DEVICES" &&
        no_strays || return 1
    rm -f "$T"/env.*
    CUDA_VISIBLE_DEVICES= run "$B/kdet-launch" sh -c 'touch "$0/env.$LOCAL_RANK"' "$T"
    check "empty CUDA_VISIBLE_DEVICES: one worker" [ "$(find "$T" -name 'env.*' | wc -l)" = 1 ] &&
        no_strays
}

test_fail_fast_timing() {
    # Rank 2 fails while the others block; the default grace period is 10 s.
    start "$B/kdet-launch" --nproc 4 sh -c \
        'touch "$0/ready.$RANK"; if [ "$RANK" = 2 ]; then sleep 0.3; exit 1; fi; exec sleep 1000' "$T"
    finish
    check "exit 1, got $RC" [ "$RC" = 1 ] &&
        check "ended in $MS ms, well within the grace period" [ "$MS" -lt 3000 ] &&
        check "first failure is rank 2" has "$T/err" "first_failed_rank=2 killed=false" &&
        check "others stopped" [ "$(grep -c 'msg="worker stopped"' "$T/err")" = 3 ] &&
        no_strays
}

test_sigkill_after_grace() {
    # Rank 1 ignores SIGTERM: it is SIGKILLed when the 2 s grace period ends.
    start "$B/kdet-launch" --nproc 2 --grace-period 2 sh -c \
        'if [ "$RANK" = 0 ]; then sleep 0.3; exit 1; fi; trap "" TERM; exec sleep 1000'
    finish
    check "exit 1, got $RC" [ "$RC" = 1 ] &&
        check "waited the grace period ($MS ms)" [ "$MS" -ge 2200 ] &&
        check "then killed ($MS ms)" [ "$MS" -lt 5000 ] &&
        check "kill logged" has "$T/err" 'msg="killing workers" reason=grace-period-over ranks=1' &&
        check "result" has "$T/err" "first_failed_rank=0 killed=true" &&
        no_strays
}

test_sigterm_forwarded() {
    start "$B/kdet-launch" --nproc 2 sh -c \
        'trap "echo got-TERM; exit 0" TERM; touch "$0/ready.$RANK"; sleep 1000 & wait' "$T"
    wait_ready 2 || { say "  workers not ready"; return 1; }
    kill -TERM "$LPID"
    finish
    check "exit 143, got $RC" [ "$RC" = 143 ] &&
        check "rank 0 saw it" has "$T/out" "[rank=0] got-TERM" &&
        check "rank 1 saw it" has "$T/out" "[rank=1] got-TERM" &&
        check "logged" has "$T/err" 'reason=signal signal=SIGTERM killed=false' &&
        no_strays || return 1
    # SIGINT: 130; a worker that ignores it is killed after the grace period.
    start "$B/kdet-launch" --nproc 2 --grace-period 1 sh -c \
        'trap "" INT; touch "$0/ready.$RANK"; exec sleep 1000' "$T"
    wait_ready 2 || { say "  workers not ready"; return 1; }
    kill -INT "$LPID"
    finish
    check "exit 130, got $RC" [ "$RC" = 130 ] &&
        check "killed after 1 s ($MS ms)" has "$T/err" "killed=true" &&
        no_strays || return 1
    # A second SIGTERM kills at once.
    start "$B/kdet-launch" --nproc 1 --grace-period 60 sh -c \
        'trap "" TERM; touch "$0/ready.$RANK"; exec sleep 1000' "$T"
    wait_ready 1 || { say "  workers not ready"; return 1; }
    kill -TERM "$LPID"
    sleep 0.3
    kill -TERM "$LPID"
    finish
    check "exit 143, got $RC" [ "$RC" = 143 ] &&
        check "fast ($MS ms)" [ "$MS" -lt 5000 ] &&
        check "second signal kills" has "$T/err" "reason=second-signal" &&
        no_strays
}

test_launcher_killed() {
    # A SIGKILLed launcher takes its workers along (parent-death signal).
    start "$B/kdet-launch" --nproc 3 sh -c 'touch "$0/ready.$RANK"; exec sleep 1000' "$T"
    wait_ready 3 || { say "  workers not ready"; return 1; }
    kill -KILL "$LPID"
    finish
    check "killed" [ "$RC" = 137 ] && no_strays
}

test_no_interleaving() {
    # 4 ranks write 300 lines of 10000 bytes (more than PIPE_BUF) to stdout
    # and to stderr at the same time, plus lines longer than the 64 KiB cap.
    local w='r=$RANK; awk -v r=$r '\''BEGIN { s = "x"; while (length(s) < 10000) s = s s; s = substr(s, 1, 10000);
        for (i = 0; i < 300; i++) { print r, i, s; print r, i, s > "/dev/stderr" } }'\''
        if [ "$r" = 3 ]; then awk '\''BEGIN { s = "y"; while (length(s) < 200000) s = s s; print substr(s, 1, 200000) }'\''; fi'
    run "$B/kdet-launch" --nproc 4 sh -c "$w"
    check "exit 0" [ "$RC" = 0 ] || return 1
    local f
    for f in out err; do
        local res
        res=$(awk -v stream=$f '
            /^\[rank=[0-3]\] [0-3] [0-9]+ x+$/ {
                split($0, a, " "); r = substr(a[1], 7, 1)
                if (a[2] != r || length(a[4]) != 10000 || a[3] != next_i[r] + 0) { print "bad line " NR; exit }
                next_i[r]++; n++; next }
            stream == "out" && /^\[rank=3\] y+$/ { long[++nl] = length($0) - 9; next }
            stream == "err" && /^ts=[^ ]+ level=[a-z]+ comp=kdet-launch msg=/ { next }
            { print "garbled line " NR ": " substr($0, 1, 60); exit }
            END { if (n != 1200) print "lines: " n
                  if (stream == "out" && (nl != 4 || long[1] != 65536 || long[2] != 65536 ||
                      long[3] != 65536 || long[4] != 3392)) print "long line pieces: " nl }' "$T/$f")
        check "$f: every line whole, prefixed and in order ${res:+($res)}" [ -z "$res" ] || return 1
    done
    no_strays
}

test_partial_and_streams() {
    run "$B/kdet-launch" --nproc 2 sh -c 'echo to-out; echo to-err >&2; printf "no newline"'
    check "exit 0" [ "$RC" = 0 ] &&
        check "stdout line" grep -qx "\[rank=1\] to-out" "$T/out" &&
        check "stderr line" grep -qx "\[rank=1\] to-err" "$T/err" &&
        check "no stderr in stdout" lacks "$T/out" "to-err" &&
        check "no stdout in stderr" [ "$(grep -c '^\[rank=.\] to-out' "$T/err")" = 0 ] &&
        check "partial line flushed" grep -qx "\[rank=0\] no newline" "$T/out" &&
        check "4 stdout lines" [ "$(wc -l < "$T/out")" = 4 ] &&
        no_strays
}

test_leftovers() {
    # A worker exits 0 but leaves a process that holds its stdout open: the
    # launcher ends it after the 1 s drain period and exits 0.
    run "$B/kdet-launch" --nproc 2 sh -c 'sleep 1000 & echo started'
    check "exit 0, got $RC" [ "$RC" = 0 ] &&
        check "drained within 1-4 s ($MS ms)" test "$MS" -ge 900 -a "$MS" -lt 4000 &&
        check "output" [ "$(grep -c 'started$' "$T/out")" = 2 ] &&
        no_strays
}

test_stdin_is_null() {
    run "$B/kdet-launch" --nproc 1 sh -c 'if read x; then echo "read: $x"; else echo eof; fi'
    check "exit 0" [ "$RC" = 0 ] && check "eof" has "$T/out" "[rank=0] eof" && no_strays
}

test_usage_errors() {
    run "$B/kdet-launch" --nproc 2
    check "no command: 2" [ "$RC" = 2 ] && check "says so" has "$T/err" "no command" || return 1
    run "$B/kdet-launch" --nrpoc 2 true
    check "typo: 2" [ "$RC" = 2 ] && check "suggests" has "$T/err" "did you mean --nproc?" || return 1
    KDET_NUM_NODES=two run "$B/kdet-launch" true
    check "bad env: 2" [ "$RC" = 2 ] && check "names it" has "$T/err" "KDET_NUM_NODES=two" || return 1
    run "$B/kdet-launch" --nproc 2 /no/such/program
    check "missing program: 127" [ "$RC" = 127 ] &&
        check "named" has "$T/err" 'cmd=/no/such/program error="not found"' &&
        check "nothing started" lacks "$T/err" "worker started" || return 1
    KDET_NUM_NODES=2 run "$B/kdet-launch" true
    check "multi-node without run id: warned" has "$T/err" "KDET_RUN_ID is not set on a trial" || return 1
    run "$B/kdet-launch" --help
    check "help: 0" [ "$RC" = 0 ] && check "usage" has "$T/out" "usage: kdet-launch" && no_strays
}

test_wrap_rank() {
    run "$B/wrap_rank" 7 sh -c 'echo a; echo b >&2; printf c; exit 5'
    check "exit 5" [ "$RC" = 5 ] &&
        check "stdout" [ "$(cat "$T/out")" = "$(printf '[rank=7] a\n[rank=7] c')" ] &&
        check "stderr" [ "$(cat "$T/err")" = "[rank=7] b" ] || return 1
    RANK=3 run "$B/wrap_rank" RANK -- sh -c 'echo x'
    check "rank from RANK" [ "$(cat "$T/out")" = "[rank=3] x" ] || return 1
    OMPI_COMM_WORLD_RANK=4 run "$B/wrap_rank" HOROVOD_RANK,OMPI_COMM_WORLD_RANK sh -c 'echo y'
    check "first set variable" [ "$(cat "$T/out")" = "[rank=4] y" ] || return 1
    run "$B/wrap_rank" 2 sh -c 'kill -KILL $$'
    check "dies like its command: $RC" [ "$RC" = 137 ] || return 1
    start "$B/wrap_rank" 1 sh -c 'trap "echo bye; exit 4" TERM; touch "$0/ready.1"; sleep 1000 & wait' "$T"
    wait_ready 1 || return 1
    kill -TERM "$LPID"
    finish
    check "SIGTERM forwarded: exit 4, got $RC" [ "$RC" = 4 ] &&
        check "bye" has "$T/out" "[rank=1] bye" &&
        check "the background sleep went too" no_strays || return 1
    run "$B/wrap_rank"
    check "usage: 2" [ "$RC" = 2 ] || return 1
    run "$B/wrap_rank" NO_SUCH_VAR true
    check "unknown rank: 2" [ "$RC" = 2 ] &&
        check "explained" has "$T/err" "not a number, and no such environment variable is set" || return 1
    run "$B/wrap_rank" 1 /no/such/cmd
    check "missing command: 127" [ "$RC" = 127 ] && no_strays
}

# Stand-ins for the upstream launchers: record argv (one per line) and env.
make_fakes() {
    mkdir -p "$T/fake"
    local p
    for p in torchrun deepspeed horovodrun; do
        cat > "$T/fake/$p" << EOF
#!/bin/sh
printf '%s\n' "\$@" > "$T/argv.$p"
env > "$T/env.$p"
# Run the worker command after --no_python / -- like the real one would, as rank 0.
if [ "$p" = torchrun ]; then
    while [ \$# -gt 0 ] && [ "\$1" != --no_python ]; do shift; done
    shift
    RANK=0 exec "\$@"
fi
EOF
        chmod +x "$T/fake/$p"
    done
}

test_upstream_forms() {
    make_fakes
    local P="$T/fake:$PATH"
    PATH=$P KDET_NODE_RANK=1 KDET_NUM_NODES=2 KDET_CHIEF_ADDR=10.0.0.1 KDET_MASTER_PORT=29500 \
        run "$B/kdet-launch" --nproc 4 torch_distributed --rdzv_backend c10d -- \
        sh -c 'echo "hello from $RANK"'
    local want
    want=$(printf '%s\n' --nnodes 2 --nproc_per_node 4 --node_rank 1 --master_addr 10.0.0.1 \
        --master_port 29500 --max_restarts 0 --rdzv_backend c10d --no_python "$B/wrap_rank" RANK \
        sh -c 'echo "hello from $RANK"')
    check "exit 0, got $RC" [ "$RC" = 0 ] &&
        check "torchrun argv" [ "$(cat "$T/argv.torchrun")" = "$want" ] &&
        check "worker ran through wrap_rank" [ "$(cat "$T/out")" = "[rank=0] hello from 0" ] &&
        check "run id exported" grep -qE '^KDET_RUN_ID=[0-9a-f]{16}$' "$T/env.torchrun" &&
        check "node rank exported" grep -qx 'KDET_NODE_RANK=1' "$T/env.torchrun" &&
        check "exec logged" has "$T/err" 'msg="exec upstream launcher" launcher=torchrun' ||
        return 1

    PATH=$P MASTER_PORT=29400 run "$B/kdet-launch" --nproc 2 deepspeed --bind_cores_to_rank -- --trial m.py:T
    want=$(printf '%s\n' --num_nodes 1 --num_gpus 2 --master_addr 127.0.0.1 --master_port 29400 \
        --no_python --no_local_rank --bind_cores_to_rank -- "$B/wrap_rank" RANK python3 -m \
        kdet.harness --trial m.py:T)
    check "deepspeed argv" [ "$(cat "$T/argv.deepspeed")" = "$want" ] || return 1

    PATH=$P KDET_NUM_NODES=2 KDET_NODE_ADDRS=10.0.0.1,10.0.0.2 \
        run "$B/kdet-launch" --nproc 2 horovod python3 train.py
    want=$(printf '%s\n' -np 4 -H 10.0.0.1:2,10.0.0.2:2 "$B/wrap_rank" \
        HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK python3 train.py)
    check "horovodrun argv" [ "$(cat "$T/argv.horovodrun")" = "$want" ] || return 1

    # The other nodes of a horovod trial wait for horovodrun until stopped.
    PATH=$P KDET_NODE_RANK=1 KDET_NUM_NODES=2 KDET_NODE_ADDRS=a,b \
        start "$B/kdet-launch" horovod python3 train.py
    sleep 0.5
    check "still waiting" kill -0 "$LPID" || return 1
    kill -TERM "$LPID"
    finish
    check "peer exits 0 on SIGTERM, got $RC" [ "$RC" = 0 ] || return 1

    PATH=/usr/bin:/bin run "$B/kdet-launch" deepspeed python3 t.py
    check "missing deepspeed: 127, got $RC" [ "$RC" = 127 ] &&
        check "named" has "$T/err" 'cmd=deepspeed error="not found"' || return 1
    PATH=$P KDET_NUM_NODES=2 run "$B/kdet-launch" horovod python3 t.py
    check "horovod without addresses: 2" [ "$RC" = 2 ] &&
        check "explained" has "$T/err" "needs KDET_NODE_ADDRS" && no_strays
}

for name in all_zero one_fails_3 sigkill_137 env_contract cuda_nproc fail_fast_timing \
    sigkill_after_grace sigterm_forwarded launcher_killed no_interleaving partial_and_streams \
    leftovers stdin_is_null usage_errors wrap_rank upstream_forms; do
    t "$name"
done
say "$pass passed, $fail failed"
[ "$fail" = 0 ]
