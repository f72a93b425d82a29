#!/usr/bin/env bash
# kdet-launch's rendezvous port: two single-node launches at the same time
# with the controller's default KDET_MASTER_PORT (29400) each pick a free
# port and both run a real libdtrain rendezvous and allreduce; a port chosen
# on purpose (MASTER_PORT in the environment, a KDET_MASTER_PORT other than
# 29400) is kept; with several nodes KDET_MASTER_PORT is used as given.
# Every launcher runs in a session of its own; nothing may be left over.
set -u
B="$KD_BUILD/bin"
T=$(mktemp -d /tmp/kd-launch-port.XXXXXX)
pass=0
fail=0
SESSIONS=""
strays() {
    ps -eo sid=,pid=,stat=,args= | awk -v s="$SESSIONS" '
        BEGIN { n = split(s, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
        ($1 in want) && $3 !~ /^Z/'
}
cleanup() {
    local s
    s=$(strays)
    [ -n "$s" ] && kill -KILL $(printf '%s\n' "$s" | awk '{ print $2 }') 2> /dev/null
    rm -rf "$T"
}
trap cleanup EXIT
say() { printf '%s\n' "$*"; }
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
        for f in "$T"/*.out "$T"/*.err; do
            [ -f "$f" ] || continue
            say "  --- $f (head)"
            head -n 20 "$f" | cut -c 1-300
        done
        return 1
    fi
}
t() { # t NAME: run test_NAME, count it
    SESSIONS=""
    rm -f "$T"/*
    if "test_$1" && no_strays; then
        pass=$((pass + 1))
        say "ok   $1"
    else
        fail=$((fail + 1))
        say "FAIL $1"
    fi
}
has() { grep -qF -- "$2" "$1"; }
# port_of FILE: the port of the "launch starting" line in FILE.
port_of() { sed -n 's/.*msg="launch starting".* port=\([0-9]*\) .*/\1/p' "$1"; }

# The workers of both launches meet at a barrier (4 ready files) before the
# rendezvous, so both rank 0s listen at the same time: on one shared port
# one of them would fail to bind.
cat > "$T.worker" << 'EOF'
#!/bin/sh
touch "$KD_T/ready.$1.$RANK"
i=0
while [ "$(ls "$KD_T" | grep -c '^ready\.')" -lt 4 ]; do
    sleep 0.05
    i=$((i + 1))
    [ $i -gt 600 ] && exit 9
done
exec "$KD_DTRAIN" check rendezvous
EOF
chmod +x "$T.worker"
trap 'cleanup; rm -f "$T.worker"' EXIT

test_two_at_once() {
    local p1 p2 rc1 rc2
    KD_T=$T KD_DTRAIN=$B/dtrain KDET_MASTER_PORT=29400 \
        setsid timeout 60 "$B/kdet-launch" --nproc 2 "$T.worker" a > "$T/a.out" 2> "$T/a.err" &
    p1=$!
    KD_T=$T KD_DTRAIN=$B/dtrain KDET_MASTER_PORT=29400 \
        setsid timeout 60 "$B/kdet-launch" --nproc 2 "$T.worker" b > "$T/b.out" 2> "$T/b.err" &
    p2=$!
    SESSIONS="$p1 $p2"
    wait "$p1"
    rc1=$?
    wait "$p2"
    rc2=$?
    check "first launch exits 0, got $rc1" [ "$rc1" = 0 ] &&
        check "second launch exits 0, got $rc2" [ "$rc2" = 0 ] &&
        check "first: allreduce on 2 ranks" [ "$(grep -c 'allreduce ok: sum of rank+1 over 2 ranks = 3' "$T/a.out")" = 2 ] &&
        check "second: allreduce on 2 ranks" [ "$(grep -c 'allreduce ok: sum of rank+1 over 2 ranks = 3' "$T/b.out")" = 2 ] &&
        check "first picked its port" has "$T/a.err" "port_source=picked" &&
        check "second picked its port" has "$T/b.err" "port_source=picked" &&
        check "ports differ and are not 29400" \
            [ "$(port_of "$T/a.err")" != "$(port_of "$T/b.err")" -a "$(port_of "$T/a.err")" != 29400 ] &&
        check "workers got the picked port" \
            grep -q "env MASTER_PORT *$(port_of "$T/a.err")\$" "$T/a.out"
}

# A free port for the explicit cases (a bound socket's port, then closed).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }

test_explicit_master_port() {
    local p rc
    p=$(free_port)
    MASTER_PORT=$p KDET_MASTER_PORT=29400 setsid timeout 60 "$B/kdet-launch" --nproc 2 \
        "$B/dtrain" check rendezvous > "$T/c.out" 2> "$T/c.err" &
    SESSIONS=$!
    wait "$SESSIONS"
    rc=$?
    check "exit 0, got $rc" [ "$rc" = 0 ] &&
        check "MASTER_PORT kept" has "$T/c.err" "port=$p port_source=MASTER_PORT" &&
        check "rank 0 listened there" has "$T/c.err" "msg=\"dtrain rendezvous waiting\" port=$p " &&
        check "allreduce on 2 ranks" [ "$(grep -c 'allreduce ok' "$T/c.out")" = 2 ]
}

test_explicit_kdet_master_port() {
    local p rc
    p=$(free_port)
    KDET_MASTER_PORT=$p setsid timeout 60 "$B/kdet-launch" --nproc 2 \
        "$B/dtrain" check rendezvous > "$T/d.out" 2> "$T/d.err" &
    SESSIONS=$!
    wait "$SESSIONS"
    rc=$?
    check "exit 0, got $rc" [ "$rc" = 0 ] &&
        check "KDET_MASTER_PORT kept" has "$T/d.err" "port=$p port_source=KDET_MASTER_PORT" &&
        check "allreduce on 2 ranks" [ "$(grep -c 'allreduce ok' "$T/d.out")" = 2 ]
}

test_several_nodes() {
    local rc
    # With two nodes every pod must agree: KDET_MASTER_PORT as given, and an
    # inherited MASTER_PORT is replaced.
    MASTER_PORT=1234 KDET_NUM_NODES=2 KDET_NODE_RANK=1 KDET_MASTER_PORT=29400 KDET_RUN_ID=r1 \
        setsid timeout 60 "$B/kdet-launch" --nproc 1 sh -c 'echo "port=$MASTER_PORT"' \
        > "$T/e.out" 2> "$T/e.err" &
    SESSIONS=$!
    wait "$SESSIONS"
    rc=$?
    check "exit 0, got $rc" [ "$rc" = 0 ] &&
        check "default port on several nodes" has "$T/e.out" "[rank=1] port=29400" &&
        check "logged as default" has "$T/e.err" "port=29400 port_source=default"
}

test_bad_master_port() {
    local rc
    MASTER_PORT=70000 setsid timeout 60 "$B/kdet-launch" --nproc 1 true > "$T/f.out" 2> "$T/f.err" &
    SESSIONS=$!
    wait "$SESSIONS"
    rc=$?
    check "exit 2, got $rc" [ "$rc" = 2 ] &&
        check "names the variable" has "$T/f.err" "MASTER_PORT=70000: must be between 1 and 65535"
}

for name in two_at_once explicit_master_port explicit_kdet_master_port several_nodes \
    bad_master_port; do
    t "$name"
done
say "$pass passed, $fail failed"
[ "$fail" = 0 ]
