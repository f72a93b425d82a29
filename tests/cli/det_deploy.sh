#!/bin/bash
# det deploy local: up on a fresh data dir (kdet-local on a free port, a
# private PostgreSQL on a unix socket, the CRDs) → status healthy → kubectl
# works with the printed KUBECONFIG → down → nothing left running → status
# says stopped → up again resumes the same objects and the same database.
set -u
build=${KD_BUILD:-$PWD/build}
cd "${KD_SRC:-.}"
det=$build/bin/det
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | head -40; fail=$((fail + 1)); }

if ! command -v kubectl >/dev/null || ! { command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }; then
    echo "skip: kubectl or PostgreSQL is not installed"; echo "1 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d /tmp/kd-det-deploy-XXXXXX)
dd=$tmp/data
# every pid that ever ran here, to prove nothing is left behind
pids() {
    for f in "$dd/run/kdet-local.pid" "$dd/run/kdet-controller.pid" "$dd/postgres/postmaster.pid"; do
        [ -s "$f" ] && head -1 "$f"
    done
}
seen=""
# processes still running whose command line names the data dir (pids may be reused by others)
leftover() {
    for p in $seen; do
        [ -r "/proc/$p/cmdline" ] && tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -qF "$dd" && echo -n " $p"
    done
    for f in /proc/[0-9]*/cmdline; do
        tr '\0' ' ' < "$f" 2>/dev/null | grep -qF -- "--data-dir $dd" && echo -n " ${f//[^0-9]/}"
    done
}
cleanup() {
    "$det" deploy local down --data-dir "$dd" > /dev/null 2>&1
    for p in $(leftover); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
chmod 755 "$tmp"

# ---- up
if timeout 120 "$det" deploy local up --data-dir "$dd" --port 0 --gpus 3 > "$tmp/up.out" 2> "$tmp/up.err"; then
    ok "deploy local up"
else
    bad "deploy local up" "$tmp/up.err"; if [ "$(id -u)" = 0 ]; then
    mkdir -m 700 "$tmp/private"
    "$det" deploy local up --data-dir "$tmp/private/d" --port 0 > "$tmp/out" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q "cannot enter $tmp/private/d" "$tmp/out" && ! grep -q "kdet-local  *started" "$tmp/out" &&
        ok "root: a data dir the PostgreSQL user cannot enter is refused before anything starts" ||
        bad "private data dir (exit $rc)" "$tmp/out"
    "$det" deploy local down --data-dir "$tmp/private/d" > /dev/null 2>&1
fi

echo "$pass passed, $fail failed"; exit 1
fi
seen="$seen $(pids)"
grep -q "^export KUBECONFIG=$dd/kubeconfig$" "$tmp/up.out" && ok "up prints export KUBECONFIG=..." || bad "export line" "$tmp/up.out"
for part in kdet-local postgres crds; do
    grep -qE "^det: $part +.*\([0-9.]+m?s\)$" "$tmp/up.err" && ok "up shows progress for $part, with its time" ||
        bad "progress line for $part" "$tmp/up.err"
done
eval "$(cat "$tmp/up.out")"
[ "$KUBECONFIG" = "$dd/kubeconfig" ] || bad "KUBECONFIG from up"
port=$(cat "$dd/port")
# --port 0 takes a port below the kernel's range for outgoing connections, which could take it
# as a source port between a down and the next up
read -r eph_lo _ < /proc/sys/net/ipv4/ip_local_port_range
[ -n "$port" ] && [ "$port" -lt "$eph_lo" ] && ok "--port 0 picks a port below the ephemeral range ($port < $eph_lo)" ||
    bad "--port 0 picked $port, in the ephemeral range from $eph_lo"

# ---- status
if "$det" deploy local status --data-dir "$dd" > "$tmp/st" 2>&1 &&
    grep -qE "^  kdet-local +healthy +pid [0-9]+, https://127.0.0.1:$port" "$tmp/st" &&
    grep -qE "^  postgres +healthy +pid [0-9]+, socket $dd/run/pg" "$tmp/st" &&
    grep -qE "^  crds +installed" "$tmp/st"; then
    ok "status: every part healthy, exit 0"
else bad "status after up" "$tmp/st"; fi
if [ -x "$build/bin/kdet-controller" ]; then
    grep -qE "^  kdet-controller +running +pid [0-9]+" "$tmp/st" && ok "kdet-controller runs (it is next to det)" ||
        bad "kdet-controller in status" "$tmp/st"
    grep -qE "^det: kdet-controller +started" "$tmp/up.err" && ok "up shows progress for kdet-controller" ||
        bad "kdet-controller progress line" "$tmp/up.err"
else
    grep -qE "^  kdet-controller +absent" "$tmp/st" && ok "no kdet-controller: status says absent" || bad "absent controller" "$tmp/st"
fi

# ---- kubectl with the printed KUBECONFIG; the API only on 127.0.0.1; PostgreSQL only on its socket
if timeout 30 kubectl get nodes > "$tmp/out" 2>&1 && grep -q " Ready " "$tmp/out"; then ok "kubectl get nodes"
else bad "kubectl get nodes" "$tmp/out"; fi
gpus=$(timeout 30 kubectl get nodes -o jsonpath='{.items[0].status.allocatable.nvidia\.com/gpu}' 2>&1)
[ "$gpus" = 3 ] && ok "--gpus 3: the node offers 3 GPU slots" || bad "--gpus 3 gave allocatable '$gpus'"
# ---- the API needs the token that up made: in DIR/api-token and the kubeconfig, both 0600
[ "$(stat -c %a "$dd/api-token")" = 600 ] && [ "$(stat -c %a "$dd/kubeconfig")" = 600 ] &&
    grep -qF "token: $(cat "$dd/api-token")" "$dd/kubeconfig" &&
    ok "up makes a token for kdet-local (DIR/api-token, 0600) and the 0600 kubeconfig carries it" ||
    bad "api-token / kubeconfig modes" "$dd/kubeconfig"
code=$(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$port/api/v1/namespaces/default/pods")
[ "$code" = 401 ] && ok "a client without the token gets 401" || bad "no token: HTTP $code"
# ---- a crash of kdet-local: up brings it back with the options it had (--gpus 3), not NVML's 0
grep -qx "gpus=3" "$dd/options" && grep -qx "port=$port" "$dd/options" && ok "up records its options in DIR/options" ||
    bad "DIR/options" "$dd/options"
kill -9 "$(head -1 "$dd/run/kdet-local.pid")"
for _ in $(seq 1 100); do timeout 5 kubectl get nodes > /dev/null 2>&1 || break; sleep 0.1; done
if timeout 60 "$det" deploy local up --data-dir "$dd" > "$tmp/upc.out" 2> "$tmp/upc.err"; then
    seen="$seen $(pids)"
    grep -qE "^det: kdet-local +started on 127.0.0.1:$port \(pid [0-9]+, --gpus 3\)" "$tmp/upc.err" &&
        ok "up after a crash restarts kdet-local with --gpus 3 and the same port" || bad "restart line" "$tmp/upc.err"
    gpus=$(timeout 30 kubectl get nodes -o jsonpath='{.items[0].status.allocatable.nvidia\.com/gpu}' 2>&1)
    [ "$gpus" = 3 ] && ok "after the crash the node still offers 3 GPU slots" || bad "after a crash: allocatable '$gpus'"
else bad "up after a crash" "$tmp/upc.err"; fi
"$det" deploy local up --data-dir "$dd" --gpus 1 > "$tmp/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q -- "--gpus 1: kdet-local is already running with --gpus 3" "$tmp/out" &&
    grep -q "det deploy local down --data-dir $dd" "$tmp/out" &&
    ok "up --gpus 1 on a running --gpus 3: refused, naming the option and 'det deploy local down'" ||
    bad "up --gpus 1 while running (exit $rc)" "$tmp/out"
"$det" deploy local up --data-dir "$dd" --port $((port == 65535 ? 65534 : port + 1)) > "$tmp/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q -- "kdet-local is already running on port $port" "$tmp/out" &&
    ok "up --port N on a deployment running on another port: refused, naming --port" ||
    bad "up --port while running (exit $rc)" "$tmp/out"
gpus=$(timeout 30 kubectl get nodes -o jsonpath='{.items[0].status.allocatable.nvidia\.com/gpu}' 2>&1)
[ "$gpus" = 3 ] && ok "a refused up changed nothing" || bad "after a refused up: allocatable '$gpus'"
if timeout 30 kubectl get priorityclass kdet-high kdet-normal kdet-low > "$tmp/out" 2>&1; then
    ok "up installs the kdet PriorityClasses trial pods use"
else bad "PriorityClasses" "$tmp/out"; fi
"$det" deploy local up --data-dir "$dd" --gpus many > "$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q -- "--gpus many: expected" "$tmp/out" && ok "--gpus with a bad value: usage error naming it" ||
    bad "--gpus many" "$tmp/out"
if ss -ltn 2>/dev/null | grep -q ":$port "; then
    ss -ltn | grep ":$port " | grep -qv "127.0.0.1:$port" && bad "the API listens beyond 127.0.0.1" || ok "the API listens on 127.0.0.1 only"
fi
grep -q "^listen_addresses = ''" "$dd/postgres/postgresql.conf" && [ -S "$dd/run/pg/.s.PGSQL.5432" ] &&
    ok "PostgreSQL: no TCP, a unix socket in the data dir" || bad "PostgreSQL listen settings"
if command -v psql > /dev/null; then
    psql -h "$dd/run/pg" -U kdet kdet -qc "create table kept (v text); insert into kept values ('still here')" > "$tmp/out" 2>&1 &&
        ok "the database kdet takes writes" || bad "psql write" "$tmp/out"
fi
timeout 30 kubectl create configmap kept --from-literal=k=v --dry-run=client -o yaml | timeout 30 kubectl apply -f - > "$tmp/out" 2>&1 &&
    ok "an object created before down" || bad "create a ConfigMap" "$tmp/out"
"$det" experiment create examples/fashion-mnist-c/const.yaml examples/fashion-mnist-c > "$tmp/out" 2>&1 &&
    ok "det experiment create against the deployment" || bad "det experiment create" "$tmp/out"
check_up_again() {
    timeout 60 "$det" deploy local up --data-dir "$dd" > "$tmp/up2.out" 2> "$tmp/up2.err"
}
check_up_again && grep -q "kdet-local       already running" "$tmp/up2.err" && ok "up on a running deployment says so" ||
    bad "up twice" "$tmp/up2.err"

# ---- down: nothing left running
if timeout 90 "$det" deploy local down --data-dir "$dd" > "$tmp/down" 2>&1; then ok "deploy local down"; else bad "down" "$tmp/down"; fi
grep -qE "^det: postgres +stopped" "$tmp/down" && grep -qE "^det: kdet-local +stopped" "$tmp/down" &&
    { [ ! -x "$build/bin/kdet-controller" ] || grep -qE "^det: kdet-controller +stopped" "$tmp/down"; } &&
    ok "down reports each part stopped" || bad "down output" "$tmp/down"
left=$(leftover)
[ -z "$left" ] && ok "no process left after down" || bad "processes left:$left"
[ -S "$dd/run/pg/.s.PGSQL.5432" ] && bad "the PostgreSQL socket is still there" || ok "the socket is gone"
"$det" deploy local status --data-dir "$dd" > "$tmp/st" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -qE "kdet-local +stopped" "$tmp/st" && grep -qE "postgres +stopped" "$tmp/st" &&
    ok "status after down: stopped, non-zero exit" || bad "status after down (exit $rc)" "$tmp/st"

# ---- up again resumes
if timeout 120 "$det" deploy local up --data-dir "$dd" > "$tmp/up3.out" 2> "$tmp/up3.err"; then ok "up again"
else bad "up again" "$tmp/up3.err"; fi
seen="$seen $(pids)"
grep -q "initialized a new database cluster" "$tmp/up3.err" && bad "up again ran initdb" "$tmp/up3.err" || ok "up again reuses the database cluster"
[ "$(cat "$dd/port")" = "$port" ] && ok "up again reuses the port" || bad "port changed"
gpus=$(timeout 30 kubectl get nodes -o jsonpath='{.items[0].status.allocatable.nvidia\.com/gpu}' 2>&1)
[ "$gpus" = 3 ] && ok "up again (no flags) keeps --gpus 3" || bad "up again: allocatable '$gpus'"
[ "$(timeout 30 kubectl get configmap kept -o jsonpath='{.data.k}')" = v ] && ok "the object is still there" ||
    bad "ConfigMap kept lost"
"$det" experiment list > "$tmp/out" 2>&1 && grep -q "fashion-mnist-c-const" "$tmp/out" && ok "the experiment is still there" ||
    bad "experiment lost" "$tmp/out"
if command -v psql > /dev/null; then
    [ "$(psql -h "$dd/run/pg" -U kdet kdet -Atc 'select v from kept' 2>&1)" = "still here" ] &&
        ok "the database kept its rows" || bad "database rows lost"
fi
timeout 90 "$det" deploy local down --data-dir "$dd" > "$tmp/down" 2>&1 || bad "down again" "$tmp/down"
left=$(leftover)
[ -z "$left" ] && ok "no process left at the end" || bad "processes left at the end:$left"

# ---- usage errors
"$det" deploy cloud up > "$tmp/out" 2>&1; [ $? -eq 2 ] && grep -q "only 'det deploy local' exists" "$tmp/out" &&
    ok "deploy cloud: usage error" || bad "deploy cloud" "$tmp/out"
"$det" deploy local upp > "$tmp/out" 2>&1; [ $? -eq 2 ] && grep -q 'did you mean "up"' "$tmp/out" &&
    ok "deploy local upp: suggestion" || bad "deploy local upp" "$tmp/out"
"$det" deploy local status --data-dir "$tmp/none" > "$tmp/out" 2>&1; [ $? -eq 5 ] && grep -q "nothing was deployed there" "$tmp/out" &&
    ok "status of an empty data dir" || bad "status of a missing data dir" "$tmp/out"

if [ "$(id -u)" = 0 ]; then
    mkdir -m 700 "$tmp/private"
    "$det" deploy local up --data-dir "$tmp/private/d" --port 0 > "$tmp/out" 2>&1; rc=$?
    [ $rc -eq 1 ] && grep -q "cannot enter $tmp/private/d" "$tmp/out" && ! grep -q "kdet-local  *started" "$tmp/out" &&
        ok "root: a data dir the PostgreSQL user cannot enter is refused before anything starts" ||
        bad "private data dir (exit $rc)" "$tmp/out"
    "$det" deploy local down --data-dir "$tmp/private/d" > /dev/null 2>&1
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
