#!/usr/bin/env bash
# lib/http's framing and limit checks hold in both real servers built on it:
# kdet-local's API and kdet-controller's API refuse request smuggling (400 and
# close, the rest never served), an unknown Transfer-Encoding (501), a %00
# in the path and a garbage request line (400); the controller caps pause's body at 16 KiB from the head;
# and 50 unauthenticated 8 MiB metrics bodies sent at once get 401 before
# their bodies, with the controller's peak RSS growing by less than 64 MiB
# (/proc/PID/status VmHWM, reset through clear_refs). Prints `N passed, N failed`.
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
. "$KD_SRC/e2e/controller/lib.sh"
need_pg || exit 77
trap 'stop_pg; finish; exit $?' EXIT
start_pg || exit 1
start_local 1 || exit 1
R="python3 $KD_SRC/tests/lib/http/rawhttp.py"

# expect NAME PATTERN CMD...: the command's output matches the extended regex.
expect() {
    local name=$1 pat=$2 out
    shift 2
    out=$("$@" 2>&1)
    if printf '%s' "$out" | grep -Eq -- "$pat"; then ok "$name"; else bad "$name (want /$pat/, got: $(printf '%s' "$out" | head -c 300))"; fi
}

# The raw probes speak plain HTTP: a second kdet-local serves it (--plain-http; its
# token is still required, but framing is refused before any handler runs).
"$KD_BUILD/bin/kdet-local" --data-dir "$T/data-plain" --port 0 --port-file "$T/port-plain" \
    --kubeconfig-out "$T/kubeconfig-plain" --plain-http --fake-gpus 0 --node-name kdet-plain \
    >"$T/local-plain.log" 2>&1 &
PLAIN_PID=$!
wait_for 10 test -s "$T/port-plain" || { echo "the plain-HTTP kdet-local did not start"; tail "$T/local-plain.log"; }
LPORT=$(cat "$T/port-plain")
expect "kdet-local: CL+TE → 400, one answer, closed, nothing smuggled" \
    'status=400 answers=1 closed=1 smuggled=0 .*ambiguous' $R probe "$LPORT" cl-te /api/v1/namespaces
expect "kdet-local: two Content-Lengths → 400 and close" \
    'status=400 answers=1 closed=1 smuggled=0' $R probe "$LPORT" two-cl /api/v1/namespaces
expect "kdet-local: Transfer-Encoding gzip → 501 and close" \
    'status=501 answers=1 closed=1 .*gzip' $R probe "$LPORT" te-gzip /api/v1/namespaces
expect "kdet-local: %00 in the path → 400 naming the NUL" \
    'status=400 answers=1 closed=1 .*NUL byte \(%00\)' $R probe "$LPORT" nul /api/v1/namespaces/default
expect "kdet-local: a space in the target → 400" \
    'status=400 answers=1 closed=1' $R probe "$LPORT" space /healthz
expect "kdet-local: a TLS hello on the plain port → 400 at once" \
    'status=400 answers=1 closed=1 .*does not start with a method' $R probe "$LPORT" tls-hello

kill -TERM "$PLAIN_PID" 2>/dev/null
wait "$PLAIN_PID" 2>/dev/null

echo "user-token-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" >"$T/utok"
UT=$(cat "$T/utok")
start_ctrl --database-url "$PG_URL" --api-listen 127.0.0.1:0 --namespace default --user-token-file "$T/utok"
check "API serving" wait_for 20 grep -q 'msg="API serving"' "$T/ctrl.log"
URL=$(sed -n 's/.*msg="trials reach the API" controller_url=\([^ ]*\).*/\1/p' "$T/ctrl.log" | tail -1 | tr -d '"')
CPORT=${URL##*:}
log "controller API on port $CPORT"
NSP=/api/v1/namespaces/default
expect "controller: CL+TE → 400, one answer, closed, nothing smuggled" \
    'status=400 answers=1 closed=1 smuggled=0 .*ambiguous' $R probe "$CPORT" cl-te /healthz
expect "controller: two Content-Lengths → 400 and close" \
    'status=400 answers=1 closed=1 smuggled=0' $R probe "$CPORT" two-cl "$NSP/experiments/x/pause"
expect "controller: Transfer-Encoding gzip → 501 and close" \
    'status=501 answers=1 closed=1' $R probe "$CPORT" te-gzip "$NSP/trials/x/metrics"
expect "controller: %00 in a trial name → 400 naming the NUL" \
    'status=400 answers=1 closed=1 .*NUL byte' $R probe "$CPORT" nul "$NSP/trials/x"
expect "controller: a TLS hello on the plain port → 400 at once" \
    'status=400 answers=1 closed=1' $R probe "$CPORT" tls-hello
head -c 20480 /dev/zero | tr '\0' ' ' >"$T/20k"
expect "controller: a 20 KiB pause body → 413 naming 16 KiB" \
    '^413 .*at most 16384 bytes \(16 KiB\)' sh -c "curl -s -w '%{http_code} ' -o '$T/out' -X POST \
    -H 'Authorization: Bearer $UT' --data-binary @'$T/20k' '$URL$NSP/experiments/none/pause'; cat '$T/out'"

PID=$CTRL_PID
hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$PID/status"; }
# Reset the peak so it measures this flood alone (where the kernel allows it).
echo 5 >"/proc/$PID/clear_refs" 2>/dev/null || log "clear_refs not writable: peak since start"
before=$(hwm)
expect "controller: 50 unauthenticated 8 MiB metrics bodies → 50 × 401, all before the body" \
    '^statuses=401:50 early=50$' $R flood "$CPORT" "$NSP/trials/nope/metrics" 50 8388608
after=$(hwm)
log "controller peak RSS ${before} kB → ${after} kB"
check "controller: peak RSS grew by less than 64 MiB (${before} → ${after} kB)" \
    test $((after - before)) -lt 65536
check "controller: still serving" curl -sf "$URL/healthz"
