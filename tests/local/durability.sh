#!/usr/bin/env bash
# kdet-local durability and ordering:
#  - four concurrent writers; a watcher sees every acknowledged create once, in
#    strictly increasing resourceVersion order;
#  - kill -9 in the middle of the writes (with a 16 KiB compaction threshold, so
#    background compactions run while it happens); after a restart every acknowledged
#    object is there, resourceVersions keep growing, and a watch from a
#    resourceVersion taken before the crash resumes (or gets 410 Expired).
# Prints `N passed, N failed`.
set -u
bin="$KD_BUILD/bin/kdet-local"
work=$(mktemp -d /tmp/kd-durab.XXXXXX)
pass=0 fail=0 pid="" wpids=""
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '     %s\n' "$@"; }
cleanup() {
    for p in $wpids $pid; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
curl() { command curl -K "$work/curlrc" "$@"; }

start() {
    rm -f "$work/port"
    "$bin" --data-dir "$work/data" --port 0 --port-file "$work/port" --compact-bytes 16KiB \
        --kubeconfig-out "$work/kc" >> "$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.05; done
    port=$(cat "$work/port")
    base="https://127.0.0.1:$port/api/v1/namespaces/default/configmaps"
    # kdet-local's bearer token (kept in the data dir across the restart) and its CA, from the kubeconfig
    sed -n 's/^ *certificate-authority-data: //p' "$work/kc" | base64 -d > "$work/ca.pem"
    printf 'header = "Authorization: Bearer %s"\ncacert = "%s"\n' "$(sed -n 's/^ *token: //p' "$work/kc")" "$work/ca.pem" > "$work/curlrc"
}
writer() { # ID COUNT: create COUNT configmaps, log each acknowledged name
    for i in $(seq 1 "$2"); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
            --data "{\"metadata\":{\"name\":\"w$1-$i\"},\"data\":{\"i\":\"$i\"}}" "$base" 2>/dev/null)
        [ "$code" = 201 ] && echo "w$1-$i" >> "$work/acked.$1"
    done
}

start
# ---- concurrent writers and one watcher -----------------------------------------
curl -sN "$base?watch=1&timeoutSeconds=120" > "$work/watch1" &
wpid=$!
sleep 0.3
for w in 1 2 3 4; do writer "$w" 40 & wpids="$wpids $!"; done
for p in $wpids; do wait "$p"; done
wpids=""
acked=$(cat "$work"/acked.* | sort)
# Give the watcher up to 30 s to deliver (the machine may be busy), then stop it.
for _ in $(seq 1 300); do
    [ "$(grep -c '"type":"ADDED"' "$work/watch1")" -ge "$(echo "$acked" | wc -l)" ] && break
    sleep 0.1
done
kill $wpid 2>/dev/null
wait $wpid 2>/dev/null
seen=$(grep -o '"type":"ADDED","object":{[^}]*"name":"w[0-9]*-[0-9]*"' "$work/watch1" | sed 's/.*"name":"//; s/"$//' | sort)
if [ -n "$acked" ] && [ "$acked" = "$seen" ]; then ok "the watcher saw every acknowledged create exactly once ($(echo "$acked" | wc -l))"; else bad "the watcher saw every acknowledged create exactly once" "acked $(echo "$acked" | wc -l), seen $(echo "$seen" | wc -l)"; fi
rvs=$(grep -o '"resourceVersion":"[0-9]*"' "$work/watch1" | tr -dc '0-9\n')
if [ "$(printf '%s\n' "$rvs" | sort -n -c 2>&1)" = "" ] && [ "$(printf '%s\n' "$rvs" | sort -un | wc -l)" = "$(printf '%s\n' "$rvs" | wc -l)" ]; then ok "watch events arrive in strictly increasing resourceVersion order"; else bad "watch events arrive in strictly increasing resourceVersion order" "$(printf '%s ' $rvs | head -c 300)"; fi

