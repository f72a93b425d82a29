#!/usr/bin/env bash
# kdet-controller's command line: --gang-scheduler and --gang-queue (and
# $KDET_GANG_SCHEDULER, $KDET_GANG_QUEUE) refuse bad values by name.
# --idle-release-after takes whole seconds
# from 0 to 86400 and names itself in the error for anything else (exit 2,
# before any connection); a valid value is accepted (the next bad flag is
# the one reported), also when $KDET_IDLE_RELEASE_AFTER is invalid.
set -u
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
KD_BUILD=${KD_BUILD:-$KD_SRC/build}
ctrl=$KD_BUILD/bin/kdet-controller
passed=0
failed=0
check() {
    if [ "$1" = 0 ]; then
        passed=$((passed + 1))
        echo "ok - $2"
    else
        failed=$((failed + 1))
        echo "FAIL - $2"
    fi
}
# refused VALUE: exit 2 and an error naming the flag and the value.
refused() {
    local out rc
    out=$(timeout 10 "$ctrl" --idle-release-after "$1" 2>&1)
    rc=$?
    [ $rc = 2 ] && echo "$out" | head -1 | grep -qF -- "--idle-release-after=$1: expected whole seconds from 0 to 86400"
    check $? "--idle-release-after '$1' refused (rc $rc): $(echo "$out" | head -1)"
}
for v in -1 86401 5x 1.5 "" " 5" abc 99999999999999999999; do refused "$v"; done
# accepted VALUE: parsing goes on to the next (bad) flag.
accepted() {
    local out
    out=$(KDET_IDLE_RELEASE_AFTER=bogus timeout 10 "$ctrl" --idle-release-after "$1" --log-level nope 2>&1)
    echo "$out" | head -1 | grep -qF -- "--log-level=nope"
    check $? "--idle-release-after $1 accepted: $(echo "$out" | head -1)"
}
for v in 0 5 86400; do accepted "$v"; done
out=$(timeout 10 "$ctrl" --idle-release-after=7 --log-level=nope 2>&1)
echo "$out" | head -1 | grep -qF -- "--log-level=nope"
check $? "--idle-release-after=7 (one argument) accepted"
out=$(timeout 10 "$ctrl" --idle-release-after 2>&1)
echo "$out" | head -1 | grep -qF -- "--idle-release-after needs a value"
check $? "--idle-release-after without a value: $(echo "$out" | head -1)"
"$ctrl" --help | grep -q -- "--idle-release-after SECONDS"
check $? "--help lists --idle-release-after"
grep -q -- '`--idle-release-after SECONDS`' "$KD_SRC/docs/controller.md"
check $? "docs/controller.md's flags table has --idle-release-after"
# --gang-scheduler / --gang-queue and their environment variables.
gang_refused() { # WANT ARGS...: exit 2, first line contains WANT
    local want=$1 out rc
    shift
    out=$(timeout 10 "$@" 2>&1)
    rc=$?
    [ $rc = 2 ] && echo "$out" | head -1 | grep -qF -- "$want"
    check $? "refused (rc $rc): $(echo "$out" | head -1)"
}
gang_refused "--gang-scheduler=yunikorn: expected builtin, volcano, kueue or auto" "$ctrl" --gang-scheduler yunikorn
gang_refused "--gang-queue=Bad_Queue: expected a queue name" "$ctrl" --gang-queue Bad_Queue
gang_refused "KDET_GANG_SCHEDULER=slurm: expected builtin" env KDET_GANG_SCHEDULER=slurm "$ctrl"
gang_refused "KDET_GANG_QUEUE=-q: expected a queue name" env KDET_GANG_QUEUE=-q "$ctrl"
for v in builtin volcano kueue auto; do
    out=$(timeout 10 "$ctrl" --gang-scheduler "$v" --gang-queue research --log-level nope 2>&1)
    echo "$out" | head -1 | grep -qF -- "--log-level=nope"
    check $? "--gang-scheduler $v accepted: $(echo "$out" | head -1)"
done
# The flag wins over a bad environment: start-up goes on to the (missing) kubeconfig.
out=$(KDET_GANG_SCHEDULER=bogus KDET_GANG_QUEUE=Bad timeout 10 "$ctrl" --gang-scheduler volcano \
    --gang-queue q --kubeconfig "/nonexistent/kubeconfig" 2>&1)
rc=$?
[ $rc = 1 ] && ! echo "$out" | grep -q KDET_GANG
check $? "the flags win over bad \$KDET_GANG_SCHEDULER/\$KDET_GANG_QUEUE (rc $rc)"
"$ctrl" --help | grep -q -- "--gang-scheduler NAME"
check $? "--help lists --gang-scheduler"
grep -q -- '`--gang-scheduler NAME`' "$KD_SRC/docs/controller.md"
check $? "docs/controller.md's flags table has --gang-scheduler"
# --trial-run-as-user: a non-root uid; --default-checkpoint-storage: a JSON
# object with a "type", read at start (exit 2 naming the file otherwise).
gang_refused "--trial-run-as-user=0: expected a non-root uid" "$ctrl" --trial-run-as-user 0
gang_refused "--trial-run-as-user=root: expected a non-root uid" "$ctrl" --trial-run-as-user root
tmpd=$(mktemp -d)
printf '{"bucket": "b"}' >"$tmpd/notype.json"
printf '{"type": ' >"$tmpd/broken.json"
gang_refused "--default-checkpoint-storage: $tmpd/notype.json: expected a checkpoint_storage object with a \"type\"" "$ctrl" --default-checkpoint-storage "$tmpd/notype.json"
gang_refused "--default-checkpoint-storage: $tmpd/broken.json:1:" "$ctrl" --default-checkpoint-storage "$tmpd/broken.json"
gang_refused "--default-checkpoint-storage: $tmpd/absent.json: No such file" "$ctrl" --default-checkpoint-storage "$tmpd/absent.json"
head -c 70000 /dev/zero | tr '\0' ' ' >"$tmpd/big.json"
gang_refused "--default-checkpoint-storage: $tmpd/big.json: larger than 64 KiB" "$ctrl" --default-checkpoint-storage "$tmpd/big.json"
rm -rf "$tmpd"
# The API's transport: HTTPS from a certificate and key, or plain HTTP when asked for and
# only on 127.0.0.1 (checked before any connection).
db="--database-url=host=/nonexistent"
gang_refused "needs --tls-cert-file and --tls-key-file, or --plain-http" "$ctrl" "$db"
gang_refused "--plain-http: the API listens on 0.0.0.0" "$ctrl" "$db" --plain-http --api-listen 0.0.0.0:8080
gang_refused "--plain-http: the API listens on 10.0.0.1" "$ctrl" --api-listen 10.0.0.1:8080 --plain-http=on
gang_refused "--tls-cert-file and --tls-key-file go together" "$ctrl" "$db" --tls-cert-file /x.crt
gang_refused "--plain-http and --tls-cert-file exclude each other" "$ctrl" "$db" --tls-cert-file /x.crt --tls-key-file /x.key --plain-http
gang_refused "--tls-ca-file needs --tls-cert-file" "$ctrl" --tls-ca-file /ca.crt
gang_refused "--plain-http=maybe: expected on or off" "$ctrl" --plain-http=maybe
out=$(timeout 10 "$ctrl" "$db" --plain-http --log-level nope 2>&1)
echo "$out" | head -1 | grep -qF -- "--log-level=nope"
check $? "--plain-http on 127.0.0.1 accepted: $(echo "$out" | head -1)"
"$ctrl" --help | grep -q -- "--tls-cert-file FILE"
check $? "--help lists --tls-cert-file"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
