#!/usr/bin/env bash
# kdet-local with --token-file: 401 Status without the token, 200 with it,
# health endpoints open, the token never in the log, only 127.0.0.1 bound,
# and clear errors for bad flags. Prints `N passed, N failed`.
set -u
bin="$KD_BUILD/bin/kdet-local"
work=$(mktemp -d /tmp/kd-auth.XXXXXX)
pass=0 fail=0 pid=""
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '     %s\n' "$@"; }
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
expect() { # NAME PATTERN CMD...
    local name=$1 pat=$2 out
    shift 2
    out=$("$@" 2>&1)
    if printf '%s' "$out" | grep -Eq -- "$pat"; then ok "$name"; else bad "$name" "want /$pat/" "got: $(printf '%s' "$out" | head -c 400)"; fi
}

token="kd-test-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$token" > "$work/token"
KDET_LOG_LEVEL=debug "$bin" --data-dir "$work/data" --port 0 --port-file "$work/port" --token-file "$work/token" \
    --kubeconfig-out "$work/kc" --no-kubelet > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.05; done
u="http://127.0.0.1:$(cat "$work/port")"
expect "no token: 401 Unauthorized as a Status" '^\{"kind":"Status","apiVersion":"v1","metadata":\{\},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401\}' curl -s "$u/api/v1/namespaces"
expect "a wrong token: 401" '^401$' curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer nope" "$u/api/v1/namespaces"
expect "the right token: 200" '^200$' curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$u/api/v1/namespaces"
expect "health endpoints need no token" '^ok$' curl -s "$u/healthz"
expect "the kubeconfig is private (0600)" '^600$' stat -c '%a' "$work/kc"
port=$(cat "$work/port")
expect "listens on 127.0.0.1 only" "127.0.0.1:$port" sh -c "ss -ltn 2>/dev/null | grep ':$port ' || netstat -ltn 2>/dev/null | grep ':$port '"
kill "$pid"; wait "$pid"; pid=""
# kubectl sends a bearer token only over HTTPS: --tls.
tls_start() {
    rm -f "$work/port"
    "$bin" --data-dir "$work/data" --tls --port 0 --port-file "$work/port" --token-file "$work/token" \
        --kubeconfig-out "$work/kc" --no-kubelet >> "$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.05; done
}
tls_start
expect "with --tls, kubectl uses the token through the kubeconfig's CA" 'default +Active' env HOME="$work" KUBECONFIG="$work/kc" kubectl get ns default
expect "kubectl create through TLS (protobuf body)" 'configmap/tls-cm created' env HOME="$work" KUBECONFIG="$work/kc" kubectl create configmap tls-cm --from-literal=a=b
expect "the certificate names 127.0.0.1" 'IP Address:127.0.0.1' openssl x509 -in "$work/data/tls/server.crt" -noout -text
expect "the key is private (0600)" '^600$' stat -c '%a' "$work/data/tls/server.key"
cp "$work/kc" "$work/kc.before"
kill "$pid"; wait "$pid"; pid=""
tls_start
expect "the certificate survives a restart (an old kubeconfig's CA still verifies)" 'tls-cm' \
    sh -c "sed 's/127.0.0.1:[0-9]*/127.0.0.1:$(cat "$work/port")/' $work/kc.before > $work/kc.old && HOME=$work KUBECONFIG=$work/kc.old kubectl get cm tls-cm -o name"
kill "$pid"; wait "$pid"; pid=""
if grep -q "$token" "$work/log"; then bad "the token never appears in the log" "$(grep -m1 "$token" "$work/log")"; else ok "the token never appears in the log"; fi
expect "a bad --port is named" 'kdet-local: --port 70000: expected an integer in 0..65535' "$bin" --port 70000
expect "a missing token file is named" 'kdet-local: --token-file /nonexistent/t: No such file or directory' "$bin" --port 0 --token-file /nonexistent/t
expect "an unexpected argument is named" "unexpected argument 'extra'" "$bin" extra
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