# ---- kill -9 during writes ----------------------------------------------------------
rm -f "$work"/acked.*
# A running container that kdet-local's crash leaves behind must not survive the restart.
marker="kdorphan$$"
curl -s -o /dev/null -X POST -H 'Content-Type: application/json' "${base%/configmaps}/pods" \
    --data "{\"metadata\":{\"name\":\"orphan\"},\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"m\",\"image\":\"busybox\",\"command\":[\"sh\",\"-c\",\"sleep 300; echo $marker\"]}]}}"
for _ in $(seq 1 100); do pgrep -f "$marker" >/dev/null && break; sleep 0.1; done
old_pids=$(pgrep -f "$marker" | tr '\n' ' ')
before=$(curl -s "$base" | sed -n 's/.*"metadata":{"resourceVersion":"\([0-9]*\)".*/\1/p' | head -1)
for w in 5 6; do writer "$w" 400 & wpids="$wpids $!"; done
sleep 1.5
kill -9 "$pid"
wait "$pid" 2>/dev/null
for p in $wpids; do wait "$p"; done
wpids=""
n_acked=$(cat "$work"/acked.* 2>/dev/null | wc -l)
start
sleep 1
left=""
# (a killed orphan may stay a zombie under a parent that does not reap: that is not running)
for p in $old_pids; do
    st=$(ps -o stat= -p "$p" 2>/dev/null)
    [ -n "$st" ] && [ "${st#Z}" = "$st" ] && left="$left $p"
done
if [ -n "$old_pids" ] && [ -z "$left" ]; then ok "the restart killed the containers the crash left behind ($old_pids)"; else bad "the restart killed the containers the crash left behind" "before: '$old_pids' still running: '$left'"; fi
missing=0
for name in $(cat "$work"/acked.*); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$base/$name")
    [ "$code" = 200 ] || { missing=$((missing + 1)); echo "missing: $name ($code)"; }
done
if [ "$n_acked" -gt 0 ] && [ "$missing" = 0 ]; then ok "after kill -9 and restart, all $n_acked acknowledged objects are there"; else bad "after kill -9 and restart, all acknowledged objects are there" "acked $n_acked, missing $missing"; fi
after=$(curl -s -X POST -H 'Content-Type: application/json' --data '{"metadata":{"name":"after"}}' "$base" | sed -n 's/.*"resourceVersion":"\([0-9]*\)".*/\1/p')
if [ "${after:-0}" -gt "$before" ] 2>/dev/null; then ok "resourceVersions keep growing after the restart ($before -> $after)"; else bad "resourceVersions keep growing after the restart" "$before -> ${after:-none}"; fi
curl -sN "$base?watch=1&resourceVersion=$before&timeoutSeconds=1" > "$work/watch2"
resumed=$(grep -c '"type":"ADDED"' "$work/watch2")
if [ "$resumed" -ge "$n_acked" ] || grep -q '"code":410' "$work/watch2"; then ok "a watch from before the crash resumes ($resumed events) or gets 410"; else bad "a watch from before the crash resumes or gets 410" "$(head -c 300 "$work/watch2")"; fi
orphan_state=$(curl -s "${base%/configmaps}/pods/orphan" | grep -o '"phase":"[A-Za-z]*"')
if [ "$orphan_state" = '"phase":"Failed"' ]; then ok "a restartPolicy Never pod cut off by the crash ends Failed, not re-run"; else bad "a restartPolicy Never pod cut off by the crash ends Failed, not re-run" "$orphan_state"; fi
nc=$(grep -c 'msg="journal compacted"' "$work/server.log")
if [ "$nc" -ge 3 ]; then ok "journal compactions ran during the writes ($nc, 2 of them at start)"; else bad "journal compactions ran during the writes" "$nc"; fi
kill "$pid"
if wait "$pid"; then ok "clean shutdown"; else bad "clean shutdown" "$(tail -5 "$work/server.log")"; fi
pid=""
sleep 0.5
if pgrep -f "$marker" | while read -r p; do st=$(ps -o stat= -p "$p"); [ "${st#Z}" = "$st" ] && echo "$p"; done | grep -q .; then bad "no container processes are left after the stop" "$(pgrep -af "$marker")"; else ok "no container processes are left after the stop"; fi
pid=""
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
