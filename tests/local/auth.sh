#!/usr/bin/env bash
# kdet-local serves only clients with its bearer token: 401 Status without
# it (also over --plain-http), 200 with it, health endpoints open, the token
# never in the log, only 127.0.0.1 bound, HTTPS by default with a token of
# its own in the 0600 kubeconfig when no --token-file is given (another
# local user can neither call it nor read the token); the process kubelet
# runs containers as the pod's securityContext says (runAsUser, runAsGroup,
# runAsNonRoot); clear errors for bad flags. Prints `N passed, N failed`.
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
    --kubeconfig-out "$work/kc" --no-kubelet --plain-http > "$work/log" 2>&1 &
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
# kubectl sends a bearer token only over HTTPS (the default; --tls says so explicitly).
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

# ---- the default: HTTPS, a token made by kdet-local (DATA_DIR/token, 0600) in the 0600 kubeconfig
rm -f "$work/port"
"$bin" --data-dir "$work/d2" --port 0 --port-file "$work/port" --kubeconfig-out "$work/kc2" >> "$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.05; done
u="https://127.0.0.1:$(cat "$work/port")"
export HOME="$work" KUBECONFIG="$work/kc2"
tok2=$(sed -n 's/^ *token: //p' "$work/kc2")
expect "without --token-file the kubeconfig carries a token of 64 hex digits" '^[0-9a-f]{64}$' echo "$tok2"
expect "the token is kept in DATA_DIR/token, mode 0600" "^600 $tok2\$" sh -c "echo \$(stat -c %a '$work/d2/token') \$(cat '$work/d2/token')"
expect "kubectl works with the kubeconfig alone (HTTPS, the token)" 'default +Active' kubectl get ns default
expect "plain HTTP is not served" '^(000|400)$' curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(cat "$work/port")/api/v1/pods"
nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
pod_json='{"apiVersion":"v1","kind":"Pod","metadata":{"name":"evil"},"spec":{"containers":[{"name":"c","image":"x","command":["sh","-c","id -u > /tmp/kd-evil-ran"]}]}}'
expect "uid 65534 creating a pod with plain curl: 401 Unauthorized" '"reason":"Unauthorized","code":401' \
    nobody curl -sk -X POST -H 'Content-Type: application/json' --data "$pod_json" "$u/api/v1/namespaces/default/pods"
expect "uid 65534 listing secrets with plain curl: 401" '^401$' nobody curl -sk -o /dev/null -w '%{http_code}' "$u/api/v1/secrets"
expect "uid 65534 cannot read the kubeconfig (and so the token)" 'Permission denied' nobody cat "$work/kc2"
expect "no pod was created" 'NotFound' kubectl get pod evil
expect "health probes stay open" '^ok$' curl -sk "$u/readyz"
# ---- securityContext: the container's process really runs as runAsUser/runAsGroup
cat > "$work/runas.json" <<'JSON'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"runas"},"spec":{"restartPolicy":"Never",
 "securityContext":{"runAsUser":1000,"runAsGroup":1000,"supplementalGroups":[4242]},
 "containers":[{"name":"c","image":"x","securityContext":{"runAsUser":65534,"runAsNonRoot":true},
   "command":["sh","-c","echo uid=$(id -u) gid=$(id -g) groups=$(id -G); exec sleep 307"]}]}}
JSON
expect "a pod with runAsUser 65534 is created" 'pod/runas created' kubectl create -f "$work/runas.json"
for _ in $(seq 1 100); do kubectl logs runas 2>/dev/null | grep -q uid= && break; sleep 0.1; done
expect "its process runs as uid 65534, gid 1000 (the pod's runAsGroup), groups 1000 4242" \
    '^uid=65534 gid=1000 groups=1000 4242$' kubectl logs runas
expect "the kernel agrees: the process's real and effective uid are 65534" '^65534 65534$' \
    sh -c "for p in \$(pgrep -f 'sleep 307'); do awk '/^Uid:/ {print \$2, \$3}' /proc/\$p/status; done"
cat > "$work/nonroot.json" <<'JSON'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nonroot"},"spec":{"restartPolicy":"Never",
 "securityContext":{"runAsNonRoot":true},
 "containers":[{"name":"c","image":"x","command":["sh","-c","id -u > /tmp/kd-nonroot-ran"]}]}}
JSON
rm -f /tmp/kd-nonroot-ran
kubectl create -f "$work/nonroot.json" > /dev/null 2>&1
for _ in $(seq 1 100); do kubectl get pod nonroot -o 'jsonpath={.status.containerStatuses[0].state.waiting.reason}' 2>/dev/null | grep -q CreateContainerConfigError && break; sleep 0.1; done
expect "runAsNonRoot with no runAsUser (kdet-local runs as root): CreateContainerConfigError with the kubelet's message" \
    '^CreateContainerConfigError container has runAsNonRoot and image will run as root \(pod: "nonroot_default\(' \
    kubectl get pod nonroot -o 'jsonpath={.status.containerStatuses[0].state.waiting.reason} {.status.containerStatuses[0].state.waiting.message}'
[ -e /tmp/kd-nonroot-ran ] && bad "the runAsNonRoot container did not run" || ok "the runAsNonRoot container did not run"
kubectl delete pod runas nonroot --grace-period=1 > /dev/null 2>&1
unset KUBECONFIG
kill "$pid"; wait "$pid"; pid=""
expect "no token source at all: refused, naming the flags" 'every client must present a bearer token: give --token-file' "$bin" --port 0
if grep -q "$token" "$work/log" || grep -q "$tok2" "$work/log"; then bad "the token never appears in the log" "$(grep -m1 -e "$token" -e "$tok2" "$work/log")"; else ok "the token never appears in the log"; fi
expect "a bad --port is named" 'kdet-local: --port 70000: expected an integer in 0..65535' "$bin" --port 70000
expect "a missing token file is named" 'kdet-local: --token-file /nonexistent/t: No such file or directory' "$bin" --port 0 --token-file /nonexistent/t
expect "an unexpected argument is named" "unexpected argument 'extra'" "$bin" extra
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
